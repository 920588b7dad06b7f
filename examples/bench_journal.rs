//! The journal writer alone, in process: `SESSIONS` writers, each like a
//! session running turns, append `ROWS` journal rows in groups of five (a
//! one-tool turn's frames, each with a typical frame and effect),
//! each group queued together as a session queues a step's rows, waiting
//! for each group to be durable before the next, as a session waits for its
//! frames before it sends them. Prints rows and groups per second,
//! the group commits the writer made, and the process's CPU time per row.
//!
//! ```text
//! cargo run --release --example bench_journal -- 'sqlite:///tmp/bench-journal.db' 100 2000
//! cargo run --release --example bench_journal -- postgres://questd:questd@127.0.0.1:5432/questd_journal 100 2000
//! ```
//! (database URL, sessions, rows per session; the database must be new or
//! questd's own).

use std::sync::Arc;
use std::time::Instant;

use questd::metrics::Metrics;
use questd::storage::{
    DurableSink, Epoch, FirstSnapshot, JournalRow, Node, SessionMeta, SessionWrite, Store,
    StoredAction, StoredHistory, Visibility,
};

#[path = "support/cpu.rs"]
mod cpu;

/// Rows one group holds: a turn's frames.
const GROUP: u64 = 5;

fn row(session_id: &str, seq: u64) -> JournalRow {
    JournalRow {
        session_id: session_id.into(),
        seq,
        turn_id: Some(format!("turn_{}", (seq - 1) / GROUP).into()),
        kind: "tool_result",
        request_id: None,
        frame: format!(
            r#"{{"type":"tool_result","seq":{seq},"turn_id":"turn_{}","call_id":"call_1","tool":"roll_dice","status":"ok","result":{{"rolls":[4],"total":4,"expression":"1d6"}},"duration_ms":0.02}}"#,
            (seq - 1) / GROUP
        )
        .into(),
        effect: Some(r#"{"kind":"roll","total":4}"#.into()),
        // As a session journals a call that succeeded: the frame says its
        // history entry and its action.
        history: Some(StoredHistory::FromFrame { arguments: None }),
        action: Some(StoredAction::FromFrame {
            args: r#"{"dice":"1d6"}"#.into(),
        }),
        created_at: 0,
        timers: Vec::new(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, sessions, rows] = &args[..] else {
        eprintln!("usage: bench_journal DATABASE_URL SESSIONS ROWS_PER_SESSION");
        std::process::exit(2);
    };
    let sessions: usize = sessions.parse().expect("sessions");
    let rows: u64 = rows.parse().expect("rows");
    actix_web::rt::System::new().block_on(async move {
        let metrics = Arc::new(Metrics::default());
        let node = Node::new("bench", std::time::Duration::from_secs(60));
        let store = Store::open_with(url, metrics.clone(), None, node)
            .await
            .expect("the database opens");
        let run = questd::session::random_token(6);
        let mut ids = Vec::new();
        for n in 0..sessions {
            let id = questd::ids::SessionId::from(format!("bench_{run}_{n}"));
            let meta = SessionMeta {
                session_id: id.clone(),
                tenant_id: "bench".into(),
                campaign_id: "demo".into(),
                title: "bench".into(),
                stored_player_token: "p".into(),
                stored_spectator_token: "s".into(),
                created_at: 0,
                visibility: Visibility::Private,
                closed_at: None,
                anonymous: false,
            };
            store
                .create_session(meta, FirstSnapshot::Whole("{}".into()))
                .await
                .expect("a session is stored");
            let epoch = store
                .claim(&id)
                .await
                .expect("claims work")
                .expect("the session is free")
                .0;
            ids.push((id, epoch));
        }
        let commits_before = metrics.commit_seconds.count();
        let cpu_before = cpu::cpu_ns("self");
        let started = Instant::now();
        let writers: Vec<_> = ids
            .into_iter()
            .map(|(id, epoch)| {
                let store = store.clone();
                actix_web::rt::spawn(async move { write_session(&store, &id, epoch, rows).await })
            })
            .collect();
        for w in writers {
            w.await.expect("a writer ran");
        }
        let took = started.elapsed().as_secs_f64();
        let cpu = (cpu::cpu_ns("self") - cpu_before) as f64 / 1e9;
        let commits = metrics.commit_seconds.count() - commits_before;
        let total = sessions as f64 * rows as f64;
        println!(
            "{sessions} sessions x {rows} rows in {took:.2} s: {:.0} rows/s, {:.0} groups/s, \
             {commits} commits ({:.1} rows each), {:.1} us of CPU per row",
            total / took,
            total / GROUP as f64 / took,
            total / commits.max(1) as f64,
            cpu * 1e6 / total
        );
    });
}

/// Appends `rows` rows of session `id`, a group at a time, each group
/// durable before the next is written.
async fn write_session(store: &Store, id: &str, epoch: Epoch, rows: u64) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = DurableSink::new(epoch, move |r| {
        let _ = tx.send(r);
    });
    let mut seq = 0;
    while seq < rows {
        let last = (seq + GROUP).min(rows);
        let group = (seq + 1..=last)
            .map(|s| SessionWrite::Row(row(id, s)))
            .collect();
        store.write_all(group, &sink);
        loop {
            match rx.recv().await.expect("the writer answers") {
                Ok(durable) if durable >= last => break,
                Ok(_) => continue,
                Err(e) => panic!("a write failed: {e}"),
            }
        }
        seq = last;
    }
}
