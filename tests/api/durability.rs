//! Nothing acknowledged is lost: restarts, SIGKILL, idle unloading.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use crate::process::Server;
use questd::game::HistoryEntry;
use questd::llm::{ModelReply, OfflineGameMaster, ScriptedProvider};
use serde_json::{Value, json};

#[actix_web::test]
async fn restarting_on_the_same_database_brings_back_state_and_history() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = spawn_in(dir.clone(), |_| {}, Arc::new(OfflineGameMaster::default())).await;
    let s = app.demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    let target = neighbour(&welcome["state"]);
    let first_turn = ws.play(&format!("go to {target}"), "r-1").await;
    let second_turn = ws.play("explore ice caves", "r-2").await;
    let before = at_rest(app.snapshot(&s).await);
    let actions_before = app.actions(&s).await;
    let last_seq = story(&first_turn).last().unwrap()["seq"].as_u64().unwrap();
    ws.close().await;
    app.stop().await;

    // The new server's model records what history it is given.
    let history: Arc<Mutex<Vec<HistoryEntry>>> = Arc::default();
    let h2 = history.clone();
    let model = ScriptedProvider::from_fn(move |req, _| {
        *h2.lock().unwrap() = req.messages.iter().map(|m| (**m).clone()).collect();
        Ok(ModelReply::narrate("Welcome back."))
    });
    let app = spawn_in(dir, |_| {}, Arc::new(model)).await;
    assert_eq!(
        at_rest(app.snapshot(&s).await),
        before,
        "the same state after a restart"
    );
    assert_eq!(app.actions(&s).await, actions_before);
    assert_eq!(position(&before), target);

    // Frames are still there to resume from, and seq carries on.
    let (mut ws, welcome) = app
        .connect(&s.session_id, &s.player_token, Some(last_seq))
        .await;
    assert_eq!(welcome["resumed"], true);
    let resumed = ws.until(|f| f["type"] == "turn_completed").await;
    assert_eq!(resumed[0]["seq"].as_u64(), Some(last_seq + 1));
    let frames = ws.play("what happened?", "r-3").await;
    assert_eq!(first(&frames, "turn_started")["turn_id"], "turn_3");
    let texts: Vec<String> = history
        .lock()
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            HistoryEntry::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [
            format!("go to {target}"),
            "explore ice caves".into(),
            "what happened?".into()
        ]
    );
    // The model reads the turns played before as they were played: each
    // call with its arguments, each result, each reply.
    let said = |frames: &[Value]| -> Vec<Value> {
        story(frames)
            .into_iter()
            .filter_map(|f| match f["type"].as_str()? {
                "turn_started" => Some(json!({"role": "user", "text": f["text"]})),
                "tool_call" => Some(
                    json!({"role": "tool_call", "call_id": f["call_id"], "tool": f["tool"], "arguments": f["args"]}),
                ),
                "tool_result" => Some(
                    json!({"role": "tool_result", "call_id": f["call_id"], "tool": f["tool"], "content": f["result"]}),
                ),
                "turn_completed" => Some(json!({"role": "assistant", "text": f["reply"]})),
                _ => None,
            })
            .collect()
    };
    let parsed = |text: &str| serde_json::from_str::<Value>(text).unwrap();
    let read: Vec<Value> = history
        .lock()
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            HistoryEntry::User { turn_id, text, .. } => {
                (turn_id != "turn_3").then(|| json!({"role": "user", "text": text}))
            }
            HistoryEntry::ToolCall { call_id, tool, arguments, .. } => Some(
                json!({"role": "tool_call", "call_id": call_id, "tool": tool, "arguments": parsed(arguments)}),
            ),
            HistoryEntry::ToolResult { call_id, tool, content, .. } => Some(
                json!({"role": "tool_result", "call_id": call_id, "tool": tool, "content": parsed(content)}),
            ),
            HistoryEntry::Assistant { text, .. } => Some(json!({"role": "assistant", "text": text})),
        })
        .collect();
    let played = [said(&first_turn), said(&second_turn)].concat();
    assert!(
        played.iter().any(|e| e["role"] == "tool_result"),
        "{played:?}"
    );
    assert_eq!(read, played);

    // The request ids of earlier turns are still remembered.
    ws.chat("go somewhere", "r-1").await;
    let ack = ws.until_reply().await.pop().unwrap();
    assert_eq!(
        (ack["duplicate"].as_bool(), ack["turn_id"].as_str()),
        (Some(true), Some("turn_1"))
    );
}

#[actix_web::test]
async fn an_idle_session_unloads_and_reloads_on_demand() {
    let app = spawn_with(|s| s.idle_secs = 1, Arc::new(OfflineGameMaster::default())).await;
    let s = app.public_demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    let target = neighbour(&welcome["state"]);
    ws.play(&format!("go to {target}"), "r-1").await;
    ws.close().await;
    assert!(unloads(&app, &s).await, "the idle session left memory");
    // Used again: loaded from storage with its state.
    assert_eq!(position(&app.snapshot(&s).await), target);
    assert!(listed(&app, &s).await.is_some());
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("roll 1d6", "r-2").await;
    assert_eq!(first(&frames, "turn_started")["turn_id"], "turn_2");
}

#[actix_web::test]
async fn a_session_nobody_uses_is_listed_at_once_and_unloads_like_an_idle_one() {
    // A new session nobody connects to is live (listed) at once, and
    // unloads after the idle time like any idle session.
    let app = spawn_with(|s| s.idle_secs = 1, Arc::new(OfflineGameMaster::default())).await;
    let s = app.public_demo().await;
    let entry = listed(&app, &s)
        .await
        .expect("a new public session is listed");
    assert_eq!(
        (&entry["players"], &entry["spectators"], &entry["turns"]),
        (&json!(0), &json!(0), &json!(0)),
        "{entry}"
    );
    assert!(unloads(&app, &s).await, "the unused session left memory");
    // Its first use loads it from storage, at its start.
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    assert_eq!(welcome["seq"], 0, "{welcome}");
    let frames = ws.play("roll 1d6", "r-1").await;
    assert_eq!(first(&frames, "turn_started")["turn_id"], "turn_1");
    assert!(listed(&app, &s).await.is_some());
}

/// The public session `s` as the live list shows it, if it is live.
async fn listed(app: &TestApp, s: &Session) -> Option<Value> {
    let (_, list) = get(&format!("{}/api/v1/sessions", app.base), None).await;
    list.as_array()
        .unwrap_or_else(|| panic!("the live list: {list}"))
        .iter()
        .find(|l| l["session_id"] == s.session_id.as_str())
        .cloned()
}

/// Whether `s` leaves the live list within ten seconds.
async fn unloads(app: &TestApp, s: &Session) -> bool {
    for _ in 0..100 {
        if listed(app, s).await.is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[actix_web::test]
async fn sigkill_right_after_tool_result_ok_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start(&db);
    let s = server.demo().await;
    let (mut ws, welcome) = server.connect(&s.session_id, &s.player_token, None).await;
    let target = neighbour(&welcome["state"]);
    ws.chat(&format!("go to {target}"), "r-1").await;
    let result = ws
        .until(|f| f["type"] == "tool_result")
        .await
        .pop()
        .unwrap();
    assert_eq!(result["status"], "ok");
    server.kill9();

    let server = Server::start(&db);
    let snap = server.snapshot(&s).await;
    assert_eq!(position(&snap), target, "the move survived the crash");
    let actions = server.actions(&s).await;
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0]["tool"], "move");
    assert_eq!(actions[0]["seq"], result["seq"]);
    assert_eq!(actions[0]["call_id"], result["call_id"]);
    assert_eq!(actions[0]["result"], result["result"]);

    // The session carries on from there, and the turn the crash cut short
    // is closed, so no client waits for it forever.
    let after = result["seq"].as_u64().unwrap();
    let (mut ws, welcome) = server
        .connect(&s.session_id, &s.player_token, Some(after))
        .await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    let turn_id = result["turn_id"].as_str().unwrap();
    let end = ws.until_turn_end(turn_id).await.pop().unwrap();
    if end["type"] == "turn_failed" {
        assert_eq!(end["error_code"], "INTERNAL_ERROR");
    }
    assert!(welcome["seq"].as_u64().unwrap() >= result["seq"].as_u64().unwrap());
    let frames = ws.play("roll 1d6", "r-2").await;
    let started = first(&frames, "turn_started");
    assert!(started["seq"].as_u64().unwrap() > welcome["seq"].as_u64().unwrap());
}

#[actix_web::test]
async fn a_kill_inside_a_turn_closes_it_after_the_restart_with_exact_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    // The game master thinks for 2 s before each answer: the kill lands
    // while the turn is running, after its turn_started is durable.
    let server = Server::start_with(&db, &[("QUESTD_OFFLINE_LATENCY_MS", "2000")]);
    let s = server.demo().await;
    let (mut ws, welcome) = server.connect(&s.session_id, &s.player_token, None).await;
    let mut seen: Vec<u64> = Vec::new();
    ws.chat(&format!("go to {}", neighbour(&welcome["state"])), "r-1")
        .await;
    let before = ws.until(|f| f["type"] == "turn_started").await;
    seen.extend(before.iter().filter_map(|f| f["seq"].as_u64()));
    let started = before.last().unwrap().clone();
    assert!(
        !before.iter().any(|f| f["type"] == "tool_call"),
        "the model is still thinking: {before:?}"
    );
    server.kill9();

    // Restarted: the cut turn is closed by the very next seq, and play
    // goes on from there without a gap or a repeat.
    let server = Server::start(&db);
    let last = *seen.iter().max().unwrap();
    let (mut ws, welcome) = server
        .connect(&s.session_id, &s.player_token, Some(last))
        .await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    let turn_id = started["turn_id"].as_str().unwrap();
    let closing = ws.until_turn_end(turn_id).await;
    seen.extend(closing.iter().filter_map(|f| f["seq"].as_u64()));
    let end = closing.last().unwrap();
    assert_eq!(end["type"], "turn_failed", "{end}");
    assert_eq!(
        end["seq"].as_u64(),
        Some(started["seq"].as_u64().unwrap() + 1)
    );
    let frames = ws.play("roll 1d6", "r-2").await;
    seen.extend(frames.iter().filter_map(|f| f["seq"].as_u64()));
    assert_eq!(first(&frames, "turn_started")["turn_id"], "turn_2");
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "seqs without a gap or repeat: {seen:?}"
    );
    // The move never ran: nothing in the actions log.
    let actions = server.actions(&s).await;
    assert!(!actions.iter().any(|a| a["tool"] == "move"), "{actions:?}");
}

#[actix_web::test]
async fn a_chat_acknowledged_while_a_turn_runs_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    // A slow game master keeps the first turn running while the second
    // chat is taken, queued and acknowledged.
    let server = Server::start_with(&db, &[("QUESTD_OFFLINE_LATENCY_MS", "2000")]);
    let s = server.demo().await;
    let (mut ws, welcome) = server.connect(&s.session_id, &s.player_token, None).await;
    let target = neighbour(&welcome["state"]);
    ws.chat("roll 1d6", "r-1").await;
    let started = ws.until(|f| f["type"] == "turn_started").await;
    let seen = started.last().unwrap()["seq"].as_u64().unwrap();
    ws.chat(&format!("go to {target}"), "r-2").await;
    let ack = ws.ack_for("r-2").await;
    assert_eq!(ack["queued"], 1, "{ack}");
    let queued_turn = ack["turn_id"].as_str().unwrap().to_owned();
    server.kill9();

    // Restarted: the acknowledged chat runs by itself, with no client
    // back (on PostgreSQL, once the killed node's claim has lapsed).
    let server = Server::start(&db);
    let ran = || async {
        crate::timers::journal(&db, &s).await.into_iter().any(|e| {
            e["frame"]["type"] == "turn_completed" && e["frame"]["turn_id"] == queued_turn.as_str()
        })
    };
    let mut polls = 0;
    while !ran().await {
        polls += 1;
        assert!(polls < 600, "the stored chat never ran with no client back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // It ran once, as the turn it was given, and the same request id again
    // is a duplicate of it. The client resumes from what it saw.
    let (mut ws, _) = server
        .connect(&s.session_id, &s.player_token, Some(seen))
        .await;
    let frames = ws.until_turn_end(&queued_turn).await;
    let started = frames
        .iter()
        .find(|f| f["type"] == "turn_started" && f["turn_id"] == queued_turn.as_str())
        .unwrap_or_else(|| panic!("the stored chat ran: {frames:?}"));
    assert_eq!(started["request_id"], "r-2");
    assert_eq!(position(&server.snapshot(&s).await), target);
    ws.chat(&format!("go to {target}"), "r-2").await;
    let again = ws.ack_for("r-2").await;
    assert_eq!(
        (again["duplicate"].as_bool(), again["turn_id"].as_str()),
        (Some(true), Some(queued_turn.as_str()))
    );
    let moves = moves_in_log(&server, &s).await;
    assert_eq!(moves.len(), 1, "{moves:?}");
}

/// A session's stored snapshot: its seq, its manifest and its chunks' sizes.
struct StoredSnapshot {
    seq: u64,
    manifest: Value,
    chunks: std::collections::HashMap<String, usize>,
}

impl StoredSnapshot {
    async fn read(app: &TestApp, s: &Session) -> Self {
        let snapshot = crate::database::text_rows(
            &app.db_url,
            "SELECT CAST(seq AS TEXT), state FROM snapshots WHERE session_id = $1",
            &s.session_id,
        )
        .await;
        let chunks = crate::database::text_rows(
            &app.db_url,
            "SELECT chunk_id, body FROM snapshot_chunks WHERE session_id = $1",
            &s.session_id,
        )
        .await;
        // A session begun from a shared start has no snapshot row until
        // its first snapshot: it reads the start, at seq 0.
        let Some(snapshot) = snapshot.first() else {
            return Self {
                seq: 0,
                manifest: Value::Null,
                chunks: Default::default(),
            };
        };
        Self {
            seq: snapshot[0].parse().unwrap(),
            manifest: serde_json::from_str(&snapshot[1]).unwrap(),
            chunks: chunks
                .into_iter()
                .map(|r| (r[0].clone(), r[1].len()))
                .collect(),
        }
    }

    /// The chunk ids the manifest names, sorted.
    fn named(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.manifest["chunked"]
            .as_object()
            .expect("a snapshot in pieces")
            .values()
            .flat_map(|ids| ids.as_array().unwrap().iter())
            .map(|id| id.as_str().unwrap().to_owned())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn stored(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.chunks.keys().cloned().collect();
        ids.sort_unstable();
        ids
    }

    /// Bytes of this snapshot's chunks that `earlier` did not have.
    fn bytes_new_since(&self, earlier: &Self) -> usize {
        self.chunks
            .iter()
            .filter(|(id, _)| !earlier.chunks.contains_key(*id))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Plays `explore` until the stored snapshot is a newer one (a snapshot is
/// due every 256 frames), and answers it.
async fn play_to_next_snapshot(app: &TestApp, s: &Session, ws: &mut Ws) -> StoredSnapshot {
    let at = StoredSnapshot::read(app, s).await.seq;
    for turn in 0..400 {
        ws.play("explore", &format!("explore-{at}-{turn}")).await;
        let now = StoredSnapshot::read(app, s).await;
        if now.seq > at {
            return now;
        }
    }
    panic!("no snapshot after 400 turns")
}

/// Chats as fast as a test plays them.
fn unlimited_chats(s: &mut questd::Settings) {
    s.chat_burst = 1000;
    s.chat_per_minute = 1_000_000;
}

#[actix_web::test]
async fn snapshots_write_what_changed_and_restarts_bring_back_the_same_state() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let (settings, offline) = (unlimited_chats, || Arc::new(OfflineGameMaster::default()));
    let app = spawn_in(dir.clone(), settings, offline()).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let first = play_to_next_snapshot(&app, &s, &mut ws).await;
    let second = play_to_next_snapshot(&app, &s, &mut ws).await;
    for snapshot in [&first, &second] {
        assert_eq!(snapshot.named(), snapshot.stored(), "stored: what it names");
    }
    // What no turn changed kept its chunks, which were not written again.
    for list in ["lore", "npcs", "content"] {
        assert!(
            !first.manifest["chunked"][list]
                .as_array()
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            first.manifest["chunked"][list], second.manifest["chunked"][list],
            "{list}"
        );
    }
    let total: usize = second.chunks.values().sum();
    assert!(
        second.bytes_new_since(&first) < total,
        "the second snapshot wrote all {total} bytes again"
    );
    let before = at_rest(app.snapshot(&s).await);
    assert!(before["areas"].as_array().unwrap().len() > 30, "{before}");
    ws.close().await;
    app.stop().await;
    drop(app);

    // Restarted, the session is the same; it knows which chunks are stored
    // and its next snapshot again leaves exactly what it names.
    let app = spawn_in(dir.clone(), settings, offline()).await;
    assert_eq!(
        at_rest(app.snapshot(&s).await),
        before,
        "the same state after a restart"
    );
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let third = play_to_next_snapshot(&app, &s, &mut ws).await;
    assert_eq!(third.named(), third.stored());
    let before = at_rest(app.snapshot(&s).await);
    ws.close().await;
    app.stop().await;
    drop(app);
    let app = spawn_in(dir, settings, offline()).await;
    assert_eq!(
        at_rest(app.snapshot(&s).await),
        before,
        "the same state after a restart"
    );
}

/// A snapshot without who is connected now (each seat's `online`): what a
/// restart keeps is the rest.
fn at_rest(mut snapshot: Value) -> Value {
    for seat in snapshot["seats"].as_array_mut().into_iter().flatten() {
        seat["online"] = Value::Bool(false);
    }
    snapshot
}

/// `event_data` nested `levels` objects deep around `1`.
fn nested_event_data(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
}

#[actix_web::test]
async fn arguments_nested_to_their_bound_are_read_back_after_a_snapshot_and_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let (settings, offline) = (unlimited_chats, || Arc::new(OfflineGameMaster::default()));
    let app = spawn_in(dir.clone(), settings, offline()).await;
    let s = app.demo().await;
    let call = |levels: usize| {
        let url = format!("{}/api/v1/tools/call", app.base);
        let sid = s.session_id.clone();
        async move {
            let body = json!({"tool_name": "log_user_event", "input": {
                "event_type": "deep", "event_data": nested_event_data(levels)}});
            let headers = [
                ("X-Internal-API-Key", TEST_KEY),
                ("X-Tenant-ID", "default"),
                ("X-Site-ID", "site-deep"),
                ("X-Trace-ID", "trace-deep"),
                ("X-Session-ID", sid.as_str()),
            ];
            request("POST", &url, &headers, Some(&body)).await
        }
    };
    // The arguments object is a level of its own: `event_data` may nest 31
    // more. Deeper is refused and stores nothing, as deep as a body parses.
    let kept = call(31).await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    for levels in [32, 125] {
        let refused = call(levels).await;
        assert_eq!(refused.status, 400, "{levels}: {}", refused.body);
        assert_eq!(
            refused.body["error_type"], "INVALID_ARGS",
            "{}",
            refused.body
        );
        assert!(
            refused.body["error"]
                .as_str()
                .is_some_and(|e| e.contains("nested deeper than 32 levels")),
            "{}",
            refused.body
        );
    }
    // The event goes into a snapshot, which is what a restart reads first.
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    play_to_next_snapshot(&app, &s, &mut ws).await;
    ws.close().await;
    app.stop().await;
    drop(app);

    let app = spawn_in(dir, settings, offline()).await;
    let auth = format!("Bearer {}", s.player_token);
    let export = request(
        "GET",
        &format!("{}/api/v1/sessions/{}/export", app.base, s.session_id),
        &[("Authorization", auth.as_str())],
        None,
    )
    .await;
    assert_eq!(export.status, 200, "{}", export.body);
    let events = export.body["state"]["events"].as_array().expect("events");
    let deep: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "deep")
        .collect();
    assert_eq!(deep.len(), 1, "only the call within the bound: {events:?}");
    assert_eq!(deep[0]["payload"], nested_event_data(31), "{}", deep[0]);
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.play("look", "after-restart").await;
    ws.close().await;
}

#[actix_web::test]
async fn a_chat_while_the_node_drains_hears_that_the_node_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    // The game master thinks for 2 s: the drain waits for the running
    // turn, and the chats below come meanwhile.
    let env = [
        ("QUESTD_OFFLINE_LATENCY_MS", "2000"),
        ("QUESTD_CREATE_BURST", "10000"),
        ("QUESTD_CREATE_PER_MINUTE", "1000000"),
    ];
    let server = Server::start_with(&db, &env);
    let s = server.demo().await;
    let (mut ws, _) = server.connect(&s.session_id, &s.player_token, None).await;
    ws.chat("look around", "r-1").await;
    ws.until(|f| f["type"] == "turn_started").await;
    server.signal("TERM");
    // The signal is handled by the server when it gets to it: the drain
    // has begun once a new session is refused as the node restarting.
    let create = format!("{}/api/v1/sessions", server.base());
    let mut tries = 0;
    loop {
        let (status, body) = post(&create, &json!({"campaign_id": "demo"})).await;
        if status == 503 {
            assert_eq!(body["message"], "this node is restarting; try again");
            break;
        }
        assert_eq!(status, 201, "{body}");
        tries += 1;
        assert!(tries < 1000, "the drain never began");
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    ws.chat("look again", "r-2").await;
    let refused = ws
        .until(|f| f["type"] == "error" && f["request_id"] == "r-2")
        .await;
    let refused = refused.last().unwrap();
    assert_eq!(refused["error_code"], "OVERLOADED", "{refused}");
    assert_eq!(refused["message"], "this node is restarting; try again");
    let http = chat_over_http(
        server.base(),
        &s.player_token,
        &json!({"session_id": s.session_id, "message": "and again", "request_id": "r-3"}),
    )
    .await;
    assert_eq!(
        (http.status, http.body["error_code"].as_str()),
        (503, Some("OVERLOADED")),
        "{}",
        http.body
    );
    assert_eq!(http.retry_after.as_deref(), Some("1"));
    // The running turn ends, then the connection closes for a reconnect.
    let (frames, code) = ws.frames_until_closed().await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "{frames:?}"
    );
    assert_eq!(code, Ok(Some(1012)));
}
