//! Connections a stranger holds open: a resume from memory past its byte
//! bound, sockets that never read what they are sent, idle plain HTTP
//! connections from one address, and a flood of frames on one WebSocket.
//! Each over real sockets, with the refusal it gets and a check that other
//! clients are served meanwhile.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use questd::llm::{ModelReply, ScriptedProvider};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::*;

/// What one joining connection may be handed at once (welcome + backlog).
const RESUME_BOUND: usize = 4 * 1024 * 1024;

/// A model whose every answer is a 32 KiB narration (the most a reply
/// keeps): a few turns make megabytes of story.
fn talkative() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_fn(|_, _| {
        Ok(ModelReply::narrate("a".repeat(40_000)))
    }))
}

/// Chats as fast as a test plays them.
fn no_chat_limit(s: &mut questd::Settings) {
    s.chat_per_minute = 100_000;
    s.chat_burst = 10_000;
}

/// A TCP connection to the server from `from` (a loopback address of its
/// own, so each test address is its own client), with a small receive
/// buffer so that a client that never reads fills it at once.
async fn tcp_from(port: u16, from: Ipv4Addr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.bind(SocketAddr::from((from, 0))).expect("bind");
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect")
}

type RawWs = WebSocketStream<TcpStream>;

/// A WebSocket from `from` to `path` (with its query), or the HTTP status
/// its upgrade was refused with (0: the connection was dropped).
async fn raw_ws(port: u16, from: Ipv4Addr, path: &str) -> Result<RawWs, u16> {
    let stream = tcp_from(port, from).await;
    let request = format!("ws://127.0.0.1:{port}{path}")
        .into_client_request()
        .expect("request");
    match tokio_tungstenite::client_async(request, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(answer)) => Err(answer.status().as_u16()),
        Err(_) => Err(0),
    }
}

fn ws_path(s: &Session, token: &str, last_seq: Option<u64>) -> String {
    let mut path = format!("/ws/sessions/{}?token={token}", s.session_id);
    if let Some(n) = last_seq {
        path.push_str(&format!("&last_seq={n}"));
    }
    path
}

/// The server's resident memory in bytes (it runs in this process).
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// The text frames a raw connection gets, with their bytes, until `quiet`
/// passes with none (or it closes).
async fn text_frames(ws: &mut RawWs, quiet: Duration) -> Vec<String> {
    let mut frames = Vec::new();
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(quiet, ws.next()).await {
        if let Message::Text(t) = msg {
            frames.push(t.to_string());
        }
    }
    frames
}

/// Plays turns until the story holds more than `bytes`; answers the
/// story's bytes (as sent) and the last seq.
async fn grow_story(ws: &mut Ws, bytes: usize, first_request: usize) -> (usize, u64) {
    let mut total = 0;
    let mut last_seq = 0;
    let mut n = first_request;
    while total <= bytes {
        n += 1;
        for f in ws.play("tell me everything", &format!("grow-{n}")).await {
            if let Some(seq) = f["seq"].as_u64().filter(|_| f["type"] != "welcome") {
                total += f.to_string().len();
                last_seq = last_seq.max(seq);
            }
        }
    }
    (total, last_seq)
}

/// What a spectator resuming after `last_seq` gets before 2 s pass with
/// nothing more: its `welcome`, and the bytes of every text frame (the
/// welcome's included).
async fn resume(app: &TestApp, s: &Session, last_seq: u64) -> (Value, Vec<String>) {
    let path = ws_path(s, &s.spectator_token, Some(last_seq));
    let mut ws = raw_ws(app.port, Ipv4Addr::LOCALHOST, &path)
        .await
        .expect("upgrade");
    let frames = text_frames(&mut ws, Duration::from_secs(2)).await;
    let welcome: Value = serde_json::from_str(&frames[0]).expect("JSON");
    assert_eq!(welcome["type"], "welcome", "the first frame");
    (welcome, frames)
}

#[actix_web::test]
async fn a_resume_from_memory_with_its_welcome_stays_within_the_bound() {
    let app = spawn_with(no_chat_limit, talkative()).await;
    let s = app.public_demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;

    // A story well within the bound resumes whole from the ring.
    let (small, _) = grow_story(&mut player, 512 * 1024, 0).await;
    let (welcome, frames) = resume(&app, &s, 0).await;
    assert_eq!(welcome["resumed"].as_bool(), Some(true));
    let got: usize = frames.iter().map(String::len).sum();
    assert!(got > small, "the whole story came back: {got} of {small}");

    // Past the bound (the ring still holds every frame: they are large),
    // the resume starts afresh and what comes at once stays within it.
    let (story, last_seq) = grow_story(&mut player, RESUME_BOUND, 1000).await;
    assert!(last_seq < 512, "the ring holds seq 1 on: {last_seq}");
    let (welcome, frames) = resume(&app, &s, 0).await;
    assert_eq!(
        welcome["resumed"].as_bool(),
        Some(false),
        "a story of {story} bytes"
    );
    assert_eq!(
        welcome["seq"].as_u64(),
        Some(last_seq),
        "the snapshot is the truth"
    );
    let got: usize = frames.iter().map(String::len).sum();
    assert!(got <= RESUME_BOUND, "{got} bytes at once");

    // A resume from a recent seq still resumes.
    let (welcome, frames) = resume(&app, &s, last_seq - 3).await;
    assert_eq!(welcome["resumed"].as_bool(), Some(true));
    assert!(
        frames.len() >= 4,
        "the three frames missed: {}",
        frames.len()
    );
}

/// Spectators of a public session, as its listing says.
async fn spectators(app: &TestApp, s: &Session) -> u64 {
    let (status, list) = get(&format!("{}/api/v1/sessions", app.base), None).await;
    assert_eq!(status, 200, "{list}");
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["session_id"] == s.session_id.as_str()))
        .and_then(|e| e["spectators"].as_u64())
        .unwrap_or(0)
}

#[actix_web::test]
async fn sockets_that_never_read_are_closed_and_hold_bounded_memory() {
    const SILENT: usize = 6;
    let from = Ipv4Addr::new(127, 0, 0, 2);
    let app = spawn_with(
        |s| {
            no_chat_limit(s);
            s.write_stall_secs = 2;
            s.max_address_connections = SILENT;
        },
        talkative(),
    )
    .await;
    let s = app.public_demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (story, _) = grow_story(&mut player, 2 * 1024 * 1024, 0).await;

    // Connections that resume the whole story and never read a byte.
    let before = rss();
    let mut silent = Vec::new();
    for _ in 0..SILENT {
        let path = ws_path(&s, &s.spectator_token, Some(0));
        silent.push(raw_ws(app.port, from, &path).await.expect("upgrade"));
    }
    // The address holds its most; one more is refused before the upgrade.
    let path = ws_path(&s, &s.spectator_token, None);
    assert_eq!(raw_ws(app.port, from, &path).await.err(), Some(429));

    // The player plays on meanwhile, and the silent ones are closed (the
    // session counts no spectator), heartbeat or not.
    let mut peak = rss();
    let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
    let mut turns = 0;
    loop {
        turns += 1;
        let frames = player.play("and then?", &format!("on-{turns}")).await;
        assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
        peak = peak.max(rss());
        if spectators(&app, &s).await == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sockets that never read are still open"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each held at most its resume and its queue on the node.
    let bound = SILENT * (RESUME_BOUND + 1024 * 1024) + 64 * 1024 * 1024;
    assert!(
        peak.saturating_sub(before) < bound,
        "{} bytes more for {SILENT} silent sockets of a {story}-byte story",
        peak.saturating_sub(before)
    );
    // Their places are free again: the address is admitted.
    let mut back = None;
    while tokio::time::Instant::now() < deadline {
        if let Ok(ws) = raw_ws(app.port, from, &path).await {
            back = Some(ws);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back.is_some(), "the address got its places back");
    drop(silent);
}

/// A plain HTTP request on `stream`: the status line's code, or `None`
/// when the server closed the connection without an answer.
async fn healthz_on(mut stream: TcpStream) -> Option<u16> {
    let head = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return None;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(FRAME_WAIT, stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server answers or closes in time");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|code| code.parse().ok())
}

#[actix_web::test]
async fn plain_http_connections_are_capped_per_address() {
    const CAP: usize = 4;
    let (crowded, other) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    let app = spawn_offline(|s| s.max_address_http_connections = CAP).await;
    // Idle sockets that never send a request hold the address's places.
    let mut idle = Vec::new();
    for _ in 0..CAP {
        idle.push(tcp_from(app.port, crowded).await);
    }
    let next = tcp_from(app.port, crowded).await;
    assert_eq!(
        healthz_on(next).await,
        None,
        "the next one is closed unanswered"
    );
    // Another address, and the host itself, are served.
    assert_eq!(healthz_on(tcp_from(app.port, other).await).await, Some(200));
    let (status, _) = get(&format!("{}/healthz", app.base), None).await;
    assert_eq!(status, 200);

    // Once they close, the address is served again.
    drop(idle);
    let deadline = tokio::time::Instant::now() + FRAME_WAIT;
    loop {
        if healthz_on(tcp_from(app.port, crowded).await).await == Some(200) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A connection that becomes a WebSocket leaves the count: more
    // WebSockets than the cap from one address are fine.
    let s = app.demo().await;
    let mut sockets = Vec::new();
    for i in 0..CAP + 2 {
        let ws = raw_ws(app.port, crowded, &ws_path(&s, &s.spectator_token, None)).await;
        sockets.push(ws.unwrap_or_else(|status| panic!("websocket {i} refused: {status}")));
    }
    assert_eq!(
        healthz_on(tcp_from(app.port, crowded).await).await,
        Some(200)
    );
}

#[actix_web::test]
async fn a_frame_flood_is_rate_limited_then_closed() {
    let app = spawn_offline(|s| {
        s.ws_frames_per_second = 5;
        s.ws_frame_burst = 10;
    })
    .await;
    let s = app.demo().await;
    let (mut flood, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut calm, _) = app.connect(&s.session_id, &s.spectator_token, None).await;

    for n in 0..400 {
        flood.send_json(&json!({"type": "ping", "nonce": n})).await;
    }
    let (frames, code) = flood.frames_until_closed().await;
    let pongs = frames.iter().filter(|f| f["type"] == "pong").count();
    let limited: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "error" && f["error_code"] == "RATE_LIMITED")
        .collect();
    assert!(
        (10..100).contains(&pongs),
        "the burst is answered, not the flood: {pongs}"
    );
    assert!(!limited.is_empty(), "the flood is told to slow down");
    assert!(limited.len() <= 3, "told once a second: {}", limited.len());
    assert_eq!(code, Ok(Some(1008)), "then closed for policy");

    // A client within the rate is not touched, and the session plays on.
    calm.send_json(&json!({"type": "ping", "nonce": "calm"}))
        .await;
    let pong = calm.until(|f| f["type"] == "pong").await;
    assert_eq!(pong.last().map(|f| f["nonce"].clone()), Some(json!("calm")));
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = player.play("look", "after-flood").await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

#[actix_web::test]
async fn a_frame_flood_through_another_node_is_limited_there_too() {
    // Two nodes of one PostgreSQL database: a player connecting to the node
    // that does not run the session is relayed to the owner, and the relay
    // answers WebSocket pings itself.
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    let db = crate::database::postgres_url_in(dir.path());
    let node = |name: &'static str| {
        let db = db.clone();
        move |s: &mut questd::Settings| {
            s.database_url = db;
            s.node_id = Some(name.into());
            s.ws_frames_per_second = 5;
            s.ws_frame_burst = 10;
        }
    };
    let offline = || Arc::new(questd::llm::OfflineGameMaster::default());
    let owner = spawn_in(dir.clone(), node("node-a"), offline()).await;
    let other = spawn_in(dir.clone(), node("node-b"), offline()).await;
    let s = owner.demo().await;

    let path = ws_path(&s, &s.player_token, None);
    let mut ws = raw_ws(other.port, Ipv4Addr::LOCALHOST, &path)
        .await
        .expect("upgrade");
    for n in 0..400u32 {
        let ping = Message::Ping(n.to_be_bytes().to_vec().into());
        if ws.send(ping).await.is_err() {
            break;
        }
    }
    let mut limited = 0;
    let mut close = None;
    let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
    while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg {
            Message::Text(t) if t.contains("RATE_LIMITED") => limited += 1,
            Message::Close(frame) => {
                close = frame.map(|f| u16::from(f.code));
                break;
            }
            _ => {}
        }
    }
    assert!(limited >= 1, "the flood is told to slow down");
    assert_eq!(close, Some(1008), "then closed for policy");
    // The session plays on, through either node.
    let (mut player, _) = other.connect(&s.session_id, &s.player_token, None).await;
    let frames = player.play("look", "after-flood").await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

/// The close code a raw connection ends with, and the text frames it got
/// before (`None` when it ended without a close frame).
async fn closed_with(ws: &mut RawWs) -> (Option<u16>, usize) {
    let mut frames = 0;
    let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
    while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, ws.next()).await {
        match msg {
            Message::Text(_) => frames += 1,
            Message::Close(frame) => return (frame.map(|f| u16::from(f.code)), frames),
            _ => {}
        }
    }
    (None, frames)
}

#[actix_web::test]
async fn joins_past_an_addresss_budget_are_closed_to_reconnect_later_while_others_join() {
    let app = spawn_with(
        |s| {
            no_chat_limit(s);
            s.join_mb_per_address = 1;
        },
        talkative(),
    )
    .await;
    let s = app.public_demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (story, _) = grow_story(&mut player, 700 * 1024, 0).await;
    let path = ws_path(&s, &s.spectator_token, Some(0));

    // One address resumes the whole story once; the next resume from it
    // within the window would hand it another 700 KB: it is closed with
    // 1013 (try again later) before a frame.
    let busy = Ipv4Addr::new(127, 0, 0, 5);
    let mut first = raw_ws(app.port, busy, &path).await.expect("upgrade");
    let frames = text_frames(&mut first, Duration::from_secs(2)).await;
    let got: usize = frames.iter().map(String::len).sum();
    assert!(
        got > story,
        "the first resume got the story: {got} of {story}"
    );
    let mut second = raw_ws(app.port, busy, &path).await.expect("upgrade");
    let (code, frames) = closed_with(&mut second).await;
    assert_eq!(code, Some(1013), "the second join from the address");
    assert_eq!(frames, 0, "it was handed nothing");

    // Another address joins meanwhile, and the player plays on.
    let mut other = raw_ws(app.port, Ipv4Addr::new(127, 0, 0, 6), &path)
        .await
        .expect("upgrade");
    let frames = text_frames(&mut other, Duration::from_secs(2)).await;
    let welcome: Value = serde_json::from_str(&frames[0]).expect("JSON");
    assert_eq!(welcome["resumed"].as_bool(), Some(true));
    let played = player.play("and then?", "after-joins").await;
    assert!(played.iter().any(|f| f["type"] == "turn_completed"));
}

#[actix_web::test]
async fn a_body_that_never_finishes_is_answered_with_a_timeout() {
    let app = spawn_offline(|_| {}).await;
    let mut stream = tcp_from(app.port, Ipv4Addr::new(127, 0, 0, 4)).await;
    // The length promises 100 bytes; 14 come, then nothing.
    let head = "POST /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"campaign_id\"";
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let waited = questd::http::body::BODY_IDLE + FRAME_WAIT;
    let read = tokio::time::timeout(waited, stream.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the request is answered and its connection closed"
    );
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(body["error_code"], "TIMEOUT", "{body}");
    // The server serves others meanwhile and after.
    let (status, _) = get(&format!("{}/healthz", app.base), None).await;
    assert_eq!(status, 200);
}
