//! What a new user meets in their first hour from a shell: the links a new
//! session answers, reading a session with `?token=`, and errors that say
//! what to do instead of what failed inside.

use crate::common::*;
use serde_json::json;

#[actix_web::test]
async fn a_new_session_answers_the_links_to_play_and_watch_it_in_the_browser() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/sessions", app.base);
    let (status, created) = post(&url, &json!({"campaign_id": "demo"})).await;
    assert_eq!(status, 201, "{created}");
    let s = Session::created(&created);
    let page = |token: &str| format!("{}/?session={}&token={token}", app.base, s.session_id);
    assert_eq!(created["player_url"], page(&s.player_token), "{created}");
    assert_eq!(
        created["spectator_url"],
        page(&s.spectator_token),
        "{created}"
    );
    // The earlier names stay.
    assert_eq!(created["play_url"], created["player_url"]);
    assert_eq!(created["watch_url"], created["spectator_url"]);
    // The player link opens the page (the page reads its query itself).
    let mut resp = client()
        .get(created["player_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let html = resp.body().await.unwrap();
    assert!(String::from_utf8_lossy(&html).contains("<html"), "the page");
}

#[actix_web::test]
async fn a_session_is_read_with_the_token_in_the_query_as_on_the_websocket() {
    let app = spawn_app().await;
    let s = app.demo().await;
    let base = format!("{}/api/v1/sessions/{}", app.base, s.session_id);
    for token in [&s.player_token, &s.spectator_token] {
        let (status, snapshot) = get(&format!("{base}?token={token}"), None).await;
        assert_eq!(status, 200, "{snapshot}");
        assert_eq!(snapshot["session_id"], s.session_id.as_str());
        let (status, page) = get(&format!("{base}/actions?token={token}"), None).await;
        assert_eq!(status, 200, "{page}");
        assert!(page["actions"].is_array(), "{page}");
    }
    // A wrong one, or none, is refused with how to send it.
    let (status, body) = get(&format!("{base}?token=nope"), None).await;
    assert_eq!(
        (status, body["error_code"].clone()),
        (401, json!("UNAUTHORIZED"))
    );
    let (status, body) = get(&base, None).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("?token="),
        "{body}"
    );
}

#[actix_web::test]
async fn slips_are_answered_with_what_to_do() {
    let app = spawn_app().await;
    let sessions = format!("{}/api/v1/sessions", app.base);

    // A built-in campaign's name where an inline campaign goes.
    let (status, body) = post(&sessions, &json!({"campaign": "demo"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error_code"], "BAD_REQUEST");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(r#"{"campaign_id": "demo"}"#),
        "{body}"
    );

    // A query string that does not parse: the JSON error shape, naming the
    // route's parameters.
    let s = app.demo().await;
    let actions = format!(
        "{}/api/v1/sessions/{}/actions?after_seq=abc",
        app.base, s.session_id
    );
    let (status, body) = get(&actions, Some(&s.player_token)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error_code"], "BAD_REQUEST");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("after_seq"), "{body}");
    assert!(!message.contains("deserialize"), "{body}");

    // The HTTP chat takes the WebSocket's `text` as well as `message`.
    for body in [
        json!({"session_id": s.session_id, "message": "status"}),
        json!({"session_id": s.session_id, "text": "status"}),
    ] {
        let a = chat_over_http(&app.base, &s.player_token, &body).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert!(
            a.body["reply"].as_str().is_some_and(|r| !r.is_empty()),
            "{}",
            a.body
        );
    }
    let a = chat_over_http(
        &app.base,
        &s.player_token,
        &json!({"session_id": s.session_id}),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body["message"].is_string(), "{}", a.body);
}

#[actix_web::test]
async fn a_busy_port_says_how_to_listen_elsewhere() {
    let first = spawn_app().await;
    let taken = format!("127.0.0.1:{}", first.port());
    let dir = tempfile::tempdir().unwrap();
    let url = crate::database::database_url_in(dir.path());
    let mut settings = questd::Settings::for_tests(&url);
    settings.bind = taken.clone();
    let built = questd::Application::build_with(
        settings,
        std::sync::Arc::new(questd::llm::OfflineGameMaster::default()),
    )
    .await;
    let Err(e) = built else {
        panic!("a second server bound {taken}");
    };
    let said = format!("{e:#}");
    assert!(said.contains(&taken), "{said}");
    assert!(said.contains("QUESTD_BIND"), "{said}");
}

#[test]
fn a_bad_setting_stops_the_server_naming_it_without_a_panic_or_a_password() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = format!("sqlite://{}", dir.path().join("start.db").display());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let taken = taken.local_addr().expect("its address").to_string();
    // (setting, value, what the error says)
    let cases = [
        (
            "QUESTD_TENANT_KEYS",
            "nokeyhere",
            "QUESTD_TENANT_KEYS entry 1",
        ),
        ("QUESTD_BIND", taken.as_str(), "is in use"),
        ("QUESTD_BIND", "notanaddress", "binding notanaddress"),
        (
            "QUESTD_ALLOWED_ORIGINS",
            "notanorigin",
            "QUESTD_ALLOWED_ORIGINS",
        ),
        ("QUESTD_PUBLIC_URL", "ftp://x", "QUESTD_PUBLIC_URL"),
        ("QUESTD_DISABLED_TOOLS", "nope", "QUESTD_DISABLED_TOOLS"),
        (
            "QUESTD_DATABASE_URL",
            "mysql://root:hunter2@db.internal/game",
            r#"a "mysql" database"#,
        ),
        ("QUESTD_DATABASE_URL", "", "QUESTD_DATABASE_URL is empty"),
    ];
    for (name, value, says) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_questd"))
            .arg("serve")
            .env("QUESTD_BIND", "127.0.0.1:0")
            .env("QUESTD_DATABASE_URL", &db)
            .env(name, value)
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("questd runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}={value}: {stderr}");
        assert!(stderr.contains(says), "{name}={value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}={value}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{name}={value}: {stderr}");
    }
}
