//! The flags of `questd loadtest` and how their values are read. The
//! command line itself is parsed in [`crate::config`], which holds this
//! struct as its `loadtest` subcommand.

use clap::{Args, ValueEnum};

use super::SourceIps;

/// `questd loadtest`: which server to drive and how hard. Seconds are
/// decimal numbers (`0.5` is fine); nothing here is read from the
/// environment.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Load test")]
pub struct LoadtestArgs {
    /// Base URL of the server (plain HTTP); WebSockets go to the same host
    /// and port.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Sessions to create, each with `--players-per-session` player
    /// connections.
    #[arg(long, default_value_t = 10)]
    pub sessions: usize,
    /// Players per session (1 to 100): the creator's seat, and past 1 the
    /// others join by one invite of the creator's, each on its own
    /// connection and seat (docs/protocol.md §16).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub players_per_session: u16,
    /// How a party's chats become turns: `free` (each chat its own turn,
    /// in arrival order) or `rounds` (each round every player acts once,
    /// then one turn resolves them all; `--turns` counts rounds).
    #[arg(long, value_enum, default_value_t = TurnMode::Free)]
    pub turn_mode: TurnMode,
    /// Spectator connections per session.
    #[arg(long, default_value_t = 0)]
    pub spectators_per_session: usize,
    /// Turns each player plays, one after another (in rounds mode: rounds
    /// each session plays).
    #[arg(long, default_value_t = 5)]
    pub turns: usize,
    /// How long a player waits between the end of one turn and its next
    /// chat, reading what arrives meanwhile: `500ms`, `1.5s`, `2m`, or a
    /// bare number of milliseconds.
    #[arg(long, default_value_t = 0, value_parser = parse_millis)]
    pub think_time: u64,
    /// Seconds over which session starts are spread evenly (0: all at
    /// once). Spans here and below also take a unit: `500ms`, `1.5s`, `2m`.
    #[arg(long, default_value_t = 0.0, value_parser = parse_seconds)]
    pub ramp_up: f64,
    /// Built-in campaign every session plays.
    #[arg(long, default_value = "demo")]
    pub campaign: String,
    /// A key of the server (its `QUESTD_INTERNAL_API_KEY` or a tenant key),
    /// sent when creating sessions: keyed creations are not limited per
    /// address, which many sessions from one machine would otherwise hit.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Seconds after the start when no new turn begins; turns in flight
    /// finish (default: no cap).
    #[arg(long, value_parser = parse_seconds)]
    pub duration: Option<f64>,
    /// Chat text template, used in rotation; repeat the flag for several.
    /// `{neighbour}` becomes an area reachable from the player's position,
    /// `{turn}` the turn number (from 1), `{session}` the session number.
    /// Default: `where can I go`, `go to {neighbour}`, `roll 2d6+1`, `status`.
    #[arg(long = "message", value_name = "TEMPLATE")]
    pub messages: Vec<String>,
    /// Local addresses client sockets are bound to, round robin, so many
    /// sockets do not run out of ephemeral ports: `127.0.0.2-127.0.0.20`,
    /// one address, or a comma-separated list of either.
    #[arg(long, value_name = "RANGE", value_parser = SourceIps::parse)]
    pub source_ips: Option<SourceIps>,
    /// Print the report as one JSON object, the last thing on stdout (the
    /// summary table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Process id of the server: report its resident memory (VmRSS from
    /// /proc) at the start, at its peak and at the end.
    #[arg(long)]
    pub pid: Option<u32>,
    /// After its turns, a session keeps its connections open until every
    /// session has played, then this many seconds more (for measuring a
    /// server holding them all; default 0: close at once).
    #[arg(long, default_value_t = 0.0, value_parser = parse_seconds)]
    pub hold: f64,
    /// Session creations and connection attempts in flight at once.
    #[arg(long, default_value_t = 256)]
    pub connect_concurrency: usize,
    /// Seconds to wait for an expected frame before counting a `TIMEOUT`.
    #[arg(long, default_value_t = 30.0, value_parser = parse_seconds)]
    pub frame_timeout: f64,
    /// Threads the driver runs on (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Fraction of spectators (0 to 1) that read their `welcome` and then
    /// never read again, on a socket with a small receive buffer, until
    /// their session has played; they are not compared with their player.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub slow_spectators: f64,
}

/// The turn mode a load test's sessions play in (`--turn-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TurnMode {
    Free,
    Rounds,
}

impl TurnMode {
    /// The name on the wire and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::Rounds => "rounds",
        }
    }
}

/// Reads a fraction from 0 to 1.
fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{text:?} must be a number from 0 to 1")),
    }
}

/// Reads a span of time as seconds: a number with a unit (`500ms`, `1.5s`,
/// `2m`) or a bare number in seconds; not negative, at most a week.
fn parse_seconds(text: &str) -> Result<f64, String> {
    parse_span(text, 1.0)
}

/// Like [`parse_seconds`], but a bare number is milliseconds; answers whole
/// milliseconds.
fn parse_millis(text: &str) -> Result<u64, String> {
    parse_span(text, 0.001).map(|secs| (secs * 1000.0).round() as u64)
}

/// A span with an optional unit (`ms`, `s`, `m`); a bare number is in
/// units of `bare` seconds.
fn parse_span(text: &str, bare: f64) -> Result<f64, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => t.split_at(at),
        None => (t, ""),
    };
    let scale = match unit {
        "" => bare,
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        other => {
            return Err(format!("{text:?}: unknown unit {other:?} (use ms, s or m)"));
        }
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a span of time (like 500ms, 1.5s, 2m)"))?;
    let secs = value * scale;
    if secs.is_finite() && (0.0..=MAX_SECONDS).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!(
            "{text:?} must be between 0 and {MAX_SECONDS} seconds"
        ))
    }
}

/// The longest span a load test flag may name: one week.
const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadtest_spans_take_units_and_bare_numbers() {
        assert_eq!(parse_seconds("2"), Ok(2.0));
        assert_eq!(parse_seconds("1.5s"), Ok(1.5));
        assert_eq!(parse_seconds(" 250ms "), Ok(0.25));
        assert_eq!(parse_seconds("2m"), Ok(120.0));
        assert_eq!(parse_millis("500"), Ok(500));
        assert_eq!(parse_millis("0.5s"), Ok(500));
        assert_eq!(parse_millis("20ms"), Ok(20));
        for bad in ["", "s", "-1", "1h", "1.5 parsecs", "NaN", "inf", "9999999"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
