//! HTTP and WebSocket routes. Each area has a `configure` function; handlers
//! only translate between the wire and the session hub.

pub mod accept;
mod admin;
pub mod admission;
mod api;
pub mod auth;
mod chat;
pub mod cluster;
mod compress;
mod frame_rate;
pub mod guard;
mod idempotency;
pub mod mcp;
pub mod openapi;
mod owner_watch;
mod relay;
pub mod service;
pub mod sites;
mod stateless;
mod static_files;
mod tools_api;
pub mod ws;

use std::sync::Arc;

use actix::Addr;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use futures_util::StreamExt;

use crate::error::{ApiError, ErrorCode};
use crate::game::BuiltinStarts;
use crate::ids::SessionId;
use crate::llm::Provider;
use crate::metrics::Metrics;
use crate::session::tail::Tails;
use crate::session::{ChatRefused, HubError, Lookup, SessionActor, SessionHandle, SessionHub};
use crate::storage::{
    STORAGE_BEHIND, STORAGE_FULL, STORAGE_UNAVAILABLE, SessionMeta, StorageError, Store,
};
use crate::tools::Registry;

/// Largest HTTP request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The tenant used when a request names none.
pub const DEFAULT_TENANT: &str = "default";

/// Shared by every handler.
pub struct AppState {
    pub hub: Addr<SessionHub>,
    /// This node's tails of sessions other nodes run, for its spectators.
    pub tails: Addr<Tails>,
    pub store: Store,
    /// This node among the nodes of its database.
    pub cluster: cluster::Cluster,
    pub registry: Arc<Registry>,
    /// The sites of every tenant this node served (PROTOCOL.md §7.2).
    pub sites: Arc<crate::sites::Sites>,
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
    /// Tool rounds a stateless `/api/chat` exchange may take
    /// (`QUESTD_MAX_ITERATIONS`, as a session's turn).
    pub max_iterations: u32,
    /// What bounds one WebSocket connection: what may wait for it, and
    /// how fast it may send.
    pub ws: ws::WsLimits,
    /// The OpenAPI document, built at its first request: it depends only on
    /// the tools, fixed when the server starts.
    pub openapi: std::sync::OnceLock<bytes::Bytes>,
}

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    api::configure(cfg);
    admin::configure(cfg);
    cluster::configure(cfg);
    chat::configure(cfg);
    stateless::configure(cfg);
    tools_api::configure(cfg);
    sites::configure(cfg);
    ws::configure(cfg);
    mcp::configure(cfg);
    openapi::configure(cfg);
    static_files::configure(cfg);
}

/// Every route a `configure` registered, as (method, path pattern): what
/// the OpenAPI document's tests compare it with (actix-web lists none).
static REGISTERED: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A route for `method` on `path` (the whole path, scope included),
/// recorded in [`registered`]. Every `configure` builds its routes here.
pub(crate) fn on(method: actix_web::http::Method, path: &str) -> actix_web::Route {
    let mut seen = REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.insert((method.to_string(), path.to_owned()));
    web::method(method)
}

/// Registers `handler` for `method` on `path` through [`on`].
pub(crate) fn add<F, Args>(
    cfg: &mut web::ServiceConfig,
    method: actix_web::http::Method,
    path: &str,
    handler: F,
) where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    cfg.route(path, on(method, path).to(handler));
}

/// The routes registered so far (by every `configure` run in this process).
pub fn registered() -> std::collections::BTreeSet<(String, String)> {
    REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The role a token gives in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    Player,
    Spectator,
}

/// Compares secrets (keys, tokens, the nodes' secret) in time that depends
/// neither on where they differ nor on whether their lengths do: both are
/// hashed to SHA-256 digests of the same 32 bytes, which are folded byte by
/// byte without stopping early. Comparing the texts themselves would answer
/// at once on a length mismatch and tell a caller the secret's length.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    let diff = x
        .iter()
        .zip(y.iter())
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    diff == 0
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
    format!("no session {}", crate::tools::cut_name(id))
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
pub fn session_refused(r: ChatRefused) -> ApiError {
    let reloading = r.is_reloading();
    let mut e = ApiError::new(r.code, r.message);
    e.retry_after_s = match (r.retry_after_ms, r.code) {
        (Some(ms), _) => Some(ms.div_ceil(1000).max(1)),
        (None, ErrorCode::QueueFull | ErrorCode::Overloaded) => Some(1),
        _ if reloading => Some(1),
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
    parse_json(&body)
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`].
pub async fn json_body(payload: web::Payload) -> Result<serde_json::Value, ApiError> {
    parse_json(&body_bytes(payload).await?)
}

/// A body as JSON, refused (`400 BAD_REQUEST`) when it is not JSON or
/// when any string or key in it holds U+0000 ([`nul_refused`]).
pub(crate) fn parse_json(body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("body is not valid JSON: {e}")))?;
    match crate::json::find_nul(&value) {
        Some(at) => Err(nul_refused(&at)),
        None => Ok(value),
    }
}

/// The refusal of a body that holds U+0000, naming where (never what):
/// PostgreSQL's `TEXT` cannot store it, so nothing a caller sends may
/// carry it to a write that other sessions share.
pub fn nul_refused(at: &crate::json::NulAt) -> ApiError {
    ApiError::bad_request(format!("the body is refused: {at}"))
}

/// Where a request's URL holds an encoded U+0000 (`%00`): `"path"` or
/// `"query string"`. A literal NUL never gets this far (the HTTP parser
/// refuses it); the encoded one would be decoded into a session id, a
/// token or a site id that reaches SQL.
pub fn nul_in_url(uri: &actix_web::http::Uri) -> Option<&'static str> {
    let holds = |text: &str| text.contains("%00");
    if holds(uri.path()) {
        Some("path")
    } else if uri.query().is_some_and(holds) {
        Some("query string")
    } else {
        None
    }
}

/// Middleware: a request whose URL holds an encoded U+0000 is refused with
/// `400 BAD_REQUEST` before any route sees it ([`nul_in_url`]).
pub async fn refuse_nul_in_url(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    if let Some(part) = nul_in_url(req.uri()) {
        let e = ApiError::bad_request(format!("the {part} holds an encoded U+0000 (%00)"));
        return Ok(req.error_response(e).map_into_boxed_body());
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// Reads a body of at most [`MAX_BODY_BYTES`] (413 past that).
pub(crate) async fn body_bytes(
    payload: impl futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>
    + Unpin,
) -> Result<web::BytesMut, ApiError> {
    body_within(payload, MAX_BODY_BYTES).await
}

/// Reads a body of at most `limit` bytes, stopping as soon as it is past
/// (413). A body that breaks off is a `400` that names no cause: actix's
/// words for it are a Rust `Debug` string, which goes to the log only.
pub(crate) async fn body_within(
    mut payload: impl futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>>
    + Unpin,
    limit: usize,
) -> Result<web::BytesMut, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            tracing::debug!(error = %e, "a request body could not be read");
            ApiError::bad_request("the body could not be read whole")
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("body is larger than {limit} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The HTTP status of a wire error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Every HTTP error is answered as `{"error_code","message"}` plus its
/// extra fields, with `Retry-After` when it has one.
impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status_of(self.code)
    }

    fn error_response(&self) -> HttpResponse {
        let mut body = serde_json::to_value(openapi::ErrorBody {
            error_code: self.code,
            message: &self.message,
        })
        .unwrap_or_default();
        if let (Some(extra), Some(obj)) = (&self.extra, body.as_object_mut()) {
            obj.extend(extra.clone());
        }
        let mut resp = HttpResponse::build(self.status_code());
        if let Some(s) = self.retry_after_s {
            resp.insert_header(("Retry-After", s.to_string()));
        }
        resp.json(body)
    }
}

/// Lookups of a session tried when it stops between a lookup and its use.
const SESSION_LOOKUPS: usize = 3;

/// Where a session runs: here (loaded from storage if needed), or on the
/// node at this URL.
pub enum Located {
    Here(SessionHandle),
    Owner(String),
}

/// The live session, loaded from storage if needed, or the node that runs
/// it (several nodes on PostgreSQL); 404 if unknown. If the node that runs
/// it does not answer (dead, or paused), this waits for its lease to run
/// out and runs the session here instead.
pub async fn locate(state: &AppState, id: &SessionId) -> Result<Located, ApiError> {
    let lease = state.store.node().lease;
    let deadline = std::time::Instant::now() + lease * 2 + std::time::Duration::from_secs(1);
    loop {
        let found = state
            .hub
            .send(Lookup {
                session_id: id.clone(),
            })
            .await
            .map_err(|e| ApiError::internal(&e))?;
        match found {
            Ok(Some(handle)) => return Ok(Located::Here(handle)),
            Ok(None) => return Err(ApiError::not_found(no_session(id.as_str()))),
            Err(HubError::Elsewhere) => {}
            Err(e) => return Err(hub_failed(e)),
        }
        let owner = state
            .store
            .owner_address(id)
            .await
            .map_err(|e| ApiError::internal(&e))?;
        if let Some((node, url)) = owner
            && state.cluster.answers(&url, &node).await
        {
            return Ok(Located::Owner(url));
        }
        if std::time::Instant::now() >= deadline {
            return Err(overloaded(
                "the session's node does not answer; try again shortly",
            ));
        }
        // Its node is gone or paused: once its lease runs out, the next
        // lookup claims the session here.
        actix_web::rt::time::sleep(lease / 6).await;
    }
}

/// The live session ([`locate`]). When another node runs it, `routing`
/// records that node, which is what hands the request over
/// ([`cluster::hand_over`]), whatever the handler answers from the error
/// this returns then.
pub async fn find_session(
    state: &AppState,
    routing: &cluster::Routing,
    id: &SessionId,
) -> Result<SessionHandle, ApiError> {
    match locate(state, id).await? {
        Located::Here(handle) => Ok(handle),
        Located::Owner(url) => {
            routing.hand_to(id.as_str(), url);
            Err(overloaded("the session runs on another node"))
        }
    }
}

/// The one way from HTTP into a session: finds it (loading it if needed),
/// lets `authorize` judge the caller by its meta, and sends what `make`
/// builds. A session that stops between the lookup and the send (unloading,
/// reloading after a failure) is looked up again, up to
/// [`SESSION_LOOKUPS`] times. A refusal is the session's answer as HTTP.
pub async fn send_to_session<M, T>(
    state: &AppState,
    routing: &cluster::Routing,
    session_id: &SessionId,
    authorize: impl Fn(&SessionMeta) -> Result<(), ApiError>,
    make: impl Fn() -> M,
) -> Result<(SessionHandle, T), ApiError>
where
    M: actix::Message<Result = Result<T, ChatRefused>> + Send + 'static,
    T: Send + 'static,
    SessionActor: actix::Handler<M>,
{
    for _ in 0..SESSION_LOOKUPS {
        let handle = find_session(state, routing, session_id).await?;
        authorize(&handle.meta)?;
        match handle.addr.send(make()).await {
            Ok(Ok(answer)) => return Ok((handle, answer)),
            Ok(Err(refused)) if !refused.is_reloading() => return Err(session_refused(refused)),
            // Reloading, or gone between the lookup and the send.
            Ok(Err(_)) | Err(_) => continue,
        }
    }
    Err(session_refused(ChatRefused::reloading()))
}

/// The wait a tenant at its share of the node is told to take: its
/// sessions leave only as they unload (after `QUESTD_IDLE_SECS` unused).
pub const TENANT_FULL_RETRY_S: u64 = 10;

/// A session the hub could not give, as HTTP: `503` when the node is full
/// (sessions, or their state) or its storage is behind, `429` when the
/// tenant holds its share of the node, a generic `500` otherwise (the
/// cause is logged, never sent).
pub fn hub_failed(e: HubError) -> ApiError {
    match e {
        HubError::Full(_) | HubError::StateFull => overloaded(e.to_string()),
        HubError::TenantFull(_) => {
            let mut refused = ApiError::new(ErrorCode::RateLimited, e.to_string());
            refused.retry_after_s = Some(TENANT_FULL_RETRY_S);
            refused
        }
        HubError::Elsewhere => overloaded("the session runs on another node; try again shortly"),
        HubError::Draining => overloaded(e.to_string()),
        HubError::Closed => ApiError::new(ErrorCode::SessionClosed, e.to_string()),
        HubError::Storage(e) => storage_failed(e),
    }
}

/// A page size from `?limit=`: `default` when absent, within 1..=`max`.
pub fn page_size(asked: Option<u32>, default: u32, max: u32) -> u32 {
    asked.unwrap_or(default).clamp(1, max)
}

/// A query string that did not read, as `400 BAD_REQUEST` saying what
/// the route takes (`rule`) rather than the parser's words.
pub fn bad_query(rule: &'static str) -> impl FnOnce(actix_web::Error) -> ApiError {
    move |_| ApiError::bad_request(format!("the query string is invalid: {rule}"))
}

/// A storage failure as an HTTP error: `503` with `Retry-After` when
/// waiting helps, `400` when the database refused the request's own data
/// (the store is fine; the same request would fail again), else `500`
/// (the cause goes to the log only).
pub fn storage_failed(e: StorageError) -> ApiError {
    match e {
        StorageError::Overloaded => overloaded(STORAGE_BEHIND),
        StorageError::Full => overloaded(STORAGE_FULL),
        // Another node (one of the newer version) reads it: a load
        // balancer that retries elsewhere gets the session served.
        e @ StorageError::NewerFormat { .. } => {
            overloaded(format!("{e}; another node of a newer version serves it"))
        }
        StorageError::Unavailable(cause) => {
            tracing::warn!(%cause, "the database is unavailable");
            overloaded(STORAGE_UNAVAILABLE)
        }
        StorageError::Unstorable(cause) => {
            tracing::warn!(%cause, "a request's data could not be stored");
            ApiError::bad_request(UNSTORABLE)
        }
        e => ApiError::internal(&e),
    }
}

/// What a caller is told when the database refused its data.
pub const UNSTORABLE: &str = "a value in the request cannot be stored";

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
    fn secrets_compare_exactly_whatever_their_lengths() {
        let long = "k".repeat(10_000);
        // (a, b, equal)
        let cases: &[(&str, &str, bool)] = &[
            ("abc", "abc", true),
            ("", "", true),
            (&long, &long, true),
            ("abc", "abd", false),
            ("abc", "abcd", false),
            ("abcd", "abc", false),
            ("", "a", false),
            ("a", "", false),
            ("abc", &long, false),
            ("é", "e", false),
            ("abc ", "abc", false),
        ];
        for (a, b, equal) in cases {
            assert_eq!(same_secret(a, b), *equal, "{a:.12?} vs {b:.12?}");
        }
    }

    #[test]
    fn an_encoded_nul_anywhere_in_the_url_is_found() {
        let table = [
            ("/api/v1/sessions/sess_1", None),
            ("/api/v1/sessions/sess_1/journal?after_seq=3", None),
            ("/api/v1/sessions/sess_%00", Some("path")),
            ("/api/v1/sites/a%00b", Some("path")),
            ("/ws/sessions/s?token=t%00", Some("query string")),
            ("/ws/sessions/s?token=%2500", None),
            ("/x%00?y=%00", Some("path")),
        ];
        for (uri, expected) in table {
            let uri: actix_web::http::Uri = uri.parse().unwrap();
            assert_eq!(nul_in_url(&uri), expected, "{uri}");
        }
    }
}
