// A server killed or stopped mid-session and started again on the same
// port and database: the client reconnects by itself, resumes from its last
// seq, and a chat made during the outage runs exactly once.

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import { Questd } from '../src/index.js';
import { firstGap, record, TestServer, until, within } from './server.js';

// Short waits between attempts, so the outage is short too.
const QUICK = { backoff: { initialMs: 50, maxMs: 300 } };

let server;

afterEach(async () => {
  if (server) await server.cleanup();
  server = null;
});

/**
 * A WebSocket whose connections fail while `gate.closed` (they go to a
 * port nothing listens on), so a test decides when a client gets back.
 */
function gatedWebSocket(gate) {
  return class extends WebSocket {
    constructor(url) {
      super(gate.closed ? 'ws://127.0.0.1:1/' : url);
    }
  };
}

/** The request ids of the turns the frames started. */
function startedIds(frames) {
  return frames.filter((f) => f.type === 'turn_started').map((f) => f.request_id);
}

test('a server killed mid-session: the chat made while it is down runs once after it is back, frames stay contiguous', async () => {
  server = await TestServer.start();
  const q = new Questd(server.url);
  const gate = { closed: false };
  const gated = new Questd(server.url, { WebSocket: gatedWebSocket(gate) });
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = gated.connect(s.session_id, s.player_token, QUICK);
  const log = record(conn);
  const welcomes = [];
  conn.on('welcome', (f, info) => welcomes.push({ ...f, reset: info.reset }));
  let other;
  try {
    await within(conn.chat('where can I go', { requestId: 'before' }), 'the first turn');
    const seqBefore = conn.lastSeq;

    await server.stop('SIGKILL');
    await until(conn, ['state'], () => conn.state === 'reconnecting', 'the client to notice');
    gate.closed = true;

    const during = conn.chat('roll 1d20', { requestId: 'during' });
    assert.deepEqual(
      conn.pending.map((c) => [c.requestId, c.state]),
      [['during', 'waiting']],
      'the chat waits in the outbox',
    );

    await server.start();
    // Another player plays a turn on the restarted server before this
    // client is let back: it must reach the client through resume.
    other = q.connect(s.session_id, s.player_token);
    const otherEnd = await within(other.chat('look', { requestId: 'other' }), "the other player's turn");
    assert.equal(conn.state, 'reconnecting');
    gate.closed = false;

    const end = await within(during, 'the chat made during the outage');
    assert.equal(end.type, 'turn_completed');
    await until(conn, ['frame'], () => conn.lastSeq >= otherEnd.seq, 'the other turn to reach the client');

    // Contiguous from the first welcome across the outage, each frame once.
    assert.equal(log.frames[0].seq, welcomes[0].seq + 1);
    assert.equal(firstGap(log.frames), null, 'no seq missing or repeated');
    const otherFrames = log.frames.filter((f) => f.turn_id === otherEnd.turn_id);
    assert.ok(otherFrames.length > 0 && otherFrames.every((f) => f.seq > seqBefore && f._live === false), 'the other turn came in the resume backlog');

    // Resumed, not reset; the turn ran once.
    assert.ok(welcomes.length >= 2);
    assert.ok(welcomes.slice(1).every((w) => w.resumed === true && w.reset === false));
    assert.deepEqual(startedIds(log.frames), ['before', 'other', 'during']);
    const snapshot = await q.getSession(s.session_id, s.player_token);
    assert.equal(snapshot.turn, 3, 'three turns ran in all');
    assert.ok(log.states.includes('reconnecting'));
    assert.equal(conn.state, 'open');
  } finally {
    conn.close();
    if (other) other.close();
  }
});

test('a server that drains (SIGTERM, close 1012) and starts again: the client resumes and goes on playing', async () => {
  server = await TestServer.start();
  const q = new Questd(server.url);
  const s = await q.createSession({ campaign_id: 'demo' });
  const player = q.connect(s.session_id, s.player_token, QUICK);
  const spectator = q.connect(s.session_id, s.spectator_token, { ...QUICK, lastSeq: 0 });
  const played = record(player);
  const watched = record(spectator);
  try {
    const first = await within(player.chat('where can I go', { requestId: 'a' }), 'the first turn');
    // Welcomed before the server goes: a client never welcomed is
    // 'connecting' while it is down, not 'reconnecting'.
    await until(spectator, ['frame'], () => spectator.lastSeq >= first.seq, 'the spectator to see the first turn');
    await server.stop('SIGTERM');
    await until(player, ['state'], () => player.state === 'reconnecting', 'the player to notice');
    await until(spectator, ['state'], () => spectator.state === 'reconnecting', 'the spectator to notice');
    await server.start();
    const end = await within(player.chat('roll 2d6', { requestId: 'b' }), 'the turn after the restart');
    await until(spectator, ['frame'], () => spectator.lastSeq >= end.seq, 'the spectator to catch up');

    assert.equal(firstGap(played.frames), null);
    assert.equal(firstGap(watched.frames), null);
    assert.equal(watched.frames[0].seq, 1, 'the spectator read the story from its start');
    assert.deepEqual(startedIds(played.frames), ['a', 'b']);
    assert.deepEqual(startedIds(watched.frames), ['a', 'b']);
  } finally {
    player.close();
    spectator.close();
  }
});
