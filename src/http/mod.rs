//! HTTP and WebSocket routes. Each area has a `configure` function; handlers
//! only translate between the wire and the session hub.

pub mod admission;
mod api;
pub mod auth;
mod chat;
pub mod guard;
pub mod mcp;
pub mod service;
mod stateless;
mod static_files;
mod tools_api;
mod ws;

use std::sync::Arc;

use actix::Addr;
use actix_web::{HttpRequest, web};
use futures_util::StreamExt;

use crate::error::{ApiError, ErrorCode};
use crate::game::BuiltinStarts;
use crate::llm::Provider;
use crate::metrics::Metrics;
use crate::session::{HubError, SessionHub};
use crate::storage::{STORAGE_BEHIND, SessionMeta, StorageError, Store};
use crate::tools::Registry;

/// Largest HTTP request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The tenant used when a request names none.
pub const DEFAULT_TENANT: &str = "default";

/// Shared by every handler.
pub struct AppState {
    pub hub: Addr<SessionHub>,
    pub store: Store,
    pub registry: Arc<Registry>,
    /// The built-in campaigns' start states, shared by their sessions.
    pub builtin_starts: BuiltinStarts,
    /// The model, for the stateless chat API (sessions hold their own).
    pub provider: Arc<dyn Provider>,
    /// Rate limits of calls from other services.
    pub service: service::ServiceState,
    /// The internal key and the tenant keys.
    pub keys: auth::Keys,
    /// Client addresses, connection caps and per-address rates.
    pub admission: admission::Admission,
    /// When set, `/metrics` needs it as a bearer token.
    pub metrics_key: Option<crate::config::Secret>,
    pub metrics: Arc<Metrics>,
    /// The MCP sessions of the 2025 protocol era, shared by every worker.
    pub mcp_sessions: mcp::McpSessions,
    /// History budget of one model call, in estimated tokens (0: no limit).
    pub history_tokens: usize,
    /// Frames that may wait for one WebSocket connection before it is
    /// dropped as too slow.
    pub ws_queue: usize,
}

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    api::configure(cfg);
    chat::configure(cfg);
    stateless::configure(cfg);
    tools_api::configure(cfg);
    ws::configure(cfg);
    mcp::configure(cfg);
    static_files::configure(cfg);
}

/// The role a token gives in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    Player,
    Spectator,
}

/// Compares secrets in time that does not depend on where they differ.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Which role `token` opens in the session, if any.
pub fn token_role(meta: &SessionMeta, token: &str) -> Option<TokenRole> {
    if same_secret(token, &meta.player_token) {
        Some(TokenRole::Player)
    } else if same_secret(token, &meta.spectator_token) {
        Some(TokenRole::Spectator)
    } else {
        None
    }
}

/// The tenant named by `X-Tenant-ID`, if the request names one.
pub fn tenant_header(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get("X-Tenant-ID")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The answer for an unknown session (and for another tenant's, which is
/// answered exactly the same); the id is cut to 64 characters.
pub fn no_session(id: &str) -> String {
    let shown: String = id.chars().take(64).collect();
    format!("no session {shown}")
}

/// A session of another tenant is answered exactly like an unknown one.
pub fn check_tenant(req: &HttpRequest, meta: &SessionMeta) -> Result<(), ApiError> {
    match tenant_header(req) {
        Some(t) if t != meta.tenant_id => Err(ApiError::not_found(no_session(&meta.session_id))),
        _ => Ok(()),
    }
}

/// The refusal `503 OVERLOADED` with `Retry-After: 1`.
pub fn overloaded(message: impl Into<String>) -> ApiError {
    let mut e = ApiError::new(ErrorCode::Overloaded, message);
    e.retry_after_s = Some(1);
    e
}

/// What a session refused (a chat or a direct call) as an HTTP error, with
/// `Retry-After` when waiting helps.
pub fn session_refused(r: crate::session::ChatRefused) -> ApiError {
    let mut e = ApiError::new(r.code, r.message);
    e.retry_after_s = match (r.retry_after_ms, r.code) {
        (Some(ms), _) => Some(ms.div_ceil(1000).max(1)),
        (None, ErrorCode::QueueFull | ErrorCode::Overloaded) => Some(1),
        _ => None,
    };
    e
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`]; an empty body is `{}`.
pub async fn json_body_or_empty(payload: web::Payload) -> Result<serde_json::Value, ApiError> {
    let body = body_bytes(payload).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::json!({}));
    }
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("body is not valid JSON: {e}")))
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`].
pub async fn json_body(payload: web::Payload) -> Result<serde_json::Value, ApiError> {
    let body = body_bytes(payload).await?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("body is not valid JSON: {e}")))
}

/// Reads a body of at most [`MAX_BODY_BYTES`] (413 past that).
async fn body_bytes(mut payload: web::Payload) -> Result<web::BytesMut, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_request(format!("could not read the body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("body is larger than {MAX_BODY_BYTES} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A session the hub could not give, as HTTP: `503` when the node is full
/// or its storage is behind, a generic `500` otherwise (the cause is
/// logged, never sent).
pub fn hub_failed(e: HubError) -> ApiError {
    match e {
        HubError::Full(_) => overloaded(e.to_string()),
        HubError::Storage(StorageError::Overloaded) => overloaded(STORAGE_BEHIND),
        HubError::Storage(e) => ApiError::internal(&e),
    }
}

/// Any path no route matches: a JSON 404 like every other error.
pub async fn no_route(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.path()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "a"));
    }
}
