//! `log_user_event`: record something a user did, for analytics.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ALL_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::Effect;
use crate::game::state::UserEvent;

/// Longest payload, as compact JSON text.
pub const MAX_PAYLOAD_BYTES: usize = 4096;
/// Longest user id.
pub const MAX_USER_ID_CHARS: usize = 128;

pub struct LogUserEvent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(max = 64), pattern("^[a-z0-9_.]{1,64}$"))]
    event_type: String,
    #[schemars(length(min = 1, max = MAX_USER_ID_CHARS))]
    user_id: Option<String>,
    payload: Option<Map<String, Value>>,
    // The name content services give `payload`; one or the other.
    event_data: Option<Map<String, Value>>,
}

impl Tool for LogUserEvent {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "log_user_event",
            "Log user event",
            "analytics",
            "Record an analytics event about what a user did, such as ui.open_map or quest.accepted, \
             with an optional user_id and a small JSON object payload or event_data (the same \
             thing; at most 4096 bytes). Does not change the game.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["event_id", "logged", "logged_at"],
                "properties": {
                    "event_id": {"type": "string", "pattern": "^ev_[0-9a-f]{16}$"},
                    "logged": {"const": true},
                    "logged_at": {"type": "string"}
                }
            }),
        )
        .writes()
        .roles(ALL_ROLES)
        .on_sites()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let (name, given) = match (args.payload, args.event_data) {
            (Some(_), Some(_)) => {
                return Err(ToolError::invalid_args(
                    "payload and event_data are the same field; send one of them",
                ));
            }
            (Some(map), None) => ("payload", Some(map)),
            (None, Some(map)) => ("event_data", Some(map)),
            (None, None) => ("payload", None),
        };
        let payload = match given {
            None => Value::Null,
            Some(map) => {
                let payload = Value::Object(map);
                if super::json_size_within(&payload, MAX_PAYLOAD_BYTES).is_none() {
                    return Err(ToolError::invalid_args(format!(
                        "{name} is more than {MAX_PAYLOAD_BYTES} bytes of JSON, so send \
                         fewer or shorter fields"
                    )));
                }
                payload
            }
        };
        let event = UserEvent {
            event_id: format!("ev_{:016x}", ctx.rng.next_u64()),
            event_type: args.event_type,
            // The caller's user (`X-User-ID`) when the event names none.
            user_id: args.user_id.or_else(|| ctx.user_id.map(str::to_owned)),
            payload,
            turn: ctx.state.turn,
            // The call's time, kept in the effect: replaying it keeps this time.
            logged_at: Some(ctx.now_rfc3339()),
        };
        Ok(ToolOutput {
            result: json!({"event_id": event.event_id, "logged": true, "logged_at": event.logged_at}),
            effect: Some(Effect::LogEvent { event }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, Reason};
    use crate::game::GameState;
    use crate::game::rng::SplitMix64;
    use crate::game::state::EVENT_LIMIT;
    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline, run_as, session};

    fn invoke(state: &GameState, args: Value, role: Role) -> Result<ToolOutput, ToolError> {
        pipeline("log_user_event", state, args, role)
    }

    #[test]
    fn logs_an_event_at_the_current_turn() {
        let mut state = demo();
        state.apply(&Effect::BeginTurn { turn: 4 });
        let args = json!({
            "event_type": "ui.open_map",
            "user_id": "user_42",
            "payload": {"zoom": 2, "where": "灯塔"}
        });
        let out = invoke(&state, args, Role::Player).unwrap();
        let id = out.result["event_id"].as_str().unwrap().to_owned();
        assert_eq!(out.result["logged"], true);
        assert!(id.starts_with("ev_") && id.len() == 19, "{id}");
        let effect = out.effect.unwrap();
        state.apply(&effect);
        state.apply(&effect);
        assert_eq!(state.events.len(), 1);
        assert_eq!(
            state.events[0],
            UserEvent {
                event_id: id,
                event_type: "ui.open_map".into(),
                user_id: Some("user_42".into()),
                payload: json!({"zoom": 2, "where": "灯塔"}),
                turn: 4,
                logged_at: out.result["logged_at"].as_str().map(str::to_owned),
            }
        );
        // The game itself is unchanged.
        let mut without = state.clone();
        without.events.clear();
        let mut fresh = demo();
        fresh.apply(&Effect::BeginTurn { turn: 4 });
        assert_eq!(without, fresh);
    }

    #[test]
    fn event_data_is_kept_as_the_payload_with_the_time_of_the_call() {
        let mut state = demo();
        let args = json!({
            "event_type": "npc.greeted",
            "event_data": {"npc_id": "ancestor_yan", "lines": 2},
            "user_id": "user-xxx"
        });
        let out = ctx_run(&LogUserEvent, &state, &args).unwrap();
        assert_eq!(out.result["logged_at"], "2024-12-13T12:00:00.000Z");
        let effect = out.effect.unwrap();
        // The journal keeps the time: the effect read back is the same.
        let journalled: Effect =
            serde_json::from_str(&serde_json::to_string(&effect).unwrap()).unwrap();
        assert_eq!(journalled, effect);
        state.apply(&journalled);
        let event = state.events.back().unwrap();
        assert_eq!(event.payload, json!({"npc_id": "ancestor_yan", "lines": 2}));
        assert_eq!(event.logged_at.as_deref(), Some("2024-12-13T12:00:00.000Z"));
        // Events saved before the time was kept read back without it.
        let old: UserEvent =
            serde_json::from_str(r#"{"event_id":"ev_1","event_type":"x","turn":1}"#).unwrap();
        assert_eq!(old.logged_at, None);

        // The bound is the payload's; both at once is a mistake.
        let over = json!({"event_type": "big", "event_data": {"k": "x".repeat(MAX_PAYLOAD_BYTES)}});
        let e = ctx_run(&LogUserEvent, &state, &over).unwrap_err();
        assert!(
            e.message.contains("event_data is more than 4096"),
            "{}",
            e.message
        );
        let both = json!({"event_type": "x", "payload": {}, "event_data": {}});
        let e = invoke(&state, both, Role::Service).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidArgs);
        assert!(e.message.contains("send one"), "{}", e.message);
        // Through the pipeline the time is the clock's, in RFC 3339 UTC.
        let out = invoke(&state, args, Role::Service).unwrap();
        let at = out.result["logged_at"].as_str().unwrap();
        assert!(
            at.len() == 24 && at.ends_with('Z') && &at[10..11] == "T",
            "{at}"
        );
    }

    #[test]
    fn every_role_may_log_and_optional_fields_may_be_left_out() {
        let state = demo();
        for role in [
            Role::Player,
            Role::GameMaster,
            Role::Service,
            Role::Admin,
            Role::GmAdmin,
            Role::Owner,
        ] {
            let out = invoke(&state, json!({"event_type": "session.start"}), role).unwrap();
            let Some(Effect::LogEvent { event }) = out.effect else {
                panic!("no event effect");
            };
            assert_eq!(
                (event.user_id, event.payload, event.turn),
                (None, Value::Null, 0),
                "{role:?}"
            );
        }
    }

    #[test]
    fn the_callers_user_is_the_events_unless_it_names_one() {
        let state = demo();
        let run = |args: Value| {
            let out = LogUserEvent
                .run(
                    &args,
                    &mut ToolContext {
                        acting: &[],
                        state: &state,
                        rng: &mut SplitMix64::new(1),
                        session_id: &session(),
                        role: Role::Service,
                        now_ms: 0,
                        user_id: Some("user-7"),
                        site_id: None,
                    },
                )
                .unwrap();
            match out.effect {
                Some(Effect::LogEvent { event }) => event.user_id,
                _ => panic!("no event effect"),
            }
        };
        assert_eq!(run(json!({"event_type": "a"})).as_deref(), Some("user-7"));
        assert_eq!(
            run(json!({"event_type": "a", "user_id": "u-1"})).as_deref(),
            Some("u-1"),
            "the event's own user wins"
        );
    }

    #[test]
    fn different_draws_give_different_ids_and_old_events_roll_off() {
        let mut state = demo();
        let mut rng = SplitMix64::new(3);
        for i in 0..EVENT_LIMIT + 5 {
            let out = LogUserEvent
                .run(
                    &json!({"event_type": "tick"}),
                    &mut ToolContext {
                        acting: &[],
                        state: &state,
                        rng: &mut rng,
                        session_id: &session(),
                        role: Role::Service,
                        now_ms: 0,
                        user_id: None,
                        site_id: None,
                    },
                )
                .unwrap();
            state.apply(out.effect.as_ref().unwrap());
            assert_eq!(state.events.len(), (i + 1).min(EVENT_LIMIT));
        }
    }

    #[test]
    fn payloads_are_capped_by_their_json_size() {
        let state = demo();
        // {"k":"..."} is 8 bytes plus the string.
        let fits =
            json!({"event_type": "big", "payload": {"k": "x".repeat(MAX_PAYLOAD_BYTES - 8)}});
        assert!(ctx_run(&LogUserEvent, &state, &fits).is_ok());
        let over =
            json!({"event_type": "big", "payload": {"k": "x".repeat(MAX_PAYLOAD_BYTES - 7)}});
        let e = ctx_run(&LogUserEvent, &state, &over).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidArgs, ErrorCode::InvalidArgs)
        );
        assert!(e.message.contains("4096"), "{}", e.message);
        // Bytes, not characters: 灯 is three bytes.
        let cjk = json!({"event_type": "big", "payload": {"k": "灯".repeat(1400)}});
        assert!(run_as(&LogUserEvent, &state, &cjk, Role::Player).is_err());
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = demo();
        for bad in [
            json!({}),
            json!({"event_type": ""}),
            json!({"event_type": "UI.Open"}),
            json!({"event_type": "open map"}),
            json!({"event_type": "a".repeat(65)}),
            json!({"event_type": "ok", "user_id": ""}),
            json!({"event_type": "ok", "user_id": "u".repeat(MAX_USER_ID_CHARS + 1)}),
            json!({"event_type": "ok", "payload": [1, 2]}),
            json!({"event_type": "ok", "payload": "text"}),
            json!({"event_type": "ok", "payload": null}),
            json!({"event_type": "ok", "event_data": [1]}),
            json!({"event_type": "ok", "event_data": null}),
            json!({"event_type": "ok", "turn": 9}),
        ] {
            let e = invoke(&state, bad.clone(), Role::Player).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{bad}"
            );
        }
    }
}
