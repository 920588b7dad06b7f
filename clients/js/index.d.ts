// Types of @questd/client: the wire frames of docs/protocol.md §2 (and
// the snapshot of §5), the HTTP answers the client returns, and the
// client's own API.

// ---------------------------------------------------------------- codes

/** Upper-case codes on the wire (docs/protocol.md §10). */
export type ErrorCode =
  | 'RATE_LIMITED'
  | 'FORBIDDEN'
  | 'INVALID_FRAME'
  | 'TEXT_TOO_LONG'
  | 'QUEUE_FULL'
  | 'MAX_ITERATIONS'
  | 'AI_TIMEOUT'
  | 'INVALID_AI_JSON'
  | 'UPSTREAM_ERROR'
  | 'INTERNAL_ERROR'
  | 'APPROVAL_DENIED'
  | 'NOT_FOUND'
  | 'CONFLICT'
  | 'INVALID_ARGS'
  | 'INVALID_ARGUMENTS'
  | 'SESSION_MISMATCH'
  | 'ZONE_NOT_FOUND'
  | 'TOOL_NOT_FOUND'
  | 'TOOL_NOT_ALLOWED'
  | 'TOOL_DISABLED'
  | 'PERMISSION_DENIED'
  | 'TIMEOUT'
  | 'EXECUTION_FAILED'
  | 'CONTEXT_INVALID'
  | 'BAD_REQUEST'
  | 'INVALID_CAMPAIGN'
  | 'INVALID_SAVE'
  | 'UNAUTHORIZED'
  | 'NOT_FOUND'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'OVERLOADED'
  | 'CONFLICT'
  | 'SESSION_CLOSED'
  | 'SESSION_FULL'
  | 'INVITE_NOT_FOUND'
  | 'TIMER_LIMIT';

/** Codes the client gives its own failures. */
export type ClientErrorCode =
  | 'CLOSED'
  | 'OUTBOX_FULL'
  | 'INVALID_REQUEST_ID'
  | 'DUPLICATE_REQUEST_ID'
  | 'OUTCOME_UNKNOWN'
  | 'NOT_CONNECTED'
  | 'DISCONNECTED'
  | 'REPLACED'
  | 'KICKED'
  | 'LEFT'
  | 'NETWORK_ERROR'
  | 'BAD_RESPONSE';

export declare const ClientCode: Readonly<{ [K in ClientErrorCode]: K }>;

/** Snake_case reasons of a refused or failed tool call. */
export type ToolReason =
  | 'tool_not_allowed'
  | 'invalid_args'
  | 'actor_state_restricted'
  | 'invalid_actor_state'
  | 'not_found'
  | 'permission_denied'
  | 'tool_disabled'
  | 'session_mismatch'
  | 'timeout'
  | 'execution_failed'
  | (string & {});

export type ToolStatus = 'ok' | 'rejected' | 'error';
export type Role = 'player' | 'spectator';
export type TurnLimit = 'max_iterations' | 'repeated_call' | 'deadline';

// ---------------------------------------------------------------- snapshot

export interface Area {
  area_id: string;
  name: string;
  description: string;
  reachable_area_ids: string[];
  x: number;
  y: number;
  z: number;
  tags: string[];
  /** A generated place: the theme its names share (the map's group label). */
  group?: string;
  /** A generated place: its name within its group. */
  short_name?: string;
}

export interface Item {
  slug: string;
  name: string;
  /** Only when not empty. */
  description?: string;
  quantity: number;
}

export interface Character {
  character_id: string;
  name: string;
  kind: 'pc' | 'npc' | (string & {});
  area_id: string;
  hp: number;
  max_hp: number;
  level: number;
  stats: Record<string, unknown>;
  inventory: Item[];
  state: 'active' | 'downed';
}

export interface Zone {
  zone_id: string;
  name: string;
  description: string;
  x: number;
  y: number;
  z: number;
  tags: string[];
  world_prompt: string;
}

export interface MovementLogEntry {
  movement_log_id: string;
  from_zone_id: string | null;
  to_zone_id: string;
  distance_miles: number;
  duration_min: number;
  turn: number;
}

export interface PlayerRuntime {
  current_zone_id: string | null;
  position: { x: number; y: number; z: number };
  move_speed_mph: number;
  movement_log: MovementLogEntry[];
}

/** `welcome.state` and `GET /api/v1/sessions/{id}` (docs/protocol.md §5). */
export interface Snapshot {
  session_id: string;
  campaign_id: string;
  title: string;
  /** Turns started in the session. */
  turn: number;
  active_actor_id: string;
  areas: Area[];
  characters: Character[];
  allowlist: string[];
  zones: Zone[];
  player: PlayerRuntime;
  /** Several nodes: the node running the session now, or null. */
  owner_node?: string | null;
  /** The session's seats (docs/protocol.md §8). */
  seats?: Seat[];
  turn_mode?: TurnMode;
  /** Tool calls waiting for a person's decision (docs/protocol.md §19). */
  pending_approvals?: PendingApproval[];
}

// ---------------------------------------------------------------- approvals (§19)

export type ApprovalDecision = 'approve' | 'deny';

/** A tool call waiting for a decision, as the snapshot, `conn.approvals` and the 'approvals' event show it. */
export interface PendingApproval {
  approval_id: string;
  turn_id: string;
  call_id: string;
  tool: string;
  /** Exactly the arguments the call runs with, once approved. */
  args: Record<string, unknown>;
  /** The speaker's seat: it (or the host) may decide. */
  seat_id: string | null;
  /** RFC 3339: when it is denied with `timeout` if nobody decides. */
  expires_at: string;
}

// ---------------------------------------------------------------- party (§8)

export type TurnMode = 'free' | 'rounds';
export type SeatRole = 'host' | 'player';
export type SeatState = 'active' | 'kicked' | 'left';

/** A seat, as the snapshot, `GET …/seats` and `conn.seats` show it. */
export interface Seat {
  seat_id: string;
  character_id: string;
  name: string;
  role: SeatRole;
  /** A connection of this seat is open now. */
  online: boolean;
  state: SeatState;
}

/** One seat's action in a round's `turn_started` (`text` null: the seat did not act). */
export interface RoundAction {
  seat_id: string;
  character_id: string;
  text: string | null;
  request_id: string | null;
}

/** `conn.round` and the 'round' event: the round actions go to now (null before any is seen) and who acted in it. */
export interface RoundState {
  round: number | null;
  acted: string[];
}

// ---------------------------------------------------------------- frames

/** Client → server. */
export interface ChatFrame {
  type: 'chat';
  text: string;
  request_id?: string;
}
export interface PingFrame {
  type: 'ping';
  nonce?: unknown;
}
/** Table talk: a `party_chat` for everyone, never the game master's. */
export interface SayFrame {
  type: 'say';
  text: string;
  request_id?: string;
}
/** A decision on a pending approval, from the speaker's seat or the host. */
export interface ApproveFrame {
  type: 'approve';
  approval_id: string;
  decision: ApprovalDecision;
  reason?: string;
  /** Repeated in the `error` frame of a refusal. */
  request_id?: string;
}
export type ClientFrame = ChatFrame | SayFrame | ApproveFrame | PingFrame;

/** Server → client, no seq: only to the connection concerned. */
export interface WelcomeFrame {
  type: 'welcome';
  session_id: string;
  role: Role;
  /** The last story frame before live ones; the state is as of it. */
  seq: number;
  /** False: the server could not replay from the last_seq asked for (or none was asked); `state` is the truth. */
  resumed: boolean;
  /** A player's seat and character (docs/protocol.md §8). */
  seat_id?: string;
  character_id?: string;
  state: Snapshot;
}
export interface AckFrame {
  type: 'ack';
  request_id: string | null;
  turn_id: string;
  /** The request_id was seen before; `turn_id` is the first chat's. */
  duplicate: boolean;
  /** Items ahead of this one (0 for a duplicate). */
  queued: number;
  /** Rounds mode: the round this chat is the seat's action for. */
  round?: number;
}
export interface ErrorFrame {
  type: 'error';
  request_id: string | null;
  error_code: ErrorCode | (string & {});
  message: string;
  /** With RATE_LIMITED and OVERLOADED. */
  retry_after_ms?: number;
}
export interface PongFrame {
  type: 'pong';
  nonce: unknown;
}
export type ControlFrame = WelcomeFrame | AckFrame | ErrorFrame | PongFrame;

/** Server → client story frames: every one has `seq`, the same on every connection. */
export interface TurnStartedFrame {
  type: 'turn_started';
  seq: number;
  turn_id: string;
  request_id: string | null;
  /** The speaker's character. */
  actor_id: string;
  text: string;
  /** The seat that spoke; null for a turn no seat asked for. */
  seat_id: string | null;
  /** A round's turn (rounds mode): the round it resolves and every active seat's action. */
  round?: number;
  actions?: RoundAction[];
}
export interface ToolCallFrame {
  type: 'tool_call';
  seq: number;
  turn_id: string;
  /** The model call that asked for it (1-based); 0 for a direct call. */
  iteration: number;
  call_id: string;
  tool: string;
  args: unknown;
}
export interface ToolResultFrame {
  type: 'tool_result';
  seq: number;
  turn_id: string;
  call_id: string;
  tool: string;
  status: ToolStatus;
  /** With status ok. */
  result?: unknown;
  /** With status rejected or error. */
  reason?: ToolReason;
  error_code?: ErrorCode | (string & {});
  message?: string;
  duration_ms: number;
}
export interface NarrativeDeltaFrame {
  type: 'narrative_delta';
  seq: number;
  turn_id: string;
  text: string;
}
export interface ToolEvent {
  call_id: string;
  tool: string;
  status: ToolStatus;
  reason?: ToolReason;
  error_code?: ErrorCode | (string & {});
  duration_ms: number;
}
export interface StatePatch {
  areas: Area[];
  characters: Character[];
  position: { actor_id: string; area_id: string } | null;
  zones: Zone[];
  zone_position: { x: number; y: number; z: number; zone_id: string | null } | null;
}
export interface TurnCompletedFrame {
  type: 'turn_completed';
  seq: number;
  turn_id: string;
  reply: string;
  dialog_type: string;
  iterations: number;
  tool_events: ToolEvent[];
  state_patch: StatePatch;
  usage: { prompt_tokens: number; completion_tokens: number };
  /** Only when a loop limit stopped the tool calls and `reply` is the closing narration. */
  limit?: TurnLimit;
}
export interface TurnFailedFrame {
  type: 'turn_failed';
  seq: number;
  turn_id: string;
  error_code: 'MAX_ITERATIONS' | 'AI_TIMEOUT' | 'INVALID_AI_JSON' | 'UPSTREAM_ERROR' | 'INTERNAL_ERROR' | (string & {});
  message: string;
  limit?: TurnLimit;
}
export interface PresenceFrame {
  type: 'presence';
  seq: number;
  players: number;
  spectators: number;
  /** Which seats have a connection now. */
  seats: { seat_id: string; online: boolean }[];
}
export interface SeatJoinedFrame {
  type: 'seat_joined';
  seq: number;
  seat_id: string;
  character_id: string;
  name: string;
}
export interface SeatChangedFrame {
  type: 'seat_changed';
  seq: number;
  seat_id: string;
  state: SeatState;
  role: SeatRole;
}
export interface ModeChangedFrame {
  type: 'mode_changed';
  seq: number;
  turn_mode: TurnMode;
  round_timeout_s: number;
}
/** An invite was made (never its code). */
export interface InviteCreatedFrame {
  type: 'invite_created';
  seq: number;
  invite_id: string;
  max_uses: number;
  expires_at: string;
}
/** A seat acted for the round (without the text, seen in the round's turn). */
export interface ActionSubmittedFrame {
  type: 'action_submitted';
  seq: number;
  round: number;
  seat_id: string;
}
/** Table talk. */
export interface PartyChatFrame {
  type: 'party_chat';
  seq: number;
  seat_id: string;
  name: string;
  text: string;
}
/** A tool call of a turn waits for a decision; nothing else of the turn comes until it is decided. */
export interface ApprovalRequestedFrame extends PendingApproval {
  type: 'approval_requested';
  seq: number;
}
/** The decision (or the timeout); the call's tool_result follows. */
export interface ApprovalResolvedFrame {
  type: 'approval_resolved';
  seq: number;
  turn_id: string;
  call_id: string;
  approval_id: string;
  decision: ApprovalDecision | 'timeout';
  /** null for a key or the timeout. */
  by_seat_id: string | null;
  reason: string | null;
}
export type StoryFrame =
  | ApprovalRequestedFrame
  | ApprovalResolvedFrame
  | TurnStartedFrame
  | ToolCallFrame
  | ToolResultFrame
  | NarrativeDeltaFrame
  | TurnCompletedFrame
  | TurnFailedFrame
  | PresenceFrame
  | SeatJoinedFrame
  | SeatChangedFrame
  | ModeChangedFrame
  | InviteCreatedFrame
  | ActionSubmittedFrame
  | PartyChatFrame;

/** Every frame the server sends, discriminated by `type`. */
export type ServerFrame = ControlFrame | StoryFrame;

// ---------------------------------------------------------------- HTTP

export interface Campaign {
  campaign_id: string;
  title: string;
  description: string;
  /** The Chinese title, when the campaign has one. */
  title_zh?: string;
  /** The Chinese description, when the campaign has one. */
  description_zh?: string;
}

export interface CreateSessionBody {
  campaign_id?: string;
  /** An inline campaign (docs/protocol.md §7); wins over campaign_id. */
  campaign?: Record<string, unknown>;
  visibility?: 'private' | 'public';
  /** Tools that wait for a person's approval (docs/protocol.md §19); wins over the campaign's. */
  approval?: { tools: string[]; timeout_s?: number; lethal_only?: boolean };
}

/** The `201` answer of `POST /api/v1/sessions`: the only one that carries the player token. */
export interface CreatedSession {
  session_id: string;
  player_token: string;
  spectator_token: string;
  visibility: 'private' | 'public';
  ws_url: string;
  player_url: string;
  spectator_url: string;
  play_url: string;
  watch_url: string;
}

/**
 * A save (`GET /api/v1/sessions/{id}/export`, docs/protocol.md §13): the
 * campaign, the state, every story frame from seq 1, no token. Import it
 * as it came; its inner shapes are the server's to check.
 */
export interface Save {
  /** The format version (1); a server refuses one newer than it reads. */
  questd_save: number;
  /** RFC 3339. */
  exported_at: string;
  source: { session_id: string; last_seq: number };
  campaign: Record<string, unknown>;
  state: Record<string, unknown>;
  /** Every story frame, seq 1 to `source.last_seq`. */
  story: StoryFrame[];
  [key: string]: unknown;
}

/** The `201` answer of `POST /api/v1/sessions/{id}/invites`. */
export interface CreatedInvite {
  invite_code: string;
  join_url: string;
  expires_at: string;
}

/** The `201` answer of `POST /api/v1/sessions/{id}/join`: the new seat's token. */
export interface JoinedSeat {
  session_id: string;
  seat_id: string;
  character_id: string;
  player_token: string;
  ws_url: string;
  player_url: string;
}

export interface SessionListing {
  session_id: string;
  title: string;
  players: number;
  spectators: number;
  turns: number;
  spectator_token: string;
  watch_url: string;
}

export interface Action {
  seq: number;
  turn_id: string;
  call_id: string;
  tool: string;
  args: Record<string, unknown>;
  status: 'ok';
  result: unknown;
  timestamp: string;
}

export interface ActionsPage {
  actions: Action[];
  next_after_seq: number | null;
}

export interface ToolCallAnswer {
  success: true;
  output: unknown;
  audit: {
    trace_id: string;
    tool_name: string;
    status: string;
    latency_ms: number;
    request_payload_hash: string;
    [key: string]: unknown;
  };
}

export interface ToolCallContext {
  /** `X-Site-ID`: the server requires one. */
  siteId?: string;
  /** `X-Session-ID`: run the tool in that session (as a direct call, seen by its connections). */
  sessionId?: string;
  /** `X-Trace-ID`; generated when absent. */
  traceId?: string;
  /** Body `request_id`: a retry with the same one answers the first result. */
  requestId?: string;
  /** `X-User-ID`. */
  userId?: string;
  /** `X-NPC-ID`. */
  npcId?: string;
  /** `X-User-Role`. */
  role?: string;
  /** Any other headers. */
  headers?: Record<string, string>;
}

// ---------------------------------------------------------------- errors

export declare class QuestdError extends Error {
  name: 'QuestdError';
  /** The server's code, or the client's own (ClientErrorCode). */
  error_code: ErrorCode | ClientErrorCode | (string & {});
  /** Same as `error_code`. */
  readonly code: string;
  /** HTTP status; 0 when the request got no answer; undefined for frames. */
  status?: number;
  /** From `retry_after_ms` or `Retry-After`. */
  retryAfterMs?: number;
  requestId?: string;
  /** The approval a refused `decide()` was about. */
  approvalId?: string;
  turnId?: string;
  /** The `error` or `turn_failed` frame it came from. */
  frame?: ErrorFrame | TurnFailedFrame;
  /** The HTTP answer's body. */
  body?: unknown;
  /** Why an inline campaign or a save was refused (`INVALID_CAMPAIGN`, `INVALID_SAVE`). */
  problems?: string[];
  /** The connection stopped for good because of it. */
  fatal: boolean;
  /** The client sends the chat again by itself. */
  retrying: boolean;
}

// ---------------------------------------------------------------- client

export interface QuestdOptions {
  /** `X-Internal-API-Key`: the internal key or a tenant key. */
  apiKey?: string;
  /** `X-Tenant-ID`. */
  tenantId?: string;
  fetch?: typeof fetch;
  WebSocket?: new (url: string) => WebSocket;
}

export interface Backoff {
  /** The first wait before a reconnect (default 500). */
  initialMs: number;
  /** The longest (default 8000). */
  maxMs: number;
}

export interface ConnectOptions {
  /** Resume from here on the first socket (0: the whole story the server holds). */
  lastSeq?: number;
  backoff?: Partial<Backoff>;
  /** The role expected, shown by `conn.role` until the welcome says. */
  role?: Role;
  /** Ping after this long without a frame; drop the socket after as long again without an answer (default 15000; 0: never). */
  heartbeatMs?: number;
  /** Chats that may wait at once (default 100). */
  maxOutbox?: number;
  /** Times a refused chat is sent again (RATE_LIMITED, OVERLOADED, QUEUE_FULL, INTERNAL_ERROR; default 20). */
  maxRetries?: number;
}

export declare const DEFAULTS: Readonly<{
  backoff: Readonly<Backoff>;
  heartbeatMs: number;
  maxOutbox: number;
  maxRetries: number;
}>;

export declare class Questd {
  constructor(baseUrl?: string, options?: QuestdOptions);
  readonly baseUrl: string;
  apiKey?: string;
  tenantId?: string;
  campaigns(): Promise<Campaign[]>;
  listSessions(): Promise<SessionListing[]>;
  createSession(body: CreateSessionBody): Promise<CreatedSession>;
  getSession(sessionId: string, token?: string): Promise<Snapshot>;
  /** The player token, or the tenant's key (`apiKey`) when `token` is left out. */
  exportSession(sessionId: string, token?: string): Promise<Save>;
  /** A new session from a save: resolves like `createSession`. */
  importSession(save: Save | Record<string, unknown>, options?: { visibility?: 'private' | 'public' }): Promise<CreatedSession>;
  actions(sessionId: string, token?: string, page?: { afterSeq?: number; limit?: number }): Promise<ActionsPage>;
  callTool(toolName: string, input: Record<string, unknown>, context?: ToolCallContext): Promise<ToolCallAnswer>;
  /** The host's token, or the tenant's key (`apiKey`) when `token` is left out. */
  invite(sessionId: string, token?: string, options?: { maxUses?: number; expiresInS?: number }): Promise<CreatedInvite>;
  join(sessionId: string, inviteCode: string, name: string): Promise<JoinedSeat>;
  seats(sessionId: string, token?: string): Promise<{ seats: Seat[] }>;
  kick(sessionId: string, token: string | undefined, seatId: string): Promise<unknown>;
  /** The seat's own token, or the tenant's key (`apiKey`) when `token` is left out. */
  leave(sessionId: string, token: string | undefined, seatId: string): Promise<unknown>;
  handOverHost(sessionId: string, token: string | undefined, seatId: string): Promise<unknown>;
  setMode(sessionId: string, token: string | undefined, turnMode: TurnMode, options?: { roundTimeoutS?: number }): Promise<unknown>;
  connect(sessionId: string, token: string, options?: ConnectOptions): Connection;
  wsUrl(sessionId: string, token: string, lastSeq?: number | null): string;
}

export type ConnectionState = 'connecting' | 'open' | 'reconnecting' | 'closed';

/** A chat not yet settled, as `conn.pending` and the 'outbox' event show it. */
export interface PendingChat {
  requestId: string;
  text: string;
  /** waiting: not on the wire; sent: no answer yet; accepted: acked; retry: sent again at retryAt; started: its turn runs. */
  state: 'waiting' | 'sent' | 'accepted' | 'retry' | 'started';
  turnId: string | null;
  queued: number;
  /** Epoch ms of the next send, in state retry. */
  retryAt: number | null;
  /** Rounds mode: the round this chat is the seat's action for, once acked. */
  round: number | null;
}

/** `live` is false for a frame whose effect is already in the latest welcome's state (a resume backlog). */
export interface FrameInfo {
  live: boolean;
}

type StoryEvents = { [F in StoryFrame as F['type']]: (frame: F, info: FrameInfo) => void };

export interface ConnectionEvents extends StoryEvents {
  /** Every story frame, once, in seq order. */
  frame: (frame: StoryFrame, info: FrameInfo) => void;
  /** Every welcome; `reset` when the server could not resume (see 'reset'). */
  welcome: (frame: WelcomeFrame, info: { reset: boolean }) => void;
  /** The server could not replay from `lastSeq`: frames were lost, `frame.state` is the truth, lastSeq jumped to `frame.seq`. */
  reset: (frame: WelcomeFrame, info: { lastSeq: number }) => void;
  state: (state: ConnectionState, previous: ConnectionState) => void;
  ack: (frame: AckFrame) => void;
  /** Every `error` frame (as a QuestdError, `retrying` when the client sends the chat again), and the error that stops the connection (`fatal`). */
  error: (error: QuestdError) => void;
  pong: (frame: PongFrame) => void;
  /** The chats not yet settled changed. */
  outbox: (chats: PendingChat[]) => void;
  /** The seats changed (after each welcome too). */
  seats: (seats: Seat[]) => void;
  /** The round state changed (after each welcome too). */
  round: (round: RoundState) => void;
  /** The pending approvals changed (after each welcome too). */
  approvals: (approvals: PendingApproval[]) => void;
}

export declare class Connection {
  private constructor();
  readonly sessionId: string;
  readonly state: ConnectionState;
  /** The seq of the last story frame handed on (or of the welcome that replaced them). */
  readonly lastSeq: number | null;
  readonly role: Role | null;
  /** The last welcome. */
  readonly welcome: WelcomeFrame | null;
  readonly pending: PendingChat[];
  /** This player's seat and character (from the welcome); null for a spectator. */
  readonly seatId: string | null;
  readonly characterId: string | null;
  /** The session's seats, kept current from the frames. */
  readonly seats: Seat[];
  readonly turnMode: TurnMode;
  readonly round: RoundState;
  /** The tool calls waiting for a person's decision, oldest first. */
  readonly approvals: PendingApproval[];
  /**
   * Decides on a pending approval; resolves with its approval_resolved (whoever decided first);
   * rejects with the error frame that answers it (NOT_FOUND, CONFLICT, FORBIDDEN, BAD_REQUEST),
   * NOT_CONNECTED or DISCONNECTED.
   */
  decide(approvalId: string, decision: ApprovalDecision, reason?: string): Promise<ApprovalResolvedFrame>;
  /** Resolves with the chat's turn_completed (in rounds mode: the round's turn); rejects with a QuestdError. */
  chat(text: string, options?: { requestId?: string }): Promise<TurnCompletedFrame>;
  /** Table talk; resolves with this seat's party_chat. */
  say(text: string, options?: { requestId?: string }): Promise<PartyChatFrame>;
  ping(): Promise<PongFrame>;
  /** When the next attempt to connect is due (epoch ms), while one waits; else null. */
  readonly reconnectAt: number | null;
  /** Tries now instead of at the end of the backoff; nothing while a socket is open or opening. */
  reconnect(): void;
  /** Closes for good; waiting chats are rejected with CLOSED. */
  close(): void;
  /** Adds a listener; returns the function that removes it. */
  on<E extends keyof ConnectionEvents>(event: E, listener: ConnectionEvents[E]): () => void;
  once<E extends keyof ConnectionEvents>(event: E, listener: ConnectionEvents[E]): () => void;
  off<E extends keyof ConnectionEvents>(event: E, listener: ConnectionEvents[E]): void;
}
