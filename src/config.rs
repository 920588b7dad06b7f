//! Settings: one clap struct; every field has a `--flag` and a `QUESTD_*`
//! environment variable (PROTOCOL.md §5 fixes the names listed there).

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve,
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
    /// `sqlite://PATH`.
    #[arg(
        long,
        env = "QUESTD_DATABASE_URL",
        default_value = "sqlite://questd.db",
        global = true
    )]
    pub database_url: String,
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
    pub llm_api_key: Option<String>,
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
    /// Estimated tokens of chat history sent to the model per call; older
    /// turns are summarized and dropped past it (0: no limit).
    #[arg(
        long,
        env = "QUESTD_HISTORY_TOKENS",
        default_value_t = 6000,
        global = true
    )]
    pub history_tokens: usize,
    /// The key other services present in `X-Internal-API-Key`. When set,
    /// every call to the tool API and MCP needs it; tools marked
    /// `requires_auth` need it always. Never logged.
    #[arg(
        long,
        env = "QUESTD_INTERNAL_API_KEY",
        hide_env_values = true,
        global = true
    )]
    pub internal_api_key: Option<String>,
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
    /// Model calls allowed in one turn.
    #[arg(
        long,
        env = "QUESTD_MAX_ITERATIONS",
        default_value_t = 8,
        global = true
    )]
    pub max_iterations: u32,
    /// Chat messages per minute per session.
    #[arg(
        long,
        env = "QUESTD_CHAT_PER_MINUTE",
        default_value_t = 30,
        global = true
    )]
    pub chat_per_minute: u32,
    /// Chat messages a session may send at once before the rate applies.
    #[arg(long, env = "QUESTD_CHAT_BURST", default_value_t = 5, global = true)]
    pub chat_burst: u32,
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
    /// Threads that run session actors (default: one per core).
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
    fn serve_is_a_subcommand() {
        let cli = Cli::parse_from(["questd", "serve", "--bind", "0.0.0.0:9"]);
        assert!(matches!(cli.command, Some(Command::Serve)));
        assert_eq!(cli.settings.bind, "0.0.0.0:9");
    }
}
