//! The database going away under play (PostgreSQL behind a fault proxy):
//! restarted, cut mid-commit, blackholed, or gone for one node only.
//! Nothing acknowledged is lost, no seq is written twice, every client is
//! answered or closed with a reconnect hint, and play resumes by itself.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::proxy::{FaultProxy, Mode};

use crate::common::*;
use crate::process::Server;

/// An echo server on a thread of its own: answers its address.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A client of the proxy whose reads give up after `wait`.
fn client(proxy: &FaultProxy, wait: Duration) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s
}

/// What one read answers: bytes, end of stream (empty), or a timeout.
fn read_some(s: &mut TcpStream) -> Result<Vec<u8>, std::io::ErrorKind> {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) => Ok(buf[..n].to_vec()),
        Err(e) => Err(e.kind()),
    }
}

fn timed_out(r: &Result<Vec<u8>, std::io::ErrorKind>) -> bool {
    matches!(
        r,
        Err(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    )
}

/// Closed: end of stream, or a reset.
fn closed(r: &Result<Vec<u8>, std::io::ErrorKind>) -> bool {
    matches!(r, Ok(b) if b.is_empty()) || matches!(r, Err(k) if !timed_out(&Err(*k)))
}

#[test]
fn the_fault_proxy_passes_holds_refuses_and_cuts() {
    let proxy = FaultProxy::start(echo_server()).unwrap();
    let long = Duration::from_secs(10);

    // Pass: bytes go through both ways.
    let mut a = client(&proxy, long);
    a.write_all(b"ping").unwrap();
    assert_eq!(read_some(&mut a), Ok(b"ping".to_vec()), "pass echoes");

    // Hold: an open and a new connection both get nothing back...
    proxy.set(Mode::Hold);
    let mut b = client(&proxy, Duration::from_millis(300));
    a.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    a.write_all(b"held-a").unwrap();
    b.write_all(b"held-b").unwrap();
    assert!(timed_out(&read_some(&mut a)), "hold forwards nothing");
    assert!(timed_out(&read_some(&mut b)), "hold forwards nothing new");

    // ...and on Pass the held bytes flow, as after a healed partition.
    proxy.set(Mode::Pass);
    a.set_read_timeout(Some(long)).unwrap();
    b.set_read_timeout(Some(long)).unwrap();
    assert_eq!(read_some(&mut a), Ok(b"held-a".to_vec()), "held bytes flow");
    assert_eq!(read_some(&mut b), Ok(b"held-b".to_vec()), "held bytes flow");

    // Cut: open connections close, new ones pass.
    proxy.cut();
    assert!(closed(&read_some(&mut a)), "a cut closes a");
    assert!(closed(&read_some(&mut b)), "a cut closes b");
    let mut c = client(&proxy, long);
    c.write_all(b"after").unwrap();
    assert_eq!(read_some(&mut c), Ok(b"after".to_vec()), "pass after a cut");

    // Refuse: open and new connections close at once.
    proxy.set(Mode::Refuse);
    assert!(closed(&read_some(&mut c)), "refuse closes what is open");
    let mut d = client(&proxy, long);
    assert!(closed(&read_some(&mut d)), "refuse closes what comes");
    proxy.set(Mode::Pass);
    let mut e = client(&proxy, long);
    e.write_all(b"back").unwrap();
    assert_eq!(read_some(&mut e), Ok(b"back".to_vec()), "pass after refuse");

    // Dropped: the proxy stops and its connections close.
    drop(proxy);
    assert!(closed(&read_some(&mut e)), "a dropped proxy closes");
}

// ---------------------------------------------------------------------
// questd on PostgreSQL behind the proxy.

/// A lease short enough that the faults below outlast it.
const LEASE_MS: u64 = 1500;
/// How long questd waits on the database before it gives up a wait.
const DB_TIMEOUT_MS: &str = "2000";
/// How long a client may wait for an answer (an ack or an error) or a
/// close with a reconnect hint, from the chat it sent: the lease and 5 s.
const ANSWER_WAIT: Duration = Duration::from_millis(LEASE_MS + 5_000);
/// How long the database may take to come back into play after a fault
/// ends (connecting again, claims, reloads): a bound, not a measure.
const RESUME_WAIT: Duration = Duration::from_secs(60);

/// A fresh PostgreSQL database, its URL, and a proxy in front of its
/// server.
fn database() -> (tempfile::TempDir, String, FaultProxy) {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::postgres_url_in(dir.path());
    let proxy = FaultProxy::start(server_of(&db)).unwrap();
    (dir, db, proxy)
}

/// The address of the server a `postgres://user:pass@host:port/db` URL names.
fn server_of(url: &str) -> SocketAddr {
    use std::net::ToSocketAddrs;
    let host_port = url
        .split_once('@')
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap();
    let host_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    };
    host_port.to_socket_addrs().unwrap().next().unwrap()
}

/// `url` with its server replaced by the proxy's address.
fn through(url: &str, proxy: &FaultProxy) -> String {
    let (scheme_user, rest) = url.split_once('@').unwrap();
    let tail = &rest[rest.find(['/', '?']).unwrap_or(rest.len())..];
    format!("{scheme_user}@127.0.0.1:{}{tail}", proxy.port())
}

/// A node named `name` on the database `db`.
fn node(db: &str, name: &str) -> Server {
    node_with_lease(db, name, LEASE_MS)
}

/// A node named `name` on the database `db` whose claims last `lease_ms`.
fn node_with_lease(db: &str, name: &str, lease_ms: u64) -> Server {
    let lease = lease_ms.to_string();
    crate::cluster::node_with(
        db,
        name,
        &[
            ("QUESTD_LEASE_MS", &lease),
            ("QUESTD_DATABASE_TIMEOUT_MS", DB_TIMEOUT_MS),
        ],
    )
}

/// One node, `node-a`, reaching a fresh database through the proxy.
fn one_node() -> (tempfile::TempDir, FaultProxy, Server) {
    let (dir, db, proxy) = database();
    let a = node(&through(&db, &proxy), "node-a");
    (dir, proxy, a)
}

/// How one chat ended for its client.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Acknowledged, and its turn ended.
    Played,
    /// Refused with `OVERLOADED` and a `retry_after_ms`, or not let in
    /// (503, or closed before the welcome with a reconnect hint).
    Refused,
    /// The connection was closed with a reconnect hint (1011 or 1012).
    Closed,
}

/// A player who chats one turn at a time, reconnects when closed (to the
/// node it is pointed at), and remembers every chat acknowledged.
struct Player<'a> {
    session: &'a Session,
    ws: Option<Ws>,
    sent: usize,
    acked: Vec<String>,
    played: usize,
}

impl<'a> Player<'a> {
    fn new(session: &'a Session) -> Self {
        Self {
            session,
            ws: None,
            sent: 0,
            acked: Vec::new(),
            played: 0,
        }
    }

    /// Connects to `node` unless connected; `false` if the upgrade was
    /// refused with 503 (the database unavailable, the session moving) or
    /// closed with a reconnect hint before its welcome, as a client that
    /// tries again later is told. Either must come within [`ANSWER_WAIT`].
    async fn connect(&mut self, node: &impl Api, step: &str) -> bool {
        if self.ws.is_some() {
            return true;
        }
        let url = node.ws_url(&self.session.session_id, &self.session.player_token, None);
        let attempt = async {
            match Ws::try_connect(&url).await {
                Ok(mut ws) => match ws.next_or_close().await {
                    Ok(welcome) if welcome["type"] == "welcome" => Some(ws),
                    Ok(other) => panic!("{step}: the first frame is {other}"),
                    Err(Some(1011 | 1012)) => None,
                    Err(code) => panic!("{step}: closed before its welcome with {code:?}"),
                },
                Err(503) => None,
                Err(status) => panic!("{step}: the upgrade was refused with {status}"),
            }
        };
        self.ws = tokio::time::timeout(ANSWER_WAIT, attempt)
            .await
            .unwrap_or_else(|_| panic!("{step}: joining got no answer in time"));
        self.ws.is_some()
    }

    /// Sends one chat through `node` and follows it: its answer (an ack
    /// or an error) or a close must come within [`ANSWER_WAIT`], and an
    /// acknowledged turn must end, or its connection close, within as
    /// long again.
    async fn chat(&mut self, node: &impl Api, step: &str) -> Outcome {
        self.sent += 1;
        let rid = format!("r-{}", self.sent);
        if !self.connect(node, step).await {
            return Outcome::Refused;
        }
        let ws = self.ws.as_mut().unwrap();
        ws.chat("roll 1d6", &rid).await;
        let answer = async {
            loop {
                match ws.next_or_close().await {
                    Ok(f) if f["request_id"] == rid.as_str() && f["type"] == "ack" => {
                        return Ok(f["turn_id"].as_str().unwrap().to_owned());
                    }
                    Ok(f) if f["request_id"] == rid.as_str() && f["type"] == "error" => {
                        return Err(Some(f));
                    }
                    Ok(_) => {}
                    Err(code) => {
                        assert!(
                            matches!(code, Some(1011 | 1012)),
                            "{step}: chat {rid} closed with {code:?}, not a reconnect hint"
                        );
                        return Err(None);
                    }
                }
            }
        };
        let answer = tokio::time::timeout(ANSWER_WAIT, answer)
            .await
            .unwrap_or_else(|_| panic!("{step}: chat {rid} got no answer and no close in time"));
        let turn_id = match answer {
            Ok(turn_id) => turn_id,
            Err(None) => {
                self.ws = None;
                return Outcome::Closed;
            }
            Err(Some(error)) if error["error_code"] == "OVERLOADED" => {
                assert!(
                    error["retry_after_ms"].as_u64().is_some(),
                    "{step}: a refusal says when to retry: {error}"
                );
                return Outcome::Refused;
            }
            // Any other refusal (the session stopping) is followed by a
            // close with a reconnect hint.
            Err(Some(error)) => {
                let ws = self.ws.as_mut().unwrap();
                let code = tokio::time::timeout(ANSWER_WAIT, ws.close_code()).await;
                assert!(
                    matches!(code, Ok(Some(1011 | 1012))),
                    "{step}: chat {rid} refused with {error} and then {code:?}"
                );
                self.ws = None;
                return Outcome::Closed;
            }
        };
        self.acked.push(rid.clone());
        let ws = self.ws.as_mut().unwrap();
        let ended = async {
            loop {
                match ws.next_or_close().await {
                    Ok(f)
                        if f["turn_id"] == turn_id.as_str()
                            && (f["type"] == "turn_completed" || f["type"] == "turn_failed") =>
                    {
                        return true;
                    }
                    Ok(_) => {}
                    Err(code) => {
                        assert!(
                            matches!(code, Some(1011 | 1012)),
                            "{step}: turn of {rid} closed with {code:?}"
                        );
                        return false;
                    }
                }
            }
        };
        let ended = tokio::time::timeout(ANSWER_WAIT, ended)
            .await
            .unwrap_or_else(|_| panic!("{step}: the turn of {rid} neither ended nor closed"));
        if ended {
            self.played += 1;
            Outcome::Played
        } else {
            self.ws = None;
            Outcome::Closed
        }
    }

    /// Chats through `node` for `how_long`, whatever each chat meets; the
    /// fault must be felt (some chat refused or closed), or the test
    /// proves nothing.
    async fn play_for(&mut self, node: &impl Api, how_long: Duration, step: &str) {
        let until = std::time::Instant::now() + how_long;
        let mut felt = 0;
        while std::time::Instant::now() < until {
            if self.chat(node, step).await != Outcome::Played {
                felt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(felt > 0, "{step}: every chat played through the fault");
    }

    /// Chats through `node` until `turns` turns in a row were played,
    /// within [`RESUME_WAIT`].
    async fn resumes(&mut self, node: &impl Api, turns: usize, step: &str) {
        let play = async {
            let mut in_a_row = 0;
            while in_a_row < turns {
                if self.chat(node, step).await == Outcome::Played {
                    in_a_row += 1;
                } else {
                    in_a_row = 0;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        tokio::time::timeout(RESUME_WAIT, play)
            .await
            .unwrap_or_else(|_| panic!("{step}: play did not resume"));
    }

    /// What a user would check afterwards, read through `node`: the stored
    /// story is seqs 1..=N, each once, and every acknowledged chat's turn
    /// is in it.
    async fn nothing_lost(&self, node: &impl Api, step: &str) {
        let (mut reader, welcome) = node
            .connect(
                &self.session.session_id,
                &self.session.spectator_token,
                Some(0),
            )
            .await;
        let top = welcome["seq"].as_u64().unwrap();
        let mut seqs = Vec::new();
        let mut started = std::collections::HashSet::new();
        while seqs.last().copied().unwrap_or(0) < top {
            let f = reader.next_json().await;
            if f["type"] == "welcome" {
                continue;
            }
            seqs.extend(f["seq"].as_u64());
            if f["type"] == "turn_started"
                && let Some(rid) = f["request_id"].as_str()
            {
                started.insert(rid.to_owned());
            }
        }
        let expected: Vec<u64> = (1..=top).collect();
        assert_eq!(
            seqs, expected,
            "{step}: the stored story is 1..={top}, each once"
        );
        let lost: Vec<&String> = self
            .acked
            .iter()
            .filter(|r| !started.contains(*r))
            .collect();
        assert!(lost.is_empty(), "{step}: acknowledged chats lost: {lost:?}");
        assert!(self.played > 0, "{step}: nothing was played");
    }
}

#[actix_web::test]
async fn a_database_restarted_or_cut_mid_commit_under_play_loses_nothing_and_play_resumes() {
    let (_dir, proxy, a) = one_node();
    let s = a.demo().await;
    let mut player = Player::new(&s);
    player.resumes(&a, 2, "before the restart").await;

    // The database restarts: every connection refused for a few seconds.
    proxy.set(Mode::Refuse);
    player
        .play_for(&a, Duration::from_secs(4), "while the database restarts")
        .await;
    proxy.set(Mode::Pass);
    player.resumes(&a, 3, "after the restart").await;

    // Connections cut while turns are being written: a commit cut on its
    // way is refused or goes in, never acknowledged without going in.
    for n in 0..6u64 {
        let cut = async {
            tokio::time::sleep(Duration::from_millis(n * 7)).await;
            proxy.cut();
        };
        let (_, _) = tokio::join!(player.chat(&a, "while a connection is cut"), cut);
    }
    player.resumes(&a, 3, "after the cuts").await;
    player
        .nothing_lost(&a, "after the restart and the cuts")
        .await;
}

#[actix_web::test]
async fn a_database_blackholed_for_20_s_under_play_loses_nothing_and_play_resumes() {
    let (_dir, proxy, a) = one_node();
    let s = a.demo().await;
    let mut player = Player::new(&s);
    player.resumes(&a, 2, "before the blackhole").await;

    proxy.set(Mode::Hold);
    player
        .play_for(
            &a,
            Duration::from_secs(20),
            "while the database is blackholed",
        )
        .await;
    proxy.set(Mode::Pass);
    player.resumes(&a, 3, "after the blackhole").await;
    player.nothing_lost(&a, "after the blackhole").await;
}

#[actix_web::test]
async fn a_node_cut_off_from_the_database_loses_its_sessions_to_a_node_that_is_not() {
    let (_dir, db, proxy) = database();
    let a = node(&through(&db, &proxy), "node-a");
    let b = node(&db, "node-b");
    let s = a.demo().await;
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-a");
    let mut player = Player::new(&s);
    player.resumes(&a, 2, "on node A").await;

    // A loses the database; its client is answered or closed with a
    // reconnect hint, never left waiting.
    proxy.set(Mode::Hold);
    while player.ws.is_some() {
        player.chat(&a, "while node A is cut off").await;
    }
    // The client goes on through B, which takes the session over once
    // A's lease has run out.
    player.resumes(&b, 3, "on node B").await;
    assert_eq!(b.snapshot(&s).await["owner_node"], "node-b");

    // A is back: it runs the session no more, and wrote nothing meanwhile.
    proxy.set(Mode::Pass);
    player.resumes(&b, 2, "on node B after A is back").await;
    player.nothing_lost(&b, "after the move").await;

    // And A serves again by itself, with no restart: a write that failed
    // while it was cut off makes it refuse new work for a moment after
    // ("try again soon", 503), which a client waits out as told.
    let again = demo_when_ready(&a).await;
    let mut newcomer = Player::new(&again);
    newcomer.resumes(&a, 2, "a new session on node A").await;
    assert_eq!(a.snapshot(&again).await["owner_node"], "node-a");
}

/// A new demo session on `node`, trying again while it answers `503
/// OVERLOADED` (as a client does, after the `Retry-After` it is given), at
/// most 30 times.
async fn demo_when_ready(node: &Server) -> Session {
    let url = format!("{}/api/v1/sessions", node.base());
    for _ in 0..30 {
        let a = request(
            "POST",
            &url,
            &[("X-Internal-API-Key", TEST_KEY)],
            Some(&serde_json::json!({"campaign_id": "demo"})),
        )
        .await;
        if a.status == 503 && a.body["error_code"] == "OVERLOADED" {
            let wait = a.retry_after.and_then(|s| s.parse().ok()).unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        assert_eq!(a.status, 201, "create session: {}", a.body);
        return Session::created(&a.body);
    }
    panic!("node still refuses new sessions after 30 tries");
}

#[actix_web::test]
async fn a_node_that_loses_the_database_for_less_than_a_lease_keeps_its_sessions() {
    // Renewed every second: the renewal after the outage comes well
    // within the lease.
    let lease_ms = 3000;
    let (_dir, db, proxy) = database();
    let a = node_with_lease(&through(&db, &proxy), "node-a", lease_ms);
    let s = a.demo().await;
    let mut player = Player::new(&s);
    player.resumes(&a, 2, "before the outage").await;
    let before = crate::metrics::scrape(&a).await;

    // The database goes away until a renewal of the node's claims has
    // failed, then comes back within the lease.
    proxy.set(Mode::Refuse);
    let failed = async {
        while crate::metrics::scrape(&a).await["questd_lease_renewals_failed_total"]
            <= before["questd_lease_renewals_failed_total"]
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(ANSWER_WAIT, failed)
        .await
        .expect("a renewal fails while the database is away");
    proxy.set(Mode::Pass);

    // Past the lease: the session was neither stopped nor loaded again,
    // and its player, still connected, plays on.
    tokio::time::sleep(Duration::from_millis(2 * lease_ms)).await;
    let after = crate::metrics::scrape(&a).await;
    for kept in ["questd_leases_lost_total", "questd_sessions_loaded_total"] {
        assert_eq!(after[kept], before[kept], "{kept}");
    }
    assert!(player.ws.is_some(), "the player is still connected");
    assert_eq!(player.chat(&a, "after the outage").await, Outcome::Played);
    player.nothing_lost(&a, "after the outage").await;
}

#[test]
fn a_database_whose_commits_are_not_durable_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::database::postgres_url_in(dir.path());
    let name = db.rsplit('/').next().unwrap().split('?').next().unwrap();
    // As an operator might, for speed: commits acknowledged before they
    // are on disk. Built from the name the test database was made with.
    let sql = format!("ALTER DATABASE {name} SET synchronous_commit = off");
    let admin = crate::database::postgres_admin_url();
    let changed = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                use sqlx::Connection;
                let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&mut c)
                    .await
                    .unwrap();
            })
    });
    changed.join().unwrap();
    let mut questd = std::process::Command::new(env!("CARGO_BIN_EXE_questd"))
        .args(["serve", "--bind", "127.0.0.1:0", "--database-url", &db])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("questd runs");
    let until = std::time::Instant::now() + SERVER_WAIT;
    let status = loop {
        if let Some(status) = questd.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > until {
            let _ = questd.kill();
            let _ = questd.wait();
            panic!("questd started on a database whose commits are not durable");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut said = String::new();
    questd
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(!status.success(), "questd ended well: {said}");
    assert!(said.contains("synchronous_commit is off"), "{said}");
}
