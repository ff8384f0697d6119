#!/usr/bin/env python3
"""What Python's linter adds to a job's final run: the integrate run of a module (its cases,
coverage, complexity) with "lint" (pycodestyle and pyflakes in process) against the same run
without, alternating in one hardened python container (the host-side tests' settings,
sandbox-images/common/testlib.py), so that drift hits both alike.

    bench/lint_cost.py [N]

N runs of each (default 60). Needs Docker and codegen-sandbox-python:latest. Prints each
one's median wall time per run and the ratio.
"""
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sandbox-images", "common"))
import testlib  # noqa: E402

# A module of the size generation produces: two functions, a docstring each.
MODULE = '''def sieve(n: int) -> list[int]:
    """Return all primes <= n (sieve of Eratosthenes)."""
    if n < 2:
        return []
    flags = [True] * (n + 1)
    flags[0] = flags[1] = False
    for i in range(2, int(n ** 0.5) + 1):
        if flags[i]:
            for j in range(i * i, n + 1, i):
                flags[j] = False
    return [i for i, f in enumerate(flags) if f]


def sum_primes(n: int) -> int:
    """Return the sum of all primes <= n."""
    return sum(sieve(n))
'''
CASES = {name: {"cases": [{"inputs": [n], "expected_output": expected(n)} for n in (0, 1, 10, 30)]}
         for name, expected in (("sum_primes", lambda n: {0: 0, 1: 0, 10: 17, 30: 129}[n]),)}
HARNESS = {"mode": "integrate", "verdicts": CASES,
           "cases": {"sum_primes": [{"inputs": [n]} for n in (0, 1, 10, 30)],
                     "sieve": [{"inputs": [n]} for n in (0, 10)]},
           "case_timeout_ms": 5000}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    c = testlib.Container()
    assert c.recv()["type"] == "ready"
    times = {True: [], False: []}
    try:
        for i in range(2 * n + 4):
            lint = i % 2 == 0
            result, seconds = c.timed_run(MODULE, harness=dict(HARNESS, lint=lint))
            quality = result["harness"]["quality"]
            assert ("warnings" in quality) == lint, quality
            if i >= 4:  # the first of each warm the process's caches
                times[lint].append(seconds)
    finally:
        c.close()
    with_lint, without = (statistics.median(times[k]) * 1000 for k in (True, False))
    print(f"integrate run, {n} each: with lint {with_lint:.2f} ms, without {without:.2f} ms, "
          f"{with_lint / without:.2f}x (+{with_lint - without:.2f} ms)")


if __name__ == "__main__":
    main()
