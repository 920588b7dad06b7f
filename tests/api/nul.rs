//! U+0000 from a caller or a model. PostgreSQL's `TEXT` cannot hold it, and
//! one such write used to fail a batch shared by every session and hold the
//! whole node as "storage is failing". Now every string a caller sends is
//! refused at the edge (`400` naming where, or `INVALID_FRAME`), a model's
//! U+0000 is stored as U+FFFD, and a write the database refuses for its own
//! data fails alone. Each test has another tenant's session play on
//! meanwhile: its chats are acknowledged and completed, and the node
//! creates sessions (no `503`). Runs on both stores.

use std::sync::Arc;

use crate::common::*;
use crate::storage_faults::{Db, fails_to_play};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use questd::game::HistoryEntry;
use questd::llm::{ModelReply, OfflineGameMaster, ScriptedProvider};
use questd::protocol::CallId;
use serde_json::{Value, json};

const YANTIAN: &str = include_str!("fixtures/yantian_campaign.json");

/// A valid inline campaign with a string in every kind of field: title,
/// description, areas, characters, NPCs (persona, prompts, lists), content
/// and lore.
fn campaign() -> Value {
    let mut c: Value = serde_json::from_str(YANTIAN).unwrap();
    c["lore"] = json!(["The well never runs dry.", "严氏先祖 founded the village."]);
    c
}

/// A server with the offline game master (waiting `latency_ms` before each
/// answer) and [`settings`].
async fn server(latency_ms: u64) -> TestApp {
    let latency = std::time::Duration::from_millis(latency_ms);
    spawn_with(settings, Arc::new(OfflineGameMaster::with_latency(latency))).await
}

/// Tenant `acme` has a key, and chats are not rate limited.
fn settings(s: &mut questd::Settings) {
    s.tenant_keys = Some("acme:acme-key".into());
    s.chat_burst = 1000;
    s.chat_per_minute = 60_000;
}

/// Another tenant's session, connected, that must not notice any of it.
struct Bystander {
    ws: Ws,
    chats: usize,
}

impl Bystander {
    async fn new(app: &TestApp) -> Self {
        let s = app
            .create_session_with(
                &[("X-Internal-API-Key", "acme-key")],
                json!({"campaign_id": "demo"}),
            )
            .await;
        let (ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
        Self { ws, chats: 0 }
    }

    /// Plays a whole turn (acknowledged, completed), and the node creates
    /// a session: nothing is refused as storage failing.
    async fn plays_on(&mut self, app: &TestApp) {
        self.chats += 1;
        let frames = self
            .ws
            .play("look around", &format!("bystander-{}", self.chats))
            .await;
        let done = first(&frames, "turn_completed");
        assert!(done.get("error_code").is_none(), "{done}");
        let a = request(
            "POST",
            &format!("{}/api/v1/sessions", app.base),
            &[("X-Internal-API-Key", "acme-key")],
            Some(&json!({"campaign_id": "demo"})),
        )
        .await;
        assert_eq!(a.status, 201, "the node takes new sessions: {}", a.body);
    }
}

/// `a` is the refusal of U+0000 at `pointer`: `400 BAD_REQUEST` naming
/// the place and never the value.
fn refused_at(a: &Answer, pointer: &str) {
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{pointer}: {}",
        a.body
    );
    let message = a.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{pointer:?}")) && message.contains("U+0000"),
        "{pointer}: {message}"
    );
    assert!(!message.contains('\0'), "{message:?}");
}

/// Inserts U+0000 at the `at`-th place (of its length plus one) of `text`.
fn with_nul(text: &str, at: usize) -> String {
    let places = text.chars().count() + 1;
    let at = text
        .char_indices()
        .map(|(i, _)| i)
        .nth(at % places)
        .unwrap_or(text.len());
    let mut text = text.to_owned();
    text.insert(at, '\0');
    text
}

/// The JSON pointer of every string in `value`, and of every object (whose
/// keys may be given a NUL).
fn places(value: &Value, at: String, strings: &mut Vec<String>, objects: &mut Vec<String>) {
    match value {
        Value::String(_) => strings.push(at),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                places(item, format!("{at}/{i}"), strings, objects);
            }
        }
        Value::Object(fields) => {
            objects.push(at.clone());
            for (k, item) in fields {
                places(item, format!("{at}/{k}"), strings, objects);
            }
        }
        _ => {}
    }
}

/// Where to put the NUL, drawn by proptest with a fixed seed: each run
/// tries the same places, and each field gets a different one.
fn draws(n: usize) -> Vec<usize> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| (0usize..1000).new_tree(&mut runner).unwrap().current())
        .collect()
}

#[actix_web::test]
async fn a_campaign_with_nul_in_any_string_or_key_is_refused_while_others_play_on() {
    let app = server(0).await;
    let mut other = Bystander::new(&app).await;
    let url = format!("{}/api/v1/sessions", app.base);
    let keyed = [("X-Internal-API-Key", TEST_KEY)];
    let valid = campaign();
    let a = request("POST", &url, &keyed, Some(&json!({ "campaign": valid }))).await;
    assert_eq!(
        a.status, 201,
        "the campaign is valid without NUL: {}",
        a.body
    );

    // The request of the report: anonymous, a title ending in NUL.
    let mut bad = valid.clone();
    bad["title"] = json!("T\0");
    let a = request("POST", &url, &[], Some(&json!({ "campaign": bad }))).await;
    refused_at(&a, "/campaign/title");
    other.plays_on(&app).await;

    // A NUL at a drawn place of every string of the campaign, then in a
    // key of every object of it.
    let (mut strings, mut objects) = (Vec::new(), Vec::new());
    places(&valid, String::new(), &mut strings, &mut objects);
    assert!(strings.len() >= 60, "{strings:?}");
    let at = draws(strings.len() + objects.len());
    for (n, pointer) in strings.iter().enumerate() {
        let mut bad = valid.clone();
        let field = bad.pointer_mut(pointer).unwrap();
        *field = json!(with_nul(field.as_str().unwrap(), at[n]));
        let a = request("POST", &url, &keyed, Some(&json!({ "campaign": bad }))).await;
        refused_at(&a, &format!("/campaign{pointer}"));
        if n % 20 == 0 {
            other.plays_on(&app).await;
        }
    }
    for (n, pointer) in objects.iter().enumerate() {
        let mut bad = valid.clone();
        let fields = bad.pointer_mut(pointer).unwrap().as_object_mut().unwrap();
        let key = fields.keys().nth(at[strings.len() + n] % fields.len());
        let key = key.unwrap().clone();
        let item = fields.remove(&key).unwrap();
        fields.insert(with_nul(&key, at[n]), item);
        let a = request("POST", &url, &keyed, Some(&json!({ "campaign": bad }))).await;
        refused_at(&a, &format!("/campaign{pointer}"));
    }
    // The same for a site's content.
    let mut bad = valid.clone();
    bad["npcs"][0]["prompts"]["greeting"] = json!("后生\0来了");
    let site = |id: &str| format!("{}/api/v1/sites/{id}", app.base);
    let a = request(
        "PUT",
        &site("site-1"),
        &keyed,
        Some(&json!({ "campaign": bad })),
    )
    .await;
    refused_at(&a, "/campaign/npcs/0/prompts/greeting");
    let a = request(
        "PUT",
        &site("site-1"),
        &keyed,
        Some(&json!({ "campaign": valid })),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = request(
        "PUT",
        &site("site%00"),
        &keyed,
        Some(&json!({ "campaign": valid })),
    )
    .await;
    assert_eq!(
        (a.status, a.body["error_code"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    other.plays_on(&app).await;
}

#[actix_web::test]
async fn a_chat_with_nul_is_refused_on_every_path_even_behind_a_running_turn() {
    // Each answer takes a while: the first chat's turn (several model
    // calls) is still running when the next ones come, so they would be
    // queued (stored first).
    let app = server(300).await;
    let mut other = Bystander::new(&app).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.chat("look around", "running").await;
    let ack = ws.until_reply().await.pop().unwrap();
    assert_eq!(ack["type"], "ack", "{ack}");
    let running = ack["turn_id"].as_str().unwrap().to_owned();

    // Over the WebSocket: the text, the request id, a field not read.
    let mut seen = Vec::new();
    for (frame, at) in [
        (
            json!({"type": "chat", "text": "look \u{0} around", "request_id": "queued-nul"}),
            "/text",
        ),
        (
            json!({"type": "chat", "text": "look", "request_id": "r\u{0}"}),
            "/request_id",
        ),
        (
            json!({"type": "chat", "text": "look", "request_id": "x", "extra": ["\u{0}"]}),
            "/extra/0",
        ),
    ] {
        ws.send_json(&frame).await;
        let mut frames = ws.until_reply().await;
        let error = frames.pop().unwrap();
        seen.extend(frames);
        assert_eq!(
            (error["type"].as_str(), error["error_code"].as_str()),
            (Some("error"), Some("INVALID_FRAME")),
            "{error}"
        );
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&format!("{at:?}")), "{message}");
        assert!(!message.contains('\0'), "{message:?}");
    }
    // Over HTTP, while the turn runs.
    for (body, at) in [
        (
            json!({"session_id": s.session_id, "message": "look \u{0} around"}),
            "/message",
        ),
        (
            json!({"session_id": s.session_id, "message": "look", "request_id": "\u{0}"}),
            "/request_id",
        ),
        (
            json!({"session_id": format!("{}\u{0}", s.session_id), "message": "look"}),
            "/session_id",
        ),
    ] {
        refused_at(&chat_over_http(&app.base, &s.player_token, &body).await, at);
    }
    other.plays_on(&app).await;

    // The refusals came while the turn ran (they would have been queued
    // behind it); it ends well, and the player plays on.
    let ended = |f: &Value| f["turn_id"] == running.as_str() && f["type"] == "turn_completed";
    assert!(
        !seen.iter().any(ended),
        "the turn was still running: {seen:?}"
    );
    let frames = ws.until_turn_end(&running).await;
    assert!(ended(frames.last().unwrap()), "{frames:?}");
    let frames = ws.play("look around", "after").await;
    first(&frames, "turn_completed");
    other.plays_on(&app).await;
}

#[actix_web::test]
async fn nul_in_a_url_a_tool_call_or_an_mcp_message_is_refused() {
    let app = server(0).await;
    let mut other = Bystander::new(&app).await;
    let s = app.demo().await;
    let headers = [
        ("X-Internal-API-Key", TEST_KEY),
        ("X-Tenant-ID", "default"),
        ("X-Site-ID", "site-1"),
        ("X-Trace-ID", "trace-1"),
        ("X-User-Role", "gm_admin"),
        ("X-Session-ID", s.session_id.as_str()),
    ];
    let call = |body: Value| {
        let url = format!("{}/api/v1/tools/call", app.base);
        async move { request("POST", &url, &headers, Some(&body)).await }
    };
    let npc = |name: &str| {
        json!({"tool_name": "create_npc", "input": {
            "name": name, "persona": "A gruff ferryman.", "traits": ["quiet"]}})
    };
    let a = call(npc("Bram")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    for (body, at) in [
        (npc("Br\u{0}am"), "/input/name"),
        (
            json!({"tool_name": "create_npc", "input": {
                "name": "Bram", "persona": "p", "traits": ["a", "qu\u{0}iet"]}}),
            "/input/traits/1",
        ),
        (
            json!({"tool_name": "roll\u{0}_dice", "input": {}}),
            "/tool_name",
        ),
        (
            json!({"tool_name": "roll_dice", "input": {"dice": "1d6", "reason": "luck\u{0}"}}),
            "/input/reason",
        ),
        (
            json!({"tool_name": "roll_dice", "input": {"dice": "1d6"}, "request_id": "r\u{0}"}),
            "/request_id",
        ),
        (
            json!({"tool_name": "roll_dice", "input": {"dice": "1d6"}, "context": {"site_id": "\u{0}"}}),
            "/context/site_id",
        ),
        (
            json!({"tool_name": "roll_dice", "input": {"k\u{0}": 1}}),
            "/input",
        ),
    ] {
        refused_at(&call(body).await, at);
    }
    let list = request(
        "POST",
        &format!("{}/api/v1/tools/list", app.base),
        &headers,
        Some(&json!({"category": "npc\u{0}"})),
    )
    .await;
    refused_at(&list, "/category");
    other.plays_on(&app).await;

    // Session ids, NPC ids, site ids and tokens in the URL.
    let base = &app.base;
    let id = &s.session_id;
    let token = [("Authorization", format!("Bearer {}", s.player_token))];
    let token = [(token[0].0, token[0].1.as_str())];
    for (method, url) in [
        ("GET", format!("{base}/api/v1/sessions/{id}%00")),
        (
            "GET",
            format!("{base}/api/v1/sessions/{id}/actions?after_seq=0%00"),
        ),
        (
            "POST",
            format!("{base}/api/v1/sessions/{id}/npcs/npc%00/activate"),
        ),
        ("GET", format!("{base}/api/v1/sites/site%00")),
    ] {
        let a = request(method, &url, &token, None).await;
        assert_eq!(
            (a.status, a.body["error_code"].as_str()),
            (400, Some("BAD_REQUEST")),
            "{method} {url}: {}",
            a.body
        );
    }
    for url in [
        app.ws_url(&format!("{id}%00"), &s.player_token, None),
        app.ws_url(id, &format!("{}%00", s.player_token), None),
    ] {
        assert_eq!(Ws::refused_status(&url).await, 400, "{url}");
    }

    // MCP: a tool call whose arguments hold NUL, answered under its id.
    let mcp = |body: Value| {
        let url = format!("{}/mcp", app.base);
        async move {
            let mut resp = client()
                .post(&url)
                .insert_header(("content-type", "application/json"))
                .insert_header(("accept", "application/json, text/event-stream"))
                .insert_header(("x-internal-api-key", TEST_KEY))
                .send_body(body.to_string())
                .await
                .expect("request sends");
            let body = resp.body().await.expect("body");
            (
                resp.status().as_u16(),
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    let (status, body) = mcp(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "roll_dice", "arguments": {"dice": "1d6", "reason": "x\u{0}"}}}))
    .await;
    assert_eq!((status, &body["id"]), (400, &json!(7)), "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"/params/arguments/reason\""),
        "{message}"
    );
    assert!(!message.contains('\0'), "{message:?}");
    let (status, body) =
        mcp(json!({"jsonrpc": "2.0", "id": "a\u{0}", "method": "tools/list"})).await;
    assert_eq!((status, &body["id"]), (400, &Value::Null), "{body}");
    other.plays_on(&app).await;
}

/// A model that writes U+0000 everywhere it can: in a call's id, a tool's
/// name and a call's arguments, then in its narrative.
fn nul_model() -> ScriptedProvider {
    ScriptedProvider::from_fn(|req, _| {
        let asked = matches!(
            req.messages.last().map(|m| &**m),
            Some(HistoryEntry::User { text, .. }) if text == "open the door"
        );
        Ok(if asked {
            let mut reply = ModelReply::tools([
                ("roll\u{0}dice", "{}"),
                ("roll_dice", r#"{"dice":"1d6","reason":"luck\u0000"}"#),
            ]);
            reply.tool_calls[1].id = CallId::from("call\u{0}2");
            reply.text = "Let me\u{0} see.".into();
            reply
        } else {
            ModelReply::narrate("The door\u{0} creaks open.")
        })
    })
}

#[actix_web::test]
async fn a_model_that_answers_nul_has_its_turn_completed_and_stored() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = spawn_in(dir.clone(), settings, Arc::new(nul_model())).await;
    let mut other = Bystander::new(&app).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("open the door", "door").await;
    let done = first(&frames, "turn_completed");
    assert_eq!(done["reply"], "The door\u{FFFD} creaks open.", "{done}");
    let results: Vec<(&str, &str)> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| (f["tool"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        results,
        [("roll\u{FFFD}dice", "error"), ("roll_dice", "ok")],
        "{frames:?}"
    );
    other.plays_on(&app).await;
    let story: Vec<Value> = story(&frames);
    drop(ws);
    app.stop().await;

    // What was told is what was stored: a server on the same database
    // replays the same frames from its journal.
    let app = spawn_in(dir, settings, Arc::new(nul_model())).await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, Some(0)).await;
    let last = story.last().unwrap()["seq"].as_u64().unwrap();
    let replayed = ws.until(|f| f["seq"].as_u64() == Some(last)).await;
    let replayed: Vec<Value> = story_of(&replayed, &story);
    assert_eq!(replayed, story);
    let text = serde_json::to_string(&replayed).unwrap();
    assert!(!text.contains("\\u0000"), "{text}");
}

/// The frames of `all` whose seqs are those of `wanted`.
fn story_of(all: &[Value], wanted: &[Value]) -> Vec<Value> {
    let seqs: Vec<&Value> = wanted.iter().map(|f| &f["seq"]).collect();
    all.iter()
        .filter(|f| seqs.contains(&&f["seq"]))
        .cloned()
        .collect()
}

/// Makes the database refuse, as data it cannot hold, every row of `table`
/// whose `column` is `value`: SQLite through a `CHECK` that fails,
/// PostgreSQL with the error a string holding U+0000 gets (SQLSTATE 22021).
async fn refuse_data(db_url: &str, table: &str, column: &str, value: &str) {
    let mut c = Db::connect(db_url).await;
    let sqls = match c {
        Db::Postgres(_) => [
            "CREATE OR REPLACE FUNCTION injected_data_fault() RETURNS trigger LANGUAGE plpgsql \
             AS $$ BEGIN RAISE EXCEPTION 'invalid byte sequence for encoding \"UTF8\": 0x00' \
             USING ERRCODE = '22021'; END $$"
                .to_owned(),
            format!(
                "CREATE TRIGGER injected_{table} AFTER INSERT ON {table} FOR EACH ROW \
                 WHEN (NEW.{column} = '{value}') EXECUTE FUNCTION injected_data_fault()"
            ),
        ],
        Db::Sqlite(_) => [
            "CREATE TABLE IF NOT EXISTS injected_check (v INTEGER CHECK (v > 0))".to_owned(),
            format!(
                "CREATE TRIGGER injected_{table} AFTER INSERT ON {table} \
                 WHEN NEW.{column} = '{value}' \
                 BEGIN INSERT INTO injected_check VALUES (0); END"
            ),
        ],
    };
    for sql in sqls {
        c.run(sql).await;
    }
}

#[actix_web::test]
async fn a_write_the_database_refuses_as_data_fails_alone_and_no_one_else_is_refused() {
    let app = server(0).await;
    let mut other = Bystander::new(&app).await;

    // Every row a turn of one session writes (its journal and its audit
    // rows) is refused: that session stops, no one else notices.
    let s = app.demo().await;
    for table in ["journal", "audit"] {
        refuse_data(&app.db_url, table, "session_id", &s.session_id).await;
    }
    fails_to_play(&app, &s, 0).await;
    other.plays_on(&app).await;

    // A session whose row is refused: its creation alone is refused, as
    // the caller's data.
    refuse_data(&app.db_url, "sessions", "title", "Refused title").await;
    let mut refused = campaign();
    refused["title"] = json!("Refused title");
    let a = request(
        "POST",
        &format!("{}/api/v1/sessions", app.base),
        &[("X-Internal-API-Key", TEST_KEY)],
        Some(&json!({ "campaign": refused })),
    )
    .await;
    assert_eq!(
        (
            a.status,
            a.body["error_code"].as_str(),
            a.body["message"].as_str()
        ),
        (
            400,
            Some("BAD_REQUEST"),
            Some("a value in the request cannot be stored")
        ),
        "{}",
        a.body
    );
    other.plays_on(&app).await;
    other.plays_on(&app).await;
}
