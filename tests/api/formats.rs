//! The format gate (docs/protocol.md §15): a node that meets a journal step or
//! a snapshot of a format newer than it reads refuses that session with a
//! clear, retryable error, keeps no claim on it (so a node that reads it
//! takes it), replays none of it, and goes on serving every other session.

use crate::cluster::{database, node};
use crate::common::*;
use crate::database::{execute, text_rows};
use serde_json::Value;

/// The live claims on a session (none once it is released or lapsed).
async fn claims(db: &str, s: &Session) -> Vec<Vec<String>> {
    text_rows(
        db,
        "SELECT node_id FROM session_owners WHERE session_id = $1 \
         AND lease_until > clock_timestamp()",
        s.session_id.as_str(),
    )
    .await
}

/// Writes the session's next journal step as a version that writes
/// journal format 4 would.
async fn write_newer_step(db: &str, s: &Session) {
    // The node may journal a step of its own (a presence frame) between
    // the read and the insert: a seq taken meanwhile is read again.
    for _ in 0..20 {
        let last: u64 = text_rows(
            db,
            "SELECT CAST(MAX(last_seq) AS TEXT) FROM journal WHERE session_id = $1",
            s.session_id.as_str(),
        )
        .await[0][0]
            .parse()
            .unwrap();
        let next = last + 1;
        let sql = format!(
            "INSERT INTO journal (session_id, seq, last_seq, turn_id, started, request_id, \
             ended, actions, body, created_at) VALUES ($1, {next}, {next}, NULL, 0, NULL, \
             NULL, 0, '{{\"format\":4,\"entries\":[]}}', 0) ON CONFLICT DO NOTHING"
        );
        if execute(db, &sql, s.session_id.as_str()).await == 1 {
            return;
        }
    }
    panic!("a newer step could not be written after the node's own");
}

#[actix_web::test]
async fn a_session_of_a_newer_format_is_refused_and_left_to_a_node_that_reads_it() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let (journal, snapshot, plain) = (a.demo().await, a.demo().await, a.demo().await);
    for s in [&journal, &snapshot] {
        let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
        crate::cluster::move_once(&mut player, &a, s, "r-1").await;
    }
    // The node stops (its claims lapse with it) while a newer version
    // writes: a step after the last one of one session, a snapshot of
    // another.
    a.kill9();
    write_newer_step(&db, &journal).await;
    let written = execute(
        &db,
        "UPDATE snapshots SET state = '{\"format\":3,\"campaign_id\":\"demo\"}' \
         WHERE session_id = $1",
        snapshot.session_id.as_str(),
    )
    .await;
    assert_eq!(written, 1);

    let a = node(&db, "node-a");
    for (s, what, found, newest) in [(&journal, "journal", 4, 3), (&snapshot, "snapshot", 3, 2)] {
        let url = format!("{}/api/v1/sessions/{}", a.base(), s.session_id);
        let auth = format!("Bearer {}", s.player_token);
        let refused = request("GET", &url, &[("Authorization", &auth)], None).await;
        let message = refused.body["message"].as_str().unwrap_or_default();
        assert_eq!(
            (
                refused.status,
                refused.retry_after.as_deref(),
                &refused.body["error_code"]
            ),
            (503, Some("1"), &Value::from("OVERLOADED")),
            "{}",
            refused.body
        );
        assert!(
            message.contains(&format!("{what} is format {found}"))
                && message.contains(&format!("{what} formats up to {newest}")),
            "the refusal names the formats: {message}"
        );
        assert!(
            claims(&db, s).await.is_empty(),
            "no claim on the {what}'s session"
        );
        // A player's WebSocket is refused the same way, before the upgrade.
        let ws = a.ws_url(&s.session_id, &s.player_token, None);
        assert_eq!(Ws::refused_status(&ws).await, 503, "{what}");
        assert!(
            claims(&db, s).await.is_empty(),
            "still none after the WebSocket"
        );
    }

    // Every other session plays on.
    let (mut player, _) = a
        .connect(&plain.session_id, &plain.player_token, None)
        .await;
    crate::cluster::move_once(&mut player, &a, &plain, "r-1").await;
    assert_eq!(moves_in_log(&a, &plain).await.len(), 1);
}

#[actix_web::test]
async fn a_spectator_tailing_a_session_a_newer_node_writes_is_sent_on() {
    let (_dir, db) = database();
    let (a, b) = (node(&db, "node-a"), node(&db, "node-b"));
    let s = a.demo().await;
    let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
    crate::cluster::move_once(&mut player, &a, &s, "r-1").await;
    let (mut spectator, _) = b.connect(&s.session_id, &s.spectator_token, None).await;
    // The owner's next step, as a newer version would write it.
    write_newer_step(&db, &s).await;
    // B's tail cannot read on: the spectator is told to reconnect (through
    // a load balancer, to a node that reads it).
    assert_eq!(spectator.close_code().await, Some(1012));
}
