//! A save in a real browser (the helpers of `browser.rs`): the player's
//! page downloads its session as a save file (a spectator's page offers
//! none); the lobby refuses a save that was tampered with, listing its
//! problems, and continues the downloaded one as a new session, whose page
//! shows the same story and hero and plays on.

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{Browsers, ChromeDriver, click, count, query, say, screenshot, wait};
use crate::common::*;

/// The finished turns as the story shows them: the player's words and the
/// game master's.
const STORY: &str = "[...document.querySelectorAll('#live .turn.done')].map((t) => \
     [t.querySelector('.msg.player .text').innerText, t.querySelector('.msg.gm').innerText])";

/// The hero's sheet as the player sees it.
const SHEET: &str = "({hp: document.getElementById('hp').dataset.hp, \
     max_hp: document.getElementById('hp').dataset.maxHp, \
     area: document.getElementById('char-area').innerText, \
     inventory: document.getElementById('inventory').innerText, \
     name: document.getElementById('char-name').innerText})";

/// Waits for `n` finished turns on the page.
async fn turns_done(page: &Client, name: &str, n: usize) {
    let expr = format!("{} === {n}", count("#live .turn.done"));
    wait(page, name, &format!("{n} finished turns"), &expr).await;
}

/// The value of a JavaScript expression on the page now.
async fn read(page: &Client, expr: &str) -> Value {
    page.execute(&format!("return {expr};"), vec![])
        .await
        .unwrap()
}

/// Chooses `path` in the lobby's save input and presses its button.
async fn continue_from(lobby: &Client, path: &std::path::Path) {
    let input = lobby.find(Locator::Css("#import-file")).await.unwrap();
    // A file input keeps the file chosen before: cleared, it holds this one only.
    input.clear().await.unwrap();
    input.send_keys(path.to_str().unwrap()).await.unwrap();
    click(lobby, "#import-go").await;
}

#[actix_web::test]
async fn a_player_downloads_a_save_and_the_lobby_continues_it_as_a_new_session() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_offline(|s| s.chat_burst = 10).await;
    let files = tempfile::tempdir().unwrap();
    let s = app.demo().await;
    let play = driver.game("save-play", &app.base, &s).await;

    // ---- two turns: the hero takes the lamp and walks to the Alcove
    say(&play, "pick up the lantern").await;
    turns_done(&play, "save-play", 1).await;
    say(&play, "go to Lamplighter's Alcove").await;
    turns_done(&play, "save-play", 2).await;
    let story = wait(&play, "save-play", "the story", STORY).await;
    let sheet = wait(
        &play,
        "save-play",
        "the hero at the Alcove with the lamp",
        &format!(
            "(() => {{ const s = {SHEET}; return s.area.includes(\"Lamplighter's Alcove\") \
             && s.inventory.includes('Green-Glass Lamp') ? s : null; }})()"
        ),
    )
    .await;

    // ---- Download save: the page clicks a link to the save's Blob, named
    // after the session. Headless Chromium's downloads are not read here:
    // the link is recorded instead of followed, and the Blob behind it kept
    // as the page makes its URL (the page's CSP lets nothing fetch a blob:).
    play.execute(
        "window.downloads = []; window.blobs = new Map(); \
         const made = URL.createObjectURL; \
         URL.createObjectURL = (blob) => { const url = made(blob); window.blobs.set(url, blob); return url; }; \
         HTMLAnchorElement.prototype.click = function () { \
         window.downloads.push({name: this.download, href: this.href}); };",
        vec![],
    )
    .await
    .unwrap();
    wait(
        &play,
        "save-play",
        "the save control",
        "!document.getElementById('save').hidden",
    )
    .await;
    click(&play, "#save").await;
    let link = wait(
        &play,
        "save-play",
        "the download",
        "window.downloads.length && window.downloads[0]",
    )
    .await;
    assert_eq!(
        link["name"],
        format!("questd-save-{}.json", s.session_id),
        "{link}"
    );
    let text = play
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             window.blobs.get(arguments[0]).text().then(done, (e) => done('failed: ' + e));",
            vec![link["href"].clone()],
        )
        .await
        .unwrap();
    let text = text.as_str().unwrap().to_owned();
    let save: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(save["source"]["session_id"], s.session_id.as_str());
    assert!(
        !text.contains(&s.player_token) && !text.contains(&s.spectator_token),
        "no token in the save"
    );
    let good = files.path().join("save.json");
    std::fs::write(&good, &text).unwrap();

    // ---- a spectator's page offers no save
    let watch = driver.browser("save-watch", 1280, 860).await;
    watch
        .goto(&format!(
            "{}/?session={}&token={}",
            app.base, s.session_id, s.spectator_token
        ))
        .await
        .unwrap();
    wait(
        &watch,
        "save-watch",
        "the spectator's page connected",
        "document.body.dataset.conn === 'live' && document.body.dataset.role === 'spectator'",
    )
    .await;
    assert_eq!(
        read(&watch, "document.getElementById('save').hidden").await,
        true
    );
    watch.close().await.unwrap();

    // ---- the lobby, in a browser of its own: a tampered save is refused
    // with its problems listed
    let lobby = driver.browser("save-lobby", 1280, 860).await;
    lobby.goto(&app.base).await.unwrap();
    wait(
        &lobby,
        "save-lobby",
        "the lobby",
        "!document.getElementById('lobby').hidden",
    )
    .await;
    // Every text of the page has both languages.
    let untranslated = lobby
        .execute(
            "const {en, zh} = window.I18N; \
             return [...Object.keys(en).filter((k) => !(k in zh)), ...Object.keys(zh).filter((k) => !(k in en))];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(untranslated, json!([]));
    let mut tampered = save.clone();
    for c in tampered["state"]["characters"].as_array_mut().unwrap() {
        if c["character_id"] == "pc_001" {
            c["hp"] = json!(c["max_hp"].as_i64().unwrap() + 50);
        }
    }
    let bad = files.path().join("tampered.json");
    std::fs::write(&bad, tampered.to_string()).unwrap();
    continue_from(&lobby, &bad).await;
    let problems = wait(
        &lobby,
        "save-lobby",
        "the save's problems",
        "!document.getElementById('import-error').hidden \
         && [...document.querySelectorAll('#import-error li')].map((li) => li.innerText)",
    )
    .await;
    assert!(
        problems.to_string().to_lowercase().contains("hp"),
        "{problems}"
    );
    assert_eq!(
        read(&lobby, "document.getElementById('created').hidden").await,
        true
    );
    screenshot(&lobby, "save-refused.png").await;

    // ---- the downloaded save continues as a new, listed session
    click(&lobby, "#public").await;
    continue_from(&lobby, &good).await;
    let player_link = wait(
        &lobby,
        "save-lobby",
        "the new session's links",
        "!document.getElementById('created').hidden && document.getElementById('import-error').hidden \
         && document.getElementById('player-link-text').value",
    )
    .await;
    let player_link = player_link.as_str().unwrap().to_owned();
    let new_id = query_param(&player_link, "session");
    assert_ne!(new_id, s.session_id);
    wait(
        &lobby,
        "save-lobby",
        "the new session listed, with its Resume link",
        &query(&format!(
            "#sessions [data-session-id='{new_id}'] a.button.primary"
        )),
    )
    .await;
    screenshot(&lobby, "save-lobby.png").await;

    // ---- its page shows the same story and hero, and plays on
    lobby.goto(&player_link).await.unwrap();
    wait(
        &lobby,
        "save-continued",
        "the continued session connected",
        "document.body.dataset.conn === 'live'",
    )
    .await;
    turns_done(&lobby, "save-continued", 2).await;
    assert_eq!(
        wait(&lobby, "save-continued", "the story", STORY).await,
        story
    );
    assert_eq!(
        wait(&lobby, "save-continued", "the sheet", SHEET).await,
        sheet
    );
    assert_eq!(
        read(&lobby, "!document.getElementById('save').hidden").await,
        true
    );
    say(&lobby, "where can I go").await;
    turns_done(&lobby, "save-continued", 3).await;
    screenshot(&lobby, "save-continued.png").await;
    // The original session did not move.
    assert_eq!(wait(&play, "save-play", "the story", STORY).await, story);
}

/// A query parameter of an absolute URL.
fn query_param(url: &str, name: &str) -> String {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}
