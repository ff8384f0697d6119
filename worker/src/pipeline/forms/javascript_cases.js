// The test script of generated JavaScript: runs the model's test cases against the code, which
// ran before it in the same global scope (the image's documented test form), and writes one
// report shaped like proto::harness::CasesReport per function to REPORT, a file the worker
// reads back (stdout keeps only its head). Rendered by worker/src/pipeline/forms/javascript.rs,
// which puts the request, as JSON, where PAYLOAD is.
//
// Each case calls the function with its inputs in the order of the function's parameters,
// under a per-case timeout (vm's for synchronous code, a timer for a returned promise).
// Comparison follows the Python harness's rules (codegen_values.py): null matches null and
// undefined, numbers within a relative and absolute tolerance (NaN equals NaN), arrays element
// by element (a Set in any order), objects key by key (a Map as an object), never through the
// value's own methods. An expected error matches the thrown value's class, a base class, or its
// name. The program's output while a case runs is discarded (the report is what counts).
//
// When the work directory holds .codegen-lint (proto::harness::LINT_FILE: the final run), the
// report also gives the code's line coverage by the cases, from V8's precise block coverage
// (the inspector's Profiler, in process): of the non-blank, non-comment lines inside the
// code's functions, those whose innermost function or block ran. Code outside any function
// ran before the cases and is not counted.
(async function codegenCases(request) {
  'use strict';
  const vm = require('vm');
  const fs = require('fs');
  const writeFileSync = fs.writeFileSync;
  const stringify = JSON.stringify;
  const now = () => Number(process.hrtime.bigint()) / 1e6;
  const TOLERANCE = 1e-6;
  const MAX_TEXT = 2000;

  function attempt(f) {
    try {
      return f();
    } catch (_) {
      return undefined;
    }
  }

  function constructorNames(value) {
    const names = new Set();
    attempt(() => {
      for (let p = Object(value), i = 0; p !== null && i < 64; p = Object.getPrototypeOf(p), i++) {
        const ctor = Object.getOwnPropertyDescriptor(p, 'constructor');
        if (ctor && typeof ctor.value === 'function' && typeof ctor.value.name === 'string') {
          names.add(ctor.value.name);
        }
      }
    });
    const name = attempt(() => value.name);
    if (typeof name === 'string') names.add(name);
    return names;
  }

  function text(value) {
    const t = attempt(() => String(value));
    return typeof t === 'string' ? t.slice(0, MAX_TEXT) : '<unprintable>';
  }

  function errorLine(err) {
    const names = [...constructorNames(err)];
    const type = names.length ? names[0] : typeof err;
    const message = err !== null && typeof err === 'object' ? attempt(() => err.message) : err;
    return message === undefined || message === '' ? type : `${type}: ${text(message)}`;
  }

  function kindOf(err) {
    const names = constructorNames(err);
    if (names.has('SyntaxError')) return 'syntax';
    const code = attempt(() => err.code);
    if (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') return 'import';
    if (names.has('AssertionError') || code === 'ERR_ASSERTION') return 'assertion';
    return 'runtime';
  }

  // A JSON rendering of what the function returned, bounded, whatever it is.
  function render(value, depth, seen) {
    if (value === undefined || value === null) return null;
    if (typeof value === 'number') return Number.isFinite(value) ? value : String(value);
    if (typeof value === 'bigint') return value.toString();
    if (typeof value === 'string') return value.slice(0, 10000);
    if (typeof value === 'boolean') return value;
    if (typeof value === 'function') return `[Function ${text(value.name)}]`;
    if (typeof value !== 'object') return text(value);
    if (depth > 32) return '...';
    if (seen.has(value)) return '[Circular]';
    seen.add(value);
    try {
      if (Array.isArray(value) || ArrayBuffer.isView(value) || value instanceof Set) {
        return Array.from(value).slice(0, 1000).map((v) => render(v, depth + 1, seen));
      }
      const out = {};
      const entries = value instanceof Map ? Array.from(value.entries()) : Object.entries(value);
      for (const [k, v] of entries.slice(0, 1000)) out[text(k)] = render(v, depth + 1, seen);
      return out;
    } finally {
      seen.delete(value);
    }
  }

  function numbersEqual(a, e) {
    if (typeof a === 'bigint') a = Number(a);
    if (typeof a !== 'number') return false;
    if (Number.isNaN(a) || Number.isNaN(e)) return Number.isNaN(a) && Number.isNaN(e);
    if (a === e) return true;
    return Math.abs(a - e) <= Math.max(TOLERANCE * Math.max(Math.abs(a), Math.abs(e)), TOLERANCE);
  }

  function equal(actual, expected, depth) {
    if (depth > 64) return false;
    if (expected === null) return actual === null || actual === undefined;
    if (typeof expected === 'boolean') return actual === expected;
    if (typeof expected === 'number') return numbersEqual(actual, expected);
    if (typeof expected === 'string') return actual === expected;
    if (Array.isArray(expected)) {
      if (actual instanceof Set) {
        const left = Array.from(actual);
        if (left.length !== expected.length) return false;
        const used = new Array(left.length).fill(false);
        return expected.every((e) => {
          const i = left.findIndex((a, j) => !used[j] && equal(a, e, depth + 1));
          if (i < 0) return false;
          used[i] = true;
          return true;
        });
      }
      if (!Array.isArray(actual) && !ArrayBuffer.isView(actual)) return false;
      const items = Array.from(actual);
      return items.length === expected.length && items.every((a, i) => equal(a, expected[i], depth + 1));
    }
    if (typeof expected === 'object') {
      if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false;
      const entries = actual instanceof Map ? Array.from(actual.entries()) : Object.entries(actual);
      const keys = Object.keys(expected);
      if (entries.length !== keys.length) return false;
      const byKey = new Map(entries.map(([k, v]) => [String(k), v]));
      return keys.every((k) => byKey.has(k) && equal(byKey.get(k), expected[k], depth + 1));
    }
    return false;
  }

  // The program's output while a case runs goes nowhere.
  const writes = [process.stdout, process.stderr].map((s) => [s, s.write]);
  const quiet = () => writes.forEach(([s]) => { s.write = () => true; });
  const loud = () => writes.forEach(([s, w]) => { s.write = w; });

  async function call(fn, args, timeoutMs) {
    globalThis.__codegen_args = args;
    const script = new vm.Script(`${fn}(...globalThis.__codegen_args)`, { filename: '<case>' });
    let value = script.runInThisContext(timeoutMs ? { timeout: timeoutMs } : {});
    if (value !== null && typeof value === 'object' && typeof attempt(() => value.then) === 'function') {
      let timer;
      const late = new Promise((_, reject) => {
        timer = setTimeout(() => reject(Object.assign(new Error('timed out'), { code: 'ERR_SCRIPT_EXECUTION_TIMEOUT' })), timeoutMs || 2 ** 31 - 1);
      });
      try {
        value = await Promise.race([value, late]);
      } finally {
        clearTimeout(timer);
      }
    }
    return value;
  }

  async function runCase(fn, params, c, timeoutMs) {
    const args = params.map((p) => (Object.prototype.hasOwnProperty.call(c.inputs, p) ? c.inputs[p] : undefined));
    const started = now();
    const out = { name: c.name, passed: false, actual_output: null, error: null, error_kind: null, duration_ms: 0 };
    quiet();
    try {
      const value = await call(fn, args, timeoutMs);
      out.duration_ms = now() - started;
      out.actual_output = render(value, 0, new Set());
      if (c.expected_error) {
        out.error = `expected ${c.expected_error}, but nothing was thrown`;
        out.error_kind = 'wrong_output';
      } else if (equal(value, c.expected_output, 0)) {
        out.passed = true;
      } else {
        out.error = `WrongOutput: expected ${text(stringify(c.expected_output))}, got ${text(stringify(out.actual_output))}`;
        out.error_kind = 'wrong_output';
      }
    } catch (err) {
      out.duration_ms = now() - started;
      if (attempt(() => err.code) === 'ERR_SCRIPT_EXECUTION_TIMEOUT') {
        out.error = `the case ran past its ${timeoutMs} ms`;
        out.error_kind = 'timeout';
      } else if (c.expected_error && constructorNames(err).has(c.expected_error)) {
        out.passed = true;
      } else {
        out.error = errorLine(err);
        out.error_kind = c.expected_error ? 'wrong_output' : kindOf(err);
        if (c.expected_error) out.error = `expected ${c.expected_error}, got ${out.error}`;
      }
    } finally {
      loud();
    }
    return out;
  }

  // The inspector's answer to `method`, or a rejection.
  function inspect(session, method, params) {
    return new Promise((resolve, reject) => {
      session.post(method, params || {}, (err, result) => (err ? reject(err) : resolve(result)));
    });
  }

  async function startCoverage() {
    if (!attempt(() => fs.existsSync('/work/.codegen-lint'))) return null;
    try {
      const session = new (require('inspector').Session)();
      session.connect();
      await inspect(session, 'Profiler.enable');
      await inspect(session, 'Profiler.startPreciseCoverage', { callCount: true, detailed: true });
      return session;
    } catch (_) {
      return null;
    }
  }

  // {lines, covered} of the program's code (the file the harness ran: process.argv[1]; in
  // TypeScript's, what precedes this script), or null.
  async function lineCoverage(session) {
    const { result } = await inspect(session, 'Profiler.takePreciseCoverage');
    const main = process.argv[1];
    const script = result.find((s) => s.url === main || s.url === `file://${main}`);
    if (!script) return null;
    const source = fs.readFileSync(main, 'utf8');
    let end = source.indexOf('(async function codegenCases(');
    if (end < 0) end = source.length;
    // Every range of a function other than the script's top level, innermost last when
    // sorted by start then by length descending.
    const ranges = [];
    for (const fn of script.functions) {
      if (fn.ranges.length && fn.ranges[0].startOffset === 0) continue;
      for (const r of fn.ranges) ranges.push(r);
    }
    let lines = 0;
    let covered = 0;
    let offset = 0;
    for (const line of source.slice(0, end).split('\n')) {
      const start = offset + (line.length - line.trimStart().length);
      offset += line.length + 1;
      const trimmed = line.trim();
      if (!trimmed || trimmed.startsWith('//') || trimmed.startsWith('/*') || trimmed.startsWith('*')) continue;
      let inner = null;
      for (const r of ranges) {
        if (r.startOffset <= start && start < r.endOffset &&
            (!inner || r.endOffset - r.startOffset < inner.endOffset - inner.startOffset)) {
          inner = r;
        }
      }
      if (!inner) continue;
      lines += 1;
      if (inner.count > 0) covered += 1;
    }
    return lines ? { lines, covered } : null;
  }

  const session = await startCoverage();
  const reports = {};
  for (const f of request.functions) {
    const defined = attempt(() => new vm.Script(`typeof ${f.name}`).runInThisContext());
    if (defined !== 'function') {
      reports[f.name] = {
        passed: false, cases: [], error_kind: 'runtime',
        error: `${f.name} is not a function the code defines (${defined === undefined ? 'undefined' : defined})`,
        traceback: null,
      };
      continue;
    }
    const cases = [];
    for (const c of f.cases) cases.push(await runCase(f.name, f.params, c, request.case_timeout_ms));
    const failed = cases.find((c) => !c.passed);
    reports[f.name] = {
      passed: !failed,
      cases,
      error_kind: failed ? failed.error_kind : null,
      error: failed ? `${cases.filter((c) => !c.passed).length} of ${cases.length} cases failed` : null,
      traceback: null,
    };
  }
  let coverage = null;
  if (session) {
    try {
      coverage = await lineCoverage(session);
    } catch (_) {
      coverage = null;
    }
  }
  writeFileSync(request.report, stringify({ nonce: request.nonce, functions: reports, coverage }));
})(PAYLOAD);
