//! Party seats on several nodes (docs/protocol.md §8): two questd
//! processes on one PostgreSQL database, the session owned by node A. Only
//! A knows the seats; B hands every seat's request and connection to A, so
//! a seat's token works, and a kicked seat's is refused, on both.

use crate::cluster::{database, node};
use crate::common::*;
use serde_json::{Value, json};

/// `POST {base}/api/v1/sessions/{id}/{rest}` with a bearer token.
async fn post_as(api: &impl Api, id: &str, rest: &str, token: &str, body: &Value) -> Answer {
    let auth = format!("Bearer {token}");
    let url = format!("{}/api/v1/sessions/{id}/{rest}", api.base());
    request(
        "POST",
        &url,
        &[("Authorization", auth.as_str())],
        Some(body),
    )
    .await
}

/// Joins through `api`: (seat_id, player_token). The seat's links point
/// at the node the client asked, whichever node runs the session.
async fn join(api: &impl Api, id: &str, code: &str, name: &str) -> (String, String) {
    let url = format!("{}/api/v1/sessions/{id}/join", api.base());
    let body = json!({"invite_code": code, "name": name});
    let a = request("POST", &url, &[], Some(&body)).await;
    assert_eq!(a.status, 201, "join as {name}: {}", a.body);
    let field = |k: &str| a.body[k].as_str().unwrap_or_default().to_owned();
    let ws_base = api.base().replacen("http", "ws", 1);
    assert!(
        field("ws_url").starts_with(&format!("{ws_base}/ws/")),
        "{}",
        a.body
    );
    assert!(
        field("player_url").starts_with(&format!("{}/?", api.base())),
        "{}",
        a.body
    );
    (field("seat_id"), field("player_token"))
}

#[actix_web::test]
async fn a_seat_plays_through_either_node_and_a_kicked_or_left_one_is_refused_on_both() {
    let (_dir, db) = database();
    let (a, b) = (node(&db, "node-a"), node(&db, "node-b"));
    let s = a.demo().await;
    let id = s.session_id.as_str();
    // The host invites through B; the seats join through either node.
    let made = post_as(&b, id, "invites", &s.player_token, &json!({"max_uses": 2})).await;
    assert_eq!(made.status, 201, "invite through B: {}", made.body);
    let join_url = made.body["join_url"].as_str().unwrap_or_default();
    assert!(
        join_url.starts_with(&format!("{}/?join=", b.base())),
        "{}",
        made.body
    );
    let code = made.body["invite_code"].as_str().unwrap().to_owned();
    let (brin_seat, brin) = join(&b, id, &code, "Brin").await;
    let (cara_seat, cara) = join(&a, id, &code, "Cara").await;
    assert_eq!(
        (brin_seat.as_str(), cara_seat.as_str()),
        ("seat_2", "seat_3")
    );

    // Brin connects to B (relayed to A) and plays.
    let (mut brin_ws, welcome) = b.connect(id, &brin, None).await;
    assert_eq!(welcome["seat_id"], "seat_2", "{welcome}");
    let frames = brin_ws.play("look around", "brin-1").await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "{frames:?}"
    );
    // Cara chats over HTTP through B and reads through B.
    let chat = json!({"session_id": id, "message": "look around"});
    let turn = chat_over_http(b.base(), &cara, &chat).await;
    assert_eq!(turn.status, 200, "chat through B: {}", turn.body);
    for rest in ["", "/seats", "/actions"] {
        let (status, body) = get(
            &format!("{}/api/v1/sessions/{id}{rest}", b.base()),
            Some(&cara),
        )
        .await;
        assert_eq!(status, 200, "GET {rest} through B: {body}");
    }

    // A spectator B serves from its tail sees the whole party (online as
    // the owner's last presence said).
    let (_watcher, welcome) = b.connect(id, &s.spectator_token, None).await;
    let seats: Vec<(&str, bool)> = welcome["state"]["seats"]
        .as_array()
        .unwrap_or_else(|| panic!("seats in {welcome}"))
        .iter()
        .map(|s| {
            (
                s["seat_id"].as_str().unwrap_or_default(),
                s["online"].is_boolean(),
            )
        })
        .collect();
    assert_eq!(
        seats,
        vec![("seat_1", true), ("seat_2", true), ("seat_3", true)]
    );

    // The host kicks Cara through B: refused on both nodes from then on.
    let kicked = post_as(&b, id, "seats/seat_3/kick", &s.player_token, &json!({})).await;
    assert_eq!(kicked.status, 200, "kick through B: {}", kicked.body);
    for api in [a.base(), b.base()] {
        let port = api.rsplit(':').next().unwrap();
        let ws = format!("ws://127.0.0.1:{port}/ws/sessions/{id}?token={cara}");
        assert_eq!(Ws::refused_status(&ws).await, 401, "WebSocket on {api}");
        let (status, _) = get(&format!("{api}/api/v1/sessions/{id}"), Some(&cara)).await;
        assert_eq!(status, 401, "GET snapshot on {api}");
        let turn = chat_over_http(api, &cara, &chat).await;
        assert_eq!(turn.status, 401, "POST chat on {api}: {}", turn.body);
    }
    // Brin still plays through B.
    let frames = brin_ws.play("look around", "brin-2").await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "{frames:?}"
    );

    // Brin leaves through B: its socket, relayed by B, is closed with the
    // owner's code and reason, and its token is refused on both nodes.
    let left = post_as(&b, id, "seats/seat_2/leave", &brin, &json!({})).await;
    assert_eq!(left.status, 200, "leave through B: {}", left.body);
    assert_eq!(
        brin_ws.close_frame().await,
        Some((4001, "this seat left the session".to_owned()))
    );
    for api in [a.base(), b.base()] {
        let (status, _) = get(&format!("{api}/api/v1/sessions/{id}"), Some(&brin)).await;
        assert_eq!(status, 401, "GET snapshot on {api}");
    }
    let (status, v) = get(
        &format!("{}/api/v1/sessions/{id}/seats", a.base()),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["seats"][1]["state"], "left", "{v}");
}
