//! An OpenAI-compatible chat-completions provider (OpenAI, Ollama, vLLM, ...).
//!
//! One [`Provider::complete`] call is one POST to `{base_url}/chat/completions`.
//! With streaming on, the server-sent events are parsed as they arrive: text
//! goes out as [`ModelEvent::Delta`] at once, tool-call fragments are put
//! back together, and one [`ModelEvent::Done`] closes the stream. Failures
//! that are worth another try (429, 5xx, refused connections) are retried
//! with backoff, but never after text has reached the player; a circuit
//! breaker stops hammering an endpoint that keeps failing.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use rand::Rng;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::{Value, json};

use super::contract::{self, TurnFacts};
use super::history::{self, Step};
use super::{
    LlmError, ModelEvent, ModelReply, ModelRequest, ModelToolCall, Provider, RequestKind, Usage,
    collect_reply, sentence_deltas,
};
use crate::ids::CallId;

/// How long one model call may take, connection and whole answer included.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Extra attempts after a retryable failure.
const MAX_RETRIES: u32 = 2;
/// First backoff delay; doubled on each retry and jittered.
const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// The longest `Retry-After` honoured.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(10);
/// Consecutive failed calls that open the circuit breaker.
const BREAKER_THRESHOLD: u32 = 5;
/// How long an open breaker fails calls fast before letting one through.
const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
/// Characters of an error body quoted in an error message.
const BODY_EXCERPT_CHARS: usize = 200;
/// The SSE payload that ends a stream.
const DONE_MARKER: &str = "[DONE]";
/// Largest answer read from the model, in bytes (streamed or whole); past
/// it the call fails as an answer that cannot be used.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Model calls one provider runs at once; more wait their turn (within the
/// turn's deadline). Each holds a connection, so this bounds the open files
/// model calls take, whatever the number of sessions.
pub const MAX_CONCURRENT_CALLS: usize = 256;

/// Talks to one OpenAI-compatible endpoint.
pub struct OpenAiProvider {
    client: reqwest::Client,
    base_url: String,
    model: String,
    api_key: Option<String>,
    stream: bool,
    /// Ask for tools through the JSON reply contract instead of the
    /// endpoint's tool calling.
    json_contract: bool,
    call_timeout: Duration,
    /// Shared by every call of this provider, across sessions.
    breaker: Arc<Mutex<Breaker>>,
    /// [`MAX_CONCURRENT_CALLS`] permits, shared by every call.
    permits: Arc<Semaphore>,
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("stream", &self.stream)
            .field("json_contract", &self.json_contract)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// A provider for `base_url` (e.g. `http://127.0.0.1:11434/v1`).
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
        stream: bool,
    ) -> Result<Self, LlmError> {
        let base_url = base_url.into().trim().trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base_url)
            .map_err(|e| LlmError::Upstream(format!("invalid model base url {base_url}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(LlmError::Upstream(format!(
                "model base url must be http or https: {base_url}"
            )));
        }
        let model = model.into();
        if model.trim().is_empty() {
            return Err(LlmError::Upstream("model name is empty".into()));
        }
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| LlmError::Upstream(format!("cannot build http client: {e}")))?;
        Ok(Self {
            client,
            base_url,
            model,
            api_key: api_key.filter(|k| !k.is_empty()),
            stream,
            json_contract: false,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            breaker: Arc::new(Mutex::new(Breaker::default())),
            permits: Arc::new(Semaphore::new(MAX_CONCURRENT_CALLS)),
        })
    }

    /// The same provider with another limit on one whole call.
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// The same provider speaking the JSON reply contract
    /// ([`super::contract`]): for models without native tool calling.
    pub fn with_json_contract(mut self) -> Self {
        self.json_contract = true;
        self
    }

    /// One call of this provider with the given body.
    fn call(&self, body: Value) -> Call {
        Call {
            client: self.client.clone(),
            url: format!("{}/chat/completions", self.base_url),
            api_key: self.api_key.clone(),
            body,
            stream: self.stream,
            call_timeout: self.call_timeout,
            breaker: self.breaker.clone(),
            permits: self.permits.clone(),
        }
    }

    /// The JSON body of a contract request: the contract in the system
    /// prompt, the history as plain messages, no `tools`, JSON output asked
    /// for.
    fn contract_body(&self, request: &ModelRequest) -> Value {
        let wrap_up = request.kind == RequestKind::WrapUp;
        let system = format!(
            "{}\n\n{}",
            system_text(request),
            contract::contract_prompt(&request.tools, wrap_up)
        );
        let mut messages = vec![json!({"role": "system", "content": system})];
        messages.extend(contract::history_messages(&request.messages));
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": self.stream,
            "response_format": {"type": "json_object"},
        });
        if self.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// The JSON body for one request.
    fn body(&self, request: &ModelRequest) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": messages(request),
            "stream": self.stream,
        });
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.to_vec());
            if request.kind == RequestKind::WrapUp {
                body["tool_choice"] = json!("none");
            } else {
                body["tool_choice"] = json!("auto");
                body["parallel_tool_calls"] = json!(false);
            }
        }
        if self.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn writes_content(&self) -> bool {
        true
    }

    fn complete(&self, request: ModelRequest) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
        if self.json_contract && request.kind != RequestKind::Content {
            let facts = TurnFacts {
                moved: contract::turn_facts(&request.messages).moved,
                wrap_up: request.kind == RequestKind::WrapUp,
            };
            let body = self.contract_body(&request);
            let call = self.call(body);
            return stream::once(contract_answer(call, facts))
                .flat_map(|events| stream::iter(events.unwrap_or_else(|e| vec![Err(e)])))
                .boxed();
        }
        events(self.call(self.body(&request)))
    }
}

/// A contract answer: the model's JSON checked against the contract, with
/// one corrective retry that quotes what was wrong. The answer is checked
/// whole before anything reaches players, so its text goes out as
/// sentence deltas after the check, never as raw JSON.
async fn contract_answer(
    first: Call,
    facts: TurnFacts,
) -> Result<Vec<Result<ModelEvent, LlmError>>, LlmError> {
    let answer = collect_reply(events(first.clone())).await?;
    let mut usage = answer.usage;
    let reply = match contract::parse_reply(&answer.text, facts) {
        Ok(reply) => reply,
        Err(problem) => {
            tracing::info!(%problem, "model broke the JSON reply contract; asking again");
            let correction = [
                json!({"role": "assistant", "content": answer.text}),
                json!({"role": "user", "content": contract::corrective_message(&problem)}),
            ];
            let retry = collect_reply(events(first.again(Some(&correction)))).await?;
            usage += retry.usage;
            contract::parse_reply(&retry.text, facts).map_err(|again| {
                LlmError::InvalidReply(format!(
                    "the model broke the JSON reply contract twice: {again}"
                ))
            })?
        }
    };
    let reply = ModelReply { usage, ..reply };
    let mut out: Vec<Result<ModelEvent, LlmError>> = sentence_deltas(&reply.text)
        .into_iter()
        .map(|d| Ok(ModelEvent::Delta(d)))
        .collect();
    out.push(Ok(ModelEvent::Done(reply)));
    Ok(out)
}

/// The events of one call, as they arrive.
fn events(call: Call) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
    let state = CallState {
        call,
        queue: VecDeque::new(),
        body: None,
        received: 0,
        permit: None,
        sse: SseParser::default(),
        acc: Accumulator::default(),
        started: false,
        done: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.queue.pop_front() {
                return Some((event, st));
            }
            if st.done {
                return None;
            }
            st.step().await;
        }
    })
    .boxed()
}

/// The parts of the provider one call needs, owned so the stream is `'static`.
#[derive(Clone)]
struct Call {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    body: Value,
    stream: bool,
    call_timeout: Duration,
    breaker: Arc<Mutex<Breaker>>,
    permits: Arc<Semaphore>,
}

impl Call {
    /// The same call again, with `extra` messages appended.
    fn again(&self, extra: Option<&[Value]>) -> Self {
        let mut call = self.clone();
        if let (Some(extra), Some(messages)) = (extra, call.body["messages"].as_array_mut()) {
            messages.extend(extra.iter().cloned());
        }
        call
    }

    /// Sends the request, retrying what is worth retrying, until the server
    /// answers with a success status.
    async fn send(&self) -> Result<reqwest::Response, LlmError> {
        let mut attempt = 0;
        loop {
            let mut req = self
                .client
                .post(&self.url)
                .timeout(self.call_timeout)
                .json(&self.body);
            if let Some(key) = &self.api_key {
                req = req.bearer_auth(key);
            }
            let (error, wait) = match req.send().await {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => {
                    let status = resp.status();
                    let wait = retry_after(resp.headers());
                    let excerpt = self.excerpt(resp.text().await.unwrap_or_default());
                    let error =
                        LlmError::Upstream(format!("model endpoint answered {status}: {excerpt}"));
                    if !retryable_status(status) {
                        return Err(error);
                    }
                    (error, wait)
                }
                Err(e) if e.is_timeout() => return Err(LlmError::Timeout),
                Err(e) if e.is_connect() || e.is_request() => (
                    LlmError::Upstream(format!("cannot reach the model endpoint: {e}")),
                    None,
                ),
                Err(e) => return Err(LlmError::Upstream(format!("model request failed: {e}"))),
            };
            if attempt >= MAX_RETRIES {
                return Err(error);
            }
            let delay = wait.unwrap_or_else(|| backoff(attempt));
            tracing::debug!(attempt, ?delay, %error, "retrying model call");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// A short, key-free piece of an error body.
    fn excerpt(&self, body: String) -> String {
        let mut text: String = body.chars().take(BODY_EXCERPT_CHARS).collect();
        if let Some(key) = &self.api_key {
            text = text.replace(key.as_str(), "[redacted]");
        }
        text.trim().to_owned()
    }

    fn record(&self, ok: bool) {
        if let Ok(mut b) = self.breaker.lock() {
            if ok {
                b.succeeded();
            } else {
                b.failed(Instant::now());
            }
        }
    }
}

/// Whether a status is worth another attempt.
fn retryable_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 429) || status.is_server_error()
}

/// The `Retry-After` delay in seconds, capped.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs).min(RETRY_AFTER_CAP))
}

/// Exponential backoff with jitter: base × 2^attempt × [0.5, 1.5).
fn backoff(attempt: u32) -> Duration {
    let factor: f64 = rand::rng().random_range(0.5..1.5);
    BACKOFF_BASE
        .saturating_mul(1 << attempt.min(16))
        .mul_f64(factor)
}

/// Where one call's stream stands.
struct CallState {
    call: Call,
    /// Events ready to hand out.
    queue: VecDeque<Result<ModelEvent, LlmError>>,
    /// The response body while streaming.
    body: Option<BoxStream<'static, reqwest::Result<bytes::Bytes>>>,
    sse: SseParser,
    acc: Accumulator,
    /// Bytes of the answer read so far, against [`MAX_ANSWER_BYTES`].
    received: usize,
    /// This call's place among [`MAX_CONCURRENT_CALLS`], held from the
    /// request until the answer is read (its connection is open that long).
    permit: Option<OwnedSemaphorePermit>,
    started: bool,
    done: bool,
}

impl CallState {
    /// Moves the call one step on: send, read a body chunk, or finish.
    async fn step(&mut self) {
        if !self.started {
            self.started = true;
            let admitted = self
                .call
                .breaker
                .lock()
                .map_err(|_| LlmError::Upstream("model circuit breaker is poisoned".into()))
                .and_then(|mut b| b.admit(Instant::now()));
            if let Err(e) = admitted {
                self.queue.push_back(Err(e));
                self.done = true;
                return;
            }
            match self.call.permits.clone().acquire_owned().await {
                Ok(permit) => self.permit = Some(permit),
                // Never closed; were it, the call would go on unbounded.
                Err(_) => tracing::error!("the model call permits are closed"),
            }
            match self.call.send().await {
                Ok(resp) if self.call.stream => self.body = Some(resp.bytes_stream().boxed()),
                Ok(resp) => {
                    let parsed = match read_capped(resp).await {
                        Ok(bytes) => parse_completion(&bytes),
                        Err(e) => Err(e),
                    };
                    match parsed {
                        Ok(reply) => self.finish(reply),
                        Err(e) => self.fail(e),
                    }
                }
                Err(e) => self.fail(e),
            }
            return;
        }
        let Some(body) = self.body.as_mut() else {
            self.done = true;
            return;
        };
        let payloads = match body.next().await {
            Some(Ok(bytes)) => {
                self.received = self.received.saturating_add(bytes.len());
                if self.received > MAX_ANSWER_BYTES {
                    return self.fail(too_large());
                }
                self.sse.push(&bytes)
            }
            Some(Err(e)) => return self.fail(body_error(e)),
            None => {
                let mut rest = self.sse.finish();
                // A stream that ends without `[DONE]` still ends the answer.
                rest.push(DONE_MARKER.to_owned());
                rest
            }
        };
        for data in payloads {
            match self.acc.feed(&data) {
                Ok(Fed::Delta(text)) => self.queue.push_back(Ok(ModelEvent::Delta(text))),
                Ok(Fed::Nothing) => {}
                Ok(Fed::Finished) => {
                    let reply = std::mem::take(&mut self.acc).finish();
                    return self.finish(reply);
                }
                Err(e) => return self.fail(e),
            }
        }
    }

    fn finish(&mut self, reply: ModelReply) {
        self.call.record(true);
        if self.body.is_none() && !reply.text.is_empty() {
            self.queue
                .push_back(Ok(ModelEvent::Delta(reply.text.clone())));
        }
        self.queue.push_back(Ok(ModelEvent::Done(reply)));
        self.body = None;
        self.permit = None;
        self.done = true;
    }

    fn fail(&mut self, error: LlmError) {
        self.call.record(false);
        self.queue.push_back(Err(error));
        self.body = None;
        self.permit = None;
        self.done = true;
    }
}

/// The model's answer, whole or streamed, is larger than it may be.
fn too_large() -> LlmError {
    LlmError::InvalidReply(format!(
        "the answer is larger than {MAX_ANSWER_BYTES} bytes"
    ))
}

/// Reads a whole (non-streamed) answer of at most [`MAX_ANSWER_BYTES`].
async fn read_capped(resp: reqwest::Response) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    let mut chunks = resp.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(body_error)?;
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A failure while reading a response body.
fn body_error(e: reqwest::Error) -> LlmError {
    if e.is_timeout() {
        LlmError::Timeout
    } else {
        LlmError::Upstream(format!("model answer broke off: {e}"))
    }
}

/// Splits a server-sent-event byte stream into the `data` of each event.
#[derive(Debug, Default)]
struct SseParser {
    /// Bytes of a line not yet ended (may end inside a UTF-8 character).
    line: Vec<u8>,
    /// `data` lines of the event being read.
    data: Vec<String>,
}

impl SseParser {
    /// Feeds bytes; returns the data of every event they complete.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, &mut out);
            } else {
                self.line.push(b);
            }
        }
        out
    }

    /// The end of the stream: whatever event was still open.
    fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.line_done(&line, &mut out);
        }
        self.dispatch(&mut out);
        out
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<String>) {
        let line = String::from_utf8_lossy(line);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.is_empty() {
            return self.dispatch(out);
        }
        // Comments (`: keep-alive`) and fields other than `data` are ignored.
        if let Some(rest) = line.strip_prefix("data:") {
            self.data
                .push(rest.strip_prefix(' ').unwrap_or(rest).to_owned());
        }
    }

    fn dispatch(&mut self, out: &mut Vec<String>) {
        if !self.data.is_empty() {
            out.push(std::mem::take(&mut self.data).join("\n"));
        }
    }
}

/// What one stream chunk added.
#[derive(Debug, PartialEq)]
enum Fed {
    Delta(String),
    Nothing,
    /// `[DONE]`: the answer is complete.
    Finished,
}

/// A tool call being put together from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// Puts a streamed answer back together.
#[derive(Debug, Default)]
struct Accumulator {
    text: String,
    calls: Vec<PartialCall>,
    usage: Usage,
}

impl Accumulator {
    /// Reads the data of one event.
    fn feed(&mut self, data: &str) -> Result<Fed, LlmError> {
        let data = data.trim();
        if data == DONE_MARKER {
            return Ok(Fed::Finished);
        }
        if data.is_empty() {
            return Ok(Fed::Nothing);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::InvalidReply(format!("stream chunk is not json: {e}")))?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error["message"]
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(LlmError::Upstream(format!(
                "model endpoint sent an error: {message}"
            )));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = parse_usage(usage);
        }
        let delta = &chunk["choices"][0]["delta"];
        if let Some(calls) = delta["tool_calls"].as_array() {
            for call in calls {
                self.add_call_fragment(call);
            }
        }
        match delta["content"].as_str() {
            Some(text) if !text.is_empty() => {
                self.text.push_str(text);
                Ok(Fed::Delta(text.to_owned()))
            }
            _ => Ok(Fed::Nothing),
        }
    }

    fn add_call_fragment(&mut self, fragment: &Value) {
        let index = fragment["index"].as_u64();
        let id = fragment["id"].as_str().filter(|s| !s.is_empty());
        let differs = |c: &PartialCall| id.is_some_and(|id| !c.id.is_empty() && c.id != id);
        let target = match index {
            Some(i) => self
                .calls
                .iter()
                .rposition(|c| c.index == Some(i))
                .filter(|&at| !differs(&self.calls[at])),
            // No index: a new id starts a new call, anything else continues.
            None => self
                .calls
                .len()
                .checked_sub(1)
                .filter(|&at| !differs(&self.calls[at])),
        };
        let at = target.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        let call = &mut self.calls[at];
        if let Some(id) = id {
            call.id = id.to_owned();
        }
        let function = &fragment["function"];
        if let Some(name) = function["name"].as_str()
            && call.name.is_empty()
        {
            call.name = name.to_owned();
        }
        match &function["arguments"] {
            Value::String(s) => call.arguments.push_str(s),
            Value::Null => {}
            // Some servers send the arguments as an object, not as text.
            other => call.arguments.push_str(&other.to_string()),
        }
    }

    fn finish(self) -> ModelReply {
        ModelReply {
            text: self.text,
            tool_calls: self
                .calls
                .into_iter()
                .filter(|c| !c.name.is_empty())
                .map(|c| ModelToolCall {
                    id: CallId::from(c.id),
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            dialog_type: None,
            usage: self.usage,
            ..ModelReply::default()
        }
    }
}

fn parse_usage(usage: &Value) -> Usage {
    Usage {
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or_default(),
        completion_tokens: usage["completion_tokens"].as_u64().unwrap_or_default(),
    }
}

/// Reads a whole (non-streamed) chat completion.
fn parse_completion(bytes: &[u8]) -> Result<ModelReply, LlmError> {
    let body: Value = serde_json::from_slice(bytes)
        .map_err(|e| LlmError::InvalidReply(format!("answer is not json: {e}")))?;
    let message = body["choices"][0]
        .get("message")
        .ok_or_else(|| LlmError::InvalidReply("answer has no choices[0].message".into()))?;
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| {
                    let name = c["function"]["name"].as_str()?;
                    let arguments = match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    Some(ModelToolCall {
                        id: CallId::from(c["id"].as_str().unwrap_or_default()),
                        name: name.to_owned(),
                        arguments,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ModelReply {
        text: message["content"].as_str().unwrap_or_default().to_owned(),
        tool_calls,
        dialog_type: None,
        usage: parse_usage(&body["usage"]),
        ..ModelReply::default()
    })
}

/// The chat messages for a request: the system prompt with the session
/// context, then the history. Tool calls made together become one assistant
/// message followed by their tool messages; calls that got no result and
/// results without their call are left out ([`history::steps`]), since chat
/// endpoints refuse both.
fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": system_text(request)})];
    for step in history::steps(&request.messages) {
        match step {
            Step::User(text) => out.push(json!({"role": "user", "content": text})),
            Step::Assistant(text) => out.push(json!({"role": "assistant", "content": text})),
            Step::Calls(exchanges) => {
                let calls: Vec<Value> = exchanges
                    .iter()
                    .map(|e| {
                        json!({
                            "id": e.call_id,
                            "type": "function",
                            "function": {"name": e.tool, "arguments": e.arguments},
                        })
                    })
                    .collect();
                out.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
                out.extend(exchanges.iter().map(
                    |e| json!({"role": "tool", "tool_call_id": e.call_id, "content": e.content}),
                ));
            }
        }
    }
    out
}

/// The system message: the prompt, then the session context when there is
/// one, serialized without escaping non-ASCII text.
fn system_text(request: &ModelRequest) -> String {
    if request.context.is_null() {
        return request.system.clone();
    }
    let context = serde_json::to_string(&request.context).unwrap_or_default();
    format!("{}\n\nContext:\n{context}", request.system)
}

/// Stops calls to an endpoint that keeps failing, for a while.
#[derive(Debug, Default)]
struct Breaker {
    consecutive_failures: u32,
    /// While set and in the future, calls fail fast.
    open_until: Option<Instant>,
}

impl Breaker {
    /// Whether a call may go out now. Once the cooldown is over, one call
    /// goes through and the breaker stays shut to others until it ends (or
    /// for another cooldown, if it is abandoned).
    fn admit(&mut self, now: Instant) -> Result<(), LlmError> {
        match self.open_until {
            Some(until) if now < until => {
                let secs = until.duration_since(now).as_secs().max(1);
                Err(LlmError::Upstream(format!(
                    "model endpoint is failing; retrying after {secs}s"
                )))
            }
            Some(_) => {
                self.open_until = Some(now + BREAKER_COOLDOWN);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn succeeded(&mut self) {
        self.consecutive_failures = 0;
        self.open_until = None;
    }

    fn failed(&mut self, now: Instant) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if self.consecutive_failures >= BREAKER_THRESHOLD {
            self.open_until = Some(now + BREAKER_COOLDOWN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::HistoryEntry;

    /// Runs SSE text through the parser and accumulator, as a stream would.
    fn run(sse: &str, split_every: usize) -> (Vec<String>, ModelReply) {
        let mut parser = SseParser::default();
        let mut acc = Accumulator::default();
        let mut deltas = Vec::new();
        let mut payloads = Vec::new();
        for piece in sse.as_bytes().chunks(split_every) {
            payloads.extend(parser.push(piece));
        }
        payloads.extend(parser.finish());
        for p in payloads {
            match acc.feed(&p).unwrap() {
                Fed::Delta(d) => deltas.push(d),
                Fed::Nothing => {}
                Fed::Finished => break,
            }
        }
        (deltas, acc.finish())
    }

    fn sse(chunks: &[Value], done: bool) -> String {
        let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        if done {
            s.push_str("data: [DONE]\n\n");
        }
        s
    }

    fn content(text: &str) -> Value {
        json!({"choices": [{"index": 0, "delta": {"content": text}}]})
    }

    fn calls(calls: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
    }

    fn call(id: &str, name: &str, args: &str) -> ModelToolCall {
        ModelToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn streams_are_put_back_together() {
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
        type Case = (
            &'static str,
            String,
            &'static [&'static str],
            Vec<ModelToolCall>,
            Usage,
        );
        let cases: Vec<Case> = vec![
            (
                "text with usage chunk",
                sse(&[content("你好，"), content("world."), usage.clone()], true),
                &["你好，", "world."],
                vec![],
                Usage { prompt_tokens: 7, completion_tokens: 3 },
            ),
            (
                "no usage, no [DONE], crlf and comments",
                ": keep-alive\r\nevent: message\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}".into(),
                &["a", "b"],
                vec![],
                Usage::default(),
            ),
            (
                "fragmented call",
                sse(&[
                    calls(json!([{"index": 0, "id": "c1", "type": "function", "function": {"name": "roll_dice", "arguments": ""}}])),
                    calls(json!([{"index": 0, "function": {"arguments": "{\"dice\":"}}])),
                    calls(json!([{"index": 0, "function": {"arguments": "\"2d6\"}"}}])),
                ], true),
                &[],
                vec![call("c1", "roll_dice", "{\"dice\":\"2d6\"}")],
                Usage::default(),
            ),
            (
                "ollama whole calls, index 0 reused with new ids",
                sse(&[
                    calls(json!([{"index": 0, "id": "a", "function": {"name": "move_options", "arguments": "{}"}}])),
                    calls(json!([{"index": 0, "id": "b", "function": {"name": "roll_dice", "arguments": {"dice": "1d4"}}}])),
                ], false),
                &[],
                vec![call("a", "move_options", "{}"), call("b", "roll_dice", "{\"dice\":\"1d4\"}")],
                Usage::default(),
            ),
            (
                "missing index: new id starts a call, no id appends",
                sse(&[
                    calls(json!([{"id": "x", "function": {"name": "roll_dice", "arguments": "{\"di"}}])),
                    calls(json!([{"function": {"arguments": "ce\":\"1d6\"}"}}])),
                    calls(json!([{"id": "y", "function": {"name": "move_options", "arguments": "{}"}}])),
                ], true),
                &[],
                vec![call("x", "roll_dice", "{\"dice\":\"1d6\"}"), call("y", "move_options", "{}")],
                Usage::default(),
            ),
            (
                "two calls interleaved by index, text alongside",
                sse(&[
                    content("Let me see. "),
                    calls(json!([{"index": 0, "id": "p", "function": {"name": "move_options", "arguments": "{"}},
                                 {"index": 1, "id": "q", "function": {"name": "roll_dice", "arguments": "{\"dice\""}}])),
                    calls(json!([{"index": 1, "function": {"arguments": ":\"1d8\"}"}}, {"index": 0, "function": {"arguments": "}"}}])),
                ], true),
                &["Let me see. "],
                vec![call("p", "move_options", "{}"), call("q", "roll_dice", "{\"dice\":\"1d8\"}")],
                Usage::default(),
            ),
        ];
        for (name, body, deltas, tool_calls, usage) in cases {
            for split in [1, 3, 7, 4096] {
                let (got, reply) = run(&body, split);
                assert_eq!(got, deltas, "{name} split {split}");
                assert_eq!(reply.text, deltas.concat(), "{name} split {split}");
                assert_eq!(reply.tool_calls, tool_calls, "{name} split {split}");
                assert_eq!(reply.usage, usage, "{name} split {split}");
            }
        }
    }

    #[test]
    fn bad_chunks_are_errors() {
        let mut acc = Accumulator::default();
        assert!(matches!(
            acc.feed("{not json"),
            Err(LlmError::InvalidReply(_))
        ));
        assert!(matches!(
            acc.feed(r#"{"error": {"message": "overloaded"}}"#),
            Err(LlmError::Upstream(m)) if m.contains("overloaded")
        ));
        assert_eq!(acc.feed("[DONE]").unwrap(), Fed::Finished);
    }

    #[test]
    fn whole_replies_parse() {
        let body = json!({
            "choices": [{"message": {"content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"dice\":\"1d6\"}"}}
            ]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}
        });
        let reply = parse_completion(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            reply.tool_calls,
            vec![call("c", "roll_dice", "{\"dice\":\"1d6\"}")]
        );
        assert_eq!(reply.usage.prompt_tokens, 5);
        assert!(matches!(
            parse_completion(b"<html>"),
            Err(LlmError::InvalidReply(_))
        ));
        assert!(matches!(
            parse_completion(b"{}"),
            Err(LlmError::InvalidReply(_))
        ));
    }

    fn user(text: &str) -> HistoryEntry {
        HistoryEntry::User {
            turn_id: "t".into(),
            text: text.into(),
            seat_id: None,
        }
    }
    fn tool_call(id: &str) -> HistoryEntry {
        HistoryEntry::ToolCall {
            turn_id: "t".into(),
            call_id: id.into(),
            tool: "roll_dice".into(),
            arguments: "{}".into(),
        }
    }
    fn tool_result(id: &str) -> HistoryEntry {
        HistoryEntry::ToolResult {
            turn_id: "t".into(),
            call_id: id.into(),
            tool: "roll_dice".into(),
            content: format!("r{id}"),
        }
    }

    /// A compact picture of the messages: role, plus call ids or the tool call id.
    fn shape(request: &ModelRequest) -> Vec<String> {
        messages(request)
            .iter()
            .map(|m| match m["role"].as_str().unwrap() {
                "assistant" if m.get("tool_calls").is_some() => {
                    assert!(m["content"].is_null());
                    let ids: Vec<&str> = m["tool_calls"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["id"].as_str().unwrap())
                        .collect();
                    format!("calls:{}", ids.join(","))
                }
                "tool" => format!("tool:{}", m["tool_call_id"].as_str().unwrap()),
                role => role.to_owned(),
            })
            .collect()
    }

    #[test]
    fn history_maps_to_chat_messages() {
        let cases: Vec<(&str, Vec<HistoryEntry>, Vec<&str>)> = vec![
            (
                "plain",
                vec![
                    user("hi"),
                    HistoryEntry::Assistant {
                        turn_id: "t".into(),
                        text: "yo".into(),
                    },
                ],
                vec!["system", "user", "assistant"],
            ),
            (
                "grouped",
                vec![
                    user("go"),
                    tool_call("1"),
                    tool_call("2"),
                    tool_result("1"),
                    tool_result("2"),
                ],
                vec!["system", "user", "calls:1,2", "tool:1", "tool:2"],
            ),
            (
                "interleaved",
                vec![
                    user("go"),
                    tool_call("1"),
                    tool_result("1"),
                    tool_call("2"),
                    tool_result("2"),
                ],
                vec!["system", "user", "calls:1", "tool:1", "calls:2", "tool:2"],
            ),
            (
                "orphan result dropped",
                vec![
                    user("go"),
                    tool_result("9"),
                    tool_call("1"),
                    tool_result("1"),
                    user("again"),
                    tool_result("1"),
                ],
                vec!["system", "user", "calls:1", "tool:1", "user"],
            ),
            (
                "unanswered call dropped",
                vec![
                    user("go"),
                    tool_call("1"),
                    tool_call("2"),
                    tool_result("2"),
                    user("x"),
                    tool_call("3"),
                ],
                vec!["system", "user", "calls:2", "tool:2", "user"],
            ),
        ];
        for (name, history, want) in cases {
            let request = ModelRequest {
                system: "sys".into(),
                messages: history.into_iter().map(Arc::new).collect(),
                tools: Default::default(),
                context: Arc::new(json!({"area": "大厅"})),
                kind: RequestKind::Step,
                results: Vec::new(),
                fallback: false,
            };
            assert_eq!(shape(&request), want, "{name}");
        }
    }

    #[test]
    fn body_keeps_chinese_and_adds_tool_options_only_with_tools() {
        let p = OpenAiProvider::new("http://127.0.0.1:1/v1/", "m", Some("sekrit".into()), true)
            .unwrap();
        let mut request = ModelRequest {
            system: "sys".into(),
            messages: vec![Arc::new(user("你好"))],
            tools: Default::default(),
            context: Arc::new(json!({"area": "大厅"})),
            kind: RequestKind::Step,
            results: Vec::new(),
            fallback: false,
        };
        let body = p.body(&request);
        assert!(
            body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .ends_with("Context:\n{\"area\":\"大厅\"}")
        );
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        assert_eq!(body["stream_options"]["include_usage"], true);
        request.tools = vec![json!({"type": "function", "function": {"name": "roll_dice"}})].into();
        let body = p.body(&request);
        assert_eq!(
            (
                body["tool_choice"].as_str(),
                body["parallel_tool_calls"].as_bool()
            ),
            (Some("auto"), Some(false))
        );
        request.kind = RequestKind::WrapUp;
        let body = p.body(&request);
        assert_eq!(
            body["tool_choice"], "none",
            "a closing call may not use tools"
        );
        assert!(body["tools"].is_array() && body.get("parallel_tool_calls").is_none());
        request.context = Arc::default();
        assert_eq!(p.body(&request)["messages"][0]["content"], "sys");
        let debug = format!("{p:?}");
        assert!(
            !debug.contains("sekrit") && debug.contains("redacted"),
            "{debug}"
        );
        assert!(OpenAiProvider::new("ftp://x", "m", None, true).is_err());
    }

    #[test]
    fn breaker_opens_after_five_failures_and_half_opens() {
        let mut b = Breaker::default();
        let t0 = Instant::now();
        for _ in 0..BREAKER_THRESHOLD - 1 {
            b.failed(t0);
        }
        assert!(b.admit(t0).is_ok());
        b.failed(t0);
        let err = b.admit(t0).unwrap_err().to_string();
        assert!(err.contains("retrying after 30s"), "{err}");
        let later = t0 + BREAKER_COOLDOWN;
        assert!(b.admit(later).is_ok(), "one call goes through");
        assert!(b.admit(later).is_err(), "only one");
        b.failed(later);
        assert!(
            b.admit(later + Duration::from_secs(1)).is_err(),
            "a failed probe reopens"
        );
        b.succeeded();
        assert!(b.admit(later).is_ok());
    }

    #[test]
    fn retry_delays() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "120".parse().unwrap());
        assert_eq!(retry_after(&h), Some(RETRY_AFTER_CAP));
        h.insert(RETRY_AFTER, "0".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        for attempt in 0..3 {
            let d = backoff(attempt);
            let base = BACKOFF_BASE * (1 << attempt);
            assert!(d >= base / 2 && d < base * 3 / 2, "{d:?}");
        }
        assert!(
            retryable_status(StatusCode::TOO_MANY_REQUESTS)
                && retryable_status(StatusCode::BAD_GATEWAY)
        );
        assert!(
            !retryable_status(StatusCode::UNAUTHORIZED)
                && !retryable_status(StatusCode::BAD_REQUEST)
        );
    }
}
