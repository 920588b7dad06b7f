//! Acks held back until what they acknowledge is durable (an `ack` means
//! the chat is durable). A chat that starts at once is acknowledged right
//! ahead of its turn's `turn_started` frame, which is what makes it
//! durable; a duplicate of a chat whose `turn_started` is not durable yet
//! waits for it too. Pure bookkeeping: the actor asks what to send as
//! frames are released.

use std::collections::VecDeque;

use bytestring::ByteString;

use crate::ids::TurnId;

/// One held ack: sent right before the frame `seq` goes out.
struct Held {
    seq: u64,
    conn_id: u64,
    ack: ByteString,
}

/// The acks held back, and the turns whose `turn_started` is not durable.
#[derive(Default)]
pub(super) struct Acks {
    /// In seq order.
    held: VecDeque<Held>,
    /// Started turns whose `turn_started` (this seq) is not released yet,
    /// oldest first.
    unreleased_starts: VecDeque<(TurnId, u64)>,
}

impl Acks {
    /// `turn_id` started with its `turn_started` at `seq`; `acks` (the
    /// connection and the frame) go out right before it.
    pub(super) fn started(
        &mut self,
        turn_id: TurnId,
        seq: u64,
        acks: impl IntoIterator<Item = (u64, ByteString)>,
    ) {
        self.unreleased_starts.push_back((turn_id, seq));
        for (conn_id, ack) in acks {
            self.hold(seq, conn_id, ack);
        }
    }

    /// Holds a duplicate's ack until its turn's `turn_started` is released;
    /// answers it back when there is nothing to wait for.
    pub(super) fn duplicate(
        &mut self,
        turn_id: &TurnId,
        conn_id: u64,
        ack: ByteString,
    ) -> Option<(u64, ByteString)> {
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
    pub(super) fn before(&mut self, seq: u64) -> Vec<(u64, ByteString)> {
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
        acks.started(TurnId::from("turn_1"), 5, [(1, ByteString::from("ack-1"))]);
        // A duplicate from another connection waits for the same frame.
        assert_eq!(
            acks.duplicate(&TurnId::from("turn_1"), 2, "dup".into()),
            None
        );
        acks.started(TurnId::from("turn_2"), 9, [(1, ByteString::from("ack-2"))]);
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
        acks.started(TurnId::from("turn_1"), 3, []);
        acks.started(TurnId::from("turn_2"), 7, [(1, ByteString::from("ack-2"))]);
        assert_eq!(
            acks.duplicate(&TurnId::from("turn_1"), 2, "dup-1".into()),
            None
        );
        assert_eq!(sent(acks.before(3)), [(2, "dup-1".to_owned())]);
        assert_eq!(sent(acks.before(7)), [(1, "ack-2".to_owned())]);
    }
}
