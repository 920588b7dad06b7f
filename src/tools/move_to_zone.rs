//! `move_to_zone`: the player travels to a zone; the trip's time follows distance and speed.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::zones::{self, MovementLogEntry};
use crate::game::{CharacterState, Effect, GameState};

/// Zone ids listed when the asked-for zone does not exist.
const ZONES_LISTED: usize = 5;

pub struct MoveToZone;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// this session's id
    #[schemars(length(min = 1, max = 128))]
    session_id: String,
    /// id of the zone to travel to, e.g. zone_1_0_0
    #[schemars(length(min = 1, max = 100))]
    to_zone_id: String,
}

impl Tool for MoveToZone {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "move_to_zone",
            "Travel to zone",
            "zones",
            "Move the player to any existing zone of the open world (see generate_zone); the \
             result gives the distance in miles and the travel time in minutes at the player's \
             speed, and the trip is added to the player's movement log.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["ok", "new_position", "from_zone_id", "to_zone_id", "distance_miles", "duration_min", "movement_log_id", "position"],
                "properties": {
                    "ok": {"const": true},
                    "new_position": {
                        "type": "object",
                        "required": ["x", "y", "z", "zone_id"],
                        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"}, "zone_id": {"type": "string"}}
                    },
                    "from_zone_id": {"type": ["string", "null"]},
                    "to_zone_id": {"type": "string"},
                    "distance_miles": {"type": "number", "minimum": 0},
                    "duration_min": {"type": "integer", "minimum": 1},
                    "movement_log_id": {"type": "string", "pattern": "^mv_[0-9a-f]{16}$"},
                    "position": {
                        "type": "object",
                        "required": ["x", "y", "z"],
                        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"}}
                    }
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
        let actor = ctx.actor().ok_or_else(|| {
            ToolError::invalid_args(format!(
                "there is no active character ({} does not exist) to travel",
                ctx.actor_id()
            ))
        })?;
        if actor.state == CharacterState::Downed {
            return Err(ToolError::new(
                Reason::ActorStateRestricted,
                ErrorCode::PermissionDenied,
                format!("{} is downed and cannot travel until healed", actor.name),
            ));
        }
        let Some(target) = state.zone(&args.to_zone_id) else {
            return Err(ToolError::new(
                Reason::NotFound,
                ErrorCode::ZoneNotFound,
                unknown_zone_message(state, &args.to_zone_id),
            ));
        };
        let player = &state.player;
        let from_zone_id = player.current_zone_id.clone();
        if from_zone_id.as_deref() == Some(target.zone_id.as_str()) {
            return Err(ToolError::invalid_args(format!(
                "the player is already in {}; pick another zone",
                target.zone_id
            )));
        }
        let position = target.pos();
        let distance = zones::distance_miles(player.position.tuple(), position.tuple());
        let duration_min = zones::travel_minutes(distance, player.move_speed_mph);
        let distance_miles = (distance * 100.0).round() / 100.0;
        let movement_log_id = format!("mv_{:016x}", ctx.rng.next_u64());
        Ok(ToolOutput {
            result: json!({
                "ok": true,
                "new_position": {
                    "x": position.x,
                    "y": position.y,
                    "z": position.z,
                    "zone_id": target.zone_id,
                },
                "from_zone_id": from_zone_id,
                "to_zone_id": target.zone_id,
                "distance_miles": distance_miles,
                "duration_min": duration_min,
                "movement_log_id": movement_log_id,
                "position": position,
            }),
            effect: Some(Effect::MoveToZone {
                position,
                entry: MovementLogEntry {
                    movement_log_id,
                    from_zone_id,
                    to_zone_id: target.zone_id.clone(),
                    distance_miles,
                    duration_min,
                    turn: state.turn,
                },
            }),
        })
    }
}

/// Names the zones nearest the player, or says there are none yet.
fn unknown_zone_message(state: &GameState, id: &str) -> String {
    let shown: String = id.chars().take(100).collect();
    if state.zones.is_empty() {
        return format!("no zone {shown:?}; no zones exist yet, create some with generate_zone");
    }
    let here = state.player.position.tuple();
    let mut near: Vec<(f64, &str)> = state
        .zones
        .iter()
        .map(|z| {
            (
                zones::distance_miles(here, z.pos().tuple()),
                z.zone_id.as_str(),
            )
        })
        .collect();
    near.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    let ids: Vec<&str> = near.iter().take(ZONES_LISTED).map(|(_, id)| *id).collect();
    format!(
        "no zone {shown:?}; zones nearest the player: {}",
        ids.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::rng::SplitMix64;
    use crate::game::zones::{GridPos, zone_at};
    use crate::tools::test_support::{SESSION, ctx_run, demo, run_as, session};
    use crate::tools::{Caller, RawArgs, Registry, Role};

    /// The demo with zones at (3,4,0), (1,1,0), (-3,-4,0) and (0,0,0).
    fn world() -> GameState {
        let mut state = demo();
        state.apply(&Effect::AddZones {
            zones: vec![
                zone_at(3, 4, 0),
                zone_at(1, 1, 0),
                zone_at(-3, -4, 0),
                zone_at(0, 0, 0),
            ],
        });
        state
    }

    fn go(state: &GameState, to: &str) -> Result<ToolOutput, ToolError> {
        ctx_run(
            &MoveToZone,
            state,
            &json!({"session_id": SESSION, "to_zone_id": to}),
        )
    }

    #[test]
    fn travel_updates_the_player_and_logs_the_trip() {
        let mut state = world();
        state.turn = 4;
        let out = go(&state, "zone_3_4_0").unwrap();
        assert_eq!(out.result["from_zone_id"], Value::Null);
        assert_eq!(out.result["to_zone_id"], "zone_3_4_0");
        assert_eq!(out.result["distance_miles"], json!(5.0));
        assert_eq!(out.result["duration_min"], 100, "5 miles at 3 mph");
        assert_eq!(out.result["position"], json!({"x": 3, "y": 4, "z": 0}));
        // Seed 000's answer, beside the fields above.
        assert_eq!(out.result["ok"], true);
        assert_eq!(
            out.result["new_position"],
            json!({"x": 3, "y": 4, "z": 0, "zone_id": "zone_3_4_0"})
        );
        let id = out.result["movement_log_id"].as_str().unwrap();
        assert_eq!(id, format!("mv_{:016x}", SplitMix64::new(7).next_u64()));

        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state.player.current_zone_id.as_deref(), Some("zone_3_4_0"));
        assert_eq!(state.player.position, GridPos::new(3, 4, 0));
        assert_eq!(
            state.player.movement_log,
            vec![MovementLogEntry {
                movement_log_id: id.to_owned(),
                from_zone_id: None,
                to_zone_id: "zone_3_4_0".into(),
                distance_miles: 5.0,
                duration_min: 100,
                turn: 4,
            }]
        );
        let once = state.clone();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state, once, "applying twice logs the trip once");

        // The next trip starts where the last one ended. (ctx_run always
        // seeds the rng alike, which would repeat the movement_log_id.)
        let out = MoveToZone
            .run(
                &json!({"session_id": SESSION, "to_zone_id": "zone_-3_-4_0"}),
                &mut ToolContext {
                    acting: &[],
                    state: &state,
                    rng: &mut SplitMix64::new(8),
                    session_id: &session(),
                    role: Role::GameMaster,
                    now_ms: 0,
                    user_id: None,
                    site_id: None,
                },
            )
            .unwrap();
        assert_ne!(out.result["movement_log_id"], json!(id));
        assert_eq!(out.result["from_zone_id"], "zone_3_4_0");
        assert_eq!(out.result["distance_miles"], json!(10.0));
        assert_eq!(out.result["duration_min"], 200);
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state.player.movement_log.len(), 2);
        assert_eq!(
            state.player.movement_log[1].from_zone_id.as_deref(),
            Some("zone_3_4_0")
        );
    }

    #[test]
    fn duration_follows_speed_and_distance_is_rounded() {
        // (to, speed, distance, minutes), from the origin.
        let cases = [
            ("zone_3_4_0", 3.0, 5.0, 100),
            ("zone_3_4_0", 6.0, 5.0, 50),
            ("zone_3_4_0", 60.0, 5.0, 5),
            ("zone_3_4_0", 0.0, 5.0, 100),
            ("zone_1_1_0", 3.0, 1.41, 29),
            ("zone_1_1_0", 1.0, 1.41, 85),
            ("zone_0_0_0", 3.0, 0.0, 1),
        ];
        for (to, speed, miles, minutes) in cases {
            let mut state = world();
            state.player.move_speed_mph = speed;
            let out = go(&state, to).unwrap();
            assert_eq!(
                (
                    out.result["distance_miles"].as_f64(),
                    out.result["duration_min"].as_u64()
                ),
                (Some(miles), Some(minutes)),
                "{to} at {speed} mph"
            );
        }
    }

    #[test]
    fn refusals() {
        let mut state = world();
        let e = go(&state, "zone_9_9_9").unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::ZoneNotFound)
        );
        assert!(
            e.message
                .contains("zone_0_0_0, zone_1_1_0, zone_-3_-4_0, zone_3_4_0"),
            "nearest first: {}",
            e.message
        );
        let e = go(&demo(), "zone_0_0_0").unwrap_err();
        assert!(e.message.contains("generate_zone"), "{}", e.message);

        let e = ctx_run(
            &MoveToZone,
            &state,
            &json!({"session_id": "sess_other", "to_zone_id": "zone_1_1_0"}),
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::SessionMismatch);

        let out = go(&state, "zone_1_1_0").unwrap();
        state.apply(out.effect.as_ref().unwrap());
        let e = go(&state, "zone_1_1_0").unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidArgs, ErrorCode::InvalidArgs)
        );

        state.apply(&Effect::Hp {
            character_id: "pc_001".into(),
            hp: 0,
            state: CharacterState::Downed,
        });
        let e = run_as(
            &MoveToZone,
            &state,
            &json!({"session_id": SESSION, "to_zone_id": "zone_3_4_0"}),
            Role::Service,
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::ActorStateRestricted, ErrorCode::PermissionDenied)
        );

        let mut lost = world();
        lost.active_actor_id = "ghost".into();
        assert_eq!(
            go(&lost, "zone_1_1_0").unwrap_err().reason,
            Reason::InvalidArgs
        );
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = world();
        let allowlist = vec!["move_to_zone".to_string()];
        let registry = Registry::builtin().unwrap();
        let invoke = |args: &Value, role: Role| {
            let caller = Caller {
                acting: &[],
                role,
                allowlist: &allowlist,
                session_id: &session(),
                user_id: None,
                site_id: None,
            };
            registry
                .invoke(
                    "move_to_zone",
                    RawArgs::Value(args.clone()),
                    &caller,
                    &state,
                    &mut SplitMix64::new(1),
                )
                .outcome
        };
        let cases = [
            json!({"session_id": SESSION}),
            json!({"to_zone_id": "zone_1_1_0"}),
            json!({"session_id": SESSION, "to_zone_id": ""}),
            json!({"session_id": SESSION, "to_zone_id": 3}),
            json!({"session_id": SESSION, "to_zone_id": "z".repeat(101)}),
            json!({"session_id": SESSION, "to_zone_id": "zone_1_1_0", "from_zone_id": "zone_0_0_0"}),
        ];
        for args in &cases {
            let e = invoke(args, Role::GameMaster).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{args}"
            );
        }
        let ok = json!({"session_id": SESSION, "to_zone_id": "zone_1_1_0"});
        assert!(invoke(&ok, Role::GameMaster).is_ok());
        assert_eq!(
            invoke(&ok, Role::Player).unwrap_err().reason,
            Reason::PermissionDenied
        );
    }
}
