//! Durable timers at scale, through the real API on real nodes.
//!
//! `fire`: `SESSIONS` demo sessions spread over `NODES` nodes on one
//! database, each with one timer (`schedule_event` over the tool API with
//! a key) due in the same second; optionally (`restart`) every node is
//! stopped after scheduling and started again, so no session is loaded
//! when its timer comes due and the sweeper must find them all. Prints
//! the time from the due second until every timer has fired (its world
//! turn begun) and until every world turn has ended, the
//! lateness p50/p99 (the nodes' `questd_timer_lateness_seconds`,
//! merged), and the nodes' CPU time over that window.
//!
//! `pending`: `SESSIONS` sessions with `PER_SESSION` timers each, due in
//! a day; prints the node's memory with them, then restarts it and prints
//! the time until it is ready and until it reports every pending timer
//! (`questd_timers_pending`), and its memory then.
//!
//! ```sh
//! cargo build --release
//! # Sessions created with a key, live ones and tool calls are limited per
//! # tenant; lift them.
//! export QUESTD_KEY_CREATE_PER_MINUTE=1000000 QUESTD_KEY_CREATE_BURST=100000 \
//!     QUESTD_MAX_SESSIONS_PER_TENANT=100000 QUESTD_SERVICE_PER_MINUTE=10000000 \
//!     QUESTD_SERVICE_BURST=100000 QUESTD_CALLS_PER_MINUTE=100000 QUESTD_CALLS_BURST=100
//! cargo run --release --example bench_timers -- target/release/questd \
//!     sqlite:///tmp/bench-timers.db fire 1 10000 [restart]
//! cargo run --release --example bench_timers -- target/release/questd \
//!     postgres://questd:questd@127.0.0.1:5432/questd_timers fire 2 10000 [restart]
//! cargo run --release --example bench_timers -- target/release/questd \
//!     sqlite:///tmp/bench-timers-p.db pending 1 1563 64
//! ```
//! The database must be new or questd's own.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{Value, json};

#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/nodes.rs"]
#[allow(dead_code)]
mod nodes;
use nodes::{KEY, Node, create_session, start, start_on};

/// Requests in flight at once.
const CONCURRENCY: usize = 64;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 UTC of epoch milliseconds (whole seconds are enough here).
fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Creates `n` demo sessions round-robin over `ports`; answers each with
/// the port it was created on.
async fn create(http: &reqwest::Client, ports: &[u16], n: usize) -> Vec<(String, u16)> {
    futures_util::stream::iter(0..n)
        .map(|i| {
            let port = ports[i % ports.len()];
            async move {
                let body = create_session(http, port).await;
                let Some(id) = body["session_id"].as_str() else {
                    panic!("session {i} not created: {body}");
                };
                let id = id.to_owned();
                (id, port)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// Schedules one timer in each session of `sessions` (`input` made from
/// its index), through the tool API of the node it was created on.
async fn schedule(
    http: &reqwest::Client,
    sessions: &[(String, u16)],
    per_session: usize,
    input: impl Fn(usize) -> Value + Copy,
) {
    // Each round of calls spreads over every session.
    let calls = (0..per_session).flat_map(|k| sessions.iter().map(move |s| (s, k)));
    let failed: usize = futures_util::stream::iter(calls)
        .map(|((id, port), k)| async move {
            let answer: Value = http
                .post(format!("http://127.0.0.1:{port}/api/v1/tools/call"))
                .header("X-Internal-API-Key", KEY)
                .header("X-Tenant-ID", "default")
                .header("X-Session-ID", id.as_str())
                .header("X-Site-ID", "bench")
                .header("X-Trace-ID", format!("bench-{id}-{k}"))
                .json(&json!({"tool_name": "schedule_event", "input": input(k)}))
                .send()
                .await
                .expect("schedule")
                .json()
                .await
                .expect("scheduled");
            usize::from(answer["success"] != true)
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .sum();
    assert_eq!(
        failed, 0,
        "every schedule_event call succeeds (are the limits lifted?)"
    );
}

/// The `/metrics` text of the node at `port`.
async fn metrics(http: &reqwest::Client, port: u16) -> String {
    http.get(format!("http://127.0.0.1:{port}/metrics"))
        .header("X-Internal-API-Key", KEY)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

/// The value of the sample `name` (exactly, labels included) in `text`.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Turns ended (completed or failed) in the `/metrics` text `text`.
fn ended(text: &str) -> f64 {
    let failed: f64 = text
        .lines()
        .filter(|l| l.starts_with("questd_turns_failed_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    sample(text, "questd_turns_completed_total") + failed
}

/// The lateness histogram's cumulative buckets (bound, count) in `text`.
fn lateness(text: &str) -> Vec<(f64, f64)> {
    let prefix = "questd_timer_lateness_seconds_bucket{le=\"";
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.parse().ok()?))
        })
        .collect()
}

/// The `q`-quantile of cumulative buckets, linear within a bucket as
/// Prometheus' `histogram_quantile` is.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank && count > below.1 {
            if le.is_infinite() {
                return below.0;
            }
            return below.0 + (le - below.0) * (rank - below.1) / (count - below.1);
        }
        below = (le, count);
    }
    below.0
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Stops a node as an operator would (`SIGTERM`: it hands its sessions
/// over) and waits for it.
fn stop(node: &mut Node) {
    let pid = node.0.id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let _ = node.0.wait();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: bench_timers QUESTD_BINARY DB_URL (fire NODES SESSIONS [restart] | pending NODES SESSIONS PER_SESSION)";
    let (binary, db, mode) = match &args[..] {
        [_, b, d, m, ..] => (b.as_str(), d.as_str(), m.as_str()),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let nodes: usize = args.get(4).and_then(|a| a.parse().ok()).expect("NODES");
    let sessions: usize = args.get(5).and_then(|a| a.parse().ok()).expect("SESSIONS");
    let http = reqwest::Client::new();
    let names: Vec<String> = (0..nodes).map(|i| format!("timers-{i}")).collect();
    let mut running: Vec<(Node, u16)> = names.iter().map(|n| start(binary, db, n)).collect();
    let ports: Vec<u16> = running.iter().map(|(_, p)| *p).collect();
    let began = Instant::now();
    let created = create(&http, &ports, sessions).await;
    println!(
        "created {sessions} sessions in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    match mode {
        "fire" => {
            let restart = args.get(6).is_some_and(|a| a == "restart");
            // Due in the same second, far enough ahead for the scheduling
            // (and the restart) to be over first.
            let lead_ms = 20_000 + sessions as i64 * 3;
            let due_ms = (now_ms() + lead_ms) / 1000 * 1000;
            let at = rfc3339(due_ms);
            let began = Instant::now();
            schedule(
                &http,
                &created,
                1,
                |_| json!({"event": "bench_tick", "at": at}),
            )
            .await;
            println!(
                "scheduled {sessions} timers in {:.1} s, all due at {at}",
                began.elapsed().as_secs_f64()
            );
            if restart {
                for (node, _) in &mut running {
                    stop(node);
                }
                running = names
                    .iter()
                    .zip(&ports)
                    .map(|(n, p)| start_on(binary, db, n, &format!("127.0.0.1:{p}")))
                    .collect();
                println!("restarted every node: no session is loaded");
            }
            assert!(
                now_ms() < due_ms - 500,
                "the setup ended before the due time"
            );
            let pids: Vec<String> = running.iter().map(|(n, _)| n.0.id().to_string()).collect();
            tokio::time::sleep(Duration::from_millis((due_ms - now_ms() - 200) as u64)).await;
            let cpu_before: u64 = pids.iter().map(|p| cpu::cpu_ns(p)).sum();
            // Turns ended before the due time, on every node.
            let mut ended_before = 0.0;
            for p in &ports {
                ended_before += ended(&metrics(&http, *p).await);
            }
            // Fired: the world turn began (its `turn_started` journalled,
            // which marks the timer fired); told: it ended.
            let mut all_fired_ms = None;
            let all_told_ms = loop {
                let (mut fired, mut told) = (0.0, -ended_before);
                for p in &ports {
                    let text = metrics(&http, *p).await;
                    fired += sample(&text, "questd_timers_fired_total");
                    told += ended(&text);
                }
                if fired >= sessions as f64 && all_fired_ms.is_none() {
                    all_fired_ms = Some(now_ms());
                }
                if told >= sessions as f64 {
                    break now_ms();
                }
                assert!(
                    now_ms() < due_ms + 300_000,
                    "every world turn ends within 5 minutes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let all_fired_ms = all_fired_ms.unwrap_or(all_told_ms);
            let cpu_ms =
                (pids.iter().map(|p| cpu::cpu_ns(p)).sum::<u64>() - cpu_before) / 1_000_000;
            let mut merged: Vec<(f64, f64)> = Vec::new();
            for p in &ports {
                for (i, (le, n)) in lateness(&metrics(&http, *p).await).into_iter().enumerate() {
                    match merged.get_mut(i) {
                        Some(b) => b.1 += n,
                        None => merged.push((le, n)),
                    }
                }
            }
            println!(
                "all {sessions} fired {:.2} s and their world turns ended {:.2} s after the due second; lateness p50 {:.3} s, p99 {:.3} s; nodes' CPU {:.2} s",
                (all_fired_ms - due_ms) as f64 / 1000.0,
                (all_told_ms - due_ms) as f64 / 1000.0,
                quantile(&merged, 0.5),
                quantile(&merged, 0.99),
                cpu_ms as f64 / 1000.0
            );
        }
        "pending" => {
            let per: usize = args
                .get(6)
                .and_then(|a| a.parse().ok())
                .expect("PER_SESSION");
            let began = Instant::now();
            schedule(
                &http,
                &created,
                per,
                |k| json!({"event": format!("far_{k}"), "delay_s": 86_400 + k}),
            )
            .await;
            let total = sessions * per;
            let pid = running[0].0.0.id();
            println!(
                "scheduled {total} timers in {:.1} s; node RSS {:.0} MiB with every session loaded",
                began.elapsed().as_secs_f64(),
                rss_mib(pid)
            );
            stop(&mut running[0].0);
            let started = Instant::now();
            let (node, port) = start_on(binary, db, &names[0], &format!("127.0.0.1:{}", ports[0]));
            let ready = started.elapsed();
            loop {
                let text = metrics(&http, port).await;
                if sample(&text, "questd_timers_pending") >= total as f64 {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "the count comes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            println!(
                "restarted: listening after {:.2} s, {total} pending timers counted after {:.2} s; RSS {:.0} MiB",
                ready.as_secs_f64(),
                started.elapsed().as_secs_f64(),
                rss_mib(node.0.id())
            );
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
