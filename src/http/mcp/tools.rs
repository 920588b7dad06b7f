//! `tools/call` over MCP: a call runs through the shared service core
//! (`service`, with its idempotency), and its report becomes an MCP
//! result, or a stream whose first event says the call is queued.

use std::convert::Infallible;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use super::eras::Era;
use super::rpc::{
    Accepts, INTERNAL_ERROR, INVALID_PARAMS, JSONRPC, RpcError, api_error_body, rpc_result,
    sse_event, sse_response,
};

use crate::error::{ApiError, ErrorCode};
use crate::http::idempotency;
use crate::http::locate::locate;
use crate::http::peers::{Routed, Routing};
use crate::http::service::{self, CallReport, ServiceContext};
use crate::http::state::AppState;
use crate::tools::{cut_name, json_kind};

/// The `_meta` key under which a call result carries its audit record.
pub(super) const META_AUDIT: &str = "questd/audit";

/// `tools/call`: runs the tool through the service core and answers its
/// result, as JSON or (with a progress token and SSE allowed) as a stream
/// with a "queued" progress event first.
#[allow(clippy::too_many_arguments)]
pub(super) async fn tools_call(
    state: web::Data<AppState>,
    ctx: ServiceContext,
    routing: Routing,
    id: Value,
    params: Map<String, Value>,
    era: Era,
    accepts: Accepts,
    key: Option<String>,
) -> HttpResponse {
    let Some(name) = params.get("name").and_then(Value::as_str).map(cut_name) else {
        return RpcError::new(
            StatusCode::OK,
            INVALID_PARAMS,
            "tools/call needs params.name (a string)",
        )
        .response(&id);
    };
    if state.registry.spec(name).is_none() {
        return unknown_tool(name).response(&id);
    }
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(other) => {
            let e = crate::tools::ToolError::invalid_args(format!(
                "arguments must be a JSON object, not {}",
                json_kind(other)
            ));
            return accepts.reply(&id, era.complete(error_content(&e), None));
        }
    };
    let progress = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned();
    // A stream's first event goes out before the call ends, so where its
    // session runs is found first: a call for another node's session is
    // handed there whole, stream and all.
    if progress.is_some()
        && accepts.sse
        && let Some(session_id) = service::named_session(&ctx, &arguments)
        && let Ok(Routed::Owner(owner)) = locate(&state, &session_id).await
    {
        routing.hand_to(owner);
        return HttpResponse::ServiceUnavailable().finish();
    }
    // The call runs in its own task so that a client that goes away does not
    // cut it off between the session's answer and its audit record.
    let call = actix_web::rt::spawn(run_call(
        state,
        ctx,
        routing,
        name.to_owned(),
        arguments,
        key,
    ));
    let finish =
        move |joined: Result<Result<CallReport, ApiError>, tokio::task::JoinError>| match joined {
            Ok(Ok(report)) => match call_result(report) {
                Ok(result) => rpc_result(&id, era.complete(result, None)),
                Err(e) => e.body(&id),
            },
            Ok(Err(e)) => api_error_body(e, &id),
            Err(_) => RpcError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                INTERNAL_ERROR,
                "the call stopped before it answered",
            )
            .body(&id),
        };
    match progress {
        Some(token) if accepts.sse => {
            let queued = json!({
                "jsonrpc": JSONRPC,
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 0, "total": 1, "message": "queued"},
            });
            let first =
                futures_util::stream::once(async move { Ok::<_, Infallible>(sse_event(&queued)) });
            let last = futures_util::stream::once(async move {
                Ok::<_, Infallible>(sse_event(&finish(call.await)))
            });
            sse_response(first.chain(last))
        }
        _ => accepts.send(finish(call.await)),
    }
}

/// Runs one call with owned inputs, so it can outlive the request; with
/// an `Idempotency-Key`, once for that key.
pub(super) async fn run_call(
    state: web::Data<AppState>,
    ctx: ServiceContext,
    routing: Routing,
    name: String,
    arguments: Value,
    key: Option<String>,
) -> Result<CallReport, ApiError> {
    let (routed, _) =
        idempotency::call_once(&state, &ctx, &name, arguments, key.as_deref()).await?;
    routing.here(routed)
}

/// A call's outcome as an MCP result: output as text and structured
/// content, or the failure as an `isError` result; an unknown tool is the
/// protocol error `-32602`.
pub(super) fn call_result(report: CallReport) -> Result<Value, RpcError> {
    let mut result = match report.outcome {
        Ok(output) => {
            let mut result = json!({
                "content": [{"type": "text", "text": output.json.get()}],
                "isError": false,
            });
            // structuredContent is an object by the MCP schema; every tool's
            // output schema is one.
            if output.value.is_object() {
                result["structuredContent"] = output.value;
            }
            result
        }
        Err(e) if e.code == ErrorCode::ToolNotFound => {
            return Err(RpcError::new(StatusCode::OK, INVALID_PARAMS, e.message));
        }
        Err(e) => error_content(&e),
    };
    if let Ok(audit) = serde_json::to_value(&report.audit) {
        result["_meta"] = json!({META_AUDIT: audit});
    }
    Ok(result)
}

/// A tool failure as an `isError` result the model can read.
pub(super) fn error_content(e: &crate::tools::ToolError) -> Value {
    json!({
        "content": [{"type": "text", "text": e.to_model_json().to_string()}],
        "isError": true,
    })
}

pub(super) fn unknown_tool(name: &str) -> RpcError {
    RpcError::new(
        StatusCode::OK,
        INVALID_PARAMS,
        format!(
            "unknown tool {:?}; tools/list names the tools",
            cut_name(name)
        ),
    )
}
