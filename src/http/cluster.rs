//! Several nodes on one PostgreSQL database (docs/protocol.md §15): any node
//! serves any session, and the session runs on exactly one of them, its
//! owner. A request for a session another node owns is handed to that node
//! whole (HTTP) or relayed frame by frame (a player's WebSocket,
//! `relay.rs`), so the client sees exactly the owner's answers: its acks,
//! seqs, errors, rate limits and `request_id` de-duplication, and a chat
//! runs once. A spectator's WebSocket is served here from the journal
//! (`crate::session::tail`); its tail reports its spectators to the owner
//! on the one route only peers reach ([`audience_report`]).
//!
//! Nodes show each other a secret kept in the database
//! ([`crate::storage::Store::cluster_secret`]); a request that carries it
//! comes from a peer, which also says who the client is, so limits per
//! address count the client, not the peer. A handed-over request is never
//! handed on again: if ownership moved meanwhile, the client is told to
//! try again.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError, web};

use std::sync::Arc;

use super::body::{MAX_BODY_BYTES, body_bytes, body_within};
use super::errors::{no_route, overloaded};
pub use super::peers::Cluster;
use super::peers::{CLIENT_HEADER, KEY_HEADER, LINKS_HEADER, Owner, Routing};
use super::routes::add;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::ids::{NodeId, SessionId};
use crate::session::tail::AudienceReport;
use crate::session::{RemoteAudience, Running};
use crate::storage::Store;

/// Middleware: a request whose session runs on another node ([`Routing`])
/// is sent to that node as it came, and the client gets that node's
/// answer; what the handler answered here is dropped.
///
/// The body is not read here: the handler reads it (only once it has
/// judged the caller, like every route), and what it reads is kept, up to
/// the largest body any route takes, to be sent on with whatever it left
/// unread.
pub async fn hand_over(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let cluster = &state.cluster;
    // WebSockets relay themselves (ws.rs); a peer's request is answered here.
    if !cluster.is_shared() || req.path().starts_with("/ws/") {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let from_peer = cluster.from_peer(req.request());
    let routing = Routing::default();
    req.extensions_mut().insert(routing.clone());
    let kept = Rc::new(RefCell::new(KeptBody {
        payload: Some(req.take_payload()),
        read: web::BytesMut::new(),
        over: false,
    }));
    req.set_payload(Payload::Stream {
        payload: Box::pin(Recording(Rc::clone(&kept))),
    });
    let res = next.call(req).await?;
    let Some(owner) = routing.owner().cloned() else {
        return Ok(res.map_into_boxed_body());
    };
    let (http_req, _) = res.into_parts();
    if from_peer {
        // Ownership moved while the request travelled: the client retries.
        let e = overloaded("the session is moving between nodes; try again shortly");
        return Ok(ServiceResponse::new(http_req, e.error_response()));
    }
    let body = match KeptBody::whole(&kept).await {
        Ok(body) => body,
        Err(e) => return Ok(ServiceResponse::new(http_req, e.error_response())),
    };
    let answer = forward(&state, &http_req, &owner, body).await;
    Ok(ServiceResponse::new(http_req, answer))
}

/// A request's body as [`hand_over`] keeps it: what the handler read so
/// far, and the payload the rest is still in.
struct KeptBody {
    payload: Option<Payload>,
    read: web::BytesMut,
    /// The handler read past [`MAX_BODY_BYTES`] (and was refused for it).
    over: bool,
}

impl KeptBody {
    /// The whole body: what was read and what was not, within
    /// [`MAX_BODY_BYTES`] (`413` past it).
    async fn whole(kept: &Rc<RefCell<KeptBody>>) -> Result<Bytes, ApiError> {
        let (mut body, rest, over) = {
            let mut kept = kept.borrow_mut();
            (
                std::mem::take(&mut kept.read),
                kept.payload.take(),
                kept.over,
            )
        };
        if let Some(rest) = rest {
            body.extend_from_slice(&body_bytes(rest).await?);
        }
        if over || body.len() > MAX_BODY_BYTES {
            return Err(ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("body is larger than {MAX_BODY_BYTES} bytes"),
            ));
        }
        Ok(body.freeze())
    }
}

/// The payload a handler reads, recording each chunk into a [`KeptBody`].
struct Recording(Rc<RefCell<KeptBody>>);

impl futures_util::Stream for Recording {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let kept = &mut *self.0.borrow_mut();
        let Some(payload) = kept.payload.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(payload).poll_next(cx);
        if let Poll::Ready(Some(Ok(chunk))) = &polled {
            if kept.read.len() + chunk.len() <= MAX_BODY_BYTES {
                kept.read.extend_from_slice(chunk);
            } else {
                kept.over = true;
            }
        }
        polled
    }
}

/// Headers not sent on: they describe this hop, not the request.
const HOP_HEADERS: &[&str] = &[
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    KEY_HEADER,
    CLIENT_HEADER,
    LINKS_HEADER,
];

/// Sends `req` (with `body`) to the owner and answers what it answered.
async fn forward(state: &AppState, req: &HttpRequest, owner: &Owner, body: Bytes) -> HttpResponse {
    let cluster = &state.cluster;
    let path = req
        .uri()
        .path_and_query()
        .map_or(req.path(), |p| p.as_str());
    let Ok(method) = reqwest::Method::from_bytes(req.method().as_str().as_bytes()) else {
        return overloaded("the session runs on another node").error_response();
    };
    let mut out = cluster
        .http
        .request(method, format!("{}{path}", owner.url))
        .timeout(cluster.handoff_timeout)
        .body(body);
    for (name, value) in req.headers() {
        if !HOP_HEADERS.contains(&name.as_str()) {
            out = out.header(name.as_str(), value.as_bytes());
        }
    }
    for (name, value) in cluster.peer_headers(state.admission.client_ip(req)) {
        out = out.header(name.as_str(), value.as_bytes());
    }
    // The links of the answer (an invite's, a joined seat's) point where
    // the client reached this node, not at the owner's own address.
    let links = super::guard::link_base(req, state.admission.from_trusted_proxy(req));
    out = out.header(LINKS_HEADER, links.http);
    // The owner is waited on while its claim holds (a handed-over chat
    // may run a long turn); once it lapses or moves, the node stopped
    // answering (paused, cut off) and the client is told to try again.
    let since = std::time::Instant::now();
    let watch =
        super::owner_watch::until_gone(&state.store, owner.session_id.as_str(), &owner.url, since);
    tokio::select! {
        answer = exchange(out) => answer.unwrap_or_else(|e| {
            tracing::warn!(owner = %owner.url, error = %e, "handing a request to the session's node failed");
            overloaded("the session's node does not answer; try again shortly").error_response()
        }),
        () = watch => {
            tracing::warn!(owner = %owner.url, session_id = %owner.session_id, "the session's node stopped answering a request handed to it");
            overloaded("the session's node stopped answering; try again shortly").error_response()
        }
    }
}

/// Sends a handed-over request and reads the owner's whole answer.
async fn exchange(out: reqwest::RequestBuilder) -> Result<HttpResponse, reqwest::Error> {
    let resp = out.send().await?;
    let status = actix_web::http::StatusCode::from_u16(resp.status().as_u16())
        .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
    let mut answer = HttpResponse::build(status);
    for (name, value) in resp.headers() {
        if !HOP_HEADERS.contains(&name.as_str()) {
            answer.insert_header((name.as_str(), value.as_bytes()));
        }
    }
    Ok(answer.body(resp.bytes().await?))
}

/// How long a report of a tail's spectators to the owner may take.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The path of the route only peers reach: not in the public OpenAPI
/// document (to anyone else it does not exist).
pub const AUDIENCE_ROUTE: &str = "/api/v1/sessions/{id}/audience";

/// The route only peers reach (anyone else gets the answer for a route
/// that does not exist).
pub fn configure(cfg: &mut web::ServiceConfig) {
    add(
        cfg,
        actix_web::http::Method::PUT,
        AUDIENCE_ROUTE,
        audience_reported,
    );
}

/// Largest audience report read: `{"node_id": <64 characters>,
/// "spectators": <a number>}` is about a hundred bytes.
pub const MAX_AUDIENCE_BYTES: usize = 1024;

/// A tail's report, sent by [`audience_report`].
#[derive(serde::Serialize, serde::Deserialize)]
struct AudienceBody {
    node_id: NodeId,
    spectators: usize,
}

/// A peer's tail of a session this node runs reports its spectators: the
/// session counts them in its `presence` frames. A session not running
/// here is not loaded for it (the report is dropped; the next one finds
/// the owner).
///
/// To anyone but a peer the route does not exist: the caller is judged
/// from the head alone, before the path is read or a byte of the body, and
/// gets exactly [`super::errors::no_route`]'s answer. The body is read raw (never
/// decompressed: actix decompresses only for the `Bytes`/`Json`
/// extractors) and bounded by [`MAX_AUDIENCE_BYTES`].
async fn audience_reported(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    if !state.cluster.from_peer(&req) {
        return no_route(req).await;
    }
    let session_id = SessionId::from(req.match_info().get("id").unwrap_or_default());
    let body = body_within(payload, MAX_AUDIENCE_BYTES).await?;
    let report: AudienceBody = serde_json::from_slice(&body)
        .map_err(|_| ApiError::bad_request("the audience report is not {node_id, spectators}"))?;
    if report.node_id.is_empty() || report.node_id.len() > 64 {
        return Err(ApiError::bad_request("node_id must be 1 to 64 characters"));
    }
    let running = state.hub.send(Running { session_id }).await?;
    match running {
        Some(handle) => {
            handle.addr.do_send(RemoteAudience {
                node_id: report.node_id,
                spectators: report.spectators,
            });
            Ok(HttpResponse::NoContent().finish())
        }
        None => Err(ApiError::not_found("the session does not run on this node")),
    }
}

/// How this node's tails tell a session's owner of their spectators: the
/// owner's address is read from the database and the report sent to it as
/// a peer. Answers whether the owner took it; the tail sends a report that
/// was not taken again soon (`session::tail`), and another within
/// [`crate::session::tail::AUDIENCE_REFRESH`] anyway while it has
/// spectators. No live owner (none, or its lease looked lapsed) counts as
/// not taken.
pub fn audience_report(store: Store, cluster: Cluster, node_id: NodeId) -> AudienceReport {
    Arc::new(move |session_id: SessionId, spectators: usize| {
        let (store, cluster, node_id) = (store.clone(), cluster.clone(), node_id.clone());
        Box::pin(async move {
            let owner = match store.owner_address(&session_id).await {
                Ok(Some((_, url))) => url,
                Ok(None) => return false,
                Err(e) => {
                    tracing::debug!(error = %e, "finding a session's owner to report spectators failed");
                    return false;
                }
            };
            let mut request = cluster
                .http
                .put(format!("{owner}/api/v1/sessions/{session_id}/audience"))
                .timeout(REPORT_TIMEOUT)
                .json(&AudienceBody {
                    node_id,
                    spectators,
                });
            for (name, value) in cluster.peer_headers(None) {
                request = request.header(name.as_str(), value.as_bytes());
            }
            match request.send().await.and_then(|r| r.error_for_status()) {
                Ok(_) => true,
                Err(e) => {
                    tracing::debug!(error = %e, %session_id, "reporting spectators to the owner failed");
                    false
                }
            }
        })
    })
}
