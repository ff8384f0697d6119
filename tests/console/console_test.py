"""The web console in a real headless browser (Debian's chromium, driven by Playwright).

Run by tests/tests/e2e/console.rs against a coordinator and a worker it started with three
tenants' API keys and a scripted (FAKE) model; by hand:

    .cluster/console-venv/bin/python tests/console/console_test.py \
        --url http://127.0.0.1:8080 --key-a KEY --key-b KEY --key-slow KEY --out DIR

Tenant A submits a job and a batch and watches them finish, runs programs in the playground,
pages through its executions, runs cells in a session, sees how each of two sessions ended
(deleted, and its kernel killed by a cell), reads its usage and its lessons; tenant B (another
browser context, so another sessionStorage) must see none of it, and A's ids answer 404 for
it; a bad key shows 401, a tenant over its request rate 429 with Retry-After. A screenshot of
every page goes to --out. Exit status 0 only when every check passed; the last line is a JSON
summary.
"""

import argparse
import json
import re
import sys
import time
import traceback
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

# A job takes seconds with the scripted model; a slow machine may take minutes. The deadline
# only bounds a failure.
JOB_WAIT_MS = 600_000
STEP_MS = 120_000

ARGS = None
STATE = {}
RESULTS = []
BROWSER_PROBLEMS = []


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the coordinator, e.g. http://127.0.0.1:8080")
    parser.add_argument("--key-a", required=True, help="tenant A's API key")
    parser.add_argument("--key-b", required=True, help="tenant B's API key")
    parser.add_argument("--tenant-b", default="globex", help="tenant B's name")
    parser.add_argument("--key-slow", required=True, help="a key whose tenant may make 1 request/s")
    parser.add_argument("--key-ops", required=True, help="an admin tenant's key (the cluster page)")
    parser.add_argument("--worker", required=True, help="the worker's name (worker.name)")
    parser.add_argument("--out", required=True, help="folder for the screenshots")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--only", action="append", help="run only these checks (repeatable)")
    return parser.parse_args()


# ---------------------------------------------------------------------------------------------
# Helpers


def console_url(hash_=""):
    return f"{ARGS.url}/console{hash_}"


def new_page(context, label):
    page = context.new_page()
    page.set_default_timeout(STEP_MS)
    origin = ARGS.url.rstrip("/")

    def on_console(message):
        text = message.text
        if "Content Security Policy" in text or "Refused to" in text:
            BROWSER_PROBLEMS.append(f"{label}: CSP: {text}")

    def on_request(request):
        url = request.url
        if not (url.startswith(origin + "/") or url.startswith("data:") or url == "about:blank"):
            BROWSER_PROBLEMS.append(f"{label}: a request to another origin: {url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: BROWSER_PROBLEMS.append(f"{label}: uncaught: {error}"))
    page.on("request", on_request)
    return page


def open_view(page, hash_, view, ready=True):
    """Shows `hash_` (e.g. #/jobs) and waits for its view; `ready`: until it finished loading."""
    if not page.url.startswith(console_url()):
        page.goto(console_url(hash_))
    elif page.evaluate("() => location.hash") == hash_:
        page.reload()
    else:
        page.evaluate("h => { location.hash = h; }", hash_)
    selector = f'#view > .page[data-view="{view}"]'
    if ready:
        selector += "[data-ready]"
    # Attached, not visible: a page that failed to load is empty (and the error is shown).
    page.wait_for_selector(selector, state="attached")
    return page.locator(selector)


def set_key(page, key):
    if not page.url.startswith(console_url()):
        page.goto(console_url("#/usage"))
    page.fill("#api-key", key)
    page.click("#key-save")
    expect(page.locator("#key-state")).to_have_text("a key is set for this tab")


def expect_error(page, status, code):
    box = page.locator("#error")
    expect(box).to_be_visible()
    expect(box).to_have_attribute("data-status", str(status))
    expect(box).to_have_attribute("data-code", code)
    return box.inner_text()


def shot(page, name, check=True):
    # Nothing the console shows is a stray JavaScript value (`check`: a console page).
    if check:
        text = "\n" + page.inner_text("#view") + "\n"
        for stray in ["[object ", "undefined", "\nnull\n", "NaN"]:
            assert stray not in text, f"{name}: the page shows {stray.strip()!r}:\n{text}"
    path = Path(ARGS.out) / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return str(path)


def row_ids(page, table):
    return page.locator(f"#{table} tbody tr[data-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.id)"
    )


def need(*names):
    missing = [n for n in names if n not in STATE]
    if missing:
        raise AssertionError(f"needs {', '.join(missing)} from an earlier check that failed")
    return [STATE[n] for n in names]


# ---------------------------------------------------------------------------------------------
# Checks, in order: later ones use what earlier ones made (STATE).


def check_bad_key_shows_401(browser):
    context = browser.new_context()
    page = new_page(context, "no key")
    open_view(page, "#/jobs", "jobs", ready=False)
    text = expect_error(page, 401, "api_key_required")
    assert "API key" in text, text
    set_key(page, "not-a-key-of-anyone")
    text = expect_error(page, 401, "api_key_unknown")
    assert "401" in text, text
    shot(page, "error-401")
    context.close()


def check_playground_runs_programs(browser):
    context = STATE["context_a"]
    page = new_page(context, "A playground")
    page.goto(console_url("#/playground"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/playground", "playground")
    options = page.locator("#pg-language option").evaluate_all("os => os.map(o => o.value)")
    for language in ["python", "javascript", "bash", "c", "go", "rust", "java"]:
        assert language in options, f"{language} not offered: {options}"
    executions = []
    for language, code, stdout in [
        ("python", "import sys\nprint(6 * 7)\nprint('to stderr', file=sys.stderr)\n", "42"),
        ("javascript", "console.log([1, 2, 3].map((x) => x * 2).join(','));\n", "2,4,6"),
    ]:
        page.select_option("#pg-language", language)
        page.fill("#pg-code", code)
        page.click("#pg-run")
        status = page.locator("#pg-result #exec-status")
        expect(status).to_have_attribute("data-status", "passed", timeout=STEP_MS)
        expect(page.locator("#exec-stdout")).to_contain_text(stdout)
        expect(page.locator("#exec-exit")).to_have_text("0")
        expect(page.locator("#exec-duration")).to_contain_text("ms")
        link = page.locator("#pg-result a[href^='#/executions/']")
        executions.append(link.inner_text())
        if language == "python":
            expect(page.locator("#exec-stderr")).to_contain_text("to stderr")
            cpu = page.locator("#exec-cpu").inner_text()
            memory = page.locator("#exec-memory").inner_text()
            assert cpu.endswith("ms") and memory.endswith("KiB"), (cpu, memory)
            shot(page, "playground")
    # A failing program: its status, exit code and stderr.
    page.select_option("#pg-language", "python")
    page.fill("#pg-code", "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)\n")
    page.click("#pg-run")
    expect(page.locator("#pg-result #exec-status")).to_have_attribute("data-status", "failed")
    expect(page.locator("#exec-exit")).to_have_text("3")
    expect(page.locator("#exec-stderr")).to_contain_text("oops")
    executions.append(page.locator("#pg-result a[href^='#/executions/']").inner_text())
    # A request the API refuses: its code and message are shown.
    page.fill("#pg-timeout", "999999999")
    page.click("#pg-run")
    text = expect_error(page, 422, "invalid_field")
    assert "timeout_ms" in text, text
    shot(page, "error-422")
    STATE["executions_a"] = executions
    page.close()


def check_job_submitted_and_watched(browser):
    context = STATE["context_a"]
    page = new_page(context, "A job")
    page.goto(console_url("#/jobs"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/jobs", "jobs")
    page.fill(
        "#job-instruction",
        "Find all primes up to n with the sieve of Eratosthenes, and sum them.",
    )
    page.select_option("#job-language", "python")
    page.click("#job-submit")
    page.wait_for_url(re.compile(r".*#/jobs/[0-9a-f-]{36}$"))
    job_id = page.url.rsplit("/", 1)[1]
    STATE["job_a"] = job_id
    status = page.locator("#job-status")
    status.wait_for()
    # Watched live: the page shows it under way, with its progress, before it ends.
    first = status.get_attribute("data-status")
    assert first not in ("succeeded", "failed", "cancelled"), f"already {first} when first shown"
    page.wait_for_selector('#job-events li[data-event="planned"]')
    page.wait_for_selector("#job-functions tr[data-function='sieve']")
    seen_running = status.get_attribute("data-status")
    # The graph is drawn from the plan, before any function ran.
    page.wait_for_selector("#job-graph g.node[data-function='sum_primes']", state="attached")
    shot(page, "job-running")
    expect(status).to_have_attribute("data-status", "succeeded", timeout=JOB_WAIT_MS)
    check_job_pictures(page)
    events = page.locator("#job-events li").evaluate_all("items => items.map(i => i.dataset.event)")
    for expected in ["queued", "planned", "function_started", "attempt", "function_done", "finished"]:
        assert expected in events, f"{expected} not among the events shown: {events}"
    assert events[-1] == "finished", events
    expect(page.locator("#job-all-passed")).to_have_text("yes")
    expect(page.locator("#job-tests")).to_have_text("9 / 9")
    expect(page.locator("#job-repairs")).to_have_text("1")
    for name, cases in [("sieve", 5), ("sum_primes", 4)]:
        section = page.locator(f"#job-function-details section[data-function='{name}']")
        expect(section.locator("table.tests tbody tr")).to_have_count(cases)
        expect(section.locator("table.tests .badge[data-status='passed']")).to_have_count(cases)
    repair = page.locator("section[data-function='sum_primes'] table.repairs tr.repair")
    expect(repair).to_have_count(1)
    expect(repair).to_contain_text("runtime")
    expect(page.locator("#job-quality")).to_contain_text("9 of 9 passed")
    expect(page.locator("#job-progress")).to_have_attribute("value", "2")
    shot(page, "job")
    STATE["job_events_shown"] = len(events)
    RESULTS.append({"note": f"job {job_id} first shown {first}, then {seen_running}"})
    page.close()


def check_job_pictures(page):
    """The ended job's graph (each function passed, the edge sieve → sum_primes), its timeline
    (the plan's bar, one bar per attempt, each in the worker's lane) and its events' times."""
    graph = page.locator("#job-graph")
    for name in ["sieve", "sum_primes"]:
        expect(graph.locator(f"g.node[data-function='{name}']")).to_have_attribute("data-state", "passed")
    expect(graph.locator("path.edge[data-from='sieve'][data-to='sum_primes']")).to_have_count(1)
    expect(graph.locator("path.edge")).to_have_count(1)
    timeline = page.locator("#job-timeline")
    expect(timeline.locator("g.bar[data-function='plan']")).to_have_count(1)
    expect(timeline.locator("g.bar[data-function='sieve']")).to_have_count(1)
    # sum_primes was repaired once: two attempts, the first failed.
    repaired = timeline.locator("g.bar[data-function='sum_primes']")
    expect(repaired).to_have_count(2)
    outcomes = repaired.evaluate_all("bars => bars.map(b => [b.dataset.attempt, b.dataset.outcome])")
    assert outcomes == [["1", "failed"], ["2", "passed"]], outcomes
    expect(timeline.locator("g.bar[data-outcome='running']")).to_have_count(0)
    workers = timeline.locator("g.bar:not([data-function='plan'])").evaluate_all(
        "bars => [...new Set(bars.map(b => b.dataset.worker))]"
    )
    # One worker ran them, named to a tenant by an alias (the same all through the job), never
    # by its host's name.
    assert len(workers) == 1 and workers[0].startswith("worker-"), f"the attempts' lanes: {workers}"
    assert ARGS.worker not in page.inner_text("#view"), "a tenant's page names the worker's host"
    # Bars start where the work did: the plan before the functions, sieve before sum_primes
    # (its dependency), a repair after its first attempt.
    # (in the job's milliseconds: a short bar is drawn wider than its time)
    spans = {
        (b["function"], b["attempt"]): (b["from"], b["to"])
        for b in timeline.locator("g.bar").evaluate_all(
            "bars => bars.map(b => ({function: b.dataset.function, attempt: b.dataset.attempt,"
            " from: +b.dataset.fromMs, to: +b.dataset.toMs}))"
        )
    }
    plan, sieve = spans[("plan", "1")], spans[("sieve", "1")]
    first, repair = spans[("sum_primes", "1")], spans[("sum_primes", "2")]
    assert all(start <= end for start, end in spans.values()), spans
    assert plan[1] <= sieve[0], spans
    assert sieve[1] <= first[0], spans
    assert first[1] == repair[0], spans
    # Events: times from the job's first event, in order, not stream ids.
    times = page.locator("#job-events li").evaluate_all("items => items.map(i => +i.dataset.atMs)")
    assert times[0] == 0 and times == sorted(times), times
    first_text = page.locator("#job-events li").first.inner_text()
    assert first_text.startswith("+0.000 s"), first_text
    assert not re.search(r"\d{13}-\d+", page.inner_text("#job-events")), "a raw stream id is shown"


# A four-function job as two workers ran it (in ms from its start): a and c at once on w1,
# b on w2 (failed once, repaired), then d, which calls the three, on w2.
PARALLEL_EVENTS = [
    (0, "queued", {}),
    (5, "planning", {}),
    (100, "planned", {"functions": ["a", "b", "c", "d"], "dependencies": {"d": ["a", "b", "c"]}}),
    (110, "function_started", {"function": "a", "worker": "w1"}),
    (120, "function_started", {"function": "b", "worker": "w2"}),
    (130, "function_started", {"function": "c", "worker": "w1"}),
    (400, "attempt", {"function": "a", "attempt": 1, "passed": True, "worker": "w1"}),
    (400, "function_done", {"function": "a", "passed": True, "attempts": 1}),
    (500, "attempt", {"function": "b", "attempt": 1, "passed": False, "worker": "w2"}),
    (650, "attempt", {"function": "c", "attempt": 1, "passed": True, "worker": "w1"}),
    (650, "function_done", {"function": "c", "passed": True, "attempts": 1}),
    (700, "attempt", {"function": "b", "attempt": 2, "passed": True, "worker": "w2"}),
    (700, "function_done", {"function": "b", "passed": True, "attempts": 2}),
    (710, "function_started", {"function": "d", "worker": "w2"}),
]


def check_pictures_of_parallel_work(browser):
    """The console's own drawing code, in the browser, on a job two workers ran in parallel:
    work one worker ran at once in two rows of its lane, each worker a lane, what still runs
    drawn to now, the dependant after its three dependencies."""
    page = new_page(STATE["context_a"], "pictures")
    page.goto(console_url("#/jobs"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/jobs", "jobs")
    drawn = page.evaluate(
        """events => {
            const C = window.CodegenCharts;
            const timed = events.map(([at, event, data]) => ({ at, event, data }));
            const deps = timed[2].data.dependencies;
            const graph = C.graph(["a", "b", "c", "d"], deps, () => ({ state: "done", passed: true, attempts: 1 }));
            const timeline = C.timeline(C.attempts(timed, 1000));
            const view = document.querySelector("#view > .page");
            view.append(graph, timeline);
            const bars = [...timeline.querySelectorAll("g.bar")].map((b) => {
                const r = b.querySelector("rect");
                return { key: `${b.dataset.function}#${b.dataset.attempt}`, worker: b.dataset.worker,
                         row: +b.dataset.row, outcome: b.dataset.outcome,
                         x: +r.getAttribute("x"), y: +r.getAttribute("y"), w: +r.getAttribute("width") };
            });
            const nodes = Object.fromEntries([...graph.querySelectorAll("g.node")].map((n) =>
                [n.dataset.function, +n.querySelector("rect").getAttribute("x")]));
            const edges = [...graph.querySelectorAll("path.edge")].map((e) => `${e.dataset.from}>${e.dataset.to}`);
            return { bars, nodes, edges };
        }""",
        PARALLEL_EVENTS,
    )
    bars = {b["key"]: b for b in drawn["bars"]}
    assert set(bars) == {"plan#1", "a#1", "b#1", "b#2", "c#1", "d#1"}, bars
    assert (bars["a#1"]["worker"], bars["c#1"]["worker"]) == ("w1", "w1"), bars
    # a and c ran at once on w1: two rows, c below a, overlapping in time.
    assert (bars["a#1"]["row"], bars["c#1"]["row"]) == (0, 1), bars
    assert bars["c#1"]["y"] > bars["a#1"]["y"], bars
    assert bars["c#1"]["x"] < bars["a#1"]["x"] + bars["a#1"]["w"], bars
    # b and its repair, then d, one after another in w2's one row, below w1's two.
    for key in ["b#1", "b#2", "d#1"]:
        assert (bars[key]["worker"], bars[key]["row"]) == ("w2", 0), bars
        assert bars[key]["y"] > bars["c#1"]["y"], bars
    assert bars["b#1"]["outcome"] == "failed" and bars["b#2"]["outcome"] == "passed", bars
    assert bars["d#1"]["outcome"] == "running", bars
    assert bars["d#1"]["x"] >= bars["b#2"]["x"] + bars["b#2"]["w"] - 0.01, bars
    # The graph: d in the column after its three dependencies, an edge from each.
    assert sorted(drawn["edges"]) == ["a>d", "b>d", "c>d"], drawn["edges"]
    nodes = drawn["nodes"]
    assert nodes["a"] == nodes["b"] == nodes["c"] < nodes["d"], nodes
    shot(page, "pictures-parallel", check=False)
    page.close()


def check_job_stream_resumes_with_last_event_id(browser):
    (job_id,) = need("job_a")
    context = STATE["context_a"]
    page = new_page(context, "A resume")
    page.goto(console_url("#/usage"))
    set_key(page, ARGS.key_a)
    requests = []

    def cut_first_stream(route):
        requests.append(route.request.headers.get("last-event-id"))
        if len(requests) > 1:
            route.continue_()
            return
        response = route.fetch()
        blocks = [b for b in response.text().split("\n\n") if "data:" in b]
        STATE["events_total"] = len(blocks)
        kept = blocks[:3]
        STATE["cut_after"] = next(
            line[3:].strip() for line in kept[-1].splitlines() if line.startswith("id:")
        )
        route.fulfill(response=response, body="\n\n".join(kept) + "\n\n")

    page.route(re.compile(r".*/v1/jobs/[^/]+/events$"), cut_first_stream)
    open_view(page, f"#/jobs/{job_id}", "jobs")
    expect(page.locator("#job-status")).to_have_attribute("data-status", "succeeded")
    total = STATE["events_total"]
    expect(page.locator("#job-events li")).to_have_count(total)
    ids = page.locator("#job-events li").evaluate_all("items => items.map(i => i.dataset.id)")
    assert len(set(ids)) == len(ids) == total, f"events repeated or missing: {ids}"
    assert requests[0] is None, requests
    assert requests[1] == STATE["cut_after"], f"resumed with {requests[1]}, not {STATE['cut_after']}"
    expect(page.locator("#job-stream")).to_contain_text("ended")
    page.close()


def check_jobs_list(browser):
    (job_id,) = need("job_a")
    page = new_page(STATE["context_a"], "A jobs")
    page.goto(console_url("#/jobs"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/jobs", "jobs")
    assert job_id in row_ids(page, "jobs-table")
    expect(page.locator(f"#jobs-table tr[data-id='{job_id}'] .badge")).to_have_text("succeeded")
    page.select_option("#jobs-status", "failed")
    expect(page.locator(f"#jobs-table tr[data-id='{job_id}']")).to_have_count(0)
    page.select_option("#jobs-status", "succeeded")
    expect(page.locator(f"#jobs-table tr[data-id='{job_id}']")).to_have_count(1)
    page.select_option("#jobs-status", "")
    expect(page.locator(f"#jobs-table tr[data-id='{job_id}']")).to_have_count(1)
    shot(page, "jobs")
    page.click(f"#jobs-table tr[data-id='{job_id}'] a")
    expect(page.locator("#job-status")).to_have_attribute("data-status", "succeeded")
    page.close()


def check_executions_list_and_pages(browser):
    (executions,) = need("executions_a")
    page = new_page(STATE["context_a"], "A executions")
    page.goto(console_url("#/executions"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/executions", "executions")
    listed = row_ids(page, "executions-table")
    assert set(executions) <= set(listed), f"{executions} not all in {listed}"
    shot(page, "executions")
    # Two a page: newest first, pages neither skip nor repeat.
    # The size applies when the field is left (its change event), as a person would.
    page.fill("#executions-pager-size", "2")
    page.locator("#executions-pager-size").blur()
    expect(page.locator("#executions-pager-info")).to_contain_text("page 1: 2 shown")
    seen = row_ids(page, "executions-table")
    pages = 1
    while page.locator("#executions-pager-next").is_enabled():
        page.click("#executions-pager-next")
        pages += 1
        expect(page.locator("#executions-pager-info")).to_contain_text(f"page {pages}:")
        seen += row_ids(page, "executions-table")
    assert seen == listed, f"paged {seen}, listed {listed}"
    assert pages >= 2, pages
    shot(page, "executions-last-page")
    page.click("#executions-pager button:has-text('Newer')")
    expect(page.locator("#executions-pager-info")).to_contain_text(f"page {pages - 1}:")
    # A detail.
    open_view(page, f"#/executions/{executions[0]}", "executions")
    expect(page.locator("#exec-status")).to_have_attribute("data-status", "passed")
    expect(page.locator("#exec-stdout")).to_contain_text("42")
    shot(page, "execution")
    page.close()


def check_batch_submitted_and_watched(browser):
    page = new_page(STATE["context_a"], "A batch")
    page.goto(console_url("#/batches"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/batches", "batches")
    lines = [
        {"instruction": "Sum the primes up to n, with a sieve.", "language": "python"},
        {"instruction": "List the primes up to n and add them up.", "max_iterations": 3},
    ]
    page.fill("#batch-jsonl", "\n".join(json.dumps(line) for line in lines))
    page.click("#batch-submit")
    page.wait_for_url(re.compile(r".*#/batches/[0-9a-f-]{36}$"))
    batch_id = page.url.rsplit("/", 1)[1]
    STATE["batch_a"] = batch_id
    expect(page.locator("#batch-jobs tbody tr")).to_have_count(2)
    expect(page.locator("#batch-status")).to_have_attribute("data-status", "done", timeout=JOB_WAIT_MS)
    expect(page.locator("#batch-count-succeeded")).to_have_text("2")
    expect(page.locator("#batch-progress")).to_have_attribute("value", "2")
    shot(page, "batch")
    open_view(page, "#/batches", "batches")
    assert batch_id in row_ids(page, "batches-table")
    shot(page, "batches")
    page.close()


def open_session(page):
    """Opens a python session from the sessions page; its id, with its page shown."""
    open_view(page, "#/sessions", "sessions")
    page.select_option("#session-language", "python")
    # A worker announces its sessions API a moment after it is ready: 503 until then.
    opened = re.compile(r".*#/sessions/[0-9a-f-]{36}$")
    deadline = time.monotonic() + STEP_MS / 1000
    while not opened.match(page.url):
        assert time.monotonic() < deadline, "no session opened: " + page.locator("#error").inner_text()
        page.click("#session-open")
        # The answer: the session's page, or an error (503 no_session_host: try again).
        page.wait_for_function(
            "() => /#\\/sessions\\/[0-9a-f-]{36}$/.test(location.hash)"
            " || !document.querySelector('#error').hidden"
        )
        error = page.locator("#error")
        if not opened.match(page.url):
            assert error.get_attribute("data-status") == "503", error.inner_text()
            time.sleep(1)
    session_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#session-state")).to_have_text("live")
    # A live session was ended by nothing.
    expect(page.locator("#session-ended-by")).to_have_count(0)
    return session_id


def ended_by_in_list(page, session_id):
    open_view(page, "#/sessions", "sessions")
    return page.locator(f"#sessions-table tr[data-id='{session_id}'] td.ended-by").inner_text()


def check_session_runs_cells(browser):
    page = new_page(STATE["context_a"], "A session")
    page.goto(console_url("#/sessions"))
    set_key(page, ARGS.key_a)
    session_id = open_session(page)
    STATE["session_a"] = session_id
    page.fill("#cell-code", "x = 21\nprint('set x')")
    page.click("#cell-run")
    expect(page.locator(".cell[data-cell='1'] .cell-stdout")).to_contain_text("set x")
    page.fill("#cell-code", "x * 2")
    page.click("#cell-run")
    expect(page.locator(".cell[data-cell='2'] .cell-value")).to_contain_text("42")
    page.fill("#cell-code", "1 / 0")
    page.click("#cell-run")
    expect(page.locator(".cell[data-cell='3']")).to_contain_text("ZeroDivisionError")
    shot(page, "session")
    open_view(page, "#/sessions", "sessions")
    assert session_id in row_ids(page, "sessions-table")
    shot(page, "sessions")
    open_view(page, f"#/sessions/{session_id}", "sessions")
    page.click("#session-delete")
    expect(page.locator("#session-state")).to_have_text("ended")
    # How it ended: its record's `ended_by` and reason.
    expect(page.locator("#session-ended-by")).to_have_text("deleted")
    expect(page.locator("#session-ended-reason")).to_have_text("deleted")
    assert ended_by_in_list(page, session_id) == "deleted"
    page.close()


def check_session_whose_kernel_died_says_how_it_ended(browser):
    page = new_page(STATE["context_a"], "A session ended by its kernel")
    page.goto(console_url("#/sessions"))
    set_key(page, ARGS.key_a)
    session_id = open_session(page)
    page.fill("#cell-code", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    page.click("#cell-run")
    # The cell's answer is the 409; the page then shows what ended the session, and why.
    text = expect_error(page, 409, "session_ended")
    assert "signal 9" in text, text
    expect(page.locator("#session-state")).to_have_text("ended")
    expect(page.locator("#session-ended-by")).to_have_text("kernel_died")
    expect(page.locator("#session-ended-reason")).to_contain_text("its kernel died")
    expect(page.locator("#session-ended-reason")).to_contain_text("signal 9")
    expect(page.locator("#cell-form")).to_be_hidden()
    shot(page, "session-ended")
    # Opened again later, it says the same; so does the list.
    open_view(page, f"#/sessions/{session_id}", "sessions")
    expect(page.locator("#session-ended-by")).to_have_text("kernel_died")
    assert ended_by_in_list(page, session_id) == "kernel_died"
    page.close()


def check_usage(browser):
    page = new_page(STATE["context_a"], "A usage")
    page.goto(console_url("#/usage"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/usage", "usage")
    jobs = int(page.locator("#usage-jobs").inner_text())
    executions = int(page.locator("#usage-executions").inner_text())
    expected_jobs = 1 + (2 if "batch_a" in STATE else 0)
    expected_executions = len(STATE.get("executions_a", []))
    assert jobs >= expected_jobs, f"usage shows {jobs} jobs, expected {expected_jobs}"
    assert executions >= expected_executions, f"{executions} executions, expected {expected_executions}"
    assert int(page.locator("#usage-model-calls").inner_text()) > 0
    # The charts: a bar per hour of the day's window (periods without work at zero), adding up
    # to the totals; per day, the same totals in one or two bars.
    charts = page.locator("#usage-charts")
    expect(charts).to_have_attribute("data-per", "hour")
    periods = int(charts.get_attribute("data-periods"))
    assert 24 <= periods <= 25, periods
    for chart, total in [("jobs", jobs), ("executions", executions)]:
        columns = page.locator(f"#usage-chart-{chart} g.column")
        expect(columns).to_have_count(periods)
        values = columns.evaluate_all("cs => cs.map(c => +c.dataset.value)")
        assert sum(values) == total, f"{chart}: {values} against {total}"
        assert sum(1 for v in values if v > 0) >= 1, values
    shot(page, "usage")
    page.select_option("#usage-per", "day")
    page.click("#usage-show")
    day = page.locator("#usage-charts")
    expect(day).to_have_attribute("data-per", "day")
    values = day.locator("#usage-chart-jobs g.column").evaluate_all("cs => cs.map(c => +c.dataset.value)")
    assert 1 <= len(values) <= 2 and sum(values) == jobs, values
    page.select_option("#usage-per", "auto")
    # Another tenant's usage is for admin tenants only.
    page.fill("#usage-tenant", ARGS.tenant_b)
    page.click("#usage-show")
    text = expect_error(page, 403, "forbidden")
    assert "admin" in text, text
    shot(page, "error-403")
    page.close()


def check_cluster_page(browser):
    """A tenant's key gets 403 on the cluster page; an admin's sees the worker with its pools
    and model, the queues with their consumers, and rates from the second refresh on."""
    page = new_page(STATE["context_a"], "A cluster")
    page.goto(console_url("#/cluster"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/cluster", "cluster", ready=False)
    text = expect_error(page, 403, "forbidden")
    assert "admin" in text, text
    page.close()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = new_page(context, "ops cluster")
    page.goto(console_url("#/cluster"))
    set_key(page, ARGS.key_ops)
    open_view(page, "#/cluster", "cluster")
    worker = page.locator(f"#cluster-worker-list tr[data-worker='{ARGS.worker}']")
    expect(worker).to_have_count(1)
    tasks = page.locator("#cluster-queues tr[data-queue$='.tasks']")
    expect(tasks).to_have_count(1)
    assert int(tasks.locator(".queue-consumers").inner_text()) >= 1
    lanes = page.locator("#cluster-queues tr[data-queue*='.tasks.tenant.acme']")
    expect(lanes).to_have_count(1)
    assert int(lanes.locator(".queue-consumers").inner_text()) >= 1
    pool = page.locator(f"#cluster-pools tr[data-worker='{ARGS.worker}'][data-language='python']")
    expect(pool).to_have_count(1)
    assert int(pool.locator(".pool-size").inner_text()) >= 1
    model = page.locator("#cluster-models tbody tr")
    expect(model).to_have_count(1)
    assert int(model.locator(".model-limit").inner_text()) >= 1
    # Rates need two announcements of a worker (every few seconds): the page refreshes by
    # itself until it has them.
    page.wait_for_selector("#cluster-live[data-rates]", state="attached")
    expect(page.locator("#cluster-rate-completed")).not_to_have_text("–")
    shot(page, "cluster")
    STATE["context_ops"] = context
    page.close()


# A phone's screen (an iPhone 12's CSS pixels).
PHONE = {"width": 390, "height": 844}


def check_every_page_fits_a_phone(browser):
    """Every page at a phone's width: drawn, nothing wider than the screen, a screenshot."""
    job, batch, executions = need("job_a", "batch_a", "executions_a")
    session = STATE.get("session_a")
    pages = [
        ("jobs", "#/jobs", "jobs", ARGS.key_a),
        ("job", f"#/jobs/{job}", "jobs", ARGS.key_a),
        ("batches", "#/batches", "batches", ARGS.key_a),
        ("batch", f"#/batches/{batch}", "batches", ARGS.key_a),
        ("executions", "#/executions", "executions", ARGS.key_a),
        ("execution", f"#/executions/{executions[0]}", "executions", ARGS.key_a),
        ("playground", "#/playground", "playground", ARGS.key_a),
        ("sessions", "#/sessions", "sessions", ARGS.key_a),
        ("usage", "#/usage", "usage", ARGS.key_a),
        ("lessons", "#/lessons", "lessons", ARGS.key_a),
        ("cluster", "#/cluster", "cluster", ARGS.key_ops),
    ] + ([("session", f"#/sessions/{session}", "sessions", ARGS.key_a)] if session else [])
    wide = []
    for key in [ARGS.key_a, ARGS.key_ops]:
        context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        page = new_page(context, "phone")
        page.goto(console_url("#/usage"))
        set_key(page, key)
        for name, hash_, view, for_key in pages:
            if for_key != key:
                continue
            open_view(page, hash_, view)
            if view == "jobs" and hash_ != "#/jobs":
                page.wait_for_selector("#job-timeline", state="attached")
            width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            if width[0] > width[1] + 1:
                wide.append(f"{name}: {width[0]} px wide on a {width[1]} px screen")
            shot(page, f"phone-{name}")
        context.close()
    assert not wide, "; ".join(wide)


def check_lessons(browser):
    """A's lesson (imported through the API) is listed, found by its words, shown with its
    fix and deleted; B sees none of A's."""
    import urllib.request

    lesson = {
        "id": "console-lesson-1", "language": "python", "error_kind": "runtime",
        "signature": "runtime: IndexError: list index out of range",
        "case": "first(xs=[]): expected null; got raised IndexError: list index out of range",
        "diff": "--- before\n+++ after\n-    return xs[0]\n+    return xs[0] if xs else None\n",
        "analysis": "An empty list was indexed.", "model": "scripted/m",
        "job": "0190a5b2-0000-7000-8000-000000000000", "function": "first", "source": "repair",
        "created_ms": 1, "given": True,
    }
    request = urllib.request.Request(
        f"{ARGS.url}/v1/lessons/import", data=(json.dumps(lesson) + "\n").encode(),
        method="POST",
        headers={"Authorization": f"Bearer {ARGS.key_a}", "Content-Type": "application/x-ndjson"},
    )
    with urllib.request.urlopen(request, timeout=STEP_MS / 1000) as response:
        assert json.loads(response.read())["added"] == 1
    page = new_page(STATE["context_a"], "A lessons")
    set_key(page, ARGS.key_a)
    open_view(page, "#/lessons", "lessons")
    assert "console-lesson-1" in row_ids(page, "lessons-table"), row_ids(page, "lessons-table")
    page.fill("#lessons-q", "empty list index")
    page.click("#lessons-search")
    expect(page.locator('#lessons-table tbody tr[data-id="console-lesson-1"]')).to_have_count(1)
    shot(page, "lessons")
    page.click('#lessons-table a[href="#/lessons/console-lesson-1"]')
    page.wait_for_selector('#view > .page[data-view="lessons"][data-ready]', state="attached")
    expect(page.locator("#lesson-signature")).to_have_text(lesson["signature"])
    expect(page.locator("#lesson-diff")).to_contain_text("+    return xs[0] if xs else None")
    expect(page.locator("#lesson-shown")).to_have_text("0")
    shot(page, "lesson")
    # B's console lists none of A's lessons.
    context_b = browser.new_context()
    page_b = new_page(context_b, "B lessons")
    set_key(page_b, ARGS.key_b)
    open_view(page_b, "#/lessons", "lessons")
    assert row_ids(page_b, "lessons-table") == [], row_ids(page_b, "lessons-table")
    context_b.close()
    # Deleted from its page: the list no longer has it.
    page.click("#lesson-delete")
    page.wait_for_function("() => location.hash === '#/lessons'")
    page.wait_for_selector('#view > .page[data-view="lessons"][data-ready]', state="attached")
    assert "console-lesson-1" not in row_ids(page, "lessons-table")
    page.close()


def check_tenant_b_sees_none_of_a(browser):
    job, batch, executions = need("job_a", "batch_a", "executions_a")
    session = STATE.get("session_a")
    context = browser.new_context()
    page = new_page(context, "B")
    page.goto(console_url("#/jobs"))
    set_key(page, ARGS.key_b)
    open_view(page, "#/jobs", "jobs")
    assert job not in row_ids(page, "jobs-table")
    expect(page.locator("#jobs-table")).to_contain_text("No jobs.")
    shot(page, "tenant-b-jobs")
    open_view(page, "#/executions", "executions")
    assert not set(executions) & set(row_ids(page, "executions-table"))
    open_view(page, "#/batches", "batches")
    assert batch not in row_ids(page, "batches-table")
    open_view(page, "#/sessions", "sessions")
    if session:
        assert session not in row_ids(page, "sessions-table")
    open_view(page, "#/usage", "usage")
    expect(page.locator("#usage-jobs")).to_have_text("0")
    # A's ids, opened with B's key: not found.
    for hash_, view in [
        (f"#/jobs/{job}", "jobs"),
        (f"#/executions/{executions[0]}", "executions"),
        (f"#/batches/{batch}", "batches"),
    ] + ([(f"#/sessions/{session}", "sessions")] if session else []):
        open_view(page, hash_, view)
        text = expect_error(page, 404, "not_found")
        assert "404" in text, text
        shot(page, f"tenant-b-{view}-404")
    # B's own program, which A does not see.
    open_view(page, "#/playground", "playground")
    page.select_option("#pg-language", "python")
    page.fill("#pg-code", "print('tenant b')")
    page.click("#pg-run")
    expect(page.locator("#pg-result #exec-status")).to_have_attribute("data-status", "passed")
    b_execution = page.locator("#pg-result a[href^='#/executions/']").inner_text()
    context.close()
    page = new_page(STATE["context_a"], "A after B")
    page.goto(console_url("#/executions"))
    set_key(page, ARGS.key_a)
    open_view(page, "#/executions", "executions")
    assert b_execution not in row_ids(page, "executions-table")
    open_view(page, f"#/executions/{b_execution}", "executions")
    expect_error(page, 404, "not_found")
    page.close()


def check_rate_limit_shows_429(browser):
    context = browser.new_context()
    page = new_page(context, "slow")
    page.goto(console_url("#/usage"))
    set_key(page, ARGS.key_slow)
    # Five requests at once against a rate of one a second: four are refused whatever the
    # machine's speed; the page shows one of the answers, so again until it shows a 429.
    deadline = time.monotonic() + STEP_MS / 1000
    while not (page.locator("#error").is_visible()
               and page.locator("#error").get_attribute("data-status") == "429"):
        assert time.monotonic() < deadline, "no 429 shown"
        page.evaluate("() => { for (let i = 0; i < 5; i++) "
                      "document.querySelector('#usage-show').click(); }")
        page.wait_for_timeout(200)
    text = expect_error(page, 429, "rate_limited")
    assert "Retry-After:" in text and "requests_per_second" in text, text
    shot(page, "error-429")
    context.close()


def check_api_docs_page_renders_the_document(browser):
    """/docs: Swagger UI from the binary renders this coordinator's /openapi.json (every
    operation, the new ones too), with no request to another origin and no CSP violation."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = new_page(context, "docs")
    document = json.loads(page.request.get(f"{ARGS.url}/openapi.json").text())
    operations = sum(
        1 for path in document["paths"].values() for method in path
        if method in ("get", "post", "put", "delete", "patch")
    )
    page.goto(f"{ARGS.url}/docs")
    assert page.url.endswith("/docs/"), page.url
    page.wait_for_selector(".swagger-ui .info .title")
    expect(page.locator(".swagger-ui .opblock")).to_have_count(operations)
    expect(page.locator(".swagger-ui .info .title")).to_contain_text(document["info"]["title"])
    # A route the document has is one the page shows, by its path.
    expect(page.locator('.opblock-summary-path[data-path="/v1/batches/{id}/results"]')).to_have_count(1)
    shot(page, "docs", check=False)
    context.close()


CHECKS = [
    check_api_docs_page_renders_the_document,
    check_bad_key_shows_401,
    check_playground_runs_programs,
    check_job_submitted_and_watched,
    check_pictures_of_parallel_work,
    check_job_stream_resumes_with_last_event_id,
    check_jobs_list,
    check_executions_list_and_pages,
    check_batch_submitted_and_watched,
    check_session_runs_cells,
    check_session_whose_kernel_died_says_how_it_ended,
    check_usage,
    check_cluster_page,
    check_lessons,
    check_tenant_b_sees_none_of_a,
    check_every_page_fits_a_phone,
    check_rate_limit_shows_429,
]


def main():
    global ARGS
    ARGS = parse_args()
    # Every expectation may wait as long as a step: a slow machine, not a failure.
    expect.set_options(timeout=STEP_MS)
    Path(ARGS.out).mkdir(parents=True, exist_ok=True)
    passed = failed = 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=ARGS.chromium,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        STATE["context_a"] = browser.new_context(viewport={"width": 1280, "height": 900})
        for check in CHECKS:
            name = check.__name__.removeprefix("check_")
            if ARGS.only and name not in ARGS.only:
                continue
            started = time.monotonic()
            try:
                check(browser)
            except Exception as error:  # noqa: BLE001 - every failure is reported
                failed += 1
                detail = "".join(traceback.format_exception_only(type(error), error)).strip()
                print(f"FAIL {name} ({time.monotonic() - started:.1f} s): {detail}", flush=True)
                traceback.print_exc()
                for page in STATE["context_a"].pages:
                    try:
                        shot(page, f"failure-{name}", check=False)
                    except Exception:  # noqa: BLE001 - the page may be gone
                        pass
                RESULTS.append({"check": name, "passed": False, "error": detail})
                for page in list(STATE["context_a"].pages):
                    page.close()
            else:
                passed += 1
                print(f"PASS {name} ({time.monotonic() - started:.1f} s)", flush=True)
                RESULTS.append({"check": name, "passed": True})
        browser.close()
    if BROWSER_PROBLEMS:
        failed += 1
        print("FAIL browser_problems: " + "; ".join(BROWSER_PROBLEMS), flush=True)
    screenshots = sorted(p.name for p in Path(ARGS.out).glob("*.png"))
    print(f"screenshots in {ARGS.out}: {', '.join(screenshots)}")
    print(f"{passed} passed, {failed} failed")
    print(json.dumps({"passed": passed, "failed": failed, "results": RESULTS, "out": ARGS.out}))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
