// The connection's handling of seqs, resumes and acks, driven frame by frame
// through a scripted WebSocket: the orders a real server produces only by
// chance (a gap, a resume that overlaps, a turn's end before its duplicate
// ack, a reset) made to happen every time.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Questd } from '../src/index.js';

/** A WebSocket class whose sockets the test drives; `sockets` lists them in order. */
function scriptedWebSocket() {
  const sockets = [];
  class ScriptedSocket {
    constructor(url) {
      this.url = new URL(url);
      this.sent = [];
      this.closed = false;
      sockets.push(this);
    }

    send(text) {
      this.sent.push(JSON.parse(text));
    }

    close() {
      this.closed = true;
    }

    /** The server sends `frame`. */
    receive(frame) {
      if (this.onmessage) this.onmessage({ data: JSON.stringify(frame) });
    }

    /** The server closes with `code`. */
    drop(code = 1006) {
      if (this.onclose) this.onclose({ code });
    }

    lastSeqAsked() {
      const v = this.url.searchParams.get('last_seq');
      return v === null ? null : Number(v);
    }
  }
  return { sockets, WebSocket: ScriptedSocket };
}

// The HTTP link check answers that the session is fine.
const okFetch = async () => new Response('{}', { status: 200, headers: { 'Content-Type': 'application/json' } });

function setup(options = {}) {
  const { sockets, WebSocket } = scriptedWebSocket();
  const q = new Questd('http://questd.test', { WebSocket, fetch: okFetch });
  const conn = q.connect('sess_test', 'tok', { backoff: { initialMs: 1, maxMs: 2 }, heartbeatMs: 0, ...options });
  const frames = [];
  conn.on('frame', (f) => frames.push(f));
  return { sockets, conn, frames };
}

/** Waits until the client has opened `n` sockets (a safety net of 5 s). */
async function socketCount(sockets, n) {
  const deadline = Date.now() + 5000;
  while (sockets.length < n) {
    if (Date.now() > deadline) throw new Error(`the client did not open socket ${n}`);
    await new Promise((ok) => setTimeout(ok, 1));
  }
  return sockets[n - 1];
}

const welcome = (seq, resumed, turn = 0) => ({
  type: 'welcome',
  session_id: 'sess_test',
  role: 'player',
  seq,
  resumed,
  state: { turn },
});
const presence = (seq) => ({ type: 'presence', seq, players: 1, spectators: 0 });
const started = (seq, turnId, requestId) => ({ type: 'turn_started', seq, turn_id: turnId, request_id: requestId, actor_id: 'pc_001', text: 't' });
const completed = (seq, turnId) => ({ type: 'turn_completed', seq, turn_id: turnId, reply: `end of ${turnId}` });
const ack = (requestId, turnId, duplicate = false) => ({ type: 'ack', request_id: requestId, turn_id: turnId, duplicate, queued: 0 });

test('the first socket asks for the lastSeq given, or none', async () => {
  const a = setup();
  assert.equal(a.sockets[0].url.pathname, '/ws/sessions/sess_test');
  assert.equal(a.sockets[0].url.searchParams.get('token'), 'tok');
  assert.equal(a.sockets[0].lastSeqAsked(), null);
  a.conn.close();
  const b = setup({ lastSeq: 0 });
  assert.equal(b.sockets[0].lastSeqAsked(), 0);
  b.conn.close();
});

test('a seq gap is never handed on: the client reconnects from its last seq and the server fills it', async () => {
  const { sockets, conn, frames } = setup();
  const first = sockets[0];
  first.receive(welcome(0, false));
  first.receive(presence(1));
  first.receive(presence(2));
  first.receive(presence(4)); // 3 went missing
  assert.deepEqual(
    frames.map((f) => f.seq),
    [1, 2],
  );
  assert.ok(first.closed, 'the socket with the gap is dropped');
  const second = await socketCount(sockets, 2);
  assert.equal(second.lastSeqAsked(), 2);
  second.receive(welcome(4, true));
  second.receive(presence(2)); // an overlap: handed on already
  second.receive(presence(3));
  second.receive(presence(4));
  second.receive(presence(5));
  assert.deepEqual(
    frames.map((f) => f.seq),
    [1, 2, 3, 4, 5],
  );
  assert.equal(conn.lastSeq, 5);
  conn.close();
});

test('a chat waits for the resume backlog, goes out again with its request_id, and settles by a turn that ended before its duplicate ack', async () => {
  const { sockets, conn } = setup();
  const first = sockets[0];
  first.receive(welcome(0, false));
  const end = conn.chat('go', { requestId: 'r1' });
  assert.deepEqual(first.sent, [{ type: 'chat', text: 'go', request_id: 'r1' }]);
  first.drop(); // before any ack

  const second = await socketCount(sockets, 2);
  assert.equal(second.lastSeqAsked(), 0);
  second.receive(welcome(3, true));
  assert.deepEqual(second.sent, [], 'nothing goes out before the backlog is in');
  // The backlog holds the whole turn: the first send did reach the server.
  second.receive(started(1, 'turn_1', 'r1'));
  second.receive(presence(2));
  second.receive(completed(3, 'turn_1'));
  const frame = await end;
  assert.equal(frame.turn_id, 'turn_1');
  assert.deepEqual(second.sent, [], 'a chat seen starting is not sent again');
  conn.close();
});

test("a duplicate ack for a turn whose end was already handed on settles the chat", async () => {
  const { sockets, conn } = setup();
  const first = sockets[0];
  first.receive(welcome(0, false));
  const end = conn.chat('go', { requestId: 'r1' });
  first.receive(ack('r1', 'turn_1'));
  first.drop(); // acked, not started

  const second = await socketCount(sockets, 2);
  second.receive(welcome(0, true));
  assert.deepEqual(second.sent, [{ type: 'chat', text: 'go', request_id: 'r1' }], 'sent again, same request_id');
  // Another connection's frames raced ahead: the turn's end comes before the duplicate ack...
  second.receive(completed(1, 'turn_1'));
  // ...and the ack maps the request_id to it.
  second.receive(ack('r1', 'turn_1', true));
  assert.equal((await end).turn_id, 'turn_1');
  conn.close();
});

test('a turn started by another request_id is not the chat’s, even under the turn id its ack named', async () => {
  const { sockets, conn } = setup();
  const s = sockets[0];
  s.receive(welcome(0, false));
  let settled = false;
  const end = conn.chat('go', { requestId: 'mine' }).finally(() => {
    settled = true;
  });
  // Whichever comes first, the ack or the other chat's turn, the turn is not this chat's.
  s.receive(started(1, 'turn_1', 'theirs'));
  s.receive(completed(2, 'turn_1'));
  s.receive(ack('mine', 'turn_1'));
  await new Promise((ok) => setTimeout(ok, 5));
  assert.equal(settled, false);
  s.receive(started(3, 'turn_2', 'mine'));
  s.receive(completed(4, 'turn_2'));
  assert.equal((await end).turn_id, 'turn_2');
  conn.close();
});

test('close code 1012 reconnects at once, even with a long backoff', async () => {
  const { sockets, conn } = setup({ backoff: { initialMs: 60000, maxMs: 60000 } });
  sockets[0].receive(welcome(0, false));
  sockets[0].drop(1012);
  const second = await socketCount(sockets, 2);
  assert.equal(second.lastSeqAsked(), 0);
  assert.equal(conn.state, 'reconnecting');
  second.receive(welcome(0, true));
  assert.equal(conn.state, 'open');
  conn.close();
});

test('close code 4000 (a session an operator closed) stops for good with SESSION_CLOSED', async () => {
  const { sockets, conn } = setup();
  const errors = [];
  conn.on('error', (e) => errors.push(e));
  sockets[0].receive(welcome(0, false));
  const waiting = conn.chat('x', { requestId: 'x' });
  sockets[0].drop(4000);
  assert.equal(conn.state, 'closed');
  assert.deepEqual(
    errors.map((e) => [e.error_code, e.fatal]),
    [['SESSION_CLOSED', true]],
  );
  await assert.rejects(waiting, (e) => e.error_code === 'SESSION_CLOSED');
  await new Promise((ok) => setTimeout(ok, 20));
  assert.equal(sockets.length, 1, 'no reconnect');
  await assert.rejects(conn.chat('y'), (e) => e.error_code === 'SESSION_CLOSED');
});

test('a link check answering 410 (a closed session) stops for good', async () => {
  const { sockets, WebSocket } = scriptedWebSocket();
  const gone = async () =>
    new Response(JSON.stringify({ error_code: 'SESSION_CLOSED', message: 'the session was closed by an operator' }), {
      status: 410,
      headers: { 'Content-Type': 'application/json' },
    });
  const q = new Questd('http://questd.test', { WebSocket, fetch: gone });
  const conn = q.connect('sess_test', 'tok', { backoff: { initialMs: 1, maxMs: 2 }, heartbeatMs: 0 });
  const fatal = new Promise((ok) => conn.on('error', (e) => e.fatal && ok(e)));
  sockets[0].drop(1006); // the upgrade refused, as a browser sees it
  const e = await fatal;
  assert.equal(e.error_code, 'SESSION_CLOSED');
  assert.equal(e.status, 410);
  assert.equal(conn.state, 'closed');
  await new Promise((ok) => setTimeout(ok, 20));
  assert.equal(sockets.length, 1, 'no reconnect');
});

test('a reset (resumed:false) jumps to the welcome, says so, and rejects chats whose end is lost', async () => {
  const { sockets, conn, frames } = setup();
  const resets = [];
  conn.on('reset', (f, info) => resets.push([f.seq, info.lastSeq]));
  const first = sockets[0];
  first.receive(welcome(0, false));
  const lost = conn.chat('a', { requestId: 'a' });
  first.receive(ack('a', 'turn_1'));
  const queued = conn.chat('b', { requestId: 'b' });
  first.receive(ack('b', 'turn_3'));
  first.receive(presence(1));
  first.drop();

  const second = await socketCount(sockets, 2);
  assert.equal(second.lastSeqAsked(), 1);
  // The server holds none of what came after 1; two turns started since.
  second.receive(welcome(900, false, 2));
  assert.deepEqual(resets, [[900, 1]]);
  assert.equal(conn.lastSeq, 900);
  await assert.rejects(lost, (e) => e.error_code === 'OUTCOME_UNKNOWN' && e.turnId === 'turn_1');
  // turn_3 had not started at the reset: it is sent again and runs.
  assert.deepEqual(second.sent, [{ type: 'chat', text: 'b', request_id: 'b' }]);
  second.receive(ack('b', 'turn_3', true));
  second.receive(started(901, 'turn_3', 'b'));
  second.receive(completed(902, 'turn_3'));
  assert.equal((await queued).turn_id, 'turn_3');
  assert.deepEqual(
    frames.map((f) => f.seq),
    [1, 901, 902],
  );
  conn.close();
});

test('close() rejects what waits, and nothing reconnects', async () => {
  const { sockets, conn } = setup();
  const waiting = conn.chat('x');
  conn.close();
  await assert.rejects(waiting, (e) => e.error_code === 'CLOSED');
  assert.equal(conn.state, 'closed');
  sockets[0].drop();
  await new Promise((ok) => setTimeout(ok, 20));
  assert.equal(sockets.length, 1);
});

test('a duplicate ack for a turn that started before the connection did rejects with OUTCOME_UNKNOWN; a later one is awaited', async () => {
  const { sockets, conn } = setup({ lastSeq: 50 });
  const s = sockets[0];
  s.receive(welcome(50, true, 7)); // turn_7 is the last one started
  const old = conn.chat('a', { requestId: 'old' });
  const queued = conn.chat('b', { requestId: 'queued' });
  s.receive(ack('old', 'turn_7', true));
  await assert.rejects(old, (e) => e.error_code === 'OUTCOME_UNKNOWN' && e.turnId === 'turn_7');
  s.receive(ack('queued', 'turn_8', true));
  s.receive(started(51, 'turn_8', 'queued'));
  s.receive(completed(52, 'turn_8'));
  assert.equal((await queued).turn_id, 'turn_8');
  conn.close();
});

test('reconnect() tries at once instead of waiting out the backoff', async () => {
  const { sockets, conn } = setup({ backoff: { initialMs: 60000, maxMs: 60000 } });
  sockets[0].receive(welcome(0, false));
  sockets[0].drop(1006);
  assert.equal(conn.state, 'reconnecting');
  assert.ok(conn.reconnectAt > Date.now(), 'the next attempt waits for the backoff');
  conn.reconnect();
  assert.equal(sockets.length, 2);
  assert.equal(conn.reconnectAt, null);
  conn.reconnect(); // a socket is opening: nothing more
  assert.equal(sockets.length, 2);
  sockets[1].receive(welcome(0, true));
  conn.reconnect(); // open: nothing
  assert.equal(sockets.length, 2);
  conn.close();
});

test('the seats view follows the welcome, seat_joined, presence.seats and seat_changed; a round fills and resets', async () => {
  const { sockets, conn } = setup();
  const s = sockets[0];
  const rounds = [];
  conn.on('round', (r) => rounds.push(r));
  s.receive({
    ...welcome(0, false),
    seat_id: 'seat_2',
    character_id: 'pc_002',
    state: {
      turn: 0,
      turn_mode: 'rounds',
      seats: [{ seat_id: 'seat_1', character_id: 'pc_001', name: 'Ava', role: 'host', online: true, state: 'active' }],
    },
  });
  assert.equal(conn.seatId, 'seat_2');
  assert.equal(conn.characterId, 'pc_002');
  assert.equal(conn.turnMode, 'rounds');
  s.receive({ type: 'seat_joined', seq: 1, seat_id: 'seat_2', character_id: 'pc_002', name: 'Brin' });
  s.receive({ type: 'presence', seq: 2, players: 2, spectators: 0, seats: [{ seat_id: 'seat_1', online: true }, { seat_id: 'seat_2', online: true }] });
  assert.deepEqual(
    conn.seats.map((x) => [x.seat_id, x.name, x.role, x.online, x.state]),
    [
      ['seat_1', 'Ava', 'host', true, 'active'],
      ['seat_2', 'Brin', 'player', true, 'active'],
    ],
  );
  s.receive({ type: 'action_submitted', seq: 3, round: 1, seat_id: 'seat_2' });
  assert.deepEqual(conn.round, { round: 1, acted: ['seat_2'] });
  s.receive({
    type: 'turn_started', seq: 4, turn_id: 'turn_1', request_id: null, actor_id: 'pc_001', text: '', seat_id: null, round: 1,
    actions: [{ seat_id: 'seat_1', character_id: 'pc_001', text: null, request_id: null }, { seat_id: 'seat_2', character_id: 'pc_002', text: 'look', request_id: 'r-1' }],
  });
  assert.deepEqual(conn.round, { round: 2, acted: [] }, "the round's turn opens the next round");
  s.receive({ type: 'seat_changed', seq: 5, seat_id: 'seat_1', state: 'active', role: 'player' });
  s.receive({ type: 'seat_changed', seq: 6, seat_id: 'seat_2', state: 'active', role: 'host' });
  assert.deepEqual(conn.seats.map((x) => x.role), ['player', 'host']);
  assert.ok(rounds.length >= 3);
  conn.close();
});

test('rounds mode: a chat acked for a round settles with the round turn that lists it; a second chat replaces the first', async () => {
  const { sockets, conn } = setup();
  const s = sockets[0];
  s.receive(welcome(0, false));
  const first = conn.chat('look', { requestId: 'r-a' });
  assert.equal(s.sent.at(-1).request_id, 'r-a');
  s.receive({ ...ack('r-a', 'turn_0'), round: 1 });
  assert.deepEqual(conn.pending.map((c) => [c.requestId, c.state, c.round]), [['r-a', 'accepted', 1]]);
  const second = conn.chat('listen', { requestId: 'r-b' });
  assert.equal(s.sent.at(-1).request_id, 'r-b', 'an accepted round action does not hold the next chat back');
  s.receive({ ...ack('r-b', 'turn_0'), round: 1 });
  await assert.rejects(first, (e) => e.error_code === 'REPLACED' && e.requestId === 'r-a');
  s.receive({
    type: 'turn_started', seq: 1, turn_id: 'turn_1', request_id: null, actor_id: 'pc_001', text: '', seat_id: null, round: 1,
    actions: [{ seat_id: 'seat_1', character_id: 'pc_001', text: 'listen', request_id: 'r-b' }],
  });
  assert.deepEqual(conn.pending.map((c) => [c.requestId, c.state, c.turnId]), [['r-b', 'started', 'turn_1']]);
  s.receive(completed(2, 'turn_1'));
  const end = await second;
  assert.equal(end.turn_id, 'turn_1');
  conn.close();
});

test('say() sends a say frame and resolves with its party_chat; an error naming it rejects it', async () => {
  const { sockets, conn } = setup();
  const s = sockets[0];
  await assert.rejects(conn.say('too early'), (e) => e.error_code === 'NOT_CONNECTED');
  s.receive({ ...welcome(0, false), seat_id: 'seat_2', character_id: 'pc_002' });
  const said = conn.say('hello all');
  const frame = s.sent.at(-1);
  assert.equal(frame.type, 'say');
  assert.equal(frame.text, 'hello all');
  s.receive({ type: 'party_chat', seq: 1, seat_id: 'seat_1', name: 'Ava', text: 'hi' });
  s.receive({ type: 'party_chat', seq: 2, seat_id: 'seat_2', name: 'Brin', text: 'hello all' });
  assert.equal((await said).seq, 2);
  const refused = conn.say('x'.repeat(3000));
  s.receive({ type: 'error', request_id: s.sent.at(-1).request_id, error_code: 'TEXT_TOO_LONG', message: 'too long' });
  await assert.rejects(refused, (e) => e.error_code === 'TEXT_TOO_LONG');
  conn.close();
});

test('close 4001 (the host removed this seat) stops the connection for good with KICKED', async () => {
  const { sockets, conn } = setup();
  const errors = [];
  conn.on('error', (e) => errors.push(e));
  sockets[0].receive(welcome(0, false));
  const waiting = conn.chat('look');
  sockets[0].drop(4001);
  assert.equal(conn.state, 'closed');
  assert.equal(errors.length, 1);
  assert.equal(errors[0].error_code, 'KICKED');
  assert.ok(errors[0].fatal);
  await assert.rejects(waiting, (e) => e.error_code === 'KICKED');
  await new Promise((ok) => setTimeout(ok, 20));
  assert.equal(sockets.length, 1, 'no reconnect');
});
