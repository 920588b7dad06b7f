//! What a TCP connection gets as it is accepted, before any request is
//! read (`HttpServer::on_connect`, on the worker that accepted it):
//!
//! - a write-stall timeout (`TCP_USER_TIMEOUT`, `QUESTD_WRITE_STALL_SECS`):
//!   the kernel aborts a connection whose sent bytes stay unacknowledged
//!   that long, a peer that keeps a zero window (never reads) included, so
//!   a client that never reads cannot pin what is queued for it. It
//!   matters for WebSockets above all: their actor runs only when the
//!   socket takes bytes, so neither their heartbeat nor the session's
//!   close request reaches a socket that never drains;
//! - a cap on plain HTTP connections per client address
//!   (`QUESTD_MAX_ADDRESS_HTTP_CONNECTIONS`, counted by [`address_key`]):
//!   past it the new socket is shut at once. A connection leaves the count
//!   when it closes or when it becomes a WebSocket ([`upgraded`]), which
//!   the WebSocket caps count instead. The trusted proxies' connections are
//!   theirs, not one client's, and are not capped; nor are the host's own
//!   `127.0.0.1` and `::1`, where a local proxy without
//!   `QUESTD_TRUSTED_PROXIES` or `questd loadtest` connects from;
//! - under pressure (the node's connections past [`PRESSURE_PERCENT`] of
//!   its budget) a second ([`HEAD_WAIT_UNDER_PRESSURE`]) to send a request
//!   head instead of actix-web's fixed 5 s. The socket is reached through a
//!   duplicate of its descriptor held for that second only, so a
//!   descriptor number reused meanwhile is never touched; at most
//!   [`MAX_HEAD_WATCHES`] are held at once.
//!
//! The connection's place in the counts ([`HttpConn`]) rides in its
//! connection data and is given back when actix drops the connection.

use std::any::Any;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::rt::net::TcpStream;
use socket2::SockRef;

use super::admission::{MAX_HEAD_WATCHES, address_key, parse_proxies, release_address};
use crate::config::Settings;

/// Share of the node's connection budget, in percent, past which a new
/// connection gets [`HEAD_WAIT_UNDER_PRESSURE`] to send its request head.
pub const PRESSURE_PERCENT: usize = 50;
/// How long a connection accepted under pressure may take to send its
/// first request head before it is shut.
pub const HEAD_WAIT_UNDER_PRESSURE: Duration = Duration::from_secs(1);

/// Open plain HTTP connections per client address.
type AddressCounts = Mutex<HashMap<IpAddr, usize>>;

/// The node's counts of accepted connections, shared by every worker.
#[derive(Default)]
struct Counts {
    /// Connections open on this node (HTTP and WebSocket alike).
    open: AtomicUsize,
    /// Plain HTTP connections per client address (not yet upgraded); an
    /// address leaves the map with its last connection.
    per_address: AddressCounts,
    /// Head watches running ([`MAX_HEAD_WATCHES`]).
    watches: AtomicUsize,
}

/// The address a connection reached this node at: where links point when
/// a request names no host.
pub struct LocalAddr(pub std::net::SocketAddr);

/// The accept-time rules and the node's counts.
pub struct Accept {
    /// `TCP_USER_TIMEOUT` of every accepted socket; `None` leaves the
    /// kernel's default (about 15 minutes of retransmissions).
    write_stall: Option<Duration>,
    /// Peers whose connections are not capped per address.
    uncapped: Vec<IpAddr>,
    max_per_address: usize,
    /// Open connections past which the node is under pressure.
    pressure_at: usize,
    counts: Arc<Counts>,
}

impl Accept {
    /// `max_connections` is the node's whole connection budget.
    pub fn new(settings: &Settings, max_connections: usize) -> Result<Self, String> {
        let mut uncapped = parse_proxies(settings.trusted_proxies.as_deref())?;
        uncapped.extend([
            IpAddr::from(Ipv4Addr::LOCALHOST),
            IpAddr::from(Ipv6Addr::LOCALHOST),
        ]);
        Ok(Self {
            write_stall: (settings.write_stall_secs > 0)
                .then(|| Duration::from_secs(settings.write_stall_secs)),
            uncapped,
            max_per_address: settings.max_address_http_connections.max(1),
            pressure_at: pressure_at(max_connections),
            counts: Arc::default(),
        })
    }

    /// Runs as a connection is accepted: sets its write-stall timeout,
    /// counts it, shuts it past its address's cap, and under pressure
    /// watches for its first request head.
    pub fn on_connect(&self, io: &dyn Any, data: &mut Extensions) {
        let Some(stream) = io.downcast_ref::<TcpStream>() else {
            return;
        };
        let socket = SockRef::from(stream);
        if let Some(stall) = self.write_stall
            && let Err(e) = socket.set_tcp_user_timeout(Some(stall))
        {
            tracing::debug!(error = %e, "could not set the write-stall timeout");
        }
        let open = self.counts.open.fetch_add(1, Ordering::AcqRel) + 1;
        let head = Arc::new(AtomicBool::new(false));
        let mut conn = HttpConn {
            counts: self.counts.clone(),
            address: Mutex::new(None),
            head: head.clone(),
        };
        // A listener on `[::]` sees IPv4 clients as IPv4-mapped addresses.
        let peer = stream.peer_addr().ok().map(|a| a.ip().to_canonical());
        if let Some(peer) = peer.filter(|p| !self.uncapped.contains(p)) {
            let key = address_key(peer);
            let admitted = admit(&self.counts.per_address, key, self.max_per_address);
            if admitted {
                conn.address = Mutex::new(Some(key));
            } else {
                // Refused before a byte is read: the dispatcher sees the
                // end of the stream and drops the connection.
                let _ = socket.shutdown(Shutdown::Both);
                data.insert(Arc::new(conn));
                return;
            }
        }
        if open > self.pressure_at {
            self.watch_head(&socket, head);
        }
        if let Ok(local) = stream.local_addr() {
            data.insert(LocalAddr(local));
        }
        data.insert(Arc::new(conn));
    }

    /// Shuts `socket` if it has sent no request head within
    /// [`HEAD_WAIT_UNDER_PRESSURE`], through a duplicate descriptor held
    /// for that long only.
    fn watch_head(&self, socket: &SockRef<'_>, head: Arc<AtomicBool>) {
        let counts = self.counts.clone();
        if counts.watches.fetch_add(1, Ordering::AcqRel) >= MAX_HEAD_WATCHES {
            counts.watches.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let Ok(dup) = socket.try_clone() else {
            counts.watches.fetch_sub(1, Ordering::AcqRel);
            return;
        };
        actix_web::rt::spawn(async move {
            actix_web::rt::time::sleep(HEAD_WAIT_UNDER_PRESSURE).await;
            if !head.load(Ordering::Acquire) {
                let _ = dup.shutdown(Shutdown::Both);
            }
            drop(dup);
            counts.watches.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// The open connections past which a node with `budget` is under pressure.
fn pressure_at(budget: usize) -> usize {
    budget.saturating_mul(PRESSURE_PERCENT) / 100
}

/// Counts one more connection of `key` if the address has fewer than
/// `max`: answers whether it was counted.
fn admit(map: &AddressCounts, key: IpAddr, max: usize) -> bool {
    let mut map = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let count = map.entry(key).or_insert(0);
    if *count >= max {
        return false;
    }
    *count += 1;
    true
}

/// One accepted connection's place in the counts; given back when actix
/// drops the connection's data, i.e. when the connection closes.
pub struct HttpConn {
    counts: Arc<Counts>,
    /// The address it is counted under, until it closes or upgrades.
    address: Mutex<Option<IpAddr>>,
    /// Set once a request head came; read by the head watch.
    head: Arc<AtomicBool>,
}

impl HttpConn {
    /// The connection became a WebSocket: it leaves its address's count
    /// of plain HTTP connections.
    fn upgraded(&self) {
        let key = self
            .address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(key) = key {
            release_address(&self.counts.per_address, key);
        }
    }
}

impl Drop for HttpConn {
    fn drop(&mut self) {
        self.upgraded();
        self.counts.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `req`'s connection became a WebSocket (see [`HttpConn`]).
pub fn upgraded(req: &HttpRequest) {
    if let Some(conn) = req.conn_data::<Arc<HttpConn>>() {
        conn.upgraded();
    }
}

/// Middleware: a request head came on this connection, so a head watch
/// leaves it alone.
pub async fn head_seen(
    req: ServiceRequest,
    next: Next<impl actix_web::body::MessageBody>,
) -> Result<ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    if let Some(conn) = req.request().conn_data::<Arc<HttpConn>>() {
        conn.head.store(true, Ordering::Release);
    }
    next.call(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pressure_point_is_a_share_of_the_budget() {
        for (budget, at) in [
            (1000, 500),
            (1, 0),
            (0, 0),
            (3, 1),
            (usize::MAX, usize::MAX / 100),
        ] {
            assert_eq!(pressure_at(budget), at, "budget {budget}");
        }
    }

    #[test]
    fn connections_count_per_address_up_to_the_cap_and_are_given_back() {
        let map = AddressCounts::default();
        let a: IpAddr = "203.0.113.9".parse().expect("ip");
        let b: IpAddr = "203.0.113.10".parse().expect("ip");
        assert!(admit(&map, a, 2));
        assert!(admit(&map, a, 2));
        assert!(!admit(&map, a, 2), "a third from one address");
        assert!(admit(&map, b, 2), "another address");
        release_address(&map, a);
        assert!(admit(&map, a, 2), "room again");
        release_address(&map, a);
        release_address(&map, a);
        release_address(&map, b);
        assert!(map.lock().map(|m| m.is_empty()).unwrap_or(false));
        release_address(&map, a);
        assert!(map.lock().map(|m| m.is_empty()).unwrap_or(false));
    }

    #[test]
    fn a_connection_leaves_its_address_once_upgraded_and_the_node_when_dropped() {
        let counts = Arc::new(Counts::default());
        let key: IpAddr = "2001:db8::".parse().expect("ip");
        let conn = |counts: &Arc<Counts>| {
            counts.open.fetch_add(1, Ordering::AcqRel);
            assert!(admit(&counts.per_address, key, 1));
            HttpConn {
                counts: counts.clone(),
                address: Mutex::new(Some(key)),
                head: Arc::default(),
            }
        };
        let first = conn(&counts);
        assert!(!admit(&counts.per_address, key, 1), "the cap is taken");
        first.upgraded();
        first.upgraded();
        assert_eq!(counts.open.load(Ordering::Acquire), 1, "still open");
        let second = conn(&counts);
        drop(first);
        assert_eq!(counts.open.load(Ordering::Acquire), 1);
        assert!(!admit(&counts.per_address, key, 1), "the second holds it");
        drop(second);
        assert_eq!(counts.open.load(Ordering::Acquire), 0);
        assert!(
            counts
                .per_address
                .lock()
                .map(|m| m.is_empty())
                .unwrap_or(false)
        );
    }

    /// An accept rule set for loopback tests: nothing uncapped.
    fn rules(max_per_address: usize, pressure_at: usize) -> Accept {
        Accept {
            write_stall: Some(Duration::from_secs(7)),
            uncapped: Vec::new(),
            max_per_address,
            pressure_at,
            counts: Arc::default(),
        }
    }

    /// A connected pair: the client's end, and the server's end as actix
    /// hands it to `on_connect`.
    async fn pair(listener: &std::net::TcpListener) -> (TcpStream, TcpStream) {
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("nonblocking");
        (client, TcpStream::from_std(server).expect("tokio stream"))
    }

    /// Whether the server shut the client's connection: it reads the end
    /// of the stream (or a reset) within a generous wait.
    async fn shut(client: &mut TcpStream) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(20), client.read(&mut buf)).await;
        matches!(read, Ok(Ok(0)) | Ok(Err(_)))
    }

    /// Whether the client's connection is still open: nothing (no end of
    /// the stream) to read. Asked after whatever might have shut it is
    /// done, so an end would already be there.
    async fn still_open(client: &mut TcpStream) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 16];
        tokio::time::timeout(Duration::from_millis(200), client.read(&mut buf))
            .await
            .is_err()
    }

    /// Waits for every head watch to end.
    async fn watches_done(accept: &Accept) {
        for _ in 0..400 {
            if accept.counts.watches.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the head watches never ended");
    }

    #[actix_web::test]
    async fn an_accepted_socket_gets_its_timeout_and_its_address_cap() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let accept = rules(1, usize::MAX);
        let (mut first_client, first) = pair(&listener).await;
        let mut first_data = Extensions::new();
        accept.on_connect(&first, &mut first_data);
        let stall = SockRef::from(&first).tcp_user_timeout().expect("read");
        assert_eq!(stall, Some(Duration::from_secs(7)));
        assert_eq!(accept.counts.open.load(Ordering::Acquire), 1);

        // The second from the address is shut at once, but counted open
        // until actix drops it.
        let (mut second_client, second) = pair(&listener).await;
        let mut second_data = Extensions::new();
        accept.on_connect(&second, &mut second_data);
        assert!(shut(&mut second_client).await);
        assert_eq!(accept.counts.open.load(Ordering::Acquire), 2);
        drop(second_data);
        assert_eq!(accept.counts.open.load(Ordering::Acquire), 1);

        // Once the first upgrades, the address has room again.
        let conn = first_data.get::<Arc<HttpConn>>().expect("counted");
        conn.upgraded();
        let (mut third_client, third) = pair(&listener).await;
        let mut third_data = Extensions::new();
        accept.on_connect(&third, &mut third_data);
        drop((third_data, first_data));
        assert_eq!(accept.counts.open.load(Ordering::Acquire), 0);
        // Neither of those was shut.
        assert!(still_open(&mut first_client).await);
        assert!(still_open(&mut third_client).await);
        drop((first, third));
    }

    #[actix_web::test]
    async fn under_pressure_a_socket_without_a_request_head_is_shut() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        // Under pressure from the first connection on.
        let accept = rules(usize::MAX, 0);
        let (mut idle_client, idle) = pair(&listener).await;
        let mut idle_data = Extensions::new();
        accept.on_connect(&idle, &mut idle_data);
        let (mut busy_client, busy) = pair(&listener).await;
        let mut busy_data = Extensions::new();
        accept.on_connect(&busy, &mut busy_data);
        // A head came on the busy one (what `head_seen` marks).
        let conn = busy_data.get::<Arc<HttpConn>>().expect("counted");
        conn.head.store(true, Ordering::Release);

        assert!(shut(&mut idle_client).await, "the idle one is shut");
        watches_done(&accept).await;
        assert!(still_open(&mut busy_client).await, "the busy one is open");
        drop((idle, busy, idle_data, busy_data));
    }
}
