//! Traces (docs/protocol.md §12): questd run with an OTLP endpoint exports
//! each turn's spans there, a `turn` span with `model_call` and
//! `tool_call` children, in the trace of the `traceparent` its client
//! sent. questd runs as a process of its own: the exporter is the
//! process's, as in production, and nothing of it reaches the other tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::common::{Api, Ws, request, turn};
use crate::process::Server;

/// The client's trace and span, as its `traceparent` names them.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";
/// The trace of the chat sent over HTTP.
const HTTP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HTTP_PARENT: &str = "00f067aa0ba902b7";

/// How long the spans may take to arrive in all: the batch waits 50 ms
/// here (`OTEL_BSP_SCHEDULE_DELAY`), the rest is a loaded machine.
const EXPORT_WAIT: Duration = Duration::from_secs(60);

/// An OTLP/HTTP collector on 127.0.0.1: keeps the body of every
/// `POST /v1/traces`.
struct Collector {
    base: String,
    bodies: Arc<Mutex<Vec<web::Bytes>>>,
    handle: actix_web::dev::ServerHandle,
}

impl Collector {
    async fn start() -> Self {
        let bodies: Arc<Mutex<Vec<web::Bytes>>> = Arc::default();
        let kept = web::Data::from(bodies.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(kept.clone())
                .app_data(web::PayloadConfig::new(16 << 20))
                .route(
                    "/v1/traces",
                    web::post().to(
                        |body: web::Bytes, kept: web::Data<Mutex<Vec<web::Bytes>>>| async move {
                            kept.lock().unwrap().push(body);
                            HttpResponse::Ok()
                                .content_type("application/x-protobuf")
                                .finish()
                        },
                    ),
                )
        })
        .workers(1)
        .bind(("127.0.0.1", 0))
        .unwrap();
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self {
            base: format!("http://127.0.0.1:{port}"),
            bodies,
            handle,
        }
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Span> {
        let bodies = self.bodies.lock().unwrap().clone();
        bodies
            .iter()
            .map(|b| ExportTraceServiceRequest::decode(b.as_ref()).expect("an OTLP export"))
            .flat_map(|r| r.resource_spans)
            .inspect(|r| {
                let resource = r.resource.as_ref().expect("a resource");
                assert_eq!(
                    text(&resource.attributes, "service.name").as_deref(),
                    Some("questd")
                );
            })
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect()
    }

    /// The spans received once `done` holds for them; fails the test
    /// if that takes longer than [`EXPORT_WAIT`].
    async fn spans_once(&self, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + EXPORT_WAIT;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the collector has only these spans: {:#?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

/// A string attribute's value.
fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            AnyValue::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `turn` span of `turn_id` among `spans`, if it came.
fn turn_span<'a>(spans: &'a [Span], turn_id: &str) -> Option<&'a Span> {
    spans.iter().find(|s| {
        s.name == "turn" && text(&s.attributes, "questd.turn_id").as_deref() == Some(turn_id)
    })
}

/// The spans named `name` whose parent is `parent`.
fn children<'a>(spans: &'a [Span], parent: &Span, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name == name && s.parent_span_id == parent.span_id)
        .collect()
}

#[actix_web::test]
async fn a_turns_spans_reach_the_collector_in_the_trace_its_client_named() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    let server = Server::start_with(
        &db,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    let s = server.demo().await;

    // A turn over a WebSocket whose upgrade carried a traceparent.
    let url = server.ws_url(&s.session_id, &s.player_token, None);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let mut ws = Ws::connect_with(&url, &[("traceparent", &traceparent)]).await;
    assert_eq!(ws.next_json().await["type"], "welcome");
    let played = turn(&mut ws, "roll 1d20").await;
    assert!(played.called("roll_dice"), "{:?}", played.tools);
    let ws_turn = played.frames.last().unwrap()["turn_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Over HTTP, with another trace; and with a traceparent that does not
    // parse, which is ignored, not refused.
    let chat = format!("{}/api/v1/chat", server.base());
    let bearer = format!("Bearer {}", s.player_token);
    let mut http_turns = Vec::new();
    for parent in [
        format!("00-{HTTP_TRACE}-{HTTP_PARENT}-01"),
        format!("00-{}-{HTTP_PARENT}-01", "0".repeat(32)),
    ] {
        let body = json!({"session_id": s.session_id, "message": "roll 1d6"});
        let headers = [("Authorization", bearer.as_str()), ("traceparent", &parent)];
        let a = request("POST", &chat, &headers, Some(&body)).await;
        assert_eq!(a.status, 200, "{}", a.body);
        http_turns.push(a.body["turn_id"].as_str().unwrap().to_owned());
    }

    let turns: Vec<&str> = [ws_turn.as_str()]
        .into_iter()
        .chain(http_turns.iter().map(String::as_str))
        .collect();
    // A turn's span closes last, after its children.
    let spans = collector
        .spans_once(|spans| turns.iter().all(|t| turn_span(spans, t).is_some()))
        .await;

    let ws_span = turn_span(&spans, &ws_turn).unwrap();
    assert_eq!(hex(&ws_span.trace_id), TRACE);
    assert_eq!(hex(&ws_span.parent_span_id), PARENT);
    let attr = |span: &Span, key: &str| text(&span.attributes, key);
    assert_eq!(
        attr(ws_span, "questd.session_id"),
        Some(s.session_id.clone())
    );
    assert_eq!(
        attr(ws_span, "questd.outcome").as_deref(),
        Some("completed")
    );
    let trace_id = attr(ws_span, "questd.trace_id").unwrap();
    assert!(trace_id.starts_with("tr_"), "{trace_id}");
    // The offline game master asks for the roll, then narrates it.
    let models = children(&spans, ws_span, "model_call");
    assert_eq!(models.len(), 2, "{models:#?}");
    let tools = children(&spans, ws_span, "tool_call");
    assert_eq!(tools.len(), 1, "{tools:#?}");
    assert_eq!(attr(tools[0], "questd.tool").as_deref(), Some("roll_dice"));
    assert_eq!(attr(tools[0], "questd.outcome").as_deref(), Some("ok"));
    assert!(attr(tools[0], "questd.call_id").is_some());
    for child in models.iter().chain(&tools) {
        assert_eq!(hex(&child.trace_id), TRACE, "{child:#?}");
        assert!(child.start_time_unix_nano >= ws_span.start_time_unix_nano);
        assert!(child.end_time_unix_nano <= ws_span.end_time_unix_nano);
    }
    for model in &models {
        assert_eq!(attr(model, "questd.outcome").as_deref(), Some("ok"));
    }

    let http_span = turn_span(&spans, &http_turns[0]).unwrap();
    assert_eq!(hex(&http_span.trace_id), HTTP_TRACE);
    assert_eq!(hex(&http_span.parent_span_id), HTTP_PARENT);
    assert_eq!(children(&spans, http_span, "tool_call").len(), 1);

    // An invalid traceparent: the turn's span is a root of its own trace.
    let root = turn_span(&spans, &http_turns[1]).unwrap();
    assert!(root.parent_span_id.is_empty(), "{root:#?}");
    assert_ne!(hex(&root.trace_id), HTTP_TRACE);
    assert_eq!(children(&spans, root, "model_call").len(), 2);
}

#[actix_web::test]
async fn spans_still_waiting_are_sent_when_questd_stops() {
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::database_url_in(dir.path());
    // A batch would wait ten minutes: only the stop sends it.
    let server = Server::start_with(
        &db,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{}/v1/traces", collector.base),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    );
    let s = server.demo().await;
    let (mut ws, _) = server.connect(&s.session_id, &s.player_token, None).await;
    let played = turn(&mut ws, "roll 1d20").await;
    let turn_id = played.frames.last().unwrap()["turn_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ws.close().await;
    assert!(collector.spans().is_empty(), "sent before the stop");
    server.signal("TERM");
    let ended = actix_web::rt::task::spawn_blocking(move || server.wait())
        .await
        .unwrap();
    assert!(ended.success(), "{ended}");
    let spans = collector.spans();
    let root = turn_span(&spans, &turn_id).expect("the turn's span, sent at the stop");
    assert!(root.parent_span_id.is_empty(), "no traceparent: a root");
    assert_eq!(children(&spans, root, "tool_call").len(), 1, "{spans:#?}");
}
