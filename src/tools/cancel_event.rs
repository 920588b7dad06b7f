//! `cancel_event`: a pending timer is dropped, by its id or by the key it
//! was scheduled under (docs/protocol.md §9). Cancelling one that is not
//! pending changes nothing and says so.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::Effect;
use crate::game::timers::MAX_KEY_CHARS;

pub struct CancelEvent;

// Exactly one of timer_id and key; run() says so to a direct call too.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {"required": ["timer_id"]},
    {"required": ["key"]}
]))]
struct Args {
    /// the timer_id schedule_event answered (give this or key)
    #[schemars(length(min = 1, max = 64))]
    timer_id: Option<String>,
    /// the key the timer was scheduled under (give this or timer_id)
    #[schemars(length(min = 1, max = MAX_KEY_CHARS))]
    key: Option<String>,
}

impl Tool for CancelEvent {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "cancel_event",
            "Cancel event",
            "world",
            "Cancel a pending timer made by schedule_event, by its timer_id or by its key, so it \
             never happens. Answers whether one was pending.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["cancelled"],
                "properties": {"cancelled": {"type": "boolean"}}
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let timers = &ctx.state.timers;
        let found = match (args.timer_id.as_deref(), args.key.as_deref()) {
            (Some(timer_id), None) => timers.get(timer_id),
            (None, Some(key)) => timers.by_key(key.trim()),
            _ => {
                return Err(ToolError::invalid_args(
                    "give exactly one of timer_id and key",
                ));
            }
        };
        Ok(ToolOutput {
            result: json!({"cancelled": found.is_some()}),
            effect: found.map(|t| Effect::TimerCancelled {
                timer_id: t.timer_id.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use crate::game::GameState;
    use crate::tools::Role;
    use crate::tools::test_support::{assert_refusals, ctx_run, demo, pipeline};

    fn run(state: &mut GameState, tool: &str, args: Value) -> Value {
        let out = pipeline(tool, state, args, Role::GameMaster).expect("the call runs");
        if let Some(effect) = &out.effect {
            state.apply(effect);
        }
        out.result
    }

    #[test]
    fn a_timer_is_cancelled_by_id_and_by_key_and_an_unknown_one_is_not() {
        let mut state = demo();
        let by_id = run(
            &mut state,
            "schedule_event",
            json!({"event": "tide", "delay_s": 600}),
        );
        run(
            &mut state,
            "schedule_event",
            json!({"event": "bells", "delay_s": 900, "key": "bells"}),
        );
        assert_eq!(state.timers.len(), 2);
        let id = by_id["timer_id"].clone();
        assert_eq!(
            run(&mut state, "cancel_event", json!({"timer_id": id})),
            json!({"cancelled": true})
        );
        assert_eq!(state.timers.len(), 1);
        assert_eq!(
            run(&mut state, "cancel_event", json!({"key": "bells"})),
            json!({"cancelled": true})
        );
        assert!(state.timers.is_empty());
        // Gone already, or never there: nothing to cancel, no effect.
        for args in [
            json!({"timer_id": id}),
            json!({"key": "bells"}),
            json!({"timer_id": "tmr_0000000000000000"}),
        ] {
            let out = pipeline("cancel_event", &state, args.clone(), Role::GameMaster).unwrap();
            assert_eq!(out.result, json!({"cancelled": false}), "{args}");
            assert_eq!(out.effect, None, "{args}");
        }
    }

    #[test]
    fn one_of_timer_id_and_key_is_required() {
        let state = demo();
        assert_refusals(
            [
                (json!({}), Reason::InvalidArgs, "oneOf"),
                (
                    json!({"timer_id": "tmr_1", "key": "k"}),
                    Reason::InvalidArgs,
                    "oneOf",
                ),
                (json!({"timer_id": ""}), Reason::InvalidArgs, "/timer_id"),
            ],
            |args| pipeline("cancel_event", &state, args.clone(), Role::GameMaster),
        );
        assert_refusals([(json!({}), Reason::InvalidArgs, "exactly one")], |args| {
            ctx_run(&CancelEvent, &state, args)
        });
    }
}
