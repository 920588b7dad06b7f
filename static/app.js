// questd browser client: lobby + play/spectate view. No dependencies.
// All text from the server is inserted with textContent, never as HTML.
'use strict';

const $ = (id) => document.getElementById(id);

// Create an element with an optional class and text.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// fetch + JSON; throws an Error carrying the HTTP status and error_code.
async function api(path, opts = {}) {
  const res = await fetch(path, opts);
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    const err = new Error((body && body.message) || res.statusText);
    err.status = res.status;
    err.code = body && body.error_code;
    throw err;
  }
  return body;
}

function sessionLink(id, token) {
  return location.origin + '/?session=' + encodeURIComponent(id) + '&token=' + encodeURIComponent(token);
}

// Short-lived notice under the timeline (errors, rate limits, connection info).
function notice(text, kind = 'info', ms = 6000) {
  const n = el('div', 'notice ' + kind, text);
  $('notices').appendChild(n);
  if (ms) setTimeout(() => n.remove(), ms);
}

// ---------------------------------------------------------------- lobby

async function loadCampaigns() {
  const list = $('campaigns');
  try {
    const campaigns = await api('/api/v1/campaigns');
    list.replaceChildren();
    for (const c of campaigns) {
      const li = el('li', 'row');
      const info = el('div', 'grow');
      info.append(el('strong', null, c.title || c.campaign_id), el('div', 'muted', c.description || ''));
      const btn = el('button', null, 'Start');
      btn.type = 'button';
      btn.addEventListener('click', () => startSession(c.campaign_id, btn));
      li.append(info, btn);
      list.appendChild(li);
    }
    if (!campaigns.length) list.appendChild(el('li', 'muted', 'No campaigns.'));
  } catch (e) {
    list.replaceChildren(el('li', 'error', 'Could not load campaigns: ' + e.message));
  }
}

async function startSession(campaignId, btn) {
  btn.disabled = true;
  try {
    const s = await api('/api/v1/sessions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ campaign_id: campaignId }),
    });
    for (const [key, token] of [['player', s.player_token], ['spectator', s.spectator_token]]) {
      const a = $(key + '-link');
      a.href = sessionLink(s.session_id, token);
      a.textContent = a.href;
    }
    $('created').hidden = false;
    loadSessions();
  } catch (e) {
    alert('Could not start a session: ' + e.message);
  } finally {
    btn.disabled = false;
  }
}

async function loadSessions() {
  const list = $('sessions');
  try {
    const sessions = await api('/api/v1/sessions');
    list.replaceChildren();
    for (const s of sessions) {
      const li = el('li', 'row');
      const info = el('div', 'grow');
      info.append(el('strong', null, s.title || s.session_id), el('div', 'muted mono', s.session_id));
      li.append(info, el('span', 'muted', `👤 ${s.players} · 👁 ${s.spectators} · ${s.turns} turns`));
      if (s.spectator_token) {
        const watch = el('a', 'button', 'Watch');
        watch.href = `/?session=${encodeURIComponent(s.session_id)}&token=${encodeURIComponent(s.spectator_token)}`;
        li.append(watch);
      }
      list.appendChild(li);
    }
    if (!sessions.length) list.appendChild(el('li', 'muted', 'No live sessions.'));
  } catch (e) {
    list.replaceChildren(el('li', 'error', 'Could not load sessions: ' + e.message));
  }
}

function startLobby() {
  $('lobby').hidden = false;
  $('refresh').addEventListener('click', loadSessions);
  loadCampaigns();
  loadSessions();
  setInterval(loadSessions, 10000);
}

// ---------------------------------------------------------------- game

const game = {
  id: null, token: null,
  ws: null, lastSeq: null, attempts: 0, stopped: false,
  role: null, snapshot: null,
  turns: new Map(),  // turn_id -> { box, bubble }
  calls: new Map(),  // turn_id/call_id -> { card, args }
};

function wsUrl() {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  let url = `${proto}//${location.host}/ws/sessions/${encodeURIComponent(game.id)}?token=${encodeURIComponent(game.token)}`;
  if (game.lastSeq !== null) url += '&last_seq=' + game.lastSeq;
  return url;
}

function setConn(text, cls) {
  const c = $('conn');
  c.hidden = false;
  c.textContent = text;
  c.className = 'conn ' + cls;
}

// Open the WebSocket (after checking the token over HTTP, so a bad link stops retrying).
async function connect() {
  setConn('connecting…', 'wait');
  try {
    applySnapshot(await fetchSnapshot());
  } catch (e) {
    if (e.status === 401 || e.status === 403 || e.status === 404) {
      game.stopped = true;
      setConn('closed', 'bad');
      notice(`Cannot open this session (${e.code || e.status}): ${e.message}`, 'error', 0);
      return;
    }
    // Server unreachable: fall through and let the socket fail / retry.
  }
  const ws = new WebSocket(wsUrl());
  game.ws = ws;
  ws.onmessage = (ev) => {
    let f;
    try { f = JSON.parse(ev.data); } catch { return; }
    handleFrame(f);
  };
  ws.onclose = () => {
    if (game.ws !== ws) return;
    game.ws = null;
    setConn('offline', 'bad');
    scheduleReconnect();
  };
}

// Exponential backoff with jitter, capped at 30 s.
function scheduleReconnect() {
  if (game.stopped) return;
  const delay = Math.min(30000, 500 * 2 ** game.attempts) + Math.random() * 400;
  game.attempts++;
  setConn(`reconnecting in ${Math.round(delay / 1000)}s`, 'wait');
  setTimeout(connect, delay);
}

function fetchSnapshot() {
  return api('/api/v1/sessions/' + encodeURIComponent(game.id), {
    headers: { Authorization: 'Bearer ' + game.token },
  });
}

function refreshSnapshot() {
  fetchSnapshot().then(applySnapshot).catch(() => {});
}

function handleFrame(f) {
  // Story frames carry seq: drop duplicates, remember the last one for resume.
  if (typeof f.seq === 'number' && f.type !== 'welcome') {
    if (game.lastSeq !== null && f.seq <= game.lastSeq) return;
    if (game.lastSeq !== null && f.seq !== game.lastSeq + 1) console.warn('seq gap', game.lastSeq, f.seq);
    game.lastSeq = f.seq;
  }
  switch (f.type) {
    case 'welcome': return onWelcome(f);
    case 'turn_started': return onTurnStarted(f);
    case 'tool_call': return onToolCall(f);
    case 'tool_result': return onToolResult(f);
    case 'narrative_delta': return onDelta(f);
    case 'turn_completed': return onTurnCompleted(f);
    case 'turn_failed': return onTurnFailed(f);
    case 'presence': return setPresence(f.players, f.spectators);
    case 'error': return onError(f);
    case 'ack':
      if (f.duplicate) notice('Already sent; not run again.', 'info');
      else if (f.queued > 0) notice(`Queued behind ${f.queued} turn(s).`, 'info', 3000);
      return;
    default: return; // pong and unknown frames need no display
  }
}

function onWelcome(f) {
  game.attempts = 0;
  game.role = f.role;
  setConn('live', 'ok');
  const spectator = f.role === 'spectator';
  $('badge').hidden = !spectator;
  $('chat').hidden = spectator;
  if (f.resumed === false && game.lastSeq !== null) {
    // The server no longer holds what we missed: accept whatever comes next.
    notice('Some story frames were missed; the state shown is current.', 'info');
    game.lastSeq = null;
  }
  if (f.state) applySnapshot(f.state);
  else if (game.snapshot) render(); // role may have changed what is clickable
}

// ---- timeline

function scrollStory(fn) {
  const t = $('timeline');
  const atBottom = t.scrollHeight - t.scrollTop - t.clientHeight < 80;
  fn(t);
  if (atBottom) t.scrollTop = t.scrollHeight;
}

// The box holding one turn; created lazily if we joined mid-turn.
function turnBox(turnId) {
  let t = game.turns.get(turnId);
  if (!t) {
    t = { box: el('div', 'turn pending'), bubble: null };
    game.turns.set(turnId, t);
    scrollStory((tl) => tl.appendChild(t.box));
  }
  return t;
}

function actorName(id) {
  const c = game.snapshot && game.snapshot.characters.find((x) => x.character_id === id);
  return c ? c.name : id || 'Player';
}

function onTurnStarted(f) {
  const t = turnBox(f.turn_id);
  const msg = el('div', 'msg player');
  msg.append(el('span', 'who', actorName(f.actor_id)), el('span', null, f.text));
  scrollStory(() => t.box.appendChild(msg));
}

function json(v) {
  return JSON.stringify(v === undefined ? null : v);
}

function onToolCall(f) {
  const t = turnBox(f.turn_id);
  t.bubble = null; // narration after a tool call starts a new bubble
  const card = el('div', 'tool');
  const head = el('div', 'tool-head');
  head.append(el('span', 'tool-name', '⚙ ' + f.tool), el('span', 'tool-status', '…'));
  card.appendChild(head);
  if (f.args) card.appendChild(el('code', 'tool-args', json(f.args)));
  game.calls.set(f.turn_id + '/' + f.call_id, { card, args: f.args || {} });
  scrollStory(() => t.box.appendChild(card));
}

function onToolResult(f) {
  const key = f.turn_id + '/' + f.call_id;
  let call = game.calls.get(key);
  if (!call) { // result without a call we saw: make a card for it
    onToolCall({ turn_id: f.turn_id, call_id: f.call_id, tool: f.tool, args: null });
    call = game.calls.get(key);
  }
  const status = call.card.querySelector('.tool-status');
  status.textContent = f.status;
  call.card.classList.add(f.status === 'ok' ? 'ok' : 'bad');
  const detail = f.status === 'ok'
    ? json(f.result)
    : `${f.reason || ''}${f.error_code ? ' (' + f.error_code + ')' : ''}${f.message ? ': ' + f.message : ''}`;
  scrollStory(() => call.card.appendChild(el('code', 'tool-result', detail)));
  if (f.status === 'ok') applyResult(f.tool, call.args, f.result || {});
}

function onDelta(f) {
  const t = turnBox(f.turn_id);
  if (!t.bubble) {
    t.bubble = el('div', 'msg narrative');
    t.box.appendChild(t.bubble);
  }
  scrollStory(() => t.bubble.appendChild(document.createTextNode(f.text || '')));
}

function onTurnCompleted(f) {
  const t = turnBox(f.turn_id);
  // No streamed narration? Show the full reply instead.
  if (!t.box.querySelector('.narrative') && f.reply) {
    scrollStory(() => t.box.appendChild(el('div', 'msg narrative', f.reply)));
  }
  t.bubble = null;
  t.box.classList.remove('pending');
  refreshSnapshot();
}

function onTurnFailed(f) {
  const t = turnBox(f.turn_id);
  t.box.classList.remove('pending');
  scrollStory(() => t.box.appendChild(el('div', 'notice error', `Turn failed (${f.error_code}): ${f.message || ''}`)));
  refreshSnapshot();
}

function onError(f) {
  let text = `${f.error_code}: ${f.message || ''}`;
  if (f.retry_after_ms) text += ` (retry in ${(f.retry_after_ms / 1000).toFixed(1)} s)`;
  notice(text, 'error');
}

function setPresence(players, spectators) {
  const p = $('presence');
  p.hidden = false;
  p.textContent = `👤 ${players} · 👁 ${spectators}`;
  p.title = `${players} players / ${spectators} spectators`;
}

// ---- character panel and areas

// Apply a successful tool result to the local snapshot until the next refresh.
function applyResult(tool, args, result) {
  const s = game.snapshot;
  if (!s) return;
  const who = s.characters.find((c) => c.character_id === (args.actor_id || args.character_id || s.active_actor_id));
  if (!who) return;
  if (tool === 'move' && result.to_area_id) who.area_id = result.to_area_id;
  if (typeof result.hp === 'number') who.hp = result.hp;
  if (typeof result.max_hp === 'number') who.max_hp = result.max_hp;
  render();
}

function applySnapshot(s) {
  if (!s || !Array.isArray(s.areas) || !Array.isArray(s.characters)) return;
  game.snapshot = s;
  render();
}

function render() {
  const s = game.snapshot;
  const pc = s.characters.find((c) => c.character_id === s.active_actor_id) || s.characters[0];
  const here = pc && s.areas.find((a) => a.area_id === pc.area_id);
  document.title = `questd · ${s.campaign_id || game.id}`;

  $('char-name').textContent = pc ? pc.name : '—';
  $('char-meta').textContent = pc ? `Level ${pc.level ?? '?'} · ${pc.state || pc.kind || ''} · turn ${s.turn ?? 0}` : '';
  const hp = (pc && pc.hp) ?? 0, max = (pc && pc.max_hp) || 1;
  const pct = Math.max(0, Math.min(100, (hp / max) * 100));
  $('hp-fill').style.width = pct + '%';
  $('hp-fill').className = 'hp-fill' + (pct <= 25 ? ' low' : pct <= 50 ? ' mid' : '');
  $('hp-text').textContent = `HP ${hp} / ${max}`;
  $('char-area').textContent = here ? here.name : (pc ? pc.area_id : '');

  const inv = $('inventory');
  inv.replaceChildren();
  for (const item of (pc && pc.inventory) || []) {
    inv.appendChild(el('li', null, `${item.name}${item.quantity > 1 ? ' ×' + item.quantity : ''}`));
  }

  const near = new Set(here ? here.reachable_area_ids : []);
  const list = $('areas');
  list.replaceChildren();
  for (const a of s.areas) {
    const li = el('li');
    if (here && a.area_id === here.area_id) {
      li.className = 'current';
      li.append(el('strong', null, a.name), el('div', 'muted', a.description || ''));
    } else if (near.has(a.area_id) && game.role !== 'spectator') {
      const b = el('button', 'link', '→ ' + a.name);
      b.type = 'button';
      b.title = 'go to ' + a.area_id;
      b.addEventListener('click', () => sendChat('go to ' + a.area_id));
      li.appendChild(b);
    } else {
      li.className = near.has(a.area_id) ? 'near' : 'far';
      li.textContent = a.name;
    }
    list.appendChild(li);
  }
}

// ---- chat

function sendChat(text) {
  text = text.trim();
  if (!text) return false;
  if (!game.ws || game.ws.readyState !== WebSocket.OPEN) {
    notice('Not connected, try again in a moment.', 'error');
    return false;
  }
  const request_id = 'r-' + Math.random().toString(36).slice(2, 10) + Date.now().toString(36);
  game.ws.send(JSON.stringify({ type: 'chat', text, request_id }));
  return true;
}

function startGame(id, token) {
  game.id = id;
  game.token = token;
  $('game').hidden = false;
  const input = $('chat-input');
  $('chat').addEventListener('submit', (e) => {
    e.preventDefault();
    if (sendChat(input.value)) input.value = '';
  });
  // Enter sends, but not while an IME (e.g. Chinese input) is composing.
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.isComposing || e.keyCode === 229)) e.preventDefault();
  });
  // Keep idle connections alive through proxies.
  setInterval(() => {
    if (game.ws && game.ws.readyState === WebSocket.OPEN) game.ws.send(JSON.stringify({ type: 'ping', nonce: Date.now() }));
  }, 25000);
  connect();
}

// ---------------------------------------------------------------- start

const params = new URLSearchParams(location.search);
if (params.get('session') && params.get('token')) startGame(params.get('session'), params.get('token'));
else startLobby();
