//! `POST /api/v1/chat`: one whole turn over HTTP. The turn runs through the
//! session's actor exactly like a WebSocket chat (same queue, rate limit and
//! `request_id` de-duplication), so every connection sees it live; the answer
//! is sent once the turn's last frame is durable. `X-Trace-ID` (optional,
//! checked like the tool API's) names the trace the turn's audit rows carry;
//! the answer repeats it as `trace_id`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::access::{credential_first, player_seat};
use super::body::decode;
use super::locate::send_to_session;
use super::peers::Routing;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::ids::{RequestId, SeatId, SessionId, TraceId};
use crate::protocol::TurnEnd;
use crate::protocol::check_request_id;
use crate::protocol::http::{ChatAnswer, ChatTurn, ChatTurnFailed};
use crate::session::{AwaitDurable, AwaitTurnEnd, SubmitChat};

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::routes::add(cfg, actix_web::http::Method::POST, "/api/v1/chat", chat);
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ChatRequest {
    #[schema(value_type = String)]
    session_id: SessionId,
    /// The player's words; `text`, as the WebSocket's `chat` frame names
    /// them, is taken too.
    #[serde(alias = "text")]
    message: String,
    #[serde(default)]
    request_id: Option<RequestId>,
}

#[utoipa::path(post, path = "/api/v1/chat", tag = "chat",
    security(("player_token" = []), ("internal_key" = [])),
    request_body(content = ChatRequest, description = "A player's message, answered when its turn ends"),
    responses(
        (status = 200, description = "The finished turn and its `trace_id`", body = Traced<ChatTurn>),
        (status = 202, description = "Rounds mode: the chat is the seat's action for the round (`ActionAnswer`); or the turn paused for a person's approval (`ChatApprovalRequired`, `\"status\":\"approval_required\"`)", body = ActionAnswer),
        (status = 502, description = "The turn failed, with its `turn_failed` fields: `UPSTREAM_ERROR` and `INVALID_AI_JSON` are 502, `AI_TIMEOUT` 408, `MAX_ITERATIONS` 500", body = Traced<ChatTurnFailed>),
        (status = 408, description = "The turn has not ended within the wait (`QUESTD_TURN_DEADLINE_SECS` + 10 s): `TIMEOUT` with its `turn_id`; it goes on, and the same `request_id` asks for its end again", body = crate::protocol::http::ErrorBody),
        (status = 400, description = "Bad body", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn chat(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // The body is read only for a caller with a credential to judge.
    credential_first(&req, &state)?;
    let trace_id = super::service::trace_id(&req)?;
    let traceparent = super::service::traceparent(&req);
    let body: ChatRequest = decode(body, false).await?;
    if let Some(id) = &body.request_id {
        check_request_id(id).map_err(ApiError::bad_request)?;
    }
    let routed = send_to_session(
        &state,
        &body.session_id,
        |handle| player_seat(&req, &state, handle),
        |seat_id| SubmitChat {
            text: body.message.clone(),
            request_id: body.request_id.clone(),
            seat_id,
            conn_id: None,
            trace_id: Some(trace_id.clone()),
            traceparent,
        },
    )
    .await?;
    let (handle, accepted) = Routing::of(&req).here(routed)?;
    if let Some(taken) = &accepted.action {
        // Rounds mode: the chat is the seat's action; its round's turn
        // runs when the round resolves, so there is no turn to wait for.
        // Answered once the action is durable, as an ack is.
        handle.addr.send(AwaitDurable { seq: taken.seq }).await??;
        return Ok(HttpResponse::Accepted().json(ActionAnswer {
            status: "action_submitted",
            round: taken.round,
            seat_id: &taken.seat_id,
            request_id: body.request_id.as_ref(),
            turn_id: None,
            duplicate: accepted.duplicate,
            trace_id: &trace_id,
        }));
    }
    let waited = handle.addr.send(AwaitTurnEnd {
        turn_id: accepted.turn_id.clone(),
    });
    let Ok(end) = tokio::time::timeout(state.chat_wait, waited).await else {
        let asked_again = body.request_id.is_some();
        return Err(still_running(
            &accepted.turn_id,
            state.chat_wait,
            asked_again,
        ));
    };
    Ok(answer(&end??, accepted.duplicate, &trace_id))
}

/// `408 TIMEOUT` for a chat whose turn did not end within `waited`: it was
/// taken and runs; the same `request_id` (when it has one:
/// `asked_again`) asked again answers its end.
fn still_running(turn_id: &str, waited: std::time::Duration, asked_again: bool) -> ApiError {
    let how = if asked_again {
        "send the same request_id again for its answer"
    } else {
        "follow its turn_id on the WebSocket or in the actions log"
    };
    let mut e = ApiError::new(
        ErrorCode::Timeout,
        format!(
            "the turn has not ended after {} s; it was taken and goes on: {how}",
            waited.as_secs()
        ),
    );
    let mut extra = serde_json::Map::new();
    extra.insert("turn_id".into(), turn_id.into());
    e.extra = Some(extra);
    e
}

/// `202` in rounds mode: the chat was taken as the seat's action for
/// `round` (docs/protocol.md §8); `turn_id` is null, the round's turn
/// being yet to come.
#[derive(Serialize, utoipa::ToSchema)]
struct ActionAnswer<'a> {
    status: &'static str,
    round: u64,
    #[schema(value_type = String)]
    seat_id: &'a SeatId,
    #[schema(value_type = Option<String>)]
    request_id: Option<&'a RequestId>,
    #[schema(value_type = Option<String>)]
    turn_id: Option<&'a str>,
    /// The same `request_id` was taken for this round already: this is
    /// its action, not a second one (as an `ack`'s `duplicate`).
    duplicate: bool,
    #[schema(value_type = String)]
    trace_id: &'a TraceId,
}

/// An answer with the request's trace id beside its fields.
#[derive(Serialize, utoipa::ToSchema)]
struct Traced<'a, T> {
    #[serde(flatten)]
    answer: T,
    /// The request's trace: its turn's audit rows carry it (a duplicate's
    /// turn keeps the trace of the request that ran it).
    trace_id: &'a TraceId,
}

/// The turn's last frame as the answer: `200` with the turn for
/// `turn_completed`; the failure's status and code for `turn_failed`.
fn answer(end: &TurnEnd, duplicate: bool, trace_id: &TraceId) -> HttpResponse {
    match ChatAnswer::new(end, duplicate) {
        ChatAnswer::Completed(answer) => HttpResponse::Ok().json(Traced { answer, trace_id }),
        ChatAnswer::Failed(answer) => {
            let mut resp = HttpResponse::build(super::errors::status_of(answer.error_code));
            if answer.error_code == ErrorCode::BudgetExceeded {
                // The day's budget is spent until 00:00 UTC, counted from
                // now (a duplicate's answer too), as a chat refused before
                // its turn is told.
                let (_, left_ms) = crate::budget::day_of(crate::storage::now_ms());
                let after = super::errors::retry_after_s(left_ms);
                resp.insert_header(("Retry-After", after.to_string()));
            }
            resp.json(Traced { answer, trace_id })
        }
        ChatAnswer::ApprovalRequired(answer) => {
            HttpResponse::Accepted().json(Traced { answer, trace_id })
        }
    }
}
