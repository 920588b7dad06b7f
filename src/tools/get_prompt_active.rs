//! `get_prompt_active`: the prompt text an active NPC is voiced with (read-only).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::get_npc_profile::{npc, prompt_types};
use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::content::PROMPT_TYPES;

pub struct GetPromptActive;

/// The prompt read when the caller names no type.
pub const DEFAULT_PROMPT_TYPE: &str = "system";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(min = 1, max = 64))]
    npc_id: String,
    #[serde(default = "default_prompt_type")]
    #[schemars(extend("enum" = PROMPT_TYPES))]
    prompt_type: String,
}

fn default_prompt_type() -> String {
    DEFAULT_PROMPT_TYPE.to_owned()
}

impl Tool for GetPromptActive {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "get_prompt_active",
            "Active NPC prompt",
            "content",
            "Read the system (default), greeting or fallback prompt of an active NPC, with the \
             persona version in use and the NPC's name and knowledge domains. Inactive NPCs have \
             none until a person activates them. Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["npc_id", "prompt_type", "prompt", "prompt_text", "version", "metadata"],
                "properties": {
                    "npc_id": {"type": "string"},
                    "prompt_type": {"enum": PROMPT_TYPES},
                    "prompt": {"type": "string"},
                    "prompt_text": {"type": "string"},
                    "version": {"type": "integer"},
                    "metadata": {
                        "type": "object",
                        "required": ["name", "knowledge_domains"],
                        "properties": {
                            "name": {"type": "string"},
                            "knowledge_domains": {"type": "array", "items": {"type": "string"}}
                        }
                    }
                }
            }),
        )
        .on_sites()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let npc = npc(ctx.state, &args.npc_id)?;
        if !npc.active {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!(
                    "npc {} is inactive until a person activates it; voice another npc",
                    npc.npc_id
                ),
            ));
        }
        let prompt = npc.prompts.get(&args.prompt_type).ok_or_else(|| {
            let has = prompt_types(npc);
            let listed = if has.is_empty() {
                "it has no prompts".to_owned()
            } else {
                format!("it has: {}", has.join(", "))
            };
            ToolError::new(
                Reason::NotFound,
                ErrorCode::InvalidArgs,
                format!(
                    "npc {} has no {} prompt; {listed}",
                    npc.npc_id, args.prompt_type
                ),
            )
        })?;
        Ok(ToolOutput {
            result: json!({
                "npc_id": npc.npc_id,
                "prompt_type": args.prompt_type,
                "prompt": prompt,
                "prompt_text": prompt,
                "version": npc.active_version,
                "metadata": {"name": npc.name, "knowledge_domains": npc.voice.knowledge_domains},
            }),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::game::{Effect, GameState};
    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline};

    fn invoke(state: &GameState, args: Value) -> Result<ToolOutput, ToolError> {
        pipeline("get_prompt_active", state, args, Role::GameMaster)
    }

    #[test]
    fn reads_each_prompt_with_the_active_version() {
        let state = demo();
        // (npc, prompt type, expected fragment, expected version)
        let cases = [
            ("npc_maren", "system", "You are Old Maren", 2),
            ("npc_maren", "greeting", "Mind the hooks", 2),
            ("npc_maren", "fallback", "patience", 2),
            ("npc_silt", "greeting", "The water has carried you", 1),
            ("npc_warden", "system", "Drowned Warden", 1),
        ];
        for (id, kind, fragment, version) in cases {
            let out = invoke(&state, json!({"npc_id": id, "prompt_type": kind})).unwrap();
            assert_eq!(out.result["npc_id"], id);
            assert_eq!(out.result["prompt_type"], kind);
            assert_eq!(out.result["version"], version, "{id} {kind}");
            assert!(
                out.result["prompt"].as_str().unwrap().contains(fragment),
                "{id} {kind}"
            );
            assert!(out.effect.is_none());
        }
    }

    #[test]
    fn answers_in_the_seed_shape_with_system_by_default() {
        let state = demo();
        let out = invoke(&state, json!({"npc_id": "npc_maren"})).unwrap();
        let system = state.npc("npc_maren").unwrap().prompts["system"].clone();
        assert_eq!(
            out.result,
            json!({
                "npc_id": "npc_maren",
                "prompt_type": "system",
                "prompt": system,
                "prompt_text": system,
                "version": 2,
                "metadata": {
                    "name": "Old Maren",
                    "knowledge_domains": ["the lamplighters' oath", "the sinking of Vell", "lantern oil and wicks"],
                },
            })
        );
        let out = invoke(
            &state,
            json!({"npc_id": "npc_warden", "prompt_type": "greeting"}),
        )
        .unwrap();
        assert_eq!(out.result["prompt_text"], out.result["prompt"]);
        assert_eq!(out.result["metadata"]["knowledge_domains"], json!([]));
    }

    #[test]
    fn a_missing_prompt_names_the_ones_it_has() {
        let mut state = demo();
        let e = ctx_run(
            &GetPromptActive,
            &state,
            &json!({"npc_id": "npc_warden", "prompt_type": "fallback"}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::InvalidArgs)
        );
        assert!(e.message.contains("system, greeting"), "{}", e.message);

        let mut bare = state.npc("npc_warden").unwrap().clone();
        bare.prompts.clear();
        state.apply(&Effect::PutNpc { npc: bare });
        let e = ctx_run(
            &GetPromptActive,
            &state,
            &json!({"npc_id": "npc_warden", "prompt_type": "system"}),
        )
        .unwrap_err();
        assert!(e.message.contains("no prompts"), "{}", e.message);
    }

    #[test]
    fn inactive_and_unknown_npcs_are_refused() {
        let mut state = demo();
        let mut sleeping = state.npc("npc_silt").unwrap().clone();
        sleeping.active = false;
        state.apply(&Effect::PutNpc { npc: sleeping });
        let e = ctx_run(
            &GetPromptActive,
            &state,
            &json!({"npc_id": "npc_silt", "prompt_type": "greeting"}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidActorState, ErrorCode::InvalidArgs)
        );
        assert!(
            e.message.contains("inactive until a person activates it"),
            "{}",
            e.message
        );

        let e = ctx_run(
            &GetPromptActive,
            &state,
            &json!({"npc_id": "npc_ghost", "prompt_type": "system"}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::InvalidArgs)
        );
        assert!(e.message.contains("npc_maren"), "{}", e.message);
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = demo();
        for bad in [
            json!({"prompt_type": "system"}),
            json!({"npc_id": "npc_maren", "prompt_type": "farewell"}),
            json!({"npc_id": "npc_maren", "prompt_type": "System"}),
            json!({"npc_id": "", "prompt_type": "system"}),
            json!({"npc_id": "npc_maren", "prompt_type": "system", "version": 1}),
        ] {
            let e = invoke(&state, bad.clone()).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{bad}"
            );
        }
    }
}
