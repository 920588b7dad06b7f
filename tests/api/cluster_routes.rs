//! Every route that names a session answers the same on every node
//! (docs/protocol.md §15): two questd processes on one PostgreSQL database, the
//! session owned by node A, the call sent to node B. B hands it to A, the
//! client gets A's answer as A made it, and the call's effect happens once.

use crate::cluster::{database, node, node_with};
use crate::common::*;
use crate::process::Server;
use serde_json::{Value, json};

/// Node A, which owns a fresh demo session, and node B, which does not.
async fn owned_by_a(db: &str) -> (Server, Server, Session) {
    let (a, b) = (node(db, "node-a"), node(db, "node-b"));
    let s = a.demo().await;
    assert_eq!(owner_of(&a, &s).await, Some("node-a".to_owned()));
    (a, b, s)
}

/// The node running the session, as the operator's story page says
/// (read from the claims, without loading the session).
async fn owner_of(api: &impl Api, s: &Session) -> Option<String> {
    let url = format!(
        "{}/api/v1/admin/sessions/{}/story",
        api.base(),
        s.session_id
    );
    let a = request("GET", &url, &[("X-Internal-API-Key", TEST_KEY)], None).await;
    assert_eq!(a.status, 200, "story: {}", a.body);
    a.body["owner_node"].as_str().map(str::to_owned)
}

/// The service headers of the tool API for tenant `default`, naming `s`.
fn service_headers(s: &Session) -> Vec<(&'static str, &str)> {
    vec![
        ("X-Internal-API-Key", TEST_KEY),
        ("X-Tenant-ID", "default"),
        ("X-Site-ID", "site-1"),
        ("X-Trace-ID", "trace-routes"),
        ("X-Session-ID", s.session_id.as_str()),
    ]
}

/// `answer` without what differs between any two runs of one call.
fn comparable(mut answer: Value) -> Value {
    if let Some(audit) = answer.get_mut("audit").and_then(Value::as_object_mut) {
        audit.remove("latency_ms");
    }
    answer
}

/// The audit rows of the trace `trace-routes`, once there are at least
/// `expected` (rows are written beside the answer, not before it).
async fn traced_calls(api: &impl Api, expected: usize) -> Vec<Value> {
    let url = format!("{}/api/v1/audit?trace_id=trace-routes", api.base());
    let headers = [
        ("X-Internal-API-Key", TEST_KEY),
        ("X-Tenant-ID", "default"),
        ("X-Site-ID", "site-1"),
        ("X-Trace-ID", "trace-routes"),
    ];
    let deadline = tokio::time::Instant::now() + FRAME_WAIT;
    loop {
        let a = request("GET", &url, &headers, None).await;
        assert_eq!(a.status, 200, "trace ledger: {}", a.body);
        let rows = a.body["entries"].as_array().cloned().unwrap_or_default();
        if rows.len() >= expected || tokio::time::Instant::now() >= deadline {
            return rows;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn the_tool_api_on_any_of_its_paths_answers_on_the_node_without_the_session() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let other = a.demo().await;
    let call = |s: &Session, target: &str| json!({"tool_name": "move", "input": {"session_id": s.session_id, "actor_id": "pc_001", "to_area_id": target}});
    let url = |api: &Server, prefix: &str| format!("{}{prefix}/tools/call", api.base());

    // The owner's answer to the call, on a session of its own that is
    // where `s` is.
    let target = neighbour(&a.snapshot(&s).await);
    let owners = request(
        "POST",
        &url(&a, "/api/v1"),
        &service_headers(&other),
        Some(&call(&other, &target)),
    )
    .await;
    assert_eq!(owners.status, 200, "{}", owners.body);

    // The call through B, on each path of the tool API, one move each.
    for prefix in ["/api/v1", "/api", ""] {
        let target = neighbour(&a.snapshot(&s).await);
        let got = request(
            "POST",
            &url(&b, prefix),
            &service_headers(&s),
            Some(&call(&s, &target)),
        )
        .await;
        assert_eq!(got.status, 200, "{prefix}: {}", got.body);
        if prefix == "/api/v1" {
            assert_eq!(
                comparable(got.body),
                comparable(owners.body.clone()),
                "B answers as the owner does"
            );
        }
        assert_eq!(position(&a.snapshot(&s).await), target, "{prefix}");
    }
    assert_eq!(a.actions(&s).await.len(), 3, "each call ran once");
    // Each call is audited once, by the owner (and A's own call once).
    assert_eq!(traced_calls(&a, 4).await.len(), 4);
    assert_eq!(owner_of(&b, &s).await, Some("node-a".to_owned()));
}

#[actix_web::test]
async fn a_handed_over_call_gets_the_owners_answer_as_the_owner_made_it() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let other = a.demo().await;
    // A refusal of the tool's own: its status, code and audit as A made
    // them, with an idempotency key B must not keep for itself.
    let call = |s: &Session| json!({"tool_name": "move", "request_id": format!("key-{}", s.session_id), "input": {"session_id": s.session_id, "actor_id": "pc_001", "to_area_id": "nowhere"}});
    let url = |api: &Server| format!("{}/api/v1/tools/call", api.base());
    let owners = request(
        "POST",
        &url(&a),
        &service_headers(&other),
        Some(&call(&other)),
    )
    .await;
    let handed = request("POST", &url(&b), &service_headers(&s), Some(&call(&s))).await;
    assert_ne!(owners.status, 200, "{}", owners.body);
    assert_eq!(
        (handed.status, comparable(handed.body.clone())),
        (owners.status, comparable(owners.body.clone()))
    );
    // Again through B: the owner's stored answer, replayed.
    let again = request("POST", &url(&b), &service_headers(&s), Some(&call(&s))).await;
    assert_eq!(
        (again.status, comparable(again.body)),
        (handed.status, comparable(handed.body))
    );
    assert_eq!(
        traced_calls(&a, 2).await.len(),
        2,
        "one audit row a session"
    );
}

/// The MCP answer: status, `Mcp-Session-Id`, and its JSON-RPC messages
/// (one, or each event of a stream).
struct Mcp {
    status: u16,
    session: Option<String>,
    messages: Vec<Value>,
}

/// POSTs one JSON-RPC message to `/mcp` on `api` with these headers.
async fn mcp(api: &impl Api, headers: &[(&str, &str)], body: &Value) -> Mcp {
    let mut req = client()
        .post(format!("{}/mcp", api.base()))
        .insert_header(("content-type", "application/json"))
        .insert_header(("X-Internal-API-Key", TEST_KEY));
    for h in headers {
        req = req.insert_header(*h);
    }
    let mut resp = req.send_body(body.to_string()).await.expect("mcp sends");
    let bytes = resp.body().limit(1 << 20).await.expect("body");
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let messages = if text.starts_with('{') {
        vec![serde_json::from_str(&text).unwrap()]
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect()
    };
    Mcp {
        status: resp.status().as_u16(),
        session: resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned()),
        messages,
    }
}

#[actix_web::test]
async fn mcp_tools_call_through_the_node_without_the_session_runs_on_the_owner() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let accept = ("accept", "application/json, text/event-stream");
    let opened = mcp(
        &b,
        &[accept],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(opened.status, 200, "{:?}", opened.messages);
    let sid = opened.session.expect("B opened an MCP session");
    let in_session = [accept, ("mcp-session-id", sid.as_str())];

    // A 2025-era call in the MCP session B holds, through B; then one
    // asking for progress (a stream), then a 2026-07-28 one.
    let mut at = a.snapshot(&s).await;
    for (i, progress) in [(2, false), (3, true), (4, false)] {
        let target = neighbour(&at);
        let mut params = json!({"name": "move", "arguments": {"session_id": s.session_id, "actor_id": "pc_001", "to_area_id": target}});
        if progress {
            params["_meta"] = json!({"progressToken": "p"});
        }
        let modern = i == 4;
        if modern {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            });
        }
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params});
        let headers: &[(&str, &str)] = if modern { &[accept] } else { &in_session };
        let answer = mcp(&b, headers, &body).await;
        assert_eq!(answer.status, 200, "call {i}: {:?}", answer.messages);
        let last = answer.messages.last().unwrap();
        assert_eq!(last["result"]["isError"], false, "call {i}: {last}");
        assert_eq!(
            last["result"]["structuredContent"]["to_area_id"],
            target.as_str()
        );
        if progress {
            assert_eq!(
                answer.messages[0]["method"], "notifications/progress",
                "the stream as the owner sent it"
            );
        }
        at = a.snapshot(&s).await;
        assert_eq!(position(&at), target, "call {i}");
    }
    assert_eq!(a.actions(&s).await.len(), 3, "each call ran once");
    assert_eq!(owner_of(&b, &s).await, Some("node-a".to_owned()));
}

#[actix_web::test]
async fn a_chat_over_http_on_the_node_without_the_session_runs_once_on_the_owner() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let target = neighbour(&a.snapshot(&s).await);
    let body = json!({"session_id": s.session_id, "message": format!("go to {target}"), "request_id": "r-1"});
    let turn = chat_over_http(b.base(), &s.player_token, &body).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    // The same request id again, through B: the same turn, not run again.
    let again = chat_over_http(b.base(), &s.player_token, &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["turn_id"], turn.body["turn_id"]);
    assert_eq!(moves_in_log(&a, &s).await.len(), 1, "the chat ran once");
    assert_eq!(position(&a.snapshot(&s).await), target);
    // A wrong token is refused as the owner refuses it.
    let refused = chat_over_http(b.base(), "not-a-token", &body).await;
    let owners = chat_over_http(a.base(), "not-a-token", &body).await;
    assert_eq!((refused.status, refused.body), (owners.status, owners.body));
}

#[actix_web::test]
async fn a_chat_over_http_whose_turn_takes_longer_than_30_s_is_answered_on_either_node() {
    let (_dir, db) = database();
    // Each model call takes 31 s: a turn of one call ("hello") takes longer
    // than a request to a peer used to be given.
    let slow = [("QUESTD_OFFLINE_LATENCY_MS", "31000")];
    let a = crate::cluster::node_with(&db, "node-a", &slow);
    let b = crate::cluster::node_with(&db, "node-b", &slow);
    let s = a.demo().await;
    assert_eq!(owner_of(&a, &s).await, Some("node-a".to_owned()));
    let body = json!({"session_id": s.session_id, "message": "hello", "request_id": "slow-1"});
    let wait = std::time::Duration::from_secs(120);
    let turn = chat_over_http_within(wait, b.base(), &s.player_token, &body).await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    assert!(
        turn.body["reply"].as_str().is_some_and(|r| !r.is_empty()),
        "{}",
        turn.body
    );
    let again = chat_over_http(a.base(), &s.player_token, &body).await;
    assert_eq!(
        (
            again.status,
            &again.body["turn_id"],
            &again.body["duplicate"]
        ),
        (200, &turn.body["turn_id"], &json!(true)),
        "{}",
        again.body
    );
}

#[actix_web::test]
async fn npc_activation_on_the_node_without_the_session_runs_once_on_the_owner() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let (mut spectator, _) = a.connect(&s.session_id, &s.spectator_token, None).await;
    let activate = |api: &Server, npc: &str| {
        format!(
            "{}/api/v1/sessions/{}/npcs/{npc}/activate",
            api.base(),
            s.session_id
        )
    };
    let auth = format!("Bearer {}", s.player_token);
    let bearer = [("Authorization", auth.as_str())];
    let off = json!({"active": false});
    let done = request("POST", &activate(&b, "npc_silt"), &bearer, Some(&off)).await;
    assert_eq!(
        (done.status, &done.body["active"], &done.body["changed"]),
        (200, &json!(false), &json!(true)),
        "{}",
        done.body
    );
    let seen = spectator.until(|f| f["type"] == "tool_result").await;
    assert_eq!(
        seen.last().unwrap()["seq"],
        done.body["seq"],
        "on A's story"
    );
    // An unknown NPC: the owner's 404, the same through either node.
    let unknown = request("POST", &activate(&b, "npc_nobody"), &bearer, Some(&off)).await;
    let owners = request("POST", &activate(&a, "npc_nobody"), &bearer, Some(&off)).await;
    assert_eq!((unknown.status, &unknown.body), (404, &owners.body));
    let activations = a
        .actions(&s)
        .await
        .into_iter()
        .filter(|action| action["tool"] == "activate_npc")
        .count();
    assert_eq!(activations, 1, "activated once");
}

#[actix_web::test]
async fn the_session_routes_answer_the_same_through_the_node_without_the_session() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
    crate::cluster::move_once(&mut player, &a, &s, "r-1").await;
    let key = [("X-Internal-API-Key", TEST_KEY)];
    let auth = format!("Bearer {}", s.player_token);
    let bearer = [("Authorization", auth.as_str())];
    let id = &s.session_id;
    let routes: [(String, &[(&str, &str)]); 6] = [
        (format!("/api/v1/sessions/{id}"), &bearer),
        (format!("/api/v1/sessions/{id}/actions"), &bearer),
        (format!("/api/v1/sessions/{id}/audit"), &bearer),
        (format!("/api/v1/admin/sessions/{id}/story"), &key),
        (format!("/api/v1/admin/sessions/{id}/audit"), &key),
        (format!("/api/v1/sessions/{id}"), &[]),
    ];
    for (path, headers) in routes {
        let owners = request("GET", &format!("{}{path}", a.base()), headers, None).await;
        let other = request("GET", &format!("{}{path}", b.base()), headers, None).await;
        assert_eq!(
            (other.status, &other.body),
            (owners.status, &owners.body),
            "GET {path} with {headers:?}"
        );
    }
    assert_eq!(owner_of(&b, &s).await, Some("node-a".to_owned()));
}

#[actix_web::test]
async fn an_operators_close_sent_to_the_node_without_the_session_closes_it_once() {
    let (_dir, db) = database();
    let (a, b, s) = owned_by_a(&db).await;
    let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
    let key = [("X-Internal-API-Key", TEST_KEY)];
    let close = |api: &Server| {
        format!(
            "{}/api/v1/admin/sessions/{}/close",
            api.base(),
            s.session_id
        )
    };
    let closed = request("POST", &close(&b), &key, None).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    assert_eq!(player.close_code().await, Some(4000), "A closed its player");
    // Closing again, through either node, answers the same close.
    for api in [&a, &b] {
        let again = request("POST", &close(api), &key, None).await;
        assert_eq!((again.status, &again.body), (200, &closed.body));
    }
}

#[actix_web::test]
async fn an_idle_session_released_by_its_owner_is_taken_at_once_by_another_node() {
    let (_dir, db) = database();
    // A lease far longer than the test: the session changes hands only if
    // its owner releases it.
    let env = |name| {
        node_with(
            &db,
            name,
            &[("QUESTD_LEASE_MS", "600000"), ("QUESTD_IDLE_SECS", "1")],
        )
    };
    let (a, b) = (env("node-a"), env("node-b"));
    let s = a.demo().await;
    assert_eq!(owner_of(&a, &s).await, Some("node-a".to_owned()));
    let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
    while owner_of(&a, &s).await.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node A released the idle session"
        );
        actix_web::rt::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (status, snapshot) = get(
        &format!("{}/api/v1/sessions/{}", b.base(), s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(snapshot["owner_node"], "node-b");
    assert_eq!(owner_of(&a, &s).await, Some("node-b".to_owned()));
}

/// How a close is met, for [`an_operators_close_reaches_every_nodes_connections`].
struct CloseCase {
    name: &'static str,
    /// A turn played before the close.
    played: bool,
    /// A chat sent just before the close, its turn still running.
    mid_turn: bool,
    /// Where the player connects (A owns the session; others relay).
    player: usize,
    /// Where the close is sent.
    close: usize,
}

#[actix_web::test]
async fn an_operators_close_reaches_every_nodes_connections() {
    let (_dir, db) = database();
    let plain = |name| Server::start_with(&db, &[("QUESTD_NODE_ID", name)]);
    let nodes = [plain("node-a"), plain("node-b"), plain("node-c")];
    let a = &nodes[0];
    let case = |name, played, mid_turn, player, close| CloseCase {
        name,
        played,
        mid_turn,
        player,
        close,
    };
    let cases = [
        case("idle, to A", false, false, 0, 0),
        case("idle, to B", false, false, 0, 1),
        case("idle, relayed by B, to A", false, false, 1, 0),
        case("idle, relayed by C, to C", false, false, 2, 2),
        case("played, relayed by B, to A", true, false, 1, 0),
        case("played, relayed by B, to B", true, false, 1, 1),
        case("played, relayed by C, to B", true, false, 2, 1),
        case("mid-turn, on A, to B", false, true, 0, 1),
        case("mid-turn, relayed by C, to C", true, true, 2, 2),
    ];
    let key = [("X-Internal-API-Key", TEST_KEY)];
    let mut waits = Vec::new();
    for case in &cases {
        let s = a.demo().await;
        // Spectators join B and C before any turn, one more on C resuming
        // from the start: B and C tail the session.
        let (on_b, _) = nodes[1]
            .connect(&s.session_id, &s.spectator_token, None)
            .await;
        let (on_c, _) = nodes[2]
            .connect(&s.session_id, &s.spectator_token, None)
            .await;
        let (player, _) = nodes[case.player]
            .connect(&s.session_id, &s.player_token, None)
            .await;
        let mut player = player;
        if case.played {
            crate::cluster::move_once(&mut player, a, &s, "r-1").await;
        }
        let (resumed, _) = nodes[2]
            .connect(&s.session_id, &s.spectator_token, Some(0))
            .await;
        if case.mid_turn {
            player.chat("roll 1d6", "r-2").await;
        }
        let to = &nodes[case.close];
        let url = format!("{}/api/v1/admin/sessions/{}/close", to.base(), s.session_id);
        let closed = request("POST", &url, &key, None).await;
        assert_eq!(closed.status, 200, "{}: {}", case.name, closed.body);
        waits.push((
            case.name,
            [
                ("player", player),
                ("spectator on B", on_b),
                ("spectator on C", on_c),
                ("resumed on C", resumed),
            ],
        ));
    }
    let mut codes = Vec::new();
    for (name, conns) in waits {
        for (who, mut ws) in conns {
            codes.push((name, who, ws.close_code().await));
        }
    }
    let want: Vec<_> = codes.iter().map(|(n, w, _)| (*n, *w, Some(4000))).collect();
    assert_eq!(codes, want);
}

/// The owner dies with a spectator tailing on B and the player relayed by
/// B; the operator closes the session through B, which takes it over once
/// the lease runs out and closes it.
#[actix_web::test]
async fn an_operators_close_after_the_owner_died_reaches_the_spectators() {
    let (_dir, db) = database();
    let (a, b) = (node(&db, "node-a"), node(&db, "node-b"));
    let s = a.demo().await;
    let (mut spectator, _) = b.connect(&s.session_id, &s.spectator_token, None).await;
    let (mut player, _) = b.connect(&s.session_id, &s.player_token, None).await;
    crate::cluster::move_once(&mut player, &a, &s, "r-1").await;
    a.kill9();
    assert_eq!(player.close_code().await, Some(1012), "the relay lost A");
    let key = [("X-Internal-API-Key", TEST_KEY)];
    let url = format!("{}/api/v1/admin/sessions/{}/close", b.base(), s.session_id);
    let closed = request("POST", &url, &key, None).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    let (frames, code) = spectator.frames_until_closed().await;
    assert_eq!(code, Ok(Some(4000)), "after {frames:?}");
}
