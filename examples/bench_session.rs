//! The turn machine alone: sessions run in this process exactly as a node
//! runs them (the hub, one actor per session on the session threads, the
//! turn loop, the tool pipeline with its audit rows, the journal's group
//! commit on SQLite with `synchronous=FULL` or on PostgreSQL, the offline
//! game master), with no HTTP and no WebSocket: a player's chat is a
//! `SubmitChat` message, its end an `AwaitTurnEnd`, and each spectator a
//! recipient that counts the frames it is sent.
//!
//! Every session plays `roll 1d6` turns one after another; sessions play at
//! once. It prints turns per second and the CPU time of the whole process
//! (every thread, from `/proc/self/task/*/schedstat`) per turn, which,
//! beside the same figure of a server over real sockets (BENCHMARKS.md, "Beside Colyseus"),
//! tells what the session core costs and what the connections do.
//!
//! ```sh
//! cargo run --release --example bench_session -- 100 20 2
//! cargo run --release --example bench_session -- 1000 5 1 postgres://questd:questd@127.0.0.1:5432/questd_bench
//! ```
//! (sessions, turns per session, spectators per session, and a database
//! URL: a fresh SQLite file in a temporary folder by default).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use actix::prelude::*;
use futures_util::future::join_all;
use questd::game::Campaign;
use questd::llm::OfflineGameMaster;
use questd::metrics::Metrics;
use questd::protocol::ConnRole;
use questd::session::{
    AwaitTurnEnd, CreateSession, Limits, Outbound, Outbox, Placement, Quotas, SessionDeps,
    SessionHub, SubmitChat, Subscribe,
};
use questd::storage::{Node, Store, Visibility};
use questd::tools::Registry;

#[path = "support/cpu.rs"]
mod cpu;

/// The server's allocator (`src/main.rs`), so the figures compare.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A spectator: counts the frames it is sent.
struct Spectator(Arc<AtomicU64>);

impl Actor for Spectator {
    type Context = Context<Self>;
}

impl Handler<Outbound> for Spectator {
    type Result = ();

    fn handle(&mut self, msg: Outbound, _: &mut Self::Context) {
        let n = match msg {
            Outbound::Frame(_) => 1,
            Outbound::Frames(frames) => frames.len() as u64,
            Outbound::Wire(wire) => wire.frames as u64,
            Outbound::Close { .. } => 0,
        };
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let (sessions, turns, spectators) = (number(1, 100), number(2, 20), number(3, 2));
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    actix::System::new().block_on(run(url, sessions, turns, spectators));
}

async fn run(url: String, sessions: usize, turns: usize, spectators: usize) {
    let settings = questd::Settings::for_tests(&url);
    let metrics = Arc::new(Metrics::default());
    let node = Node::new("bench", std::time::Duration::from_secs(3));
    let store = Store::open_with(&url, metrics.clone(), None, node)
        .await
        .expect("the store opens");
    let registry = Arc::new(Registry::builtin().expect("the tools"));
    let (start, shared) = Campaign::builtin_starts(registry.names())
        .expect("the built-in campaigns")
        .start("demo")
        .expect("the demo campaign");
    let mut limits = Limits::from_settings(&settings);
    limits.chat_per_minute = u32::MAX;
    limits.chat_burst = u32::MAX;
    let deps = Arc::new(SessionDeps {
        store,
        registry,
        provider: Arc::new(OfflineGameMaster::default()),
        limits: Arc::new(limits),
        metrics: metrics.clone(),
        budgets: Arc::new(questd::budget::Budgets::off()),
    });
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    // No HTTP workers here: the sessions get threads of their own.
    let (placement, _arbiters) = Placement::own_threads(threads);
    // Room for every session, whatever its tenant or size; nothing swept.
    let quotas = Quotas {
        max_sessions: sessions + 1,
        per_tenant: sessions + 1,
        max_state_bytes: u64::MAX,
    };
    let hub = SessionHub::new(deps, placement, quotas, None).start();

    let frames = Arc::new(AtomicU64::new(0));
    let next_conn = AtomicUsize::new(1);
    let mut handles = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let handle = hub
            .send(CreateSession {
                tenant_id: "default".into(),
                visibility: Visibility::Private,
                state: start.clone(),
                shared: Some(shared.clone()),
                anonymous: false,
            })
            .await
            .expect("the hub answers")
            .expect("a session")
            .handle;
        for _ in 0..spectators {
            let spectator = Spectator(frames.clone()).start();
            handle
                .addr
                .send(Subscribe {
                    conn_id: next_conn.fetch_add(1, Ordering::Relaxed) as u64,
                    role: ConnRole::Spectator,
                    seat_id: None,
                    last_seq: None,
                    sink: questd::session::Sink::Mailbox(spectator.recipient()),
                    // It never takes its bytes back: no byte bound.
                    outbox: Arc::new(Outbox::new(usize::MAX)),
                })
                .await
                .expect("the session answers")
                .expect("subscribed");
        }
        handles.push(handle);
    }

    // A first turn each, then the measured ones.
    let play = |turns: usize| {
        join_all(handles.iter().map(|handle| async move {
            for _ in 0..turns {
                let accepted = handle
                    .addr
                    .send(SubmitChat {
                        text: "roll 1d6".into(),
                        seat_id: questd::game::party::host_seat(),
                        request_id: None,
                        conn_id: None,
                        trace_id: None,
                        traceparent: None,
                    })
                    .await
                    .expect("the session answers")
                    .expect("the chat is taken");
                handle
                    .addr
                    .send(AwaitTurnEnd {
                        turn_id: accepted.turn_id,
                    })
                    .await
                    .expect("the session answers")
                    .expect("the turn ends");
            }
        }))
    };
    play(1).await;
    let frames_before = frames.load(Ordering::Relaxed);
    let (commits_before, rows_before) = (metrics.commit_rows.count(), metrics.commit_rows.sum());
    let cpu_before = cpu::cpu_ns("self");
    let began = Instant::now();
    play(turns).await;
    let wall = began.elapsed().as_secs_f64();
    let cpu = (cpu::cpu_ns("self") - cpu_before) as f64 / 1000.0;
    let done = (sessions * turns) as f64;
    let commits = (metrics.commit_rows.count() - commits_before) as f64;
    let rows = metrics.commit_rows.sum() - rows_before;
    println!(
        "{sessions} sessions x {spectators} spectators x {turns} turns: {:.0} turns/s, \
         {:.1} us CPU per turn, {:.2} commits and {:.1} rows per turn, \
         {:.1} frames per spectator per turn",
        done / wall,
        cpu / done,
        commits / done,
        rows / done,
        (frames.load(Ordering::Relaxed) - frames_before) as f64 / (done * spectators.max(1) as f64),
    );
    System::current().stop();
}
