//! Bringing a session back: snapshot + journal replay; and a turn's end
//! read back from the journal, for a caller asking after a turn that ended
//! before the session was asked.

use std::collections::VecDeque;
use std::sync::Arc;

use bytestring::ByteString;

use super::intake::RecentRequests;
use super::messages::ChatRefused;
use super::types::MAX_STORED_BACKLOG_CHARS;
use crate::error::ErrorCode;
use crate::game::{Effect, GameState, HistoryEntry, pieces};
use crate::ids::{RequestId, SessionId, TurnId};
use crate::protocol::TurnEnd;
use crate::storage::{Epoch, LoadedSession, QueuedChat, StorageError, Store};

/// Where a restored or new session starts.
pub(super) struct Restored {
    pub state: GameState,
    pub last_seq: u64,
    /// Frames the journal holds after the snapshot the state was loaded
    /// from (replayed): the next snapshot is due that much sooner.
    pub since_snapshot: u64,
    pub ring: VecDeque<(u64, ByteString)>,
    pub requests: RecentRequests,
    /// A turn the journal shows started but never ended.
    pub interrupted_turn: Option<TurnId>,
    /// The claim the session's writes are made under.
    pub epoch: Epoch,
    /// Chats stored and acknowledged whose turns never started.
    pub stored_chats: Vec<QueuedChat>,
    /// Stored chats whose turns started, their rows left behind.
    pub started_chats: Vec<TurnId>,
    /// The snapshot chunks stored for the session (see
    /// `crate::game::pieces`).
    pub stored_chunks: Vec<String>,
}

/// Rebuilds the state a session had: its snapshot, then every later journal
/// row's effect and history entry, in seq order. `requests` are the recent
/// (request_id, turn_id) pairs, newest first.
pub(super) fn restore(
    loaded: LoadedSession,
    requests: Vec<(RequestId, TurnId)>,
    epoch: Epoch,
) -> Result<Restored, StorageError> {
    let (state, stored_chunks, last_seq) = replayed(&loaded)?;
    let since_snapshot = last_seq.saturating_sub(loaded.snapshot_seq);
    let ring: VecDeque<(u64, ByteString)> = loaded
        .recent_frames
        .into_iter()
        .map(|(seq, frame)| (seq, ByteString::from(frame)))
        .collect();
    let interrupted_turn = loaded.open_turn;
    let queued = loaded.queued;
    let started_chats = loaded.started_chats;
    let mut recent = RecentRequests::default();
    for (request_id, turn_id) in requests.into_iter().rev() {
        recent.insert(request_id, turn_id);
    }
    Ok(Restored {
        state,
        last_seq,
        since_snapshot,
        ring,
        requests: recent,
        interrupted_turn,
        epoch,
        stored_chats: queued,
        started_chats,
        stored_chunks,
    })
}

/// The state a stored session is in after the last row `loaded` holds, as
/// (state, the snapshot's stored chunks, that row's seq): what the
/// session's next actor starts from, and what a save of it holds.
pub fn replayed(loaded: &LoadedSession) -> Result<(GameState, Vec<String>, u64), StorageError> {
    let corrupt = |what: &str, seq: u64, e: serde_json::Error| {
        StorageError::Corrupt(format!("{what} at seq {seq}: {e}"))
    };
    let (mut state, stored_chunks) = pieces::assemble(&loaded.snapshot, &loaded.snapshot_chunks)
        .map_err(|e| {
            StorageError::Corrupt(format!("snapshot at seq {}: {e}", loaded.snapshot_seq))
        })?;
    let mut last_seq = loaded.snapshot_seq;
    for row in &loaded.rows {
        apply(&mut state, row.effect.as_deref(), row.history.as_deref())
            .map_err(|e| corrupt("journal row", row.seq, e))?;
        last_seq = last_seq.max(row.seq);
    }
    if let Some((seq, _)) = loaded.recent_frames.last() {
        last_seq = last_seq.max(*seq);
    }
    Ok((state, stored_chunks, last_seq))
}

/// Applies what one journal row does to `state`: its effect, then its
/// history entry (both JSON, as stored).
pub(super) fn apply(
    state: &mut GameState,
    effect: Option<&str>,
    history: Option<&str>,
) -> Result<(), serde_json::Error> {
    if let Some(effect) = effect {
        state.apply(&serde_json::from_str::<Effect>(effect)?);
    }
    if let Some(entry) = history {
        state.record(Arc::new(serde_json::from_str::<HistoryEntry>(entry)?));
    }
    Ok(())
}

/// A new session's starting point.
pub(super) fn fresh(state: GameState, epoch: Epoch) -> Restored {
    Restored {
        state,
        last_seq: 0,
        since_snapshot: 0,
        ring: VecDeque::new(),
        requests: RecentRequests::default(),
        interrupted_turn: None,
        epoch,
        stored_chats: Vec::new(),
        started_chats: Vec::new(),
        stored_chunks: Vec::new(),
    }
}

/// The frames after `after` up to `up_to` (a [`super::sequencer::Sequencer::stored_range`])
/// read from the journal, for a connection resuming from before the ring:
/// every one of them in order, with `up_to`, or `None` (a read that failed,
/// or a backlog past [`MAX_STORED_BACKLOG_CHARS`], which comes back short).
pub(super) async fn stored_frames(
    store: Store,
    session_id: SessionId,
    (after, up_to): (u64, u64),
) -> Option<(u64, Vec<(u64, String)>)> {
    let read = store
        .frames_after(
            &session_id,
            after,
            u32::try_from(up_to - after).unwrap_or(u32::MAX),
            MAX_STORED_BACKLOG_CHARS,
        )
        .await;
    read.inspect_err(|e| tracing::warn!(error = %e, "reading frames to resume failed"))
        .ok()
        .filter(|frames| frames.iter().map(|(seq, _)| *seq).eq(after + 1..=up_to))
        .map(|frames| (up_to, frames))
}

/// The end of `turn_id`, which ended and is durable: its last frame is in
/// the journal, read back once here. A session without that turn answers
/// `NOT_FOUND`; a frame that does not read back as a turn's end is a bug,
/// answered as an internal error.
pub(super) async fn turn_end(
    store: Store,
    session_id: SessionId,
    turn_id: TurnId,
) -> Result<TurnEnd, ChatRefused> {
    match store.turn_end_frame(&session_id, &turn_id).await {
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
