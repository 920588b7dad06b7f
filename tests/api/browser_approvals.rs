//! A call that waits for a person's decision, in a real browser (the
//! helpers of `browser.rs`): the player's page shows it as a card in the
//! story, with the call in words, Approve / Deny and the time left; a
//! spectator's page shows the same card without buttons; both in English
//! and in Chinese; approving it runs the call and the turn goes on.

use fantoccini::Client;
use serde_json::{Value, json};

use crate::browser::{Browsers, ChromeDriver, click, count, query, say, screenshot, wait};
use crate::common::*;

/// The approval card as a reader sees it: its state, title, what the call
/// would do, the time left, the waiting line, its outcome and its buttons.
const CARD: &str = "(() => { const c = document.querySelector('#live .approval'); if (!c) return null; \
    const text = (css) => { const e = c.querySelector(css); return e ? e.innerText : null; }; \
    return {state: c.dataset.state, title: text('.approval-title'), tool: text('.tool-name'), \
    what: text('.approval-what'), left: text('.approval-left'), waiting: text('.approval-waiting'), \
    outcome: text('.approval-outcome'), \
    buttons: [...c.querySelectorAll('button')].map((b) => b.innerText)}; })()";

/// The card once `cond` (a JavaScript condition on `card`) holds.
async fn card_when(page: &Client, name: &str, what: &str, cond: &str) -> Value {
    let expr =
        format!("(() => {{ const card = {CARD}; return card && ({cond}) ? card : null; }})()");
    wait(page, name, what, &expr).await
}

/// A page on the session for this token, once its connection is live.
async fn open(
    driver: &ChromeDriver,
    name: &str,
    app: &TestApp,
    s: &Session,
    token: &str,
) -> Client {
    let page = driver.browser(name, 1280, 900).await;
    page.goto(&format!(
        "{}/?session={}&token={token}",
        app.base, s.session_id
    ))
    .await
    .unwrap();
    wait(
        &page,
        name,
        "the page connected",
        "document.body.dataset.conn === 'live'",
    )
    .await;
    page
}

/// Switches the page's language and waits for it.
async fn switch_to(page: &Client, name: &str, lang: &str) {
    click(page, "#lang").await;
    wait(
        page,
        name,
        "the page in the other language",
        &format!("document.documentElement.lang === '{lang}'"),
    )
    .await;
}

#[actix_web::test]
async fn a_call_waiting_for_approval_is_a_card_its_speaker_approves_and_spectators_watch() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_offline(|_| {}).await;
    let s = app
        .create_session(json!({"campaign_id": "demo", "approval": {"tools": ["add_inventory"]}}))
        .await;
    let play = open(&driver, "approve-play", &app, &s, &s.player_token).await;
    let watch = open(&driver, "approve-watch", &app, &s, &s.spectator_token).await;

    // ---- the player takes the lamp: the turn stops at a card with its
    // two buttons and the time left
    say(&play, "take the lamp").await;
    let card = card_when(
        &play,
        "approve-play",
        "the approval card with its buttons",
        "card.state === 'waiting' && card.buttons.length === 2 && /\\d+:\\d\\d left/.test(card.left)",
    )
    .await;
    assert_eq!(card["title"], "Approval needed", "{card:#}");
    assert_eq!(card["tool"], "add_inventory", "{card:#}");
    assert_eq!(
        card["what"], "Ayla Brightwater takes Green-Glass Lamp ×1",
        "{card:#}"
    );
    assert_eq!(card["buttons"], json!(["Approve", "Deny"]), "{card:#}");
    // The time left counts down from the rule's default, ten minutes.
    let left = card["left"].as_str().unwrap();
    assert!(
        left.starts_with("10:00") || left.starts_with("9:"),
        "{card:#}"
    );
    let ended = play
        .execute(&format!("return {};", count("#live .turn.done")), vec![])
        .await
        .unwrap();
    assert_eq!(ended, json!(0), "the turn waits for the decision");
    screenshot(&play, "approval-en-player.png").await;

    // ---- the spectator sees the same card, read only
    let seen = card_when(
        &watch,
        "approve-watch",
        "the card on the spectator's page",
        "card.state === 'waiting'",
    )
    .await;
    assert_eq!(
        seen["buttons"],
        json!([]),
        "no buttons for a spectator: {seen:#}"
    );
    assert_eq!(
        seen["waiting"], "waiting for a decision from Ayla Brightwater",
        "{seen:#}"
    );
    assert_eq!(seen["what"], card["what"], "{seen:#}");
    assert!(seen["left"].as_str().unwrap().ends_with("left"), "{seen:#}");

    // ---- in Chinese: the same cards, in Chinese names and words
    switch_to(&watch, "approve-watch", "zh-CN").await;
    let zh = card_when(
        &watch,
        "approve-watch",
        "the spectator's card in Chinese",
        "card.title === '需要批准'",
    )
    .await;
    assert_eq!(zh["what"], "艾拉·明水拿起绿玻璃灯 ×1", "{zh:#}");
    assert_eq!(zh["waiting"], "等待艾拉·明水决定", "{zh:#}");
    assert!(zh["left"].as_str().unwrap().starts_with("剩余 "), "{zh:#}");
    switch_to(&play, "approve-play", "zh-CN").await;
    let zh = card_when(
        &play,
        "approve-play",
        "the player's card in Chinese",
        "card.title === '需要批准'",
    )
    .await;
    assert_eq!(zh["buttons"], json!(["批准", "拒绝"]), "{zh:#}");
    screenshot(&play, "approval-zh-player.png").await;
    switch_to(&play, "approve-play", "en").await;

    // ---- approved: the lamp is taken, and the turn tells it
    click(&play, "#live .approval button.approve").await;
    let done = card_when(
        &play,
        "approve-play",
        "the card telling the approval",
        "card.state === 'approve'",
    )
    .await;
    assert_eq!(done["outcome"], "Approved by Ayla Brightwater", "{done:#}");
    assert_eq!(done["buttons"], json!([]), "{done:#}");
    let reply = wait(
        &play,
        "approve-play",
        "the turn's reply",
        &format!(
            "{} === 1 && {}.innerText",
            count("#live .turn.done"),
            query("#live .turn.done .msg.gm")
        ),
    )
    .await;
    assert!(
        reply.as_str().unwrap().contains("Green-Glass Lamp"),
        "{reply}"
    );
    let summary = wait(
        &play,
        "approve-play",
        "the taking in the turn's summary",
        &format!("{}.innerText", query("#live .turn.done .tool-summary")),
    )
    .await;
    assert!(
        summary.as_str().unwrap().contains("+ Green-Glass Lamp"),
        "{summary}"
    );
    let snapshot = app.snapshot(&s).await;
    let hero = snapshot["characters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["character_id"] == snapshot["active_actor_id"])
        .unwrap();
    assert!(
        hero["inventory"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["slug"] == "green_glass_lamp"),
        "{hero:#}"
    );
    // The spectator, in Chinese, sees who approved it.
    let told = card_when(
        &watch,
        "approve-watch",
        "the spectator's card telling the approval",
        "card.state === 'approve'",
    )
    .await;
    assert_eq!(told["outcome"], "艾拉·明水已批准", "{told:#}");
    screenshot(&watch, "approval-zh-spectator.png").await;

    play.close().await.unwrap();
    watch.close().await.unwrap();
    app.stop().await;
}
