//! `hp_delta`: damage or heal a character, clamped to 0..=max_hp.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::game::{CharacterState, Effect};

/// Largest change in one call.
pub const MAX_DELTA: i64 = 10_000;

pub struct HpDelta;

#[derive(Deserialize)]
struct Args {
    target_character_id: String,
    delta: i64,
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
            json!({
                "type": "object",
                "properties": {
                    "target_character_id": {"type": "string", "minLength": 1},
                    "delta": {"type": "integer", "minimum": -MAX_DELTA, "maximum": MAX_DELTA},
                    "cause": {"type": "string", "maxLength": 200}
                },
                "required": ["target_character_id", "delta"],
                "additionalProperties": false
            }),
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
        let c = character(ctx.state, &args.target_character_id)?;
        let hp = (c.hp + args.delta).clamp(0, c.max_hp);
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
}
