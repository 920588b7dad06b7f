//! Hostile input through real sockets: each attack of the security review,
//! done as an outsider would, with the refusal it now gets and a check that
//! nothing changed (state, journal, actions).

use std::sync::Arc;

use crate::common::*;
use questd::llm::{ModelReply, ScriptedProvider};
use serde_json::{Value, json};

/// The hero's area and HP, and the session's actions: what an attack must
/// not change.
async fn footprint(app: &TestApp, s: &Session) -> (String, Value, usize) {
    let snap = app.snapshot(s).await;
    (
        position(&snap),
        snap["characters"][0]["hp"].clone(),
        app.actions(s).await.len(),
    )
}

#[actix_web::test]
async fn only_public_sessions_are_listed_and_never_with_a_player_token() {
    let app = spawn_app().await;
    let private = app.demo().await;
    let public = app.public_demo().await;
    let list = request("GET", &format!("{}/api/v1/sessions", app.base), &[], None).await;
    assert_eq!(list.status, 200);
    let text = list.body.to_string();
    assert!(!text.contains(&private.session_id), "{text}");
    assert!(!text.contains(&private.spectator_token), "{text}");
    assert!(!text.contains(&public.player_token), "{text}");
    let rows = list.body.as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["spectator_token"], public.spectator_token.as_str());
    // Naming another tenant without its key lists nothing: the header
    // alone grants nothing (security_edge.rs has the whole rule).
    let other = request(
        "GET",
        &format!("{}/api/v1/sessions", app.base),
        &[("X-Tenant-ID", "default2")],
        None,
    )
    .await;
    assert_eq!(other.status, 401, "{}", other.body);
}

#[actix_web::test]
async fn a_tenant_header_alone_changes_no_session_over_any_route() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let before = footprint(&app, &s).await;
    let target = neighbour(&app.snapshot(&s).await);
    let victim = [
        ("X-Tenant-ID", "default"),
        ("X-Site-ID", "anything"),
        ("X-Trace-ID", "t-1"),
        ("X-Session-ID", s.session_id.as_str()),
    ];
    let url = format!("{}/api/v1/tools/call", app.base);
    for (tool, input) in [
        ("move", json!({"actor_id": "pc_001", "to_area_id": target})),
        (
            "hp_delta",
            json!({"target_character_id": "pc_001", "delta": -5}),
        ),
        (
            "update_character",
            json!({"character_id": "pc_001", "hp": 1}),
        ),
        (
            "update_inventory",
            json!({"character_id": "pc_001", "item": "gold", "quantity": 99}),
        ),
    ] {
        let a = request(
            "POST",
            &url,
            &victim,
            Some(&json!({"tool_name": tool, "input": input})),
        )
        .await;
        assert_eq!(
            (a.status, a.body["error_code"].as_str()),
            (401, Some("UNAUTHORIZED")),
            "{tool}: {}",
            a.body
        );
        // A role claim without a key is no better.
        let mut claimed = victim.to_vec();
        claimed.push(("X-User-Role", "owner"));
        let a = request(
            "POST",
            &url,
            &claimed,
            Some(&json!({"tool_name": tool, "input": input})),
        )
        .await;
        assert_eq!(a.status, 401, "{tool} with a role: {}", a.body);
    }
    // A key that is not the server's is refused too.
    let mut forged = victim.to_vec();
    forged.push(("X-Internal-API-Key", "guess"));
    let a = request(
        "POST",
        &url,
        &forged,
        Some(&json!({"tool_name": "move", "input": {"actor_id": "pc_001", "to_area_id": target}})),
    )
    .await;
    assert_eq!(a.status, 401);
    // MCP without a key: nothing runs.
    let mcp = request(
        "POST",
        &format!("{}/mcp", app.base),
        &[("Accept", "application/json, text/event-stream"), ("X-Session-ID", s.session_id.as_str())],
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "move", "arguments": {"session_id": s.session_id, "actor_id": "pc_001", "to_area_id": target}}})),
    )
    .await;
    assert_eq!(mcp.status, 401, "{}", mcp.body);
    // The snapshot, the actions log and the audit ledger need a credential
    // of the session; a spectator token reads but never changes.
    for path in ["", "/actions", "/audit"] {
        let a = request(
            "GET",
            &format!("{}/api/v1/sessions/{}{path}", app.base, s.session_id),
            &[("X-Tenant-ID", "default")],
            None,
        )
        .await;
        assert_eq!(a.status, 401, "{path}");
    }
    let activate = request(
        "POST",
        &format!(
            "{}/api/v1/sessions/{}/npcs/npc_001/activate",
            app.base, s.session_id
        ),
        &[("Authorization", &format!("Bearer {}", s.spectator_token))],
        None,
    )
    .await;
    assert_eq!(activate.status, 403, "{}", activate.body);
    let chat = request(
        "POST",
        &format!("{}/api/v1/chat", app.base),
        &[("X-Tenant-ID", "default")],
        Some(&json!({"session_id": s.session_id, "message": format!("go to {target}")})),
    )
    .await;
    assert_eq!(chat.status, 401);
    assert_eq!(footprint(&app, &s).await, before, "nothing changed");
}

#[actix_web::test]
async fn a_tenant_key_acts_only_for_its_tenant() {
    let app =
        spawn_offline(|s| s.tenant_keys = Some("acme:acme-key,globex:globex-key".into())).await;
    let url = format!("{}/api/v1/sessions", app.base);
    let create = |key: &'static str| {
        let url = url.clone();
        async move {
            request(
                "POST",
                &url,
                &[("X-Internal-API-Key", key)],
                Some(&json!({"campaign_id": "demo"})),
            )
            .await
        }
    };
    let acme = create("acme-key").await;
    assert_eq!(acme.status, 201, "{}", acme.body);
    let id = acme.body["session_id"].as_str().unwrap().to_owned();
    // Anonymous callers cannot put a session into a tenant.
    let a = request(
        "POST",
        &url,
        &[("X-Tenant-ID", "acme")],
        Some(&json!({"campaign_id": "demo"})),
    )
    .await;
    assert_eq!(a.status, 401, "{}", a.body);
    // globex's key with its own tenant: acme's session looks unknown.
    let headers = |key: &'static str, tenant: &'static str| {
        vec![
            ("X-Internal-API-Key", key),
            ("X-Tenant-ID", tenant),
            ("X-Site-ID", "site"),
            ("X-Trace-ID", "trace"),
        ]
    };
    let call = json!({"tool_name": "hp_delta", "input": {"session_id": id, "target_character_id": "pc_001", "delta": -3}});
    let hp_of = |snap: &Value| snap["characters"][0]["hp"].as_i64().unwrap();
    let read = |key: &'static str| {
        let url = format!("{}/api/v1/sessions/{id}", app.base);
        async move { request("GET", &url, &[("X-Internal-API-Key", key)], None).await }
    };
    let snap = read("acme-key").await;
    assert_eq!(snap.status, 200, "{}", snap.body);
    let hp_before = hp_of(&snap.body);
    let tools = format!("{}/api/v1/tools/call", app.base);
    let a = request(
        "POST",
        &tools,
        &headers("globex-key", "globex"),
        Some(&call),
    )
    .await;
    assert_eq!(
        (a.status, a.body["success"].as_bool()),
        (404, Some(false)),
        "{}",
        a.body
    );
    // globex's key naming acme: refused outright.
    let a = request("POST", &tools, &headers("globex-key", "acme"), Some(&call)).await;
    assert_eq!(a.status, 403, "{}", a.body);
    // acme's own key changes acme's session, and only that one.
    let a = request("POST", &tools, &headers("acme-key", "acme"), Some(&call)).await;
    assert_eq!(
        (a.status, a.body["success"].as_bool()),
        (200, Some(true)),
        "{}",
        a.body
    );
    assert_eq!(
        hp_of(&read("acme-key").await.body),
        hp_before - 3,
        "one hit, acme's own"
    );
    assert_eq!(
        read("globex-key").await.status,
        404,
        "another tenant's key reads nothing"
    );
}

#[actix_web::test]
async fn a_campaign_with_a_flood_of_links_is_refused_and_nothing_is_created() {
    let app = spawn_app().await;
    let flood: Vec<&str> = vec!["area_002"; 40_000];
    let back: Vec<&str> = vec!["area_001"; 40_000];
    let campaign = json!({
        "campaign_id": "flood", "title": "Flood", "allowlist": ["move", "move_options"],
        "active_actor_id": "pc_001",
        "areas": [
            {"area_id": "area_001", "name": "A", "description": "a", "reachable_area_ids": flood, "x": 0, "y": 0, "z": 0},
            {"area_id": "area_002", "name": "B", "description": "b", "reachable_area_ids": back, "x": 1, "y": 0, "z": 0}
        ],
        "characters": [{"character_id": "pc_001", "name": "P", "kind": "pc", "area_id": "area_001", "hp": 5, "max_hp": 5}]
    });
    let a = request(
        "POST",
        &format!("{}/api/v1/sessions", app.base),
        &[],
        Some(&json!({"campaign": campaign})),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("INVALID_CAMPAIGN")),
        "{}",
        a.body
    );
    let problems = a.body["problems"].to_string();
    assert!(problems.contains("reachable_area_ids"), "{problems}");
    assert!(problems.len() < 20_000, "the problems list is bounded");
}

#[actix_web::test]
async fn a_huge_request_id_is_refused_and_stored_nowhere() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut ws, welcome) = app.connect(&s.session_id, &s.player_token, None).await;
    let huge = "r".repeat(10_000);
    ws.chat("where can I go", &huge).await;
    // A presence frame for this very connection may come first.
    let error = ws.until(|f| f["type"] != "presence").await.pop().unwrap();
    assert_eq!(
        (error["type"].as_str(), error["error_code"].as_str()),
        (Some("error"), Some("INVALID_FRAME")),
        "{error}"
    );
    assert!(error["request_id"].is_null(), "the id is not echoed");
    // The connection lives on, and nothing was journalled for it.
    ws.send_json(&json!({"type": "ping", "nonce": 7})).await;
    let pong = ws.until(|f| f["type"] != "presence").await.pop().unwrap();
    assert_eq!(pong["type"], "pong");
    let a = request(
        "POST",
        &format!("{}/api/v1/chat", app.base),
        &[("Authorization", &format!("Bearer {}", s.player_token))],
        Some(&json!({"session_id": s.session_id, "message": "status", "request_id": "x".repeat(129)})),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let snap = app.snapshot(&s).await;
    assert_eq!(
        snap["turn"], welcome["state"]["turn"],
        "no turn was started"
    );
    assert!(app.actions(&s).await.is_empty());
    // At the bound it is fine.
    let ok = "é".repeat(128);
    let frames = ws.play("status", &ok).await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

#[actix_web::test]
async fn dice_and_hp_extremes_are_refused_without_changing_anything() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let before = footprint(&app, &s).await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("roll 1d6--9223372036854775808", "d-1").await;
    assert!(
        !frames
            .iter()
            .any(|f| f["type"] == "tool_result" && f["tool"] == "roll_dice" && f["status"] == "ok"),
        "{frames:?}"
    );
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "the turn ends normally"
    );
    let tools = format!("{}/api/v1/tools/call", app.base);
    let service = [
        ("X-Internal-API-Key", TEST_KEY),
        ("X-Tenant-ID", "default"),
        ("X-Site-ID", "site"),
        ("X-Trace-ID", "trace"),
        ("X-Session-ID", s.session_id.as_str()),
    ];
    for input in [
        json!({"target_character_id": "pc_001", "delta": i64::MIN}),
        json!({"target_character_id": "pc_001", "delta": i64::MAX}),
        json!({"target_character_id": "pc_001", "delta": 1e300}),
    ] {
        let a = request(
            "POST",
            &tools,
            &service,
            Some(&json!({"tool_name": "hp_delta", "input": input})),
        )
        .await;
        assert_eq!(a.body["success"], false, "{input}: {}", a.body);
        assert!(a.status == 400 || a.status == 422, "{input}: {}", a.status);
    }
    for input in [
        json!({"dice": "1d6-9223372036854775808", "reason": "test"}),
        json!({"dice": "1d6--9223372036854775808", "reason": "test"}),
        json!({"dice": "9223372036854775807d6", "reason": "test"}),
        json!({"dice": "1d9223372036854775807", "reason": "test"}),
    ] {
        let a = request(
            "POST",
            &tools,
            &service,
            Some(&json!({"tool_name": "roll_dice", "input": input})),
        )
        .await;
        assert_eq!(a.body["success"], false, "{input}: {}", a.body);
    }
    let after = footprint(&app, &s).await;
    assert_eq!(
        (&after.0, &after.1),
        (&before.0, &before.1),
        "hero unchanged"
    );
}

#[actix_web::test]
async fn session_creation_is_limited_per_address_and_per_node() {
    let app = spawn_offline(|s| {
        s.create_burst = 3;
        s.create_per_minute = 1;
        s.max_sessions = 6;
        // The node's cap, not one tenant's share of it, is what this tries.
        s.max_sessions_per_tenant = Some(6);
    })
    .await;
    let url = format!("{}/api/v1/sessions", app.base);
    let body = json!({"campaign_id": "demo"});
    for _ in 0..3 {
        assert_eq!(request("POST", &url, &[], Some(&body)).await.status, 201);
    }
    let a = request("POST", &url, &[], Some(&body)).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (429, Some("RATE_LIMITED"))
    );
    assert!(
        a.retry_after
            .is_some_and(|s| s.parse::<u64>().unwrap() >= 1)
    );
    // A key is not limited per address, but the node holds at most 6.
    let keyed = [("X-Internal-API-Key", TEST_KEY)];
    for _ in 0..3 {
        assert_eq!(request("POST", &url, &keyed, Some(&body)).await.status, 201);
    }
    let a = request("POST", &url, &keyed, Some(&body)).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (503, Some("OVERLOADED")),
        "{}",
        a.body
    );
    assert!(a.retry_after.is_some());
}

#[actix_web::test]
async fn websockets_are_capped_per_address_and_per_session_before_the_upgrade() {
    let app = spawn_offline(|s| {
        s.max_address_connections = 3;
        s.max_session_connections = 2;
    })
    .await;
    let a = app.demo().await;
    let b = app.demo().await;
    let (_p, _) = app.connect(&a.session_id, &a.player_token, None).await;
    let (_w, _) = app.connect(&a.session_id, &a.spectator_token, None).await;
    let full = app.ws_url(&a.session_id, &a.spectator_token, None);
    assert_eq!(
        Ws::refused_status(&full).await,
        429,
        "a third on one session"
    );
    let (_b1, _) = app.connect(&b.session_id, &b.player_token, None).await;
    let more = app.ws_url(&b.session_id, &b.spectator_token, None);
    assert_eq!(
        Ws::refused_status(&more).await,
        429,
        "a fourth from one address"
    );
    // Closing one frees its place.
    drop(_b1);
    let mut freed = false;
    for _ in 0..100 {
        if client().ws(more.as_str()).connect().await.is_ok() {
            freed = true;
            break;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(freed, "a closed connection gives its place back");
}

#[actix_web::test]
async fn a_down_model_endpoint_is_reported_without_its_url() {
    let app = spawn_with(
        |_| {},
        questd::startup::provider_from(&{
            let mut s = questd::Settings::for_tests("sqlite://unused.db");
            s.llm_provider = questd::config::LlmProvider::Openai;
            s.llm_base_url = Some("http://127.0.0.1:9/v1".into());
            s.llm_model = Some("m".into());
            s.llm_api_key = Some("sk-secret-model-key".into());
            s
        })
        .unwrap(),
    )
    .await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("where can I go", "m-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "UPSTREAM_ERROR");
    let all = serde_json::to_string(&frames).unwrap();
    for leak in ["127.0.0.1:9", "http://", "sk-secret"] {
        assert!(!all.contains(leak), "{leak} in {all}");
    }
    // /api/chat with this model needs a key; with one, the same short reason.
    let url = format!("{}/api/chat", app.base);
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(request("POST", &url, &[], Some(&body)).await.status, 401);
    let a = request(
        "POST",
        &url,
        &[("X-Internal-API-Key", TEST_KEY)],
        Some(&body),
    )
    .await;
    assert_eq!(a.body["error_code"], "UPSTREAM_ERROR", "{}", a.body);
    let text = a.body.to_string();
    assert!(
        !text.contains("127.0.0.1:9") && !text.contains("http://"),
        "{text}"
    );
}

#[actix_web::test]
async fn the_anonymous_stateless_chat_is_rate_limited_per_address() {
    let app = spawn_app().await;
    let url = format!("{}/api/chat", app.base);
    let body = json!({"messages": [{"role": "user", "content": "roll 1d20 for luck"}]});
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(request("POST", &url, &[], Some(&body)).await.status);
    }
    assert!(statuses[..10].iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(statuses[11], 429, "{statuses:?}");
    // A key holder is limited by its service rate, not per address.
    let a = request(
        "POST",
        &url,
        &[("X-Internal-API-Key", TEST_KEY)],
        Some(&body),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
}

#[actix_web::test]
async fn metrics_can_be_put_behind_a_key() {
    let app = spawn_offline(|s| s.metrics_key = Some("m-key".into())).await;
    let url = format!("{}/metrics", app.base);
    assert_eq!(request("GET", &url, &[], None).await.status, 401);
    let wrong = request("GET", &url, &[("Authorization", "Bearer nope")], None).await;
    assert_eq!(wrong.status, 401);
    let mut resp = client()
        .get(&url)
        .insert_header(("Authorization", "Bearer m-key"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.body().await.unwrap();
    assert!(String::from_utf8_lossy(&text).contains("questd_"));
}

#[actix_web::test]
async fn a_model_that_floods_calls_and_arguments_is_bounded() {
    let model = ScriptedProvider::from_fn(|req, _| {
        let after_tools = matches!(
            req.messages.last().map(|m| &**m),
            Some(questd::game::HistoryEntry::ToolResult { .. })
        );
        Ok(if after_tools {
            ModelReply::narrate("Enough.")
        } else {
            let big = format!("{{\"dice\":\"1d6\",\"reason\":\"{}\"}}", "x".repeat(40_000));
            let mut calls: Vec<(String, String)> = (0..40)
                .map(|i| {
                    (
                        "roll_dice".to_owned(),
                        format!("{{\"dice\":\"1d{}\",\"reason\":\"r\"}}", i + 2),
                    )
                })
                .collect();
            calls[0] = ("roll_dice".to_owned(), big);
            calls[1] = ("x".repeat(5_000), "{}".to_owned());
            ModelReply::tools(calls)
        })
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("go wild", "w-1").await;
    let calls: Vec<&Value> = frames.iter().filter(|f| f["type"] == "tool_call").collect();
    assert_eq!(calls.len(), 16, "at most 16 calls of one answer run");
    let results: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 16);
    assert_eq!(results[0]["reason"], "invalid_args", "{}", results[0]);
    assert!(calls[0]["args"].to_string().len() < 200, "{}", calls[0]);
    assert!(calls[1]["tool"].as_str().unwrap().len() <= 64);
    for f in &frames {
        assert!(
            f.to_string().len() < 32 * 1024,
            "frame too big: {} bytes",
            f.to_string().len()
        );
    }
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

#[actix_web::test]
async fn a_panic_inside_a_session_is_survived_and_the_session_reloads() {
    let model = ScriptedProvider::from_fn(|req, _| {
        let text = req
            .messages
            .iter()
            .rev()
            .find_map(|m| match &**m {
                questd::game::HistoryEntry::User { text, .. } => Some(text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        assert!(text != "crash now", "a bug in the game master");
        Ok(ModelReply::narrate(format!("You said {text}.")))
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let other = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "p-1").await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
    ws.chat("crash now", "p-2").await;
    // The connection is told, or simply closed; either way it ends.
    while let Some(f) = ws.try_next_json(FRAME_WAIT).await {
        if f["type"] == "error" {
            break;
        }
    }
    // The same session comes back from its journal and plays on.
    let mut back = None;
    for _ in 0..100 {
        let (status, _) = get(
            &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
            Some(&s.player_token),
        )
        .await;
        if status == 200 {
            back = Some(status);
            break;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(back, Some(200));
    let (mut again, welcome) = app.connect(&s.session_id, &s.player_token, Some(0)).await;
    assert!(
        welcome["seq"].as_u64().unwrap() >= 4,
        "the first turn is still there: {welcome}"
    );
    let frames = again.play("hello again", "p-3").await;
    assert!(
        frames.iter().any(|f| f["type"] == "turn_completed"),
        "{frames:?}"
    );
    // Other sessions never noticed.
    let (mut ws2, _) = app
        .connect(&other.session_id, &other.player_token, None)
        .await;
    let frames = ws2.play("hi", "o-1").await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

#[actix_web::test]
async fn a_model_that_never_stops_talking_is_cut() {
    let model = ScriptedProvider::from_fn(|_, _| Ok(ModelReply::narrate("é".repeat(100_000))));
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("talk", "t-1").await;
    let done = first(&frames, "turn_completed");
    let reply = done["reply"].as_str().unwrap();
    assert!(
        reply.len() <= 32 * 1024 && reply.len() > 30_000,
        "{}",
        reply.len()
    );
    assert!(
        reply.chars().all(|c| c == 'é'),
        "cut at a character boundary"
    );
    let streamed: usize = frames
        .iter()
        .filter(|f| f["type"] == "narrative_delta")
        .map(|f| f["text"].as_str().unwrap().len())
        .sum();
    assert!(streamed <= 32 * 1024, "{streamed}");
}

#[actix_web::test]
async fn a_full_node_refuses_websockets_before_the_upgrade() {
    // A budget of 66 connections keeps 64 for plain HTTP: two WebSockets.
    let app = spawn_offline(|s| s.max_connections = Some(66)).await;
    let s = app.demo().await;
    let (_a, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (_b, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let url = app.ws_url(&s.session_id, &s.spectator_token, None);
    assert_eq!(Ws::refused_status(&url).await, 503);
    // Plain HTTP still answers, and so does the session.
    let (status, _) = get(&format!("{}/healthz", app.base), None).await;
    assert_eq!(status, 200);
    assert_eq!(app.snapshot(&s).await["session_id"], s.session_id.as_str());
}

#[actix_web::test]
async fn another_tenant_finds_nothing_on_any_session_route() {
    let app =
        spawn_offline(|s| s.tenant_keys = Some("acme:acme-key,globex:globex-key".into())).await;
    let s = app
        .create_session_with(
            &[("X-Internal-API-Key", "acme-key")],
            json!({"campaign_id": "demo"}),
        )
        .await;
    let bearer = format!("Bearer {}", s.player_token);
    let base = format!("{}/api/v1/sessions/{}", app.base, s.session_id);
    // The right token under another tenant's name, and another tenant's key:
    // every route answers as for an unknown session.
    let as_globex: [&[(&str, &str)]; 2] = [
        &[
            ("Authorization", bearer.as_str()),
            ("X-Tenant-ID", "globex"),
        ],
        &[("X-Internal-API-Key", "globex-key")],
    ];
    for headers in as_globex {
        for path in ["", "/actions", "/audit"] {
            let a = request("GET", &format!("{base}{path}"), headers, None).await;
            assert_eq!(
                (a.status, a.body["error_code"].as_str()),
                (404, Some("NOT_FOUND")),
                "{path}"
            );
        }
        let a = request(
            "POST",
            &format!("{base}/npcs/npc_maren/activate"),
            headers,
            None,
        )
        .await;
        assert_eq!(a.status, 404, "{}", a.body);
        let chat = json!({"session_id": s.session_id, "message": "status"});
        let a = request(
            "POST",
            &format!("{}/api/v1/chat", app.base),
            headers,
            Some(&chat),
        )
        .await;
        assert_eq!(a.status, 404, "{}", a.body);
    }
    // The WebSocket upgrade under another tenant's name is refused before
    // the upgrade, like an unknown session.
    let refused = match client()
        .ws(app.ws_url(&s.session_id, &s.player_token, None))
        .header("X-Tenant-ID", "globex")
        .connect()
        .await
    {
        Err(awc::error::WsClientError::InvalidResponseStatus(st)) => st.as_u16(),
        other => panic!("upgrade should be refused: {:?}", other.map(|_| ())),
    };
    assert_eq!(refused, 404);
    // The owner still plays, and nothing of the above ran.
    assert!(app.actions(&s).await.is_empty());
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("status", "own-1").await;
    assert!(frames.iter().any(|f| f["type"] == "turn_completed"));
}

/// An answer as a prober compares it: status and the whole body.
fn seen(a: &Answer) -> (u16, Value) {
    (a.status, a.body.clone())
}

#[actix_web::test]
async fn no_tenant_header_tells_a_caller_that_cannot_open_a_session_whose_it_is() {
    let app = spawn_offline(|s| s.tenant_keys = Some("acme:acme-key,beta:beta-key".into())).await;
    let theirs = app
        .create_session_with(
            &[("X-Internal-API-Key", "beta-key")],
            json!({"campaign_id": "demo"}),
        )
        .await;
    let mine = app
        .create_session_with(
            &[("X-Internal-API-Key", "acme-key")],
            json!({"campaign_id": "demo"}),
        )
        .await;
    let unknown = "sess_0000000000000000";
    // The session's GET routes (by the path after its id), and the chat.
    let reads = ["", "/actions", "/audit", "/seats", "/export", "chat"];
    let read = |id: &str, path: &str, headers: Vec<(&'static str, String)>| {
        let (method, url, body) = if path == "chat" {
            let body = json!({"session_id": id, "message": "look"});
            ("POST", format!("{}/api/v1/chat", app.base), Some(body))
        } else {
            let url = format!("{}/api/v1/sessions/{id}{path}", app.base);
            ("GET", url, None)
        };
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            request(method, &url, &headers, body.as_ref()).await
        }
    };
    let tenant = |t: &str| ("X-Tenant-ID", t.to_owned());

    // A tenant key naming another tenant is refused before any session is
    // looked up: the same 403 for beta's session, acme's own and none.
    let acme_as_beta = || {
        vec![
            ("X-Internal-API-Key", "acme-key".to_owned()),
            tenant("beta"),
        ]
    };
    for id in [
        theirs.session_id.as_str(),
        mine.session_id.as_str(),
        unknown,
    ] {
        for path in reads {
            let a = read(id, path, acme_as_beta()).await;
            assert_eq!(
                (a.status, a.body["error_code"].as_str()),
                (403, Some("FORBIDDEN")),
                "{id}{path}: {}",
                a.body
            );
        }
    }

    // Without a key, whatever X-Tenant-ID names (or none), each caller gets
    // the one answer it gets without the header: nobody, acme's player
    // (another session's token), and a guessed token.
    let acme_player = format!("Bearer {}", mine.player_token);
    let callers: [Vec<(&'static str, String)>; 3] = [
        vec![],
        vec![("Authorization", acme_player.clone())],
        vec![("Authorization", "Bearer guessed".to_owned())],
    ];
    let names = ["beta", "acme", "gamma", "default"];
    for caller in &callers {
        for id in [theirs.session_id.as_str(), unknown] {
            for path in reads {
                let plain = seen(&read(id, path, caller.clone()).await);
                assert!(
                    [401, 404].contains(&plain.0),
                    "{caller:?} {id}{path}: {plain:?}"
                );
                for name in names {
                    let mut named = caller.clone();
                    named.push(tenant(name));
                    let a = read(id, path, named).await;
                    assert_eq!(seen(&a), plain, "{caller:?} as {name}: {id}{path}");
                }
            }
        }
    }
    // A join whose invite opens nothing is answered the same whatever the
    // header; an unknown session stays unknown.
    let join = |id: &str, name: Option<&str>| {
        let url = format!("{}/api/v1/sessions/{id}/join", app.base);
        let headers: Vec<(&'static str, String)> = name.map(tenant).into_iter().collect();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let body = json!({"invite_code": "guessed", "name": "Probe"});
            request("POST", &url, &headers, Some(&body)).await
        }
    };
    for id in [theirs.session_id.as_str(), unknown] {
        let plain = seen(&join(id, None).await);
        for name in names {
            assert_eq!(
                seen(&join(id, Some(name)).await),
                plain,
                "join {id} as {name}"
            );
        }
    }
    // The WebSocket: a token that opens nothing is 401 under any name.
    for name in names {
        let refused = match client()
            .ws(app.ws_url(&theirs.session_id, &mine.player_token, None))
            .header("X-Tenant-ID", name)
            .connect()
            .await
        {
            Err(awc::error::WsClientError::InvalidResponseStatus(st)) => st.as_u16(),
            other => panic!("upgrade should be refused: {:?}", other.map(|_| ())),
        };
        assert_eq!(refused, 401, "as {name}");
    }

    // The session's own credentials still open it, and under another
    // tenant's name it still looks unknown to them.
    let own = format!("Bearer {}", theirs.player_token);
    let a = read(
        &theirs.session_id,
        "",
        vec![("Authorization", own.clone()), tenant("beta")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = read(
        &theirs.session_id,
        "",
        vec![("Authorization", own.clone()), tenant("acme")],
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{}",
        a.body
    );
    let a = read(
        &theirs.session_id,
        "",
        vec![("X-Internal-API-Key", "beta-key".to_owned())],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(app.actions(&theirs).await.is_empty(), "nothing ran");
}

/// The session's player and spectator tokens as the database holds them.
async fn stored_tokens(app: &TestApp, s: &Session) -> (String, String) {
    let rows = crate::database::text_rows(
        &app.db_url,
        "SELECT player_token, spectator_token FROM sessions WHERE session_id = $1",
        &s.session_id,
    )
    .await;
    (rows[0][0].clone(), rows[0][1].clone())
}

#[actix_web::test]
async fn a_private_sessions_tokens_are_stored_only_as_digests_and_open_it_after_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let offline = || Arc::new(questd::llm::OfflineGameMaster::default());
    let app = spawn_in(dir.clone(), |_| {}, offline()).await;
    let s = app.demo().await;
    let listed = app.public_demo().await;
    let session = |app: &TestApp| format!("{}/api/v1/sessions/{}", app.base, s.session_id);
    let (stored, stored_watch) = stored_tokens(&app, &s).await;
    for (stored, token) in [
        (&stored, &s.player_token),
        (&stored_watch, &s.spectator_token),
    ] {
        assert!(stored.starts_with("sha256:"), "{stored}");
        assert!(!stored.contains(token.as_str()), "{stored}");
    }
    assert_ne!(stored, stored_watch);
    // A public session's spectator token is stored as itself: the public
    // list gives it to anyone.
    assert_eq!(stored_tokens(&app, &listed).await.1, listed.spectator_token);
    if let Some(path) = app.db_url.strip_prefix("sqlite://") {
        // Nowhere in the database's files, the WAL included (which a
        // checkpoint may have emptied; the database file is there).
        let database = std::fs::read(path).expect("the database file");
        assert!(!database.is_empty());
        let wal = std::fs::read(format!("{path}-wal")).unwrap_or_default();
        let holds =
            |bytes: &[u8], token: &str| bytes.windows(token.len()).any(|w| w == token.as_bytes());
        for token in [&s.player_token, &s.spectator_token] {
            assert!(!holds(&database, token), "the database holds {token}");
            assert!(!holds(&wal, token), "the WAL holds {token}");
        }
        // The public session's spectator token, stored as itself, is
        // found there: the search sees what the files hold.
        assert!(holds(&database, &listed.spectator_token) || holds(&wal, &listed.spectator_token));
    }
    // What the database holds opens nothing.
    assert_eq!(get(&session(&app), Some(&stored)).await.0, 401);
    assert_eq!(get(&session(&app), Some(&stored_watch)).await.0, 401);
    assert_eq!(get(&session(&app), Some(&s.player_token)).await.0, 200);
    assert_eq!(get(&session(&app), Some(&s.spectator_token)).await.0, 200);
    app.stop().await;

    // After a restart both still open it, the spectator token as a
    // spectator; so do tokens a build from before stored as themselves,
    // which the start rewrites.
    let app = spawn_in(dir.clone(), |_| {}, offline()).await;
    assert_eq!(get(&session(&app), Some(&s.player_token)).await.0, 200);
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.play("look", "r-1").await;
    ws.close().await;
    let (ws, welcome) = app.connect(&s.session_id, &s.spectator_token, None).await;
    assert_eq!(welcome["role"], "spectator");
    ws.close().await;
    app.stop().await;
    for (column, token) in [
        ("player_token", &s.player_token),
        ("spectator_token", &s.spectator_token),
    ] {
        let set = format!(
            "UPDATE sessions SET {column} = $1 WHERE session_id = '{}'",
            s.session_id
        );
        assert_eq!(crate::database::execute(&app.db_url, &set, token).await, 1);
    }
    let app = spawn_in(dir, |_| {}, offline()).await;
    assert_eq!(stored_tokens(&app, &s).await, (stored, stored_watch));
    assert_eq!(get(&session(&app), Some(&s.player_token)).await.0, 200);
    let (ws, welcome) = app.connect(&s.session_id, &s.spectator_token, None).await;
    assert_eq!(welcome["role"], "spectator");
    ws.close().await;
    assert_eq!(stored_tokens(&app, &listed).await.1, listed.spectator_token);
}
