//! Saves (docs/protocol.md §13): a played session exported and imported
//! as a new one has the same state and story and plays on; a save that
//! breaks its campaign's rules, is too large, or is newer than the server
//! is refused; only the player (or a key) may export.

use crate::common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The session's save, exported with `token` as the bearer: status, the
/// document (or error body), and the raw text.
pub async fn export(base: &str, session_id: &str, token: &str) -> (u16, Value, String) {
    let mut resp = client()
        .get(format!("{base}/api/v1/sessions/{session_id}/export"))
        .insert_header(("Authorization", format!("Bearer {token}")))
        .send()
        .await
        .expect("export sends");
    let status = resp.status().as_u16();
    if status == 200 {
        let disposition = resp
            .headers()
            .get("content-disposition")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            disposition.contains(&format!("questd-save-{session_id}.json")),
            "{disposition}"
        );
    }
    let bytes = resp.body().limit(64 * 1024 * 1024).await.expect("body");
    let text = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

/// Imports `save` without a key.
pub async fn import(base: &str, save: &Value) -> Answer {
    request(
        "POST",
        &format!("{base}/api/v1/sessions/import"),
        &[],
        Some(save),
    )
    .await
}

/// Every story frame of a session from seq 1, read by a connection
/// resuming from seq 0 with `token`, up to the welcome's seq.
async fn story_of(api: &impl Api, session_id: &str, token: &str) -> Vec<Value> {
    let (mut ws, welcome) = api.connect(session_id, token, Some(0)).await;
    let top = welcome["seq"].as_u64().expect("welcome seq");
    let mut frames = Vec::new();
    while frames
        .last()
        .and_then(|f: &Value| f["seq"].as_u64())
        .unwrap_or(0)
        < top
    {
        let f = ws.next_json().await;
        if f.get("seq").is_some() && f["type"] != "welcome" {
            frames.push(f);
        }
    }
    ws.close().await;
    frames
}

/// What a player sees of a session's world in its snapshot.
fn world(snapshot: &Value) -> Value {
    json!({
        "campaign_id": snapshot["campaign_id"],
        "turn": snapshot["turn"],
        "active_actor_id": snapshot["active_actor_id"],
        "areas": snapshot["areas"],
        "characters": snapshot["characters"],
        "allowlist": snapshot["allowlist"],
    })
}

/// Plays a few turns of the demo: a look, a move, a taking.
async fn played_demo(app: &TestApp) -> Session {
    let s = app.demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.play("look around", "r-1").await;
    let to = neighbour(&welcome["state"]);
    ws.play(&format!("go to {to}"), "r-2").await;
    ws.play("take the lamp", "r-3").await;
    ws.close().await;
    s
}

#[actix_web::test]
async fn an_exported_game_imports_as_a_new_session_with_the_same_state_and_story_and_plays_on() {
    let app = spawn_app().await;
    let s = played_demo(&app).await;
    let (status, save, text) = export(&app.base, &s.session_id, &s.player_token).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(save["questd_save"], 1);
    for secret in [&s.player_token, &s.spectator_token] {
        assert!(!text.contains(secret.as_str()), "a save holds no token");
    }
    // A presence frame may follow once the reader below joins: the save
    // is the story up to the export.
    let saved = save["story"].as_array().unwrap().clone();
    let last = saved.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(last, save["source"]["last_seq"].as_u64().unwrap());
    let story = story_of(&app, &s.session_id, &s.spectator_token).await;
    assert_eq!(&story[..saved.len()], &saved[..]);
    assert!(saved.iter().any(|f| f["type"] == "turn_completed"));

    let answer = import(&app.base, &save).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let copy = Session::created(&answer.body);
    assert_ne!(copy.session_id, s.session_id);
    assert_ne!(copy.player_token, s.player_token);
    let (original, imported) = (app.snapshot(&s).await, app.snapshot(&copy).await);
    assert_eq!(world(&imported), world(&original));
    let copied = story_of(&app, &copy.session_id, &copy.spectator_token).await;
    assert_eq!(
        &copied[..saved.len()],
        &saved[..],
        "the imported story reads from seq 0 as it was"
    );

    // Play goes on where it stopped: the next turn, after the last seq.
    let (mut ws, welcome) = app
        .connect(&copy.session_id, &copy.player_token, None)
        .await;
    assert!(welcome["seq"].as_u64() >= Some(last));
    // A request id the original used is the copy's to use again: the copy
    // is another session, and its player may number requests anew.
    ws.chat("look around", "r-1").await;
    let ack = ws.ack_for("r-1").await;
    assert_eq!(ack["duplicate"], false, "{ack}");
    let frames = ws.until_turn_end(ack["turn_id"].as_str().unwrap()).await;
    let started = first(&frames, "turn_started");
    assert!(started["seq"].as_u64() > Some(last));
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
    let after = app.snapshot(&copy).await;
    assert_eq!(
        after["turn"].as_u64(),
        original["turn"].as_u64().map(|t| t + 1)
    );
    // The original is untouched by its copy's play.
    assert_eq!(app.snapshot(&s).await["turn"], original["turn"]);

    // The copy exports in turn, and its save imports again.
    // Listed under the live sessions when asked to be.
    let (status, again, _) = export(&app.base, &copy.session_id, &copy.player_token).await;
    assert_eq!(status, 200);
    let public = request(
        "POST",
        &format!("{}/api/v1/sessions/import?visibility=public", app.base),
        &[],
        Some(&again),
    )
    .await;
    assert_eq!(public.status, 201, "{}", public.body);
    let listed = Session::created(&public.body).session_id;
    let (_, live) = get(&format!("{}/api/v1/sessions", app.base), None).await;
    let ids: Vec<&str> = live
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["session_id"].as_str())
        .collect();
    assert!(ids.contains(&listed.as_str()), "{live}");
    assert!(
        !ids.contains(&copy.session_id.as_str()),
        "private by default"
    );
}

#[actix_web::test]
async fn a_save_that_breaks_its_campaigns_rules_is_refused_with_its_problems() {
    let app = spawn_app().await;
    let s = played_demo(&app).await;
    let (_, save, _) = export(&app.base, &s.session_id, &s.player_token).await;

    let mut tampered = save.clone();
    let hero = &mut tampered["state"]["characters"][0];
    hero["hp"] = json!(hero["max_hp"].as_i64().unwrap() + 50);
    hero["area_id"] = json!("area_that_is_not");
    let answer = import(&app.base, &tampered).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.body["error_code"], "INVALID_SAVE");
    let problems = answer.body["problems"].to_string();
    assert!(problems.contains("hp above max_hp"), "{problems}");
    assert!(problems.contains("area_that_is_not"), "{problems}");

    let mut gap = save.clone();
    gap["story"].as_array_mut().unwrap().remove(1);
    let answer = import(&app.base, &gap).await;
    assert_eq!(answer.status, 400);
    assert!(
        answer.body["problems"]
            .to_string()
            .contains("without a gap"),
        "{}",
        answer.body
    );

    // The story's last frames taken out: no gap, but short of last_seq.
    let mut short = save.clone();
    let frames = short["story"].as_array_mut().unwrap();
    frames.truncate(frames.len() - 2);
    let answer = import(&app.base, &short).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.body["problems"]
            .to_string()
            .contains("but source.last_seq is"),
        "{}",
        answer.body
    );

    let mut tool = save.clone();
    tool["campaign"]["allowlist"] = json!(["move", "steal_the_server"]);
    let answer = import(&app.base, &tool).await;
    assert_eq!(answer.status, 400);
    assert!(
        answer.body["problems"]
            .to_string()
            .contains("steal_the_server")
    );

    let mut newer = save.clone();
    newer["questd_save"] = json!(2);
    let answer = import(&app.base, &newer).await;
    assert_eq!(answer.status, 400);
    assert!(
        answer.body["problems"].to_string().contains("newer"),
        "{}",
        answer.body
    );

    // What play could not have made: a timer no tool could set, a turn
    // count behind the story's turns, arguments nested past any call's.
    let refused_for = |change: &dyn Fn(&mut Value)| {
        let mut changed = save.clone();
        change(&mut changed);
        let base = app.base.clone();
        async move {
            let answer = import(&base, &changed).await;
            assert_eq!(answer.status, 400, "{}", answer.body);
            answer.body["problems"].to_string()
        }
    };
    let every_second = json!([{"timer_id": "tm_1", "event": "bells", "due_at": 0,
        "repeat_s": 1, "created_at": 0}]);
    let problems = refused_for(&|v| v["state"]["timers"] = every_second.clone()).await;
    assert!(problems.contains("/state/timers/0/repeat_s"), "{problems}");
    let problems = refused_for(&|v| v["state"]["turn"] = json!(0)).await;
    assert!(problems.contains("but the story holds turn_"), "{problems}");
    let deep = (0..70).fold(json!(1), |inner, _| json!([inner]));
    let problems = refused_for(&|v| v["story"][0]["deep"] = deep.clone()).await;
    assert!(
        problems.contains("nested deeper than 64 levels"),
        "{problems}"
    );

    // Nothing refused became a session; the untouched save still imports.
    assert_eq!(import(&app.base, &save).await.status, 201);
}

/// Sends a request head that declares `length` bytes of body and sends
/// none of them; answers the status line's code.
async fn declared_only(port: u16, path: &str, length: usize, key: bool) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let key = if key {
        format!("X-Internal-API-Key: {TEST_KEY}\r\n")
    } else {
        String::new()
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\n{key}\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 12];
    // The body never comes: only an answer given before reading it ends
    // this read.
    tokio::time::timeout(FRAME_WAIT, stream.read_exact(&mut answer))
        .await
        .expect("answered before the body was sent")
        .unwrap();
    String::from_utf8_lossy(&answer[9..12]).parse().unwrap()
}

#[actix_web::test]
async fn an_oversized_save_is_refused_before_it_is_read() {
    let app = spawn_offline(|s| {
        s.max_save_mb = 2;
        s.create_kib_burst = 1024;
    })
    .await;
    let path = "/api/v1/sessions/import";
    assert_eq!(
        declared_only(app.port, path, 3 * 1024 * 1024, true).await,
        413
    );
    // Without a key the address's campaign bytes bound it too.
    assert_eq!(declared_only(app.port, path, 1536 * 1024, false).await, 413);
    // A body past the bound that does not say its length is cut off there.
    let big = json!({"questd_save": 1, "padding": "x".repeat(2 * 1024 * 1024 + 10)});
    let mut resp = client()
        .post(format!("{}{path}", app.base))
        .insert_header(("X-Internal-API-Key", TEST_KEY))
        .insert_header(("Content-Type", "application/json"))
        .send_stream(futures_util::stream::once(async move {
            Ok::<_, std::io::Error>(actix_web::web::Bytes::from(big.to_string()))
        }))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error_code"], "PAYLOAD_TOO_LARGE");
}

#[actix_web::test]
async fn only_the_player_or_a_key_exports_a_session() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (status, body, _) = export(&app.base, &s.session_id, &s.spectator_token).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error_code"], "FORBIDDEN");
    let (status, _, _) = export(&app.base, &s.session_id, "not-a-token").await;
    assert_eq!(status, 401);
    let (status, _, _) = export(&app.base, "sess_nobody", &s.player_token).await;
    assert_eq!(status, 404);
    let keyed = request(
        "GET",
        &format!("{}/api/v1/sessions/{}/export", app.base, s.session_id),
        &[("X-Internal-API-Key", TEST_KEY)],
        None,
    )
    .await;
    assert_eq!(keyed.status, 200);
    assert_eq!(keyed.body["source"]["session_id"], s.session_id.as_str());
}

#[actix_web::test]
async fn a_save_exported_on_one_node_imports_on_another_and_plays_on_either() {
    let (_dir, db) = crate::cluster::database();
    let a = crate::cluster::node(&db, "node-a");
    let b = crate::cluster::node(&db, "node-b");
    let s = a.demo().await;
    let (mut ws, welcome) = a.connect(&s.session_id, &s.player_token, None).await;
    ws.play("look around", "r-1").await;
    ws.play(&format!("go to {}", neighbour(&welcome["state"])), "r-2")
        .await;
    ws.close().await;
    // Node B reads it from the shared database while node A owns it.
    let (status, save, text) = export(b.base(), &s.session_id, &s.player_token).await;
    assert_eq!(status, 200, "{text}");
    let answer = import(b.base(), &save).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let copy = Session::created(&answer.body);
    assert_eq!(
        world(&b.snapshot(&copy).await),
        world(&a.snapshot(&s).await)
    );
    // Node A serves the copy node B made, story and play alike.
    let saved = save["story"].as_array().unwrap();
    let copied = story_of(&a, &copy.session_id, &copy.spectator_token).await;
    assert_eq!(&copied[..saved.len()], &saved[..]);
    let (mut ws, _) = a.connect(&copy.session_id, &copy.player_token, None).await;
    let frames = ws.play("look around", "r-3").await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

#[actix_web::test]
async fn a_pending_timer_goes_with_the_save_and_fires_in_the_copy() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.play("remind me in 10 seconds to check the door", "r-1")
        .await;
    ws.close().await;
    let (status, save, _) = export(&app.base, &s.session_id, &s.player_token).await;
    assert_eq!(status, 200);
    assert_eq!(save["state"]["timers"].as_array().map(Vec::len), Some(1));
    let copy = Session::created(&import(&app.base, &save).await.body);
    let (mut watch, _) = app
        .connect(&copy.session_id, &copy.spectator_token, None)
        .await;
    let fired = watch
        .until(|f| f["type"] == "turn_started" && f["trigger"] == "timer")
        .await;
    let started = fired.last().unwrap();
    assert_eq!(started["event"], save["state"]["timers"][0]["event"]);
    let end = watch
        .until_turn_end(started["turn_id"].as_str().unwrap())
        .await;
    assert!(
        end.iter()
            .any(|f| f["type"] == "turn_completed" && f["reply"].to_string().contains("door")),
        "{end:#?}"
    );
}

#[actix_web::test]
async fn a_story_longer_than_a_page_of_the_export_comes_whole_and_in_order() {
    let app = spawn_offline(|s| {
        s.chat_burst = 1000;
        s.chat_per_minute = 100_000;
    })
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    // The export reads the story 500 frames at a time: this one needs two
    // pages and a part of a third.
    let mut last = 0;
    let mut i = 0;
    while last <= 1100 {
        let frames = ws.play("look around", &format!("r-{i}")).await;
        last = first(&frames, "turn_completed")["seq"].as_u64().unwrap();
        i += 1;
    }
    ws.close().await;
    let (status, save, text) = export(&app.base, &s.session_id, &s.player_token).await;
    assert_eq!(
        status,
        200,
        "the save is one JSON document: {}",
        text.get(..200).unwrap_or(&text)
    );
    let seqs: Vec<u64> = save["story"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["seq"].as_u64().unwrap())
        .collect();
    let top = save["source"]["last_seq"].as_u64().unwrap();
    assert!(top >= last);
    assert_eq!(seqs, (1..=top).collect::<Vec<_>>());
    assert_eq!(import(&app.base, &save).await.status, 201);
}
