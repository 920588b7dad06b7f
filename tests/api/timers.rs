//! Durable timers fire exactly once through everything (docs/protocol.md
//! §9): a due timer's world turn reaches every connection; a `kill -9`
//! before or after its due time, an idle unload, a restart of a repeating
//! timer and a failover on PostgreSQL each leave exactly one world turn per
//! due time in the journal.
//!
//! The journal is read from the database itself: a world turn's row holds
//! the effect that fired the timer, with the due time it fired for, which
//! no frame carries.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{database, node};
use crate::common::*;
use crate::process::Server;
use questd::llm::{ModelReply, ScriptedProvider};
use serde_json::{Value, json};

/// The longest any one step of these tests waits for what it waits for:
/// a timer due in seconds, a sweep, a lease running out.
const STEP_WAIT: Duration = Duration::from_secs(45);

/// How often a waiting step looks again.
const POLL: Duration = Duration::from_millis(100);

/// A model that narrates every turn, world turns included.
fn narrator() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_fn(|_, _| {
        Ok(ModelReply::narrate("The world moves on."))
    }))
}

/// Schedules a timer in `s` through the tool API, as a service with its
/// key; answers the tool's output (`timer_id`, `event`, `due_at`,
/// `repeat_s`).
async fn schedule(api: &impl Api, s: &Session, input: Value) -> Value {
    let answer = request(
        "POST",
        &format!("{}/api/v1/tools/call", api.base()),
        &[
            ("X-Internal-API-Key", TEST_KEY),
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "timers-test"),
            ("X-Trace-ID", "timers-test"),
            ("X-Session-ID", s.session_id.as_str()),
        ],
        Some(&json!({"tool_name": "schedule_event", "input": input})),
    )
    .await;
    assert_eq!(answer.status, 200, "schedule_event: {}", answer.body);
    assert_eq!(answer.body["success"], true, "{}", answer.body);
    answer.body["output"].clone()
}

/// One world turn as journalled: the timer it fired, the due time it fired
/// for, and its `turn_started` frame.
#[derive(Debug, Clone)]
struct Fired {
    timer_id: String,
    due_at: i64,
    frame: Value,
}

/// Every entry (frame, effect) in the journal of `s` on the database
/// `db`, in order.
pub async fn journal(db: &str, s: &Session) -> Vec<Value> {
    let rows = crate::database::text_rows(
        db,
        "SELECT body FROM journal WHERE session_id = $1 ORDER BY seq",
        &s.session_id,
    )
    .await;
    let mut all = Vec::new();
    for row in rows {
        let body: Value = serde_json::from_str(&row[0]).expect("a journal body is JSON");
        match body {
            Value::Array(entries) => all.extend(entries),
            body => all.extend(body["entries"].as_array().cloned().unwrap_or_default()),
        }
    }
    all
}

/// Every world turn in the journal of `s` on the database `db`, in order.
async fn fired(db: &str, s: &Session) -> Vec<Fired> {
    journal(db, s)
        .await
        .into_iter()
        .filter(|entry| entry["effect"]["effect"] == "fire_timer")
        .map(|entry| Fired {
            timer_id: entry["effect"]["timer_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            due_at: entry["effect"]["due_at"].as_i64().expect("a due time"),
            frame: entry["frame"].clone(),
        })
        .collect()
}

/// The world turns of `timer_id` among `all`.
fn of(all: &[Fired], timer_id: &str) -> Vec<Fired> {
    all.iter()
        .filter(|f| f.timer_id == timer_id)
        .cloned()
        .collect()
}

/// Waits until the journal holds at least `n` world turns of `timer_id`;
/// fails naming `step` if it does not within [`STEP_WAIT`].
async fn fired_at_least(db: &str, s: &Session, timer_id: &str, n: usize, step: &str) -> Vec<Fired> {
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    loop {
        let seen = of(&fired(db, s).await, timer_id);
        if seen.len() >= n {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{step}: {} of {n} world turns of {timer_id} after {STEP_WAIT:?}: {seen:?}",
            seen.len()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Exactly one world turn per due time, each a `turn_started` of the
/// world (no request, no seat) naming the timer.
fn once_per_due_time(turns: &[Fired]) {
    let mut dues: Vec<i64> = turns.iter().map(|f| f.due_at).collect();
    dues.dedup();
    assert_eq!(dues.len(), turns.len(), "a due time fired twice: {turns:?}");
    for f in turns {
        let started = &f.frame;
        assert_eq!(started["type"], "turn_started", "{started}");
        assert_eq!(started["trigger"], "timer", "{started}");
        assert_eq!(started["timer_id"], f.timer_id.as_str(), "{started}");
        assert!(started["request_id"].is_null(), "{started}");
        assert!(started["seat_id"].is_null(), "{started}");
    }
}

/// The sessions the node at `api` runs now, as its operator lists them.
async fn live_here(api: &impl Api) -> Vec<String> {
    let answer = request(
        "GET",
        &format!("{}/api/v1/admin/sessions?limit=1000", api.base()),
        &[("X-Internal-API-Key", TEST_KEY)],
        None,
    )
    .await;
    assert_eq!(answer.status, 200, "admin sessions: {}", answer.body);
    answer.body["sessions"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|l| l["session_id"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until the node at `api` no longer runs `s`; fails naming `step`.
pub async fn not_live_here(api: &impl Api, s: &Session, step: &str) {
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    while live_here(api).await.contains(&s.session_id) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{step}: still live after {STEP_WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The node running `s` now, as the stored story names it.
async fn owner(api: &impl Api, s: &Session) -> Option<String> {
    let answer = request(
        "GET",
        &format!(
            "{}/api/v1/admin/sessions/{}/story?limit=1",
            api.base(),
            s.session_id
        ),
        &[("X-Internal-API-Key", TEST_KEY)],
        None,
    )
    .await;
    assert_eq!(answer.status, 200, "story: {}", answer.body);
    answer.body["owner_node"].as_str().map(str::to_owned)
}

/// Loads `s` through `api` and plays one turn to its end: a timer due
/// when the session loads fires ahead of it, so afterwards the journal
/// holds every world turn that loading could begin.
async fn play_one_turn(api: &impl Api, s: &Session, rid: &str) {
    let (mut ws, _) = api.connect(&s.session_id, &s.player_token, None).await;
    ws.chat("roll 1d6", rid).await;
    let ack = ws
        .until(|f| f["type"] == "ack" || f["type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(ack["type"], "ack", "{ack}");
    let turn_id = ack["turn_id"].as_str().unwrap().to_owned();
    ws.until_turn_end(&turn_id).await;
}

#[actix_web::test]
async fn a_due_timer_fires_once_and_its_world_turn_reaches_player_and_spectator() {
    let app = spawn_with(|_| {}, narrator()).await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let timer = schedule(
        &app,
        &s,
        json!({"event": "guards_return", "note": "they saw the open gate", "delay_s": 1}),
    )
    .await;
    let timer_id = timer["timer_id"].as_str().unwrap();
    assert_eq!(app.snapshot(&s).await["timers"][0]["timer_id"], timer_id);

    for (who, ws) in [("player", &mut player), ("spectator", &mut spectator)] {
        let frames = ws
            .until(|f| f["type"] == "turn_started" && f["trigger"] == "timer")
            .await;
        let started = frames.last().unwrap().clone();
        assert_eq!(started["timer_id"], timer_id, "{who}: {started}");
        assert_eq!(started["event"], "guards_return", "{who}: {started}");
        assert!(started["request_id"].is_null(), "{who}: {started}");
        assert!(started["seat_id"].is_null(), "{who}: {started}");
        assert!(
            started["text"]
                .as_str()
                .unwrap_or_default()
                .contains("guards_return"),
            "{who}: the world's message names the event: {started}"
        );
        let turn_id = started["turn_id"].as_str().unwrap();
        let end = ws.until_turn_end(turn_id).await.pop().unwrap();
        assert_eq!(end["type"], "turn_completed", "{who}: {end}");
    }

    let turns = of(&fired(&app.db_url, &s).await, timer_id);
    assert_eq!(turns.len(), 1, "{turns:?}");
    once_per_due_time(&turns);
    assert_eq!(
        app.snapshot(&s).await["timers"],
        json!([]),
        "fired, it is gone"
    );
    let metrics = crate::metrics::scrape(&app).await;
    assert_eq!(metrics["questd_timers_fired_total"], 1.0, "{metrics:?}");
    // A turn played after it runs as usual, and fires nothing more.
    play_one_turn(&app, &s, "after").await;
    assert_eq!(of(&fired(&app.db_url, &s).await, timer_id).len(), 1);
}

#[actix_web::test]
async fn a_session_unloaded_while_idle_is_loaded_by_the_sweeper_and_its_timer_fires() {
    let app = spawn_with(|s| s.idle_secs = 1, narrator()).await;
    let s = app.demo().await;
    // Due well past the idle time, so the session unloads first.
    let timer = schedule(&app, &s, json!({"event": "tide_rises", "delay_s": 9})).await;
    let timer_id = timer["timer_id"].as_str().unwrap();
    not_live_here(&app, &s, "the idle session unloads before its timer is due").await;
    assert!(of(&fired(&app.db_url, &s).await, timer_id).is_empty());

    // No connection is open: the sweeper loads it when the timer is due.
    let turns = fired_at_least(
        &app.db_url,
        &s,
        timer_id,
        1,
        "the sweeper loads the session and its timer fires",
    )
    .await;
    once_per_due_time(&turns);
    let metrics = crate::metrics::scrape(&app).await;
    assert!(
        metrics["questd_sessions_loaded_total"] >= 1.0,
        "{metrics:?}"
    );
    // Once its world turn is over, the session unloads again, and nothing
    // loads it again for a timer that fired.
    not_live_here(&app, &s, "the session unloads again after its world turn").await;
    play_one_turn(&app, &s, "later").await;
    assert_eq!(of(&fired(&app.db_url, &s).await, timer_id).len(), 1);
}

#[actix_web::test]
async fn a_kill_before_or_after_a_due_time_leaves_exactly_one_world_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start(&db);
    let s = server.demo().await;

    // Killed before the due time, and down past it: it fires after the
    // restart, with no connection open (the sweeper loads the session).
    let before = schedule(&server, &s, json!({"event": "tide_rises", "delay_s": 2})).await;
    let before = before["timer_id"].as_str().unwrap().to_owned();
    server.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let server = Server::start(&db);
    fired_at_least(
        &db,
        &s,
        &before,
        1,
        "the timer missed while down fires after the restart",
    )
    .await;
    // Killed just after it fired (its world turn's start is durable): the
    // restart does not fire it again.
    server.kill9();
    let server = Server::start(&db);
    play_one_turn(&server, &s, "after-first-kill").await;
    let turns = of(&fired(&db, &s).await, &before);
    assert_eq!(turns.len(), 1, "one world turn after two kills: {turns:?}");
    once_per_due_time(&turns);

    // Killed about when it comes due: whichever side of the commit the
    // kill fell on, one world turn.
    let near = schedule(&server, &s, json!({"event": "bell_tolls", "delay_s": 1})).await;
    let near = near["timer_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    server.kill9();
    let server = Server::start(&db);
    fired_at_least(&db, &s, &near, 1, "the timer due at the kill fires").await;
    play_one_turn(&server, &s, "after-second-kill").await;
    let turns = of(&fired(&db, &s).await, &near);
    assert_eq!(turns.len(), 1, "{turns:?}");
    once_per_due_time(&turns);
}

#[actix_web::test]
async fn a_repeating_timer_fires_at_each_due_time_with_none_doubled_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start(&db);
    let s = server.demo().await;
    let timer = schedule(
        &server,
        &s,
        json!({"event": "drip", "delay_s": 1, "repeat_s": 5}),
    )
    .await;
    let timer_id = timer["timer_id"].as_str().unwrap().to_owned();
    fired_at_least(&db, &s, &timer_id, 2, "the repeating timer fires twice").await;
    // It stays pending, and the node counts it from the store.
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    while crate::metrics::scrape(&server).await["questd_timers_pending"] != 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node reports the pending timer within {STEP_WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }

    // Killed, and down past a due time: that one fires once, late, after
    // the restart, and the rhythm goes on.
    server.kill9();
    let down = of(&fired(&db, &s).await, &timer_id).len();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let _server = Server::start(&db);
    let turns = fired_at_least(
        &db,
        &s,
        &timer_id,
        down + 2,
        "the repeating timer fires again after the restart",
    )
    .await;
    once_per_due_time(&turns);
    let first = turns[0].due_at;
    for pair in turns.windows(2) {
        assert!(
            pair[0].due_at < pair[1].due_at,
            "each later than the last: {turns:?}"
        );
    }
    for f in &turns {
        assert_eq!((f.due_at - first) % 5000, 0, "on its rhythm: {turns:?}");
    }
}

#[actix_web::test]
async fn on_three_nodes_a_timer_fires_once_after_its_owner_dies_and_a_paused_owner_does_not_fire_it_again()
 {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let c = node(&db, "node-c");
    let s = a.demo().await;

    // The owner dies before the timer is due: another node claims the
    // session once the lease runs out and fires it there.
    let first = schedule(&a, &s, json!({"event": "guards_return", "delay_s": 2})).await;
    let first = first["timer_id"].as_str().unwrap().to_owned();
    assert_eq!(owner(&b, &s).await.as_deref(), Some("node-a"));
    assert!(a.kill9().code().is_none(), "killed by a signal");
    fired_at_least(
        &db,
        &s,
        &first,
        1,
        "another node fires the dead owner's timer",
    )
    .await;
    let now_owner = owner(&b, &s).await.expect("a node runs the session");
    assert_ne!(now_owner, "node-a");
    let (paused, other) = if now_owner == "node-b" {
        (&b, &c)
    } else {
        (&c, &b)
    };

    // The new owner is paused (a long GC pause, a frozen VM) with a timer
    // armed: the third node claims the session past the lease and fires it.
    let second = schedule(paused, &s, json!({"event": "tide_rises", "delay_s": 2})).await;
    let second = second["timer_id"].as_str().unwrap().to_owned();
    paused.signal("STOP");
    fired_at_least(
        &db,
        &s,
        &second,
        1,
        "the third node fires the paused owner's timer",
    )
    .await;

    // The paused node wakes with its own wake-up for the timer long due:
    // it is fenced, stops the session, and fires nothing.
    paused.signal("CONT");
    not_live_here(paused, &s, "the woken ex-owner lets the session go").await;
    play_one_turn(other, &s, "after-the-pause").await;
    let all = fired(&db, &s).await;
    for timer_id in [&first, &second] {
        let turns = of(&all, timer_id);
        assert_eq!(turns.len(), 1, "{timer_id} fired once: {all:?}");
        once_per_due_time(&turns);
    }
    let other_name = if now_owner == "node-b" {
        "node-c"
    } else {
        "node-b"
    };
    assert_eq!(owner(other, &s).await.as_deref(), Some(other_name));
}

/// A round's deadline is a timer too (docs/protocol.md §8): a node killed
/// while it holds a round's action leaves the deadline in the store's
/// timer index, so after the restart the sweeper loads the session and the
/// round resolves at its deadline with no one connected, once.
#[actix_web::test]
async fn a_round_held_by_a_killed_node_resolves_at_its_deadline_with_no_one_connected() {
    use crate::party_seats::{invite, join, post_as};
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start(&db);
    let s = server.demo().await;
    let code = invite(server.base(), &s, json!({})).await;
    join(server.base(), &s.session_id, &code, "Brin").await;
    let mode = json!({"turn_mode": "rounds", "round_timeout_s": 5});
    let a = post_as(
        server.base(),
        &s.session_id,
        "mode",
        Some(&s.player_token),
        &mode,
    )
    .await;
    assert_eq!(a.status, 200, "switch to rounds: {}", a.body);
    // The host acts; Brin never does, so only the deadline ends the round.
    let bearer = format!("Bearer {}", s.player_token);
    let chat = json!({"session_id": s.session_id, "message": "look", "request_id": "held"});
    let url = format!("{}/api/v1/chat", server.base());
    let a = request("POST", &url, &[("Authorization", &bearer)], Some(&chat)).await;
    assert_eq!(a.status, 202, "the host's action is taken: {}", a.body);
    assert_eq!(a.body["status"], "action_submitted", "{}", a.body);
    server.kill9();
    let _server = Server::start(&db);

    let round_turns = || async {
        journal(&db, &s)
            .await
            .into_iter()
            .filter(|e| e["frame"]["type"] == "turn_started" && e["frame"]["round"] == 1)
            .map(|e| e["frame"].clone())
            .collect::<Vec<_>>()
    };
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    let resolved = loop {
        let turns = round_turns().await;
        if !turns.is_empty() {
            break turns;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the round left by the killed node resolves after {STEP_WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    let actions = resolved[0]["actions"]
        .as_array()
        .expect("the round's actions");
    let texts: Vec<&Value> = actions.iter().map(|a| &a["text"]).collect();
    assert_eq!(texts, [&json!("look"), &Value::Null], "{actions:?}");
}
