#!/usr/bin/env python3
"""Writes a scripted (FAKE) model for the per-language generation benchmark: in every language
that generates, a job of four independent functions f1..f4 (`x plus i`, three cases each),
every answer after a fixed latency. With the functions in parallel the job's model-bound floor
is three calls: the plan, then each function's tests and implementation.
Answers are picked by the prompt's language ("Language: go" in the plan, "senior go engineer"
in the others). Usage: languages_gen.py LATENCY_MS OUT.json
"""
import json
import sys

latency = int(sys.argv[1])
FUNCTIONS = 4

# language: (integer type, the code of f<i>)
CODE = {
    "python": ("int", 'def f{i}(x: int) -> int:\n    """Return x plus {i}."""\n    return x + {i}\n'),
    "python-sci": ("int", 'import numpy as np\n\n\ndef f{i}(x: int) -> int:\n    """Return x plus {i}."""\n    return int(np.int64(x) + {i})\n'),
    "javascript": ("number", "/** Return x plus {i}. */\nfunction f{i}(x) {{\n  return x + {i};\n}}\n"),
    "typescript": ("number", "/** Return x plus {i}. */\nfunction f{i}(x: number): number {{\n  return x + {i};\n}}\n"),
    "go": ("int", "// f{i} returns x plus {i}.\nfunc f{i}(x int) int {{\n\treturn x + {i}\n}}\n"),
    "rust": ("i64", "/// Return x plus {i}.\nfn f{i}(x: i64) -> i64 {{\n    x + {i}\n}}\n"),
    "java": ("int", "/** Return x plus {i}. */\npublic static int f{i}(int x) {{\n    return x + {i};\n}}\n"),
    "c": ("int", "/* Return x plus {i}. */\nint f{i}(int x) {{\n    return x + {i};\n}}\n"),
    "cpp": ("int", "// Return x plus {i}.\nint f{i}(int x) {{\n    return x + {i};\n}}\n"),
    "bash": ("integer", "# Prints $1 plus {i}.\nf{i}() {{\n  echo $(( $1 + {i} ))\n}}\n"),
}

answers = []
for language, (int_type, code) in CODE.items():
    said = f"senior {language} engineer"
    answers.append({
        "phase": "plan",
        # The newline: "Language: c" alone is in "Language: cpp" too.
        "prompt_contains": f"Language: {language}\n",
        "latency_ms": latency,
        "answer": {"functions": [
            {"name": f"f{i}", "purpose": f"return x plus {i}",
             "inputs": [{"name": "x", "type": int_type}],
             "outputs": {"type": int_type, "description": "the sum"}, "dependencies": [],
             "complexity": "simple"}
            for i in range(1, FUNCTIONS + 1)
        ]},
    })
    for i in range(1, FUNCTIONS + 1):
        answers.append({"phase": "tests", "function": f"f{i}", "prompt_contains": said,
                        "latency_ms": latency, "answer": {"cases": [
            {"name": "zero", "kind": "edge", "inputs": {"x": 0}, "expected_output": i,
             "expected_error": None},
            {"name": "ten", "kind": "normal", "inputs": {"x": 10}, "expected_output": 10 + i,
             "expected_error": None},
            {"name": "negative", "kind": "edge", "inputs": {"x": -5}, "expected_output": i - 5,
             "expected_error": None},
        ]}})
        answers.append({"phase": "implement", "function": f"f{i}", "prompt_contains": said,
                        "latency_ms": latency,
                        "answer": {"code": code.format(i=i), "analysis": None}})
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump({"answers": answers}, f, indent=1)
