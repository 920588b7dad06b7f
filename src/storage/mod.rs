//! Durable storage: sessions, the journal of story frames, snapshots.
//!
//! Only this module runs SQL. Reads go through a connection pool; every write
//! goes through one writer task that commits whatever has queued up, from
//! all sessions, in one transaction (group commit): durability costs one
//! fsync per batch, not one per action. The database is SQLite (embedded,
//! the default) or PostgreSQL, chosen by the URL's scheme; both speak the
//! SQL in `sql.rs` and share the writer in `writer.rs`; the writes they
//! all take are in `ops.rs`, below every other part.

pub mod backup;
pub mod formats;
mod ops;
mod postgres;
mod sql;
mod sqlite;
mod steps;
mod writer;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use tokio::sync::oneshot;

use crate::game::pieces::SharedStart;
use crate::ids::{CallId, NodeId, RequestId, SeatId, SessionId, SiteId, TenantId, TraceId, TurnId};
use crate::metrics::Metrics;
use writer::Writes;

/// Rows committed in one transaction at most.
pub const MAX_BATCH: usize = 4096;

/// Why storage failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    #[error("database error: {0}")]
    Database(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("the storage writer has stopped")]
    WriterGone,
    #[error("too many writes are waiting for storage")]
    Overloaded,
    #[error("storage is full")]
    Full,
    /// Another node claimed the session: this node's writes for it are
    /// refused at the database and it must stop running it.
    #[error("another node runs this session now")]
    Fenced,
    /// The database refused this write's own data (a string PostgreSQL's
    /// `TEXT` cannot hold, a value too big or of the wrong type): the
    /// write fails, the store is fine. The text is the database's and
    /// goes to the log only.
    #[error("a value of this write cannot be stored: {0}")]
    Unstorable(String),
    /// Not tried: an earlier write of the same session failed, and its
    /// journal must have no gap.
    #[error("an earlier write of this session failed")]
    AfterFailure,
    /// The session holds a format a newer version wrote
    /// ([`formats`]): this node leaves it to one that reads it.
    #[error(
        "the session's {what} is format {found}; this node reads {what} formats up to {newest}"
    )]
    NewerFormat {
        what: formats::Stored,
        found: u64,
        newest: u32,
    },
    /// The database did not answer: refused or cut the connection, or
    /// gave no answer within [`Node::db_timeout`] (a blackhole, a
    /// partition). Nothing says whether a write in flight went in; the
    /// connection is thrown away, and waiting helps.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
}

impl StorageError {
    /// Whether this failure says the store itself is failing (and so
    /// counts toward the writer's hold and its giving up), rather than one
    /// write's own data or a write not tried.
    pub fn is_the_stores(&self) -> bool {
        !matches!(
            self,
            Self::Unstorable(_) | Self::AfterFailure | Self::NewerFormat { .. }
        )
    }
}

/// What a database error says failed: the store, or one row's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// The disk, or the database's size cap, is full.
    Full,
    /// The row's own data: the same write fails again, others go in.
    Row,
    /// The connection: the server shut it down, cancelled the statement
    /// (a timeout) or cannot take it now.
    Connection,
    /// Anything else: the store (or we do not know).
    Store,
}

/// A PostgreSQL error by its SQLSTATE: class `22` is a data exception
/// (`22021` a string holding U+0000 or bytes that are not UTF-8, `22P05`
/// an escape the database cannot hold, `22001` a string too long), and
/// `23514` a value a `CHECK` refuses; `53100` is a full disk. Class `08`
/// (connection exceptions), class `57` (the server shutting down or
/// restarting, `57P01`–`57P03`, or a statement cancelled by its timeout,
/// `57014`) and `25P03` (a transaction left open past its timeout) say
/// the connection is lost or the database unavailable.
fn postgres_failed(sqlstate: &str) -> Failed {
    if sqlstate == "53100" {
        Failed::Full
    } else if sqlstate.starts_with("08") || sqlstate.starts_with("57") || sqlstate == "25P03" {
        Failed::Connection
    } else if sqlstate.starts_with("22") || sqlstate == "23514" {
        Failed::Row
    } else {
        Failed::Store
    }
}

/// A SQLite error by its extended result code: `SQLITE_FULL` (13) is a
/// full disk or size cap; `SQLITE_TOOBIG` (18) a value past the length
/// limit, `SQLITE_MISMATCH` (20) a value of the wrong type, and the
/// `CHECK` (275) and `DATATYPE` (3091) kinds of `SQLITE_CONSTRAINT` a
/// value the schema refuses. Other constraints (a trigger's `RAISE`, a
/// foreign key at commit) stay the store's: they may fail whole batches.
fn sqlite_failed(extended: i32) -> Failed {
    match (extended & 0xff, extended) {
        (13, _) => Failed::Full,
        (18 | 20, _) | (_, 275 | 3091) => Failed::Row,
        _ => Failed::Store,
    }
}

impl From<sqlx::Error> for StorageError {
    fn from(e: sqlx::Error) -> Self {
        if unreachable(&e) {
            return Self::Unavailable(e.to_string());
        }
        let failed = e.as_database_error().map(|d| {
            let code = d.code().unwrap_or_default();
            if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                code.parse::<i32>().map_or(Failed::Store, sqlite_failed)
            } else {
                postgres_failed(&code)
            }
        });
        match failed {
            Some(Failed::Full) => Self::Full,
            Some(Failed::Connection) => Self::Unavailable(e.to_string()),
            Some(Failed::Row) => Self::Unstorable(e.to_string()),
            Some(Failed::Store) | None => Self::Database(e.to_string()),
        }
    }
}

/// Whether `e` says the database could not be reached or its connection
/// broke (rather than that it answered with an error).
fn unreachable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    )
}

/// Runs `f`, or fails with [`StorageError::Unavailable`] naming `what`
/// once `limit` has passed without an answer: a database behind a
/// blackhole never answers, and a server-side statement timeout cannot
/// end a wait for packets that never come.
pub(crate) async fn bounded<T>(
    limit: std::time::Duration,
    what: &str,
    f: impl Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    tokio::time::timeout(limit, f).await.unwrap_or_else(|_| {
        Err(StorageError::Unavailable(format!(
            "{what} got no answer within {} ms",
            limit.as_millis()
        )))
    })
}

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> Self {
        let failed = match &e {
            rusqlite::Error::SqliteFailure(f, _) => sqlite_failed(f.extended_code),
            _ => Failed::Store,
        };
        match failed {
            Failed::Full => Self::Full,
            Failed::Row => Self::Unstorable(e.to_string()),
            Failed::Store | Failed::Connection => Self::Database(e.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StorageError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Self::Database(e.to_string())
    }
}

/// Writes that may wait for the writer at once (the rows of one session's
/// step, [`Store::write_all`], count as one). Past it a write is refused
/// at once ([`StorageError::Overloaded`]) instead of growing memory; callers
/// stop taking new work well before (see [`Store::overloaded`]).
pub const MAX_QUEUED_WRITES: usize = 65_536;
/// Once this many writes wait, new turns, tool calls and sessions are
/// refused with `OVERLOADED` so the turns already running can finish.
pub const BUSY_QUEUED_WRITES: usize = MAX_QUEUED_WRITES / 2;
/// The reason given while writes wait too long ([`Store::refusing`]).
pub const STORAGE_BEHIND: &str = "storage is behind; try again soon";
/// The reason given when a session cannot be created for lack of room.
pub const STORAGE_FULL: &str = "storage is full; try again later";
/// The reason given just after a write failed ([`Store::refusing`]).
pub const STORAGE_FAILING: &str = "storage is failing to write; try again soon";
/// The reason given while the database cannot be reached.
pub const STORAGE_UNAVAILABLE: &str = "the database is unavailable; try again soon";

/// Told, after each commit, the highest seq of a session now durable.
///
/// Each sink has an id no other sink in this process ever gets, so the
/// writer can remember which stream of rows failed without mistaking a
/// later session (or a reload of the same one) for it.
#[derive(Clone)]
pub struct DurableSink {
    id: u64,
    /// The ownership the rows are written under; see [`Epoch`].
    epoch: Epoch,
    notify: Arc<dyn Fn(Result<u64, StorageError>) + Send + Sync>,
}

impl DurableSink {
    /// A sink for rows written under `epoch`.
    pub fn new(
        epoch: Epoch,
        notify: impl Fn(Result<u64, StorageError>) + Send + Sync + 'static,
    ) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            epoch,
            notify: Arc::new(notify),
        }
    }

    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// This stream of rows' id, never reused.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Tells the sink's owner how its writes went.
    pub fn notify(&self, result: Result<u64, StorageError>) {
        (self.notify)(result)
    }
}

/// The claim under which a node writes a session's rows.
///
/// On PostgreSQL every claim bumps the session's epoch, and every write
/// carries the epoch its session was claimed under: the database refuses it
/// once another node has claimed since. SQLite has one node, and no fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epoch {
    /// The only node on its database (SQLite).
    Sole,
    /// The n-th claim of the session (PostgreSQL).
    Claimed(i64),
}

/// A node of a deployment: its name and how long its claims last.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: NodeId,
    /// How long a claim holds without renewal: a node that dies keeps its
    /// sessions at most this long.
    pub lease: std::time::Duration,
    /// How long any one wait on the database may take (a read, a commit,
    /// a connect) before it fails as [`StorageError::Unavailable`] and its
    /// connection is thrown away.
    pub db_timeout: std::time::Duration,
}

impl Node {
    /// A node named `id` with claims of `lease` and the default
    /// [`DEFAULT_DB_TIMEOUT`].
    pub fn new(id: impl Into<NodeId>, lease: std::time::Duration) -> Self {
        Self {
            id: id.into(),
            lease,
            db_timeout: DEFAULT_DB_TIMEOUT,
        }
    }
}

/// Says how many sessions' tokens the store's start rewrote into their
/// stored form (`hash_stored_tokens`): a database that older versions
/// wrote.
fn hashed_tokens(rewritten: u64) {
    if rewritten > 0 {
        tracing::info!(sessions = rewritten, "session tokens stored as digests");
    }
}

/// The default of [`Node::db_timeout`] (`QUESTD_DATABASE_TIMEOUT_MS`).
pub const DEFAULT_DB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What is stored about a session besides its story.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    pub session_id: SessionId,
    pub tenant_id: TenantId,
    pub campaign_id: String,
    pub title: String,
    /// The session's own player token (the host's) as stored: its digest
    /// ([`crate::game::party::stored_token`]). Never the token itself,
    /// but in a row an older node wrote and this node's start has not
    /// rewritten yet; [`crate::game::party::opens_stored`] reads both.
    pub stored_player_token: String,
    /// The spectator token as stored: a private session's as its digest
    /// (as the player token), a public session's as itself, since the
    /// list of public sessions gives it to anyone. A private session's
    /// row an older node wrote holds the token itself until this node's
    /// start rewrites it; [`crate::game::party::opens_stored`] reads both.
    pub stored_spectator_token: String,
    pub created_at: i64,
    /// Whether the session is listed (with its spectator token) for anyone.
    pub visibility: Visibility,
    /// When an operator closed it for good (ms since the epoch); `None`
    /// while it is open. A closed session is never loaded again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<i64>,
    /// Created without a key: deleted once unplayed for the retention
    /// time (`QUESTD_ANONYMOUS_RETENTION_HOURS`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
}

/// Who may find a session in the list of live sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Known only to whoever holds its tokens (the default).
    #[default]
    Private,
    /// Listed by `GET /api/v1/sessions` with a watch link.
    Public,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::Public => "public",
        }
    }

    /// The stored spelling; anything unknown is private.
    pub fn from_stored(text: &str) -> Self {
        if text == "public" {
            Self::Public
        } else {
            Self::Private
        }
    }
}

/// One journal row: a story frame and what replay must apply for it.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRow {
    pub session_id: SessionId,
    pub seq: u64,
    pub turn_id: Option<TurnId>,
    pub kind: &'static str,
    pub request_id: Option<RequestId>,
    /// The frame exactly as sent to clients (the same bytes, shared).
    pub frame: bytestring::ByteString,
    /// JSON of the [`crate::game::Effect`] to apply, if any.
    pub effect: Option<String>,
    /// The [`crate::game::HistoryEntry`] to record, if any.
    pub history: Option<StoredHistory>,
    /// The applied-action entry, for tool calls that succeeded.
    pub action: Option<StoredAction>,
    pub created_at: i64,
    /// What the row's effect changes in the timer index, written in the
    /// same transaction as the row.
    pub timers: Vec<TimerIndex>,
}

/// A change to the store's timer index (docs/protocol.md §9): what the
/// sweeper reads to find a session whose timer is due while no node has
/// it loaded. Timer ids are the state's (`tmr_…`) and the round's
/// deadline ([`ROUND_TIMER`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerIndex {
    /// Due at `due_at`, inserted or moved.
    Due { timer_id: String, due_at: i64 },
    /// Due at `due_at` unless the index has it already (a round's
    /// deadline counts from its first action).
    DueUnlessSet { timer_id: String, due_at: i64 },
    /// Fired for good or cancelled.
    Gone { timer_id: String },
}

/// The index's id for a session's round deadline (docs/protocol.md §8).
pub const ROUND_TIMER: &str = "round";

/// How a journal row keeps its history entry: written out, or read back
/// from the row's frame, which already says it (`steps.rs` derives it
/// when the row is read, as the same JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum StoredHistory {
    /// The entry's JSON text.
    Json(String),
    /// The entry the frame says: a `turn_started` frame's `text` (the
    /// player's), a `tool_result` frame's `result` (a call that succeeded),
    /// a `turn_completed` frame's `reply` (the game master's); for a
    /// `tool_call` frame, the model's argument text `arguments`, which is
    /// JSON with nothing around it (the frame shows it parsed).
    FromFrame { arguments: Option<String> },
}

/// How a journal row keeps its applied action.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredAction {
    /// The action's JSON text.
    Json(String),
    /// The call its `tool_result` frame names (`call_id`, `tool`,
    /// `status`, `result`, `turn_id`) with these arguments (JSON text).
    FromFrame { args: String },
}

/// A journal row as read back for replay.
#[derive(Debug, Clone)]
pub struct StoredRow {
    pub seq: u64,
    pub turn_id: Option<TurnId>,
    pub request_id: Option<RequestId>,
    pub effect: Option<String>,
    pub history: Option<String>,
}

/// A journal row as a node tailing the session reads it: the frame, what
/// replay applies for it, and when it was written (ms since the epoch).
#[derive(Debug, Clone)]
pub struct TailRow {
    pub seq: u64,
    pub frame: String,
    pub effect: Option<String>,
    pub history: Option<String>,
    pub created_at: i64,
}

/// What a notice of journal commits names.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalNotice {
    /// New rows of these sessions are committed.
    Sessions(Vec<SessionId>),
    /// New rows of any session may be committed: too many to name, or
    /// notices were missed while the listening connection was down.
    Any,
}

pub use postgres::JournalNotices;

/// A snapshot to store: the state after journal row `seq`, as a manifest
/// and chunks (`crate::game::pieces`) or whole.
///
/// The store keeps a session's chunks by id. It writes `chunks` (those the
/// session does not know to be stored; one already there is left as it is),
/// replaces the snapshot unless a later one is stored, and then deletes the
/// session's chunks that `keep` does not name.
#[derive(Debug, Clone, Default)]
pub struct SnapshotWrite {
    pub seq: u64,
    /// The manifest, or a whole state.
    pub state: String,
    /// Chunks to store, as (id, body).
    pub chunks: Vec<(String, String)>,
    /// Every chunk id the manifest names.
    pub keep: Vec<String>,
}

/// A new session's first snapshot, as the hub hands it over.
#[derive(Debug, Clone)]
pub enum FirstSnapshot {
    /// The whole state's JSON, stored as the session's own (an inline
    /// campaign, or a built-in one the request changed).
    Whole(String),
    /// A start shared by every session that begins unchanged from it:
    /// stored once in `shared_starts` (in the commit of the first session
    /// that names it), and named by the session's row on SQLite
    /// (`start_id`, no snapshot row yet) or by its first snapshot on
    /// PostgreSQL ([`formats::shared_start_ref`]); loading reads it as the
    /// whole state.
    Shared(Arc<SharedStart>),
}

impl FirstSnapshot {
    /// The bytes of the state's JSON, what the session's state is counted
    /// as, however it is stored.
    pub fn state_len(&self) -> usize {
        match self {
            Self::Whole(text) => text.len(),
            Self::Shared(start) => start.text.len(),
        }
    }
}

/// What an imported save stores besides its state: its story as journal
/// rows (frames only: the state already holds what they did) and the
/// timer index of its pending timers.
#[derive(Debug, Clone, Default)]
pub struct ImportedStory {
    pub rows: Vec<JournalRow>,
    /// (timer_id, due_at) of every pending timer.
    pub timers: Vec<(String, i64)>,
}

impl ImportedStory {
    /// The seq of the story's last frame, which the state is the state
    /// after (0 for a story without frames).
    pub fn last_seq(&self) -> u64 {
        self.rows.last().map_or(0, |r| r.seq)
    }
}

/// Everything needed to bring a session back.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    pub meta: SessionMeta,
    /// The snapshot's seq and JSON (a manifest or a whole state).
    pub snapshot_seq: u64,
    pub snapshot: String,
    /// The session's stored snapshot chunks, by id, read with the snapshot.
    pub snapshot_chunks: HashMap<String, String>,
    /// Journal rows after the snapshot, in seq order.
    pub rows: Vec<StoredRow>,
    /// The last frames (seq, JSON), oldest first, for resume.
    pub recent_frames: Vec<(u64, String)>,
    /// A turn that started and never ended (the server stopped during it).
    pub open_turn: Option<TurnId>,
    /// Chats acknowledged while a turn ran whose turns have not started,
    /// oldest first.
    pub queued: Vec<QueuedChat>,
    /// Stored chats whose turns started, their rows left behind by a crash
    /// between the two: the session deletes them as it starts.
    pub started_chats: Vec<TurnId>,
}

impl LoadedSession {
    /// The bytes of save state this read holds: the snapshot, its chunks
    /// and what the later rows apply; what the session counts for against
    /// `QUESTD_MAX_LIVE_STATE_MB`.
    pub fn state_bytes(&self) -> u64 {
        let chunks: usize = self.snapshot_chunks.values().map(String::len).sum();
        let rows: usize = self
            .rows
            .iter()
            .map(|r| {
                r.effect.as_ref().map_or(0, String::len) + r.history.as_ref().map_or(0, String::len)
            })
            .sum();
        (self.snapshot.len() + chunks + rows) as u64
    }
}

/// A chat taken while a turn ran, stored before it is acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedChat {
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub turn_no: u64,
    pub request_id: Option<RequestId>,
    pub text: String,
    /// The session's last seq when it was taken: its turn starts after it.
    pub after_seq: u64,
    pub created_at: i64,
    /// The seat that spoke it: its turn acts for that seat's character.
    pub seat_id: SeatId,
}

/// A journal or audit row of a session, queued with the others of its step
/// ([`Store::write_all`]).
pub enum SessionWrite {
    Row(JournalRow),
    Audit(AuditRow),
}

/// One row of the audit ledger: a tool call from any caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    /// Set by the database; ignored on write.
    #[serde(default)]
    pub audit_id: i64,
    pub session_id: Option<SessionId>,
    pub tenant_id: TenantId,
    pub trace_id: TraceId,
    pub turn_id: Option<TurnId>,
    pub call_id: Option<CallId>,
    pub tool: String,
    pub role: String,
    /// SHA-256 of the arguments as canonical JSON (keys sorted), hex.
    pub args_hash: String,
    pub status: String,
    pub reason: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub duration_us: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// The service context of a call from another service (HTTP tool API,
    /// MCP); empty for the game loop and players.
    pub site_id: Option<SiteId>,
    pub span_id: Option<String>,
    pub user_id: Option<String>,
}

/// A site as stored: its campaign's content plus what its tools wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteRow {
    pub tenant_id: TenantId,
    pub site_id: SiteId,
    pub campaign_id: String,
    /// The campaign's title: the site's name (`get_site_map`'s `site_name`).
    pub title: String,
    /// The site's save state as JSON ([`crate::game::GameState`]).
    pub state: String,
    /// Grows by one with every write.
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A stored idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    pub tool: String,
    /// SHA-256 of the call's input, as its audit row has it.
    pub request_hash: String,
    /// The first call's answer, once it has one: HTTP status and body.
    pub answer: Option<(u16, String)>,
    pub created_at: i64,
}

/// A page of the audit ledger.
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditRow>,
    pub next_after_id: Option<i64>,
}

/// A page of the applied-actions log.
#[derive(Debug, Clone, Serialize)]
pub struct ActionPage {
    pub actions: Vec<Value>,
    pub next_after_seq: Option<u64>,
}

/// The database: a read pool plus the queue into the writer task.
#[derive(Clone)]
pub struct Store {
    reads: Reads,
    writes: Writes,
    node: Node,
}

/// The read pool, of whichever database the URL named.
#[derive(Clone)]
enum Reads {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

/// Runs the dialect's copy of a shared query (see `sql.rs`): a function
/// of the dialect's module, or (`.query(…)`) a method of a trait in scope
/// that both read pools implement. Bounded by [`Node::db_timeout`].
macro_rules! read {
    ($self:ident, $query:ident($($arg:expr),*)) => {
        $self.bounded(stringify!($query), async {
            match &$self.reads {
                Reads::Sqlite(pool) => sqlite::$query(pool, $($arg),*).await,
                Reads::Postgres(pool) => postgres::$query(pool, $($arg),*).await,
            }
        }).await
    };
    ($self:ident, .$query:ident($($arg:expr),*)) => {
        $self.bounded(stringify!($query), async {
            match &$self.reads {
                Reads::Sqlite(pool) => pool.$query($($arg),*).await,
                Reads::Postgres(pool) => pool.$query($($arg),*).await,
            }
        }).await
    };
}

// After `read!`, which it uses.
mod records;

impl Store {
    /// Opens the database at `url` (`sqlite://PATH`, or
    /// `postgres://user:pass@host:port/db`) as a node named `local`, runs
    /// migrations and starts the writer on the current arbiter.
    pub async fn open(url: &str) -> Result<Self, StorageError> {
        let node = Node::new("local", std::time::Duration::from_secs(3));
        Self::open_with(url, Arc::default(), None, node).await
    }

    /// [`Store::open`] as `node`, with the writer's commit sizes and times
    /// recorded in `metrics`.
    ///
    /// `max_mb` caps an SQLite database's size: past it every write fails
    /// as on a full disk. PostgreSQL's room is its operator's to set.
    pub async fn open_with(
        url: &str,
        metrics: Arc<Metrics>,
        max_mb: Option<u64>,
        node: Node,
    ) -> Result<Self, StorageError> {
        if let Some(problem) = url_problem(url) {
            return Err(StorageError::Database(problem));
        }
        if is_postgres(url) {
            if max_mb.is_some() {
                return Err(StorageError::Database(
                    "QUESTD_DATABASE_MAX_MB applies to SQLite only".into(),
                ));
            }
            let (pool, committer) = postgres::open(url, node.clone()).await?;
            Ok(Self {
                reads: Reads::Postgres(pool),
                writes: Writes::start(committer, metrics),
                node,
            })
        } else {
            let (pool, committer) = sqlite::open(url, max_mb).await?;
            Ok(Self {
                reads: Reads::Sqlite(pool),
                writes: Writes::start(committer, metrics),
                node,
            })
        }
    }

    /// This node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Runs `f` within [`Node::db_timeout`] (see [`bounded`]).
    async fn bounded<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, StorageError>>,
    ) -> Result<T, StorageError> {
        bounded(self.node.db_timeout, what, f).await
    }

    /// Whether several nodes may share this database (PostgreSQL): sessions
    /// are then claimed before they run.
    pub fn is_shared(&self) -> bool {
        matches!(self.reads, Reads::Postgres(_))
    }

    /// Claims `session_id` for this node: answers the epoch its writes must
    /// carry and whether the claim took it from another node, or `None`
    /// while another node's claim on it is alive.
    pub async fn claim(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<(Epoch, bool)>, StorageError> {
        match &self.reads {
            Reads::Sqlite(_) => Ok(Some((Epoch::Sole, false))),
            Reads::Postgres(pool) => Ok(self
                .bounded("a claim", postgres::claim(pool, session_id, &self.node))
                .await?
                .map(|(epoch, taken)| (Epoch::Claimed(epoch), taken))),
        }
    }

    /// Renews this node's claims on `sessions` at once; answers the ones it
    /// no longer holds (another node claimed them): they must stop now.
    /// A renewal that takes a lease is of no use: it gives up then at the
    /// latest, so the next one can try.
    pub async fn renew(
        &self,
        sessions: &[(SessionId, Epoch)],
    ) -> Result<Vec<SessionId>, StorageError> {
        match &self.reads {
            Reads::Sqlite(_) => Ok(Vec::new()),
            Reads::Postgres(pool) => {
                let limit = self.node.db_timeout.min(self.node.lease);
                bounded(
                    limit,
                    "a lease renewal",
                    postgres::renew(pool, sessions, &self.node),
                )
                .await
            }
        }
    }

    /// Gives up this node's claim on a session it stopped running, so
    /// another node may take it at once rather than after the lease.
    pub async fn release(&self, session_id: &SessionId, epoch: Epoch) -> Result<(), StorageError> {
        match (&self.reads, epoch) {
            (Reads::Postgres(pool), Epoch::Claimed(n)) => {
                let release = postgres::release(pool, session_id, n, &self.node);
                self.bounded("a release", release).await
            }
            _ => Ok(()),
        }
    }

    /// Records where other nodes reach this one (`QUESTD_NODE_URL`).
    pub async fn announce(&self, url: &str) -> Result<(), StorageError> {
        match &self.reads {
            Reads::Sqlite(_) => Ok(()),
            Reads::Postgres(pool) => {
                let announce = postgres::announce(pool, &self.node, url);
                self.bounded("announcing the node", announce).await
            }
        }
    }

    /// The node running `session_id` and where to reach it, while its claim
    /// is alive (PostgreSQL).
    pub async fn owner_address(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<(NodeId, String)>, StorageError> {
        match &self.reads {
            Reads::Sqlite(_) => Ok(None),
            Reads::Postgres(pool) => {
                let owner = postgres::owner_address(pool, session_id);
                self.bounded("reading an owner", owner).await
            }
        }
    }

    /// The secret the nodes of this database show each other; `fresh`
    /// becomes it if there is none yet.
    pub async fn cluster_secret(&self, fresh: &str) -> Result<String, StorageError> {
        match &self.reads {
            Reads::Sqlite(_) => Ok(fresh.to_owned()),
            Reads::Postgres(pool) => {
                let secret = postgres::cluster_secret(pool, fresh);
                self.bounded("reading the cluster secret", secret).await
            }
        }
    }

    /// The node whose claim on `session_id` is alive, if any (PostgreSQL;
    /// on SQLite the caller knows whether it runs the session).
    pub async fn owner(&self, session_id: &SessionId) -> Result<Option<NodeId>, StorageError> {
        match &self.reads {
            Reads::Sqlite(_) => Ok(None),
            Reads::Postgres(pool) => {
                let owner = postgres::owner(pool, session_id);
                self.bounded("reading an owner", owner).await
            }
        }
    }

    /// Queues a journal row; `sink` hears when it (and everything before it)
    /// is durable.
    pub fn append(&self, row: JournalRow, sink: DurableSink) {
        self.writes.append(row, sink)
    }

    /// Queues the journal and audit rows one step of a session made, in
    /// order, so that they go into the same group commit; `sink` hears
    /// when the journal rows are durable.
    pub fn write_all(&self, writes: Vec<SessionWrite>, sink: &DurableSink) {
        self.writes.write_all(writes, sink)
    }

    /// Why new work should be refused now, if it should: so many writes
    /// wait that the turns already running need the room, or a write
    /// failed moments ago (a full disk, a locked or broken database).
    /// Callers answer `OVERLOADED` with this reason; sessions take work
    /// again by themselves once storage writes again.
    pub fn refusing(&self) -> Option<&'static str> {
        self.writes.refusing()
    }

    /// Queues a snapshot written under `epoch`; if `done` is given it hears
    /// when it is durable.
    pub fn snapshot(
        &self,
        session_id: &SessionId,
        epoch: Epoch,
        snapshot: SnapshotWrite,
        done: Option<oneshot::Sender<Result<(), StorageError>>>,
    ) {
        self.writes.snapshot(session_id, epoch, snapshot, done)
    }

    /// Stores a chat taken while a turn runs, written under `epoch`; `done`
    /// hears once it is durable (then it may be acknowledged).
    pub fn enqueue(
        &self,
        chat: QueuedChat,
        epoch: Epoch,
        done: oneshot::Sender<Result<(), StorageError>>,
    ) {
        self.writes.enqueue(chat, epoch, done)
    }

    /// Forgets a stored chat whose turn has started (its `turn_started` is
    /// queued before this).
    pub fn dequeue(&self, session_id: &SessionId, turn_id: &TurnId, epoch: Epoch) {
        self.writes.dequeue(session_id, turn_id, epoch)
    }

    /// Queues an audit row. Audit rows ride in the same group commits as the
    /// journal; nobody waits for them.
    pub fn audit(&self, row: AuditRow) {
        self.writes.audit(row)
    }

    /// Returns once every write queued before the call has been committed
    /// or has failed: a server that stops waits for this, so nothing it
    /// queued is still on its way when it says it has stopped.
    pub async fn settled(&self) {
        self.writes.settled().await
    }

    /// Stores a new session and its opening snapshot; returns once durable.
    pub async fn create_session(
        &self,
        meta: SessionMeta,
        snapshot: FirstSnapshot,
    ) -> Result<(), StorageError> {
        self.writes.create_session(meta, snapshot, None).await
    }

    /// Stores a session imported from a save: its state (JSON) as the
    /// snapshot after the story's last frame, the story as its journal and
    /// its pending timers in the index, in one commit; returns once
    /// durable. It loads as a session stored before a restart does.
    pub async fn import_session(
        &self,
        meta: SessionMeta,
        state: String,
        story: ImportedStory,
    ) -> Result<(), StorageError> {
        self.writes
            .create_session(meta, FirstSnapshot::Whole(state), Some(Box::new(story)))
            .await
    }

    /// Every audit row of one trace of a tenant, oldest first (at most
    /// `limit`).
    pub async fn audit_by_trace(
        &self,
        tenant_id: &TenantId,
        trace_id: &TraceId,
        limit: u32,
    ) -> Result<Vec<AuditRow>, StorageError> {
        read!(self, audit_by_trace(tenant_id, trace_id, limit))
    }

    /// A page of a session's audit ledger, oldest first.
    pub async fn audit_page(
        &self,
        session_id: &SessionId,
        after_id: i64,
        limit: u32,
    ) -> Result<AuditPage, StorageError> {
        read!(self, audit_page(session_id, after_id, limit))
    }

    pub async fn session_meta(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<SessionMeta>, StorageError> {
        read!(self, session_meta(session_id))
    }

    /// Reads what replay needs: meta, latest snapshot, later rows, recent
    /// frames.
    pub async fn load_session(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<LoadedSession>, StorageError> {
        read!(self, load_session(session_id))
    }

    /// The stored frames after `after_seq`, oldest first, at most `limit`
    /// of them and `max_chars` characters in all.
    pub async fn frames_after(
        &self,
        session_id: &SessionId,
        after_seq: u64,
        limit: u32,
        max_chars: u64,
    ) -> Result<Vec<(u64, String)>, StorageError> {
        let rows = self
            .journal_after(session_id, after_seq, limit, max_chars)
            .await?;
        Ok(rows.into_iter().map(|r| (r.seq, r.frame)).collect())
    }

    /// The journal rows after `after_seq` with what replay applies for
    /// them, oldest first, bounded as [`Store::frames_after`]: what a node
    /// tailing the session reads.
    pub async fn journal_after(
        &self,
        session_id: &SessionId,
        after_seq: u64,
        limit: u32,
        max_chars: u64,
    ) -> Result<Vec<TailRow>, StorageError> {
        read!(self, journal_after(session_id, after_seq, limit, max_chars))
    }

    /// Notices of journal commits made by any node (PostgreSQL; `None` on
    /// SQLite, where this node is the only writer).
    pub async fn journal_notices(&self) -> Option<Result<JournalNotices, StorageError>> {
        match &self.reads {
            Reads::Sqlite(_) => None,
            Reads::Postgres(pool) => Some(postgres::JournalNotices::listen(pool, &self.node).await),
        }
    }

    /// Request ids of the most recent turns that started, newest first:
    /// a chat's with its turn, and a resolved round's actions' with the
    /// ids they were acknowledged with (docs/protocol.md §8).
    pub async fn recent_request_ids(
        &self,
        session_id: &SessionId,
        limit: i64,
    ) -> Result<Vec<(RequestId, TurnId)>, StorageError> {
        read!(self, recent_request_ids(session_id, limit))
    }

    /// The frame that ended a turn (`turn_completed` or `turn_failed`), if
    /// the turn has ended.
    pub async fn turn_end_frame(
        &self,
        session_id: &SessionId,
        turn_id: &TurnId,
    ) -> Result<Option<String>, StorageError> {
        read!(self, turn_end_frame(session_id, turn_id))
    }

    /// Anonymous sessions ([`SessionMeta::anonymous`]) neither created
    /// nor played since `before_ms`, and (several nodes) not held by a
    /// live claim: oldest first, at most `limit`.
    pub async fn abandoned_sessions(
        &self,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<SessionId>, StorageError> {
        self.bounded("reading abandoned sessions", async {
            match &self.reads {
                Reads::Sqlite(pool) => sqlite::abandoned_sessions(pool, before_ms, limit).await,
                Reads::Postgres(pool) => postgres::abandoned_sessions(pool, before_ms, limit).await,
            }
        })
        .await
    }

    /// Open sessions with a timer due at `now_ms` or before (and, with
    /// several nodes, no live claim on them), with their soonest due time:
    /// soonest first, at most `limit`. What the timer sweeper loads.
    pub async fn due_timers(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<(SessionId, i64)>, StorageError> {
        read!(self, due_timers(now_ms, limit))
    }

    /// Open sessions holding a stored chat that was acknowledged and has
    /// not run (and, with several nodes, no live claim on them), with the
    /// oldest such chat's time: oldest first, at most `limit`. A session
    /// that stopped with chats queued (its storage failed, its node died)
    /// is loaded for them by the sweeper, as for a due timer.
    pub async fn waiting_chats(&self, limit: u32) -> Result<Vec<(SessionId, i64)>, StorageError> {
        read!(self, waiting_chats(limit))
    }

    /// Every timer in the store's index, of every session.
    pub async fn count_timers(&self) -> Result<i64, StorageError> {
        self.bounded("counting timers", async {
            match &self.reads {
                Reads::Sqlite(pool) => Ok(sqlx::query_scalar(sql::COUNT_TIMERS)
                    .fetch_one(pool)
                    .await?),
                Reads::Postgres(pool) => Ok(sqlx::query_scalar(sql::COUNT_TIMERS)
                    .fetch_one(pool)
                    .await?),
            }
        })
        .await
    }

    /// A page of the applied-actions log, oldest first.
    pub async fn actions(
        &self,
        session_id: &SessionId,
        after_seq: u64,
        limit: u32,
    ) -> Result<ActionPage, StorageError> {
        read!(self, actions(session_id, after_seq, limit))
    }
}

/// Whether `url` names a PostgreSQL database.
/// Why `url` names no database questd can use, if it does not: empty, or
/// of a scheme other than SQLite's and PostgreSQL's (SQLite also takes a
/// bare path, as `questd.db`). Says the scheme, never the rest of the URL.
fn url_problem(url: &str) -> Option<String> {
    const FORMS: &str = "sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB";
    if url.trim().is_empty() {
        return Some(format!(
            "QUESTD_DATABASE_URL is empty: name a database, {FORMS}"
        ));
    }
    let (scheme, _) = url.split_once("://")?;
    if scheme == "sqlite" || is_postgres(url) {
        return None;
    }
    let plain = scheme.len() <= 32
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    Some(if plain {
        format!("QUESTD_DATABASE_URL names a {scheme:?} database: questd stores in {FORMS}")
    } else {
        format!("QUESTD_DATABASE_URL is {FORMS}")
    })
}

pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Formats epoch milliseconds as RFC 3339 UTC (`2026-11-25T21:56:40.123Z`).
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::civil::date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_of_another_scheme_or_none_is_refused_by_its_scheme_alone() {
        for fine in [
            "sqlite://questd.db",
            "sqlite:///var/lib/questd/questd.db?mode=rwc",
            "questd.db",
            "postgres://u:p@h:5432/db",
            "postgresql://u:p@h/db",
        ] {
            assert_eq!(url_problem(fine), None, "{fine}");
        }
        let problem = url_problem("mysql://root:hunter2@db.internal/game").expect("refused");
        assert!(problem.contains(r#""mysql""#), "{problem}");
        assert!(
            !problem.contains("hunter2") && !problem.contains("db.internal"),
            "{problem}"
        );
        assert!(url_problem("  ").expect("refused").contains("is empty"));
        let odd = url_problem("my sql://x:secret@h").expect("refused");
        assert!(!odd.contains("secret") && !odd.contains("my sql"), "{odd}");
    }

    /// Which database errors are one row's and which the store's.
    #[test]
    fn database_errors_are_classified_by_code() {
        for (sqlstate, failed) in [
            ("22021", Failed::Row),
            ("22P05", Failed::Row),
            ("22001", Failed::Row),
            ("23514", Failed::Row),
            ("53100", Failed::Full),
            ("23505", Failed::Store),
            ("P0001", Failed::Store),
            ("40001", Failed::Store),
            ("57P01", Failed::Connection),
            ("57014", Failed::Connection),
            ("08006", Failed::Connection),
            ("25P03", Failed::Connection),
            ("25P02", Failed::Store),
            ("", Failed::Store),
        ] {
            assert_eq!(postgres_failed(sqlstate), failed, "{sqlstate}");
        }
        for (code, failed) in [
            (13, Failed::Full),
            (18, Failed::Row),
            (20, Failed::Row),
            (275, Failed::Row),
            (3091, Failed::Row),
            (19, Failed::Store),
            (787, Failed::Store),
            (1811, Failed::Store),
            (2067, Failed::Store),
            (5, Failed::Store),
            (10, Failed::Store),
        ] {
            assert_eq!(sqlite_failed(code), failed, "{code}");
        }
    }

    /// Real SQLite errors: a value its schema refuses is the row's, a
    /// trigger's `RAISE` the store's; U+0000 itself is stored.
    #[test]
    fn sqlite_says_which_writes_fail_for_their_own_data() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE checked (v INTEGER CHECK (v > 0));
             CREATE TABLE keyed (id INTEGER PRIMARY KEY);
             CREATE TABLE strict (v INTEGER) STRICT;
             CREATE TABLE raised (v INTEGER);
             CREATE TABLE texts (t TEXT NOT NULL);
             CREATE TRIGGER raise AFTER INSERT ON raised BEGIN SELECT RAISE(ABORT, 'no'); END;",
        )
        .unwrap();
        let error = |sql: &str| StorageError::from(conn.execute(sql, []).unwrap_err());
        for sql in [
            "INSERT INTO checked VALUES (0)",
            "INSERT INTO keyed VALUES ('x')",
            "INSERT INTO strict VALUES ('x')",
        ] {
            let e = error(sql);
            assert!(matches!(e, StorageError::Unstorable(_)), "{sql}: {e:?}");
            assert!(!e.is_the_stores());
        }
        let e = error("INSERT INTO raised VALUES (1)");
        assert!(matches!(e, StorageError::Database(_)), "{e:?}");
        assert!(e.is_the_stores());
        conn.execute("INSERT INTO texts VALUES (?1)", ["T\u{0}"])
            .unwrap();
        assert!(!StorageError::AfterFailure.is_the_stores());
    }

    #[test]
    fn a_loaded_session_counts_its_snapshot_chunks_and_later_rows() {
        let row = |effect: Option<&str>, history: Option<&str>| StoredRow {
            seq: 1,
            turn_id: None,
            request_id: None,
            effect: effect.map(str::to_owned),
            history: history.map(str::to_owned),
        };
        let loaded = LoadedSession {
            meta: SessionMeta {
                session_id: "s".into(),
                tenant_id: "default".into(),
                campaign_id: "demo".into(),
                title: "T".into(),
                stored_player_token: "p".into(),
                stored_spectator_token: "w".into(),
                created_at: 0,
                visibility: Visibility::Private,
                closed_at: None,
                anonymous: true,
            },
            snapshot_seq: 0,
            snapshot: "0123456789".into(),
            snapshot_chunks: HashMap::from([("a".to_owned(), "abcd".to_owned())]),
            rows: vec![row(Some("ef"), None), row(None, Some("hist"))],
            recent_frames: vec![(1, "not state".into())],
            open_turn: None,
            queued: Vec::new(),
            started_chats: Vec::new(),
        };
        assert_eq!(loaded.state_bytes(), 10 + 4 + 2 + 4);
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_795_651_000_000), "2026-11-25T23:56:40.000Z");
    }
}
