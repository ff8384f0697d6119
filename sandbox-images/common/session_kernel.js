'use strict';
// The JavaScript kernel of a stateful session (codegen_session.py's NodeKernel starts it):
//
//   node /opt/codegen/session_kernel.js     (cwd /work, uid 10002; fd 3: cells, fd 4: outcomes)
//
// It lives for the whole session. Each cell comes as one JSON line {"n", "code"} on fd 3 and
// runs with vm.runInContext in ONE context kept for the session, as a classic script named
// "<cell N>": top-level let/const/class/function names, and whatever a cell puts on the
// global object, persist into later cells (a later `let x` of a name already declared is a
// SyntaxError, as in a browser console). The context's global object has node's globals
// (console, process, Buffer, timers, URL, TextEncoder, fetch, ...: copied from node's own, as
// node's REPL does) plus require (resolving from /work), module, exports, __filename and
// __dirname; its built-ins (Object, Array, Promise, ...) are the context's own.
// No top-level await (a classic script): a cell whose completion value is a Promise has it
// awaited. The outcome, one JSON line on fd 4 once the cell's stdout and stderr are drained:
//   {"n", "status": "ok" | "error",
//    "value": util.inspect(completion value) | null (undefined), at most 64 KiB,
//    "error": null | {"type", "message", "traceback": the stack, without the kernel's frames}}
// SIGINT (the session's deadline): a cell running synchronous code is stopped there
// (breakOnSigint: "Script execution was interrupted by `SIGINT`"); one waiting for its
// Promise stops waiting (the same error); outside a cell it is ignored. An uncaught
// exception or unhandled rejection of a callback (a timer, a late promise) does not end
// the session: it is printed to stderr, as node's REPL does. process.exit() ends the
// session (the kernel says so).
const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const vm = require('vm');
const Module = require('module');

const REQUESTS = 3;
const REPLIES = 4;
const MAX_VALUE = 64 * 1024;
// Bound now: a cell may replace them later (the context shares node's Buffer, process, ...).
const writeSync = fs.writeSync;
const bufferFrom = Buffer.from.bind(Buffer);
const stringify = JSON.stringify;
const inspect = util.inspect;
const isPromise = util.types.isPromise;
const exit = process.exit.bind(process);
const stdout = process.stdout;
const stderr = process.stderr;
const streamWrite = (stream, data, cb) => stream.constructor.prototype.write.call(stream, data, cb);

function reply(obj) {
  const data = bufferFrom(stringify(obj) + '\n', 'utf8');
  let off = 0;
  while (off < data.length) {
    try {
      off += writeSync(REPLIES, data, off, data.length - off);
    } catch (err) {
      if (err.code === 'EAGAIN' || err.code === 'EINTR') continue;
      exit(70); // the session's kernel is gone
    }
  }
}

// ---------------------------------------------------------------------------- the context

const workDir = process.cwd();
const sessionFile = path.join(workDir, '[session]');
const sessionModule = { exports: {}, id: '.', filename: sessionFile, loaded: true };
const sandbox = {};
const context = vm.createContext(sandbox, { name: 'session' });
const contextGlobal = vm.runInContext('globalThis', context);
const own = new Set(Object.getOwnPropertyNames(contextGlobal));
for (const name of Object.getOwnPropertyNames(globalThis)) {
  if (own.has(name) || name === 'global' || name === 'globalThis') continue;
  const descriptor = Object.getOwnPropertyDescriptor(globalThis, name);
  if (descriptor !== undefined) Object.defineProperty(sandbox, name, descriptor);
}
// V8 gives every context a console of its own, which only talks to an inspector: node's.
Object.assign(sandbox, {
  console,
  global: contextGlobal,
  require: Module.createRequire(sessionFile),
  module: sessionModule,
  exports: sessionModule.exports,
  __filename: sessionFile,
  __dirname: workDir,
});

const runOptions = { breakOnSigint: true, displayErrors: true };
if (vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER !== undefined) {
  runOptions.importModuleDynamically = vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;
}

// ---------------------------------------------------------------------------- interrupts

let onInterrupt = null;
process.on('SIGINT', () => {
  if (onInterrupt !== null) onInterrupt();
});

function interrupted() {
  const err = new Error('Script execution was interrupted by `SIGINT`');
  err.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
  return err;
}

function settle(promise) {
  return new Promise((resolve, reject) => {
    onInterrupt = () => reject(interrupted());
    promise.then(resolve, reject);
  }).finally(() => {
    onInterrupt = null;
  });
}

process.on('uncaughtException', (err) => {
  try {
    streamWrite(stderr, 'Uncaught ' + inspect(err) + '\n');
  } catch (_) {
    // nothing to tell it with
  }
});
process.on('unhandledRejection', (reason) => {
  try {
    streamWrite(stderr, 'Uncaught (in promise) ' + inspect(reason) + '\n');
  } catch (_) {
    // nothing to tell it with
  }
});

// ---------------------------------------------------------------------------- cells

function cap(text) {
  const bytes = bufferFrom(text, 'utf8');
  if (bytes.length <= MAX_VALUE) return text;
  return bytes.subarray(0, MAX_VALUE).toString('utf8').replace(/\uFFFD$/, '');
}

function trimStack(stack) {
  // The kernel's frames (and vm's) come below the cell's: cut from the first of them on.
  const lines = stack.split('\n');
  const cut = lines.findIndex((line) => /^\s+at /.test(line)
    && (line.includes('node:vm') || line.includes(__filename)));
  return (cut < 0 ? lines : lines.slice(0, cut)).join('\n');
}

function describe(err) {
  let type = 'Error';
  let message = '';
  let traceback = '';
  try {
    if (err !== null && (typeof err === 'object' || typeof err === 'function')) {
      const name = err.name;
      const ctor = err.constructor && err.constructor.name;
      if (typeof name === 'string' && name) type = name;
      else if (typeof ctor === 'string' && ctor) type = ctor;
      message = typeof err.message === 'string' ? err.message : inspect(err);
      traceback = typeof err.stack === 'string' ? trimStack(err.stack) : 'Uncaught ' + inspect(err);
    } else {
      type = typeof err;
      message = inspect(err);
      traceback = 'Uncaught ' + message;
    }
  } catch (_) {
    message = message || 'an error that cannot be described';
  }
  return { type, message: cap(String(message)), traceback: String(traceback) };
}

function drain(stream) {
  return new Promise((resolve) => {
    try {
      if (stream.destroyed || !stream.writable) return resolve();
      streamWrite(stream, '', () => resolve());
    } catch (_) {
      resolve();
    }
  });
}

async function runCell(n, code) {
  let status = 'ok';
  let value = null;
  let error = null;
  try {
    let result = vm.runInContext(code, context, { ...runOptions, filename: `<cell ${n}>` });
    if (isPromise(result)) result = await settle(result);
    if (result !== undefined) value = cap(inspect(result));
  } catch (err) {
    status = 'error';
    error = describe(err);
  }
  await drain(stdout);
  await drain(stderr);
  reply({ n, status, value, error });
}

const queue = [];
let running = false;

async function pump() {
  if (running) return;
  running = true;
  while (queue.length > 0) {
    let req;
    try {
      req = JSON.parse(queue.shift());
    } catch (_) {
      continue;
    }
    if (req === null || typeof req !== 'object') continue;
    await runCell(req.n, String(req.code));
  }
  running = false;
}

const input = new net.Socket({ fd: REQUESTS, readable: true, writable: false });
input.setEncoding('utf8');
let pending = '';
input.on('data', (chunk) => {
  pending += chunk;
  for (let i = pending.indexOf('\n'); i >= 0; i = pending.indexOf('\n')) {
    const line = pending.slice(0, i);
    pending = pending.slice(i + 1);
    if (line) queue.push(line);
  }
  pump();
});
// The session's kernel closed the pipe: the session is over.
input.on('end', () => exit(0));
input.on('error', () => exit(0));

reply({ ready: true });
