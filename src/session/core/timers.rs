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

use std::time::Duration;

use super::{Command, Core};
use crate::game::approvals;
use crate::game::party::{SeatState, TurnMode};
use crate::game::{Effect, GameState};
use crate::ids::{TraceId, TurnId};
use crate::session::turn_frames;
use crate::storage::{ROUND_TIMER, TimerIndex, now_ms};

/// How soon a timer must be due to keep an idle session loaded.
const KEEP_LOADED_FOR: Duration = Duration::from_secs(5);

/// What journalling `effect` changes in the store's timer index, read
/// against `state` (the state it will apply to, give or take changes in
/// flight; `round_settled` answers whether a change to the round is among
/// them): the timers it schedules, fires and cancels, and the held round's
/// deadline, which its first action sets, a change of timeout moves, and
/// its resolution or the departure of every seat that acted in it ends.
pub(super) fn timer_index(
    effect: Option<&Effect>,
    state: &GameState,
    round_settled: impl FnOnce() -> bool,
) -> Vec<TimerIndex> {
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
        // The round's last action leaves with its seat: the round holds
        // none and has no deadline (`Party::seat_changed`). Only read off
        // a state no change to the round is on its way to: an action in
        // flight would hold the round still. A deadline left in the index
        // wrongly makes the sweeper load the session for nothing, later
        // and later (`sweeper`); one taken out wrongly would leave a round
        // unresolved while no node runs the session.
        Some(Effect::SeatChanged {
            seat_id,
            state: seat_state,
            ..
        }) if *seat_state != SeatState::Active => {
            let actions = &state.party.round.actions;
            let last = !actions.is_empty() && actions.iter().all(|a| a.seat_id == *seat_id);
            if last && round_settled() {
                vec![gone(ROUND_TIMER)]
            } else {
                Vec::new()
            }
        }
        // An approval's timeout is a durable timer: the sweeper loads a
        // session nobody runs when it is due.
        Some(Effect::ApprovalRequested { approval }) => {
            vec![due(&approval.timer_id(), approval.expires_at)]
        }
        Some(Effect::ApprovalResolved { approval_id, .. }) => {
            vec![gone(&approvals::timer_id(approval_id))]
        }
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
        tracing::info!(session_id = %self.session_id, timer_id = %timer.timer_id, event = %timer.event, late_ms, "timer fired");
        // The world acts for no seat: the tools that act as a character
        // default to the active one.
        let acting = vec![self.state.active_actor_id.clone()];
        self.run_turn(turn_id, turn_no, TraceId::fresh(), acting, None, None);
        true
    }

    /// Asks to be woken when the soonest timer is due, unless a wake-up
    /// at or before it is set already.
    fn arm_timer_wake(&mut self, now: i64) {
        if let Some(due_at) = self.state.timers.next().map(|t| t.due_at) {
            self.wake_at(due_at, now);
        }
    }

    /// Asks to be woken at `due_at` (ms since the epoch; a timer's due
    /// time, an approval's expiry), unless a wake-up at or before it is
    /// set already.
    pub(super) fn wake_at(&mut self, due_at: i64, now: i64) {
        if self.timer_wake.is_some_and(|w| w <= due_at) {
            return;
        }
        self.timer_wake = Some(due_at);
        let after = u64::try_from(due_at - now).unwrap_or(0);
        // A little past it, so the clock reads it due when it fires.
        let after = Duration::from_millis(after.saturating_add(5));
        self.out.push_back(Command::TimerAt(after));
    }

    /// Whether the soonest timer is due within [`KEEP_LOADED_FOR`]: an idle
    /// session is kept loaded for it rather than unloaded and loaded
    /// again by the sweeper a moment later. One due later unloads; the
    /// store's timer index brings it back.
    pub(super) fn timer_due_soon(&self) -> bool {
        let soon = now_ms().saturating_add(KEEP_LOADED_FOR.as_millis() as i64);
        self.state.timers.next().is_some_and(|t| t.due_at <= soon)
    }

    /// A timer wake-up came: fires what is due, or sets the next one.
    pub(in crate::session) fn timer_wake(&mut self) {
        self.timer_wake = None;
        self.expire_approvals();
        self.advance();
    }
}

#[cfg(test)]
mod tests {
    //! The fire/commit rule as a property: a session with due timers,
    //! crashed at any point (what is not durable is lost) and restored from
    //! its durable journal, any number of times, with time passing between
    //! crashes, journals exactly one world turn per due time.

    use std::collections::{HashSet, VecDeque};

    use actix::SpawnHandle;
    use proptest::prelude::*;

    use super::super::Command;
    use super::super::tests::core;
    use crate::game::Effect;
    use crate::game::timers::Timer;
    use crate::ids::{SeatId, TimerId, TurnId};
    use crate::llm::{ModelEvent, ModelReply};
    use crate::session::SubmitChat;
    use crate::session::core::Core;
    use crate::session::replay::{self, Restored};
    use crate::storage::{Epoch, SessionWrite, now_ms};

    /// What happens to the session next.
    #[derive(Debug, Clone)]
    enum Op {
        /// The writer makes the first `n` rows written durable.
        Commit(usize),
        /// The model answers the call in flight.
        Answer,
        /// A player chats, if nothing runs.
        Chat,
        /// The process dies; `secs` pass before it is loaded again.
        Crash { secs: i64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1usize..4).prop_map(Op::Commit),
            2 => Just(Op::Answer),
            1 => Just(Op::Chat),
            1 => prop_oneof![Just(0i64), Just(3), Just(6), Just(12)].prop_map(|secs| Op::Crash { secs }),
        ]
    }

    /// A durable journal row: its seq, effect and frame.
    struct Row {
        seq: u64,
        effect: Option<Effect>,
        frame: serde_json::Value,
    }

    /// The durable journal and the process that writes it.
    struct World {
        /// The timers the session started with, as stored.
        timers: Vec<Timer>,
        durable: Vec<Row>,
        /// Rows handed to the writer, not yet durable.
        written: VecDeque<Row>,
        core: Core,
        /// The model call in flight.
        asked: Option<u64>,
        chats: u32,
    }

    /// Every stored time moves back by `ms`: as if `ms` passed.
    fn shift(effect: &mut Effect, ms: i64) {
        if let Effect::FireTimer {
            due_at,
            next_due_at,
            ..
        } = effect
        {
            *due_at -= ms;
            if let Some(next) = next_due_at {
                *next -= ms;
            }
        }
    }

    impl World {
        fn new(timers: Vec<Timer>) -> Self {
            let mut world = Self {
                timers,
                durable: Vec::new(),
                written: VecDeque::new(),
                core: core(),
                asked: None,
                chats: 0,
            };
            world.restore();
            world
        }

        /// A new process loads the session from the durable journal, as
        /// `replay::restore` does, and starts it.
        fn restore(&mut self) {
            let mut state = crate::tools::test_support::demo();
            for timer in &self.timers {
                let scheduled = Effect::TimerScheduled {
                    timer: timer.clone(),
                    replaces: None,
                };
                state.apply(&scheduled);
            }
            let mut open: Option<TurnId> = None;
            for row in &self.durable {
                let effect = row
                    .effect
                    .as_ref()
                    .map(|e| serde_json::to_string(e).expect("effect"));
                replay::apply(&mut state, effect.as_deref(), None).expect("applies");
                let turn_id = row.frame["turn_id"].as_str().map(TurnId::from);
                match row.frame["type"].as_str() {
                    Some("turn_started") => open = turn_id,
                    Some("turn_completed" | "turn_failed") => open = None,
                    _ => {}
                }
            }
            let old = &self.core;
            let deps = super::super::CoreDeps {
                registry: old.deps.registry.clone(),
                metrics: old.deps.metrics.clone(),
                limits: old.deps.limits.clone(),
                model: old.deps.model,
                stats: old.deps.stats.clone(),
                budgets: old.deps.budgets.clone(),
            };
            let restored = Restored {
                state,
                last_seq: self.durable.last().map_or(0, |r| r.seq),
                since_snapshot: 0,
                ring: VecDeque::new(),
                requests: Default::default(),
                interrupted_turn: open,
                epoch: Epoch::Sole,
                stored_chats: Vec::new(),
                started_chats: Vec::new(),
                stored_chunks: Vec::new(),
            };
            self.core = Core::new(old.meta.clone(), deps, restored);
            self.asked = None;
            self.core.start();
            self.run();
        }

        /// Carries out the core's commands as the actor would; rows go to
        /// the writer.
        fn run(&mut self) {
            while let Some(command) = self.core.next_command() {
                let writes = match command {
                    Command::FlushLater => self.core.take_writes(),
                    Command::Write(writes) => writes,
                    Command::Deadline(turn_id, _) => {
                        self.core.deadline_set(&turn_id, SpawnHandle::default());
                        Vec::new()
                    }
                    Command::AskModel(tag, _) => {
                        self.asked = Some(tag);
                        Vec::new()
                    }
                    Command::Tell(waiters) => {
                        waiters.into_iter().for_each(|w| w());
                        Vec::new()
                    }
                    _ => Vec::new(),
                };
                for write in writes {
                    if let SessionWrite::Row(row) = write {
                        let effect = row
                            .effect
                            .as_deref()
                            .map(|e| serde_json::from_str(e).expect("effect"));
                        let frame = serde_json::from_str(&row.frame).expect("frame");
                        self.written.push_back(Row {
                            seq: row.seq,
                            effect,
                            frame,
                        });
                    }
                }
            }
        }

        fn commit(&mut self, n: usize) {
            self.run();
            let n = n.min(self.written.len());
            if n == 0 {
                return;
            }
            self.durable.extend(self.written.drain(..n));
            let up_to = self.durable.last().map_or(0, |r| r.seq);
            self.core.durable(up_to);
            self.run();
            self.core.advance();
            self.run();
        }

        fn answer(&mut self) {
            if let Some(tag) = self.asked.take() {
                let reply = ModelReply::narrate("The world moves.");
                self.core
                    .model_event(tag, Some(Ok(ModelEvent::Done(reply))));
                self.run();
            }
        }

        fn chat(&mut self) {
            if self.core.turn.is_some() || self.core.sequencer.has_pending() {
                return;
            }
            self.chats += 1;
            let chat = SubmitChat {
                text: "I wait.".into(),
                request_id: Some(format!("r{}", self.chats).into()),
                seat_id: SeatId::from("seat_1"),
                conn_id: Some(1),
                trace_id: None,
                traceparent: None,
            };
            self.core
                .submit_chat(chat, None)
                .expect("a chat while idle is taken");
            self.run();
        }

        /// The process dies: what is not durable is lost; `secs` pass.
        fn crash(&mut self, secs: i64) {
            self.written.clear();
            let ms = secs * 1000;
            for timer in &mut self.timers {
                timer.due_at -= ms;
            }
            for row in &mut self.durable {
                if let Some(effect) = &mut row.effect {
                    shift(effect, ms);
                }
            }
            self.restore();
        }

        /// Everything written is made durable and every model call
        /// answered, until the session rests.
        fn settle(&mut self) {
            for _ in 0..200 {
                if !self.written.is_empty() {
                    self.commit(usize::MAX);
                } else if self.asked.is_some() {
                    self.answer();
                } else {
                    return;
                }
            }
            panic!("the session never came to rest");
        }

        /// Each world turn in the durable journal: its timer and due time.
        fn fired(&self) -> Vec<(TimerId, i64)> {
            let mut fired = Vec::new();
            for row in &self.durable {
                let Some(Effect::FireTimer {
                    timer_id, due_at, ..
                }) = &row.effect
                else {
                    continue;
                };
                // The frame that begins the world turn is the row that
                // fires the timer.
                assert_eq!(row.frame["type"], "turn_started");
                assert_eq!(row.frame["trigger"], "timer");
                assert_eq!(row.frame["timer_id"], timer_id.as_str());
                assert!(row.frame["request_id"].is_null());
                assert!(row.frame["seat_id"].is_null());
                fired.push((timer_id.clone(), *due_at));
            }
            let world_turns = self
                .durable
                .iter()
                .filter(|r| r.frame["type"] == "turn_started" && r.frame["trigger"] == "timer")
                .count();
            assert_eq!(world_turns, fired.len(), "every world turn fires a timer");
            fired
        }
    }

    fn timer(id: &str, due_in_ms: i64, repeat_s: Option<u64>) -> Timer {
        Timer {
            timer_id: TimerId::from(id),
            event: format!("event_{id}"),
            note: String::new(),
            due_at: now_ms() + due_in_ms,
            repeat_s,
            key: None,
            created_at: 0,
        }
    }

    const EVERY_MS: i64 = 5000;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn each_due_time_fires_exactly_once_through_crashes(ops in prop::collection::vec(op(), 0..40)) {
            let timers = vec![
                timer("tmr_a", -2000, None),
                timer("tmr_b", -1000, None),
                timer("tmr_r", -500, Some(EVERY_MS as u64 / 1000)),
                // Due only once some time has passed.
                timer("tmr_later", 8000, None),
            ];
            let mut world = World::new(timers);
            for op in ops {
                match op {
                    Op::Commit(n) => world.commit(n),
                    Op::Answer => world.answer(),
                    Op::Chat => world.chat(),
                    Op::Crash { secs } => world.crash(secs),
                }
            }
            // However it went, the last process runs until it rests (and
            // a last restart changes nothing).
            world.settle();
            world.crash(0);
            world.settle();

            let fired = world.fired();
            let distinct: HashSet<&(TimerId, i64)> = fired.iter().collect();
            prop_assert_eq!(distinct.len(), fired.len(), "a due time fired twice: {:?}", fired);
            let now = now_ms();
            prop_assert!(world.core.state.timers.due(now).is_none(), "a due timer never fired");
            for t in &world.timers {
                let times = fired.iter().filter(|(id, _)| *id == t.timer_id).count();
                match t.repeat_s {
                    None if t.due_at <= now => prop_assert_eq!(times, 1, "{} fired {} times", t.timer_id, times),
                    None => prop_assert_eq!(times, 0),
                    // Once at least, each time later than the last and on
                    // its rhythm (stored times moved with the clock alike).
                    Some(_) => {
                        prop_assert!(times >= 1);
                        let dues: Vec<i64> = fired.iter().filter(|(id, _)| *id == t.timer_id).map(|(_, at)| *at).collect();
                        prop_assert!(dues.windows(2).all(|w| w[0] < w[1]), "in order: {:?}", dues);
                        prop_assert!(dues.iter().all(|at| (at - t.due_at).rem_euclid(EVERY_MS) == 0), "on its rhythm: {:?}", dues);
                    }
                }
            }
        }
    }

    #[test]
    fn the_round_deadline_leaves_the_index_with_the_last_seat_that_acted() {
        use crate::game::party::{RoundAction, SeatRole, SeatState};
        use crate::storage::{ROUND_TIMER, TimerIndex};

        let mut state = core().state.clone();
        let act = |n: u32| RoundAction {
            seat_id: SeatId::from(format!("seat_{n}")),
            character_id: format!("pc_{n:03}").into(),
            text: "look".into(),
            request_id: None,
        };
        let kick = |n: u32| Effect::SeatChanged {
            seat_id: SeatId::from(format!("seat_{n}")),
            role: SeatRole::Player,
            state: SeatState::Kicked,
        };
        let gone = vec![TimerIndex::Gone {
            timer_id: ROUND_TIMER.to_owned(),
        }];
        state.party.round.actions = vec![act(2), act(3)];
        assert!(
            super::timer_index(Some(&kick(2)), &state, || true).is_empty(),
            "seat_3's action holds the round"
        );
        state.party.round.actions = vec![act(2)];
        assert_eq!(super::timer_index(Some(&kick(2)), &state, || true), gone);
        assert!(
            super::timer_index(Some(&kick(3)), &state, || true).is_empty(),
            "seat_2's action holds it"
        );
        assert!(
            super::timer_index(Some(&kick(2)), &state, || false).is_empty(),
            "a change to the round on its way: the deadline stays"
        );
        let host = Effect::SeatChanged {
            seat_id: SeatId::from("seat_2"),
            role: SeatRole::Host,
            state: SeatState::Active,
        };
        assert!(
            super::timer_index(Some(&host), &state, || true).is_empty(),
            "a seat made host stays"
        );
    }
}
