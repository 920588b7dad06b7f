//! `questd backup --to PATH`: a consistent copy of the server's SQLite
//! database, taken while the server runs. This module owns the command:
//! which database the settings name, where the copy is written and when
//! it may replace a file, the progress and the report. The copy itself
//! (one read snapshot, SQLite's backup API, the integrity check) is
//! `storage::backup`'s, as only `storage/` runs SQL.
//!
//! The copy is written to a temporary file beside PATH, checked, synced,
//! and only then renamed to PATH: PATH is the old file or the whole new
//! copy, never part of one. PostgreSQL is not copied here: its own tools
//! do it (docs/deployment.md, "Backups and restores"), and the command
//! says which.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use crate::storage::{self, StorageError, backup as copy};

/// The flags of `questd backup`; the database is the server's own
/// (`QUESTD_DATABASE_URL`).
#[derive(Debug, Clone, Args)]
pub struct BackupArgs {
    /// Where to write the copy (a new file; see `--force`).
    #[arg(long, value_name = "PATH")]
    pub to: PathBuf,
    /// Replace PATH if it exists (only once the new copy is whole and
    /// checked).
    #[arg(long)]
    pub force: bool,
    /// Pages copied per step (a step reads from the database's snapshot
    /// and moves the progress line).
    #[arg(
        long,
        value_name = "N",
        default_value_t = copy::PAGES_PER_STEP,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub step_pages: u32,
}

/// Why a backup was not written.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "questd does not copy a PostgreSQL database itself ({database}); use PostgreSQL's own tools \
         (docs/deployment.md, \"Backups and restores\"):\n  \
         pg_dump -Fc -f questd.dump '<database URL>'    a consistent copy, taken while questd runs \
         (pg_restore brings it back)\n  \
         pg_basebackup, with WAL archiving (archive_command)    a copy of the whole server and \
         point-in-time recovery"
    )]
    Postgres { database: String },
    #[error("{0} exists; pass --force to replace it")]
    Exists(PathBuf),
    #[error("{0} is a directory; name the file to write")]
    Directory(PathBuf),
    #[error("{0} is a file of the database being copied; write the copy elsewhere")]
    Source(PathBuf),
    #[error("no directory {0} to write the copy in")]
    NoDirectory(PathBuf),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Storage(#[from] StorageError),
}

impl BackupError {
    fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::Io { what, path, source }
    }
}

/// A backup written: where, how big, of how many sessions, how long.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub bytes: u64,
    pub copied: copy::Copied,
    pub seconds: f64,
}

/// Runs `questd backup` on the database `database_url` names: the copy
/// with its progress on stderr, then one line on stdout that it is written
/// (exit 0), or why not on stderr (exit 1).
pub fn main(database_url: &str, args: &BackupArgs) -> ExitCode {
    let terminal = std::io::stderr().is_terminal();
    let mut shown = Shown::default();
    let written = run(database_url, args, |p| shown.progress(p, terminal));
    shown.end(terminal);
    match written {
        Ok(w) => {
            println!("{}", report(&w));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("questd backup: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the copy; `progress` hears every step.
pub fn run(
    database_url: &str,
    args: &BackupArgs,
    progress: impl FnMut(copy::Progress),
) -> Result<Written, BackupError> {
    let started = Instant::now();
    if storage::is_postgres(database_url) {
        return Err(BackupError::Postgres {
            database: without_secrets(database_url),
        });
    }
    let source = copy::sqlite_path(database_url)?;
    let target = &args.to;
    refuse_target(&source, target, args.force)?;
    let partial = Partial::beside(target);
    let copied = copy::copy_sqlite(&source, &partial.path, args.step_pages, progress)?;
    let bytes = partial.sync()?;
    // Asked again: a file may have appeared at PATH while the copy ran.
    if !args.force && target.exists() {
        return Err(BackupError::Exists(target.clone()));
    }
    partial.rename_to(target)?;
    Ok(Written {
        path: target.clone(),
        bytes,
        copied,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Refuses a PATH the copy must not be written to: an existing file
/// without `force`, a directory, or a file of the source database itself
/// (which `--force` would replace under the running server).
fn refuse_target(source: &Path, target: &Path, force: bool) -> Result<(), BackupError> {
    if target.is_dir() {
        return Err(BackupError::Directory(target.to_owned()));
    }
    if !parent(target).is_dir() {
        return Err(BackupError::NoDirectory(parent(target).to_owned()));
    }
    if let (Ok(source), Some(target_file)) = (source.canonicalize(), resolved(target)) {
        let name = source.file_name().unwrap_or_default().to_string_lossy();
        let live =
            ["", "-wal", "-shm", "-journal"].map(|s| source.with_file_name(format!("{name}{s}")));
        if live.contains(&target_file) {
            return Err(BackupError::Source(target.to_owned()));
        }
    }
    if !force && target.exists() {
        return Err(BackupError::Exists(target.to_owned()));
    }
    Ok(())
}

/// `path` with its directory resolved (links followed), whether or not
/// the file itself exists yet.
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let dir = parent(path).canonicalize().ok()?;
    Some(dir.join(path.file_name()?))
}

/// The directory `path` is in (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The copy being written, beside its PATH (so the rename that names it
/// stays on one filesystem and is atomic). Dropped before it is renamed,
/// it removes itself and anything SQLite left beside it.
struct Partial {
    path: PathBuf,
    renamed: bool,
}

impl Partial {
    fn beside(target: &Path) -> Self {
        Self {
            path: partial_path(target, std::process::id()),
            renamed: false,
        }
    }

    /// Syncs the whole copy to disk; answers its size.
    fn sync(&self) -> Result<u64, BackupError> {
        let file =
            std::fs::File::open(&self.path).map_err(BackupError::io("cannot open", &self.path))?;
        file.sync_all()
            .map_err(BackupError::io("cannot sync", &self.path))?;
        let meta = file
            .metadata()
            .map_err(BackupError::io("cannot read", &self.path))?;
        Ok(meta.len())
    }

    /// Names the copy `target`, and syncs the directory so the name
    /// survives a crash.
    fn rename_to(mut self, target: &Path) -> Result<(), BackupError> {
        std::fs::rename(&self.path, target).map_err(BackupError::io("cannot write", target))?;
        self.renamed = true;
        let dir = parent(target);
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(BackupError::io("cannot sync the directory", dir))
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.renamed {
            return;
        }
        let name = self.path.as_os_str().to_string_lossy().into_owned();
        for suffix in ["", "-journal", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{name}{suffix}"));
        }
    }
}

/// The temporary name of the copy for `target`, beside it: hidden, and
/// naming the process that writes it.
fn partial_path(target: &Path, pid: u32) -> PathBuf {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    parent(target).join(format!(".{name}.partial-{pid}"))
}

/// A database URL without its password, or any parameter (which may hold
/// one): `postgres://user:pass@host:5432/db?sslmode=require` is shown as
/// `postgres://user@host:5432/db`.
pub fn without_secrets(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return "the configured database".into();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{user}@{host}")
        }
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{path}")
}

/// The line on a terminal while the copy runs, e.g.
/// `copied 2048 of 8192 pages (25%)`.
fn progress_line(p: copy::Progress) -> String {
    let percent = (p.copied * 100).checked_div(p.total).unwrap_or(100);
    format!("copied {} of {} pages ({percent}%)", p.copied, p.total)
}

/// The line that says the backup is written.
fn report(w: &Written) -> String {
    let c = &w.copied;
    format!(
        "backup written to {}: {} bytes ({}), {} sessions, {} pages in {} steps, {:.1} s \
         (copy {:.1} s, check {:.1} s)",
        w.path.display(),
        w.bytes,
        mebibytes(w.bytes),
        c.sessions,
        c.pages,
        c.steps,
        w.seconds,
        c.copying.as_secs_f64(),
        c.checking.as_secs_f64(),
    )
}

/// A size in MiB with one decimal.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// What has been shown of the progress on stderr.
#[derive(Default)]
struct Shown {
    last: Option<copy::Progress>,
    /// Whether a `\r` line is on the terminal, to be ended.
    open: bool,
}

impl Shown {
    /// On a terminal, redraws the progress line; elsewhere keeps it for
    /// the one line at the end.
    fn progress(&mut self, p: copy::Progress, terminal: bool) {
        self.last = Some(p);
        if terminal {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r{}", progress_line(p));
            let _ = e.flush();
            self.open = true;
        }
    }

    /// Ends the progress: the terminal's line, or the one line.
    fn end(&mut self, terminal: bool) {
        match (terminal, self.last) {
            (true, _) if self.open => eprintln!(),
            (false, Some(p)) => eprintln!("{}", progress_line(p)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn urls_are_shown_without_their_secrets() {
        for (url, shown) in [
            (
                "postgres://questd:s3cret@db.internal:5432/questd",
                "postgres://questd@db.internal:5432/questd",
            ),
            (
                "postgresql://u:p@ss@h/db?password=x&sslmode=require",
                "postgresql://u@h/db",
            ),
            ("postgres://h:5432/db", "postgres://h:5432/db"),
            ("postgres://u@h/db#frag", "postgres://u@h/db"),
            ("not a url", "the configured database"),
        ] {
            assert_eq!(without_secrets(url), shown, "{url}");
        }
    }

    #[test]
    fn postgres_is_answered_with_its_tools_and_no_password() {
        let args = BackupArgs {
            to: "x.dump".into(),
            force: false,
            step_pages: 1,
        };
        let e = run("postgres://questd:s3cret@db:5432/questd", &args, |_| {}).unwrap_err();
        let said = e.to_string();
        for tool in [
            "pg_dump",
            "pg_basebackup",
            "archive_command",
            "docs/deployment.md",
        ] {
            assert!(said.contains(tool), "{tool}: {said}");
        }
        assert!(!said.contains("s3cret"), "{said}");
        assert!(!Path::new("x.dump").exists());
    }

    #[test]
    fn progress_lines_say_pages_and_percent() {
        let p = |copied, total| copy::Progress { copied, total };
        assert_eq!(
            progress_line(p(2048, 8192)),
            "copied 2048 of 8192 pages (25%)"
        );
        assert_eq!(
            progress_line(p(8192, 8192)),
            "copied 8192 of 8192 pages (100%)"
        );
        assert_eq!(progress_line(p(0, 0)), "copied 0 of 0 pages (100%)");
        assert_eq!(mebibytes(3 * 1024 * 1024 + 104_858), "3.1 MiB");
    }

    #[test]
    fn the_partial_copy_is_hidden_beside_its_path() {
        assert_eq!(
            partial_path(Path::new("/backups/questd.db"), 42),
            PathBuf::from("/backups/.questd.db.partial-42")
        );
        assert_eq!(
            partial_path(Path::new("copy.db"), 7),
            PathBuf::from("./.copy.db.partial-7")
        );
    }

    #[test]
    fn targets_are_refused_before_anything_is_copied() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("questd.db");
        std::fs::write(&source, b"").unwrap();
        let existing = dir.path().join("old.db");
        std::fs::write(&existing, b"an older copy").unwrap();
        let new = dir.path().join("new.db");
        let refused = |target: &Path, force| refuse_target(&source, target, force).err();
        assert!(refused(&new, false).is_none());
        assert!(matches!(
            refused(&existing, false),
            Some(BackupError::Exists(_))
        ));
        assert!(refused(&existing, true).is_none());
        assert!(matches!(
            refused(dir.path(), true),
            Some(BackupError::Directory(_))
        ));
        assert!(matches!(
            refused(&dir.path().join("gone").join("copy.db"), true),
            Some(BackupError::NoDirectory(_))
        ));
        // The live database, its WAL, or either by another way there.
        let dotted = dir.path().join(".").join("questd.db-wal");
        for live in [source.clone(), dir.path().join("questd.db-wal"), dotted] {
            assert!(
                matches!(refused(&live, true), Some(BackupError::Source(_))),
                "{}",
                live.display()
            );
        }
        assert_eq!(std::fs::read(&existing).unwrap(), b"an older copy");
    }

    #[test]
    fn a_failed_copy_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("questd.db");
        rusqlite::Connection::open(&source)
            .unwrap()
            .execute_batch("CREATE TABLE other (x)")
            .unwrap();
        let args = BackupArgs {
            to: dir.path().join("copy.db"),
            force: false,
            step_pages: 1,
        };
        let url = format!("sqlite://{}", source.display());
        let e = run(&url, &args, |_| {}).unwrap_err();
        assert!(e.to_string().contains("not a questd database"), "{e}");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["questd.db"]);
    }

    #[test]
    fn a_backup_is_written_whole_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("questd.db");
        rusqlite::Connection::open(&source)
            .unwrap()
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE sessions (session_id TEXT);
                 INSERT INTO sessions VALUES ('sess_a'), ('sess_b');",
            )
            .unwrap();
        let args = BackupArgs {
            to: dir.path().join("copy.db"),
            force: false,
            step_pages: 1,
        };
        let url = format!("sqlite://{}", source.display());
        let mut steps = 0;
        let w = run(&url, &args, |_| steps += 1).unwrap();
        assert!(steps >= 1);
        assert_eq!(w.copied.sessions, 2);
        assert_eq!(w.bytes, std::fs::metadata(&args.to).unwrap().len());
        let said = report(&w);
        assert!(
            said.starts_with(&format!(
                "backup written to {}: {} bytes",
                args.to.display(),
                w.bytes
            )),
            "{said}"
        );
        assert!(said.contains(", 2 sessions, "), "{said}");
        let whole = format!("{} pages in {} steps", w.copied.pages, w.copied.pages);
        assert!(said.contains(&whole), "{said}");
        // Again without --force: refused, the copy untouched.
        let before = std::fs::read(&args.to).unwrap();
        let e = run(&url, &args, |_| {}).unwrap_err();
        assert!(matches!(e, BackupError::Exists(_)), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(std::fs::read(&args.to).unwrap(), before);
        let forced = BackupArgs {
            force: true,
            ..args.clone()
        };
        run(&url, &forced, |_| {}).unwrap();
    }
}
