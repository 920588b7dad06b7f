//! The HTTP answer bodies (docs/protocol.md §1): one `Serialize` type per
//! route, so the handlers in `crate::http` only choose a body and a status.
//!
//! Each body is a view: a struct of its own, built from the storage row, hub
//! entry, tool spec or story frame it shows, never that type serialized as
//! it is. Renaming a column or a field behind a view changes its `From`
//! impl, not the API. Views borrow what they show where they can, so
//! building one copies little more than the links it adds.
//!
//! Views over `session` and `http` types (the live list, the tool call's
//! audit summary) are built by their handlers: those modules import this
//! one, and arrows point one way.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{
    CallId, SessionId, StatePatch, ToolEvent, TraceId, TurnEnd, TurnId, TurnLimit, TurnOutcome,
};
use crate::error::{ErrorCode, Reason, ToolStatus};
use crate::game::Campaign;
use crate::llm::Usage;
use crate::sites::SiteView;
use crate::storage::{ActionPage, AuditPage, AuditRow, SessionMeta, Visibility};
use crate::tools::{ToolError, ToolSpec};

// ----- errors --------------------------------------------------------------

/// Every error's body: `{"error_code","message"}` (some codes add fields,
/// e.g. `problems` of `INVALID_CAMPAIGN`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    pub error_code: ErrorCode,
    pub message: &'a str,
}

// ----- health, campaigns, sessions (§1.2 to §1.5) --------------------------

/// `GET /healthz`: the process is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Health<'a> {
    status: &'static str,
    /// Which node answered (docs/protocol.md §15).
    node_id: &'a str,
}

impl<'a> Health<'a> {
    /// The node is up.
    pub fn ok(node_id: &'a str) -> Self {
        Self {
            status: "ok",
            node_id,
        }
    }
}

/// One built-in campaign in `GET /api/v1/campaigns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct CampaignSummary<'a> {
    pub campaign_id: &'a str,
    pub title: &'a str,
    pub description: &'a str,
    /// The Chinese title, when the campaign has one (its `name_zh` draft
    /// `zh_<campaign_id>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title_zh: Option<&'a str>,
    /// The Chinese description, with the Chinese title (absent when empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description_zh: Option<&'a str>,
}

impl<'a> From<&'a Campaign> for CampaignSummary<'a> {
    fn from(c: &'a Campaign) -> Self {
        let zh = c.title_zh();
        Self {
            campaign_id: &c.campaign_id,
            title: &c.title,
            description: &c.description,
            title_zh: zh.map(|e| e.title.as_str()),
            description_zh: zh.map(|e| e.body.as_str()).filter(|b| !b.is_empty()),
        }
    }
}

/// `POST /api/v1/sessions` (`201`): the new session's tokens and links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SessionCreated<'a> {
    pub session_id: &'a str,
    pub player_token: &'a str,
    pub spectator_token: &'a str,
    /// `"private"` or `"public"`.
    pub visibility: &'static str,
    #[serde(flatten)]
    pub links: SessionLinks,
}

/// `PUT` and `GET /api/v1/sites/{site_id}`: a site and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SiteSummary<'a> {
    pub site_id: &'a str,
    pub tenant_id: &'a str,
    pub campaign_id: &'a str,
    /// The campaign's title, as `get_site_map` answers it.
    pub site_name: &'a str,
    /// Grows by one with every write to the site.
    pub version: i64,
    pub npcs: usize,
    pub content: usize,
    pub areas: usize,
}

impl<'a> SiteSummary<'a> {
    pub fn new(tenant_id: &'a str, site_id: &'a str, site: &'a SiteView) -> Self {
        Self {
            site_id,
            tenant_id,
            campaign_id: &site.campaign_id,
            site_name: &site.title,
            version: site.version,
            npcs: site.state.npcs.len(),
            content: site.state.content.len(),
            areas: site.state.areas.len(),
        }
    }
}

/// The absolute links of a new session, built from the host the request
/// named (named fields, so a player link never swaps with a spectator's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLinks {
    /// The WebSocket, with the player token.
    pub ws_url: String,
    /// The browser page, as the player.
    pub play_url: String,
    /// The browser page, as a spectator.
    pub watch_url: String,
}

/// The page links go out under two names each: `player_url` and
/// `spectator_url`, the names people look for beside `ws_url`, and
/// `play_url` and `watch_url`, which earlier clients read.
impl Serialize for SessionLinks {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut links = serializer.serialize_struct("SessionLinks", LINK_FIELDS.len())?;
        for (name, link) in LINK_FIELDS {
            links.serialize_field(name, link.of(self))?;
        }
        links.end()
    }
}

/// Which of [`SessionLinks`] a wire field carries.
#[derive(Clone, Copy)]
enum Link {
    Ws,
    Play,
    Watch,
}

impl Link {
    fn of(self, links: &SessionLinks) -> &String {
        match self {
            Link::Ws => &links.ws_url,
            Link::Play => &links.play_url,
            Link::Watch => &links.watch_url,
        }
    }

    fn about(self) -> &'static str {
        match self {
            Link::Ws => "The WebSocket, with the player token.",
            Link::Play => "The browser page, as the player.",
            Link::Watch => "The browser page, as a spectator.",
        }
    }
}

/// The wire fields of [`SessionLinks`]: the one list its serialization and
/// its schema both read.
const LINK_FIELDS: [(&str, Link); 5] = [
    ("ws_url", Link::Ws),
    ("player_url", Link::Play),
    ("spectator_url", Link::Watch),
    ("play_url", Link::Play),
    ("watch_url", Link::Watch),
];

impl utoipa::PartialSchema for SessionLinks {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        LINK_FIELDS
            .iter()
            .fold(ObjectBuilder::new(), |object, (name, link)| {
                object
                    .property(
                        *name,
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .description(Some(link.about())),
                    )
                    .required(*name)
            })
            .into()
    }
}

impl utoipa::ToSchema for SessionLinks {}

impl<'a> SessionCreated<'a> {
    pub fn new(
        meta: &'a SessionMeta,
        player_token: &'a str,
        spectator_token: &'a str,
        links: SessionLinks,
    ) -> Self {
        Self {
            session_id: &meta.session_id,
            player_token,
            spectator_token,
            visibility: visibility(meta.visibility),
            links,
        }
    }
}

/// The wire spelling of a session's visibility, written out here rather
/// than borrowed from storage's spelling of it.
fn visibility(v: Visibility) -> &'static str {
    match v {
        Visibility::Private => "private",
        Visibility::Public => "public",
    }
}

/// One live public session in `GET /api/v1/sessions`. Built by the handler
/// from the hub's `LiveInfo` (the hub imports this module).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct LiveSession<'a> {
    #[schema(value_type = String)]
    pub session_id: &'a SessionId,
    pub title: &'a str,
    /// Connected player WebSockets.
    pub players: usize,
    /// Connected spectator WebSockets.
    pub spectators: usize,
    /// Turns started.
    pub turns: u64,
    pub spectator_token: &'a str,
    pub watch_url: String,
}

// ----- the operator console (§1.17) ----------------------------------------

/// `GET /api/v1/admin/sessions`: the live sessions of every tenant on this
/// node, most recently active first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AdminSessions<'a> {
    pub node_id: &'a str,
    /// Live sessions on this node in all (the list holds at most `limit`).
    pub total: usize,
    pub limit: usize,
    pub sessions: Vec<AdminSession<'a>>,
}

/// One live session in the operator's list. Built by the handler from the
/// hub's `LiveInfo` (the hub imports this module).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AdminSession<'a> {
    pub tenant_id: &'a str,
    #[schema(value_type = String)]
    pub session_id: &'a SessionId,
    pub title: &'a str,
    pub campaign_id: &'a str,
    #[schema(value_type = String)]
    pub visibility: Visibility,
    /// Connected player WebSockets.
    pub players: usize,
    /// Connected spectator WebSockets (with other nodes' tails).
    pub spectators: usize,
    /// Turns started.
    pub turns: u64,
    /// Chats taken and waiting for their turn to start.
    pub queued: usize,
    /// The node running it: the one answering.
    pub owner_node: &'a str,
    /// When it last did something (RFC 3339, and ms since the epoch).
    pub last_activity: String,
    pub last_activity_ms: i64,
    /// An operator closed it; it stops once its work taken is done.
    pub closing: bool,
}

/// `GET /api/v1/admin/node`: this node's figures, read from the counters
/// `/metrics` renders.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeFigures<'a> {
    pub node_id: &'a str,
    /// Seconds since the server started (ms precision): two reads of
    /// `turns.started` over two of these give turns per second.
    pub uptime_s: f64,
    pub sessions_live: i64,
    pub connections: Connections,
    pub turns: TurnCounts,
    pub frames_sent: u64,
    pub outbound_drops: u64,
    pub rate_limited: u64,
    pub journal_commit: CommitLatency,
}

/// Open WebSocket connections by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Connections {
    pub player: i64,
    pub spectator: i64,
}

/// Turns started, completed, and failed by error code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TurnCounts {
    pub started: u64,
    pub completed: u64,
    pub failed: std::collections::BTreeMap<String, u64>,
}

/// Journal group commits: how many, their total time, and the median and
/// 99th percentile estimated from the histogram's buckets (`null` before
/// the first commit).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CommitLatency {
    pub count: u64,
    pub sum_s: f64,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
}

impl<'a> NodeFigures<'a> {
    /// The figures of `metrics` on node `node_id`, up for `uptime`.
    pub fn of(
        node_id: &'a str,
        metrics: &crate::metrics::Metrics,
        uptime: std::time::Duration,
    ) -> Self {
        let commits = &metrics.commit_seconds;
        Self {
            node_id,
            uptime_s: uptime.as_millis() as f64 / 1000.0,
            sessions_live: metrics.sessions_live.get(),
            connections: Connections {
                player: metrics.player_connections.get(),
                spectator: metrics.spectator_connections.get(),
            },
            turns: TurnCounts {
                started: metrics.turns_started.get(),
                completed: metrics.turns_completed.get(),
                failed: metrics.turns_failed(),
            },
            frames_sent: metrics.frames_sent.get(),
            outbound_drops: metrics.outbound_drops.get(),
            rate_limited: metrics.rate_limited.get(),
            journal_commit: CommitLatency {
                count: commits.count(),
                sum_s: commits.sum(),
                p50_s: commits.quantile(0.5),
                p99_s: commits.quantile(0.99),
            },
        }
    }
}

/// `GET /api/v1/admin/sessions/{id}/story`: a page of a session's journal,
/// each frame as it was sent, with what the operator's view shows of the
/// session.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StoryPage<'a> {
    pub session_id: &'a str,
    pub tenant_id: &'a str,
    pub title: &'a str,
    pub campaign_id: &'a str,
    /// The node running it now, `null` when none has it loaded.
    pub owner_node: Option<&'a str>,
    /// When an operator closed it (RFC 3339), `null` while it is open.
    pub closed_at: Option<String>,
    pub frames: Vec<Value>,
    /// The `seq` to pass as `after_seq` when more follow; `null` otherwise.
    pub next_after_seq: Option<u64>,
}

/// One pending timer of a session, as the operator console lists it (the
/// snapshot's `timers`: never a note or a key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdminTimer {
    pub timer_id: String,
    pub event: String,
    /// RFC 3339, UTC.
    pub due_at: String,
    pub repeat_s: Option<u64>,
}

/// `GET /api/v1/admin/sessions/{id}/timers`: a session's pending timers,
/// soonest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdminTimers {
    #[serde(default)]
    pub session_id: String,
    #[serde(default)]
    pub timers: Vec<AdminTimer>,
}

/// `POST /api/v1/admin/sessions/{id}/close`: the session is closed for
/// good (the same answer every time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SessionClosed<'a> {
    pub session_id: &'a str,
    pub closed: bool,
    /// When it was first closed (RFC 3339).
    pub closed_at: String,
}

// ----- the actions log and the audit ledgers (§6, §1.8, §1.13) ----------

/// `GET /api/v1/sessions/{id}/actions`: a page of the applied-actions log.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ActionsPage<'a> {
    /// Each action as it was journalled (seq, ids, args, result, timestamp).
    #[schema(value_type = Vec<Object>)]
    pub actions: &'a [Value],
    /// The `seq` to pass as `after_seq` when more follow; `null` otherwise.
    pub next_after_seq: Option<u64>,
}

impl<'a> From<&'a ActionPage> for ActionsPage<'a> {
    fn from(page: &'a ActionPage) -> Self {
        Self {
            actions: &page.actions,
            next_after_seq: page.next_after_seq,
        }
    }
}

/// One row of an audit ledger, in `GET /api/v1/sessions/{id}/audit` and
/// `GET /api/v1/audit`. Every field is always present (`null` when empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AuditEntry<'a> {
    pub audit_id: i64,
    pub session_id: Option<&'a str>,
    pub tenant_id: &'a str,
    pub trace_id: &'a str,
    pub turn_id: Option<&'a str>,
    pub call_id: Option<&'a str>,
    pub tool: &'a str,
    pub role: &'a str,
    pub args_hash: &'a str,
    pub status: &'a str,
    pub reason: Option<&'a str>,
    pub error_code: Option<&'a str>,
    pub error_message: Option<&'a str>,
    pub duration_us: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub site_id: Option<&'a str>,
    pub span_id: Option<&'a str>,
    pub user_id: Option<&'a str>,
}

impl<'a> From<&'a AuditRow> for AuditEntry<'a> {
    fn from(row: &'a AuditRow) -> Self {
        Self {
            audit_id: row.audit_id,
            session_id: row.session_id.as_deref(),
            tenant_id: &row.tenant_id,
            trace_id: &row.trace_id,
            turn_id: row.turn_id.as_deref(),
            call_id: row.call_id.as_deref(),
            tool: &row.tool,
            role: &row.role,
            args_hash: &row.args_hash,
            status: &row.status,
            reason: row.reason.as_deref(),
            error_code: row.error_code.as_deref(),
            error_message: row.error_message.as_deref(),
            duration_us: row.duration_us,
            prompt_tokens: row.prompt_tokens,
            completion_tokens: row.completion_tokens,
            created_at: row.created_at,
            site_id: row.site_id.as_deref(),
            span_id: row.span_id.as_deref(),
            user_id: row.user_id.as_deref(),
        }
    }
}

fn entries(rows: &[AuditRow]) -> Vec<AuditEntry<'_>> {
    rows.iter().map(AuditEntry::from).collect()
}

/// `GET /api/v1/sessions/{id}/audit`: a page of a session's audit ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AuditLedgerPage<'a> {
    pub entries: Vec<AuditEntry<'a>>,
    /// The `audit_id` to pass as `after_id` when more follow; `null`
    /// otherwise.
    pub next_after_id: Option<i64>,
}

impl<'a> From<&'a AuditPage> for AuditLedgerPage<'a> {
    fn from(page: &'a AuditPage) -> Self {
        Self {
            entries: entries(&page.entries),
            next_after_id: page.next_after_id,
        }
    }
}

/// `GET /api/v1/audit`: every audit row of one trace of the caller's tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TraceLedger<'a> {
    #[schema(value_type = String)]
    pub trace_id: &'a TraceId,
    pub entries: Vec<AuditEntry<'a>>,
}

impl<'a> TraceLedger<'a> {
    pub fn new(trace_id: &'a TraceId, rows: &'a [AuditRow]) -> Self {
        Self {
            trace_id,
            entries: entries(rows),
        }
    }
}

// ----- direct calls and whole turns (§1.9, §1.11) -------------------------

/// What the `activate_npc` tool's result says, as read back for its route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NpcActivation {
    pub npc_id: String,
    pub active: bool,
    /// `false` when the NPC already had that state.
    pub changed: bool,
}

/// `POST /api/v1/sessions/{id}/npcs/{npc_id}/activate`: the tool's result
/// and where its call sits in the story.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct NpcActivated {
    #[serde(flatten)]
    pub npc: NpcActivation,
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    #[schema(value_type = String)]
    pub call_id: CallId,
    /// The seq of the call's `tool_result` frame.
    pub seq: u64,
}

/// `POST /api/v1/chat` (`200`): the turn's `turn_completed` frame, without
/// its `type`, plus `duplicate`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ChatTurn<'a> {
    pub turn_id: &'a TurnId,
    pub seq: u64,
    pub reply: &'a str,
    pub dialog_type: &'a str,
    pub iterations: u32,
    pub tool_events: &'a [ToolEvent],
    pub state_patch: &'a StatePatch,
    pub usage: Usage,
    /// Present only when the frame had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<TurnLimit>,
    /// The model that answered last, when the frame has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'a str>,
    /// The `request_id` was used before; this is that turn's result.
    pub duplicate: bool,
}

/// `POST /api/v1/chat` when the turn failed (the status of `error_code`):
/// the `turn_failed` frame's fields in the answer's order, plus
/// `duplicate`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ChatTurnFailed<'a> {
    pub error_code: ErrorCode,
    pub message: &'a str,
    pub turn_id: &'a TurnId,
    pub seq: u64,
    /// Present only when the frame had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<TurnLimit>,
    pub duplicate: bool,
}

/// `202` from `POST /api/v1/chat` when the turn paused for a person's
/// decision (docs/protocol.md §19): decide with `POST
/// /api/v1/sessions/{id}/approvals/{approval_id}`, then read the rest of
/// the turn from the actions log or the story.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ChatApprovalRequired<'a> {
    #[schema(value_type = String)]
    pub turn_id: &'a TurnId,
    /// `"approval_required"`.
    pub status: &'static str,
    /// The seq of the `approval_requested` frame.
    pub seq: u64,
    pub approval: &'a crate::protocol::ApprovalPending,
    pub duplicate: bool,
}

/// `POST /api/v1/sessions/{id}/approvals/{approval_id}`: the decision,
/// durable; the call's `tool_result` follows in the story.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DecisionBody {
    pub approval_id: String,
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    pub decision: crate::game::approvals::Decision,
    /// The seat that decided; `null` for a key.
    #[schema(value_type = Option<String>)]
    pub by_seat_id: Option<crate::ids::SeatId>,
}

/// The answer of `POST /api/v1/chat`, by how the turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatAnswer<'a> {
    Completed(ChatTurn<'a>),
    Failed(ChatTurnFailed<'a>),
    ApprovalRequired(ChatApprovalRequired<'a>),
}

impl<'a> ChatAnswer<'a> {
    /// The answer for a turn's end; `duplicate` says whether the
    /// `request_id` had been used before.
    pub fn new(end: &'a TurnEnd, duplicate: bool) -> Self {
        match &end.outcome {
            TurnOutcome::TurnCompleted(turn) => Self::Completed(ChatTurn {
                turn_id: &turn.turn_id,
                seq: end.seq,
                reply: &turn.reply,
                dialog_type: &turn.dialog_type,
                iterations: turn.iterations,
                tool_events: &turn.tool_events,
                state_patch: &turn.state_patch,
                usage: turn.usage,
                limit: turn.limit,
                model: turn.model.as_deref(),
                duplicate,
            }),
            TurnOutcome::TurnFailed(turn) => Self::Failed(ChatTurnFailed {
                error_code: turn.error_code,
                message: &turn.message,
                turn_id: &turn.turn_id,
                seq: end.seq,
                limit: turn.limit,
                duplicate,
            }),
            TurnOutcome::ApprovalRequested(approval) => {
                Self::ApprovalRequired(ChatApprovalRequired {
                    turn_id: &approval.turn_id,
                    status: "approval_required",
                    seq: end.seq,
                    approval,
                    duplicate,
                })
            }
        }
    }
}

// ----- the HTTP tool server (§1.12) ---------------------------------------

/// `POST /api/v1/tools/list`: the tools the caller may call.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolCatalogue<'a> {
    /// How many tools are listed.
    pub total: usize,
    pub tools: Vec<ToolListing<'a>>,
}

impl<'a> FromIterator<&'a ToolSpec> for ToolCatalogue<'a> {
    fn from_iter<I: IntoIterator<Item = &'a ToolSpec>>(specs: I) -> Self {
        let tools: Vec<ToolListing<'a>> = specs.into_iter().map(ToolListing::from).collect();
        Self {
            total: tools.len(),
            tools,
        }
    }
}

/// One tool in `POST /api/v1/tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolListing<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub description: &'a str,
    pub category: &'a str,
    #[schema(value_type = Object)]
    pub input_schema: &'a Value,
    #[schema(value_type = Object)]
    pub output_schema: &'a Value,
    pub requires_auth: bool,
    pub ai_callable: bool,
}

impl<'a> From<&'a ToolSpec> for ToolListing<'a> {
    fn from(s: &'a ToolSpec) -> Self {
        Self {
            name: s.name,
            version: s.version,
            description: s.description,
            category: s.category,
            input_schema: &s.input_schema,
            output_schema: &s.output_schema,
            requires_auth: s.requires_auth,
            ai_callable: s.ai_callable,
        }
    }
}

/// A call's outcome as `POST /api/v1/tools/call` names it in
/// `audit.status`: `success` where the tool status (and the audit ledger)
/// says `ok`, as content services expect; refusals and failures keep their
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Success,
    Rejected,
    Error,
}

impl From<ToolStatus> for CallStatus {
    fn from(status: ToolStatus) -> Self {
        match status {
            ToolStatus::Ok => Self::Success,
            ToolStatus::Rejected => Self::Rejected,
            ToolStatus::Error => Self::Error,
        }
    }
}

/// The audit summary in every `POST /api/v1/tools/call` answer. Built by
/// the handler from the service's `CallAudit` (`http` imports this module).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolCallAudit<'a> {
    #[schema(value_type = String)]
    pub trace_id: &'a TraceId,
    pub tool_name: &'a str,
    pub status: CallStatus,
    /// The whole call as the server saw it, queueing included.
    pub latency_ms: f64,
    /// SHA-256 of the input the tool got, as canonical JSON, hex.
    pub request_payload_hash: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<&'a str>,
}

/// `POST /api/v1/tools/call` (`200`): `"success": true`, the tool's output.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ToolCallSucceeded<'a> {
    success: bool,
    // The tool's output as the text written once for every copy of it
    // (a plain comment: the OpenAPI document describes it as before).
    #[schema(value_type = serde_json::Value)]
    pub output: &'a RawValue,
    pub audit: ToolCallAudit<'a>,
}

impl<'a> ToolCallSucceeded<'a> {
    pub fn new(output: &'a RawValue, audit: ToolCallAudit<'a>) -> Self {
        Self {
            success: true,
            output,
            audit,
        }
    }
}

/// `POST /api/v1/tools/call` when the call failed (the status of
/// `error_type`): `"success": false` and why.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ToolCallFailed<'a> {
    success: bool,
    /// The tool's message.
    pub error: &'a str,
    pub error_type: ErrorCode,
    /// Why the call failed, in the audit ledger's words.
    #[schema(value_type = String)]
    pub reason: Reason,
    pub audit: ToolCallAudit<'a>,
}

impl<'a> ToolCallFailed<'a> {
    pub fn new(error: &'a ToolError, audit: ToolCallAudit<'a>) -> Self {
        Self {
            success: false,
            error: &error.message,
            error_type: error.code,
            reason: error.reason,
            audit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Position, StoryEvent, StoryFrame, TurnCompleted, TurnFailed};
    use serde_json::json;

    fn audit_row() -> AuditRow {
        AuditRow {
            audit_id: 17,
            session_id: Some("sess_Q2xk9fL0aB7cD3eF".into()),
            tenant_id: "default".into(),
            trace_id: "tr_p0Q8".into(),
            turn_id: Some("turn_9".into()),
            call_id: Some("call_1".into()),
            tool: "roll_dice".into(),
            role: "game_master".into(),
            args_hash: "5f1c".into(),
            status: "ok".into(),
            reason: None,
            error_code: None,
            error_message: None,
            duration_us: 41,
            prompt_tokens: 0,
            completion_tokens: 0,
            created_at: 1_795_651_000_123,
            site_id: None,
            span_id: None,
            user_id: None,
        }
    }

    /// The audit row of docs/protocol.md §1.8.
    fn audit_row_json() -> Value {
        json!({"audit_id": 17, "session_id": "sess_Q2xk9fL0aB7cD3eF", "tenant_id": "default",
               "trace_id": "tr_p0Q8", "turn_id": "turn_9", "call_id": "call_1",
               "tool": "roll_dice", "role": "game_master",
               "args_hash": "5f1c", "status": "ok",
               "reason": null, "error_code": null, "error_message": null,
               "duration_us": 41, "prompt_tokens": 0, "completion_tokens": 0,
               "created_at": 1_795_651_000_123_i64, "site_id": null, "span_id": null,
               "user_id": null})
    }

    fn meta(visibility: Visibility) -> SessionMeta {
        SessionMeta {
            session_id: "sess_Q2xk9fL0aB7cD3eF".into(),
            tenant_id: "default".into(),
            campaign_id: "demo".into(),
            title: "The Drowned Lanterns".into(),
            stored_player_token: crate::game::party::stored_token("k3J"),
            stored_spectator_token: "sha256:0".into(),
            created_at: 0,
            visibility,
            closed_at: None,
            anonymous: false,
        }
    }

    fn links() -> SessionLinks {
        SessionLinks {
            ws_url: "ws://127.0.0.1:8080/ws/sessions/sess_Q2xk9fL0aB7cD3eF?token=k3J".into(),
            play_url: "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=k3J".into(),
            watch_url: "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=Zp8".into(),
        }
    }

    fn audit(trace_id: &TraceId, error: bool) -> ToolCallAudit<'_> {
        ToolCallAudit {
            trace_id,
            tool_name: if error { "move" } else { "roll_dice" },
            status: if error {
                ToolStatus::Error
            } else {
                ToolStatus::Ok
            }
            .into(),
            latency_ms: if error { 0.3 } else { 0.042 },
            request_payload_hash: "5f1c",
            error_type: error.then_some(ErrorCode::NotFound),
            error_message: error.then_some("no session sess_x"),
        }
    }

    /// Each body as docs/protocol.md §1 shows it, key for key.
    #[test]
    fn bodies_have_the_documented_shape() {
        let demo: Campaign = serde_json::from_value(json!({
            "campaign_id": "demo", "title": "The Drowned Lanterns",
            "description": "Descend into a half-sunken ruin.",
            "allowlist": [], "active_actor_id": "pc_001", "areas": [], "characters": []
        }))
        .expect("a minimal campaign parses");
        let (private, public) = (meta(Visibility::Private), meta(Visibility::Public));
        let actions = ActionPage {
            actions: vec![json!({"seq": 44, "turn_id": "turn_9", "call_id": "call_1",
                "tool": "move", "args": {"actor_id": "pc_001"}, "status": "ok",
                "result": {"actor_id": "pc_001"}, "timestamp": "2026-11-25T21:56:40.123Z"})],
            next_after_seq: None,
        };
        let ledger = AuditPage {
            entries: vec![audit_row()],
            next_after_id: Some(17),
        };
        let rows = vec![audit_row()];
        let spec = ToolSpec::new(
            "roll_dice",
            "Roll dice",
            "dice",
            "Rolls dice.",
            json!({"type": "object"}),
            json!({"type": "object", "required": ["total"]}),
        );
        let not_found = ToolError::new(Reason::NotFound, ErrorCode::NotFound, "no session sess_x");
        let (session, trace, ledger_trace) = (
            SessionId::from("sess_Q2xk9fL0aB7cD3eF"),
            TraceId::from("trace-1"),
            TraceId::from("tr_p0Q8"),
        );

        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "health",
                json!(Health::ok("node-a")),
                json!({"status": "ok", "node_id": "node-a"}),
            ),
            (
                "campaign",
                json!(CampaignSummary::from(&demo)),
                json!({"campaign_id": "demo", "title": "The Drowned Lanterns",
                       "description": "Descend into a half-sunken ruin."}),
            ),
            (
                "session created",
                json!(SessionCreated::new(&private, "k3J", "Zp8", links())),
                json!({"session_id": "sess_Q2xk9fL0aB7cD3eF", "player_token": "k3J",
                       "spectator_token": "Zp8", "visibility": "private",
                       "ws_url": "ws://127.0.0.1:8080/ws/sessions/sess_Q2xk9fL0aB7cD3eF?token=k3J",
                       "player_url": "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=k3J",
                       "spectator_url": "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=Zp8",
                       "play_url": "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=k3J",
                       "watch_url": "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=Zp8"}),
            ),
            (
                "public session created",
                json!(SessionCreated::new(&public, "k3J", "Zp8", links()))["visibility"].clone(),
                json!("public"),
            ),
            (
                "live session",
                json!(LiveSession {
                    session_id: &session,
                    title: "The Drowned Lanterns",
                    players: 1,
                    spectators: 2,
                    turns: 9,
                    spectator_token: "Zp8",
                    watch_url: links().watch_url,
                }),
                json!({"session_id": "sess_Q2xk9fL0aB7cD3eF", "title": "The Drowned Lanterns",
                       "players": 1, "spectators": 2, "turns": 9, "spectator_token": "Zp8",
                       "watch_url": "http://127.0.0.1:8080/?session=sess_Q2xk9fL0aB7cD3eF&token=Zp8"}),
            ),
            (
                "actions page",
                json!(ActionsPage::from(&actions)),
                json!({"actions": [{"seq": 44, "turn_id": "turn_9", "call_id": "call_1",
                       "tool": "move", "args": {"actor_id": "pc_001"}, "status": "ok",
                       "result": {"actor_id": "pc_001"}, "timestamp": "2026-11-25T21:56:40.123Z"}],
                       "next_after_seq": null}),
            ),
            (
                "audit page",
                json!(AuditLedgerPage::from(&ledger)),
                json!({"entries": [audit_row_json()], "next_after_id": 17}),
            ),
            (
                "trace ledger",
                json!(TraceLedger::new(&ledger_trace, &rows)),
                json!({"trace_id": "tr_p0Q8", "entries": [audit_row_json()]}),
            ),
            (
                "npc activated",
                json!(NpcActivated {
                    npc: NpcActivation {
                        npc_id: "npc_silt".into(),
                        active: false,
                        changed: true,
                    },
                    turn_id: "direct_a8Kd02LmQx9Z".into(),
                    call_id: "call_1".into(),
                    seq: 57,
                }),
                json!({"npc_id": "npc_silt", "active": false, "changed": true,
                       "turn_id": "direct_a8Kd02LmQx9Z", "call_id": "call_1", "seq": 57}),
            ),
            (
                "tool catalogue",
                json!(ToolCatalogue::from_iter([&spec])),
                json!({"total": 1, "tools": [{"name": "roll_dice", "version": "1.0.0",
                       "description": "Rolls dice.", "category": "dice",
                       "input_schema": {"type": "object"},
                       "output_schema": {"type": "object", "required": ["total"]},
                       "requires_auth": false, "ai_callable": true}]}),
            ),
            (
                "tool call succeeded",
                json!(ToolCallSucceeded::new(
                    &crate::json::raw(
                        &json!({"dice": "2d6", "rolls": [3, 5], "modifier": 0, "total": 8})
                    ),
                    audit(&trace, false),
                )),
                json!({"success": true,
                       "output": {"dice": "2d6", "rolls": [3, 5], "modifier": 0, "total": 8},
                       "audit": {"trace_id": "trace-1", "tool_name": "roll_dice", "status": "success",
                                 "latency_ms": 0.042, "request_payload_hash": "5f1c"}}),
            ),
            (
                "tool call failed",
                json!(ToolCallFailed::new(&not_found, audit(&trace, true))),
                json!({"success": false, "error": "no session sess_x", "error_type": "NOT_FOUND",
                       "reason": "not_found",
                       "audit": {"trace_id": "trace-1", "tool_name": "move", "status": "error",
                                 "latency_ms": 0.3, "request_payload_hash": "5f1c",
                                 "error_type": "NOT_FOUND", "error_message": "no session sess_x"}}),
            ),
            (
                "admin sessions",
                json!(AdminSessions {
                    node_id: "node-a",
                    total: 7,
                    limit: 1,
                    sessions: vec![AdminSession {
                        tenant_id: "acme",
                        session_id: &session,
                        title: "The Drowned Lanterns",
                        campaign_id: "demo",
                        visibility: Visibility::Private,
                        players: 1,
                        spectators: 2,
                        turns: 9,
                        queued: 3,
                        owner_node: "node-a",
                        last_activity: "2026-11-25T23:56:40.000Z".into(),
                        last_activity_ms: 1_795_651_000_000,
                        closing: false,
                    }],
                }),
                json!({"node_id": "node-a", "total": 7, "limit": 1, "sessions": [{
                    "tenant_id": "acme", "session_id": "sess_Q2xk9fL0aB7cD3eF",
                    "title": "The Drowned Lanterns", "campaign_id": "demo",
                    "visibility": "private", "players": 1, "spectators": 2, "turns": 9,
                    "queued": 3, "owner_node": "node-a",
                    "last_activity": "2026-11-25T23:56:40.000Z",
                    "last_activity_ms": 1_795_651_000_000_i64, "closing": false}]}),
            ),
            (
                "story page",
                json!(StoryPage {
                    session_id: "sess_Q2xk9fL0aB7cD3eF",
                    tenant_id: "acme",
                    title: "The Drowned Lanterns",
                    campaign_id: "demo",
                    owner_node: None,
                    closed_at: Some("2026-11-25T23:56:40.000Z".into()),
                    frames: vec![json!({"type": "presence", "seq": 1})],
                    next_after_seq: Some(1),
                }),
                json!({"session_id": "sess_Q2xk9fL0aB7cD3eF", "tenant_id": "acme",
                       "title": "The Drowned Lanterns", "campaign_id": "demo",
                       "owner_node": null, "closed_at": "2026-11-25T23:56:40.000Z",
                       "frames": [{"type": "presence", "seq": 1}], "next_after_seq": 1}),
            ),
            (
                "session closed",
                json!(SessionClosed {
                    session_id: "sess_Q2xk9fL0aB7cD3eF",
                    closed: true,
                    closed_at: "2026-11-25T23:56:40.000Z".into(),
                }),
                json!({"session_id": "sess_Q2xk9fL0aB7cD3eF", "closed": true,
                       "closed_at": "2026-11-25T23:56:40.000Z"}),
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn node_figures_read_the_metrics() {
        let m = crate::metrics::Metrics::default();
        m.turns_started.add(3);
        m.turns_completed.add(2);
        m.turn_failed("AI_TIMEOUT");
        m.player_connections.inc();
        m.sessions_live.inc();
        m.frames_sent.add(40);
        m.rate_limited.inc();
        for s in [0.002, 0.002, 0.07] {
            m.commit_seconds.observe(s);
        }
        let figures = json!(NodeFigures::of(
            "node-a",
            &m,
            std::time::Duration::from_millis(12_345)
        ));
        let p50 = m.commit_seconds.quantile(0.5);
        let p99 = m.commit_seconds.quantile(0.99);
        assert_eq!(
            figures,
            json!({"node_id": "node-a", "uptime_s": 12.345, "sessions_live": 1,
                   "connections": {"player": 1, "spectator": 0},
                   "turns": {"started": 3, "completed": 2, "failed": {"AI_TIMEOUT": 1}},
                   "frames_sent": 40, "outbound_drops": 0, "rate_limited": 1,
                   "journal_commit": {"count": 3, "sum_s": 0.074, "p50_s": p50, "p99_s": p99}})
        );
        assert!(p50.is_some_and(|p| p > 0.001 && p <= 0.0025), "{p50:?}");
        assert!(p99.is_some_and(|p| p > 0.05 && p <= 0.1), "{p99:?}");
    }

    /// The views of storage rows copy exactly what the rows used to send
    /// as they were.
    #[test]
    fn storage_views_send_what_the_rows_did() {
        let row = audit_row();
        assert_eq!(json!(AuditEntry::from(&row)), json!(row));
        let page = AuditPage {
            entries: vec![audit_row(), audit_row()],
            next_after_id: None,
        };
        assert_eq!(json!(AuditLedgerPage::from(&page)), json!(page));
        let page = ActionPage {
            actions: vec![json!({"seq": 1}), json!({"seq": 2})],
            next_after_seq: Some(2),
        };
        assert_eq!(json!(ActionsPage::from(&page)), json!(page));
    }

    /// A stored `turn_completed` frame, with a field this server does not
    /// know (a later version's), which is left out of the answer.
    fn completed_frame(limit: Option<&str>) -> String {
        let mut frame = json!({
            "type": "turn_completed", "seq": 17, "turn_id": "turn_3",
            "reply": "You make your way to the hall.", "dialog_type": "scene_description",
            "iterations": 2,
            "tool_events": [{"call_id": "call_1", "tool": "move", "status": "ok", "duration_ms": 0.05},
                            {"call_id": "call_2", "tool": "hp_delta", "status": "rejected",
                             "reason": "invalid_args", "error_code": "INVALID_ARGS", "duration_ms": 1.0}],
            "state_patch": state_patch_json(),
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
            "a_later_field": {"ignored": true}
        });
        if let Some(limit) = limit {
            frame["limit"] = json!(limit);
        }
        frame.to_string()
    }

    /// A state patch with an area and a character, every field written out
    /// as the game types write them.
    fn state_patch_json() -> Value {
        json!({
            "areas": [{"area_id": "area_002", "name": "Hall", "description": "Wet stone.",
                       "reachable_area_ids": ["area_001"], "x": 1, "y": 0, "z": -1,
                       "tags": ["flooded"]}],
            "characters": [{"character_id": "pc_001", "name": "Wren", "kind": "pc",
                            "area_id": "area_002", "hp": 9, "max_hp": 12, "level": 2,
                            "stats": {"dex": 14, "str": 10},
                            "inventory": [{"slug": "rope", "name": "Rope", "quantity": 1},
                                          {"slug": "lamp", "name": "Lamp",
                                           "description": "Brass.", "quantity": 2}],
                            "state": "active"}],
            "position": {"actor_id": "pc_001", "area_id": "area_002"}
        })
    }

    fn failed_frame(limit: Option<&str>) -> String {
        let mut frame = json!({
            "type": "turn_failed", "seq": 18, "turn_id": "turn_4",
            "error_code": "MAX_ITERATIONS", "message": "the turn used 8 tool rounds"
        });
        if let Some(limit) = limit {
            frame["limit"] = json!(limit);
        }
        frame.to_string()
    }

    fn answer_json(end: &TurnEnd, duplicate: bool) -> Value {
        match ChatAnswer::new(end, duplicate) {
            ChatAnswer::Completed(turn) => json!(turn),
            ChatAnswer::Failed(failed) => json!(failed),
            ChatAnswer::ApprovalRequired(paused) => json!(paused),
        }
    }

    /// The answer for a stored frame, read back as the session reads it.
    fn chat_answer(frame: &str, duplicate: bool) -> Value {
        let end: TurnEnd = serde_json::from_str(frame).expect("a turn-end frame parses");
        answer_json(&end, duplicate)
    }

    /// The chat answer repeats the frame's fields (`limit` only when the
    /// frame had one) and adds `duplicate`.
    #[test]
    fn chat_answers_repeat_the_turn_end() {
        let completed = json!({
            "turn_id": "turn_3", "seq": 17, "reply": "You make your way to the hall.",
            "dialog_type": "scene_description", "iterations": 2,
            "tool_events": [{"call_id": "call_1", "tool": "move", "status": "ok", "duration_ms": 0.05},
                            {"call_id": "call_2", "tool": "hp_delta", "status": "rejected",
                             "reason": "invalid_args", "error_code": "INVALID_ARGS", "duration_ms": 1.0}],
            "state_patch": state_patch_json(),
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
            "duplicate": false
        });
        // A frame stored before the patch carried zones answers with none.
        let mut completed = completed;
        completed["state_patch"]["zones"] = json!([]);
        completed["state_patch"]["zone_position"] = Value::Null;
        let mut completed_limited = completed.clone();
        completed_limited["limit"] = json!("repeated_call");
        completed_limited["duplicate"] = json!(true);
        let failed = json!({
            "error_code": "MAX_ITERATIONS", "message": "the turn used 8 tool rounds",
            "turn_id": "turn_4", "seq": 18, "duplicate": false
        });
        let mut failed_limited = failed.clone();
        failed_limited["limit"] = json!("max_iterations");

        let cases = [
            (completed_frame(None), false, completed),
            (
                completed_frame(Some("repeated_call")),
                true,
                completed_limited,
            ),
            (failed_frame(None), false, failed),
            (failed_frame(Some("max_iterations")), false, failed_limited),
        ];
        for (frame, duplicate, want) in cases {
            assert_eq!(chat_answer(&frame, duplicate), want, "{frame}");
        }
    }

    /// The answer's keys come in the order the route always wrote them.
    #[test]
    fn chat_answers_keep_their_key_order() {
        let cases = [
            (
                r#"{"seq":5,"type":"turn_completed","turn_id":"turn_1","reply":"Hi.","dialog_type":"narration","iterations":1,"tool_events":[],"state_patch":{"areas":[],"characters":[],"position":null},"usage":{"prompt_tokens":1,"completion_tokens":2},"limit":"deadline"}"#,
                r#"{"turn_id":"turn_1","seq":5,"reply":"Hi.","dialog_type":"narration","iterations":1,"tool_events":[],"state_patch":{"areas":[],"characters":[],"position":null,"zones":[],"zone_position":null},"usage":{"prompt_tokens":1,"completion_tokens":2},"limit":"deadline","duplicate":false}"#,
            ),
            (
                r#"{"seq":6,"type":"turn_failed","turn_id":"turn_2","error_code":"MAX_ITERATIONS","message":"late","limit":"deadline"}"#,
                r#"{"error_code":"MAX_ITERATIONS","message":"late","turn_id":"turn_2","seq":6,"limit":"deadline","duplicate":false}"#,
            ),
        ];
        for (frame, want) in cases {
            let end: TurnEnd = serde_json::from_str(frame).expect("a turn-end frame parses");
            let got = match ChatAnswer::new(&end, false) {
                ChatAnswer::Completed(turn) => serde_json::to_string(&turn),
                ChatAnswer::Failed(failed) => serde_json::to_string(&failed),
                ChatAnswer::ApprovalRequired(paused) => serde_json::to_string(&paused),
            };
            assert_eq!(got.ok().as_deref(), Some(want));
        }
    }

    /// A real turn-end frame, as the session writes it, answers with every
    /// field but `type`, plus `duplicate`, whether the session hands over
    /// the event it journalled or reads the frame back from the journal.
    #[test]
    fn real_turn_end_frames_answer_their_own_fields() {
        let patch: StatePatch =
            serde_json::from_value(state_patch_json()).expect("the patch reads as game types");
        let events = [
            StoryEvent::TurnCompleted(TurnCompleted {
                turn_id: "turn_3".into(),
                reply: "You wade in.".into(),
                dialog_type: "scene_description".into(),
                iterations: 8,
                tool_events: vec![ToolEvent {
                    call_id: "call_1".into(),
                    tool: "move".into(),
                    status: ToolStatus::Error,
                    reason: Some(Reason::InvalidArgs),
                    error_code: Some(ErrorCode::InvalidArgs),
                    duration_ms: 0.125,
                }],
                state_patch: StatePatch {
                    position: Some(Position {
                        actor_id: "pc_001".into(),
                        area_id: "area_002".into(),
                    }),
                    ..StatePatch::default()
                },
                usage: Usage {
                    prompt_tokens: 12,
                    completion_tokens: 5,
                },
                limit: Some(TurnLimit::MaxIterations),
                model: None,
            }),
            StoryEvent::TurnCompleted(TurnCompleted {
                turn_id: "turn_4".into(),
                reply: "Quiet.".into(),
                dialog_type: "narration".into(),
                iterations: 1,
                tool_events: Vec::new(),
                state_patch: patch,
                usage: Usage::default(),
                limit: None,
                model: None,
            }),
            StoryEvent::TurnFailed(TurnFailed {
                turn_id: "turn_5".into(),
                error_code: ErrorCode::AiTimeout,
                message: "the model did not answer in time".into(),
                limit: Some(TurnLimit::Deadline),
            }),
            StoryEvent::TurnFailed(TurnFailed {
                turn_id: "turn_6".into(),
                error_code: ErrorCode::UpstreamError,
                message: "the model failed".into(),
                limit: None,
            }),
        ];
        for (seq, event) in (40..).zip(events) {
            let frame = json!(StoryFrame { seq, event: &event });
            let live = TurnEnd::of(seq, event).expect("a turn's end");
            for duplicate in [false, true] {
                let mut want = frame.clone();
                if let Some(fields) = want.as_object_mut() {
                    fields.remove("type");
                    fields.insert("duplicate".into(), json!(duplicate));
                }
                assert_eq!(answer_json(&live, duplicate), want, "{frame}");
                assert_eq!(chat_answer(&frame.to_string(), duplicate), want, "{frame}");
            }
        }
    }

    #[test]
    fn only_turn_ends_are_turn_ends() {
        let presence = StoryEvent::Presence {
            players: 1,
            spectators: 0,
            seats: Vec::new(),
        };
        assert_eq!(TurnEnd::of(3, presence), None);
        let delta = StoryEvent::NarrativeDelta {
            turn_id: "turn_1".into(),
            text: "Drip.".into(),
        };
        assert_eq!(TurnEnd::of(4, delta), None);
    }

    #[test]
    fn a_failed_turn_keeps_its_code() {
        let end: TurnEnd = serde_json::from_str(&failed_frame(None)).expect("parses");
        let ChatAnswer::Failed(failed) = ChatAnswer::new(&end, false) else {
            panic!("a turn_failed frame is a failure");
        };
        assert_eq!(failed.error_code, ErrorCode::MaxIterations);
    }

    /// Anything but a whole turn-end frame is refused (the route answers
    /// `500`).
    #[test]
    fn other_frames_are_not_turn_ends() {
        for frame in [
            "",
            "not json",
            r#"{"type":"presence","seq":3,"players":1,"spectators":0}"#,
            r#"{"seq":17,"turn_id":"turn_3"}"#,
            r#"{"type":"turn_failed","seq":18,"turn_id":"turn_4","message":"x"}"#,
            r#"{"type":"turn_failed","seq":18,"turn_id":"turn_4","error_code":"NO_SUCH_CODE","message":"x"}"#,
            r#"{"type":"turn_failed","turn_id":"turn_4","error_code":"NOT_FOUND","message":"x"}"#,
        ] {
            assert!(
                serde_json::from_str::<TurnEnd>(frame).is_err(),
                "{frame} should be refused"
            );
        }
    }
}

/// `DELETE /api/v1/sessions/{id}/timers/{timer_id}` (`200`): the timer
/// is cancelled (an unknown one is `404`, so `cancelled` is always true).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TimerCancelledBody {
    pub cancelled: bool,
    #[schema(value_type = String)]
    pub timer_id: crate::ids::TimerId,
}

/// `POST /api/v1/sessions/{id}/invites` (`201`): the invite's code (said
/// only here, stored as a digest) and the page link that opens the join
/// form with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InviteMadeBody {
    pub invite_code: String,
    /// `<base>/?join=<session_id>&invite=<code>`.
    pub join_url: String,
    /// RFC 3339 UTC.
    pub expires_at: String,
}

/// `POST /api/v1/sessions/{id}/join` (`201`): the new seat, its player
/// token (said only here) and its links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SeatJoinedBody {
    pub session_id: String,
    pub seat_id: String,
    pub character_id: String,
    pub player_token: String,
    pub ws_url: String,
    /// The page opened on the session as this seat.
    pub player_url: String,
}
