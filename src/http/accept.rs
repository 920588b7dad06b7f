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

use super::admission::{address_key, parse_proxies, release_address};
use crate::config::Settings;

/// Share of the node's connection budget, in percent, past which a new
/// connection gets [`HEAD_WAIT_UNDER_PRESSURE`] to send its request head.
pub const PRESSURE_PERCENT: usize = 50;
/// How long a connection accepted under pressure may take to send its
/// first request head before it is shut.
pub const HEAD_WAIT_UNDER_PRESSURE: Duration = Duration::from_secs(1);
/// Sockets watched for their first head at once: each holds a duplicate
/// descriptor for [`HEAD_WAIT_UNDER_PRESSURE`], kept out of the node's
/// connection budget (`admission::connection_budget`).
pub const MAX_HEAD_WATCHES: usize = 256;

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
        let peer = stream.peer_addr().ok().map(|a| a.ip());
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
}
