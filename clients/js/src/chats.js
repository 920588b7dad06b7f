// The chats of one connection: the outbox of chats not yet running, and the
// bookkeeping that settles each chat's promise with its turn's last frame.
//
// A chat is settled by the `turn_completed` / `turn_failed` of its turn.
// Which turn is its own is learned two ways: the `ack` names the turn id for
// the chat's request_id, and the turn's `turn_started` carries the request_id
// itself. After a reconnect the two can come in either order (the resume
// backlog may hold the whole turn before a duplicate `ack` arrives), so the
// last frames of recent turns and the request ids of recent `turn_started`s
// are kept, in bounded maps, to settle a chat whichever comes first. When
// they disagree (a turn id the server gave again after losing a queued
// chat), `turn_started` wins: it is the journal's word.
//
// A chat's turn may also have started where this connection cannot see it:
// before its first frame (a request_id sent again from an earlier page), or
// among frames a reset lost. Turns of a session are numbered in the order
// they are taken and start in that order (`turn_<n>`), and every welcome's
// snapshot names the number of the last turn started (`state.turn`). A chat
// whose turn is numbered at or below it, and whose `turn_started` this
// connection did not hand on, is rejected with OUTCOME_UNKNOWN rather than
// left waiting for an end that may never come to this connection (if that
// turn still runs, its remaining frames still arrive as frames).
//
// Chats go out one at a time, in the order they were made: the next is sent
// once the one before is acknowledged (or settled), so a chat that waits out
// a rate limit is not overtaken by a later one.

import { ClientCode, QuestdError } from './errors.js';
import { backoffDelay, BoundedMap, randomId, validRequestId } from './util.js';

/** How many recent turns' outcomes and request ids are remembered. */
export const REMEMBERED_TURNS = 1024;

/** Refusals the client waits out and sends again, same request_id. */
const RETRIED_CODES = new Set(['RATE_LIMITED', 'OVERLOADED', 'QUEUE_FULL', 'INTERNAL_ERROR']);

/** The wait when a refusal names none (QUEUE_FULL, INTERNAL_ERROR): the connection's backoff. */
const DEFAULT_RETRY_MS = 1000;

/**
 * One chat: `waiting` (in the outbox, not on the wire), `sent` (on the
 * wire, no answer yet), `accepted` (acked: the server queued it),
 * `retry` (refused for now; sent again at `retryAt`), `started` (its
 * `turn_started` arrived; only its end is awaited).
 */
class Chat {
  constructor(text, requestId, resolve, reject) {
    this.text = text;
    this.requestId = requestId;
    this.resolve = resolve;
    this.reject = reject;
    this.state = 'waiting';
    this.turnId = null;
    this.queued = 0;
    this.sends = 0;
    this.retries = 0;
    this.retryAt = null;
    this.timer = null;
    /** Rounds mode: the round this chat is the seat's action for, once acked. */
    this.round = null;
  }

  view() {
    return {
      requestId: this.requestId,
      text: this.text,
      state: this.state,
      turnId: this.turnId,
      queued: this.queued,
      retryAt: this.retryAt,
      round: this.round,
    };
  }
}

export class Chats {
  #chats = [];
  #outcomes = new BoundedMap(REMEMBERED_TURNS); // turn_id -> turn_completed | turn_failed
  #startedBy = new BoundedMap(REMEMBERED_TURNS); // turn_id -> the request_ids it started (a round's: several)
  #turnOf = new BoundedMap(REMEMBERED_TURNS); // request_id -> turn_id, from turn_started
  #closedError = null;
  #lastTurnAtWelcome = null; // welcome.state.turn of the last welcome: the last turn started

  /**
   * @param {object} io
   * @param {() => boolean} io.ready the socket is open and caught up
   * @param {(frame: object) => void} io.send
   * @param {() => void} io.changed the list of chats changed
   * @param {object} limits maxOutbox, maxRetries, backoff
   */
  constructor(io, limits) {
    this.io = io;
    this.limits = limits;
  }

  /** The chats not yet settled, oldest first. */
  views() {
    return this.#chats.map((c) => c.view());
  }

  /** A new chat; its promise settles with the turn's last frame. */
  add(text, requestId) {
    return new Promise((resolve, reject) => {
      if (this.#closedError) return reject(this.#closedError);
      if (typeof text !== 'string') {
        return reject(new TypeError('chat text is a string'));
      }
      const id = requestId ?? randomId('r-');
      if (!validRequestId(id)) {
        return reject(
          new QuestdError(ClientCode.INVALID_REQUEST_ID, 'a request_id is 1 to 128 characters without control characters', {
            requestId: typeof id === 'string' ? id : undefined,
          }),
        );
      }
      if (this.#chats.some((c) => c.requestId === id)) {
        return reject(
          new QuestdError(ClientCode.DUPLICATE_REQUEST_ID, `a chat with request_id ${id} is already waiting`, { requestId: id }),
        );
      }
      if (this.#chats.length >= this.limits.maxOutbox) {
        return reject(
          new QuestdError(ClientCode.OUTBOX_FULL, `${this.limits.maxOutbox} chats are already waiting`, { requestId: id }),
        );
      }
      const chat = new Chat(text, id, resolve, reject);
      this.#chats.push(chat);
      // Its turn may already be known (a request_id given again, e.g. after a page reload).
      const turnId = this.#turnOf.get(id);
      if (turnId !== undefined) {
        chat.turnId = turnId;
        chat.state = 'started';
        if (this.#settleFromOutcome(chat)) return;
      }
      this.io.changed();
      this.flush();
    });
  }

  /** Sends the next chat when the socket is ready and none is in flight. */
  flush() {
    if (!this.io.ready()) return;
    for (const chat of this.#chats) {
      if (chat.state === 'accepted' || chat.state === 'started') continue;
      if (chat.state !== 'waiting') return; // one in flight, or the next waits out a refusal
      chat.state = 'sent';
      chat.sends += 1;
      this.io.send({ type: 'chat', text: chat.text, request_id: chat.requestId });
      this.io.changed();
      return;
    }
  }

  /** The socket dropped: whatever has not started goes out again on the next one. */
  disconnected() {
    let changed = false;
    for (const chat of this.#chats) {
      if (chat.state === 'sent' || chat.state === 'accepted') {
        chat.state = 'waiting';
        changed = true;
      }
    }
    if (changed) this.io.changed();
  }

  /**
   * A welcome. After a reset (`welcome.resumed:false` once frames were
   * seen) the frames after the client's last one are gone: every chat that
   * already has a turn id is judged against the snapshot's last turn.
   */
  welcomed(welcome, reset) {
    const started = welcome && welcome.state && welcome.state.turn;
    this.#lastTurnAtWelcome = typeof started === 'number' ? started : null;
    if (!reset) return;
    for (const chat of [...this.#chats]) {
      if (chat.turnId !== null) this.#judge(chat);
    }
  }

  /** An `ack` frame. */
  onAck(f) {
    const chat = this.#find(f.request_id);
    if (!chat) return;
    if (typeof f.round === 'number') return this.#onRoundAck(chat, f);
    if (chat.state !== 'started') {
      chat.turnId = f.turn_id;
      chat.state = 'accepted';
      chat.queued = typeof f.queued === 'number' ? f.queued : 0;
    }
    if (this.#settleFromOutcome(chat)) return;
    // A turn whose start this connection did not see (a duplicate's) may have ended unseen.
    if (!this.#startedBy.has(chat.turnId) && this.#judge(chat)) return;
    this.io.changed();
    this.flush();
  }

  // Rounds mode: the chat is this seat's action for round `f.round`, and
  // runs in the round's turn (whose turn_started lists its request_id). A
  // second chat in the same round replaces the first.
  #onRoundAck(chat, f) {
    if (chat.state !== 'started') {
      chat.state = 'accepted';
      chat.round = f.round;
      chat.queued = 0;
    }
    for (const earlier of this.#chats.filter((c) => c !== chat && c.round === f.round && c.state === 'accepted')) {
      this.#settle(earlier, replaced(earlier));
    }
    this.io.changed();
    this.flush();
  }

  /**
   * An `error` frame. Returns whether the chat it names will be sent again
   * (so the caller can say so), false when it names none of ours.
   */
  onError(f) {
    const chat = this.#find(f.request_id);
    if (!chat || chat.state !== 'sent') return false;
    const code = String(f.error_code);
    if (RETRIED_CODES.has(code) && chat.retries < this.limits.maxRetries) {
      chat.retries += 1;
      const wait =
        typeof f.retry_after_ms === 'number' && f.retry_after_ms >= 0
          ? f.retry_after_ms
          : backoffDelay(chat.retries - 1, { initialMs: DEFAULT_RETRY_MS, maxMs: this.limits.backoff.maxMs });
      chat.state = 'retry';
      chat.retryAt = Date.now() + wait;
      chat.timer = setTimeout(() => {
        chat.timer = null;
        chat.retryAt = null;
        if (chat.state !== 'retry') return;
        chat.state = 'waiting';
        this.io.changed();
        this.flush();
      }, wait);
      this.io.changed();
      return true;
    }
    const error = QuestdError.fromErrorFrame(f);
    if (RETRIED_CODES.has(code)) error.message += ` (given up after ${chat.retries} retries)`;
    this.#settle(chat, error);
    return false;
  }

  /** A story frame, delivered in seq order. */
  onStory(f) {
    if (f.type === 'turn_started') {
      // A round's turn (rounds mode) starts the chats of every seat that acted.
      const requestIds = startersOf(f);
      this.#startedBy.set(f.turn_id, requestIds);
      let changed = false;
      let wasInFlight = false;
      for (const requestId of requestIds) {
        this.#turnOf.set(requestId, f.turn_id);
        const chat = this.#find(requestId);
        if (!chat) continue;
        clearTimeout(chat.timer);
        chat.timer = null;
        chat.retryAt = null;
        wasInFlight = wasInFlight || chat.state === 'sent';
        chat.turnId = f.turn_id;
        chat.state = 'started';
        changed = true;
      }
      // A chat taken for this round that the round does not carry was
      // replaced by a later action of the same seat (from another connection).
      if (typeof f.round === 'number') {
        for (const chat of this.#chats.filter((c) => c.round === f.round && c.state !== 'started')) {
          this.#settle(chat, replaced(chat));
        }
      }
      if (changed) this.io.changed();
      if (wasInFlight) this.flush();
      return;
    }
    if (f.type !== 'turn_completed' && f.type !== 'turn_failed') return;
    this.#outcomes.set(f.turn_id, f);
    const starters = this.#startedBy.get(f.turn_id);
    const chats =
      starters === undefined
        ? this.#chats.filter((c) => c.turnId === f.turn_id)
        : this.#chats.filter((c) => starters.includes(c.requestId));
    for (const chat of chats) this.#settleFromOutcome(chat);
  }

  /** Rejects every chat with `error`; later chats are refused with it. */
  closeAll(error) {
    this.#closedError = error;
    for (const chat of [...this.#chats]) this.#settle(chat, error);
  }

  // Rejects `chat` (returns true) when its turn started before the frames
  // this connection has: numbered at or below the last turn started as of
  // the last welcome.
  #judge(chat) {
    const n = turnNumber(chat.turnId);
    const last = this.#lastTurnAtWelcome;
    if (n === null || last === null || n > last) return false;
    this.#settle(chat, outcomeUnknown(chat));
    return true;
  }

  #find(requestId) {
    if (typeof requestId !== 'string') return undefined;
    return this.#chats.find((c) => c.requestId === requestId);
  }

  // Settles `chat` if the end of its turn is known. A turn whose
  // turn_started named other request_ids only is not this chat's.
  #settleFromOutcome(chat) {
    if (chat.turnId === null) return false;
    const outcome = this.#outcomes.get(chat.turnId);
    if (!outcome) return false;
    const starters = this.#startedBy.get(chat.turnId);
    if (starters !== undefined && !starters.includes(chat.requestId)) return false;
    this.#settle(chat, outcome.type === 'turn_completed' ? outcome : QuestdError.fromTurnFailed(outcome, chat.requestId));
    return true;
  }

  // Resolves with a frame, or rejects with an Error; then sends the next.
  #settle(chat, result) {
    const i = this.#chats.indexOf(chat);
    if (i < 0) return;
    this.#chats.splice(i, 1);
    clearTimeout(chat.timer);
    chat.timer = null;
    if (result instanceof Error) chat.reject(result);
    else chat.resolve(result);
    this.io.changed();
    this.flush();
  }
}

/** The request_ids a `turn_started` starts: its own, and in a round every action's. */
function startersOf(f) {
  const ids = typeof f.request_id === 'string' ? [f.request_id] : [];
  for (const a of Array.isArray(f.actions) ? f.actions : []) {
    if (a && typeof a.request_id === 'string' && !ids.includes(a.request_id)) ids.push(a.request_id);
  }
  return ids;
}

function replaced(chat) {
  return new QuestdError(
    ClientCode.REPLACED,
    `a later chat of this seat replaced this one as its action for round ${chat.round}`,
    { requestId: chat.requestId },
  );
}

/** n of `turn_<n>`, or null for another id. */
function turnNumber(turnId) {
  const m = /^turn_(\d+)$/.exec(String(turnId));
  return m ? Number(m[1]) : null;
}

function outcomeUnknown(chat) {
  return new QuestdError(
    ClientCode.OUTCOME_UNKNOWN,
    `this chat's turn (${chat.turnId}) started among frames this connection did not get ` +
      '(before the lastSeq it started from, or lost to a reset): it runs once, and the session state shows what it did',
    { requestId: chat.requestId, turnId: chat.turnId },
  );
}
