#!/usr/bin/env python3
"""Helpers of bench/fleet.

  fleet.py script JOBS WIDTH LATENCY_MS SCRIPT.json REQUESTS.jsonl [SPREAD_MS]
      the scripted (FAKE) model and the batch: bench/tasks.py's jobs (WIDTH independent
      functions each, every name distinct so that nothing hits a cache), every answer after
      LATENCY_MS.
  fleet.py snapshot OUT.json NAME=PID... [--metrics URL...]
      CPU time (utime+stime+cutime+cstime, clock ticks) of each named process and of all its
      descendants, the sandbox containers' cgroup (cpuacct v1, nanoseconds) and the model calls
      counted by the given /metrics pages (codegen_model_calls_total), and the functions whose
      cases shared a sandbox run (codegen_sandbox_shared_cases_total{outcome="shared"}).
  fleet.py sample OUT.json OWNER_PID...
      until SIGTERM, every 0.2 s: each container's cgroup usage (cpuacct v1), so that the
      containers of the given workers (label org.codegen.owner=HOST:PID) are told from
      everyone else's on a shared docker engine. A container's usage after its last sample
      is missed (pooled containers live for many runs, so that is little).
      SIGUSR1 marks the start: usage before it is not counted (it writes OUT.json.marked).
  fleet.py settle SECONDS QUIET_MS
      waits until the docker cgroup uses less than QUIET_MS of CPU per second.
  fleet.py report BEFORE.json AFTER.json FUNCTIONS [SAMPLES.json]
      the CPU table: per process, total and per generated function.
"""
import json
import random
import os
import signal
import sys
import time
import urllib.request

CGROUP = "/sys/fs/cgroup/cpuacct/docker/cpuacct.usage"
TICK = os.sysconf("SC_CLK_TCK")
# Shown, but not counted in the total: the FAKE model stands for a remote service, and the
# docker engine is shared with everything else on the machine.
OUTSIDE = ("model-server", "docker-engine")
# Not ours, or already counted: shown, but not in the total.
OUTSIDE_PREFIX = ("other containers", "docker cgroup")


def write_script(jobs, width, latency_ms, script_path, requests_path, spread_ms=0):
    """spread_ms: each function's tests and code answers take latency_ms +- up to spread_ms
    (uniform, the same every run), as a real model's answers differ in length."""
    answers, requests = [], []
    draw = random.Random(14)

    def latency():
        return latency_ms + (draw.randint(-spread_ms, spread_ms) if spread_ms else 0)
    for j in range(jobs):
        tag = f"bench job {j}:"
        names = [f"j{j}_f{k}" for k in range(width)]
        answers.append({"phase": "plan", "prompt_contains": tag, "latency_ms": latency_ms,
                        "answer": {"functions": [
                            {"name": n, "purpose": f"return x plus {k + 1}",
                             "inputs": [{"name": "x", "type": "int"}],
                             "outputs": {"type": "int", "description": "the sum"},
                             "dependencies": [], "complexity": "simple"}
                            for k, n in enumerate(names)
                        ]}})
        for k, name in enumerate(names):
            answers.append({"phase": "tests", "function": name, "latency_ms": latency(),
                            "answer": {"cases": [
                                {"name": "zero", "kind": "edge", "inputs": {"x": 0},
                                 "expected_output": k + 1, "expected_error": None},
                                {"name": "ten", "kind": "normal", "inputs": {"x": 10},
                                 "expected_output": 11 + k, "expected_error": None},
                            ]}})
            answers.append({"phase": "implement", "function": name, "latency_ms": latency(),
                            "answer": {
                                "code": f'def {name}(x: int) -> int:\n    """Return x plus {k + 1}."""\n'
                                        f"    return x + {k + 1}\n",
                                "analysis": None,
                            }})
        requests.append({"instruction": f"{tag} {width} functions that add constants"})
    with open(script_path, "w", encoding="utf-8") as f:
        json.dump({"answers": answers}, f)
    with open(requests_path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in requests)


def proc_table():
    """pid -> (ppid, ticks), ticks = utime + stime + cutime + cstime."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            continue
        # the command may hold spaces and parentheses: fields start after the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
        table[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    return table


def tree_ticks(table, root):
    """CPU ticks of ROOT and its descendants. A child that exited and was waited for is in its
    parent's cutime/cstime, so the sum only grows."""
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        stack.extend(children.get(pid, []))
    return total, len(seen)


def counted(url):
    """(model calls, functions whose cases shared a sandbox run) a worker's /metrics counts."""
    calls = shared = 0
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("codegen_model_calls_total{"):
                calls += float(line.rsplit(" ", 1)[1])
            elif line.startswith('codegen_sandbox_shared_cases_total{outcome="shared"}'):
                shared += float(line.rsplit(" ", 1)[1])
    return calls, shared


def snapshot(out, args):
    named, urls, in_metrics = [], [], False
    for arg in args:
        if arg == "--metrics":
            in_metrics = True
        elif in_metrics:
            urls.append(arg)
        else:
            name, pids = arg.split("=", 1)
            named.append((name, [int(p) for p in pids.split(",") if p]))
    table = proc_table()
    snap = {"time": time.time(), "tick": TICK, "processes": {}, "calls": {}, "shared": {}}
    for name, pids in named:
        ticks = procs = 0
        for pid in pids:
            t, n = tree_ticks(table, pid)
            ticks, procs = ticks + t, procs + n
        snap["processes"][name] = {"ticks": ticks, "procs": procs}
    if os.path.exists(CGROUP):
        with open(CGROUP, encoding="utf-8") as f:
            snap["cgroup_ns"] = int(f.read())
    with open("/proc/stat", encoding="utf-8") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    # busy = all but idle and iowait (guest time is already in user)
    snap["machine"] = {"busy": sum(cpu[:8]) - cpu[3] - cpu[4], "all": sum(cpu[:8])}
    for url in urls:
        try:
            snap["calls"][url], snap["shared"][url] = counted(url)
        except OSError as e:
            print(f"fleet.py: {url}: {e}", file=sys.stderr)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(snap, f)


def sample(out, owners):
    owners = set(owners)
    base = os.path.dirname(CGROUP)
    seen = {}  # id -> {"ours", "first", "last"}
    flags = []
    signal.signal(signal.SIGTERM, lambda *_: flags.append("stop"))
    signal.signal(signal.SIGUSR1, lambda *_: flags.append("mark"))
    while True:
        mark, stop = "mark" in flags, "stop" in flags
        flags.clear()
        try:
            ids = [d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))]
        except OSError:
            ids = []
        for cid in ids:
            try:
                with open(os.path.join(base, cid, "cpuacct.usage"), encoding="utf-8") as f:
                    usage = int(f.read())
            except (OSError, ValueError):
                continue
            if cid not in seen:
                try:
                    with open(f"/var/lib/docker/containers/{cid}/config.v2.json", encoding="utf-8") as f:
                        labels = json.load(f)["Config"].get("Labels") or {}
                except (OSError, ValueError, KeyError):
                    labels = {}
                owner = labels.get("org.codegen.owner", "")
                seen[cid] = {"ours": owner.rsplit(":", 1)[-1] in owners, "first": 0}
            seen[cid]["last"] = usage
            if mark:
                seen[cid]["first"] = usage
        if mark:
            # what ran before the mark, in containers gone since, is not the batch's
            for cid in [c for c in seen if c not in ids]:
                del seen[cid]
            print("marked", file=open(out + ".marked", "w"))
        if stop:
            break
        time.sleep(0.2)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(seen, f)


def settle(seconds, quiet_ms):
    """Waits (at most SECONDS) until the containers used less than QUIET_MS of CPU in a second:
    the workers' warm pools have started."""
    deadline = time.time() + seconds
    usage = lambda: int(open(CGROUP, encoding="utf-8").read()) if os.path.exists(CGROUP) else 0
    last = usage()
    while time.time() < deadline:
        time.sleep(1)
        now = usage()
        if (now - last) / 1e6 < quiet_ms:
            return
        last = now
    print(f"fleet.py: the containers still busy after {seconds} s", file=sys.stderr)


def report(before_path, after_path, functions, samples_path=None):
    before = json.load(open(before_path, encoding="utf-8"))
    after = json.load(open(after_path, encoding="utf-8"))
    ms = 1000 / after["tick"]
    rows = []
    for name, a in after["processes"].items():
        b = before["processes"].get(name, {"ticks": 0})
        rows.append((name, (a["ticks"] - b["ticks"]) * ms, a["procs"]))
    samples = json.load(open(samples_path, encoding="utf-8")) if samples_path else None
    if samples is not None:
        ours = [c for c in samples.values() if c["ours"]]
        foreign = [c for c in samples.values() if not c["ours"]]
        used = lambda cs: sum(c["last"] - c["first"] for c in cs) / 1e6
        rows.append((f"sandbox containers ({len(ours)}, sampled)", used(ours), None))
        rows.append((f"other containers ({len(foreign)}, sampled)", used(foreign), None))
        if "cgroup_ns" in before and "cgroup_ns" in after:
            rows.append(("docker cgroup, every container", (after["cgroup_ns"] - before["cgroup_ns"]) / 1e6, None))
    elif "cgroup_ns" in before and "cgroup_ns" in after:
        rows.append(("sandbox containers (cgroup)", (after["cgroup_ns"] - before["cgroup_ns"]) / 1e6, None))
    else:
        rows.append(("sandbox containers (cgroup)", float("nan"), None))
        print(f"warning: {CGROUP} missing: no sandbox CPU figure", file=sys.stderr)
    outside = lambda name: name in OUTSIDE or name.startswith(OUTSIDE_PREFIX)
    counted = [r for r in rows if not outside(r[0])]
    total = sum(r[1] for r in counted if r[1] == r[1])
    print(f"CPU over the batch, {functions} functions ({after['time'] - before['time']:.1f} s between the snapshots):")
    print(f"{'process':46s} {'CPU-ms':>10s} {'ms/function':>12s} {'share':>7s}")
    for name, cpu, procs in counted:
        label = name if procs in (None, 1) else f"{name} ({procs} procs)"
        print(f"{label:46s} {cpu:10.0f} {cpu / functions:12.1f} {cpu / total:7.1%}")
    print(f"{'total':46s} {total:10.0f} {total / functions:12.1f} {1:7.1%}")
    for name, cpu, procs in rows:
        if outside(name):
            label = name if procs in (None, 1) else f"{name} ({procs} procs)"
            print(f"{label + ' (not in total)':46s} {cpu:10.0f} {cpu / functions:12.1f}")
    if "machine" in before and "machine" in after:
        busy = (after["machine"]["busy"] - before["machine"]["busy"]) * ms
        wall = (after["machine"]["all"] - before["machine"]["all"]) * ms
        shown = total + sum(r[1] for r in rows if r[0] in OUTSIDE or r[0].startswith("other containers"))
        print(f"{'machine, every process (/proc/stat)':46s} {busy:10.0f} {busy / functions:12.1f}"
              f"    busy {busy / wall:.0%} of {os.cpu_count()} cores; not in the rows above: {busy - shown:.0f} ms")
    calls = sum(after["calls"].values()) - sum(before["calls"].get(u, 0) for u in after["calls"])
    print(f"model calls (codegen_model_calls_total, all workers): {calls:.0f}")
    shared = sum(after.get("shared", {}).values()) - sum(
        before.get("shared", {}).get(u, 0) for u in after.get("shared", {}))
    print(f"functions whose cases shared a sandbox run (codegen_sandbox_shared_cases_total): "
          f"{shared:.0f} of {functions}")


def redis_commands(path):
    """`INFO commandstats` as {command: calls} (what `redis-cli` printed to `path`)."""
    calls = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("cmdstat_"):
            name, _, stats = line.strip().partition(":")
            fields = dict(f.split("=", 1) for f in stats.split(","))
            calls[name[len("cmdstat_"):]] = int(fields["calls"])
    return calls


def redis_report(before_path, after_path, functions):
    """Redis commands over the batch per generated function (a script counts once as
    `evalsha`, the commands it runs count apart: `info` is the snapshots' own)."""
    before, after = redis_commands(before_path), redis_commands(after_path)
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    delta.pop("info", None)
    print("redis commands per function (a script counts once as evalsha and its commands apart):")
    for name, n in sorted(delta.items(), key=lambda kv: -kv[1]):
        print(f"  {name:16s} {n / functions:8.2f}")


def main():
    cmd = sys.argv[1]
    if cmd == "script":
        write_script(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6],
                     int(sys.argv[7]) if len(sys.argv) > 7 else 0)
    elif cmd == "snapshot":
        snapshot(sys.argv[2], sys.argv[3:])
    elif cmd == "settle":
        settle(float(sys.argv[2]), float(sys.argv[3]))
    elif cmd == "sample":
        sample(sys.argv[2], sys.argv[3:])
    elif cmd == "redis":
        redis_report(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "report":
        report(sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
