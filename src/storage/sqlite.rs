//! SQLite storage: the embedded default. WAL, `synchronous = FULL`, a pool
//! of read connections and one writer connection for the group commits.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::ops::{Committer, GATHER, QueuedRecord, RecordWrite};
use super::sql::{self, queries};
use super::steps;
use super::{FirstSnapshot, JournalRow, TimerIndex, formats};
use crate::game::pieces::SharedStart;

queries!(sqlx::Sqlite);

/// How long a connection waits for another's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The page size of a database this creates. Each turn writes a few pages
/// of its own (its session's leaf of each per-session index) and its share
/// of the tables' last pages, and the WAL takes two `pwrite`s per page:
/// 8 KiB pages hold what 4 KiB pages held in about half as many, so a
/// turn costs half the writes for the same bytes (BENCHMARKS.md, "Fewer
/// WAL writes per turn"). A database made before keeps its own page size:
/// SQLite fixes it when the file is made, and this setting does not change
/// it.
const PAGE_SIZE: u32 = 8192;

/// What the WAL file is cut back to after a checkpoint that emptied it,
/// when something (a long `questd backup`, a reader held open) let it grow
/// past this: SQLite otherwise keeps the file at its largest size (1 GB
/// after the backups under load of BENCHMARKS.md).
const WAL_KEEP_BYTES: u64 = 64 * 1024 * 1024;

/// The bytes of a WAL frame's header, before its page.
const WAL_FRAME_HEADER: u64 = 24;

/// Read connections of the pool, all opened at start.
const READ_CONNECTIONS: u32 = 4;

/// Opens (creating if needed) the database at `url` (`sqlite://PATH`) and
/// runs its migrations: the read pool and the writer's connection.
///
/// `max_mb` caps the database's size: past it every write fails as on a
/// full disk (`SQLITE_FULL`), which the writer handles like one.
pub(super) async fn open(
    url: &str,
    max_mb: Option<u64>,
) -> Result<(SqlitePool, SqliteCommitter), StorageError> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        // The writer and the readers are separate connections: each would
        // see a database of its own, and nothing would outlive the process.
        return Err(StorageError::Database(
            "an in-memory SQLite database cannot be used: name a file (sqlite://PATH)".into(),
        ));
    }
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .page_size(PAGE_SIZE)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a commit is on disk when it returns. Group commit keeps
        // that to one fsync per batch.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    // Read connections are kept once open (no idle timeout, no lifetime),
    // so a node whose open files fill up later still has its database's.
    let pool = SqlitePoolOptions::new()
        .max_connections(READ_CONNECTIONS)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options.clone())
        .await?;
    sqlx::migrate!("migrations/sqlite").run(&pool).await?;
    super::hashed_tokens(hash_stored_tokens(&pool).await?);
    // Open them all now, one after another (opening them at once on a new
    // file races to set WAL mode: "database is locked").
    let mut opened = Vec::with_capacity(READ_CONNECTIONS as usize);
    for _ in 0..READ_CONNECTIONS {
        opened.push(pool.acquire().await?);
    }
    drop(opened);
    let path = options.get_filename().to_owned();
    let committer = tokio::task::spawn_blocking(move || SqliteCommitter::open(&path, max_mb))
        .await
        .map_err(|e| StorageError::Database(e.to_string()))??;
    Ok((pool, committer))
}

/// Whether SQLite's `synchronous` level makes a commit in WAL mode
/// durable when it returns: FULL (2) or EXTRA (3); NORMAL (1) may lose
/// the last commits on a power cut, OFF (0) more.
fn durable_commits(synchronous: i64) -> bool {
    synchronous >= 2
}

/// The writer's connection: rusqlite on the writer's own thread, with its
/// statements prepared once and kept. A group commit is a few hundred
/// small inserts; through sqlx each was a round trip to its worker thread
/// and a fresh multi-row statement per batch size.
pub(super) struct SqliteCommitter {
    conn: rusqlite::Connection,
    /// The shared starts this connection has committed: rows of
    /// `shared_starts` are never deleted, so a later session naming one
    /// needs no insert (and does not hand SQLite its whole text again).
    stored_starts: HashSet<String>,
}

impl SqliteCommitter {
    fn open(path: &std::path::Path, max_mb: Option<u64>) -> Result<Self, StorageError> {
        let conn = rusqlite::Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // FULL: a commit is on disk when it returns (the read pool set WAL).
        // The writer's transactions hold a whole group commit: a page cache
        // big enough for one (16 MiB instead of 2) keeps it from spilling
        // pages to disk before the commit.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA cache_size = -16384;",
        )?;
        // Read back rather than trusted: a commit acknowledged before it
        // is on disk could be lost with the machine, after a player saw it.
        let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        if !durable_commits(synchronous) {
            return Err(StorageError::Database(format!(
                "SQLite's synchronous is {synchronous} on the writer's connection, not FULL (2): \
                 a commit would be acknowledged before it is on disk"
            )));
        }
        tracing::info!(
            synchronous = "FULL",
            "the journal writer's commits are durable"
        );
        // Only the writer writes, so its connection's checkpoints are the
        // file's.
        conn.execute_batch(&format!("PRAGMA journal_size_limit = {WAL_KEEP_BYTES};"))?;
        // The file's own page size: one made before keeps the size it had.
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let page_size = page_size.max(512) as u64;
        ready_wal(&conn, path, page_size);
        if let Some(mb) = max_mb {
            // Only the writer writes, so its connection's cap is the file's.
            let pages = (mb.saturating_mul(1024 * 1024) / page_size).max(1);
            let _: i64 = conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get(0)
            })?;
        }
        Ok(Self {
            conn,
            stored_starts: HashSet::new(),
        })
    }

    /// Writes `batch` in one transaction: `BEGIN IMMEDIATE` takes the write
    /// lock at once, so a busy database waits (busy timeout) there rather
    /// than failing mid-batch. On any error `ROLLBACK` is issued whether
    /// or not SQLite already rolled back by itself (a full disk, an I/O
    /// error, a trigger's `RAISE(ROLLBACK)`); its own failure then ("no
    /// transaction is active") is expected. No state survives a failed
    /// batch.
    fn write(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
        let conn = &self.conn;
        // Prepared once and kept, like every statement of a batch, instead
        // of parsed again for every commit.
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let mut starts = Starts {
            stored: &self.stored_starts,
            inserted: Vec::new(),
        };
        let done = write_ops(conn, batch, &mut starts)
            .and_then(|()| Ok(conn.prepare_cached("COMMIT")?.execute([]).map(drop)?));
        if done.is_err()
            && let Err(e) = conn.execute_batch("ROLLBACK")
        {
            tracing::debug!(error = %e, "rollback after a failed batch (it may have rolled back already)");
        }
        // Known stored only once committed: a batch rolled back takes its
        // inserts with it.
        if done.is_ok() {
            self.stored_starts.extend(starts.inserted);
        }
        done
    }
}

impl Committer for SqliteCommitter {
    async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
        // The writer runs on a thread of its own: blocking here blocks
        // nothing else.
        self.write(batch)
    }

    fn own_thread() -> bool {
        true
    }

    fn gather() -> Option<std::time::Duration> {
        Some(GATHER)
    }
}

/// Makes the WAL file as long as it gets between two checkpoints, its new
/// bytes zeros written and synced, before the first group commit. SQLite
/// appends frames to the WAL until a checkpoint lets it start again from
/// the top (it keeps the file's length, up to `journal_size_limit`), so on
/// a new or cut-back file each commit's `fdatasync` also had the
/// filesystem place the new blocks and journal the file's new length:
/// half again as much CPU and twice the wait of a sync that overwrites
/// blocks already placed (BENCHMARKS.md, "A WAL ready at start").
/// PostgreSQL fills each new WAL segment with zeros for the same reason.
///
/// Only bytes past the file's end are written, under the database's write
/// lock (`BEGIN IMMEDIATE`), so no frame is being written meanwhile, and
/// SQLite reads frames only up to the first whose checksum fails: zeros
/// add no frame, and every frame the file held is left as it was. A file
/// that does not exist yet is left for SQLite to make. Not being able to
/// do it (a full disk) costs only speed: it is logged and the writer
/// goes on.
fn ready_wal(conn: &rusqlite::Connection, db: &std::path::Path, page_size: u64) {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    let wal = std::path::PathBuf::from(name);
    let grown = (|| -> Result<u64, String> {
        // The checkpoint's trigger and a quarter more: the commit that
        // crosses it lands whole first, and a few more while a reader
        // holds the checkpoint back.
        let frames: i64 = conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .map_err(|e| e.to_string())?;
        let frames = frames.max(0) as u64;
        let wanted = 32 + (frames + frames / 4) * (page_size + WAL_FRAME_HEADER);
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| e.to_string())?;
        let grown = zero_fill(&wal, wanted.min(WAL_KEEP_BYTES)).map_err(|e| e.to_string());
        // Nothing was written in the transaction: its end writes nothing,
        // and a group commit's `BEGIN` needs it ended.
        if let Err(e) = conn.execute_batch("COMMIT") {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e.to_string());
        }
        grown
    })();
    match grown {
        Ok(0) => {}
        Ok(bytes) => tracing::debug!(
            bytes,
            "the WAL file is ready for the commits up to a checkpoint"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "the WAL file could not be made ready at start: commits sync its growth as they go"
        ),
    }
}

/// Writes zeros from `path`'s end up to `len` bytes and syncs the file;
/// the bytes written (none when it is long enough already, or missing).
fn zero_fill(path: &std::path::Path, len: u64) -> std::io::Result<u64> {
    use std::io::Write as _;
    let mut file = match std::fs::OpenOptions::new().append(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let start = file.metadata()?.len();
    if start >= len {
        return Ok(0);
    }
    let zeros = vec![0u8; 1 << 20];
    let mut at = start;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all(&zeros[..n])?;
        at += n as u64;
    }
    file.sync_all()?;
    Ok(len - start)
}

/// The shared starts a batch may name: those committed before it, and
/// those it inserts.
struct Starts<'a> {
    stored: &'a HashSet<String>,
    inserted: Vec<String>,
}

impl Starts<'_> {
    /// Inserts `start` unless it is known to be stored.
    fn store(
        &mut self,
        conn: &rusqlite::Connection,
        start: &SharedStart,
    ) -> Result<(), StorageError> {
        if self.stored.contains(&start.id) || self.inserted.contains(&start.id) {
            return Ok(());
        }
        conn.prepare_cached(sql::INSERT_SHARED_START)?
            .execute(rusqlite::params![start.id, start.text, now_ms()])?;
        self.inserted.push(start.id.clone());
        Ok(())
    }
}

/// Every write of `batch`, in order, with the statements the connection
/// keeps prepared.
fn write_ops(
    conn: &rusqlite::Connection,
    batch: &[&WriteOp],
    starts: &mut Starts<'_>,
) -> Result<(), StorageError> {
    use rusqlite::params;
    // Journal rows collect into steps until a write other than an audit
    // row comes (audit rows touch nothing else, so they do not split a
    // step); the order of everything else is kept.
    let mut rows: Vec<&JournalRow> = Vec::new();
    for op in batch {
        match op {
            WriteOp::Row(r, _) => {
                // Its timer index changes go in with it (the writer
                // retries a failed batch op by op: never one without the
                // other).
                write_timers(conn, r)?;
                rows.push(r);
                continue;
            }
            WriteOp::Audit(_) => {}
            _ => insert_steps(conn, &mut rows)?,
        }
        match op {
            WriteOp::Row(..) => {}
            WriteOp::Audit(a) => {
                conn.prepare_cached(sql::INSERT_AUDIT_ROW)?
                    .execute(params![
                        a.session_id,
                        a.tenant_id,
                        a.trace_id,
                        a.turn_id,
                        a.call_id,
                        a.tool,
                        a.role,
                        a.args_hash,
                        a.status,
                        a.reason,
                        a.error_code,
                        a.error_message,
                        a.duration_us,
                        a.prompt_tokens,
                        a.completion_tokens,
                        a.created_at,
                        a.site_id,
                        a.span_id,
                        a.user_id
                    ])?;
            }
            WriteOp::Enqueue { chat, .. } => {
                conn.prepare_cached(sql::INSERT_INBOX)?.execute(params![
                    chat.session_id,
                    chat.turn_id,
                    chat.turn_no as i64,
                    chat.request_id,
                    chat.text,
                    chat.after_seq as i64,
                    chat.created_at,
                    chat.seat_id
                ])?;
            }
            WriteOp::Dequeue {
                session_id,
                turn_id,
                ..
            } => {
                conn.prepare_cached(sql::DELETE_INBOX)?
                    .execute(params![session_id, turn_id])?;
            }
            WriteOp::Snapshot {
                session_id,
                snapshot,
                ..
            } => {
                let mut insert = conn.prepare_cached(sql::INSERT_CHUNK)?;
                for (id, body) in &snapshot.chunks {
                    insert.execute(params![session_id, id, body])?;
                }
                let replaced = conn.prepare_cached(sql::UPSERT_SNAPSHOT)?.execute(params![
                    session_id,
                    snapshot.seq as i64,
                    snapshot.state,
                    now_ms()
                ])?;
                if replaced > 0 {
                    let keep = serde_json::to_string(&snapshot.keep)
                        .map_err(|e| StorageError::Database(e.to_string()))?;
                    conn.prepare_cached(
                        "DELETE FROM snapshot_chunks WHERE session_id = ?1 \
                         AND chunk_id NOT IN (SELECT value FROM json_each(?2))",
                    )?
                    .execute(params![session_id, keep])?;
                }
            }
            WriteOp::Record(record) => write_record(conn, record)?,
            WriteOp::CreateSession {
                meta,
                snapshot,
                story,
                ..
            } => {
                // A session begun unchanged from a shared start, with no
                // story of its own, names the start in its row and has no
                // snapshot row until its first snapshot (PostgreSQL still
                // writes one: see `postgres::write_batch`).
                let named_start = match (snapshot, story) {
                    (FirstSnapshot::Shared(start), None) => Some(start.id.as_str()),
                    _ => None,
                };
                conn.prepare_cached(sql::INSERT_SESSION)?.execute(params![
                    meta.session_id,
                    meta.tenant_id,
                    meta.campaign_id,
                    meta.title,
                    meta.stored_player_token,
                    meta.stored_spectator_token,
                    meta.created_at,
                    meta.visibility.as_str(),
                    meta.anonymous,
                    named_start
                ])?;
                let first = match snapshot {
                    FirstSnapshot::Whole(text) => std::borrow::Cow::Borrowed(text.as_str()),
                    FirstSnapshot::Shared(start) => {
                        starts.store(conn, start)?;
                        std::borrow::Cow::Owned(formats::shared_start_ref(&start.id))
                    }
                };
                match story {
                    None if named_start.is_some() => 0,
                    None => conn
                        .prepare_cached(sql::INSERT_FIRST_SNAPSHOT)?
                        .execute(params![meta.session_id, first, now_ms()])?,
                    Some(story) => {
                        for (timer_id, due_at) in &story.timers {
                            conn.prepare_cached(sql::UPSERT_TIMER)?.execute(params![
                                meta.session_id,
                                timer_id,
                                due_at
                            ])?;
                        }
                        rows.extend(&story.rows);
                        conn.prepare_cached(sql::UPSERT_SNAPSHOT)?.execute(params![
                            meta.session_id,
                            story.last_seq() as i64,
                            first,
                            now_ms()
                        ])?
                    }
                };
            }
        }
    }
    insert_steps(conn, &mut rows)
}

/// See [`super::Store::abandoned_sessions`].
pub(super) async fn abandoned_sessions(
    pool: &SqlitePool,
    before_ms: i64,
    limit: u32,
) -> Result<Vec<SessionId>, StorageError> {
    let query = sql::abandoned_sessions("s.anonymous = 1", "");
    // Built only from constants.
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(query))
        .bind(before_ms)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// The timer index changes of journal row `row`.
fn write_timers(conn: &rusqlite::Connection, row: &JournalRow) -> Result<(), StorageError> {
    use rusqlite::params;
    for t in &row.timers {
        match t {
            TimerIndex::Due { timer_id, due_at } => conn
                .prepare_cached(sql::UPSERT_TIMER)?
                .execute(params![row.session_id, timer_id, due_at])?,
            TimerIndex::DueUnlessSet { timer_id, due_at } => conn
                .prepare_cached(sql::INSERT_TIMER_UNLESS_SET)?
                .execute(params![row.session_id, timer_id, due_at])?,
            TimerIndex::Gone { timer_id } => conn
                .prepare_cached(sql::DELETE_TIMER)?
                .execute(params![row.session_id, timer_id])?,
        };
    }
    Ok(())
}

/// See [`super::Store::due_timers`].
pub(super) async fn due_timers(
    pool: &SqlitePool,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<(SessionId, i64)>, StorageError> {
    // Built only from constants.
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql::due_timers("")))
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// See [`super::Store::waiting_chats`].
pub(super) async fn waiting_chats(
    pool: &SqlitePool,
    limit: u32,
) -> Result<Vec<(SessionId, i64)>, StorageError> {
    // Built only from constants.
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql::waiting_chats("")))
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?)
}

/// Inserts `rows` as journal steps and clears them.
fn insert_steps(
    conn: &rusqlite::Connection,
    rows: &mut Vec<&JournalRow>,
) -> Result<(), StorageError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = conn.prepare_cached(sql::INSERT_JOURNAL_STEP)?;
    for s in steps::group(rows) {
        insert.execute(rusqlite::params![
            s.session_id,
            s.seq,
            s.last_seq,
            s.turn_id,
            s.started,
            s.request_id,
            s.ended,
            s.actions,
            s.body,
            s.created_at
        ])?;
    }
    rows.clear();
    Ok(())
}

/// One site or idempotency-key write; sets its outcome.
fn write_record(conn: &rusqlite::Connection, record: &QueuedRecord) -> Result<(), StorageError> {
    use rusqlite::{OptionalExtension, params};
    let returned = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> Result<i64, StorageError> {
        Ok(conn
            .prepare_cached(sql)?
            .query_row(params, |row| row.get::<_, i64>(0))
            .optional()?
            .unwrap_or(0))
    };
    let outcome = match &record.write {
        RecordWrite::PutSite(site) => returned(
            sql::PUT_SITE,
            params![
                site.tenant_id,
                site.site_id,
                site.campaign_id,
                site.title,
                site.state,
                site.created_at,
                site.updated_at
            ],
        )?,
        RecordWrite::UpdateSite {
            tenant_id,
            site_id,
            state,
            expected,
            updated_at,
        } => returned(
            sql::UPDATE_SITE,
            params![state, updated_at, tenant_id, site_id, expected],
        )?,
        RecordWrite::ClaimKey {
            tenant_id,
            key,
            tool,
            request_hash,
            created_at,
            forget_before,
        } => {
            conn.prepare_cached(sql::FORGET_KEYS)?
                .execute(params![forget_before])?;
            conn.prepare_cached(sql::CLAIM_KEY)?.execute(params![
                tenant_id,
                key,
                tool,
                request_hash,
                created_at
            ])? as i64
        }
        RecordWrite::FinishKey {
            tenant_id,
            key,
            status,
            response,
        } => conn
            .prepare_cached(sql::FINISH_KEY)?
            .execute(params![status, response, tenant_id, key])? as i64,
        RecordWrite::DropKey { tenant_id, key } => {
            conn.prepare_cached(sql::DROP_KEY)?
                .execute(params![tenant_id, key])? as i64
        }
        RecordWrite::AddSpend {
            day,
            scope,
            key,
            tokens,
            forget_before_day,
        } => {
            if let Some(before) = forget_before_day {
                conn.prepare_cached(sql::FORGET_SPEND)?
                    .execute(params![before])?;
            }
            conn.prepare_cached(sql::ADD_SPEND)?
                .execute(params![day, scope, key, tokens])? as i64
        }
        RecordWrite::CloseSession {
            session_id,
            closed_at,
        } => conn
            .prepare_cached(sql::CLOSE_SESSION)?
            .execute(params![closed_at, session_id])? as i64,
        // One node: nobody else can have claimed it.
        RecordWrite::DeleteSession { session_id, .. } => {
            let mut deleted = 0;
            for statement in sql::DELETE_SESSION {
                deleted = conn
                    .prepare_cached(statement)?
                    .execute(params![session_id])? as i64;
            }
            deleted
        }
    };
    record.took(outcome);
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::storage::{
        BUSY_QUEUED_WRITES, DurableSink, JournalRow, MAX_BATCH, STORAGE_BEHIND, SessionWrite,
        Store, StoredAction, StoredHistory,
    };
    use sqlx::{Connection, SqliteConnection};
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn an_in_memory_database_is_refused_with_a_reason() {
        for url in ["sqlite::memory:", "sqlite://file.db?mode=memory"] {
            let Err(e) = Store::open(url).await else {
                panic!("{url} opened");
            };
            assert!(e.to_string().contains("name a file"), "{url}: {e}");
        }
    }

    #[test]
    fn the_writer_commits_only_at_full_synchronous() {
        for (level, durable) in [(0, false), (1, false), (2, true), (3, true)] {
            assert_eq!(durable_commits(level), durable, "{level}");
        }
        // The writer's own connection reads FULL back.
        let dir = tempfile::tempdir().expect("temp dir");
        let committer = SqliteCommitter::open(&dir.path().join("t.db"), None).expect("opens");
        let level: i64 = committer
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("reads");
        assert_eq!(level, 2);
    }

    #[test]
    fn the_writer_cuts_a_grown_wal_back_to_64_mib() {
        let dir = tempfile::tempdir().expect("temp dir");
        let committer = SqliteCommitter::open(&dir.path().join("t.db"), None).expect("opens");
        let pragma = |name: &str| -> i64 {
            committer
                .conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
                .expect("reads")
        };
        assert_eq!(pragma("journal_size_limit"), 64 * 1024 * 1024);
    }

    #[test]
    fn zero_fill_only_appends_and_makes_no_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        assert_eq!(zero_fill(&path, 100).expect("missing is fine"), 0);
        assert!(!path.exists(), "a missing file is left for SQLite to make");
        std::fs::write(&path, b"frames").expect("writes");
        assert_eq!(zero_fill(&path, 3 << 20).expect("fills"), (3 << 20) - 6);
        let bytes = std::fs::read(&path).expect("reads");
        assert_eq!(bytes.len(), 3 << 20);
        assert_eq!(&bytes[..6], b"frames");
        assert!(bytes[6..].iter().all(|&b| b == 0));
        assert_eq!(zero_fill(&path, 10).expect("long enough"), 0);
        assert_eq!(std::fs::metadata(&path).expect("stat").len(), 3 << 20);
    }

    #[test]
    fn the_writer_readies_the_wal_and_keeps_every_frame_it_held() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("t.db");
        let wal = dir.path().join("t.db-wal");
        // Rows committed to the WAL and never checkpointed, as a process
        // killed between its commit and a checkpoint leaves them.
        let crashed = rusqlite::Connection::open(&db).expect("opens");
        crashed
            .execute_batch(
                "PRAGMA page_size = 8192; PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (v TEXT);
                 INSERT INTO t VALUES ('before');",
            )
            .expect("writes");
        let held = std::fs::metadata(&wal).expect("a WAL").len();
        let frames = std::fs::read(&wal).expect("reads");
        std::mem::forget(crashed); // never closed: no checkpoint, the WAL stays
        let committer = SqliteCommitter::open(&db, None).expect("opens");
        let ready = std::fs::metadata(&wal).expect("a WAL").len();
        assert!(
            (32 + 1000 * (8192 + 24)..=WAL_KEEP_BYTES).contains(&ready),
            "{held} bytes, then {ready}"
        );
        assert_eq!(
            &std::fs::read(&wal).expect("reads")[..frames.len()],
            &frames[..]
        );
        committer
            .conn
            .execute("INSERT INTO t VALUES ('after')", [])
            .expect("writes");
        // Another machine's view: the two files alone, recovered from the WAL.
        let copy = tempfile::tempdir().expect("temp dir");
        std::fs::copy(&db, copy.path().join("t.db")).expect("copies");
        std::fs::copy(&wal, copy.path().join("t.db-wal")).expect("copies");
        let read = rusqlite::Connection::open(copy.path().join("t.db")).expect("opens");
        let rows: Vec<String> = read
            .prepare("SELECT v FROM t ORDER BY rowid")
            .expect("prepares")
            .query_map([], |r| r.get(0))
            .expect("reads")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows, ["before", "after"]);
    }

    /// A store on a fresh file, with its URL (for a second connection).
    async fn store() -> (Store, tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let store = Store::open(&url).await.expect("store opens");
        (store, dir, url)
    }

    pub(in crate::storage) fn row(session_id: &str, seq: u64) -> JournalRow {
        JournalRow {
            session_id: session_id.into(),
            seq,
            turn_id: None,
            kind: "presence",
            request_id: None,
            frame: format!("{{\"type\":\"presence\",\"seq\":{seq}}}").into(),
            effect: None,
            history: None,
            action: None,
            created_at: 0,
            timers: Vec::new(),
        }
    }

    /// A sink whose notices arrive on a channel.
    pub(in crate::storage) fn sink() -> (
        DurableSink,
        mpsc::UnboundedReceiver<Result<u64, StorageError>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            DurableSink::new(crate::storage::Epoch::Sole, move |r| {
                let _ = tx.send(r);
            }),
            rx,
        )
    }

    /// Notices until one covers `seq` or reports a failure.
    pub(in crate::storage) async fn until(
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
        let bodies: Vec<String> =
            sqlx::query_scalar("SELECT body FROM journal WHERE session_id = ? ORDER BY seq")
                .bind(session_id)
                .fetch_all(&mut c)
                .await
                .expect("reads");
        bodies
            .iter()
            .flat_map(|b| steps::decode(b).expect("decodes"))
            .map(|e| e.seq as i64)
            .collect()
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

    /// The timer index follows the rows that change it, in their commit;
    /// the sweeper's read finds open sessions with a due timer, soonest
    /// first, and never a closed one.
    #[actix_web::test]
    async fn the_timer_index_is_written_with_its_rows_and_read_by_due_time() {
        use crate::storage::TimerIndex::{Due, DueUnlessSet, Gone};
        let (store, _dir, _url) = store().await;
        for id in ["a", "b", "c"] {
            store
                .create_session(meta(id), FirstSnapshot::Whole("{}".into()))
                .await
                .unwrap();
        }
        let (sink, mut notices) = sink();
        let due = |id: &str, at| Due {
            timer_id: id.into(),
            due_at: at,
        };
        let with = |session, seq, timers| JournalRow {
            timers,
            ..row(session, seq)
        };
        let rows = vec![
            with("a", 1, vec![due("tmr_1", 500), due("tmr_2", 100)]),
            with(
                "a",
                2,
                vec![Gone {
                    timer_id: "tmr_2".into(),
                }],
            ),
            with(
                "b",
                1,
                vec![DueUnlessSet {
                    timer_id: "round".into(),
                    due_at: 300,
                }],
            ),
            with(
                "b",
                2,
                vec![DueUnlessSet {
                    timer_id: "round".into(),
                    due_at: 900,
                }],
            ),
            with("c", 1, vec![due("tmr_9", 50)]),
        ];
        store.write_all(rows.into_iter().map(SessionWrite::Row).collect(), &sink);
        // One step's rows, one commit: the notice covers them all.
        assert_eq!(until(&mut notices, 2).await.ok(), Some(2));
        assert_eq!(store.count_timers().await.unwrap(), 3);
        store.close_session(&"c".into(), 1).await.unwrap();
        let found = store.due_timers(1_000, 10).await.unwrap();
        let found: Vec<(&str, i64)> = found.iter().map(|(s, at)| (s.as_str(), *at)).collect();
        // `b`'s round deadline stays at its first action's; `a`'s
        // cancelled timer is gone; closed `c` is left alone.
        assert_eq!(found, [("b", 300), ("a", 500)]);
        assert_eq!(store.due_timers(400, 10).await.unwrap().len(), 1);
        assert_eq!(store.due_timers(1_000, 1).await.unwrap().len(), 1);
    }

    #[actix_web::test]
    async fn the_rows_of_a_step_go_in_together_and_fail_only_their_own_stream() {
        let (store, _dir, url) = store().await;
        let (a, mut a_notices) = sink();
        let (b, mut b_notices) = sink();
        let step = |id: &str, seqs: std::ops::RangeInclusive<u64>| {
            seqs.map(|seq| SessionWrite::Row(row(id, seq))).collect()
        };
        store.write_all(step("a", 1..=3), &a);
        assert_eq!(until(&mut a_notices, 3).await.ok(), Some(3));
        break_session(&url, "b").await;
        store.write_all(step("b", 1..=2), &b);
        store.write_all(step("a", 4..=5), &a);
        assert!(until(&mut b_notices, 2).await.is_err(), "b's step failed");
        assert_eq!(until(&mut a_notices, 5).await.ok(), Some(5), "a's did not");
        assert_eq!(committed(&url, "a").await, [1, 2, 3, 4, 5]);
        assert!(committed(&url, "b").await.is_empty());
    }

    #[actix_web::test]
    async fn frames_to_resume_stop_at_their_count_or_size() {
        let (store, _dir, _url) = store().await;
        let (a, mut notices) = sink();
        for seq in 1..=6 {
            store.append(row("a", seq), a.clone());
        }
        assert_eq!(until(&mut notices, 6).await.ok(), Some(6));
        let seqs =
            |frames: Vec<(u64, String)>| frames.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
        let each = row("a", 1).frame.len() as u64;
        let a = SessionId::from("a");
        let read = |limit, chars| store.frames_after(&a, 2, limit, chars);
        assert_eq!(seqs(read(10, u64::MAX).await.unwrap()), [3, 4, 5, 6]);
        assert_eq!(seqs(read(2, u64::MAX).await.unwrap()), [3, 4], "by count");
        assert_eq!(
            seqs(read(10, 3 * each).await.unwrap()),
            [3, 4, 5],
            "by size"
        );
        assert!(read(10, each - 1).await.unwrap().is_empty());
    }

    /// Two turns of session "s": `t1` (seqs 1–5, one applied action at 3,
    /// ended at 5) and `t2` (seqs 6–7, an action at 7, still open).
    fn two_turns() -> Vec<JournalRow> {
        let kinds: [(&str, &'static str, bool); 7] = [
            ("t1", "turn_started", false),
            ("t1", "tool_call", false),
            ("t1", "tool_result", true),
            ("t1", "narrative", false),
            ("t1", "turn_completed", false),
            ("t2", "turn_started", false),
            ("t2", "tool_result", true),
        ];
        kinds
            .into_iter()
            .zip(1u64..)
            .map(|((turn, kind, action), seq)| JournalRow {
                turn_id: Some(turn.into()),
                kind,
                request_id: (kind == "turn_started").then(|| format!("r-{turn}").into()),
                frame: format!("{{\"type\":\"{kind}\",\"seq\":{seq},\"turn_id\":\"{turn}\"}}")
                    .into(),
                effect: action.then(|| format!("{{\"roll\":{seq}}}")),
                history: (kind == "narrative")
                    .then(|| StoredHistory::Json("{\"text\":\"on\"}".to_owned())),
                action: action
                    .then(|| StoredAction::Json(format!("{{\"tool\":\"roll_dice\",\"n\":{seq}}}"))),
                created_at: 1_000 + seq as i64,
                ..row("s", seq)
            })
            .collect()
    }

    fn meta(session_id: &str) -> crate::storage::SessionMeta {
        crate::storage::SessionMeta {
            session_id: session_id.into(),
            tenant_id: "default".into(),
            campaign_id: "demo".into(),
            title: "t".into(),
            stored_player_token: "p".into(),
            stored_spectator_token: "w".into(),
            created_at: 0,
            visibility: Default::default(),
            closed_at: None,
            anonymous: false,
        }
    }

    /// What every reader of the journal answers about [`two_turns`].
    async fn reads_two_turns(store: &Store) {
        let rows = two_turns();
        let seqs = |frames: Vec<(u64, String)>| frames.into_iter().map(|f| f.0).collect::<Vec<_>>();
        let after_2 = store
            .frames_after(&"s".into(), 2, 100, u64::MAX)
            .await
            .unwrap();
        assert_eq!(seqs(after_2.clone()), [3, 4, 5, 6, 7]);
        assert_eq!(after_2[0].1, &*rows[2].frame, "frames read back as written");
        let tail = store
            .journal_after(&"s".into(), 6, 100, u64::MAX)
            .await
            .unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!((tail[0].seq, tail[0].created_at), (7, 1_007));
        assert_eq!(tail[0].effect.as_deref(), Some("{\"roll\":7}"));
        let page = store.actions(&"s".into(), 0, 1).await.unwrap();
        assert_eq!(page.actions.len(), 1);
        assert_eq!(
            (
                page.actions[0]["n"].as_i64(),
                page.actions[0]["seq"].as_i64()
            ),
            (Some(3), Some(3))
        );
        assert_eq!(page.next_after_seq, Some(3));
        let page = store.actions(&"s".into(), 3, 1).await.unwrap();
        assert_eq!(page.actions[0]["seq"].as_i64(), Some(7));
        assert_eq!(page.next_after_seq, None);
        assert_eq!(
            store
                .actions(&"s".into(), 0, 10)
                .await
                .unwrap()
                .actions
                .len(),
            2
        );
        assert_eq!(
            store.recent_request_ids(&"s".into(), 10).await.unwrap(),
            [
                (RequestId::from("r-t2"), TurnId::from("t2")),
                (RequestId::from("r-t1"), TurnId::from("t1"))
            ]
        );
        assert_eq!(
            store
                .turn_end_frame(&"s".into(), &"t1".into())
                .await
                .unwrap()
                .as_deref(),
            Some(&*rows[4].frame)
        );
        assert_eq!(
            store
                .turn_end_frame(&"s".into(), &"t2".into())
                .await
                .unwrap(),
            None
        );
        let loaded = store
            .load_session(&"s".into())
            .await
            .unwrap()
            .expect("the session loads");
        assert_eq!(
            loaded.rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6, 7]
        );
        assert_eq!(loaded.rows[2].effect.as_deref(), Some("{\"roll\":3}"));
        assert_eq!(loaded.rows[0].request_id.as_deref(), Some("r-t1"));
        assert_eq!(seqs(loaded.recent_frames), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(
            loaded.open_turn.as_deref(),
            Some("t2"),
            "t2 started and never ended"
        );
    }

    #[actix_web::test]
    async fn a_turns_frames_are_one_stored_row_and_every_reader_finds_each_frame() {
        let (store, _dir, url) = store().await;
        store
            .create_session(meta("s"), FirstSnapshot::Whole("{}".into()))
            .await
            .unwrap();
        let (a, mut notices) = sink();
        let rows = two_turns();
        store.write_all(
            rows[..5].iter().cloned().map(SessionWrite::Row).collect(),
            &a,
        );
        store.write_all(
            rows[5..].iter().cloned().map(SessionWrite::Row).collect(),
            &a,
        );
        assert_eq!(until(&mut notices, 7).await.ok(), Some(7));
        let mut c = SqliteConnection::connect(&url).await.unwrap();
        let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM journal")
            .fetch_one(&mut c)
            .await
            .unwrap();
        assert_eq!(stored, 2, "one row per turn");
        reads_two_turns(&store).await;
    }

    #[actix_web::test]
    async fn a_load_hands_back_exactly_the_last_frames_kept_for_resume() {
        let (store, _dir, _url) = store().await;
        store
            .create_session(meta("r"), FirstSnapshot::Whole("{}".into()))
            .await
            .unwrap();
        let (a, mut notices) = sink();
        // 600 frames in steps of 7 (one turn each), so the last 512 start
        // inside a step.
        for first in (1..=600u64).step_by(7) {
            let rows = (first..=(first + 6).min(600))
                .map(|seq| {
                    SessionWrite::Row(JournalRow {
                        turn_id: Some(format!("t{first}").into()),
                        ..row("r", seq)
                    })
                })
                .collect();
            store.write_all(rows, &a);
        }
        assert_eq!(until(&mut notices, 600).await.ok(), Some(600));
        let loaded = store
            .load_session(&"r".into())
            .await
            .unwrap()
            .expect("loads");
        let seqs: Vec<u64> = loaded.recent_frames.iter().map(|f| f.0).collect();
        assert_eq!(seqs, (89..=600).collect::<Vec<_>>());
        assert_eq!(loaded.recent_frames[0].1, &*row("r", 89).frame);
    }

    async fn page_size(url: &str) -> i64 {
        let mut c = SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&mut c)
            .await
            .unwrap()
    }

    #[actix_web::test]
    async fn a_new_database_has_8_kib_pages_and_an_older_one_keeps_its_own() {
        let (store, _dir, url) = store().await;
        store
            .create_session(meta("s"), FirstSnapshot::Whole("{}".into()))
            .await
            .unwrap();
        drop(store);
        assert_eq!(page_size(&url).await, i64::from(PAGE_SIZE));

        // A database made with SQLite's default pages, in WAL mode, with
        // the whole schema: it opens, keeps its pages, and takes turns.
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("old.db").display());
        {
            let options = SqliteConnectOptions::from_str(&url)
                .unwrap()
                .create_if_missing(true)
                .page_size(4096)
                .journal_mode(SqliteJournalMode::Wal);
            let pool = SqlitePool::connect_with(options).await.unwrap();
            sqlx::migrate!("migrations/sqlite")
                .run(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
        let store = Store::open(&url).await.expect("the older database opens");
        store
            .create_session(meta("s"), FirstSnapshot::Whole("{}".into()))
            .await
            .unwrap();
        let (a, mut notices) = sink();
        store.write_all(two_turns().into_iter().map(SessionWrite::Row).collect(), &a);
        assert_eq!(until(&mut notices, 7).await.ok(), Some(7));
        reads_two_turns(&store).await;
        assert_eq!(page_size(&url).await, 4096);
    }

    fn audit_row(session_id: &str) -> crate::storage::AuditRow {
        crate::storage::AuditRow {
            audit_id: 0,
            session_id: Some(session_id.into()),
            tenant_id: "default".into(),
            trace_id: "tr_1".into(),
            turn_id: Some("turn_1".into()),
            call_id: Some("call_1".into()),
            tool: "roll_dice".into(),
            role: "game_master".into(),
            args_hash: "00".into(),
            status: "ok".into(),
            reason: None,
            error_code: None,
            error_message: None,
            duration_us: 5,
            prompt_tokens: 0,
            completion_tokens: 0,
            created_at: 0,
            site_id: Some("site".into()),
            span_id: None,
            user_id: None,
        }
    }

    /// A fresh database file with the migrations up to `version` only, as
    /// an older questd left it.
    async fn database_as_of(version: i64) -> (tempfile::TempDir, String, SqlitePool) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let options = SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true);
        let pool = SqlitePool::connect_with(options).await.unwrap();
        sqlx::migrate!("migrations/sqlite")
            .run_to(version, &pool)
            .await
            .unwrap();
        (dir, url, pool)
    }

    /// A session with its first snapshot `state`, written as an older
    /// build wrote them, straight into the database.
    async fn insert_session(pool: &SqlitePool, session_id: &str, state: &str) {
        sqlx::query(
            "INSERT INTO sessions (session_id, tenant_id, campaign_id, title, player_token, \
             spectator_token, created_at) VALUES (?, 'default', 'demo', 't', 'p', 'w', 0)",
        )
        .bind(session_id)
        .execute(pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO snapshots (session_id, seq, state, updated_at) VALUES (?, 0, ?, 0)",
        )
        .bind(session_id)
        .bind(state)
        .execute(pool)
        .await
        .unwrap();
    }

    /// Stored spending is kept for [`crate::budget::KEPT_DAYS`] days:
    /// storing spending deletes every key's rows of the days before those.
    #[actix_web::test]
    async fn token_spending_older_than_the_kept_days_is_deleted_as_new_spending_is_stored() {
        use crate::budget::KEPT_DAYS;
        let (store, _dir, _url) = store().await;
        let forget = |day: i64| Some(day - KEPT_DAYS + 1);
        store.add_spend(100, "session", "sess_a", 5, forget(100));
        store.add_spend(100, "tenant", "default", 5, None);
        store.add_spend(103, "session", "sess_b", 7, forget(103));
        store.settled().await;
        assert_eq!(store.spent(100, "session", "sess_a").await.unwrap(), 5);
        // Day 107's spending keeps days 101 to 107: day 100 goes, for
        // every scope and key, and day 103 stays.
        store.add_spend(107, "node", "local", 11, forget(107));
        store.settled().await;
        assert_eq!(store.spent(100, "session", "sess_a").await.unwrap(), 0);
        assert_eq!(store.spent(100, "tenant", "default").await.unwrap(), 0);
        assert_eq!(store.spent(103, "session", "sess_b").await.unwrap(), 7);
        assert_eq!(store.spent(107, "node", "local").await.unwrap(), 11);
    }

    /// The start's rewrite finds the rows left through the partial index
    /// of them, whose predicate both dialects' migrations spell as
    /// [`sql::PLAIN_TOKENS`] does: a database with none left is not read
    /// through at every start.
    #[actix_web::test]
    async fn the_rows_left_to_rewrite_are_found_through_their_index_not_a_scan() {
        for migration in [
            include_str!("../../migrations/sqlite/0018_plain_tokens.sql"),
            include_str!("../../migrations/postgres/0016_plain_tokens.sql"),
        ] {
            assert!(
                migration.contains(&format!("WHERE {};", sql::PLAIN_TOKENS)),
                "{migration}"
            );
        }
        assert!(sql::PLAIN_TOKENS.contains(crate::game::party::HASHED_TOKEN));
        assert_eq!(crate::game::party::HASHED_TOKEN.len(), 7, "substr(…, 1, 7)");
        let (_store, _dir, url) = store().await;
        let pool = SqlitePool::connect(&url).await.unwrap();
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN SELECT session_id FROM sessions \
             WHERE session_id > '' AND {} ORDER BY session_id LIMIT 500",
            sql::PLAIN_TOKENS
        )))
        .fetch_all(&pool)
        .await
        .expect("a plan");
        let plan: Vec<String> = plan.into_iter().map(|(.., detail)| detail).collect();
        let plan = plan.join("; ");
        assert!(plan.contains("sessions_plain_tokens"), "{plan}");
    }

    #[actix_web::test]
    async fn tokens_stored_as_themselves_are_rewritten_as_digests_at_start_and_still_open() {
        use crate::game::party::{HASHED_TOKEN, opens_stored, stored_token};
        // More rows than one statement rewrites, as older builds stored
        // them (private: the column's default), one public session, and
        // one already stored as digests.
        let (_dir, url, pool) = database_as_of(16).await;
        for i in 0..501 {
            sqlx::query(
                "INSERT INTO sessions (session_id, tenant_id, campaign_id, title, player_token, \
                 spectator_token, created_at) VALUES (?, 'default', 'demo', 't', ?, ?, 0)",
            )
            .bind(format!("sess_{i:03}"))
            .bind(format!("legacyToken{i}"))
            .bind(format!("watchToken{i}"))
            .execute(&pool)
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO sessions (session_id, tenant_id, campaign_id, title, player_token, \
             spectator_token, created_at, visibility) \
             VALUES ('sess_pub', 'default', 'demo', 't', 'publicPlayer', 'publicWatch', 0, 'public')",
        )
        .execute(&pool)
        .await
        .unwrap();
        let (hashed, hashed_watch) = (stored_token("newToken"), stored_token("newWatch"));
        sqlx::query(
            "INSERT INTO sessions (session_id, tenant_id, campaign_id, title, player_token, \
             spectator_token, created_at) VALUES ('sess_new', 'default', 'demo', 't', ?, ?, 0)",
        )
        .bind(&hashed)
        .bind(&hashed_watch)
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
        let store = Store::open(&url).await.expect("the store opens");
        for i in [0, 250, 499, 500] {
            let meta = store
                .session_meta(&format!("sess_{i:03}").into())
                .await
                .unwrap()
                .expect("stored");
            let (token, watch) = (format!("legacyToken{i}"), format!("watchToken{i}"));
            for (stored, plain) in [
                (&meta.stored_player_token, &token),
                (&meta.stored_spectator_token, &watch),
            ] {
                assert!(stored.starts_with(HASHED_TOKEN), "{i}");
                assert!(!stored.contains(plain.as_str()));
                assert!(opens_stored(stored, plain), "{i} opens");
            }
            assert!(
                !opens_stored(&meta.stored_player_token, "legacyToken1"),
                "{i}"
            );
            assert!(!opens_stored(&meta.stored_spectator_token, &token), "{i}");
        }
        let public = store.session_meta(&"sess_pub".into()).await.unwrap();
        let public = public.expect("stored");
        assert!(opens_stored(&public.stored_player_token, "publicPlayer"));
        assert_eq!(
            public.stored_spectator_token, "publicWatch",
            "the public list gives it out as itself"
        );
        let new = store.session_meta(&"sess_new".into()).await.unwrap();
        let new = new.expect("stored");
        assert_eq!(
            (new.stored_player_token, new.stored_spectator_token),
            (hashed, hashed_watch)
        );
        let reader = SqlitePool::connect(&url).await.unwrap();
        let plain: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM sessions WHERE player_token NOT LIKE 'sha256:%' \
             OR (visibility = 'private' AND spectator_token NOT LIKE 'sha256:%')",
        )
        .fetch_one(&reader)
        .await
        .unwrap();
        assert_eq!(plain, 0, "no private token is left as itself");
    }

    #[actix_web::test]
    async fn sessions_of_a_builtin_share_one_stored_start_and_whole_first_snapshots_still_load() {
        use crate::game::pieces::assemble;
        let (demo, shared) =
            crate::game::Campaign::builtin_starts(&crate::tools::test_support::tools())
                .unwrap()
                .start("demo")
                .unwrap();
        // The schema before shared starts, with a session whose first
        // snapshot is its whole state, as every build before them wrote it.
        let (_dir, url, pool) = database_as_of(13).await;
        insert_session(&pool, "old", &shared.text).await;
        pool.close().await;
        let store = Store::open(&url)
            .await
            .expect("the store opens and migrates");
        for id in ["a", "b"] {
            store
                .create_session(meta(id), FirstSnapshot::Shared(shared.clone()))
                .await
                .unwrap();
        }
        // A session as the builds before `sessions.start_id` stored it:
        // a first snapshot naming its start.
        let reader = SqlitePool::connect(&url).await.unwrap();
        insert_session(
            &reader,
            "named",
            &crate::storage::formats::shared_start_ref(&shared.id),
        )
        .await;
        reader.close().await;
        for id in ["old", "named", "a", "b"] {
            let loaded = store
                .load_session(&id.into())
                .await
                .unwrap()
                .expect("loads");
            let (state, _) =
                assemble(&loaded.snapshot, &loaded.snapshot_chunks).expect("assembles");
            assert_eq!(state, demo, "{id} starts as the campaign does");
        }
        let mut c = SqliteConnection::connect(&url).await.unwrap();
        let stored: (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM shared_starts), \
             (SELECT COUNT(*) FROM snapshots WHERE session_id IN ('a', 'b')), \
             (SELECT COUNT(*) FROM sessions WHERE session_id IN ('a', 'b') AND start_id = ?)",
        )
        .bind(&shared.id)
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert_eq!(stored.0, 1, "the start is stored once");
        assert_eq!(stored.1, 0, "a new session has no snapshot row");
        assert_eq!(stored.2, 2, "a new session names its start");

        // Its first snapshot replaces the start, and it loads from that.
        let mut moved = demo.clone();
        moved.turn = 7;
        let (done, rx) = tokio::sync::oneshot::channel();
        store.snapshot(
            &"a".into(),
            crate::storage::Epoch::Sole,
            crate::storage::SnapshotWrite {
                seq: 9,
                state: serde_json::to_string(&moved).unwrap(),
                chunks: Vec::new(),
                keep: Vec::new(),
            },
            Some(done),
        );
        rx.await.unwrap().unwrap();
        let loaded = store.load_session(&"a".into()).await.unwrap().unwrap();
        assert_eq!(loaded.snapshot_seq, 9);
        let (state, _) = assemble(&loaded.snapshot, &loaded.snapshot_chunks).expect("assembles");
        assert_eq!(state.turn, 7, "the snapshot, not the start");
    }

    #[actix_web::test]
    async fn an_audit_ledger_from_before_keeps_its_ids_and_new_rows_follow_the_largest() {
        // The schema with AUTOINCREMENT ids (migrations up to 9).
        let (_dir, url, pool) = database_as_of(9).await;
        for id in [1, 2, 7] {
            sqlx::query(
                "INSERT INTO audit (audit_id, session_id, tenant_id, trace_id, tool, role, \
                 args_hash, status, duration_us, prompt_tokens, completion_tokens, \
                 created_at, site_id) VALUES (?, 's', 'default', 'tr_1', 'roll_dice', \
                 'game_master', 'aa', 'ok', 1, 0, 0, 0, 'old')",
            )
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
        }
        pool.close().await;
        let store = Store::open(&url)
            .await
            .expect("the store opens and migrates");
        store
            .create_session(meta("s"), FirstSnapshot::Whole("{}".into()))
            .await
            .unwrap();
        store.audit(audit_row("s"));
        store.audit(audit_row("s"));
        // Audit rows have no waiter: a journal row queued after them is
        // durable only once they are.
        let (a, mut notices) = sink();
        store.append(row("s", 1), a);
        assert_eq!(until(&mut notices, 1).await.ok(), Some(1));
        let page = store.audit_page(&"s".into(), 0, 10).await.unwrap();
        let ids: Vec<i64> = page.entries.iter().map(|r| r.audit_id).collect();
        assert_eq!(ids, [1, 2, 7, 8, 9]);
        assert_eq!(page.entries[0].site_id.as_deref(), Some("old"));
        assert_eq!(
            page.entries[4],
            crate::storage::AuditRow {
                audit_id: 9,
                ..audit_row("s")
            }
        );
        let by_trace = store
            .audit_by_trace(&"default".into(), &"tr_1".into(), 10)
            .await
            .unwrap();
        assert_eq!(by_trace.len(), 5);
        // No insert keeps a sequence row up to date any more.
        let mut c = SqliteConnection::connect(&url).await.unwrap();
        let schema: String =
            sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'audit'")
                .fetch_one(&mut c)
                .await
                .unwrap();
        assert!(!schema.contains("AUTOINCREMENT"), "{schema}");
        let sequences: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'audit'")
                .fetch_one(&mut c)
                .await
                .unwrap();
        assert_eq!(sequences, 0);
    }

    #[actix_web::test]
    async fn a_journal_of_a_row_per_frame_is_carried_over_and_reads_the_same() {
        // The schema as it was before steps (migrations up to 8).
        let (_dir, url, pool) = database_as_of(8).await;
        {
            insert_session(&pool, "s", "{}").await;
            for r in two_turns() {
                sqlx::query(
                    "INSERT INTO journal (session_id, seq, turn_id, kind, request_id, frame, \
                     effect, history, action, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&r.session_id)
                .bind(r.seq as i64)
                .bind(&r.turn_id)
                .bind(r.kind)
                .bind(&r.request_id)
                .bind(&*r.frame)
                .bind(&r.effect)
                .bind(r.history.as_ref().map(|h| match h {
                    StoredHistory::Json(text) => text.as_str(),
                    StoredHistory::FromFrame { .. } => unreachable!("rows of JSON"),
                }))
                .bind(r.action.as_ref().map(|a| match a {
                    StoredAction::Json(text) => text.as_str(),
                    StoredAction::FromFrame { .. } => unreachable!("rows of JSON"),
                }))
                .bind(r.created_at)
                .execute(&pool)
                .await
                .unwrap();
            }
            pool.close().await;
        }
        let store = Store::open(&url)
            .await
            .expect("the store opens and migrates");
        reads_two_turns(&store).await;
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
