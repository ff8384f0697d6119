// The codegen-cluster console: one page whose views are chosen by the location hash
// (#/jobs, #/jobs/ID, #/batches, #/executions, #/playground, #/sessions, #/usage, #/lessons,
// #/cluster), each rendered from the public API with fetch(), its pictures by charts.js. No
// framework, no build step, nothing loaded from anywhere but this coordinator; every text
// from the API goes into the page as text
// (textContent), never as markup. docs/console.md describes it.
"use strict";

(() => {
  const KEY_STORAGE = "codegen-console.api-key";
  const JOB_FINAL = ["succeeded", "failed", "cancelled"];
  const PAGE_SIZE = 20;
  const Charts = window.CodegenCharts;

  // ---------------------------------------------------------------------------------------
  // DOM helpers

  /** An element: `props` sets attributes (`class`, `text`, `on<event>` listeners, and the
   * properties `value`, `checked`, `disabled`, `selected`, `hidden`), then the children
   * (nodes, or anything else as text). */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    const late = [];
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") el.className = value;
      else if (name === "text") el.textContent = String(value);
      else if (name.startsWith("on") && typeof value === "function") {
        el.addEventListener(name.slice(2), value);
      } else if (name === "value") late.push(() => { el.value = value; });
      else if (["checked", "disabled", "selected", "hidden", "required"].includes(name)) {
        el[name] = Boolean(value);
      } else el.setAttribute(name, value === true ? "" : String(value));
    }
    add(el, children);
    for (const set of late) set();
    return el;
  }

  function add(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  /** Replaces `el`'s children (nulls skipped, arrays flattened, as `h` does). */
  function fill(el, ...children) {
    el.replaceChildren();
    return add(el, children);
  }

  const $ = (selector, root = document) => root.querySelector(selector);

  function badge(status) {
    const good = ["succeeded", "passed", "done", "ok", "live", "delivered"];
    const bad = ["failed", "cancelled", "error", "timeout", "memory_limit", "cpu_time_limit",
      "compile_error", "output_limit", "sandbox_error", "lost", "ended", "unknown"];
    const kind = good.includes(status) ? "ok" : bad.includes(status) ? "bad" : "run";
    return h("span", { class: `badge ${kind}`, "data-status": status, text: status });
  }

  function when(ms) {
    if (ms === undefined || ms === null) return "";
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function json(value) {
    return value === undefined ? "" : JSON.stringify(value);
  }

  function pre(text, props = {}) {
    const empty = text === undefined || text === null || text === "";
    return h("pre", { ...props, class: empty ? "empty" : props.class }, empty ? "(empty)" : text);
  }

  function stat(label, value, id) {
    return h("div", { class: "stat" },
      h("div", { class: "label", text: label }),
      h("div", { class: "value", id, text: value === undefined || value === null ? "–" : value }));
  }

  function table(headers, rows, props = {}) {
    return h("table", props,
      h("thead", {}, h("tr", {}, headers.map((name) => {
        const numeric = name.endsWith("#");
        return h("th", { class: numeric ? "num" : null, text: numeric ? name.slice(0, -1) : name });
      }))),
      h("tbody", {}, rows));
  }

  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal && signal.aborted) return reject(signal.reason);
      const timer = setTimeout(resolve, ms);
      if (signal) {
        signal.addEventListener("abort", () => { clearTimeout(timer); reject(signal.reason); },
          { once: true });
      }
    });
  }

  // ---------------------------------------------------------------------------------------
  // The API key and calls

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  }

  function authHeaders(extra = {}) {
    const headers = { ...extra };
    const key = apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    return headers;
  }

  /** A call that did not succeed: the server's ErrorBody (`error`, `code`, `param`, `limit`)
   * with the status and `Retry-After`, or a network failure (status 0). */
  class ApiError extends Error {
    constructor(call, status, body, retryAfter) {
      const message = body && typeof body === "object" && body.error ? body.error
        : typeof body === "string" && body ? body : `HTTP ${status}`;
      super(message);
      this.call = call;
      this.status = status;
      this.code = body && typeof body === "object" && body.code ? body.code
        : status === 0 ? "network_error" : `http_${status}`;
      this.param = body && body.param;
      this.limit = body && body.limit;
      this.retryAfter = retryAfter;
    }

    describe() {
      const parts = [`${this.call}: ${this.status || "no answer"} ${this.code}: ${this.message}`];
      if (this.param) parts.push(`param: ${this.param}`);
      if (this.limit) parts.push(`limit: ${this.limit}`);
      if (this.retryAfter) parts.push(`Retry-After: ${this.retryAfter} s`);
      if (this.status === 401) parts.push("Enter this tenant's API key above.");
      return parts.join("\n");
    }
  }

  async function errorOf(call, response) {
    const text = await response.text().catch(() => "");
    let body = text;
    try { body = JSON.parse(text); } catch (_) { /* not JSON: shown as text */ }
    return new ApiError(call, response.status, body, response.headers.get("Retry-After"));
  }

  /** `method path` with the key; a JSON body, or a string with its `contentType`. Answers
   * `{status, data, headers}`; throws an ApiError unless 2xx. */
  async function api(method, path, options = {}) {
    const { body, query, signal, contentType } = options;
    const headers = authHeaders({ Accept: "application/json" });
    let payload;
    if (typeof body === "string") {
      payload = body;
      headers["Content-Type"] = contentType || "text/plain";
    } else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    let url = path;
    if (query) {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(query)) {
        if (value !== undefined && value !== null && value !== "") params.set(name, value);
      }
      const text = params.toString();
      if (text) url += `?${text}`;
    }
    const call = `${method} ${path}`;
    let response;
    try {
      response = await fetch(url, {
        method, headers, body: payload, signal, cache: "no-store", credentials: "omit",
      });
    } catch (e) {
      if (signal && signal.aborted) throw e;
      throw new ApiError(call, 0, { error: `the coordinator did not answer (${e.message})` });
    }
    if (!response.ok) throw await errorOf(call, response);
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
    return { status: response.status, data, headers: response.headers };
  }

  /** Reads a server-sent event stream with fetch() (EventSource cannot send the key) and
   * calls `onEvent({id, event, data})` for each event, until an event named `last` or the
   * signal. A connection that breaks or ends early is opened again with `Last-Event-ID`, so
   * the stream resumes after the last event seen; 429 and 503 are retried after their
   * `Retry-After`, any other error is thrown. */
  async function readEvents(path, { signal, onEvent, onState, last = "finished" }) {
    let lastId = null;
    let failures = 0;
    let emptyRounds = 0;
    for (;;) {
      const headers = authHeaders({ Accept: "text/event-stream" });
      if (lastId !== null) headers["Last-Event-ID"] = lastId;
      let response;
      try {
        response = await fetch(path, { headers, signal, cache: "no-store", credentials: "omit" });
      } catch (e) {
        if (signal.aborted) return;
        failures += 1;
        onState(`disconnected (${e.message}); reconnecting`);
        await sleep(Math.min(500 * 2 ** failures, 10000), signal);
        continue;
      }
      if (!response.ok) {
        const error = await errorOf(`GET ${path}`, response);
        if (response.status !== 429 && response.status !== 503) throw error;
        failures += 1;
        onState(`${error.status} ${error.code}; retrying`);
        await sleep(1000 * (Number(error.retryAfter) || 2 ** Math.min(failures, 4)), signal);
        continue;
      }
      onState(lastId === null ? "streaming" : `streaming (resumed after event ${lastId})`);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      let data = [];
      let name = "";
      let id = null;
      let ended = false;
      let received = 0;
      let broken = false;
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let newline;
          while ((newline = buffer.indexOf("\n")) >= 0) {
            let line = buffer.slice(0, newline);
            buffer = buffer.slice(newline + 1);
            if (line.endsWith("\r")) line = line.slice(0, -1);
            if (line === "") {
              if (data.length) {
                if (id !== null) lastId = id;
                let parsed = data.join("\n");
                try { parsed = JSON.parse(parsed); } catch (_) { /* kept as text */ }
                const event = name || "message";
                failures = 0;
                received += 1;
                onEvent({ id, event, data: parsed });
                if (event === last) ended = true;
              }
              data = [];
              name = "";
              id = null;
              continue;
            }
            if (line.startsWith(":")) continue; // a keep-alive comment
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            let value = colon < 0 ? "" : line.slice(colon + 1);
            if (value.startsWith(" ")) value = value.slice(1);
            if (field === "data") data.push(value);
            else if (field === "event") name = value;
            else if (field === "id") id = value;
          }
          if (ended) {
            reader.cancel().catch(() => {});
            break;
          }
        }
      } catch (e) {
        if (signal.aborted) return;
        broken = true;
        onState(`connection broken (${e.message}); resuming`);
      }
      if (ended) {
        onState("ended");
        return;
      }
      if (signal.aborted) return;
      // A stream the server ended again and again with nothing new: the job's events are
      // gone (its state expired); stop asking.
      emptyRounds = received || broken ? 0 : emptyRounds + 1;
      if (emptyRounds >= 3) {
        onState("ended without a finished event");
        return;
      }
      failures += 1;
      onState("stream ended early; resuming");
      await sleep(Math.min(250 * 2 ** failures, 5000), signal);
    }
  }

  // ---------------------------------------------------------------------------------------
  // Errors

  function clearError() {
    const box = $("#error");
    box.hidden = true;
    box.textContent = "";
    box.removeAttribute("data-status");
    box.removeAttribute("data-code");
  }

  function showError(error) {
    const box = $("#error");
    if (error instanceof ApiError) {
      box.textContent = error.describe();
      box.setAttribute("data-status", String(error.status));
      box.setAttribute("data-code", error.code);
    } else {
      box.textContent = `The console failed: ${error && error.message ? error.message : error}`;
      box.setAttribute("data-status", "0");
      box.setAttribute("data-code", "console_error");
    }
    box.hidden = false;
  }

  /** Runs `action` (an async function) for a button: disabled meanwhile, errors shown. */
  function act(button, action) {
    return async (event) => {
      if (event) event.preventDefault();
      clearError();
      button.disabled = true;
      try {
        await action();
      } catch (e) {
        if (e && e.name === "AbortError") return;
        showError(e);
      } finally {
        button.disabled = false;
      }
    };
  }

  // ---------------------------------------------------------------------------------------
  // Shared data

  let languagesCache = null;
  async function languages(signal) {
    if (!languagesCache) {
      const { data } = await api("GET", "/v1/languages", { signal });
      languagesCache = data.languages;
    }
    return languagesCache;
  }

  /** A list view's pages: `load(cursor, limit)` renders one; `Older` goes on from its
   * `next_cursor`, `Newer` returns to the page before (the cursors seen are kept). */
  function pager(id, load) {
    const seen = [];
    let cursor = null;
    let next = null;
    const info = h("span", { class: "muted", id: `${id}-info` });
    const size = h("input", {
      id: `${id}-size`, type: "number", min: 1, max: 100, value: String(PAGE_SIZE), class: "size",
    });
    const first = h("button", { class: "secondary", type: "button", text: "Newest" });
    const back = h("button", { class: "secondary", type: "button", text: "Newer" });
    const forward = h("button", { class: "secondary", type: "button", text: "Older", id: `${id}-next` });
    const bar = h("div", { class: "pager", id }, first, back, forward, info,
      h("label", {}, "per page ", size));
    const buttons = () => {
      forward.disabled = !next;
      back.disabled = seen.length === 0;
      first.disabled = seen.length === 0;
    };
    const show = async () => {
      const limit = Math.min(Math.max(Number(size.value) || PAGE_SIZE, 1), 100);
      const { nextCursor, count } = await load(cursor, limit);
      next = nextCursor || null;
      info.textContent = `page ${seen.length + 1}: ${count} shown${next ? "" : ", the last page"}`;
      buttons();
    };
    // The buttons are off while a page loads, then say where one can go from the page shown.
    const go = (move) => async () => {
      clearError();
      const before = { seen: [...seen], cursor };
      for (const button of [first, back, forward]) button.disabled = true;
      try {
        await move();
      } catch (e) {
        seen.splice(0, seen.length, ...before.seen);
        cursor = before.cursor;
        if (e && e.name !== "AbortError") showError(e);
      } finally {
        buttons();
      }
    };
    const reset = async () => { seen.length = 0; cursor = null; await show(); };
    first.addEventListener("click", go(reset));
    size.addEventListener("change", go(reset));
    back.addEventListener("click", go(async () => { cursor = seen.pop() || null; await show(); }));
    forward.addEventListener("click", go(async () => {
      if (!next) return;
      seen.push(cursor);
      cursor = next;
      await show();
    }));
    return { bar, show, reset };
  }

  // ---------------------------------------------------------------------------------------
  // Jobs

  async function jobsView(root, signal) {
    const langs = (await languages(signal)).filter((l) => l.generation);
    const instruction = h("textarea", {
      id: "job-instruction", rows: 3, required: true,
      placeholder: "Find all primes up to n with the sieve of Eratosthenes, and sum them.",
    });
    const language = h("select", { id: "job-language" },
      h("option", { value: "", text: "from the instruction (else Python)" }),
      langs.map((l) => h("option", { value: l.name, text: `${l.name} (${l.version})` })));
    const iterations = h("input", { id: "job-iterations", type: "number", min: 1, max: 10, placeholder: "3" });
    const submit = h("button", { id: "job-submit", type: "submit", text: "Submit job" });
    const form = h("form", { class: "panel", id: "job-form" },
      h("h3", { text: "New job" }),
      h("label", { for: "job-instruction", text: "Instruction" }), instruction,
      h("div", { class: "row" },
        h("label", {}, "Language", language),
        h("label", {}, "Attempts per function", iterations),
        submit));
    form.addEventListener("submit", act(submit, async () => {
      const body = { instruction: instruction.value };
      if (language.value) body.language = language.value;
      if (iterations.value) body.max_iterations = Number(iterations.value);
      const { data } = await api("POST", "/v1/jobs", { body });
      location.hash = `#/jobs/${encodeURIComponent(data.job_id)}`;
    }));

    const status = h("select", { id: "jobs-status" },
      ["", "queued", "planning", "running", "integrating", "succeeded", "failed", "cancelled"]
        .map((s) => h("option", { value: s, text: s || "any status" })));
    const rows = h("tbody", {});
    const list = table(["Job", "Status", "Submitted", "Language", "Instruction"], [], { id: "jobs-table" });
    list.replaceChild(rows, list.tBodies[0]);
    const pages = pager("jobs-pager", async (cursor, limit) => {
      const { data } = await api("GET", "/v1/jobs", {
        signal, query: { limit, cursor, status: status.value },
      });
      rows.replaceChildren(...data.jobs.map((job) => h("tr", { "data-id": job.job_id },
        h("td", {}, h("a", { class: "mono", href: `#/jobs/${job.job_id}`, text: job.job_id })),
        h("td", {}, badge(job.status)),
        h("td", { text: when(job.submitted_at_ms) }),
        h("td", { text: job.language }),
        h("td", { text: job.instruction }))));
      if (!data.jobs.length) rows.append(h("tr", {}, h("td", { colspan: 5, class: "muted", text: "No jobs." })));
      return { nextCursor: data.next_cursor, count: data.jobs.length };
    });
    status.addEventListener("change", () => pages.reset().catch(showError));
    root.append(h("h2", { text: "Jobs" }), form,
      h("div", { class: "row" }, h("label", {}, "Status", status)),
      list, pages.bar);
    await pages.show();
  }

  /** The per-function progress of a job, from its events (or its progress view). */
  function progressModel() {
    return { status: "queued", order: [], functions: new Map(), dependencies: {} };
  }

  function applyEvent(model, event) {
    const d = event.data || {};
    const fn = (name) => {
      if (!model.functions.has(name)) {
        model.functions.set(name, { state: "waiting", attempts: 0, passed: false });
        model.order.push(name);
      }
      return model.functions.get(name);
    };
    switch (event.event) {
      case "queued": model.status = "queued"; break;
      case "planning": model.status = "planning"; break;
      case "replanning": model.status = "planning"; break;
      case "planned":
        model.status = "running";
        for (const name of d.functions || []) fn(name);
        model.dependencies = d.dependencies || {};
        break;
      case "function_started": fn(d.function).state = "running"; break;
      case "function_cached": Object.assign(fn(d.function), { state: "cached", passed: true }); break;
      case "attempt": {
        const f = fn(d.function);
        f.attempts = Math.max(f.attempts, d.attempt || 0);
        f.passed = Boolean(d.passed);
        f.lastError = d.passed ? null : d.error_kind;
        break;
      }
      case "function_done":
        Object.assign(fn(d.function), { state: "done", passed: Boolean(d.passed), attempts: d.attempts });
        break;
      // An agent job's run: under way from its first recorded step.
      case "agent_step": if (!JOB_FINAL.includes(model.status)) model.status = "running"; break;
      case "finished": model.status = d.status; break;
      default: break;
    }
  }

  function describeEvent(event) {
    const d = event.data || {};
    switch (event.event) {
      case "planned": return `planned: ${(d.functions || []).join(", ")}`;
      case "replanning": return `replanning: ${d.problem}`;
      case "function_started": return `${d.function}: started${d.worker ? ` on ${d.worker}` : ""}`;
      case "function_cached": return `${d.function}: from the cache`;
      case "attempt":
        return `${d.function}: attempt ${d.attempt} ${d.passed ? "passed" : `failed${d.error_kind ? ` (${d.error_kind})` : ""}`}`;
      case "function_done":
        return `${d.function}: done, ${d.passed ? "passed" : "failed"} after ${d.attempts} attempt(s)`;
      case "agent_step": return `agent: ${describeStep(d.step || {})}`;
      case "finished":
        return `finished: ${d.status}${d.all_tests_passed ? ", all tests passed" : ""}` +
          `${d.validation && d.validation !== "none" ? `, ${d.validation}` : ""}${d.failure ? ` (${d.failure})` : ""}`;
      default: return event.event;
    }
  }

  function renderProgress(model, into) {
    const names = model.order;
    const done = names.filter((n) => ["done", "cached"].includes(model.functions.get(n).state)).length;
    const bar = h("progress", { id: "job-progress", max: Math.max(names.length, 1), value: done });
    fill(into,
      h("p", {}, bar, ` ${done} of ${names.length || "?"} functions done`),
      table(["Function", "State", "Attempts#", "Passed"], names.map((name) => {
        const f = model.functions.get(name);
        return h("tr", { "data-function": name },
          h("td", { class: "mono", text: name }),
          h("td", {}, badge(f.state === "done" ? (f.passed ? "passed" : "failed") : f.state)),
          h("td", { class: "num", text: f.attempts }),
          h("td", { text: f.passed ? "yes" : f.lastError ? `no (${f.lastError})` : "–" }));
      }), { id: "job-functions" }));
  }

  async function jobView(root, signal, id) {
    const path = `/v1/jobs/${encodeURIComponent(id)}`;
    const statusBox = h("span", { id: "job-status" });
    const streamState = h("span", { id: "job-stream", class: "muted" });
    const cancel = h("button", { class: "danger", type: "button", id: "job-cancel", text: "Cancel job", hidden: true });
    const progress = h("div", { id: "job-live" });
    // A pipeline job's functions; an agent job shows its transcript instead, as it grows.
    const progressSection = h("section", { id: "job-progress-section" },
      h("h3", { text: "Progress" }), progress);
    const transcript = agentTranscript();
    // The pictures: the functions as a graph, their attempts on a timeline by worker.
    const graphBox = h("div", { class: "picture", id: "job-graph-box" });
    const timelineBox = h("div", { class: "picture", id: "job-timeline-box" });
    const pictures = h("section", { id: "job-pictures", hidden: true },
      h("h3", { text: "Functions and their dependencies" }), graphBox,
      h("h3", { text: "Timeline" }),
      h("p", { class: "muted", text: "One bar per attempt, in the lane of the worker that ran it: bars one above another ran at the same time." }),
      timelineBox);
    const events = h("ol", { class: "events", id: "job-events" });
    const result = h("div", { id: "job-result" });
    const setStatus = (status) => {
      statusBox.replaceChildren(badge(status));
      statusBox.setAttribute("data-status", status);
      cancel.hidden = JOB_FINAL.includes(status);
    };
    const showAgent = () => {
      progressSection.hidden = true;
      transcript.section.hidden = false;
    };
    root.append(
      h("p", {}, h("a", { href: "#/jobs", text: "← Jobs" })),
      h("h2", {}, "Job ", h("span", { class: "mono", text: id }), " ", statusBox, " ", cancel),
      progressSection, pictures, transcript.section,
      h("h4", {}, "Events ", streamState), events,
      result);
    cancel.addEventListener("click", act(cancel, async () => {
      const { data } = await api("DELETE", path, { signal });
      setStatus(data.status);
      renderResult(data, result);
    }));

    const { data: first } = await api("GET", path, { signal });
    setStatus(first.status);
    const model = progressModel();
    if (first.functions) {
      for (const [name, f] of Object.entries(first.functions)) {
        model.order.push(name);
        model.functions.set(name, {
          state: f.done ? "done" : "waiting", attempts: f.attempts, passed: f.passed,
        });
      }
    }
    if (first.agent) showAgent();
    if (JOB_FINAL.includes(first.status)) renderResult(first, result);
    renderProgress(model, progress);

    const fresh = progressModel();
    let finished = false;
    // Each event's time is its stream id's (`<ms>-<seq>`), shown from the job's first event.
    const timed = [];
    let startMs = null;
    // Now, on the job's clock: the last event's time and what this page has seen pass since
    // it arrived (the browser's clock may differ from the cluster's).
    let lastAt = 0;
    let lastSeen = performance.now();
    const sinceStart = () => lastAt + (performance.now() - lastSeen);
    const drawPictures = () => {
      if (!fresh.order.length) return;
      pictures.hidden = false;
      fill(graphBox, Charts.graph(fresh.order, fresh.dependencies,
        (name) => fresh.functions.get(name)));
      fill(timelineBox, Charts.timeline(Charts.attempts(timed,
        finished ? Math.max(0, ...timed.map((e) => e.at)) : sinceStart())));
    };
    // While it runs, what is under way grows on the timeline.
    const ticking = setInterval(() => { if (!finished && !signal.aborted) drawPictures(); }, 1000);
    signal.addEventListener("abort", () => clearInterval(ticking), { once: true });
    await readEvents(`${path}/events`, {
      signal,
      onState: (state) => { streamState.textContent = `(${state})`; },
      onEvent: (event) => {
        const ms = Number.parseInt(String(event.id || "").split("-")[0], 10);
        const known = Number.isFinite(ms);
        if (known && startMs === null) startMs = ms;
        const at = known ? ms - startMs : sinceStart();
        lastAt = Math.max(lastAt, at);
        lastSeen = performance.now();
        timed.push({ at, event: event.event, data: event.data || {} });
        events.append(h("li", { "data-event": event.event, "data-id": event.id || "", "data-at-ms": at },
          h("span", { class: "muted mono", title: known ? when(ms) : null, text: `+${(at / 1000).toFixed(3)} s ` }),
          describeEvent(event)));
        events.scrollTop = events.scrollHeight;
        applyEvent(fresh, event);
        if (event.event === "agent_step") {
          showAgent();
          transcript.add(event.data.step || {});
        } else renderProgress(fresh, progress);
        if (event.event !== "finished") setStatus(fresh.status);
        else finished = true;
        if (event.event !== "agent_step") drawPictures();
      },
    });
    clearInterval(ticking);
    if (signal.aborted) return;
    drawPictures();
    // The result, once the stream said the job ended.
    const { data: done } = await api("GET", path, { signal });
    setStatus(done.status);
    if (done.agent) showAgent();
    if (finished || JOB_FINAL.includes(done.status)) renderResult(done, result);
  }

  function renderResult(job, into) {
    if (job && job.agent) {
      renderAgentOutcome(job, into);
      return;
    }
    if (!job || !job.function_specs) return;
    const q = job.quality || {};
    const m = job.metrics || {};
    const results = new Map((job.test_results || []).map((r) => [`${r.function}\u0000${r.test}`, r]));
    const repairs = job.improvement_history || [];
    const percent = (x) => (typeof x === "number" ? `${Math.round(x * 100)}%` : "–");
    const parts = [
      h("h3", { text: "Result" }),
      job.failure ? h("p", { class: "error-inline", id: "job-failure", text: `Failure: ${job.failure}` }) : null,
      h("div", { class: "stats", id: "job-summary" },
        stat("status", job.status),
        stat("language", job.language),
        stat("all tests passed", job.all_tests_passed ? "yes" : "no", "job-all-passed"),
        stat("validation", job.validation),
        stat("quality score", typeof q.score === "number" ? q.score.toFixed(2) : "–", "job-score"),
        stat("tests passed", `${q.tests_passed ?? "–"} / ${q.tests_total ?? "–"}`, "job-tests"),
        stat("coverage", percent(q.coverage)),
        stat("repairs", repairs.length, "job-repairs"),
        stat("model calls", m.model_calls),
        stat("tokens", m.tokens ? `${m.tokens.prompt} + ${m.tokens.completion}` : "–"),
        stat("total", m.total_ms !== undefined ? `${m.total_ms} ms` : "–"),
        stat("cache", m.cache)),
      job.language_reason ? h("p", { class: "muted", text: `Language: ${job.language_reason}` }) : null,
      job.manual_review_recommended ? h("p", { class: "error-inline", text: "Manual review recommended." }) : null,
      h("p", {}, h("strong", { text: "Instruction: " }), job.instruction),
    ];
    const functions = h("div", { id: "job-function-details" });
    for (const spec of job.function_specs) {
      const inputs = (spec.inputs || []).map((i) => `${i.name}: ${i.type}`).join(", ");
      const cases = (job.tests || {})[spec.name] || [];
      const fixes = repairs.filter((r) => r.function === spec.name);
      functions.append(h("section", { class: "panel", "data-function": spec.name },
        h("h4", { class: "mono", text: `${spec.name}(${inputs}) -> ${spec.outputs ? spec.outputs.type : "?"}` }),
        h("p", { text: spec.purpose }),
        spec.dependencies && spec.dependencies.length
          ? h("p", { class: "muted", text: `Depends on: ${spec.dependencies.join(", ")}` }) : null,
        h("details", { open: true }, h("summary", { text: "Code" }),
          pre((job.implementations || {})[spec.name], { class: "code" })),
        h("h4", { text: `Tests (${cases.length})` }),
        table(["Case", "Kind", "Inputs", "Expected", "Result"], cases.map((c) => {
          const r = results.get(`${spec.name}\u0000${c.name}`);
          const expected = c.expected_error ? `raises ${c.expected_error}` : json(c.expected_output);
          return h("tr", { "data-test": c.name },
            h("td", { class: "mono", text: c.name }),
            h("td", { text: c.kind }),
            h("td", { class: "mono", text: json(c.inputs) }),
            h("td", { class: "mono", text: expected }),
            h("td", {}, r ? badge(r.passed ? "passed" : "failed") : h("span", { class: "muted", text: "not run" }),
              r && !r.passed ? h("div", { class: "mono", text: r.error || `got ${json(r.actual_output)}` }) : null));
        }), { class: "tests" }),
        fixes.length ? h("h4", { text: `Repairs (${fixes.length})` }) : null,
        fixes.length ? table(["Attempt#", "Error kind", "Error", "Fix", "Lessons shown"], fixes.map((f) =>
          h("tr", { class: "repair" },
            h("td", { class: "num", text: f.attempt }),
            h("td", { text: f.error_kind }),
            h("td", { text: f.error }),
            h("td", { text: f.fix }),
            h("td", { class: "repair-lessons" }, (f.lessons || []).map((id) =>
              h("a", { class: "mono", href: `#/lessons/${encodeURIComponent(id)}`, text: id }))))), { class: "repairs" }) : null));
    }
    parts.push(h("h3", { text: "Functions" }), functions);
    parts.push(h("h3", { text: "Quality report" }), h("div", { class: "panel", id: "job-quality" },
      table(["Measure", "Value"], [
        ["score", typeof q.score === "number" ? q.score.toFixed(3) : "–"],
        ["tests", `${q.tests_passed ?? "–"} of ${q.tests_total ?? "–"} passed`],
        ["line coverage", q.coverage === null ? "not measured" : percent(q.coverage)],
        ["docstrings", q.docstrings === null ? "not measured" : percent(q.docstrings)],
        ["cyclomatic complexity", Object.entries(q.complexity || {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "–"],
        ["risky calls", (q.dangerous_calls || []).join(", ") || "none found"],
        ["not measured", (q.unmeasured || []).join(", ") || "–"],
        ["warnings", (q.warnings || []).join("; ") || "–"],
      ].map(([k, v]) => h("tr", {}, h("td", { text: k }), h("td", { text: v }))))));
    if (job.change) {
      const c = job.change;
      parts.push(h("h3", { text: `Change (${c.mode})` }), h("div", { class: "panel" },
        c.root_cause ? h("p", {}, h("strong", { text: "Root cause: " }), c.root_cause) : null,
        c.changes ? h("p", {}, h("strong", { text: "Changes: " }), c.changes) : null,
        pre(c.diff)));
    }
    if (job.documentation) {
      parts.push(h("details", {}, h("summary", { text: "Documentation" }), pre(job.documentation)));
    }
    if (job.webhook) {
      parts.push(h("h3", { text: "Webhook" }), pre(JSON.stringify(job.webhook, null, 2)));
    }
    fill(into, parts);
  }

  // ---------------------------------------------------------------------------------------
  // Agent jobs: the transcript as its steps arrive (`agent_step` events), then the outcome.
  // Every text here is the model's or the sandbox's: hostile, and only ever set as text.

  // What a step's arguments, text or observation show at most; the rest is counted, not shown
  // (GET /v1/jobs/{id}/transcript has it all).
  const ARGUMENT_CHARS = 2000;
  const TEXT_CHARS = 20000;
  const FILE_CHARS = 200000;

  const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
  const count = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "–");

  /** `text` cut to `limit` characters, and a note of what was left out. */
  function bounded(text, limit) {
    const value = text === undefined || text === null ? "" : String(text);
    if (value.length <= limit) return [value, null];
    return [value.slice(0, limit), h("p", {
      class: "cut-note", text: `… ${count(value.length - limit)} more characters not shown`,
    })];
  }

  function boundedPre(text, limit, props = {}) {
    const [shown, note] = bounded(text, limit);
    return [pre(shown, props), note];
  }

  function boundedText(text, limit, props = {}) {
    const [shown, note] = bounded(text, limit);
    return [h("div", { ...props, class: `agent-text${props.class ? ` ${props.class}` : ""}`, text: shown }), note];
  }

  /** One line of what a step is, for the events list. */
  function describeStep(step) {
    switch (step.kind) {
      case "start": return `start: ${step.model}, ${plural((step.tools || []).length, "tool")}`;
      case "model": {
        const calls = step.calls || [];
        return `step ${step.step}: ${calls.length ? calls.map((c) => c.tool).join(", ") : "no call"}` +
          `${step.problem ? " (malformed)" : ""}`;
      }
      case "observation":
        return `observation: ${step.tool}${step.error ? " (error)" : ""}${step.cut ? " (cut)" : ""}`;
      default: return String(step.kind);
    }
  }

  /** A call's arguments as the model wrote them: a JSON object's fields one per row (a
   * string as itself, anything else as indented JSON), each bounded; other text as written,
   * marked when it is not JSON. */
  function callArguments(raw) {
    let parsed;
    let json = true;
    try { parsed = JSON.parse(raw); } catch (_) { json = false; }
    if (!json || parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      return h("div", { class: "call-args" },
        json ? null : h("span", { class: "badge bad", "data-status": "not_json", text: "arguments are not JSON" }),
        boundedPre(json ? JSON.stringify(parsed, null, 2) : raw, ARGUMENT_CHARS, { class: "call-raw" }));
    }
    const fields = Object.entries(parsed);
    if (!fields.length) return h("div", { class: "call-args muted", text: "no arguments" });
    return table(["Argument", "Value"], fields.map(([name, value]) => {
      const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
      const long = text.includes("\n") || text.length > 100;
      const [shown, note] = bounded(text, ARGUMENT_CHARS);
      return h("tr", { "data-argument": name },
        h("td", { class: "mono", text: name }),
        h("td", {}, long ? pre(shown) : h("span", { class: "mono", text: text === "" ? '""' : shown }), note));
    }), { class: "call-args" });
  }

  function stepStart(step) {
    const tools = step.tools || [];
    return [
      h("h4", {}, "Start ",
        h("span", { class: "muted" }, "model ", h("span", { class: "mono", id: "agent-start-model", text: step.model }),
          " · ", h("span", { id: "agent-start-tools", text: plural(tools.length, "tool") }),
          ` · ${when(step.at_ms)} · worker ${step.worker}`)),
      h("details", {}, h("summary", { text: "Task" }), boundedPre(step.task, TEXT_CHARS)),
      h("details", {}, h("summary", { text: "System prompt" }), boundedPre(step.system, TEXT_CHARS)),
      h("details", {}, h("summary", { text: `Tools (${tools.length})` }),
        table(["Tool", "Description"], tools.map((t) => h("tr", { "data-tool": t.name },
          h("td", { class: "mono", text: t.name }), h("td", { text: t.description }))))),
    ];
  }

  function stepModel(step) {
    const calls = step.calls || [];
    return [
      h("h4", {}, `Step ${step.step} · model `,
        h("span", { class: "muted", text: `${plural(calls.length, "call")} · ${count(step.prompt_tokens)} + ` +
          `${count(step.completion_tokens)} tokens · ${count(step.duration_ms)} ms · worker ${step.worker}` })),
      step.text ? boundedText(step.text, TEXT_CHARS, { class: "model-text" }) : null,
      step.problem ? h("p", { class: "error-inline step-problem", text: `Malformed: ${step.problem}` }) : null,
      calls.map((c) => h("div", { class: "agent-call", "data-call-id": c.id, "data-tool": c.tool },
        h("div", {}, "Calls ", h("strong", { class: "mono call-tool", text: c.tool }), " ",
          h("span", { class: "muted mono", text: c.id })),
        callArguments(c.arguments))),
    ];
  }

  function stepObservation(step) {
    const cut = step.cut;
    return [
      h("h4", {}, "Observation · ", h("span", { class: "mono", text: step.tool }), " ",
        step.error ? h("span", { class: "badge bad observation-error", "data-status": "error", text: "error" })
          : h("span", { class: "badge ok", "data-status": "ok", text: "ok" }),
        step.malformed ? [" ", h("span", { class: "badge bad", "data-status": "malformed", text: "malformed" })] : null,
        h("span", { class: "muted", text: ` ${step.call_id ? `answers ${step.call_id} · ` : ""}` +
          `${count(step.duration_ms)} ms · CPU ${count(step.cpu_ms)} ms · worker ${step.worker}` })),
      boundedPre(step.content, TEXT_CHARS, { class: "observation-content" }),
      cut ? h("p", { class: "cut-note observation-cut",
        text: `Cut: ${count(cut.omitted_chars)} of ${count(cut.total_chars)} characters left out ` +
          "between the head and the tail, as the model was shown it." }) : null,
    ];
  }

  /** The transcript's section: hidden until a step arrives; `add(step)` shows one, once. */
  function agentTranscript() {
    const list = h("ol", { class: "agent-steps", id: "agent-steps" });
    const seen = new Set();
    const summary = h("span", { class: "muted", id: "agent-transcript-count" });
    const section = h("section", { id: "agent-transcript", hidden: true },
      h("h3", {}, "Transcript ", summary), list);
    const counts = { model: 0, observation: 0 };
    const add = (step) => {
      if (seen.has(step.index)) return;
      seen.add(step.index);
      const kind = ["start", "model", "observation"].includes(step.kind) ? step.kind : "other";
      const parts = kind === "start" ? stepStart(step)
        : kind === "model" ? stepModel(step)
          : kind === "observation" ? stepObservation(step)
            : [h("h4", { text: `Step of kind ${step.kind}` }), pre(JSON.stringify(step, null, 2))];
      const state = kind === "observation" ? (step.error ? " error" : " ok") : "";
      list.append(h("li", {
        class: `agent-step ${kind}${state}`, "data-kind": kind, "data-index": step.index,
        "data-step": step.step, "data-tool": step.tool, "data-error": kind === "observation" ? String(Boolean(step.error)) : null,
      }, parts));
      if (kind in counts) counts[kind] += 1;
      summary.textContent = `(${plural(counts.model, "model step")}, ${plural(counts.observation, "observation")})`;
    };
    return { section, add };
  }

  /** An agent job's outcome: why it ended, its answer, the files it named, what it spent. */
  function renderAgentOutcome(job, into) {
    const a = job.agent;
    const t = a.totals || {};
    const files = Object.entries(a.files || {});
    const missing = Object.entries(a.missing || {});
    const end = a.ended_by;
    fill(into,
      h("h3", { text: "Outcome" }),
      h("section", { id: "agent-outcome", "data-ended-by": end },
        h("p", {}, "Ended by ", h("span", {
          class: `badge ${end === "finished" ? "ok" : "bad"}`, id: "agent-ended-by", "data-status": end, text: end,
        }), " · session ", h("a", { class: "mono", href: `#/sessions/${encodeURIComponent(a.session_id)}`, text: a.session_id })),
        job.failure ? h("p", { class: "error-inline", id: "job-failure", text: `Failure: ${job.failure}` }) : null,
        h("div", { class: "stats", id: "agent-totals" },
          stat("status", job.status),
          stat("model steps", t.steps, "agent-total-steps"),
          stat("tool calls", t.tool_calls, "agent-total-tool-calls"),
          stat("model calls", t.model_calls, "agent-total-model-calls"),
          stat("tokens", `${count(t.prompt_tokens)} + ${count(t.completion_tokens)}`, "agent-total-tokens"),
          stat("sandbox CPU", `${count(t.sandbox_cpu_ms)} ms`, "agent-total-cpu"),
          stat("wall time", `${count(t.wall_ms)} ms`, "agent-total-wall"),
          stat("resumed", t.resumed, "agent-total-resumed")),
        h("h4", { text: "Answer" }),
        a.answer !== undefined && a.answer !== null
          ? boundedText(a.answer, TEXT_CHARS, { id: "agent-answer" })
          : h("p", { class: "muted", id: "agent-answer", text: "No answer: the run did not call finish." }),
        h("h4", { text: `Files (${files.length})` }),
        h("div", { id: "agent-files" },
          files.length ? files.map(([path, content]) => h("details", { class: "agent-file", "data-file": path },
            h("summary", {}, h("span", { class: "mono", text: path }),
              h("span", { class: "muted", text: ` ${count(content.length)} characters` })),
            boundedPre(content, FILE_CHARS, { class: "file-content" })))
            : h("p", { class: "muted", text: "No files named." })),
        missing.length ? [h("h4", { text: `Not returned (${missing.length})` }),
          table(["File", "Why"], missing.map(([path, why]) => h("tr", { "data-file": path },
            h("td", { class: "mono", text: path }), h("td", { text: why }))), { id: "agent-missing" })] : null,
        h("p", {}, h("strong", { text: "Instruction: " }), job.instruction)));
  }

  // ---------------------------------------------------------------------------------------
  // Batches

  const batchFinished = (counts) =>
    ["succeeded", "failed", "cancelled", "unknown"].reduce((n, s) => n + ((counts || {})[s] || 0), 0);

  async function batchesView(root, signal) {
    const lines = h("textarea", {
      id: "batch-jsonl", rows: 4, required: true,
      placeholder: '{"instruction": "Check whether a text is a palindrome.", "language": "python"}',
    });
    const submit = h("button", { id: "batch-submit", type: "submit", text: "Submit batch" });
    const form = h("form", { class: "panel", id: "batch-form" },
      h("h3", { text: "New batch" }),
      h("label", { for: "batch-jsonl", text: "Jobs, one JSON object per line (the body of POST /v1/jobs)" }),
      lines, h("div", { class: "row" }, submit));
    form.addEventListener("submit", act(submit, async () => {
      const { data } = await api("POST", "/v1/batches", {
        body: lines.value, contentType: "application/x-ndjson",
      });
      location.hash = `#/batches/${encodeURIComponent(data.batch_id)}`;
    }));
    const status = h("select", { id: "batches-status" },
      ["", "running", "done"].map((s) => h("option", { value: s, text: s || "any status" })));
    const rows = h("tbody", {});
    const list = table(["Batch", "Status", "Submitted", "Jobs#"], [], { id: "batches-table" });
    list.replaceChild(rows, list.tBodies[0]);
    const pages = pager("batches-pager", async (cursor, limit) => {
      const { data } = await api("GET", "/v1/batches", {
        signal, query: { limit, cursor, status: status.value },
      });
      rows.replaceChildren(...data.batches.map((b) => h("tr", { "data-id": b.batch_id },
        h("td", {}, h("a", { class: "mono", href: `#/batches/${b.batch_id}`, text: b.batch_id })),
        h("td", {}, badge(b.status)),
        h("td", { text: when(b.submitted_at_ms) }),
        h("td", { class: "num", text: b.jobs }))));
      if (!data.batches.length) rows.append(h("tr", {}, h("td", { colspan: 4, class: "muted", text: "No batches." })));
      return { nextCursor: data.next_cursor, count: data.batches.length };
    });
    status.addEventListener("change", () => pages.reset().catch(showError));
    root.append(h("h2", { text: "Batches" }), form,
      h("div", { class: "row" }, h("label", {}, "Status", status)), list, pages.bar);
    await pages.show();
  }

  async function batchView(root, signal, id) {
    const path = `/v1/batches/${encodeURIComponent(id)}`;
    const statusBox = h("span", { id: "batch-status" });
    const cancel = h("button", { class: "danger", type: "button", id: "batch-cancel", text: "Cancel batch", hidden: true });
    const body = h("div", { id: "batch-body" });
    root.append(
      h("p", {}, h("a", { href: "#/batches", text: "← Batches" })),
      h("h2", {}, "Batch ", h("span", { class: "mono", text: id }), " ", statusBox, " ", cancel),
      body);
    const render = (batch) => {
      statusBox.replaceChildren(badge(batch.status));
      statusBox.setAttribute("data-status", batch.status);
      cancel.hidden = batch.status === "done";
      const total = batch.jobs.length;
      const finished = batchFinished(batch.counts);
      fill(body,
        h("p", {}, h("progress", { id: "batch-progress", max: Math.max(total, 1), value: finished }),
          ` ${finished} of ${total} jobs finished`),
        h("div", { class: "stats", id: "batch-counts" },
          Object.entries(batch.counts).map(([s, n]) => stat(s, n, `batch-count-${s}`))),
        table(["#", "Job", "Status"], batch.jobs.map((job, i) => h("tr", { "data-id": job.job_id },
          h("td", { text: i + 1 }),
          h("td", {}, h("a", { class: "mono", href: `#/jobs/${job.job_id}`, text: job.job_id })),
          h("td", {}, badge(job.status)))), { id: "batch-jobs" }),
        batch.webhook ? pre(JSON.stringify(batch.webhook, null, 2)) : null);
    };
    cancel.addEventListener("click", act(cancel, async () => {
      render((await api("DELETE", path, { signal })).data);
    }));
    let { data: batch } = await api("GET", path, { signal });
    render(batch);
    // Live: long polls that answer as soon as the count of finished jobs changes.
    while (batch.status !== "done" && !signal.aborted) {
      try {
        ({ data: batch } = await api("GET", path, {
          signal, query: { wait_ms: 25000, finished: batchFinished(batch.counts) },
        }));
        render(batch);
      } catch (e) {
        if (signal.aborted) return;
        if (!(e instanceof ApiError) || ![0, 429, 503].includes(e.status)) throw e;
        showError(e);
        await sleep(1000 * (Number(e.retryAfter) || 2), signal);
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Executions and the playground

  async function executionsView(root, signal) {
    const states = ["", "queued", "passed", "failed", "timeout", "cpu_time_limit", "memory_limit",
      "compile_error", "output_limit", "sandbox_error", "error"];
    const status = h("select", { id: "executions-status" },
      states.map((s) => h("option", { value: s, text: s || "any status" })));
    const rows = h("tbody", {});
    const list = table(["Execution", "Status", "Submitted", "Language"], [], { id: "executions-table" });
    list.replaceChild(rows, list.tBodies[0]);
    const pages = pager("executions-pager", async (cursor, limit) => {
      const { data } = await api("GET", "/v1/executions", {
        signal, query: { limit, cursor, status: status.value },
      });
      rows.replaceChildren(...data.executions.map((e) => h("tr", { "data-id": e.id },
        h("td", {}, h("a", { class: "mono", href: `#/executions/${e.id}`, text: e.id })),
        h("td", {}, badge(e.status)),
        h("td", { text: when(e.submitted_at_ms) }),
        h("td", { text: e.language }))));
      if (!data.executions.length) rows.append(h("tr", {}, h("td", { colspan: 4, class: "muted", text: "No executions." })));
      return { nextCursor: data.next_cursor, count: data.executions.length };
    });
    status.addEventListener("change", () => pages.reset().catch(showError));
    root.append(h("h2", { text: "Executions" }),
      h("p", {}, "Run a program in the ", h("a", { href: "#/playground", text: "playground" }), "."),
      h("div", { class: "row" }, h("label", {}, "Status", status)), list, pages.bar);
    await pages.show();
  }

  function renderExecution(result, into) {
    const compile = result.compile;
    fill(into,
      h("p", {}, "Status ", h("span", { id: "exec-status", "data-status": result.status }, badge(result.status)),
        result.id ? [" · ", h("a", { class: "mono", href: `#/executions/${result.id}`, text: result.id })] : null),
      result.reason ? h("p", { class: "error-inline", id: "exec-reason", text: `${result.error_kind ? `${result.error_kind}: ` : ""}${result.reason}` }) : null,
      h("div", { class: "stats" },
        stat("exit code", result.exit_code, "exec-exit"),
        stat("wall time", result.duration_ms !== undefined ? `${result.duration_ms} ms` : null, "exec-duration"),
        stat("CPU", result.cpu_ms !== undefined && result.cpu_ms !== null ? `${result.cpu_ms} ms` : null, "exec-cpu"),
        stat("peak memory", result.peak_memory_kb !== undefined && result.peak_memory_kb !== null ? `${result.peak_memory_kb} KiB` : null, "exec-memory"),
        stat("truncated", result.truncated ? "yes" : "no")),
      h("h4", { text: "stdout" }), pre(result.stdout, { id: "exec-stdout" }),
      h("h4", { text: "stderr" }), pre(result.stderr, { id: "exec-stderr" }),
      compile ? [h("h4", { text: `Compile: ${compile.status} (${compile.duration_ms} ms)` }), pre(compile.output)] : null,
      result.files ? [h("h4", { text: "Files" }), pre(JSON.stringify(result.files, null, 2))] : null,
      result.file_errors ? [h("h4", { text: "File errors" }), pre(JSON.stringify(result.file_errors, null, 2))] : null);
  }

  /** Polls an execution until it has a verdict. */
  async function verdict(id, signal, into) {
    for (;;) {
      const { data } = await api("GET", `/v1/executions/${encodeURIComponent(id)}`, { signal });
      renderExecution(data, into);
      if (data.status !== "queued") return data;
      await sleep(1000, signal);
    }
  }

  async function executionView(root, signal, id) {
    const body = h("div", { id: "execution" });
    root.append(h("p", {}, h("a", { href: "#/executions", text: "← Executions" })),
      h("h2", {}, "Execution ", h("span", { class: "mono", text: id })), body);
    await verdict(id, signal, body);
  }

  const EXAMPLES = {
    python: 'print("hello, world")\nprint(sum(range(10)))\n',
    "python-sci": "import numpy as np\nprint(np.arange(10).sum())\n",
    javascript: 'console.log("hello, world");\nconsole.log([1, 2, 3].map((x) => x * 2));\n',
    typescript: 'const greet = (name: string): string => `hello, ${name}`;\nconsole.log(greet("world"));\n',
    bash: 'echo "hello, world"\necho $((6 * 7))\n',
    c: '#include <stdio.h>\n\nint main(void) {\n    printf("hello, world\\n");\n    return 0;\n}\n',
    cpp: '#include <iostream>\n\nint main() {\n    std::cout << "hello, world" << std::endl;\n}\n',
    go: 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hello, world")\n}\n',
    rust: 'fn main() {\n    println!("hello, world");\n}\n',
    java: 'public class Main {\n    public static void main(String[] args) {\n        System.out.println("hello, world");\n    }\n}\n',
  };

  async function playgroundView(root, signal) {
    const langs = await languages(signal);
    const language = h("select", { id: "pg-language" },
      langs.map((l) => h("option", { value: l.name, text: `${l.name} (${l.version})` })));
    const code = h("textarea", { id: "pg-code", rows: 12, spellcheck: "false" });
    const stdin = h("textarea", { id: "pg-stdin", rows: 2, spellcheck: "false", placeholder: "stdin (optional)" });
    const timeout = h("input", { id: "pg-timeout", type: "number", min: 1, placeholder: "10000" });
    const memory = h("input", { id: "pg-memory", type: "number", min: 16, placeholder: "256" });
    const run = h("button", { id: "pg-run", type: "submit", text: "Run" });
    const about = h("p", { class: "muted", id: "pg-about" });
    const result = h("div", { id: "pg-result" });
    let example = "";
    const choose = () => {
      const l = langs.find((x) => x.name === language.value);
      if (!code.value || code.value === example) {
        example = EXAMPLES[language.value] || "";
        code.value = example;
      }
      about.textContent = l ? `${l.name} ${l.version}${l.compiled ? ", compiled" : ""}; image ${l.image}` +
        `${l.libraries.length ? `; libraries: ${l.libraries.join(", ")}` : ""}; program + test: ${l.test_form}` : "";
    };
    language.addEventListener("change", choose);
    const form = h("form", { class: "panel", id: "pg-form" },
      h("div", { class: "row" }, h("label", {}, "Language", language), about),
      code, stdin,
      h("div", { class: "row" },
        h("label", {}, "Timeout (ms)", timeout),
        h("label", {}, "Memory (MiB)", memory),
        run, h("span", { class: "muted", text: "Ctrl+Enter runs" })));
    code.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });
    form.addEventListener("submit", act(run, async () => {
      const body = { language: language.value, code: code.value };
      if (stdin.value) body.stdin = stdin.value;
      if (timeout.value) body.timeout_ms = Number(timeout.value);
      if (memory.value) body.memory_mb = Number(memory.value);
      result.replaceChildren(h("p", { class: "muted", text: "Running…" }));
      const { data } = await api("POST", "/v1/executions", { body, signal });
      if (data.status === "queued") await verdict(data.id, signal, result);
      else renderExecution(data, result);
    }));
    root.append(h("h2", { text: "Playground" }),
      h("p", { class: "muted", text: "Runs a program in the sandbox (POST /v1/executions), in any language the cluster has." }),
      form, result);
    choose();
  }

  // ---------------------------------------------------------------------------------------
  // Sessions

  const SESSION_LANGUAGES = ["python", "python-sci", "javascript", "bash"];

  async function sessionsView(root, signal) {
    const language = h("select", { id: "session-language" },
      SESSION_LANGUAGES.map((l) => h("option", { value: l, text: l })));
    const idle = h("input", { id: "session-idle", type: "number", min: 1, placeholder: "default" });
    const open = h("button", { id: "session-open", type: "submit", text: "Open session" });
    const form = h("form", { class: "panel", id: "session-form" },
      h("h3", { text: "New session" }),
      h("div", { class: "row" },
        h("label", {}, "Language", language),
        h("label", {}, "Idle timeout (s)", idle), open));
    form.addEventListener("submit", act(open, async () => {
      const body = { language: language.value };
      if (idle.value) body.idle_timeout_s = Number(idle.value);
      const { data } = await api("POST", "/v1/sessions", { body, signal });
      location.hash = `#/sessions/${encodeURIComponent(data.id)}`;
    }));
    const rows = h("tbody", {});
    const list = table(["Session", "Language", "State", "Cells#", "Opened", "Expires", "Ended by", "Why"], [], { id: "sessions-table" });
    list.replaceChild(rows, list.tBodies[0]);
    root.append(h("h2", { text: "Sessions" }), form, list);
    const { data } = await api("GET", "/v1/sessions", { signal });
    rows.replaceChildren(...data.sessions.map((s) => h("tr", { "data-id": s.id },
      h("td", {}, h("a", { class: "mono", href: `#/sessions/${s.id}`, text: s.id })),
      h("td", { text: s.language }),
      h("td", {}, badge(s.state)),
      h("td", { class: "num", text: s.cells }),
      h("td", { text: when(s.created_ms) }),
      h("td", { text: when(s.expires_ms) }),
      h("td", { class: "ended-by", text: s.ended_by || "" }),
      h("td", { text: s.ended_reason || "" }))));
    if (!data.sessions.length) rows.append(h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No sessions." })));
  }

  async function sessionView(root, signal, id) {
    const path = `/v1/sessions/${encodeURIComponent(id)}`;
    const info = h("div", { id: "session-info" });
    const code = h("textarea", { id: "cell-code", rows: 6, spellcheck: "false", placeholder: "x = 21\nx * 2" });
    const run = h("button", { id: "cell-run", type: "submit", text: "Run cell" });
    const end = h("button", { id: "session-delete", type: "button", class: "danger", text: "End session" });
    const cells = h("div", { class: "cells", id: "cells" });
    const form = h("form", { class: "panel", id: "cell-form" }, code,
      h("div", { class: "row" }, run, h("span", { class: "muted", text: "Ctrl+Enter runs" }), end));
    code.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });
    const renderInfo = (s) => {
      fill(info, h("div", { class: "stats" },
        stat("state", s.state, "session-state"),
        stat("language", s.language),
        stat("cells", s.cells),
        stat("memory", `${s.memory_mb} MiB`),
        stat("idle timeout", `${s.idle_timeout_s} s`),
        stat("expires", when(s.expires_ms)),
        // What ended it (SessionEndedBy: deleted, idle, lifetime, memory_limit, kernel_died,
        // not_started, worker_lost) and, below, why in the record's words.
        s.ended_by ? stat("ended by", s.ended_by, "session-ended-by") : null),
        s.ended_reason ? h("p", { class: "error-inline" }, "Ended: ",
          h("span", { id: "session-ended-reason", text: s.ended_reason })) : null);
      form.hidden = s.state !== "live";
    };
    root.append(h("p", {}, h("a", { href: "#/sessions", text: "← Sessions" })),
      h("h2", {}, "Session ", h("span", { class: "mono", text: id })), info, form, cells);
    form.addEventListener("submit", act(run, async () => {
      const source = code.value;
      let cell;
      try {
        ({ data: cell } = await api("POST", `${path}/run`, { body: { code: source }, signal }));
      } catch (e) {
        // A cell that ended its session (its kernel died, or it had ended meanwhile): the 409
        // is shown, and so is what ended it.
        if (e instanceof ApiError && e.status === 409) renderInfo((await api("GET", path, { signal })).data);
        throw e;
      }
      const n = cells.children.length + 1;
      cells.append(h("div", { class: `cell ${cell.status === "ok" ? "ok" : "error"}`, "data-cell": n },
        h("h4", {}, `Cell ${n} `, badge(cell.status), h("span", { class: "muted", text: ` ${cell.duration_ms} ms` })),
        pre(source, { class: "code" }),
        cell.value !== undefined && cell.value !== null
          ? [h("div", { class: "muted", text: "value" }), pre(cell.value, { class: "cell-value" })] : null,
        cell.stdout ? [h("div", { class: "muted", text: "stdout" }), pre(cell.stdout, { class: "cell-stdout" })] : null,
        cell.stderr ? [h("div", { class: "muted", text: "stderr" }), pre(cell.stderr, { class: "cell-stderr" })] : null,
        cell.error ? h("div", { class: "error-inline" }, `${cell.error.type}: ${cell.error.message}`,
          cell.error.traceback ? pre(cell.error.traceback) : null) : null,
        (cell.display || []).map((d) => (d.mime === "image/png" && d.base64
          ? h("img", { class: "display", alt: "cell output", src: `data:image/png;base64,${d.base64}` })
          : pre(d.text)))));
      renderInfo((await api("GET", path, { signal })).data);
    }));
    end.addEventListener("click", act(end, async () => {
      await api("DELETE", path, { signal });
      renderInfo((await api("GET", path, { signal })).data);
    }));
    renderInfo((await api("GET", path, { signal })).data);
  }

  // ---------------------------------------------------------------------------------------
  // Usage

  async function usageView(root, signal) {
    const from = h("input", { id: "usage-from", type: "datetime-local" });
    const to = h("input", { id: "usage-to", type: "datetime-local" });
    const tenant = h("input", { id: "usage-tenant", type: "text", placeholder: "yours (admins: any)", pattern: "[A-Za-z0-9_-]{1,64}" });
    const per = h("select", { id: "usage-per" },
      h("option", { value: "auto", text: "auto" }),
      h("option", { value: "hour", text: "hour" }),
      h("option", { value: "day", text: "day" }));
    const show = h("button", { id: "usage-show", type: "submit", text: "Show" });
    const out = h("div", { id: "usage-result" });
    const form = h("form", { class: "panel", id: "usage-form" },
      h("div", { class: "row" },
        h("label", {}, "From (UTC; default a day ago)", from),
        h("label", {}, "To (UTC; default now)", to),
        h("label", {}, "Per", per),
        h("label", {}, "Tenant", tenant), show));
    const iso = (input) => (input.value ? new Date(`${input.value}Z`).toISOString() : undefined);
    const load = async () => {
      // Per hour up to three days, per day beyond: a chart of at most ~72 hours' bars.
      const span = (to.value ? Date.parse(`${to.value}Z`) : Date.now()) -
        (from.value ? Date.parse(`${from.value}Z`) : Date.now() - 86_400_000);
      const unit = per.value !== "auto" ? per.value : span > 3 * 86_400_000 ? "day" : "hour";
      const { data } = await api("GET", "/v1/usage", {
        signal, query: { from: iso(from), to: iso(to), tenant: tenant.value.trim(), per: unit },
      });
      fill(out,
        h("p", {}, "Tenant ", h("strong", { id: "usage-tenant-name", text: data.tenant || "(the open API)" }),
          `, from ${when(data.from_ms)} to ${when(data.to_ms)}`),
        h("div", { class: "stats" },
          stat("jobs", data.jobs, "usage-jobs"),
          stat("executions", data.executions, "usage-executions"),
          stat("model calls", data.model_calls, "usage-model-calls"),
          stat("prompt tokens", data.prompt_tokens, "usage-prompt-tokens"),
          stat("completion tokens", data.completion_tokens, "usage-completion-tokens"),
          stat("sandbox time", `${data.sandbox_ms} ms`, "usage-sandbox-ms"),
          stat("sandbox CPU", `${data.sandbox_cpu_ms} ms`, "usage-sandbox-cpu-ms")),
        usageCharts(data, unit));
    };
    form.addEventListener("submit", act(show, load));
    root.append(h("h2", { text: "Usage" }),
      h("p", { class: "muted", text: "What this tenant's finished jobs and executions cost (GET /v1/usage)." }),
      form, out);
    await load();
  }

  // ---------------------------------------------------------------------------------------
  // The cluster at a glance (GET /v1/cluster; admin tenants only)

  const CLUSTER_POLL_MS = 2000;

  const sum = (values) => values.reduce((a, b) => a + b, 0);

  /** One worker's counters, as the rates read them. */
  function counters(status) {
    const calls = (status.model && status.model.calls) || {};
    const count = (map, key) => (Object.hasOwn(map, key) ? map[key] : 0);
    return {
      completed: count(status.tasks, "completed"),
      failed: count(status.tasks, "failed") + count(status.tasks, "requeued"),
      runs: sum(Object.values(status.sandbox_runs || {})),
      calls: sum(Object.values(calls)),
      callErrors: sum(Object.entries(calls).filter(([k]) => k !== "ok").map(([, v]) => v)),
    };
  }

  /** Rates per second from each live worker's last two announcements (`history`: worker
   * and start → [the one before, the last], kept across refreshes: a worker announces every
   * few seconds, the page refreshes more often): tasks completed and failed (requeued or
   * failed), model calls and their errors, sandbox runs. A worker that joined, restarted
   * (its counters from zero again) or said nothing new yet counts once it has a pair; one
   * that left is forgotten. `null` while no worker has a pair. */
  function clusterRates(history, view) {
    const live = new Set();
    for (const w of view.workers) {
      if (!w.status) continue;
      const key = `${w.name}@${w.status.started_ms}`;
      live.add(key);
      const pair = history.get(key);
      if (!pair) history.set(key, [null, w.status]);
      else if (pair[1].at_ms < w.status.at_ms) history.set(key, [pair[1], w.status]);
    }
    for (const key of [...history.keys()]) if (!live.has(key)) history.delete(key);
    const rates = { seconds: 0, completed: 0, failed: 0, calls: 0, callErrors: 0, runs: 0 };
    let pairs = 0;
    for (const [then, last] of history.values()) {
      if (!then) continue;
      const seconds = (last.at_ms - then.at_ms) / 1000;
      const [a, b] = [counters(then), counters(last)];
      for (const key of ["completed", "failed", "calls", "callErrors", "runs"]) {
        rates[key] += Math.max(0, b[key] - a[key]) / seconds;
      }
      rates.seconds = Math.max(rates.seconds, seconds);
      pairs += 1;
    }
    return pairs ? rates : null;
  }

  function renderCluster(view, rates, into) {
    const live = view.workers.filter((w) => w.status);
    const inFlight = sum(live.map((w) => w.status.in_flight));
    const sessions = sum(live.map((w) => w.status.sessions));
    const models = new Map();
    for (const w of live) {
      const m = w.status.model;
      if (!m) continue;
      const key = `${m.provider}/${m.model}`;
      const seen = models.get(key) || { provider: m.provider, model: m.model, limit: 0, in_flight: 0, workers: 0 };
      seen.limit = Math.max(seen.limit, m.limit);
      seen.in_flight += m.in_flight;
      seen.workers += 1;
      models.set(key, seen);
    }
    const perSecond = (v) => (rates ? v.toFixed(v >= 10 ? 0 : 2) : "–");
    const maxReady = Math.max(1, ...view.queues.map((q) => q.ready));
    fill(into,
      h("p", { class: "muted" }, `As of ${when(view.at_ms)}; refreshed every ${CLUSTER_POLL_MS / 1000} s`,
        rates ? `, rates over each worker's last ${rates.seconds.toFixed(1)} s.` : "; rates once each worker has announced itself twice (every few seconds)."),
      h("div", { class: "stats" },
        stat("workers", `${view.workers.length} (${view.workers.filter((w) => w.generates).length} with a model)`, "cluster-workers"),
        stat("in flight", inFlight, "cluster-in-flight"),
        stat("sessions held", sessions, "cluster-sessions"),
        stat("tasks done /s", perSecond(rates ? rates.completed : 0), "cluster-rate-completed"),
        stat("tasks failed or requeued /s", perSecond(rates ? rates.failed : 0), "cluster-rate-failed"),
        stat("model calls /s (errors)", rates ? `${perSecond(rates.calls)} (${perSecond(rates.callErrors)})` : "–", "cluster-rate-calls"),
        stat("sandbox runs /s", perSecond(rates ? rates.runs : 0), "cluster-rate-runs")),
      h("h3", { text: "Model" }),
      models.size ? table(["Provider", "Model", "In flight#", "Limit#", "", "Workers#"],
        [...models.values()].map((m) => h("tr", { "data-model": m.model },
          h("td", { text: m.provider }), h("td", { class: "mono", text: m.model }),
          h("td", { class: "num model-in-flight", text: m.in_flight }),
          h("td", { class: "num model-limit", text: m.limit }),
          h("td", {}, Charts.meter([{ value: m.in_flight, class: m.in_flight >= m.limit ? "busy" : "ok", label: "in flight" }], m.limit, "calls in flight against the limit")),
          h("td", { class: "num", text: m.workers }))), { id: "cluster-models" })
        : h("p", { class: "muted", text: "No worker has a model." }),
      h("h3", { text: "Queues" }),
      view.queues_error ? h("p", { class: "error-inline", id: "cluster-queues-error", text: view.queues_error }) : null,
      table(["Queue", "Ready#", "", "Consumers#"], view.queues.map((q) => h("tr", { "data-queue": q.name },
        h("td", { class: "mono", text: q.name }),
        h("td", { class: "num queue-ready", text: q.ready }),
        h("td", {}, Charts.meter([{ value: q.ready, class: "waiting", label: "ready" }], maxReady, "messages ready")),
        h("td", { class: "num queue-consumers", text: q.consumers }))), { id: "cluster-queues" }),
      h("h3", { text: "Workers" }),
      table(["Worker", "Model", "Up since", "In flight#", "Sessions#", "Model calls#", "Tasks done#"],
        view.workers.map((w) => {
          const s = w.status;
          return h("tr", { "data-worker": w.name },
            h("td", { class: "mono", text: w.name }),
            h("td", {}, w.generates ? badge("ok") : h("span", { class: "muted", text: s && s.unable ? s.unable : "none" })),
            h("td", { text: s ? when(s.started_ms) : "–" }),
            h("td", { class: "num worker-in-flight", text: s ? s.in_flight : "–" }),
            h("td", { class: "num worker-sessions", text: s ? s.sessions : "–" }),
            h("td", { class: "num", text: s && s.model ? `${s.model.in_flight} / ${s.model.limit}` : "–" }),
            h("td", { class: "num", text: s ? s.tasks.completed || 0 : "–" }));
        }), { id: "cluster-worker-list" }),
      h("h3", { text: "Sandbox pools" }),
      h("p", { class: "muted", text: "Each worker's warm containers per language: idle, busy, and runs waiting for one." }),
      table(["Worker", "Language", "Size#", "Idle#", "Busy#", "Waiting#", ""],
        live.flatMap((w) => w.status.pools.map((p) => {
          const busy = Math.max(0, p.live - p.idle);
          return h("tr", { "data-worker": w.name, "data-language": p.language },
            h("td", { class: "mono", text: w.name }), h("td", { text: p.language }),
            h("td", { class: "num pool-size", text: p.size }), h("td", { class: "num pool-idle", text: p.idle }),
            h("td", { class: "num pool-busy", text: busy }), h("td", { class: "num pool-waiting", text: p.waiting }),
            h("td", {}, Charts.meter([
              { value: p.idle, class: "ok", label: "idle" },
              { value: busy, class: "busy", label: "busy" },
              { value: p.waiting, class: "waiting", label: "waiting" },
            ], Math.max(p.size, p.live + p.waiting, 1), "idle, busy and waiting")));
        })), { id: "cluster-pools" }));
  }

  async function clusterView(root, signal) {
    const out = h("div", { id: "cluster-live" });
    root.append(h("h2", { text: "Cluster" }),
      h("p", { class: "muted", text: "The live workers, the queues, the sandbox pools and the model's calls against its limit (GET /v1/cluster, for admin tenants)." }),
      out);
    const history = new Map();
    const refresh = async () => {
      const { data } = await api("GET", "/v1/cluster", { signal });
      const rates = clusterRates(history, data);
      renderCluster(data, rates, out);
      out.setAttribute("data-refreshes", String(Number(out.getAttribute("data-refreshes") || 0) + 1));
      out.toggleAttribute("data-rates", Boolean(rates));
    };
    await refresh();
    // Ready once first drawn; it then refreshes until the page is left.
    (async () => {
      while (!signal.aborted) {
        try {
          await sleep(CLUSTER_POLL_MS, signal);
          await refresh();
        } catch (e) {
          if (signal.aborted) return;
          showError(e);
          return;
        }
      }
    })();
  }

  /** The window's series as four charts, one bar a period (periods without work drawn at 0). */
  function usageCharts(data, unit) {
    const period = unit === "day" ? 86_400_000 : 3_600_000;
    const byStart = new Map((data.series || []).map((p) => [p.from_ms, p]));
    const starts = [];
    for (let t = data.from_ms - (data.from_ms % period); t < data.to_ms; t += period) starts.push(t);
    const series = (value) => starts.map((t) => ({ from_ms: t, value: byStart.has(t) ? value(byStart.get(t)) : 0 }));
    const count = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1));
    const compact = (v) => (v >= 1e6 ? `${(v / 1e6).toFixed(1)}M` : v >= 1e4 ? `${Math.round(v / 1e3)}k` : count(v));
    const time = (v) => Charts.seconds(v);
    return h("section", { id: "usage-charts", "data-per": unit, "data-periods": starts.length },
      h("h3", { text: `Per ${unit}` }),
      h("div", { class: "picture" }, Charts.overTime("jobs", series((p) => p.jobs), period, count, "usage-chart-jobs", true)),
      h("div", { class: "picture" }, Charts.overTime("executions", series((p) => p.executions), period, count, "usage-chart-executions", true)),
      h("div", { class: "picture" }, Charts.overTime("tokens (prompt + completion)", series((p) => p.prompt_tokens + p.completion_tokens), period, compact, "usage-chart-tokens")),
      h("div", { class: "picture" }, Charts.overTime("sandbox time", series((p) => p.sandbox_ms), period, time, "usage-chart-sandbox")));
  }

  // ---------------------------------------------------------------------------------------
  // Lessons: the memory of repairs (GET /v1/lessons)

  async function lessonsView(root, signal) {
    const q = h("input", { id: "lessons-q", type: "search", placeholder: "words of a failure or a fix" });
    const shared = h("input", { id: "lessons-shared", type: "checkbox" });
    const search = h("button", { id: "lessons-search", type: "submit", text: "Search" });
    const form = h("form", { class: "panel", id: "lessons-form" },
      h("div", { class: "row" }, h("label", {}, "Search", q),
        h("label", {}, shared, " the shared set"), search));
    const rows = h("tbody", {});
    const list = table(["Lesson", "Language", "Signature", "Shown#", "Helped#", "From", "Made"], [], { id: "lessons-table" });
    list.replaceChild(rows, list.tBodies[0]);
    const load = async () => {
      const { data } = await api("GET", "/v1/lessons", {
        signal, query: { q: q.value.trim(), shared: shared.checked ? "true" : undefined },
      });
      const suffix = shared.checked ? "?shared=true" : "";
      rows.replaceChildren(...data.lessons.map((l) => h("tr", { "data-id": l.id },
        h("td", {}, h("a", { class: "mono", href: `#/lessons/${encodeURIComponent(l.id)}${suffix}`, text: l.id })),
        h("td", { text: l.language }),
        h("td", { class: "mono", text: l.signature }),
        h("td", { class: "num shown", text: l.retrieved }),
        h("td", { class: "num helped", text: l.helped }),
        h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(l.job)}`, text: `${l.source}: ${l.function}` })),
        h("td", { text: when(l.created_ms) }))));
      if (!data.lessons.length) rows.append(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No lessons." })));
    };
    form.addEventListener("submit", act(search, load));
    root.append(h("h2", { text: "Lessons" }),
      h("p", { class: "muted", text: "What repairs that worked changed, shown to later repairs of the same mistake; each counts how often it was shown and how often that repair passed." }),
      form, list);
    await load();
  }

  async function lessonView(root, signal, idAndQuery) {
    const [id, query] = idAndQuery.split("?");
    const shared = (query || "").includes("shared=true");
    const path = `/v1/lessons/${encodeURIComponent(id)}`;
    const { data: l } = await api("GET", path, { signal, query: { shared: shared ? "true" : undefined } });
    const remove = h("button", { id: "lesson-delete", type: "button", class: "danger", text: "Delete lesson" });
    remove.addEventListener("click", act(remove, async () => {
      await api("DELETE", path, { signal, query: { shared: shared ? "true" : undefined } });
      location.hash = "#/lessons";
    }));
    root.append(h("p", {}, h("a", { href: "#/lessons", text: "← Lessons" })),
      h("h2", {}, "Lesson ", h("span", { class: "mono", text: l.id })),
      h("div", { class: "stats", id: "lesson-info" },
        stat("language", l.language),
        stat("error kind", l.error_kind),
        stat("shown", l.retrieved, "lesson-shown"),
        stat("helped", l.helped, "lesson-helped"),
        stat("from", `${l.source}: ${l.function}`),
        stat("given cases", l.given ? "yes" : "no"),
        stat("model", l.model)),
      h("p", {}, h("strong", { text: "Signature: " }), h("span", { class: "mono", id: "lesson-signature", text: l.signature })),
      h("p", {}, h("strong", { text: "Failing case: " }), h("span", { class: "mono", text: l.case })),
      l.analysis ? h("p", {}, h("strong", { text: "Analysis: " }), l.analysis) : null,
      h("h3", { text: "The fix" }), pre(l.diff, { class: "code", id: "lesson-diff" }),
      h("h3", { text: "Where it was used" }),
      table(["Job", "Function", "Passed", "When"], (l.uses || []).map((u) => h("tr", { class: "lesson-use" },
        h("td", {}, h("a", { class: "mono", href: `#/jobs/${encodeURIComponent(u.job)}`, text: u.job })),
        h("td", { text: u.function }),
        h("td", {}, badge(u.passed ? "passed" : "failed")),
        h("td", { text: when(u.at_ms) }))), { id: "lesson-uses" }),
      l.shared ? null : h("div", { class: "row" }, remove));
  }

  // ---------------------------------------------------------------------------------------
  // The page: key form, navigation, views

  const ROUTES = [
    [/^#\/jobs\/([^/]+)$/, jobView, "jobs"],
    [/^#\/jobs\/?$/, jobsView, "jobs"],
    [/^#\/batches\/([^/]+)$/, batchView, "batches"],
    [/^#\/batches\/?$/, batchesView, "batches"],
    [/^#\/executions\/([^/]+)$/, executionView, "executions"],
    [/^#\/executions\/?$/, executionsView, "executions"],
    [/^#\/playground\/?$/, playgroundView, "playground"],
    [/^#\/sessions\/([^/]+)$/, sessionView, "sessions"],
    [/^#\/sessions\/?$/, sessionsView, "sessions"],
    [/^#\/usage\/?$/, usageView, "usage"],
    [/^#\/lessons\/(.+)$/, lessonView, "lessons"],
    [/^#\/lessons\/?$/, lessonsView, "lessons"],
    [/^#\/cluster\/?$/, clusterView, "cluster"],
  ];

  let current = null;

  function route() {
    if (current) current.abort();
    const controller = new AbortController();
    current = controller;
    clearError();
    const hash = location.hash && location.hash !== "#" ? location.hash : "#/jobs";
    const root = h("div", { class: "page" });
    $("#view").replaceChildren(root);
    for (const [pattern, view, section] of ROUTES) {
      const match = hash.match(pattern);
      if (!match) continue;
      for (const link of document.querySelectorAll("#nav a")) {
        link.classList.toggle("active", link.dataset.view === section);
      }
      root.setAttribute("data-view", section);
      document.title = `${section} · codegen-cluster console`;
      const args = match.slice(1).map(decodeURIComponent);
      view(root, controller.signal, ...args)
        .then(() => { if (!controller.signal.aborted) root.setAttribute("data-ready", "true"); })
        .catch((e) => {
          if (controller.signal.aborted) return;
          showError(e);
          root.setAttribute("data-ready", "error");
        });
      return;
    }
    root.append(h("p", { text: `No page ${hash}.` }));
  }

  function showKeyState() {
    $("#key-state").textContent = apiKey() ? "a key is set for this tab" : "no key: calls go without one";
  }

  function start() {
    const form = $("#key-form");
    const input = $("#api-key");
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const key = input.value.trim();
      if (key) sessionStorage.setItem(KEY_STORAGE, key);
      else sessionStorage.removeItem(KEY_STORAGE);
      input.value = "";
      languagesCache = null;
      showKeyState();
      route();
    });
    $("#key-forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      input.value = "";
      languagesCache = null;
      showKeyState();
      route();
    });
    window.addEventListener("hashchange", route);
    showKeyState();
    route();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
