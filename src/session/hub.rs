//! The session hub: maps session ids to live actors, creates sessions,
//! loads a session from storage on its first use after a restart or unload,
//! holds the node's live sessions to their quotas (`quota`), deletes
//! abandoned anonymous sessions (the retention sweep), and loads sessions
//! whose timer is due while they are not loaded (the timer sweep,
//! `sweeper`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::actor::SessionActor;
use super::messages::{Drain, LeaseLost};
use super::placement::Placement;
use super::quota::{LiveTally, Quotas, Refusal};
use super::replay;
use super::replay::Restored;
use super::sweeper::{self, Sweeper};
use super::types::{
    HubLink, REMEMBERED_REQUESTS, SessionDeps, SessionStats, Unregister, random_token,
};
use crate::game::GameState;
use crate::game::party::stored_token;
use crate::game::pieces::SharedStart;
use crate::game::save::SavedFrame;
use crate::ids::{SessionId, TenantId};
use crate::storage::{
    Epoch, FirstSnapshot, ImportedStory, JournalRow, SessionMeta, StorageError, Visibility, now_ms,
};

/// A live session: its actor and what is needed to authorize callers.
#[derive(Clone)]
pub struct SessionHandle {
    pub addr: Addr<SessionActor>,
    pub meta: Arc<SessionMeta>,
    /// WebSocket connections open on this session (counted before the
    /// upgrade, so a crowd cannot pass the per-session cap at once).
    pub connections: Arc<AtomicUsize>,
    /// Which seat a token opens, kept up to date by the session.
    pub seats: Arc<super::seats::SeatBook>,
    /// The thread the session runs on: a player's connection is moved
    /// there, so its chats and frames never cross threads.
    pub home: super::placement::Home,
}

/// Why the hub could not give a session.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HubError {
    #[error("this node already runs {0} sessions, the most it may")]
    Full(usize),
    /// The tenant holds its share of the node (`QUESTD_MAX_SESSIONS_PER_TENANT`).
    #[error(
        "this tenant already runs {0} sessions on this node, the most one tenant may \
         (QUESTD_MAX_SESSIONS_PER_TENANT); try again once some unload"
    )]
    TenantFull(usize),
    /// The live sessions' state fills the node's budget
    /// (`QUESTD_MAX_LIVE_STATE_MB`); idle sessions are being unloaded.
    #[error("this node holds all the session state it may; try again soon")]
    StateFull,
    /// Another node's claim on the session is alive (several nodes on one
    /// PostgreSQL database).
    #[error("the session runs on another node")]
    Elsewhere,
    /// This node is shutting down and takes no more sessions.
    #[error("this node is restarting; try again")]
    Draining,
    /// An operator closed the session for good: it is never loaded again.
    #[error("{}", super::types::CLOSED_BY_OPERATOR)]
    Closed,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A session just created or imported: its handle, and its tokens, which
/// the store keeps as digests (a public session's spectator token as
/// itself), so this is the one time they are known.
pub struct NewSession {
    pub handle: SessionHandle,
    pub player_token: String,
    pub spectator_token: String,
}

/// Creates a session from a checked campaign's start state; answers once
/// it is durable.
#[derive(Message)]
#[rtype(result = "Result<NewSession, HubError>")]
pub struct CreateSession {
    pub tenant_id: TenantId,
    pub visibility: Visibility,
    pub state: GameState,
    /// `state` as stored once for every session that starts from it
    /// unchanged; `None` stores `state` whole, as the session's own.
    pub shared: Option<Arc<SharedStart>>,
    /// Created without a key: deleted once unplayed for the retention
    /// time.
    pub anonymous: bool,
}

/// Creates a session from a checked save (docs/protocol.md §13): new id
/// and tokens, the save's state after its story's last frame, the story
/// as its journal. Answers once it is durable and loaded, as a session
/// stored before a restart loads (a turn the save caught running is
/// closed as interrupted).
#[derive(Message)]
#[rtype(result = "Result<NewSession, HubError>")]
pub struct ImportSession {
    pub tenant_id: TenantId,
    pub visibility: Visibility,
    pub anonymous: bool,
    pub campaign_id: String,
    pub title: String,
    /// The state's JSON.
    pub state: String,
    pub story: Vec<SavedFrame>,
    /// (timer_id, due_at) of the state's pending timers.
    pub timers: Vec<(String, i64)>,
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
    pub tenant_id: TenantId,
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
    pub tenant_id: TenantId,
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
    /// link); only public sessions are listed there, and only theirs is
    /// stored as itself (a private session's is its digest).
    pub spectator_token: String,
}

struct Live {
    handle: SessionHandle,
    /// The claim the session runs under, renewed by the hub.
    epoch: Epoch,
    /// Its counts, kept up to date by the actor.
    stats: Arc<SessionStats>,
    /// The bytes of state it was counted for in the hub's tally.
    bytes: u64,
}

/// Anonymous sessions one sweep deletes at most; the next sweep goes on.
const SWEEP_BATCH: u32 = 256;

/// How often the retention sweep runs: a quarter of the retention time,
/// within these bounds.
const SWEEP_EVERY_MIN: Duration = Duration::from_millis(250);
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(15 * 60);

/// Owns the id -> actor map. Runs on the system arbiter; session actors run
/// where `placement` puts them (the HTTP workers' threads by default).
pub struct SessionHub {
    deps: Arc<SessionDeps>,
    placement: Placement,
    live: HashMap<SessionId, Live>,
    /// What the live sessions (and creations on their way) hold, against
    /// the node's quotas.
    tally: LiveTally,
    /// Sessions being loaded now, and how many lookups load each: the
    /// sweep leaves them alone.
    loading: HashMap<SessionId, usize>,
    /// Sessions the sweep is deleting: a lookup finds none of them.
    sweeping: HashSet<SessionId>,
    /// How long an anonymous session is kept unplayed; `None` keeps them.
    retention: Option<Duration>,
    /// A sweep is on its way: the next tick waits for it.
    sweep_running: bool,
    /// When this node's claims were last renewed (or first made).
    renewed: Instant,
    /// A renewal is on its way: the next tick waits for it.
    renewing: bool,
    /// The node is shutting down: no session is created or loaded.
    draining: bool,
    /// Claims being released; a drain ends once none is.
    releasing: usize,
    /// The timer sweeper: loads sessions whose timer is due.
    timers: Sweeper,
}

impl SessionHub {
    /// A hub holding its live sessions to `quotas`, deleting anonymous
    /// sessions unplayed for `retention` (`None` keeps them).
    pub fn new(
        deps: Arc<SessionDeps>,
        placement: Placement,
        quotas: Quotas,
        retention: Option<Duration>,
    ) -> Self {
        Self {
            deps,
            placement,
            live: HashMap::new(),
            tally: LiveTally::new(quotas),
            loading: HashMap::new(),
            sweeping: HashSet::new(),
            retention,
            sweep_running: false,
            renewed: Instant::now(),
            renewing: false,
            draining: false,
            releasing: 0,
            timers: Sweeper::default(),
        }
    }

    /// Renews every claim this node holds, in one statement. Sessions whose
    /// claim another node took stop at once; if a renewal fails and none
    /// has gone through for a whole lease, every session stops, since
    /// another node may have claimed them meanwhile (their writes would be
    /// fenced anyway).
    ///
    /// A renewal still on its way is waited for, even past the lease: a
    /// slow database (a checkpoint, a busy disk) is not a lost claim, and
    /// the answer says which claims are still this node's. The wait is
    /// bounded: a renewal gives up within a lease (`Store::renew`), and
    /// its failure then stops everything. Meanwhile the sessions' writes
    /// stay fenced by their epochs, so a session another node took writes
    /// nothing here.
    fn renew_leases(&mut self, ctx: &mut Context<Self>) {
        if self.renewing {
            return;
        }
        let claims: Vec<(SessionId, Epoch)> = self
            .live
            .iter()
            .filter(|(_, l)| matches!(l.epoch, Epoch::Claimed(_)))
            .map(|(id, l)| (id.clone(), l.epoch))
            .collect();
        if claims.is_empty() {
            self.renewed = Instant::now();
            return;
        }
        self.renewing = true;
        let lease = self.deps.store.node().lease;
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
                            act.deps.metrics.lease_renewals_failed.inc();
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
        if let Some(live) = self.forget(session_id) {
            live.handle.addr.do_send(LeaseLost);
        }
    }

    /// Takes a session out of the live map, its counts out of the tally
    /// and its spending of the day out of the budgets' memory.
    fn forget(&mut self, session_id: &str) -> Option<Live> {
        let live = self.live.remove(session_id)?;
        self.deps.budgets.forget_session(session_id);
        self.deps.metrics.sessions_live.dec();
        self.tally.release(&live.handle.meta.tenant_id, live.bytes);
        Some(live)
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

    /// Counts one more live session of `tenant` holding `bytes` of state,
    /// or refuses it: the node draining, or a quota (`quota::LiveTally`).
    /// When state bytes are what is short, idle sessions are unloaded so
    /// that a retry finds room.
    fn admit(&mut self, tenant: &str, bytes: u64) -> Result<(), HubError> {
        if self.draining {
            return Err(HubError::Draining);
        }
        self.tally.admit(tenant, bytes).map_err(|r| match r {
            Refusal::Node(n) => HubError::Full(n),
            Refusal::Tenant(n) => HubError::TenantFull(n),
            Refusal::State { over } => {
                self.unload_idle(over);
                HubError::StateFull
            }
        })
    }

    /// Asks the least recently active sessions that nobody is connected
    /// to and nothing waits in to unload, until they hold `bytes` at
    /// least. They finish any work taken first (`Drain`); the tally
    /// forgets them once they have stopped.
    fn unload_idle(&self, bytes: u64) {
        let mut idle: Vec<&Live> = self
            .live
            .values()
            .filter(|l| {
                let s = &l.stats;
                s.players.load(Ordering::Relaxed) == 0
                    && s.spectators.load(Ordering::Relaxed) == 0
                    && s.queued.load(Ordering::Relaxed) == 0
            })
            .collect();
        idle.sort_by_key(|l| l.stats.last_activity_ms.load(Ordering::Relaxed));
        let mut freed = 0;
        for live in idle {
            if freed >= bytes {
                break;
            }
            freed += live.bytes;
            live.handle.addr.do_send(Drain);
        }
        if freed > 0 {
            tracing::info!(
                freed_bytes = freed,
                "the node's session state is at its budget: unloading idle sessions"
            );
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
        self.forget(session_id);
        None
    }

    /// Starts an actor where the placement says, and records it; the
    /// tally counted it already, for `bytes`.
    fn start(
        &mut self,
        meta: Arc<SessionMeta>,
        restored: Restored,
        hub: Addr<Self>,
        bytes: u64,
    ) -> SessionHandle {
        let epoch = restored.epoch;
        let deps = self.deps.clone();
        let stats = Arc::new(SessionStats::default());
        stats.turns.store(restored.state.turn, Ordering::Relaxed);
        stats.last_activity_ms.store(now_ms(), Ordering::Relaxed);
        stats.seats.update(&restored.state.party);
        let seats = stats.seats.clone();
        let actor_meta = meta.clone();
        let hub = HubLink {
            stats: stats.clone(),
            unregister: hub.recipient(),
        };
        let (addr, home) = self
            .placement
            .start_placed(move |_| SessionActor::new(actor_meta, deps, hub, restored));
        self.deps.metrics.sessions_live.inc();
        let handle = SessionHandle {
            addr,
            meta,
            connections: Arc::default(),
            seats,
            home,
        };
        self.live.insert(
            handle.meta.session_id.clone(),
            Live {
                handle: handle.clone(),
                epoch,
                stats,
                bytes,
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
        if let Some(retention) = self.retention {
            let every = (retention / 4).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX);
            ctx.run_interval(every, Self::sweep);
        }
        // At once, then on their ticks: timers missed while the node was
        // down fire as soon as it is up.
        self.sweep_timers(ctx);
        self.count_timers(ctx);
        ctx.run_interval(sweeper::SWEEP_EVERY, Self::sweep_timers);
        ctx.run_interval(sweeper::COUNT_EVERY, Self::count_timers);
    }
}

impl Handler<CreateSession> for SessionHub {
    type Result = ResponseActFuture<Self, Result<NewSession, HubError>>;

    fn handle(&mut self, msg: CreateSession, _: &mut Self::Context) -> Self::Result {
        // A shared start was serialized once for all its sessions; only a
        // state of the session's own is serialized here.
        let snapshot = match msg.shared {
            Some(start) => FirstSnapshot::Shared(start),
            None => match serde_json::to_string(&msg.state) {
                Ok(s) => FirstSnapshot::Whole(s),
                Err(e) => {
                    let e = HubError::Storage(StorageError::Corrupt(e.to_string()));
                    return Box::pin(actix::fut::ready(Err(e)));
                }
            },
        };
        // Counted from now, so creations still being written count
        // against the caps too; given back if the write fails.
        let bytes = snapshot.state_len() as u64;
        if let Err(e) = self.admit(&msg.tenant_id, bytes) {
            return Box::pin(actix::fut::ready(Err(e)));
        }
        let (meta, tokens) = new_meta(
            msg.tenant_id,
            msg.state.campaign_id.clone(),
            msg.state.title.clone(),
            msg.visibility,
            msg.anonymous,
        );
        let state = msg.state;
        let store = self.deps.store.clone();
        let budgets = self.deps.budgets.clone();
        let meta_for_store = meta.clone();
        Box::pin(
            async move {
                let id = meta_for_store.session_id.clone();
                let tenant = meta_for_store.tenant_id.clone();
                store.create_session(meta_for_store, snapshot).await?;
                // Nobody else knows the new id yet: the claim is this node's.
                let (epoch, _) = store.claim(&id).await?.ok_or(HubError::Elsewhere)?;
                budgets.load(None, Some(tenant.as_str())).await?;
                Ok(epoch)
            }
            .into_actor(self)
            .map(move |res: Result<Epoch, HubError>, act, ctx| {
                let epoch = match res {
                    Ok(epoch) => epoch,
                    Err(e) => {
                        act.tally.release(&meta.tenant_id, bytes);
                        return Err(e);
                    }
                };
                act.deps.metrics.sessions_created.inc();
                let fresh = replay::fresh(state, epoch);
                let handle = act.start(Arc::new(meta), fresh, ctx.address(), bytes);
                Ok(NewSession {
                    handle,
                    player_token: tokens.player,
                    spectator_token: tokens.spectator,
                })
            }),
        )
    }
}

impl Handler<ImportSession> for SessionHub {
    type Result = ResponseActFuture<Self, Result<NewSession, HubError>>;

    fn handle(&mut self, msg: ImportSession, _: &mut Self::Context) -> Self::Result {
        // Refused before anything is written when the node or the tenant
        // has no room; counted for real when it loads below.
        let bytes = msg.state.len() as u64;
        if let Err(e) = self.admit(&msg.tenant_id, bytes) {
            return Box::pin(actix::fut::ready(Err(e)));
        }
        self.tally.release(&msg.tenant_id, bytes);
        let (meta, tokens) = new_meta(
            msg.tenant_id,
            msg.campaign_id,
            msg.title,
            msg.visibility,
            msg.anonymous,
        );
        let created_at = meta.created_at;
        let story = ImportedStory {
            rows: msg
                .story
                .into_iter()
                .map(|f| JournalRow {
                    session_id: meta.session_id.clone(),
                    seq: f.seq,
                    turn_id: f.turn_id,
                    kind: f.kind,
                    request_id: None,
                    frame: f.frame.into(),
                    effect: None,
                    history: None,
                    action: None,
                    created_at,
                    timers: Vec::new(),
                })
                .collect(),
            timers: msg.timers,
        };
        let store = self.deps.store.clone();
        let id = meta.session_id.clone();
        Box::pin(
            async move { store.import_session(meta, msg.state, story).await }
                .into_actor(self)
                .then(move |stored, act, _| {
                    let load = match stored {
                        Ok(()) => {
                            act.deps.metrics.sessions_created.inc();
                            act.load(id)
                        }
                        Err(e) => Box::pin(actix::fut::ready(Err(e.into()))),
                    };
                    load.map(|loaded, _, _| {
                        let handle = loaded?.ok_or(HubError::Storage(StorageError::Corrupt(
                            "an imported session did not load".into(),
                        )))?;
                        Ok(NewSession {
                            handle,
                            player_token: tokens.player,
                            spectator_token: tokens.spectator,
                        })
                    })
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
        self.load(msg.session_id)
    }
}

impl SessionHub {
    /// The live session `id`, loaded from storage if it is not live: a
    /// caller's lookup and the timer sweeper both come this way, so a load
    /// claims the session first (several nodes: one another node holds
    /// is `Elsewhere`, and of two nodes racing for it only one claim
    /// succeeds), and a closed session is never loaded.
    fn load(
        &mut self,
        id: SessionId,
    ) -> actix::fut::LocalBoxActorFuture<Self, Result<Option<SessionHandle>, HubError>> {
        if let Some(handle) = self.running(id.as_str()) {
            return Box::pin(actix::fut::ready(Ok(Some(handle))));
        }
        if self.draining {
            return Box::pin(actix::fut::ready(Err(HubError::Draining)));
        }
        // Being deleted as abandoned: gone already, as far as callers go.
        if self.sweeping.contains(&id) {
            return Box::pin(actix::fut::ready(Ok(None)));
        }
        *self.loading.entry(id.clone()).or_insert(0) += 1;
        let store = self.deps.store.clone();
        let metrics = self.deps.metrics.clone();
        let budgets = self.deps.budgets.clone();
        let loading = id.clone();
        Box::pin(
            async move {
                match store.session_meta(&id).await? {
                    None => return Ok(None),
                    Some(meta) if meta.closed_at.is_some() => return Err(HubError::Closed),
                    Some(_) => {}
                }
                // Claimed before it is read: whatever the last owner wrote
                // before the claim is in what is read, and nothing it
                // writes after.
                let (epoch, taken_over) =
                    store.claim(&id).await?.ok_or(HubError::Elsewhere)?;
                if taken_over {
                    metrics.sessions_taken_over.inc();
                }
                // Writes an earlier actor of the session queued here (one
                // that died, a panic inside it) are committed before the
                // journal is read, so the new actor goes on after them.
                store.settled().await;
                let loaded = store.load_session(&id).await;
                let Some(loaded) = release_if_unreadable(&store, &id, epoch, loaded).await? else {
                    return Ok(None);
                };
                if loaded.meta.closed_at.is_some() {
                    // Closed between the first read and the claim.
                    if let Err(e) = store.release(&id, epoch).await {
                        tracing::warn!(session_id = %id, error = %e, "releasing a closed session's claim failed; it lapses with its lease");
                    }
                    return Err(HubError::Closed);
                }
                let requests = store
                    .recent_request_ids(&id, REMEMBERED_REQUESTS as i64)
                    .await?;
                let tenant = loaded.meta.tenant_id.as_str();
                budgets.load(Some(id.as_str()), Some(tenant)).await?;
                let meta = loaded.meta.clone();
                let bytes = loaded.state_bytes();
                Ok(Some((meta, replay::restore(loaded, requests, epoch)?, bytes)))
            }
            .into_actor(self)
            .map(move |res: Result<_, HubError>, act, ctx| {
                if let Some(n) = act.loading.get_mut(&loading) {
                    *n -= 1;
                    if *n == 0 {
                        act.loading.remove(&loading);
                    }
                }
                let Some((meta, restored, bytes)) = res? else { return Ok(None) };
                // Another lookup may have loaded it meanwhile: keep that one.
                if let Some(handle) = act.running(&meta.session_id) {
                    return Ok(Some(handle));
                }
                act.admit(&meta.tenant_id, bytes)?;
                tracing::info!(session_id = %meta.session_id, seq = restored.last_seq, "session loaded from storage");
                act.deps.metrics.sessions_loaded.inc();
                Ok(Some(act.start(Arc::new(meta), restored, ctx.address(), bytes)))
            }),
        )
    }
}

/// A new session's tokens, said once in the answer that created it.
struct FreshTokens {
    player: String,
    spectator: String,
}

/// A new session's meta: a fresh id and fresh tokens; and the tokens
/// themselves, which the meta holds as digests (a public session's
/// spectator token as itself: the public list gives it out).
fn new_meta(
    tenant_id: TenantId,
    campaign_id: String,
    title: String,
    visibility: Visibility,
    anonymous: bool,
) -> (SessionMeta, FreshTokens) {
    let player_token = random_token(32);
    let spectator_token = random_token(32);
    let stored_spectator_token = match visibility {
        Visibility::Private => stored_token(&spectator_token),
        Visibility::Public => spectator_token.clone(),
    };
    let meta = SessionMeta {
        session_id: format!("sess_{}", random_token(16)).into(),
        tenant_id,
        campaign_id,
        title,
        stored_player_token: stored_token(&player_token),
        stored_spectator_token,
        created_at: now_ms(),
        visibility,
        closed_at: None,
        anonymous,
    };
    let tokens = FreshTokens {
        player: player_token,
        spectator: spectator_token,
    };
    (meta, tokens)
}

/// A session whose stored format this node does not read (a newer
/// version wrote it) is left at once to a node that reads it: the claim
/// just made is released, and the session is not replayed at all.
async fn release_if_unreadable<T>(
    store: &crate::storage::Store,
    id: &SessionId,
    epoch: Epoch,
    read: Result<T, StorageError>,
) -> Result<T, StorageError> {
    if let Err(e @ StorageError::NewerFormat { .. }) = &read {
        tracing::warn!(session_id = %id, error = %e, "a session of a newer format is left to a node that reads it");
        if let Err(e) = store.release(id, epoch).await {
            tracing::warn!(session_id = %id, error = %e, "releasing the claim of a session of a newer format failed; it lapses with its lease");
        }
    }
    read
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
            spectator_token: meta.stored_spectator_token.clone(),
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

impl Handler<Unregister<SessionActor>> for SessionHub {
    type Result = ();

    fn handle(&mut self, msg: Unregister<SessionActor>, ctx: &mut Self::Context) {
        if self
            .live
            .get(&msg.session_id)
            .is_some_and(|l| l.handle.addr == msg.addr)
            && let Some(live) = self.forget(msg.session_id.as_str())
        {
            // The session stopped here (idle, or its storage failed): let
            // another node take it at once instead of after the lease.
            let store = self.deps.store.clone();
            let id = msg.session_id.clone();
            self.releasing += 1;
            ctx.spawn(
                async move {
                    if let Err(e) = store.release(&id, live.epoch).await {
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
        let dead: Vec<SessionId> = self
            .live
            .iter()
            .filter(|(_, l)| !l.handle.addr.connected())
            .map(|(id, _)| id.clone())
            .collect();
        for id in dead {
            self.forget(id.as_str());
        }
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

impl SessionHub {
    /// The retention sweep: finds anonymous sessions unplayed for the
    /// retention time, leaves out those this node runs or is loading,
    /// claims each (so no other node loads it meanwhile; one another node
    /// holds is skipped) and deletes it with everything stored of it.
    /// Lookups of a session being deleted find nothing.
    fn sweep(&mut self, ctx: &mut Context<Self>) {
        let Some(retention) = self.retention else {
            return;
        };
        if self.sweep_running || self.draining {
            return;
        }
        self.sweep_running = true;
        let before = now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let store = self.deps.store.clone();
        ctx.spawn(
            async move { store.abandoned_sessions(before, SWEEP_BATCH).await }
                .into_actor(self)
                .then(|found, act, _| {
                    let found = found.unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "finding abandoned sessions failed");
                        Vec::new()
                    });
                    let ids: Vec<SessionId> = found
                        .into_iter()
                        .filter(|id| {
                            !act.live.contains_key(id)
                                && !act.loading.contains_key(id)
                                && !act.sweeping.contains(id)
                        })
                        .collect();
                    act.sweeping.extend(ids.iter().cloned());
                    let store = act.deps.store.clone();
                    async move {
                        let mut deleted = Vec::new();
                        for id in &ids {
                            match delete_abandoned(&store, id).await {
                                Ok(true) => deleted.push(id.clone()),
                                Ok(false) => {}
                                Err(e) => {
                                    tracing::warn!(session_id = %id, error = %e, "deleting an abandoned session failed");
                                }
                            }
                        }
                        (ids, deleted)
                    }
                    .into_actor(act)
                })
                .map(|(ids, deleted), act, _| {
                    for id in &ids {
                        act.sweeping.remove(id);
                    }
                    act.sweep_running = false;
                    if !deleted.is_empty() {
                        tracing::info!(
                            sessions = deleted.len(),
                            "deleted anonymous sessions past their retention"
                        );
                    }
                }),
        );
    }
}

impl SessionHub {
    /// The sweep: finds open sessions with a timer due or a stored chat
    /// waiting that this node neither runs nor is loading (on PostgreSQL,
    /// ones no live node claims) and loads a bounded batch of them through
    /// [`Self::load`]; each fires its due timers and runs its stored chats
    /// as it starts. A sweep waits for the last one's loads; a draining
    /// node loads nothing; a session whose load keeps failing, or which
    /// keeps its due time after loading, is tried again later and later
    /// (`sweeper`).
    fn sweep_timers(&mut self, ctx: &mut Context<Self>) {
        if self.draining {
            return;
        }
        let Some(limit) = self.timers.begin() else {
            return;
        };
        let store = self.deps.store.clone();
        ctx.spawn(
            async move {
                let due = store.due_timers(now_ms(), limit).await?;
                let waiting = store.waiting_chats(sweeper::WAITING_READ_MOST).await?;
                Ok::<_, StorageError>(sweeper::merged(due, waiting))
            }
                .into_actor(self)
                .map(|found, act, ctx| {
                    let found = match found {
                        Ok(found) if !act.draining => found,
                        Ok(_) => return act.timers.abandon(),
                        Err(e) => {
                            if act.timers.read_failed() {
                                tracing::warn!(error = %e, "finding sessions with a due timer or a waiting chat failed; retrying every sweep");
                            } else {
                                tracing::debug!(error = %e, "finding sessions with a due timer or a waiting chat failed again");
                            }
                            return;
                        }
                    };
                    let busy: HashSet<SessionId> = found
                        .iter()
                        .map(|(id, _)| id)
                        .filter(|id| {
                            act.running(id.as_str()).is_some()
                                || act.loading.contains_key(*id)
                                || act.sweeping.contains(*id)
                        })
                        .cloned()
                        .collect();
                    for id in act.timers.pick(found, Instant::now(), &busy) {
                        let load = act.load(id.clone()).map(move |res, act, ctx| {
                            if act.timers.loaded() {
                                act.sweep_timers(ctx);
                            }
                            match res {
                                Ok(_) => {}
                                Err(e @ (HubError::Elsewhere | HubError::Draining | HubError::Closed)) => {
                                    tracing::debug!(session_id = %id, error = %e, "a session with a due timer or a waiting chat was not loaded");
                                }
                                Err(e) => {
                                    tracing::warn!(session_id = %id, error = %e, "loading a session with a due timer or a waiting chat failed; it is tried again later");
                                }
                            }
                        });
                        ctx.spawn(load);
                    }
                }),
        );
    }

    /// Sets the `timers_pending` gauge from the store's timer index.
    fn count_timers(&mut self, ctx: &mut Context<Self>) {
        if !self.timers.begin_count() {
            return;
        }
        let store = self.deps.store.clone();
        ctx.spawn(
            async move { store.count_timers().await }
                .into_actor(self)
                .map(|counted, act, _| {
                    act.timers.counted();
                    match counted {
                        Ok(n) => act.deps.metrics.timers_pending.set(n),
                        Err(e) => tracing::warn!(error = %e, "counting pending timers failed"),
                    }
                }),
        );
    }
}

/// Claims an abandoned session and deletes it; `false` when another node
/// holds it, or it is gone already.
async fn delete_abandoned(
    store: &crate::storage::Store,
    id: &SessionId,
) -> Result<bool, StorageError> {
    let Some((epoch, _)) = store.claim(id).await? else {
        return Ok(false);
    };
    store.delete_session(id, epoch).await
}
