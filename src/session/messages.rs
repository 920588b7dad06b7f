//! The messages a session answers, and their answers: what the rest of
//! questd (WebSocket connections, HTTP routes, the hub) may ask of a
//! [`super::SessionActor`].
//!
//! They are apart from the actor so that its callers read the session's
//! contract without its workings, and so the parts the actor wires can name
//! these types (a refusal, a direct call and its reply) without importing
//! the actor.

use std::sync::Arc;

use actix::prelude::*;
use bytestring::ByteString;
use serde_json::Value;
use serde_json::value::RawValue;

use super::audit::CallOrigin;
use super::lanes::Sink;
use super::seats::SeatSet;
use super::sequencer::Backlog;
use super::types::{MAX_RESUME_BYTES, Outbox};
use crate::error::ErrorCode;
use crate::game::GameState;
use crate::game::party::TurnMode;
use crate::game::state::CharacterId;
use crate::ids::{CallId, NodeId, RequestId, SeatId, SessionId, TraceId, TurnId};
use crate::json::Written;
use crate::protocol::{ConnRole, ControlFrame, Snapshot, ToolEvent, TurnEnd};
use crate::telemetry::TraceParent;
use crate::tools::{Role, ToolError};

/// Asks to start a turn with a player's message; answers the ack or why not.
#[derive(Debug, Message)]
#[rtype(result = "Result<ChatAccepted, ChatRefused>")]
pub struct SubmitChat {
    pub text: String,
    pub request_id: Option<RequestId>,
    /// The seat that speaks (docs/protocol.md §8): the turn acts for its
    /// character.
    pub seat_id: SeatId,
    /// The WebSocket connection that sent it, if one did: the session puts
    /// the `ack` on that connection's queue itself, ahead of every frame of
    /// the turn (docs/protocol.md §2.5), and says so in [`ChatAccepted::acked`].
    pub conn_id: Option<u64>,
    /// The trace the turn's audit rows carry (`X-Trace-ID` on
    /// `/api/v1/chat`); a fresh one when `None`.
    pub trace_id: Option<TraceId>,
    /// The caller's W3C `traceparent` (on the request, or the WebSocket's
    /// upgrade): the parent of the turn's span (docs/protocol.md §12).
    pub traceparent: Option<TraceParent>,
}

/// A chat that was taken (or recognised as a duplicate).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAccepted {
    pub turn_id: TurnId,
    pub duplicate: bool,
    /// Turns ahead of this one.
    pub queued: usize,
    /// The session already put the `ack` on the sending connection's queue
    /// ([`SubmitChat::conn_id`]); the connection must not send another.
    pub acked: bool,
    /// In rounds mode: the chat was taken as a seat's action for a round.
    /// `turn_id` then names the action, not a turn.
    pub action: Option<ActionTaken>,
}

/// A chat taken as a seat's action for a round (rounds mode).
#[derive(Debug, Clone, PartialEq)]
pub struct ActionTaken {
    pub round: u64,
    pub seat_id: SeatId,
    /// Its `action_submitted` frame (for a duplicate, the last frame staged
    /// when it came): durable once [`AwaitDurable`] of it answers.
    pub seq: u64,
}

/// Answers once the story frame `seq` is durable (a round's action taken
/// over HTTP is answered only then, as an `ack` is).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), ChatRefused>")]
pub struct AwaitDurable {
    pub seq: u64,
}

impl ChatAccepted {
    /// The `ack` frame that tells the sending connection, as JSON.
    pub fn ack(&self, request_id: Option<RequestId>) -> String {
        ControlFrame::Ack {
            request_id,
            turn_id: self.turn_id.clone(),
            duplicate: self.duplicate,
            queued: self.queued,
            round: self.action.as_ref().map(|a| a.round),
        }
        .to_json()
    }
}

/// A line of table talk from a player's seat (`say`): journalled as
/// `party_chat` for everyone, never for the model.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), ChatRefused>")]
pub struct Say {
    pub seat_id: SeatId,
    pub text: String,
    pub request_id: Option<RequestId>,
}

/// Runs one tool call outside a model turn (a person or a service calling),
/// queued behind the work ahead of it; answers once its result is durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<DirectCallDone, ChatRefused>")]
pub struct CallTool {
    pub tool: String,
    pub args: Value,
    /// The hash of `args` ([`crate::tools::args_hash`]) when the caller
    /// took it already, for the audit row to reuse.
    pub args_hash: Option<String>,
    pub role: Role,
    pub trace_id: TraceId,
    pub origin: CallOrigin,
}

/// A direct call's outcome, durable when it is answered.
#[derive(Debug)]
pub struct DirectCallDone {
    pub turn_id: TurnId,
    pub call_id: CallId,
    /// The seq of its `tool_result` frame.
    pub seq: u64,
    pub event: ToolEvent,
    /// The result with the text its `tool_result` frame carries.
    pub outcome: Result<Written, ToolError>,
}

/// A decision on a pending approval (docs/protocol.md §19); answered once
/// its `approval_resolved` frame is durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<DecisionTaken, ChatRefused>")]
pub struct Decide {
    pub approval_id: String,
    pub decision: crate::protocol::ApproveDecision,
    pub reason: Option<String>,
    /// The seat deciding, or a key (which decides as the host would).
    pub by: PartyCaller,
}

/// A decision taken and durable.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionTaken {
    pub approval_id: String,
    pub turn_id: TurnId,
    pub decision: crate::game::approvals::Decision,
    pub by_seat_id: Option<SeatId>,
}

/// Waits for a turn's last frame (`turn_completed` or `turn_failed`) and
/// answers it once durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<TurnEnd, ChatRefused>")]
pub struct AwaitTurnEnd {
    pub turn_id: TurnId,
}

/// Adds a connection; answers its welcome frame and any resumed backlog.
#[derive(Message)]
#[rtype(result = "Result<Joined, ChatRefused>")]
pub struct Subscribe {
    pub conn_id: u64,
    pub role: ConnRole,
    /// A player's seat: the welcome names it and its character, presence
    /// counts it online.
    pub seat_id: Option<SeatId>,
    pub last_seq: Option<u64>,
    /// Where its messages go.
    pub sink: Sink,
    /// What the connection has queued and not taken; the session marks it
    /// overflowed when it falls too far behind.
    pub outbox: Arc<Outbox>,
}

/// The frames a new connection sends first.
pub struct Joined {
    pub welcome: ByteString,
    pub backlog: Vec<ByteString>,
}

impl Joined {
    /// The welcome of a `role` connection to a session in `state`, and the
    /// frames `backlog` says it missed; the state's JSON comes from
    /// `cache` when joins at the same seq, with the same seats online,
    /// already serialized it.
    pub(super) fn new(
        session_id: &SessionId,
        role: ConnRole,
        seat_id: Option<&SeatId>,
        (state, online): (&GameState, &SeatSet),
        backlog: Backlog,
        cache: &mut WelcomeState,
    ) -> Self {
        let seat = seat_id.and_then(|id| state.party.seat(id.as_str()));
        let seq = backlog.welcome_seq;
        let joined = cache.with_json(seq, session_id, state, online, |json| {
            let welcome = |backlog: &Backlog| {
                ControlFrame::Welcome {
                    session_id,
                    role,
                    seq: backlog.welcome_seq,
                    resumed: backlog.resumed,
                    seat_id: seat.map(|s| &s.seat_id),
                    character_id: seat.map(|s| &s.character_id),
                    state: json,
                }
                .to_json()
            };
            let mut first = welcome(&backlog);
            // The welcome counts toward what one join may hold: past the
            // bound the connection starts afresh from the snapshot, as a
            // resume past the journal's bound does.
            let resumed = backlog.resumed;
            let backlog = backlog.within(first.len(), MAX_RESUME_BYTES);
            if resumed && !backlog.resumed {
                first = welcome(&backlog);
            }
            Self {
                welcome: first.into(),
                backlog: backlog.frames,
            }
        });
        joined.unwrap_or_else(|| Self {
            welcome: ControlFrame::internal_error_json().into(),
            backlog: Vec::new(),
        })
    }
}

/// The session's state as a `welcome` carries it, serialized once per
/// released seq and set of seats online for a crowd joining between two
/// frames, not once per connection.
///
/// The state changes only as frames are released, each with a new seq,
/// and its seats' `online` only with the seats online, so the two name
/// what was serialized. The JSON is kept only from the second join at
/// the same seq and seats (a session that one player joins holds no copy
/// of its state), and the session forgets it when it releases frames and
/// at its periodic check, so an idle session holds none for long.
#[derive(Default)]
pub(super) struct WelcomeState(Option<Box<Welcomed>>);

/// The last join, boxed: every session holds a [`WelcomeState`], and it
/// holds this only between a join and the next frames released.
struct Welcomed {
    /// The seq and seats of the last join.
    seq: u64,
    online: SeatSet,
    /// Their state's JSON, once a second join came at them.
    json: Option<Box<RawValue>>,
}

impl WelcomeState {
    /// Answers `then` of the JSON of `state`'s snapshot at `seq` with
    /// `online`'s seats online; `None` if it does not serialize.
    fn with_json<R>(
        &mut self,
        seq: u64,
        session_id: &SessionId,
        state: &GameState,
        online: &SeatSet,
        then: impl FnOnce(&RawValue) -> R,
    ) -> Option<R> {
        let last = self
            .0
            .as_mut()
            .filter(|w| w.seq == seq && w.online == *online);
        if let Some(json) = last.as_ref().and_then(|w| w.json.as_deref()) {
            return Some(then(json));
        }
        let snapshot = Snapshot::of(session_id, state).online(|s| online.contains(s));
        let json = serde_json::value::to_raw_value(&snapshot).ok()?;
        let answer = then(&json);
        match last {
            Some(again) => again.json = Some(json),
            None => {
                self.0 = Some(Box::new(Welcomed {
                    seq,
                    online: online.clone(),
                    json: None,
                }))
            }
        }
        Some(answer)
    }

    /// Drops what is kept: frames were released, or the session's
    /// periodic check came.
    pub(super) fn forget(&mut self) {
        self.0 = None;
    }

    /// Whether the state's JSON is kept now.
    #[cfg(test)]
    pub(super) fn holds(&self) -> bool {
        self.0.as_ref().is_some_and(|w| w.json.is_some())
    }
}

/// Another node's tail of this session serves `spectators` of it: counted
/// in `presence` until the report runs out (three times
/// [`super::tail::AUDIENCE_REFRESH`]) or says 0.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RemoteAudience {
    pub node_id: NodeId,
    pub spectators: usize,
}

/// Removes a connection.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Unsubscribe {
    pub conn_id: u64,
}

/// Asks for the session snapshot as JSON text (refused only while the
/// session stops, so the caller reads the next actor's).
#[derive(Debug, Message)]
#[rtype(result = "Result<String, ChatRefused>")]
pub struct GetSnapshot;

/// Who uses a party power: a seat (refused unless it holds the host role
/// now) or a key of the session's tenant, which acts as the host (how a
/// session whose host never comes back gets a new one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartyCaller {
    Seat(SeatId),
    Key,
}

/// The host makes an invite; answers its code once the invite is durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<InviteMade, ChatRefused>")]
pub struct CreateInvite {
    pub by: PartyCaller,
    pub max_uses: u32,
    /// From now; bounded by the caller.
    pub expires_in_s: u32,
}

/// An invite made: its code (said once, stored only as a digest).
#[derive(Debug, Clone)]
pub struct InviteMade {
    pub code: String,
    /// ms since the epoch.
    pub expires_at: i64,
}

/// Someone joins by invite under `name`; answers their seat once it is
/// durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<SeatGiven, ChatRefused>")]
pub struct JoinParty {
    pub invite_code: String,
    pub name: String,
    /// The node's cap on seats (`QUESTD_MAX_PLAYERS`), over the
    /// campaign's `party.max_players`.
    pub max_players: u32,
}

/// A seat taken: its token is said once, to the one who joined.
#[derive(Debug, Clone)]
pub struct SeatGiven {
    pub seat_id: SeatId,
    pub character_id: CharacterId,
    pub player_token: String,
}

/// A host power, or a seat's own leaving.
#[derive(Debug, Clone, PartialEq)]
pub enum HostPower {
    /// Removes a seat: its connections close with 4001, its token is
    /// refused for good; its character stays in the world.
    Kick(SeatId),
    /// A seat leaves the table, by its own token (or a key): as a kick,
    /// with the state `left`. Not the host's seat.
    Leave(SeatId),
    /// Hands the host role to a seat; the old host becomes a player.
    MakeHost(SeatId),
    /// Switches the turn mode.
    Mode {
        turn_mode: TurnMode,
        round_timeout_s: u32,
    },
}

/// Uses a host power; answers once its frames are durable.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), ChatRefused>")]
pub struct UseHostPower {
    pub by: PartyCaller,
    pub power: HostPower,
}

/// Asks for the seat list (`GET …/seats`) as JSON text.
#[derive(Debug, Message)]
#[rtype(result = "Result<String, ChatRefused>")]
pub struct GetSeats;

/// A chat (or a stateless model call) refused while a token budget is
/// spent: `BUDGET_EXCEEDED` until the day's end.
impl From<crate::budget::Exceeded> for ChatRefused {
    fn from(e: crate::budget::Exceeded) -> Self {
        Self::new(ErrorCode::BudgetExceeded, e.message()).with_retry_after(e.retry_after_ms)
    }
}

/// A chat that was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRefused {
    pub code: ErrorCode,
    pub message: String,
    pub retry_after_ms: Option<u64>,
    /// The session is stopping (unloading, or failed): look it up again
    /// and the next actor takes the work. Told apart by this, not by its
    /// code, which clients see as `INTERNAL_ERROR`.
    reloading: bool,
}

impl ChatRefused {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after_ms: None,
            reloading: false,
        }
    }

    /// The same refusal, telling the caller to try again in `ms`.
    pub fn with_retry_after(self, ms: u64) -> Self {
        Self {
            retry_after_ms: Some(ms),
            ..self
        }
    }

    /// The session is stopping; the caller should look it up again.
    pub fn reloading() -> Self {
        Self {
            reloading: true,
            ..Self::new(
                ErrorCode::InternalError,
                "the session is reloading; try again",
            )
        }
    }

    /// The node is restarting (a drain): the session takes nothing new
    /// here, and the caller tries again, reaching the session's next node
    /// (`503 OVERLOADED` over HTTP). Like [`ChatRefused::reloading`], a
    /// route looks the session up again first.
    pub fn restarting() -> Self {
        Self {
            reloading: true,
            retry_after_ms: Some(1000),
            ..Self::new(ErrorCode::Overloaded, "this node is restarting; try again")
        }
    }

    /// An operator closed the session: it takes nothing new.
    pub fn closed() -> Self {
        Self::new(ErrorCode::SessionClosed, super::types::CLOSED_BY_OPERATOR)
    }

    /// A caller waited for a turn's end, and the session stopped before it
    /// could answer (or could not read it back).
    pub(super) fn turn_lost() -> Self {
        Self::new(
            ErrorCode::InternalError,
            "the session stopped before the turn ended; its progress is kept",
        )
    }

    /// A direct call was taken, and the session stopped before its result
    /// was durable.
    pub(super) fn call_lost() -> Self {
        Self::new(
            ErrorCode::InternalError,
            "the session stopped before the call was durable; retry",
        )
    }

    /// Whether looking the session up again may succeed.
    pub fn is_reloading(&self) -> bool {
        self.reloading
    }
}

/// This node lost its claim on the session: stop at once, writing nothing
/// more (the database would refuse it anyway).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct LeaseLost;

/// An operator closes the session for good: nothing new is taken from now
/// on; the work taken (the running turn and the chats acknowledged behind
/// it) finishes, then every connection is closed with 4000 and the session
/// unloads and is never loaded again. Answers when the close is durable,
/// with its time (ms since the epoch).
#[derive(Debug, Message)]
#[rtype(result = "Result<i64, ChatRefused>")]
pub struct CloseSession;

/// The node is shutting down: finish the work taken (the running turn and
/// the queue), then close every connection with 1012 and unload, so
/// clients resume on another node.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Drain;
