// Approval of tool calls against a real questd (docs/protocol.md §19): a
// turn that pauses at a call the session's rule names is listed in
// `approvals` for everyone, the speaker decides with `decide()`, and the
// turn goes on; refusals reject the decision that caused them.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Questd } from '../src/index.js';
import { record, TestServer, until, within } from './server.js';

let server;
let q;

before(async () => {
  server = await TestServer.start();
  q = new Questd(server.url);
});

after(async () => {
  if (server) await server.cleanup();
});

/** A demo session whose `add_inventory` waits for a decision, its player's and a spectator's connections. */
async function guarded() {
  const s = await q.createSession({ campaign_id: 'demo', approval: { tools: ['add_inventory'] } });
  const player = q.connect(s.session_id, s.player_token);
  const watcher = q.connect(s.session_id, s.spectator_token);
  await until(player, ['state'], () => player.state === 'open', "the player's welcome");
  await until(watcher, ['state'], () => watcher.state === 'open', "the spectator's welcome");
  return { s, player, watcher };
}

/** Takes the lamp at the gate; resolves with the pending approval once the player's connection lists it. */
async function takeTheLamp(player) {
  const done = player.chat('take the lamp');
  const waiting = await until(player, ['approvals'], () => player.approvals[0], 'the approval in the list');
  return { done, waiting };
}

test('a paused call is listed for everyone, approved by its speaker, and its turn goes on', async () => {
  const { s, player, watcher } = await guarded();
  const seen = record(player);
  try {
    const { done, waiting } = await takeTheLamp(player);
    assert.equal(waiting.tool, 'add_inventory');
    assert.equal(waiting.seat_id, player.seatId);
    assert.match(waiting.approval_id, /^apr_/);
    assert.equal(waiting.args.items[0].slug, 'green_glass_lamp', JSON.stringify(waiting.args));
    assert.ok(Date.parse(waiting.expires_at) > Date.now(), waiting.expires_at);
    await until(watcher, ['approvals'], () => watcher.approvals.length === 1, 'the spectator to see it');
    assert.deepEqual(watcher.approvals, player.approvals);

    // A newcomer reads it from the welcome's snapshot.
    const late = q.connect(s.session_id, s.spectator_token);
    try {
      await until(late, ['approvals'], () => late.approvals.length === 1, 'the newcomer to see it');
      assert.equal(late.welcome.state.pending_approvals[0].approval_id, waiting.approval_id);
    } finally {
      late.close();
    }

    // A spectator may not decide: its own decision is refused, nothing runs.
    await assert.rejects(watcher.decide(waiting.approval_id, 'approve'), (e) => {
      assert.equal(e.error_code, 'FORBIDDEN');
      assert.equal(e.approvalId, waiting.approval_id);
      return true;
    });
    assert.equal(player.approvals.length, 1, 'still waiting');

    const resolved = await within(player.decide(waiting.approval_id, 'approve'), 'the decision');
    assert.equal(resolved.type, 'approval_resolved');
    assert.equal(resolved.decision, 'approve');
    assert.equal(resolved.by_seat_id, player.seatId);
    assert.deepEqual(player.approvals, []);
    await until(watcher, ['approvals'], () => watcher.approvals.length === 0, 'the spectator to see it decided');

    const end = await within(done, 'the turn after the approval');
    assert.ok(end.reply, 'the turn has its reply');
    const result = seen.frames.find((f) => f.type === 'tool_result' && f.call_id === waiting.call_id);
    assert.equal(result.status, 'ok', JSON.stringify(result));
    const snapshot = await q.getSession(s.session_id, s.player_token);
    const hero = snapshot.characters.find((c) => c.character_id === snapshot.active_actor_id);
    assert.ok(hero.inventory.some((i) => i.slug === 'green_glass_lamp'), 'the lamp was taken');

    // The same approval again: refused, and the lamp is not taken twice.
    await assert.rejects(player.decide(waiting.approval_id, 'deny'), (e) => e.error_code === 'CONFLICT');
    await assert.rejects(player.decide('apr_unknown', 'approve'), (e) => e.error_code === 'NOT_FOUND');
    const after = await q.getSession(s.session_id, s.player_token);
    const lamps = after.characters.find((c) => c.character_id === after.active_actor_id).inventory.filter((i) => i.slug === 'green_glass_lamp');
    assert.equal(lamps.length, 1);
    assert.equal(lamps[0].quantity, 1);
  } finally {
    player.close();
    watcher.close();
  }
});

test('a denied call does not run, and the game master tells it as stayed', async () => {
  const { s, player, watcher } = await guarded();
  const seen = record(player);
  try {
    const { done, waiting } = await takeTheLamp(player);
    const resolved = await within(player.decide(waiting.approval_id, 'deny', 'not yet'), 'the denial');
    assert.equal(resolved.decision, 'deny');
    assert.equal(resolved.reason, 'not yet');
    const end = await within(done, 'the turn after the denial');
    const result = seen.frames.find((f) => f.type === 'tool_result' && f.call_id === waiting.call_id);
    assert.equal(result.status, 'rejected');
    assert.equal(result.error_code, 'APPROVAL_DENIED');
    assert.match(end.reply, /stayed/, end.reply);
    const snapshot = await q.getSession(s.session_id, s.player_token);
    const hero = snapshot.characters.find((c) => c.character_id === snapshot.active_actor_id);
    assert.ok(!hero.inventory.some((i) => i.slug === 'green_glass_lamp'), 'the lamp stays where it is');
  } finally {
    player.close();
    watcher.close();
  }
});

test('decide() checks its arguments and needs an open connection', async () => {
  const { player, watcher } = await guarded();
  try {
    await assert.rejects(player.decide('apr_1', 'maybe'), TypeError);
    await assert.rejects(player.decide('', 'approve'), TypeError);
    await assert.rejects(player.decide('apr_1', 'deny', 7), TypeError);
    player.close();
    await assert.rejects(player.decide('apr_1', 'approve'), (e) => e.error_code === 'NOT_CONNECTED');
  } finally {
    player.close();
    watcher.close();
  }
});
