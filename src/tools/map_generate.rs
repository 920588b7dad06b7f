//! `map_generate`: grow the map with new areas joined to an existing one.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Role, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::mapgen::{self, DEFAULT_SIZE, MAX_SIZE, MapRequest};

/// Most areas one session's map may hold.
pub const MAX_AREAS: usize = 2000;

pub struct MapGenerate;

#[derive(Deserialize)]
struct Args {
    from_area_id: Option<String>,
    theme: Option<String>,
    size: Option<usize>,
    seed: Option<u64>,
}

impl Tool for MapGenerate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "map_generate",
            version: "1.0.0",
            title: "Generate map",
            description: "Create new areas on a theme and join them to an existing area (default: where the \
                active character stands). The same seed gives the same areas. size is 1..30, default 6.",
            category: "map",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "from_area_id": {"type": "string", "minLength": 1},
                    "theme": {"type": "string", "maxLength": 80},
                    "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE},
                    "seed": {"type": "integer", "minimum": 0}
                },
                "additionalProperties": false
            }),
            output_schema: json!({
                "type": "object",
                "required": ["seed", "from_area_id", "areas"],
                "properties": {
                    "seed": {"type": "integer"},
                    "from_area_id": {"type": "string"},
                    "areas": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["area_id", "name", "description", "reachable_area_ids", "x", "y"],
                        }
                    }
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
        let state = ctx.state;
        let from_id = match args.from_area_id {
            Some(id) => id,
            None => state
                .active_actor()
                .map(|a| a.area_id.0.clone())
                .ok_or_else(|| ToolError::invalid_args("no active character; give from_area_id"))?,
        };
        let from = state.area(&from_id).ok_or_else(|| {
            ToolError::new(
                Reason::NotFound,
                ErrorCode::ZoneNotFound,
                format!("no area {from_id:?} on this map"),
            )
        })?;
        let size = args.size.unwrap_or(DEFAULT_SIZE);
        if state.areas.len() + size > MAX_AREAS {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!(
                    "the map already holds {} areas; at most {MAX_AREAS}",
                    state.areas.len()
                ),
            ));
        }
        // Seeds stay within JSON's exact integer range so they round-trip.
        let seed = args.seed.unwrap_or_else(|| ctx.rng.next_u64() >> 11);
        let map = mapgen::generate(&MapRequest {
            from,
            existing: &state.areas,
            theme: args.theme.as_deref().unwrap_or(""),
            size,
            seed,
        });
        Ok(ToolOutput {
            result: json!({"seed": seed, "from_area_id": from.area_id, "areas": map.areas}),
            effect: Some(Effect::AddAreas {
                areas: map.areas,
                links: map.links,
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
    fn same_seed_same_areas_and_the_map_grows() {
        let mut state = demo();
        let before = state.areas.len();
        let args = json!({"theme": "crystal caves", "size": 4, "seed": 11});
        let a = MapGenerate
            .run(
                &args,
                &mut ToolContext {
                    state: &state,
                    rng: &mut SplitMix64::new(1),
                },
            )
            .unwrap();
        let b = MapGenerate
            .run(
                &args,
                &mut ToolContext {
                    state: &state,
                    rng: &mut SplitMix64::new(2),
                },
            )
            .unwrap();
        assert_eq!(a, b);
        state.apply(a.effect.as_ref().unwrap());
        assert_eq!(state.areas.len(), before + 4);
        let first = a.result["areas"][0]["area_id"].as_str().unwrap();
        assert!(
            state
                .area("area_001")
                .unwrap()
                .reachable_area_ids
                .iter()
                .any(|r| r.as_str() == first)
        );
    }
}
