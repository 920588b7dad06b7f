// questd browser client: the lobby, and the play / spectate view of one
// session (story timeline, live SVG map, character sheet). No dependencies
// and no build step; served by the binary (src/http/static_files.rs).
//
// Everything the server sends is inserted with textContent or SVG
// attributes, never as HTML.
//
// The link to the server is @questd/client (clients/js, served under
// /client/): its HTTP calls for the lobby, and its Connection for a session
// (docs/protocol.md §2, §3), which
// - reconnects with backoff and `last_seq`, and hands on every story frame
//   once, in seq order; `live` is false for a frame of a resume backlog
//   whose effect the welcome's snapshot (the state as of `welcome.seq`)
//   already holds; effects of live frames are applied from their tool
//   results and from the `state_patch` of `turn_completed`;
// - keeps typed messages in its outbox until their turns start, sends each
//   again with the same `request_id` after a reconnect (the server runs a
//   request_id once) and after a rate limit; the page keeps the outbox in
//   sessionStorage so a reload sends them again;
// - stops for good on a link the server refuses or a session an operator
//   closed.

import { Questd } from '/client/index.js';

const $ = (id) => document.getElementById(id);
const SVG_NS = 'http://www.w3.org/2000/svg';

// How much recent story a newcomer to a long session reads (on a second
// connection): most of the 512 frames the server holds, with room for frames
// that arrive in the meantime.
const HISTORY_FRAMES = 480;
// How long the recent story of a long session may take to load.
const HISTORY_WAIT_MS = 5000;
// How long a newly created area is marked as new on the map.
const NEW_AREA_MS = 2500;
// The server's longest chat text (QUESTD_MAX_TEXT_CHARS default).
const MAX_TEXT_CHARS = 2000;
// Refusals of a chat that put its text back into the input.
const RETURNED_CODES = new Set(['TEXT_TOO_LONG', 'INVALID_FRAME', 'FORBIDDEN']);

// This server (the page's origin).
const questd = new Questd();

// ---------------------------------------------------------------- helpers

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function icon(name, cls) {
  const s = svg('svg', { class: 'icon' + (cls ? ' ' + cls : ''), 'aria-hidden': 'true' });
  s.appendChild(svg('use', { href: '#i-' + name }));
  return s;
}

function sessionLink(id, token) {
  return `${location.origin}/?session=${encodeURIComponent(id)}&token=${encodeURIComponent(token)}`;
}

function short(value, max = 60) {
  let s = typeof value === 'string' ? value : JSON.stringify(value);
  if (s === undefined) s = String(value);
  return s.length > max ? s.slice(0, max - 1) + '…' : s;
}

function store(kind) {
  try { return kind === 'local' ? window.localStorage : window.sessionStorage; } catch { return null; }
}

function readJson(kind, key, fallback) {
  try { return JSON.parse(store(kind).getItem(key)) ?? fallback; } catch { return fallback; }
}

function writeJson(kind, key, value) {
  try { store(kind).setItem(key, JSON.stringify(value)); } catch { /* private mode: keep in memory only */ }
}

async function copyFrom(inputId, button) {
  const input = $(inputId);
  input.select();
  try { await navigator.clipboard.writeText(input.value); } catch { document.execCommand('copy'); }
  button.textContent = t('copied');
  setTimeout(() => { button.textContent = t('copy'); }, 1500);
}

// ---------------------------------------------------------------- language

let lang = pickLanguage();

function pickLanguage() {
  const saved = readJson('local', 'questd.lang', null);
  if (saved === 'en' || saved === 'zh') return saved;
  return (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

function t(key, vars) {
  const table = window.I18N || {};
  const s = (table[lang] && table[lang][key]) ?? (table.en && table.en[key]) ?? key;
  return s.replace(/\{(\w+)\}/g, (_, k) => (vars && vars[k] !== undefined ? String(vars[k]) : ''));
}

function applyLanguage() {
  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  for (const e of document.querySelectorAll('[data-i18n-placeholder]')) e.placeholder = t(e.dataset.i18nPlaceholder);
  // Controls whose visible text a narrow screen hides keep their name for
  // screen readers.
  for (const e of document.querySelectorAll('[data-i18n-label]')) e.setAttribute('aria-label', t(e.dataset.i18nLabel));
  $('lang').textContent = t('lang.switch');
  $('lang').title = t('lang.title');
  if (game.id) {
    renderHints();
    setConn(game.connState || 'connecting');
    paintConnection();
    if (game.snapshot) render();
    renderOpening();
    for (const entry of game.outbox.values()) updateOutboxEntry(entry);
  }
}

// ---------------------------------------------------------------- notices

// A short message under the timeline that never blocks the chat.
function notice(text, kind = 'info', ms = 6000, code = '') {
  const box = $('notices');
  const n = el('div', 'notice ' + kind);
  if (code) n.dataset.code = code;
  n.append(icon(kind === 'error' ? 'alert' : 'spark'), el('span', null, text));
  box.appendChild(n);
  while (box.children.length > 3) box.firstChild.remove();
  if (ms) setTimeout(() => n.remove(), ms);
  return n;
}

// ---------------------------------------------------------------- lobby

async function loadCampaigns() {
  const list = $('campaigns');
  try {
    const campaigns = await questd.campaigns();
    list.replaceChildren();
    for (const c of campaigns) {
      const card = el('article', 'campaign');
      card.dataset.campaignId = c.campaign_id;
      const art = el('div', 'campaign-art');
      art.appendChild(icon('lantern'));
      const info = el('div', 'grow');
      info.append(el('h3', null, c.title || c.campaign_id), el('p', 'muted', c.description || ''));
      const btn = el('button', 'primary start', t('lobby.start'));
      btn.type = 'button';
      btn.addEventListener('click', () => startSession(c, btn));
      card.append(art, info, btn);
      list.appendChild(card);
    }
    if (!campaigns.length) list.appendChild(el('p', 'muted', t('lobby.no_campaigns')));
  } catch (e) {
    list.replaceChildren(el('p', 'error', t('lobby.campaigns_failed', { message: e.message })));
  }
}

async function startSession(campaign, btn) {
  btn.disabled = true;
  btn.textContent = t('lobby.starting');
  try {
    const s = await questd.createSession({
      campaign_id: campaign.campaign_id,
      visibility: $('public').checked ? 'public' : 'private',
    });
    const mine = readJson('local', 'questd.sessions', {});
    mine[s.session_id] = { player: s.player_token, spectator: s.spectator_token, title: campaign.title };
    writeJson('local', 'questd.sessions', mine);
    const player = sessionLink(s.session_id, s.player_token);
    const spectator = sessionLink(s.session_id, s.spectator_token);
    $('player-link-text').value = player;
    $('spectator-link-text').value = spectator;
    $('player-link').href = player;
    $('spectator-link').href = spectator;
    $('created').hidden = false;
    $('created').scrollIntoView({ behavior: 'smooth', block: 'nearest' });
    loadSessions();
  } catch (e) {
    notice(t('lobby.start_failed', { message: e.message }), 'error');
  } finally {
    btn.disabled = false;
    btn.textContent = t('lobby.start');
  }
}

async function loadSessions() {
  const list = $('sessions');
  try {
    const sessions = await questd.listSessions();
    const mine = readJson('local', 'questd.sessions', {});
    list.replaceChildren();
    for (const s of sessions) {
      const li = el('li', 'session-row');
      li.dataset.sessionId = s.session_id;
      const info = el('div', 'grow');
      info.append(el('strong', null, s.title || s.session_id), el('div', 'muted mono', s.session_id));
      const counts = el('div', 'counts');
      const players = el('span', 'count');
      players.append(icon('user'), el('b', 'players', s.players), el('span', 'sr', t('lobby.players', { n: s.players })));
      const watchers = el('span', 'count');
      watchers.append(icon('eye'), el('b', 'spectators', s.spectators), el('span', 'sr', t('lobby.spectators', { n: s.spectators })));
      counts.append(players, watchers, el('span', 'muted', t('lobby.turns', { n: s.turns })));
      li.append(info, counts);
      if (mine[s.session_id] && mine[s.session_id].player) {
        const play = el('a', 'button primary small', t('lobby.resume'));
        play.href = sessionLink(s.session_id, mine[s.session_id].player);
        li.append(play);
      }
      if (s.spectator_token) {
        const watch = el('a', 'button ghost small watch', t('lobby.watch'));
        watch.href = sessionLink(s.session_id, s.spectator_token);
        li.append(watch);
      }
      list.appendChild(li);
    }
    if (!sessions.length) list.appendChild(el('li', 'muted empty', t('lobby.no_sessions')));
  } catch (e) {
    list.replaceChildren(el('li', 'error', t('lobby.sessions_failed', { message: e.message })));
  }
}

async function startLobby() {
  document.body.dataset.view = 'lobby';
  $('refresh').addEventListener('click', loadSessions);
  // The lobby shows once its campaigns are in, so nothing on it moves
  // down when they arrive (no layout shift); the live sessions come last
  // and only grow the page's end.
  await loadCampaigns();
  $('lobby').hidden = false;
  loadSessions();
  setInterval(() => { if (!document.hidden) loadSessions(); }, 5000);
}

// ---------------------------------------------------------------- game state

const game = {
  id: null,
  token: null,
  role: null,
  snapshot: null,
  conn: null,           // the Connection (@questd/client)
  connState: null,      // what the page shows: connecting, live, reconnecting, closed
  retrying: false,      // an attempt failed since the last welcome (or before the first)
  welcomed: false,      // a welcome arrived on some connection
  lastSeq: null,        // the last story frame shown
  fullStory: false,     // the first connection replayed the story from its start
  opening: null,        // what the opening card shows, fixed when first known
  historyLoading: false,
  deferred: [],         // live frames held while the recent story loads
  container: null,      // where new turn boxes go (#live, or #history while loading it)
  turns: new Map(),     // turn_id -> { box, bubble, gotNarrative }
  calls: new Map(),     // turn_id/call_id -> { card, args, tool }
  pending: [],          // the connection's chats not yet settled, as its 'outbox' event lists them
  outbox: new Map(),    // request_id -> { requestId, text, state, queued, retryAt, node }: the ones shown
  knownAreas: new Map(),  // area_id -> when it was first drawn (new ones fade in)
  mapView: 'areas',
  mapScale: null,       // the area map's chosen zoom: pixels per unit, 'fit', or null (readable)
  mapZoom: 0,           // the area map's zoom as last drawn, in pixels per unit
  mapScales: [],        // the zoom steps of the map as last drawn, the first fits it to its card
  mapZoomed: false,     // the map is larger than its card and scrolls
  refreshTimer: null,
  follow: true,         // the timeline sticks to its end
  scrollPending: false, // a scroll to the end is booked for the next frame
  autoScrollTop: -1,    // where the page itself last scrolled the story to
  newAreaTimer: null,   // redraws the map when new areas stop being new
  centredOn: null,      // the area the zoomed map was last centred on
};

function outboxKey() {
  return 'questd.outbox.' + game.id;
}

// The messages not yet running, kept for this tab: a reload sends them again.
function saveOutbox() {
  const waiting = game.pending.filter((c) => c.state !== 'started');
  writeJson('session', outboxKey(), waiting.map((c) => ({ request_id: c.requestId, text: c.text })));
}

// ---------------------------------------------------------------- connection

function setConn(state) {
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
function paintConnection() {
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
function connect() {
  const conn = questd.connect(game.id, game.token, { lastSeq: 0 });
  game.conn = conn;
  conn.on('state', paintConnection);
  conn.on('welcome', onWelcome);
  conn.on('frame', handleFrame);
  conn.on('error', onError);
  conn.on('outbox', onOutbox);
}

// "Retry now", the browser back online, the tab shown again: try at once
// (nothing while a socket is open or opening).
function reconnectNow() {
  if (!game.conn) return;
  game.conn.reconnect();
  paintConnection();
}

// Re-reads the snapshot soon (several requests close together become one).
function refreshSnapshotSoon() {
  clearTimeout(game.refreshTimer);
  game.refreshTimer = setTimeout(() => questd.getSession(game.id, game.token).then(applySnapshot).catch(() => {}), 250);
}

function fatal(code) {
  setConn('closed');
  $('banner').hidden = true;
  $('fatal-text').textContent = code === 'SESSION_CLOSED' ? t('error.closed') : t('error.link', { code });
  $('fatal').hidden = false;
}

// ---------------------------------------------------------------- frames

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
  document.body.dataset.role = f.role;
  const spectator = f.role === 'spectator';
  $('badge').hidden = !spectator;
  $('composer').hidden = spectator;
  $('readonly').hidden = !spectator;
  $('share').hidden = false;
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
    default: return undefined;
  }
}

// ---------------------------------------------------------------- timeline

// Adds to the story and keeps it scrolled to the end, unless the reader
// has scrolled up (game.follow is updated by the timeline's scroll events).
// The scroll waits for the next frame, so a burst of frames (a resume
// backlog, the recent story) costs one layout, not one per frame.
function scrollStory(fn) {
  fn();
  if (!game.follow || game.scrollPending) return;
  game.scrollPending = true;
  requestAnimationFrame(() => {
    game.scrollPending = false;
    if (!game.follow) return;
    const tl = $('timeline');
    tl.scrollTop = tl.scrollHeight;
    game.autoScrollTop = tl.scrollTop;
  });
}

// The box of one turn, made on first use (also for a turn joined midway).
function turnBox(turnId) {
  let turn = game.turns.get(turnId);
  if (!turn) {
    const box = el('div', 'turn pending');
    box.dataset.turnId = turnId;
    if (String(turnId).startsWith('direct_')) {
      box.classList.add('direct');
      box.appendChild(el('div', 'turn-label', t('story.direct')));
    }
    turn = { box, bubble: null, gotNarrative: false };
    game.turns.set(turnId, turn);
    const parent = game.container || $('live');
    scrollStory(() => parent.appendChild(box));
  }
  return turn;
}

function character(id) {
  return game.snapshot && game.snapshot.characters.find((c) => c.character_id === id);
}

function area(id) {
  return game.snapshot && game.snapshot.areas.find((a) => a.area_id === id);
}

// The campaign's Chinese name of an area or character (the snapshot's
// `names_zh`), shown while the page is in Chinese; null otherwise.
function chinese(id) {
  const names = lang === 'zh' && game.snapshot && game.snapshot.names_zh;
  const zh = names && Object.prototype.hasOwnProperty.call(names, id) ? names[id] : null;
  return zh && zh.name ? zh : null;
}

// An area's or character's name in the page's language.
function nameOf(thing) {
  if (!thing) return '';
  // A character has an area_id too: its own id goes first.
  const zh = chinese(thing.character_id || thing.area_id);
  return zh ? zh.name : thing.name;
}

// An area's description in the page's language.
function descriptionOf(a) {
  const zh = chinese(a.area_id);
  return zh && zh.description ? zh.description : a.description || '';
}

function areaName(id) {
  const a = area(id);
  return a ? nameOf(a) : id;
}

function onTurnStarted(f, live) {
  const turn = turnBox(f.turn_id);
  const msg = el('div', 'msg player');
  const who = character(f.actor_id);
  msg.append(el('span', 'who', who ? nameOf(who) : f.actor_id || ''), el('span', 'text', f.text));
  if (f.request_id) msg.dataset.requestId = f.request_id;
  scrollStory(() => turn.box.prepend(msg));
  if (live && game.snapshot && typeof game.snapshot.turn === 'number') {
    game.snapshot.turn += 1;
    renderSheet();
  }
}

function onDelta(f) {
  const turn = turnBox(f.turn_id);
  if (!turn.bubble) {
    turn.bubble = el('div', 'msg gm streaming');
    turn.box.appendChild(turn.bubble);
  }
  turn.gotNarrative = true;
  scrollStory(() => turn.bubble.appendChild(document.createTextNode(f.text || '')));
}

function endBubble(turn) {
  if (turn.bubble) turn.bubble.classList.remove('streaming');
  turn.bubble = null;
}

function onTurnCompleted(f, live) {
  const turn = turnBox(f.turn_id);
  if (!turn.gotNarrative && f.reply) {
    scrollStory(() => turn.box.appendChild(el('div', 'msg gm', f.reply)));
  }
  if (turn.bubble && f.dialog_type) turn.bubble.dataset.dialog = f.dialog_type;
  endBubble(turn);
  turn.box.classList.remove('pending');
  turn.box.classList.add('done');
  if (live) {
    applyPatch(f.state_patch);
    const unknown = (f.tool_events || []).some((ev) => ev.status === 'ok' && !APPLIED_TOOLS.has(ev.tool));
    if (unknown) refreshSnapshotSoon();
  }
}

function onTurnFailed(f, live) {
  const turn = turnBox(f.turn_id);
  endBubble(turn);
  turn.box.classList.remove('pending');
  turn.box.classList.add('failed');
  const why = hasText('turn.' + f.error_code) ? t('turn.' + f.error_code) : f.message || f.error_code;
  const line = el('div', 'turn-failed');
  line.append(icon('alert'), el('span', null, t('story.failed', { message: why })));
  line.title = `${f.error_code}: ${f.message || ''}`;
  scrollStory(() => turn.box.appendChild(line));
  if (live) refreshSnapshotSoon();
}

function hasText(key) {
  const table = window.I18N || {};
  return Boolean((table[lang] && table[lang][key]) || (table.en && table.en[key]));
}

// A line in the story that is not part of a turn.
function storyNote(text) {
  scrollStory(() => $('live').appendChild(el('div', 'divider', text)));
}

// The opening scene at the top of a story shown from its start: the
// campaign's title and, for a session with no turns yet, where the hero stands.
function renderOpening() {
  const box = $('opening');
  box.replaceChildren();
  const s = game.snapshot;
  if (!game.fullStory || !s) return;
  if (!game.opening) {
    const pc = activeCharacter();
    const here = pc && area(pc.area_id);
    game.opening = {
      title: s.title,
      hero: pc && { ...pc },
      place: here && s.turn === 0 ? { ...here } : null,
    };
  }
  const o = game.opening;
  const card = el('div', 'opening');
  card.append(el('div', 'turn-label', t('story.opening')));
  if (o.title) card.append(el('h3', null, o.title));
  if (o.place) {
    card.append(el('p', null, t('story.you_are_in', { name: nameOf(o.hero), place: nameOf(o.place) })));
    const description = descriptionOf(o.place);
    if (description) card.append(el('p', 'muted', description));
  }
  card.append(el('p', 'hint', game.role === 'spectator' ? t('story.watch_hint') : t('story.try')));
  box.appendChild(card);
}

// ---------------------------------------------------------------- tool cards

const TOOL_ICONS = {
  move: 'compass', move_options: 'compass', move_to_zone: 'compass',
  roll_dice: 'dice', hp_delta: 'heart', update_character: 'heart',
  map_generate: 'spark', generate_zone: 'globe', get_site_map: 'globe',
  get_character_stats: 'scroll', get_player_state: 'scroll', describe_entity: 'scroll',
  add_inventory: 'bag', update_inventory: 'bag',
  search_content: 'search', get_npc_profile: 'user', get_prompt_active: 'user',
  create_npc: 'user', activate_npc: 'user',
};

function argChips(tool, args) {
  const row = el('div', 'chips');
  if (!args || typeof args !== 'object') {
    if (args !== null && args !== undefined) row.appendChild(el('span', 'chip', short(args)));
    return row;
  }
  for (const [k, v] of Object.entries(args)) {
    if (k === 'session_id' || k === 'actor_id') continue;
    const chip = el('span', 'chip');
    const isArea = typeof v === 'string' && /area_id$/.test(k) && area(v);
    chip.append(el('span', 'k', k), el('span', 'v', isArea ? `${areaName(v)} (${v})` : short(v, 48)));
    row.appendChild(chip);
  }
  return row;
}

function onToolCall(f) {
  const turn = turnBox(f.turn_id);
  endBubble(turn); // narration after a tool starts a new bubble
  const card = el('div', 'tool running');
  card.dataset.tool = f.tool;
  card.dataset.status = 'running';
  card.dataset.callId = f.call_id;
  const head = el('div', 'tool-head');
  head.append(
    icon(TOOL_ICONS[f.tool] || 'gear', 'tool-icon'),
    el('span', 'tool-name', f.tool),
    el('span', 'tool-status', t('tool.running')),
  );
  card.append(head, argChips(f.tool, f.args));
  game.calls.set(f.turn_id + '/' + f.call_id, { card, args: f.args || {}, tool: f.tool });
  scrollStory(() => turn.box.appendChild(card));
}

function onToolResult(f, live) {
  const key = f.turn_id + '/' + f.call_id;
  if (!game.calls.has(key)) onToolCall({ turn_id: f.turn_id, call_id: f.call_id, tool: f.tool, args: null });
  const call = game.calls.get(key);
  const card = call.card;
  card.classList.remove('running');
  card.classList.add(f.status === 'ok' ? 'ok' : 'failed');
  card.dataset.status = f.status;
  const status = card.querySelector('.tool-status');
  status.textContent = t('tool.' + f.status);
  if (typeof f.duration_ms === 'number') status.title = `${f.duration_ms} ms`;
  if (!live) card.classList.add('instant');
  scrollStory(() => {
    if (f.status === 'ok') {
      const body = resultView(f.tool, call.args, f.result || {}, live);
      if (body) card.appendChild(body);
      card.appendChild(rawDetails(call.args, f.result));
    } else {
      const reason = hasText('reason.' + f.reason) ? t('reason.' + f.reason) : f.reason || f.status;
      const line = el('div', 'tool-fail');
      line.append(el('b', null, reason), el('span', 'code', f.error_code || ''));
      card.appendChild(line);
      if (f.message) card.appendChild(el('div', 'tool-msg', short(f.message, 220)));
      card.title = f.message || '';
    }
  });
  if (f.status === 'ok' && live) applyResult(f.tool, call.args, f.result || {});
}

function rawDetails(args, result) {
  const d = el('details', 'raw');
  d.append(el('summary', null, t('tool.details')), el('pre', null, JSON.stringify({ args, result }, null, 2)));
  return d;
}

// A readable view of a successful result, by tool.
function resultView(tool, args, r, live) {
  switch (tool) {
    case 'roll_dice': return diceView(r, live);
    case 'hp_delta': return hpView(r, live);
    case 'move': {
      const v = el('div', 'tool-result move');
      v.append(el('span', null, t('tool.move', { from: areaName(r.from_area_id), to: r.area ? nameOf(r.area) : areaName(r.to_area_id) })));
      return v;
    }
    case 'move_options': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.options') + ' '));
      const options = r.options || [];
      if (!options.length) v.appendChild(el('span', null, t('tool.nowhere')));
      for (const o of options) v.appendChild(placeChip(o.area_id, nameOf(o)));
      return v;
    }
    case 'map_generate': {
      const v = el('div', 'tool-result');
      const names = (r.areas || []).map((a) => a.name);
      v.appendChild(el('span', 'muted', t('tool.new_areas', { n: names.length }) + ' '));
      for (const a of r.areas || []) v.appendChild(placeChip(a.area_id, a.name));
      return v;
    }
    case 'generate_zone': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.new_zones', { n: (r.zones || []).length }) + ' '));
      for (const z of r.zones || []) v.appendChild(el('span', 'chip place', z.name));
      return v;
    }
    case 'move_to_zone':
      return el('div', 'tool-result', t('tool.travel', {
        from: zoneName(r.from_zone_id), to: zoneName(r.to_zone_id), miles: r.distance_miles, min: r.duration_min,
      }));
    case 'get_character_stats':
      return el('div', 'tool-result', `${r.name || ''} · ` + t('tool.stats', { hp: r.hp, max: r.max_hp, level: r.level }));
    case 'add_inventory': {
      const v = el('div', 'tool-result');
      for (const a of r.added || []) v.appendChild(el('span', 'chip gain', `+ ${a.name} ×${a.quantity}`));
      return v;
    }
    case 'update_inventory': {
      const v = el('div', 'tool-result');
      for (const c of r.changes || []) {
        v.appendChild(el('span', 'chip ' + (c.after < c.before ? 'loss' : 'gain'), `${c.slug} ${c.before} → ${c.after}`));
      }
      return v;
    }
    case 'update_character':
      return el('div', 'tool-result', t('tool.changed', { fields: (r.changed || []).join(', ') || '—' }));
    case 'search_content': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.results', { n: r.total ?? (r.results || []).length }) + ' '));
      for (const x of (r.results || []).slice(0, 4)) v.appendChild(el('span', 'chip', x.title));
      return v;
    }
    case 'get_site_map':
      return el('div', 'tool-result', t('tool.site_map', {
        areas: (r.areas || []).length, routes: (r.routes || []).length, pois: (r.pois || []).length,
      }));
    default:
      return null;
  }
}

function zoneName(id) {
  if (!id) return t('tool.nowhere');
  const z = game.snapshot && (game.snapshot.zones || []).find((x) => x.zone_id === id);
  return z ? z.name : id;
}

// A place name in a card; for players a click asks to go there.
function placeChip(areaId, name) {
  const chip = el(game.role === 'player' ? 'button' : 'span', 'chip place', name || areaId);
  if (game.role === 'player') {
    chip.type = 'button';
    chip.title = 'go to ' + areaId;
    chip.addEventListener('click', () => sendChat('go to ' + areaId));
  }
  return chip;
}

// Dice drawn as dice: pips for d6, the number in a die shape otherwise.
function diceView(r, live) {
  const v = el('div', 'tool-result dice-result' + (live ? ' rolling' : ''));
  const sides = Number(String(r.dice || '').split('d')[1]?.split(/[+-]/)[0]) || 6;
  const row = el('div', 'dice');
  for (const n of r.rolls || []) {
    const die = el('span', 'die d' + (sides === 6 ? '6' : 'n'));
    die.dataset.value = n;
    if (sides === 6 && n >= 1 && n <= 6) {
      for (let i = 0; i < n; i++) die.appendChild(el('i', 'pip'));
      die.classList.add('p' + n);
    } else {
      die.textContent = n;
    }
    die.title = `d${sides}: ${n}`;
    row.appendChild(die);
  }
  if (r.modifier) row.appendChild(el('span', 'mod', (r.modifier > 0 ? '+ ' : '− ') + Math.abs(r.modifier)));
  const total = el('span', 'total', r.total);
  total.dataset.total = r.total;
  row.append(el('span', 'eq', '='), total);
  v.append(row, el('div', 'muted small', r.description || r.dice || ''));
  return v;
}

// An HP change as a bar that moves from the old value to the new.
function hpView(r, live) {
  const v = el('div', 'tool-result hp-change');
  const max = r.max_hp || 1;
  const pct = (x) => Math.max(0, Math.min(100, (x / max) * 100)) + '%';
  const who = character(r.character_id);
  const delta = r.hp - r.hp_before;
  const label = el('div', 'hp-change-label');
  label.append(
    el('span', null, who ? nameOf(who) : r.character_id),
    el('b', delta < 0 ? 'loss' : 'gain', (delta > 0 ? '+' : '') + delta),
    el('span', 'muted', `${r.hp_before} → ${r.hp} / ${max}`),
  );
  if (r.downed) label.appendChild(el('span', 'chip loss', t('tool.downed')));
  if (r.cause) label.appendChild(el('span', 'muted', r.cause));
  const bar = el('div', 'hpbar');
  const ghost = el('div', 'hp-ghost');
  const fill = el('div', 'hp-fill');
  ghost.style.width = pct(Math.max(r.hp_before, r.hp));
  fill.style.width = pct(live ? r.hp_before : r.hp);
  bar.append(ghost, fill);
  v.append(label, bar);
  if (live) requestAnimationFrame(() => requestAnimationFrame(() => { fill.style.width = pct(r.hp); }));
  return v;
}

// ---------------------------------------------------------------- state

// Tools whose results carry their whole effect; others trigger a snapshot re-read.
const APPLIED_TOOLS = new Set([
  'move', 'move_options', 'hp_delta', 'roll_dice', 'map_generate', 'get_character_stats',
  'generate_zone', 'move_to_zone', 'get_player_state', 'add_inventory', 'update_inventory',
  'update_character', 'search_content', 'get_site_map', 'get_npc_profile', 'describe_entity',
  'get_prompt_active', 'log_user_event', 'create_draft_content',
]);

function activeCharacter() {
  const s = game.snapshot;
  if (!s) return null;
  return s.characters.find((c) => c.character_id === s.active_actor_id) || s.characters[0] || null;
}

function upsert(list, item, key) {
  const i = list.findIndex((x) => x[key] === item[key]);
  if (i >= 0) list[i] = Object.assign({}, list[i], item);
  else list.push(item);
}

// Applies a successful tool result to the local snapshot (idempotent).
function applyResult(tool, args, r) {
  const s = game.snapshot;
  if (!s) return;
  const who = (id) => s.characters.find((c) => c.character_id === id);
  switch (tool) {
    case 'move': {
      const c = who(r.actor_id || args.actor_id);
      if (c && r.to_area_id) c.area_id = r.to_area_id;
      break;
    }
    case 'hp_delta': {
      const c = who(r.character_id);
      if (c) Object.assign(c, { hp: r.hp, max_hp: r.max_hp, state: r.state });
      break;
    }
    case 'map_generate':
      for (const a of r.areas || []) upsert(s.areas, a, 'area_id');
      // `connections` (pairs); results stored before it had them as
      // `created_connections`, which is now their count.
      for (const [a, b] of r.connections || (Array.isArray(r.created_connections) ? r.created_connections : [])) link(a, b);
      break;
    case 'get_character_stats': {
      const copy = Object.assign({}, r);
      delete copy.area_name;
      if (copy.character_id) upsert(s.characters, copy, 'character_id');
      break;
    }
    case 'update_character':
      if (r.character) upsert(s.characters, r.character, 'character_id');
      break;
    case 'add_inventory':
    case 'update_inventory': {
      const c = who(r.character_id);
      if (c && Array.isArray(r.inventory)) c.inventory = r.inventory;
      break;
    }
    case 'generate_zone':
      s.zones = s.zones || [];
      for (const z of r.zones || []) upsert(s.zones, z, 'zone_id');
      break;
    case 'move_to_zone':
      s.player = s.player || {};
      s.player.current_zone_id = r.to_zone_id;
      if (r.position) s.player.position = r.position;
      break;
    default:
      return; // reads and rolls change nothing on screen
  }
  render();
}

function link(a, b) {
  for (const [x, y] of [[a, b], [b, a]]) {
    const ax = area(x);
    if (ax) {
      ax.reachable_area_ids = ax.reachable_area_ids || [];
      if (!ax.reachable_area_ids.includes(y)) ax.reachable_area_ids.push(y);
    }
  }
}

function applyPatch(p) {
  const s = game.snapshot;
  if (!s || !p) return;
  for (const a of p.areas || []) upsert(s.areas, a, 'area_id');
  for (const c of p.characters || []) upsert(s.characters, c, 'character_id');
  if (p.position) {
    const c = s.characters.find((x) => x.character_id === p.position.actor_id);
    if (c && p.position.area_id) c.area_id = p.position.area_id;
  }
  if ((p.zones || []).length) {
    s.zones = s.zones || [];
    for (const z of p.zones) upsert(s.zones, z, 'zone_id');
  }
  if (p.zone_position) {
    const { x, y, z, zone_id: zoneId } = p.zone_position;
    s.player = s.player || {};
    s.player.position = { x, y, z };
    s.player.current_zone_id = zoneId ?? null;
  }
  render();
}

function applySnapshot(s) {
  if (!s || !Array.isArray(s.areas) || !Array.isArray(s.characters)) return;
  game.snapshot = s;
  if (s.title) {
    $('session-title').textContent = s.title;
    document.title = `${s.title} · questd`;
  }
  render();
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

// ---------------------------------------------------------------- render

function render() {
  if (!game.snapshot) return;
  renderMap();
  renderWorld();
  renderSheet();
  renderHints();
}

function renderSheet() {
  const s = game.snapshot;
  const pc = activeCharacter();
  if (!pc) return;
  const here = area(pc.area_id);
  const name = nameOf(pc);
  $('char-name').textContent = name;
  $('portrait').textContent = Array.from(name || '?')[0];
  const meta = [t('sheet.level', { n: pc.level ?? 1 }), t(pc.state === 'downed' ? 'sheet.downed' : 'sheet.active')];
  if (typeof s.turn === 'number') meta.push(t('sheet.turn', { n: s.turn }));
  $('char-meta').textContent = meta.join(' · ');
  $('char-area').textContent = here ? nameOf(here) : pc.area_id;
  $('char-area').title = here ? descriptionOf(here) : '';
  $('map-place').textContent = here ? nameOf(here) : '';

  const max = pc.max_hp || 1;
  const hp = Math.max(0, pc.hp ?? 0);
  const pct = Math.max(0, Math.min(100, (hp / max) * 100));
  const fill = $('hp-fill');
  const before = Number(fill.dataset.hp);
  fill.style.width = pct + '%';
  fill.dataset.hp = hp;
  fill.className = 'hp-fill' + (pct <= 25 ? ' low' : pct <= 50 ? ' mid' : '');
  $('hp-text').textContent = `${hp} / ${max}`;
  const hpBox = $('hp');
  hpBox.dataset.hp = hp;
  hpBox.dataset.maxHp = max;
  if (!Number.isNaN(before) && before !== hp) flash(hpBox, hp < before ? 'hit' : 'heal');

  const stats = $('stats');
  stats.replaceChildren();
  for (const [k, v] of Object.entries(pc.stats || {})) {
    const tile = el('div', 'stat');
    const mod = Math.floor((v - 10) / 2);
    tile.append(el('span', 'stat-k', k.toUpperCase()), el('b', 'stat-v', v), el('span', 'stat-m', (mod >= 0 ? '+' : '') + mod));
    stats.appendChild(tile);
  }

  const inv = $('inventory');
  const had = new Map(Array.from(inv.children, (li) => [li.dataset.slug, Number(li.dataset.quantity)]));
  inv.replaceChildren();
  for (const item of pc.inventory || []) {
    const li = el('li');
    li.dataset.slug = item.slug;
    li.dataset.quantity = item.quantity;
    li.append(el('span', 'item-name', item.name), el('span', 'qty', '×' + item.quantity));
    if (item.description) li.title = item.description;
    if (had.size && had.get(item.slug) !== item.quantity) flash(li, 'new');
    inv.appendChild(li);
  }
  if (!(pc.inventory || []).length) inv.appendChild(el('li', 'muted', t('sheet.empty')));

  const company = $('company');
  company.replaceChildren();
  for (const c of s.characters) {
    if (c.character_id === pc.character_id || c.area_id !== pc.area_id) continue;
    const li = el('li');
    li.append(el('span', 'npc-dot'), el('span', null, nameOf(c)), el('span', 'muted', ` · HP ${c.hp}/${c.max_hp}`));
    company.appendChild(li);
  }
  if (!company.children.length) company.appendChild(el('li', 'muted', t('sheet.nobody')));

  const zoneLine = $('zone-line');
  const zoneId = s.player && s.player.current_zone_id;
  zoneLine.hidden = !zoneId;
  if (zoneId) zoneLine.textContent = t('sheet.zone', { name: zoneName(zoneId) });
}

function flash(node, cls) {
  node.classList.remove(cls);
  void node.offsetWidth; // restart the animation
  node.classList.add(cls);
  setTimeout(() => node.classList.remove(cls), 900);
}

// ---------------------------------------------------------------- map

// Screen pixels per map unit are not known in advance: sizes are given in
// pixels and divided by the current scale so labels stay readable.
function mapScale(svgNode, width, height) {
  const w = svgNode.clientWidth || svgNode.parentNode.clientWidth || 600;
  const h = svgNode.clientHeight || svgNode.parentNode.clientHeight || 300;
  return Math.min(w / width, h / height);
}

// The smallest distance between two places, in map units (Infinity for one
// place): a sweep over the places sorted by x, so a big map stays quick.
function closestPair(areas) {
  const pts = areas.map((a) => [a.x || 0, a.y || 0]).sort((p, q) => p[0] - q[0]);
  let best = Infinity;
  for (let i = 0; i < pts.length; i++) {
    for (let j = i + 1; j < pts.length && pts[j][0] - pts[i][0] < best; j++) {
      best = Math.min(best, Math.hypot(pts[j][0] - pts[i][0], pts[j][1] - pts[i][1]));
    }
  }
  return best;
}

function renderMap() {
  const s = game.snapshot;
  const map = $('map');
  const pc = activeCharacter();
  const hereId = pc ? pc.area_id : null;
  const here = hereId && area(hereId);
  const near = new Set(here ? here.reachable_area_ids || [] : []);
  const areas = s.areas;
  if (!areas.length) return;

  const xs = areas.map((a) => a.x || 0);
  const ys = areas.map((a) => a.y || 0);
  const pad = 90;
  const minX = Math.min(...xs) - pad;
  const minY = Math.min(...ys) - pad;
  const width = Math.max(Math.max(...xs) - Math.min(...xs) + pad * 2, 300);
  const height = Math.max(Math.max(...ys) - Math.min(...ys) + pad * 2, 220);
  map.setAttribute('viewBox', `${minX} ${minY} ${width} ${height}`);
  map.setAttribute('preserveAspectRatio', 'xMidYMid meet');
  // The map is drawn at a readable scale, or fitted to its card when it is
  // small enough; larger than the card, it scrolls inside it (on a phone
  // too), and the zoom buttons go from the whole map to close up.
  const wrap = map.parentNode;
  const fit = wrap.clientWidth ? Math.min(wrap.clientWidth / width, wrap.clientHeight / height) : 0;
  game.mapScales = [fit, ...MAP_SCALES.filter((z) => z > fit * 1.1)];
  const zoom = game.mapScale === 'fit' ? fit : Math.max(fit, game.mapScale ?? READABLE_SCALE);
  const zoomed = fit > 0 && zoom > fit * 1.001;
  game.mapZoom = zoom;
  game.mapZoomed = zoomed;
  if (zoomed) {
    map.style.width = Math.max(wrap.clientWidth, Math.floor(width * zoom)) + 'px';
    map.style.height = Math.max(wrap.clientHeight, Math.floor(height * zoom)) + 'px';
  } else {
    map.style.width = '';
    map.style.height = '';
  }
  updateZoomButtons();
  const k = 1 / Math.min(mapScale(map, width, height), 1.6);

  // The token and the layer group stay in the DOM between renders, so CSS
  // moves the token smoothly from one place to the next.
  let layers = map.querySelector('.layers');
  let token = map.querySelector('.token');
  if (!layers || !token) {
    layers = svg('g', { class: 'layers' });
    token = svg('g', { class: 'token' });
    const body = svg('g', { class: 'token-body' });
    body.appendChild(svg('path', { d: 'M0 -22 L9 -9 L0 -4 L-9 -9 Z' }));
    token.appendChild(body);
    map.replaceChildren(layers, token);
  }
  const edges = svg('g', { class: 'edges' });
  const nodes = svg('g', { class: 'nodes' });
  const byId = new Map(areas.map((a) => [a.area_id, a]));
  const seen = new Set();
  for (const a of areas) {
    for (const b of a.reachable_area_ids || []) {
      const other = byId.get(b);
      const key = [a.area_id, b].sort().join('|');
      if (!other || seen.has(key)) continue;
      seen.add(key);
      const active = (a.area_id === hereId && near.has(b)) || (b === hereId && near.has(a.area_id));
      edges.appendChild(svg('line', {
        x1: a.x || 0, y1: a.y || 0, x2: other.x || 0, y2: other.y || 0,
        class: 'edge' + (active ? ' active' : ''),
        'stroke-width': (active ? 3 : 2) * k,
      }));
    }
  }

  const now = Date.now();
  const drawnBefore = game.knownAreas.size > 0;
  for (const a of areas) {
    if (!game.knownAreas.has(a.area_id)) game.knownAreas.set(a.area_id, drawnBefore ? now : 0);
  }
  const npcsByArea = new Map();
  for (const c of s.characters) {
    if (c.kind !== 'npc') continue;
    if (!npcsByArea.has(c.area_id)) npcsByArea.set(c.area_id, []);
    npcsByArea.get(c.area_id).push(c);
  }
  // Circles shrink on a crowded fitted map so no two of them touch (the
  // closest two are left a fifth of their distance apart; a number drawn
  // inside its circle then covers no other place). Only places at the very
  // same spot share a circle's size.
  const r = Math.min(13 * k, closestPair(areas) * 0.4) || 4 * k;
  let youngest = Infinity;
  const rank = (a) => (a.area_id === hereId ? 2 : near.has(a.area_id) ? 1 : 0);
  // Far places first, the hero's place last: nearer labels are drawn on top.
  for (const a of areas.slice().sort((p, q) => rank(p) - rank(q))) {
    const cls = a.area_id === hereId ? 'current' : near.has(a.area_id) ? 'reachable' : 'far';
    const g = svg('g', {
      class: 'area ' + cls,
      'data-area-id': a.area_id,
      transform: `translate(${a.x || 0} ${a.y || 0})`,
    });
    const age = now - game.knownAreas.get(a.area_id);
    if (age < NEW_AREA_MS) {
      // Redrawn while still fading in: carry on where the animation was.
      g.classList.add('new');
      g.style.animationDelay = `-${age}ms`;
      youngest = Math.min(youngest, age);
    }
    const description = descriptionOf(a);
    g.appendChild(svg('title', {}, `${nameOf(a)} (${a.area_id})${description ? '\n' + description : ''}`));
    if (cls === 'current') g.appendChild(svg('circle', { r: r * 1.9, class: 'halo' }));
    g.appendChild(svg('circle', { r, class: 'node', 'stroke-width': Math.min(2 * k, r * 0.25) }));
    if ((a.tags || []).includes('lit')) g.appendChild(svg('circle', { r: r * 0.3, class: 'lamp' }));
    const npcs = npcsByArea.get(a.area_id) || [];
    npcs.forEach((c, i) => {
      const dot = svg('g', { class: 'npc', transform: `translate(${r + (6 + i * 11) * k} ${-r * 0.9})` });
      dot.appendChild(svg('circle', { r: 5 * k, 'stroke-width': 1.5 * k }));
      dot.appendChild(svg('title', {}, nameOf(c)));
      g.appendChild(dot);
    });
    if (cls === 'reachable' && game.role === 'player') {
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'button');
      g.setAttribute('aria-label', t('map.go', { name: nameOf(a) }));
      const go = () => { sendChat('go to ' + a.area_id); showTab('story'); };
      g.addEventListener('click', go);
      g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); go(); } });
    }
    nodes.appendChild(g);
  }
  const labels = svg('g', { class: 'labels' });
  const view = { x0: minX, y0: minY, x1: minX + width, y1: minY + height };
  const numbered = placeLabels(labels, areas, hereId, near, r, k, view, npcsByArea);
  layers.replaceChildren(edges, nodes, labels);
  renderMapKey(numbered);

  // Draw once more when the newest areas stop being new.
  clearTimeout(game.newAreaTimer);
  if (youngest < NEW_AREA_MS) game.newAreaTimer = setTimeout(renderMap, NEW_AREA_MS - youngest + 50);

  const tokenBody = token.querySelector('.token-body');
  tokenBody.setAttribute('transform', `scale(${k})`);
  if (here) {
    token.style.transform = `translate(${here.x || 0}px, ${(here.y || 0) - r * 0.6}px)`;
    token.dataset.areaId = here.area_id;
  }
  // A scrolling map shows the hero: centre on their place when it changes.
  if (zoomed && here && game.centredOn !== here.area_id) {
    const scale = Math.min(map.clientWidth / width, map.clientHeight / height);
    const px = (map.clientWidth - width * scale) / 2 + ((here.x || 0) - minX) * scale;
    const py = (map.clientHeight - height * scale) / 2 + ((here.y || 0) - minY) * scale;
    wrap.scrollLeft = px - wrap.clientWidth / 2;
    wrap.scrollTop = py - wrap.clientHeight / 2;
    game.centredOn = here.area_id;
  }
}

const LABEL_PX = 12.5;
// The narrow (phone) layout, as in style.css.
const NARROW = window.matchMedia('(max-width: 820px)');
// Zoom steps of the area map in screen pixels per map unit (besides the
// whole map in its card), and the first scale at which the places of
// generated maps (110 units apart) have room for a line of names between them.
const MAP_SCALES = [0.3, 0.5, 0.75, 1.1, 1.6];
const READABLE_SCALE = 0.5;
// How many rings of spots around its place a near name may try.
const NEAR_RINGS = 6;
const WORLD_MIN_CELLS = [11, 6];
let measureCtx = null;

// Width in screen pixels of a text at `px` pixels, in the labels' font.
function labelWidth(text, px = LABEL_PX, weight = 'normal') {
  if (!measureCtx) measureCtx = document.createElement('canvas').getContext('2d');
  measureCtx.font = `${weight} ${px}px ${getComputedStyle(document.body).fontFamily}`;
  return measureCtx.measureText(text).width;
}

function overlaps(a, b) {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

// Boxes in map units, bucketed on a grid of `cell` units so a test looks
// only at the boxes nearby (a map may hold thousands of places).
function boxIndex(cell) {
  const cells = new Map();
  const each = (b, fn) => {
    for (let i = Math.floor(b.x0 / cell); i <= Math.floor(b.x1 / cell); i++) {
      for (let j = Math.floor(b.y0 / cell); j <= Math.floor(b.y1 / cell); j++) {
        if (fn(i + ',' + j)) return true;
      }
    }
    return false;
  };
  return {
    add(b) {
      each(b, (key) => {
        if (!cells.has(key)) cells.set(key, []);
        cells.get(key).push(b);
      });
    },
    hits(b, skip) {
      return each(b, (key) => (cells.get(key) || []).some((o) => o.id !== skip && overlaps(b, o)));
    },
  };
}

// Every place is named, and no name covers another name or another place.
// Places are taken in order of importance: the hero's place, its
// neighbours, then the rest, nearest the hero first. Each name tries eight
// spots around its place (below, above, right, left, the four diagonals),
// then the same eight again further out, and takes the first that is inside
// the map and clear of every place and every name placed so far. The hero's
// place and its neighbours look further (NEAR_RINGS rings; from the third a
// thin line points from the name to its place), so at a readable scale they
// keep their full names. A name that fits nowhere becomes the place's number
// (beside it, or inside its circle when even that has no room), listed with
// the full name in the key under the map; zooming in gives names room, so
// fewer places are numbered. Returns the numbered places, as [number, area].
function placeLabels(group, areas, hereId, near, r, k, view, npcsByArea) {
  const rank = (a) => (a.area_id === hereId ? 2 : near.has(a.area_id) ? 1 : 0);
  const h = LABEL_PX * k;
  const gap = 3 * k; // clear of the text's outline
  const taken = boxIndex(Math.max(h * 6, r * 4));
  for (const a of areas) {
    const x = a.x || 0;
    const y = a.y || 0;
    taken.add({ id: a.area_id, x0: x - r, y0: y - r, x1: x + r, y1: y + r });
    // The people here (dots right of the circle, as drawn in renderMap) and
    // the hero's token above their place are not covered either.
    (npcsByArea.get(a.area_id) || []).forEach((_, i) => {
      const cx = x + r + (6 + i * 11) * k;
      taken.add({ id: 'npc', x0: cx - 6 * k, y0: y - r * 0.9 - 6 * k, x1: cx + 6 * k, y1: y - r * 0.9 + 6 * k });
    });
    if (a.area_id === hereId) taken.add({ id: 'token', x0: x - 10 * k, y0: y - r * 0.6 - 23 * k, x1: x + 10 * k, y1: y });
  }
  const number = new Map(areas.map((a, i) => [a.area_id, i + 1]));
  const here = areas.find((a) => a.area_id === hereId) || { x: 0, y: 0 };
  const away = (a) => Math.hypot((a.x || 0) - (here.x || 0), (a.y || 0) - (here.y || 0));
  const inside = (b) => b.x0 >= view.x0 && b.x1 <= view.x1 && b.y0 >= view.y0 && b.y1 <= view.y1;
  // The first free spot for a text w x th (map units) around (x, y), ring
  // by ring up to `rings` out, or null.
  const spotFor = (id, x, y, w, th, rings) => {
    for (let ring = 0; ring < rings; ring++) {
      const d = r + gap + ring * th * 1.3;
      const c = d * 0.72;
      const spots = [
        { x, y: y + d + th * 0.95, anchor: 'middle' },
        { x, y: y - d - th * 0.3, anchor: 'middle' },
        { x: x + d, y: y + th * 0.35, anchor: 'start' },
        { x: x - d, y: y + th * 0.35, anchor: 'end' },
        { x: x + c, y: y + c + th * 0.95, anchor: 'start' },
        { x: x - c, y: y + c + th * 0.95, anchor: 'end' },
        { x: x + c, y: y - c - th * 0.3, anchor: 'start' },
        { x: x - c, y: y - c - th * 0.3, anchor: 'end' },
      ];
      for (const s of spots) {
        const x0 = s.anchor === 'middle' ? s.x - w / 2 : s.anchor === 'start' ? s.x : s.x - w;
        const box = { id, x0: x0 - gap, y0: s.y - th - gap, x1: x0 + w + gap, y1: s.y + th * 0.3 + gap };
        if (inside(box) && !taken.hits(box, id)) return { ...s, box, ring };
      }
    }
    return null;
  };
  const numbered = [];
  const order = areas.slice().sort((p, q) => rank(q) - rank(p) || away(p) - away(q));
  for (const a of order) {
    const x = a.x || 0;
    const y = a.y || 0;
    const cls = a.area_id === hereId ? ' current' : near.has(a.area_id) ? ' reachable' : '';
    const name = nameOf(a);
    const w = labelWidth(name, LABEL_PX, cls === ' current' ? 'bold' : 'normal') * k;
    let spot = spotFor(a.area_id, x, y, w, h, cls ? NEAR_RINGS : 2);
    let text = name;
    let kind = 'label';
    let size = h;
    if (!spot) {
      text = String(number.get(a.area_id));
      kind = 'num';
      size = h * 0.9;
      spot = spotFor(a.area_id, x, y, labelWidth(text, LABEL_PX * 0.9, 'bold') * k, size, 2);
      if (!spot) {
        // Inside its own circle, which nothing else covers.
        size = Math.min(size, (1.8 * r) / (labelWidth(text, 1, 'bold') || 1), 1.6 * r);
        spot = { x, y: y + size * 0.35, anchor: 'middle' };
        kind = 'num inside';
      }
      numbered.push([number.get(a.area_id), a]);
    }
    if (spot.box) taken.add(spot.box);
    if (spot.ring > 1) {
      // A name set further out points at its place.
      const b = spot.box;
      const tx = Math.max(b.x0 + gap, Math.min(x, b.x1 - gap));
      const ty = Math.max(b.y0 + gap, Math.min(y, b.y1 - gap));
      const len = Math.hypot(tx - x, ty - y) || 1;
      group.appendChild(svg('line', {
        x1: x + ((tx - x) / len) * r, y1: y + ((ty - y) / len) * r, x2: tx, y2: ty,
        class: 'leader', 'stroke-width': k,
      }));
    }
    group.appendChild(svg('text', {
      x: spot.x, y: spot.y, 'text-anchor': spot.anchor, class: kind + cls, 'data-for': a.area_id,
      'font-size': size, 'stroke-width': (kind === 'num inside' ? 0 : 4 * k),
    }, text));
  }
  return numbered.sort((p, q) => p[0] - q[0]);
}

// The key under the map: the full name of every numbered place.
function renderMapKey(numbered) {
  const key = $('map-key');
  key.hidden = !numbered.length || game.mapView !== 'areas';
  key.setAttribute('aria-label', t('map.key'));
  key.replaceChildren(...numbered.map(([n, a]) => {
    const li = el('li');
    li.dataset.for = a.area_id;
    li.title = descriptionOf(a) || nameOf(a);
    li.append(el('b', '', n), ' ' + nameOf(a));
    return li;
  }));
}

function updateZoomButtons() {
  $('map-zoom-out').disabled = !game.mapZoomed;
  $('map-fit').disabled = !game.mapZoomed;
  $('map-zoom-in').disabled = !game.mapScales.some((z) => z > game.mapZoom * 1.001);
}

// Zooms the area map one step in (+1) or out (-1), or shows the whole map
// (0), keeping the middle of what is shown in the middle.
function zoomMap(step) {
  const wrap = $('map').parentNode;
  const cx = (wrap.scrollLeft + wrap.clientWidth / 2) / (wrap.scrollWidth || 1);
  const cy = (wrap.scrollTop + wrap.clientHeight / 2) / (wrap.scrollHeight || 1);
  const steps = game.mapScales;
  const current = game.mapZoom;
  let next = 'fit';
  if (step > 0) next = steps.find((z) => z > current * 1.001) ?? current;
  if (step < 0) next = steps.slice(1).reverse().find((z) => z < current * 0.999) ?? 'fit';
  game.mapScale = next;
  // Not a move of the hero: the view stays where the reader was looking.
  const pc = activeCharacter();
  game.centredOn = pc ? pc.area_id : null;
  renderMap();
  wrap.scrollLeft = cx * wrap.scrollWidth - wrap.clientWidth / 2;
  wrap.scrollTop = cy * wrap.scrollHeight - wrap.clientHeight / 2;
}

function renderWorld() {
  const s = game.snapshot;
  const zones = s.zones || [];
  $('map-switch').hidden = !zones.length;
  if (!zones.length && game.mapView === 'world') setMapView('areas');
  const world = $('world');
  world.replaceChildren();
  if (!zones.length) return;
  const pos = (s.player && s.player.position) || { x: 0, y: 0 };
  const xs = zones.map((z) => z.x).concat([pos.x]);
  const ys = zones.map((z) => z.y).concat([pos.y]);
  // At least WORLD_MIN_CELLS across, centred, so a young world is not one huge square.
  const w = Math.max(Math.max(...xs) - Math.min(...xs) + 3, WORLD_MIN_CELLS[0]);
  const h = Math.max(Math.max(...ys) - Math.min(...ys) + 3, WORLD_MIN_CELLS[1]);
  const minX = (Math.max(...xs) + Math.min(...xs) - w) / 2;
  const minY = (Math.max(...ys) + Math.min(...ys) - h) / 2;
  world.setAttribute('viewBox', `${minX} ${minY} ${w} ${h}`);
  const k = 1 / Math.min(mapScale(world, w, h), 200);
  const current = s.player && s.player.current_zone_id;
  for (const z of zones) {
    const g = svg('g', { class: 'zone' + (z.zone_id === current ? ' current' : ''), 'data-zone-id': z.zone_id });
    g.appendChild(svg('rect', { x: z.x - 0.42, y: z.y - 0.42, width: 0.84, height: 0.84, rx: 0.12 }));
    g.appendChild(svg('text', { x: z.x, y: z.y + 0.62, class: 'label', 'font-size': 11 * k, 'stroke-width': 3 * k }, z.name));
    g.appendChild(svg('title', {}, `${z.name}\n${z.description || ''}`));
    world.appendChild(g);
  }
  world.appendChild(svg('circle', { cx: pos.x, cy: pos.y, r: 7 * k, class: 'you' }));
}

function setMapView(view) {
  game.mapView = view;
  // SVG elements have no `hidden` property: set the attribute itself.
  $('map').toggleAttribute('hidden', view !== 'areas');
  $('world').toggleAttribute('hidden', view !== 'world');
  $('map-zoom').hidden = view !== 'areas';
  $('map-key').hidden = view !== 'areas' || !$('map-key').children.length;
  for (const b of $('map-switch').querySelectorAll('button')) b.classList.toggle('on', b.dataset.view === view);
  if (view === 'world') renderWorld();
}

// ---------------------------------------------------------------- outbox

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
    Object.assign(entry, { state: chat.state, queued: chat.queued, retryAt: chat.retryAt });
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

function renderOutboxEntry(entry) {
  const node = el('div', 'msg player pending');
  node.dataset.requestId = entry.requestId;
  node.append(el('span', 'text', entry.text), el('span', 'state'));
  entry.node = node;
  scrollStory(() => $('outbox').appendChild(node));
  updateOutboxEntry(entry);
}

function updateOutboxEntry(entry) {
  if (!entry.node) return;
  entry.node.dataset.state = entry.state;
  let text = t('outbox.' + entry.state);
  if (entry.state === 'waiting' && game.conn.state === 'open') text = t('outbox.held');
  if (entry.state === 'accepted' && entry.queued > 0) text = t('outbox.queued', { n: entry.queued });
  if (entry.state === 'retry') text = t('outbox.retry', { s: Math.max(1, Math.ceil((entry.retryAt - Date.now()) / 1000)) });
  entry.node.querySelector('.state').textContent = text;
}

function sendChat(text) {
  text = String(text || '').trim();
  if (!text || game.role === 'spectator') return false;
  if (Array.from(text).length > MAX_TEXT_CHARS) {
    notice(t('notice.too_long', { n: MAX_TEXT_CHARS }), 'error');
    return false;
  }
  chat(text);
  return true;
}

// Hands a message to the connection, which sends it (again, with the same
// request_id, until its turn starts) and settles it with its turn's end. A
// failed turn shows in the story, a refusal as a notice (onError), and the
// session's end in the fatal panel; a message refused for what it says goes
// back into the input.
function chat(text, requestId) {
  game.conn.chat(text, { requestId }).catch((e) => {
    const code = e && e.error_code;
    if (e.frame && e.frame.type === 'error') {
      const input = $('chat-input');
      if (RETURNED_CODES.has(code) && !input.value) input.value = text;
      return;
    }
    if (e.frame || e.fatal || code === 'CLOSED' || code === 'OUTCOME_UNKNOWN') return;
    notice(t('error.other', { code, message: e.message || '' }), 'error', 6000, code);
  });
}

// Every `error` frame (a refusal the connection waits out and sends again
// says so with `retrying`), and the error that stopped the connection for good.
function onError(e) {
  if (e.fatal) {
    fatal(e.error_code || e.status);
    return;
  }
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

// ---------------------------------------------------------------- composer

// The quick commands under the story: the adventure here (look around, talk
// to and attack the person here, take something), then the wider game.
// `talk` and `attack` name the first person standing where the hero is, and
// are left out when nobody is.
const HINTS = ['look', 'talk', 'take', 'attack', 'where', 'explore', 'roll', 'status', 'scout', 'search'];
// Commands put in the input for the player to finish or confirm, not sent:
// those that need words (their text ends with a space) and attacks.
const CONFIRMED_HINTS = new Set(['attack']);

// Someone standing where the hero is, for the talk and attack commands.
function personHere() {
  const pc = activeCharacter();
  if (!pc) return null;
  return game.snapshot.characters.find((c) => c.kind === 'npc' && c.area_id === pc.area_id
    && c.state !== 'downed' && c.hp > 0) || null;
}

function renderHints() {
  const box = $('hints');
  const who = personHere();
  const name = who ? nameOf(who) : '';
  const hints = HINTS.filter((h) => name || (h !== 'talk' && h !== 'attack')).map((h) => ({
    h, label: t('hint.' + h, { name }), cmd: t('hint.' + h + '.cmd', { name }),
  }));
  // Rebuilt only when they change, so a focused chip keeps its focus.
  const shown = JSON.stringify(hints);
  if (box.dataset.shown === shown) return;
  box.dataset.shown = shown;
  box.replaceChildren();
  for (const { h, label, cmd } of hints) {
    const b = el('button', 'hint', label);
    b.type = 'button';
    b.dataset.hint = h;
    b.addEventListener('click', () => {
      const input = $('chat-input');
      if (cmd.endsWith(' ') || CONFIRMED_HINTS.has(h)) {
        input.value = cmd;
        input.focus();
      } else {
        sendChat(cmd);
      }
    });
    box.appendChild(b);
  }
}

function showTab(tab) {
  $('game').dataset.tab = tab;
  for (const b of document.querySelectorAll('.tabs button')) {
    b.classList.toggle('on', b.dataset.tab === tab);
    b.setAttribute('aria-selected', String(b.dataset.tab === tab));
  }
  if (tab === 'map' && game.snapshot) {
    game.centredOn = null;
    renderMap();
  }
  if (tab === 'story') scrollStory(() => {});
}

async function openShare() {
  let token = game.role === 'spectator' ? game.token : null;
  if (!token) {
    const mine = readJson('local', 'questd.sessions', {});
    token = mine[game.id] && mine[game.id].spectator;
  }
  if (!token) {
    try {
      const list = await questd.listSessions();
      const s = list.find((x) => x.session_id === game.id);
      token = s && s.spectator_token;
    } catch { /* shown as unknown below */ }
  }
  $('share-link').value = token ? sessionLink(game.id, token) : '';
  $('share-note').textContent = token ? t('share.note') : t('share.unknown');
  $('share-box').hidden = false;
}

function startGame(id, token) {
  game.id = id;
  game.token = token;
  document.body.dataset.view = 'game';
  $('game').hidden = false;
  renderHints();
  showTab('story');

  const input = $('chat-input');
  let lastSent = '';
  $('chat').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value;
    if (sendChat(text)) { lastSent = text.trim(); input.value = ''; }
  });
  input.addEventListener('keydown', (e) => {
    // Enter sends, but not while an input method (Chinese, Japanese…) is composing.
    if (e.key === 'Enter' && (e.isComposing || e.keyCode === 229)) e.preventDefault();
    if (e.key === 'ArrowUp' && !input.value && lastSent) { input.value = lastSent; e.preventDefault(); }
  });
  for (const b of document.querySelectorAll('.tabs button')) b.addEventListener('click', () => showTab(b.dataset.tab));
  for (const b of $('map-switch').querySelectorAll('button')) b.addEventListener('click', () => setMapView(b.dataset.view));
  $('map-zoom-in').addEventListener('click', () => zoomMap(1));
  $('map-zoom-out').addEventListener('click', () => zoomMap(-1));
  $('map-fit').addEventListener('click', () => zoomMap(0));
  $('retry-now').addEventListener('click', reconnectNow);
  $('share').addEventListener('click', openShare);
  $('share-close').addEventListener('click', () => { $('share-box').hidden = true; });
  window.addEventListener('online', reconnectNow);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) reconnectNow(); });
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (game.snapshot) { renderMap(); renderWorld(); }
      scrollStory(() => {}); // a narrower story is taller: stay at its end
    }, 150);
  });
  setInterval(paintConnection, 500);
  const timeline = $('timeline');
  timeline.addEventListener('scroll', () => {
    // Scroll events come a frame late: by then more story may have been
    // added below our own scroll, which must not count as the reader leaving.
    if (timeline.scrollTop === game.autoScrollTop) return;
    game.follow = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 120;
  }, { passive: true });

  connect();
  // Messages typed before a reload are still owed to the server; one that
  // ran already is not run again (its request_id is known).
  for (const saved of readJson('session', outboxKey(), [])) {
    if (!saved || !saved.request_id || !saved.text) continue;
    chat(saved.text, saved.request_id);
  }
}

// ---------------------------------------------------------------- start

$('lang').addEventListener('click', () => {
  lang = lang === 'zh' ? 'en' : 'zh';
  writeJson('local', 'questd.lang', lang);
  applyLanguage();
  if (!game.id) { loadCampaigns(); loadSessions(); }
});
for (const b of document.querySelectorAll('button.copy')) b.addEventListener('click', () => copyFrom(b.dataset.copy, b));
applyLanguage();

const params = new URLSearchParams(location.search);
if (params.get('session') && params.get('token')) startGame(params.get('session'), params.get('token'));
else startLobby();
