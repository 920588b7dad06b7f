//! The wire vocabulary of errors and how each maps to HTTP.
//!
//! [`ErrorCode`] is every upper-case code a client can see; [`Reason`] is the
//! snake_case vocabulary of tool results; [`ApiError`] is what HTTP handlers
//! return (`http` makes it a response). Each HTTP status is chosen in
//! exactly one `match`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every upper-case error code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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
    UnsupportedMediaType,
    /// The node is full (connections, sessions) or its storage is behind;
    /// try again after `Retry-After`.
    Overloaded,
    /// The request conflicts with what is stored: an idempotency key used
    /// for another call or still running, a tenant's last site.
    Conflict,
    /// An operator closed the session for good: it takes no more chats,
    /// calls or connections (its story stays readable).
    SessionClosed,
    /// The session holds every seat it may (`party.max_players`, capped by
    /// `QUESTD_MAX_PLAYERS`).
    SessionFull,
    /// An invite code that opens nothing: unknown, used up, expired or of
    /// another session (one answer for all).
    InviteNotFound,
    /// The session holds every pending timer it may (64, docs/protocol.md
    /// §9); a `schedule_event` past it is refused until one is cancelled
    /// or fires.
    TimerLimit,
    /// A call that waited for a person's approval was denied, or nobody
    /// decided in time (docs/protocol.md §19): the tool did not run.
    ApprovalDenied,
    /// A save that fails its checks (docs/protocol.md §13): `problems`
    /// lists why.
    InvalidSave,
    /// A token budget of the day is spent (contract §12): no model call
    /// starts until the UTC day's end, `retry_after_ms` away.
    BudgetExceeded,
}

impl ErrorCode {
    /// The HTTP status this code is answered with (the HTTP layer turns it
    /// into a response; this module knows no web framework).
    pub fn http_status(self) -> u16 {
        use ErrorCode::*;
        match self {
            RateLimited => 429,
            Forbidden | ToolDisabled | PermissionDenied | ToolNotAllowed | ApprovalDenied => 403,
            InvalidFrame | TextTooLong | InvalidArgs | InvalidArguments | ContextInvalid
            | BadRequest | InvalidCampaign | InvalidSave | SessionMismatch => 400,
            // A full queue is the same advice as a rate limit: slow down.
            QueueFull => 429,
            BudgetExceeded => 429,
            ZoneNotFound | ToolNotFound | NotFound | InviteNotFound => 404,
            Timeout | AiTimeout => 408,
            Unauthorized => 401,
            PayloadTooLarge => 413,
            UnsupportedMediaType => 415,
            Overloaded => 503,
            Conflict | SessionFull | TimerLimit => 409,
            SessionClosed => 410,
            // The model, not the caller, got it wrong.
            UpstreamError | InvalidAiJson => 502,
            MaxIterations | InternalError | ExecutionFailed => 500,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Ok,
    /// Refused by the allowlist, permissions or a state rule.
    Rejected,
    /// Invalid or incomplete arguments, tool failure or timeout.
    Error,
}

/// Why a tool call did not succeed (snake_case on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
        let chain = with_causes(cause);
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

/// An error with its causes, `outer: inner: innermost` (many errors, such as
/// reqwest's, leave out why in their own text).
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn with_causes_names_every_cause() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("request failed")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(with_causes(&e), "request failed: connection refused");
        assert_eq!(with_causes(&e.0), "connection refused");
    }

    #[test]
    fn codes_render_upper_case() {
        assert_eq!(ErrorCode::RateLimited.as_str(), "RATE_LIMITED");
        assert_eq!(ErrorCode::InvalidAiJson.as_str(), "INVALID_AI_JSON");
        assert_eq!(ErrorCode::ZoneNotFound.as_str(), "ZONE_NOT_FOUND");
    }

    /// Every code: its wire spelling and HTTP status. Adding a variant
    /// without a row here fails `every_code_has_a_row`.
    const TABLE: &[(ErrorCode, &str, u16)] = &[
        (ErrorCode::RateLimited, "RATE_LIMITED", 429),
        (ErrorCode::Forbidden, "FORBIDDEN", 403),
        (ErrorCode::InvalidFrame, "INVALID_FRAME", 400),
        (ErrorCode::TextTooLong, "TEXT_TOO_LONG", 400),
        (ErrorCode::QueueFull, "QUEUE_FULL", 429),
        (ErrorCode::MaxIterations, "MAX_ITERATIONS", 500),
        (ErrorCode::AiTimeout, "AI_TIMEOUT", 408),
        (ErrorCode::InvalidAiJson, "INVALID_AI_JSON", 502),
        (ErrorCode::UpstreamError, "UPSTREAM_ERROR", 502),
        (ErrorCode::InternalError, "INTERNAL_ERROR", 500),
        (ErrorCode::InvalidArgs, "INVALID_ARGS", 400),
        (ErrorCode::InvalidArguments, "INVALID_ARGUMENTS", 400),
        (ErrorCode::SessionMismatch, "SESSION_MISMATCH", 400),
        (ErrorCode::ZoneNotFound, "ZONE_NOT_FOUND", 404),
        (ErrorCode::ToolNotFound, "TOOL_NOT_FOUND", 404),
        (ErrorCode::ToolNotAllowed, "TOOL_NOT_ALLOWED", 403),
        (ErrorCode::ToolDisabled, "TOOL_DISABLED", 403),
        (ErrorCode::PermissionDenied, "PERMISSION_DENIED", 403),
        (ErrorCode::Timeout, "TIMEOUT", 408),
        (ErrorCode::ExecutionFailed, "EXECUTION_FAILED", 500),
        (ErrorCode::ContextInvalid, "CONTEXT_INVALID", 400),
        (ErrorCode::BadRequest, "BAD_REQUEST", 400),
        (ErrorCode::InvalidCampaign, "INVALID_CAMPAIGN", 400),
        (ErrorCode::Unauthorized, "UNAUTHORIZED", 401),
        (ErrorCode::NotFound, "NOT_FOUND", 404),
        (ErrorCode::PayloadTooLarge, "PAYLOAD_TOO_LARGE", 413),
        (
            ErrorCode::UnsupportedMediaType,
            "UNSUPPORTED_MEDIA_TYPE",
            415,
        ),
        (ErrorCode::Overloaded, "OVERLOADED", 503),
        (ErrorCode::Conflict, "CONFLICT", 409),
        (ErrorCode::SessionClosed, "SESSION_CLOSED", 410),
        (ErrorCode::SessionFull, "SESSION_FULL", 409),
        (ErrorCode::InviteNotFound, "INVITE_NOT_FOUND", 404),
        (ErrorCode::TimerLimit, "TIMER_LIMIT", 409),
        (ErrorCode::ApprovalDenied, "APPROVAL_DENIED", 403),
        (ErrorCode::InvalidSave, "INVALID_SAVE", 400),
        (ErrorCode::BudgetExceeded, "BUDGET_EXCEEDED", 429),
    ];

    #[test]
    fn http_status_table() {
        for (code, wire, status) in TABLE {
            assert_eq!(code.as_str(), *wire);
            assert_eq!(code.http_status(), *status, "{code:?}");
            let back: ErrorCode = serde_json::from_value(json!(wire)).unwrap();
            assert_eq!(back, *code);
        }
    }

    #[test]
    fn every_code_has_a_row() {
        // An exhaustive match: a new variant does not compile until it is
        // placed here, and the count below makes it need a table row too.
        fn index(code: ErrorCode) -> usize {
            use ErrorCode::*;
            match code {
                RateLimited => 0,
                Forbidden => 1,
                InvalidFrame => 2,
                TextTooLong => 3,
                QueueFull => 4,
                MaxIterations => 5,
                AiTimeout => 6,
                InvalidAiJson => 7,
                UpstreamError => 8,
                InternalError => 9,
                InvalidArgs => 10,
                InvalidArguments => 11,
                SessionMismatch => 12,
                ZoneNotFound => 13,
                ToolNotFound => 14,
                ToolNotAllowed => 15,
                ToolDisabled => 16,
                PermissionDenied => 17,
                Timeout => 18,
                ExecutionFailed => 19,
                ContextInvalid => 20,
                BadRequest => 21,
                InvalidCampaign => 22,
                Unauthorized => 23,
                NotFound => 24,
                PayloadTooLarge => 25,
                UnsupportedMediaType => 26,
                Overloaded => 27,
                Conflict => 28,
                SessionClosed => 29,
                SessionFull => 30,
                InviteNotFound => 31,
                TimerLimit => 32,
                ApprovalDenied => 33,
                InvalidSave => 34,
                BudgetExceeded => 35,
            }
        }
        let mut seen = [false; 36];
        for (code, _, _) in TABLE {
            seen[index(*code)] = true;
        }
        assert!(seen.iter().all(|s| *s), "every code has a row");
    }

    #[test]
    fn reasons_split_into_rejected_and_error() {
        let table = [
            (
                Reason::ToolNotAllowed,
                "tool_not_allowed",
                ToolStatus::Rejected,
            ),
            (Reason::InvalidArgs, "invalid_args", ToolStatus::Error),
            (
                Reason::ActorStateRestricted,
                "actor_state_restricted",
                ToolStatus::Rejected,
            ),
            (
                Reason::InvalidActorState,
                "invalid_actor_state",
                ToolStatus::Rejected,
            ),
            (Reason::NotFound, "not_found", ToolStatus::Error),
            (
                Reason::PermissionDenied,
                "permission_denied",
                ToolStatus::Rejected,
            ),
            (Reason::ToolDisabled, "tool_disabled", ToolStatus::Rejected),
            (
                Reason::SessionMismatch,
                "session_mismatch",
                ToolStatus::Error,
            ),
            (Reason::Timeout, "timeout", ToolStatus::Error),
            (
                Reason::ExecutionFailed,
                "execution_failed",
                ToolStatus::Error,
            ),
        ];
        for (reason, wire, status) in table {
            assert_eq!(wire_name(&reason), wire);
            assert_eq!(reason.status(), status, "{reason:?}");
        }
        assert_eq!(wire_name(&ToolStatus::Rejected), "rejected");
        assert_eq!(
            serde_json::to_value(Reason::InvalidActorState).unwrap(),
            json!("invalid_actor_state")
        );
    }
}
