//! The service side's small keyed records: sites (PROTOCOL.md §7.2) and the
//! idempotency keys of service tool calls; and the mark an operator's
//! close leaves on a session.
//!
//! Their writes go through the same writer as the journal, so they are
//! durable when the call returns; each answers whether it took effect (a
//! conditional write that lost a race with another node did not).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::oneshot;

use super::{Reads, StorageError, Store, postgres, sqlite};

/// A site as stored: its campaign's content plus what its tools wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteRow {
    pub tenant_id: String,
    pub site_id: String,
    pub campaign_id: String,
    /// The campaign's title: the site's name (`get_site_map`'s `site_name`).
    pub title: String,
    /// The site's save state as JSON ([`crate::game::GameState`]).
    pub state: String,
    /// Grows by one with every write.
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A stored idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    pub tool: String,
    /// SHA-256 of the call's input, as its audit row has it.
    pub request_hash: String,
    /// The first call's answer, once it has one: HTTP status and body.
    pub answer: Option<(u16, String)>,
    pub created_at: i64,
}

/// A write of a record, with what it needs.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RecordWrite {
    /// Creates a site at version 1, or replaces one whole (version + 1).
    PutSite(SiteRow),
    /// Replaces a site's state if its version is still `expected`.
    UpdateSite {
        tenant_id: String,
        site_id: String,
        state: String,
        expected: i64,
        updated_at: i64,
    },
    /// Claims a key unless it is taken, forgetting keys older than
    /// `forget_before` first.
    ClaimKey {
        tenant_id: String,
        key: String,
        tool: String,
        request_hash: String,
        created_at: i64,
        forget_before: i64,
    },
    /// Stores the answer of the call that claimed the key.
    FinishKey {
        tenant_id: String,
        key: String,
        status: u16,
        response: String,
    },
    /// Gives a key back: its call did not run (refused before it started).
    DropKey { tenant_id: String, key: String },
    /// Closes a session for good at `closed_at`, unless it is closed
    /// already.
    CloseSession { session_id: String, closed_at: i64 },
    /// Deletes an anonymous session with everything stored of it; on
    /// PostgreSQL only while `claim` (node, epoch) is still its owner's
    /// claim, so a session another node has since taken is left alone.
    DeleteSession {
        session_id: String,
        claim: Option<(String, i64)>,
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

impl Store {
    /// Queues a record write and waits until it is durable; answers its
    /// outcome (see [`QueuedRecord`]).
    async fn write_record(&self, write: RecordWrite) -> Result<i64, StorageError> {
        let outcome = Arc::new(AtomicI64::new(0));
        let (done, rx) = oneshot::channel();
        self.writes.record(QueuedRecord {
            write,
            outcome: outcome.clone(),
            done,
        })?;
        rx.await.map_err(|_| StorageError::WriterGone)??;
        Ok(outcome.load(Ordering::Acquire))
    }

    /// Creates or replaces a site whole; answers its version (1: created).
    pub async fn put_site(&self, site: SiteRow) -> Result<i64, StorageError> {
        self.write_record(RecordWrite::PutSite(site)).await
    }

    /// Replaces a site's state if nobody wrote it since version
    /// `expected`; answers the new version, or `None` if somebody did.
    pub async fn update_site(
        &self,
        tenant_id: &str,
        site_id: &str,
        state: String,
        expected: i64,
    ) -> Result<Option<i64>, StorageError> {
        let version = self
            .write_record(RecordWrite::UpdateSite {
                tenant_id: tenant_id.to_owned(),
                site_id: site_id.to_owned(),
                state,
                expected,
                updated_at: super::now_ms(),
            })
            .await?;
        Ok((version > 0).then_some(version))
    }

    pub async fn load_site(
        &self,
        tenant_id: &str,
        site_id: &str,
    ) -> Result<Option<SiteRow>, StorageError> {
        read!(self, load_site(tenant_id, site_id))
    }

    /// A site's version, without its state.
    pub async fn site_version(
        &self,
        tenant_id: &str,
        site_id: &str,
    ) -> Result<Option<i64>, StorageError> {
        read!(self, site_version(tenant_id, site_id))
    }

    /// How many sites a tenant has.
    pub async fn count_sites(&self, tenant_id: &str) -> Result<i64, StorageError> {
        read!(self, count_sites(tenant_id))
    }

    /// Claims an idempotency key for a call of `tool` with input hash
    /// `request_hash`; answers whether this call got it. Keys created
    /// before `forget_before` (ms) are forgotten first.
    pub async fn claim_key(
        &self,
        tenant_id: &str,
        key: &str,
        tool: &str,
        request_hash: &str,
        forget_before: i64,
    ) -> Result<bool, StorageError> {
        let took = self
            .write_record(RecordWrite::ClaimKey {
                tenant_id: tenant_id.to_owned(),
                key: key.to_owned(),
                tool: tool.to_owned(),
                request_hash: request_hash.to_owned(),
                created_at: super::now_ms(),
                forget_before,
            })
            .await?;
        Ok(took > 0)
    }

    /// Stores the answer of the call that claimed `key`.
    pub async fn finish_key(
        &self,
        tenant_id: &str,
        key: &str,
        status: u16,
        response: String,
    ) -> Result<(), StorageError> {
        self.write_record(RecordWrite::FinishKey {
            tenant_id: tenant_id.to_owned(),
            key: key.to_owned(),
            status,
            response,
        })
        .await
        .map(drop)
    }

    /// Gives back a key whose call never started.
    pub async fn drop_key(&self, tenant_id: &str, key: &str) -> Result<(), StorageError> {
        self.write_record(RecordWrite::DropKey {
            tenant_id: tenant_id.to_owned(),
            key: key.to_owned(),
        })
        .await
        .map(drop)
    }

    /// Marks a session closed for good at `closed_at` (ms), unless it is
    /// closed already; answers whether this write closed it. Durable when
    /// it returns.
    pub async fn close_session(
        &self,
        session_id: &str,
        closed_at: i64,
    ) -> Result<bool, StorageError> {
        let took = self
            .write_record(RecordWrite::CloseSession {
                session_id: session_id.to_owned(),
                closed_at,
            })
            .await?;
        Ok(took > 0)
    }

    /// Deletes an anonymous session (the retention sweep's), its journal,
    /// snapshots, queued chats and audit rows, claimed by this node under
    /// `epoch` (see [`Store::claim`]); answers whether it was deleted.
    /// Durable when it returns.
    pub async fn delete_session(
        &self,
        session_id: &str,
        epoch: super::Epoch,
    ) -> Result<bool, StorageError> {
        let claim = match epoch {
            super::Epoch::Sole => None,
            super::Epoch::Claimed(n) => Some((self.node.id.clone(), n)),
        };
        let took = self
            .write_record(RecordWrite::DeleteSession {
                session_id: session_id.to_owned(),
                claim,
            })
            .await?;
        Ok(took > 0)
    }

    pub async fn load_key(
        &self,
        tenant_id: &str,
        key: &str,
    ) -> Result<Option<KeyRow>, StorageError> {
        read!(self, load_key(tenant_id, key))
    }
}

/// The statements, spelled the same way in both dialects.
pub(super) mod stmt {
    /// A new site at version 1, or the whole site replaced at version + 1;
    /// returns the version written.
    pub(in crate::storage) const PUT_SITE: &str = "INSERT INTO sites (tenant_id, site_id, \
         campaign_id, title, state, version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7) \
         ON CONFLICT (tenant_id, site_id) DO UPDATE SET campaign_id = excluded.campaign_id, \
         title = excluded.title, state = excluded.state, version = sites.version + 1, \
         updated_at = excluded.updated_at RETURNING version";
    pub(in crate::storage) const UPDATE_SITE: &str = "UPDATE sites SET state = $1, \
         version = version + 1, updated_at = $2 \
         WHERE tenant_id = $3 AND site_id = $4 AND version = $5 RETURNING version";
    pub(in crate::storage) const FORGET_KEYS: &str =
        "DELETE FROM idempotency_keys WHERE created_at < $1";
    pub(in crate::storage) const CLAIM_KEY: &str = "INSERT INTO idempotency_keys (tenant_id, \
         idem_key, tool, request_hash, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (tenant_id, idem_key) DO NOTHING";
    pub(in crate::storage) const FINISH_KEY: &str = "UPDATE idempotency_keys \
         SET http_status = $1, response = $2 WHERE tenant_id = $3 AND idem_key = $4";
    pub(in crate::storage) const DROP_KEY: &str =
        "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idem_key = $2";
    /// The first close of a session is the one kept.
    pub(in crate::storage) const CLOSE_SESSION: &str =
        "UPDATE sessions SET closed_at = $1 WHERE session_id = $2 AND closed_at IS NULL";
}
