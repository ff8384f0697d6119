#!/usr/bin/env python3
"""Package installs into sessions: the first session asking for sympy==1.12 (the worker's pip
resolves and installs it from the operator's folder of wheels), then ROUNDS sessions asking for
the same (the installed set from the worker's cache, mounted) alternating with ROUNDS sessions
asking for none; each session imports what it has (a cell), then is deleted.

Usage: session_packages.py URL ROUNDS"""
import http.client
import json
import statistics
import sys
import time
import urllib.parse

url, rounds = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2])
HEADERS = {"Content-Type": "application/json"}
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=900)


def call(method, path, body=None):
    conn.request(method, path, None if body is None else json.dumps(body), HEADERS)
    response = conn.getresponse()
    return response.status, json.loads(response.read() or b"null")


def session(packages, code):
    """Opens a session (waiting for the worker's first announcement), runs `code`; the
    opening's and the cell's milliseconds."""
    body = {"language": "python"}
    if packages:
        body["packages"] = packages
    for _ in range(600):
        t = time.perf_counter()
        status, answer = call("POST", "/v1/sessions", body)
        if status != 503:
            break
        time.sleep(0.5)
    opened = (time.perf_counter() - t) * 1000
    assert status == 201, (status, answer)
    sid = answer["id"]
    t = time.perf_counter()
    status, cell = call("POST", f"/v1/sessions/{sid}/run", {"code": code})
    ran = (time.perf_counter() - t) * 1000
    assert status == 200 and cell["status"] == "ok", (status, cell)
    call("DELETE", f"/v1/sessions/{sid}")
    return opened, ran, cell["value"]


SYMPY = ["sympy==1.12"]
USE = "import sympy\nstr(sympy.integrate(sympy.Symbol('x') ** 2))"
first_open, first_cell, value = session(SYMPY, USE)
assert value == "'x**3/3'", value
cached, plain = [], []
for _ in range(rounds):
    cached.append(session(SYMPY, USE)[0])
    plain.append(session([], "1")[0])
print(f"first session with sympy==1.12 (pip resolves and installs from the folder): open "
      f"{first_open:.0f} ms; its first cell (import and integrate) {first_cell:.0f} ms")
print(f"later sessions with the same packages (the worker's cache, mounted), {rounds}: open "
      f"median {statistics.median(cached):.0f} ms")
print(f"sessions without packages, alternating, {rounds}: open median "
      f"{statistics.median(plain):.0f} ms")
print(f"ratios: first / cached {first_open / statistics.median(cached):.1f}x; "
      f"cached / none {statistics.median(cached) / statistics.median(plain):.2f}x")
