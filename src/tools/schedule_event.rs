//! `schedule_event`: the world acts later by itself (docs/protocol.md §9).
//! The timer is part of the save state, made by the journalled effect; its
//! bounds are `game::timers::plan`'s, the one place they are kept.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::timers::{
    self, MAX_EVENT_CHARS, MAX_HORIZON_S, MAX_KEY_CHARS, MAX_NOTE_CHARS, MIN_REPEAT_S, Refused,
    Request, When,
};
use crate::ids::TimerId;

/// Longest `at` text, in characters: an RFC 3339 time with nanoseconds and
/// an offset is 35.
pub const MAX_AT_CHARS: usize = 64;

pub struct ScheduleEvent;

// Exactly one of delay_s and at; run() says so to a direct call too.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {"required": ["delay_s"]},
    {"required": ["at"]}
]))]
struct Args {
    /// what happens, a short name such as guards_return
    #[schemars(length(min = 1, max = MAX_EVENT_CHARS), pattern(r"\S"))]
    event: String,
    /// what to remember for when it happens
    #[schemars(length(max = MAX_NOTE_CHARS))]
    note: Option<String>,
    /// seconds from now until it happens (give this or at)
    #[schemars(range(min = 1, max = MAX_HORIZON_S))]
    delay_s: Option<u64>,
    /// when it happens, an RFC 3339 time such as 2026-11-29T10:00:00Z (give this or delay_s)
    #[schemars(length(min = 1, max = MAX_AT_CHARS))]
    at: Option<String>,
    /// happens again every this many seconds
    #[schemars(range(min = MIN_REPEAT_S, max = MAX_HORIZON_S))]
    repeat_s: Option<u64>,
    /// scheduling the same key again replaces that timer
    #[schemars(length(min = 1, max = MAX_KEY_CHARS), pattern(r"\S"))]
    key: Option<String>,
}

impl Tool for ScheduleEvent {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "schedule_event",
            "Schedule event",
            "world",
            "Make something happen later by itself: after delay_s seconds or at an RFC 3339 time \
             (at most 30 days ahead), optionally again every repeat_s seconds (at least 5). When it \
             is due, a turn of the world begins and you are told the event and its note, to narrate \
             what happens. The same key again replaces that timer. A session holds at most 64 \
             pending timers.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["timer_id", "event", "due_at", "repeat_s"],
                "properties": {
                    "timer_id": {"type": "string", "pattern": "^tmr_[0-9a-f]{16}$"},
                    "event": {"type": "string"},
                    "due_at": {"type": "string"},
                    "repeat_s": {"type": ["integer", "null"], "minimum": MIN_REPEAT_S, "maximum": MAX_HORIZON_S}
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let when = match (args.delay_s, args.at.as_deref()) {
            (Some(delay_s), None) => When::Delay(delay_s),
            (None, Some(at)) => When::At(timers::parse_rfc3339(at).ok_or_else(|| {
                ToolError::invalid_args("at must be an RFC 3339 time such as 2026-11-29T10:00:00Z")
            })?),
            _ => {
                return Err(ToolError::invalid_args(
                    "give exactly one of delay_s (seconds from now) and at (an RFC 3339 time)",
                ));
            }
        };
        let request = Request {
            event: args.event,
            note: args.note.unwrap_or_default(),
            when,
            repeat_s: args.repeat_s,
            key: args.key,
        };
        // A fresh id never names a pending timer: scheduling under it
        // would replace that one.
        let timer_id = loop {
            let id = TimerId::from(format!("tmr_{:016x}", ctx.rng.next_u64()));
            if ctx.state.timers.get(id.as_str()).is_none() {
                break id;
            }
        };
        let (timer, replaces) = timers::plan(&ctx.state.timers, request, ctx.now_ms, timer_id)
            .map_err(|refused| match refused {
                // The session's state, not the call, is what stands in the
                // way, as with a map that holds its most areas.
                Refused::Limit => ToolError::new(
                    Reason::InvalidActorState,
                    ErrorCode::TimerLimit,
                    refused.to_string(),
                ),
                Refused::Invalid(message) => ToolError::invalid_args(message),
            })?;
        Ok(ToolOutput {
            result: json!({
                "timer_id": timer.timer_id,
                "event": timer.event,
                "due_at": crate::storage::rfc3339(timer.due_at),
                "repeat_s": timer.repeat_s,
            }),
            effect: Some(Effect::TimerScheduled { timer, replaces }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;
    use crate::game::timers::MAX_PENDING;
    use crate::tools::Role;
    use crate::tools::test_support::{NOW_MS, assert_refusals, ctx_run, demo, pipeline};

    /// Runs `schedule_event` through the pipeline and applies its effect.
    fn schedule(state: &mut GameState, args: Value) -> Result<Value, ToolError> {
        let out = pipeline("schedule_event", state, args, Role::GameMaster)?;
        state.apply(out.effect.as_ref().expect("a timer is scheduled"));
        Ok(out.result)
    }

    #[test]
    fn a_timer_is_scheduled_with_its_due_time_and_listed_in_the_state() {
        let mut state = demo();
        let out = ctx_run(
            &ScheduleEvent,
            &state,
            &json!({"event": "guards_return", "note": "four guards", "delay_s": 600, "repeat_s": 60}),
        )
        .unwrap();
        let id = out.result["timer_id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("tmr_") && id.len() == 20, "{id}");
        assert_eq!(
            out.result,
            json!({
                "timer_id": id,
                "event": "guards_return",
                "due_at": crate::storage::rfc3339(NOW_MS + 600_000),
                "repeat_s": 60,
            })
        );
        state.apply(out.effect.as_ref().unwrap());
        let timer = state.timers.get(&id).expect("pending");
        assert_eq!(
            (timer.note.as_str(), timer.due_at),
            ("four guards", NOW_MS + 600_000)
        );
        // An RFC 3339 time in any offset is the same instant.
        let at = ctx_run(
            &ScheduleEvent,
            &state,
            &json!({"event": "dawn", "at": "2024-12-13T13:00:00+01:00"}),
        );
        let e = at.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgs, "that is now, not later");
        let at = ctx_run(
            &ScheduleEvent,
            &state,
            &json!({"event": "dawn", "at": "2024-12-13T14:00:00+01:00"}),
        )
        .unwrap();
        assert_eq!(at.result["due_at"], "2024-12-13T13:00:00.000Z");
        assert_eq!(at.result["repeat_s"], Value::Null);
    }

    #[test]
    fn bounds_are_refused_as_invalid_args() {
        let state = demo();
        let run = |args: &Value| pipeline("schedule_event", &state, args.clone(), Role::GameMaster);
        assert_refusals(
            [
                (json!({"event": "e"}), Reason::InvalidArgs, "oneOf"),
                (
                    json!({"event": "e", "delay_s": 5, "at": "2030-01-01T00:00:00Z"}),
                    Reason::InvalidArgs,
                    "oneOf",
                ),
                (
                    json!({"event": "e", "delay_s": 0}),
                    Reason::InvalidArgs,
                    "/delay_s",
                ),
                (
                    json!({"event": "e", "delay_s": MAX_HORIZON_S + 1}),
                    Reason::InvalidArgs,
                    "/delay_s",
                ),
                (
                    json!({"event": "e", "delay_s": 5, "repeat_s": 4}),
                    Reason::InvalidArgs,
                    "/repeat_s",
                ),
                (
                    json!({"event": "", "delay_s": 5}),
                    Reason::InvalidArgs,
                    "/event",
                ),
                (
                    json!({"event": "e".repeat(65), "delay_s": 5}),
                    Reason::InvalidArgs,
                    "/event",
                ),
                (
                    json!({"event": "e", "delay_s": 5, "note": "n".repeat(501)}),
                    Reason::InvalidArgs,
                    "/note",
                ),
                (
                    json!({"event": "e", "delay_s": 5, "key": ""}),
                    Reason::InvalidArgs,
                    "/key",
                ),
                (
                    json!({"event": "e", "at": "tomorrow"}),
                    Reason::InvalidArgs,
                    "RFC 3339",
                ),
                (
                    json!({"event": "e", "at": "2020-01-01T00:00:00Z"}),
                    Reason::InvalidArgs,
                    "future",
                ),
                (
                    json!({"event": "e", "at": "2025-01-13T12:00:01Z"}),
                    Reason::InvalidArgs,
                    "30 days",
                ),
            ],
            run,
        );
        // A direct call (no schema) is held to the same rules.
        assert_refusals(
            [
                (json!({"event": "e"}), Reason::InvalidArgs, "exactly one"),
                (
                    json!({"event": "e", "delay_s": 5, "at": "2030-01-01T00:00:00Z"}),
                    Reason::InvalidArgs,
                    "exactly one",
                ),
                (
                    json!({"event": " ", "delay_s": 5}),
                    Reason::InvalidArgs,
                    "event",
                ),
                (
                    json!({"event": "e", "delay_s": 0}),
                    Reason::InvalidArgs,
                    "delay_s",
                ),
                (
                    json!({"event": "e", "delay_s": 5, "key": "\n"}),
                    Reason::InvalidArgs,
                    "key",
                ),
            ],
            |args| ctx_run(&ScheduleEvent, &state, args),
        );
        // The horizon's last instant is allowed.
        let edge = ctx_run(
            &ScheduleEvent,
            &state,
            &json!({"event": "e", "delay_s": MAX_HORIZON_S}),
        );
        assert!(edge.is_ok());
    }

    #[test]
    fn the_same_key_replaces_its_timer_and_the_65th_is_timer_limit() {
        let mut state = demo();
        let first = schedule(
            &mut state,
            json!({"event": "tide", "delay_s": 60, "key": "tide"}),
        )
        .unwrap();
        let second = schedule(
            &mut state,
            json!({"event": "tide", "delay_s": 90, "key": "tide"}),
        )
        .unwrap();
        assert_ne!(first["timer_id"], second["timer_id"]);
        assert_eq!(state.timers.len(), 1, "one timer per key");
        let kept = state.timers.by_key("tide").unwrap();
        assert_eq!(kept.timer_id, second["timer_id"].as_str().unwrap());
        for i in 1..MAX_PENDING {
            schedule(&mut state, json!({"event": format!("e{i}"), "delay_s": 60})).unwrap();
        }
        assert_eq!(state.timers.len(), MAX_PENDING);
        let e = schedule(&mut state, json!({"event": "one_more", "delay_s": 60})).unwrap_err();
        assert_eq!(
            (e.reason, e.code, e.status()),
            (
                Reason::InvalidActorState,
                ErrorCode::TimerLimit,
                crate::error::ToolStatus::Rejected
            )
        );
        assert!(e.message.contains("64"), "{}", e.message);
        // A key already held still replaces at the limit.
        schedule(
            &mut state,
            json!({"event": "tide", "delay_s": 30, "key": "tide"}),
        )
        .unwrap();
        assert_eq!(state.timers.len(), MAX_PENDING);
    }

    #[test]
    fn players_may_not_schedule() {
        let e = pipeline(
            "schedule_event",
            &demo(),
            json!({"event": "e", "delay_s": 5}),
            Role::Player,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
    }
}
