//! The story as a reader sees it, in a real browser (the helpers of
//! `browser.rs`): the narrative first, what a turn's tools did as one quiet
//! line that opens into its cards from the keyboard, "show every detail"
//! remembered across a reload, and in Chinese a page that sends and shows
//! Chinese, with no id in the story.

use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{
    Browsers, ChromeDriver, click, count, query, say, screenshot, set_viewport, wait,
};
use crate::common::*;

/// Lets the newest turn finish rising into place before a picture.
async fn settle() {
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
}

/// The turns shown, as a reader sees each: the first text after the
/// player's own words (and its classes), whether any of its cards shows,
/// how many cards it has, and its summary line.
const TURNS: &str = "[...document.querySelectorAll('#live .turn.done')].map((turn) => {
    const shown = (e) => e.getClientRects().length > 0 && e.innerText.trim() !== '';
    const first = [...turn.children].find((e) => !e.classList.contains('msg') || !e.classList.contains('player') ? shown(e) : false);
    const summary = turn.querySelector('.tool-summary');
    return {
      first: first ? first.className : null,
      first_text: first ? first.innerText.slice(0, 80) : null,
      cards: turn.querySelectorAll('.tool').length,
      open_cards: [...turn.querySelectorAll('.tool')].filter((c) => c.getClientRects().length > 0).length,
      summary: summary ? summary.innerText : null,
      expanded: summary ? summary.getAttribute('aria-expanded') : null,
    };
  })";

/// Something that looks like an id (`area_002`, `npc_001`, `zone_1_0_0`,
/// `call_1`), a code such as `INVALID_ARGS` or an argument a reader has no
/// use for in the story's visible text, or null.
const ID_IN_STORY: &str = "(document.getElementById('timeline').innerText.match(\
    /\\b(area|npc|pc|zone|call|turn|sess)_[0-9a-z_]+|\\b[A-Z]+_[A-Z_]+\\b|\\blanguage\\b|\\bparent_area/) || [null])[0]";

/// The turns, once `n` of them are done.
async fn turns_when(c: &Client, page: &str, n: usize) -> Vec<Value> {
    let expr = format!("{} === {n} && {TURNS}", count("#live .turn.done"));
    let v = wait(c, page, &format!("{n} turns told"), &expr).await;
    v.as_array().unwrap().clone()
}

/// Each turn reads narrative first, and none of its cards is open.
fn assert_story_first(turns: &[Value]) {
    for turn in turns {
        let first = turn["first"].as_str().unwrap_or_default();
        assert!(first.contains("msg gm"), "the narrative first: {turn:#}");
        assert!(turn["cards"].as_u64().unwrap() > 0, "{turn:#}");
        assert_eq!(turn["open_cards"], 0, "no card open: {turn:#}");
        assert_eq!(turn["expanded"], "false", "{turn:#}");
    }
}

/// A browser on a new demo session's player page, 1280 x 900. The driver
/// is returned to be kept: dropping it ends the browser.
async fn demo_page(name: &str) -> (ChromeDriver, TestApp, Client) {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_offline(|s| s.chat_burst = 10).await;
    let s = app.demo().await;
    let page = driver.game(name, &app.base, &s).await;
    set_viewport(&page, 1280, 900).await;
    (driver, app, page)
}

/// Presses a key on the focused element.
async fn press(c: &Client, key: Key) {
    let focused = c.active_element().await.unwrap();
    focused.send_keys(&key).await.unwrap();
}

#[actix_web::test]
async fn the_story_comes_first_and_a_turn_s_tools_open_from_the_keyboard() {
    let (_driver, app, page) = demo_page("story").await;

    // ---- look around at the gate, walk to Old Maren by the map, talk to her
    say(&page, "look around").await;
    turns_when(&page, "story", 1).await;
    click(&page, "#map .area.reachable[data-area-id='area_002'] .node").await;
    let turns = turns_when(&page, "story", 2).await;
    // A map click asks by the place's name, in English here.
    let lines = "[...document.querySelectorAll('#live .msg.player .text')].map(m => m.innerText)";
    let typed = wait(&page, "story", "the player's lines", lines).await;
    assert_eq!(typed, json!(["look around", "go to Lamplighter's Alcove"]));
    // The move reads as an arrow from one place to the other.
    let moved = turns[1]["summary"].as_str().unwrap();
    assert!(
        moved.contains("Lantern Gate → Lamplighter's Alcove"),
        "{moved}"
    );
    say(&page, "talk to Old Maren").await;
    let turns = turns_when(&page, "story", 3).await;
    assert_story_first(&turns);
    let shown = page
        .execute(&format!("return {ID_IN_STORY};"), vec![])
        .await
        .unwrap();
    assert_eq!(shown, Value::Null, "no id in the story");
    settle().await;
    let play_png = screenshot(&page, "story-en-desktop.png").await;
    // The README's picture of play: a good moment, Old Maren's hint.
    if std::env::var_os("QUESTD_UPDATE_SCREENSHOTS").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/play.png");
        std::fs::copy(&play_png, docs).unwrap();
    }

    // ---- the chip row above the composer says that it scrolls, and stops
    // saying so at its end
    let cue = "(() => { const h = document.getElementById('hints'); \
               return {cut: h.scrollWidth > h.clientWidth + 2, \
               arrow: !document.getElementById('hints-more').hidden, \
               fade: h.parentNode.classList.contains('more')}; })()";
    let row = wait(&page, "story", "the chip row", cue).await;
    assert_eq!(row["cut"], true, "the row is cut off at 1280 px: {row}");
    assert_eq!(row["arrow"], true, "{row}");
    assert_eq!(row["fade"], true, "{row}");
    // The arrow is a button a keyboard reaches: it scrolls the row on.
    let arrow = page.find(Locator::Css("#hints-more")).await.unwrap();
    for _ in 0..6 {
        let hidden = page
            .execute(
                "return document.getElementById('hints-more').hidden;",
                vec![],
            )
            .await
            .unwrap();
        if hidden == true {
            break;
        }
        arrow.send_keys(&Key::Enter).await.ok();
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    let end = "(() => { const h = document.getElementById('hints'); \
               return document.getElementById('hints-more').hidden \
               && !h.parentNode.classList.contains('more') \
               && h.scrollLeft + h.clientWidth >= h.scrollWidth - 2; })()";
    wait(
        &page,
        "story",
        "the chip row at its end, without the cue",
        end,
    )
    .await;

    // ---- a summary line opens its cards and closes them from the keyboard
    let last = "[...document.querySelectorAll('#live .turn.done')].pop()";
    page.execute(
        &format!("{last}.querySelector('.tool-summary').focus(); return true;"),
        vec![],
    )
    .await
    .unwrap();
    let state = format!(
        "(() => {{ const turn = {last}; const b = turn.querySelector('.tool-summary'); \
         return {{focused: document.activeElement === b, expanded: b.getAttribute('aria-expanded'), \
         open: [...turn.querySelectorAll('.tool')].filter((c) => c.getClientRects().length > 0).length, \
         cards: turn.querySelectorAll('.tool').length, tag: b.tagName, \
         ring: getComputedStyle(b).outlineStyle}}; }})()"
    );
    for (key, expanded) in [
        (Key::Enter, true),
        (Key::Enter, false),
        (Key::Space, true),
        (Key::Space, false),
    ] {
        press(&page, key).await;
        let want = if expanded { "true" } else { "false" };
        let now = wait(
            &page,
            "story",
            "the cards after a key",
            &format!("{state}.expanded === '{want}' && {state}"),
        )
        .await;
        assert_eq!(now["tag"], "BUTTON", "{now}");
        assert_eq!(now["focused"], true, "the summary keeps the focus: {now}");
        assert_ne!(now["ring"], "none", "the focus shows: {now}");
        let open = now["open"].as_u64().unwrap();
        if expanded {
            assert_eq!(
                open,
                now["cards"].as_u64().unwrap(),
                "all its cards show: {now}"
            );
            settle().await;
            screenshot(&page, "story-en-open.png").await;
        } else {
            assert_eq!(open, 0, "its cards are hidden again: {now}");
        }
    }

    // ---- "show every detail" opens every card, and stays on after a reload
    click(&page, "#details").await;
    let all_open = format!(
        "{} > 0 && [...document.querySelectorAll('.tool')].every((c) => c.getClientRects().length > 0)",
        count("#live .tool")
    );
    wait(&page, "story", "every card open", &all_open).await;
    page.refresh().await.unwrap();
    wait(
        &page,
        "story",
        "the story again, every card open, the toggle on",
        &format!(
            "document.body.dataset.conn === 'live' && {} === 3 && document.getElementById('details').checked && {all_open}",
            count("#live .turn.done")
        ),
    )
    .await;
    click(&page, "#details").await;
    wait(
        &page,
        "story",
        "every card closed again",
        "[...document.querySelectorAll('.tool')].every((c) => c.getClientRects().length === 0)",
    )
    .await;

    // ---- the phone: the same story, narrative first
    set_viewport(&page, 390, 844).await;
    let turns = turns_when(&page, "phone", 3).await;
    assert_story_first(&turns);
    settle().await;
    screenshot(&page, "story-en-phone.png").await;

    page.close().await.unwrap();
    app.stop().await;
}

#[actix_web::test]
async fn in_chinese_the_page_sends_and_shows_chinese_and_no_id() {
    let (_driver, app, page) = demo_page("zh").await;
    click(&page, "#lang").await;
    wait(
        &page,
        "zh",
        "the Chinese page",
        "document.documentElement.lang === 'zh-CN'",
    )
    .await;

    // ---- the campaign's title and the hero's things by their Chinese names
    wait(
        &page,
        "zh",
        "the Chinese title in the header and the opening",
        "document.getElementById('session-title').textContent === '沉没的灯笼' \
         && document.title.startsWith('沉没的灯笼') \
         && document.querySelector('#opening h3').textContent === '沉没的灯笼'",
    )
    .await;
    let inventory = wait(
        &page,
        "zh",
        "the inventory in Chinese",
        "[...document.querySelectorAll('#inventory .item-name')].map(i => i.textContent)",
    )
    .await;
    assert_eq!(inventory, json!(["火把", "绳索（五十尺）", "治疗药水"]));

    // ---- a click on a place asks to go there in Chinese, by its Chinese name
    click(&page, "#map .area.reachable[data-area-id='area_002'] .node").await;
    let turns = turns_when(&page, "zh", 1).await;
    let said = wait(
        &page,
        "zh",
        "the player's line",
        "document.querySelector('#live .msg.player .text').innerText",
    )
    .await;
    assert_eq!(said, "去 点灯人小室");
    let moved = turns[0]["summary"].as_str().unwrap();
    assert!(moved.contains("灯笼门 → 点灯人小室"), "{moved}");
    // The game master's answer: no Latin letters but in ids.
    let answer = wait(
        &page,
        "zh",
        "the game master's answer",
        "[...document.querySelectorAll('#live .msg.gm')].pop().innerText",
    )
    .await;
    let answer = answer.as_str().unwrap();
    let latin: String = answer
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.contains('_'))
        .filter(|w| w.chars().any(|c| c.is_ascii_alphabetic()))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(latin.is_empty(), "Latin letters {latin:?} in {answer:?}");

    // ---- a quick command in Chinese: talk to Old Maren
    click(&page, "#hints button[data-hint='talk']").await;
    let turns = turns_when(&page, "zh", 2).await;
    assert_story_first(&turns);
    let lines = wait(
        &page,
        "zh",
        "the player's lines",
        "[...document.querySelectorAll('#live .msg.player .text')].map(m => m.innerText)",
    )
    .await;
    assert_eq!(lines, json!(["去 点灯人小室", "和老玛伦说话"]));
    for line in lines.as_array().unwrap() {
        let line = line.as_str().unwrap();
        assert!(
            !line.chars().any(|c| c.is_ascii_alphabetic()),
            "Latin letters in {line:?}"
        );
    }
    // No id anywhere in the story, cards opened or not.
    let shown = page
        .execute(&format!("return {ID_IN_STORY};"), vec![])
        .await
        .unwrap();
    assert_eq!(shown, Value::Null, "no id in the story");
    settle().await;
    screenshot(&page, "story-zh-desktop.png").await;
    click(&page, "#details").await;
    wait(
        &page,
        "zh",
        "every card open",
        &format!("{} && [...document.querySelectorAll('.tool')].every((c) => c.getClientRects().length > 0)", query("#live .tool")),
    )
    .await;
    let shown = page
        .execute(&format!("return {ID_IN_STORY};"), vec![])
        .await
        .unwrap();
    let text = page
        .execute(
            "return document.getElementById('timeline').innerText;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        shown,
        Value::Null,
        "no id in the open cards either: {}",
        text.as_str().unwrap()
    );
    settle().await;
    screenshot(&page, "story-zh-details.png").await;
    click(&page, "#details").await;

    // ---- the phone, in Chinese
    set_viewport(&page, 390, 844).await;
    let turns = turns_when(&page, "zh-phone", 2).await;
    assert_story_first(&turns);
    settle().await;
    screenshot(&page, "story-zh-phone.png").await;

    // ---- back in English, the summary lines and the cards say it in English
    click(&page, "#lang").await;
    wait(
        &page,
        "en-phone",
        "the summary lines in English",
        "document.querySelector('#live .tool-summary').innerText.includes(\"Lantern Gate → Lamplighter's Alcove\") \
         && document.querySelector('#live .tool-summary .sum-more').textContent === 'details'",
    )
    .await;
    // The move's card, drawn in Chinese, names its places in English now.
    wait(
        &page,
        "en-phone",
        "the move's card in English",
        "document.querySelector(\"#live .tool[data-tool='move'] [data-view]\").textContent.includes(\"Lamplighter's Alcove\") \
         && !/[\\u4e00-\\u9fff]/.test(document.querySelector(\"#live .tool[data-tool='move'] [data-view]\").textContent)",
    )
    .await;

    page.close().await.unwrap();
    app.stop().await;
}

/// A world turn (a timer came due) reads as the event it is, with no
/// player's bubble, and its narration after it; while it waits, the hero
/// sheet counts it.
#[actix_web::test]
async fn a_world_turn_reads_as_its_event_not_as_anyones_words() {
    let (_driver, _app, page) = demo_page("world").await;
    say(&page, "remind me in 5 seconds to check the door").await;
    turns_when(&page, "world", 1).await;
    wait(
        &page,
        "world",
        "one pending event on the sheet",
        "document.getElementById('timers-line').dataset.count === '1' && !document.getElementById('timers-line').hidden",
    )
    .await;
    let world = wait(
        &page,
        "world",
        "the world turn told",
        "(() => { const t = document.querySelector('#live .turn.world.done'); \
         return t && t.querySelector('.msg.gm') && {event: t.querySelector('.world-event').innerText, \
         players: t.querySelectorAll('.msg.player').length, told: t.querySelector('.msg.gm').innerText}; })()",
    )
    .await;
    assert!(
        world["event"].as_str().unwrap().contains("A reminder"),
        "{world}"
    );
    assert_eq!(world["players"], 0, "no one's words: {world}");
    assert!(
        world["told"].as_str().unwrap().contains("check the door"),
        "{world}"
    );
    wait(
        &page,
        "world",
        "no pending event any more",
        "document.getElementById('timers-line').hidden",
    )
    .await;
    let shown = page
        .execute(&format!("return {ID_IN_STORY};"), vec![])
        .await
        .unwrap();
    assert_eq!(shown, Value::Null, "no id in the story");
}
