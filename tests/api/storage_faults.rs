//! Storage faults injected under a running server: a write that fails the
//! way a full disk does (SQLite rolls the whole transaction back), a held
//! write lock, a database capped in size, and a real filesystem that fills
//! up. Nothing a client was told is lost, the failing session stops cleanly
//! and comes back by itself, and the other sessions' writes stay durable.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use crate::process::Server;
use actix_web::rt::time::sleep;
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
pub(crate) enum Db {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Db {
    pub(crate) async fn connect(db_url: &str) -> Self {
        if db_url.starts_with("postgres") {
            Self::Postgres(PgConnection::connect(db_url).await.unwrap())
        } else {
            Self::Sqlite(SqliteConnection::connect(db_url).await.unwrap())
        }
    }

    pub(crate) async fn run(&mut self, sql: String) {
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

/// The one number `sql` counts on the database `url` names, with `$1`
/// bound to the session `session_id`.
async fn count(url: &str, sql: &str, session_id: &str) -> i64 {
    let sql = format!("SELECT CAST(COUNT(*) AS TEXT) {sql}");
    let rows = crate::database::text_rows(url, &sql, session_id).await;
    rows[0][0].parse().expect("a count")
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
pub(crate) async fn fails_to_play(app: &TestApp, s: &Session, last_seq: u64) -> Vec<u64> {
    // The session may still be stopping after the last failure.
    let (mut ws, welcome) = app
        .connect_once_ready(&s.session_id, &s.player_token, Some(last_seq))
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
        .connect_once_ready(&a.session_id, &a.player_token, Some(last_seen))
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

/// Chats acknowledged behind a turn whose write then fails are run once
/// storage heals, though no client comes back: the sweeper loads the
/// stopped session for them (contract §11: sessions "play on by
/// themselves when it is back").
#[actix_web::test]
async fn chats_acknowledged_before_a_failure_run_once_storage_heals_with_no_client_back() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    // Each answer of the game master takes 2 s: the first turn waits on
    // it while two more chats are queued and the store is broken.
    let slow = OfflineGameMaster::with_latency(Duration::from_secs(2));
    let app = spawn_in(dir, |_| {}, std::sync::Arc::new(slow)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    for rid in ["w-1", "w-2", "w-3"] {
        ws.chat("roll 1d6", rid).await;
    }
    for (rid, queued) in [("w-1", 0), ("w-2", 1), ("w-3", 2)] {
        let ack = ws.ack_for(rid).await;
        assert_eq!(ack["queued"], queued, "{ack}");
    }
    inject(&app.db_url, &s.session_id, Fault::RollsBack).await;
    // The first turn's next write fails: the session stops, telling
    // nothing of it.
    let (frames, code) = ws.frames_until_closed().await;
    assert_eq!(code, Ok(Some(1011)), "{frames:?}");
    assert!(
        frames.iter().all(|f| f["type"] != "tool_result"),
        "{frames:?}"
    );
    drop(ws);
    heal(&app.db_url).await;

    // Nobody connects or asks: the two stored chats start by themselves.
    let started = "FROM journal WHERE session_id = $1 AND started = 1 \
                   AND request_id IN ('w-2', 'w-3')";
    let mut polls = 0;
    while count(&app.db_url, started, &s.session_id).await < 2 {
        polls += 1;
        assert!(
            polls < 600,
            "the stored chats never ran with no client back"
        );
        sleep(Duration::from_millis(100)).await;
    }

    // What a client then finds: the first turn closed as failed, the two
    // others played through, each once.
    let (mut reader, _) = app
        .connect(&s.session_id, &s.spectator_token, Some(0))
        .await;
    let mut ends = Vec::new();
    let mut started_by = Vec::new();
    while ends.len() < 3 {
        let f = reader.next_json().await;
        if f["type"] == "turn_started" {
            started_by.push(f["request_id"].as_str().unwrap_or_default().to_owned());
        }
        if f["type"] == "turn_completed" || f["type"] == "turn_failed" {
            ends.push(f["type"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(started_by, ["w-1", "w-2", "w-3"]);
    assert_eq!(ends, ["turn_failed", "turn_completed", "turn_completed"]);
}

/// A stored chat whose turn started, its row left behind (a crash between
/// the two), is not run again when the sweep loads its session, and the
/// row goes.
#[actix_web::test]
async fn a_stored_chat_whose_turn_started_is_not_run_again_and_its_row_goes() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let gm = || std::sync::Arc::new(OfflineGameMaster::default());
    let app = spawn_in(dir.clone(), |_| {}, gm()).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("roll 1d6", "once").await;
    let turn_id = first(&frames, "turn_started")["turn_id"].clone();
    ws.close().await;
    let db_url = app.db_url.clone();
    app.stop().await;

    // The row a crash left: the chat of the turn that already ran.
    let insert = format!(
        "INSERT INTO inbox (session_id, turn_id, turn_no, request_id, text, after_seq, \
         created_at, seat_id) VALUES ($1, '{}', 1, 'once', 'roll 1d6', 0, 0, 'seat_1')",
        turn_id.as_str().unwrap()
    );
    let inserted = crate::database::execute(&db_url, &insert, &s.session_id).await;
    assert_eq!(inserted, 1);
    let again = spawn_in(dir, |_| {}, gm()).await;
    let rows = "FROM inbox WHERE session_id = $1";
    let mut polls = 0;
    while count(&db_url, rows, &s.session_id).await > 0 {
        polls += 1;
        assert!(polls < 600, "the left row was never deleted");
        sleep(Duration::from_millis(100)).await;
    }
    // A turn after it: had the left chat been run again, it would have
    // been ahead of this one.
    let (mut ws, _) = again.connect(&s.session_id, &s.player_token, None).await;
    ws.play("roll 1d6", "after").await;
    let started = "FROM journal WHERE session_id = $1 AND started = 1 AND request_id = 'once'";
    assert_eq!(
        count(&db_url, started, &s.session_id).await,
        1,
        "the turn ran once"
    );
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
    // While the commit cannot happen, nothing goes out: not the ack (an ack
    // means the chat is durable), no frame of the turn, to the player or
    // to the spectator.
    let quiet = Duration::from_millis(700);
    assert_eq!(player.try_next_json(quiet).await, None);
    assert_eq!(spectator.try_next_json(quiet).await, None);
    lock.release().await;

    // Released: the ack, then the turn whole, and what it told is stored.
    let ack = player.next_json().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let turn_id = ack["turn_id"].as_str().unwrap();
    let frames = player.until_turn_end(turn_id).await;
    let ok = frames
        .iter()
        .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
        .unwrap();
    assert_eq!(moves_in_log(&app, &s).await, [ok["seq"].as_u64().unwrap()]);
    assert_eq!(position(&app.snapshot(&s).await), target);
}

/// What players saw while the store filled up under them.
#[derive(Default)]
struct Filling {
    /// Every move a player was told of (a `tool_result` ok): its session
    /// and seq.
    acked: Vec<(Session, u64)>,
    /// Every refusal: a session or a chat refused with `OVERLOADED`, a
    /// connection closed with 1011 (or 1012 before its welcome).
    refusals: Vec<String>,
    /// Chats sent so far (their request ids).
    chats: usize,
    /// How many refusals show the store filled up.
    enough: usize,
}

/// How many moves a player makes on one session before it starts another:
/// sessions are made while the store fills, too.
const MOVES_PER_SESSION: usize = 5;

/// The most moves all players make together, far more than the stores
/// here hold: a store that never fills up, or a writer that stops failing
/// because it stopped committing, ends the play too, and the assertions
/// then say which.
const MOST_MOVES: usize = 1_000;

/// How long a player whose connection was closed waits before it
/// reconnects, as the refusals' `retry_after` asks.
const BACK_OFF: Duration = Duration::from_secs(1);

/// `players` players move back and forth at once on `api`, each on
/// sessions of its own, until the store has refused `enough` times (or
/// [`MOST_MOVES`] were made). They keep playing after the first refusal, as
/// the run did: a write after a failed one must not be told and
/// never committed. Every refusal is an `OVERLOADED` answer or a close;
/// that no move told was lost is for [`kept_and_plays_on`] to check after
/// a restart.
async fn play_until_full(api: &impl Api, players: usize, enough: usize) -> Filling {
    let seen = RefCell::new(Filling {
        enough,
        ..Filling::default()
    });
    let done = || {
        let f = seen.borrow();
        f.refusals.len() >= enough || f.acked.len() >= MOST_MOVES
    };
    let all = (0..players).map(|_| player(api, &seen, &done));
    futures_util::future::join_all(all).await;
    seen.into_inner()
}

/// One player of [`play_until_full`]: sessions of its own, one after
/// another, until `done`.
async fn player(api: &impl Api, seen: &RefCell<Filling>, done: &impl Fn() -> bool) {
    let url = format!("{}/api/v1/sessions", api.base());
    let keyed = [("X-Internal-API-Key", TEST_KEY)];
    while !done() {
        let created = request("POST", &url, &keyed, Some(&json!({"campaign_id": "demo"}))).await;
        if created.status != 201 {
            assert_eq!(created.status, 503, "{}", created.body);
            assert_eq!(created.body["error_code"], "OVERLOADED", "{}", created.body);
            seen.borrow_mut()
                .refusals
                .push(format!("create: {}", created.body["message"]));
            let wait = created.retry_after.and_then(|s| s.parse().ok());
            sleep(Duration::from_secs(wait.unwrap_or(1))).await;
            continue;
        }
        let s = Session::created(&created.body);
        let mut moves = 0;
        while moves < MOVES_PER_SESSION && !done() {
            moves += connection(api, &s, seen, MOVES_PER_SESSION - moves, done).await;
        }
    }
}

/// Moves back and forth on one connection to `s` until `budget` moves are
/// made, `done` says so, or the server closes; answers how many were made.
async fn connection(
    api: &impl Api,
    s: &Session,
    seen: &RefCell<Filling>,
    budget: usize,
    done: &impl Fn() -> bool,
) -> usize {
    let url = api.ws_url(&s.session_id, &s.player_token, None);
    let mut ws = Ws::try_connect(&url).await.unwrap_or_else(|status| {
        panic!(
            "session {} was created, yet its upgrade is refused with {status} \
             (404: its creation was lost)",
            s.session_id
        )
    });
    // A session whose writes fail can close before the welcome: with 1011
    // as it stops, or with 1012 if it stopped before the connection joined.
    let welcome = match ws.next_or_close().await {
        Ok(welcome) => {
            assert_eq!(welcome["type"], "welcome", "{welcome}");
            welcome
        }
        Err(code) => {
            closed(seen, code, &[1011, 1012], &[]).await;
            return 0;
        }
    };
    let (mut here, mut there) = (position(&welcome["state"]), neighbour(&welcome["state"]));
    let mut moves = 0;
    while moves < budget && !done() {
        let rid = {
            let mut f = seen.borrow_mut();
            f.chats += 1;
            format!("chat-{}", f.chats)
        };
        ws.chat(&format!("go to {there}"), &rid).await;
        let (frames, code) = ws.frames_until_turn_end_or_close(&rid).await;
        if let Some(ok) = frames
            .iter()
            .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
        {
            let seq = ok["seq"].as_u64().unwrap();
            seen.borrow_mut().acked.push((s.clone(), seq));
            std::mem::swap(&mut here, &mut there);
            moves += 1;
        }
        let last = frames.last().unwrap_or(&Value::Null);
        if code.is_some() {
            closed(seen, code, &[1011], &frames).await;
            break;
        } else if last["type"] == "error" {
            assert_eq!(last["error_code"], "OVERLOADED", "{frames:?}");
            seen.borrow_mut()
                .refusals
                .push(format!("chat: {}", last["message"]));
            let wait = last["retry_after_ms"].as_u64().unwrap_or(1000);
            sleep(Duration::from_millis(wait)).await;
        } else {
            assert!(
                last["type"] == "turn_completed" || last["type"] == "turn_failed",
                "a turn ends, is refused or is closed: {frames:?}"
            );
        }
    }
    moves
}

/// Records a close after `frames`, whose code must be one of `expected`
/// (see `docs/protocol.md` §2.8); waits before the player reconnects.
async fn closed(seen: &RefCell<Filling>, code: Option<u16>, expected: &[u16], frames: &[Value]) {
    assert!(
        code.is_some_and(|c| expected.contains(&c)),
        "a close with one of {expected:?}, not {code:?} (None: no frame came), after {frames:?}"
    );
    seen.borrow_mut()
        .refusals
        .push(format!("closed {}", code.unwrap_or_default()));
    sleep(BACK_OFF).await;
}

/// After a restart with room: every move `filled` acknowledged is in its
/// session's actions log, and the last session plays on (a turn the full
/// store cut short is closed first, as after any restart). Last, that the
/// store did fill up: without refusals the checks above prove nothing (they
/// come first, as a writer that commits nothing while it says it does also
/// stops refusing, and the lost moves are the clearer failure).
async fn kept_and_plays_on(api: &impl Api, filled: &Filling) {
    let mut logs: HashMap<&str, Vec<u64>> = HashMap::new();
    for (s, seq) in &filled.acked {
        if !logs.contains_key(s.session_id.as_str()) {
            logs.insert(&s.session_id, moves_in_log(api, s).await);
        }
        let moves = &logs[s.session_id.as_str()];
        assert!(
            moves.contains(seq),
            "acknowledged move {seq} of {} is in its log {moves:?}",
            s.session_id
        );
    }
    let (s, _) = filled.acked.last().expect("a move was acknowledged");
    let (mut ws, welcome) = api.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws
        .play(&format!("go to {}", neighbour(&welcome["state"])), "after")
        .await;
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "tool_result" && f["status"] == "ok"),
        "{frames:?}"
    );
    assert!(
        filled.refusals.len() >= filled.enough,
        "the store filled up: {} moves acknowledged, refusals {:?}",
        filled.acked.len(),
        filled.refusals
    );
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
    let filled = play_until_full(&app, 10, 30).await;

    // Restarted with room: every move it acknowledged is there.
    app.stop().await;
    let again = spawn_in(dir, |s| s.database_url = sqlite, offline()).await;
    kept_and_plays_on(&again, &filled).await;
}

#[actix_web::test]
async fn a_full_filesystem_loses_nothing_it_acknowledged() {
    // The database sits on a filesystem of 3 MiB, as in the run: the
    // WAL grows until a write finds no room (SQLITE_FULL from the kernel's
    // ENOSPC, not from a page cap), while 20 players keep moving.
    let small = tempfile::tempdir().unwrap();
    let copy = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let server = Server::start_on_small_fs(
        small.path(),
        3,
        copy.path(),
        &[
            ("QUESTD_CHAT_BURST", "1000"),
            ("QUESTD_CHAT_PER_MINUTE", "1000000"),
        ],
    );
    let filled = play_until_full(&server, 20, 60).await;

    // The harshest stop, then the files as the full disk held them, opened
    // by a questd with room.
    let status = server.kill9();
    assert!(
        status.success(),
        "the database files were copied out: {status}"
    );
    let sqlite = crate::database::sqlite_url_in(copy.path());
    let again = spawn_in(
        copy,
        |s| s.database_url = sqlite,
        std::sync::Arc::new(OfflineGameMaster::default()),
    )
    .await;
    kept_and_plays_on(&again, &filled).await;
}
