//! The load test's WebSocket client (RFC 6455, client side): the upgrade,
//! reading the server's frames, and writing masked ones.
//!
//! Written for ten thousand connections sharing two cores with the server
//! they drive (docs/protocol.md §8.1):
//! - a connection reads into one buffer of its own that is cleared, not
//!   freed, once everything in it is read, and read into without zeroing it
//!   first;
//! - a frame is handed out as a view of that buffer ([`Incoming::Text`]
//!   borrows it), with no copy, no allocation and no reference count per
//!   frame;
//! - [`Conn::next_ready`] takes what has come without waiting, so a burst
//!   of frames costs no timer and no wake-up per frame.
//!
//! What a server sends is still held to the rules: a masked frame, reserved
//! bits, an unknown opcode, a control frame in fragments, a continuation
//! with nothing to continue or text that is not UTF-8 end the connection as
//! [`Incoming::Lost`], and nothing longer than [`MAX_MESSAGE_BYTES`] is
//! kept. Pings are answered with a pong as they are read.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};

use super::client::Target;
use crate::http::wsframe::{self, Head, op};

/// What one read asks the socket for at least: a turn's frames come in
/// one burst of a few KiB.
const READ_BYTES: usize = 8 * 1024;
/// Largest message accepted; questd's own limit for client frames is 64
/// KiB, its story frames carry whole areas and characters.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Largest upgrade answer read (its head and a refusal's body).
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long a closing connection waits for the server's close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Why a connection was not made; `code()` is its key in `errors_by_code`.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("tcp connect to {addr} failed: {source}")]
    Tcp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server refused the upgrade with HTTP {status}")]
    Refused { status: u16, code: Option<String> },
    #[error("websocket handshake failed: {0}")]
    Handshake(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl ConnectError {
    /// The key this failure is counted under.
    pub fn code(&self) -> String {
        match self {
            Self::Tcp { .. } => "CONNECT_FAILED".into(),
            Self::Refused {
                code: Some(code), ..
            } => code.clone(),
            Self::Refused { status, .. } => format!("HTTP_{status}"),
            Self::Handshake(_) => "HANDSHAKE_FAILED".into(),
            Self::Timeout(_) => "TIMEOUT".into(),
        }
    }
}

/// The `error_code` of an HTTP error body, if it is questd's JSON.
pub fn error_code_of(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("error_code")?.as_str().map(str::to_owned)
}

/// What the next read gave.
#[derive(Debug, PartialEq)]
pub enum Incoming<'a> {
    /// A text message, as a view of the connection's buffer.
    Text(Text<'a>),
    /// A binary message (questd never sends one).
    Binary,
    /// The server closed the connection (with this close code, if any).
    Closed(Option<u16>),
    /// The connection broke, or the server broke the rules.
    Lost(String),
    /// Nothing arrived in the time given.
    Idle,
}

/// A text message and when its bytes were read (the messages of one read
/// share it: one clock reading per read, not per message).
#[derive(Debug, PartialEq)]
pub struct Text<'a> {
    pub text: &'a str,
    pub at: Instant,
}

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        self.text
    }
}

/// What the buffer held next, by place, so that the view is taken once the
/// buffer is no longer being changed.
#[derive(Clone)]
enum Got {
    /// A whole text message in one frame: its bytes in the buffer.
    Text(Range<usize>),
    /// A text message joined from fragments, in `Conn::joined`.
    Joined,
    Binary,
    Closed(Option<u16>),
    Lost(String),
}

/// One WebSocket connection to a session.
pub struct Conn {
    io: TcpStream,
    /// Bytes read; `[..read]` were handed out already.
    buf: BytesMut,
    read: usize,
    /// A message in fragments: its opcode and its bytes so far.
    partial: Option<(u8, Vec<u8>)>,
    /// The last message joined from fragments.
    joined: Vec<u8>,
    /// Pongs not yet written (the socket had no room).
    unsent: Vec<u8>,
    /// A close frame came, or the connection ended or broke: nothing more
    /// is read.
    ended: Option<Got>,
    /// When the last read that gave bytes returned.
    read_at: Instant,
}

impl Conn {
    /// Connects to `path_and_query` on the target from `source` (any
    /// local address when `None`) and upgrades, within `wait`.
    pub async fn open(
        target: &Target,
        source: Option<IpAddr>,
        path_and_query: &str,
        wait: Duration,
        receive_buffer: Option<u32>,
    ) -> Result<Self, ConnectError> {
        let open = Self::open_now(target, source, path_and_query, receive_buffer);
        tokio::time::timeout(wait, open)
            .await
            .map_err(|_| ConnectError::Timeout(wait))?
    }

    async fn open_now(
        target: &Target,
        source: Option<IpAddr>,
        path_and_query: &str,
        receive_buffer: Option<u32>,
    ) -> Result<Self, ConnectError> {
        let addr = target.addr;
        let tcp = |source: std::io::Error| ConnectError::Tcp { addr, source };
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(tcp)?;
        if let Some(ip) = source {
            socket.bind(SocketAddr::new(ip, 0)).map_err(tcp)?;
        }
        if let Some(bytes) = receive_buffer {
            socket.set_recv_buffer_size(bytes).map_err(tcp)?;
        }
        let stream = socket.connect(addr).await.map_err(tcp)?;
        stream.set_nodelay(true).map_err(tcp)?;
        Self::upgrade(stream, &target.authority, path_and_query).await
    }

    /// Asks for the upgrade on `io` and reads the answer; bytes the server
    /// sent after it (its first frames) stay in the buffer.
    async fn upgrade(
        mut io: TcpStream,
        authority: &str,
        path_and_query: &str,
    ) -> Result<Self, ConnectError> {
        let failed = |e: std::io::Error| ConnectError::Handshake(e.to_string());
        let key = generate_key();
        let request = format!(
            "GET {path_and_query} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n"
        );
        io.write_all(request.as_bytes()).await.map_err(failed)?;
        let mut buf = BytesMut::with_capacity(READ_BYTES);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut answer = httparse::Response::new(&mut headers);
            let status = answer
                .parse(&buf)
                .map_err(|e| ConnectError::Handshake(e.to_string()))?;
            if let httparse::Status::Complete(head) = status {
                let code = answer.code.unwrap_or_default();
                let header = |name: &str| {
                    answer
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| h.value)
                };
                if code != 101 {
                    let length = header("content-length")
                        .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
                        .unwrap_or(0usize)
                        .min(MAX_ANSWER_BYTES);
                    while buf.len() < head + length {
                        if io.read_buf(&mut buf).await.map_err(failed)? == 0 {
                            break;
                        }
                    }
                    let body = &buf[head..buf.len().min(head + length)];
                    return Err(ConnectError::Refused {
                        status: code,
                        code: error_code_of(body),
                    });
                }
                if header("sec-websocket-accept")
                    != Some(derive_accept_key(key.as_bytes()).as_bytes())
                {
                    return Err(ConnectError::Handshake(
                        "the answer's Sec-WebSocket-Accept is not the key's".into(),
                    ));
                }
                buf.advance(head);
                return Ok(Self {
                    io,
                    buf,
                    read: 0,
                    partial: None,
                    joined: Vec::new(),
                    unsent: Vec::new(),
                    ended: None,
                    read_at: Instant::now(),
                });
            }
            if buf.len() >= MAX_ANSWER_BYTES {
                return Err(ConnectError::Handshake(
                    "the answer's head is too long".into(),
                ));
            }
            buf.reserve(READ_BYTES);
            if io.read_buf(&mut buf).await.map_err(failed)? == 0 {
                return Err(ConnectError::Handshake(
                    "the server closed the connection before answering".into(),
                ));
            }
        }
    }

    /// The next message that matters, waiting at most `wait` for it.
    pub async fn next(&mut self, wait: Duration) -> Incoming<'_> {
        match tokio::time::timeout(wait, self.wait_for_message()).await {
            Ok(got) => self.view(got),
            Err(_) => Incoming::Idle,
        }
    }

    /// The next message that matters, however long it takes: for a reader
    /// to whom a quiet connection is normal, with no timer to set.
    pub async fn next_untimed(&mut self) -> Incoming<'_> {
        let got = self.wait_for_message().await;
        self.view(got)
    }

    /// The next message that matters if one can be had without waiting
    /// (read already, or waiting in the socket): a burst of frames is then
    /// read with no timer and no wake-up per frame. `None` when the next
    /// one has not come.
    pub fn next_ready(&mut self) -> Option<Incoming<'_>> {
        let got = loop {
            if let Some(got) = self.message() {
                break got;
            }
            self.make_room();
            match self.io.try_read_buf(&mut self.buf) {
                Ok(0) => self.end(Got::Closed(None)),
                Ok(_) => self.read_at = Instant::now(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) => self.end(Got::Lost(e.to_string())),
            }
        };
        Some(self.view(got))
    }

    /// Reads until a message that matters is whole (cancel-safe: what was
    /// read stays in the buffer).
    async fn wait_for_message(&mut self) -> Got {
        loop {
            if let Some(got) = self.message() {
                return got;
            }
            if !self.unsent.is_empty() {
                let unsent = std::mem::take(&mut self.unsent);
                if let Err(e) = self.io.write_all(&unsent).await {
                    self.end(Got::Lost(e.to_string()));
                    continue;
                }
            }
            self.make_room();
            match self.io.read_buf(&mut self.buf).await {
                Ok(0) => self.end(Got::Closed(None)),
                Ok(_) => self.read_at = Instant::now(),
                Err(e) => self.end(Got::Lost(e.to_string())),
            }
        }
    }

    /// The connection ends with `why`: it is what every read answers from
    /// now on.
    fn end(&mut self, why: Got) {
        self.ended.get_or_insert(why);
    }

    /// Room to read into: the buffer emptied once all of it was handed out
    /// (keeping its capacity), what is left moved to its front otherwise.
    fn make_room(&mut self) {
        if self.read == self.buf.len() {
            self.buf.clear();
        } else {
            self.buf.advance(self.read);
        }
        self.read = 0;
        if self.buf.capacity() - self.buf.len() < READ_BYTES / 2 {
            self.buf.reserve(READ_BYTES);
        }
    }

    /// The next message that matters in what was read, if it is whole;
    /// pings are answered on the way.
    fn message(&mut self) -> Option<Got> {
        loop {
            if let Some(ended) = &self.ended {
                return Some(ended.clone());
            }
            let rest = &self.buf[self.read..];
            let head = match wsframe::read_head(rest) {
                Ok(Some(head)) => head,
                Ok(None) => return None,
                Err(e) => {
                    self.end(Got::Lost(format!(
                        "the server broke the protocol: {}",
                        e.reason()
                    )));
                    continue;
                }
            };
            let Head {
                fin,
                opcode,
                masked,
                len,
                at,
            } = head;
            if masked {
                self.end(Got::Lost("the server masked a frame".into()));
                continue;
            }
            let so_far = self.partial.as_ref().map_or(0, |(_, b)| b.len());
            if len > MAX_MESSAGE_BYTES || so_far.saturating_add(len) > MAX_MESSAGE_BYTES {
                self.end(Got::Lost(format!(
                    "a message longer than {MAX_MESSAGE_BYTES} bytes"
                )));
                continue;
            }
            if rest.len() < at + len {
                // Room for the rest of this frame in one read.
                self.buf.reserve(at + len - rest.len());
                return None;
            }
            let body = self.read + at..self.read + at + len;
            self.read = body.end;
            if let Some(got) = self.frame(fin, opcode, body) {
                return Some(got);
            }
        }
    }

    /// What the whole frame of `opcode` with its payload at `body` makes,
    /// if it is a message that matters.
    fn frame(&mut self, fin: bool, opcode: u8, body: Range<usize>) -> Option<Got> {
        match opcode {
            op::PING => {
                let pong = wsframe::masked(op::PONG, &self.buf[body], rand::random());
                self.answer(&pong);
                None
            }
            op::PONG => None,
            op::CLOSE => {
                let payload = &self.buf[body];
                let code =
                    (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                self.end(Got::Closed(code));
                None
            }
            op::CONTINUATION => {
                let Some((_, so_far)) = self.partial.as_mut() else {
                    self.end(Got::Lost(
                        "the server sent a continuation with nothing to continue".into(),
                    ));
                    return None;
                };
                so_far.extend_from_slice(&self.buf[body]);
                if !fin {
                    return None;
                }
                let (opcode, whole) = self.partial.take()?;
                self.joined = whole;
                Some(if opcode == op::TEXT {
                    Got::Joined
                } else {
                    Got::Binary
                })
            }
            _ if self.partial.is_some() => {
                self.end(Got::Lost(
                    "the server began a message before the last one ended".into(),
                ));
                None
            }
            _ if !fin => {
                self.partial = Some((opcode, self.buf[body].to_vec()));
                None
            }
            op::TEXT => Some(Got::Text(body)),
            _ => Some(Got::Binary),
        }
    }

    /// Writes a control answer now if the socket takes it, else with the
    /// next write.
    fn answer(&mut self, frame: &[u8]) {
        if self.unsent.is_empty() {
            match self.io.try_write(frame) {
                Ok(n) if n == frame.len() => (),
                Ok(n) => self.unsent.extend_from_slice(&frame[n..]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.unsent.extend_from_slice(frame);
                }
                Err(e) => self.end(Got::Lost(e.to_string())),
            }
        } else {
            self.unsent.extend_from_slice(frame);
        }
    }

    /// What `got` names, as the caller sees it.
    fn view(&self, got: Got) -> Incoming<'_> {
        let text = |bytes| match std::str::from_utf8(bytes) {
            Ok(text) => Incoming::Text(Text {
                text,
                at: self.read_at,
            }),
            Err(_) => Incoming::Lost("the server sent text that is not UTF-8".into()),
        };
        match got {
            Got::Text(range) => text(&self.buf[range]),
            Got::Joined => text(&self.joined),
            Got::Binary => Incoming::Binary,
            Got::Closed(code) => Incoming::Closed(code),
            Got::Lost(why) => Incoming::Lost(why),
        }
    }

    /// Sends one text frame.
    pub async fn send(&mut self, text: String) -> Result<(), String> {
        let mut out = std::mem::take(&mut self.unsent);
        out.extend_from_slice(&wsframe::masked(op::TEXT, text.as_bytes(), rand::random()));
        self.io.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// Closes politely: sends a close frame and reads until the server's
    /// close frame (briefly; frames that still come are dropped), then
    /// drops the socket. questd answers the close but may keep the TCP
    /// connection for keep-alive, so waiting for the server to end TCP
    /// would only add its keep-alive time to every close.
    pub async fn close(mut self) {
        let mut out = std::mem::take(&mut self.unsent);
        let payload = wsframe::close_payload(wsframe::close::NORMAL, "");
        out.extend_from_slice(&wsframe::masked(op::CLOSE, &payload, rand::random()));
        if self.io.write_all(&out).await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            loop {
                if let Got::Closed(_) | Got::Lost(_) = self.wait_for_message().await {
                    break;
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::wsframe::{Incoming as FromClient, Reader, head};
    use tokio::net::TcpListener;

    /// The text of a text message (and a failure for anything else).
    fn text(incoming: Incoming<'_>) -> String {
        match incoming {
            Incoming::Text(t) => t.to_string(),
            other => panic!("not text: {other:?}"),
        }
    }

    /// A server frame (unmasked), final or not.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let (mut h, n) = head(opcode, payload.len());
        if !fin {
            h[0] &= 0x7F;
        }
        [&h[..usize::from(n)], payload].concat()
    }

    /// A server on port 0 that answers the upgrade with `answer` (given the
    /// client's key) and then runs `then` on the socket.
    async fn serve<F, Fut>(
        answer: fn(&str) -> Vec<u8>,
        then: F,
    ) -> (Target, tokio::task::JoinHandle<()>)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let (mut io, _) = listener.accept().await.expect("accepted");
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                io.read_exact(&mut byte).await.expect("request");
                request.push(byte[0]);
            }
            let request = String::from_utf8(request).expect("text");
            assert!(
                request.starts_with("GET /ws/sessions/s1?token=t HTTP/1.1\r\n"),
                "{request}"
            );
            let key = request
                .lines()
                .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                .expect("a key");
            io.write_all(&answer(key)).await.expect("answered");
            then(io).await;
        });
        let target = Target::resolve(&format!("http://{addr}"), None)
            .await
            .expect("target");
        (target, task)
    }

    fn switching(key: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n",
            derive_accept_key(key.as_bytes())
        )
        .into_bytes()
    }

    async fn open(target: &Target) -> Result<Conn, ConnectError> {
        Conn::open(
            target,
            None,
            "/ws/sessions/s1?token=t",
            Duration::from_secs(5),
            None,
        )
        .await
    }

    /// The client's next frame, read the way questd reads it.
    async fn from_client(
        io: &mut TcpStream,
        reader: &mut Reader,
        buf: &mut BytesMut,
    ) -> FromClient {
        loop {
            if let Some(m) = reader.next(buf).expect("a client's frame") {
                return m;
            }
            assert!(
                io.read_buf(buf).await.expect("read") > 0,
                "the client hung up"
            );
        }
    }

    #[tokio::test]
    async fn frames_sent_with_the_answer_split_fragmented_and_long_are_read_whole() {
        let long = "x".repeat(70_000);
        let wire_long = long.clone();
        let (target, server) = serve(
            |key| {
                [
                    switching(key),
                    frame(true, op::TEXT, b"{\"type\":\"welcome\"}"),
                ]
                .concat()
            },
            move |mut io| async move {
                let mut wire = Vec::new();
                wire.extend(frame(true, op::TEXT, &[b'y'; 300]));
                // A message in three fragments, a ping between them.
                wire.extend(frame(false, op::TEXT, "caf".as_bytes()));
                wire.extend(frame(true, op::PING, b"p1"));
                wire.extend(frame(false, op::CONTINUATION, "é ".as_bytes()));
                wire.extend(frame(true, op::CONTINUATION, b"au lait"));
                wire.extend(frame(true, op::BINARY, b"\x00\x01"));
                wire.extend(frame(true, op::TEXT, wire_long.as_bytes()));
                // A byte at a time: every header and payload split.
                for byte in wire {
                    io.write_all(&[byte]).await.expect("written");
                }
                let (mut reader, mut buf) = (Reader::new(1 << 20), BytesMut::new());
                let pong = from_client(&mut io, &mut reader, &mut buf).await;
                assert_eq!(pong, FromClient::Pong, "the ping is answered");
                let chat = from_client(&mut io, &mut reader, &mut buf).await;
                assert_eq!(chat, FromClient::Text("{\"type\":\"chat\"}".into()));
                io.write_all(&frame(
                    true,
                    op::CLOSE,
                    &wsframe::close_payload(1013, "too slow"),
                ))
                .await
                .expect("written");
                let close = from_client(&mut io, &mut reader, &mut buf).await;
                assert!(
                    matches!(close, FromClient::Close(Some((1000, _)))),
                    "{close:?}"
                );
            },
        )
        .await;
        let mut conn = open(&target).await.expect("upgraded");
        let wait = Duration::from_secs(5);
        assert_eq!(text(conn.next(wait).await), "{\"type\":\"welcome\"}");
        assert_eq!(text(conn.next(wait).await), "y".repeat(300));
        assert_eq!(text(conn.next(wait).await), "café au lait");
        assert_eq!(conn.next(wait).await, Incoming::Binary);
        assert_eq!(text(conn.next(wait).await), long);
        conn.send("{\"type\":\"chat\"}".into()).await.expect("sent");
        assert_eq!(conn.next_untimed().await, Incoming::Closed(Some(1013)));
        assert_eq!(
            conn.next(wait).await,
            Incoming::Closed(Some(1013)),
            "and stays closed"
        );
        conn.close().await;
        server.await.expect("the server's checks");
    }

    #[tokio::test]
    async fn next_ready_takes_what_has_come_without_waiting() {
        let (go, gone) = tokio::sync::oneshot::channel::<()>();
        let (target, server) = serve(switching, move |mut io| async move {
            let _ = gone.await;
            let burst = [
                frame(true, op::TEXT, b"1"),
                frame(true, op::TEXT, b"2"),
                frame(true, op::TEXT, b"3"),
            ]
            .concat();
            io.write_all(&burst).await.expect("written");
            // Held open until the client has read.
            let mut rest = Vec::new();
            let _ = io.read_to_end(&mut rest).await;
        })
        .await;
        let mut conn = open(&target).await.expect("upgraded");
        assert_eq!(conn.next_ready(), None, "nothing has come");
        go.send(()).expect("sent");
        assert_eq!(text(conn.next(Duration::from_secs(5)).await), "1");
        let mut rest = Vec::new();
        while let Some(Incoming::Text(t)) = conn.next_ready() {
            rest.push(t.to_string());
        }
        assert_eq!(rest, ["2", "3"]);
        assert_eq!(conn.next(Duration::from_millis(1)).await, Incoming::Idle);
        drop(conn);
        server.await.expect("server");
    }

    #[tokio::test]
    async fn a_server_that_breaks_the_rules_loses_the_connection() {
        let cases: [(&str, Vec<u8>); 4] = [
            ("masked", wsframe::masked(op::TEXT, b"hi", [1, 2, 3, 4])),
            ("not UTF-8", frame(true, op::TEXT, b"\xff\xfe")),
            ("too long", {
                let mut h = vec![0x81, 127];
                h.extend_from_slice(&(MAX_MESSAGE_BYTES as u64 + 1).to_be_bytes());
                h
            }),
            ("nothing to continue", frame(true, op::CONTINUATION, b"x")),
        ];
        for (what, wire) in cases {
            let (target, server) = serve(switching, move |mut io| async move {
                io.write_all(&wire).await.expect("written");
                let mut rest = Vec::new();
                let _ = io.read_to_end(&mut rest).await;
            })
            .await;
            let mut conn = open(&target).await.expect("upgraded");
            let got = conn.next(Duration::from_secs(5)).await;
            assert!(matches!(got, Incoming::Lost(_)), "{what}: {got:?}");
            drop(conn);
            server.await.expect("server");
        }
    }

    #[tokio::test]
    async fn a_refused_upgrade_is_its_status_and_error_code() {
        let (target, server) = serve(
            |_| {
                let body = r#"{"error_code":"UNAUTHORIZED","message":"bad token"}"#;
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            },
            |_| async {},
        )
        .await;
        let err = open(&target).await.err().expect("refused");
        assert_eq!(err.code(), "UNAUTHORIZED");
        assert!(matches!(err, ConnectError::Refused { status: 401, .. }));
        server.await.expect("server");

        let (target, server) = serve(
            |_| b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: nope\r\n\r\n".to_vec(),
            |_| async {},
        )
        .await;
        let err = open(&target).await.err().expect("refused");
        assert_eq!(err.code(), "HANDSHAKE_FAILED");
        server.await.expect("server");
    }

    #[test]
    fn connect_errors_have_codes() {
        let refused = |code: Option<&str>| ConnectError::Refused {
            status: 401,
            code: code.map(str::to_owned),
        };
        assert_eq!(refused(Some("UNAUTHORIZED")).code(), "UNAUTHORIZED");
        assert_eq!(refused(None).code(), "HTTP_401");
        assert_eq!(
            error_code_of(br#"{"error_code":"NOT_FOUND","message":"no session x"}"#).as_deref(),
            Some("NOT_FOUND")
        );
        assert_eq!(error_code_of(b"<html>"), None);
    }
}
