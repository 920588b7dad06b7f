//! `hp_delta`: damage or heal a character, clamped to 0..=max_hp.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::game::{CharacterState, Effect};

/// Largest change in one call.
pub const MAX_DELTA: i64 = 10_000;

pub struct HpDelta;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(min = 1))]
    target_character_id: String,
    #[schemars(range(min = -MAX_DELTA, max = MAX_DELTA))]
    delta: i64,
    #[schemars(length(max = 200))]
    cause: Option<String>,
}

impl Tool for HpDelta {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "hp_delta",
            "Change HP",
            "character",
            "Damage (negative delta) or heal (positive delta) a character, with the cause. HP stays \
             within 0..max_hp; a character at 0 HP is downed and cannot act until healed.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["character_id", "hp_before", "hp", "max_hp", "state", "downed"],
                "properties": {
                    "character_id": {"type": "string"},
                    "hp_before": {"type": "integer"},
                    "hp": {"type": "integer", "minimum": 0},
                    "max_hp": {"type": "integer"},
                    "state": {"enum": ["active", "downed"]},
                    "downed": {"type": "boolean"},
                    "cause": {"type": ["string", "null"]}
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        // The schema bounds delta too; checked again because run() is the
        // last word on what a caller may do, whoever called it.
        if !(-MAX_DELTA..=MAX_DELTA).contains(&args.delta) {
            return Err(ToolError::invalid_args(format!(
                "delta {} is out of range; give -{MAX_DELTA} to {MAX_DELTA}",
                args.delta
            )));
        }
        let c = character(ctx.state, &args.target_character_id)?;
        // Saturating, and max_hp floored at 0 (clamp panics when its lower
        // bound is above its upper), so even a damaged save with extreme
        // numbers cannot overflow or panic here.
        let hp = c.hp.saturating_add(args.delta).clamp(0, c.max_hp.max(0));
        let state = if hp == 0 {
            CharacterState::Downed
        } else {
            CharacterState::Active
        };
        Ok(ToolOutput {
            result: json!({
                "character_id": c.character_id,
                "hp_before": c.hp,
                "hp": hp,
                "max_hp": c.max_hp,
                "state": state,
                "downed": state == CharacterState::Downed,
                "cause": args.cause,
            }),
            effect: Some(Effect::Hp {
                character_id: c.character_id.clone(),
                hp,
                state,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use crate::tools::test_support::{ctx_run, demo};

    #[test]
    fn clamps_and_downs() {
        let mut state = demo();
        let max = state.character("pc_001").unwrap().max_hp;
        let cases = [
            (-5, max - 5, "active"),
            (-1000, 0, "downed"),
            (3, 3, "active"),
            (1000, max, "active"),
        ];
        for (delta, hp, st) in cases {
            let args = json!({"target_character_id": "pc_001", "delta": delta, "cause": "test"});
            let out = ctx_run(&HpDelta, &state, &args).unwrap();
            assert_eq!(
                (out.result["hp"].as_i64(), out.result["state"].as_str()),
                (Some(hp), Some(st)),
                "delta {delta}"
            );
            state.apply(out.effect.as_ref().unwrap());
        }
    }

    #[test]
    fn unknown_characters_are_not_found() {
        let e = ctx_run(
            &HpDelta,
            &demo(),
            &json!({"target_character_id": "ghost", "delta": -1}),
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::NotFound);
    }

    /// The demo with pc_001's hp and max_hp set as given, as only a damaged
    /// or hand-made save could hold them.
    fn with_hp(hp: i64, max_hp: i64) -> crate::game::GameState {
        let mut state = demo();
        let c = state
            .characters
            .iter_mut()
            .find(|c| c.character_id == *"pc_001")
            .map(std::sync::Arc::make_mut)
            .unwrap();
        c.hp = hp;
        c.max_hp = max_hp;
        state
    }

    #[test]
    fn extreme_numbers_are_refused_or_saturate_never_panic() {
        for delta in [i64::MIN, i64::MAX, -MAX_DELTA - 1, MAX_DELTA + 1] {
            let e = ctx_run(
                &HpDelta,
                &demo(),
                &json!({"target_character_id": "pc_001", "delta": delta}),
            )
            .unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{delta}");
        }
        // (hp, max_hp, delta, hp after)
        let cases = [
            (i64::MAX, i64::MAX, MAX_DELTA, i64::MAX),
            (i64::MIN, 10, -MAX_DELTA, 0),
            (5, -3, 1, 0),
            (5, i64::MIN, -1, 0),
        ];
        for (hp, max_hp, delta, after) in cases {
            let out = ctx_run(
                &HpDelta,
                &with_hp(hp, max_hp),
                &json!({"target_character_id": "pc_001", "delta": delta}),
            )
            .unwrap();
            assert_eq!(
                out.result["hp"].as_i64(),
                Some(after),
                "{hp} {max_hp} {delta}"
            );
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn extreme() -> impl Strategy<Value = i64> {
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(0),
                -MAX_DELTA - 2..=MAX_DELTA + 2,
                any::<i64>(),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_numbers_give_an_answer_within_bounds(
                hp in extreme(),
                max_hp in extreme(),
                delta in extreme(),
            ) {
                let args = json!({"target_character_id": "pc_001", "delta": delta});
                match ctx_run(&HpDelta, &with_hp(hp, max_hp), &args) {
                    Ok(out) => {
                        let after = out.result["hp"].as_i64().unwrap();
                        prop_assert!((0..=max_hp.max(0)).contains(&after));
                        prop_assert!((-MAX_DELTA..=MAX_DELTA).contains(&delta));
                    }
                    Err(e) => prop_assert_eq!(e.reason, Reason::InvalidArgs),
                }
            }
        }
    }
}
