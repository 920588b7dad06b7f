//! What a turn costs as one session grows: a questd node on a fresh SQLite
//! database, one demo session whose player plays, over and over, `explore`
//! (which adds areas next to where they stand), `go to` an area they have
//! not been to yet, and `where can I go then roll 1d20`, one turn after
//! another. Every `EVERY` turns it prints the session's areas, the median
//! and worst turn (chat sent to `turn_completed`) of those turns, and how
//! much the database grew per turn over them.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example growth -- target/release/questd 600 100
//! ```
//! (turns, EVERY).

use std::path::Path;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/nodes.rs"]
mod nodes;
use nodes::{Ws, connect, create_session, start};

/// Plays one turn; answers when it completed, after how long.
async fn turn(ws: &mut Ws, text: &str, rid: &str) -> f64 {
    let chat = json!({"type": "chat", "text": text, "request_id": rid});
    let sent = Instant::now();
    ws.send(Message::Text(chat.to_string().into()))
        .await
        .expect("chat sent");
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let f: Value = serde_json::from_str(text.as_str()).expect("JSON");
        match f["type"].as_str() {
            Some("turn_completed") => return sent.elapsed().as_secs_f64() * 1000.0,
            Some("turn_failed") | Some("error") => panic!("the turn failed: {f}"),
            _ => {}
        }
    }
    panic!("the connection ended");
}

/// Bytes process `pid` has caused to be written to storage.
fn written_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes: "))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The session's stored state: its snapshot and chunks, in bytes, and the
/// journal rows after the snapshot.
fn stored_state(db: &Path, session_id: &str) -> (u64, u64) {
    let conn = rusqlite::Connection::open(db).expect("the database opens");
    // (0 where a table is missing: a server from before snapshots in pieces.)
    let query = |sql: &str| -> u64 {
        conn.query_row(sql, [session_id], |r| r.get::<_, i64>(0))
            .unwrap_or(0) as u64
    };
    let bytes = query("SELECT length(state) FROM snapshots WHERE session_id = ?1")
        + query("SELECT COALESCE(SUM(length(body)), 0) FROM snapshot_chunks WHERE session_id = ?1");
    let rows = query(
        "SELECT COUNT(*) FROM journal WHERE session_id = ?1 \
         AND seq > (SELECT seq FROM snapshots WHERE session_id = ?1)",
    );
    (bytes, rows)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, binary, turns, every] = &args[..] else {
        eprintln!("usage: growth QUESTD_BINARY TURNS EVERY");
        std::process::exit(2);
    };
    let turns: usize = turns.parse().expect("turns");
    let every: usize = every.parse().expect("every");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let db = dir.path().join("growth.db");
    let url = format!("sqlite://{}", db.display());
    let (node, port) = start(binary, &url, "growth");
    let pid = node.0.id();
    let http = reqwest::Client::new();
    let session = create_session(&http, port).await;
    let snapshot_url = format!(
        "http://127.0.0.1:{port}/api/v1/sessions/{}",
        session["session_id"].as_str().expect("id")
    );
    let token = session["player_token"].as_str().expect("token").to_owned();
    let mut ws = connect(port, &session, "player_token", 0).await;
    let session_id = session["session_id"].as_str().expect("id").to_owned();
    println!("| turns | areas | median turn ms | worst turn ms | KB written per turn | state KB |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let snapshot = || async {
        http.get(&snapshot_url)
            .bearer_auth(&token)
            .send()
            .await
            .expect("snapshot")
            .json::<Value>()
            .await
            .expect("snapshot JSON")
    };
    let mut visited = std::collections::HashSet::new();
    let mut times = Vec::with_capacity(every);
    let mut bytes_before = written_bytes(pid);
    for n in 1..=turns {
        let text = match n % 3 {
            1 => "explore".to_owned(),
            2 => {
                // An area next to the player they have not stood in yet
                // (the last one explore made, most often).
                let state = snapshot().await;
                let here = state["characters"][0]["area_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                visited.insert(here.clone());
                let areas = state["areas"].as_array().cloned().unwrap_or_default();
                let next = areas
                    .iter()
                    .find(|a| a["area_id"] == here.as_str())
                    .and_then(|a| a["reachable_area_ids"].as_array())
                    .and_then(|ids| {
                        ids.iter()
                            .rev()
                            .filter_map(Value::as_str)
                            .find(|id| !visited.contains(*id))
                    })
                    .and_then(|id| areas.iter().find(|a| a["area_id"] == id))
                    .and_then(|a| a["name"].as_str())
                    .unwrap_or("nowhere")
                    .to_owned();
                format!("go to {next}")
            }
            _ => "where can I go then roll 1d20".to_owned(),
        };
        times.push(turn(&mut ws, &text, &format!("t{n}")).await);
        if n % every == 0 {
            let state = snapshot().await;
            let areas = state["areas"].as_array().map_or(0, Vec::len);
            times.sort_by(f64::total_cmp);
            let bytes = written_bytes(pid);
            let (state_bytes, _) = stored_state(&db, &session_id);
            println!(
                "| {n} | {areas} | {:.2} | {:.2} | {:.1} | {:.0} |",
                times[times.len() / 2],
                times.last().copied().unwrap_or_default(),
                (bytes.saturating_sub(bytes_before)) as f64 / 1024.0 / every as f64,
                state_bytes as f64 / 1024.0,
            );
            bytes_before = bytes;
            times.clear();
        }
    }
    // A crash, then the session loaded again by the next server.
    drop(ws);
    drop(node);
    let (state_bytes, rows) = stored_state(&db, &session_id);
    let (_node, port) = start(binary, &url, "growth");
    let began = Instant::now();
    let loaded = http
        .get(format!(
            "http://127.0.0.1:{port}/api/v1/sessions/{session_id}"
        ))
        .bearer_auth(&token)
        .send()
        .await
        .expect("the session loads");
    assert!(loaded.status().is_success(), "{}", loaded.status());
    println!(
        "\nafter SIGKILL: the session loaded in {:.1} ms ({:.0} KB of stored state, \
         {rows} journal rows replayed)",
        began.elapsed().as_secs_f64() * 1000.0,
        state_bytes as f64 / 1024.0
    );
}
