//! `roll_dice`: roll an `NdS+M` expression. The rolls are journalled, so
//! replay shows the same numbers.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ALL_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::dice::DiceExpr;

pub struct RollDice;

#[derive(Deserialize)]
struct Args {
    expression: String,
}

impl Tool for RollDice {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "roll_dice",
            version: "1.0.0",
            title: "Roll dice",
            description: "Roll dice written as NdS+M, for example 2d6+1 or d20 (at most 100 dice of at most \
                1000 sides). Use it whenever chance decides an outcome.",
            category: "dice",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "expression": {"type": "string", "minLength": 2, "maxLength": 32},
                    "reason": {"type": "string", "maxLength": 200}
                },
                "required": ["expression"],
                "additionalProperties": false
            }),
            output_schema: json!({
                "type": "object",
                "required": ["expression", "rolls", "modifier", "total"],
                "properties": {
                    "expression": {"type": "string"},
                    "rolls": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "modifier": {"type": "integer"},
                    "total": {"type": "integer"}
                }
            }),
            writes_state: false,
            needs_session: false,
            roles: ALL_ROLES,
            enabled: true,
            ai_callable: true,
            read_only: true,
            idempotent: false,
        }
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let expr = DiceExpr::parse(&args.expression).map_err(ToolError::invalid_args)?;
        let roll = expr.roll(ctx.rng);
        Ok(ToolOutput {
            result: serde_json::to_value(roll)
                .map_err(|e| ToolError::invalid_args(e.to_string()))?,
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use crate::game::rng::SplitMix64;
    use crate::tools::test_support::demo;

    #[test]
    fn rolls_and_refuses_nonsense() {
        let state = demo();
        let mut rng = SplitMix64::new(5);
        let out = RollDice
            .run(
                &json!({"expression": "2d6+1"}),
                &mut ToolContext {
                    state: &state,
                    rng: &mut rng,
                },
            )
            .unwrap();
        let total = out.result["total"].as_i64().unwrap();
        assert!((3..=13).contains(&total));
        let e = RollDice
            .run(
                &json!({"expression": "9999d6"}),
                &mut ToolContext {
                    state: &state,
                    rng: &mut rng,
                },
            )
            .unwrap_err();
        assert_eq!(e.reason, Reason::InvalidArgs);
    }
}
