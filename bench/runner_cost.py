#!/usr/bin/env python3
"""What one run costs the runner: container CPU (its cgroup's cpuacct.usage) and wall time per
run of a trivial program and of a cases run, in one hardened python container (the host-side
tests' settings, sandbox-images/common/testlib.py), for two versions of runner.py side by
side, alternating ROUNDS times so that drift hits both alike.

    bench/runner_cost.py [REV_A] [REV_B] [N] [ROUNDS]

REV_A/REV_B: git revisions whose sandbox-images/common/runner.py is mounted over the image's
(default HEAD~1 and the working tree, "."); N runs per measurement (default 300), ROUNDS
alternations (default 3). Needs Docker and codegen-sandbox-python:latest.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sandbox-images", "common"))
import testlib  # noqa: E402

CASES = {"mode": "cases", "function": "add",
         "cases": [{"inputs": [i, i + 1], "expected_output": 2 * i + 1} for i in range(8)]}
CASES_CODE = "def add(a, b):\n    return a + b\n"


def runner_file(rev, folder):
    if rev == ".":
        return os.path.join(ROOT, "sandbox-images", "common", "runner.py")
    path = os.path.join(folder, "runner-%s.py" % rev.replace("/", "_").replace("~", "-"))
    with open(path, "wb") as f:
        f.write(subprocess.check_output(
            ["git", "-C", ROOT, "show", "%s:sandbox-images/common/runner.py" % rev]))
    return path


def measure(runner, n):
    original = testlib.working_tree_mounts

    def mounts(language):
        m = original(language)
        m[1] = "%s:/opt/codegen/runner.py:ro" % runner
        return m

    testlib.working_tree_mounts = mounts
    with tempfile.TemporaryDirectory() as folder:
        cidfile = os.path.join(folder, "cid")
        container = testlib.Container("python", extra=("--cidfile", cidfile))
        try:
            assert container.recv()["type"] == "ready"
            cid = open(cidfile).read().strip()
            usage_path = "/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage" % cid

            def usage():
                with open(usage_path) as f:
                    return int(f.read())

            out = {}
            for kind in ("trivial", "cases"):
                def one():
                    if kind == "trivial":
                        return container.run("print(1)")
                    return container.run(CASES_CODE, harness=dict(CASES, code=CASES_CODE))
                for _ in range(20):
                    one()
                u0, t0 = usage(), time.perf_counter()
                for _ in range(n):
                    result = one()
                    assert result["exit_code"] == 0, result
                out[kind] = ((usage() - u0) / n / 1e6, (time.perf_counter() - t0) / n * 1e3)
            return out
        finally:
            container.close()
            testlib.working_tree_mounts = original


def main():
    rev_a = sys.argv[1] if len(sys.argv) > 1 else "HEAD~1"
    rev_b = sys.argv[2] if len(sys.argv) > 2 else "."
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    with tempfile.TemporaryDirectory() as folder:
        runners = {rev_a: runner_file(rev_a, folder), rev_b: runner_file(rev_b, folder)}
        got = {rev: [] for rev in runners}
        for _ in range(rounds):
            for rev, path in runners.items():
                got[rev].append(measure(path, n))
    print("runs per measurement: %d; rounds: %d (median shown)" % (n, rounds))
    print("%-12s %22s %22s" % ("runner", "trivial cpu / wall ms", "cases cpu / wall ms"))
    medians = {}
    for rev, rows in got.items():
        medians[rev] = {k: tuple(statistics.median(r[k][i] for r in rows) for i in (0, 1))
                        for k in ("trivial", "cases")}
        m = medians[rev]
        print("%-12s %12.2f / %-8.2f %12.2f / %-8.2f" % (
            rev, m["trivial"][0], m["trivial"][1], m["cases"][0], m["cases"][1]))
    a, b = medians[rev_a], medians[rev_b]
    print("ratio %s / %s: trivial cpu %.2f wall %.2f; cases cpu %.2f wall %.2f" % (
        rev_b, rev_a, b["trivial"][0] / a["trivial"][0], b["trivial"][1] / a["trivial"][1],
        b["cases"][0] / a["cases"][0], b["cases"][1] / a["cases"][1]))


if __name__ == "__main__":
    main()
