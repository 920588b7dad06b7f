//! `/metrics` scraped through real HTTP while sessions play.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;

/// The scrape as `name{labels}` -> value.
pub async fn scrape(app: &impl Api) -> HashMap<String, f64> {
    let mut resp = client()
        .get(format!("{}/metrics", app.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let content_type = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let body = resp.body().await.unwrap();
    std::str::from_utf8(&body)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// Scrapes until `done` holds of the scrape (counters are updated just
/// after what they count is handed on), at most 50 times 50 ms apart, and
/// answers the last scrape.
async fn scrape_until(
    app: &impl Api,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let mut m = scrape(app).await;
    for _ in 0..50 {
        if done(&m) {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        m = scrape(app).await;
    }
    m
}

#[actix_web::test]
async fn metrics_count_sessions_connections_turns_tools_and_commits() {
    let app = spawn_app().await;
    let before = scrape(&app).await;
    assert_eq!(before["questd_sessions_live"], 0.0);
    assert_eq!(before["questd_turns_started_total"], 0.0);

    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let frames = player.play("roll 2d6", "r-1").await;
    first(&frames, "turn_completed");
    spectator.until(|f| f["type"] == "turn_completed").await;

    // The session counts frames right after handing them to both
    // connections, which may already have written them.
    let m = scrape_until(&app, |m| m["questd_frames_sent_total"] >= 10.0).await;
    assert_eq!(m["questd_sessions_live"], 1.0);
    assert_eq!(m["questd_sessions_created_total"], 1.0);
    assert_eq!(m["questd_connections{role=\"player\"}"], 1.0);
    assert_eq!(m["questd_connections{role=\"spectator\"}"], 1.0);
    assert_eq!(m["questd_turns_started_total"], 1.0);
    assert_eq!(m["questd_turns_completed_total"], 1.0);
    assert_eq!(m["questd_tool_duration_seconds_count"], 1.0);
    assert_eq!(m["questd_turn_duration_seconds_count"], 1.0);
    assert_eq!(m["questd_turn_overhead_seconds_count"], 1.0);
    assert!(
        m["questd_turn_overhead_seconds_sum"]
            <= m["questd_turn_duration_seconds_sum"] - m["questd_model_call_duration_seconds_sum"]
                + 1e-6
    );
    assert_eq!(
        m["questd_model_call_duration_seconds_count"], 2.0,
        "tool call, then narration"
    );
    assert!(
        m["questd_frames_sent_total"] >= 2.0 * 5.0,
        "each story frame to both"
    );
    assert!(m["questd_journal_commit_rows_count"] >= 1.0);
    assert!(m["questd_journal_commit_rows_sum"] >= 5.0);

    // A flood is rate limited and counted.
    for i in 0..10 {
        player.chat("hello", &format!("f-{i}")).await;
    }
    let mut limited = false;
    for _ in 0..40 {
        let f = player.next_json().await;
        if f["error_code"] == "RATE_LIMITED" {
            limited = true;
            break;
        }
    }
    assert!(limited);
    assert!(scrape(&app).await["questd_rate_limited_total"] >= 1.0);

    // Closed connections leave the gauges.
    player.close().await;
    spectator.close().await;
    let m = scrape_until(&app, |m| {
        m["questd_connections{role=\"player\"}"] == 0.0
            && m["questd_connections{role=\"spectator\"}"] == 0.0
    })
    .await;
    assert_eq!(m["questd_connections{role=\"player\"}"], 0.0);
    assert_eq!(m["questd_connections{role=\"spectator\"}"], 0.0);
}
