//! [`AppState`]: what every handler shares. Its parts are owned by the
//! modules below the handlers (keys, admission, rate limits, peers, MCP
//! sessions, WebSocket limits), so no handler's module is imported here.

use std::sync::Arc;

use actix::Addr;

use super::admission::Admission;
use super::auth::Keys;
use super::limits::ServiceState;
use super::mcp::sessions::McpSessions;
use super::peers::Cluster;
use super::socket::WsLimits;
use crate::game::BuiltinStarts;
use crate::llm::Provider;
use crate::metrics::Metrics;
use crate::session::SessionHub;
use crate::session::tail::Tails;
use crate::storage::Store;
use crate::tools::Registry;

/// Shared by every handler.
pub struct AppState {
    pub hub: Addr<SessionHub>,
    /// This node's tails of sessions other nodes run, for its spectators.
    pub tails: Addr<Tails>,
    pub store: Store,
    /// This node among the nodes of its database.
    pub cluster: Cluster,
    pub registry: Arc<Registry>,
    /// The sites of every tenant this node served (docs/protocol.md §1.12.1).
    pub sites: Arc<crate::sites::Sites>,
    /// The built-in campaigns' start states, shared by their sessions.
    pub builtin_starts: BuiltinStarts,
    /// The model, for the stateless chat API (sessions hold their own).
    pub provider: Arc<dyn Provider>,
    /// The model's token budgets (contract §12), shared with the sessions.
    pub budgets: Arc<crate::budget::Budgets>,
    /// Rate limits of calls from other services.
    pub service: ServiceState,
    /// The internal key and the tenant keys.
    pub keys: Keys,
    /// Client addresses, connection caps and per-address rates.
    pub admission: Admission,
    /// When set, `/metrics` needs it as a bearer token.
    pub metrics_key: Option<crate::config::Secret>,
    pub metrics: Arc<Metrics>,
    /// The MCP sessions of the 2025 protocol era, shared by every worker.
    pub mcp_sessions: McpSessions,
    /// History budget of one model call, in estimated tokens (0: no limit).
    pub history_tokens: usize,
    /// Tool rounds a stateless `/api/chat` exchange may take
    /// (`QUESTD_MAX_ITERATIONS`, as a session's turn).
    pub max_iterations: u32,
    /// Longest `POST /api/v1/chat` waits for its turn to end before it
    /// answers `408` ([`chat_wait`]).
    pub chat_wait: std::time::Duration,
    /// What bounds one WebSocket connection: what may wait for it, and
    /// how fast it may send.
    pub ws: WsLimits,
    /// Seats one session may hold at most (`QUESTD_MAX_PLAYERS`).
    pub max_players: u32,
    /// The shortest `expires_in_s` an invite may ask for.
    pub min_invite_expires_s: u32,
    /// The largest save an import takes (`QUESTD_MAX_SAVE_MB`), in bytes.
    pub max_save_bytes: usize,
    /// The OpenAPI document, built at its first request: it depends only on
    /// the tools, fixed when the server starts.
    pub openapi: std::sync::OnceLock<bytes::Bytes>,
}

/// How long `POST /api/v1/chat` waits for its turn to end: a started turn's
/// longest (`QUESTD_TURN_DEADLINE_SECS`) and 10 s, so a turn that started
/// at once is always answered with its end. A turn queued behind others
/// (or behind a turn waiting for a person's approval) may take longer:
/// the caller is then answered `408` and asks again with its `request_id`.
pub fn chat_wait(turn_deadline: std::time::Duration) -> std::time::Duration {
    turn_deadline + std::time::Duration::from_secs(10)
}
