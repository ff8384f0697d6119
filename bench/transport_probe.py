#!/usr/bin/env python3
"""A line's round trip to a process in a container, two ways: through the engine's attach
stream (stdin in, stdout out: how the sandbox pool talks to its runner) and through a unix
socket in a directory bind-mounted into the container (a transport the pool does not have).
Also the docker engine's CPU (dockerd, containerd, the shims) per round trip. The containers
(the python sandbox image, no network) are removed at the end.

  /usr/bin/python3 bench/transport_probe.py      (needs the image and the docker socket)
"""
import json
import os
import socket
import time

import runqueue

IMAGE = "codegen-sandbox-python:latest"
ENGINE = "/var/run/docker.sock"
DIR = "/tmp/codegen-transport-probe"
LINE = b"x" * 64 + b"\n"
# The process in the container: echoes lines on its stdio, or on one socket connection.
ECHO = r'''
import os, socket, sys
if sys.argv[1] == "stdio":
    for line in sys.stdin.buffer:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
else:
    path = "/probe/s.sock"
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(1)
    conn, _ = server.accept()
    lines = conn.makefile("rb", buffering=0)
    for line in iter(lines.readline, b""):
        conn.sendall(line)
'''


def engine_cpu_ms():
    """CPU the engine's threads have run so far (bench/runqueue.py says which are the engine's)."""
    threads = runqueue.snap()["threads"].values()
    return sum(ran for group, ran, _ in threads if group == "docker engine") / 1e6


def engine(method, path, body=None):
    """One request to the engine's API; the response body (not chunk-decoded)."""
    data = json.dumps(body).encode() if body is not None else b""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(ENGINE)
        s.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data
        )
        response = b""
        while chunk := s.recv(65536):
            response += chunk
    return response.partition(b"\r\n\r\n")[2]


def create(mode):
    body = {
        "Image": IMAGE,
        "Entrypoint": ["/usr/bin/python3", "-c", ECHO, mode],
        "OpenStdin": True,
        "AttachStdin": True,
        "AttachStdout": True,
        "StdinOnce": False,
        "HostConfig": {"NetworkMode": "none", "Binds": [f"{DIR}:/probe"]},
    }
    answer = engine("POST", "/containers/create", body)
    start = answer.index(b"{")
    return json.loads(answer[start : answer.rindex(b"}") + 1])["Id"]


def attach(container):
    s = socket.socket(socket.AF_UNIX)
    s.connect(ENGINE)
    s.sendall(
        f"POST /containers/{container}/attach?stream=1&stdin=1&stdout=1 HTTP/1.1\r\n"
        "Host: docker\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    return s


def exact(s, size):
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    return data


def through_attach(s):
    s.sendall(LINE)
    got = b""
    while not got.endswith(b"\n"):
        # The engine frames a stream without a TTY: 8 bytes of header, then the payload.
        header = exact(s, 8)
        got += exact(s, int.from_bytes(header[4:], "big"))


def through_socket(s):
    s.sendall(LINE)
    got = b""
    while not got.endswith(b"\n"):
        got += s.recv(4096)


def measure(round_trip, n, gap):
    times = []
    for _ in range(n):
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        round_trip()
        times.append(time.perf_counter() - started)
    return sorted(times)[n // 2] * 1000


def main():
    os.makedirs(DIR, exist_ok=True)
    os.chmod(DIR, 0o777)
    for mode in ("stdio", "socket"):
        container = create(mode)
        try:
            stream = attach(container)
            engine("POST", f"/containers/{container}/start")
            if mode == "socket":
                conn = socket.socket(socket.AF_UNIX)
                for _ in range(100):
                    try:
                        conn.connect(f"{DIR}/s.sock")
                        break
                    except OSError:
                        time.sleep(0.05)
                round_trip = lambda: through_socket(conn)  # noqa: E731
            else:
                round_trip = lambda: through_attach(stream)  # noqa: E731
            measure(round_trip, 200, 0)
            for n, gap in ((2000, 0), (200, 0.02)):
                before = engine_cpu_ms()
                p50 = measure(round_trip, n, gap)
                cpu = (engine_cpu_ms() - before) / n
                print(
                    f"{mode:6s} {n} round trips {gap * 1000:.0f} ms apart: p50 {p50:.3f} ms, "
                    f"docker engine CPU {cpu:.3f} ms per round trip"
                )
        finally:
            engine("DELETE", f"/containers/{container}?force=1")


if __name__ == "__main__":
    main()
