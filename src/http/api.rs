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

use super::cluster::Routing;
use super::{
    AppState, DEFAULT_TENANT, TokenRole, add, body_bytes, check_tenant, json_body_or_empty,
    no_session, on, parse_json, same_secret, send_to_session, tenant_header, token_role,
};
use crate::error::{ApiError, ErrorCode, Reason};
use crate::game::{BUILTIN_CAMPAIGNS, Campaign, GameState};
use crate::ids::SessionId;
use crate::protocol::http::{
    ActionsPage, AuditLedgerPage, CampaignSummary, Health, LiveSession, NpcActivated,
    NpcActivation, SessionCreated, SessionLinks,
};
use crate::session::{CallOrigin, CallTool, CreateSession, GetSnapshot, ListLive};
use crate::storage::{SessionMeta, Visibility};
use crate::tools::Role;
use actix_web::http::header::{CACHE_CONTROL, CacheDirective};

/// Most actions returned in one page.
pub const MAX_ACTIONS_PAGE: u32 = 1000;
const DEFAULT_ACTIONS_PAGE: u32 = 100;

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
            .route(on(Method::GET, sessions).to(list_sessions)),
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

/// A `GET` route whose answer goes out compressed when the client asks for
/// it and it is large enough (`compress`): what the page reads (and a
/// snapshot can be large).
pub(super) fn read<F, Args>(cfg: &mut web::ServiceConfig, path: &str, handler: F)
where
    F: actix_web::Handler<Args>,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    cfg.service(
        web::resource(path)
            .wrap(actix_web::middleware::from_fn(super::compress::compress))
            .route(on(actix_web::http::Method::GET, path).to(handler)),
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
        (status = 401, description = "`QUESTD_METRICS_KEY` is set and the request does not carry it", body = crate::http::openapi::ErrorBody)))]
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
        (status = 400, description = "Bad body, unknown built-in campaign", body = crate::http::openapi::ErrorBody), (status = 401, description = "A tenant named without its key", body = crate::http::openapi::ErrorBody), (status = 422, description = "The inline campaign is invalid (`problems` lists why)", body = crate::http::openapi::ErrorBody), (status = 413, description = "Without a key: a body larger than an address may send at once (`QUESTD_CREATE_KIB_BURST`)", body = crate::http::openapi::ErrorBody), (status = 429, description = "Too many sessions or campaign bytes from this address, too many sessions created for this tenant, or the tenant holds its most live sessions", body = crate::http::openapi::ErrorBody), (status = 503, description = "The node holds its most sessions or session state", body = crate::http::openapi::ErrorBody)))]
async fn create_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (tenant_id, anonymous) =
        match keyed_tenant(&req, &state, "creating a session for a tenant")? {
            Some(tenant_id) => {
                state.admission.check_key_create(&tenant_id)?;
                (tenant_id, false)
            }
            None => {
                state.admission.check_create(&req)?;
                (DEFAULT_TENANT.to_owned(), true)
            }
        };
    if let Some(reason) = state.store.refusing() {
        return Err(super::overloaded(reason));
    }
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
    let start = campaign_start(&state, body).await?;
    let handle = state
        .hub
        .send(CreateSession {
            tenant_id,
            visibility,
            state: start,
            anonymous,
        })
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(super::hub_failed)?;
    let meta = &handle.meta;
    let links = Links::of(&req, &state);
    let links = SessionLinks {
        ws_url: links.ws(&meta.session_id, &meta.player_token),
        play_url: links.page(&meta.session_id, &meta.player_token),
        watch_url: links.page(&meta.session_id, &meta.spectator_token),
    };
    Ok(HttpResponse::Created()
        .insert_header(no_store())
        .json(SessionCreated::new(meta, links)))
}

/// The tenant of the request's key, or `None` for a request without a key,
/// which acts for `default`: naming another tenant without its key is
/// `401` (`X-Tenant-ID` alone grants nothing), saying that `doing` needs
/// the key.
fn keyed_tenant(
    req: &HttpRequest,
    state: &AppState,
    doing: &str,
) -> Result<Option<String>, ApiError> {
    if let Some(grant) = state.keys.grant(req)? {
        return Ok(Some(grant.tenant_id));
    }
    if tenant_header(req).is_some_and(|t| t != DEFAULT_TENANT) {
        return Err(ApiError::unauthorized(format!(
            "{doing} needs that tenant's key in X-Internal-API-Key"
        )));
    }
    Ok(None)
}

/// The body of `POST /api/v1/sessions` and `PUT /api/v1/sites/{site_id}`:
/// its fields as sent (any JSON), each checked by the handler so that a
/// wrong one is answered with what it should be.
#[derive(Debug, Default, utoipa::ToSchema)]
pub struct NewSession {
    /// A built-in campaign (`GET /api/v1/campaigns`).
    #[schema(value_type = Option<String>)]
    pub campaign_id: Option<Value>,
    /// A whole inline campaign (schema `Campaign`); wins over `campaign_id`.
    #[schema(value_type = Option<Object>)]
    pub campaign: Option<Value>,
    /// `"private"` (the default) or `"public"` (listed, watchable).
    #[schema(value_type = Option<String>)]
    pub visibility: Option<Value>,
}

impl From<Value> for NewSession {
    /// The fields of a body (a body that is not an object has none).
    fn from(body: Value) -> Self {
        let Value::Object(mut fields) = body else {
            return Self::default();
        };
        Self {
            campaign_id: fields.remove("campaign_id"),
            campaign: fields.remove("campaign"),
            visibility: fields.remove("visibility"),
        }
    }
}

/// The start state a body names: `{"campaign_id": "<built-in>"}` or
/// `{"campaign": {...inline campaign...}}` (which wins when both are
/// given). Sessions and sites start the same way.
pub(super) async fn campaign_start(
    state: &AppState,
    body: NewSession,
) -> Result<GameState, ApiError> {
    if let (None, Some(Value::String(name))) = (&body.campaign_id, &body.campaign) {
        let shown = crate::tools::cut_name(name);
        return Err(ApiError::bad_request(format!(
            "\"campaign\" is a whole inline campaign (an object); to start the built-in \
             campaign {shown:?}, send {{\"campaign_id\": {shown:?}}}"
        )));
    }
    let start = match (body.campaign_id, body.campaign) {
        (_, Some(inline)) => {
            let tools = state.registry.names().to_vec();
            // Validation is linear in the campaign's size, but a large one
            // still takes a moment: off the HTTP worker.
            web::block(move || Campaign::from_value(&inline, &tools).map(Campaign::into_state))
                .await
                .map_err(|e| ApiError::internal(&e))?
                .map_err(|e| {
                    ApiError::new(ErrorCode::InvalidCampaign, "the campaign is invalid")
                        .with("problems", json!(e.problems))
                })?
        }
        (Some(Value::String(id)), None) => match state.builtin_starts.start(&id) {
            Some(start) => start,
            None => {
                let known: Vec<&str> = BUILTIN_CAMPAIGNS.iter().map(|(id, _)| *id).collect();
                let shown = crate::tools::cut_name(&id);
                return Err(ApiError::bad_request(format!(
                    "no built-in campaign {shown:?}; built-in: {}",
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
    Ok(start)
}

/// `Cache-Control: no-store`, for answers that carry tokens: no shared
/// cache may keep one (and serve it, or links in it, to someone else).
fn no_store() -> (actix_web::http::header::HeaderName, String) {
    (CACHE_CONTROL, CacheDirective::NoStore.to_string())
}

/// Absolute links to this server: on `QUESTD_PUBLIC_URL`, else as the
/// client reached it (forwarding headers only from a trusted proxy).
struct Links {
    http: String,
    ws: String,
}

impl Links {
    fn of(req: &HttpRequest, state: &AppState) -> Self {
        let base = super::guard::link_base(req, state.admission.from_trusted_proxy(req));
        Self {
            http: base.http,
            ws: base.ws,
        }
    }

    fn ws(&self, session_id: &str, token: &str) -> String {
        format!("{}/ws/sessions/{session_id}?token={token}", self.ws)
    }

    /// The browser page opened on a session with a token (a player's or a
    /// spectator's).
    fn page(&self, session_id: &str, token: &str) -> String {
        format!("{}/?session={session_id}&token={token}", self.http)
    }
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
        (status = 401, description = "Another tenant than `default` named without its key, or an unknown key", body = crate::http::openapi::ErrorBody),
        (status = 403, description = "A tenant key and another tenant's `X-Tenant-ID`", body = crate::http::openapi::ErrorBody)))]
async fn list_sessions(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let tenant_id = keyed_tenant(&req, &state, "listing a tenant's sessions")?
        .unwrap_or_else(|| DEFAULT_TENANT.to_owned());
    let list = state
        .hub
        .send(ListLive { tenant_id })
        .await
        .map_err(|e| ApiError::internal(&e))?;
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

/// The token in `Authorization: Bearer <token>`, if any.
fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("Authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// A session token: [`bearer`], or, on a `GET` (a read), `?token=` as the
/// WebSocket and the page's links take it.
fn session_token(req: &HttpRequest) -> Result<String, ApiError> {
    let query = || {
        if req.method() != actix_web::http::Method::GET {
            return None;
        }
        web::Query::<TokenQuery>::from_query(req.query_string())
            .ok()?
            .into_inner()
            .token
            .filter(|t| !t.is_empty())
    };
    bearer(req).map(str::to_owned).or_else(query).ok_or_else(|| {
        ApiError::unauthorized(
            "send Authorization: Bearer <player or spectator token> (or ?token=<token> on a GET)",
        )
    })
}

/// The `?token=` of a read.
#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// Checks the request's credential against a session: a key of the
/// session's tenant acts as its player; otherwise the bearer token decides.
/// A key of another tenant finds nothing (`404`, like an unknown session).
fn authorize(
    req: &HttpRequest,
    state: &AppState,
    meta: &SessionMeta,
) -> Result<TokenRole, ApiError> {
    check_tenant(req, meta)?;
    if let Some(grant) = state.keys.grant(req)? {
        return if grant.tenant_id == meta.tenant_id {
            Ok(TokenRole::Player)
        } else {
            Err(ApiError::not_found(no_session(&meta.session_id)))
        };
    }
    token_role(meta, &session_token(req)?)
        .ok_or_else(|| ApiError::unauthorized("the token does not open this session"))
}

/// What can be judged of a caller before its body is read: a key this
/// server knows, or else a session token at all (`401` without either).
/// The session itself judges the credential once it is found.
pub(super) fn credential_first(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    if state.keys.grant(req)?.is_some() {
        return Ok(());
    }
    session_token(req).map(drop)
}

/// Like [`authorize`], for routes only the player token (or a key) may use.
pub(super) fn authorize_player(
    req: &HttpRequest,
    state: &AppState,
    meta: &SessionMeta,
) -> Result<(), ApiError> {
    match authorize(req, state, meta)? {
        TokenRole::Player => Ok(()),
        TokenRole::Spectator => Err(ApiError::new(
            ErrorCode::Forbidden,
            "this needs the player token",
        )),
    }
}

#[utoipa::path(get, path = "/api/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The session's snapshot (its game state)", body = crate::protocol::Snapshot),
        (status = 401, description = "No token, or a wrong one", body = crate::http::openapi::ErrorBody), (status = 404, description = "No such session", body = crate::http::openapi::ErrorBody)))]
async fn get_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    let authorize = |meta: &SessionMeta| authorize(&req, &state, meta).map(drop);
    let (_, snapshot) =
        send_to_session(&state, &Routing::of(&req), &path, authorize, || GetSnapshot).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(snapshot))
}

/// A session's stored meta, without loading the session; 404 if unknown.
pub(super) async fn stored_meta(state: &AppState, id: &SessionId) -> Result<SessionMeta, ApiError> {
    state
        .store
        .session_meta(id)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .ok_or_else(|| ApiError::not_found(no_session(id.as_str())))
}

/// A page size from `?limit=`: the default when absent, within 1..=max.
fn page_limit(asked: Option<u32>) -> u32 {
    super::page_size(asked, DEFAULT_ACTIONS_PAGE, MAX_ACTIONS_PAGE)
}

/// `?after_seq=N&limit=M`: a page of a session's actions, or of its story
/// (the console's).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct SeqPage {
    pub(super) after_seq: Option<u64>,
    pub(super) limit: Option<u32>,
}

impl SeqPage {
    /// The query, or `400` saying what it takes.
    pub(super) fn read(
        query: Result<web::Query<SeqPage>, actix_web::Error>,
    ) -> Result<Self, ApiError> {
        query.map(web::Query::into_inner).map_err(super::bad_query(
            "after_seq and limit are whole numbers (e.g. ?after_seq=10&limit=50)",
        ))
    }
}

#[utoipa::path(get, path = "/api/v1/sessions/{id}/actions", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), SeqPage),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "A page of the actions log", body = ActionsPage<'static>),
        (status = 400, description = "Bad query", body = crate::http::openapi::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::http::openapi::ErrorBody), (status = 404, description = "No such session", body = crate::http::openapi::ErrorBody)))]
async fn actions(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<SeqPage>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let query = SeqPage::read(query)?;
    let meta = stored_meta(&state, &path).await?;
    authorize(&req, &state, &meta)?;
    let limit = page_limit(query.limit);
    let page = state
        .store
        .actions(&meta.session_id, query.after_seq.unwrap_or(0), limit)
        .await
        .map_err(super::storage_failed)?;
    Ok(HttpResponse::Ok().json(ActionsPage::from(&page)))
}

/// `?after_id=N&limit=M` of a session's audit ledger.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct AuditQuery {
    after_id: Option<i64>,
    limit: Option<u32>,
}

/// A page of the audit ledger of the session `path` names, for a caller
/// `authorize` lets read it: the session's route and the console's.
pub(super) async fn audit_ledger(
    state: &AppState,
    path: &SessionId,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
    authorize: impl FnOnce(&SessionMeta) -> Result<(), ApiError>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(super::bad_query(
        "after_id and limit are whole numbers (e.g. ?after_id=10&limit=50)",
    ))?;
    let meta = stored_meta(state, path).await?;
    authorize(&meta)?;
    let limit = page_limit(query.limit);
    let page = state
        .store
        .audit_page(&meta.session_id, query.after_id.unwrap_or(0), limit)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(AuditLedgerPage::from(&page)))
}

/// The session's audit ledger, oldest first (player token only).
#[utoipa::path(get, path = "/api/v1/sessions/{id}/audit", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), AuditQuery),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "A page of the session's audit ledger", body = AuditLedgerPage<'static>),
        (status = 400, description = "Bad query", body = crate::http::openapi::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::http::openapi::ErrorBody), (status = 403, description = "A spectator token", body = crate::http::openapi::ErrorBody), (status = 404, description = "No such session", body = crate::http::openapi::ErrorBody)))]
async fn audit(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    audit_ledger(&state, &path, query, |meta| {
        authorize_player(&req, &state, meta)
    })
    .await
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
        (status = 400, description = "Bad body, or an `X-Trace-ID` that is not 1 to 128 printable ASCII characters (`CONTEXT_INVALID`)", body = crate::http::openapi::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::http::openapi::ErrorBody), (status = 403, description = "A spectator token", body = crate::http::openapi::ErrorBody), (status = 404, description = "No such session or NPC", body = crate::http::openapi::ErrorBody)))]
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
    let (_, done) = send_to_session(
        &state,
        &Routing::of(&req),
        &session_id,
        |meta| authorize_player(&req, &state, meta),
        || CallTool {
            tool: "activate_npc".into(),
            args: json!({"npc_id": npc_id, "active": active}),
            role: Role::Player,
            trace_id: trace_id.clone(),
            origin: CallOrigin::default(),
        },
    )
    .await?;
    match done.outcome {
        Ok(result) => {
            // The tool's own result; one that does not read back is a bug.
            let npc: NpcActivation =
                serde_json::from_value(result).map_err(|e| ApiError::internal(&e))?;
            Ok(HttpResponse::Ok().json(NpcActivated {
                npc,
                turn_id: done.turn_id,
                call_id: done.call_id,
                seq: done.seq,
            }))
        }
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
