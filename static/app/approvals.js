// A tool call that waits for a person's decision (docs/protocol.md §19),
// as a card in its turn: the tool, its arguments in words, and for the
// seats that may decide (the speaker's seat, or the host) Approve and Deny
// with the time left; for everyone else the same card, read only. Its
// `approval_resolved` turns the card into the outcome: approved, denied or
// timed out, by whom, and why.
//
// Cards come from `approval_requested` frames (live or replayed) and, when
// the server could not replay the story, from the welcome's
// `pending_approvals`.

import { el, icon, notice } from './dom.js';
import { hasText, t } from './language.js';
import { areaName, character, game, itemName, itemNameBySlug, nameOf, seatName, seats } from './state.js';
import { scrollStory, turnBox } from './story.js';
import { argWords, signed } from './cards.js';

// approval_id -> { card, request, outcome, busy }: every card shown.
const shown = new Map();
// Redraws the time left of the waiting cards once a second, while any waits.
let ticker = null;

// A request: its card in its turn (once, however often it is told).
export function onApprovalRequested(f) {
  if (!f || typeof f.approval_id !== 'string') return;
  let entry = shown.get(f.approval_id);
  if (!entry) {
    const card = el('div', 'approval');
    card.dataset.approvalId = f.approval_id;
    card.dataset.tool = f.tool;
    entry = { card, request: f, outcome: null, busy: false };
    shown.set(f.approval_id, entry);
    const turn = turnBox(f.turn_id);
    scrollStory(() => turn.box.appendChild(card));
  }
  entry.request = { ...entry.request, ...f };
  draw(entry);
  tick();
}

// A decision (or the timeout): the card tells the outcome.
export function onApprovalResolved(f) {
  let entry = shown.get(f.approval_id);
  if (!entry) {
    // Its request came before the story this page holds.
    onApprovalRequested({ approval_id: f.approval_id, turn_id: f.turn_id, call_id: f.call_id, tool: '', args: null });
    entry = shown.get(f.approval_id);
  }
  entry.outcome = f;
  draw(entry);
}

// A welcome after the server could not replay the story: its snapshot
// says what waits now; a card still waiting that it no longer lists was
// decided among the frames this page did not get.
export function onPendingApprovals(pending) {
  const listed = new Set();
  for (const a of Array.isArray(pending) ? pending : []) {
    listed.add(a.approval_id);
    onApprovalRequested(a);
  }
  for (const [id, entry] of shown) {
    if (!entry.outcome && !listed.has(id)) {
      entry.outcome = { approval_id: id, decision: 'settled' };
      draw(entry);
    }
  }
}

// Every card again, in the page's language.
export function renderApprovals() {
  for (const entry of shown.values()) draw(entry);
}

// The seats changed: a waiting card whose buttons come or go (a seat
// became host, or stopped being it) is drawn again; the others keep their
// buttons, and the focus on them.
export function onSeatsChanged() {
  for (const entry of shown.values()) {
    if (!entry.outcome && entry.decides !== mayDecide(entry.request)) draw(entry);
  }
}

// This page may decide on `request`: a player's page of its speaker's seat,
// or of the host's seat (which may decide for any seat, and alone for a
// turn no seat spoke).
function mayDecide(request) {
  if (game.role !== 'player' || !game.conn) return false;
  const mine = game.conn.seatId;
  if (!mine) return true; // a welcome without seats: the one player is the host
  if (request.seat_id === mine) return true;
  const seat = seats().find((s) => s.seat_id === mine);
  return Boolean(seat && seat.role === 'host');
}

function draw(entry) {
  const { card, request: f, outcome } = entry;
  card.dataset.state = outcome ? outcome.decision : 'waiting';
  const head = el('div', 'approval-head');
  head.append(icon('alert', 'approval-icon'), el('span', 'approval-title', t('approval.title')));
  if (f.tool) head.append(el('span', 'tool-name', f.tool));
  const parts = [head];
  if (f.tool) parts.push(el('div', 'approval-what', describe(f.tool, f.args)));
  if (outcome) {
    parts.push(el('div', 'approval-outcome', outcomeText(outcome)));
    if (outcome.reason) parts.push(el('div', 'approval-reason muted', t('approval.reason', { reason: outcome.reason })));
  } else {
    const left = el('span', 'approval-left');
    left.setAttribute('role', 'timer');
    const row = el('div', 'approval-row');
    entry.decides = mayDecide(f);
    if (entry.decides) {
      const approve = el('button', 'primary small approve', t('approval.approve'));
      const deny = el('button', 'ghost small deny', t('approval.deny'));
      for (const [b, decision] of [[approve, 'approve'], [deny, 'deny']]) {
        b.type = 'button';
        b.disabled = entry.busy;
        b.addEventListener('click', () => decide(entry, decision));
      }
      row.append(approve, deny, left);
    } else {
      row.append(el('span', 'approval-waiting muted', waitingFor(f.seat_id)), left);
    }
    parts.push(row);
  }
  card.replaceChildren(...parts);
  paintLeft(entry);
}

// Whose decision a read-only card waits for: the speaker's seat (by its
// name), and the host, who may decide for any seat.
function waitingFor(seatId) {
  const name = seatId ? seatName(seatId) : null;
  if (!name) return t('approval.waiting');
  const seat = seats().find((s) => s.seat_id === seatId);
  return t(seat && seat.role === 'host' ? 'approval.waiting_for_host' : 'approval.waiting_for', { name });
}

async function decide(entry, decision) {
  if (entry.busy || entry.outcome) return;
  entry.busy = true;
  for (const b of entry.card.querySelectorAll('button')) b.disabled = true;
  try {
    // The card tells the outcome when its approval_resolved arrives.
    await game.conn.decide(entry.request.approval_id, decision);
  } catch (e) {
    const code = e.error_code || '';
    const why = hasText('approval.code.' + code) ? t('approval.code.' + code) : e.message;
    notice(t('approval.failed', { message: why }), 'error', 6000, code);
  } finally {
    entry.busy = false;
    if (!entry.outcome) draw(entry);
  }
}

// "m:ss" (or "h:mm:ss") from milliseconds.
function clock(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

function paintLeft(entry) {
  const left = entry.card.querySelector('.approval-left');
  if (!left) return;
  const due = Date.parse(entry.request.expires_at);
  if (Number.isNaN(due)) {
    left.textContent = '';
    return;
  }
  const ms = due - Date.now();
  left.dataset.ms = String(Math.max(0, ms));
  left.textContent = ms > 0 ? t('approval.left', { time: clock(ms) }) : t('approval.expired');
}

function tick() {
  if (ticker) return;
  ticker = setInterval(() => {
    let waiting = 0;
    for (const entry of shown.values()) {
      if (entry.outcome) continue;
      waiting += 1;
      paintLeft(entry);
    }
    if (!waiting) {
      clearInterval(ticker);
      ticker = null;
    }
  }, 1000);
}

function outcomeText(o) {
  if (o.decision === 'timeout') return t('approval.timeout');
  if (o.decision === 'settled') return t('approval.settled');
  const who = o.by_seat_id ? seatName(o.by_seat_id) || o.by_seat_id : t('approval.by_key');
  return t(o.decision === 'approve' ? 'approval.approved' : 'approval.denied', { who });
}

// A character by id, by name in the page's language.
function who(id) {
  const c = character(id);
  return c ? nameOf(c) : id || '';
}

// What the call would do, in words; "key: value" for a tool without a sentence.
function describe(tool, args) {
  const a = args && typeof args === 'object' ? args : {};
  switch (tool) {
    case 'hp_delta': {
      if (typeof a.delta !== 'number') break;
      const target = character(a.target_character_id);
      let text = t('approval.hp', { who: who(a.target_character_id), delta: signed(a.delta) });
      if (a.cause) text += t('approval.cause', { cause: a.cause });
      if (target && a.delta < 0 && target.hp > 0 && target.hp + a.delta <= 0) text += t('approval.lethal');
      return text;
    }
    case 'add_inventory': {
      if (!Array.isArray(a.items)) break;
      const items = a.items.map((i) => `${itemName(i)} ×${i.quantity ?? 1}`).join(t('approval.and'));
      return t('approval.take', { who: who(a.character_id), items });
    }
    case 'update_inventory': {
      if (!Array.isArray(a.updates)) break;
      const items = a.updates.map((u) => `${itemNameBySlug(u.slug)} ${signed(u.quantity_change)}`).join(t('approval.and'));
      return t('approval.items', { who: who(a.character_id), items });
    }
    case 'move':
      if (!a.to_area_id) break;
      return t('approval.move', { who: who(a.actor_id), place: areaName(a.to_area_id) });
    default:
  }
  const words = argWords(a).map(([k, v]) => `${k}: ${v}`).join(' · ');
  return words || t('approval.no_args');
}
