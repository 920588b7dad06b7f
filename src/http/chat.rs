//! `POST /api/v1/chat`: one whole turn over HTTP. The turn runs through the
//! session's actor exactly like a WebSocket chat (same queue, rate limit and
//! `request_id` de-duplication), so every connection sees it live; the answer
//! is sent once the turn's last frame is durable.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::authorize_player;
use super::{AppState, json_body, send_to_session};
use crate::error::{ApiError, ErrorCode};
use crate::protocol::check_request_id;
use crate::session::{AwaitTurnEnd, SubmitChat};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/api/v1/chat", web::post().to(chat));
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    session_id: String,
    message: String,
    #[serde(default)]
    request_id: Option<String>,
}

async fn chat(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body: ChatRequest = serde_json::from_value(json_body(body).await?)
        .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))?;
    if let Some(id) = &body.request_id {
        check_request_id(id).map_err(ApiError::bad_request)?;
    }
    let (handle, accepted) = send_to_session(
        &state,
        &body.session_id,
        |meta| authorize_player(&req, &state, meta),
        || SubmitChat {
            text: body.message.clone(),
            request_id: body.request_id.clone(),
            conn_id: None,
        },
    )
    .await?;
    let end = handle
        .addr
        .send(AwaitTurnEnd {
            turn_id: accepted.turn_id.clone(),
        })
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(super::session_refused)?;
    let frame: Value = serde_json::from_str(&end).map_err(|e| ApiError::internal(&e))?;
    Ok(answer(frame, accepted.duplicate))
}

/// The turn's last frame as the answer: `200` with the turn for
/// `turn_completed`; the failure's status and code for `turn_failed`.
fn answer(frame: Value, duplicate: bool) -> HttpResponse {
    let field = |k: &str| frame.get(k).cloned().unwrap_or(Value::Null);
    if frame["type"] == "turn_completed" {
        let mut body = json!({
            "turn_id": field("turn_id"),
            "seq": field("seq"),
            "reply": field("reply"),
            "dialog_type": field("dialog_type"),
            "iterations": field("iterations"),
            "tool_events": field("tool_events"),
            "state_patch": field("state_patch"),
            "usage": field("usage"),
            "duplicate": duplicate,
        });
        if let Some(limit) = frame.get("limit") {
            body["limit"] = limit.clone();
        }
        return HttpResponse::Ok().json(body);
    }
    let code: ErrorCode =
        serde_json::from_value(field("error_code")).unwrap_or(ErrorCode::InternalError);
    let mut body = json!({
        "error_code": code,
        "message": field("message"),
        "turn_id": field("turn_id"),
        "seq": field("seq"),
        "duplicate": duplicate,
    });
    if let Some(limit) = frame.get("limit") {
        body["limit"] = limit.clone();
    }
    HttpResponse::build(super::status_of(code)).json(body)
}
