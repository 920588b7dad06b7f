//! `questd loadtest` against a real server on port 0: the driver's library
//! entry point runs in process, so CI gets a small smoke run on every push.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use clap::Parser;
use questd::config::{Cli, Command, LoadtestArgs};
use questd::llm::OfflineGameMaster;
use questd::loadtest::{self, Report};

/// The flags of `questd loadtest`, parsed as the binary parses them.
fn args(app: &TestApp, extra: &[&str]) -> LoadtestArgs {
    let mut all = vec![
        "questd",
        "loadtest",
        "--url",
        app.base.as_str(),
        "--api-key",
        TEST_KEY,
    ];
    all.extend_from_slice(extra);
    match Cli::parse_from(all).command {
        Some(Command::Loadtest(args)) => args,
        other => panic!("not a loadtest: {other:?}"),
    }
}

async fn run(app: &TestApp, extra: &[&str]) -> Report {
    loadtest::run(&args(app, extra)).await.unwrap()
}

#[actix_web::test]
async fn a_smoke_run_is_clean_and_its_counts_add_up() {
    let app = spawn_app().await;
    let report = run(
        &app,
        &[
            "--sessions",
            "20",
            "--spectators-per-session",
            "2",
            "--turns",
            "3",
            "--source-ips",
            "127.0.0.2-127.0.0.4",
        ],
    )
    .await;
    assert!(report.passed(), "{}", report.table());
    assert_eq!(report.errors, 0);
    assert!(report.errors_by_code.is_empty());
    assert_eq!(report.protocol_violations, 0);
    assert_eq!(report.disconnects, 0);
    assert_eq!(
        (report.sessions, report.players, report.spectators),
        (20, 20, 40)
    );
    assert_eq!(report.connections_reached, 60);
    assert_eq!(report.turns_planned, 60);
    assert_eq!(
        (
            report.turns_completed,
            report.turns_failed,
            report.turns_refused
        ),
        (60, 0, 0)
    );
    // Every default message is one tool call, timed from call to result.
    assert_eq!(report.tool_calls, 60);
    assert_eq!(report.tool_latency_ms.count, 60);
    assert_eq!(report.turn_latency_ms.count, 60);
    assert_eq!(report.connect_ms.count, 60);
    assert!(report.turn_latency_ms.p50 > 0.0);
    assert!(report.turn_latency_ms.p50 <= report.turn_latency_ms.p99);
    assert!(report.turn_latency_ms.p99 <= report.turn_latency_ms.max);
    // The spectators got exactly the story frames their players got: per
    // turn at least turn_started, tool_call, tool_result and turn_completed.
    let check = report.spectator_check;
    assert_eq!(check.spectator_frames, check.player_frames);
    assert!(check.player_frames >= 40 * 3 * 4, "{check:?}");
    // Each connection got welcome and its story; players also their acks.
    assert!(report.frames_delivered >= 60 + check.player_frames * 3 / 2 + 60);
    assert!(report.turns_per_s > 0.0 && report.duration_s > 0.0);

    // Each session's story frames were timed from the first of its three
    // connections reading them to the last.
    assert!(report.fan_out_ms.count >= 20 * 3 * 4, "{report:?}");
    assert!(report.fan_out_ms.p50 <= report.fan_out_ms.max);
    assert_eq!(report.slow_spectators, 0);

    let json = serde_json::to_value(&report).unwrap();
    for field in [
        "turn_latency_ms",
        "tool_latency_ms",
        "connect_ms",
        "fan_out_ms",
    ] {
        assert!(json[field]["p99"].is_number(), "{field}: {json}");
    }
    app.stop().await;
}

#[actix_web::test]
async fn spectators_that_never_read_do_not_hold_up_the_others() {
    // A short outbound queue, so the server gives up on a stalled
    // spectator soon once its socket is full.
    let app = spawn_with(
        |s| {
            s.ws_queue = 32;
            s.chat_per_minute = 100_000;
            s.chat_burst = 1_000;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let report = run(
        &app,
        &[
            "--sessions",
            "4",
            "--spectators-per-session",
            "4",
            "--slow-spectators",
            "0.25",
            "--turns",
            "30",
            "--message",
            "map",
            "--message",
            "go to {neighbour}",
        ],
    )
    .await;
    assert!(report.passed(), "{}", report.table());
    assert_eq!((report.spectators, report.slow_spectators), (16, 4));
    assert_eq!(report.turns_completed, 120);
    // The twelve reading spectators got every frame their players got.
    let check = report.spectator_check;
    assert_eq!(check.spectator_frames, check.player_frames);
    assert!(check.player_frames >= 12 * 30 * 4, "{check:?}");
    assert!(report.table().contains("4 spectators never read"));
    app.stop().await;
}

#[actix_web::test]
async fn refusals_are_errors_by_code() {
    let app = spawn_app().await;
    let report = run(&app, &["--sessions", "3", "--campaign", "no_such_campaign"]).await;
    assert!(!report.passed());
    assert_eq!(report.sessions, 0);
    assert_eq!(report.errors, 3);
    assert_eq!(report.errors_by_code.get("BAD_REQUEST"), Some(&3));
    assert!(report.error_examples["BAD_REQUEST"].contains("no_such_campaign"));

    // A rate-limited chat is counted and sent again after the wait asked for.
    let app = spawn_with(
        |s| {
            s.chat_burst = 1;
            s.chat_per_minute = 120;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await;
    let report = run(&app, &["--sessions", "1", "--turns", "3"]).await;
    assert!(!report.passed());
    assert_eq!(report.turns_completed, 3, "{}", report.table());
    assert!(report.errors_by_code["RATE_LIMITED"] >= 2, "{:?}", report);
    assert_eq!(report.errors, report.errors_by_code["RATE_LIMITED"]);
    assert_eq!(report.protocol_violations, 0);
    app.stop().await;
}

#[actix_web::test]
async fn offline_latency_keeps_many_turns_in_flight() {
    let latency = Duration::from_millis(250);
    let app = spawn_with(|_| {}, Arc::new(OfflineGameMaster::with_latency(latency))).await;
    let report = run(
        &app,
        &[
            "--sessions",
            "20",
            "--turns",
            "2",
            "--spectators-per-session",
            "1",
        ],
    )
    .await;
    // Every turn completes through the waiting game master (that its waits
    // overlap instead of holding a thread is shown on a paused clock in
    // `llm::offline`'s tests; nothing here times the machine).
    assert!(report.passed(), "{}", report.table());
    assert_eq!(report.turns_completed, 40);
    assert_eq!(report.turns_failed, 0);
    app.stop().await;
}

#[actix_web::test]
async fn hold_keeps_every_connection_open_at_once_and_duration_caps_the_run() {
    let app = spawn_app().await;
    let report = run(
        &app,
        &[
            "--sessions",
            "6",
            "--spectators-per-session",
            "1",
            "--turns",
            "1",
            "--ramp-up",
            "0.3",
            "--hold",
            "0.2",
        ],
    )
    .await;
    assert!(report.passed(), "{}", report.table());
    // Held: every session's connections were open at the same moment.
    assert_eq!(report.connections_peak, 12);

    let report = run(
        &app,
        &["--sessions", "4", "--turns", "50", "--duration", "0"],
    )
    .await;
    assert!(report.passed(), "{}", report.table());
    assert_eq!((report.sessions, report.turns_completed), (0, 0));
    app.stop().await;
}

#[actix_web::test]
async fn players_that_pause_between_turns_keep_reading_and_spectators_close_together() {
    let app = spawn_app().await;
    let report = run(
        &app,
        &[
            "--sessions",
            "2",
            "--spectators-per-session",
            "3",
            "--turns",
            "3",
            "--think-time",
            "200ms",
        ],
    )
    .await;
    assert!(report.passed(), "{}", report.table());
    assert_eq!((report.errors, report.disconnects), (0, 0));
    assert_eq!(
        (
            report.turns_completed,
            report.turns_failed,
            report.turns_refused
        ),
        (6, 0, 0)
    );
    // Every spectator read its player's whole story before any of them
    // closed, and each frame was timed at all four connections.
    let check = report.spectator_check;
    assert_eq!(check.spectator_frames, check.player_frames);
    assert!(check.player_frames >= 6 * 3 * 4, "{check:?}");
    assert!(report.fan_out_ms.count >= 2 * 3 * 4, "{report:?}");
    assert_eq!(report.connections_reached, 8);
    app.stop().await;
}

/// A server for party runs: chats are not limited, so what is measured is
/// the party's play alone.
async fn party_server() -> TestApp {
    spawn_with(
        |s| {
            s.chat_per_minute = 100_000;
            s.chat_burst = 1_000;
        },
        Arc::new(OfflineGameMaster::default()),
    )
    .await
}

/// A party run: 3 sessions of 3 players (the creator and two who join by
/// its invite) and 1 spectator, 2 turns each.
async fn party_run(app: &TestApp, mode: &str) -> Report {
    run(
        app,
        &[
            "--sessions",
            "3",
            "--players-per-session",
            "3",
            "--spectators-per-session",
            "1",
            "--turns",
            "2",
            "--turn-mode",
            mode,
        ],
    )
    .await
}

#[actix_web::test]
async fn parties_play_in_free_mode_each_player_its_own_turns() {
    let app = party_server().await;
    let report = party_run(&app, "free").await;
    assert!(report.passed(), "{}", report.table());
    assert_eq!((report.errors, report.protocol_violations), (0, 0));
    assert_eq!(
        (report.sessions, report.players, report.spectators),
        (3, 9, 3)
    );
    // Every player played its two turns, each its own.
    assert_eq!(report.turns_planned, 18);
    assert_eq!(
        (
            report.turns_completed,
            report.turns_failed,
            report.turns_refused
        ),
        (18, 0, 0)
    );
    assert_eq!(report.turn_latency_ms.count, 18);
    let party = report.party.expect("a party run reports its party");
    assert_eq!((party.players_per_session, party.turn_mode), (3, "free"));
    assert_eq!(party.rounds_completed, 0);
    // The spectators saw every turn of all three players.
    let check = report.spectator_check;
    assert_eq!(check.spectator_frames, check.player_frames);
    assert!(check.player_frames >= 3 * 6 * 4, "{check:?}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["players_per_session"], 3);
    assert_eq!(json["turn_mode"], "free");
    app.stop().await;
}

#[actix_web::test]
async fn parties_play_in_rounds_one_turn_per_round_with_every_action() {
    let app = party_server().await;
    let report = party_run(&app, "rounds").await;
    assert!(report.passed(), "{}", report.table());
    assert_eq!((report.errors, report.protocol_violations), (0, 0));
    assert_eq!(
        (report.sessions, report.players, report.spectators),
        (3, 9, 3)
    );
    // Two rounds per session, each one turn with the three players'
    // actions; each player timed its own action to its round's end.
    let party = report.party.expect("a party run reports its party");
    assert_eq!((party.players_per_session, party.turn_mode), (3, "rounds"));
    assert_eq!(party.rounds_completed, 6);
    assert_eq!((report.turns_planned, report.turns_completed), (6, 6));
    assert_eq!(report.turn_latency_ms.count, 18);
    assert_eq!(party.round_resolution_ms.count, 6);
    assert!(party.round_resolution_ms.p50 <= party.round_resolution_ms.max);
    let check = report.spectator_check;
    assert_eq!(check.spectator_frames, check.player_frames);
    assert!(check.player_frames >= 3 * 2 * 4, "{check:?}");
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["round_resolution_ms"]["p99"].is_number(), "{json}");
    assert!(
        report
            .table()
            .contains("3 players per session, rounds mode")
    );
    app.stop().await;
}
