#!/usr/bin/env python3
"""Writes a scripted (FAKE) model and a batch for the task-throughput benchmark: JOBS jobs of
WIDTH independent functions each, every function with its own name so that no job hits the
solution or the function-level cache, every answer at once (zero model latency).
Usage: tasks.py JOBS WIDTH SCRIPT.json REQUESTS.jsonl
"""
import json
import sys

jobs, width = int(sys.argv[1]), int(sys.argv[2])
answers, requests = [], []
for j in range(jobs):
    tag = f"bench job {j}:"
    names = [f"j{j}_f{k}" for k in range(width)]
    answers.append({"phase": "plan", "prompt_contains": tag, "answer": {"functions": [
        {"name": n, "purpose": f"return x plus {k + 1}", "inputs": [{"name": "x", "type": "int"}],
         "outputs": {"type": "int", "description": "the sum"}, "dependencies": [],
         "complexity": "simple"}
        for k, n in enumerate(names)
    ]}})
    for k, name in enumerate(names):
        answers.append({"phase": "tests", "function": name, "answer": {"cases": [
            {"name": "zero", "kind": "edge", "inputs": {"x": 0}, "expected_output": k + 1,
             "expected_error": None},
            {"name": "ten", "kind": "normal", "inputs": {"x": 10}, "expected_output": 11 + k,
             "expected_error": None},
        ]}})
        answers.append({"phase": "implement", "function": name, "answer": {
            "code": f'def {name}(x: int) -> int:\n    """Return x plus {k + 1}."""\n    return x + {k + 1}\n',
            "analysis": None,
        }})
    requests.append({"instruction": f"{tag} {width} functions that add constants"})
with open(sys.argv[3], "w", encoding="utf-8") as f:
    json.dump({"answers": answers}, f)
with open(sys.argv[4], "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in requests)
