//! `map_generate`: grow the map with new areas, joined to an existing area
//! or as a new root layer.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::mapgen::{self, DEFAULT_SIZE, MAX_SIZE, MapRequest};

/// Most areas one session's map may hold.
pub const MAX_AREAS: usize = 2000;

pub struct MapGenerate;

#[derive(Deserialize)]
struct Args {
    /// `Some(null)` (explicit null) asks for a root layer; absent means
    /// "where the active character stands".
    #[serde(default, deserialize_with = "explicit_null")]
    parent_area_id: Option<Option<String>>,
    theme: Option<String>,
    #[serde(default)]
    constraints: Constraints,
}

#[derive(Deserialize, Default)]
struct Constraints {
    size: Option<usize>,
    seed: Option<u64>,
}

/// Tells an explicit `null` apart from a missing field.
fn explicit_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl Tool for MapGenerate {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "map_generate",
            "Generate map",
            "map",
            "Create new areas on a theme. parent_area_id joins them to that area (default: where the \
             active character stands); null starts a new root layer joined to nothing. \
             constraints.size is 1..30 (default 6); the same constraints.seed gives the same map.",
            json!({
                "type": "object",
                "properties": {
                    "parent_area_id": {"type": ["string", "null"], "minLength": 1},
                    "theme": {"type": "string", "maxLength": 80},
                    "constraints": {
                        "type": "object",
                        "properties": {
                            "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE},
                            "seed": {"type": "integer", "minimum": 0}
                        },
                        "additionalProperties": false
                    }
                },
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "required": ["seed", "root_parent_area_id", "created_area_ids", "created_connections", "areas", "warnings"],
                "properties": {
                    "seed": {"type": "integer"},
                    "root_parent_area_id": {"type": ["string", "null"]},
                    "created_area_ids": {"type": "array", "items": {"type": "string"}},
                    "created_connections": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}
                    },
                    "areas": {
                        "type": "array",
                        "items": {"type": "object", "required": ["area_id", "name", "description", "reachable_area_ids", "x", "y"]}
                    },
                    "warnings": {"type": "array", "items": {"type": "string"}}
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        let mut warnings = Vec::new();
        let parent_id = match args.parent_area_id {
            Some(explicit) => explicit,
            None => Some(
                state
                    .active_actor()
                    .map(|a| a.area_id.0.clone())
                    .ok_or_else(|| {
                        ToolError::invalid_args("no active character; give parent_area_id")
                    })?,
            ),
        };
        let parent = match &parent_id {
            None => None,
            Some(id) => Some(state.area(id).ok_or_else(|| {
                ToolError::new(
                    Reason::NotFound,
                    ErrorCode::ZoneNotFound,
                    format!("no area {id:?} on this map"),
                )
            })?),
        };
        let size = args.constraints.size.unwrap_or(DEFAULT_SIZE);
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
        let theme = args.theme.unwrap_or_default();
        if theme.trim().is_empty() {
            warnings.push("no theme given; generic names were used".to_owned());
        }
        // Seeds stay within JSON's exact integer range so they round-trip.
        let seed = match args.constraints.seed {
            Some(s) => s,
            None => {
                let s = ctx.rng.next_u64() >> 11;
                warnings.push(format!("no seed given; used {s}"));
                s
            }
        };
        let map = mapgen::generate(&MapRequest {
            from: parent,
            existing: &state.areas,
            theme: &theme,
            size,
            seed,
        });
        let created: Vec<&str> = map.areas.iter().map(|a| a.area_id.as_str()).collect();
        // Every connection once, as (from, to), links to the parent first.
        let mut connections: Vec<(String, String)> = map
            .links
            .iter()
            .map(|(a, b)| (a.0.clone(), b.0.clone()))
            .collect();
        for area in &map.areas {
            for n in &area.reachable_area_ids {
                if area.area_id.as_str() < n.as_str() && created.contains(&n.as_str()) {
                    connections.push((area.area_id.0.clone(), n.0.clone()));
                }
            }
        }
        Ok(ToolOutput {
            result: json!({
                "seed": seed,
                "root_parent_area_id": parent_id,
                "created_area_ids": created,
                "created_connections": connections,
                "areas": map.areas,
                "warnings": warnings,
            }),
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
    use crate::tools::test_support::{ctx_run, demo};

    #[test]
    fn same_seed_same_areas_and_the_map_grows() {
        let mut state = demo();
        let before = state.areas.len();
        let args = json!({"theme": "crystal caves", "constraints": {"size": 4, "seed": 11}});
        let a = ctx_run(&MapGenerate, &state, &args).unwrap();
        let b = ctx_run(&MapGenerate, &state, &args).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.result["warnings"], json!([]));
        state.apply(a.effect.as_ref().unwrap());
        assert_eq!(state.areas.len(), before + 4);
        let first = a.result["created_area_ids"][0].as_str().unwrap();
        assert!(
            state
                .area("area_001")
                .unwrap()
                .reachable_area_ids
                .iter()
                .any(|r| r.as_str() == first)
        );
        assert_eq!(a.result["root_parent_area_id"], "area_001");
        assert_eq!(
            a.result["created_connections"][0],
            json!(["area_001", first])
        );
    }

    #[test]
    fn a_null_parent_makes_a_root_layer_and_bad_input_is_refused() {
        let state = demo();
        let out = ctx_run(
            &MapGenerate,
            &state,
            &json!({"parent_area_id": null, "theme": "sky"}),
        )
        .unwrap();
        assert_eq!(out.result["root_parent_area_id"], Value::Null);
        assert_eq!(
            out.result["created_area_ids"].as_array().unwrap().len(),
            DEFAULT_SIZE
        );
        assert!(out.result["warnings"][0].as_str().unwrap().contains("seed"));
        let e = ctx_run(&MapGenerate, &state, &json!({"parent_area_id": "area_999"})).unwrap_err();
        assert_eq!(e.code, ErrorCode::ZoneNotFound);
    }
}
