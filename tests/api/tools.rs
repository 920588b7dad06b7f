//! The tool catalogue through the turn loop: real sockets, a scripted model.

use std::sync::Arc;

use crate::common::*;
use questd::game::HistoryEntry;
use questd::llm::{ModelReply, ModelRequest, ScriptedProvider};
use serde_json::{Value, json};

/// The results this turn has produced so far, by tool name.
fn turn_results(req: &ModelRequest) -> Vec<(String, Value)> {
    let start = req
        .messages
        .iter()
        .rposition(|m| matches!(**m, HistoryEntry::User { .. }))
        .unwrap_or(0);
    req.messages[start..]
        .iter()
        .filter_map(|m| match &**m {
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

#[actix_web::test]
async fn character_content_and_schema_tools_run_through_the_turn_loop() {
    let model = planned(vec![
        |_, _| {
            (
                "add_inventory".into(),
                json!({"items": [{"name": "Brass Key", "description": "cold to the touch"}, {"name": "Torch", "quantity": 2}]}),
            )
        },
        |_, _| {
            (
                "update_inventory".into(),
                json!({"updates": [{"slug": "torch", "quantity_change": -1}, {"slug": "brass_key", "quantity_change": -1}]}),
            )
        },
        |_, _| {
            (
                "update_character".into(),
                json!({"character_id": "pc_001", "max_hp": 20, "hp": 25, "level": 2}),
            )
        },
        |_, _| {
            (
                "get_npc_profile".into(),
                json!({"npc_id": "npc_maren", "version": 1}),
            )
        },
        |_, _| ("search_content".into(), json!({"query": "灯笼"})),
        |_, _| {
            (
                "search_content".into(),
                json!({"query": "bells divers", "limit": 3}),
            )
        },
        |_, _| {
            (
                "get_site_map".into(),
                json!({"include_pois": true, "include_routes": true}),
            )
        },
        |_, _| {
            (
                "create_draft_content".into(),
                json!({"content_type": "quest", "title": "A new hook", "body": "Someone stole the oil."}),
            )
        },
        |_, _| {
            (
                "log_user_event".into(),
                json!({"event_type": "ui.opened_map", "payload": {"from": "test"}}),
            )
        },
        |_, _| {
            (
                "get_prompt_active".into(),
                json!({"npc_id": "npc_warden", "prompt_type": "greeting"}),
            )
        },
        |_, _| ("describe_entity".into(), json!({"name": "角色"})),
        |_, _| {
            (
                "map_generate".into(),
                json!({"parent_area_id": null, "theme": "sky", "constraints": {"size": 2, "seed": 5}}),
            )
        },
        |_, _| {
            (
                "update_inventory".into(),
                json!({"updates": [{"slug": "dragon_egg", "quantity_change": 1}]}),
            )
        },
        |_, _| ("describe_entity".into(), json!({"name": "Spaceship"})),
    ]);
    // One model call per tool, so more than the default 8 iterations.
    let app = spawn_with(|s| s.max_iterations = 20, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("use every tool", "r-1").await;
    let results: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 14);
    let (ok, failed) = results.split_at(12);
    for r in ok {
        assert_eq!(r["status"], "ok", "{r}");
    }
    assert_eq!(
        (failed[0]["reason"].as_str(), failed[1]["reason"].as_str()),
        (Some("not_found"), Some("not_found"))
    );
    let inventory = &ok[1]["result"]["inventory"];
    let torch = inventory
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["slug"] == "torch")
        .unwrap();
    assert_eq!(
        torch["quantity"], 3,
        "2 carried + 2 added - 1 used: {inventory}"
    );
    assert!(
        inventory
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["slug"] != "brass_key"),
        "a stack at 0 is gone"
    );
    assert_eq!(
        ok[2]["result"]["character"]["hp"], 20,
        "hp is clamped to the new max_hp"
    );
    assert_eq!(ok[3]["result"]["version"], 1);
    assert_eq!(ok[3]["result"]["profile"]["version"], 1);
    assert_eq!(
        ok[4]["result"]["results"][0]["content_id"], "poi_chapel_altar",
        "Chinese search: {}",
        ok[4]["result"]
    );
    assert_eq!(
        ok[5]["result"]["results"][0]["content_id"],
        "note_bell_divers"
    );
    assert!(!ok[6]["result"]["routes"].as_array().unwrap().is_empty());
    assert!(
        ok[6]["result"]["pois"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "npc")
    );
    assert_eq!(
        ok[7]["result"]["status"], "draft",
        "the model only ever writes drafts"
    );
    assert!(
        ok[8]["result"]["event_id"]
            .as_str()
            .unwrap()
            .starts_with("ev_")
    );
    assert!(!ok[9]["result"]["prompt"].as_str().unwrap().is_empty());
    assert_eq!(ok[10]["result"]["entity"], "Character");
    assert_eq!(ok[11]["result"]["root_parent_area_id"], Value::Null);

    // Everything written is in the state and survives in the journal.
    let snap = app.snapshot(&s).await;
    let pc = snap["characters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["character_id"] == "pc_001")
        .unwrap();
    assert_eq!(
        (pc["max_hp"].as_i64(), pc["level"].as_i64()),
        (Some(20), Some(2))
    );
    let applied: Vec<String> = app
        .actions(&s)
        .await
        .iter()
        .map(|a| a["tool"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(applied.len(), 12);
}

#[actix_web::test]
async fn a_person_activates_an_npc_over_http_and_everyone_sees_it() {
    let model = planned(vec![|_, _| {
        (
            "get_prompt_active".into(),
            json!({"npc_id": "npc_silt", "prompt_type": "system"}),
        )
    }]);
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let url = |npc: &str| {
        format!(
            "{}/api/v1/sessions/{}/npcs/{npc}/activate",
            app.base, s.session_id
        )
    };
    let call = |npc: String, token: String, body: Value| async move {
        let mut resp = client()
            .post(npc)
            .insert_header(("Authorization", format!("Bearer {token}")))
            .send_json(&body)
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json::<Value>().await.unwrap_or(Value::Null))
    };
    let (status, body) = call(
        url("npc_silt"),
        s.player_token.clone(),
        json!({"active": false}),
    )
    .await;
    assert_eq!(
        (status, body["active"].as_bool(), body["changed"].as_bool()),
        (200, Some(false), Some(true)),
        "{body}"
    );
    // Spectators see the change live, as a tool call outside any turn.
    let seen = spectator
        .until(|f| f["type"] == "tool_result")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (seen["tool"].as_str(), seen["seq"].as_u64()),
        (Some("activate_npc"), body["seq"].as_u64())
    );
    assert!(seen["turn_id"].as_str().unwrap().starts_with("direct_"));

    // The model now finds the NPC inactive.
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("ask silt", "r-1").await;
    assert_eq!(
        first(&frames, "tool_result")["reason"],
        "invalid_actor_state"
    );

    let (status, _) = call(url("npc_silt"), s.spectator_token.clone(), json!({})).await;
    assert_eq!(status, 403, "spectators cannot");
    let (status, body) = call(
        url("npc_silt"),
        s.player_token.clone(),
        json!({"active": "yes"}),
    )
    .await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    let (status, body) = call(url("npc_silt"), s.player_token.clone(), json!([false])).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "a body that is not an object"
    );
    let (status, body) = call(url("npc_nobody"), s.player_token.clone(), json!({})).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (404, Some("NOT_FOUND"))
    );
    let (status, body) = call(url("npc_silt"), s.player_token.clone(), json!({})).await;
    assert_eq!((status, body["active"].as_bool()), (200, Some(true)));
}

/// A journey is filed under the turn it was made in, also when the move is
/// the turn's first call (which runs before the turn's start is durable).
#[actix_web::test]
async fn each_journey_is_logged_under_its_own_turn() {
    let model = ScriptedProvider::from_fn(|req, _| {
        if !turn_results(req).is_empty() {
            return Ok(ModelReply::narrate("Done."));
        }
        let text = last_user_text(req);
        let session = session_id(req);
        Ok(match text.strip_prefix("travel ") {
            Some(zone) => ModelReply::tools([(
                "move_to_zone",
                json!({"session_id": session, "to_zone_id": zone}).to_string(),
            )]),
            None => ModelReply::tools([(
                "generate_zone",
                json!({"session_id": session, "world_prompt": "salt flats", "count": 3})
                    .to_string(),
            )]),
        })
    });
    let app = spawn_with(|s| s.chat_burst = 20, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("make zones", "r-1").await;
    let zones: Vec<String> = first(&frames, "tool_result")["result"]["created_zone_ids"]
        .as_array()
        .expect("zones")
        .iter()
        .map(|z| z.as_str().unwrap().to_owned())
        .collect();
    for (n, zone) in zones.iter().enumerate() {
        let frames = ws
            .play(&format!("travel {zone}"), &format!("r-{}", n + 2))
            .await;
        assert_eq!(first(&frames, "tool_result")["status"], "ok", "{frames:#?}");
    }
    let snap = app.snapshot(&s).await;
    let turns: Vec<u64> = snap["player"]["movement_log"]
        .as_array()
        .expect("movement log")
        .iter()
        .map(|m| m["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [2, 3, 4], "{}", snap["player"]["movement_log"]);
}
