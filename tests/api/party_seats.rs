//! Party play, the seat side (docs/protocol.md §8): invites, joining,
//! seat tokens on every route, kicks, host handover and the mode, over
//! real sockets.

use std::sync::Arc;

use questd::llm::OfflineGameMaster;
use serde_json::{Value, json};

use crate::common::*;

/// `POST {base}/api/v1/sessions/{id}/{rest}` with a bearer token (or
/// none).
pub async fn post_as(
    base: &str,
    id: &str,
    rest: &str,
    token: Option<&str>,
    body: &Value,
) -> Answer {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let url = format!("{base}/api/v1/sessions/{id}/{rest}");
    request("POST", &url, &headers, Some(body)).await
}

/// The host of `s` makes an invite with `body`; answers its code.
pub async fn invite(base: &str, s: &Session, body: Value) -> String {
    let a = post_as(base, &s.session_id, "invites", Some(&s.player_token), &body).await;
    assert_eq!(a.status, 201, "invite: {}", a.body);
    let url = a.body["join_url"].as_str().expect("join_url");
    let code = a.body["invite_code"].as_str().expect("invite_code");
    assert!(
        url.contains(&format!("join={}", s.session_id)) && url.contains(code),
        "{url}"
    );
    assert!(a.body["expires_at"].is_string(), "{}", a.body);
    code.to_owned()
}

/// Joins `session_id` with `code` under `name`: the answer.
async fn try_join(base: &str, session_id: &str, code: &str, name: &str) -> Answer {
    let body = json!({"invite_code": code, "name": name});
    post_as(base, session_id, "join", None, &body).await
}

/// A joined seat: its id, character and token.
pub struct Joined {
    pub seat_id: String,
    pub character_id: String,
    pub token: String,
}

pub async fn join(base: &str, session_id: &str, code: &str, name: &str) -> Joined {
    let a = try_join(base, session_id, code, name).await;
    assert_eq!(a.status, 201, "join as {name}: {}", a.body);
    let field = |k: &str| {
        a.body[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}"))
            .to_owned()
    };
    assert_eq!(field("session_id"), session_id);
    assert!(field("ws_url").contains(&field("player_token")));
    assert!(field("player_url").contains(&field("player_token")));
    Joined {
        seat_id: field("seat_id"),
        character_id: field("character_id"),
        token: field("player_token"),
    }
}

#[actix_web::test]
async fn players_join_by_invite_each_with_a_seat_a_character_and_a_token() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let code = invite(&app.base, &s, json!({"max_uses": 2})).await;
    let brin = join(&app.base, &s.session_id, &code, "Brin").await;
    let cara = join(&app.base, &s.session_id, &code, "Cara").await;
    assert_eq!(
        (brin.seat_id.as_str(), cara.seat_id.as_str()),
        ("seat_2", "seat_3")
    );
    assert_ne!(brin.character_id, cara.character_id);
    assert_ne!(
        brin.character_id, "pc_001",
        "the host's character is the host's"
    );
    assert_ne!(brin.token, cara.token);

    // Each welcome names its own seat and character.
    let (mut brin_ws, welcome) = app.connect(&s.session_id, &brin.token, None).await;
    assert_eq!(
        (
            welcome["role"].as_str(),
            welcome["seat_id"].as_str(),
            welcome["character_id"].as_str()
        ),
        (
            Some("player"),
            Some("seat_2"),
            Some(brin.character_id.as_str())
        ),
        "{welcome}"
    );
    let (_cara_ws, welcome) = app.connect(&s.session_id, &cara.token, None).await;
    assert_eq!(welcome["seat_id"], "seat_3", "{welcome}");
    let (_host_ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    assert_eq!(welcome["seat_id"], "seat_1", "{welcome}");
    assert_eq!(welcome["character_id"], "pc_001", "{welcome}");
    // The new characters stand with the host's, named as their players.
    let chars = welcome["state"]["characters"]
        .as_array()
        .expect("characters");
    let brin_char = chars
        .iter()
        .find(|c| c["character_id"] == brin.character_id.as_str())
        .expect("Brin's character in the snapshot");
    assert_eq!(
        (brin_char["name"].as_str(), brin_char["kind"].as_str()),
        (Some("Brin"), Some("pc"))
    );
    assert_eq!(brin_char["area_id"], "area_001");
    assert_eq!(
        (brin_char["hp"].as_i64(), brin_char["level"].as_i64()),
        (Some(10), Some(1))
    );

    // A seat plays over the WebSocket and over HTTP with its own token.
    let frames = brin_ws.play("look around", "brin-1").await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "{frames:?}"
    );
    let a = chat_over_http(
        &app.base,
        &cara.token,
        &json!({"session_id": s.session_id, "message": "look around"}),
    )
    .await;
    assert_eq!(a.status, 200, "chat as a joined seat: {}", a.body);
    let (status, snap) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some(&cara.token),
    )
    .await;
    assert_eq!(status, 200, "snapshot as a joined seat: {snap}");
}

#[actix_web::test]
async fn every_misused_invite_gets_the_same_answer() {
    // Invites may be made already expired here, so expiry is tried
    // without waiting.
    let app = spawn_offline(|s| s.min_invite_expires_s = 0).await;
    let s = app.demo().await;
    let other = app.demo().await;
    let once = invite(&app.base, &s, json!({})).await;
    join(&app.base, &s.session_id, &once, "Brin").await;
    let expired = invite(&app.base, &s, json!({"expires_in_s": 0})).await;
    let others = invite(&app.base, &other, json!({})).await;
    let cases = [
        ("used up", s.session_id.as_str(), once.as_str()),
        (
            "guessed",
            s.session_id.as_str(),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ),
        ("expired", s.session_id.as_str(), expired.as_str()),
        ("another session's", s.session_id.as_str(), others.as_str()),
    ];
    let mut answers = Vec::new();
    for (what, id, code) in cases {
        let a = try_join(&app.base, id, code, "Mallory").await;
        assert_eq!(a.status, 404, "{what}: {}", a.body);
        answers.push(a.body);
    }
    assert_eq!(answers[0]["error_code"], "INVITE_NOT_FOUND");
    assert!(
        answers.iter().all(|a| *a == answers[0]),
        "one answer for all: {answers:?}"
    );
    // The other session's invite still works there.
    join(&app.base, &other.session_id, &others, "Dara").await;
}

/// `GET …/seats` as `token`: (seat_id, role, state, online) of each seat.
async fn seat_list(base: &str, id: &str, token: &str) -> Vec<(String, String, String, bool)> {
    let (status, v) = get(&format!("{base}/api/v1/sessions/{id}/seats"), Some(token)).await;
    assert_eq!(status, 200, "seats: {v}");
    seats_of(&v)
}

fn seats_of(v: &Value) -> Vec<(String, String, String, bool)> {
    let text = |s: &Value, k: &str| s[k].as_str().unwrap_or_default().to_owned();
    v["seats"]
        .as_array()
        .unwrap_or_else(|| panic!("seats in {v}"))
        .iter()
        .map(|s| {
            (
                text(s, "seat_id"),
                text(s, "role"),
                text(s, "state"),
                s["online"].as_bool().unwrap_or_default(),
            )
        })
        .collect()
}

fn seat(id: &str, role: &str, state: &str, online: bool) -> (String, String, String, bool) {
    (id.into(), role.into(), state.into(), online)
}

#[actix_web::test]
async fn a_late_joiner_sees_the_whole_party() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let code = invite(&app.base, &s, json!({"max_uses": 2})).await;
    let brin = join(&app.base, &s.session_id, &code, "Brin").await;
    let (_brin_ws, _) = app.connect(&s.session_id, &brin.token, None).await;
    let cara = join(&app.base, &s.session_id, &code, "Cara").await;
    let (_cara_ws, welcome) = app.connect(&s.session_id, &cara.token, None).await;
    let state = &welcome["state"];
    assert_eq!(
        seats_of(state),
        vec![
            seat("seat_1", "host", "active", false),
            seat("seat_2", "player", "active", true),
            seat("seat_3", "player", "active", true),
        ],
        "{state}"
    );
    assert_eq!(state["turn_mode"], "free");
    assert_eq!(state["round"]["number"], 1);
    let names: Vec<&str> = state["characters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "pc")
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        names.contains(&"Brin") && names.contains(&"Cara"),
        "{names:?}"
    );
    // A spectator reads the same list; no token is in it.
    let listed = seat_list(&app.base, &s.session_id, &s.spectator_token).await;
    assert_eq!(listed.len(), 3);
    let (_, body) = get(
        &format!("{}/api/v1/sessions/{}/seats", app.base, s.session_id),
        Some(&s.spectator_token),
    )
    .await;
    assert!(
        !body.to_string().contains(&brin.token),
        "no token in {body}"
    );
}

/// An inline campaign of two rooms whose party holds at most `max`.
fn small_party(max: u32) -> Value {
    json!({"campaign": {
        "campaign_id": "pair",
        "title": "Pair",
        "active_actor_id": "pc_001",
        "party": {"max_players": max},
        "pc_template": {"level": 3, "max_hp": 14},
        "areas": [
            {"area_id": "area_001", "name": "Hall", "reachable_area_ids": ["area_002"]},
            {"area_id": "area_002", "name": "Side Room", "reachable_area_ids": ["area_001"]}
        ],
        "characters": [
            {"character_id": "pc_001", "name": "Ayla", "kind": "pc", "area_id": "area_002", "hp": 12, "max_hp": 12}
        ]
    }})
}

#[actix_web::test]
async fn a_full_session_refuses_the_next_player() {
    let app = spawn_app().await;
    // The campaign's own bound.
    let s = app.create_session(small_party(2)).await;
    let code = invite(&app.base, &s, json!({"max_uses": 5})).await;
    let brin = join(&app.base, &s.session_id, &code, "Brin").await;
    let a = try_join(&app.base, &s.session_id, &code, "Cara").await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (409, Some("SESSION_FULL")),
        "{}",
        a.body
    );
    // Brin's character was made from the campaign's template, with the host.
    let snap = app.snapshot(&s).await;
    let made = snap["characters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["character_id"] == brin.character_id.as_str())
        .cloned()
        .expect("Brin's character");
    assert_eq!(
        (
            made["level"].as_i64(),
            made["max_hp"].as_i64(),
            made["area_id"].as_str()
        ),
        (Some(3), Some(14), Some("area_002")),
        "{made}"
    );
    // A campaign over the bound is refused.
    let url = format!("{}/api/v1/sessions", app.base);
    let a = request(
        "POST",
        &url,
        &[("X-Internal-API-Key", TEST_KEY)],
        Some(&small_party(101)),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);

    // The node's cap over the campaign's 6.
    let app = spawn_offline(|s| s.max_players = 2).await;
    let s = app.demo().await;
    let code = invite(&app.base, &s, json!({"max_uses": 5})).await;
    join(&app.base, &s.session_id, &code, "Brin").await;
    let a = try_join(&app.base, &s.session_id, &code, "Cara").await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (409, Some("SESSION_FULL")),
        "{}",
        a.body
    );
}

#[actix_web::test]
async fn joining_is_rate_limited_per_address() {
    let app = spawn_offline(|s| {
        s.create_burst = 3;
        s.create_per_minute = 1;
    })
    .await;
    let s = app.demo().await;
    let mut answers = Vec::new();
    for i in 0..5 {
        answers.push(try_join(&app.base, &s.session_id, "guess", &format!("P{i}")).await);
    }
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, vec![404, 404, 404, 429, 429]);
    assert!(answers[3].retry_after.is_some(), "Retry-After on a 429");
}

#[actix_web::test]
async fn only_the_host_or_a_key_uses_host_powers() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let code = invite(&app.base, &s, json!({"max_uses": 2})).await;
    let brin = join(&app.base, &s.session_id, &code, "Brin").await;
    let id = s.session_id.as_str();
    let mode = json!({"turn_mode": "rounds"});
    for token in [s.spectator_token.as_str(), brin.token.as_str()] {
        for (rest, body) in [
            ("invites", json!({})),
            ("seats/seat_1/kick", json!({})),
            ("seats/seat_2/host", json!({})),
            ("mode", mode.clone()),
        ] {
            let a = post_as(&app.base, id, rest, Some(token), &body).await;
            assert_eq!(
                (a.status, a.body["error_code"].as_str()),
                (403, Some("FORBIDDEN")),
                "{rest}: {}",
                a.body
            );
        }
    }
    // Bounds.
    for (rest, body) in [
        ("invites", json!({"max_uses": 0})),
        ("invites", json!({"max_uses": 101})),
        ("invites", json!({"expires_in_s": 59})),
        ("invites", json!({"expires_in_s": 604_801})),
        ("mode", json!({"turn_mode": "rounds", "round_timeout_s": 4})),
        ("mode", json!({"turn_mode": "chaos"})),
    ] {
        let a = post_as(&app.base, id, rest, Some(&s.player_token), &body).await;
        assert_eq!(a.status, 400, "{rest} {body}: {}", a.body);
    }
    // The host switches the mode: everyone sees it.
    let (mut watcher, _) = app.connect(id, &s.spectator_token, None).await;
    let body = json!({"turn_mode": "rounds", "round_timeout_s": 30});
    let a = post_as(&app.base, id, "mode", Some(&s.player_token), &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let frames = watcher.until(|f| f["type"] == "mode_changed").await;
    let changed = frames.last().unwrap();
    assert_eq!(
        (
            changed["turn_mode"].as_str(),
            changed["round_timeout_s"].as_u64()
        ),
        (Some("rounds"), Some(30))
    );
    let snap = app.snapshot(&s).await;
    assert_eq!(
        (snap["turn_mode"].as_str(), snap["round_timeout_s"].as_u64()),
        (Some("rounds"), Some(30))
    );
}

/// A removed seat's token is refused on the WebSocket, the snapshot, the
/// actions log and a chat over HTTP.
async fn refused_everywhere(app: &TestApp, id: &str, token: &str) {
    let (base, port) = (&app.base, app.port);
    let ws = format!("ws://127.0.0.1:{port}/ws/sessions/{id}?token={token}");
    assert_eq!(Ws::refused_status(&ws).await, 401, "WebSocket");
    let (status, _) = get(&format!("{base}/api/v1/sessions/{id}"), Some(token)).await;
    assert_eq!(status, 401, "GET snapshot");
    let (status, _) = get(&format!("{base}/api/v1/sessions/{id}/actions"), Some(token)).await;
    assert_eq!(status, 401, "GET actions");
    let a = chat_over_http(base, token, &json!({"session_id": id, "message": "hi"})).await;
    assert_eq!(a.status, 401, "POST chat: {}", a.body);
}

/// A removed seat's character is still in the world.
async fn character_stays(app: &TestApp, s: &Session, character_id: &str) {
    let snap = app.snapshot(s).await;
    let characters = snap["characters"].as_array().unwrap();
    assert!(
        characters.iter().any(|c| c["character_id"] == character_id),
        "{character_id} stays in the world: {snap}"
    );
}

#[actix_web::test]
async fn a_kicked_seat_is_closed_and_refused_everywhere_even_after_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = spawn_in(dir.clone(), |_| {}, Arc::new(OfflineGameMaster::default())).await;
    let s = app.demo().await;
    let id = s.session_id.clone();
    let code = invite(&app.base, &s, json!({"max_uses": 2})).await;
    let brin = join(&app.base, &id, &code, "Brin").await;
    let cara = join(&app.base, &id, &code, "Cara").await;
    let (mut brin_ws, _) = app.connect(&id, &brin.token, None).await;
    let (mut host_ws, _) = app.connect(&id, &s.player_token, None).await;

    // The host's own seat cannot be kicked; an unknown seat is not found.
    let a = post_as(
        &app.base,
        &id,
        "seats/seat_1/kick",
        Some(&s.player_token),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(
        a.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("host"),
        "{}",
        a.body
    );
    let a = post_as(
        &app.base,
        &id,
        "seats/seat_9/kick",
        Some(&s.player_token),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.body);
    assert_eq!(a.body["message"], "no active seat seat_9");
    // A path's id past an id's bound is not echoed back.
    let long = "y".repeat(20_000);
    let a = post_as(
        &app.base,
        &id,
        &format!("seats/{long}/kick"),
        Some(&s.player_token),
        &json!({}),
    )
    .await;
    assert_eq!(
        (a.status, &a.body["message"]),
        (404, &json!("no active seat with that id"))
    );

    let a = post_as(
        &app.base,
        &id,
        "seats/seat_2/kick",
        Some(&s.player_token),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "kick: {}", a.body);
    let (frames, code) = brin_ws.frames_until_closed().await;
    assert_eq!(
        code,
        Ok(Some(4001)),
        "the kicked seat's socket closes with 4001: {frames:?}"
    );
    let frames = host_ws.until(|f| f["type"] == "seat_changed").await;
    let changed = frames.last().unwrap();
    assert_eq!(
        (changed["seat_id"].as_str(), changed["state"].as_str()),
        (Some("seat_2"), Some("kicked"))
    );

    refused_everywhere(&app, &id, &brin.token).await;
    character_stays(&app, &s, &brin.character_id).await;
    assert_eq!(
        seat_list(&app.base, &id, &s.player_token).await[1],
        seat("seat_2", "player", "kicked", false)
    );

    // After a restart: still refused; the other seats' tokens still work.
    drop((brin_ws, host_ws));
    app.stop().await;
    drop(app);
    let app = spawn_in(dir, |_| {}, Arc::new(OfflineGameMaster::default())).await;
    refused_everywhere(&app, &id, &brin.token).await;
    let (mut cara_ws, welcome) = app.connect(&id, &cara.token, None).await;
    assert_eq!(
        (
            welcome["seat_id"].as_str(),
            welcome["character_id"].as_str()
        ),
        (Some("seat_3"), Some(cara.character_id.as_str()))
    );
    let frames = cara_ws.play("look around", "cara-1").await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "{frames:?}"
    );
    let (status, _) = get(
        &format!("{}/api/v1/sessions/{id}/actions", app.base),
        Some(&cara.token),
    )
    .await;
    assert_eq!(status, 200, "a seat reads the actions log");
}

#[actix_web::test]
async fn a_seat_leaves_with_its_own_token_frees_its_place_and_stays_left_after_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let three = |s: &mut questd::Settings| s.max_players = 3;
    let app = spawn_in(dir.clone(), three, Arc::new(OfflineGameMaster::default())).await;
    let s = app.demo().await;
    let id = s.session_id.clone();
    let code = invite(&app.base, &s, json!({"max_uses": 3})).await;
    let brin = join(&app.base, &id, &code, "Brin").await;
    let cara = join(&app.base, &id, &code, "Cara").await;
    let full = try_join(&app.base, &id, &code, "Dara").await;
    assert_eq!(full.status, 409, "three seats of three: {}", full.body);
    let (mut brin_ws, _) = app.connect(&id, &brin.token, None).await;
    let (mut host_ws, _) = app.connect(&id, &s.player_token, None).await;
    let leave = |seat_id: &str, token: Option<&str>| {
        let rest = format!("seats/{seat_id}/leave");
        let (base, id, token) = (app.base.clone(), id.clone(), token.map(str::to_owned));
        async move { post_as(&base, &id, &rest, token.as_deref(), &json!({})).await }
    };

    // Only the seat's own token: not another seat's, not the host's (the
    // host kicks), not the spectator's; none at all is 401.
    for token in [&cara.token, &s.player_token, &s.spectator_token] {
        let a = leave("seat_2", Some(token)).await;
        assert_eq!(a.status, 403, "{}", a.body);
    }
    assert_eq!(leave("seat_2", None).await.status, 401);
    let a = leave("seat_1", Some(&s.player_token)).await;
    assert_eq!(
        (a.status, &a.body["message"]),
        (
            409,
            &json!("the host cannot leave; hand the host role to another seat first")
        )
    );

    let a = leave("seat_2", Some(&brin.token)).await;
    assert_eq!((a.status, &a.body), (200, &json!({"status": "ok"})));
    assert_eq!(
        brin_ws.close_frame().await,
        Some((4001, "this seat left the session".to_owned()))
    );
    let frames = host_ws.until(|f| f["type"] == "seat_changed").await;
    let changed = frames.last().unwrap();
    assert_eq!(
        (&changed["seat_id"], &changed["state"], &changed["role"]),
        (&json!("seat_2"), &json!("left"), &json!("player"))
    );
    // Its place is free: a fourth person joins a session of three.
    let dara = join(&app.base, &id, &code, "Dara").await;
    assert_eq!(dara.seat_id, "seat_4");

    refused_everywhere(&app, &id, &brin.token).await;
    let listed = seat_list(&app.base, &id, &s.player_token).await;
    assert_eq!(listed[1], seat("seat_2", "player", "left", false));
    character_stays(&app, &s, &brin.character_id).await;

    drop((brin_ws, host_ws));
    app.stop().await;
    drop(app);
    let app = spawn_in(dir, three, Arc::new(OfflineGameMaster::default())).await;
    refused_everywhere(&app, &id, &brin.token).await;
    let listed = seat_list(&app.base, &id, &cara.token).await;
    assert_eq!(listed[1], seat("seat_2", "player", "left", false));
}

#[actix_web::test]
async fn the_creators_token_reads_nothing_once_its_seat_is_kicked_even_after_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = spawn_in(dir.clone(), |_| {}, Arc::new(OfflineGameMaster::default())).await;
    let s = app.demo().await;
    let id = s.session_id.clone();
    let code = invite(&app.base, &s, json!({})).await;
    let brin = join(&app.base, &id, &code, "Brin").await;
    let none = json!({});
    let to_brin = post_as(
        &app.base,
        &id,
        "seats/seat_2/host",
        Some(&s.player_token),
        &none,
    );
    assert_eq!(to_brin.await.status, 200);
    let kicked = post_as(
        &app.base,
        &id,
        "seats/seat_1/kick",
        Some(&brin.token),
        &none,
    )
    .await;
    assert_eq!(kicked.status, 200, "{}", kicked.body);

    // Every read of what the session stored, by header and by `?token=`.
    let reads = ["", "/actions", "/audit", "/export", "/seats"];
    let statuses = |base: String, token: String| {
        let id = id.clone();
        async move {
            let mut answers = Vec::new();
            for read in reads {
                let url = format!("{base}/api/v1/sessions/{id}{read}");
                answers.push((read, "bearer", get(&url, Some(&token)).await.0));
                let query = format!("{url}?token={token}");
                answers.push((read, "query", get(&query, None).await.0));
            }
            answers
        }
    };
    let all = |status: u16| -> Vec<(&str, &str, u16)> {
        reads
            .iter()
            .flat_map(|r| [(*r, "bearer", status), (*r, "query", status)])
            .collect()
    };
    // The creator's token opens nothing; the seat it was kicked by, all.
    let each = [(s.player_token.clone(), 401), (brin.token.clone(), 200)];
    for (token, status) in each.clone() {
        assert_eq!(statuses(app.base.clone(), token).await, all(status));
    }
    app.stop().await;
    drop(app);
    let app = spawn_in(dir, |_| {}, Arc::new(OfflineGameMaster::default())).await;
    for (token, status) in each {
        assert_eq!(statuses(app.base.clone(), token).await, all(status));
    }
}

#[actix_web::test]
async fn the_host_role_is_handed_over_by_the_host_or_by_a_key() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let id = s.session_id.as_str();
    let code = invite(&app.base, &s, json!({"max_uses": 2})).await;
    let brin = join(&app.base, id, &code, "Brin").await;
    join(&app.base, id, &code, "Cara").await;
    let (mut watcher, _) = app.connect(id, &s.spectator_token, None).await;

    let a = post_as(
        &app.base,
        id,
        "seats/seat_2/host",
        Some(&s.player_token),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let frames = watcher
        .until(|f| f["type"] == "seat_changed" && f["seat_id"] == "seat_1")
        .await;
    let changes: Vec<(&str, &str)> = frames
        .iter()
        .filter(|f| f["type"] == "seat_changed")
        .map(|f| (f["seat_id"].as_str().unwrap(), f["role"].as_str().unwrap()))
        .collect();
    assert_eq!(changes, vec![("seat_2", "host"), ("seat_1", "player")]);
    // The new host invites; the old one no longer may.
    let a = post_as(&app.base, id, "invites", Some(&s.player_token), &json!({})).await;
    assert_eq!(a.status, 403, "{}", a.body);
    let a = post_as(&app.base, id, "invites", Some(&brin.token), &json!({})).await;
    assert_eq!(a.status, 201, "{}", a.body);

    // A key of the session's tenant hands it on (a host who never comes
    // back).
    let url = format!("{}/api/v1/sessions/{id}/seats/seat_3/host", app.base);
    let (status, body) = post_keyed(&url, &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let roles: Vec<(String, String)> = seat_list(&app.base, id, &s.player_token)
        .await
        .into_iter()
        .map(|(seat, role, ..)| (seat, role))
        .collect();
    assert_eq!(
        roles,
        vec![
            ("seat_1".into(), "player".into()),
            ("seat_2".into(), "player".into()),
            ("seat_3".into(), "host".into()),
        ]
    );
}

#[actix_web::test]
async fn a_name_that_hides_or_reverses_text_is_refused() {
    let app = spawn_offline(|_| {}).await;
    let s = app.demo().await;
    let code = invite(&app.base, &s, json!({"max_uses": 5})).await;
    // Looks like no name; shows what follows reversed; a tab.
    for name in ["\u{200b}", "Brin\u{202e}nhoj", "Br\tin"] {
        let a = try_join(&app.base, &s.session_id, &code, name).await;
        assert_eq!(
            (a.status, a.body["message"].as_str()),
            (
                400,
                Some(
                    "name must be 1 to 40 characters without control or invisible formatting \
                     characters"
                )
            ),
            "{name:?}: {}",
            a.body
        );
    }
    // None of them used the invite: a name in another script still joins.
    let a = try_join(&app.base, &s.session_id, &code, "می\u{200c}خواهم").await;
    assert_eq!(a.status, 201, "{}", a.body);
}
