//! Failover time of several nodes on one PostgreSQL database, as a player
//! sees it: two questd nodes, a session owned by node A, its player on node
//! B; A is killed with SIGKILL, and the player reconnects to B and chats
//! again at once. The time from the kill to that chat's `turn_completed` is
//! one sample. Prints every sample and the median and the worst.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example failover -- target/release/questd \
//!     postgres://questd:questd@127.0.0.1:5432/questd_failover 20
//! ```
//! The database must exist and be empty or questd's own.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/nodes.rs"]
mod nodes;
use nodes::{Ws, connect, create_session, start};

/// Chats and reads until the turn completes; answers the last seq seen, or
/// `None` if the connection ended first.
async fn play(ws: &mut Ws, rid: &str) -> Option<u64> {
    let chat = json!({"type": "chat", "text": "roll 1d20", "request_id": rid});
    ws.send(Message::Text(chat.to_string().into())).await.ok()?;
    let mut last = 0;
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let f: Value = serde_json::from_str(text.as_str()).ok()?;
        last = last.max(f["seq"].as_u64().unwrap_or(0));
        if f["type"] == "turn_completed" {
            return Some(last);
        }
        if f["type"] == "error" {
            return None;
        }
    }
    None
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, binary, db, rounds] = &args[..] else {
        eprintln!("usage: failover QUESTD_BINARY POSTGRES_URL ROUNDS");
        std::process::exit(2);
    };
    let rounds: usize = rounds.parse().expect("rounds");
    let http = reqwest::Client::new();
    let (_b, b_port) = start(binary, db, "node-b");
    let mut samples = Vec::new();
    for round in 0..rounds {
        let (mut a, a_port) = start(binary, db, "node-a");
        let session = create_session(&http, a_port).await;
        let mut ws = connect(b_port, &session, "player_token", 0).await;
        let mut last = play(&mut ws, &format!("r{round}-before"))
            .await
            .expect("plays through B");
        a.0.kill().expect("kill -9");
        let killed = Instant::now();
        let _ = a.0.wait();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut ws = connect(b_port, &session, "player_token", last).await;
            if let Some(seq) = play(&mut ws, &format!("r{round}-after-{attempt}")).await {
                last = seq;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = killed.elapsed();
        println!("round {round}: {} ms (seq {last})", took.as_millis());
        samples.push(took);
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "failover over {} kills: p50 {} ms, p99 {} ms, max {} ms",
        samples.len(),
        at(0.5).as_millis(),
        at(0.99).as_millis(),
        samples.last().map_or(0, |d| d.as_millis())
    );
}
