// The console's pictures, drawn as SVG with the browser's own DOM: a job's dependency graph, its
// timeline of attempts by worker, bar charts over time, and meters. Attributes only (no inline
// style: the page's Content-Security-Policy allows none); colours come from console.css by
// class. Every text goes in as text. console.js uses them through window.CodegenCharts.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";

  /** An SVG element with attributes `attrs` (`text`: its text) and `children`. */
  function s(tag, attrs = {}, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "text") el.textContent = String(value);
      else el.setAttribute(name, String(value));
    }
    for (const child of children.flat(Infinity)) if (child) el.append(child);
    return el;
  }

  /** A drawing `width` × `height` user units, that many pixels wide at most: console.css
   * shrinks it to a narrower container (or lets it scroll on a phone). */
  function canvas(width, height, props = {}) {
    return s("svg", {
      viewBox: `0 0 ${width} ${height}`, width, preserveAspectRatio: "xMinYMin meet",
      role: "img", ...props,
    });
  }

  function cut(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  /** Seconds as the axis writes them: 0.5 s, 12 s, 3 min. */
  function seconds(ms) {
    if (ms >= 120_000) return `${Math.round(ms / 60_000)} min`;
    if (ms >= 10_000) return `${Math.round(ms / 1000)} s`;
    return `${(ms / 1000).toFixed(ms < 1000 ? 2 : 1)} s`;
  }

  /** A round step for an axis that spans `span` in about `ticks` steps. */
  function niceStep(span, ticks) {
    const raw = span / Math.max(ticks, 1);
    const power = 10 ** Math.floor(Math.log10(raw || 1));
    for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
    return 10 * power;
  }

  // -----------------------------------------------------------------------------------------
  // A job's functions as a dependency graph

  /** `name`'s dependencies in `dependencies` (an object from JSON): its own entry only, so a
   * function named `constructor` or `__proto__` is a name like any other. */
  function depsOf(dependencies, name) {
    const deps = Object.hasOwn(dependencies, name) ? dependencies[name] : null;
    return Array.isArray(deps) ? deps : [];
  }

  /** Each function's column: 0 without dependencies, else one past its deepest dependency's. */
  function layers(names, dependencies) {
    const layer = new Map();
    const visit = (name, path) => {
      if (layer.has(name)) return layer.get(name);
      if (path.has(name)) return 0; // a cycle: the planner refuses those; draw, do not hang
      path.add(name);
      const deps = depsOf(dependencies, name).filter((d) => names.includes(d));
      const depth = deps.length ? 1 + Math.max(...deps.map((d) => visit(d, path))) : 0;
      path.delete(name);
      layer.set(name, depth);
      return depth;
    };
    for (const name of names) visit(name, new Set());
    return layer;
  }

  /** The graph of `names` (plan order) with their `dependencies` (name → names), each node
   * coloured by `stateOf(name)` (`{state, attempts, passed}`): columns left to right in
   * dependency order, an arrow from each dependency to the function that calls it. */
  function graph(names, dependencies, stateOf) {
    const W = 170, H = 46, GX = 60, GY = 18, PAD = 10;
    const layer = layers(names, dependencies);
    const columns = [];
    for (const name of names) {
      const c = layer.get(name);
      (columns[c] = columns[c] || []).push(name);
    }
    const place = new Map();
    columns.forEach((column, c) => column.forEach((name, r) => {
      place.set(name, { x: PAD + c * (W + GX), y: PAD + r * (H + GY) });
    }));
    const width = PAD * 2 + Math.max(columns.length, 1) * (W + GX) - GX;
    const tallest = Math.max(1, ...columns.map((c) => c.length));
    const height = PAD * 2 + tallest * (H + GY) - GY;
    const svg = canvas(width, height, { class: "graph", id: "job-graph", "aria-label": "the job's functions and their dependencies" });
    svg.append(s("defs", {}, s("marker", {
      id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
      orient: "auto-start-reverse",
    }, s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))));
    for (const name of names) {
      const to = place.get(name);
      for (const dep of depsOf(dependencies, name)) {
        const from = place.get(dep);
        if (!from) continue;
        const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x, y2 = to.y + H / 2;
        const mid = (x1 + x2) / 2;
        svg.append(s("path", {
          class: "edge", "data-from": dep, "data-to": name, "marker-end": "url(#arrow)",
          d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`,
        }));
      }
    }
    for (const name of names) {
      const { x, y } = place.get(name);
      const f = stateOf(name) || { state: "waiting", attempts: 0 };
      const state = f.state === "done" ? (f.passed ? "passed" : "failed") : f.state;
      const attempts = f.attempts ? `${f.attempts} attempt${f.attempts === 1 ? "" : "s"}` : "not tried yet";
      svg.append(s("g", { class: `node ${state}`, "data-function": name, "data-state": state },
        s("title", { text: `${name}: ${state}, ${attempts}` }),
        s("rect", { x, y, width: W, height: H, rx: 6 }),
        s("text", { x: x + 10, y: y + 19, class: "name", text: cut(name, 20) }),
        s("text", { x: x + 10, y: y + 36, class: "detail", text: `${state} · ${attempts}` })));
    }
    return svg;
  }

  // -----------------------------------------------------------------------------------------
  // A job's timeline: one bar per function attempt, one lane per worker

  /** The bars of a job from its events (`{at, event, data}`, `at` in ms since the job's start,
   * in order), until `now` for what is still running: `{lane, function, attempt, from, to,
   * outcome}` with `outcome` one of `planning`, `passed`, `failed`, `running`. */
  function attempts(events, now) {
    const bars = [];
    const open = new Map(); // function → {lane, from, attempt}
    let planning = null;
    for (const { at, event, data: d = {} } of events) {
      switch (event) {
        case "planning":
        case "replanning":
          if (planning === null) planning = at;
          break;
        case "planned":
          if (planning !== null) {
            bars.push({ lane: "planning", function: "plan", attempt: 1, from: planning, to: at, outcome: "planning" });
            planning = null;
          }
          break;
        case "function_started":
          open.set(d.function, { lane: d.worker || "a worker", from: at, attempt: 1 });
          break;
        case "attempt": {
          const o = open.get(d.function) || { lane: d.worker || "a worker", from: at, attempt: d.attempt };
          const lane = d.worker || o.lane;
          bars.push({ lane, function: d.function, attempt: d.attempt, from: o.from, to: at, outcome: d.passed ? "passed" : "failed" });
          // The next attempt (a repair) starts where this one ended.
          open.set(d.function, { lane, from: at, attempt: d.attempt + 1 });
          break;
        }
        case "function_done":
        case "function_cached":
          open.delete(d.function);
          break;
        case "finished":
          open.clear();
          if (planning !== null) {
            bars.push({ lane: "planning", function: "plan", attempt: 1, from: planning, to: at, outcome: "failed" });
            planning = null;
          }
          break;
        default:
          break;
      }
    }
    if (planning !== null) bars.push({ lane: "planning", function: "plan", attempt: 1, from: planning, to: now, outcome: "running" });
    for (const [name, o] of open) {
      bars.push({ lane: o.lane, function: name, attempt: o.attempt, from: o.from, to: Math.max(now, o.from), outcome: "running" });
    }
    return bars;
  }

  /** Each bar's row within its lane: the first row free when it starts, so bars that
   * overlap in time (work one worker ran at once) sit one above another. */
  function rows(bars) {
    const ends = new Map(); // lane → each row's last end
    const row = new Map();
    for (const bar of [...bars].sort((a, b) => a.from - b.from || a.to - b.to)) {
      const lane = ends.get(bar.lane) || [];
      let r = lane.findIndex((end) => end <= bar.from);
      if (r < 0) r = lane.length;
      lane[r] = bar.to;
      ends.set(bar.lane, lane);
      row.set(bar, r);
    }
    return row;
  }

  /** The timeline of `bars` (from [`attempts`]): lanes top to bottom in order of first use,
   * a row in a lane for each attempt that ran beside another there, time left to right from
   * the job's start. */
  function timeline(bars) {
    const LABEL = 150, W = 900, LANE = 30, TOP = 8, AXIS = 26, PAD = 8;
    const lanes = [];
    for (const bar of bars) if (!lanes.includes(bar.lane)) lanes.push(bar.lane);
    const row = rows(bars);
    const heightOf = (lane) => LANE * (1 + Math.max(0, ...bars.filter((b) => b.lane === lane).map((b) => row.get(b))));
    const tops = [];
    let next = TOP;
    for (const lane of lanes) { tops.push(next); next += heightOf(lane); }
    const end = Math.max(1, ...bars.map((b) => b.to));
    const x = (ms) => LABEL + (ms / end) * (W - LABEL - PAD);
    const height = Math.max(next, TOP + LANE) + AXIS;
    const svg = canvas(W, height, { class: "timeline", id: "job-timeline", "aria-label": "each attempt by the worker that ran it" });
    const step = niceStep(end, 6);
    for (let t = 0; t <= end + 1e-9; t += step) {
      svg.append(s("line", { class: "tick", x1: x(t), x2: x(t), y1: TOP, y2: height - AXIS + 4 }),
        s("text", { class: "axis", x: x(t), y: height - 8, "text-anchor": x(t) > W - 40 ? "end" : "middle", text: seconds(t) }));
    }
    lanes.forEach((lane, i) => {
      const y = tops[i];
      svg.append(s("g", { class: "lane", "data-lane": lane },
        s("rect", { class: i % 2 ? "lane-bg odd" : "lane-bg", x: 0, y, width: W, height: heightOf(lane) }),
        s("text", { class: "lane-name", x: 6, y: y + LANE / 2 + 5, text: cut(lane, 20) })));
    });
    for (const bar of bars) {
      const y = tops[lanes.indexOf(bar.lane)] + row.get(bar) * LANE + 5;
      const x0 = x(bar.from);
      const width = Math.max(2, x(bar.to) - x0);
      const label = bar.function === "plan" ? "plan" : `${bar.function} #${bar.attempt}`;
      svg.append(s("g", {
        class: `bar ${bar.outcome}`, "data-function": bar.function, "data-attempt": bar.attempt,
        "data-worker": bar.lane, "data-outcome": bar.outcome, "data-row": row.get(bar),
        "data-from-ms": bar.from, "data-to-ms": bar.to,
      },
      s("title", { text: `${label}: ${bar.outcome}, ${seconds(bar.to - bar.from)} from +${seconds(bar.from)} on ${bar.lane}` }),
      s("rect", { x: x0, y, width, height: LANE - 10, rx: 3 }),
      width > 60 ? s("text", { class: "bar-label", x: x0 + 4, y: y + 14, text: cut(label, Math.floor(width / 7)) }) : null));
    }
    return svg;
  }

  // -----------------------------------------------------------------------------------------
  // Bars over time, and meters

  /** A bar chart of `points` (`{from_ms, value}`, one per period of `periodMs`, gaps filled
   * with zero) titled `title`, the values shown by `format`; `counts`: whole numbers only on
   * the axis. */
  function overTime(title, points, periodMs, format, id, counts = false) {
    const W = 900, H = 170, LEFT = 64, BOTTOM = 24, TOP = 22, PAD = 8;
    const max = Math.max(0, ...points.map((p) => p.value));
    const step = Math.max(counts ? 1 : 0, niceStep(max || 1, 4));
    const top = step * Math.max(1, Math.ceil(max / step));
    const span = W - LEFT - PAD;
    const slot = span / Math.max(points.length, 1);
    const y = (v) => TOP + (1 - v / top) * (H - TOP - BOTTOM);
    const svg = canvas(W, H, { class: "chart", id, "aria-label": title });
    svg.append(s("text", { class: "chart-title", x: LEFT, y: 14, text: title }));
    for (let v = 0; v <= top + 1e-9; v += step) {
      svg.append(s("line", { class: "tick", x1: LEFT, x2: W - PAD, y1: y(v), y2: y(v) }),
        s("text", { class: "axis", x: LEFT - 6, y: y(v) + 4, "text-anchor": "end", text: format(v) }));
    }
    const every = Math.max(1, Math.ceil(points.length / 8));
    const day = periodMs >= 86_400_000;
    points.forEach((p, i) => {
      const x0 = LEFT + i * slot + slot * 0.12;
      svg.append(s("g", { class: "column", "data-from": p.from_ms, "data-value": p.value },
        s("title", { text: `${new Date(p.from_ms).toISOString().slice(0, day ? 10 : 16).replace("T", " ")}: ${format(p.value)}` }),
        s("rect", { x: x0, y: y(p.value), width: Math.max(1, slot * 0.76), height: Math.max(0, y(0) - y(p.value)) })));
      if (i % every === 0) {
        const at = new Date(p.from_ms).toISOString();
        svg.append(s("text", {
          class: "axis", x: x0 + slot * 0.38, y: H - 6, "text-anchor": "middle",
          text: day ? at.slice(5, 10) : at.slice(11, 16),
        }));
      }
    });
    return svg;
  }

  /** A horizontal meter of `parts` (`{value, class, label}`) out of `total`. */
  function meter(parts, total, label) {
    const W = 200, H = 14;
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "meter", role: "img", "aria-label": label });
    svg.append(s("rect", { class: "meter-bg", x: 0, y: 0, width: W, height: H, rx: 3 }));
    let x = 0;
    for (const part of parts) {
      const width = total > 0 ? Math.min(W - x, (part.value / total) * W) : 0;
      if (width > 0) {
        svg.append(s("rect", { class: part.class, x, y: 0, width, height: H, rx: 2 },
          s("title", { text: `${part.label}: ${part.value}` })));
      }
      x += width;
    }
    return svg;
  }

  window.CodegenCharts = { layers, graph, attempts, rows, timeline, overTime, meter, seconds };
})();
