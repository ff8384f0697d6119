"""Offline checks of the Helm chart (no cluster here): Helm's own lint (strict), rendering
with several value sets, every rendered Kubernetes object validated strictly against the
Kubernetes schemas (kubernetes-validate), and the properties an operator relies on.

    .cluster/deploy-venv/bin/python deploy/helm/check.py     (scripts/test makes the venv)

Not checked here: the KEDA and Prometheus-operator objects against their CRD schemas (not
bundled; their fields are asserted below), and anything only a live cluster shows.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parent / "codegen-cluster"
KUBE = "1.30.0"
BASE = {"image": {"tag": "0123456789abcdef"}, "worker": {"dind": {"image": {"tag": "fedcba9876543210"}}}}
CRDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor"}


def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render(values):
    chart = helm.Chart.load(CHART)
    manifests = chart.render(values, name="cg", namespace="codegen", is_install=True)
    objects = []
    for path, text in manifests.items():
        if path.endswith(".tpl") or not text.strip():
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects


def by_kind(objects, kind, name_suffix=""):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert found, f"no {kind} *{name_suffix}"
    return found[0]


def check(label, values):
    objects = render(values)
    for obj in objects:
        if obj["kind"] in CRDS:
            continue
        kubernetes_validate.validate(obj, KUBE, strict=True)
    kinds = sorted(o["kind"] for o in objects)
    worker = by_kind(objects, "Deployment", "-worker")
    spec = worker["spec"]["template"]["spec"]
    w = merge(helm.Chart.load(CHART).values, values)["worker"]
    grace = spec["terminationGracePeriodSeconds"]
    assert grace > w["drainTimeoutSeconds"] + w["taskDeadlineSeconds"], (label, grace)
    main = [c for c in spec["containers"] if c["name"] == "worker"][0]
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    if w["docker"] == "dind":
        sidecar = spec["initContainers"][0]
        assert sidecar["restartPolicy"] == "Always" and sidecar["securityContext"]["privileged"]
        assert "hostPath" not in volumes["docker-socket"], "dind must not touch the node's socket"
    else:
        assert volumes["docker-socket"]["hostPath"]["path"] == "/var/run/docker.sock"
    coordinator = by_kind(objects, "Deployment", "-coordinator")
    cspec = coordinator["spec"]["template"]["spec"]
    assert cspec["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Out of the Service within seconds of a silent dependency (docs/configuration.md).
    probe = cspec["containers"][0]["readinessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 2, probe
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
    keda = merge(helm.Chart.load(CHART).values, values)["keda"]
    if keda["enabled"]:
        scaled = by_kind(objects, "ScaledObject")
        assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
        queues = {t["metadata"]["queueName"] for t in scaled["spec"]["triggers"]}
        if keda["protocol"] == "http":
            # One regex per queue, matching the queue and every tenant's lane of it.
            import re
            assert len(queues) == 2, queues
            for queue in ("tasks", "executions"):
                pattern = next(q for q in queues if queue in q)
                for name in (f"codegen.{queue}", f"codegen.{queue}.tenant.acme"):
                    assert re.fullmatch(pattern, name), (pattern, name)
                assert not re.fullmatch(pattern, "codegen.tasks.dead"), pattern
            assert all(t["metadata"]["useRegex"] == "true" and t["metadata"]["operation"] == "sum"
                       for t in scaled["spec"]["triggers"])
        else:
            lanes = [""] + [f".tenant.{t}" for t in keda["tenants"]]
            expected = {f"codegen.{q}{lane}" for q in ("tasks", "executions") for lane in lanes}
            assert queues == expected, queues
        assert all(t["metadata"]["mode"] == "QueueLength" for t in scaled["spec"]["triggers"])
        assert "replicas" not in worker["spec"], "KEDA owns the replica count"
    print(f"{label}: {len(objects)} objects valid ({', '.join(kinds)})")


def main():
    report = helm.lint(str(CHART), BASE, strict=True, kube_version="v" + KUBE)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    assert not problems and not report.get("errors"), report
    print(f"helm lint (strict): {report.get('total_charts_linted')} chart, no warnings")
    check("defaults (dind, KEDA)", BASE)
    check("host socket, no KEDA", merge(BASE, {"worker": {"docker": "hostSocket"}, "keda": {"enabled": False}}))
    check("KEDA per tenant lane (amqp)", merge(BASE, {"keda": {"tenants": ["acme", "globex"]}}))
    check("KEDA over every lane (http)", merge(BASE, {"keda": {"protocol": "http"}}))
    check("API keys, registry", merge(BASE, {
        "secrets": {"apiKeys": {"acme": "k1", "globex": "k2"}, "modelApiKey": "m"},
        "worker": {"sandboxImages": {"registry": "registry.internal/codegen/"}},
    }))
    # A missing image tag is an error, not a manifest with ":".
    try:
        render({})
    except Exception as e:  # noqa: BLE001 - the SDK raises its own error type
        assert "image.tag is required" in str(e), e
    else:
        raise AssertionError("rendered without image.tag")
    print("without image.tag: refused with a clear error")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"helm chart check failed: {e}", file=sys.stderr)
        raise
