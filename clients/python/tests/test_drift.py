"""The client against the server's OpenAPI document: the committed copy (always) and the live
one (when a coordinator answers). A field, error code or route added on the server fails
these until the client is updated (then refresh the copy, see README)."""

from __future__ import annotations

import copy

import httpx
import pytest
from conftest import URL, cluster_ready

from codegen_client import ERROR_CODES, drift, models


def _live() -> dict:
    if not cluster_ready():
        pytest.skip(f"no ready coordinator at {URL}")
    return httpx.get(f"{URL}/openapi.json", timeout=10).json()


@pytest.mark.parametrize("source", ["snapshot", "live"])
def test_models_match_the_schemas(source, snapshot):
    doc = snapshot if source == "snapshot" else _live()
    assert drift.check_models(doc) == []


@pytest.mark.parametrize("source", ["snapshot", "live"])
def test_every_error_code_has_its_exception(source, snapshot):
    doc = snapshot if source == "snapshot" else _live()
    assert drift.check_error_codes(doc) == []
    assert set(ERROR_CODES) == set(doc["components"]["schemas"]["ErrorCode"]["enum"])


@pytest.mark.parametrize("source", ["snapshot", "live"])
def test_routes_unions_and_enums(source, snapshot):
    doc = snapshot if source == "snapshot" else _live()
    assert drift.check_routes(doc) == []
    assert drift.check_unions_and_enums(doc) == []


def test_every_model_is_checked():
    named = {
        cls
        for cls in vars(models).values()
        if isinstance(cls, type)
        and not cls.__name__.startswith("_")
        and getattr(cls, "schema_name", None)
        and cls.__module__ == models.__name__
    }
    assert named <= set(models.SCHEMA_MODELS)


# The check itself: each kind of server change is caught.


def test_a_new_answer_field_is_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    result = doc["components"]["schemas"]["ExecutionResult"]
    result["properties"]["energy_mj"] = {"type": "integer"}
    result["required"].append("energy_mj")
    problems = drift.check(doc)
    # ExecutionResult and every view that holds a verdict (through Outcome's oneOf).
    assert any("ExecutionResult" in p and "energy_mj" in p for p in problems), problems
    # Required in one variant of Outcome only: optional in the views, still a missing field.
    for view in ("ExecutionView", "BatchItemView", "StreamedItemView"):
        assert any(p.startswith(view) and "'energy_mj' is missing" in p for p in problems), problems


def test_a_new_request_field_is_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    doc["components"]["schemas"]["JobSubmission"]["properties"]["priority"] = {"type": "integer"}
    assert drift.check_models(doc) == [
        "JobSubmission (JobSubmission): the server's field 'priority' is missing from the model"
    ]


def test_a_removed_field_and_a_changed_requirement_are_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    view = doc["components"]["schemas"]["SessionView"]
    del view["properties"]["cells"]
    view["required"].remove("cells")
    view["required"].append("ended_reason")
    problems = drift.check_models(doc)
    assert "SessionView (SessionView): the model's field 'cells' is not in the schema" in problems
    assert (
        "SessionView (SessionView): 'ended_reason' is required by the schema, optional in the model"
        in problems
    )


def test_a_new_progress_event_field_is_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    for variant in doc["components"]["schemas"]["Progress"]["oneOf"]:
        if variant["properties"]["event"]["enum"] == ["finished"]:
            variant["properties"]["duration_ms"] = {"type": "integer"}
    problems = drift.check_models(doc)
    assert problems == [
        "ProgressFinished (Progress/finished): the server's field 'duration_ms' is missing from the model"
    ]


def test_a_new_agent_step_field_and_a_new_kind_are_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    steps = doc["components"]["schemas"]["AgentStep"]["oneOf"]
    for variant in steps:
        if variant["properties"]["kind"]["enum"] == ["observation"]:
            variant["properties"]["exit_code"] = {"type": "integer"}
    steps.append(
        {
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["plan"]}},
            "required": ["kind"],
        }
    )
    assert drift.check_models(doc) == [
        "AgentStepObservation (AgentStep/observation): the server's field 'exit_code' is "
        "missing from the model"
    ]
    assert drift.check_unions_and_enums(doc) == [
        "AgentStep: the server's kind values ['model', 'observation', 'plan', 'start'], "
        "the client's models ['model', 'observation', 'start']"
    ]


def test_a_new_progress_event_and_a_new_agent_end_are_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    doc["components"]["schemas"]["Progress"]["oneOf"].append(
        {
            "type": "object",
            "properties": {"event": {"type": "string", "enum": ["paused"]}},
            "required": ["event"],
        }
    )
    doc["components"]["schemas"]["AgentEnd"]["enum"].append("bored")
    problems = drift.check_unions_and_enums(doc)
    assert len(problems) == 2, problems
    assert problems[0].startswith("Progress: the server's event values"), problems
    assert "'paused'" in problems[0]
    assert problems[1].startswith("AgentEnd:") and "'bored'" in problems[1]


def test_a_new_error_code_is_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    doc["components"]["schemas"]["ErrorCode"]["enum"].append("too_many_cooks")
    assert drift.check_error_codes(doc) == ["error code 'too_many_cooks' has no exception class"]


def test_a_new_idempotent_route_and_a_new_status_are_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    doc["paths"]["/v1/sessions"]["post"]["parameters"] = [
        {"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"}}
    ]
    doc["components"]["schemas"]["JobStatus"]["enum"].append("paused")
    assert drift.check_routes(doc) == [
        "POST /v1/sessions takes an Idempotency-Key the client does not send"
    ]
    assert drift.check_unions_and_enums(doc) != []


def test_a_new_route_is_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    doc["paths"]["/v1/batches/{id}/archive"] = {"get": {"responses": {}}}
    assert drift.check_routes(doc) == [
        "GET /v1/batches/{id}/archive: a route of the document the client does not cover"
    ]


def test_a_new_member_of_a_batch_result_is_caught(snapshot):
    doc = copy.deepcopy(snapshot)
    doc["components"]["schemas"]["BatchResult"]["oneOf"].append(
        {"$ref": "#/components/schemas/JobAccepted"}
    )
    doc["components"]["schemas"]["ExpiredStatus"]["enum"].append("purged")
    problems = drift.check_unions_and_enums(doc)
    assert len(problems) == 2 and problems[0].startswith("BatchResult: members"), problems
    assert problems[1].startswith("ExpiredStatus:"), problems
