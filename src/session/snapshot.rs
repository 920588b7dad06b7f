//! A session's snapshots: the released state written in pieces
//! (`crate::game::pieces`), the manifest and only the chunks not sure to be
//! stored already, and the snapshot the HTTP API answers with. Pure: the
//! session hands the write to storage and reports back when it is durable.

use crate::game::GameState;
use crate::game::pieces::{ChunkTicket, StoredChunks};
use crate::ids::SessionId;
use crate::protocol::Snapshot;
use crate::storage::{SnapshotWrite, StorageError};

/// Which of a session's snapshot chunks are sure to be stored.
pub(super) struct Snapshots {
    stored: StoredChunks,
}

impl Snapshots {
    /// The chunks the loaded snapshot named (all stored).
    pub(super) fn loaded(chunk_ids: impl IntoIterator<Item = String>) -> Self {
        Self {
            stored: StoredChunks::loaded(chunk_ids),
        }
    }

    /// The write of `state` as of the released `seq`, and what to report
    /// once it is durable ([`Snapshots::durable`]); an error if the state
    /// did not serialize.
    pub(super) fn write(
        &mut self,
        state: &GameState,
        seq: u64,
    ) -> Result<(SnapshotWrite, ChunkTicket), StorageError> {
        let pieces = state
            .pieces()
            .map_err(|e| StorageError::Corrupt(e.to_string()))?;
        let chunks = self.stored.write(pieces.chunks);
        let write = SnapshotWrite {
            seq,
            state: pieces.manifest,
            chunks: chunks.send,
            keep: chunks.keep,
        };
        Ok((write, chunks.ticket))
    }

    /// The snapshot `ticket` came from is durable.
    pub(super) fn durable(&mut self, ticket: ChunkTicket) {
        self.stored.durable(ticket);
    }
}

/// The snapshot of a live session the HTTP API answers with, as JSON,
/// naming the node that runs it.
pub(super) fn body(
    session_id: &SessionId,
    state: &GameState,
    online: &super::seats::SeatSet,
    node_id: &str,
) -> String {
    let snapshot = Snapshot::of(session_id, state)
        .online(|s| online.contains(s))
        .owned_by(node_id);
    serde_json::to_string(&snapshot).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{demo, session};

    #[test]
    fn a_snapshot_sends_only_the_chunks_not_sure_to_be_stored() {
        let state = demo();
        let mut snapshots = Snapshots::loaded([]);
        let (first, _) = snapshots.write(&state, 7).expect("serializes");
        assert_eq!(first.seq, 7);
        assert!(!first.chunks.is_empty(), "nothing stored yet: every chunk");
        assert_eq!(first.chunks.len(), first.keep.len());
        // Until one is durable, the next sends them all again.
        let (again, ticket) = snapshots.write(&state, 8).expect("serializes");
        assert_eq!(again.chunks.len(), first.chunks.len());
        // Once the last one written is durable, the same state sends none.
        snapshots.durable(ticket);
        let (after, _) = snapshots.write(&state, 9).expect("serializes");
        assert!(after.chunks.is_empty(), "{:?}", after.chunks);
        let sorted = |mut ids: Vec<String>| {
            ids.sort();
            ids
        };
        assert_eq!(
            sorted(after.keep),
            sorted(again.keep),
            "still names them all"
        );
    }

    #[test]
    fn the_http_snapshot_names_the_session_and_its_node() {
        let (id, state) = (session(), demo());
        let body: serde_json::Value =
            serde_json::from_str(&body(&id, &state, &Default::default(), "node_a")).expect("JSON");
        assert_eq!(body["session_id"], id.as_str());
        assert_eq!(body["owner_node"], "node_a");
        assert_eq!(body["turn"], state.turn);
        // The party, never a token: the host seat, offline.
        assert_eq!(body["seats"][0]["seat_id"], "seat_1");
        assert_eq!(body["seats"][0]["online"], false);
        assert_eq!(body["turn_mode"], "free");
        assert!(body["seats"][0].get("token_hash").is_none());
    }
}
