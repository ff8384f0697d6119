'use strict';
// Runs a JavaScript program, and optionally its test, for the codegen runner (exec mode):
//
//   node /opt/codegen/harness.js MAIN [TEST]        (cwd /work, uid 10002, fd 3 = report)
//   node /opt/codegen/harness.js --wait             (the same, MAIN and TEST read from fd 4)
//
// --wait: started by the runner before the request exists, while the container is idle; it
// loads everything it needs, then blocks on fd 4 until the runner writes the program's path
// and the test's (or an empty line) and closes it. A run then costs the program, not node's
// start-up. End of input without a path: nothing to run, exit 0.
// MAIN and TEST run as classic scripts in ONE global scope (vm.runInThisContext with their
// file names), as if the two files were concatenated: the test sees the code's top-level
// functions, classes and const/let. require, module, exports, __filename and __dirname are
// globals resolved from MAIN, require.main === module, and process.argv is
// [node, MAIN], so a program looks like `node MAIN`. Differences from a CommonJS module:
// top-level `this` is globalThis and a top-level `return` is a SyntaxError.
//
// Uncaught exceptions and unhandled rejections are printed by node itself (exit status 1);
// the frames of this harness are cut from their stack. Report, one JSON line on fd 3:
//   {"exception": {"type", "module": "", "message", "kind"} | null,
//    "phase": "code" | "test" | null, "test_finished": bool}
// test_finished is true only at the natural end (event loop drained, exit status 0) after
// the test script (or, without a test, the code) ran to its end; process.exit() before
// that, or any uncaught exception, makes it false. No report (process.reallyExit, a
// signal) counts as not finished too.
const fs = require('fs');
const path = require('path');
const vm = require('vm');
const Module = require('module');

// Bound now: the program may replace them later.
const writeSync = fs.writeSync;
const stringify = JSON.stringify;
const realExit = process.exit;

function pathsFromRunner() {
  const chunks = [];
  const buf = Buffer.alloc(4096);
  for (;;) {
    let n;
    try {
      n = fs.readSync(4, buf, 0, buf.length, null);
    } catch (err) {
      if (err.code === 'EAGAIN' || err.code === 'EINTR') continue;
      throw err;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
  fs.closeSync(4);
  const [main, test] = Buffer.concat(chunks).toString('utf8').split('\n');
  if (!main) process.exit(0);
  return test ? [main, test] : [main];
}

const [mainPath, testPath] =
  process.argv[2] === '--wait' ? pathsFromRunner() : process.argv.slice(2);
// Both read before any code runs: the code cannot rewrite its test.
const mainSource = readSource(mainPath);
const testSource = testPath === undefined ? null : readSource(testPath);

let phase = 'code';
let ranToEnd = false;
let exitCalled = false;
let reported = false;

function readSource(file) {
  const text = fs.readFileSync(file, 'utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function report(obj) {
  if (reported) return;
  reported = true;
  try {
    writeSync(3, stringify(obj) + '\n');
  } catch (_) {
    // no fd 3 (run by hand) or the program closed it
  }
}

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
  return names;
}

function classify(err) {
  const names = constructorNames(err);
  const name = attempt(() => err.name);
  const code = attempt(() => err.code);
  if (names.has('SyntaxError') || name === 'SyntaxError') return 'syntax';
  if (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') return 'import';
  if (names.has('AssertionError') || name === 'AssertionError' || code === 'ERR_ASSERTION') {
    return 'assertion';
  }
  return 'runtime';
}

function describe(err) {
  let type;
  let message;
  if (err !== null && (typeof err === 'object' || typeof err === 'function')) {
    const ctor = attempt(() => err.constructor);
    type = attempt(() => (typeof ctor === 'function' ? ctor.name : undefined));
    if (typeof type !== 'string' || !type) type = attempt(() => String(err.name));
    message = attempt(() => err.message);
    if (typeof message !== 'string') message = attempt(() => String(err));
  } else {
    type = err === null ? 'null' : typeof err;
    message = attempt(() => String(err));
  }
  return {
    type: typeof type === 'string' && type ? type.slice(0, 200) : 'Error',
    module: '',
    message: typeof message === 'string' ? message.slice(0, 2000) : '',
    kind: classify(err),
  };
}

// The harness's own frames are noise in the program's traceback.
const harnessFile = __filename;
function withoutHarnessFrames(err) {
  attempt(() => {
    if (err instanceof Error && typeof err.stack === 'string') {
      err.stack = err.stack
        .split('\n')
        .filter((line) => !(/^\s+at /.test(line) && (line.includes(harnessFile) || line.includes('node:vm:'))))
        .join('\n');
    }
  });
  return err;
}

process.on('uncaughtExceptionMonitor', (err) => {
  withoutHarnessFrames(err); // before node prints it
  report({ exception: describe(err), phase, test_finished: false });
});

process.on('exit', (code) => {
  if (!exitCalled && code === 0 && ranToEnd) {
    report({ exception: null, phase: null, test_finished: true });
  } else {
    const early = testPath !== undefined && (exitCalled || !ranToEnd);
    report({ exception: null, phase: early ? phase : null, test_finished: false });
  }
});

process.exit = function exit() {
  exitCalled = true;
  return realExit.apply(process, arguments);
};

// Blocking writes, as node does for files and terminals: on a pipe whose reader lags, a
// busy program would otherwise queue its output in memory, and process.exit() drops the
// queue.
for (const stream of [process.stdout, process.stderr]) {
  attempt(() => stream._handle.setBlocking(true));
}

// What `node MAIN` would show the program.
const main = require.main;
main.id = '.';
main.filename = mainPath;
main.paths = Module._nodeModulePaths(path.dirname(mainPath));
main.exports = {};
process.argv = [process.argv[0], mainPath];
Object.assign(globalThis, {
  require: Module.createRequire(mainPath),
  module: main,
  exports: main.exports,
  __filename: mainPath,
  __dirname: path.dirname(mainPath),
});

function run(file, source, which) {
  phase = which;
  try {
    new vm.Script(source, { filename: file }).runInThisContext();
  } catch (err) {
    throw withoutHarnessFrames(err); // uncaught: node prints it and exits 1
  }
}

run(mainPath, mainSource, 'code');
if (testSource !== null) run(testPath, testSource, 'test');
ranToEnd = true;
