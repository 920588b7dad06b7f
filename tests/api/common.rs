//! Test harness: a real server on port 0 with a fresh temp database, and a
//! real WebSocket/HTTP client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use awc::ws;
use futures_util::{SinkExt, StreamExt};
use questd::llm::{OfflineGameMaster, Provider};
use questd::{Application, Settings};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for any one frame before failing.
pub const FRAME_WAIT: Duration = Duration::from_secs(20);
/// How long a wait for a connection's close may take in all (pings and
/// frames keep coming meanwhile): a close that never comes fails the test.
pub const CLOSE_WAIT: Duration = Duration::from_secs(60);

/// How long a test server may take to start or to stop (its shutdown grace
/// is 3 s): past it the test fails and names the step, where it would
/// otherwise hang the whole suite.
pub const SERVER_WAIT: Duration = Duration::from_secs(60);

pub struct TestApp {
    pub port: u16,
    pub base: String,
    pub db_url: String,
    pub handle: ServerHandle,
    /// Hears when the server has wholly stopped: its sessions gone and
    /// every write it queued committed (`Application::run_until_stopped`).
    finished: std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// Held, never read: the database directory lives as long as the app.
    pub _dir: Arc<tempfile::TempDir>,
}

/// The internal key every test server accepts (`QUESTD_INTERNAL_API_KEY`).
pub const TEST_KEY: &str = "test-internal-key";

/// The node name of every test server (`QUESTD_NODE_ID`): the same across
/// restarts on one database, as an operator names a node.
pub const TEST_NODE: &str = "test-node";

/// Settings for a test server on a fresh database in `dir`.
pub fn settings_in(dir: &tempfile::TempDir) -> Settings {
    let url = crate::database::database_url_in(dir.path());
    let mut s = Settings::for_tests(&url);
    s.internal_api_key = Some(TEST_KEY.into());
    s.node_id = Some(TEST_NODE.into());
    s.http_workers = Some(1);
    // Tests play turns back to back, far faster than a person types; the
    // frame rate is tested at its own setting (security_conn.rs).
    s.ws_frames_per_second = 100_000;
    s.ws_frame_burst = 100_000;
    s
}

/// Starts a server with the offline game master and default settings.
pub async fn spawn_app() -> TestApp {
    spawn_with(|_| {}, Arc::new(OfflineGameMaster::default())).await
}

/// Starts a server with the offline game master and adjusted settings.
pub async fn spawn_offline(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_with(adjust, Arc::new(OfflineGameMaster::default())).await
}

/// Starts a server with adjusted settings and a given model.
pub async fn spawn_with(
    adjust: impl FnOnce(&mut Settings),
    provider: Arc<dyn Provider>,
) -> TestApp {
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    spawn_in(dir, adjust, provider).await
}

/// Starts a server on the database in `dir` (which may hold an earlier run).
///
/// The server runs on a thread (and actix system) of its own, so it stops
/// for good when its `TestApp` is dropped, test over or not: nothing of it
/// (sessions, database connections) outlives its test.
pub async fn spawn_in(
    dir: Arc<tempfile::TempDir>,
    adjust: impl FnOnce(&mut Settings),
    provider: Arc<dyn Provider>,
) -> TestApp {
    let mut settings = settings_in(&dir);
    adjust(&mut settings);
    let db_url = settings.database_url.clone();
    let (started, ready) = tokio::sync::oneshot::channel();
    let (stopped, finished) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            // The cause on one line, first: a backtrace would push it out
            // of the part of a long log that is read.
            let app = Application::build_with(settings, provider)
                .await
                .map_err(|e| format!("{e:#}"));
            match app {
                Ok(app) => {
                    let _ = started.send(Ok((app.port(), app.handle())));
                    let _ = app.run_until_stopped().await;
                    let _ = stopped.send(());
                }
                Err(e) => {
                    let _ = started.send(Err(e));
                }
            }
        })
    });
    let (port, handle) = tokio::time::timeout(SERVER_WAIT, ready)
        .await
        .expect("the server starts within SERVER_WAIT")
        .expect("the server thread answers")
        .unwrap_or_else(|e| panic!("server builds: {e}"));
    TestApp {
        port,
        base: format!("http://127.0.0.1:{port}"),
        db_url,
        handle,
        finished: std::sync::Mutex::new(Some(finished)),
        _dir: dir,
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        // Only sends the command; the server's own thread carries it out.
        drop(self.handle.stop(false));
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub session_id: String,
    pub player_token: String,
    pub spectator_token: String,
    pub ws_url: String,
}

/// How long a test's HTTP request may take, unless it says otherwise.
const REQUEST_WAIT: Duration = Duration::from_secs(30);

pub fn client() -> awc::Client {
    client_within(REQUEST_WAIT)
}

/// A client whose requests may take `wait`.
fn client_within(wait: Duration) -> awc::Client {
    awc::Client::builder().timeout(wait).finish()
}

/// GET with an optional bearer token; returns status and JSON body.
pub async fn get(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = client().get(url);
    if let Some(t) = token {
        req = req.insert_header(("Authorization", format!("Bearer {t}")));
    }
    let mut resp = req.send().await.expect("GET sends");
    let status = resp.status().as_u16();
    let body = resp.body().limit(16 * 1024 * 1024).await.expect("body");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// An HTTP answer: status, `Retry-After`, JSON body (`null` if not JSON).
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Value,
}

/// Sends `method url` with these headers and, if given, a JSON body.
pub async fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    request_within(REQUEST_WAIT, method, url, headers, body).await
}

/// [`request`], answered within `wait`.
pub async fn request_within(
    wait: Duration,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let client = client_within(wait);
    let mut req = match method {
        "GET" => client.get(url),
        "POST" => client.post(url),
        "PUT" => client.put(url),
        "DELETE" => client.delete(url),
        other => panic!("no method {other}"),
    };
    for h in headers {
        req = req.insert_header(*h);
    }
    let mut resp = match body {
        Some(b) => req.send_json(b).await.expect("request sends"),
        None => req.send().await.expect("request sends"),
    };
    let bytes = resp.body().limit(16 * 1024 * 1024).await.expect("body");
    Answer {
        status: resp.status().as_u16(),
        retry_after: resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().expect("ascii").to_owned()),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// POST a JSON body; returns status and JSON body.
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let a = request("POST", url, &[], Some(body)).await;
    (a.status, a.body)
}

/// One whole turn through `POST /api/v1/chat` on the server at `base`,
/// with a player's token as the bearer.
pub async fn chat_over_http(base: &str, player_token: &str, body: &Value) -> Answer {
    chat_over_http_within(REQUEST_WAIT, base, player_token, body).await
}

/// [`chat_over_http`], answered within `wait`.
pub async fn chat_over_http_within(
    wait: Duration,
    base: &str,
    player_token: &str,
    body: &Value,
) -> Answer {
    let auth = format!("Bearer {player_token}");
    request_within(
        wait,
        "POST",
        &format!("{base}/api/v1/chat"),
        &[("Authorization", auth.as_str())],
        Some(body),
    )
    .await
}

/// POST a JSON body with the test key (`X-Internal-API-Key`); returns
/// status and JSON body.
pub async fn post_keyed(url: &str, body: &Value) -> (u16, Value) {
    let a = request("POST", url, &[("X-Internal-API-Key", TEST_KEY)], Some(body)).await;
    (a.status, a.body)
}

impl Session {
    /// The session a `201` create answer describes.
    pub fn created(v: &Value) -> Self {
        let field = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("{k} in {v}")).into();
        Session {
            session_id: field("session_id"),
            player_token: field("player_token"),
            spectator_token: field("spectator_token"),
            ws_url: field("ws_url"),
        }
    }
}

/// A running questd, reached over HTTP and WebSocket on 127.0.0.1: the
/// server built inside the test ([`TestApp`]) or a questd process of its own
/// ([`crate::process::Server`]), so a test can play the same way on either.
pub trait Api {
    /// `http://127.0.0.1:PORT`.
    fn base(&self) -> &str;

    /// The port it listens on.
    fn port(&self) -> u16;

    /// Creates a session with the test key (so tests that make many are not
    /// limited per address), in tenant `default`.
    async fn create_session(&self, body: Value) -> Session {
        self.create_session_with(&[("X-Internal-API-Key", TEST_KEY)], body)
            .await
    }

    /// Creates a session sending these headers (a key, a tenant).
    async fn create_session_with(&self, headers: &[(&str, &str)], body: Value) -> Session {
        let url = format!("{}/api/v1/sessions", self.base());
        let a = request("POST", &url, headers, Some(&body)).await;
        assert_eq!(a.status, 201, "create session: {}", a.body);
        Session::created(&a.body)
    }

    /// A private session of the demo campaign.
    async fn demo(&self) -> Session {
        self.create_session(json!({"campaign_id": "demo"})).await
    }

    /// A public session of the demo campaign (listed, with a watch link).
    async fn public_demo(&self) -> Session {
        self.create_session(json!({"campaign_id": "demo", "visibility": "public"}))
            .await
    }

    /// The WebSocket URL of a session with this token, resuming after
    /// `last_seq` if given.
    fn ws_url(&self, session_id: &str, token: &str, last_seq: Option<u64>) -> String {
        let mut url = format!(
            "ws://127.0.0.1:{}/ws/sessions/{session_id}?token={token}",
            self.port()
        );
        if let Some(n) = last_seq {
            url.push_str(&format!("&last_seq={n}"));
        }
        url
    }

    /// [`Api::connect`] as a client does around a session that is
    /// reloading: a connection closed with 1012 before its welcome is
    /// opened again (docs/protocol.md §15), up to 100 times, 50 ms apart.
    async fn connect_once_ready(
        &self,
        session_id: &str,
        token: &str,
        last_seq: Option<u64>,
    ) -> (Ws, Value) {
        for _ in 0..100 {
            let mut ws = Ws::connect(&self.ws_url(session_id, token, last_seq)).await;
            match ws.next_or_close().await {
                Ok(welcome) => {
                    assert_eq!(welcome["type"], "welcome", "first frame: {welcome}");
                    return (ws, welcome);
                }
                Err(Some(1012)) => {
                    actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await
                }
                Err(code) => panic!("closed before its welcome with {code:?}"),
            }
        }
        panic!("the session never became ready");
    }

    /// Connects and reads the welcome frame.
    async fn connect(&self, session_id: &str, token: &str, last_seq: Option<u64>) -> (Ws, Value) {
        let mut ws = Ws::connect(&self.ws_url(session_id, token, last_seq)).await;
        let welcome = ws.next_json().await;
        assert_eq!(
            welcome["type"], "welcome",
            "first frame is welcome: {welcome}"
        );
        (ws, welcome)
    }

    async fn snapshot(&self, s: &Session) -> Value {
        let (status, v) = get(
            &format!("{}/api/v1/sessions/{}", self.base(), s.session_id),
            Some(&s.player_token),
        )
        .await;
        assert_eq!(status, 200, "snapshot: {v}");
        v
    }

    async fn actions(&self, s: &Session) -> Vec<Value> {
        let (status, v) = get(
            &format!("{}/api/v1/sessions/{}/actions", self.base(), s.session_id),
            Some(&s.player_token),
        )
        .await;
        assert_eq!(status, 200, "actions: {v}");
        v["actions"]
            .as_array()
            .cloned()
            .expect("actions is an array")
    }
}

impl Api for TestApp {
    fn base(&self) -> &str {
        &self.base
    }

    fn port(&self) -> u16 {
        self.port
    }
}

impl TestApp {
    /// Stops the server gracefully and waits until it has wholly stopped
    /// (its sessions gone, what they queued committed), so that another
    /// server may open its database.
    pub async fn stop(&self) {
        tokio::time::timeout(SERVER_WAIT, self.handle.stop(true))
            .await
            .expect("the server stops within SERVER_WAIT");
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(finished) = finished {
            // An error: the server's thread ended without a word. A server
            // still writing after SERVER_WAIT is let go, and said so: a
            // server started next may then read before its last writes.
            if tokio::time::timeout(SERVER_WAIT, finished).await.is_err() {
                eprintln!("the stopped server still writes after SERVER_WAIT");
            }
        }
    }
}

/// A WebSocket client that reads JSON text frames.
pub struct Ws {
    framed: actix_codec::Framed<awc::BoxedSocket, ws::Codec>,
}

impl Ws {
    pub async fn connect(url: &str) -> Self {
        Self::try_connect(url)
            .await
            .unwrap_or_else(|status| panic!("websocket upgrade refused with {status}"))
    }

    /// Connects, or answers the HTTP status the upgrade was refused with.
    pub async fn try_connect(url: &str) -> Result<Self, u16> {
        Self::try_connect_with(url, &[]).await
    }

    /// Connects sending these headers with the upgrade.
    pub async fn connect_with(url: &str, headers: &[(&str, &str)]) -> Self {
        Self::try_connect_with(url, headers)
            .await
            .unwrap_or_else(|status| panic!("websocket upgrade refused with {status}"))
    }

    /// [`Ws::try_connect`] sending these headers with the upgrade.
    pub async fn try_connect_with(url: &str, headers: &[(&str, &str)]) -> Result<Self, u16> {
        let mut upgrade = client().ws(url).max_frame_size(16 * 1024 * 1024);
        for (name, value) in headers {
            upgrade = upgrade.header(*name, *value);
        }
        match upgrade.connect().await {
            Ok((_, framed)) => Ok(Self { framed }),
            Err(awc::error::WsClientError::InvalidResponseStatus(s)) => Err(s.as_u16()),
            Err(e) => panic!("websocket connects: {e}"),
        }
    }

    /// The HTTP status a refused upgrade answers with.
    pub async fn refused_status(url: &str) -> u16 {
        match Self::try_connect(url).await {
            Err(status) => status,
            Ok(_) => panic!("upgrade should be refused"),
        }
    }

    pub async fn send_json(&mut self, v: &Value) {
        self.send_text(&v.to_string()).await;
    }

    pub async fn send_text(&mut self, s: &str) {
        self.framed
            .send(ws::Message::Text(s.to_owned().into()))
            .await
            .expect("send");
    }

    /// Sends one frame as it is (a fragment, say).
    pub async fn send_message(&mut self, m: ws::Message) {
        self.framed.send(m).await.expect("send");
    }

    pub async fn send_binary(&mut self, b: &[u8]) {
        self.framed
            .send(ws::Message::Binary(b.to_vec().into()))
            .await
            .expect("send");
    }

    pub async fn chat(&mut self, text: &str, request_id: &str) {
        self.send_json(&json!({"type": "chat", "text": text, "request_id": request_id}))
            .await;
    }

    /// The next JSON text frame (pings answered, other control frames skipped).
    pub async fn next_json(&mut self) -> Value {
        self.try_next_json(FRAME_WAIT)
            .await
            .expect("a frame arrives in time")
    }

    /// The next JSON frame, or `None` on timeout or close.
    pub async fn try_next_json(&mut self, wait: Duration) -> Option<Value> {
        loop {
            let frame = tokio::time::timeout(wait, self.framed.next())
                .await
                .ok()??;
            match frame.expect("websocket frame") {
                ws::Frame::Text(b) => {
                    return Some(serde_json::from_slice(&b).expect("frames are JSON"));
                }
                ws::Frame::Ping(p) => {
                    let _ = self.framed.send(ws::Message::Pong(p)).await;
                }
                ws::Frame::Close(_) => return None,
                _ => {}
            }
        }
    }

    /// Reads frames until `stop` matches one; returns them all, that one last.
    pub async fn until(&mut self, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let f = self.next_json().await;
            let done = stop(&f);
            frames.push(f);
            if done {
                return frames;
            }
        }
    }

    /// Reads until the given turn completes or fails.
    pub async fn until_turn_end(&mut self, turn_id: &str) -> Vec<Value> {
        self.until(|f| {
            (f["type"] == "turn_completed" || f["type"] == "turn_failed") && f["turn_id"] == turn_id
        })
        .await
    }

    /// Reads until the ack of `request_id`; answers it.
    pub async fn ack_for(&mut self, request_id: &str) -> Value {
        let mut frames = self
            .until(|f| f["type"] == "ack" && f["request_id"] == request_id)
            .await;
        frames.pop().expect("the ack")
    }

    /// Reads until the next ack or error frame (story frames before it are returned too).
    pub async fn until_reply(&mut self) -> Vec<Value> {
        self.until(|f| f["type"] == "ack" || f["type"] == "error")
            .await
    }

    /// Plays one whole turn and returns its frames (from after the ack).
    pub async fn play(&mut self, text: &str, request_id: &str) -> Vec<Value> {
        self.chat(text, request_id).await;
        let mut frames = self.until_reply().await;
        let reply = frames.pop().expect("reply");
        assert_eq!(reply["type"], "ack", "chat accepted: {reply}");
        let turn_id = reply["turn_id"].as_str().expect("turn_id").to_owned();
        if reply["duplicate"] == true {
            // The first chat's turn may be over already.
            if frames.iter().any(|f| {
                f["turn_id"] == turn_id.as_str()
                    && (f["type"] == "turn_completed" || f["type"] == "turn_failed")
            }) {
                return frames;
            }
        } else {
            // docs/protocol.md §2.5: the ack comes before every frame of its turn.
            let early: Vec<&Value> = frames
                .iter()
                .filter(|f| f["turn_id"] == turn_id.as_str())
                .collect();
            assert!(
                early.is_empty(),
                "frames of {turn_id} before its ack: {early:?}"
            );
        }
        frames.extend(self.until_turn_end(&turn_id).await);
        frames
    }

    pub async fn close(mut self) {
        let _ = self.framed.send(ws::Message::Close(None)).await;
    }
}

/// Story frames only (those with a seq).
pub fn story(frames: &[Value]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f.get("seq").is_some() && f["type"] != "welcome")
        .cloned()
        .collect()
}

/// The seqs of the `move` actions in a session's actions log.
pub async fn moves_in_log(api: &impl Api, s: &Session) -> Vec<u64> {
    api.actions(s)
        .await
        .iter()
        .filter(|a| a["tool"] == "move")
        .map(|a| a["seq"].as_u64().unwrap())
        .collect()
}

/// Every story seq of a session, read by a spectator resuming from seq 0.
pub async fn whole_story(api: &impl Api, s: &Session) -> Vec<u64> {
    let (mut reader, welcome) = api
        .connect(&s.session_id, &s.spectator_token, Some(0))
        .await;
    let top = welcome["seq"].as_u64().unwrap();
    let mut all = Vec::new();
    while all.last().copied().unwrap_or(0) < top {
        let f = reader.next_json().await;
        all.extend(f["seq"].as_u64().filter(|_| f["type"] != "welcome"));
    }
    all
}

/// The first frame of a type.
pub fn first<'a>(frames: &'a [Value], kind: &str) -> &'a Value {
    frames
        .iter()
        .find(|f| f["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} frame in {frames:#?}"))
}

/// The area the active character stands in, from a snapshot.
pub fn position(snapshot: &Value) -> String {
    let actor = snapshot["active_actor_id"].as_str().expect("active actor");
    snapshot["characters"]
        .as_array()
        .expect("characters")
        .iter()
        .find(|c| c["character_id"] == actor)
        .and_then(|c| c["area_id"].as_str())
        .expect("actor position")
        .to_owned()
}

/// A neighbour of the active character's area, from a snapshot.
pub fn neighbour(snapshot: &Value) -> String {
    let here = position(snapshot);
    snapshot["areas"]
        .as_array()
        .expect("areas")
        .iter()
        .find(|a| a["area_id"] == here.as_str())
        .and_then(|a| a["reachable_area_ids"][0].as_str())
        .expect("a neighbour")
        .to_owned()
}

impl Ws {
    /// The next JSON text frame (pings answered), or how the connection
    /// ended instead: `Err(Some(code))` on a close, `Err(None)` when no
    /// frame came in time or the stream ended without a close.
    pub async fn next_or_close(&mut self) -> Result<Value, Option<u16>> {
        loop {
            let Ok(Some(frame)) = tokio::time::timeout(FRAME_WAIT, self.framed.next()).await else {
                return Err(None);
            };
            match frame.expect("websocket frame") {
                ws::Frame::Text(b) => return Ok(serde_json::from_slice(&b).expect("JSON")),
                ws::Frame::Ping(p) => {
                    let _ = self.framed.send(ws::Message::Pong(p)).await;
                }
                ws::Frame::Close(reason) => return Err(reason.map(|r| u16::from(r.code))),
                _ => {}
            }
        }
    }

    /// Every frame until the server closes, and its close code; `Err` if
    /// it did not close within [`CLOSE_WAIT`] (pings restart each frame's
    /// wait, so the close as a whole has the bound).
    pub async fn frames_until_closed(&mut self) -> (Vec<Value>, Result<Option<u16>, &'static str>) {
        let mut frames = Vec::new();
        let read = async {
            loop {
                match self.next_or_close().await {
                    Ok(f) => frames.push(f),
                    Err(code) => return code,
                }
            }
        };
        let code = tokio::time::timeout(CLOSE_WAIT, read)
            .await
            .map_err(|_| "the connection was never closed");
        (frames, code)
    }

    /// Reads until the turn started by `request_id` ends, an `error` frame
    /// answers it, or the server closes; returns the JSON frames and the
    /// close code, if it closed.
    pub async fn frames_until_turn_end_or_close(
        &mut self,
        request_id: &str,
    ) -> (Vec<Value>, Option<u16>) {
        let mut frames: Vec<Value> = Vec::new();
        let mut turn_id: Option<String> = None;
        loop {
            let f = match self.next_or_close().await {
                Ok(f) => f,
                Err(code) => return (frames, code),
            };
            if f["type"] == "ack" && f["request_id"] == request_id {
                turn_id = f["turn_id"].as_str().map(str::to_owned);
            }
            let answered = f["type"] == "error" && f["request_id"] == request_id;
            let ended = (f["type"] == "turn_completed" || f["type"] == "turn_failed")
                && turn_id.as_deref().is_some_and(|t| f["turn_id"] == t);
            frames.push(f);
            if answered || ended {
                return (frames, None);
            }
        }
    }

    /// Reads until the server closes; returns the close code.
    pub async fn close_code(&mut self) -> Option<u16> {
        self.close_frame().await.map(|(code, _)| code)
    }

    /// The code and reason of the server's close, skipping what comes
    /// before it; `None` without one within [`CLOSE_WAIT`].
    pub async fn close_frame(&mut self) -> Option<(u16, String)> {
        // The server's pings come sooner than FRAME_WAIT: a close that never
        // comes fails the wait as a whole instead of each frame's.
        let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.framed.next())
                .await
                .ok()??;
            match frame.ok()? {
                ws::Frame::Close(reason) => {
                    return reason.map(|r| (u16::from(r.code), r.description.unwrap_or_default()));
                }
                _ => continue,
            }
        }
    }
}

/// The text of the last player message in a model request.
pub fn last_user_text(req: &questd::llm::ModelRequest) -> String {
    req.messages
        .iter()
        .rev()
        .find_map(|m| match &**m {
            questd::game::HistoryEntry::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// One whole turn played over a WebSocket: the tools it called (in order),
/// its reply, and its frames.
pub struct Turn {
    pub tools: Vec<String>,
    pub reply: String,
    pub frames: Vec<Value>,
}

impl Turn {
    /// The results of `tool` this turn.
    pub fn results(&self, tool: &str) -> Vec<&Value> {
        self.frames
            .iter()
            .filter(|f| f["type"] == "tool_result" && f["tool"] == tool)
            .map(|f| {
                assert_eq!(f["status"], "ok", "{f}");
                &f["result"]
            })
            .collect()
    }

    pub fn called(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }
}

/// Plays `text` as one turn; the turn must complete and each of its tools
/// succeed.
pub async fn turn(ws: &mut Ws, text: &str) -> Turn {
    // Each chat its own request id: the same words again are a new turn.
    static CHATS: AtomicUsize = AtomicUsize::new(0);
    let request_id = format!("chat-{}", CHATS.fetch_add(1, Ordering::Relaxed));
    let frames = ws.play(text, &request_id).await;
    // Only this turn's frames: a world turn (a timer of the demo's) may
    // run between the player's turns and its frames arrive among theirs.
    let own = frames.last().map(|f| f["turn_id"].clone());
    let frames: Vec<Value> = frames
        .into_iter()
        .filter(|f| f.get("turn_id").is_none() || Some(&f["turn_id"]) == own.as_ref())
        .collect();
    let done = first(&frames, "turn_completed");
    assert!(done.get("error_code").is_none(), "{done}");
    let tools = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| {
            assert_eq!(f["status"], "ok", "{text}: {f}");
            f["tool"].as_str().unwrap().to_owned()
        })
        .collect();
    let reply = done["reply"].as_str().unwrap().to_owned();
    assert!(!reply.is_empty(), "{text}");
    Turn {
        tools,
        reply,
        frames,
    }
}

/// An answer read off a raw socket.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    pub fn code(&self) -> String {
        self.json()["error_code"].as_str().unwrap_or("").to_owned()
    }
}

/// Sends `head` (request line and headers, without the blank line) and then
/// `body` exactly as written, so `Host` and every other header are the
/// test's own; reads one answer (its head, then `Content-Length` bytes).
pub async fn raw(app: &TestApp, head: &str, body: &str) -> Raw {
    raw_bytes(app.port, head, body.as_bytes()).await
}

/// [`raw`] to the server on `port`, with a body of any bytes.
pub async fn raw_bytes(port: u16, head: &str, body: &[u8]) -> Raw {
    let mut request = format!("{}\r\n\r\n", head.trim_end().replace('\n', "\r\n")).into_bytes();
    request.extend_from_slice(body);
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // Written while the answer is read: a server may answer before it has
    // read the whole body (and then never read the rest).
    let write = async {
        let _ = writer.write_all(&request).await;
        std::future::pending::<()>().await
    };
    let read = async {
        loop {
            if let Some(end) = find(&bytes, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (n, v) = l.split_once(':')?;
                        n.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    return (head, bytes[end + 4..end + 4 + length].to_vec());
                }
            }
            let n = reader.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the server closed before a whole answer");
            bytes.extend_from_slice(&chunk[..n]);
        }
    };
    let answer = async {
        tokio::select! {
            answer = read => answer,
            () = write => unreachable!("the write never ends"),
        }
    };
    let (head, body) = tokio::time::timeout(FRAME_WAIT, answer).await.unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Raw {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
