//! The journal tail's lag, as clients see it: two questd nodes on one
//! PostgreSQL database; each session runs on node A with its player there,
//! and has a spectator on node B, which B serves by tailing the journal.
//! Every story frame reaches the player from A's memory right after its
//! commit and the spectator from B's read of the journal; one sample is
//! the time between the two arrivals of one frame (one process, one
//! clock). Prints the samples' median, 99th percentile and worst, and the
//! turns played.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example tail_lag -- target/release/questd \
//!     postgres://questd:questd@127.0.0.1:5432/questd_tail 20 20
//! ```
//! (sessions, turns per session). The database must exist and be empty or
//! questd's own.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/nodes.rs"]
mod nodes;
use nodes::{Ws, connect, create_session, start};

/// When each story frame (by seq) arrived.
type Arrivals = HashMap<u64, Instant>;

/// The next JSON text frame, with when it arrived.
async fn next(ws: &mut Ws) -> Option<(Value, Instant)> {
    while let Some(Ok(msg)) = ws.next().await {
        if let Message::Text(text) = msg {
            let at = Instant::now();
            return serde_json::from_str(text.as_str()).ok().map(|f| (f, at));
        }
    }
    None
}

/// Plays `turns` turns; answers when each story frame arrived and the last
/// seq.
async fn play(mut ws: Ws, turns: usize) -> (Arrivals, u64) {
    let mut seen = Arrivals::new();
    let mut last = 0;
    for turn in 0..turns {
        let chat = json!({"type": "chat", "text": "roll 1d20", "request_id": format!("t{turn}")});
        ws.send(Message::Text(chat.to_string().into()))
            .await
            .expect("chat sent");
        loop {
            let (f, at) = next(&mut ws).await.expect("the player's connection stays");
            if let Some(seq) = f["seq"].as_u64().filter(|_| f["type"] != "welcome") {
                seen.insert(seq, at);
                last = last.max(seq);
            }
            match f["type"].as_str() {
                Some("turn_completed") => break,
                Some("error") | Some("turn_failed") => panic!("the turn failed: {f}"),
                _ => {}
            }
        }
    }
    (seen, last)
}

/// Reads the spectator's frames until seq `until`; answers when each
/// arrived.
async fn watch(mut ws: Ws, until: tokio::sync::oneshot::Receiver<u64>) -> Arrivals {
    let mut seen = Arrivals::new();
    let mut until = until;
    let mut last_seq = None;
    loop {
        if let Ok(last) = until.try_recv() {
            last_seq = Some(last);
        }
        if last_seq.is_some_and(|last| seen.contains_key(&last)) {
            return seen;
        }
        let Ok(Some((f, at))) =
            tokio::time::timeout(Duration::from_millis(200), next(&mut ws)).await
        else {
            continue;
        };
        if let Some(seq) = f["seq"].as_u64().filter(|_| f["type"] != "welcome") {
            seen.entry(seq).or_insert(at);
        }
    }
}

/// `sessions` sessions on A, each with a spectator on B, play `turns`
/// turns at once; answers every frame's lag in ms (B's arrival minus A's).
async fn round(
    http: &reqwest::Client,
    (a_port, b_port): (u16, u16),
    sessions: usize,
    turns: usize,
) -> Vec<f64> {
    let mut runs = Vec::new();
    for _ in 0..sessions {
        let session = create_session(http, a_port).await;
        let mut spectator = connect(b_port, &session, "spectator_token", 0).await;
        let (welcome, _) = next(&mut spectator).await.expect("welcome");
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        let player = connect(a_port, &session, "player_token", 0).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let watching = tokio::spawn(watch(spectator, rx));
        let playing = tokio::spawn(async move {
            let (seen, last) = play(player, turns).await;
            let _ = tx.send(last);
            seen
        });
        runs.push((playing, watching));
    }
    let mut lags: Vec<f64> = Vec::new();
    for (playing, watching) in runs {
        let on_a = playing.await.expect("played");
        let on_b = watching.await.expect("watched");
        for (seq, at_a) in &on_a {
            let Some(at_b) = on_b.get(seq) else {
                let mut got: Vec<_> = on_b.keys().collect();
                got.sort();
                panic!("the spectator missed seq {seq}; it saw {got:?}");
            };
            let lag = if at_b >= at_a {
                at_b.duration_since(*at_a).as_secs_f64()
            } else {
                -at_a.duration_since(*at_b).as_secs_f64()
            };
            lags.push(lag * 1000.0);
        }
    }
    lags
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, binary, db, sessions, turns] = &args[..] else {
        eprintln!("usage: tail_lag QUESTD_BINARY POSTGRES_URL SESSIONS TURNS");
        std::process::exit(2);
    };
    let sessions: usize = sessions.parse().expect("sessions");
    let turns: usize = turns.parse().expect("turns");
    let http = reqwest::Client::new();
    let (_a, a_port) = start(binary, db, "node-a");
    let (_b, b_port) = start(binary, db, "node-b");
    // A first round opens and warms the nodes' database connections (a
    // fresh PostgreSQL backend's first queries load its caches); only the
    // second is measured.
    round(&http, (a_port, b_port), sessions, turns.min(5)).await;
    let started = Instant::now();
    let mut lags = round(&http, (a_port, b_port), sessions, turns).await;
    let took = started.elapsed();
    let metrics = http
        .get(format!("http://127.0.0.1:{b_port}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    for line in metrics.lines() {
        if line.starts_with("questd_journal_tail_lag_seconds") {
            println!("node B: {line}");
        }
    }
    lags.sort_by(f64::total_cmp);
    let at = |q: f64| lags[((lags.len() - 1) as f64 * q).round() as usize];
    println!(
        "{sessions} sessions x {turns} turns in {:.1} s; {} frames: tail lag p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        took.as_secs_f64(),
        lags.len(),
        at(0.5),
        at(0.99),
        lags.last().copied().unwrap_or_default()
    );
}
