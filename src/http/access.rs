//! Who may read or drive a session over HTTP: a key of the session's
//! tenant, its player token, or its spectator token (keys themselves are
//! `auth`'s).

use actix_web::{HttpRequest, web};
use serde::Deserialize;

use super::auth::{same_secret, tenant_header};
use super::errors::no_session;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::storage::SessionMeta;

/// The role a token gives in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    Player,
    Spectator,
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

/// A session of another tenant is answered exactly like an unknown one.
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

/// Checks the request's credential against a session: a key of the
/// session's tenant acts as its player; otherwise the bearer token decides.
/// A key of another tenant finds nothing (`404`, like an unknown session).
pub fn authorize(
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
pub fn credential_first(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    if state.keys.grant(req)?.is_some() {
        return Ok(());
    }
    session_token(req).map(drop)
}

/// Like [`authorize`], for routes only the player token (or a key) may use.
pub fn authorize_player(
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
