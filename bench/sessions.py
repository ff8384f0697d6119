#!/usr/bin/env python3
"""Sessions at scale on one machine: N idle Python sessions open at once (their opening time,
the host memory each one costs), then a trivial cell's latency over HTTP on one of them while
all N stay open, next to a one-shot execution's (`POST /v1/executions` of `pass`) measured
alternating in the same run; at the end every session is deleted and its container counted
gone. Between the two: a cell that changes the session's state (so its checkpoint is taken
and kept) next to the trivial one, alternating; then worker 1 is SIGKILLed and every session
is called once: those of worker 1 are restored on worker 2 from their checkpoints (the
first call's time, next to opening a session).

Usage: sessions.py URL N CELLS [STATE_DIR]"""
import concurrent.futures
import http.client
import json
import subprocess
import sys
import time
import urllib.parse

url, n, cells = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
HEADERS = {"Content-Type": "application/json"}


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def connect():
    return http.client.HTTPConnection(url.hostname, url.port, timeout=600)


def call(conn, method, path, body=None):
    conn.request(method, path, None if body is None else json.dumps(body), HEADERS)
    response = conn.getresponse()
    return response.status, json.loads(response.read() or b"null")


def mem_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError("no MemAvailable")


def session_containers():
    out = subprocess.run(["docker", "ps", "-q", "--filter", "label=org.codegen.session"],
                         capture_output=True, text=True, check=True).stdout
    return len(out.split())


def open_one(_):
    conn = connect()
    for _ in range(600):
        t = time.perf_counter()
        status, answer = call(conn, "POST", "/v1/sessions", {"language": "python"})
        if status == 201:
            return answer["id"], (time.perf_counter() - t) * 1000
        if status == 503:
            time.sleep(0.5)
            continue
        raise RuntimeError(f"open: {status} {answer}")
    raise RuntimeError("no session host")


before_containers = session_containers()
available_before = mem_available_kb()
started = time.perf_counter()
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    opened = list(pool.map(open_one, range(n)))
open_s = time.perf_counter() - started
ids = [i for i, _ in opened]
open_ms = [ms for _, ms in opened]
# Let the kernels settle (their start-up pages) before the memory is read.
time.sleep(5)
live = session_containers() - before_containers
per_session_mib = (available_before - mem_available_kb()) / 1024 / n
print(f"{n} python sessions opened in {open_s:.1f} s (8 at a time): open p50 "
      f"{pct(open_ms, 50):.0f} ms, p95 {pct(open_ms, 95):.0f} ms; {live} session containers live")
print(f"host memory per idle session (MemAvailable before and after, over {n}): "
      f"{per_session_mib:.1f} MiB")

# A trivial cell on one session, alternating with a one-shot execution, keep-alive each.
conn_cell, conn_exec = connect(), connect()
target = ids[len(ids) // 2]
cell_ms, exec_ms = [], []
for i in range(cells + 20):
    t = time.perf_counter()
    status, answer = call(conn_cell, "POST", f"/v1/sessions/{target}/run", {"code": "1"})
    assert status == 200 and answer["value"] == "1", (status, answer)
    elapsed_cell = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    status, answer = call(conn_exec, "POST", "/v1/executions", {"language": "python", "code": "pass"})
    assert status == 200 and answer["status"] == "passed", (status, answer)
    elapsed_exec = (time.perf_counter() - t) * 1000
    if i >= 20:  # warm-up
        cell_ms.append(elapsed_cell)
        exec_ms.append(elapsed_exec)
print(f"trivial cell over HTTP with {n} sessions open, {cells} cells: p50 "
      f"{pct(cell_ms, 50):.2f} ms, p95 {pct(cell_ms, 95):.2f} ms")
print(f"one-shot execution of `pass` over HTTP, same run, alternating: p50 "
      f"{pct(exec_ms, 50):.2f} ms, p95 {pct(exec_ms, 95):.2f} ms")
print(f"ratio (p50, cell / execution): {pct(cell_ms, 50) / pct(exec_ms, 50):.2f}")

# A cell that changes state (its checkpoint taken and kept before the answer) next to the
# trivial one (nothing changed: nothing sent to Redis), alternating on the same session.
changing_ms, trivial_ms = [], []
for i in range(cells // 5 + 10):
    t = time.perf_counter()
    status, answer = call(conn_cell, "POST", f"/v1/sessions/{target}/run",
                          {"code": f"v = [{i}] * 1000\nopen('blob', 'wb').write(b'%d' % {i} * 65536)"})
    assert status == 200 and answer["checkpoint"]["saved"], (status, answer)
    elapsed_changing = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    status, answer = call(conn_cell, "POST", f"/v1/sessions/{target}/run", {"code": "1"})
    assert status == 200, (status, answer)
    elapsed_trivial = (time.perf_counter() - t) * 1000
    if i >= 10:
        changing_ms.append(elapsed_changing)
        trivial_ms.append(elapsed_trivial)
print(f"a cell that changes the state (a list and a 64 KiB file; checkpoint of "
      f"{answer['checkpoint']['bytes']} bytes kept before the answer): p50 "
      f"{pct(changing_ms, 50):.2f} ms against the trivial cell's {pct(trivial_ms, 50):.2f} ms "
      f"alternating ({pct(changing_ms, 50) / pct(trivial_ms, 50):.2f}x)")

state_dir = sys.argv[4] if len(sys.argv) > 4 else ".cluster"
with open(f"{state_dir}/pids/worker-1.pid") as f:
    worker_1 = int(f.read().strip())
import os
import signal
os.kill(worker_1, signal.SIGKILL)
restore_ms, others_ms = [], []
conn = connect()
for sid in ids:
    for _ in range(600):
        t = time.perf_counter()
        status, answer = call(conn, "POST", f"/v1/sessions/{sid}/run", {"code": "1"})
        if status != 503 or answer.get("code") != "no_session_host":
            break
        time.sleep(0.5)
    elapsed = (time.perf_counter() - t) * 1000
    assert status == 200 and answer["value"] == "1", (status, answer)
    (restore_ms if answer.get("restored") else others_ms).append(elapsed)
print(f"worker 1 SIGKILLed: {len(restore_ms)} of its sessions restored on worker 2 at their "
      f"next call (restore and cell): p50 {pct(restore_ms, 50):.0f} ms, p95 "
      f"{pct(restore_ms, 95):.0f} ms, against opening a session {pct(open_ms, 50):.0f} ms "
      f"({pct(restore_ms, 50) / pct(open_ms, 50):.2f}x); the other {len(others_ms)} answered "
      f"as before")

# Every session deleted; none of their containers stays.
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    statuses = list(pool.map(lambda i: call(connect(), "DELETE", f"/v1/sessions/{i}")[0], ids))
assert all(s == 200 for s in statuses), statuses
for _ in range(600):
    if session_containers() == before_containers:
        break
    time.sleep(0.5)
print(f"deleted {len(ids)}: {session_containers() - before_containers} session containers left")
