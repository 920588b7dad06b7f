// questd operator console (/admin). No framework, no build step.
//
// - The internal key is asked for once and kept in sessionStorage (this tab
//   only); it travels in the X-Internal-API-Key header, never in a URL. A
//   401 or 403 forgets it and asks again.
// - The node's figures and the live sessions are read every REFRESH_MS.
//   Turns per second is computed here from two successive reads of the
//   node's `turns.started` and `uptime_s` (the server keeps no rate).
// - A chosen session shows its stored story and audit trail, paged, and
//   can be closed for good (after a confirmation).
// - Everything shown is set as text (textContent), never as HTML.
'use strict';

const KEY_STORE = 'questd.adminKey';
const REFRESH_MS = 3000;
const SESSIONS_LIMIT = 200;
const STORY_PAGE = 100;
const AUDIT_PAGE = 100;

const $ = (id) => document.getElementById(id);

const admin = {
  key: null,
  timer: null,
  previous: null, // { started, uptime } of the last node read
  chosen: null, // session id shown in the detail
  storyAfter: 0,
  auditAfter: 0,
};

// ---------------------------------------------------------------- the key

function readKey() {
  try { return sessionStorage.getItem(KEY_STORE); } catch { return null; }
}

function writeKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORE, key);
    else sessionStorage.removeItem(KEY_STORE);
  } catch { /* storage refused: the key lives in memory only */ }
}

function showLogin(message) {
  clearTimeout(admin.timer);
  admin.key = null;
  admin.previous = null;
  writeKey(null);
  $('console').hidden = true;
  $('sign-out').hidden = true;
  $('node-id').hidden = true;
  $('login').hidden = false;
  $('key-error').textContent = message || '';
  $('key').value = '';
  $('key').focus();
}

function showConsole() {
  $('login').hidden = true;
  $('console').hidden = false;
  $('sign-out').hidden = false;
  refresh();
}

// ---------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
  }
}

async function api(path, method) {
  const resp = await fetch(path, {
    method: method || 'GET',
    headers: { 'X-Internal-API-Key': admin.key },
    cache: 'no-store',
  });
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON */ }
  if (resp.status === 401 || resp.status === 403) {
    showLogin((body && body.message) || 'The key was refused.');
    throw new ApiError(resp.status, body);
  }
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- refresh

async function refresh() {
  clearTimeout(admin.timer);
  if (!admin.key) return;
  try {
    const [node, list] = await Promise.all([
      api('/api/v1/admin/node'),
      api(`/api/v1/admin/sessions?limit=${SESSIONS_LIMIT}`),
    ]);
    showNode(node);
    showSessions(list);
    $('node-status').textContent = 'Updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (!admin.key) return; // refused: the login shows why
    $('node-status').textContent = 'Could not read the node: ' + e.message;
  }
  admin.timer = setTimeout(refresh, REFRESH_MS);
}

function formatSeconds(s) {
  if (s === null || s === undefined) return '–';
  if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 1) + ' ms';
  return s.toFixed(2) + ' s';
}

function formatUptime(s) {
  const total = Math.floor(s);
  const d = Math.floor(total / 86400);
  const h = Math.floor((total % 86400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min ${sec} s`;
  return `${sec} s`;
}

function showNode(n) {
  $('node-id').textContent = 'node ' + n.node_id;
  $('node-id').hidden = false;
  $('f-sessions').textContent = n.sessions_live;
  $('f-players').textContent = n.connections.player;
  $('f-spectators').textContent = n.connections.spectator;
  $('f-started').textContent = n.turns.started;
  $('f-completed').textContent = n.turns.completed;
  const failed = Object.entries(n.turns.failed);
  const failedTotal = failed.reduce((sum, [, count]) => sum + count, 0);
  $('f-failed').textContent = failed.length
    ? `${failedTotal} (${failed.map(([code, count]) => `${code} ${count}`).join(', ')})`
    : '0';
  $('f-frames').textContent = n.frames_sent;
  $('f-drops').textContent = n.outbound_drops;
  $('f-limited').textContent = n.rate_limited;
  const c = n.journal_commit;
  $('f-commit').textContent = `${formatSeconds(c.p50_s)} / ${formatSeconds(c.p99_s)}`;
  $('f-commits').textContent = c.count;
  $('f-uptime').textContent = formatUptime(n.uptime_s);
  const prev = admin.previous;
  if (prev && n.uptime_s > prev.uptime) {
    const rate = (n.turns.started - prev.started) / (n.uptime_s - prev.uptime);
    $('f-rate').textContent = rate.toFixed(2);
  }
  admin.previous = { started: n.turns.started, uptime: n.uptime_s };
}

function cell(row, label, text, cls) {
  const td = document.createElement('td');
  td.dataset.label = label;
  if (text !== undefined) td.textContent = text;
  if (cls) td.className = cls;
  row.append(td);
  return td;
}

// A new row of the sessions table; `fillRow` writes its values.
function newRow(id) {
  const row = document.createElement('tr');
  row.dataset.sessionId = id;
  const who = document.createElement('div');
  for (const cls of ['title', 'sid', 'closing']) {
    const span = document.createElement('span');
    span.className = cls;
    who.append(span);
  }
  cell(row, 'Session', undefined, 'name').append(who);
  cell(row, 'Tenant', '', 'tenant');
  cell(row, 'Players', '', 'players');
  cell(row, 'Spectators', '', 'spectators');
  cell(row, 'Turns', '', 'turns');
  cell(row, 'Queue', '', 'queued');
  cell(row, 'Owner node', '', 'owner');
  cell(row, 'Last activity', '', 'activity');
  const open = document.createElement('button');
  open.type = 'button';
  open.className = 'small open';
  open.textContent = 'Open';
  open.addEventListener('click', () => choose(id));
  cell(row, '').append(open);
  return row;
}

function fillRow(row, s) {
  const set = (cls, text) => { row.querySelector('.' + cls).textContent = text; };
  set('title', s.title);
  set('sid', s.session_id);
  set('closing', s.closing ? 'closing' : '');
  set('tenant', s.tenant_id);
  set('players', String(s.players));
  set('spectators', String(s.spectators));
  set('turns', String(s.turns));
  set('queued', String(s.queued));
  set('owner', s.owner_node);
  set('activity', new Date(s.last_activity_ms).toLocaleTimeString());
  row.querySelector('button.open').setAttribute('aria-label', `Open ${s.title} (${s.session_id})`);
  if (s.session_id === admin.chosen) row.setAttribute('aria-current', 'true');
  else row.removeAttribute('aria-current');
}

// Rows are kept and moved, not made anew, so a button stays the same
// element while the list refreshes under the pointer.
function showSessions(list) {
  const body = $('sessions-body');
  const old = new Map([...body.rows].map((row) => [row.dataset.sessionId, row]));
  for (const s of list.sessions) {
    const row = old.get(s.session_id) || newRow(s.session_id);
    old.delete(s.session_id);
    fillRow(row, s);
    body.append(row);
  }
  for (const row of old.values()) row.remove();
  $('sessions').hidden = list.sessions.length === 0;
  $('sessions-empty').hidden = list.sessions.length > 0;
  $('sessions-count').textContent = list.total > list.sessions.length
    ? `${list.sessions.length} of ${list.total}`
    : String(list.total);
}

// ---------------------------------------------------------------- a session

async function choose(id) {
  admin.chosen = id;
  admin.storyAfter = 0;
  admin.auditAfter = 0;
  for (const row of $('sessions-body').rows) {
    if (row.dataset.sessionId === id) row.setAttribute('aria-current', 'true');
    else row.removeAttribute('aria-current');
  }
  $('detail').hidden = false;
  $('detail-id').textContent = id;
  $('detail-meta').textContent = '';
  $('detail-status').textContent = '';
  $('story').replaceChildren();
  $('audit-body').replaceChildren();
  $('timers-body').replaceChildren();
  $('timers').hidden = true;
  $('timers-empty').hidden = true;
  $('close-session').disabled = false;
  await Promise.all([loadStory(), loadAudit(), loadTimers()]);
  $('detail').scrollIntoView({ block: 'start' });
}

function summary(f) {
  switch (f.type) {
    case 'turn_started': return f.text;
    case 'narrative_delta': return f.text;
    case 'tool_call': return `${f.tool} ${JSON.stringify(f.args)}`;
    case 'tool_result': return `${f.tool}: ${f.status}` + (f.error_code ? ` ${f.error_code}` : '');
    case 'turn_completed': return f.reply;
    case 'turn_failed': return `${f.error_code}: ${f.message}`;
    case 'presence': return `${f.players} player(s), ${f.spectators} spectator(s)`;
    default: return '';
  }
}

async function loadStory() {
  const id = admin.chosen;
  try {
    const page = await api(`/api/v1/admin/sessions/${enc(id)}/story?after_seq=${admin.storyAfter}&limit=${STORY_PAGE}`);
    if (id !== admin.chosen) return;
    const meta = [`tenant ${page.tenant_id}`, `campaign ${page.campaign_id}`, page.title];
    meta.push(page.owner_node ? `runs on ${page.owner_node}` : 'not loaded on any node');
    if (page.closed_at) meta.push(`closed ${new Date(page.closed_at).toLocaleString()}`);
    $('detail-meta').textContent = meta.join(' · ');
    $('close-session').disabled = Boolean(page.closed_at);
    const list = $('story');
    for (const f of page.frames) {
      const li = document.createElement('li');
      li.dataset.seq = f.seq;
      li.dataset.type = f.type;
      const seq = document.createElement('span');
      seq.className = 'seq';
      seq.textContent = '#' + f.seq;
      const kind = document.createElement('span');
      kind.className = 'kind';
      kind.textContent = f.type;
      li.append(seq, kind, document.createTextNode(summary(f) ?? ''));
      list.append(li);
      admin.storyAfter = f.seq;
    }
    $('story-empty').hidden = list.children.length > 0;
    $('story-more').hidden = page.next_after_seq === null;
  } catch (e) {
    if (admin.key) $('detail-status').textContent = 'Could not read the story: ' + e.message;
  }
}

// The session's pending timers (its snapshot's: no note, no key). A closed
// session has none to run.
async function loadTimers() {
  const id = admin.chosen;
  try {
    const page = await api(`/api/v1/admin/sessions/${enc(id)}/timers`);
    if (id !== admin.chosen) return;
    const body = $('timers-body');
    body.replaceChildren();
    for (const x of page.timers) {
      const row = body.insertRow();
      row.dataset.timerId = x.timer_id;
      cell(row, 'Timer', x.timer_id, 'sid');
      cell(row, 'Event', x.event);
      const due = new Date(x.due_at);
      cell(row, 'Due', Number.isNaN(due.getTime()) ? x.due_at : due.toLocaleString());
      cell(row, 'Repeats', x.repeat_s ? `every ${x.repeat_s} s` : 'once');
    }
    $('timers').hidden = page.timers.length === 0;
    $('timers-empty').hidden = page.timers.length > 0;
  } catch (e) {
    if (id !== admin.chosen) return;
    $('timers-empty').hidden = false;
    if (e.code !== 'SESSION_CLOSED' && admin.key) $('detail-status').textContent = 'Could not read the timers: ' + e.message;
  }
}

async function loadAudit() {
  const id = admin.chosen;
  try {
    const page = await api(`/api/v1/admin/sessions/${enc(id)}/audit?after_id=${admin.auditAfter}&limit=${AUDIT_PAGE}`);
    if (id !== admin.chosen) return;
    const body = $('audit-body');
    for (const a of page.entries) {
      const row = document.createElement('tr');
      row.dataset.auditId = a.audit_id;
      cell(row, 'Time', new Date(a.created_at).toLocaleTimeString());
      cell(row, 'Tool', a.tool, 'mono');
      cell(row, 'Caller', a.role);
      const status = a.error_code ? `${a.status} ${a.error_code}` : a.status;
      cell(row, 'Status', status, 'status-' + a.status);
      cell(row, 'Trace', a.trace_id, 'mono');
      body.append(row);
      admin.auditAfter = a.audit_id;
    }
    $('audit-empty').hidden = body.rows.length > 0;
    $('audit-more').hidden = page.next_after_id === null;
  } catch (e) {
    if (admin.key) $('detail-status').textContent = 'Could not read the audit trail: ' + e.message;
  }
}

function askToClose() {
  if (!admin.chosen) return;
  $('confirm-id').textContent = admin.chosen;
  $('confirm').showModal();
}

async function closeChosen() {
  const id = admin.chosen;
  const button = $('close-session');
  button.disabled = true;
  $('detail-status').textContent = 'Closing…';
  try {
    const closed = await api(`/api/v1/admin/sessions/${enc(id)}/close`, 'POST');
    $('detail-status').textContent = `Closed at ${new Date(closed.closed_at).toLocaleString()}. `
      + 'Its connections are closed once the work it took is done.';
    refresh();
  } catch (e) {
    button.disabled = false;
    if (admin.key) $('detail-status').textContent = 'Could not close it: ' + e.message;
  }
}

// ---------------------------------------------------------------- start

function start() {
  $('key-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('key').value.trim();
    if (!key) return;
    admin.key = key;
    writeKey(key);
    $('key').value = '';
    $('key-error').textContent = '';
    showConsole();
  });
  $('sign-out').addEventListener('click', () => showLogin(''));
  $('story-more').addEventListener('click', loadStory);
  $('audit-more').addEventListener('click', loadAudit);
  $('close-session').addEventListener('click', askToClose);
  $('confirm').addEventListener('close', () => {
    if ($('confirm').returnValue === 'close') closeChosen();
  });
  const saved = readKey();
  if (saved) {
    admin.key = saved;
    showConsole();
  }
}

start();
