//! The session hub: maps session ids to live actors, creates sessions, and
//! loads a session from storage on its first use after a restart or unload.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use actix::prelude::*;

use super::actor::SessionActor;
use super::replay::Restored;
use super::{
    HubLink, REMEMBERED_REQUESTS, SessionDeps, SessionStats, Unregister, random_token, replay,
};
use crate::game::GameState;
use crate::protocol::SessionId;
use crate::storage::{SessionMeta, StorageError, Visibility, now_ms};

/// A live session: its actor and what is needed to authorize callers.
#[derive(Clone)]
pub struct SessionHandle {
    pub addr: Addr<SessionActor>,
    pub meta: Arc<SessionMeta>,
    /// WebSocket connections open on this session (counted before the
    /// upgrade, so a crowd cannot pass the per-session cap at once).
    pub connections: Arc<AtomicUsize>,
}

/// Why the hub could not give a session.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HubError {
    #[error("this node already runs {0} sessions, the most it may")]
    Full(usize),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Creates a session from a checked campaign's start state; answers once
/// it is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionHandle, HubError>")]
pub struct CreateSession {
    pub tenant_id: String,
    pub visibility: Visibility,
    pub state: GameState,
}

/// Finds a session, loading it from storage if it is not live.
#[derive(Message)]
#[rtype(result = "Result<Option<SessionHandle>, HubError>")]
pub struct Lookup {
    pub session_id: SessionId,
}

/// Lists the live public sessions of a tenant.
#[derive(Message)]
#[rtype(result = "Vec<LiveInfo>")]
pub struct ListLive {
    pub tenant_id: String,
}

/// One live session, as listed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LiveInfo {
    pub session_id: SessionId,
    pub title: String,
    pub players: usize,
    pub spectators: usize,
    pub turns: u64,
    /// Lets anyone who sees the list watch (the lobby's "spectate" link);
    /// only public sessions are listed.
    pub spectator_token: String,
}

struct Live {
    handle: SessionHandle,
    players: usize,
    spectators: usize,
    turns: u64,
}

/// Owns the id -> actor map. Runs on the system arbiter; session actors run
/// on `arbiters`, which live as long as the server.
pub struct SessionHub {
    deps: Arc<SessionDeps>,
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
    live: HashMap<SessionId, Live>,
    /// Live sessions this node holds at most (`QUESTD_MAX_SESSIONS`).
    max_sessions: usize,
}

impl SessionHub {
    pub fn new(deps: Arc<SessionDeps>, arbiters: Vec<ArbiterHandle>, max_sessions: usize) -> Self {
        Self {
            deps,
            arbiters,
            next_arbiter: 0,
            live: HashMap::new(),
            max_sessions: max_sessions.max(1),
        }
    }

    /// Refuses one more live session when the node has its most.
    fn has_room(&self) -> Result<(), HubError> {
        if self.live.len() >= self.max_sessions {
            Err(HubError::Full(self.max_sessions))
        } else {
            Ok(())
        }
    }

    /// The live handle of a session whose actor is still running. An actor
    /// that died (a panic inside it) is forgotten here, so the next lookup
    /// loads the session again from its journal.
    fn running(&mut self, session_id: &str) -> Option<SessionHandle> {
        let live = self.live.get(session_id)?;
        if live.handle.addr.connected() {
            return Some(live.handle.clone());
        }
        tracing::error!(
            session_id,
            "a session actor died; it is reloaded from its journal"
        );
        self.live.remove(session_id);
        self.deps.metrics.sessions_live.dec();
        None
    }

    /// Starts an actor on the next arbiter, round robin, and records it.
    fn start(
        &mut self,
        meta: Arc<SessionMeta>,
        restored: Restored,
        hub: Addr<Self>,
    ) -> SessionHandle {
        let deps = self.deps.clone();
        let turns = restored.state.turn;
        let actor_meta = meta.clone();
        let hub = HubLink {
            stats: hub.clone().recipient(),
            unregister: hub.recipient(),
        };
        let addr = match self
            .arbiters
            .get(self.next_arbiter % self.arbiters.len().max(1))
        {
            Some(arbiter) => SessionActor::start_in_arbiter(arbiter, move |_| {
                SessionActor::new(actor_meta, deps, hub, restored)
            }),
            None => SessionActor::new(actor_meta, deps, hub, restored).start(),
        };
        self.next_arbiter = self.next_arbiter.wrapping_add(1);
        self.deps.metrics.sessions_live.inc();
        let handle = SessionHandle {
            addr,
            meta,
            connections: Arc::default(),
        };
        self.live.insert(
            SessionId::from(handle.meta.session_id.as_str()),
            Live {
                handle: handle.clone(),
                players: 0,
                spectators: 0,
                turns,
            },
        );
        handle
    }
}

impl Actor for SessionHub {
    type Context = Context<Self>;
}

impl Handler<CreateSession> for SessionHub {
    type Result = ResponseActFuture<Self, Result<SessionHandle, HubError>>;

    fn handle(&mut self, msg: CreateSession, _: &mut Self::Context) -> Self::Result {
        if let Err(e) = self.has_room() {
            return Box::pin(actix::fut::ready(Err(e)));
        }
        let meta = SessionMeta {
            session_id: format!("sess_{}", random_token(16)),
            tenant_id: msg.tenant_id,
            campaign_id: msg.state.campaign_id.clone(),
            title: msg.state.title.clone(),
            player_token: random_token(32),
            spectator_token: random_token(32),
            created_at: now_ms(),
            visibility: msg.visibility,
        };
        let state = msg.state;
        let store = self.deps.store.clone();
        let snapshot = serde_json::to_string(&state);
        let meta_for_store = meta.clone();
        Box::pin(
            async move {
                let snapshot = snapshot.map_err(|e| StorageError::Corrupt(e.to_string()))?;
                store.create_session(meta_for_store, snapshot).await
            }
            .into_actor(self)
            .map(move |res: Result<(), StorageError>, act, ctx| {
                res?;
                act.deps.metrics.sessions_created.inc();
                Ok(act.start(Arc::new(meta), replay::fresh(state), ctx.address()))
            }),
        )
    }
}

impl Handler<Lookup> for SessionHub {
    type Result = ResponseActFuture<Self, Result<Option<SessionHandle>, HubError>>;

    fn handle(&mut self, msg: Lookup, _: &mut Self::Context) -> Self::Result {
        if let Some(handle) = self.running(msg.session_id.as_str()) {
            return Box::pin(actix::fut::ready(Ok(Some(handle))));
        }
        let store = self.deps.store.clone();
        let id = msg.session_id;
        Box::pin(
            async move {
                let Some(loaded) = store.load_session(id.as_str()).await? else {
                    return Ok(None);
                };
                let requests = store
                    .recent_request_ids(id.as_str(), REMEMBERED_REQUESTS as i64)
                    .await?;
                let meta = loaded.meta.clone();
                Ok(Some((meta, replay::restore(loaded, requests)?)))
            }
            .into_actor(self)
            .map(move |res: Result<_, StorageError>, act, ctx| {
                let Some((meta, restored)) = res? else { return Ok(None) };
                // Another lookup may have loaded it meanwhile: keep that one.
                if let Some(handle) = act.running(&meta.session_id) {
                    return Ok(Some(handle));
                }
                act.has_room()?;
                tracing::info!(session_id = %meta.session_id, seq = restored.last_seq, "session loaded from storage");
                act.deps.metrics.sessions_loaded.inc();
                Ok(Some(act.start(Arc::new(meta), restored, ctx.address())))
            }),
        )
    }
}

impl Handler<ListLive> for SessionHub {
    type Result = Vec<LiveInfo>;

    fn handle(&mut self, msg: ListLive, _: &mut Self::Context) -> Vec<LiveInfo> {
        let mut list: Vec<LiveInfo> = self
            .live
            .iter()
            .filter(|(_, l)| {
                l.handle.meta.tenant_id == msg.tenant_id
                    && l.handle.meta.visibility == Visibility::Public
            })
            .map(|(session_id, l)| LiveInfo {
                session_id: session_id.clone(),
                title: l.handle.meta.title.clone(),
                players: l.players,
                spectators: l.spectators,
                turns: l.turns,
                spectator_token: l.handle.meta.spectator_token.clone(),
            })
            .collect();
        list.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        list
    }
}

impl Handler<SessionStats> for SessionHub {
    type Result = ();

    fn handle(&mut self, msg: SessionStats, _: &mut Self::Context) {
        if let Some(live) = self.live.get_mut(&msg.session_id) {
            live.players = msg.players;
            live.spectators = msg.spectators;
            live.turns = msg.turns;
        }
    }
}

impl Handler<Unregister> for SessionHub {
    type Result = ();

    fn handle(&mut self, msg: Unregister, _: &mut Self::Context) {
        if self
            .live
            .get(&msg.session_id)
            .is_some_and(|l| l.handle.addr == msg.addr)
        {
            self.live.remove(&msg.session_id);
            self.deps.metrics.sessions_live.dec();
        }
    }
}
