//! Calls from other services (the HTTP tool API and MCP): the service
//! context headers, the internal API key, per-tenant and per-key rate
//! limits, and the one way a service runs a tool.
//!
//! A call that names a session runs inside that session's actor, queued
//! with its turns, so its effect is journalled and every connection sees it;
//! a session of another tenant is answered exactly like an unknown one. A
//! tool that needs no session runs here, on an empty state. Every call,
//! refused or not, writes one audit row.

use std::sync::Arc;
use std::time::Instant;

use actix_web::HttpRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::limits;
use super::locate::{SESSION_WAIT, send_to_session, still_queued};
use super::peers::Routed;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode, Reason, ToolStatus};
use crate::game::GameState;
use crate::game::rng::SplitMix64;
use crate::ids::{SessionId, SiteId, TenantId, TraceId};
use crate::json::Written;
use crate::llm::Usage;
use crate::session::CallTool;
use crate::session::audit::{self, AuditedCall, CallOrigin};
use crate::telemetry::{self, TraceParent};
use crate::tools::{Caller, Invocation, RawArgs, Role, ToolError, args_hash};

/// Longest id accepted in a context header.
const MAX_ID_CHARS: usize = 128;
/// Which context headers a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderRules {
    /// `X-Tenant-ID`, `X-Site-ID` and `X-Trace-ID` must be sent (the tool API).
    Strict,
    /// The key's tenant, site `mcp` and a fresh trace id when absent (MCP
    /// clients are generic and rarely send them).
    Lenient,
}

/// Who calls, for whom, under which trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceContext {
    pub tenant_id: TenantId,
    pub site_id: SiteId,
    pub trace_id: TraceId,
    pub span_id: Option<String>,
    pub user_id: Option<String>,
    pub session_id: Option<SessionId>,
    pub npc_id: Option<String>,
    pub role: Role,
    /// Which key: `internal`, or `tenant:<id>` for a tenant key (the rate
    /// limit per key).
    pub key_id: String,
}

impl ServiceContext {
    /// Reads the context headers and checks the key: `400 CONTEXT_INVALID`
    /// for missing or malformed headers, `401 UNAUTHORIZED` without a valid
    /// key (the internal key, or a tenant key), `403 FORBIDDEN` for a tenant
    /// key and another tenant's `X-Tenant-ID`. The tenant is the key's.
    pub fn from_request(
        req: &HttpRequest,
        state: &AppState,
        rules: HeaderRules,
    ) -> Result<Self, ApiError> {
        let mut problems = Vec::new();
        let mut header = |name: &str| -> Option<String> {
            context_header(req, name).unwrap_or_else(|problem| {
                problems.push(problem);
                None
            })
        };
        let tenant = header("X-Tenant-ID");
        let site = header("X-Site-ID");
        let trace = header("X-Trace-ID");
        let span_id = header("X-Span-ID");
        let user_id = header("X-User-ID");
        let session_id = header("X-Session-ID").map(SessionId::from);
        let npc_id = header("X-NPC-ID");
        let role = header("X-User-Role");
        // The tenant comes from the key (below); the header is only checked
        // for being there when the rules say so.
        let (site_id, trace_id) = match rules {
            HeaderRules::Strict => {
                for (name, value) in [
                    ("X-Tenant-ID", &tenant),
                    ("X-Site-ID", &site),
                    ("X-Trace-ID", &trace),
                ] {
                    if value.is_none() && req.headers().get(name).is_none() {
                        problems.push(format!("missing header {name}"));
                    }
                }
                (site.unwrap_or_default(), trace.unwrap_or_default())
            }
            HeaderRules::Lenient => (
                site.unwrap_or_else(|| "mcp".to_owned()),
                trace.unwrap_or_else(|| TraceId::fresh().to_string()),
            ),
        };
        if !problems.is_empty() {
            return Err(ApiError::new(
                ErrorCode::ContextInvalid,
                problems.join("; "),
            ));
        }
        let grant = state.keys.require(req, "a call of the tool API or MCP")?;
        // A tenant key without `X-Tenant-ID` acts for its own tenant; the
        // internal key without one for `default` (MCP clients rarely send
        // it). With one, the grant already agrees with it or was refused.
        let tenant_id = grant.tenant_id.clone();
        let key_id = limits::key_id(&grant);
        let role = match role {
            None => Role::Service,
            Some(name) => parse_role(&name).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::ContextInvalid,
                    format!(
                        "X-User-Role {name:?} is not a role; roles: player, game_master, \
                         service, admin, gm_admin, owner"
                    ),
                )
            })?,
        };
        Ok(Self {
            tenant_id,
            site_id: SiteId::from(site_id),
            trace_id: TraceId::from(trace_id),
            span_id,
            user_id,
            session_id,
            npc_id,
            role,
            key_id,
        })
    }

    /// The context as the audit ledger records it.
    pub fn origin(&self) -> CallOrigin {
        CallOrigin {
            site_id: Some(self.site_id.clone()),
            span_id: self.span_id.clone(),
            user_id: self.user_id.clone(),
        }
    }
}

/// A context header's id (`X-Trace-ID`, `X-User-ID`, ...): `None` when it
/// is absent, `Err` saying why when it is not 1 to 128 printable ASCII
/// characters.
pub fn context_header(req: &HttpRequest, name: &str) -> Result<Option<String>, String> {
    let Some(raw) = req.headers().get(name) else {
        return Ok(None);
    };
    let text = raw.to_str().ok().map(str::trim).unwrap_or_default();
    let printable = text.chars().all(|c| c.is_ascii_graphic());
    if text.is_empty() || text.chars().count() > MAX_ID_CHARS || !printable {
        return Err(format!(
            "{name} must be 1 to {MAX_ID_CHARS} printable ASCII characters"
        ));
    }
    Ok(Some(text.to_owned()))
}

/// The trace a request names in `X-Trace-ID` (checked by
/// [`context_header`], `400 CONTEXT_INVALID` otherwise), or a fresh one:
/// every route that takes a trace id takes it by this one rule, so none
/// lets spaces or control characters into log lines.
pub fn trace_id(req: &HttpRequest) -> Result<TraceId, ApiError> {
    context_header(req, "X-Trace-ID")
        .map_err(|problem| ApiError::new(ErrorCode::ContextInvalid, problem))
        .map(|named| named.map_or_else(TraceId::fresh, TraceId::from))
}

/// The W3C `traceparent` a request carries, while traces are exported
/// (docs/protocol.md §12): the parent of the spans of the turn it starts.
/// One that does not parse, or two headers, count as none: a caller's
/// trace context is never a reason to refuse it.
pub fn traceparent(req: &HttpRequest) -> Option<TraceParent> {
    if !telemetry::enabled() {
        return None;
    }
    let mut values = req.headers().get_all(TRACEPARENT);
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    TraceParent::parse(value.to_str().ok()?)
}

/// The W3C trace context header.
pub const TRACEPARENT: &str = "traceparent";

fn parse_role(name: &str) -> Option<Role> {
    serde_json::from_value(Value::String(name.to_ascii_lowercase())).ok()
}

/// Per-tenant and per-key rate limits: `429 RATE_LIMITED` with
/// `Retry-After` past them.
pub fn check_rate(state: &AppState, ctx: &ServiceContext) -> Result<(), ApiError> {
    state
        .service
        .check(&state.metrics, &ctx.tenant_id, &ctx.key_id)
}

/// The tools this caller's role may call, in the MCP listing format.
pub fn mcp_listing(state: &AppState, ctx: &ServiceContext) -> Vec<Value> {
    state
        .registry
        .mcp_tools(&Caller::sessionless(ctx.role, &state.service.all_tools))
}

/// The audit summary a service caller gets back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallAudit {
    pub trace_id: TraceId,
    pub tool_name: String,
    pub status: ToolStatus,
    pub latency_ms: f64,
    /// SHA-256 of the input as canonical JSON (keys sorted), hex.
    pub request_payload_hash: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// What a service call gave.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReport {
    pub outcome: Result<Written, ToolError>,
    pub audit: CallAudit,
}

/// A service's call, read once: the tool, its input as the tool gets it,
/// where it runs, and the hash of that input, taken once for the
/// idempotency key, the answer and the audit (docs/protocol.md §1.12.2).
#[derive(Debug)]
pub struct ServiceCall<'a> {
    pub tool: &'a str,
    pub input: Value,
    /// SHA-256 of `input` as canonical JSON, hex ([`args_hash`]).
    pub hash: String,
    /// Where the call runs, or why it is refused before the tool pipeline.
    place: Result<Place, ToolError>,
}

/// Where a call runs.
#[derive(Debug)]
enum Place {
    Session(SessionId),
    Site,
    Sessionless,
}

impl<'a> ServiceCall<'a> {
    /// Reads a call. The session comes from the input's `session_id` or
    /// `X-Session-ID` (they must agree); a tool whose schema has no
    /// `session_id` gets the input without it, and `X-NPC-ID` fills in the
    /// NPC of the tools that read one ([`NPC_READERS`]).
    pub fn read(state: &AppState, ctx: &ServiceContext, tool: &'a str, mut input: Value) -> Self {
        npc_from_header(ctx, tool, &mut input);
        let refused = |input: Value, e: ToolError| Self {
            tool,
            hash: args_hash(&input),
            input,
            place: Err(e),
        };
        let Some(spec) = state.registry.spec(tool) else {
            let shown = crate::tools::cut_name(tool);
            let e = ToolError::new(
                Reason::NotFound,
                ErrorCode::ToolNotFound,
                format!("unknown tool {shown:?}"),
            );
            return refused(input, e);
        };
        // Every service call carries a valid key (see `ServiceContext`),
        // which is what tools marked `requires_auth` ask for.
        let session = match named_sessions(ctx, &input) {
            (Some(a), Some(b)) if a != b => {
                let e = ToolError::new(
                    Reason::SessionMismatch,
                    ErrorCode::SessionMismatch,
                    format!("session_id {a:?} disagrees with X-Session-ID {b:?}"),
                );
                return refused(input, e);
            }
            (a, b) => a.or(b).map(SessionId::from),
        };
        let takes_session = spec.input_schema["properties"].get("session_id").is_some();
        if let (false, Some(args)) = (takes_session, input.as_object_mut()) {
            args.remove("session_id");
        }
        let place = match session {
            Some(session_id) => Ok(Place::Session(session_id)),
            None if spec.on_sites => Ok(Place::Site),
            None if spec.needs_session => Err(ToolError::new(
                Reason::InvalidArgs,
                ErrorCode::ContextInvalid,
                format!("{tool} runs in a session: send X-Session-ID or a session_id argument"),
            )),
            None => Ok(Place::Sessionless),
        };
        Self {
            tool,
            hash: args_hash(&input),
            input,
            place,
        }
    }
}

/// Runs one tool for a service caller ([`ServiceCall::read`], then
/// [`run_call`]).
pub async fn call_tool(
    state: &AppState,
    ctx: &ServiceContext,
    tool: &str,
    input: Value,
) -> Routed<CallReport> {
    run_call(state, ctx, ServiceCall::read(state, ctx, tool, input)).await
}

/// Runs a call that was read. The hash in the answer is of the input the
/// tool got (the same as its audit row's). Never fails outright: every
/// refusal is in `outcome`, and every call is audited once, on the node
/// that runs it: a call whose session runs on another node is not audited
/// here but answered as that node ([`Routed::Owner`]), for the caller to
/// hand the request to.
pub async fn run_call(
    state: &AppState,
    ctx: &ServiceContext,
    call: ServiceCall<'_>,
) -> Routed<CallReport> {
    let started = Instant::now();
    let ServiceCall {
        tool,
        input,
        hash,
        place,
    } = call;
    // Refusals before the tool pipeline, audited here: the input is what
    // the audit row hashes, so the hash taken stands.
    let refuse = |session: Option<&SessionId>, e: ToolError| {
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        record(
            state,
            ctx,
            session,
            tool,
            hash.clone(),
            Some(&e),
            duration_ms,
        );
        Routed::Here(report(ctx, tool, &hash, started, Err(e)))
    };
    match place {
        Err(e) => refuse(None, e),
        Ok(Place::Site) => match run_on_site(state, ctx, tool, &input, &hash, started).await {
            Ok(report) => Routed::Here(report),
            Err(e) => refuse(None, e),
        },
        Ok(Place::Sessionless) => {
            Routed::Here(run_sessionless(state, ctx, tool, input, &hash, started))
        }
        Ok(Place::Session(session_id)) => {
            match run_in_session(state, ctx, &session_id, tool, &input, &hash).await {
                Ok(routed) => routed.map(|outcome| report(ctx, tool, &hash, started, outcome)),
                Err((known, e)) => refuse(known.then_some(&session_id), e),
            }
        }
    }
}

/// The session a call names: in its input's `session_id` and in
/// `X-Session-ID` (a call naming two is refused).
fn named_sessions<'a>(
    ctx: &'a ServiceContext,
    input: &'a Value,
) -> (Option<&'a str>, Option<&'a str>) {
    (
        input.get("session_id").and_then(Value::as_str),
        ctx.session_id.as_ref().map(SessionId::as_str),
    )
}

/// The session a call runs in, if it names one (and only one).
pub fn named_session(ctx: &ServiceContext, input: &Value) -> Option<SessionId> {
    match named_sessions(ctx, input) {
        (Some(a), Some(b)) if a != b => None,
        (a, b) => a.or(b).map(SessionId::from),
    }
}

/// Tools that read one NPC: called without `npc_id`, they read the NPC
/// `X-NPC-ID` names.
const NPC_READERS: [&str; 2] = ["get_npc_profile", "get_prompt_active"];

/// Puts `X-NPC-ID` into the input of an [`NPC_READERS`] call that names no
/// `npc_id`; an `npc_id` in the input wins over the header.
fn npc_from_header(ctx: &ServiceContext, tool: &str, input: &mut Value) {
    if let (Some(npc_id), Some(args)) = (&ctx.npc_id, input.as_object_mut())
        && NPC_READERS.contains(&tool)
        && !args.contains_key("npc_id")
    {
        args.insert("npc_id".to_owned(), Value::String(npc_id.clone()));
    }
}

/// A tool that needs no session, run on an empty state.
fn run_sessionless(
    state: &AppState,
    ctx: &ServiceContext,
    tool: &str,
    input: Value,
    hash: &str,
    started: Instant,
) -> CallReport {
    let caller =
        Caller::sessionless(ctx.role, &state.service.all_tools).for_user(ctx.user_id.as_deref());
    let mut rng = SplitMix64::new(rand::random());
    let inv = state.registry.invoke(
        tool,
        RawArgs::Value(input),
        &caller,
        &GameState::empty(),
        &mut rng,
    );
    audit_invocation(state, ctx, tool, &inv, hash);
    report(ctx, tool, hash, started, written(inv))
}

/// A tool that runs on the content of the caller's site (`X-Site-ID`):
/// its effect, if any, is stored with the site before the answer. `Err`
/// says why it did not run (no such site, storage).
async fn run_on_site(
    state: &AppState,
    ctx: &ServiceContext,
    tool: &str,
    input: &Value,
    hash: &str,
    started: Instant,
) -> Result<CallReport, ToolError> {
    let caller = Caller::sessionless(ctx.role, &state.service.all_tools)
        .for_user(ctx.user_id.as_deref())
        .at_site(&ctx.site_id);
    let mut rng = SplitMix64::new(rand::random());
    let ran = state
        .sites
        .run(&ctx.tenant_id, &ctx.site_id, |site| {
            let inv =
                state
                    .registry
                    .invoke(tool, RawArgs::Value(input.clone()), &caller, site, &mut rng);
            let effect = inv.outcome.as_ref().ok().and_then(|o| o.effect.clone());
            (inv, effect)
        })
        .await;
    let inv = ran.map_err(|e| {
        let http = super::sites::site_failed(e, &ctx.site_id);
        let reason = match http.code {
            ErrorCode::NotFound => Reason::NotFound,
            _ => Reason::ExecutionFailed,
        };
        ToolError::new(reason, http.code, http.message)
    })?;
    audit_invocation(state, ctx, tool, &inv, hash);
    Ok(report(ctx, tool, hash, started, written(inv)))
}

/// Audits a call the pipeline ran here; `hash` is of the input it was
/// handed ([`audit::read_args_hash`]).
fn audit_invocation(
    state: &AppState,
    ctx: &ServiceContext,
    tool: &str,
    inv: &Invocation,
    hash: &str,
) {
    let args_hash = audit::read_args_hash(&inv.args, Some(hash));
    let failure = inv.outcome.as_ref().err();
    record(state, ctx, None, tool, args_hash, failure, inv.duration_ms);
}

/// A pipeline's outcome with the result's text it wrote as it checked its
/// size, so the answer does not write it again.
fn written(inv: Invocation) -> Result<Written, ToolError> {
    let text = inv.result_text;
    inv.outcome.map(|o| match text {
        Some(text) => Written::with_text(o.result, Arc::from(text)),
        None => Written::new(o.result),
    })
}

/// Runs the call in the session's actor (which audits it, with `hash`, the
/// input's). `Err` carries whether the session exists for this tenant, and
/// why the call did not run.
async fn run_in_session(
    state: &AppState,
    ctx: &ServiceContext,
    session_id: &SessionId,
    tool: &str,
    input: &Value,
    hash: &str,
) -> Result<Routed<Result<Written, ToolError>>, (bool, ToolError)> {
    // Another tenant's session is answered exactly like an unknown one.
    let same_tenant = |handle: &crate::session::SessionHandle| {
        if handle.meta.tenant_id == ctx.tenant_id {
            Ok(())
        } else {
            Err(ApiError::not_found(super::errors::no_session(
                session_id.as_str(),
            )))
        }
    };
    let make = |()| CallTool {
        tool: tool.to_owned(),
        args: input.clone(),
        args_hash: Some(hash.to_owned()),
        role: ctx.role,
        trace_id: ctx.trace_id.clone(),
        origin: ctx.origin(),
    };
    let call = send_to_session(state, session_id, same_tenant, make);
    match actix_web::rt::time::timeout(SESSION_WAIT, call).await {
        Ok(Ok(routed)) => Ok(routed.map(|(_, done)| done.outcome)),
        Ok(Err(e)) => {
            let known = e.code != ErrorCode::NotFound;
            let reason = if known {
                Reason::ExecutionFailed
            } else {
                Reason::NotFound
            };
            Err((known, ToolError::new(reason, e.code, e.message)))
        }
        Err(_) => {
            let e = ToolError::new(
                Reason::Timeout,
                ErrorCode::Timeout,
                still_queued(&ctx.trace_id),
            );
            Err((true, e))
        }
    }
}

/// Audits a call that did not run in a session's actor.
fn record(
    state: &AppState,
    ctx: &ServiceContext,
    session_id: Option<&SessionId>,
    tool: &str,
    args_hash: String,
    failure: Option<&ToolError>,
    duration_ms: f64,
) {
    audit::record(
        &state.store,
        AuditedCall {
            session_id,
            tenant_id: &ctx.tenant_id,
            trace_id: &ctx.trace_id,
            turn_id: None,
            call_id: None,
            tool,
            role: ctx.role,
            args_hash,
            failure,
            duration_ms,
            usage: Usage::default(),
            origin: &ctx.origin(),
        },
    );
}

fn report(
    ctx: &ServiceContext,
    tool: &str,
    hash: &str,
    started: Instant,
    outcome: Result<Written, ToolError>,
) -> CallReport {
    let latency_ms = (started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0;
    let (status, error_type, error_message) = match &outcome {
        Ok(_) => (ToolStatus::Ok, None, None),
        Err(e) => (e.status(), Some(e.code), Some(e.message.clone())),
    };
    CallReport {
        outcome,
        audit: CallAudit {
            trace_id: ctx.trace_id.clone(),
            tool_name: tool.to_owned(),
            status,
            latency_ms,
            request_payload_hash: hash.to_owned(),
            error_type,
            error_message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn context(npc_id: Option<&str>) -> ServiceContext {
        ServiceContext {
            tenant_id: "yantian".into(),
            site_id: "yantian-main".into(),
            trace_id: TraceId::from("trace-1"),
            span_id: None,
            user_id: None,
            session_id: None,
            npc_id: npc_id.map(str::to_owned),
            role: Role::Service,
            key_id: "internal".into(),
        }
    }

    #[test]
    fn the_npc_header_fills_a_missing_npc_id_of_the_npc_readers() {
        let ctx = context(Some("ancestor_yan"));
        // (tool, input, what the tool gets)
        let cases = [
            (
                "get_npc_profile",
                json!({}),
                json!({"npc_id": "ancestor_yan"}),
            ),
            (
                "get_prompt_active",
                json!({"prompt_type": "system"}),
                json!({"prompt_type": "system", "npc_id": "ancestor_yan"}),
            ),
            // The input wins over the header.
            (
                "get_npc_profile",
                json!({"npc_id": "elder_li"}),
                json!({"npc_id": "elder_li"}),
            ),
            // Other tools never get it.
            (
                "search_content",
                json!({"query": "q"}),
                json!({"query": "q"}),
            ),
            ("create_npc", json!({}), json!({})),
            // Input that is no object is left for the pipeline to refuse.
            ("get_npc_profile", json!([1]), json!([1])),
        ];
        for (tool, mut input, want) in cases {
            npc_from_header(&ctx, tool, &mut input);
            assert_eq!(input, want, "{tool}");
        }
        let mut input = json!({});
        npc_from_header(&context(None), "get_npc_profile", &mut input);
        assert_eq!(input, json!({}), "no header, nothing added");
    }
}
