//! WebSocket and HTTP edges: limits, bad input, resume, auth.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::common::*;
use actix_http::ws::Item;
use awc::ws;
use questd::llm::{ModelReply, OfflineGameMaster, ScriptedProvider};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[actix_web::test]
async fn a_flood_is_rate_limited_and_no_accepted_turn_is_lost() {
    let app = spawn_with(
        |s| {
            s.chat_burst = 3;
            s.chat_per_minute = 60;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    for i in 0..12 {
        ws.chat(&format!("roll 1d{}", 4 + i), &format!("r-{i}"))
            .await;
    }
    let mut accepted = BTreeSet::new();
    let mut limited = 0;
    let mut replies = 0;
    let mut ended = BTreeSet::new();
    while replies < 12 || !accepted.is_subset(&ended) {
        let f = ws.next_json().await;
        match f["type"].as_str().unwrap() {
            "ack" => {
                replies += 1;
                assert_eq!(f["duplicate"], false);
                accepted.insert(f["turn_id"].as_str().unwrap().to_owned());
            }
            "error" => {
                replies += 1;
                assert_eq!(f["error_code"], "RATE_LIMITED", "{f}");
                assert!(f["retry_after_ms"].as_u64().unwrap() > 0, "{f}");
                assert!(
                    f["request_id"].is_string(),
                    "the error names the request: {f}"
                );
                limited += 1;
            }
            "turn_completed" => {
                ended.insert(f["turn_id"].as_str().unwrap().to_owned());
            }
            "turn_failed" => panic!("no accepted turn may fail: {f}"),
            _ => {}
        }
    }
    assert!(accepted.len() >= 3, "the burst is accepted: {accepted:?}");
    assert!(limited >= 1, "the flood is limited");
    assert_eq!(accepted.len() + limited, 12);
    assert_eq!(ended, accepted, "every accepted turn completed");
    assert_eq!(
        app.actions(&s).await.len(),
        accepted.len(),
        "one roll per accepted turn"
    );
}

#[actix_web::test]
async fn a_duplicate_request_id_runs_once() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.chat("roll 1d6", "same").await;
    ws.chat("roll 1d6", "same").await;
    let mut acks = Vec::new();
    let mut frames = Vec::new();
    while acks.len() < 2 {
        let f = ws.next_json().await;
        if f["type"] == "ack" {
            acks.push(f);
        } else {
            frames.push(f);
        }
    }
    assert_eq!(acks[0]["duplicate"], false);
    assert_eq!(acks[1]["duplicate"], true);
    assert_eq!(acks[0]["turn_id"], acks[1]["turn_id"]);
    let turn = acks[0]["turn_id"].as_str().unwrap().to_owned();
    if !frames.iter().any(|f| f["type"] == "turn_completed") {
        frames.extend(ws.until_turn_end(&turn).await);
    }
    // Play one more turn so anything run twice would have shown by now.
    frames.extend(ws.play("roll 1d4", "other").await);
    let started: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "turn_started")
        .collect();
    assert_eq!(started.len(), 2, "{started:#?}");
    let rolls: Vec<Value> = app.actions(&s).await;
    assert_eq!(rolls.len(), 2);
    assert_eq!(rolls[0]["args"]["dice"], "1d6");
}

#[actix_web::test]
async fn spectators_cannot_chat() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.spectator_token, None).await;
    assert_eq!(welcome["role"], "spectator");
    ws.chat("go to area_002", "r-1").await;
    let reply = ws.until_reply().await.pop().unwrap();
    assert_eq!(reply["error_code"], "FORBIDDEN");
    assert_eq!(reply["request_id"], "r-1");
    assert_eq!(app.snapshot(&s).await["turn"], 0);
}

#[actix_web::test]
async fn garbage_frames_are_invalid_and_the_connection_lives_on() {
    let app = spawn_with(
        |s| s.max_text_chars = 50,
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let garbage = [
        "not json",
        "",
        "[1,2,3]",
        "{}",
        r#"{"type":42}"#,
        r#"{"type":"dance"}"#,
        r#"{"type":"chat"}"#,
        r#"{"type":"chat","text":7}"#,
        r#"{"type":"chat","text":"hi","request_id":{"a":1}}"#,
        r#"{"type":"chat","text":"   "}"#,
        "{\"type\":\"chat\",\"text\":\"\u{0}\"",
    ];
    for g in garbage {
        ws.send_text(g).await;
        let f = ws.until_reply().await.pop().unwrap();
        assert_eq!(f["error_code"], "INVALID_FRAME", "{g:?} -> {f}");
    }
    ws.send_binary(&[0, 159, 146, 150]).await;
    let f = ws.until_reply().await.pop().unwrap();
    assert_eq!(f["error_code"], "INVALID_FRAME");

    ws.chat(&"x".repeat(51), "long").await;
    let f = ws.until_reply().await.pop().unwrap();
    assert_eq!(
        (f["error_code"].as_str(), f["request_id"].as_str()),
        (Some("TEXT_TOO_LONG"), Some("long"))
    );

    ws.send_json(&json!({"type": "ping", "nonce": 42})).await;
    let pong = ws.until(|f| f["type"] == "pong").await.pop().unwrap();
    assert_eq!(pong["nonce"], 42);
    let frames = ws.play("roll 1d6", "r-ok").await;
    assert_eq!(
        first(&frames, "tool_result")["status"],
        "ok",
        "still playable"
    );
}

#[actix_web::test]
async fn a_reconnecting_client_resumes_from_last_seq() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    assert_eq!(welcome["resumed"], false);
    let target = neighbour(&welcome["state"]);
    let frames = story(&ws.play(&format!("go to {target}"), "r-1").await);
    ws.close().await;
    // Resume from the middle of the turn just played.
    let cut = frames[2]["seq"].as_u64().unwrap();
    let (mut again, welcome) = app.connect(&s.session_id, &s.player_token, Some(cut)).await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    let mut replayed = Vec::new();
    for _ in frames.iter().filter(|f| f["seq"].as_u64().unwrap() > cut) {
        replayed.push(again.next_json().await);
    }
    let expected: Vec<&Value> = frames
        .iter()
        .filter(|f| f["seq"].as_u64().unwrap() > cut)
        .collect();
    assert_eq!(
        replayed.iter().collect::<Vec<_>>(),
        expected,
        "the same frames, in order"
    );
    assert_eq!(position(&welcome["state"]), target);
    // A seq the server never sent cannot be resumed from.
    let (_, welcome) = app
        .connect(&s.session_id, &s.player_token, Some(1_000_000))
        .await;
    assert_eq!(welcome["resumed"], false);
}

#[actix_web::test]
async fn a_client_resuming_from_before_the_ring_is_served_from_the_journal() {
    let app = spawn_offline(|s| {
        s.chat_burst = 1000;
        s.chat_per_minute = 1_000_000;
    })
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    // More story than the in-memory resume ring holds (512 frames).
    let mut seen: Vec<Value> = Vec::new();
    let mut turn = 0;
    while seen.last().and_then(|f| f["seq"].as_u64()).unwrap_or(0) < 700 {
        turn += 1;
        seen.extend(story(&ws.play("roll 1d20", &format!("r-{turn}")).await));
    }
    let top = seen.last().unwrap()["seq"].as_u64().unwrap();
    // A spectator from the very start gets every frame, as the player saw
    // them, from the journal and then the ring.
    let (mut reader, welcome) = app
        .connect(&s.session_id, &s.spectator_token, Some(0))
        .await;
    assert_eq!(welcome["resumed"], true, "{}", welcome["seq"]);
    let mut replayed: Vec<Value> = Vec::new();
    while replayed.len() < top as usize {
        replayed.push(reader.next_json().await);
    }
    let seqs: Vec<u64> = replayed
        .iter()
        .map(|f| f["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=top).collect::<Vec<_>>());
    let played: Vec<&Value> = replayed
        .iter()
        .filter(|f| f["type"] != "presence")
        .filter(|f| seen.iter().any(|p| p["seq"] == f["seq"]))
        .collect();
    let expected: Vec<&Value> = seen.iter().filter(|f| f["type"] != "presence").collect();
    assert_eq!(played, expected, "the same frames the player saw");
}

#[actix_web::test]
async fn bad_token_and_unknown_session_are_refused_before_the_upgrade() {
    let app = spawn_app().await;
    let s = app.demo().await;
    assert_eq!(
        Ws::refused_status(&app.ws_url(&s.session_id, "wrong", None)).await,
        401
    );
    assert_eq!(
        Ws::refused_status(&app.ws_url("sess_nope", &s.player_token, None)).await,
        404
    );
    let (status, body) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some("wrong"),
    )
    .await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    let (status, _) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        None,
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = get(
        &format!("{}/api/v1/sessions/sess_nope/actions", app.base),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (404, Some("NOT_FOUND"))
    );
    // The spectator token reads the snapshot too.
    let (status, snap) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some(&s.spectator_token),
    )
    .await;
    assert_eq!(
        (status, snap["session_id"].as_str()),
        (200, Some(s.session_id.as_str()))
    );
}

/// The public sessions' listing (it answers 200) and its entry for
/// `session_id`.
async fn listed(app: &TestApp, session_id: &str) -> (Value, Value) {
    let (status, list) = get(&format!("{}/api/v1/sessions", app.base), None).await;
    assert_eq!(status, 200, "{list}");
    let mine = list
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["session_id"] == session_id)
        .cloned()
        .unwrap_or_else(|| panic!("{session_id} is not listed: {list}"));
    (list, mine)
}

#[actix_web::test]
async fn http_api_basics() {
    let app = spawn_app().await;
    assert_eq!(
        get(&format!("{}/healthz", app.base), None).await,
        (200, json!({"status": "ok", "node_id": TEST_NODE}))
    );
    let (status, campaigns) = get(&format!("{}/api/v1/campaigns", app.base), None).await;
    assert_eq!(status, 200);
    assert!(
        campaigns
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["campaign_id"] == "demo" && c["title"].is_string())
    );
    // With its Chinese title for a Chinese lobby.
    let demo = campaigns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["campaign_id"] == "demo")
        .unwrap();
    assert_eq!(demo["title_zh"], "沉没的灯笼", "{demo}");
    assert!(
        demo["description_zh"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );

    let s = app.public_demo().await;
    let private = app.demo().await;
    assert!(s.ws_url.starts_with("ws://") && s.ws_url.contains(&s.session_id));
    let snap = app.snapshot(&s).await;
    for key in [
        "session_id",
        "campaign_id",
        "turn",
        "active_actor_id",
        "areas",
        "characters",
        "allowlist",
    ] {
        assert!(snap.get(key).is_some(), "snapshot has {key}");
    }
    assert!(snap["areas"].as_array().unwrap().len() >= 8);

    let (list, mine) = listed(&app, &s.session_id).await;
    assert_eq!(
        (mine["players"].as_u64(), mine["turns"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(mine["spectator_token"], s.spectator_token.as_str());
    let watch = mine["watch_url"].as_str().unwrap();
    assert!(
        watch.ends_with(&format!(
            "/?session={}&token={}",
            s.session_id, s.spectator_token
        )),
        "{watch}"
    );
    // The listing follows play: who is connected, and the turns played.
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (_spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    player.play("roll 1d6", "list-1").await;
    let (_, mine) = listed(&app, &s.session_id).await;
    assert_eq!(
        (&mine["players"], &mine["spectators"], &mine["turns"]),
        (&json!(1), &json!(1), &json!(1)),
        "{mine}"
    );
    let text = list.to_string();
    assert!(
        !text.contains(&private.session_id) && !text.contains(&s.player_token),
        "private sessions and player tokens are never listed: {text}"
    );
    // Another tenant's list needs that tenant's key; with the internal key
    // acting for it, it holds none of `default`'s sessions.
    let other_tenant = request(
        "GET",
        &format!("{}/api/v1/sessions", app.base),
        &[("X-Tenant-ID", "acme")],
        None,
    )
    .await;
    assert_eq!(other_tenant.status, 401, "{}", other_tenant.body);
    let other_tenant = request(
        "GET",
        &format!("{}/api/v1/sessions", app.base),
        &[("X-Tenant-ID", "acme"), ("X-Internal-API-Key", TEST_KEY)],
        None,
    )
    .await;
    assert_eq!(
        other_tenant.body,
        json!([]),
        "tenants see only their own sessions"
    );
    let (status, _) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(status, 200);
    let resp = client()
        .get(format!("{}/api/v1/sessions/{}", app.base, s.session_id))
        .insert_header(("Authorization", format!("Bearer {}", s.player_token)))
        .insert_header(("X-Tenant-ID", "acme"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        404,
        "another tenant's session looks unknown"
    );

    let mut page = client().get(format!("{}/", app.base)).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let content_type = page
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let html = page.body().await.unwrap();
    assert!(
        String::from_utf8_lossy(&html).contains("app.js"),
        "the client page is served"
    );
}

#[actix_web::test]
async fn bad_campaigns_are_refused_with_every_problem() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/sessions", app.base);
    let (status, body) = post(&url, &json!({"campaign": {"campaign_id": "x", "title": "X", "allowlist": ["move", "teleport"],
        "active_actor_id": "ghost",
        "areas": [{"area_id": "a1", "name": "A", "reachable_area_ids": ["a9"]}],
        "characters": [{"character_id": "pc", "name": "P", "kind": "pc", "area_id": "a1", "hp": 5, "max_hp": 5}]}}))
    .await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (400, Some("INVALID_CAMPAIGN"))
    );
    let problems = body["problems"].as_array().unwrap();
    let text = serde_json::to_string(problems).unwrap();
    for word in ["teleport", "ghost", "a9"] {
        assert!(text.contains(word), "{word} in {text}");
    }
    for bad in [
        json!({}),
        json!({"campaign_id": "nope"}),
        json!({"campaign_id": 5}),
        json!({"campaign": {"title": 1}}),
    ] {
        let (status, body) = post(&url, &bad).await;
        assert_eq!(status, 400, "{bad} -> {body}");
        assert!(body["message"].is_string());
    }
    let mut resp = client()
        .post(&url)
        .insert_header(("content-type", "application/json"))
        .send_body("{not json")
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error_code"], "BAD_REQUEST");
    let huge = format!("{{\"campaign_id\":\"{}\"}}", "x".repeat(2 * 1024 * 1024));
    let resp = client()
        .post(&url)
        .insert_header(("content-type", "application/json"))
        .send_body(huge)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
}

#[actix_web::test]
async fn the_actions_log_pages_oldest_first() {
    let app = spawn_with(
        |s| s.chat_burst = 10,
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    for i in 0..5 {
        ws.play(&format!("roll 1d{}", 4 + i), &format!("r-{i}"))
            .await;
    }
    let url = |after: u64| {
        format!(
            "{}/api/v1/sessions/{}/actions?after_seq={after}&limit=2",
            app.base, s.session_id
        )
    };
    let mut after = 0;
    let mut all = Vec::new();
    loop {
        let (status, page) = get(&url(after), Some(&s.player_token)).await;
        assert_eq!(status, 200);
        all.extend(page["actions"].as_array().unwrap().clone());
        match page["next_after_seq"].as_u64() {
            Some(n) => after = n,
            None => break,
        }
        assert!(all.len() <= 5);
    }
    let exprs: Vec<&str> = all
        .iter()
        .map(|a| a["args"]["dice"].as_str().unwrap())
        .collect();
    assert_eq!(exprs, ["1d4", "1d5", "1d6", "1d7", "1d8"]);
    for a in &all {
        for key in [
            "seq",
            "turn_id",
            "call_id",
            "tool",
            "args",
            "status",
            "result",
            "timestamp",
        ] {
            assert!(a.get(key).is_some(), "{key} in {a}");
        }
    }
    let (status, _) = get(
        &format!(
            "{}/api/v1/sessions/{}/actions?after_seq=-1",
            app.base, s.session_id
        ),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(status, 400);
}

/// A WebSocket client that upgrades, then reads nothing until told to; its
/// receive buffer is tiny so the server's backlog shows quickly.
struct StalledClient {
    stream: tokio::net::TcpStream,
}

impl StalledClient {
    async fn connect(port: u16, path: &str) -> Self {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        socket.connect(&addr.into()).unwrap();
        socket.set_nonblocking(true).unwrap();
        let mut stream = tokio::net::TcpStream::from_std(socket.into()).unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        Self { stream }
    }

    /// Reads everything until the server hangs up; returns the close code.
    async fn close_code(mut self) -> Option<u16> {
        let mut bytes = Vec::new();
        tokio::time::timeout(FRAME_WAIT, self.stream.read_to_end(&mut bytes))
            .await
            .ok()?
            .ok()?;
        let mut at = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let mut code = None;
        // Server frames are unmasked: opcode, length (7, 16 or 64 bit), payload.
        while at + 2 <= bytes.len() {
            let opcode = bytes[at] & 0x0f;
            let (len, header) = match bytes[at + 1] & 0x7f {
                126 => (
                    u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize,
                    4,
                ),
                127 => (
                    u64::from_be_bytes(bytes[at + 2..at + 10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n as usize, 2),
            };
            let payload =
                &bytes[(at + header).min(bytes.len())..(at + header + len).min(bytes.len())];
            if opcode == 0x8 && payload.len() >= 2 {
                code = Some(u16::from_be_bytes([payload[0], payload[1]]));
            }
            at += header + len;
        }
        code
    }
}

#[actix_web::test]
async fn a_crowd_joining_is_told_in_a_few_presence_frames() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut player, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    // The player's own join is told at once.
    let first = player.next_json().await;
    assert_eq!(
        (&first["type"], &first["seq"], &first["players"]),
        (
            &json!("presence"),
            &json!(welcome["seq"].as_u64().unwrap() + 1),
            &json!(1)
        )
    );
    let crowd = 30;
    let joins = (0..crowd).map(|_| app.connect(&s.session_id, &s.spectator_token, None));
    let _spectators = futures_util::future::join_all(joins).await;
    let seen = player
        .until(|f| f["type"] == "presence" && f["spectators"] == crowd)
        .await;
    let presence = seen.iter().filter(|f| f["type"] == "presence").count();
    assert!(
        presence < crowd,
        "{presence} presence frames for {crowd} joins"
    );
    // Seq stays whole: every frame the player got is the next one.
    let seqs: Vec<u64> = std::iter::once(&first)
        .chain(&seen)
        .filter_map(|f| f["seq"].as_u64())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[actix_web::test]
async fn a_subscriber_that_stops_reading_is_dropped_and_told_to_resume() {
    let app = spawn_with(
        |s| {
            s.ws_queue = 8;
            s.chat_burst = 100_000;
        },
        // Long narratives fill the stalled connection's buffers quickly.
        Arc::new(ScriptedProvider::from_fn(|_, n| {
            Ok(ModelReply::narrate(format!(
                "{n} {}",
                "A long tale. ".repeat(5000)
            )))
        })),
    )
    .await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    // This spectator upgrades, then reads nothing.
    let slow = StalledClient::connect(
        app.port,
        &format!("/ws/sessions/{}?token={}", s.session_id, s.spectator_token),
    )
    .await;
    player
        .until(|f| f["type"] == "presence" && f["spectators"] == 1)
        .await;
    let dropped = play_until_presence(&mut player, "spectators", 0).await;
    assert!(
        dropped,
        "the slow spectator was dropped while the player played on"
    );
    assert_eq!(
        slow.close_code().await,
        Some(1013),
        "told to reconnect and resume"
    );
    // And it can come back.
    let (_, welcome) = app
        .connect(&s.session_id, &s.spectator_token, Some(1))
        .await;
    assert_eq!(welcome["role"], "spectator");
}

/// Plays long tales (none may fail) until a `presence` frame says the
/// session's `who` count is `count`; answers whether one did within
/// 2,000 turns.
async fn play_until_presence(player: &mut Ws, who: &str, count: u64) -> bool {
    for i in 0..2000 {
        let frames = player.play("tell me a story", &format!("r-{i}")).await;
        assert!(frames.iter().all(|f| f["type"] != "turn_failed"));
        if frames
            .iter()
            .any(|f| f["type"] == "presence" && f[who] == count)
        {
            return true;
        }
    }
    false
}

#[actix_web::test]
async fn a_relayed_player_that_stops_reading_is_dropped_and_told_to_resume() {
    // Two nodes of one PostgreSQL database: the node without the session
    // relays a player's connection to the owner, and reads the owner's
    // frames whatever its client takes, so it bounds what waits there.
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    let db = crate::database::postgres_url_in(dir.path());
    let node = |name: &'static str| {
        let db = db.clone();
        move |s: &mut questd::Settings| {
            s.database_url = db;
            s.node_id = Some(name.into());
            s.ws_queue = 8;
            s.chat_burst = 100_000;
        }
    };
    let tales = || {
        Arc::new(ScriptedProvider::from_fn(|_, n| {
            Ok(ModelReply::narrate(format!(
                "{n} {}",
                "A long tale. ".repeat(5000)
            )))
        }))
    };
    let owner = spawn_in(dir.clone(), node("node-a"), tales()).await;
    let other = spawn_in(dir.clone(), node("node-b"), tales()).await;
    let s = owner.demo().await;
    let (mut player, _) = owner.connect(&s.session_id, &s.player_token, None).await;
    // The same player through the other node upgrades, then reads nothing.
    let slow = StalledClient::connect(
        other.port,
        &format!("/ws/sessions/{}?token={}", s.session_id, s.player_token),
    )
    .await;
    player
        .until(|f| f["type"] == "presence" && f["players"] == 2)
        .await;
    let dropped = play_until_presence(&mut player, "players", 1).await;
    assert!(
        dropped,
        "the stalled relayed player was dropped while the other played on"
    );
    assert_eq!(
        slow.close_code().await,
        Some(1013),
        "told to reconnect and resume"
    );
}

#[actix_web::test]
async fn a_message_over_64_kib_is_refused_and_the_connection_plays_on() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let huge = json!({"type": "chat", "text": "x".repeat(100 * 1024), "request_id": "r-0"});
    ws.send_json(&huge).await;
    let refused = ws.until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(refused["error_code"], "TEXT_TOO_LONG", "{refused}");
    // The same in three fragments of 30,000 bytes.
    let piece = || bytes::Bytes::from("y".repeat(30_000));
    for item in [
        Item::FirstText(piece()),
        Item::Continue(piece()),
        Item::Last(piece()),
    ] {
        ws.send_message(ws::Message::Continuation(item)).await;
    }
    let refused = ws.until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(refused["error_code"], "TEXT_TOO_LONG", "{refused}");
    // Neither was read as a chat, and the connection plays on.
    let frames = ws.play("roll 1d6", "r-1").await;
    assert_eq!(first(&frames, "turn_started")["request_id"], "r-1");
    assert_eq!(first(&frames, "tool_result")["status"], "ok");
    let (_, snapshot) = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(snapshot["turn"], 1, "only the one chat ran");
}

#[actix_web::test]
async fn unknown_routes_answer_json_404() {
    let app = spawn_app().await;
    let (status, body) = get(&format!("{}/api/v1/nothing", app.base), None).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (404, Some("NOT_FOUND"))
    );
}

#[actix_web::test]
async fn the_ack_of_a_chat_comes_before_every_frame_of_its_turn() {
    let app = spawn_with(
        |s| {
            s.chat_burst = 100;
            s.max_queued_turns = 100;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    // Many chats at once, so acks and earlier turns' frames interleave.
    let n = 30;
    for i in 0..n {
        ws.chat("roll 1d20", &format!("o-{i}")).await;
    }
    let mut acked = std::collections::HashSet::new();
    let mut ended = 0;
    while ended < n {
        let f = ws.next_json().await;
        match f["type"].as_str() {
            Some("ack") => {
                acked.insert(f["request_id"].as_str().unwrap().to_owned());
            }
            Some("turn_started") => {
                let rid = f["request_id"].as_str().unwrap();
                assert!(acked.contains(rid), "turn_started of {rid} before its ack");
            }
            Some("turn_completed" | "turn_failed") => ended += 1,
            _ => {}
        }
    }
    assert_eq!(acked.len(), n);
}

#[actix_web::test]
async fn players_and_spectators_on_several_workers_play_and_resume() {
    // Sessions run round robin on the workers' threads, and each
    // connection lands on whichever worker accepted it: a player's is
    // moved to its session's thread, a spectator's stays.
    let app = spawn_offline(|s| s.http_workers = Some(3)).await;
    for i in 0..6 {
        let s = app.demo().await;
        let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
        let (mut watcher, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
        let played = story(&player.play("roll 1d20", &format!("r-{i}")).await);
        let started = played
            .iter()
            .find(|f| f["type"] == "turn_started")
            .expect("the turn started");
        let turn_id = started["turn_id"].as_str().unwrap().to_owned();
        let of_turn = |frames: &[Value]| -> Vec<Value> {
            frames
                .iter()
                .filter(|f| f["turn_id"] == turn_id.as_str())
                .cloned()
                .collect()
        };
        let watched = watcher.until_turn_end(&turn_id).await;
        assert_eq!(
            of_turn(&watched),
            of_turn(&played),
            "session {i}: the spectator saw the turn"
        );
        // The player reconnects (to any worker) and resumes where it was.
        player.close().await;
        let cut = started["seq"].as_u64().unwrap();
        let (mut again, welcome) = app.connect(&s.session_id, &s.player_token, Some(cut)).await;
        assert_eq!(welcome["resumed"], true, "session {i}: {welcome}");
        for frame in played.iter().filter(|f| f["seq"].as_u64() > Some(cut)) {
            assert_eq!(&again.next_json().await, frame, "session {i}");
        }
        let next = story(&again.play("roll 1d6", &format!("r-{i}-2")).await);
        assert_eq!(next.last().unwrap()["type"], "turn_completed", "{next:?}");
    }
    app.stop().await;
}
