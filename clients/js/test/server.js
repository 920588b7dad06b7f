// Starts a real questd for the tests: the binary QUESTD_BIN names (default
// ../../target/debug/questd from clients/js), the offline game master, and
// rate limits high enough not to matter unless a test sets them.
//
// By default one node on a fresh SQLite database in a temp directory, on a
// free port of 127.0.0.1. With QUESTD_JS_NODES=2, two nodes on one fresh
// PostgreSQL database (made through `psql` on the server
// QUESTD_TEST_POSTGRES_URL names, dropped in cleanup) behind a round-robin
// TCP balancer: the client gets only the balancer's URL, and each new
// connection, HTTP or WebSocket, goes to the next node, as behind a load
// balancer without stickiness, so what the client meets includes the
// cluster's hand-over of requests and relay of sockets to the session's
// owner. Either way the same ports, node names and database can be started
// again after a kill, as a restarted server.

import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const QUESTD_BIN = process.env.QUESTD_BIN
  ? resolve(process.env.QUESTD_BIN)
  : resolve(here, '..', '..', '..', 'target', 'debug', 'questd');

/** How many questd nodes serve each TestServer: 1 (SQLite) or 2 (PostgreSQL). */
export const NODES = nodeCount(process.env.QUESTD_JS_NODES);

/** How long a server may take to answer /healthz after it starts (a safety net, not a measurement). */
const START_TIMEOUT_MS = 60000;
/** The tail of the server's output kept to explain a failure. */
const KEEP_OUTPUT = 16384;
/**
 * The prefix of the test databases, as the Rust suite names its own
 * (`questd_test_<pid>_…`): a database left by a run that was killed before
 * its cleanup is dropped by the next `cargo test` on PostgreSQL.
 */
const DATABASE_PREFIX = 'questd_test_';

if (typeof globalThis.WebSocket !== 'function') {
  throw new Error('these tests need a global WebSocket: Node 22+, or Node 20.10+ with --experimental-websocket (npm test passes it)');
}

function nodeCount(value) {
  if (value === undefined || value === '' || value === '1') return 1;
  if (value === '2') return 2;
  throw new Error(`QUESTD_JS_NODES is ${JSON.stringify(value)}: 1 (one node on SQLite, the default) or 2 (two nodes on PostgreSQL)`);
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

/**
 * A TCP load balancer on 127.0.0.1 without stickiness: each new connection
 * goes to the next of `ports` in turn, bytes pass unchanged both ways. As a
 * real balancer does, a connection that a node refuses (it is down) is
 * tried on the next node; when every node refuses, the client's connection
 * is closed.
 */
class RoundRobin {
  static async listen(ports) {
    const balancer = new RoundRobin(ports);
    await new Promise((ok, fail) => {
      balancer.server.once('error', fail);
      balancer.server.listen(0, '127.0.0.1', ok);
    });
    balancer.port = balancer.server.address().port;
    return balancer;
  }

  constructor(ports) {
    this.ports = ports;
    this.next = 0;
    this.sockets = new Set();
    this.server = createServer((client) => this.#accept(client));
  }

  #track(socket) {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
  }

  #accept(client) {
    this.#track(client);
    // Until a node takes it, an error only ends the attempts.
    client.on('error', () => client.destroy());
    const first = this.next;
    this.next = (this.next + 1) % this.ports.length;
    const attempt = (tried) => {
      if (tried === this.ports.length || client.destroyed) {
        client.destroy();
        return;
      }
      const i = (first + tried) % this.ports.length;
      const upstream = connect(this.ports[i], '127.0.0.1');
      this.#track(upstream);
      let connected = false;
      upstream.on('error', () => (connected ? client.destroy() : attempt(tried + 1)));
      upstream.once('connect', () => {
        connected = true;
        if (client.destroyed) {
          upstream.destroy();
          return;
        }
        client.on('error', () => upstream.destroy());
        // An orderly end passes on after the bytes before it (pipe ends
        // the other side); a reset passes on as a reset.
        upstream.once('close', (hadError) => (hadError ? client.destroy() : client.end()));
        client.once('close', (hadError) => (hadError ? upstream.destroy() : upstream.end()));
        client.pipe(upstream);
        upstream.pipe(client);
      });
    };
    attempt(0);
  }

  /** Stops listening and closes every connection through it. */
  async close() {
    for (const s of this.sockets) s.destroy();
    await new Promise((ok) => this.server.close(() => ok()));
  }
}

/** One questd process of a TestServer, on a port and a node name that stay across restarts. */
class Node {
  constructor(port, name) {
    this.port = port;
    this.name = name;
    this.url = `http://127.0.0.1:${port}`;
    this.child = null;
    this.output = '';
  }

  /** Starts questd with `env` on this node's port and waits until it answers /healthz. */
  async start(env) {
    const child = spawn(QUESTD_BIN, ['serve'], {
      env: { ...env, QUESTD_BIND: `127.0.0.1:${this.port}`, ...(this.name ? { QUESTD_NODE_ID: this.name } : {}) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
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
    const which = this.name ? `questd ${this.name}` : 'questd';
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (spawnError) throw new Error(`cannot run ${QUESTD_BIN} (set QUESTD_BIN, or cargo build --bin questd): ${spawnError.message}`);
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`${which} stopped at start (${child.exitCode ?? child.signalCode}):\n${this.output}`);
      }
      try {
        const res = await fetch(`${this.url}/healthz`);
        if (res.ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`${which} did not answer /healthz in time:\n${this.output}`);
      await sleep(50);
    }
  }

  /** Stops the process with `signal` and waits for it to end. */
  async stop(signal) {
    const child = this.child;
    if (!child) return;
    this.child = null;
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await child.exited;
  }
}

export class TestServer {
  /** @param {Record<string,string>} [env] settings on top of the tests' defaults */
  static async start(env = {}) {
    const dir = await mkdtemp(join(tmpdir(), 'questd-js-'));
    const server = new TestServer(dir, env);
    try {
      if (NODES === 1) {
        server.databaseUrl = `sqlite://${join(dir, 'q.db')}`;
        server.nodes = [new Node(await freePort(), null)];
      } else {
        server.databaseUrl = await server.#createDatabase();
        server.nodes = [new Node(await freePort(), 'js-node-a'), new Node(await freePort(), 'js-node-b')];
        server.balancer = await RoundRobin.listen(server.nodes.map((n) => n.port));
      }
      server.url = server.balancer ? `http://127.0.0.1:${server.balancer.port}` : server.nodes[0].url;
      await server.start();
    } catch (e) {
      await server.cleanup();
      throw e;
    }
    return server;
  }

  constructor(dir, env) {
    this.dir = dir;
    this.env = env;
    /** @type {Node[]} */
    this.nodes = [];
    this.balancer = null;
    this.databaseUrl = null;
    this.database = null;
    /** The URL the client is given: the one node, or the balancer in front of both. */
    this.url = null;
  }

  /**
   * One node's own URL, for a test of what one node counts by itself (its
   * rate limits): behind the balancer, successive requests would reach
   * both nodes, each with a budget of its own. The same as `url` with one
   * node.
   */
  get nodeUrl() {
    return this.nodes[0].url;
  }

  /** The server's output, each node's under its name, to explain a failure. */
  get output() {
    return this.nodes.map((n) => (n.name ? `--- ${n.name}\n${n.output}` : n.output)).join('\n');
  }

  /** Starts questd on this server's ports and database (again, after a kill): every node. */
  async start() {
    const env = {
      ...process.env,
      QUESTD_DATABASE_URL: this.databaseUrl,
      QUESTD_LLM_PROVIDER: 'offline',
      QUESTD_LOG: 'warn',
      QUESTD_CHAT_PER_MINUTE: '6000',
      QUESTD_CHAT_BURST: '1000',
      QUESTD_CREATE_PER_MINUTE: '6000',
      QUESTD_CREATE_BURST: '1000',
      ...this.env,
    };
    await Promise.all(this.nodes.map((n) => n.start(env)));
  }

  /** Stops every node with `signal` and waits for them to end; the balancer stays, as a real one would. */
  async stop(signal = 'SIGTERM') {
    await Promise.all(this.nodes.map((n) => n.stop(signal)));
  }

  /** Stops the server for good and deletes its database. */
  async cleanup() {
    await this.stop('SIGKILL');
    if (this.balancer) await this.balancer.close();
    if (this.database) await dropDatabase(this.database);
    this.database = null;
    await rm(this.dir, { recursive: true, force: true });
  }

  /** A fresh PostgreSQL database for this server's nodes; answers its URL. */
  async #createDatabase() {
    const admin = postgresAdminUrl();
    databases += 1;
    // Built only from the pid and a counter.
    const name = `${DATABASE_PREFIX}${process.pid}_js${databases}`;
    await psql(admin, `CREATE DATABASE ${name}`);
    this.database = { admin, name };
    const url = new URL(admin);
    url.pathname = `/${name}`;
    return url.href;
  }
}

/** How many databases this process made (their names' counter). */
let databases = 0;

function postgresAdminUrl() {
  const url = process.env.QUESTD_TEST_POSTGRES_URL;
  if (!url) {
    throw new Error(
      'QUESTD_JS_NODES=2 runs two questd nodes on PostgreSQL: set QUESTD_TEST_POSTGRES_URL to a role that may create databases, ' +
        'e.g. postgres://questd:questd@127.0.0.1:5432/postgres',
    );
  }
  return url;
}

/** How many times dropping a test database is tried before its failure is the test's. */
const DROP_ATTEMPTS = 10;

/**
 * Drops a test database once its nodes have ended. FORCE ends the sessions
 * of nodes that PostgreSQL has not yet seen go, but this role may not end
 * an autovacuum worker that a fresh database attracts; a plain DROP stops
 * that worker itself. So each attempt tries both.
 */
async function dropDatabase({ admin, name }) {
  let last;
  for (let attempt = 1; attempt <= DROP_ATTEMPTS; attempt += 1) {
    for (const sql of [`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`, `DROP DATABASE IF EXISTS ${name}`]) {
      try {
        await psql(admin, sql);
        return;
      } catch (e) {
        last = e;
      }
    }
    await sleep(200);
  }
  throw last;
}

/** Runs one SQL statement with `psql` (it comes with PostgreSQL) on the server `url` names. */
function psql(url, sql) {
  return new Promise((ok, fail) => {
    execFile('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url, '-c', sql], (e, _stdout, stderr) => {
      if (!e) ok();
      else if (e.code === 'ENOENT') fail(new Error('QUESTD_JS_NODES=2 needs psql (it comes with PostgreSQL) on PATH to make the test databases'));
      // The URL holds a password: the message names the statement only.
      else fail(new Error(`psql could not run \`${sql}\` on QUESTD_TEST_POSTGRES_URL: ${stderr.trim()}`));
    });
  });
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
