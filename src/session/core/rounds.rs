//! Rounds mode of a session's core (docs/protocol.md §8): a seat's chat is
//! its action for the round, journalled as `action_submitted` (the text
//! rides only in the effect); when every active seat that is online has
//! acted, or `round_timeout_s` after the round's first action, one turn
//! runs with all of them. Also the table talk a seat says (`party_chat`),
//! which never reaches the model.
//!
//! The round's turn is begun by one journalled frame, `turn_started` with
//! the round and every action and the effect [`Effect::BeginRound`]: a
//! crash before it is durable leaves the round as it was (resolved after
//! the restart), one after it leaves the next round begun (never resolved
//! again). The deadline is read from the state (`round.first_at`), so a
//! restarted session sets its timer again from the journal.

use std::time::Duration;

use bytestring::ByteString;

use super::{Command, Core};
use crate::error::ErrorCode;
use crate::game::Effect;
use crate::game::party::{RoundAction, TurnMode};
use crate::game::state::CharacterId;
use crate::ids::{RequestId, SeatId, TraceId, TurnId};
use crate::protocol::{RoundActionView, StoryEvent};
use crate::session::messages::{ActionTaken, ChatAccepted, ChatRefused, SubmitChat};
use crate::session::sequencer::Entry;
use crate::session::turn_frames;
use crate::storage::now_ms;

// The id a round's action is acknowledged with (the store reads a
// resolved round's back by the same rule).
pub(super) use crate::game::party::action_id;

impl Core {
    /// Whether chats are actions for a round now.
    pub(super) fn in_rounds(&self) -> bool {
        self.state.party.turn_mode == TurnMode::Rounds
    }

    /// The round a new action belongs to: the state's, or the next one
    /// when the state's is being resolved (its turn's start not yet
    /// durable).
    fn open_round(&self) -> u64 {
        let round = self.state.party.round.number;
        if self.resolving.is_some_and(|r| r >= round) {
            round + 1
        } else {
            round
        }
    }

    /// Takes a seat's chat as its action for the round (rounds mode), or
    /// says why not. The ack (with `round`) goes out right ahead of the
    /// durable `action_submitted` frame; a request id taken already is
    /// answered as a duplicate of that action.
    pub(super) fn submit_action(
        &mut self,
        msg: SubmitChat,
        storage_refusing: Option<&'static str>,
    ) -> Result<ChatAccepted, ChatRefused> {
        self.lifecycle.refuse_if_closed()?;
        let Some(seat) = self.state.party.seat(msg.seat_id.as_str()) else {
            return Err(ChatRefused::new(ErrorCode::Forbidden, "no such seat"));
        };
        let character_id = seat.character_id.clone();
        let round = self.open_round();
        let admitted = self.intake.take_action(
            &msg.text,
            msg.request_id.as_deref(),
            &msg.seat_id,
            self.lifecycle,
            || storage_refusing,
        );
        let text = admitted.inspect_err(|refused| {
            if refused.code == ErrorCode::RateLimited {
                self.deps.metrics.rate_limited.inc();
            }
        })?;
        let request_id = msg.request_id;
        let (turn_id, duplicate) = match text {
            Some(_) => (action_id(round, &msg.seat_id), false),
            None => (self.intake.duplicate_of(request_id.as_deref()), true),
        };
        let mut accepted = ChatAccepted {
            turn_id: turn_id.clone(),
            duplicate,
            queued: 0,
            acked: msg.conn_id.is_some(),
            action: Some(ActionTaken {
                round: round_of(&turn_id).unwrap_or(round),
                seat_id: msg.seat_id.clone(),
                seq: self.sequencer.last_staged(),
            }),
        };
        let ack = msg
            .conn_id
            .map(|conn_id| (conn_id, ByteString::from(accepted.ack(request_id.clone()))));
        let Some(text) = text else {
            if let Some((conn_id, ack)) = ack
                && let Some((conn_id, ack)) = self.acks.duplicate(&turn_id, conn_id, ack)
            {
                self.out.push_back(Command::SendTo(conn_id, ack));
            }
            return Ok(accepted);
        };
        if let Some(r) = &request_id {
            self.intake.remember_action(r.clone(), turn_id.clone());
        }
        let action = RoundAction {
            seat_id: msg.seat_id.clone(),
            character_id,
            text,
            request_id,
        };
        let seq = self.emit(Entry {
            effect: Some(Effect::ActionSubmitted {
                round,
                action,
                at: now_ms(),
            }),
            ..Entry::frame(StoryEvent::ActionSubmitted {
                round,
                seat_id: msg.seat_id,
            })
        });
        if let Some(taken) = accepted.action.as_mut() {
            taken.seq = seq;
        }
        self.acks.taken(turn_id.clone(), ack);
        self.acks.started(turn_id, seq);
        self.round_check = true;
        self.touch();
        self.advance();
        Ok(accepted)
    }

    /// A receiver told once the frame `seq` is durable (at once if it is).
    pub(in crate::session) fn await_durable(
        &mut self,
        seq: u64,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (tell, told) = tokio::sync::oneshot::channel();
        let waiter = Box::new(move || {
            let _ = tell.send(());
        });
        self.sequencer.when_durable(seq, waiter);
        told
    }

    /// A line of table talk from `seat_id`: journalled as `party_chat` for
    /// everyone at the table, never put in the model's history or context.
    pub(in crate::session) fn say(
        &mut self,
        seat_id: &SeatId,
        text: &str,
        request_id: Option<&RequestId>,
    ) -> Result<(), ChatRefused> {
        self.lifecycle.refuse_if_closed()?;
        self.lifecycle.refuse_if_going()?;
        let Some(seat) = self.state.party.active().find(|s| s.seat_id == *seat_id) else {
            let message = "only a player at the table may talk";
            return Err(ChatRefused::new(ErrorCode::Forbidden, message));
        };
        let name = seat.name.clone();
        let text = self
            .intake
            .take_talk(text, request_id.map(|r| r.as_str()), seat_id)
            .inspect_err(|refused| {
                if refused.code == ErrorCode::RateLimited {
                    self.deps.metrics.rate_limited.inc();
                }
            })?
            .to_owned();
        self.emit(Entry::frame(StoryEvent::PartyChat {
            seat_id: seat_id.clone(),
            name,
            text,
        }));
        self.touch();
        Ok(())
    }

    /// Whether the held round must resolve now: it has actions, it is not
    /// being resolved, and every active seat online acted (asked only
    /// after an action or a seat going offline: a seat coming online, as
    /// after a restart, only adds to whom the round waits for), its
    /// deadline passed, or the session left rounds mode.
    fn round_due(&mut self, now: i64) -> bool {
        let party = &self.state.party;
        if party.round.actions.is_empty() || self.resolving.is_some_and(|r| r >= party.round.number)
        {
            return false;
        }
        let checked = std::mem::take(&mut self.round_check);
        party.turn_mode == TurnMode::Free
            || party.round_deadline().is_some_and(|at| now >= at)
            || (checked && party.waiting_for(|s| self.online.contains(s)).is_empty())
    }

    /// Starts the round's turn when it is due; answers whether it did.
    /// Asked when nothing else runs: the round waits for the work ahead.
    pub(super) fn start_round_if_due(&mut self) -> bool {
        if self.lifecycle.refuses_work() {
            // Stopping or closing: the held round stays in the journal,
            // for whoever loads the session next.
            return false;
        }
        if self.sequencer.has_pending() {
            // An action's effect may not be applied yet: ask once it is.
            return false;
        }
        if !self.round_due(now_ms()) {
            self.arm_round_timer();
            return false;
        }
        let party = &self.state.party;
        let round = party.round.number;
        let actions: Vec<RoundActionView> = party
            .active()
            .map(|seat| {
                let acted = party
                    .round
                    .actions
                    .iter()
                    .find(|a| a.seat_id == seat.seat_id);
                RoundActionView {
                    seat_id: seat.seat_id.clone(),
                    character_id: seat.character_id.clone(),
                    text: acted.map(|a| a.text.clone()),
                    request_id: acted.and_then(|a| a.request_id.clone()),
                }
            })
            .collect();
        let acting: Vec<CharacterId> = actions
            .iter()
            .filter(|a| a.text.is_some())
            .map(|a| a.character_id.clone())
            .collect();
        let text = round_message(round, &actions, |seat_id| {
            party.seat(seat_id.as_str()).map(|s| s.name.clone())
        });
        let turn_no = self.intake.next_turn_no();
        let turn_id = TurnId::from(format!("turn_{turn_no}"));
        let started = turn_frames::round_started(
            &self.state,
            turn_no,
            &turn_id,
            round,
            actions,
            text,
            acting.first(),
        );
        self.resolving = Some(round);
        self.emit(started);
        self.run_turn(turn_id, turn_no, TraceId::fresh(), acting, None, None);
        true
    }

    /// Asks for a timer at the held round's deadline, once per round: set
    /// from the state, so also when a restarted session loads.
    fn arm_round_timer(&mut self) {
        let party = &self.state.party;
        let Some(at) = party.round_deadline() else {
            return;
        };
        let round = party.round.number;
        if self.round_timer.is_some_and(|r| r >= round) {
            return;
        }
        self.round_timer = Some(round);
        let after = u64::try_from(at - now_ms()).unwrap_or(0);
        // A little past it, so the clock reads it passed when it fires.
        let after = Duration::from_millis(after.saturating_add(5));
        self.out.push_back(Command::RoundAt(after));
    }

    /// The round's deadline timer fired. The timer is set again from the
    /// state if the round is not due yet (the host lengthened the timeout).
    pub(in crate::session) fn round_deadline(&mut self) {
        self.round_timer = None;
        self.advance();
    }

    /// Whether a round's actions wait to be resolved (the session is not
    /// idle meanwhile).
    pub(super) fn holds_round(&self) -> bool {
        !self.state.party.round.actions.is_empty()
    }
}

/// The round number an action id ([`action_id`]) names.
fn round_of(turn_id: &TurnId) -> Option<u64> {
    let rest = turn_id.as_str().strip_prefix("round_")?;
    rest.split('_').next()?.parse().ok()
}

/// The one message the model reads for a round: who did what, one line a
/// seat (`Name (character_id): text`), `(no action)` for a seat that did
/// not act.
pub(in crate::session) fn round_message(
    round: u64,
    actions: &[RoundActionView],
    name: impl Fn(&SeatId) -> Option<String>,
) -> String {
    let mut text = format!("Round {round}: resolve these actions together, in this order.");
    for a in actions {
        let who = name(&a.seat_id).unwrap_or_else(|| a.seat_id.to_string());
        let what = a.text.as_deref().unwrap_or("(no action)");
        text.push_str(&format!("\n{who} ({}): {what}", a.character_id));
    }
    text
}
