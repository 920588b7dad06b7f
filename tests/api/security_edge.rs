//! The edge of the server against a determined stranger, through real
//! sockets: no body is read, decompressed or parsed before the caller is
//! known; the peer-only route looks absent; links that carry tokens follow
//! no forged forwarding header and are never cached; one trace-id rule; names
//! cut before they are echoed or stored; the tenant list needs a key for
//! another tenant; every spelling of an upgrade the handshake takes is
//! judged by origin.

use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};

/// 809 bytes of brotli that stand for 1 GiB of zeros.
const BOMB: &[u8] = include_bytes!("fixtures/bomb_1gib.br");

/// A field of this process's `/proc/self/status` (the server runs in it),
/// in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// `method path` with a body, sent as written (`extra` are more headers).
async fn send(app: &TestApp, method: &str, path: &str, extra: &str, body: &[u8]) -> Raw {
    let head = format!(
        "{method} {path} HTTP/1.1\n\
         Host: 127.0.0.1:{}\n\
         Content-Length: {}\n\
         {extra}",
        app.port,
        body.len()
    );
    raw_bytes(app.port, &head, body).await
}

/// An answer's status, code and message, with `path` (which an answer for
/// an absent route names) written as `<path>`.
fn seen(r: &Raw, path: &str) -> (u16, String, String) {
    let message = r.json()["message"]
        .as_str()
        .unwrap_or("")
        .replace(path, "<path>");
    (r.status, r.code(), message)
}

#[actix_web::test]
async fn a_compression_bomb_is_refused_unread_and_the_server_stays_small() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let audience = format!("/api/v1/sessions/{}/audience", s.session_id);
    let json_br = "Content-Type: application/json\nContent-Encoding: br";
    let peak_before = status_kib("VmHWM");
    let rss_before = status_kib("VmRSS");
    // Two bombs at the peer-only route and two at a route anyone may use,
    // all at once, while the health check is asked.
    let bombs = futures_util::future::join_all([
        send(&app, "PUT", &audience, json_br, BOMB),
        send(&app, "PUT", &audience, json_br, BOMB),
        send(&app, "POST", "/api/v1/sessions", json_br, BOMB),
        send(&app, "POST", "/api/v1/sessions", json_br, BOMB),
    ]);
    let health = async {
        let mut answers = Vec::new();
        for _ in 0..5 {
            answers.push(get(&format!("{}/healthz", app.base), None).await.0);
        }
        answers
    };
    let (answers, health) = futures_util::join!(bombs, health);
    let grown_mib = status_kib("VmHWM").saturating_sub(peak_before) / 1024;
    let rss_grown_mib = status_kib("VmRSS").saturating_sub(rss_before) / 1024;
    // Decompressed, each bomb would be 1 GiB.
    assert!(
        grown_mib < 512,
        "the peak grew {grown_mib} MiB (resident now +{rss_grown_mib} MiB)"
    );
    assert_eq!(health, [200; 5]);
    for r in &answers {
        assert_eq!(
            (r.status, r.code().as_str()),
            (415, "UNSUPPORTED_MEDIA_TYPE"),
            "{r:?}"
        );
        assert!(
            r.json()["message"]
                .as_str()
                .is_some_and(|m| m.contains("never compressed")),
            "{r:?}"
        );
    }
    // Another encoding is refused the same way, on any route.
    for coding in ["gzip", "zstd", "deflate", "identity, br"] {
        let extra = format!("Content-Type: application/json\nContent-Encoding: {coding}");
        let r = send(&app, "POST", "/api/v1/sessions", &extra, b"{}").await;
        assert_eq!(r.status, 415, "{coding}: {r:?}");
    }
    // An uncompressed body is still taken.
    let (status, _) = post(
        &format!("{}/api/v1/sessions", app.base),
        &json!({"campaign_id": "demo"}),
    )
    .await;
    assert_eq!(status, 201);
}

#[actix_web::test]
async fn the_peer_only_route_looks_absent_to_everyone_else() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let audience = format!("/api/v1/sessions/{}/audience", s.session_id);
    let absent = format!("/api/v1/sessions/{}/audiences", s.session_id);
    let report = br#"{"node_id":"node-x","spectators":1000}"#;
    let big = vec![b'x'; 2 * 1024 * 1024];
    let json = "Content-Type: application/json";
    // (method, extra headers, body)
    let cases: Vec<(&str, String, &[u8])> = vec![
        ("PUT", json.into(), report),
        ("PUT", json.into(), b"not json"),
        ("PUT", json.into(), &big),
        (
            "PUT",
            format!("{json}\nX-Questd-Cluster-Key: guess"),
            report,
        ),
        ("PUT", format!("{json}\nContent-Encoding: br"), BOMB),
        (
            "PUT",
            format!("{json}\nContent-Encoding: gzip"),
            b"\x1f\x8b",
        ),
        ("PUT", "Content-Type: text/plain".into(), report),
        ("POST", json.into(), report),
        ("GET", String::new(), b""),
        ("DELETE", String::new(), b""),
    ];
    for (method, extra, body) in cases {
        let at_route = send(&app, method, &audience, &extra, body).await;
        let at_nothing = send(&app, method, &absent, &extra, body).await;
        let what = format!("{method} {extra:?} ({} bytes)", body.len());
        assert_eq!(
            seen(&at_route, &audience),
            seen(&at_nothing, &absent),
            "{what}: {at_route:?}"
        );
        assert!(
            [404, 415].contains(&at_route.status),
            "{what}: {at_route:?}"
        );
        assert_eq!(
            at_route.header("content-type"),
            Some("application/json"),
            "{what}"
        );
    }
}

/// `POST /api/v1/sessions` (a public demo) with these extra headers.
async fn create_with(app: &TestApp, extra: &str) -> Raw {
    let body = json!({"campaign_id": "demo", "visibility": "public"}).to_string();
    send(
        app,
        "POST",
        "/api/v1/sessions",
        &format!("Content-Type: application/json\n{extra}"),
        body.as_bytes(),
    )
    .await
}

/// `GET /api/v1/sessions` with these extra headers.
async fn list_with(app: &TestApp, extra: &str) -> Raw {
    send(app, "GET", "/api/v1/sessions", extra, b"").await
}

/// Every link of a create answer, or of each session of a list.
fn links(r: &Raw) -> Vec<String> {
    let body = r.json();
    let rows = match body.as_array() {
        Some(rows) => rows.clone(),
        None => vec![body],
    };
    rows.iter()
        .flat_map(|row| {
            [
                "ws_url",
                "play_url",
                "watch_url",
                "player_url",
                "spectator_url",
            ]
            .iter()
            .filter_map(|k| row[*k].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
        })
        .collect()
}

const FORGED: &str = "X-Forwarded-Host: evil.example\n\
                      X-Forwarded-Proto: https\n\
                      Forwarded: for=1.2.3.4;host=evil.example;proto=https";

#[actix_web::test]
async fn links_that_carry_tokens_follow_no_forged_forwarding_header_and_are_not_cached() {
    let app = spawn_app().await;
    let own_http = format!("http://127.0.0.1:{}/", app.port);
    let own_ws = format!("ws://127.0.0.1:{}/", app.port);
    for extra in ["", FORGED] {
        let created = create_with(&app, extra).await;
        assert_eq!(created.status, 201, "{created:?}");
        let list = list_with(&app, extra).await;
        assert_eq!(list.status, 200, "{list:?}");
        for r in [&created, &list] {
            assert_eq!(r.header("cache-control"), Some("no-store"), "{r:?}");
            let links = links(r);
            assert!(!links.is_empty(), "{r:?}");
            for link in links {
                assert!(
                    link.starts_with(&own_http) || link.starts_with(&own_ws),
                    "{extra:?}: {link}"
                );
            }
        }
    }

    // Behind a trusted proxy, what it forwards is believed.
    let proxied = spawn_offline(|s| s.trusted_proxies = Some("127.0.0.1".into())).await;
    let created = create_with(&proxied, FORGED).await;
    assert_eq!(created.status, 201, "{created:?}");
    let ws_url = created.json()["ws_url"].as_str().unwrap().to_owned();
    assert!(
        ws_url.starts_with("wss://evil.example/ws/sessions/"),
        "{ws_url}"
    );

    // With a public URL set, only it is.
    let public = spawn_offline(|s| {
        s.public_url = Some("https://game.example".into());
        s.trusted_proxies = Some("127.0.0.1".into());
    })
    .await;
    let created = create_with(&public, FORGED).await;
    assert_eq!(created.status, 201, "{created:?}");
    let list = list_with(&public, FORGED).await;
    for link in links(&created).into_iter().chain(links(&list)) {
        assert!(
            link.starts_with("https://game.example/?session=")
                || link.starts_with("wss://game.example/ws/sessions/"),
            "{link}"
        );
    }
}

#[actix_web::test]
async fn npc_activation_takes_trace_ids_by_the_one_rule() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let path = format!("/api/v1/sessions/{}/npcs/npc_silt/activate", s.session_id);
    let auth = format!(
        "Authorization: Bearer {}\nContent-Type: application/json",
        s.player_token
    );
    let before = app.actions(&s).await.len();
    for trace in [
        "zz tenant_id=acme session_id=\"sess_FORGED\"",
        "a\tb",
        " ",
        &"t".repeat(129),
    ] {
        let extra = format!("{auth}\nX-Trace-ID: {trace}");
        let r = send(&app, "POST", &path, &extra, br#"{"active": false}"#).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "CONTEXT_INVALID"),
            "{trace:?}: {r:?}"
        );
        // The tool API and the chat route refuse it the same way.
        let r = send(&app, "POST", "/api/v1/chat", &extra, b"{}").await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "CONTEXT_INVALID"),
            "{r:?}"
        );
    }
    assert_eq!(app.actions(&s).await.len(), before, "nothing ran");
    let extra = format!("{auth}\nX-Trace-ID: trace-npc-1");
    let r = send(&app, "POST", &path, &extra, br#"{"active": false}"#).await;
    assert_eq!(r.status, 200, "{r:?}");
    let (_, audit) = get(
        &format!("{}/api/v1/sessions/{}/audit", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert!(audit.to_string().contains("trace-npc-1"), "{audit}");
}

#[actix_web::test]
async fn no_body_is_read_before_the_caller_is_known() {
    let app = spawn_offline(|s| s.tenant_keys = Some("acme:acme-key".into())).await;
    let s = app.demo().await;
    let big = vec![b'{'; 2 * 1024 * 1024];
    let json = "Content-Type: application/json";
    let activate = format!("/api/v1/sessions/{}/npcs/npc_silt/activate", s.session_id);
    // (path, extra headers): each needs a credential it does not carry.
    let routes = [
        (activate.as_str(), json.to_owned()),
        ("/api/v1/chat", json.to_owned()),
        (
            "/api/v1/tools/call",
            format!("{json}\nX-Tenant-ID: default\nX-Site-ID: s\nX-Trace-ID: t"),
        ),
        (
            "/mcp",
            format!("{json}\nAccept: application/json, text/event-stream"),
        ),
        ("/api/v1/sites/site-1", json.to_owned()),
    ];
    for (path, extra) in &routes {
        let method = if path.starts_with("/api/v1/sites") {
            "PUT"
        } else {
            "POST"
        };
        // A body that is not JSON, and one past the body bound: either
        // would be a 400 or a 413 if it were read.
        for body in [&b"{not json"[..], &big] {
            let r = send(&app, method, path, extra, body).await;
            assert_eq!(r.status, 401, "{path} ({} bytes): {r:?}", body.len());
            let with_wrong_key = format!("{extra}\nX-Internal-API-Key: guess");
            let r = send(&app, method, path, &with_wrong_key, body).await;
            assert_eq!(r.status, 401, "{path} with a wrong key: {r:?}");
        }
    }
}

#[actix_web::test]
async fn long_tool_names_and_mcp_methods_are_cut_before_they_are_echoed_or_stored() {
    let app = spawn_app().await;
    let long = "x".repeat(900_000);
    let cut = "x".repeat(64);
    let keyed = |trace: &str| {
        format!(
            "Content-Type: application/json\nX-Internal-API-Key: {TEST_KEY}\n\
             X-Tenant-ID: default\nX-Site-ID: site-1\nX-Trace-ID: {trace}"
        )
    };
    let body = json!({"tool_name": long, "input": {}}).to_string();
    let r = send(
        &app,
        "POST",
        "/api/v1/tools/call",
        &keyed("trace-long-1"),
        body.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 404, "{:.300}", r.body);
    assert!(r.body.len() < 4096, "an answer of {} bytes", r.body.len());
    let answer = r.json();
    assert_eq!(answer["audit"]["tool_name"], cut.as_str(), "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains(&format!("\"{cut}\"")), "{answer}");
    // The audit ledger keeps the cut name.
    let ledger = async {
        loop {
            let r = send(
                &app,
                "GET",
                "/api/v1/audit?trace_id=trace-long-1",
                &keyed("t"),
                b"",
            )
            .await;
            if let Some(entry) = r.json()["entries"]
                .as_array()
                .and_then(|e| e.first().cloned())
            {
                return entry;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let entry = tokio::time::timeout(FRAME_WAIT, ledger).await.unwrap();
    assert_eq!(entry["tool"], cut.as_str(), "{entry}");

    // MCP: a long tool name and a long method.
    let mcp = |id: u64, method: &str, params: Value| {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let headers = format!(
        "Content-Type: application/json\nAccept: application/json, text/event-stream\n\
         X-Internal-API-Key: {TEST_KEY}"
    );
    for body in [
        mcp(1, "tools/call", json!({"name": long, "arguments": {}})),
        mcp(2, &long, json!({})),
    ] {
        let r = send(&app, "POST", "/mcp", &headers, body.as_bytes()).await;
        assert!(r.body.len() < 4096, "an answer of {} bytes", r.body.len());
        let message = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains(&format!("\"{cut}\"")),
            "{}: {message}",
            r.status
        );
    }
}

#[actix_web::test]
async fn only_a_key_lists_another_tenants_public_sessions() {
    let app = spawn_offline(|s| s.tenant_keys = Some("acme:acme-key".into())).await;
    let ours = app.public_demo().await;
    let created = request(
        "POST",
        &format!("{}/api/v1/sessions", app.base),
        &[("X-Internal-API-Key", "acme-key")],
        Some(&json!({"campaign_id": "demo", "visibility": "public"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let theirs = Session::created(&created.body);
    let list = |headers: Vec<(&'static str, String)>| {
        let url = format!("{}/api/v1/sessions", app.base);
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            request("GET", &url, &headers, None).await
        }
    };
    let ids = |a: &Answer| -> Vec<String> {
        a.body
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| r["session_id"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let tenant = |t: &str| ("X-Tenant-ID", t.to_owned());
    let key = |k: &str| ("X-Internal-API-Key", k.to_owned());

    // Without a key: tenant `default` only.
    for headers in [vec![], vec![tenant("default")]] {
        let a = list(headers).await;
        assert_eq!((a.status, ids(&a)), (200, vec![ours.session_id.clone()]));
    }
    let a = list(vec![tenant("acme")]).await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED"))
    );
    assert!(
        a.body["message"].as_str().unwrap().contains("key"),
        "{}",
        a.body
    );
    assert!(!a.body.to_string().contains(&theirs.spectator_token));
    // With a key: the key's tenant.
    for headers in [
        vec![key("acme-key")],
        vec![key("acme-key"), tenant("acme")],
        vec![key(TEST_KEY), tenant("acme")],
    ] {
        let a = list(headers.clone()).await;
        assert_eq!(
            (a.status, ids(&a)),
            (200, vec![theirs.session_id.clone()]),
            "{headers:?}"
        );
    }
    let a = list(vec![key(TEST_KEY)]).await;
    assert_eq!(ids(&a), vec![ours.session_id.clone()]);
    let a = list(vec![key("acme-key"), tenant("default")]).await;
    assert_eq!(a.status, 403, "{}", a.body);
    let a = list(vec![key("guess")]).await;
    assert_eq!(a.status, 401, "{}", a.body);
}

#[actix_web::test]
async fn every_upgrade_the_handshake_takes_is_refused_from_another_origin() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let upgrade = |spelling: &str, origin: &str| {
        format!(
            "GET /ws/sessions/{}?token={} HTTP/1.1\n\
             Host: 127.0.0.1:{}\n\
             Connection: Upgrade\n\
             Upgrade: {spelling}\n\
             Sec-WebSocket-Version: 13\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n\
             Origin: {origin}",
            s.session_id, s.spectator_token, app.port
        )
    };
    let own = format!("http://127.0.0.1:{}", app.port);
    for (spelling, taken) in [
        ("websocket", true),
        ("WebSocket", true),
        // Only `websocket` alone is an upgrade this server takes.
        ("foo, websocket", false),
        ("foo websocket", false),
        ("websocket/13", false),
    ] {
        // The handshake takes it (from the page's own origin), or refuses
        // it plainly...
        let r = raw(&app, &upgrade(spelling, &own), "").await;
        if taken {
            assert_eq!(r.status, 101, "{spelling:?}: {r:?}");
        } else {
            assert_eq!(
                (r.status, r.code().as_str()),
                (400, "BAD_REQUEST"),
                "{spelling:?}: {r:?}"
            );
        }
        // ...and the guard judges it: another origin is refused.
        let r = raw(&app, &upgrade(spelling, "http://evil.example"), "").await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (403, "FORBIDDEN"),
            "{spelling:?}: {r:?}"
        );
    }
}
