//! HTTP and WebSocket routes. Each area has a `configure` function; handlers
//! only translate between the wire and the session hub.
//!
//! Arrows point one way: the handlers (`api`, `admin`, `chat`, `sites`,
//! `stateless`, `tools_api`, `mcp`, `ws`) sit on the shared pieces (`state`,
//! `locate`, `access`, `stored`, `campaign`, `service`, `limits`, `peers`,
//! `body`, `errors`, `routes`), which never import a handler; `openapi`
//! lists the handlers and nothing imports it. This file only declares the
//! modules and registers every area's routes.

pub mod accept;
pub mod access;
mod admin;
pub mod admission;
mod api;
mod approvals;
pub mod auth;
pub mod body;
mod campaign;
mod chat;
pub mod cluster;
mod compress;
mod created;
pub mod errors;
mod frame_rate;
pub mod guard;
mod idempotency;
pub mod limits;
pub mod locate;
pub mod mcp;
pub mod openapi;
mod owner_watch;
mod party;
pub mod peers;
mod relay;
pub mod routes;
mod saves;
pub mod server;
pub mod service;
pub mod sites;
pub mod socket;
pub mod state;
mod stateless;
mod static_files;
mod stored;
mod timers;
mod tools_api;
mod upgrade;
mod websocket;
pub mod ws;
pub(crate) mod wsframe;

use actix_web::web;

pub use body::{MAX_BODY_BYTES, refuse_nul_in_url};
pub use errors::no_route;
pub use routes::registered;
pub use state::AppState;

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    saves::configure(cfg);
    api::configure(cfg);
    admin::configure(cfg);
    cluster::configure(cfg);
    chat::configure(cfg);
    party::configure(cfg);
    timers::configure(cfg);
    approvals::configure(cfg);
    stateless::configure(cfg);
    tools_api::configure(cfg);
    sites::configure(cfg);
    ws::configure(cfg);
    mcp::configure(cfg);
    openapi::configure(cfg);
    static_files::configure(cfg);
}
