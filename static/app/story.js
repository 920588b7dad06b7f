// The story timeline: one box per turn (the player's words, the game
// master's narration as it streams, then what its tools did, cards.js, and
// how the turn ended), the opening card,
// notes between turns, and the player's messages that wait to run (the
// outbox). It stays scrolled to its end while the reader follows it.

import { $, el, icon } from './dom.js';
import { eventName, hasText, t } from './language.js';
import {
  APPLIED_TOOLS, activeCharacter, applyPatch, area, campaignTitle, character, descriptionOf, game, nameOf,
  refreshSnapshotSoon, seatName,
} from './state.js';
import { renderSheet } from './hero.js';

// Adds to the story and keeps it scrolled to the end, unless the reader
// has scrolled up (game.follow is updated by the timeline's scroll events).
// The scroll waits for the next frame, so a burst of frames (a resume
// backlog, the recent story) costs one layout, not one per frame.
export function scrollStory(fn) {
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
export function turnBox(turnId) {
  let turn = game.turns.get(turnId);
  if (!turn) {
    const box = el('div', 'turn pending');
    box.dataset.turnId = turnId;
    if (String(turnId).startsWith('direct_')) {
      box.classList.add('direct');
      box.appendChild(el('div', 'turn-label', t('story.direct')));
    }
    turn = { box, bubble: null, gotNarrative: false, tools: null };
    game.turns.set(turnId, turn);
    const parent = game.container || $('live');
    scrollStory(() => parent.appendChild(box));
  }
  return turn;
}

export function onTurnStarted(f, live) {
  const turn = turnBox(f.turn_id);
  if (f.trigger === 'timer') {
    onWorldTurn(f, turn, live);
    return;
  }
  const msg = el('div', 'msg player');
  if (f.seat_id) msg.dataset.seatId = f.seat_id;
  if (Array.isArray(f.actions)) {
    // A round's turn: every seat's action, in seat order.
    msg.classList.add('round');
    msg.dataset.round = String(f.round);
    const list = el('ul', 'round-actions');
    for (const a of f.actions) {
      const li = el('li', a.text === null ? 'none' : null);
      li.dataset.seatId = a.seat_id;
      li.append(el('b', 'who-name', speaker(a.seat_id, a.character_id)), el('span', 'text', a.text ?? t('story.no_action')));
      list.appendChild(li);
    }
    msg.append(el('span', 'who', t('story.round', { n: f.round })), list);
  } else {
    msg.append(el('span', 'who', speaker(f.seat_id, f.actor_id)), el('span', 'text', f.text));
  }
  if (f.request_id) msg.dataset.requestId = f.request_id;
  scrollStory(() => turn.box.prepend(msg));
  if (live && game.snapshot && typeof game.snapshot.turn === 'number') {
    game.snapshot.turn += 1;
    renderSheet();
  }
}

// A world turn (a timer came due): no one spoke, so it opens with a line
// naming the event rather than a player's bubble; its narration follows
// as any turn's does.
function onWorldTurn(f, turn, live) {
  turn.box.classList.add('world');
  const line = el('div', 'world-event');
  line.dataset.event = f.event || '';
  line.dataset.timerId = f.timer_id || '';
  line.append(el('span', 'world-mark', '⏳'), el('span', 'text', eventName(f.event)));
  line.title = t('story.world_title');
  scrollStory(() => turn.box.prepend(line));
  if (live) {
    if (game.snapshot && typeof game.snapshot.turn === 'number') {
      game.snapshot.turn += 1;
      renderSheet();
    }
    // The timer fired: the pending list changed.
    refreshSnapshotSoon();
  }
}

// Whose words: the seat's name, else its character's.
function speaker(seatId, characterId) {
  const seat = seatId && seatName(seatId);
  if (seat) return seat;
  const who = character(characterId);
  return who ? nameOf(who) : characterId || '';
}

export function onDelta(f) {
  const turn = turnBox(f.turn_id);
  if (!turn.bubble) {
    turn.bubble = el('div', 'msg gm streaming');
    narrate(turn, turn.bubble);
  }
  turn.gotNarrative = true;
  scrollStory(() => turn.bubble.appendChild(document.createTextNode(f.text || '')));
}

// The narrative goes first in a turn, above the line of what its tools did,
// though the tools ran before it was told.
function narrate(turn, node) {
  turn.box.insertBefore(node, turn.tools ? turn.tools.section : null);
}

function endBubble(turn) {
  if (turn.bubble) turn.bubble.classList.remove('streaming');
  turn.bubble = null;
}

export function onTurnCompleted(f, live) {
  const turn = turnBox(f.turn_id);
  if (!turn.gotNarrative && f.reply) {
    scrollStory(() => narrate(turn, el('div', 'msg gm', f.reply)));
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

export function onTurnFailed(f, live) {
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

// A line in the story that is not part of a turn.
export function storyNote(text) {
  scrollStory(() => $('live').appendChild(el('div', 'divider', text)));
}

// The opening scene at the top of a story shown from its start: the
// campaign's title and, for a session with no turns yet, where the hero stands.
export function renderOpening() {
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
  const title = campaignTitle() || o.title;
  if (title) card.append(el('h3', null, title));
  if (o.place) {
    card.append(el('p', null, t('story.you_are_in', { name: nameOf(o.hero), place: nameOf(o.place) })));
    const description = descriptionOf(o.place);
    if (description) card.append(el('p', 'muted', description));
  }
  card.append(el('p', 'hint', game.role === 'spectator' ? t('story.watch_hint') : t('story.try')));
  box.appendChild(card);
}

export function renderOutboxEntry(entry) {
  const node = el('div', 'msg player pending');
  node.dataset.requestId = entry.requestId;
  node.append(el('span', 'text', entry.text), el('span', 'state'));
  entry.node = node;
  scrollStory(() => $('outbox').appendChild(node));
  updateOutboxEntry(entry);
}

export function updateOutboxEntry(entry) {
  if (!entry.node) return;
  entry.node.dataset.state = entry.state;
  let text = t('outbox.' + entry.state);
  if (entry.state === 'waiting' && game.conn.state === 'open') text = t('outbox.held');
  if (entry.state === 'accepted' && entry.queued > 0) text = t('outbox.queued', { n: entry.queued });
  if (entry.state === 'accepted' && typeof entry.round === 'number') text = t('outbox.round', { n: entry.round });
  if (entry.state === 'retry') text = t('outbox.retry', { s: Math.max(1, Math.ceil((entry.retryAt - Date.now()) / 1000)) });
  entry.node.querySelector('.state').textContent = text;
}
