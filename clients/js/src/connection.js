// Connection: one client's WebSocket link to one questd session, kept up
// across drops. It reconnects with backoff and `last_seq`, hands on the
// session's story frames once each and in seq order, and keeps the chats
// (chats.js) until their turns end. docs/protocol.md §2–§3.

import { Approvals } from './approvals.js';
import { Chats } from './chats.js';
import { ClientCode, QuestdError } from './errors.js';
import { Party } from './party.js';
import { backoffDelay, Emitter, randomId } from './util.js';

export const DEFAULTS = Object.freeze({
  backoff: Object.freeze({ initialMs: 500, maxMs: 8000 }),
  /** A ping goes out after this long without a frame; no answer within as long again drops the socket. 0: never. */
  heartbeatMs: 15000,
  /** Chats that may wait at once. */
  maxOutbox: 100,
  /** Times one chat is sent again after RATE_LIMITED, OVERLOADED, QUEUE_FULL or INTERNAL_ERROR. */
  maxRetries: 20,
});

/** Every so many failed attempts without a welcome, ask over HTTP whether the link can work at all. */
const LINK_CHECK_EVERY = 4;
/** Pings waiting for their pong at once. */
const MAX_PENDING_PINGS = 16;
/** HTTP statuses of a link check that mean "this will never work": stop. 410: a session an operator closed. */
const FATAL_STATUSES = new Set([400, 401, 403, 404, 410]);
/** Close code of a server that restarts or hands its sessions over (docs/protocol.md §15). */
const SERVICE_RESTART = 1012;
/** Close code of a session an operator closed for good (docs/protocol.md §2.8): never reconnect. */
const SESSION_CLOSED = 4000;
/** Close code of a seat the host removed, or that left (docs/protocol.md §8): its token is refused from then on. */
const SEAT_KICKED = 4001;
/** The reason a seat that left is closed with (docs/protocol.md §2.8). */
const SEAT_LEFT_REASON = 'this seat left the session';
/** `say()`s waiting for their `party_chat` at once. */
const MAX_PENDING_SAYS = 16;
/** `decide()`s waiting for their `approval_resolved` at once. */
const MAX_PENDING_DECISIONS = 16;
/** What a person may decide (a timeout is the server's). */
const DECISIONS = new Set(['approve', 'deny']);
/** Event names of the client's own; a server frame type never shadows them. */
const OWN_EVENTS = new Set(['state', 'frame', 'reset', 'outbox', 'seats', 'round', 'approvals']);

export class Connection extends Emitter {
  #link;
  #options;
  #chats;
  #ws = null;
  #state = 'connecting';
  #welcomed = false; // some socket got a welcome
  #welcomeSeq = null; // welcome.seq of the current socket, null before its welcome
  #attempts = 0; // sockets lost since the last welcome
  #gapStreak = 0; // reconnects for a seq gap since an in-order frame
  #timer = null; // the next attempt; cleared by #open and #stop
  #reconnectAt = null;
  #heartbeat = null; // the liveness check while a socket is welcomed
  #lastFrameAt = 0;
  #pingSentAt = 0;
  #pings = new Map(); // nonce -> {resolve, reject}
  #nonce = 0;
  #party = new Party();
  #says = []; // {requestId, resolve, reject}, oldest first: each waits for its party_chat
  #approvals = new Approvals();
  #decisions = new Map(); // requestId -> {approvalId, resolve, reject}: each waits for its approval_resolved

  /**
   * Made by `Questd.connect`.
   * @param {{url: (lastSeq: number|null) => string, WebSocket: any, checkLink: () => Promise<unknown>}} link
   */
  constructor(link, sessionId, options = {}) {
    super();
    this.#link = link;
    this.sessionId = sessionId;
    const backoff = { ...DEFAULTS.backoff, ...(options.backoff || {}) };
    if (!(backoff.initialMs >= 0 && backoff.maxMs >= backoff.initialMs)) {
      throw new RangeError('backoff needs 0 <= initialMs <= maxMs');
    }
    this.#options = {
      backoff,
      heartbeatMs: options.heartbeatMs ?? DEFAULTS.heartbeatMs,
      maxOutbox: options.maxOutbox ?? DEFAULTS.maxOutbox,
      maxRetries: options.maxRetries ?? DEFAULTS.maxRetries,
    };
    /** The role the last welcome gave (`player` or `spectator`); the `role` option until then. */
    this.role = options.role ?? null;
    /** The last welcome frame (its `state` is the snapshot as of its `seq`). */
    this.welcome = null;
    /**
     * The seq of the last story frame handed on (or of the welcome that
     * replaced them); null before the first welcome unless given.
     */
    this.lastSeq = options.lastSeq ?? null;
    this.#chats = new Chats(
      {
        ready: () => this.#caughtUp(),
        send: (frame) => this.#send(frame),
        changed: () => this.emit('outbox', this.#chats.views()),
      },
      this.#options,
    );
    this.#open();
  }

  /** 'connecting' (no welcome yet), 'open', 'reconnecting' or 'closed' (for good). */
  get state() {
    return this.#state;
  }

  /** When the next attempt to connect is due (epoch ms), while one waits; else null. */
  get reconnectAt() {
    return this.#reconnectAt;
  }

  /** This player's seat (from the welcome); null for a spectator or before the welcome. */
  get seatId() {
    return this.#party.seatId;
  }

  /** This player's character (from the welcome). */
  get characterId() {
    return this.#party.characterId;
  }

  /** The session's seats: {seat_id, character_id, name, role, state, online}, kept current from the frames. */
  get seats() {
    return this.#party.seats;
  }

  /** `free` or `rounds`. */
  get turnMode() {
    return this.#party.turnMode;
  }

  /** Rounds mode: `{round, acted}`, the round actions go to now and the seats that acted in it. */
  get round() {
    return this.#party.roundState;
  }

  /**
   * The tool calls waiting for a person's decision, oldest first:
   * {approval_id, turn_id, call_id, tool, args, seat_id, expires_at},
   * kept current from the welcome's snapshot and the frames.
   */
  get approvals() {
    return this.#approvals.list;
  }

  /** The chats not yet settled, oldest first: {requestId, text, state, turnId, queued, retryAt, round}. */
  get pending() {
    return this.#chats.views();
  }

  /**
   * Sends a chat (a player's line) and resolves with its turn's
   * `turn_completed`; rejects with a QuestdError on its `turn_failed`, on an
   * `error` frame naming it (other than the ones retried), or on close().
   * While the socket is down it waits in the outbox and goes out after the
   * next welcome, with the same request_id, so it runs once.
   * @param {string} text
   * @param {{requestId?: string}} [options]
   */
  chat(text, options = {}) {
    return this.#chats.add(text, options.requestId);
  }

  /**
   * Table talk: sends `{"type":"say"}`, which everyone in the session gets
   * as a `party_chat` frame and the game master never sees. Resolves with
   * this seat's `party_chat`; rejects with the `error` frame naming it
   * (`FORBIDDEN` for a spectator, `TEXT_TOO_LONG`, `RATE_LIMITED`, …), or
   * with NOT_CONNECTED / DISCONNECTED: unlike a chat, it is not kept to be
   * sent again.
   * @param {string} text
   * @param {{requestId?: string}} [options]
   */
  say(text, options = {}) {
    if (typeof text !== 'string') return Promise.reject(new TypeError('say text is a string'));
    if (this.#state !== 'open' || !this.#ws) {
      return Promise.reject(new QuestdError(ClientCode.NOT_CONNECTED, 'not connected'));
    }
    if (this.#says.length >= MAX_PENDING_SAYS) {
      return Promise.reject(new QuestdError(ClientCode.NOT_CONNECTED, `${MAX_PENDING_SAYS} says already wait for their party_chat`));
    }
    const requestId = options.requestId ?? randomId('s-');
    return new Promise((resolve, reject) => {
      this.#says.push({ requestId, resolve, reject });
      this.#send({ type: 'say', text, request_id: requestId });
    });
  }

  /**
   * Decides on a pending approval (the speaker's seat or the host may):
   * sends `{"type":"approve"}` and resolves with its `approval_resolved`
   * frame (which says who decided: the host's decision may come first);
   * rejects with the `error` frame that answers it (`NOT_FOUND`,
   * `CONFLICT` when already decided, `FORBIDDEN` for a spectator or
   * another seat, `BAD_REQUEST`), or with NOT_CONNECTED / DISCONNECTED:
   * like a say, it is not kept to be sent again (after a reconnect,
   * `approvals` tells whether it still waits).
   * @param {string} approvalId
   * @param {'approve'|'deny'} decision
   * @param {string} [reason]
   */
  decide(approvalId, decision, reason) {
    if (typeof approvalId !== 'string' || !approvalId) return Promise.reject(new TypeError('decide needs an approval id'));
    if (!DECISIONS.has(decision)) return Promise.reject(new TypeError("a decision is 'approve' or 'deny'"));
    if (reason !== undefined && reason !== null && typeof reason !== 'string') {
      return Promise.reject(new TypeError('a reason is a string'));
    }
    if (this.#state !== 'open' || !this.#ws) {
      return Promise.reject(new QuestdError(ClientCode.NOT_CONNECTED, 'not connected'));
    }
    if (this.#decisions.size >= MAX_PENDING_DECISIONS) {
      return Promise.reject(new QuestdError(ClientCode.NOT_CONNECTED, `${MAX_PENDING_DECISIONS} decisions already wait for their approval_resolved`));
    }
    const requestId = randomId('d-');
    const frame = { type: 'approve', approval_id: approvalId, decision, request_id: requestId };
    if (reason) frame.reason = reason;
    return new Promise((resolve, reject) => {
      this.#decisions.set(requestId, { approvalId, resolve, reject });
      this.#send(frame);
    });
  }

  /** Sends a `ping`; resolves with the `pong`. */
  ping() {
    if (this.#state !== 'open' || !this.#ws) {
      return Promise.reject(new QuestdError(ClientCode.NOT_CONNECTED, 'not connected'));
    }
    if (this.#pings.size >= MAX_PENDING_PINGS) {
      return Promise.reject(new QuestdError(ClientCode.NOT_CONNECTED, `${MAX_PENDING_PINGS} pings already wait for an answer`));
    }
    this.#nonce += 1;
    const nonce = this.#nonce;
    return new Promise((resolve, reject) => {
      this.#pings.set(nonce, { resolve, reject });
      this.#send({ type: 'ping', nonce });
    });
  }

  /**
   * Tries now instead of at the end of the backoff (e.g. when a browser
   * comes back online); nothing while a socket is open or opening, or after close().
   */
  reconnect() {
    if (this.#state === 'closed' || this.#ws) return;
    this.#attempts = 0;
    clearTimeout(this.#timer);
    this.#open();
  }

  /** Closes for good: no reconnect; waiting chats and pings are rejected with CLOSED. */
  close() {
    this.#stop(new QuestdError(ClientCode.CLOSED, 'the connection was closed'));
  }

  // ------------------------------------------------------------ socket

  #open() {
    this.#timer = null;
    this.#reconnectAt = null;
    if (this.#state === 'closed' || this.#ws) return;
    this.#setState(this.#welcomed ? 'reconnecting' : 'connecting');
    let ws;
    try {
      ws = new this.#link.WebSocket(this.#link.url(this.lastSeq));
    } catch (e) {
      // A URL the WebSocket refuses never gets better.
      this.#stop(new QuestdError(ClientCode.NETWORK_ERROR, `cannot open the WebSocket: ${e && e.message}`, { cause: e, fatal: true }));
      return;
    }
    this.#ws = ws;
    this.#welcomeSeq = null;
    this.#lastFrameAt = Date.now();
    this.#pingSentAt = 0;
    ws.onmessage = (ev) => {
      if (this.#ws !== ws) return;
      this.#lastFrameAt = Date.now();
      if (typeof ev.data !== 'string') return; // the server sends text only
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (f && typeof f === 'object' && typeof f.type === 'string') this.#frame(ws, f);
    };
    ws.onclose = (ev) => {
      if (this.#ws !== ws) return;
      if (ev && ev.code === SESSION_CLOSED) {
        // The session answers 410 SESSION_CLOSED from now on: reconnecting cannot help.
        this.#stop(new QuestdError('SESSION_CLOSED', ev.reason || 'the session was closed by an operator', { fatal: true }));
        return;
      }
      if (ev && ev.code === SEAT_KICKED) {
        // The seat's token is refused from now on: reconnecting cannot help.
        const code = ev.reason === SEAT_LEFT_REASON ? ClientCode.LEFT : ClientCode.KICKED;
        this.#stop(new QuestdError(code, ev.reason || 'the host removed this seat from the session', { fatal: true }));
        return;
      }
      // 1012: the server asks for a reconnect (restart, hand-over): the first try is at once.
      this.#lose(ws, { immediate: Boolean(ev) && ev.code === SERVICE_RESTART });
    };
    // Browsers follow an error with close, but some WebSockets (Node 20's)
    // leave a refused handshake at CONNECTING with no close: the error alone ends it.
    ws.onerror = () => {
      if (this.#ws === ws) this.#lose(ws);
    };
  }

  // `ws` is gone (closed by the server, failed, or dropped by us): reconnect,
  // after a backoff unless `immediate` and this is the first try since a welcome.
  #lose(ws, { immediate = false } = {}) {
    this.#ws = null;
    const gotWelcome = this.#welcomeSeq !== null;
    this.#welcomeSeq = null;
    ws.onmessage = ws.onclose = ws.onerror = null;
    try {
      ws.close();
    } catch {
      // already closed or closing
    }
    this.#stopHeartbeat();
    this.#rejectPings(new QuestdError(ClientCode.DISCONNECTED, 'the socket dropped before the pong'));
    this.#rejectSays(new QuestdError(ClientCode.DISCONNECTED, 'the socket dropped before the party_chat'));
    this.#rejectDecisions(new QuestdError(ClientCode.DISCONNECTED, 'the socket dropped before the approval_resolved'));
    this.#chats.disconnected();
    if (this.#state === 'closed') return;
    this.#setState(this.#welcomed ? 'reconnecting' : 'connecting');
    const attempt = this.#attempts;
    this.#attempts += 1;
    const delay = immediate && attempt === 0 ? 0 : backoffDelay(attempt, this.#options.backoff);
    if (!gotWelcome && (attempt === 0 || this.#attempts % LINK_CHECK_EVERY === 0)) {
      this.#checkLinkThen(delay);
    } else {
      this.#schedule(delay);
    }
  }

  #schedule(delay) {
    clearTimeout(this.#timer);
    if (this.#state === 'closed') return;
    this.#reconnectAt = Date.now() + delay;
    this.#timer = setTimeout(() => this.#open(), delay);
  }

  // A browser cannot see why an upgrade was refused: ask over HTTP whether
  // the session and token work at all. A refusal stops for good; anything
  // else (no answer, overloaded) retries.
  #checkLinkThen(delay) {
    this.#link.checkLink().then(
      () => this.#schedule(delay),
      (e) => {
        if (this.#state === 'closed') return;
        if (e instanceof QuestdError && FATAL_STATUSES.has(e.status)) {
          e.fatal = true;
          this.#stop(e);
        } else {
          this.#schedule(delay);
        }
      },
    );
  }

  #stop(error) {
    if (this.#state === 'closed') return;
    this.#setState('closed');
    clearTimeout(this.#timer);
    this.#timer = null;
    this.#reconnectAt = null;
    const ws = this.#ws;
    if (ws) {
      this.#ws = null;
      ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close(1000);
      } catch {
        // already closed
      }
    }
    this.#stopHeartbeat();
    this.#rejectPings(error);
    this.#rejectSays(error);
    this.#rejectDecisions(error);
    this.#chats.closeAll(error);
    if (error.fatal) this.emit('error', error);
  }

  #send(frame) {
    const ws = this.#ws;
    if (ws) ws.send(JSON.stringify(frame));
  }

  #setState(state) {
    if (this.#state === state) return;
    const previous = this.#state;
    this.#state = state;
    this.emit('state', state, previous);
  }

  // Open, welcomed, and every backlog frame up to welcome.seq handed on.
  #caughtUp() {
    return this.#state === 'open' && this.#ws !== null && this.#welcomeSeq !== null && this.lastSeq >= this.#welcomeSeq;
  }

  // ------------------------------------------------------------ frames

  #frame(ws, f) {
    if (f.type === 'welcome') return this.#onWelcome(f);
    if (this.#welcomeSeq === null) return; // nothing comes before welcome
    if (typeof f.seq === 'number') return this.#onStory(ws, f);
    switch (f.type) {
      case 'ack':
        this.#chats.onAck(f);
        this.emit('ack', f);
        return;
      case 'error': {
        const say = this.#says.findIndex((w) => w.requestId === f.request_id);
        if (say >= 0) this.#says.splice(say, 1)[0].reject(QuestdError.fromErrorFrame(f));
        const decision = this.#decisions.get(f.request_id);
        if (decision) {
          this.#decisions.delete(f.request_id);
          decision.reject(QuestdError.fromErrorFrame(f, { approvalId: decision.approvalId }));
        }
        const retrying = this.#chats.onError(f);
        const approvalId = decision ? decision.approvalId : undefined;
        this.emit('error', QuestdError.fromErrorFrame(f, { retrying, approvalId }));
        return;
      }
      case 'pong': {
        const waiter = this.#pings.get(f.nonce);
        if (waiter) {
          this.#pings.delete(f.nonce);
          waiter.resolve(f);
        }
        this.#pingSentAt = 0;
        this.emit('pong', f);
        return;
      }
      default:
        if (!OWN_EVENTS.has(f.type)) this.emit(f.type, f);
    }
  }

  #onWelcome(f) {
    const before = this.lastSeq;
    // A reset: the client had a place in the story and the server cannot
    // replay from it (too far back, or ahead of what it holds).
    const reset = !f.resumed && before !== null;
    if (!f.resumed || before === null) this.lastSeq = f.seq;
    this.#welcomed = true;
    this.#welcomeSeq = f.seq;
    this.#attempts = 0;
    this.role = f.role;
    this.welcome = f;
    this.#setState('open');
    this.#startHeartbeat();
    this.#chats.welcomed(f, reset);
    this.#party.welcomed(f, reset);
    this.#approvals.welcomed(f);
    this.emit('welcome', f, { reset });
    this.emit('seats', this.#party.seats);
    this.emit('round', this.#party.roundState);
    this.emit('approvals', this.#approvals.list);
    if (reset) this.emit('reset', f, { lastSeq: before });
    this.#chats.flush();
  }

  #onStory(ws, f) {
    if (f.seq <= this.lastSeq) return; // a frame handed on already (a resume overlaps)
    if (f.seq !== this.lastSeq + 1) {
      // Frames were missed on this socket: ask again from the last one handed on.
      this.#gapStreak += 1;
      if (this.#gapStreak === 1) this.#attempts = 0;
      this.#lose(ws, { immediate: this.#gapStreak === 1 });
      return;
    }
    this.#gapStreak = 0;
    this.lastSeq = f.seq;
    const live = f.seq > this.#welcomeSeq;
    this.#chats.onStory(f);
    const changed = this.#party.onStory(f, live);
    if (this.#approvals.onStory(f)) changed.add('approvals');
    if (f.type === 'party_chat' && f.seat_id === this.#party.seatId && this.#says.length) {
      this.#says.shift().resolve(f);
    }
    if (f.type === 'approval_resolved') this.#resolveDecisions(f);
    this.emit('frame', f, { live });
    if (!OWN_EVENTS.has(f.type)) this.emit(f.type, f, { live });
    if (changed.has('seats')) this.emit('seats', this.#party.seats);
    if (changed.has('round')) this.emit('round', this.#party.roundState);
    if (changed.has('approvals')) this.emit('approvals', this.#approvals.list);
    if (f.seq === this.#welcomeSeq) this.#chats.flush(); // the backlog is in
  }

  // ------------------------------------------------------------ liveness

  #startHeartbeat() {
    this.#stopHeartbeat();
    const every = this.#options.heartbeatMs;
    if (!(every > 0)) return;
    this.#heartbeat = setInterval(() => this.#beat(), Math.max(50, Math.floor(every / 3)));
  }

  #stopHeartbeat() {
    clearInterval(this.#heartbeat);
    this.#heartbeat = null;
  }

  // A socket that stays silent after a ping is half-open: drop it.
  #beat() {
    const ws = this.#ws;
    if (!ws || this.#state !== 'open') return;
    const now = Date.now();
    const every = this.#options.heartbeatMs;
    if (this.#pingSentAt && this.#lastFrameAt < this.#pingSentAt) {
      if (now - this.#pingSentAt > every) this.#lose(ws);
      return;
    }
    if (now - this.#lastFrameAt > every) {
      this.#pingSentAt = now;
      this.#send({ type: 'ping', nonce: null });
    }
  }

  #rejectSays(error) {
    const waiting = this.#says;
    this.#says = [];
    for (const w of waiting) w.reject(error);
  }

  // Every decide() on this approval is answered by its resolution, whoever
  // decided (the host's decision may have come first).
  #resolveDecisions(f) {
    for (const [requestId, w] of this.#decisions) {
      if (w.approvalId !== f.approval_id) continue;
      this.#decisions.delete(requestId);
      w.resolve(f);
    }
  }

  #rejectDecisions(error) {
    const waiting = [...this.#decisions.values()];
    this.#decisions.clear();
    for (const w of waiting) w.reject(error);
  }

  #rejectPings(error) {
    const waiting = [...this.#pings.values()];
    this.#pings.clear();
    for (const w of waiting) w.reject(error);
  }
}
