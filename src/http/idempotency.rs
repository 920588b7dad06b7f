//! Idempotent service calls: a tool call that carries a key (`request_id`
//! in the tool API's body, or an `Idempotency-Key` header on the tool API
//! and MCP) runs once; a retry with the same key, by the same tenant, gets
//! the first call's answer instead of running again.
//!
//! The first call claims its key in the database before it runs (so two
//! nodes cannot both run it) and stores its whole answer when it is done.
//! A retry while the first still runs, or one that reuses the key for
//! another tool or other input, is `409 CONFLICT`. A call refused before it
//! started (a full session queue, an overloaded node) gives its key back,
//! so its retry runs. Keys are kept for [`KEEP_KEYS`].

use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::peers::Routed;
use super::service::{CallAudit, CallReport, ServiceCall, ServiceContext, run_call};
use super::state::AppState;
use crate::error::{ApiError, ErrorCode, Reason};
use crate::ids::TenantId;
use crate::json::Written;
use crate::storage::now_ms;
use crate::tools::ToolError;

/// The header that names a call's key.
pub const KEY_HEADER: &str = "Idempotency-Key";
/// Set (`true`) on an answer that a retry got from its key's first call.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// Longest key.
pub const MAX_KEY_CHARS: usize = 128;
/// How long a key and its answer are kept.
pub const KEEP_KEYS: Duration = Duration::from_secs(24 * 60 * 60);

/// A call's answer as stored under its key.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<Arc<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<StoredError>,
    audit: CallAudit,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredError {
    reason: Reason,
    code: ErrorCode,
    message: String,
}

impl Stored {
    fn of(report: &CallReport) -> Self {
        let (output, error) = match &report.outcome {
            Ok(output) => (Some(output.json.clone()), None),
            Err(e) => (
                None,
                Some(StoredError {
                    reason: e.reason,
                    code: e.code,
                    message: e.message.clone(),
                }),
            ),
        };
        Self {
            output,
            error,
            audit: report.audit.clone(),
        }
    }

    fn report(self) -> CallReport {
        let outcome = match (self.output, self.error) {
            (_, Some(e)) => Err(ToolError::new(e.reason, e.code, e.message)),
            (Some(json), None) => Ok(Written::from_json(json)),
            (None, None) => Ok(Written::new(Value::Null)),
        };
        CallReport {
            outcome,
            audit: self.audit,
        }
    }
}

/// The key a call names: the `Idempotency-Key` header or the body's
/// `request_id` (they must agree when both are sent), checked.
pub fn call_key(req: &HttpRequest, body_key: Option<&str>) -> Result<Option<String>, ApiError> {
    let header = match req.headers().get(KEY_HEADER) {
        None => None,
        Some(raw) => Some(
            raw.to_str()
                .map(str::trim)
                .map_err(|_| bad_key(KEY_HEADER))?,
        ),
    };
    let key = match (header, body_key) {
        (Some(h), Some(b)) if h != b => {
            return Err(ApiError::bad_request(format!(
                "{KEY_HEADER} {h:?} and request_id {b:?} disagree; send one key"
            )));
        }
        (h, b) => h.or(b),
    };
    match key {
        None => Ok(None),
        Some(k)
            if !k.is_empty()
                && k.chars().count() <= MAX_KEY_CHARS
                && k.chars().all(|c| c.is_ascii_graphic()) =>
        {
            Ok(Some(k.to_owned()))
        }
        Some(_) => Err(bad_key(if header.is_some() {
            KEY_HEADER
        } else {
            "request_id"
        })),
    }
}

fn bad_key(name: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{name} must be 1 to {MAX_KEY_CHARS} printable ASCII characters"
    ))
}

/// Runs the call once for its key: the first call with `key` runs it and
/// stores its answer; a retry answers the stored one (`replayed` true).
/// Without a key this is [`super::service::call_tool`]. The key is claimed
/// with the hash of the input the tool gets, the one its answer and audit
/// row carry. A call whose session runs on
/// another node gives its key back: that node claims it.
pub async fn call_once(
    state: &AppState,
    ctx: &ServiceContext,
    tool: &str,
    input: Value,
    key: Option<&str>,
) -> Result<(Routed<CallReport>, bool), ApiError> {
    let call = ServiceCall::read(state, ctx, tool, input);
    let Some(key) = key else {
        return Ok((run_call(state, ctx, call).await, false));
    };
    let tenant = &ctx.tenant_id;
    let hash = call.hash.clone();
    let forget_before = now_ms() - KEEP_KEYS.as_millis() as i64;
    let store = &state.store;
    let claimed = store
        .claim_key(tenant, key, tool, &hash, forget_before)
        .await?;
    if !claimed {
        return replay(state, tenant, key, tool, &hash)
            .await
            .map(|r| (Routed::Here(r), true));
    }
    let report = match run_call(state, ctx, call).await {
        Routed::Here(report) => report,
        Routed::Owner(owner) => {
            if let Err(e) = store.drop_key(tenant, key).await {
                tracing::error!(error = %e, "an idempotency key was not given back");
            }
            return Ok((Routed::Owner(owner), false));
        }
    };
    let not_run = matches!(
        &report.outcome,
        Err(e) if matches!(e.code, ErrorCode::QueueFull | ErrorCode::Overloaded)
    );
    let kept = if not_run {
        store.drop_key(tenant, key).await
    } else {
        match serde_json::to_string(&Stored::of(&report)) {
            Ok(text) => {
                let status = match &report.outcome {
                    Ok(_) => 200,
                    Err(e) => e.code.http_status(),
                };
                store.finish_key(tenant, key, status, text).await
            }
            Err(e) => Err(crate::storage::StorageError::Database(e.to_string())),
        }
    };
    if let Err(e) = kept {
        // The call ran and its answer goes back; only a retry is affected
        // (it will be told the first call is still running).
        tracing::error!(error = %e, "an idempotency key's answer was not stored");
    }
    Ok((Routed::Here(report), false))
}

/// The stored answer of `key`, if it was for this call and is ready.
async fn replay(
    state: &AppState,
    tenant: &TenantId,
    key: &str,
    tool: &str,
    hash: &str,
) -> Result<CallReport, ApiError> {
    let row = state.store.load_key(tenant, key).await?;
    let Some(row) = row else {
        // Forgotten between the claim and now: it is over a day old.
        return Err(conflict(
            "this key's first call is too old to answer again; use a new key",
        ));
    };
    if row.tool != tool || row.request_hash != hash {
        return Err(conflict(&format!(
            "this key was used for another call ({}); use a new key for a new call",
            row.tool
        )));
    }
    match row.answer {
        Some((_, text)) => serde_json::from_str::<Stored>(&text)
            .map(Stored::report)
            .map_err(|e| ApiError::internal(&e)),
        None => {
            let mut e = conflict("the first call with this key is still running; retry shortly");
            e.retry_after_s = Some(1);
            Err(e)
        }
    }
}

fn conflict(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Conflict, message)
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn a_key_comes_from_the_header_or_the_body_and_they_must_agree() {
        let plain = TestRequest::default().to_http_request();
        let with = |k: &str| {
            TestRequest::default()
                .insert_header((KEY_HEADER, k))
                .to_http_request()
        };
        assert_eq!(call_key(&plain, None).unwrap(), None);
        assert_eq!(
            call_key(&plain, Some("r-1")).unwrap().as_deref(),
            Some("r-1")
        );
        assert_eq!(
            call_key(&with("k-1"), None).unwrap().as_deref(),
            Some("k-1")
        );
        assert_eq!(
            call_key(&with("k-1"), Some("k-1")).unwrap().as_deref(),
            Some("k-1")
        );
        let e = call_key(&with("k-1"), Some("r-1")).unwrap_err();
        assert!(e.message.contains("disagree"), "{}", e.message);
        for bad in ["", "has space", "键"] {
            assert!(call_key(&plain, Some(bad)).is_err(), "{bad:?}");
        }
        assert!(call_key(&plain, Some(&"k".repeat(MAX_KEY_CHARS + 1))).is_err());
    }

    #[test]
    fn a_stored_answer_reads_back_as_the_same_report() {
        let audit = CallAudit {
            trace_id: "tr-1".into(),
            tool_name: "log_user_event".into(),
            status: crate::error::ToolStatus::Ok,
            latency_ms: 1.5,
            request_payload_hash: "ab".into(),
            error_type: None,
            error_message: None,
        };
        for outcome in [
            Ok(Written::new(serde_json::json!({"event_id": "ev_1"}))),
            Err(ToolError::invalid_args("no event_type")),
        ] {
            let report = CallReport {
                outcome,
                audit: audit.clone(),
            };
            let text = serde_json::to_string(&Stored::of(&report)).unwrap();
            let back = serde_json::from_str::<Stored>(&text).unwrap().report();
            assert_eq!(back, report);
        }
    }
}
