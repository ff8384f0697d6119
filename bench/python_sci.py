#!/usr/bin/env python3
"""What `import numpy` (and the rest of python-sci's packages) costs one run, with the
packages preloaded in the zygote (the image's language.json) and without (the same image and
runner, language.json's "preload" removed), in hardened containers with the host-side tests'
settings (sandbox-images/common/testlib.py), alternating ROUNDS times.

    bench/python_sci.py [N] [ROUNDS]      (default 30 runs per measurement, 3 rounds)

Reports the median wall time per run (request sent to result received) of:
  `import numpy`                                  numpy alone
  `import numpy, scipy.optimize, pandas, sympy`   what a DS-1000-style program starts with
Needs Docker and codegen-sandbox-python-sci:latest (sandbox-images/build python-sci).
"""
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sandbox-images", "common"))
import testlib  # noqa: E402

PROGRAMS = {
    "import numpy": "import numpy\n",
    "import numpy, scipy.optimize, pandas, sympy": "import numpy, scipy.optimize, pandas, sympy\n",
}
# A preloading zygote holds ~110 MiB more than the plain runner: room for it.
HARDENING = [a.replace("256m", "512m") for a in testlib.HARDENING]


def measure(language_json, n):
    original = testlib.working_tree_mounts

    def mounts(language):
        m = original(language)
        return [a if not a.endswith(":/opt/codegen/language.json:ro")
                else "%s:/opt/codegen/language.json:ro" % language_json for a in m]

    testlib.working_tree_mounts = mounts
    try:
        container = testlib.Container("python-sci", hardening=HARDENING)
    finally:
        testlib.working_tree_mounts = original
    try:
        assert container.recv()["type"] == "ready"
        out = {}
        for what, code in PROGRAMS.items():
            times = []
            for _ in range(n):
                result, seconds = container.timed_run(code, timeout_ms=60000)
                assert result["exit_code"] == 0, result
                times.append(seconds * 1000)
            out[what] = statistics.median(times)
        return out
    finally:
        container.close()


def main(argv):
    n = int(argv[0]) if argv else 30
    rounds = int(argv[1]) if len(argv) > 1 else 3
    folder = os.path.join(ROOT, "sandbox-images", "python-sci")
    with open(os.path.join(folder, "language.json")) as f:
        config = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        preloaded = os.path.join(folder, "language.json")
        plain = os.path.join(tmp, "language.json")
        with open(plain, "w") as f:
            json.dump({k: v for k, v in config.items() if k != "preload"}, f)
        results = {"without preload": [], "preloaded": []}
        for _ in range(rounds):
            results["without preload"].append(measure(plain, n))
            results["preloaded"].append(measure(preloaded, n))
    print("median ms per run over %d rounds of %d runs (request sent to result received)"
          % (rounds, n))
    for what in PROGRAMS:
        before = statistics.median(r[what] for r in results["without preload"])
        after = statistics.median(r[what] for r in results["preloaded"])
        print("  %-45s without preload %7.1f  preloaded %5.1f  ratio %.3f"
              % (what, before, after, after / before))


if __name__ == "__main__":
    main(sys.argv[1:])
