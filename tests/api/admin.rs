//! The operator console (`/admin`, docs/protocol.md §1.17): its data API
//! over real HTTP (who may use it, the live sessions of every tenant, the
//! node's figures against `/metrics`, a session's story and audit trail,
//! closing a session for good, the bounds), and the page in Chromium.

use std::sync::Arc;
use std::time::Duration;

use fantoccini::Locator;
use fantoccini::key::Key;
use questd::llm::OfflineGameMaster;
use serde_json::{Value, json};

use crate::browser::{
    Browsers, ChromeDriver, click, count, direct_call, query, screenshot, set_viewport, wait,
};
use crate::common::*;
use crate::turns::GatedModel;

/// A request header, as `request` takes it.
type Header<'a> = (&'a str, &'a str);

const KEYED: Header = ("X-Internal-API-Key", TEST_KEY);

/// `GET` a console route with the internal key; answers the whole answer.
async fn admin_get(app: &TestApp, path: &str) -> Answer {
    request("GET", &format!("{}{path}", app.base), &[KEYED], None).await
}

/// `GET` a console route with the internal key, expecting `200`.
async fn admin_ok(app: &TestApp, path: &str) -> Value {
    let a = admin_get(app, path).await;
    assert_eq!(a.status, 200, "GET {path}: {}", a.body);
    a.body
}

/// Closes a session through the console; answers the whole answer.
async fn close(app: &TestApp, session_id: &str) -> Answer {
    let url = format!("{}/api/v1/admin/sessions/{session_id}/close", app.base);
    request("POST", &url, &[KEYED], None).await
}

/// The console's row of a session, if it is listed.
async fn row(app: &TestApp, session_id: &str) -> Option<Value> {
    let list = admin_ok(app, "/api/v1/admin/sessions").await;
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == session_id)
        .cloned()
}

/// The seqs of a story page's frames.
fn seqs(page: &Value) -> Vec<u64> {
    page["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["seq"].as_u64().unwrap())
        .collect()
}

/// Reads a connection until the server closes it; answers the frames read
/// and the close code.
async fn until_closed(ws: &mut Ws) -> (Vec<Value>, Option<u16>) {
    let (frames, code) = ws.frames_until_closed().await;
    (frames, code.expect("the connection is closed"))
}

#[actix_web::test]
async fn the_console_api_refuses_callers_without_the_internal_key() {
    let app = spawn_offline(|s| s.tenant_keys = Some("acme:acme-key".into())).await;
    let s = app.demo().await;
    let id = &s.session_id;
    let bearer = format!("Bearer {}", s.player_token);
    let routes = [
        ("GET", "/api/v1/admin/sessions".to_owned()),
        ("GET", "/api/v1/admin/node".to_owned()),
        ("GET", format!("/api/v1/admin/sessions/{id}/story")),
        ("GET", format!("/api/v1/admin/sessions/{id}/audit")),
        ("GET", format!("/api/v1/admin/sessions/{id}/timers")),
        ("POST", format!("/api/v1/admin/sessions/{id}/close")),
        // Refused before the session is looked for.
        (
            "POST",
            "/api/v1/admin/sessions/sess_unknown/close".to_owned(),
        ),
    ];
    let callers: [(&[Header], u16, &str); 6] = [
        (&[], 401, "UNAUTHORIZED"),
        (&[("X-Internal-API-Key", "not-a-key")], 401, "UNAUTHORIZED"),
        // The header alone grants nothing, nor does the session's token.
        (&[("X-Tenant-ID", "default")], 401, "UNAUTHORIZED"),
        (&[("Authorization", bearer.as_str())], 401, "UNAUTHORIZED"),
        // A tenant key sees one tenant: never the console.
        (&[("X-Internal-API-Key", "acme-key")], 403, "FORBIDDEN"),
        (
            &[("X-Internal-API-Key", "acme-key"), ("X-Tenant-ID", "acme")],
            403,
            "FORBIDDEN",
        ),
    ];
    for (method, path) in &routes {
        for (headers, status, code) in &callers {
            let a = request(method, &format!("{}{path}", app.base), headers, None).await;
            assert_eq!(
                (a.status, a.body["error_code"].as_str()),
                (*status, Some(*code)),
                "{method} {path} with {headers:?}: {}",
                a.body
            );
            let message = a.body["message"].as_str().unwrap();
            assert!(message.to_lowercase().contains("internal"), "{message}");
            let text = a.body.to_string();
            assert!(
                !text.contains(TEST_KEY) && !text.contains("acme-key"),
                "{text}"
            );
        }
    }
    // None of that closed the session.
    app.snapshot(&s).await;
    // The internal key opens it, whatever tenant X-Tenant-ID names.
    let a = request(
        "GET",
        &format!("{}/api/v1/admin/sessions", app.base),
        &[KEYED, ("X-Tenant-ID", "acme")],
        None,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["total"], 1);

    // The page itself needs no key: it asks for one.
    let mut resp = client()
        .get(format!("{}/admin", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let page = String::from_utf8(resp.body().await.unwrap().to_vec()).unwrap();
    assert!(
        page.contains("Operator console") && page.contains("id=\"key\""),
        "{page}"
    );
}

#[actix_web::test]
async fn live_sessions_of_every_tenant_are_listed_with_their_counts() {
    let app = spawn_app().await;
    // A private session of tenant acme, its player connected.
    let acme = app
        .create_session_with(
            &[KEYED, ("X-Tenant-ID", "acme")],
            json!({"campaign_id": "demo"}),
        )
        .await;
    let (_acme_player, _) = app
        .connect(&acme.session_id, &acme.player_token, None)
        .await;
    // A public session of `default`: a player, a spectator, a turn played.
    let main = app.public_demo().await;
    let (mut player, _) = app
        .connect(&main.session_id, &main.player_token, None)
        .await;
    let (_spectator, _) = app
        .connect(&main.session_id, &main.spectator_token, None)
        .await;
    first(&player.play("roll 1d20", "r-1").await, "turn_completed");

    let list = admin_ok(&app, "/api/v1/admin/sessions").await;
    assert_eq!(list["node_id"], TEST_NODE);
    assert_eq!(
        (list["total"].as_u64(), list["limit"].as_u64()),
        (Some(2), Some(100))
    );
    let title = admin_ok(&app, "/api/v1/campaigns").await[0]["title"].clone();
    let find = |id: &str| {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {list}"))
    };
    let (a, m) = (find(&acme.session_id), find(&main.session_id));
    let counts = |s: &Value| {
        [
            "tenant_id",
            "campaign_id",
            "visibility",
            "players",
            "spectators",
            "turns",
            "queued",
            "owner_node",
            "closing",
        ]
        .map(|k| s[k].clone())
    };
    assert_eq!(
        counts(&a),
        [
            json!("acme"),
            json!("demo"),
            json!("private"),
            json!(1),
            json!(0),
            json!(0),
            json!(0),
            json!(TEST_NODE),
            json!(false)
        ]
    );
    assert_eq!(
        counts(&m),
        [
            json!("default"),
            json!("demo"),
            json!("public"),
            json!(1),
            json!(1),
            json!(1),
            json!(0),
            json!(TEST_NODE),
            json!(false)
        ]
    );
    assert_eq!((&a["title"], &m["title"]), (&title, &title));
    // Most recently active first (the turn was played after acme's player
    // came), as time and as milliseconds.
    let times: Vec<i64> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["last_activity_ms"].as_i64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    assert!(m["last_activity_ms"].as_i64() >= a["last_activity_ms"].as_i64());
    let shown = m["last_activity"].as_str().unwrap();
    assert!(shown.starts_with("20") && shown.ends_with('Z'), "{shown}");
    // No token of any kind is listed.
    let text = list.to_string();
    for token in [
        &acme.player_token,
        &acme.spectator_token,
        &main.player_token,
    ] {
        assert!(!text.contains(token.as_str()), "{text}");
    }

    // The list is bounded: 1 to 1000, 100 by default.
    let one = admin_ok(&app, "/api/v1/admin/sessions?limit=1").await;
    assert_eq!(
        (one["total"].as_u64(), one["limit"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(one["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(one["sessions"][0], list["sessions"][0]);
    let zero = admin_ok(&app, "/api/v1/admin/sessions?limit=0").await;
    assert_eq!(zero["sessions"].as_array().unwrap().len(), 1);
    let many = admin_ok(&app, "/api/v1/admin/sessions?limit=4000000").await;
    assert_eq!(many["limit"], 1000);
    for bad in ["limit=-1", "limit=lots"] {
        let a = admin_get(&app, &format!("/api/v1/admin/sessions?{bad}")).await;
        assert_eq!(
            (a.status, &a.body["error_code"]),
            (400, &json!("BAD_REQUEST")),
            "{bad}"
        );
        assert!(
            a.body["message"].as_str().unwrap().contains("limit"),
            "{}",
            a.body
        );
    }
}

/// The values of `/metrics` the node figures show.
const SHOWN: [&str; 11] = [
    "questd_sessions_live",
    "questd_connections{role=\"player\"}",
    "questd_connections{role=\"spectator\"}",
    "questd_turns_started_total",
    "questd_turns_completed_total",
    "questd_frames_sent_total",
    "questd_outbound_queue_drops_total",
    "questd_rate_limited_total",
    "questd_journal_commit_duration_seconds_count",
    "questd_journal_commit_duration_seconds_sum",
    "questd_turn_duration_seconds_count",
];

#[actix_web::test]
async fn node_figures_are_the_metrics_counters() {
    let app = spawn_offline(|s| {
        s.chat_burst = 1;
        s.chat_per_minute = 1;
    })
    .await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (_spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    first(&player.play("roll 2d6", "r-1").await, "turn_completed");
    // Past the chat rate: one refusal counted.
    player.chat("again", "r-2").await;
    assert_eq!(
        player.until_reply().await.pop().unwrap()["error_code"],
        "RATE_LIMITED"
    );

    // Figures read between two equal scrapes saw the same counters.
    let mut found = None;
    for _ in 0..50 {
        let before = crate::metrics::scrape(&app).await;
        let node = admin_ok(&app, "/api/v1/admin/node").await;
        let after = crate::metrics::scrape(&app).await;
        if SHOWN.iter().all(|k| before.get(*k) == after.get(*k)) {
            found = Some((node, after));
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    let (node, m) = found.expect("the counters settle");
    let figures = [
        &node["sessions_live"],
        &node["connections"]["player"],
        &node["connections"]["spectator"],
        &node["turns"]["started"],
        &node["turns"]["completed"],
        &node["frames_sent"],
        &node["outbound_drops"],
        &node["rate_limited"],
        &node["journal_commit"]["count"],
    ];
    for (name, shown) in SHOWN.iter().zip(figures) {
        assert_eq!(shown.as_f64(), Some(m[*name]), "{name}: {node}");
    }
    assert_eq!(
        (
            node["sessions_live"].as_u64(),
            node["turns"]["started"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(node["rate_limited"], 1);
    assert!(node["frames_sent"].as_u64().unwrap() >= 10, "{node}");
    assert_eq!(node["turns"]["failed"], json!({}));
    let commit = &node["journal_commit"];
    let sum = commit["sum_s"].as_f64().unwrap();
    assert!((sum - m["questd_journal_commit_duration_seconds_sum"]).abs() < 1e-6);
    let (p50, p99) = (
        commit["p50_s"].as_f64().unwrap(),
        commit["p99_s"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= 120.0, "{commit}");
    assert_eq!(node["node_id"], TEST_NODE);
    let up = node["uptime_s"].as_f64().unwrap();
    let later = admin_ok(&app, "/api/v1/admin/node").await;
    assert!(
        up > 0.0 && later["uptime_s"].as_f64().unwrap() >= up,
        "{later}"
    );
}

#[actix_web::test]
async fn a_sessions_story_and_audit_trail_read_without_its_token() {
    let app = spawn_app().await;
    // Another tenant's session: the internal key reads it without naming it.
    let s = app
        .create_session_with(
            &[KEYED, ("X-Tenant-ID", "acme")],
            json!({"campaign_id": "demo"}),
        )
        .await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = player.play("roll 1d20", "r-1").await;
    let completed = first(&frames, "turn_completed").clone();
    // Nothing happens in the session after its turn.
    let last = completed["seq"].as_u64().unwrap();

    let base = format!("/api/v1/admin/sessions/{}", s.session_id);
    let page = admin_ok(&app, &format!("{base}/story")).await;
    assert_eq!(seqs(&page), (1..=last).collect::<Vec<_>>());
    assert_eq!(
        [
            &page["tenant_id"],
            &page["campaign_id"],
            &page["owner_node"],
            &page["closed_at"],
            &page["next_after_seq"]
        ],
        [
            &json!("acme"),
            &json!("demo"),
            &json!(TEST_NODE),
            &Value::Null,
            &Value::Null
        ]
    );
    let story = page["frames"].as_array().unwrap();
    let started = story.iter().find(|f| f["type"] == "turn_started").unwrap();
    assert_eq!(
        (&started["text"], &started["request_id"]),
        (&json!("roll 1d20"), &json!("r-1"))
    );
    assert!(
        story
            .iter()
            .any(|f| f["type"] == "tool_call" && f["tool"] == "roll_dice")
    );
    // The frames as they were sent.
    let stored = story
        .iter()
        .find(|f| f["type"] == "turn_completed")
        .unwrap();
    assert_eq!(stored, &completed);

    // Paged by after_seq, bounded by limit (1 at least).
    let two = admin_ok(&app, &format!("{base}/story?limit=2")).await;
    assert_eq!(
        (seqs(&two), two["next_after_seq"].as_u64()),
        (vec![1, 2], Some(2))
    );
    let next = admin_ok(&app, &format!("{base}/story?after_seq=2&limit=2")).await;
    assert_eq!(seqs(&next), vec![3, 4]);
    let one = admin_ok(&app, &format!("{base}/story?limit=0")).await;
    assert_eq!(seqs(&one), vec![1]);
    let end = admin_ok(&app, &format!("{base}/story?after_seq={last}")).await;
    assert_eq!((seqs(&end), &end["next_after_seq"]), (vec![], &Value::Null));

    // The audit trail is the one the session's player reads.
    let audit = admin_ok(&app, &format!("{base}/audit")).await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(
        (
            &entries[0]["tool"],
            &entries[0]["status"],
            &entries[0]["role"]
        ),
        (&json!("roll_dice"), &json!("ok"), &json!("game_master"))
    );
    let (status, own) = get(
        &format!("{}/api/v1/sessions/{}/audit", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!((status, &own), (200, &audit));
    let after = entries[0]["audit_id"].as_i64().unwrap();
    let rest = admin_ok(&app, &format!("{base}/audit?after_id={after}&limit=0")).await;
    assert_eq!(rest["entries"], json!([]));

    // Bad queries and unknown sessions are plain errors.
    for (path, status, code) in [
        (format!("{base}/story?after_seq=x"), 400, "BAD_REQUEST"),
        (format!("{base}/story?limit=-3"), 400, "BAD_REQUEST"),
        (format!("{base}/audit?after_id=x"), 400, "BAD_REQUEST"),
        (
            "/api/v1/admin/sessions/sess_nope/story".into(),
            404,
            "NOT_FOUND",
        ),
        (
            "/api/v1/admin/sessions/sess_nope/audit".into(),
            404,
            "NOT_FOUND",
        ),
    ] {
        let a = admin_get(&app, &path).await;
        assert_eq!(
            (a.status, a.body["error_code"].as_str()),
            (status, Some(code)),
            "{path}: {}",
            a.body
        );
    }
}

#[actix_web::test]
async fn a_story_page_holds_at_most_500_frames() {
    // Past the tool API's and the session's default bursts without
    // waiting on their rates.
    let app = spawn_offline(|s| {
        s.service_burst = 1000;
        s.calls_burst = 1000;
    })
    .await;
    let s = app.demo().await;
    // Two frames per direct call: 502 frames.
    for i in 0..251 {
        let input = json!({"dice": "1d6", "reason": format!("call {i}")});
        direct_call(&app, &s.session_id, "roll_dice", input).await;
    }
    let base = format!("/api/v1/admin/sessions/{}/story", s.session_id);
    let page = admin_ok(&app, &format!("{base}?limit=100000")).await;
    assert_eq!(seqs(&page), (1..=500).collect::<Vec<_>>());
    assert_eq!(page["next_after_seq"], 500);
    let rest = admin_ok(&app, &format!("{base}?after_seq=500&limit=100000")).await;
    assert_eq!(
        (seqs(&rest), &rest["next_after_seq"]),
        (vec![501, 502], &Value::Null)
    );
    // 100 by default.
    let first_page = admin_ok(&app, &base).await;
    assert_eq!(
        (
            seqs(&first_page).len(),
            first_page["next_after_seq"].as_u64()
        ),
        (100, Some(100))
    );
}

#[actix_web::test]
async fn closing_a_session_runs_its_acknowledged_chats_then_closes_it_for_good() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let model = GatedModel { gate: gate.clone() };
    let app = spawn_in(dir.clone(), |_| {}, Arc::new(model)).await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    // One turn runs (its model waits at the gate); a chat waits behind it.
    player.chat("first", "r-1").await;
    let first_ack = player.until_reply().await.pop().unwrap();
    player.chat("second", "r-2").await;
    let second_ack = player.until_reply().await.pop().unwrap();
    assert_eq!(
        (first_ack["type"].as_str(), second_ack["queued"].as_u64()),
        (Some("ack"), Some(1)),
        "{second_ack}"
    );
    let listed = row(&app, &s.session_id).await.unwrap();
    assert_eq!(
        [&listed["turns"], &listed["queued"], &listed["closing"]],
        [&json!(1), &json!(1), &json!(false)]
    );

    let closed = close(&app, &s.session_id).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    assert_eq!(
        (&closed.body["session_id"], &closed.body["closed"]),
        (&json!(s.session_id), &json!(true))
    );
    let closed_at = closed.body["closed_at"].as_str().unwrap().to_owned();

    // From now on nothing new is taken: chats, joins, reads of its state.
    player.chat("third", "r-3").await;
    let refused = player.until_reply().await.pop().unwrap();
    assert_eq!(
        (
            &refused["type"],
            &refused["error_code"],
            &refused["request_id"]
        ),
        (&json!("error"), &json!("SESSION_CLOSED"), &json!("r-3")),
        "{refused}"
    );
    let mut late = Ws::connect(&app.ws_url(&s.session_id, &s.player_token, None)).await;
    assert_eq!(late.next_or_close().await, Err(Some(4000)));
    let snapshot = get(
        &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(
        (snapshot.0, &snapshot.1["error_code"]),
        (410, &json!("SESSION_CLOSED"))
    );
    let listed = row(&app, &s.session_id).await.unwrap();
    assert_eq!(listed["closing"], true);
    // Closing again answers the same.
    let again = close(&app, &s.session_id).await;
    assert_eq!((again.status, &again.body), (200, &closed.body));

    // The turn under way and the chat acknowledged behind it still run;
    // then both connections close with 4000.
    gate.add_permits(2);
    for (name, ws) in [("player", &mut player), ("spectator", &mut spectator)] {
        let (frames, code) = until_closed(ws).await;
        let ended: Vec<&Value> = frames
            .iter()
            .filter(|f| f["type"] == "turn_completed")
            .map(|f| &f["turn_id"])
            .collect();
        assert_eq!(
            ended,
            [&first_ack["turn_id"], &second_ack["turn_id"]],
            "{name}: {frames:#?}"
        );
        assert_eq!(code, Some(4000), "{name}");
    }

    // Then it leaves memory and is closed for good.
    for _ in 0..100 {
        if row(&app, &s.session_id).await.is_none() {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(row(&app, &s.session_id).await, None, "it unloaded");
    let ws_url = app.ws_url(&s.session_id, &s.player_token, None);
    assert_eq!(Ws::refused_status(&ws_url).await, 410);
    let chat = request(
        "POST",
        &format!("{}/api/v1/chat", app.base),
        &[("Authorization", &format!("Bearer {}", s.player_token))],
        Some(&json!({"session_id": s.session_id, "message": "hello?"})),
    )
    .await;
    assert_eq!(
        (chat.status, &chat.body["error_code"]),
        (410, &json!("SESSION_CLOSED"))
    );
    assert_eq!(
        chat.body["message"],
        "the session was closed by an operator"
    );
    // Its story stays readable, and ends with the second turn.
    let story = admin_ok(
        &app,
        &format!("/api/v1/admin/sessions/{}/story", s.session_id),
    )
    .await;
    assert_eq!(
        (&story["closed_at"], &story["owner_node"]),
        (&json!(closed_at), &Value::Null)
    );
    let frames = story["frames"].as_array().unwrap();
    let last_end = frames.iter().rev().find(|f| f["type"] == "turn_completed");
    assert_eq!(last_end.unwrap()["turn_id"], second_ack["turn_id"]);
    assert_eq!((close(&app, &s.session_id).await.body), closed.body);

    // A restart does not reopen it.
    app.stop().await;
    drop(app);
    let app = spawn_in(dir, |_| {}, Arc::new(OfflineGameMaster::default())).await;
    let ws_url = app.ws_url(&s.session_id, &s.player_token, None);
    assert_eq!(Ws::refused_status(&ws_url).await, 410);
    let again = close(&app, &s.session_id).await;
    assert_eq!((again.status, &again.body), (200, &closed.body));
    let unknown = close(&app, "sess_nope").await;
    assert_eq!(
        (unknown.status, &unknown.body["error_code"]),
        (404, &json!("NOT_FOUND"))
    );
}

#[actix_web::test]
async fn the_console_in_a_real_browser_shows_a_session_and_closes_it() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_app().await;
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    first(&player.play("roll 1d20", "r-1").await, "turn_completed");
    // Kept open and read (pings answered) until the session closes it.
    let closed = actix_web::rt::spawn(async move { until_closed(&mut player).await.1 });

    let page = driver.browser("operator", 1280, 900).await;
    page.goto(&format!("{}/admin", app.base)).await.unwrap();
    wait(&page, "admin", "the key form", &query("#key")).await;
    let key = page.find(Locator::Css("#key")).await.unwrap();
    key.send_keys(&(TEST_KEY.to_owned() + &Key::Enter))
        .await
        .unwrap();
    let row_css = format!("tr[data-session-id='{}']", s.session_id);
    wait(
        &page,
        "admin",
        "the session's row with its player and turn",
        &format!(
            "{r} && {r}.querySelector('.players').innerText === '1' \
             && {r}.querySelector('.turns').innerText === '1'",
            r = query(&row_css)
        ),
    )
    .await;
    wait(
        &page,
        "admin",
        "the node's figures",
        "document.getElementById('f-started').innerText === '1' \
         && document.getElementById('f-players').innerText === '1'",
    )
    .await;
    // The key is in this tab's storage, never in the address.
    let url = page.current_url().await.unwrap();
    assert!(!url.as_str().contains(TEST_KEY), "{url}");
    let stored = page
        .execute("return sessionStorage.getItem('questd.adminKey');", vec![])
        .await
        .unwrap();
    assert_eq!(stored, json!(TEST_KEY));

    // Its story and audit trail.
    click(&page, &format!("{row_css} button.open")).await;
    wait(
        &page,
        "admin",
        "the story and the audit trail",
        &format!(
            "{} && {} && [...document.querySelectorAll('#audit-body td')].some(t => t.innerText === 'roll_dice')",
            query("#story li[data-type='turn_completed']"),
            query("#story li[data-type='turn_started']")
        ),
    )
    .await;

    // Readable on a phone: each row a card, nothing wider than the screen.
    set_viewport(&page, 390, 844).await;
    wait(
        &page,
        "admin-phone",
        "the rows as cards within the screen's width",
        &format!(
            "document.documentElement.scrollWidth <= window.innerWidth \
             && getComputedStyle({}).display === 'block'",
            query(&row_css)
        ),
    )
    .await;
    let show_row = format!("{}.scrollIntoView({{block: 'center'}});", query(&row_css));
    page.execute(&show_row, vec![]).await.unwrap();
    screenshot(&page, "admin-phone.png").await;
    set_viewport(&page, 1280, 900).await;

    // The game's page of the session is open as the player too.
    let game = driver.game("closed-game", &app.base, &s).await;

    // Closed after a confirmation.
    click(&page, "#close-session").await;
    wait(
        &page,
        "admin",
        "the confirmation",
        "document.getElementById('confirm').open",
    )
    .await;
    click(&page, "#confirm-close").await;
    wait(
        &page,
        "admin",
        "the close",
        "document.getElementById('detail-status').innerText.startsWith('Closed at')",
    )
    .await;
    assert_eq!(
        closed.await.unwrap(),
        Some(4000),
        "the player was closed with 4000"
    );
    wait(
        &page,
        "admin",
        "the session gone from the live list",
        &format!("{} === 0", count(&row_css)),
    )
    .await;
    let ws_url = app.ws_url(&s.session_id, &s.player_token, None);
    assert_eq!(Ws::refused_status(&ws_url).await, 410);
    screenshot(&page, "admin.png").await;
    // The game page (closed with 4000) says so and stops instead of reconnecting.
    wait(
        &game,
        "closed-game",
        "the closed-session panel",
        "!document.getElementById('fatal').hidden && document.body.dataset.conn === 'closed' \
         && document.getElementById('fatal-text').innerText.includes('closed by an operator') \
         && document.getElementById('banner').hidden",
    )
    .await;
    game.close().await.unwrap();

    // A reload keeps the key for this tab; forgetting it asks again.
    page.refresh().await.unwrap();
    wait(
        &page,
        "admin",
        "the console again",
        "!document.getElementById('console').hidden",
    )
    .await;
    click(&page, "#sign-out").await;
    wait(
        &page,
        "admin",
        "the key form again",
        "!document.getElementById('login').hidden && sessionStorage.getItem('questd.adminKey') === null",
    )
    .await;
    page.close().await.unwrap();
    app.stop().await;
}
