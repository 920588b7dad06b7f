//! `get_character_stats`: a character's sheet (read-only).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};

pub struct GetCharacterStats;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(min = 1))]
    character_id: Option<String>,
}

impl Tool for GetCharacterStats {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "get_character_stats",
            "Character stats",
            "character",
            "Read a character's sheet: HP, level, stats, inventory and where they are \
                (defaults to the active character). Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["character_id", "name", "hp", "max_hp", "level", "area_id", "stats", "inventory", "state"]
            }),
        )
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let id = args
            .character_id
            .unwrap_or_else(|| ctx.actor_id().to_string());
        let c = character(ctx.state, &id)?;
        let mut result =
            serde_json::to_value(c).map_err(|e| ToolError::invalid_args(e.to_string()))?;
        if let (Some(obj), Some(area)) =
            (result.as_object_mut(), ctx.state.area(c.area_id.as_str()))
        {
            obj.insert("area_name".into(), json!(area.name));
        }
        Ok(ToolOutput {
            result,
            effect: None,
        })
    }
}
