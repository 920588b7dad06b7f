//! Approval of tool calls in a session's core (docs/protocol.md §19).
//!
//! A game master's call that passes every check of the pipeline and that
//! the session's rule asks about is not run: its `tool_call` frame and an
//! `approval_requested` frame (with [`Effect::ApprovalRequested`]: the exact
//! arguments) are journalled, and the turn pauses, its deadline stopped.
//! Chats queue behind it as behind any turn. A decision (the speaker's
//! seat, the host, a key, or the timeout) journals `approval_resolved`
//! ([`Effect::ApprovalResolved`]) and, in the same step, the call's
//! `tool_result`: the call run with the stored arguments on `approve`, or
//! refused with `APPROVAL_DENIED`. The turn then goes on.
//!
//! A decision is taken from the running turn's paused call, in memory, so
//! of two decisions the second finds nothing to take and is refused
//! (`CONFLICT`) even before the first is durable. Everything else is read
//! from the state, which is the fold of the durable journal: a session
//! loaded again (restart, idle unload, failover) whose open turn holds a
//! pending approval is paused again; one whose decision is journalled but
//! whose call's result is not carries the decision out. The timeout is a
//! durable timer: the approval's expiry is in the store's timer index, so
//! the sweeper loads a session nobody runs when it is due.
//!
//! [`Effect::ApprovalRequested`]: crate::game::Effect::ApprovalRequested
//! [`Effect::ApprovalResolved`]: crate::game::Effect::ApprovalResolved

use std::collections::BTreeSet;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{Command, Core};
use crate::error::{ErrorCode, Reason};
use crate::game::approvals::{Approval, Decision, MAX_REASON_CHARS};
use crate::game::{Effect, GameState, HistoryEntry};
use crate::ids::{CallId, SeatId, TurnId};
use crate::protocol::{ApprovalPending, StoryEvent, TurnEnd, TurnOutcome};
use crate::session::calls::{self, Call};
use crate::session::messages::{ChatRefused, Decide, DecisionTaken, PartyCaller};
use crate::session::running::Running;
use crate::session::sequencer::Entry;
use crate::session::turn::Turn;
use crate::session::types::random_token;
use crate::storage::now_ms;
use crate::telemetry;
use crate::tools::{RawArgs, ToolError};

/// Longest approval id looked at: every id questd makes is shorter, and a
/// longer one names nothing.
const MAX_APPROVAL_ID_CHARS: usize = 64;

/// What the open turn of a session loaded from storage was doing.
pub(super) enum OpenTurn {
    /// Paused at this pending approval.
    Paused(Approval),
    /// This decision is journalled but its call's result is not: it is
    /// carried out when the session starts.
    Decided(Approval, Decision),
}

/// What a restored session's open turn `turn_id` was doing, read from its
/// state: paused at an approval, or decided and not yet carried out;
/// `None` for a turn a crash interrupted in any other step.
pub(super) fn open_turn(state: &GameState, turn_id: &TurnId) -> Option<OpenTurn> {
    let book = &state.approvals;
    if let Some(a) = book.pending.iter().find(|a| a.turn_id == *turn_id) {
        return Some(OpenTurn::Paused(a.clone()));
    }
    let last = book.last.as_ref()?;
    let a = &last.approval;
    (a.turn_id == *turn_id && !last.carried_out)
        .then(|| OpenTurn::Decided(a.clone(), last.decision))
}

/// The call ids the turn `turn_id` used, as the state's history holds them.
fn call_ids(state: &GameState, turn_id: &TurnId) -> BTreeSet<CallId> {
    state
        .history
        .iter()
        .filter_map(|e| match &**e {
            HistoryEntry::ToolCall {
                turn_id: t,
                call_id,
                ..
            } if t == turn_id => Some(call_id.clone()),
            _ => None,
        })
        .collect()
}

/// What the model is told of a call that was not approved.
fn denied(decision: Decision, reason: Option<&str>) -> ToolError {
    let why = match decision {
        Decision::Timeout => "nobody decided in time".to_owned(),
        _ => match reason {
            Some(r) if !r.is_empty() => format!("a person denied it: {r}"),
            _ => "a person denied it".to_owned(),
        },
    };
    ToolError::new(
        Reason::PermissionDenied,
        ErrorCode::ApprovalDenied,
        format!("the call was not approved ({why}); it did not run"),
    )
}

/// The `approval_resolved` frame of `decision` on `approval`.
fn resolution(
    approval: &Approval,
    decision: Decision,
    by_seat_id: Option<SeatId>,
    reason: Option<String>,
) -> Entry {
    Entry {
        effect: Some(Effect::ApprovalResolved {
            approval_id: approval.approval_id.clone(),
            decision,
            by_seat_id: by_seat_id.clone(),
            reason: reason.clone(),
        }),
        ..Entry::frame(StoryEvent::ApprovalResolved {
            turn_id: approval.turn_id.clone(),
            call_id: approval.call_id.clone(),
            approval_id: approval.approval_id.clone(),
            decision,
            by_seat_id,
            reason,
        })
    }
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> ChatRefused {
    ChatRefused::new(code, message)
}

impl Core {
    /// A turn whose open call waits for approval, or was decided, taken up
    /// again after the session was loaded: answers whether it was one.
    pub(super) fn restore_open_turn(&mut self, turn_id: &TurnId) -> bool {
        let Some(open) = open_turn(&self.state, turn_id) else {
            return false;
        };
        let approval = match &open {
            OpenTurn::Paused(a) | OpenTurn::Decided(a, _) => a,
        };
        let turn_no = self.state.turn;
        let max_iterations = self.deps.limits.max_iterations;
        let ids = call_ids(&self.state, turn_id);
        let turn = Turn::restored(
            turn_id.clone(),
            turn_no,
            max_iterations,
            approval.iteration,
            ids,
        );
        let acting = approval.acting.clone();
        let seat = approval.seat_id.clone();
        // Its caller's trace context was not kept: a root span.
        let span = telemetry::turn_span(&self.session_id, turn_id, turn.trace_id(), None);
        let mut running = Running::new(turn, acting, seat, Instant::now(), span);
        running.awaiting = Some(approval.clone());
        running.awaiting_seq = self.sequencer.released();
        self.turn = Some(Box::new(running));
        self.decided_on_load = match open {
            OpenTurn::Decided(a, decision) => Some(Box::new((a, decision))),
            OpenTurn::Paused(_) => None,
        };
        true
    }

    /// The session started with a restored open turn: a decision taken
    /// before the crash is carried out, an approval that expired meanwhile
    /// times out, and one still pending has its wake-up set.
    pub(super) fn start_open_turn(&mut self) {
        if let Some((approval, decision)) = self.decided_on_load.take().map(|d| *d) {
            if let Some(t) = self.turn.as_mut() {
                t.awaiting = None;
                t.turn.approval_decided();
            }
            self.out.push_back(Command::Deadline(
                approval.turn_id.clone(),
                self.deps.limits.turn_deadline,
            ));
            self.carry_out(approval, decision, None);
            self.advance();
            return;
        }
        self.expire_approvals();
    }

    /// The running turn's call `call` waits for a person if the session's
    /// rule asks about it: answers whether it does. Its `tool_call` frame
    /// and the `approval_requested` frame are journalled, and the turn
    /// pauses.
    pub(super) fn ask_approval(&mut self, call: &Call) -> bool {
        let Some((call_frame, args)) = calls::asks_approval(&self.view(), call) else {
            return false;
        };
        let Some(rule) = self.state.approvals.rule.as_ref() else {
            return false;
        };
        let now = now_ms();
        let seat = self.turn.as_ref().and_then(|t| t.seat.clone());
        let approval = Approval {
            approval_id: format!("apr_{}", random_token(20)),
            turn_id: call.turn_id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            args,
            seat_id: seat,
            acting: call.acting.clone(),
            iteration: call.iteration,
            requested_at: now,
            expires_at: now.saturating_add(i64::from(rule.timeout_s) * 1000),
        };
        self.emit(call_frame);
        let requested = Entry {
            effect: Some(Effect::ApprovalRequested {
                approval: approval.clone(),
            }),
            ..Entry::frame(StoryEvent::ApprovalRequested(ApprovalPending::of(
                &approval,
            )))
        };
        let seq = self.emit(requested);
        tracing::info!(session_id = %self.session_id, approval_id = %approval.approval_id, tool = %approval.tool, "a call waits for approval");
        self.deps.metrics.approvals_requested.inc();
        let expires_at = approval.expires_at;
        if let Some(t) = self.turn.as_mut()
            && let Some(timer) = t.pause(approval, seq)
        {
            self.out.push_back(Command::Cancel(vec![timer]));
        }
        self.wake_at(expires_at, now);
        true
    }

    /// A person's decision on an approval: answered once its
    /// `approval_resolved` is durable. Refused (and nothing runs) for an
    /// unknown id (`NOT_FOUND`), one already decided (`CONFLICT`), or a
    /// seat that is neither the speaker's nor the host (`FORBIDDEN`).
    pub(in crate::session) fn decide(
        &mut self,
        msg: Decide,
        storage_refusing: Option<&'static str>,
    ) -> Result<oneshot::Receiver<DecisionTaken>, ChatRefused> {
        self.party_open(storage_refusing)?;
        if let Some(r) = &msg.reason
            && (r.chars().count() > MAX_REASON_CHARS || r.chars().any(char::is_control))
        {
            return Err(refuse(
                ErrorCode::BadRequest,
                format!(
                    "reason is at most {MAX_REASON_CHARS} characters, without control characters"
                ),
            ));
        }
        let id = msg.approval_id.as_str();
        let awaiting = self
            .turn
            .as_ref()
            .and_then(|t| t.awaiting.as_ref())
            .filter(|a| a.approval_id == id && id.chars().count() <= MAX_APPROVAL_ID_CHARS);
        let Some(approval) = awaiting else {
            let book = &self.state.approvals;
            // Pending in the state but no longer awaited: decided, and the
            // decision is on its way to the journal.
            if book.pending(id).is_some() || book.was_resolved(id) {
                return Err(refuse(
                    ErrorCode::Conflict,
                    "this approval was already decided",
                ));
            }
            return Err(refuse(
                ErrorCode::NotFound,
                "no such pending approval in this session",
            ));
        };
        let by_seat = match &msg.by {
            PartyCaller::Key => None,
            PartyCaller::Seat(seat) => {
                self.seat_may_speak(seat)?;
                let host = self.state.party.host().is_some_and(|h| h.seat_id == *seat);
                if !host && approval.seat_id.as_ref() != Some(seat) {
                    return Err(refuse(
                        ErrorCode::Forbidden,
                        "only the seat whose turn it is, or the host, may decide",
                    ));
                }
                Some(seat.clone())
            }
        };
        let Some(approval) = self.take_awaiting() else {
            return Err(ChatRefused::reloading());
        };
        let decision = Decision::from(msg.decision);
        Ok(self.resolve(approval, decision, by_seat, msg.reason))
    }

    /// Times out every approval of the running turn whose time is up, and
    /// sets the wake-up for one still pending.
    pub(super) fn expire_approvals(&mut self) {
        let now = now_ms();
        let due = self
            .turn
            .as_ref()
            .and_then(|t| t.awaiting.as_ref())
            .map(|a| a.expires_at);
        match due {
            Some(at) if at <= now && !self.lifecycle.refuses_work() => {
                if let Some(approval) = self.take_awaiting() {
                    tracing::info!(session_id = %self.session_id, approval_id = %approval.approval_id, "an approval timed out");
                    drop(self.resolve(approval, Decision::Timeout, None, None));
                }
            }
            Some(at) => self.wake_at(at, now),
            None => {}
        }
    }

    /// The paused call, taken for a decision: the turn runs on.
    fn take_awaiting(&mut self) -> Option<Approval> {
        let t = self.turn.as_mut()?;
        let approval = t.awaiting.take()?;
        t.turn.approval_decided();
        let turn_id = t.turn.turn_id().clone();
        let deadline = self.deps.limits.turn_deadline;
        self.out.push_back(Command::Deadline(turn_id, deadline));
        Some(approval)
    }

    /// The running turn ends while its call waits (it failed, or the
    /// session closed): the approval is closed as denied, and the call's
    /// refusal journalled, so no approval outlives its turn.
    pub(super) fn close_awaiting(&mut self) {
        let Some(approval) = self.turn.as_mut().and_then(|t| t.awaiting.take()) else {
            return;
        };
        let reason = Some("the turn ended".to_owned());
        let resolved = resolution(&approval, Decision::Deny, None, reason.clone());
        self.emit(resolved);
        self.carry_out(approval, Decision::Deny, reason.as_deref());
    }

    /// Journals the decision on `approval` and carries it out in the same
    /// step; answers a receiver told once the decision is durable.
    fn resolve(
        &mut self,
        approval: Approval,
        decision: Decision,
        by_seat_id: Option<SeatId>,
        reason: Option<String>,
    ) -> oneshot::Receiver<DecisionTaken> {
        let resolved = resolution(&approval, decision, by_seat_id.clone(), reason.clone());
        let taken = DecisionTaken {
            approval_id: approval.approval_id.clone(),
            turn_id: approval.turn_id.clone(),
            decision,
            by_seat_id,
        };
        let (_, answer) = self.answer_when_durable(resolved, taken);
        self.deps.metrics.approval_decided(decision);
        self.touch();
        self.carry_out(approval, decision, reason.as_deref());
        self.advance();
        answer
    }

    /// Runs the decided call with exactly its stored arguments, or refuses
    /// it with `APPROVAL_DENIED`; its `tool_result` goes to the journal and
    /// the model hears it as any call's.
    fn carry_out(&mut self, approval: Approval, decision: Decision, reason: Option<&str>) {
        let Some(t) = self.turn.as_ref() else { return };
        if *t.turn.turn_id() != approval.turn_id {
            return;
        }
        let refused = (decision != Decision::Approve).then(|| denied(decision, reason));
        let mut call = Call::of_turn(
            &t.turn,
            &approval.acting,
            approval.call_id,
            approval.tool,
            RawArgs::Value(approval.args),
            refused,
        );
        call.iteration = approval.iteration;
        self.run_decided_call(call);
    }

    /// A caller waiting for the running turn `turn_id`'s end, while it is
    /// paused and its request is durable: told at once that it waits for a
    /// decision. (Before that, the request's frame tells it once durable.)
    pub(super) fn paused_answer(&self, turn_id: &TurnId) -> Option<TurnEnd> {
        let t = self.turn.as_ref()?;
        let approval = t.awaiting.as_ref()?;
        let durable = t.awaiting_seq <= self.sequencer.released();
        (t.turn.turn_id() == turn_id && durable).then(|| TurnEnd {
            seq: t.awaiting_seq,
            outcome: TurnOutcome::ApprovalRequested(ApprovalPending::of(approval)),
        })
    }
}

#[cfg(test)]
mod tests {
    //! The pause and the decisions, fed as the actor feeds the core: the
    //! frames a player would see, and what the journal holds.

    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::super::tests::core;
    use super::*;
    use crate::game::approvals::ApprovalRule;
    use crate::llm::{ModelEvent, ModelReply, ModelToolCall};
    use crate::protocol::ApproveDecision;
    use crate::session::SubmitChat;
    use crate::storage::SessionWrite;

    /// Every frame journalled so far, as JSON, made durable.
    fn frames(core: &mut Core) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(c) = core.next_command() {
            if let Command::FlushLater = c {
                for w in core.take_writes() {
                    if let SessionWrite::Row(row) = w {
                        out.push(serde_json::from_str(&row.frame).unwrap());
                    }
                }
            }
            if let Command::Write(ws) = c {
                for w in ws {
                    if let SessionWrite::Row(row) = w {
                        out.push(serde_json::from_str(&row.frame).unwrap());
                    }
                }
            }
        }
        for w in core.take_writes() {
            if let SessionWrite::Row(row) = w {
                out.push(serde_json::from_str(&row.frame).unwrap());
            }
        }
        let up_to = core.sequencer.last_staged();
        core.durable(up_to);
        core.advance();
        while core.next_command().is_some() {}
        out
    }

    fn types(frames: &[Value]) -> Vec<&str> {
        frames.iter().map(|f| f["type"].as_str().unwrap()).collect()
    }

    /// A session whose rule asks about `hp_delta`, with a turn whose model
    /// asked for one: paused.
    fn paused() -> (Core, String, Vec<Value>) {
        let mut core = pausing();
        let f = frames(&mut core);
        let id = f
            .iter()
            .find(|f| f["type"] == "approval_requested")
            .expect("a request")["approval_id"]
            .as_str()
            .unwrap()
            .to_owned();
        (core, id, f)
    }

    /// As [`paused`], the pause not yet durable: its frames are staged.
    fn pausing() -> Core {
        let mut core = core();
        core.state.approvals.rule = Some(Box::new(ApprovalRule {
            tools: vec!["hp_delta".into()],
            timeout_s: 60,
            lethal_only: false,
        }));
        core.submit_chat(
            SubmitChat {
                text: "hit me".into(),
                request_id: None,
                seat_id: "seat_1".into(),
                conn_id: None,
                trace_id: None,
                traceparent: None,
            },
            None,
        )
        .unwrap();
        frames(&mut core);
        let hero = core.state.active_actor_id.to_string();
        let tag = core.model_calls;
        core.model_event(
            tag,
            Some(Ok(ModelEvent::Done(ModelReply {
                tool_calls: vec![ModelToolCall {
                    id: "call_a".into(),
                    name: "hp_delta".into(),
                    arguments: json!({"target_character_id": hero, "delta": -1}).to_string(),
                }],
                ..ModelReply::default()
            }))),
        );
        core
    }

    /// Whether the commands the core answers now close its connections
    /// for a reconnect elsewhere and unload it.
    fn closes_and_unloads(core: &mut Core) -> bool {
        let (mut closes, mut leaves) = (false, false);
        while let Some(c) = core.next_command() {
            match c {
                Command::CloseAll(code, _) => closes |= code == 1012,
                Command::LeaveWhenWritten
                | Command::Snapshot(_, crate::session::core::AfterSnapshot::Leave) => {
                    leaves = true;
                }
                _ => {}
            }
        }
        closes && leaves
    }

    #[test]
    fn a_drain_while_the_pause_is_written_unloads_once_it_is_durable() {
        let mut core = pausing();
        core.drain();
        assert!(
            !closes_and_unloads(&mut core),
            "the pause is not durable yet"
        );
        let up_to = core.sequencer.last_staged();
        core.durable(up_to);
        core.advance();
        assert!(
            closes_and_unloads(&mut core),
            "the paused turn waits in the journal; the session moves on"
        );
    }

    #[test]
    fn a_drain_of_a_paused_session_unloads_at_once() {
        let (mut core, _, _) = paused();
        core.drain();
        assert!(closes_and_unloads(&mut core));
    }

    fn decide(
        core: &mut Core,
        id: &str,
        by: PartyCaller,
        d: ApproveDecision,
    ) -> Result<(), ErrorCode> {
        core.decide(
            Decide {
                approval_id: id.into(),
                decision: d,
                reason: None,
                by,
            },
            None,
        )
        .map(|_| ())
        .map_err(|r| r.code)
    }

    #[test]
    fn a_call_that_asks_pauses_the_turn_and_nothing_runs() {
        let (core, id, f) = paused();
        assert_eq!(types(&f), ["tool_call", "approval_requested"]);
        assert_eq!(f[1]["tool"], "hp_delta");
        assert_eq!(f[1]["args"]["delta"], -1);
        assert_eq!(f[1]["seat_id"], "seat_1");
        assert_eq!(core.state.approvals.pending.len(), 1);
        assert_eq!(core.state.approvals.pending[0].approval_id, id);
        let hero = core
            .state
            .character(core.state.active_actor_id.as_str())
            .unwrap();
        assert_eq!(hero.hp, hero.max_hp, "the blow waits");
    }

    #[test]
    fn approve_runs_the_call_once_and_a_second_decision_is_refused() {
        let (mut core, id, _) = paused();
        let hp = core
            .state
            .character(core.state.active_actor_id.as_str())
            .unwrap()
            .hp;
        decide(
            &mut core,
            &id,
            PartyCaller::Seat("seat_1".into()),
            ApproveDecision::Approve,
        )
        .unwrap();
        let again = decide(&mut core, &id, PartyCaller::Key, ApproveDecision::Deny);
        assert_eq!(
            again,
            Err(ErrorCode::Conflict),
            "before the first is durable"
        );
        let f = frames(&mut core);
        assert_eq!(&types(&f)[..2], ["approval_resolved", "tool_result"]);
        assert_eq!(f[0]["decision"], "approve");
        assert_eq!(f[1]["status"], "ok");
        let after = core
            .state
            .character(core.state.active_actor_id.as_str())
            .unwrap()
            .hp;
        assert_eq!(after, hp - 1);
        let again = decide(&mut core, &id, PartyCaller::Key, ApproveDecision::Deny);
        assert_eq!(again, Err(ErrorCode::Conflict), "after it too");
        assert_eq!(
            decide(
                &mut core,
                "apr_nope",
                PartyCaller::Key,
                ApproveDecision::Deny
            ),
            Err(ErrorCode::NotFound)
        );
    }

    #[test]
    fn deny_tells_the_model_approval_denied_and_the_turn_goes_on() {
        let (mut core, id, _) = paused();
        decide(&mut core, &id, PartyCaller::Key, ApproveDecision::Deny).unwrap();
        let f = frames(&mut core);
        assert_eq!(&types(&f)[..2], ["approval_resolved", "tool_result"]);
        assert_eq!(f[0]["by_seat_id"], Value::Null);
        assert_eq!(f[1]["status"], "rejected");
        assert_eq!(f[1]["error_code"], "APPROVAL_DENIED");
        assert!(core.state.approvals.pending.is_empty());
        // The model is asked again, the turn still running.
        assert!(core.turn.is_some());
        assert!(core.awaits(core.model_calls));
    }

    #[test]
    fn closing_the_session_ends_a_paused_turn_and_its_approval() {
        let (mut core, id, _) = paused();
        let at = core.close().unwrap();
        core.close_stored(at, Ok(())).unwrap();
        let f = frames(&mut core);
        assert_eq!(
            types(&f),
            ["approval_resolved", "tool_result", "turn_failed"],
            "{f:?}"
        );
        assert_eq!(f[0]["approval_id"], id.as_str());
        assert_eq!(f[0]["decision"], "deny");
        assert_eq!(f[1]["error_code"], "APPROVAL_DENIED");
        assert_eq!(f[2]["error_code"], "SESSION_CLOSED");
        assert!(core.state.approvals.pending.is_empty());
    }

    #[test]
    fn only_the_speaker_or_the_host_decides() {
        let (mut core, id, _) = paused();
        let other = decide(
            &mut core,
            &id,
            PartyCaller::Seat("seat_9".into()),
            ApproveDecision::Approve,
        );
        assert!(matches!(
            other,
            Err(ErrorCode::Forbidden | ErrorCode::NotFound)
        ));
        assert_eq!(core.state.approvals.pending.len(), 1, "nothing decided");
    }

    #[test]
    fn a_restored_session_is_paused_again_and_a_journalled_decision_is_carried_out() {
        let (core, id, _) = paused();
        let turn_id = core.state.approvals.pending[0].turn_id.clone();
        let state = core.state.clone();
        match open_turn(&state, &turn_id) {
            Some(OpenTurn::Paused(a)) => assert_eq!(a.approval_id, id),
            _ => panic!("paused"),
        }
        let mut decided = state.clone();
        decided.apply(&Effect::ApprovalResolved {
            approval_id: id.clone(),
            decision: Decision::Approve,
            by_seat_id: None,
            reason: None,
        });
        assert!(matches!(
            open_turn(&decided, &turn_id),
            Some(OpenTurn::Decided(_, Decision::Approve))
        ));
        assert!(open_turn(&decided, &"turn_99".into()).is_none());
        // Its result journalled (however much history follows it in the
        // turn), the decision is never carried out again.
        let call_id = state.approvals.pending[0].call_id.clone();
        decided.record(Arc::new(HistoryEntry::ToolResult {
            turn_id: turn_id.clone(),
            call_id,
            tool: "hp_delta".into(),
            content: "{}".into(),
        }));
        decided.history.clear();
        assert!(open_turn(&decided, &turn_id).is_none());
    }
}
