//! `move_options`: where a character can go in one step (read-only).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Tool, ToolContext, ToolError, ToolOutput, ToolSpec, area_brief, area_brief_schema, character,
};

pub struct MoveOptions;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(min = 1))]
    actor_id: Option<String>,
}

impl Tool for MoveOptions {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "move_options",
            "Movement options",
            "exploration",
            "List the areas a character can reach in one step from where they stand \
                (defaults to the active character). Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["actor_id", "area", "options"],
                "properties": {
                    "actor_id": {"type": "string"},
                    "area": area_brief_schema(),
                    "options": {"type": "array", "items": {
                        "allOf": [area_brief_schema()],
                        "required": ["to_area_id"],
                        "properties": {"to_area_id": {"type": "string"}}
                    }}
                }
            }),
        )
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        let id = args.actor_id.unwrap_or_else(|| ctx.actor_id().to_string());
        let actor = character(state, &id)?;
        let here = state.area(actor.area_id.as_str()).ok_or_else(|| {
            ToolError::invalid_args(format!("{} stands nowhere known", actor.name))
        })?;
        let options: Vec<Value> = here
            .reachable_area_ids
            .iter()
            .filter_map(|id| state.area(id.as_str()))
            .map(|area| {
                // Seed 002 names the option's area `to_area_id`.
                let mut option = area_brief(area);
                option["to_area_id"] = json!(area.area_id);
                option
            })
            .collect();
        Ok(ToolOutput {
            result: json!({"actor_id": actor.character_id, "area": area_brief(here), "options": options}),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{ctx_run, demo};

    #[test]
    fn lists_the_neighbours_of_the_active_actor() {
        let state = demo();
        let out = ctx_run(&MoveOptions, &state, &json!({})).unwrap();
        let here = state.area("area_001").unwrap();
        let ids: Vec<&str> = out.result["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["area_id"].as_str().unwrap())
            .collect();
        let expected: Vec<&str> = here.reachable_area_ids.iter().map(|a| a.as_str()).collect();
        assert_eq!(ids, expected);
        assert!(out.effect.is_none());
    }

    #[test]
    fn each_option_carries_seed_002s_to_area_id_and_name() {
        use crate::tools::Role;
        use crate::tools::test_support::pipeline;

        let state = demo();
        let out = pipeline(
            "move_options",
            &state,
            json!({"actor_id": "pc_001"}),
            Role::GameMaster,
        )
        .unwrap();
        let options = out.result["options"].as_array().unwrap();
        assert!(!options.is_empty());
        for option in options {
            let id = option["to_area_id"].as_str().unwrap();
            assert_eq!(option["area_id"], id, "beside today's field");
            assert_eq!(option["name"], json!(state.area(id).unwrap().name));
        }
    }
}
