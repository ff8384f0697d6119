#!/usr/bin/env python3
"""Writes a scripted (FAKE) model for the DAG benchmark: six functions in a diamond,

    a -> (b, c, d) -> e -> f

every answer after a fixed latency, so the job's critical path is known: one plan call, then
four levels of two calls each (tests, implementation): 9 x latency of model time.
Usage: diamond.py LATENCY_MS OUT.json
"""
import json
import sys

latency = int(sys.argv[1])
deps = {"a": [], "b": ["a"], "c": ["a"], "d": ["a"], "e": ["b", "c", "d"], "f": ["e"]}
answers = [{
    "phase": "plan",
    "latency_ms": latency,
    "answer": {"functions": [
        {"name": n, "purpose": f"return x plus {i + 1}", "inputs": [{"name": "x", "type": "int"}],
         "outputs": {"type": "int", "description": "the sum"}, "dependencies": d,
         "complexity": "simple"}
        for i, (n, d) in enumerate(deps.items())
    ]},
}]
for i, name in enumerate(deps):
    answers.append({"phase": "tests", "function": name, "latency_ms": latency, "answer": {"cases": [
        {"name": "zero", "kind": "edge", "inputs": {"x": 0}, "expected_output": i + 1, "expected_error": None},
        {"name": "ten", "kind": "normal", "inputs": {"x": 10}, "expected_output": 11 + i, "expected_error": None},
    ]}})
    answers.append({"phase": "implement", "function": name, "latency_ms": latency, "answer": {
        "code": f'def {name}(x: int) -> int:\n    """Return x plus {i + 1}."""\n    return x + {i + 1}\n',
        "analysis": None,
    }})
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump({"answers": answers}, f, indent=1)
