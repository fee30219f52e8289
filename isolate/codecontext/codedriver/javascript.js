// The driver of a JavaScript code context (isolate/codecontext/codecontext.go), run as
// `node --expose-internals -e SOURCE` (for the REPL's rewriting of
// top-level await) with the frames' pipe on fd 3 and its fds 1 and 2 on
// the driver's own stderr. It evaluates each request's code as a script in
// the process's one global context, as Node's REPL does: globals, `var`,
// `let`, `const`, functions and required modules live as long as the
// process.
//
// Requests and frames are those of the Python driver (python.py): a request
// is a 4-byte big-endian length, then JSON {"code", "limit", "nonce", "env",
// "cwd"} (the limit is Bash's); a frame is one type byte, a 4-byte
// big-endian length, the payload.
// What the code writes through process.stdout and process.stderr (console
// included) is its output; the completion value of the script, when it is
// not undefined, is the result as util.inspect shows it (a promise is
// awaited first; `await` may stand at the top level); an exception is the
// error {name, value, traceback}.
(() => {
  'use strict';
  const fs = require('fs');
  const vm = require('vm');
  const util = require('util');

  const CHAN = 3;
  const MAX_TEXT = 1 << 20;

  function writeAll(buf) {
    let off = 0;
    while (off < buf.length) {
      try {
        off += fs.writeSync(CHAN, buf, off);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
      }
    }
  }

  function send(kind, payload) {
    const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
    const head = Buffer.alloc(5);
    head.write(kind, 0, 'latin1');
    head.writeUInt32BE(data.length, 1);
    writeAll(Buffer.concat([head, data]));
  }

  function cut(text, limit = MAX_TEXT) {
    const data = Buffer.from(text, 'utf8');
    if (data.length <= limit) return data;
    return Buffer.concat([Buffer.from(data.subarray(0, limit).toString('utf8').replace(/\uFFFD$/, ''), 'utf8'), Buffer.from('...')]);
  }

  // The code's output, all of it: the service keeps its head and its tail.
  function output(kind, chunk, encoding) {
    const data = Buffer.isBuffer(chunk) || chunk instanceof Uint8Array
      ? Buffer.from(chunk)
      : Buffer.from(String(chunk), typeof encoding === 'string' ? encoding : 'utf8');
    if (data.length > 0) send(kind, data);
  }
  for (const [stream, kind] of [[process.stdout, 'o'], [process.stderr, 'e']]) {
    stream.write = function (chunk, encoding, cb) {
      output(kind, chunk, encoding);
      const done = typeof encoding === 'function' ? encoding : cb;
      if (typeof done === 'function') process.nextTick(done);
      return true;
    };
  }

  // The service interrupts the code at a call's timeout with SIGINT, and
  // sends it again until told it was taken (i). Synchronous code is
  // stopped by vm's breakOnSigint; a promise the call awaits is abandoned.
  let running = false;
  let interrupt = null;
  process.on('SIGINT', () => {
    if (running && interrupt) {
      const stop = interrupt;
      interrupt = null;
      send('i', '');
      stop();
    }
  });

  class Interrupted extends Error {}
  Object.defineProperty(Interrupted.prototype, 'name', { value: 'Interrupted' });

  function errorFrame(e) {
    let name = 'Error';
    let value;
    let trace = '';
    if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
      name = String(e.name || (e.constructor && e.constructor.name) || 'Error');
      value = String(e.message);
      trace = String(e.stack || '');
    } else {
      value = util.inspect(e);
      trace = 'Uncaught ' + value;
    }
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') name = 'Interrupted';
    // The driver's own frames are not the code's.
    trace = trace.split('\n').filter((l) => !/^\s+at .*(\[eval\]|node:internal|node:vm)/.test(l)).join('\n');
    return JSON.stringify({
      name,
      value: cut(value, 65536).toString('utf8'),
      traceback: cut(trace).toString('utf8'),
    });
  }

  let count = 0;

  // Node's own rewriting of top-level await (its REPL's), reached with
  // --expose-internals; none in a Node without it.
  let topLevelAwait = null;
  try {
    topLevelAwait = require('internal/repl/await').processTopLevelAwait;
  } catch (e) {
    // No top-level await: a promise as the last value is still awaited.
  }

  // settle awaits a promise (the call's bound abandons it), and is any
  // other value as it is.
  async function settle(value) {
    if (!value || typeof value.then !== 'function') return value;
    return new Promise((resolve, reject) => {
      interrupt = () => reject(new Interrupted('interrupted at the call\'s end'));
      Promise.resolve(value).then(resolve, reject);
    });
  }

  async function runCell(request) {
    const env = request.env || {};
    const saved = {};
    for (const k of Object.keys(env)) saved[k] = process.env[k];
    const before = process.cwd();
    let result = null;
    let error = null;
    try {
      Object.assign(process.env, env);
      if (request.cwd) process.chdir(request.cwd);
      running = true;
      // Top-level await as Node's REPL has it: the code rewritten into
      // an async function whose declarations stay global. Code that does
      // not parse runs as it is, for vm to name its error.
      let code = request.code;
      let wrapped = false;
      if (topLevelAwait && code.includes('await')) {
        try {
          const rewritten = topLevelAwait(code);
          if (rewritten !== null) [code, wrapped] = [rewritten, true];
        } catch (e) {
          // Not JavaScript: vm says why below.
        }
      }
      let value = await settle(vm.runInThisContext(code, { filename: `<cell ${count}>`, breakOnSigint: true }));
      if (wrapped) value = await settle(value === undefined ? undefined : value.value);
      if (value !== undefined) {
        globalThis._ = value;
        result = cut(util.inspect(value));
      }
    } catch (e) {
      if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') send('i', '');
      error = errorFrame(e);
    } finally {
      running = false;
      interrupt = null;
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      try {
        process.chdir(before);
      } catch (e) {
        // The directory is gone: stay where the code left us.
      }
    }
    return { result, error };
  }

  // Requests, one at a time, in their order; the event loop runs between
  // them (timers and promises the code left go on).
  let pending = Buffer.alloc(0);
  let busy = false;
  async function serve() {
    if (busy) return;
    busy = true;
    try {
      for (;;) {
        if (pending.length < 4) break;
        const n = pending.readUInt32BE(0);
        if (pending.length < 4 + n) break;
        const request = JSON.parse(pending.subarray(4, 4 + n).toString('utf8'));
        pending = pending.subarray(4 + n);
        const nonce = String(request.nonce || '');
        send('b', nonce);
        count++;
        const { result, error } = await runCell(request);
        if (result !== null) send('r', result);
        if (error !== null) send('x', error);
        send('d', JSON.stringify({ execution_count: count, nonce }));
      }
    } finally {
      busy = false;
    }
  }

  const requests = new (require('net').Socket)({ fd: 0, readable: true, writable: false });
  requests.on('data', (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    serve();
  });
  requests.on('end', () => process.exit(0));
  requests.on('error', () => process.exit(0));
  process.on('uncaughtException', (e) => {
    // What code left running throws between calls goes to its stderr.
    output('e', 'Uncaught ' + (e && e.stack ? e.stack : util.inspect(e)) + '\n');
  });
  process.on('unhandledRejection', (e) => {
    output('e', 'Unhandled rejection: ' + (e && e.stack ? e.stack : util.inspect(e)) + '\n');
  });
  send('k', '');
})();
