//! The turn loop of a session's core: which work starts next, what a
//! running turn's steps do (model calls, tool calls, its end), and the
//! model's events and the deadline that move it. It moves on three things:
//! durability notices, model events, and the deadline timer.

use std::sync::atomic::Ordering;
use std::time::Instant;

use actix::SpawnHandle;

use super::{Command, Core};
use crate::error::ErrorCode;
use crate::game::state::CharacterId;
use crate::ids::{CallId, SeatId, TraceId, TurnId};
use crate::llm::{LlmError, ModelEvent, ModelRequest, RequestKind};
use crate::protocol::{StoryEvent, TurnLimit};
use crate::session::audit;
use crate::session::calls::{self, Answer, Call};
use crate::session::intake::{QueuedCall, QueuedTurn, Stored, Work};
use crate::session::messages::DirectCallDone;
use crate::session::model::{self, Events};
use crate::session::prompt;
use crate::session::running::Running;
use crate::session::sequencer::Entry;
use crate::session::turn::{ContentCall, MAX_CALLS_PER_ANSWER, Phase, Step, Turn};
use crate::session::turn_frames;
use crate::session::types::{SessionView, random_token};
use crate::storage::SessionWrite;
use crate::telemetry::{self, TraceParent};
use crate::tools::{RawArgs, ToolError};

impl Core {
    /// Moves the turn loop as far as the durable state allows.
    pub(in crate::session) fn advance(&mut self) {
        loop {
            match self.turn.as_ref().map(|t| t.turn.phase()) {
                None => match self.intake.next(self.sequencer.effects_in_flight()) {
                    Some(Work::Turn(q)) => self.start_turn(q),
                    Some(Work::Call(c)) => self.run_direct(c),
                    None if self.start_round_if_due() => {}
                    None if self.start_timer_if_due() => {}
                    None => return self.drain_if_done(),
                },
                Some(Phase::Waiting { .. }) if !self.sequencer.effects_in_flight() => {
                    match self.turn.as_mut().and_then(|t| t.turn.resume()) {
                        Some(step) => self.execute(step),
                        None => return,
                    }
                }
                // A turn paused for a person holds nothing here: a drain
                // or a close that waited for its pause to be durable goes
                // on (the pause is journalled, and taken up wherever the
                // session loads next).
                Some(Phase::AwaitApproval) => return self.drain_if_done(),
                Some(_) => return,
            }
        }
    }

    fn start_turn(&mut self, q: QueuedTurn) {
        let acting = vec![turn_frames::character_of(&self.state, &q.seat_id)];
        let (turn_no, turn_id) = (q.turn_no, &q.turn_id);
        let started = turn_frames::started(
            &self.state,
            turn_no,
            turn_id,
            q.request_id,
            q.text,
            &q.seat_id,
        );
        let seq = self.emit(started);
        self.acks.started(q.turn_id.clone(), seq);
        self.report_queue();
        if q.stored == Stored::InInbox {
            // Its `turn_started` is queued first: the row is not needed.
            self.flush_now();
            self.out.push_back(Command::Dequeue(q.turn_id.clone()));
        }
        let trace_id = q.trace_id.unwrap_or_else(TraceId::fresh);
        let (seat, parent) = (Some(q.seat_id), q.traceparent);
        self.run_turn(q.turn_id, q.turn_no, trace_id, acting, seat, parent);
    }

    /// The turn `turn_id` (number `turn_no`), whose `turn_started` is
    /// journalled, runs from now, acting for `acting` (the speaker `seat`'s
    /// character, if a seat spoke), under its deadline: a chat's, a
    /// round's and a world turn's alike. Its span is a child of `parent`
    /// (its caller's `traceparent`), else a root.
    pub(super) fn run_turn(
        &mut self,
        turn_id: TurnId,
        turn_no: u64,
        trace_id: TraceId,
        acting: Vec<CharacterId>,
        seat: Option<SeatId>,
        parent: Option<TraceParent>,
    ) {
        let deadline = self.deps.limits.turn_deadline;
        self.out
            .push_back(Command::Deadline(turn_id.clone(), deadline));
        let max_iterations = self.deps.limits.max_iterations;
        let span = telemetry::turn_span(&self.session_id, &turn_id, &trace_id, parent);
        let turn = Turn::new(turn_id, turn_no, trace_id, max_iterations);
        let now = Instant::now();
        self.turn = Some(Box::new(Running::new(turn, acting, seat, now, span)));
        self.deps.metrics.turns_started.inc();
        self.touch();
        // Taken while a budget had room, or started by a timer or a round:
        // its model call is refused all the same once the budget is spent.
        if let Err(refused) = self.within_budget() {
            self.fail_turn(ErrorCode::BudgetExceeded, refused.message, None);
        }
    }

    /// The deadline timer of `turn_id` is set; stopped at once if that turn
    /// is over.
    pub(in crate::session) fn deadline_set(&mut self, turn_id: &TurnId, timer: SpawnHandle) {
        match self.running(turn_id) {
            Some(t) => t.deadline_set(timer),
            None => self.out.push_back(Command::Cancel(vec![timer])),
        }
    }

    /// The deadline of `turn_id` passed.
    pub(in crate::session) fn deadline(&mut self, turn_id: &TurnId) {
        let deadline = self.deps.limits.turn_deadline;
        // A turn paused for a person has no deadline until it is decided.
        let running = self.running(turn_id).filter(|t| t.awaiting.is_none());
        if let Some(step) = running.map(|t| t.turn.on_deadline(deadline)) {
            self.execute(step);
        }
    }

    fn running(&mut self, turn_id: &TurnId) -> Option<&mut Running> {
        self.turn
            .as_deref_mut()
            .filter(|t| t.turn.turn_id() == turn_id)
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

    /// Carries out what the running turn decided.
    fn execute(&mut self, step: Step) {
        match step {
            Step::CallModel(kind) => self.call_model(kind, None),
            Step::Correct { answer, message } => {
                tracing::info!(session_id = %self.session_id, %message, "model broke the reply contract; asking again");
                self.call_model(RequestKind::Step, Some((answer, message)));
            }
            Step::WrapUp { limit, message } => {
                // No more tools run this turn. One last model call with
                // tools switched off lets the game master narrate what
                // happened; the turn fails only if that call fails too.
                tracing::info!(session_id = %self.session_id, limit = ?limit, %message, "turn limit reached");
                self.call_model(RequestKind::WrapUp, None);
            }
            Step::RunCall {
                call_id,
                tool,
                arguments,
            } => self.run_model_call(call_id, tool, arguments),
            Step::RunWithContent { call, text } => {
                let (args, refused) =
                    calls::with_content(&self.view(), &call.tool, call.args, text);
                self.run_turn_call(call.call_id, call.tool, RawArgs::Value(args), refused);
                self.advance();
            }
            Step::RunCalls { asked } => {
                if asked > MAX_CALLS_PER_ANSWER {
                    tracing::warn!(
                        session_id = %self.session_id,
                        asked,
                        "the model asked for too many tool calls in one answer; the rest are not run"
                    );
                }
                self.advance();
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
                // Whose position the patch reports: the speaker's (a
                // round's first acting seat's), not the host's.
                let speaker = self.turn.as_ref().and_then(|t| t.acting.first().cloned());
                if let Some(t) = self.turn.as_ref() {
                    telemetry::turn_ended(&t.span, None);
                }
                if let Some(turn) = self.end_turn() {
                    self.deps.metrics.turns_completed.inc();
                    let (state, speaker) = (&self.state, speaker.as_ref());
                    let done =
                        turn_frames::completed(turn, state, speaker, reply, dialog_type, limit);
                    self.emit(done);
                    self.turn_ended();
                }
            }
            Step::Fail {
                code,
                message,
                limit,
            } => self.fail_turn(code, message, limit),
        }
    }

    /// Asks the model for the running turn's next step, with `correction`
    /// after the history ([`Prompter::turn_request`]).
    fn call_model(&mut self, kind: RequestKind, correction: Option<(String, String)>) {
        let Some(t) = self.turn.as_ref() else { return };
        let in_flight = self.sequencer.pending().filter_map(|p| p.history.clone());
        let view = SessionView {
            registry: &self.deps.registry,
            state: &self.state,
            session_id: &self.session_id,
            tenant_id: &self.meta.tenant_id,
        };
        let budget = self.deps.limits.history_tokens;
        let whole = self.deps.model.reads_conversation;
        let request = self.prompter.turn_request(
            &view, &t.turn, &t.acting, in_flight, correction, budget, kind, whole,
        );
        self.ask_model(request);
    }

    /// Starts a model call for the running turn.
    fn ask_model(&mut self, mut request: ModelRequest) {
        self.model_calls += 1;
        let tag = self.model_calls;
        if let Some(t) = self.turn.as_mut() {
            let span = telemetry::model_call_span(&t.span, request.kind);
            t.model_called(tag, Instant::now(), span);
            request.fallback = t.turn.fell_back();
        }
        self.out.push_back(Command::AskModel(tag, request));
    }

    /// Feeds the events of the model call `tag` that are there already (a
    /// model that answers at once is read to its end in this same step, so
    /// a whole turn's frames reach the journal together); answers whether
    /// the call is still awaited, its rest to stream.
    pub(in crate::session) fn read_ready(&mut self, tag: u64, events: &mut Events) -> bool {
        while self.awaits(tag) {
            match model::ready(events) {
                Some(event) => self.model_event(tag, event),
                // Not ready after all: the rest streams as usual.
                None => break,
            }
        }
        self.awaits(tag)
    }

    /// Whether the model call tagged `tag` is still awaited.
    pub(in crate::session) fn awaits(&self, tag: u64) -> bool {
        self.turn.as_ref().is_some_and(|t| t.awaits(tag))
    }

    /// The model call tagged `tag` streams through `stream`.
    pub(in crate::session) fn model_streaming(&mut self, tag: u64, stream: SpawnHandle) {
        if let Some(t) = self.turn.as_mut() {
            t.streaming(tag, stream);
        }
    }

    /// One event of the model call tagged `tag` (`None` when its stream
    /// ended); one no longer awaited is dropped.
    pub(in crate::session) fn model_event(
        &mut self,
        tag: u64,
        event: Option<Result<ModelEvent, LlmError>>,
    ) {
        if !self.awaits(tag) {
            return;
        }
        if let Some(event @ (Ok(ModelEvent::Done(_)) | Err(_))) = &event {
            self.model_call_ended(event);
        }
        let Some(t) = self.turn.as_mut() else { return };
        let step = match event {
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
                tracing::warn!(session_id = %self.session_id, %turn_id, %trace_id, error = %e, "model call failed");
                t.turn.on_model_error(&e)
            }
            None => t.turn.on_stream_end(),
        };
        self.execute(step);
    }

    /// Records a model call's time and tokens.
    fn model_call_ended(&mut self, event: &Result<ModelEvent, LlmError>) {
        if let Some(span) = self.turn.as_ref().and_then(|t| t.model_span()) {
            match event {
                Ok(ModelEvent::Done(reply)) => {
                    let usage = &reply.usage;
                    telemetry::model_answered(span, usage.prompt_tokens, usage.completion_tokens);
                }
                Ok(_) => {}
                Err(e) => telemetry::model_failed(span, e.code()),
            }
        }
        let metrics = &self.deps.metrics;
        let answered = self.turn.as_mut().map(|t| t.model_answered(Instant::now()));
        if let Some(waited) = answered.flatten() {
            metrics.model_call_seconds.observe_duration(waited);
        }
        if let Ok(ModelEvent::Done(reply)) = event {
            metrics.model_prompt_tokens.add(reply.usage.prompt_tokens);
            let completion = reply.usage.completion_tokens;
            metrics.model_completion_tokens.add(completion);
            let (session, tenant) = (self.session_id.as_str(), self.meta.tenant_id.as_str());
            self.deps.budgets.spend(Some(session), tenant, reply.usage);
        }
    }

    /// Runs a tool call the model asked for, unless a real model writes
    /// its text first: the content some tools ask for (`generate_zone`'s
    /// names and descriptions, [`calls::content_request`]) is asked for
    /// here, and the call runs when the turn has the answer
    /// ([`Step::RunWithContent`]).
    fn run_model_call(&mut self, call_id: CallId, tool: String, arguments: String) {
        let Some(turn_id) = self.turn.as_ref().map(|t| t.turn.turn_id().clone()) else {
            return;
        };
        let ask = self
            .deps
            .model
            .writes_content
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
            self.ask_model(prompt::content_request(&turn_id, ask.system, ask.user));
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
            let call = Call::of_turn(&t.turn, &t.acting, call_id, tool, raw, refused);
            if self.ask_approval(&call) {
                return;
            }
            self.run_turn_call_now(call, true);
        }
    }

    /// Runs a call of the running turn that was decided on (its
    /// `tool_call` frame is journalled already).
    pub(super) fn run_decided_call(&mut self, call: Call) {
        self.run_turn_call_now(call, false);
    }

    /// Runs `call` of the running turn, journalling its `tool_call` frame
    /// first when `frame_call`; the turn's model hears what it gave.
    fn run_turn_call_now(&mut self, call: Call, frame_call: bool) {
        let (_, answer) = self.run_call_framed(call, frame_call);
        // The turn's model hears what the call gave: a model in this
        // process reads the value instead of parsing its text again.
        if let Some(t) = self.turn.as_mut() {
            t.turn.keep_result(match answer.outcome {
                Ok(result) => result.value,
                Err(e) => e.to_model_json(),
            });
        }
    }

    /// Runs one tool call ([`calls::run`]) and journals what it gave; a
    /// model turn's call also goes into the turn's events. Answers the seq
    /// of its `tool_result` frame and what its caller hears.
    fn run_call(&mut self, call: Call) -> (u64, Answer) {
        self.run_call_framed(call, true)
    }

    /// [`Core::run_call`], journalling the `tool_call` frame only when
    /// `frame_call` (a decided call's was journalled with its request).
    fn run_call_framed(&mut self, call: Call, frame_call: bool) -> (u64, Answer) {
        let in_turn = call.in_turn;
        // Only a turn's calls have a span: a direct call has no turn.
        let span = match self.turn.as_ref() {
            Some(t) if in_turn => telemetry::tool_call_span(&t.span, &call.tool, &call.call_id),
            _ => tracing::Span::none(),
        };
        let view = SessionView {
            registry: &self.deps.registry,
            state: &self.state,
            session_id: &self.session_id,
            tenant_id: &self.meta.tenant_id,
        };
        let ran = calls::run(&view, &mut self.rng, call);
        let failed = ran.answer.outcome.as_ref().err().map(|e| e.code);
        telemetry::tool_call_ended(&span, failed);
        drop(span);
        let seconds = ran.duration_ms / 1000.0;
        self.deps.metrics.tool_seconds.observe(seconds);
        if frame_call {
            self.emit(ran.call);
        }
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
    fn end_turn(&mut self) -> Option<Turn> {
        self.close_awaiting();
        let ended = self.turn.take()?.end(Instant::now());
        self.out.push_back(Command::Cancel(ended.to_cancel));
        let metrics = &self.deps.metrics;
        metrics.turn_ended(ended.elapsed, ended.model_time);
        Some(ended.turn)
    }

    /// Ends the running turn with `turn_failed`; the session stays usable.
    pub(super) fn fail_turn(&mut self, code: ErrorCode, message: String, limit: Option<TurnLimit>) {
        if let Some(t) = self.turn.as_ref() {
            telemetry::turn_ended(&t.span, Some(code));
        }
        let Some(turn) = self.end_turn() else {
            return;
        };
        self.deps.metrics.turn_failed(&code.as_str());
        let turn_id = turn.turn_id();
        tracing::info!(session_id = %self.session_id, %turn_id, code = ?code, %message, "turn failed");
        self.emit(turn_frames::failed(turn_id, code, message, limit));
        self.turn_ended();
    }

    /// A turn's last frame is journalled: the next work may start.
    fn turn_ended(&mut self) {
        self.touch();
        let stats = &self.deps.stats;
        stats.turns.store(self.state.turn, Ordering::Relaxed);
        self.advance();
    }
}
