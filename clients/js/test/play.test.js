// Normal play and spectators against a real questd.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Questd, QuestdError } from '../src/index.js';
import { firstGap, record, TestServer, until, within } from './server.js';

let server;
let q;

before(async () => {
  server = await TestServer.start();
  q = new Questd(server.url);
});

after(async () => {
  // Unset when it could not start; that failure is the one to see.
  if (server) await server.cleanup();
});

test('a player creates a session, connects and plays a turn', async () => {
  const campaigns = await q.campaigns();
  assert.ok(campaigns.some((c) => c.campaign_id === 'demo'), 'the demo campaign is listed');

  const s = await q.createSession({ campaign_id: 'demo' });
  assert.match(s.session_id, /^sess_/);
  assert.equal(typeof s.player_token, 'string');

  const conn = q.connect(s.session_id, s.player_token);
  const log = record(conn);
  const welcomes = [];
  conn.on('welcome', (f) => welcomes.push(f));
  const started = [];
  conn.on('turn_started', (f) => started.push(f));
  try {
    assert.equal(conn.state, 'connecting');
    const end = await within(conn.chat('where can I go'), 'the turn to end');
    assert.equal(end.type, 'turn_completed');
    assert.match(end.reply, /Lamplighter's Alcove/, 'the reply names the ways on');
    assert.equal(conn.state, 'open');
    assert.equal(conn.role, 'player');
    assert.equal(welcomes.length, 1);
    assert.equal(welcomes[0].session_id, s.session_id);

    // Every story frame once, in order, from the first after the welcome to the turn's end.
    assert.equal(log.frames[0].seq, welcomes[0].seq + 1);
    assert.equal(firstGap(log.frames), null, 'seqs go up by one');
    assert.equal(log.frames.at(-1).seq, end.seq);
    assert.equal(conn.lastSeq, end.seq);
    const turn = log.frames.filter((f) => f.turn_id === end.turn_id).map((f) => f.type);
    assert.deepEqual(turn, ['turn_started', 'tool_call', 'tool_result', 'narrative_delta', 'turn_completed']);
    assert.equal(started.length, 1, 'the type event fires too');
    assert.equal(started[0].text, 'where can I go');
    assert.deepEqual(conn.pending, [], 'nothing waits');

    // The chat's request_id is on its turn_started, and the turn is in the snapshot and the actions log.
    assert.match(started[0].request_id, /^r-/);
    const snapshot = await q.getSession(s.session_id, s.player_token);
    assert.equal(snapshot.turn, 1);
    const actions = await q.actions(s.session_id, s.player_token, { afterSeq: 0, limit: 10 });
    assert.deepEqual(
      actions.actions.map((a) => [a.turn_id, a.tool]),
      [[end.turn_id, 'move_options']],
    );

    const pong = await within(conn.ping(), 'a pong');
    assert.equal(pong.type, 'pong');
  } finally {
    conn.close();
  }
  assert.equal(conn.state, 'closed');
  await assert.rejects(conn.chat('too late'), (e) => e instanceof QuestdError && e.error_code === 'CLOSED');
});

test('chats made before the welcome wait in the outbox and run once each, in order', async () => {
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = q.connect(s.session_id, s.player_token);
  const log = record(conn);
  try {
    // Made while the socket is still opening.
    const a = conn.chat('where can I go', { requestId: 'first' });
    const b = conn.chat('roll 1d6', { requestId: 'second' });
    assert.deepEqual(
      conn.pending.map((p) => [p.requestId, p.state]),
      [
        ['first', 'waiting'],
        ['second', 'waiting'],
      ],
    );
    // The same request_id twice on one connection is the caller's mistake, said at once.
    await assert.rejects(conn.chat('again', { requestId: 'first' }), (e) => e.error_code === 'DUPLICATE_REQUEST_ID');
    const [endA, endB] = await within(Promise.all([a, b]), 'both turns');
    assert.notEqual(endA.turn_id, endB.turn_id);
    const starts = log.frames.filter((f) => f.type === 'turn_started');
    assert.deepEqual(
      starts.map((f) => f.request_id),
      ['first', 'second'],
    );
    assert.equal(firstGap(log.frames), null);
  } finally {
    conn.close();
  }
});

/** A new session with one turn played on a connection since closed. */
async function sessionWithOneTurn(requestId) {
  const s = await q.createSession({ campaign_id: 'demo' });
  const player = q.connect(s.session_id, s.player_token);
  try {
    return { s, end: await within(player.chat('where can I go', { requestId }), 'the turn') };
  } finally {
    player.close();
  }
}

test('a connection that starts from last_seq 0 is handed the whole story, then live frames', async () => {
  const { s, end } = await sessionWithOneTurn();
  const reader = q.connect(s.session_id, s.spectator_token, { lastSeq: 0 });
  const log = record(reader);
  try {
    await until(reader, ['frame'], () => reader.lastSeq >= end.seq, 'the backlog');
    assert.equal(log.frames[0].seq, 1);
    assert.equal(firstGap(log.frames), null);
    const replayed = log.frames.filter((f) => f.seq <= reader.welcome.seq);
    assert.ok(replayed.some((f) => f.turn_id === end.turn_id && f.type === 'turn_completed'), 'the old turn is replayed');
    assert.ok(
      replayed.every((f) => f._live === false),
      'replayed frames are marked as already in the welcome snapshot',
    );
    assert.equal(reader.welcome.resumed, true);
  } finally {
    reader.close();
  }
});

test('a request_id that already ran is not run again by a later connection (a page reloaded)', async () => {
  const { s, end } = await sessionWithOneTurn('typed-once');
  // From the start of the story: the replayed turn settles the chat, nothing is sent.
  const replaying = q.connect(s.session_id, s.player_token, { lastSeq: 0 });
  try {
    const again = await within(replaying.chat('where can I go', { requestId: 'typed-once' }), 'the replayed turn');
    assert.equal(again.turn_id, end.turn_id);
    assert.deepEqual(again, end);
  } finally {
    replaying.close();
  }
  // From past it: the server answers a duplicate of a turn this connection never saw end.
  const later = q.connect(s.session_id, s.player_token, { lastSeq: end.seq });
  const log = record(later);
  try {
    await assert.rejects(
      within(later.chat('where can I go', { requestId: 'typed-once' }), 'the answer'),
      (e) => e instanceof QuestdError && e.error_code === 'OUTCOME_UNKNOWN' && e.turnId === end.turn_id,
    );
    assert.equal(log.frames.filter((f) => f.type === 'turn_started').length, 0, 'nothing ran');
  } finally {
    later.close();
  }
  const snapshot = await q.getSession(s.session_id, s.player_token);
  assert.equal(snapshot.turn, 1, 'the turn ran once');
});

test('a spectator sees the same story frames as the player and may not chat', async () => {
  const s = await q.createSession({ campaign_id: 'demo' });
  const spectator = q.connect(s.session_id, s.spectator_token);
  const player = q.connect(s.session_id, s.player_token);
  const seen = record(spectator);
  const played = record(player);
  try {
    await until(spectator, ['state'], () => spectator.state === 'open', 'the spectator welcome');
    assert.equal(spectator.role, 'spectator');

    const refused = await within(
      spectator.chat('let me play').then(
        () => null,
        (e) => e,
      ),
      'the refusal',
    );
    assert.ok(refused instanceof QuestdError);
    assert.equal(refused.error_code, 'FORBIDDEN');
    assert.deepEqual(spectator.pending, []);

    const end = await within(player.chat('roll 2d6+1'), 'the player turn');
    await until(spectator, ['frame'], () => spectator.lastSeq >= end.seq, 'the spectator to see the turn');

    // Same seq, same frame, on both connections, over the seqs both saw.
    const bySeq = new Map(played.frames.map((f) => [f.seq, f]));
    const shared = seen.frames.filter((f) => bySeq.has(f.seq));
    assert.ok(shared.some((f) => f.type === 'turn_completed' && f.turn_id === end.turn_id));
    for (const f of shared) {
      const { _live: _a, ...mine } = f;
      const { _live: _b, ...theirs } = bySeq.get(f.seq);
      assert.deepEqual(mine, theirs, `frame ${f.seq}`);
    }
    assert.equal(firstGap(seen.frames), null);
    assert.equal(
      seen.errors.filter((e) => e.error_code === 'FORBIDDEN').length,
      1,
      'the error frame is reported once, as an error event',
    );
  } finally {
    spectator.close();
    player.close();
  }
});
