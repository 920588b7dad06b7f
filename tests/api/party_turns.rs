//! Party play, the turn side (docs/protocol.md §8): a turn acts for its
//! speaker, tools refuse another seat's character, rounds resolve once
//! (at the deadline, and across a `kill -9`), a round's request ids stay
//! duplicates wherever the session loads next, table talk never reaches
//! the model, and the offline game master plays for whoever spoke.

use std::sync::{Arc, Mutex};

use questd::llm::{ModelReply, Provider, ScriptedProvider};
use serde_json::{Value, json};

use crate::common::*;
use crate::party_seats::{Joined, invite, join, post_as};
use crate::process::Server;

/// A session of `api` with Brin and Cara joined beside the host.
async fn party_of_three(api: &impl Api) -> (Session, Joined, Joined) {
    let s = api.demo().await;
    let code = invite(api.base(), &s, json!({"max_uses": 2})).await;
    let brin = join(api.base(), &s.session_id, &code, "Brin").await;
    let cara = join(api.base(), &s.session_id, &code, "Cara").await;
    (s, brin, cara)
}

/// The host switches `s` to rounds of `timeout_s`.
async fn rounds(base: &str, s: &Session, timeout_s: u32) {
    let body = json!({"turn_mode": "rounds", "round_timeout_s": timeout_s});
    let a = post_as(base, &s.session_id, "mode", Some(&s.player_token), &body).await;
    assert_eq!(a.status, 200, "switch to rounds: {}", a.body);
}

/// Where `character_id` stands in a snapshot's state.
fn area_of(state: &Value, character_id: &str) -> String {
    state["characters"]
        .as_array()
        .expect("characters")
        .iter()
        .find(|c| c["character_id"] == character_id)
        .and_then(|c| c["area_id"].as_str())
        .unwrap_or_else(|| panic!("{character_id} in the snapshot"))
        .to_owned()
}

/// The frames of the turn that `request_id` started, from a connection's
/// frames (which hold the turns of others before it, too).
fn own_turn(frames: &[Value], request_id: &str) -> Vec<Value> {
    let started = frames
        .iter()
        .find(|f| f["type"] == "turn_started" && f["request_id"] == request_id)
        .unwrap_or_else(|| panic!("the turn of {request_id}: {frames:?}"));
    let turn_id = &started["turn_id"];
    frames
        .iter()
        .filter(|f| f["turn_id"] == *turn_id)
        .cloned()
        .collect()
}

/// A model that does what the player's words say: `move <character> to
/// <area>` asks for that move, anything else is narrated.
fn mover() -> ScriptedProvider {
    ScriptedProvider::from_fn(|req, _| {
        let after_tools = matches!(
            req.messages.last().map(|m| &**m),
            Some(questd::game::HistoryEntry::ToolResult { .. })
        );
        let text = last_user_text(req);
        let asked = text
            .strip_prefix("move ")
            .and_then(|rest| rest.split_once(" to "));
        Ok(match asked {
            Some((who, to)) if !after_tools => ModelReply::tools(vec![(
                "move".to_owned(),
                json!({"actor_id": who, "to_area_id": to}).to_string(),
            )]),
            _ => ModelReply::narrate("So it goes."),
        })
    })
}

#[actix_web::test]
async fn each_player_plays_as_their_own_character_and_may_not_move_anothers() {
    let app = spawn_with(|_| {}, Arc::new(mover())).await;
    let (s, brin, cara) = party_of_three(&app).await;
    let id = s.session_id.as_str();
    let (mut host_ws, welcome) = app.connect(id, &s.player_token, None).await;
    let (mut brin_ws, _) = app.connect(id, &brin.token, None).await;
    let (mut cara_ws, _) = app.connect(id, &cara.token, None).await;
    let mut watchers = Vec::new();
    for _ in 0..2 {
        watchers.push(app.connect(id, &s.spectator_token, None).await.0);
    }
    let there = neighbour(&welcome["state"]);

    let players = [
        (&mut host_ws, "seat_1", "pc_001".to_owned()),
        (&mut brin_ws, "seat_2", brin.character_id.clone()),
        (&mut cara_ws, "seat_3", cara.character_id.clone()),
    ];
    for (i, (ws, seat, character)) in players.into_iter().enumerate() {
        let rid = format!("m-{i}");
        let frames = ws.play(&format!("move {character} to {there}"), &rid).await;
        let frames = own_turn(&frames, &rid);
        let started = first(&frames, "turn_started");
        assert_eq!(
            (started["seat_id"].as_str(), started["actor_id"].as_str()),
            (Some(seat), Some(character.as_str())),
            "{started}"
        );
        let result = first(&frames, "tool_result");
        assert_eq!(result["status"], "ok", "{seat} moves their own: {result}");
        // The spectators see the same turn, named the same.
        for w in &mut watchers {
            let seen = w.until(|f| f["type"] == "turn_completed").await;
            assert_eq!(first(&seen, "turn_started")["seat_id"], seat);
        }
    }
    let snap = app.snapshot(&s).await;
    for character in ["pc_001", &brin.character_id, &cara.character_id] {
        assert_eq!(area_of(&snap, character), there, "{character} moved");
    }

    // Brin's turn asks to move the host's character back: refused, and
    // nothing moves.
    let home = position(&welcome["state"]);
    let frames = brin_ws
        .play(&format!("move pc_001 to {home}"), "steal-1")
        .await;
    let frames = own_turn(&frames, "steal-1");
    let result = first(&frames, "tool_result");
    assert_eq!(
        (
            result["status"].as_str(),
            result["reason"].as_str(),
            result["error_code"].as_str()
        ),
        (
            Some("rejected"),
            Some("permission_denied"),
            Some("PERMISSION_DENIED")
        ),
        "{result}"
    );
    let snap = app.snapshot(&s).await;
    assert_eq!(
        area_of(&snap, "pc_001"),
        there,
        "the host's character stays"
    );

    // An NPC is no seat's: Brin's turn may move one (contract §8).
    let npc = snap["characters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "npc")
        .expect("the demo has an NPC");
    let npc_id = npc["character_id"].as_str().unwrap();
    let from = npc["area_id"].as_str().unwrap();
    let to = snap["areas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["area_id"] == from)
        .and_then(|a| a["reachable_area_ids"][0].as_str())
        .expect("a way out of the NPC's area")
        .to_owned();
    let frames = brin_ws
        .play(&format!("move {npc_id} to {to}"), "npc-1")
        .await;
    let result = first(own_turn(&frames, "npc-1").as_slice(), "tool_result").clone();
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(area_of(&app.snapshot(&s).await, npc_id), to);
}

/// Reads `ws` until the `turn_started` of a round; answers it.
async fn round_started(ws: &mut Ws) -> Value {
    let mut frames = ws
        .until(|f| f["type"] == "turn_started" && f["round"].is_u64())
        .await;
    frames.pop().expect("the round's turn")
}

/// `seat` of session `id` acts over HTTP with `text`, as request `rid`:
/// `202`, the action waits for the round.
async fn act_over_http(base: &str, id: &str, seat: &Joined, text: &str, rid: &str) -> Answer {
    let body = json!({"session_id": id, "message": text, "request_id": rid});
    let a = chat_over_http(base, &seat.token, &body).await;
    assert_eq!(a.status, 202, "{}", a.body);
    a
}

/// The `actions` of a round's `turn_started` as (seat, text) pairs.
fn actions(started: &Value) -> Vec<(String, Option<String>)> {
    started["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["seat_id"].as_str().unwrap_or_default().to_owned(),
                a["text"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[actix_web::test]
async fn a_round_with_a_silent_player_resolves_at_its_deadline() {
    let app = spawn_app().await;
    let (s, brin, cara) = party_of_three(&app).await;
    let id = s.session_id.as_str();
    rounds(&app.base, &s, 5).await;
    let (mut host_ws, _) = app.connect(id, &s.player_token, None).await;
    let (_cara_ws, _) = app.connect(id, &cara.token, None).await;

    host_ws.chat("look around", "h-1").await;
    let ack = host_ws.ack_for("h-1").await;
    assert_eq!(
        (ack["round"].as_u64(), ack["duplicate"].as_bool()),
        (Some(1), Some(false))
    );
    let submitted = host_ws
        .until(|f| f["type"] == "action_submitted")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (submitted["round"].as_u64(), submitted["seat_id"].as_str()),
        (Some(1), Some("seat_1"))
    );
    assert!(submitted.get("text").is_none(), "no text: {submitted}");
    // The same request again is the same action.
    host_ws.chat("look around", "h-1").await;
    assert_eq!(host_ws.ack_for("h-1").await["duplicate"], true);

    // Brin acts over HTTP (offline): 202, the action waits for the round.
    let a = act_over_http(&app.base, id, &brin, "roll 1d20", "b-1").await;
    assert_eq!(
        (
            a.body["status"].as_str(),
            a.body["round"].as_u64(),
            a.body["seat_id"].as_str(),
            a.body["request_id"].as_str()
        ),
        (
            Some("action_submitted"),
            Some(1),
            Some("seat_2"),
            Some("b-1")
        )
    );
    assert!(a.body["turn_id"].is_null(), "{}", a.body);
    assert_eq!(a.body["duplicate"], false, "{}", a.body);

    // Cara is online and silent: the round resolves at its deadline
    // (5 s after the first action; FRAME_WAIT bounds the wait).
    let started = round_started(&mut host_ws).await;
    assert_eq!(
        actions(&started),
        [
            ("seat_1".to_owned(), Some("look around".to_owned())),
            ("seat_2".to_owned(), Some("roll 1d20".to_owned())),
            ("seat_3".to_owned(), None),
        ]
    );
    assert!(started["seat_id"].is_null(), "{started}");
    let turn_id = started["turn_id"].as_str().unwrap().to_owned();
    let end = host_ws.until_turn_end(&turn_id).await.pop().unwrap();
    assert_eq!(end["type"], "turn_completed", "{end}");
    let snap = app.snapshot(&s).await;
    assert_eq!(snap["round"]["number"], 2, "the next round begins");
}

/// A round whose only action leaves with its kicked seat has not begun:
/// its deadline is gone from the store's timer index, and it counts from
/// the next action taken, not from the one that left (docs/protocol.md
/// §8).
#[actix_web::test]
async fn a_round_whose_only_action_was_kicked_counts_its_deadline_from_the_next_one() {
    let app = spawn_app().await;
    let (s, brin, cara) = party_of_three(&app).await;
    let id = s.session_id.as_str();
    rounds(&app.base, &s, 5).await;
    let (mut host_ws, _) = app.connect(id, &s.player_token, None).await;
    let (mut cara_ws, _) = app.connect(id, &cara.token, None).await;
    let round_timers = || async {
        crate::database::text_rows(
            &app.db_url,
            "SELECT timer_id FROM session_timers WHERE session_id = $1 AND timer_id = 'round'",
            id,
        )
        .await
    };

    // Brin acts over HTTP, and is kicked: the round holds no action.
    act_over_http(&app.base, id, &brin, "roll 1d20", "b-1").await;
    assert_eq!(
        round_timers().await.len(),
        1,
        "the first action sets a deadline"
    );
    let kick = format!("seats/{}/kick", brin.seat_id);
    let a = post_as(&app.base, id, &kick, Some(&s.player_token), &json!({})).await;
    assert_eq!(a.status, 200, "kick: {}", a.body);
    assert!(
        round_timers().await.is_empty(),
        "a round without actions has no deadline to wake the session for"
    );

    // Past the deadline Brin's action set, the host acts. The round waits
    // for Cara, online and yet to act: its deadline is 5 s after the
    // host's action.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    host_ws.chat("look around", "h-1").await;
    assert_eq!(host_ws.ack_for("h-1").await["round"], 1);
    host_ws.until(|f| f["type"] == "action_submitted").await;
    cara_ws.chat("hide", "c-1").await;
    assert_eq!(
        cara_ws.ack_for("c-1").await["round"],
        1,
        "the round is still open when Cara acts"
    );
    let started = round_started(&mut host_ws).await;
    assert_eq!(
        actions(&started),
        [
            ("seat_1".to_owned(), Some("look around".to_owned())),
            ("seat_3".to_owned(), Some("hide".to_owned())),
        ]
    );
}

#[actix_web::test]
async fn a_round_cut_by_kill9_resolves_once_with_every_action() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start(&db);
    let (s, brin, cara) = party_of_three(&server).await;
    let id = s.session_id.as_str();
    rounds(server.base(), &s, 600).await;
    let (mut host_ws, _) = server.connect(id, &s.player_token, None).await;
    let (mut brin_ws, _) = server.connect(id, &brin.token, None).await;
    let (_cara_ws, _) = server.connect(id, &cara.token, None).await;
    for (ws, rid, text) in [
        (&mut host_ws, "h-1", "look around"),
        (&mut brin_ws, "b-1", "roll 1d20"),
    ] {
        ws.chat(text, rid).await;
        ws.ack_for(rid).await;
    }
    server.kill9();

    let server = Server::start(&db);
    let (mut host_ws, welcome) = server.connect(id, &s.player_token, None).await;
    assert_eq!(
        welcome["state"]["round"]["acted"],
        json!(["seat_1", "seat_2"]),
        "both actions survived: {}",
        welcome["state"]["round"]
    );
    let (_brin_ws, _) = server.connect(id, &brin.token, None).await;
    let (mut cara_ws, _) = server.connect(id, &cara.token, None).await;
    // The host's request again is a duplicate, not a second action.
    host_ws.chat("look around", "h-1").await;
    assert_eq!(host_ws.ack_for("h-1").await["duplicate"], true);
    cara_ws.chat("where can I go", "c-1").await;
    assert_eq!(cara_ws.ack_for("c-1").await["round"], 1);
    let started = round_started(&mut host_ws).await;
    assert_eq!(
        actions(&started),
        [
            ("seat_1".to_owned(), Some("look around".to_owned())),
            ("seat_2".to_owned(), Some("roll 1d20".to_owned())),
            ("seat_3".to_owned(), Some("where can I go".to_owned())),
        ]
    );
    let turn_id = started["turn_id"].as_str().unwrap().to_owned();
    host_ws.until_turn_end(&turn_id).await;

    // The whole story holds that round's turn once.
    let (mut again, _) = server.connect(id, &s.spectator_token, Some(0)).await;
    let story = again.until(|f| f["type"] == "turn_completed").await;
    let resolved = story
        .iter()
        .filter(|f| f["type"] == "turn_started" && f["round"] == 1)
        .count();
    assert_eq!(resolved, 1, "{story:?}");
    let snap = server.snapshot(&s).await;
    assert_eq!(snap["round"]["number"], 2);
}

/// The ack a seat gets for `request_id` sent again as `text`.
async fn again(ws: &mut Ws, text: &str, request_id: &str) -> Value {
    ws.chat(text, request_id).await;
    ws.ack_for(request_id).await
}

/// A resolved round's request ids are known wherever the session loads
/// next (docs/protocol.md §2, §8): after a `kill -9` and after an idle
/// unload, the same chat again (WebSocket or HTTP) is its action's
/// duplicate, never a new action in the next round.
#[actix_web::test]
async fn a_resolved_rounds_request_ids_stay_duplicates_across_kill9_and_an_idle_unload() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let idle = [("QUESTD_IDLE_SECS", "1")];
    let server = Server::start_with(&db, &idle);
    let (s, brin, cara) = party_of_three(&server).await;
    let id = s.session_id.as_str();
    rounds(server.base(), &s, 600).await;
    let (mut host_ws, _) = server.connect(id, &s.player_token, None).await;
    let (mut brin_ws, _) = server.connect(id, &brin.token, None).await;
    let (mut cara_ws, _) = server.connect(id, &cara.token, None).await;
    for (ws, rid) in [
        (&mut host_ws, "h-1"),
        (&mut brin_ws, "b-1"),
        (&mut cara_ws, "c-1"),
    ] {
        ws.chat("roll 1d6", rid).await;
        ws.ack_for(rid).await;
    }
    // Every seat online acted: round 1 resolves.
    let started = round_started(&mut host_ws).await;
    let turn_id = started["turn_id"].as_str().unwrap().to_owned();
    host_ws.until_turn_end(&turn_id).await;
    let first = json!({"turn_id": "round_1_seat_2", "duplicate": true, "round": 1});
    let said = |ack: &Value| json!({"turn_id": ack["turn_id"], "duplicate": ack["duplicate"], "round": ack["round"]});
    let ack = again(&mut brin_ws, "roll 1d6", "b-1").await;
    assert_eq!(said(&ack), first, "before the restart: {ack}");
    server.kill9();

    let server = Server::start_with(&db, &idle);
    let (mut brin_ws, _) = server.connect(id, &brin.token, None).await;
    let ack = again(&mut brin_ws, "roll 1d6", "b-1").await;
    assert_eq!(said(&ack), first, "after kill -9: {ack}");
    let a = chat_over_http(
        server.base(),
        &cara.token,
        &json!({"session_id": id, "message": "roll 1d6", "request_id": "c-1"}),
    )
    .await;
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(
        a.body["round"], 1,
        "the action of round 1 again: {}",
        a.body
    );
    assert_eq!(a.body["duplicate"], true, "{}", a.body);

    brin_ws.close().await;
    crate::timers::not_live_here(&server, &s, "the session unloads while idle").await;
    let (mut brin_ws, _) = server.connect(id, &brin.token, None).await;
    let ack = again(&mut brin_ws, "roll 1d6", "b-1").await;
    assert_eq!(said(&ack), first, "after an idle unload: {ack}");

    // Round 2 holds no action, and the journal holds each seat's once.
    let snap = server.snapshot(&s).await;
    assert_eq!(
        (&snap["round"]["number"], &snap["round"]["acted"]),
        (&json!(2), &json!([])),
        "{}",
        snap["round"]
    );
    let journal = crate::timers::journal(&db, &s).await;
    for rid in ["h-1", "b-1", "c-1"] {
        let taken = journal
            .iter()
            .filter(|e| {
                e["effect"]["effect"] == "action_submitted"
                    && e["effect"]["action"]["request_id"] == rid
            })
            .count();
        assert_eq!(taken, 1, "{rid} taken once");
    }
    let resolved = journal
        .iter()
        .filter(|e| e["frame"]["type"] == "turn_started" && e["frame"]["round"].is_u64())
        .count();
    assert_eq!(resolved, 1, "one round resolved");
}

#[actix_web::test]
async fn a_stored_chat_keeps_its_speaker_across_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    // A slow game master keeps the host's turn running while Brin's chat
    // is taken, stored in the inbox and acknowledged.
    let server = Server::start_with(&db, &[("QUESTD_OFFLINE_LATENCY_MS", "2000")]);
    let (s, brin, _cara) = party_of_three(&server).await;
    let id = s.session_id.as_str();
    let (mut host_ws, _) = server.connect(id, &s.player_token, None).await;
    let (mut brin_ws, _) = server.connect(id, &brin.token, None).await;
    host_ws.chat("roll 1d6", "h-1").await;
    brin_ws.until(|f| f["type"] == "turn_started").await;
    brin_ws.chat("roll 1d8", "b-1").await;
    let ack = brin_ws.ack_for("b-1").await;
    assert_eq!(ack["queued"], 1, "{ack}");
    let queued_turn = ack["turn_id"].as_str().unwrap().to_owned();
    server.kill9();

    let server = Server::start(&db);
    // From the story's start: the restarted node may begin the stored
    // chat's turn before this connection's welcome, and a welcome counts
    // as seen everything up to its seq.
    let (mut ws, _) = server.connect(id, &s.spectator_token, Some(0)).await;
    let frames = ws.until_turn_end(&queued_turn).await;
    let started = frames
        .iter()
        .find(|f| f["type"] == "turn_started" && f["turn_id"] == queued_turn.as_str())
        .unwrap_or_else(|| panic!("the stored chat ran: {frames:?}"));
    assert_eq!(
        (started["seat_id"].as_str(), started["actor_id"].as_str()),
        (Some("seat_2"), Some(brin.character_id.as_str())),
        "{started}"
    );
}

/// A model that records the text of every request it gets.
fn recording(seen: Arc<Mutex<Vec<String>>>) -> ScriptedProvider {
    ScriptedProvider::from_fn(move |req, _| {
        let mut text = format!("{}\n{}", req.system, req.context);
        for m in &req.messages {
            text.push_str(&format!("\n{m:?}"));
        }
        seen.lock().unwrap().push(text);
        Ok(ModelReply::narrate("The lanterns hum."))
    })
}

#[actix_web::test]
async fn table_talk_reaches_every_connection_and_never_the_model() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model: Arc<dyn Provider> = Arc::new(recording(seen.clone()));
    let app = spawn_with(|_| {}, model).await;
    let (s, brin, cara) = party_of_three(&app).await;
    let id = s.session_id.as_str();
    let (mut host_ws, _) = app.connect(id, &s.player_token, None).await;
    let (mut brin_ws, _) = app.connect(id, &brin.token, None).await;
    let (mut cara_ws, _) = app.connect(id, &cara.token, None).await;
    let (mut watcher, _) = app.connect(id, &s.spectator_token, None).await;
    let (mut other, _) = app.connect(id, &s.spectator_token, None).await;

    brin_ws
        .send_json(
            &json!({"type": "say", "text": "the password is swordfish", "request_id": "t-1"}),
        )
        .await;
    for ws in [
        &mut host_ws,
        &mut brin_ws,
        &mut cara_ws,
        &mut watcher,
        &mut other,
    ] {
        let said = ws.until(|f| f["type"] == "party_chat").await.pop().unwrap();
        assert_eq!(
            (
                said["seat_id"].as_str(),
                said["name"].as_str(),
                said["text"].as_str()
            ),
            (
                Some("seat_2"),
                Some("Brin"),
                Some("the password is swordfish")
            )
        );
        assert!(said["seq"].is_u64(), "a story frame: {said}");
    }
    // Spectators do not talk at the table; talk has the chat's bound.
    watcher
        .send_json(&json!({"type": "say", "text": "hi", "request_id": "t-2"}))
        .await;
    let refused = watcher.until_reply().await.pop().unwrap();
    assert_eq!(
        (
            refused["error_code"].as_str(),
            refused["request_id"].as_str()
        ),
        (Some("FORBIDDEN"), Some("t-2"))
    );
    let long = "x".repeat(20_000);
    cara_ws
        .send_json(&json!({"type": "say", "text": long, "request_id": "t-3"}))
        .await;
    let refused = cara_ws.until_reply().await.pop().unwrap();
    assert_eq!(refused["error_code"], "TEXT_TOO_LONG", "{refused}");

    // Turns after it: the model never reads the table talk.
    host_ws.play("what did Brin say", "p-1").await;
    cara_ws.play("look around", "p-2").await;
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "the model was asked");
    for request in seen.iter() {
        assert!(!request.contains("swordfish"), "{request}");
    }
}

#[actix_web::test]
async fn the_offline_game_master_plays_for_whoever_speaks_in_both_languages() {
    let app = spawn_app().await;
    let (s, brin, _cara) = party_of_three(&app).await;
    let id = s.session_id.as_str();
    let (mut brin_ws, welcome) = app.connect(id, &brin.token, None).await;
    let there = neighbour(&welcome["state"]);
    let host_name = welcome["state"]["seats"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();

    // Brin goes: Brin's character moves, not the host's.
    let frames = brin_ws.play(&format!("go to {there}"), "b-go").await;
    let frames = own_turn(&frames, "b-go");
    let call = first(&frames, "tool_call");
    assert_eq!(
        (call["tool"].as_str(), call["args"]["actor_id"].as_str()),
        (Some("move"), Some(brin.character_id.as_str())),
        "{call}"
    );
    let snap = app.snapshot(&s).await;
    assert_eq!(area_of(&snap, &brin.character_id), there);
    assert_eq!(area_of(&snap, "pc_001"), position(&welcome["state"]));

    // Brin attacks: the game master reads Brin's sheet to fight.
    let frames = brin_ws.play("attack the warden", "b-attack").await;
    let frames = own_turn(&frames, "b-attack");
    let sheets: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_call" && f["tool"] == "get_character_stats")
        .collect();
    assert_eq!(
        sheets[0]["args"]["character_id"].as_str(),
        Some(brin.character_id.as_str()),
        "{sheets:?}"
    );

    // Looking shows the party and where each stands, in either language.
    let frames = brin_ws.play("look", "b-look").await;
    let frames = own_turn(&frames, "b-look");
    let reply = first(&frames, "turn_completed")["reply"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reply.contains("The party: "), "{reply}");
    assert!(
        reply.contains("Brin (here)") && reply.contains(&format!("{host_name} (at ")),
        "{reply}"
    );
    let frames = brin_ws.play("看看", "b-look-zh").await;
    let frames = own_turn(&frames, "b-look-zh");
    let reply = first(&frames, "turn_completed")["reply"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reply.contains("队伍：") && reply.contains("Brin（在这里）"),
        "{reply}"
    );
}

/// A three-player round in one language: the words each player says, and
/// how the transcript and the checks read them.
struct RoundPlay {
    lang: &'static str,
    names: [&'static str; 2],
    /// Where the two who joined walk first, in free turns.
    walk: &'static str,
    /// The host moves, Brin takes, Cara talks.
    acts: [&'static str; 3],
    /// How a seat's part of the narration begins after its name.
    colon: &'static str,
}

#[actix_web::test]
async fn a_three_player_round_is_told_by_the_offline_game_master_in_both_languages() {
    let plays = [
        RoundPlay {
            lang: "en",
            names: ["Brin", "Cara"],
            walk: "go to Lamplighter's Alcove",
            acts: [
                "go to Lamplighter's Alcove",
                "take the wicks",
                "talk to maren",
            ],
            colon: ": ",
        },
        RoundPlay {
            lang: "zh",
            names: ["布琳", "卡拉"],
            walk: "去 点灯人小室",
            acts: ["去 点灯人小室", "拿 灯芯", "和老玛伦说话"],
            colon: "：",
        },
    ];
    for play in plays {
        play_round(&play).await;
    }
}

/// Plays `p` on a fresh server over real sockets and writes what the
/// players read to its transcript.
async fn play_round(p: &RoundPlay) {
    let app = spawn_app().await;
    let s = app.demo().await;
    let code = invite(&app.base, &s, json!({"max_uses": 2})).await;
    let brin = join(&app.base, &s.session_id, &code, p.names[0]).await;
    let cara = join(&app.base, &s.session_id, &code, p.names[1]).await;
    let id = s.session_id.as_str();
    let (mut host_ws, welcome) = app.connect(id, &s.player_token, None).await;
    let (mut brin_ws, _) = app.connect(id, &brin.token, None).await;
    let (mut cara_ws, _) = app.connect(id, &cara.token, None).await;
    let host = welcome["state"]["seats"][0]["name"]
        .as_str()
        .expect("the host's name")
        .to_owned();
    let names = [host.as_str(), p.names[0], p.names[1]];
    let mut transcript =
        crate::adventure::Transcript::named(&format!("party-round-transcript-{}.txt", p.lang));
    transcript.add(&format!(
        "Players: {} (host), {}, {}\n\n",
        names[0], names[1], names[2]
    ));

    // Brin and Cara walk ahead in free turns; the host stays behind.
    for (ws, name, rid) in [
        (&mut brin_ws, names[1], "b-walk"),
        (&mut cara_ws, names[2], "c-walk"),
    ] {
        let frames = ws.play(p.walk, rid).await;
        let frames = own_turn(&frames, rid);
        let reply = first(&frames, "turn_completed")["reply"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        transcript.add(&format!("> {name}: {}\n{reply}\n\n", p.walk));
    }

    rounds(&app.base, &s, 600).await;
    transcript.add("(the host switches to rounds)\n\n");
    let players = [
        (&mut host_ws, "h-1"),
        (&mut brin_ws, "b-1"),
        (&mut cara_ws, "c-1"),
    ];
    for (i, (ws, rid)) in players.into_iter().enumerate() {
        ws.chat(p.acts[i], rid).await;
        assert_eq!(
            ws.ack_for(rid).await["round"],
            1,
            "{} acts in round 1",
            names[i]
        );
        transcript.add(&format!("> {}: {}\n", names[i], p.acts[i]));
    }
    let started = round_started(&mut host_ws).await;
    assert_eq!(
        actions(&started),
        [
            ("seat_1".to_owned(), Some(p.acts[0].to_owned())),
            ("seat_2".to_owned(), Some(p.acts[1].to_owned())),
            ("seat_3".to_owned(), Some(p.acts[2].to_owned())),
        ],
        "the round's turn lists all three actions"
    );
    let turn_id = started["turn_id"].as_str().expect("a turn").to_owned();
    let frames = host_ws.until_turn_end(&turn_id).await;
    let end = frames.last().expect("the turn's end");
    assert_eq!(end["type"], "turn_completed", "{end}");
    let reply = end["reply"].as_str().unwrap_or_default().to_owned();
    transcript.add(&format!("\n(round 1 resolves)\n{reply}\n"));

    for name in names {
        assert!(
            reply.contains(&format!("{name}{}", p.colon)),
            "the reply tells {name}'s part: {reply}"
        );
    }
    assert!(
        !reply.contains("seat_") && !reply.contains("pc_0"),
        "names, not ids: {reply}"
    );
    // Each act ran for its own seat's character.
    let call = |tool: &str| {
        frames
            .iter()
            .find(|f| f["type"] == "tool_call" && f["tool"] == tool)
            .unwrap_or_else(|| panic!("a {tool} call: {frames:?}"))
            .clone()
    };
    assert_eq!(call("move")["args"]["actor_id"], "pc_001", "the host moves");
    assert_eq!(
        call("add_inventory")["args"]["character_id"].as_str(),
        Some(brin.character_id.as_str()),
        "Brin takes"
    );
    assert_eq!(
        call("get_npc_profile")["args"]["npc_id"],
        "npc_001",
        "Cara talks to Maren"
    );
    let snap = app.snapshot(&s).await;
    assert_eq!(area_of(&snap, "pc_001"), "area_002", "the host walked in");
    let brin_carries = snap["characters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["character_id"] == brin.character_id.as_str())
        .and_then(|c| c["inventory"].as_array())
        .is_some_and(|inv| inv.iter().any(|i| i["slug"] == "wick_bundle"));
    assert!(brin_carries, "the wicks are in Brin's pack");
}
