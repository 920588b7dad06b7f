//! Spectators of a session another node runs, served by this node from the
//! journal (several nodes on PostgreSQL).
//!
//! A [`Tail`] follows one session here: it loads the session's state from
//! the store as a node taking it over would (snapshot, then replay), then
//! reads the journal rows after its cursor whenever a commit is announced,
//! applies their effects to its copy of the state, and sends their frames,
//! the owner's bytes unchanged, to its connections. It never writes: the
//! owner alone runs turns and journals frames. Its spectators get the same
//! welcome, seqs, frames and resume as on the owner, and the session may
//! move from node to node under them: the journal is the same.
//!
//! [`Tails`] holds this node's tails. Commits are announced by one
//! `NOTIFY` per group commit (see `storage::JournalNotices`), which the
//! listener task hands it; a notice may be lost (the listening connection
//! broke), so every tail also reads on its own every [`TAIL_POLL`], and
//! after the listener comes back every tail reads at once. A tail reads only
//! the next seq onward and stops at a gap, so a late or lost notice delays
//! frames but never reorders or drops them.
//!
//! The owner counts a tail's spectators in its `presence` frames: the tail
//! reports them through `report` when they change and every
//! [`AUDIENCE_REFRESH`]; the owner forgets a report not refreshed within
//! three of those (a node that died). A report that was not delivered (the
//! owner's lease looked lapsed, its node did not answer) is sent again
//! after 1, 2, 4 and then every 8 seconds ([`report_due`]), not only at
//! the next refresh.
//!
//! An operator's close (`sessions.closed_at`) reaches a tail's spectators
//! too: every [`TAIL_POLL`] a tail also reads whether the session was
//! closed. Once it is, and no node holds a claim on it any more (the owner
//! finished the work it had taken and unloaded, or died), the journal
//! grows no more: the tail reads it to its end, closes its connections
//! with `4000` as the owner closes its own, and stops. The owner does
//! nothing more for it.
//!
//! Invariants:
//! - a tail sends only frames committed to the journal, each once, in seq
//!   order, and its welcome's state is the state after its welcome seq;
//! - a tail closes its connections with `4000` only after it sent every
//!   frame of a closed session;
//! - a tail with no connections for [`TAIL_LINGER`] stops and leaves the
//!   map; one whose load fails stops at once (its callers reconnect), and
//!   so does one that meets a journal format newer than it reads (close
//!   `1012`: they reconnect, to a node that reads it).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytestring::ByteString;
use futures_util::future::BoxFuture;

use super::fanout::Fanout;
use super::messages::{ChatRefused, Joined, Subscribe, Unsubscribe, WelcomeState};
use super::placement::Placement;
use super::replay;
use super::seats::SeatSet;
use super::sequencer::Sequencer;
pub use super::types::AUDIENCE_REFRESH;
use super::types::{
    CLOSE_SESSION_CLOSED, CLOSE_SESSION_MOVED, CLOSED_BY_OPERATOR, MAX_STORED_BACKLOG_CHARS,
    RING_FRAMES,
};
use crate::error::ErrorCode;
use crate::game::GameState;
use crate::ids::SessionId;
use crate::metrics::Metrics;
use crate::protocol::{ConnRole, SeatOnline};
use crate::storage::{Epoch, JournalNotice, StorageError, Store, TailRow, now_ms};

/// How often a tail reads the journal without being told of a commit.
pub const TAIL_POLL: Duration = Duration::from_secs(5);
/// How long a tail with no connections waits before it stops.
pub const TAIL_LINGER: Duration = Duration::from_secs(10);
/// Journal rows one read takes at most (more are read at once after).
const TAIL_BATCH: u32 = RING_FRAMES as u32;
/// How often a tail checks whether it is idle or due to report.
const TICK: Duration = Duration::from_secs(1);

/// Tells the owner of a session how many spectators this node's tail of it
/// has (the HTTP layer knows how to reach the owner); answers whether the
/// owner was told.
pub type AudienceReport = Arc<dyn Fn(SessionId, usize) -> BoxFuture<'static, bool> + Send + Sync>;

/// A tail and the count of its connections (before the upgrade, as for a
/// live session, so a crowd cannot pass the per-session cap at once).
#[derive(Clone)]
pub struct TailHandle {
    pub addr: Addr<Tail>,
    pub connections: Arc<AtomicUsize>,
}

/// This node's tail of a session another node runs: started if there is
/// none. Refused while the node drains.
#[derive(Message)]
#[rtype(result = "Result<TailHandle, ChatRefused>")]
pub struct Watch {
    pub session_id: SessionId,
}

/// A notice of journal commits, from the listener.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Committed(pub JournalNotice);

/// Whether the listener hears notices now; while it does not, every tail
/// reads each [`TICK`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Listening(pub bool);

/// The node drains: every tail closes its connections with 1012 (they
/// resume on another node) and no tail starts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DrainTails;

/// A tail stopped; its entry goes if it is still this one.
#[derive(Message)]
#[rtype(result = "()")]
struct TailGone {
    session_id: SessionId,
    addr: Addr<Tail>,
}

/// Read the journal now.
#[derive(Message)]
#[rtype(result = "()")]
struct Read;

/// Close every connection with this code and stop.
#[derive(Message)]
#[rtype(result = "()")]
struct CloseTail {
    code: u16,
    reason: &'static str,
}

/// The tails of this node. Runs on the system arbiter.
pub struct Tails {
    /// Tails run where sessions do.
    placement: Placement,
    store: Store,
    metrics: Arc<Metrics>,
    report: AudienceReport,
    tails: HashMap<SessionId, TailHandle>,
    /// Tails this node keeps at most (`QUESTD_MAX_SESSIONS`).
    max_tails: usize,
    listening: bool,
    draining: bool,
}

impl Tails {
    pub fn new(
        store: Store,
        metrics: Arc<Metrics>,
        report: AudienceReport,
        placement: Placement,
        max_tails: usize,
    ) -> Self {
        Self {
            max_tails: max_tails.max(1),
            placement,
            store,
            metrics,
            report,
            tails: HashMap::new(),
            listening: false,
            draining: false,
        }
    }

    fn read_all(&self) {
        for tail in self.tails.values() {
            tail.addr.do_send(Read);
        }
    }
}

impl Actor for Tails {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(TICK, |act, _| {
            if !act.listening {
                act.read_all();
            }
        });
    }
}

impl Handler<Watch> for Tails {
    type Result = Result<TailHandle, ChatRefused>;

    fn handle(&mut self, msg: Watch, ctx: &mut Self::Context) -> Self::Result {
        if self.draining {
            return Err(ChatRefused::reloading());
        }
        let id = msg.session_id;
        if let Some(tail) = self.tails.get(&id)
            && tail.addr.connected()
        {
            return Ok(tail.clone());
        }
        // Each tail holds a session's state, as a live session does: a node
        // tails at most as many sessions as it may run.
        if self.tails.len() >= self.max_tails && !self.tails.contains_key(&id) {
            return Err(ChatRefused::new(
                ErrorCode::Overloaded,
                format!(
                    "this node already follows {} sessions, the most it may",
                    self.max_tails
                ),
            ));
        }
        let connections = Arc::new(AtomicUsize::new(0));
        let tail = Tail {
            session_id: id.clone(),
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            report: self.report.clone(),
            tails: ctx.address(),
            state: None,
            sequencer: Sequencer::new(0, Default::default()),
            fanout: Fanout::default(),
            reading: false,
            read_again: false,
            idle_since: Some(Instant::now()),
            reported: None,
            undelivered: Arc::new(AtomicU32::new(0)),
            closing: Closing::Open,
            online: SeatSet::default(),
            welcome: WelcomeState::default(),
        };
        let addr = self.placement.start(|_| tail);
        let handle = TailHandle { addr, connections };
        // A stopped tail this one replaces is no longer counted (its
        // `TailGone` then finds another tail in its place).
        if self.tails.insert(id, handle.clone()).is_none() {
            self.metrics.sessions_tailed.inc();
        }
        Ok(handle)
    }
}

impl Handler<Committed> for Tails {
    type Result = ();

    fn handle(&mut self, msg: Committed, _: &mut Self::Context) {
        self.metrics.journal_notices.inc();
        match msg.0 {
            JournalNotice::Any => self.read_all(),
            JournalNotice::Sessions(ids) => {
                for id in ids {
                    if let Some(tail) = self.tails.get(id.as_str()) {
                        tail.addr.do_send(Read);
                    }
                }
            }
        }
    }
}

impl Handler<Listening> for Tails {
    type Result = ();

    fn handle(&mut self, msg: Listening, _: &mut Self::Context) {
        self.listening = msg.0;
    }
}

impl Handler<DrainTails> for Tails {
    type Result = ();

    fn handle(&mut self, _: DrainTails, _: &mut Self::Context) {
        self.draining = true;
        for tail in self.tails.values() {
            tail.addr.do_send(CloseTail {
                code: CLOSE_SESSION_MOVED,
                reason: super::RESTARTING,
            });
        }
    }
}

impl Handler<TailGone> for Tails {
    type Result = ();

    fn handle(&mut self, msg: TailGone, _: &mut Self::Context) {
        if self
            .tails
            .get(&msg.session_id)
            .is_some_and(|t| t.addr == msg.addr)
        {
            self.tails.remove(&msg.session_id);
            self.metrics.sessions_tailed.dec();
        }
    }
}

/// Listens for journal commits for as long as the system runs and hands
/// them to `tails`; listens again after the database went away (every
/// tail reads meanwhile, and once more when it is back). Nothing to do on
/// SQLite, where this node is the only writer.
pub async fn listen(store: Store, tails: Addr<Tails>) {
    loop {
        let Some(listening) = store.journal_notices().await else {
            return;
        };
        match listening {
            Ok(mut notices) => {
                tails.do_send(Listening(true));
                tails.do_send(Committed(JournalNotice::Any));
                loop {
                    match notices.next().await {
                        Ok(notice) => tails.do_send(Committed(notice)),
                        Err(e) => {
                            tracing::warn!(error = %e, "listening for journal commits failed");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for journal commits"),
        }
        tails.do_send(Listening(false));
        if !tails.connected() {
            return;
        }
        actix_web::rt::time::sleep(TICK).await;
    }
}

/// Whether a tail reports `spectators` to the owner at `now`, its last
/// report being `reported` (the count and when; `None` before the first)
/// and `undelivered` reports in a row not delivered: when the count
/// changed, every [`AUDIENCE_REFRESH`] while it has spectators, and after a
/// report that was not delivered, [`TICK`] later, then twice as long each
/// time up to 8 ticks.
fn report_due(
    reported: Option<(usize, Instant)>,
    undelivered: u32,
    spectators: usize,
    now: Instant,
) -> bool {
    let Some((n, at)) = reported else {
        return spectators > 0;
    };
    let since = now.saturating_duration_since(at);
    let retry = undelivered > 0 && since >= TICK * (1 << (undelivered - 1).min(3));
    n != spectators || (n > 0 && since >= AUDIENCE_REFRESH) || retry
}

/// One session followed from the journal.
pub struct Tail {
    session_id: SessionId,
    store: Store,
    metrics: Arc<Metrics>,
    report: AudienceReport,
    tails: Addr<Tails>,
    /// The session's state after the cursor; `None` until loaded.
    state: Option<GameState>,
    /// Its `released` seq is the cursor: the last frame applied and sent.
    sequencer: Sequencer,
    fanout: Fanout,
    /// A read is on its way; `read_again` asks for one more after it.
    reading: bool,
    read_again: bool,
    /// Since when no connection watches.
    idle_since: Option<Instant>,
    /// The spectators last reported to the owner, and when.
    reported: Option<(usize, Instant)>,
    /// Reports in a row that were not delivered, counted by their tasks.
    undelivered: Arc<AtomicU32>,
    /// Whether an operator's close was seen.
    closing: Closing,
    /// The seats online as the owner's last `presence` frame said (none
    /// before one is seen): what the snapshots served here show.
    online: SeatSet,
    /// The state as the last `welcome` carried it, for the next join at
    /// the same seq.
    welcome: WelcomeState,
}

/// The seats a `presence` frame says are online; `None` for any other
/// frame.
fn seats_online(frame: &str) -> Option<SeatSet> {
    // `{"seq":N,"type":"presence",…}`: the type is read without parsing
    // every frame.
    let (_, rest) = frame.split_once(',')?;
    if !rest.starts_with(r#""type":"presence""#) {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Seats {
        #[serde(default)]
        seats: Vec<SeatOnline>,
    }
    let seats: Seats = serde_json::from_str(frame).ok()?;
    Some(
        seats
            .seats
            .into_iter()
            .filter(|s| s.online)
            .map(|s| s.seat_id)
            .collect(),
    )
}

/// What a tail knows of an operator's close of its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// Not closed, or still run by a node, when it last looked.
    Open,
    /// A look at `closed_at` and the claims is on its way.
    Checking,
    /// Closed, and no node runs it: the journal is complete. The next read
    /// that reaches its end closes every connection with `4000`.
    Ended,
}

impl Actor for Tail {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Nothing else is handled until the state is loaded.
        let (store, id) = (self.store.clone(), self.session_id.clone());
        ctx.wait(
            async move { load(&store, &id).await }
                .into_actor(self)
                .map(|loaded, act, ctx| match loaded {
                    Ok((state, sequencer)) => {
                        tracing::debug!(session_id = %act.session_id, seq = sequencer.released(), "tailing a session run elsewhere");
                        act.state = Some(state);
                        act.sequencer = sequencer;
                        act.read(ctx);
                    }
                    Err(e) => {
                        tracing::warn!(session_id = %act.session_id, error = %e, "loading a session to tail failed");
                        ctx.stop();
                    }
                }),
        );
        ctx.run_interval(TAIL_POLL, |act, ctx| {
            act.read(ctx);
            act.check_closed(ctx);
        });
        ctx.run_interval(TICK, |act, ctx| act.tick(ctx));
    }

    fn stopped(&mut self, ctx: &mut Self::Context) {
        self.fanout
            .close_all(CLOSE_SESSION_MOVED, "the session is reloading; reconnect");
        self.tails.do_send(TailGone {
            session_id: self.session_id.clone(),
            addr: ctx.address(),
        });
    }
}

/// The session's state from the store, and a sequencer whose cursor is
/// the last row that state includes. The rows and the recent frames are
/// read one after the other while the owner writes: frames past the last
/// row applied are left for the first read.
async fn load(store: &Store, id: &SessionId) -> Result<(GameState, Sequencer), StorageError> {
    let Some(mut loaded) = store.load_session(id).await? else {
        return Err(StorageError::Corrupt(format!("session {id} is gone")));
    };
    let applied = loaded
        .rows
        .last()
        .map_or(loaded.snapshot_seq, |r| r.seq)
        .max(loaded.snapshot_seq);
    loaded.recent_frames.retain(|(seq, _)| *seq <= applied);
    let restored = replay::restore(loaded, Vec::new(), Epoch::Sole)?;
    Ok((
        restored.state,
        Sequencer::new(restored.last_seq, restored.ring),
    ))
}

impl Tail {
    /// Reads the rows after the cursor, unless a read is on its way (then
    /// one more follows it).
    fn read(&mut self, ctx: &mut Context<Self>) {
        if self.state.is_none() {
            return;
        }
        if self.reading {
            self.read_again = true;
            return;
        }
        self.reading = true;
        let (store, id, after) = (
            self.store.clone(),
            self.session_id.clone(),
            self.sequencer.released(),
        );
        let read = async move {
            store
                .journal_after(&id, after, TAIL_BATCH, MAX_STORED_BACKLOG_CHARS)
                .await
        };
        ctx.spawn(read.into_actor(self).map(|rows, act, ctx| {
            act.reading = false;
            // `caught_up`: the read brought nothing new (`None`: it failed).
            let (full, caught_up) = match rows {
                Ok(rows) => {
                    let full = rows.len() == TAIL_BATCH as usize;
                    let cursor = act.sequencer.released();
                    act.follow(rows);
                    (full, Some(act.sequencer.released() == cursor))
                }
                // A newer version owns the session and writes a format
                // this node does not read: its spectators go on on a node
                // that reads it, rather than on a story that no longer
                // grows here.
                Err(e @ StorageError::NewerFormat { .. }) => {
                    tracing::warn!(session_id = %act.session_id, error = %e, "a tailed session's journal is of a newer format; closing its spectators");
                    act.fanout.close_all(
                        CLOSE_SESSION_MOVED,
                        "the session is served by a newer version; reconnect",
                    );
                    ctx.stop();
                    return;
                }
                Err(e) => {
                    tracing::warn!(session_id = %act.session_id, error = %e, "reading the journal to tail failed");
                    (false, None)
                }
            };
            let ended = act.closing == Closing::Ended;
            if full || std::mem::take(&mut act.read_again) || (ended && caught_up == Some(false)) {
                act.read(ctx);
            } else if ended && caught_up == Some(true) {
                act.fanout
                    .close_all(CLOSE_SESSION_CLOSED, CLOSED_BY_OPERATOR);
                ctx.stop();
            }
        }));
    }

    /// Looks whether an operator closed the session and, if so, whether a
    /// node still runs it (finishing the work it took before the close).
    /// Closed and run nowhere: the journal is complete, so one more read
    /// takes what is left and then closes every connection.
    fn check_closed(&mut self, ctx: &mut Context<Self>) {
        if self.state.is_none() || self.closing != Closing::Open {
            return;
        }
        self.closing = Closing::Checking;
        let (store, id) = (self.store.clone(), self.session_id.clone());
        let check = async move {
            let closed = store
                .session_meta(&id)
                .await?
                .is_some_and(|meta| meta.closed_at.is_some());
            Ok::<_, StorageError>(closed && store.owner(&id).await?.is_none())
        };
        ctx.spawn(check.into_actor(self).map(|ended, act, ctx| {
            act.closing = match ended {
                Ok(true) => Closing::Ended,
                Ok(false) => Closing::Open,
                Err(e) => {
                    tracing::warn!(session_id = %act.session_id, error = %e, "reading whether a tailed session was closed failed");
                    Closing::Open
                }
            };
            if act.closing == Closing::Ended {
                tracing::debug!(session_id = %act.session_id, "a tailed session was closed; closing its spectators");
                act.read(ctx);
            }
        }));
    }

    /// Applies and sends `rows`, in order, from the one after the cursor;
    /// stops at a gap or a row that does not read back.
    fn follow(&mut self, rows: Vec<TailRow>) {
        let mut frames = Vec::with_capacity(rows.len());
        let now = now_ms();
        for row in rows {
            let Some(state) = self.state.as_mut() else {
                return;
            };
            if row.seq <= self.sequencer.released() {
                continue;
            }
            if row.seq != self.sequencer.released() + 1 {
                break;
            }
            if let Err(e) = replay::apply(state, row.effect.as_deref(), row.history.as_deref()) {
                tracing::error!(session_id = %self.session_id, seq = row.seq, error = %e, "a journal row does not read back; tailing stops there");
                break;
            }
            if let Some(online) = seats_online(&row.frame) {
                self.online = online;
            }
            let bytes = ByteString::from(row.frame);
            self.sequencer.follow(row.seq, bytes.clone());
            frames.push(bytes);
            let lag_ms = (now - row.created_at).max(0);
            self.metrics
                .journal_tail_lag_seconds
                .observe(lag_ms as f64 / 1000.0);
        }
        if !frames.is_empty() {
            self.welcome.forget();
        }
        // What one read brought goes to each connection as one message.
        let delivery = self.fanout.broadcast_all(frames);
        self.metrics.outbound_drops.add(delivery.overflowed);
        self.metrics.frames_sent.add(delivery.sent);
        if delivery.dropped > 0 {
            self.audience_changed();
        }
    }

    /// Connections came or went: the owner hears of it now, unless it
    /// heard from this tail less than a [`TICK`] ago; then the next tick
    /// tells it. A crowd joining costs a report a second, not one each.
    fn audience_changed(&mut self) {
        let spectators = self.fanout.connection_counts().1;
        self.idle_since = (spectators == 0).then(Instant::now);
        match self.reported {
            Some((n, _)) if n == spectators => {}
            Some((_, at)) if at.elapsed() < TICK => {}
            _ => self.report(spectators),
        }
    }

    fn report(&mut self, spectators: usize) {
        self.reported = Some((spectators, Instant::now()));
        let sent = (self.report)(self.session_id.clone(), spectators);
        let undelivered = self.undelivered.clone();
        actix::spawn(async move {
            if sent.await {
                undelivered.store(0, Ordering::Relaxed);
            } else {
                undelivered.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.welcome.forget();
        if self
            .idle_since
            .is_some_and(|since| since.elapsed() >= TAIL_LINGER)
        {
            ctx.stop();
            return;
        }
        // A change held back by the throttle, a refresh, or a report that
        // was not delivered.
        let spectators = self.fanout.connection_counts().1;
        let undelivered = self.undelivered.load(Ordering::Relaxed);
        if report_due(self.reported, undelivered, spectators, Instant::now()) {
            self.report(spectators);
        }
    }

    /// Adds a connection, as the owner does; refused until loaded.
    fn join(
        &mut self,
        msg: Subscribe,
        stored: Option<(u64, Vec<(u64, String)>)>,
    ) -> Result<Joined, ChatRefused> {
        let Some(state) = self.state.as_ref() else {
            return Err(ChatRefused::reloading());
        };
        let backlog = self.sequencer.resume(msg.last_seq, stored);
        let joined = Joined::new(
            &self.session_id,
            msg.role,
            None,
            (state, &self.online),
            backlog,
            &mut self.welcome,
        );
        self.fanout.add(msg);
        self.audience_changed();
        Ok(joined)
    }
}

impl Handler<Read> for Tail {
    type Result = ();

    fn handle(&mut self, _: Read, ctx: &mut Self::Context) {
        self.read(ctx);
    }
}

impl Handler<CloseTail> for Tail {
    type Result = ();

    fn handle(&mut self, msg: CloseTail, ctx: &mut Self::Context) {
        self.fanout.close_all(msg.code, msg.reason);
        ctx.stop();
    }
}

impl Handler<Subscribe> for Tail {
    type Result = ResponseActFuture<Self, Result<Joined, ChatRefused>>;

    /// As on the owner: a connection resuming from before the ring is
    /// served the frames in between from the journal first.
    fn handle(&mut self, msg: Subscribe, _: &mut Self::Context) -> Self::Result {
        if self.state.is_none() || msg.role != ConnRole::Spectator {
            return Box::pin(actix::fut::ready(Err(ChatRefused::reloading())));
        }
        let Some(range) = self.sequencer.stored_range(msg.last_seq) else {
            return Box::pin(actix::fut::ready(self.join(msg, None)));
        };
        let read = replay::stored_frames(self.store.clone(), self.session_id.clone(), range);
        Box::pin(
            read.into_actor(self)
                .map(move |stored, act, _| act.join(msg, stored)),
        )
    }
}

impl Handler<Unsubscribe> for Tail {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, _: &mut Self::Context) {
        if self.fanout.unsubscribe(msg.conn_id) {
            self.audience_changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_goes_out_on_a_change_a_refresh_or_after_one_that_failed() {
        let at = Instant::now();
        let after = |secs: u64| at + Duration::from_secs(secs);
        // The first spectator is reported at once; no one, never.
        assert!(report_due(None, 0, 1, at));
        assert!(!report_due(None, 0, 0, at));
        // Delivered: again when the count changes, or at the refresh.
        assert!(!report_due(Some((1, at)), 0, 1, after(9)));
        assert!(report_due(Some((1, at)), 0, 2, after(0)));
        assert!(report_due(Some((1, at)), 0, 1, after(10)));
        assert!(!report_due(Some((0, at)), 0, 0, after(60)));
        // Not delivered: again after 1, 2, 4, then every 8 seconds, a
        // count of 0 too (the owner would count spectators gone).
        for (failed, wait) in [(1, 1), (2, 2), (3, 4), (4, 8), (9, 8)] {
            assert!(!report_due(Some((1, at)), failed, 1, after(wait - 1)));
            assert!(report_due(Some((1, at)), failed, 1, after(wait)));
            assert!(report_due(Some((0, at)), failed, 0, after(wait)));
        }
    }
}
