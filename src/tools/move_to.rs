//! `move`: the active actor (in a turn, the speaker's character, or in a
//! party an NPC) walks to a neighbouring area.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Tool, ToolContext, ToolError, ToolOutput, ToolSpec, area_brief, area_brief_schema, character,
};
use crate::error::{ErrorCode, Reason};
use crate::game::{CharacterState, Effect};

pub struct Move;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// the active character's id
    #[schemars(length(min = 1))]
    actor_id: String,
    /// id of a reachable area
    #[schemars(length(min = 1))]
    to_area_id: String,
}

impl Tool for Move {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "move",
            "Move",
            "exploration",
            "Move the active character to an area directly reachable from where they stand \
                (one step). Use move_options first when unsure which areas are reachable. The starting \
                area is taken from the game state; never send from_area_id.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["actor_id", "from_area_id", "to_area_id", "area", "reachable_area_ids"],
                "properties": {
                    "actor_id": {"type": "string"},
                    "from_area_id": {"type": "string"},
                    "to_area_id": {"type": "string"},
                    "area": area_brief_schema(),
                    "reachable_area_ids": {"type": "array", "items": {"type": "string"}}
                }
            }),
        ).writes()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        if !ctx.may_move(&args.actor_id) {
            return Err(ToolError::new(
                Reason::ActorStateRestricted,
                ErrorCode::PermissionDenied,
                format!("only {} can move now", ctx.actor_id()),
            ));
        }
        let actor = character(state, &args.actor_id)?;
        if actor.state == CharacterState::Downed {
            return Err(ToolError::new(
                Reason::ActorStateRestricted,
                ErrorCode::PermissionDenied,
                format!("{} is downed and cannot act until healed", actor.name),
            ));
        }
        let Some(target) = state.area(&args.to_area_id) else {
            return Err(ToolError::new(
                Reason::NotFound,
                ErrorCode::ZoneNotFound,
                format!("no area {:?} on this map", args.to_area_id),
            ));
        };
        let here = state.area(actor.area_id.as_str());
        let reachable = here
            .map(|a| a.reachable_area_ids.as_slice())
            .unwrap_or_default();
        if target.area_id == actor.area_id {
            return Err(ToolError::invalid_args(format!(
                "{} is already in {}",
                actor.name, target.area_id
            )));
        }
        if !reachable.contains(&target.area_id) {
            let list: Vec<&str> = reachable.iter().map(|a| a.as_str()).collect();
            return Err(ToolError::invalid_args(format!(
                "{} is not reachable in one step from {}; reachable: {}",
                target.area_id,
                actor.area_id,
                list.join(", ")
            )));
        }
        Ok(ToolOutput {
            result: json!({
                "actor_id": actor.character_id,
                "from_area_id": actor.area_id,
                "to_area_id": target.area_id,
                "area": area_brief(target),
                "reachable_area_ids": target.reachable_area_ids,
            }),
            effect: Some(Effect::Move {
                character_id: actor.character_id.clone(),
                to_area_id: target.area_id.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{ctx_run, demo};

    fn run(state: &crate::game::GameState, args: Value) -> Result<ToolOutput, ToolError> {
        ctx_run(&Move, state, &args)
    }

    #[test]
    fn moves_one_step_and_refuses_the_rest() {
        let mut state = demo();
        let here = state.active_actor().unwrap().area_id.clone();
        let next = state.area(here.as_str()).unwrap().reachable_area_ids[0].clone();
        let out = run(&state, json!({"actor_id": "pc_001", "to_area_id": next})).unwrap();
        assert_eq!(out.result["from_area_id"], json!(here));
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state.active_actor().unwrap().area_id, next);

        let far = state
            .areas
            .iter()
            .find(|a| {
                a.area_id != next
                    && !state
                        .area(next.as_str())
                        .unwrap()
                        .reachable_area_ids
                        .contains(&a.area_id)
            })
            .unwrap()
            .area_id
            .clone();
        let cases = [
            (
                json!({"actor_id": "pc_001", "to_area_id": far}),
                Reason::InvalidArgs,
            ),
            (
                json!({"actor_id": "pc_001", "to_area_id": "area_999"}),
                Reason::NotFound,
            ),
            (
                json!({"actor_id": "pc_001", "to_area_id": next}),
                Reason::InvalidArgs,
            ),
            (
                json!({"actor_id": "npc_001", "to_area_id": here}),
                Reason::ActorStateRestricted,
            ),
        ];
        for (args, reason) in cases {
            assert_eq!(
                run(&state, args.clone()).unwrap_err().reason,
                reason,
                "{args}"
            );
        }
    }

    #[test]
    fn in_a_party_s_turn_an_npc_may_be_moved_and_in_a_session_nobody_joined_not() {
        use crate::game::party::{Seat, SeatRole, SeatState};
        use crate::ids::CharacterId;
        use crate::tools::test_support::{NOW_MS, session};
        let mut state = demo();
        let npc = state
            .characters
            .iter()
            .find(|c| c.kind == "npc")
            .expect("the demo has an NPC")
            .clone();
        let to = state.area(npc.area_id.as_str()).unwrap().reachable_area_ids[0].clone();
        let args = json!({"actor_id": npc.character_id, "to_area_id": to});
        let acting = [CharacterId::from("pc_001")];
        let moved = |state: &crate::game::GameState| {
            let mut rng = crate::game::rng::SplitMix64::new(7);
            let mut ctx = ToolContext {
                acting: &acting,
                state,
                rng: &mut rng,
                session_id: &session(),
                role: crate::tools::Role::GameMaster,
                now_ms: NOW_MS,
                user_id: None,
                site_id: None,
            };
            Move.run(&args, &mut ctx).map(|_| ()).map_err(|e| e.reason)
        };
        assert_eq!(moved(&state), Err(Reason::ActorStateRestricted));
        let host = state.party.seats[0].clone();
        state.party.seats.push(Seat {
            seat_id: "seat_2".into(),
            character_id: "pc_002".into(),
            name: "Brin".into(),
            role: SeatRole::Player,
            state: SeatState::Active,
            token_hash: None,
            joined_at: host.joined_at,
        });
        assert_eq!(moved(&state), Ok(()));
    }

    #[test]
    fn a_downed_actor_cannot_move() {
        let mut state = demo();
        state.apply(&Effect::Hp {
            character_id: "pc_001".into(),
            hp: 0,
            state: CharacterState::Downed,
        });
        let next = state.area("area_001").unwrap().reachable_area_ids[0].clone();
        let e = run(&state, json!({"actor_id": "pc_001", "to_area_id": next})).unwrap_err();
        assert_eq!(e.reason, Reason::ActorStateRestricted);
    }
}
