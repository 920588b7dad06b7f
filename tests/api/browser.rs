//! The browser client in a real browser: headless Chromium from the
//! distribution's packages, driven over WebDriver (`chromedriver`) against
//! the real server and its real page.
//!
//! Chromium and ChromeDriver must be installed (Debian: `apt-get install -y
//! chromium chromium-driver`); without them the test fails and says so, it
//! is never skipped. `QUESTD_CHROMIUM` and `QUESTD_CHROMEDRIVER` name other
//! binaries. Screenshots go to `<target>/browser-artifacts/`; with
//! `QUESTD_UPDATE_SCREENSHOTS=1` the story test (`browser_story`) also
//! writes its play view to `docs/play.png` for the README.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use questd::llm::OfflineGameMaster;
use serde_json::{Value, json};

/// How long the page may take to show anything the test waits for.
const PAGE_WAIT: Duration = Duration::from_secs(20);
/// Direct tool calls (two story frames each) that make the session longer
/// than the 512 frames the server replays from the start.
const LONG_SESSION_CALLS: usize = 256;
/// Flags Chromium needs on this machine kind (no network, no sandbox, no GPU).
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--lang=en-US",
];

/// The Chromium and ChromeDriver binaries, or a message that says how to get them.
pub(crate) struct Browsers {
    chromium: PathBuf,
    chromedriver: PathBuf,
}

impl Browsers {
    pub(crate) fn find() -> Result<Self, String> {
        let chromium = find_program(
            "QUESTD_CHROMIUM",
            &["chromium", "chromium-browser", "google-chrome"],
        );
        let chromedriver = find_program("QUESTD_CHROMEDRIVER", &["chromedriver"]);
        match (chromium, chromedriver) {
            (Ok(chromium), Ok(chromedriver)) => Ok(Self {
                chromium,
                chromedriver,
            }),
            (a, b) => {
                let missing: Vec<String> = [a.err(), b.err()].into_iter().flatten().collect();
                Err(format!(
                    "the browser tests need Chromium and ChromeDriver; {}. \
                     Install them with `apt-get install -y chromium chromium-driver` \
                     (or set QUESTD_CHROMIUM / QUESTD_CHROMEDRIVER to their paths)",
                    missing.join("; ")
                ))
            }
        }
    }
}

/// The program named by `env`, or the first of `names` found on PATH.
pub(crate) fn find_program(env: &str, names: &[&str]) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{env}={} is not a file", path.display()))
        };
    }
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("none of {names:?} is on PATH"))
}

/// A chromedriver process on a free local port. It leads its own process
/// group, which the browsers it starts join; dropping it kills the group, so
/// no browser outlives the test, even a failed one.
pub(crate) struct ChromeDriver {
    child: Child,
    url: String,
    chromium: PathBuf,
    /// One fresh profile per browser, removed with the driver.
    profiles: tempfile::TempDir,
}

impl ChromeDriver {
    pub(crate) async fn start(browsers: &Browsers) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(artifacts().join("chromedriver.log")).unwrap();
        let child = Command::new(&browsers.chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", browsers.chromedriver.display()));
        let driver = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            chromium: browsers.chromium.clone(),
            profiles: tempfile::tempdir().unwrap(),
        };
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let (status, body) = get_quietly(&format!("{}/status", driver.url)).await;
            if status == 200 && body["value"]["ready"] == true {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready; see {}",
                artifacts().join("chromedriver.log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A new browser (named `name`, 1280×860) on the game page of a session,
    /// once the page's connection is live.
    pub(crate) async fn game(&self, name: &str, base: &str, session: &Session) -> Client {
        let page = self.browser(name, 1280, 860).await;
        page.goto(&format!(
            "{base}/?session={}&token={}",
            session.session_id, session.player_token
        ))
        .await
        .unwrap();
        wait(
            &page,
            name,
            "the game page connected",
            "document.body.dataset.conn === 'live'",
        )
        .await;
        page
    }

    /// A new browser with its own empty profile (a separate browser context).
    pub(crate) async fn browser(&self, name: &str, width: u32, height: u32) -> Client {
        let profile = self.profiles.path().join(name);
        std::fs::create_dir_all(&profile).unwrap();
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={width},{height}"));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": self.chromium, "args": args}),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("chromium does not start through chromedriver: {e}"));
        set_viewport(&client, width, height).await;
        client
    }
}

/// Sizes the window so the page itself is `width` x `height` pixels.
pub(crate) async fn set_viewport(c: &Client, width: u32, height: u32) {
    c.set_window_size(width, height).await.unwrap();
    let inner = c
        .execute("return [window.innerWidth, window.innerHeight];", vec![])
        .await
        .unwrap();
    let extra = |i: usize, want: u32| want.saturating_sub(inner[i].as_u64().unwrap_or(0) as u32);
    c.set_window_size(width + extra(0, width), height + extra(1, height))
        .await
        .unwrap();
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET that reports a refused connection as status 0.
async fn get_quietly(url: &str) -> (u16, Value) {
    match client().get(url).send().await {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let body = resp.body().await.unwrap_or_default();
            (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// Where screenshots and the driver log go: `<target>/browser-artifacts`.
fn artifacts() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("browser-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn screenshot(c: &Client, name: &str) -> PathBuf {
    let png = c.screenshot().await.unwrap();
    let path = artifacts().join(name);
    std::fs::write(&path, png).unwrap();
    path
}

/// Waits for the same thing on the player's page and the spectator's.
async fn wait_both(player: &Client, spectator: &Client, what: &str, expr: &str) {
    for (page, c) in [("play", player), ("spectator", spectator)] {
        wait(c, page, what, expr).await;
    }
}

/// Waits until the JavaScript expression is truthy and returns its value.
/// On timeout saves `failed-<page>.png` and fails with what the page shows.
pub(crate) async fn wait(c: &Client, page: &str, what: &str, expr: &str) -> Value {
    let script = format!("return (function() {{ return {expr}; }})() || null;");
    let deadline = Instant::now() + PAGE_WAIT;
    loop {
        let v = c.execute(&script, vec![]).await.unwrap();
        if !v.is_null() && v != false {
            return v;
        }
        if Instant::now() > deadline {
            let shot = screenshot(c, &format!("failed-{page}.png")).await;
            let state = c
                .execute(
                    "return {conn: document.body.dataset.conn, seq: document.body.dataset.lastSeq, \
                     notices: document.getElementById('notices').innerText, \
                     outbox: document.getElementById('outbox').innerText, \
                     story: document.getElementById('timeline').innerText.slice(-1500)};",
                    vec![],
                )
                .await
                .unwrap_or(Value::Null);
            panic!(
                "{page}: waited {PAGE_WAIT:?} for {what} ({expr}); screenshot {}; page: {state:#}",
                shot.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Types a line into the chat box and presses Enter.
pub(crate) async fn say(c: &Client, text: &str) {
    let input = c.find(Locator::Css("#chat-input")).await.unwrap();
    let line: String = text + &Key::Enter;
    input.send_keys(&line).await.unwrap();
}

/// Clicks the element matching the selector. The page may draw the element
/// again between finding and clicking it (the map redraws when the
/// snapshot or the language changes): a stale element is found again.
pub(crate) async fn click(c: &Client, css: &str) {
    for _ in 0..5 {
        match c.find(Locator::Css(css)).await.unwrap().click().await {
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference => {}
            done => return done.unwrap(),
        }
    }
    panic!("{css} was drawn again five times before it could be clicked");
}

/// Count of elements matching a selector, as a JavaScript expression.
pub(crate) fn count(css: &str) -> String {
    format!("document.querySelectorAll({}).length", json!(css))
}

/// A JavaScript expression: the element matching the selector.
pub(crate) fn query(css: &str) -> String {
    format!("document.querySelector({})", json!(css))
}

/// The strings of a JSON array read from the page.
fn texts(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("an array: {v}"))
        .iter()
        .map(|t| t.as_str().unwrap_or_default())
        .collect()
}

/// Waits until the newest areas have faded in and are drawn as usual.
async fn wait_map_at_rest(c: &Client, page: &str) {
    let expr = format!("{} === 0", count("#map .area.new"));
    wait(c, page, "the map at rest", &expr).await;
}

/// The story timeline shows its last line.
const STORY_AT_END: &str = "(() => { const t = document.getElementById('timeline'); \
     return t.scrollHeight - t.scrollTop - t.clientHeight < 2; })()";

/// Where the page's map puts the active character.
fn on_map(area_id: &str) -> String {
    format!(
        "{} && {}",
        query(&format!("#map .area.current[data-area-id='{area_id}']")),
        query(&format!("#map .token[data-area-id='{area_id}']"))
    )
}

/// Runs a tool in the session as another service would (a direct call, seen
/// by every page of the session as a `tool_call` and a `tool_result`).
pub(crate) async fn direct_call(
    app: &TestApp,
    session_id: &str,
    tool: &str,
    input: Value,
) -> Value {
    let mut resp = client()
        .post(format!("{}/api/v1/tools/call", app.base))
        .insert_header(("X-Internal-API-Key", TEST_KEY))
        .insert_header(("X-Tenant-ID", "default"))
        .insert_header(("X-Site-ID", "browser-test"))
        .insert_header(("X-Trace-ID", "browser-test"))
        .insert_header(("X-Session-ID", session_id))
        .send_json(&json!({"tool_name": tool, "input": input}))
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["success"], true, "{tool}: {body}");
    body
}

/// The tools of the session's applied-actions log, oldest first.
async fn action_tools(app: &TestApp, session_id: &str, token: &str) -> Vec<String> {
    let (status, body) = get(
        &format!(
            "{}/api/v1/sessions/{session_id}/actions?limit=1000",
            app.base
        ),
        Some(token),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["tool"].as_str().map(str::to_owned))
        .collect()
}

#[actix_web::test]
async fn play_spectate_and_reconnect_in_a_real_browser() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let began = Instant::now();
    let driver = ChromeDriver::start(&browsers).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    // A larger burst than the default so the turns before the restart never
    // wait on the rate limit; the restarted server has a burst of 1 to show
    // the rate-limit notice and the automatic resend.
    let app = spawn_in(
        dir.clone(),
        |s| s.chat_burst = 10,
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let port = app.port;

    // ---- the lobby starts a public session and lists it with a Watch link
    // (sessions are private unless the player lists them)
    let player = driver.browser("player", 1280, 860).await;
    player.goto(&app.base).await.unwrap();
    wait(
        &player,
        "lobby",
        "the demo campaign",
        &query("[data-campaign-id='demo'] button.start"),
    )
    .await;
    // In Chinese the lobby names the campaign by its Chinese title.
    let title = "document.querySelector(\"[data-campaign-id='demo'] h3\").textContent";
    click(&player, "#lang").await;
    wait(
        &player,
        "lobby",
        "the Chinese title",
        &format!("{title} === '沉没的灯笼'"),
    )
    .await;
    click(&player, "#lang").await;
    wait(
        &player,
        "lobby",
        "the English title",
        &format!("{title} === 'The Drowned Lanterns'"),
    )
    .await;
    click(&player, "#public").await;
    click(&player, "[data-campaign-id='demo'] button.start").await;
    let links = wait(
        &player,
        "lobby",
        "the player and spectator links",
        "(() => { const p = document.getElementById('player-link-text').value; \
         const s = document.getElementById('spectator-link-text').value; \
         return p && s ? [p, s] : null; })()",
    )
    .await;
    let player_link = links[0].as_str().unwrap().to_owned();
    let spectator_link = links[1].as_str().unwrap().to_owned();
    assert!(player_link.starts_with(&app.base), "{player_link}");
    let session_id = player_link
        .split("session=")
        .nth(1)
        .and_then(|s| s.split('&').next())
        .unwrap()
        .to_owned();
    let player_token = player_link.split("token=").nth(1).unwrap().to_owned();
    let watch = wait(
        &player,
        "lobby",
        "the new session in the live list",
        &format!(
            "{q} && {q}.querySelector('a.watch').href",
            q = query(&format!("[data-session-id='{session_id}']"))
        ),
    )
    .await;
    assert_eq!(watch.as_str(), Some(spectator_link.as_str()));
    screenshot(&player, "lobby.png").await;

    // ---- the player enters: the opening scene and the map
    click(&player, "#player-link").await;
    wait(
        &player,
        "play",
        "the live map and the opening scene",
        &format!(
            "document.body.dataset.conn === 'live' && {} && {}",
            on_map("area_001"),
            query("#opening .opening")
        ),
    )
    .await;

    // Nobody stands at the gate: the quick commands offer looking and
    // taking, no one to talk to or attack.
    let hints = "[...document.querySelectorAll('#hints button.hint')].map(b => b.innerText)";
    let at_gate = wait(
        &player,
        "play",
        "the quick commands at the gate",
        &format!("{} === 1 && {hints}", count("#hints [data-hint='look']")),
    )
    .await;
    assert_eq!(texts(&at_gate)[..2], ["Look around", "Take…"], "{at_gate}");
    assert!(!at_gate.to_string().contains("Talk to"), "{at_gate}");

    // ---- go to a neighbour: tool card with its arguments, narrative, map
    say(&player, "go to area_002").await;
    let move_card = ".tool[data-tool='move'][data-status='ok']";
    let turn_one = format!(
        "{} && [...document.querySelectorAll('.msg.gm')].some(m => m.innerText.includes(\"Lamplighter's Alcove\")) && {}",
        query(move_card),
        on_map("area_002")
    );
    wait(
        &player,
        "play",
        "the move card, the narrative and the new position",
        &turn_one,
    )
    .await;
    let args = wait(
        &player,
        "play",
        "the move arguments",
        &format!("{}.innerText", query(&format!("{move_card} .chips"))),
    )
    .await;
    // Arguments name places by their names, not their ids.
    let args = args.as_str().unwrap();
    assert!(args.contains("Lamplighter's Alcove"), "{args}");
    assert!(!args.contains("area_002"), "{args}");

    // ---- the quick commands name Old Maren, who stands here, in the
    // page's language; an attack waits in the input to be confirmed, and
    // "take" for the player's words: neither is sent
    let with_maren = |talk: &str| format!("{hints}.includes({}) && {hints}", json!(talk));
    let languages = [
        [
            "Look around",
            "Talk to Old Maren",
            "Take…",
            "Attack Old Maren…",
        ],
        ["看看", "和老玛伦说话", "拿…", "攻击老玛伦…"],
    ];
    for (i, want) in languages.iter().enumerate() {
        if i > 0 {
            click(&player, "#lang").await;
        }
        let what = format!("the quick commands beside Old Maren, {}", want[0]);
        let shown = wait(&player, "play", &what, &with_maren(want[1])).await;
        assert_eq!(texts(&shown)[..4], *want, "{shown}");
    }
    click(&player, "#lang").await;
    let what = "the quick commands in English again";
    wait(&player, "play", what, &with_maren(languages[0][1])).await;
    let input = "document.getElementById('chat-input')";
    for (hint, typed) in [("attack", "attack Old Maren"), ("take", "take ")] {
        click(&player, &format!("#hints button[data-hint='{hint}']")).await;
        wait(
            &player,
            "play",
            "the command in the input",
            &format!("{input}.value === {}", json!(typed)),
        )
        .await;
        player
            .execute(&format!("{input}.value = ''; return true;"), vec![])
            .await
            .unwrap();
    }

    // ---- a second browser joins mid-game as a spectator: it sees the turn
    // already played and the map as it is now, read-only (and reads Chinese)
    let spectator = driver.browser("spectator", 1280, 860).await;
    spectator.goto(&spectator_link).await.unwrap();
    wait(
        &spectator,
        "spectator",
        "the read-only live view with the story so far",
        &format!(
            "document.body.dataset.conn === 'live' && document.body.dataset.role === 'spectator' \
             && !document.getElementById('badge').hidden && document.getElementById('composer').hidden \
             && {turn_one}"
        ),
    )
    .await;
    let label = |id: &str| {
        format!(
            "{q} && {q}.textContent",
            q = query(&format!("#map .labels text[data-for='{id}']"))
        )
    };
    // Both pages name the places in English, until the spectator reads Chinese.
    for (page, c) in [("play", &player), ("spectator", &spectator)] {
        let name = wait(c, page, "the map's labels", &label("area_002")).await;
        assert_eq!(name, "Lamplighter's Alcove", "{page}");
    }
    click(&spectator, "#lang").await;
    wait(
        &spectator,
        "spectator",
        "the Chinese interface",
        "document.documentElement.lang === 'zh-CN' && document.getElementById('badge').innerText.includes('观战')",
    )
    .await;
    // The campaign's Chinese names, at once, on the map and beside it.
    wait(
        &spectator,
        "spectator",
        "the Chinese names of the places",
        &format!(
            "{} === '点灯人小室' && document.getElementById('map-place').textContent === '点灯人小室' \
             && {}.textContent.startsWith('灯笼门 (area_001)')",
            label("area_002"),
            query("#map .area[data-area-id='area_001'] > title")
        ),
    )
    .await;
    wait(
        &player,
        "play",
        "the viewer count",
        &query("#presence[data-spectators='1'][data-players='1']"),
    )
    .await;

    // ---- dice drawn as dice with the total, arriving on both pages
    say(&player, "roll 2d6+1").await;
    wait_both(
        &player,
        &spectator,
        "two dice and a total",
        &format!(
            "{} === 2 && {}",
            count(".tool[data-tool='roll_dice'][data-status='ok'] .die"),
            query(".tool[data-tool='roll_dice'] .total[data-total]")
        ),
    )
    .await;

    // ---- a click on a reachable place asks to go there, by its name
    click(
        &player,
        "#map .area.reachable[data-area-id='area_004'] .node",
    )
    .await;
    wait_both(
        &player,
        &spectator,
        "the move by map click",
        &on_map("area_004"),
    )
    .await;

    // ---- new areas appear on both maps
    say(&player, "explore crystal caves").await;
    wait_both(
        &player,
        &spectator,
        "six new areas on the map",
        &format!(
            "{} && {} === 15",
            query(".tool[data-tool='map_generate'][data-status='ok']"),
            count("#map .area")
        ),
    )
    .await;

    // ---- Chinese in, Chinese out
    say(&player, "掷 1d20").await;
    wait_both(&player, &spectator, "the Chinese turn",
            &format!(
                "{} === 2 && [...document.querySelectorAll('.msg.player .text')].some(m => m.innerText === '掷 1d20') \
                 && /[\\u4e00-\\u9fff]/.test([...document.querySelectorAll('.msg.gm')].pop().innerText)",
                count(".tool[data-tool='roll_dice'][data-status='ok']")
            )).await;

    // ---- a zone of the open world shows under World
    say(&player, "scout misty marsh").await;
    wait_both(
        &player,
        &spectator,
        "the World switch",
        &format!(
            "{} && !document.getElementById('map-switch').hidden",
            query(".tool[data-tool='generate_zone'][data-status='ok']")
        ),
    )
    .await;
    click(&player, "#map-switch button[data-view='world']").await;
    wait(
        &player,
        "play",
        "the zone on the world map",
        &format!(
            "getComputedStyle(document.getElementById('world')).display !== 'none' \
             && getComputedStyle(document.getElementById('map')).display === 'none' && {} === 1",
            count("#world .zone")
        ),
    )
    .await;
    screenshot(&player, "world.png").await;
    click(&player, "#map-switch button[data-view='areas']").await;
    wait(
        &player,
        "play",
        "the area map again",
        "getComputedStyle(document.getElementById('map')).display !== 'none'",
    )
    .await;

    // ---- a refused move says in words what went wrong, and the story goes on
    say(&player, "go to area_009").await;
    let failed =
        ".tool[data-tool='move'][data-status='error'][data-error-code='INVALID_ARGS'] .tool-fail";
    wait_both(
        &player,
        &spectator,
        "the failed move's summary",
        &format!("{} && {}", query(failed), on_map("area_004")),
    )
    .await;
    // In the reader's language: the spectator reads Chinese.
    let last_failed =
        "[...document.querySelectorAll('.tool-summary.has-failed')].pop().textContent";
    for (page, c, words) in [
        ("play", &player, "That way is not open from here."),
        ("spectator", &spectator, "此路不通。"),
    ] {
        let summary = wait(c, page, "the failed move's summary line", last_failed).await;
        assert!(
            summary.as_str().unwrap().contains(words),
            "{page}: {summary}"
        );
        let card = wait(
            c,
            page,
            "the failed move's card",
            &format!("{}.textContent", query(failed)),
        )
        .await;
        assert_eq!(card, words, "{page}");
    }

    // ---- damage from elsewhere: the HP bar moves on the card and the sheet
    direct_call(
        &app,
        &session_id,
        "hp_delta",
        json!({"target_character_id": "pc_001", "delta": -5, "cause": "a falling lantern"}),
    )
    .await;
    wait_both(
        &player,
        &spectator,
        "the HP change",
        &format!(
            "{} && {}",
            query(".turn.direct .tool[data-tool='hp_delta'][data-status='ok'] .hpbar .hp-fill"),
            query("#hp[data-hp='7'][data-max-hp='12']")
        ),
    )
    .await;
    // Told as a heart with the change, the card closed behind it.
    let direct = wait(
        &player,
        "play",
        "the direct action's summary line",
        &format!(
            "{}.innerText",
            query(".turn.direct .tool-summary[aria-expanded='false']")
        ),
    )
    .await;
    assert!(direct.as_str().unwrap().contains("−5"), "{direct}");

    // Pictures once the token has stopped and the new areas are drawn as usual.
    wait_map_at_rest(&player, "play").await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    wait_both(
        &player,
        &spectator,
        "the story scrolled to its end",
        STORY_AT_END,
    )
    .await;
    screenshot(&player, "play.png").await;
    screenshot(&spectator, "spectator.png").await;

    // ---- the server goes away: both pages say they are reconnecting
    app.handle.stop(false).await;
    wait_both(&player, &spectator, "the reconnecting state",
            "document.body.dataset.conn === 'reconnecting' && !document.getElementById('banner').hidden").await;
    // A message typed while offline waits in the outbox.
    say(&player, "where can I go").await;
    wait(
        &player,
        "play",
        "the queued message",
        &query("#outbox .msg.pending[data-state='waiting']"),
    )
    .await;

    // ---- the same server again, on the same port and database
    let app = spawn_in(
        dir.clone(),
        |s| {
            s.bind = format!("127.0.0.1:{port}");
            s.chat_burst = 1;
            s.service_burst = 1000;
            s.service_per_minute = 60_000;
            // The long session below is made of direct calls, as fast as
            // a service may send them.
            s.calls_burst = 1000;
            s.calls_per_minute = 60_000;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let options_card = ".tool[data-tool='move_options'][data-status='ok']";
    wait_both(
        &player,
        &spectator,
        "the reconnect and the queued message's turn",
        &format!(
            "document.body.dataset.conn === 'live' && {} === 1 && {} === 0",
            count(options_card),
            count("#outbox > *")
        ),
    )
    .await;

    // ---- two turns after the reconnect, typed in one go: the page sends the
    // second as soon as the first is accepted, which with a burst of 1 meets
    // the rate limit; that shows as a notice, and the message goes out again
    // by itself (same request_id), still after the first
    say(&player, &format!("go to area_002{}roll 1d6", Key::Enter)).await;
    wait(
        &player,
        "play",
        "the rate-limit notice",
        &query(".notice[data-code='RATE_LIMITED']"),
    )
    .await;
    wait_both(
        &player,
        &spectator,
        "the turns after the reconnect",
        &format!(
            "{} && {} === 3 && {} === 0",
            on_map("area_002"),
            count(".tool[data-tool='roll_dice'][data-status='ok']"),
            count("#outbox > *")
        ),
    )
    .await;

    // Each message ran exactly once, in the order typed, and both pages hold
    // the same story.
    assert_eq!(
        action_tools(&app, &session_id, &player_token).await,
        [
            "move",
            "roll_dice",
            "move",
            "map_generate",
            "roll_dice",
            "generate_zone",
            "hp_delta",
            "move_options",
            "move",
            "roll_dice"
        ]
    );
    let typed = json!([
        "go to area_002",
        "roll 2d6+1",
        "go to Hall of Wicks",
        "explore crystal caves",
        "掷 1d20",
        "scout misty marsh",
        "go to area_009",
        "where can I go",
        "go to area_002",
        "roll 1d6"
    ]);
    for (page, c) in [("play", &player), ("spectator", &spectator)] {
        let texts = wait(
            c,
            page,
            "the player lines",
            "[...document.querySelectorAll('#live .msg.player .text')].map(m => m.innerText)",
        )
        .await;
        assert_eq!(texts, typed, "{page}");
    }
    let seq_of = |c: &Client| {
        let c = c.clone();
        async move {
            c.execute("return Number(document.body.dataset.lastSeq);", vec![])
                .await
                .unwrap()
        }
    };
    let deadline = Instant::now() + PAGE_WAIT;
    while seq_of(&player).await != seq_of(&spectator).await {
        assert!(Instant::now() < deadline, "both pages reach the same seq");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // ---- the play view on a phone
    set_viewport(&player, 390, 844).await;
    wait(
        &player,
        "phone",
        "the tab bar of the narrow layout",
        "getComputedStyle(document.querySelector('.tabs')).display === 'flex'",
    )
    .await;
    wait(
        &player,
        "phone",
        "the story scrolled to its end",
        STORY_AT_END,
    )
    .await;
    screenshot(&player, "phone.png").await;
    click(&player, ".tabs button[data-tab='map']").await;
    wait(
        &player,
        "phone",
        "the map tab",
        &format!(
            "getComputedStyle(document.querySelector('.mapcard')).display !== 'none' \
             && getComputedStyle(document.querySelector('.story')).display === 'none' && {}",
            on_map("area_002")
        ),
    )
    .await;
    screenshot(&player, "phone-map.png").await;
    click(&player, ".tabs button[data-tab='story']").await;

    // ---- a long session (more frames than the server's resume ring): a
    // late viewer gets the whole story, read from the journal
    for _ in 0..LONG_SESSION_CALLS / 16 {
        let calls = (0..16).map(|_| {
            direct_call(
                &app,
                &session_id,
                "roll_dice",
                json!({"dice": "1d6", "reason": "luck"}),
            )
        });
        futures_util::future::join_all(calls).await;
    }
    let late = driver.browser("late", 1280, 860).await;
    late.goto(&spectator_link).await.unwrap();
    wait(
        &late,
        "late",
        "the whole story of a long session",
        &format!(
            "document.body.dataset.conn === 'live' && {} >= {LONG_SESSION_CALLS} && {} && {}",
            count(".tool[data-tool='roll_dice'][data-status='ok']"),
            on_map("area_002"),
            // The story from its start, so its opening scene too.
            query("#opening .opening")
        ),
    )
    .await;
    // A turn's state_patch moves the world map by itself: the zone it
    // brings is drawn, with the player in it.
    late.execute(
        "handleFrame({type: 'turn_completed', seq: Number(document.body.dataset.lastSeq) + 1, \
         turn_id: 'turn_patched', reply: '', tool_events: [], state_patch: {areas: [], characters: [], \
         position: null, zones: [{zone_id: 'zone_5_5_0', name: 'Patched Fen', description: '', \
         x: 5, y: 5, z: 0, tags: [], world_prompt: 'fen'}], zone_position: {x: 5, y: 5, z: 0, \
         zone_id: 'zone_5_5_0'}}}); return true;",
        vec![],
    )
    .await
    .unwrap();
    wait(
        &late,
        "late",
        "the zone the patch brought, where the player stands",
        &query("#world .zone.current[data-zone-id='zone_5_5_0']"),
    )
    .await;
    // A link to no session says so instead of retrying forever.
    late.goto(&format!("{}/?session=sess_nothing&token=nothing", app.base))
        .await
        .unwrap();
    wait(
        &late,
        "late",
        "the bad-link message",
        "!document.getElementById('fatal').hidden && document.body.dataset.conn === 'closed'",
    )
    .await;
    late.close().await.unwrap();

    player.close().await.unwrap();
    spectator.close().await.unwrap();
    app.stop().await;
    eprintln!(
        "browser test took {:.1} s; screenshots in {}",
        began.elapsed().as_secs_f64(),
        artifacts().display()
    );
}

/// What the area map shows, read from the page: every place's circle, name
/// (from its tooltip) and, for a generated place, its group and short name;
/// every text on the map (a place's name or number, or a group's label);
/// the key of numbered places with the count over it; and the map's frame
/// (`frame`: the part of it the reader sees, in page pixels). Boxes are
/// `[left, top, right, bottom]`. Null until the labels are laid out for the
/// frame's scroll position and size.
const MAP_LAYOUT: &str = "(() => {
    const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
    const map = document.getElementById('map');
    const wrap = map.parentNode;
    const at = [wrap.scrollLeft, wrap.scrollTop, wrap.clientWidth, wrap.clientHeight].map(Math.round).join(',');
    if (map.dataset.labelledAt !== at) return null;
    const w = wrap.getBoundingClientRect();
    const left = w.left + wrap.clientLeft, top = w.top + wrap.clientTop;
    const key = document.getElementById('map-key');
    const count = document.getElementById('map-key-count');
    return {
      areas: [...map.querySelectorAll('.area')].map((g) => ({
        id: g.dataset.areaId,
        cls: g.getAttribute('class'),
        name: g.querySelector(':scope > title').textContent.split(' (' + g.dataset.areaId + ')')[0],
        group: g.dataset.group || null,
        short: g.dataset.short || null,
        box: box(g.querySelector('.node')),
      })),
      texts: [...map.querySelectorAll('.labels text')].map((t) => ({
        id: t.dataset.for || null, group: t.dataset.group || null, num: t.classList.contains('num'),
        kind: t.getAttribute('class'), text: t.textContent, box: box(t),
      })),
      key: [...key.querySelectorAll('li')].map((li) => ({
        id: li.dataset.for,
        text: li.textContent,
        shown: !key.hidden && li.getBoundingClientRect().height > 0,
      })),
      key_box: {
        shown: !key.hidden, scrolls: key.scrollHeight > key.clientHeight + 1, tabindex: key.tabIndex,
        count: count.hidden ? null : count.textContent, count_box: box(count),
      },
      frame: [left, top, left + wrap.clientWidth, top + wrap.clientHeight],
    };
  })()";

fn rect(v: &Value) -> [f64; 4] {
    let n = |i: usize| v[i].as_f64().unwrap();
    [n(0), n(1), n(2), n(3)]
}

/// Boxes that share more than a hair (half a pixel) of area.
fn intersect(a: [f64; 4], b: [f64; 4]) -> bool {
    const HAIR: f64 = 0.5;
    a[0] + HAIR < b[2] && b[0] + HAIR < a[2] && a[1] + HAIR < b[3] && b[1] + HAIR < a[3]
}

/// Whether `inner` lies inside `outer`, give or take half a pixel.
fn within(inner: [f64; 4], outer: [f64; 4]) -> bool {
    inner[0] >= outer[0] - 0.5
        && inner[1] >= outer[1] - 0.5
        && inner[2] <= outer[2] + 0.5
        && inner[3] <= outer[3] + 0.5
}

/// What a map shows, counted by [`check_map`].
#[derive(Debug)]
struct MapCounts {
    /// Places named on the map (in full or by their short names).
    named: usize,
    /// Places shown by their numbers.
    numbered: usize,
    /// Group labels.
    groups: usize,
}

/// Checks the readable-map rules on a layout read with [`MAP_LAYOUT`]:
/// every text (a name, a number, a group's label) inside the map's frame,
/// none over another text or another place; the hero's place named in full;
/// every place whose circle the frame shows named (in full, or by its short
/// name under its group's label), or numbered and listed in the key, or, on
/// the `whole` map, left to its group's label; a key that scrolls saying how
/// many of its places it shows.
fn check_map(layout: &Value, page: &str, whole: bool) -> MapCounts {
    let areas = layout["areas"].as_array().unwrap();
    let texts = layout["texts"].as_array().unwrap();
    let key = layout["key"].as_array().unwrap();
    let frame = rect(&layout["frame"]);
    assert!(areas.len() > 9, "{page}: the explored map: {layout}");
    let groups: Vec<&str> = texts.iter().filter_map(|t| t["group"].as_str()).collect();
    let mut counts = MapCounts {
        named: 0,
        numbered: 0,
        groups: groups.len(),
    };
    for t in texts {
        assert!(
            within(rect(&t["box"]), frame),
            "{page}: {} at {} is not inside the map's frame {frame:?}",
            t["text"],
            t["box"]
        );
    }
    for a in areas {
        let (id, name) = (a["id"].as_str().unwrap(), a["name"].as_str().unwrap());
        let current = a["cls"].as_str().unwrap().contains("current");
        let mine: Vec<&Value> = texts.iter().filter(|t| t["id"] == id).collect();
        assert!(
            mine.len() <= 1,
            "{page}: one text for {id} ({name}): {mine:?}"
        );
        // Well inside: a circle at the very edge may be left unnamed.
        let inner = [
            frame[0] + 1.0,
            frame[1] + 1.0,
            frame[2] - 1.0,
            frame[3] - 1.0,
        ];
        let in_frame = within(rect(&a["box"]), inner);
        let Some(t) = mine.first() else {
            let left_to_group = whole && a["group"].as_str().is_some_and(|g| groups.contains(&g));
            assert!(
                !in_frame || left_to_group,
                "{page}: {id} ({name}) is on the map without a name or number"
            );
            assert!(
                !current,
                "{page}: the hero's place {id} is named on the map"
            );
            continue;
        };
        if t["num"] == false {
            let text = t["text"].as_str().unwrap();
            let short = a["short"].as_str().filter(|_| !current);
            let under_group = a["group"].as_str().is_some_and(|g| groups.contains(&g));
            assert!(
                text == name || (under_group && Some(text) == short),
                "{page}: {id} is named in full ({name:?}) or by its short name {short:?} \
                 under its group's label: {text:?}"
            );
            counts.named += 1;
            continue;
        }
        assert!(
            !current,
            "{page}: the hero's place is named on the map; {id} is numbered"
        );
        counts.numbered += 1;
        let number = t["text"].as_str().unwrap();
        let entry = key.iter().find(|k| k["id"] == id);
        let entry = entry.unwrap_or_else(|| panic!("{page}: {id} is numbered but not in the key"));
        assert_eq!(
            entry["text"].as_str().unwrap(),
            format!("{number} {name}"),
            "{page}: the key names {id}"
        );
        assert_eq!(entry["shown"], true, "{page}: the key is shown");
    }
    for (i, a) in texts.iter().enumerate() {
        for b in &texts[i + 1..] {
            assert!(
                !intersect(rect(&a["box"]), rect(&b["box"])),
                "{page}: {} and {} overlap: {a} {b}",
                a["text"],
                b["text"]
            );
        }
        for n in areas.iter().filter(|n| n["id"] != a["id"]) {
            assert!(
                !intersect(rect(&a["box"]), rect(&n["box"])),
                "{page}: {} covers the place {}: {a} {n}",
                a["text"],
                n["id"]
            );
        }
    }
    assert!(
        texts
            .iter()
            .any(|t| t["kind"].as_str().unwrap().contains("current")),
        "{page}: the hero's place is in view and named: {texts:?}"
    );
    let key_box = &layout["key_box"];
    if counts.numbered > 0 {
        assert_eq!(key_box["shown"], true, "{page}: {key_box}");
        assert_eq!(key_box["tabindex"], 0, "{page}: the key is reached by Tab");
        let count = key_box["count"].as_str().unwrap_or_default();
        let total = counts.numbered.to_string();
        assert!(count.contains(&total), "{page}: the key's count {count:?}");
        if key_box["scrolls"] == true {
            // "10 of 29" / "10/29": it shows fewer than it holds.
            let shown: usize = count
                .split(|c: char| !c.is_ascii_digit())
                .find(|n| !n.is_empty())
                .and_then(|n| n.parse().ok())
                .unwrap();
            assert!(
                shown > 0 && shown < counts.numbered,
                "{page}: the count says the key scrolls: {count:?}"
            );
        }
    }
    counts
}

/// Explores each theme from where the hero stands (six new areas each)
/// and waits for the new places on the map, which held `before`.
async fn explore(page: &Client, name: &str, verb: &str, themes: &[&str], before: usize) -> usize {
    for (i, theme) in themes.iter().enumerate() {
        say(page, &format!("{verb} {theme}")).await;
        wait(
            page,
            name,
            "six more areas on the map",
            &format!("{} === {}", count("#map .area"), before + 6 * (i + 1)),
        )
        .await;
    }
    before + 6 * themes.len()
}

/// The phone's map tab, at a readable scale (centred on the hero).
async fn phone_map(page: &Client, name: &str, hero_at: &str) {
    set_viewport(page, 390, 844).await;
    wait(
        page,
        name,
        "the tab bar of the narrow layout",
        "getComputedStyle(document.querySelector('.tabs')).display === 'flex'",
    )
    .await;
    click(page, ".tabs button[data-tab='map']").await;
    wait(
        page,
        name,
        "the map tab",
        &format!(
            "getComputedStyle(document.querySelector('.mapcard')).display !== 'none' && {}",
            on_map(hero_at)
        ),
    )
    .await;
}

#[actix_web::test]
async fn the_map_stays_readable_after_many_explores() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_offline(|s| s.chat_burst = 10).await;
    let session = app.demo().await;
    let page = driver.game("explorer", &app.base, &session).await;
    set_viewport(&page, 1280, 900).await;
    wait(&page, "desktop", "the live map", &on_map("area_001")).await;

    // Seven explores from one place (six new areas each), then a step and
    // one more: the crowd of new places around the hero is the hard case.
    let themes = [
        "crystal caves",
        "sunken bridge",
        "ember forge",
        "whispering reeds",
        "old watchtower",
        "salt mines",
        "drowned chapel",
    ];
    let n = explore(&page, "desktop", "explore", &themes, 9).await;
    say(&page, "go to area_002").await;
    wait(&page, "desktop", "the step", &on_map("area_002")).await;
    explore(&page, "desktop", "explore", &["lantern halls"], n).await;
    wait_map_at_rest(&page, "desktop").await;
    let desktop = wait(&page, "desktop", "the map's layout", MAP_LAYOUT).await;
    screenshot(&page, "map-desktop.png").await;
    let counts = check_map(&desktop, "desktop", false);
    assert!(
        counts.groups > 0,
        "desktop: groups are labelled: {counts:?}"
    );

    // ---- on a phone the map scrolls at a readable scale, centred on the hero
    phone_map(&page, "phone", "area_002").await;
    let phone = wait(&page, "phone", "the map's layout", MAP_LAYOUT).await;
    screenshot(&page, "map-phone.png").await;
    let zoomed = check_map(&phone, "phone", false);
    assert!(zoomed.groups > 0, "phone: groups are labelled: {zoomed:?}");

    // The whole map, fitted to the screen: its groups, the hero's place and
    // more places named than numbered.
    click(&page, "#map-fit").await;
    let fitted = "(() => { const w = document.getElementById('map').parentNode; \
         return w.scrollWidth <= w.clientWidth && w.scrollHeight <= w.clientHeight \
         && document.getElementById('map-fit').disabled; })()";
    wait(&page, "phone", "the whole map", fitted).await;
    let whole = wait(&page, "phone", "the whole map's layout", MAP_LAYOUT).await;
    screenshot(&page, "map-phone-whole.png").await;
    let counts = check_map(&whole, "phone, whole map", true);
    assert!(
        counts.groups >= themes.len() && counts.named + counts.groups > counts.numbered,
        "the whole map names its groups and more than it numbers: {counts:?}"
    );

    // Zoomed in, the map scrolls within its frame, every label still inside it.
    click(&page, "#map-zoom-in").await;
    click(&page, "#map-zoom-in").await;
    wait(
        &page,
        "phone",
        "the zoomed map",
        "(() => { const w = document.getElementById('map').parentNode; \
         return w.scrollWidth > w.clientWidth * 1.5 && !document.getElementById('map-fit').disabled; })()",
    )
    .await;
    let zoomed = wait(&page, "phone", "the zoomed layout", MAP_LAYOUT).await;
    check_map(&zoomed, "phone, zoomed", false);
    // Scrolled to a corner, the labels follow the frame.
    page.execute(
        "const w = document.getElementById('map').parentNode; w.scrollLeft = 0; w.scrollTop = 0;",
        vec![],
    )
    .await
    .unwrap();
    let corner = wait(&page, "phone", "the scrolled layout", MAP_LAYOUT).await;
    let texts = corner["texts"].as_array().unwrap();
    let frame = rect(&corner["frame"]);
    for t in texts {
        assert!(
            within(rect(&t["box"]), frame),
            "phone, scrolled: {t} is inside the frame {frame:?}"
        );
    }
    click(&page, "#map-fit").await;
    wait(&page, "phone", "the whole map again", fitted).await;
    page.close().await.unwrap();

    // ---- in Chinese: places generated on Chinese themes, grouped the same way
    let session = app.demo().await;
    let page = driver.game("explorer-zh", &app.base, &session).await;
    click(&page, "#lang").await;
    wait(
        &page,
        "zh desktop",
        "the Chinese interface",
        "document.documentElement.lang === 'zh-CN'",
    )
    .await;
    set_viewport(&page, 1280, 900).await;
    let zh_themes = [
        "水晶洞穴",
        "沉没石桥",
        "余烬熔炉",
        "低语芦苇",
        "古老哨塔",
        "盐矿",
        "淹没教堂",
        "灯笼长廊",
    ];
    explore(&page, "zh desktop", "探索", &zh_themes, 9).await;
    wait_map_at_rest(&page, "zh desktop").await;
    let desktop = wait(&page, "zh desktop", "the map's layout", MAP_LAYOUT).await;
    screenshot(&page, "map-desktop-zh.png").await;
    let counts = check_map(&desktop, "zh desktop", false);
    assert!(counts.groups > 0, "zh desktop: {counts:?}");
    phone_map(&page, "zh phone", "area_001").await;
    let phone = wait(&page, "zh phone", "the map's layout", MAP_LAYOUT).await;
    screenshot(&page, "map-phone-zh.png").await;
    let counts = check_map(&phone, "zh phone", false);
    assert!(counts.groups > 0, "zh phone: {counts:?}");
    for t in phone["texts"].as_array().unwrap() {
        let text = t["text"].as_str().unwrap();
        assert!(
            !text.chars().any(|c| c.is_ascii_alphabetic()),
            "zh phone: the map speaks Chinese: {text:?}"
        );
    }

    page.close().await.unwrap();
    app.stop().await;
}

#[test]
fn a_missing_program_is_named_in_the_failure() {
    let err = find_program(
        "QUESTD_TEST_NO_SUCH_BROWSER_VAR",
        &["questd-no-such-browser"],
    )
    .err()
    .unwrap();
    assert!(err.contains("questd-no-such-browser"), "{err}");
}

#[actix_web::test]
async fn a_message_still_waiting_at_a_reload_is_sent_again_and_runs_once() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let model = crate::turns::GatedModel { gate: gate.clone() };
    let app = spawn_with(|s| s.chat_burst = 10, Arc::new(model)).await;
    let s = app.demo().await;
    let page = driver.game("reload", &app.base, &s).await;
    let lines =
        "[...document.querySelectorAll('#live .msg.player .text')].map(m => m.innerText).join('|')";

    // The first message's turn starts and waits for the model; the second
    // is accepted behind it.
    say(&page, "first").await;
    wait(
        &page,
        "reload",
        "the first turn started",
        &format!("{lines} === 'first' && {} === 0", count("#outbox > *")),
    )
    .await;
    say(&page, "second").await;
    wait(
        &page,
        "reload",
        "the second message accepted",
        &query("#outbox .msg.pending[data-state='accepted']"),
    )
    .await;

    // After a reload the page still owes it: shown waiting, sent again.
    page.refresh().await.unwrap();
    wait(
        &page,
        "reload",
        "the message still owed after the reload",
        &format!(
            "document.body.dataset.conn === 'live' && {lines} === 'first' \
             && {q} && {q}.querySelector('.text').innerText === 'second'",
            q = query("#outbox .msg.pending")
        ),
    )
    .await;

    // Both turns end; the second ran once.
    gate.add_permits(2);
    wait(
        &page,
        "reload",
        "both turns done",
        &format!(
            "{lines} === 'first|second' && {} === 0 && {} === 2",
            count("#outbox > *"),
            count("#live .turn.done")
        ),
    )
    .await;
    let snapshot = format!(
        "{}/api/v1/sessions/{}?token={}",
        app.base, s.session_id, s.player_token
    );
    let (status, state) = get(&snapshot, None).await;
    assert_eq!((status, &state["turn"]), (200, &json!(2)), "{state}");
    page.close().await.unwrap();
    app.stop().await;
}
