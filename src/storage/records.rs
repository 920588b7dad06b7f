//! The service side's small keyed records: sites (docs/protocol.md §1.12.1) and the
//! idempotency keys of service tool calls; and the mark an operator's
//! close leaves on a session.
//!
//! Their writes go through the same writer as the journal, so they are
//! durable when the call returns; each answers whether it took effect (a
//! conditional write that lost a race with another node did not).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::oneshot;

use crate::ids::{SessionId, SiteId, TenantId};

use super::ops::{QueuedRecord, RecordWrite};
use super::{KeyRow, Reads, SiteRow, StorageError, Store};

/// The reads of records, which each dialect's read pool answers (the
/// shared queries of `sql.rs`): the store picks the pool, this trait the
/// query, so this module names no dialect.
pub(super) trait RecordReads {
    async fn load_site(
        &self,
        tenant_id: &TenantId,
        site_id: &SiteId,
    ) -> Result<Option<SiteRow>, StorageError>;

    /// A site's version, without its state.
    async fn site_version(
        &self,
        tenant_id: &TenantId,
        site_id: &SiteId,
    ) -> Result<Option<i64>, StorageError>;

    /// How many sites a tenant has.
    async fn count_sites(&self, tenant_id: &TenantId) -> Result<i64, StorageError>;

    async fn load_key(
        &self,
        tenant_id: &TenantId,
        key: &str,
    ) -> Result<Option<KeyRow>, StorageError>;

    /// The tokens a scope's key spent on a UTC day (0: none).
    async fn spent(&self, day: i64, scope: &str, key: &str) -> Result<i64, StorageError>;
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
        tenant_id: &TenantId,
        site_id: &SiteId,
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
        tenant_id: &TenantId,
        site_id: &SiteId,
    ) -> Result<Option<SiteRow>, StorageError> {
        read!(self, .load_site(tenant_id, site_id))
    }

    /// A site's version, without its state.
    pub async fn site_version(
        &self,
        tenant_id: &TenantId,
        site_id: &SiteId,
    ) -> Result<Option<i64>, StorageError> {
        read!(self, .site_version(tenant_id, site_id))
    }

    /// How many sites a tenant has.
    pub async fn count_sites(&self, tenant_id: &TenantId) -> Result<i64, StorageError> {
        read!(self, .count_sites(tenant_id))
    }

    /// Claims an idempotency key for a call of `tool` with input hash
    /// `request_hash`; answers whether this call got it. Keys created
    /// before `forget_before` (ms) are forgotten first.
    pub async fn claim_key(
        &self,
        tenant_id: &TenantId,
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
        tenant_id: &TenantId,
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
    pub async fn drop_key(&self, tenant_id: &TenantId, key: &str) -> Result<(), StorageError> {
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
        session_id: &SessionId,
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
        session_id: &SessionId,
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
        tenant_id: &TenantId,
        key: &str,
    ) -> Result<Option<KeyRow>, StorageError> {
        read!(self, .load_key(tenant_id, key))
    }

    /// Adds `tokens` to what `scope`'s `key` spent on UTC day `day`: queued
    /// for the next group commit like an audit row, nobody waiting (a
    /// server that stops commits it first, [`Store::settled`]). With
    /// `forget_before_day`, every key's spending of the days before it is
    /// forgotten in the same write.
    pub fn add_spend(
        &self,
        day: i64,
        scope: &'static str,
        key: &str,
        tokens: u64,
        forget_before_day: Option<i64>,
    ) {
        let (done, _) = oneshot::channel();
        let record = QueuedRecord {
            write: RecordWrite::AddSpend {
                day,
                scope,
                key: key.to_owned(),
                tokens: i64::try_from(tokens).unwrap_or(i64::MAX),
                forget_before_day,
            },
            outcome: Arc::default(),
            done,
        };
        if let Err(e) = self.writes.record(record) {
            tracing::warn!(error = %e, scope, "a model call's tokens were not stored");
        }
    }

    /// The tokens `scope`'s `key` spent on UTC day `day`.
    pub async fn spent(&self, day: i64, scope: &str, key: &str) -> Result<u64, StorageError> {
        let tokens = read!(self, .spent(day, scope, key))?;
        Ok(u64::try_from(tokens).unwrap_or(0))
    }
}
