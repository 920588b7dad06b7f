//! The OpenAI-compatible provider against a mock endpoint, through real
//! sockets: streaming, tool calls, retries, failures and timeouts.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use actix_web::{App, HttpResponse, HttpServer, web};
use questd::llm::OpenAiProvider;
use serde_json::{Value, json};

/// What the mock answers to one request.
#[derive(Clone)]
enum Canned {
    Sse(String),
    /// A whole (non-streaming) completion.
    Json(Value),
    Status(u16, Option<&'static str>),
    /// Holds the request open far longer than any test waits.
    Hang,
    /// Answers this stream once the test lets it go.
    After(Arc<tokio::sync::Notify>, String),
}

type Script = dyn Fn(usize) -> Canned + Send + Sync;

/// A mock endpoint: its URL and every request body it received.
struct Mock {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Mock {
    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
    fn request(&self, n: usize) -> Value {
        self.requests.lock().unwrap()[n].clone()
    }
}

async fn start_mock(script: impl Fn(usize) -> Canned + Send + Sync + 'static) -> Mock {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let script: Arc<Script> = Arc::new(script);
    let seen = requests.clone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = HttpServer::new(move || {
        let seen = seen.clone();
        let script = script.clone();
        App::new().route(
            "/v1/chat/completions",
            web::post().to(move |req: actix_web::HttpRequest, body: web::Json<Value>| {
                let seen = seen.clone();
                let script = script.clone();
                async move {
                    assert_eq!(
                        req.headers().get("authorization").unwrap(),
                        "Bearer k",
                        "the key goes as a bearer token"
                    );
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(body.into_inner());
                        seen.len() - 1
                    };
                    match script(n) {
                        Canned::Sse(s) => {
                            HttpResponse::Ok().content_type("text/event-stream").body(s)
                        }
                        Canned::Json(v) => HttpResponse::Ok().json(v),
                        Canned::Status(code, retry_after) => {
                            let mut r = HttpResponse::build(
                                actix_web::http::StatusCode::from_u16(code).unwrap(),
                            );
                            if let Some(secs) = retry_after {
                                r.insert_header(("Retry-After", secs));
                            }
                            r.body("{\"error\":{\"message\":\"busy\"}}")
                        }
                        Canned::After(go, s) => {
                            go.notified().await;
                            HttpResponse::Ok().content_type("text/event-stream").body(s)
                        }
                        Canned::Hang => {
                            actix_web::rt::time::sleep(Duration::from_secs(120)).await;
                            HttpResponse::Ok().finish()
                        }
                    }
                }
            }),
        )
    })
    .workers(1)
    .shutdown_timeout(0)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    Mock {
        url: format!("http://127.0.0.1:{port}/v1"),
        requests,
    }
}

fn sse(chunks: &[Value]) -> String {
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

fn text_chunks(parts: &[&str]) -> String {
    let mut chunks: Vec<Value> = parts
        .iter()
        .map(|p| json!({"choices": [{"index": 0, "delta": {"content": p}}]}))
        .collect();
    chunks.push(json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 4}}));
    sse(&chunks)
}

fn tool_chunks(fragments: Vec<Value>) -> String {
    sse(&fragments
        .into_iter()
        .map(|f| json!({"choices": [{"index": 0, "delta": {"tool_calls": [f]}}]}))
        .collect::<Vec<_>>())
}

async fn app_for(mock: &Mock, timeout: Option<Duration>) -> TestApp {
    let mut provider = OpenAiProvider::new(&mock.url, "m", Some("k".into()), true).unwrap();
    if let Some(t) = timeout {
        provider = provider.with_call_timeout(t);
    }
    spawn_with(|_| {}, Arc::new(provider)).await
}

fn of_type(frames: &[Value], kind: &str) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f["type"] == kind)
        .cloned()
        .collect()
}

#[actix_web::test]
async fn streamed_text_arrives_as_deltas_and_makes_the_reply() {
    let mock =
        start_mock(|_| Canned::Sse(text_chunks(&["The hall ", "is quiet. ", "灯影摇曳。"]))).await;
    let app = app_for(&mock, None).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "r-1").await;
    let deltas: Vec<String> = of_type(&frames, "narrative_delta")
        .iter()
        .map(|f| f["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(deltas.len(), 3, "{frames:#?}");
    let done = first(&frames, "turn_completed");
    assert_eq!(done["reply"], deltas.concat());
    assert_eq!(done["reply"], "The hall is quiet. 灯影摇曳。");
    let req = mock.request(0);
    assert_eq!(req["stream"], true);
    assert_eq!(req["model"], "m");
    assert_eq!(req["messages"][0]["role"], "system");
    assert!(
        req["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("\n\nContext:\n")
    );
    assert_eq!(
        req["messages"].as_array().unwrap().last().unwrap()["content"],
        "hello"
    );
    assert!(!req["tools"].as_array().unwrap().is_empty());
}

#[actix_web::test]
async fn streamed_tool_calls_run_and_the_results_go_back_to_the_model() {
    let fragmented = vec![
        json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "roll_dice", "arguments": ""}}),
        json!({"index": 0, "function": {"arguments": "{\"dice\":"}}),
        json!({"index": 0, "function": {"arguments": "\"2d6+1\",\"reason\":\"luck\"}"}}),
    ];
    let ollama = vec![
        json!({"id": "call_a", "function": {"name": "roll_dice", "arguments": "{\"dice\":\"2d6+1\",\"reason\":\"luck\"}"}}),
    ];
    for (variant, fragments) in [("fragmented", fragmented), ("whole call", ollama)] {
        let first_answer = tool_chunks(fragments);
        let mock = start_mock(move |n| {
            Canned::Sse(if n == 0 {
                first_answer.clone()
            } else {
                text_chunks(&["You rolled."])
            })
        })
        .await;
        let app = app_for(&mock, None).await;
        let s = app.demo().await;
        let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
        let frames = ws.play("roll", "r-1").await;
        let result = first(&frames, "tool_result");
        assert_eq!(result["status"], "ok", "{variant}: {result}");
        assert_eq!(result["tool"], "roll_dice", "{variant}");
        assert_eq!(
            first(&frames, "turn_completed")["reply"],
            "You rolled.",
            "{variant}"
        );
        assert_eq!(mock.count(), 2, "{variant}");
        let messages = mock.request(1)["messages"].as_array().unwrap().clone();
        let at = messages
            .iter()
            .position(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
            .unwrap_or_else(|| panic!("{variant}: no tool_calls message in {messages:#?}"));
        let call = &messages[at]["tool_calls"][0];
        assert_eq!(call["id"], "call_a", "{variant}");
        assert_eq!(call["type"], "function", "{variant}");
        assert_eq!(call["function"]["name"], "roll_dice", "{variant}");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            args,
            json!({"dice": "2d6+1", "reason": "luck"}),
            "{variant}"
        );
        let tool = &messages[at + 1];
        assert_eq!(
            (tool["role"].as_str(), tool["tool_call_id"].as_str()),
            (Some("tool"), Some("call_a")),
            "{variant}"
        );
    }
}

#[actix_web::test]
async fn a_rate_limited_call_is_retried() {
    let mock = start_mock(|n| {
        if n == 0 {
            Canned::Status(429, Some("0"))
        } else {
            Canned::Sse(text_chunks(&["Back again."]))
        }
    })
    .await;
    let app = app_for(&mock, None).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "r-1").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "Back again.");
    assert_eq!(mock.count(), 2);
}

#[actix_web::test]
async fn a_failing_endpoint_fails_the_turn_and_the_next_turn_works() {
    let mock = start_mock(|n| {
        if n < 3 {
            Canned::Status(500, None)
        } else {
            Canned::Sse(text_chunks(&["Recovered."]))
        }
    })
    .await;
    let app = app_for(&mock, None).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "UPSTREAM_ERROR", "{failed}");
    // Players get the short reason; the endpoint and its answer stay in the log.
    assert_eq!(
        failed["message"], "the model endpoint did not answer",
        "{failed}"
    );
    let endpoint = mock.url.trim_start_matches("http://");
    for secret in [endpoint, "busy"] {
        assert!(!failed.to_string().contains(secret), "{secret}: {failed}");
    }
    assert_eq!(mock.count(), 3, "one try and two retries");
    let frames = ws.play("hello again", "r-2").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "Recovered.");
    assert_eq!(mock.count(), 4);
}

#[actix_web::test]
async fn a_silent_endpoint_times_out() {
    let mock = start_mock(|_| Canned::Hang).await;
    // Long enough for the call to reach the mock on a loaded machine (at
    // 300 ms it once timed out before the mock had read it, and the count
    // below saw none): the count must see the one call, and no retry.
    let app = app_for(&mock, Some(Duration::from_secs(2))).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "AI_TIMEOUT", "{failed}");
    assert_eq!(
        failed["message"], "the model did not answer in time",
        "{failed}"
    );
    let endpoint = mock.url.trim_start_matches("http://");
    assert!(!failed.to_string().contains(endpoint), "{failed}");
    assert_eq!(mock.count(), 1, "timeouts are not retried");
}

#[actix_web::test]
async fn a_real_model_writes_generated_zones_and_bad_text_is_invalid_ai_json() {
    let session: Arc<Mutex<String>> = Arc::default();
    let id = session.clone();
    let zone_call = move || {
        let args = json!({"session_id": id.lock().unwrap().clone(), "world_prompt": "salt flats", "count": 2});
        Canned::Sse(tool_chunks(vec![
            json!({"index": 0, "id": "call_z", "type": "function", "function": {"name": "generate_zone", "arguments": args.to_string()}}),
        ]))
    };
    let mock = start_mock(move |n| match n {
        0 | 3 => zone_call(),
        1 => Canned::Sse(text_chunks(&[
            "[{\"name\": \"Glass Pan\", \"description\": \"White and blinding.\"},",
            " {\"name\": \"Cairn Field\", \"description\": \"Stones stacked by no one.\"}]",
        ])),
        4 => Canned::Sse(text_chunks(&["Two lovely zones, trust me."])),
        _ => Canned::Sse(text_chunks(&["Done."])),
    })
    .await;
    let app = app_for(&mock, None).await;
    let s = app.demo().await;
    *session.lock().unwrap() = s.session_id.clone();
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;

    let frames = ws.play("scout", "r-1").await;
    let result = first(&frames, "tool_result");
    assert_eq!(result["status"], "ok", "{result}");
    let names: Vec<&str> = result["result"]["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["Glass Pan", "Cairn Field"],
        "the model wrote the text"
    );
    let deltas: String = of_type(&frames, "narrative_delta")
        .iter()
        .map(|f| f["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(deltas, "Done.", "zone text is not narrated");
    let content_request = mock.request(1);
    assert!(content_request.get("tools").is_none(), "{content_request}");
    assert!(
        content_request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("JSON only")
    );

    let frames = ws.play("scout again", "r-2").await;
    let result = first(&frames, "tool_result");
    assert_eq!(
        (result["status"].as_str(), result["error_code"].as_str()),
        (Some("error"), Some("INVALID_AI_JSON")),
        "{result}"
    );
    assert_eq!(first(&frames, "turn_completed")["reply"], "Done.");
    assert_eq!(
        app.snapshot(&s).await["zones"].as_array().unwrap().len(),
        2,
        "nothing made from bad text"
    );
}

#[actix_web::test]
async fn a_zone_call_the_pipeline_refuses_spends_no_model_call_on_its_text() {
    let mock = start_mock(|n| match n {
        0 => {
            let args = json!({"session_id": "sess_someone_else", "world_prompt": "salt flats"});
            Canned::Sse(tool_chunks(vec![
                json!({"index": 0, "id": "call_z", "type": "function", "function": {"name": "generate_zone", "arguments": args.to_string()}}),
            ]))
        }
        _ => Canned::Sse(text_chunks(&["Nothing came of it."])),
    })
    .await;
    let app = app_for(&mock, None).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("scout", "r-1").await;
    let result = first(&frames, "tool_result");
    assert_eq!(result["error_code"], "SESSION_MISMATCH", "{result}");
    assert_eq!(
        mock.count(),
        2,
        "the step and the narration, no text request"
    );
    for n in 0..2 {
        let sent = mock.request(n).to_string();
        assert!(
            !sent.contains("JSON only"),
            "request {n} asked for zone text"
        );
    }
}

#[actix_web::test]
async fn the_stateless_chat_api_translates_both_ways_and_runs_nothing() {
    let mock = start_mock(|n| match n {
        0 => Canned::Sse(tool_chunks(vec![
            json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"dice\""}}),
            json!({"index": 0, "function": {"arguments": ":\"2d6+1\",\"reason\":\"luck\"}"}}),
        ])),
        1 => Canned::Sse(text_chunks(&["You rolled ", "9, 勇者。"])),
        // A call the client could not run, twice (the retry is no better).
        2 | 3 => Canned::Sse(tool_chunks(vec![
            json!({"index": 0, "id": "call_b", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"dice\": 7}"}}),
        ])),
        // A refusal the endpoint does not retry.
        _ => Canned::Status(400, None),
    })
    .await;
    let app = app_for(&mock, None).await;
    let url = format!("{}/api/chat", app.base);
    let ask = json!({"messages": [{"role": "user", "content": "roll"}]});

    // A real model spends the operator's budget: only with a key.
    let (status, body) = post(&url, &ask).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (401, Some("UNAUTHORIZED")),
        "{body}"
    );
    let mut resp = client()
        .post(&url)
        .insert_header(("X-Internal-API-Key", "not-the-key"))
        .send_json(&ask)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let _ = resp.body().await;
    assert_eq!(mock.count(), 0, "refused calls never reach the model");

    let (status, body) = post_keyed(&url, &ask).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"message": {"role": "assistant", "content": null, "toolCalls": [
            {"id": "call_a", "tool": {"name": "roll_dice", "args": {"dice": "2d6+1", "reason": "luck"}}}]}})
    );
    let first_request = mock.request(0);
    assert!(
        !first_request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Context:"),
        "no session, no session context"
    );
    assert!(
        first_request["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "roll_dice")
    );

    // The client ran the tool and sends its result back as an object.
    let (status, body) = post_keyed(
        &url,
        &json!({"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "roll"},
            {"role": "assistant", "content": null, "toolCalls": [
                {"id": "call_a", "tool": {"name": "roll_dice", "args": {"dice": "2d6+1", "reason": "luck"}}}]},
            {"role": "tool", "toolCallId": "call_a", "content": {"total": 9, "名": "勇者"}},
        ], "tools": ["roll_dice"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"message": {"role": "assistant", "content": "You rolled 9, 勇者。"}}),
        "a final answer has no toolCalls key"
    );
    let sent = mock.request(1);
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(messages[1], json!({"role": "user", "content": "roll"}));
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["name"],
        "roll_dice"
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "{\"total\":9,\"名\":\"勇者\"}"})
    );
    let tools: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["roll_dice"], "only the tools the client named");

    let (status, body) = post_keyed(
        &url,
        &json!({"messages": [{"role": "user", "content": "roll"}]}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error_code"], "INVALID_AI_JSON");
    let retry = mock.request(3);
    let told = retry["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(told["role"], "user");
    assert!(
        told["content"]
            .as_str()
            .unwrap()
            .contains("the model asked for an unusable tool call"),
        "{told}"
    );

    // A failing endpoint: the short reason only, never its address or answer.
    let (status, body) = post_keyed(&url, &ask).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (502, Some("UPSTREAM_ERROR")),
        "{body}"
    );
    assert_eq!(
        body["message"], "the model endpoint did not answer",
        "{body}"
    );
    let endpoint = mock.url.trim_start_matches("http://");
    for secret in [endpoint, "busy"] {
        assert!(!body.to_string().contains(secret), "{secret}: {body}");
    }

    for bad in [
        json!({"messages": [{"role": "narrator", "content": "x"}]}),
        json!({"messages": "hi"}),
        json!({"messages": [{"role": "tool", "toolCallId": "nope", "content": "x"}]}),
        json!({"messages": [{"role": "user", "content": "x"}], "tools": ["create_npc"]}),
        json!({}),
    ] {
        let (status, body) = post_keyed(&url, &bad).await;
        assert_eq!(
            (status, body["error_code"].as_str()),
            (400, Some("BAD_REQUEST")),
            "{bad}: {body}"
        );
    }
    assert_eq!(mock.count(), 5, "bad requests never reach the model");
}

#[actix_web::test]
async fn the_stateless_chat_api_works_with_the_offline_game_master() {
    let app = spawn_app().await;
    let url = format!("{}/api/chat", app.base);
    // The offline game master costs nothing: no key needed.
    let (status, body) = post(
        &url,
        &json!({"messages": [{"role": "user", "content": "roll 2d6"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let call = &body["message"]["toolCalls"][0];
    assert_eq!(
        call["tool"],
        json!({"name": "roll_dice", "args": {"dice": "2d6", "reason": "the player's roll"}})
    );
    let (status, body) = post(
        &url,
        &json!({"messages": [
            {"role": "user", "content": "roll 2d6"},
            {"role": "assistant", "content": null, "toolCalls": [call]},
            {"role": "tool", "toolCallId": call["id"], "content": {"dice": "2d6", "rolls": [3, 4], "total": 7}},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["message"]["content"]
            .as_str()
            .unwrap()
            .contains("total 7"),
        "{body}"
    );
    let (_, body) = post(
        &url,
        &json!({"messages": [{"role": "user", "content": "go to the hall"}]}),
    )
    .await;
    assert_eq!(
        body["message"].get("toolCalls"),
        None,
        "no map without a session, and no toolCalls key"
    );
    assert!(
        body["message"]["content"]
            .as_str()
            .unwrap()
            .contains("session")
    );
}

/// Every story frame of a turn, as the player and a spectator saw it.
async fn play_watched(app: &TestApp, text: &str) -> (Vec<Value>, Vec<Value>, Session) {
    let s = app.demo().await;
    let (mut player, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = app.connect(&s.session_id, &s.spectator_token, None).await;
    let frames = player.play(text, "r-1").await;
    let done = frames
        .iter()
        .find(|f| f["type"] == "turn_completed" || f["type"] == "turn_failed")
        .unwrap();
    let seen = spectator
        .until_turn_end(done["turn_id"].as_str().unwrap())
        .await;
    let story = |frames: &[Value]| -> Vec<Value> {
        frames
            .iter()
            .filter(|f| f.get("seq").is_some() && f["type"] != "presence")
            .cloned()
            .collect()
    };
    let (mine, theirs) = (story(&frames), story(&seen));
    assert_eq!(
        mine, theirs,
        "the spectator sees exactly the player's story"
    );
    (mine, frames, s)
}

#[actix_web::test]
async fn interleaved_calls_run_once_each_in_order() {
    let mock = start_mock(|n| {
        Canned::Sse(if n == 0 {
            tool_chunks(vec![
                json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"di"}}),
                json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "move_options", "arguments": "{"}}),
                json!({"index": 0, "function": {"arguments": "ce\":\"1d4\",\"reason\":\"luck\"}"}}),
                json!({"index": 1, "function": {"arguments": "}"}}),
            ])
        } else {
            text_chunks(&["Both done."])
        })
    })
    .await;
    let app = app_for(&mock, None).await;
    let (story, _, s) = play_watched(&app, "do two things").await;
    let calls: Vec<String> = of_type(&story, "tool_call")
        .iter()
        .map(|f| format!("{} {}", f["call_id"], f["tool"]))
        .collect();
    assert_eq!(
        calls,
        [r#""call_a" "roll_dice""#, r#""call_b" "move_options""#]
    );
    assert!(
        of_type(&story, "tool_result")
            .iter()
            .all(|r| r["status"] == "ok")
    );
    let actions = app.actions(&s).await;
    assert_eq!(actions.len(), 2, "each call journalled once: {actions:#?}");
    assert_eq!(mock.count(), 2);
}

#[actix_web::test]
async fn malformed_arguments_are_refused_and_the_model_hears_why() {
    let bad = [
        "{\"dice\":\"1d6\"",
        "{\"dice\":\"1d6\"} and more",
        "null",
        "[\"1d6\"]",
    ];
    for args in bad {
        let mock = start_mock(move |n| {
            Canned::Sse(if n == 0 {
                tool_chunks(vec![
                    json!({"index": 0, "id": "call_x", "type": "function", "function": {"name": "roll_dice", "arguments": args}}),
                ])
            } else {
                text_chunks(&["The dice slip from your hand."])
            })
        })
        .await;
        let app = app_for(&mock, None).await;
        let (story, _, s) = play_watched(&app, "roll").await;
        let result = first(&story, "tool_result");
        assert_eq!(
            (result["status"].as_str(), result["reason"].as_str()),
            (Some("error"), Some("invalid_args")),
            "{args}: {result}"
        );
        assert_eq!(
            first(&story, "turn_completed")["reply"],
            "The dice slip from your hand.",
            "{args}"
        );
        assert!(app.actions(&s).await.is_empty(), "{args}: nothing ran");
        let messages = mock.request(1)["messages"].as_array().unwrap().clone();
        let heard = messages.iter().find(|m| m["role"] == "tool").unwrap();
        assert!(
            heard["content"].as_str().unwrap().contains("INVALID_ARGS"),
            "{args}: {heard}"
        );
    }
}

#[actix_web::test]
async fn two_server_errors_then_success_is_one_clean_turn() {
    let mock = start_mock(|n| {
        if n < 2 {
            Canned::Status(500, None)
        } else {
            Canned::Sse(text_chunks(&["Third time lucky."]))
        }
    })
    .await;
    let app = app_for(&mock, None).await;
    let (story, _, _) = play_watched(&app, "hello").await;
    assert_eq!(
        first(&story, "turn_completed")["reply"],
        "Third time lucky."
    );
    assert_eq!(of_type(&story, "narrative_delta").len(), 1, "no text twice");
    assert_eq!(mock.count(), 3);
}

#[actix_web::test]
async fn a_model_that_calls_tools_forever_gets_a_tool_less_last_call() {
    let mock = start_mock(|n| {
        Canned::Sse(if n < 7 {
            tool_chunks(vec![
                json!({"index": 0, "id": format!("call_{n}"), "type": "function", "function": {"name": "roll_dice", "arguments": format!("{{\"dice\":\"1d{}\",\"reason\":\"luck\"}}", n + 2)}}),
            ])
        } else {
            text_chunks(&["You roll until your arms ache, ", "and the night wears on."])
        })
    })
    .await;
    let app = app_for(&mock, None).await;
    let (story, _, s) = play_watched(&app, "roll forever").await;
    let done = first(&story, "turn_completed");
    assert_eq!(done["limit"], "max_iterations");
    assert_eq!(
        done["reply"],
        "You roll until your arms ache, and the night wears on."
    );
    // QUESTD_MAX_ITERATIONS (8) model calls in all: seven with tools,
    // and the last, the closing one, without.
    assert_eq!(of_type(&story, "tool_call").len(), 7);
    assert_eq!(app.actions(&s).await.len(), 7, "each roll journalled once");
    assert_eq!(done["iterations"], 8);
    assert_eq!(mock.count(), 8, "no model call past the limit");
    let last = mock.request(7);
    assert_eq!(
        last["tool_choice"], "none",
        "the closing call has tools off"
    );
    assert_eq!(mock.request(6)["tool_choice"], "auto");
}

async fn contract_app(mock: &Mock) -> TestApp {
    let provider = OpenAiProvider::new(&mock.url, "m", Some("k".into()), true)
        .unwrap()
        .with_json_contract();
    spawn_with(|_| {}, Arc::new(provider)).await
}

/// A JSON answer streamed in small pieces, as a model writes it.
fn json_answer(answer: &str) -> Canned {
    let chars: Vec<char> = answer.chars().collect();
    let pieces: Vec<String> = chars.chunks(7).map(|c| c.iter().collect()).collect();
    let parts: Vec<&str> = pieces.iter().map(String::as_str).collect();
    Canned::Sse(text_chunks(&parts))
}

const ROLL: &str = r#"{"assistant_text": "", "dialog_type": "narration", "tool_calls": [{"id": "c1", "tool": "roll_dice", "args": {"dice": "2d6", "reason": "luck"}}]}"#;
const TOLD: &str = r#"{"assistant_text": "The bones rattle. 好运！", "dialog_type": "narration", "tool_calls": []}"#;

#[actix_web::test]
async fn the_json_reply_contract_runs_tools_and_narrates_without_raw_json() {
    let mock = start_mock(|n| json_answer(if n == 0 { ROLL } else { TOLD })).await;
    let app = contract_app(&mock).await;
    let (story, _, s) = play_watched(&app, "roll").await;
    let result = first(&story, "tool_result");
    assert_eq!(
        (result["tool"].as_str(), result["status"].as_str()),
        (Some("roll_dice"), Some("ok"))
    );
    let narrated: String = of_type(&story, "narrative_delta")
        .iter()
        .map(|f| f["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        narrated, "The bones rattle. 好运！",
        "players never see the JSON"
    );
    assert_eq!(
        first(&story, "turn_completed")["reply"],
        "The bones rattle. 好运！"
    );
    assert_eq!(app.actions(&s).await.len(), 1);

    let asked = mock.request(0);
    assert!(
        asked.get("tools").is_none(),
        "no native tools in contract mode"
    );
    assert_eq!(asked["response_format"]["type"], "json_object");
    let system = asked["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("assistant_text") && system.contains("roll_dice"),
        "{system}"
    );
    let followup = mock.request(1);
    let messages = followup["messages"].as_array().unwrap();
    assert!(
        messages.iter().all(|m| m["role"] != "tool"),
        "{messages:#?}"
    );
    let results = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(
        results.starts_with("Tool results:") && results.contains("\"total\""),
        "{results}"
    );
}

#[actix_web::test]
async fn a_broken_contract_answer_gets_one_correction_then_invalid_ai_json() {
    // 0: text around the JSON -> corrected by 1; 2 and 3: a narration that
    // claims a move no tool made, twice -> INVALID_AI_JSON; 4: fine.
    let mock = start_mock(|n| match n {
        0 => json_answer(&format!("Sure! {ROLL}")),
        1 => json_answer(ROLL),
        2 => json_answer(TOLD),
        3 | 4 => json_answer(
            r#"{"assistant_text": "You step into the flooded hall.", "tool_calls": []}"#,
        ),
        5 => json_answer(r#"{"assistant_text": "Still dry.""#),
        _ => json_answer(TOLD),
    })
    .await;
    let app = contract_app(&mock).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;

    let frames = ws.play("roll", "r-1").await;
    assert_eq!(first(&frames, "tool_result")["status"], "ok");
    assert_eq!(
        first(&frames, "turn_completed")["reply"],
        "The bones rattle. 好运！"
    );
    let corrected = mock.request(1);
    let correction = corrected["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(correction["role"], "user");
    assert!(
        correction["content"].as_str().unwrap().contains("rejected"),
        "{correction}"
    );

    let frames = ws.play("go to the hall", "r-2").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "INVALID_AI_JSON", "{failed}");
    // The short reason only: what the model wrote and why it was refused
    // stay in the log.
    assert_eq!(
        failed["message"], "the model's answer could not be understood",
        "{failed}"
    );
    for detail in ["flooded hall", "twice", "contract"] {
        assert!(!failed.to_string().contains(detail), "{detail}: {failed}");
    }
    assert!(
        of_type(&frames, "narrative_delta").is_empty(),
        "a refused answer never reaches players"
    );
    let position = app.snapshot(&s).await["characters"][0]["area_id"].clone();
    assert_eq!(position, "area_001", "narration alone moved no one");

    let frames = ws.play("and now?", "r-3").await;
    assert_eq!(
        first(&frames, "turn_completed")["reply"],
        "The bones rattle. 好运！"
    );
    assert_eq!(mock.count(), 7);
}

#[actix_web::test]
async fn without_streaming_the_same_turn_plays_and_usage_is_counted() {
    let mock = start_mock(|n| {
        Canned::Json(if n == 0 {
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_a", "type": "function",
                    "function": {"name": "roll_dice", "arguments": "{\"dice\":\"1d20\",\"reason\":\"luck\"}"}}]}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20}})
        } else {
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "A natural twenty? 也许。"}}],
                "usage": {"prompt_tokens": 150, "completion_tokens": 9}})
        })
    })
    .await;
    let provider = OpenAiProvider::new(&mock.url, "m", Some("k".into()), false).unwrap();
    let app = spawn_with(|_| {}, Arc::new(provider)).await;
    let (story, _, s) = play_watched(&app, "roll").await;
    assert_eq!(first(&story, "tool_result")["status"], "ok");
    let done = first(&story, "turn_completed");
    assert_eq!(done["reply"], "A natural twenty? 也许。");
    assert_eq!(
        done["usage"],
        json!({"prompt_tokens": 250, "completion_tokens": 29}),
        "usage summed over the turn's model calls"
    );
    assert_eq!(
        of_type(&story, "narrative_delta").len(),
        1,
        "the whole text at once"
    );
    assert_eq!(mock.request(0)["stream"], false);
    assert!(mock.request(0).get("stream_options").is_none());
    let (status, audit) = get(
        &format!("{}/api/v1/sessions/{}/audit", app.base, s.session_id),
        Some(&s.player_token),
    )
    .await;
    assert_eq!(status, 200, "{audit}");
    let row = &audit["entries"][0];
    assert_eq!(row["tool"], "roll_dice", "{audit}");
    assert_eq!(
        (
            row["prompt_tokens"].as_u64(),
            row["completion_tokens"].as_u64()
        ),
        (Some(100), Some(20)),
        "the call's row carries the tokens of the model call that asked for it: {row}"
    );
}

/// The text of the last message of a request the mock received.
fn last_content(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[actix_web::test]
async fn the_stateless_chat_api_keeps_a_sessions_guards() {
    let mock = start_mock(|n| match n {
        // Ten rounds in: asked without tools, it still asks for one.
        0 => Canned::Sse(tool_chunks(vec![
            json!({"index": 0, "id": "x", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"dice\":\"1d4\",\"reason\":\"luck\"}"}}),
        ])),
        1 => Canned::Sse(text_chunks(&["The dice are put away."])),
        // An unusable call, then a valid one.
        2 => Canned::Sse(tool_chunks(vec![
            json!({"index": 0, "id": "y", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"sides\":3}"}}),
        ])),
        3 => Canned::Sse(tool_chunks(vec![
            json!({"index": 0, "id": "z", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"dice\":\"1d20\",\"reason\":\"luck\"}"}}),
        ])),
        // A silent answer, then text.
        4 => Canned::Sse(text_chunks(&[" "])),
        _ => Canned::Sse(text_chunks(&["A cold wind answers."])),
    })
    .await;
    let app = app_for(&mock, None).await;
    let url = format!("{}/api/chat", app.base);

    let mut messages = vec![json!({"role": "user", "content": "roll forever"})];
    for i in 0..10 {
        let id = format!("c{i}");
        messages.push(json!({"role": "assistant", "content": null, "toolCalls": [
            {"id": id, "tool": {"name": "roll_dice", "args": {"dice": format!("{}d6", i + 1), "reason": "luck"}}}]}));
        messages.push(json!({"role": "tool", "toolCallId": id, "content": {"total": 3}}));
    }
    let (status, body) = post_keyed(&url, &json!({"messages": messages})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"message": {"role": "assistant", "content": "The dice are put away."}}),
        "the calls asked for without tools are dropped; no toolCalls key"
    );
    assert_eq!(mock.request(0)["tool_choice"], "none");

    let ask = json!({"messages": [{"role": "user", "content": "roll"}]});
    let (status, body) = post_keyed(&url, &ask).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["message"]["toolCalls"],
        json!([{"id": "z", "tool": {"name": "roll_dice", "args": {"dice": "1d20", "reason": "luck"}}}])
    );
    assert!(
        last_content(&mock.request(3)).contains("unusable tool call"),
        "{}",
        mock.request(3)
    );

    let (status, body) = post_keyed(&url, &ask).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"message": {"role": "assistant", "content": "A cold wind answers."}})
    );
    assert!(
        last_content(&mock.request(5)).contains("no text and calls no tool"),
        "{}",
        mock.request(5)
    );
    assert_eq!(mock.count(), 6);
}

/// A server whose model is built from the settings as `questd serve`
/// builds it: the first endpoint `primary`, and `fallback` if given, each
/// with the key `k`; `adjust` sets the rest.
async fn app_from_settings(
    primary: &Mock,
    fallback: Option<&Mock>,
    dir: Arc<tempfile::TempDir>,
    adjust: impl Fn(&mut questd::Settings) + Copy,
) -> TestApp {
    let mut settings = settings_in(&dir);
    settings.llm_provider = questd::config::LlmProvider::Openai;
    settings.llm_base_url = Some(primary.url.clone());
    settings.llm_model = Some("big".into());
    settings.llm_api_key = Some("k".into());
    if let Some(fallback) = fallback {
        settings.llm_fallback_base_url = Some(fallback.url.clone());
        settings.llm_fallback_model = Some("small".into());
        settings.llm_fallback_api_key = Some("k".into());
    }
    adjust(&mut settings);
    let provider = questd::startup::provider_from(&settings).expect("the models are configured");
    spawn_in(dir, adjust, provider).await
}

#[actix_web::test]
async fn a_failing_model_hands_the_rest_of_its_turn_to_the_fallback() {
    // The first model fails its first call and its two retries, then works.
    let primary = start_mock(|n| {
        if n < 3 {
            Canned::Status(500, None)
        } else {
            Canned::Sse(text_chunks(&["The first model is back."]))
        }
    })
    .await;
    let roll = json!({"id": "call_a", "function": {"name": "roll_dice",
        "arguments": "{\"dice\":\"1d20\",\"reason\":\"luck\"}"}});
    let fallback = start_mock(move |n| {
        Canned::Sse(if n == 0 {
            tool_chunks(vec![roll.clone()])
        } else {
            text_chunks(&["The fallback rolled."])
        })
    })
    .await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = app_from_settings(&primary, Some(&fallback), dir, |_| {}).await;
    let (story, _, s) = play_watched(&app, "roll").await;
    assert_eq!(first(&story, "tool_result")["status"], "ok");
    let done = first(&story, "turn_completed");
    assert_eq!(done["reply"], "The fallback rolled.", "{done}");
    assert_eq!(
        done["model"], "small",
        "the model that answered last: {done}"
    );
    assert_eq!(primary.count(), 3, "one call and its two retries");
    assert_eq!(
        fallback.count(),
        2,
        "the fallback answered the failed call and the turn's next one"
    );
    assert_eq!(fallback.request(0)["model"], "small");
    // The next turn asks the first model again.
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("again", "r-2").await;
    let done = first(&frames, "turn_completed");
    assert_eq!(done["reply"], "The first model is back.", "{done}");
    assert_eq!(done["model"], "big", "{done}");
    assert_eq!((primary.count(), fallback.count()), (4, 2));
    // Over HTTP the answer names the model too.
    let chat = json!({"session_id": s.session_id, "message": "once more", "request_id": "r-3"});
    let a = chat_over_http(&app.base, &s.player_token, &chat).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["model"], "big", "{}", a.body);
}

#[actix_web::test]
async fn without_a_fallback_a_failing_model_fails_the_turn_and_names_no_model() {
    let primary = start_mock(|_| Canned::Status(500, None)).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = app_from_settings(&primary, None, dir, |_| {}).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "UPSTREAM_ERROR", "{failed}");
    assert!(failed.get("model").is_none(), "{failed}");
}

/// The chat `text` refused for a spent budget on `ws`: its `error` frame.
async fn refused_for_budget(ws: &mut Ws, text: &str, request_id: &str) -> Value {
    ws.chat(text, request_id).await;
    let reply = ws.until_reply().await.pop().expect("a reply");
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["error_code"], "BUDGET_EXCEEDED", "{reply}");
    assert_eq!(reply["request_id"], request_id, "{reply}");
    let wait = reply["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(
        wait > 0 && wait <= 86_400_000,
        "until the UTC day ends: {reply}"
    );
    reply
}

#[actix_web::test]
async fn a_spent_session_budget_refuses_chats_until_midnight_even_after_a_restart() {
    // Every answer costs 11 + 4 = 15 tokens.
    let mock = start_mock(|_| Canned::Sse(text_chunks(&["Fine."]))).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let budget = |s: &mut questd::Settings| {
        s.budget_session_tokens = Some(20);
        s.idle_secs = 1;
    };
    let app = app_from_settings(&mock, None, dir.clone(), budget).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    // 0 and 15 spent: under 20, so both turns call the model.
    for n in 1..=2 {
        let frames = ws.play("hello", &format!("r-{n}")).await;
        assert_eq!(first(&frames, "turn_completed")["reply"], "Fine.");
    }
    assert_eq!(mock.count(), 2);
    refused_for_budget(&mut ws, "hello", "r-3").await;
    // The same chat sent again is still the turn it was.
    ws.chat("hello", "r-2").await;
    let again = ws.until_reply().await.pop().expect("a reply");
    assert_eq!(
        (&again["type"], &again["duplicate"]),
        (&json!("ack"), &json!(true)),
        "{again}"
    );
    // Over HTTP: 429 with Retry-After.
    let chat = json!({"session_id": s.session_id, "message": "hello", "request_id": "h-1"});
    let a = chat_over_http(&app.base, &s.player_token, &chat).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.body["error_code"], "BUDGET_EXCEEDED", "{}", a.body);
    retry_after_the_day_ends(&a);
    // Another session has its own budget.
    let other = app.demo().await;
    let (mut ws2, _) = app
        .connect(&other.session_id, &other.player_token, None)
        .await;
    let frames = ws2.play("hello", "o-1").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "Fine.");
    assert_eq!(mock.count(), 3, "no model call was made for a refused chat");

    // Nor does the session's unloading while idle and loading again.
    drop(ws);
    crate::timers::not_live_here(&app, &s, "the spent session unloads while idle").await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    refused_for_budget(&mut ws, "hello", "r-5").await;

    // A restart does not reset what was spent.
    drop((ws, ws2));
    app.stop().await;
    drop(app);
    let app = app_from_settings(&mock, None, dir, budget).await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    refused_for_budget(&mut ws, "hello", "r-4").await;
    assert_eq!(mock.count(), 3);
}

#[actix_web::test]
async fn a_tenants_and_a_nodes_budget_count_every_session_and_the_stateless_api() {
    let mock = start_mock(|_| Canned::Sse(text_chunks(&["Fine."]))).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = app_from_settings(&mock, None, dir, |s| s.budget_tenant_tokens = Some(25)).await;
    let (a, b) = (app.demo().await, app.demo().await);
    let (mut wa, _) = app.connect(&a.session_id, &a.player_token, None).await;
    let (mut wb, _) = app.connect(&b.session_id, &b.player_token, None).await;
    wa.play("hello", "a-1").await;
    wb.play("hello", "b-1").await;
    // 30 of 25 spent by the tenant's two sessions: both are refused.
    refused_for_budget(&mut wa, "hello", "a-2").await;
    refused_for_budget(&mut wb, "hello", "b-2").await;
    // So is the stateless API for the same tenant, before any model call.
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = post_keyed(&format!("{}/api/chat", app.base), &body).await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error_code"], "BUDGET_EXCEEDED", "{answer}");
    assert_eq!(mock.count(), 2);

    let mock = start_mock(|_| Canned::Sse(text_chunks(&["Fine."]))).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = app_from_settings(&mock, None, dir, |s| s.budget_node_tokens = Some(10)).await;
    // The stateless API spends from the node's budget too.
    let (status, answer) = post_keyed(&format!("{}/api/chat", app.base), &body).await;
    assert_eq!(status, 200, "{answer}");
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    refused_for_budget(&mut ws, "hello", "n-1").await;
    assert_eq!(mock.count(), 1);
}

/// `a` says to retry once the UTC day ends: a `Retry-After` of 1 s to a day.
fn retry_after_the_day_ends(a: &Answer) {
    let after: u64 = a
        .retry_after
        .as_deref()
        .unwrap_or("")
        .parse()
        .expect("Retry-After");
    assert!((1..=86_400).contains(&after), "{after}");
}

#[actix_web::test]
async fn a_chat_queued_while_the_budget_had_room_fails_its_turn_once_it_is_spent() {
    let go = Arc::new(tokio::sync::Notify::new());
    let answer = go.clone();
    let mock = start_mock(move |_| Canned::After(answer.clone(), text_chunks(&["Fine."]))).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let app = app_from_settings(&mock, None, dir, |s| s.budget_session_tokens = Some(10)).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    ws.chat("first", "r-1").await;
    let first_ack = ws.until_reply().await.pop().unwrap();
    assert_eq!(first_ack["type"], "ack", "{first_ack}");
    while mock.count() == 0 {
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing is spent yet: the second chat is taken, queued behind the first.
    ws.chat("second", "r-2").await;
    let second_ack = ws.until_reply().await.pop().unwrap();
    assert_eq!(second_ack["type"], "ack", "{second_ack}");
    let second = second_ack["turn_id"].as_str().unwrap().to_owned();
    go.notify_one();
    let frames = ws.until_turn_end(&second).await;
    let done = first(&frames, "turn_completed");
    assert_eq!(done["turn_id"], first_ack["turn_id"], "{done}");
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["turn_id"], second.as_str(), "{failed}");
    assert_eq!(failed["error_code"], "BUDGET_EXCEEDED", "{failed}");
    assert_eq!(mock.count(), 1, "the second turn called no model");
    // Asked again over HTTP: the failed turn, as 429 with Retry-After.
    let chat = json!({"session_id": s.session_id, "message": "second", "request_id": "r-2"});
    let a = chat_over_http(&app.base, &s.player_token, &chat).await;
    assert_eq!(
        (a.status, &a.body["error_code"], &a.body["duplicate"]),
        (429, &json!("BUDGET_EXCEEDED"), &json!(true)),
        "{}",
        a.body
    );
    retry_after_the_day_ends(&a);
}

/// Nodes A and B on one fresh PostgreSQL database, asking the model at
/// `url` (`big`), with a tenant budget of 25 tokens a day; the directory
/// holds the database's name for as long as it lives.
fn two_nodes_with_a_tenant_budget_of_25(
    url: &str,
) -> (
    tempfile::TempDir,
    crate::process::Server,
    crate::process::Server,
) {
    let (dir, db) = crate::cluster::database();
    let model = [
        ("QUESTD_LLM_PROVIDER", "openai"),
        ("QUESTD_LLM_BASE_URL", url),
        ("QUESTD_LLM_MODEL", "big"),
        ("QUESTD_LLM_API_KEY", "k"),
        ("QUESTD_BUDGET_TENANT_TOKENS", "25"),
    ];
    let a = crate::cluster::node_with(&db, "node-a", &model);
    let b = crate::cluster::node_with(&db, "node-b", &model);
    (dir, a, b)
}

#[actix_web::test]
async fn a_tenants_budget_counts_its_spending_on_every_node_of_a_database() {
    let mock = start_mock(|_| Canned::Sse(text_chunks(&["Fine."]))).await;
    let (_dir, a, b) = two_nodes_with_a_tenant_budget_of_25(&mock.url);
    // Two turns on node A: 30 of the tenant's 25 tokens.
    let s = a.demo().await;
    let (mut ws, _) = a.connect(&s.session_id, &s.player_token, None).await;
    for n in 1..=2 {
        let frames = ws.play("hello", &format!("r-{n}")).await;
        assert_eq!(first(&frames, "turn_completed")["model"], "big");
    }
    // A session of the same tenant on node B is refused before any call.
    let other = b.demo().await;
    let (mut wb, _) = b
        .connect(&other.session_id, &other.player_token, None)
        .await;
    refused_for_budget(&mut wb, "hello", "b-1").await;
    assert_eq!(mock.count(), 2);
}

#[actix_web::test]
async fn a_node_reads_a_tenants_spending_on_other_nodes_again_while_it_plays() {
    // The first two answers cost 15 tokens each; the rest cost nothing, so
    // node B's own turns never spend the tenant's budget.
    let free = sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": "Free."}}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}}),
    ]);
    let mock = start_mock(move |n| {
        Canned::Sse(if n < 2 {
            text_chunks(&["Fine."])
        } else {
            free.clone()
        })
    })
    .await;
    let (_dir, a, b) = two_nodes_with_a_tenant_budget_of_25(&mock.url);
    // Node B has read the tenant's spending (nothing yet) for its session.
    let late = b.demo().await;
    let (mut wb, _) = b.connect(&late.session_id, &late.player_token, None).await;
    // Then node A spends 30 of the tenant's 25 tokens.
    let s = a.demo().await;
    let (mut wa, _) = a.connect(&s.session_id, &s.player_token, None).await;
    for n in 1..=2 {
        wa.play("hello", &format!("a-{n}")).await;
    }
    // Node B reads it again while its session plays (every 10 s): its
    // chats, free ones, are refused once it has.
    let mut refused = None;
    for n in 0..60 {
        wb.chat("hello", &format!("b-{n}")).await;
        let reply = wb.until_reply().await.pop().expect("a reply");
        if reply["type"] == "error" {
            refused = Some(reply);
            break;
        }
        wb.until_turn_end(reply["turn_id"].as_str().unwrap()).await;
        actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    }
    let refused = refused.expect("node B refuses the tenant's chats within a minute");
    assert_eq!(refused["error_code"], "BUDGET_EXCEEDED", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("tenant"),
        "{refused}"
    );
}
