// Saves (docs/protocol.md §13) against a real questd: a played session
// exported and imported as a new one has the same story and state and
// plays on; a spectator may not export; a save that was tampered with is
// refused with its problems.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Questd } from '../src/index.js';
import { firstGap, record, TestServer, until, within } from './server.js';

const KEY = 'saves-test-key-0123456789';

let server;
let q;
/** With the key: direct tool calls into a session (damage from elsewhere). */
let service;
/** A session with turns that moved, took and hurt the hero, and its save. */
let played;

before(async () => {
  server = await TestServer.start({ QUESTD_INTERNAL_API_KEY: KEY });
  q = new Questd(server.url);
  service = new Questd(server.url, { apiKey: KEY });
  played = await playAndExport();
});

after(async () => {
  // Unset when it could not start; that failure is the one to see.
  if (server) await server.cleanup();
});

/**
 * Plays three turns on the demo (a taking, a move, a question) and a direct
 * blow to the hero, then exports the session with the player's token.
 */
async function playAndExport() {
  const s = await q.createSession({ campaign_id: 'demo' });
  const conn = q.connect(s.session_id, s.player_token);
  const log = record(conn);
  try {
    for (const text of ['pick up the lantern', "go to Lamplighter's Alcove", 'where can I go']) {
      const end = await within(conn.chat(text), `the turn "${text}"`);
      assert.equal(end.type, 'turn_completed', text);
    }
    await service.callTool(
      'hp_delta',
      { target_character_id: 'pc_001', delta: -5, cause: 'a falling lantern' },
      { siteId: 'saves-test', sessionId: s.session_id },
    );
    await until(conn, ['frame'], () => log.frames.some((f) => f.type === 'tool_result' && f.tool === 'hp_delta'), 'the blow');
  } finally {
    conn.close();
  }
  const snapshot = await q.getSession(s.session_id, s.player_token);
  const hero = snapshot.characters.find((c) => c.character_id === 'pc_001');
  // The play did what the comparisons below rely on.
  assert.equal(hero.hp, hero.max_hp - 5);
  assert.equal(hero.area_id, 'area_002');
  assert.ok(hero.inventory.some((i) => i.slug === 'green_glass_lamp'), 'the lamp was taken');
  const save = await q.exportSession(s.session_id, s.player_token);
  return { s, snapshot, save };
}

/** What a story frame tells a reader: its type, seq, turn and words. */
function told(f) {
  return [f.type, f.seq, f.turn_id ?? null, f.text ?? f.reply ?? null];
}

/** What a player sees of a session: characters (HP, inventory, place), areas, position, turn. */
function seen(snapshot) {
  return {
    campaign_id: snapshot.campaign_id,
    title: snapshot.title,
    turn: snapshot.turn,
    active_actor_id: snapshot.active_actor_id,
    characters: snapshot.characters,
    areas: snapshot.areas,
    zones: snapshot.zones,
    position: snapshot.player.position,
    current_zone_id: snapshot.player.current_zone_id,
  };
}

/** Reads a session's story from seq 1 through `uptoSeq` on a connection of its own. */
async function readStory(sessionId, token, uptoSeq) {
  const reader = q.connect(sessionId, token, { lastSeq: 0 });
  const log = record(reader);
  try {
    await until(reader, ['frame'], () => reader.lastSeq >= uptoSeq, `the story through seq ${uptoSeq}`);
  } finally {
    reader.close();
  }
  return log.frames.filter((f) => f.seq <= uptoSeq);
}

test('a save holds the campaign, the state and every story frame, and no token', () => {
  const { s, save } = played;
  assert.equal(save.questd_save, 1);
  assert.equal(save.source.session_id, s.session_id);
  assert.equal(save.campaign.campaign_id, 'demo');
  assert.ok(save.source.last_seq > 0);
  assert.deepEqual(
    save.story.map((f) => f.seq),
    Array.from({ length: save.source.last_seq }, (_, i) => i + 1),
    'story seqs are 1..last_seq',
  );
  const text = JSON.stringify(save);
  for (const token of [s.player_token, s.spectator_token]) assert.ok(!text.includes(token), 'no token in the save');
});

test('an imported save has the same story and state, and a chat plays on', async () => {
  const { s, snapshot, save } = played;
  const lastSeq = save.source.last_seq;
  const created = await q.importSession(save, { visibility: 'public' });
  assert.match(created.session_id, /^sess_/);
  assert.notEqual(created.session_id, s.session_id);
  assert.notEqual(created.player_token, s.player_token);
  assert.equal(created.visibility, 'public');
  const listed = await q.listSessions();
  assert.ok(listed.some((x) => x.session_id === created.session_id), 'a public import is listed');

  // The same story, frame by frame, from seq 1.
  const original = await readStory(s.session_id, s.player_token, lastSeq);
  assert.equal(original.length, lastSeq);
  const conn = q.connect(created.session_id, created.player_token, { lastSeq: 0 });
  const log = record(conn);
  try {
    await until(conn, ['frame'], () => conn.lastSeq >= lastSeq, 'the imported story');
    const replayed = log.frames.filter((f) => f.seq <= lastSeq);
    assert.equal(replayed[0].seq, 1);
    assert.equal(firstGap(replayed), null);
    assert.deepEqual(replayed.map(told), original.map(told));
    assert.ok(
      replayed.some((f) => f.type === 'turn_started' && f.text === "go to Lamplighter's Alcove"),
      'the played turns are in it',
    );

    // The same state, as the player sees it.
    const imported = await q.getSession(created.session_id, created.player_token);
    assert.deepEqual(seen(imported), seen(snapshot));
    assert.equal(conn.welcome.state.turn, snapshot.turn);

    // Play goes on where it stopped: from the Alcove, after the last seq.
    const end = await within(conn.chat('where can I go'), 'a turn in the imported session');
    assert.equal(end.type, 'turn_completed');
    assert.ok(end.seq > lastSeq, 'new frames follow the imported story');
    assert.equal(firstGap(log.frames), null);
    const after = await q.getSession(created.session_id, created.player_token);
    assert.equal(after.turn, snapshot.turn + 1);
    // The original session is untouched by the import's play.
    assert.equal((await q.getSession(s.session_id, s.player_token)).turn, snapshot.turn);
  } finally {
    conn.close();
  }
});

test('only the player (or a key) exports: a spectator is FORBIDDEN, a wrong token UNAUTHORIZED', async () => {
  const { s } = played;
  await assert.rejects(q.exportSession(s.session_id, s.spectator_token), (e) => {
    assert.equal(e.status, 403);
    assert.equal(e.error_code, 'FORBIDDEN');
    return true;
  });
  await assert.rejects(q.exportSession(s.session_id, 'not-a-token'), (e) => e.status === 401);
  await assert.rejects(q.exportSession('sess_nosuchsession00', s.player_token), (e) => e.status === 404 || e.status === 401);
  const keyed = await service.exportSession(s.session_id);
  assert.equal(keyed.source.session_id, s.session_id);
});

test('a tampered save is refused with INVALID_SAVE and its problems', async () => {
  const { save } = played;
  const tampered = (change) => {
    const copy = structuredClone(save);
    change(copy);
    return copy;
  };
  const refused = async (body, about, what) => {
    await assert.rejects(q.importSession(body), (e) => {
      assert.equal(e.status, 400, what);
      assert.equal(e.error_code, 'INVALID_SAVE', what);
      assert.ok(Array.isArray(e.problems) && e.problems.length > 0, `${what}: problems are listed`);
      assert.ok(e.problems.some((p) => about.test(p)), `${what}: ${JSON.stringify(e.problems)}`);
      return true;
    });
  };
  await refused(
    tampered((c) => {
      const hero = c.state.characters.find((x) => x.character_id === 'pc_001');
      hero.hp = hero.max_hp + 50;
    }),
    /hp/i,
    'hp above max_hp',
  );
  await refused(
    tampered((c) => c.story.splice(1, 1)),
    /seq/i,
    'a story seq skipped',
  );
  await refused(
    tampered((c) => {
      c.questd_save = 2;
    }),
    /version|newer|questd_save/i,
    'a newer format',
  );
  // The same save untouched is taken: the refusals were the changes'.
  const created = await q.importSession(save);
  assert.equal(created.visibility, 'private');
});

test('a save larger than an address may send at once is refused with 413', async () => {
  // Past creation's KiB burst (2 MiB by default), which bounds a save sent
  // without a key before the server reads it.
  const padded = { ...played.save, padding: 'x'.repeat(3 * 1024 * 1024) };
  await assert.rejects(q.importSession(padded), (e) => {
    assert.equal(e.status, 413);
    assert.equal(e.error_code, 'PAYLOAD_TOO_LARGE');
    return true;
  });
});
