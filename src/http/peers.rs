//! This node among the nodes of its database: the secret they share, the
//! liveness probe of a peer, and where a request's session runs
//! ([`Routed`], recorded per request in [`Routing`]). The middleware that
//! hands a request over (`cluster`) acts on what is recorded here.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpMessage, HttpRequest};

use super::auth::same_secret;
use super::errors::overloaded;
use crate::config::Secret;
use crate::error::ApiError;
use crate::ids::SessionId;
use crate::storage::Store;

/// What a request whose session runs on another node is answered while it
/// is handed over; the client sees it only when no node took it over.
pub fn elsewhere() -> ApiError {
    overloaded("the session runs on another node")
}

/// The header with the nodes' shared secret.
pub const KEY_HEADER: &str = "x-questd-cluster-key";
/// The header in which a peer names the client it acts for.
pub const CLIENT_HEADER: &str = "x-questd-client";
/// The header in which a peer says where the client reached it
/// (`http(s)://host[:port]`): the owner builds the answer's links on it,
/// so they are the same whichever node the client asked.
pub const LINKS_HEADER: &str = "x-questd-links";

/// How long a peer may take to answer a request other than a handed-over
/// one (a handed-over one has [`Cluster::handoff_timeout`]).
const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// How much longer than the owner's own longest wait a handed-over
/// request is given, so the owner's answer (a `408` among them) arrives
/// before this node gives up on it.
const HANDOFF_SLACK: Duration = Duration::from_secs(10);
/// How long a liveness check of a peer may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// This node's place among the nodes of its database.
#[derive(Clone)]
pub struct Cluster {
    /// Several nodes may share the database (PostgreSQL).
    shared: bool,
    /// How long a handed-over request may take: the longest an owner
    /// waits before it answers (`owner_wait`), and [`HANDOFF_SLACK`].
    /// Past it the peer counts as gone (a paused or cut-off node), and
    /// the request is refused with a retry; the session moves once its
    /// lease runs out.
    pub(super) handoff_timeout: Duration,
    secret: Secret,
    /// Sends handed-over requests and probes to peers.
    pub(super) http: reqwest::Client,
}

impl Cluster {
    /// Joins the nodes of `store`'s database, reachable at `url`: records
    /// where this node is and reads the secret they share. `owner_wait` is
    /// the longest any route waits for a session before it answers.
    pub async fn join(store: &Store, url: &str, owner_wait: Duration) -> anyhow::Result<Self> {
        let fresh = crate::session::random_token(32);
        let secret = store.cluster_secret(&fresh).await?;
        if store.is_shared() {
            store.announce(url).await?;
        }
        let http = reqwest::Client::builder()
            .timeout(PEER_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            shared: store.is_shared(),
            handoff_timeout: owner_wait + HANDOFF_SLACK,
            secret: Secret::from(secret),
            http,
        })
    }

    /// Whether several nodes may share the database.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Whether `req` was handed over by a peer node.
    pub fn from_peer(&self, req: &HttpRequest) -> bool {
        self.shared
            && req
                .headers()
                .get(KEY_HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|given| same_secret(self.secret.expose(), given))
    }

    /// Where the client of a request a peer handed over reached that
    /// peer (its [`LINKS_HEADER`]), if a peer handed it over and said so.
    pub fn peer_links<'r>(&self, req: &'r HttpRequest) -> Option<&'r str> {
        if !self.from_peer(req) {
            return None;
        }
        req.headers()
            .get(LINKS_HEADER)
            .and_then(|v| v.to_str().ok())
    }

    /// The client a peer handed this request over for, if a peer did.
    pub fn peer_client(&self, req: &HttpRequest) -> Option<IpAddr> {
        if !self.from_peer(req) {
            return None;
        }
        req.headers()
            .get(CLIENT_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    }

    /// The headers that mark a request as handed over by this node for
    /// `client`.
    pub fn peer_headers(&self, client: Option<IpAddr>) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = Vec::with_capacity(2);
        if let Ok(key) = HeaderValue::from_str(self.secret.expose()) {
            headers.push((HeaderName::from_static(KEY_HEADER), key));
        }
        if let Some(ip) = client
            && let Ok(v) = HeaderValue::from_str(&ip.to_string())
        {
            headers.push((HeaderName::from_static(CLIENT_HEADER), v));
        }
        headers
    }

    /// Whether the node `node_id` answers at `url` now.
    pub async fn answers(&self, url: &str, node_id: &str) -> bool {
        let probe = self
            .http
            .get(format!("{url}/healthz"))
            .timeout(PROBE_TIMEOUT)
            .send()
            .await;
        match probe {
            Ok(resp) if resp.status().is_success() => resp
                .json::<serde_json::Value>()
                .await
                .is_ok_and(|v| v["node_id"] == node_id),
            _ => false,
        }
    }
}

/// The node to hand a request over to, and the session it runs there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub url: String,
    pub session_id: SessionId,
}

/// Where a request's session runs: here (with what it answered), or on
/// another node, which the request is handed to ([`Routing::hand_to`]).
/// Each layer between the lookup and the handler passes it on as it is, so
/// the owner is never lost in an error's conversion.
#[derive(Debug)]
pub enum Routed<T> {
    Here(T),
    Owner(Owner),
}

impl<T> Routed<T> {
    /// What runs here, changed by `f`; an owner stays the owner.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Routed<U> {
        match self {
            Self::Here(t) => Routed::Here(f(t)),
            Self::Owner(owner) => Routed::Owner(owner),
        }
    }
}

/// Where a request's session runs, when another node runs it: recorded by
/// the handler that was told so ([`Routed::Owner`]) and read by
/// `cluster::hand_over` after the handler, whatever answer the handler built (a
/// tool call's report, a JSON-RPC error, an error of any shape). One per
/// request, in its extensions; a request outside [`hand_over`] gets a
/// detached one that nothing reads (one node: no other node runs anything).
#[derive(Clone, Default)]
pub struct Routing(Arc<OnceLock<Owner>>);

impl Routing {
    /// The request's routing.
    pub fn of(req: &HttpRequest) -> Self {
        req.extensions().get::<Self>().cloned().unwrap_or_default()
    }

    /// The request goes to `owner`, the node its session runs on.
    pub fn hand_to(&self, owner: Owner) {
        // The first node found wins: the request is handed over once.
        let _ = self.0.set(owner);
    }

    /// What runs here; a session of another node is handed there
    /// ([`Self::hand_to`]) and this answers the error a handler returns
    /// meanwhile (the client never sees it when the request is handed
    /// over).
    pub fn here<T>(&self, routed: Routed<T>) -> Result<T, ApiError> {
        match routed {
            Routed::Here(t) => Ok(t),
            Routed::Owner(owner) => {
                self.hand_to(owner);
                Err(elsewhere())
            }
        }
    }

    /// The node the request goes to, once one was found.
    pub fn owner(&self) -> Option<&Owner> {
        self.0.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(url: &str) -> Owner {
        Owner {
            url: url.into(),
            session_id: SessionId::from("s1"),
        }
    }

    #[test]
    fn an_owner_is_handed_over_once_and_answered_meanwhile() {
        let routing = Routing::default();
        assert_eq!(routing.here(Routed::Here(7)).ok(), Some(7));
        assert!(routing.owner().is_none(), "a session here hands nothing");
        let e = routing
            .here(Routed::<u8>::Owner(owner("http://b:1")))
            .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                crate::error::ErrorCode::Overloaded,
                "the session runs on another node"
            )
        );
        // The first node found wins.
        let _ = routing.here(Routed::<u8>::Owner(owner("http://c:1")));
        assert_eq!(routing.owner(), Some(&owner("http://b:1")));
        // An owner stays the owner through `map`.
        assert!(matches!(
            Routed::<u8>::Owner(owner("http://b:1")).map(|n| n + 1),
            Routed::Owner(o) if o == owner("http://b:1")
        ));
        assert!(matches!(Routed::Here(1).map(|n| n + 1), Routed::Here(2)));
    }
}
