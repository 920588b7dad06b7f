//! The decision route of approvals (docs/protocol.md §19): a seat of the
//! session (the speaker's, or the host's) or a key of its tenant approves
//! or denies a call that waits.
//!
//! The decision runs in the session (`session::core::approvals`), which
//! journals `approval_resolved` and carries it out in the same step, and
//! answers once the decision is durable; another node hands the request to
//! the one that runs the session, as it does the party's routes.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::access::{caller, credential_first};
use super::body::decode;
use super::locate::send_to_session;
use super::peers::Routing;
use super::routes::add;
use super::state::AppState;
use crate::error::ApiError;
use crate::ids::SessionId;
use crate::protocol::ApproveDecision;
use crate::protocol::http::DecisionBody;
use crate::session::Decide;

pub fn configure(cfg: &mut web::ServiceConfig) {
    add(
        cfg,
        actix_web::http::Method::POST,
        "/api/v1/sessions/{id}/approvals/{approval_id}",
        decide,
    );
}

/// The body of a decision.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct DecideRequest {
    /// `"approve"` or `"deny"`.
    decision: ApproveDecision,
    /// Why, in at most 500 characters; the model hears a denial's reason.
    #[serde(default)]
    reason: Option<String>,
}

/// Approves or denies a call that waits for a person: on `approve` it runs
/// exactly once with the arguments of its request; on `deny` the model is
/// told `APPROVAL_DENIED`. Answered once the decision is durable; the
/// call's `tool_result` follows in the story and the actions log.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/approvals/{approval_id}", tag = "party",
    params(("id" = String, Path, description = "The session id"), ("approval_id" = String, Path, description = "The approval, as `approval_requested` and the snapshot's `pending_approvals` name it")),
    security(("player_token" = []), ("internal_key" = [])),
    request_body(content = DecideRequest, description = "The decision"),
    responses(
        (status = 200, description = "The decision is durable", body = DecisionBody),
        (status = 400, description = "Bad body: `decision` is `approve` or `deny`, `reason` at most 500 characters", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A spectator's token, or a seat that is neither the speaker's nor the host's", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session, or no such pending approval in it", body = crate::protocol::http::ErrorBody), (status = 409, description = "The approval was already decided", body = crate::protocol::http::ErrorBody)))]
async fn decide(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(SessionId, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    credential_first(&req, &state)?;
    let body: DecideRequest = decode(body, false).await?;
    let (session_id, approval_id) = path.into_inner();
    let routed = send_to_session(
        &state,
        &session_id,
        |handle| caller(&req, &state, handle)?.party(),
        |by| Decide {
            approval_id: approval_id.clone(),
            decision: body.decision,
            reason: body.reason.clone(),
            by,
        },
    )
    .await?;
    let (_, taken) = Routing::of(&req).here(routed)?;
    Ok(HttpResponse::Ok().json(DecisionBody {
        approval_id: taken.approval_id,
        turn_id: taken.turn_id,
        decision: taken.decision,
        by_seat_id: taken.by_seat_id,
    }))
}
