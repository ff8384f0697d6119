"""Offline checks of the Helm chart (no cluster here): Helm's own lint (strict), rendering
with several value sets, every rendered Kubernetes object validated strictly against the
Kubernetes schemas (kubernetes-validate), the properties an operator relies on, the values
schema (it must reject what the chart does not read), and the chart's copies of the alert
rules and the dashboard against their sources.

    .cluster/deploy-venv/bin/python deploy/helm/check.py          (scripts/test makes the venv)
    .cluster/deploy-venv/bin/python deploy/helm/check.py --sync   (refresh the chart's copies)

--sync copies deploy/prometheus/alerts.yml and deploy/grafana/codegen-cluster.json into the
chart (Helm reads no file outside it) and rewrites the Kubernetes definitions embedded in
values.schema.json from kubernetes-validate's; without it a difference is a failure.

Not checked here: the KEDA and Prometheus-operator objects against their CRD schemas (not
bundled; their fields are asserted below), whether a RuntimeClass or an engine runtime
actually confines anything, and anything else only a live cluster shows.
"""

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import schema_contents

CHART = Path(__file__).resolve().parent / "codegen-cluster"
ROOT = CHART.parents[2]
KUBE = "1.30.0"
BASE = {"image": {"tag": "0123456789abcdef"}, "worker": {"dind": {"image": {"tag": "fedcba9876543210"}}}}
CRDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}
# Helm reads no file outside the chart: these copies must stay byte for byte their sources.
ALERTS = ROOT / "deploy/prometheus/alerts.yml"
DASHBOARD = ROOT / "deploy/grafana/codegen-cluster.json"
COPIES = {
    CHART / "files/prometheus/alerts.yml": ALERTS,
    CHART / "files/grafana/codegen-cluster.json": DASHBOARD,
}
# The Kubernetes types values.schema.json takes whole; their definitions are Kubernetes',
# closed over their references.
K8S_TYPES = [f"io.k8s.api.core.v1.{t}" for t in (
    "Affinity", "Toleration", "TopologySpreadConstraint", "EnvVar", "EnvFromSource",
    "ResourceRequirements", "LocalObjectReference")]
JOBS = {"coordinator": "codegen-coordinator", "worker": "codegen-worker"}
PASSED = []


def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def defaults():
    return helm.Chart.load(CHART).values


def render(values):
    """The rendered objects and NOTES.txt."""
    chart = helm.Chart.load(CHART)
    manifests = chart.render(values, name="cg", namespace="codegen", is_install=True)
    objects, notes = [], None
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        if path.endswith(".tpl") or not text.strip():
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects, notes


def by_kind(objects, kind, name_suffix=""):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert found, f"no {kind} *{name_suffix}"
    return found[0]


@contextlib.contextmanager
def quiet():
    """Helm's Go side logs coalescing warnings to stderr for values of the wrong shape, which
    are what the schema checks feed it on purpose."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def refused(values, message):
    """Rendering `values` fails, saying `message`."""
    try:
        render(values)
    except Exception as e:  # noqa: BLE001 - the SDK raises its own error type
        assert message in str(e), e
    else:
        raise AssertionError(f"rendered, expected a refusal: {message}")


# --- copies and schema -----------------------------------------------------------------------

def k8s_definitions():
    defs = schema_contents(f"kubernetes-json-schema/v{KUBE}-local-strict/_definitions.json", KUBE)["$defs"]

    def clean(node, found):
        if isinstance(node, list):
            return [clean(n, found) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            if k == "description" or k.startswith("x-kubernetes-"):
                continue  # documentation and server-side hints: no validator reads them
            if k == "$ref":
                name = v.rsplit("/", 1)[-1]
                found.append(name)
                v = f"#/definitions/{name}"
            out[k] = clean(v, found)
        return out

    out, todo = {}, list(K8S_TYPES)
    while todo:
        name = todo.pop()
        if name not in out:
            out[name] = clean(defs[name], todo)
    return out


def check_copies(sync):
    schema_path = CHART / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    ours = {k: v for k, v in schema["definitions"].items() if not k.startswith("io.k8s.")}
    wanted = dict(sorted(k8s_definitions().items()))
    if sync:
        for copy, source in COPIES.items():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(source.read_bytes())
        schema["definitions"] = {**ours, **wanted}
        schema_path.write_text(json.dumps(schema, indent=2) + "\n")
        print("synced: the chart's copies of the alert rules and dashboard, the schema's Kubernetes definitions")
        return
    for copy, source in COPIES.items():
        assert copy.read_bytes() == source.read_bytes(), (
            f"{copy.relative_to(ROOT)} differs from {source.relative_to(ROOT)}: run check.py --sync")
    theirs = {k: v for k, v in schema["definitions"].items() if k.startswith("io.k8s.")}
    assert theirs == wanted, "values.schema.json's Kubernetes definitions are stale: run check.py --sync"
    PASSED.append("copies")
    print(f"copies: {len(COPIES)} files equal their sources; schema holds Kubernetes {KUBE}'s "
          f"{len(wanted)} definitions")


def schema_leaves(values, node, schema, path=""):
    """The leaf paths of `values` (a value the schema does not open up further), asserting
    that each key of `values` has a place in the schema and each property of the schema a
    default in `values` (config's sections apart: codegen.toml has more than values.yaml sets)."""
    ref = node.get("$ref", "")
    if ref.startswith("#/definitions/") and not ref.startswith("#/definitions/io.k8s."):
        node = schema["definitions"][ref.rsplit("/", 1)[-1]]
    if not isinstance(values, dict) or "properties" not in node:
        return [path]
    out = []
    for key, value in values.items():
        assert key in node["properties"], f"values.yaml's {path}{key} is not in values.schema.json"
        out += schema_leaves(value, node["properties"][key], schema, f"{path}{key}.")
    if path != "config.":
        missing = set(node["properties"]) - set(values)
        assert not missing, f"values.schema.json has {path}{missing} without a default in values.yaml"
    return out


def readme_rows():
    rows = {}
    for line in (CHART / "README.md").read_text().splitlines():
        m = re.match(r"^\| `([^`]+)` \| `(.*?)` \| .+ \|$", line)
        if m:
            assert m.group(1) not in rows, f"README lists {m.group(1)} twice"
            rows[m.group(1)] = yaml.safe_load(m.group(2))
    return rows


def lookup(values, path):
    for key in path.split("."):
        values = values[key]
    return values


def check_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    # Helm 3 validates with a draft-07 validator, Helm 4 with one that honours $schema: the
    # schema must hold as draft-07, and both validators must agree below.
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    draft7 = jsonschema.Draft7Validator(schema)
    chart = helm.Chart.load(CHART)

    # Every value where a reader looks for it: the schema, and the README with its default.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    leaves = [p.rstrip(".") for p in schema_leaves(values, schema, schema)]
    rows = readme_rows()
    for leaf in leaves:
        assert leaf in rows, f"README.md does not list {leaf}"
        default = lookup(values, leaf)
        assert rows[leaf] == default, f"README.md gives {leaf} the default {rows[leaf]!r}, values.yaml {default!r}"
    extra = set(rows) - set(leaves)
    assert not extra, f"README.md lists values the chart does not have: {extra}"

    # config: the sections codegen.toml has; sandbox languages: the ones the binary knows.
    example = tomllib.loads((ROOT / "deploy/codegen.example.toml").read_text())
    sections = set(schema["properties"]["config"]["properties"])
    assert sections == set(example), f"config sections {sections} != codegen.example.toml's {set(example)}"
    languages = set(example["sandbox"]["languages"].split(","))
    assert set(schema["definitions"]["language"]["enum"]) == languages, languages

    # What the schema must take, and what it must refuse (each with both validators).
    good = [BASE, everything()]
    for v in good:
        chart.validate_schema(v)
        errors = [e.message for e in draft7.iter_errors(merge(chart.values, v))]
        assert not errors, errors
    bad = {
        "an unknown top-level key": {"replicas": 3},
        "an unknown key in a section": {"worker": {"dind": {"privileged": False}}},
        "a misspelt scheduling key": {"worker": {"nodeSelecter": {"pool": "workers"}}},
        "an unknown key inside affinity": {"coordinator": {"affinity": {"nodeAffinty": {}}}},
        "an unknown key in a toleration": {"worker": {"tolerations": [{"key": "a", "operater": "Exists"}]}},
        "an unknown key in extraEnv": {"coordinator": {"extraEnv": [{"name": "A", "valu": "b"}]}},
        "an unknown config section": {"config": {"brokers": {"url": "amqp://x"}}},
        "a string for an integer": {"worker": {"concurrency": "64"}},
        "a number for a string": {"image": {"tag": 123}},
        "a string for a boolean": {"keda": {"enabled": "true"}},
        "a list for a map": {"worker": {"nodeSelector": ["pool=workers"]}},
        "a map for a list": {"imagePullSecrets": {"name": "regcred"}},
        "an unknown protocol": {"keda": {"protocol": "amqps"}},
        "an unknown language": {"worker": {"sandboxImages": {"languages": ["cobol"]}}},
        "a relative runtime path": {"worker": {"dind": {"runtimes": {"runsc": "runsc"}}}},
        "a page size past the API's": {"keda": {"pageSize": 1000}},
        "an invalid label key": {"grafanaDashboard": {"label": "grafana dashboard"}},
    }
    for label, v in bad.items():
        v = merge(BASE, v)
        with quiet():
            try:
                chart.validate_schema(v)
            except helm.HelmError:
                pass
            else:
                raise AssertionError(f"Helm's schema check took {label}: {v}")
            # And rendering, as an install does, refuses it before any template runs.
            refused(v, "don't meet the specifications of the schema")
        assert not draft7.is_valid(merge(chart.values, v)), f"draft-07 took {label}"
    PASSED.append("schema")
    print(f"values.schema.json: draft-07; {len(leaves)} values, each in the schema and in README.md "
          f"with its default; {len(good)} value sets taken, {len(bad)} refused "
          f"({', '.join(bad)})")


# --- rendering -------------------------------------------------------------------------------

def pod_of(objects, component):
    return by_kind(objects, "Deployment", f"-{component}")["spec"]["template"]


def check_scheduling(objects, v, component):
    template = pod_of(objects, component)
    spec = template["spec"]
    c = v[component]
    for key in ("nodeSelector", "tolerations", "affinity"):
        if c[key]:
            assert spec[key] == c[key], (component, key, spec.get(key))
        else:
            assert key not in spec, (component, key)
    if v["imagePullSecrets"]:
        assert spec["imagePullSecrets"] == v["imagePullSecrets"], spec.get("imagePullSecrets")
    else:
        assert "imagePullSecrets" not in spec
    spread = spec.get("topologySpreadConstraints", [])
    assert len(spread) == len(c["topologySpreadConstraints"]), spread
    for given, rendered in zip(c["topologySpreadConstraints"], spread):
        if "labelSelector" in given:
            assert rendered == given, rendered
        else:
            # Filled with the component's own labels: it selects exactly these pods.
            assert rendered["labelSelector"] == {"matchLabels": template["metadata"]["labels"]}, rendered
            assert {k: w for k, w in rendered.items() if k != "labelSelector"} == given
    main = [x for x in spec["containers"] if x["name"] == component][0]
    if c["extraEnv"]:
        assert main["env"][-len(c["extraEnv"]):] == c["extraEnv"], main["env"]
    if c["extraEnvFrom"]:
        assert main["envFrom"] == c["extraEnvFrom"], main.get("envFrom")
    else:
        assert "envFrom" not in main
    # Every container the pod runs has its resources (init and sidecar containers too).
    for container in spec["containers"] + spec.get("initContainers", []):
        assert container.get("resources", {}).get("requests"), (component, container["name"])


def check(label, values):
    objects, notes = render(values)
    for obj in objects:
        if obj["kind"] in CRDS:
            continue
        kubernetes_validate.validate(obj, KUBE, strict=True)
    kinds = sorted(o["kind"] for o in objects)
    v = merge(defaults(), values)
    worker = by_kind(objects, "Deployment", "-worker")
    spec = worker["spec"]["template"]["spec"]
    w = v["worker"]
    grace = spec["terminationGracePeriodSeconds"]
    assert grace > w["drainTimeoutSeconds"] + w["taskDeadlineSeconds"], (label, grace)
    main = [c for c in spec["containers"] if c["name"] == "worker"][0]
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["securityContext"]["runAsNonRoot"] is True
    volumes = {vol["name"]: vol for vol in spec["volumes"]}
    inits = {c["name"]: c for c in spec.get("initContainers", [])}
    if w["docker"] == "dind":
        sidecar = spec["initContainers"][0]
        assert sidecar["restartPolicy"] == "Always" and sidecar["securityContext"]["privileged"]
        assert "hostPath" not in volumes["docker-socket"], "dind must not touch the node's socket"
        args = sidecar["args"]
        for name, path in w["dind"]["runtimes"].items():
            assert f"--add-runtime={name}={path}" in args, args
        if w["dind"]["defaultRuntime"]:
            assert f"--default-runtime={w['dind']['defaultRuntime']}" in args, args
        else:
            assert not any(a.startswith("--default-runtime") for a in args), args
        if w["runtimeClassName"]:
            assert spec["runtimeClassName"] == w["runtimeClassName"], spec.get("runtimeClassName")
        else:
            assert "runtimeClassName" not in spec
        images = w["sandboxImages"]
        if images["registry"]:
            pull = inits["sandbox-images"]
            assert pull["resources"] == images["resources"], pull["resources"]
            mounted = {m["name"] for m in pull["volumeMounts"]}
            if images["pullSecret"]:
                assert volumes["sandbox-pull-secret"]["secret"] == {
                    "secretName": images["pullSecret"],
                    "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}
                assert "sandbox-pull-secret" in mounted
                assert {"name": "DOCKER_CONFIG", "value": "/var/run/sandbox-pull"} in pull["env"]
            else:
                assert "sandbox-pull-secret" not in volumes and "env" not in pull
        else:
            assert "sandbox-images" not in inits
    else:
        assert volumes["docker-socket"]["hostPath"]["path"] == "/var/run/docker.sock"
        assert "runtimeClassName" not in spec and not inits
    coordinator = by_kind(objects, "Deployment", "-coordinator")
    cspec = coordinator["spec"]["template"]["spec"]
    assert cspec["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Out of the Service within seconds of a silent dependency (docs/configuration.md).
    probe = cspec["containers"][0]["readinessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 2, probe
    for component in ("coordinator", "worker"):
        check_scheduling(objects, v, component)
    assert by_kind(objects, "PodDisruptionBudget", "-worker")["spec"]["maxUnavailable"] >= 1
    assert by_kind(objects, "PodDisruptionBudget", "-coordinator")["spec"]["minAvailable"] >= 1
    config = by_kind(objects, "ConfigMap", "-config")["data"]["codegen.toml"]
    assert "[broker]" in config and "rabbitmq-1" in config, config
    # The binary itself reads the rendered file (unknown keys are errors there).
    binary = os.environ.get("CODEGEN_BIN")
    if binary:
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(config)
            f.flush()
            out = subprocess.run([binary, "config", "--config", f.name], capture_output=True, text=True)
            assert out.returncode == 0, (label, out.stderr)
            assert "rabbitmq-2" in out.stdout, out.stdout
    check_keda(objects, v, worker, notes)
    check_monitoring(objects, v)
    assert f"svc/cg-codegen 8080:{v['coordinator']['service']['port']}" in notes, notes
    PASSED.append(label)
    print(f"{label}: {len(objects)} objects valid ({', '.join(kinds)})")


def check_keda(objects, v, worker, notes):
    keda = v["keda"]
    if not keda["enabled"]:
        assert not [o for o in objects if o["kind"] in ("ScaledObject", "TriggerAuthentication")]
        assert worker["spec"]["replicas"] == v["worker"]["replicas"]
        assert "KEDA is off" in notes
        return
    scaled = by_kind(objects, "ScaledObject")
    auth = by_kind(objects, "TriggerAuthentication")
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "host", "name": v["existingSecret"] or "cg-codegen-secrets", "key": "kedaRabbitmqHost"}]
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    triggers = scaled["spec"]["triggers"]
    for t in triggers:
        assert t["type"] == "rabbitmq" and t["authenticationRef"]["name"] == auth["metadata"]["name"]
        meta = t["metadata"]
        # KEDA reads trigger metadata as strings.
        assert all(isinstance(x, str) for x in meta.values()), meta
        assert meta["mode"] == "QueueLength" and meta["protocol"] == keda["protocol"], meta
        assert "excludeUnacknowledged" not in meta, "unacknowledged deliveries must count"
        assert meta.get("vhostName") == (keda["vhostName"] or None), meta
    queues = {t["metadata"]["queueName"]: t["metadata"] for t in triggers}
    prefix = keda["queuePrefix"]
    per = {"tasks": str(keda["tasksPerWorker"]), "executions": str(keda["executionsPerWorker"])}
    if keda["protocol"] == "http":
        # One regex per queue, matching the queue and every tenant's lane of it, nothing else.
        assert len(queues) == 2, queues
        for queue in ("tasks", "executions"):
            pattern, meta = next((q, m) for q, m in queues.items() if queue in q)
            assert meta["value"] == per[queue], meta
            assert meta["useRegex"] == "true" and meta["operation"] == "sum", meta
            assert meta["pageSize"] == str(keda["pageSize"]), meta
            for name in (f"{prefix}.{queue}", f"{prefix}.{queue}.tenant.acme"):
                assert re.fullmatch(pattern, name), (pattern, name)
            for name in (f"{prefix}.tasks.dead", f"{prefix}x{queue}", f"other.{queue}"):
                assert not re.fullmatch(pattern, name), (pattern, name)
        assert "management API" in notes, notes
    else:
        lanes = [""] + [f".tenant.{t}" for t in keda["tenants"]]
        expected = {f"{prefix}.{q}{lane}" for q in ("tasks", "executions") for lane in lanes}
        assert set(queues) == expected, queues
        for name, meta in queues.items():
            assert meta["value"] == per[name.split(".")[len(prefix.split("."))]], meta
            assert "useRegex" not in meta, meta
        assert "ready messages only" in notes, notes
    assert "replicas" not in worker["spec"], "KEDA owns the replica count"


def check_monitoring(objects, v):
    # The job names the alert rules select (the ServiceMonitor takes them from the Services).
    alerts = yaml.safe_load(ALERTS.read_text())
    down = next(r for g in alerts["groups"] for r in g["rules"] if r["alert"] == "CodegenProcessDown")
    job_regex = re.search(r'job=~"([^"]+)"', down["expr"]).group(1)
    for component, job in JOBS.items():
        service = by_kind(objects, "Service", "-worker" if component == "worker" else "-codegen")
        assert service["metadata"]["labels"]["codegen-cluster/job"] == job, service["metadata"]
        assert re.fullmatch(job_regex, job), (job_regex, job)
    if v["serviceMonitor"]["enabled"]:
        assert by_kind(objects, "ServiceMonitor")["spec"]["jobLabel"] == "codegen-cluster/job"
    rules = [o for o in objects if o["kind"] == "PrometheusRule"]
    if v["prometheusRule"]["enabled"]:
        (rule,) = rules
        assert rule["spec"] == alerts, "the PrometheusRule is not deploy/prometheus/alerts.yml"
        assert v["prometheusRule"]["labels"].items() <= rule["metadata"]["labels"].items()
    else:
        assert not rules
    dashboards = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    g = v["grafanaDashboard"]
    if g["enabled"]:
        (dashboard,) = dashboards
        source = json.loads(DASHBOARD.read_text())
        assert json.loads(dashboard["data"]["codegen-cluster.json"]) == source
        assert dashboard["metadata"]["labels"][g["label"]] == g["labelValue"], dashboard["metadata"]
        assert dashboard["metadata"]["namespace"] == (g["namespace"] or "codegen")
        assert dashboard["metadata"].get("annotations", {}) == g["annotations"]
    else:
        assert not dashboards


def scheduling(component):
    """Every scheduling and environment value of one component, set."""
    pool = {"key": "codegen/pool", "operator": "Equal", "value": component, "effect": "NoSchedule"}
    return {
        "nodeSelector": {"codegen/pool": component},
        "tolerations": [pool],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
                "matchLabels": {"app.kubernetes.io/component": component}}}}]}},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app.kubernetes.io/component": component}}},
        ],
        "extraEnvFrom": [{"secretRef": {"name": f"{component}-extra"}},
                         {"configMapRef": {"name": "proxy", "optional": True}}],
    }


WEBHOOK_ENV = [{"name": "CODEGEN__COORDINATOR__TENANTS__ACME__WEBHOOK_SECRET",
                "valueFrom": {"secretKeyRef": {"name": "acme-webhook", "key": "secret"}}}]


def everything(docker="dind"):
    """Every new value set at once (and the older ones that combine with them); with the
    host socket, all but the runtime settings, which the chart refuses there."""
    dind = docker == "dind"
    return merge(BASE, {
        "imagePullSecrets": [{"name": "regcred"}],
        "secrets": {"apiKeys": {"acme": "k1"}, "kedaRabbitmqHost": "http://keda:pw@rabbitmq:15672/"},
        "coordinator": {**scheduling("coordinator"), "extraEnv": WEBHOOK_ENV},
        "worker": {
            **scheduling("worker"),
            "extraEnv": [{"name": "RUST_BACKTRACE", "value": "1"}],
            "docker": docker,
            "runtimeClassName": "kata" if dind else "",
            "dind": {"runtimes": {"runsc": "/usr/local/bin/runsc"} if dind else {},
                     "defaultRuntime": "runsc" if dind else ""},
            "sandboxImages": {"registry": "registry.internal/codegen/", "pullSecret": "sandbox-pull"},
        },
        "keda": {"vhostName": "codegen", "pageSize": 500},
        "serviceMonitor": {"labels": {"release": "prometheus"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "codegen"},
                             "namespace": "monitoring"},
    })


def main():
    sync = "--sync" in sys.argv[1:]
    check_copies(sync)
    if sync:
        return
    for values in (BASE, everything()):
        report = helm.lint(str(CHART), values, strict=True, kube_version="v" + KUBE)
        problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
        assert not problems and not report.get("errors"), report
    PASSED.append("lint")
    print(f"helm lint (strict): {report.get('total_charts_linted')} chart, no warnings "
          "(defaults; every new value at once)")
    check_schema()
    check("defaults (dind, KEDA over http)", BASE)
    check("host socket, no KEDA", merge(BASE, {"worker": {"docker": "hostSocket"}, "keda": {"enabled": False}}))
    check("KEDA per tenant lane (amqp), vhost", merge(BASE, {
        "keda": {"protocol": "amqp", "tenants": ["acme", "globex"], "vhostName": "codegen"},
        "secrets": {"kedaRabbitmqHost": "amqp://keda:pw@rabbitmq:5672/"}}))
    check("KEDA over http, another prefix, page size", merge(BASE, {
        "keda": {"queuePrefix": "cg.prod", "pageSize": 250, "tasksPerWorker": 32, "executionsPerWorker": 4},
        "existingSecret": "codegen-secrets"}))
    check("API keys, registry", merge(BASE, {
        "secrets": {"apiKeys": {"acme": "k1", "globex": "k2"}, "modelApiKey": "m"},
        "worker": {"sandboxImages": {"registry": "registry.internal/codegen/"}},
    }))
    check("scheduling, pull secrets, extra env (each component)", merge(BASE, {
        "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}],
        "coordinator": {**scheduling("coordinator"), "extraEnv": WEBHOOK_ENV},
        "worker": scheduling("worker"),
    }))
    check("runtime class, engine runtimes, sandbox pull secret", merge(BASE, {
        "worker": {"runtimeClassName": "kata-qemu",
                   "dind": {"runtimes": {"runsc": "/usr/local/bin/runsc", "kata": "/opt/kata/bin/kata-runtime"},
                            "defaultRuntime": "runsc"},
                   "sandboxImages": {"registry": "registry.internal/codegen/", "pullSecret": "sandbox-pull",
                                     "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}}}))
    check("engine runtime only (no RuntimeClass)", merge(BASE, {
        "worker": {"dind": {"runtimes": {"runsc": "/usr/local/bin/runsc"}, "defaultRuntime": "runsc"}}}))
    check("PrometheusRule and Grafana dashboard", merge(BASE, {
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
        "grafanaDashboard": {"enabled": True, "label": "dashboards", "labelValue": "codegen"}}))
    check("everything at once", everything())
    check("everything, host socket, no KEDA", merge(everything("hostSocket"), {
        "keda": {"enabled": False}, "serviceMonitor": {"enabled": False}}))

    # What the chart refuses rather than renders wrong.
    host_socket = {"docker": "hostSocket"}
    refusals = {
        "without image.tag": ({}, "image.tag is required"),
        "a RuntimeClass with the host socket": (
            {"worker": {**host_socket, "runtimeClassName": "kata"}}, "need worker.docker=dind"),
        "an engine runtime with the host socket": (
            {"worker": {**host_socket, "dind": {"defaultRuntime": "runc"}}}, "need worker.docker=dind"),
        "a default runtime the engine lacks": (
            {"worker": {"dind": {"defaultRuntime": "runsc"}}}, "neither runc nor a key of worker.dind.runtimes"),
        "KEDA over http given an AMQP URL": (
            {"secrets": {"kedaRabbitmqHost": "amqp://u:p@rabbitmq:5672/"}}, "must be its http(s) URL"),
        "KEDA over AMQP given an http URL": (
            {"keda": {"protocol": "amqp"}, "secrets": {"kedaRabbitmqHost": "http://u:p@rabbitmq:15672/"}},
            "needs secrets.kedaRabbitmqHost to be an amqp(s) URL"),
    }
    for label, (values, message) in refusals.items():
        refused(merge(BASE, values) if values else values, message)
    PASSED.append("refusals")
    print(f"refused with a clear error: {', '.join(refusals)}")

    # NOTES.txt warns where an install cannot work as it stands.
    _, notes = render(BASE)
    assert "kedaRabbitmqHost is empty" in notes and "sandboxImages.registry is empty" in notes, notes
    _, notes = render(everything())
    assert "WARNING" not in notes and "RuntimeClass kata" in notes and "runtime runsc" in notes, notes
    PASSED.append("notes")
    print("NOTES.txt: the API's address, the Docker path, KEDA's counting, warnings only when due")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        print(f"helm chart check failed: {e}", file=sys.stderr)
        print(f"{len(PASSED)} passed, 1 failed")
        raise
    if "--sync" not in sys.argv[1:]:
        print(f"{len(PASSED)} passed, 0 failed")
