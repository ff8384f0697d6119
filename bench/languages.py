#!/usr/bin/env python3
"""Every language through the cluster next to its bare compiler or interpreter, in one run.

    bench/languages.py URL [N] [M] [LANGUAGE...]   (default N=10 single runs, M=40 at saturation)

For each language, a trivial program (prints "ok"):
  bare    the same toolchain with no sandbox, no runner and no HTTP: a plain container of the
          language's image (`docker run`, no limits, the programs' uid, tmpfs for /tmp and
          /build), timing in the container N rounds of
          what the runner does (compile when the language compiles, then run), one at a time;
          and at saturation, two such loops at once (this machine has 2 cores), runs/s.
          The image's toolchain is the one the host lacks or has in another version (Go,
          rustc, TypeScript): same compiler, same cores.
  cluster `POST /v1/executions`, keep-alive, one at a time: the median wall time of N runs
          after one warm-up (which starts a lazy pool); and M runs from 8 clients at once
          (2 workers x 2 warm containers per language), runs/s.
The ratio is cluster / bare (single: median time; saturation: bare runs/s / cluster runs/s).
"""
import concurrent.futures
import http.client
import json
import statistics
import subprocess
import sys
import time
import urllib.parse

PROGRAMS = {
    "python": ("main.py", "print('ok')\n", "python3 -I main.py"),
    "javascript": ("main.js", "console.log('ok')\n", "node main.js"),
    "bash": ("main.sh", "echo ok\n", "bash main.sh"),
    "c": ("main.c", '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }\n',
          "gcc -O2 -std=gnu17 -pipe -o main main.c -lm && ./main"),
    "cpp": ("main.cpp", '#include <iostream>\nint main() { std::cout << "ok" << std::endl; }\n',
            "g++ -O2 -std=gnu++17 -pipe -o main main.cpp && ./main"),
    "go": ("main.go", 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("ok") }\n',
           "rm -rf /tmp/gocache && GOCACHE=/tmp/gocache GO111MODULE=off CGO_ENABLED=0 "
           "go build -o main main.go && ./main"),
    "rust": ("main.rs", 'fn main() { println!("ok"); }\n',
             "rustc --edition 2021 -O -o main main.rs && ./main"),
    "java": ("Main.java",
             'public class Main {\n  public static void main(String[] a) {\n'
             '    System.out.println("ok");\n  }\n}\n',
             "javac -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 -J-Xshare:auto -encoding UTF-8 "
             "-nowarn -d cls Main.java && java -XX:+UseSerialGC -Xshare:auto -cp cls Main"),
    "typescript": ("main.ts", "const word: string = 'ok';\nconsole.log(word);\n",
                   "node /opt/codegen/compile.js main.ts && node /build/main.js"),
}


def bare(language, rounds, loops):
    """Runs/s and ms per run of the bare toolchain in a plain container of the image."""
    name, source, command = PROGRAMS[language]
    loop = ("i=0; while [ $i -lt %d ]; do %s >/dev/null || exit 9; i=$((i+1)); done"
            % (rounds, command))
    script = (
        "mkdir -p /tmp/b && cd /tmp/b && printf '%%s' \"$SRC\" > %s && %s >/dev/null && "
        "s=$(date +%%s%%N); %s; e=$(date +%%s%%N); echo $(( (e - s) / 1000 ))"
    ) % (name, command, " & ".join(["( %s )" % loop] * loops) + ("; wait" if loops > 1 else ""))
    out = subprocess.run(
        # tmpfs where the runner has tmpfs too: the container's own layer (fuse-overlayfs
        # here) would make the compilers' writes the bare side's handicap. And the programs'
        # uid: on fuse-overlayfs a compiler runs slower as any uid but root (gcc: 55 ms, not
        # 35), which would be the storage driver's cost counted as the runner's.
        ["docker", "run", "--rm", "--network", "none", "-e", "SRC=" + source,
         "--user", "10002:10002", "-e", "HOME=/tmp",
         "--tmpfs", "/tmp:exec,uid=10002,gid=10002", "--tmpfs", "/build:exec,uid=10002,gid=10002",
         "--entrypoint", "/bin/sh", "codegen-sandbox-%s:latest" % language, "-c", script],
        check=True, capture_output=True, text=True).stdout
    elapsed_us = int(out.split()[-1])
    runs = rounds * loops
    return runs / (elapsed_us / 1e6), elapsed_us / 1000 / rounds


def cluster(url, language, n, m):
    name, source, _ = PROGRAMS[language]
    body = json.dumps({"language": language, "code": source, "compile_timeout_ms": 60000})
    target = urllib.parse.urlparse(url)

    def one(conn):
        t = time.perf_counter()
        conn.request("POST", "/v1/executions", body, {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        assert answer.get("status") == "passed" and answer["stdout"] == "ok\n", answer
        return (time.perf_counter() - t) * 1000

    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=300)
    one(conn)  # warm-up: a lazy pool starts here
    single = statistics.median(one(conn) for _ in range(n))

    def client(count):
        c = http.client.HTTPConnection(target.hostname, target.port, timeout=300)
        for _ in range(count):
            one(c)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(client, [m // 8] * 8))
    rate = (m // 8 * 8) / (time.perf_counter() - start)
    return rate, single


def main(argv):
    url = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 10
    m = int(argv[2]) if len(argv) > 2 else 40
    languages = argv[3:] or list(PROGRAMS)
    print("| language | bare ms/run | cluster ms/run | ratio | bare runs/s (2 loops) "
          "| cluster runs/s (8 clients) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for language in languages:
        _, bare_ms = bare(language, n, 1)
        bare_rate, _ = bare(language, max(2, m // 2), 2)
        rate, single_ms = cluster(url, language, n, m)
        print("| %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |" % (
            language, bare_ms, single_ms, single_ms / bare_ms, bare_rate, rate,
            bare_rate / rate), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
