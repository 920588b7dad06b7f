//! Release: what a session does once the writer says its frames are
//! durable up to a seq, and the rows it holds until a step is over.
//!
//! Every frame released is applied to the state (its effect, its history
//! entry) and sent, in seq order; a chat's ack goes to its connection just
//! ahead of the frame that made the chat durable, and frames released
//! together go in one message per connection ([`Batch`]), cut only where
//! an ack must go between them. Whoever waited for a frame is told after
//! it is sent. Pure: [`release`] answers what to send and whom to tell,
//! and the session carries it out.
//!
//! The rows a step makes (a whole turn, when the model answers at once)
//! wait in [`Writes`] until the step is over, so they share a commit and
//! go out to each connection in one write.

use bytestring::ByteString;

use super::acks::{Ack, Acks};
use super::sequencer::{Sequencer, Waiter};
use crate::game::{Effect, GameState};
use crate::storage::SessionWrite;

/// Frames to send together, with acks ahead of them for the connections
/// they go to.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Batch {
    pub(super) acks: Vec<Ack>,
    pub(super) frames: Vec<ByteString>,
}

/// What a release answers.
pub(super) struct Released {
    /// What to send, in this order.
    pub(super) batches: Vec<Batch>,
    /// Whom to tell once the batches are sent.
    pub(super) waiters: Vec<Waiter>,
    /// An effect changed more than the turn number: what the model is told
    /// of the state must be read again.
    pub(super) state_changed: bool,
    /// Enough story went by since the last snapshot: write one.
    pub(super) snapshot_due: bool,
}

/// Releases every frame journalled up to `up_to`: applies each to `state`
/// and answers what to send, with the acks `acks` holds for them.
pub(super) fn release(
    up_to: u64,
    sequencer: &mut Sequencer,
    acks: &mut Acks,
    state: &mut GameState,
) -> Released {
    let pending = sequencer.durable(up_to);
    let mut batches = Vec::new();
    let mut batch = Batch {
        acks: Vec::new(),
        frames: Vec::with_capacity(pending.len()),
    };
    let mut waiters = Vec::new();
    let mut state_changed = false;
    for p in pending {
        // A chat that started at once is acknowledged with its durable
        // `turn_started`, just ahead of it.
        let due = acks.before(p.seq);
        if !due.is_empty() {
            if !batch.frames.is_empty() {
                batches.push(std::mem::take(&mut batch));
            }
            batch.acks.extend(due);
        }
        if let Some(effect) = p.effect.as_deref() {
            state.apply(effect);
            // A turn's start changes only the turn number, which the
            // context takes from the turn.
            state_changed |= !matches!(effect, Effect::BeginTurn { .. });
        }
        if let Some(entry) = p.history {
            state.record(entry);
        }
        batch.frames.push(p.bytes);
        waiters.extend(p.waiters);
    }
    batches.push(batch);
    Released {
        batches,
        waiters,
        state_changed,
        snapshot_due: sequencer.snapshot_due(),
    }
}

/// Journal and audit rows made in the step under way, in order, not yet
/// handed to the writer.
#[derive(Default)]
pub(super) struct Writes {
    unsent: Vec<SessionWrite>,
    /// How many the last step held: the next step's writes are about as
    /// many, and get that room at their first (an idle session keeps none).
    last: usize,
}

impl Writes {
    /// Holds `write` until the step is over; answers whether it is the
    /// step's first, so the session asks for the rows to be handed over
    /// once the step is over.
    pub(super) fn hold(&mut self, write: SessionWrite) -> bool {
        if self.unsent.capacity() == 0 {
            self.unsent.reserve_exact(self.last.max(1));
        }
        self.unsent.push(write);
        self.unsent.len() == 1
    }

    /// The rows held, in the order they were made: handed to the writer
    /// when a step is over, and before any other write of the session,
    /// which must not overtake them.
    pub(super) fn take(&mut self) -> Vec<SessionWrite> {
        self.last = self.unsent.len();
        std::mem::take(&mut self.unsent)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::game::party::host_seat;
    use crate::ids::TurnId;
    use crate::protocol::StoryEvent;
    use crate::session::sequencer::Entry;
    use crate::session::turn_frames;
    use crate::tools::test_support::demo;

    /// A batch as its acks (`connection:frame`) and its frames' types.
    type Sent<'a> = (Vec<&'a str>, Vec<&'a str>);

    fn presence(players: usize) -> Entry {
        Entry::frame(StoryEvent::Presence {
            players,
            spectators: 0,
            seats: Vec::new(),
        })
    }

    /// What a batch says: its acks' frames, then its frames' types.
    fn said(batches: &[Batch]) -> Vec<(Vec<String>, Vec<String>)> {
        let kind = |f: &ByteString| {
            let v: serde_json::Value = serde_json::from_str(f).expect("JSON");
            v["type"].as_str().unwrap_or_default().to_owned()
        };
        batches
            .iter()
            .map(|b| {
                let acks = b.acks.iter().map(|(c, a)| format!("{c}:{a}")).collect();
                (acks, b.frames.iter().map(kind).collect())
            })
            .collect()
    }

    #[test]
    fn frames_go_out_in_order_once_durable_with_each_ack_just_ahead_of_its_frame() {
        let state0 = demo();
        let turn_no = state0.turn + 1;
        // (released up to, batches sent: acks then frame types, the turn after)
        let cases: [(u64, Vec<Sent>, u64); 3] = [
            // Not durable yet: nothing goes, nothing is applied.
            (0, vec![(vec![], vec![])], state0.turn),
            // The presence frame alone; the ack waits for turn_started.
            (1, vec![(vec![], vec!["presence"])], state0.turn),
            // The ack cuts the release: frames before it, then it and
            // its frame with the ones after.
            (
                4,
                vec![
                    (vec![], vec!["presence", "presence"]),
                    (vec!["7:ack"], vec!["turn_started", "presence"]),
                ],
                turn_no,
            ),
        ];
        for (up_to, want, turn) in cases {
            let mut state = state0.clone();
            let mut sequencer = Sequencer::new(0, VecDeque::new());
            let mut acks = Acks::default();
            let turn_id = TurnId::from(format!("turn_{turn_no}"));
            let mut journal = |e| sequencer.journal(&"s".into(), e).seq;
            journal(presence(1));
            journal(presence(2));
            let started =
                turn_frames::started(&state, turn_no, &turn_id, None, "go".into(), &host_seat());
            let seq = journal(started);
            journal(presence(3));
            acks.taken(turn_id.clone(), Some((7, "ack".into())));
            acks.started(turn_id, seq);
            let told = Arc::new(AtomicUsize::new(0));
            let t = told.clone();
            sequencer.when_durable(
                seq,
                Box::new(move || {
                    t.fetch_add(1, Ordering::SeqCst);
                }),
            );
            let released = release(up_to, &mut sequencer, &mut acks, &mut state);
            let want: Vec<(Vec<String>, Vec<String>)> = want
                .into_iter()
                .map(|(a, f)| {
                    let own = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect();
                    (own(a), own(f))
                })
                .collect();
            assert_eq!(said(&released.batches), want, "up to {up_to}");
            assert_eq!(state.turn, turn, "up to {up_to}");
            for w in released.waiters {
                w();
            }
            assert_eq!(told.load(Ordering::SeqCst), usize::from(up_to >= seq));
            assert!(
                !released.state_changed,
                "a turn's start changes only its number"
            );
        }
    }

    #[test]
    fn a_step_hands_over_its_rows_together_in_order() {
        let mut writes = Writes::default();
        let row = |seq: u64| {
            let mut sequencer = Sequencer::new(seq - 1, VecDeque::new());
            SessionWrite::Row(sequencer.journal(&"s".into(), presence(1)))
        };
        assert!(writes.hold(row(1)), "the step's first row asks for a flush");
        assert!(!writes.hold(row(2)), "the flush is asked for already");
        let seqs = |w: Vec<SessionWrite>| -> Vec<u64> {
            w.into_iter()
                .map(|w| match w {
                    SessionWrite::Row(r) => r.seq,
                    _ => 0,
                })
                .collect()
        };
        assert_eq!(seqs(writes.take()), [1, 2]);
        assert!(writes.take().is_empty());
        assert!(writes.hold(row(3)), "a new step");
    }
}
