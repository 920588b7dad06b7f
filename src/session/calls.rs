//! One tool call of a session, from the caller's arguments to what the
//! session journals: its `tool_call` and `tool_result` frames (with the
//! effect, the model's history entries and the applied action), its audit
//! row, and the result its caller gets.
//!
//! It is apart from the session's core (`core.rs`) because what a call
//! does is decided by the registry's pipeline and the state alone: the core
//! lends the state ([`SessionView`]) and the dice, [`run`] answers everything to
//! journal as a [`Ran`], and the core journals it, writes the audit row and
//! tells the turn. Nothing here does IO or knows actix, so the pipeline as a
//! session runs it (validation, refusals, what the model and the journal
//! are shown) is tested here with a plain [`crate::game::GameState`].
//!
//! The content hook of a tool ([`crate::tools::Tool::content_request`]) is
//! here too: [`content_request`] asks it only for a call the pipeline's
//! checks would pass, and [`with_content`] puts the model's text into the
//! call's arguments.

use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use super::audit::{self, AuditedCall, CallOrigin};
use super::messages::CallTool;
use super::sequencer::Entry;
use super::turn::Turn;
use super::types::SessionView;
use crate::error::{ErrorCode, Reason, ToolStatus};
use crate::game::HistoryEntry;
use crate::game::rng::SplitMix64;
use crate::game::state::CharacterId;
use crate::ids::{CallId, TraceId, TurnId};
use crate::json::Written;
use crate::llm::Usage;
use crate::protocol::{StoryEvent, ToolEvent};
use crate::storage::{AuditRow, StoredAction};
use crate::tools::{
    Caller, Invocation, RawArgs, Role, ToolError, args_over_bound, args_within_bound,
};

/// One tool call to run through the pipeline.
pub(super) struct Call {
    pub(super) turn_id: TurnId,
    pub(super) trace_id: TraceId,
    pub(super) iteration: u32,
    pub(super) call_id: CallId,
    pub(super) tool: String,
    pub(super) raw: RawArgs,
    /// The hash of `raw`'s value when the caller took it already
    /// ([`audit::read_args_hash`]).
    pub(super) args_hash: Option<String>,
    pub(super) role: Role,
    /// Tokens of the model call that asked for it (zero outside turns).
    pub(super) usage: Usage,
    /// The characters the turn acts for ([`Caller::acting`]); empty for
    /// a direct call.
    pub(super) acting: Vec<CharacterId>,
    /// A model turn's call: recorded in the model's history.
    pub(super) in_turn: bool,
    /// Fails the call with this error without running the tool.
    pub(super) refused: Option<ToolError>,
    /// Who called from outside, for the audit ledger.
    pub(super) origin: CallOrigin,
}

impl Call {
    /// The game master's call `call_id` of `tool` in `turn`'s current step;
    /// `refused` fails it without running the tool.
    pub(super) fn of_turn(
        turn: &Turn,
        acting: &[CharacterId],
        call_id: CallId,
        tool: String,
        raw: RawArgs,
        refused: Option<ToolError>,
    ) -> Self {
        Self {
            turn_id: turn.turn_id().clone(),
            trace_id: turn.trace_id().clone(),
            iteration: turn.iteration(),
            call_id,
            tool,
            raw,
            args_hash: None,
            role: Role::GameMaster,
            usage: turn.step_usage(),
            acting: acting.to_vec(),
            in_turn: true,
            refused,
            origin: CallOrigin::default(),
        }
    }

    /// A person's or a service's call outside any model turn, journalled
    /// under `turn_id` as its only call.
    pub(super) fn direct(turn_id: TurnId, call: CallTool) -> Self {
        Self {
            turn_id,
            trace_id: call.trace_id,
            iteration: 0,
            call_id: CallId::from("call_1"),
            tool: call.tool,
            raw: RawArgs::Value(call.args),
            args_hash: call.args_hash,
            role: call.role,
            usage: Usage::default(),
            acting: Vec::new(),
            in_turn: false,
            refused: None,
            origin: call.origin,
        }
    }
}

/// What a call gave. The actor journals [`Ran::call`], writes
/// [`Ran::audit`], then journals [`Ran::result`], in that order.
pub(super) struct Ran {
    /// The `tool_call` frame.
    pub(super) call: Entry,
    pub(super) audit: AuditRow,
    /// The `tool_result` frame, with the call's effect and action.
    pub(super) result: Entry,
    pub(super) answer: Answer,
    /// How long the tool ran, in ms, unrounded (for the metrics).
    pub(super) duration_ms: f64,
}

/// A call as the turn's events and a direct caller see it.
pub(super) struct Answer {
    pub(super) event: ToolEvent,
    /// The result with the text of its `tool_result` frame, shared.
    pub(super) outcome: Result<Written, ToolError>,
}

/// Runs one call through the registry's pipeline against the session's
/// state (which it only reads: the effect is applied once its frame is
/// durable) and answers what to journal.
pub(super) fn run(view: &SessionView<'_>, rng: &mut SplitMix64, mut c: Call) -> Ran {
    // What a caller sent is repeated in frames, the journal and the
    // history: arguments over a bound (too large, or nested too deep to
    // store and read back) are shown as a note (the pipeline refuses them).
    let over = args_over_bound(&c.raw);
    // Text that is JSON is read once, here, and handed on as the value it
    // is; the pipeline reads text that is not (and refuses it).
    // `json`: `raw_text` is JSON, the text of `shown_args`.
    let (shown_args, raw_text, raw, json) = match (
        over,
        std::mem::replace(&mut c.raw, RawArgs::Value(Value::Null)),
    ) {
        (Some(over), raw) => (Value::String(over.note()), "{}".to_owned(), raw, false),
        (None, RawArgs::Text(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(v) => (v.clone(), text, RawArgs::Value(v), true),
            Err(_) => (
                Value::String(text.clone()),
                text.clone(),
                RawArgs::Text(text),
                false,
            ),
        },
        (None, RawArgs::Value(v)) => {
            let text = crate::json::text(&v);
            (v.clone(), text, RawArgs::Value(v), true)
        }
    };
    // The journal keeps the model's text and reads the rest of the entry
    // from the frame when that text is JSON with nothing around it (which
    // reads back as the same text).
    let history_from_frame = json && raw_text.trim().len() == raw_text.len();
    let call = call_entry(&c, shown_args, raw_text.clone(), history_from_frame);

    let caller = caller_of(view, &c);
    let inv = match c.refused {
        Some(e) => Invocation {
            args: match raw {
                RawArgs::Value(v) => v,
                RawArgs::Text(t) => serde_json::from_str(&t).unwrap_or(Value::Null),
            },
            outcome: Err(e),
            result_text: None,
            duration_ms: 0.0,
        },
        None => view.registry.invoke(&c.tool, raw, &caller, view.state, rng),
    };
    let audit = audit::row(AuditedCall {
        session_id: Some(view.session_id),
        tenant_id: view.tenant_id,
        trace_id: &c.trace_id,
        turn_id: Some(&c.turn_id),
        call_id: Some(&c.call_id),
        tool: &c.tool,
        role: c.role,
        args_hash: audit::read_args_hash(&inv.args, c.args_hash.as_deref()),
        failure: inv.outcome.as_ref().err(),
        duration_ms: inv.duration_ms,
        usage: c.usage,
        origin: &c.origin,
    });

    let duration_ms = (inv.duration_ms * 1000.0).round() / 1000.0;
    let (status, reason, error_code) = match &inv.outcome {
        Ok(_) => (ToolStatus::Ok, None, None),
        Err(e) => (e.status(), Some(e.reason), Some(e.code)),
    };
    let event = ToolEvent {
        call_id: c.call_id.clone(),
        tool: c.tool.to_owned(),
        status,
        reason,
        error_code,
        duration_ms,
    };
    let (result, message, effect, content, action) = match (&inv.outcome, inv.result_text) {
        (Ok(out), text) => {
            // The result's text, written once (as the registry checked its
            // size): the frame, the action, the model's history and a
            // direct caller's answer carry the same bytes.
            let text: Arc<RawValue> = match text {
                Some(text) => Arc::from(text),
                None => Arc::from(crate::json::raw(&out.result)),
            };
            // The action is the frame's call with the arguments it ran
            // with: most often those the model wrote, whose text is at hand.
            let shown = match &call.event {
                StoryEvent::ToolCall { args, .. } => Some(args),
                _ => None,
            };
            let args = if json && shown == Some(&inv.args) {
                raw_text
            } else {
                crate::json::text(&inv.args)
            };
            let action = Some(StoredAction::FromFrame { args });
            let content = text.get().to_owned();
            (Some(text), None, out.effect.clone(), content, action)
        }
        (Err(e), _) => (
            None,
            Some(e.message.clone()),
            None,
            crate::json::text(&e.to_model_json()),
            None,
        ),
    };
    let shared = result.clone();
    let result = Entry {
        event: StoryEvent::ToolResult {
            turn_id: c.turn_id.clone(),
            call_id: c.call_id.clone(),
            tool: c.tool.to_owned(),
            status,
            result,
            reason,
            error_code,
            message,
            duration_ms,
        },
        effect,
        history: c.in_turn.then(|| HistoryEntry::ToolResult {
            turn_id: c.turn_id.clone(),
            call_id: c.call_id.clone(),
            tool: c.tool.to_owned(),
            content,
        }),
        // A call that succeeded: its frame holds the result.
        history_from_frame: status == ToolStatus::Ok,
        action,
    };
    Ran {
        call,
        audit,
        result,
        answer: Answer {
            event,
            outcome: inv.outcome.map(|o| match shared {
                Some(text) => Written::with_text(o.result, text),
                // Not reached: a result's frame carries its text.
                None => Written::new(o.result),
            }),
        },
        duration_ms: inv.duration_ms,
    }
}

/// Who calls, as the pipeline judges `c` in the session `view` lends.
fn caller_of<'a>(view: &'a SessionView<'_>, c: &'a Call) -> Caller<'a> {
    Caller {
        acting: &c.acting,
        role: c.role,
        allowlist: &view.state.allowlist,
        session_id: view.session_id,
        user_id: c.origin.user_id.as_deref(),
        site_id: None,
    }
}

/// The `tool_call` frame of `c` showing `args`, with the model's history
/// entry of the call (its arguments as the text `raw_text`, which the
/// journal reads from the frame when `history_from_frame`).
fn call_entry(c: &Call, args: Value, raw_text: String, history_from_frame: bool) -> Entry {
    Entry {
        event: StoryEvent::ToolCall {
            turn_id: c.turn_id.clone(),
            iteration: c.iteration,
            call_id: c.call_id.clone(),
            tool: c.tool.to_owned(),
            args,
        },
        effect: None,
        history: c.in_turn.then(|| HistoryEntry::ToolCall {
            turn_id: c.turn_id.clone(),
            call_id: c.call_id.clone(),
            tool: c.tool.to_owned(),
            arguments: raw_text,
        }),
        history_from_frame,
        action: None,
    }
}

/// What the game master's call `c` runs with when it passes every check
/// of the pipeline and the session's approval rule asks a person first
/// (docs/protocol.md §19): its `tool_call` frame and its arguments as read.
/// `None` when it runs (or is refused) at once.
pub(super) fn asks_approval(view: &SessionView<'_>, c: &Call) -> Option<(Entry, Value)> {
    let rule = view.state.approvals.rule.as_ref()?;
    if !c.in_turn || c.refused.is_some() || !rule.tools.contains(&c.tool) {
        return None;
    }
    if !args_within_bound(&c.raw) {
        return None;
    }
    let raw = match &c.raw {
        RawArgs::Text(text) => RawArgs::Value(serde_json::from_str(text).ok()?),
        RawArgs::Value(v) => RawArgs::Value(v.clone()),
    };
    let caller = caller_of(view, c);
    let args = view
        .registry
        .admit(&c.tool, raw, &caller, view.state)
        .ok()?;
    if !rule.asks(&c.tool, &args, view.state) {
        return None;
    }
    let text = crate::json::text(&args);
    Some((call_entry(c, args.clone(), text, true), args))
}

/// A call whose text a model must write before it runs.
#[derive(Debug, PartialEq)]
pub(super) struct ContentAsk {
    /// The call's arguments, parsed; the text goes into them.
    pub(super) args: Value,
    /// The prompt for the text, as the tool words it.
    pub(super) system: String,
    pub(super) user: String,
}

/// Whether the model's call of `tool` with `arguments` needs text written
/// first ([`crate::tools::Tool::content_request`]), and the prompt for it.
/// The pipeline's checks come first: a call it would refuse (not allowed,
/// bad arguments, another session's id) runs, and is refused, at once,
/// without spending a model call on its text.
pub(super) fn content_request(
    view: &SessionView<'_>,
    tool: &str,
    arguments: &str,
) -> Option<ContentAsk> {
    let args: Value = serde_json::from_str(arguments).ok()?;
    let checked = view
        .registry
        .prepare(tool, RawArgs::Value(args.clone()), &view.game_master());
    let other_session = args
        .get("session_id")
        .and_then(Value::as_str)
        .is_some_and(|id| *view.session_id != *id);
    if checked.is_err() || other_session {
        return None;
    }
    let (system, user) = view.registry.content_request(tool, &args)?;
    Some(ContentAsk { args, system, user })
}

/// The arguments a call that waited for text runs with, and the error it is
/// refused with instead when the model wrote none (`answer` is why) or the
/// tool cannot use what it wrote ([`crate::tools::Tool::with_content`]).
pub(super) fn with_content(
    view: &SessionView<'_>,
    tool: &str,
    mut args: Value,
    answer: Result<String, ToolError>,
) -> (Value, Option<ToolError>) {
    let refused = answer
        .and_then(|text| {
            view.registry
                .with_content(tool, &mut args, &text)
                .map_err(|m| ToolError::new(Reason::ExecutionFailed, ErrorCode::InvalidAiJson, m))
        })
        .err();
    (args, refused)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::game::GameState;
    use crate::ids::SessionId;
    use crate::tools::test_support::{SESSION, demo, session};
    use crate::tools::{MAX_ARGS_BYTES, MAX_ARGS_DEPTH, Registry};

    struct Fixture {
        registry: Registry,
        state: GameState,
        session_id: SessionId,
    }

    impl Fixture {
        fn demo() -> Self {
            Self {
                registry: Registry::builtin().expect("built-in tools register"),
                state: demo(),
                session_id: session(),
            }
        }

        fn view(&self) -> SessionView<'_> {
            SessionView {
                registry: &self.registry,
                state: &self.state,
                session_id: &self.session_id,
                tenant_id: {
                    static TENANT: std::sync::LazyLock<crate::ids::TenantId> =
                        std::sync::LazyLock::new(|| "tenant_1".into());
                    &TENANT
                },
            }
        }

        /// Runs `tool` as `role` with `args`, in a turn when `in_turn`.
        fn run(&self, tool: &str, args: &str, role: Role, in_turn: bool) -> Ran {
            self.run_refused(tool, RawArgs::Text(args.into()), role, in_turn, None)
        }

        fn run_refused(
            &self,
            tool: &str,
            raw: RawArgs,
            role: Role,
            in_turn: bool,
            refused: Option<ToolError>,
        ) -> Ran {
            run(
                &self.view(),
                &mut SplitMix64::new(1),
                Call {
                    acting: Vec::new(),
                    turn_id: "turn_1".into(),
                    trace_id: "tr_1".into(),
                    iteration: 2,
                    call_id: "call_1".into(),
                    tool: tool.into(),
                    raw,
                    args_hash: None,
                    role,
                    usage: Usage {
                        prompt_tokens: 5,
                        completion_tokens: 1,
                    },
                    in_turn,
                    refused,
                    origin: CallOrigin::default(),
                },
            )
        }
    }

    const MOVE: &str = r#"{"actor_id":"pc_001","to_area_id":"area_002"}"#;

    fn history_content(entry: &Entry) -> &str {
        match &entry.history {
            Some(HistoryEntry::ToolResult { content, .. }) => content,
            other => panic!("not a tool result in the history: {other:?}"),
        }
    }

    #[test]
    fn a_valid_call_changes_the_state_once_applied_and_yields_its_action() {
        let mut f = Fixture::demo();
        let ran = f.run("move", MOVE, Role::GameMaster, true);

        let written = ran.answer.outcome.as_ref().expect("the move succeeds");
        let result = &written.value;
        assert_eq!(result["to_area_id"], "area_002");
        assert_eq!(
            (ran.answer.event.status, ran.answer.event.error_code),
            (ToolStatus::Ok, None)
        );
        assert!(matches!(
            &ran.call.event,
            StoryEvent::ToolCall { iteration: 2, tool, args, .. }
                if tool == "move" && args["to_area_id"] == "area_002"
        ));
        assert!(matches!(
            &ran.call.history,
            Some(HistoryEntry::ToolCall { arguments, .. }) if arguments == MOVE
        ));
        assert!(matches!(
            &ran.result.event,
            StoryEvent::ToolResult {
                status: ToolStatus::Ok,
                result: Some(shown),
                message: None,
                ..
            } if serde_json::from_str::<Value>(shown.get()).ok().as_ref() == Some(result)
                // A direct caller is answered with the frame's text.
                && shown.get() == written.json.get()
        ));
        assert_eq!(history_content(&ran.result), result.to_string());
        // The journal reads the history entries and the action from the
        // frames, with the model's text of the arguments.
        assert!(ran.call.history_from_frame && ran.result.history_from_frame);
        assert_eq!(
            ran.result.action,
            Some(StoredAction::FromFrame { args: MOVE.into() })
        );
        assert_eq!(
            (ran.audit.status.as_str(), ran.audit.error_code),
            ("ok", None)
        );
        assert_eq!(ran.audit.session_id.as_deref(), Some(SESSION));
        assert_eq!(ran.audit.tenant_id, "tenant_1");
        assert_eq!(
            (ran.audit.prompt_tokens, ran.audit.completion_tokens),
            (5, 1)
        );

        // The state changes only when the actor applies the durable effect.
        let here = |s: &GameState| s.active_actor().map(|a| a.area_id.to_string());
        assert_eq!(here(&f.state).as_deref(), Some("area_001"));
        let effect = ran.result.effect.expect("a move has an effect");
        f.state.apply(&effect);
        assert_eq!(here(&f.state).as_deref(), Some("area_002"));
    }

    #[test]
    fn an_invalid_call_yields_the_error_and_changes_nothing() {
        let f = Fixture::demo();
        let cases = [
            ("move", r#"{"actor_id":"pc_001"}"#, ErrorCode::InvalidArgs),
            ("move", "{not json", ErrorCode::InvalidArgs),
            ("teleport", "{}", ErrorCode::ToolNotFound),
            (
                "move",
                r#"{"actor_id":"pc_001","to_area_id":"area_999"}"#,
                ErrorCode::ZoneNotFound,
            ),
        ];
        for (tool, args, code) in cases {
            let ran = f.run(tool, args, Role::GameMaster, true);
            let e = ran
                .answer
                .outcome
                .as_ref()
                .expect_err("the call is refused");
            assert_eq!(e.code, code, "{tool} {args}");
            assert_eq!(ran.answer.event.error_code, Some(code), "{tool} {args}");
            assert_eq!(ran.result.effect, None, "{tool} {args}: no effect");
            assert_eq!(ran.result.action, None, "{tool} {args}: no action");
            assert!(matches!(
                &ran.result.event,
                StoryEvent::ToolResult { result: None, message: Some(m), .. } if *m == e.message
            ));
            // The model reads why, in the shape it always gets, and the
            // journal writes it out (the frame does not say it).
            assert_eq!(history_content(&ran.result), e.to_model_json().to_string());
            assert!(!ran.result.history_from_frame, "{tool} {args}");
            assert_eq!(ran.audit.error_code, Some(code.as_str()), "{tool} {args}");
        }
    }

    #[test]
    fn a_role_that_may_not_call_the_tool_is_refused() {
        let f = Fixture::demo();
        let args = r#"{"target_character_id":"pc_001","delta":-3}"#;
        let ran = f.run("hp_delta", args, Role::Player, false);
        let e = ran.answer.outcome.expect_err("a player may not change HP");
        assert_eq!(
            (e.reason, e.code),
            (Reason::PermissionDenied, ErrorCode::PermissionDenied)
        );
        assert_eq!(ran.result.effect, None);
        assert_eq!(ran.audit.role, "player");
        // The game master may.
        let ran = f.run("hp_delta", args, Role::GameMaster, false);
        assert!(ran.answer.outcome.is_ok() && ran.result.effect.is_some());
    }

    #[test]
    fn only_a_turns_calls_go_into_the_models_history() {
        let f = Fixture::demo();
        let direct = f.run("move", MOVE, Role::Service, false);
        assert!(direct.answer.outcome.is_ok());
        assert!(direct.call.history.is_none() && direct.result.history.is_none());
        let in_turn = f.run("move", MOVE, Role::GameMaster, true);
        assert!(in_turn.call.history.is_some() && in_turn.result.history.is_some());
    }

    #[test]
    fn oversized_arguments_are_shown_as_a_note_and_refused() {
        let f = Fixture::demo();
        let big = format!(r#"{{"actor_id":"{}"}}"#, "x".repeat(MAX_ARGS_BYTES));
        let ran = f.run("move", &big, Role::GameMaster, true);
        assert_eq!(
            ran.answer.outcome.expect_err("refused").code,
            ErrorCode::InvalidArgs
        );
        let note = format!("<arguments over {MAX_ARGS_BYTES} bytes>");
        assert!(matches!(&ran.call.event, StoryEvent::ToolCall { args, .. } if *args == note));
        assert!(matches!(
            &ran.call.history,
            Some(HistoryEntry::ToolCall { arguments, .. }) if arguments == "{}"
        ));
        assert!(!ran.call.history_from_frame, "the frame shows a note");
    }

    #[test]
    fn arguments_nested_too_deep_are_shown_as_a_note_and_refused_as_text_or_as_a_value() {
        let f = Fixture::demo();
        let nested = |n: usize| {
            format!(
                r#"{{"event_type":"deep","event_data":{}1{}}}"#,
                r#"{"a":"#.repeat(n),
                "}".repeat(n)
            )
        };
        // The arguments object is one level, `event_data` a second.
        let deepest = nested(MAX_ARGS_DEPTH - 1);
        let ran = f.run("log_user_event", &deepest, Role::Service, false);
        assert!(ran.answer.outcome.is_ok(), "{deepest}");
        let too_deep = nested(MAX_ARGS_DEPTH);
        let note = format!("<arguments nested deeper than {MAX_ARGS_DEPTH} levels>");
        let as_value: Value = serde_json::from_str(&too_deep).expect("JSON");
        for raw in [RawArgs::Text(too_deep.clone()), RawArgs::Value(as_value)] {
            let ran = f.run_refused("log_user_event", raw, Role::GameMaster, true, None);
            let refused = ran.answer.outcome.expect_err("refused");
            assert_eq!(refused.code, ErrorCode::InvalidArgs);
            assert!(
                refused.message.contains("nested deeper than 32"),
                "{}",
                refused.message
            );
            assert!(matches!(&ran.call.event, StoryEvent::ToolCall { args, .. } if *args == note));
            assert!(ran.result.effect.is_none(), "nothing is stored");
        }
    }

    #[test]
    fn the_journal_writes_out_argument_text_the_frame_cannot_say() {
        let f = Fixture::demo();
        // The frame shows the arguments parsed; the model's history keeps
        // its text, spaces and all.
        for (args, from_frame) in [
            (MOVE, true),
            (
                r#"{ "to_area_id": "area_002",  "actor_id": "pc_001" }"#,
                true,
            ),
            (
                " {\"actor_id\":\"pc_001\",\"to_area_id\":\"area_002\"}\n",
                false,
            ),
            ("{not json", false),
        ] {
            let ran = f.run("move", args, Role::GameMaster, true);
            assert!(
                matches!(&ran.call.history, Some(HistoryEntry::ToolCall { arguments, .. }) if arguments == args)
            );
            assert_eq!(ran.call.history_from_frame, from_frame, "{args:?}");
            // An action keeps the text its arguments came in, whatever it
            // looks like: it is read as the value it is.
            if let Some(StoredAction::FromFrame { args: stored }) = &ran.result.action {
                assert_eq!(stored, args);
            }
            assert_eq!(ran.result.action.is_some(), args != "{not json");
        }
    }

    #[test]
    fn a_refused_call_does_not_run_the_tool() {
        let f = Fixture::demo();
        let why = ToolError::new(Reason::Timeout, ErrorCode::UpstreamError, "no text");
        let raw = RawArgs::Value(serde_json::from_str(MOVE).expect("JSON"));
        let ran = f.run_refused("move", raw, Role::GameMaster, true, Some(why.clone()));
        assert_eq!(ran.answer.outcome.expect_err("refused"), why);
        assert_eq!(ran.result.effect, None);
        assert_eq!(ran.answer.event.duration_ms, 0.0);
        assert_eq!(
            ran.audit.args_hash,
            crate::tools::args_hash(&json!({
                "actor_id": "pc_001", "to_area_id": "area_002"
            }))
        );
    }

    #[test]
    fn a_turns_call_and_a_direct_call_say_who_calls_and_where() {
        let mut turn = Turn::new("turn_3".into(), 3, "tr_3".into(), 4);
        turn.resume();
        turn.model_called();
        let usage = Usage {
            prompt_tokens: 7,
            completion_tokens: 2,
        };
        turn.on_model_done(crate::llm::ModelReply {
            usage,
            tool_calls: vec![crate::llm::ModelToolCall {
                id: "c1".into(),
                name: "move".into(),
                arguments: MOVE.into(),
            }],
            ..Default::default()
        });
        let c = Call::of_turn(
            &turn,
            &[],
            "c1".into(),
            "move".into(),
            RawArgs::Text(MOVE.into()),
            None,
        );
        assert_eq!(
            (c.turn_id.as_str(), c.trace_id.as_str(), c.call_id.as_str()),
            ("turn_3", "tr_3", "c1")
        );
        assert_eq!(
            (c.iteration, c.usage, c.role, c.in_turn),
            (1, usage, Role::GameMaster, true)
        );
        assert_eq!(c.origin, CallOrigin::default());

        let origin = CallOrigin {
            site_id: Some("site_1".into()),
            ..CallOrigin::default()
        };
        let message = CallTool {
            tool: "roll_dice".into(),
            args: json!({"dice": "1d6"}),
            args_hash: Some("hash_9".into()),
            role: Role::Service,
            trace_id: "tr_9".into(),
            origin: origin.clone(),
        };
        let c = Call::direct("direct_x".into(), message);
        assert_eq!(
            (c.turn_id.as_str(), c.trace_id.as_str(), c.call_id.as_str()),
            ("direct_x", "tr_9", "call_1")
        );
        assert_eq!(
            (c.iteration, c.usage, c.role, c.in_turn),
            (0, Usage::default(), Role::Service, false)
        );
        assert_eq!((c.tool.as_str(), c.origin), ("roll_dice", origin));
        assert!(matches!(c.raw, RawArgs::Value(ref v) if v["dice"] == "1d6"));
        assert_eq!(c.args_hash.as_deref(), Some("hash_9"), "the caller's hash");
        assert!(c.refused.is_none());
    }

    const ZONES: &str = r#"{"session_id":"sess_test","world_prompt":"salt flats","count":2}"#;

    #[test]
    fn content_is_asked_for_only_for_a_call_that_passes_the_checks() {
        let f = Fixture::demo();
        let ask = content_request(&f.view(), "generate_zone", ZONES).expect("zones want text");
        assert_eq!(ask.args["world_prompt"], "salt flats");
        assert!(ask.user.contains("salt flats"));
        let cases = [
            ("a tool without the hook", "move", MOVE.to_owned()),
            (
                "arguments that do not parse",
                "generate_zone",
                "{".to_owned(),
            ),
            (
                "bad arguments",
                "generate_zone",
                r#"{"session_id":"sess_test"}"#.to_owned(),
            ),
            (
                "another session's id",
                "generate_zone",
                ZONES.replace("sess_test", "sess_other"),
            ),
            ("an unknown tool", "teleport", "{}".to_owned()),
        ];
        for (name, tool, args) in cases {
            assert_eq!(content_request(&f.view(), tool, &args), None, "{name}");
        }
    }

    #[test]
    fn written_content_goes_into_the_arguments_or_refuses_the_call() {
        let f = Fixture::demo();
        let args: Value = serde_json::from_str(ZONES).expect("JSON");
        let text = r#"[{"name":"Glass Pan","description":"White."},{"name":"Cairn","description":"Stones."}]"#;
        let (with, refused) =
            with_content(&f.view(), "generate_zone", args.clone(), Ok(text.into()));
        assert_eq!(refused, None);
        assert_eq!(with["zone_texts"][1]["name"], "Cairn");

        let (same, refused) =
            with_content(&f.view(), "generate_zone", args.clone(), Ok("no".into()));
        assert_eq!(same, args, "unusable text leaves the arguments");
        let e = refused.expect("unusable text refuses the call");
        assert_eq!(
            (e.reason, e.code),
            (Reason::ExecutionFailed, ErrorCode::InvalidAiJson)
        );

        let why = ToolError::new(Reason::Timeout, ErrorCode::AiTimeout, "too slow");
        let (_, refused) = with_content(&f.view(), "generate_zone", args, Err(why.clone()));
        assert_eq!(refused, Some(why), "no text: refused with why");
    }
}
