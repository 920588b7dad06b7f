// Errors against a real questd: refused links, refused chats, rate limits,
// HTTP errors.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Questd, QuestdError } from '../src/index.js';
import { record, TestServer, until, within } from './server.js';

// A session takes one chat at once and 20 a minute: a second chat right
// after the first waits about 3 s for its token.
const RATE = { QUESTD_CHAT_BURST: '1', QUESTD_CHAT_PER_MINUTE: '20' };

let server;
let q;

before(async () => {
  server = await TestServer.start(RATE);
  q = new Questd(server.url);
});

after(async () => {
  // Unset when it could not start; that failure is the one to see.
  if (server) await server.cleanup();
});

const quick = { backoff: { initialMs: 20, maxMs: 200 } };

/** Waits for the connection to stop for good; returns the error it reported. */
async function fatalError(conn) {
  const errors = [];
  conn.on('error', (e) => errors.push(e));
  await until(conn, ['state'], () => conn.state === 'closed', 'the connection to stop');
  assert.equal(errors.length, 1, 'one error says why');
  return errors[0];
}

test('a wrong token stops the connection with UNAUTHORIZED and rejects what waits', async () => {
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = q.connect(s.session_id, 'not-the-token', quick);
  const waiting = conn.chat('where can I go').then(
    () => null,
    (e) => e,
  );
  const e = await fatalError(conn);
  assert.ok(e instanceof QuestdError);
  assert.equal(e.error_code, 'UNAUTHORIZED');
  assert.equal(e.status, 401);
  assert.equal(e.fatal, true);
  const rejected = await waiting;
  assert.equal(rejected.error_code, 'UNAUTHORIZED');
  assert.equal(conn.state, 'closed');
});

test('an unknown session stops the connection with NOT_FOUND', async () => {
  const conn = q.connect('sess_nosuchsession00', 'whatever', quick);
  const e = await fatalError(conn);
  assert.equal(e.error_code, 'NOT_FOUND');
  assert.equal(e.status, 404);
});

test('an over-long chat is refused with TEXT_TOO_LONG and the connection stays usable', async () => {
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = q.connect(s.session_id, s.player_token);
  const log = record(conn);
  try {
    await assert.rejects(
      within(conn.chat('x'.repeat(2001), { requestId: 'too-long' }), 'the refusal'),
      (e) => e instanceof QuestdError && e.error_code === 'TEXT_TOO_LONG' && e.requestId === 'too-long',
    );
    const end = await within(conn.chat('where can I go'), 'the next turn');
    assert.equal(end.type, 'turn_completed');
    assert.equal(conn.state, 'open');
    assert.deepEqual(
      log.errors.map((e) => [e.error_code, e.retrying]),
      [['TEXT_TOO_LONG', false]],
    );
    assert.equal(log.frames.filter((f) => f.type === 'turn_started').length, 1, 'the refused chat never ran');
  } finally {
    conn.close();
  }
});

test('a rate-limited chat is sent again after the wait the server names and runs once', async () => {
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = q.connect(s.session_id, s.player_token);
  const log = record(conn);
  const retries = [];
  conn.on('outbox', (chats) => {
    for (const c of chats) if (c.state === 'retry') retries.push(c.requestId);
  });
  try {
    const first = conn.chat('where can I go', { requestId: 'one' });
    const second = conn.chat('roll 1d20', { requestId: 'two' });
    const [a, b] = await within(Promise.all([first, second]), 'both turns', 60000);
    assert.equal(a.type, 'turn_completed');
    assert.equal(b.type, 'turn_completed');
    const limited = log.errors.filter((e) => e.error_code === 'RATE_LIMITED');
    assert.ok(limited.length >= 1, 'the server refused the second chat at first');
    for (const e of limited) {
      assert.equal(e.requestId, 'two');
      assert.equal(e.retrying, true);
      assert.ok(e.retryAfterMs > 0);
    }
    assert.ok(retries.includes('two'), 'the outbox showed it waiting to retry');
    assert.deepEqual(
      log.frames.filter((f) => f.type === 'turn_started').map((f) => f.request_id),
      ['one', 'two'],
      'each ran once, in order',
    );
  } finally {
    conn.close();
  }
});

test('chats the client cannot send are refused at once', async () => {
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = q.connect(s.session_id, s.player_token, { maxOutbox: 1 });
  try {
    await assert.rejects(conn.chat('hi', { requestId: '' }), (e) => e.error_code === 'INVALID_REQUEST_ID');
    await assert.rejects(conn.chat('hi', { requestId: 'x'.repeat(129) }), (e) => e.error_code === 'INVALID_REQUEST_ID');
    await assert.rejects(conn.chat('hi', { requestId: 'a\nb' }), (e) => e.error_code === 'INVALID_REQUEST_ID');
    const first = conn.chat('where can I go');
    await assert.rejects(conn.chat('one too many'), (e) => e.error_code === 'OUTBOX_FULL');
    await within(first, 'the first chat');
  } finally {
    conn.close();
  }
});

test('HTTP errors carry the status, the code and the message', async () => {
  await assert.rejects(q.createSession({ campaign_id: 'no-such-campaign' }), (e) => {
    assert.ok(e instanceof QuestdError);
    assert.equal(e.status, 400);
    assert.equal(e.error_code, 'BAD_REQUEST');
    assert.match(e.message, /no built-in campaign/);
    return true;
  });
  const s = await q.createSession({ campaign_id: 'demo' });
  await assert.rejects(q.getSession(s.session_id, 'wrong'), (e) => e.status === 401 && e.error_code === 'UNAUTHORIZED');
  await assert.rejects(q.actions(s.session_id, s.player_token, { afterSeq: -1 }), (e) => e.status === 400);
  // No key configured: the tool API says a key is needed.
  await assert.rejects(q.callTool('roll_dice', { dice: '1d6' }, { siteId: 'test' }), (e) => e.status === 401);
  // Nothing listens: the request never got an answer.
  const nowhere = new Questd('http://127.0.0.1:1');
  await assert.rejects(nowhere.campaigns(), (e) => e.error_code === 'NETWORK_ERROR' && e.status === 0);
});

test('a key calls tools and creates sessions past the per-address limit', async () => {
  const key = 'test-key-0123456789';
  const keyed = await TestServer.start({ QUESTD_INTERNAL_API_KEY: key, QUESTD_CREATE_BURST: '1', QUESTD_CREATE_PER_MINUTE: '1' });
  try {
    // The creation limit is each node's own (it counts addresses in
    // memory): with two nodes, this part talks to one of them directly,
    // since behind the balancer the second create could go to the other
    // node's untouched budget. The key's calls below go through the
    // balancer.
    const anonymous = new Questd(keyed.nodeUrl);
    await anonymous.createSession({ campaign_id: 'demo' });
    await assert.rejects(anonymous.createSession({ campaign_id: 'demo' }), (e) => {
      assert.equal(e.status, 429);
      assert.equal(e.error_code, 'RATE_LIMITED');
      assert.ok(e.retryAfterMs >= 1000, 'Retry-After is read');
      return true;
    });
    const service = new Questd(keyed.url, { apiKey: key });
    const s = await service.createSession({ campaign_id: 'demo' });
    const rolled = await service.callTool('roll_dice', { dice: '2d6', reason: 'a test roll' }, { siteId: 'test', sessionId: s.session_id });
    assert.equal(rolled.success, true);
    assert.equal(rolled.output.rolls.length, 2);
    await assert.rejects(service.callTool('no_such_tool', {}, { siteId: 'test' }), (e) => {
      assert.equal(e.status, 404);
      assert.equal(e.error_code, 'TOOL_NOT_FOUND');
      assert.equal(e.body.success, false);
      return true;
    });
  } finally {
    await keyed.cleanup();
  }
});
