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

mod eras;
mod rpc;
pub mod sessions;
mod tools;

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::idempotency;
use super::peers::Routing;
use super::service::{self, HeaderRules, ServiceContext};
use super::state::AppState;
use crate::tools::cut_name;
use eras::{
    DISCOVER_CACHE, Era, Opened, Route, SESSION_HEADER, TOOLS_LIST_CACHE, discover, initialize,
    route,
};
use rpc::{
    Accepts, Envelope, INVALID_REQUEST, Incoming, METHOD_NOT_FOUND, RpcAnswer, RpcError, api_error,
    header_text, read_body, unknown_session,
};

pub use eras::{LATEST_LEGACY, LEGACY_VERSIONS, MODERN_VERSIONS, SUPPORTED_VERSIONS};

pub use sessions::{
    MAX_MCP_SESSIONS, MCP_SESSION_IDLE, MCP_TENANT_FLOOR, MCP_TENANT_SHARE, McpSessions,
};
use tools::tools_call;

/// What every method but `POST` and `DELETE` is told.
const ALLOW: &str = "POST, DELETE";

/// Registers `/mcp`: `POST` (messages), `DELETE` (end a session), `405`
/// for everything else.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/mcp")
            .route(super::routes::on(actix_web::http::Method::POST, "/mcp").to(post))
            .route(super::routes::on(actix_web::http::Method::DELETE, "/mcp").to(delete))
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
