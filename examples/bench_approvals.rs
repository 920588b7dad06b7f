//! Approval of tool calls at scale, through the real API on a real node.
//!
//! Every session is a demo session created with the rule
//! `{"tools":["add_inventory"],"timeout_s":3600}`; its player chats `take
//! the lamp` over `POST /api/v1/chat`, and the offline game master's
//! `add_inventory` call pauses the turn (`202`, `approval_required`).
//!
//! `restart`: `SESSIONS` sessions, each with a pending approval; the node
//! is killed with SIGKILL and started again. Prints the time from the
//! restart until the node listens and until every session's
//! `GET /api/v1/sessions/{id}` lists its pending approval again (the GET
//! loads the session: nothing else would before the approvals time out).
//!
//! `decide`: `SESSIONS` sessions, each with a pending approval, decided one
//! after another (`http`: the player's `POST …/approvals/{approval_id}`;
//! `ws`: an `approve` frame on the player's WebSocket). Prints the p50/p99
//! of the time from sending the decision until the call's `tool_result`
//! frame arrives on the player's WebSocket (and, over HTTP, until the
//! `200`).
//!
//! ```sh
//! cargo build --release && cargo build --release --example bench_approvals
//! # Sessions created with a key are limited per tenant; lift them.
//! export QUESTD_KEY_CREATE_PER_MINUTE=1000000 QUESTD_KEY_CREATE_BURST=100000 \
//!     QUESTD_MAX_SESSIONS_PER_TENANT=100000
//! B=target/release/examples/bench_approvals Q=target/release/questd
//! $B $Q sqlite:///tmp/ba.db restart 1000
//! $B $Q postgres://questd:questd@127.0.0.1:5432/questd_approvals restart 1000
//! $B $Q sqlite:///tmp/bd.db decide 500 http
//! $B $Q sqlite:///tmp/bd.db decide 500 ws
//! ```
//! The database must be new or questd's own.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/nodes.rs"]
#[allow(dead_code)]
mod nodes;
use nodes::{Ws, connect, create_session_with, start, start_on};

/// Requests in flight at once.
const CONCURRENCY: usize = 64;

/// A session whose turn waits for a decision.
struct Paused {
    /// The create answer (its id and tokens).
    session: Value,
    /// The `approval` of the chat's `202`.
    approval: Value,
    /// The seq of its `approval_requested` frame.
    seq: u64,
}

impl Paused {
    fn id(&self) -> &str {
        self.session["session_id"].as_str().unwrap_or_default()
    }

    fn token(&self) -> &str {
        self.session["player_token"].as_str().unwrap_or_default()
    }
}

/// Creates `n` sessions with the approval rule on the node at `port` and
/// pauses a turn in each.
async fn paused_sessions(http: &reqwest::Client, port: u16, n: usize) -> Vec<Paused> {
    let body = json!({
        "campaign_id": "demo",
        "approval": {"tools": ["add_inventory"], "timeout_s": 3600},
    });
    futures_util::stream::iter(0..n)
        .map(|i| {
            let body = &body;
            async move {
                let session = create_session_with(http, port, body).await;
                let Some(id) = session["session_id"].as_str() else {
                    panic!("session {i} not created: {session}");
                };
                let token = session["player_token"].as_str().expect("player token");
                let answer = http
                    .post(format!("http://127.0.0.1:{port}/api/v1/chat"))
                    .bearer_auth(token)
                    .json(&json!({"session_id": id, "message": "take the lamp"}))
                    .send()
                    .await
                    .expect("chat");
                let status = answer.status().as_u16();
                let answer: Value = answer.json().await.expect("chat answer");
                assert_eq!(
                    (status, answer["status"].as_str()),
                    (202, Some("approval_required")),
                    "the chat of session {i} pauses: {answer}"
                );
                Paused {
                    approval: answer["approval"].clone(),
                    seq: answer["seq"].as_u64().expect("seq"),
                    session,
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// The approval ids `GET /api/v1/sessions/{id}` lists as pending.
async fn pending(http: &reqwest::Client, port: u16, s: &Paused) -> Option<Vec<String>> {
    let snapshot: Value = http
        .get(format!(
            "http://127.0.0.1:{port}/api/v1/sessions/{}",
            s.id()
        ))
        .bearer_auth(s.token())
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let list = snapshot["pending_approvals"].as_array()?;
    Some(
        list.iter()
            .filter_map(|a| a["approval_id"].as_str().map(str::to_owned))
            .collect(),
    )
}

/// Reads frames until the `tool_result` of `call_id`; answers its status.
async fn tool_result(ws: &mut Ws, call_id: &str) -> String {
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let f: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        if f["type"] == "tool_result" && f["call_id"] == call_id {
            return f["status"].as_str().unwrap_or_default().to_owned();
        }
        assert_ne!(f["type"], "error", "the decision is taken: {f}");
    }
    panic!("the connection ended before the tool_result of {call_id}");
}

/// Reads frames until the `welcome`.
async fn welcome(ws: &mut Ws) {
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let f: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        if f["type"] == "welcome" {
            return;
        }
    }
    panic!("no welcome");
}

/// The `q`-quantile (nearest rank) of sorted `samples`, in ms.
fn ms(samples: &[Duration], q: f64) -> f64 {
    let i = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: bench_approvals QUESTD_BINARY DB_URL (restart SESSIONS | decide SESSIONS http|ws)";
    let [_, binary, db, mode, sessions, rest @ ..] = &args[..] else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let sessions: usize = sessions.parse().expect("SESSIONS");
    let http = reqwest::Client::new();
    let (mut node, port) = start(binary, db, "approvals-0");
    let began = Instant::now();
    let paused = paused_sessions(&http, port, sessions).await;
    println!(
        "created {sessions} sessions and paused a turn in each in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    match (mode.as_str(), rest) {
        ("restart", []) => {
            node.0.kill().expect("kill -9");
            let _ = node.0.wait();
            let started = Instant::now();
            let (_node, port) = start_on(binary, db, "approvals-0", &format!("127.0.0.1:{port}"));
            let ready = started.elapsed();
            let listed: usize = futures_util::stream::iter(&paused)
                .map(|s| {
                    let http = &http;
                    async move {
                        let want = s.approval["approval_id"].as_str().expect("approval id");
                        loop {
                            if let Some(ids) = pending(http, port, s).await {
                                assert_eq!(ids, [want], "{} lists its approval", s.id());
                                return 1;
                            }
                            assert!(
                                started.elapsed() < Duration::from_secs(300),
                                "{} is listed within 5 minutes",
                                s.id()
                            );
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect::<Vec<usize>>()
                .await
                .into_iter()
                .sum();
            println!(
                "restarted after SIGKILL: listening after {:.2} s, all {listed} pending approvals listed after {:.2} s",
                ready.as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
        }
        ("decide", [how]) if how == "http" || how == "ws" => {
            let mut to_result = Vec::with_capacity(sessions);
            let mut to_answer = Vec::with_capacity(sessions);
            for s in &paused {
                let mut ws = connect(port, &s.session, "player_token", s.seq).await;
                welcome(&mut ws).await;
                let approval_id = s.approval["approval_id"].as_str().expect("approval id");
                let call_id = s.approval["call_id"].as_str().expect("call id");
                let sent = Instant::now();
                let (status, took) = if how == "ws" {
                    let frame = json!({"type": "approve", "approval_id": approval_id, "decision": "approve"});
                    ws.send(Message::Text(frame.to_string().into()))
                        .await
                        .expect("approve frame");
                    let status = tool_result(&mut ws, call_id).await;
                    (status, sent.elapsed())
                } else {
                    let post = async {
                        let answer = http
                            .post(format!(
                                "http://127.0.0.1:{port}/api/v1/sessions/{}/approvals/{approval_id}",
                                s.id()
                            ))
                            .bearer_auth(s.token())
                            .json(&json!({"decision": "approve"}))
                            .send()
                            .await
                            .expect("decision");
                        assert_eq!(answer.status().as_u16(), 200, "the decision is taken");
                        sent.elapsed()
                    };
                    let result = async {
                        let status = tool_result(&mut ws, call_id).await;
                        (status, sent.elapsed())
                    };
                    let (answered, result) = tokio::join!(post, result);
                    to_answer.push(answered);
                    result
                };
                to_result.push(took);
                assert_eq!(status, "ok", "the approved call runs");
                let _ = ws.close(None).await;
            }
            to_result.sort();
            to_answer.sort();
            print!(
                "{sessions} decisions over {how}: to tool_result p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                ms(&to_result, 0.5),
                ms(&to_result, 0.99),
                ms(&to_result, 1.0)
            );
            if to_answer.is_empty() {
                println!();
            } else {
                println!(
                    "; to the 200 p50 {:.2} ms, p99 {:.2} ms",
                    ms(&to_answer, 0.5),
                    ms(&to_answer, 0.99)
                );
            }
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
