//! The running turn as the session's core holds it: its [`Turn`], its
//! deadline timer, the model call in flight (tagged, so events of a stream no longer awaited
//! are dropped), the time the turn and its model calls took, and the
//! spans of the turn and of that model call (`crate::telemetry`).
//!
//! It is apart from the core (`core.rs`) so that the core only starts
//! and stops things: which model call is awaited, what must be cancelled
//! when the turn ends, and the times it reports are kept, and tested, here.
//! It holds actix's handles but never a context, and is told the time, so
//! its rules need no runtime: the actor cancels what [`Running::end`] hands
//! back.

use std::time::{Duration, Instant};

use actix::SpawnHandle;
use tracing::Span;

use super::turn::{Phase, Turn};
use crate::game::approvals::Approval;
use crate::game::state::CharacterId;
use crate::ids::SeatId;

/// A turn that is running.
pub(super) struct Running {
    /// What the turn decides: iterations, calls, limits, its events.
    pub(super) turn: Turn,
    /// The characters it acts for: the speaker's, or a round's actors
    /// ([`crate::tools::Caller::acting`]).
    pub(super) acting: Vec<CharacterId>,
    /// The seat that spoke; `None` for a round's or a world turn.
    pub(super) seat: Option<SeatId>,
    /// The call waiting for a person's decision, while the turn is paused
    /// (docs/protocol.md §19).
    pub(super) awaiting: Option<Approval>,
    /// The seq of the `approval_requested` frame of `awaiting`.
    pub(super) awaiting_seq: u64,
    /// Its deadline timer, once the actor set it.
    deadline: Option<SpawnHandle>,
    model: Option<ModelCall>,
    /// When the turn left the queue.
    started: Instant,
    /// Time this turn spent waiting for model answers.
    model_time: Duration,
    /// The turn's span (`crate::telemetry`), closed when the turn is
    /// dropped; [`Span::none`] while traces are off.
    pub(super) span: Span,
}

/// The model call in flight.
struct ModelCall {
    /// Unique among the session's model calls, so events of an earlier
    /// one's stream are told apart.
    tag: u64,
    /// Its stream, unless its answer was taken at once.
    stream: Option<SpawnHandle>,
    started: Instant,
    /// Its span, a child of the turn's; closed when the call answers,
    /// fails or is dropped with the turn.
    span: Span,
}

/// A turn that ended, with what is left to do about it.
pub(super) struct Ended {
    pub(super) turn: Turn,
    /// Its timer, and its model stream if one was still in flight.
    pub(super) to_cancel: Vec<SpawnHandle>,
    /// From leaving the queue to its end.
    pub(super) elapsed: Duration,
    /// Of that, the time spent waiting for model answers.
    pub(super) model_time: Duration,
}

impl Running {
    /// `turn` started at `now`, traced by `span`; its deadline timer
    /// comes with [`Running::deadline_set`].
    pub(super) fn new(
        turn: Turn,
        acting: Vec<CharacterId>,
        seat: Option<SeatId>,
        now: Instant,
        span: Span,
    ) -> Self {
        Self {
            turn,
            acting,
            seat,
            awaiting: None,
            awaiting_seq: 0,
            deadline: None,
            model: None,
            started: now,
            model_time: Duration::ZERO,
            span,
        }
    }

    /// The turn's deadline timer, to cancel when it ends.
    pub(super) fn deadline_set(&mut self, timer: SpawnHandle) {
        self.deadline = Some(timer);
    }

    /// The turn pauses for `approval` (asked in the frame `seq`): its deadline stops (it starts again
    /// in full once the decision is taken); answers the timer to cancel.
    pub(super) fn pause(&mut self, approval: Approval, seq: u64) -> Option<SpawnHandle> {
        self.turn.await_approval();
        self.awaiting = Some(approval);
        self.awaiting_seq = seq;
        self.deadline.take()
    }

    /// The model call tagged `tag`, traced by `span`, was asked at `now`;
    /// its events are the ones awaited.
    pub(super) fn model_called(&mut self, tag: u64, now: Instant, span: Span) {
        self.model = Some(ModelCall {
            tag,
            stream: None,
            started: now,
            span,
        });
        self.turn.model_called();
    }

    /// The span of the model call in flight, if one is.
    pub(super) fn model_span(&self) -> Option<&Span> {
        self.model.as_ref().map(|m| &m.span)
    }

    /// The model call tagged `tag` streams through `stream` (its answer was
    /// not there at once); ignored if that call is no longer in flight.
    pub(super) fn streaming(&mut self, tag: u64, stream: SpawnHandle) {
        if let Some(call) = self.model.as_mut().filter(|m| m.tag == tag) {
            call.stream = Some(stream);
        }
    }

    /// Whether an event of the model call tagged `tag` is awaited: it is
    /// the call in flight and the turn waits for the model.
    pub(super) fn awaits(&self, tag: u64) -> bool {
        self.model.as_ref().is_some_and(|m| m.tag == tag) && self.turn.phase() == Phase::AwaitModel
    }

    /// The model call in flight answered or failed at `now`: answers how
    /// long it took, which counts for the turn. Nothing of its stream is
    /// awaited after that.
    pub(super) fn model_answered(&mut self, now: Instant) -> Option<Duration> {
        let call = self.model.take()?;
        let waited = now.saturating_duration_since(call.started);
        self.model_time += waited;
        Some(waited)
    }

    /// The turn ends at `now`.
    pub(super) fn end(self, now: Instant) -> Ended {
        let mut to_cancel: Vec<SpawnHandle> = self.deadline.into_iter().collect();
        to_cancel.extend(self.model.and_then(|m| m.stream));
        Ended {
            turn: self.turn,
            to_cancel,
            elapsed: now.saturating_duration_since(self.started),
            model_time: self.model_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// A turn started at `t0`.
    fn running(t0: Instant) -> Running {
        let turn = Turn::new("turn_1".into(), 1, "tr_1".into(), 4);
        let mut r = Running::new(turn, Vec::new(), None, t0, Span::none());
        r.deadline_set(SpawnHandle::default().next());
        r
    }

    #[test]
    fn only_the_latest_model_calls_events_are_awaited_and_only_until_it_answers() {
        let t0 = Instant::now();
        let mut r = running(t0);
        assert!(!r.awaits(0), "no call yet");
        r.turn.resume();
        r.model_called(1, t0, Span::none());
        r.streaming(1, SpawnHandle::default());
        assert!(r.awaits(1));
        // The next call, after the first ended without an answer.
        r.model_called(2, t0 + SECOND, Span::none());
        assert!(!r.awaits(1), "an earlier call's stream");
        assert!(r.awaits(2));
        assert_eq!(r.model_answered(t0 + 3 * SECOND), Some(2 * SECOND));
        assert!(!r.awaits(2), "answered: the rest of its stream is dropped");
        assert_eq!(r.model_answered(t0 + 4 * SECOND), None, "answered once");
    }

    #[test]
    fn a_turns_model_time_adds_up_its_answered_calls() {
        let t0 = Instant::now();
        let mut r = running(t0);
        r.turn.resume();
        r.model_called(1, t0 + SECOND, Span::none());
        r.model_answered(t0 + 3 * SECOND);
        r.model_called(2, t0 + 5 * SECOND, Span::none());
        r.model_answered(t0 + 6 * SECOND);
        let ended = r.end(t0 + 10 * SECOND);
        assert_eq!(ended.elapsed, 10 * SECOND);
        assert_eq!(ended.model_time, 3 * SECOND);
        assert_eq!(ended.turn.turn_id().as_str(), "turn_1");
    }

    #[test]
    fn an_ending_turn_hands_back_its_timer_and_a_stream_still_in_flight() {
        let t0 = Instant::now();
        let deadline = SpawnHandle::default().next();
        let stream = deadline.next();
        let mut r = running(t0);
        r.turn.resume();
        r.model_called(1, t0, Span::none());
        r.streaming(1, stream);
        // The deadline came while the model was still writing.
        let ended = r.end(t0 + SECOND);
        assert_eq!(ended.to_cancel, [deadline, stream]);
        assert_eq!(ended.model_time, Duration::ZERO, "it never answered");

        let mut r = running(t0);
        r.turn.resume();
        r.model_called(1, t0, Span::none());
        r.streaming(1, stream);
        r.model_answered(t0 + SECOND);
        assert_eq!(r.end(t0 + SECOND).to_cancel, [deadline]);

        // An answer taken at once has no stream to stop.
        let mut r = running(t0);
        r.turn.resume();
        r.model_called(1, t0, Span::none());
        assert_eq!(r.end(t0 + SECOND).to_cancel, [deadline]);
    }
}
