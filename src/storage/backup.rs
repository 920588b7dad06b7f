//! A consistent copy of a live SQLite store, for `questd backup`: SQLite's
//! online backup API, stepped over one read snapshot of the source, into a
//! new file; then the copy is made to stand alone and checked. Where the
//! copy goes, and when it replaces anything, is the command's
//! (`crate::backup`).
//!
//! One instant: a stepped backup copies some pages, lets go, and copies
//! more. When another connection commits between two steps, the source's
//! pages change under it and SQLite starts the backup over from page 1
//! (its pager drops its cache on the next read transaction and restarts
//! every backup reading from it); against a server that commits every few
//! milliseconds such a copy would start over for good. Here the source
//! connection opens a read transaction before the first step and holds it
//! to the last. In WAL mode (the server's) that pins one WAL snapshot:
//! every step reads the database as it was when the transaction began,
//! nothing restarts the copy, and the server's writer goes on committing
//! to the WAL meanwhile (a reader never blocks a WAL writer). Its
//! checkpoints stop at the snapshot, so the WAL grows for as long as the
//! copy takes and is folded back after. Should SQLite start the copy over
//! anyway, after [`RESTARTS_BEFORE_ONE_STEP`] such starts the rest is
//! copied in a single step, which no commit can interrupt.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use sqlx::sqlite::SqliteConnectOptions;

use super::StorageError;

/// Pages one step copies by default (8 MiB of questd's 8 KiB pages): a
/// progress line moves a few times a second, and a step's own cost
/// (locking the copy, reading the WAL's index) is spread over many pages.
pub const PAGES_PER_STEP: u32 = 1024;

/// How many times the copy may start over before the rest of it is copied
/// in one step.
pub const RESTARTS_BEFORE_ONE_STEP: u32 = 3;

/// How long in all the copy waits on a busy source or copy before it
/// gives up (the server's own busy timeout).
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// How long the copy waits before trying a busy step again.
const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// Problems of a failed integrity check shown at most.
const PROBLEMS_SHOWN: usize = 5;

/// How far a copy has come, as of its last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Pages copied.
    pub copied: u64,
    /// Pages of the source, at the copy's instant.
    pub total: u64,
}

/// A finished copy: checked, standing alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// Sessions in the copy.
    pub sessions: u64,
    /// Pages copied.
    pub pages: u64,
    /// Steps the copy took (more than the pages over the step's size
    /// only if it started over).
    pub steps: u64,
    /// How long the pages took to copy.
    pub copying: Duration,
    /// How long the integrity check of the copy took.
    pub checking: Duration,
}

/// The file an SQLite URL names, read as the server reads it
/// (`sqlite://PATH`, `sqlite:PATH`, with or without parameters).
pub fn sqlite_path(url: &str) -> Result<PathBuf, StorageError> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Err(StorageError::Database(
            "an in-memory SQLite database lives in its process: there is no file to copy".into(),
        ));
    }
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| StorageError::Database(format!("not an SQLite database URL: {e}")))?;
    Ok(options.get_filename().to_owned())
}

/// Copies the SQLite database at `source` into a new file at `copy`
/// (which must not exist), as of one instant, `step_pages` pages a step
/// (at least 1), calling `progress` after every step; then makes the copy a database of its own (rollback
/// journal, no `-wal` beside it) and runs `PRAGMA integrity_check` on it.
/// The copy is not synced: the caller syncs it before naming it.
pub fn copy_sqlite(
    source: &Path,
    copy: &Path,
    step_pages: u32,
    mut progress: impl FnMut(Progress),
) -> Result<Copied, StorageError> {
    if !source.is_file() {
        return Err(StorageError::Database(format!(
            "no database at {}",
            source.display()
        )));
    }
    let started = Instant::now();
    // Read-only: the copy never writes to the live database.
    let from = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    from.busy_timeout(BUSY_WAIT)?;
    // The read transaction that pins the copy's instant (module docs): it
    // begins with its first read, the sessions of that instant counted.
    from.execute_batch("BEGIN")?;
    let sessions: i64 = from
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .map_err(|e| match e {
            rusqlite::Error::SqliteFailure(_, Some(m)) if m.contains("no such table") => {
                StorageError::Database(format!(
                    "{} is not a questd database (it has no sessions table)",
                    source.display()
                ))
            }
            e => e.into(),
        })?;
    let mut to = Connection::open(copy)?;
    let (pages, steps) = {
        let backup = Backup::new(&from, &mut to)?;
        step_to_the_end(&backup, Steps::of(step_pages), &mut progress)?
    };
    from.execute_batch("COMMIT")?;
    drop(from);
    let copying = started.elapsed();
    let checked = Instant::now();
    stand_alone(&to)?;
    check(&to)?;
    to.close().map_err(|(_, e)| StorageError::from(e))?;
    Ok(Copied {
        sessions: sessions.max(0) as u64,
        pages,
        steps,
        copying,
        checking: checked.elapsed(),
    })
}

/// Steps `backup` until it is done; answers the pages copied and the
/// steps taken.
fn step_to_the_end(
    backup: &Backup<'_, '_>,
    mut steps: Steps,
    progress: &mut impl FnMut(Progress),
) -> Result<(u64, u64), StorageError> {
    let mut busy_since: Option<Instant> = None;
    loop {
        let step = backup.step(steps.size())?;
        steps.taken += 1;
        let p = backup.progress();
        let now = Progress {
            copied: (p.pagecount - p.remaining).max(0) as u64,
            total: p.pagecount.max(0) as u64,
        };
        match step {
            StepResult::Done => {
                progress(Progress {
                    copied: now.total,
                    ..now
                });
                return Ok((now.total, steps.taken));
            }
            StepResult::More => {
                busy_since = None;
                steps.after(now.copied);
                progress(now);
            }
            // Busy, Locked, and any kind a later rusqlite adds: waited
            // out, within the bound.
            _ => {
                let since = *busy_since.get_or_insert_with(Instant::now);
                if since.elapsed() > BUSY_WAIT {
                    return Err(StorageError::Database(format!(
                        "the database stayed locked for {} s",
                        BUSY_WAIT.as_secs()
                    )));
                }
                std::thread::sleep(BUSY_PAUSE);
            }
        }
    }
}

/// The size of each step of a copy, and its starts over.
#[derive(Debug)]
struct Steps {
    /// Pages a step copies.
    pages: i32,
    /// Steps taken, busy ones included.
    taken: u64,
    /// Pages copied as of the last step.
    copied: u64,
    /// Times the copy went back to an earlier page.
    restarts: u32,
}

impl Steps {
    /// Steps of `pages` pages (at least 1).
    fn of(pages: u32) -> Self {
        Self {
            pages: pages.clamp(1, i32::MAX as u32) as i32,
            taken: 0,
            copied: 0,
            restarts: 0,
        }
    }

    /// Pages the next step copies: its size, or all that are
    /// left (`-1`) once the copy has started over
    /// [`RESTARTS_BEFORE_ONE_STEP`] times.
    fn size(&self) -> i32 {
        if self.restarts >= RESTARTS_BEFORE_ONE_STEP {
            -1
        } else {
            self.pages
        }
    }

    /// Records the pages copied after a step that did not finish: fewer
    /// than before, or no more, means SQLite started the copy over.
    fn after(&mut self, copied: u64) {
        if copied <= self.copied {
            self.restarts += 1;
        }
        self.copied = copied;
    }
}

/// Makes the copy a database of its own. The backup copies the source's
/// header, which says WAL: opened as it is, the copy would start a `-wal`
/// beside it. In rollback-journal mode every page is in the one file; a
/// server started on it switches it to WAL again.
fn stand_alone(copy: &Connection) -> Result<(), StorageError> {
    let mode: String = copy.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("delete") {
        return Err(StorageError::Database(format!(
            "the copy stayed in journal mode {mode}"
        )));
    }
    Ok(())
}

/// `PRAGMA integrity_check` on the copy: it must answer exactly `ok`.
fn check(copy: &Connection) -> Result<(), StorageError> {
    let mut statement = copy.prepare("PRAGMA integrity_check")?;
    let answers: Vec<String> = statement
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if answers == ["ok"] {
        return Ok(());
    }
    let shown: Vec<&str> = answers
        .iter()
        .take(PROBLEMS_SHOWN)
        .map(String::as_str)
        .collect();
    Err(StorageError::Corrupt(format!(
        "the copy failed its integrity check ({} problems): {}",
        answers.len(),
        shown.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A database in WAL mode as the server keeps one, with `rows` rows in
    /// `sessions` big enough to span many pages.
    fn served(dir: &Path, rows: u32) -> (PathBuf, Connection) {
        let path = dir.join("questd.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 8192; PRAGMA journal_mode = WAL;
             CREATE TABLE sessions (session_id TEXT PRIMARY KEY, body TEXT NOT NULL);",
        )
        .unwrap();
        insert(&conn, 0, rows);
        (path, conn)
    }

    /// Inserts sessions `from..from + n`, each with 2 KiB of text, in one
    /// commit.
    fn insert(conn: &Connection, from: u32, n: u32) {
        conn.execute_batch("BEGIN").unwrap();
        for i in from..from + n {
            conn.execute(
                "INSERT INTO sessions VALUES (?1, ?2)",
                (format!("sess_{i}"), "x".repeat(2048)),
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    fn count(path: &Path) -> u64 {
        let conn = Connection::open(path).unwrap();
        conn.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0))
            .unwrap() as u64
    }

    #[test]
    fn commits_between_steps_neither_restart_the_copy_nor_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        // About 4,000 pages: a copy of four steps.
        let (source, writer) = served(dir.path(), 12_000);
        let copy = dir.path().join("copy.db");
        let mut seen = Vec::new();
        let copied = copy_sqlite(&source, &copy, PAGES_PER_STEP, |p| {
            seen.push(p);
            // The server commits between every two steps.
            insert(&writer, 100_000 + seen.len() as u32 * 100, 100);
        })
        .unwrap();
        assert!(seen.len() > 2, "a copy of several steps: {seen:?}");
        // Every step took the next pages: none started over.
        let copied_pages: Vec<u64> = seen.iter().map(|p| p.copied).collect();
        assert!(
            copied_pages.windows(2).all(|w| w[1] > w[0]),
            "{copied_pages:?}"
        );
        assert_eq!(seen.last().unwrap().copied, copied.pages);
        assert_eq!(copied.steps, seen.len() as u64);
        assert_eq!(copied.steps, copied.pages.div_ceil(PAGES_PER_STEP.into()));
        // The copy is the database of its first instant, the writer's
        // later commits in the source only.
        assert_eq!((copied.sessions, count(&copy)), (12_000, 12_000));
        assert_eq!(count(&source), 12_000 + 100 * seen.len() as u64);
    }

    #[test]
    fn the_copy_stands_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (source, _writer) = served(dir.path(), 10);
        let copy = dir.path().join("copy.db");
        copy_sqlite(&source, &copy, PAGES_PER_STEP, |_| {}).unwrap();
        let name = |suffix: &str| dir.path().join(format!("copy.db{suffix}"));
        for beside in ["-wal", "-shm", "-journal"] {
            assert!(!name(beside).exists(), "{beside} beside the copy");
        }
        // The header's read and write versions (bytes 18 and 19): 1 is a
        // rollback journal, 2 WAL.
        let header = std::fs::read(&copy).unwrap();
        assert_eq!((header[18], header[19]), (1, 1));
        assert_eq!(count(&copy), 10);
    }

    #[test]
    fn what_is_not_a_questd_database_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy.db");
        let missing = dir.path().join("missing.db");
        let e = copy_sqlite(&missing, &copy, 1, |_| {}).unwrap_err();
        assert!(e.to_string().contains("no database at"), "{e}");
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = copy_sqlite(&other, &copy, 1, |_| {}).unwrap_err();
        assert!(e.to_string().contains("not a questd database"), "{e}");
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a database at all. ".repeat(100)).unwrap();
        let e = copy_sqlite(&text, &copy, 1, |_| {}).unwrap_err();
        assert!(e.to_string().contains("not a database"), "{e}");
    }

    #[test]
    fn a_damaged_copy_fails_its_check() {
        let dir = tempfile::tempdir().unwrap();
        let (source, writer) = served(dir.path(), 200);
        writer
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        drop(writer);
        // An index whose entries disagree with its table: what a torn
        // copy looks like to integrity_check.
        let conn = Connection::open(&source).unwrap();
        conn.execute_batch(
            "PRAGMA writable_schema = ON;
             UPDATE sqlite_schema SET sql = 'CREATE TABLE sessions (session_id TEXT PRIMARY KEY, body TEXT NOT NULL, CHECK (length(body) < 10))' WHERE name = 'sessions';",
        )
        .unwrap();
        drop(conn);
        let copy = dir.path().join("copy.db");
        let e = copy_sqlite(&source, &copy, PAGES_PER_STEP, |_| {}).unwrap_err();
        assert!(
            matches!(e, StorageError::Corrupt(ref m) if m.contains("integrity check") && m.contains("CHECK")),
            "{e}"
        );
    }

    #[test]
    fn a_copy_that_keeps_starting_over_finishes_in_one_step() {
        let mut steps = Steps::of(1024);
        let sizes: Vec<i32> = [1024, 2048, 1024, 1024, 512]
            .into_iter()
            .map(|copied| {
                let size = steps.size();
                steps.after(copied);
                size
            })
            .collect();
        // Back to 1024 (a start over), no further (another), back to 512
        // (the third): the next step takes all that is left.
        assert_eq!(sizes, [1024, 1024, 1024, 1024, 1024]);
        assert_eq!((steps.restarts, steps.size()), (3, -1));
        assert_eq!(
            (Steps::of(0).size(), Steps::of(u32::MAX).size()),
            (1, i32::MAX)
        );
    }

    #[test]
    fn urls_name_the_file_the_server_opens() {
        for (url, path) in [
            ("sqlite://questd.db", "questd.db"),
            (
                "sqlite:///var/lib/questd/questd.db",
                "/var/lib/questd/questd.db",
            ),
            ("sqlite:data/q.db?mode=rwc", "data/q.db"),
        ] {
            assert_eq!(sqlite_path(url).unwrap(), PathBuf::from(path), "{url}");
        }
        for url in ["sqlite::memory:", "sqlite://x.db?mode=memory"] {
            let e = sqlite_path(url).unwrap_err();
            assert!(e.to_string().contains("in-memory"), "{url}: {e}");
        }
    }
}
