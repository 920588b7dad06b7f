//! `get_player_state`: the active character's sheet, zone position and recent trips (read-only).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::zones::DEFAULT_MOVE_SPEED_MPH;

/// Movement log entries returned, newest last.
pub const RECENT_MOVEMENTS: usize = 5;

pub struct GetPlayerState;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// this session's id (optional)
    #[schemars(length(min = 1, max = 128))]
    session_id: Option<String>,
}

impl Tool for GetPlayerState {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "get_player_state",
            "Player state",
            "zones",
            "Read the player's active character: static data (name, level, max HP, stats, travel \
             speed) and runtime data (zone and grid position, area, HP, state, inventory and the \
             last 5 zone trips, newest last). Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["ok", "player_static_data", "player_runtime_data"],
                "properties": {
                    "ok": {"const": true},
                    "player_static_data": {
                        "type": "object",
                        "required": ["player_id", "character_id", "name", "kind", "level", "max_hp", "stats", "move_speed_mph"],
                        "properties": {
                            "player_id": {"type": "string"},
                            "character_id": {"type": "string"},
                            "name": {"type": "string"},
                            "kind": {"type": "string"},
                            "level": {"type": "integer"},
                            "max_hp": {"type": "integer"},
                            "stats": {"type": "object"},
                            "move_speed_mph": {"type": "number", "exclusiveMinimum": 0}
                        }
                    },
                    "player_runtime_data": {
                        "type": "object",
                        "required": ["session_id", "current_position", "hp", "state", "inventory", "recent_movements"],
                        "properties": {
                            "session_id": {"type": "string"},
                            "current_position": {
                                "type": "object",
                                "required": ["zone_id", "x", "y", "z", "area_id"],
                                "properties": {
                                    "zone_id": {"type": ["string", "null"]},
                                    "x": {"type": "integer"},
                                    "y": {"type": "integer"},
                                    "z": {"type": "integer"},
                                    "area_id": {"type": "string"}
                                }
                            },
                            "hp": {"type": "integer"},
                            "state": {"enum": ["active", "downed"]},
                            "inventory": {"type": "array"},
                            "recent_movements": {
                                "type": "array",
                                "maxItems": RECENT_MOVEMENTS,
                                "items": {
                                    "type": "object",
                                    "required": ["movement_log_id", "from_zone_id", "to_zone_id", "distance_miles", "duration_min", "turn"]
                                }
                            }
                        }
                    }
                }
            }),
        )
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        if let Some(claimed) = &args.session_id {
            ctx.check_session(claimed)?;
        }
        let state = ctx.state;
        let actor = ctx.actor().ok_or_else(|| {
            ToolError::invalid_args(format!(
                "there is no active character ({} does not exist)",
                ctx.actor_id()
            ))
        })?;
        let player = &state.player;
        // Report the speed travel really uses: a damaged save's speed counts
        // as the default (see zones::travel_minutes).
        let speed = if player.move_speed_mph.is_finite() && player.move_speed_mph > 0.0 {
            player.move_speed_mph
        } else {
            DEFAULT_MOVE_SPEED_MPH
        };
        let log = &player.movement_log;
        let recent = &log[log.len().saturating_sub(RECENT_MOVEMENTS)..];
        Ok(ToolOutput {
            result: json!({
                "ok": true,
                "player_static_data": {
                    "player_id": actor.character_id,
                    "character_id": actor.character_id,
                    "name": actor.name,
                    "kind": actor.kind,
                    "level": actor.level,
                    "max_hp": actor.max_hp,
                    "stats": actor.stats,
                    "move_speed_mph": speed,
                },
                "player_runtime_data": {
                    "session_id": ctx.session_id,
                    "current_position": {
                        "zone_id": player.current_zone_id,
                        "x": player.position.x,
                        "y": player.position.y,
                        "z": player.position.z,
                        "area_id": actor.area_id,
                    },
                    "hp": actor.hp,
                    "state": actor.state,
                    "inventory": actor.inventory,
                    "recent_movements": recent,
                },
            }),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, Reason};
    use crate::game::rng::SplitMix64;
    use crate::game::zones::{GridPos, MovementLogEntry};
    use crate::game::{CharacterState, Effect};
    use crate::tools::test_support::{SESSION, ctx_run, demo, run_as, session};
    use crate::tools::{Caller, RawArgs, Registry, Role};

    fn trip(n: u64) -> Effect {
        Effect::MoveToZone {
            position: GridPos::new(n as i64, 0, 0),
            entry: MovementLogEntry {
                movement_log_id: format!("mv_{n:016x}"),
                from_zone_id: n.checked_sub(1).map(|p| format!("zone_{p}_0_0")),
                to_zone_id: format!("zone_{n}_0_0"),
                distance_miles: 1.0,
                duration_min: 20,
                turn: n,
            },
        }
    }

    #[test]
    fn a_fresh_player_stands_nowhere_in_particular() {
        let state = demo();
        let actor = state.active_actor().unwrap().clone();
        let out = ctx_run(&GetPlayerState, &state, &json!({})).unwrap();
        assert!(out.effect.is_none());
        assert_eq!(out.result["ok"], true);
        let stat = &out.result["player_static_data"];
        assert_eq!(stat["character_id"], json!(actor.character_id));
        assert_eq!(
            stat["player_id"],
            json!(actor.character_id),
            "seed 000's name"
        );
        assert_eq!(stat["name"], json!(actor.name));
        assert_eq!(stat["kind"], "pc");
        assert_eq!(stat["max_hp"], actor.max_hp);
        assert_eq!(stat["stats"], json!(actor.stats));
        assert_eq!(stat["move_speed_mph"], json!(3.0));
        let run = &out.result["player_runtime_data"];
        assert_eq!(run["session_id"], SESSION);
        assert_eq!(
            run["current_position"],
            json!({"zone_id": null, "x": 0, "y": 0, "z": 0, "area_id": actor.area_id})
        );
        assert_eq!(run["hp"], actor.hp);
        assert_eq!(run["state"], "active");
        assert_eq!(run["inventory"], json!(actor.inventory));
        assert_eq!(run["recent_movements"], json!([]));
    }

    #[test]
    fn recent_movements_are_the_last_five_newest_last() {
        let cases = [(0, vec![]), (2, vec![0, 1]), (7, vec![2, 3, 4, 5, 6])];
        for (trips, turns) in cases {
            let mut state = demo();
            for n in 0..trips {
                // Each trip in a turn of its own, logged under it.
                state.apply(&Effect::BeginTurn { turn: n });
                state.apply(&trip(n));
            }
            let out = ctx_run(&GetPlayerState, &state, &json!({"session_id": SESSION})).unwrap();
            let run = &out.result["player_runtime_data"];
            let got: Vec<u64> = run["recent_movements"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["turn"].as_u64().unwrap())
                .collect();
            assert_eq!(got, turns, "{trips} trips");
            if let Some(last) = trips.checked_sub(1) {
                assert_eq!(
                    run["current_position"]["zone_id"],
                    json!(format!("zone_{last}_0_0"))
                );
                assert_eq!(run["current_position"]["x"], last);
            }
        }
    }

    #[test]
    fn downed_speed_and_refusals() {
        let mut state = demo();
        state.apply(&Effect::Hp {
            character_id: "pc_001".into(),
            hp: 0,
            state: CharacterState::Downed,
        });
        state.player.move_speed_mph = 0.0;
        let out = run_as(&GetPlayerState, &state, &json!({}), Role::Player).unwrap();
        assert_eq!(out.result["player_runtime_data"]["state"], "downed");
        assert_eq!(out.result["player_runtime_data"]["hp"], 0);
        assert_eq!(
            out.result["player_static_data"]["move_speed_mph"],
            json!(3.0),
            "the speed travel really uses"
        );

        let e = ctx_run(
            &GetPlayerState,
            &state,
            &json!({"session_id": "sess_other"}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::SessionMismatch, ErrorCode::SessionMismatch)
        );

        state.active_actor_id = "ghost".into();
        let e = ctx_run(&GetPlayerState, &state, &json!({})).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidArgs, ErrorCode::InvalidArgs)
        );
    }

    #[test]
    fn the_schema_refuses_bad_arguments_and_passes_results() {
        let mut state = demo();
        for n in 0..8 {
            state.apply(&trip(n));
        }
        let allowlist = vec!["get_player_state".to_string()];
        let registry = Registry::builtin().unwrap();
        let caller = Caller {
            acting: &[],
            role: Role::Player,
            allowlist: &allowlist,
            session_id: &session(),
            user_id: None,
            site_id: None,
        };
        let invoke = |args: Value| {
            registry
                .invoke(
                    "get_player_state",
                    RawArgs::Value(args),
                    &caller,
                    &state,
                    &mut SplitMix64::new(1),
                )
                .outcome
        };
        for args in [
            json!({"session_id": 5}),
            json!({"session_id": ""}),
            json!({"character_id": "pc_001"}),
        ] {
            let e = invoke(args.clone()).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{args}"
            );
        }
        let out = invoke(json!({"session_id": SESSION})).unwrap();
        assert_eq!(
            out.result["player_runtime_data"]["recent_movements"]
                .as_array()
                .unwrap()
                .len(),
            RECENT_MOVEMENTS
        );
        assert!(invoke(json!({})).is_ok());
    }
}
