//! The tool catalogue through the turn loop: real sockets, a scripted model.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use questd::game::HistoryEntry;
use questd::llm::{ModelReply, ModelRequest, ScriptedProvider};
use serde_json::{Value, json};

/// The results this turn has produced so far, by tool name.
fn turn_results(req: &ModelRequest) -> Vec<(String, Value)> {
    let start = req
        .messages
        .iter()
        .rposition(|m| matches!(m, HistoryEntry::User { .. }))
        .unwrap_or(0);
    req.messages[start..]
        .iter()
        .filter_map(|m| match m {
            HistoryEntry::ToolResult { tool, content, .. } => Some((
                tool.clone(),
                serde_json::from_str(content).unwrap_or(Value::Null),
            )),
            _ => None,
        })
        .collect()
}

/// One planned call: reads the request and earlier results, names a tool and its args.
type Step = fn(&ModelRequest, &[(String, Value)]) -> (String, Value);

/// A model that plays a fixed plan of calls, one per model call; each step
/// may read the results before it. Then it narrates.
fn planned(plan: Vec<Step>) -> ScriptedProvider {
    ScriptedProvider::from_fn(move |req, _| {
        let done = turn_results(req);
        Ok(match plan.get(done.len()) {
            Some(step) => {
                let (tool, args) = step(req, &done);
                ModelReply::tools([(tool, args.to_string())])
            }
            None => ModelReply::narrate("The plan is complete."),
        })
    })
}

fn session_id(req: &ModelRequest) -> String {
    req.context["session_id"].as_str().unwrap().to_owned()
}

#[actix_web::test]
async fn zone_exploration_runs_through_the_turn_loop() {
    let model = planned(vec![
        |req, _| {
            (
                "generate_zone".into(),
                json!({"session_id": session_id(req), "world_prompt": "misty marsh", "count": 2}),
            )
        },
        |req, done| {
            let zone = done[0].1["created_zone_ids"][1]
                .as_str()
                .unwrap()
                .to_owned();
            (
                "move_to_zone".into(),
                json!({"session_id": session_id(req), "to_zone_id": zone}),
            )
        },
        |req, _| {
            (
                "get_player_state".into(),
                json!({"session_id": session_id(req)}),
            )
        },
        |_, _| {
            (
                "move_to_zone".into(),
                json!({"session_id": "sess_other", "to_zone_id": "zone_0_0_0"}),
            )
        },
    ]);
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("scout the marsh", "r-1").await;
    let results: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 4, "{frames:#?}");
    let zones = &results[0]["result"]["created_zone_ids"];
    assert_eq!(zones.as_array().unwrap().len(), 2);
    assert!(zones[0].as_str().unwrap().starts_with("zone_"));
    let moved = &results[1]["result"];
    assert!(moved["duration_min"].as_u64().unwrap() >= 1);
    assert!(
        moved["movement_log_id"]
            .as_str()
            .unwrap()
            .starts_with("mv_")
    );
    let player = &results[2]["result"]["player_runtime_data"]["current_position"];
    assert_eq!(player["zone_id"], moved["to_zone_id"]);
    assert_eq!(
        (
            results[3]["status"].as_str(),
            results[3]["reason"].as_str(),
            results[3]["error_code"].as_str()
        ),
        (
            Some("error"),
            Some("session_mismatch"),
            Some("SESSION_MISMATCH")
        )
    );
    let snap = app.snapshot(&s).await;
    assert_eq!(snap["zones"].as_array().unwrap().len(), 2);
    assert_eq!(snap["player"]["current_zone_id"], moved["to_zone_id"]);
    assert_eq!(snap["player"]["movement_log"].as_array().unwrap().len(), 1);
}

#[actix_web::test]
async fn every_call_is_in_the_audit_ledger() {
    let model = planned(vec![
        |_, _| {
            (
                "roll_dice".into(),
                json!({"dice": "1d20+5", "reason": "stealth"}),
            )
        },
        |_, _| {
            (
                "hp_delta".into(),
                json!({"target_character_id": "ghost", "delta": -3}),
            )
        },
        |_, _| {
            (
                "create_npc".into(),
                json!({"name": "Uninvited", "persona": "sly"}),
            )
        },
    ]);
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("try things", "r-1").await;
    let turn_id = first(&frames, "turn_started")["turn_id"].clone();
    let url = format!("{}/api/v1/sessions/{}/audit", app.base, s.session_id);
    // The ledger is written with the journal; poll briefly for the last row.
    let mut entries = Vec::new();
    for _ in 0..50 {
        let (status, page) = get(&url, Some(&s.player_token)).await;
        assert_eq!(status, 200, "{page}");
        entries = page["entries"].as_array().unwrap().clone();
        if entries.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(entries.len(), 3, "{entries:#?}");
    let rows: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["tool"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            ("roll_dice", "ok"),
            ("hp_delta", "error"),
            ("create_npc", "rejected")
        ]
    );
    for e in &entries {
        assert_eq!(e["turn_id"], turn_id);
        assert_eq!(e["role"], "game_master");
        assert_eq!(e["tenant_id"], "default");
        assert_eq!(e["args_hash"].as_str().unwrap().len(), 64);
        assert!(e["trace_id"].as_str().unwrap().starts_with("tr_"));
        assert!(e["duration_us"].as_i64().unwrap() >= 0);
        assert_eq!(e["trace_id"], entries[0]["trace_id"], "one trace per turn");
    }
    assert_eq!(entries[1]["reason"], "not_found");
    // The model may not create NPCs: only people with the right role may.
    assert!(matches!(
        entries[2]["reason"].as_str(),
        Some("tool_not_allowed" | "permission_denied")
    ));
    let (status, _) = get(&url, Some(&s.spectator_token)).await;
    assert_eq!(status, 403, "the ledger is for the player token");
}
