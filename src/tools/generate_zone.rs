//! `generate_zone`: add 1..3 open-world zones themed by a world prompt, near the player.
//!
//! With a real model the zone text would come from the model; here names and
//! descriptions are procedural ([`zones::generate_zones`]) and the model only
//! supplies the world prompt.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::zones::{self, MAX_ZONES_PER_CALL, ZoneRequest};

/// Most zones one session's world may hold.
pub const MAX_ZONES: usize = 5000;

pub struct GenerateZone;

#[derive(Deserialize)]
struct Args {
    session_id: String,
    world_prompt: String,
    #[serde(default = "one")]
    count: usize,
    #[serde(default = "yes")]
    near_player: bool,
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

impl Tool for GenerateZone {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "generate_zone",
            "Generate zones",
            "zones",
            "Create 1..3 new open-world zones (count, default 1) on free grid cells next to the \
             player, or next to the origin when near_player is false. Names and descriptions are \
             made procedurally from world_prompt, a short description of the world's theme; travel \
             to a new zone with move_to_zone.",
            json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "minLength": 1, "maxLength": 128, "description": "this session's id"},
                    "world_prompt": {"type": "string", "minLength": 1, "maxLength": 500, "description": "the world's theme, e.g. \"haunted pine forest\""},
                    "count": {"type": "integer", "minimum": 1, "maximum": MAX_ZONES_PER_CALL, "default": 1},
                    "near_player": {"type": "boolean", "default": true}
                },
                "required": ["session_id", "world_prompt"],
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "required": ["zones", "created_zone_ids", "seed"],
                "properties": {
                    "zones": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["zone_id", "name", "description", "x", "y", "z", "tags", "world_prompt"],
                            "properties": {
                                "zone_id": {"type": "string"},
                                "name": {"type": "string"},
                                "description": {"type": "string"},
                                "x": {"type": "integer"},
                                "y": {"type": "integer"},
                                "z": {"type": "integer"},
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "world_prompt": {"type": "string"}
                            }
                        }
                    },
                    "created_zone_ids": {"type": "array", "items": {"type": "string"}},
                    "seed": {"type": "integer", "minimum": 0}
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        ctx.check_session(&args.session_id)?;
        let state = ctx.state;
        let count = args.count.clamp(1, MAX_ZONES_PER_CALL);
        if state.zones.len().saturating_add(count) > MAX_ZONES {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!(
                    "the world already holds {} zones; at most {MAX_ZONES}, so no more can be \
                     generated (room for {})",
                    state.zones.len(),
                    MAX_ZONES.saturating_sub(state.zones.len())
                ),
            ));
        }
        let near = if args.near_player {
            state.player.position.tuple()
        } else {
            (0, 0, 0)
        };
        // Seeds stay within JSON's exact integer range so they round-trip.
        let seed = ctx.rng.next_u64() >> 11;
        let zones = zones::generate_zones(&ZoneRequest {
            world_prompt: &args.world_prompt,
            count,
            near,
            existing: &state.zones,
            seed,
        });
        if zones.is_empty() {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                "no free grid cell is left around that position; try near_player: false",
            ));
        }
        let created: Vec<&str> = zones.iter().map(|z| z.zone_id.as_str()).collect();
        Ok(ToolOutput {
            result: json!({
                "zones": zones,
                "created_zone_ids": created,
                "seed": seed,
            }),
            effect: Some(Effect::AddZones { zones }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;
    use crate::game::rng::SplitMix64;
    use crate::game::zones::{GridPos, Zone, zone_id};
    use crate::tools::Role;
    use crate::tools::test_support::{SESSION, ctx_run, demo, pipeline};

    fn zone_at(x: i64, y: i64, z: i64) -> Zone {
        Zone {
            zone_id: zone_id(x, y, z),
            name: format!("Zone {x} {y} {z}"),
            description: String::new(),
            x,
            y,
            z,
            tags: vec![],
            world_prompt: String::new(),
        }
    }

    fn invoke(args: Value, role: Role, state: &GameState) -> Result<ToolOutput, ToolError> {
        pipeline("generate_zone", state, args, role)
    }

    #[test]
    fn zones_gather_around_the_player_and_join_the_world() {
        let mut state = demo();
        state.player.position = GridPos::new(10, -4, 2);
        let args =
            json!({"session_id": SESSION, "world_prompt": "haunted pine forest", "count": 3});
        let out = ctx_run(&GenerateZone, &state, &args).unwrap();
        // The same rng gives the same seed, so the same zones.
        assert_eq!(out, ctx_run(&GenerateZone, &state, &args).unwrap());
        let zones = out.result["zones"].as_array().unwrap();
        assert_eq!(zones.len(), 3);
        assert_eq!(
            out.result["created_zone_ids"],
            json!(
                zones
                    .iter()
                    .map(|z| z["zone_id"].clone())
                    .collect::<Vec<_>>()
            )
        );
        for z in zones {
            let (x, y) = (z["x"].as_i64().unwrap(), z["y"].as_i64().unwrap());
            assert!((x - 10).abs() <= 1 && (y + 4).abs() <= 1, "{z}");
            assert_eq!(z["z"], 2);
            assert_eq!(z["world_prompt"], "haunted pine forest");
        }
        let seed = out.result["seed"].as_u64().unwrap();
        assert_eq!(seed, SplitMix64::new(7).next_u64() >> 11);

        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state.zones.len(), 3);
        let once = state.clone();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state, once, "applying twice adds nothing");

        // New zones never reuse a taken cell.
        let more = ctx_run(&GenerateZone, &state, &args).unwrap();
        state.apply(more.effect.as_ref().unwrap());
        assert_eq!(state.zones.len(), 6);
    }

    #[test]
    fn defaults_and_the_origin() {
        let mut state = demo();
        state.player.position = GridPos::new(500, 500, 0);
        let out = ctx_run(
            &GenerateZone,
            &state,
            &json!({"session_id": SESSION, "world_prompt": "salt flats", "near_player": false}),
        )
        .unwrap();
        let zones = out.result["zones"].as_array().unwrap();
        assert_eq!(zones.len(), 1, "count defaults to 1");
        let (x, y) = (
            zones[0]["x"].as_i64().unwrap(),
            zones[0]["y"].as_i64().unwrap(),
        );
        assert!(x.abs() <= 1 && y.abs() <= 1, "near the origin: {x},{y}");

        let out = ctx_run(
            &GenerateZone,
            &state,
            &json!({"session_id": SESSION, "world_prompt": "salt flats"}),
        )
        .unwrap();
        let x = out.result["zones"][0]["x"].as_i64().unwrap();
        assert!((x - 500).abs() <= 1, "near_player defaults to true");
    }

    #[test]
    fn a_full_world_and_a_wrong_session_are_refused() {
        let mut state = demo();
        state.zones = (0..MAX_ZONES as i64).map(|i| zone_at(i, 0, 9)).collect();
        let args = json!({"session_id": SESSION, "world_prompt": "ice"});
        let e = ctx_run(&GenerateZone, &state, &args).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidActorState, ErrorCode::InvalidArgs)
        );
        assert!(e.message.contains("5000"), "{}", e.message);

        state.zones.pop();
        assert!(ctx_run(&GenerateZone, &state, &args).is_ok());
        let e = ctx_run(
            &GenerateZone,
            &state,
            &json!({"session_id": SESSION, "world_prompt": "ice", "count": 2}),
        )
        .unwrap_err();
        assert_eq!(
            e.reason,
            Reason::InvalidActorState,
            "the cap is never passed"
        );

        let e = ctx_run(
            &GenerateZone,
            &demo(),
            &json!({"session_id": "sess_other", "world_prompt": "ice"}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::SessionMismatch, ErrorCode::SessionMismatch)
        );
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = demo();
        let long = "x".repeat(501);
        let cases = [
            json!({"world_prompt": "ice"}),
            json!({"session_id": SESSION}),
            json!({"session_id": SESSION, "world_prompt": ""}),
            json!({"session_id": SESSION, "world_prompt": long}),
            json!({"session_id": SESSION, "world_prompt": "ice", "count": 0}),
            json!({"session_id": SESSION, "world_prompt": "ice", "count": 4}),
            json!({"session_id": SESSION, "world_prompt": "ice", "count": 1.5}),
            json!({"session_id": SESSION, "world_prompt": "ice", "near_player": "yes"}),
            json!({"session_id": SESSION, "world_prompt": "ice", "theme": "ice"}),
        ];
        for args in cases {
            let e = invoke(args.clone(), Role::GameMaster, &state).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{args}"
            );
        }
        let ok =
            json!({"session_id": SESSION, "world_prompt": "ice", "count": 3, "near_player": false});
        assert!(invoke(ok.clone(), Role::GameMaster, &state).is_ok());
        let e = invoke(ok.clone(), Role::Player, &state).unwrap_err();
        assert_eq!(e.reason, Reason::PermissionDenied);
        assert!(invoke(ok, Role::Service, &state).is_ok());
    }
}
