//! peer-limit: the "physical limit" reference of the questd side-by-side
//! benchmark (see ../README.md).
//!
//! It speaks only the WebSocket subset of `docs/protocol.md` that the
//! driver's `limit` target uses: `GET /ws/sessions/{id}?token=player...` or
//! `?token=spectator...` creates the session in memory on first connect and
//! sends `welcome`; each `chat` from a player gets an `ack` and four story
//! frames (`turn_started`, `tool_call`, `tool_result`, `turn_completed`, each
//! with the next `seq` and the `turn_id`) broadcast to every socket of the
//! session. Each frame is serialized once and every socket is handed the
//! same reference-counted bytes. No persistence, no rate limit, no
//! validation beyond parsing: the least work a server can do for this
//! scenario, so that the distance between it and a real server is the cost
//! of that server's features.
//!
//! Run: `cargo run --release -- 127.0.0.1:9100` (or `LIMIT_BIND`);
//! `LIMIT_WORKERS` sets the tokio worker threads (default: one per core).

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

const DEFAULT_BIND: &str = "127.0.0.1:9100";
const PATH_PREFIX: &str = "/ws/sessions/";
/// Chats are a few bytes; a small eager read buffer keeps RSS per socket low.
const READ_BUFFER_BYTES: usize = 4 * 1024;
const WRITE_BUFFER_BYTES: usize = 64 * 1024;
const MAX_MESSAGE_BYTES: usize = 64 * 1024;
const LISTEN_BACKLOG: u32 = 4096;

/// Outgoing queue of one socket; the socket's task owns the receiving end.
type Outbox = mpsc::UnboundedSender<Message>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Player,
    Spectator,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Player => "player",
            Role::Spectator => "spectator",
        }
    }
}

/// One session; its mutex serializes turns, so seq grows by one per frame.
struct Session {
    seq: u64,
    turns: u64,
    rng: u64,
    next_socket: u64,
    /// Every connected socket of the session, in connect order.
    sockets: Vec<(u64, Outbox)>,
}

impl Session {
    fn new(seed: u64) -> Self {
        Session {
            seq: 0,
            turns: 0,
            rng: seed | 1,
            next_socket: 0,
            sockets: Vec::new(),
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// xorshift64*: the roll needs to be random-looking, not secure.
    fn roll_d6(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32 % 6 + 1
    }
}

/// Session id -> session. Lock order: this map, then a session.
type Sessions = Arc<Mutex<HashMap<String, Arc<Mutex<Session>>>>>;

#[derive(Deserialize)]
struct ClientFrame<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    request_id: Option<Cow<'a, str>>,
    #[serde(default)]
    nonce: Option<serde_json::Number>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Direct<'a> {
    Welcome {
        session_id: &'a str,
        role: &'a str,
        seq: u64,
        resumed: bool,
    },
    Ack {
        request_id: Option<&'a str>,
        turn_id: &'a str,
        duplicate: bool,
        queued: u32,
    },
    Error {
        request_id: Option<&'a str>,
        error_code: &'a str,
        message: &'a str,
    },
    Pong {
        nonce: Option<&'a serde_json::Number>,
    },
}

#[derive(Serialize)]
struct Dice<'a> {
    dice: &'a str,
}

#[derive(Serialize)]
struct Roll<'a> {
    dice: &'a str,
    rolls: [u32; 1],
    total: u32,
}

#[derive(Serialize)]
struct ToolEvent<'a> {
    call_id: &'a str,
    tool: &'a str,
    status: &'a str,
    result: &'a Roll<'a>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u32,
    completion_tokens: u32,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Story<'a> {
    TurnStarted {
        seq: u64,
        turn_id: &'a str,
        request_id: Option<&'a str>,
        actor_id: &'a str,
        text: &'a str,
    },
    ToolCall {
        seq: u64,
        turn_id: &'a str,
        iteration: u32,
        call_id: &'a str,
        tool: &'a str,
        args: Dice<'a>,
    },
    ToolResult {
        seq: u64,
        turn_id: &'a str,
        call_id: &'a str,
        tool: &'a str,
        status: &'a str,
        result: &'a Roll<'a>,
        duration_ms: f64,
    },
    TurnCompleted {
        seq: u64,
        turn_id: &'a str,
        reply: &'a str,
        dialog_type: &'a str,
        iterations: u32,
        tool_events: [ToolEvent<'a>; 1],
        state_patch: Empty,
        usage: Usage,
    },
}

/// Serializes once into a shared buffer: clones of the message share it.
fn text_message<T: Serialize>(frame: &T) -> Message {
    let json = serde_json::to_string(frame).expect("frames are plain structs and always serialize");
    Message::Text(Utf8Bytes::from(json))
}

fn reply(outbox: &Outbox, frame: &Direct<'_>) {
    // A closed outbox means the socket is gone; its task is cleaning up.
    let _ = outbox.send(text_message(frame));
}

/// One chat turn: ack to the sender, then the four story frames to all.
fn run_turn(session: &Mutex<Session>, sender: &Outbox, text: &str, request_id: Option<&str>) {
    let mut s = session.lock().expect("session lock poisoned");
    s.turns += 1;
    let turn_id = format!("turn_{}", s.turns);
    reply(
        sender,
        &Direct::Ack {
            request_id,
            turn_id: &turn_id,
            duplicate: false,
            queued: 0,
        },
    );

    let started = Instant::now();
    let turn_started = text_message(&Story::TurnStarted {
        seq: s.next_seq(),
        turn_id: &turn_id,
        request_id,
        actor_id: "pc_001",
        text,
    });
    let tool_call = text_message(&Story::ToolCall {
        seq: s.next_seq(),
        turn_id: &turn_id,
        iteration: 1,
        call_id: "call_1",
        tool: "roll_dice",
        args: Dice { dice: "1d6" },
    });
    let n = s.roll_d6();
    let roll = Roll {
        dice: "1d6",
        rolls: [n],
        total: n,
    };
    let tool_result = text_message(&Story::ToolResult {
        seq: s.next_seq(),
        turn_id: &turn_id,
        call_id: "call_1",
        tool: "roll_dice",
        status: "ok",
        result: &roll,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
    });
    let reply_text = format!("You roll 1d6: {n}.");
    let turn_completed = text_message(&Story::TurnCompleted {
        seq: s.next_seq(),
        turn_id: &turn_id,
        reply: &reply_text,
        dialog_type: "narration",
        iterations: 1,
        tool_events: [ToolEvent {
            call_id: "call_1",
            tool: "roll_dice",
            status: "ok",
            result: &roll,
        }],
        state_patch: Empty {},
        usage: Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
        },
    });
    for (_, outbox) in &s.sockets {
        let _ = outbox.send(turn_started.clone());
        let _ = outbox.send(tool_call.clone());
        let _ = outbox.send(tool_result.clone());
        let _ = outbox.send(turn_completed.clone());
    }
}

fn handle_text(raw: &str, role: Role, session: &Mutex<Session>, outbox: &Outbox) {
    let frame: ClientFrame<'_> = match serde_json::from_str(raw) {
        Ok(f) => f,
        Err(_) => {
            let error = Direct::Error {
                request_id: None,
                error_code: "INVALID_FRAME",
                message: "not a frame",
            };
            return reply(outbox, &error);
        }
    };
    let request_id = frame.request_id.as_deref();
    match frame.kind.as_ref() {
        "chat" if role == Role::Spectator => {
            let error = Direct::Error {
                request_id,
                error_code: "FORBIDDEN",
                message: "spectators may not chat",
            };
            reply(outbox, &error);
        }
        "chat" => match frame.text.as_deref() {
            Some(text) => run_turn(session, outbox, text, request_id),
            None => {
                let error = Direct::Error {
                    request_id,
                    error_code: "INVALID_FRAME",
                    message: "chat needs text",
                };
                reply(outbox, &error);
            }
        },
        "ping" => reply(
            outbox,
            &Direct::Pong {
                nonce: frame.nonce.as_ref(),
            },
        ),
        _ => {
            let error = Direct::Error {
                request_id,
                error_code: "INVALID_FRAME",
                message: "unknown type",
            };
            reply(outbox, &error);
        }
    }
}

/// Reads `/ws/sessions/{id}?token=...` from the upgrade request.
fn parse_target(req: &Request) -> Result<(String, Role), StatusCode> {
    let uri = req.uri();
    let id = uri
        .path()
        .strip_prefix(PATH_PREFIX)
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .ok_or(StatusCode::NOT_FOUND)?;
    let token = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let role = if token.starts_with("player") {
        Role::Player
    } else if token.starts_with("spectator") {
        Role::Spectator
    } else {
        return Err(StatusCode::UNAUTHORIZED);
    };
    Ok((id.to_owned(), role))
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
}

/// Joins the session (creating it), registers the outbox and queues welcome
/// under the same locks, so welcome precedes every story frame.
fn join(
    sessions: &Sessions,
    seeds: &RandomState,
    id: &str,
    role: Role,
    outbox: &Outbox,
) -> (Arc<Mutex<Session>>, u64) {
    let mut map = sessions.lock().expect("session map lock poisoned");
    let session = map
        .entry(id.to_owned())
        .or_insert_with(|| Arc::new(Mutex::new(Session::new(seeds.hash_one(id)))))
        .clone();
    let mut s = session.lock().expect("session lock poisoned");
    let socket_id = s.next_socket;
    s.next_socket += 1;
    reply(
        outbox,
        &Direct::Welcome {
            session_id: id,
            role: role.as_str(),
            seq: s.seq,
            resumed: false,
        },
    );
    s.sockets.push((socket_id, outbox.clone()));
    drop(s);
    (session, socket_id)
}

/// Removes the socket; the last one out removes the session.
fn leave(sessions: &Sessions, id: &str, session: &Mutex<Session>, socket_id: u64) {
    let mut map = sessions.lock().expect("session map lock poisoned");
    let mut s = session.lock().expect("session lock poisoned");
    s.sockets.retain(|(sid, _)| *sid != socket_id);
    if s.sockets.is_empty() {
        map.remove(id);
    }
}

async fn serve(stream: TcpStream, sessions: Sessions, seeds: Arc<RandomState>) {
    let _ = stream.set_nodelay(true);
    let mut target = None;
    // The callback's signature is tungstenite's; its error type is what it is.
    #[allow(clippy::result_large_err)]
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        match parse_target(req) {
            Ok(t) => {
                target = Some(t);
                Ok(resp)
            }
            Err(code) => {
                let mut refusal = ErrorResponse::new(Some(
                    code.canonical_reason().unwrap_or("refused").to_owned(),
                ));
                *refusal.status_mut() = code;
                Err(refusal)
            }
        }
    };
    let Ok(mut ws) =
        tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(ws_config())).await
    else {
        return;
    };
    let Some((id, role)) = target else { return };

    let (outbox, mut inbox) = mpsc::unbounded_channel::<Message>();
    let (session, socket_id) = join(&sessions, &seeds, &id, role, &outbox);

    // One task per socket: it writes what the session queued (feeding all
    // that is ready, then one flush) and reads the client's frames.
    'socket: loop {
        tokio::select! {
            queued = inbox.recv() => {
                let Some(first) = queued else { break };
                if ws.feed(first).await.is_err() {
                    break;
                }
                while let Ok(next) = inbox.try_recv() {
                    if ws.feed(next).await.is_err() {
                        break 'socket;
                    }
                }
                if ws.flush().await.is_err() {
                    break;
                }
            }
            incoming = ws.next() => match incoming {
                Some(Ok(Message::Text(text))) => handle_text(text.as_str(), role, &session, &outbox),
                Some(Ok(Message::Binary(_))) => {
                    let error = Direct::Error { request_id: None, error_code: "INVALID_FRAME", message: "binary frame" };
                    reply(&outbox, &error);
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {} // ping/pong: tungstenite answers pings itself
            },
        }
    }
    leave(&sessions, &id, &session, socket_id);
    let _ = ws.close(None).await;
}

/// Binds with a backlog that matches the kernel's somaxconn (4096 here), so
/// connect storms are not refused by a short accept queue.
fn listen(bind: &str) -> std::io::Result<TcpListener> {
    let addr: SocketAddr = bind.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{bind}: {e}"))
    })?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

fn main() -> std::io::Result<()> {
    let bind = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LIMIT_BIND").ok())
        .unwrap_or_else(|| DEFAULT_BIND.to_owned());
    let workers = std::env::var("LIMIT_WORKERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = listen(&bind)?;
        println!(
            "peer-limit listening on ws://{} (pid {}, {} workers)",
            listener.local_addr()?,
            std::process::id(),
            workers
        );
        let sessions: Sessions = Arc::default();
        let seeds = Arc::new(RandomState::new());
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(serve(stream, sessions.clone(), seeds.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait, then go on.
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}
