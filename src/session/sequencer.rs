//! The journal sequencer of one session: it numbers story frames, holds them
//! until the writer says they are durable, keeps the recent released ones
//! for connections that resume, and holds whoever waits for a frame to be
//! durable (a direct call's caller, a caller waiting for a turn's end).
//!
//! It sits inside the session's core (`core.rs`), which owns everything
//! around it: the journal row [`Sequencer::journal`] makes of each frame
//! goes to the store, and when a durability notice comes back the frames
//! [`Sequencer::durable`] hands over are applied, sent and their waiters
//! called (`release.rs`). The sequencer itself does no IO and knows nothing of
//! actix or the store, so its rules are tested here from tables.
//!
//! Invariants:
//! - seqs handed out are contiguous: each staged frame gets the next one,
//!   starting right after the restored last seq, and none is ever reused;
//! - nothing is handed out (released, put in the ring, offered as backlog)
//!   before a durability notice covers its seq, and frames come out in seq
//!   order;
//! - a durability notice for a seq already released is a no-op;
//! - the ring holds at most [`RING_FRAMES`] frames, the newest released ones;
//! - whoever waits for a frame (a turn's end, a direct call's result) is
//!   answered with that frame as it is released, never before;
//! - a snapshot is due once [`SNAPSHOT_EVERY`] frames were released since
//!   the last one.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytestring::ByteString;
use serde_json::json;
use tokio::sync::oneshot;

use super::types::{MAX_STORED_BACKLOG, RING_FRAMES, SNAPSHOT_EVERY};
use crate::game::{Effect, HistoryEntry};
use crate::ids::{SessionId, TurnId};
use crate::protocol::{StoryEvent, StoryFrame, TurnEnd};
use crate::storage::{JournalRow, StoredAction, StoredHistory, now_ms};

/// A story frame to journal, with what it does once durable.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) event: StoryEvent,
    /// Applied to the state once the frame is durable.
    pub(super) effect: Option<Effect>,
    /// Recorded in the model's history once the frame is durable.
    pub(super) history: Option<HistoryEntry>,
    /// The frame says `history` (see [`StoredHistory::FromFrame`]), so the
    /// journal need not write it out.
    pub(super) history_from_frame: bool,
    /// The applied-action entry of a tool call that succeeded.
    pub(super) action: Option<StoredAction>,
}

impl Entry {
    /// A frame that changes nothing and is not in the history.
    pub(super) fn frame(event: StoryEvent) -> Self {
        Self {
            event,
            effect: None,
            history: None,
            history_from_frame: false,
            action: None,
        }
    }
}

/// Someone told once a frame is durable and released (a direct call's
/// caller, a caller waiting for a turn's end).
pub(super) type Waiter = Box<dyn FnOnce() + Send>;

/// A frame waiting for durability, with what to apply when it is.
pub(super) struct Pending {
    pub(super) seq: u64,
    /// The frame as serialized once: journalled, sent and kept for resume.
    pub(super) bytes: ByteString,
    /// Boxed, as is `ends_turn`: most frames have neither, and a session
    /// keeps the room of its largest batch of staged frames for its whole
    /// life (four of them inline took 2.3 KiB in every session).
    pub(super) effect: Option<Box<Effect>>,
    pub(super) history: Option<Arc<HistoryEntry>>,
    /// The turn this frame ends (`turn_completed` / `turn_failed`), as
    /// those waiting for the turn are handed it.
    pub(super) ends_turn: Option<Box<TurnEnd>>,
    /// Whoever waits for this frame; the actor calls them once it has sent
    /// the frame, so nobody hears of a frame before its connections do.
    pub(super) waiters: Vec<Waiter>,
}

/// What a connection that subscribes gets first: whether it resumed, the
/// released frames it missed, and the seq its `welcome` frame carries.
#[derive(Debug, PartialEq)]
pub(super) struct Backlog {
    pub(super) resumed: bool,
    pub(super) frames: Vec<ByteString>,
    pub(super) welcome_seq: u64,
}

impl Backlog {
    /// This backlog if it fits in `bound` bytes beside a welcome of
    /// `welcome_bytes`, else a fresh start (not resumed, no frames): the
    /// welcome's snapshot is then the truth. A welcome alone is never cut.
    pub(super) fn within(self, welcome_bytes: usize, bound: usize) -> Self {
        let frames: usize = self.frames.iter().map(|f| f.len()).sum();
        if self.frames.is_empty() || welcome_bytes.saturating_add(frames) <= bound {
            return self;
        }
        Self {
            resumed: false,
            frames: Vec::new(),
            welcome_seq: self.welcome_seq,
        }
    }
}

/// Seq assignment, the frames not yet durable, and the resume ring.
pub(super) struct Sequencer {
    /// The seq the next staged frame gets.
    next_seq: u64,
    /// Highest seq that is durable and handed out.
    released: u64,
    /// Staged frames not yet durable, in seq order.
    pending: VecDeque<Pending>,
    /// The newest released frames, in seq order, for resume.
    ring: VecDeque<(u64, ByteString)>,
    /// Callers waiting for a turn's last frame, by turn id; the turn may
    /// not have started yet.
    /// Boxed, and made at the first waiter (a direct call's caller).
    #[expect(
        clippy::box_collection,
        reason = "an empty map inline is 48 bytes in every session's actor; the box is made at the first waiter"
    )]
    turn_waiters: Option<Box<HashMap<TurnId, Vec<oneshot::Sender<TurnEnd>>>>>,
    /// Frames released since the last snapshot.
    since_snapshot: u64,
}

impl Sequencer {
    /// A sequencer whose journal ends at `last_seq`, with its newest frames
    /// (oldest first) as the resume ring.
    pub(super) fn new(last_seq: u64, mut ring: VecDeque<(u64, ByteString)>) -> Self {
        // Storage loads as many frames as the ring holds; keep the newest in
        // case that ever differs.
        while ring.len() > RING_FRAMES {
            ring.pop_front();
        }
        Self {
            next_seq: last_seq + 1,
            released: last_seq,
            pending: VecDeque::new(),
            ring,
            turn_waiters: None,
            since_snapshot: 0,
        }
    }

    /// Stages `entry` ([`Sequencer::stage`]) and answers its journal row for
    /// session `session_id`: the frame as staged, with its seq, kind and
    /// ids, and what it does as JSON.
    pub(super) fn journal(&mut self, session_id: &SessionId, entry: Entry) -> JournalRow {
        let Entry {
            event,
            effect,
            history,
            history_from_frame,
            action,
        } = entry;
        let (turn_id, kind) = (event.turn_id().cloned(), event.kind());
        let request_id = match &event {
            StoryEvent::TurnStarted { request_id, .. } => request_id.clone(),
            _ => None,
        };
        let staged = self.stage(event, effect, history.map(Arc::new));
        JournalRow {
            session_id: session_id.clone(),
            seq: staged.seq,
            turn_id,
            kind,
            request_id,
            frame: staged.bytes.clone(),
            effect: staged
                .effect
                .as_ref()
                .and_then(|e| crate::json::to_string(e).ok()),
            history: staged.history.as_deref().and_then(|h| match h {
                _ if !history_from_frame => crate::json::to_string(h).ok().map(StoredHistory::Json),
                HistoryEntry::ToolCall { arguments, .. } => Some(StoredHistory::FromFrame {
                    arguments: Some(arguments.clone()),
                }),
                _ => Some(StoredHistory::FromFrame { arguments: None }),
            }),
            action,
            created_at: now_ms(),
            timers: Vec::new(),
        }
    }

    /// Gives `event` the next seq and holds it, serialized once, until it is
    /// durable; answers the staged frame so its journal row can be written.
    pub(super) fn stage(
        &mut self,
        event: StoryEvent,
        effect: Option<Effect>,
        history: Option<Arc<HistoryEntry>>,
    ) -> &Pending {
        let seq = self.next_seq;
        self.next_seq += 1;
        let frame =
            crate::json::to_string(&StoryFrame { seq, event: &event }).unwrap_or_else(|e| {
                tracing::error!(error = %e, "story frame did not serialize");
                json!({"type": event.kind(), "seq": seq}).to_string()
            });
        self.pending.push_back(Pending {
            seq,
            bytes: ByteString::from(frame),
            effect: effect.map(Box::new),
            history,
            ends_turn: TurnEnd::of(seq, event).map(Box::new),
            waiters: Vec::new(),
        });
        // Indexed rather than `back()`: it was just pushed, so no `None`.
        &self.pending[self.pending.len() - 1]
    }

    /// Which staged frames a notice that everything up to `up_to` is durable
    /// releases: exactly those with seq <= `up_to`, in seq order (none if they
    /// were released already), each with its waiters. They join the ring as
    /// they go.
    pub(super) fn durable(&mut self, up_to: u64) -> Vec<Pending> {
        let due = self.pending.iter().take_while(|p| p.seq <= up_to).count();
        let mut out: Vec<Pending> = self.pending.drain(..due).collect();
        for p in &mut out {
            if let Some(end) = p.ends_turn.as_deref() {
                for tx in self
                    .turn_waiters
                    .as_mut()
                    .and_then(|w| w.remove(end.turn_id()))
                    .unwrap_or_default()
                {
                    let end = end.clone();
                    p.waiters.push(Box::new(move || {
                        let _ = tx.send(end);
                    }));
                }
            }
            self.keep(p.seq, p.bytes.clone());
        }
        out
    }

    /// Gives back the room of the staged frames' queue while none is
    /// staged.
    pub(super) fn shrink_idle(&mut self) {
        if self.pending.is_empty() {
            self.pending = VecDeque::new();
        }
    }

    /// The room of the staged frames' queue, in frames.
    #[cfg(test)]
    pub(super) fn pending_capacity(&self) -> usize {
        self.pending.capacity()
    }

    /// Releases `seq`, which is durable, into the ring.
    fn keep(&mut self, seq: u64, bytes: ByteString) {
        self.released = seq;
        self.since_snapshot += 1;
        crate::room::push_back(&mut self.ring, (seq, bytes));
        if self.ring.len() > RING_FRAMES {
            self.ring.pop_front();
        }
    }

    /// Releases a frame another node made durable, read back from the
    /// journal by a node that tails the session: only the next seq, and
    /// only while nothing is staged here. Answers whether it was taken.
    pub(super) fn follow(&mut self, seq: u64, bytes: ByteString) -> bool {
        if seq != self.released + 1 || !self.pending.is_empty() {
            return false;
        }
        self.next_seq = seq + 1;
        self.keep(seq, bytes);
        true
    }

    /// The frames a connection resuming from `last_seq` needs from the
    /// journal before the ring's: `(after, up_to)`, when it resumes from
    /// before the ring and at most [`MAX_STORED_BACKLOG`] frames back.
    pub(super) fn stored_range(&self, last_seq: Option<u64>) -> Option<(u64, u64)> {
        let released = self.released;
        match last_seq {
            Some(n) if n < released && n + 1 < self.held_from() => Some((n, released)),
            _ => None,
        }
        .filter(|(n, top)| top - n <= MAX_STORED_BACKLOG)
    }

    /// [`Sequencer::backlog`] for a connection that last saw `last_seq`,
    /// given the frames read from the journal for [`Sequencer::stored_range`]
    /// (`(up_to, frames)`): they come first, the ring gives what follows.
    pub(super) fn resume(
        &self,
        last_seq: Option<u64>,
        stored: Option<(u64, Vec<(u64, String)>)>,
    ) -> Backlog {
        let Some((up_to, stored)) = stored else {
            return self.backlog(last_seq);
        };
        let mut backlog = self.backlog(Some(up_to));
        if backlog.resumed && !stored.is_empty() {
            let mut frames: Vec<ByteString> = stored
                .into_iter()
                .map(|(_, f)| ByteString::from(f))
                .collect();
            frames.append(&mut backlog.frames);
            backlog.frames = frames;
        }
        backlog
    }

    /// What a connection that last saw `last_seq` gets: resumed with the
    /// frames after it if the ring still holds all of them (or it saw the
    /// newest), else a fresh start; the welcome seq is always `released`.
    pub(super) fn backlog(&self, last_seq: Option<u64>) -> Backlog {
        let released = self.released;
        let held_from = self.held_from();
        let (resumed, frames) = match last_seq {
            Some(n) if n == released => (true, Vec::new()),
            Some(n) if n < released && held_from <= n + 1 => (
                true,
                self.ring
                    .iter()
                    .filter(|(s, _)| *s > n)
                    .map(|(_, b)| b.clone())
                    .collect(),
            ),
            _ => (false, Vec::new()),
        };
        Backlog {
            resumed,
            frames,
            welcome_seq: released,
        }
    }

    /// The highest seq handed out so far, durable or not.
    pub(super) fn last_staged(&self) -> u64 {
        self.next_seq - 1
    }

    /// The oldest seq the resume ring holds (`released + 1` when empty).
    pub(super) fn held_from(&self) -> u64 {
        self.ring.front().map_or(self.released + 1, |(s, _)| *s)
    }

    /// The highest seq that is durable and handed out.
    pub(super) fn released(&self) -> u64 {
        self.released
    }

    /// The staged frames not yet durable, in seq order.
    pub(super) fn pending(&self) -> impl Iterator<Item = &Pending> {
        self.pending.iter()
    }

    /// Whether any staged frame still waits for durability.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a tool's effect is staged but not yet durable: work that
    /// reads the state (a direct call, the turn's next step) waits for it.
    /// A turn's or a round's start and a round's action are no tool's
    /// effect, and no tool reads them; nothing waits for them.
    pub(super) fn effects_in_flight(&self) -> bool {
        self.pending.iter().any(|p| {
            matches!(p.effect.as_deref(), Some(e) if !matches!(
                e,
                Effect::BeginTurn { .. } | Effect::BeginRound { .. } | Effect::ActionSubmitted { .. }
            ))
        })
    }

    /// Whether a change to the party's round (an action, its resolution,
    /// a seat leaving, the mode) is staged but not yet durable.
    pub(super) fn round_in_flight(&self) -> bool {
        self.pending.iter().any(|p| {
            matches!(
                p.effect.as_deref(),
                Some(
                    Effect::ActionSubmitted { .. }
                        | Effect::BeginRound { .. }
                        | Effect::SeatChanged { .. }
                        | Effect::ModeChanged { .. }
                )
            )
        })
    }

    /// This sequencer, for a session loaded with `frames` journalled after
    /// the snapshot it was loaded from.
    pub(super) fn since_snapshot(mut self, frames: u64) -> Self {
        self.since_snapshot = frames;
        self
    }

    /// Whether enough frames were released since the last snapshot that the
    /// state should be written again.
    pub(super) fn snapshot_due(&self) -> bool {
        self.since_snapshot >= SNAPSHOT_EVERY
    }

    /// A snapshot of the released state was written.
    pub(super) fn snapshot_taken(&mut self) {
        self.since_snapshot = 0;
    }

    /// Whether the frame that ends `turn_id` is staged but not yet durable.
    pub(super) fn ends_pending(&self, turn_id: &TurnId) -> bool {
        self.pending
            .iter()
            .any(|p| p.ends_turn.as_ref().is_some_and(|e| e.turn_id() == turn_id))
    }

    /// Answers `turn_id`'s last frame once it is released; the caller
    /// knows the turn is still open (queued, running, or its end pending).
    /// Dropped unanswered if the session stops first.
    pub(super) fn await_turn_end(&mut self, turn_id: TurnId) -> oneshot::Receiver<TurnEnd> {
        let (tx, rx) = oneshot::channel();
        self.turn_waiters
            .get_or_insert_default()
            .entry(turn_id)
            .or_default()
            .push(tx);
        rx
    }

    /// Calls `waiter` once the frame `seq` is released: at once if it is
    /// already.
    pub(super) fn when_durable(&mut self, seq: u64, waiter: Waiter) {
        match self.pending.iter_mut().find(|p| p.seq == seq) {
            Some(p) => p.waiters.push(waiter),
            None if seq <= self.released => waiter(),
            // A seq not handed out yet has no frame to wait for.
            None => tracing::error!(seq, "a waiter for a frame never staged"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::llm::Usage;
    use crate::protocol::{StatePatch, TurnCompleted, TurnFailed, TurnLimit};

    fn presence(players: usize) -> StoryEvent {
        StoryEvent::Presence {
            players,
            spectators: 0,
            seats: Vec::new(),
        }
    }

    fn failed(turn_id: &str) -> StoryEvent {
        StoryEvent::TurnFailed(TurnFailed {
            turn_id: turn_id.into(),
            error_code: ErrorCode::InternalError,
            message: "stopped".into(),
            limit: None,
        })
    }

    fn completed(turn_id: &str) -> StoryEvent {
        StoryEvent::TurnCompleted(TurnCompleted {
            turn_id: turn_id.into(),
            reply: "You wade in.".into(),
            dialog_type: "narration".into(),
            iterations: 2,
            tool_events: Vec::new(),
            state_patch: StatePatch::default(),
            usage: Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
            },
            limit: Some(TurnLimit::RepeatedCall),
            model: None,
        })
    }

    /// The seq a frame's bytes carry.
    fn seq_of(bytes: &ByteString) -> u64 {
        let v: serde_json::Value = serde_json::from_str(bytes).expect("frame is JSON");
        v["seq"].as_u64().expect("frame has a seq")
    }

    fn seqs<'a>(frames: impl IntoIterator<Item = &'a ByteString>) -> Vec<u64> {
        frames.into_iter().map(seq_of).collect()
    }

    /// A restored ring holding `seqs`, as storage gives it.
    fn ring_of(seqs: impl IntoIterator<Item = u64>) -> VecDeque<(u64, ByteString)> {
        seqs.into_iter()
            .map(|s| (s, ByteString::from(format!(r#"{{"seq":{s}}}"#))))
            .collect()
    }

    /// A sequencer restored at `last_seq`, with `n` more frames staged.
    fn staged(last_seq: u64, n: usize) -> Sequencer {
        let mut sq = Sequencer::new(last_seq, VecDeque::new());
        for i in 0..n {
            sq.stage(presence(i), None, None);
        }
        sq
    }

    fn ring_seqs(sq: &Sequencer) -> Vec<u64> {
        sq.ring.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn an_idle_sequencer_gives_back_its_queues_room_and_keeps_what_is_staged() {
        let mut sq = staged(0, 3);
        sq.shrink_idle();
        assert_eq!(sq.pending.len(), 3, "staged frames stay");
        assert_eq!(sq.durable(2).len(), 2);
        sq.shrink_idle();
        assert_eq!(sq.pending.iter().map(|p| p.seq).collect::<Vec<_>>(), [3]);
        assert_eq!(sq.durable(3).len(), 1);
        assert!(sq.pending.capacity() > 0);
        sq.shrink_idle();
        assert_eq!(sq.pending.capacity(), 0);
        assert_eq!(ring_seqs(&sq), [1, 2, 3], "released frames stay for resume");
        assert_eq!(sq.stage(presence(4), None, None).seq, 4);
    }

    #[test]
    fn stage_numbers_frames_contiguously_after_the_restored_last_seq() {
        for last_seq in [0, 1, 41, 10_000] {
            let mut sq = Sequencer::new(last_seq, ring_of(last_seq.saturating_sub(2)..=last_seq));
            let mut got = Vec::new();
            for i in 0..5 {
                let p = sq.stage(presence(i), None, None);
                assert_eq!(seq_of(&p.bytes), p.seq, "the frame carries its own seq");
                got.push(p.seq);
            }
            let want: Vec<u64> = (last_seq + 1..=last_seq + 5).collect();
            assert_eq!(got, want, "restored at {last_seq}");
            assert_eq!(sq.next_seq, last_seq + 6);
            assert_eq!(seqs(sq.pending().map(|p| &p.bytes)), want);
        }
    }

    #[test]
    fn seqs_are_never_reused_across_releases() {
        let mut sq = staged(7, 3);
        sq.durable(10);
        let p = sq.stage(presence(0), None, None);
        assert_eq!(p.seq, 11);
        sq.durable(11);
        assert_eq!(sq.stage(presence(0), None, None).seq, 12);
    }

    #[test]
    fn a_staged_frame_keeps_its_effect_history_and_turn_end() {
        let cases: [(&str, StoryEvent, Option<&str>); 5] = [
            ("presence", presence(1), None),
            ("turn_failed", failed("turn_3"), Some("turn_3")),
            ("turn_completed", completed("turn_5"), Some("turn_5")),
            (
                "turn_started",
                StoryEvent::TurnStarted {
                    turn_id: "turn_4".into(),
                    request_id: None,
                    actor_id: "pc".into(),
                    text: "hello".into(),
                    seat_id: None,
                    round: None,
                    actions: None,
                    world: None,
                },
                None,
            ),
            (
                "narrative_delta",
                StoryEvent::NarrativeDelta {
                    turn_id: "turn_4".into(),
                    text: "once".into(),
                },
                None,
            ),
        ];
        for (name, event, ends_turn) in cases {
            let mut sq = Sequencer::new(0, VecDeque::new());
            let effect = Effect::BeginTurn { turn: 9 };
            let history = Arc::new(HistoryEntry::User {
                turn_id: "turn_9".into(),
                text: name.into(),
                seat_id: None,
            });
            let kind = event.kind();
            let p = sq.stage(event, Some(effect.clone()), Some(history.clone()));
            let frame: serde_json::Value = serde_json::from_str(&p.bytes).expect("frame is JSON");
            assert_eq!(frame["type"], kind, "{name}");
            assert_eq!(p.effect.as_deref(), Some(&effect), "{name}");
            assert_eq!(p.history.as_deref(), Some(&*history), "{name}");
            let ended = |p: &Pending| p.ends_turn.as_ref().map(|e| e.turn_id().to_string());
            assert_eq!(ended(p).as_deref(), ends_turn, "{name}");
            // Those waiting get what the journalled frame reads back as.
            let read_back = serde_json::from_str::<TurnEnd>(&p.bytes).ok();
            assert_eq!(p.ends_turn.as_deref(), read_back.as_ref(), "{name}");
            let released = sq.durable(1);
            assert_eq!(released.len(), 1, "{name}");
            assert_eq!(ended(&released[0]).as_deref(), ends_turn, "{name}");
            assert_eq!(released[0].effect.as_deref(), Some(&effect), "{name}");
        }
    }

    #[test]
    fn a_journal_row_carries_the_staged_frame_and_what_it_does() {
        let mut sq = Sequencer::new(4, VecDeque::new());
        let effect = Effect::BeginTurn { turn: 2 };
        let history = HistoryEntry::User {
            turn_id: "turn_2".into(),
            text: "look".into(),
            seat_id: None,
        };
        let row = sq.journal(
            &"sess_1".into(),
            Entry {
                event: StoryEvent::TurnStarted {
                    turn_id: "turn_2".into(),
                    request_id: Some("r-1".into()),
                    actor_id: "pc".into(),
                    text: "look".into(),
                    seat_id: None,
                    round: None,
                    actions: None,
                    world: None,
                },
                effect: Some(effect.clone()),
                history: Some(history.clone()),
                history_from_frame: false,
                action: Some(StoredAction::Json(r#"{"tool":"roll"}"#.to_owned())),
            },
        );
        let ids = (row.turn_id.as_deref(), row.request_id.as_deref());
        assert_eq!((row.session_id.as_str(), row.seq), ("sess_1", 5));
        assert_eq!(
            (row.kind, ids),
            ("turn_started", (Some("turn_2"), Some("r-1")))
        );
        let staged = sq.pending().next().expect("the frame is staged");
        assert_eq!(row.frame, &*staged.bytes, "the row holds the bytes sent");
        let effect_json = row.effect.as_deref().expect("the effect is journalled");
        assert_eq!(
            serde_json::from_str::<Effect>(effect_json).ok(),
            Some(effect)
        );
        let Some(StoredHistory::Json(history_json)) = &row.history else {
            panic!("the history is journalled: {:?}", row.history);
        };
        let read_back = serde_json::from_str::<HistoryEntry>(history_json).ok();
        assert_eq!(read_back, Some(history));
        assert_eq!(
            row.action,
            Some(StoredAction::Json(r#"{"tool":"roll"}"#.to_owned()))
        );

        let row = sq.journal(&"sess_1".into(), Entry::frame(presence(1)));
        assert_eq!(row.seq, 6);
        assert_eq!(
            (row.kind, row.turn_id, row.request_id),
            ("presence", None, None)
        );
        assert_eq!((row.effect, row.history, row.action), (None, None, None));
    }

    /// Calls the waiters of released frames, as the actor does once it has
    /// sent them.
    fn answer(released: Vec<Pending>) {
        for p in released {
            for w in p.waiters {
                w();
            }
        }
    }

    fn waiting(rx: &mut oneshot::Receiver<TurnEnd>) -> bool {
        matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
    }

    #[test]
    fn those_waiting_for_a_turn_hear_its_end_as_it_is_released() {
        let mut sq = Sequencer::new(0, VecDeque::new());
        // Waiting before the turn's end is staged, as for a queued turn.
        let mut early = sq.await_turn_end("turn_3".into());
        let mut other = sq.await_turn_end("turn_4".into());
        sq.stage(presence(1), None, None);
        sq.stage(failed("turn_3"), None, None);
        assert!(sq.ends_pending(&"turn_3".into()));
        assert!(!sq.ends_pending(&"turn_4".into()));
        let mut late = sq.await_turn_end("turn_3".into());

        answer(sq.durable(1));
        assert!(
            waiting(&mut early) && waiting(&mut late),
            "not before its seq"
        );
        let released = sq.durable(2);
        assert_eq!(released[0].waiters.len(), 2);
        assert!(waiting(&mut early), "not before the actor answers");
        answer(released);
        for rx in [&mut early, &mut late] {
            let end = rx.try_recv().expect("the end is answered");
            assert_eq!((end.seq, end.turn_id().as_str()), (2, "turn_3"));
        }
        assert!(!sq.ends_pending(&"turn_3".into()));
        assert!(waiting(&mut other), "another turn's waiter still waits");
    }

    #[test]
    fn a_waiter_for_a_seq_is_called_when_that_seq_is_released() {
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let note = |n: u64| -> Waiter {
            let heard = heard.clone();
            Box::new(move || heard.lock().expect("not poisoned").push(n))
        };
        let heard_now = || heard.lock().expect("not poisoned").clone();
        let mut sq = staged(10, 3);
        sq.when_durable(12, note(12));
        sq.when_durable(13, note(13));
        answer(sq.durable(11));
        assert_eq!(heard_now(), Vec::<u64>::new());
        answer(sq.durable(12));
        assert_eq!(heard_now(), [12]);
        sq.when_durable(11, note(11));
        assert_eq!(heard_now(), [12, 11], "a released seq is answered at once");
        answer(sq.durable(13));
        assert_eq!(heard_now(), [12, 11, 13]);
    }

    #[test]
    fn only_a_tools_effect_staged_is_in_flight() {
        let mut sq = Sequencer::new(0, VecDeque::new());
        sq.stage(presence(1), None, None);
        sq.stage(presence(2), Some(Effect::BeginTurn { turn: 1 }), None);
        assert!(
            !sq.effects_in_flight(),
            "a frame without one, a turn's start"
        );
        let moved = Effect::Move {
            character_id: "pc_001".into(),
            to_area_id: "area_002".into(),
        };
        sq.stage(presence(3), Some(moved), None);
        assert!(sq.effects_in_flight());
        sq.durable(3);
        assert!(!sq.effects_in_flight(), "durable effects are applied");
    }

    #[test]
    fn only_a_change_to_the_round_staged_holds_the_round_in_flight() {
        let mut sq = Sequencer::new(0, VecDeque::new());
        let moved = Effect::Move {
            character_id: "pc_001".into(),
            to_area_id: "area_002".into(),
        };
        sq.stage(presence(1), Some(moved), None);
        assert!(!sq.round_in_flight(), "a tool's effect");
        let kicked = Effect::SeatChanged {
            seat_id: "seat_2".into(),
            role: crate::game::party::SeatRole::Player,
            state: crate::game::party::SeatState::Kicked,
        };
        sq.stage(presence(2), Some(kicked), None);
        assert!(sq.round_in_flight());
        sq.durable(2);
        assert!(!sq.round_in_flight(), "durable changes are applied");
    }

    #[test]
    fn a_snapshot_is_due_every_snapshot_every_released_frames() {
        let mut sq = staged(0, SNAPSHOT_EVERY as usize * 2);
        sq.durable(SNAPSHOT_EVERY - 1);
        assert!(!sq.snapshot_due());
        sq.durable(SNAPSHOT_EVERY);
        assert!(sq.snapshot_due(), "counted across notices");
        sq.snapshot_taken();
        assert!(!sq.snapshot_due());
        sq.durable(SNAPSHOT_EVERY * 2 - 1);
        assert!(!sq.snapshot_due(), "counted from the last snapshot");
        sq.durable(SNAPSHOT_EVERY * 2);
        assert!(sq.snapshot_due());
    }

    #[test]
    fn nothing_is_handed_out_before_a_durable_notice() {
        let mut sq = Sequencer::new(20, ring_of(18..=20));
        for i in 0..4 {
            sq.stage(presence(i), None, None);
        }
        assert_eq!(sq.released(), 20);
        assert!(sq.has_pending());
        assert_eq!(
            ring_seqs(&sq),
            [18, 19, 20],
            "staged frames are not in the ring"
        );
        for last_seq in [None, Some(17), Some(19), Some(20), Some(21), Some(24)] {
            let b = sq.backlog(last_seq);
            assert_eq!(b.welcome_seq, 20, "last_seq {last_seq:?}");
            assert!(
                seqs(&b.frames).iter().all(|s| *s <= 20),
                "last_seq {last_seq:?} got a staged frame"
            );
        }
    }

    #[test]
    fn durable_releases_exactly_the_staged_seqs_up_to_the_notice_in_order() {
        // Five frames staged as seqs 11..=15; each case is a run of notices
        // and, per notice, the seqs it releases.
        type Notice = (u64, &'static [u64]);
        let cases: &[(&str, &[Notice])] = &[
            ("one notice for all", &[(15, &[11, 12, 13, 14, 15])]),
            ("one notice for some", &[(13, &[11, 12, 13])]),
            ("in steps", &[(11, &[11]), (14, &[12, 13, 14]), (15, &[15])]),
            (
                "repeated",
                &[(13, &[11, 12, 13]), (13, &[]), (15, &[14, 15])],
            ),
            (
                "lower after higher",
                &[(14, &[11, 12, 13, 14]), (12, &[]), (11, &[])],
            ),
            ("below everything staged", &[(10, &[]), (0, &[])]),
            (
                "past everything staged",
                &[(99, &[11, 12, 13, 14, 15]), (99, &[])],
            ),
        ];
        for (name, notices) in cases {
            let mut sq = staged(10, 5);
            let mut released = 10;
            for (up_to, want) in *notices {
                let got = sq.durable(*up_to);
                let got_seqs: Vec<u64> = got.iter().map(|p| p.seq).collect();
                assert_eq!(&got_seqs, want, "{name}: notice {up_to}");
                assert_eq!(seqs(got.iter().map(|p| &p.bytes)), *want, "{name}: bytes");
                if let Some(last) = want.last() {
                    released = *last;
                }
                assert_eq!(sq.released(), released, "{name}: released after {up_to}");
                let left: Vec<u64> = sq.pending().map(|p| p.seq).collect();
                let want_left: Vec<u64> = (released + 1..=15).collect();
                assert_eq!(left, want_left, "{name}: still pending after {up_to}");
                assert_eq!(sq.has_pending(), released < 15, "{name}");
                let want_ring: Vec<u64> = (11..=released).collect();
                assert_eq!(ring_seqs(&sq), want_ring, "{name}: ring after {up_to}");
            }
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_ring_frames() {
        let extra = 10;
        let total = (RING_FRAMES + extra) as u64;
        let mut sq = staged(0, RING_FRAMES + extra);
        // Released in two notices, so the trimming happens across both.
        sq.durable(total / 2);
        sq.durable(total);
        assert_eq!(sq.ring.len(), RING_FRAMES);
        let want: Vec<u64> = (extra as u64 + 1..=total).collect();
        assert_eq!(ring_seqs(&sq), want);
        assert_eq!(seqs(sq.ring.iter().map(|(_, b)| b)), want);

        // A restored ring is held to the same bound, newest kept.
        let sq = Sequencer::new(total, ring_of(1..=total));
        assert_eq!(ring_seqs(&sq), want);
    }

    #[test]
    fn backlog_follows_the_resume_rules() {
        // Restored at 100 with frames 90..=100 in the ring, then 101..=103
        // staged and released, and 104..=105 staged but not durable.
        let mut sq = Sequencer::new(100, ring_of(90..=100));
        for i in 0..5 {
            sq.stage(presence(i), None, None);
        }
        sq.durable(103);
        let cases: &[(&str, Option<u64>, bool, &[u64])] = &[
            ("a fresh connection", None, false, &[]),
            ("saw the newest released frame", Some(103), true, &[]),
            (
                "saw a frame in the ring",
                Some(97),
                true,
                &[98, 99, 100, 101, 102, 103],
            ),
            (
                "saw a released frame after restore",
                Some(101),
                true,
                &[102, 103],
            ),
            (
                "saw the frame just before the ring",
                Some(89),
                true,
                &[90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103],
            ),
            ("saw a frame older than the ring", Some(88), false, &[]),
            ("saw nothing yet", Some(0), false, &[]),
            ("claims a staged, not durable, seq", Some(104), false, &[]),
            ("claims a seq never handed out", Some(500), false, &[]),
            ("claims the largest seq", Some(u64::MAX), false, &[]),
        ];
        for (name, last_seq, resumed, frames) in cases {
            let b = sq.backlog(*last_seq);
            assert_eq!(b.resumed, *resumed, "{name}");
            assert_eq!(seqs(&b.frames), *frames, "{name}");
            assert_eq!(b.welcome_seq, 103, "{name}: welcome carries released");
        }
    }

    #[test]
    fn backlog_with_an_empty_ring() {
        // A new session (0, nothing held) and a restored one whose ring is
        // empty: only a connection that saw `released` resumes.
        let cases: &[(&str, u64, Option<u64>, bool)] = &[
            ("new, fresh connection", 0, None, false),
            ("new, saw seq 0", 0, Some(0), true),
            ("new, claims seq 1", 0, Some(1), false),
            ("restored, saw released", 5, Some(5), true),
            ("restored, saw an earlier seq", 5, Some(3), false),
            ("restored, saw the one before", 5, Some(4), false),
        ];
        for (name, last_seq, seen, resumed) in cases {
            let sq = Sequencer::new(*last_seq, VecDeque::new());
            let b = sq.backlog(*seen);
            assert_eq!(
                b,
                Backlog {
                    resumed: *resumed,
                    frames: Vec::new(),
                    welcome_seq: *last_seq,
                },
                "{name}"
            );
        }
    }

    #[test]
    fn backlog_after_the_ring_wrapped() {
        let total = (RING_FRAMES + 20) as u64;
        let mut sq = staged(0, RING_FRAMES + 20);
        sq.durable(total);
        let oldest = total - RING_FRAMES as u64 + 1;
        let b = sq.backlog(Some(oldest - 1));
        assert!(b.resumed);
        assert_eq!(b.frames.len(), RING_FRAMES);
        assert_eq!(seqs(&b.frames).first(), Some(&oldest));
        let before = sq.backlog(Some(oldest - 2));
        assert!(!before.resumed);
        assert!(before.frames.is_empty());
    }

    #[test]
    fn a_backlog_and_its_welcome_fit_the_resume_bound_or_start_afresh() {
        let frame = |n: usize| ByteString::from("x".repeat(n));
        // (name, welcome bytes, frame sizes, bound, resumed after)
        let cases: &[(&str, usize, &[usize], usize, bool)] = &[
            ("well within", 10, &[10, 10], 100, true),
            ("exactly the bound", 40, &[30, 30], 100, true),
            ("one byte over", 41, &[30, 30], 100, false),
            ("the frames alone are over", 0, &[60, 60], 100, false),
            ("the welcome alone is over, no frames", 500, &[], 100, true),
            ("the welcome is over, with frames", 500, &[1], 100, false),
            ("nothing at all", 0, &[], 0, true),
        ];
        for (name, welcome, sizes, bound, resumed) in cases {
            let backlog = Backlog {
                resumed: true,
                frames: sizes.iter().map(|n| frame(*n)).collect(),
                welcome_seq: 7,
            };
            let got = backlog.within(*welcome, *bound);
            assert_eq!(got.resumed, *resumed, "{name}");
            assert_eq!(got.welcome_seq, 7, "{name}: the welcome seq stays");
            let want = if *resumed { sizes.len() } else { 0 };
            assert_eq!(got.frames.len(), want, "{name}");
        }
        // A fresh start stays one.
        let fresh = Backlog {
            resumed: false,
            frames: Vec::new(),
            welcome_seq: 3,
        };
        assert!(!fresh.within(usize::MAX, 1).resumed);
    }

    #[test]
    fn a_follower_takes_only_the_next_seq_and_stops_at_a_gap() {
        let mut sequencer = Sequencer::new(3, VecDeque::new());
        for (seq, taken) in [(3, false), (5, false), (4, true), (4, false), (5, true)] {
            let bytes = ByteString::from(format!(r#"{{"seq":{seq}}}"#));
            assert_eq!(sequencer.follow(seq, bytes), taken, "seq {seq}");
        }
        assert_eq!(sequencer.released(), 5);
        let backlog = sequencer.backlog(Some(3));
        assert!(backlog.resumed);
        assert_eq!(backlog.frames, [r#"{"seq":4}"#, r#"{"seq":5}"#]);
        assert_eq!(backlog.welcome_seq, 5);
        // Nothing is taken while a frame of this node's own waits.
        sequencer.stage(presence(1), None, None);
        assert!(!sequencer.follow(6, ByteString::from("{}")));
    }
}
