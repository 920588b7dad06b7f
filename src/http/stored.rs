//! Reads of what a session stored (its meta, its audit ledger) without
//! loading the session: the session's own routes and the console's.

use actix_web::{HttpResponse, web};

use super::body::{bad_query, page_size};
use super::errors::no_session;
use super::state::AppState;
use crate::error::ApiError;
use crate::ids::SessionId;
use crate::protocol::http::AuditLedgerPage;
use crate::protocol::requests::{AuditQuery, SeqPage};
use crate::storage::SessionMeta;

/// Most actions returned in one page.
pub const MAX_ACTIONS_PAGE: u32 = 1000;
const DEFAULT_ACTIONS_PAGE: u32 = 100;

/// A session's stored meta, without loading the session; 404 if unknown.
pub async fn stored_meta(state: &AppState, id: &SessionId) -> Result<SessionMeta, ApiError> {
    state
        .store
        .session_meta(id)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .ok_or_else(|| ApiError::not_found(no_session(id.as_str())))
}

/// A page size from `?limit=`: the default when absent, within 1..=max.
pub fn page_limit(asked: Option<u32>) -> u32 {
    page_size(asked, DEFAULT_ACTIONS_PAGE, MAX_ACTIONS_PAGE)
}

/// A [`SeqPage`] query, or `400` saying what it takes.
pub fn seq_page(query: Result<web::Query<SeqPage>, actix_web::Error>) -> Result<SeqPage, ApiError> {
    query.map(web::Query::into_inner).map_err(bad_query(
        "after_seq and limit are whole numbers (e.g. ?after_seq=10&limit=50)",
    ))
}

/// A page of the audit ledger of the session `path` names, for a caller
/// `authorize` lets read it: the session's route and the console's.
pub async fn audit_ledger(
    state: &AppState,
    path: &SessionId,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
    authorize: impl FnOnce(&SessionMeta) -> Result<(), ApiError>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(bad_query(
        "after_id and limit are whole numbers (e.g. ?after_id=10&limit=50)",
    ))?;
    let meta = stored_meta(state, path).await?;
    authorize(&meta)?;
    let limit = page_limit(query.limit);
    let page = state
        .store
        .audit_page(&meta.session_id, query.after_id.unwrap_or(0), limit)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(AuditLedgerPage::from(&page)))
}
