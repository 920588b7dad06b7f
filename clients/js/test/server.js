// Starts a real questd for the tests: the binary QUESTD_BIN names (default
// ../../target/debug/questd from clients/js), a fresh
// SQLite database in a temp directory, a free port on 127.0.0.1, the
// offline game master, and rate limits high enough not to matter unless a
// test sets them. The same port and database can be started again after a
// kill, as a restarted server.

import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const QUESTD_BIN = process.env.QUESTD_BIN
  ? resolve(process.env.QUESTD_BIN)
  : resolve(here, '..', '..', '..', 'target', 'debug', 'questd');

/** How long a server may take to answer /healthz after it starts (a safety net, not a measurement). */
const START_TIMEOUT_MS = 60000;
/** The tail of the server's output kept to explain a failure. */
const KEEP_OUTPUT = 16384;

if (typeof globalThis.WebSocket !== 'function') {
  throw new Error('these tests need a global WebSocket: Node 22+, or Node 20.10+ with --experimental-websocket (npm test passes it)');
}

/** A port nothing listens on now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

export class TestServer {
  /** @param {Record<string,string>} [env] settings on top of the tests' defaults */
  static async start(env = {}) {
    const dir = await mkdtemp(join(tmpdir(), 'questd-js-'));
    const server = new TestServer(dir, await freePort(), env);
    try {
      await server.start();
    } catch (e) {
      await server.cleanup();
      throw e;
    }
    return server;
  }

  constructor(dir, port, env) {
    this.dir = dir;
    this.port = port;
    this.env = env;
    this.url = `http://127.0.0.1:${port}`;
    this.child = null;
    this.output = '';
  }

  /** Starts questd on this server's port and database (again, after a kill). */
  async start() {
    const env = {
      ...process.env,
      QUESTD_BIND: `127.0.0.1:${this.port}`,
      QUESTD_DATABASE_URL: `sqlite://${join(this.dir, 'q.db')}`,
      QUESTD_LLM_PROVIDER: 'offline',
      QUESTD_LOG: 'warn',
      QUESTD_CHAT_PER_MINUTE: '6000',
      QUESTD_CHAT_BURST: '1000',
      QUESTD_CREATE_PER_MINUTE: '6000',
      QUESTD_CREATE_BURST: '1000',
      ...this.env,
    };
    const child = spawn(QUESTD_BIN, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    const keep = (chunk) => {
      this.output = (this.output + chunk.toString()).slice(-KEEP_OUTPUT);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const exited = new Promise((ok) => child.once('exit', (code, signal) => ok({ code, signal })));
    child.exited = exited;
    let spawnError = null;
    child.once('error', (e) => {
      spawnError = e;
    });
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (spawnError) throw new Error(`cannot run ${QUESTD_BIN} (set QUESTD_BIN, or cargo build --bin questd): ${spawnError.message}`);
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`questd stopped at start (${child.exitCode ?? child.signalCode}):\n${this.output}`);
      }
      try {
        const res = await fetch(`${this.url}/healthz`);
        if (res.ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`questd did not answer /healthz in time:\n${this.output}`);
      await sleep(50);
    }
  }

  /** Stops the process with `signal` and waits for it to end. */
  async stop(signal = 'SIGTERM') {
    const child = this.child;
    if (!child) return;
    this.child = null;
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await child.exited;
  }

  /** Stops the server for good and deletes its database. */
  async cleanup() {
    await this.stop('SIGKILL');
    await rm(this.dir, { recursive: true, force: true });
  }
}

export function sleep(ms) {
  return new Promise((ok) => setTimeout(ok, ms));
}

/**
 * Resolves when `predicate()` holds, checking after every event of `conn`
 * named in `events`; rejects after `ms` (a safety net for a hung test, not a
 * timing assertion) with `what` in the message.
 */
export function until(conn, events, predicate, what, ms = 30000) {
  return new Promise((ok, fail) => {
    const offs = [];
    const done = (fn, v) => {
      clearTimeout(timer);
      for (const off of offs) off();
      fn(v);
    };
    const check = () => {
      let v;
      try {
        v = predicate();
      } catch (e) {
        done(fail, e);
        return;
      }
      if (v) done(ok, v);
    };
    const timer = setTimeout(() => done(fail, new Error(`timed out waiting for ${what}`)), ms);
    for (const e of events) offs.push(conn.on(e, check));
    check();
  });
}

/** Rejects after `ms` with `what` unless `promise` settles first (a safety net). */
export function within(promise, what, ms = 30000) {
  let timer;
  const timeout = new Promise((_, fail) => {
    timer = setTimeout(() => fail(new Error(`timed out waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Records every story frame a connection hands on, and the errors it reports. */
export function record(conn) {
  const log = { frames: [], errors: [], states: [] };
  conn.on('frame', (f, info) => log.frames.push({ ...f, _live: info.live }));
  conn.on('error', (e) => log.errors.push(e));
  conn.on('state', (s) => log.states.push(s));
  return log;
}

/** The first place where the seqs of `frames` do not go up by exactly one, or null. */
export function firstGap(frames) {
  for (let i = 1; i < frames.length; i += 1) {
    if (frames[i].seq !== frames[i - 1].seq + 1) return { at: i, before: frames[i - 1].seq, after: frames[i].seq };
  }
  return null;
}
