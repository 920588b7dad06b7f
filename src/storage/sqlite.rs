//! SQLite storage (WAL) with a group-commit writer.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Row, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;

use super::{
    ActionPage, AuditPage, AuditRow, BUSY_QUEUED_WRITES, DurableSink, JournalRow, LoadedSession,
    MAX_BATCH, MAX_QUEUED_WRITES, STORAGE_BEHIND, STORAGE_FAILING, SessionMeta, StorageError,
    StoredRow, Visibility, now_ms, rfc3339,
};

/// How long after a failed write new work is refused (`STORAGE_FAILING`);
/// after it, the next write tries the store again.
const FAILURE_HOLD_MS: i64 = 2_000;

/// Read connections of the pool, all opened at start.
const READ_CONNECTIONS: u32 = 4;

/// Writes of a failed batch that may fail one after another, when retried
/// one by one, before the rest of the batch is failed without a try.
const RETRY_GIVE_UP: usize = 3;

/// Frames kept for resume after a reload.
pub const RECENT_FRAMES: i64 = 512;

/// One write queued for the writer task.
enum WriteOp {
    Row(JournalRow, DurableSink),
    Snapshot {
        session_id: String,
        seq: u64,
        state: String,
        done: Option<oneshot::Sender<Result<(), StorageError>>>,
    },
    Audit(AuditRow),
    CreateSession {
        meta: SessionMeta,
        snapshot: String,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
}

/// The database: a read pool plus a handle on the writer task.
///
/// The writer task runs until every `Store` clone is dropped.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    /// Bounded at [`MAX_QUEUED_WRITES`]: a full queue refuses writes.
    writes: mpsc::Sender<WriteOp>,
    /// Until when (ms since the epoch) new work is refused because a write
    /// failed; set by the writer.
    failing_until: Arc<AtomicI64>,
}

/// Where the writer reports its commits.
pub type CommitMetrics = Arc<Metrics>;

impl Store {
    /// Opens (creating if needed) the database at `url` (`sqlite://PATH`),
    /// runs migrations and starts the writer on the current runtime.
    pub async fn open(url: &str) -> Result<Self, StorageError> {
        Self::open_with_metrics(url, Arc::default(), None).await
    }

    /// [`Store::open`], with the writer's commit sizes and times recorded
    /// in `metrics`.
    ///
    /// `max_mb` caps the database's size: past it every write fails as on a
    /// full disk (`SQLITE_FULL`), which the writer handles like one.
    pub async fn open_with_metrics(
        url: &str,
        metrics: CommitMetrics,
        max_mb: Option<u64>,
    ) -> Result<Self, StorageError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk when it returns. Group commit keeps
            // that to one fsync per batch.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        // Read connections are kept once open (no idle timeout, no
        // lifetime), so a node whose open files fill up later still has its
        // database's.
        let pool = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        // Open them all now, one after another (opening them at once on a
        // new file races to set WAL mode: "database is locked").
        let mut opened = Vec::with_capacity(READ_CONNECTIONS as usize);
        for _ in 0..READ_CONNECTIONS {
            opened.push(pool.acquire().await?);
        }
        drop(opened);
        // The writer's transactions hold a whole group commit: a page cache
        // big enough for one (16 MiB instead of 2) keeps it from spilling
        // pages to disk before the commit.
        let writer_options = options.pragma("cache_size", "-16384");
        let mut conn = SqliteConnection::connect_with(&writer_options).await?;
        if let Some(mb) = max_mb {
            // Only the writer writes, so its connection's cap is the file's.
            let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
                .fetch_one(&mut conn)
                .await?;
            let pages = (mb.saturating_mul(1024 * 1024) / page_size.max(512) as u64).max(1);
            let sql = format!("PRAGMA max_page_count = {pages}");
            // Built only from numbers.
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await?;
        }
        let (writes, rx) = mpsc::channel(MAX_QUEUED_WRITES);
        let failing_until = Arc::new(AtomicI64::new(0));
        actix::spawn(writer(conn, rx, metrics, failing_until.clone()));
        Ok(Self {
            pool,
            writes,
            failing_until,
        })
    }

    /// Queues a journal row; `sink` hears when it (and everything before it)
    /// is durable.
    pub fn append(&self, row: JournalRow, sink: DurableSink) {
        if let Err(e) = self.writes.try_send(WriteOp::Row(row, sink)) {
            let (gone, op) = refused_write(e);
            if let WriteOp::Row(_, sink) = op {
                sink.notify(Err(gone));
            }
        }
    }

    /// Why new work should be refused now, if it should: so many writes
    /// wait that the turns already running need the room, or a write
    /// failed moments ago (a full disk, a locked or broken database).
    /// Callers answer `OVERLOADED` with this reason; sessions take work
    /// again by themselves once storage writes again.
    pub fn refusing(&self) -> Option<&'static str> {
        if MAX_QUEUED_WRITES - self.writes.capacity() >= BUSY_QUEUED_WRITES {
            Some(STORAGE_BEHIND)
        } else if now_ms() < self.failing_until.load(Ordering::Acquire) {
            Some(STORAGE_FAILING)
        } else {
            None
        }
    }

    /// Queues a snapshot; if `done` is given it hears when it is durable.
    pub fn snapshot(
        &self,
        session_id: &str,
        seq: u64,
        state: String,
        done: Option<oneshot::Sender<Result<(), StorageError>>>,
    ) {
        let op = WriteOp::Snapshot {
            session_id: session_id.to_owned(),
            seq,
            state,
            done,
        };
        if let Err(e) = self.writes.try_send(op) {
            let (error, op) = refused_write(e);
            if let WriteOp::Snapshot {
                done: Some(done), ..
            } = op
            {
                let _ = done.send(Err(error));
            }
        }
    }

    /// Queues an audit row. Audit rows ride in the same group commits as the
    /// journal; nobody waits for them.
    pub fn audit(&self, row: AuditRow) {
        if let Err(e) = self.writes.try_send(WriteOp::Audit(row)) {
            let (error, _) = refused_write(e);
            tracing::error!(%error, "audit row dropped");
        }
    }

    /// Every audit row of one trace of a tenant, oldest first (at most
    /// `limit`).
    pub async fn audit_by_trace(
        &self,
        tenant_id: &str,
        trace_id: &str,
        limit: u32,
    ) -> Result<Vec<AuditRow>, StorageError> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit WHERE tenant_id = ? AND trace_id = ? ORDER BY audit_id LIMIT ?"
        );
        // Built only from constants.
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(trace_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(audit_row)
            .collect::<Result<Vec<_>, sqlx::Error>>()?)
    }

    /// A page of a session's audit ledger, oldest first.
    pub async fn audit_page(
        &self,
        session_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<AuditPage, StorageError> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit WHERE session_id = ? AND audit_id > ? ORDER BY audit_id LIMIT ?"
        );
        // Built only from constants.
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(session_id)
            .bind(after_id)
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.pool)
            .await?;
        let more = rows.len() > limit as usize;
        let entries = rows
            .into_iter()
            .take(limit as usize)
            .map(|r| audit_row(&r))
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let next_after_id = if more {
            entries.last().map(|e| e.audit_id)
        } else {
            None
        };
        Ok(AuditPage {
            entries,
            next_after_id,
        })
    }

    /// Stores a new session and its opening snapshot; returns once durable.
    pub async fn create_session(
        &self,
        meta: SessionMeta,
        snapshot: String,
    ) -> Result<(), StorageError> {
        let (done, rx) = oneshot::channel();
        self.writes
            .try_send(WriteOp::CreateSession {
                meta,
                snapshot,
                done,
            })
            .map_err(|e| refused_write(e).0)?;
        rx.await.map_err(|_| StorageError::WriterGone)?
    }

    pub async fn session_meta(
        &self,
        session_id: &str,
    ) -> Result<Option<SessionMeta>, StorageError> {
        let row = sqlx::query(
            "SELECT session_id, tenant_id, campaign_id, title, player_token, spectator_token, created_at, \
             visibility FROM sessions WHERE session_id = ?",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(SessionMeta {
                session_id: r.try_get(0)?,
                tenant_id: r.try_get(1)?,
                campaign_id: r.try_get(2)?,
                title: r.try_get(3)?,
                player_token: r.try_get(4)?,
                spectator_token: r.try_get(5)?,
                created_at: r.try_get(6)?,
                visibility: Visibility::from_stored(r.try_get(7)?),
            })
        })
        .transpose()
    }

    /// Reads what replay needs: meta, latest snapshot, later rows, recent frames.
    pub async fn load_session(
        &self,
        session_id: &str,
    ) -> Result<Option<LoadedSession>, StorageError> {
        let Some(meta) = self.session_meta(session_id).await? else {
            return Ok(None);
        };
        let snap = sqlx::query("SELECT seq, state FROM snapshots WHERE session_id = ?")
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| {
                StorageError::Corrupt(format!("session {session_id} has no snapshot"))
            })?;
        let snapshot_seq: i64 = snap.try_get(0)?;
        let snapshot: String = snap.try_get(1)?;
        let rows = sqlx::query(
            "SELECT seq, turn_id, request_id, effect, history FROM journal \
             WHERE session_id = ? AND seq > ? ORDER BY seq",
        )
        .bind(session_id)
        .bind(snapshot_seq)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| {
            Ok(StoredRow {
                seq: r.try_get::<i64, _>(0)? as u64,
                turn_id: r.try_get(1)?,
                request_id: r.try_get(2)?,
                effect: r.try_get(3)?,
                history: r.try_get(4)?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let mut recent_frames = sqlx::query(
            "SELECT seq, frame FROM journal WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
        )
        .bind(session_id)
        .bind(RECENT_FRAMES)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get::<i64, _>(0)? as u64, r.try_get(1)?)))
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
        recent_frames.reverse();
        let last_turn_event = sqlx::query(
            "SELECT kind, turn_id FROM journal WHERE session_id = ? \
             AND kind IN ('turn_started', 'turn_completed', 'turn_failed') ORDER BY seq DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        let open_turn = match last_turn_event {
            Some(r) if r.try_get::<String, _>(0)? == "turn_started" => r.try_get(1)?,
            _ => None,
        };
        Ok(Some(LoadedSession {
            open_turn,
            meta,
            snapshot_seq: snapshot_seq as u64,
            snapshot,
            rows,
            recent_frames,
        }))
    }

    /// Request ids of the most recent turns that started, newest first.
    pub async fn recent_request_ids(
        &self,
        session_id: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StorageError> {
        let rows = sqlx::query(
            "SELECT request_id, turn_id FROM journal WHERE session_id = ? AND kind = 'turn_started' \
             AND request_id IS NOT NULL ORDER BY seq DESC LIMIT ?",
        )
        .bind(session_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// The frame that ended a turn (`turn_completed` or `turn_failed`), if
    /// the turn has ended.
    pub async fn turn_end_frame(
        &self,
        session_id: &str,
        turn_id: &str,
    ) -> Result<Option<String>, StorageError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT frame FROM journal WHERE session_id = ? AND turn_id = ? \
             AND kind IN ('turn_completed', 'turn_failed') ORDER BY seq DESC LIMIT 1",
        )
        .bind(session_id)
        .bind(turn_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(frame,)| frame))
    }

    /// A page of the applied-actions log, oldest first.
    pub async fn actions(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<ActionPage, StorageError> {
        let rows = sqlx::query(
            "SELECT seq, action, created_at FROM journal \
             WHERE session_id = ? AND seq > ? AND action IS NOT NULL ORDER BY seq LIMIT ?",
        )
        .bind(session_id)
        .bind(after_seq as i64)
        .bind(i64::from(limit) + 1)
        .fetch_all(&self.pool)
        .await?;
        let more = rows.len() > limit as usize;
        let mut actions = Vec::with_capacity(rows.len().min(limit as usize));
        let mut last = None;
        for r in rows.into_iter().take(limit as usize) {
            let seq: i64 = r.try_get(0)?;
            let text: String = r.try_get(1)?;
            let created: i64 = r.try_get(2)?;
            let mut action: Value =
                serde_json::from_str(&text).map_err(|e| StorageError::Corrupt(e.to_string()))?;
            if let Some(obj) = action.as_object_mut() {
                obj.insert("seq".into(), Value::from(seq));
                obj.insert("timestamp".into(), Value::from(rfc3339(created)));
            }
            actions.push(action);
            last = Some(seq as u64);
        }
        Ok(ActionPage {
            actions,
            next_after_seq: if more { last } else { None },
        })
    }
}

/// Why a write could not be queued, and the write back.
fn refused_write(e: mpsc::error::TrySendError<WriteOp>) -> (StorageError, WriteOp) {
    match e {
        mpsc::error::TrySendError::Full(op) => (StorageError::Overloaded, op),
        mpsc::error::TrySendError::Closed(op) => (StorageError::WriterGone, op),
    }
}

/// The writer task: waits for one write, takes everything else already
/// queued (up to [`MAX_BATCH`]), commits it all at once, then tells each
/// waiter. Runs until every sender is gone.
async fn writer(
    mut conn: SqliteConnection,
    mut rx: mpsc::Receiver<WriteOp>,
    metrics: CommitMetrics,
    failing_until: Arc<AtomicI64>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    // Ids of sinks whose session had a write fail: their later rows are
    // refused, so a session's journal never has a gap in its seqs. Ids are
    // never reused, so a reload of the session (a new sink) writes again.
    let mut poisoned: HashSet<u64> = HashSet::new();
    let refused = || StorageError::Database("an earlier write of this session failed".into());
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let is_refused = |op: &WriteOp, poisoned: &HashSet<u64>| matches!(op, WriteOp::Row(_, sink) if poisoned.contains(&sink.id()));
        let writable: Vec<&WriteOp> = batch
            .iter()
            .filter(|op| !is_refused(op, &poisoned))
            .collect();
        let started = std::time::Instant::now();
        let results: Vec<Result<(), StorageError>> = match commit(&mut conn, &writable).await {
            Ok(()) => batch
                .iter()
                .map(|op| {
                    if is_refused(op, &poisoned) {
                        Err(refused())
                    } else {
                        Ok(())
                    }
                })
                .collect(),
            Err(e) => {
                // Isolate the failing write so one bad row does not fail
                // every session that shared the batch.
                tracing::warn!(error = %e, ops = batch.len(), "batch commit failed; retrying writes one by one");
                // A store that fails every write (disk full, gone) must not
                // cost one busy timeout per row: after a few failures in a
                // row the rest of the batch fails without another try.
                let mut results = Vec::with_capacity(batch.len());
                let mut failures_in_a_row = 0;
                for op in &batch {
                    if is_refused(op, &poisoned) {
                        results.push(Err(refused()));
                        continue;
                    }
                    let r = if failures_in_a_row >= RETRY_GIVE_UP {
                        Err(e.clone())
                    } else {
                        commit(&mut conn, &[op]).await
                    };
                    match &r {
                        Ok(()) => failures_in_a_row = 0,
                        Err(e) => {
                            failures_in_a_row += 1;
                            tracing::error!(error = %e, "journal write failed");
                            if let WriteOp::Row(_, sink) = op {
                                poisoned.insert(sink.id());
                            }
                        }
                    }
                    results.push(r);
                }
                results
            }
        };
        // Storage as a whole is failing when nothing of the batch went in
        // (a full disk, a lock held too long); one bad row among good ones
        // fails only its own session.
        if results.iter().all(Result::is_err) {
            failing_until.store(now_ms() + FAILURE_HOLD_MS, Ordering::Release);
        }
        metrics.commit_seconds.observe_duration(started.elapsed());
        metrics.commit_rows.observe(writable.len() as f64);
        tracing::debug!(
            ops = batch.len(),
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "group commit"
        );
        // One notice per session per batch: the highest seq now durable, or
        // the first failure.
        let mut sessions: HashMap<&str, (&DurableSink, Result<u64, StorageError>)> = HashMap::new();
        for (op, result) in batch.iter().zip(&results) {
            if let WriteOp::Row(row, sink) = op {
                let entry = sessions
                    .entry(row.session_id.as_str())
                    .or_insert((sink, Ok(row.seq)));
                entry.1 = match (&entry.1, result) {
                    (Err(e), _) | (Ok(_), Err(e)) => Err(e.clone()),
                    (Ok(seq), Ok(())) => Ok((*seq).max(row.seq)),
                };
            }
        }
        for (sink, result) in sessions.into_values() {
            sink.notify(result);
        }
        for (op, result) in batch.drain(..).zip(results) {
            match op {
                WriteOp::Snapshot {
                    done: Some(done), ..
                }
                | WriteOp::CreateSession { done, .. } => {
                    let _ = done.send(result);
                }
                _ => {}
            }
        }
    }
}

/// Commits `batch` in one transaction, or nothing of it.
///
/// The transaction is spelled out (`BEGIN IMMEDIATE` … `COMMIT`, `ROLLBACK`
/// on any error) instead of going through sqlx's transaction guard. SQLite
/// rolls a transaction back by itself on some errors (a full disk, an I/O
/// error, a trigger's `RAISE(ROLLBACK)`); the guard's own `ROLLBACK` then
/// fails, it keeps counting a transaction that no longer exists, and turns
/// every later `BEGIN`/`COMMIT` into a savepoint and its release: commits
/// that report success and write nothing. Here no state survives a failed
/// batch: the `ROLLBACK` is issued whether or not SQLite already rolled
/// back, and its own failure ("no transaction is active") is expected.
async fn commit(conn: &mut SqliteConnection, batch: &[&WriteOp]) -> Result<(), StorageError> {
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    let done = match write_batch(conn, batch).await {
        Ok(()) => sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(drop)
            .map_err(StorageError::from),
        Err(e) => Err(e),
    };
    if done.is_err()
        && let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await
    {
        tracing::debug!(error = %e, "rollback after a failed batch (SQLite may have rolled back already)");
    }
    done
}

/// The statements of one batch, inside the caller's transaction.
async fn write_batch(conn: &mut SqliteConnection, batch: &[&WriteOp]) -> Result<(), StorageError> {
    let mut rows: Vec<&JournalRow> = Vec::new();
    let mut audits: Vec<&AuditRow> = Vec::new();
    for op in batch {
        match op {
            WriteOp::Row(r, _) => {
                rows.push(r);
                continue;
            }
            // Audit rows go in together at the end, in order; they touch
            // nothing else, so journal rows keep collecting past them.
            WriteOp::Audit(a) => {
                audits.push(a);
                continue;
            }
            _ => {}
        }
        // Rows before a snapshot or a new session go first, keeping the
        // order.
        insert_rows(conn, &mut rows).await?;
        match op {
            WriteOp::Row(..) | WriteOp::Audit(_) => {}
            WriteOp::Snapshot {
                session_id,
                seq,
                state,
                ..
            } => {
                sqlx::query(
                    "INSERT INTO snapshots (session_id, seq, state, updated_at) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, \
                     updated_at = excluded.updated_at WHERE excluded.seq >= snapshots.seq",
                )
                .bind(session_id)
                .bind(*seq as i64)
                .bind(state)
                .bind(now_ms())
                .execute(&mut *conn)
                .await?;
            }
            WriteOp::CreateSession { meta, snapshot, .. } => {
                sqlx::query(
                    "INSERT INTO sessions (session_id, tenant_id, campaign_id, title, player_token, spectator_token, created_at, \
                     visibility) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&meta.session_id)
                .bind(&meta.tenant_id)
                .bind(&meta.campaign_id)
                .bind(&meta.title)
                .bind(&meta.player_token)
                .bind(&meta.spectator_token)
                .bind(meta.created_at)
                .bind(meta.visibility.as_str())
                .execute(&mut *conn)
                .await?;
                sqlx::query("INSERT INTO snapshots (session_id, seq, state, updated_at) VALUES (?, 0, ?, ?)")
                    .bind(&meta.session_id)
                    .bind(snapshot)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await?;
            }
        }
    }
    insert_rows(conn, &mut rows).await?;
    insert_audits(conn, &audits).await?;
    Ok(())
}

/// Inserts audit rows, many per statement.
async fn insert_audits(
    conn: &mut SqliteConnection,
    audits: &[&AuditRow],
) -> Result<(), StorageError> {
    for chunk in audits.chunks(ROWS_PER_INSERT) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO audit (session_id, tenant_id, trace_id, turn_id, call_id, tool, role, args_hash, \
             status, reason, error_code, error_message, duration_us, prompt_tokens, completion_tokens, created_at, \
             site_id, span_id, user_id) ",
        );
        insert.push_values(chunk, |mut b, a| {
            b.push_bind(&a.session_id)
                .push_bind(&a.tenant_id)
                .push_bind(&a.trace_id)
                .push_bind(&a.turn_id)
                .push_bind(&a.call_id)
                .push_bind(&a.tool)
                .push_bind(&a.role)
                .push_bind(&a.args_hash)
                .push_bind(&a.status)
                .push_bind(&a.reason)
                .push_bind(&a.error_code)
                .push_bind(&a.error_message)
                .push_bind(a.duration_us)
                .push_bind(a.prompt_tokens)
                .push_bind(a.completion_tokens)
                .push_bind(a.created_at)
                .push_bind(&a.site_id)
                .push_bind(&a.span_id)
                .push_bind(&a.user_id);
        });
        insert.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// Rows per INSERT statement: journal rows have 10 parameters each, audit
/// rows 19, both well under SQLite's limit of 32766 per statement.
const ROWS_PER_INSERT: usize = 256;

/// Inserts and clears `rows`, many per statement: one statement per row
/// costs more than the data.
async fn insert_rows(
    conn: &mut SqliteConnection,
    rows: &mut Vec<&JournalRow>,
) -> Result<(), StorageError> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO journal (session_id, seq, turn_id, kind, request_id, frame, effect, history, action, created_at) ",
        );
        insert.push_values(chunk, |mut b, r| {
            b.push_bind(&r.session_id)
                .push_bind(r.seq as i64)
                .push_bind(&r.turn_id)
                .push_bind(r.kind)
                .push_bind(&r.request_id)
                .push_bind(&r.frame)
                .push_bind(&r.effect)
                .push_bind(&r.history)
                .push_bind(&r.action)
                .push_bind(r.created_at);
        });
        insert.build().execute(&mut *conn).await?;
    }
    rows.clear();
    Ok(())
}

/// The audit columns, in the order [`audit_row`] reads them.
const AUDIT_COLUMNS: &str = "audit_id, session_id, tenant_id, trace_id, turn_id, call_id, tool, role, args_hash, \
     status, reason, error_code, error_message, duration_us, prompt_tokens, completion_tokens, created_at, \
     site_id, span_id, user_id";

fn audit_row(r: &sqlx::sqlite::SqliteRow) -> Result<AuditRow, sqlx::Error> {
    Ok(AuditRow {
        audit_id: r.try_get(0)?,
        session_id: r.try_get(1)?,
        tenant_id: r.try_get(2)?,
        trace_id: r.try_get(3)?,
        turn_id: r.try_get(4)?,
        call_id: r.try_get(5)?,
        tool: r.try_get(6)?,
        role: r.try_get(7)?,
        args_hash: r.try_get(8)?,
        status: r.try_get(9)?,
        reason: r.try_get(10)?,
        error_code: r.try_get(11)?,
        error_message: r.try_get(12)?,
        duration_us: r.try_get(13)?,
        prompt_tokens: r.try_get(14)?,
        completion_tokens: r.try_get(15)?,
        created_at: r.try_get(16)?,
        site_id: r.try_get(17)?,
        span_id: r.try_get(18)?,
        user_id: r.try_get(19)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store on a fresh file, with its URL (for a second connection).
    async fn store() -> (Store, tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let store = Store::open(&url).await.expect("store opens");
        (store, dir, url)
    }

    fn row(session_id: &str, seq: u64) -> JournalRow {
        JournalRow {
            session_id: session_id.to_owned(),
            seq,
            turn_id: None,
            kind: "presence",
            request_id: None,
            frame: format!("{{\"type\":\"presence\",\"seq\":{seq}}}"),
            effect: None,
            history: None,
            action: None,
            created_at: 0,
        }
    }

    /// A sink whose notices arrive on a channel.
    fn sink() -> (
        DurableSink,
        mpsc::UnboundedReceiver<Result<u64, StorageError>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            DurableSink::new(move |r| {
                let _ = tx.send(r);
            }),
            rx,
        )
    }

    /// Notices until one covers `seq` or reports a failure.
    async fn until(
        rx: &mut mpsc::UnboundedReceiver<Result<u64, StorageError>>,
        seq: u64,
    ) -> Result<u64, StorageError> {
        loop {
            match rx.recv().await.expect("the writer answers") {
                Ok(n) if n < seq => continue,
                other => return other,
            }
        }
    }

    /// The seqs of a session's journal, read on a connection of its own:
    /// only what is committed.
    async fn committed(url: &str, session_id: &str) -> Vec<i64> {
        let mut c = SqliteConnection::connect(url).await.expect("connects");
        sqlx::query_scalar("SELECT seq FROM journal WHERE session_id = ? ORDER BY seq")
            .bind(session_id)
            .fetch_all(&mut c)
            .await
            .expect("reads")
    }

    /// Makes the inserts of `session_id` fail the way a full disk does:
    /// SQLite rolls the whole transaction back by itself.
    async fn break_session(url: &str, session_id: &str) {
        let mut c = SqliteConnection::connect(url).await.expect("connects");
        let sql = format!(
            "CREATE TRIGGER broken AFTER INSERT ON journal WHEN NEW.session_id = '{session_id}' \
             BEGIN SELECT RAISE(ROLLBACK, 'injected'); END"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("trigger");
    }

    /// Makes the commits of transactions that insert rows of `session_id`
    /// fail and leave the transaction open, as a commit that cannot get its
    /// disk space does (here: a deferred foreign key broken at commit).
    async fn break_commits_of(url: &str, session_id: &str) {
        let mut c = SqliteConnection::connect(url).await.expect("connects");
        for sql in [
            "CREATE TABLE IF NOT EXISTS t_parent (id INTEGER PRIMARY KEY)".to_owned(),
            "CREATE TABLE IF NOT EXISTS t_child (parent INTEGER REFERENCES t_parent (id) \
             DEFERRABLE INITIALLY DEFERRED)"
                .to_owned(),
            format!(
                "CREATE TRIGGER broken AFTER INSERT ON journal WHEN NEW.session_id = '{session_id}' \
                 BEGIN INSERT INTO t_child (parent) VALUES (-1); END"
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut c)
                .await
                .expect("fault");
        }
    }

    async fn heal(url: &str) {
        let mut c = SqliteConnection::connect(url).await.expect("connects");
        sqlx::query("DROP TRIGGER broken")
            .execute(&mut c)
            .await
            .expect("drop");
    }

    #[actix_web::test]
    async fn a_notice_means_every_row_up_to_it_is_committed() {
        let (store, _dir, url) = store().await;
        let (a, mut notices) = sink();
        for seq in 1..=5 {
            store.append(row("a", seq), a.clone());
        }
        assert_eq!(until(&mut notices, 5).await.ok(), Some(5));
        assert_eq!(committed(&url, "a").await, [1, 2, 3, 4, 5]);
        assert_eq!(store.refusing(), None);
    }

    #[actix_web::test]
    async fn a_failed_row_fails_its_stream_for_good_and_no_other() {
        let (store, _dir, url) = store().await;
        let (a, mut a_notices) = sink();
        let (b, mut b_notices) = sink();
        store.append(row("a", 1), a.clone());
        assert_eq!(until(&mut a_notices, 1).await.ok(), Some(1));
        break_session(&url, "b").await;
        store.append(row("b", 1), b.clone());
        store.append(row("a", 2), a.clone());
        assert!(until(&mut b_notices, 1).await.is_err(), "b's row failed");
        assert_eq!(until(&mut a_notices, 2).await.ok(), Some(2), "a's did not");
        heal(&url).await;
        // The failed stream stays refused (no gap in its journal) ...
        store.append(row("b", 2), b.clone());
        assert!(until(&mut b_notices, 2).await.is_err());
        // ... while a new stream of the same session (a reload) writes.
        let (b_again, mut again) = sink();
        store.append(row("b", 1), b_again);
        assert_eq!(until(&mut again, 1).await.ok(), Some(1));
        assert_eq!(committed(&url, "b").await, [1]);
        assert_eq!(committed(&url, "a").await, [1, 2]);
    }

    #[actix_web::test]
    async fn a_long_write_queue_refuses_new_work_until_it_drains() {
        let (store, _dir, url) = store().await;
        // Another connection holds the write lock: the writer takes one
        // batch and waits on it, and everything after queues up.
        let mut lock = SqliteConnection::connect(&url).await.expect("connects");
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut lock)
            .await
            .expect("lock");
        let (a, mut notices) = sink();
        let rows = (BUSY_QUEUED_WRITES + MAX_BATCH) as u64;
        for seq in 1..=rows {
            store.append(row("a", seq), a.clone());
        }
        assert_eq!(store.refusing(), Some(STORAGE_BEHIND));
        sqlx::query("COMMIT")
            .execute(&mut lock)
            .await
            .expect("unlock");
        assert_eq!(until(&mut notices, rows).await.ok(), Some(rows));
        assert_eq!(store.refusing(), None, "drained, it takes work again");
        assert_eq!(committed(&url, "a").await.len() as u64, rows);
    }

    #[actix_web::test]
    async fn after_failed_transactions_later_commits_are_real() {
        // A transaction SQLite rolled back on its own, then a commit that
        // failed and left its transaction open: neither may leave the writer
        // inside a transaction that never ends, so later commits that report
        // success are visible to another connection.
        let (store, _dir, url) = store().await;
        break_session(&url, "b").await;
        let (b, mut b_notices) = sink();
        store.append(row("b", 1), b);
        assert!(until(&mut b_notices, 1).await.is_err());
        heal(&url).await;
        break_commits_of(&url, "c").await;
        let (c, mut c_notices) = sink();
        store.append(row("c", 1), c);
        assert!(until(&mut c_notices, 1).await.is_err());
        heal(&url).await;
        let (a, mut a_notices) = sink();
        for seq in 1..=3 {
            store.append(row("a", seq), a.clone());
        }
        assert_eq!(until(&mut a_notices, 3).await.ok(), Some(3));
        assert_eq!(committed(&url, "a").await, [1, 2, 3]);
        assert!(committed(&url, "c").await.is_empty());
    }
}
