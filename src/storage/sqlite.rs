//! SQLite storage: the embedded default. WAL, `synchronous = FULL`, a pool
//! of read connections and one writer connection for the group commits.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};

use super::sql::{ROWS_PER_INSERT, queries};
use super::writer::Committer;

queries!(sqlx::Sqlite);

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
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a commit is on disk when it returns. Group commit keeps
        // that to one fsync per batch.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10));
    // Read connections are kept once open (no idle timeout, no lifetime),
    // so a node whose open files fill up later still has its database's.
    let pool = SqlitePoolOptions::new()
        .max_connections(READ_CONNECTIONS)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options.clone())
        .await?;
    sqlx::migrate!("migrations/sqlite").run(&pool).await?;
    // Open them all now, one after another (opening them at once on a new
    // file races to set WAL mode: "database is locked").
    let mut opened = Vec::with_capacity(READ_CONNECTIONS as usize);
    for _ in 0..READ_CONNECTIONS {
        opened.push(pool.acquire().await?);
    }
    drop(opened);
    // The writer's transactions hold a whole group commit: a page cache big
    // enough for one (16 MiB instead of 2) keeps it from spilling pages to
    // disk before the commit.
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
    Ok((pool, SqliteCommitter(conn)))
}

/// Inserts audit rows, many per statement.
async fn insert_audits(
    conn: &mut SqliteConnection,
    audits: &[&AuditRow],
) -> Result<(), StorageError> {
    for chunk in audits.chunks(ROWS_PER_INSERT) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO audit (session_id, tenant_id, trace_id, turn_id, call_id, tool, \
             role, args_hash, status, reason, error_code, error_message, duration_us, \
             prompt_tokens, completion_tokens, created_at, site_id, span_id, user_id) ",
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

/// Inserts and clears `rows`, many per statement: one statement per
/// row costs more than the data.
async fn insert_rows(
    conn: &mut SqliteConnection,
    rows: &mut Vec<&JournalRow>,
) -> Result<(), StorageError> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO journal (session_id, seq, turn_id, kind, request_id, frame, \
             effect, history, action, created_at) ",
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

/// The writer's connection.
pub(super) struct SqliteCommitter(SqliteConnection);

impl Committer for SqliteCommitter {
    async fn commit(&mut self, batch: &[&WriteOp]) -> Result<(), StorageError> {
        // IMMEDIATE takes the write lock at BEGIN, so a busy database
        // waits (busy timeout) there rather than failing mid-batch.
        sqlx::query("BEGIN IMMEDIATE").execute(&mut self.0).await?;
        let done = write_batch(&mut self.0, batch).await;
        finish(&mut self.0, done).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{BUSY_QUEUED_WRITES, DurableSink, MAX_BATCH, STORAGE_BEHIND, Store};
    use tokio::sync::mpsc;

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
            DurableSink::new(crate::storage::Epoch::Sole, move |r| {
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
        let read = |limit, chars| store.frames_after("a", 2, limit, chars);
        assert_eq!(seqs(read(10, u64::MAX).await.unwrap()), [3, 4, 5, 6]);
        assert_eq!(seqs(read(2, u64::MAX).await.unwrap()), [3, 4], "by count");
        assert_eq!(
            seqs(read(10, 3 * each).await.unwrap()),
            [3, 4, 5],
            "by size"
        );
        assert!(read(10, each - 1).await.unwrap().is_empty());
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
