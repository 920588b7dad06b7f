//! The session hub: maps session ids to live actors, creates sessions, and
//! loads a session from storage on its first use after a restart or unload.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::actor::SessionActor;
use super::messages::{Drain, LeaseLost};
use super::replay::Restored;
use super::{
    HubLink, Placement, REMEMBERED_REQUESTS, SessionDeps, SessionStats, Unregister, random_token,
    replay,
};
use crate::game::GameState;
use crate::protocol::SessionId;
use crate::storage::{Epoch, SessionMeta, StorageError, Visibility, now_ms};

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
    /// Another node's claim on the session is alive (several nodes on one
    /// PostgreSQL database).
    #[error("the session runs on another node")]
    Elsewhere,
    /// This node is shutting down and takes no more sessions.
    #[error("this node is restarting; try again")]
    Draining,
    /// An operator closed the session for good: it is never loaded again.
    #[error("{}", super::CLOSED_BY_OPERATOR)]
    Closed,
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

/// Finds a session this node runs now, never loading it.
#[derive(Message)]
#[rtype(result = "Option<SessionHandle>")]
pub struct Running {
    pub session_id: SessionId,
}

/// Lists the live public sessions of a tenant.
#[derive(Message)]
#[rtype(result = "Vec<LiveInfo>")]
pub struct ListLive {
    pub tenant_id: String,
}

/// Lists the live sessions of every tenant (the operator's view), most
/// recently active first, at most `limit` of them.
#[derive(Message)]
#[rtype(result = "AllLive")]
pub struct ListAll {
    pub limit: usize,
}

/// What [`ListAll`] answers: how many sessions are live, and the first
/// `limit` of them.
#[derive(Debug, Clone)]
pub struct AllLive {
    pub total: usize,
    pub sessions: Vec<LiveInfo>,
}

/// One live session, as listed.
#[derive(Debug, Clone)]
pub struct LiveInfo {
    pub session_id: SessionId,
    pub tenant_id: String,
    pub campaign_id: String,
    pub title: String,
    pub visibility: Visibility,
    pub players: usize,
    pub spectators: usize,
    pub turns: u64,
    /// Chats waiting for their turn to start.
    pub queued: usize,
    /// When the session last did something (ms since the epoch).
    pub last_activity_ms: i64,
    /// An operator closed it; it stops once its work taken is done.
    pub closing: bool,
    /// Lets anyone who sees the public list watch (the lobby's "spectate"
    /// link); only public sessions are listed there.
    pub spectator_token: String,
}

struct Live {
    handle: SessionHandle,
    /// The claim the session runs under, renewed by the hub.
    epoch: Epoch,
    /// Its counts, kept up to date by the actor.
    stats: Arc<SessionStats>,
}

/// Owns the id -> actor map. Runs on the system arbiter; session actors run
/// where `placement` puts them (the HTTP workers' threads by default).
pub struct SessionHub {
    deps: Arc<SessionDeps>,
    placement: Placement,
    live: HashMap<SessionId, Live>,
    /// Live sessions this node holds at most (`QUESTD_MAX_SESSIONS`).
    max_sessions: usize,
    /// When this node's claims were last renewed (or first made).
    renewed: Instant,
    /// A renewal is on its way: the next tick waits for it.
    renewing: bool,
    /// The node is shutting down: no session is created or loaded.
    draining: bool,
    /// Claims being released; a drain ends once none is.
    releasing: usize,
}

impl SessionHub {
    pub fn new(deps: Arc<SessionDeps>, placement: Placement, max_sessions: usize) -> Self {
        Self {
            deps,
            placement,
            live: HashMap::new(),
            max_sessions: max_sessions.max(1),
            renewed: Instant::now(),
            renewing: false,
            draining: false,
            releasing: 0,
        }
    }

    /// Renews every claim this node holds, in one statement. Sessions whose
    /// claim another node took stop at once; if no renewal has gone through
    /// for a whole lease, every session stops, since another node may
    /// have claimed them meanwhile (their writes would be fenced anyway).
    fn renew_leases(&mut self, ctx: &mut Context<Self>) {
        let lease = self.deps.store.node().lease;
        if self.renewing {
            if self.renewed.elapsed() >= lease {
                self.lose_all();
            }
            return;
        }
        let claims: Vec<(String, Epoch)> = self
            .live
            .iter()
            .filter(|(_, l)| matches!(l.epoch, Epoch::Claimed(_)))
            .map(|(id, l)| (id.as_str().to_owned(), l.epoch))
            .collect();
        if claims.is_empty() {
            self.renewed = Instant::now();
            return;
        }
        self.renewing = true;
        let store = self.deps.store.clone();
        let started = Instant::now();
        ctx.spawn(
            async move { store.renew(&claims).await }
                .into_actor(self)
                .map(move |res, act, _| {
                    act.renewing = false;
                    match res {
                        Ok(lost) => {
                            act.renewed = started;
                            act.deps.metrics.lease_renewals.inc();
                            for id in lost {
                                act.lose(&id);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "renewing session claims failed");
                            if act.renewed.elapsed() >= lease {
                                act.lose_all();
                            }
                        }
                    }
                }),
        );
    }

    /// Stops a session whose claim this node lost.
    fn lose(&mut self, session_id: &str) {
        if let Some(live) = self.live.remove(session_id) {
            self.deps.metrics.sessions_live.dec();
            live.handle.addr.do_send(LeaseLost);
        }
    }

    fn lose_all(&mut self) {
        let ids: Vec<SessionId> = self
            .live
            .iter()
            .filter(|(_, l)| matches!(l.epoch, Epoch::Claimed(_)))
            .map(|(id, _)| id.clone())
            .collect();
        if !ids.is_empty() {
            tracing::error!(
                sessions = ids.len(),
                "session claims lapsed; stopping them here"
            );
        }
        for id in ids {
            self.lose(id.as_str());
        }
    }

    /// Refuses one more live session when the node has its most.
    fn has_room(&self) -> Result<(), HubError> {
        if self.draining {
            Err(HubError::Draining)
        } else if self.live.len() >= self.max_sessions {
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

    /// Starts an actor where the placement says, and records it.
    fn start(
        &mut self,
        meta: Arc<SessionMeta>,
        restored: Restored,
        hub: Addr<Self>,
    ) -> SessionHandle {
        let epoch = restored.epoch;
        let deps = self.deps.clone();
        let stats = Arc::new(SessionStats::default());
        stats.turns.store(restored.state.turn, Ordering::Relaxed);
        stats.last_activity_ms.store(now_ms(), Ordering::Relaxed);
        let actor_meta = meta.clone();
        let hub = HubLink {
            stats: stats.clone(),
            unregister: hub.recipient(),
        };
        let addr = self
            .placement
            .start(move |_| SessionActor::new(actor_meta, deps, hub, restored));
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
                epoch,
                stats,
            },
        );
        handle
    }
}

impl Actor for SessionHub {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.deps.store.is_shared() {
            ctx.run_interval(self.deps.store.node().lease / 3, Self::renew_leases);
        }
    }
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
            closed_at: None,
        };
        let state = msg.state;
        let store = self.deps.store.clone();
        let snapshot = serde_json::to_string(&state);
        let meta_for_store = meta.clone();
        Box::pin(
            async move {
                let snapshot = snapshot.map_err(|e| StorageError::Corrupt(e.to_string()))?;
                let id = meta_for_store.session_id.clone();
                store.create_session(meta_for_store, snapshot).await?;
                // Nobody else knows the new id yet: the claim is this node's.
                let (epoch, _) = store.claim(&id).await?.ok_or(HubError::Elsewhere)?;
                Ok(epoch)
            }
            .into_actor(self)
            .map(move |res: Result<Epoch, HubError>, act, ctx| {
                let epoch = res?;
                act.deps.metrics.sessions_created.inc();
                Ok(act.start(Arc::new(meta), replay::fresh(state, epoch), ctx.address()))
            }),
        )
    }
}

impl Handler<Running> for SessionHub {
    type Result = Option<SessionHandle>;

    fn handle(&mut self, msg: Running, _: &mut Self::Context) -> Self::Result {
        self.running(msg.session_id.as_str())
    }
}

impl Handler<Lookup> for SessionHub {
    type Result = ResponseActFuture<Self, Result<Option<SessionHandle>, HubError>>;

    fn handle(&mut self, msg: Lookup, _: &mut Self::Context) -> Self::Result {
        if let Some(handle) = self.running(msg.session_id.as_str()) {
            return Box::pin(actix::fut::ready(Ok(Some(handle))));
        }
        if self.draining {
            return Box::pin(actix::fut::ready(Err(HubError::Draining)));
        }
        let store = self.deps.store.clone();
        let metrics = self.deps.metrics.clone();
        let id = msg.session_id;
        Box::pin(
            async move {
                match store.session_meta(id.as_str()).await? {
                    None => return Ok(None),
                    Some(meta) if meta.closed_at.is_some() => return Err(HubError::Closed),
                    Some(_) => {}
                }
                // Claimed before it is read: whatever the last owner wrote
                // before the claim is in what is read, and nothing it
                // writes after.
                let (epoch, taken_over) =
                    store.claim(id.as_str()).await?.ok_or(HubError::Elsewhere)?;
                if taken_over {
                    metrics.sessions_taken_over.inc();
                }
                // Writes an earlier actor of the session queued here (one
                // that died, a panic inside it) are committed before the
                // journal is read, so the new actor goes on after them.
                store.settled().await;
                let Some(loaded) = store.load_session(id.as_str()).await? else {
                    return Ok(None);
                };
                if loaded.meta.closed_at.is_some() {
                    // Closed between the first read and the claim.
                    if let Err(e) = store.release(id.as_str(), epoch).await {
                        tracing::warn!(session_id = %id, error = %e, "releasing a closed session's claim failed; it lapses with its lease");
                    }
                    return Err(HubError::Closed);
                }
                let requests = store
                    .recent_request_ids(id.as_str(), REMEMBERED_REQUESTS as i64)
                    .await?;
                let meta = loaded.meta.clone();
                Ok(Some((meta, replay::restore(loaded, requests, epoch)?)))
            }
            .into_actor(self)
            .map(move |res: Result<_, HubError>, act, ctx| {
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

impl Live {
    /// The session as listed, its counts read now.
    fn info(&self, session_id: &SessionId) -> LiveInfo {
        let (meta, stats) = (&self.handle.meta, &self.stats);
        LiveInfo {
            session_id: session_id.clone(),
            tenant_id: meta.tenant_id.clone(),
            campaign_id: meta.campaign_id.clone(),
            title: meta.title.clone(),
            visibility: meta.visibility,
            players: stats.players.load(Ordering::Relaxed),
            spectators: stats.spectators.load(Ordering::Relaxed),
            turns: stats.turns.load(Ordering::Relaxed),
            queued: stats.queued.load(Ordering::Relaxed),
            last_activity_ms: stats.last_activity_ms.load(Ordering::Relaxed),
            closing: stats.closing.load(Ordering::Relaxed),
            spectator_token: meta.spectator_token.clone(),
        }
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
            .map(|(session_id, l)| l.info(session_id))
            .collect();
        list.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        list
    }
}

impl Handler<ListAll> for SessionHub {
    type Result = MessageResult<ListAll>;

    fn handle(&mut self, msg: ListAll, _: &mut Self::Context) -> Self::Result {
        let mut list: Vec<LiveInfo> = self
            .live
            .iter()
            .map(|(session_id, l)| l.info(session_id))
            .collect();
        // Most recently active first; the id breaks ties, so the order is
        // the same on every read.
        let order = |a: &LiveInfo, b: &LiveInfo| {
            b.last_activity_ms
                .cmp(&a.last_activity_ms)
                .then_with(|| a.session_id.cmp(&b.session_id))
        };
        let limit = msg.limit.min(list.len());
        if limit < list.len() {
            list.select_nth_unstable_by(limit, order);
            list.truncate(limit);
        }
        list.sort_by(order);
        MessageResult(AllLive {
            total: self.live.len(),
            sessions: list,
        })
    }
}

impl Handler<Unregister> for SessionHub {
    type Result = ();

    fn handle(&mut self, msg: Unregister, ctx: &mut Self::Context) {
        if self
            .live
            .get(&msg.session_id)
            .is_some_and(|l| l.handle.addr == msg.addr)
            && let Some(live) = self.live.remove(&msg.session_id)
        {
            self.deps.metrics.sessions_live.dec();
            // The session stopped here (idle, or its storage failed): let
            // another node take it at once instead of after the lease.
            let store = self.deps.store.clone();
            let id = msg.session_id.clone();
            self.releasing += 1;
            ctx.spawn(
                async move {
                    if let Err(e) = store.release(id.as_str(), live.epoch).await {
                        tracing::warn!(session_id = %id, error = %e, "releasing a session claim failed; it lapses with its lease");
                    }
                }
                .into_actor(self)
                .map(|(), act, _| act.releasing -= 1),
            );
        }
    }
}

/// Stops the hub once the server has stopped and its sessions with it
/// (their threads stopping), or after [`STOP_WAIT`]: after that no session
/// queues another write. Work still in flight then (a renewal) is dropped
/// while the runtime still runs: a database call dropped when the runtime
/// itself goes down cannot hand its connection back.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopHub;

/// The longest a stopping hub waits for its sessions' actors to stop.
const STOP_WAIT: Duration = Duration::from_secs(10);

impl Handler<StopHub> for SessionHub {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: StopHub, _: &mut Self::Context) -> Self::Result {
        Box::pin(
            self.drained(Instant::now() + STOP_WAIT)
                .map(|(), _, ctx| ctx.stop()),
        )
    }
}

/// Shuts the node down gently: no session is created or loaded any more,
/// every live session finishes its work, closes its connections with 1012
/// and unloads, and its claim is released so another node takes it at
/// once. Answers when all that is done, or after `within`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DrainNode {
    pub within: Duration,
}

impl Handler<DrainNode> for SessionHub {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: DrainNode, _: &mut Self::Context) -> Self::Result {
        self.draining = true;
        tracing::info!(
            sessions = self.live.len(),
            "draining: finishing and handing over sessions"
        );
        for live in self.live.values() {
            live.handle.addr.do_send(Drain);
        }
        let until = Instant::now() + msg.within;
        Box::pin(
            async move {
                // Sessions report back through `Unregister`; look again
                // now and then.
                actix_web::rt::time::sleep(Duration::from_millis(20)).await;
            }
            .into_actor(self)
            .then(move |(), act, _| act.drained(until)),
        )
    }
}

impl SessionHub {
    /// Waits until no session is live and no claim is being released, or
    /// `until`.
    fn drained(&mut self, until: Instant) -> actix::fut::LocalBoxActorFuture<Self, ()> {
        // Sessions whose actor died are gone too.
        self.live.retain(|_, l| l.handle.addr.connected());
        if (self.live.is_empty() && self.releasing == 0) || Instant::now() >= until {
            if !self.live.is_empty() {
                tracing::warn!(
                    sessions = self.live.len(),
                    "drain timed out; the rest lapse with their leases"
                );
            }
            return Box::pin(actix::fut::ready(()));
        }
        Box::pin(
            actix_web::rt::time::sleep(Duration::from_millis(20))
                .into_actor(self)
                .then(move |(), act, _| act.drained(until)),
        )
    }
}
