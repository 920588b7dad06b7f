//! Who may read or drive a session over HTTP: a key of the session's
//! tenant, its player token, or its spectator token (keys themselves are
//! `auth`'s).

use actix_web::{HttpRequest, web};
use serde::Deserialize;

use super::auth::{DEFAULT_TENANT, tenant_header};
use super::errors::no_session;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::game::party::{Presented, host_seat, opens_stored};
use crate::ids::{SeatId, TenantId};
use crate::session::{PartyCaller, SeatAccess, SessionHandle};
use crate::storage::SessionMeta;

/// The role a token gives in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    Player,
    Spectator,
}

/// Which role `token` opens in the session, if any.
pub fn token_role(meta: &SessionMeta, token: &str) -> Option<TokenRole> {
    let token = Presented::of(token);
    if token.opens(&meta.stored_player_token) {
        Some(TokenRole::Player)
    } else if token.opens(&meta.stored_spectator_token) {
        Some(TokenRole::Spectator)
    } else {
        None
    }
}

/// A session of another tenant is answered exactly like an unknown one:
/// an `X-Tenant-ID` that is sent must name the session's tenant. Judged
/// only once the caller's credential opened the session: before that the
/// header would tell a caller that cannot open it which tenant holds it
/// (`401` under the right name, `404` under any other). A key names its
/// tenant itself (`keyed`).
pub fn check_tenant(req: &HttpRequest, meta: &SessionMeta) -> Result<(), ApiError> {
    match tenant_header(req) {
        Some(t) if t != meta.tenant_id => Err(ApiError::not_found(no_session(&meta.session_id))),
        _ => Ok(()),
    }
}

/// The token in `Authorization: Bearer <token>`, if any.
pub fn bearer(req: &HttpRequest) -> Option<&str> {
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

/// Whether the request carries a key of the session's tenant (which acts
/// as its player). A key of another tenant is `404` like an unknown
/// session. The key's tenant is the one `X-Tenant-ID` names for the
/// internal key, and a tenant key naming another tenant there is `403`
/// whatever the session ([`key_first`]), so the header needs no check of
/// its own here.
fn keyed(req: &HttpRequest, state: &AppState, meta: &SessionMeta) -> Result<bool, ApiError> {
    match state.keys.grant(req)? {
        Some(grant) if grant.tenant_id == meta.tenant_id => Ok(true),
        Some(_) => Err(ApiError::not_found(no_session(&meta.session_id))),
        None => Ok(false),
    }
}

/// Checks the request's credential against a session: a key of the
/// session's tenant acts as its player; otherwise the bearer token decides,
/// and then an `X-Tenant-ID` naming another tenant is `404`
/// ([`check_tenant`]). A key of another tenant finds nothing (`404`, like
/// an unknown session).
pub fn authorize(
    req: &HttpRequest,
    state: &AppState,
    meta: &SessionMeta,
) -> Result<TokenRole, ApiError> {
    if keyed(req, state, meta)? {
        return Ok(TokenRole::Player);
    }
    let role = token_role(meta, &session_token(req)?)
        .ok_or_else(|| ApiError::unauthorized("the token does not open this session"))?;
    check_tenant(req, meta)?;
    Ok(role)
}

/// What the request alone tells of its key, judged before any session is
/// looked up: a key this server does not know is `401`, a tenant key with
/// an `X-Tenant-ID` of another tenant `403`, for a session that exists as
/// for one that does not. A request without a key passes (its token is
/// the session's to judge).
pub fn key_first(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    state.keys.grant(req).map(drop)
}

/// What can be judged of a caller before its body is read: a key this
/// server knows ([`key_first`]), or else a session token at all (`401`
/// without either). The session itself judges the credential once it is
/// found.
pub fn credential_first(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    if state.keys.grant(req)?.is_some() {
        return Ok(());
    }
    session_token(req).map(drop)
}

/// Who a caller is in a session this node runs (docs/protocol.md §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A key of the session's tenant: acts as the host seat.
    Key,
    /// A seat's player token (the session's own `player_token` is the
    /// host seat's, `seat_1`).
    Seat(SeatId),
    Spectator,
}

impl Caller {
    /// The seat a player caller speaks as: a key speaks as the host seat
    /// now; `None` for a spectator.
    pub fn speaks_as(&self, handle: &SessionHandle) -> Option<SeatId> {
        match self {
            Self::Key => Some(handle.seats.host().unwrap_or_else(host_seat)),
            Self::Seat(seat) => Some(seat.clone()),
            Self::Spectator => None,
        }
    }

    /// Whether the caller holds the host's powers: a key, or the token of
    /// the seat that is host now (as the session's seats last told this
    /// node); another player or a spectator is `403`.
    pub fn host(&self, handle: &SessionHandle) -> Result<(), ApiError> {
        let host = || handle.seats.host().unwrap_or_else(host_seat);
        match self {
            Self::Key => Ok(()),
            Self::Seat(seat) if *seat == host() => Ok(()),
            Self::Seat(_) | Self::Spectator => Err(ApiError::new(
                ErrorCode::Forbidden,
                "this needs the host's token",
            )),
        }
    }

    /// The caller of a party power; a spectator has none (`403`).
    pub fn party(&self) -> Result<PartyCaller, ApiError> {
        match self {
            Self::Key => Ok(PartyCaller::Key),
            Self::Seat(seat) => Ok(PartyCaller::Seat(seat.clone())),
            Self::Spectator => Err(ApiError::new(
                ErrorCode::Forbidden,
                "this needs a player token",
            )),
        }
    }
}

/// Who `token` is in the session of `handle`: its spectator token, or a
/// seat's player token that the session's seats know and that was not
/// kicked; else `401`.
pub fn token_caller(handle: &SessionHandle, token: &str) -> Result<Caller, ApiError> {
    let meta = &handle.meta;
    let presented = Presented::of(token);
    if presented.opens(&meta.stored_spectator_token) {
        return Ok(Caller::Spectator);
    }
    let is_session_token = presented.opens(&meta.stored_player_token);
    match handle.seats.access(token, is_session_token) {
        SeatAccess::Seat(seat, _) => Ok(Caller::Seat(seat)),
        // A session without a party (no active character) still has its
        // player.
        SeatAccess::Unknown if is_session_token => Ok(Caller::Seat(host_seat())),
        SeatAccess::Gone | SeatAccess::Unknown => Err(ApiError::unauthorized(
            "the token does not open this session",
        )),
    }
}

/// [`authorize`] for a session this node runs, knowing its seats: a key
/// of its tenant, its spectator token or any active seat's token (and
/// then an `X-Tenant-ID`, if sent, of its tenant: [`check_tenant`]).
pub fn caller(
    req: &HttpRequest,
    state: &AppState,
    handle: &SessionHandle,
) -> Result<Caller, ApiError> {
    if keyed(req, state, &handle.meta)? {
        return Ok(Caller::Key);
    }
    let who = token_caller(handle, &session_token(req)?)?;
    check_tenant(req, &handle.meta)?;
    Ok(who)
}

/// [`caller`] for routes only a player (or a key) may use: the seat it
/// speaks as; a spectator is `403`.
pub fn player_seat(
    req: &HttpRequest,
    state: &AppState,
    handle: &SessionHandle,
) -> Result<SeatId, ApiError> {
    let who = caller(req, state, handle)?;
    who.party()?;
    who.speaks_as(handle)
        .ok_or_else(|| ApiError::new(ErrorCode::Forbidden, "this needs the player token"))
}

/// Judges the caller of a route that reads what the session stored: keys
/// and the spectator token are judged from `meta`; a player token is judged
/// where the session runs ([`caller`]; another node hands the request
/// over), since only the session knows its seats: a joined seat's token,
/// and whether the seat a token opens (the session's own token opens the
/// first) was kicked. `players_only` refuses spectators (`403`).
pub async fn authorize_stored(
    req: &HttpRequest,
    state: &AppState,
    meta: &SessionMeta,
    players_only: bool,
) -> Result<(), ApiError> {
    let role = if keyed(req, state, meta)? {
        TokenRole::Player
    } else {
        // By header, or `?token=` on a read; none is `401` here.
        let token = session_token(req)?;
        if opens_stored(&meta.stored_spectator_token, &token) {
            check_tenant(req, meta)?;
            TokenRole::Spectator
        } else {
            let id = crate::ids::SessionId::from(meta.session_id.as_str());
            let routed = super::locate::locate(state, &id).await?;
            let handle = super::peers::Routing::of(req).here(routed)?;
            match caller(req, state, &handle)? {
                Caller::Spectator => TokenRole::Spectator,
                Caller::Key | Caller::Seat(_) => TokenRole::Player,
            }
        }
    };
    if players_only && role == TokenRole::Spectator {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "this needs the player token",
        ));
    }
    Ok(())
}

/// The tenant of the request's key, or `None` for a request without a key,
/// which acts for `default`: naming another tenant without its key is
/// `401` (`X-Tenant-ID` alone grants nothing), saying that `doing` needs
/// the key.
pub fn keyed_tenant(
    req: &HttpRequest,
    state: &AppState,
    doing: &str,
) -> Result<Option<TenantId>, ApiError> {
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

/// Who makes a new session (a creation or an import), counted against
/// their rate before any body is read: the key's tenant (its creations
/// per minute), or without a key tenant `default`, counted per client
/// address, and then `true` (anonymous). A store refusing writes is
/// `503` here too, before the body.
pub fn creator(
    req: &HttpRequest,
    state: &AppState,
    doing: &str,
) -> Result<(TenantId, bool), ApiError> {
    let made = match keyed_tenant(req, state, doing)? {
        Some(tenant_id) => {
            state.admission.check_key_create(&tenant_id)?;
            (tenant_id, false)
        }
        None => {
            state.admission.check_create(req)?;
            (TenantId::from(DEFAULT_TENANT), true)
        }
    };
    if let Some(reason) = state.store.refusing() {
        return Err(super::errors::overloaded(reason));
    }
    Ok(made)
}
