//! The operator's timer route (docs/protocol.md §9): the host, or a key of
//! the session's tenant, cancels one pending timer.
//!
//! It runs as a `cancel_event` call inside the session, the way a service's
//! direct call does, so the cancel is journalled, audited and seen live by
//! every connection; another node hands the request to the one that runs
//! the session, as it does the party's routes. Like a service's call it
//! waits in the session's queue behind the running turn (one paused for a
//! person's approval too) for at most `SESSION_WAIT`, then answers `408`
//! and stays queued.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::access::{caller, credential_first};
use super::errors::tool_refused;
use super::locate::call_in_session;
use super::peers::Routing;
use super::routes::add;
use super::state::AppState;
use crate::error::ApiError;
use crate::ids::{SessionId, TimerId};
use crate::protocol::http::TimerCancelledBody;
use crate::session::{CallOrigin, CallTool};
use crate::tools::Role;

/// Longest timer id looked at (every id `schedule_event` makes is
/// shorter); a longer one names no timer.
const MAX_TIMER_ID_CHARS: usize = 64;

pub fn configure(cfg: &mut web::ServiceConfig) {
    add(
        cfg,
        actix_web::http::Method::DELETE,
        "/api/v1/sessions/{id}/timers/{timer_id}",
        cancel,
    );
}

/// The host (or a key) cancels a pending timer: it never fires.
#[utoipa::path(delete, path = "/api/v1/sessions/{id}/timers/{timer_id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), ("timer_id" = String, Path, description = "The timer, as the snapshot's `timers` list it")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The timer is cancelled", body = TimerCancelledBody),
        (status = 400, description = "An `X-Trace-ID` that is not 1 to 128 printable ASCII characters (`CONTEXT_INVALID`)", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "Not the host's token (nor a key); or a campaign whose allowlist leaves out `cancel_event` (`TOOL_NOT_ALLOWED`)", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session, or no such pending timer", body = crate::protocol::http::ErrorBody), (status = 408, description = "The session stayed busy for 30 s (a turn runs, or waits for a person's approval): the cancel is still queued and will run unless the node stops first: a queued call is not stored (`TIMEOUT`)", body = crate::protocol::http::ErrorBody)))]
async fn cancel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(SessionId, String)>,
) -> Result<HttpResponse, ApiError> {
    credential_first(&req, &state)?;
    let trace_id = super::service::trace_id(&req)?;
    let (session_id, timer_id) = path.into_inner();
    let no_timer = || ApiError::not_found("no such pending timer");
    let routed = call_in_session(
        &state,
        &session_id,
        &trace_id,
        |handle| {
            caller(&req, &state, handle)?.host(handle)?;
            // Judged after the credential: who may not cancel learns
            // nothing about the timers.
            if timer_id.is_empty() || timer_id.chars().count() > MAX_TIMER_ID_CHARS {
                return Err(no_timer());
            }
            Ok(())
        },
        // The host or a key acts as the table's admin here: a player's
        // role may not call the tool, the model's is not who asks.
        |()| CallTool {
            tool: "cancel_event".into(),
            args: json!({"timer_id": timer_id}),
            args_hash: None,
            role: Role::Admin,
            trace_id: trace_id.clone(),
            origin: CallOrigin::default(),
        },
    )
    .await?;
    let (_, done) = Routing::of(&req).here(routed)?;
    let result = done.outcome.map_err(tool_refused)?;
    if result.value["cancelled"] != true {
        return Err(no_timer());
    }
    Ok(HttpResponse::Ok().json(TimerCancelledBody {
        cancelled: true,
        timer_id: TimerId::from(timer_id),
    }))
}
