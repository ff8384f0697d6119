# Integration of an assembled module in one sandbox run (one run instead of one per function
# plus one for the analysis: the sandbox is most of a generated function's CPU):
# 1. the verdicts: every function's cases against the whole module, through the image's
#    harness, untraced and with their timeouts, as the cases driver runs them;
# 2. the quality (stdlib only): line coverage by the cases (traced, a second pass, so tracing
#    never slows a verdict), cyclomatic complexity and docstrings per function, and calls that
#    deserve a reviewer's look. Reported, never a security boundary: the code runs inside the
#    same sandbox as everything else.
# Prints one report line (proto::harness::IntegrationReport).
import ast
import json
import os
import signal
import sys

with open("module.py", encoding="utf-8") as f:
    source = f.read()
with open("request.json", encoding="utf-8") as f:
    # {"marker": proto::harness::INTEGRATION_MARKER,
    #  "verdicts": {"function": <harness cases request without code and function>, ...},
    #  "cases": {"function": [{"inputs": ...}, ...], ...}}
    request = json.load(f)
cases = request["cases"]

verdicts = {}
if request.get("verdicts"):
    # The runner preloads the image's harness; import it from its folder otherwise.
    harness = sys.modules.get("codegen_harness")
    if harness is None:
        sys.path.insert(0, os.environ.get("CODEGEN_HARNESS_DIR", "/opt/codegen"))
        import harness  # noqa: E402
    names = list(request["verdicts"])
    requests = [dict(request["verdicts"][name], code=source, function=name) for name in names]
    # One capture for every function (an image's harness without run_many_cases: one each).
    many = getattr(harness, "run_many_cases", None)
    results = many(requests) if many else [harness.run_cases(r) for r in requests]
    verdicts = dict(zip(names, results))

tree = ast.parse(source, "module.py")
BRANCHES = (ast.If, ast.For, ast.While, ast.AsyncFor, ast.ExceptHandler, ast.With,
            ast.AsyncWith, ast.Assert, ast.comprehension, ast.IfExp, ast.Match)
DANGEROUS = {"eval", "exec", "compile", "__import__", "os.system", "os.popen", "os.exec",
             "os.spawn", "subprocess", "socket", "urllib", "http.client", "requests",
             "shutil.rmtree", "os.remove", "os.unlink", "pickle.loads", "ctypes"}

complexity, documented, functions = {}, 0, []
for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        functions.append(node.name)
        if ast.get_docstring(node):
            documented += 1
        c = 1
        for sub in ast.walk(node):
            if isinstance(sub, BRANCHES):
                c += 1
            elif isinstance(sub, ast.BoolOp):
                c += len(sub.values) - 1
        complexity[node.name] = c

def dotted(expr):
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted(expr.value)
        return base + "." + expr.attr if base else expr.attr
    return ""

dangerous = set()
for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.Call):
        names.append(dotted(node.func))
    elif isinstance(node, ast.Import):
        names.extend(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
        names.append(node.module)
    for name in names:
        for bad in DANGEROUS:
            if name == bad or name.startswith(bad + "."):
                dangerous.add(name)

# Executable lines: the first line of every statement outside docstrings.
executable = set()
for node in ast.walk(tree):
    if isinstance(node, ast.stmt):
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
                and isinstance(node.value.value, str):
            continue
        executable.add(node.lineno)

executed = set()
def tracer(frame, event, arg):
    if frame.f_code.co_filename == "module.py":
        if event in ("line", "call"):
            executed.add(frame.f_lineno)
        return tracer
    return None

class _CaseOver(BaseException):
    pass


def _case_over(signum, frame):
    raise _CaseOver()


# A case that loops stops contributing coverage after its timeout instead of holding the run.
limit_s = (request.get("case_timeout_ms") or 0) / 1000.0
if limit_s:
    signal.signal(signal.SIGALRM, _case_over)

namespace = {"__name__": "solution"}
sys.settrace(tracer)
try:
    exec(compile(source, "module.py", "exec"), namespace)
    for name, fn_cases in cases.items():
        fn = namespace.get(name)
        if not callable(fn):
            continue
        for case in fn_cases:
            inputs = case.get("inputs")
            if limit_s:
                signal.setitimer(signal.ITIMER_REAL, limit_s)
            try:
                if isinstance(inputs, dict):
                    fn(**inputs)
                elif isinstance(inputs, list):
                    fn(*inputs)
                else:
                    fn()
            except BaseException:
                pass
            finally:
                if limit_s:
                    signal.setitimer(signal.ITIMER_REAL, 0)
finally:
    sys.settrace(None)

covered = len(executable & executed)
quality = {
    "coverage": covered / len(executable) if executable else 1.0,
    "complexity": complexity,
    "docstrings": documented / len(functions) if functions else 1.0,
    "dangerous_calls": sorted(dangerous),
}
report = {"functions": verdicts, "quality": quality}
sys.stdout.write(request["marker"] + json.dumps(report) + "\n")
sys.stdout.flush()
