//! The OpenAI-compatible provider against a mock endpoint, through real
//! sockets: streaming, tool calls, retries, failures and timeouts.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use common::*;
use questd::llm::OpenAiProvider;
use serde_json::{Value, json};

/// What the mock answers to one request.
#[derive(Clone)]
enum Canned {
    Sse(String),
    Status(u16, Option<&'static str>),
    /// Holds the request open far longer than any test waits.
    Hang,
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
                        Canned::Status(code, retry_after) => {
                            let mut r = HttpResponse::build(
                                actix_web::http::StatusCode::from_u16(code).unwrap(),
                            );
                            if let Some(secs) = retry_after {
                                r.insert_header(("Retry-After", secs));
                            }
                            r.body("{\"error\":{\"message\":\"busy\"}}")
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
        json!({"index": 0, "function": {"arguments": "\"2d6+1\"}"}}),
    ];
    let ollama = vec![
        json!({"id": "call_a", "function": {"name": "roll_dice", "arguments": "{\"dice\":\"2d6+1\"}"}}),
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
        assert_eq!(args, json!({"dice": "2d6+1"}), "{variant}");
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
    assert_eq!(mock.count(), 3, "one try and two retries");
    let frames = ws.play("hello again", "r-2").await;
    assert_eq!(first(&frames, "turn_completed")["reply"], "Recovered.");
    assert_eq!(mock.count(), 4);
}

#[actix_web::test]
async fn a_silent_endpoint_times_out() {
    let mock = start_mock(|_| Canned::Hang).await;
    let app = app_for(&mock, Some(Duration::from_millis(300))).await;
    let s = app.demo().await;
    let (mut ws, _) = app.connect(&s.session_id, &s.player_token, None).await;
    let frames = ws.play("hello", "r-1").await;
    let failed = first(&frames, "turn_failed");
    assert_eq!(failed["error_code"], "AI_TIMEOUT", "{failed}");
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
