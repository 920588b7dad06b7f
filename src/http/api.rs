//! The REST API: health, campaigns, sessions, snapshots, the actions log.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    AppState, DEFAULT_TENANT, TokenRole, check_tenant, json_body, json_body_or_empty,
    tenant_header, token_role,
};
use crate::error::{ApiError, ErrorCode, Reason};
use crate::game::{BUILTIN_CAMPAIGNS, Campaign};
use crate::session::{
    CallOrigin, CallTool, CreateSession, GetSnapshot, ListLive, Lookup, SessionHandle,
};
use crate::storage::SessionMeta;
use crate::tools::Role;

/// Most actions returned in one page.
pub const MAX_ACTIONS_PAGE: u32 = 1000;
const DEFAULT_ACTIONS_PAGE: u32 = 100;
/// Lookups tried when a session stops between lookup and use.
const RETRIES: usize = 3;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/metrics", web::get().to(metrics))
        .route("/api/v1/campaigns", web::get().to(campaigns))
        .route("/api/v1/sessions", web::post().to(create_session))
        .route("/api/v1/sessions", web::get().to(list_sessions))
        .route("/api/v1/sessions/{id}", web::get().to(get_session))
        .route("/api/v1/sessions/{id}/actions", web::get().to(actions))
        .route("/api/v1/sessions/{id}/audit", web::get().to(audit))
        .route(
            "/api/v1/sessions/{id}/npcs/{npc_id}/activate",
            web::post().to(activate_npc),
        );
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Prometheus text format.
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}

async fn campaigns() -> HttpResponse {
    let list: Vec<Value> = BUILTIN_CAMPAIGNS
        .iter()
        .filter_map(|(_, text)| serde_json::from_str::<Value>(text).ok())
        .map(|c| json!({"campaign_id": c["campaign_id"], "title": c["title"], "description": c["description"]}))
        .collect();
    HttpResponse::Ok().json(list)
}

async fn create_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = json_body(body).await?;
    let tools = state.registry.names();
    let start = match (body.get("campaign_id"), body.get("campaign")) {
        (_, Some(inline)) => Campaign::from_value(inline, tools)
            .map_err(|e| {
                ApiError::new(ErrorCode::InvalidCampaign, "the campaign is invalid")
                    .with("problems", json!(e.problems))
            })?
            .into_state(),
        (Some(Value::String(id)), None) => match state.builtin_starts.start(id) {
            Some(start) => start,
            None => {
                let known: Vec<&str> = BUILTIN_CAMPAIGNS.iter().map(|(id, _)| *id).collect();
                return Err(ApiError::bad_request(format!(
                    "no built-in campaign {id:?}; built-in: {}",
                    known.join(", ")
                )));
            }
        },
        _ => {
            return Err(ApiError::bad_request(
                "give \"campaign_id\" (a string) or \"campaign\" (an inline campaign)",
            ));
        }
    };
    let tenant_id = tenant_header(&req).unwrap_or_else(|| DEFAULT_TENANT.into());
    let handle = state
        .hub
        .send(CreateSession {
            tenant_id,
            state: start,
        })
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(|e| ApiError::internal(&e))?;
    let meta = &handle.meta;
    let info = req.connection_info();
    let scheme = if info.scheme() == "https" {
        "wss"
    } else {
        "ws"
    };
    let ws_url = format!(
        "{scheme}://{}/ws/sessions/{}?token={}",
        info.host(),
        meta.session_id,
        meta.player_token
    );
    Ok(HttpResponse::Created().json(json!({
        "session_id": meta.session_id,
        "player_token": meta.player_token,
        "spectator_token": meta.spectator_token,
        "ws_url": ws_url,
    })))
}

async fn list_sessions(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let tenant_id = tenant_header(&req).unwrap_or_else(|| DEFAULT_TENANT.into());
    let list = state
        .hub
        .send(ListLive { tenant_id })
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(list))
}

/// The token from `Authorization: Bearer <token>`.
fn bearer(req: &HttpRequest) -> Result<&str, ApiError> {
    req.headers()
        .get("Authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::unauthorized("send Authorization: Bearer <player or spectator token>")
        })
}

/// Checks tenant and token against a session's meta; answers the token's role.
fn authorize(req: &HttpRequest, meta: &SessionMeta) -> Result<TokenRole, ApiError> {
    check_tenant(req, meta)?;
    token_role(meta, bearer(req)?)
        .ok_or_else(|| ApiError::unauthorized("the token does not open this session"))
}

/// Like [`authorize`], for routes only the player token may use.
pub(super) fn authorize_player(req: &HttpRequest, meta: &SessionMeta) -> Result<(), ApiError> {
    match authorize(req, meta)? {
        TokenRole::Player => Ok(()),
        TokenRole::Spectator => Err(ApiError::new(
            ErrorCode::Forbidden,
            "this needs the player token",
        )),
    }
}

/// The live session, loaded from storage if needed; 404 if unknown.
pub async fn find_session(state: &AppState, id: &str) -> Result<SessionHandle, ApiError> {
    state
        .hub
        .send(Lookup {
            session_id: id.to_owned(),
        })
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(|e| ApiError::internal(&e))?
        .ok_or_else(|| ApiError::not_found(format!("no session {id}")))
}

async fn get_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    // A session that unloads between lookup and send is looked up again.
    let mut last_error = None;
    for _ in 0..RETRIES {
        let handle = find_session(&state, &path).await?;
        authorize(&req, &handle.meta)?;
        match handle.addr.send(GetSnapshot).await {
            Ok(snapshot) => {
                return Ok(HttpResponse::Ok()
                    .content_type("application/json")
                    .body(snapshot));
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.map_or_else(
        || ApiError::not_found(format!("no session {path}")),
        |e| ApiError::internal(&e),
    ))
}

/// A session's stored meta, without loading the session; 404 if unknown.
async fn stored_meta(state: &AppState, id: &str) -> Result<SessionMeta, ApiError> {
    state
        .store
        .session_meta(id)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .ok_or_else(|| ApiError::not_found(format!("no session {id}")))
}

/// A page size from `?limit=`: the default when absent, within 1..=max.
fn page_limit(asked: Option<u32>) -> u32 {
    asked
        .unwrap_or(DEFAULT_ACTIONS_PAGE)
        .clamp(1, MAX_ACTIONS_PAGE)
}

#[derive(Deserialize)]
struct ActionsQuery {
    after_seq: Option<u64>,
    limit: Option<u32>,
}

async fn actions(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: Result<web::Query<ActionsQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?;
    let meta = stored_meta(&state, &path).await?;
    authorize(&req, &meta)?;
    let limit = page_limit(query.limit);
    let page = state
        .store
        .actions(&meta.session_id, query.after_seq.unwrap_or(0), limit)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(page))
}

#[derive(Deserialize)]
struct AuditQuery {
    after_id: Option<i64>,
    limit: Option<u32>,
}

/// The session's audit ledger, oldest first (player token only).
async fn audit(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?;
    let meta = stored_meta(&state, &path).await?;
    authorize_player(&req, &meta)?;
    let limit = page_limit(query.limit);
    let page = state
        .store
        .audit_page(&meta.session_id, query.after_id.unwrap_or(0), limit)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(page))
}

/// The trace id a caller sent in `X-Trace-ID`, or a fresh one.
pub fn trace_id(req: &HttpRequest) -> String {
    req.headers()
        .get("X-Trace-ID")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 128)
        .map_or_else(
            || format!("tr_{}", crate::session::random_token(24)),
            str::to_owned,
        )
}

/// A person activates (or, with `{"active": false}`, deactivates) an NPC.
/// Runs as the `activate_npc` tool inside the session, so it is journalled,
/// audited and seen live by every connection.
async fn activate_npc(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (session_id, npc_id) = path.into_inner();
    // No body means "activate"; a body must be a JSON object whose optional
    // `active` is a boolean.
    let body = json_body_or_empty(body).await?;
    let active = match body.get("active") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("\"active\" must be true or false")),
    };
    let handle = find_session(&state, &session_id).await?;
    authorize_player(&req, &handle.meta)?;
    let done = handle
        .addr
        .send(CallTool {
            tool: "activate_npc".into(),
            args: json!({"npc_id": npc_id, "active": active}),
            role: Role::Player,
            trace_id: trace_id(&req),
            origin: CallOrigin::default(),
        })
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(|r| ApiError::new(r.code, r.message))?;
    match done.outcome {
        Ok(result) => Ok(HttpResponse::Ok().json(json!({
            "npc_id": result["npc_id"], "active": result["active"], "changed": result["changed"],
            "turn_id": done.turn_id, "call_id": done.call_id, "seq": done.seq,
        }))),
        Err(e) => {
            // An unknown NPC is a 404 like any unknown resource over HTTP.
            let code = if e.reason == Reason::NotFound {
                ErrorCode::NotFound
            } else {
                e.code
            };
            Err(ApiError::new(code, e.message).with("reason", json!(e.reason)))
        }
    }
}
