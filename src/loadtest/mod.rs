//! `questd loadtest`: drives a running questd over real WebSockets the way
//! users and their spectators do, checks the wire contract on every
//! connection, and reports throughput and latency (docs/protocol.md §8.1).
//!
//! Each session is one task: it creates a session (`POST /api/v1/sessions`),
//! seats `--players-per-session` players (an invite of the creator's, the
//! others joining by it; with `--turn-mode rounds` the creator switches the
//! session to rounds), connects them and `--spectators-per-session`
//! spectators, and each player plays `--turns` turns one at a time (chat
//! with a `request_id`, then read until that turn's
//! `turn_completed`/`turn_failed` and its `ack`, which may come in either
//! order; in rounds mode the turn is the round's, once every player has
//! acted). Every frame on every connection goes through
//! [`check::StreamChecker`] (with the party checks in party play); at the
//! end each spectator is compared with the creator's connection. Errors
//! (error frames, failed turns, refused or lost connections) and protocol
//! violations are counted; the process exits non-zero when either is not 0.
//!
//! Parts: [`check`] (the pure protocol checker), [`client`] (where sockets go,
//! bound to `--source-ips`), [`ws`] (the WebSocket client), [`session`] (one
//! session's play), [`report`] (live counters, histograms, the report).
//!
//! The library entry point is [`run`] (or [`run_with_progress`]); the
//! binary's is [`main`].

mod args;
pub mod check;
pub mod client;
pub mod report;
pub mod session;
pub mod ws;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::{Semaphore, watch};

pub use args::{LoadtestArgs, TurnMode};
pub use client::SourceIps;
use client::{SourcePicker, Target};
pub use report::Report;
use report::{Party, Requested, Rss, Stats, codes, read_rss_kib};
use session::{Plan, Run};

/// The chats a player sends when no `--message` is given: offline game
/// master commands, each one tool call.
pub const DEFAULT_MESSAGES: [&str; 4] = [
    "where can I go",
    "go to {neighbour}",
    "roll 2d6+1",
    "status",
];
/// How often the progress bar and the server's memory are refreshed.
const TICK: Duration = Duration::from_millis(200);
/// Idle HTTP connections kept for creating sessions.
const HTTP_IDLE_CONNECTIONS: usize = 64;

/// Why a load test could not run at all (what it found while running is in
/// the [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum LoadtestError {
    #[error("bad --url {url:?}: {why}")]
    BadUrl { url: String, why: String },
    #[error("{0}")]
    BadArgs(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("cannot start the driver's runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("cannot make a latency histogram: {0}")]
    Histogram(String),
    #[error("cannot write the report: {0}")]
    Report(#[from] serde_json::Error),
}

impl Plan {
    /// Checks the flags and fixes the run's start.
    fn from_args(args: &LoadtestArgs, started: Instant) -> Result<Self, LoadtestError> {
        let messages: Vec<String> = if args.messages.is_empty() {
            DEFAULT_MESSAGES.iter().map(|m| (*m).to_owned()).collect()
        } else {
            args.messages.clone()
        };
        if messages.iter().any(|m| m.trim().is_empty()) {
            return Err(LoadtestError::BadArgs(
                "a --message template is empty".into(),
            ));
        }
        if args.campaign.trim().is_empty() {
            return Err(LoadtestError::BadArgs("--campaign is empty".into()));
        }
        if args.frame_timeout <= 0.0 {
            return Err(LoadtestError::BadArgs(
                "--frame-timeout must be more than 0".into(),
            ));
        }
        Ok(Self {
            sessions: args.sessions,
            players: usize::from(args.players_per_session),
            turn_mode: args.turn_mode,
            spectators: args.spectators_per_session,
            slow_spectators: args.slow_spectators,
            turns: args.turns,
            think: Duration::from_millis(args.think_time),
            ramp_up: Duration::from_secs_f64(args.ramp_up),
            campaign: args.campaign.clone(),
            api_key: args.api_key.clone(),
            messages,
            hold: Duration::from_secs_f64(args.hold),
            frame_timeout: Duration::from_secs_f64(args.frame_timeout),
            started,
            deadline: args.duration.map(|d| started + Duration::from_secs_f64(d)),
        })
    }
}

/// Runs a load test as the flags say and reports it, with no progress bar.
/// Runs on the caller's tokio runtime (sessions are spawned onto it).
pub async fn run(args: &LoadtestArgs) -> Result<Report, LoadtestError> {
    run_with_progress(args, ProgressBar::hidden()).await
}

/// [`run`], showing progress (turns done, open connections, errors) on `bar`.
pub async fn run_with_progress(
    args: &LoadtestArgs,
    bar: ProgressBar,
) -> Result<Report, LoadtestError> {
    let sources = SourcePicker::new(args.source_ips.clone());
    let target = Target::resolve(&args.url, sources.first()).await?;
    let plan = Plan::from_args(args, Instant::now())?;
    let mut http = reqwest::Client::builder()
        .timeout(plan.frame_timeout)
        .pool_max_idle_per_host(HTTP_IDLE_CONNECTIONS);
    if let Some(ip) = sources.first() {
        http = http.local_address(ip);
    }
    let http = http
        .build()
        .map_err(|e| LoadtestError::Client(e.to_string()))?;
    warn_about_open_files(args);

    let stats = Arc::new(Stats::new()?);
    // Each player plays its turns; in rounds mode a session's players play
    // one turn together per round.
    let turns_per_session = match args.turn_mode {
        TurnMode::Free => (args.turns as u64).saturating_mul(plan.players as u64),
        TurnMode::Rounds => args.turns as u64,
    };
    let requested = Requested {
        sessions: args.sessions as u64,
        turns: (args.sessions as u64).saturating_mul(turns_per_session),
        party: plan.party().then(|| Party {
            players_per_session: plan.players as u64,
            turn_mode: args.turn_mode.name(),
        }),
    };
    let played = session::Countdown::new(args.sessions);
    let run = Arc::new(Run {
        target,
        http,
        sources,
        gate: Semaphore::new(args.connect_concurrency.max(1)),
        stats: stats.clone(),
        played,
        plan,
    });

    let (stop_ticker, ticker_stopped) = watch::channel(false);
    bar.set_length(requested.turns);
    let ticker = tokio::spawn(tick(stats.clone(), bar.clone(), args.pid, ticker_stopped));

    let began = run.plan.started;
    let mut sessions = tokio::task::JoinSet::new();
    for index in 0..args.sessions {
        sessions.spawn(session::run_session(run.clone(), index));
    }
    while let Some(done) = sessions.join_next().await {
        if let Err(e) = done {
            stats.error(codes::DRIVER_FAILED, || e.to_string());
        }
    }
    let elapsed = began.elapsed();

    let _ = stop_ticker.send(true);
    let rss = ticker.await.ok().flatten();
    bar.finish_and_clear();
    Ok(stats.report(&requested, elapsed, rss))
}

/// Refreshes the progress bar and samples the server's memory until told
/// to stop; returns the memory seen.
async fn tick(
    stats: Arc<Stats>,
    bar: ProgressBar,
    pid: Option<u32>,
    mut stop: watch::Receiver<bool>,
) -> Option<Rss> {
    let mut rss = pid.and_then(read_rss_kib).map(Rss::new);
    if let (Some(pid), None) = (pid, rss) {
        tracing::warn!(
            pid,
            "cannot read VmRSS of the --pid process; no memory figures"
        );
    }
    let mut every = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => {}
        }
        if let (Some(pid), Some(r)) = (pid, rss.as_mut())
            && let Some(kib) = read_rss_kib(pid)
        {
            r.sample(kib);
        }
        bar.set_position(stats.turns_done());
        bar.set_message(format!(
            "{} open, {} errors, {} violations",
            stats.open_now(),
            stats.errors(),
            stats.violations()
        ));
        if *stop.borrow() {
            return rss;
        }
    }
}

/// Says so when the run may need more sockets than this process may open.
fn warn_about_open_files(args: &LoadtestArgs) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse::<u64>().ok());
    let per_session = u64::from(args.players_per_session) + args.spectators_per_session as u64;
    let wanted = (args.sessions as u64).saturating_mul(per_session);
    if let Some(soft) = soft
        && wanted > soft
    {
        tracing::warn!(
            connections = wanted,
            open_file_limit = soft,
            "the run may need more sockets than this process may open; \
             split it over several driver processes or use --ramp-up"
        );
    }
}

/// A progress bar on stderr, or a hidden one with `--json` or when stderr
/// is not a terminal.
fn progress_bar(args: &LoadtestArgs) -> ProgressBar {
    if args.json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:32}] {pos}/{len} turns ({per_sec}) {msg}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// `questd loadtest`: runs on a runtime of its own, prints the summary table
/// (to stderr with `--json`, whose object is then the last line of stdout)
/// and says how the process should exit.
pub fn main(args: &LoadtestArgs) -> Result<ExitCode, LoadtestError> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads.max(1));
    }
    let runtime = runtime.build()?;
    let report = runtime.block_on(run_with_progress(args, progress_bar(args)))?;
    let table = report.table();
    if args.json {
        eprint!("{table}");
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{table}");
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
