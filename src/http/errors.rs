//! How an error is answered over HTTP: every [`ApiError`] as
//! `{"error_code","message"}` with its status chosen by
//! [`ErrorCode::http_status`], and the refusals of the layers below (the
//! hub, a session, storage) as `ApiError`s, each converted in one place.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError};

use crate::error::{ApiError, ErrorCode};
use crate::protocol::http::ErrorBody;
use crate::session::{ChatRefused, HubError};
use crate::storage::{STORAGE_BEHIND, STORAGE_FULL, STORAGE_UNAVAILABLE, StorageError};

/// The answer for an unknown session (and for another tenant's, which is
/// answered exactly the same); the id is cut to 64 characters.
pub fn no_session(id: &str) -> String {
    format!("no session {}", crate::tools::cut_name(id))
}

/// The refusal `503 OVERLOADED` with `Retry-After: 1`.
pub fn overloaded(message: impl Into<String>) -> ApiError {
    let mut e = ApiError::new(ErrorCode::Overloaded, message);
    e.retry_after_s = Some(1);
    e
}

/// `Retry-After` in whole seconds for a wait of `ms`: at least 1.
pub fn retry_after_s(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// What a session refused (a chat or a direct call) as an HTTP error, with
/// `Retry-After` when waiting helps.
pub fn session_refused(r: ChatRefused) -> ApiError {
    let reloading = r.is_reloading();
    let mut e = ApiError::new(r.code, r.message);
    e.retry_after_s = match (r.retry_after_ms, r.code) {
        (Some(ms), _) => Some(retry_after_s(ms)),
        (None, ErrorCode::QueueFull | ErrorCode::Overloaded) => Some(1),
        _ if reloading => Some(1),
        _ => None,
    };
    e
}

/// A tool call a route made for its caller (a direct call into a
/// session) that the tool refused, as HTTP: its code's status, with the
/// tool's `reason`; a tool's `not_found` is `404 NOT_FOUND` like any
/// unknown resource.
pub fn tool_refused(e: crate::tools::ToolError) -> ApiError {
    let code = if e.reason == crate::error::Reason::NotFound {
        ErrorCode::NotFound
    } else {
        e.code
    };
    ApiError::new(code, e.message).with("reason", serde_json::json!(e.reason))
}

/// The HTTP status of a wire error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Every HTTP error is answered as `{"error_code","message"}` plus its
/// extra fields, with `Retry-After` when it has one.
impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status_of(self.code)
    }

    fn error_response(&self) -> HttpResponse {
        let mut body = serde_json::to_value(ErrorBody {
            error_code: self.code,
            message: &self.message,
        })
        .unwrap_or_default();
        if let (Some(extra), Some(obj)) = (&self.extra, body.as_object_mut()) {
            obj.extend(extra.clone());
        }
        let mut resp = HttpResponse::build(self.status_code());
        if let Some(s) = self.retry_after_s {
            resp.insert_header(("Retry-After", s.to_string()));
        }
        resp.json(body)
    }
}

/// The wait a tenant at its share of the node is told to take: its
/// sessions leave only as they unload (after `QUESTD_IDLE_SECS` unused).
pub const TENANT_FULL_RETRY_S: u64 = 10;

/// A session the hub could not give, as HTTP: `503` when the node is full
/// (sessions, or their state) or its storage is behind, `429` when the
/// tenant holds its share of the node, a generic `500` otherwise (the
/// cause is logged, never sent).
pub fn hub_failed(e: HubError) -> ApiError {
    match e {
        HubError::Full(_) | HubError::StateFull => overloaded(e.to_string()),
        HubError::TenantFull(_) => {
            let mut refused = ApiError::new(ErrorCode::RateLimited, e.to_string());
            refused.retry_after_s = Some(TENANT_FULL_RETRY_S);
            refused
        }
        HubError::Elsewhere => overloaded("the session runs on another node; try again shortly"),
        HubError::Draining => overloaded(e.to_string()),
        HubError::Closed => ApiError::new(ErrorCode::SessionClosed, e.to_string()),
        HubError::Storage(e) => storage_failed(e),
    }
}

/// A storage failure as an HTTP error: `503` with `Retry-After` when
/// waiting helps, `400` when the database refused the request's own data
/// (the store is fine; the same request would fail again), else `500`
/// (the cause goes to the log only).
pub fn storage_failed(e: StorageError) -> ApiError {
    match e {
        StorageError::Overloaded => overloaded(STORAGE_BEHIND),
        StorageError::Full => overloaded(STORAGE_FULL),
        // Another node (one of the newer version) reads it: a load
        // balancer that retries elsewhere gets the session served.
        e @ StorageError::NewerFormat { .. } => {
            overloaded(format!("{e}; another node of a newer version serves it"))
        }
        StorageError::Unavailable(cause) => {
            tracing::warn!(%cause, "the database is unavailable");
            overloaded(STORAGE_UNAVAILABLE)
        }
        StorageError::Unstorable(cause) => {
            tracing::warn!(%cause, "a request's data could not be stored");
            ApiError::bad_request(UNSTORABLE)
        }
        e => ApiError::internal(&e),
    }
}

/// What a caller is told when the database refused its data.
pub const UNSTORABLE: &str = "a value in the request cannot be stored";

/// Any path no route matches: a JSON 404 like every other error.
pub async fn no_route(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.path()
    )))
}

/// A session's refusal, with `Retry-After` when waiting helps.
impl From<ChatRefused> for ApiError {
    fn from(r: ChatRefused) -> Self {
        session_refused(r)
    }
}

/// A session the hub could not give ([`hub_failed`]).
impl From<HubError> for ApiError {
    fn from(e: HubError) -> Self {
        hub_failed(e)
    }
}

/// A storage failure ([`storage_failed`]).
impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        storage_failed(e)
    }
}

/// An actor that stopped before it answered: a `500` whose cause is
/// logged.
impl From<actix::MailboxError> for ApiError {
    fn from(e: actix::MailboxError) -> Self {
        ApiError::internal(&e)
    }
}

/// Work sent off the HTTP worker that did not come back: a `500` whose
/// cause is logged.
impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::internal(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a layer below refused, through `?`, is answered exactly as
    /// the conversion function words it.
    #[test]
    fn conversions_answer_as_their_functions() {
        let answer = |e: ApiError| (e.code, e.message, e.retry_after_s);
        let refusals = [
            ChatRefused::new(ErrorCode::QueueFull, "the queue is full"),
            ChatRefused::new(ErrorCode::Forbidden, "no"),
            ChatRefused::reloading(),
        ];
        for r in refusals {
            assert_eq!(
                answer(ApiError::from(r.clone())),
                answer(session_refused(r))
            );
        }
        for (e, again) in [
            (HubError::Draining, HubError::Draining),
            (HubError::Closed, HubError::Closed),
            (HubError::StateFull, HubError::StateFull),
        ] {
            assert_eq!(answer(ApiError::from(e)), answer(hub_failed(again)));
        }
        for (e, again) in [
            (StorageError::Overloaded, StorageError::Overloaded),
            (StorageError::Full, StorageError::Full),
        ] {
            assert_eq!(answer(ApiError::from(e)), answer(storage_failed(again)));
        }
        let closed = answer(ApiError::from(HubError::Closed));
        assert_eq!((closed.0, closed.2), (ErrorCode::SessionClosed, None));
        let full = answer(ApiError::from(StorageError::Full));
        assert_eq!((full.0, full.2), (ErrorCode::Overloaded, Some(1)));
        let mailbox = answer(ApiError::from(actix::MailboxError::Closed));
        assert_eq!(
            (mailbox.0, mailbox.1.as_str()),
            (ErrorCode::InternalError, "internal error")
        );
    }
}
