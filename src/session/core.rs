//! The session's core: one game's state and the session's parts, fed what
//! happens (a chat, a call, a durability notice, a model event, a timer)
//! and answering with [`Command`]s, the IO the actor carries out in order.
//! It knows actix only by the handles of what it asked the actor to start,
//! so a session's message handling is tested here from tables, without
//! sockets, storage or a running actor.
//!
//! Every story frame gets the next seq, goes to the journal, and waits in
//! the [`Sequencer`] until the writer says it is durable; only then is its
//! effect applied to the state and the frame sent ([`release`]). So the
//! state in memory is always the fold of the durable journal, and no client
//! ever sees a frame that a crash could take back.
//!
//! How a running turn moves is in `core/turn_loop.rs`.

mod approvals;
mod party;
mod rounds;
mod timers;
mod turn_loop;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::SpawnHandle;
use bytestring::ByteString;
use tokio::sync::oneshot;

use super::acks::Acks;
use super::fanout::Presence;
use super::intake::{Intake, QueuedCall};
use super::lifecycle::{Event, Lifecycle};
use super::messages::{
    CallTool, ChatAccepted, ChatRefused, DirectCallDone, Joined, SubmitChat, WelcomeState,
};
use super::prompt::Prompter;
use super::release::{Batch, Writes, release};
use super::replay::Restored;
use super::running::Running;
use super::seats::SeatSet;
use super::sequencer::{Entry, Sequencer, Waiter};
use super::snapshot::{self, Snapshots};
use super::turn_frames;
use super::types::{
    CLOSE_SESSION_FAILED, CLOSE_SESSION_MOVED, Limits, SessionDeps, SessionStats, SessionView,
};
use crate::error::ErrorCode;
use crate::game::GameState;
use crate::game::pieces::ChunkTicket;
use crate::game::rng::SplitMix64;
use crate::ids::{SeatId, SessionId, TurnId};
use crate::llm::ModelRequest;
use crate::metrics::Metrics;
use crate::protocol::{SeatOnline, TurnEnd};
use crate::storage::{QueuedChat, SessionMeta, SessionWrite, SnapshotWrite, StorageError, now_ms};
use crate::tools::Registry;

/// IO the core asks for; the actor carries them out in the order given.
pub(super) enum Command {
    /// A step's first row is held: hand the rows over once it is over.
    FlushLater,
    /// Hand these rows to the writer now, ahead of the write that follows.
    Write(Vec<SessionWrite>),
    /// Send these frames to every connection, acks first to theirs.
    Send(Batch),
    /// Tell whoever waited for the frames just sent.
    Tell(Vec<Waiter>),
    /// Send an ack to one connection now.
    SendTo(u64, ByteString),
    /// Store a chat taken behind other work in the inbox; tell
    /// [`Core::chat_stored`] once durable.
    Enqueue(QueuedChat),
    /// The chat started: its inbox row is no longer needed.
    Dequeue(TurnId),
    /// Store this snapshot (or fail as it did, if it did not serialize),
    /// then tell [`Core::snapshot_stored`] whether it is durable.
    Snapshot(Result<SnapshotWrite, StorageError>, AfterSnapshot),
    /// Call [`Core::deadline`] for this turn after this long; hand the
    /// timer to [`Core::deadline_set`].
    Deadline(TurnId, Duration),
    /// Ask the model; its events go to [`Core::model_event`] with this tag.
    AskModel(u64, ModelRequest),
    /// Stop these timers and streams.
    Cancel(Vec<SpawnHandle>),
    /// Call [`Core::round_deadline`] after this long: the held round's
    /// deadline.
    RoundAt(Duration),
    /// Call [`Core::timer_wake`] after this long: the soonest timer's due
    /// time.
    TimerAt(Duration),
    /// Call [`Core::presence`] with the fan-out's due presence after this
    /// long.
    PresenceAt(Duration),
    /// Close every connection with this code and reason.
    CloseAll(u16, &'static str),
    /// Leave the hub and stop now (storage failed).
    Leave,
    /// Leave the hub and stop once every write queued so far is committed
    /// (or failed); nothing else is handled meanwhile.
    LeaveWhenWritten,
}

/// What follows a snapshot's write.
pub(super) enum AfterSnapshot {
    /// Once durable, its chunks are sure to be stored.
    Keep(ChunkTicket),
    /// The session's last: leave the hub and stop, durable or not; nothing
    /// else is handled meanwhile.
    Leave,
}

/// What a session reads of its model beyond its answers.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ModelTraits {
    /// [`crate::llm::Provider::reads_conversation`].
    pub(super) reads_conversation: bool,
    /// [`crate::llm::Provider::writes_content`].
    pub(super) writes_content: bool,
}

/// What a session's core is built from besides its restored state.
pub(super) struct CoreDeps {
    pub(super) registry: Arc<Registry>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: Arc<Limits>,
    pub(super) model: ModelTraits,
    /// The session's counts, as the hub reads them.
    pub(super) stats: Arc<SessionStats>,
    pub(super) budgets: Arc<crate::budget::Budgets>,
}

impl CoreDeps {
    /// What a session's core takes of `deps`, with the counts `stats`.
    pub(super) fn of(deps: &SessionDeps, stats: Arc<SessionStats>) -> Self {
        Self {
            registry: deps.registry.clone(),
            metrics: deps.metrics.clone(),
            limits: deps.limits.clone(),
            model: ModelTraits {
                reads_conversation: deps.provider.reads_conversation(),
                writes_content: deps.provider.writes_content(),
            },
            stats,
            budgets: deps.budgets.clone(),
        }
    }
}

/// One session's state and parts.
pub(super) struct Core {
    meta: Arc<SessionMeta>,
    /// The meta's session id, typed once for the frames, messages and
    /// calls that name it.
    session_id: SessionId,
    deps: CoreDeps,
    /// The fold of the durable journal.
    state: GameState,
    /// Seqs, the frames not yet durable, and the resume ring.
    sequencer: Sequencer,
    /// Whether work is taken (checks, rate limit, request ids), and the
    /// queue it waits in.
    intake: Intake,
    /// Every ack owed, until what it acknowledges is durable.
    acks: Acks,
    /// The turn running, if one is. Boxed, as is `decided_on_load`, so an
    /// idle session does not keep their room (0.9 KiB) inline.
    turn: Option<Box<Running>>,
    rng: SplitMix64,
    /// Model calls made, to tag the next one.
    model_calls: u64,
    lifecycle: Lifecycle,
    /// Which snapshot chunks are sure to be stored.
    snapshots: Snapshots,
    /// The game master's tools and the context, kept between requests.
    prompter: Prompter,
    /// The rows of the step under way, not yet handed to the writer.
    writes: Writes,
    /// When the session last did something (for the idle unload).
    last_activity: Instant,
    /// Closed with `turn_failed` once started, so no client waits forever.
    interrupted_turn: Option<TurnId>,
    /// Commands not yet taken by the actor, in order.
    out: VecDeque<Command>,
    /// The seats with a connection to this session now.
    online: SeatSet,
    /// The state as the last `welcome` carried it, for the next join at
    /// the same seq.
    welcome: WelcomeState,
    /// The round whose turn was started here (rounds mode): not started
    /// again while its `turn_started` is on its way to the journal.
    resolving: Option<u64>,
    /// An action was taken or a seat went offline: whether the round may
    /// resolve is asked once the state has it.
    round_check: bool,
    /// The round whose deadline timer is set.
    round_timer: Option<u64>,
    /// The due time (ms since the epoch) a timer wake-up is set for.
    timer_wake: Option<i64>,
    /// Party changes journalled and not yet released.
    party_in_flight: party::InFlight,
    /// A decision on the open turn's approval that the journal holds but
    /// whose call's result it does not: carried out at start.
    decided_on_load: Option<
        Box<(
            crate::game::approvals::Approval,
            crate::game::approvals::Decision,
        )>,
    >,
}

impl Core {
    /// A session restored from storage (`restored`).
    pub(super) fn new(meta: Arc<SessionMeta>, deps: CoreDeps, restored: Restored) -> Self {
        let mut intake = Intake::new(&deps.limits, restored.requests, restored.state.turn + 1);
        intake.restore_stored(restored.stored_chats);
        // The held round's actions are answered as duplicates after a
        // restart too.
        let round = &restored.state.party.round;
        for a in &round.actions {
            if let Some(r) = &a.request_id {
                let id = rounds::action_id(round.number, &a.seat_id);
                intake.remember_action(r.clone(), id);
            }
        }
        let mut core = Self {
            session_id: meta.session_id.clone(),
            meta,
            deps,
            intake,
            acks: Acks::default(),
            state: restored.state,
            sequencer: Sequencer::new(restored.last_seq, restored.ring)
                .since_snapshot(restored.since_snapshot),
            turn: None,
            rng: SplitMix64::from_entropy(),
            model_calls: 0,
            lifecycle: Lifecycle::default(),
            snapshots: Snapshots::loaded(restored.stored_chunks),
            prompter: Prompter::default(),
            writes: Writes::default(),
            last_activity: Instant::now(),
            interrupted_turn: restored.interrupted_turn,
            out: VecDeque::new(),
            online: SeatSet::default(),
            welcome: WelcomeState::default(),
            resolving: None,
            round_check: false,
            round_timer: None,
            timer_wake: None,
            party_in_flight: Default::default(),
            decided_on_load: None,
        };
        // Rows of chats whose turns started, left behind by a crash: gone,
        // so nothing (the sweep among others) takes them for waiting work.
        core.out
            .extend(restored.started_chats.into_iter().map(Command::Dequeue));
        // An open turn paused at an approval (or decided on) goes on; any
        // other a crash interrupted is closed at start.
        if let Some(turn_id) = core.interrupted_turn.clone()
            && core.restore_open_turn(&turn_id)
        {
            core.interrupted_turn = None;
        }
        core
    }

    /// The next command to carry out.
    pub(super) fn next_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// The session's id.
    pub(super) fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// Where the session stands in its life.
    pub(super) fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// The last seq released (durable, applied and sent).
    pub(super) fn released(&self) -> u64 {
        self.sequencer.released()
    }

    fn view(&self) -> SessionView<'_> {
        SessionView {
            registry: &self.deps.registry,
            state: &self.state,
            session_id: &self.session_id,
            tenant_id: &self.meta.tenant_id,
        }
    }

    /// The session started: a turn a crash interrupted is closed, and a
    /// held round's deadline and the soonest timer are set (or the round
    /// resolved and the timer fired, if they came due while no node ran
    /// the session).
    pub(super) fn start(&mut self) {
        self.report_queue();
        if let Some(turn_id) = self.interrupted_turn.take() {
            let message = turn_frames::INTERRUPTED.to_owned();
            self.emit(turn_frames::failed(
                &turn_id,
                ErrorCode::InternalError,
                message,
                None,
            ));
        }
        if self.turn.is_some() {
            self.start_open_turn();
        }
        if self.holds_round() || !self.state.timers.is_empty() {
            // Resolved or fired now if due (missed while no node ran the
            // session), else woken for when it is.
            self.advance();
        }
    }

    // ----- frames and writes -------------------------------------------------

    /// Journals a story frame; it is applied and sent once durable.
    pub(super) fn emit(&mut self, entry: Entry) -> u64 {
        let round_settled = || !self.sequencer.round_in_flight();
        let timers = timers::timer_index(entry.effect.as_ref(), &self.state, round_settled);
        let mut row = self.sequencer.journal(&self.meta.session_id, entry);
        row.timers = timers;
        let seq = row.seq;
        self.hold(SessionWrite::Row(row));
        seq
    }

    fn hold(&mut self, write: SessionWrite) {
        if self.writes.hold(write) {
            self.out.push_back(Command::FlushLater);
        }
    }

    /// The rows held in the step just over, for the writer.
    pub(super) fn take_writes(&mut self) -> Vec<SessionWrite> {
        self.writes.take()
    }

    fn flush_now(&mut self) {
        let writes = self.writes.take();
        self.out.push_back(Command::Write(writes));
    }

    /// The writer made everything up to `up_to` durable: applies and sends
    /// it ([`release`]), and writes a snapshot when one is due.
    pub(super) fn durable(&mut self, up_to: u64) {
        let before = self.sequencer.released();
        let released = release(up_to, &mut self.sequencer, &mut self.acks, &mut self.state);
        if self.sequencer.released() != before {
            self.welcome.forget();
        }
        if released.state_changed {
            self.prompter.state_changed();
            // Before anyone is told: a kicked seat's token is refused from
            // the moment its frame goes out.
            self.deps.stats.seats.update(&self.state.party);
        }
        // A turn counts once its start is durable, before anyone hears of it.
        let stats = &self.deps.stats;
        stats.turns.store(self.state.turn, Ordering::Relaxed);
        self.out
            .extend(released.batches.into_iter().map(Command::Send));
        self.out.push_back(Command::Tell(released.waiters));
        if released.snapshot_due
            && let Ok((write, ticket)) = self.snapshot()
        {
            let then = AfterSnapshot::Keep(ticket);
            self.out.push_back(Command::Snapshot(Ok(write), then));
        }
    }

    /// The released state as a snapshot to write, after the rows held
    /// (which must not be overtaken).
    fn snapshot(&mut self) -> Result<(SnapshotWrite, ChunkTicket), StorageError> {
        self.sequencer.snapshot_taken();
        let snapshot = self.snapshots.write(&self.state, self.sequencer.released());
        if let Err(e) = &snapshot {
            tracing::error!(error = %e, "state did not serialize");
        }
        self.flush_now();
        snapshot
    }

    /// A snapshot's write answered (`durable` or not).
    pub(super) fn snapshot_stored(&mut self, then: AfterSnapshot, durable: bool) {
        match then {
            AfterSnapshot::Keep(ticket) if durable => self.snapshots.durable(ticket),
            AfterSnapshot::Keep(_) => {}
            AfterSnapshot::Leave => {
                if !durable {
                    tracing::warn!(session_id = %self.session_id, "final snapshot failed; the journal still holds everything");
                }
                self.out.push_back(Command::Leave);
            }
        }
    }

    /// Leaves the hub and stops once what it wrote is durable. The session
    /// is loaded again from storage on its next use: its last snapshot and
    /// the journal after it, replayed. So a last snapshot is written only
    /// when one is due; else the journal after the last one is shorter
    /// than a snapshot's interval, as after a crash, and lies within the
    /// recent frames a load reads anyway. A session that played a few
    /// turns from a shared start so stores no copy of its state.
    pub(super) fn unload(&mut self) {
        self.stop();
        self.deps.metrics.sessions_hibernated.inc();
        if !self.sequencer.snapshot_due() {
            self.flush_now();
            self.out.push_back(Command::LeaveWhenWritten);
            return;
        }
        let write = self.snapshot().map(|(write, _)| write);
        let then = AfterSnapshot::Leave;
        self.out.push_back(Command::Snapshot(write, then));
    }

    // ----- what callers ask ---------------------------------------------------

    /// Refuses with `BUDGET_EXCEEDED` while a token budget of this
    /// session, its tenant or the node is spent for the day (contract
    /// §12).
    pub(super) fn within_budget(&self) -> Result<(), ChatRefused> {
        let (session, tenant) = (self.session_id.as_str(), self.meta.tenant_id.as_str());
        self.deps
            .budgets
            .admit(Some(session), tenant)
            .map_err(ChatRefused::from)
    }

    /// Takes a chat, or says why not. An `ack` means the chat is durable: a
    /// chat that starts at once is acknowledged just ahead of its durable
    /// `turn_started`; one taken while other work waits is stored first
    /// and acknowledged once that is durable. Either way the ack is ahead
    /// of every frame of its turn on the connection (docs/protocol.md §2.5).
    pub(super) fn submit_chat(
        &mut self,
        msg: SubmitChat,
        storage_refusing: Option<&'static str>,
    ) -> Result<ChatAccepted, ChatRefused> {
        self.lifecycle.refuse_if_closed()?;
        self.seat_may_speak(&msg.seat_id)?;
        // A chat sent again is answered as before, whatever the budget.
        if !self.intake.knows(msg.request_id.as_deref()) {
            self.within_budget()?;
        }
        if self.in_rounds() {
            return self.submit_action(msg, storage_refusing);
        }
        let request_id = msg.request_id.clone();
        let taken = self.intake.take_chat(
            &msg.text,
            msg.request_id,
            msg.seat_id.clone(),
            self.lifecycle,
            self.turn.is_some(),
            || storage_refusing,
        );
        let mut accepted = taken.inspect_err(|refused| {
            if refused.code == ErrorCode::RateLimited {
                self.deps.metrics.rate_limited.inc();
            }
        })?;
        let ack = msg
            .conn_id
            .map(|conn_id| (conn_id, ByteString::from(accepted.ack(request_id.clone()))));
        accepted.acked = ack.is_some();
        let turn_id = accepted.turn_id.clone();
        if accepted.duplicate {
            // After the first chat's own ack, never before: it too says the
            // chat is durable.
            if let Some((conn_id, ack)) = ack
                && let Some((conn_id, ack)) = self.acks.duplicate(&turn_id, conn_id, ack)
            {
                self.out.push_back(Command::SendTo(conn_id, ack));
            }
            return Ok(accepted);
        }
        self.touch();
        self.report_queue();
        self.intake.trace(&turn_id, msg.trace_id, msg.traceparent);
        self.acks.taken(turn_id.clone(), ack);
        if accepted.queued > 0 {
            let chat = QueuedChat {
                session_id: self.meta.session_id.clone(),
                turn_no: self.intake.turn_no(&turn_id),
                turn_id: turn_id.clone(),
                request_id,
                text: msg.text,
                after_seq: self.sequencer.last_staged(),
                created_at: now_ms(),
                seat_id: msg.seat_id,
            };
            self.flush_now();
            self.out.push_back(Command::Enqueue(chat));
        }
        self.advance();
        Ok(accepted)
    }

    /// The inbox row of the chat `turn_id` is durable: its acks go out and
    /// it may start.
    pub(super) fn chat_stored(&mut self, turn_id: &TurnId) {
        self.intake.stored(turn_id);
        for (conn_id, ack) in self.acks.stored(turn_id) {
            self.out.push_back(Command::SendTo(conn_id, ack));
        }
        self.advance();
    }

    /// Takes a direct call, or says why not; its caller hears on the
    /// receiver once its result is durable.
    pub(super) fn call_tool(
        &mut self,
        call: CallTool,
        storage_refusing: Option<&'static str>,
    ) -> Result<oneshot::Receiver<DirectCallDone>, ChatRefused> {
        self.lifecycle.refuse_if_closed()?;
        let (reply, answer) = oneshot::channel();
        let call = QueuedCall { call, reply };
        let busy = self.turn.is_some();
        self.intake
            .take_call(call, self.lifecycle, busy, || storage_refusing)?;
        self.touch();
        self.advance();
        Ok(answer)
    }

    /// A waiter for the end of `turn_id` if it is still to come here; `None`
    /// if it ended (storage has its last frame) or never was.
    pub(super) fn await_turn_end(&mut self, id: TurnId) -> Option<oneshot::Receiver<TurnEnd>> {
        if let Some(paused) = self.paused_answer(&id) {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(paused);
            return Some(rx);
        }
        let open = self.turn.as_ref().is_some_and(|t| *t.turn.turn_id() == id)
            || self.intake.holds_turn(&id)
            || self.sequencer.ends_pending(&id);
        open.then(|| self.sequencer.await_turn_end(id))
    }

    /// The frames a connection resuming from `last_seq` must be read from
    /// the journal first, if the resume ring no longer holds them.
    pub(super) fn stored_range(&self, last_seq: Option<u64>) -> Option<(u64, u64)> {
        self.sequencer.stored_range(last_seq)
    }

    /// A connection joined as `role`, resuming from `last_seq` (`stored`:
    /// frames read from the journal): its welcome and the frames it missed.
    pub(super) fn joined(
        &mut self,
        last_seq: Option<u64>,
        role: crate::protocol::ConnRole,
        seat_id: Option<&SeatId>,
        stored: Option<(u64, Vec<(u64, String)>)>,
    ) -> Joined {
        let backlog = self.sequencer.resume(last_seq, stored);
        self.touch();
        Joined::new(
            &self.session_id,
            role,
            seat_id,
            (&self.state, &self.online),
            backlog,
            &mut self.welcome,
        )
    }

    /// The seats with a connection now (the actor's fan-out knows them).
    pub(super) fn seats_online(&mut self, online: SeatSet) {
        // A seat going offline may leave the round waiting for nobody.
        let went = self.online.iter().any(|s| !online.contains(s));
        self.online = online;
        if went && self.holds_round() && !self.lifecycle.stopping() {
            self.round_check = true;
            self.advance();
        }
    }

    /// `GET …/seats`: every seat, with whether it is online.
    pub(super) fn seats_body(&self) -> Result<String, ChatRefused> {
        self.may_join()?;
        let seats = crate::protocol::SeatView::all(&self.state, |s| self.online.contains(s));
        serde_json::to_string(&crate::protocol::SeatList { seats })
            .map_err(|_| ChatRefused::new(ErrorCode::InternalError, "the seats did not serialize"))
    }

    /// Every active seat, with whether it is online: what `presence` and
    /// the seat list say.
    pub(super) fn seats_presence(&self) -> Vec<SeatOnline> {
        self.state
            .party
            .active()
            .map(|s| SeatOnline {
                seat_id: s.seat_id.clone(),
                online: self.online.contains(&s.seat_id),
            })
            .collect()
    }

    /// Whether a connection may join: not while the session stops or once
    /// it is closed.
    pub(super) fn may_join(&self) -> Result<(), ChatRefused> {
        if self.lifecycle.stopping() {
            return Err(ChatRefused::reloading());
        }
        self.lifecycle.refuse_if_closed()
    }

    /// Connections came or went, or the presence window passed: journals
    /// the `presence` frame the fan-out asked for now, or asks to be told
    /// again when it is due. A stopping session sends no more frames.
    pub(super) fn presence(&mut self, presence: Presence, now: Instant) {
        if self.lifecycle.stopping() {
            return;
        }
        match presence {
            Presence::At(at) => {
                let after = at.saturating_duration_since(now);
                self.out.push_back(Command::PresenceAt(after));
            }
            presence => {
                if let Some(event) = presence.event(self.seats_presence()) {
                    self.emit(Entry::frame(event));
                }
            }
        }
    }

    /// The snapshot the HTTP API answers with.
    pub(super) fn snapshot_body(&self, node_id: &str) -> Result<String, ChatRefused> {
        self.may_join()?;
        Ok(snapshot::body(
            &self.session_id,
            &self.state,
            &self.online,
            node_id,
        ))
    }

    // ----- lifecycle ------------------------------------------------------------

    fn to(&mut self, event: Event) {
        self.lifecycle = self.lifecycle.next(event);
        let closing = self.lifecycle.closed_at().is_some();
        self.deps.stats.closing.store(closing, Ordering::Relaxed);
    }

    /// The node drains: no new work; unload once the work taken is done.
    pub(super) fn drain(&mut self) {
        self.to(Event::Drain);
        self.drain_if_done();
    }

    /// An operator closes the session: answers when (the first close's
    /// time, if closed already); the close is then stored.
    pub(super) fn close(&mut self) -> Result<i64, ChatRefused> {
        if self.lifecycle.stopping() {
            return Err(ChatRefused::reloading());
        }
        self.to(Event::Close { now: now_ms() });
        self.lifecycle
            .closed_at()
            .ok_or_else(ChatRefused::reloading)
    }

    /// Storing the close at `at` answered: answers the operator.
    pub(super) fn close_stored<T>(
        &mut self,
        at: i64,
        stored: Result<T, StorageError>,
    ) -> Result<i64, ChatRefused> {
        match stored {
            Ok(_) => {
                tracing::info!(session_id = %self.session_id, "an operator closed the session");
                self.to(Event::CloseStored { at });
                self.drain_if_done();
                Ok(at)
            }
            Err(e) => {
                tracing::warn!(session_id = %self.session_id, error = %e, "storing a session's close failed");
                self.to(Event::CloseFailed);
                let refused = ChatRefused::new(
                    ErrorCode::Overloaded,
                    "the close could not be stored; try again",
                );
                Err(refused.with_retry_after(1000))
            }
        }
    }

    /// The session stops (it unloads): no more frames, nothing new.
    pub(super) fn stop(&mut self) {
        self.to(Event::Stop);
    }

    /// The session's periodic check: drops the welcome state kept for a
    /// crowd that joined (the next join serializes it again), and the room
    /// its queues keep empty (the next step takes it again).
    pub(super) fn checked(&mut self) {
        self.welcome.forget();
        self.give_back_room();
    }

    /// The actor carried out every command: once no turn runs, the queues'
    /// room goes back at once, so a session that went quiet (a join's
    /// presence out, a turn over) keeps none until its next step. A turn
    /// takes it again once, not at each of its steps.
    pub(super) fn settled(&mut self) {
        if self.turn.is_none() {
            self.give_back_room();
        }
    }

    /// Gives back the room of the command queue and of the staged frames'
    /// queue, each while empty.
    fn give_back_room(&mut self) {
        if self.out.is_empty() {
            self.out = VecDeque::new();
        }
        self.sequencer.shrink_idle();
    }

    /// Whether the session has done nothing for its idle timeout and holds
    /// no work (a timer due within moments counts as work).
    pub(super) fn idle(&self) -> bool {
        !self.turn_runs()
            && !self.intake.has_work()
            && !self.sequencer.has_pending()
            && !self.holds_round()
            && !self.timer_due_soon()
            && self.last_activity.elapsed() >= self.deps.limits.idle_timeout
    }

    /// Whether a turn runs: one paused for a person's decision does not
    /// keep the session loaded (it is journalled, and taken up again
    /// wherever the session loads next).
    fn turn_runs(&self) -> bool {
        self.turn.as_ref().is_some_and(|t| t.awaiting.is_none())
    }

    /// Once draining or closed, and all work taken is durable and told:
    /// closes every connection (for a reconnect elsewhere, or for good)
    /// and unloads.
    fn drain_if_done(&mut self) {
        if self.lifecycle.closed_at().is_some()
            && self.turn.as_ref().is_some_and(|t| t.awaiting.is_some())
        {
            // Closed for good: no decision can come, so the paused turn
            // ends here (its approval closed as denied) rather than wait
            // in the journal forever.
            let message = "the session was closed while a call waited for approval".to_owned();
            self.fail_turn(ErrorCode::SessionClosed, message, None);
            return;
        }
        if let Some((code, reason)) = self.lifecycle.close_when_done()
            && !self.turn_runs()
            && !self.intake.has_work()
            && !self.sequencer.has_pending()
        {
            self.out.push_back(Command::CloseAll(code, reason));
            self.unload();
        }
    }

    /// Storage failed: nothing more can be made durable, so stop rather than
    /// tell anyone something that could be lost. Clients may reconnect; the
    /// session reloads from what is durable.
    pub(super) fn storage_failed(&mut self, error: StorageError) {
        self.stop();
        let close = if matches!(error, StorageError::Fenced) {
            // Another node runs the session now: clients go on there.
            tracing::warn!(session_id = %self.session_id, "another node claimed this session; stopping it here");
            self.deps.metrics.leases_lost.inc();
            (
                CLOSE_SESSION_MOVED,
                "the session moved to another node; reconnect",
            )
        } else {
            tracing::error!(session_id = %self.session_id, error = %error, "storage failed; stopping session");
            (
                CLOSE_SESSION_FAILED,
                "session storage failed; reconnect to reload",
            )
        };
        self.out.push_back(Command::CloseAll(close.0, close.1));
        self.out.push_back(Command::Leave);
    }

    /// Notes that the session did something now (for the idle unload and
    /// for the operator's list).
    pub(super) fn touch(&mut self) {
        self.last_activity = Instant::now();
        let stats = &self.deps.stats;
        stats.last_activity_ms.store(now_ms(), Ordering::Relaxed);
    }

    fn report_queue(&self) {
        let waiting = self.intake.waiting_chats();
        self.deps.stats.queued.store(waiting, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    //! The session fed from tables of messages, as the actor feeds it, with
    //! the commands it answers written down as a log: what a player would
    //! see (acks and frames, in order) and what the session asks storage
    //! and the model for.

    use super::*;
    use crate::game::rng::SplitMix64;
    use crate::llm::{ModelEvent, ModelReply};
    use crate::storage::{Epoch, Visibility};
    use crate::tools::test_support::{SESSION, demo};

    /// What happens to the session.
    enum Msg {
        /// A chat from connection `conn` with request id `rid`.
        Chat(u64, &'static str),
        /// The writer made everything journalled so far durable.
        Durable,
        /// The inbox row of the chat `turn_id` is durable.
        Stored(&'static str),
        /// The model answers the call in flight by narrating.
        Answer(&'static str),
        /// The writer failed.
        StorageFails,
        /// The node drains.
        Drain,
        /// An operator closes the session.
        Close,
        /// Storing the close succeeded, or failed.
        CloseStored(bool),
        /// A chat from connection `conn` with request id `rid`, by the
        /// seat `seat_<n>`.
        From(u64, &'static str, u32),
        /// These seats are online now.
        Online(&'static [u32]),
        /// The round's deadline passed and its timer fired.
        RoundTimer,
    }
    use Msg::*;

    /// A message and the log it makes.
    type Step = (Msg, Vec<String>);

    fn limits() -> Limits {
        Limits {
            max_iterations: 4,
            history_tokens: 0,
            chat_per_minute: 1000,
            chat_burst: 1000,
            calls_per_minute: 1000,
            calls_burst: 1000,
            max_queued_turns: 4,
            max_text_chars: 1000,
            turn_deadline: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        }
    }

    pub(super) fn core() -> Core {
        loaded_with(0)
    }

    /// A session loaded with `frames` in its journal after its snapshot.
    fn loaded_with(frames: u64) -> Core {
        let meta = SessionMeta {
            session_id: SESSION.into(),
            tenant_id: "tenant_1".into(),
            campaign_id: "demo".into(),
            title: "Demo".into(),
            stored_player_token: "p".into(),
            stored_spectator_token: "s".into(),
            created_at: 0,
            visibility: Visibility::default(),
            closed_at: None,
            anonymous: false,
        };
        let deps = CoreDeps {
            registry: Arc::new(Registry::builtin().expect("tools")),
            metrics: Arc::default(),
            limits: Arc::new(limits()),
            model: ModelTraits::default(),
            stats: Arc::default(),
            budgets: Arc::new(crate::budget::Budgets::off()),
        };
        let restored = Restored {
            state: demo(),
            last_seq: frames,
            since_snapshot: frames,
            ring: VecDeque::new(),
            requests: Default::default(),
            interrupted_turn: None,
            epoch: Epoch::Sole,
            stored_chats: Vec::new(),
            started_chats: Vec::new(),
            stored_chunks: Vec::new(),
        };
        let mut core = Core::new(Arc::new(meta), deps, restored);
        core.rng = SplitMix64::new(1);
        core
    }

    /// The `type` of a frame, and for an ack its turn and whether it is a
    /// duplicate's.
    fn frame(bytes: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(bytes).expect("JSON");
        let kind = v["type"].as_str().unwrap_or_default();
        match kind {
            "ack" if v["duplicate"] == true => {
                format!("ack {} dup", v["turn_id"].as_str().unwrap_or_default())
            }
            "ack" => format!("ack {}", v["turn_id"].as_str().unwrap_or_default()),
            "turn_started" if v["round"].is_u64() => {
                let actions: Vec<String> = v["actions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let text = a["text"].as_str().unwrap_or("-");
                        format!("{}={text}", a["seat_id"].as_str().unwrap_or_default())
                    })
                    .collect();
                format!("turn_started round {} [{}]", v["round"], actions.join(", "))
            }
            "turn_started" if v["seat_id"] != "seat_1" => {
                format!("turn_started by {}", v["seat_id"].as_str().unwrap_or("-"))
            }
            "action_submitted" => format!(
                "action_submitted {}",
                v["seat_id"].as_str().unwrap_or_default()
            ),
            _ => kind.to_owned(),
        }
    }

    /// Feeds `msg` as the actor would and carries out the commands as a
    /// log; `tag` is the model call in flight.
    fn feed(core: &mut Core, tag: &mut u64, msg: Msg) -> Vec<String> {
        let mut log = Vec::new();
        match msg {
            Chat(..) | From(..) => {
                let (conn, rid, seat) = match msg {
                    From(conn, rid, seat) => (conn, rid, seat),
                    Chat(conn, rid) => (conn, rid, 1),
                    _ => unreachable!(),
                };
                let chat = SubmitChat {
                    text: format!("chat {rid}"),
                    request_id: Some(rid.into()),
                    seat_id: SeatId::from(format!("seat_{seat}")),
                    conn_id: Some(conn),
                    trace_id: None,
                    traceparent: None,
                };
                log.push(match core.submit_chat(chat, None) {
                    Ok(a) if a.duplicate => format!("duplicate of {}", a.turn_id),
                    Ok(a) => format!("taken as {}, {} ahead", a.turn_id, a.queued),
                    Err(r) => format!(
                        "refused: {}",
                        if r.is_reloading() {
                            "reloading".into()
                        } else {
                            r.code.as_str()
                        }
                    ),
                });
            }
            Durable => {
                let up_to = core.sequencer.last_staged();
                core.durable(up_to);
                run(core, tag, &mut log);
                core.advance();
            }
            Stored(turn_id) => core.chat_stored(&TurnId::from(turn_id)),
            Online(seats) => core.seats_online(
                seats
                    .iter()
                    .map(|n| SeatId::from(format!("seat_{n}")))
                    .collect(),
            ),
            RoundTimer => {
                // As if the deadline's time had come.
                core.state.party.round.first_at = Some(0);
                core.round_deadline();
            }
            Answer(text) => {
                let reply = ModelReply::narrate(text);
                core.model_event(*tag, Some(Ok(ModelEvent::Done(reply))));
            }
            StorageFails => core.storage_failed(StorageError::Database("disk full".into())),
            Drain => core.drain(),
            Close => log.push(match core.close() {
                Ok(_) => "closing".into(),
                Err(r) => format!("close refused: {}", r.code.as_str()),
            }),
            CloseStored(stored) => {
                let at = core.lifecycle().closed_at().unwrap_or_default();
                let stored = if stored {
                    Ok(())
                } else {
                    Err(StorageError::Database("disk full".into()))
                };
                if let Err(r) = core.close_stored(at, stored) {
                    log.push(format!("close refused: {}", r.code.as_str()));
                }
            }
        }
        run(core, tag, &mut log);
        log
    }

    fn run(core: &mut Core, tag: &mut u64, log: &mut Vec<String>) {
        while let Some(command) = core.next_command() {
            match command {
                Command::FlushLater | Command::Cancel(_) => {}
                Command::Snapshot(_, AfterSnapshot::Keep(_)) => log.push("snapshot".into()),
                Command::Snapshot(_, AfterSnapshot::Leave) => log.push("last snapshot".into()),
                Command::Write(_) => log.push("write".into()),
                Command::Send(batch) => {
                    let mut said: Vec<String> = batch
                        .acks
                        .iter()
                        .map(|(conn, ack)| format!("{} to {conn}", frame(ack)))
                        .collect();
                    said.extend(batch.frames.iter().map(|f| frame(f)));
                    log.push(format!("send: {}", said.join(", ")));
                }
                Command::Tell(waiters) => waiters.into_iter().for_each(|w| w()),
                Command::SendTo(conn, ack) => log.push(format!("send: {} to {conn}", frame(&ack))),
                Command::Enqueue(chat) => log.push(format!("store {} in the inbox", chat.turn_id)),
                Command::Dequeue(turn_id) => log.push(format!("drop {turn_id} from the inbox")),
                Command::Deadline(turn_id, _) => {
                    log.push(format!("start {turn_id}"));
                    core.deadline_set(&turn_id, SpawnHandle::default());
                }
                Command::AskModel(t, _) => {
                    *tag = t;
                    log.push("ask the model".into());
                }
                Command::PresenceAt(_) => log.push("presence later".into()),
                Command::RoundAt(_) => log.push("round timer".into()),
                Command::TimerAt(_) => log.push("timer wake".into()),
                Command::CloseAll(code, _) => log.push(format!("close all: {code}")),
                Command::Leave => log.push("leave".into()),
                Command::LeaveWhenWritten => log.push("leave once written".into()),
            }
        }
    }

    #[test]
    fn a_welcome_shows_the_state_released_and_the_seats_online_at_its_join() {
        let mut core = core();
        let mut tag = 0;
        let join = |core: &mut Core| {
            let joined = core.joined(None, crate::protocol::ConnRole::Spectator, None, None);
            let v: serde_json::Value = serde_json::from_str(&joined.welcome).expect("JSON");
            assert_eq!(v["type"], "welcome", "{v}");
            (v["seq"].as_u64().expect("seq"), v["state"].clone())
        };
        let online = |state: &serde_json::Value| state["seats"][0]["online"].clone();
        let (seq, before) = join(&mut core);
        assert_eq!(before["turn"], 0);
        assert_eq!(online(&before), false);
        // One join keeps no copy of the state; a crowd joining between two
        // frames shares one.
        assert!(!core.welcome.holds());
        assert_eq!(join(&mut core), (seq, before.clone()));
        assert!(core.welcome.holds());
        assert_eq!(join(&mut core), (seq, before.clone()));
        // A turn taken and answered but not yet durable is not seen.
        feed(&mut core, &mut tag, Chat(1, "r1"));
        feed(&mut core, &mut tag, Answer("You look."));
        assert_eq!(join(&mut core), (seq, before.clone()));
        // Once durable, the next join sees it, and the copy is gone.
        feed(&mut core, &mut tag, Durable);
        assert!(!core.welcome.holds());
        let (later, after) = join(&mut core);
        assert!(later > seq);
        assert_eq!(after["turn"], 1);
        assert_eq!(join(&mut core), (later, after.clone()));
        // So does it a seat coming online, at the same seq.
        feed(&mut core, &mut tag, Online(&[1]));
        let (same, seated) = join(&mut core);
        assert_eq!(same, later);
        assert_eq!(online(&seated), true);
        assert_eq!(join(&mut core), (same, seated));
        feed(&mut core, &mut tag, Online(&[]));
        assert_eq!(join(&mut core), (later, after.clone()));
        assert_eq!(join(&mut core), (later, after));
        // The periodic check drops the copy.
        assert!(core.welcome.holds());
        core.checked();
        assert!(!core.welcome.holds());
    }

    #[test]
    fn a_quiet_session_gives_back_its_queues_room_and_a_running_turn_keeps_it() {
        let mut core = core();
        let mut tag = 0;
        let room = |core: &Core| (core.out.capacity(), core.sequencer.pending_capacity());
        feed(&mut core, &mut tag, Chat(1, "r1"));
        core.settled();
        assert!(core.turn.is_some());
        assert!(
            room(&core).0 > 0,
            "a running turn keeps its command queue's room"
        );
        feed(&mut core, &mut tag, Answer("You look."));
        assert!(core.sequencer.has_pending());
        core.settled();
        assert!(room(&core).1 > 0, "staged frames stay");
        feed(&mut core, &mut tag, Durable);
        assert!(core.turn.is_none(), "the turn is over once durable");
        core.settled();
        assert_eq!(room(&core), (0, 0), "a quiet session keeps no room");
        // The next turn takes it again.
        assert_eq!(
            feed(&mut core, &mut tag, Chat(1, "r2"))[0],
            "taken as turn_2, 0 ahead"
        );
        assert!(room(&core).0 > 0);
    }

    #[test]
    fn a_session_answers_each_message_as_the_table_says() {
        let started = |turn: &str| vec![format!("start {turn}"), "ask the model".to_owned()];
        let taken = |turn: &str, ahead: usize| {
            let mut log = vec![format!("taken as {turn}, {ahead} ahead")];
            if ahead == 0 {
                log.extend(started(turn));
            }
            log
        };
        let cases: Vec<(&str, Vec<Step>)> = vec![
            (
                "a chat while idle starts at once, acknowledged just ahead of its turn",
                vec![
                    (Chat(1, "r1"), taken("turn_1", 0)),
                    // Nothing is sent before it is durable.
                    (Answer("You look."), vec![]),
                    (
                        Durable,
                        vec!["send: ack turn_1 to 1, turn_started, narrative_delta, turn_completed".into()],
                    ),
                ],
            ),
            (
                "a chat while a turn runs is stored, acknowledged, then started",
                vec![
                    (Chat(1, "r1"), taken("turn_1", 0)),
                    (
                        Chat(2, "r2"),
                        vec!["taken as turn_2, 1 ahead".into(), "write".into(), "store turn_2 in the inbox".into()],
                    ),
                    // Its ack goes once its row is durable, not before.
                    (Stored("turn_2"), vec!["send: ack turn_2 to 2".into()]),
                    (
                        Answer("You look."),
                        [vec!["write".to_owned(), "drop turn_2 from the inbox".into()], started("turn_2")].concat(),
                    ),
                    (
                        Durable,
                        vec!["send: ack turn_1 to 1, turn_started, narrative_delta, turn_completed, turn_started".into()],
                    ),
                ],
            ),
            (
                "a duplicate is acknowledged after the chat it repeats, and starts nothing",
                vec![
                    (Chat(1, "r1"), taken("turn_1", 0)),
                    (Chat(2, "r1"), vec!["duplicate of turn_1".into()]),
                    (
                        Durable,
                        vec!["send: ack turn_1 to 1, ack turn_1 dup to 2, turn_started".into()],
                    ),
                    (Chat(3, "r1"), vec!["duplicate of turn_1".into(), "send: ack turn_1 dup to 3".into()]),
                ],
            ),
            (
                "storage failing mid-turn stops the session and tells nobody more",
                vec![
                    (Chat(1, "r1"), taken("turn_1", 0)),
                    (StorageFails, vec!["close all: 1011".into(), "leave".into()]),
                    (Chat(2, "r2"), vec!["refused: reloading".into()]),
                ],
            ),
            (
                "a drain refuses new work, finishes the turn taken, then closes and unloads",
                vec![
                    (Chat(1, "r1"), taken("turn_1", 0)),
                    (Drain, vec![]),
                    (Chat(2, "r2"), vec!["refused: reloading".into()]),
                    (Answer("You look."), vec![]),
                    (
                        Durable,
                        vec![
                            "send: ack turn_1 to 1, turn_started, narrative_delta, turn_completed".into(),
                            "close all: 1012".into(),
                            "write".into(),
                            "leave once written".into(),
                        ],
                    ),
                ],
            ),
            (
                "a close refuses new work, lets the work taken finish, then closes for good",
                vec![
                    (Chat(1, "r1"), taken("turn_1", 0)),
                    (Close, vec!["closing".into()]),
                    (Chat(2, "r2"), vec!["refused: SESSION_CLOSED".into()]),
                    (CloseStored(true), vec![]),
                    (Answer("You look."), vec![]),
                    (
                        Durable,
                        vec![
                            "send: ack turn_1 to 1, turn_started, narrative_delta, turn_completed".into(),
                            "close all: 4000".into(),
                            "write".into(),
                            "leave once written".into(),
                        ],
                    ),
                ],
            ),
            (
                "a close that could not be stored is taken back",
                vec![
                    (Close, vec!["closing".into()]),
                    (CloseStored(false), vec!["close refused: OVERLOADED".into()]),
                    (Chat(1, "r1"), taken("turn_1", 0)),
                ],
            ),
            ("a drain while idle unloads at once", vec![(
                    Drain,
                    vec!["close all: 1012".into(), "write".into(), "leave once written".into()],
                )]),
        ];
        for (name, steps) in cases {
            let (mut core, mut tag) = (core(), 0);
            core.start();
            for (i, (msg, want)) in steps.into_iter().enumerate() {
                assert_eq!(feed(&mut core, &mut tag, msg), want, "{name}: step {i}");
            }
        }
    }

    #[test]
    fn an_unload_writes_a_last_snapshot_only_once_one_is_due() {
        let mut tag = 0;
        // Loaded with fewer frames after its snapshot than a snapshot's
        // interval, and one turn played: the next load replays them.
        let mut core = loaded_with(super::super::types::SNAPSHOT_EVERY - 8);
        core.start();
        feed(&mut core, &mut tag, Chat(1, "r1"));
        feed(&mut core, &mut tag, Answer("You look."));
        feed(&mut core, &mut tag, Durable);
        assert_eq!(
            feed(&mut core, &mut tag, Drain),
            ["close all: 1012", "write", "leave once written"]
        );
        // Loaded with a snapshot's interval of frames after it: written.
        let mut core = loaded_with(super::super::types::SNAPSHOT_EVERY);
        core.start();
        assert_eq!(
            feed(&mut core, &mut tag, Drain),
            ["close all: 1012", "write", "last snapshot"]
        );
    }

    /// A session of three seats (`seat_1` the host's) in rounds mode.
    fn party_core() -> Core {
        use crate::game::party::TurnMode;
        let mut core = core();
        for (n, name) in [(2, "Hero 2"), (3, "Hero 3")] {
            crate::tools::test_support::seat(&mut core.state, n, name, "area_001");
        }
        core.state.apply(&crate::game::Effect::ModeChanged {
            turn_mode: TurnMode::Rounds,
            round_timeout_s: 120,
        });
        core
    }

    #[test]
    fn a_round_resolves_once_as_the_table_says() {
        let taken = |seat: u32| format!("taken as round_1_seat_{seat}, 0 ahead");
        let acted = |conn: u64, seat: u32| {
            format!("send: ack round_1_seat_{seat} to {conn}, action_submitted seat_{seat}")
        };
        let resolves = || vec!["start turn_1".to_owned(), "ask the model".into()];
        let told = |actions: &str| {
            format!("send: turn_started round 1 [{actions}], narrative_delta, turn_completed")
        };
        let cases: Vec<(&str, Vec<Step>)> = vec![
            (
                "every online seat acted: one turn with every action",
                vec![
                    (Online(&[1, 2, 3]), vec![]),
                    (From(1, "a", 1), vec![taken(1)]),
                    (Durable, vec![acted(1, 1), "round timer".into()]),
                    (From(2, "b", 2), vec![taken(2)]),
                    (Durable, vec![acted(2, 2)]),
                    (From(3, "c", 3), vec![taken(3)]),
                    (Durable, [vec![acted(3, 3)], resolves()].concat()),
                    (Answer("Together."), vec![]),
                    (
                        Durable,
                        vec![told("seat_1=chat a, seat_2=chat b, seat_3=chat c")],
                    ),
                    // The next round waits for new actions.
                    (Online(&[1, 2]), vec![]),
                ],
            ),
            (
                "a second chat replaces the seat's first",
                vec![
                    (Online(&[1, 2]), vec![]),
                    (From(1, "a", 1), vec![taken(1)]),
                    (Durable, vec![acted(1, 1), "round timer".into()]),
                    (From(1, "a2", 1), vec![taken(1)]),
                    (Durable, vec![acted(1, 1)]),
                    (From(2, "b", 2), vec![taken(2)]),
                    (Durable, [vec![acted(2, 2)], resolves()].concat()),
                    (Answer("Together."), vec![]),
                    (Durable, vec![told("seat_1=chat a2, seat_2=chat b, seat_3=-")]),
                ],
            ),
            (
                "offline seats are not waited for, and one going offline completes the round",
                vec![
                    (Online(&[1, 2, 3]), vec![]),
                    (From(1, "a", 1), vec![taken(1)]),
                    (Durable, vec![acted(1, 1), "round timer".into()]),
                    (From(2, "b", 2), vec![taken(2)]),
                    (Durable, vec![acted(2, 2)]),
                    (Online(&[1, 2]), resolves()),
                    (Answer("Together."), vec![]),
                    (Durable, vec![told("seat_1=chat a, seat_2=chat b, seat_3=-")]),
                ],
            ),
            (
                "the deadline resolves the round with whoever acted",
                vec![
                    (Online(&[1, 2, 3]), vec![]),
                    (From(2, "b", 2), vec![taken(2)]),
                    (Durable, vec![acted(2, 2), "round timer".into()]),
                    (RoundTimer, resolves()),
                    (Answer("Alone."), vec![]),
                    (Durable, vec![told("seat_1=-, seat_2=chat b, seat_3=-")]),
                ],
            ),
            (
                "a request id taken already is answered as a duplicate, after the first ack",
                vec![
                    (Online(&[1, 2, 3]), vec![]),
                    (From(1, "a", 1), vec![taken(1)]),
                    (From(4, "a", 1), vec!["duplicate of round_1_seat_1".into()]),
                    (
                        Durable,
                        vec![
                            "send: ack round_1_seat_1 to 1, ack round_1_seat_1 dup to 4, action_submitted seat_1".into(),
                            "round timer".into(),
                        ],
                    ),
                    (
                        From(5, "a", 1),
                        vec![
                            "duplicate of round_1_seat_1".into(),
                            "send: ack round_1_seat_1 dup to 5".into(),
                        ],
                    ),
                    // It is the seat's one action, once.
                    (RoundTimer, resolves()),
                    (Answer("Alone."), vec![]),
                    (Durable, vec![told("seat_1=chat a, seat_2=-, seat_3=-")]),
                ],
            ),
        ];
        for (name, steps) in cases {
            let (mut core, mut tag) = (party_core(), 0);
            core.start();
            for (i, (msg, want)) in steps.into_iter().enumerate() {
                assert_eq!(feed(&mut core, &mut tag, msg), want, "{name}: step {i}");
            }
            assert!(!core.holds_round(), "{name}: nothing left held");
        }
    }

    #[test]
    fn a_free_turn_names_its_speaker_and_table_talk_stays_out_of_the_history() {
        use crate::game::party::TurnMode;
        let (mut core, mut tag) = (party_core(), 0);
        core.state.party.turn_mode = TurnMode::Free;
        core.start();
        feed(&mut core, &mut tag, From(2, "b", 2));
        let said = core.say(&SeatId::from("seat_3"), " psst ", None);
        assert_eq!(said, Ok(()));
        let spectator = core.say(&SeatId::from("seat_9"), "hi", None);
        assert_eq!(spectator.map_err(|r| r.code), Err(ErrorCode::Forbidden));
        feed(&mut core, &mut tag, Answer("Done."));
        let log = feed(&mut core, &mut tag, Durable);
        assert_eq!(
            log,
            [
                "send: ack turn_1 to 2, turn_started by seat_2, party_chat, narrative_delta, turn_completed"
            ]
        );
        let texts: Vec<String> = core
            .state
            .history
            .iter()
            .map(|e| format!("{e:?}"))
            .collect();
        assert!(!texts.iter().any(|t| t.contains("psst")), "{texts:?}");
    }
}
