//! `activate_npc`: a person switches on an NPC (for example one that
//! `create_npc` made inactive). Never offered to the model.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Role, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;

pub struct ActivateNpc;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(min = 1, max = 64))]
    npc_id: String,
    #[serde(default = "yes")]
    active: bool,
}

fn yes() -> bool {
    true
}

impl Tool for ActivateNpc {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "activate_npc",
            "Activate NPC",
            "admin",
            "Activate (or, with active false, deactivate) an NPC so the game may use it.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["npc_id", "active", "changed"],
                "properties": {
                    "npc_id": {"type": "string"},
                    "active": {"type": "boolean"},
                    "changed": {"type": "boolean"}
                }
            }),
        )
        .writes()
        .people_only()
        .roles(&[Role::Player, Role::Admin, Role::GmAdmin, Role::Owner])
        .requires_auth()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let npc = ctx.state.npc(&args.npc_id).ok_or_else(|| {
            let known: Vec<&str> = ctx.state.npcs.iter().map(|n| n.npc_id.as_str()).collect();
            ToolError::new(
                Reason::NotFound,
                ErrorCode::InvalidArgs,
                format!("no npc {:?}; npcs: {}", args.npc_id, known.join(", ")),
            )
        })?;
        let changed = npc.active != args.active;
        let mut updated = npc.clone();
        updated.active = args.active;
        Ok(ToolOutput {
            result: json!({"npc_id": npc.npc_id, "active": args.active, "changed": changed}),
            effect: changed.then_some(Effect::PutNpc { npc: updated }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::content::{NpcProfile, NpcVersion};
    use crate::tools::test_support::{demo, run_as};

    #[test]
    fn activates_once_and_refuses_unknown_npcs() {
        let mut state = demo();
        std::sync::Arc::make_mut(&mut state.npcs).push(NpcProfile {
            npc_id: "npc_new".into(),
            name: "New".into(),
            character_id: None,
            active: false,
            active_version: 1,
            versions: vec![NpcVersion {
                version: 1,
                persona: "quiet".into(),
                background: String::new(),
                traits: vec![],
                speech_style: String::new(),
            }],
            prompts: Default::default(),
            tags: vec![],
            voice: Default::default(),
        });
        let out = run_as(
            &ActivateNpc,
            &state,
            &json!({"npc_id": "npc_new"}),
            Role::Player,
        )
        .unwrap();
        assert_eq!(out.result["changed"], true);
        state.apply(out.effect.as_ref().unwrap());
        assert!(state.npc("npc_new").unwrap().active);
        let again = run_as(
            &ActivateNpc,
            &state,
            &json!({"npc_id": "npc_new"}),
            Role::Player,
        )
        .unwrap();
        assert_eq!(
            (again.result["changed"].as_bool(), again.effect),
            (Some(false), None)
        );
        let e = run_as(
            &ActivateNpc,
            &state,
            &json!({"npc_id": "ghost"}),
            Role::Player,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::NotFound);
    }
}
