//! Every ack a session owes, held back until what it acknowledges is
//! durable (an `ack` means the chat is durable). A chat taken while other
//! work waits is stored in the inbox first and acknowledged once its row
//! is durable ([`Acks::stored`]); a chat that starts at once is
//! acknowledged right ahead of its turn's `turn_started` frame, which is
//! what makes it durable ([`Acks::started`], [`Acks::before`]); a
//! duplicate waits for whichever the chat it repeats waits for, and goes
//! after its ack. Pure bookkeeping: the session asks what to send as rows
//! become durable and frames are released.

use std::collections::VecDeque;

use bytestring::ByteString;

use crate::ids::TurnId;

/// One held ack: sent right before the frame `seq` goes out.
struct Held {
    seq: u64,
    conn_id: u64,
    ack: ByteString,
}

/// One ack to send: the connection and the frame.
pub(super) type Ack = (u64, ByteString);

/// The acks held back, and the turns whose `turn_started` is not durable.
#[derive(Default)]
pub(super) struct Acks {
    /// Acks of chats taken and not started, by turn, in the order they
    /// came: the chat's own first, then its duplicates'. Sent once the
    /// chat's inbox row is durable, or held for its `turn_started`.
    queued: Vec<(TurnId, Vec<Ack>)>,
    /// In seq order.
    held: VecDeque<Held>,
    /// Started turns whose `turn_started` (this seq) is not released yet,
    /// oldest first.
    unreleased_starts: VecDeque<(TurnId, u64)>,
}

impl Acks {
    /// The chat `turn_id` was taken, not started: its `ack`, if it has one,
    /// waits for it to be durable.
    pub(super) fn taken(&mut self, turn_id: TurnId, ack: Option<Ack>) {
        if let Some(ack) = ack {
            self.queued.push((turn_id, vec![ack]));
        }
    }

    /// The inbox row of the chat `turn_id` is durable: its acks to send now.
    pub(super) fn stored(&mut self, turn_id: &TurnId) -> Vec<Ack> {
        match self.queued.iter().position(|(id, _)| id == turn_id) {
            Some(at) => self.queued.remove(at).1,
            None => Vec::new(),
        }
    }

    /// `turn_id` started with its `turn_started` at `seq`: the acks still
    /// waiting for it go out right before that frame.
    pub(super) fn started(&mut self, turn_id: TurnId, seq: u64) {
        for (conn_id, ack) in self.stored(&turn_id) {
            self.hold(seq, conn_id, ack);
        }
        self.unreleased_starts.push_back((turn_id, seq));
    }

    /// Holds a duplicate's ack until the chat it repeats is durable, after
    /// that chat's own ack; answers it back when there is nothing to wait
    /// for.
    pub(super) fn duplicate(
        &mut self,
        turn_id: &TurnId,
        conn_id: u64,
        ack: ByteString,
    ) -> Option<Ack> {
        if let Some((_, acks)) = self.queued.iter_mut().find(|(id, _)| id == turn_id) {
            acks.push((conn_id, ack));
            return None;
        }
        let waiting = self
            .unreleased_starts
            .iter()
            .find(|(id, _)| id == turn_id)
            .map(|(_, seq)| *seq);
        match waiting {
            Some(seq) => {
                self.hold(seq, conn_id, ack);
                None
            }
            None => Some((conn_id, ack)),
        }
    }

    /// The frame `seq` is about to go out: the acks to send first.
    pub(super) fn before(&mut self, seq: u64) -> Vec<Ack> {
        while self
            .unreleased_starts
            .front()
            .is_some_and(|(_, start)| *start <= seq)
        {
            self.unreleased_starts.pop_front();
        }
        let mut due = Vec::new();
        while self.held.front().is_some_and(|h| h.seq <= seq) {
            if let Some(h) = self.held.pop_front() {
                due.push((h.conn_id, h.ack));
            }
        }
        due
    }

    /// Holds `ack` for the frame `seq`, after any held for it already.
    fn hold(&mut self, seq: u64, conn_id: u64, ack: ByteString) {
        let at = self.held.partition_point(|h| h.seq <= seq);
        self.held.insert(at, Held { seq, conn_id, ack });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(due: Vec<(u64, ByteString)>) -> Vec<(u64, String)> {
        due.into_iter().map(|(c, a)| (c, a.to_string())).collect()
    }

    #[test]
    fn an_ack_goes_right_before_its_turn_started_and_a_duplicate_after_it() {
        let mut acks = Acks::default();
        acks.taken(TurnId::from("turn_1"), Some((1, ByteString::from("ack-1"))));
        acks.started(TurnId::from("turn_1"), 5);
        // A duplicate from another connection waits for the same frame.
        assert_eq!(
            acks.duplicate(&TurnId::from("turn_1"), 2, "dup".into()),
            None
        );
        acks.taken(TurnId::from("turn_2"), Some((1, ByteString::from("ack-2"))));
        acks.started(TurnId::from("turn_2"), 9);
        assert!(acks.before(4).is_empty(), "nothing before the turn starts");
        assert_eq!(
            sent(acks.before(5)),
            [(1, "ack-1".to_owned()), (2, "dup".to_owned())]
        );
        // Once its turn_started is out, a duplicate needs no wait.
        assert_eq!(
            acks.duplicate(&TurnId::from("turn_1"), 3, "late".into()),
            Some((3, ByteString::from("late")))
        );
        assert_eq!(sent(acks.before(12)), [(1, "ack-2".to_owned())]);
        assert!(acks.before(13).is_empty());
    }

    #[test]
    fn a_duplicate_of_an_older_turn_keeps_seq_order() {
        let mut acks = Acks::default();
        acks.taken(TurnId::from("turn_1"), None);
        acks.started(TurnId::from("turn_1"), 3);
        acks.taken(TurnId::from("turn_2"), Some((1, ByteString::from("ack-2"))));
        acks.started(TurnId::from("turn_2"), 7);
        assert_eq!(
            acks.duplicate(&TurnId::from("turn_1"), 2, "dup-1".into()),
            None
        );
        assert_eq!(sent(acks.before(3)), [(2, "dup-1".to_owned())]);
        assert_eq!(sent(acks.before(7)), [(1, "ack-2".to_owned())]);
    }

    #[test]
    fn a_stored_chat_is_acknowledged_once_its_row_is_durable_with_its_duplicates() {
        let t = |id: &str| TurnId::from(id);
        let ack = |conn: u64, text: &str| Some((conn, ByteString::from(text)));
        // (what happens, the acks it sends at once)
        enum Step {
            Taken(&'static str, Option<Ack>),
            Duplicate(&'static str, u64, &'static str),
            Stored(&'static str),
            Started(&'static str, u64),
            Before(u64),
        }
        use Step::*;
        let cases: Vec<(Step, Vec<(u64, &str)>)> = vec![
            (Taken("turn_2", ack(1, "ack-2")), vec![]),
            // Waits behind the chat's own ack, whatever its connection.
            (Duplicate("turn_2", 2, "dup-2"), vec![]),
            (Taken("turn_3", ack(1, "ack-3")), vec![]),
            // A chat taken without a connection owes nothing.
            (Taken("turn_4", None), vec![]),
            (Stored("turn_2"), vec![(1, "ack-2"), (2, "dup-2")]),
            (Stored("turn_4"), vec![]),
            // Stored, not started: a duplicate now needs no wait.
            (Duplicate("turn_2", 3, "late-2"), vec![(3, "late-2")]),
            // Started before its row was durable: held for turn_started.
            (Started("turn_3", 20), vec![]),
            (Duplicate("turn_3", 2, "dup-3"), vec![]),
            (Stored("turn_3"), vec![]),
            (Before(19), vec![]),
            (Before(20), vec![(1, "ack-3"), (2, "dup-3")]),
            (Duplicate("turn_3", 4, "late-3"), vec![(4, "late-3")]),
        ];
        let mut acks = Acks::default();
        for (i, (step, want)) in cases.into_iter().enumerate() {
            let out: Vec<Ack> = match step {
                Taken(id, a) => {
                    acks.taken(t(id), a);
                    Vec::new()
                }
                Duplicate(id, conn, text) => acks
                    .duplicate(&t(id), conn, text.into())
                    .into_iter()
                    .collect(),
                Stored(id) => acks.stored(&t(id)),
                Started(id, seq) => {
                    acks.started(t(id), seq);
                    Vec::new()
                }
                Before(seq) => acks.before(seq),
            };
            let want: Vec<(u64, String)> =
                want.into_iter().map(|(c, a)| (c, a.to_owned())).collect();
            assert_eq!(sent(out), want, "step {i}");
        }
    }
}
