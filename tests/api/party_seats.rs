//! Party play, the seat side (docs/protocol.md §8): invites, joining,
//! seat tokens on every route, kicks, host handover and the mode, over
//! real sockets.

use serde_json::{Value, json};

use crate::common::*;

/// `POST {base}/api/v1/sessions/{id}/{rest}` with a bearer token (or
/// none).
async fn post_as(base: &str, id: &str, rest: &str, token: Option<&str>, body: &Value) -> Answer {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let url = format!("{base}/api/v1/sessions/{id}/{rest}");
    request("POST", &url, &headers, Some(body)).await
}

/// The host of `s` makes an invite with `body`; answers its code.
async fn invite(base: &str, s: &Session, body: Value) -> String {
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
struct Joined {
    seat_id: String,
    character_id: String,
    token: String,
}

async fn join(base: &str, session_id: &str, code: &str, name: &str) -> Joined {
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
