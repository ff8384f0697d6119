# Runs one function's test cases with the image's harness and prints one report line.
# The module and the request arrive as files in the work directory; the request names the
# marker of the report line (proto::harness::CASES_MARKER), so the worker alone spells it.
import json
import os
import sys

# The runner preloads the image's harness; import it from its folder otherwise (the image's
# /opt/codegen, or CODEGEN_HARNESS_DIR where the worker's contract test runs the driver).
harness = sys.modules.get("codegen_harness")
if harness is None:
    sys.path.insert(0, os.environ.get("CODEGEN_HARNESS_DIR", "/opt/codegen"))
    import harness  # noqa: E402

with open("request.json", encoding="utf-8") as f:
    request = json.load(f)
with open("module.py", encoding="utf-8") as f:
    request["code"] = f.read()
marker = request.pop("marker")
result = harness.run_cases(request)
sys.stdout.write(marker + json.dumps(result) + "\n")
sys.stdout.flush()
