//! The offline game master's timers over real sockets: a player asks to be
//! reminded or to wait, the game master schedules it (`schedule_event`),
//! and the session's world turn, when it is due, tells it in the player's
//! language; the operator console's route lists the timer while it waits.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Api, TEST_KEY, Ws, request, spawn_offline, turn};

/// How long a world turn may take to arrive after its timer is set (the
/// timers here are due after 5 s).
const FIRE_WAIT: Duration = Duration::from_secs(30);

/// Reads frames until a world turn completes: its `turn_started` and its
/// `turn_completed`. `step` names what is waited for.
async fn world_turn(ws: &mut Ws, step: &str) -> (Value, Value) {
    let mut started: Option<Value> = None;
    loop {
        let f = ws
            .try_next_json(FIRE_WAIT)
            .await
            .unwrap_or_else(|| panic!("{step}: no world turn within {FIRE_WAIT:?}"));
        if f["type"] == "turn_started" && f["trigger"] == "timer" {
            started = Some(f);
            continue;
        }
        if let Some(s) = &started
            && f["type"] == "turn_completed"
            && f["turn_id"] == s["turn_id"]
        {
            return (s.clone(), f);
        }
    }
}

/// The session's pending timers as the operator console reads them.
async fn console_timers(base: &str, session_id: &str) -> Vec<Value> {
    let a = request(
        "GET",
        &format!("{base}/api/v1/admin/sessions/{session_id}/timers"),
        &[("X-Internal-API-Key", TEST_KEY)],
        None,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.body["timers"].as_array().cloned().unwrap_or_default()
}

#[actix_web::test]
async fn a_reminder_is_scheduled_and_told_when_its_world_turn_fires() {
    let app = spawn_offline(|_| {}).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let asked = turn(&mut ws, "remind me in 5 seconds to check the door").await;
    let scheduled = asked.results("schedule_event");
    assert_eq!(scheduled.len(), 1, "{:?}", asked.tools);
    assert_eq!(scheduled[0]["event"], "reminder");
    assert!(
        asked.reply.contains("remind you in 5 seconds"),
        "{}",
        asked.reply
    );
    let listed = console_timers(&app.base, &s.session_id).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["timer_id"], scheduled[0]["timer_id"]);
    assert_eq!(listed[0]["event"], "reminder");
    assert!(listed[0].get("note").is_none(), "{listed:?}");

    let (started, done) = world_turn(&mut ws, "the reminder fires").await;
    assert_eq!(started["event"], "reminder");
    assert_eq!(started["timer_id"], scheduled[0]["timer_id"]);
    assert!(started["request_id"].is_null() && started["seat_id"].is_null());
    let told = done["reply"].as_str().unwrap_or_default();
    assert!(told.contains("Reminder: check the door."), "{told}");
    // Fired once: nothing pending any more.
    assert!(console_timers(&app.base, &s.session_id).await.is_empty());
    let snapshot = app.snapshot(&s).await;
    assert_eq!(
        snapshot["timers"],
        serde_json::json!([]),
        "{}",
        snapshot["timers"]
    );
}

#[actix_web::test]
async fn a_wait_asked_in_chinese_is_told_in_chinese() {
    let app = spawn_offline(|_| {}).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let asked = turn(&mut ws, "等 5 秒").await;
    assert_eq!(
        asked.results("schedule_event").len(),
        1,
        "{:?}",
        asked.tools
    );
    assert!(asked.reply.contains("等待 5 秒"), "{}", asked.reply);
    let (started, done) = world_turn(&mut ws, "the wait is over").await;
    assert_eq!(started["event"], "player_wait");
    let told = done["reply"].as_str().unwrap_or_default();
    assert!(told.contains("你等的 5 秒到了"), "{told}");
    assert!(!told.chars().any(|c| c.is_ascii_alphabetic()), "{told}");
}

#[actix_web::test]
async fn a_wait_past_thirty_days_is_answered_without_a_timer() {
    let app = spawn_offline(|_| {}).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let asked = turn(&mut ws, "wait 31 days").await;
    assert!(!asked.called("schedule_event"), "{:?}", asked.tools);
    assert!(asked.reply.contains("at most 30 days"), "{}", asked.reply);
    assert!(console_timers(&app.base, &s.session_id).await.is_empty());
}
