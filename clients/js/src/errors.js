// QuestdError: every failure the client reports, from the server (an HTTP
// error body, an `error` frame, a `turn_failed` frame) or from the client
// itself (closed, outbox full, a chat whose outcome the frames lost).

/**
 * Codes the client gives its own failures. The server's codes
 * (docs/protocol.md §10) are passed through as they are.
 */
export const ClientCode = Object.freeze({
  /** `close()` was called, or the connection stopped for good. */
  CLOSED: 'CLOSED',
  /** The outbox already holds `maxOutbox` chats. */
  OUTBOX_FULL: 'OUTBOX_FULL',
  /** A `requestId` is not 1 to 128 characters without control characters. */
  INVALID_REQUEST_ID: 'INVALID_REQUEST_ID',
  /** A chat with this `requestId` is already waiting on this connection. */
  DUPLICATE_REQUEST_ID: 'DUPLICATE_REQUEST_ID',
  /** The chat's turn ended among frames this connection did not get: it ran, its outcome is not known. */
  OUTCOME_UNKNOWN: 'OUTCOME_UNKNOWN',
  /** Rounds mode: a later chat of the same seat in the same round replaced this one. */
  REPLACED: 'REPLACED',
  /** The host removed this seat from the session (close code 4001): its token no longer works. */
  KICKED: 'KICKED',
  /** This seat left the session (`leave()`; close code 4001): its token no longer works. */
  LEFT: 'LEFT',
  /** Not connected (a `ping()` or `say()` while the socket is down). */
  NOT_CONNECTED: 'NOT_CONNECTED',
  /** The socket dropped before the answer came (a `ping()`). */
  DISCONNECTED: 'DISCONNECTED',
  /** The HTTP request did not reach the server (fetch failed). */
  NETWORK_ERROR: 'NETWORK_ERROR',
  /** The server answered with something that is not the expected JSON. */
  BAD_RESPONSE: 'BAD_RESPONSE',
});

export class QuestdError extends Error {
  /**
   * @param {string} code the server's `error_code` or a {@link ClientCode}
   * @param {string} message
   * @param {object} [details] status, retryAfterMs, requestId, approvalId, turnId, frame, body, fatal, retrying, cause
   */
  constructor(code, message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'QuestdError';
    this.error_code = code;
    /** HTTP status, or 0 when the request never got an answer; undefined for frames. */
    this.status = details.status;
    this.retryAfterMs = details.retryAfterMs;
    this.requestId = details.requestId;
    /** The approval a refused `decide()` was about. */
    this.approvalId = details.approvalId;
    this.turnId = details.turnId;
    /** The `error` or `turn_failed` frame this error came from. */
    this.frame = details.frame;
    /** The HTTP answer's parsed body. */
    this.body = details.body;
    /** Why an inline campaign or a save was refused (`INVALID_CAMPAIGN`, `INVALID_SAVE`): the body's `problems`. */
    this.problems = problemsOf(details.body);
    /** The connection has stopped for good because of this error. */
    this.fatal = Boolean(details.fatal);
    /** The client sends the chat again by itself (RATE_LIMITED and friends). */
    this.retrying = Boolean(details.retrying);
  }

  /** The code as a property named like the rest of JavaScript. */
  get code() {
    return this.error_code;
  }

  /** From an `error` frame. */
  static fromErrorFrame(f, extra = {}) {
    return new QuestdError(String(f.error_code), String(f.message ?? f.error_code), {
      requestId: f.request_id ?? undefined,
      retryAfterMs: typeof f.retry_after_ms === 'number' ? f.retry_after_ms : undefined,
      frame: f,
      ...extra,
    });
  }

  /** From a `turn_failed` frame. */
  static fromTurnFailed(f, requestId) {
    return new QuestdError(String(f.error_code), String(f.message ?? f.error_code), {
      turnId: f.turn_id,
      requestId,
      frame: f,
    });
  }
}

function problemsOf(body) {
  const list = body && typeof body === 'object' ? body.problems : undefined;
  return Array.isArray(list) ? list.map(String) : undefined;
}
