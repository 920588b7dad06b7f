//! Saves over HTTP (docs/protocol.md §13): a session exported as one JSON
//! document, and a save imported as a new session.
//!
//! The export is read from storage, not from the live session: what is
//! stored is what a crash cannot take back, so a save never holds a step
//! no client could have seen. Its head (campaign and state) is written
//! first and its story streamed after it, a page of frames at a time, so a
//! long story is never in memory whole. The import is bounded before it is
//! read (`QUESTD_MAX_SAVE_MB`, and without a key the per-address limits of
//! creation), checked like an inline campaign (`crate::game::save`), and
//! stored with its story in one commit before it is answered.

use actix_web::http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::access::{authorize_stored, creator, key_first};
use super::body::{body_within, parse_json};
use super::created::{created, no_store};
use super::routes::add;
use super::state::AppState;
use super::stored::stored_meta;
use crate::error::{ApiError, ErrorCode};
use crate::game::save::{self, TAIL};
use crate::ids::SessionId;
use crate::session::{ImportSession, replayed};
use crate::storage::{Store, Visibility, now_ms, rfc3339};

/// Frames read from storage per page of an export's story.
const EXPORT_PAGE_FRAMES: u32 = 500;
/// Characters read per page of an export's story, at most.
const EXPORT_PAGE_CHARS: u64 = 4 * 1024 * 1024;

pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    // Before `/api/v1/sessions/{id}` routes could take "import" for an id.
    add(cfg, Method::POST, "/api/v1/sessions/import", import);
    add(cfg, Method::GET, "/api/v1/sessions/{id}/export", export);
}

/// The session as a save: campaign, state and story, never a token.
#[utoipa::path(get, path = "/api/v1/sessions/{id}/export", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    security(("player_token" = []), ("internal_key" = [])),
    responses(
        (status = 200, description = "The save (docs/save.schema.json), streamed", content_type = "application/json", body = Object),
        (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 403, description = "A spectator token; a tenant key and another tenant's `X-Tenant-ID`", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn export(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    key_first(&req, &state)?;
    let meta = stored_meta(&state, &path).await?;
    authorize_stored(&req, &state, &meta, true).await?;
    let store = state.store.clone();
    let loaded = store
        .load_session(&meta.session_id)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .ok_or_else(|| ApiError::not_found(super::errors::no_session(&meta.session_id)))?;
    // Replaying a long tail of rows is a moment's work: off the worker.
    let id = meta.session_id.clone();
    let (head, last_seq) = web::block(move || {
        let (game, _, last_seq) = replayed(&loaded)?;
        let head = save::head(&game, id.as_str(), last_seq, &rfc3339(now_ms()))
            .map_err(|e| crate::storage::StorageError::Corrupt(e.to_string()))?;
        Ok::<_, crate::storage::StorageError>((head, last_seq))
    })
    .await?
    .map_err(|e| ApiError::internal(&e))?;
    let story = Story {
        store,
        session_id: meta.session_id.clone(),
        after: 0,
        last_seq,
        head: Some(head),
        done: false,
    };
    let body = futures_util::stream::unfold(story, Story::next);
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .insert_header(no_store())
        .insert_header((
            CONTENT_DISPOSITION,
            format!(
                "attachment; filename=\"questd-save-{}.json\"",
                meta.session_id
            ),
        ))
        .streaming(body))
}

/// Where a streamed export stands: its head to send, then the story's
/// frames after `after` up to `last_seq`, then the tail.
struct Story {
    store: Store,
    session_id: SessionId,
    after: u64,
    last_seq: u64,
    head: Option<String>,
    done: bool,
}

impl Story {
    /// The next piece of the save: the head, a page of frames, the tail.
    /// A read that fails ends the body early (the document is then
    /// incomplete, which no JSON reader takes for a save).
    async fn next(mut self) -> Option<(Result<web::Bytes, ApiError>, Self)> {
        if let Some(head) = self.head.take() {
            return Some((Ok(head.into()), self));
        }
        if self.done {
            return None;
        }
        if self.after >= self.last_seq {
            self.done = true;
            return Some((Ok(web::Bytes::from_static(TAIL.as_bytes())), self));
        }
        let page = self
            .store
            .frames_after(
                &self.session_id,
                self.after,
                EXPORT_PAGE_FRAMES,
                EXPORT_PAGE_CHARS,
            )
            .await;
        let frames = match page {
            Ok(frames) if !frames.is_empty() => frames,
            Ok(_) => {
                tracing::warn!(session_id = %self.session_id, after = self.after, "an export found its story shorter than its state");
                return None;
            }
            Err(e) => {
                tracing::warn!(session_id = %self.session_id, error = %e, "reading a story to export failed");
                return None;
            }
        };
        let mut chunk = String::with_capacity(frames.iter().map(|(_, f)| f.len() + 1).sum());
        for (seq, frame) in frames {
            if seq > self.last_seq {
                break;
            }
            if self.after > 0 {
                chunk.push(',');
            }
            chunk.push_str(&frame);
            self.after = seq;
        }
        Some((Ok(chunk.into()), self))
    }
}

/// `?visibility=` of an import.
#[derive(Deserialize)]
struct ImportQuery {
    visibility: Option<String>,
}

/// A save becomes a new session: new id, new tokens, the save's state and
/// story.
#[utoipa::path(post, path = "/api/v1/sessions/import", tag = "sessions",
    security((), ("internal_key" = [])),
    params(("visibility" = Option<String>, Query, description = "`private` (the default) or `public`")),
    request_body(content = Object, description = "A save (docs/save.schema.json)"),
    responses(
        (status = 201, description = "The new session", body = crate::protocol::http::SessionCreated<'static>),
        (status = 400, description = "The save fails its checks (`INVALID_SAVE`, `problems` lists why), or a bad query", body = crate::protocol::http::ErrorBody),
        (status = 401, description = "A tenant named without its key", body = crate::protocol::http::ErrorBody),
        (status = 413, description = "A save larger than `QUESTD_MAX_SAVE_MB` (without a key, than an address may send at once)", body = crate::protocol::http::ErrorBody),
        (status = 429, description = "Too many sessions or campaign bytes from this address, or too many for this tenant", body = crate::protocol::http::ErrorBody),
        (status = 503, description = "The node holds its most sessions or session state", body = crate::protocol::http::ErrorBody)))]
async fn import(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: Result<web::Query<ImportQuery>, actix_web::Error>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let visibility = match query
        .ok()
        .and_then(|q| q.into_inner().visibility)
        .as_deref()
    {
        None | Some("private") => Visibility::Private,
        Some("public") => Visibility::Public,
        Some(_) => {
            return Err(ApiError::bad_request(
                "?visibility= is \"private\" (the default) or \"public\"",
            ));
        }
    };
    let (tenant_id, anonymous) = creator(&req, &state, "importing a save for a tenant")?;
    let limit = state.max_save_bytes;
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("a save is at most {limit} bytes (QUESTD_MAX_SAVE_MB)"),
        )
    };
    // Refused from what the request says of itself, before a byte is read.
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    if anonymous && let Some(n) = declared {
        state.admission.check_create_bytes(&req, n)?;
    }
    let body = body_within(body, limit).await.map_err(|e| {
        if e.code == ErrorCode::PayloadTooLarge {
            too_large()
        } else {
            e
        }
    })?;
    if anonymous && declared.is_none() {
        state.admission.check_create_bytes(&req, body.len())?;
    }
    let tools: Vec<&'static str> = state.registry.names().to_vec();
    // Parsing and checking are linear in the save's size, which may be
    // megabytes: off the worker.
    let read = web::block(move || -> Result<_, ApiError> {
        let value = parse_json(&body)?;
        let imported = save::read(value, &tools, now_ms()).map_err(|e| {
            ApiError::new(ErrorCode::InvalidSave, "the save is invalid")
                .with("problems", json!(e.problems))
        })?;
        let text = serde_json::to_string(&imported.state).map_err(|e| ApiError::internal(&e))?;
        Ok((imported, text))
    })
    .await??;
    let (imported, text) = read;
    let timers = imported
        .state
        .timers
        .pending()
        .iter()
        .map(|t| (t.timer_id.to_string(), t.due_at))
        .collect();
    let new = state
        .hub
        .send(ImportSession {
            tenant_id,
            visibility,
            anonymous,
            campaign_id: imported.state.campaign_id.clone(),
            title: imported.state.title.clone(),
            state: text,
            story: imported.story,
            timers,
        })
        .await??;
    Ok(created(&req, &state, &new))
}
