//! Durable timers from outside the game (docs/protocol.md §9), over real
//! sockets: a service schedules and cancels them through the tool API with
//! its key, the snapshot lists them (never a note or a key), the host or a
//! key cancels one with `DELETE /api/v1/sessions/{id}/timers/{timer_id}`,
//! and MCP lists both tools. Every timer here is due days ahead: none fires
//! while a test runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use questd::llm::OfflineGameMaster;
use serde_json::{Value, json};

use crate::common::*;
use crate::party_seats::{invite, join};

/// The tenant key of `acme` on the servers of [`app`].
const ACME_KEY: &str = "acme-key";
/// A day, in seconds: how far ahead the timers here are due.
const DAY: u64 = 86_400;

/// A server that accepts `acme`'s key, with call rates no test here
/// reaches (one test makes 65 calls in a row).
async fn app() -> TestApp {
    spawn_with(
        |s| {
            s.tenant_keys = Some(format!("acme:{ACME_KEY}").into());
            s.calls_per_minute = 100_000;
            s.calls_burst = 100_000;
            s.service_per_minute = 100_000;
            s.service_burst = 100_000;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await
}

/// A demo session `acme` created with its key.
async fn acme_session(app: &TestApp) -> Session {
    app.create_session_with(
        &[("X-Internal-API-Key", ACME_KEY), ("X-Tenant-ID", "acme")],
        json!({"campaign_id": "demo"}),
    )
    .await
}

/// `acme` calls `tool` in session `s` through the tool API.
async fn call(app: &TestApp, s: &Session, tool: &str, input: Value) -> Answer {
    let headers = [
        ("X-Internal-API-Key", ACME_KEY),
        ("X-Tenant-ID", "acme"),
        ("X-Site-ID", "site-1"),
        ("X-Trace-ID", "trace-timers"),
        ("X-Session-ID", s.session_id.as_str()),
    ];
    let url = format!("{}/api/v1/tools/call", app.base);
    let body = json!({"tool_name": tool, "input": input});
    request("POST", &url, &headers, Some(&body)).await
}

/// [`call`] that must succeed: its output.
async fn called(app: &TestApp, s: &Session, tool: &str, input: Value) -> Value {
    let a = call(app, s, tool, input.clone()).await;
    assert_eq!(
        (a.status, &a.body["success"]),
        (200, &json!(true)),
        "{tool} {input}: {}",
        a.body
    );
    a.body["output"].clone()
}

/// The snapshot's pending timers.
async fn timers(app: &TestApp, s: &Session) -> Vec<Value> {
    app.snapshot(s).await["timers"]
        .as_array()
        .cloned()
        .expect("the snapshot lists timers")
}

/// `DELETE …/timers/{timer_id}` with these headers.
async fn delete(app: &TestApp, s: &Session, timer_id: &str, headers: &[(&str, &str)]) -> Answer {
    let url = format!(
        "{}/api/v1/sessions/{}/timers/{timer_id}",
        app.base, s.session_id
    );
    request("DELETE", &url, headers, None).await
}

#[actix_web::test]
async fn a_service_schedules_and_cancels_with_its_key_and_the_snapshot_lists_timers() {
    let app = app().await;
    let s = acme_session(&app).await;
    assert_eq!(timers(&app, &s).await, Vec::<Value>::new());

    let first = called(
        &app,
        &s,
        "schedule_event",
        json!({"event": "guards_return", "note": "four guards, one asleep", "delay_s": DAY,
               "repeat_s": 3600, "key": "guards"}),
    )
    .await;
    let id = first["timer_id"].as_str().expect("a timer id").to_owned();
    assert!(id.starts_with("tmr_"), "{first}");
    assert_eq!(
        (&first["event"], &first["repeat_s"]),
        (&json!("guards_return"), &json!(3600))
    );
    let due_at = first["due_at"].as_str().expect("due_at").to_owned();
    assert!(due_at.ends_with('Z'), "RFC 3339 UTC: {due_at}");

    // Listed with exactly what players may read: no note, no key.
    let snapshot = app.snapshot(&s).await;
    assert_eq!(
        snapshot["timers"],
        json!([{"timer_id": id, "event": "guards_return", "due_at": due_at, "repeat_s": 3600}])
    );
    let text = snapshot.to_string();
    assert!(!text.contains("one asleep") && !text.contains("\"guards\""));

    // The same key again replaces the timer: still one.
    let second = called(
        &app,
        &s,
        "schedule_event",
        json!({"event": "guards_return", "delay_s": 2 * DAY, "key": "guards"}),
    )
    .await;
    assert_ne!(second["timer_id"], first["timer_id"]);
    let listed = timers(&app, &s).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (&listed[0]["timer_id"], &listed[0]["repeat_s"]),
        (&second["timer_id"], &Value::Null)
    );

    // Cancelled by its key, then by an id; a second cancel finds nothing.
    let by_key = json!({"key": "guards"});
    let out = called(&app, &s, "cancel_event", by_key.clone()).await;
    assert_eq!(out, json!({"cancelled": true}));
    assert_eq!(timers(&app, &s).await, Vec::<Value>::new());
    let out = called(&app, &s, "cancel_event", by_key).await;
    assert_eq!(out, json!({"cancelled": false}));
    // An RFC 3339 time within 30 days is kept to the millisecond; one
    // past them is refused.
    let at = questd::storage::rfc3339(questd::storage::now_ms() + 2 * DAY as i64 * 1000);
    let tide = called(
        &app,
        &s,
        "schedule_event",
        json!({"event": "tide", "at": at}),
    )
    .await;
    assert_eq!(
        timers(&app, &s).await,
        vec![
            json!({"timer_id": tide["timer_id"], "event": "tide", "due_at": at, "repeat_s": null})
        ]
    );
    let far = call(
        &app,
        &s,
        "schedule_event",
        json!({"event": "tide", "at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(
        (far.status, &far.body["error_type"]),
        (400, &json!("INVALID_ARGS")),
        "{}",
        far.body
    );
    let out = called(
        &app,
        &s,
        "cancel_event",
        json!({"timer_id": tide["timer_id"]}),
    )
    .await;
    assert_eq!(out, json!({"cancelled": true}));
    assert_eq!(timers(&app, &s).await, Vec::<Value>::new());
    app.stop().await;
}

#[actix_web::test]
async fn the_65th_timer_is_rejected_with_timer_limit() {
    let app = app().await;
    let s = acme_session(&app).await;
    for i in 0..64 {
        let mut input = json!({"event": format!("bell_{i}"), "delay_s": DAY + i});
        if i == 0 {
            input["key"] = json!("k");
        }
        called(&app, &s, "schedule_event", input).await;
    }
    assert_eq!(timers(&app, &s).await.len(), 64);
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let a = call(
        &app,
        &s,
        "schedule_event",
        json!({"event": "one_more", "delay_s": DAY}),
    )
    .await;
    assert_eq!(
        (a.status, &a.body["success"], &a.body["error_type"]),
        (409, &json!(false), &json!("TIMER_LIMIT")),
        "{}",
        a.body
    );
    let frames = spectator.until(|f| f["type"] == "tool_result").await;
    let result = frames.last().expect("a tool_result");
    assert_eq!(
        (&result["status"], &result["error_code"], &result["reason"]),
        (
            &json!("rejected"),
            &json!("TIMER_LIMIT"),
            &json!("invalid_actor_state")
        ),
        "{result}"
    );
    assert_eq!(
        timers(&app, &s).await.len(),
        64,
        "none added past the limit"
    );
    // A key already held still replaces at the limit.
    let held = called(
        &app,
        &s,
        "schedule_event",
        json!({"event": "bell_k", "delay_s": DAY, "key": "k"}),
    )
    .await;
    let listed = timers(&app, &s).await;
    assert_eq!(listed.len(), 64);
    assert!(listed.iter().any(|t| t["timer_id"] == held["timer_id"]));
    app.stop().await;
}

#[actix_web::test]
async fn the_host_or_a_key_cancels_a_timer_by_its_route() {
    let app = app().await;
    let s = acme_session(&app).await;
    let schedule = |event: &'static str| {
        let (app, s) = (&app, &s);
        async move {
            let out = called(
                app,
                s,
                "schedule_event",
                json!({"event": event, "delay_s": DAY}),
            )
            .await;
            out["timer_id"].as_str().expect("an id").to_owned()
        }
    };
    let tide = schedule("tide").await;
    let bells = schedule("bells").await;
    let code = invite(&app.base, &s, json!({})).await;
    let brin = join(&app.base, &s.session_id, &code, "Brin").await;

    let bearer = |token: &str| format!("Bearer {token}");
    let (host, spectator, player) = (
        bearer(&s.player_token),
        bearer(&s.spectator_token),
        bearer(&brin.token),
    );
    // Who may not: nothing is cancelled.
    for (headers, status, code) in [
        (vec![], 401, "UNAUTHORIZED"),
        (vec![("Authorization", "Bearer nope")], 401, "UNAUTHORIZED"),
        (
            vec![("Authorization", spectator.as_str())],
            403,
            "FORBIDDEN",
        ),
        (vec![("Authorization", player.as_str())], 403, "FORBIDDEN"),
        (
            vec![("X-Internal-API-Key", TEST_KEY), ("X-Tenant-ID", "other")],
            404,
            "NOT_FOUND",
        ),
    ] {
        let a = delete(&app, &s, &tide, &headers).await;
        assert_eq!(
            (a.status, a.body["error_code"].as_str()),
            (status, Some(code)),
            "{headers:?}: {}",
            a.body
        );
    }
    assert_eq!(timers(&app, &s).await.len(), 2);

    // The host cancels one: it is gone from the snapshot, and the cancel
    // is in the actions log like any call.
    let auth = [("Authorization", host.as_str())];
    let a = delete(&app, &s, &tide, &auth).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body, json!({"cancelled": true, "timer_id": tide}));
    let listed = timers(&app, &s).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["timer_id"], bells.as_str());
    let actions = app.actions(&s).await;
    assert!(
        actions.iter().any(|x| x["tool"] == "cancel_event"
            && x["args"] == json!({"timer_id": tide})
            && x["result"] == json!({"cancelled": true})),
        "{actions:#?}"
    );

    // Gone already, never there, or no id a timer could have: 404.
    let long = "t".repeat(65);
    for unknown in [tide.as_str(), "tmr_0000000000000000", long.as_str()] {
        let a = delete(&app, &s, unknown, &auth).await;
        assert_eq!(
            (a.status, a.body["error_code"].as_str()),
            (404, Some("NOT_FOUND")),
            "{unknown}: {}",
            a.body
        );
    }
    let url = format!("{}/api/v1/sessions/sess_nope/timers/{bells}", app.base);
    let a = request("DELETE", &url, &auth, None).await;
    assert_eq!(a.status, 404, "{}", a.body);

    // A key of the session's tenant may too.
    let keyed = [("X-Internal-API-Key", ACME_KEY), ("X-Tenant-ID", "acme")];
    let a = delete(&app, &s, &bells, &keyed).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(timers(&app, &s).await, Vec::<Value>::new());
    app.stop().await;
}

#[actix_web::test]
async fn mcp_lists_both_timer_tools() {
    let app = app().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "questd-tests", "version": "1"},
    });
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
    let headers = [
        ("X-Internal-API-Key", ACME_KEY),
        ("Accept", "application/json, text/event-stream"),
        ("Mcp-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    let a = request("POST", &format!("{}/mcp", app.base), &headers, Some(&body)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let tools = a.body["result"]["tools"].as_array().expect("tools");
    for name in ["schedule_event", "cancel_event"] {
        let tool = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert_eq!(tool["annotations"]["readOnlyHint"], false, "{tool}");
    }
    app.stop().await;
}

/// `DELETE …/timers/{timer_id}` with a client that waits longer than the
/// server's `SESSION_WAIT` (30 s; [`request`]'s client gives up at 30 s
/// too): the server's own answer.
async fn delete_patiently(
    app: &TestApp,
    s: &Session,
    timer_id: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let url = format!(
        "{}/api/v1/sessions/{}/timers/{timer_id}",
        app.base, s.session_id
    );
    let mut req = awc::Client::builder()
        .timeout(Duration::from_secs(120))
        .finish()
        .delete(url);
    for h in headers {
        req = req.insert_header(*h);
    }
    let mut resp = req.send().await.expect("the server answers the cancel");
    let bytes = resp.body().await.expect("body");
    Answer {
        status: resp.status().as_u16(),
        retry_after: None,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

#[actix_web::test]
async fn a_cancel_behind_a_turn_waiting_for_approval_answers_408_and_runs_after_the_decision() {
    let app = app().await;
    let s = app
        .create_session_with(
            &[("X-Internal-API-Key", ACME_KEY), ("X-Tenant-ID", "acme")],
            json!({"campaign_id": "demo",
                   "approval": {"tools": ["add_inventory"], "timeout_s": 600}}),
        )
        .await;
    let timer = called(
        &app,
        &s,
        "schedule_event",
        json!({"event": "guards_return", "delay_s": DAY}),
    )
    .await;
    let id = timer["timer_id"].as_str().expect("a timer id").to_owned();

    // The player's turn pauses: the offline game master's take waits for a
    // person.
    let chat = json!({"session_id": s.session_id, "message": "take the lamp"});
    let paused = chat_over_http(&app.base, &s.player_token, &chat).await;
    assert_eq!(paused.status, 202, "{}", paused.body);
    assert_eq!(
        paused.body["status"], "approval_required",
        "{}",
        paused.body
    );
    let approval_id = paused.body["approval"]["approval_id"]
        .as_str()
        .expect("an approval id")
        .to_owned();

    // The host's cancel queues behind the paused turn: answered, bounded
    // as the tool API's calls are, and still queued.
    let host = format!("Bearer {}", s.player_token);
    let headers = [
        ("Authorization", host.as_str()),
        ("X-Trace-ID", "trace-cancel-paused"),
    ];
    let a = delete_patiently(&app, &s, &id, &headers).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (408, Some("TIMEOUT")),
        "{}",
        a.body
    );
    let message = a.body["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the session was busy for 30 s; the call is still queued and will run")
            && message.contains("unless this node stops first")
            && message.contains("trace-cancel-paused"),
        "{message}"
    );
    // Nothing ran yet: the timer is still pending.
    let listed = timers(&app, &s).await;
    assert!(
        listed.iter().any(|t| t["timer_id"] == id.as_str()),
        "{listed:?}"
    );

    // Once a person decides, the turn ends and the queued cancel runs.
    let decided = request(
        "POST",
        &format!(
            "{}/api/v1/sessions/{}/approvals/{approval_id}",
            app.base, s.session_id
        ),
        &[("Authorization", host.as_str())],
        Some(&json!({"decision": "deny"})),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    let pending = |listed: Vec<Value>| listed.iter().any(|t| t["timer_id"] == id.as_str());
    while pending(timers(&app, &s).await) {
        assert!(Instant::now() < deadline, "the queued cancel ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let actions = app.actions(&s).await;
    let cancels: Vec<&Value> = actions
        .iter()
        .filter(|x| x["tool"] == "cancel_event" && x["args"] == json!({"timer_id": id}))
        .collect();
    assert_eq!(cancels.len(), 1, "the cancel ran once: {actions:#?}");
    assert_eq!(cancels[0]["result"], json!({"cancelled": true}));

    // Asked again, the session answers that nothing is pending any more.
    let a = delete_patiently(&app, &s, &id, &headers[..1]).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{}",
        a.body
    );
    app.stop().await;
}
