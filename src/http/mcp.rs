//! `/mcp`: the tool registry for Model Context Protocol clients.
//!
//! # Transport
//!
//! Streamable HTTP on one endpoint. `POST /mcp` carries exactly one JSON-RPC
//! message. A request is answered with a JSON body, or with a short
//! `text/event-stream` when the client's `Accept` allows it and a
//! `tools/call` asks for progress (`params._meta.progressToken`): then one
//! `notifications/progress` event ("queued": the call waits in its game
//! session's queue) goes out before the result event. Notifications and
//! client responses are answered `202 Accepted` with no body. `DELETE /mcp`
//! ends a 2025-era session. Every other method is `405` with
//! `Allow: POST, DELETE`: the server never starts a stream of its own.
//! JSON-RPC batches belong to neither revision: an array body is `-32600`.
//!
//! # Eras
//!
//! Both eras are served on the same endpoint and decided per request:
//!
//! - **Legacy** ([`LEGACY_VERSIONS`], newest 2025-11-25): `initialize` opens
//!   an MCP session and answers its id in `Mcp-Session-Id`; every later
//!   message carries that header. The version is negotiated once: a version
//!   the server speaks is echoed, any other gets [`LATEST_LEGACY`] (the
//!   client decides whether it can go on). A later `MCP-Protocol-Version`
//!   header must name the session's version (`-32020`, or `-32022` for one
//!   the server does not speak). An unknown, expired, ended or other
//!   tenant's session id is `404`.
//! - **Modern** ([`MODERN_VERSIONS`], 2026-07-28): stateless. There is no
//!   `initialize`; every request names its version and the client's
//!   capabilities in `params._meta`, `server/discover` tells what the server
//!   speaks, every result carries `resultType: "complete"` and the server's
//!   identity in `_meta`, and list results carry cache hints.
//!
//! A message with `Mcp-Session-Id` is legacy; `initialize` opens a legacy
//! session; otherwise a message is modern when its `_meta` names a protocol
//! version or its `MCP-Protocol-Version` header names a version that is not a
//! legacy one. A request that is none of these is told how to start (`400`,
//! `-32600`, with the supported versions).
//!
//! Modern checks, in order: a header naming a version the server does not
//! speak is `-32022`; a request without `_meta` version or client
//! capabilities is `-32602`; a `_meta` version the server does not speak is
//! `-32022` (with `data.supported` and `data.requested`); a header that
//! disagrees with the body (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`)
//! is `-32020`. The mirror headers are checked when present and not required:
//! the body is the authority, and clients that do not send them still work.
//! These envelope errors are HTTP `400`; an unknown method is `-32601` with
//! `404` in the modern era (the signal a dual-era client reads) and `200` in
//! a legacy session.
//!
//! # Origin and Host
//!
//! The server-wide guard ([`super::guard`]) applies here as everywhere: a
//! browser `Origin` other than the server's own or one listed in
//! `QUESTD_ALLOWED_ORIGINS` is `403`, and so is a `Host` that is not served.
//!
//! # Tools
//!
//! Tools are listed and run through the shared service core
//! ([`super::service`]) with the same tenant, key and rate rules as the HTTP
//! tool API (headers read leniently: the tenant is the key's).
//! A call binds to a questd game session through its `session_id` argument
//! or the `X-Session-ID` header and then runs in that session's actor, so
//! spectators see it and it lands in the actions log. Argument and tool
//! failures are `isError: true` results; only an unknown tool is a protocol
//! error (`-32602`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use super::AppState;
use super::cluster::Routing;
use super::idempotency;
use super::service::{self, CallReport, HeaderRules, ServiceContext};
use crate::error::{ApiError, ErrorCode};
use crate::tools::{cut_name, json_kind};

/// The stateless revision(s), newest first.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
/// The handshake revisions, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// Every version this server speaks, newest first: `server/discover`'s
/// `supportedVersions` and `-32022`'s `data.supported`.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];
/// What `initialize` answers when the client asks for a version the server
/// does not speak (a handshake can never agree to a stateless version).
pub const LATEST_LEGACY: &str = "2025-11-25";

/// Most 2025-era sessions held at once; opening one more evicts the one
/// used least recently.
pub const MAX_MCP_SESSIONS: usize = 10_000;
/// One tenant holds at most this fraction (1/N) of the MCP sessions (but
/// never fewer than [`MCP_TENANT_FLOOR`]), so one tenant's client cannot
/// push every other tenant's sessions out.
pub const MCP_TENANT_SHARE: usize = 10;
pub const MCP_TENANT_FLOOR: usize = 16;
/// A 2025-era session unused this long is gone (`404`).
pub const MCP_SESSION_IDLE: Duration = Duration::from_secs(60 * 60);
/// Length of an `Mcp-Session-Id`.
const SESSION_ID_LEN: usize = 32;

/// How long a client may reuse a `tools/list` result. The list depends on
/// the caller (tenant, key), so its scope is private.
const TOOLS_LIST_TTL_MS: u64 = 5 * 60 * 1000;
/// How long a client may reuse `server/discover`: the same for everyone
/// until the server is upgraded.
const DISCOVER_TTL_MS: u64 = 60 * 60 * 1000;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
/// A mirror header disagrees with the body (2026-07-28).
const HEADER_MISMATCH: i64 = -32020;
/// The request names a protocol version the server does not speak.
const UNSUPPORTED_VERSION: i64 = -32022;

const SESSION_HEADER: &str = "Mcp-Session-Id";
const VERSION_HEADER: &str = "MCP-Protocol-Version";
const METHOD_HEADER: &str = "Mcp-Method";
const NAME_HEADER: &str = "Mcp-Name";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The `_meta` key under which a call result carries its audit record.
const META_AUDIT: &str = "questd/audit";
/// What every method but `POST` and `DELETE` is told.
const ALLOW: &str = "POST, DELETE";

/// Registers `/mcp`: `POST` (messages), `DELETE` (end a session), `405`
/// for everything else.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/mcp")
            .route(super::on(actix_web::http::Method::POST, "/mcp").to(post))
            .route(super::on(actix_web::http::Method::DELETE, "/mcp").to(delete))
            .default_service(web::to(not_allowed)),
    );
}

// ----- the endpoint --------------------------------------------------------

/// One JSON-RPC message: Origin, body, envelope, service context, era,
/// then the method.
#[utoipa::path(post, path = "/mcp", tag = "mcp",
    security(("internal_key" = [])),
    request_body(content = Envelope, description = "A JSON-RPC message of the Model Context Protocol"),
    responses(
        (status = 200, description = "The JSON-RPC answer (one `message` event of `text/event-stream` when the client asked for progress)", body = RpcAnswer),
        (status = 202, description = "A notification or a client's response, accepted"),
        (status = 400, description = "A bad envelope, version or header: a JSON-RPC error", body = RpcAnswer),
        (status = 404, description = "An unknown or ended MCP session, or (2026-07-28) an unknown method: a JSON-RPC error", body = RpcAnswer)))]
async fn post(req: HttpRequest, state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    // The key (and the context headers) are judged before the body is
    // read, so a refusal cannot know the message's id: it is `null`, as
    // JSON-RPC answers a request whose id could not be read.
    let ctx = match ServiceContext::from_request(&req, &state, HeaderRules::Lenient) {
        Ok(ctx) => ctx,
        Err(e) => return api_error(e, &Value::Null),
    };
    let body = match read_body(payload).await {
        Ok(body) => body,
        Err(e) => return e.response(&Value::Null),
    };
    let msg = match Incoming::parse(&body) {
        Ok(msg) => msg,
        Err((id, e)) => return e.response(&id),
    };
    let id = msg.id.clone().unwrap_or(Value::Null);
    let sessions = &state.mcp_sessions;
    // A peer hands a call over with the client's `Mcp-Session-Id`, which
    // lives in the memory of the node the client opened it on: that node
    // checked it, so the session is not looked for here.
    let opened_by = if state.cluster.from_peer(&req) {
        Opened::ByPeer
    } else {
        Opened::Here(sessions)
    };
    let route = match route(req.headers(), &msg, opened_by, &ctx.tenant_id) {
        Ok(route) => route,
        Err(e) => return e.response(&id),
    };
    let Some(method) = msg.method.as_deref().filter(|_| msg.id.is_some()) else {
        // A notification or a client's response: nothing to answer. The
        // server never sends requests, so a response has nothing to match.
        return HttpResponse::Accepted().finish();
    };
    if let Err(e) = service::check_rate(&state, &ctx) {
        return api_error(e, &id);
    }
    let accepts = Accepts::of(req.headers());
    if !accepts.json && !accepts.sse {
        return RpcError::new(
            StatusCode::NOT_ACCEPTABLE,
            INVALID_REQUEST,
            "Accept must allow application/json or text/event-stream",
        )
        .response(&id);
    }
    let era = match route {
        Route::Initialize => {
            return match initialize(&msg.params, sessions, &ctx.tenant_id) {
                Ok((result, session_id)) => {
                    let mut resp = accepts.reply(&id, result);
                    if let Ok(value) = header::HeaderValue::from_str(&session_id) {
                        resp.headers_mut()
                            .insert(header::HeaderName::from_static("mcp-session-id"), value);
                    }
                    resp
                }
                Err(e) => e.response(&id),
            };
        }
        Route::Legacy => Era::Legacy,
        Route::Modern => Era::Modern,
        // Only notifications travel without an era; they were answered above.
        Route::Sessionless => return HttpResponse::Accepted().finish(),
    };
    let result = match (era, method) {
        (Era::Legacy, "ping") => Ok(json!({})),
        (Era::Modern, "server/discover") => Ok(era.complete(discover(), Some(DISCOVER_CACHE))),
        (_, "tools/list") => Ok(era.complete(
            json!({"tools": service::mcp_listing(&state, &ctx)}),
            Some(TOOLS_LIST_CACHE),
        )),
        (_, "tools/call") => {
            let key = match idempotency::call_key(&req, None) {
                Ok(key) => key,
                Err(e) => return api_error(e, &id),
            };
            let routing = Routing::of(&req);
            return tools_call(state, ctx, routing, id, msg.params, era, accepts, key).await;
        }
        (Era::Legacy, _) => Err(RpcError::new(
            StatusCode::OK,
            METHOD_NOT_FOUND,
            format!(
                "no method {:?}; this server has initialize, ping, tools/list and tools/call",
                cut_name(method)
            ),
        )),
        (Era::Modern, _) => Err(RpcError::new(
            StatusCode::NOT_FOUND,
            METHOD_NOT_FOUND,
            format!(
                "no method {:?}; this server has server/discover, tools/list and tools/call",
                cut_name(method)
            ),
        )),
    };
    match result {
        Ok(result) => accepts.reply(&id, result),
        Err(e) => e.response(&id),
    }
}

/// Ends the 2025-era session named in `Mcp-Session-Id` (`204`), or `404`.
#[utoipa::path(delete, path = "/mcp", tag = "mcp",
    security(("internal_key" = [])),
    params(("Mcp-Session-Id" = String, Header, description = "The MCP session to end")),
    responses((status = 204, description = "The MCP session is ended"), (status = 404, description = "No such MCP session")))]
async fn delete(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let ctx = match ServiceContext::from_request(&req, &state, HeaderRules::Lenient) {
        Ok(ctx) => ctx,
        Err(e) => return api_error(e, &Value::Null),
    };
    let Some(session_id) = header_text(req.headers(), SESSION_HEADER) else {
        return RpcError::bad_request(
            INVALID_REQUEST,
            "DELETE /mcp ends the session named in Mcp-Session-Id; there is none",
        )
        .response(&Value::Null);
    };
    if state.mcp_sessions.close(session_id, &ctx.tenant_id) {
        HttpResponse::NoContent().finish()
    } else {
        unknown_session(session_id).response(&Value::Null)
    }
}

/// Any method but `POST` and `DELETE`; there is no server-initiated stream.
async fn not_allowed(req: HttpRequest) -> HttpResponse {
    let mut resp = RpcError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        INVALID_REQUEST,
        format!(
            "{} is not served here; send JSON-RPC messages with POST",
            req.method()
        ),
    )
    .response(&Value::Null);
    resp.headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static(ALLOW));
    resp
}

// ----- routing between the eras --------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    Legacy,
    Modern,
}

/// Where one message goes, once its headers and envelope are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `initialize`: opens a 2025-era session.
    Initialize,
    /// A message in an open 2025-era session.
    Legacy,
    /// A 2026-07-28 message.
    Modern,
    /// A notification or response that belongs to no era.
    Sessionless,
}

/// Where a 2025-era session named in `Mcp-Session-Id` was opened.
#[derive(Clone, Copy)]
enum Opened<'a> {
    /// By a client of this node: it is among these.
    Here(&'a McpSessions),
    /// On the peer that handed the request over, which checked it and
    /// its version header.
    ByPeer,
}

/// Decides a message's era and checks its version, headers and session.
fn route(
    headers: &HeaderMap,
    msg: &Incoming,
    opened: Opened<'_>,
    tenant_id: &str,
) -> Result<Route, RpcError> {
    let header_version = header_text(headers, VERSION_HEADER);
    let is_initialize = msg.method.as_deref() == Some("initialize");
    if let Some(session_id) = header_text(headers, SESSION_HEADER) {
        if is_initialize {
            return Err(RpcError::bad_request(
                INVALID_REQUEST,
                "initialize opens a new session; send it without Mcp-Session-Id",
            ));
        }
        let Opened::Here(sessions) = opened else {
            return Ok(Route::Legacy);
        };
        let version = sessions
            .touch(session_id, tenant_id)
            .ok_or_else(|| unknown_session(session_id))?;
        if let Some(asked) = header_version {
            if !SUPPORTED_VERSIONS.contains(&asked) {
                return Err(unsupported_version(asked));
            }
            if asked != version {
                return Err(RpcError::bad_request(
                    HEADER_MISMATCH,
                    format!("{VERSION_HEADER} {asked} is not this session's version {version}"),
                ));
            }
        }
        return Ok(Route::Legacy);
    }
    if is_initialize && msg.id.is_some() {
        return Ok(Route::Initialize);
    }
    let meta = msg.meta();
    let body_version = meta.and_then(|m| m.get(META_VERSION));
    let modern =
        body_version.is_some() || header_version.is_some_and(|h| !LEGACY_VERSIONS.contains(&h));
    if modern {
        check_modern(headers, msg, header_version, body_version)?;
        return Ok(Route::Modern);
    }
    if msg.id.is_some() {
        return Err(RpcError::bad_request(
            INVALID_REQUEST,
            "no MCP session: open one with initialize (2025 revisions, then send \
             Mcp-Session-Id) or name the protocol version and client capabilities in \
             params._meta (2026-07-28)",
        )
        .with_data(json!({"supported": SUPPORTED_VERSIONS})));
    }
    Ok(Route::Sessionless)
}

/// The checks of a 2026-07-28 message, in the order given in the module doc.
fn check_modern(
    headers: &HeaderMap,
    msg: &Incoming,
    header_version: Option<&str>,
    body_version: Option<&Value>,
) -> Result<(), RpcError> {
    if let Some(asked) = header_version
        && !SUPPORTED_VERSIONS.contains(&asked)
    {
        return Err(unsupported_version(asked));
    }
    let is_request = msg.id.is_some();
    let version = match body_version {
        Some(Value::String(v)) => Some(v.as_str()),
        Some(_) => {
            return Err(RpcError::bad_request(
                INVALID_PARAMS,
                format!("params._meta[{META_VERSION:?}] must be a string"),
            ));
        }
        // Notifications need not carry the per-request fields.
        None if !is_request => None,
        None => {
            return Err(RpcError::bad_request(
                INVALID_PARAMS,
                format!("params._meta needs {META_VERSION:?} (the protocol version)"),
            ));
        }
    };
    if let Some(version) = version {
        if LEGACY_VERSIONS.contains(&version) {
            return Err(RpcError::bad_request(
                INVALID_REQUEST,
                format!(
                    "{version} is a handshake revision: open a session with initialize and \
                     send its Mcp-Session-Id"
                ),
            ));
        }
        if !MODERN_VERSIONS.contains(&version) {
            return Err(unsupported_version(version));
        }
        if let Some(asked) = header_version
            && asked != version
        {
            return Err(RpcError::bad_request(
                HEADER_MISMATCH,
                format!("{VERSION_HEADER} {asked} does not match params._meta version {version}"),
            ));
        }
    }
    if let Some(named) = header_text(headers, METHOD_HEADER)
        && Some(named) != msg.method.as_deref()
    {
        return Err(RpcError::bad_request(
            HEADER_MISMATCH,
            format!(
                "{METHOD_HEADER} {:?} does not match the body's method",
                cut_name(named)
            ),
        ));
    }
    // A Base64-wrapped name (`=?base64?...?=`) is for names that are not
    // plain ASCII; no tool has such a name, so it is left to the tool lookup.
    if msg.method.as_deref() == Some("tools/call")
        && let Some(named) = header_text(headers, NAME_HEADER)
        && !named.starts_with("=?base64?")
        && Some(named) != msg.params.get("name").and_then(Value::as_str)
    {
        return Err(RpcError::bad_request(
            HEADER_MISMATCH,
            format!(
                "{NAME_HEADER} {:?} does not match the body's params.name",
                cut_name(named)
            ),
        ));
    }
    if is_request
        && !msg
            .meta()
            .and_then(|m| m.get(META_CAPABILITIES))
            .is_some_and(Value::is_object)
    {
        return Err(RpcError::bad_request(
            INVALID_PARAMS,
            format!("params._meta needs {META_CAPABILITIES:?} (an object; {{}} when none)"),
        ));
    }
    Ok(())
}

/// Cache hints of one kind of list result: lifetime in ms and scope.
type CacheHint = (u64, &'static str);
const TOOLS_LIST_CACHE: CacheHint = (TOOLS_LIST_TTL_MS, "private");
const DISCOVER_CACHE: CacheHint = (DISCOVER_TTL_MS, "public");

impl Era {
    /// Gives a result the fields its era requires: in the modern era
    /// `resultType`, cache hints for cacheable results, and the server's
    /// identity in `_meta`. Legacy results are sent as they are.
    fn complete(self, result: Value, cache: Option<CacheHint>) -> Value {
        let Value::Object(mut result) = result else {
            return result;
        };
        if self == Era::Modern {
            result.insert("resultType".into(), json!("complete"));
            if let Some((ttl_ms, scope)) = cache {
                result.insert("ttlMs".into(), json!(ttl_ms));
                result.insert("cacheScope".into(), json!(scope));
            }
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert(META_SERVER_INFO.into(), server_info());
            }
        }
        Value::Object(result)
    }
}

// ----- methods -------------------------------------------------------------

/// Who this server is, as both eras name it.
fn server_info() -> Value {
    json!({"name": "questd", "title": "questd", "version": env!("CARGO_PKG_VERSION")})
}

/// What the server tells a model about using it.
const INSTRUCTIONS: &str = "Tools of a questd game server. A tool that works in a game \
    session takes its id in the session_id argument (or the X-Session-ID header); calls \
    in one session run one at a time, in order, and every player and spectator sees them.";

/// What the server offers; the same in both eras.
fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

/// `server/discover`.
fn discover() -> Value {
    json!({
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })
}

/// `initialize`: negotiates a legacy version and opens a session; answers
/// the result and the new session's id.
fn initialize(
    params: &Map<String, Value>,
    sessions: &McpSessions,
    tenant_id: &str,
) -> Result<(Value, String), RpcError> {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        return Err(RpcError::new(
            StatusCode::OK,
            INVALID_PARAMS,
            "initialize needs params.protocolVersion (a string)",
        ));
    };
    let version = negotiate(asked);
    let session_id = sessions.open(tenant_id, version);
    tracing::debug!(tenant_id, version, "mcp session opened");
    let result = json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    });
    Ok((result, session_id))
}

/// The legacy version `initialize` agrees to for a client's ask.
fn negotiate(asked: &str) -> &'static str {
    LEGACY_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .copied()
        .unwrap_or(LATEST_LEGACY)
}

/// `tools/call`: runs the tool through the service core and answers its
/// result, as JSON or (with a progress token and SSE allowed) as a stream
/// with a "queued" progress event first.
#[allow(clippy::too_many_arguments)]
async fn tools_call(
    state: web::Data<AppState>,
    ctx: ServiceContext,
    routing: Routing,
    id: Value,
    params: Map<String, Value>,
    era: Era,
    accepts: Accepts,
    key: Option<String>,
) -> HttpResponse {
    let Some(name) = params.get("name").and_then(Value::as_str).map(cut_name) else {
        return RpcError::new(
            StatusCode::OK,
            INVALID_PARAMS,
            "tools/call needs params.name (a string)",
        )
        .response(&id);
    };
    if state.registry.spec(name).is_none() {
        return unknown_tool(name).response(&id);
    }
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(other) => {
            let e = crate::tools::ToolError::invalid_args(format!(
                "arguments must be a JSON object, not {}",
                json_kind(other)
            ));
            return accepts.reply(&id, era.complete(error_content(&e), None));
        }
    };
    let progress = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned();
    // A stream's first event goes out before the call ends, so where its
    // session runs is found first: a call for another node's session is
    // handed there whole, stream and all.
    if progress.is_some()
        && accepts.sse
        && let Some(session_id) = service::named_session(&ctx, &arguments)
        && super::find_session(&state, &routing, &session_id)
            .await
            .is_err()
        && routing.owner().is_some()
    {
        return HttpResponse::ServiceUnavailable().finish();
    }
    // The call runs in its own task so that a client that goes away does not
    // cut it off between the session's answer and its audit record.
    let call = actix_web::rt::spawn(run_call(
        state,
        ctx,
        routing,
        name.to_owned(),
        arguments,
        key,
    ));
    let finish =
        move |joined: Result<Result<CallReport, ApiError>, tokio::task::JoinError>| match joined {
            Ok(Ok(report)) => match call_result(report) {
                Ok(result) => rpc_result(&id, era.complete(result, None)),
                Err(e) => e.body(&id),
            },
            Ok(Err(e)) => api_error_body(e, &id),
            Err(_) => RpcError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                INTERNAL_ERROR,
                "the call stopped before it answered",
            )
            .body(&id),
        };
    match progress {
        Some(token) if accepts.sse => {
            let queued = json!({
                "jsonrpc": JSONRPC,
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 0, "total": 1, "message": "queued"},
            });
            let first =
                futures_util::stream::once(async move { Ok::<_, Infallible>(sse_event(&queued)) });
            let last = futures_util::stream::once(async move {
                Ok::<_, Infallible>(sse_event(&finish(call.await)))
            });
            sse_response(first.chain(last))
        }
        _ => accepts.send(finish(call.await)),
    }
}

/// Runs one call with owned inputs, so it can outlive the request; with
/// an `Idempotency-Key`, once for that key.
async fn run_call(
    state: web::Data<AppState>,
    ctx: ServiceContext,
    routing: Routing,
    name: String,
    arguments: Value,
    key: Option<String>,
) -> Result<CallReport, ApiError> {
    idempotency::call_once(&state, &ctx, &routing, &name, arguments, key.as_deref())
        .await
        .map(|(report, _)| report)
}

/// A call's outcome as an MCP result: output as text and structured
/// content, or the failure as an `isError` result; an unknown tool is the
/// protocol error `-32602`.
fn call_result(report: CallReport) -> Result<Value, RpcError> {
    let mut result = match report.outcome {
        Ok(output) => {
            let mut result = json!({
                "content": [{"type": "text", "text": output.to_string()}],
                "isError": false,
            });
            // structuredContent is an object by the MCP schema; every tool's
            // output schema is one.
            if output.is_object() {
                result["structuredContent"] = output;
            }
            result
        }
        Err(e) if e.code == ErrorCode::ToolNotFound => {
            return Err(RpcError::new(StatusCode::OK, INVALID_PARAMS, e.message));
        }
        Err(e) => error_content(&e),
    };
    if let Ok(audit) = serde_json::to_value(&report.audit) {
        result["_meta"] = json!({META_AUDIT: audit});
    }
    Ok(result)
}

/// A tool failure as an `isError` result the model can read.
fn error_content(e: &crate::tools::ToolError) -> Value {
    json!({
        "content": [{"type": "text", "text": e.to_model_json().to_string()}],
        "isError": true,
    })
}

fn unknown_tool(name: &str) -> RpcError {
    RpcError::new(
        StatusCode::OK,
        INVALID_PARAMS,
        format!(
            "unknown tool {:?}; tools/list names the tools",
            cut_name(name)
        ),
    )
}

// ----- the JSON-RPC envelope -------------------------------------------------

/// One JSON-RPC message as a client sends it (MCP carries one per
/// request). Read as it comes, then checked field by field into an
/// [`Incoming`], so each problem gets its own error.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct Envelope {
    /// Must be `"2.0"`.
    #[serde(default)]
    #[schema(value_type = String)]
    jsonrpc: Option<Value>,
    /// A string or a number; absent from a notification.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Value>)]
    id: Option<Value>,
    /// The method (`initialize`, `ping`, `server/discover`, `tools/list`,
    /// `tools/call`, notifications); absent from a client's response.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    method: Option<Value>,
    /// The method's arguments, as the method defines them (a tool call's
    /// `name` and `arguments`, `_meta`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    params: Option<Value>,
    /// A client's response to a server request (the server sends none).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    result: Option<Value>,
    /// A client's error response to a server request.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    error: Option<Value>,
}

/// A field that is present, `null` included (serde reads a `null` into
/// an `Option` as absent; JSON-RPC tells them apart).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// One JSON-RPC message from a client, checked for shape.
#[derive(Debug)]
struct Incoming {
    /// `None` for a notification.
    id: Option<Value>,
    /// `None` for a response to a server request.
    method: Option<String>,
    params: Map<String, Value>,
}

impl Incoming {
    /// Parses a body; a failure comes with the id to answer it under.
    fn parse(body: &[u8]) -> Result<Self, (Value, RpcError)> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            (
                Value::Null,
                RpcError::bad_request(PARSE_ERROR, format!("the body is not valid JSON: {e}")),
            )
        })?;
        let invalid = |id: &Value, message: &str| {
            Err((id.clone(), RpcError::bad_request(INVALID_REQUEST, message)))
        };
        if let Some(at) = crate::json::find_nul(&value) {
            // Answered under the message's id when that id is usable
            // (a number, or a string without the NUL).
            let id = match value.get("id") {
                Some(id @ Value::Number(_)) => id.clone(),
                Some(id @ Value::String(s)) if !s.contains('\0') => id.clone(),
                _ => Value::Null,
            };
            return invalid(&id, &format!("the body is refused: {at}"));
        }
        let envelope = match value {
            Value::Object(_) => match Envelope::deserialize(value) {
                Ok(envelope) => envelope,
                Err(_) => return invalid(&Value::Null, "the body is not a JSON-RPC message"),
            },
            Value::Array(_) => {
                return invalid(
                    &Value::Null,
                    "JSON-RPC batches are not part of MCP; send one message per request",
                );
            }
            _ => {
                return invalid(
                    &Value::Null,
                    "the body must be one JSON-RPC message (an object)",
                );
            }
        };
        let id = match envelope.id {
            None => None,
            Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
            Some(_) => return invalid(&Value::Null, "id must be a string or a number"),
        };
        let shown = id.clone().unwrap_or(Value::Null);
        if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some(JSONRPC) {
            return invalid(&shown, "jsonrpc must be \"2.0\"");
        }
        let method = match envelope.method {
            Some(Value::String(m)) => Some(m),
            Some(_) => return invalid(&shown, "method must be a string"),
            None if id.is_some() && (envelope.result.is_some() || envelope.error.is_some()) => None,
            None => return invalid(&shown, "method is missing"),
        };
        let params = match envelope.params {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => return invalid(&shown, "params must be an object"),
        };
        Ok(Self { id, method, params })
    }

    /// `params._meta`, when it is an object.
    fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta").and_then(Value::as_object)
    }
}

/// A JSON-RPC error and the HTTP status it is sent with.
#[derive(Debug)]
struct RpcError {
    status: StatusCode,
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An error in the envelope or headers: HTTP 400.
    fn bad_request(code: i64, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The JSON-RPC error answering `id` (`null` when unknown).
    fn body(&self, id: &Value) -> RpcAnswer {
        RpcAnswer {
            jsonrpc: JSONRPC,
            id: id.clone(),
            result: None,
            error: Some(RpcErrorObject {
                code: self.code,
                message: self.message.clone(),
                data: self.data.clone(),
            }),
        }
    }

    fn response(&self, id: &Value) -> HttpResponse {
        json_response(self.status, &self.body(id))
    }
}

fn unsupported_version(requested: &str) -> RpcError {
    let shown = cut_name(requested);
    RpcError::bad_request(
        UNSUPPORTED_VERSION,
        format!("unsupported protocol version {shown:?}"),
    )
    .with_data(json!({"supported": SUPPORTED_VERSIONS, "requested": shown}))
}

fn unknown_session(session_id: &str) -> RpcError {
    let shown = cut_name(session_id);
    RpcError::new(
        StatusCode::NOT_FOUND,
        INVALID_REQUEST,
        format!("no MCP session {shown:?}: it ended or expired; send initialize again"),
    )
}

/// A failure of the service core (context headers, key, rate) as an HTTP
/// error with a JSON-RPC body; `data.error_code` is the questd code.
fn api_error(e: ApiError, id: &Value) -> HttpResponse {
    let retry_after_s = e.retry_after_s;
    let mut resp = rpc_error_of(e).response(id);
    if let Some(s) = retry_after_s
        && let Ok(value) = header::HeaderValue::from_str(&s.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, value);
    }
    resp
}

/// [`api_error`] as the body of an answer already under way (a call's).
fn api_error_body(e: ApiError, id: &Value) -> RpcAnswer {
    rpc_error_of(e).body(id)
}

/// An HTTP error as a JSON-RPC error: its code and extra fields in `data`.
fn rpc_error_of(e: ApiError) -> RpcError {
    let status = super::status_of(e.code);
    let code = if status.is_server_error() {
        INTERNAL_ERROR
    } else {
        INVALID_REQUEST
    };
    let mut data = Map::new();
    data.insert("error_code".into(), json!(e.code));
    if let Some(extra) = e.extra {
        data.extend(extra);
    }
    if let Some(s) = e.retry_after_s {
        data.insert("retry_after_s".into(), json!(s));
    }
    RpcError::new(status, code, e.message).with_data(Value::Object(data))
}

/// The JSON-RPC version every message names.
const JSONRPC: &str = "2.0";

/// The server's answer to one request: its `result`, or its `error`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct RpcAnswer {
    /// Always `"2.0"`.
    jsonrpc: &'static str,
    /// The request's id (a string or a number); `null` when the request
    /// could not be read far enough to find it.
    #[schema(value_type = Value)]
    id: Value,
    /// The method's result, as the method defines it (`tools/list`'s
    /// `tools`, `tools/call`'s `content` and `isError`, …); absent from an
    /// error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<RpcErrorObject>,
}

/// A JSON-RPC error: its code, its message and, for a questd error, its
/// `error_code` and extra fields in `data`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct RpcErrorObject {
    code: i64,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    data: Option<Value>,
}

fn rpc_result(id: &Value, result: Value) -> RpcAnswer {
    RpcAnswer {
        jsonrpc: JSONRPC,
        id: id.clone(),
        result: Some(result),
        error: None,
    }
}

fn json_response(status: StatusCode, body: &impl Serialize) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json")
        .body(serde_json::to_string(body).unwrap_or_default())
}

fn sse_event(message: &impl Serialize) -> Bytes {
    let message = serde_json::to_string(message).unwrap_or_default();
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

fn sse_response(
    events: impl futures_util::Stream<Item = Result<Bytes, Infallible>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(events)
}

/// Which answer formats the client's `Accept` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Accepts {
    json: bool,
    sse: bool,
}

impl Accepts {
    /// No `Accept` allows JSON; `*/*` and `application/*` allow JSON but not
    /// a stream, which only an explicit `text/event-stream` allows.
    fn of(headers: &HeaderMap) -> Self {
        let mut accepts = Self {
            json: false,
            sse: false,
        };
        let mut any = false;
        for value in headers.get_all(header::ACCEPT) {
            let Ok(value) = value.to_str() else { continue };
            for part in value.split(',') {
                any = true;
                let mut pieces = part.split(';');
                let media = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
                let refused = pieces.any(|p| {
                    let p = p.trim().to_ascii_lowercase();
                    p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
                });
                if refused {
                    continue;
                }
                match media.as_str() {
                    "application/json" | "application/*" | "*/*" => accepts.json = true,
                    "text/event-stream" => accepts.sse = true,
                    _ => {}
                }
            }
        }
        if !any {
            accepts.json = true;
        }
        accepts
    }

    /// A successful answer to `id` in the format the client allows.
    fn reply(&self, id: &Value, result: Value) -> HttpResponse {
        self.send(rpc_result(id, result))
    }

    /// One whole JSON-RPC message: JSON when allowed, else one SSE event.
    fn send(&self, message: RpcAnswer) -> HttpResponse {
        if self.json {
            json_response(StatusCode::OK, &message)
        } else {
            let event = sse_event(&message);
            sse_response(futures_util::stream::once(async move {
                Ok::<_, Infallible>(event)
            }))
        }
    }
}

/// Reads a body as every route does ([`super::body_bytes`]: at most
/// [`super::MAX_BODY_BYTES`], 413 past that), its refusal as a JSON-RPC error.
async fn read_body(payload: web::Payload) -> Result<web::BytesMut, RpcError> {
    super::body_bytes(payload)
        .await
        .map_err(|e| RpcError::new(super::status_of(e.code), INVALID_REQUEST, e.message))
}

/// A header's value as text; a value that is not text reads as empty, which
/// no check accepts.
fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .map(|v| v.to_str().map(str::trim).unwrap_or(""))
}

// ----- 2025-era sessions -----------------------------------------------------

/// One 2025-era MCP session.
#[derive(Debug)]
struct McpSession {
    /// A request naming this session from another tenant finds nothing.
    tenant_id: String,
    /// The version `initialize` agreed to.
    version: &'static str,
    last_used: Instant,
}

/// The 2025-era MCP sessions of one server: in memory, at most `cap`, each
/// gone after `idle` without use. Lost on restart, which a client sees as
/// `404` and answers by initializing again.
#[derive(Debug)]
pub struct McpSessions {
    sessions: Mutex<HashMap<String, McpSession>>,
    cap: usize,
    idle: Duration,
}

impl Default for McpSessions {
    /// At most [`MAX_MCP_SESSIONS`], each gone after [`MCP_SESSION_IDLE`].
    fn default() -> Self {
        Self::new(MAX_MCP_SESSIONS, MCP_SESSION_IDLE)
    }
}

impl McpSessions {
    pub fn new(cap: usize, idle: Duration) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            cap: cap.max(1),
            idle,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, McpSession>> {
        // The map is valid after any panic elsewhere: every change is one call.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a session and answers its id.
    fn open(&self, tenant_id: &str, version: &'static str) -> String {
        self.open_at(tenant_id, version, Instant::now())
    }

    fn open_at(&self, tenant_id: &str, version: &'static str, now: Instant) -> String {
        let mut sessions = self.lock();
        let per_tenant = (self.cap / MCP_TENANT_SHARE).max(self.cap.min(MCP_TENANT_FLOOR));
        let own = |s: &McpSession| s.tenant_id == tenant_id;
        // Eviction runs in bulk (a quarter at a time) so that opening stays
        // amortized constant time under the lock; a tenant at its share
        // evicts only its own sessions, never another tenant's.
        if sessions.len() >= self.cap
            || (sessions.len() >= per_tenant
                && sessions.values().filter(|s| own(s)).count() >= per_tenant)
        {
            sessions.retain(|_, s| now.saturating_duration_since(s.last_used) <= self.idle);
            let tenant_full = sessions.values().filter(|s| own(s)).count() >= per_tenant;
            if tenant_full || sessions.len() >= self.cap {
                let mut ages: Vec<(Instant, String)> = sessions
                    .iter()
                    .filter(|(_, s)| !tenant_full || own(s))
                    .map(|(id, s)| (s.last_used, id.clone()))
                    .collect();
                let evict = (ages.len() / 4).max(1).min(ages.len());
                if evict < ages.len() {
                    ages.select_nth_unstable(evict);
                }
                for (_, id) in ages.into_iter().take(evict) {
                    sessions.remove(&id);
                }
            }
        }
        let id = crate::session::random_token(SESSION_ID_LEN);
        sessions.insert(
            id.clone(),
            McpSession {
                tenant_id: tenant_id.to_owned(),
                version,
                last_used: now,
            },
        );
        id
    }

    /// The session's version, refreshing its idle time; `None` when it is
    /// unknown, expired (and so removed) or another tenant's.
    fn touch(&self, id: &str, tenant_id: &str) -> Option<&'static str> {
        self.touch_at(id, tenant_id, Instant::now())
    }

    fn touch_at(&self, id: &str, tenant_id: &str, now: Instant) -> Option<&'static str> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(id)?;
        if session.tenant_id != tenant_id {
            return None;
        }
        if now.saturating_duration_since(session.last_used) > self.idle {
            sessions.remove(id);
            return None;
        }
        session.last_used = now;
        Some(session.version)
    }

    /// Ends a session; `false` when there was none to end for this tenant.
    fn close(&self, id: &str, tenant_id: &str) -> bool {
        let now = Instant::now();
        let mut sessions = self.lock();
        match sessions.get(id) {
            Some(s) if s.tenant_id == tenant_id => {
                let live = now.saturating_duration_since(s.last_used) <= self.idle;
                sessions.remove(id);
                live
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    /// Request headers, and whether JSON and a stream may answer them.
    type AcceptCase<'a> = (&'a [(&'static str, &'a str)], bool, bool);

    #[test]
    fn accept_decides_json_and_streams() {
        let cases: &[AcceptCase<'_>] = &[
            (&[], true, false),
            (
                &[("accept", "application/json, text/event-stream")],
                true,
                true,
            ),
            (&[("accept", "text/event-stream")], false, true),
            (&[("accept", "*/*")], true, false),
            (&[("accept", "application/*;q=0.5")], true, false),
            (&[("accept", "text/html")], false, false),
            (
                &[("accept", "application/json;q=0, text/event-stream")],
                false,
                true,
            ),
            (
                &[
                    ("accept", "application/json"),
                    ("accept", "text/event-stream"),
                ],
                true,
                true,
            ),
        ];
        for (pairs, json, sse) in cases {
            assert_eq!(
                Accepts::of(&headers(pairs)),
                Accepts {
                    json: *json,
                    sse: *sse
                },
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn envelopes_parse_or_get_their_code() {
        let bad = [
            ("{", PARSE_ERROR, Value::Null),
            ("", PARSE_ERROR, Value::Null),
            ("[]", INVALID_REQUEST, Value::Null),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            ("7", INVALID_REQUEST, Value::Null),
            (r#"{"id":1,"method":"ping"}"#, INVALID_REQUEST, json!(1)),
            (
                r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
                INVALID_REQUEST,
                json!(1),
            ),
            (
                r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":7}"#,
                INVALID_REQUEST,
                json!("a"),
            ),
            (r#"{"jsonrpc":"2.0","id":"a"}"#, INVALID_REQUEST, json!("a")),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"x","params":[1]}"#,
                INVALID_REQUEST,
                json!(2),
            ),
        ];
        for (body, code, id) in bad {
            let (got_id, e) = Incoming::parse(body.as_bytes()).expect_err(body);
            assert_eq!(
                (e.code, e.status, got_id),
                (code, StatusCode::BAD_REQUEST, id),
                "{body}"
            );
        }
        let note =
            Incoming::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(note.id.is_none() && note.params.is_empty());
        let response = Incoming::parse(br#"{"jsonrpc":"2.0","id":5,"result":{}}"#).unwrap();
        assert!(response.method.is_none() && response.id == Some(json!(5)));
    }

    fn modern(method: &str, meta: Value) -> Incoming {
        Incoming {
            id: Some(json!(1)),
            method: Some(method.into()),
            params: json!({"_meta": meta, "name": "move"})
                .as_object()
                .cloned()
                .unwrap(),
        }
    }

    fn caps(version: &str) -> Value {
        json!({META_VERSION: version, META_CAPABILITIES: {}})
    }

    fn code(result: Result<Route, RpcError>) -> Result<Route, i64> {
        result.map_err(|e| e.code)
    }

    #[test]
    fn modern_requests_are_checked_in_order() {
        let store = McpSessions::new(4, MCP_SESSION_IDLE);
        let none = headers(&[]);
        let cases: Vec<(HeaderMap, Incoming, Result<Route, i64>)> = vec![
            (
                none.clone(),
                modern("tools/list", caps("2026-07-28")),
                Ok(Route::Modern),
            ),
            (
                headers(&[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "move"),
                ]),
                modern("tools/call", caps("2026-07-28")),
                Ok(Route::Modern),
            ),
            (
                none.clone(),
                modern("tools/list", caps("1900-01-01")),
                Err(UNSUPPORTED_VERSION),
            ),
            (
                none.clone(),
                modern("tools/list", caps("2025-11-25")),
                Err(INVALID_REQUEST),
            ),
            (
                headers(&[("mcp-protocol-version", "2099-01-01")]),
                modern("tools/list", caps("2026-07-28")),
                Err(UNSUPPORTED_VERSION),
            ),
            (
                headers(&[("mcp-protocol-version", "2025-11-25")]),
                modern("tools/list", caps("2026-07-28")),
                Err(HEADER_MISMATCH),
            ),
            (
                headers(&[("mcp-method", "tools/list")]),
                modern("tools/call", caps("2026-07-28")),
                Err(HEADER_MISMATCH),
            ),
            (
                headers(&[("mcp-name", "hp_delta")]),
                modern("tools/call", caps("2026-07-28")),
                Err(HEADER_MISMATCH),
            ),
            (
                none.clone(),
                modern("tools/list", json!({META_VERSION: "2026-07-28"})),
                Err(INVALID_PARAMS),
            ),
            (
                headers(&[("mcp-protocol-version", "2026-07-28")]),
                modern("tools/list", json!({})),
                Err(INVALID_PARAMS),
            ),
            (
                none.clone(),
                modern("tools/list", json!({META_VERSION: 7})),
                Err(INVALID_PARAMS),
            ),
            // No session and no version: told how to start.
            (
                none.clone(),
                modern("tools/list", json!({})),
                Err(INVALID_REQUEST),
            ),
            (
                headers(&[("mcp-protocol-version", "2025-11-25")]),
                modern("tools/list", json!({})),
                Err(INVALID_REQUEST),
            ),
            (
                none.clone(),
                modern("initialize", json!({})),
                Ok(Route::Initialize),
            ),
            (
                headers(&[("mcp-session-id", "nope")]),
                modern("tools/list", json!({})),
                Err(INVALID_REQUEST),
            ),
        ];
        for (i, (headers, msg, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                code(route(&headers, &msg, Opened::Here(&store), "t")),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn legacy_sessions_check_tenant_and_version_header() {
        let store = McpSessions::new(4, MCP_SESSION_IDLE);
        let id = store.open("acme", "2025-06-18");
        assert_eq!(id.len(), SESSION_ID_LEN);
        let msg = modern("tools/list", json!({}));
        let with = |version: Option<&str>| {
            let mut pairs = vec![("mcp-session-id", id.as_str())];
            if let Some(v) = version {
                pairs.push(("mcp-protocol-version", v));
            }
            headers(&pairs)
        };
        assert_eq!(
            code(route(&with(None), &msg, Opened::Here(&store), "acme")),
            Ok(Route::Legacy)
        );
        assert_eq!(
            code(route(
                &with(Some("2025-06-18")),
                &msg,
                Opened::Here(&store),
                "acme"
            )),
            Ok(Route::Legacy)
        );
        assert_eq!(
            code(route(
                &with(Some("2025-11-25")),
                &msg,
                Opened::Here(&store),
                "acme"
            )),
            Err(HEADER_MISMATCH)
        );
        assert_eq!(
            code(route(
                &with(Some("1999-01-01")),
                &msg,
                Opened::Here(&store),
                "acme"
            )),
            Err(UNSUPPORTED_VERSION)
        );
        let other = route(&with(None), &msg, Opened::Here(&store), "default").unwrap_err();
        assert_eq!(other.status, StatusCode::NOT_FOUND);
        let init = modern("initialize", json!({}));
        assert_eq!(
            code(route(&with(None), &init, Opened::Here(&store), "acme")),
            Err(INVALID_REQUEST)
        );
    }

    #[test]
    fn initialize_echoes_a_known_version_or_offers_the_latest_legacy() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate("2026-07-28"), LATEST_LEGACY);
        assert_eq!(negotiate("2024-11-05"), LATEST_LEGACY);
        assert_eq!(negotiate(""), LATEST_LEGACY);
    }

    #[test]
    fn sessions_expire_evict_the_least_recent_and_end() {
        let idle = Duration::from_secs(60);
        let store = McpSessions::new(2, idle);
        let t0 = Instant::now();
        let a = store.open_at("t", "2025-11-25", t0);
        let b = store.open_at("t", "2025-11-25", t0 + Duration::from_secs(1));
        // Using `a` makes `b` the least recently used.
        assert_eq!(
            store.touch_at(&a, "t", t0 + Duration::from_secs(2)),
            Some("2025-11-25")
        );
        let c = store.open_at("t", "2025-06-18", t0 + Duration::from_secs(3));
        assert_eq!(store.touch_at(&b, "t", t0 + Duration::from_secs(4)), None);
        assert_eq!(
            store.touch_at(&c, "t", t0 + Duration::from_secs(4)),
            Some("2025-06-18")
        );
        // Idle past the limit: gone, and stays gone.
        let late = t0 + Duration::from_secs(4) + idle + Duration::from_secs(1);
        assert_eq!(store.touch_at(&c, "t", late), None);
        assert_eq!(store.touch_at(&c, "t", t0 + Duration::from_secs(5)), None);
        assert_eq!(store.lock().len(), 1);
        // Another tenant cannot see or end it; its own can, once.
        assert_eq!(store.touch_at(&a, "u", t0 + Duration::from_secs(5)), None);
        assert!(!store.close(&a, "u"));
        assert!(store.close(&a, "t"));
        assert!(!store.close(&a, "t"));
    }

    #[test]
    fn one_tenant_evicts_only_its_own_sessions_past_its_share() {
        let cap = MCP_TENANT_FLOOR * MCP_TENANT_SHARE * 2;
        let share = cap / MCP_TENANT_SHARE;
        let store = McpSessions::new(cap, Duration::from_secs(60));
        let t0 = Instant::now();
        let theirs: Vec<String> = (0..share)
            .map(|_| store.open_at("victim", "2025-11-25", t0))
            .collect();
        for i in 0..cap * 2 {
            store.open_at("flood", "2025-11-25", t0 + Duration::from_millis(i as u64));
        }
        let later = t0 + Duration::from_secs(30);
        for id in &theirs {
            assert_eq!(store.touch_at(id, "victim", later), Some("2025-11-25"));
        }
        let flood = store
            .lock()
            .values()
            .filter(|s| s.tenant_id == "flood")
            .count();
        assert!(flood <= share, "{flood} > {share}");
    }

    #[test]
    fn modern_results_carry_result_type_hints_and_identity() {
        let r = Era::Modern.complete(json!({"tools": []}), Some(TOOLS_LIST_CACHE));
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["ttlMs"], json!(TOOLS_LIST_TTL_MS));
        assert_eq!(r["cacheScope"], "private");
        assert_eq!(r["_meta"][META_SERVER_INFO]["name"], "questd");
        let r = Era::Modern.complete(
            json!({"isError": false, "_meta": {"questd/audit": {}}}),
            None,
        );
        assert!(r.get("ttlMs").is_none() && r["_meta"].get("questd/audit").is_some());
        let legacy = Era::Legacy.complete(json!({"tools": []}), Some(TOOLS_LIST_CACHE));
        assert_eq!(legacy, json!({"tools": []}));
    }
}
