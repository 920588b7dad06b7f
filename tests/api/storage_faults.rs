//! Storage faults injected under a running server: a write that fails the
//! way a full disk does (SQLite rolls the whole transaction back). Nothing
//! a client was told is lost, the failing session stops cleanly and comes
//! back by itself, and the other sessions' writes stay durable.

use std::time::Duration;

use crate::common::*;
use questd::llm::OfflineGameMaster;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, SqliteConnection};

/// A way for the store to fail the journal writes of one session.
#[derive(Clone, Copy)]
enum Fault {
    /// The insert fails and SQLite rolls the whole transaction back by
    /// itself, as it does on a full disk or an I/O error.
    RollsBack,
    /// The inserts go in but `COMMIT` fails and leaves the transaction
    /// open, as a commit that cannot get its disk space or lock does (here:
    /// a deferred foreign key that is broken at commit time).
    CommitFails,
}

/// A connection of the test's own to the server's database, whichever it
/// is: faults are injected through it.
enum Db {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Db {
    async fn connect(db_url: &str) -> Self {
        if db_url.starts_with("postgres") {
            Self::Postgres(PgConnection::connect(db_url).await.unwrap())
        } else {
            Self::Sqlite(SqliteConnection::connect(db_url).await.unwrap())
        }
    }

    async fn run(&mut self, sql: String) {
        let sql = sqlx::AssertSqlSafe(sql);
        match self {
            Self::Sqlite(c) => sqlx::query(sql).execute(c).await.map(drop),
            Self::Postgres(c) => sqlx::query(sql).execute(c).await.map(drop),
        }
        .unwrap();
    }

    /// Takes the lock every journal write needs, until [`Db::release`].
    async fn hold_write_lock(&mut self) {
        match self {
            Self::Sqlite(_) => self.run("BEGIN IMMEDIATE".into()).await,
            Self::Postgres(_) => {
                self.run("BEGIN".into()).await;
                self.run("LOCK TABLE journal IN EXCLUSIVE MODE".into())
                    .await;
            }
        }
    }

    async fn release(&mut self) {
        self.run("COMMIT".into()).await;
    }
}

/// Makes the journal writes of `session_id` fail in the way `fault` says.
async fn inject(db_url: &str, session_id: &str, fault: Fault) {
    let mut c = Db::connect(db_url).await;
    let sqls = match (&c, fault) {
        (Db::Sqlite(_), _) => {
            let body = match fault {
                Fault::RollsBack => "SELECT RAISE(ROLLBACK, 'injected fault');",
                Fault::CommitFails => "INSERT INTO injected_child (parent) VALUES (-1);",
            };
            vec![
                "CREATE TABLE IF NOT EXISTS injected_parent (id INTEGER PRIMARY KEY)".to_owned(),
                "CREATE TABLE IF NOT EXISTS injected_child (parent INTEGER \
                 REFERENCES injected_parent (id) DEFERRABLE INITIALLY DEFERRED)"
                    .to_owned(),
                format!(
                    "CREATE TRIGGER injected_fault AFTER INSERT ON journal \
                     WHEN NEW.session_id = '{session_id}' BEGIN {body} END"
                ),
            ]
        }
        // PostgreSQL aborts the transaction on the error; a constraint
        // trigger deferred to the end fails the COMMIT itself.
        (Db::Postgres(_), _) => {
            let when = match fault {
                Fault::RollsBack => "CREATE TRIGGER injected_fault AFTER INSERT ON journal",
                Fault::CommitFails => {
                    "CREATE CONSTRAINT TRIGGER injected_fault AFTER INSERT ON journal \
                     DEFERRABLE INITIALLY DEFERRED"
                }
            };
            vec![
                "CREATE OR REPLACE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql \
                 AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$"
                    .to_owned(),
                format!(
                    "{when} FOR EACH ROW WHEN (NEW.session_id = '{session_id}') \
                     EXECUTE FUNCTION injected_fault()"
                ),
            ]
        }
    };
    for sql in sqls {
        c.run(sql).await;
    }
}

/// Lets writes through again.
async fn heal(db_url: &str) {
    let mut c = Db::connect(db_url).await;
    let sql = match c {
        Db::Sqlite(_) => "DROP TRIGGER injected_fault",
        Db::Postgres(_) => "DROP TRIGGER injected_fault ON journal",
    };
    c.run(sql.into()).await;
}

/// Chats on a fresh connection of `s` while its writes fail: the chat is
/// refused with `OVERLOADED` (storage failed moments ago), or the turn
/// starts, its writes fail and the connection is closed with 1011. Either
/// way nothing of the turn is told. Answers the seqs that were sent.
async fn fails_to_play(app: &TestApp, s: &Session, last_seq: u64) -> Vec<u64> {
    let (mut ws, welcome) = app
        .connect(&s.session_id, &s.player_token, Some(last_seq))
        .await;
    ws.chat(&format!("go to {}", neighbour(&welcome["state"])), "doomed")
        .await;
    let (frames, code) = ws.frames_until_turn_end_or_close("doomed").await;
    assert!(
        !frames
            .iter()
            .any(|f| f["type"] == "tool_result" || f["type"] == "turn_completed"),
        "nothing is told that is not durable: {frames:?}"
    );
    match frames.last().filter(|f| f["type"] == "error") {
        Some(error) => assert_eq!(error["error_code"], "OVERLOADED", "{frames:?}"),
        None => assert_eq!(code, Some(1011), "{frames:?}"),
    }
    frames.iter().filter_map(|f| f["seq"].as_u64()).collect()
}

/// Plays `go to <neighbour>` on `ws` until it runs (a chat refused with
/// `OVERLOADED` while storage has just failed is sent again after the wait
/// it names); answers the seq of its `tool_result` ok and every frame read.
async fn move_once(ws: &mut Ws, snapshot: &Value, rid: &str) -> (u64, Vec<Value>) {
    let target = neighbour(snapshot);
    let mut all = Vec::new();
    for attempt in 0..50 {
        let rid = format!("{rid}-{attempt}");
        ws.chat(&format!("go to {target}"), &rid).await;
        let frames = ws
            .until(|f| {
                f["type"] == "turn_completed"
                    || f["type"] == "turn_failed"
                    || (f["type"] == "error" && f["request_id"] == rid.as_str())
            })
            .await;
        all.extend(frames.iter().cloned());
        if let Some(ok) = frames
            .iter()
            .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
        {
            return (ok["seq"].as_u64().unwrap(), all);
        }
        let error = frames.last().unwrap();
        assert_eq!(error["error_code"], "OVERLOADED", "{all:#?}");
        let wait = error["retry_after_ms"].as_u64().unwrap_or(500);
        actix_web::rt::time::sleep(Duration::from_millis(wait)).await;
    }
    panic!("a move never ran: {all:?}");
}

/// The seqs of the `move` actions in a session's actions log.
async fn moves_in_log(app: &TestApp, s: &Session) -> Vec<u64> {
    app.actions(s)
        .await
        .iter()
        .filter(|a| a["tool"] == "move")
        .map(|a| a["seq"].as_u64().unwrap())
        .collect()
}

#[actix_web::test]
async fn a_failed_write_loses_nothing_acknowledged_and_the_session_comes_back() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let app = spawn_in(
        dir.clone(),
        |_| {},
        std::sync::Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let a = app.demo().await;
    let b = app.demo().await;
    let (mut wa, welcome_a) = app.connect(&a.session_id, &a.player_token, None).await;
    let (mut wb, _) = app.connect(&b.session_id, &b.player_token, None).await;
    let (first_a, frames_a) = move_once(&mut wa, &app.snapshot(&a).await, "a-1").await;
    let mut acked_a = vec![first_a];
    let mut acked_b = vec![move_once(&mut wb, &app.snapshot(&b).await, "b-1").await.0];
    // Every story seq A's player was sent, from its welcome on.
    let mut seen_a: Vec<u64> = frames_a.iter().filter_map(|f| f["seq"].as_u64()).collect();
    assert_eq!(
        seen_a.first().copied(),
        welcome_a["seq"].as_u64().map(|s| s + 1)
    );

    // A's writes fail, first by SQLite rolling back the transaction, then
    // by a commit that fails and leaves it open: the session stops (1011)
    // each time instead of going on without storage.
    let last = seen_a.iter().copied().max().unwrap();
    inject(&app.db_url, &a.session_id, Fault::RollsBack).await;
    seen_a.extend(fails_to_play(&app, &a, last).await);
    heal(&app.db_url).await;
    inject(&app.db_url, &a.session_id, Fault::CommitFails).await;
    let last = seen_a.iter().copied().max().unwrap();
    seen_a.extend(fails_to_play(&app, &a, last).await);
    heal(&app.db_url).await;
    drop(wa);

    // B plays on, and its moves are durable: the failed transaction of A
    // left the store writing for real, not into a transaction that never
    // commits.
    for i in 2..5 {
        let (seq, _) = move_once(&mut wb, &app.snapshot(&b).await, &format!("b-{i}")).await;
        acked_b.push(seq);
    }

    // Storage heals: A comes back by itself on the next connection, with
    // every frame it had sent and no seq reused.
    let last_seen = seen_a.iter().copied().max().unwrap();
    let (mut ws, welcome) = app
        .connect(&a.session_id, &a.player_token, Some(last_seen))
        .await;
    assert!(welcome["seq"].as_u64().unwrap() >= last_seen, "{welcome}");
    let (seq, played) = move_once(&mut ws, &welcome["state"], "a-again").await;
    acked_a.push(seq);
    seen_a.extend(played.iter().filter_map(|f| f["seq"].as_u64()));
    let mut sorted = seen_a.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen_a.len(), "no seq twice: {seen_a:?}");
    assert!(
        sorted.windows(2).all(|w| w[1] == w[0] + 1),
        "seqs without a gap: {sorted:?}"
    );

    // After a restart every acknowledged move is still there.
    app.stop().await;
    let again = spawn_in(
        dir,
        |_| {},
        std::sync::Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let (in_a, in_b) = (
        moves_in_log(&again, &a).await,
        moves_in_log(&again, &b).await,
    );
    for seq in &acked_a {
        assert!(
            in_a.contains(seq),
            "A's acknowledged move {seq} in {in_a:?}"
        );
    }
    for seq in &acked_b {
        assert!(
            in_b.contains(seq),
            "B's acknowledged move {seq} in {in_b:?}"
        );
    }
}

#[actix_web::test]
async fn nothing_is_sent_before_its_commit() {
    let app = spawn_offline(|_| {}).await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    for ws in [&mut player, &mut spectator] {
        ws.until(|f| f["type"] == "presence" && f["spectators"] == 1)
            .await;
    }
    let target = neighbour(&app.snapshot(&s).await);

    // Another connection holds the database's write lock: the journal's
    // commits wait behind it (well within the writer's busy timeout).
    let mut lock = Db::connect(&app.db_url).await;
    lock.hold_write_lock().await;
    player.chat(&format!("go to {target}"), "held").await;
    let ack = player.next_json().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    // While the commit cannot happen, no frame of the turn goes out, to the
    // player or to the spectator.
    let quiet = Duration::from_millis(700);
    assert_eq!(player.try_next_json(quiet).await, None);
    assert_eq!(spectator.try_next_json(quiet).await, None);
    lock.release().await;

    // Released: the turn arrives whole, and what it told is stored.
    let turn_id = ack["turn_id"].as_str().unwrap();
    let frames = player.until_turn_end(turn_id).await;
    let ok = frames
        .iter()
        .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
        .unwrap();
    assert_eq!(moves_in_log(&app, &s).await, [ok["seq"].as_u64().unwrap()]);
    assert_eq!(position(&app.snapshot(&s).await), target);
}

#[actix_web::test]
async fn a_full_database_loses_nothing_it_acknowledged() {
    // The database may grow to 1 MiB (`QUESTD_DATABASE_MAX_MB`): past it
    // every write fails with SQLITE_FULL, exactly as on a full disk. The cap
    // is SQLite's (a file's size), so this test runs on SQLite whichever
    // database the rest of the suite uses.
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let sqlite = crate::database::sqlite_url_in(dir.path());
    let offline = || std::sync::Arc::new(OfflineGameMaster::default());
    let app = spawn_in(
        dir.clone(),
        |s| {
            s.database_url = sqlite.clone();
            s.database_max_mb = Some(1);
            s.chat_burst = 1000;
            s.chat_per_minute = 1_000_000;
        },
        offline(),
    )
    .await;
    // Sessions keep playing after the first failure, as the run
    // did: the writer must not turn later writes into ones that are told
    // but never committed. Stops after a few refusals or closes.
    let mut acked: Vec<(Session, u64)> = Vec::new();
    let mut failures = Vec::new();
    'fill: for n in 0..200 {
        let url = format!("{}/api/v1/sessions", app.base);
        let keyed = [("X-Internal-API-Key", TEST_KEY)];
        let created = request("POST", &url, &keyed, Some(&json!({"campaign_id": "demo"}))).await;
        if created.status != 201 {
            assert_eq!(created.body["error_code"], "OVERLOADED", "{}", created.body);
            failures.push(created.body["message"].clone());
            if failures.len() >= 5 {
                break;
            }
            continue;
        }
        let s = Session::created(&created.body);
        let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
        for m in 0..20 {
            let rid = format!("full-{n}-{m}");
            let target = neighbour(&app.snapshot(&s).await);
            ws.chat(&format!("go to {target}"), &rid).await;
            let (frames, code) = ws.frames_until_turn_end_or_close(&rid).await;
            if let Some(ok) = frames
                .iter()
                .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
            {
                acked.push((s.clone(), ok["seq"].as_u64().unwrap()));
            }
            let error = frames.iter().find(|f| f["type"] == "error");
            if let Some(error) = error {
                assert_eq!(error["error_code"], "OVERLOADED", "{frames:?}");
                failures.push(error["message"].clone());
            } else if code.is_some() {
                assert_eq!(code, Some(1011), "{frames:?}");
                failures.push(json!("closed 1011"));
            } else {
                continue;
            }
            if failures.len() >= 5 {
                break 'fill;
            }
            continue 'fill;
        }
    }
    assert!(failures.len() >= 5, "the database filled up: {failures:?}");
    assert!(!acked.is_empty());

    // Restarted with room: every move it acknowledged is there.
    app.stop().await;
    let again = spawn_in(dir, |s| s.database_url = sqlite, offline()).await;
    for (s, seq) in &acked {
        let moves = moves_in_log(&again, s).await;
        assert!(
            moves.contains(seq),
            "acknowledged move {seq} of {}",
            s.session_id
        );
    }
    // And plays on (a turn the cap cut short is closed first, as after
    // any restart).
    let (s, _) = acked.last().unwrap();
    let (mut ws, welcome) = again.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws
        .play(&format!("go to {}", neighbour(&welcome["state"])), "after")
        .await;
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "tool_result" && f["status"] == "ok"),
        "{frames:?}"
    );
}
