// Party play against a real questd (docs/protocol.md §8): a second player
// joins by invite and plays as its own seat, table talk reaches the others,
// a round collects every seat's action into one turn, and a kicked seat's
// connection (or one whose seat left) stops for good.

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

/** A demo session, its host's connection and a second player who joined by invite. */
async function party() {
  const s = await q.createSession({ campaign_id: 'demo' });
  const invite = await q.invite(s.session_id, s.player_token, { maxUses: 2 });
  assert.equal(typeof invite.invite_code, 'string');
  assert.match(invite.join_url, new RegExp(s.session_id));
  const seat = await q.join(s.session_id, invite.invite_code, 'Brin');
  assert.equal(seat.session_id, s.session_id);
  assert.notEqual(seat.player_token, s.player_token);
  const host = q.connect(s.session_id, s.player_token);
  const brin = q.connect(seat.session_id, seat.player_token);
  return { s, invite, seat, host, brin };
}

test('a player joins by invite, is welcomed as its own seat and plays a turn as its own character', async () => {
  const { s, seat, host, brin } = await party();
  const seen = record(host);
  try {
    await until(brin, ['welcome'], () => brin.state === 'open', "Brin's welcome");
    assert.equal(brin.role, 'player');
    assert.equal(brin.seatId, seat.seat_id);
    assert.equal(brin.characterId, seat.character_id);
    assert.equal(brin.welcome.state.characters.some((c) => c.character_id === seat.character_id), true, 'the snapshot has the new character');

    await until(
      host,
      ['seats'],
      () => host.seats.length === 2 && host.seats.every((x) => x.online),
      'both seats online in the host view',
    );
    const names = Object.fromEntries(host.seats.map((x) => [x.seat_id, [x.name, x.role]]));
    assert.deepEqual(names[seat.seat_id], ['Brin', 'player']);
    assert.equal(host.seats.find((x) => x.seat_id !== seat.seat_id).role, 'host');

    const end = await within(brin.chat('look around'), "Brin's turn");
    const started = seen.frames.find((f) => f.type === 'turn_started' && f.turn_id === end.turn_id)
      ?? (await until(host, ['frame'], () => seen.frames.find((f) => f.type === 'turn_started' && f.turn_id === end.turn_id), 'the host to see the turn'));
    assert.equal(started.seat_id, seat.seat_id, 'the turn names its speaker');
    assert.equal(started.actor_id, seat.character_id, "the turn acts for the speaker's character");

    const seats = await q.seats(s.session_id, seat.player_token);
    assert.equal(seats.seats.length, 2);
  } finally {
    host.close();
    brin.close();
  }
});

test("say() reaches the other players as party_chat with the speaker's name", async () => {
  const { seat, host, brin } = await party();
  try {
    await until(brin, ['welcome'], () => brin.state === 'open', "Brin's welcome");
    await until(host, ['welcome'], () => host.state === 'open', "the host's welcome");
    const heard = until(host, ['party_chat'], () => true, 'the party_chat at the host');
    const got = [];
    host.on('party_chat', (f) => got.push(f));
    const mine = await within(brin.say('anyone got a torch?'), 'the say to come back');
    assert.equal(mine.type, 'party_chat');
    await heard;
    await until(host, ['party_chat'], () => got.length > 0, 'the host to hear it');
    assert.equal(got[0].seat_id, seat.seat_id);
    assert.equal(got[0].name, 'Brin');
    assert.equal(got[0].text, 'anyone got a torch?');
  } finally {
    host.close();
    brin.close();
  }
});

test("in rounds mode both seats' chats settle with one round turn that lists every action", async () => {
  const { s, seat, host, brin } = await party();
  try {
    await until(brin, ['welcome'], () => brin.state === 'open', "Brin's welcome");
    await until(host, ['seats'], () => host.seats.length === 2 && host.seats.every((x) => x.online), 'both online');
    await q.setMode(s.session_id, s.player_token, 'rounds', { roundTimeoutS: 60 });
    await until(brin, ['round', 'frame'], () => brin.turnMode === 'rounds', 'the mode to reach Brin');

    const log = record(host);
    const acted = until(host, ['round'], () => host.round.acted.includes(seat.seat_id), "Brin's action to be seen");
    const brinEnd = brin.chat('listen at the door');
    await acted;
    const hostEnd = host.chat('look around');
    const [a, b] = await within(Promise.all([brinEnd, hostEnd]), 'the round turn');
    assert.equal(a.turn_id, b.turn_id, 'one turn for the round');
    const turn = log.frames.find((f) => f.type === 'turn_started' && f.turn_id === a.turn_id);
    assert.equal(typeof turn.round, 'number');
    const texts = Object.fromEntries(turn.actions.map((x) => [x.seat_id, x.text]));
    assert.equal(texts[seat.seat_id], 'listen at the door');
    assert.equal(Object.values(texts).filter((t) => t === 'look around').length, 1, "the host's action");
    assert.deepEqual(host.round.acted, [], 'the round turn opened the next round');
  } finally {
    host.close();
    brin.close();
  }
});

// Brin's seat is removed by `remove(s, seat)`: Brin's connection stops for
// good with `code`, its token is refused, and the seat is listed as `state`.
async function seatRemoved(remove, code, state) {
  const { s, seat, host, brin } = await party();
  try {
    await until(brin, ['welcome'], () => brin.state === 'open', "Brin's welcome");
    const stopped = until(brin, ['state'], () => brin.state === 'closed', "Brin's connection to stop");
    const errors = [];
    brin.on('error', (e) => errors.push(e));
    await remove(s, seat);
    await stopped;
    assert.ok(errors.some((e) => e.fatal && e.error_code === code), JSON.stringify(errors.map((e) => e.error_code)));
    await assert.rejects(q.getSession(s.session_id, seat.player_token), (e) => e.status === 401);
    await until(host, ['seats'], () => host.seats.find((x) => x.seat_id === seat.seat_id)?.state === state, `the host to see the seat ${state}`);
    const { seats } = await q.seats(s.session_id, s.player_token);
    assert.equal(seats.find((x) => x.seat_id === seat.seat_id).state, state);
  } finally {
    host.close();
    brin.close();
  }
}

test("a kicked seat's connection stops with KICKED and its token is refused", async () => {
  await seatRemoved((s, seat) => q.kick(s.session_id, s.player_token, seat.seat_id), 'KICKED', 'kicked');
});

test("a seat that leaves stops with LEFT, its token is refused and the seat list says left", async () => {
  await seatRemoved(async (s, seat) => {
    // Not by the host's token: the host kicks instead.
    await assert.rejects(q.leave(s.session_id, s.player_token, seat.seat_id), (e) => e.status === 403);
    await q.leave(s.session_id, seat.player_token, seat.seat_id);
  }, 'LEFT', 'left');
});
