//! questd: hosts many AI game-master sessions and streams them over WebSockets.
//!
//! Code map (see README "Architecture"):
//! - [`config`]: settings (clap; every flag has a `QUESTD_*` variable).
//! - [`startup`]: wires storage, tools, model, session hub and HTTP server.
//! - [`error`]: the wire vocabulary of error codes and their HTTP statuses.
//! - [`protocol`]: the only wire types (client frames, story frames, the
//!   snapshot; HTTP answer bodies in `protocol::http`, the request bodies
//!   several routes read in `protocol::requests`).
//! - [`game`]: pure rules and save state; no IO.
//! - [`tools`]: the tool registry and its validation pipeline; one file per tool.
//! - [`session`]: one actor per session, a shell over the parts that decide
//!   (intake and queue, turn state machine, tool-call pipeline, prompt,
//!   sequencer, acks, fan-out), and the hub that claims, loads and drains
//!   them.
//! - [`llm`]: model providers (offline game master, OpenAI-compatible endpoint,
//!   scripted test double).
//! - [`sites`]: a tenant's NPC and content service without a session
//!   (`PUT /api/v1/sites/{id}`), its states read and written by version.
//! - [`storage`]: journal, snapshots, inbox and claims on SQLite or
//!   PostgreSQL; group commit; fencing by epoch.
//! - [`http`]: REST routes, the WebSocket endpoint, the embedded client;
//!   handing requests to the node that runs a session.
//! - [`metrics`]: counters and histograms for `/metrics`.
//! - [`rate`]: every rate limiter (governor), on the node's one clock.
//! - [`budget`]: the model's daily token budgets per session, tenant and
//!   node.
//! - [`telemetry`]: a turn's spans, exported over OTLP when a collector is
//!   configured (`OTEL_EXPORTER_OTLP_*`), and W3C `traceparent` parsing.
//! - [`backup`]: `questd backup`, a consistent copy of the SQLite database
//!   while the server runs (the copy itself is `storage::backup`'s).
//! - [`loadtest`]: `questd loadtest`, a driver that plays many sessions over
//!   real WebSockets and checks the wire contract on every connection.

pub mod backup;
pub mod budget;
pub mod civil;
pub mod config;
pub mod error;
pub mod game;
pub mod http;
pub mod ids;
pub mod json;
pub mod llm;
pub mod loadtest;
pub mod logs;
pub mod metrics;
pub mod protocol;
pub mod rate;
pub mod room;
pub mod session;
pub mod sites;
pub mod startup;
pub mod storage;
pub mod telemetry;
pub mod tools;

pub use config::{Cli, Secret, Settings};
pub use startup::Application;
