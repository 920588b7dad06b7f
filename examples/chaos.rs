//! Several nodes under faults, as players and spectators see them: three
//! questd nodes on one PostgreSQL database (reached through a fault
//! proxy), sessions played by one player each and watched by one spectator
//! each, every client on a node picked at random for each connection (a
//! load balancer without stickiness). After a quiet warm-up, every 5 to 10
//! s one fault at random: a node killed with SIGKILL and started again, a
//! node paused (SIGSTOP) for 2 to 8 s, or the database cut off (every
//! connection refused) for 1 to 10 s. Then a quiet cool-down, and the
//! stored stories are read back and checked against what the clients were
//! told.
//!
//! ```sh
//! cargo build --release
//! psql -c 'CREATE DATABASE questd_chaos' postgres://questd:questd@127.0.0.1:5432/postgres
//! cargo run --release --example chaos -- target/release/questd \
//!     postgres://questd:questd@127.0.0.1:5432/questd_chaos 200 300
//! ```
//! (binary, an empty database, sessions, seconds of faults). Prints the
//! fault log and a summary: chats acknowledged and how many of them the
//! stored stories lack (lost), seqs told differently from what is stored
//! or stored twice, the longest time a client waited on a chat or a
//! connection without an answer or a close, the time from each disruption
//! of a player to its next acknowledged chat (p50, p99, max, by fault),
//! and turns per second before, during and after the faults.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rand::Rng;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "support/nodes.rs"]
#[allow(dead_code)]
mod nodes;
#[path = "support/proxy.rs"]
mod proxy;

use nodes::{KEY, Node, Ws, create_session, start_on};
use proxy::{FaultProxy, Mode};

/// Quiet time before the faults start, and after they end.
const QUIET: Duration = Duration::from_secs(30);
/// How long a player waits between its turns.
const THINK: Duration = Duration::from_millis(1500);
/// How long a client waits for any frame before it counts the wait as
/// unanswered and reconnects (far past any bound questd keeps).
const READ_LIMIT: Duration = Duration::from_secs(60);
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// What the clients saw and did, shared by every task.
#[derive(Default)]
struct Seen {
    /// Every chat acknowledged: (session, request_id).
    acked: Vec<(String, String)>,
    /// What each session's clients were told each seq was: (type, turn_id).
    told: HashMap<String, HashMap<u64, (String, String)>>,
    /// Seqs a client was told two different things for.
    told_twice: usize,
    /// Frames a spectator missed (a seq skipped on one connection).
    gaps: usize,
    /// The longest wait for an answer (ack, error, close) to a chat or to a
    /// connection attempt.
    longest_wait: Duration,
    /// (when a player was disrupted, how long until its next ack).
    resumes: Vec<(Instant, Duration)>,
    /// When each turn ended.
    turns: Vec<Instant>,
    /// Answers that were errors, by error code.
    errors: HashMap<String, usize>,
    /// Closes by code.
    closes: HashMap<String, usize>,
}

impl Seen {
    fn waited(&mut self, d: Duration) {
        self.longest_wait = self.longest_wait.max(d);
    }

    fn tell(&mut self, session: &str, f: &Value) {
        let Some(seq) = f["seq"].as_u64() else { return };
        if f["type"] == "welcome" {
            return;
        }
        let what = (
            f["type"].as_str().unwrap_or_default().to_owned(),
            f["turn_id"].as_str().unwrap_or_default().to_owned(),
        );
        let told = self.told.entry(session.to_owned()).or_default();
        match told.get(&seq) {
            Some(before) if *before != what => self.told_twice += 1,
            Some(_) => {}
            None => {
                told.insert(seq, what);
            }
        }
    }
}

type Shared = Arc<Mutex<Seen>>;

fn lock(seen: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The ports of the nodes; fixed, so a restarted node is where it was.
#[derive(Clone)]
struct Ports(Arc<Vec<u16>>);

impl Ports {
    fn any(&self) -> u16 {
        self.0[rand::rng().random_range(0..self.0.len())]
    }
}

/// Opens a session's WebSocket on the node at `port`; answers it and its
/// welcome, or `None` if the node refused or did not answer.
async fn open(port: u16, session: &Value, token: &str, last_seq: u64) -> Option<(Ws, Value)> {
    let url = format!(
        "ws://127.0.0.1:{port}/ws/sessions/{}?token={}&last_seq={last_seq}",
        session["session_id"].as_str()?,
        session[token].as_str()?,
    );
    let connect = async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.ok()?;
        let welcome = next(&mut ws).await.ok()??;
        Some((ws, welcome))
    };
    tokio::time::timeout(READ_LIMIT, connect).await.ok()?
}

/// The next JSON frame; `Ok(None)` when the connection ended, `Err` when
/// nothing came within [`READ_LIMIT`].
async fn next(ws: &mut Ws) -> Result<Option<Value>, ()> {
    loop {
        match tokio::time::timeout(READ_LIMIT, ws.next()).await {
            Err(_) => return Err(()),
            Ok(Some(Ok(Message::Text(t)))) => {
                return Ok(serde_json::from_str(t.as_str()).ok());
            }
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => return Ok(None),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// The close code a connection ended with, for the counts.
fn closed_with(seen: &Shared, code: &str) {
    *lock(seen).closes.entry(code.to_owned()).or_default() += 1;
}

/// One player: chats, waits for its turn, thinks, again; reconnects to a
/// node at random whenever its connection ends, and sends an unanswered
/// chat again under its request_id.
async fn player(session: Value, ports: Ports, seen: Shared, stop: Arc<AtomicBool>) {
    let id = session["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut last_seq = 0;
    let mut n = 0u64;
    // A chat not answered yet, and the turn of one acknowledged whose end
    // has not been seen.
    let mut pending: Option<String> = None;
    let mut awaiting: Option<String> = None;
    let mut disrupted: Option<Instant> = None;
    'connections: while !stop.load(Ordering::Relaxed) || pending.is_some() || awaiting.is_some() {
        let asked = Instant::now();
        let Some((mut ws, welcome)) = open(ports.any(), &session, "player_token", last_seq).await
        else {
            lock(&seen).waited(asked.elapsed());
            disrupted.get_or_insert(asked);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        lock(&seen).waited(asked.elapsed());
        if welcome["type"] != "welcome" {
            continue;
        }
        last_seq = last_seq.max(welcome["seq"].as_u64().unwrap_or(0));
        loop {
            if pending.is_none() && awaiting.is_none() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(THINK).await;
                n += 1;
                pending = Some(format!("{id}-{n}"));
            }
            let mut sent = None;
            if let Some(rid) = &pending {
                let chat = json!({"type": "chat", "text": "roll 1d20", "request_id": rid});
                if ws
                    .send(Message::Text(chat.to_string().into()))
                    .await
                    .is_err()
                {
                    disrupted.get_or_insert_with(Instant::now);
                    continue 'connections;
                }
                sent = Some(Instant::now());
            }
            loop {
                let f = match next(&mut ws).await {
                    Ok(Some(f)) => f,
                    Ok(None) => {
                        closed_with(&seen, "closed");
                        if let Some(at) = sent {
                            lock(&seen).waited(at.elapsed());
                        }
                        disrupted.get_or_insert_with(Instant::now);
                        continue 'connections;
                    }
                    Err(()) => {
                        closed_with(&seen, "silent");
                        lock(&seen).waited(READ_LIMIT);
                        disrupted.get_or_insert_with(Instant::now);
                        continue 'connections;
                    }
                };
                last_seq = last_seq.max(f["seq"].as_u64().unwrap_or(0));
                lock(&seen).tell(&id, &f);
                let about_ours = pending.as_deref().is_some_and(|r| f["request_id"] == r);
                if f["type"] == "ack" && about_ours {
                    {
                        let mut s = lock(&seen);
                        if let Some(at) = sent.take() {
                            s.waited(at.elapsed());
                        }
                        if let Some(since) = disrupted.take() {
                            s.resumes.push((since, since.elapsed()));
                        }
                        s.acked
                            .push((id.clone(), pending.take().unwrap_or_default()));
                    }
                    awaiting = f["turn_id"].as_str().map(str::to_owned);
                } else if f["type"] == "error" && about_ours {
                    {
                        let mut s = lock(&seen);
                        if let Some(at) = sent.take() {
                            s.waited(at.elapsed());
                        }
                        let code = f["error_code"].as_str().unwrap_or("?").to_owned();
                        *s.errors.entry(code).or_default() += 1;
                    }
                    disrupted.get_or_insert_with(Instant::now);
                    let wait = f["retry_after_ms"].as_u64().unwrap_or(500).min(10_000);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    break;
                } else if (f["type"] == "turn_completed" || f["type"] == "turn_failed")
                    && awaiting.as_deref().is_some_and(|t| f["turn_id"] == t)
                {
                    lock(&seen).turns.push(Instant::now());
                    awaiting = None;
                    break;
                }
            }
        }
    }
}

/// One spectator: reads every frame, reconnecting with `last_seq` to a node
/// at random whenever its connection ends; counts frames it missed.
async fn spectator(session: Value, ports: Ports, seen: Shared, stop: Arc<AtomicBool>) {
    let id = session["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut last_seq = 0;
    while !stop.load(Ordering::Relaxed) {
        let asked = Instant::now();
        let Some((mut ws, welcome)) =
            open(ports.any(), &session, "spectator_token", last_seq).await
        else {
            lock(&seen).waited(asked.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        lock(&seen).waited(asked.elapsed());
        // A welcome that carries the state up to its seq (not resumed, or
        // resumed from the ring) moves the spectator there.
        if welcome["resumed"] != true {
            last_seq = last_seq.max(welcome["seq"].as_u64().unwrap_or(0));
        }
        while !stop.load(Ordering::Relaxed) {
            let Ok(Some(f)) = next(&mut ws).await else {
                break;
            };
            let Some(seq) = f["seq"].as_u64() else {
                continue;
            };
            if seq <= last_seq {
                continue;
            }
            {
                let mut s = lock(&seen);
                if seq != last_seq + 1 {
                    s.gaps += 1;
                }
                s.tell(&id, &f);
            }
            last_seq = seq;
        }
    }
}

/// A fault on one node or on the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Fault {
    Kill,
    Pause,
    DatabaseCut,
}

/// The nodes' processes, by index, and how to start one again.
struct Nodes {
    binary: String,
    db: String,
    ports: Ports,
    running: Vec<Node>,
}

impl Nodes {
    fn start(&mut self, i: usize) -> Node {
        let bind = format!("127.0.0.1:{}", self.ports.0[i]);
        start_on(&self.binary, &self.db, NODES[i], &bind).0
    }

    fn signal(&self, i: usize, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.running[i].0.id().to_string()])
            .status();
    }
}

/// A free port on 127.0.0.1 now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The database URL with its host and port replaced by the proxy's.
fn through(db: &str, proxy: &FaultProxy) -> String {
    let mut url = reqwest::Url::parse(db).expect("a postgres:// URL");
    url.set_host(Some("127.0.0.1")).expect("a host");
    url.set_port(Some(proxy.port())).expect("a port");
    url.to_string()
}

/// The stored story of `session`, every page, read from any node.
async fn stored_story(http: &reqwest::Client, ports: &Ports, session: &str) -> Vec<Value> {
    let mut frames = Vec::new();
    let mut after = 0;
    loop {
        let url = format!(
            "http://127.0.0.1:{}/api/v1/admin/sessions/{session}/story?after_seq={after}&limit=500",
            ports.any()
        );
        let page: Value = match http
            .get(&url)
            .header("X-Internal-API-Key", KEY)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.json().await.expect("a story page"),
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        frames.extend(page["frames"].as_array().cloned().unwrap_or_default());
        match page["next_after_seq"].as_u64() {
            Some(next) => after = next,
            None => return frames,
        }
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, binary, db, sessions, seconds] = &args[..] else {
        eprintln!("usage: chaos QUESTD_BINARY POSTGRES_URL SESSIONS SECONDS_OF_FAULTS");
        std::process::exit(2);
    };
    let sessions: usize = sessions.parse().expect("sessions");
    let faulting = Duration::from_secs(seconds.parse().expect("seconds"));
    let upstream = reqwest::Url::parse(db).expect("a postgres:// URL");
    let upstream = (
        upstream.host_str().unwrap_or("127.0.0.1").to_owned(),
        upstream.port().unwrap_or(5432),
    );
    let upstream = std::net::ToSocketAddrs::to_socket_addrs(&upstream)
        .expect("the database's address")
        .next()
        .expect("an address");
    let database = FaultProxy::start(upstream).expect("the proxy starts");
    let ports = Ports(Arc::new(NODES.iter().map(|_| free_port()).collect()));
    let mut nodes = Nodes {
        binary: binary.clone(),
        db: through(db, &database),
        ports: ports.clone(),
        running: Vec::new(),
    };
    for i in 0..NODES.len() {
        let node = nodes.start(i);
        nodes.running.push(node);
    }

    let http = reqwest::Client::new();
    let mut created = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        created.push(create_session(&http, ports.any()).await);
    }
    let seen = Shared::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut players = Vec::new();
    for s in &created {
        players.push(tokio::spawn(player(
            s.clone(),
            ports.clone(),
            seen.clone(),
            stop.clone(),
        )));
        tokio::spawn(spectator(
            s.clone(),
            ports.clone(),
            seen.clone(),
            stop.clone(),
        ));
    }

    let started = Instant::now();
    tokio::time::sleep(QUIET).await;
    let faults_from = Instant::now();
    let mut faults: Vec<(Instant, Fault, String, Duration)> = Vec::new();
    while faults_from.elapsed() < faulting {
        let (gap, which, node, length) = {
            let mut rng = rand::rng();
            let which = match rng.random_range(0..3) {
                0 => Fault::Kill,
                1 => Fault::Pause,
                _ => Fault::DatabaseCut,
            };
            let length = match which {
                Fault::Kill => Duration::ZERO,
                Fault::Pause => Duration::from_millis(rng.random_range(2_000..=8_000)),
                Fault::DatabaseCut => Duration::from_millis(rng.random_range(1_000..=10_000)),
            };
            (
                Duration::from_millis(rng.random_range(5_000..=10_000)),
                which,
                rng.random_range(0..NODES.len()),
                length,
            )
        };
        tokio::time::sleep(gap).await;
        let at = Instant::now();
        let what = match which {
            Fault::Kill => {
                // SIGKILL, then the same node on the same port again.
                let _ = nodes.running[node].0.kill();
                let _ = nodes.running[node].0.wait();
                nodes.running[node] = nodes.start(node);
                NODES[node].to_owned()
            }
            Fault::Pause => {
                nodes.signal(node, "STOP");
                tokio::time::sleep(length).await;
                nodes.signal(node, "CONT");
                NODES[node].to_owned()
            }
            Fault::DatabaseCut => {
                database.set(Mode::Refuse);
                tokio::time::sleep(length).await;
                database.set(Mode::Pass);
                "database".to_owned()
            }
        };
        println!(
            "{:>6.1} s  {which:?} {what} {} ms",
            at.duration_since(started).as_secs_f64(),
            length.as_millis()
        );
        faults.push((at, which, what, length));
    }
    let faults_until = Instant::now();
    tokio::time::sleep(QUIET).await;
    let cool_until = Instant::now();
    stop.store(true, Ordering::Relaxed);
    for p in players {
        let _ = tokio::time::timeout(Duration::from_secs(60), p).await;
    }

    // What is stored, against what the clients were told.
    let seen = std::mem::take(&mut *lock(&seen));
    let mut lost = 0;
    let mut stored_twice = 0;
    let mut told_otherwise = 0;
    let by_session: HashMap<&str, Vec<&str>> =
        seen.acked.iter().fold(HashMap::new(), |mut m, (s, r)| {
            m.entry(s.as_str()).or_default().push(r.as_str());
            m
        });
    for s in &created {
        let id = s["session_id"].as_str().unwrap_or_default();
        let story = stored_story(&http, &ports, id).await;
        let seqs: Vec<u64> = story.iter().filter_map(|f| f["seq"].as_u64()).collect();
        stored_twice += seqs.windows(2).filter(|w| w[1] != w[0] + 1).count();
        let started: std::collections::HashSet<&str> = story
            .iter()
            .filter(|f| f["type"] == "turn_started")
            .filter_map(|f| f["request_id"].as_str())
            .collect();
        lost += by_session.get(id).map_or(0, |rids| {
            rids.iter().filter(|r| !started.contains(*r)).count()
        });
        let told = seen.told.get(id);
        for f in &story {
            let (Some(seq), Some(told)) = (f["seq"].as_u64(), told) else {
                continue;
            };
            if let Some((kind, turn)) = told.get(&seq)
                && (f["type"] != kind.as_str() || f["turn_id"].as_str().unwrap_or_default() != turn)
            {
                told_otherwise += 1;
            }
        }
    }
    let rate = |from: Instant, to: Instant| {
        let n = seen
            .turns
            .iter()
            .filter(|t| **t >= from && **t < to)
            .count();
        n as f64 / to.duration_since(from).as_secs_f64()
    };
    let mut by_fault: HashMap<Fault, Vec<Duration>> = HashMap::new();
    for (since, took) in &seen.resumes {
        if let Some((_, fault, _, _)) = faults.iter().rev().find(|(at, ..)| at <= since) {
            by_fault.entry(*fault).or_default().push(*took);
        }
    }
    let mut all: Vec<Duration> = seen.resumes.iter().map(|(_, d)| *d).collect();
    all.sort();
    let ms = |d: Duration| d.as_millis();
    println!("faults: {}", faults.len());
    println!("chats acknowledged: {}", seen.acked.len());
    println!("acknowledged chats the stored stories lack (lost): {lost}");
    println!("seqs stored twice or skipped: {stored_twice}");
    println!(
        "seqs told otherwise than stored: {told_otherwise}; told two ways: {}",
        seen.told_twice
    );
    println!("frames a spectator missed: {}", seen.gaps);
    println!(
        "longest wait without an answer or a close: {} ms",
        ms(seen.longest_wait)
    );
    println!(
        "resume after a disruption ({}): p50 {} ms, p99 {} ms, max {} ms",
        all.len(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default())
    );
    for (fault, mut d) in by_fault {
        d.sort();
        println!(
            "  after {fault:?} ({}): p50 {} ms, p99 {} ms, max {} ms",
            d.len(),
            ms(percentile(&d, 0.5)),
            ms(percentile(&d, 0.99)),
            ms(d.last().copied().unwrap_or_default())
        );
    }
    println!(
        "turns/s: before {:.1}, during {:.1}, after {:.1}",
        rate(started, faults_from),
        rate(faults_from, faults_until),
        rate(faults_until, cool_until)
    );
    println!("errors answered: {:?}", seen.errors);
    println!("connections ended: {:?}", seen.closes);
}
