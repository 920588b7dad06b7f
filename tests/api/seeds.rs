//! Every request example of the five design documents integrators write
//! against (the seeds), sent as written: the same path, headers and body,
//! with only the credential docs/protocol.md §1.12 requires added
//! (`X-Internal-API-Key`; the contract wins where a seed omits it)
//! and the ids the server made put where a seed writes a placeholder
//! (`sess_xxx`). Each example is labelled with where it is in its seed;
//! each asserts the answer fields its seed shows. docs/protocol.md §14
//! maps every example to its test here.

use std::sync::Arc;

use crate::common::*;
use questd::game::HistoryEntry;
use questd::llm::contract::{TurnFacts, parse_reply};
use questd::llm::{ModelReply, ModelRequest, RequestKind, ScriptedProvider};
use serde_json::{Value, json};

/// The credential docs/protocol.md §1.12 requires of a service call.
const KEY: (&str, &str) = ("X-Internal-API-Key", TEST_KEY);

/// The campaign of seed 003's site `yantian-main`: NPC `ancestor_yan`,
/// content `严氏家训十则`, a POI `严氏祠堂`.
const YANTIAN: &str = include_str!("fixtures/yantian_campaign.json");

/// Seed 001's final answer, after the roll.
const FINAL_001: &str = "You rolled a 15 on your Investigation check. You carefully examine the room and discover a pressure plate near the doorway. It appears to trigger dart traps in the walls.";

/// Seed 002's model answers (§"Examples (schema-accurate)" 1 and 2).
const EXAMPLE_1_002: &str = r#"{"assistant_text":"","dialog_type":"scene_description","tool_calls":[{"id":"call_move_1","tool":"move","args":{"actor_id":"pc_001","to_area_id":"area_002"}}]}"#;
const EXAMPLE_2_002: &str = r#"{"assistant_text":"No movement yet. I will fetch 1-hop options.","dialog_type":"scene_description","tool_calls":[{"id":"call_move_options_1","tool":"move_options","args":{"actor_id":"pc_001"}}]}"#;
const EXAMPLE_3_002: &str = r#"{"assistant_text":"You are currently in area_002. The corridor is quiet. What do you do next?","dialog_type":"scene_description","tool_calls":[]}"#;

/// A model that answers the seeds' conversations as the seeds show them:
/// the players' messages below pick the answer; after tool results it
/// narrates.
fn seed_model(req: &ModelRequest) -> ModelReply {
    if req.kind == RequestKind::Content {
        // generate_zone's zone text (seed 000's zone name).
        return ModelReply::narrate(r#"[{"name": "碎石坡驿道", "description": "......"}]"#);
    }
    let after_tools = matches!(
        req.messages.last().map(|m| &**m),
        Some(HistoryEntry::ToolResult { .. })
    );
    let text = last_user_text(req);
    let contract = |answer: &str| {
        parse_reply(answer, TurnFacts::default()).expect("the seed's answer fits the contract")
    };
    match (after_tools, text.as_str()) {
        (true, "I search the room for traps") => ModelReply::narrate(FINAL_001),
        (true, _) => ModelReply::narrate("The tools have answered."),
        (false, "I search the room for traps") => ModelReply::tools([(
            "roll_dice",
            r#"{"dice":"1d20+2","reason":"Investigation check for traps"}"#,
        )]),
        (false, "生成一个靠近我的新区块") => {
            let session = req.context["session_id"].as_str().unwrap_or_default();
            let args = json!({"session_id": session, "world_prompt": "剑与魔法世界", "count": 1, "near_player": true});
            ModelReply::tools([("generate_zone", args.to_string())])
        }
        (false, "I go to area_002") => contract(EXAMPLE_1_002),
        (false, "Where can I go?") => contract(EXAMPLE_2_002),
        (false, "Look around") => contract(EXAMPLE_3_002),
        (false, "Go back, from area_001") => ModelReply::tools([(
            "move",
            r#"{"actor_id":"pc_001","from_area_id":"area_001","to_area_id":"area_001"}"#,
        )]),
        (false, "Heal me") => {
            ModelReply::tools([("roll_dice", r#"{"dice":"1d4","reason":"healing"}"#)])
        }
        (false, "Dig deeper") => ModelReply::tools([(
            "map_generate",
            r#"{"parent_area_id":"area_001","theme":"Cave","constraints":{"size":6,"seed":"alpha"}}"#,
        )]),
        (false, other) => ModelReply::narrate(format!("You said: {other}")),
    }
}

/// A server with [`seed_model`]; a session may chat as often as the
/// seeds' conversations do.
async fn seed_app(adjust: impl FnOnce(&mut questd::Settings)) -> TestApp {
    spawn_with(
        |s| {
            s.chat_burst = 20;
            adjust(s);
        },
        Arc::new(ScriptedProvider::from_fn(|req, _| Ok(seed_model(req)))),
    )
    .await
}

/// Checks a refusal's status and code (`error_type` of a tool call,
/// `error_code` of any other refusal).
fn refused(a: &Answer, status: u16, code: &str) {
    let given = a.body.get("error_type").unwrap_or(&a.body["error_code"]);
    assert_eq!((a.status, given), (status, &json!(code)), "{}", a.body);
}

/// Checks that a tool call succeeded.
fn succeeded(a: &Answer) {
    assert_eq!(
        (a.status, &a.body["success"]),
        (200, &json!(true)),
        "{}",
        a.body
    );
}

/// POSTs `body` to `path` with `headers`.
async fn send(app: &TestApp, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    request("POST", &format!("{}{path}", app.base), headers, Some(body)).await
}

/// A tool API call in a session, with the context headers the contract
/// asks for and the key.
async fn tool_call(app: &TestApp, session: &str, tool: &str, input: Value) -> Answer {
    send(
        app,
        "/api/v1/tools/call",
        &[
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "site-1"),
            ("X-Trace-ID", "trace-seed"),
            ("X-Session-ID", session),
            KEY,
        ],
        &json!({"tool_name": tool, "input": input}),
    )
    .await
}

/// An MCP `tools/call` (protocol 2026-07-28) with the key.
async fn mcp_call(app: &TestApp, tool: &str, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "seeds", "version": "1"},
        }
    }});
    let a = send(
        app,
        "/mcp",
        &[
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
            KEY,
        ],
        &body,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["result"]["isError"], false, "{}", a.body);
    a.body["result"]["structuredContent"].clone()
}

/// `POST /api/v1/chat` as a player, with more headers.
async fn chat(app: &TestApp, s: &Session, message: &str, more: &[(&str, &str)]) -> Answer {
    let auth = format!("Bearer {}", s.player_token);
    let mut headers = vec![("Authorization", auth.as_str())];
    headers.extend_from_slice(more);
    send(
        app,
        "/api/v1/chat",
        &headers,
        &json!({"session_id": s.session_id, "message": message}),
    )
    .await
}

/// Seed 000 (AI 工具协议): the three tools' inputs as the tool API and MCP
/// take them, with a session; their results' fields.
#[actix_web::test]
async fn seed_000_zone_tools_answer_as_the_seed_shows() {
    let app = seed_app(|_| {}).await;
    let s = app.demo().await;
    let sid = s.session_id.as_str();

    // §工具定义 `generate_zone`, 输入参数 (sess_xxx = the session).
    let a = tool_call(
        &app,
        sid,
        "generate_zone",
        json!({"session_id": sid, "world_prompt": "剑与魔法世界", "count": 1, "near_player": true}),
    )
    .await;
    succeeded(&a);
    let out = &a.body["output"];
    assert_eq!(
        (&out["ok"], &out["generated"]),
        (&json!(true), &json!(1)),
        "{out}"
    );
    let zone = &out["zones"][0];
    for field in ["zone_id", "name", "x", "y", "z", "description", "tags"] {
        assert!(!zone[field].is_null(), "返回结果 zones[0].{field}: {out}");
    }
    let zone_id = zone["zone_id"].as_str().unwrap().to_owned();

    // §`move_to_zone`, 输入参数, to the zone just made.
    let a = tool_call(
        &app,
        sid,
        "move_to_zone",
        json!({"session_id": sid, "to_zone_id": zone_id}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let out = &a.body["output"];
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["new_position"]["zone_id"], zone_id.as_str(), "{out}");
    for field in ["x", "y", "z"] {
        assert_eq!(out["new_position"][field], zone[field], "{out}");
    }
    assert!(
        out["duration_min"].is_number() && out["movement_log_id"].is_string(),
        "{out}"
    );

    // §`get_player_state`, 输入参数.
    let a = tool_call(&app, sid, "get_player_state", json!({"session_id": sid})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let out = &a.body["output"];
    assert_eq!(out["ok"], true, "{out}");
    for field in ["player_id", "name", "move_speed_mph"] {
        assert!(
            !out["player_static_data"][field].is_null(),
            "player_static_data.{field}: {out}"
        );
    }
    let runtime = &out["player_runtime_data"];
    assert_eq!(runtime["session_id"], sid, "{out}");
    assert_eq!(
        runtime["current_position"]["zone_id"],
        zone_id.as_str(),
        "{out}"
    );

    // The same three as MCP calls (the model's view of the same tools).
    let out = mcp_call(
        &app,
        "generate_zone",
        json!({"session_id": sid, "world_prompt": "剑与魔法世界", "count": 1, "near_player": true}),
    )
    .await;
    assert_eq!(
        (&out["ok"], &out["generated"]),
        (&json!(true), &json!(1)),
        "{out}"
    );
    let second = out["zones"][0]["zone_id"].as_str().unwrap().to_owned();
    let out = mcp_call(
        &app,
        "move_to_zone",
        json!({"session_id": sid, "to_zone_id": second}),
    )
    .await;
    assert_eq!(
        (&out["ok"], &out["new_position"]["zone_id"]),
        (&json!(true), &json!(second)),
        "{out}"
    );
    let out = mcp_call(&app, "get_player_state", json!({"session_id": sid})).await;
    assert_eq!(out["player_runtime_data"]["session_id"], sid, "{out}");

    // §错误码建议 `SESSION_MISMATCH`: a write naming another session.
    let a = tool_call(
        &app,
        sid,
        "move_to_zone",
        json!({"session_id": "sess_xxx", "to_zone_id": zone_id}),
    )
    .await;
    refused(&a, 400, "SESSION_MISMATCH");
    app.stop().await;
}

/// Seed 000 §总体流程 6 and §前端联动建议: `/api/v1/chat` answers `reply`,
/// `tool_events` and `state_patch`; `X-Trace-ID` names the turn's trace.
#[actix_web::test]
async fn seed_000_chat_answers_reply_tool_events_and_state_patch() {
    let app = seed_app(|_| {}).await;
    let s = app.demo().await;
    let a = chat(
        &app,
        &s,
        "生成一个靠近我的新区块",
        &[("X-Trace-ID", "trace-chat-1")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.body["reply"].as_str().is_some_and(|r| !r.is_empty()),
        "{}",
        a.body
    );
    let events = a.body["tool_events"].as_array().expect("tool_events");
    assert_eq!(events.len(), 1, "{}", a.body);
    assert_eq!(
        (&events[0]["tool"], &events[0]["status"]),
        (&json!("generate_zone"), &json!("ok"))
    );
    // 前端联动建议: the map changed, so the patch carries the new zone and
    // where the player stands, for the client to refresh its map.
    let patch = &a.body["state_patch"];
    let zones = patch["zones"].as_array().expect("state_patch.zones");
    assert_eq!(zones.len(), 1, "{patch}");
    assert!(zones[0]["zone_id"].is_string(), "{patch}");
    for field in ["x", "y", "z"] {
        assert!(patch["zone_position"][field].is_number(), "{patch}");
    }
    assert_eq!(a.body["trace_id"], "trace-chat-1", "{}", a.body);

    // The turn's audit rows carry the caller's trace.
    let ledger = request(
        "GET",
        &format!("{}/api/v1/audit?trace_id=trace-chat-1", app.base),
        &[
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "site-1"),
            ("X-Trace-ID", "t"),
            KEY,
        ],
        None,
    )
    .await;
    assert_eq!(ledger.status, 200, "{}", ledger.body);
    assert!(
        ledger.body.to_string().contains("generate_zone"),
        "the turn's call is in its trace: {}",
        ledger.body
    );

    // Without the header, a fresh trace; a malformed one is refused as on
    // the tool API.
    let a = chat(&app, &s, "Look around", &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.body["trace_id"]
            .as_str()
            .is_some_and(|t| !t.is_empty() && t != "trace-chat-1")
    );
    let long = "t".repeat(129);
    for bad in ["trace with spaces", long.as_str()] {
        let a = chat(&app, &s, "Look around", &[("X-Trace-ID", bad)]).await;
        refused(&a, 400, "CONTEXT_INVALID");
    }
    app.stop().await;
}

/// Seed 001 (GM Protocol) §Complete Conversation Example through
/// `/api/chat`: the first request gets the tool call, the second (with
/// the tool result) the final answer without `toolCalls`.
/// Seed 001's §Initial User Message, as written.
fn seed_001_first_request() -> Value {
    json!({
        "messages": [
            { "role": "system", "content": "You are a Game Master for D&D..." },
            { "role": "user", "content": "I search the room for traps" }
        ]
    })
}

#[actix_web::test]
async fn seed_001_first_request_asks_for_a_roll_of_the_offline_game_master_too() {
    let app = spawn_app().await;
    let first = seed_001_first_request();
    let a = send(&app, "/api/chat", &[KEY], &first).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let calls = a.body["message"]["toolCalls"]
        .as_array()
        .expect("a tool call");
    assert_eq!(calls.len(), 1, "{}", a.body);
    assert_eq!(calls[0]["tool"]["name"], "roll_dice");
    assert_eq!(
        calls[0]["tool"]["args"],
        json!({"dice": "1d20", "reason": "Investigation check for traps"})
    );
}

#[actix_web::test]
async fn seed_001_conversation_runs_through_api_chat() {
    let app = seed_app(|_| {}).await;
    // §Initial User Message.
    let first = seed_001_first_request();
    let a = send(&app, "/api/chat", &[KEY], &first).await;
    assert_eq!(a.status, 200, "{}", a.body);
    // §First LLM Response (with tool call).
    assert_eq!(
        a.body,
        json!({
            "message": {
                "role": "assistant",
                "content": null,
                "toolCalls": [{
                    "id": "call_1",
                    "tool": {
                        "name": "roll_dice",
                        "args": { "dice": "1d20+2", "reason": "Investigation check for traps" }
                    }
                }]
            }
        })
    );
    // §Second Request with Tool Results (the `[...]` and `{ ... }` of the
    // seed filled from §History State).
    let second = json!({
        "messages": [
            { "role": "system", "content": "..." },
            { "role": "user", "content": "I search the room for traps" },
            { "role": "assistant", "content": null, "toolCalls": a.body["message"]["toolCalls"] },
            { "role": "tool", "toolCallId": "call_1", "content": {
                "dice": "1d20+2",
                "total": 15,
                "rolls": [13],
                "modifier": 2,
                "description": "Rolled 1d20+2 for Investigation check for traps: [13] + 2 = 15"
            } }
        ]
    });
    let a = send(&app, "/api/chat", &[KEY], &second).await;
    assert_eq!(a.status, 200, "{}", a.body);
    // §Final LLM Response (no tool calls): `"toolCalls": undefined`.
    assert_eq!(
        a.body,
        json!({"message": {"role": "assistant", "content": FINAL_001}}),
        "the final answer has no toolCalls"
    );
    app.stop().await;
}

/// Seed 001 §Available Tools: the five tools with the seed's arguments,
/// through the tool API in a session.
#[actix_web::test]
async fn seed_001_tools_take_the_seeds_arguments() {
    let app = seed_app(|_| {}).await;
    let s = app.demo().await;
    let sid = s.session_id.as_str();

    // roll_dice {dice, reason} (§Tool Definitions); the result's fields
    // (§2. Frontend Executes Tool).
    let a = tool_call(
        &app,
        sid,
        "roll_dice",
        json!({"dice": "1d20+5", "reason": "Perception check"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let out = &a.body["output"];
    for field in [
        "dice",
        "reason",
        "rolls",
        "modifier",
        "total",
        "description",
    ] {
        assert!(!out[field].is_null(), "roll_dice result {field}: {out}");
    }
    assert_eq!(
        (&out["dice"], &out["modifier"]),
        (&json!("1d20+5"), &json!(5)),
        "{out}"
    );

    // add_inventory {items: [{name, description, quantity}]}.
    let a = tool_call(
        &app,
        sid,
        "add_inventory",
        json!({"items": [{"name": "Healing Potion", "description": "Restores 2d4+2 HP", "quantity": 2}]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["output"]["success"], true, "{}", a.body);
    assert!(a.body["output"]["message"].is_string(), "{}", a.body);

    // update_inventory {updates: [{slug, quantityChange}]}.
    let stats = tool_call(&app, sid, "get_character_stats", json!({})).await;
    let slug = stats.body.to_string().contains("healing_potion");
    assert!(slug, "the potion is in the inventory: {}", stats.body);
    let a = tool_call(
        &app,
        sid,
        "update_inventory",
        json!({"updates": [{"slug": "healing_potion", "quantityChange": -1}]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["output"]["success"], true, "{}", a.body);

    // update_character {hp, maxHp, level, stats}.
    let a = tool_call(
        &app,
        sid,
        "update_character",
        json!({"hp": 9, "maxHp": 14, "level": 2, "stats": {"str": 14}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["output"]["success"], true, "{}", a.body);

    // get_character_stats (none).
    let a = tool_call(&app, sid, "get_character_stats", json!({})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let shown = a.body["output"].to_string();
    assert!(
        shown.contains("\"hp\":9") && shown.contains("\"max_hp\":14"),
        "{shown}"
    );
    app.stop().await;
}

/// Seed 002 (Tools, Stage 3): the model's schema-accurate examples run in
/// a turn; the result payloads and the failure feedback.
#[actix_web::test]
async fn seed_002_tool_calls_results_and_failures() {
    let app = seed_app(|_| {}).await;
    // §Allowed Tools (default allowlist), on the demo map.
    let mut campaign: Value =
        serde_json::from_str(include_str!("../../src/game/campaigns/demo.json")).unwrap();
    campaign["allowlist"] = json!(["move", "move_options", "hp_delta", "map_generate"]);
    let s = app.create_session(json!({"campaign": campaign})).await;

    // Example 1: move, with the seed's result payload (§Applied Actions).
    let a = chat(&app, &s, "I go to area_002", &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["tool_events"][0]["status"], "ok", "{}", a.body);
    let actions = app.actions(&s).await;
    let mv = actions
        .iter()
        .find(|x| x["tool"] == "move")
        .expect("the move is logged");
    assert_eq!(
        mv["args"],
        json!({"actor_id": "pc_001", "to_area_id": "area_002"})
    );
    assert_eq!(
        (&mv["result"]["from_area_id"], &mv["result"]["to_area_id"]),
        (&json!("area_001"), &json!("area_002")),
        "{mv}"
    );
    assert!(mv["timestamp"].is_string(), "{mv}");

    // Example 2: move_options, no movement (§Move options result payload).
    let a = chat(&app, &s, "Where can I go?", &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.body["tool_events"][0]["tool"], "move_options",
        "{}",
        a.body
    );
    let actions = app.actions(&s).await;
    let options = actions
        .iter()
        .rev()
        .find(|x| x["tool"] == "move_options")
        .expect("logged");
    let first = &options["result"]["options"][0];
    assert!(
        first["to_area_id"].is_string() && first["name"].is_string(),
        "{options}"
    );
    assert_eq!(position(&app.snapshot(&s).await), "area_002", "no movement");

    // Example 3: no tool call, a non-empty answer.
    let a = chat(&app, &s, "Look around", &[]).await;
    assert_eq!(
        (&a.body["reply"], &a.body["tool_events"]),
        (
            &json!("You are currently in area_002. The corridor is quiet. What do you do next?"),
            &json!([])
        ),
        "{}",
        a.body
    );

    // map_generate with constraints {"size":6,"seed":"alpha"} (§Map
    // generation result payload).
    let a = chat(&app, &s, "Dig deeper", &[]).await;
    assert_eq!(a.body["tool_events"][0]["status"], "ok", "{}", a.body);
    let actions = app.actions(&s).await;
    let map = actions
        .iter()
        .rev()
        .find(|x| x["tool"] == "map_generate")
        .expect("logged");
    let result = &map["result"];
    assert!(
        result["created_area_ids"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{map}"
    );
    assert!(result["created_connections"].is_number(), "{map}");
    assert_eq!(result["root_parent_area_id"], "area_001", "{map}");
    assert!(result["warnings"].is_array(), "{map}");

    // §Tool Feedback (Failures): from_area_id given -> invalid_args (an
    // `error`), a tool outside the allowlist -> rejected/tool_not_allowed.
    let a = chat(&app, &s, "Go back, from area_001", &[]).await;
    let e = &a.body["tool_events"][0];
    assert_eq!(
        (&e["tool"], &e["status"], &e["reason"]),
        (&json!("move"), &json!("error"), &json!("invalid_args")),
        "{}",
        a.body
    );
    let a = chat(&app, &s, "Heal me", &[]).await;
    let e = &a.body["tool_events"][0];
    assert_eq!(
        (&e["tool"], &e["status"], &e["reason"]),
        (
            &json!("roll_dice"),
            &json!("rejected"),
            &json!("tool_not_allowed")
        ),
        "{}",
        a.body
    );
    app.stop().await;
}

/// The context headers of seed 003's curl examples, and the key.
fn yantian_headers(trace: &str) -> Vec<(&str, &str)> {
    vec![
        ("X-Tenant-ID", "yantian"),
        ("X-Site-ID", "yantian-main"),
        ("X-Trace-ID", trace),
        KEY,
    ]
}

/// Seed 003 (工具服务指南) §curl 示例 1–5, exactly, against the site
/// `yantian-main` (docs/protocol.md §1.12.1) made from the fixture campaign.
#[actix_web::test]
async fn seed_003_curl_examples_against_a_site() {
    let app = seed_app(|_| {}).await;
    let campaign: Value = serde_json::from_str(YANTIAN).unwrap();
    let put = request(
        "PUT",
        &format!("{}/api/v1/sites/yantian-main", app.base),
        &[("X-Tenant-ID", "yantian"), KEY],
        Some(&json!({"campaign": campaign})),
    )
    .await;
    assert!(
        matches!(put.status, 200 | 201),
        "{} {}",
        put.status,
        put.body
    );

    // Each curl line sends `X-Trace-ID: trace-$(date +%s)`; curl 2-5 also
    // name a trace in the body's context (trace-001 ...), which differs.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let date_trace = format!("trace-{secs}");

    // curl 1: 获取工具列表.
    let a = send(
        &app,
        "/api/tools/list",
        &yantian_headers(&date_trace),
        &json!({"ai_callable_only": true}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let tools = a.body["tools"].as_array().expect("tools");
    assert_eq!(a.body["total"], tools.len(), "{}", a.body);
    for name in [
        "get_npc_profile",
        "search_content",
        "get_site_map",
        "create_draft_content",
        "log_user_event",
        "get_prompt_active",
    ] {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        for field in [
            "version",
            "description",
            "category",
            "input_schema",
            "output_schema",
            "requires_auth",
            "ai_callable",
        ] {
            assert!(!t[field].is_null(), "{name}.{field}");
        }
    }

    // curl 2: 搜索内容.
    let a = send(
        &app,
        "/api/tools/call",
        &yantian_headers(&date_trace),
        &json!({
            "tool_name": "search_content",
            "input": {"query": "严氏家训", "limit": 5},
            "context": {"tenant_id": "yantian", "site_id": "yantian-main", "trace_id": "trace-001"}
        }),
    )
    .await;
    succeeded(&a);
    let out = &a.body["output"];
    assert_eq!(out["query"], "严氏家训", "{out}");
    assert!(out["total"].as_u64().is_some_and(|n| n >= 1), "{out}");
    let item = &out["items"][0];
    assert_eq!(
        (&item["title"], &item["content_type"]),
        (&json!("严氏家训十则"), &json!("knowledge")),
        "{out}"
    );
    for field in ["id", "body", "credibility_score", "verified"] {
        assert!(!item[field].is_null(), "items[0].{field}: {out}");
    }
    let audit = &a.body["audit"];
    assert_eq!(
        (&audit["trace_id"], &audit["tool_name"], &audit["status"]),
        (
            &json!(date_trace),
            &json!("search_content"),
            &json!("success")
        ),
        "{audit}"
    );
    assert!(
        audit["latency_ms"].is_number() && audit["request_payload_hash"].is_string(),
        "{audit}"
    );

    // curl 3: 获取 NPC 人设.
    let a = send(
        &app,
        "/api/tools/call",
        &yantian_headers(&date_trace),
        &json!({
            "tool_name": "get_npc_profile",
            "input": {"npc_id": "ancestor_yan"},
            "context": {"tenant_id": "yantian", "site_id": "yantian-main", "trace_id": "trace-002"}
        }),
    )
    .await;
    succeeded(&a);
    let out = &a.body["output"];
    assert_eq!(
        (
            &out["npc_id"],
            &out["version"],
            &out["active"],
            &out["name"]
        ),
        (
            &json!("ancestor_yan"),
            &json!(1),
            &json!(true),
            &json!("严氏先祖")
        ),
        "{out}"
    );
    assert_eq!(
        out["knowledge_domains"],
        json!(["严氏家族历史", "祖训家规"]),
        "{out}"
    );
    assert_eq!(
        out["greeting_templates"][0], "后生来了？坐下说话。",
        "{out}"
    );
    assert_eq!(
        (&out["max_response_length"], &out["must_cite_sources"]),
        (&json!(500), &json!(true)),
        "{out}"
    );
    assert!(!out["persona"].is_null(), "{out}");

    // curl 4: 创建草稿内容.
    let a = send(
        &app,
        "/api/tools/call",
        &yantian_headers(&date_trace),
        &json!({
            "tool_name": "create_draft_content",
            "input": {
                "content_type": "knowledge",
                "title": "严田村古井传说",
                "body": "村中心的古井相传有千年历史...",
                "tags": ["传说", "古井"]
            },
            "context": {"tenant_id": "yantian", "site_id": "yantian-main", "trace_id": "trace-003"}
        }),
    )
    .await;
    succeeded(&a);
    let out = &a.body["output"];
    assert_eq!(out["status"], "draft", "{out}");
    assert!(
        out["content_id"].is_string() && out["created_at"].is_string(),
        "{out}"
    );

    // curl 5: 获取 Prompt.
    let a = send(
        &app,
        "/api/tools/call",
        &yantian_headers(&date_trace),
        &json!({
            "tool_name": "get_prompt_active",
            "input": {"npc_id": "ancestor_yan", "prompt_type": "system"},
            "context": {"tenant_id": "yantian", "site_id": "yantian-main", "trace_id": "trace-004"}
        }),
    )
    .await;
    succeeded(&a);
    let out = &a.body["output"];
    assert_eq!(
        (&out["npc_id"], &out["prompt_type"]),
        (&json!("ancestor_yan"), &json!("system")),
        "{out}"
    );
    assert!(
        out["prompt_text"]
            .as_str()
            .is_some_and(|t| t.starts_with("你是严氏先祖")),
        "{out}"
    );
    assert!(out["version"].is_number(), "{out}");
    assert_eq!(out["metadata"]["name"], "严氏先祖", "{out}");
    assert!(out["metadata"]["knowledge_domains"].is_array(), "{out}");

    // §可用工具 3 get_site_map and 5 log_user_event, at site level.
    let a = send(
        &app,
        "/tools/call",
        &yantian_headers("trace-005"),
        &json!({
            "tool_name": "get_site_map", "input": {"include_pois": true}
        }),
    )
    .await;
    succeeded(&a);
    let out = &a.body["output"];
    assert_eq!(
        (&out["site_id"], &out["site_name"]),
        (&json!("yantian-main"), &json!("严田古村")),
        "{out}"
    );
    let poi = out["pois"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "严氏祠堂"));
    assert!(
        poi.is_some_and(|p| p["id"].is_string() && p["type"].is_string()),
        "{out}"
    );
    assert!(out["routes"].is_array(), "{out}");
    let mut headers = yantian_headers("trace-006");
    headers.push(("X-User-ID", "user-xxx"));
    let a = send(&app, "/tools/call", &headers, &json!({
        "tool_name": "log_user_event", "input": {"event_type": "visit", "event_data": {"poi": "严氏祠堂"}}
    })).await;
    succeeded(&a);
    assert!(
        a.body["output"]["event_id"].is_string() && a.body["output"]["logged_at"].is_string(),
        "{}",
        a.body
    );

    // §API 接口 响应（失败）: an unknown NPC.
    let a = send(
        &app,
        "/api/tools/call",
        &yantian_headers("trace-007"),
        &json!({
            "tool_name": "get_npc_profile", "input": {"npc_id": "unknown_npc"}
        }),
    )
    .await;
    assert_eq!(a.body["success"], false, "{}", a.body);
    assert!(
        a.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown_npc")),
        "{}",
        a.body
    );
    assert_eq!(a.body["audit"]["status"], "error", "{}", a.body);
    app.stop().await;
}

/// Seed 003 §POST /tools/call 请求头（可选）`X-NPC-ID`, and the tool
/// API's paths (docs/protocol.md §1.12): in a session, so it needs no site.
#[actix_web::test]
async fn seed_003_npc_header_and_tool_paths() {
    let app = seed_app(|_| {}).await;
    let s = app.demo().await;
    let headers = |npc: &'static str| {
        vec![
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "site-1"),
            ("X-Trace-ID", "trace-npc"),
            ("X-Session-ID", s.session_id.as_str()),
            ("X-NPC-ID", npc),
            KEY,
        ]
    };
    for path in ["/api/v1/tools/call", "/api/tools/call", "/tools/call"] {
        let a = send(
            &app,
            path,
            &headers("npc_maren"),
            &json!({"tool_name": "get_npc_profile", "input": {}}),
        )
        .await;
        assert_eq!(
            (a.status, &a.body["success"]),
            (200, &json!(true)),
            "{path}: {}",
            a.body
        );
        assert_eq!(
            a.body["output"]["npc_id"], "npc_maren",
            "{path}: {}",
            a.body
        );
    }
    // An npc_id in the input wins over the header.
    let a = send(
        &app,
        "/tools/call",
        &headers("no_such_npc"),
        &json!({"tool_name": "get_prompt_active", "input": {"npc_id": "npc_maren", "prompt_type": "greeting"}}),
    )
    .await;
    assert_eq!(a.body["success"], true, "{}", a.body);
    assert!(a.body.to_string().contains("Mind the hooks"), "{}", a.body);
    // The list paths are the same endpoint, with the same guard.
    let mut lists = Vec::new();
    for path in ["/api/v1/tools/list", "/api/tools/list", "/tools/list"] {
        let a = send(&app, path, &headers("npc_maren"), &json!({})).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        lists.push(a.body);
        let unkeyed = send(
            &app,
            path,
            &[
                ("X-Tenant-ID", "default"),
                ("X-Site-ID", "s"),
                ("X-Trace-ID", "t"),
            ],
            &json!({}),
        )
        .await;
        assert_eq!(unkeyed.status, 401, "{path} needs a key: {}", unkeyed.body);
    }
    assert!(lists.windows(2).all(|w| w[0] == w[1]));
    // The site fixture of seed 003 is a campaign any session may start.
    let campaign: Value = serde_json::from_str(YANTIAN).unwrap();
    let yantian = app.create_session(json!({"campaign": campaign})).await;
    assert!(!yantian.session_id.is_empty());
    app.stop().await;
}

/// Seed 004 (LLM Function Calling API) §7.1 系统级错误 as questd names
/// them: `TOOL_DISABLED` 403 for a tool in `QUESTD_DISABLED_TOOLS` (and
/// no listing shows it), `INVALID_ARGS` 400 (the seed's
/// `INVALID_ARGUMENTS`), `TOOL_NOT_FOUND` 404, `CONTEXT_INVALID` 400.
#[actix_web::test]
async fn seed_004_error_codes_and_disabled_tools() {
    let app = seed_app(|s| s.disabled_tools = Some("roll_dice, hp_delta".into())).await;
    let s = app.demo().await;
    let sid = s.session_id.as_str();

    let a = tool_call(
        &app,
        sid,
        "roll_dice",
        json!({"dice": "1d20", "reason": "r"}),
    )
    .await;
    refused(&a, 403, "TOOL_DISABLED");
    let a = tool_call(&app, sid, "move", json!({"actor_id": 7})).await;
    refused(&a, 400, "INVALID_ARGS");
    let a = tool_call(&app, sid, "create_new_intent", json!({})).await;
    refused(&a, 404, "TOOL_NOT_FOUND");
    let a = send(
        &app,
        "/api/v1/tools/call",
        &[("X-Tenant-ID", "default"), ("X-Site-ID", "site-1"), KEY],
        &json!({"tool_name": "move_options", "input": {}}),
    )
    .await;
    refused(&a, 400, "CONTEXT_INVALID");

    // Disabled tools are in no listing: the tool API, MCP, the model's.
    let list = send(
        &app,
        "/api/v1/tools/list",
        &[
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "site-1"),
            ("X-Trace-ID", "t"),
            KEY,
        ],
        &json!({}),
    )
    .await;
    let names = list.body["tools"].to_string();
    assert!(
        !names.contains("\"roll_dice\"") && !names.contains("\"hp_delta\""),
        "{names}"
    );
    assert!(names.contains("\"move\""), "{names}");
    app.stop().await;
}

/// `QUESTD_DISABLED_TOOLS` naming no tool refuses to start, saying which.
#[actix_web::test]
async fn an_unknown_disabled_tool_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings_in(&dir);
    settings.disabled_tools = Some("roll_dice,create_new_intent".into());
    let built = questd::Application::build_with(
        settings,
        Arc::new(questd::llm::OfflineGameMaster::default()),
    )
    .await;
    let e = built.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        e.contains("QUESTD_DISABLED_TOOLS") && e.contains("create_new_intent"),
        "{e}"
    );
}
