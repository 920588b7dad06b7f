//! `roll_dice`: roll an `NdS+M` expression. The rolls are journalled, so
//! replay shows the same numbers.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::dice::{DiceExpr, MAX_DICE, MAX_MODIFIER, MAX_SIDES, MAX_TOTAL, MIN_TOTAL};

pub struct RollDice;

/// Longest reason for a roll, in characters.
pub const MAX_REASON: usize = 200;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// dice notation, e.g. 1d20+5
    #[schemars(length(min = 2, max = 32))]
    dice: String,
    // Required, as seed 001's definition has it (`required: ['dice', 'reason']`).
    /// what the roll is for, e.g. Perception check
    #[schemars(length(min = 1, max = MAX_REASON), pattern(r"\S"))]
    reason: String,
}

impl Tool for RollDice {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "roll_dice",
            "Roll dice",
            "dice",
            "Roll dice written as NdS+M, for example 1d20+5 or 2d6 (at most 100 dice of at most 1000 \
             sides), with the reason for the roll. Use it whenever chance decides an outcome.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["dice", "rolls", "modifier", "total", "description"],
                "properties": {
                    "dice": {"type": "string"},
                    "rolls": {
                        "type": "array",
                        "maxItems": MAX_DICE,
                        "items": {"type": "integer", "minimum": 1, "maximum": MAX_SIDES}
                    },
                    "modifier": {"type": "integer", "minimum": -MAX_MODIFIER, "maximum": MAX_MODIFIER},
                    "total": {"type": "integer", "minimum": MIN_TOTAL, "maximum": MAX_TOTAL},
                    "description": {"type": "string"},
                    "reason": {"type": "string"}
                }
            }),
        )
        .not_idempotent()
        .sessionless()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let reason = args.reason.trim();
        if reason.is_empty() || reason.chars().count() > MAX_REASON {
            return Err(ToolError::invalid_args(format!(
                "reason must say what the roll is for in 1 to {MAX_REASON} characters, e.g. \"Perception check\""
            )));
        }
        let expr = DiceExpr::parse(&args.dice).map_err(ToolError::invalid_args)?;
        let roll = expr.roll(ctx.rng);
        let rolls: Vec<String> = roll.rolls.iter().map(u32::to_string).collect();
        let modifier = match roll.modifier {
            0 => String::new(),
            m if m > 0 => format!(" + {m}"),
            m => format!(" - {}", -m),
        };
        let description = format!(
            "{} for {reason}: [{}]{modifier} = {}",
            roll.expression,
            rolls.join(", "),
            roll.total
        );
        Ok(ToolOutput {
            result: json!({
                "dice": roll.expression,
                "rolls": roll.rolls,
                "modifier": roll.modifier,
                "total": roll.total,
                "description": description,
                "reason": reason,
            }),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, Reason};
    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline};

    #[test]
    fn rolls_describe_themselves_and_nonsense_is_refused() {
        let state = demo();
        let out = ctx_run(
            &RollDice,
            &state,
            &json!({"dice": "1d20+5", "reason": "stealth"}),
        )
        .unwrap();
        let total = out.result["total"].as_i64().unwrap();
        assert!((6..=25).contains(&total));
        let description = out.result["description"].as_str().unwrap();
        assert!(
            description.starts_with("1d20+5 for stealth: [")
                && description.ends_with(&format!("+ 5 = {total}")),
            "{description}"
        );
        for bad in [
            json!({"dice": "9999d6", "reason": "r"}),
            json!({"dice": "d", "reason": "r"}),
            json!({"dice": "2d6+x", "reason": "r"}),
        ] {
            let e = ctx_run(&RollDice, &state, &bad).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{bad}");
        }
    }

    #[test]
    fn numbers_past_every_bound_are_invalid_args_not_rolls() {
        let state = demo();
        for dice in [
            "1d6--9223372036854775808",
            "1d6+9223372036854775807",
            "99999999999d6",
            "1d99999999999",
        ] {
            let e = ctx_run(&RollDice, &state, &json!({"dice": dice, "reason": "r"})).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{dice}");
        }
    }

    #[test]
    fn a_reason_is_required_as_seed_001_defines_it() {
        let state = demo();
        // Seed 001's call, through the whole pipeline.
        let out = pipeline(
            "roll_dice",
            &state,
            json!({"dice": "1d20+2", "reason": "Investigation check for traps"}),
            Role::GameMaster,
        )
        .unwrap();
        assert_eq!(out.result["reason"], "Investigation check for traps");
        let description = out.result["description"].as_str().unwrap();
        assert!(
            description.starts_with("1d20+2 for Investigation check for traps: ["),
            "{description}"
        );
        let long = "r".repeat(MAX_REASON + 1);
        for (args, text) in [
            (json!({"dice": "1d6"}), "reason"),
            (json!({"dice": "1d6", "reason": ""}), "/reason"),
            (json!({"dice": "1d6", "reason": "   "}), "/reason"),
            (json!({"dice": "1d6", "reason": long}), "/reason"),
            (json!({"dice": "1d6", "reason": 3}), "/reason"),
        ] {
            let e = pipeline("roll_dice", &state, args.clone(), Role::GameMaster).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{args}"
            );
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
        // A direct call (no schema) is held to the same rule.
        let e = ctx_run(&RollDice, &state, &json!({"dice": "1d6", "reason": " "})).unwrap_err();
        assert!(e.message.contains("reason must say"), "{}", e.message);
        let out = ctx_run(
            &RollDice,
            &state,
            &json!({"dice": "1d6", "reason": " luck "}),
        )
        .unwrap();
        assert_eq!(out.result["reason"], "luck", "trimmed");
    }
}
