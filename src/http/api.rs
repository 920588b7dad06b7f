//! The REST API: health, campaigns, sessions, snapshots, the actions log.
//!
//! Every route judges what it can of the caller before it reads a body:
//! a route that needs a credential refuses a request without one (a key
//! this server knows, or a bearer token) before a byte of the body is read,
//! and anonymous creation is counted against its address first. Answers
//! that carry tokens (a new session, the public list) say
//! `Cache-Control: no-store`, and their links are built by
//! [`super::guard::link_base`], never from what an untrusted client forwards.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{
    authorize_stored, bearer, caller, creator, credential_first, key_first, keyed_tenant,
    player_seat,
};
use super::auth::{DEFAULT_TENANT, same_secret};
use super::body::{body_bytes, json_body_or_empty, parse_json};
use super::campaign::campaign_start;
use super::created::{Links, created, no_store};
use super::locate::{call_in_session, send_to_session};
use super::peers::Routing;
use super::routes::{add, on, read};
use super::state::AppState;
use super::stored::{audit_ledger, page_limit, seq_page, stored_meta};
use crate::error::{ApiError, ErrorCode};
use crate::game::approvals::ApprovalRule;
use crate::game::{BUILTIN_CAMPAIGNS, Campaign};
use crate::ids::{SessionId, TenantId};
use crate::protocol::http::{
    ActionsPage, AuditLedgerPage, CampaignSummary, Health, LiveSession, NpcActivated,
    NpcActivation, SessionCreated,
};
use crate::protocol::requests::{AuditQuery, NewSession, SeqPage};
use crate::session::{CallOrigin, CallTool, CreateSession, GetSnapshot, ListLive, SessionHandle};
use crate::storage::Visibility;
use crate::tools::Role;

pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    add(cfg, Method::GET, "/healthz", healthz);
    add(cfg, Method::GET, "/metrics", metrics);
    read(cfg, "/api/v1/campaigns", campaigns);
    let sessions = "/api/v1/sessions";
    cfg.service(
        web::resource(sessions)
            .wrap(actix_web::middleware::from_fn(super::compress::compress))
            .route(on(Method::POST, sessions).to(create_session))
            .route(on(Method::GET, sessions).to(list_sessions))
            .default_service(web::to(super::errors::no_route)),
    );
    read(cfg, "/api/v1/sessions/{id}", get_session);
    read(cfg, "/api/v1/sessions/{id}/actions", actions);
    read(cfg, "/api/v1/sessions/{id}/audit", audit);
    add(
        cfg,
        Method::POST,
        "/api/v1/sessions/{id}/npcs/{npc_id}/activate",
        activate_npc,
    );
}

#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The node is up", body = Health<'static>)))]
async fn healthz(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(Health::ok(&state.store.node().id))
}

/// Prometheus text format; behind `QUESTD_METRICS_KEY` when it is set.
#[utoipa::path(get, path = "/metrics", tag = "health",
    security((), ("metrics_key" = [])),
    responses(
        (status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"),
        (status = 401, description = "`QUESTD_METRICS_KEY` is set and the request does not carry it", body = crate::protocol::http::ErrorBody)))]
async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if let Some(key) = &state.metrics_key {
        let given = bearer(&req).unwrap_or_default();
        if !same_secret(key.expose(), given) {
            return Err(ApiError::unauthorized(
                "send Authorization: Bearer <QUESTD_METRICS_KEY>",
            ));
        }
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render()))
}

#[utoipa::path(get, path = "/api/v1/campaigns", tag = "sessions",
    responses((status = 200, description = "The built-in campaigns", body = Vec<CampaignSummary<'static>>)))]
async fn campaigns() -> HttpResponse {
    // Every built-in parses: the server checked them all at start.
    let campaigns: Vec<Campaign> = BUILTIN_CAMPAIGNS
        .iter()
        .filter_map(|(_, text)| serde_json::from_str(text).ok())
        .collect();
    let list: Vec<CampaignSummary<'_>> = campaigns.iter().map(CampaignSummary::from).collect();
    HttpResponse::Ok().json(list)
}

/// Creates a session. With a key it belongs to the key's tenant, which may
/// create `QUESTD_KEY_CREATE_PER_MINUTE` (bursts of
/// `QUESTD_KEY_CREATE_BURST`); without one it belongs to `default`, naming
/// another tenant is refused (`X-Tenant-ID` alone grants nothing), each
/// client address may create `QUESTD_CREATE_PER_MINUTE` (bursts of
/// `QUESTD_CREATE_BURST`) and send `QUESTD_CREATE_KIB_PER_MINUTE` KiB of
/// campaigns (bursts of `QUESTD_CREATE_KIB_BURST`), and the session is
/// deleted once unplayed for `QUESTD_ANONYMOUS_RETENTION_HOURS`. Either
/// way a tenant holds at most `QUESTD_MAX_SESSIONS_PER_TENANT` live
/// sessions on the node.
#[utoipa::path(post, path = "/api/v1/sessions", tag = "sessions",
    security((), ("internal_key" = [])),
    request_body(content = NewSession, description = "A built-in campaign or an inline one"),
    responses(
        (status = 201, description = "The new session", body = SessionCreated<'static>),
        (status = 400, description = "Bad body, unknown built-in campaign", body = crate::protocol::http::ErrorBody), (status = 401, description = "A tenant named without its key", body = crate::protocol::http::ErrorBody), (status = 422, description = "The inline campaign is invalid (`problems` lists why)", body = crate::protocol::http::ErrorBody), (status = 413, description = "Without a key: a body larger than an address may send at once (`QUESTD_CREATE_KIB_BURST`)", body = crate::protocol::http::ErrorBody), (status = 429, description = "Too many sessions or campaign bytes from this address, too many sessions created for this tenant, or the tenant holds its most live sessions", body = crate::protocol::http::ErrorBody), (status = 503, description = "The node holds its most sessions or session state", body = crate::protocol::http::ErrorBody)))]
async fn create_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (tenant_id, anonymous) = creator(&req, &state, "creating a session for a tenant")?;
    let body = body_bytes(body).await?;
    // Charged before the campaign is parsed or checked: an address past its
    // bytes costs no work.
    if anonymous {
        state.admission.check_create_bytes(&req, body.len())?;
    }
    let body = NewSession::from(parse_json(&body)?);
    let visibility = match &body.visibility {
        None | Some(Value::Null) => Visibility::Private,
        Some(Value::String(v)) if v == "private" => Visibility::Private,
        Some(Value::String(v)) if v == "public" => Visibility::Public,
        Some(_) => {
            return Err(ApiError::bad_request(
                "\"visibility\" is \"private\" (the default) or \"public\"",
            ));
        }
    };
    let approval = match &body.approval {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            ApprovalRule::from_value(v, state.registry.names(), "approval").map_err(
                |problems| {
                    ApiError::new(ErrorCode::InvalidCampaign, "the approval rule is invalid")
                        .with("problems", json!(problems))
                },
            )?,
        ),
    };
    let mut start = campaign_start(&state, body).await?;
    if approval.is_some() {
        start.state.approvals.rule = approval.map(Box::new);
        // No longer the shared start's state: stored whole.
        start.shared = None;
    }
    let new = state
        .hub
        .send(CreateSession {
            tenant_id,
            visibility,
            state: start.state,
            shared: start.shared,
            anonymous,
        })
        .await??;
    Ok(created(&req, &state, &new))
}

/// The live public sessions of a tenant, each with its spectator token and
/// a watch link; private sessions and player tokens are never listed.
/// Without a key the tenant is `default` (naming another is `401`: the
/// header alone grants nothing); with a key, the key's tenant.
#[utoipa::path(get, path = "/api/v1/sessions", tag = "sessions",
    security((), ("internal_key" = [])),
    params(("X-Tenant-ID" = Option<String>, Header, description = "The tenant: without a key only `default`; with the internal key any (default `default`); a tenant key's own")),
    responses(
        (status = 200, description = "The tenant's live public sessions", body = Vec<LiveSession<'static>>),
        (status = 401, description = "Another tenant than `default` named without its key, or an unknown key", body = crate::protocol::http::ErrorBody),
        (status = 403, description = "A tenant key and another tenant's `X-Tenant-ID`", body = crate::protocol::http::ErrorBody)))]
async fn list_sessions(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let tenant_id = keyed_tenant(&req, &state, "listing a tenant's sessions")?
        .unwrap_or_else(|| TenantId::from(DEFAULT_TENANT));
    let list = state.hub.send(ListLive { tenant_id }).await?;
    let links = Links::of(&req, &state);
    // Built here, not by a `From` in `protocol`: the hub imports
    // `protocol`, so `protocol` does not import the hub.
    let list: Vec<LiveSession<'_>> = list
        .iter()
        .map(|l| LiveSession {
            session_id: &l.session_id,
            title: &l.title,
            players: l.players,
            spectators: l.spectators,
            turns: l.turns,
            spectator_token: &l.spectator_token,
            watch_url: links.page(l.session_id.as_str(), &l.spectator_token),
        })
        .collect();
    Ok(HttpResponse::Ok().insert_header(no_store()).json(list))
}

#[utoipa::path(get, path = "/api/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The session's snapshot (its game state)", body = crate::protocol::Snapshot),
        (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A tenant key and another tenant's `X-Tenant-ID`", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn get_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    key_first(&req, &state)?;
    let authorize = |handle: &SessionHandle| caller(&req, &state, handle).map(drop);
    let routed = send_to_session(&state, &path, authorize, |()| GetSnapshot).await?;
    let (_, snapshot) = Routing::of(&req).here(routed)?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(snapshot))
}

#[utoipa::path(get, path = "/api/v1/sessions/{id}/actions", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), SeqPage),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "A page of the actions log", body = ActionsPage<'static>),
        (status = 400, description = "Bad query", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A tenant key and another tenant's `X-Tenant-ID`", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn actions(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<SeqPage>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    key_first(&req, &state)?;
    let query = seq_page(query)?;
    let meta = stored_meta(&state, &path).await?;
    authorize_stored(&req, &state, &meta, false).await?;
    let limit = page_limit(query.limit);
    let page = state
        .store
        .actions(&meta.session_id, query.after_seq.unwrap_or(0), limit)
        .await?;
    Ok(HttpResponse::Ok().json(ActionsPage::from(&page)))
}

/// The session's audit ledger, oldest first (player token only).
#[utoipa::path(get, path = "/api/v1/sessions/{id}/audit", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), AuditQuery),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "A page of the session's audit ledger", body = AuditLedgerPage<'static>),
        (status = 400, description = "Bad query", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A spectator token; a tenant key and another tenant's `X-Tenant-ID`", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn audit(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    key_first(&req, &state)?;
    let meta = stored_meta(&state, &path).await?;
    authorize_stored(&req, &state, &meta, true).await?;
    audit_ledger(&state, &path, query, |_| Ok(())).await
}

/// The body of an NPC's activation; an empty body activates.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct Activation {
    /// `false` deactivates the NPC; absent or `null` activates it.
    #[serde(default)]
    active: Option<bool>,
}

/// A person activates (or, with `{"active": false}`, deactivates) an NPC.
/// Runs as the `activate_npc` tool inside the session, so it is journalled,
/// audited and seen live by every connection.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/npcs/{npc_id}/activate", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), ("npc_id" = String, Path, description = "The NPC")),
    security(("player_token" = []), ("internal_key" = [])),
    request_body(content = Activation, description = "`{\"active\": bool}`, or empty to activate"),
    responses(
        (status = 200, description = "The NPC's new state and the turn that recorded it", body = NpcActivated),
        (status = 400, description = "Bad body, or an `X-Trace-ID` that is not 1 to 128 printable ASCII characters (`CONTEXT_INVALID`)", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A spectator token", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session or NPC", body = crate::protocol::http::ErrorBody), (status = 408, description = "The session stayed busy for 30 s (a turn runs, or waits for a person's approval): the call is still queued and will run unless the node stops first: a queued call is not stored (`TIMEOUT`)", body = crate::protocol::http::ErrorBody)))]
async fn activate_npc(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(SessionId, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (session_id, npc_id) = path.into_inner();
    credential_first(&req, &state)?;
    let trace_id = super::service::trace_id(&req)?;
    // No body means "activate"; a body must be a JSON object whose optional
    // `active` is a boolean.
    let body = json_body_or_empty(body).await?;
    if !body.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    let active = serde_json::from_value::<Activation>(body)
        .map_err(|_| ApiError::bad_request("\"active\" must be true or false"))?
        .active
        .unwrap_or(true);
    let routed = call_in_session(
        &state,
        &session_id,
        &trace_id,
        |handle| player_seat(&req, &state, handle).map(drop),
        |()| CallTool {
            tool: "activate_npc".into(),
            args: json!({"npc_id": npc_id, "active": active}),
            args_hash: None,
            role: Role::Player,
            trace_id: trace_id.clone(),
            origin: CallOrigin::default(),
        },
    )
    .await?;
    let (_, done) = Routing::of(&req).here(routed)?;
    match done.outcome {
        Ok(result) => {
            // The tool's own result; one that does not read back is a bug.
            let npc: NpcActivation =
                serde_json::from_value(result.value).map_err(|e| ApiError::internal(&e))?;
            Ok(HttpResponse::Ok().json(NpcActivated {
                npc,
                turn_id: done.turn_id,
                call_id: done.call_id,
                seq: done.seq,
            }))
        }
        // An unknown NPC is a 404 like any unknown resource over HTTP.
        Err(e) => Err(super::errors::tool_refused(e)),
    }
}
