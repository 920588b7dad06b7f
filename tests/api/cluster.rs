//! Several questd processes on one PostgreSQL database (docs/protocol.md §15):
//! any node serves any session with the owner's frames, a chat runs once,
//! a dead or paused owner loses its sessions to another node, and a paused
//! owner that wakes up writes nothing more.

use crate::common::*;
use crate::process::Server;
use crate::proxy::{FaultProxy, Mode};
use serde_json::Value;

/// A lease short enough that failover tests do not wait long.
const LEASE_MS: &str = "1500";

/// A node named `name` on the database `db`.
pub fn node(db: &str, name: &str) -> Server {
    node_with(db, name, &[])
}

/// [`node`], with these settings on top (a later one wins).
pub fn node_with(db: &str, name: &str, settings: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("QUESTD_NODE_ID", name),
        ("QUESTD_LEASE_MS", LEASE_MS),
        ("QUESTD_CHAT_BURST", "1000"),
        ("QUESTD_CHAT_PER_MINUTE", "1000000"),
    ];
    env.extend_from_slice(settings);
    Server::start_with(db, &env)
}

/// A game master slow enough for a turn to be under way while a test
/// acts (another chat, a pause of the node).
const SLOW_GAME_MASTER: &[(&str, &str)] = &[("QUESTD_OFFLINE_LATENCY_MS", "3000")];

/// Nodes A, B and C on the database `db`.
fn three_nodes(db: &str) -> (Server, Server, Server) {
    (node(db, "node-a"), node(db, "node-b"), node(db, "node-c"))
}

/// A fresh PostgreSQL database for one test's nodes.
pub fn database() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::postgres_url_in(dir.path());
    (dir, db)
}

/// The seqs of the story frames among `frames`.
fn seqs(frames: &[Value]) -> Vec<u64> {
    story(frames)
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .collect()
}

/// Plays `go to <neighbour>` and answers the seq of its `tool_result` ok.
pub async fn move_once(ws: &mut Ws, api: &impl Api, s: &Session, rid: &str) -> u64 {
    played_move(ws, api, s, rid).await.0
}

/// Plays `go to <neighbour>`; answers the seq of its `tool_result` ok and
/// the last seq the turn was seen up to.
pub async fn played_move(ws: &mut Ws, api: &impl Api, s: &Session, rid: &str) -> (u64, u64) {
    let target = neighbour(&api.snapshot(s).await);
    let frames = ws.play(&format!("go to {target}"), rid).await;
    let ok = frames
        .iter()
        .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
        .and_then(|f| f["seq"].as_u64())
        .unwrap_or_else(|| panic!("the move ran: {frames:?}"));
    (ok, seqs(&frames).into_iter().max().unwrap_or(ok))
}

#[actix_web::test]
async fn any_node_serves_a_session_with_the_owners_frames_and_runs_a_chat_once() {
    let (_dir, db) = database();
    let (a, b, c) = three_nodes(&db);
    let s = a.demo().await;

    // Each node says who it is; the session answer names its owner,
    // whichever node is asked.
    for (server, name) in [(&a, "node-a"), (&b, "node-b"), (&c, "node-c")] {
        let (status, health) = get(&format!("{}/healthz", server.base()), None).await;
        assert_eq!((status, health["node_id"].as_str()), (200, Some(name)));
        assert_eq!(server.snapshot(&s).await["owner_node"], "node-a");
    }

    // A bad token is refused before the upgrade through any node, as the
    // owner refuses it.
    assert_eq!(
        Ws::refused_status(&b.ws_url(&s.session_id, "not-a-token", None)).await,
        401
    );

    // A spectator on B, the player on C: every frame of the turn, the same
    // on both, with the ack first on the player's connection.
    let (mut spectator, sw) = b.connect(&s.session_id, &s.spectator_token, None).await;
    let (mut player, pw) = c.connect(&s.session_id, &s.player_token, None).await;
    assert_eq!(sw["state"]["session_id"], s.session_id.as_str());
    let target = neighbour(&pw["state"]);
    let played = player.play(&format!("go to {target}"), "r-1").await;
    let turn_id = first(&played, "turn_started")["turn_id"].as_str().unwrap();
    let watched = spectator.until_turn_end(turn_id).await;
    let of_turn = |frames: &[Value]| -> Vec<Value> {
        story(frames)
            .into_iter()
            .filter(|f| f["turn_id"] == turn_id)
            .collect()
    };
    assert_eq!(of_turn(&watched), of_turn(&played));
    assert_eq!(position(&a.snapshot(&s).await), target);

    // A message over 64 KiB is answered by C, which relays the player, as
    // the owner answers it; the relayed connection plays on.
    let huge = serde_json::json!({"type": "chat", "text": "x".repeat(100 * 1024)});
    player.send_json(&huge).await;
    let refused = player.until(|f| f["type"] == "error").await.pop().unwrap();
    assert_eq!(refused["error_code"], "TEXT_TOO_LONG", "{refused}");
    let rolled = player.play("roll 1d6", "r-2").await;
    assert_eq!(first(&rolled, "tool_result")["status"], "ok");

    // The same request_id again, through another node: not run again.
    let (mut again, _) = b.connect(&s.session_id, &s.player_token, None).await;
    again.chat("go somewhere else", "r-1").await;
    let reply = again
        .until(|f| f["type"] == "ack" || f["type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (
            reply["type"].as_str(),
            reply["duplicate"].as_bool(),
            reply["turn_id"].as_str()
        ),
        (Some("ack"), Some(true), Some(turn_id)),
        "{reply}"
    );
    assert_eq!(moves_in_log(&b, &s).await.len(), 1, "the chat ran once");
    assert_eq!(position(&c.snapshot(&s).await), target);

    // A page served by B plays a turn over HTTP through B: B judged its
    // Origin, and A runs the turn.
    let origin = format!("http://127.0.0.1:{}", b.port());
    let turn = request(
        "POST",
        &format!("{}/api/v1/chat", b.base()),
        &[
            ("Authorization", &format!("Bearer {}", s.player_token)),
            ("Origin", &origin),
        ],
        Some(&serde_json::json!({"session_id": s.session_id, "message": "roll 1d6"})),
    )
    .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
}

#[actix_web::test]
async fn a_spectator_on_another_node_watches_from_the_journal_through_a_failover() {
    let (_dir, db) = database();
    let (a, b, c) = three_nodes(&db);
    let s = a.demo().await;
    let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
    move_once(&mut player, &a, &s, "one").await;

    // A spectator on B resumes from seq 0: the whole story so far, read
    // from the store by B, then B's tail of the journal, live.
    let (mut spectator, welcome) = b.connect(&s.session_id, &s.spectator_token, Some(0)).await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    let welcome_seq = welcome["seq"].as_u64().unwrap();
    let mut watched = if welcome_seq > 0 {
        spectator
            .until(|f| f["seq"].as_u64() == Some(welcome_seq))
            .await
    } else {
        Vec::new()
    };
    assert_eq!(position(&welcome["state"]), position(&a.snapshot(&s).await));

    // The owner counts B's spectator in its presence frames.
    player
        .until(|f| f["type"] == "presence" && f["spectators"] == 1)
        .await;
    let on_b = crate::metrics::scrape(&b).await;
    assert_eq!(on_b["questd_sessions_tailed"], 1.0);
    assert_eq!(on_b["questd_connections{role=\"spectator\"}"], 1.0);

    // A dies. The player goes on through C, which takes the session over;
    // the spectator stays on B, connected, and sees C's turn.
    assert!(a.kill9().code().is_none(), "killed by a signal");
    let (mut player, _) = c
        .connect(&s.session_id, &s.player_token, Some(welcome_seq))
        .await;
    let target = neighbour(&c.snapshot(&s).await);
    let played = player.play(&format!("go to {target}"), "two").await;
    let turn_id = first(&played, "turn_started")["turn_id"].as_str().unwrap();
    watched.extend(spectator.until_turn_end(turn_id).await);
    assert_eq!(c.snapshot(&s).await["owner_node"], "node-c");

    // Every frame once, in order, with no gap: the story as stored.
    let seen = seqs(&watched);
    assert_eq!(seen, (1..=*seen.last().unwrap()).collect::<Vec<_>>());
    let stored = whole_story(&c, &s).await;
    assert_eq!(seen, stored[..seen.len()]);
    let on_b = crate::metrics::scrape(&b).await;
    assert!(
        on_b["questd_journal_tail_lag_seconds_count"] > 0.0,
        "{on_b:?}"
    );
    // B was told of the commits, not only polling for them.
    assert!(on_b["questd_journal_notices_total"] > 0.0, "{on_b:?}");
}

#[actix_web::test]
async fn a_node_follows_no_more_sessions_than_it_may_run() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node_with(&db, "node-b", &[("QUESTD_MAX_SESSIONS", "1")]);
    let (s1, s2) = (a.demo().await, a.demo().await);
    let (_watching, welcome) = b.connect(&s1.session_id, &s1.spectator_token, None).await;
    assert_eq!(welcome["type"], "welcome");
    // A second session's journal would be a second copy of a session's
    // state on B: refused as a full node refuses, with a retry.
    assert_eq!(
        Ws::refused_status(&b.ws_url(&s2.session_id, &s2.spectator_token, None)).await,
        503
    );
}

#[actix_web::test]
async fn the_owner_killed_mid_play_hands_the_session_on_with_nothing_lost() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let s = a.demo().await;
    // The player plays through B while A runs the session.
    let (mut ws, _) = b.connect(&s.session_id, &s.player_token, None).await;
    let mut acked = Vec::new();
    let mut last = 0;
    for i in 0..3 {
        let (seq, seen) = played_move(&mut ws, &b, &s, &format!("before-{i}")).await;
        acked.push(seq);
        last = seen;
    }
    assert!(a.kill9().code().is_none(), "killed by a signal");

    // The relay ends with 1012; the client reconnects to B, which takes the
    // session over once A's lease runs out, and play goes on.
    loop {
        match ws.next_or_close().await {
            Ok(_) => continue,
            Err(code) => {
                assert_eq!(code, Some(1012));
                break;
            }
        }
    }
    let (mut ws, welcome) = b.connect(&s.session_id, &s.player_token, Some(last)).await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    // Only what came after: the restarted turn's close, if any, and no gap.
    assert!(welcome["seq"].as_u64() >= Some(last), "{welcome}");
    for i in 0..3 {
        acked.push(move_once(&mut ws, &b, &s, &format!("after-{i}")).await);
    }
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");
    let metrics = crate::metrics::scrape(&b).await;
    assert_eq!(metrics["questd_sessions_taken_over_total"], 1.0);
    let logged = moves_in_log(&b, &s).await;
    assert_eq!(logged, acked, "every acknowledged move, once, in order");
    // The whole story from seq 0: every seq once, none missing.
    let all = whole_story(&b, &s).await;
    assert_eq!(all, (1..=*all.last().unwrap()).collect::<Vec<_>>());
}

#[actix_web::test]
async fn a_paused_owner_writes_nothing_once_another_node_took_the_session() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let s = a.demo().await;
    let (mut on_a, _) = a.connect(&s.session_id, &s.player_token, None).await;
    let first_move = move_once(&mut on_a, &a, &s, "on-a").await;

    // A stops (a long GC pause, a VM frozen) past its lease; B takes over.
    a.signal("STOP");
    let (mut on_b, welcome) = b.connect(&s.session_id, &s.player_token, None).await;
    let taken_at = welcome["seq"].as_u64().unwrap();
    let second_move = move_once(&mut on_b, &b, &s, "on-b").await;

    // A wakes up with a chat waiting from its old player: nothing of it is
    // told, the connection is closed for a reconnect, and nothing is
    // written.
    on_a.chat("go back", "on-a-late").await;
    a.signal("CONT");
    let mut told = Vec::new();
    let code = loop {
        match on_a.next_or_close().await {
            Ok(f) => told.push(f),
            Err(code) => break code,
        }
    };
    assert_eq!(code, Some(1012), "closed for a reconnect: {told:?}");
    assert!(
        seqs(&told).iter().all(|seq| *seq <= taken_at),
        "A told nothing after B took over: {told:?}"
    );
    assert_eq!(moves_in_log(&b, &s).await, [first_move, second_move]);
    let all = whole_story(&b, &s).await;
    assert_eq!(
        all,
        (1..=*all.last().unwrap()).collect::<Vec<_>>(),
        "no seq twice or missing"
    );
    assert!(all.contains(&second_move));
}

#[actix_web::test]
async fn sigterm_drains_the_node_and_the_session_goes_on_elsewhere() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let s = a.demo().await;
    let (mut ws, _) = a.connect(&s.session_id, &s.player_token, None).await;
    let (first_move, last) = played_move(&mut ws, &a, &s, "before").await;
    let there = position(&a.snapshot(&s).await);
    // A also serves a spectator of a session B runs, from the journal.
    let on_b = b.demo().await;
    let (mut watching, _) = a
        .connect(&on_b.session_id, &on_b.spectator_token, None)
        .await;
    // And a session made on A that nothing has used yet.
    let unused = a.demo().await;
    // And the player of A's session, relayed by B.
    let (mut relayed, _) = b.connect(&s.session_id, &s.player_token, None).await;

    // A stops taking work, closes its connections for a reconnect
    // elsewhere, hands its sessions over and exits cleanly.
    a.signal("TERM");
    for ws in [&mut ws, &mut watching] {
        let code = loop {
            match ws.next_or_close().await {
                Ok(_) => continue,
                Err(code) => break code,
            }
        };
        assert_eq!(code, Some(1012));
    }
    // B goes on: its relayed player is told the session's node restarts.
    assert_eq!(
        relayed.close_frame().await,
        Some((
            1012,
            "the session's node is restarting; reconnect".to_owned()
        ))
    );
    assert!(a.wait().success(), "a drained node exits cleanly");

    // On B the session goes on from where it was, nothing missing.
    let (mut ws, welcome) = b.connect(&s.session_id, &s.player_token, Some(last)).await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    assert_eq!(position(&welcome["state"]), there);
    let second_move = move_once(&mut ws, &b, &s, "after").await;
    assert_eq!(moves_in_log(&b, &s).await, [first_move, second_move]);
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");

    // The unused one starts on B from its start.
    let (mut ws, welcome) = b
        .connect(&unused.session_id, &unused.player_token, None)
        .await;
    assert_eq!(welcome["seq"], 0, "{welcome}");
    let frames = ws.play("roll 1d6", "r-1").await;
    assert_eq!(first(&frames, "turn_started")["turn_id"], "turn_1");
    assert_eq!(b.snapshot(&unused).await["owner_node"], "node-b");
}

#[actix_web::test]
async fn a_rolling_restart_of_every_node_loses_nothing() {
    let (_dir, db) = database();
    let mut a = node(&db, "node-a");
    let mut b = node(&db, "node-b");
    let s = a.demo().await;
    let mut acked = Vec::new();
    let mut last = 0;
    // Each round: play through B, then restart A (drained with SIGTERM),
    // then play through A and restart B. The player reconnects with
    // last_seq whenever its node goes away.
    for round in 0..2 {
        for (via, tag) in [(&b, "b"), (&a, "a")] {
            let (mut ws, welcome) = via
                .connect(&s.session_id, &s.player_token, Some(last))
                .await;
            assert_eq!(welcome["resumed"], true, "{welcome}");
            let (seq, seen) = played_move(&mut ws, via, &s, &format!("{tag}-{round}")).await;
            acked.push(seq);
            last = seen;
        }
        for (server, name) in [(&mut a, "node-a"), (&mut b, "node-b")] {
            let old = std::mem::replace(server, node(&db, &format!("{name}-next")));
            old.signal("TERM");
            assert!(old.wait().success(), "{name} drained and exited");
        }
    }
    assert_eq!(
        moves_in_log(&a, &s).await,
        acked,
        "every acknowledged move, once"
    );
    let all = whole_story(&b, &s).await;
    assert_eq!(all, (1..=*all.last().unwrap()).collect::<Vec<_>>());
}

#[actix_web::test]
async fn an_operators_close_reaches_the_spectators_another_node_serves() {
    let (_dir, db) = database();
    let (a, b) = (node(&db, "node-a"), node(&db, "node-b"));
    let s = a.demo().await;
    let (mut player, _) = a.connect(&s.session_id, &s.player_token, None).await;
    let (mut spectator, _) = b.connect(&s.session_id, &s.spectator_token, None).await;
    move_once(&mut player, &a, &s, "one").await;

    // A chat acknowledged before the close still runs; the operator closes
    // the session through B, which hands the close to A, the owner.
    player.chat("roll 1d6", "two").await;
    let ack = player.until(|f| f["type"] == "ack").await.pop().unwrap();
    let key = [("X-Internal-API-Key", TEST_KEY)];
    let close = format!("{}/api/v1/admin/sessions/{}/close", b.base(), s.session_id);
    let closed = request("POST", &close, &key, None).await;
    assert_eq!(closed.status, 200, "{}", closed.body);

    // Both connections see that turn end and are then closed with 4000:
    // the player's by A, the spectator's by B's tail of the journal.
    // (A spectator left open is caught by `CLOSE_WAIT`, far past B's
    // polling.)
    let mut seen = Vec::new();
    for (name, ws) in [("player", &mut player), ("spectator", &mut spectator)] {
        let (frames, code) = ws.frames_until_closed().await;
        let kinds: Vec<&Value> = frames.iter().map(|f| &f["type"]).collect();
        assert_eq!(code, Ok(Some(4000)), "{name} was closed after {kinds:?}");
        assert!(
            frames
                .iter()
                .any(|f| f["type"] == "turn_completed" && f["turn_id"] == ack["turn_id"]),
            "{name} saw the acknowledged turn end: {frames:?}"
        );
        seen = frames;
    }

    // The spectator had the story to its last frame before its close.
    let story = request(
        "GET",
        &format!("{}/api/v1/admin/sessions/{}/story", b.base(), s.session_id),
        &key,
        None,
    )
    .await;
    assert_eq!(story.status, 200, "{}", story.body);
    assert_eq!(story.body["closed_at"], closed.body["closed_at"]);
    let last = story.body["frames"].as_array().unwrap().last().unwrap()["seq"].as_u64();
    assert_eq!(seqs(&seen).last().copied(), last);

    // Reconnecting, to either node, is refused for good.
    for node in [&b, &a] {
        let url = node.ws_url(&s.session_id, &s.spectator_token, Some(0));
        assert_eq!(Ws::refused_status(&url).await, 410);
    }
    let (status, body) = get(
        &format!("{}/api/v1/sessions/{}", b.base(), s.session_id),
        Some(&s.spectator_token),
    )
    .await;
    assert_eq!(
        (status, &body["error_code"]),
        (410, &serde_json::json!("SESSION_CLOSED"))
    );
}

#[actix_web::test]
async fn a_paused_owner_does_not_hang_a_player_another_node_relays() {
    let (_dir, db) = database();
    let a = node(&db, "node-a");
    let b = node(&db, "node-b");
    let s = a.demo().await;
    // The player plays through B while A runs the session.
    let (mut ws, _) = b.connect(&s.session_id, &s.player_token, None).await;
    let (first_move, last) = played_move(&mut ws, &b, &s, "before").await;
    let target = neighbour(&b.snapshot(&s).await);

    // A stops answering (a long pause, a frozen VM): its socket stays
    // open and B's pings to the client go on. A chat sent now is not
    // left without an answer: B closes the connection for a reconnect
    // once A's claim has lapsed, the chat unacknowledged.
    a.signal("STOP");
    ws.chat(&format!("go to {target}"), "during").await;
    let (frames, code) = ws.frames_until_closed().await;
    assert_eq!(
        code,
        Ok(Some(1012)),
        "the relayed connection was closed for a reconnect: {frames:?}"
    );
    assert!(
        !frames.iter().any(|f| f["type"] == "ack"),
        "nothing acknowledged the chat a paused node holds: {frames:?}"
    );

    // The client reconnects to B, which takes the session over, and sends
    // the chat again under its request_id: it runs once, there.
    let (mut ws, welcome) = b.connect(&s.session_id, &s.player_token, Some(last)).await;
    assert_eq!(welcome["resumed"], true, "{welcome}");
    let played = ws.play(&format!("go to {target}"), "during").await;
    let moved = played
        .iter()
        .find(|f| f["type"] == "tool_result" && f["status"] == "ok")
        .and_then(|f| f["seq"].as_u64())
        .unwrap_or_else(|| panic!("the move ran on B: {played:?}"));
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");

    // A wakes up holding the chat it was sent while paused: it writes
    // nothing of it (its claim is gone), and the move is in the story once.
    a.signal("CONT");
    let (status, health) = get(&format!("{}/healthz", a.base()), None).await;
    assert_eq!((status, health["node_id"].as_str()), (200, Some("node-a")));
    let second = move_once(&mut ws, &b, &s, "after").await;
    assert_eq!(moves_in_log(&b, &s).await, [first_move, moved, second]);
    let all = whole_story(&b, &s).await;
    assert_eq!(
        all,
        (1..=*all.last().unwrap()).collect::<Vec<_>>(),
        "no seq twice or missing"
    );
}

#[actix_web::test]
async fn a_stale_owner_has_every_write_refused_by_its_epoch() {
    let (_dir, db) = database();
    // A lease this long keeps node A from renewing (and so from learning
    // that it lost the session) for the whole test: only the writer's
    // epoch check stands between A and the journal.
    let a = node_with(&db, "node-a", &[("QUESTD_LEASE_MS", "600000")]);
    let s = a.demo().await;
    let (mut ws, _) = a.connect(&s.session_id, &s.player_token, None).await;
    move_once(&mut ws, &a, &s, "before").await;
    let written = last_written(&db, &s).await;

    // A stops; meanwhile another node claims the session (the claim a
    // node makes once A's lease has run out, epoch bumped), and A resumes
    // believing it still owns it, with a chat to run.
    a.signal("STOP");
    let claimed = crate::database::execute(
        &db,
        "UPDATE session_owners SET node_id = 'node-b', epoch = epoch + 1, \
         lease_until = clock_timestamp() + interval '10 minutes' WHERE session_id = $1",
        &s.session_id,
    )
    .await;
    assert_eq!(claimed, 1, "the claim moved");
    a.signal("CONT");
    ws.chat("roll 1d6", "stale").await;

    // The turn's first write is refused: nothing of it is acknowledged or
    // shown, and the connection is closed for a reconnect.
    let (frames, code) = ws.frames_until_closed().await;
    assert_eq!(code, Ok(Some(1012)), "closed for a reconnect: {frames:?}");
    assert!(
        !frames
            .iter()
            .any(|f| f["type"] == "ack" || f["turn_id"] == "turn_2"),
        "nothing of the stale turn was told: {frames:?}"
    );
    // Nothing reached the journal after the claim moved.
    assert_eq!(last_written(&db, &s).await, written, "A wrote nothing more");
}

/// The last seq stored in `s`'s journal, and how many snapshots it has,
/// read straight from the database.
async fn last_written(db: &str, s: &Session) -> Vec<Vec<String>> {
    crate::database::text_rows(
        db,
        "SELECT CAST(MAX(last_seq) AS TEXT), \
         CAST((SELECT COUNT(*) FROM snapshots WHERE session_id = $1) AS TEXT) \
         FROM journal WHERE session_id = $1",
        &s.session_id,
    )
    .await
}

#[actix_web::test]
async fn a_node_cut_off_from_the_owner_closes_its_relayed_player_for_a_reconnect() {
    let (_dir, db) = database();
    // A is reached by the other nodes through a proxy that can cut it off
    // from them; clients and the database still reach it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let to_a = FaultProxy::start(([127, 0, 0, 1], port).into()).unwrap();
    let a = Server::start_on(
        &db,
        &format!("127.0.0.1:{port}"),
        &[
            ("QUESTD_NODE_ID", "node-a"),
            ("QUESTD_LEASE_MS", LEASE_MS),
            (
                "QUESTD_NODE_URL",
                &format!("http://127.0.0.1:{}", to_a.port()),
            ),
        ],
    );
    let b = node(&db, "node-b");
    let s = a.demo().await;
    let (mut ws, _) = b.connect(&s.session_id, &s.player_token, None).await;
    let (first_move, last) = played_move(&mut ws, &b, &s, "before").await;

    // The nodes lose each other; A goes on renewing its claim. A chat on
    // B's relay is not left hanging: the connection is closed for a
    // reconnect, the chat unacknowledged.
    to_a.set(Mode::Hold);
    let target = neighbour(&a.snapshot(&s).await);
    ws.chat(&format!("go to {target}"), "cut-off").await;
    let (frames, code) = ws.frames_until_closed().await;
    assert_eq!(code, Ok(Some(1012)), "closed for a reconnect: {frames:?}");
    assert!(
        !frames.iter().any(|f| f["type"] == "ack"),
        "nothing acknowledged through a node that cannot reach the owner: {frames:?}"
    );

    // B cannot serve the session while A holds it out of its reach: a new
    // connection is refused with a retry, not left waiting.
    let url = b.ws_url(&s.session_id, &s.player_token, Some(last));
    assert_eq!(Ws::refused_status(&url).await, 503);

    // Through A (where a load balancer also sends clients) the chat runs,
    // once; healed, B relays again.
    let (mut on_a, _) = a.connect(&s.session_id, &s.player_token, Some(last)).await;
    let played = on_a.play(&format!("go to {target}"), "cut-off").await;
    assert!(
        played
            .iter()
            .any(|f| f["type"] == "tool_result" && f["status"] == "ok"),
        "the move ran on A: {played:?}"
    );
    to_a.set(Mode::Pass);
    let (mut ws, _) = b.connect(&s.session_id, &s.player_token, None).await;
    let third = move_once(&mut ws, &b, &s, "healed").await;
    let moves = moves_in_log(&a, &s).await;
    assert_eq!(moves.len(), 3, "each move once: {moves:?}");
    assert_eq!((moves[0], moves[2]), (first_move, third));
    assert_eq!(a.snapshot(&s).await["owner_node"], "node-a");
}

#[actix_web::test]
async fn a_chat_acknowledged_on_a_killed_owner_runs_once_on_the_next_one() {
    let (_dir, db) = database();
    // A slow game master on A keeps the first turn running while the
    // second chat is taken, stored and acknowledged (relayed through B).
    let a = node_with(&db, "node-a", SLOW_GAME_MASTER);
    let b = node(&db, "node-b");
    let s = a.demo().await;
    let (mut ws, welcome) = b.connect(&s.session_id, &s.player_token, None).await;
    let target = neighbour(&welcome["state"]);
    ws.chat("roll 1d6", "r-1").await;
    let started = ws.until(|f| f["type"] == "turn_started").await;
    let last = seqs(&started).into_iter().max().unwrap_or(0);
    ws.chat(&format!("go to {target}"), "r-2").await;
    let ack = ws.ack_for("r-2").await;
    assert_eq!(ack["queued"], 1, "{ack}");
    let queued_turn = ack["turn_id"].as_str().unwrap().to_owned();
    assert!(a.kill9().code().is_none(), "killed by a signal");

    // The client reconnects to B, which takes the session over and runs
    // the acknowledged chat, once, as the turn its ack named.
    let (mut ws, _) = b.connect(&s.session_id, &s.player_token, Some(last)).await;
    let frames = ws.until_turn_end(&queued_turn).await;
    let turn_started = frames
        .iter()
        .find(|f| f["type"] == "turn_started" && f["turn_id"] == queued_turn.as_str())
        .unwrap_or_else(|| panic!("the stored chat ran on B: {frames:?}"));
    assert_eq!(turn_started["request_id"], "r-2");
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");
    assert_eq!(position(&b.snapshot(&s).await), target);
    ws.chat(&format!("go to {target}"), "r-2").await;
    let again = ws.ack_for("r-2").await;
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(moves_in_log(&b, &s).await.len(), 1, "the move ran once");
    let all = whole_story(&b, &s).await;
    assert_eq!(all, (1..=*all.last().unwrap()).collect::<Vec<_>>());
}

#[actix_web::test]
async fn a_request_handed_to_an_owner_that_stops_answering_is_told_to_retry_and_runs_once() {
    let (_dir, db) = database();
    // A slow game master on A: a turn handed to it is under way long
    // enough for A to stop in the middle of it.
    let a = node_with(&db, "node-a", SLOW_GAME_MASTER);
    let b = node(&db, "node-b");
    let s = a.demo().await;
    let (mut watching, _) = a.connect(&s.session_id, &s.spectator_token, None).await;
    let body =
        serde_json::json!({"session_id": s.session_id, "message": "roll 1d6", "request_id": "r-1"});
    let handed = chat_over_http(b.base(), &s.player_token, &body);
    let pause = async {
        // The turn runs on A: A stops before it ends.
        watching.until(|f| f["type"] == "turn_started").await;
        a.signal("STOP");
    };
    let (answer, ()) = futures_util::join!(handed, pause);

    // B does not wait on A for good: once A's claim lapses, the client is
    // told to try again.
    assert_eq!(
        (answer.status, answer.body["error_code"].as_str()),
        (503, Some("OVERLOADED")),
        "{}",
        answer.body
    );
    assert!(
        answer.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("stopped answering")),
        "{}",
        answer.body
    );

    // The same request again, through B: B takes the session over, and
    // the answer is the turn A started (cut short by the stop), not a
    // second run of it.
    let again = chat_over_http(b.base(), &s.player_token, &body).await;
    assert_eq!(
        (
            again.body["duplicate"].as_bool(),
            again.body["turn_id"].as_str()
        ),
        (Some(true), Some("turn_1")),
        "{}",
        again.body
    );
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");
    a.signal("CONT");
    let all = whole_story(&b, &s).await;
    assert_eq!(all, (1..=*all.last().unwrap()).collect::<Vec<_>>());
    let stored = crate::database::text_rows(
        &db,
        "SELECT request_id FROM journal WHERE session_id = $1 AND started = 1",
        &s.session_id,
    )
    .await;
    assert_eq!(stored, [["r-1".to_owned()]], "one turn for the request");
}
