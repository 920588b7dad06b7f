//! The HTTP tool server for other services: `POST /api/v1/tools/list`,
//! `POST /api/v1/tools/call` (also under `/api/tools/...` and
//! `/tools/...`), and the trace ledger `GET /api/v1/audit`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::decode;
use super::idempotency;
use super::peers::Routing;
use super::service::{self, CallAudit, HeaderRules, ServiceContext};
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::ids::{RequestId, TraceId};
use crate::protocol::http::{
    ToolCallAudit, ToolCallFailed, ToolCallSucceeded, ToolCatalogue, TraceLedger,
};
use crate::tools::{Role, cut_name};

/// Most audit rows one trace lookup returns.
pub const MAX_TRACE_ROWS: u32 = 1000;

/// Where the tool API is served: its own paths and the ones the tool
/// servers it replaces used (docs/protocol.md §1.12), all the same endpoints.
pub const TOOL_API_PREFIXES: [&str; 3] = ["/api/v1", "/api", ""];

pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::http::Method;
    for prefix in TOOL_API_PREFIXES {
        super::routes::add(cfg, Method::POST, &format!("{prefix}/tools/list"), list);
        super::routes::add(cfg, Method::POST, &format!("{prefix}/tools/call"), call);
    }
    super::routes::add(cfg, Method::GET, "/api/v1/audit", trace);
}

/// The context, checked, and the caller within its rate limits.
fn context(req: &HttpRequest, state: &AppState) -> Result<ServiceContext, ApiError> {
    let ctx = ServiceContext::from_request(req, state, HeaderRules::Strict)?;
    service::check_rate(state, &ctx)?;
    Ok(ctx)
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
struct ListRequest {
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    ai_callable_only: Option<bool>,
}

#[utoipa::path(post, path = "/api/v1/tools/list", tag = "tools",
    security(("internal_key" = [])),
    request_body(content = ListRequest, description = "Optional filters"),
    responses(
        (status = 200, description = "The tools, each with its input schema", body = crate::protocol::http::ToolCatalogue<'static>),
        (status = 400, description = "Bad body", body = crate::protocol::http::ErrorBody), (status = 401, description = "No key", body = crate::protocol::http::ErrorBody)))]
async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let ctx = context(&req, &state)?;
    let body: ListRequest = decode(body, true).await?;
    let catalogue: ToolCatalogue<'_> = state
        .registry
        .names()
        .iter()
        .filter_map(|n| state.registry.spec(n))
        .filter(|s| s.enabled && s.roles.contains(&ctx.role))
        .filter(|s| body.category.as_deref().is_none_or(|c| c == s.category))
        .filter(|s| !body.ai_callable_only.unwrap_or(false) || s.ai_callable)
        .collect();
    Ok(HttpResponse::Ok().json(catalogue))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct CallRequest {
    tool_name: String,
    /// The tool's input: its schema is `tool.<tool_name>` in
    /// `components.schemas`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    input: Option<Value>,
    /// The call's idempotency key (or the `Idempotency-Key` header).
    #[serde(default)]
    request_id: Option<RequestId>,
    #[serde(default)]
    context: Option<BodyContext>,
}

/// The context a body may repeat: its tenant and site must agree with the
/// headers; its `trace_id` is not read (the header's is the call's).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct BodyContext {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    site_id: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/tools/call", tag = "tools",
    security(("internal_key" = [])),
    request_body(content = CallRequest, description = "One call of one tool"),
    responses(
        (status = 200, description = "The tool ran", body = ToolCallSucceeded<'static>),
        (status = "4XX", description = "The tool refused the call (the status of its error code)", body = ToolCallFailed<'static>),
        (status = "5XX", description = "The tool failed", body = ToolCallFailed<'static>),
        (status = 401, description = "No key (the request itself is refused: `ErrorBody`, as for a bad body)", body = crate::protocol::http::ErrorBody)))]
async fn call(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let ctx = context(&req, &state)?;
    let body: CallRequest = decode(body, true).await?;
    // The tenant and site say whose data the call touches, so a body that
    // names others is refused. The trace only labels the call: the header's
    // is the call's (seed 003's own example sends `trace-$(date +%s)` in
    // the header and `trace-001` in the body).
    if let Some(given) = &body.context {
        for (field, said, header) in [
            ("tenant_id", &given.tenant_id, ctx.tenant_id.as_str()),
            ("site_id", &given.site_id, ctx.site_id.as_str()),
        ] {
            if let Some(said) = said
                && said != header
            {
                return Err(ApiError::new(
                    ErrorCode::ContextInvalid,
                    format!("context.{field} {said:?} disagrees with its header ({header:?})"),
                ));
            }
        }
    }
    let key = idempotency::call_key(&req, body.request_id.as_deref())?;
    let input = body.input.unwrap_or_else(|| json!({}));
    // A name past the longest any tool has is cut before it is echoed,
    // audited, logged or kept with an idempotency key: it is unknown anyway.
    let tool = cut_name(&body.tool_name);
    let (routed, replayed) =
        idempotency::call_once(&state, &ctx, tool, input, key.as_deref()).await?;
    let report = Routing::of(&req).here(routed)?;
    let audit = audit_view(&report.audit);
    let (mut response, failed) = match &report.outcome {
        Ok(_) => (HttpResponse::Ok(), None),
        Err(e) => (
            HttpResponse::build(super::errors::status_of(e.code)),
            Some(e),
        ),
    };
    // A session's call rate refills a call at least every second at its
    // default (`QUESTD_CALLS_PER_MINUTE`); the message says the exact wait.
    let waiting_helps = |e: &crate::tools::ToolError| {
        matches!(
            e.code,
            ErrorCode::QueueFull | ErrorCode::Overloaded | ErrorCode::RateLimited
        )
    };
    if failed.is_some_and(waiting_helps) {
        response.insert_header(("Retry-After", "1"));
    }
    if replayed {
        response.insert_header((idempotency::REPLAYED_HEADER, "true"));
    }
    Ok(match report.outcome {
        Ok(ref output) => response.json(ToolCallSucceeded::new(&output.json, audit)),
        Err(ref e) => response.json(ToolCallFailed::new(e, audit)),
    })
}

/// The wire view of a call's audit summary. Built here rather than in
/// `protocol`, which does not import `http` (this module imports it).
fn audit_view(audit: &CallAudit) -> ToolCallAudit<'_> {
    ToolCallAudit {
        trace_id: &audit.trace_id,
        tool_name: &audit.tool_name,
        status: audit.status.into(),
        latency_ms: audit.latency_ms,
        request_payload_hash: &audit.request_payload_hash,
        error_type: audit.error_type,
        error_message: audit.error_message.as_deref(),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct TraceQuery {
    /// The trace (else `X-Trace-ID`).
    #[param(value_type = Option<String>)]
    trace_id: Option<TraceId>,
}

/// Every audit row of a trace of the caller's tenant (the trace in the
/// query, or `X-Trace-ID`).
#[utoipa::path(get, path = "/api/v1/audit", tag = "tools",
    security(("internal_key" = [])),
    params(TraceQuery),
    responses(
        (status = 200, description = "Every audit row of the trace", body = crate::protocol::http::TraceLedger<'static>),
        (status = 400, description = "No or bad trace id", body = crate::protocol::http::ErrorBody), (status = 401, description = "No key", body = crate::protocol::http::ErrorBody)))]
async fn trace(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: Result<web::Query<TraceQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(super::body::bad_query(
        "trace_id is 1 to 128 printable characters (e.g. ?trace_id=trace-1)",
    ))?;
    let ctx = context(&req, &state)?;
    if !matches!(ctx.role, Role::Service | Role::Admin | Role::Owner) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the trace ledger is for services, admins and owners",
        ));
    }
    let trace_id = query.into_inner().trace_id.unwrap_or(ctx.trace_id);
    let entries = state
        .store
        .audit_by_trace(&ctx.tenant_id, &trace_id, MAX_TRACE_ROWS)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    Ok(HttpResponse::Ok().json(TraceLedger::new(&trace_id, &entries)))
}
