//! The party's routes (docs/protocol.md §8): invites, joining by invite,
//! the seat list, the host's powers (kick, hand the host role over,
//! switch the turn mode), and a seat leaving.
//!
//! Every change runs in the session (`session::core::party`), which
//! journals it as a story frame and answers once that is durable. A seat's
//! token, or a key of the session's tenant (which acts as the host), is
//! judged where the session runs: another node hands the request over.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::access::{caller, check_tenant, credential_first, key_first};
use super::body::decode;
use super::locate::send_to_session;
use super::peers::Routing;
use super::routes::add;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::game::party::{MAX_ROUND_TIMEOUT_S, MIN_ROUND_TIMEOUT_S, TurnMode};
use crate::ids::{SeatId, SessionId};
use crate::protocol::http::{InviteMadeBody, SeatJoinedBody};
use crate::session::{CreateInvite, GetSeats, HostPower, JoinParty, UseHostPower};
use crate::storage::rfc3339;
use actix_web::http::header::{CACHE_CONTROL, CacheDirective};

/// Uses an invite may have, at most.
pub const MAX_INVITE_USES: u32 = 100;
/// The longest an invite may last, in seconds (a week).
pub const MAX_INVITE_EXPIRES_S: u32 = 604_800;
const DEFAULT_INVITE_EXPIRES_S: u32 = 86_400;
/// Longest invite code looked at; a longer one opens nothing.
const MAX_CODE_CHARS: usize = 128;

pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    add(
        cfg,
        Method::POST,
        "/api/v1/sessions/{id}/invites",
        create_invite,
    );
    add(cfg, Method::POST, "/api/v1/sessions/{id}/join", join);
    super::routes::read(cfg, "/api/v1/sessions/{id}/seats", seats);
    add(
        cfg,
        Method::POST,
        "/api/v1/sessions/{id}/seats/{seat_id}/kick",
        kick,
    );
    add(
        cfg,
        Method::POST,
        "/api/v1/sessions/{id}/seats/{seat_id}/leave",
        leave,
    );
    add(
        cfg,
        Method::POST,
        "/api/v1/sessions/{id}/seats/{seat_id}/host",
        make_host,
    );
    add(cfg, Method::POST, "/api/v1/sessions/{id}/mode", mode);
}

/// `Cache-Control: no-store`: the answer carries a secret.
fn no_store() -> (actix_web::http::header::HeaderName, String) {
    (CACHE_CONTROL, CacheDirective::NoStore.to_string())
}

/// The body of an invite; both fields may be left out.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct InviteRequest {
    /// 1 to 100 (default 1).
    #[serde(default)]
    max_uses: Option<u32>,
    /// 60 to 604800 seconds (default 86400).
    #[serde(default)]
    expires_in_s: Option<u32>,
}

/// The host makes an invite.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/invites", tag = "party",
    params(("id" = String, Path, description = "The session id")),
    security(("player_token" = []), ("internal_key" = [])),
    request_body(content = InviteRequest, description = "Its uses and lifetime; `{}` for one use within a day"),
    responses(
        (status = 201, description = "The invite's code and join link", body = InviteMadeBody),
        (status = 400, description = "Bad body, or a bound passed", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "Not the host's token (nor a key)", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody), (status = 409, description = "The session holds its most live invites (32)", body = crate::protocol::http::ErrorBody)))]
async fn create_invite(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    credential_first(&req, &state)?;
    let body: InviteRequest = decode(body, true).await?;
    let max_uses = body.max_uses.unwrap_or(1);
    if !(1..=MAX_INVITE_USES).contains(&max_uses) {
        return Err(ApiError::bad_request(format!(
            "max_uses is 1 to {MAX_INVITE_USES}"
        )));
    }
    let min = state.min_invite_expires_s;
    let expires_in_s = body.expires_in_s.unwrap_or(DEFAULT_INVITE_EXPIRES_S);
    if !(min..=MAX_INVITE_EXPIRES_S).contains(&expires_in_s) {
        return Err(ApiError::bad_request(format!(
            "expires_in_s is {min} to {MAX_INVITE_EXPIRES_S}"
        )));
    }
    let routed = send_to_session(
        &state,
        &path,
        |handle| caller(&req, &state, handle)?.party(),
        |by| CreateInvite {
            by,
            max_uses,
            expires_in_s,
        },
    )
    .await?;
    let (handle, made) = Routing::of(&req).here(routed)?;
    let base = super::guard::link_base(&req, state.admission.from_trusted_proxy(&req));
    let session_id = &handle.meta.session_id;
    Ok(HttpResponse::Created()
        .insert_header(no_store())
        .json(InviteMadeBody {
            join_url: format!("{}/?join={session_id}&invite={}", base.http, made.code),
            invite_code: made.code,
            expires_at: rfc3339(made.expires_at),
        }))
}

/// The one answer for every invite that opens nothing, as the session's.
fn no_invite() -> ApiError {
    ApiError::new(ErrorCode::InviteNotFound, crate::game::party::NO_INVITE)
}

/// The body of a join.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct JoinRequest {
    invite_code: String,
    /// 1 to 40 characters, no control characters.
    name: String,
}

/// Someone joins by invite: the code is the credential. Rate limited per
/// client address like session creation.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/join", tag = "party",
    params(("id" = String, Path, description = "The session id")),
    request_body(content = JoinRequest, description = "The invite code and the player's name"),
    responses(
        (status = 201, description = "The new seat, its token and links", body = SeatJoinedBody),
        (status = 400, description = "Bad body or name", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session (`NOT_FOUND`), or an invite that is unknown, used up, expired or another session's (`INVITE_NOT_FOUND`)", body = crate::protocol::http::ErrorBody), (status = 409, description = "`SESSION_FULL`: the session holds its most seats", body = crate::protocol::http::ErrorBody), (status = 429, description = "Too many joins from this address", body = crate::protocol::http::ErrorBody)))]
async fn join(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // Counted once, where the client came in, not again on the node it
    // is handed to; a request with a valid key is not limited, as a
    // creation with one is not (a load test joins with its key).
    if !state.cluster.from_peer(&req) && state.keys.grant(&req)?.is_none() {
        state.admission.check_join(&req)?;
    }
    let body: JoinRequest = decode(body, false).await?;
    if body.invite_code.len() > MAX_CODE_CHARS {
        return Err(no_invite());
    }
    // The invite code is the credential: under another tenant's name it
    // opens nothing, answered as any invite that opens nothing, so the
    // header never tells whose session an id is.
    let routed = send_to_session(
        &state,
        &path,
        |handle| check_tenant(&req, &handle.meta).map_err(|_| no_invite()),
        |()| JoinParty {
            invite_code: body.invite_code.clone(),
            name: body.name.clone(),
            max_players: state.max_players,
        },
    )
    .await?;
    let (handle, seat) = Routing::of(&req).here(routed)?;
    let base = super::guard::link_base(&req, state.admission.from_trusted_proxy(&req));
    let session_id = handle.meta.session_id.clone();
    let token = &seat.player_token;
    Ok(HttpResponse::Created()
        .insert_header(no_store())
        .json(SeatJoinedBody {
            ws_url: format!("{}/ws/sessions/{session_id}?token={token}", base.ws),
            player_url: format!("{}/?session={session_id}&token={token}", base.http),
            session_id: session_id.to_string(),
            seat_id: seat.seat_id.to_string(),
            character_id: seat.character_id.to_string(),
            player_token: seat.player_token,
        }))
}

/// The party's seats: any token of the session, or a key of its tenant.
#[utoipa::path(get, path = "/api/v1/sessions/{id}/seats", tag = "party",
    params(("id" = String, Path, description = "The session id")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "Every seat, with its role, state and whether it is online", body = crate::protocol::SeatList<'static>),
        (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A tenant key and another tenant's `X-Tenant-ID`", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn seats(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    key_first(&req, &state)?;
    let routed = send_to_session(
        &state,
        &path,
        |handle| caller(&req, &state, handle).map(drop),
        |()| GetSeats,
    )
    .await?;
    let (_, body) = Routing::of(&req).here(routed)?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}

/// Runs a host power (or a leave) for the caller; the session judges the
/// caller's right to it.
async fn host_power(
    req: &HttpRequest,
    state: &AppState,
    session_id: &SessionId,
    power: HostPower,
) -> Result<HttpResponse, ApiError> {
    let routed = send_to_session(
        state,
        session_id,
        |handle| caller(req, state, handle)?.party(),
        |by| UseHostPower {
            by,
            power: power.clone(),
        },
    )
    .await?;
    Routing::of(req).here(routed)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ok"})))
}

/// Runs a power over the seat the path names.
async fn seat_power(
    req: &HttpRequest,
    state: &AppState,
    path: web::Path<(SessionId, SeatId)>,
    power: fn(SeatId) -> HostPower,
) -> Result<HttpResponse, ApiError> {
    credential_first(req, state)?;
    let (session_id, seat_id) = path.into_inner();
    host_power(req, state, &session_id, power(seat_id)).await
}

/// The host removes a seat: its connections close with 4001 and its token
/// is refused from then on; its character stays in the world. The host's
/// own seat cannot be kicked (`409`).
#[utoipa::path(post, path = "/api/v1/sessions/{id}/seats/{seat_id}/kick", tag = "party",
    params(("id" = String, Path, description = "The session id"), ("seat_id" = String, Path, description = "The seat")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The seat is kicked (`{\"status\":\"ok\"}`)"),
        (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "Not the host's token (nor a key)", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session or active seat", body = crate::protocol::http::ErrorBody), (status = 409, description = "The seat is the host's", body = crate::protocol::http::ErrorBody)))]
async fn kick(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(SessionId, SeatId)>,
) -> Result<HttpResponse, ApiError> {
    seat_power(&req, &state, path, HostPower::Kick).await
}

/// A seat leaves the table, with its own token (or a key of the
/// session's tenant): as a kick, its connections close with 4001 and its
/// token is refused from then on, and the seat list says `left`; its
/// character stays in the world. The host's seat cannot leave (`409`).
#[utoipa::path(post, path = "/api/v1/sessions/{id}/seats/{seat_id}/leave", tag = "party",
    params(("id" = String, Path, description = "The session id"), ("seat_id" = String, Path, description = "The seat")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The seat has left (`{\"status\":\"ok\"}`)"),
        (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "Another seat's token, or the spectator's", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session or active seat", body = crate::protocol::http::ErrorBody), (status = 409, description = "The seat is the host's", body = crate::protocol::http::ErrorBody)))]
async fn leave(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(SessionId, SeatId)>,
) -> Result<HttpResponse, ApiError> {
    seat_power(&req, &state, path, HostPower::Leave).await
}

/// The host hands the host role to another seat (a key may too: how a
/// session whose host never comes back gets a new one).
#[utoipa::path(post, path = "/api/v1/sessions/{id}/seats/{seat_id}/host", tag = "party",
    params(("id" = String, Path, description = "The session id"), ("seat_id" = String, Path, description = "The seat")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The seat is the host now (`{\"status\":\"ok\"}`)"),
        (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "Not the host's token (nor a key)", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session or active seat", body = crate::protocol::http::ErrorBody)))]
async fn make_host(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(SessionId, SeatId)>,
) -> Result<HttpResponse, ApiError> {
    seat_power(&req, &state, path, HostPower::MakeHost).await
}

/// The body of a mode switch.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ModeRequest {
    /// `"free"` or `"rounds"`.
    #[schema(value_type = String)]
    turn_mode: TurnMode,
    /// 5 to 3600 (default 120).
    #[serde(default)]
    round_timeout_s: Option<u32>,
}

/// The host switches the turn mode.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/mode", tag = "party",
    params(("id" = String, Path, description = "The session id")),
    security(("player_token" = []), ("internal_key" = [])),
    request_body(content = ModeRequest, description = "The mode and a round's timeout"),
    responses(
        (status = 200, description = "The mode is switched (`{\"status\":\"ok\"}`)"),
        (status = 400, description = "Bad body, or a bound passed", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "Not the host's token (nor a key)", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn mode(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    credential_first(&req, &state)?;
    let body: ModeRequest = decode(body, false).await?;
    let round_timeout_s = body
        .round_timeout_s
        .unwrap_or(crate::game::party::DEFAULT_ROUND_TIMEOUT_S);
    if !(MIN_ROUND_TIMEOUT_S..=MAX_ROUND_TIMEOUT_S).contains(&round_timeout_s) {
        return Err(ApiError::bad_request(format!(
            "round_timeout_s is {MIN_ROUND_TIMEOUT_S} to {MAX_ROUND_TIMEOUT_S}"
        )));
    }
    let power = HostPower::Mode {
        turn_mode: body.turn_mode,
        round_timeout_s,
    };
    host_power(&req, &state, &path, power).await
}
