//! The answers that carry a session's tokens: a new session's `201`
//! (created or imported) and the links in it and in the public list.

use actix_web::http::header::{CACHE_CONTROL, CacheDirective};
use actix_web::{HttpRequest, HttpResponse};

use super::state::AppState;
use crate::protocol::http::{SessionCreated, SessionLinks};
use crate::session::NewSession;

/// The `201` of a new session (created or imported): its id, tokens and
/// links, never cached. The only answer that carries its player token,
/// and a private session's spectator token: the store keeps digests of
/// them.
pub fn created(req: &HttpRequest, state: &AppState, new: &NewSession) -> HttpResponse {
    let meta = &new.handle.meta;
    let links = Links::of(req, state);
    let links = SessionLinks {
        ws_url: links.ws(&meta.session_id, &new.player_token),
        play_url: links.page(&meta.session_id, &new.player_token),
        watch_url: links.page(&meta.session_id, &new.spectator_token),
    };
    HttpResponse::Created()
        .insert_header(no_store())
        .json(SessionCreated::new(
            meta,
            &new.player_token,
            &new.spectator_token,
            links,
        ))
}

/// `Cache-Control: no-store`, for answers that carry tokens: no shared
/// cache may keep one (and serve it, or links in it, to someone else).
pub fn no_store() -> (actix_web::http::header::HeaderName, String) {
    (CACHE_CONTROL, CacheDirective::NoStore.to_string())
}

/// Absolute links to this server: on `QUESTD_PUBLIC_URL`, else as the
/// client reached it (forwarding headers only from a trusted proxy).
pub struct Links {
    http: String,
    ws: String,
}

impl Links {
    pub fn of(req: &HttpRequest, state: &AppState) -> Self {
        let base = super::guard::link_base(req, state.admission.from_trusted_proxy(req));
        Self {
            http: base.http,
            ws: base.ws,
        }
    }

    pub fn ws(&self, session_id: &str, token: &str) -> String {
        format!("{}/ws/sessions/{session_id}?token={token}", self.ws)
    }

    /// The browser page opened on a session with a token (a player's or a
    /// spectator's).
    pub fn page(&self, session_id: &str, token: &str) -> String {
        format!("{}/?session={session_id}&token={token}", self.http)
    }
}
