//! `add_inventory`: give items to a character, stacking by slug.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::error::{ErrorCode, Reason};
use crate::game::{Effect, Item};

/// Most items in one call.
pub const MAX_ITEMS: usize = 20;
/// Most of one item added in one call.
pub const MAX_ADD: u32 = 10_000;
// The stack and inventory bounds are the save state's own, shared with
// campaigns.
pub use crate::game::state::{MAX_INVENTORY_ITEMS, MAX_STACK};
/// Longest slug [`slugify`] makes, in characters (the explicit-slug limit).
pub const MAX_SLUG_CHARS: usize = 64;

pub struct AddInventory;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// who receives the items; default the active character
    #[schemars(length(min = 1, max = 64))]
    character_id: Option<String>,
    #[schemars(length(min = 1, max = MAX_ITEMS))]
    items: Vec<NewItem>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NewItem {
    #[schemars(length(min = 1, max = 80))]
    name: String,
    #[schemars(length(max = 300))]
    description: Option<String>,
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_ADD))]
    quantity: u32,
    /// stack to add to; default made from the name
    #[schemars(pattern("^[a-z0-9_]{1,64}$"))]
    slug: Option<String>,
}

fn one() -> u32 {
    1
}

/// A stable machine name for `name`: lower case, each run of characters that
/// are not letters or digits (any script, so CJK is kept) turned into one `_`,
/// no `_` at either end, at most [`MAX_SLUG_CHARS`] characters; `item` when
/// nothing is left.
pub(crate) fn slugify(name: &str) -> String {
    let mut slug = String::new();
    let mut gap = false;
    for c in name.chars() {
        if c.is_alphanumeric() {
            if gap && !slug.is_empty() {
                slug.push('_');
            }
            gap = false;
            slug.extend(c.to_lowercase());
        } else {
            gap = true;
        }
    }
    let slug: String = slug.chars().take(MAX_SLUG_CHARS).collect();
    let slug = slug.trim_end_matches('_');
    if slug.is_empty() {
        "item".to_owned()
    } else {
        slug.to_owned()
    }
}

/// Whether `slug` matches `^[a-z0-9_]{1,64}$`, the rule for given slugs.
pub(crate) fn valid_slug(slug: &str) -> bool {
    (1..=MAX_SLUG_CHARS).contains(&slug.len())
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The JSON Schema of an inventory as tools return it.
pub(crate) fn inventory_schema() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["slug", "name", "quantity"],
            "properties": {
                "slug": {"type": "string"},
                "name": {"type": "string"},
                "description": {"type": "string"},
                "quantity": {"type": "integer", "minimum": 1}
            }
        }
    })
}

impl Tool for AddInventory {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "add_inventory",
            "Add inventory",
            "character",
            "Give items to a character (default: the active character). An item whose slug (default: \
             its name in lower case with underscores, e.g. healing_potion) is already held adds to \
             that stack; other items are added as new stacks.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["success", "message", "character_id", "added", "inventory"],
                "properties": {
                    "success": {"const": true},
                    "message": {"type": "string"},
                    "character_id": {"type": "string"},
                    "added": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["slug", "name", "quantity"],
                            "properties": {
                                "slug": {"type": "string"},
                                "name": {"type": "string"},
                                "quantity": {"type": "integer", "minimum": 1}
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
        if args.items.is_empty() || args.items.len() > MAX_ITEMS {
            return Err(ToolError::invalid_args(format!(
                "items holds {}; give 1 to {MAX_ITEMS} items",
                args.items.len()
            )));
        }
        let mut inventory = c.inventory.clone();
        let mut added = Vec::with_capacity(args.items.len());
        let mut said = Vec::with_capacity(args.items.len());
        for (i, item) in args.items.into_iter().enumerate() {
            let name = item.name.trim();
            if name.is_empty() {
                return Err(ToolError::invalid_args(format!(
                    "items[{i}].name is blank; give the item's name"
                )));
            }
            if !(1..=MAX_ADD).contains(&item.quantity) {
                return Err(ToolError::invalid_args(format!(
                    "items[{i}].quantity is {}; give 1 to {MAX_ADD}",
                    item.quantity
                )));
            }
            let slug = match item.slug {
                Some(s) if valid_slug(&s) => s,
                Some(s) => {
                    return Err(ToolError::invalid_args(format!(
                        "items[{i}].slug {s:?} must be 1 to 64 of a-z, 0-9 and _; or leave it out"
                    )));
                }
                None => slugify(name),
            };
            let stack = match inventory.iter().position(|it| it.slug == slug) {
                Some(at) => &mut inventory[at],
                None if inventory.len() >= MAX_INVENTORY_ITEMS => {
                    return Err(ToolError::new(
                        Reason::InvalidActorState,
                        ErrorCode::InvalidArgs,
                        format!(
                            "{} already carries {} kinds of items, the most one character may \
                             hold; add to a stack held or use some up first",
                            c.name,
                            inventory.len()
                        ),
                    ));
                }
                None => {
                    inventory.push(Item {
                        slug: slug.clone(),
                        name: name.to_owned(),
                        description: item
                            .description
                            .as_deref()
                            .map(str::trim)
                            .unwrap_or_default()
                            .to_owned(),
                        quantity: 0,
                    });
                    let last = inventory.len() - 1;
                    &mut inventory[last]
                }
            };
            let total = stack
                .quantity
                .checked_add(item.quantity)
                .filter(|t| *t <= MAX_STACK)
                .ok_or_else(|| {
                    ToolError::invalid_args(format!(
                        "{} already holds {} {slug}; adding {} would pass the limit of {MAX_STACK}",
                        c.name, stack.quantity, item.quantity
                    ))
                })?;
            stack.quantity = total;
            said.push(format!("{} × {}", item.quantity, stack.name));
            added.push(json!({"slug": slug, "name": stack.name, "quantity": item.quantity}));
        }
        Ok(ToolOutput {
            result: json!({
                "success": true,
                "message": format!("Added to {}'s inventory: {}.", c.name, said.join(", ")),
                "character_id": c.character_id,
                "added": added,
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

    /// Runs through the whole pipeline, schema included.
    fn invoke(state: &GameState, args: Value, role: Role) -> Result<ToolOutput, ToolError> {
        pipeline("add_inventory", state, args, role)
    }

    fn held(state: &GameState, id: &str) -> Vec<(String, String, u32)> {
        state
            .character(id)
            .unwrap()
            .inventory
            .iter()
            .map(|i| (i.slug.clone(), i.name.clone(), i.quantity))
            .collect()
    }

    #[test]
    fn slugs_are_made_from_names() {
        let long = "a".repeat(80);
        let cases = [
            ("Healing Potion", "healing_potion"),
            ("  Rope (50 ft) ", "rope_50_ft"),
            ("a_-_b", "a_b"),
            ("ÉPÉE Noire", "épée_noire"),
            ("老马的灯笼", "老马的灯笼"),
            ("Lantern 灯笼!", "lantern_灯笼"),
            ("!!!", "item"),
            ("", "item"),
            (long.as_str(), &long[..64]),
        ];
        for (name, slug) in cases {
            assert_eq!(slugify(name), slug, "{name:?}");
        }
        let cut = format!("{}-b", "a".repeat(63));
        assert_eq!(slugify(&cut), "a".repeat(63), "no _ left at the cut");
    }

    #[test]
    fn stacks_by_slug_and_appends_in_order() {
        let mut state = demo();
        let args = json!({"items": [
            {"name": "TORCH", "quantity": 3, "description": "ignored for a held stack"},
            {"name": "Silver Bell", "description": " rings under water "},
            {"name": "Lamp oil", "slug": "oil", "quantity": 2},
            {"name": "silver bell"}
        ]});
        let out = ctx_run(&AddInventory, &state, &args).unwrap();
        assert_eq!(
            out.result["character_id"], "pc_001",
            "defaults to the active actor"
        );
        assert_eq!(
            out.result["added"],
            json!([
                {"slug": "torch", "name": "Torch", "quantity": 3},
                {"slug": "silver_bell", "name": "Silver Bell", "quantity": 1},
                {"slug": "oil", "name": "Lamp oil", "quantity": 2},
                {"slug": "silver_bell", "name": "Silver Bell", "quantity": 1}
            ])
        );
        state.apply(out.effect.as_ref().unwrap());
        let want: Vec<(String, String, u32)> = [
            ("torch", "Torch", 5),
            ("rope", "Rope (50 ft)", 1),
            ("healing_potion", "Healing Potion", 1),
            ("silver_bell", "Silver Bell", 2),
            ("oil", "Lamp oil", 2),
        ]
        .iter()
        .map(|(s, n, q)| (s.to_string(), n.to_string(), *q))
        .collect();
        assert_eq!(held(&state, "pc_001"), want);
        let bell = &state.character("pc_001").unwrap().inventory[3];
        assert_eq!(bell.description, "rings under water");
        assert!(
            state.character("pc_001").unwrap().inventory[0]
                .description
                .is_empty()
        );
        assert_eq!(
            out.result["inventory"],
            serde_json::to_value(&state.character("pc_001").unwrap().inventory).unwrap()
        );

        // Applying the same effect again changes nothing more.
        let once = state.clone();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state, once);
    }

    #[test]
    fn another_character_can_be_named() {
        let mut state = demo();
        let out = ctx_run(
            &AddInventory,
            &state,
            &json!({"character_id": "npc_001", "items": [{"name": "Brass Key"}]}),
        )
        .unwrap();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(
            held(&state, "npc_001")[1],
            ("brass_key".into(), "Brass Key".into(), 2)
        );
        assert_eq!(
            held(&state, "pc_001").len(),
            3,
            "the active actor is untouched"
        );
    }

    #[test]
    fn refuses_bad_calls_without_an_effect() {
        let mut state = demo();
        state.apply(&Effect::SetInventory {
            character_id: "pc_001".into(),
            inventory: vec![Item {
                slug: "coin".into(),
                name: "Coin".into(),
                description: String::new(),
                quantity: MAX_STACK - 1,
            }],
        });
        let cases = [
            (
                json!({"character_id": "ghost", "items": [{"name": "Coin"}]}),
                Reason::NotFound,
                "pc_001",
            ),
            (
                json!({"items": [{"name": "Coin", "quantity": 2}]}),
                Reason::InvalidArgs,
                "limit of 1000000",
            ),
            (
                json!({"items": [{"name": "Coin"}, {"name": "coin"}]}),
                Reason::InvalidArgs,
                "limit",
            ),
            (
                json!({"items": [{"name": "   "}]}),
                Reason::InvalidArgs,
                "items[0].name is blank",
            ),
            (
                json!({"items": [{"name": "x", "slug": "Bad Slug"}]}),
                Reason::InvalidArgs,
                "a-z",
            ),
            (json!({"items": []}), Reason::InvalidArgs, "1 to 20"),
            (
                json!({"items": [{"name": "x", "quantity": 0}]}),
                Reason::InvalidArgs,
                "1 to 10000",
            ),
        ];
        assert_refusals(cases, |a| ctx_run(&AddInventory, &state, a));
    }

    #[test]
    fn the_schema_refuses_bad_shapes() {
        let state = demo();
        let many: Vec<Value> = (0..21).map(|i| json!({"name": format!("n{i}")})).collect();
        let cases = [
            (json!({}), "items"),
            (json!({"items": []}), "/items"),
            (json!({"items": many}), "/items"),
            (json!({"items": [{"name": ""}]}), "/items/0/name"),
            (
                json!({"items": [{"name": "x", "quantity": 0}]}),
                "/items/0/quantity",
            ),
            (
                json!({"items": [{"name": "x", "quantity": 10001}]}),
                "/items/0/quantity",
            ),
            (
                json!({"items": [{"name": "x", "slug": "Torch"}]}),
                "/items/0/slug",
            ),
            (json!({"items": [{"name": "x", "weight": 2}]}), "/items/0"),
            (
                json!({"items": [{"name": "x"}], "owner": "pc_001"}),
                "owner",
            ),
        ];
        for (args, text) in cases {
            let e = invoke(&state, args.clone(), Role::GameMaster).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{args}");
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
        let ok = invoke(
            &state,
            json!({"items": [{"name": "Torch"}]}),
            Role::GameMaster,
        )
        .unwrap();
        assert_eq!(ok.result["added"][0]["quantity"], 1);
        let e = invoke(&state, json!({"items": [{"name": "Torch"}]}), Role::Player).unwrap_err();
        assert_eq!(e.reason, Reason::PermissionDenied);
    }

    #[test]
    fn a_character_carries_a_bounded_number_of_kinds_of_items() {
        let mut state = demo();
        let inventory: Vec<Item> = (0..MAX_INVENTORY_ITEMS)
            .map(|i| Item {
                slug: format!("thing_{i}"),
                name: format!("Thing {i}"),
                description: String::new(),
                quantity: 1,
            })
            .collect();
        state.apply(&Effect::SetInventory {
            character_id: "pc_001".into(),
            inventory,
        });
        let e = ctx_run(
            &AddInventory,
            &state,
            &json!({"items": [{"name": "Feather"}]}),
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::InvalidActorState);
        assert!(
            e.message.contains("already carries 100 kinds of items"),
            "{}",
            e.message
        );
        // A stack already held still grows.
        let out = ctx_run(
            &AddInventory,
            &state,
            &json!({"items": [{"name": "Thing 7"}]}),
        )
        .unwrap();
        assert_eq!(out.result["added"][0]["slug"], "thing_7");
    }
}
