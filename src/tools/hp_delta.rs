//! `hp_delta`: damage or heal a character, clamped to 0..=max_hp.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Role, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::game::{CharacterState, Effect};

/// Largest change in one call.
pub const MAX_DELTA: i64 = 10_000;

pub struct HpDelta;

#[derive(Deserialize)]
struct Args {
    character_id: String,
    delta: i64,
}

impl Tool for HpDelta {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "hp_delta",
            version: "1.0.0",
            title: "Change HP",
            description: "Damage (negative delta) or heal (positive delta) a character. HP stays within \
                0..max_hp; a character at 0 HP is down and cannot move until healed.",
            category: "character",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "character_id": {"type": "string", "minLength": 1},
                    "delta": {"type": "integer", "minimum": -MAX_DELTA, "maximum": MAX_DELTA},
                    "reason": {"type": "string", "maxLength": 200}
                },
                "required": ["character_id", "delta"],
                "additionalProperties": false
            }),
            output_schema: json!({
                "type": "object",
                "required": ["character_id", "hp_before", "hp", "max_hp", "state"],
                "properties": {
                    "character_id": {"type": "string"},
                    "hp_before": {"type": "integer"},
                    "hp": {"type": "integer", "minimum": 0},
                    "max_hp": {"type": "integer"},
                    "state": {"enum": ["active", "down"]}
                }
            }),
            writes_state: true,
            needs_session: true,
            roles: &[Role::GameMaster, Role::Service, Role::Admin],
            enabled: true,
            ai_callable: true,
            read_only: false,
            idempotent: false,
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let c = character(ctx.state, &args.character_id)?;
        let hp = (c.hp + args.delta).clamp(0, c.max_hp);
        let state = if hp == 0 {
            CharacterState::Down
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
    use crate::game::rng::SplitMix64;
    use crate::tools::test_support::demo;

    #[test]
    fn clamps_and_downs() {
        let mut state = demo();
        let max = state.character("pc_001").unwrap().max_hp;
        let cases = [
            (-5, max - 5, "active"),
            (-1000, 0, "down"),
            (3, 3, "active"),
            (1000, max, "active"),
        ];
        for (delta, hp, st) in cases {
            let out = HpDelta
                .run(
                    &json!({"character_id": "pc_001", "delta": delta}),
                    &mut ToolContext {
                        state: &state,
                        rng: &mut SplitMix64::new(0),
                    },
                )
                .unwrap();
            assert_eq!(
                (out.result["hp"].as_i64(), out.result["state"].as_str()),
                (Some(hp), Some(st)),
                "delta {delta}"
            );
            state.apply(out.effect.as_ref().unwrap());
        }
    }
}
