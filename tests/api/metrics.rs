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

/// The metric families `/metrics` serves: name -> type, from its `# TYPE`
/// lines (a family is listed even before anything is counted in it).
async fn families(app: &impl Api) -> HashMap<String, String> {
    let mut resp = client()
        .get(format!("{}/metrics", app.base()))
        .send()
        .await
        .unwrap();
    let body = resp.body().await.unwrap();
    std::str::from_utf8(&body)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_owned(), kind.to_owned())
        })
        .collect()
}

/// Every `questd_…` name in `text`, as written (a histogram's series keep
/// their `_bucket`, `_sum` or `_count`).
fn questd_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("questd_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // `questd_` inside a longer word (e.g. a job label) is not a metric.
        let word_start = at == 0 || !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric());
        if word_start {
            names.push(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The family a series name belongs to: itself, or a histogram's name
/// without `_bucket`/`_sum`/`_count`.
fn family_of<'a>(name: &'a str, families: &HashMap<String, String>) -> Option<&'a str> {
    if families.contains_key(name) {
        return Some(name);
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        (families.get(base).map(String::as_str) == Some("histogram")).then_some(base)
    })
}

#[actix_web::test]
async fn the_dashboard_and_the_alert_rules_name_only_metrics_questd_serves() {
    let app = spawn_app().await;
    let families = families(&app).await;
    assert!(families.len() >= 20, "{families:?}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana");

    // The dashboard: Grafana JSON whose every query is PromQL over questd's
    // metrics, on the data source the importer picks.
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("questd.json")).unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "questd-overview");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{panel}");
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            assert!(!questd_names(expr).is_empty(), "{expr}");
            exprs.push(expr.to_owned());
        }
    }
    let mut shown = std::collections::HashSet::new();
    for name in exprs.iter().flat_map(|e| questd_names(e)) {
        let family = family_of(&name, &families)
            .unwrap_or_else(|| panic!("the dashboard names {name}, which /metrics does not serve"));
        shown.insert(family.to_owned());
    }
    // And it shows every family, so a new metric gets a panel.
    let mut unshown: Vec<_> = families.keys().filter(|f| !shown.contains(*f)).collect();
    unshown.sort();
    assert!(unshown.is_empty(), "no panel shows {unshown:?}");

    // The alert rules: every rule has an expression, and every questd_
    // name in them is served.
    let rules = std::fs::read_to_string(dir.join("questd-alerts.yml")).unwrap();
    let alerts = rules.matches("- alert: ").count();
    assert!(alerts >= 5, "{alerts} rules");
    assert_eq!(rules.matches("\n        expr: ").count(), alerts);
    let named = questd_names(&rules);
    assert!(named.len() >= alerts - 1, "{named:?}");
    for name in named {
        assert!(
            family_of(&name, &families).is_some(),
            "the alert rules name {name}, which /metrics does not serve"
        );
    }
}
