//! The service APIs through real HTTP: one-shot chat, the tool server with
//! tenants, keys, rate limits and the audit ledger.

use std::sync::Arc;

use crate::common::*;
use questd::llm::{LlmError, OfflineGameMaster, ScriptedProvider};
use questd::tools::Registry;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// POSTs to `url` with these headers and, if given, a JSON body.
async fn send(url: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Answer {
    request("POST", url, headers, body).await
}

/// The header every key travels in.
const KEY_HEADER: &str = "X-Internal-API-Key";

/// The context headers of a tenant, without a key (they grant nothing).
fn context(t: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("X-Tenant-ID", t),
        ("X-Site-ID", "site-1"),
        ("X-Trace-ID", "trace-1"),
    ]
}

/// The context headers of a tenant with `key`, and more.
fn keyed<'a>(
    t: &'static str,
    key: &'static str,
    more: &[(&'static str, &'a str)],
) -> Vec<(&'static str, &'a str)> {
    let mut headers: Vec<(&'static str, &'a str)> = context(t);
    headers.push((KEY_HEADER, key));
    headers.extend_from_slice(more);
    headers
}

/// The service headers of a tenant: its context and the internal key.
fn tenant(t: &'static str) -> Vec<(&'static str, &'static str)> {
    tenant_with(t, &[])
}

/// The service headers of a tenant with the internal key, and more.
fn tenant_with(
    t: &'static str,
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    keyed(t, TEST_KEY, more)
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

/// A server that accepts the tenant keys `list` (`tenant:key,tenant:key`)
/// besides the internal key [`TEST_KEY`].
async fn app_with_tenant_keys(list: &str) -> TestApp {
    app_with(list, |_| {}).await
}

/// [`app_with_tenant_keys`] with other settings adjusted too.
async fn app_with(list: &str, adjust: impl FnOnce(&mut questd::Settings)) -> TestApp {
    let list = list.to_owned();
    spawn_with(
        move |s| {
            s.tenant_keys = Some(list.into());
            adjust(s);
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await
}

/// A session created by a trusted service for a tenant (the internal key,
/// acting for the tenant named in `X-Tenant-ID`).
async fn session_of(app: &TestApp, t: &str) -> Session {
    app.create_session_with(
        &[(KEY_HEADER, TEST_KEY), ("X-Tenant-ID", t)],
        json!({"campaign_id": "demo"}),
    )
    .await
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
    let app = app_with("other:other-key", |s| s.chat_burst = 1).await;
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
    // Without any credential: 401; with another tenant's key: like an
    // unknown session.
    let a = send(
        &url,
        &[],
        Some(&json!({"session_id": s.session_id, "message": "hi"})),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    let a = send(
        &url,
        &[(KEY_HEADER, "other-key")],
        Some(&json!({"session_id": s.session_id, "message": "hi"})),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (404, Some("NOT_FOUND")),
        "another tenant's key finds no session: {}",
        a.body
    );
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
            Err(LlmError::Upstream(
                "http://model.internal:8080/v1 answered 503: quota of acct-42 exhausted".into(),
            ))
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
    // The short reason only: the endpoint and its answer stay in the log.
    assert_eq!(
        a.body["message"], "the model endpoint did not answer",
        "{}",
        a.body
    );
    for secret in ["model.internal", "acct-42", "quota"] {
        assert!(!a.body.to_string().contains(secret), "{secret}: {}", a.body);
    }
    assert!(a.body["turn_id"].is_string());
    let a = chat(&app, &s, &s.player_token, "hello", None).await;
    assert_eq!((a.status, a.body["reply"].as_str()), (200, Some("Back.")));
}

#[actix_web::test]
async fn tools_list_describes_the_catalogue() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/tools/list", app.base);
    let a = send(
        &url,
        &[("X-Tenant-ID", "t1"), (KEY_HEADER, TEST_KEY)],
        Some(&json!({})),
    )
    .await;
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
        (Some("trace-1"), Some("move"), Some("success"))
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
    // The intruder holds a valid key for its own tenant (its tenant key, or
    // the internal key acting for it) and the strongest role: only the
    // tenant stands in the way. Enough burst for every tool, several ways.
    let app = app_with("owner:owner-key,intruder:intruder-key", |s| {
        s.service_burst = 1000;
    })
    .await;
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
    let intruders = [
        keyed("intruder", "intruder-key", &[("X-User-Role", "owner")]),
        tenant_with("intruder", &[("X-User-Role", "owner")]),
    ];
    for intruder in &intruders {
        for tool in &session_tools {
            // By header and by argument.
            let mut headers = intruder.clone();
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
                intruder,
                json!({"tool_name": tool, "input": {"session_id": s.session_id}}),
            )
            .await;
            assert_eq!(a.status, 404, "{tool}: {}", a.body);
        }
    }
    // The intruder's tenant key cannot claim the owner's tenant.
    let mut headers = keyed("owner", "intruder-key", &[("X-User-Role", "owner")]);
    headers.push(("X-Session-ID", s.session_id.as_str()));
    let before = app.snapshot(&s).await;
    let (start, target) = (position(&before), neighbour(&before));
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "move", "input": {"actor_id": "pc_001", "to_area_id": target}}),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (403, Some("FORBIDDEN")),
        "{}",
        a.body
    );
    // An unknown session reads exactly the same.
    let mut headers = keyed("owner", "owner-key", &[]);
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
    assert_eq!(position(&app.snapshot(&s).await), start, "nobody moved");
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
    // The owner's own tenant key works on its session, and changes it.
    let mut headers = keyed("owner", "owner-key", &[]);
    headers.push(("X-Session-ID", s.session_id.as_str()));
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "move_options", "input": {"actor_id": "pc_001"}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "move", "input": {"actor_id": "pc_001", "to_area_id": target}}),
    )
    .await;
    assert_eq!(
        (a.status, a.body["success"].as_bool()),
        (200, Some(true)),
        "{}",
        a.body
    );
    assert_eq!(position(&app.snapshot(&s).await), target);
    let actions = app.actions(&s).await;
    assert_eq!(
        (actions.last().unwrap()["tool"].as_str(), actions.len()),
        (Some("move"), before_actions + 2),
        "the owner's look and move are logged: {actions:#?}"
    );
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
        // A designer tool, and the plain service role.
        (
            in_session.clone(),
            json!({"tool_name": "create_npc", "input": {}}),
            403,
            "PERMISSION_DENIED",
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
        if code == "PERMISSION_DENIED" {
            // The role as callers write it, not as the code spells it.
            assert_eq!(
                a.body["error"], "role service may not call create_npc",
                "{}",
                a.body
            );
        }
    }
    // A tool that needs no session runs without one.
    let a = tool_call(
        &app,
        &tenant("t1"),
        json!({"tool_name": "roll_dice", "input": {"dice": "2d6", "reason": "luck"}}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["output"]["total"].as_i64().unwrap() >= 2);
    // Body context must agree with the headers.
    let a = tool_call(
        &app,
        &tenant("t1"),
        json!({"tool_name": "roll_dice", "input": {"dice": "1d4", "reason": "luck"}, "context": {"tenant_id": "t2"}}),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("CONTEXT_INVALID"))
    );
    // Too big.
    let huge = json!({"tool_name": "roll_dice", "input": {"dice": "x".repeat(2 * 1024 * 1024)}});
    assert_eq!(tool_call(&app, &tenant("t1"), huge).await.status, 413);
    // A role without a key grants nothing.
    let mut headers = context("t1");
    headers.push(("X-User-Role", "owner"));
    let a = tool_call(
        &app,
        &headers,
        json!({"tool_name": "roll_dice", "input": {"dice": "1d4", "reason": "luck"}}),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
}

#[actix_web::test]
async fn a_key_is_always_required_and_unlocks_roles() {
    // Even a server without any key configured answers no service call
    // without one, and says how to configure one.
    let open = spawn_with(
        |s| s.internal_api_key = None,
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let body = json!({"tool_name": "roll_dice", "input": {"dice": "1d6", "reason": "luck"}});
    let a = tool_call(&open, &context("t1"), body.clone()).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED")),
        "{}",
        a.body
    );
    assert!(
        a.body["message"]
            .as_str()
            .unwrap()
            .contains("QUESTD_INTERNAL_API_KEY"),
        "{}",
        a.body
    );
    let a = tool_call(&open, &tenant("t1"), body.clone()).await;
    assert_eq!(a.status, 401, "no key of this server: {}", a.body);
    open.stop().await;

    let app = app_with_tenant_keys("t1:t1-key").await;
    let s = session_of(&app, "t1").await;
    // The context headers alone grant nothing, on any service route.
    let a = tool_call(&app, &context("t1"), body.clone()).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    let a = send(
        &format!("{}/api/v1/tools/list", app.base),
        &context("t1"),
        Some(&json!({})),
    )
    .await;
    assert_eq!(a.status, 401, "{}", a.body);
    let mut req = client().get(format!("{}/api/v1/audit?trace_id=trace-1", app.base));
    for (k, v) in context("t1") {
        req = req.insert_header((k, v));
    }
    assert_eq!(req.send().await.unwrap().status().as_u16(), 401);
    // A wrong key is refused; the internal key and the tenant's key work.
    let wrong = keyed("t1", "test-internal-kez", &[]);
    let a = tool_call(&app, &wrong, body.clone()).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    assert_eq!(
        tool_call(&app, &tenant("t1"), body.clone()).await.status,
        200
    );
    let own = keyed("t1", "t1-key", &[]);
    assert_eq!(tool_call(&app, &own, body.clone()).await.status, 200);
    // A tenant key acts for its own tenant only.
    let a = tool_call(&app, &keyed("t2", "t1-key", &[]), body).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (403, Some("FORBIDDEN")),
        "{}",
        a.body
    );

    // With a key, a designer may create an NPC (a requires_auth tool),
    // with the internal key or the tenant's own.
    let npc = |id: &str| {
        json!({"tool_name": "create_npc", "input": {
            "npc_id": id, "name": "Bram", "persona": "A gruff ferryman.", "speech_style": "short"}})
    };
    for (key, id) in [(TEST_KEY, "npc_bram"), ("t1-key", "npc_bram_2")] {
        let designer = keyed(
            "t1",
            key,
            &[
                ("X-User-Role", "gm_admin"),
                ("X-Session-ID", s.session_id.as_str()),
            ],
        );
        let a = tool_call(&app, &designer, npc(id)).await;
        assert_eq!(a.status, 200, "{key}: {}", a.body);
    }
    // The plain service role may not.
    let mut service = tenant("t1");
    service.push(("X-Session-ID", s.session_id.as_str()));
    let a = tool_call(&app, &service, npc("npc_bram_3")).await;
    assert_eq!(
        (a.status, a.body["error_type"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{}",
        a.body
    );
    // Nor a role without a key.
    let mut anonymous = context("t1");
    anonymous.push(("X-User-Role", "gm_admin"));
    anonymous.push(("X-Session-ID", s.session_id.as_str()));
    let a = tool_call(&app, &anonymous, npc("npc_bram_4")).await;
    assert_eq!(a.status, 401, "{}", a.body);
    let made: Vec<Value> = app
        .actions(&s)
        .await
        .iter()
        .filter(|a| a["tool"] == "create_npc" && a["status"] == "ok")
        .map(|a| a["args"]["npc_id"].clone())
        .collect();
    assert_eq!(made, [json!("npc_bram"), json!("npc_bram_2")]);
}

#[actix_web::test]
async fn each_tenant_and_each_key_has_its_own_rate_limit() {
    let app = app_with("busy:busy-key,calm:calm-key", |s| {
        s.service_burst = 2;
        s.service_per_minute = 1;
    })
    .await;
    let body = json!({"tool_name": "roll_dice", "input": {"dice": "1d6", "reason": "luck"}});
    let busy = keyed("busy", "busy-key", &[]);
    for _ in 0..2 {
        assert_eq!(tool_call(&app, &busy, body.clone()).await.status, 200);
    }
    let a = tool_call(&app, &busy, body.clone()).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (429, Some("RATE_LIMITED"))
    );
    assert!(a.retry_after.unwrap().parse::<u64>().unwrap() >= 1);
    // The tenant is limited whatever key it uses.
    let a = tool_call(&app, &tenant("busy"), body.clone()).await;
    assert_eq!(a.status, 429, "{}", a.body);
    let a = tool_call(&app, &keyed("calm", "calm-key", &[]), body.clone()).await;
    assert_eq!(a.status, 200, "another tenant is not slowed down");
    // One key is limited across the tenants it acts for.
    for t in ["quiet-1", "quiet-2"] {
        assert_eq!(tool_call(&app, &tenant(t), body.clone()).await.status, 200);
    }
    let a = tool_call(&app, &tenant("quiet-3"), body).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (429, Some("RATE_LIMITED")),
        "the internal key spent its burst: {}",
        a.body
    );
}
