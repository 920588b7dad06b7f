//! `questd backup` as an operator runs it: the built binary, beside a
//! questd process whose sessions play meanwhile; the copy restored by
//! starting a second questd on it. The command copies SQLite files, so
//! these tests run on SQLite whichever database the rest of the suite
//! uses; its answer for a PostgreSQL URL needs no server at all.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::rc::Rc;

use futures_util::future::join_all;
use serde_json::Value;
use sqlx::Connection;

use crate::common::*;
use crate::database::sqlite_url_in;
use crate::process::Server;

/// Sessions playing while the backup runs.
const PLAYERS: usize = 20;

/// What the players say, in turn.
const SAID: [&str; 4] = ["look around", "go north", "explore", "roll 1d20"];

/// Turns each player has finished before the backup starts.
const TURNS_BEFORE: u64 = 2;

/// What a restarted session's `turn_failed` says of a turn it found
/// started and never ended (the restart's repair).
const INTERRUPTED: &str = "the server stopped during this turn";

/// Runs `questd backup` with these arguments (and environment), as an
/// operator would, on a thread of the blocking pool.
async fn backup(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_questd"))
            .arg("backup")
            .args(args)
            .envs(env)
            .output()
            .expect("questd backup runs")
    })
    .await
    .expect("the backup's thread")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The file names in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `PRAGMA integrity_check` on the SQLite file at `path`.
async fn integrity(path: &Path) -> Vec<String> {
    let url = format!("sqlite://{}", path.display());
    let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut c)
        .await
        .unwrap()
}

/// Plays `s` turn after turn until `stop`; `done` holds the seq of the
/// last turn end it read and `turns` how many turns ended.
async fn play_until(
    server: &Server,
    s: &Session,
    stop: Rc<Cell<bool>>,
    done: Rc<Cell<u64>>,
    turns: Rc<Cell<u64>>,
) {
    let (mut ws, _) = server.connect(&s.session_id, &s.player_token, None).await;
    let mut n = 0;
    while !stop.get() {
        let said = SAID[n % SAID.len()];
        let frames = ws.play(said, &format!("{}-{n}", s.session_id)).await;
        let end = frames.last().expect("the turn's end");
        done.set(end["seq"].as_u64().expect("a seq"));
        turns.set(turns.get() + 1);
        n += 1;
    }
    ws.close().await;
}

/// A session's story read from seq 0 on `server`: every story frame until
/// the welcome's seq is passed and every turn begun has ended (a repair's
/// close may come after the welcome). Fails naming the turns still open
/// when no frame comes.
async fn story_from_zero(server: &Server, s: &Session) -> Vec<Value> {
    let (mut ws, welcome) = server
        .connect_once_ready(&s.session_id, &s.spectator_token, Some(0))
        .await;
    let top = welcome["seq"].as_u64().unwrap();
    let mut frames: Vec<Value> = Vec::new();
    loop {
        let last = frames.last().and_then(|f| f["seq"].as_u64()).unwrap_or(0);
        let open = open_turns(&frames);
        if last >= top && open.is_empty() {
            return frames;
        }
        let Some(f) = ws.try_next_json(FRAME_WAIT).await else {
            panic!(
                "{}: no frame after seq {last} of {top}; turns still open: {open:?}",
                s.session_id
            );
        };
        if f.get("seq").is_some() && f["type"] != "welcome" {
            frames.push(f);
        }
    }
}

/// The turns of `frames` that began and have not ended.
fn open_turns(frames: &[Value]) -> Vec<String> {
    let mut open: Vec<String> = Vec::new();
    for f in frames {
        let turn = f["turn_id"].as_str().unwrap_or_default().to_owned();
        match f["type"].as_str() {
            Some("turn_started") => open.push(turn),
            Some("turn_completed" | "turn_failed") => open.retain(|t| *t != turn),
            _ => {}
        }
    }
    open
}

#[actix_web::test]
async fn a_backup_taken_while_twenty_sessions_play_restores_every_turn_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url_in(dir.path());
    // The game master thinks 100 ms before each answer, so at any instant
    // nearly every session has a turn running: the copy catches turns
    // begun and not ended, the case a restore must close.
    let server = Server::start_with(
        &db,
        &[
            ("QUESTD_CHAT_BURST", "1000"),
            ("QUESTD_CHAT_PER_MINUTE", "1000000"),
            ("QUESTD_OFFLINE_LATENCY_MS", "100"),
        ],
    );
    let mut sessions = Vec::new();
    for _ in 0..PLAYERS {
        sessions.push(server.demo().await);
    }
    let stop = Rc::new(Cell::new(false));
    let done: Vec<Rc<Cell<u64>>> = (0..PLAYERS).map(|_| Rc::default()).collect();
    let turns: Vec<Rc<Cell<u64>>> = (0..PLAYERS).map(|_| Rc::default()).collect();
    let players = join_all(
        sessions
            .iter()
            .enumerate()
            .map(|(i, s)| play_until(&server, s, stop.clone(), done[i].clone(), turns[i].clone())),
    );

    let copies = tempfile::tempdir().unwrap();
    let copy = copies.path().join("copy.db");
    let copy_arg = copy.display().to_string();
    let operator = async {
        // Every session has played; then the backup, while they play on.
        while turns.iter().any(|t| t.get() < TURNS_BEFORE) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let before: Vec<u64> = done.iter().map(|d| d.get()).collect();
        // One page a step: the copy is many steps, with the server's
        // commits landing between them.
        let args = [
            "--to",
            &copy_arg,
            "--step-pages",
            "1",
            "--database-url",
            &db,
        ];
        let out = backup(&args, &[]).await;
        stop.set(true);
        (before, out)
    };
    let (_, (before, out)) = futures_util::join!(players, operator);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{}: {stdout}{stderr}", out.status);
    assert!(
        stdout.starts_with(&format!("backup written to {copy_arg}: ")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(", {PLAYERS} sessions, ")),
        "{stdout}"
    );
    // Not a terminal: the progress is one line, at the end.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("copied "), "{stderr}");
    // The copy alone: no WAL, no partial file, beside it.
    assert_eq!(files_in(copies.path()), ["copy.db"]);
    assert_eq!(integrity(&copy).await, ["ok"]);

    // Refused over an existing file without --force, which is untouched;
    // replaced with it.
    let old = copies.path().join("old.db");
    std::fs::write(&old, "an older backup").unwrap();
    let old_arg = old.display().to_string();
    let out = backup(&["--to", &old_arg, "--database-url", &db], &[]).await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "an older backup");
    let out = backup(&["--to", &old_arg, "--force", "--database-url", &db], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(integrity(&old).await, ["ok"]);
    drop(server);

    // Restored: a server on the copy has every session, every turn whole.
    let restored = Server::start(&format!("sqlite://{copy_arg}"));
    let mut interrupted = 0;
    for (s, before) in sessions.iter().zip(before) {
        let story = story_from_zero(&restored, s).await;
        let seqs: Vec<u64> = story.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
        assert!(
            seqs.iter().copied().eq(1..=seqs.len() as u64),
            "{}: seqs from 1 without a gap: {seqs:?}",
            s.session_id
        );
        // What ended before the backup began is in the copy.
        assert!(
            seqs.len() as u64 >= before,
            "{}: the copy ends at {} before the turn that ended at {before}",
            s.session_id,
            seqs.len()
        );
        let closes = story.iter().filter(|f| {
            f["type"] == "turn_failed"
                && f["error_code"] == "INTERNAL_ERROR"
                && f["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(INTERRUPTED))
        });
        interrupted += closes.count();
        // The session plays on from there.
        let (mut ws, _) = restored.connect(&s.session_id, &s.player_token, None).await;
        let t = turn(&mut ws, "look around").await;
        let started = first(&t.frames, "turn_started");
        assert!(
            started["seq"].as_u64().unwrap() > seqs.len() as u64,
            "{started}"
        );
        ws.close().await;
    }
    // Turns were running at the copy's instant, and the restore closed
    // them as after a crash.
    assert!(interrupted > 0, "no turn of the copy was running");
}

#[actix_web::test]
async fn a_backup_refuses_what_it_must_not_write_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url_in(dir.path());
    let server = Server::start(&db);
    server.demo().await;
    let target = dir.path().join("copy.db");
    let nowhere = sqlite_url_in(&dir.path().join("none"));
    // The database URL, the flags, what the refusal says, and PATH.
    let cases: [(&str, &[&str], &str, PathBuf); 5] = [
        (&nowhere, &[], "no database at", target.clone()),
        (&db, &[], "is a directory", dir.path().to_owned()),
        (
            &db,
            &[],
            "no directory",
            dir.path().join("gone").join("copy.db"),
        ),
        // The live database itself and its WAL, even with --force.
        (
            &db,
            &["--force"],
            "a file of the database",
            dir.path().join("questd.db"),
        ),
        (
            &db,
            &["--force"],
            "a file of the database",
            dir.path().join("questd.db-wal"),
        ),
    ];
    for (url, flags, says, to) in cases {
        let to_arg = to.display().to_string();
        let mut args = vec!["--to", &to_arg, "--database-url", url];
        args.extend(flags);
        let out = backup(&args, &[]).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{to_arg}: {stderr}");
        assert!(stderr.contains(says), "{to_arg}: {says}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
    // Nothing was written beside the database.
    let left = files_in(dir.path());
    assert!(left.iter().all(|f| f.starts_with("questd.db")), "{left:?}");
    // The server played on through it all.
    let s = server.demo().await;
    let (mut ws, _) = server.connect(&s.session_id, &s.player_token, None).await;
    turn(&mut ws, "look around").await;
}

#[actix_web::test]
async fn a_backup_of_postgres_names_its_tools_and_never_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("questd.dump");
    let to_arg = to.display().to_string();
    // The server's own variable, as an operator's environment sets it.
    let url = "postgres://questd:not-this-password@127.0.0.1:9/questd?sslmode=disable";
    let out = backup(&["--to", &to_arg], &[("QUESTD_DATABASE_URL", url)]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for says in [
        "pg_dump -Fc",
        "pg_basebackup",
        "archive_command",
        "docs/deployment.md",
        "postgres://questd@127.0.0.1:9/questd",
    ] {
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    assert!(!stderr.contains("not-this-password"), "{stderr}");
    assert!(!to.exists());
}
