//! What a session's parts share: the limits and constants a session runs
//! under, what every session borrows (`SessionDeps`, `SessionView`), what a
//! connection is sent (`Outbound`, `Outbox`), the close codes, and the link
//! between a session and the hub that started it. A leaf of `session/`: it
//! imports none of the parts, so every part may import it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use actix::{Actor, Addr, Message, Recipient};
use bytestring::ByteString;
use rand::Rng;
use rand::distr::Alphanumeric;

use crate::config::Settings;
use crate::game::GameState;
use crate::ids::{SessionId, TenantId};
use crate::llm::Provider;
use crate::metrics::Metrics;
use crate::storage::Store;
use crate::tools::{Caller, Registry, Role};

/// WebSocket close code when the session had to stop (storage failure).
pub const CLOSE_SESSION_FAILED: u16 = 1011;
/// Close code when another node took the session over, or this node is
/// shutting down (service restart: reconnect, to any node, with
/// `last_seq`).
pub const CLOSE_SESSION_MOVED: u16 = 1012;
/// Close code when an operator closed the session for good (a code for
/// applications, RFC 6455 §7.4.2): do not reconnect.
pub const CLOSE_SESSION_CLOSED: u16 = 4000;
/// Close code for a seat that is no longer at the table (the host kicked
/// it, or it left): its token is refused from now on, so do not
/// reconnect.
pub const CLOSE_SEAT_KICKED: u16 = 4001;
/// The reason sent with [`CLOSE_SEAT_KICKED`] for a kick.
pub const KICKED: &str = "the host removed this seat from the session";
/// The reason sent with [`CLOSE_SEAT_KICKED`] to a seat that left.
pub const LEFT: &str = "this seat left the session";

/// How often a tail with spectators reports them to the owner again; the
/// owner forgets a report not refreshed within three of these.
pub const AUDIENCE_REFRESH: Duration = Duration::from_secs(10);

/// What a closed session's refusals and its connections' close say.
pub const CLOSED_BY_OPERATOR: &str = "the session was closed by an operator";

/// A random string of ASCII letters and digits.
pub fn random_token(len: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// A session's counts, written by its actor and read by the hub when it
/// lists live sessions: shared, so that a turn sends the hub no message.
#[derive(Debug, Default)]
pub(super) struct SessionStats {
    pub players: AtomicUsize,
    pub spectators: AtomicUsize,
    pub turns: AtomicU64,
    /// Chats taken and waiting for their turn to start.
    pub queued: AtomicUsize,
    /// When the session last did something (ms since the epoch).
    pub last_activity_ms: AtomicI64,
    /// An operator closed it; it stops once its work taken is done.
    pub closing: AtomicBool,
    /// Its seats' credentials, as the HTTP layer reads them.
    pub seats: Arc<super::seats::SeatBook>,
}

/// A session actor (`A`) is stopping; its hub forgets it if it is still
/// the live one.
pub(super) struct Unregister<A: Actor> {
    pub session_id: SessionId,
    pub addr: Addr<A>,
}

impl<A: Actor> Message for Unregister<A> {
    type Result = ();
}

/// The hub that started a session actor `A`, as the actor reaches it (never
/// by its type): the counts the hub lists it with, and the message that it
/// stopped.
pub(super) struct HubLink<A: Actor> {
    /// The session's counts, as the hub reads them.
    pub stats: Arc<SessionStats>,
    /// Told when the actor stops, so the hub forgets it.
    pub unregister: Recipient<Unregister<A>>,
}

/// Frames of recent story kept in memory per session for resume.
pub const RING_FRAMES: usize = 512;
/// Frames a resuming connection may be served from the journal, beyond the
/// resume ring; one that missed more starts afresh from the snapshot
/// (`"resumed": false`).
pub const MAX_STORED_BACKLOG: u64 = 10_000;
/// And their size at most, in characters: what one resume may hold in
/// memory, whoever asks (a public session's spectators are anyone).
pub const MAX_STORED_BACKLOG_CHARS: u64 = 4 * 1024 * 1024;
/// What a joining connection is handed at once, in bytes: its `welcome`
/// (the snapshot) and the backlog it resumes with, from the ring or the
/// journal alike. A resume past it starts afresh (`"resumed": false`, the
/// snapshot is the truth), as one past the journal's bound does.
pub const MAX_RESUME_BYTES: usize = MAX_STORED_BACKLOG_CHARS as usize;
/// Story frames between two snapshots of a session.
pub const SNAPSHOT_EVERY: u64 = 256;
/// The same tool with the same arguments this many times in a row ends a turn.
pub use crate::llm::guard::REPEAT_LIMIT;
/// Request ids remembered per session for de-duplication.
pub const REMEMBERED_REQUESTS: usize = 1024;

/// Limits every session runs under, taken from the settings.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_iterations: u32,
    /// Estimated history tokens per model call; 0 for no limit.
    pub history_tokens: usize,
    pub chat_per_minute: u32,
    pub chat_burst: u32,
    /// Direct calls (NPC activations, tool API and MCP calls) per minute
    /// into one session, and their burst.
    pub calls_per_minute: u32,
    pub calls_burst: u32,
    pub max_queued_turns: usize,
    pub max_text_chars: usize,
    pub turn_deadline: Duration,
    pub idle_timeout: Duration,
}

impl Limits {
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            max_iterations: s.max_iterations.max(1),
            history_tokens: s.history_tokens,
            chat_per_minute: s.chat_per_minute.max(1),
            chat_burst: s.chat_burst.max(1),
            calls_per_minute: s.calls_per_minute.max(1),
            calls_burst: s.calls_burst.max(1),
            max_queued_turns: s.max_queued_turns,
            max_text_chars: s.max_text_chars,
            turn_deadline: s.turn_deadline(),
            idle_timeout: s.idle_timeout(),
        }
    }
}

/// What every session shares: storage, tools, the model, the limits.
pub struct SessionDeps {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub provider: Arc<dyn Provider>,
    pub limits: Arc<Limits>,
    pub metrics: Arc<Metrics>,
    /// The model's token budgets (contract §12).
    pub budgets: Arc<crate::budget::Budgets>,
}

/// What a session lends the parts that read it without owning it (the call
/// pipeline, the prompt): its state and ids, read-only, and the tools.
pub(super) struct SessionView<'a> {
    pub registry: &'a Registry,
    pub state: &'a GameState,
    pub session_id: &'a SessionId,
    pub tenant_id: &'a TenantId,
}

impl SessionView<'_> {
    /// The model as a caller: the game master, under the campaign's
    /// allowlist.
    pub(super) fn game_master(&self) -> Caller<'_> {
        Caller {
            acting: &[],
            role: Role::GameMaster,
            allowlist: &self.state.allowlist,
            session_id: self.session_id,
            user_id: None,
            site_id: None,
        }
    }
}

/// Sent to a connection: a story or control frame, or a request to close.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub enum Outbound {
    /// Serialized once per frame; every connection gets the same bytes.
    Frame(ByteString),
    /// Frames released together, in order: written to the socket at once
    /// (one message and, most often, one write for all of them).
    Frames(Arc<[ByteString]>),
    /// Frames released together for every connection alike, framed for
    /// the wire once ([`Wire`]): a connection queues one buffer, shared,
    /// and writes it with one slice.
    Wire(Wire),
    /// Close with this WebSocket close code and reason.
    Close { code: u16, reason: &'static str },
}

impl Outbound {
    /// The bytes of text this message queues for its connection.
    pub fn bytes(&self) -> usize {
        match self {
            Self::Frame(bytes) => bytes.len(),
            Self::Frames(frames) => frames.iter().map(|f| f.len()).sum(),
            Self::Wire(wire) => wire.text,
            Self::Close { .. } => 0,
        }
    }
}

/// Text frames as they go on a WebSocket from this node: each frame's
/// header and text, one after another, written once for every connection
/// that gets them all (the bytes are shared, not copied).
#[derive(Debug, Clone)]
pub struct Wire {
    pub bytes: bytes::Bytes,
    /// The frames' text bytes (what the `Outbox` counts).
    pub text: usize,
    /// How many frames.
    pub frames: usize,
}

impl Wire {
    pub fn of(frames: &[ByteString]) -> Self {
        Self {
            bytes: crate::http::wsframe::texts_on_wire(frames.iter().map(|f| str::as_bytes(f))),
            text: frames.iter().map(|f| f.len()).sum(),
            frames: frames.len(),
        }
    }
}

/// What one connection was sent and has not taken yet, shared by the
/// session (or tail) that queues for it and the connection that takes.
/// The connection takes bytes only as its socket takes them, so these are
/// the bytes a slow or silent reader holds on the node.
#[derive(Debug)]
pub struct Outbox {
    /// Bytes queued and not yet taken.
    bytes: AtomicUsize,
    /// The most that may wait (`QUESTD_WS_QUEUE_BYTES`).
    bound: usize,
    /// Set by the session when the connection fell too far behind: the
    /// connection drops what is still queued and closes.
    overflow: AtomicBool,
}

impl Outbox {
    pub fn new(bound: usize) -> Self {
        Self {
            bytes: AtomicUsize::new(0),
            bound: bound.max(1),
            overflow: AtomicBool::new(false),
        }
    }

    /// Queues `n` more bytes if they fit: answers false past the bound.
    /// A message alone always fits, so a frame larger than the bound still
    /// reaches a connection that has taken everything before it.
    pub(crate) fn offer(&self, n: usize) -> bool {
        let queued = self.bytes.load(Ordering::Acquire);
        if queued > 0 && queued.saturating_add(n) > self.bound {
            return false;
        }
        self.bytes.fetch_add(n, Ordering::AcqRel);
        true
    }

    /// Queues `n` bytes whatever the bound (an ack, which its connection
    /// must get in order).
    pub(crate) fn force(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    /// The connection took `n` bytes (or a message queued with
    /// [`Outbox::offer`] was not queued after all).
    pub fn taken(&self, n: usize) {
        let _ = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(n))
            });
    }

    /// Bytes queued and not yet taken.
    pub fn queued(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Marks the connection as too far behind.
    pub(crate) fn overflow(&self) {
        self.overflow.store(true, Ordering::Release);
    }

    /// Whether the session gave up on the connection.
    pub fn overflowed(&self) -> bool {
        self.overflow.load(Ordering::Acquire)
    }
}
