//! The operator console's data API (`/api/v1/admin/…`, docs/protocol.md
//! §1.17): the live sessions of every tenant on this node, this node's
//! figures (from the same [`crate::metrics::Metrics`] `/metrics` renders),
//! a session's story and audit ledger, and closing a session for good.
//!
//! Only the internal key opens it: it shows every tenant and the whole
//! node, which no tenant key may see. The page itself (`/admin`) is a
//! static file (`static_files.rs`) that asks for the key.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::body::page_size;
use super::locate::send_to_session;
use super::peers::Routing;
use super::state::AppState;
use super::stored::{audit_ledger, seq_page, stored_meta};
use crate::error::{ApiError, ErrorCode};
use crate::ids::SessionId;
use crate::protocol::http::{
    AdminSession, AdminSessions, AdminTimers, NodeFigures, SessionClosed, StoryPage,
};
use crate::protocol::requests::{AuditQuery, SeqPage};
use crate::session::{CloseSession, GetSnapshot, ListAll, MAX_STORED_BACKLOG_CHARS, Running};
use crate::storage::rfc3339;

/// Sessions listed when `?limit=` is not given.
pub const DEFAULT_SESSIONS: u32 = 100;
/// Most sessions listed at once.
pub const MAX_SESSIONS: u32 = 1000;
/// Story frames in a page when `?limit=` is not given.
pub const DEFAULT_STORY_PAGE: u32 = 100;
/// Most story frames in a page.
pub const MAX_STORY_PAGE: u32 = 500;
/// And their size at most, in characters (as a resume's).
pub const MAX_STORY_CHARS: u64 = MAX_STORED_BACKLOG_CHARS;

/// What the refusals name.
const CONSOLE: &str = "the operator console";

pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    const SCOPE: &str = "/api/v1/admin";
    let on = |method, path: &str| super::routes::on(method, &format!("{SCOPE}{path}"));
    cfg.service(
        web::scope(SCOPE)
            .wrap(actix_web::middleware::from_fn(super::compress::compress))
            .route("/sessions", on(Method::GET, "/sessions").to(sessions))
            .route("/node", on(Method::GET, "/node").to(node))
            .route(
                "/sessions/{id}/story",
                on(Method::GET, "/sessions/{id}/story").to(story),
            )
            .route(
                "/sessions/{id}/audit",
                on(Method::GET, "/sessions/{id}/audit").to(audit),
            )
            .route(
                "/sessions/{id}/timers",
                on(Method::GET, "/sessions/{id}/timers").to(timers),
            )
            .route(
                "/sessions/{id}/close",
                on(Method::POST, "/sessions/{id}/close").to(close),
            ),
    );
}

/// Answers `401`/`403` unless the request carries the internal key.
fn operator(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    state.keys.require_internal(req, CONSOLE)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SessionsQuery {
    limit: Option<u32>,
}

/// The live sessions of every tenant on this node, most recently active
/// first, at most `?limit=` (default 100, 1 to 1000).
#[utoipa::path(get, path = "/api/v1/admin/sessions", tag = "admin", security(("internal_key" = [])),
    params(SessionsQuery),
    responses((status = 200, description = "Live sessions of every tenant on this node", body = AdminSessions<'static>), (status = 401, description = "No operator key", body = crate::protocol::http::ErrorBody)))]
async fn sessions(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: Result<web::Query<SessionsQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    operator(&req, &state)?;
    let query = query.map_err(super::body::bad_query(
        "limit is a whole number (e.g. ?limit=50)",
    ))?;
    let limit = page_size(query.limit, DEFAULT_SESSIONS, MAX_SESSIONS) as usize;
    let all = state.hub.send(ListAll { limit }).await?;
    let node_id = state.store.node().id.as_str();
    // Built here, not by a `From` in `protocol`: the hub imports
    // `protocol`, so `protocol` does not import the hub.
    let sessions = all
        .sessions
        .iter()
        .map(|l| AdminSession {
            tenant_id: &l.tenant_id,
            session_id: &l.session_id,
            title: &l.title,
            campaign_id: &l.campaign_id,
            visibility: l.visibility,
            players: l.players,
            spectators: l.spectators,
            turns: l.turns,
            queued: l.queued,
            owner_node: node_id,
            last_activity: rfc3339(l.last_activity_ms),
            last_activity_ms: l.last_activity_ms,
            closing: l.closing,
        })
        .collect();
    Ok(HttpResponse::Ok().json(AdminSessions {
        node_id,
        total: all.total,
        limit,
        sessions,
    }))
}

/// This node's figures, from the counters `/metrics` renders.
#[utoipa::path(get, path = "/api/v1/admin/node", tag = "admin", security(("internal_key" = [])),
    responses((status = 200, description = "This node's figures", body = NodeFigures<'static>), (status = 401, description = "No operator key", body = crate::protocol::http::ErrorBody)))]
async fn node(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    operator(&req, &state)?;
    let metrics = &state.metrics;
    Ok(HttpResponse::Ok().json(NodeFigures::of(
        &state.store.node().id,
        metrics,
        metrics.started.elapsed(),
    )))
}

/// A page of a session's story as stored (the journal resumes read), any
/// tenant's, live or not, closed or not.
#[utoipa::path(get, path = "/api/v1/admin/sessions/{id}/story", tag = "admin", security(("internal_key" = [])),
    params(("id" = String, Path, description = "The session id"), SeqPage),
    responses((status = 200, description = "A page of the session's stored story", body = StoryPage<'static>), (status = 401, description = "No operator key", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn story(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<SeqPage>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    operator(&req, &state)?;
    let query = seq_page(query)?;
    let meta = stored_meta(&state, &path).await?;
    let limit = page_size(query.limit, DEFAULT_STORY_PAGE, MAX_STORY_PAGE);
    let after = query.after_seq.unwrap_or(0);
    let store = &state.store;
    // One more than the page, to know whether more follow.
    let mut rows = store
        .frames_after(&meta.session_id, after, limit + 1, MAX_STORY_CHARS)
        .await?;
    let mut more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let last = rows.last().map(|(seq, _)| *seq);
    if let (false, Some(last)) = (more, last) {
        // Fewer than asked: the end, or the size bound cut the page.
        more = !store
            .frames_after(&meta.session_id, last, 1, u64::MAX)
            .await?
            .is_empty();
    }
    let frames = rows
        .iter()
        .map(|(_, frame)| serde_json::from_str(frame))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::internal(&e))?;
    let owner = owner_node(&state, &path).await?;
    Ok(HttpResponse::Ok().json(StoryPage {
        session_id: &meta.session_id,
        tenant_id: &meta.tenant_id,
        title: &meta.title,
        campaign_id: &meta.campaign_id,
        owner_node: owner.as_deref(),
        closed_at: meta.closed_at.map(rfc3339),
        frames,
        next_after_seq: last.filter(|_| more),
    }))
}

/// The node running the session now, if any (docs/protocol.md §15): this one
/// when it runs it, else whichever holds a live claim (PostgreSQL).
async fn owner_node(state: &AppState, id: &SessionId) -> Result<Option<String>, ApiError> {
    let here = state
        .hub
        .send(Running {
            session_id: id.clone(),
        })
        .await?;
    if here.is_some() {
        return Ok(Some(state.store.node().id.to_string()));
    }
    state
        .store
        .owner(id)
        .await
        .map(|node| node.map(String::from))
        .map_err(|e| ApiError::internal(&e))
}

/// A session's audit ledger, as its player reads it (§1.8), any tenant's.
#[utoipa::path(get, path = "/api/v1/admin/sessions/{id}/audit", tag = "admin", operation_id = "admin_audit", security(("internal_key" = [])),
    params(("id" = String, Path, description = "The session id"), AuditQuery),
    responses((status = 200, description = "A page of the session's audit ledger", body = crate::protocol::http::AuditLedgerPage<'static>), (status = 401, description = "No operator key", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn audit(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    operator(&req, &state)?;
    audit_ledger(&state, &path, query, |_| Ok(())).await
}

/// A session's pending timers (docs/protocol.md, "Durable timers"), any
/// tenant's, as its snapshot lists them. The session is loaded to answer,
/// as a snapshot read loads it: its timers live in its save state.
#[utoipa::path(get, path = "/api/v1/admin/sessions/{id}/timers", tag = "admin", operation_id = "admin_timers", security(("internal_key" = [])),
    params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The session's pending timers, soonest first", body = AdminTimers), (status = 401, description = "No operator key", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody), (status = 410, description = "The session is closed", body = crate::protocol::http::ErrorBody)))]
async fn timers(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    operator(&req, &state)?;
    let routed = send_to_session(&state, &path, |_| Ok(()), |()| GetSnapshot).await?;
    let (_, snapshot) = Routing::of(&req).here(routed)?;
    let mut answer: AdminTimers =
        serde_json::from_str(&snapshot).map_err(|e| ApiError::internal(&e))?;
    answer.session_id = path.to_string();
    Ok(HttpResponse::Ok().json(answer))
}

/// Closes a session for good. The session refuses new work at once; the
/// answer comes once the close is stored; its running turn and the chats
/// acknowledged behind it still run, then its connections are closed with
/// 4000 and it unloads, never to load again. Closing a closed session
/// answers the same.
#[utoipa::path(post, path = "/api/v1/admin/sessions/{id}/close", tag = "admin", security(("internal_key" = [])),
    params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The session is closed for good", body = SessionClosed<'static>), (status = 401, description = "No operator key", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn close(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    operator(&req, &state)?;
    let meta = stored_meta(&state, &path).await?;
    let closed_at = match meta.closed_at {
        Some(at) => at,
        None => match send_to_session(&state, &path, |_| Ok(()), |()| CloseSession)
            .await
            .and_then(|routed| Routing::of(&req).here(routed))
        {
            Ok((_, at)) => at,
            // Closed meanwhile, by another request.
            Err(e) if e.code == ErrorCode::SessionClosed => {
                stored_meta(&state, &path).await?.closed_at.ok_or(e)?
            }
            Err(e) => return Err(e),
        },
    };
    Ok(HttpResponse::Ok().json(SessionClosed {
        session_id: &meta.session_id,
        closed: true,
        closed_at: rfc3339(closed_at),
    }))
}
