//! The wire vocabulary of errors and how each maps to HTTP.
//!
//! [`ErrorCode`] is every upper-case code a client can see; [`Reason`] is the
//! snake_case vocabulary of tool results; [`ApiError`] is what HTTP handlers
//! return. Each HTTP status is chosen in exactly one `match`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every upper-case error code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    // WebSocket frame errors.
    RateLimited,
    Forbidden,
    InvalidFrame,
    TextTooLong,
    QueueFull,
    // Turn failures.
    MaxIterations,
    AiTimeout,
    InvalidAiJson,
    UpstreamError,
    InternalError,
    // Tool results.
    InvalidArgs,
    InvalidArguments,
    SessionMismatch,
    ZoneNotFound,
    ToolNotFound,
    ToolNotAllowed,
    ToolDisabled,
    PermissionDenied,
    Timeout,
    ExecutionFailed,
    ContextInvalid,
    // HTTP.
    BadRequest,
    InvalidCampaign,
    Unauthorized,
    NotFound,
    PayloadTooLarge,
}

impl ErrorCode {
    /// The HTTP status this code is answered with.
    pub fn http_status(self) -> StatusCode {
        use ErrorCode::*;
        match self {
            RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Forbidden | ToolDisabled | PermissionDenied | ToolNotAllowed => StatusCode::FORBIDDEN,
            InvalidFrame | TextTooLong | InvalidArgs | InvalidArguments | InvalidAiJson
            | ContextInvalid | BadRequest | InvalidCampaign | SessionMismatch => {
                StatusCode::BAD_REQUEST
            }
            QueueFull => StatusCode::SERVICE_UNAVAILABLE,
            ZoneNotFound | ToolNotFound | NotFound => StatusCode::NOT_FOUND,
            Timeout | AiTimeout => StatusCode::REQUEST_TIMEOUT,
            Unauthorized => StatusCode::UNAUTHORIZED,
            PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            MaxIterations | UpstreamError => StatusCode::BAD_GATEWAY,
            InternalError | ExecutionFailed => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The code as it appears on the wire, e.g. `"RATE_LIMITED"`.
    pub fn as_str(self) -> String {
        wire_name(&self)
    }
}

/// How a unit-like enum value is spelled on the wire (its serde name).
pub fn wire_name<T: Serialize + std::fmt::Debug>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        _ => format!("{value:?}"),
    }
}

/// The outcome class of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Ok,
    /// Refused by the allowlist, permissions or a state rule.
    Rejected,
    /// Invalid or incomplete arguments, tool failure or timeout.
    Error,
}

/// Why a tool call did not succeed (snake_case on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    ToolNotAllowed,
    InvalidArgs,
    ActorStateRestricted,
    InvalidActorState,
    NotFound,
    PermissionDenied,
    ToolDisabled,
    SessionMismatch,
    Timeout,
    ExecutionFailed,
}

impl Reason {
    /// Whether this reason is a refusal (`rejected`) or a failure (`error`).
    pub fn status(self) -> ToolStatus {
        use Reason::*;
        match self {
            ToolNotAllowed | ActorStateRestricted | InvalidActorState | PermissionDenied
            | ToolDisabled => ToolStatus::Rejected,
            InvalidArgs | NotFound | SessionMismatch | Timeout | ExecutionFailed => {
                ToolStatus::Error
            }
        }
    }
}

/// An error answered over HTTP as `{"error_code","message"}`.
#[derive(Debug, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Extra fields merged into the body (e.g. `problems`).
    pub extra: Option<serde_json::Map<String, Value>>,
    /// Seconds for `Retry-After`, for 429.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            extra: None,
            retry_after_s: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    /// A 500 whose cause is logged and never sent.
    pub fn internal(cause: &dyn std::error::Error) -> Self {
        let mut chain = cause.to_string();
        let mut source = cause.source();
        while let Some(s) = source {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            source = s.source();
        }
        tracing::error!(cause = %chain, "internal error");
        Self::new(ErrorCode::InternalError, "internal error")
    }

    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extra
            .get_or_insert_with(Default::default)
            .insert(key.into(), value);
        self
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.http_status()
    }

    fn error_response(&self) -> HttpResponse {
        let mut body = json!({"error_code": self.code, "message": self.message});
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_render_upper_case() {
        assert_eq!(ErrorCode::RateLimited.as_str(), "RATE_LIMITED");
        assert_eq!(ErrorCode::InvalidAiJson.as_str(), "INVALID_AI_JSON");
        assert_eq!(ErrorCode::ZoneNotFound.as_str(), "ZONE_NOT_FOUND");
    }

    #[test]
    fn http_status_table() {
        let table = [
            (ErrorCode::NotFound, 404),
            (ErrorCode::ToolNotFound, 404),
            (ErrorCode::ToolDisabled, 403),
            (ErrorCode::PermissionDenied, 403),
            (ErrorCode::InvalidArgs, 400),
            (ErrorCode::ContextInvalid, 400),
            (ErrorCode::ExecutionFailed, 500),
            (ErrorCode::Timeout, 408),
            (ErrorCode::RateLimited, 429),
            (ErrorCode::Unauthorized, 401),
            (ErrorCode::PayloadTooLarge, 413),
        ];
        for (code, status) in table {
            assert_eq!(code.http_status().as_u16(), status, "{code:?}");
        }
    }

    #[test]
    fn reasons_split_into_rejected_and_error() {
        assert_eq!(Reason::ToolNotAllowed.status(), ToolStatus::Rejected);
        assert_eq!(Reason::ActorStateRestricted.status(), ToolStatus::Rejected);
        assert_eq!(Reason::InvalidArgs.status(), ToolStatus::Error);
        assert_eq!(Reason::NotFound.status(), ToolStatus::Error);
        assert_eq!(
            serde_json::to_value(Reason::InvalidActorState).unwrap(),
            json!("invalid_actor_state")
        );
    }
}
