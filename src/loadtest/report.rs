//! What a load test counts while it runs ([`Stats`]) and what it reports at
//! the end ([`Report`]: the `--json` object of docs/protocol.md §8.1 and the
//! summary table).
//!
//! Counters every task bumps are atomics; histograms, codes and examples sit
//! behind one mutex that is held only to record a value.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::LoadtestError;
use super::check::{Compared, StreamChecker};

/// Largest latency the histograms hold, in microseconds (one hour); longer
/// ones are recorded as this.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Significant figures the histograms keep.
const SIGNIFICANT_FIGURES: u8 = 3;
/// Violations kept word for word in the report.
const KEPT_EXAMPLES: usize = 20;

/// Keys of `errors_by_code` that the driver itself produces (the others are
/// the server's `error_code`s from error frames, failed turns and refused
/// requests).
pub mod codes {
    /// The TCP connection could not be made (refused, no route, out of ports).
    pub const CONNECT_FAILED: &str = "CONNECT_FAILED";
    /// The WebSocket upgrade failed without an HTTP error answer.
    pub const HANDSHAKE_FAILED: &str = "HANDSHAKE_FAILED";
    /// `POST /api/v1/sessions` failed below HTTP, or its answer was unreadable.
    pub const REQUEST_FAILED: &str = "REQUEST_FAILED";
    /// The server closed a connection the driver was still using.
    pub const UNEXPECTED_CLOSE: &str = "UNEXPECTED_CLOSE";
    /// A connection broke while reading or writing.
    pub const CONNECTION_LOST: &str = "CONNECTION_LOST";
    /// An expected frame did not come within `--frame-timeout`.
    pub const TIMEOUT: &str = "TIMEOUT";
    /// A driver task stopped abnormally (a bug in the driver).
    pub const DRIVER_FAILED: &str = "DRIVER_FAILED";
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What only a lock may touch.
#[derive(Debug)]
struct Collected {
    errors_by_code: BTreeMap<String, u64>,
    /// The first message seen for each error code.
    error_examples: BTreeMap<String, String>,
    violations_by_kind: BTreeMap<String, u64>,
    violation_examples: Vec<String>,
    turn: Histogram<u64>,
    tool: Histogram<u64>,
    connect: Histogram<u64>,
    fan_out: Histogram<u64>,
    /// A round's last action sent to its `turn_started` read.
    round: Histogram<u64>,
    compared: Compared,
}

/// Counts kept by one task and added to a shared counter now and then
/// ([`Counted::flush`], and when dropped), instead of touching a counter
/// every task shares once per frame.
pub struct Counted<'a> {
    counter: &'a AtomicU64,
    pending: u64,
}

impl<'a> Counted<'a> {
    pub fn new(counter: &'a AtomicU64) -> Self {
        Self {
            counter,
            pending: 0,
        }
    }

    /// Counts one, for now only here.
    pub fn add(&mut self) {
        self.pending += 1;
    }

    /// Adds what was counted here to the shared counter.
    pub fn flush(&mut self) {
        if self.pending > 0 {
            self.counter.fetch_add(self.pending, Ordering::Relaxed);
            self.pending = 0;
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Live counts of a run, shared by all its tasks.
#[derive(Debug)]
pub struct Stats {
    pub sessions: AtomicU64,
    pub players: AtomicU64,
    pub spectators: AtomicU64,
    /// Spectators that got `welcome` and then stopped reading on purpose.
    pub slow_spectators: AtomicU64,
    /// Connections open now, and the most at once.
    open: AtomicU64,
    peak_open: AtomicU64,
    pub turns_completed: AtomicU64,
    pub turns_failed: AtomicU64,
    pub turns_refused: AtomicU64,
    /// Rounds mode: rounds whose turn completed.
    pub rounds_completed: AtomicU64,
    pub tool_calls: AtomicU64,
    pub frames: AtomicU64,
    pub disconnects: AtomicU64,
    errors: AtomicU64,
    violations: AtomicU64,
    collected: Mutex<Collected>,
}

fn histogram() -> Result<Histogram<u64>, LoadtestError> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGNIFICANT_FIGURES)
        .map_err(|e| LoadtestError::Histogram(e.to_string()))
}

impl Stats {
    pub fn new() -> Result<Self, LoadtestError> {
        Ok(Self {
            sessions: AtomicU64::new(0),
            players: AtomicU64::new(0),
            spectators: AtomicU64::new(0),
            slow_spectators: AtomicU64::new(0),
            open: AtomicU64::new(0),
            peak_open: AtomicU64::new(0),
            turns_completed: AtomicU64::new(0),
            turns_failed: AtomicU64::new(0),
            turns_refused: AtomicU64::new(0),
            rounds_completed: AtomicU64::new(0),
            tool_calls: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            violations: AtomicU64::new(0),
            collected: Mutex::new(Collected {
                errors_by_code: BTreeMap::new(),
                error_examples: BTreeMap::new(),
                violations_by_kind: BTreeMap::new(),
                violation_examples: Vec::new(),
                turn: histogram()?,
                tool: histogram()?,
                connect: histogram()?,
                fan_out: histogram()?,
                round: histogram()?,
                compared: Compared::default(),
            }),
        })
    }

    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an error under `code`, keeping the first message of each code.
    pub fn error(&self, code: &str, message: impl FnOnce() -> String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut c = lock(&self.collected);
        *c.errors_by_code.entry(code.to_owned()).or_default() += 1;
        if !c.error_examples.contains_key(code) {
            let mut text = message();
            text.truncate(300);
            c.error_examples.insert(code.to_owned(), text);
        }
    }

    /// A connection the driver still needed went away: an error and a
    /// disconnect.
    pub fn disconnect(&self, code: &str, message: impl FnOnce() -> String) {
        Self::bump(&self.disconnects);
        self.error(code, message);
    }

    /// A connection opened.
    pub fn opened(&self) {
        let now = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_open.fetch_max(now, Ordering::Relaxed);
    }

    /// A connection closed.
    pub fn closed(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn open_now(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }

    /// Turns that ended one way or another.
    pub fn turns_done(&self) -> u64 {
        [
            &self.turns_completed,
            &self.turns_failed,
            &self.turns_refused,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    pub fn record_turn(&self, latency: Duration) {
        lock(&self.collected)
            .turn
            .saturating_record(micros(latency));
    }

    pub fn record_tool(&self, latency: Duration) {
        lock(&self.collected)
            .tool
            .saturating_record(micros(latency));
    }

    pub fn record_connect(&self, latency: Duration) {
        lock(&self.collected)
            .connect
            .saturating_record(micros(latency));
    }

    /// Records how long frames took to reach every connection of a session.
    pub fn record_fan_out(&self, spans: &[Duration]) {
        let mut c = lock(&self.collected);
        for span in spans {
            c.fan_out.saturating_record(micros(*span));
        }
    }

    /// Records how long rounds took to resolve after their last action.
    pub fn record_rounds(&self, spans: &[Duration]) {
        if spans.is_empty() {
            return;
        }
        let mut c = lock(&self.collected);
        for span in spans {
            c.round.saturating_record(micros(*span));
        }
    }

    /// Adds a spectator's comparison with its player.
    pub fn compared(&self, c: Compared) {
        let mut all = lock(&self.collected);
        all.compared.player_frames += c.player_frames;
        all.compared.spectator_frames += c.spectator_frames;
    }

    /// Takes the violations a finished connection found.
    pub fn absorb(&self, checker: &StreamChecker) {
        let found = checker.violations();
        if found == 0 {
            return;
        }
        self.violations.fetch_add(found, Ordering::Relaxed);
        let mut c = lock(&self.collected);
        for (kind, n) in checker.counts() {
            *c.violations_by_kind.entry((*kind).to_owned()).or_default() += n;
        }
        for v in checker.examples() {
            if c.violation_examples.len() < KEPT_EXAMPLES {
                c.violation_examples.push(v.to_string());
            }
        }
    }

    /// The report of a run that took `elapsed`.
    pub fn report(&self, requested: &Requested, elapsed: Duration, rss: Option<Rss>) -> Report {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = lock(&self.collected);
        let secs = elapsed.as_secs_f64();
        let per_s = |n: u64| {
            if secs > 0.0 {
                round(n as f64 / secs, 10.0)
            } else {
                0.0
            }
        };
        let (players, spectators) = (load(&self.players), load(&self.spectators));
        let peak = load(&self.peak_open);
        let rss_per_connection = rss.and_then(|r| {
            let grew = r.peak_kib.saturating_sub(r.start_kib);
            (peak > 0).then(|| round(grew as f64 / peak as f64, 100.0))
        });
        Report {
            sessions: load(&self.sessions),
            sessions_requested: requested.sessions,
            players,
            spectators,
            slow_spectators: load(&self.slow_spectators),
            connections_reached: players + spectators,
            connections_peak: peak,
            turns_planned: requested.turns,
            turns_completed: load(&self.turns_completed),
            turns_failed: load(&self.turns_failed),
            turns_refused: load(&self.turns_refused),
            tool_calls: load(&self.tool_calls),
            errors: self.errors(),
            errors_by_code: c.errors_by_code.clone(),
            error_examples: c.error_examples.clone(),
            protocol_violations: self.violations(),
            violations_by_kind: c.violations_by_kind.clone(),
            violation_examples: c.violation_examples.clone(),
            disconnects: load(&self.disconnects),
            frames_delivered: load(&self.frames),
            frames_per_s: per_s(load(&self.frames)),
            spectator_check: SpectatorCheck {
                player_frames: c.compared.player_frames,
                spectator_frames: c.compared.spectator_frames,
            },
            duration_s: round(secs, 1000.0),
            turns_per_s: per_s(load(&self.turns_completed)),
            turn_latency_ms: Percentiles::of(&c.turn),
            tool_latency_ms: Percentiles::of(&c.tool),
            connect_ms: Percentiles::of(&c.connect),
            fan_out_ms: Percentiles::of(&c.fan_out),
            server_rss_kib: rss,
            server_rss_kib_per_connection: rss_per_connection,
            party: requested.party.map(|party| PartyFigures {
                players_per_session: party.players_per_session,
                turn_mode: party.turn_mode,
                rounds_completed: load(&self.rounds_completed),
                round_resolution_ms: Percentiles::of(&c.round),
            }),
        }
    }
}

/// What the run was asked to do, for the report.
#[derive(Debug, Clone, Copy)]
pub struct Requested {
    pub sessions: u64,
    /// The turns the players were to play: sessions times turns (times
    /// players, in free mode).
    pub turns: u64,
    /// Party play (several players per session, or rounds).
    pub party: Option<Party>,
}

/// How a run's sessions were played as parties.
#[derive(Debug, Clone, Copy)]
pub struct Party {
    pub players_per_session: u64,
    /// `free` or `rounds`.
    pub turn_mode: &'static str,
}

/// The report's figures of party play.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PartyFigures {
    pub players_per_session: u64,
    pub turn_mode: &'static str,
    /// Rounds whose turn completed (0 in free mode).
    pub rounds_completed: u64,
    /// For each round, from its last action sent to its `turn_started`
    /// read by the player who sent it.
    pub round_resolution_ms: Percentiles,
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// Latency percentiles, in milliseconds (0 when nothing was recorded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    /// How many values were recorded.
    pub count: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| round(us as f64 / 1000.0, 1000.0);
        if h.is_empty() {
            return Self::default();
        }
        Self {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
            count: h.len(),
        }
    }
}

/// Spectators compared with their player: in a clean run both counts are
/// equal (each spectator got every story frame its player got).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SpectatorCheck {
    /// For each spectator, the player's story frames in the compared window.
    pub player_frames: u64,
    /// The spectators' own story frames in those windows.
    pub spectator_frames: u64,
}

/// The server's resident memory, in KiB (VmRSS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rss {
    pub start_kib: u64,
    pub peak_kib: u64,
    pub end_kib: u64,
}

impl Rss {
    /// Starts from one reading.
    pub fn new(kib: u64) -> Self {
        Self {
            start_kib: kib,
            peak_kib: kib,
            end_kib: kib,
        }
    }

    /// Takes a later reading.
    pub fn sample(&mut self, kib: u64) {
        self.peak_kib = self.peak_kib.max(kib);
        self.end_kib = kib;
    }
}

/// Reads a process's VmRSS in KiB from `/proc/<pid>/status`.
pub fn read_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The outcome of a run: the report of docs/protocol.md §8.1.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Sessions created.
    pub sessions: u64,
    pub sessions_requested: u64,
    /// Player connections that got `welcome`.
    pub players: u64,
    /// Spectator connections that got `welcome` (slow ones included).
    pub spectators: u64,
    /// Of those, the ones that never read after `welcome`
    /// (`--slow-spectators`).
    pub slow_spectators: u64,
    pub connections_reached: u64,
    /// The most connections open at once.
    pub connections_peak: u64,
    pub turns_planned: u64,
    pub turns_completed: u64,
    pub turns_failed: u64,
    /// Chats refused with an error frame and not retried (or out of retries).
    pub turns_refused: u64,
    /// `tool_call` frames of the players' own turns.
    pub tool_calls: u64,
    pub errors: u64,
    pub errors_by_code: BTreeMap<String, u64>,
    /// The first message seen for each code.
    pub error_examples: BTreeMap<String, String>,
    pub protocol_violations: u64,
    pub violations_by_kind: BTreeMap<String, u64>,
    pub violation_examples: Vec<String>,
    /// Connections the server closed or lost while the driver used them.
    pub disconnects: u64,
    /// Text frames received on all connections.
    pub frames_delivered: u64,
    pub frames_per_s: f64,
    pub spectator_check: SpectatorCheck,
    pub duration_s: f64,
    pub turns_per_s: f64,
    /// Chat sent to `turn_completed` received.
    pub turn_latency_ms: Percentiles,
    /// `tool_call` received to its `tool_result` received.
    pub tool_latency_ms: Percentiles,
    /// TCP connect plus WebSocket upgrade.
    pub connect_ms: Percentiles,
    /// For each story frame, the first of its session's reading
    /// connections reading it to the last one reading it.
    pub fan_out_ms: Percentiles,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_kib: Option<Rss>,
    /// Server memory growth over the run per connection at the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_kib_per_connection: Option<f64>,
    /// Party play only: its figures, as fields of the report itself.
    #[serde(flatten)]
    pub party: Option<PartyFigures>,
}

impl Report {
    /// No error and no protocol violation.
    pub fn passed(&self) -> bool {
        self.errors == 0 && self.protocol_violations == 0
    }

    /// The summary for people.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "questd loadtest: {} of {} sessions, {} players + {} spectators reached (peak {} open){}",
            self.sessions,
            self.sessions_requested,
            self.players,
            self.spectators,
            self.connections_peak,
            if self.slow_spectators > 0 {
                format!("; {} spectators never read", self.slow_spectators)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            t,
            "  turns      {} completed, {} failed, {} refused of {} planned; {} tool calls",
            self.turns_completed,
            self.turns_failed,
            self.turns_refused,
            self.turns_planned,
            self.tool_calls
        );
        if let Some(party) = &self.party {
            let _ = writeln!(
                t,
                "  party      {} players per session, {} mode, {} rounds completed",
                party.players_per_session, party.turn_mode, party.rounds_completed
            );
        }
        let _ = writeln!(
            t,
            "  rate       {:.1} turns/s, {:.1} frames/s ({} frames) over {:.2} s",
            self.turns_per_s, self.frames_per_s, self.frames_delivered, self.duration_s
        );
        let _ = writeln!(
            t,
            "  spectators {} of the players' {} story frames received",
            self.spectator_check.spectator_frames, self.spectator_check.player_frames
        );
        let _ = writeln!(
            t,
            "  {:<14}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (ms)", "p50", "p90", "p99", "max", "count"
        );
        let round = self
            .party
            .as_ref()
            .map(|p| ("round", &p.round_resolution_ms));
        for (name, p) in [
            ("turn", &self.turn_latency_ms),
            ("tool", &self.tool_latency_ms),
            ("connect", &self.connect_ms),
            ("fan-out", &self.fan_out_ms),
        ]
        .into_iter()
        .chain(round)
        {
            let _ = writeln!(
                t,
                "  {name:<14}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10}",
                p.p50, p.p90, p.p99, p.max, p.count
            );
        }
        if let Some(rss) = self.server_rss_kib {
            let _ = writeln!(
                t,
                "  server RSS {} KiB at start, {} KiB peak, {} KiB at end{}",
                rss.start_kib,
                rss.peak_kib,
                rss.end_kib,
                self.server_rss_kib_per_connection
                    .map(|k| format!(" ({k:.2} KiB per connection)"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(
            t,
            "  errors     {} ({} disconnects)",
            self.errors, self.disconnects
        );
        for (code, n) in &self.errors_by_code {
            let example = self.error_examples.get(code).cloned().unwrap_or_default();
            let _ = writeln!(t, "    {code:<20}{n:>8}  {example}");
        }
        if self.errors_by_code.contains_key("RATE_LIMITED") {
            // The example above says which request was refused.
            let _ = writeln!(
                t,
                "    (a rate limit of the server refused requests: chats are limited per \
                 session, QUESTD_CHAT_PER_MINUTE and QUESTD_CHAT_BURST, or add --think-time; \
                 creations and joins without a key per address, QUESTD_CREATE_PER_MINUTE and \
                 QUESTD_CREATE_BURST, or give --api-key)"
            );
        }
        let _ = writeln!(t, "  violations {}", self.protocol_violations);
        for (kind, n) in &self.violations_by_kind {
            let _ = writeln!(t, "    {kind:<20}{n:>8}");
        }
        for v in &self.violation_examples {
            let _ = writeln!(t, "    e.g. {v}");
        }
        let _ = writeln!(
            t,
            "  result     {}",
            if self.passed() { "PASS" } else { "FAIL" }
        );
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_from_proc_status() {
        let status = "Name:\tquestd\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(12345));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert!(read_rss_kib(std::process::id()).is_some_and(|k| k > 0));
        assert_eq!(read_rss_kib(u32::MAX), None);
    }

    #[test]
    fn the_report_adds_up_and_fails_on_errors_or_violations() {
        let stats = Stats::new().unwrap();
        for ms in [1, 2, 3, 4, 100] {
            stats.record_turn(Duration::from_millis(ms));
        }
        Stats::bump(&stats.turns_completed);
        Stats::bump(&stats.turns_completed);
        stats.opened();
        stats.opened();
        stats.closed();
        let requested = Requested {
            sessions: 1,
            turns: 2,
            party: None,
        };
        let report = stats.report(&requested, Duration::from_secs(2), None);
        assert!(report.passed());
        assert_eq!(report.turns_per_s, 1.0);
        assert_eq!(report.connections_peak, 2);
        assert_eq!(report.turn_latency_ms.count, 5);
        assert!((report.turn_latency_ms.p50 - 3.0).abs() < 0.01);
        assert!((report.turn_latency_ms.max - 100.0).abs() < 0.1);
        assert_eq!(report.tool_latency_ms, Percentiles::default());
        let json = serde_json::to_value(&report).unwrap();
        for field in [
            "sessions",
            "players",
            "spectators",
            "turns_completed",
            "turns_failed",
            "errors",
            "errors_by_code",
            "protocol_violations",
            "frames_delivered",
            "duration_s",
            "turns_per_s",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
        for p in ["p50", "p90", "p99", "max"] {
            assert!(json["turn_latency_ms"][p].is_number(), "{p}");
        }
        assert!(json["connect_ms"]["p99"].is_number());
        assert!(json.get("server_rss_kib").is_none());
        // A run of one player per session says nothing of parties.
        for field in ["players_per_session", "turn_mode", "rounds_completed"] {
            assert!(json.get(field).is_none(), "{field}");
        }
        assert!(!report.table().contains("party"));

        stats.error("RATE_LIMITED", || "too many".into());
        stats.error("RATE_LIMITED", || "not kept".into());
        let mut checker = StreamChecker::new();
        checker.observe("not json");
        stats.absorb(&checker);
        let report = stats.report(&requested, Duration::from_secs(2), None);
        assert!(!report.passed());
        assert_eq!(report.errors_by_code["RATE_LIMITED"], 2);
        assert_eq!(report.error_examples["RATE_LIMITED"], "too many");
        assert_eq!(report.violations_by_kind["malformed_frame"], 1);
        assert!(report.table().contains("FAIL"));
        assert!(report.table().contains("QUESTD_CHAT_PER_MINUTE"));
        // A refused creation is a rate limit too; the hint names its settings.
        assert!(report.table().contains("QUESTD_CREATE_BURST"));
        assert!(report.table().contains("--api-key"));
    }

    #[test]
    fn a_party_run_reports_its_rounds() {
        let stats = Stats::new().unwrap();
        Stats::bump(&stats.rounds_completed);
        Stats::bump(&stats.turns_completed);
        stats.record_rounds(&[Duration::from_millis(4), Duration::from_millis(8)]);
        let requested = Requested {
            sessions: 1,
            turns: 1,
            party: Some(Party {
                players_per_session: 4,
                turn_mode: "rounds",
            }),
        };
        let report = stats.report(&requested, Duration::from_secs(1), None);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["players_per_session"], 4);
        assert_eq!(json["turn_mode"], "rounds");
        assert_eq!(json["rounds_completed"], 1);
        assert_eq!(json["round_resolution_ms"]["count"], 2);
        assert!((json["round_resolution_ms"]["max"].as_f64().unwrap() - 8.0).abs() < 0.1);
        assert!(
            report
                .table()
                .contains("4 players per session, rounds mode")
        );
    }

    #[test]
    fn rss_tracks_start_peak_and_end() {
        let mut rss = Rss::new(100);
        rss.sample(300);
        rss.sample(200);
        assert_eq!(
            rss,
            Rss {
                start_kib: 100,
                peak_kib: 300,
                end_kib: 200
            }
        );
    }
}
