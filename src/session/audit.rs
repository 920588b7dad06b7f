//! The audit ledger's writer: one row and one log event per tool call, from
//! any caller (the game loop, players, other services). The row is made
//! apart from writing it, so the session's call pipeline stays free of IO.

use serde_json::Value;

use crate::error::{ErrorCode, ToolStatus, wire_name};
use crate::ids::{CallId, SessionId, SiteId, TenantId, TraceId, TurnId};
use crate::llm::Usage;
use crate::storage::{AuditRow, Store, now_ms};
use crate::tools::{Role, ToolError, args_hash};

/// Where a call from another service came from, for the ledger; empty for
/// the game loop and players.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOrigin {
    pub site_id: Option<SiteId>,
    pub span_id: Option<String>,
    pub user_id: Option<String>,
}

/// One tool call to record.
pub struct AuditedCall<'a> {
    pub session_id: Option<&'a SessionId>,
    pub tenant_id: &'a TenantId,
    pub trace_id: &'a TraceId,
    pub turn_id: Option<&'a TurnId>,
    pub call_id: Option<&'a CallId>,
    pub tool: &'a str,
    pub role: Role,
    /// The hash of the arguments the pipeline read ([`read_args_hash`]).
    pub args_hash: String,
    /// `Ok` or why the call failed.
    pub failure: Option<&'a ToolError>,
    pub duration_ms: f64,
    pub usage: Usage,
    pub origin: &'a CallOrigin,
}

/// The hash of the arguments the pipeline read, `args` ([`args_hash`]).
/// `sent` is the hash a caller already took of the value it handed the
/// pipeline, which reads such a value as it is or reads none (`null`: an
/// unknown tool, arguments over the bound): unless it read none, the hash
/// taken is the hash of what it read, and stands.
pub fn read_args_hash(args: &Value, sent: Option<&str>) -> String {
    match sent {
        Some(hash) if !args.is_null() => hash.to_owned(),
        _ => args_hash(args),
    }
}

/// Queues the call's audit row and writes its `tool_call_success` /
/// `tool_call_failed` log event.
pub fn record(store: &Store, c: AuditedCall<'_>) {
    write(store, row(c));
}

/// The audit row of a call. A session's calls make it where the call runs
/// (`session/calls.rs`, which holds no store) and the actor writes it
/// ([`write()`]).
pub fn row(c: AuditedCall<'_>) -> AuditRow {
    let (status, reason, code, message) = match c.failure {
        None => (ToolStatus::Ok, None, None, None),
        Some(e) => (
            e.status(),
            Some(e.reason),
            Some(e.code),
            Some(e.message.clone()),
        ),
    };
    AuditRow {
        audit_id: 0,
        session_id: c.session_id.cloned(),
        tenant_id: c.tenant_id.clone(),
        trace_id: c.trace_id.clone(),
        turn_id: c.turn_id.cloned(),
        call_id: c.call_id.cloned(),
        tool: c.tool.to_owned(),
        role: wire_name(&c.role),
        args_hash: c.args_hash,
        status: wire_name(&status),
        reason: reason.as_ref().map(wire_name),
        error_code: code.map(ErrorCode::as_str),
        error_message: message,
        duration_us: (c.duration_ms * 1000.0).round() as i64,
        prompt_tokens: c.usage.prompt_tokens as i64,
        completion_tokens: c.usage.completion_tokens as i64,
        created_at: now_ms(),
        site_id: c.origin.site_id.clone(),
        span_id: c.origin.span_id.clone(),
        user_id: c.origin.user_id.clone(),
    }
}

/// Writes the row's `tool_call_success` / `tool_call_failed` log event and
/// queues it for the ledger.
pub fn write(store: &Store, row: AuditRow) {
    log(&row);
    store.audit(row);
}

/// Writes the row's `tool_call_success` / `tool_call_failed` log event.
pub fn log(row: &AuditRow) {
    let latency_ms = row.duration_us as f64 / 1000.0;
    // Only a failed call has an error code.
    let failed = row.error_code.is_some();
    let event = if failed {
        "tool_call_failed"
    } else {
        "tool_call_success"
    };
    tracing::info!(
        event, trace_id = %row.trace_id, session_id = row.session_id.as_deref().unwrap_or_default(),
        tenant_id = %row.tenant_id, site_id = row.site_id.as_deref().unwrap_or_default(),
        span_id = row.span_id.as_deref().unwrap_or_default(),
        user_id = row.user_id.as_deref().unwrap_or_default(),
        tool_name = %row.tool, role = %row.role, args_hash = %row.args_hash, status = %row.status,
        reason = row.reason.as_deref().unwrap_or_default(),
        error_code = row.error_code.as_deref().unwrap_or_default(),
        error_message = row.error_message.as_deref().unwrap_or_default(),
        latency_ms, turn_id = row.turn_id.as_deref().unwrap_or_default(),
        call_id = row.call_id.as_deref().unwrap_or_default(),
        prompt_tokens = row.prompt_tokens, completion_tokens = row.completion_tokens, failed,
        "{event}"
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::game::GameState;
    use crate::game::rng::SplitMix64;
    use crate::tools::{Caller, MAX_ARGS_BYTES, RawArgs, Registry};

    #[test]
    fn a_hash_taken_of_the_input_is_the_hash_of_the_arguments_read() {
        let registry = Registry::builtin().expect("built-in tools register");
        let all: Vec<String> = registry.names().iter().map(|n| (*n).to_owned()).collect();
        let caller = Caller::sessionless(Role::Service, &all);
        let big = "x".repeat(MAX_ARGS_BYTES);
        // (tool, input): run, refused by the pipeline, or never read.
        let cases = [
            ("roll_dice", json!({"dice": "1d6", "reason": "luck"})),
            ("roll_dice", json!({"dice": 6})),
            ("roll_dice", json!({"dice": big})),
            ("roll_dice", json!([1, 2])),
            ("roll_dice", json!(null)),
            ("teleport", json!({"to": "moon"})),
        ];
        for (tool, input) in cases {
            let sent = args_hash(&input);
            let inv = registry.invoke(
                tool,
                RawArgs::Value(input.clone()),
                &caller,
                &GameState::empty(),
                &mut SplitMix64::new(1),
            );
            assert_eq!(
                read_args_hash(&inv.args, Some(&sent)),
                args_hash(&inv.args),
                "{tool} {input:.40}"
            );
            assert_eq!(read_args_hash(&inv.args, None), args_hash(&inv.args));
        }
    }
}
