//! `update_inventory`: change the quantities of items a character holds.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::add_inventory::{MAX_STACK, inventory_schema};
use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;

/// Most updates in one call.
pub const MAX_UPDATES: usize = 50;
/// Largest change to one item in one update.
pub const MAX_CHANGE: i64 = 10_000;

pub struct UpdateInventory;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// whose inventory; default the active character
    #[schemars(length(min = 1, max = 64))]
    character_id: Option<String>,
    #[schemars(length(min = 1, max = MAX_UPDATES))]
    updates: Vec<Update>,
}

// quantity_change is required unless its alias is given; both at once are
// refused by run().
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["quantityChange"]},
    "else" = {"required": ["quantity_change"]},
))]
struct Update {
    /// slug of an item held
    #[schemars(length(min = 1, max = 128))]
    slug: String,
    /// negative uses up or loses items, positive gains more
    #[schemars(range(min = -MAX_CHANGE, max = MAX_CHANGE), extend("not" = {"const": 0}))]
    quantity_change: Option<i64>,
    // Seed 001's spelling of `quantity_change`; exactly one is given.
    /// the same as quantity_change (give one of the two)
    #[serde(rename = "quantityChange")]
    #[schemars(range(min = -MAX_CHANGE, max = MAX_CHANGE), extend("not" = {"const": 0}))]
    quantity_change_camel: Option<i64>,
}

/// A field that may arrive under its snake_case name or its camelCase
/// alias: at most one of the two may be given. `at` names where, for the
/// message (e.g. `updates[0].`).
pub(super) fn aliased<T>(
    canonical: Option<T>,
    camel: Option<T>,
    at: &str,
    (name, alias): (&str, &str),
) -> Result<Option<T>, ToolError> {
    match (canonical, camel) {
        (Some(_), Some(_)) => Err(ToolError::invalid_args(format!(
            "{at}{name} and {at}{alias} are the same field under two names; give only one"
        ))),
        (one, other) => Ok(one.or(other)),
    }
}

impl Tool for UpdateInventory {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "update_inventory",
            "Update inventory",
            "character",
            "Use up, lose or gain more of items a character already holds (default: the active \
             character), by slug and a signed quantity_change; an item reaching 0 is removed. All \
             updates apply or none do; use add_inventory for new items.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["success", "message", "character_id", "changes", "inventory"],
                "properties": {
                    "success": {"const": true},
                    "message": {"type": "string"},
                    "character_id": {"type": "string"},
                    "changes": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["slug", "before", "after"],
                            "properties": {
                                "slug": {"type": "string"},
                                "before": {"type": "integer", "minimum": 0},
                                "after": {"type": "integer", "minimum": 0}
                            }
                        }
                    },
                    "inventory": inventory_schema()
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let id = args
            .character_id
            .unwrap_or_else(|| ctx.actor_id().to_string());
        let c = character(ctx.state, &id)?;
        if args.updates.is_empty() || args.updates.len() > MAX_UPDATES {
            return Err(ToolError::invalid_args(format!(
                "updates holds {}; give 1 to {MAX_UPDATES} updates",
                args.updates.len()
            )));
        }
        // Every update is applied to this copy; any error drops it whole.
        let mut inventory = c.inventory.clone();
        let mut changes = Vec::with_capacity(args.updates.len());
        let mut said = Vec::with_capacity(args.updates.len());
        for (i, u) in args.updates.iter().enumerate() {
            let at = format!("updates[{i}].");
            let change = aliased(
                u.quantity_change,
                u.quantity_change_camel,
                &at,
                ("quantity_change", "quantityChange"),
            )?
            .ok_or_else(|| ToolError::invalid_args(format!("{at}quantity_change is missing")))?;
            if change == 0 || !(-MAX_CHANGE..=MAX_CHANGE).contains(&change) {
                return Err(ToolError::invalid_args(format!(
                    "{at}quantity_change is {change}; give a non-zero change from -{MAX_CHANGE} to {MAX_CHANGE}"
                )));
            }
            let Some(pos) = inventory.iter().position(|it| it.slug == u.slug) else {
                let held: Vec<&str> = inventory.iter().map(|it| it.slug.as_str()).collect();
                let held = if held.is_empty() {
                    "nothing".to_owned()
                } else {
                    held.join(", ")
                };
                return Err(ToolError::new(
                    Reason::NotFound,
                    ErrorCode::InvalidArgs,
                    format!(
                        "{} holds no {:?}; slugs held: {held}; use add_inventory for new items",
                        c.name, u.slug
                    ),
                ));
            };
            let before = i64::from(inventory[pos].quantity);
            // Saturating: the change was bounded above, but the sum is never
            // left to chance.
            let after = before.saturating_add(change);
            if after < 0 {
                return Err(ToolError::invalid_args(format!(
                    "cannot take {} {} from {}: only {before} held",
                    -change, u.slug, c.name
                )));
            }
            if after > i64::from(MAX_STACK) {
                return Err(ToolError::invalid_args(format!(
                    "{} would hold {after} {}; at most {MAX_STACK}",
                    c.name, u.slug
                )));
            }
            match u32::try_from(after) {
                Ok(0) => {
                    inventory.remove(pos);
                }
                Ok(q) => inventory[pos].quantity = q,
                Err(_) => {
                    return Err(ToolError::invalid_args(format!(
                        "{} cannot hold {after} {}",
                        c.name, u.slug
                    )));
                }
            }
            said.push(format!("{} {before} → {after}", u.slug));
            changes.push(json!({"slug": u.slug, "before": before, "after": after}));
        }
        Ok(ToolOutput {
            result: json!({
                "success": true,
                "message": format!("{}'s inventory: {}.", c.name, said.join(", ")),
                "character_id": c.character_id,
                "changes": changes,
                "inventory": inventory,
            }),
            effect: Some(Effect::SetInventory {
                character_id: c.character_id.clone(),
                inventory,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;

    use crate::tools::Role;
    use crate::tools::test_support::{assert_refusals, ctx_run, demo, pipeline};

    fn invoke(state: &GameState, args: Value) -> Result<ToolOutput, ToolError> {
        pipeline("update_inventory", state, args, Role::GameMaster)
    }

    fn held(state: &GameState, id: &str) -> Vec<(String, u32)> {
        state
            .character(id)
            .unwrap()
            .inventory
            .iter()
            .map(|i| (i.slug.clone(), i.quantity))
            .collect()
    }

    #[test]
    fn applies_in_order_and_removes_empty_stacks() {
        let mut state = demo();
        let args = json!({"updates": [
            {"slug": "torch", "quantity_change": -1},
            {"slug": "healing_potion", "quantity_change": -1},
            {"slug": "torch", "quantity_change": 4},
            {"slug": "rope", "quantity_change": 2}
        ]});
        let out = ctx_run(&UpdateInventory, &state, &args).unwrap();
        assert_eq!(out.result["character_id"], "pc_001");
        assert_eq!(
            out.result["changes"],
            json!([
                {"slug": "torch", "before": 2, "after": 1},
                {"slug": "healing_potion", "before": 1, "after": 0},
                {"slug": "torch", "before": 1, "after": 5},
                {"slug": "rope", "before": 1, "after": 3}
            ])
        );
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(
            held(&state, "pc_001"),
            vec![("torch".into(), 5), ("rope".into(), 3)]
        );
        assert_eq!(
            out.result["inventory"],
            serde_json::to_value(&state.character("pc_001").unwrap().inventory).unwrap()
        );
        let once = state.clone();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state, once, "the effect holds absolute values");

        let out = ctx_run(
            &UpdateInventory,
            &state,
            &json!({"character_id": "npc_001", "updates": [{"slug": "lamp_oil", "quantity_change": -3}]}),
        )
        .unwrap();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(held(&state, "npc_001"), vec![("brass_key".into(), 1)]);
    }

    #[test]
    fn any_error_means_no_effect() {
        let state = demo();
        let cases = [
            (
                json!({"updates": [{"slug": "torch", "quantity_change": -1}, {"slug": "lantern", "quantity_change": 1}]}),
                Reason::NotFound,
                "no \"lantern\"; slugs held: torch, rope, healing_potion",
            ),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": -3}]}),
                Reason::InvalidArgs,
                "only 2 held",
            ),
            (
                json!({"updates": [{"slug": "healing_potion", "quantity_change": -1}, {"slug": "healing_potion", "quantity_change": -1}]}),
                Reason::NotFound,
                "no \"healing_potion\"",
            ),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": 0}]}),
                Reason::InvalidArgs,
                "non-zero",
            ),
            (
                json!({"character_id": "ghost", "updates": [{"slug": "torch", "quantity_change": 1}]}),
                Reason::NotFound,
                "pc_001",
            ),
            (json!({"updates": []}), Reason::InvalidArgs, "1 to 50"),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": i64::MIN}]}),
                Reason::InvalidArgs,
                "non-zero",
            ),
        ];
        assert_refusals(cases, |a| ctx_run(&UpdateInventory, &state, a));
    }

    #[test]
    fn the_seeds_quantity_change_spelling_is_the_same_field() {
        let state = demo();
        let snake = invoke(
            &state,
            json!({"updates": [{"slug": "torch", "quantity_change": -1}]}),
        )
        .unwrap();
        // Seed 001's `updates: Array<{slug, quantityChange}>`.
        let camel = invoke(
            &state,
            json!({"updates": [{"slug": "torch", "quantityChange": -1}]}),
        )
        .unwrap();
        assert_eq!(camel, snake);
        assert_eq!(
            camel.result["changes"],
            json!([{"slug": "torch", "before": 2, "after": 1}])
        );
        // The alias is checked like the field, by the schema and by run().
        let e = invoke(
            &state,
            json!({"updates": [{"slug": "torch", "quantityChange": 0}]}),
        )
        .unwrap_err();
        assert!(
            e.message.contains("/updates/0/quantityChange"),
            "{}",
            e.message
        );
        let both = json!({"updates": [
            {"slug": "rope", "quantity_change": 1},
            {"slug": "torch", "quantity_change": -1, "quantityChange": -1}
        ]});
        for e in [
            invoke(&state, both.clone()).unwrap_err(),
            ctx_run(&UpdateInventory, &state, &both).unwrap_err(),
        ] {
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs)
            );
            assert!(
                e.message.contains(
                    "updates[1].quantity_change and updates[1].quantityChange are the same field"
                ),
                "{}",
                e.message
            );
        }
        let e = ctx_run(
            &UpdateInventory,
            &state,
            &json!({"updates": [{"slug": "torch"}]}),
        )
        .unwrap_err();
        assert!(
            e.message.contains("updates[0].quantity_change is missing"),
            "{}",
            e.message
        );
    }

    #[test]
    fn stacks_stay_under_the_cap() {
        let mut state = demo();
        let mut inventory = state.character("pc_001").unwrap().inventory.clone();
        inventory[0].quantity = MAX_STACK - 5;
        state.apply(&Effect::SetInventory {
            character_id: "pc_001".into(),
            inventory,
        });
        let e = ctx_run(
            &UpdateInventory,
            &state,
            &json!({"updates": [{"slug": "torch", "quantity_change": 6}]}),
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::InvalidArgs);
        assert!(e.message.contains("at most 1000000"), "{}", e.message);
    }

    #[test]
    fn an_empty_inventory_says_so() {
        let mut state = demo();
        state.apply(&Effect::SetInventory {
            character_id: "pc_001".into(),
            inventory: vec![],
        });
        let e = ctx_run(
            &UpdateInventory,
            &state,
            &json!({"updates": [{"slug": "torch", "quantity_change": 1}]}),
        )
        .unwrap_err();
        assert!(e.message.contains("slugs held: nothing"), "{}", e.message);
    }

    #[test]
    fn the_schema_refuses_bad_shapes() {
        let state = demo();
        let many: Vec<Value> = (0..51)
            .map(|_| json!({"slug": "torch", "quantity_change": 1}))
            .collect();
        let cases = [
            (json!({}), "updates"),
            (json!({"updates": []}), "/updates"),
            (json!({"updates": many}), "/updates"),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": 0}]}),
                "/updates/0/quantity_change",
            ),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": 10001}]}),
                "/updates/0/quantity_change",
            ),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": 1.5}]}),
                "/updates/0/quantity_change",
            ),
            (json!({"updates": [{"slug": "torch"}]}), "quantity_change"),
            (
                json!({"updates": [{"slug": "", "quantity_change": 1}]}),
                "/updates/0/slug",
            ),
            (
                json!({"updates": [{"slug": "torch", "quantity_change": 1, "note": "x"}]}),
                "/updates/0",
            ),
        ];
        for (args, text) in cases {
            let e = invoke(&state, args.clone()).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{args}");
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
        let ok = invoke(
            &state,
            json!({"updates": [{"slug": "torch", "quantity_change": -2}]}),
        )
        .unwrap();
        assert_eq!(ok.result["changes"][0]["after"], 0);
    }
}
