//! Sessions: one [`SessionActor`] per game carries out what the session's
//! core decides; the [`SessionHub`] maps ids to live actors, claims
//! sessions (several nodes on PostgreSQL), loads them from storage
//! (`replay`) and drains the node; the messages a session answers are in
//! `messages`.
//!
//! The parts, each in its own file, tested alone, and none of them
//! importing the actor (they reach it through what they return):
//! - `core`: one session's state and parts, fed messages and answering
//!   with the commands the actor carries out; `lifecycle`: open, draining,
//!   closing, closed, stopping, and the moves between them;
//! - `intake`: whether a chat or a direct call is taken, and the queue;
//! - `turn`: the turn state machine, from model answers to steps;
//!   `running`: a running turn's timer, model stream and times;
//!   `model`: a model call's events, at once or streamed;
//! - `calls`: one tool call through the pipeline, as frames and an audit
//!   row (`audit` writes the ledger); `prompt`: what the model is asked;
//!   `turn_frames`: the frames that open and close a turn;
//! - `sequencer`: seqs, frames held until durable, the resume ring, and
//!   whoever waits for a frame; `release`: what goes out once durable, in
//!   what order, and the rows a step holds; `acks`: every ack owed, held
//!   until what it acknowledges is durable; `snapshot`: snapshots;
//! - `fanout`: the connections, and when presence goes out; `lanes`:
//!   frames handed to the connections on each thread at once;
//! - `placement`: which thread a session runs on;
//! - `quota`: what the node's live sessions hold, per tenant and in bytes,
//!   against the node's caps (the hub's tally); `sweeper`: which sessions
//!   with a due timer the hub loads, and when it tries one again.
//!
//! This file is the façade only: the `mod` lines and what the rest of
//! questd may use; what the parts share is in `types`.

mod acks;
mod actor;
pub mod audit;
mod calls;
mod core;
mod fanout;
mod hub;
mod intake;
mod lanes;
mod lifecycle;
mod messages;
mod model;
mod placement;
mod prompt;
mod quota;
mod release;
mod replay;
mod running;
mod seats;
mod sequencer;
mod snapshot;
mod sweeper;
pub mod tail;
mod turn;
mod turn_frames;
mod types;

pub use actor::SessionActor;
pub use audit::CallOrigin;
pub use fanout::CLOSE_OVERFLOW;
pub use hub::{
    AllLive, CreateSession, DrainNode, HubError, ImportSession, ListAll, ListLive, LiveInfo,
    Lookup, NewSession, Running, SessionHandle, SessionHub, StopHub,
};
pub use lanes::{Lane, LaneRef, Sink};
pub use lifecycle::RESTARTING;
pub use messages::{
    ActionTaken, AwaitDurable, AwaitTurnEnd, CallTool, ChatAccepted, ChatRefused, CloseSession,
    CreateInvite, Decide, DecisionTaken, DirectCallDone, GetSeats, GetSnapshot, HostPower,
    InviteMade, JoinParty, Joined, PartyCaller, RemoteAudience, Say, SeatGiven, SubmitChat,
    Subscribe, Unsubscribe, UseHostPower,
};
pub use placement::Home;
pub use placement::Placement;
pub use quota::Quotas;
pub use replay::replayed;
pub use seats::{SeatAccess, SeatBook};
pub use types::{
    CLOSE_SEAT_KICKED, CLOSE_SESSION_CLOSED, CLOSE_SESSION_FAILED, CLOSE_SESSION_MOVED,
    CLOSED_BY_OPERATOR, Limits, MAX_RESUME_BYTES, MAX_STORED_BACKLOG, MAX_STORED_BACKLOG_CHARS,
    Outbound, Outbox, REMEMBERED_REQUESTS, REPEAT_LIMIT, RING_FRAMES, SNAPSHOT_EVERY, SessionDeps,
    Wire, random_token,
};
