//! The integration tests, in one binary (one link step; helpers shared
//! without `dead_code` allowances): each module starts the real server on
//! port 0 with a fresh database and talks to it over real sockets.

#![allow(clippy::unwrap_used)]

mod common;
mod database;
mod process;
#[path = "../../examples/support/proxy.rs"]
mod proxy;

mod admin;
mod adventure;
mod approvals;
mod backup;
mod browser;
mod browser_approvals;
mod browser_party;
mod browser_saves;
mod browser_story;
mod cluster;
mod cluster_party;
mod cluster_routes;
mod connection;
mod crosssite;
mod db_away;
mod durability;
mod first_hour;
mod formats;
mod generated_names;
mod lighthouse;
mod loadtest;
mod mcp;
mod metrics;
mod nul;
mod openai;
mod openapi;
mod party_seats;
mod party_turns;
mod quotas;
mod readme;
mod saves;
mod security;
mod security_conn;
mod security_edge;
mod seeds;
mod service;
mod sites;
mod storage_faults;
mod timers;
mod timers_api;
mod timers_offline;
mod tools;
mod traces;
mod turns;
