//! What the examples that run several questd nodes share: starting a node,
//! creating a session, opening its WebSocket.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

pub type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// The internal key the nodes are started with.
pub const KEY: &str = "example-key";

/// A node's process, killed when dropped (a panic included).
pub struct Node(pub Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A questd node named `name` on the database `db`; answers the process
/// and its port once it listens.
pub fn start(binary: &str, db: &str, name: &str) -> (Node, u16) {
    start_on(binary, db, name, "127.0.0.1:0")
}

/// [`start`], bound to `bind` (a node started again on its old port).
pub fn start_on(binary: &str, db: &str, name: &str, bind: &str) -> (Node, u16) {
    let mut child = Command::new(binary)
        .args(["serve", "--bind", bind, "--log-format", "json"])
        .env("QUESTD_DATABASE_URL", db)
        .env("QUESTD_NODE_ID", name)
        .env("QUESTD_INTERNAL_API_KEY", KEY)
        .env("QUESTD_CHAT_BURST", "1000")
        .env("QUESTD_CHAT_PER_MINUTE", "1000000")
        // A benchmark's client sends turn after turn on one connection,
        // past the default 20 frames a second.
        .env("QUESTD_WS_FRAMES_PER_SECOND", "1000000")
        .env("QUESTD_WS_FRAME_BURST", "1000000")
        .env("QUESTD_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("questd starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let port = loop {
        let line = lines.next().expect("questd logs its port").expect("a line");
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if let Some(p) = v["fields"]["port"].as_u64() {
            break p as u16;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Node(child), port)
}

/// A new demo session on the node at `port`: the create answer.
pub async fn create_session(http: &reqwest::Client, port: u16) -> Value {
    create_session_with(http, port, &json!({"campaign_id": "demo"})).await
}

/// A new session made from the creation body `body` on the node at
/// `port`, with the key: the create answer.
pub async fn create_session_with(http: &reqwest::Client, port: u16, body: &Value) -> Value {
    http.post(format!("http://127.0.0.1:{port}/api/v1/sessions"))
        .header("X-Internal-API-Key", KEY)
        .json(body)
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("created")
}

/// The session's WebSocket on the node at `port`, opened with the token
/// named `token` (`player_token` or `spectator_token`) of the create
/// answer.
pub async fn connect(port: u16, session: &Value, token: &str, last_seq: u64) -> Ws {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("tcp");
    let url = format!(
        "ws://127.0.0.1:{port}/ws/sessions/{}?token={}&last_seq={last_seq}",
        session["session_id"].as_str().expect("id"),
        session[token].as_str().expect("token"),
    );
    let (ws, _) = tokio_tungstenite::client_async(url, tcp)
        .await
        .expect("websocket");
    ws
}
