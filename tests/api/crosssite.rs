//! Cross-site protections through real sockets (docs/protocol.md §1.16,
//! `src/http/guard.rs`): a page on another site cannot open a game's
//! WebSocket or change anything, a rebound DNS name is not served, bodies
//! are JSON, and every response carries the security headers.

use std::sync::Arc;

use crate::common::*;
use awc::ws;
use futures_util::{SinkExt, StreamExt};
use questd::llm::OfflineGameMaster;
use serde_json::Value;

const EVIL: &str = "http://evil.example";

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The headers every response carries.
const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
];

/// A WebSocket upgrade of `session` with `token`, with these extra headers.
async fn raw_upgrade(app: &TestApp, s: &Session, token: &str, extra: &str) -> Raw {
    let head = format!(
        "GET /ws/sessions/{}?token={token} HTTP/1.1\n\
         Host: 127.0.0.1:{}\n\
         Connection: Upgrade\n\
         Upgrade: websocket\n\
         Sec-WebSocket-Version: 13\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n\
         {extra}",
        s.session_id, app.port
    );
    raw(app, &head, "").await
}

/// A POST to `/api/v1/sessions` with these extra headers and body.
async fn raw_create(app: &TestApp, extra: &str, body: &str) -> Raw {
    let head = format!(
        "POST /api/v1/sessions HTTP/1.1\n\
         Host: 127.0.0.1:{}\n\
         Content-Length: {}\n\
         Connection: close\n\
         {extra}",
        app.port,
        body.len()
    );
    raw(app, &head, body).await
}

/// `GET /healthz` naming `host`.
async fn healthz_as(app: &TestApp, host: &str) -> Raw {
    let head = format!("GET /healthz HTTP/1.1\nHost: {host}\nConnection: close");
    raw(app, &head, "").await
}

/// A WebSocket opened by hand (with an `Origin`).
type Framed = actix_codec::Framed<awc::BoxedSocket, ws::Codec>;

/// Opens the session's WebSocket as a page of `origin` would; `Err` is the
/// status of a refused upgrade.
async fn connect_from(url: &str, origin: &str) -> Result<(Framed, Value), u16> {
    match client().ws(url).origin(origin).connect().await {
        Ok((_, mut framed)) => {
            let welcome = next_json(&mut framed).await;
            assert_eq!(welcome["type"], "welcome", "{welcome}");
            Ok((framed, welcome))
        }
        Err(awc::error::WsClientError::InvalidResponseStatus(s)) => Err(s.as_u16()),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

async fn next_json(framed: &mut Framed) -> Value {
    loop {
        let frame = tokio::time::timeout(FRAME_WAIT, framed.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .expect("a frame");
        match frame {
            ws::Frame::Text(b) => return serde_json::from_slice(&b).unwrap(),
            ws::Frame::Ping(p) => framed.send(ws::Message::Pong(p)).await.unwrap(),
            _ => {}
        }
    }
}

/// `questd_sessions_created_total` from `/metrics`.
async fn sessions_created(app: &TestApp) -> f64 {
    let mut resp = client()
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.body().await.unwrap();
    std::str::from_utf8(&body)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("questd_sessions_created_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("questd_sessions_created_total")
}

#[actix_web::test]
async fn a_foreign_page_cannot_open_a_games_websocket() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let own = format!("http://127.0.0.1:{}", app.port);
    // A spectator watches who joins.
    let (mut watcher, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    watcher
        .until(|f| f["type"] == "presence" && f["spectators"] == 1)
        .await;

    // Another site's page, with the player's token: refused before the
    // upgrade, with the JSON error and no switch of protocol.
    for origin in [EVIL, "null", "http://127.0.0.1:1", "https://127.0.0.1"] {
        let r = raw_upgrade(&app, &s, &s.player_token, &format!("Origin: {origin}")).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (403, "FORBIDDEN"),
            "{origin}: {r:?}"
        );
        assert!(r.header("upgrade").is_none(), "{r:?}");
        assert!(
            r.json()["message"]
                .as_str()
                .is_some_and(|m| m.contains(origin) && m.contains("QUESTD_ALLOWED_ORIGINS")),
            "{r:?}"
        );
    }
    let url = app.ws_url(&s.session_id, &s.player_token, None);
    assert_eq!(connect_from(&url, EVIL).await.err(), Some(403));

    // The page itself connects; the session's first player is that one, so
    // the refused sockets never joined.
    let (_player, welcome) = connect_from(&url, &own).await.unwrap();
    assert_eq!(welcome["session_id"], s.session_id.as_str());
    let joined = watcher
        .until(|f| f["type"] == "presence" && f["players"] != 0)
        .await;
    assert_eq!(joined.last().unwrap()["players"], 1, "{joined:?}");
    // A client without Origin (the load test, other programs) connects too.
    let (_other, _) = app.connect(&s.session_id, &s.player_token, None).await;
    app.stop().await;
}

#[actix_web::test]
async fn a_foreign_page_cannot_create_or_change_anything() {
    let app = spawn_app().await;
    let own = format!("http://127.0.0.1:{}", app.port);
    let demo = r#"{"campaign_id":"demo"}"#;
    let before = sessions_created(&app).await;

    // What a cross-site form or `fetch` without preflight can send.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json",
    ] {
        let extra = format!("Origin: {EVIL}\nContent-Type: {content_type}");
        let r = raw_create(&app, &extra, demo).await;
        assert!(
            [403, 415].contains(&r.status) && r.json()["session_id"].is_null(),
            "{content_type}: {r:?}"
        );
        assert_eq!(r.code(), "FORBIDDEN", "{content_type}: {r:?}");
    }
    let r = raw_create(&app, "Origin: null\nContent-Type: application/json", demo).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(sessions_created(&app).await, before, "nothing was created");

    // Without Origin (not a browser), a body must still be JSON.
    for content_type in ["Content-Type: text/plain", "Content-Type: text/json", ""] {
        let r = raw_create(&app, content_type, demo).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (415, "UNSUPPORTED_MEDIA_TYPE"),
            "{content_type:?}: {r:?}"
        );
        assert!(
            r.json()["message"]
                .as_str()
                .is_some_and(|m| m.contains("application/json")),
            "{r:?}"
        );
    }
    assert_eq!(sessions_created(&app).await, before);

    // The page's own request, and a program's, with JSON.
    let r = raw_create(
        &app,
        &format!("Origin: {own}\nContent-Type: application/json; charset=utf-8"),
        demo,
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = raw_create(&app, "Content-Type: application/json", demo).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(sessions_created(&app).await, before + 2.0);

    // Reading is not changing: another site's GET gets its answer (which
    // its page cannot read without CORS).
    let head = format!(
        "GET /api/v1/campaigns HTTP/1.1\nHost: 127.0.0.1:{}\nOrigin: {EVIL}\nConnection: close",
        app.port
    );
    assert_eq!(raw(&app, &head, "").await.status, 200);
    app.stop().await;
}

#[actix_web::test]
async fn only_allowed_hosts_are_served() {
    let app = spawn_app().await;
    let port = app.port;
    // Bound to loopback: the loopback names, on any port.
    for host in [
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
    ] {
        let r = healthz_as(&app, &host).await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    // A DNS name rebound to this address, as a browser would name it.
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
    ] {
        let r = healthz_as(&app, &host).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (403, "FORBIDDEN"),
            "{host}: {r:?}"
        );
        assert_eq!(
            r.json()["message"],
            format!("host {host:?} is not served here; see QUESTD_ALLOWED_HOSTS"),
        );
    }
    // The same holds for the page and for a WebSocket.
    let page = format!("GET / HTTP/1.1\nHost: evil.example:{port}\nConnection: close");
    assert_eq!(raw(&app, &page, "").await.status, 403);
    app.stop().await;

    // A list replaces the default; a port in it is the only one allowed.
    let app = spawn_with(
        |s| s.allowed_hosts = Some(format!("game.example, api.example:{port}")),
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let port = app.port;
    for (host, status) in [
        (format!("game.example:{port}"), 200),
        ("Game.Example".to_owned(), 200),
        (format!("localhost:{port}"), 403),
        (format!("127.0.0.1:{port}"), 403),
        ("evil.example".to_owned(), 403),
    ] {
        assert_eq!(healthz_as(&app, &host).await.status, status, "{host}");
    }
    app.stop().await;

    let app = spawn_with(
        |s| s.allowed_hosts = Some("*".into()),
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    assert_eq!(healthz_as(&app, "evil.example").await.status, 200);
    app.stop().await;
}

#[actix_web::test]
async fn a_listed_origin_may_play() {
    let app = spawn_with(
        |s| s.allowed_origins = Some("https://game.example, https://Other.Example:8443/".into()),
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let s = app.demo().await;
    let url = app.ws_url(&s.session_id, &s.player_token, None);
    for origin in [
        "https://game.example",
        "https://game.example:443",
        "https://other.example:8443",
    ] {
        let (_ws, welcome) = connect_from(&url, origin).await.unwrap();
        assert_eq!(welcome["session_id"], s.session_id.as_str(), "{origin}");
    }
    for origin in [
        "http://game.example",
        "https://game.example:8443",
        "https://other.example",
        "https://evil.example",
    ] {
        assert_eq!(
            connect_from(&url, origin).await.err(),
            Some(403),
            "{origin}"
        );
    }
    let r = raw_create(
        &app,
        "Origin: https://game.example\nContent-Type: application/json",
        r#"{"campaign_id":"demo"}"#,
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let r = raw_create(
        &app,
        "Origin: https://evil.example\nContent-Type: application/json",
        r#"{"campaign_id":"demo"}"#,
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    app.stop().await;
}

#[actix_web::test]
async fn every_answer_carries_the_security_headers() {
    let app = spawn_app().await;
    let port = app.port;
    let page = raw(
        &app,
        &format!("GET / HTTP/1.1\nHost: 127.0.0.1:{port}\nConnection: close"),
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("app.js"));
    // The page needs nothing the policy forbids: no inline script, style
    // attribute or handler.
    for inline in [
        "<script>",
        " style=",
        " onclick=",
        " onload=",
        "javascript:",
    ] {
        assert!(!page.body.contains(inline), "the page has {inline:?}");
    }
    let answers = [
        page,
        healthz_as(&app, &format!("127.0.0.1:{port}")).await,
        raw(
            &app,
            &format!("GET /app.js HTTP/1.1\nHost: 127.0.0.1:{port}\nConnection: close"),
            "",
        )
        .await,
        raw(
            &app,
            &format!("GET /nowhere HTTP/1.1\nHost: 127.0.0.1:{port}\nConnection: close"),
            "",
        )
        .await,
        healthz_as(&app, "evil.example").await,
        raw_create(&app, "Content-Type: text/plain", "{}").await,
    ];
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 200, 200, 404, 403, 415]);
    for answer in &answers {
        for (name, value) in SECURITY_HEADERS {
            assert_eq!(answer.header(name), Some(value), "{name} on {answer:?}");
        }
    }
    app.stop().await;
}
