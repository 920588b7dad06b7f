//! Approval of tool calls (docs/protocol.md §10), as the players, the
//! spectators and a service see it: a call the session's rule asks about
//! waits, runs nothing and shows as pending until a person decides; a
//! decision runs it exactly once with the requested arguments, or tells the
//! model `APPROVAL_DENIED`; the approval outlives a `kill -9`, an idle
//! unload and its node; a decision that may not be taken is refused and
//! runs nothing.
//!
//! In-process servers play with a scripted model that strikes when told
//! (`strike <character> <n>`: one `hp_delta` of -n) and keeps what each
//! tool result told it; the questd processes (a kill, several nodes) play
//! with the offline game master, whose `take the lamp` calls
//! `add_inventory`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::{database, node};
use crate::common::*;
use crate::party_seats::{invite, join, post_as};
use crate::process::Server;
use crate::saves::{export, import};
use crate::timers::{journal, not_live_here};
use questd::Settings;
use questd::game::HistoryEntry;
use questd::llm::{ModelReply, ScriptedProvider};
use serde_json::{Value, json};

/// The longest any one step here waits: an approval's timeout (10 s, the
/// shortest there is), a sweep, an idle unload, a lease running out.
const STEP_WAIT: Duration = Duration::from_secs(60);

/// How often a waiting step looks again.
const POLL: Duration = Duration::from_millis(100);

/// What the model read of each tool result, in order.
type Heard = Arc<Mutex<Vec<String>>>;

/// A game master that strikes when told: `strike <character> <n>...` asks
/// for one `hp_delta` of -n on that character for each n, in one answer; once a tool has answered it
/// narrates, and it narrates anything else. Answers it with what it heard.
fn striker() -> (Arc<ScriptedProvider>, Heard) {
    let heard = Heard::default();
    let kept = heard.clone();
    let model = ScriptedProvider::from_fn(move |req, _| {
        if let Some(HistoryEntry::ToolResult { content, .. }) = req.messages.last().map(|m| &**m) {
            kept.lock().unwrap().push(content.clone());
            return Ok(ModelReply::narrate("So it ends."));
        }
        let text = last_user_text(req);
        let mut words = text.split(' ');
        let (verb, who) = (words.next(), words.next());
        let blows: Vec<(&str, String)> = words
            .filter_map(|n| n.parse::<i64>().ok())
            .map(|n| ("hp_delta", blow(who.unwrap_or_default(), n).to_string()))
            .collect();
        Ok(match verb {
            Some("strike") if !blows.is_empty() => ModelReply::tools(blows),
            _ => ModelReply::narrate("The wind howls."),
        })
    });
    (Arc::new(model), heard)
}

/// The arguments of a blow of `n` on `who`, as the striker asks for it.
fn blow(who: &str, n: i64) -> Value {
    json!({"target_character_id": who, "delta": -n})
}

/// A rule asking about `hp_delta`, waiting `timeout_s`.
fn strikes_wait(timeout_s: u32) -> Value {
    json!({"tools": ["hp_delta"], "timeout_s": timeout_s})
}

/// A rule asking about `add_inventory` (what the offline game master
/// calls for `take the lamp`).
fn takes_wait(timeout_s: u32) -> Value {
    json!({"tools": ["add_inventory"], "timeout_s": timeout_s})
}

/// A demo session created with this approval rule.
async fn guarded(api: &impl Api, approval: Value) -> Session {
    api.create_session(json!({"campaign_id": "demo", "approval": approval}))
        .await
}

/// The hit points of `who`, from a snapshot.
async fn hp(api: &impl Api, s: &Session, who: &str) -> i64 {
    character(api, s, who).await["hp"]
        .as_i64()
        .unwrap_or_else(|| panic!("{who} has hit points"))
}

/// The character `who`, from a snapshot.
async fn character(api: &impl Api, s: &Session, who: &str) -> Value {
    let snapshot = api.snapshot(s).await;
    snapshot["characters"]
        .as_array()
        .expect("characters")
        .iter()
        .find(|c| c["character_id"] == who)
        .cloned()
        .unwrap_or_else(|| panic!("{who} in {snapshot}"))
}

/// The snapshot's pending approvals.
async fn pending(api: &impl Api, s: &Session) -> Vec<Value> {
    let snapshot = api.snapshot(s).await;
    snapshot["pending_approvals"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("pending_approvals in {snapshot}"))
}

/// The actions log's entries of `tool`.
async fn logged(api: &impl Api, s: &Session, tool: &str) -> Vec<Value> {
    api.actions(s)
        .await
        .into_iter()
        .filter(|a| a["tool"] == tool)
        .collect()
}

/// The speaker's player token approves `approval_id` over HTTP, and the
/// decision is taken.
async fn approve_as_player(api: &impl Api, s: &Session, approval_id: &str) {
    let approve = json!({"decision": "approve"});
    let d = decide(api, s, approval_id, Some(&s.player_token), approve).await;
    assert_eq!(d.status, 200, "{}", d.body);
}

/// Decides on `approval_id` over HTTP with this player token, or with the
/// key when `token` is `None`.
async fn decide(
    api: &impl Api,
    s: &Session,
    approval_id: &str,
    token: Option<&str>,
    body: Value,
) -> Answer {
    let rest = format!("approvals/{approval_id}");
    match token {
        Some(_) => post_as(api.base(), &s.session_id, &rest, token, &body).await,
        None => {
            let url = format!("{}/api/v1/sessions/{}/{rest}", api.base(), s.session_id);
            request(
                "POST",
                &url,
                &[("X-Internal-API-Key", TEST_KEY)],
                Some(&body),
            )
            .await
        }
    }
}

/// An `approve` frame.
fn approve_frame(approval_id: &str, decision: &str) -> Value {
    json!({"type": "approve", "approval_id": approval_id, "decision": decision})
}

/// Sends a chat and reads until its turn pauses: answers its turn id and
/// the frames after the ack, the `approval_requested` last.
async fn paused_turn(ws: &mut Ws, text: &str, rid: &str) -> (String, Vec<Value>) {
    ws.chat(text, rid).await;
    let mut replies = ws.until_reply().await;
    let ack = replies.pop().expect("a reply");
    assert_eq!(ack["type"], "ack", "{text}: {ack}");
    let turn_id = ack["turn_id"].as_str().expect("turn_id").to_owned();
    // Up to the request, or the turn's end instead (which fails the step).
    let frames = ws
        .until(|f| {
            f["turn_id"] == turn_id.as_str()
                && ["approval_requested", "turn_completed", "turn_failed"]
                    .contains(&f["type"].as_str().unwrap_or_default())
        })
        .await;
    let last = frames.last().unwrap();
    assert_eq!(
        last["type"], "approval_requested",
        "{text} waits: {frames:?}"
    );
    (turn_id, frames)
}

/// A turn paused at its call, on a server of its own playing with the
/// striker.
struct Paused {
    app: TestApp,
    /// What the model heard of each tool result.
    heard: Heard,
    s: Session,
    player: Ws,
    /// The hero's hit points before the turn.
    before: i64,
    turn_id: String,
    /// Its `approval_requested` frame.
    asked: Value,
}

/// A server with the striker (its settings adjusted), a demo session whose
/// rule waits `timeout_s` on `hp_delta`, and its player's turn `text`
/// paused.
async fn paused_strike(adjust: impl FnOnce(&mut Settings), timeout_s: u32, text: &str) -> Paused {
    let (model, heard) = striker();
    let app = spawn_with(adjust, model).await;
    let s = guarded(&app, strikes_wait(timeout_s)).await;
    let before = hp(&app, &s, "pc_001").await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (turn_id, frames) = paused_turn(&mut player, text, "paused").await;
    let asked = frames.last().unwrap().clone();
    Paused {
        app,
        heard,
        s,
        player,
        before,
        turn_id,
        asked,
    }
}

/// A `take the lamp` paused, on a questd process of its own.
struct PausedTake {
    /// Held: the database lives as long as it.
    dir: tempfile::TempDir,
    db: String,
    server: Server,
    s: Session,
    player: Ws,
    turn_id: String,
    /// Its `approval_requested` frame.
    asked: Value,
}

/// questd on a fresh database, with a demo session whose rule waits
/// `timeout_s` on `add_inventory`, and its player's `take the lamp`
/// paused (the offline game master takes with `add_inventory`).
async fn paused_take(timeout_s: u32) -> PausedTake {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start(&db);
    let s = guarded(&server, takes_wait(timeout_s)).await;
    let (mut player, _) = server.connect(&s.session_id, &s.player_token, None).await;
    let (turn_id, frames) = paused_turn(&mut player, "take the lamp", "lamp").await;
    let asked = frames.last().unwrap().clone();
    assert_eq!(asked["tool"], "add_inventory", "{asked}");
    PausedTake {
        dir,
        db,
        server,
        s,
        player,
        turn_id,
        asked,
    }
}

/// An HTTP refusal: `status`, with `error_code` `code`.
fn refused_with(a: &Answer, status: u16, code: &str) {
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (status, Some(code)),
        "{}",
        a.body
    );
}

/// The next `error` frame on `ws`.
async fn refusal(ws: &mut Ws) -> Value {
    ws.until(|f| f["type"] == "error").await.pop().unwrap()
}

/// What the model last heard of a tool result.
fn last_heard(heard: &Heard) -> String {
    heard
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("the model heard a result")
}

/// Nothing was struck in `s`: the hero has the hit points it had `before`,
/// and nothing waits.
async fn nothing_ran(app: &TestApp, s: &Session, before: i64) {
    assert_eq!(hp(app, s, "pc_001").await, before, "nothing was struck");
    assert!(pending(app, s).await.is_empty());
}

/// The frames of the turn `turn_id` among `frames`.
fn of_turn(frames: &[Value], turn_id: &str) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f["turn_id"] == turn_id)
        .cloned()
        .collect()
}

/// The approval id of an `approval_requested` frame.
fn id_of(asked: &Value) -> String {
    let id = asked["approval_id"].as_str().expect("approval_id");
    assert!(id.starts_with("apr_"), "{asked}");
    id.to_owned()
}

/// The `tool_result` frames of the call `call_id` among `frames`.
fn results_of<'a>(frames: &'a [Value], call_id: &Value) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["type"] == "tool_result" && f["call_id"] == *call_id)
        .collect()
}

/// A denied or timed-out call's result: rejected, `APPROVAL_DENIED`.
fn assert_denied(result: &Value) {
    assert_eq!(result["status"], "rejected", "{result}");
    assert_eq!(result["reason"], "permission_denied", "{result}");
    assert_eq!(result["error_code"], "APPROVAL_DENIED", "{result}");
}

/// A pending approval as the snapshot lists it is the request's.
fn assert_lists(listed: &[Value], asked: &Value) {
    assert_eq!(listed.len(), 1, "one pending: {listed:?}");
    for field in [
        "approval_id",
        "turn_id",
        "call_id",
        "tool",
        "args",
        "seat_id",
        "expires_at",
    ] {
        assert_eq!(
            listed[0][field], asked[field],
            "{field}: {listed:?} {asked}"
        );
    }
}

/// Waits until the journal of `s` holds the frame `matching` names; fails
/// naming `step`.
async fn journalled(
    db: &str,
    s: &Session,
    step: &str,
    matching: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    loop {
        let frames: Vec<Value> = journal(db, s)
            .await
            .into_iter()
            .map(|e| e["frame"].clone())
            .collect();
        if frames.iter().any(&matching) {
            return frames;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{step}: not in the journal after {STEP_WAIT:?}: {frames:#?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The frames of `kind` among `frames`.
fn all_of<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

#[actix_web::test]
async fn a_call_waits_for_approval_in_sight_of_player_and_spectator_and_runs_once_when_approved() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let before = hp(&app, &s, "pc_001").await;

    let (turn_id, frames) = paused_turn(&mut player, "strike pc_001 2", "strike").await;
    let own = of_turn(&frames, &turn_id);
    let asked = own.last().unwrap().clone();
    let call = first(&own, "tool_call").clone();
    assert_eq!(call["tool"], "hp_delta", "{call}");
    assert_eq!(asked["tool"], "hp_delta", "{asked}");
    assert_eq!(asked["args"], blow("pc_001", 2), "the exact arguments");
    assert_eq!(asked["seat_id"], "seat_1", "{asked}");
    assert_eq!(asked["call_id"], call["call_id"], "{asked}");
    // Due in the rule's 600 s (a minute either way: the clocks of the
    // test and the server are read at different moments).
    let now = questd::storage::now_ms();
    let (earliest, latest) = (
        questd::storage::rfc3339(now + 540_000),
        questd::storage::rfc3339(now + 660_000),
    );
    let expires_at = asked["expires_at"].as_str().expect("expires_at");
    assert!(
        (earliest.as_str()..latest.as_str()).contains(&expires_at),
        "{expires_at} in 600 s: {asked}"
    );
    assert!(call["seq"].as_u64() < asked["seq"].as_u64(), "{own:?}");
    let id = id_of(&asked);
    for kind in ["tool_result", "turn_completed", "turn_failed"] {
        assert!(all_of(&own, kind).is_empty(), "no {kind} yet: {own:?}");
    }
    let watched = spectator.until(|f| f["type"] == "approval_requested").await;
    assert_eq!(watched.last().unwrap(), &asked, "the spectator sees it");
    assert_eq!(of_turn(&watched, &turn_id), own, "and the same frames");

    // Nothing ran: the state, the actions log and the snapshot say so.
    assert_eq!(hp(&app, &s, "pc_001").await, before);
    assert!(logged(&app, &s, "hp_delta").await.is_empty());
    assert_lists(&pending(&app, &s).await, &asked);

    // A chat meanwhile is taken and queued behind the paused turn.
    player.chat("look around", "meanwhile").await;
    let ack = player.ack_for("meanwhile").await;
    assert_eq!(ack["duplicate"], false, "{ack}");
    let later = ack["turn_id"].as_str().unwrap().to_owned();
    assert_ne!(later, turn_id);

    player.send_json(&approve_frame(&id, "approve")).await;
    let rest = player.until_turn_end(&turn_id).await;
    assert!(all_of(&rest, "error").is_empty(), "{rest:?}");
    assert!(
        rest.iter().all(|f| f["turn_id"] != later.as_str()),
        "the queued chat waits for the turn: {rest:?}"
    );
    let own = of_turn(&rest, &turn_id);
    let resolved = &own[0];
    assert_eq!(resolved["type"], "approval_resolved", "first: {own:?}");
    assert_eq!(resolved["approval_id"], id.as_str(), "{resolved}");
    assert_eq!(resolved["call_id"], call["call_id"], "{resolved}");
    assert_eq!(resolved["decision"], "approve", "{resolved}");
    assert_eq!(resolved["by_seat_id"], "seat_1", "{resolved}");
    let result = &own[1];
    assert_eq!(
        result["type"], "tool_result",
        "then the call's result: {own:?}"
    );
    assert_eq!(result["call_id"], call["call_id"], "{result}");
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(results_of(&own, &call["call_id"]).len(), 1, "{own:?}");
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");

    let watched = of_turn(&spectator.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(watched, own, "the spectator sees the same");

    // The queued chat's turn runs after it.
    let after = player.until_turn_end(&later).await;
    assert_eq!(after.last().unwrap()["type"], "turn_completed", "{after:?}");

    // The blow landed once, with the requested arguments.
    assert_eq!(hp(&app, &s, "pc_001").await, before - 2);
    let log = logged(&app, &s, "hp_delta").await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["args"], blow("pc_001", 2), "{log:?}");
    assert!(pending(&app, &s).await.is_empty());
}

#[actix_web::test]
async fn a_denial_over_http_tells_the_model_approval_denied_and_changes_nothing() {
    let Paused {
        app,
        heard,
        s,
        mut player,
        before,
        turn_id,
        asked,
    } = paused_strike(|_| {}, 600, "strike pc_001 3").await;
    let id = id_of(&asked);

    let a = decide(
        &app,
        &s,
        &id,
        Some(&s.player_token),
        json!({"decision": "deny", "reason": "not today"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.body,
        json!({"approval_id": id, "turn_id": turn_id, "decision": "deny", "by_seat_id": "seat_1"})
    );
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    let resolved = first(&own, "approval_resolved");
    assert_eq!(resolved["decision"], "deny", "{resolved}");
    assert_eq!(resolved["reason"], "not today", "{resolved}");
    assert_eq!(resolved["by_seat_id"], "seat_1", "{resolved}");
    let results = results_of(&own, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{own:?}");
    assert_denied(results[0]);
    assert!(
        results[0]["seq"].as_u64() > resolved["seq"].as_u64(),
        "{own:?}"
    );
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");

    // What the model was asked with next: the refusal, with its reason.
    let told = last_heard(&heard);
    assert!(told.contains("APPROVAL_DENIED"), "{told}");
    assert!(told.contains("not today"), "{told}");

    assert_eq!(hp(&app, &s, "pc_001").await, before);
    let ran = logged(&app, &s, "hp_delta").await;
    assert!(ran.is_empty(), "the log holds applied calls only: {ran:?}");
    assert!(pending(&app, &s).await.is_empty());
    // Its timeout left the store's timer index with it.
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    while crate::metrics::scrape(&app).await["questd_timers_pending"] != 0.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no timer pending after the decision, within {STEP_WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[actix_web::test]
async fn an_approval_pending_at_a_kill_9_is_pending_after_the_restart_and_runs_once() {
    let PausedTake {
        dir: _dir,
        db,
        server,
        s,
        player,
        turn_id,
        asked,
    } = paused_take(600).await;
    let id = id_of(&asked);
    let slug = asked["args"]["items"][0]["slug"]
        .as_str()
        .expect("an item's slug")
        .to_owned();
    drop(player);
    server.kill9();

    let server = Server::start(&db);
    assert_lists(&pending(&server, &s).await, &asked);
    let hero = character(&server, &s, "pc_001").await;
    assert!(!hero.to_string().contains(&slug), "not taken yet: {hero}");
    // A client resuming from before the request has it replayed.
    let seq = asked["seq"].as_u64().unwrap();
    let (mut player, _) = server
        .connect_once_ready(&s.session_id, &s.player_token, Some(seq - 1))
        .await;
    let replayed = player
        .until(|f| f["type"] == "approval_requested")
        .await
        .pop()
        .unwrap();
    assert_eq!(replayed, asked, "replayed as it was sent");

    player.send_json(&approve_frame(&id, "approve")).await;
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    let resolved = first(&own, "approval_resolved");
    assert_eq!(resolved["decision"], "approve", "{resolved}");
    let results = results_of(&own, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{own:?}");
    assert_eq!(results[0]["status"], "ok", "{own:?}");
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");

    let log = logged(&server, &s, "add_inventory").await;
    assert_eq!(log.len(), 1, "ran once: {log:?}");
    assert_eq!(log[0]["args"], asked["args"], "{log:?}");
    let hero = character(&server, &s, "pc_001").await;
    assert!(hero.to_string().contains(&slug), "taken: {hero}");
    assert!(pending(&server, &s).await.is_empty());
}

#[actix_web::test]
async fn on_postgresql_a_decision_sent_to_another_node_after_the_owner_dies_runs_once_there() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let s = guarded(&a, takes_wait(600)).await;
    let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
    let (turn_id, frames) = paused_turn(&mut player, "take the lamp", "lamp").await;
    let asked = frames.last().unwrap().clone();
    let id = id_of(&asked);
    drop(player);
    assert!(a.kill9().code().is_none(), "killed by a signal");

    let answer = decide(
        &b,
        &s,
        &id,
        Some(&s.player_token),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["decision"], "approve", "{}", answer.body);
    let seq = asked["seq"].as_u64().unwrap();
    let (mut watcher, _) = b
        .connect_once_ready(&s.session_id, &s.spectator_token, Some(seq))
        .await;
    let own = of_turn(&watcher.until_turn_end(&turn_id).await, &turn_id);
    let results = results_of(&own, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{own:?}");
    assert_eq!(results[0]["status"], "ok", "{own:?}");
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");

    let frames: Vec<Value> = journal(&db, &s)
        .await
        .into_iter()
        .map(|e| e["frame"].clone())
        .collect();
    assert_eq!(all_of(&frames, "approval_resolved").len(), 1, "{frames:#?}");
    assert_eq!(
        results_of(&frames, &asked["call_id"]).len(),
        1,
        "{frames:#?}"
    );
    let log = logged(&b, &s, "add_inventory").await;
    assert_eq!(log.len(), 1, "ran once: {log:?}");
    assert_eq!(log[0]["args"], asked["args"], "{log:?}");
}

#[actix_web::test]
async fn of_two_decisions_at_once_one_is_taken_and_the_other_refused() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let start = hp(&app, &s, "pc_001").await;

    // Over HTTP twice: the player approves while a service denies.
    let (turn_id, frames) = paused_turn(&mut player, "strike pc_001 1", "both-http").await;
    let asked = frames.last().unwrap().clone();
    let id = id_of(&asked);
    let (approve, deny) = futures_util::join!(
        decide(
            &app,
            &s,
            &id,
            Some(&s.player_token),
            json!({"decision": "approve"})
        ),
        decide(&app, &s, &id, None, json!({"decision": "deny"})),
    );
    let mut statuses = [approve.status, deny.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{} / {}", approve.body, deny.body);
    let (taken, refused) = if approve.status == 200 {
        (&approve, &deny)
    } else {
        (&deny, &approve)
    };
    assert_eq!(refused.body["error_code"], "CONFLICT", "{}", refused.body);
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    let resolved = all_of(&own, "approval_resolved");
    assert_eq!(resolved.len(), 1, "{own:?}");
    assert_eq!(resolved[0]["decision"], taken.body["decision"], "{own:?}");
    let results = results_of(&own, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{own:?}");
    let approved = approve.status == 200;
    let after_first = hp(&app, &s, "pc_001").await;
    assert_eq!(after_first, start - i64::from(approved), "{own:?}");

    // Over the WebSocket and HTTP at once.
    let (turn_id, frames) = paused_turn(&mut player, "strike pc_001 1", "ws-and-http").await;
    let asked = frames.last().unwrap().clone();
    let id = id_of(&asked);
    let frame = approve_frame(&id, "approve");
    let (_, over_http) = futures_util::join!(
        player.send_json(&frame),
        decide(&app, &s, &id, None, json!({"decision": "deny"})),
    );
    let ws_won = match over_http.status {
        409 => true,
        200 => false,
        other => panic!("{other}: {}", over_http.body),
    };
    // The refused frame may come before or after the turn's end.
    let mut seen = Vec::new();
    let mut ended = false;
    let mut refusals = Vec::new();
    while !ended || (!ws_won && refusals.is_empty()) {
        let f = player.next_json().await;
        ended |= f["type"] == "turn_completed" && f["turn_id"] == turn_id.as_str();
        if f["type"] == "error" {
            refusals.push(f.clone());
        }
        seen.push(f);
    }
    if ws_won {
        assert!(refusals.is_empty(), "{refusals:?}");
    } else {
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert_eq!(refusals[0]["error_code"], "CONFLICT", "{refusals:?}");
    }
    let own = of_turn(&seen, &turn_id);
    let resolved = all_of(&own, "approval_resolved");
    assert_eq!(resolved.len(), 1, "{own:?}");
    let expected = if ws_won { "approve" } else { "deny" };
    assert_eq!(resolved[0]["decision"], expected, "{own:?}");
    assert_eq!(results_of(&own, &asked["call_id"]).len(), 1, "{own:?}");
    assert_eq!(
        hp(&app, &s, "pc_001").await,
        after_first - i64::from(ws_won),
        "{own:?}"
    );
    let ran = logged(&app, &s, "hp_delta").await;
    assert_eq!(
        ran.len(),
        usize::from(approved) + usize::from(ws_won),
        "{ran:?}"
    );
}

#[actix_web::test]
async fn only_the_speaker_the_host_or_a_key_decide_and_spectators_and_other_seats_are_forbidden() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let code = invite(app.base(), &s, json!({"max_uses": 2})).await;
    let brin = join(app.base(), &s.session_id, &code, "Brin").await;
    let cara = join(app.base(), &s.session_id, &code, "Cara").await;
    let id_s = s.session_id.as_str();
    let (mut brin_ws, _) = app.connect(id_s, &brin.token, None).await;
    let (mut cara_ws, _) = app.connect(id_s, &cara.token, None).await;
    let (mut spectator, _) = app.connect(id_s, &s.spectator_token, None).await;
    let target = brin.character_id.clone();
    let before = hp(&app, &s, &target).await;

    let strike = format!("strike {target} 1");
    let (turn_id, frames) = paused_turn(&mut brin_ws, &strike, "brin-1").await;
    let asked = frames.last().unwrap().clone();
    assert_eq!(asked["seat_id"], brin.seat_id.as_str(), "{asked}");
    let id = id_of(&asked);

    // A spectator, over the WebSocket and over HTTP.
    spectator.send_json(&approve_frame(&id, "approve")).await;
    let refused = refusal(&mut spectator).await;
    assert_eq!(refused["error_code"], "FORBIDDEN", "{refused}");
    let a = decide(
        &app,
        &s,
        &id,
        Some(&s.spectator_token),
        json!({"decision": "approve"}),
    )
    .await;
    refused_with(&a, 403, "FORBIDDEN");
    // Another seat, neither the speaker's nor the host's.
    let a = decide(
        &app,
        &s,
        &id,
        Some(&cara.token),
        json!({"decision": "approve"}),
    )
    .await;
    refused_with(&a, 403, "FORBIDDEN");
    cara_ws.send_json(&approve_frame(&id, "deny")).await;
    let refused = refusal(&mut cara_ws).await;
    assert_eq!(refused["error_code"], "FORBIDDEN", "{refused}");
    assert_lists(&pending(&app, &s).await, &asked);
    assert_eq!(hp(&app, &s, &target).await, before, "nothing ran");
    // Table talk goes on meanwhile, and reaches the spectators.
    let talk = json!({"type": "say", "text": "should we?", "request_id": "talk"});
    cara_ws.send_json(&talk).await;
    let said = spectator
        .until(|f| f["type"] == "party_chat")
        .await
        .pop()
        .unwrap();
    assert_eq!(said["text"], "should we?", "{said}");
    assert_eq!(said["seat_id"], cara.seat_id.as_str(), "{said}");

    // The host decides on Brin's call.
    let a = decide(
        &app,
        &s,
        &id,
        Some(&s.player_token),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["by_seat_id"], "seat_1", "{}", a.body);
    let own = of_turn(&brin_ws.until_turn_end(&turn_id).await, &turn_id);
    let resolved = first(&own, "approval_resolved");
    assert_eq!(resolved["by_seat_id"], "seat_1", "{resolved}");
    assert_eq!(
        results_of(&own, &asked["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    assert_eq!(hp(&app, &s, &target).await, before - 1);

    // A key decides as the host does, as no seat.
    let (turn_id, frames) = paused_turn(&mut brin_ws, &strike, "brin-2").await;
    let asked = frames.last().unwrap().clone();
    let id = id_of(&asked);
    let a = decide(&app, &s, &id, None, json!({"decision": "approve"})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["by_seat_id"], Value::Null, "{}", a.body);
    let own = of_turn(&brin_ws.until_turn_end(&turn_id).await, &turn_id);
    let resolved = first(&own, "approval_resolved");
    assert_eq!(resolved["by_seat_id"], Value::Null, "{resolved}");
    assert_eq!(
        results_of(&own, &asked["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    assert_eq!(hp(&app, &s, &target).await, before - 2);
}

#[actix_web::test]
async fn unknown_foreign_and_decided_approvals_are_refused_and_run_nothing() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let other = guarded(&app, strikes_wait(600)).await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut other_player, _) = app
        .connect(&other.session_id, &other.player_token, None)
        .await;
    let before = hp(&app, &s, "pc_001").await;
    let (turn_id, frames) = paused_turn(&mut player, "strike pc_001 1", "mine").await;
    let asked = frames.last().unwrap().clone();
    let id = id_of(&asked);
    let (_, frames) = paused_turn(&mut other_player, "strike pc_001 1", "theirs").await;
    let theirs = frames.last().unwrap().clone();
    let approve = json!({"decision": "approve"});

    // Unknown, over HTTP and the WebSocket.
    let a = decide(
        &app,
        &s,
        "apr_nosuchapproval",
        Some(&s.player_token),
        approve.clone(),
    )
    .await;
    refused_with(&a, 404, "NOT_FOUND");
    let maybe = json!({"type": "approve", "approval_id": id, "decision": "maybe"});
    player.send_json(&maybe).await;
    let refused = refusal(&mut player).await;
    assert_eq!(refused["error_code"], "INVALID_FRAME", "{refused}");
    player
        .send_json(&approve_frame("apr_nosuchapproval", "approve"))
        .await;
    let refused = refusal(&mut player).await;
    assert_eq!(refused["error_code"], "NOT_FOUND", "{refused}");
    // Another session's, named in this one, with a token and with the key.
    let a = decide(
        &app,
        &s,
        &id_of(&theirs),
        Some(&s.player_token),
        approve.clone(),
    )
    .await;
    refused_with(&a, 404, "NOT_FOUND");
    let a = decide(&app, &other, &id, None, approve.clone()).await;
    refused_with(&a, 404, "NOT_FOUND");
    assert_lists(&pending(&app, &s).await, &asked);
    assert_lists(&pending(&app, &other).await, &theirs);

    let a = decide(&app, &s, &id, Some(&s.player_token), approve.clone()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    player.until_turn_end(&turn_id).await;
    // Already decided, over HTTP and the WebSocket.
    let a = decide(&app, &s, &id, None, json!({"decision": "deny"})).await;
    refused_with(&a, 409, "CONFLICT");
    player.send_json(&approve_frame(&id, "approve")).await;
    let refused = refusal(&mut player).await;
    assert_eq!(refused["error_code"], "CONFLICT", "{refused}");

    assert_eq!(hp(&app, &s, "pc_001").await, before - 1, "ran once");
    assert_eq!(logged(&app, &s, "hp_delta").await.len(), 1);
    assert_eq!(hp(&app, &other, "pc_001").await, before, "the other waits");
    assert!(logged(&app, &other, "hp_delta").await.is_empty());
    assert_lists(&pending(&app, &other).await, &theirs);
}

/// A save is what is durable (docs/protocol.md §20.1): a turn paused for
/// approval is in it up to its `approval_requested`, and the pending
/// approval itself is not. Imported, that turn is closed as interrupted,
/// nothing is pending and the call never runs there; the session exported
/// still waits, and its approval still runs the call once.
#[actix_web::test]
async fn a_save_taken_while_a_call_waits_for_approval_imports_with_that_turn_closed() {
    let Paused {
        app,
        s,
        mut player,
        before,
        turn_id,
        asked,
        ..
    } = paused_strike(|_| {}, 600, "strike pc_001 3").await;
    let id = id_of(&asked);
    let (status, save, _) = export(app.base(), &s.session_id, &s.player_token).await;
    assert_eq!(status, 200, "{save}");
    let story = save["story"].as_array().expect("a story");
    assert_eq!(story.last(), Some(&asked), "the save ends at the request");
    assert!(save.to_string().find("approval_resolved").is_none());

    let answer = import(app.base(), &save).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let copy = Session::created(&answer.body);
    // Read from seq 0: the save's frames, then the turn's close.
    let (mut watcher, _) = app
        .connect(&copy.session_id, &copy.spectator_token, Some(0))
        .await;
    let copied = of_turn(&watcher.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(
        copied
            .iter()
            .filter(|f| f["type"] == "approval_requested")
            .count(),
        1
    );
    let end = copied.last().expect("the turn's frames");
    assert_eq!(end["type"], "turn_failed", "{copied:?}");
    assert_eq!(end["error_code"], "INTERNAL_ERROR", "{end}");
    assert!(pending(&app, &copy).await.is_empty(), "nothing pending");
    let a = decide(
        &app,
        &copy,
        &id,
        Some(&copy.player_token),
        json!({"decision": "approve"}),
    )
    .await;
    refused_with(&a, 404, "NOT_FOUND");
    assert_eq!(hp(&app, &copy, "pc_001").await, before, "never ran there");
    assert!(logged(&app, &copy, "hp_delta").await.is_empty());

    // The session exported still waits, and runs the call once approved.
    assert_lists(&pending(&app, &s).await, &asked);
    player.send_json(&approve_frame(&id, "approve")).await;
    player.until_turn_end(&turn_id).await;
    assert_eq!(hp(&app, &s, "pc_001").await, before - 3);
    assert_eq!(hp(&app, &copy, "pc_001").await, before);
}

/// The turn `turn_id`'s end in the journal of `s`, after its approval
/// timed out with no one connected: the decision is `timeout`, by no seat,
/// and the call was refused with `APPROVAL_DENIED`.
async fn timed_out_with_no_one_there(
    db: &str,
    s: &Session,
    turn_id: &str,
    asked: &Value,
    step: &str,
) {
    let frames = journalled(db, s, step, |f| {
        f["type"] == "turn_completed" && f["turn_id"] == turn_id
    })
    .await;
    let resolved = all_of(&frames, "approval_resolved");
    assert_eq!(resolved.len(), 1, "{frames:#?}");
    assert_eq!(resolved[0]["decision"], "timeout", "{frames:#?}");
    assert_eq!(resolved[0]["by_seat_id"], Value::Null, "{frames:#?}");
    let results = results_of(&frames, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{frames:#?}");
    assert_denied(results[0]);
}

#[actix_web::test]
async fn an_approval_nobody_decides_times_out_and_the_model_hears_approval_denied() {
    let Paused {
        app,
        heard,
        s,
        mut player,
        before,
        turn_id,
        asked,
    } = paused_strike(|_| {}, 10, "strike pc_001 2").await;

    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    let resolved = first(&own, "approval_resolved");
    assert_eq!(resolved["decision"], "timeout", "{resolved}");
    assert_eq!(resolved["by_seat_id"], Value::Null, "{resolved}");
    let results = results_of(&own, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{own:?}");
    assert_denied(results[0]);
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    let told = last_heard(&heard);
    assert!(told.contains("APPROVAL_DENIED"), "{told}");
    nothing_ran(&app, &s, before).await;
}

#[actix_web::test]
async fn an_approval_times_out_in_a_session_unloaded_while_idle() {
    let Paused {
        app,
        heard,
        s,
        player,
        before,
        turn_id,
        asked,
    } = paused_strike(|s| s.idle_secs = 1, 10, "strike pc_001 2").await;
    player.close().await;
    not_live_here(&app, &s, "the paused session unloads while idle").await;

    timed_out_with_no_one_there(
        &app.db_url,
        &s,
        &turn_id,
        &asked,
        "the sweeper loads the session and its approval times out",
    )
    .await;
    let told = last_heard(&heard);
    assert!(told.contains("APPROVAL_DENIED"), "{told}");
    nothing_ran(&app, &s, before).await;
}

#[actix_web::test]
async fn an_approval_times_out_after_a_kill_9_with_no_one_connected() {
    let PausedTake {
        dir: _dir,
        db,
        server,
        s,
        player,
        turn_id,
        asked,
    } = paused_take(10).await;
    drop(player);
    server.kill9();

    let server = Server::start(&db);
    timed_out_with_no_one_there(
        &db,
        &s,
        &turn_id,
        &asked,
        "after the restart the sweeper loads the session and its approval times out",
    )
    .await;
    assert!(logged(&server, &s, "add_inventory").await.is_empty());
    assert!(pending(&server, &s).await.is_empty());
}

#[actix_web::test]
async fn a_chat_over_http_behind_a_paused_turn_answers_408_and_asked_again_its_turn() {
    let (model, _) = striker();
    // A turn's deadline of 1 s: the chat waits 11 s for its turn.
    let app = spawn_with(|s| s.turn_deadline_secs = 1, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let strike =
        json!({"session_id": s.session_id, "message": "strike pc_001 2", "request_id": "h-1"});
    let paused = chat_over_http(&app.base, &s.player_token, &strike).await;
    assert_eq!(paused.status, 202, "{}", paused.body);
    // Queued behind the paused turn, it cannot end while the person waits.
    let roll = json!({"session_id": s.session_id, "message": "roll 1d6", "request_id": "h-2"});
    let waited = chat_over_http(&app.base, &s.player_token, &roll).await;
    assert_eq!(
        (waited.status, &waited.body["error_code"]),
        (408, &json!("TIMEOUT")),
        "{}",
        waited.body
    );
    let turn_id = waited.body["turn_id"]
        .as_str()
        .expect("the turn is named")
        .to_owned();
    let id = id_of(&paused.body["approval"]);
    approve_as_player(&app, &s, &id).await;
    // Asked again: the turn it was taken for, run once.
    let again = chat_over_http(&app.base, &s.player_token, &roll).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(
        (&again.body["turn_id"], &again.body["duplicate"]),
        (&json!(turn_id), &json!(true)),
        "{}",
        again.body
    );
    let (_, snapshot) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(snapshot["turn"], 2, "the strike's turn and this one, once");
}

#[actix_web::test]
async fn a_chat_over_http_that_pauses_answers_202_and_the_rest_is_read_after_the_decision() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let before = hp(&app, &s, "pc_001").await;
    let chat = json!({"session_id": s.session_id, "message": "strike pc_001 2", "request_id": "over-http"});
    let a = chat_over_http(&app.base, &s.player_token, &chat).await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(a.body["status"], "approval_required", "{}", a.body);
    assert_eq!(a.body["duplicate"], false, "{}", a.body);
    assert!(a.body["trace_id"].is_string(), "{}", a.body);
    let approval = &a.body["approval"];
    assert_eq!(approval["tool"], "hp_delta", "{}", a.body);
    assert_eq!(approval["args"], blow("pc_001", 2), "{}", a.body);
    assert_eq!(approval["turn_id"], a.body["turn_id"], "{}", a.body);
    let turn_id = a.body["turn_id"].as_str().unwrap().to_owned();
    let id = id_of(approval);
    assert_lists(&pending(&app, &s).await, approval);
    assert!(logged(&app, &s, "hp_delta").await.is_empty());

    approve_as_player(&app, &s, &id).await;
    // The rest of the turn: the actions log, and the story from its start.
    let deadline = tokio::time::Instant::now() + STEP_WAIT;
    let log = loop {
        let log = logged(&app, &s, "hp_delta").await;
        if !log.is_empty() {
            break log;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the approved call is logged"
        );
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["args"], blow("pc_001", 2), "{log:?}");
    let (mut reader, _) = app
        .connect(&s.session_id, &s.spectator_token, Some(0))
        .await;
    let own = of_turn(&reader.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(
        first(&own, "approval_resolved")["decision"],
        "approve",
        "{own:?}"
    );
    assert_eq!(
        results_of(&own, &approval["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    assert_eq!(hp(&app, &s, "pc_001").await, before - 2);
}

#[actix_web::test]
async fn a_bad_approval_rule_is_refused_with_its_problems_and_a_keyed_tool_call_needs_no_approval()
{
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let url = format!("{}/api/v1/sessions", app.base);
    let keyed = [("X-Internal-API-Key", TEST_KEY)];
    let demo: Value =
        serde_json::from_str(include_str!("../../src/game/campaigns/demo.json")).unwrap();
    for bad in [
        json!({"tools": ["no_such_tool"]}),
        json!({"tools": ["hp_delta"], "timeout_s": 5}),
        json!({"tools": ["hp_delta"], "timeout_s": 86_401}),
        json!({"tools": "hp_delta"}),
        json!({"tools": ["hp_delta"], "lethal_only": "yes"}),
        json!("hp_delta"),
    ] {
        let body = json!({"campaign_id": "demo", "approval": bad});
        let a = request("POST", &url, &keyed, Some(&body)).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert_eq!(
            a.body["error_code"], "INVALID_CAMPAIGN",
            "{bad}: {}",
            a.body
        );
        let problems = a.body["problems"].as_array();
        assert!(problems.is_some_and(|p| !p.is_empty()), "{bad}: {}", a.body);
        let mut inline = demo.clone();
        inline["approval"] = bad.clone();
        let a = request("POST", &url, &keyed, Some(&json!({"campaign": inline}))).await;
        assert_eq!(a.status, 400, "inline {bad}: {}", a.body);
        assert_eq!(
            a.body["error_code"], "INVALID_CAMPAIGN",
            "{bad}: {}",
            a.body
        );
        let problems = a.body["problems"].as_array();
        assert!(problems.is_some_and(|p| !p.is_empty()), "{bad}: {}", a.body);
    }

    // An inline campaign's rule asks as the creation body's does.
    let mut inline = demo.clone();
    inline["approval"] = strikes_wait(600);
    let a = request("POST", &url, &keyed, Some(&json!({"campaign": inline}))).await;
    assert_eq!(a.status, 201, "{}", a.body);
    let s = Session::created(&a.body);
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (_, frames) = paused_turn(&mut player, "strike pc_001 1", "inline").await;
    assert_eq!(frames.last().unwrap()["tool"], "hp_delta");

    // A service's own call with its key runs at once.
    let s = guarded(&app, strikes_wait(600)).await;
    let before = hp(&app, &s, "pc_001").await;
    let answer = request(
        "POST",
        &format!("{}/api/v1/tools/call", app.base),
        &[
            ("X-Internal-API-Key", TEST_KEY),
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "approvals-test"),
            ("X-Trace-ID", "approvals-test"),
            ("X-Session-ID", s.session_id.as_str()),
        ],
        Some(&json!({"tool_name": "hp_delta", "input": blow("pc_001", 1)})),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["success"], true, "{}", answer.body);
    assert_eq!(hp(&app, &s, "pc_001").await, before - 1);
    assert!(pending(&app, &s).await.is_empty());
}

#[actix_web::test]
async fn a_paused_session_unloaded_while_idle_is_loaded_by_a_decision_over_http_and_runs_it_once() {
    let Paused {
        app,
        s,
        player,
        before,
        turn_id,
        asked,
        ..
    } = paused_strike(|s| s.idle_secs = 1, 600, "strike pc_001 2").await;
    player.close().await;
    not_live_here(&app, &s, "the paused session unloads while idle").await;

    let a = decide(
        &app,
        &s,
        &id_of(&asked),
        Some(&s.player_token),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let frames = journalled(&app.db_url, &s, "the approved turn completes", |f| {
        f["type"] == "turn_completed" && f["turn_id"] == turn_id.as_str()
    })
    .await;
    let results = results_of(&frames, &asked["call_id"]);
    assert_eq!(results.len(), 1, "{frames:#?}");
    assert_eq!(results[0]["status"], "ok", "{frames:#?}");
    assert_eq!(hp(&app, &s, "pc_001").await, before - 2);
    assert_eq!(logged(&app, &s, "hp_delta").await.len(), 1);
}

#[actix_web::test]
async fn a_chat_queued_behind_a_pause_survives_a_kill_9_and_runs_after_the_decision() {
    let PausedTake {
        dir: _dir,
        db,
        server,
        s,
        mut player,
        turn_id,
        asked,
    } = paused_take(600).await;
    player.chat("look around", "queued").await;
    let ack = player.ack_for("queued").await;
    let later = ack["turn_id"].as_str().unwrap().to_owned();
    drop(player);
    server.kill9();

    let server = Server::start(&db);
    let (mut player, _) = server
        .connect_once_ready(&s.session_id, &s.player_token, None)
        .await;
    player
        .send_json(&approve_frame(&id_of(&asked), "approve"))
        .await;
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(
        results_of(&own, &asked["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    // The acknowledged chat was not lost: its turn runs next.
    let after = player.until_turn_end(&later).await;
    assert_eq!(after.last().unwrap()["type"], "turn_completed", "{after:?}");
    let started = journal(&db, &s)
        .await
        .into_iter()
        .filter(|e| e["frame"]["type"] == "turn_started" && e["frame"]["request_id"] == "queued")
        .count();
    assert_eq!(started, 1, "the queued chat ran once");
}

#[actix_web::test]
async fn a_decision_taken_after_the_turn_deadline_would_have_passed_still_runs() {
    let Paused {
        app,
        s,
        mut player,
        before,
        turn_id,
        asked,
        ..
    } = paused_strike(|s| s.turn_deadline_secs = 2, 600, "strike pc_001 2").await;
    // A person takes longer than a turn may: the paused turn's deadline
    // is stopped, so the turn is still there to decide on.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_lists(&pending(&app, &s).await, &asked);
    player
        .send_json(&approve_frame(&id_of(&asked), "approve"))
        .await;
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(
        results_of(&own, &asked["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    assert_eq!(hp(&app, &s, "pc_001").await, before - 2);
}

#[actix_web::test]
async fn a_lethal_only_rule_asks_only_about_a_blow_that_would_drop_the_hero() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let rule = json!({"tools": ["hp_delta"], "timeout_s": 600, "lethal_only": true});
    let s = guarded(&app, rule).await;
    let before = hp(&app, &s, "pc_001").await;
    let (mut player, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    assert_eq!(
        welcome["state"]["pending_approvals"],
        json!([]),
        "{welcome}"
    );
    let graze = turn(&mut player, "strike pc_001 1").await;
    assert!(graze.called("hp_delta"), "a graze runs at once");
    assert_eq!(hp(&app, &s, "pc_001").await, before - 1);

    let lethal = format!("strike pc_001 {before}");
    let (turn_id, frames) = paused_turn(&mut player, &lethal, "lethal").await;
    let asked = frames.last().unwrap().clone();
    assert_eq!(asked["args"], blow("pc_001", before), "{asked}");
    // A late joiner's welcome lists it.
    let (_, welcome) = app.connect(&s.session_id, &s.spectator_token, None).await;
    assert_lists(
        welcome["state"]["pending_approvals"].as_array().unwrap(),
        &asked,
    );
    // A reason past its bound is refused, and decides nothing.
    let long = "x".repeat(501);
    let id = id_of(&asked);
    let a = decide(
        &app,
        &s,
        &id,
        None,
        json!({"decision": "deny", "reason": long}),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_lists(&pending(&app, &s).await, &asked);
    let a = decide(&app, &s, &id, None, json!({"decision": "deny"})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    assert_denied(results_of(&own, &asked["call_id"])[0]);
    assert_eq!(hp(&app, &s, "pc_001").await, before - 1, "the hero stands");
}

#[actix_web::test]
async fn on_postgresql_another_node_relays_decisions_and_answers_a_paused_chat_with_202() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let rule = json!({"tools": ["add_inventory", "move"], "timeout_s": 600});
    let s = guarded(&a, rule).await;
    // A spectator watching through B, which does not run the session.
    let (mut watcher, _) = b.connect(&s.session_id, &s.spectator_token, None).await;

    // A player connected through B decides over the WebSocket: relayed to
    // the owner, like the player's chats.
    let (mut player, _) = b.connect(&s.session_id, &s.player_token, None).await;
    let (turn_id, frames) = paused_turn(&mut player, "take the lamp", "ws-via-b").await;
    let asked = frames.last().unwrap().clone();
    let seen = watcher
        .until(|f| f["type"] == "approval_requested")
        .await
        .pop()
        .unwrap();
    assert_eq!(seen, asked, "the spectator through B sees the request");
    player
        .send_json(&approve_frame(&id_of(&asked), "approve"))
        .await;
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    let resolved = first(&own, "approval_resolved");
    assert_eq!(resolved["by_seat_id"], "seat_1", "{own:?}");
    assert_eq!(
        results_of(&own, &asked["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    let log = logged(&b, &s, "add_inventory").await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["args"], asked["args"], "{log:?}");

    // Over HTTP through B: 202 with the approval.
    let snapshot = b.snapshot(&s).await;
    let (here, there) = (position(&snapshot), neighbour(&snapshot));
    let message = format!("go to {there}");
    let chat = json!({"session_id": s.session_id, "message": message, "request_id": "via-b"});
    let answer = chat_over_http(b.base(), &s.player_token, &chat).await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    assert_eq!(
        answer.body["status"], "approval_required",
        "{}",
        answer.body
    );
    let approval = answer.body["approval"].clone();
    assert_eq!(approval["tool"], "move", "{approval}");
    assert_eq!(approval["args"]["to_area_id"], there.as_str(), "{approval}");
    let turn_id = answer.body["turn_id"].as_str().unwrap().to_owned();
    let seen = watcher
        .until(|f| f["type"] == "approval_requested" && f["turn_id"] == turn_id.as_str())
        .await
        .pop()
        .unwrap();
    assert_eq!(seen["approval_id"], approval["approval_id"], "{seen}");
    assert_eq!(seen["args"], approval["args"], "{seen}");

    // The same chat again is the same paused turn, not a second one.
    let again = chat_over_http(b.base(), &s.player_token, &chat).await;
    assert_eq!(again.status, 202, "{}", again.body);
    assert_eq!(again.body["duplicate"], true, "{}", again.body);
    assert_eq!(again.body["approval"], approval, "{}", again.body);

    let id = id_of(&approval);
    let d = decide(
        &b,
        &s,
        &id,
        Some(&s.player_token),
        json!({"decision": "deny"}),
    )
    .await;
    assert_eq!(d.status, 200, "{}", d.body);
    let own = of_turn(&watcher.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(
        first(&own, "approval_resolved")["decision"],
        "deny",
        "{own:?}"
    );
    assert_denied(results_of(&own, &approval["call_id"])[0]);
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    assert_eq!(
        position(&b.snapshot(&s).await),
        here,
        "the move did not run"
    );
    // The owner counted two requests, one approval and one denial.
    let metrics = crate::metrics::scrape(&a).await;
    assert_eq!(
        metrics["questd_approvals_requested_total"], 2.0,
        "{metrics:?}"
    );
    for decision in ["approve", "deny"] {
        let name = format!("questd_approvals_decided_total{{decision=\"{decision}\"}}");
        assert_eq!(metrics.get(&name), Some(&1.0), "{name}: {metrics:?}");
    }
}

#[actix_web::test]
async fn each_call_of_one_answer_waits_for_its_own_decision() {
    let Paused {
        app,
        heard,
        s,
        mut player,
        before,
        turn_id,
        asked: first_asked,
    } = paused_strike(|_| {}, 600, "strike pc_001 1 2 3").await;
    assert_eq!(first_asked["args"], blow("pc_001", 1), "{first_asked}");

    // Approved: it runs, and the next call of the answer waits in turn.
    player
        .send_json(&approve_frame(&id_of(&first_asked), "approve"))
        .await;
    let frames = player
        .until(|f| f["type"] == "approval_requested" || f["type"] == "turn_completed")
        .await;
    let second = frames.last().unwrap().clone();
    assert_eq!(second["type"], "approval_requested", "{frames:?}");
    assert_eq!(second["args"], blow("pc_001", 2), "{second}");
    assert_ne!(second["approval_id"], first_asked["approval_id"]);
    assert_eq!(
        results_of(&frames, &first_asked["call_id"])[0]["status"],
        "ok"
    );
    assert_eq!(hp(&app, &s, "pc_001").await, before - 1);

    // Denied: the last call still asks.
    let a = decide(&app, &s, &id_of(&second), None, json!({"decision": "deny"})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let frames = player
        .until(|f| f["type"] == "approval_requested" || f["type"] == "turn_completed")
        .await;
    let third = frames.last().unwrap().clone();
    assert_eq!(third["type"], "approval_requested", "{frames:?}");
    assert_eq!(third["args"], blow("pc_001", 3), "{third}");
    assert_denied(results_of(&frames, &second["call_id"])[0]);

    player
        .send_json(&approve_frame(&id_of(&third), "approve"))
        .await;
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    assert_eq!(
        results_of(&own, &third["call_id"])[0]["status"],
        "ok",
        "{own:?}"
    );
    assert_eq!(own.last().unwrap()["type"], "turn_completed", "{own:?}");
    assert_eq!(hp(&app, &s, "pc_001").await, before - 4, "1 and 3 landed");
    let log = logged(&app, &s, "hp_delta").await;
    let args: Vec<&Value> = log.iter().map(|a| &a["args"]).collect();
    assert_eq!(args, [&blow("pc_001", 1), &blow("pc_001", 3)], "{log:?}");
    // The model was asked again once, after the answer's last call.
    let told = heard.lock().unwrap().clone();
    assert_eq!(
        told.len(),
        1,
        "asked once after the answer's calls: {told:?}"
    );
}

#[actix_web::test]
async fn a_decision_after_the_timeout_passed_while_the_server_was_down_is_refused_and_runs_nothing()
{
    let PausedTake {
        dir: _dir,
        db,
        server,
        s,
        player,
        turn_id,
        asked,
    } = paused_take(10).await;
    drop(player);
    server.kill9();
    // Down past the approval's time.
    tokio::time::sleep(Duration::from_secs(11)).await;

    let server = Server::start(&db);
    let a = decide(
        &server,
        &s,
        &id_of(&asked),
        Some(&s.player_token),
        json!({"decision": "approve"}),
    )
    .await;
    refused_with(&a, 409, "CONFLICT");
    timed_out_with_no_one_there(&db, &s, &turn_id, &asked, "the late approval timed out").await;
    assert!(logged(&server, &s, "add_inventory").await.is_empty());
}

#[actix_web::test]
async fn with_the_offline_game_master_a_denied_take_leaves_the_item_where_it_was() {
    let app = spawn_offline(|_| {}).await;
    let s = guarded(&app, takes_wait(600)).await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (turn_id, frames) = paused_turn(&mut player, "take the lamp", "first").await;
    let asked = frames.last().unwrap().clone();
    player
        .send_json(&approve_frame(&id_of(&asked), "deny"))
        .await;
    let own = of_turn(&player.until_turn_end(&turn_id).await, &turn_id);
    assert_denied(results_of(&own, &asked["call_id"])[0]);
    let done = own.last().unwrap();
    assert_eq!(done["type"], "turn_completed", "{own:?}");
    let slug = asked["args"]["items"][0]["slug"].as_str().unwrap();
    let hero = character(&app, &s, "pc_001").await;
    assert!(!hero.to_string().contains(slug), "not carried: {hero}");

    // Still there: asked for again, it waits for a decision again.
    let (_, frames) = paused_turn(&mut player, "take the lamp", "again").await;
    let again = frames.last().unwrap();
    assert_eq!(again["args"], asked["args"], "{again}");
}

#[actix_web::test]
async fn the_host_decides_on_a_call_whose_speaker_was_kicked_while_it_waited() {
    let (model, _) = striker();
    let app = spawn_with(|_| {}, model).await;
    let s = guarded(&app, strikes_wait(600)).await;
    let code = invite(app.base(), &s, json!({})).await;
    let brin = join(app.base(), &s.session_id, &code, "Brin").await;
    let (mut host_ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut brin_ws, _) = app.connect(&s.session_id, &brin.token, None).await;
    let strike = format!("strike {} 1", brin.character_id);
    let (turn_id, frames) = paused_turn(&mut brin_ws, &strike, "kicked").await;
    let asked = frames.last().unwrap().clone();
    let kick = format!("seats/{}/kick", brin.seat_id);
    let a = post_as(
        app.base(),
        &s.session_id,
        &kick,
        Some(&s.player_token),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "kick: {}", a.body);
    // The kicked seat decides nothing; the host still may.
    let a = decide(
        &app,
        &s,
        &id_of(&asked),
        Some(&brin.token),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert_lists(&pending(&app, &s).await, &asked);
    let a = decide(
        &app,
        &s,
        &id_of(&asked),
        Some(&s.player_token),
        json!({"decision": "deny"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let own = of_turn(&host_ws.until_turn_end(&turn_id).await, &turn_id);
    assert_denied(results_of(&own, &asked["call_id"])[0]);
    assert!(pending(&app, &s).await.is_empty());
}
