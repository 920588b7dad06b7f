//! A party at one table in real browsers (the helpers of `browser.rs`):
//! the host makes an invite link, two players in browsers of their own
//! (separate profiles, so separate storage) open it, give names and join;
//! the seat list shows who is online, each turn names its speaker, table
//! talk stays in its own pane, a round shows every seat's action, and a
//! removed player's page says so. Then the seat list and the invite flow on
//! a phone, in Chinese.

use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{
    Browsers, ChromeDriver, click, count, query, say, screenshot, set_viewport, wait,
};
use crate::common::*;

/// The seats shown as online.
const ONLINE: &str = "#seats .seat[data-online='true']";

/// The host makes an invite on its page and returns the link it shows.
async fn invite_link(host: &Client, page: &str, base: &str) -> String {
    wait(
        host,
        page,
        "the invite control",
        "!document.getElementById('invite').hidden",
    )
    .await;
    click(host, "#invite").await;
    let link = wait(
        host,
        page,
        "the invite link",
        "!document.getElementById('invite-box').hidden && document.getElementById('invite-link').value",
    )
    .await;
    let link = link.as_str().unwrap().to_owned();
    assert!(
        link.starts_with(base),
        "an absolute link to this server: {link}"
    );
    click(host, "#invite-close").await;
    link
}

/// A new browser opens the invite link, gives `name` and joins; returns
/// once its game page is connected as that seat.
async fn join(
    driver: &ChromeDriver,
    page: &str,
    link: &str,
    name: &str,
    size: (u32, u32),
) -> Client {
    let c = driver.browser(page, size.0, size.1).await;
    c.goto(link).await.unwrap();
    wait(
        &c,
        page,
        "the join form",
        "!document.getElementById('join').hidden",
    )
    .await;
    join_as(&c, page, name).await;
    c
}

async fn join_as(c: &Client, page: &str, name: &str) {
    let input = c.find(Locator::Css("#join-name")).await.unwrap();
    input
        .send_keys(&(name.to_owned() + &Key::Enter))
        .await
        .unwrap();
    wait(
        c,
        page,
        "the game page connected as a seat of its own",
        "document.body.dataset.conn === 'live' && document.body.dataset.seat \
         && document.body.dataset.seat !== 'seat_1'",
    )
    .await;
}

/// The speakers of the finished turns, as the story names them.
fn speakers() -> String {
    "[...document.querySelectorAll('#live .turn.done .msg.player:not(.round) .who')].map((w) => w.textContent)"
        .to_owned()
}

/// Types into the table talk box and presses Enter.
async fn talk(c: &Client, text: &str) {
    let input = c.find(Locator::Css("#say-input")).await.unwrap();
    input
        .send_keys(&(text.to_owned() + &Key::Enter))
        .await
        .unwrap();
}

#[actix_web::test]
async fn three_players_play_one_session_from_three_browsers() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_offline(|s| s.chat_burst = 10).await;
    let s = app.demo().await;
    let host = driver.game("party-host", &app.base, &s).await;

    // ---- two players join by invite links the host makes (one use each)
    let link = invite_link(&host, "party-host", &app.base).await;
    let brin = join(&driver, "party-brin", &link, "Brin", (1280, 860)).await;
    let link = invite_link(&host, "party-host", &app.base).await;
    let cora = join(&driver, "party-cora", &link, "Cora", (1280, 860)).await;
    let pages = [
        ("party-host", &host),
        ("party-brin", &brin),
        ("party-cora", &cora),
    ];
    for (name, page) in pages {
        wait(
            page,
            name,
            "three seats online",
            &format!("{} === 3", count(ONLINE)),
        )
        .await;
    }
    let host_name = wait(
        &host,
        "party-host",
        "the host in the seat list",
        "document.querySelector(\"#seats .seat[data-role='host'] .seat-name\").innerText",
    )
    .await;
    let host_name = host_name.as_str().unwrap().to_owned();
    let seat_names = wait(
        &brin,
        "party-brin",
        "every name in the seat list",
        "[...document.querySelectorAll('#seats .seat-name')].map((n) => n.innerText)",
    )
    .await;
    assert_eq!(seat_names, json!([host_name, "Brin", "Cora"]));
    // Only the host has the host's controls.
    assert_eq!(
        host.execute(&format!("return {};", count("#seats .kick")), vec![])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        brin.execute(
            &format!(
                "return {} + ({}.hidden ? 0 : 1);",
                count("#seats .kick"),
                query("#invite")
            ),
            vec![]
        )
        .await
        .unwrap(),
        0
    );
    screenshot(&host, "party-seats.png").await;

    // ---- each plays a turn; every page's story names the speaker
    say(&host, "look around").await;
    wait(
        &host,
        "party-host",
        "the host's turn",
        &format!("{} === 1", count("#live .turn.done")),
    )
    .await;
    say(&brin, "look around").await;
    wait(
        &brin,
        "party-brin",
        "Brin's turn",
        &format!("{} === 2", count("#live .turn.done")),
    )
    .await;
    say(&cora, "where can I go").await;
    for (name, page) in pages {
        let who = wait(
            page,
            name,
            "three turns, each with its speaker",
            &format!("{} === 3 && {}", count("#live .turn.done"), speakers()),
        )
        .await;
        assert_eq!(who, json!([host_name, "Brin", "Cora"]), "{name}");
    }

    // ---- table talk: in its own pane on the others' pages, not in the story
    talk(&brin, "Cora, keep the lantern lit").await;
    for (name, page) in [("party-host", &host), ("party-cora", &cora)] {
        let line = wait(
            page,
            name,
            "Brin's table talk",
            "[...document.querySelectorAll('#talk-list .talk-line')].map((l) => l.innerText).find((t) => t.includes('keep the lantern lit'))",
        )
        .await;
        assert!(line.as_str().unwrap().starts_with("Brin"), "{line}");
        let in_story = page
            .execute(
                "return document.getElementById('timeline').innerText.includes('keep the lantern lit');",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(in_story, false, "{name}: table talk is not story");
    }
    screenshot(&cora, "party-talk.png").await;

    // ---- rounds: all three act, the round's turn shows every action
    click(&host, "#mode-switch button[data-mode='rounds']").await;
    for (name, page) in pages {
        wait(
            page,
            name,
            "rounds mode and the round's note",
            "document.body.dataset.turnMode === 'rounds' && !document.getElementById('round-note').hidden",
        )
        .await;
    }
    say(&brin, "listen at the door").await;
    wait(
        &host,
        "party-host",
        "Brin marked as having acted",
        "document.querySelector(\"#seats .seat[data-acted='true'] .seat-name\")?.innerText === 'Brin'",
    )
    .await;
    let note = wait(
        &host,
        "party-host",
        "the round's note",
        "document.getElementById('round-note').innerText",
    )
    .await;
    let note = note.as_str().unwrap();
    assert!(
        note.contains("Cora") && !note.contains("Brin"),
        "Cora is awaited, Brin is not: {note}"
    );
    screenshot(&cora, "party-round-waiting.png").await;
    say(&cora, "roll 1d20").await;
    say(&host, "look around").await;
    for (name, page) in pages {
        let actions = wait(
            page,
            name,
            "the round's turn with every action",
            "(() => { const r = document.querySelector('#live .turn.done .msg.player.round'); \
             return r && [...r.querySelectorAll('.round-actions li')].map((li) => [li.querySelector('.who-name').innerText, li.querySelector('.text').innerText]); })()",
        )
        .await;
        assert_eq!(
            actions,
            json!([
                [host_name, "look around"],
                ["Brin", "listen at the door"],
                ["Cora", "roll 1d20"]
            ]),
            "{name}"
        );
    }
    screenshot(&host, "party-round.png").await;

    // ---- the host removes Cora, after a confirm; Cora's page says so
    let cora_seat = cora
        .execute("return document.body.dataset.seat;", vec![])
        .await
        .unwrap();
    let cora_seat = cora_seat.as_str().unwrap().to_owned();
    click(
        &host,
        &format!("#seats .seat[data-seat-id='{cora_seat}'] .kick"),
    )
    .await;
    wait(
        &host,
        "party-host",
        "the confirm",
        "!document.getElementById('confirm-box').hidden",
    )
    .await;
    click(&host, "#confirm-yes").await;
    let said = wait(
        &cora,
        "party-cora",
        "the removed page says so",
        "document.body.dataset.fatal === 'KICKED' && !document.getElementById('fatal').hidden \
         && document.getElementById('fatal-text').innerText",
    )
    .await;
    assert!(said.as_str().unwrap().contains("removed"), "{said}");
    screenshot(&cora, "party-removed.png").await;
    for (name, page) in [("party-host", &host), ("party-brin", &brin)] {
        wait(
            page,
            name,
            "two seats left",
            &format!("{} === 2", count("#seats .seat")),
        )
        .await;
    }
    // ---- the host hands the role to Brin: the controls go with it
    let brin_seat = brin
        .execute("return document.body.dataset.seat;", vec![])
        .await
        .unwrap();
    let brin_seat = brin_seat.as_str().unwrap().to_owned();
    click(
        &host,
        &format!("#seats .seat[data-seat-id='{brin_seat}'] .make-host"),
    )
    .await;
    wait(
        &brin,
        "party-brin",
        "Brin's host controls",
        "document.body.dataset.host === 'true' && !document.getElementById('invite').hidden \
         && !document.getElementById('mode-switch').hidden",
    )
    .await;
    wait(
        &host,
        "party-host",
        "the old host a player",
        &format!(
            "document.body.dataset.host === 'false' && {} === 0 && document.getElementById('invite').hidden",
            count("#seats .kick")
        ),
    )
    .await;
    screenshot(&brin, "party-new-host.png").await;

    // ---- the old host, a player now, leaves by its own seat, after a
    // confirm; its page says so, and Brin (the host, who has no such
    // button) sees one seat
    let label = wait(
        &host,
        "party-host",
        "the leave button on its own seat only",
        &format!(
            "{} === 1 && document.querySelector('#seats .seat .leave').closest('.seat').dataset.seatId \
             === document.body.dataset.seat && document.querySelector('#seats .leave').innerText",
            count("#seats .leave")
        ),
    )
    .await;
    assert_eq!(label, "Leave");
    click(&host, "#seats .leave").await;
    let asked = wait(
        &host,
        "party-host",
        "the confirm to leave",
        "!document.getElementById('confirm-box').hidden && document.getElementById('confirm-yes').innerText",
    )
    .await;
    assert_eq!(asked, "Leave");
    click(&host, "#confirm-yes").await;
    let said = wait(
        &host,
        "party-host",
        "the page that left says so",
        "document.body.dataset.fatal === 'LEFT' && !document.getElementById('fatal').hidden \
         && document.getElementById('fatal-text').innerText",
    )
    .await;
    assert!(said.as_str().unwrap().contains("You left"), "{said}");
    wait(
        &brin,
        "party-brin",
        "one seat left, and no leave button for the host",
        &format!(
            "{} === 1 && {} === 0",
            count("#seats .seat"),
            count("#seats .leave")
        ),
    )
    .await;

    // A removed page does not come back: its connection stays closed.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let conn: Value = cora
        .execute("return document.body.dataset.conn;", vec![])
        .await
        .unwrap();
    assert_eq!(conn, "closed");
}

#[actix_web::test]
async fn the_invite_and_the_seat_list_on_a_phone_in_chinese() {
    let browsers = Browsers::find().unwrap_or_else(|e| panic!("{e}"));
    let driver = ChromeDriver::start(&browsers).await;
    let app = spawn_offline(|s| s.chat_burst = 10).await;
    let s = app.demo().await;
    let (w, h) = (390, 844);
    let host = driver.game("party-zh-host", &app.base, &s).await;
    set_viewport(&host, w, h).await;
    click(&host, "#lang").await;
    wait(
        &host,
        "party-zh-host",
        "the Chinese page",
        "document.documentElement.lang === 'zh-CN'",
    )
    .await;
    let link = invite_link(&host, "party-zh-host", &app.base).await;

    // The guest's browser reads Chinese before it opens the link.
    let guest = driver.browser("party-zh-guest", w, h).await;
    guest.goto(&app.base).await.unwrap();
    guest
        .execute(
            "localStorage.setItem('questd.lang', JSON.stringify('zh'));",
            vec![],
        )
        .await
        .unwrap();
    guest.goto(&link).await.unwrap();
    let title = wait(
        &guest,
        "party-zh-guest",
        "the join form in Chinese",
        "!document.getElementById('join').hidden && document.querySelector('#join h1').innerText",
    )
    .await;
    assert_eq!(title, "你受邀加入一支队伍");
    screenshot(&guest, "party-zh-join.png").await;
    join_as(&guest, "party-zh-guest", "小明").await;

    for (name, page) in [("party-zh-host", &host), ("party-zh-guest", &guest)] {
        wait(
            page,
            name,
            "the party tab",
            "!document.querySelector(\".tabs button[data-tab='party']\").hidden",
        )
        .await;
        click(page, ".tabs button[data-tab='party']").await;
        let seats = wait(
            page,
            name,
            "two seats online, in Chinese",
            &format!(
                "{} === 2 && [...document.querySelectorAll('#seats .seat')].map((s) => s.innerText.replace(/\\s+/g, ' ').trim())",
                count(ONLINE)
            ),
        )
        .await;
        let seats = seats.to_string();
        assert!(
            seats.contains("房主") && seats.contains("小明"),
            "{name}: {seats}"
        );
        let title = wait(
            page,
            name,
            "the party panel's title",
            "document.querySelector('#party h2').innerText",
        )
        .await;
        assert_eq!(title, "队伍");
        // The top bar stays one row, the host's invite button in it.
        let rows = page
            .execute(
                "const top = (id) => document.getElementById(id).getBoundingClientRect().top; \
                 return Math.abs(top('lang') - top('conn'));",
                vec![],
            )
            .await
            .unwrap();
        assert!(
            rows.as_f64().unwrap() < 4.0,
            "{name}: the top bar wraps ({rows} px)"
        );
        // Nothing on the phone is wider than the screen.
        let wide = page
            .execute(
                "return document.documentElement.scrollWidth - window.innerWidth;",
                vec![],
            )
            .await
            .unwrap();
        assert!(
            wide.as_i64().unwrap() <= 0,
            "{name}: the page is {wide} px too wide"
        );
    }
    screenshot(&host, "party-zh-phone-host.png").await;
    screenshot(&guest, "party-zh-phone-guest.png").await;
}
