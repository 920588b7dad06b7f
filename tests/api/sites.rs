//! Sites (docs/protocol.md §1.12.1) and idempotent service calls, through real
//! HTTP: a tenant's site gets a campaign's content, the content tools run
//! on it with `X-Site-ID` and no session, what they write survives a
//! restart, and a retried call with a key runs once.

use std::sync::Arc;

use crate::common::*;
use questd::llm::OfflineGameMaster;
use serde_json::{Value, json};

/// The headers of a service call of tenant `t` to site `site`, with the
/// test key.
fn site_headers<'a>(t: &'a str, site: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("X-Tenant-ID", t),
        ("X-Site-ID", site),
        ("X-Trace-ID", "trace-sites"),
        ("X-Internal-API-Key", TEST_KEY),
    ]
}

async fn put_site(app: &TestApp, t: &str, site: &str, body: &Value) -> Answer {
    let url = format!("{}/api/v1/sites/{site}", app.base);
    request("PUT", &url, &site_headers(t, site), Some(body)).await
}

async fn call(app: &TestApp, headers: &[(&str, &str)], tool: &str, input: Value) -> Answer {
    let url = format!("{}/api/v1/tools/call", app.base);
    request(
        "POST",
        &url,
        headers,
        Some(&json!({"tool_name": tool, "input": input})),
    )
    .await
}

#[actix_web::test]
async fn a_site_is_given_a_campaign_and_its_content_tools_run_without_a_session() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/sites/yantian-main", app.base);

    // Giving a site content needs a key; X-Tenant-ID alone grants nothing.
    let bare = request(
        "PUT",
        &url,
        &[("X-Tenant-ID", "yantian")],
        Some(&json!({"campaign_id": "demo"})),
    )
    .await;
    assert_eq!(bare.status, 401, "{}", bare.body);
    // Before a PUT, a content tool at site level says the site is unknown.
    let before = call(
        &app,
        &site_headers("yantian", "yantian-main"),
        "get_site_map",
        json!({}),
    )
    .await;
    assert_eq!(before.status, 404, "{}", before.body);
    assert_eq!(before.body["error_type"], "NOT_FOUND", "{}", before.body);
    assert!(
        before.body["error"]
            .as_str()
            .unwrap()
            .contains("PUT /api/v1/sites/yantian-main"),
        "says what to do: {}",
        before.body
    );

    let created = put_site(
        &app,
        "yantian",
        "yantian-main",
        &json!({"campaign_id": "demo"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["site_id"], "yantian-main");
    assert_eq!(created.body["tenant_id"], "yantian");
    assert_eq!(created.body["campaign_id"], "demo");
    assert_eq!(created.body["version"], 1);
    assert!(
        created.body["npcs"].as_u64().unwrap() >= 1,
        "{}",
        created.body
    );
    let again = put_site(
        &app,
        "yantian",
        "yantian-main",
        &json!({"campaign_id": "demo"}),
    )
    .await;
    assert_eq!(
        (again.status, again.body["version"].clone()),
        (200, json!(2))
    );

    let headers = site_headers("yantian", "yantian-main");
    let profile = call(
        &app,
        &headers,
        "get_npc_profile",
        json!({"npc_id": "npc_maren"}),
    )
    .await;
    assert_eq!(profile.status, 200, "{}", profile.body);
    assert_eq!(profile.body["output"]["npc_id"], "npc_maren");
    let map = call(&app, &headers, "get_site_map", json!({})).await;
    assert_eq!(map.status, 200, "{}", map.body);
    assert_eq!(
        map.body["output"]["site_id"], "yantian-main",
        "the site, not its campaign"
    );
    assert_eq!(map.body["output"]["site_name"], created.body["site_name"]);
    let found = call(&app, &headers, "search_content", json!({"query": "lamp"})).await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(
        found.body["output"]
            .to_string()
            .contains("Oil for the Last Lamp"),
        "{}",
        found.body
    );

    // A draft written at site level is there for the next call.
    let draft = call(
        &app,
        &headers,
        "create_draft_content",
        json!({"content_type": "knowledge", "title": "The village well", "body": "A thousand years old."}),
    )
    .await;
    assert_eq!(draft.status, 200, "{}", draft.body);
    assert_eq!(draft.body["output"]["status"], "draft");
    let drafts = call(
        &app,
        &headers,
        "search_content",
        json!({"query": "well", "status": "draft"}),
    )
    .await;
    assert!(
        drafts.body["output"]
            .to_string()
            .contains("The village well"),
        "{}",
        drafts.body
    );
    let site = request("GET", &url, &headers, None).await;
    assert_eq!(
        site.body["version"], 3,
        "the draft is one write: {}",
        site.body
    );

    // Another tenant's site of the same id is another site.
    let other = call(
        &app,
        &site_headers("globex", "yantian-main"),
        "search_content",
        json!({"query": "well", "status": "draft"}),
    )
    .await;
    assert_eq!(other.status, 404, "{}", other.body);

    // Tools that need a game still need a session.
    let moved = call(
        &app,
        &headers,
        "move",
        json!({"actor_id": "pc_001", "to_area_id": "area_002"}),
    )
    .await;
    assert_eq!(moved.status, 400, "{}", moved.body);
    assert_eq!(
        moved.body["error_type"], "CONTEXT_INVALID",
        "{}",
        moved.body
    );

    // A bad site id or body is refused with a reason.
    let bad = put_site(&app, "yantian", "bad!id", &json!({"campaign_id": "demo"})).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let bad = put_site(&app, "yantian", "s2", &json!({"campaign_id": "nope"})).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let bad = put_site(&app, "yantian", "s2", &json!({"campaign": {"title": 1}})).await;
    assert_eq!(
        (bad.status, bad.body["error_code"].clone()),
        (400, json!("INVALID_CAMPAIGN"))
    );
}

#[actix_web::test]
async fn what_a_site_wrote_is_there_after_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = spawn_in(dir.clone(), |_| {}, Arc::new(OfflineGameMaster::default())).await;
    let created = put_site(&app, "acme", "museum", &json!({"campaign_id": "demo"})).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let headers = site_headers("acme", "museum");
    let draft = call(
        &app,
        &headers,
        "create_draft_content",
        json!({"content_type": "note", "title": "Opening hours", "body": "Nine to five."}),
    )
    .await;
    assert_eq!(draft.status, 200, "{}", draft.body);
    app.stop().await;
    drop(app);

    let app = spawn_in(dir, |_| {}, Arc::new(OfflineGameMaster::default())).await;
    let found = call(
        &app,
        &headers,
        "search_content",
        json!({"query": "hours", "status": "draft"}),
    )
    .await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(
        found.body["output"].to_string().contains("Opening hours"),
        "{}",
        found.body
    );
}

#[actix_web::test]
async fn a_retried_write_with_a_key_runs_once() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let headers = site_headers("default", "site-1");
    let url = format!("{}/api/v1/tools/call", app.base);
    let body = |rid: &str, title: &str| {
        json!({
            "tool_name": "create_draft_content",
            "request_id": rid,
            "input": {"session_id": s.session_id, "content_type": "note", "title": title, "body": "b"},
        })
    };
    let first = request("POST", &url, &headers, Some(&body("req-1", "Once"))).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let retry = request("POST", &url, &headers, Some(&body("req-1", "Once"))).await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.body, first.body, "the retry gets the first answer");
    // The header spelling is the same key.
    let mut keyed = headers.clone();
    keyed.push(("Idempotency-Key", "req-1"));
    let mut plain = body("req-1", "Once");
    plain.as_object_mut().unwrap().remove("request_id");
    let by_header = request("POST", &url, &keyed, Some(&plain)).await;
    assert_eq!(by_header.body, first.body);

    // The session has one draft, not three.
    let found = call(
        &app,
        &headers,
        "search_content",
        json!({"session_id": s.session_id, "query": "Once", "status": "draft"}),
    )
    .await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert_eq!(found.body["output"]["total"], 1, "{}", found.body);

    // The same key for another call is refused, and runs nothing.
    let reused = request("POST", &url, &headers, Some(&body("req-1", "Twice"))).await;
    assert_eq!(reused.status, 409, "{}", reused.body);
    assert_eq!(reused.body["error_code"], "CONFLICT");
    // Keys are the caller's tenant's: another tenant's same key runs.
    let acme = site_headers("acme", "site-1");
    let own = request(
        "POST",
        &url,
        &acme,
        Some(&json!({"tool_name": "roll_dice", "request_id": "req-1", "input": {"dice": "1d6", "reason": "test"}})),
    )
    .await;
    assert_eq!(own.status, 200, "{}", own.body);

    // MCP: the Idempotency-Key header makes a retried tools/call answer
    // the first result.
    let mcp = format!("{}/mcp", app.base);
    let rpc = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "roll_dice", "arguments": {"dice": "10d100", "reason": "test"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}}}})
    };
    let mut mcp_headers = vec![
        ("X-Internal-API-Key", TEST_KEY),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Idempotency-Key", "mcp-1"),
    ];
    let a = request("POST", &mcp, &mcp_headers, Some(&rpc(1))).await;
    let b = request("POST", &mcp, &mcp_headers, Some(&rpc(2))).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["result"].is_object(), "{}", a.body);
    assert_eq!(
        a.body["result"], b.body["result"],
        "one roll, answered twice"
    );
    mcp_headers.pop();
    let c = request("POST", &mcp, &mcp_headers, Some(&rpc(3))).await;
    assert_ne!(
        a.body["result"], c.body["result"],
        "without a key it rolls again"
    );
}
