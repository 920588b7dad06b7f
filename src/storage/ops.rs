//! The writes the group-commit writer takes and what commits them: the
//! vocabulary the writer (`writer.rs`), the record API (`records.rs`) and
//! both dialects (`sqlite.rs`, `postgres.rs`) share. It sits below all of
//! them, so each imports it and none imports another for its types.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::oneshot;

use crate::ids::{NodeId, SessionId, SiteId, TenantId, TurnId};

use super::{
    AuditRow, DurableSink, Epoch, FirstSnapshot, ImportedStory, JournalRow, QueuedChat,
    SessionMeta, SiteRow, SnapshotWrite, StorageError,
};

/// One write queued for the writer task.
pub(super) enum WriteOp {
    Row(JournalRow, DurableSink),
    Snapshot {
        session_id: SessionId,
        epoch: Epoch,
        snapshot: SnapshotWrite,
        done: Option<oneshot::Sender<Result<(), StorageError>>>,
    },
    Audit(AuditRow),
    Enqueue {
        chat: QueuedChat,
        epoch: Epoch,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
    Dequeue {
        session_id: SessionId,
        turn_id: TurnId,
        epoch: Epoch,
    },
    CreateSession {
        meta: SessionMeta,
        snapshot: FirstSnapshot,
        /// An imported save's story and timers, stored in the same commit.
        story: Option<Box<ImportedStory>>,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
    /// A site or idempotency-key write (`records.rs`).
    Record(QueuedRecord),
}

/// A write of a record, with what it needs.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RecordWrite {
    /// Creates a site at version 1, or replaces one whole (version + 1).
    PutSite(SiteRow),
    /// Replaces a site's state if its version is still `expected`.
    UpdateSite {
        tenant_id: TenantId,
        site_id: SiteId,
        state: String,
        expected: i64,
        updated_at: i64,
    },
    /// Claims a key unless it is taken, forgetting keys older than
    /// `forget_before` first.
    ClaimKey {
        tenant_id: TenantId,
        key: String,
        tool: String,
        request_hash: String,
        created_at: i64,
        forget_before: i64,
    },
    /// Stores the answer of the call that claimed the key.
    FinishKey {
        tenant_id: TenantId,
        key: String,
        status: u16,
        response: String,
    },
    /// Gives a key back: its call did not run (refused before it started).
    DropKey { tenant_id: TenantId, key: String },
    /// Adds model tokens to a UTC day's spending of a scope's key
    /// (`crate::budget`); with `forget_before_day`, every key's spending
    /// of the days before it is forgotten first.
    AddSpend {
        day: i64,
        scope: &'static str,
        key: String,
        tokens: i64,
        forget_before_day: Option<i64>,
    },
    /// Closes a session for good at `closed_at`, unless it is closed
    /// already.
    CloseSession {
        session_id: SessionId,
        closed_at: i64,
    },
    /// Deletes an anonymous session with everything stored of it; on
    /// PostgreSQL only while `claim` (node, epoch) is still its owner's
    /// claim, so a session another node has since taken is left alone.
    DeleteSession {
        session_id: SessionId,
        claim: Option<(NodeId, i64)>,
    },
}

/// A record write queued for the writer, and where its outcome goes: the
/// committer sets `outcome` to the site version written, or 1 for a key
/// write that took effect; it stays 0 when a condition failed.
pub(super) struct QueuedRecord {
    pub(super) write: RecordWrite,
    pub(super) outcome: Arc<AtomicI64>,
    pub(super) done: oneshot::Sender<Result<(), StorageError>>,
}

impl QueuedRecord {
    /// Sets what the write did (a committer calls it; a batch retried
    /// write by write sets it again).
    pub(super) fn took(&self, value: i64) {
        self.outcome.store(value, Ordering::Release);
    }
}

/// Commits a batch of writes in one transaction, or nothing of it.
pub(super) trait Committer: Send + 'static {
    async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError>;

    /// Whether the writer runs on a thread of its own (a committer that
    /// blocks while it writes), rather than as a task of the current
    /// arbiter.
    fn own_thread() -> bool {
        false
    }

    /// How long the writer waits for more writes to join a batch while
    /// more than one session is writing; `None` (and for a writer without
    /// a thread of its own, which must not block) commits at once.
    fn gather() -> Option<std::time::Duration> {
        None
    }
}

/// How long the writer waits for more writes to join a batch while more
/// than one session is writing (see `writer.rs`), for a committer that
/// gathers (SQLite's). A step's frames reach their clients up to this much
/// later under that load; in exchange the writer commits fewer, larger
/// batches (two to three times fewer with the peer benchmark's 1,000
/// sessions: BENCHMARKS.md).
pub(super) const GATHER: std::time::Duration = std::time::Duration::from_millis(1);
