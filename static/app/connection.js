// The page's side of its Connection to the session (@questd/client): the
// connection pill and the banner, each welcome (role, snapshot, the recent
// story of a long session), each story frame to its view, the outbox as it
// changes (kept in sessionStorage, so a reload sends it again), and the
// refusals and the end of the session.

import { $, el, notice, writeJson } from './dom.js';
import { hasText, t } from './language.js';
import { applySnapshot, game, questd } from './state.js';
import {
  onDelta, onTurnCompleted, onTurnFailed, onTurnStarted, renderOpening, renderOutboxEntry, storyNote,
  updateOutboxEntry,
} from './story.js';
import { onToolCall, onToolResult } from './cards.js';
import { RETURNED_CODES } from './composer.js';
import { onPartyFrame, renderParty } from './party.js';
import { onApprovalRequested, onApprovalResolved, onPendingApprovals, onSeatsChanged } from './approvals.js';

// How much recent story a newcomer to a long session reads (on a second
// connection): most of the 512 frames the server holds, with room for frames
// that arrive in the meantime.
const HISTORY_FRAMES = 480;
// How long the recent story of a long session may take to load.
const HISTORY_WAIT_MS = 5000;

export function outboxKey() {
  return 'questd.outbox.' + game.id;
}

// The messages not yet running, kept for this tab: a reload sends them again.
function saveOutbox() {
  const waiting = game.pending.filter((c) => c.state !== 'started');
  writeJson('session', outboxKey(), waiting.map((c) => ({ request_id: c.requestId, text: c.text })));
}

export function setConn(state) {
  game.connState = state;
  const c = $('conn');
  c.hidden = false;
  c.dataset.state = state;
  $('conn-text').textContent = t('conn.' + state);
  document.body.dataset.conn = state;
}

// The connection pill, the banner with its countdown, and the retry
// countdowns of the outbox: on every change of the connection's state and
// every half second. A connection that failed and waits to try again is
// reconnecting, before its first welcome too.
export function paintConnection() {
  const conn = game.conn;
  if (!conn) return;
  if (conn.state === 'open' || conn.state === 'closed') game.retrying = false;
  else if (conn.state === 'reconnecting' || conn.reconnectAt !== null) game.retrying = true;
  const state = conn.state === 'open' ? 'live'
    : conn.state === 'closed' ? 'closed'
      : game.retrying ? 'reconnecting' : 'connecting';
  if (state !== game.connState) setConn(state);
  const banner = $('banner');
  banner.hidden = state !== 'reconnecting';
  if (!banner.hidden) {
    const left = conn.reconnectAt === null ? 0 : Math.ceil((conn.reconnectAt - Date.now()) / 1000);
    $('banner-text').textContent = left > 0 ? t('banner.lost', { s: left }) : t('banner.trying');
    const waiting = game.outbox.size;
    $('banner-queue').textContent = waiting ? t('banner.queued', { n: waiting }) : '';
  }
  for (const entry of game.outbox.values()) {
    if (entry.state === 'retry') updateOutboxEntry(entry);
  }
}

// The first connection asks for the story from the start (last_seq=0): the
// server replays it when it still holds it (docs/protocol.md §3).
export function connect() {
  const conn = questd.connect(game.id, game.token, { lastSeq: 0 });
  game.conn = conn;
  conn.on('state', paintConnection);
  conn.on('welcome', onWelcome);
  conn.on('frame', handleFrame);
  conn.on('error', onError);
  conn.on('outbox', onOutbox);
  conn.on('seats', () => { renderParty(); onSeatsChanged(); });
  conn.on('round', renderParty);
}

// "Retry now", the browser back online, the tab shown again: try at once
// (nothing while a socket is open or opening).
export function reconnectNow() {
  if (!game.conn) return;
  game.conn.reconnect();
  paintConnection();
}

function fatal(code) {
  setConn('closed');
  $('banner').hidden = true;
  $('fatal-text').textContent = code === 'SESSION_CLOSED' ? t('error.closed')
    : code === 'KICKED' || code === 'LEFT' ? t(`error.${code}`) : t('error.link', { code });
  document.body.dataset.fatal = code;
  $('fatal').hidden = false;
}

// A story frame the connection hands on: each once, in seq order. `live` is
// false for a frame whose effect the welcome's snapshot already holds (a
// resume backlog); a frame given without it (from the console, or the
// browser test, which reaches it as a global) is live.
function handleFrame(f, { live } = { live: true }) {
  game.lastSeq = f.seq;
  document.body.dataset.lastSeq = String(f.seq);
  if (game.historyLoading) game.deferred.push([f, live]);
  else storyFrame(f, live);
}
globalThis.handleFrame = handleFrame;

// Every welcome, on the first connection and each reconnect. `reset`: the
// server could not replay from where the page was (resumed:false), and its
// snapshot is the truth.
function onWelcome(f, { reset }) {
  const first = !game.welcomed;
  game.welcomed = true;
  game.role = f.role;
  game.characterId = f.character_id || null;
  document.body.dataset.role = f.role;
  const spectator = f.role === 'spectator';
  $('badge').hidden = !spectator;
  $('composer').hidden = spectator;
  $('readonly').hidden = !spectator;
  $('share').hidden = false;
  // Only a player's token exports the session.
  $('save').hidden = spectator;
  if (!reset) {
    if (first) game.fullStory = true;
  } else {
    if (!first && game.lastSeq !== null && game.lastSeq < f.seq) {
      storyNote(t('story.missed'));
    }
    if (first && f.seq > 0) loadHistory(f.seq);
  }
  game.lastSeq = game.conn.lastSeq;
  document.body.dataset.lastSeq = String(game.lastSeq);
  if (f.state) applySnapshot(f.state);
  // Replayed frames bring the approvals' requests; without them the
  // snapshot says what waits.
  if (reset && f.state) onPendingApprovals(f.state.pending_approvals);
  paintConnection();
  renderOpening();
}

// A long session: read the recent story on a second, short connection
// (the first one was refused a backlog that old) and show it above.
function loadHistory(uptoSeq) {
  game.historyLoading = true;
  const frames = [];
  const reader = questd.connect(game.id, game.token, {
    lastSeq: Math.max(0, uptoSeq - HISTORY_FRAMES),
    heartbeatMs: 0,
  });
  let timer = null;
  const done = () => {
    if (!game.historyLoading) return;
    game.historyLoading = false;
    clearTimeout(timer);
    reader.close();
    const box = $('history');
    if (frames.length) box.appendChild(el('div', 'divider', t('story.earlier')));
    game.container = box;
    for (const h of frames) storyFrame(h, false);
    game.container = null;
    const deferred = game.deferred;
    game.deferred = [];
    for (const [f, live] of deferred) storyFrame(f, live);
  };
  timer = setTimeout(done, HISTORY_WAIT_MS);
  // Refused a backlog that old too: nothing earlier to show.
  reader.on('welcome', (f, { reset }) => { if (reset) done(); });
  reader.on('frame', (f) => {
    if (f.seq <= uptoSeq) frames.push(f);
    if (f.seq >= uptoSeq) done();
  });
  reader.on('state', (state) => { if (state === 'reconnecting' || state === 'closed') done(); });
}

// One story frame; `live` = its effects are not in the snapshot yet.
function storyFrame(f, live) {
  switch (f.type) {
    case 'turn_started': return onTurnStarted(f, live);
    case 'tool_call': return onToolCall(f, live);
    case 'tool_result': return onToolResult(f, live);
    case 'narrative_delta': return onDelta(f);
    case 'turn_completed': return onTurnCompleted(f, live);
    case 'turn_failed': return onTurnFailed(f, live);
    case 'presence': return setPresence(f.players, f.spectators);
    case 'approval_requested': return onApprovalRequested(f);
    case 'approval_resolved': return onApprovalResolved(f);
    case 'party_chat':
    case 'seat_joined':
    case 'seat_changed':
    case 'mode_changed':
      return onPartyFrame(f, live);
    default: return undefined;
  }
}

function setPresence(players, spectators) {
  const p = $('presence');
  p.hidden = false;
  p.dataset.players = players;
  p.dataset.spectators = spectators;
  $('presence-players').textContent = players;
  $('presence-spectators').textContent = spectators;
  p.title = t('presence.title', { p: players, s: spectators });
}

// The connection's chats not yet settled changed: each is shown in the
// timeline while it waits, and leaves it when its turn starts (the turn
// shows it from then on).
function onOutbox(chats) {
  game.pending = chats;
  saveOutbox();
  const waiting = new Set();
  for (const chat of chats) {
    if (chat.state === 'started') continue;
    waiting.add(chat.requestId);
    let entry = game.outbox.get(chat.requestId);
    if (!entry) {
      entry = { requestId: chat.requestId, text: chat.text, node: null };
      game.outbox.set(chat.requestId, entry);
    }
    Object.assign(entry, { state: chat.state, queued: chat.queued, retryAt: chat.retryAt, round: chat.round });
    if (entry.node) updateOutboxEntry(entry);
    else renderOutboxEntry(entry);
  }
  for (const [id, entry] of game.outbox) {
    if (waiting.has(id)) continue;
    game.outbox.delete(id);
    if (entry.node) entry.node.remove();
  }
  paintConnection();
}

// Every `error` frame (a refusal the connection waits out and sends again
// says so with `retrying`), and the error that stopped the connection for good.
function onError(e) {
  if (e.fatal) {
    fatal(e.error_code || e.status);
    return;
  }
  // A refused decision is told by its card (approvals.js).
  if (e.approvalId) return;
  const code = e.error_code;
  const message = (e.frame && e.frame.message) || '';
  if (e.retrying && code === 'RATE_LIMITED') {
    const ms = Math.max(500, e.retryAfterMs || 1000);
    notice(t('error.RATE_LIMITED', { s: Math.ceil(ms / 1000) }), 'info', Math.min(ms + 1000, 8000), code);
  } else if (e.retrying && hasText('error.' + code)) {
    notice(t('error.' + code), 'info', 6000, code);
  } else if (RETURNED_CODES.has(code)) {
    notice(t('error.' + code, { message }), 'error', 6000, code);
  } else {
    notice(t('error.other', { code, message }), 'error', 6000, code);
  }
}
