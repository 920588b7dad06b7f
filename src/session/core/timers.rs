//! Durable timers in a session's core (docs/protocol.md §9): when the
//! state's soonest timer is due and nothing else runs or waits, a *world
//! turn* begins. Its `turn_started` carries [`Effect::FireTimer`], which
//! marks the timer fired (or sets a repeating timer's next due time) in
//! the same journalled frame: a crash before it is durable leaves the
//! timer due, one after leaves it fired, so each due time fires once.
//!
//! The due times are read from the state, never kept apart: a session
//! sets its wake-up again whenever it loads, and a session that is not
//! loaded is found by the store's timer index (the sweeper).
//!
//! [`Effect::FireTimer`]: crate::game::Effect::FireTimer

use std::time::{Duration, Instant};

use super::{Command, Core};
use crate::game::party::TurnMode;
use crate::game::{Effect, GameState};
use crate::ids::{TraceId, TurnId};
use crate::session::running::Running;
use crate::session::turn::Turn;
use crate::session::turn_frames;
use crate::storage::{ROUND_TIMER, TimerIndex, now_ms};

/// What journalling `effect` changes in the store's timer index, read
/// against `state` (the state it will apply to, give or take changes in
/// flight): the timers it schedules, fires and cancels, and the held
/// round's deadline, which its first action sets, a change of timeout
/// moves and its resolution ends.
pub(super) fn timer_index(effect: Option<&Effect>, state: &GameState) -> Vec<TimerIndex> {
    let due = |timer_id: &str, due_at| TimerIndex::Due {
        timer_id: timer_id.to_owned(),
        due_at,
    };
    let gone = |timer_id: &str| TimerIndex::Gone {
        timer_id: timer_id.to_owned(),
    };
    let round_ms = |timeout_s: u32| i64::from(timeout_s) * 1000;
    match effect {
        Some(Effect::TimerScheduled { timer, replaces }) => replaces
            .iter()
            .map(|old| gone(old.as_str()))
            .chain([due(timer.timer_id.as_str(), timer.due_at)])
            .collect(),
        Some(Effect::TimerCancelled { timer_id }) => vec![gone(timer_id.as_str())],
        Some(Effect::FireTimer {
            timer_id,
            next_due_at,
            ..
        }) => vec![match next_due_at {
            Some(at) => due(timer_id.as_str(), *at),
            None => gone(timer_id.as_str()),
        }],
        Some(Effect::ActionSubmitted { at, .. }) => vec![TimerIndex::DueUnlessSet {
            timer_id: ROUND_TIMER.to_owned(),
            due_at: at + round_ms(state.party.round_timeout_s),
        }],
        Some(Effect::ModeChanged {
            turn_mode: TurnMode::Rounds,
            round_timeout_s,
        }) => state
            .party
            .round
            .first_at
            .map(|first| due(ROUND_TIMER, first + round_ms(*round_timeout_s)))
            .into_iter()
            .collect(),
        Some(Effect::BeginRound { .. }) => vec![gone(ROUND_TIMER)],
        _ => Vec::new(),
    }
}

impl Core {
    /// Starts the world turn of the timer due now, if one is; answers
    /// whether it did. Asked when nothing else runs or waits: a due timer
    /// waits behind the running turn and the chats queued before it, as a
    /// chat taken at its due time would.
    pub(super) fn start_timer_if_due(&mut self) -> bool {
        if self.lifecycle.refuses_work() {
            // Stopping, draining or closed: the timer stays in the
            // journal for whoever loads the session next.
            return false;
        }
        if self.sequencer.has_pending() {
            // The last world turn's effect may not be applied yet: asked
            // again once it is.
            return false;
        }
        let now = now_ms();
        let Some(timer) = self.state.timers.due(now).cloned() else {
            self.arm_timer_wake(now);
            return false;
        };
        let turn_no = self.intake.next_turn_no();
        let turn_id = TurnId::from(format!("turn_{turn_no}"));
        let started = turn_frames::timer_started(&self.state, turn_no, &turn_id, &timer, now);
        self.emit(started);
        let late_ms = now.saturating_sub(timer.due_at).max(0);
        let metrics = &self.deps.metrics;
        metrics
            .timer_lateness_seconds
            .observe(late_ms as f64 / 1000.0);
        metrics.timers_fired.inc();
        metrics.turns_started.inc();
        tracing::info!(session_id = %self.session_id, timer_id = %timer.timer_id, event = %timer.event, late_ms, "timer fired");
        let deadline = self.deps.limits.turn_deadline;
        self.out
            .push_back(Command::Deadline(turn_id.clone(), deadline));
        let max_iterations = self.deps.limits.max_iterations;
        let turn = Turn::new(turn_id, turn_no, TraceId::fresh(), max_iterations);
        // The world acts for no seat: the tools that act as a character
        // default to the active one.
        let acting = vec![self.state.active_actor_id.clone()];
        self.turn = Some(Running::new(turn, acting, Instant::now()));
        self.touch();
        true
    }

    /// Asks to be woken when the soonest timer is due, unless a wake-up
    /// at or before it is set already.
    fn arm_timer_wake(&mut self, now: i64) {
        let Some(due_at) = self.state.timers.next().map(|t| t.due_at) else {
            return;
        };
        if self.timer_wake.is_some_and(|w| w <= due_at) {
            return;
        }
        self.timer_wake = Some(due_at);
        let after = u64::try_from(due_at - now).unwrap_or(0);
        // A little past it, so the clock reads it due when it fires.
        let after = Duration::from_millis(after.saturating_add(5));
        self.out.push_back(Command::TimerAt(after));
    }

    /// A timer wake-up came: fires what is due, or sets the next one.
    pub(in crate::session) fn timer_wake(&mut self) {
        self.timer_wake = None;
        self.advance();
    }
}
