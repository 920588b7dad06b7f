// The party at the table (docs/protocol.md §8): the seat list (who is
// online, who hosts, who has acted in this round), table talk in its own
// pane (never the game master's), the host's controls (invite, remove,
// hand the host role over, free or rounds), and the composer's note in
// rounds mode. The seats and the round come from the connection
// (@questd/client keeps them from the frames); this module draws them.

import { $, el, notice } from './dom.js';
import { hasText, t } from './language.js';
import { game, questd, refreshSnapshotSoon, seatName, seats } from './state.js';

// Table talk lines kept on the page.
const MAX_TALK_LINES = 200;

function me() {
  const id = game.conn && game.conn.seatId;
  return id ? seats().find((x) => x.seat_id === id) || null : null;
}

export function isHost() {
  const mine = me();
  return Boolean(mine && mine.role === 'host' && game.role === 'player');
}

function activeSeats() {
  return seats().filter((x) => x.state === 'active');
}

// The round actions go to now: the connection's, else the first.
function roundNumber() {
  const r = game.conn && game.conn.round;
  return r && typeof r.round === 'number' ? r.round : 1;
}

function rounds() {
  return Boolean(game.conn && game.conn.turnMode === 'rounds');
}

// Everything the party shows, after the seats, the round or the language changed.
export function renderParty() {
  if (!game.conn) return;
  const host = isHost();
  const active = activeSeats();
  // On a wide screen the party takes a column once a second seat is taken
  // (or rounds are on): a session played alone keeps its two columns. On a
  // narrow one it is always a tab (there from the start, so nothing moves
  // when the welcome comes).
  const shown = active.length > 1 || rounds();
  $('party').hidden = !shown;
  $('game').dataset.party = shown ? 'on' : 'off';
  $('invite').hidden = !host;
  document.body.dataset.host = String(host);
  document.body.dataset.seat = (game.conn.seatId) || '';
  document.body.dataset.turnMode = game.conn.turnMode;

  const modeSwitch = $('mode-switch');
  modeSwitch.hidden = !host;
  for (const b of modeSwitch.querySelectorAll('button')) {
    const on = b.dataset.mode === game.conn.turnMode;
    b.classList.toggle('on', on);
    b.setAttribute('aria-pressed', String(on));
  }
  $('mode-line').textContent = t(rounds() ? 'party.mode.rounds' : 'party.mode.free');
  $('say').hidden = game.role !== 'player';
  renderSeats(host);
  renderRoundNote();
}

function renderSeats(host) {
  const list = $('seats');
  const acted = new Set(rounds() && game.conn.round ? game.conn.round.acted : []);
  const mine = game.conn.seatId;
  // Drawn again only when something shown changed, so a focused button
  // keeps its focus.
  const shown = JSON.stringify([host, mine, [...acted], rounds(), t('party.host'),
    activeSeats().map((x) => [x.seat_id, seatName(x.seat_id) || x.name, x.online, x.role])]);
  if (list.dataset.shown === shown) return;
  list.dataset.shown = shown;
  list.replaceChildren();
  for (const seat of activeSeats()) {
    const name = seatName(seat.seat_id) || seat.name;
    const li = el('li', 'seat');
    li.dataset.seatId = seat.seat_id;
    li.dataset.online = String(seat.online);
    li.dataset.role = seat.role;
    const dot = el('i', 'seat-dot');
    dot.setAttribute('aria-hidden', 'true');
    const who = el('span', 'seat-name', name);
    const state = el('span', 'sr-only', t(seat.online ? 'party.online' : 'party.offline'));
    li.append(dot, who, state);
    if (seat.seat_id === mine) li.append(el('span', 'seat-tag you', t('party.you')));
    if (seat.seat_id === mine && !host && game.role === 'player') {
      // A player leaves by its own seat; the host hands the role over first.
      const leave = el('button', 'ghost small leave', t('party.leave'));
      leave.type = 'button';
      leave.setAttribute('aria-label', t('party.leave.label'));
      leave.addEventListener('click', () => confirmThen(t('party.leave.confirm'), t('party.leave.yes'), leave,
        () => partyAction(() => questd.leave(game.id, game.token, mine))));
      const tools = el('span', 'seat-tools');
      tools.append(leave);
      li.append(tools);
    }
    if (seat.role === 'host') li.append(el('span', 'seat-tag host', t('party.host')));
    if (rounds()) {
      const did = acted.has(seat.seat_id);
      li.dataset.acted = String(did);
      li.append(el('span', 'seat-tag ' + (did ? 'acted' : 'waiting'), t(did ? 'party.acted' : 'party.waiting')));
    }
    if (host && seat.seat_id !== mine) {
      const tools = el('span', 'seat-tools');
      const promote = el('button', 'ghost small make-host', t('party.make_host'));
      promote.type = 'button';
      promote.setAttribute('aria-label', t('party.make_host.label', { name }));
      promote.addEventListener('click', () => partyAction(() => questd.handOverHost(game.id, game.token, seat.seat_id)));
      const kick = el('button', 'ghost small kick', t('party.kick'));
      kick.type = 'button';
      kick.setAttribute('aria-label', t('party.kick.label', { name }));
      kick.addEventListener('click', () => confirmThen(t('party.kick.confirm', { name }), t('confirm.yes'), kick,
        () => partyAction(() => questd.kick(game.id, game.token, seat.seat_id))));
      tools.append(promote, kick);
      li.append(tools);
    }
    list.appendChild(li);
  }
}

// The composer in rounds mode: whose action the chat is, and who the round waits for.
function renderRoundNote() {
  const note = $('round-note');
  const input = $('chat-input');
  const on = rounds() && game.role === 'player';
  note.hidden = !on;
  input.placeholder = t(on ? 'round.placeholder' : 'composer.placeholder');
  if (!on) return;
  const n = roundNumber();
  const acted = new Set(game.conn.round.acted);
  const waiting = activeSeats().filter((x) => x.online && !acted.has(x.seat_id)).map((x) => (x.seat_id === game.conn.seatId ? t('party.you') : seatName(x.seat_id) || x.name));
  const mine = acted.has(game.conn.seatId);
  if (!waiting.length) note.textContent = t('round.next', { n });
  else note.textContent = t(mine ? 'round.mine' : 'round.note', { n, names: waiting.join(t('list.sep')) });
}

async function partyAction(call) {
  try {
    await call();
  } catch (e) {
    notice(t('party.failed', { message: e.message || e.error_code }), 'error', 6000, e.error_code);
  }
}

// Removing a seat, or leaving, asks first, in a dialog the keyboard can answer.
function confirmThen(text, yesLabel, from, action) {
  const box = $('confirm-box');
  $('confirm-text').textContent = text;
  box.hidden = false;
  const yes = $('confirm-yes');
  yes.textContent = yesLabel;
  const no = $('confirm-no');
  const close = () => {
    box.hidden = true;
    yes.onclick = no.onclick = box.onkeydown = null;
    if (from.isConnected) from.focus();
  };
  yes.onclick = () => {
    close();
    action();
  };
  no.onclick = close;
  box.onkeydown = (e) => { if (e.key === 'Escape') close(); };
  no.focus();
}

// The host makes an invite: its link (made absolute) to copy.
export async function openInvite() {
  const button = $('invite');
  button.disabled = true;
  try {
    const invite = await questd.invite(game.id, game.token);
    $('invite-link').value = new URL(invite.join_url, location.origin).href;
    $('invite-box').hidden = false;
    $('invite-link').focus();
    $('invite-link').select();
  } catch (e) {
    notice(t('invite.failed', { message: e.message || e.error_code }), 'error', 6000, e.error_code);
  } finally {
    button.disabled = false;
  }
}

export function setMode(mode) {
  if (!game.conn || mode === game.conn.turnMode) return;
  partyAction(() => questd.setMode(game.id, game.token, mode));
}

// Table talk goes out at once; it is not kept for a reconnect as chats are.
export function sendSay(text) {
  text = String(text || '').trim();
  if (!text || !game.conn || game.role !== 'player') return false;
  game.conn.say(text).catch((e) => {
    const code = e && e.error_code;
    const vars = { code, message: e.message || '', s: Math.ceil((e.retryAfterMs || 1000) / 1000) };
    const key = ['talk.' + code, 'error.' + code].find(hasText) || 'error.other';
    notice(t(key, vars), 'error', 6000, code);
  });
  return true;
}

function talkLine(li) {
  const list = $('talk-list');
  list.appendChild(li);
  while (list.children.length > MAX_TALK_LINES) list.firstChild.remove();
  list.scrollTop = list.scrollHeight;
}

function talkNote(text) {
  talkLine(el('li', 'talk-sys', text));
}

// A story frame of the party. `live`: its effect is not in the snapshot yet.
export function onPartyFrame(f, live) {
  switch (f.type) {
    case 'party_chat': {
      const li = el('li', 'talk-line');
      li.dataset.seatId = f.seat_id;
      if (f.seat_id === game.conn.seatId) li.classList.add('mine');
      li.append(el('b', 'talk-who', f.name), el('span', 'talk-text', f.text));
      talkLine(li);
      break;
    }
    case 'seat_joined':
      talkNote(t('party.joined', { name: f.name }));
      // The new character is in the session's state, not yet in ours.
      if (live) refreshSnapshotSoon();
      break;
    case 'seat_changed': {
      const name = seatName(f.seat_id) || f.seat_id;
      if (f.state === 'kicked') talkNote(t('party.kicked', { name }));
      else if (f.state === 'left') talkNote(t('party.left', { name }));
      else if (f.role === 'host') talkNote(t('party.new_host', { name }));
      break;
    }
    case 'mode_changed':
      talkNote(t(f.turn_mode === 'rounds' ? 'party.now_rounds' : 'party.now_free'));
      break;
    default:
  }
}
