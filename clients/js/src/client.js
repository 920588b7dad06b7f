// Questd: the HTTP side of a questd server (campaigns, sessions, snapshots,
// the actions log, the tool API) and the factory of WebSocket connections.
// Routes and bodies: docs/protocol.md §1.

import { Connection } from './connection.js';
import { ClientCode, QuestdError } from './errors.js';
import { randomId } from './util.js';

export class Questd {
  #origin; // scheme://host[:port]
  #prefix; // the base URL's path without a trailing slash ('' at the root)
  #fetch;
  #WebSocket;

  /**
   * @param {string} [baseUrl] e.g. `http://127.0.0.1:8080`; in a browser,
   *   the page's own origin when left out
   * @param {object} [options]
   * @param {string} [options.apiKey] sent as `X-Internal-API-Key` (service calls, keyed session creation)
   * @param {string} [options.tenantId] sent as `X-Tenant-ID`
   * @param {typeof fetch} [options.fetch]
   * @param {typeof WebSocket} [options.WebSocket]
   */
  constructor(baseUrl, options = {}) {
    const origin = globalThis.location && globalThis.location.origin;
    const base = new URL(baseUrl ?? origin);
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw new TypeError(`the base URL is http:// or https://, not ${base.protocol}`);
    }
    // Paths are joined to the base path, so a server behind a prefix works.
    this.#origin = base.origin;
    this.#prefix = base.pathname.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.tenantId = options.tenantId;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== 'function') throw new TypeError('no fetch: pass options.fetch');
    // Called as a plain function: a browser's fetch refuses another `this`.
    this.#fetch = (url, init) => f(url, init);
    this.#WebSocket = options.WebSocket ?? globalThis.WebSocket;
  }

  /** The server's base URL, without a trailing slash. */
  get baseUrl() {
    return this.#origin + this.#prefix;
  }

  /** `GET /api/v1/campaigns`: the built-in campaigns. */
  campaigns() {
    return this.#request('GET', '/api/v1/campaigns');
  }

  /**
   * `GET /api/v1/sessions`: the live public sessions of the tenant. Without
   * `apiKey` only tenant `default`'s are listed (another `tenantId` is 401).
   */
  listSessions() {
    return this.#request('GET', '/api/v1/sessions', { key: true, tenant: true });
  }

  /**
   * `POST /api/v1/sessions`: `{campaign_id}` or `{campaign}`, optional
   * `visibility`. Resolves with the create answer (the only one that
   * carries the player token).
   */
  createSession(body) {
    return this.#request('POST', '/api/v1/sessions', { body, key: true, tenant: true });
  }

  /** `GET /api/v1/sessions/{id}`: the snapshot, with a player or spectator token (or the key when no token is given). */
  getSession(sessionId, token) {
    return this.#request('GET', `/api/v1/sessions/${encodeURIComponent(sessionId)}`, {
      bearer: token,
      key: token === undefined,
    });
  }

  /**
   * `GET /api/v1/sessions/{id}/export`: the session as a save (campaign,
   * state, every story frame, format version; no token), parsed. The
   * session's player token, or the tenant's key (`apiKey`) when `token` is
   * left out; a spectator token is refused with `FORBIDDEN`.
   */
  exportSession(sessionId, token) {
    return this.#request('GET', `${sessionPath(sessionId)}/export`, { bearer: token, key: token === undefined });
  }

  /**
   * `POST /api/v1/sessions/import`: a save (as `exportSession` gives it) as
   * a new session with new tokens. Resolves with the create answer, as
   * `createSession` does; a save that fails the server's checks is refused
   * with `INVALID_SAVE` and its `problems`.
   * @param {object} save
   * @param {{visibility?: 'private'|'public'}} [options]
   */
  importSession(save, options = {}) {
    const query = new URLSearchParams();
    if (options.visibility !== undefined) query.set('visibility', options.visibility);
    return this.#request('POST', '/api/v1/sessions/import', { body: save, key: true, tenant: true, query });
  }

  /**
   * `GET /api/v1/sessions/{id}/actions`: one page of the applied-actions log.
   * @param {{afterSeq?: number, limit?: number}} [page]
   */
  actions(sessionId, token, page = {}) {
    const query = new URLSearchParams();
    if (page.afterSeq !== undefined) query.set('after_seq', String(page.afterSeq));
    if (page.limit !== undefined) query.set('limit', String(page.limit));
    return this.#request('GET', `/api/v1/sessions/${encodeURIComponent(sessionId)}/actions`, {
      bearer: token,
      key: token === undefined,
      query,
    });
  }

  // ---------------------------------------------------------- party (§8)
  // The host's powers take the host's player token, or the tenant's key
  // (`apiKey`) when `token` is left out.

  /**
   * `POST /api/v1/sessions/{id}/invites`: a link for others to join with.
   * Resolves with `{invite_code, join_url, expires_at}`.
   * @param {{maxUses?: number, expiresInS?: number}} [options]
   */
  invite(sessionId, token, options = {}) {
    const body = {};
    if (options.maxUses !== undefined) body.max_uses = options.maxUses;
    if (options.expiresInS !== undefined) body.expires_in_s = options.expiresInS;
    return this.#request('POST', `${sessionPath(sessionId)}/invites`, { body, bearer: token, key: token === undefined });
  }

  /**
   * `POST /api/v1/sessions/{id}/join`: takes a seat with an invite code (the
   * only credential it needs). Resolves with `{session_id, seat_id,
   * character_id, player_token, ws_url, player_url}`; `connect(session_id,
   * player_token)` then plays as that seat.
   */
  join(sessionId, inviteCode, name) {
    return this.#request('POST', `${sessionPath(sessionId)}/join`, { body: { invite_code: inviteCode, name } });
  }

  /** `GET /api/v1/sessions/{id}/seats`: `{seats: [...]}`, with any token of the session. */
  seats(sessionId, token) {
    return this.#request('GET', `${sessionPath(sessionId)}/seats`, { bearer: token, key: token === undefined });
  }

  /** `POST /api/v1/sessions/{id}/seats/{seat}/{power}` with an empty body: a kick, a leave or a host handover. */
  #seatPower(sessionId, token, seatId, power) {
    return this.#request('POST', `${sessionPath(sessionId)}/seats/${encodeURIComponent(seatId)}/${power}`, {
      body: {},
      bearer: token,
      key: token === undefined,
      emptyOk: true,
    });
  }

  /** `POST /api/v1/sessions/{id}/seats/{seat}/kick`: the seat's connections close with 4001, its token is refused from then on. */
  kick(sessionId, token, seatId) {
    return this.#seatPower(sessionId, token, seatId, 'kick');
  }

  /** `POST /api/v1/sessions/{id}/seats/{seat}/leave`: the seat leaves, with its own token (or `apiKey`); its connections close with 4001. */
  leave(sessionId, token, seatId) {
    return this.#seatPower(sessionId, token, seatId, 'leave');
  }

  /** `POST /api/v1/sessions/{id}/seats/{seat}/host`: that seat becomes the host, the old host a player. */
  handOverHost(sessionId, token, seatId) {
    return this.#seatPower(sessionId, token, seatId, 'host');
  }

  /**
   * `POST /api/v1/sessions/{id}/mode`: `free` (chats run one by one as they
   * come) or `rounds` (each seat's chat is its action for the round).
   * @param {'free'|'rounds'} turnMode
   * @param {{roundTimeoutS?: number}} [options]
   */
  setMode(sessionId, token, turnMode, options = {}) {
    const body = { turn_mode: turnMode };
    if (options.roundTimeoutS !== undefined) body.round_timeout_s = options.roundTimeoutS;
    return this.#request('POST', `${sessionPath(sessionId)}/mode`, { body, bearer: token, key: token === undefined, emptyOk: true });
  }

  /**
   * `POST /api/v1/tools/call` with the service key. Resolves with
   * `{success: true, output, audit}`; a refused or failed call throws a
   * QuestdError whose `error_code` is the answer's `error_type` and whose
   * `body` is the whole answer (audit included).
   * @param {string} toolName
   * @param {object} input
   * @param {object} [context] siteId (`X-Site-ID`, which the server requires),
   *   sessionId, traceId (generated when absent), requestId (makes a retry answer
   *   the first result), userId, npcId, role, headers
   */
  async callTool(toolName, input, context = {}) {
    /** @type {Record<string, string>} */
    const headers = {
      'X-Trace-ID': context.traceId ?? randomId('tr-'),
      // The tool API always names a tenant; the server's own default tenant is "default".
      'X-Tenant-ID': this.tenantId ?? 'default',
    };
    if (context.siteId !== undefined) headers['X-Site-ID'] = context.siteId;
    if (context.sessionId !== undefined) headers['X-Session-ID'] = context.sessionId;
    if (context.userId !== undefined) headers['X-User-ID'] = context.userId;
    if (context.npcId !== undefined) headers['X-NPC-ID'] = context.npcId;
    if (context.role !== undefined) headers['X-User-Role'] = context.role;
    Object.assign(headers, context.headers);
    const body = { tool_name: toolName, input: input ?? {} };
    if (context.requestId !== undefined) body.request_id = context.requestId;
    const answer = await this.#request('POST', '/api/v1/tools/call', { body, key: true, headers });
    if (!answer || answer.success !== true) {
      throw new QuestdError(ClientCode.BAD_RESPONSE, 'the tool call answered without success', { body: answer });
    }
    return answer;
  }

  /**
   * Opens a WebSocket connection to a session (see Connection).
   * @param {string} sessionId
   * @param {string} token the player or spectator token
   * @param {object} [options] lastSeq, backoff {initialMs, maxMs}, role, heartbeatMs, maxOutbox, maxRetries
   */
  connect(sessionId, token, options = {}) {
    if (typeof this.#WebSocket !== 'function') {
      throw new TypeError('no WebSocket: pass options.WebSocket to Questd, or use Node 22+ (Node 20: --experimental-websocket)');
    }
    return new Connection(
      {
        url: (lastSeq) => this.wsUrl(sessionId, token, lastSeq),
        WebSocket: this.#WebSocket,
        checkLink: () => this.getSession(sessionId, token),
      },
      sessionId,
      options,
    );
  }

  /** `ws(s)://…/ws/sessions/{id}?token=…[&last_seq=N]` on this server. */
  wsUrl(sessionId, token, lastSeq) {
    const url = new URL(`${this.#prefix}/ws/sessions/${encodeURIComponent(sessionId)}`, this.#origin);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.searchParams.set('token', token);
    if (lastSeq !== null && lastSeq !== undefined) url.searchParams.set('last_seq', String(lastSeq));
    return url.href;
  }

  /**
   * @param {string} method
   * @param {string} path
   * @param {{body?: unknown, bearer?: string, key?: boolean, tenant?: boolean,
   *   headers?: Record<string, string>, query?: URLSearchParams, emptyOk?: boolean}} [options]
   */
  async #request(method, path, { body, bearer, key, tenant, headers = {}, query, emptyOk = false } = {}) {
    const url = new URL(this.#prefix + path, this.#origin);
    if (query) url.search = query.toString();
    /** @type {Record<string, string>} */
    const h = { Accept: 'application/json', ...headers };
    if (body !== undefined) h['Content-Type'] = 'application/json';
    if (bearer !== undefined) h.Authorization = `Bearer ${bearer}`;
    if (key && this.apiKey !== undefined) h['X-Internal-API-Key'] = this.apiKey;
    if ((tenant || key) && this.tenantId !== undefined && h['X-Tenant-ID'] === undefined) {
      h['X-Tenant-ID'] = this.tenantId;
    }
    let res;
    try {
      res = await this.#fetch(url.href, {
        method,
        headers: h,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (cause) {
      throw new QuestdError(ClientCode.NETWORK_ERROR, `${method} ${path} did not reach the server: ${cause && cause.message}`, {
        status: 0,
        cause,
      });
    }
    const text = await res.text();
    let parsed;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (res.ok) {
      // The host's powers may answer with an empty body.
      if (parsed === undefined && emptyOk && text === '') return {};
      if (parsed === undefined) {
        throw new QuestdError(ClientCode.BAD_RESPONSE, `${method} ${path} answered ${res.status} without JSON`, {
          status: res.status,
        });
      }
      return parsed;
    }
    throw httpError(method, path, res, parsed, text);
  }
}

function sessionPath(sessionId) {
  return `/api/v1/sessions/${encodeURIComponent(sessionId)}`;
}

// The server's error bodies are {error_code, message}; the tool API's are
// {success:false, error, error_type, audit}.
function httpError(method, path, res, parsed, text) {
  const b = parsed && typeof parsed === 'object' ? parsed : {};
  const code = b.error_code ?? b.error_type ?? `HTTP_${res.status}`;
  const message = b.message ?? b.error ?? (text.slice(0, 200) || `${method} ${path} answered ${res.status}`);
  return new QuestdError(String(code), String(message), {
    status: res.status,
    retryAfterMs: retryAfterMs(res.headers.get('retry-after')),
    body: parsed,
  });
}

// Retry-After is seconds or an HTTP date.
function retryAfterMs(value) {
  if (value === null || value === undefined || value === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
