//! `/mcp` through real HTTP: real MCP clients of both eras (rmcp), the
//! stateless 2026-07-28 revision and the 2025 sessions by hand, progress
//! over SSE, and every refusal with its code.

use std::collections::HashMap;

use crate::common::*;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ErrorCode as RpcCode, Implementation,
    ProtocolVersion,
};
use rmcp::service::ServiceError;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{Map, Value, json};

const MODERN: &str = "2026-07-28";
const BOTH: &str = "application/json, text/event-stream";
/// The test server's internal key, as a legitimate MCP client sends it.
const KEY: (&str, &str) = ("x-internal-api-key", TEST_KEY);
/// The key of tenant `acme` (on servers from [`with_acme_key`]).
const ACME: (&str, &str) = ("x-internal-api-key", "acme-key");
/// The tenant header naming `acme`.
const AS_ACME: (&str, &str) = ("x-tenant-id", "acme");

/// A server that also accepts the tenant key of `acme`.
async fn with_acme_key() -> TestApp {
    spawn_with(
        |s| s.tenant_keys = Some("acme:acme-key".into()),
        std::sync::Arc::new(questd::llm::OfflineGameMaster::default()),
    )
    .await
}

/// The per-request `_meta` of the stateless revision.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "questd-tests", "version": "1"},
    })
}

/// A 2026-07-28 request: `params` with the per-request `_meta` added.
fn modern(id: u64, method: &str, params: Value) -> Value {
    let mut params = params;
    let mut meta = meta();
    if let Some(extra) = params.get("_meta").and_then(Value::as_object) {
        for (k, v) in extra {
            meta[k] = v.clone();
        }
    }
    params["_meta"] = meta;
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A request without era markers (for 2025 sessions).
fn plain(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// One answer from `/mcp`.
struct Reply {
    status: u16,
    headers: awc::http::header::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    fn content_type(&self) -> String {
        self.header("content-type").unwrap_or_default()
    }

    /// The JSON messages of an SSE body, in order.
    fn events(&self) -> Vec<Value> {
        self.body
            .split("\n\n")
            .filter_map(|event| {
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).unwrap())
            })
            .collect()
    }

    /// The JSON-RPC error code of a JSON answer.
    fn code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error in {}", self.body))
    }
}

/// Sends `body` to `/mcp` with exactly these headers.
async fn send(app: &TestApp, method: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let url = format!("{}/mcp", app.base);
    let client = client();
    let mut req = match method {
        "POST" => client.post(&url),
        "GET" => client.get(&url),
        "DELETE" => client.delete(&url),
        "PUT" => client.put(&url),
        other => panic!("no method {other}"),
    };
    for (name, value) in headers {
        req = req.insert_header((*name, *value));
    }
    let mut resp = req.send_body(body.to_owned()).await.expect("request sends");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.body().limit(16 * 1024 * 1024).await.expect("body");
    Reply {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// POSTs a JSON-RPC message with JSON and SSE accepted plus `headers`.
async fn post(app: &TestApp, headers: &[(&str, &str)], body: &Value) -> Reply {
    let mut all = vec![("content-type", "application/json"), ("accept", BOTH)];
    all.extend_from_slice(headers);
    send(app, "POST", &all, &body.to_string()).await
}

/// POSTs a 2026-07-28 request with its mirror headers.
async fn post_modern(app: &TestApp, headers: &[(&str, &str)], body: &Value) -> Reply {
    let method = body["method"].as_str().unwrap().to_owned();
    let mut all = vec![
        ("mcp-protocol-version", MODERN),
        ("mcp-method", method.as_str()),
    ];
    all.extend_from_slice(headers);
    post(app, &all, body).await
}

/// Opens a 2025-era session; answers its id.
async fn initialize(app: &TestApp, version: &str, headers: &[(&str, &str)]) -> String {
    let r = post(
        app,
        headers,
        &plain(
            1,
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.header("mcp-session-id").expect("a session id")
}

/// The active actor and a neighbouring area, from a snapshot.
fn a_move(snapshot: &Value) -> (String, String) {
    (
        snapshot["active_actor_id"].as_str().unwrap().to_owned(),
        neighbour(snapshot),
    )
}

/// The error JSON a failed call's text content carries.
fn tool_error(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

fn rmcp_config(
    app: &TestApp,
    headers: &[(&'static str, &str)],
) -> StreamableHttpClientTransportConfig {
    let headers: HashMap<_, _> = headers
        .iter()
        .map(|(k, v)| {
            (
                reqwest::header::HeaderName::from_static(k),
                reqwest::header::HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect();
    StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", app.base))
        .custom_headers(headers)
}

fn client_config(version: ProtocolVersion) -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("questd-tests", "1.0.0"),
    )
    .with_protocol_version(version)
}

#[actix_web::test]
async fn a_2025_11_25_client_lists_and_calls_tools_that_players_see() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut spectator, welcome) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let (actor, to) = a_move(&welcome["state"]);

    let transport = StreamableHttpClientTransport::from_config(rmcp_config(&app, &[KEY]));
    let client = client_config(ProtocolVersion::V_2025_11_25)
        .serve(transport)
        .await
        .expect("the handshake completes");
    let peer = client.peer_info().expect("server info");
    assert_eq!(peer.protocol_version, ProtocolVersion::V_2025_11_25);
    assert!(peer.capabilities.tools.is_some());

    let tools = client.list_all_tools().await.unwrap();
    let find = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let mv = find("move");
    let hints = mv.annotations.clone().unwrap();
    assert_eq!(
        (hints.read_only_hint, hints.idempotent_hint),
        (Some(false), Some(false))
    );
    assert!(mv.output_schema.is_some() && mv.input_schema.get("properties").is_some());
    let look = find("move_options").annotations.unwrap();
    assert_eq!(
        (look.read_only_hint, look.idempotent_hint),
        (Some(true), Some(true))
    );

    let args = json!({"actor_id": actor, "to_area_id": to, "session_id": s.session_id});
    let done = client
        .call_tool(CallToolRequestParams::new("move").with_arguments(object(args)))
        .await
        .unwrap();
    assert_eq!(done.is_error, Some(false), "{done:?}");
    let out = done.structured_content.clone().unwrap();
    assert_eq!(out["to_area_id"], to.as_str());
    let text = done.content[0].as_text().unwrap().text.clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), out);

    // Every connection of the session sees the call; the log keeps it.
    let frames = spectator
        .until(|f| f["type"] == "tool_result" && f["tool"] == "move")
        .await;
    let result = frames.last().unwrap();
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(result["result"]["to_area_id"], to.as_str());
    let actions = app.actions(&s).await;
    assert!(
        actions.iter().any(|a| a["tool"] == "move"
            && a["status"] == "ok"
            && a["result"]["to_area_id"] == to.as_str()),
        "{actions:#?}"
    );

    // Bad arguments are a tool result the model can read, not a protocol error.
    let bad = client
        .call_tool(
            CallToolRequestParams::new("move")
                .with_arguments(object(json!({"actor_id": 7, "session_id": s.session_id}))),
        )
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true));
    let text = bad.content[0].as_text().unwrap().text.clone();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error_code"],
        "INVALID_ARGS"
    );

    match client.call_tool(CallToolRequestParams::new("fly")).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, RpcCode::INVALID_PARAMS, "{e:?}"),
        other => panic!("an unknown tool is -32602: {other:?}"),
    }
    client.cancel().await.unwrap();
    app.stop().await;
}

#[actix_web::test]
async fn a_2026_07_28_client_discovers_and_calls_with_the_session_header() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let transport = StreamableHttpClientTransport::from_config(rmcp_config(
        &app,
        &[KEY, ("x-session-id", s.session_id.as_str())],
    ));
    let client = client_config(ProtocolVersion::V_2026_07_28)
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("discovery succeeds");
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "move_options"));
    // Bound by X-Session-ID alone: the tool reads that session's state.
    let snapshot = app.snapshot(&s).await;
    let done = client
        .call_tool(
            CallToolRequestParams::new("move_options")
                .with_arguments(object(json!({"actor_id": snapshot["active_actor_id"]}))),
        )
        .await
        .unwrap();
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert!(done.structured_content.is_some());
    client.cancel().await.unwrap();
    app.stop().await;
}

#[actix_web::test]
async fn the_stateless_revision_by_hand() {
    let app = spawn_app().await;
    let s = app.demo().await;

    let r = post_modern(&app, &[KEY], &modern(1, "server/discover", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.content_type().starts_with("application/json"));
    assert!(
        r.header("mcp-session-id").is_none(),
        "no sessions in this era"
    );
    let d = &r.json()["result"];
    assert_eq!(d["resultType"], "complete");
    assert_eq!(
        d["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    assert!(d["capabilities"]["tools"].is_object());
    assert_eq!(d["serverInfo"]["name"], "questd");
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "questd"
    );
    assert_eq!(d["cacheScope"], "public");
    assert!(d["ttlMs"].as_u64().unwrap() > 0);

    let r = post_modern(&app, &[KEY], &modern(2, "tools/list", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json()["result"].clone();
    assert_eq!(list["resultType"], "complete");
    assert_eq!(list["cacheScope"], "private");
    assert!(list["ttlMs"].as_u64().is_some());
    let tools = list["tools"].as_array().unwrap();
    let mv = tools.iter().find(|t| t["name"] == "move").unwrap();
    assert_eq!(mv["inputSchema"]["type"], "object");
    assert_eq!(mv["outputSchema"]["type"], "object");
    assert_eq!(mv["annotations"]["readOnlyHint"], false);
    assert_eq!(mv["annotations"]["idempotentHint"], false);
    let dice = tools.iter().find(|t| t["name"] == "roll_dice").unwrap();
    assert_eq!(dice["annotations"]["readOnlyHint"], true);

    let snapshot = app.snapshot(&s).await;
    let (actor, to) = a_move(&snapshot);
    let call = modern(
        3,
        "tools/call",
        json!({"name": "move", "arguments": {"actor_id": actor, "to_area_id": to, "session_id": s.session_id}}),
    );
    let r = post_modern(&app, &[KEY, ("mcp-name", "move")], &call).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["id"], 3);
    let result = &v["result"];
    assert_eq!(
        (result["resultType"].clone(), result["isError"].clone()),
        (json!("complete"), json!(false))
    );
    assert_eq!(result["structuredContent"]["to_area_id"], to.as_str());
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
    assert_eq!(result["content"][0]["type"], "text");
    assert_eq!(result["_meta"]["questd/audit"]["status"], "ok");
    assert_eq!(position(&app.snapshot(&s).await), to);
    assert!(app.actions(&s).await.iter().any(|a| a["tool"] == "move"));
    app.stop().await;
}

#[actix_web::test]
async fn refusals_have_their_codes() {
    let app = spawn_app().await;
    let s = app.demo().await;

    // Invalid arguments: an isError result, HTTP 200.
    let call = modern(
        1,
        "tools/call",
        json!({"name": "move", "arguments": {"actor_id": 7, "session_id": s.session_id}}),
    );
    let r = post_modern(&app, &[KEY], &call).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        tool_error(&r.json()["result"])["error_code"],
        "INVALID_ARGS"
    );
    let r = post_modern(
        &app,
        &[KEY],
        &modern(
            2,
            "tools/call",
            json!({"name": "roll_dice", "arguments": [1]}),
        ),
    )
    .await;
    assert_eq!(
        tool_error(&r.json()["result"])["error_code"],
        "INVALID_ARGS"
    );

    // Unknown tool: -32602.
    let r = post_modern(
        &app,
        &[KEY],
        &modern(3, "tools/call", json!({"name": "fly", "arguments": {}})),
    )
    .await;
    assert_eq!((r.status, r.code()), (200, -32602), "{}", r.body);
    assert_eq!(r.json()["id"], 3);

    // A version the server does not speak: -32022 with what it does speak.
    let mut old = modern(4, "tools/list", json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let r = post(&app, &[KEY], &old).await;
    assert_eq!((r.status, r.code()), (400, -32022), "{}", r.body);
    let data = &r.json()["error"]["data"];
    assert_eq!(data["requested"], "1900-01-01");
    let supported: Vec<&str> = data["supported"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        supported.contains(&MODERN) && supported.contains(&"2025-11-25"),
        "{supported:?}"
    );
    let r = post(
        &app,
        &[KEY, ("mcp-protocol-version", "2099-01-01")],
        &modern(5, "tools/list", json!({})),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32022), "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["requested"], "2099-01-01");

    // Header and body disagree: -32020.
    let r = post(
        &app,
        &[KEY, ("mcp-protocol-version", "2025-11-25")],
        &modern(6, "tools/list", json!({})),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "{}", r.body);
    let r = post(
        &app,
        &[KEY, ("mcp-method", "tools/call")],
        &modern(7, "tools/list", json!({})),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "{}", r.body);
    let r = post(
        &app,
        &[KEY, ("mcp-name", "hp_delta")],
        &modern(
            8,
            "tools/call",
            json!({"name": "roll_dice", "arguments": {"dice": "1d6"}}),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "{}", r.body);

    // Missing per-request fields: -32602.
    let mut bare = modern(9, "tools/list", json!({}));
    bare["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let r = post_modern(&app, &[KEY], &bare).await;
    assert_eq!((r.status, r.code()), (400, -32602), "{}", r.body);
    // No session and no version at all: told how to start.
    let r = post(&app, &[KEY], &plain(10, "tools/list", json!({}))).await;
    assert_eq!((r.status, r.code()), (400, -32600), "{}", r.body);
    assert!(r.json()["error"]["data"]["supported"].is_array());

    // Unknown method: -32601, 404 in this era.
    let r = post_modern(&app, &[KEY], &modern(11, "resources/list", json!({}))).await;
    assert_eq!((r.status, r.code()), (404, -32601), "{}", r.body);

    // Notifications: 202, no body.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": meta()}});
    let r = post(&app, &[KEY], &note).await;
    assert_eq!((r.status, r.body.as_str()), (202, ""));
    let r = post(
        &app,
        &[KEY],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (202, ""));

    // Malformed bodies.
    let r = send(
        &app,
        "POST",
        &[KEY, ("content-type", "application/json")],
        "{\"jsonrpc\":",
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32700), "{}", r.body);
    assert_eq!(r.json()["id"], Value::Null);
    let batch = json!([
        modern(12, "tools/list", json!({})),
        modern(13, "tools/list", json!({}))
    ]);
    let r = post(&app, &[KEY], &batch).await;
    assert_eq!((r.status, r.code()), (400, -32600), "{}", r.body);
    let r = post(&app, &[KEY], &json!({"jsonrpc": "2.0", "id": 14})).await;
    assert_eq!((r.status, r.code()), (400, -32600), "{}", r.body);
    let r = post(
        &app,
        &[KEY],
        &json!({"jsonrpc": "2.0", "id": 15, "method": "tools/list", "params": "x"}),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32600), "{}", r.body);

    // Origins: none and the server's own pass; every other page, a local
    // tool on another port included, is 403 unless listed in
    // QUESTD_ALLOWED_ORIGINS (docs/protocol.md §1.16).
    let list = modern(16, "tools/list", json!({}));
    let host = format!("http://127.0.0.1:{}", app.port);
    for (origin, status) in [
        ("https://evil.example", 403),
        ("null", 403),
        ("http://localhost.evil.example:3000", 403),
        ("http://localhost:3000", 403),
        ("http://[::1]:5173", 403),
        (host.as_str(), 200),
    ] {
        let r = post_modern(&app, &[KEY, ("origin", origin)], &list).await;
        assert_eq!(r.status, status, "{origin}: {}", r.body);
    }

    // Other HTTP methods: 405 and what is allowed.
    for method in ["GET", "PUT"] {
        let r = send(&app, method, &[KEY, ("accept", "text/event-stream")], "").await;
        assert_eq!(r.status, 405, "{method}");
        let allow = r.header("allow").unwrap();
        assert!(
            allow.contains("POST") && allow.contains("DELETE"),
            "{allow}"
        );
    }
    // An Accept that allows neither JSON nor a stream.
    let r = send(
        &app,
        "POST",
        &[
            KEY,
            ("content-type", "application/json"),
            ("accept", "text/html"),
            ("mcp-protocol-version", MODERN),
        ],
        &list.to_string(),
    )
    .await;
    assert_eq!((r.status, r.code()), (406, -32600), "{}", r.body);
    // A body that is not JSON by its type: 415 before anything reads it.
    let r = send(
        &app,
        "POST",
        &[KEY, ("content-type", "text/plain"), ("accept", BOTH)],
        &list.to_string(),
    )
    .await;
    assert_eq!(r.status, 415, "{}", r.body);
    app.stop().await;
}

#[actix_web::test]
async fn sessions_of_the_2025_revisions_by_hand() {
    let app = with_acme_key().await;

    // The version is echoed when spoken, else the newest handshake one.
    let r = post(
        &app,
        &[KEY],
        &plain(1, "initialize", json!({"protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})),
    )
    .await;
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
    assert!(r.json()["result"].get("resultType").is_none());
    let sid = initialize(&app, "2025-06-18", &[KEY]).await;
    assert_eq!(sid.len(), 32);
    assert!(sid.chars().all(|c| c.is_ascii_alphanumeric()));
    let in_session = [KEY, ("mcp-session-id", sid.as_str())];

    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = post(&app, &in_session, &note).await;
    assert_eq!((r.status, r.body.as_str()), (202, ""));

    let r = post(&app, &in_session, &plain(2, "tools/list", json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json()["result"].clone();
    assert!(list["tools"].as_array().unwrap().len() > 5);
    assert!(list.get("resultType").is_none() && list.get("ttlMs").is_none());
    let r = post(&app, &in_session, &plain(3, "ping", json!({}))).await;
    assert_eq!(r.json()["result"], json!({}));
    let r = post(&app, &in_session, &plain(4, "server/discover", json!({}))).await;
    assert_eq!((r.status, r.code()), (200, -32601), "{}", r.body);

    // The version header must be the session's.
    let r = post(
        &app,
        &[
            KEY,
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        &plain(5, "tools/list", json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(
        &app,
        &[
            KEY,
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        &plain(6, "tools/list", json!({})),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "{}", r.body);

    // The session id alone, or with a tenant header, opens nothing.
    for headers in [
        vec![("mcp-session-id", sid.as_str())],
        vec![("mcp-session-id", sid.as_str()), ("x-tenant-id", "default")],
    ] {
        let r = post(&app, &headers, &plain(7, "tools/list", json!({}))).await;
        assert_eq!((r.status, r.code()), (401, -32600), "{}", r.body);
        assert_eq!(r.json()["error"]["data"]["error_code"], "UNAUTHORIZED");
    }
    // Another tenant's session (with that tenant's own key, or the internal
    // key acting for it), and an unknown one, are 404.
    for other in [
        vec![ACME, AS_ACME, ("mcp-session-id", sid.as_str())],
        vec![KEY, AS_ACME, ("mcp-session-id", sid.as_str())],
    ] {
        let r = post(&app, &other, &plain(7, "tools/list", json!({}))).await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    // A tenant key cannot claim another tenant.
    let r = post(
        &app,
        &[
            ACME,
            ("mcp-session-id", sid.as_str()),
            ("x-tenant-id", "default"),
        ],
        &plain(7, "tools/list", json!({})),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, -32600), "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["error_code"], "FORBIDDEN");
    let r = post(
        &app,
        &[KEY, ("mcp-session-id", "0123456789abcdef0123456789abcdef")],
        &plain(8, "tools/list", json!({})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = post(
        &app,
        &[KEY, ("mcp-session-id", "0123456789abcdef0123456789abcdef")],
        &note,
    )
    .await;
    assert_eq!(r.status, 404, "notifications too: {}", r.body);

    // DELETE ends it, for its own tenant only; then it is 404.
    let r = send(&app, "DELETE", &[KEY], "").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = send(&app, "DELETE", &[("mcp-session-id", sid.as_str())], "").await;
    assert_eq!(r.status, 401, "no key: {}", r.body);
    let r = send(
        &app,
        "DELETE",
        &[ACME, AS_ACME, ("mcp-session-id", sid.as_str())],
        "",
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = post(&app, &in_session, &plain(9, "ping", json!({}))).await;
    assert_eq!(r.status, 200, "still open: {}", r.body);
    let r = send(&app, "DELETE", &[KEY, ("mcp-session-id", sid.as_str())], "").await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = post(&app, &in_session, &plain(9, "tools/list", json!({}))).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = send(&app, "DELETE", &[KEY, ("mcp-session-id", sid.as_str())], "").await;
    assert_eq!(r.status, 404, "{}", r.body);

    // A tenant's session works for that tenant, with any key of it.
    let acme = initialize(&app, "2025-11-25", &[ACME, AS_ACME]).await;
    for headers in [
        vec![ACME, AS_ACME, ("mcp-session-id", acme.as_str())],
        vec![KEY, AS_ACME, ("mcp-session-id", acme.as_str())],
    ] {
        let r = post(&app, &headers, &plain(10, "tools/list", json!({}))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = post(
        &app,
        &[KEY, ("mcp-session-id", acme.as_str())],
        &plain(11, "tools/list", json!({})),
    )
    .await;
    assert_eq!(r.status, 404, "not the default tenant's: {}", r.body);
    app.stop().await;
}

#[actix_web::test]
async fn progress_streams_queued_then_the_result() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let actor = app.snapshot(&s).await["active_actor_id"].clone();
    let args = json!({"actor_id": actor, "session_id": s.session_id});

    // Stateless: a string token.
    let call = modern(
        1,
        "tools/call",
        json!({"name": "move_options", "arguments": args, "_meta": {"progressToken": "p-1"}}),
    );
    let r = post_modern(&app, &[KEY], &call).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.content_type().starts_with("text/event-stream"),
        "{}",
        r.content_type()
    );
    let events = r.events();
    assert_eq!(events.len(), 2, "{events:#?}");
    assert_eq!(events[0]["method"], "notifications/progress");
    assert_eq!(events[0]["params"]["progressToken"], "p-1");
    assert_eq!(events[0]["params"]["message"], "queued");
    assert!(events[0].get("id").is_none());
    assert_eq!(events[1]["id"], 1);
    assert_eq!(events[1]["result"]["isError"], false);
    assert_eq!(events[1]["result"]["resultType"], "complete");

    // In a 2025 session: a number token.
    let sid = initialize(&app, "2025-11-25", &[KEY]).await;
    let call = plain(
        2,
        "tools/call",
        json!({"name": "move_options", "arguments": args, "_meta": {"progressToken": 7}}),
    );
    let r = post(&app, &[KEY, ("mcp-session-id", sid.as_str())], &call).await;
    let events = r.events();
    assert_eq!(events.len(), 2, "{}", r.body);
    assert_eq!(events[0]["params"]["progressToken"], 7);
    assert_eq!(events[1]["result"]["isError"], false);
    assert!(events[1]["result"].get("resultType").is_none());

    // A client that does not accept a stream gets plain JSON.
    let r = send(
        &app,
        "POST",
        &[
            KEY,
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-session-id", sid.as_str()),
        ],
        &call.to_string(),
    )
    .await;
    assert!(r.content_type().starts_with("application/json"));
    assert_eq!(r.json()["result"]["isError"], false);
    // No token: JSON, even when a stream is allowed.
    let call = plain(
        3,
        "tools/call",
        json!({"name": "move_options", "arguments": args}),
    );
    let r = post(&app, &[KEY, ("mcp-session-id", sid.as_str())], &call).await;
    assert!(r.content_type().starts_with("application/json"));
    app.stop().await;
}

/// A session of the demo campaign created for tenant `acme` with its key.
async fn acme_session(app: &TestApp) -> Session {
    app.create_session_with(&[ACME], json!({"campaign_id": "demo"}))
        .await
}

#[actix_web::test]
async fn another_tenants_game_session_is_not_found() {
    let app = with_acme_key().await;
    let s = app.demo().await;
    let snapshot = app.snapshot(&s).await;
    let (actor, to) = a_move(&snapshot);
    let start = position(&snapshot);
    // Tenant acme, with its own key or the internal key acting for it.
    let acme_keys: [&[(&str, &str)]; 2] = [&[ACME, AS_ACME], &[KEY, AS_ACME]];
    for acme in acme_keys {
        let by_arg = modern(
            1,
            "tools/call",
            json!({"name": "move", "arguments": {"actor_id": actor, "to_area_id": to, "session_id": s.session_id}}),
        );
        let r = post_modern(&app, acme, &by_arg).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(tool_error(&r.json()["result"])["reason"], "not_found");
        let by_header = modern(
            2,
            "tools/call",
            json!({"name": "move_options", "arguments": {"actor_id": actor}}),
        );
        let mut headers = acme.to_vec();
        headers.push(("x-session-id", s.session_id.as_str()));
        let r = post_modern(&app, &headers, &by_header).await;
        assert_eq!(tool_error(&r.json()["result"])["reason"], "not_found");
    }
    assert!(app.actions(&s).await.is_empty(), "nothing ran");
    assert_eq!(position(&app.snapshot(&s).await), start, "nobody moved");
    // Its own tenant finds it.
    let by_header = modern(
        3,
        "tools/call",
        json!({"name": "move_options", "arguments": {"actor_id": actor}}),
    );
    let r = post_modern(
        &app,
        &[KEY, ("x-session-id", s.session_id.as_str())],
        &by_header,
    )
    .await;
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.body);
    // And acme's key reaches acme's own session.
    let theirs = acme_session(&app).await;
    let (actor, to) = a_move(&app.snapshot(&theirs).await);
    let call = modern(
        4,
        "tools/call",
        json!({"name": "move", "arguments": {"actor_id": actor, "to_area_id": to, "session_id": theirs.session_id}}),
    );
    let r = post_modern(&app, &[ACME, AS_ACME], &call).await;
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.body);
    assert_eq!(position(&app.snapshot(&theirs).await), to);
    assert_eq!(position(&app.snapshot(&s).await), start);
    app.stop().await;
}

#[actix_web::test]
async fn the_service_key_and_rate_rules_apply() {
    // Even a server without any key configured opens /mcp to nobody.
    let open = spawn_with(
        |s| s.internal_api_key = None,
        std::sync::Arc::new(questd::llm::OfflineGameMaster::default()),
    )
    .await;
    let list = modern(1, "tools/list", json!({}));
    for headers in [&[][..], &[KEY][..]] {
        let r = post_modern(&open, headers, &list).await;
        assert_eq!((r.status, r.code()), (401, -32600), "{}", r.body);
        assert_eq!(r.json()["error"]["data"]["error_code"], "UNAUTHORIZED");
    }
    open.stop().await;

    let app = spawn_with(
        |s| {
            s.internal_api_key = Some("k-123".into());
            s.tenant_keys = Some("acme:acme-key".into());
            s.service_per_minute = 1;
            s.service_burst = 2;
        },
        std::sync::Arc::new(questd::llm::OfflineGameMaster::default()),
    )
    .await;

    let r = post_modern(&app, &[], &list).await;
    assert_eq!((r.status, r.code()), (401, -32600), "{}", r.body);
    // The key is judged before the body is read, so the message's id is
    // not known: `null`, as JSON-RPC answers an id it could not read.
    assert_eq!(r.json()["id"], Value::Null);
    assert_eq!(r.json()["error"]["data"]["error_code"], "UNAUTHORIZED");
    let r = post(
        &app,
        &[],
        &plain(
            2,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        ),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    // A tenant header grants nothing; a wrong key is refused.
    for headers in [
        &[("x-tenant-id", "acme")][..],
        &[("x-internal-api-key", "k-124")][..],
        &[KEY][..],
    ] {
        let r = post_modern(&app, headers, &list).await;
        assert_eq!(
            (r.status, r.code()),
            (401, -32600),
            "{headers:?}: {}",
            r.body
        );
    }
    // A tenant key acts for its own tenant only.
    let r = post_modern(&app, &[ACME, ("x-tenant-id", "globex")], &list).await;
    assert_eq!(
        (r.status, r.json()["error"]["data"]["error_code"].clone()),
        (403, json!("FORBIDDEN")),
        "{}",
        r.body
    );
    let r = post_modern(
        &app,
        &[("x-internal-api-key", "k-123"), ("x-tenant-id", "a b")],
        &list,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["data"]["error_code"].clone()),
        (400, json!("CONTEXT_INVALID"))
    );

    let key = [("x-internal-api-key", "k-123")];
    for _ in 0..2 {
        let r = post_modern(&app, &key, &list).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = post_modern(&app, &key, &list).await;
    assert_eq!((r.status, r.code()), (429, -32600), "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["error_code"], "RATE_LIMITED");
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    // Another tenant's key has its own limit.
    let r = post_modern(&app, &[ACME, AS_ACME], &list).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Notifications cost nothing and are still taken.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    assert_eq!(post_modern(&app, &key, &note).await.status, 202);
    app.stop().await;
}

#[actix_web::test]
async fn a_session_is_known_to_every_worker() {
    let app = spawn_with(
        |s| s.http_workers = Some(3),
        std::sync::Arc::new(questd::llm::OfflineGameMaster::default()),
    )
    .await;
    let sid = initialize(&app, "2025-11-25", &[KEY]).await;
    // Each request opens its own connection, so they spread over the workers.
    for id in 0..12 {
        let r = post(
            &app,
            &[
                KEY,
                ("mcp-session-id", sid.as_str()),
                ("connection", "close"),
            ],
            &plain(id, "ping", json!({})),
        )
        .await;
        assert_eq!(r.status, 200, "request {id}: {}", r.body);
    }
    app.stop().await;
}
