//! Settings: one clap struct; every field has a `--flag` and a `QUESTD_*`
//! environment variable (docs/protocol.md §8: the names are fixed, as
//! scripts outside questd use them).

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::backup::BackupArgs;
pub use crate::loadtest::LoadtestArgs;

#[derive(Debug, Parser)]
#[command(
    name = "questd",
    version,
    about = "Hosts AI game-master sessions and streams them over WebSockets"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

// Parsed once at start; boxing the load test's flags would save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve,
    /// Drive a running server over real WebSockets, check what it sends and
    /// report throughput and latency (exits non-zero on any error or
    /// protocol violation).
    Loadtest(LoadtestArgs),
    /// Write a consistent copy of the SQLite database while the server
    /// runs (`--to PATH`), checked before it is named; on PostgreSQL, say
    /// which of its tools to use.
    Backup(BackupArgs),
}

/// A key or password from the settings. Its `Debug` never shows it, so
/// printing the settings (or a struct that holds one) cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that must use it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LlmProvider {
    /// The built-in rule-based game master; needs no model.
    Offline,
    /// Any OpenAI-compatible endpoint.
    Openai,
}

/// How a real model asks for tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ToolMode {
    /// The endpoint's own tool calling (`tools`, `tool_calls`).
    Native,
    /// The JSON reply contract: the model answers one JSON object that holds
    /// its text and tool calls.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Pretty,
}

/// Parses a number of hours: finite, not negative, at most ten years.
fn parse_hours(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(h) if h.is_finite() && (0.0..=87_600.0).contains(&h) => Ok(h),
        _ => Err(format!("{text:?} is not a number of hours from 0 to 87600")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Address to listen on.
    #[arg(
        long,
        env = "QUESTD_BIND",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub bind: String,
    /// `sqlite://PATH` (embedded, one node) or
    /// `postgres://user:pass@host:port/db` (one or several nodes).
    #[arg(
        long,
        env = "QUESTD_DATABASE_URL",
        default_value = "sqlite://questd.db",
        global = true
    )]
    pub database_url: String,
    /// Largest the database may grow, in MiB (default: no cap but the
    /// disk's). Past it writes fail as on a full disk: sessions refuse new
    /// work, nothing acknowledged is lost, and play resumes once the cap is
    /// raised or room is made.
    #[arg(long, env = "QUESTD_DATABASE_MAX_MB", global = true)]
    pub database_max_mb: Option<u64>,
    /// This node's name among the nodes on one PostgreSQL database
    /// (default: generated, stable for the process).
    #[arg(long, env = "QUESTD_NODE_ID", global = true)]
    pub node_id: Option<String>,
    /// Where the other nodes of the database reach this one, e.g.
    /// `http://10.0.0.5:8080` (default: `http://` and the bound address;
    /// set it when binding `0.0.0.0`).
    #[arg(long, env = "QUESTD_NODE_URL", global = true)]
    pub node_url: Option<String>,
    /// How long, in milliseconds, a node's claim on a session lasts without
    /// renewal: a node that dies keeps its sessions at most this long
    /// (PostgreSQL; renewed every third of it).
    #[arg(
        long,
        env = "QUESTD_LEASE_MS",
        default_value_t = 3000,
        value_parser = clap::value_parser!(u64).range(300..=600_000),
        global = true
    )]
    pub lease_ms: u64,
    /// How long, in milliseconds, any one wait on the database may take
    /// (a read, a commit, a claim, connecting) before it fails and its
    /// connection is thrown away (default 5000): a database behind a
    /// partition or a blackhole never answers, and sessions must not wait
    /// on it forever.
    #[arg(
        long,
        env = "QUESTD_DATABASE_TIMEOUT_MS",
        default_value_t = 5000,
        value_parser = clap::value_parser!(u64).range(100..=600_000),
        global = true
    )]
    pub database_timeout_ms: u64,
    /// Which model runs the game.
    #[arg(
        long,
        env = "QUESTD_LLM_PROVIDER",
        value_enum,
        default_value = "offline",
        global = true
    )]
    pub llm_provider: LlmProvider,
    /// Base URL of an OpenAI-compatible endpoint, e.g. `http://127.0.0.1:11434/v1`.
    #[arg(long, env = "QUESTD_LLM_BASE_URL", global = true)]
    pub llm_base_url: Option<String>,
    /// Model name sent to the endpoint.
    #[arg(long, env = "QUESTD_LLM_MODEL", global = true)]
    pub llm_model: Option<String>,
    /// Bearer key for the endpoint; never logged.
    #[arg(
        long,
        env = "QUESTD_LLM_API_KEY",
        hide_env_values = true,
        global = true
    )]
    pub llm_api_key: Option<Secret>,
    /// Milliseconds one model call may take before it fails as
    /// `AI_TIMEOUT` (the seeds' `llm.api.timeout`; a call is retried by the
    /// provider's own rules within the turn's deadline).
    #[arg(
        long,
        env = "QUESTD_LLM_TIMEOUT_MS",
        default_value_t = 60_000,
        value_parser = clap::value_parser!(u64).range(100..=600_000),
        global = true
    )]
    pub llm_timeout_ms: u64,
    /// Stream the model's answer (`false` asks for one whole JSON reply).
    #[arg(
        long,
        env = "QUESTD_LLM_STREAM",
        default_value_t = true,
        action = clap::ArgAction::Set,
        global = true
    )]
    pub llm_stream: bool,
    /// How the model asks for tools: `native` (the endpoint's tool calling)
    /// or `json` (the JSON reply contract, for models without tool calling).
    #[arg(
        long,
        env = "QUESTD_LLM_TOOL_MODE",
        value_enum,
        default_value = "native",
        global = true
    )]
    pub llm_tool_mode: ToolMode,
    /// Base URL of a second OpenAI-compatible endpoint that answers the
    /// rest of a turn when the first fails after its retries or its
    /// breaker is open (`openai` provider only).
    #[arg(long, env = "QUESTD_LLM_FALLBACK_BASE_URL", global = true)]
    pub llm_fallback_base_url: Option<String>,
    /// Model name sent to the fallback endpoint.
    #[arg(long, env = "QUESTD_LLM_FALLBACK_MODEL", global = true)]
    pub llm_fallback_model: Option<String>,
    /// Bearer key for the fallback endpoint; never logged.
    #[arg(
        long,
        env = "QUESTD_LLM_FALLBACK_API_KEY",
        hide_env_values = true,
        global = true
    )]
    pub llm_fallback_api_key: Option<Secret>,
    /// Model tokens (prompt + completion) each session may spend per UTC
    /// day; unset: no budget.
    #[arg(long, env = "QUESTD_BUDGET_SESSION_TOKENS", value_parser = clap::value_parser!(u64).range(1..), global = true)]
    pub budget_session_tokens: Option<u64>,
    /// Model tokens all sessions of one tenant may spend per UTC day.
    #[arg(long, env = "QUESTD_BUDGET_TENANT_TOKENS", value_parser = clap::value_parser!(u64).range(1..), global = true)]
    pub budget_tenant_tokens: Option<u64>,
    /// Model tokens this node may spend per UTC day.
    #[arg(long, env = "QUESTD_BUDGET_NODE_TOKENS", value_parser = clap::value_parser!(u64).range(1..), global = true)]
    pub budget_node_tokens: Option<u64>,
    /// Estimated tokens of chat history sent to the model per call; older
    /// turns are summarized and dropped past it (0: no limit).
    #[arg(
        long,
        env = "QUESTD_HISTORY_TOKENS",
        default_value_t = 6000,
        global = true
    )]
    pub history_tokens: usize,
    /// The key trusted internal services present in `X-Internal-API-Key`:
    /// it acts for any tenant, named by `X-Tenant-ID`. The tool API and MCP
    /// need it or a tenant key. Never logged.
    #[arg(
        long,
        env = "QUESTD_INTERNAL_API_KEY",
        hide_env_values = true,
        global = true
    )]
    pub internal_api_key: Option<Secret>,
    /// Keys of single tenants, `tenant:key,tenant:key`: each works like the
    /// internal key for its own tenant only. Never logged.
    #[arg(
        long,
        env = "QUESTD_TENANT_KEYS",
        hide_env_values = true,
        global = true
    )]
    pub tenant_keys: Option<Secret>,
    /// Origins, besides the server's own, whose pages may open WebSockets
    /// and send state-changing requests (comma-separated, e.g.
    /// `https://game.example`).
    #[arg(long, env = "QUESTD_ALLOWED_ORIGINS", global = true)]
    pub allowed_origins: Option<String>,
    /// Host names (with or without a port) requests may name in `Host`,
    /// against DNS rebinding (comma-separated; `*` allows any). Default:
    /// `localhost`, `127.0.0.1` and `[::1]` when bound to loopback, the
    /// bound address otherwise, and any host when bound to every address.
    #[arg(long, env = "QUESTD_ALLOWED_HOSTS", global = true)]
    pub allowed_hosts: Option<String>,
    /// Addresses of reverse proxies whose `X-Forwarded-For` names the
    /// client (comma-separated IPs); per-address limits then count the
    /// address it names instead of the proxy's.
    #[arg(long, env = "QUESTD_TRUSTED_PROXIES", global = true)]
    pub trusted_proxies: Option<String>,
    /// The address players reach this server at, `scheme://host[:port]`
    /// (e.g. `https://game.example`): the links that carry tokens
    /// (`ws_url`, `play_url`, `watch_url`) are built on it. Unset, they are
    /// built on the request's `Host` (one `QUESTD_ALLOWED_HOSTS` allows)
    /// with `http`/`ws`, or on what a proxy of `QUESTD_TRUSTED_PROXIES`
    /// forwards; a client's own `X-Forwarded-*` or `Forwarded` never
    /// counts. A value that is not such an address stops startup.
    #[arg(long, env = "QUESTD_PUBLIC_URL", global = true)]
    pub public_url: Option<String>,
    /// Tools no caller may use, comma-separated (e.g. `generate_zone,hp_delta`):
    /// a call answers `TOOL_DISABLED` (HTTP 403 on the tool API), and no
    /// tool listing shows them. A name that is no tool refuses to start.
    #[arg(long, env = "QUESTD_DISABLED_TOOLS", global = true)]
    pub disabled_tools: Option<String>,
    /// Milliseconds every tool may run before its result (and any effect)
    /// is thrown away as `TIMEOUT` (the seeds' `tool.execution.timeout`).
    #[arg(
        long,
        env = "QUESTD_TOOL_TIMEOUT_MS",
        default_value_t = 2000,
        value_parser = clap::value_parser!(u64).range(10..=60_000),
        global = true
    )]
    pub tool_timeout_ms: u64,
    /// Sessions one client address may create per minute without a key.
    #[arg(
        long,
        env = "QUESTD_CREATE_PER_MINUTE",
        default_value_t = 60,
        global = true
    )]
    pub create_per_minute: u32,
    /// Sessions one client address may create at once before the rate
    /// applies (without a key).
    #[arg(long, env = "QUESTD_CREATE_BURST", default_value_t = 20, global = true)]
    pub create_burst: u32,
    /// Live sessions this node holds at most; creating or loading more is
    /// `503` until some unload.
    #[arg(
        long,
        env = "QUESTD_MAX_SESSIONS",
        default_value_t = 20_000,
        global = true
    )]
    pub max_sessions: usize,
    /// Live sessions one tenant may hold on this node (default: a quarter
    /// of `QUESTD_MAX_SESSIONS`, at least 1); creating or loading more is
    /// `429 RATE_LIMITED` until some unload, so one key cannot take every
    /// slot. The internal key's tenant `default` counts like any tenant.
    #[arg(long, env = "QUESTD_MAX_SESSIONS_PER_TENANT", global = true)]
    pub max_sessions_per_tenant: Option<usize>,
    /// Sessions one tenant may create per minute with a key (with bursts of
    /// `QUESTD_KEY_CREATE_BURST`); past it `429 RATE_LIMITED`.
    #[arg(
        long,
        env = "QUESTD_KEY_CREATE_PER_MINUTE",
        default_value_t = 6000,
        global = true
    )]
    pub key_create_per_minute: u32,
    /// Sessions one tenant may create at once with a key before the rate
    /// applies (generous: a load test creates hundreds at once).
    #[arg(
        long,
        env = "QUESTD_KEY_CREATE_BURST",
        default_value_t = 500,
        global = true
    )]
    pub key_create_burst: u32,
    /// KiB of request body (the inline campaign) one client address may
    /// send per minute to create sessions without a key (a built-in
    /// campaign costs 1); past it `429 RATE_LIMITED`. With the retention
    /// of unplayed sessions it bounds the campaigns one address keeps in
    /// the database.
    #[arg(
        long,
        env = "QUESTD_CREATE_KIB_PER_MINUTE",
        default_value_t = 256,
        global = true
    )]
    pub create_kib_per_minute: u32,
    /// KiB one client address may send at once that way before the rate
    /// applies; a campaign larger than this is `413` (the default takes two
    /// campaigns of the largest body).
    #[arg(
        long,
        env = "QUESTD_CREATE_KIB_BURST",
        default_value_t = 2048,
        global = true
    )]
    pub create_kib_burst: u32,
    /// MiB of save state this node's live sessions may hold in all (each
    /// counted at its stored size when created or loaded); creating or
    /// loading past it is `503 OVERLOADED`, and idle sessions are unloaded
    /// to make room.
    #[arg(
        long,
        env = "QUESTD_MAX_LIVE_STATE_MB",
        default_value_t = 1024,
        global = true
    )]
    pub max_live_state_mb: u64,
    /// MiB one save may be when imported (`POST /api/v1/sessions/import`);
    /// a larger one is `413`, refused from its `Content-Length` before it
    /// is read. Without a key a save is also bytes of campaigns sent
    /// (`QUESTD_CREATE_KIB_BURST` bounds it).
    #[arg(long, env = "QUESTD_MAX_SAVE_MB", default_value_t = 16, global = true)]
    pub max_save_mb: u64,
    /// Hours a session created without a key (tenant `default`) is kept
    /// after it was last played (or created); then a sweep deletes it with
    /// its journal, snapshots, audit rows and queued chats. Fractions are
    /// allowed; 0 keeps them for good. Sessions created with a key are
    /// never deleted by it, nor a session some node has loaded.
    #[arg(
        long,
        env = "QUESTD_ANONYMOUS_RETENTION_HOURS",
        default_value_t = 72.0,
        value_parser = parse_hours,
        global = true
    )]
    pub anonymous_retention_hours: f64,
    /// Open connections (HTTP and WebSocket) this node holds at most
    /// (default: the open-file limit less a reserve for the database and
    /// model calls);
    /// past it new WebSockets get `503` before the upgrade.
    #[arg(long, env = "QUESTD_MAX_CONNECTIONS", global = true)]
    pub max_connections: Option<usize>,
    /// Seats one session may hold at most, whatever its campaign's
    /// `party.max_players` says (docs/protocol.md §8); past it joining is
    /// `409 SESSION_FULL`.
    #[arg(
        long,
        env = "QUESTD_MAX_PLAYERS",
        default_value_t = 8,
        value_parser = clap::value_parser!(u32).range(1..=100),
        global = true
    )]
    pub max_players: u32,
    /// The shortest `expires_in_s` an invite may ask for, in seconds. Only
    /// tests lower it (to 0, to make an invite that has already expired).
    #[arg(
        long,
        env = "QUESTD_MIN_INVITE_EXPIRES_S",
        default_value_t = 60,
        hide = true,
        global = true
    )]
    pub min_invite_expires_s: u32,
    /// WebSocket connections one session may have at once (a player and
    /// a big audience of spectators).
    #[arg(
        long,
        env = "QUESTD_MAX_SESSION_CONNECTIONS",
        default_value_t = 20_000,
        global = true
    )]
    pub max_session_connections: usize,
    /// WebSocket connections one client address may have open at once
    /// (generous: many players can share one address behind a NAT; the
    /// node's own cap is what protects its files).
    #[arg(
        long,
        env = "QUESTD_MAX_ADDRESS_CONNECTIONS",
        default_value_t = 4096,
        global = true
    )]
    pub max_address_connections: usize,
    /// When set, `GET /metrics` needs `Authorization: Bearer <this key>`.
    /// Never logged.
    #[arg(
        long,
        env = "QUESTD_METRICS_KEY",
        hide_env_values = true,
        global = true
    )]
    pub metrics_key: Option<Secret>,
    /// Tool API and MCP calls per minute, per tenant and per key.
    #[arg(
        long,
        env = "QUESTD_SERVICE_PER_MINUTE",
        default_value_t = 600,
        global = true
    )]
    pub service_per_minute: u32,
    /// Tool API and MCP calls a tenant (or key) may make at once before the
    /// rate applies.
    #[arg(
        long,
        env = "QUESTD_SERVICE_BURST",
        default_value_t = 60,
        global = true
    )]
    pub service_burst: u32,
    /// Milliseconds the offline game master waits before each answer (every
    /// model call: a turn with one tool call makes two), without blocking a
    /// thread, so many turns are in flight at once as with a real model.
    #[arg(
        long,
        env = "QUESTD_OFFLINE_LATENCY_MS",
        default_value_t = 0,
        global = true
    )]
    pub offline_latency_ms: u64,
    /// Model calls allowed in one turn, the closing one included: the last
    /// is made without tools, to narrate.
    #[arg(
        long,
        env = "QUESTD_MAX_ITERATIONS",
        default_value_t = 8,
        global = true
    )]
    pub max_iterations: u32,
    /// Chat messages per minute per seat of a session (each player its
    /// own; table talk has a rate of its own at the same numbers).
    #[arg(
        long,
        env = "QUESTD_CHAT_PER_MINUTE",
        default_value_t = 30,
        global = true
    )]
    pub chat_per_minute: u32,
    /// Chat messages a seat may send at once before the rate applies.
    #[arg(long, env = "QUESTD_CHAT_BURST", default_value_t = 5, global = true)]
    pub chat_burst: u32,
    /// Direct calls into one session per minute: NPC activations, tool API
    /// and MCP calls that name the session; past it `429 RATE_LIMITED`.
    #[arg(
        long,
        env = "QUESTD_CALLS_PER_MINUTE",
        default_value_t = 120,
        global = true
    )]
    pub calls_per_minute: u32,
    /// Direct calls into one session at once before the rate applies.
    #[arg(long, env = "QUESTD_CALLS_BURST", default_value_t = 20, global = true)]
    pub calls_burst: u32,
    /// Turns that may wait behind the running one; more get `QUEUE_FULL`.
    #[arg(
        long,
        env = "QUESTD_MAX_QUEUED_TURNS",
        default_value_t = 16,
        global = true
    )]
    pub max_queued_turns: usize,
    /// Longest chat text, in characters.
    #[arg(
        long,
        env = "QUESTD_MAX_TEXT_CHARS",
        default_value_t = 2000,
        global = true
    )]
    pub max_text_chars: usize,
    /// Longest a whole turn may take, in seconds.
    #[arg(
        long,
        env = "QUESTD_TURN_DEADLINE_SECS",
        default_value_t = 120,
        global = true
    )]
    pub turn_deadline_secs: u64,
    /// A session with no connection and no turn for this long is unloaded
    /// (and reloaded from storage on demand).
    #[arg(long, env = "QUESTD_IDLE_SECS", default_value_t = 300, global = true)]
    pub idle_secs: u64,
    /// Frames that may wait for one WebSocket connection; a connection
    /// further behind is closed (1013) and should resume with `last_seq`.
    #[arg(long, env = "QUESTD_WS_QUEUE", default_value_t = 1024, global = true)]
    pub ws_queue: usize,
    /// Bytes of frames that may wait for one WebSocket connection (default
    /// 1 MiB); a connection further behind is closed (1013) and should
    /// resume with `last_seq`.
    #[arg(
        long,
        env = "QUESTD_WS_QUEUE_BYTES",
        default_value_t = 1024 * 1024,
        global = true
    )]
    pub ws_queue_bytes: usize,
    /// Frames one WebSocket connection may send a second (default 20),
    /// with bursts of `QUESTD_WS_FRAME_BURST`; past it frames are dropped
    /// with a `RATE_LIMITED` error, and a client that goes on is closed
    /// with 1008.
    #[arg(
        long,
        env = "QUESTD_WS_FRAMES_PER_SECOND",
        default_value_t = 20,
        global = true
    )]
    pub ws_frames_per_second: u32,
    /// Frames one WebSocket connection may send at once before
    /// `QUESTD_WS_FRAMES_PER_SECOND` applies (default 40).
    #[arg(
        long,
        env = "QUESTD_WS_FRAME_BURST",
        default_value_t = 40,
        global = true
    )]
    pub ws_frame_burst: u32,
    /// Seconds a connection's sent bytes may stay unacknowledged (a client
    /// that stopped reading, or vanished) before the kernel aborts it
    /// (`TCP_USER_TIMEOUT`; default 20; 0 leaves the kernel's default of
    /// about 15 minutes). Bounds how long a socket that never reads holds
    /// what was queued for it.
    #[arg(
        long,
        env = "QUESTD_WRITE_STALL_SECS",
        default_value_t = 20,
        global = true
    )]
    pub write_stall_secs: u64,
    /// MiB of joins (a WebSocket's `welcome` and the backlog it resumes
    /// with, the most a connection is handed at once) one client address
    /// may be handed per 20 s (`JOIN_WINDOW`, the default write stall);
    /// past it a joining connection is closed with `1013` and reconnects
    /// later. With the write stall, bounds what sockets of one address
    /// that never read can pin.
    #[arg(
        long,
        env = "QUESTD_JOIN_MB_PER_ADDRESS",
        default_value_t = 32,
        global = true
    )]
    pub join_mb_per_address: u32,
    /// The same for the whole node (default 256 MiB per 20 s).
    #[arg(
        long,
        env = "QUESTD_JOIN_MB_PER_NODE",
        default_value_t = 256,
        global = true
    )]
    pub join_mb_per_node: u32,
    /// Plain HTTP connections (not WebSockets) one client address may have
    /// open at once (default 64); past it a new connection is closed at
    /// once. The trusted proxies (`QUESTD_TRUSTED_PROXIES`) and the host's
    /// own `127.0.0.1` and `::1` are not capped.
    #[arg(
        long,
        env = "QUESTD_MAX_ADDRESS_HTTP_CONNECTIONS",
        default_value_t = 64,
        global = true
    )]
    pub max_address_http_connections: usize,
    /// Threads of their own for session actors (default: none; sessions
    /// run on the HTTP workers' threads, see `session::placement`).
    #[arg(long, env = "QUESTD_SESSION_THREADS", global = true)]
    pub session_threads: Option<usize>,
    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "QUESTD_HTTP_WORKERS", global = true)]
    pub http_workers: Option<usize>,
    /// Log filter, in `tracing` env-filter syntax (e.g. `info,questd=debug`).
    #[arg(long, env = "QUESTD_LOG", default_value = "info", global = true)]
    pub log: String,
    /// Log output format.
    #[arg(
        long,
        env = "QUESTD_LOG_FORMAT",
        value_enum,
        default_value = "pretty",
        global = true
    )]
    pub log_format: LogFormat,
}

impl Settings {
    pub fn turn_deadline(&self) -> Duration {
        Duration::from_secs(self.turn_deadline_secs)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_secs)
    }

    /// How long the offline game master waits before each answer.
    pub fn offline_latency(&self) -> Duration {
        Duration::from_millis(self.offline_latency_ms)
    }

    /// How long every tool may run (`QUESTD_TOOL_TIMEOUT_MS`).
    pub fn tool_timeout(&self) -> Duration {
        Duration::from_millis(self.tool_timeout_ms)
    }

    /// How long one model call may take (`QUESTD_LLM_TIMEOUT_MS`).
    pub fn llm_timeout(&self) -> Duration {
        Duration::from_millis(self.llm_timeout_ms)
    }

    /// Live sessions one tenant may hold on this node
    /// (`QUESTD_MAX_SESSIONS_PER_TENANT`, else a quarter of
    /// `QUESTD_MAX_SESSIONS`), at least 1.
    pub fn tenant_session_quota(&self) -> usize {
        self.max_sessions_per_tenant
            .unwrap_or(self.max_sessions / 4)
            .max(1)
    }

    /// How long an anonymous session is kept unplayed
    /// (`QUESTD_ANONYMOUS_RETENTION_HOURS`); `None` keeps them for good.
    pub fn anonymous_retention(&self) -> Option<Duration> {
        (self.anonymous_retention_hours > 0.0)
            .then(|| Duration::from_secs_f64(self.anonymous_retention_hours * 3600.0))
    }

    /// The tool names in `QUESTD_DISABLED_TOOLS`, trimmed, empty entries
    /// left out.
    pub fn disabled_tools(&self) -> Vec<&str> {
        self.disabled_tools
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// Settings for tests: everything default, bound to port 0 on `database_url`.
    pub fn for_tests(database_url: &str) -> Self {
        let cli = Cli::parse_from([
            "questd",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            database_url,
        ]);
        cli.settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadtest_spans_parse_from_the_command_line() {
        let cli = Cli::parse_from([
            "questd",
            "loadtest",
            "--think-time",
            "1.5s",
            "--duration",
            "1m",
            "--ramp-up",
            "500ms",
        ]);
        let Some(Command::Loadtest(args)) = cli.command else {
            panic!("not a loadtest");
        };
        assert_eq!(args.think_time, 1500);
        assert_eq!(args.duration, Some(60.0));
        assert_eq!(args.ramp_up, 0.5);
    }

    #[test]
    fn defaults_follow_the_protocol() {
        let s = Cli::parse_from(["questd"]).settings;
        assert_eq!(s.bind, "127.0.0.1:8080");
        assert_eq!(s.database_url, "sqlite://questd.db");
        assert_eq!(s.llm_provider, LlmProvider::Offline);
        assert!(s.llm_stream);
        let s = Cli::parse_from(["questd", "--llm-stream", "false"]).settings;
        assert!(!s.llm_stream);
        assert_eq!(
            (s.max_iterations, s.chat_per_minute, s.chat_burst),
            (8, 30, 5)
        );
        assert_eq!(
            (s.llm_tool_mode, s.history_tokens),
            (ToolMode::Native, 6000)
        );
    }

    #[test]
    fn the_seeds_knobs_parse_with_bounds() {
        let s = Cli::parse_from(["questd"]).settings;
        assert_eq!(s.tool_timeout(), crate::tools::DEFAULT_TOOL_TIMEOUT);
        assert_eq!(s.llm_timeout(), Duration::from_secs(60));
        assert!(s.disabled_tools().is_empty());
        let s = Cli::parse_from([
            "questd",
            "--tool-timeout-ms",
            "150",
            "--llm-timeout-ms",
            "9000",
            "--disabled-tools",
            " roll_dice, ,hp_delta ",
        ])
        .settings;
        assert_eq!(s.tool_timeout(), Duration::from_millis(150));
        assert_eq!(s.llm_timeout(), Duration::from_secs(9));
        assert_eq!(s.disabled_tools(), ["roll_dice", "hp_delta"]);
        for bad in [
            ["--tool-timeout-ms", "0"],
            ["--tool-timeout-ms", "60001"],
            ["--llm-timeout-ms", "99"],
            ["--llm-timeout-ms", "soon"],
        ] {
            assert!(
                Cli::try_parse_from(["questd", bad[0], bad[1]]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn offline_latency_is_a_setting() {
        let s = Cli::parse_from(["questd"]).settings;
        assert_eq!(s.offline_latency(), Duration::ZERO);
        let s = Cli::parse_from(["questd", "--offline-latency-ms", "250"]).settings;
        assert_eq!(s.offline_latency(), Duration::from_millis(250));
    }

    #[test]
    fn loadtest_flags_parse_and_bad_values_are_usage_errors() {
        let cli = Cli::parse_from([
            "questd",
            "loadtest",
            "--sessions",
            "200",
            "--spectators-per-session",
            "2",
            "--turns",
            "5",
            "--message",
            "roll 1d20",
            "--message",
            "go to {neighbour}",
            "--source-ips",
            "127.0.0.2-127.0.0.4",
            "--ramp-up",
            "1.5",
            "--json",
        ]);
        let Some(Command::Loadtest(args)) = cli.command else {
            panic!("loadtest parses: {:?}", cli.command);
        };
        assert_eq!(args.url, "http://127.0.0.1:8080");
        assert_eq!(
            (args.sessions, args.spectators_per_session, args.turns),
            (200, 2, 5)
        );
        assert_eq!(args.messages, ["roll 1d20", "go to {neighbour}"]);
        assert_eq!(args.source_ips.map(|s| s.len()), Some(3));
        assert_eq!((args.ramp_up, args.duration, args.json), (1.5, None, true));
        // One player in free mode unless asked: the runs of before.
        assert_eq!(
            (args.players_per_session, args.turn_mode),
            (1, crate::loadtest::TurnMode::Free)
        );
        let cli = Cli::parse_from([
            "questd",
            "loadtest",
            "--players-per-session",
            "4",
            "--turn-mode",
            "rounds",
        ]);
        let Some(Command::Loadtest(args)) = cli.command else {
            panic!("loadtest parses: {:?}", cli.command);
        };
        assert_eq!(
            (args.players_per_session, args.turn_mode),
            (4, crate::loadtest::TurnMode::Rounds)
        );
        for bad in [
            ["--players-per-session", "0"],
            ["--players-per-session", "101"],
            ["--turn-mode", "turns"],
            ["--ramp-up", "-1"],
            ["--duration", "soon"],
            ["--frame-timeout", "inf"],
            ["--source-ips", "127.0.0.9-127.0.0.2"],
            ["--sessions", "-3"],
        ] {
            let args = ["questd", "loadtest", bad[0], bad[1]];
            assert!(Cli::try_parse_from(args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_prints_a_key() {
        let cli = Cli::parse_from([
            "questd",
            "--llm-api-key",
            "sk-model-secret",
            "--internal-api-key",
            "internal-secret",
            "--tenant-keys",
            "acme:tenant-secret",
            "--metrics-key",
            "metrics-secret",
        ]);
        let shown = format!("{cli:?}");
        for secret in [
            "sk-model",
            "internal-secret",
            "tenant-secret",
            "metrics-secret",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert_eq!(
            cli.settings.internal_api_key.as_ref().map(Secret::expose),
            Some("internal-secret")
        );
    }

    #[test]
    fn quotas_default_from_the_session_cap_and_retention_takes_fractions() {
        let s = Cli::parse_from(["questd", "--max-sessions", "300"]).settings;
        assert_eq!(s.tenant_session_quota(), 75);
        assert_eq!(
            s.anonymous_retention(),
            Some(Duration::from_secs(72 * 3600))
        );
        assert_eq!((s.calls_per_minute, s.calls_burst), (120, 20));
        let s = Cli::parse_from([
            "questd",
            "--max-sessions",
            "2",
            "--anonymous-retention-hours",
            "0.5",
        ])
        .settings;
        assert_eq!(s.tenant_session_quota(), 1);
        assert_eq!(s.anonymous_retention(), Some(Duration::from_secs(1800)));
        let s = Cli::parse_from(["questd", "--anonymous-retention-hours", "0"]).settings;
        assert_eq!(s.anonymous_retention(), None);
        for bad in ["-1", "inf", "NaN", "soon"] {
            let args = ["questd", "--anonymous-retention-hours", bad];
            assert!(Cli::try_parse_from(args).is_err(), "{bad}");
        }
    }

    #[test]
    fn backup_takes_a_path_and_the_server_s_database() {
        let cli = Cli::parse_from([
            "questd",
            "backup",
            "--to",
            "/backups/questd.db",
            "--database-url",
            "sqlite:///var/lib/questd/questd.db",
        ]);
        let Some(Command::Backup(args)) = cli.command else {
            panic!("not a backup: {:?}", cli.command);
        };
        assert_eq!(args.to, std::path::Path::new("/backups/questd.db"));
        assert_eq!((args.force, args.step_pages), (false, 1024));
        assert_eq!(
            cli.settings.database_url,
            "sqlite:///var/lib/questd/questd.db"
        );
        let cli = Cli::parse_from(["questd", "backup", "--to", "b.db", "--force"]);
        assert!(matches!(cli.command, Some(Command::Backup(a)) if a.force));
        // Without a PATH there is nothing to write: a usage error.
        assert!(Cli::try_parse_from(["questd", "backup"]).is_err());
        for bad in ["0", "-1", "many"] {
            let args = ["questd", "backup", "--to", "b.db", "--step-pages", bad];
            assert!(Cli::try_parse_from(args).is_err(), "{bad}");
        }
    }

    #[test]
    fn serve_is_a_subcommand() {
        let cli = Cli::parse_from(["questd", "serve", "--bind", "0.0.0.0:9"]);
        assert!(matches!(cli.command, Some(Command::Serve)));
        assert_eq!(cli.settings.bind, "0.0.0.0:9");
    }
}
