//! Admission: who the client is (its address, through trusted proxies) and
//! whether the node takes one more of what it asks for: a session created
//! without a key (per-address rates of sessions and of campaign bytes), a
//! session created with a key (per-tenant rate), a WebSocket (per node, per
//! session, per address), an anonymous model call (per-address rate).
//!
//! Every map here is bounded: the per-address connection counts hold only
//! addresses with an open connection, and the rate limiters forget idle
//! addresses and refuse new ones when full.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::HttpRequest;
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::rate;

/// Addresses a per-address rate limiter remembers at most; past it, idle
/// ones are forgotten, and if that is not enough new addresses are refused.
pub const MAX_LIMITER_ADDRESSES: usize = 100_000;
/// Connections kept free for plain HTTP requests (the API, the page, the
/// health check) when WebSockets fill the node.
pub const HTTP_HEADROOM: usize = 64;
/// Open files kept for the database (pool, writer, WAL files) and logs
/// when the connection cap is taken from the open-file limit.
pub const STORE_FD_RESERVE: usize = 256;
/// Open files kept for model calls (each holds a connection while it runs).
pub const MODEL_FD_RESERVE: usize = crate::llm::openai::MAX_CONCURRENT_CALLS;
/// Sockets `accept` watches for their first request head at once under
/// pressure: each holds a duplicate descriptor for a second, so they are
/// kept out of the connection budget ([`connection_budget`]).
pub const MAX_HEAD_WATCHES: usize = 256;
/// Anonymous `/api/chat` calls per minute from one address (with bursts of
/// [`ANON_MODEL_BURST`]), when the model is the offline game master.
pub const ANON_MODEL_PER_MINUTE: u32 = 60;
pub const ANON_MODEL_BURST: u32 = 10;

/// Open WebSockets per client address.
type AddressCounts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// The node's admission rules and counters, shared by every HTTP worker.
pub struct Admission {
    trusted_proxies: Vec<IpAddr>,
    create: DefaultKeyedRateLimiter<IpAddr>,
    /// Joins by invite per address (the same rate as creation).
    join: DefaultKeyedRateLimiter<IpAddr>,
    /// KiB of request body per address for sessions created without a key.
    create_bytes: DefaultKeyedRateLimiter<IpAddr>,
    /// Sessions created with a key, per tenant.
    key_create: DefaultKeyedRateLimiter<String>,
    anon_model: DefaultKeyedRateLimiter<IpAddr>,
    /// WebSockets open on this node, and the most it takes.
    websockets: Arc<AtomicUsize>,
    max_websockets: usize,
    /// Open WebSockets per client address; an address leaves the map when
    /// its last connection closes.
    per_address: AddressCounts,
    max_per_address: usize,
    max_per_session: usize,
    /// The other nodes of the database, whose handed-over requests name
    /// their client.
    cluster: Option<super::peers::Cluster>,
    /// What joining WebSockets are handed, per address and per node.
    joins: Arc<JoinBudget>,
}

/// Parses `QUESTD_TRUSTED_PROXIES`.
pub(super) fn parse_proxies(list: Option<&str>) -> Result<Vec<IpAddr>, String> {
    list.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| format!("QUESTD_TRUSTED_PROXIES: {s:?} is not an IP address"))
        })
        .collect()
}

impl Admission {
    /// `max_connections` is the node's whole connection budget (already
    /// taken from the open-file limit when not set).
    pub fn new(settings: &Settings, max_connections: usize) -> Result<Self, String> {
        let sessions = rate::per_minute(settings.create_per_minute, settings.create_burst);
        let bytes = rate::per_minute(settings.create_kib_per_minute, settings.create_kib_burst);
        let keys = rate::per_minute(settings.key_create_per_minute, settings.key_create_burst);
        Ok(Self {
            trusted_proxies: parse_proxies(settings.trusted_proxies.as_deref())?,
            create: rate::keyed(sessions),
            join: rate::keyed(sessions),
            create_bytes: rate::keyed(bytes),
            key_create: rate::keyed(keys),
            anon_model: rate::keyed(rate::per_minute(ANON_MODEL_PER_MINUTE, ANON_MODEL_BURST)),
            websockets: Arc::default(),
            max_websockets: max_connections.saturating_sub(HTTP_HEADROOM).max(1),
            per_address: Arc::default(),
            max_per_address: settings.max_address_connections.max(1),
            max_per_session: settings.max_session_connections.max(1),
            cluster: None,
            joins: Arc::new(JoinBudget::new(
                settings.join_mb_per_address,
                settings.join_mb_per_node,
            )),
        })
    }

    /// The client's address: the peer's, or, when the peer is a trusted
    /// proxy, the last address of `X-Forwarded-For` (the one that proxy
    /// saw; earlier entries are the client's own word).
    pub fn client_ip(&self, req: &HttpRequest) -> Option<IpAddr> {
        if let Some(client) = self.cluster.as_ref().and_then(|c| c.peer_client(req)) {
            return Some(client);
        }
        let peer = req.peer_addr()?.ip();
        if !self.trusted_proxies.contains(&peer) {
            return Some(peer);
        }
        let forwarded = req
            .headers()
            .get_all("X-Forwarded-For")
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .last();
        Some(forwarded.and_then(|s| s.parse().ok()).unwrap_or(peer))
    }

    /// Whether `req` comes straight from a proxy of
    /// `QUESTD_TRUSTED_PROXIES`, whose forwarding headers may be believed.
    pub fn from_trusted_proxy(&self, req: &HttpRequest) -> bool {
        req.peer_addr()
            .is_some_and(|peer| self.trusted_proxies.contains(&peer.ip()))
    }

    /// The key the per-address limits count `req`'s client under: its
    /// address ([`Self::client_ip`]) through [`address_key`].
    pub fn client_key(&self, req: &HttpRequest) -> Option<IpAddr> {
        self.client_ip(req).map(address_key)
    }

    /// Trusts the client named by requests the nodes of `cluster` hand
    /// over (they carry the nodes' secret).
    pub fn with_cluster(mut self, cluster: super::peers::Cluster) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// One more session created without a key from this address: `429`
    /// with `Retry-After` past `QUESTD_CREATE_PER_MINUTE`/`_BURST`.
    pub fn check_create(&self, req: &HttpRequest) -> Result<(), ApiError> {
        check_keyed(
            &self.create,
            &or_unknown(self.client_key(req)),
            1,
            "too many sessions created from this address",
        )
    }

    /// One more join by invite from this address: `429` with `Retry-After`
    /// past `QUESTD_CREATE_PER_MINUTE`/`_BURST` (its own count, apart from
    /// creations).
    pub fn check_join(&self, req: &HttpRequest) -> Result<(), ApiError> {
        check_keyed(
            &self.join,
            &or_unknown(self.client_key(req)),
            1,
            "too many joins from this address",
        )
    }

    /// A body of `bytes` (its inline campaign) to create a session without
    /// a key from this address: `429` with `Retry-After` past
    /// `QUESTD_CREATE_KIB_PER_MINUTE`/`_BURST`, `413` for a body larger
    /// than the whole burst.
    pub fn check_create_bytes(&self, req: &HttpRequest, bytes: usize) -> Result<(), ApiError> {
        check_keyed(
            &self.create_bytes,
            &or_unknown(self.client_key(req)),
            kib(bytes),
            "too many campaign bytes sent from this address",
        )
    }

    /// One more session created with a key of `tenant`: `429` with
    /// `Retry-After` past `QUESTD_KEY_CREATE_PER_MINUTE`/`_BURST`.
    pub fn check_key_create(&self, tenant: &str) -> Result<(), ApiError> {
        check_keyed(
            &self.key_create,
            &tenant.to_owned(),
            1,
            "too many sessions created for this tenant",
        )
    }

    /// The budget of what joining WebSockets are handed, shared with each
    /// connection (which learns what it is handed after the upgrade).
    pub fn joins(&self) -> Arc<JoinBudget> {
        self.joins.clone()
    }

    /// One more anonymous model call from this address.
    pub fn check_anonymous_model(&self, req: &HttpRequest) -> Result<(), ApiError> {
        check_keyed(
            &self.anon_model,
            &or_unknown(self.client_key(req)),
            1,
            "too many model calls from this address",
        )
    }

    /// Takes a WebSocket slot for a client of a session whose open
    /// connections `session` counts; the slot is given back when dropped.
    /// `503 OVERLOADED` when the node is full, `429` when the session or the
    /// address has its most.
    pub fn admit_websocket(
        &self,
        req: &HttpRequest,
        session: &Arc<AtomicUsize>,
    ) -> Result<ConnSlot, ApiError> {
        let ip = self.client_key(req);
        let mut slot = ConnSlot {
            node: self.websockets.clone(),
            session: session.clone(),
            address: None,
        };
        // Each counter is taken before the next is checked; dropping the
        // slot on a refusal gives back exactly what was taken.
        if slot.node.fetch_add(1, Ordering::AcqRel) >= self.max_websockets {
            slot.session.fetch_add(1, Ordering::AcqRel);
            return Err(full(
                ErrorCode::Overloaded,
                "this server holds all the connections it can; try again soon",
            ));
        }
        if slot.session.fetch_add(1, Ordering::AcqRel) >= self.max_per_session {
            return Err(full(
                ErrorCode::RateLimited,
                format!(
                    "this session has {} connections, the most it may have",
                    self.max_per_session
                ),
            ));
        }
        if let Some(ip) = ip {
            let mut map = self
                .per_address
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = map.entry(ip).or_insert(0);
            *count += 1;
            slot.address = Some((self.per_address.clone(), ip));
            if *count > self.max_per_address {
                return Err(full(
                    ErrorCode::RateLimited,
                    format!(
                        "this address has {} connections open, the most it may have",
                        self.max_per_address
                    ),
                ));
            }
        }
        Ok(slot)
    }

    /// WebSockets open on this node now.
    pub fn websockets(&self) -> usize {
        self.websockets.load(Ordering::Acquire)
    }
}

/// What the per-address limits count a client address as: an IPv4
/// address (an IPv4-mapped IPv6 one included) alone, an IPv6 address by
/// its /64 prefix, the block one subscriber is usually given, so the
/// 2^64 addresses of one network are one client, not 2^64.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(bits))
            }
        },
    }
}

/// A refusal for lack of room: retry after a second.
fn full(code: ErrorCode, message: impl Into<String>) -> ApiError {
    let mut e = ApiError::new(code, message);
    e.retry_after_s = Some(1);
    e
}

/// The key a request without a peer address (not over TCP) shares.
fn or_unknown(ip: Option<IpAddr>) -> IpAddr {
    ip.unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// `bytes` in whole KiB, rounded up, at least 1 (a built-in campaign's
/// small body costs one).
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024))
        .unwrap_or(u32::MAX)
        .max(1)
}

/// One check of `cells` from a keyed limiter (per address or per tenant),
/// keeping its map bounded.
fn check_keyed<K: Clone + Hash + Eq>(
    limiter: &DefaultKeyedRateLimiter<K>,
    key: &K,
    cells: u32,
    what: &str,
) -> Result<(), ApiError> {
    if limiter.len() >= MAX_LIMITER_ADDRESSES {
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }
    let known = limiter.len() < MAX_LIMITER_ADDRESSES;
    let cells = rate::at_least_one(cells);
    let Ok(checked) = limiter.check_key_n(key, cells) else {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            // Only a check of more than one cell (campaign bytes) can ask
            // more than a whole burst.
            format!("a body of {cells} KiB is more than one address may send at once"),
        ));
    };
    match checked {
        Ok(()) if known => Ok(()),
        Ok(()) => Err(full(
            ErrorCode::RateLimited,
            "too many clients at once; try again soon",
        )),
        Err(not_until) => {
            let wait = rate::wait(&not_until);
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                format!("{what}; try again in {} ms", wait.as_millis().max(1)),
            );
            e.retry_after_s = Some(wait.as_secs_f64().ceil().max(1.0) as u64);
            Err(e)
        }
    }
}

/// The window over which the join budgets refill: the default write stall
/// (`QUESTD_WRITE_STALL_SECS`), the longest a socket that never reads
/// holds what it was handed.
pub const JOIN_WINDOW: std::time::Duration = std::time::Duration::from_secs(20);

/// What joining WebSockets are handed at once (`welcome` and backlog, at
/// most 4 MiB each), counted in KiB per client address and per node, each
/// refilling over [`JOIN_WINDOW`]. A socket that never reads pins what it
/// was handed until the kernel aborts it (the write stall), so sockets
/// that resume large stories and never read hold at most about two
/// budgets' worth (what a window hands out plus what it refills during the
/// stall), not 4 MiB times the connection cap.
pub struct JoinBudget {
    per_address: DefaultKeyedRateLimiter<IpAddr>,
    node: DefaultDirectRateLimiter,
}

impl JoinBudget {
    /// Budgets of `per_address` and `per_node` MiB per [`JOIN_WINDOW`].
    pub fn new(per_address_mb: u32, per_node_mb: u32) -> Self {
        let quota = |mb: u32| {
            let kib = rate::at_least_one(mb.saturating_mul(1024));
            Quota::with_period(JOIN_WINDOW / kib.get())
                .unwrap_or_else(|| Quota::per_second(kib))
                .allow_burst(kib)
        };
        Self {
            per_address: rate::keyed(quota(per_address_mb)),
            node: rate::direct(quota(per_node_mb)),
        }
    }

    /// Takes `bytes` handed to a connection of `client` from both budgets;
    /// `Err` says which is spent. A join larger than a whole budget passes
    /// (it could never fit; a session's own snapshot is bounded elsewhere).
    pub fn take(&self, client: Option<IpAddr>, bytes: usize) -> Result<(), &'static str> {
        let cells = rate::at_least_one(kib(bytes));
        if self.per_address.len() >= MAX_LIMITER_ADDRESSES {
            self.per_address.retain_recent();
            self.per_address.shrink_to_fit();
        }
        if let Ok(Err(_)) = self.per_address.check_key_n(&or_unknown(client), cells) {
            return Err("this address is being sent too much at once");
        }
        if let Ok(Err(_)) = self.node.check_n(cells) {
            return Err("the server is sending too much at once");
        }
        Ok(())
    }
}

/// A WebSocket's place on the node; dropping it frees the place.
pub struct ConnSlot {
    node: Arc<AtomicUsize>,
    session: Arc<AtomicUsize>,
    address: Option<(AddressCounts, IpAddr)>,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.node.fetch_sub(1, Ordering::AcqRel);
        self.session.fetch_sub(1, Ordering::AcqRel);
        if let Some((map, ip)) = &self.address {
            release_address(map, *ip);
        }
    }
}

/// Gives back one connection of `ip` in a per-address count; the address
/// leaves the map with its last connection, so the map holds only
/// addresses with connections open.
pub(super) fn release_address(map: &Mutex<HashMap<IpAddr, usize>>, ip: IpAddr) {
    let mut map = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(count) = map.get_mut(&ip) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            map.remove(&ip);
        }
    }
}

/// The node's connection budget: `QUESTD_MAX_CONNECTIONS`, or the open-file
/// limit (raised to its hard limit first) less reserves for the store,
/// model calls and head watches, so a flood of connections never leaves
/// the journal without a file.
pub fn connection_budget(configured: Option<usize>) -> usize {
    let open_files = raise_open_file_limit();
    // Model calls each hold a connection, and head watches under pressure
    // each a duplicate descriptor.
    let from_files = open_files
        .saturating_sub(STORE_FD_RESERVE + MODEL_FD_RESERVE + MAX_HEAD_WATCHES)
        .max(HTTP_HEADROOM + 1);
    match configured {
        Some(n) => n.clamp(1, from_files),
        None => from_files,
    }
}

/// Raises the soft open-file limit to the hard one; answers the limit now
/// in force (a generous guess where the platform has none).
fn raise_open_file_limit() -> usize {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => usize::try_from(n).unwrap_or(usize::MAX),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the open-file limit");
            1024
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn admission(adjust: impl FnOnce(&mut Settings)) -> Admission {
        let mut s = Settings::for_tests("sqlite://unused.db");
        adjust(&mut s);
        let Ok(a) = Admission::new(&s, 1000) else {
            panic!("admission builds");
        };
        a
    }

    #[test]
    fn websocket_slots_count_per_node_session_and_address_and_give_back_on_drop() {
        let a = admission(|s| {
            s.max_address_connections = 2;
            s.max_session_connections = 3;
        });
        let req = TestRequest::default()
            .peer_addr("10.1.1.1:5000".parse().expect("addr"))
            .to_http_request();
        let other = TestRequest::default()
            .peer_addr("10.1.1.2:5000".parse().expect("addr"))
            .to_http_request();
        let session = Arc::new(AtomicUsize::new(0));
        let one = a.admit_websocket(&req, &session);
        let two = a.admit_websocket(&req, &session);
        assert!(one.is_ok() && two.is_ok());
        let code = a.admit_websocket(&req, &session).err().map(|e| e.code);
        assert_eq!(code, Some(ErrorCode::RateLimited), "third from one address");
        let three = a.admit_websocket(&other, &session);
        assert!(three.is_ok());
        let code = a.admit_websocket(&other, &session).err().map(|e| e.code);
        assert_eq!(code, Some(ErrorCode::RateLimited), "fourth in one session");
        assert_eq!((a.websockets(), session.load(Ordering::Acquire)), (3, 3));
        drop((one, two, three));
        assert_eq!((a.websockets(), session.load(Ordering::Acquire)), (0, 0));
        assert!(a.per_address.lock().map(|m| m.is_empty()).unwrap_or(false));
    }

    #[test]
    fn a_full_node_answers_overloaded() {
        let a = admission(|_| {});
        let a = Admission {
            max_websockets: 1,
            ..a
        };
        let req = TestRequest::default().to_http_request();
        let session = Arc::new(AtomicUsize::new(0));
        let kept = a.admit_websocket(&req, &session);
        assert!(kept.is_ok());
        let code = a.admit_websocket(&req, &session).err().map(|e| e.code);
        assert_eq!(code, Some(ErrorCode::Overloaded));
        assert_eq!(a.websockets(), 1);
    }

    #[test]
    fn joins_are_budgeted_per_address_and_per_node() {
        let budget = JoinBudget::new(1, 2);
        let (a, b, c) = (
            Some(IpAddr::from([10, 0, 0, 1])),
            Some(IpAddr::from([10, 0, 0, 2])),
            Some(IpAddr::from([10, 0, 0, 3])),
        );
        // One address: 1 MiB at once, then it must wait.
        assert!(budget.take(a, 600 * 1024).is_ok());
        assert!(budget.take(a, 400 * 1024).is_ok());
        assert!(budget.take(a, 100 * 1024).unwrap_err().contains("address"));
        // Another address has its own, until the node's 2 MiB are spent.
        assert!(budget.take(b, 1000 * 1024).is_ok());
        assert!(budget.take(c, 100 * 1024).unwrap_err().contains("server"));
        // A join larger than any budget could never fit: it passes.
        assert!(budget.take(c, 8 * 1024 * 1024).is_ok());
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_prefix() {
        let key = |s: &str| address_key(s.parse().unwrap()).to_string();
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::");
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
        assert_eq!(key("203.0.113.9"), "203.0.113.9");
        assert_eq!(key("::ffff:203.0.113.9"), "203.0.113.9");
    }

    #[test]
    fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
        let a = admission(|s| s.trusted_proxies = Some("127.0.0.1".into()));
        let via = |peer: &str| {
            let req = TestRequest::default()
                .peer_addr(peer.parse().expect("addr"))
                .insert_header(("X-Forwarded-For", "6.6.6.6, 203.0.113.9"))
                .to_http_request();
            a.client_ip(&req).map(|ip| ip.to_string())
        };
        assert_eq!(via("127.0.0.1:1").as_deref(), Some("203.0.113.9"));
        assert_eq!(via("10.0.0.1:1").as_deref(), Some("10.0.0.1"));
        assert!(parse_proxies(Some("127.0.0.1, nope")).is_err());
    }

    #[test]
    fn campaign_bytes_are_limited_per_address_and_keyed_creation_per_tenant() {
        let a = admission(|s| {
            s.create_kib_per_minute = 1;
            s.create_kib_burst = 100;
            s.key_create_per_minute = 1;
            s.key_create_burst = 2;
        });
        let from = |peer: &str| {
            TestRequest::default()
                .peer_addr(peer.parse().expect("addr"))
                .to_http_request()
        };
        let code = |r: Result<(), ApiError>| r.err().map(|e| e.code);
        assert_eq!(
            code(a.check_create_bytes(&from("10.0.0.1:1"), 60 * 1024)),
            None
        );
        let e = a.check_create_bytes(&from("10.0.0.1:2"), 60 * 1024).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(ErrorCode::RateLimited));
        assert!(e.and_then(|e| e.retry_after_s).is_some_and(|s| s >= 1));
        // A built-in campaign's small body costs one KiB: it still fits.
        assert_eq!(code(a.check_create_bytes(&from("10.0.0.1:3"), 40)), None);
        assert_eq!(
            code(a.check_create_bytes(&from("10.0.0.2:1"), 60 * 1024)),
            None
        );
        assert_eq!(
            code(a.check_create_bytes(&from("10.0.0.3:1"), 101 * 1024)),
            Some(ErrorCode::PayloadTooLarge),
            "more than the whole burst"
        );
        assert_eq!(code(a.check_key_create("acme")), None);
        assert_eq!(code(a.check_key_create("acme")), None);
        assert_eq!(
            code(a.check_key_create("acme")),
            Some(ErrorCode::RateLimited)
        );
        assert_eq!(code(a.check_key_create("zeta")), None, "another tenant");
        assert_eq!((kib(0), kib(1), kib(1024), kib(1025)), (1, 1, 1, 2));
    }

    #[test]
    fn creation_is_limited_per_address() {
        let a = admission(|s| {
            s.create_per_minute = 1;
            s.create_burst = 2;
        });
        let from = |peer: &str| {
            TestRequest::default()
                .peer_addr(peer.parse().expect("addr"))
                .to_http_request()
        };
        assert!(a.check_create(&from("10.0.0.1:1")).is_ok());
        assert!(a.check_create(&from("10.0.0.1:2")).is_ok());
        let e = a.check_create(&from("10.0.0.1:3")).err();
        assert_eq!(e.as_ref().map(|e| e.code), Some(ErrorCode::RateLimited));
        assert!(e.and_then(|e| e.retry_after_s).is_some_and(|s| s >= 1));
        assert!(
            a.check_create(&from("10.0.0.2:1")).is_ok(),
            "another address"
        );
    }
}
