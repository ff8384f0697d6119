#!/usr/bin/env python3
"""CPU time and run-queue wait of the cluster's processes over a phase of a benchmark.

  runqueue.py snap OUT.json                 the counters now
  runqueue.py diff BEFORE.json AFTER.json TASKS

For every thread of each process below, the kernel's schedstat gives the time it ran and the
time it waited on a run queue while runnable (waiting for a core). Summed over a phase and
divided by its tasks, the wait says how much of an idle task's overhead was spent waiting for
a core that something else held; the sandbox containers' CPU (their cgroups) says what held
it. Processes that ended during the phase are not counted (the cluster's own run throughout;
a sandbox run's processes are counted in their container's cgroup).
"""
import glob
import json
import os
import sys

# What each group is, by the command line of its processes.
GROUPS = [
    ("coordinator", lambda c: "codegen" in c[0] and "coordinator" in c[1:2]),
    ("workers", lambda c: "codegen" in c[0] and "worker" in c[1:2]),
    ("FAKE model server", lambda c: "codegen" in c[0] and "model-server" in c[1:2]),
    ("redis", lambda c: "redis-server" in c[0]),
    ("rabbitmq", lambda c: "beam" in c[0] or "erl_child_setup" in c[0] or "inet_gethost" in c[0]),
    ("docker engine", lambda c: os.path.basename(c[0]) in ("dockerd", "containerd")
     or "containerd-shim" in c[0]),
]
# Every container of the engine, those removed during the phase included (v1 charges a parent).
CGROUP = "/sys/fs/cgroup/cpuacct/docker/cpuacct.usage"


def group_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not cmd:
        return None
    for name, matches in GROUPS:
        if matches(cmd):
            return name
    return None


def snap():
    threads = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        group = group_of(pid)
        if group is None:
            continue
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                with open(path) as f:
                    ran, waited, _ = (int(x) for x in f.read().split())
            except (OSError, ValueError):
                continue
            threads[path] = (group, ran, waited)
    with open(CGROUP) as f:
        containers = int(f.read())
    return {"threads": threads, "containers": containers}


def diff(before, after, tasks):
    ran, waited = {}, {}
    for path, (group, r, w) in after["threads"].items():
        _, r0, w0 = before["threads"].get(path, (group, 0, 0))
        ran[group] = ran.get(group, 0) + r - r0
        waited[group] = waited.get(group, 0) + w - w0
    sandbox = after["containers"] - before["containers"]
    print(f"{'per task (ms)':20s} {'cpu':>7s} {'waited for a core':>18s}")
    for name, _ in GROUPS:
        if name in ran:
            print(f"{name:20s} {ran[name] / 1e6 / tasks:7.2f} {waited[name] / 1e6 / tasks:18.2f}")
    total_ran, total_waited = sum(ran.values()), sum(waited.values())
    print(f"{'sandbox containers':20s} {sandbox / 1e6 / tasks:7.2f} {'-':>18s}")
    print(f"{'all of the above':20s} {(total_ran + sandbox) / 1e6 / tasks:7.2f} "
          f"{total_waited / 1e6 / tasks:18.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "snap":
        with open(sys.argv[2], "w") as f:
            json.dump(snap(), f)
    else:
        with open(sys.argv[2]) as a, open(sys.argv[3]) as b:
            diff(json.load(a), json.load(b), int(sys.argv[4]))
