//! A WebSocket whose session runs on another node of the database: this
//! node opens the same WebSocket on the owner (as a peer, naming the
//! client) and relays text frames both ways, unchanged. The client sees the
//! owner's welcome, acks, story frames, errors and close codes, so it
//! cannot tell which node it reached. When the owner goes away the client
//! is closed with 1012 and reconnects, to any node, with `last_seq`; so is
//! it when the owner stops answering and its claim lapses (a paused or
//! cut-off node, `owner_watch.rs`), rather than left waiting on a socket
//! that never errs.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use actix_web::http::header::HeaderName;
use actix_web::{HttpRequest, HttpResponse};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

use super::admission::ConnSlot;
use super::auth::TENANT_HEADER;
use super::errors::overloaded;
use super::frame_rate::FrameRate;
use super::owner_watch::{self, Claim};
use super::socket::{CLIENT_TIMEOUT, HEARTBEAT, MAX_FRAME_BYTES, dropped_answer};
use super::state::AppState;
use super::websocket::{Socket, WsActor};
use super::wsframe::{Incoming, ProtocolError, close, op};
use crate::error::ApiError;
use crate::ids::SessionId;
use crate::session::{CLOSE_OVERFLOW, Outbox, RESTARTING};
use crate::storage::Store;

/// Why a relayed client is closed when the session's own node drains
/// (that node says "this node is restarting", which this one is not).
const OWNER_RESTARTING: &str = "the session's node is restarting; reconnect";
/// Close code when the owner node went away: service restart, reconnect.
const CLOSE_OWNER_GONE: u16 = 1012;

/// How long opening the WebSocket on the owner may take.
const OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Frames from the owner larger than this end the relay (the owner's own
/// frames are far smaller; this only bounds memory).
const MAX_UPSTREAM_FRAME: usize = 64 * 1024 * 1024;

/// Opens the client's WebSocket on the owner at `owner_url` and relays it.
/// An owner that refuses the upgrade (a bad token, an unknown session, a
/// full node) is answered to the client as it answered.
pub async fn relay(
    req: &HttpRequest,
    state: &AppState,
    owner_url: &str,
    slot: ConnSlot,
) -> Result<HttpResponse, ApiError> {
    let path = req
        .uri()
        .path_and_query()
        .map_or(req.path(), |p| p.as_str());
    let Some(authority) = owner_url.strip_prefix("http://") else {
        tracing::error!(owner = %owner_url, "a node's URL must be http:// to relay WebSockets to it");
        return Err(overloaded(
            "the session runs on a node this one cannot reach",
        ));
    };
    let gone = || overloaded("the session's node does not answer; try again shortly");
    let mut request = format!("ws://{authority}{path}")
        .into_client_request()
        .map_err(|_| gone())?;
    let mut headers = state.cluster.peer_headers(state.admission.client_ip(req));
    // The owner judges the client's `X-Tenant-ID` once the token opened
    // the session, as this node would have (ws.rs).
    if let Some(tenant) = req.headers().get(TENANT_HEADER) {
        headers.push((HeaderName::from_static(TENANT_HEADER), tenant.clone()));
    }
    // The owner runs the turns, so it makes their spans, children of the
    // client's trace (docs/protocol.md §12).
    if let Some(parent) = req.headers().get(super::service::TRACEPARENT) {
        headers.push((
            HeaderName::from_static(super::service::TRACEPARENT),
            parent.clone(),
        ));
    }
    for (name, value) in headers {
        let name = tungstenite::http::HeaderName::from_bytes(name.as_str().as_bytes());
        let value = tungstenite::http::HeaderValue::from_bytes(value.as_bytes());
        if let (Ok(name), Ok(value)) = (name, value) {
            request.headers_mut().insert(name, value);
        }
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_UPSTREAM_FRAME))
        .max_frame_size(Some(MAX_UPSTREAM_FRAME));
    // A node cut off from this one may accept the connection and answer
    // nothing: the handshake is bounded, as every wait on the owner is.
    let opened = tokio::time::timeout(OPEN_TIMEOUT, async {
        let tcp = tokio::net::TcpStream::connect(authority).await?;
        let _ = tcp.set_nodelay(true);
        tokio_tungstenite::client_async_with_config(request, tcp, Some(config)).await
    })
    .await
    .map_err(|_| gone())?;
    let upstream = match opened {
        Ok((upstream, _)) => upstream,
        Err(tungstenite::Error::Http(refused)) => {
            let status = actix_web::http::StatusCode::from_u16(refused.status().as_u16())
                .unwrap_or(actix_web::http::StatusCode::SERVICE_UNAVAILABLE);
            let body = refused.body().clone().unwrap_or_default();
            return Ok(HttpResponse::build(status)
                .content_type("application/json")
                .body(body));
        }
        Err(_) => return Err(gone()),
    };
    let (mut sink, from_owner) = upstream.split();
    let (to_owner, mut outbox) = mpsc::unbounded_channel::<Message>();
    actix::spawn(async move {
        while let Some(message) = outbox.recv().await {
            let closing = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || closing {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let rate = FrameRate::new(state.ws.frames_per_second, state.ws.frame_burst);
    let owner = Owner {
        store: state.store.clone(),
        session_id: SessionId::from(req.match_info().get("id").unwrap_or_default()),
        url: owner_url.to_owned(),
        heard: Instant::now(),
        looking: false,
    };
    let limits = state.ws;
    super::upgrade::accept(req, move |up| {
        Relay::create(move |ctx| {
            let (socket, messages, outbox) = Socket::new(up, MAX_FRAME_BYTES, limits.queue_bytes);
            ctx.add_stream(messages);
            Relay {
                _slot: slot,
                socket,
                queue: limits.queue,
                outbox,
                to_owner,
                from_owner: Some(from_owner),
                last_heard: Instant::now(),
                rate,
                owner,
            }
        });
    })
}

type FromOwner =
    futures_util::stream::SplitStream<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>>;

/// One relayed WebSocket: the client's side is this actor's context; the
/// owner's side is a stream in, and a queue out to a writer task.
struct Relay {
    /// This connection's place in the node's and address's counts.
    _slot: ConnSlot,
    socket: Socket,
    /// What may wait for the client, in frames and (counted in `outbox`
    /// until its socket takes them) in bytes, as for a connection served
    /// here: past either the client is closed with 1013 and resumes.
    queue: usize,
    outbox: Arc<Outbox>,
    to_owner: mpsc::UnboundedSender<Message>,
    /// Taken when the actor starts.
    from_owner: Option<FromOwner>,
    last_heard: Instant,
    /// How many frames the client may send: held here too, since pings
    /// are answered here and whatever passes is queued for the owner.
    rate: FrameRate,
    owner: Owner,
}

/// The owner this relay waits on, and when it was last heard from.
struct Owner {
    store: Store,
    session_id: SessionId,
    /// The owner's node, as the claim names it.
    url: String,
    /// The last frame (a pong included) from the owner.
    heard: Instant,
    /// A look at the owner's claim is on its way.
    looking: bool,
}

impl WsActor for Relay {
    fn socket(&mut self) -> &mut Socket {
        &mut self.socket
    }
}

impl Actor for Relay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(from_owner) = self.from_owner.take() {
            ctx.add_stream(from_owner);
        }
        ctx.run_interval(HEARTBEAT, |act, ctx| {
            if act.last_heard.elapsed() > CLIENT_TIMEOUT {
                act.close_owner();
                act.socket.close(ctx, close::AWAY, "no answer to ping");
            } else {
                act.socket.ping(ctx);
            }
        });
        ctx.run_interval(owner_watch::PING_EVERY, Self::watch_owner);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.close_owner();
    }
}

impl Relay {
    fn close_owner(&self) {
        let _ = self.to_owner.send(Message::Close(None));
    }

    /// Pings an owner that has been silent a while; once it has said
    /// nothing for [`owner_watch::QUIET`], reads its claim, and closes the
    /// client for a reconnect when the owner lost it.
    fn watch_owner(&mut self, ctx: &mut Context<Self>) {
        let quiet = self.owner.heard.elapsed();
        if quiet >= owner_watch::PING_AFTER {
            let _ = self.to_owner.send(Message::Ping(Default::default()));
        }
        if quiet < owner_watch::QUIET || self.owner.looking {
            return;
        }
        self.owner.looking = true;
        let (store, id, url) = (
            self.owner.store.clone(),
            self.owner.session_id.clone(),
            self.owner.url.clone(),
        );
        let look = async move { owner_watch::look(&store, &id, &url).await };
        ctx.spawn(
            actix::fut::wrap_future::<_, Self>(look).map(|claim: Claim, act, ctx| {
                act.owner.looking = false;
                let quiet = act.owner.heard.elapsed();
                let lease = act.owner.store.node().lease;
                if quiet >= owner_watch::QUIET && owner_watch::gone(claim, quiet, lease, true) {
                    tracing::warn!(session_id = %act.owner.session_id, "the session's node stopped answering; closing its relayed connection for a reconnect");
                    act.close_owner();
                    act.owner_gone(ctx);
                }
            }),
        );
    }

    fn owner_gone(&mut self, ctx: &mut Context<Self>) {
        self.socket.close(
            ctx,
            CLOSE_OWNER_GONE,
            "the session's node went away; reconnect",
        );
    }
}

/// The client's frames, sent on to the owner.
impl StreamHandler<Result<Incoming, ProtocolError>> for Relay {
    fn handle(&mut self, msg: Result<Incoming, ProtocolError>, ctx: &mut Self::Context) {
        self.last_heard = Instant::now();
        if self.socket.is_closing() || !self.rate.admit(&msg, &mut self.socket, ctx) {
            return;
        }
        let forward = match msg {
            Ok(Incoming::Text(text)) => Message::Text(text.into()),
            Ok(Incoming::Binary(bytes)) => Message::Binary(bytes),
            Ok(Incoming::Ping(p)) => return self.socket.pong(ctx, p),
            Ok(Incoming::Pong) => return,
            // Never reaches the owner: answered here, as the owner would.
            Ok(Incoming::Dropped { text }) => return self.socket.text(ctx, dropped_answer(text)),
            Ok(Incoming::Close(reason)) => {
                let frame = reason.as_ref().map(|(code, why)| CloseFrame {
                    code: CloseCode::from(*code),
                    reason: why.clone().into(),
                });
                let _ = self.to_owner.send(Message::Close(frame));
                let (code, why) = reason.unwrap_or((close::NORMAL, String::new()));
                return self.socket.close(ctx, code, &why);
            }
            Err(e) => {
                self.close_owner();
                return self.socket.close_now(ctx, e.close_code(), &e.reason());
            }
        };
        if self.to_owner.send(forward).is_err() {
            self.owner_gone(ctx);
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        // The client's TCP connection ended.
        self.close_owner();
        ctx.stop();
    }
}

/// The owner's frames, sent on to the client as they are.
impl StreamHandler<Result<Message, tungstenite::Error>> for Relay {
    fn handle(&mut self, msg: Result<Message, tungstenite::Error>, ctx: &mut Self::Context) {
        self.owner.heard = Instant::now();
        if self.socket.is_closing() {
            return;
        }
        let (opcode, body) = match msg {
            Ok(Message::Text(text)) => (op::TEXT, bytes::Bytes::from(text)),
            Ok(Message::Binary(bytes)) => (op::BINARY, bytes),
            other => return self.owner_event(other, ctx),
        };
        // The owner's frames are read whatever the client takes: what
        // waits for a client that does not read is bounded here.
        if self.socket.queued() >= self.queue || !self.outbox.offer(body.len()) {
            self.close_owner();
            return self
                .socket
                .close_now(ctx, CLOSE_OVERFLOW, "too slow: reconnect with last_seq");
        }
        self.socket.queue(opcode, body, true);
        self.socket.flush_soon(ctx);
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        self.owner_gone(ctx);
    }
}

impl Relay {
    /// What the owner's side says besides frames for the client.
    fn owner_event(&mut self, msg: Result<Message, tungstenite::Error>, ctx: &mut Context<Self>) {
        match msg {
            Ok(Message::Close(frame)) => {
                let (code, why) = frame.map_or((close::NORMAL, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                });
                // The owner's drain speaks of the owner; this node goes on.
                let why = if why == RESTARTING {
                    OWNER_RESTARTING
                } else {
                    &why
                };
                self.socket.close(ctx, code, why);
            }
            // tungstenite answers the owner's pings itself; its pongs
            // only say it is there.
            Ok(_) => {}
            Err(_) => self.owner_gone(ctx),
        }
    }
}
