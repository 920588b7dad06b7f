//! The load test's sockets: where the server is, which local address each
//! client socket binds to, and a WebSocket connection that reads text
//! frames with a timeout.
//!
//! Connections are tokio-tungstenite streams over a `TcpSocket` this module
//! binds itself, so `--source-ips` can spread them over many loopback
//! addresses (each has its own ~28,000 ephemeral ports).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};

use super::LoadtestError;

/// Most addresses `--source-ips` may name.
const MAX_SOURCE_IPS: u64 = 65_536;
/// Read buffer per connection: frames are small and there may be tens of
/// thousands of connections (tungstenite's default is 128 KiB each).
const READ_BUFFER_BYTES: usize = 8 * 1024;
/// Largest frame accepted; questd's own limit for client frames is 64 KiB,
/// its story frames carry whole areas and characters.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How long a closing connection waits for the server's close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Local addresses client sockets bind to, used round robin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceIps {
    addrs: Vec<IpAddr>,
}

impl SourceIps {
    /// Reads `127.0.0.2-127.0.0.20`, one address, or a comma-separated
    /// list of either (ranges are IPv4 only).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut addrs = Vec::new();
        for part in text.split(',').map(str::trim) {
            let ip = |s: &str| {
                IpAddr::from_str(s.trim()).map_err(|_| format!("{s:?} is not an IP address"))
            };
            match part.split_once('-') {
                None => addrs.push(ip(part)?),
                Some((first, last)) => {
                    let (IpAddr::V4(first), IpAddr::V4(last)) = (ip(first)?, ip(last)?) else {
                        return Err(format!("{part:?}: ranges are IPv4 only"));
                    };
                    let (a, b) = (u32::from(first), u32::from(last));
                    if a > b {
                        return Err(format!("{part:?}: the range runs backwards"));
                    }
                    if u64::from(b - a) + addrs.len() as u64 >= MAX_SOURCE_IPS {
                        return Err(format!("more than {MAX_SOURCE_IPS} addresses"));
                    }
                    addrs.extend((a..=b).map(|n| IpAddr::V4(Ipv4Addr::from(n))));
                }
            }
            if addrs.len() as u64 > MAX_SOURCE_IPS {
                return Err(format!("more than {MAX_SOURCE_IPS} addresses"));
            }
        }
        Ok(Self { addrs })
    }

    /// How many addresses there are.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// The first address (HTTP requests use it).
    pub fn first(&self) -> Option<IpAddr> {
        self.addrs.first().copied()
    }

    /// The `n`th address, round robin.
    pub fn nth(&self, n: usize) -> Option<IpAddr> {
        self.addrs.get(n % self.addrs.len().max(1)).copied()
    }
}

/// Hands out source addresses round robin to every connection of a run.
#[derive(Debug, Default)]
pub struct SourcePicker {
    ips: Option<SourceIps>,
    next: AtomicUsize,
}

impl SourcePicker {
    pub fn new(ips: Option<SourceIps>) -> Self {
        Self {
            ips,
            next: AtomicUsize::new(0),
        }
    }

    /// The address the next socket binds to (`None`: let the kernel pick).
    pub fn next(&self) -> Option<IpAddr> {
        let ips = self.ips.as_ref()?;
        ips.nth(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The address HTTP requests bind to.
    pub fn first(&self) -> Option<IpAddr> {
        self.ips.as_ref().and_then(SourceIps::first)
    }
}

/// The server being driven.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port`, no trailing slash.
    pub http_base: String,
    /// `host:port` as the user wrote it, for the WebSocket request's URI.
    pub authority: String,
    /// The address sockets connect to.
    pub addr: SocketAddr,
}

impl Target {
    /// Parses `--url` and resolves its host (preferring an address of the
    /// family of `source`, when given).
    pub async fn resolve(url: &str, source: Option<IpAddr>) -> Result<Self, LoadtestError> {
        let bad = |why: &str| LoadtestError::BadUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if parsed.scheme() != "http" {
            return Err(bad(
                "only http:// URLs are driven (questd itself serves plain HTTP)",
            ));
        }
        let host = parsed.host_str().ok_or_else(|| bad("no host"))?;
        let port = parsed.port_or_known_default().unwrap_or(80);
        let authority = match parsed.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let lookup = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((lookup, port))
            .await
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
            .collect();
        let same_family = |a: &&SocketAddr| source.is_none_or(|s| s.is_ipv4() == a.is_ipv4());
        let addr = addrs
            .iter()
            .find(same_family)
            .or(addrs.first())
            .copied()
            .ok_or_else(|| bad(&format!("{host} has no address")))?;
        let path = parsed.path().trim_end_matches('/');
        Ok(Self {
            http_base: format!("http://{authority}{path}"),
            authority,
            addr,
        })
    }
}

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

/// What the next read gave.
#[derive(Debug)]
pub enum Incoming {
    Text(Utf8Bytes),
    /// A binary frame (questd never sends one).
    Binary,
    /// The server closed the connection (with this close code, if any).
    Closed(Option<u16>),
    /// The connection broke.
    Lost(String),
    /// Nothing arrived in the time given.
    Idle,
}

/// One WebSocket connection to a session.
pub struct Conn {
    ws: WebSocketStream<TcpStream>,
}

/// The `error_code` of an HTTP error body, if it is questd's JSON.
pub fn error_code_of(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("error_code")?.as_str().map(str::to_owned)
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
        let uri = format!("ws://{}{path_and_query}", target.authority);
        let config = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER_BYTES)
            .write_buffer_size(0)
            .max_message_size(Some(MAX_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_MESSAGE_BYTES));
        match tokio_tungstenite::client_async_with_config(uri, stream, Some(config)).await {
            Ok((ws, _)) => Ok(Self { ws }),
            Err(tungstenite::Error::Http(response)) => Err(ConnectError::Refused {
                status: response.status().as_u16(),
                code: response.body().as_deref().and_then(error_code_of),
            }),
            Err(e) => Err(ConnectError::Handshake(e.to_string())),
        }
    }

    /// The next frame that matters, waiting at most `wait` for it. Pings are
    /// answered by tungstenite while reading.
    pub async fn next(&mut self, wait: Duration) -> Incoming {
        loop {
            let Ok(next) = tokio::time::timeout(wait, self.ws.next()).await else {
                return Incoming::Idle;
            };
            if let Some(incoming) = Self::incoming(next) {
                return incoming;
            }
        }
    }

    /// The next frame that matters if one can be had without waiting (read
    /// already, or waiting in the socket): a burst of frames is then read
    /// with no timer and no wake-up per frame. `None` when the next one has
    /// not come.
    pub fn next_ready(&mut self) -> Option<Incoming> {
        loop {
            let next = self.ws.next().now_or_never()?;
            if let Some(incoming) = Self::incoming(next) {
                return Some(incoming);
            }
        }
    }

    /// What one read gave, or `None` for a frame that does not matter (a
    /// ping, a pong).
    fn incoming(next: Option<Result<Message, tungstenite::Error>>) -> Option<Incoming> {
        Some(match next {
            None => Incoming::Closed(None),
            Some(Ok(Message::Text(text))) => Incoming::Text(text),
            Some(Ok(Message::Binary(_))) => Incoming::Binary,
            Some(Ok(Message::Close(frame))) => Incoming::Closed(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => return None,
            Some(Err(tungstenite::Error::ConnectionClosed)) => Incoming::Closed(None),
            Some(Err(e)) => Incoming::Lost(e.to_string()),
        })
    }

    /// Sends one text frame.
    pub async fn send(&mut self, text: String) -> Result<(), String> {
        self.ws
            .send(Message::text(text))
            .await
            .map_err(|e| e.to_string())
    }

    /// Closes politely: sends a close frame and reads until the server's
    /// close frame (briefly; frames that still come are dropped), then
    /// drops the socket. questd answers the close but may keep the TCP
    /// connection for keep-alive, so waiting for the server to end TCP
    /// would only add its keep-alive time to every close.
    pub async fn close(mut self) {
        if self.ws.close(None).await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while let Some(Ok(message)) = self.ws.next().await {
                if message.is_close() {
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

    #[test]
    fn source_ips_read_ranges_lists_and_single_addresses() {
        let ips = SourceIps::parse("127.0.0.2-127.0.0.4, 127.0.1.1").unwrap();
        assert_eq!(ips.len(), 4);
        let picker = SourcePicker::new(Some(ips));
        let got: Vec<String> = (0..5)
            .filter_map(|_| picker.next())
            .map(|ip| ip.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "127.0.0.2",
                "127.0.0.3",
                "127.0.0.4",
                "127.0.1.1",
                "127.0.0.2"
            ]
        );
        assert_eq!(SourceIps::parse("::1").unwrap().first(), "::1".parse().ok());
        assert_eq!(SourceIps::parse("10.0.0.255-10.0.1.1").unwrap().len(), 3);
        assert_eq!(SourcePicker::new(None).next(), None);
    }

    #[test]
    fn bad_source_ips_are_errors() {
        for bad in [
            "",
            "localhost",
            "127.0.0.9-127.0.0.2",
            "::1-::2",
            "127.0.0.1-",
            "10.0.0.0-10.2.0.0",
        ] {
            assert!(SourceIps::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn targets_are_plain_http() {
        let t = Target::resolve("http://127.0.0.1:18999/", None)
            .await
            .unwrap();
        assert_eq!(t.http_base, "http://127.0.0.1:18999");
        assert_eq!(t.authority, "127.0.0.1:18999");
        assert_eq!(t.addr.port(), 18999);
        let t = Target::resolve("http://127.0.0.1", None).await.unwrap();
        assert_eq!((t.authority.as_str(), t.addr.port()), ("127.0.0.1", 80));
        for bad in [
            "https://127.0.0.1",
            "ws://127.0.0.1:1",
            "127.0.0.1:8080",
            "http://",
        ] {
            assert!(Target::resolve(bad, None).await.is_err(), "{bad}");
        }
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
