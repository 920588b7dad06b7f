//! Bringing a session back: snapshot + journal replay; and a turn's end
//! read back from the journal, for a caller asking after a turn that ended
//! before the session was asked.

use std::collections::VecDeque;
use std::sync::Arc;

use bytestring::ByteString;

use super::intake::RecentRequests;
use super::messages::ChatRefused;
use crate::error::ErrorCode;
use crate::game::{Effect, GameState, HistoryEntry};
use crate::protocol::{TurnEnd, TurnId};
use crate::storage::{Epoch, LoadedSession, QueuedChat, StorageError, Store};

/// Where a restored or new session starts.
pub(super) struct Restored {
    pub state: GameState,
    pub last_seq: u64,
    pub ring: VecDeque<(u64, ByteString)>,
    pub requests: RecentRequests,
    /// A turn the journal shows started but never ended.
    pub interrupted_turn: Option<TurnId>,
    /// The claim the session's writes are made under.
    pub epoch: Epoch,
    /// Chats stored and acknowledged whose turns never started.
    pub stored_chats: Vec<QueuedChat>,
}

/// Rebuilds the state a session had: its snapshot, then every later journal
/// row's effect and history entry, in seq order. `requests` are the recent
/// (request_id, turn_id) pairs, newest first.
pub(super) fn restore(
    loaded: LoadedSession,
    requests: Vec<(String, String)>,
    epoch: Epoch,
) -> Result<Restored, StorageError> {
    let corrupt = |what: &str, seq: u64, e: serde_json::Error| {
        StorageError::Corrupt(format!("{what} at seq {seq}: {e}"))
    };
    let mut state: GameState = serde_json::from_str(&loaded.snapshot)
        .map_err(|e| corrupt("snapshot", loaded.snapshot_seq, e))?;
    let mut last_seq = loaded.snapshot_seq;
    for row in &loaded.rows {
        if let Some(effect) = &row.effect {
            let effect: Effect =
                serde_json::from_str(effect).map_err(|e| corrupt("effect", row.seq, e))?;
            state.apply(&effect);
        }
        if let Some(entry) = &row.history {
            let entry: HistoryEntry =
                serde_json::from_str(entry).map_err(|e| corrupt("history", row.seq, e))?;
            state.record(Arc::new(entry));
        }
        last_seq = last_seq.max(row.seq);
    }
    if let Some((seq, _)) = loaded.recent_frames.last() {
        last_seq = last_seq.max(*seq);
    }
    let ring: VecDeque<(u64, ByteString)> = loaded
        .recent_frames
        .into_iter()
        .map(|(seq, frame)| (seq, ByteString::from(frame)))
        .collect();
    let interrupted_turn = loaded.open_turn.map(TurnId::from);
    let queued = loaded.queued;
    let mut recent = RecentRequests::default();
    for (request_id, turn_id) in requests.into_iter().rev() {
        recent.insert(request_id, TurnId::from(turn_id));
    }
    Ok(Restored {
        state,
        last_seq,
        ring,
        requests: recent,
        interrupted_turn,
        epoch,
        stored_chats: queued,
    })
}

/// A new session's starting point.
pub(super) fn fresh(state: GameState, epoch: Epoch) -> Restored {
    Restored {
        state,
        last_seq: 0,
        ring: VecDeque::new(),
        requests: RecentRequests::default(),
        interrupted_turn: None,
        epoch,
        stored_chats: Vec::new(),
    }
}

/// The end of `turn_id`, which ended and is durable: its last frame is in
/// the journal, read back once here. A session without that turn answers
/// `NOT_FOUND`; a frame that does not read back as a turn's end is a bug,
/// answered as an internal error.
pub(super) async fn turn_end(
    store: Store,
    session_id: String,
    turn_id: TurnId,
) -> Result<TurnEnd, ChatRefused> {
    match store.turn_end_frame(&session_id, turn_id.as_str()).await {
        Ok(Some(frame)) => serde_json::from_str(&frame).map_err(|e| {
            tracing::error!(error = %e, %session_id, %turn_id, "a stored turn end does not read back");
            ChatRefused::new(ErrorCode::InternalError, "internal error")
        }),
        Ok(None) => Err(ChatRefused::new(
            ErrorCode::NotFound,
            format!("no turn {turn_id} in this session"),
        )),
        Err(e) => {
            tracing::error!(error = %e, "reading a turn's end failed");
            Err(ChatRefused::turn_lost())
        }
    }
}
