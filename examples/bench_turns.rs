//! Turn throughput against a running questd with the offline game master.
//!
//! Each session gets one player (and optional spectators) that plays turns
//! back to back: alternately `go to <neighbour>` (a durable move) and
//! `roll 1d20`. Prints turns per second and turn latency percentiles.
//!
//! ```text
//! QUESTD_CHAT_PER_MINUTE=100000 QUESTD_CHAT_BURST=100000 QUESTD_INTERNAL_API_KEY=bench \
//!   cargo run --release &
//! cargo run --release --example bench_turns -- --sessions 50 --turns 20 --api-key bench
//! ```

use std::time::{Duration, Instant};

use awc::ws;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

struct Args {
    url: String,
    /// Where sessions are created (the node that runs them); players and
    /// spectators connect to `url`. Default: `url`.
    create_url: Option<String>,
    sessions: usize,
    turns: usize,
    spectators: usize,
    /// Sent when creating sessions, past the per-address creation limit.
    api_key: Option<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        url: "http://127.0.0.1:8080".into(),
        create_url: None,
        sessions: 10,
        turns: 20,
        spectators: 0,
        api_key: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--url" => args.url = value,
            "--create-url" => args.create_url = Some(value),
            "--sessions" => args.sessions = value.parse().expect("--sessions N"),
            "--turns" => args.turns = value.parse().expect("--turns N"),
            "--spectators" => args.spectators = value.parse().expect("--spectators N"),
            "--api-key" => args.api_key = Some(value),
            other => {
                panic!(
                    "unknown flag {other}; use --url --create-url --sessions --turns --spectators --api-key"
                )
            }
        }
    }
    args
}

type Conn = actix_codec::Framed<awc::BoxedSocket, ws::Codec>;

async fn next_json(conn: &mut Conn) -> Value {
    loop {
        match conn.next().await.expect("connection open").expect("frame") {
            ws::Frame::Text(b) => return serde_json::from_slice(&b).expect("JSON frame"),
            ws::Frame::Ping(p) => conn.send(ws::Message::Pong(p)).await.expect("pong"),
            ws::Frame::Close(r) => panic!("closed: {r:?}"),
            _ => {}
        }
    }
}

/// Plays one session; returns each turn's latency in milliseconds.
async fn play(args: &Args, n: usize) -> Vec<f64> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let create_url = args.create_url.as_deref().unwrap_or(&args.url);
    let mut create = client.post(format!("{create_url}/api/v1/sessions"));
    if let Some(key) = &args.api_key {
        create = create.insert_header(("X-Internal-API-Key", key.as_str()));
    }
    let created: Value = create
        .send_json(&json!({"campaign_id": "demo"}))
        .await
        .expect("create session")
        .json()
        .await
        .expect("session JSON");
    let ws_base = args.url.replacen("http", "ws", 1);
    let id = created["session_id"].as_str().expect("session_id");
    let connect = |token: &str| {
        let url = format!("{ws_base}/ws/sessions/{id}?token={token}");
        let client = client.clone();
        async move {
            client
                .ws(url)
                .max_frame_size(1 << 24)
                .connect()
                .await
                .expect("websocket")
                .1
        }
    };
    let mut player = connect(created["player_token"].as_str().expect("token")).await;
    let welcome = next_json(&mut player).await;
    let mut spectators = Vec::new();
    for _ in 0..args.spectators {
        let mut s = connect(created["spectator_token"].as_str().expect("token")).await;
        next_json(&mut s).await;
        spectators.push(actix_web::rt::spawn(async move {
            // Spectators read until the session is done with them.
            while let Some(Ok(_)) = s.next().await {}
        }));
    }
    let state = &welcome["state"];
    let start = state["characters"][0]["area_id"]
        .as_str()
        .expect("area")
        .to_owned();
    let other = state["areas"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["area_id"] == start.as_str()))
        .and_then(|a| a["reachable_area_ids"][0].as_str())
        .expect("a neighbour")
        .to_owned();
    let mut latencies = Vec::with_capacity(args.turns);
    for t in 0..args.turns {
        let text = match t % 2 {
            0 => format!("go to {}", if t % 4 == 0 { &other } else { &start }),
            _ => "roll 1d20".to_owned(),
        };
        let began = Instant::now();
        let frame = json!({"type": "chat", "text": text, "request_id": format!("s{n}-t{t}")});
        player
            .send(ws::Message::Text(frame.to_string().into()))
            .await
            .expect("send");
        loop {
            let f = next_json(&mut player).await;
            match f["type"].as_str() {
                Some("turn_completed") => break,
                Some("turn_failed") | Some("error") => panic!("turn failed: {f}"),
                _ => {}
            }
        }
        latencies.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    for s in spectators {
        s.abort();
    }
    latencies
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[actix_web::main]
async fn main() {
    let args = std::sync::Arc::new(parse_args());
    let began = Instant::now();
    let tasks: Vec<_> = (0..args.sessions)
        .map(|n| {
            let args = args.clone();
            actix_web::rt::spawn(async move { play(&args, n).await })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("session task"));
    }
    let secs = began.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{}",
        json!({
            "sessions": args.sessions,
            "spectators_per_session": args.spectators,
            "turns": all.len(),
            "duration_s": (secs * 100.0).round() / 100.0,
            "turns_per_s": ((all.len() as f64 / secs) * 10.0).round() / 10.0,
            "turn_latency_ms": {
                "p50": (percentile(&all, 0.5) * 10.0).round() / 10.0,
                "p90": (percentile(&all, 0.9) * 10.0).round() / 10.0,
                "p99": (percentile(&all, 0.99) * 10.0).round() / 10.0,
                "max": (all.last().copied().unwrap_or(0.0) * 10.0).round() / 10.0,
            }
        })
    );
}
