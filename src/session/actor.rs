//! The session actor: owns one game's state and carries out what the
//! session's parts decide. Each decision lives in a part read and tested on
//! its own; the actor holds the state, the timers and streams, and the IO.
//!
//! Every story frame gets the next seq, goes to the journal, and waits in
//! the [`Sequencer`] until the writer says it is durable; only then is its
//! effect applied to the state and the frame sent to subscribers, in seq
//! order. So the state in memory is always the fold of the durable journal,
//! and no client ever sees a frame that a crash could take back. The rows a
//! step makes (a whole turn, when the model answers at once) are handed to
//! the writer together when the step is over ([`SessionActor::flush`]), so
//! they share a commit and go out to each connection in one write.
//!
//! The parts it wires, none of which knows the actor:
//! - [`Intake`]: whether a chat or a direct call is taken, and the queue;
//! - [`Turn`], held in [`Running`] with its timer and model stream: what a
//!   running turn does next, answered as a [`Step`] that
//!   [`SessionActor::execute`] carries out;
//! - [`calls`]: one tool call through the pipeline, as the frames and audit
//!   row to write; [`prompt`]: what the model is asked; [`turn_frames`]:
//!   the frames that open and close a turn;
//! - [`Sequencer`]: seqs, frames held until durable, the resume ring, and
//!   whoever waits for a frame;
//! - [`Fanout`]: the connections, and when presence goes out (the timer is
//!   the actor's).
//!
//! The turn loop moves on three things: durability notices, model events,
//! and the deadline timer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytestring::ByteString;
use futures_util::stream;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::oneshot;

use super::acks::Acks;
use super::audit;
use super::calls::{self, Answer, Call};
use super::fanout::{Fanout, Presence};
use super::intake::{Intake, QueuedCall, QueuedTurn, Stored, Work};
use super::messages::{
    AwaitTurnEnd, CallTool, ChatAccepted, ChatRefused, CloseSession, DirectCallDone, Drain,
    GetSnapshot, Joined, LeaseLost, RemoteAudience, SubmitChat, Subscribe, Unsubscribe,
};
use super::prompt;
use super::replay::{self, Restored};
use super::running::Running;
use super::sequencer::{Entry, Sequencer};
use super::turn::{ContentCall, MAX_CALLS_PER_ANSWER, Phase, Step, Turn};
use super::turn_frames;
use super::{HubLink, Outbound, SessionDeps, SessionView, Unregister, random_token};
use crate::error::ErrorCode;
use crate::game::pieces::{ChunkTicket, StoredChunks};
use crate::game::rng::SplitMix64;
use crate::game::{Effect, GameState, HistoryEntry};
use crate::ids::{CallId, SessionId, TraceId, TurnId};
use crate::llm::{LlmError, ModelEvent, ModelRequest, RequestKind};
use crate::protocol::{Snapshot, StoryEvent, TurnEnd, TurnLimit};
use crate::storage::{
    DurableSink, Epoch, QueuedChat, SessionMeta, SessionWrite, SnapshotWrite, StorageError, now_ms,
};
use crate::tools::{RawArgs, ToolError};

/// WebSocket close code when the session had to stop (storage failure).
pub const CLOSE_SESSION_FAILED: u16 = 1011;
/// Close code when another node took the session over, or this node is
/// shutting down (service restart: reconnect, to any node, with
/// `last_seq`).
pub const CLOSE_SESSION_MOVED: u16 = 1012;
/// Close code when an operator closed the session for good (a code for
/// applications, RFC 6455 §7.4.2): do not reconnect.
pub const CLOSE_SESSION_CLOSED: u16 = 4000;

// ----- the actor's own messages ---------------------------------------------

/// The writer's notice: everything up to this seq is durable (or it failed).
#[derive(Message)]
#[rtype(result = "()")]
struct Durable(Result<u64, StorageError>);

/// One event of a model call; `None` marks the end of its stream.
#[derive(Message)]
#[rtype(result = "()")]
struct ModelMsg {
    /// The model call it belongs to ([`Running::awaits`]).
    tag: u64,
    event: Option<Result<ModelEvent, LlmError>>,
}

/// Owns one session. Started on one of the session arbiters by the hub; stops
/// when idle (after a final snapshot) or when storage fails.
pub struct SessionActor {
    meta: Arc<SessionMeta>,
    /// The meta's session id, typed once for the frames, messages and
    /// calls that name it.
    session_id: SessionId,
    deps: Arc<SessionDeps>,
    /// The hub that started this actor; told about stats and unloading.
    hub: HubLink,
    state: GameState,
    /// Seqs, the frames not yet durable, and the resume ring.
    sequencer: Sequencer,
    /// The connections, what they are sent, and when presence goes out.
    fanout: Fanout,
    /// The turn running, if one is.
    turn: Option<Running>,
    /// Whether work is taken (checks, rate limit, request ids), and the
    /// queue it waits in.
    intake: Intake,
    rng: SplitMix64,
    /// Model calls made, to tag the next one.
    model_calls: u64,
    last_activity: Instant,
    /// Hands durability notices back to this actor; set in `started`.
    sink: Option<DurableSink>,
    /// Closed with `turn_failed` once started, so no client waits forever.
    interrupted_turn: Option<TurnId>,
    /// The claim this node runs the session under.
    epoch: Epoch,
    stopping: bool,
    /// Acks held until what they acknowledge is durable.
    acks: Acks,
    /// The node is shutting down: no new work; unload once the work taken
    /// is done.
    draining: bool,
    /// When an operator closed the session (ms since the epoch): no new
    /// work or connections from then on.
    closed_at: Option<i64>,
    /// The close is durable: once the work taken is done, close every
    /// connection with [`CLOSE_SESSION_CLOSED`] and unload.
    closed: bool,
    /// Snapshot chunks sure to be stored: a snapshot writes the others only.
    stored_chunks: StoredChunks,
    /// The game master's tools in the model's shape, made on the first model
    /// call (the campaign's allowlist never changes during a session).
    model_tools: Option<Arc<[serde_json::Value]>>,
    /// The context of the last model request, while the state is unchanged.
    context: prompt::ContextCache,
    /// Journal and audit rows made in this step, in order, not yet handed
    /// to the writer ([`SessionActor::flush`]).
    unsent: Vec<SessionWrite>,
    /// This actor, to have the rows of a step flushed once it is over.
    me: Option<Addr<Self>>,
}

/// Hands the rows of the step just over to the writer.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

impl SessionActor {
    pub(super) fn new(
        meta: Arc<SessionMeta>,
        deps: Arc<SessionDeps>,
        hub: HubLink,
        restored: Restored,
    ) -> Self {
        Self {
            session_id: SessionId::from(meta.session_id.as_str()),
            meta,
            hub,
            intake: {
                let mut intake =
                    Intake::new(&deps.limits, restored.requests, restored.state.turn + 1);
                intake.restore_stored(restored.stored_chats);
                intake
            },
            acks: Acks::default(),
            state: restored.state,
            sequencer: Sequencer::new(restored.last_seq, restored.ring),
            fanout: Fanout::default(),
            turn: None,
            interrupted_turn: restored.interrupted_turn,
            epoch: restored.epoch,
            rng: SplitMix64::from_entropy(),
            model_calls: 0,
            last_activity: Instant::now(),
            sink: None,
            stopping: false,
            draining: false,
            closed_at: None,
            closed: false,
            stored_chunks: StoredChunks::loaded(restored.stored_chunks),
            model_tools: None,
            context: prompt::ContextCache::default(),
            unsent: Vec::new(),
            me: None,
            deps,
        }
    }

    /// The session as its pure parts read it.
    fn view(&self) -> SessionView<'_> {
        SessionView {
            registry: &self.deps.registry,
            state: &self.state,
            session_id: &self.session_id,
            tenant_id: &self.meta.tenant_id,
        }
    }

    // ----- frames ---------------------------------------------------------

    /// Journals a story frame; it is applied and sent once durable.
    fn emit(&mut self, entry: Entry) -> u64 {
        let row = self.sequencer.journal(&self.meta.session_id, entry);
        let seq = row.seq;
        self.hold(SessionWrite::Row(row));
        seq
    }

    /// Holds a write until the step that made it is over: a turn whose
    /// model answers at once makes all its rows in one step, and they go to
    /// the writer together (one commit, so one write to each connection).
    fn hold(&mut self, write: SessionWrite) {
        if self.unsent.is_empty()
            && let Some(me) = &self.me
        {
            me.do_send(Flush);
        }
        self.unsent.push(write);
    }

    /// Hands the held writes to the writer, in the order they were made.
    /// Called when a step is over, and before any other write of the
    /// session, which must not overtake them.
    fn flush(&mut self) {
        if let Some(sink) = &self.sink {
            // The next step's writes are about as many as this one's.
            let size = self.unsent.len();
            let writes = std::mem::replace(&mut self.unsent, Vec::with_capacity(size));
            self.deps.store.write_all(writes, sink);
        }
    }

    /// Applies and sends every pending frame up to `up_to`, then tells
    /// whoever waited for it. The frames released together go to each
    /// connection as one message (one write for all of them), a chat's ack
    /// in it just ahead of its turn's first frame.
    fn release(&mut self, up_to: u64, ctx: &mut Context<Self>) {
        let released = self.sequencer.durable(up_to);
        let mut frames = Vec::with_capacity(released.len());
        let mut acks: Vec<(u64, ByteString)> = Vec::new();
        let mut waiters = Vec::new();
        for p in released {
            // A chat that started at once is acknowledged with its durable
            // `turn_started`, just ahead of it.
            let due = self.acks.before(p.seq);
            if !due.is_empty() {
                if !frames.is_empty() {
                    self.broadcast(std::mem::take(&mut acks), std::mem::take(&mut frames), ctx);
                }
                acks.extend(due);
            }
            if let Some(effect) = &p.effect {
                self.state.apply(effect);
                // A turn's start changes only the turn number, which the
                // context takes from the turn.
                if !matches!(effect, Effect::BeginTurn { .. }) {
                    self.context.state_changed();
                }
                // A turn counts once its start is durable, before anyone
                // hears of it.
                self.hub
                    .stats
                    .turns
                    .store(self.state.turn, Ordering::Relaxed);
            }
            if let Some(entry) = p.history {
                self.state.record(entry);
            }
            frames.push(p.bytes);
            waiters.extend(p.waiters);
        }
        self.broadcast(acks, frames, ctx);
        for waiter in waiters {
            waiter();
        }
        if self.sequencer.snapshot_due() {
            let (done, rx) = oneshot::channel();
            if let Some(ticket) = self.write_snapshot(done) {
                ctx.spawn(
                    actix::fut::wrap_future::<_, Self>(rx).map(move |res, act, _| {
                        if matches!(res, Ok(Ok(()))) {
                            act.stored_chunks.durable(ticket);
                        }
                    }),
                );
            }
        }
    }

    /// Runs a queued direct call; its caller hears once the result is durable.
    fn run_direct(&mut self, QueuedCall { call, reply }: QueuedCall) {
        let turn_id = TurnId::from(format!("direct_{}", random_token(12)));
        let call = Call::direct(turn_id.clone(), call);
        let call_id = call.call_id.clone();
        let (seq, answer) = self.run_call(call);
        self.touch();
        let done = DirectCallDone {
            turn_id,
            call_id,
            seq,
            event: answer.event,
            outcome: answer.outcome,
        };
        let answer = Box::new(move || {
            let _ = reply.send(done);
        });
        self.sequencer.when_durable(seq, answer);
    }

    /// Sends the same frames to every subscriber, with `acks` ahead of
    /// them for the connections they go to; one that cannot keep up is
    /// dropped ([`Fanout::broadcast_after`]), and presence changes.
    fn broadcast(
        &mut self,
        acks: Vec<(u64, ByteString)>,
        frames: Vec<ByteString>,
        ctx: &mut Context<Self>,
    ) {
        let delivery = self.fanout.broadcast_after(acks, frames);
        let metrics = &self.deps.metrics;
        metrics.outbound_drops.add(delivery.overflowed);
        metrics.frames_sent.add(delivery.sent);
        if delivery.dropped > 0 {
            self.presence_changed(ctx);
        }
    }

    /// Connections came or went: tells everyone now, or once the presence
    /// window has passed since the last `presence` frame (the fan-out
    /// decides which; the timer is this actor's).
    fn presence_changed(&mut self, ctx: &mut Context<Self>) {
        self.report_stats();
        // A stopping session sends no more frames, presence included.
        if self.stopping {
            return;
        }
        let now = Instant::now();
        match self.fanout.presence_changed(now) {
            Presence::At(at) => {
                ctx.run_later(at.saturating_duration_since(now), |act, _| {
                    if !act.stopping {
                        let presence = act.fanout.presence_due(Instant::now());
                        act.send_presence(presence);
                    }
                });
            }
            presence => self.send_presence(presence),
        }
    }

    /// Journals the `presence` frame the fan-out asked for, if it did.
    fn send_presence(&mut self, presence: Presence) {
        if let Some(event) = presence.event() {
            self.emit(Entry::frame(event));
        }
    }

    /// Notes that the session did something now (for the idle unload and
    /// for the operator's list).
    fn touch(&mut self) {
        self.last_activity = Instant::now();
        self.hub
            .stats
            .last_activity_ms
            .store(now_ms(), Ordering::Relaxed);
    }

    /// Updates the number of chats waiting that the hub lists.
    fn report_queue(&self) {
        self.hub
            .stats
            .queued
            .store(self.intake.waiting_chats(), Ordering::Relaxed);
    }

    /// The refusal of new work once an operator closed the session.
    fn refuse_if_closed(&self) -> Result<(), ChatRefused> {
        match self.closed_at {
            Some(_) => Err(ChatRefused::closed()),
            None => Ok(()),
        }
    }

    /// Updates the counts the hub lists the session with.
    fn report_stats(&self) {
        let (players, spectators) = self.fanout.connection_counts();
        let stats = &self.hub.stats;
        stats.players.store(players, Ordering::Relaxed);
        stats.spectators.store(spectators, Ordering::Relaxed);
        stats.turns.store(self.state.turn, Ordering::Relaxed);
    }

    /// Writes the released state as the session's snapshot, in pieces
    /// (`crate::game::pieces`): the manifest and the chunks not sure to be
    /// stored. `done` hears when it is durable. Answers what to tell
    /// [`StoredChunks::durable`] then (`None` if the state did not
    /// serialize).
    fn write_snapshot(
        &mut self,
        done: oneshot::Sender<Result<(), StorageError>>,
    ) -> Option<ChunkTicket> {
        self.sequencer.snapshot_taken();
        let pieces = match self.state.pieces() {
            Ok(pieces) => pieces,
            Err(e) => {
                tracing::error!(error = %e, "state did not serialize");
                let _ = done.send(Err(StorageError::Corrupt(e.to_string())));
                return None;
            }
        };
        let chunks = self.stored_chunks.write(pieces.chunks);
        let snapshot = SnapshotWrite {
            seq: self.sequencer.released(),
            state: pieces.manifest,
            chunks: chunks.send,
            keep: chunks.keep,
        };
        self.flush();
        self.deps
            .store
            .snapshot(&self.meta.session_id, self.epoch, snapshot, Some(done));
        Some(chunks.ticket)
    }

    // ----- the turn loop ---------------------------------------------------

    /// Moves the turn loop as far as the durable state allows.
    fn advance(&mut self, ctx: &mut Context<Self>) {
        loop {
            match self.turn.as_ref().map(|t| t.turn.phase()) {
                None => match self.intake.next(self.sequencer.effects_in_flight()) {
                    Some(Work::Turn(q)) => self.start_turn(q, ctx),
                    Some(Work::Call(c)) => self.run_direct(c),
                    None => return self.drain_if_done(ctx),
                },
                Some(Phase::Waiting { .. }) if !self.sequencer.effects_in_flight() => {
                    match self.turn.as_mut().and_then(|t| t.turn.resume()) {
                        Some(step) => self.execute(step, ctx),
                        None => return,
                    }
                }
                Some(_) => return,
            }
        }
    }

    /// Carries out what the running turn decided.
    fn execute(&mut self, step: Step, ctx: &mut Context<Self>) {
        match step {
            Step::CallModel(kind) => self.call_model(kind, ctx),
            Step::Correct { answer, message } => {
                tracing::info!(session_id = %self.meta.session_id, %message, "model broke the reply contract; asking again");
                self.call_model_with(RequestKind::Step, Some((answer, message)), ctx);
            }
            Step::WrapUp { limit, message } => {
                // No more tools run this turn. One last model call with
                // tools switched off lets the game master narrate what
                // happened; the turn fails only if that call fails too.
                tracing::info!(session_id = %self.meta.session_id, limit = ?limit, %message, "turn limit reached");
                self.call_model(RequestKind::WrapUp, ctx);
            }
            Step::RunCall {
                call_id,
                tool,
                arguments,
            } => self.run_model_call(call_id, tool, arguments, ctx),
            Step::RunWithContent { call, text } => {
                let (args, refused) =
                    calls::with_content(&self.view(), &call.tool, call.args, text);
                self.run_turn_call(call.call_id, call.tool, RawArgs::Value(args), refused);
                self.advance(ctx);
            }
            Step::RunCalls { asked } => {
                if asked > MAX_CALLS_PER_ANSWER {
                    tracing::warn!(
                        session_id = %self.meta.session_id,
                        asked,
                        "the model asked for too many tool calls in one answer; the rest are not run"
                    );
                }
                self.advance(ctx);
            }
            Step::Complete {
                reply,
                dialog_type,
                emit_narrative,
                limit,
            } => {
                if let Some(text) = emit_narrative
                    && let Some(turn_id) = self.turn.as_ref().map(|t| t.turn.turn_id().clone())
                {
                    self.emit(Entry::frame(StoryEvent::NarrativeDelta { turn_id, text }));
                }
                if let Some(turn) = self.end_turn(ctx) {
                    self.deps.metrics.turns_completed.inc();
                    let state = &self.state;
                    self.emit(turn_frames::completed(
                        turn,
                        state,
                        reply,
                        dialog_type,
                        limit,
                    ));
                    self.turn_ended(ctx);
                }
            }
            Step::Fail {
                code,
                message,
                limit,
            } => self.fail_turn(code, message, limit, ctx),
        }
    }

    fn start_turn(&mut self, q: QueuedTurn, ctx: &mut Context<Self>) {
        let started =
            turn_frames::started(&self.state, q.turn_no, &q.turn_id, q.request_id, q.text);
        let seq = self.emit(started);
        self.acks.started(q.turn_id.clone(), seq, q.acks);
        self.report_queue();
        if q.stored == Stored::InInbox {
            // Its `turn_started` is queued first: the row is not needed.
            self.flush();
            self.deps
                .store
                .dequeue(&self.meta.session_id, &q.turn_id, self.epoch);
        }
        let turn_id = q.turn_id.clone();
        let deadline = self.deps.limits.turn_deadline;
        let timer = ctx.run_later(deadline, move |act, ctx| {
            let step = act
                .turn
                .as_ref()
                .filter(|t| *t.turn.turn_id() == turn_id)
                .map(|t| t.turn.on_deadline(deadline));
            if let Some(step) = step {
                act.execute(step, ctx);
            }
        });
        let trace_id = q.trace_id.unwrap_or_else(TraceId::fresh);
        let max_iterations = self.deps.limits.max_iterations;
        let turn = Turn::new(q.turn_id, q.turn_no, trace_id, max_iterations);
        self.turn = Some(Running::new(turn, timer, Instant::now()));
        self.deps.metrics.turns_started.inc();
        self.touch();
    }

    /// Records a model call's time and tokens.
    fn model_call_ended(&mut self, event: &Result<ModelEvent, LlmError>) {
        let metrics = &self.deps.metrics;
        let answered = self.turn.as_mut().map(|t| t.model_answered(Instant::now()));
        if let Some(waited) = answered.flatten() {
            metrics.model_call_seconds.observe_duration(waited);
        }
        if let Ok(ModelEvent::Done(reply)) = event {
            metrics.model_prompt_tokens.add(reply.usage.prompt_tokens);
            metrics
                .model_completion_tokens
                .add(reply.usage.completion_tokens);
        }
    }

    /// Starts a model call for the running turn; its events come back as
    /// [`ModelMsg`]s tagged with this call. A model that answers at once
    /// ([`crate::llm::Provider::answers_at_once`]) is read to its end here,
    /// so the turn goes on in this same step and its frames reach the
    /// journal together (one commit, one write per connection).
    fn stream_model(&mut self, request: ModelRequest, ctx: &mut Context<Self>) {
        self.model_calls += 1;
        let tag = self.model_calls;
        let mut events = crate::llm::ask(&*self.deps.provider, request);
        if self.deps.provider.answers_at_once() {
            if let Some(t) = self.turn.as_mut() {
                t.model_called(tag, None, Instant::now());
            }
            while self.turn.as_ref().is_some_and(|t| t.awaits(tag)) {
                match events.next().now_or_never() {
                    Some(event) => self.on_model_event(ModelMsg { tag, event }, ctx),
                    // Not ready after all: the rest streams as usual.
                    None => break,
                }
            }
            if !self.turn.as_ref().is_some_and(|t| t.awaits(tag)) {
                return;
            }
        }
        let events = events
            .map(move |e| ModelMsg {
                tag,
                event: Some(e),
            })
            .chain(stream::once(async move { ModelMsg { tag, event: None } }));
        let stream = ctx.add_stream(events);
        if let Some(t) = self.turn.as_mut() {
            t.model_called(tag, Some(stream), Instant::now());
        }
    }

    /// Asks the model for the running turn's next step
    /// ([`prompt::model_request`]).
    fn call_model(&mut self, kind: RequestKind, ctx: &mut Context<Self>) {
        self.call_model_with(kind, None, ctx);
    }

    /// [`Self::call_model`], with a rejected answer and the message
    /// correcting it (`correction`) after the history, not kept in it.
    fn call_model_with(
        &mut self,
        kind: RequestKind,
        correction: Option<(String, String)>,
        ctx: &mut Context<Self>,
    ) {
        let Some(t) = self.turn.as_ref() else { return };
        let turn_id = t.turn.turn_id().clone();
        let correction = correction.into_iter().flat_map(|(answer, message)| {
            [
                Arc::new(HistoryEntry::Assistant {
                    turn_id: turn_id.clone(),
                    text: answer,
                }),
                Arc::new(HistoryEntry::User {
                    turn_id: turn_id.clone(),
                    text: message,
                }),
            ]
        });
        let in_flight = self
            .sequencer
            .pending()
            .filter_map(|p| p.history.clone())
            .chain(correction);
        let budget = self.deps.limits.history_tokens;
        let turn_no = t.turn.turn_no();
        let whole = self.deps.provider.reads_conversation();
        let tools = match &self.model_tools {
            Some(tools) => tools.clone(),
            None => {
                let view = self.view();
                let tools = view.registry.openai_tools(&view.game_master());
                self.model_tools = Some(tools.clone());
                tools
            }
        };
        let mut cache = std::mem::take(&mut self.context);
        let context = cache.get(&self.view(), turn_no);
        self.context = cache;
        let results = t.turn.results();
        let mut request =
            prompt::model_request(&self.view(), tools, in_flight, budget, context, kind, whole);
        // The turn's calls' results as the values they are, beside the
        // history's text of them.
        request.results = results;
        self.stream_model(request, ctx);
    }

    /// Runs a tool call the model asked for, unless a real model writes
    /// its text first: the content some tools ask for (`generate_zone`'s
    /// names and descriptions, [`calls::content_request`]) is asked for
    /// here, and the call runs when the turn has the answer
    /// ([`Step::RunWithContent`]).
    fn run_model_call(
        &mut self,
        call_id: CallId,
        tool: String,
        arguments: String,
        ctx: &mut Context<Self>,
    ) {
        let Some(turn_id) = self.turn.as_ref().map(|t| t.turn.turn_id().clone()) else {
            return;
        };
        let ask = self
            .deps
            .provider
            .writes_content()
            .then(|| calls::content_request(&self.view(), &tool, &arguments));
        if let Some(ask) = ask.flatten() {
            if let Some(t) = self.turn.as_mut() {
                let args = ask.args;
                t.turn.await_content(ContentCall {
                    call_id,
                    tool,
                    args,
                });
            }
            let request = prompt::content_request(&turn_id, ask.system, ask.user);
            self.stream_model(request, ctx);
            return;
        }
        self.run_turn_call(call_id, tool, RawArgs::Text(arguments), None);
    }

    /// Runs a call of the running turn as the game master; `refused` fails
    /// it without running the tool.
    fn run_turn_call(
        &mut self,
        call_id: CallId,
        tool: String,
        raw: RawArgs,
        refused: Option<ToolError>,
    ) {
        if let Some(t) = self.turn.as_ref() {
            let call = Call::of_turn(&t.turn, call_id, tool, raw, refused);
            let (_, answer) = self.run_call(call);
            // The turn's model hears what the call gave: a model in this
            // process reads the value instead of parsing its text again.
            if let Some(t) = self.turn.as_mut() {
                t.turn.keep_result(match answer.outcome {
                    Ok(result) => result,
                    Err(e) => e.to_model_json(),
                });
            }
        }
    }

    /// Runs one tool call ([`calls::run`]) and journals what it gave; a
    /// model turn's call also goes into the turn's events. Answers the seq
    /// of its `tool_result` frame and what its caller hears.
    fn run_call(&mut self, call: Call) -> (u64, Answer) {
        let in_turn = call.in_turn;
        let view = SessionView {
            registry: &self.deps.registry,
            state: &self.state,
            session_id: &self.session_id,
            tenant_id: &self.meta.tenant_id,
        };
        let ran = calls::run(&view, &mut self.rng, call);
        self.deps
            .metrics
            .tool_seconds
            .observe(ran.duration_ms / 1000.0);
        self.emit(ran.call);
        audit::log(&ran.audit);
        self.hold(SessionWrite::Audit(ran.audit));
        if in_turn && let Some(t) = self.turn.as_mut() {
            t.turn
                .call_ran(ran.answer.event.clone(), ran.result.effect.as_ref());
        }
        let seq = self.emit(ran.result);
        (seq, ran.answer)
    }

    /// Ends the running turn: its timer and model stream stop and its time
    /// is counted; answers its bookkeeping for its last frame.
    fn end_turn(&mut self, ctx: &mut Context<Self>) -> Option<Turn> {
        let ended = self.turn.take()?.end(Instant::now());
        for h in ended.to_cancel {
            ctx.cancel_future(h);
        }
        let metrics = &self.deps.metrics;
        metrics.turn_ended(ended.elapsed, ended.model_time);
        Some(ended.turn)
    }

    /// Ends the running turn with `turn_failed`; the session stays usable.
    fn fail_turn(
        &mut self,
        code: ErrorCode,
        message: String,
        limit: Option<TurnLimit>,
        ctx: &mut Context<Self>,
    ) {
        let Some(turn) = self.end_turn(ctx) else {
            return;
        };
        self.deps.metrics.turn_failed(&code.as_str());
        let turn_id = turn.turn_id();
        tracing::info!(session_id = %self.meta.session_id, %turn_id, code = ?code, %message, "turn failed");
        self.emit(turn_frames::failed(turn_id, code, message, limit));
        self.turn_ended(ctx);
    }

    /// A turn's last frame is journalled: the next work may start.
    fn turn_ended(&mut self, ctx: &mut Context<Self>) {
        self.touch();
        self.report_stats();
        self.advance(ctx);
    }

    // ----- lifecycle --------------------------------------------------------

    fn idle(&self) -> bool {
        self.fanout.is_empty()
            && self.turn.is_none()
            && !self.intake.has_work()
            && !self.sequencer.has_pending()
            && self.last_activity.elapsed() >= self.deps.limits.idle_timeout
    }

    /// Once draining or closed, and all work taken is durable and told:
    /// closes every connection (for a reconnect elsewhere, or for good)
    /// and unloads.
    fn drain_if_done(&mut self, ctx: &mut Context<Self>) {
        let why = if self.closed {
            (CLOSE_SESSION_CLOSED, super::CLOSED_BY_OPERATOR)
        } else if self.draining {
            (CLOSE_SESSION_MOVED, "this node is restarting; reconnect")
        } else {
            return;
        };
        if !self.stopping
            && self.turn.is_none()
            && !self.intake.has_work()
            && !self.sequencer.has_pending()
        {
            self.fanout.close_all(why.0, why.1);
            self.unload(ctx);
        }
    }

    /// Writes a last snapshot, leaves the hub and stops. The session is
    /// loaded again from storage on its next use.
    fn unload(&mut self, ctx: &mut Context<Self>) {
        self.stopping = true;
        self.deps.metrics.sessions_hibernated.inc();
        let (done, rx) = oneshot::channel();
        self.write_snapshot(done);
        ctx.wait(actix::fut::wrap_future::<_, Self>(rx).map(|res, act, ctx| {
            if !matches!(res, Ok(Ok(()))) {
                tracing::warn!(session_id = %act.meta.session_id, "final snapshot failed; the journal still holds everything");
            }
            act.leave_hub(ctx);
        }));
    }

    fn leave_hub(&mut self, ctx: &mut Context<Self>) {
        self.stopping = true;
        self.hub.unregister.do_send(Unregister {
            session_id: self.session_id.clone(),
            addr: ctx.address(),
        });
        ctx.stop();
    }

    /// Storage failed: nothing more can be made durable, so stop rather than
    /// tell anyone something that could be lost. Clients may reconnect; the
    /// session reloads from what is durable.
    fn storage_failed(&mut self, error: StorageError, ctx: &mut Context<Self>) {
        if matches!(error, StorageError::Fenced) {
            // Another node runs the session now: clients go on there.
            tracing::warn!(session_id = %self.meta.session_id, "another node claimed this session; stopping it here");
            self.deps.metrics.leases_lost.inc();
            self.fanout.close_all(
                CLOSE_SESSION_MOVED,
                "the session moved to another node; reconnect",
            );
        } else {
            tracing::error!(session_id = %self.meta.session_id, error = %error, "storage failed; stopping session");
            self.fanout.close_all(
                CLOSE_SESSION_FAILED,
                "session storage failed; reconnect to reload",
            );
        }
        self.leave_hub(ctx);
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let addr = ctx.address();
        self.me = Some(addr.clone());
        self.sink = Some(DurableSink::new(self.epoch, move |r| {
            addr.do_send(Durable(r))
        }));
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
        let every = (self.deps.limits.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(10));
        ctx.run_interval(every, |act, ctx| {
            if act.stopping {
                return;
            }
            if act.fanout.expire_remote(Instant::now()) {
                act.presence_changed(ctx);
            }
            if act.idle() {
                act.unload(ctx);
            }
        });
        tracing::debug!(session_id = %self.meta.session_id, seq = self.sequencer.released(), "session started");
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::debug!(session_id = %self.meta.session_id, "session stopped");
    }
}

impl Handler<Flush> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Flush, _: &mut Self::Context) {
        self.flush();
    }
}

impl Handler<Durable> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Durable, ctx: &mut Self::Context) {
        match msg.0 {
            Ok(up_to) => {
                self.release(up_to, ctx);
                self.advance(ctx);
            }
            Err(e) => self.storage_failed(e, ctx),
        }
    }
}

impl StreamHandler<ModelMsg> for SessionActor {
    fn handle(&mut self, msg: ModelMsg, ctx: &mut Self::Context) {
        self.on_model_event(msg, ctx);
    }

    // Each model call is its own stream; its end must not stop the actor.
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl SessionActor {
    /// One event of the model call in flight (or of one no longer awaited,
    /// which is dropped).
    fn on_model_event(&mut self, msg: ModelMsg, ctx: &mut Context<Self>) {
        if !self.turn.as_ref().is_some_and(|t| t.awaits(msg.tag)) {
            return;
        }
        if let Some(event @ (Ok(ModelEvent::Done(_)) | Err(_))) = &msg.event {
            self.model_call_ended(event);
        }
        let Some(t) = self.turn.as_mut() else { return };
        let step = match msg.event {
            Some(Ok(ModelEvent::Delta(text))) => {
                if let Some(text) = t.turn.on_delta(text) {
                    let turn_id = t.turn.turn_id().clone();
                    self.emit(Entry::frame(StoryEvent::NarrativeDelta { turn_id, text }));
                }
                return;
            }
            Some(Ok(ModelEvent::Done(reply))) => t.turn.on_model_done(reply),
            Some(Err(e)) => {
                // Logged whole under the turn's trace id: clients get only
                // its public message.
                let (turn_id, trace_id) = (t.turn.turn_id(), t.turn.trace_id());
                tracing::warn!(session_id = %self.meta.session_id, %turn_id, %trace_id, error = %e, "model call failed");
                t.turn.on_model_error(&e)
            }
            None => t.turn.on_stream_end(),
        };
        self.execute(step, ctx);
    }
}

impl Handler<SubmitChat> for SessionActor {
    type Result = Result<ChatAccepted, ChatRefused>;

    /// An `ack` means the chat is durable: a chat that starts at once is
    /// acknowledged just ahead of its durable `turn_started`; one taken
    /// while other work waits is stored first and acknowledged once that
    /// is durable. Either way the ack is ahead of every frame of its turn on
    /// the connection (PROTOCOL.md §7.4).
    fn handle(&mut self, msg: SubmitChat, ctx: &mut Self::Context) -> Self::Result {
        self.refuse_if_closed()?;
        let (busy, store) = (self.turn.is_some(), &self.deps.store);
        let request_id = msg.request_id.clone();
        let taken = self.intake.take_chat(
            &msg.text,
            msg.request_id,
            self.stopping || self.draining,
            busy,
            || store.refusing(),
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
            if let Some((conn_id, ack)) = ack {
                self.ack_after(&turn_id, conn_id, ack);
            }
            return Ok(accepted);
        }
        self.touch();
        self.report_queue();
        if let Some(q) = self.intake.queued_turn(&turn_id) {
            q.acks.extend(ack);
            q.trace_id = msg.trace_id;
        }
        if accepted.queued > 0 {
            let chat = QueuedChat {
                session_id: self.meta.session_id.clone(),
                turn_id: turn_id.clone(),
                turn_no: self.intake.queued_turn(&turn_id).map_or(0, |q| q.turn_no),
                request_id,
                text: msg.text,
                after_seq: self.sequencer.last_staged(),
                created_at: now_ms(),
            };
            let (done, stored) = oneshot::channel();
            self.flush();
            self.deps.store.enqueue(chat, self.epoch, done);
            ctx.spawn(actix::fut::wrap_future::<_, Self>(stored).map(
                move |res, act, ctx| match res {
                    Ok(Ok(())) => {
                        if let Some(q) = act.intake.queued_turn(&turn_id) {
                            q.stored = Stored::InInbox;
                            for (conn_id, ack) in std::mem::take(&mut q.acks) {
                                act.fanout.send_to(conn_id, Outbound::Frame(ack));
                            }
                        }
                        act.advance(ctx);
                    }
                    Ok(Err(e)) => act.storage_failed(e, ctx),
                    Err(_) => act.storage_failed(StorageError::WriterGone, ctx),
                },
            ));
        }
        self.advance(ctx);
        Ok(accepted)
    }
}

impl SessionActor {
    /// Sends a duplicate's ack once the chat it repeats is durable: with
    /// that chat's own ack if it waits, else now.
    fn ack_after(&mut self, turn_id: &TurnId, conn_id: u64, ack: ByteString) {
        if let Some(q) = self.intake.queued_turn(turn_id)
            && !q.acks.is_empty()
        {
            q.acks.push((conn_id, ack));
        } else if let Some((conn_id, ack)) = self.acks.duplicate(turn_id, conn_id, ack) {
            self.fanout.send_to(conn_id, Outbound::Frame(ack));
        }
    }
}

impl Handler<CallTool> for SessionActor {
    type Result = ResponseFuture<Result<DirectCallDone, ChatRefused>>;

    fn handle(&mut self, msg: CallTool, ctx: &mut Self::Context) -> Self::Result {
        if let Err(refused) = self.refuse_if_closed() {
            return Box::pin(std::future::ready(Err(refused)));
        }
        let (reply, answer) = oneshot::channel();
        let (busy, store) = (self.turn.is_some(), &self.deps.store);
        let call = QueuedCall { call: msg, reply };
        let taken = self
            .intake
            .take_call(call, self.stopping || self.draining, busy, || {
                store.refusing()
            });
        if let Err(refused) = taken {
            return Box::pin(std::future::ready(Err(refused)));
        }
        self.touch();
        self.advance(ctx);
        Box::pin(async move {
            answer.await.map_err(|_| {
                ChatRefused::new(
                    ErrorCode::InternalError,
                    "the session stopped before the call was durable; retry",
                )
            })
        })
    }
}

impl Handler<AwaitTurnEnd> for SessionActor {
    type Result = ResponseFuture<Result<TurnEnd, ChatRefused>>;

    fn handle(&mut self, msg: AwaitTurnEnd, _: &mut Self::Context) -> Self::Result {
        let id = msg.turn_id;
        let open = self.turn.as_ref().is_some_and(|t| *t.turn.turn_id() == id)
            || self.intake.holds_turn(&id)
            || self.sequencer.ends_pending(&id);
        if open {
            let rx = self.sequencer.await_turn_end(id);
            return Box::pin(async move { rx.await.map_err(|_| ChatRefused::turn_lost()) });
        }
        let (store, session_id) = (self.deps.store.clone(), self.meta.session_id.clone());
        Box::pin(replay::turn_end(store, session_id, id))
    }
}

impl Handler<Subscribe> for SessionActor {
    type Result = ResponseActFuture<Self, Result<Joined, ChatRefused>>;

    /// A connection resuming from a seq the resume ring no longer holds is
    /// served the frames in between from the journal first (see
    /// [`Sequencer::stored_range`]), then the ring's.
    fn handle(&mut self, msg: Subscribe, ctx: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(actix::fut::ready(Err(ChatRefused::reloading())));
        }
        if let Err(refused) = self.refuse_if_closed() {
            return Box::pin(actix::fut::ready(Err(refused)));
        }
        let Some(range) = self.sequencer.stored_range(msg.last_seq) else {
            let joined = self.join(msg, None);
            self.presence_changed(ctx);
            return Box::pin(actix::fut::ready(Ok(joined)));
        };
        let read = replay::stored_frames(self.deps.store.clone(), self.session_id.clone(), range);
        Box::pin(read.into_actor(self).map(move |stored, act, ctx| {
            if act.stopping {
                return Err(ChatRefused::reloading());
            }
            let joined = act.join(msg, stored);
            act.presence_changed(ctx);
            Ok(joined)
        }))
    }
}

impl SessionActor {
    /// Adds a connection: its welcome and the frames it missed. `stored`
    /// are frames read from the journal, up to a seq, for a connection
    /// that resumes from before the ring; the ring gives the rest.
    fn join(&mut self, msg: Subscribe, stored: Option<(u64, Vec<(u64, String)>)>) -> Joined {
        let backlog = self.sequencer.resume(msg.last_seq, stored);
        let role = self.fanout.add(msg);
        self.touch();
        Joined::new(&self.session_id, role, &self.state, backlog)
    }
}

impl Handler<RemoteAudience> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: RemoteAudience, ctx: &mut Self::Context) {
        let until = Instant::now() + super::tail::AUDIENCE_REFRESH * 3;
        if self
            .fanout
            .remote_audience(msg.node_id, msg.spectators, until)
        {
            self.touch();
            if !self.stopping {
                self.presence_changed(ctx);
            }
        }
    }
}

impl Handler<Unsubscribe> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Self::Context) {
        if self.fanout.unsubscribe(msg.conn_id) {
            self.touch();
            if !self.stopping {
                self.presence_changed(ctx);
            }
        }
    }
}

impl Handler<GetSnapshot> for SessionActor {
    type Result = Result<String, ChatRefused>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Err(ChatRefused::reloading());
        }
        self.refuse_if_closed()?;
        let snapshot =
            Snapshot::of(&self.session_id, &self.state).owned_by(&self.deps.store.node().id);
        Ok(serde_json::to_string(&snapshot).unwrap_or_default())
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Drain, ctx: &mut Self::Context) {
        self.draining = true;
        self.drain_if_done(ctx);
    }
}

impl Handler<CloseSession> for SessionActor {
    type Result = ResponseActFuture<Self, Result<i64, ChatRefused>>;

    /// Refuses new work at once, marks the session closed in storage, and
    /// answers when that is durable; the work already taken (the running
    /// turn, the chats acknowledged behind it) still runs, then every
    /// connection is closed with [`CLOSE_SESSION_CLOSED`] and the session
    /// unloads, never to load again. Closing again answers the same time.
    fn handle(&mut self, _: CloseSession, _: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(actix::fut::ready(Err(ChatRefused::reloading())));
        }
        let closed_at = *self.closed_at.get_or_insert_with(now_ms);
        self.hub.stats.closing.store(true, Ordering::Relaxed);
        let (store, id) = (self.deps.store.clone(), self.meta.session_id.clone());
        let write = async move { store.close_session(&id, closed_at).await };
        Box::pin(write.into_actor(self).map(move |res, act, ctx| match res {
            Ok(_) => {
                tracing::info!(session_id = %act.meta.session_id, "an operator closed the session");
                act.closed = true;
                act.drain_if_done(ctx);
                Ok(closed_at)
            }
            Err(e) => {
                tracing::warn!(session_id = %act.meta.session_id, error = %e, "storing a session's close failed");
                if !act.closed {
                    act.closed_at = None;
                    act.hub.stats.closing.store(false, Ordering::Relaxed);
                }
                Err(ChatRefused::new(
                    ErrorCode::Overloaded,
                    "the close could not be stored; try again",
                )
                .with_retry_after(1000))
            }
        }))
    }
}

impl Handler<LeaseLost> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: LeaseLost, ctx: &mut Self::Context) {
        self.storage_failed(StorageError::Fenced, ctx);
    }
}
