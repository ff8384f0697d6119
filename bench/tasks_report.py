#!/usr/bin/env python3
"""Per-task timings from the workers' `task finished` log lines, for the jobs of RESULTS.jsonl
(every one must have succeeded): the queue wait (publication to start of work) and the handling
time minus the time the task spent in sandbox runs. With a zero-latency model that remainder is
orchestration: Redis reads and writes, prompt rendering, the loopback model round trip, events,
the ack. A second table splits the model's HTTP exchanges (request sent to answer decoded, on
loopback to the FAKE server) out of it, as the sandbox's runs are: the model server's own share
(its wake-up, its parsing) is then not counted as the cluster's orchestration.
A last line per job: its total (submission to result, the result's `total_ms`) minus every
task's sandbox and model time: the orchestration a job pays, including what passes between its
tasks (publishes, and on earlier versions the coordinators' hops), which no task's figure holds.
Usage: tasks_report.py RESULTS.jsonl WORKER.log...
"""
import json
import re
import sys

FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


jobs = set()
totals = {}
for line in open(sys.argv[1], encoding="utf-8"):
    result = json.loads(line)
    assert result["status"] == "succeeded", result.get("failure")
    jobs.add(result["job_id"])
    totals[result["job_id"]] = result["metrics"]["total_ms"]
spent = {job: 0.0 for job in jobs}

rows = {"plan": [], "implement": [], "integrate": []}
for path in sys.argv[2:]:
    for line in open(path, encoding="utf-8", errors="replace"):
        if "task finished" not in line:
            continue
        f = {k: v.strip('"') for k, v in FIELD.findall(line)}
        if f.get("job") not in jobs:
            continue
        queue, run, sandbox = (int(f[k]) / 1000 for k in ("queue_us", "run_us", "sandbox_us"))
        model = int(f.get("model_us", 0)) / 1000
        spent[f["job"]] += sandbox + model
        rows[f["kind"]].append(
            (queue, run - sandbox, queue + run - sandbox, model, queue + run - sandbox - model)
        )
rows["every task"] = [r for kind in ("plan", "implement", "integrate") for r in rows[kind]]


def table(columns):
    """One row per task kind: p50/p99 of each (title, width, index into a row) in `columns`."""
    print(f"{'task kind':12s} {'n':>5s}" + "".join(f"  {t:>{w}s}" for t, w, _ in columns))
    for kind in ("plan", "implement", "integrate", "every task"):
        values = rows[kind]
        if not values:
            continue
        cells = []
        for _, w, i in columns:
            column = [v[i] for v in values]
            cells.append(f"  {f'{pct(column, 50):.2f} / {pct(column, 99):.2f} ms':>{w}s}")
        print(f"{kind:12s} {len(values):5d}" + "".join(cells))


table([("queue wait p50/p99", 20, 0), ("handling - sandbox p50/p99", 28, 1), ("overhead p50/p99", 18, 2)])
table([("model exchanges p50/p99", 24, 3), ("overhead - model p50/p99", 26, 4)])
per_job = [totals[job] - spent[job] for job in jobs]
print(f"per job (total - sandbox - model), {len(per_job)} jobs: p50 {pct(per_job, 50):.2f} ms, "
      f"p99 {pct(per_job, 99):.2f} ms")
