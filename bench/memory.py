"""The memory of repairs, off against on, against a scripted FAKE model (BENCHMARKS.md).

   memory.py script FILE N          writes the model's script for N functions
   memory.py run URL N MEMORY OUT   submits the N jobs one after another (memory on|off),
                                    appends one JSON line per job to OUT

Each of the N functions (`f0` ... `f{N-1}`, each its own job, a stub with one doctest) is
first written with the same mistake class: a range that stops one short of `n`. A repair is
right at once only when its prompt holds the fix of an earlier one (`+ 1)` from a lesson's
diff); without it, the first repair is wrong another way and the second right. So with the
memory off every function needs two repairs; with it on, the first function needs two and
leaves the lesson, and each later one should need one. Counted per job: repairs, model calls,
prompt tokens (the FAKE's: prompt characters / 4)."""

from __future__ import annotations

import json
import sys
import time
import urllib.request

EVIDENCE = "+ 1)"


def stub(k: int) -> str:
    return (
        f"def f{k}(n: int) -> list:\n"
        f'    """ The multiples of {k + 1} from {k + 1} times 1 to {k + 1} times n.\n'
        f"    >>> f{k}(3)\n"
        f"    {[(k + 1) * i for i in range(1, 4)]}\n"
        f'    """\n'
    )


def code(k: int, body: str) -> str:
    return f"```python\ndef f{k}(n: int) -> list:\n    return {body}\n```\n"


def script(n: int) -> dict:
    answers = []
    for k in range(n):
        m = k + 1
        answers += [
            {"phase": "implement", "function": f"f{k}",
             "text": code(k, f"[{m} * i for i in range(1, n)]")},
            {"phase": "repair", "function": f"f{k}", "prompt_contains": EVIDENCE,
             "text": code(k, f"[{m} * i for i in range(1, n + 1)]")},
            {"phase": "repair", "function": f"f{k}",
             "text": code(k, f"[{m} * i for i in range(0, n)]")},
            {"phase": "repair", "function": f"f{k}",
             "text": code(k, f"[{m} * i for i in range(1, n + 1)]")},
        ]
    return {"answers": answers}


def call(url: str, method: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def run(url: str, n: int, memory: str, out: str) -> None:
    with open(out, "a") as sink:
        for k in range(n):
            job = {"instruction": stub(k), "language": "python", "max_iterations": 4,
                   "memory": memory}
            accepted = call(url, "POST", "/v1/jobs", job)
            job_id = accepted["job_id"]
            deadline = time.monotonic() + 600
            while True:
                result = call(url, "GET", f"/v1/jobs/{job_id}")
                if result.get("status") in ("succeeded", "failed", "cancelled"):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job_id} did not end")
                time.sleep(0.2)
            history = result.get("improvement_history", [])
            metrics = result["metrics"]
            row = {
                "memory": memory, "function": f"f{k}", "status": result["status"],
                "repairs": len(history),
                "lessons_shown": sum(len(h.get("lessons", [])) for h in history),
                "model_calls": metrics["model_calls"],
                "prompt_tokens": metrics["tokens"]["prompt"],
                "completion_tokens": metrics["tokens"]["completion"],
            }
            sink.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "script":
        with open(sys.argv[2], "w") as f:
            json.dump(script(int(sys.argv[3])), f)
    else:
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
