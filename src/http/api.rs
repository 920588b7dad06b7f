//! The REST API: health, campaigns, sessions, snapshots, the actions log.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppState, DEFAULT_TENANT, check_tenant, json_body, tenant_header, token_role};
use crate::error::{ApiError, ErrorCode};
use crate::game::{BUILTIN_CAMPAIGNS, Campaign};
use crate::session::{CreateSession, GetSnapshot, ListLive, Lookup, SessionHandle};
use crate::storage::SessionMeta;

/// Most actions returned in one page.
pub const MAX_ACTIONS_PAGE: u32 = 1000;
const DEFAULT_ACTIONS_PAGE: u32 = 100;
/// Lookups tried when a session stops between lookup and use.
const RETRIES: usize = 3;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/api/v1/campaigns", web::get().to(campaigns))
        .route("/api/v1/sessions", web::post().to(create_session))
        .route("/api/v1/sessions", web::get().to(list_sessions))
        .route("/api/v1/sessions/{id}", web::get().to(get_session))
        .route("/api/v1/sessions/{id}/actions", web::get().to(actions));
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
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
    let campaign = match (body.get("campaign_id"), body.get("campaign")) {
        (_, Some(inline)) => Campaign::from_value(inline, tools).map_err(|e| {
            ApiError::new(ErrorCode::InvalidCampaign, "the campaign is invalid")
                .with("problems", json!(e.problems))
        })?,
        (Some(Value::String(id)), None) => match Campaign::builtin(id, tools) {
            Some(c) => c.map_err(|e| ApiError::internal(&e))?,
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
            campaign,
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

/// Checks tenant and token against a session's meta.
fn authorize(req: &HttpRequest, meta: &SessionMeta) -> Result<(), ApiError> {
    check_tenant(req, meta)?;
    token_role(meta, bearer(req)?)
        .map(|_| ())
        .ok_or_else(|| ApiError::unauthorized("the token does not open this session"))
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
    let meta = state
        .store
        .session_meta(&path)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .ok_or_else(|| ApiError::not_found(format!("no session {path}")))?;
    authorize(&req, &meta)?;
    let limit = query
        .limit
        .unwrap_or(DEFAULT_ACTIONS_PAGE)
        .clamp(1, MAX_ACTIONS_PAGE);
    let page = state
        .store
        .actions(&meta.session_id, query.after_seq.unwrap_or(0), limit)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(page))
}
