//! Tool pipeline costs, in process: registry lookup, argument parse + schema
//! validation, a simple tool's whole invocation, and a five-call chain.
//!
//! ```text
//! cargo run --release --example bench_tools
//! ```
//!
//! Each figure is the time of one operation, measured over batches (one
//! batch = `BATCH` operations, timed together, so the clock's own cost does
//! not dominate); p50 and p99 are over batches.

use std::hint::black_box;
use std::time::Instant;

use questd::game::Campaign;
use questd::game::rng::SplitMix64;
use questd::protocol::SessionId;
use questd::tools::{Caller, RawArgs, Registry, Role};

const BATCH: usize = 1000;
const BATCHES: usize = 200;

/// p50 and p99 of per-operation nanoseconds over `BATCHES` batches.
fn measure(mut op: impl FnMut()) -> (f64, f64) {
    for _ in 0..BATCH {
        op();
    }
    let mut per_op: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..BATCH {
                op();
            }
            started.elapsed().as_nanos() as f64 / BATCH as f64
        })
        .collect();
    per_op.sort_by(|a, b| a.total_cmp(b));
    (per_op[BATCHES / 2], per_op[BATCHES * 99 / 100])
}

fn main() {
    let registry = Registry::builtin().expect("tools register");
    let names: Vec<&str> = registry.names().to_vec();
    let state = Campaign::builtin("demo", &names)
        .expect("demo exists")
        .expect("demo is valid")
        .into_state();
    let caller = Caller {
        acting: &[],
        role: Role::GameMaster,
        allowlist: &state.allowlist,
        session_id: &SessionId::from("sess_bench"),
        user_id: None,
        site_id: None,
    };
    let mut rng = SplitMix64::new(1);
    let args = r#"{"dice":"1d20+5","reason":"stealth"}"#;
    let move_args = r#"{"actor_id":"pc_001","to_area_id":"area_002"}"#;

    let rows: Vec<(&str, (f64, f64))> = vec![
        (
            "registry lookup (hash)",
            measure(|| {
                black_box(registry.spec(black_box("get_character_stats")));
            }),
        ),
        (
            "parse + validate roll_dice args",
            measure(|| {
                let raw = RawArgs::Text(black_box(args).to_owned());
                black_box(registry.prepare("roll_dice", raw, &caller).ok());
            }),
        ),
        (
            "parse + validate move args",
            measure(|| {
                let raw = RawArgs::Text(black_box(move_args).to_owned());
                black_box(registry.prepare("move", raw, &caller).ok());
            }),
        ),
        (
            "invoke roll_dice (whole pipeline)",
            measure(|| {
                let raw = RawArgs::Text(black_box(args).to_owned());
                black_box(
                    registry
                        .invoke("roll_dice", raw, &caller, &state, &mut rng)
                        .outcome
                        .is_ok(),
                );
            }),
        ),
        (
            "invoke move (whole pipeline)",
            measure(|| {
                let raw = RawArgs::Text(black_box(move_args).to_owned());
                black_box(
                    registry
                        .invoke("move", raw, &caller, &state, &mut rng)
                        .outcome
                        .is_ok(),
                );
            }),
        ),
        (
            "chain: move_options, move, roll_dice, get_character_stats, search_content",
            measure(|| {
                for (tool, a) in [
                    ("move_options", "{}"),
                    ("move", move_args),
                    ("roll_dice", args),
                    ("get_character_stats", r#"{"character_id":"pc_001"}"#),
                    ("search_content", r#"{"query":"lantern oil"}"#),
                ] {
                    let out = registry.invoke(
                        tool,
                        RawArgs::Text(a.to_owned()),
                        &caller,
                        &state,
                        &mut rng,
                    );
                    black_box(out.outcome.is_ok());
                }
            }),
        ),
    ];
    println!("| operation | p50 | p99 |\n|---|---:|---:|");
    for (name, (p50, p99)) in rows {
        println!("| {name} | {} | {} |", human(p50), human(p99));
    }
}

fn human(ns: f64) -> String {
    if ns < 1000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else {
        format!("{:.2} ms", ns / 1_000_000.0)
    }
}
