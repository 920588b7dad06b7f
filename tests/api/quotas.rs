//! Quotas by size and by tenant: campaign bytes per address, the node's
//! budget of live session state, each tenant's share of the node and its
//! creation rate, the retention of abandoned anonymous sessions, and the
//! rate of direct calls into one session.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::database::{execute, text_rows};

/// The demo campaign, sent inline: about 25 KiB of body.
fn inline_demo() -> Value {
    let campaign: Value =
        serde_json::from_str(include_str!("../../src/game/campaigns/demo.json")).unwrap();
    json!({ "campaign": campaign })
}

/// Creates a session without a key, as the client at `address` behind the
/// trusted proxy (the test server's peer, 127.0.0.1).
async fn create_from(app: &TestApp, address: &str, body: &Value) -> Answer {
    let url = format!("{}/api/v1/sessions", app.base);
    request("POST", &url, &[("X-Forwarded-For", address)], Some(body)).await
}

/// Creates a demo session with `key` (`X-Internal-API-Key`).
async fn create_keyed(app: &TestApp, key: &str) -> Answer {
    let url = format!("{}/api/v1/sessions", app.base);
    let body = json!({"campaign_id": "demo"});
    request("POST", &url, &[("X-Internal-API-Key", key)], Some(&body)).await
}

fn refused_with(a: &Answer, status: u16, code: &str) {
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (status, Some(code)),
        "{}",
        a.body
    );
    assert!(
        a.retry_after
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "Retry-After: {:?}",
        a.retry_after
    );
}

#[actix_web::test]
async fn an_address_past_its_campaign_bytes_is_refused_while_others_still_create() {
    let big = inline_demo();
    let kib = serde_json::to_vec(&big).unwrap().len().div_ceil(1024) as u32;
    // Two campaigns fit at once, three do not.
    let app = spawn_offline(|s| {
        s.trusted_proxies = Some("127.0.0.1".into());
        s.create_kib_per_minute = 1;
        s.create_kib_burst = kib * 5 / 2;
        s.tenant_keys = Some("acme:acme-key".into());
    })
    .await;
    for _ in 0..2 {
        assert_eq!(create_from(&app, "203.0.113.7", &big).await.status, 201);
    }
    refused_with(
        &create_from(&app, "203.0.113.7", &big).await,
        429,
        "RATE_LIMITED",
    );
    // Another address, small or big, and another tenant's key still create.
    let small = json!({"campaign_id": "demo"});
    assert_eq!(create_from(&app, "203.0.113.8", &small).await.status, 201);
    assert_eq!(create_from(&app, "203.0.113.8", &big).await.status, 201);
    assert_eq!(create_keyed(&app, "acme-key").await.status, 201);

    // An IPv6 client is counted by its /64: another address in it shares
    // the budget, the next /64 has its own.
    for _ in 0..2 {
        let a = create_from(&app, "2001:db8:1:2::1", &big).await;
        assert_eq!(a.status, 201, "{}", a.body);
    }
    refused_with(
        &create_from(&app, "2001:db8:1:2:ffff::9", &big).await,
        429,
        "RATE_LIMITED",
    );
    assert_eq!(create_from(&app, "2001:db8:1:3::1", &big).await.status, 201);
}

#[actix_web::test]
async fn the_node_state_budget_refuses_with_503_and_unloads_idle_sessions_to_make_room() {
    let app = spawn_offline(|s| s.max_live_state_mb = 1).await;
    // The demo's state is some tens of KiB: a MiB holds a few dozen.
    let mut created = 0;
    let refused = loop {
        let a = create_keyed(&app, TEST_KEY).await;
        if a.status != 201 {
            break a;
        }
        created += 1;
        assert!(created < 500, "500 sessions fit in a budget of 1 MiB");
    };
    assert!(created >= 2, "{created} sessions");
    refused_with(&refused, 503, "OVERLOADED");
    // Nobody uses the sessions: they are unloaded to make room, and a
    // retry creates.
    let deadline = Instant::now() + SERVER_WAIT;
    loop {
        let a = create_keyed(&app, TEST_KEY).await;
        if a.status == 201 {
            break;
        }
        refused_with(&a, 503, "OVERLOADED");
        assert!(Instant::now() < deadline, "room was never made");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn a_tenant_at_its_share_of_the_node_is_refused_while_others_still_create() {
    let app = spawn_offline(|s| {
        s.tenant_keys = Some("acme:acme-key,zeta:zeta-key".into());
        s.max_sessions_per_tenant = Some(3);
    })
    .await;
    for _ in 0..3 {
        assert_eq!(create_keyed(&app, "acme-key").await.status, 201);
    }
    let a = create_keyed(&app, "acme-key").await;
    refused_with(&a, 429, "RATE_LIMITED");
    let message = a.body["message"].as_str().unwrap();
    assert!(
        message.contains("QUESTD_MAX_SESSIONS_PER_TENANT"),
        "{message}"
    );
    assert_eq!(create_keyed(&app, "zeta-key").await.status, 201);
    let anonymous = post(
        &format!("{}/api/v1/sessions", app.base),
        &json!({"campaign_id": "demo"}),
    )
    .await;
    assert_eq!(anonymous.0, 201, "{}", anonymous.1);
}

#[actix_web::test]
async fn keyed_creation_is_rate_limited_per_tenant() {
    let app = spawn_offline(|s| {
        s.tenant_keys = Some("acme:acme-key,zeta:zeta-key".into());
        s.key_create_per_minute = 1;
        s.key_create_burst = 2;
    })
    .await;
    for _ in 0..2 {
        assert_eq!(create_keyed(&app, "acme-key").await.status, 201);
    }
    refused_with(&create_keyed(&app, "acme-key").await, 429, "RATE_LIMITED");
    assert_eq!(create_keyed(&app, "zeta-key").await.status, 201);
}

#[actix_web::test]
async fn an_npc_activation_flood_is_refused_while_the_chat_still_works() {
    let app = spawn_offline(|s| {
        s.calls_per_minute = 1;
        s.calls_burst = 5;
    })
    .await;
    let s = app.demo().await;
    let url = format!(
        "{}/api/v1/sessions/{}/npcs/npc_silt/activate",
        app.base, s.session_id
    );
    let auth = format!("Bearer {}", s.player_token);
    let headers = [("Authorization", auth.as_str())];
    let activate = || request("POST", &url, &headers, None);
    for _ in 0..5 {
        let a = activate().await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    refused_with(&activate().await, 429, "RATE_LIMITED");
    // A tool API call into the session spends from the same rate.
    let tool = request(
        "POST",
        &format!("{}/api/v1/tools/call", app.base),
        &[
            ("X-Internal-API-Key", TEST_KEY),
            ("X-Tenant-ID", "default"),
            ("X-Site-ID", "site-1"),
            ("X-Trace-ID", "trace-flood"),
            ("X-Session-ID", s.session_id.as_str()),
        ],
        Some(&json!({"tool_name": "roll_dice", "input": {"dice": "1d6"}})),
    )
    .await;
    assert_eq!(tool.status, 429, "{}", tool.body);
    assert!(tool.retry_after.is_some());
    // The player's chat is not a direct call: it still plays.
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("roll 1d20", "r-1").await;
    assert_eq!(frames.last().unwrap()["type"], "turn_completed");
}

/// Rows of `session_id` in each table a session has rows in, on the
/// database `db`.
async fn rows_of(db: &str, session_id: &str) -> Vec<(&'static str, u64)> {
    let mut counts = Vec::new();
    for table in [
        "sessions",
        "journal",
        "snapshots",
        "snapshot_chunks",
        "audit",
        "inbox",
    ] {
        let sql = format!("SELECT CAST(COUNT(*) AS TEXT) FROM {table} WHERE session_id = $1");
        let rows = text_rows(db, &sql, session_id).await;
        counts.push((table, rows[0][0].parse().unwrap()));
    }
    counts
}

/// Makes a session look created and played two hours ago.
async fn age(db: &str, session_id: &str) {
    for table in ["sessions", "journal"] {
        let sql =
            format!("UPDATE {table} SET created_at = created_at - 7200000 WHERE session_id = $1");
        execute(db, &sql, session_id).await;
    }
}

/// Waits until none of `sessions` is live on the node (the console's list).
async fn until_unloaded(app: &impl Api, sessions: &[&Session]) {
    let url = format!("{}/api/v1/admin/sessions?limit=1000", app.base());
    let deadline = Instant::now() + SERVER_WAIT;
    loop {
        let a = request("GET", &url, &[("X-Internal-API-Key", TEST_KEY)], None).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let listed = a.body["sessions"].as_array().unwrap().iter().any(|l| {
            sessions
                .iter()
                .any(|s| l["session_id"] == s.session_id.as_str())
        });
        if !listed {
            return;
        }
        assert!(Instant::now() < deadline, "the sessions never unloaded");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A session created without a key, with one turn played.
async fn played_anonymous(app: &impl Api) -> Session {
    let (status, body) = post(
        &format!("{}/api/v1/sessions", app.base()),
        &json!({"campaign_id": "demo"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let s = Session::created(&body);
    play_once(app, &s).await;
    s
}

async fn play_once(app: &impl Api, s: &Session) {
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.play("roll 1d20", "r-1").await;
    ws.close().await;
}

/// Plays on until `s` has a snapshot of its own, with its chunks, in
/// `db` (a session writes one every 256 frames; one that played less
/// leaves none as it unloads).
async fn play_until_snapshot(app: &impl Api, db: &str, s: &Session) {
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    for turn in 0..400 {
        ws.play("explore", &format!("explore-{turn}")).await;
        let rows = rows_of(db, &s.session_id).await;
        if rows
            .iter()
            .all(|(t, n)| *n > 0 || !t.starts_with("snapshot"))
        {
            ws.close().await;
            return;
        }
    }
    panic!("no snapshot after 400 turns")
}

#[actix_web::test]
async fn abandoned_anonymous_sessions_are_deleted_with_their_rows_and_no_other() {
    let app = spawn_offline(|s| {
        // A sweep every 9 s; sessions unload a second after their last use.
        s.anonymous_retention_hours = 0.01;
        s.idle_secs = 1;
        s.chat_burst = 1000;
        s.chat_per_minute = 1_000_000;
    })
    .await;
    let abandoned = played_anonymous(&app).await;
    // Rows in every table the session has, its snapshot's too.
    play_until_snapshot(&app, &app.db_url, &abandoned).await;
    let live = played_anonymous(&app).await;
    let recent = played_anonymous(&app).await;
    let keyed = app.demo().await;
    play_once(&app, &keyed).await;
    // Loaded and watched all along: never deleted, however old.
    let (_watching, _) = app
        .connect(&live.session_id, &live.player_token, None)
        .await;
    // Aged once unloaded: what a session writes as it leaves is old too.
    until_unloaded(&app, &[&abandoned, &keyed]).await;
    for s in [&abandoned, &live, &keyed] {
        age(&app.db_url, &s.session_id).await;
    }
    let before = rows_of(&app.db_url, &abandoned.session_id).await;
    // Rows in every table but the inbox (no chat waits).
    for (table, n) in &before {
        assert!(*n > 0 || *table == "inbox", "{table}: {before:?}");
    }

    let deadline = Instant::now() + SERVER_WAIT * 2;
    while rows_of(&app.db_url, &abandoned.session_id).await[0].1 > 0 {
        assert!(Instant::now() < deadline, "the abandoned session stays");
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
    let after = rows_of(&app.db_url, &abandoned.session_id).await;
    assert!(after.iter().all(|(_, n)| *n == 0), "{after:?}");
    let (status, _) = get(
        &format!("{}/api/v1/sessions/{}", app.base, abandoned.session_id),
        Some(&abandoned.player_token),
    )
    .await;
    assert_eq!(status, 404);
    for (name, s) in [("live", &live), ("recent", &recent), ("keyed", &keyed)] {
        let rows = rows_of(&app.db_url, &s.session_id).await;
        assert!(rows[0].1 == 1 && rows[1].1 > 0, "{name}: {rows:?}");
        let (status, _) = get(
            &format!("{}/api/v1/sessions/{}", app.base, s.session_id),
            Some(&s.player_token),
        )
        .await;
        assert_eq!(status, 200, "{name} still opens");
    }
}

#[actix_web::test]
async fn a_sweeping_node_leaves_alone_an_abandoned_session_another_node_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::postgres_url_in(dir.path());
    let node = |name: &str, retention: &str| {
        crate::process::Server::start_with(
            &db,
            &[
                ("QUESTD_NODE_ID", name),
                ("QUESTD_LEASE_MS", "1500"),
                ("QUESTD_IDLE_SECS", "1"),
                ("QUESTD_ANONYMOUS_RETENTION_HOURS", retention),
            ],
        )
    };
    // A keeps every session; B sweeps every 2.7 s: whatever is deleted,
    // B deleted.
    let a = node("node-a", "0");
    let b = node("node-b", "0.003");
    let running = played_anonymous(&a).await;
    let (mut player, _) = a
        .connect(&running.session_id, &running.player_token, None)
        .await;
    let abandoned = played_anonymous(&a).await;
    until_unloaded(&a, &[&abandoned]).await;
    // Both look two hours unplayed; `running` first, so the sweep that
    // deletes `abandoned` saw `running` too.
    age(&db, &running.session_id).await;
    age(&db, &abandoned.session_id).await;
    let deadline = Instant::now() + SERVER_WAIT * 2;
    while rows_of(&db, &abandoned.session_id).await[0].1 > 0 {
        assert!(Instant::now() < deadline, "node B never swept");
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
    let rows = rows_of(&db, &running.session_id).await;
    assert!(rows[0].1 == 1 && rows[1].1 > 0, "{rows:?}");
    // It plays on, on A, through B too.
    let frames = player.play("roll 1d20", "r-2").await;
    assert_eq!(frames.last().unwrap()["type"], "turn_completed");
    let (status, _) = get(
        &format!("{}/api/v1/sessions/{}", b.base(), running.session_id),
        Some(&running.player_token),
    )
    .await;
    assert_eq!(status, 200);
}
