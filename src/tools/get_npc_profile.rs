//! `get_npc_profile`: an NPC's persona at its active or a given version (read-only).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::GameState;
use crate::game::content::{NpcProfile, PROMPT_TYPES};

/// Highest version number a caller may ask for.
pub const MAX_VERSION: u32 = 1_000_000;
/// Most ids listed in a not-found message.
const LISTED_IDS: usize = 20;

pub struct GetNpcProfile;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// the NPC's id, or the id of the character that plays it
    #[schemars(length(min = 1, max = 64))]
    npc_id: String,
    #[schemars(range(min = 1, max = MAX_VERSION))]
    version: Option<u32>,
}

/// Finds an NPC by its id, or by the id of the character that plays it
/// (what the map's points of interest name), or reports which ones exist
/// (also used by `get_prompt_active`).
pub(super) fn npc<'a>(state: &'a GameState, id: &str) -> Result<&'a NpcProfile, ToolError> {
    let by_character = || {
        state
            .npcs
            .iter()
            .find(|n| n.character_id.as_deref() == Some(id))
    };
    state.npc(id).or_else(by_character).ok_or_else(|| {
        let known: Vec<&str> = state
            .npcs
            .iter()
            .take(LISTED_IDS)
            .map(|n| n.npc_id.as_str())
            .collect();
        let listed = if known.is_empty() {
            "this game has no npcs".to_owned()
        } else {
            format!("npcs: {}", known.join(", "))
        };
        ToolError::new(
            Reason::NotFound,
            ErrorCode::InvalidArgs,
            format!("no npc {id:?}; {listed}"),
        )
    })
}

/// The prompt types an NPC has, in [`PROMPT_TYPES`] order.
pub(super) fn prompt_types(npc: &NpcProfile) -> Vec<&'static str> {
    PROMPT_TYPES
        .iter()
        .copied()
        .filter(|t| npc.prompts.contains_key(*t))
        .collect()
}

impl Tool for GetNpcProfile {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "get_npc_profile",
            "NPC profile",
            "content",
            "Read an NPC's persona, background, traits and speech style (its active version unless \
             version is given), which prompt types it has and where its character stands, with \
             what it knows (knowledge_domains), how it greets (greeting_templates), its longest \
             answer (max_response_length) and whether it must cite sources. Use it before voicing \
             an NPC. Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": [
                    "npc_id", "name", "active", "active_version", "version", "profile", "prompt_types", "character_id", "area_id",
                    "persona", "knowledge_domains", "greeting_templates", "max_response_length", "must_cite_sources"
                ],
                "properties": {
                    "npc_id": {"type": "string"},
                    "name": {"type": "string"},
                    "active": {"type": "boolean"},
                    "active_version": {"type": "integer"},
                    "version": {"type": "integer", "minimum": 1},
                    "profile": {
                        "type": "object",
                        "required": ["version", "persona", "background", "traits", "speech_style"]
                    },
                    "prompt_types": {"type": "array", "items": {"enum": PROMPT_TYPES}},
                    "character_id": {"type": ["string", "null"]},
                    "area_id": {"type": ["string", "null"]},
                    "persona": {
                        "type": "object",
                        "required": ["description", "background", "traits", "speech_style"],
                        "properties": {
                            "description": {"type": "string"},
                            "background": {"type": "string"},
                            "traits": {"type": "array", "items": {"type": "string"}},
                            "speech_style": {"type": "string"}
                        }
                    },
                    "knowledge_domains": {"type": "array", "items": {"type": "string"}},
                    "greeting_templates": {"type": "array", "items": {"type": "string"}},
                    "max_response_length": {"type": "integer", "minimum": 1},
                    "must_cite_sources": {"type": "boolean"}
                }
            }),
        )
        .on_sites()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        let npc = npc(state, &args.npc_id)?;
        let version = npc.version(args.version).ok_or_else(|| {
            let known: Vec<String> = npc.versions.iter().map(|v| v.version.to_string()).collect();
            let wanted = args.version.unwrap_or(npc.active_version);
            ToolError::new(
                Reason::NotFound,
                ErrorCode::InvalidArgs,
                format!(
                    "npc {} has no version {wanted}; versions: {}",
                    npc.npc_id,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?;
        let area_id = npc
            .character_id
            .as_deref()
            .and_then(|c| state.character(c))
            .map(|c| c.area_id.as_str());
        Ok(ToolOutput {
            result: json!({
                "npc_id": npc.npc_id,
                "name": npc.name,
                "active": npc.active,
                "active_version": npc.active_version,
                "version": version.version,
                "profile": version,
                "prompt_types": prompt_types(npc),
                "character_id": npc.character_id,
                "area_id": area_id,
                "persona": {
                    "description": version.persona,
                    "background": version.background,
                    "traits": version.traits,
                    "speech_style": version.speech_style,
                },
                "knowledge_domains": npc.voice.knowledge_domains,
                "greeting_templates": npc.voice.greeting_templates,
                "max_response_length": npc.voice.max_response_length,
                "must_cite_sources": npc.voice.must_cite_sources,
            }),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline};

    fn invoke(state: &GameState, args: Value) -> Result<ToolOutput, ToolError> {
        pipeline("get_npc_profile", state, args, Role::Player)
    }

    #[test]
    fn reads_the_active_or_a_given_version() {
        let state = demo();
        // (args, expected version, expected persona fragment)
        let cases = [
            (json!({"npc_id": "npc_maren"}), 2, "fear the oath"),
            (
                json!({"npc_id": "npc_maren", "version": 1}),
                1,
                "tends the alcove",
            ),
            (
                json!({"npc_id": "npc_maren", "version": 2}),
                2,
                "fear the oath",
            ),
            (json!({"npc_id": "npc_silt"}), 1, "monk"),
        ];
        for (args, version, persona) in cases {
            let out = invoke(&state, args.clone()).unwrap();
            assert_eq!(out.result["version"], version, "{args}");
            assert_eq!(out.result["profile"]["version"], version, "{args}");
            assert!(
                out.result["profile"]["persona"]
                    .as_str()
                    .unwrap()
                    .contains(persona),
                "{args}"
            );
            assert!(out.effect.is_none());
        }
        let out = ctx_run(&GetNpcProfile, &state, &json!({"npc_id": "npc_maren"})).unwrap();
        assert_eq!(
            out.result,
            json!({
                "npc_id": "npc_maren",
                "name": "Old Maren",
                "active": true,
                "active_version": 2,
                "version": 2,
                "profile": serde_json::to_value(state.npc("npc_maren").unwrap().version(None)).unwrap(),
                "prompt_types": ["system", "greeting", "fallback"],
                "character_id": "npc_001",
                "area_id": "area_002",
                "persona": {
                    "description": "The last lamplighter of Vell, who has begun to fear the oath is failing and quietly looks for someone to carry it on.",
                    "background": "She swore the lamplighters' oath as an apprentice the night the city sank. The oil is running low, and she holds the brass key to the Tide Archive.",
                    "traits": ["patient", "weary", "hopeful", "secretive"],
                    "speech_style": "slow and plain, with lamplighter sayings; asks questions back instead of answering",
                },
                "knowledge_domains": ["the lamplighters' oath", "the sinking of Vell", "lantern oil and wicks"],
                "greeting_templates": [
                    "Mind the hooks, dear. Have you brought oil, or only questions?",
                    "Another face in the lamplight. Sit, if the damp doesn't trouble you.",
                ],
                "max_response_length": 400,
                "must_cite_sources": true,
            })
        );
    }

    #[test]
    fn the_persona_follows_the_version_and_the_voice_has_defaults() {
        let state = demo();
        let out = invoke(&state, json!({"npc_id": "npc_maren", "version": 1})).unwrap();
        assert_eq!(
            out.result["persona"]["description"],
            "The last lamplighter of Vell, a stooped woman who tends the alcove's oil and wicks."
        );
        assert_eq!(
            out.result["persona"]["traits"],
            json!(["patient", "secretive", "dutiful"])
        );
        // An NPC whose campaign says nothing of its voice gets the defaults.
        let out = invoke(&state, json!({"npc_id": "npc_silt"})).unwrap();
        assert_eq!(
            (
                &out.result["knowledge_domains"],
                &out.result["greeting_templates"],
                &out.result["max_response_length"],
                &out.result["must_cite_sources"],
            ),
            (&json!([]), &json!([]), &json!(500), &json!(false))
        );
    }

    #[test]
    fn lists_only_the_prompts_it_has_and_follows_its_character() {
        let mut state = demo();
        let out = ctx_run(&GetNpcProfile, &state, &json!({"npc_id": "npc_warden"})).unwrap();
        assert_eq!(out.result["prompt_types"], json!(["system", "greeting"]));
        assert_eq!(out.result["area_id"], "area_009");

        state.apply(&crate::game::Effect::Move {
            character_id: "npc_003".into(),
            to_area_id: "area_008".into(),
        });
        let out = ctx_run(&GetNpcProfile, &state, &json!({"npc_id": "npc_warden"})).unwrap();
        assert_eq!(out.result["area_id"], "area_008");

        // An NPC with no body, or whose body is gone, stands nowhere.
        for character_id in [None, Some(crate::ids::CharacterId::from("npc_404"))] {
            let mut npc = state.npc("npc_silt").unwrap().clone();
            npc.character_id = character_id.clone();
            state.apply(&crate::game::Effect::PutNpc { npc });
            let out = invoke(&state, json!({"npc_id": "npc_silt"})).unwrap();
            assert_eq!(out.result["area_id"], Value::Null, "{character_id:?}");
            assert_eq!(
                out.result["character_id"],
                json!(character_id),
                "{character_id:?}"
            );
        }
    }

    #[test]
    fn unknown_npcs_and_versions_are_not_found() {
        let state = demo();
        let e = ctx_run(&GetNpcProfile, &state, &json!({"npc_id": "npc_ghost"})).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::InvalidArgs)
        );
        assert!(
            e.message.contains("npc_maren") && e.message.contains("npc_warden"),
            "{}",
            e.message
        );
        // A character's id finds the NPC it plays (what the map's points
        // of interest name); a character that plays none is still unknown.
        let found = ctx_run(&GetNpcProfile, &state, &json!({"npc_id": "npc_001"})).unwrap();
        assert_eq!(found.result["npc_id"], "npc_maren");
        let e = ctx_run(&GetNpcProfile, &state, &json!({"npc_id": "pc_001"})).unwrap_err();
        assert_eq!(e.reason, Reason::NotFound);

        let e = ctx_run(
            &GetNpcProfile,
            &state,
            &json!({"npc_id": "npc_maren", "version": 3}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::InvalidArgs)
        );
        assert!(e.message.contains("versions: 1, 2"), "{}", e.message);

        let mut empty = demo();
        std::sync::Arc::make_mut(&mut empty.npcs).clear();
        let e = ctx_run(&GetNpcProfile, &empty, &json!({"npc_id": "npc_maren"})).unwrap_err();
        assert!(e.message.contains("no npcs"), "{}", e.message);
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = demo();
        for bad in [
            json!({}),
            json!({"npc_id": ""}),
            json!({"npc_id": "npc_maren", "version": 0}),
            json!({"npc_id": "npc_maren", "version": "2"}),
            json!({"npc_id": "npc_maren", "version": 1.5}),
            json!({"npc_id": "npc_maren", "mood": "grim"}),
            json!({"npc_id": "x".repeat(65)}),
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
