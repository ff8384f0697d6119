#!/usr/bin/env python3
"""Driver of bench/fairness: how long one tenant's single job takes behind another tenant's
batch, against the same job on the idle cluster.

  fairness.py URL REQUESTS.jsonl BULK

REQUESTS.jsonl holds 2 x BULK + 3 distinct jobs (fleet.py script): batch A, batch B and three
single jobs, every one distinct so that nothing is answered from the cache.
  1. idle: the first single job alone (tenant solo);
  2. fair: tenant bulk submits batch A, and 0.5 s later tenant solo the second single job;
  3. fifo: tenant bulk submits batch B, and 0.5 s later the third single job, also as tenant
     bulk, so it queues behind the batch in one lane, as every job did before tenants had
     lanes of their own.
Each single job is timed from its submission until its status is final (polled every 20 ms);
each batch is waited for before the next step, so every step starts on an idle cluster.
"""
import json
import sys
import time
import urllib.request

KEYS = {"bulk": "bench-key-bulk", "solo": "bench-key-solo"}


def call(url, method, path, tenant, body=None, ndjson=False):
    data = None
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
    if body is not None:
        data = body.encode() if ndjson else json.dumps(body).encode()
        headers["content-type"] = "application/x-ndjson" if ndjson else "application/json"
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def final(url, job, tenant):
    status = call(url, "GET", f"/v1/jobs/{job}", tenant)["status"]
    return status in ("succeeded", "failed"), status


def timeline(url, job, tenant):
    """The job's events, each at its offset from the first (the ms of its stream id): where
    the single job's time went."""
    request = urllib.request.Request(f"{url}/v1/jobs/{job}/events",
                                     headers={"Authorization": f"Bearer {KEYS[tenant]}"})
    events, ident = [], None
    with urllib.request.urlopen(request, timeout=60) as response:
        for line in response:
            line = line.decode().rstrip("\n")
            if line.startswith("id: "):
                ident = int(line[4:].split("-")[0])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                events.append((ident, data["event"], data.get("function", "")))
    start = events[0][0]
    return "  ".join(f"{(ms - start) / 1000:.2f} {name}{'(' + f + ')' if f else ''}"
                     for ms, name, f in events)


def single(url, request, tenant):
    started = time.monotonic()
    job = call(url, "POST", "/v1/jobs", tenant, request)["job_id"]
    while True:
        done, status = final(url, job, tenant)
        if done:
            if status != "succeeded":
                sys.exit(f"single job {job} ended {status}")
            took = time.monotonic() - started
            print(f"      events: {timeline(url, job, tenant)}", flush=True)
            return took
        time.sleep(0.02)


def batch(url, requests):
    body = "\n".join(json.dumps(r) for r in requests)
    return call(url, "POST", "/v1/batches", "bulk", body, ndjson=True)


def wait_batch(url, answer):
    batch_id = answer["batch_id"]
    while True:
        view = call(url, "GET", f"/v1/batches/{batch_id}", "bulk")
        if view["status"] == "done":
            failed = {k: v for k, v in view["counts"].items() if k != "succeeded"}
            if failed:
                sys.exit(f"batch {batch_id}: {view['counts']}")
            return
        time.sleep(0.2)


def main():
    url, path, bulk = sys.argv[1], sys.argv[2], int(sys.argv[3])
    requests = [json.loads(line) for line in open(path)]
    a, b = requests[:bulk], requests[bulk:2 * bulk]
    idle_job, fair_job, fifo_job = requests[2 * bulk:2 * bulk + 3]

    idle = single(url, idle_job, "solo")
    print(f"idle: the single job alone took {idle:.2f} s", flush=True)

    started = time.monotonic()
    answer = batch(url, a)
    time.sleep(0.5)
    fair = single(url, fair_job, "solo")
    print(f"fair: behind tenant bulk's {bulk}-job batch, tenant solo's job took {fair:.2f} s",
          flush=True)
    wait_batch(url, answer)
    print(f"      (the batch took {time.monotonic() - started:.1f} s)", flush=True)

    started = time.monotonic()
    answer = batch(url, b)
    time.sleep(0.5)
    fifo = single(url, fifo_job, "bulk")
    print(f"fifo: in the batch's own lane, the job took {fifo:.2f} s", flush=True)
    wait_batch(url, answer)
    print(f"      (the batch took {time.monotonic() - started:.1f} s)", flush=True)

    print(f"FAIRNESS bulk={bulk} idle_s={idle:.2f} fair_s={fair:.2f} fifo_s={fifo:.2f} "
          f"fair_ratio={fair / idle:.2f} fifo_ratio={fifo / idle:.2f}")


if __name__ == "__main__":
    main()
