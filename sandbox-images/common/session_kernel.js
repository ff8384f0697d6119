'use strict';
// The JavaScript kernel of a stateful session (codegen_session_shell.py's NodeKernel starts it):
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
// session (the kernel says so). The context's require() notes what it returns (for
// checkpoints, below).
//
// Checkpoints (protocol "session/3"; the kernel asks on the same pipes, between cells):
//   {"op": "checkpoint", "max_bytes"} -> {"op": "checkpoint", "state": base64, "sha256",
//     "skipped": [{"name", "reason"}]}, or "too_large": its size instead of "state" when the
//     blob is over max_bytes (its sha256 still tells the kernel whether it changed);
//   {"op": "restore", "state"} -> {"op": "restored", "skipped"}, or {"op": "restored",
//     "error", "unreadable": true} when the blob cannot be read (nothing was restored).
// The blob: the line "codegen-session-state javascript 1", a JSON line, then one
// v8.serialize. What it holds:
//   - own properties of the context's global object that cells added (`var`, function
//     declarations, assignments to globalThis), with their attributes: the names not there
//     right after the context was made (a base global a cell replaced or deleted is not
//     kept); an accessor property is skipped;
//   - top-level let / const / class bindings, which are not properties of the global
//     object. Their names come from the cells' sources by a regular expression: `let`,
//     `const` or `class` then a name, at the start of a line or after `;` or `}`, and the
//     names of a flat destructuring (`const {a, b: c, ...d} =`, `let [x, , y] =`). Missed:
//     the second name of `let a = 1, b = 2`, a declaration after other code on its line
//     that does not end in `;` or `}`, nested patterns, defaults holding commas. Each
//     candidate is read with vm.runInContext(name) (one that is not defined is no binding;
//     one in its temporal dead zone is skipped) and restored as the same kind of binding (a
//     class as `let`, as a class declaration binds);
//   - a value a cell's require() gave, or an own data property of one (`const fs =
//     require('fs')`, `const {join} = require('path')`): as require(id) again, so changes
//     made to it since are not kept;
//   - functions and classes by their source text (Function.prototype.toString), evaluated
//     again in the new context (file name "<restored NAME>"), with the own data properties
//     set on them since (f.tag = 1, a static field changed) carried in the values' serialize.
//     Skipped, and named: native and bound functions, methods taken from an object (their
//     source is no expression), a function that closes over a local scope (its source,
//     evaluated at the top level, would not see it: the inspector's [[Scopes]] of the
//     function show a Closure or Block scope beyond the context's Script and Global ones; V8
//     keeps only the scopes a function uses, and a class's own name's scope is its source's),
//     and one with functions or accessors set on it, or on its prototype (enumerable ones: a
//     class body's methods are not), since;
//   - every other value in ONE v8.serialize (the structured clone: what two names share
//     comes back shared). What it refuses (a promise, a timer, a function inside a value, a
//     symbol) is skipped with its error; when the whole fails, each value alone finds them.
//     v8.deserialize makes objects of node's realm: they are copied into the context's
//     (objects, arrays, Map, Set, Date, RegExp, errors, typed arrays, boxed primitives), so
//     that `instanceof Array` holds. A named value made by a kept class gets that class's
//     prototype back; a value holding any other object of a class (one nested in it, or
//     itself of a class not kept, such as fs.Stats) is skipped and named, since the
//     structured clone keeps no prototype and it would come back plain;
//   - the working directory (process.cwd()).
// Restore order: the required values, the functions and classes (one that misses a name,
// such as a class extending a value, is evaluated again after the values), the values.
const crypto = require('crypto');
const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const v8 = require('v8');
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
const fnToString = Function.prototype.toString;
const hasOwn = Object.prototype.hasOwnProperty;

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
// What each require() of a cell returned (and the own data properties of it), by the id
// it was required with: a checkpoint keeps such a value as that reference.
const baseRequire = Module.createRequire(sessionFile);
const required = new Map();
const scanned = new WeakSet(); // once each: require() is cached, and often called in loops
function note(exported, id) {
  if (exported === null || (typeof exported !== 'object' && typeof exported !== 'function')) return;
  if (scanned.has(exported)) return;
  scanned.add(exported);
  const known = required.get(exported);
  if (known === undefined || known.key !== null) required.set(exported, { id, key: null });
  let keys = [];
  try {
    keys = Object.getOwnPropertyNames(exported).slice(0, 10000);
  } catch (_) {
    return;
  }
  for (const key of keys) {
    let d;
    try {
      d = Object.getOwnPropertyDescriptor(exported, key);
    } catch (_) {
      continue;
    }
    const v = d && d.value;
    if (v !== null && (typeof v === 'object' || typeof v === 'function') && !required.has(v)) {
      required.set(v, { id, key });
    }
  }
}
function sessionRequire(id) {
  const exported = baseRequire(id);
  note(exported, String(id));
  return exported;
}
Object.assign(sessionRequire, baseRequire);
// V8 gives every context a console of its own, which only talks to an inspector: node's.
Object.assign(sandbox, {
  console,
  global: contextGlobal,
  require: sessionRequire,
  module: sessionModule,
  exports: sessionModule.exports,
  __filename: sessionFile,
  __dirname: workDir,
});
// The global object's names as the context starts: a checkpoint keeps the others.
const baseNames = new Set(Object.getOwnPropertyNames(contextGlobal));
// Every cell's source, for the names of its top-level let / const / class; and the let /
// const bindings a restore made (no cell of this process declared them).
const cellSources = [];
const restoredLexical = new Map();

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
  cellSources.push(code);
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

// ---------------------------------------------------------------------------- checkpoints

const MAGIC = Buffer.from('codegen-session-state javascript 1\n');
const IDENT = /^[A-Za-z_$][\w$]*$/;
const WHERE = ['global', 'let', 'const'];
const MAX_REASON = 300;

function reasonOf(err) {
  let text;
  try {
    text = err !== null && typeof err === 'object' && 'message' in err
      ? `${err.name || 'Error'}: ${err.message}` : String(err);
  } catch (_) {
    text = 'an error that cannot be described';
  }
  return text.length > MAX_REASON ? `${text.slice(0, MAX_REASON)}...` : text;
}

// The scopes a function closes over, as the inspector names them ("Closure (make)",
// "Block", "Script", "Global"): V8 keeps a scope only when the function uses a name of it,
// so anything but the context's top level ("Script") and its global object means the
// function needs what its source alone cannot give it. null: the inspector cannot tell.
let inspectorSession = null;
function scopesOf(fn) {
  try {
    if (inspectorSession === null) {
      inspectorSession = new (require('inspector').Session)();
      inspectorSession.connect();
    }
  } catch (_) {
    return null;
  }
  const post = (method, params) => {
    let failure = null;
    let answer = null;
    inspectorSession.post(method, params, (err, res) => {
      failure = err;
      answer = res;
    });
    if (failure !== null || answer === null) throw failure || new Error(`${method}: no answer`);
    return answer;
  };
  const slot = `__codegen_probe_${crypto.randomBytes(8).toString('hex')}`;
  const group = 'codegen-checkpoint';
  globalThis[slot] = fn;
  try {
    const found = post('Runtime.evaluate', { expression: `globalThis.${slot}`, objectGroup: group });
    const props = post('Runtime.getProperties', { objectId: found.result.objectId, ownProperties: true });
    const scopes = (props.internalProperties || []).find((x) => x.name === '[[Scopes]]');
    if (scopes === undefined || !scopes.value || !scopes.value.objectId) return [];
    const list = post('Runtime.getProperties', { objectId: scopes.value.objectId, ownProperties: true });
    return list.result.filter((x) => x.value && typeof x.value.description === 'string')
      .map((x) => {
        const kind = x.value.description;
        if (kind === 'Script' || kind === 'Global' || !x.value.objectId) return { kind, names: [] };
        const names = post('Runtime.getProperties', { objectId: x.value.objectId, ownProperties: true })
          .result.map((y) => y.name);
        return { kind, names };
      });
  } catch (_) {
    return null;
  } finally {
    delete globalThis[slot];
    try {
      post('Runtime.releaseObjectGroup', { objectGroup: group });
    } catch (_) {
      // nothing held
    }
  }
}

const STANDARD_FUNCTION_PROPS = new Set(['length', 'name', 'prototype', 'arguments', 'caller']);

// What a function or class kept by its source would lose: why it cannot be kept (a string),
// or the own data properties to carry beside its source ({key: {value, attrs}}).
function functionExtras(fn) {
  const scopes = scopesOf(fn);
  // A class's (or a named function expression's) own name is a scope of its own, which its
  // source makes again.
  let own = '';
  try {
    own = fn.name;
  } catch (_) {
    // nameless
  }
  const local = (scopes || []).filter((x) => x.kind !== 'Script' && x.kind !== 'Global'
    && !x.names.every((n) => n === own)).map((x) => x.kind);
  if (local.length > 0) {
    return `a function closing over a local scope (${local.join(', ')}) cannot be `
      + 'checkpointed: its source alone does not hold what it closed over';
  }
  const props = {};
  const lost = [];
  for (const key of Object.getOwnPropertyNames(fn)) {
    if (STANDARD_FUNCTION_PROPS.has(key)) continue;
    const d = Object.getOwnPropertyDescriptor(fn, key);
    const isFunction = d && 'value' in d && typeof d.value === 'function';
    if (d === undefined || (!d.enumerable && (isFunction || !('value' in d)))) continue; // its source's
    if (!('value' in d) || isFunction) {
      lost.push(key);
      continue;
    }
    props[key] = { value: d.value, attrs: { writable: d.writable, enumerable: d.enumerable } };
  }
  const proto = Object.getOwnPropertyDescriptor(fn, 'prototype');
  const isClass = /^class[\s{]/.test(fnToString.call(fn));
  if (proto && proto.value !== null && typeof proto.value === 'object') {
    for (const key of Object.getOwnPropertyNames(proto.value)) {
      if (key === 'constructor') continue;
      const d = Object.getOwnPropertyDescriptor(proto.value, key);
      // A class's methods are not enumerable; anything set on a prototype later is.
      if (!isClass || (d && d.enumerable)) lost.push(`prototype.${key}`);
    }
  }
  if (lost.length > 0) {
    return `its properties set after its definition (${lost.slice(0, 10).join(', ')}) are `
      + 'functions or accessors, which are not kept beside its source';
  }
  return props;
}

// The prototypes the structured clone gives back (of node's realm and the context's).
const CLONED_KINDS = ['Object', 'Array', 'Map', 'Set', 'Date', 'RegExp', 'Error', 'EvalError',
  'RangeError', 'ReferenceError', 'SyntaxError', 'TypeError', 'URIError', 'ArrayBuffer',
  'SharedArrayBuffer', 'DataView', 'Boolean', 'Number', 'String', 'BigInt', 'Int8Array',
  'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array', 'Int32Array', 'Uint32Array',
  'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array', 'Buffer'];
let clonedPrototypes = null;
function cloned(proto) {
  if (clonedPrototypes === null) {
    clonedPrototypes = new Set([null]);
    for (const realm of [globalThis, contextGlobal]) {
      for (const kind of CLONED_KINDS) {
        const ctor = Object.getOwnPropertyDescriptor(realm, kind);
        const p = ctor && typeof ctor.value === 'function' ? ctor.value.prototype : undefined;
        if (p !== undefined) clonedPrototypes.add(p);
      }
    }
  }
  return clonedPrototypes.has(proto);
}

// Where `root` holds an object whose prototype the structured clone would not give back
// ({what, at}), or null. The root itself may have one when `rootKept` (its class is kept).
// Walks all of it, as v8.serialize will.
function classlessAt(root, rootKept) {
  const seen = new Set();
  const stack = [[root, '']];
  while (stack.length > 0) {
    const [v, at] = stack.pop();
    if (v === null || typeof v !== 'object' || seen.has(v)) continue;
    seen.add(v);
    let proto;
    try {
      proto = Object.getPrototypeOf(v);
    } catch (_) {
      continue;
    }
    if (!cloned(proto) && !(v === root && rootKept)) {
      let what = 'a class';
      try {
        const ctor = proto.constructor;
        if (typeof ctor === 'function' && ctor.name) what = `the class ${ctor.name}`;
      } catch (_) {
        // unnamed
      }
      return { what, at: at || 'its top' };
    }
    try {
      if (v instanceof Map || Object.prototype.toString.call(v) === '[object Map]') {
        let i = 0;
        for (const [k, x] of Map.prototype.entries.call(v)) {
          stack.push([k, `${at}<key ${i}>`], [x, `${at}<value ${i}>`]);
          i += 1;
        }
      } else if (v instanceof Set || Object.prototype.toString.call(v) === '[object Set]') {
        let i = 0;
        for (const x of Set.prototype.values.call(v)) stack.push([x, `${at}<item ${i++}>`]);
      } else if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const x = v[i];
          if (x !== null && typeof x === 'object') stack.push([x, `${at}[${i}]`]);
        }
      } else if (!ArrayBuffer.isView(v)) {
        for (const k of Object.keys(v)) {
          const d = Object.getOwnPropertyDescriptor(v, k);
          if (d && 'value' in d) stack.push([d.value, Array.isArray(v) ? `${at}[${k}]` : `${at}.${k}`]);
        }
      }
    } catch (_) {
      // what cannot be walked, v8.serialize refuses
    }
  }
  return null;
}

// The names the cells declare with let / const / class at their top level, as far as a
// regular expression tells (see the header): name -> 'let' | 'const' | 'class'.
function lexicalCandidates() {
  const found = new Map(restoredLexical);
  const declaration = /(?:^|[;}])[ \t]*(let|const|class)[ \t]+([A-Za-z_$][\w$]*)/gm;
  const destructuring = /(?:^|[;}])[ \t]*(let|const)[ \t]*(\{[^{}]*\}|\[[^[\]]*\])[ \t]*=/gm;
  for (const source of cellSources) {
    for (const m of source.matchAll(declaration)) found.set(m[2], m[1]);
    for (const m of source.matchAll(destructuring)) {
      for (let part of m[2].slice(1, -1).split(',')) {
        part = part.replace(/=[\s\S]*$/, '').trim();
        if (part.startsWith('...')) part = part.slice(3).trim();
        if (part.includes(':')) part = part.slice(part.indexOf(':') + 1).trim();
        if (IDENT.test(part)) found.set(part, m[1]);
      }
    }
  }
  return found;
}

// What a checkpoint keeps: [{name, where: 'global' | 'let' | 'const', value, attrs}].
function stateEntries(skipped) {
  const entries = [];
  for (const name of Object.getOwnPropertyNames(contextGlobal)) {
    if (baseNames.has(name)) continue;
    let d;
    try {
      d = Object.getOwnPropertyDescriptor(contextGlobal, name);
    } catch (err) {
      skipped.push({ name, reason: `it cannot be read: ${reasonOf(err)}` });
      continue;
    }
    if (d === undefined) continue;
    if (!('value' in d)) {
      skipped.push({ name, reason: 'an accessor property (a getter or setter) is not kept' });
      continue;
    }
    entries.push({
      name,
      where: 'global',
      value: d.value,
      attrs: { writable: d.writable, enumerable: d.enumerable, configurable: d.configurable },
    });
  }
  for (const [name, kind] of lexicalCandidates()) {
    let value;
    try {
      value = vm.runInContext(name, context);
    } catch (err) {
      if (err && err.name === 'ReferenceError' && /not defined/.test(String(err.message))) continue;
      skipped.push({ name, reason: `it cannot be read (${reasonOf(err)})` });
      continue;
    }
    // A global property of that name, not a binding that shadows it.
    if (hasOwn.call(contextGlobal, name) && Object.is(contextGlobal[name], value)) continue;
    entries.push({ name, where: kind === 'const' ? 'const' : 'let', value });
  }
  return entries;
}

function checkpoint(maxBytes) {
  const skipped = [];
  const defs = [];
  const refs = [];
  let values = [];
  for (const e of stateEntries(skipped)) {
    const v = e.value;
    const isObject = v !== null && (typeof v === 'object' || typeof v === 'function');
    const ref = isObject ? required.get(v) : undefined;
    if (ref !== undefined) {
      refs.push({ name: e.name, where: e.where, attrs: e.attrs, id: ref.id, key: ref.key });
    } else if (typeof v === 'function') {
      let source;
      try {
        source = fnToString.call(v);
      } catch (err) {
        skipped.push({ name: e.name, reason: `its source cannot be read: ${reasonOf(err)}` });
        continue;
      }
      if (/\{\s*\[native code\]\s*\}\s*$/.test(source)) {
        skipped.push({ name: e.name, reason: 'a native or bound function cannot be checkpointed' });
        continue;
      }
      try {
        new vm.Script(`({[""]: ${source}\n})`); // eslint-disable-line no-new
      } catch (_) {
        skipped.push({
          name: e.name,
          reason: 'its source cannot be evaluated alone (a method taken from an object)',
        });
        continue;
      }
      const extras = functionExtras(v);
      if (typeof extras === 'string') {
        skipped.push({ name: e.name, reason: extras });
        continue;
      }
      try {
        v8.serialize(Object.fromEntries(Object.entries(extras).map(([k, x]) => [k, x.value])));
      } catch (err) {
        skipped.push({ name: e.name, reason: `its own properties cannot be serialized: ${reasonOf(err)}` });
        continue;
      }
      defs.push({ ...e, source, props: extras });
    } else {
      values.push(e);
    }
  }
  // A value made by a class (or constructor) the checkpoint keeps gets its prototype back.
  const owners = new Map();
  for (const d of defs) {
    try {
      const proto = d.value.prototype;
      if (proto !== null && typeof proto === 'object' && !owners.has(proto)) owners.set(proto, d);
    } catch (_) {
      // no prototype to give
    }
  }
  for (const e of values) {
    if (e.value === null || typeof e.value !== 'object') continue;
    const owner = owners.get(Object.getPrototypeOf(e.value));
    if (owner !== undefined) e.proto = { name: owner.name, where: owner.where };
  }
  // The structured clone keeps no prototype: an object made by a class inside a value (or
  // a named one whose class is not kept) would come back plain. Such a value is named.
  values = values.filter((e) => {
    const lost = classlessAt(e.value, e.proto !== undefined);
    if (lost === null) return true;
    try {
      v8.serialize(e.value);
    } catch (_) {
      return true; // named below with what the serializer says
    }
    skipped.push({
      name: e.name,
      reason: `it holds an object made by ${lost.what} (at ${lost.at}), which would come back `
        + 'as a plain object (the structured clone keeps no prototype)',
    });
    return false;
  });
  // Every value in ONE v8.serialize: what two names share comes back shared. When that
  // fails, each value alone finds the ones that cannot be serialized.
  const record = () => {
    const r = { global: new Map(), let: new Map(), const: new Map(), props: new Map() };
    for (const e of values) r[e.where].set(e.name, e.value);
    for (const d of defs) {
      const own = Object.entries(d.props);
      if (own.length > 0) r.props.set(`${d.where}:${d.name}`, new Map(own.map(([k, x]) => [k, x.value])));
    }
    return r;
  };
  let payload;
  for (let round = 0; payload === undefined; round++) {
    try {
      payload = v8.serialize(record());
    } catch (err) {
      const failing = round === 0 ? values.filter((e) => {
        try {
          v8.serialize(e.value);
          return false;
        } catch (err2) {
          skipped.push({ name: e.name, reason: `it cannot be serialized: ${reasonOf(err2)}` });
          return true;
        }
      }) : values;
      if (round > 0) {
        for (const e of values) {
          const reason = `it cannot be serialized with the others: ${reasonOf(err)}`;
          skipped.push({ name: e.name, reason });
        }
      }
      values = values.filter((e) => !failing.includes(e));
    }
  }
  let cwd = null;
  try {
    cwd = process.cwd();
  } catch (err) {
    skipped.push({ name: '<working directory>', reason: `it cannot be found: ${reasonOf(err)}` });
  }
  const header = {
    cwd,
    defs: defs.map(({ name, where, attrs, source, props }) => ({
      name,
      where,
      attrs,
      source,
      props: Object.fromEntries(Object.entries(props).map(([k, x]) => [k, x.attrs])),
    })),
    refs,
    values: values.map(({ name, where, attrs, proto }) => ({ name, where, attrs, proto })),
  };
  const blob = Buffer.concat([MAGIC, bufferFrom(`${stringify(header)}\n`, 'utf8'), payload]);
  const sha256 = crypto.createHash('sha256').update(blob).digest('hex');
  if (blob.length > maxBytes) return { too_large: blob.length, sha256, skipped };
  return { state: blob.toString('base64'), sha256, skipped };
}

// Run in the context: a copy of what v8.deserialize made (objects of node's own realm)
// with the context's own Object, Array, Map, ... (so that `instanceof Array` holds), what
// is shared kept shared. Buffers stay as they are (the context shares node's Buffer).
const COPIER = `(function copy(root, isBuffer) {
  const seen = new Map();
  const errors = { Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError };
  const put = (out, k, x) => {
    if (k === '__proto__') {
      const d = { value: x, writable: true, enumerable: true, configurable: true };
      Object.defineProperty(out, k, d);
    } else {
      out[k] = x;
    }
  };
  const c = (v) => {
    if (v === null || typeof v !== 'object') return v;
    if (seen.has(v)) return seen.get(v);
    if (isBuffer(v)) {
      seen.set(v, v);
      return v;
    }
    const tag = Object.prototype.toString.call(v);
    let out;
    if (Array.isArray(v)) {
      out = new Array(v.length);
      seen.set(v, out);
      for (const k of Object.keys(v)) put(out, k, c(v[k]));
      return out;
    }
    if (tag === '[object Map]') {
      out = new Map();
      seen.set(v, out);
      for (const [k, x] of v) out.set(c(k), c(x));
      return out;
    }
    if (tag === '[object Set]') {
      out = new Set();
      seen.set(v, out);
      for (const x of v) out.add(c(x));
      return out;
    }
    if (tag === '[object Date]') {
      out = new Date(v.getTime());
    } else if (tag === '[object RegExp]') {
      out = new RegExp(v.source, v.flags);
      out.lastIndex = v.lastIndex;
    } else if (tag === '[object ArrayBuffer]') {
      out = new ArrayBuffer(v.byteLength);
      new Uint8Array(out).set(new Uint8Array(v));
    } else if (ArrayBuffer.isView(v)) {
      const buffer = c(v.buffer);
      out = tag === '[object DataView]' ? new DataView(buffer, v.byteOffset, v.byteLength)
        : new globalThis[tag.slice(8, -1)](buffer, v.byteOffset, v.length);
    } else if (tag === '[object Error]') {
      out = new (errors[v.name] || Error)(v.message);
      if (typeof v.stack === 'string') {
        Object.defineProperty(out, 'stack', { value: v.stack, writable: true, configurable: true });
      }
    } else if (/^\\[object (Boolean|Number|String|BigInt)\\]$/.test(tag)) {
      out = Object(v.valueOf());
    } else {
      out = {};
      seen.set(v, out);
      for (const k of Object.keys(v)) put(out, k, c(v[k]));
      return out;
    }
    seen.set(v, out);
    return out;
  };
  return c(root);
})`;

function checkHeader(h) {
  const damaged = () => new Error('its header is damaged');
  if (h === null || typeof h !== 'object') throw damaged();
  if (!(h.cwd === null || typeof h.cwd === 'string')) throw damaged();
  for (const list of [h.defs, h.refs, h.values]) if (!Array.isArray(list)) throw damaged();
  for (const e of [...h.defs, ...h.refs, ...h.values]) {
    if (e === null || typeof e !== 'object' || typeof e.name !== 'string') throw damaged();
    if (!WHERE.includes(e.where) || (e.where !== 'global' && !IDENT.test(e.name))) throw damaged();
  }
  for (const d of h.defs) if (typeof d.source !== 'string') throw damaged();
  for (const r of h.refs) {
    if (typeof r.id !== 'string' || !(r.key === null || typeof r.key === 'string')) throw damaged();
  }
}

function restore(encoded) {
  const blob = bufferFrom(encoded, 'base64');
  let header;
  let record;
  try {
    if (!blob.subarray(0, MAGIC.length).equals(MAGIC)) {
      throw new Error("it is not a JavaScript kernel's checkpoint");
    }
    const end = blob.indexOf(10, MAGIC.length);
    if (end < 0) throw new Error('its header is cut');
    header = JSON.parse(blob.subarray(MAGIC.length, end).toString('utf8'));
    checkHeader(header);
    record = v8.deserialize(blob.subarray(end + 1));
    if (record === null || typeof record !== 'object'
        || !WHERE.every((w) => record[w] instanceof Map)) {
      throw new Error('its values are damaged');
    }
  } catch (err) {
    return { error: reasonOf(err), unreadable: true };
  }
  const skipped = [];
  if (header.cwd !== null) {
    try {
      process.chdir(header.cwd);
    } catch (err) {
      const reason = `${header.cwd} cannot be entered again: ${reasonOf(err)}`;
      skipped.push({ name: '<working directory>', reason });
    }
  }
  // A let / const binding is made by a script at the context's top level; its value comes
  // through a property of the global object that lives only as long as the restore.
  const slot = `__codegen_restore_${crypto.randomBytes(8).toString('hex')}`;
  const carrier = new Map();
  Object.defineProperty(contextGlobal, slot, { value: carrier, configurable: true });
  const bind = (entry, value) => {
    if (entry.where === 'global') {
      const a = entry.attrs || {};
      Object.defineProperty(contextGlobal, entry.name, {
        value,
        writable: a.writable !== false,
        enumerable: a.enumerable !== false,
        configurable: a.configurable !== false,
      });
      return;
    }
    carrier.set(entry.name, value);
    try {
      const carried = `globalThis[${stringify(slot)}].get(${stringify(entry.name)})`;
      vm.runInContext(`${entry.where} ${entry.name} = ${carried};`, context);
      restoredLexical.set(entry.name, entry.where);
    } finally {
      carrier.delete(entry.name);
    }
  };
  try {
    for (const r of header.refs) {
      try {
        let v = sessionRequire(r.id);
        if (r.key !== null) v = v[r.key];
        bind(r, v);
      } catch (err) {
        const reason = `require(${stringify(r.id)}) no longer gives it: ${reasonOf(err)}`;
        skipped.push({ name: r.name, reason });
      }
    }
    // Functions and classes by their source; one that misses a name (a class extending a
    // value) is tried again after the values.
    const made = new Map();
    const pending = [...header.defs];
    const errors = new Map();
    const define = () => {
      for (let progress = true; progress && pending.length > 0;) {
        progress = false;
        for (const d of [...pending]) {
          const key = stringify(d.name);
          try {
            const fn = vm.runInContext(`({[${key}]: ${d.source}\n})[${key}]`, context, {
              filename: `<restored ${d.name}>`,
            });
            bind(d, fn);
            made.set(`${d.where}:${d.name}`, fn);
          } catch (err) {
            errors.set(d, err);
            if (err && err.name === 'ReferenceError') continue;
            const reason = `its source does not evaluate: ${reasonOf(err)}`;
            skipped.push({ name: d.name, reason });
          }
          pending.splice(pending.indexOf(d), 1);
          progress = true;
        }
      }
    };
    define();
    let copied = null;
    try {
      copied = vm.runInContext(COPIER, context)(record, Buffer.isBuffer);
    } catch (err) {
      for (const v of header.values) {
        const reason = `it cannot be copied into the context: ${reasonOf(err)}`;
        skipped.push({ name: v.name, reason });
      }
    }
    for (const v of copied === null ? [] : header.values) {
      try {
        bind(v, copied[v.where].get(v.name));
      } catch (err) {
        skipped.push({ name: v.name, reason: `it cannot be bound again: ${reasonOf(err)}` });
      }
    }
    define();
    for (const d of pending) {
      const reason = `its source does not evaluate: ${reasonOf(errors.get(d))}`;
      skipped.push({ name: d.name, reason });
    }
    // (The copies are the context's own Maps: not instanceof this realm's Map.)
    const isMap = (m) => Object.prototype.toString.call(m) === '[object Map]';
    const props = copied !== null && isMap(copied.props) ? copied.props : new Map();
    for (const d of header.defs) {
      const fn = made.get(`${d.where}:${d.name}`);
      const own = props.get(`${d.where}:${d.name}`);
      if (fn === undefined || !isMap(own)) continue;
      for (const [key, value] of own) {
        const a = (d.props && d.props[key]) || {};
        try {
          Object.defineProperty(fn, key, {
            value, writable: a.writable !== false, enumerable: a.enumerable !== false, configurable: true,
          });
        } catch (err) {
          skipped.push({ name: `${d.name}.${key}`, reason: `it cannot be set again: ${reasonOf(err)}` });
        }
      }
    }
    for (const v of copied === null ? [] : header.values) {
      const fn = v.proto ? made.get(`${v.proto.where}:${v.proto.name}`) : undefined;
      const value = copied[v.where].get(v.name);
      if (fn === undefined || value === null || typeof value !== 'object') continue;
      try {
        Object.setPrototypeOf(value, fn.prototype);
      } catch (_) {
        // it stays a plain object
      }
    }
  } finally {
    delete contextGlobal[slot];
  }
  return { skipped };
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
    if (req.op === 'checkpoint') {
      let outcome;
      try {
        outcome = checkpoint(Number(req.max_bytes));
      } catch (err) {
        outcome = { error: String(describe(err).message || err) };
      }
      reply({ op: 'checkpoint', ...outcome });
    } else if (req.op === 'restore') {
      let outcome;
      try {
        outcome = restore(String(req.state));
      } catch (err) {
        outcome = { error: String(describe(err).message || err) };
      }
      reply({ op: 'restored', ...outcome });
    } else {
      await runCell(req.n, String(req.code));
    }
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
