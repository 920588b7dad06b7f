//! The page as Lighthouse audits it, on its views (the lobby, a player's
//! game a few turns in, beside a person so that every quick command shows,
//! with a second player at the table so that the party shows, the page an
//! invite link opens, and the operator console asking for its key): full marks for
//! accessibility, best practices and SEO, no layout shift, every asset
//! compressed. Lighthouse is the pinned copy in `tools/lighthouse` (`npm ci`
//! there; `scripts/test` does it) driving the same headless Chromium as the
//! browser test. Its performance score depends on how busy the machine is,
//! so it is recorded with the reports
//! (`target/browser-artifacts/lighthouse-*.json`), not asserted.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use serde_json::{Value, json};

/// The pinned Lighthouse, or how to install it.
fn lighthouse() -> PathBuf {
    let bin =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/lighthouse/node_modules/.bin/lighthouse");
    assert!(
        bin.exists(),
        "Lighthouse is not installed: run `npm ci --prefix tools/lighthouse` (scripts/test does; \
         it needs Node.js 18 or newer)"
    );
    bin
}

/// The Chromium the browser test uses (`QUESTD_CHROMIUM`, or the usual
/// names on `PATH`).
fn chromium() -> PathBuf {
    crate::browser::find_program(
        "QUESTD_CHROMIUM",
        &["chromium", "chromium-browser", "google-chrome"],
    )
    .unwrap_or_else(|e| {
        panic!(
            "Chromium is missing: {e}; install it with `apt-get install -y chromium` \
                 (or set QUESTD_CHROMIUM to its path)"
        )
    })
}

/// Audits `url` and answers Lighthouse's report (also kept as `name`).
fn audit(url: &str, name: &str) -> Value {
    let out = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/browser-artifacts")
        .join(format!("lighthouse-{name}.json"));
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let status = Command::new(lighthouse())
        .arg(url)
        .args([
            "--quiet",
            "--chrome-flags=--headless=new --no-sandbox",
            "--output=json",
            "--only-categories=performance,accessibility,best-practices,seo",
        ])
        .arg(format!("--output-path={}", out.display()))
        .env("CHROME_PATH", chromium())
        .status()
        .expect("Lighthouse runs");
    assert!(status.success(), "Lighthouse failed on {url}: {status}");
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

/// The audits of a category that did not pass, by id, for the message.
fn failing(report: &Value, category: &str) -> Vec<String> {
    report["categories"][category]["auditRefs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["weight"].as_f64().unwrap_or(0.0) > 0.0)
        .filter_map(|r| {
            let id = r["id"].as_str()?;
            let score = report["audits"][id]["score"].as_f64()?;
            (score < 1.0).then(|| format!("{id} ({score})"))
        })
        .collect()
}

#[actix_web::test]
async fn every_view_has_full_marks_for_accessibility_and_best_practices() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/sessions", app.base);
    // The demo with its hero beside Old Maren, so that every quick command
    // shows, those that name her too.
    let mut campaign: Value =
        serde_json::from_str(include_str!("../../src/game/campaigns/demo.json")).unwrap();
    campaign["characters"][0]["area_id"] = json!("area_002");
    let (status, created) = post(&url, &json!({"campaign": campaign})).await;
    assert_eq!(status, 201, "{created}");
    let player_url = created["player_url"].as_str().unwrap().to_owned();
    // A story already under way, so the play view is audited with the
    // cards turns leave in it (tool calls, results, dice, narration).
    let token = created["player_token"].as_str().unwrap();
    for text in [
        "look around",
        "talk to Old Maren",
        "roll 1d20",
        "where can I go",
    ] {
        let body = json!({"session_id": created["session_id"], "message": text});
        let a = chat_over_http(&app.base, token, &body).await;
        assert_eq!(a.status, 200, "{text}: {}", a.body);
    }
    // A second player at the table (the party panel shows), and an invite
    // link not used yet (the join view).
    let session = created["session_id"].as_str().unwrap();
    let invites = format!("{}/api/v1/sessions/{session}/invites", app.base);
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let mut links = Vec::new();
    for _ in 0..2 {
        let invite = request("POST", &invites, &auth, Some(&json!({}))).await;
        assert_eq!(invite.status, 201, "{}", invite.body);
        links.push(invite.body);
    }
    let join = format!("{}/api/v1/sessions/{session}/join", app.base);
    let (status, joined) = post(
        &join,
        &json!({"invite_code": links[0]["invite_code"], "name": "Brin"}),
    )
    .await;
    assert_eq!(status, 201, "{joined}");
    let join_url = links[1]["join_url"].as_str().unwrap();
    let join_url = if join_url.starts_with('/') {
        format!("{}{join_url}", app.base)
    } else {
        join_url.to_owned()
    };
    let views = [
        ("lobby", format!("{}/", app.base)),
        ("play", player_url),
        ("join", join_url),
        ("admin", format!("{}/admin", app.base)),
    ];
    for (name, url) in views {
        // Lighthouse blocks for a while: off the test's runtime.
        let report = actix_web::rt::task::spawn_blocking(move || audit(&url, name))
            .await
            .unwrap();
        for category in ["accessibility", "best-practices", "seo"] {
            assert_eq!(
                report["categories"][category]["score"].as_f64(),
                Some(1.0),
                "{name}: {category} not at full marks: {:?}",
                failing(&report, category)
            );
        }
        let cls = report["audits"]["cumulative-layout-shift"]["numericValue"]
            .as_f64()
            .unwrap();
        assert!(
            cls <= 0.01,
            "{name}: the layout shifts while it loads (CLS {cls})"
        );
        assert_eq!(
            report["audits"]["uses-text-compression"]["score"].as_f64(),
            Some(1.0),
            "{name}: assets go out uncompressed: {}",
            report["audits"]["uses-text-compression"]["details"]
        );
    }
}
