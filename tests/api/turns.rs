//! The turn loop through real sockets: tools, validation, limits, fan-out.

use std::sync::{Arc, Mutex};

use crate::common::*;
use questd::game::HistoryEntry;
use questd::llm::{ModelReply, ModelRequest, RequestKind, ScriptedProvider};
use serde_json::{Value, json};

/// Whether this model call comes after tool results in the current turn.
fn has_tool_results(req: &ModelRequest) -> bool {
    matches!(
        req.messages.last().map(|m| &**m),
        Some(HistoryEntry::ToolResult { .. })
    )
}

#[actix_web::test]
async fn player_and_spectator_see_the_same_frames_for_a_multi_tool_turn() {
    let model = ScriptedProvider::from_fn(|req, _| {
        Ok(if has_tool_results(req) {
            ModelReply::narrate("You cross into the next room and roll well.")
        } else {
            let here = req.context["current_area"]["area_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let next = req.context["current_area"]["reachable"][0]["area_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            ModelReply::tools([
                ("move_options", json!({}).to_string()),
                (
                    "move",
                    json!({"actor_id": "pc_001", "to_area_id": next}).to_string(),
                ),
                (
                    "roll_dice",
                    json!({"dice": "2d6+1", "reason": "luck"}).to_string(),
                ),
                (
                    "get_character_stats",
                    json!({"character_id": "pc_001"}).to_string(),
                ),
            ])
            .with_note(&here)
        })
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, welcome) = app.connect(&s.session_id, &s.spectator_token, None).await;
    assert_eq!(welcome["role"], "spectator");
    // Both connections see the spectator's arrival before the turn.
    player
        .until(|f| f["type"] == "presence" && f["spectators"] == 1)
        .await;

    // `play` also checks that the ack came before every frame of the turn.
    let seen_by_player = player.play("I go on", "r-1").await;
    let turn = first(&seen_by_player, "turn_started")["turn_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let seen_by_spectator = spectator.until_turn_end(&turn).await;
    let a = story(&seen_by_player);
    let b: Vec<Value> = story(&seen_by_spectator)
        .into_iter()
        .filter(|f| f["type"] != "presence")
        .collect();
    let a: Vec<Value> = a.into_iter().filter(|f| f["type"] != "presence").collect();
    assert_eq!(a, b, "the same frames, with the same seqs");

    let kinds: Vec<&str> = a.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"turn_started"));
    assert_eq!(kinds.last(), Some(&"turn_completed"));
    let calls: Vec<&Value> = a.iter().filter(|f| f["type"] == "tool_call").collect();
    let results: Vec<&Value> = a.iter().filter(|f| f["type"] == "tool_result").collect();
    let order: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(
        order,
        ["move_options", "move", "roll_dice", "get_character_stats"],
        "tools run in the order asked"
    );
    assert!(results.iter().all(|r| r["status"] == "ok"), "{results:#?}");
    // One at a time: calls and results alternate strictly, each result
    // right after its own call (no other tool frame between them).
    let tool_frames: Vec<(&str, &Value)> = a
        .iter()
        .filter(|f| f["type"] == "tool_call" || f["type"] == "tool_result")
        .map(|f| (f["type"].as_str().unwrap(), &f["call_id"]))
        .collect();
    assert_eq!(tool_frames.len(), 8);
    for pair in tool_frames.chunks(2) {
        assert_eq!(
            (pair[0].0, pair[1].0),
            ("tool_call", "tool_result"),
            "{tool_frames:?}"
        );
        assert_eq!(pair[0].1, pair[1].1, "a result answers the call before it");
    }
    let seqs: Vec<u64> = story(&seen_by_player)
        .iter()
        .map(|f| f["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "seq grows by exactly 1: {seqs:?}"
    );

    let done = a.last().unwrap();
    assert_eq!(done["tool_events"].as_array().unwrap().len(), 4);
    assert_eq!(done["iterations"], 2);
    let moved_to = results[1]["result"]["to_area_id"].as_str().unwrap();
    assert_eq!(done["state_patch"]["position"]["area_id"], moved_to);
    assert_eq!(position(&app.snapshot(&s).await), moved_to);
    // The stats read in the same turn already see the move.
    assert_eq!(results[3]["result"]["area_id"], moved_to);
}

trait Note {
    fn with_note(self, note: &str) -> Self;
}

impl Note for ModelReply {
    fn with_note(mut self, note: &str) -> Self {
        self.text = format!("(from {note})");
        self
    }
}

#[actix_web::test]
async fn move_with_from_area_id_is_invalid_args_and_the_model_hears_why() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen2 = seen.clone();
    let model = ScriptedProvider::from_fn(move |req, _| {
        Ok(match req.messages.last().map(|m| &**m) {
            Some(HistoryEntry::ToolResult { content, .. }) => {
                seen2.lock().unwrap().push(content.clone());
                ModelReply::narrate("You stay where you are.")
            }
            _ => ModelReply::tools([(
                "move",
                json!({"actor_id": "pc_001", "from_area_id": "area_001", "to_area_id": "area_002"})
                    .to_string(),
            )]),
        })
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("go", "r-1").await;
    let result = first(&frames, "tool_result");
    assert_eq!(result["status"], "error");
    assert_eq!(result["reason"], "invalid_args");
    assert_eq!(result["error_code"], "INVALID_ARGS");
    assert!(
        result["message"].as_str().unwrap().contains("from_area_id"),
        "{result}"
    );
    assert_eq!(
        first(&frames, "turn_completed")["reply"],
        "You stay where you are."
    );
    // The model got the failure as its tool message.
    let told = seen.lock().unwrap().clone();
    assert_eq!(told.len(), 1);
    let told: Value = serde_json::from_str(&told[0]).unwrap();
    assert_eq!(told["reason"], "invalid_args");
    assert_eq!(
        position(&app.snapshot(&s).await),
        "area_001",
        "nothing moved"
    );
    assert!(
        app.actions(&s).await.is_empty(),
        "a failed call is not an applied action"
    );
}

#[actix_web::test]
async fn a_tool_outside_the_allowlist_is_rejected() {
    let model = ScriptedProvider::sequence(vec![
        ModelReply::tools([("roll_dice", r#"{"dice":"1d20","reason":"luck"}"#)]),
        ModelReply::narrate("The dice stay in your pocket."),
    ]);
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app
.create_session(json!({"campaign": serde_json::from_str::<Value>(include_str!("fixtures/tiny_campaign.json")).unwrap()}))
        .await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    assert_eq!(
        welcome["state"]["allowlist"],
        json!(["move", "move_options"])
    );
    let frames = ws.play("roll for it", "r-1").await;
    let result = first(&frames, "tool_result");
    assert_eq!(result["status"], "rejected");
    assert_eq!(result["reason"], "tool_not_allowed");
    assert_eq!(result["error_code"], "TOOL_NOT_ALLOWED");
    assert_eq!(
        first(&frames, "turn_completed")["tool_events"][0]["reason"],
        "tool_not_allowed"
    );
}

#[actix_web::test]
async fn a_model_that_never_stops_hits_max_iterations_and_the_session_stays_usable() {
    let model = ScriptedProvider::from_fn(|req, n| {
        Ok(if last_user_text(req).contains("forever") {
            // A different roll every time, so only the iteration limit stops it.
            ModelReply::tools([(
                "roll_dice",
                json!({"dice": format!("1d{}", 2 + n), "reason": "luck"}).to_string(),
            )])
        } else {
            ModelReply::narrate("All is calm.")
        })
    });
    let model = Arc::new(model);
    let app = spawn_with(|s| s.max_iterations = 4, model.clone()).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("roll forever", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "MAX_ITERATIONS");
    assert_eq!(failed["limit"], "max_iterations");
    // Four model calls, the limit: three ran a tool, and the fourth (the
    // closing one, without tools) answered no text.
    assert_eq!(model.calls(), 4, "no model call past the limit");
    let calls = frames.iter().filter(|f| f["type"] == "tool_call").count();
    assert_eq!(calls, 3, "one tool call per model call before the last");

    let frames = ws.play("hello", "r-2").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "All is calm.");
}

#[actix_web::test]
async fn with_one_model_call_allowed_a_turn_narrates_in_it_without_tools() {
    // Asks for a tool whenever it may.
    let model = Arc::new(ScriptedProvider::from_fn(|req, _| {
        Ok(match req.kind {
            RequestKind::WrapUp => ModelReply::narrate("You wait, and nothing happens."),
            _ => ModelReply::tools([("roll_dice", r#"{"dice":"1d6","reason":"luck"}"#)]),
        })
    }));
    let app = spawn_with(|s| s.max_iterations = 1, model.clone()).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("roll", "r-1").await;
    let done = first(&frames, "turn_completed");
    assert_eq!(
        (&done["reply"], &done["iterations"], &done["limit"]),
        (
            &json!("You wait, and nothing happens."),
            &json!(1),
            &json!("max_iterations")
        ),
        "{done}"
    );
    assert!(
        frames.iter().all(|f| f["type"] != "tool_call"),
        "no tool ran"
    );
    assert_eq!(model.calls(), 1, "one model call, the limit");
}

#[actix_web::test]
async fn a_limit_ends_the_tools_and_the_model_narrates_the_turn_without_them() {
    // Keeps calling tools until it is told it may not; then narrates.
    let model = ScriptedProvider::from_fn(|req, n| {
        Ok(match (req.kind, last_user_text(req).as_str()) {
            (RequestKind::WrapUp, _) if req.tools.is_empty() => {
                ModelReply::narrate("the tool list should still be sent")
            }
            (RequestKind::WrapUp, _) => ModelReply {
                // Tool calls in the closing answer are ignored.
                text: "The dice clatter on and on, and the night moves on.".into(),
                ..ModelReply::tools([("roll_dice", r#"{"dice":"1d4","reason":"luck"}"#)])
            },
            (_, "roll forever") => ModelReply::tools([(
                "roll_dice",
                json!({"dice": format!("1d{}", 2 + n), "reason": "luck"}).to_string(),
            )]),
            (_, "stuck") => ModelReply::tools([("move_options", "{}")]),
            _ => ModelReply::narrate("All is calm."),
        })
    });
    let app = spawn_with(|s| s.max_iterations = 4, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;

    let frames = ws.play("roll forever", "r-1").await;
    assert!(
        frames.iter().all(|f| f["type"] != "turn_failed"),
        "{frames:?}"
    );
    let done = first(&frames, "turn_completed");
    assert_eq!(
        done["reply"],
        "The dice clatter on and on, and the night moves on."
    );
    assert_eq!(done["limit"], "max_iterations");
    assert_eq!(
        done["iterations"], 4,
        "three tool steps and the closing call: the four calls allowed"
    );
    assert_eq!(
        frames.iter().filter(|f| f["type"] == "tool_call").count(),
        3
    );
    assert_eq!(done["tool_events"].as_array().unwrap().len(), 3);
    let turn_id = done["turn_id"].as_str().unwrap();
    let seen = spectator.until_turn_end(turn_id).await;
    assert_eq!(
        first(&seen, "turn_completed"),
        done,
        "spectators see the same ending"
    );

    let frames = ws.play("stuck", "r-2").await;
    let done = first(&frames, "turn_completed");
    assert_eq!(done["limit"], "repeated_call", "{done}");
    assert_eq!(
        frames.iter().filter(|f| f["type"] == "tool_call").count(),
        2
    );

    // Plain turns carry no limit, and the closing narration is in the history.
    let frames = ws.play("hello", "r-3").await;
    let done = first(&frames, "turn_completed");
    assert_eq!(done["reply"], "All is calm.");
    assert!(done.get("limit").is_none(), "{done}");
    let rolls = app
        .actions(&s)
        .await
        .iter()
        .filter(|a| a["tool"] == "roll_dice")
        .count();
    assert_eq!(
        rolls, 3,
        "the tool asked for in the closing answer never ran"
    );
}

#[actix_web::test]
async fn the_same_call_three_times_in_a_row_ends_the_turn() {
    let model = ScriptedProvider::from_fn(|req, _| {
        Ok(if last_user_text(req).contains("stuck") {
            ModelReply::tools([("move_options", "{}")])
        } else {
            ModelReply::narrate("Free again.")
        })
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("stuck", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["limit"], "repeated_call", "{failed}");
    assert_eq!(
        frames.iter().filter(|f| f["type"] == "tool_call").count(),
        2,
        "the third repeat never runs"
    );
    let frames = ws.play("hello", "r-2").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "Free again.");
}

#[actix_web::test]
async fn offline_game_master_plays_a_turn_in_english_and_chinese() {
    let app = spawn_offline(|s| s.chat_burst = 20).await;
    let s = app.demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    let target = neighbour(&welcome["state"]);
    let frames = ws.play(&format!("go to {target}"), "r-1").await;
    let result = first(&frames, "tool_result");
    assert_eq!(
        (result["tool"].as_str(), result["status"].as_str()),
        (Some("move"), Some("ok"))
    );
    let done = first(&frames, "turn_completed");
    let deltas: String = frames
        .iter()
        .filter(|f| f["type"] == "narrative_delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        deltas,
        done["reply"].as_str().unwrap(),
        "the deltas add up to the reply"
    );
    assert_eq!(done["dialog_type"], "scene_description");

    let frames = ws.play("掷 2d6+1", "r-2").await;
    let roll = &first(&frames, "tool_result")["result"];
    assert!((3..=13).contains(&roll["total"].as_i64().unwrap()));
    assert!(
        first(&frames, "turn_completed")["reply"]
            .as_str()
            .unwrap()
            .contains("总计")
    );

    let frames = ws.play("我能去哪", "r-3").await;
    assert_eq!(first(&frames, "tool_call")["tool"], "move_options");

    let frames = ws.play("explore crystal caves", "r-4").await;
    let generated = first(&frames, "tool_result");
    assert_eq!(generated["tool"], "map_generate");
    let new_areas = generated["result"]["areas"].as_array().unwrap().len();
    assert_eq!(new_areas, 6, "default size");
    assert_eq!(
        first(&frames, "turn_completed")["state_patch"]["areas"]
            .as_array()
            .unwrap()
            .len(),
        new_areas + 1
    );

    let frames = ws.play("状态", "r-5").await;
    assert_eq!(first(&frames, "tool_call")["tool"], "get_character_stats");

    let frames = ws.play("I hum a song", "r-6").await;
    assert!(frames.iter().all(|f| f["type"] != "tool_call"));
    assert!(
        !first(&frames, "turn_completed")["reply"]
            .as_str()
            .unwrap()
            .is_empty()
    );

    for (text, tool) in [
        ("scout misty marsh", "generate_zone"),
        ("搜索 灯笼", "search_content"),
        ("map", "get_site_map"),
    ] {
        let frames = ws.play(text, text).await;
        let result = first(&frames, "tool_result");
        assert_eq!(
            (result["tool"].as_str(), result["status"].as_str()),
            (Some(tool), Some("ok")),
            "{text}"
        );
        assert!(
            !first(&frames, "turn_completed")["reply"]
                .as_str()
                .unwrap()
                .is_empty()
        );
    }

    // Two commands in one message: two calls in one answer, run in order.
    let frames = ws.play("status then roll 1d20", "r-10").await;
    let calls: Vec<(&str, &str)> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| (f["call_id"].as_str().unwrap(), f["tool"].as_str().unwrap()))
        .collect();
    assert_eq!(
        calls,
        [("call_1", "get_character_stats"), ("call_2", "roll_dice")]
    );
    let done = first(&frames, "turn_completed");
    assert_eq!(done["tool_events"].as_array().unwrap().len(), 2);
    assert!(done["reply"].as_str().unwrap().contains("total"), "{done}");

    let snap = app.snapshot(&s).await;
    assert_eq!(snap["turn"], 10);
    assert_eq!(snap["zones"].as_array().unwrap().len(), 1);
    assert_eq!(
        snap["areas"].as_array().unwrap().len(),
        welcome["state"]["areas"].as_array().unwrap().len() + 6
    );
}

/// A model that answers only when the test opens its gate, one answer per permit.
pub(crate) struct GatedModel {
    pub(crate) gate: Arc<tokio::sync::Semaphore>,
}

impl questd::llm::Provider for GatedModel {
    fn name(&self) -> &str {
        "gated"
    }

    fn complete(
        &self,
        _: ModelRequest,
    ) -> futures_util::stream::BoxStream<
        'static,
        Result<questd::llm::ModelEvent, questd::llm::LlmError>,
    > {
        let gate = self.gate.clone();
        Box::pin(futures_util::stream::once(async move {
            gate.acquire().await.expect("gate open").forget();
            Ok(questd::llm::ModelEvent::Done(ModelReply::narrate(
                "At last.",
            )))
        }))
    }
}

#[actix_web::test]
async fn turns_queue_in_order_and_a_full_queue_is_refused() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let model = GatedModel { gate: gate.clone() };
    let app = spawn_with(|s| s.max_queued_turns = 2, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let mut acks = Vec::new();
    for i in 0..4 {
        ws.chat(&format!("message {i}"), &format!("r-{i}")).await;
        acks.push(ws.until_reply().await.pop().unwrap());
    }
    let queued: Vec<Option<u64>> = acks[..3].iter().map(|a| a["queued"].as_u64()).collect();
    assert_eq!(queued, [Some(0), Some(1), Some(2)], "{acks:#?}");
    assert_eq!(acks[3]["error_code"], "QUEUE_FULL");
    gate.add_permits(3);
    let mut order = Vec::new();
    while order.len() < 3 {
        let f = ws.next_json().await;
        if f["type"] == "turn_completed" {
            order.push(f["turn_id"].as_str().unwrap().to_owned());
        }
    }
    let expected: Vec<String> = acks[..3]
        .iter()
        .map(|a| a["turn_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(order, expected, "turns complete in arrival order");
}

#[actix_web::test]
async fn a_turn_past_its_deadline_fails_and_the_next_one_runs() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let model = GatedModel { gate: gate.clone() };
    let app = spawn_with(|s| s.turn_deadline_secs = 1, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello?", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(
        (failed["error_code"].as_str(), failed["limit"].as_str()),
        (Some("AI_TIMEOUT"), Some("deadline"))
    );
    // The stalled answer arrives late and is ignored; the next turn gets its own.
    gate.add_permits(2);
    let frames = ws.play("hello again", "r-2").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "At last.");
}

#[actix_web::test]
async fn long_sessions_send_the_model_recent_turns_whole_and_a_summary_of_the_rest() {
    let seen: Arc<Mutex<Vec<ModelRequest>>> = Arc::default();
    let log = seen.clone();
    let model = ScriptedProvider::from_fn(move |req, _| {
        log.lock().unwrap().push(req.clone());
        Ok(if has_tool_results(req) {
            ModelReply::narrate("The dice settle; the tale goes on, a little longer each time.")
        } else {
            ModelReply::tools([("roll_dice", r#"{"dice":"3d6","reason":"luck"}"#)])
        })
    });
    let app = spawn_with(
        |s| {
            s.history_tokens = 400;
            s.chat_burst = 20;
        },
        Arc::new(model),
    )
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    for i in 0..12 {
        let frames = ws
            .play(
                &format!("turn number {i}: roll for luck"),
                &format!("r-{i}"),
            )
            .await;
        first(&frames, "turn_completed");
    }
    let requests = seen.lock().unwrap().clone();
    let last = requests.last().unwrap();
    let users: Vec<&str> = last
        .messages
        .iter()
        .filter_map(|m| match &**m {
            HistoryEntry::User { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(users.len() < 12, "old turns were dropped: {users:?}");
    assert_eq!(users.last(), Some(&"turn number 11: roll for luck"));
    assert!(
        matches!(
            last.messages.first().map(|m| &**m),
            Some(HistoryEntry::User { .. })
        ),
        "the history starts with a whole turn"
    );
    // The newest dropped turn is summarized in the system prompt.
    let oldest_kept: usize = users[0]
        .trim_start_matches("turn number ")
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let line = format!(
        "turn number {}: roll for luck\" -> roll_dice ok",
        oldest_kept - 1
    );
    assert!(last.system.contains(&line), "{line} in {}", last.system);
    for request in &requests {
        let mut calls = std::collections::HashSet::new();
        for m in &request.messages {
            match &**m {
                HistoryEntry::ToolCall { call_id, .. } => {
                    calls.insert(call_id.clone());
                }
                HistoryEntry::ToolResult { call_id, .. } => {
                    assert!(calls.contains(call_id), "a result without its call")
                }
                _ => {}
            }
        }
    }
}

/// The game master is told where the party stands after every move, also
/// when turns that changed nothing came before (the session keeps the
/// context between them): `explore` grows the map from the new area.
#[actix_web::test]
async fn the_model_sees_the_map_as_the_last_move_left_it() {
    let app = spawn_offline(|s| s.chat_burst = 20).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    for (n, text) in [
        "roll 1d6",
        "explore caves",
        "go to area_002",
        "explore caves",
        "go to area_004",
        "roll 1d20",
        "explore ruins",
    ]
    .into_iter()
    .enumerate()
    {
        let frames = ws.play(text, &format!("r-{n}")).await;
        let call = first(&frames, "tool_call");
        let result = first(&frames, "tool_result");
        assert_eq!(result["status"], "ok", "{text}: {result}");
        if text.starts_with("explore") {
            let expected = match n {
                1 => "area_001",
                3 => "area_002",
                _ => "area_004",
            };
            assert_eq!(call["tool"], "map_generate", "{text}");
            assert_eq!(
                call["args"]["parent_area_id"], expected,
                "{text} after {n} turns: {call}"
            );
        }
    }
}

/// The player messages (the corrective ones included) the model was sent
/// in its last call.
fn last_user_text(req: &ModelRequest) -> String {
    req.messages
        .iter()
        .rev()
        .find_map(|m| match &**m {
            HistoryEntry::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[actix_web::test]
async fn a_silent_answer_is_sent_back_once_and_the_player_sees_only_the_good_one() {
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let asked2 = asked.clone();
    let model = ScriptedProvider::from_fn(move |req, n| {
        asked2.lock().unwrap().push(last_user_text(req));
        Ok(ModelReply::narrate(if n == 0 {
            ""
        } else {
            "The hall is quiet."
        }))
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("I listen", "r-1").await;
    assert_eq!(
        first(&frames, "turn_completed")["reply"],
        "The hall is quiet."
    );
    let narrated: Vec<&str> = frames
        .iter()
        .filter(|f| f["type"] == "narrative_delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(narrated.concat(), "The hall is quiet.");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "one retry: {asked:?}");
    assert_eq!(asked[0], "I listen");
    assert!(
        asked[1].starts_with("Your previous answer was rejected: the answer has no text"),
        "{}",
        asked[1]
    );
}

#[actix_web::test]
async fn a_claimed_move_without_a_move_is_corrected_into_a_real_move() {
    let model = ScriptedProvider::from_fn(|req, n| {
        Ok(match n {
            0 => ModelReply::narrate("You enter the side room."),
            1 => {
                assert!(
                    last_user_text(req).contains("\"you enter\""),
                    "{}",
                    last_user_text(req)
                );
                let next = req.context["current_area"]["reachable"][0]["area_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                ModelReply::tools([(
                    "move",
                    json!({"actor_id": "pc_001", "to_area_id": next}).to_string(),
                )])
            }
            _ => ModelReply::narrate("You enter the side room at last."),
        })
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("go on", "r-1").await;
    assert_eq!(first(&frames, "tool_call")["tool"], "move");
    assert_eq!(first(&frames, "tool_result")["status"], "ok");
    assert_eq!(
        first(&frames, "turn_completed")["reply"],
        "You enter the side room at last."
    );
    assert_ne!(position(&app.snapshot(&s).await), "area_001", "it moved");
}

#[actix_web::test]
async fn two_bad_answers_fail_the_turn_as_a_broken_contract() {
    let model = ScriptedProvider::from_fn(|_, _| Ok(ModelReply::narrate("You arrive.")));
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("wait", "r-1").await;
    assert!(frames.iter().all(|f| f["type"] != "turn_completed"));
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "INVALID_AI_JSON", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("broke the reply contract twice"),
        "{failed}"
    );
    assert_eq!(position(&app.snapshot(&s).await), "area_001");
}
