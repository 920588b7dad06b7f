//! The service APIs through real HTTP: one-shot chat, the tool server with
//! tenants, keys, rate limits and the audit ledger.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use questd::llm::{LlmError, OfflineGameMaster, ScriptedProvider};
use questd::tools::Registry;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A request's answer: status, `Retry-After`, body.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn send(url: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Answer {
    let mut req = client().post(url);
    for (k, v) in headers {
        req = req.insert_header((*k, *v));
    }
    let mut resp = match body {
        Some(b) => req.send_json(b).await.unwrap(),
        None => req.send().await.unwrap(),
    };
    let bytes = resp.body().limit(16 * 1024 * 1024).await.unwrap();
    Answer {
        status: resp.status().as_u16(),
        retry_after: resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// The service headers of a tenant.
fn tenant(t: &'static str) -> Vec<(&'static str, &'static str)> {
    tenant_with(t, &[])
}

/// The service headers of a tenant, and more.
fn tenant_with(
    t: &'static str,
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut headers = vec![
        ("X-Tenant-ID", t),
        ("X-Site-ID", "site-1"),
        ("X-Trace-ID", "trace-1"),
    ];
    headers.extend_from_slice(more);
    headers
}

async fn tool_call(app: &TestApp, headers: &[(&str, &str)], body: Value) -> Answer {
    send(
        &format!("{}/api/v1/tools/call", app.base),
        headers,
        Some(&body),
    )
    .await
}

async fn chat(app: &TestApp, s: &Session, token: &str, message: &str, rid: Option<&str>) -> Answer {
    let auth = format!("Bearer {token}");
    let mut body = json!({"session_id": s.session_id, "message": message});
    if let Some(r) = rid {
        body["request_id"] = json!(r);
    }
    send(
        &format!("{}/api/v1/chat", app.base),
        &[("Authorization", auth.as_str())],
        Some(&body),
    )
    .await
}

/// A server that requires the internal key `key`.
async fn keyed_app(key: &str) -> TestApp {
    let key = key.to_owned();
    spawn_with(
        move |s| s.internal_api_key = Some(key),
        Arc::new(OfflineGameMaster::default()),
    )
    .await
}

/// The key and the strongest role.
const INTRUDER: &[(&str, &str)] = &[("X-Internal-API-Key", "k"), ("X-User-Role", "owner")];

/// A session created by a tenant.
async fn session_of(app: &TestApp, t: &str) -> Session {
    let mut resp = client()
        .post(format!("{}/api/v1/sessions", app.base))
        .insert_header(("X-Tenant-ID", t))
        .send_json(&json!({"campaign_id": "demo"}))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let v: Value = resp.json().await.unwrap();
    Session {
        session_id: v["session_id"].as_str().unwrap().into(),
        player_token: v["player_token"].as_str().unwrap().into(),
        spectator_token: v["spectator_token"].as_str().unwrap().into(),
        ws_url: v["ws_url"].as_str().unwrap().into(),
    }
}

#[actix_web::test]
async fn a_whole_turn_over_http_is_seen_live_by_spectators() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let target = neighbour(&app.snapshot(&s).await);

    let a = chat(
        &app,
        &s,
        &s.player_token,
        &format!("go to {target}"),
        Some("h-1"),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let turn_id = a.body["turn_id"].as_str().unwrap().to_owned();
    assert_eq!(a.body["tool_events"][0]["tool"], "move");
    assert_eq!(a.body["tool_events"][0]["status"], "ok");
    assert_eq!(
        a.body["state_patch"]["position"]["area_id"],
        target.as_str()
    );
    assert_eq!(a.body["dialog_type"], "scene_description");
    assert!(!a.body["reply"].as_str().unwrap().is_empty());
    assert_eq!(a.body["duplicate"], false);

    let seen = spectator.until_turn_end(&turn_id).await;
    let done = first(&seen, "turn_completed");
    assert_eq!(
        done["reply"], a.body["reply"],
        "the spectator saw this turn"
    );
    assert_eq!(done["seq"], a.body["seq"]);

    // The same request id again: the first turn's answer, nothing run twice.
    let again = chat(
        &app,
        &s,
        &s.player_token,
        &format!("go to {target}"),
        Some("h-1"),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["turn_id"], turn_id.as_str());
    assert_eq!(again.body["duplicate"], true);
    assert_eq!(again.body["reply"], a.body["reply"]);
    assert_eq!(app.actions(&s).await.len(), 1);
}

#[actix_web::test]
async fn chat_over_http_refuses_what_the_websocket_refuses() {
    let app = spawn_with(|s| s.chat_burst = 1, Arc::new(OfflineGameMaster::default())).await;
    let s = app.demo().await;
    let url = format!("{}/api/v1/chat", app.base);

    let a = chat(&app, &s, &s.spectator_token, "hello", None).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (403, Some("FORBIDDEN"))
    );
    let a = chat(&app, &s, "not-a-token", "hello", None).await;
    assert_eq!(a.status, 401);
    let missing = Session {
        session_id: "sess_nope".into(),
        ..s.clone()
    };
    let a = chat(&app, &missing, &s.player_token, "hello", None).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (404, Some("NOT_FOUND"))
    );
    let auth = format!("Bearer {}", s.player_token);
    let a = send(
        &url,
        &[("Authorization", auth.as_str()), ("X-Tenant-ID", "other")],
        Some(&json!({"session_id": s.session_id, "message": "hi"})),
    )
    .await;
    assert_eq!(a.status, 404, "another tenant's session does not exist");
    let a = send(
        &url,
        &[("Authorization", auth.as_str())],
        Some(&json!({"session_id": s.session_id})),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    let long = "x".repeat(5000);
    let a = chat(&app, &s, &s.player_token, &long, None).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("TEXT_TOO_LONG"))
    );

    let a = chat(&app, &s, &s.player_token, "hello", None).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = chat(&app, &s, &s.player_token, "hello again", None).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (429, Some("RATE_LIMITED"))
    );
    assert!(a.retry_after.is_some(), "429 carries Retry-After");
}

#[actix_web::test]
async fn a_failed_turn_over_http_answers_its_code_and_the_session_goes_on() {
    let model = ScriptedProvider::from_fn(|_, n| {
        if n == 0 {
            Err(LlmError::Upstream("down".into()))
        } else {
            Ok(questd::llm::ModelReply::narrate("Back."))
        }
    });
    let app = spawn_with(|_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let a = chat(&app, &s, &s.player_token, "hello", None).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (502, Some("UPSTREAM_ERROR"))
    );
    assert!(a.body["turn_id"].is_string());
    let a = chat(&app, &s, &s.player_token, "hello", None).await;
    assert_eq!((a.status, a.body["reply"].as_str()), (200, Some("Back.")));
}

#[actix_web::test]
async fn tools_list_describes_the_catalogue() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/tools/list", app.base);
    let a = send(&url, &[("X-Tenant-ID", "t1")], Some(&json!({}))).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("CONTEXT_INVALID"))
    );
    assert!(a.body["message"].as_str().unwrap().contains("X-Site-ID"));

    let a = send(
        &url,
        &tenant("t1"),
        Some(&json!({"category": null, "ai_callable_only": false})),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let tools = a.body["tools"].as_array().unwrap();
    assert_eq!(a.body["total"], tools.len());
    let roll = tools.iter().find(|t| t["name"] == "roll_dice").unwrap();
    for field in [
        "version",
        "description",
        "category",
        "input_schema",
        "output_schema",
    ] {
        assert!(!roll[field].is_null(), "{field}");
    }
    assert_eq!(
        (
            roll["requires_auth"].as_bool(),
            roll["ai_callable"].as_bool()
        ),
        (Some(false), Some(true))
    );
    let everything = tools.len();

    let a = send(
        &url,
        &tenant("t1"),
        Some(&json!({"ai_callable_only": true})),
    )
    .await;
    assert!(
        a.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["ai_callable"] == true)
    );
    let a = send(&url, &tenant("t1"), Some(&json!({"category": "dice"}))).await;
    let dice = a.body["tools"].as_array().unwrap();
    assert!(!dice.is_empty() && dice.len() < everything, "{}", a.body);
    assert!(dice.iter().all(|t| t["category"] == "dice"));
}

#[actix_web::test]
async fn a_tool_call_runs_in_the_session_and_lands_in_journal_and_ledger() {
    let app = spawn_app().await;
    let s = session_of(&app, "t1").await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let target = neighbour(&app.snapshot(&s).await);
    let mut headers = tenant("t1");
    headers.push(("X-Session-ID", s.session_id.as_str()));
    headers.push(("X-User-ID", "user-7"));
    // Keys out of order: the hash is over canonical JSON.
    let input = json!({"to_area_id": target, "actor_id": "pc_001"});
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "move", "input": input, "context": {"tenant_id": "t1", "site_id": "site-1", "trace_id": "trace-1"}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["success"], true);
    assert_eq!(a.body["output"]["to_area_id"], target.as_str());
    let canonical = format!(r#"{{"actor_id":"pc_001","to_area_id":"{target}"}}"#);
    let hash: String = Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let audit = &a.body["audit"];
    assert_eq!(audit["request_payload_hash"], hash.as_str());
    assert_eq!(
        (
            audit["trace_id"].as_str(),
            audit["tool_name"].as_str(),
            audit["status"].as_str()
        ),
        (Some("trace-1"), Some("move"), Some("ok"))
    );
    assert!(audit["latency_ms"].as_f64().unwrap() >= 0.0);

    let frames = spectator.until(|f| f["type"] == "tool_result").await;
    assert_eq!(first(&frames, "tool_call")["tool"], "move", "seen live");
    assert_eq!(app.actions(&s).await.len(), 1, "in the actions log");
    assert_eq!(
        app.snapshot(&s).await["characters"][0]["area_id"],
        target.as_str()
    );
    let (_, ledger) = get(
        &format!("{}/api/v1/sessions/{}/audit", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    let row = &ledger["entries"][0];
    assert_eq!(
        (
            row["args_hash"].as_str(),
            row["role"].as_str(),
            row["site_id"].as_str(),
            row["user_id"].as_str()
        ),
        (
            Some(hash.as_str()),
            Some("service"),
            Some("site-1"),
            Some("user-7")
        )
    );
    let mut req = client().get(format!("{}/api/v1/audit?trace_id=trace-1", app.base));
    for (k, v) in tenant("t1") {
        req = req.insert_header((k, v));
    }
    let trace: Value = req.send().await.unwrap().json().await.unwrap();
    assert_eq!(trace["entries"].as_array().unwrap().len(), 1, "{trace}");
    let mut req = client().get(format!("{}/api/v1/audit?trace_id=trace-1", app.base));
    for (k, v) in tenant("t2") {
        req = req.insert_header((k, v));
    }
    let other: Value = req.send().await.unwrap().json().await.unwrap();
    assert_eq!(other["entries"], json!([]), "another tenant sees no trace");
}

#[actix_web::test]
async fn another_tenant_never_reaches_a_session_with_any_tool() {
    // The intruder holds the key and the strongest role: only the tenant
    // stands in the way.
    let app = keyed_app("k").await;
    let s = session_of(&app, "owner").await;
    let registry = Registry::builtin().unwrap();
    let before_actions = app.actions(&s).await.len();
    let session_tools: Vec<&str> = registry
        .names()
        .iter()
        .copied()
        .filter(|n| registry.spec(n).unwrap().needs_session)
        .collect();
    assert!(session_tools.len() >= 15, "{session_tools:?}");
    for tool in &session_tools {
        // By header and by argument.
        let mut headers = tenant_with("intruder", INTRUDER);
        headers.push(("X-Session-ID", s.session_id.as_str()));
        let a = tool_call(&app, &headers, json!({"tool_name": tool, "input": {}})).await;
        assert_eq!(
            (a.status, a.body["error_type"].as_str()),
            (404, Some("NOT_FOUND")),
            "{tool}: {}",
            a.body
        );
        assert_eq!(
            a.body["error"],
            format!("no session {}", s.session_id),
            "{tool}"
        );
        let a = tool_call(
            &app,
            &tenant_with("intruder", INTRUDER),
            json!({"tool_name": tool, "input": {"session_id": s.session_id}}),
        )
        .await;
        assert_eq!(a.status, 404, "{tool}: {}", a.body);
    }
    // An unknown session reads exactly the same.
    let mut headers = tenant_with("owner", &[("X-Internal-API-Key", "k")]);
    headers.push(("X-Session-ID", "sess_nope"));
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "move_options", "input": {}}),
    )
    .await;
    assert_eq!(a.status, 404);
    assert_eq!(a.body["error"], "no session sess_nope");

    assert_eq!(app.actions(&s).await.len(), before_actions, "nothing ran");
    let (_, ledger) = get(
        &format!("{}/api/v1/sessions/{}/audit", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(
        ledger["entries"],
        json!([]),
        "the owner's ledger shows no intruder"
    );
    // The owner's own call works.
    let mut headers = tenant_with("owner", &[("X-Internal-API-Key", "k")]);
    headers.push(("X-Session-ID", s.session_id.as_str()));
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "move_options", "input": {"actor_id": "pc_001"}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
}

#[actix_web::test]
async fn tool_call_errors_have_their_status_and_an_audit() {
    let app = spawn_app().await;
    let s = session_of(&app, "t1").await;
    let mut in_session = tenant("t1");
    in_session.push(("X-Session-ID", s.session_id.as_str()));
    let cases = [
        (
            tenant("t1"),
            json!({"tool_name": "summon", "input": {}}),
            404,
            "TOOL_NOT_FOUND",
        ),
        (
            tenant("t1"),
            json!({"tool_name": "move_options", "input": {}}),
            400,
            "CONTEXT_INVALID",
        ),
        (
            in_session.clone(),
            json!({"tool_name": "roll_dice", "input": {"dice": 7}}),
            400,
            "INVALID_ARGS",
        ),
        (
            in_session.clone(),
            json!({"tool_name": "move", "input": {"session_id": "sess_other"}}),
            400,
            "SESSION_MISMATCH",
        ),
        (
            in_session.clone(),
            json!({"tool_name": "create_npc", "input": {}}),
            401,
            "UNAUTHORIZED",
        ),
    ];
    for (headers, body, status, code) in cases {
        let a = tool_call(&app, &headers, body.clone()).await;
        assert_eq!(
            (
                a.status,
                a.body["success"].as_bool(),
                a.body["error_type"].as_str()
            ),
            (status, Some(false), Some(code)),
            "{body}: {}",
            a.body
        );
        assert_eq!(a.body["audit"]["error_type"], code);
        assert!(a.body["error"].is_string());
    }
    // A tool that needs no session runs without one.
    let a = tool_call(
        &app,
        &tenant("t1"),
        json!({"tool_name": "roll_dice", "input": {"dice": "2d6"}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["output"]["total"].as_i64().unwrap() >= 2);
    // Body context must agree with the headers.
    let a = tool_call(
        &app,
        &tenant("t1"),
        json!({"tool_name": "roll_dice", "input": {"dice": "1d4"}, "context": {"tenant_id": "t2"}}),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("CONTEXT_INVALID"))
    );
    // Too big.
    let huge = json!({"tool_name": "roll_dice", "input": {"dice": "x".repeat(2 * 1024 * 1024)}});
    assert_eq!(tool_call(&app, &tenant("t1"), huge).await.status, 413);
    // Role without a key.
    let mut headers = tenant("t1");
    headers.push(("X-User-Role", "owner"));
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "roll_dice", "input": {"dice": "1d4"}}),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (403, Some("FORBIDDEN"))
    );
}

#[actix_web::test]
async fn the_internal_key_is_required_when_set_and_unlocks_roles() {
    let app = keyed_app("sekrit-key").await;
    let s = session_of(&app, "t1").await;
    let body = json!({"tool_name": "roll_dice", "input": {"dice": "1d6"}});
    let a = tool_call(&app, &tenant("t1"), body.clone()).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    let mut wrong = tenant("t1");
    wrong.push(("X-Internal-API-Key", "sekrit-kez"));
    assert_eq!(tool_call(&app, &wrong, body.clone()).await.status, 401);
    let mut right = tenant("t1");
    right.push(("X-Internal-API-Key", "sekrit-key"));
    assert_eq!(tool_call(&app, &right, body).await.status, 200);

    // With the key, a designer may create an NPC (a requires_auth tool).
    let mut designer = right.clone();
    designer.push(("X-User-Role", "gm_admin"));
    designer.push(("X-Session-ID", s.session_id.as_str()));
    let npc = json!({"tool_name": "create_npc", "input": {
        "npc_id": "npc_bram", "name": "Bram", "persona": "A gruff ferryman.", "speech_style": "short"}});
    let a = tool_call(&app, &designer, npc.clone()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    // The plain service role may not.
    let mut service = right;
    service.push(("X-Session-ID", s.session_id.as_str()));
    let a = tool_call(&app, &service, npc).await;
    assert_eq!(
        (a.status, a.body["error_type"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{}",
        a.body
    );
}

#[actix_web::test]
async fn each_tenant_has_its_own_rate_limit() {
    let app = spawn_with(
        |s| {
            s.service_burst = 2;
            s.service_per_minute = 1;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let body = json!({"tool_name": "roll_dice", "input": {"dice": "1d6"}});
    for _ in 0..2 {
        assert_eq!(
            tool_call(&app, &tenant("busy"), body.clone()).await.status,
            200
        );
    }
    let a = tool_call(&app, &tenant("busy"), body.clone()).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (429, Some("RATE_LIMITED"))
    );
    assert!(a.retry_after.unwrap().parse::<u64>().unwrap() >= 1);
    let a = tool_call(&app, &tenant("calm"), body).await;
    assert_eq!(a.status, 200, "another tenant is not slowed down");
}
