//! The turn state machine: what a running turn does next, decided from what
//! the model said and which limits tripped.
//!
//! It sits inside the session's core (`core.rs`), which holds one [`Turn`]
//! per running turn (in `running.rs`): the core feeds it the model's deltas, answers and errors,
//! the deadline, and asks it to [`Turn::resume`] once the state has caught
//! up with the effects in flight; each input answers a [`Step`] that the
//! core carries out (journal frames, start a model stream, run a tool
//! through the pipeline). The turn does no IO and knows nothing of actix,
//! timers or the journal, so its rules are tested here from tables.
//!
//! Invariants (the guard rules among them, shared with `POST /api/chat`,
//! are [`crate::llm::guard`]'s):
//! - a turn makes at most `max_iterations` model calls (corrective
//!   retries aside, below): the first `max_iterations - 1` may ask for
//!   tools, and the last is the wrap-up; so is the call after an answer
//!   that repeats a call [`REPEAT_LIMIT`] times in a row. In the wrap-up
//!   no more tools run, and that one last model call narrates;
//! - in the wrap-up, an answer's tool calls are ignored; an answer with no
//!   text (none streamed either) or a failed call fails the turn with
//!   `MAX_ITERATIONS` and the limit;
//! - any other answer without tool calls keeps the reply contract's rules
//!   ([`contract::check_narration`], the same check as the JSON mode's):
//!   its text (or what it streamed) is not empty, and it claims no move
//!   unless a `move`/`move_to_zone` call of this turn succeeded. One that
//!   breaks them is sent back once ([`Step::Correct`]: the answer and
//!   [`contract::native_corrective_message`]), a call that is not one of
//!   the turn's `max_iterations` (as the JSON mode's retry, made inside
//!   one model call); if the answer to that breaks them too, the turn
//!   fails with `INVALID_AI_JSON`, as a JSON-mode answer that breaks the
//!   contract twice does;
//! - tool calls of one answer run one at a time, in order, at most
//!   [`MAX_CALLS_PER_ANSWER`] of them; the model is asked again after the
//!   last;
//! - every call id of a turn is unique and at most [`MAX_TOOL_NAME_CHARS`]
//!   characters: a model's own id is kept when it is both, else replaced by
//!   `{turn_id}_call_{n}`; tool names are cut to that length;
//! - the narrative of one answer, streamed or whole, is at most
//!   [`MAX_NARRATIVE_BYTES`], cut at a character boundary;
//! - a tool call waiting for a model to write its text ([`ContentCall`]) is
//!   run by whatever that model call ends with: its text, or the error of a
//!   failed or ended stream, which refuses the call and not the turn; what
//!   it streams is not narrative, and its tokens count for the turn but not
//!   for the step whose call it is.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::error::{ErrorCode, Reason, ToolStatus};
use crate::game::Effect;
use crate::ids::{AreaId, CallId, CharacterId, TraceId, TurnId};
use crate::llm::contract::{self, TurnFacts};
use crate::llm::guard::{self, CallRun, Narration, REPEAT_LIMIT};
use crate::llm::{LlmError, ModelReply, ModelToolCall, RequestKind, Usage};
use crate::protocol::{ToolEvent, TurnLimit};
use crate::tools::{ToolError, cut_name};

/// Tool calls of one model answer that are run; the model is asked again
/// after them, and calls past this many in one answer are not run.
pub const MAX_CALLS_PER_ANSWER: usize = 16;
/// Most narrative text of one model answer, in bytes; a model's text past
/// it is cut (it would be repeated in `turn_completed`, the journal and
/// history). A turn makes at most `QUESTD_MAX_ITERATIONS` answers.
pub const MAX_NARRATIVE_BYTES: usize = 32 * 1024;
/// Longest tool name or call id from a model that is repeated in frames:
/// the one bound of names a caller or model sends ([`cut_name`]).
pub const MAX_TOOL_NAME_CHARS: usize = crate::tools::MAX_NAME_CHARS;

/// What the turn does once the state has caught up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Next {
    CallModel,
    NextCall,
}

/// Where the turn is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Phase {
    /// Waiting until no tool effect is in flight, then `next`: tools and the
    /// model must see the state their earlier calls produced.
    Waiting { next: Next },
    /// A model call is streaming.
    AwaitModel,
    /// A call waits for a person's decision (docs/protocol.md §19):
    /// nothing runs until [`Turn::approval_decided`].
    AwaitApproval,
}

/// What the actor must do next for the turn.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Step {
    /// Start a model call of this kind.
    CallModel(RequestKind),
    /// The answer broke the reply contract: ask for the next step again,
    /// with the answer (`answer`, as the model's) and `message` (as the
    /// player's) after the history; neither is kept in it.
    Correct { answer: String, message: String },
    /// A loop limit tripped: log it and start the closing model call
    /// ([`RequestKind::WrapUp`]); no more tools run this turn.
    WrapUp { limit: TurnLimit, message: String },
    /// Run this tool call (its arguments are the model's raw text), then
    /// [`Turn::resume`] once its effect is applied; unless a model must
    /// write its text first ([`Turn::await_content`]).
    RunCall {
        call_id: CallId,
        tool: String,
        arguments: String,
    },
    /// Run the call that waited for its text with the text written, or
    /// refuse it with why there is none; then [`Turn::resume`].
    RunWithContent {
        call: ContentCall,
        text: Result<String, ToolError>,
    },
    /// The answer's calls are queued: [`Turn::resume`] once the state has
    /// caught up. `asked` is how many the model asked for (only the first
    /// [`MAX_CALLS_PER_ANSWER`] run).
    RunCalls { asked: usize },
    /// End the turn with `turn_completed`; first journal `emit_narrative`
    /// as a narrative delta when it is set (nothing was streamed).
    Complete {
        reply: String,
        dialog_type: String,
        emit_narrative: Option<String>,
        limit: Option<TurnLimit>,
    },
    /// End the turn with `turn_failed`.
    Fail {
        code: ErrorCode,
        message: String,
        limit: Option<TurnLimit>,
    },
}

/// A tool call of the turn waiting for a model to write its text
/// ([`crate::tools::Tool::content_request`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ContentCall {
    pub(super) call_id: CallId,
    pub(super) tool: String,
    /// The call's arguments, parsed; the text goes into them.
    pub(super) args: Value,
}

/// The bookkeeping of one running turn.
#[derive(Debug)]
pub(super) struct Turn {
    turn_id: TurnId,
    turn_no: u64,
    /// Ties the turn's audit rows and log events together.
    trace_id: TraceId,
    max_iterations: u32,
    phase: Phase,
    iteration: u32,
    /// Tokens of the model call whose tool calls are running now.
    step_usage: Usage,
    usage: Usage,
    /// Narrative streamed during the current model call.
    streamed: String,
    pending_calls: VecDeque<ModelToolCall>,
    call_ids: BTreeSet<CallId>,
    /// The run of the same call the turn is in.
    repeats: CallRun,
    tool_events: Vec<ToolEvent>,
    /// What the turn's calls gave, as values, in the order they ran (see
    /// [`crate::llm::ModelRequest::results`]).
    results: Vec<Arc<Value>>,
    touched_areas: BTreeSet<AreaId>,
    touched_characters: BTreeSet<CharacterId>,
    touched_zones: BTreeSet<String>,
    /// Set once a loop limit tripped: the model call in flight is the
    /// closing narration, and this is what ends the turn if it fails.
    wrap_up: Option<(TurnLimit, String)>,
    /// Set while the model call in flight writes this call's text, not the
    /// turn's next step.
    content: Option<ContentCall>,
    /// Set while the model call in flight is the corrective retry of an
    /// answer that broke the reply contract.
    correcting: bool,
    /// The model that answered last ([`ModelReply::model`]).
    model: Option<Arc<str>>,
    /// Set once the fallback model answered: it answers the rest.
    fell_back: bool,
}

impl Turn {
    /// A turn that will call the model first.
    pub(super) fn new(
        turn_id: TurnId,
        turn_no: u64,
        trace_id: TraceId,
        max_iterations: u32,
    ) -> Self {
        Self {
            turn_id,
            turn_no,
            trace_id,
            max_iterations,
            phase: Phase::Waiting {
                next: Next::CallModel,
            },
            iteration: 0,
            step_usage: Usage::default(),
            usage: Usage::default(),
            streamed: String::new(),
            pending_calls: VecDeque::new(),
            call_ids: BTreeSet::new(),
            repeats: CallRun::default(),
            tool_events: Vec::new(),
            results: Vec::new(),
            touched_areas: BTreeSet::new(),
            touched_characters: BTreeSet::new(),
            touched_zones: BTreeSet::new(),
            wrap_up: None,
            content: None,
            correcting: false,
            model: None,
            fell_back: false,
        }
    }

    /// A turn brought back paused at an approval after a restart: `iteration`
    /// model calls made, `call_ids` used. What it had streamed, its
    /// tokens and the calls of that answer not yet run are not in the
    /// journal: the model is asked again once the paused call is done.
    pub(super) fn restored(
        turn_id: TurnId,
        turn_no: u64,
        max_iterations: u32,
        iteration: u32,
        call_ids: BTreeSet<CallId>,
    ) -> Self {
        let mut turn = Self::new(turn_id, turn_no, TraceId::fresh(), max_iterations);
        turn.iteration = iteration;
        turn.call_ids = call_ids;
        turn.phase = Phase::AwaitApproval;
        turn
    }

    /// The call just asked for waits for a person's decision.
    pub(super) fn await_approval(&mut self) {
        self.phase = Phase::AwaitApproval;
    }

    /// The paused call was decided: it runs (or is refused) next, then the
    /// turn goes on as after any call.
    pub(super) fn approval_decided(&mut self) {
        if self.phase == Phase::AwaitApproval {
            self.phase = Phase::Waiting {
                next: Next::NextCall,
            };
        }
    }

    pub(super) fn turn_id(&self) -> &TurnId {
        &self.turn_id
    }

    pub(super) fn turn_no(&self) -> u64 {
        self.turn_no
    }

    pub(super) fn trace_id(&self) -> &TraceId {
        &self.trace_id
    }

    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// Model calls made for the turn's steps (the wrap-up counts one).
    pub(super) fn iteration(&self) -> u32 {
        self.iteration
    }

    /// Tokens of the model call whose tool calls are running now.
    pub(super) fn step_usage(&self) -> Usage {
        self.step_usage
    }

    /// Tokens of every model call of the turn.
    pub(super) fn usage(&self) -> Usage {
        self.usage
    }

    /// The model that answered last, if one did.
    pub(super) fn model(&self) -> Option<&Arc<str>> {
        self.model.as_ref()
    }

    /// Whether the turn's calls go to the fallback model (one did).
    pub(super) fn fell_back(&self) -> bool {
        self.fell_back
    }

    /// The limit that started the wrap-up, if one did.
    fn limit(&self) -> Option<TurnLimit> {
        self.wrap_up.as_ref().map(|(limit, _)| *limit)
    }

    pub(super) fn touched_areas(&self) -> &BTreeSet<AreaId> {
        &self.touched_areas
    }

    pub(super) fn touched_characters(&self) -> &BTreeSet<CharacterId> {
        &self.touched_characters
    }

    pub(super) fn touched_zones(&self) -> &BTreeSet<String> {
        &self.touched_zones
    }

    /// The events of the calls run, in order; ends the turn's bookkeeping.
    pub(super) fn into_tool_events(self) -> Vec<ToolEvent> {
        self.tool_events
    }

    /// A model call started (for the turn's next step, or for a tool's
    /// text): its events are awaited, and nothing of it has streamed yet.
    pub(super) fn model_called(&mut self) {
        self.streamed.clear();
        self.phase = Phase::AwaitModel;
    }

    /// A tool call ran: the next one waits for its effect.
    pub(super) fn call_ran(&mut self, event: ToolEvent, effect: Option<&Effect>) {
        touch(self, effect);
        self.tool_events.push(event);
        self.phase = Phase::Waiting {
            next: Next::NextCall,
        };
    }

    /// What a call of the turn gave the model, as the value whose text its
    /// history entry holds: its result, or the error it was refused with.
    pub(super) fn keep_result(&mut self, value: Value) {
        self.results.push(Arc::new(value));
    }

    /// What the turn's calls gave, in the order they ran.
    pub(super) fn results(&self) -> Vec<Arc<Value>> {
        self.results.clone()
    }

    /// The call [`Step::RunCall`] asked for waits for a model to write its
    /// text: the model call made next is for it, and its end is answered
    /// with [`Step::RunWithContent`].
    pub(super) fn await_content(&mut self, call: ContentCall) {
        self.content = Some(call);
    }

    /// The state has caught up: call the model or run the next tool call
    /// (nothing while a model call is awaited).
    pub(super) fn resume(&mut self) -> Option<Step> {
        match self.phase {
            Phase::Waiting {
                next: Next::CallModel,
            } => Some(self.call_model()),
            Phase::Waiting {
                next: Next::NextCall,
            } => Some(self.next_call()),
            Phase::AwaitModel | Phase::AwaitApproval => None,
        }
    }

    /// The next model call, or the wrap-up once the iterations are spent.
    fn call_model(&mut self) -> Step {
        let max = self.max_iterations;
        // Every model call of the turn so far asked for tools: one that did
        // not ended it.
        if guard::rounds_spent(self.iteration as usize, max) {
            let msg = guard::rounds_spent_message(max);
            return self.wrap_up(TurnLimit::MaxIterations, msg);
        }
        self.iteration += 1;
        Step::CallModel(RequestKind::Step)
    }

    /// A loop limit tripped: no more tools run this turn.
    fn wrap_up(&mut self, limit: TurnLimit, message: String) -> Step {
        self.pending_calls.clear();
        self.iteration += 1;
        self.wrap_up = Some((limit, message.clone()));
        Step::WrapUp { limit, message }
    }

    /// The next tool call the model asked for (with a unique, bounded id),
    /// the wrap-up if it repeats, or the model again after the last.
    fn next_call(&mut self) -> Step {
        let Some(mut call) = self.pending_calls.pop_front() else {
            return self.call_model();
        };
        let mut call_id = call.id;
        let mut n = self.call_ids.len();
        // A model's own call id is kept when it is short and new; a tool
        // name is cut (an unknown one is refused anyway).
        if call_id.as_str().chars().count() > MAX_TOOL_NAME_CHARS {
            call_id = CallId::from("");
        }
        let cut = cut_name(&call.name).len();
        call.name.truncate(cut);
        while call_id.as_str().is_empty() || self.call_ids.contains(&call_id) {
            n += 1;
            call_id = CallId::from(format!("{}_call_{n}", self.turn_id));
        }
        self.call_ids.insert(call_id.clone());
        if self.repeats.repeats(&call.name, &call.arguments) {
            let msg = format!(
                "the model asked for {} with the same arguments {REPEAT_LIMIT} times in a row",
                call.name
            );
            return self.wrap_up(TurnLimit::RepeatedCall, msg);
        }
        self.phase = Phase::Waiting {
            next: Next::NextCall,
        };
        Step::RunCall {
            call_id,
            tool: call.name,
            arguments: call.arguments,
        }
    }

    /// Narrative streamed by the model: what of it to journal, if anything
    /// (a model that talks without end is cut, not streamed on).
    pub(super) fn on_delta(&mut self, mut text: String) -> Option<String> {
        // Text written for a tool is not narrative: nothing streams out.
        if self.content.is_some() {
            return None;
        }
        clip(
            &mut text,
            MAX_NARRATIVE_BYTES.saturating_sub(self.streamed.len()),
        );
        if text.is_empty() {
            return None;
        }
        self.streamed.push_str(&text);
        Some(text)
    }

    /// The model's whole answer to a step (or the wrap-up, or a call's text).
    pub(super) fn on_model_done(&mut self, mut reply: ModelReply) -> Step {
        self.fell_back |= reply.fell_back;
        if let Some(model) = reply.model.take() {
            self.model = Some(model);
        }
        if let Some(call) = self.content.take() {
            self.usage += reply.usage;
            return self.run_with_content(call, Ok(reply.text));
        }
        clip(&mut reply.text, MAX_NARRATIVE_BYTES);
        self.usage += reply.usage;
        self.step_usage = reply.usage;
        if let Some((limit, message)) = &self.wrap_up {
            let text = if reply.text.is_empty() {
                &self.streamed
            } else {
                &reply.text
            };
            if text.trim().is_empty() {
                return Step::Fail {
                    code: ErrorCode::MaxIterations,
                    message: format!("{message}, and the closing narration was empty"),
                    limit: Some(*limit),
                };
            }
        }
        let correcting = std::mem::take(&mut self.correcting);
        if reply.tool_calls.is_empty() || self.wrap_up.is_some() {
            let text = if reply.text.is_empty() {
                self.streamed.clone()
            } else {
                reply.text
            };
            if self.wrap_up.is_none() {
                match guard::narration(&text, self.facts(), correcting) {
                    Narration::Accept => {}
                    Narration::GiveUp(problem) => {
                        return Step::Fail {
                            code: ErrorCode::InvalidAiJson,
                            message: format!("the model broke the reply contract twice: {problem}"),
                            limit: None,
                        };
                    }
                    Narration::SendBack(problem) => {
                        self.correcting = true;
                        return Step::Correct {
                            answer: text,
                            message: contract::native_corrective_message(&problem),
                        };
                    }
                }
            }
            let streamed = std::mem::take(&mut self.streamed);
            return Step::Complete {
                emit_narrative: (streamed.is_empty() && !text.is_empty()).then(|| text.clone()),
                reply: text,
                dialog_type: reply.dialog_type.unwrap_or_else(|| "narration".into()),
                limit: self.limit(),
            };
        }
        let mut calls = reply.tool_calls;
        let asked = calls.len();
        calls.truncate(MAX_CALLS_PER_ANSWER);
        self.pending_calls = calls.into();
        self.phase = Phase::Waiting {
            next: Next::NextCall,
        };
        Step::RunCalls { asked }
    }

    /// What the reply contract's check must know: whether a move tool
    /// succeeded in this turn.
    fn facts(&self) -> TurnFacts {
        TurnFacts {
            moved: self
                .tool_events
                .iter()
                .any(|e| e.status == ToolStatus::Ok && contract::is_move_tool(&e.tool)),
            wrap_up: false,
        }
    }

    /// The model call for a step (or the wrap-up, or a call's text) failed.
    pub(super) fn on_model_error(&mut self, e: &LlmError) -> Step {
        if let Some(call) = self.content.take() {
            let reason = match e {
                LlmError::Timeout => Reason::Timeout,
                _ => Reason::ExecutionFailed,
            };
            let error = ToolError::new(reason, e.code(), e.public_message());
            return self.run_with_content(call, Err(error));
        }
        match &self.wrap_up {
            Some((limit, message)) => Step::Fail {
                code: ErrorCode::MaxIterations,
                message: format!(
                    "{message}, and the closing narration failed: {}",
                    e.public_message()
                ),
                limit: Some(*limit),
            },
            None => Step::Fail {
                code: e.code(),
                message: e.public_message().to_owned(),
                limit: None,
            },
        }
    }

    /// The model's stream ended without an answer.
    pub(super) fn on_stream_end(&mut self) -> Step {
        const NO_ANSWER: &str = "the model stream ended without an answer";
        if let Some(call) = self.content.take() {
            let error =
                ToolError::new(Reason::ExecutionFailed, ErrorCode::UpstreamError, NO_ANSWER);
            return self.run_with_content(call, Err(error));
        }
        Step::Fail {
            code: ErrorCode::UpstreamError,
            message: NO_ANSWER.into(),
            limit: None,
        }
    }

    /// The model call writing `call`'s text ended: the call runs next.
    fn run_with_content(&mut self, call: ContentCall, text: Result<String, ToolError>) -> Step {
        self.phase = Phase::Waiting {
            next: Next::NextCall,
        };
        Step::RunWithContent { call, text }
    }

    /// The turn ran out of time.
    pub(super) fn on_deadline(&self, deadline: Duration) -> Step {
        Step::Fail {
            code: ErrorCode::AiTimeout,
            message: format!("the turn took longer than {} s", deadline.as_secs()),
            limit: Some(TurnLimit::Deadline),
        }
    }
}

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn clip(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// Notes which areas, characters and zones an effect touched, for the
/// state patch.
fn touch(t: &mut Turn, effect: Option<&Effect>) {
    match effect {
        Some(Effect::Move {
            character_id,
            to_area_id,
        }) => {
            t.touched_characters.insert(character_id.clone());
            t.touched_areas.insert(to_area_id.clone());
        }
        Some(Effect::Hp { character_id, .. }) => {
            t.touched_characters.insert(character_id.clone());
        }
        Some(Effect::AddAreas { areas, links }) => {
            t.touched_areas
                .extend(areas.iter().map(|a| a.area_id.clone()));
            for (a, b) in links {
                t.touched_areas.insert(a.clone());
                t.touched_areas.insert(b.clone());
            }
        }
        Some(Effect::SetInventory { character_id, .. }) => {
            t.touched_characters.insert(character_id.clone());
        }
        Some(Effect::SetCharacter { character }) => {
            t.touched_characters.insert(character.character_id.clone());
        }
        Some(Effect::AddZones { zones }) => {
            t.touched_zones
                .extend(zones.iter().map(|z| z.zone_id.clone()));
        }
        Some(
            Effect::BeginTurn { .. }
            | Effect::MoveToZone { .. }
            | Effect::AddContent { .. }
            | Effect::LogEvent { .. }
            | Effect::PutNpc { .. }
            | Effect::BeginRound { .. }
            | Effect::InviteCreated { .. }
            | Effect::SeatJoined { .. }
            | Effect::SeatChanged { .. }
            | Effect::ModeChanged { .. }
            | Effect::ActionSubmitted { .. }
            | Effect::TimerScheduled { .. }
            | Effect::TimerCancelled { .. }
            | Effect::FireTimer { .. }
            | Effect::ApprovalRequested { .. }
            | Effect::ApprovalResolved { .. },
        )
        | None => {}
    }
}

/// What the turn's tests and its neighbours' build turns from.
#[cfg(test)]
pub(super) mod test_support {
    use crate::error::ToolStatus;
    use crate::llm::ModelToolCall;
    use crate::protocol::ToolEvent;

    /// A tool call as a model asks for it.
    pub(in crate::session) fn call(id: &str, name: &str, arguments: &str) -> ModelToolCall {
        ModelToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The event of a call that succeeded.
    pub(in crate::session) fn event(call_id: &str, tool: &str) -> ToolEvent {
        ToolEvent {
            call_id: call_id.into(),
            tool: tool.into(),
            status: ToolStatus::Ok,
            reason: None,
            error_code: None,
            duration_ms: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{call, event};
    use super::*;
    use crate::game::state::{AreaId, CharacterId};

    const MAX_ITERATIONS: u32 = 4;

    fn turn(max_iterations: u32) -> Turn {
        Turn::new("t1".into(), 1, "tr_1".into(), max_iterations)
    }

    /// `n` calls of `roll`, each with other arguments (none repeats).
    fn calls(n: usize) -> Vec<ModelToolCall> {
        (0..n)
            .map(|i| call("", "roll", &format!(r#"{{"n":{i}}}"#)))
            .collect()
    }

    fn reply(text: &str, tool_calls: Vec<ModelToolCall>) -> ModelReply {
        ModelReply {
            text: text.into(),
            tool_calls,
            dialog_type: None,
            usage: Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
            },
            ..ModelReply::default()
        }
    }

    /// Resumes the turn as the actor does: each call it asks for runs (with
    /// no effect) and the next is asked for, until it asks for anything
    /// else. Answers the (call id, tool) of the calls run and that step.
    fn drain(t: &mut Turn) -> (Vec<(String, String)>, Step) {
        let mut ran = Vec::new();
        loop {
            match t.resume().expect("the turn waits for the state") {
                Step::RunCall { call_id, tool, .. } => {
                    t.call_ran(event(call_id.as_str(), &tool), None);
                    ran.push((call_id.to_string(), tool));
                }
                step => {
                    if matches!(step, Step::CallModel(_) | Step::WrapUp { .. }) {
                        t.model_called();
                    }
                    return (ran, step);
                }
            }
        }
    }

    /// A turn whose first model call is in flight.
    fn asked() -> Turn {
        let mut t = turn(MAX_ITERATIONS);
        assert_eq!(drain(&mut t).1, Step::CallModel(RequestKind::Step));
        t
    }

    fn complete(reply: &str, emit: Option<&str>, limit: Option<TurnLimit>) -> Step {
        Step::Complete {
            reply: reply.into(),
            dialog_type: "narration".into(),
            emit_narrative: emit.map(str::to_owned),
            limit,
        }
    }

    /// The corrective step for `text` breaking the contract with `problem`.
    fn correct(text: &str, problem: contract::ContractError) -> Step {
        Step::Correct {
            answer: text.into(),
            message: contract::native_corrective_message(&problem),
        }
    }

    #[test]
    fn a_silent_answer_is_sent_back_once_and_the_good_one_completes() {
        for (deltas, text) in [(&[][..], ""), (&[][..], "  \n"), (&[" "][..], "")] {
            let mut t = asked();
            for d in deltas {
                t.on_delta((*d).into());
            }
            let step = t.on_model_done(reply(text, vec![]));
            let silent = if deltas.is_empty() { text } else { " " };
            assert_eq!(
                step,
                correct(silent, contract::ContractError::EmptyNarration),
                "{deltas:?} {text:?}"
            );
            t.model_called();
            let good = "The hall is quiet.";
            assert_eq!(
                t.on_model_done(reply(good, vec![])),
                complete(good, Some(good), None)
            );
            assert_eq!(t.iteration(), 1, "the retry is not one of the iterations");
            assert_eq!(t.usage().prompt_tokens, 20, "both answers' tokens count");
        }
    }

    #[test]
    fn a_claimed_move_needs_a_move_that_succeeded_in_the_turn() {
        let claim = "You enter the side room.";
        let problem = || contract::ContractError::ClaimedMove {
            phrase: "you enter".into(),
        };
        // No move at all: sent back, and a second claim fails the turn.
        let mut t = asked();
        assert_eq!(
            t.on_model_done(reply(claim, vec![])),
            correct(claim, problem())
        );
        t.model_called();
        assert_eq!(
            t.on_model_done(reply(claim, vec![])),
            Step::Fail {
                code: ErrorCode::InvalidAiJson,
                message: format!("the model broke the reply contract twice: {}", problem()),
                limit: None,
            }
        );
        // A move that failed, or another tool that succeeded, is no move.
        for (tool, status) in [
            ("move", ToolStatus::Error),
            ("move_options", ToolStatus::Ok),
        ] {
            let mut t = asked();
            t.on_model_done(reply("", vec![call("c1", tool, "{}")]));
            let (_, step) = {
                let Some(Step::RunCall { call_id, tool, .. }) = t.resume() else {
                    panic!("the call runs")
                };
                t.call_ran(
                    ToolEvent {
                        status,
                        ..event(call_id.as_str(), &tool)
                    },
                    None,
                );
                drain(&mut t)
            };
            assert_eq!(step, Step::CallModel(RequestKind::Step));
            assert_eq!(
                t.on_model_done(reply(claim, vec![])),
                correct(claim, problem()),
                "{tool}"
            );
        }
        // A move that succeeded this turn: the claim is true.
        for tool in ["move", "move_to_zone"] {
            let mut t = asked();
            t.on_model_done(reply("", vec![call("c1", tool, "{}")]));
            assert_eq!(drain(&mut t).1, Step::CallModel(RequestKind::Step));
            assert_eq!(
                t.on_model_done(reply(claim, vec![])),
                complete(claim, Some(claim), None)
            );
        }
    }

    #[test]
    fn a_corrected_answer_may_call_tools_and_a_later_answer_gets_its_own_retry() {
        let mut t = asked();
        assert!(matches!(
            t.on_model_done(reply("", vec![])),
            Step::Correct { .. }
        ));
        t.model_called();
        assert_eq!(
            t.on_model_done(reply("", calls(1))),
            Step::RunCalls { asked: 1 }
        );
        assert_eq!(drain(&mut t).1, Step::CallModel(RequestKind::Step));
        assert!(matches!(
            t.on_model_done(reply("", vec![])),
            Step::Correct { .. }
        ));
        assert_eq!(t.iteration(), 2);
    }

    #[test]
    fn the_wrap_up_is_not_sent_back() {
        let mut t = wrapping_up();
        let claim = "You arrive at the end of the night.";
        assert_eq!(
            t.on_model_done(reply(claim, vec![])),
            complete(claim, Some(claim), Some(TurnLimit::MaxIterations))
        );
    }

    #[test]
    fn an_answer_without_calls_completes_the_turn_with_its_text_or_the_streamed_text() {
        // (deltas streamed, the answer's text, what completes the turn)
        let cases: [(&[&str], &str, Step); 3] = [
            (&[], "You stand at the gate.", {
                let text = "You stand at the gate.";
                complete(text, Some(text), None)
            }),
            (&["You ", "stand."], "", complete("You stand.", None, None)),
            (
                &["You stand."],
                "You stand.",
                complete("You stand.", None, None),
            ),
        ];
        for (deltas, text, want) in cases {
            let mut t = asked();
            for d in deltas {
                assert_eq!(t.on_delta((*d).into()).as_deref(), Some(*d));
            }
            assert_eq!(
                t.on_model_done(reply(text, vec![])),
                want,
                "{deltas:?} {text:?}"
            );
            assert_eq!(t.iteration(), 1);
            assert_eq!(t.usage().prompt_tokens, 10);
        }
        let mut t = asked();
        let mut r = reply("A scene.", vec![]);
        r.dialog_type = Some("scene_description".into());
        assert!(matches!(
            t.on_model_done(r),
            Step::Complete { dialog_type, .. } if dialog_type == "scene_description"
        ));
    }

    #[test]
    fn calls_run_one_at_a_time_in_order_and_the_model_is_asked_again_after_the_last() {
        let mut t = asked();
        let answer = vec![
            call("a", "roll", "{}"),
            call("b", "move", "{}"),
            call("c", "look", "{}"),
        ];
        assert_eq!(
            t.on_model_done(reply("", answer)),
            Step::RunCalls { asked: 3 }
        );
        let mut order = Vec::new();
        while let Some(Step::RunCall { call_id, tool, .. }) = t.resume() {
            // The next call waits until this one has run.
            assert_eq!(
                t.phase(),
                Phase::Waiting {
                    next: Next::NextCall
                }
            );
            t.call_ran(event(call_id.as_str(), &tool), None);
            order.push((call_id.to_string(), tool));
        }
        let want = [("a", "roll"), ("b", "move"), ("c", "look")];
        assert_eq!(order, want.map(|(c, n)| (c.to_owned(), n.to_owned())));
        assert_eq!(t.iteration(), 2, "the model was asked again");
        assert_eq!(t.into_tool_events().len(), 3);
    }

    #[test]
    fn at_most_max_calls_per_answer_of_one_answer_run() {
        for (asked_for, run) in [
            (1, 1),
            (MAX_CALLS_PER_ANSWER, MAX_CALLS_PER_ANSWER),
            (MAX_CALLS_PER_ANSWER + 1, MAX_CALLS_PER_ANSWER),
            (100, MAX_CALLS_PER_ANSWER),
        ] {
            let mut t = asked();
            assert_eq!(
                t.on_model_done(reply("", calls(asked_for))),
                Step::RunCalls { asked: asked_for }
            );
            let (ran, next) = drain(&mut t);
            assert_eq!(ran.len(), run, "{asked_for} asked");
            assert_eq!(next, Step::CallModel(RequestKind::Step));
        }
    }

    #[test]
    fn the_same_call_repeat_limit_times_in_a_row_wraps_up() {
        let same = |args: &str| call("", "roll", args);
        // (one answer's calls, how many run before the wrap-up, if one)
        let cases: [(Vec<ModelToolCall>, Option<usize>); 6] = [
            (vec![same("{}"), same("{}"), same("{}")], Some(2)),
            // The same JSON, however spaced or ordered, is the same call.
            (
                vec![
                    same(r#"{"n":1}"#),
                    same(r#"{ "n": 1 }"#),
                    same(r#"{"n":1}"#),
                ],
                Some(2),
            ),
            (
                vec![
                    same(r#"{"n":1,"d":"1d6"}"#),
                    same(r#"{"d":"1d6","n":1}"#),
                    same(r#"{"n":1,"d":"1d6"}"#),
                ],
                Some(2),
            ),
            // Arguments that are not JSON compare as text.
            (vec![same("{oops"), same("{oops"), same("{oops")], Some(2)),
            (
                vec![same("{}"), same("{}"), call("", "look", "{}"), same("{}")],
                None,
            ),
            (vec![same("{}"), same(r#"{"n":1}"#), same("{}")], None),
        ];
        assert_eq!(REPEAT_LIMIT, 3, "the cases are written for 3");
        for (answer, wraps_after) in cases {
            let mut t = asked();
            let n = answer.len();
            t.on_model_done(reply("", answer));
            let (ran, next) = drain(&mut t);
            match wraps_after {
                Some(run) => {
                    assert_eq!(ran.len(), run);
                    let message = format!(
                        "the model asked for roll with the same arguments {REPEAT_LIMIT} times in a row"
                    );
                    let limit = TurnLimit::RepeatedCall;
                    assert_eq!(next, Step::WrapUp { limit, message });
                    assert_eq!(t.limit(), Some(limit));
                    assert_eq!(t.iteration(), 2, "the wrap-up is a model call");
                }
                None => {
                    assert_eq!(ran.len(), n);
                    assert_eq!(next, Step::CallModel(RequestKind::Step));
                }
            }
        }
        // The count runs across answers.
        let mut t = asked();
        t.on_model_done(reply("", vec![same("{}"), same("{}")]));
        drain(&mut t);
        t.on_model_done(reply("", vec![same("{}")]));
        assert!(matches!(drain(&mut t).1, Step::WrapUp { .. }));
    }

    #[test]
    fn the_iteration_limit_wraps_up_with_max_iterations() {
        for max in [1, 2, MAX_ITERATIONS] {
            let mut t = turn(max);
            let mut steps = Vec::new();
            loop {
                let (_, next) = drain(&mut t);
                if next != Step::CallModel(RequestKind::Step) {
                    steps.push(next);
                    break;
                }
                steps.push(next);
                // Each answer asks for another call, so none repeats.
                let args = format!(r#"{{"answer":{}}}"#, steps.len());
                t.on_model_done(reply("", vec![call("", "roll", &args)]));
            }
            // The last of the `max` model calls is the wrap-up.
            assert_eq!(steps.len() as u32, max, "max {max}");
            let message = guard::rounds_spent_message(max);
            let limit = TurnLimit::MaxIterations;
            assert_eq!(steps.last(), Some(&Step::WrapUp { limit, message }));
            assert_eq!(t.iteration(), max);
        }
    }

    /// A turn in its wrap-up (its second model call, of `max_iterations`
    /// = 2), the closing narration in flight.
    fn wrapping_up() -> Turn {
        let mut t = turn(2);
        drain(&mut t);
        t.on_model_done(reply("", calls(1)));
        assert!(matches!(drain(&mut t).1, Step::WrapUp { .. }));
        t
    }

    #[test]
    fn in_the_wrap_up_text_completes_with_the_limit_and_an_empty_answer_fails() {
        let limit = Some(TurnLimit::MaxIterations);
        let empty = Step::Fail {
            code: ErrorCode::MaxIterations,
            message: format!(
                "{}, and the closing narration was empty",
                guard::rounds_spent_message(2)
            ),
            limit,
        };
        // (deltas streamed, the answer's text, its tool calls, the step)
        let cases: [(&[&str], &str, usize, Step); 5] = [
            (
                &[],
                "It ends.",
                0,
                complete("It ends.", Some("It ends."), limit),
            ),
            // Tool calls in the closing answer are ignored.
            (
                &[],
                "It ends.",
                2,
                complete("It ends.", Some("It ends."), limit),
            ),
            (&["It ", "ends."], "", 1, complete("It ends.", None, limit)),
            (&[], "  \n", 0, empty.clone()),
            (&[], "", 3, empty),
        ];
        for (deltas, text, n, want) in cases {
            let mut t = wrapping_up();
            for d in deltas {
                t.on_delta((*d).into());
            }
            assert_eq!(t.on_model_done(reply(text, calls(n))), want, "{text:?}");
        }
    }

    #[test]
    fn a_model_error_fails_with_its_code_and_public_message() {
        let errors = [
            LlmError::Timeout,
            LlmError::Upstream("https://secret.example/ said 500".into()),
            LlmError::InvalidReply("not json".into()),
        ];
        for e in errors {
            let want = Step::Fail {
                code: e.code(),
                message: e.public_message().into(),
                limit: None,
            };
            assert_eq!(asked().on_model_error(&e), want);
            let message = format!(
                "{}, and the closing narration failed: {}",
                guard::rounds_spent_message(2),
                e.public_message()
            );
            let limit = Some(TurnLimit::MaxIterations);
            let code = ErrorCode::MaxIterations;
            let want = Step::Fail {
                code,
                message,
                limit,
            };
            assert_eq!(wrapping_up().on_model_error(&e), want);
        }
    }

    #[test]
    fn the_deadline_and_a_stream_without_an_answer_fail_the_turn() {
        let mut t = asked();
        assert_eq!(
            t.on_deadline(Duration::from_secs(90)),
            Step::Fail {
                code: ErrorCode::AiTimeout,
                message: "the turn took longer than 90 s".into(),
                limit: Some(TurnLimit::Deadline),
            }
        );
        assert_eq!(
            t.on_stream_end(),
            Step::Fail {
                code: ErrorCode::UpstreamError,
                message: "the model stream ended without an answer".into(),
                limit: None,
            }
        );
        assert_eq!(
            asked().resume(),
            None,
            "nothing runs while the model is asked"
        );
    }

    #[test]
    fn a_call_id_that_is_empty_repeated_or_too_long_is_replaced() {
        let long = "x".repeat(MAX_TOOL_NAME_CHARS + 1);
        let longest = "y".repeat(MAX_TOOL_NAME_CHARS);
        // (the model's id, the id the call runs under)
        let cases = [
            ("a", "a"),
            ("a", "t1_call_2"),
            ("", "t1_call_3"),
            (long.as_str(), "t1_call_4"),
            (longest.as_str(), longest.as_str()),
            // A model's id that an earlier replacement took.
            ("t1_call_2", "t1_call_6"),
            ("é", "é"),
        ];
        let mut t = asked();
        let answer = cases
            .iter()
            .enumerate()
            .map(|(i, (id, _))| call(id, "roll", &format!(r#"{{"n":{i}}}"#)))
            .collect();
        t.on_model_done(reply("", answer));
        let (ran, _) = drain(&mut t);
        let ids: Vec<_> = ran.into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, cases.map(|(_, want)| want.to_owned()));

        // A tool name is cut to the same length, at a character.
        let mut t = asked();
        let name = "é".repeat(MAX_TOOL_NAME_CHARS + 5);
        t.on_model_done(reply("", vec![call("a", &name, "{}")]));
        let (ran, _) = drain(&mut t);
        assert_eq!(ran[0].1, "é".repeat(MAX_TOOL_NAME_CHARS));
    }

    #[test]
    fn narrative_is_clipped_at_max_narrative_bytes_at_a_character_boundary() {
        let big = "a".repeat(MAX_NARRATIVE_BYTES + 10);
        let almost = "a".repeat(MAX_NARRATIVE_BYTES - 1);
        // (deltas, what of each is journalled)
        let cases: [(Vec<String>, Vec<Option<String>>); 3] = [
            (
                vec![big.clone(), "more".into()],
                vec![Some("a".repeat(MAX_NARRATIVE_BYTES)), None],
            ),
            (
                vec![almost.clone(), "éa".into()],
                vec![Some(almost.clone()), None],
            ),
            (
                vec![almost.clone(), "aé".into()],
                vec![Some(almost.clone()), Some("a".into())],
            ),
        ];
        for (deltas, want) in cases {
            let mut t = asked();
            let got: Vec<_> = deltas.into_iter().map(|d| t.on_delta(d)).collect();
            assert_eq!(got, want);
        }
        // A whole answer is cut the same way.
        let mut t = asked();
        let text = format!("{almost}é");
        let Step::Complete { reply: got, .. } = t.on_model_done(reply(&text, vec![])) else {
            panic!("the answer completes the turn");
        };
        assert_eq!(got, almost);
    }

    #[test]
    fn the_calls_effects_say_what_the_turn_touched() {
        let mut t = asked();
        let moved = Effect::Move {
            character_id: CharacterId::from("pc_001"),
            to_area_id: AreaId::from("area_002"),
        };
        t.call_ran(event("a", "move"), Some(&moved));
        t.call_ran(event("b", "roll"), None);
        assert_eq!(t.touched_areas().iter().collect::<Vec<_>>(), ["area_002"]);
        assert_eq!(
            t.touched_characters().iter().collect::<Vec<_>>(),
            ["pc_001"]
        );
        assert_eq!(t.into_tool_events().len(), 2);
    }

    /// The model's first answer asked for `generate_zone` and the actor
    /// found that a model must write its text: the turn waits for it.
    fn writing() -> (Turn, ContentCall) {
        let mut t = asked();
        t.on_model_done(reply("", vec![call("z1", "generate_zone", "{}")]));
        let Some(Step::RunCall { call_id, tool, .. }) = t.resume() else {
            panic!("the call is asked for");
        };
        let zone = ContentCall {
            call_id,
            tool,
            args: serde_json::json!({"count": 2}),
        };
        t.await_content(zone.clone());
        t.model_called();
        (t, zone)
    }

    /// How a model call ends, fed to the turn.
    type Ending = Box<dyn Fn(&mut Turn) -> Step>;

    #[test]
    fn a_call_waiting_for_its_text_runs_with_what_the_model_call_ends_with() {
        let no_answer = "the model stream ended without an answer";
        let upstream = LlmError::Upstream("https://secret.example/ said 500".into());
        // (how the model call ends, the text or the call's error)
        let cases: [(&str, Ending, Result<&str, ToolError>); 5] = [
            (
                "an answer",
                Box::new(|t| t.on_model_done(reply("[zones]", vec![]))),
                Ok("[zones]"),
            ),
            (
                "an answer asking for tools",
                Box::new(|t| t.on_model_done(reply("[zones]", calls(2)))),
                Ok("[zones]"),
            ),
            (
                "a timeout",
                Box::new(|t| t.on_model_error(&LlmError::Timeout)),
                Err(ToolError::new(
                    Reason::Timeout,
                    ErrorCode::AiTimeout,
                    LlmError::Timeout.public_message(),
                )),
            ),
            (
                "another failure",
                Box::new(move |t| t.on_model_error(&upstream)),
                Err(ToolError::new(
                    Reason::ExecutionFailed,
                    ErrorCode::UpstreamError,
                    "the model endpoint did not answer",
                )),
            ),
            (
                "a stream without an answer",
                Box::new(|t| t.on_stream_end()),
                Err(ToolError::new(
                    Reason::ExecutionFailed,
                    ErrorCode::UpstreamError,
                    no_answer,
                )),
            ),
        ];
        for (name, end, want) in cases {
            let (mut t, zone) = writing();
            let step_usage = t.step_usage();
            assert_eq!(
                t.on_delta("[zo".into()),
                None,
                "{name}: text is not narrative"
            );
            let want = Step::RunWithContent {
                call: zone,
                text: want.map(str::to_owned),
            };
            assert_eq!(end(&mut t), want, "{name}");
            assert_eq!(t.step_usage(), step_usage, "{name}: the step's tokens stay");
            let spent = if name.starts_with("an answer") { 2 } else { 1 };
            assert_eq!(
                t.usage().prompt_tokens,
                10 * spent,
                "{name}: the turn's tokens"
            );
            assert_eq!(
                t.phase(),
                Phase::Waiting {
                    next: Next::NextCall
                },
                "{name}: the call runs next"
            );
            // The call ran; the turn goes on: the model is asked again.
            t.call_ran(event("z1", "generate_zone"), None);
            assert_eq!(
                t.resume(),
                Some(Step::CallModel(RequestKind::Step)),
                "{name}"
            );
            t.model_called();
            assert_eq!(
                t.on_delta("Dunes.".into()).as_deref(),
                Some("Dunes."),
                "{name}"
            );
        }
    }
}
