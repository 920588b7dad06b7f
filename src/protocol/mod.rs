//! The wire types: the only place that defines JSON sent to or read from
//! clients. This file holds the WebSocket frames, the snapshot and the
//! stateless chat messages (docs/protocol.md §2 and §5); [`http`] holds the
//! HTTP answer bodies (docs/protocol.md §1). Game types and storage rows
//! are mapped into these.

pub mod http;
pub mod lead;
pub mod requests;
pub use crate::ids::{CallId, SessionId, TraceId, TurnId};

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{ErrorCode, Reason, ToolStatus};
use crate::game::approvals::{Approval, Decision, MAX_REASON_CHARS};
use crate::game::party::{SeatRole, SeatState, TurnMode};
use crate::game::zones::{PlayerRuntime, Zone};
use crate::game::{Area, Character, GameState};
use crate::ids::{AreaId, CharacterId, RequestId, SeatId, TimerId, Usage};

/// A frame a client sends.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// A player's message; starts a turn.
    Chat {
        text: String,
        request_id: Option<RequestId>,
    },
    /// Table talk from a player (docs/protocol.md §8): a `party_chat`
    /// frame for everyone, never the model's.
    Say {
        text: String,
        request_id: Option<RequestId>,
    },
    /// A decision on a pending approval (docs/protocol.md §19), from the
    /// speaker's seat or the host.
    Approve {
        approval_id: String,
        decision: ApproveDecision,
        #[serde(default)]
        reason: Option<String>,
        /// Repeated in the `error` frame of a refusal, so a client with
        /// several decisions under way knows which one was refused.
        #[serde(default)]
        request_id: Option<RequestId>,
    },
    /// Answered with `pong` carrying the same nonce.
    Ping {
        #[serde(default)]
        nonce: Value,
    },
}

/// What a person may decide on an approval (a timeout is the server's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApproveDecision {
    Approve,
    Deny,
}

impl From<ApproveDecision> for Decision {
    fn from(d: ApproveDecision) -> Self {
        match d {
            ApproveDecision::Approve => Self::Approve,
            ApproveDecision::Deny => Self::Deny,
        }
    }
}

/// Longest `request_id` a client may send, in characters: it is
/// remembered for de-duplication and repeated in frames and the journal.
pub const MAX_REQUEST_ID_CHARS: usize = 128;

/// Checks a client's `request_id`: 1 to [`MAX_REQUEST_ID_CHARS`]
/// characters, none of them control characters.
pub fn check_request_id(id: &str) -> Result<(), String> {
    let n = id.chars().count();
    if n == 0 || n > MAX_REQUEST_ID_CHARS || id.chars().any(char::is_control) {
        return Err(format!(
            "request_id must be 1 to {MAX_REQUEST_ID_CHARS} characters without control characters"
        ));
    }
    Ok(())
}

impl ClientFrame {
    /// Parses one text frame; the error is a message for `INVALID_FRAME`.
    pub fn parse(text: &str) -> Result<Self, String> {
        // No string of a frame may hold U+0000: a chat's text and request
        // id are stored, and PostgreSQL's `TEXT` refuses it.
        if let Some(at) = crate::json::find_nul_in_text(text.as_bytes()) {
            return Err(format!("frame refused: {at}"));
        }
        // A well-formed frame is read straight into its type. Anything else
        // goes through a value, which says why it is refused, and accepts
        // what the direct read does not: a key given twice (the last one
        // counts). Whatever the direct read accepts, the value reads the
        // same (`a_frame_read_directly_is_the_frame_read_through_a_value`).
        let frame = match serde_json::from_str::<Self>(text) {
            Ok(frame) => frame,
            Err(_) => Self::read_via_value(text)?,
        };
        if let Self::Chat {
            request_id: Some(id),
            ..
        }
        | Self::Say {
            request_id: Some(id),
            ..
        }
        | Self::Approve {
            request_id: Some(id),
            ..
        } = &frame
        {
            check_request_id(id)?;
        }
        // Refused as the frame it is, before the session sees it: over
        // HTTP the same bound is a 400 of the route.
        if let Self::Approve {
            reason: Some(reason),
            ..
        } = &frame
            && (reason.chars().count() > MAX_REASON_CHARS || reason.chars().any(char::is_control))
        {
            return Err(format!(
                "reason is at most {MAX_REASON_CHARS} characters, without control characters"
            ));
        }
        Ok(frame)
    }

    /// Reads `text` as a JSON value, then as a frame; the error says why.
    fn read_via_value(text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("frame is not JSON: {e}"))?;
        match value.get("type") {
            Some(Value::String(_)) => {}
            Some(_) => return Err("\"type\" must be a string".into()),
            None => return Err("frame has no \"type\"".into()),
        }
        serde_json::from_value(value).map_err(|e| format!("bad frame: {e}"))
    }
}

/// The role a connection plays in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnRole {
    Player,
    Spectator,
}

/// Frames outside the story: no seq.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlFrame<'a> {
    Welcome {
        session_id: &'a SessionId,
        role: ConnRole,
        /// The seq of the last story frame before live frames (and after any
        /// resumed backlog).
        seq: u64,
        resumed: bool,
        /// A player's seat and character (docs/protocol.md §8).
        #[serde(skip_serializing_if = "Option::is_none")]
        seat_id: Option<&'a SeatId>,
        #[serde(skip_serializing_if = "Option::is_none")]
        character_id: Option<&'a CharacterId>,
        /// The session snapshot ([`Snapshot`]), serialized once for every
        /// connection that joins at this seq.
        state: &'a RawValue,
    },
    Ack {
        request_id: Option<RequestId>,
        turn_id: TurnId,
        duplicate: bool,
        queued: usize,
        /// In rounds mode: the round the chat is this seat's action for.
        #[serde(skip_serializing_if = "Option::is_none")]
        round: Option<u64>,
    },
    Error {
        request_id: Option<RequestId>,
        error_code: ErrorCode,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    Pong {
        nonce: Value,
    },
}

impl ControlFrame<'_> {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| Self::internal_error_json())
    }

    /// What a frame that did not serialize is sent as.
    pub fn internal_error_json() -> String {
        r#"{"type":"error","error_code":"INTERNAL_ERROR"}"#.into()
    }
}

/// The session snapshot (docs/protocol.md §5).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Snapshot<'a> {
    pub session_id: &'a SessionId,
    pub campaign_id: &'a str,
    pub title: &'a str,
    pub turn: u64,
    pub active_actor_id: &'a str,
    pub areas: &'a [Area],
    #[schema(value_type = Vec<Character>)]
    pub characters: &'a [Arc<Character>],
    pub allowlist: &'a [String],
    /// Zones of the open world generated so far.
    pub zones: &'a [Zone],
    /// Where the player is in the zone world and how they travel.
    pub player: &'a PlayerRuntime,
    /// The Chinese names of areas, characters, items (`item_<slug>`) and
    /// the campaign (its id), by id: the campaign's `name_zh` drafts. Only
    /// these drafts: names are no secret, other drafts (a person's notes)
    /// stay unseen.
    #[schema(value_type = std::collections::BTreeMap<String, NameZh>)]
    pub names_zh: NamesZh<'a>,
    /// The party's seats (docs/protocol.md §8), as `GET …/seats` lists
    /// them.
    pub seats: Vec<SeatView<'a>>,
    #[schema(value_type = String)]
    pub turn_mode: TurnMode,
    pub round_timeout_s: u32,
    /// The round being gathered (rounds mode): its number and who acted,
    /// never what.
    pub round: RoundView<'a>,
    /// The pending timers, soonest first (docs/protocol.md §9).
    pub timers: Vec<TimerView<'a>>,
    /// The calls waiting for a person's decision (docs/protocol.md §19),
    /// with the fields of their `approval_requested` frames.
    pub pending_approvals: Vec<ApprovalPending>,
    /// The node running the session (`GET /api/v1/sessions/{id}` only,
    /// docs/protocol.md §15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_node: Option<&'a str>,
}

/// One seat of the party, as the snapshot and `GET …/seats` show it
/// (never its token).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SeatView<'a> {
    #[schema(value_type = String)]
    pub seat_id: &'a SeatId,
    #[schema(value_type = String)]
    pub character_id: &'a CharacterId,
    pub name: &'a str,
    /// `"host"` or `"player"`.
    #[schema(value_type = String)]
    pub role: SeatRole,
    /// Whether the seat has a connection now.
    pub online: bool,
    /// `"active"`, `"kicked"` or `"left"`.
    #[schema(value_type = String)]
    pub state: SeatState,
}

impl<'a> SeatView<'a> {
    /// Every seat of `state`'s party, online as `online` says.
    pub fn all(state: &'a GameState, online: impl Fn(&SeatId) -> bool) -> Vec<Self> {
        state
            .party
            .seats
            .iter()
            .map(|s| SeatView {
                seat_id: &s.seat_id,
                character_id: &s.character_id,
                name: &s.name,
                role: s.role,
                online: online(&s.seat_id),
                state: s.state,
            })
            .collect()
    }
}

/// The round under way in the snapshot.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RoundView<'a> {
    pub number: u64,
    /// The seats that submitted an action this round.
    #[schema(value_type = Vec<String>)]
    pub acted: Vec<&'a SeatId>,
}

/// `GET /api/v1/sessions/{id}/seats`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SeatList<'a> {
    pub seats: Vec<SeatView<'a>>,
}

impl<'a> Snapshot<'a> {
    /// The snapshot as the session answer shows it, naming its node.
    pub fn owned_by(self, node: &'a str) -> Self {
        Self {
            owner_node: Some(node),
            ..self
        }
    }

    /// The snapshot with the seats `online` says have a connection (as
    /// the session knows it, or a tail as the owner's last `presence`
    /// said).
    pub fn online(self, online: impl Fn(&SeatId) -> bool) -> Self {
        let seats = self
            .seats
            .into_iter()
            .map(|s| SeatView {
                online: online(s.seat_id),
                ..s
            })
            .collect();
        Self { seats, ..self }
    }

    /// The snapshot of `state`, every seat offline.
    pub fn of(session_id: &'a SessionId, state: &'a GameState) -> Self {
        let party = &state.party;
        Self {
            seats: SeatView::all(state, |_| false),
            timers: TimerView::all(state),
            pending_approvals: state
                .approvals
                .pending
                .iter()
                .map(ApprovalPending::of)
                .collect(),
            turn_mode: party.turn_mode,
            round_timeout_s: party.round_timeout_s,
            round: RoundView {
                number: party.round.number,
                acted: party.round.actions.iter().map(|a| &a.seat_id).collect(),
            },
            session_id,
            campaign_id: &state.campaign_id,
            title: &state.title,
            turn: state.turn,
            active_actor_id: state.active_actor_id.as_str(),
            areas: &state.areas,
            characters: &state.characters,
            allowlist: &state.allowlist,
            zones: &state.zones,
            player: &state.player,
            names_zh: NamesZh(state),
            owner_node: None,
        }
    }
}

/// [`GameState::names_zh`] on the wire: `{"area_001": {"name": "灯笼门",
/// "description": "…"}, "item_rope": {…}, "demo": {…}}`, an empty object
/// when the campaign has none.
#[derive(Debug, Clone, Copy)]
pub struct NamesZh<'a>(&'a GameState);

/// One Chinese name of [`NamesZh`].
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct NameZh<'a> {
    pub name: &'a str,
    pub description: &'a str,
}

impl Serialize for NamesZh<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.names_zh().map(|(id, e)| {
            let name = NameZh {
                name: &e.title,
                description: &e.body,
            };
            (id, name)
        }))
    }
}

/// One tool call's outcome, as listed in `turn_completed.tool_events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolEvent {
    pub call_id: CallId,
    pub tool: String,
    pub status: ToolStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    pub duration_ms: f64,
}

/// What a turn changed, so a client can refresh without re-reading everything.
/// Read back, with its game types, from a stored `turn_completed` frame.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StatePatch {
    /// Areas created or whose links changed, whole.
    pub areas: Vec<Area>,
    /// Characters whose position, HP or state changed, whole.
    pub characters: Vec<Character>,
    /// Where the active character stands after the turn.
    pub position: Option<Position>,
    /// Zones created this turn, whole. Absent from frames stored before
    /// zones were patched, which read as none.
    #[serde(default)]
    pub zones: Vec<Zone>,
    /// The player's place in the zone world after the turn; `None` when
    /// the world has no zones. Boxed: most turns' frames carry none, and
    /// every turn end holds a patch.
    #[serde(default)]
    pub zone_position: Option<Box<ZonePosition>>,
}

/// Where the player stands in the zone world: a grid cell and the zone
/// there, if the player has travelled to one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ZonePosition {
    pub x: i64,
    pub y: i64,
    pub z: i64,
    pub zone_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Position {
    pub actor_id: CharacterId,
    pub area_id: AreaId,
}

/// Which limit stopped a turn, as its last frame says ([`TurnEnd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnLimit {
    MaxIterations,
    RepeatedCall,
    Deadline,
}

/// A frame of the story: carries the session's seq.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StoryEvent {
    TurnStarted {
        turn_id: TurnId,
        request_id: Option<RequestId>,
        actor_id: CharacterId,
        text: String,
        /// The seat that spoke (docs/protocol.md §8); `None` when no seat
        /// did (a turn no person asked for).
        seat_id: Option<SeatId>,
        /// The round this turn resolves, with every seat's action (rounds
        /// mode).
        #[serde(skip_serializing_if = "Option::is_none")]
        round: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        actions: Option<Vec<RoundActionView>>,
        /// What started a turn no person asked for: a due timer
        /// (docs/protocol.md §9), as `"trigger":"timer","timer_id","event"`.
        #[serde(flatten, skip_serializing_if = "Option::is_none")]
        world: Option<WorldTrigger>,
    },
    ToolCall {
        turn_id: TurnId,
        iteration: u32,
        call_id: CallId,
        tool: String,
        args: Value,
    },
    ToolResult {
        turn_id: TurnId,
        call_id: CallId,
        tool: String,
        status: ToolStatus,
        /// The tool's result as JSON text, written once for this frame,
        /// the applied action, the model's history and a direct caller's
        /// answer, which share these bytes (`session::calls::run`).
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Arc<RawValue>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<Reason>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_code: Option<ErrorCode>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        duration_ms: f64,
    },
    NarrativeDelta {
        turn_id: TurnId,
        text: String,
    },
    TurnCompleted(TurnCompleted),
    TurnFailed(TurnFailed),
    Presence {
        players: usize,
        spectators: usize,
        /// Which seats have a connection now (docs/protocol.md §8).
        seats: Vec<SeatOnline>,
    },
    /// Someone took a seat by invite.
    SeatJoined {
        seat_id: SeatId,
        character_id: CharacterId,
        name: String,
    },
    /// A seat was kicked or left, or its role changed.
    SeatChanged {
        seat_id: SeatId,
        state: SeatState,
        role: SeatRole,
    },
    /// The host switched the turn mode.
    ModeChanged {
        turn_mode: TurnMode,
        round_timeout_s: u32,
    },
    /// The host made an invite (never its code): journalled so that the
    /// invite survives everything the journal does.
    InviteCreated {
        invite_id: String,
        max_uses: u32,
        expires_at: String,
    },
    /// A seat acted for the round (rounds mode); the text stays unseen
    /// until the round's turn.
    ActionSubmitted {
        round: u64,
        seat_id: SeatId,
    },
    /// Table talk: for the people at the table, never for the model.
    PartyChat {
        seat_id: SeatId,
        name: String,
        text: String,
    },
    /// The game master's call waits for a person's decision
    /// (docs/protocol.md §19): the turn pauses.
    ApprovalRequested(ApprovalPending),
    /// A pending approval was decided (or timed out); its call's
    /// `tool_result` follows.
    ApprovalResolved {
        turn_id: TurnId,
        call_id: CallId,
        approval_id: String,
        decision: Decision,
        /// The seat that decided; `None` for a key or the timeout.
        by_seat_id: Option<SeatId>,
        reason: Option<String>,
    },
}

/// A pending approval, as `approval_requested` tells it, the snapshot's
/// `pending_approvals` list it and `POST /api/v1/chat` answers a paused
/// turn with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalPending {
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    #[schema(value_type = String)]
    pub call_id: CallId,
    pub approval_id: String,
    pub tool: String,
    /// Exactly the arguments the call runs with, once approved.
    #[schema(value_type = Object)]
    pub args: Value,
    /// The seat whose turn it is; `null` for a turn no seat asked for
    /// (only the host decides those).
    #[schema(value_type = Option<String>)]
    pub seat_id: Option<SeatId>,
    /// RFC 3339, UTC: when it is denied with `timeout`.
    pub expires_at: String,
}

impl ApprovalPending {
    pub fn of(a: &Approval) -> Self {
        Self {
            turn_id: a.turn_id.clone(),
            call_id: a.call_id.clone(),
            approval_id: a.approval_id.clone(),
            tool: a.tool.clone(),
            args: a.args.clone(),
            seat_id: a.seat_id.clone(),
            expires_at: crate::storage::rfc3339(a.expires_at),
        }
    }
}

/// One seat's action in a round's `turn_started` (`text` null for a seat
/// that did not act).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoundActionView {
    #[schema(value_type = String)]
    pub seat_id: SeatId,
    #[schema(value_type = String)]
    pub character_id: CharacterId,
    pub text: Option<String>,
    #[schema(value_type = Option<String>)]
    pub request_id: Option<RequestId>,
}

/// What began a world turn: `"trigger":"timer"`, the timer and its event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorldTrigger {
    pub trigger: Trigger,
    #[schema(value_type = String)]
    pub timer_id: TimerId,
    pub event: String,
}

/// What starts a turn no person asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A durable timer came due.
    Timer,
}

/// A pending timer as the snapshot lists it (never its note or key: what
/// the game master noted for later is not the players' to read).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TimerView<'a> {
    #[schema(value_type = String)]
    pub timer_id: &'a TimerId,
    pub event: &'a str,
    /// RFC 3339, UTC.
    pub due_at: String,
    pub repeat_s: Option<u64>,
}

impl<'a> TimerView<'a> {
    /// Every pending timer of `state`, soonest first.
    pub fn all(state: &'a GameState) -> Vec<Self> {
        state
            .timers
            .pending()
            .iter()
            .map(|t| TimerView {
                timer_id: &t.timer_id,
                event: &t.event,
                due_at: crate::storage::rfc3339(t.due_at),
                repeat_s: t.repeat_s,
            })
            .collect()
    }
}

/// One seat in a `presence` frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SeatOnline {
    #[schema(value_type = String)]
    pub seat_id: SeatId,
    pub online: bool,
}

/// Every story frame's `type` ([`StoryEvent::kind`]): what a save's
/// story may hold.
pub const STORY_KINDS: [&str; 15] = [
    "turn_started",
    "tool_call",
    "tool_result",
    "narrative_delta",
    "turn_completed",
    "turn_failed",
    "presence",
    "seat_joined",
    "seat_changed",
    "mode_changed",
    "invite_created",
    "action_submitted",
    "party_chat",
    "approval_requested",
    "approval_resolved",
];

/// The story frames that belong to a turn and name it
/// ([`StoryEvent::turn_id`]).
pub const TURN_KINDS: [&str; 8] = [
    "turn_started",
    "tool_call",
    "tool_result",
    "narrative_delta",
    "turn_completed",
    "turn_failed",
    "approval_requested",
    "approval_resolved",
];

impl StoryEvent {
    /// The frame's `type`, as stored in the journal.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TurnStarted { .. } => "turn_started",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::NarrativeDelta { .. } => "narrative_delta",
            Self::TurnCompleted { .. } => "turn_completed",
            Self::TurnFailed { .. } => "turn_failed",
            Self::Presence { .. } => "presence",
            Self::SeatJoined { .. } => "seat_joined",
            Self::SeatChanged { .. } => "seat_changed",
            Self::ModeChanged { .. } => "mode_changed",
            Self::InviteCreated { .. } => "invite_created",
            Self::ActionSubmitted { .. } => "action_submitted",
            Self::PartyChat { .. } => "party_chat",
            Self::ApprovalRequested { .. } => "approval_requested",
            Self::ApprovalResolved { .. } => "approval_resolved",
        }
    }

    pub fn turn_id(&self) -> Option<&TurnId> {
        match self {
            Self::TurnStarted { turn_id, .. }
            | Self::ToolCall { turn_id, .. }
            | Self::ToolResult { turn_id, .. }
            | Self::NarrativeDelta { turn_id, .. }
            | Self::TurnCompleted(TurnCompleted { turn_id, .. })
            | Self::TurnFailed(TurnFailed { turn_id, .. })
            | Self::ApprovalRequested(ApprovalPending { turn_id, .. })
            | Self::ApprovalResolved { turn_id, .. } => Some(turn_id),
            Self::Presence { .. }
            | Self::SeatJoined { .. }
            | Self::SeatChanged { .. }
            | Self::ModeChanged { .. }
            | Self::InviteCreated { .. }
            | Self::ActionSubmitted { .. }
            | Self::PartyChat { .. } => None,
        }
    }
}

/// The `turn_completed` frame, but for its `type` and seq.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnCompleted {
    pub turn_id: TurnId,
    pub reply: String,
    pub dialog_type: String,
    pub iterations: u32,
    pub tool_events: Vec<ToolEvent>,
    pub state_patch: StatePatch,
    pub usage: Usage,
    /// Set when a loop limit cut the tool calls short and the reply is
    /// the model's closing narration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<TurnLimit>,
    /// The model that answered last (contract §12): the fallback's name
    /// once it took over. Absent in turns journalled before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The `turn_failed` frame, but for its `type` and seq.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnFailed {
    pub turn_id: TurnId,
    pub error_code: ErrorCode,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<TurnLimit>,
}

/// A turn's last story frame and its seq: what the session hands a caller
/// waiting for the turn (`POST /api/v1/chat`), taken from the event it
/// journalled or, for a turn that ended earlier, read from the journal.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TurnEnd {
    pub seq: u64,
    #[serde(flatten)]
    pub outcome: TurnOutcome,
}

/// How a turn ended, tagged by the frame's `type`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnOutcome {
    TurnCompleted(TurnCompleted),
    TurnFailed(TurnFailed),
    /// Not an end: the turn paused for a person's decision
    /// (docs/protocol.md §19). A caller waiting for the turn hears it.
    ApprovalRequested(ApprovalPending),
}

impl TurnEnd {
    /// The end of a turn, if `event` (journalled as `seq`) is one.
    pub fn of(seq: u64, event: StoryEvent) -> Option<Self> {
        let outcome = match event {
            StoryEvent::TurnCompleted(turn) => TurnOutcome::TurnCompleted(turn),
            StoryEvent::TurnFailed(turn) => TurnOutcome::TurnFailed(turn),
            StoryEvent::ApprovalRequested(a) => TurnOutcome::ApprovalRequested(a),
            _ => return None,
        };
        Some(Self { seq, outcome })
    }

    pub fn turn_id(&self) -> &TurnId {
        match &self.outcome {
            TurnOutcome::TurnCompleted(turn) => &turn.turn_id,
            TurnOutcome::TurnFailed(turn) => &turn.turn_id,
            TurnOutcome::ApprovalRequested(a) => &a.turn_id,
        }
    }
}

/// A story event with its seq, as sent.
#[derive(Debug, Serialize)]
pub struct StoryFrame<'a> {
    pub seq: u64,
    #[serde(flatten)]
    pub event: &'a StoryEvent,
}

// ----- the stateless chat API (`POST /api/chat`) --------------------------

/// The body of `POST /api/chat`: a whole conversation, in provider-agnostic
/// camelCase messages. Messages stay raw here so each one's problem can be
/// reported with its index.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct StatelessChatRequest {
    #[schema(value_type = Vec<ChatMessage>)]
    pub messages: Vec<Value>,
    /// Tool names the model may call; every model-callable tool if absent.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// One message of a stateless conversation.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatMessage {
    pub role: String,
    /// A string; `null` for an assistant message that only calls tools; any
    /// JSON for a tool message (serialized for the model).
    #[serde(default)]
    pub content: Value,
    #[serde(default)]
    pub tool_call_id: Option<CallId>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ChatToolCall>>,
}

/// A tool call in a stateless conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatToolCall {
    pub id: CallId,
    pub tool: ChatTool,
}

/// Which tool, with which arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatTool {
    pub name: String,
    pub args: Value,
}

/// The answer of `POST /api/chat`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StatelessChatReply {
    pub message: AssistantMessage,
}

/// The model's next message; the client runs its tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    /// Always `"assistant"`.
    pub role: &'static str,
    pub content: Option<String>,
    /// Left out when there are none: a front end takes the key's presence
    /// as "run tools".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ChatToolCall>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_snapshot_names_places_people_items_and_the_campaign_in_chinese_and_shows_no_other_draft()
    {
        let state = crate::tools::test_support::demo();
        let id = SessionId::from("sess_1");
        let snap = serde_json::to_value(Snapshot::of(&id, &state)).unwrap();
        let names = snap["names_zh"].as_object().unwrap();
        assert_eq!(
            names["area_001"],
            json!({"name": "灯笼门", "description": "一道半埋在淤泥里的破拱门，挂着仍在发光的绿玻璃灯笼。冰冷的水拍打着通往下方的旧台阶。"})
        );
        assert_eq!(names["npc_001"]["name"], "老玛伦");
        assert_eq!(names["item_sealed_lamp_oil"]["name"], "密封灯油");
        assert_eq!(names[state.campaign_id.as_str()]["name"], "沉没的灯笼");
        // Every area, character and item of the demo and its title, and
        // nothing else: no quest, no note.
        let items = names.keys().filter(|k| k.starts_with("item_")).count();
        // The hero's, those lying about, and those the people carry.
        assert_eq!(items, 13);
        assert_eq!(
            names.len(),
            state.areas.len() + state.characters.len() + items + 1
        );
        assert!(!names.contains_key("quest_last_oil"));
        assert!(!snap.to_string().contains("note_warden_key"));
        assert!(!snap.to_string().contains("brass key"));
    }

    #[test]
    fn client_frames_parse_or_say_why_not() {
        assert_eq!(
            ClientFrame::parse(r#"{"type":"chat","text":"hi","request_id":"r1","extra":1}"#),
            Ok(ClientFrame::Chat {
                text: "hi".into(),
                request_id: Some("r1".into())
            })
        );
        assert_eq!(
            ClientFrame::parse(r#"{"type":"ping","nonce":42}"#),
            Ok(ClientFrame::Ping { nonce: json!(42) })
        );
        // A decision may name itself, to be told which refusal is its own.
        assert_eq!(
            ClientFrame::parse(
                r#"{"type":"approve","approval_id":"apr_1","decision":"deny","request_id":"d-1"}"#
            ),
            Ok(ClientFrame::Approve {
                approval_id: "apr_1".into(),
                decision: ApproveDecision::Deny,
                reason: None,
                request_id: Some("d-1".into())
            })
        );
        for bad in [
            r#"{"type":"approve","approval_id":"apr_1","decision":"maybe"}"#,
            r#"{"type":"approve","approval_id":"apr_1","decision":"approve","request_id":""}"#,
            &format!(
                r#"{{"type":"approve","approval_id":"apr_1","decision":"deny","reason":"{}"}}"#,
                "x".repeat(MAX_REASON_CHARS + 1)
            ),
            r#"{"type":"approve","approval_id":"apr_1","decision":"deny","reason":"a\u0007b"}"#,
            "",
            "not json",
            "[]",
            "{}",
            r#"{"type":7}"#,
            r#"{"type":"chat"}"#,
            r#"{"type":"chat","text":5}"#,
            r#"{"type":"dance"}"#,
            r#"{"type":"chat","text":"x","request_id":9}"#,
            r#"{"type":"chat","text":"x","request_id":""}"#,
            r#"{"type":"chat","text":"x","request_id":"a\nb"}"#,
        ] {
            assert!(ClientFrame::parse(bad).is_err(), "{bad} should be refused");
        }
        // U+0000 anywhere, in a field that is stored or not, is refused
        // with where it is, never what.
        for (frame, at) in [
            (
                r#"{"type":"chat","text":"look \u0000 around"}"#,
                "\"/text\"",
            ),
            (
                r#"{"type":"chat","text":"x","request_id":"r\u0000"}"#,
                "\"/request_id\"",
            ),
            (
                r#"{"type":"ping","nonce":{"a":["\u0000"]}}"#,
                "\"/nonce/a/0\"",
            ),
            (r#"{"type":"chat","text":"x","e\u0000":1}"#, "top level"),
        ] {
            let err = ClientFrame::parse(frame).err().unwrap_or_default();
            assert!(err.contains(at) && err.contains("U+0000"), "{frame}: {err}");
            assert!(!err.contains('\0'), "{err:?}");
        }
    }

    #[test]
    fn request_ids_have_a_bound() {
        let at_most = "é".repeat(MAX_REQUEST_ID_CHARS);
        let frame = json!({"type": "chat", "text": "x", "request_id": at_most}).to_string();
        assert!(ClientFrame::parse(&frame).is_ok());
        let over = "r".repeat(MAX_REQUEST_ID_CHARS + 1);
        let frame = json!({"type": "chat", "text": "x", "request_id": over}).to_string();
        let err = ClientFrame::parse(&frame).err().unwrap_or_default();
        assert!(err.contains("request_id must be 1 to 128"), "{err}");
    }

    /// Any JSON value, nested a few levels, for the frame parser.
    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,40}".prop_map(Value::from),
            prop_oneof![
                Just("chat"),
                Just("ping"),
                Just("type"),
                Just("request_id"),
                Just("text")
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("type".to_owned()),
                        Just("text".to_owned()),
                        Just("request_id".to_owned()),
                        Just("nonce".to_owned()),
                        ".{0,8}"
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any text is a frame or a reason, never a panic.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,200}") {
            let _ = ClientFrame::parse(&text);
        }

        /// Any JSON is a frame or a reason; an accepted chat's request id is
        /// within its bound.
        #[test]
        fn any_json_parses_or_is_refused(value in any_json()) {
            if let Ok(ClientFrame::Chat { request_id: Some(id), .. }) =
                ClientFrame::parse(&value.to_string())
            {
                proptest::prop_assert!(check_request_id(&id).is_ok());
            }
        }

        /// Whatever reads straight into a frame reads the same through a
        /// value: chat and ping frames with any fields, repeated keys
        /// and values of any kind.
        #[test]
        fn a_frame_read_directly_is_the_frame_read_through_a_value(
            kind in proptest::sample::select(vec!["chat", "ping", "pong", "Chat"]),
            fields in proptest::collection::vec(
                (proptest::sample::select(vec!["text", "request_id", "nonce", "type", "extra"]), any_json()),
                0..5,
            ),
        ) {
            let mut text = format!("{{\"type\":\"{kind}\"");
            for (key, value) in &fields {
                text.push_str(&format!(",\"{key}\":{value}"));
            }
            text.push('}');
            if let Ok(direct) = serde_json::from_str::<ClientFrame>(&text) {
                proptest::prop_assert_eq!(Ok(direct), ClientFrame::read_via_value(&text), "{}", text);
            }
        }

        /// A chat whose text holds U+0000 anywhere is refused.
        #[test]
        fn a_chat_holding_nul_anywhere_is_refused(text in "\\PC{0,50}", at in 0usize..=50) {
            let mut text = text;
            let at = text.char_indices().map(|(i, _)| i).nth(at).unwrap_or(text.len());
            text.insert(at, '\0');
            let frame = json!({"type": "chat", "text": text}).to_string();
            proptest::prop_assert!(ClientFrame::parse(&frame).is_err(), "{}", frame);
        }

        /// A chat frame with any text and request id parses exactly when
        /// the id is within its bound.
        #[test]
        fn chat_frames_parse_when_their_id_is_in_bounds(
            text in "\\PC{0,50}",
            id in proptest::option::of("\\PC{0,160}"),
        ) {
            let frame = json!({"type": "chat", "text": text, "request_id": id}).to_string();
            let parsed = ClientFrame::parse(&frame);
            let id_ok = id.as_deref().is_none_or(|i| check_request_id(i).is_ok());
            proptest::prop_assert_eq!(parsed.is_ok(), id_ok, "{}", frame);
        }
    }

    #[test]
    fn story_frames_carry_type_and_seq() {
        let event = StoryEvent::Presence {
            players: 1,
            spectators: 2,
            seats: Vec::new(),
        };
        let v = serde_json::to_value(StoryFrame {
            seq: 9,
            event: &event,
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"type": "presence", "seq": 9, "players": 1, "spectators": 2, "seats": []})
        );
    }

    /// A turn's end is written as the seq, its `type`, then its fields in
    /// order, as clients have always read it.
    #[test]
    fn turn_end_frames_keep_their_bytes() {
        let event = StoryEvent::TurnFailed(TurnFailed {
            turn_id: "turn_2".into(),
            error_code: ErrorCode::MaxIterations,
            message: "late".into(),
            limit: Some(TurnLimit::Deadline),
        });
        let text = serde_json::to_string(&StoryFrame {
            seq: 7,
            event: &event,
        });
        assert_eq!(
            text.ok().as_deref(),
            Some(
                r#"{"seq":7,"type":"turn_failed","turn_id":"turn_2","error_code":"MAX_ITERATIONS","message":"late","limit":"deadline"}"#
            )
        );
    }
}
