//! `/ws/sessions/{id}`: one actor per WebSocket connection, on the socket
//! itself (`websocket`; the upgrade hands it over, `upgrade`).
//!
//! The connection actor only translates: client frames become messages to the
//! session actor. Story frames from the session (already serialized, the same
//! bytes for every connection) do not pass through the actor: the session
//! hands them to the connection's lane ([`ConnLane`], `session::lanes`) on
//! the connection's thread, which queues and writes them as they are, and
//! asks the actor only for what needs its context (a wait for room, a
//! close's grace, a stop). What waits for it is bounded in frames
//! (`QUESTD_WS_QUEUE`, in its socket's queue) and in bytes (`QUESTD_WS_QUEUE_BYTES`, counted in the connection's
//! [`Outbox`] until the socket takes them): past either the connection
//! leaves the session and closes with 1013, and the client resumes with
//! `last_seq`. A client that never reads does not take the close frame
//! either: the connection is dropped after a grace, and the kernel aborts a
//! socket whose bytes stay unacknowledged (`QUESTD_WRITE_STALL_SECS`, see
//! `accept`). What the client sends is held to a frame rate (`frame_rate`).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use actix::prelude::*;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

use super::access::{Caller, TokenRole, check_tenant, token_caller, token_role};
use super::admission::{ConnSlot, JoinBudget};
use super::frame_rate::FrameRate;
use super::locate::locate;
use super::peers::Routed;
pub use super::socket::WsLimits;
use super::socket::{BINARY_REFUSED, CLIENT_TIMEOUT, HEARTBEAT, MAX_FRAME_BYTES, dropped_answer};
use super::state::AppState;
use super::websocket::{Socket, WriteStep, Writer, WsActor};
use super::wsframe::{Incoming, ProtocolError, close};
use crate::error::{ApiError, ErrorCode};
use crate::ids::{RequestId, SeatId, SessionId};
use crate::metrics::{Gauge, Metrics};
use crate::protocol::{ClientFrame, ConnRole, ControlFrame, check_request_id};
use crate::session::tail::{Tail, Watch};
use crate::session::{
    CLOSE_OVERFLOW, CLOSE_SESSION_CLOSED, ChatRefused, Decide, Joined, Lane, LaneRef, Outbound,
    Outbox, PartyCaller, Say, SessionActor, Sink, SubmitChat, Subscribe, Unsubscribe,
};
use crate::telemetry::TraceParent;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::routes::add(
        cfg,
        actix_web::http::Method::GET,
        "/ws/sessions/{id}",
        connect,
    );
}

#[derive(Deserialize)]
struct ConnectQuery {
    token: Option<String>,
    last_seq: Option<u64>,
}

/// Checks session and token before the upgrade: 404 unknown, 401 bad token.
#[utoipa::path(get, path = "/ws/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id"), ("token" = Option<String>, Query, description = "A player or spectator token")),
    security(("player_token" = [])),
    responses(
        (status = 101, description = "The WebSocket (docs/protocol.md §2)"),
        (status = 400, description = "Not a WebSocket upgrade", body = crate::protocol::http::ErrorBody), (status = 401, description = "No token, or a wrong one", body = crate::protocol::http::ErrorBody), (status = 404, description = "No such session", body = crate::protocol::http::ErrorBody)))]
async fn connect(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<SessionId>,
    query: Result<web::Query<ConnectQuery>, actix_web::Error>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(super::body::bad_query(
        "token is the player or spectator token, last_seq a whole number (e.g. ?token=T&last_seq=12)",
    ))?;
    let token = query.token.as_deref().unwrap_or_default();
    // Where a player's connection runs: on its session's thread, so its
    // chats and the frames sent back never cross threads. Spectators stay
    // on the thread that accepted them: a crowd of them spreads over the
    // workers.
    let mut home = None;
    let (watched, (role, seat), connections) = match locate(&state, &path).await? {
        Routed::Here(handle) => {
            let role = match token_caller(&handle, token)? {
                Caller::Seat(seat) => (ConnRole::Player, Some(seat)),
                Caller::Spectator | Caller::Key => (ConnRole::Spectator, None),
            };
            // Only once the token opened the session: a caller it does not
            // open learns nothing of its tenant from the header.
            check_tenant(&req, &handle.meta)?;
            if role.0 == ConnRole::Player && !handle.home.is_here() {
                home = Some(handle.home.clone());
            }
            (Watched::session(&handle.addr), role, handle.connections)
        }
        // Another node runs the session: a spectator is served here from
        // the journal, a player's connection is relayed to the owner.
        Routed::Owner(owner) if !state.cluster.from_peer(&req) => {
            let meta = state
                .store
                .session_meta(&path)
                .await
                .map_err(|e| ApiError::internal(&e))?
                .ok_or_else(|| ApiError::not_found(super::errors::no_session(path.as_str())))?;
            // Only the owner knows the seats: every token but the
            // spectator's is its to judge (a joined seat's is let in, a
            // kicked or unknown one refused with 401), and then the
            // `X-Tenant-ID` relayed with it, as here.
            if token_role(&meta, token) != Some(TokenRole::Spectator) {
                let slot = state.admission.admit_websocket(&req, &Arc::default())?;
                super::accept::upgraded(&req);
                return super::relay::relay(&req, &state, &owner.url, slot).await;
            }
            check_tenant(&req, &meta)?;
            let tail = state
                .tails
                .send(Watch {
                    session_id: path.into_inner(),
                })
                .await??;
            (
                Watched::tail(&tail.addr),
                (ConnRole::Spectator, None),
                tail.connections,
            )
        }
        // A peer relays only to the node it found running the session:
        // ownership moved while it connected, and the client retries.
        Routed::Owner(_) => {
            return Err(super::errors::overloaded(
                "the session is moving between nodes; try again shortly",
            ));
        }
    };
    // Counted before the upgrade: past a cap the client gets a plain HTTP
    // refusal it can read, and the node never opens more sockets than it
    // has files for.
    let slot = state.admission.admit_websocket(&req, &connections)?;
    // From here the WebSocket caps count this connection, not the cap on
    // plain HTTP connections.
    super::accept::upgraded(&req);
    let limits = state.ws;
    let conn_id = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let last_seq = query.last_seq;
    let metrics = state.metrics.clone();
    let joins = state.admission.joins();
    let client = state.admission.client_key(&req);
    let traceparent = super::service::traceparent(&req).map(Box::new);
    let start = move |up| {
        WsConn::create(move |ctx| {
            let (socket, messages, outbox) = Socket::new(up, MAX_FRAME_BYTES, limits.queue_bytes);
            ctx.add_stream(messages);
            WsConn {
                _slot: slot,
                socket,
                conn_id,
                session: watched,
                role,
                seat,
                last_seq,
                last_heard: Instant::now(),
                unsubscribed: false,
                lane: None,
                queue: limits.queue,
                outbox,
                rate: FrameRate::new(limits.frames_per_second, limits.frame_burst),
                metrics,
                joins,
                client,
                traceparent,
            }
        });
    };
    super::upgrade::accept(&req, move |up| match home {
        Some(home) => super::websocket::move_to(&home, up, start),
        None => start(up),
    })
}

/// What a connection watches: the session itself (this node runs it), or
/// this node's tail of it (another node does; spectators only).
struct Watched {
    subscribe: Recipient<Subscribe>,
    unsubscribe: Recipient<Unsubscribe>,
    /// Where chats go; `None` on a tail.
    chat: Option<Recipient<SubmitChat>>,
    /// Where table talk goes; `None` on a tail.
    say: Option<Recipient<Say>>,
    /// Where decisions on approvals go; `None` on a tail.
    decide: Option<Recipient<Decide>>,
}

impl Watched {
    fn session(addr: &Addr<SessionActor>) -> Self {
        Self {
            subscribe: addr.clone().recipient(),
            unsubscribe: addr.clone().recipient(),
            chat: Some(addr.clone().recipient()),
            say: Some(addr.clone().recipient()),
            decide: Some(addr.clone().recipient()),
        }
    }

    fn tail(addr: &Addr<Tail>) -> Self {
        Self {
            subscribe: addr.clone().recipient(),
            unsubscribe: addr.clone().recipient(),
            chat: None,
            say: None,
            decide: None,
        }
    }
}

/// One WebSocket connection. Lives on an HTTP worker; stops when the peer
/// goes away, times out, overflows, or the session closes it.
struct WsConn {
    /// This connection's place in the node's, session's and address's
    /// counts; given back when the connection actor is dropped.
    _slot: ConnSlot,
    socket: Socket,
    conn_id: u64,
    /// The session (or tail) this connection watches; it outlives the
    /// connection or tells it to close.
    session: Watched,
    role: ConnRole,
    /// A player's seat: its chats speak as it, its welcome names it.
    seat: Option<SeatId>,
    last_seq: Option<u64>,
    last_heard: Instant,
    /// This connection left the session's audience.
    unsubscribed: bool,
    /// Its lane, registered on this thread once it started.
    lane: Option<(LaneRef, Rc<ConnLane>)>,
    /// Frames that may wait for this connection in its socket's queue.
    queue: usize,
    /// The bytes queued for this connection and not written, shared with
    /// the session, which marks it overflowed when it falls too far behind.
    outbox: Arc<Outbox>,
    /// How many frames the client may send.
    rate: FrameRate,
    /// What joining connections are handed, per address and per node.
    joins: Arc<JoinBudget>,
    /// The client's address as the per-address limits count it.
    client: Option<std::net::IpAddr>,
    metrics: Arc<Metrics>,
    /// The upgrade's W3C `traceparent`: the parent of the spans of every
    /// turn this connection's chats start (docs/protocol.md §12). Boxed:
    /// few connections carry one, and every idle one pays for the field
    /// (8 bytes, not 26).
    traceparent: Option<Box<TraceParent>>,
}

impl WsActor for WsConn {
    fn socket(&mut self) -> &mut Socket {
        &mut self.socket
    }
}

impl WsConn {
    /// The gauge of this connection's role.
    fn gauge(&self) -> &Gauge {
        match self.role {
            ConnRole::Player => &self.metrics.player_connections,
            ConnRole::Spectator => &self.metrics.spectator_connections,
        }
    }

    /// A player's way into the session (`to`) with the seat it speaks
    /// as; `None` for a spectator, who may neither chat nor talk.
    fn as_player<M: actix::Message + Send>(
        &self,
        to: &Option<Recipient<M>>,
    ) -> Option<(Recipient<M>, SeatId)>
    where
        M::Result: Send,
    {
        let to = to.as_ref().filter(|_| self.role == ConnRole::Player)?;
        Some((to.clone(), self.seat.clone()?))
    }

    /// Leaves the session's audience (once): at the latest when the
    /// connection stops, at once when it falls behind.
    fn unsubscribe(&mut self) {
        if !self.unsubscribed {
            self.unsubscribed = true;
            self.session.unsubscribe.do_send(Unsubscribe {
                conn_id: self.conn_id,
            });
        }
    }

    /// The session did not take a message (it stopped meanwhile).
    fn unavailable(&mut self, ctx: &mut Context<Self>, request_id: Option<RequestId>) {
        self.send_error(
            ctx,
            request_id,
            ErrorCode::InternalError,
            "the session is not available; reconnect".into(),
            None,
        );
    }

    fn send_error(
        &mut self,
        ctx: &mut Context<Self>,
        request_id: Option<RequestId>,
        code: ErrorCode,
        message: String,
        retry_after_ms: Option<u64>,
    ) {
        let frame = ControlFrame::Error {
            request_id,
            error_code: code,
            message,
            retry_after_ms,
        };
        self.socket.text(ctx, frame.to_json());
    }

    fn on_text(&mut self, text: &str, ctx: &mut Context<Self>) {
        let frame = match ClientFrame::parse(text) {
            Ok(f) => f,
            Err(message) => {
                // Echo a request_id when one can be read, to help the client.
                let request_id = serde_json::from_str::<Value>(text).ok().and_then(|v| {
                    v.get("request_id")
                        .and_then(Value::as_str)
                        .filter(|id| check_request_id(id).is_ok())
                        .map(RequestId::from)
                });
                return self.send_error(ctx, request_id, ErrorCode::InvalidFrame, message, None);
            }
        };
        match frame {
            ClientFrame::Ping { nonce } => self
                .socket
                .text(ctx, ControlFrame::Pong { nonce }.to_json()),
            ClientFrame::Say { text, request_id } => {
                let Some((say, seat_id)) = self.as_player(&self.session.say) else {
                    return self.send_error(
                        ctx,
                        request_id,
                        ErrorCode::Forbidden,
                        "spectators cannot talk at the table".into(),
                        None,
                    );
                };
                let rid = request_id.clone();
                let fut = say.send(Say {
                    seat_id,
                    text,
                    request_id,
                });
                // What is said reaches this connection as `party_chat`,
                // like everyone's; only a refusal is answered here.
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
                    Ok(Ok(())) => {}
                    Ok(Err(r)) => act.send_error(ctx, rid, r.code, r.message, r.retry_after_ms),
                    Err(_) => act.unavailable(ctx, rid),
                }));
            }
            ClientFrame::Approve {
                approval_id,
                decision,
                reason,
                request_id,
            } => {
                let Some((decide, seat_id)) = self.as_player(&self.session.decide) else {
                    return self.send_error(
                        ctx,
                        request_id,
                        ErrorCode::Forbidden,
                        "spectators cannot decide on approvals".into(),
                        None,
                    );
                };
                let fut = decide.send(Decide {
                    approval_id,
                    decision,
                    reason,
                    by: PartyCaller::Seat(seat_id),
                });
                // The decision reaches this connection as
                // `approval_resolved`, like everyone's; only a refusal is
                // answered here.
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
                    Ok(Ok(_)) => {}
                    Ok(Err(r)) => {
                        act.send_error(ctx, request_id, r.code, r.message, r.retry_after_ms)
                    }
                    Err(_) => act.unavailable(ctx, request_id),
                }));
            }
            ClientFrame::Chat { text, request_id } => {
                let Some((chat, seat_id)) = self.as_player(&self.session.chat) else {
                    return self.send_error(
                        ctx,
                        request_id,
                        ErrorCode::Forbidden,
                        "spectators cannot chat".into(),
                        None,
                    );
                };
                let rid = request_id.clone();
                let fut = chat.send(SubmitChat {
                    text,
                    request_id,
                    seat_id,
                    conn_id: Some(self.conn_id),
                    trace_id: None,
                    traceparent: self.traceparent.as_deref().copied(),
                });
                ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
                    match res {
                        // The session queued the ack itself, ahead of the
                        // turn's frames.
                        Ok(Ok(a)) if a.acked => {}
                        Ok(Ok(a)) => act.socket.text(ctx, a.ack(rid)),
                        Ok(Err(r)) => act.send_error(ctx, rid, r.code, r.message, r.retry_after_ms),
                        Err(_) => act.unavailable(ctx, rid),
                    }
                }));
            }
        }
    }
}

impl Actor for WsConn {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.gauge().inc();
        ctx.run_interval(HEARTBEAT, |act, ctx| {
            if !act.session.subscribe.connected() {
                // The session's actor died (a bug, caught by its runtime):
                // the client reconnects and the hub loads it again from its
                // journal.
                act.send_error(
                    ctx,
                    None,
                    ErrorCode::InternalError,
                    "the session stopped unexpectedly; reconnect with last_seq".into(),
                    None,
                );
                act.socket
                    .close(ctx, close::ERROR, "the session stopped; reconnect");
            } else if act.last_heard.elapsed() > CLIENT_TIMEOUT {
                act.socket.close(ctx, close::AWAY, "no answer to ping");
            } else {
                act.socket.ping(ctx);
            }
        });
        let lane = Rc::new_cyclic(|this| ConnLane {
            this: this.clone(),
            writer: self.socket.writer(),
            outbox: self.outbox.clone(),
            held: RefCell::new(Some(Vec::new())),
            due: Cell::new(false),
            queue: self.queue,
            conn: ctx.address(),
        });
        let sink = LaneRef::register(self.conn_id, lane.clone());
        self.lane = Some((sink.clone(), lane));
        let subscribe = Subscribe {
            conn_id: self.conn_id,
            role: self.role,
            seat_id: self.seat.clone(),
            last_seq: self.last_seq,
            sink: Sink::Lane(sink),
            outbox: self.outbox.clone(),
        };
        // The welcome and backlog are queued first: what the session sends
        // meanwhile is held by the lane until then, and nothing the client
        // sends is handled before.
        ctx.wait(
            self.session
                .subscribe
                .send(subscribe)
                .into_actor(self)
                .map(|res, act, ctx| {
                    act.joined(res, ctx);
                    if let Some((_, lane)) = &act.lane {
                        lane.open();
                    }
                    act.socket.flush(ctx);
                }),
        );
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.gauge().dec();
        if let Some((lane, _)) = self.lane.take() {
            lane.unregister();
        }
        self.unsubscribe();
    }
}

impl WsConn {
    /// Queues what the session's answer to `Subscribe` says: the welcome
    /// and the frames missed, or a close.
    fn joined(
        &mut self,
        res: Result<Result<Joined, ChatRefused>, MailboxError>,
        ctx: &mut Context<Self>,
    ) {
        match res {
            Ok(Ok(joined)) => {
                let bytes =
                    joined.welcome.len() + joined.backlog.iter().map(|f| f.len()).sum::<usize>();
                if let Err(reason) = self.joins.take(self.client, bytes) {
                    // Handed nothing: what it would pin is the budget's
                    // to bound. The client reconnects (1013: try again
                    // later) with its last_seq.
                    return self.socket.close(
                        ctx,
                        close::AGAIN,
                        &format!("{reason}; reconnect shortly"),
                    );
                }
                self.socket.queue_text(joined.welcome, false);
                for frame in joined.backlog {
                    self.socket.queue_text(frame, false);
                }
            }
            // Closed by an operator while this connection opened.
            Ok(Err(refused)) if refused.code == ErrorCode::SessionClosed => {
                self.socket
                    .close(ctx, CLOSE_SESSION_CLOSED, &refused.message);
            }
            _ => {
                self.socket
                    .close(ctx, close::RESTART, "the session is reloading; reconnect");
            }
        }
    }
}

/// What the connection's lane asks of its actor: what a write from the
/// lane cannot do without the actor's context.
#[derive(Message)]
#[rtype(result = "()")]
enum LaneEvent {
    /// A close frame is queued: stop after the grace at the latest.
    Closing,
    /// The connection fell too far behind and is closing with 1013.
    Overflowed,
    /// A write blocked (wait for room) or failed (stop).
    Wrote(WriteStep),
}

impl Handler<LaneEvent> for WsConn {
    type Result = ();

    fn handle(&mut self, msg: LaneEvent, ctx: &mut Self::Context) {
        match msg {
            LaneEvent::Closing => Socket::closing(ctx),
            LaneEvent::Overflowed => {
                self.metrics.outbound_drops.add(1);
                self.unsubscribe();
                Socket::closing(ctx);
            }
            LaneEvent::Wrote(step) => self.socket.after(step, ctx),
        }
    }
}

/// The connection's lane (`session::lanes`): what the session sends is
/// queued here, on this thread, as the session sends it, and written soon
/// after ([`write_soon`]), with no message to the actor unless the socket
/// needs it.
struct ConnLane {
    this: Weak<ConnLane>,
    writer: Rc<RefCell<Writer>>,
    outbox: Arc<Outbox>,
    /// What came before the welcome was written: held, then taken in
    /// order once it is queued ([`ConnLane::open`]).
    held: RefCell<Option<Vec<Outbound>>>,
    /// In this thread's list of lanes to write.
    due: Cell<bool>,
    /// Frames that may wait in the socket's queue.
    queue: usize,
    conn: Addr<WsConn>,
}

/// Lanes written at most before the writing task lets the thread's other
/// work run (a session's next commit, another thread's share of frames):
/// what reaches a lane still waiting meanwhile goes out in the same write.
const WRITE_AT_ONCE: usize = 64;

thread_local! {
    /// This thread's lanes with frames to write, in the order they got
    /// them, and whether a task is writing them.
    static TO_WRITE: RefCell<(VecDeque<Rc<ConnLane>>, bool)> =
        const { RefCell::new((VecDeque::new(), false)) };
}

/// Writes `lane` soon: after what this thread is doing now, in one task
/// that writes every lane due on the thread, a few dozen at a time.
///
/// Not at once: a session releases a turn's frames in a few commits, and
/// a crowd of ten thousand takes longer to write than the commits take to
/// come. Written at once, every commit cost every connection a write (and
/// its reader a wake-up): measured with 10,000 spectators, a third more
/// CPU per turn on both sides. Written soon, the commits that reach a lane
/// before its turn to be written go out in one write, as they did when
/// each connection's actor took them from its mailbox.
fn write_soon(lane: Rc<ConnLane>) {
    if lane.due.replace(true) {
        return;
    }
    let start = TO_WRITE.with(|due| {
        let mut due = due.borrow_mut();
        due.0.push_back(lane);
        !std::mem::replace(&mut due.1, true)
    });
    if start {
        actix::spawn(write_due());
    }
}

/// Writes the lanes due on this thread until none are left.
async fn write_due() {
    loop {
        let batch: Vec<Rc<ConnLane>> = TO_WRITE.with(|due| {
            let mut due = due.borrow_mut();
            let n = due.0.len().min(WRITE_AT_ONCE);
            if n == 0 {
                due.1 = false;
            }
            due.0.drain(..n).collect()
        });
        if batch.is_empty() {
            return;
        }
        for lane in batch {
            lane.due.set(false);
            lane.write();
        }
        tokio::task::yield_now().await;
    }
}

impl Lane for ConnLane {
    fn take(&self, msg: Outbound) {
        if let Some(held) = self.held.borrow_mut().as_mut() {
            held.push(msg);
            return;
        }
        let mut writer = self.writer.borrow_mut();
        if self.outbox.overflowed() {
            // Once overflowed, the rest is dropped: the client resumes
            // from its last seq instead.
            match msg {
                Outbound::Close { code, reason } => {
                    writer.drop_unsent();
                    if writer.queue_close(code, reason) {
                        self.conn.do_send(LaneEvent::Closing);
                    }
                }
                other => self.outbox.taken(other.bytes()),
            }
        } else {
            match msg {
                Outbound::Frame(bytes) => writer.queue_text(bytes, true),
                Outbound::Frames(frames) => {
                    for bytes in frames.iter() {
                        writer.queue_text(bytes.clone(), true);
                    }
                }
                Outbound::Wire(wire) => writer.queue_wire(&wire),
                Outbound::Close { code, reason } => {
                    if writer.queue_close(code, reason) {
                        self.conn.do_send(LaneEvent::Closing);
                    }
                }
            }
            if writer.queued() > self.queue && !writer.is_closing() {
                // As many frames behind as it may hold: closed like a
                // connection whose queue is full.
                self.outbox.overflow();
                writer.drop_unsent();
                writer.queue_close(CLOSE_OVERFLOW, "too slow: reconnect with last_seq");
                self.conn.do_send(LaneEvent::Overflowed);
            }
        }
        drop(writer);
        if let Some(this) = self.this.upgrade() {
            write_soon(this);
        }
    }
}

impl ConnLane {
    /// The welcome (and backlog) is queued: what was held goes after it.
    fn open(&self) {
        let held = self.held.borrow_mut().take();
        for msg in held.into_iter().flatten() {
            self.take(msg);
        }
    }

    /// Writes what is queued now, unless the connection has stopped
    /// meanwhile.
    fn write(&self) {
        if !self.conn.connected() {
            return;
        }
        match self.writer.borrow_mut().write_now() {
            WriteStep::Done => {}
            step => self.conn.do_send(LaneEvent::Wrote(step)),
        }
    }
}

impl StreamHandler<Result<Incoming, ProtocolError>> for WsConn {
    fn handle(&mut self, msg: Result<Incoming, ProtocolError>, ctx: &mut Self::Context) {
        self.last_heard = Instant::now();
        if self.socket.is_closing() || !self.rate.admit(&msg, &mut self.socket, ctx) {
            return;
        }
        match msg {
            Ok(Incoming::Text(text)) => self.on_text(&text, ctx),
            Ok(Incoming::Ping(payload)) => self.socket.pong(ctx, payload),
            Ok(Incoming::Pong) => {}
            Ok(Incoming::Binary(_)) => self.send_error(
                ctx,
                None,
                ErrorCode::InvalidFrame,
                BINARY_REFUSED.into(),
                None,
            ),
            Ok(Incoming::Dropped { text }) => self.socket.text(ctx, dropped_answer(text)),
            Ok(Incoming::Close(reason)) => {
                let (code, why) = reason.unwrap_or((close::NORMAL, String::new()));
                self.socket.close(ctx, code, &why);
            }
            Err(e) => {
                tracing::debug!(error = ?e, "websocket protocol error");
                self.socket.close_now(ctx, e.close_code(), &e.reason());
            }
        }
    }
}
