# Runs one function's test cases with the image's harness and prints one report line.
# The module and the request arrive as files in the work directory.
import json
import sys

# The runner preloads the image's harness; import it from its folder otherwise.
harness = sys.modules.get("codegen_harness")
if harness is None:
    sys.path.insert(0, "/opt/codegen")
    import harness  # noqa: E402

with open("request.json", encoding="utf-8") as f:
    request = json.load(f)
with open("module.py", encoding="utf-8") as f:
    request["code"] = f.read()
result = harness.run_cases(request)
sys.stdout.write("@@codegen-cases@@ " + json.dumps(result) + "\n")
sys.stdout.flush()
