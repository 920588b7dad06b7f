//! Counters, gauges and histograms for `GET /metrics`, in the Prometheus
//! text format.
//!
//! Every update is one or two relaxed atomic adds, so recording stays off
//! the hot path's critical cost; rendering reads the atomics when scraped.
//! Each server has its own [`Metrics`] (tests run several in one process).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Latency buckets, in seconds.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
];
/// A timer's lateness, in seconds: finer than [`SECONDS`] around the
/// sweeper's second or two, so its quantiles read well.
const LATENESS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0,
    20.0, 30.0, 60.0, 300.0, 3600.0,
];
/// Rows per journal commit.
const ROWS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A number that only grows.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A number that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

/// Observations in cumulative buckets, as Prometheus histograms are.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then `+Inf`; each observation lands in one.
    counts: Vec<AtomicU64>,
    /// The sum, in millionths of the unit.
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: f64) {
        let at = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[at].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((value.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The count in each bucket (not cumulative), `+Inf`'s last.
    fn buckets(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// The `q`-quantile (0 to 1) estimated from the buckets as Prometheus'
    /// `histogram_quantile` does: linearly within the bucket it falls in,
    /// from 0 for the first; one past the last bound answers that bound.
    /// `None` before any observation.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let buckets = self.buckets();
        let total: u64 = buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (i, n) in buckets.iter().enumerate() {
            let upto = below + n;
            if *n > 0 && upto as f64 >= rank {
                let Some(upper) = self.bounds.get(i) else {
                    return self.bounds.last().copied();
                };
                let lower = if i == 0 { 0.0 } else { self.bounds[i - 1] };
                let within = (rank - below as f64) / *n as f64;
                return Some(lower + (upper - lower) * within);
            }
            below = upto;
        }
        self.bounds.last().copied()
    }

    /// The sum of the values observed.
    pub fn sum(&self) -> f64 {
        self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, count) in self.buckets().into_iter().enumerate() {
            cumulative += count;
            let le = self
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum();
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// Everything `/metrics` shows.
#[derive(Debug)]
pub struct Metrics {
    /// When these metrics began counting (the server's start).
    pub started: std::time::Instant,
    pub sessions_live: Gauge,
    pub sessions_created: Counter,
    /// Sessions brought back from storage (after a restart or hibernation).
    pub sessions_loaded: Counter,
    /// Sessions that left memory: idle, handed over by a drain, or closed.
    pub sessions_hibernated: Counter,
    pub player_connections: Gauge,
    pub spectator_connections: Gauge,
    pub turns_started: Counter,
    pub turns_completed: Counter,
    /// Failed turns by error code; failures are rare, so a lock is fine.
    turns_failed: Mutex<BTreeMap<String, u64>>,
    pub turn_seconds: Histogram,
    /// A turn's time not spent waiting for the model: the runtime's own
    /// share (queues, tools, journal commits, fan-out).
    pub turn_overhead_seconds: Histogram,
    pub tool_seconds: Histogram,
    pub model_call_seconds: Histogram,
    pub model_prompt_tokens: Counter,
    pub model_completion_tokens: Counter,
    pub commit_rows: Histogram,
    pub commit_seconds: Histogram,
    pub frames_sent: Counter,
    pub outbound_drops: Counter,
    pub rate_limited: Counter,
    /// Renewals of this node's session claims (one per batch).
    pub lease_renewals: Counter,
    /// Renewals that failed or got no answer (the database unavailable):
    /// the claims hold for a lease from the last renewal that went through.
    pub lease_renewals_failed: Counter,
    /// Sessions this node stopped because another node claimed them or
    /// its claims could not be renewed in time.
    pub leases_lost: Counter,
    /// Sessions this node claimed from another node (failovers, drains).
    pub sessions_taken_over: Counter,
    /// Sessions another node runs whose journal this node tails for its
    /// spectators.
    pub sessions_tailed: Gauge,
    /// Notices of journal commits this node heard (PostgreSQL `NOTIFY`,
    /// one per group commit of any node).
    pub journal_notices: Counter,
    /// From a journal row's writing on its owner to its frame's sending
    /// here by a tail (the nodes' clocks agreeing).
    pub journal_tail_lag_seconds: Histogram,
    /// Timers of every session not yet fired, as the store holds them
    /// (set by the timer sweeper).
    pub timers_pending: Gauge,
    /// Timers this node fired (world turns begun).
    pub timers_fired: Counter,
    /// From a timer's due time to its world turn's start.
    pub timer_lateness_seconds: Histogram,
    /// Calls that waited for a person's approval (docs/protocol.md §19).
    pub approvals_requested: Counter,
    /// Approvals decided, by decision (`approve`, `deny`, `timeout`).
    pub approvals_approved: Counter,
    pub approvals_denied: Counter,
    pub approvals_timed_out: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            started: std::time::Instant::now(),
            sessions_live: Gauge::default(),
            sessions_created: Counter::default(),
            sessions_loaded: Counter::default(),
            sessions_hibernated: Counter::default(),
            player_connections: Gauge::default(),
            spectator_connections: Gauge::default(),
            turns_started: Counter::default(),
            turns_completed: Counter::default(),
            turns_failed: Mutex::new(BTreeMap::new()),
            turn_seconds: Histogram::new(SECONDS),
            turn_overhead_seconds: Histogram::new(SECONDS),
            tool_seconds: Histogram::new(SECONDS),
            model_call_seconds: Histogram::new(SECONDS),
            model_prompt_tokens: Counter::default(),
            model_completion_tokens: Counter::default(),
            commit_rows: Histogram::new(ROWS),
            commit_seconds: Histogram::new(SECONDS),
            frames_sent: Counter::default(),
            outbound_drops: Counter::default(),
            rate_limited: Counter::default(),
            lease_renewals: Counter::default(),
            lease_renewals_failed: Counter::default(),
            leases_lost: Counter::default(),
            sessions_taken_over: Counter::default(),
            sessions_tailed: Gauge::default(),
            journal_notices: Counter::default(),
            journal_tail_lag_seconds: Histogram::new(SECONDS),
            timers_pending: Gauge::default(),
            timers_fired: Counter::default(),
            timer_lateness_seconds: Histogram::new(LATENESS),
            approvals_requested: Counter::default(),
            approvals_approved: Counter::default(),
            approvals_denied: Counter::default(),
            approvals_timed_out: Counter::default(),
        }
    }
}

impl Metrics {
    /// A turn ended after `took`, of which `model` waiting for the model.
    pub fn turn_ended(&self, took: Duration, model: Duration) {
        self.turn_seconds.observe_duration(took);
        self.turn_overhead_seconds
            .observe_duration(took.saturating_sub(model));
    }

    pub fn turn_failed(&self, code: &str) {
        if let Ok(mut failed) = self.turns_failed.lock() {
            *failed.entry(code.to_owned()).or_default() += 1;
        }
    }

    /// An approval was decided.
    pub fn approval_decided(&self, decision: crate::game::approvals::Decision) {
        use crate::game::approvals::Decision;
        match decision {
            Decision::Approve => &self.approvals_approved,
            Decision::Deny => &self.approvals_denied,
            Decision::Timeout => &self.approvals_timed_out,
        }
        .inc();
    }

    /// Failed turns so far, by error code.
    pub fn turns_failed(&self) -> BTreeMap<String, u64> {
        self.turns_failed
            .lock()
            .map(|failed| failed.clone())
            .unwrap_or_default()
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let mut scalar = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        scalar(
            "questd_sessions_live",
            "gauge",
            "Sessions in memory.",
            self.sessions_live.get().to_string(),
        );
        scalar(
            "questd_sessions_created_total",
            "counter",
            "Sessions created.",
            self.sessions_created.get().to_string(),
        );
        scalar(
            "questd_sessions_loaded_total",
            "counter",
            "Sessions loaded from storage.",
            self.sessions_loaded.get().to_string(),
        );
        scalar(
            "questd_sessions_hibernated_total",
            "counter",
            "Sessions that left memory: idle ones (they reload on use), and those a drain handed over or an operator closed.",
            self.sessions_hibernated.get().to_string(),
        );
        scalar(
            "questd_timers_pending",
            "gauge",
            "Durable timers not yet fired, of every session in the store.",
            self.timers_pending.get().to_string(),
        );
        scalar(
            "questd_timers_fired_total",
            "counter",
            "Timers this node fired: world turns begun.",
            self.timers_fired.get().to_string(),
        );
        scalar(
            "questd_turns_started_total",
            "counter",
            "Turns started.",
            self.turns_started.get().to_string(),
        );
        scalar(
            "questd_turns_completed_total",
            "counter",
            "Turns that ended with turn_completed.",
            self.turns_completed.get().to_string(),
        );
        scalar(
            "questd_model_prompt_tokens_total",
            "counter",
            "Prompt tokens the model reported.",
            self.model_prompt_tokens.get().to_string(),
        );
        scalar(
            "questd_model_completion_tokens_total",
            "counter",
            "Completion tokens the model reported.",
            self.model_completion_tokens.get().to_string(),
        );
        scalar(
            "questd_frames_sent_total",
            "counter",
            "Frames queued to WebSocket connections.",
            self.frames_sent.get().to_string(),
        );
        scalar(
            "questd_outbound_queue_drops_total",
            "counter",
            "Connections dropped because their outbound queue was full.",
            self.outbound_drops.get().to_string(),
        );
        scalar(
            "questd_rate_limited_total",
            "counter",
            "Requests refused by a rate limit (chat and service calls).",
            self.rate_limited.get().to_string(),
        );
        scalar(
            "questd_lease_renewals_total",
            "counter",
            "Batches renewing this node's session claims (PostgreSQL).",
            self.lease_renewals.get().to_string(),
        );
        scalar(
            "questd_lease_renewals_failed_total",
            "counter",
            "Batches renewing this node's session claims that failed (PostgreSQL).",
            self.lease_renewals_failed.get().to_string(),
        );
        scalar(
            "questd_leases_lost_total",
            "counter",
            "Sessions stopped because another node claimed them or a claim lapsed.",
            self.leases_lost.get().to_string(),
        );
        scalar(
            "questd_sessions_taken_over_total",
            "counter",
            "Sessions this node claimed from another node (failover or drain).",
            self.sessions_taken_over.get().to_string(),
        );
        scalar(
            "questd_sessions_tailed",
            "gauge",
            "Sessions another node runs whose journal this node tails for its spectators.",
            self.sessions_tailed.get().to_string(),
        );
        scalar(
            "questd_journal_notices_total",
            "counter",
            "Notices of journal commits heard from the database (several nodes).",
            self.journal_notices.get().to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP questd_connections WebSocket connections by role.\n# TYPE questd_connections gauge\n\
             questd_connections{{role=\"player\"}} {}\nquestd_connections{{role=\"spectator\"}} {}",
            self.player_connections.get(),
            self.spectator_connections.get()
        );
        let _ = writeln!(
            out,
            "# HELP questd_turns_failed_total Turns that ended with turn_failed, by error code.\n\
             # TYPE questd_turns_failed_total counter"
        );
        for (code, n) in self.turns_failed() {
            let _ = writeln!(out, "questd_turns_failed_total{{code=\"{code}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP questd_approvals_requested_total Tool calls that waited for a person's approval.\n\
             # TYPE questd_approvals_requested_total counter\nquestd_approvals_requested_total {}",
            self.approvals_requested.get()
        );
        let _ = writeln!(
            out,
            "# HELP questd_approvals_decided_total Approvals decided, by decision.\n\
             # TYPE questd_approvals_decided_total counter\n\
             questd_approvals_decided_total{{decision=\"approve\"}} {}\n\
             questd_approvals_decided_total{{decision=\"deny\"}} {}\n\
             questd_approvals_decided_total{{decision=\"timeout\"}} {}",
            self.approvals_approved.get(),
            self.approvals_denied.get(),
            self.approvals_timed_out.get()
        );
        self.turn_seconds.render(
            &mut out,
            "questd_turn_duration_seconds",
            "From a turn leaving the queue to its last frame.",
        );
        self.turn_overhead_seconds.render(
            &mut out,
            "questd_turn_overhead_seconds",
            "A turn's duration minus the time it waited for model answers.",
        );
        self.tool_seconds.render(
            &mut out,
            "questd_tool_duration_seconds",
            "Validating and running one tool call.",
        );
        self.model_call_seconds.render(
            &mut out,
            "questd_model_call_duration_seconds",
            "One model call, from request to its whole answer.",
        );
        self.commit_rows.render(
            &mut out,
            "questd_journal_commit_rows",
            "Rows written by one journal commit.",
        );
        self.commit_seconds.render(
            &mut out,
            "questd_journal_commit_duration_seconds",
            "One journal commit, fsync included.",
        );
        self.journal_tail_lag_seconds.render(
            &mut out,
            "questd_journal_tail_lag_seconds",
            "From a journal row's writing on the session's owner to its frame's sending by this node's tail.",
        );
        self.timer_lateness_seconds.render(
            &mut out,
            "questd_timer_lateness_seconds",
            "From a timer's due time to the start of the world turn that fired it.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_render_in_prometheus_format() {
        let m = Metrics::default();
        for v in [0.0001, 0.003, 0.003, 200.0] {
            m.turn_seconds.observe(v);
        }
        m.turn_failed("AI_TIMEOUT");
        m.turn_failed("AI_TIMEOUT");
        m.player_connections.inc();
        let text = m.render();
        assert!(text.contains("questd_turn_duration_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("questd_turn_duration_seconds_bucket{le=\"0.005\"} 3\n"));
        assert!(text.contains("questd_turn_duration_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert!(text.contains("questd_turn_duration_seconds_count 4\n"));
        assert!(text.contains("questd_turns_failed_total{code=\"AI_TIMEOUT\"} 2\n"));
        // A turn's overhead is its time minus the model's.
        m.turn_ended(Duration::from_millis(1003), Duration::from_millis(1000));
        m.turn_ended(Duration::from_millis(5), Duration::from_millis(9));
        let text = m.render();
        assert!(text.contains("questd_turn_overhead_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("questd_turn_overhead_seconds_bucket{le=\"0.005\"} 2\n"));
        assert!(text.contains("questd_turn_overhead_seconds_count 2\n"));
        assert!(text.contains("questd_connections{role=\"player\"} 1\n"));
        assert_eq!(m.turns_failed().get("AI_TIMEOUT"), Some(&2));
        // Every sample line is `name{labels} value` with a number value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap_or_default();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn quantiles_are_estimated_within_their_bucket() {
        let h = Histogram::new(SECONDS);
        assert_eq!(h.quantile(0.5), None, "nothing observed yet");
        // Four in (0.001, 0.0025], one in (0.05, 0.1].
        for v in [0.002, 0.002, 0.002, 0.002, 0.07] {
            h.observe(v);
        }
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // Rank 2.5 of 5: five eighths into the bucket from 0.001 to 0.0025.
        assert!(
            near(h.quantile(0.5), 0.001 + 0.0015 * 2.5 / 4.0),
            "{:?}",
            h.quantile(0.5)
        );
        // Rank 4.95: most of the way through the bucket from 0.05 to 0.1.
        assert!(
            near(h.quantile(0.99), 0.05 + 0.05 * 0.95),
            "{:?}",
            h.quantile(0.99)
        );
        assert!(near(h.quantile(0.0), 0.001), "{:?}", h.quantile(0.0));
        // Past the last bound the estimate is that bound.
        h.observe(500.0);
        assert!(near(h.quantile(1.0), 120.0), "{:?}", h.quantile(1.0));
    }
}
