//! The start state a request names: a built-in campaign or a whole inline
//! one. Sessions and sites start the same way.

use actix_web::web;
use serde_json::{Value, json};

use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use std::sync::Arc;

use crate::game::pieces::SharedStart;
use crate::game::{BUILTIN_CAMPAIGNS, Campaign, GameState};
use crate::protocol::requests::NewSession;

/// A start state, and the stored text every session starting from it
/// unchanged can name instead of storing a copy (a built-in campaign's).
pub struct Start {
    pub state: GameState,
    /// `None` for an inline campaign: its state is stored whole.
    pub shared: Option<Arc<SharedStart>>,
}

/// The start state a body names: `{"campaign_id": "<built-in>"}` or
/// `{"campaign": {...inline campaign...}}` (which wins when both are
/// given). Sessions and sites start the same way.
pub async fn campaign_start(state: &AppState, body: NewSession) -> Result<Start, ApiError> {
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
            let state =
                web::block(move || Campaign::from_value(&inline, &tools).map(Campaign::into_state))
                    .await?
                    .map_err(|e| {
                        ApiError::new(ErrorCode::InvalidCampaign, "the campaign is invalid")
                            .with("problems", json!(e.problems))
                    })?;
            Start {
                state,
                shared: None,
            }
        }
        (Some(Value::String(id)), None) => match state.builtin_starts.start(&id) {
            Some((state, shared)) => Start {
                state,
                shared: Some(shared),
            },
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
