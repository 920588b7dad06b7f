//! What a turn costs as one session grows: a questd node on a fresh SQLite
//! database, one demo session whose player plays, over and over, `explore`
//! (which adds areas next to where they stand), `go to` an area they have
//! not been to yet, and `where can I go then roll 1d20`, one turn after
//! another. The player learns the map from the welcome and each turn's
//! `state_patch`, so the server does nothing but the turns.
//!
//! Every `EVERY` turns it prints the session's areas, the median and worst
//! turn (chat sent to `turn_completed`) of those turns, the server's CPU
//! time per turn over them (every thread), how many bytes the server wrote
//! to files per turn over them (`wchar` of `/proc/PID/io`: the WAL, its
//! checkpoints into the database, and its log lines; sends on sockets are
//! not in it), and the size of the session's state as stored (its
//! snapshot's manifest and chunks). At the end it kills the server
//! (`SIGKILL`), starts another on the same database and times the
//! session's load: its snapshot read and the journal rows after it
//! replayed.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example growth -- target/release/questd 900 150
//! ```
//! (turns, EVERY).

use std::path::Path;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/nodes.rs"]
mod nodes;
use nodes::{Ws, connect, create_session, start};

/// The next JSON text frame.
async fn next_frame(ws: &mut Ws) -> Value {
    while let Some(Ok(msg)) = ws.next().await {
        if let Message::Text(text) = msg {
            return serde_json::from_str(text.as_str()).expect("JSON");
        }
    }
    panic!("the connection ended");
}

/// Plays one turn; answers after how long it completed, and its
/// `turn_completed` frame.
async fn turn(ws: &mut Ws, text: &str, rid: &str) -> (f64, Value) {
    let chat = json!({"type": "chat", "text": text, "request_id": rid});
    let sent = Instant::now();
    ws.send(Message::Text(chat.to_string().into()))
        .await
        .expect("chat sent");
    loop {
        let f = next_frame(ws).await;
        match f["type"].as_str() {
            Some("turn_completed") => return (sent.elapsed().as_secs_f64() * 1000.0, f),
            Some("turn_failed") | Some("error") => panic!("the turn failed: {f}"),
            _ => {}
        }
    }
}

/// The map as the player knows it: the welcome's areas, then every area a
/// turn's `state_patch` names; and where the player stands.
struct Map {
    areas: std::collections::HashMap<String, Value>,
    here: String,
}

impl Map {
    fn learn(&mut self, areas: &Value) {
        for area in areas.as_array().into_iter().flatten() {
            if let Some(id) = area["area_id"].as_str() {
                self.areas.insert(id.to_owned(), area.clone());
            }
        }
    }
}

/// Bytes process `pid` has handed to `write` and `pwrite` calls (not to
/// socket sends). Not `write_bytes`, what the kernel counts as sent to
/// storage: on ext4, a file's pages written over in place and synced with
/// `fdatasync` count there 1–2 MB a sync whatever was written, while the
/// disk takes what was written (the WAL, made ready at start and written
/// over since, counted about 0.5 MB a turn; BENCHMARKS.md, "What
/// `write_bytes` counts since the WAL is made ready at start").
fn written_bytes(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar: "))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The session's stored state: its snapshot and chunks, in bytes, and the
/// journal frames after the snapshot (a session from a shared start has
/// no snapshot row before its first snapshot: the start is its snapshot,
/// at seq 0).
fn stored_state(db: &Path, session_id: &str) -> (u64, u64) {
    let conn = rusqlite::Connection::open(db).expect("the database opens");
    // (0 where a table is missing: a server from before snapshots in pieces.)
    let query = |sql: &str| -> u64 {
        conn.query_row(sql, [session_id], |r| r.get::<_, i64>(0))
            .unwrap_or(0) as u64
    };
    let bytes = query("SELECT length(state) FROM snapshots WHERE session_id = ?1")
        + query("SELECT COALESCE(SUM(length(body)), 0) FROM snapshot_chunks WHERE session_id = ?1");
    // The journal stores steps of frames (first and last seq each).
    let rows = query(
        "SELECT COALESCE(SUM(j.last_seq - MAX(j.seq - 1, s.seq)), 0) FROM journal j, \
         (SELECT COALESCE((SELECT seq FROM snapshots WHERE session_id = ?1), 0) AS seq) s \
         WHERE j.session_id = ?1 AND j.last_seq > s.seq",
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
    let pid = node.0.id().to_string();
    let http = reqwest::Client::new();
    let session = create_session(&http, port).await;
    let token = session["player_token"].as_str().expect("token").to_owned();
    let mut ws = connect(port, &session, "player_token", 0).await;
    // The map comes from the frames, so the server does no work for the
    // driver between turns and its CPU is the turns'.
    let welcome = next_frame(&mut ws).await;
    let mut map = Map {
        areas: Default::default(),
        here: welcome["state"]["characters"][0]["area_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    map.learn(&welcome["state"]["areas"]);
    let session_id = session["session_id"].as_str().expect("id").to_owned();
    println!(
        "| turns | areas | median turn ms | worst turn ms | server CPU ms per turn | KB written per turn | state KB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut visited = std::collections::HashSet::new();
    let mut times = Vec::with_capacity(every);
    let mut bytes_before = written_bytes(&pid);
    let mut cpu_before = cpu::cpu_ns(&pid);
    for n in 1..=turns {
        let text = match n % 3 {
            1 => "explore".to_owned(),
            2 => {
                // An area next to the player they have not stood in yet
                // (the last one explore made, most often).
                visited.insert(map.here.clone());
                let next = map
                    .areas
                    .get(&map.here)
                    .and_then(|a| a["reachable_area_ids"].as_array())
                    .and_then(|ids| {
                        ids.iter()
                            .rev()
                            .filter_map(Value::as_str)
                            .find(|id| !visited.contains(*id))
                    })
                    .and_then(|id| map.areas.get(id))
                    .and_then(|a| a["name"].as_str())
                    .unwrap_or("nowhere")
                    .to_owned();
                format!("go to {next}")
            }
            _ => "where can I go then roll 1d20".to_owned(),
        };
        let (ms, completed) = turn(&mut ws, &text, &format!("t{n}")).await;
        times.push(ms);
        map.learn(&completed["state_patch"]["areas"]);
        if let Some(here) = completed["state_patch"]["position"]["area_id"].as_str() {
            map.here = here.to_owned();
        }
        if n % every == 0 {
            times.sort_by(f64::total_cmp);
            let (bytes, cpu_now) = (written_bytes(&pid), cpu::cpu_ns(&pid));
            let (state_bytes, _) = stored_state(&db, &session_id);
            println!(
                "| {n} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} |",
                map.areas.len(),
                times[times.len() / 2],
                times.last().copied().unwrap_or_default(),
                (cpu_now - cpu_before) as f64 / 1e6 / every as f64,
                (bytes.saturating_sub(bytes_before)) as f64 / 1024.0 / every as f64,
                state_bytes as f64 / 1024.0,
            );
            bytes_before = bytes;
            cpu_before = cpu_now;
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
