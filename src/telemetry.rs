//! Traces (docs/protocol.md §12): a turn's spans, exported over OTLP
//! (HTTP/protobuf) when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and not made at all otherwise.
//!
//! The binary reads the settings ([`Config::from_env`]), starts the
//! exporter ([`Telemetry::start`]) and puts its layer on the log's
//! subscriber (`main.rs`); the session's turn loop asks this module for
//! its spans ([`turn_span`], [`model_call_span`], [`tool_call_span`]),
//! which are [`Span::none`] unless the exporter started, so a node without
//! a collector does no span work on a turn. A W3C `traceparent` a client
//! sent ([`TraceParent`]) makes a turn's span a child of the client's.
//!
//! Spans go out in batches from the SDK's own thread: a collector that is
//! down or slow costs a turn nothing; it costs a warning in the log
//! ([`Warned`]), which never names the collector's URL or a header value.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId as OtelTraceId, TraceState,
    TracerProvider as _,
};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::error::ErrorCode;
use crate::ids::{CallId, SessionId, TraceId, TurnId};
use crate::llm::RequestKind;

/// The target of every span this module makes: the log's filter lets it
/// through when traces are on (whatever `QUESTD_LOG` says), and the
/// exporter's layer takes nothing else.
pub const SPAN_TARGET: &str = "questd::spans";

/// The service name spans carry when `OTEL_SERVICE_NAME` is not set.
pub const SERVICE_NAME: &str = "questd";

/// The path the general endpoint gets for traces (OTLP/HTTP).
const TRACES_PATH: &str = "v1/traces";

/// How long the exporter may take at shutdown to send what is left.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Whether the exporter started: spans are made only then.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are made and exported (an exporter started in this
/// process).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A W3C trace context's `traceparent` (version 00): the caller's trace
/// and the span the turn's span is a child of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    /// Bit 0: the caller sampled the trace.
    pub flags: u8,
}

impl TraceParent {
    /// The `traceparent` in `value`, or `None` if it is not a valid one
    /// (a caller's bad header is ignored, never refused): two lower-case
    /// hex digits of version (not `ff`), a 32-digit trace id and a 16-digit
    /// parent id, neither all zeros, and two digits of flags, joined by
    /// `-`. A later version may add fields after a further `-`; version
    /// 00 has exactly these.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim_matches([' ', '\t']);
        let b = value.as_bytes();
        // "vv-" + 32 + "-" + 16 + "-" + "ff"
        const LEN: usize = 55;
        if b.len() < LEN || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex::<1>(&b[0..2])?[0];
        let fits = match version {
            0xff => false,
            0 => b.len() == LEN,
            _ => b.len() == LEN || b[LEN] == b'-',
        };
        let parent = Self {
            trace_id: hex(&b[3..35])?,
            parent_id: hex(&b[36..52])?,
            flags: hex::<1>(&b[53..55])?[0],
        };
        let zero = parent.trace_id == [0; 16] || parent.parent_id == [0; 8];
        (fits && !zero).then_some(parent)
    }

    /// The context whose (remote) span is this parent.
    fn context(self) -> opentelemetry::Context {
        let span = SpanContext::new(
            OtelTraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.parent_id),
            TraceFlags::new(self.flags),
            true,
            TraceState::default(),
        );
        opentelemetry::Context::new().with_remote_span_context(span)
    }
}

/// `N` bytes from `2 * N` lower-case hex digits (the only case W3C
/// allows).
fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let nibble = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// Where spans go and what they carry, read from the OTLP variables.
/// Its `Debug` leaves out header values (they may be credentials).
#[derive(Clone, PartialEq)]
pub struct Config {
    /// The URL spans are posted to, whole (`…/v1/traces`).
    pub endpoint: String,
    /// Headers sent with every export, e.g. a collector's API key.
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    /// What was set but could not be used (a header without `=`), to log
    /// once logging runs; never a header's value.
    pub ignored: Vec<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Config")
            .field("endpoint", &redact(&self.endpoint))
            .field("header_names", &names)
            .field("service_name", &self.service_name)
            .field("ignored", &self.ignored)
            .finish()
    }
}

impl Config {
    /// [`Config::from_lookup`] of the process's environment.
    pub fn from_env() -> Result<Option<Self>, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings `get` answers for the OTLP variables: `None` when
    /// neither endpoint is set (traces off), an error when the one that
    /// counts is not an http(s) URL. Following the OTLP exporter
    /// specification: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it
    /// is; `OTEL_EXPORTER_OTLP_ENDPOINT` gets `v1/traces` appended; headers
    /// are `key=value` pairs joined by `,`, values URL-decoded, from
    /// `OTEL_EXPORTER_OTLP_HEADERS` and then
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (which wins for a key both
    /// name). An empty variable counts as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let set = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let endpoint = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(traces), _) => checked("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.trim())?,
            (None, Some(base)) => {
                let base = checked("OTEL_EXPORTER_OTLP_ENDPOINT", base.trim())?;
                if base.ends_with('/') {
                    format!("{base}{TRACES_PATH}")
                } else {
                    format!("{base}/{TRACES_PATH}")
                }
            }
            (None, None) => return Ok(None),
        };
        let mut headers: Vec<(String, String)> = Vec::new();
        let mut ignored = Vec::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            for pair in set(name).as_deref().map(parse_headers).unwrap_or_default() {
                match pair {
                    Ok((key, value)) => {
                        headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
                        headers.push((key, value));
                    }
                    Err(problem) => ignored.push(format!("{name}: {problem}")),
                }
            }
        }
        let service_name = set("OTEL_SERVICE_NAME").unwrap_or_else(|| SERVICE_NAME.to_owned());
        Ok(Some(Self {
            endpoint,
            headers,
            service_name,
            ignored,
        }))
    }
}

/// `url` if it is an absolute http(s) URL, else why not (without the
/// URL itself, which may hold a password).
fn checked(name: &str, url: &str) -> Result<String, String> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => Ok(url.to_owned()),
        _ => Err(format!("{name} is not an http:// or https:// URL")),
    }
}

/// The pairs of an OTLP headers variable (`k=v,k2=v2`), each a header or
/// why it is left out (naming the key at most, never the value).
fn parse_headers(list: &str) -> Vec<Result<(String, String), String>> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .enumerate()
        .map(|(i, item)| {
            let Some((key, value)) = item.split_once('=') else {
                return Err(format!("entry {} has no `=`; left out", i + 1));
            };
            let key = key.trim();
            let value = percent_decode(value.trim());
            let name_ok = reqwest::header::HeaderName::from_bytes(key.as_bytes()).is_ok();
            match value {
                _ if !name_ok => Err(format!(
                    "entry {} has no valid header name; left out",
                    i + 1
                )),
                Some(v) if reqwest::header::HeaderValue::from_str(&v).is_ok() => {
                    Ok((key.to_owned(), v))
                }
                _ => Err(format!("the value of `{key}` is not valid; left out")),
            }
        })
        .collect()
}

/// `text` with each `%XX` decoded; `None` if an escape is cut short, not
/// hex, or the bytes are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let pair = b.get(i + 1..i + 3)?;
            let digits = [pair[0].to_ascii_lowercase(), pair[1].to_ascii_lowercase()];
            out.push(hex::<1>(&digits)?[0]);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `url` as a log may show it: no user, password, query or fragment.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// The running exporter: spans are batched and sent from the SDK's own
/// thread until [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: SdkTracerProvider,
    config: Config,
}

impl Telemetry {
    /// Starts the exporter for `config` and turns span making on
    /// ([`enabled`]). The batch's timing follows the standard `OTEL_BSP_*`
    /// variables (`OTEL_BSP_SCHEDULE_DELAY`: how long spans wait, 5 s by
    /// default), the export's `OTEL_EXPORTER_OTLP_TIMEOUT` (10 s).
    pub fn start(config: Config) -> Result<Self, String> {
        let headers: HashMap<String, String> = config.headers.iter().cloned().collect();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(config.endpoint.clone())
            .with_headers(headers)
            .build()
            // Its errors name no header, but may quote the endpoint: as
            // the log may show it.
            .map_err(|e| {
                let why = e.to_string();
                let why = why.replace(&config.endpoint, &redact(&config.endpoint));
                format!("the OTLP exporter did not start: {why}")
            })?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(Warned::new(exporter))
            .build();
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Self { provider, config })
    }

    /// The layer that turns this module's spans into OpenTelemetry spans
    /// for the exporter; it sees no other span and no event.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let tracer = self.provider.tracer("questd");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == SPAN_TARGET
            }))
    }

    /// Logs where spans go (the endpoint without credentials) and what of
    /// the settings was left out; once logging runs.
    pub fn report(&self) {
        tracing::info!(
            endpoint = %redact(&self.config.endpoint),
            service_name = %self.config.service_name,
            headers = self.config.headers.len(),
            "traces are exported over OTLP/HTTP"
        );
        for problem in &self.config.ignored {
            tracing::warn!(%problem, "an OTLP header setting was left out");
        }
    }

    /// Sends the spans still waiting (within [`SHUTDOWN_WAIT`]) and stops
    /// the exporter. Call it outside the async runtime, once the server
    /// stopped.
    pub fn shutdown(&self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT) {
            tracing::warn!(error = %e, "the last spans may not have been exported");
        }
    }
}

/// The span of one turn: a child of `parent` (a client's `traceparent`)
/// or a root; [`Span::none`] when traces are off.
pub fn turn_span(
    session_id: &SessionId,
    turn_id: &TurnId,
    trace_id: &TraceId,
    parent: Option<TraceParent>,
) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        parent: None,
        "turn",
        questd.session_id = %session_id,
        questd.turn_id = %turn_id,
        questd.trace_id = %trace_id,
        questd.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = parent {
        // Fails only without the exporter's layer: then nothing is sent.
        let _ = span.set_parent(parent.context());
    }
    span
}

/// The turn ended: completed, or failed with `failed`.
pub fn turn_ended(turn: &Span, failed: Option<ErrorCode>) {
    if turn.is_none() {
        return;
    }
    match failed {
        None => {
            turn.record("questd.outcome", "completed");
        }
        Some(code) => {
            turn.record("questd.outcome", code.as_str());
            turn.record("otel.status_code", "ERROR");
        }
    }
}

/// The span of one model request of `turn`, of `kind` (`step`,
/// `wrap_up`, `content`); ends when it is dropped.
pub fn model_call_span(turn: &Span, kind: RequestKind) -> Span {
    if turn.is_none() {
        return Span::none();
    }
    let kind = match kind {
        RequestKind::Step => "step",
        RequestKind::WrapUp => "wrap_up",
        RequestKind::Content => "content",
    };
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: turn,
        "model_call",
        questd.request_kind = kind,
        questd.outcome = tracing::field::Empty,
        questd.prompt_tokens = tracing::field::Empty,
        questd.completion_tokens = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The model answered, with these tokens.
pub fn model_answered(call: &Span, prompt_tokens: u64, completion_tokens: u64) {
    call.record("questd.outcome", "ok");
    call.record("questd.prompt_tokens", prompt_tokens);
    call.record("questd.completion_tokens", completion_tokens);
}

/// The model call failed with `code`.
pub fn model_failed(call: &Span, code: ErrorCode) {
    if call.is_none() {
        return;
    }
    call.record("questd.outcome", code.as_str());
    call.record("otel.status_code", "ERROR");
}

/// The span of one tool call of `turn`; ends when it is dropped, after
/// [`tool_call_ended`].
pub fn tool_call_span(turn: &Span, tool: &str, call_id: &CallId) -> Span {
    if turn.is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: SPAN_TARGET,
        parent: turn,
        "tool_call",
        questd.tool = tool,
        questd.call_id = %call_id,
        questd.outcome = tracing::field::Empty,
    )
}

/// The tool call gave its result (`None`), or failed with `failed`.
pub fn tool_call_ended(call: &Span, failed: Option<ErrorCode>) {
    if call.is_none() {
        return;
    }
    match failed {
        None => call.record("questd.outcome", "ok"),
        Some(code) => call.record("questd.outcome", code.as_str()),
    };
}

/// The OTLP exporter, warning in the log when the collector does not take
/// a batch: once when exports start failing (and how many batches failed
/// meanwhile, once they succeed again), so a collector that is down costs
/// one line, not one per batch. The error it logs is the exporter's own
/// summary (a status code, "network error"), which names no URL.
#[derive(Debug)]
struct Warned<E> {
    inner: E,
    /// Batches that failed since the last that went through.
    failing: AtomicU64,
}

impl<E> Warned<E> {
    fn new(inner: E) -> Self {
        Self {
            inner,
            failing: AtomicU64::new(0),
        }
    }

    /// Logs what a batch's export gave, as the type says.
    fn heard(&self, spans: usize, result: &OTelSdkResult) {
        match result {
            Ok(()) => {
                let failed = self.failing.swap(0, Ordering::Relaxed);
                if failed > 0 {
                    tracing::info!(failed_batches = failed, "spans are exported again");
                }
            }
            Err(e) => {
                if self.failing.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(error = %e, spans, "the trace collector did not take a batch of spans; they are dropped");
                }
            }
        }
    }
}

impl<E: SpanExporter> SpanExporter for Warned<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.heard(spans, &result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read() {
        let p = TraceParent::parse(GOOD).expect("valid");
        let trace = 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128;
        assert_eq!(p.trace_id, trace.to_be_bytes());
        assert_eq!(
            p.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(p.flags, 1);
        // Surrounding blanks are no part of the value.
        assert_eq!(TraceParent::parse(&format!(" {GOOD}\t")), Some(p));
        // Not sampled, and unknown flag bits, are still a parent.
        let unsampled = GOOD.replace("-01", "-00");
        assert_eq!(TraceParent::parse(&unsampled).map(|p| p.flags), Some(0));
        let other_bits = GOOD.replace("-01", "-ff");
        assert_eq!(TraceParent::parse(&other_bits).map(|p| p.flags), Some(0xff));
        // A later version may carry more after a `-`.
        let later = format!("01{}-more", &GOOD[2..]);
        assert_eq!(TraceParent::parse(&later).map(|p| p.flags), Some(1));
        assert!(TraceParent::parse(&format!("01{}", &GOOD[2..])).is_some());
    }

    #[test]
    fn an_invalid_traceparent_is_ignored() {
        let cases = [
            ("", "empty"),
            ("00", "short"),
            (&GOOD[..54], "flags cut short"),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version ff",
            ),
            (
                "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version not hex",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "zero trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "zero parent id",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "upper case",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
                "not hex",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
                "flags one digit",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                "00 with more",
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                "more without -",
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
                "other separator",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e47-3600f067aa0ba902b7-01",
                "fields shifted",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
                "not ASCII",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7é-01",
                "not ASCII, longer",
            ),
        ];
        for (value, why) in cases {
            assert_eq!(TraceParent::parse(value), None, "{why}: {value:?}");
        }
    }

    fn config(vars: &[(&str, &str)]) -> Result<Option<Config>, String> {
        Config::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn traces_are_off_without_an_endpoint() {
        assert_eq!(config(&[]), Ok(None));
        assert_eq!(
            config(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", " "),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=b"),
                ("OTEL_SERVICE_NAME", "x"),
            ]),
            Ok(None)
        );
        // Nothing in this test process started an exporter.
        assert!(!enabled());
        let none = turn_span(&"sess_x".into(), &"turn_1".into(), &"tr_1".into(), None);
        assert!(none.is_none());
        assert!(model_call_span(&none, RequestKind::Step).is_none());
        assert!(tool_call_span(&none, "move", &"call_1".into()).is_none());
    }

    #[test]
    fn the_endpoint_follows_the_otlp_rules() {
        let endpoint = |vars: &[(&str, &str)]| config(vars).map(|c| c.map(|c| c.endpoint));
        let general = "OTEL_EXPORTER_OTLP_ENDPOINT";
        let traces = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
        for (vars, want) in [
            (
                &[(general, "http://collector:4318")][..],
                "http://collector:4318/v1/traces",
            ),
            (
                &[(general, "http://collector:4318/")],
                "http://collector:4318/v1/traces",
            ),
            (
                &[(general, "https://otel.example/base/path")],
                "https://otel.example/base/path/v1/traces",
            ),
            // The traces endpoint is used as it is, and wins.
            (
                &[
                    (traces, "http://c:4318/custom"),
                    (general, "http://other:1"),
                ],
                "http://c:4318/custom",
            ),
            (&[(traces, "http://c:4318")], "http://c:4318"),
            // An empty traces endpoint counts as unset.
            (
                &[(traces, ""), (general, "http://g:4318")],
                "http://g:4318/v1/traces",
            ),
        ] {
            assert_eq!(endpoint(vars), Ok(Some(want.to_owned())), "{vars:?}");
        }
        for bad in ["collector:4318", "grpc://c:4317", "not a url", "file:///x"] {
            let err = endpoint(&[(general, bad)]).expect_err(bad);
            assert!(err.contains(general), "{err}");
            assert!(!err.contains(bad), "the value stays out of it: {err}");
        }
    }

    #[test]
    fn headers_are_pairs_with_url_decoded_values() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=secret%3D1 , x-tenant = a%20b,,broken,x-dup=1",
            ),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                "X-Dup=2,bad name=v,x-cut=%4",
            ),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(
            c.headers,
            [
                ("api-key".to_owned(), "secret=1".to_owned()),
                ("x-tenant".to_owned(), "a b".to_owned()),
                ("X-Dup".to_owned(), "2".to_owned()),
            ]
        );
        assert_eq!(c.ignored.len(), 3, "{:?}", c.ignored);
        let said = format!("{:?} {c:?}", c.ignored);
        assert!(!said.contains("secret"), "no value is shown: {said}");
        assert!(said.contains("x-cut"), "the key is named: {said}");
        assert_eq!(c.service_name, "questd");
        let named = config(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces",
            ),
            ("OTEL_SERVICE_NAME", "questd-eu"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(named.service_name, "questd-eu");
        assert!(named.headers.is_empty() && named.ignored.is_empty());
    }

    /// A log sink the test reads back.
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_collector_that_is_down_costs_one_warning_not_one_per_batch() {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || sink.clone())
            .finish();
        let warned = Warned::new(());
        let down = || {
            Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "HTTP export failed: network error".into(),
            ))
        };
        tracing::subscriber::with_default(subscriber, || {
            warned.heard(3, &Ok(()));
            for _ in 0..5 {
                warned.heard(7, &down());
            }
            warned.heard(2, &Ok(()));
            warned.heard(2, &Ok(()));
            warned.heard(4, &down());
        });
        let text = String::from_utf8(lines.0.lock().expect("not poisoned").clone()).expect("text");
        let said: Vec<&str> = text.lines().collect();
        assert_eq!(said.len(), 3, "{text}");
        assert!(
            said[0].contains("WARN") && said[0].contains("spans=7"),
            "{text}"
        );
        assert!(said[0].contains("network error"), "{text}");
        assert!(
            said[1].contains("INFO") && said[1].contains("failed_batches=5"),
            "{text}"
        );
        assert!(
            said[2].contains("WARN") && said[2].contains("spans=4"),
            "{text}"
        );
    }

    #[test]
    fn an_exporter_that_does_not_start_says_why_without_the_credentials() {
        // A URL `reqwest` reads but the exporter's `http::Uri` does not.
        let endpoint = "http://user:se cret@127.0.0.1:9/v1/traces?key=tok";
        let mut c = config(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)])
            .expect("an http URL")
            .expect("on");
        c.headers.push(("api-key".into(), "hidden".into()));
        let why = Telemetry::start(c).err().expect("refused");
        assert!(why.contains("invalid endpoint"), "{why}");
        for secret in ["cret", "tok", "hidden", "user"] {
            assert!(!why.contains(secret), "{secret} in {why}");
        }
        assert!(!enabled(), "no exporter: no spans");
    }

    #[test]
    fn a_logged_endpoint_has_no_credentials() {
        assert_eq!(
            redact("https://user:pass@otel.example:4318/v1/traces?key=k#f"),
            "https://otel.example:4318/v1/traces"
        );
        assert_eq!(redact("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
        assert_eq!(redact("::"), "(not a URL)");
    }
}
