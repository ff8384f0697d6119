#!/usr/bin/env python3
"""Latency of one execution through HTTP (`POST /v1/executions`, keep-alive, one at a time)
next to starting a bare host interpreter (`python3 -I -S -c pass`, no sandbox at all).
Usage: exec_latency.py URL N"""
import http.client
import json
import statistics
import subprocess
import sys
import time
import urllib.parse

url, n = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2])


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


conn = http.client.HTTPConnection(url.hostname, url.port)
body = json.dumps({"language": "python", "code": "pass"})
http_ms = []
for i in range(n + 20):
    t = time.perf_counter()
    conn.request("POST", "/v1/executions", body, {"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    assert answer["status"] == "passed", answer
    if i >= 20:  # warm-up
        http_ms.append((time.perf_counter() - t) * 1000)
host_ms = []
for _ in range(n):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    host_ms.append((time.perf_counter() - t) * 1000)
print(f"single execution through HTTP, {n} runs: p50 {pct(http_ms, 50):.2f} ms, "
      f"p95 {pct(http_ms, 95):.2f} ms")
print(f"bare host python3 -I -S -c pass, {n} runs: p50 {pct(host_ms, 50):.2f} ms, "
      f"p95 {pct(host_ms, 95):.2f} ms")
print(f"ratio (p50): {statistics.median(http_ms) / statistics.median(host_ms):.2f}")
