"""Checks this client against a server's OpenAPI document (``GET /openapi.json``).

``check(document)`` lists every way the client and the document disagree:

* each model of ``models.SCHEMA_MODELS`` against the schema it names: the same property
  names, and a field required in the model exactly when the schema requires it (``allOf``
  parts are merged; for a ``oneOf``/``anyOf`` a property is required when every variant
  requires it, as for an execution's verdict, whose fields are absent while it is queued);
* the unions the client reads by their members (``JobView``: ``JobResult`` or
  ``JobProgress``), the tagged unions it reads a model per variant of (``Progress`` by
  ``event``, ``AgentStep`` by ``kind``: the same tag values on both sides), and the
  enumerations it lists (``JOB_STATUSES``, ``EXECUTION_VERDICTS``, ``AGENT_ENDS``...);
* the error codes: every value of the ``ErrorCode`` enum has its exception class, with the
  status the schema's description gives it, and no class stands for a code the server lacks;
* the routes: every route the client calls is in the document, every route of the document
  is covered (but SandboxFusion's and the operations endpoints), and it sends an
  ``Idempotency-Key`` on exactly the operations whose document takes one.

``python -m codegen_client.drift [URL]`` prints them for a running coordinator (exit 1 when
any).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from . import _base
from .errors import ERROR_CODES
from .models import ENUM_SCHEMAS, SCHEMA_MODELS, TAGGED_UNIONS, UNION_SCHEMAS

__all__ = [
    "check",
    "check_error_codes",
    "check_models",
    "check_routes",
    "check_unions_and_enums",
    "schema_fields",
]


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/components/schemas/"):
            raise ValueError(f"unsupported $ref {ref}")
        schema = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
        seen += 1
        if seen > 50:
            raise ValueError(f"$ref loop at {ref}")
    return schema


def _is_null(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null"


def schema_fields(doc: dict[str, Any], schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The property names of an object schema and the required ones (``allOf`` merged,
    ``oneOf``/``anyOf``: every variant's properties, required when every variant requires)."""
    schema = _resolve(doc, schema)
    names = set(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        n, r = schema_fields(doc, part)
        names |= n
        required |= r
    for key in ("oneOf", "anyOf"):
        variants = [v for v in schema.get(key, []) if not _is_null(_resolve(doc, v))]
        if not variants:
            continue
        fields = [schema_fields(doc, v) for v in variants]
        names |= set().union(*(n for n, _ in fields))
        common = set.intersection(*(r for _, r in fields))
        required |= common
    return names, required


def _tag_values(doc: dict[str, Any], member: dict[str, Any], tag: str) -> list[Any]:
    """The values the tag field ``tag`` of a tagged ``oneOf``'s member takes."""
    prop = _resolve(doc, member).get("properties", {}).get(tag, {})
    return prop.get("enum") or ([prop["const"]] if "const" in prop else [])


def _variant(
    doc: dict[str, Any], schema: dict[str, Any], value: str, tag: str = "event"
) -> dict[str, Any] | None:
    """The member of a ``oneOf`` tagged by ``tag`` whose tag is ``value``."""
    for member in _resolve(doc, schema).get("oneOf", []):
        if _tag_values(doc, member, tag) == [value]:
            return _resolve(doc, member)
    return None


def _model_fields(model: type[BaseModel]) -> tuple[set[str], set[str]]:
    names: set[str] = set()
    required: set[str] = set()
    for name, info in model.model_fields.items():
        wire = info.alias or name
        names.add(wire)
        if info.is_required():
            required.add(wire)
    return names, required


def check_models(
    doc: dict[str, Any], models: Iterable[type[BaseModel]] = SCHEMA_MODELS
) -> list[str]:
    problems: list[str] = []
    schemas = doc.get("components", {}).get("schemas", {})
    for model in models:
        name = getattr(model, "schema_name", None)
        variant = getattr(model, "schema_variant", None)
        label = f"{model.__name__} ({name}{'/' + variant if variant else ''})"
        if name not in schemas:
            problems.append(f"{label}: the document has no schema {name}")
            continue
        schema: dict[str, Any] = schemas[name]
        if variant is not None:
            member = _variant(doc, schemas[name], variant, getattr(model, "schema_tag", "event"))
            if member is None:
                problems.append(f"{label}: the document's {name} has no variant {variant!r}")
                continue
            schema = member
        server_names, server_required = schema_fields(doc, schema)
        client_names, client_required = _model_fields(model)
        for field in sorted(server_names - client_names):
            problems.append(f"{label}: the server's field {field!r} is missing from the model")
        for field in sorted(client_names - server_names):
            problems.append(f"{label}: the model's field {field!r} is not in the schema")
        for field in sorted((server_required - client_required) & client_names):
            problems.append(f"{label}: {field!r} is required by the schema, optional in the model")
        for field in sorted((client_required - server_required) & server_names):
            problems.append(f"{label}: {field!r} is required by the model, optional in the schema")
    return problems


def check_unions_and_enums(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    schemas = doc.get("components", {}).get("schemas", {})
    for name, members in UNION_SCHEMAS.items():
        if name not in schemas:
            problems.append(f"the document has no schema {name}")
            continue
        refs = {
            v["$ref"].rsplit("/", 1)[1]
            for v in schemas[name].get("oneOf", []) + schemas[name].get("anyOf", [])
            if "$ref" in v
        }
        if refs != set(members):
            problems.append(f"{name}: members {sorted(refs)}, the client reads {sorted(members)}")
    for name, (tag, variants) in TAGGED_UNIONS.items():
        if name not in schemas:
            problems.append(f"the document has no schema {name}")
            continue
        server = {
            value
            for member in schemas[name].get("oneOf", [])
            for value in _tag_values(doc, member, tag)
        }
        client = {getattr(cls, "schema_variant", None) for cls in variants}
        if server != client:
            problems.append(
                f"{name}: the server's {tag} values {sorted(server)}, "
                f"the client's models {sorted(client)}"
            )
    for name, values in ENUM_SCHEMAS.items():
        server = schemas.get(name, {}).get("enum")
        if server is None:
            problems.append(f"the document has no enum {name}")
        elif set(server) != set(values):
            problems.append(
                f"{name}: the server's values {sorted(server)}, the client's {sorted(values)}"
            )
    return problems


_CODE_LINE = re.compile(r"^- `([a-z_]+)` \((\d{3})\)", re.MULTILINE)


def check_error_codes(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    schema = doc.get("components", {}).get("schemas", {}).get("ErrorCode")
    if schema is None:
        return ["the document has no ErrorCode schema"]
    codes = set(schema.get("enum", []))
    for code in sorted(codes - set(ERROR_CODES)):
        problems.append(f"error code {code!r} has no exception class")
    for code in sorted(set(ERROR_CODES) - codes):
        problems.append(
            f"exception class {ERROR_CODES[code].__name__} stands for {code!r}, not a server code"
        )
    statuses = {
        code: int(status) for code, status in _CODE_LINE.findall(schema.get("description", ""))
    }
    for code, status in sorted(statuses.items()):
        cls = ERROR_CODES.get(code)
        if cls is not None and cls.http_status != status:
            problems.append(
                f"{cls.__name__}: status {cls.http_status}, the server's {code} is {status}"
            )
    return problems


def check_routes(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    paths = doc.get("paths", {})
    for method, path in _base.ROUTES:
        if method.lower() not in paths.get(path, {}):
            problems.append(f"{method} {path}: not in the document")
    keyed = set()
    for path, item in paths.items():
        for method, operation in item.items():
            if not isinstance(operation, dict):
                continue
            names = {
                p.get("name", "").lower()
                for p in operation.get("parameters", [])
                if p.get("in") == "header"
            }
            if "idempotency-key" in names:
                keyed.add((method.upper(), path))
    served = {
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in ("get", "post", "put", "delete", "patch")
    }
    for method, path in sorted(served - set(_base.ROUTES) - set(_base.NOT_COVERED)):
        problems.append(f"{method} {path}: a route of the document the client does not cover")
    sent = set(_base.IDEMPOTENT_CREATES)
    for method, path in sorted(keyed - sent):
        if (method, path) in set(_base.ROUTES):
            problems.append(f"{method} {path} takes an Idempotency-Key the client does not send")
    for method, path in sorted(sent - keyed):
        problems.append(
            f"{method} {path}: the client sends an Idempotency-Key the document does not take"
        )
    return problems


def check(doc: dict[str, Any]) -> list[str]:
    """Every disagreement between this client and the document (empty: none)."""
    return (
        check_models(doc) + check_unions_and_enums(doc) + check_error_codes(doc) + check_routes(doc)
    )


def main(argv: list[str] | None = None) -> int:
    from .client import Client

    args = sys.argv[1:] if argv is None else argv
    with Client(args[0] if args else None) as client:
        problems = check(client.openapi())
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems against {client.base_url}/openapi.json")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
