//! `create_npc`: a person adds a new NPC profile, inactive until activated.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::add_inventory::slugify;
use super::{Role, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, character};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::content::{NpcProfile, NpcVersion};

/// Only people who design the game create NPCs.
pub const NPC_ROLES: &[Role] = &[Role::GmAdmin, Role::Owner];
/// Most traits, and most tags, on one NPC.
pub const MAX_LIST: usize = 20;
/// Longest given npc_id.
pub const MAX_NPC_ID: usize = 48;
/// Most NPC profiles one session may hold, the campaign's included; past it
/// create_npc refuses rather than grow the save without end.
pub const MAX_SESSION_NPCS: usize = 1000;

pub struct CreateNpc;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(pattern("^[a-z0-9_]{1,48}$"))]
    npc_id: Option<String>,
    #[schemars(length(min = 1, max = 80))]
    name: String,
    /// who the npc is, in a few sentences
    #[schemars(length(min = 1, max = 2000))]
    persona: String,
    #[schemars(length(max = 4000))]
    background: Option<String>,
    #[serde(default)]
    #[schemars(length(max = MAX_LIST), inner(length(min = 1, max = 80)))]
    traits: Vec<String>,
    #[schemars(length(max = 200))]
    speech_style: Option<String>,
    #[serde(default)]
    prompts: Prompts,
    /// the character on the map this npc speaks for
    #[schemars(length(min = 1, max = 64))]
    character_id: Option<String>,
    #[serde(default)]
    #[schemars(length(max = MAX_LIST), inner(length(min = 1, max = 40)))]
    tags: Vec<String>,
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Prompts {
    #[schemars(length(max = 4000))]
    system: Option<String>,
    #[schemars(length(max = 4000))]
    greeting: Option<String>,
    #[schemars(length(max = 4000))]
    fallback: Option<String>,
}

/// Whether `id` matches `^[a-z0-9_]{1,48}$`.
fn valid_npc_id(id: &str) -> bool {
    (1..=MAX_NPC_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Trimmed, non-blank entries of a list, or an error naming the field.
fn clean_list(field: &str, list: Vec<String>) -> Result<Vec<String>, ToolError> {
    if list.len() > MAX_LIST {
        return Err(ToolError::invalid_args(format!(
            "{field} holds {}; give at most {MAX_LIST}",
            list.len()
        )));
    }
    Ok(list
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect())
}

fn trimmed(text: Option<String>) -> String {
    text.as_deref()
        .map(str::trim)
        .unwrap_or_default()
        .to_owned()
}

impl Tool for CreateNpc {
    fn spec(&self) -> ToolSpec {
        let mut spec = ToolSpec::new(
            "create_npc",
            "Create NPC",
            "admin",
            "Create a new NPC profile (persona, background, traits, speech style, prompts), \
             optionally tied to a character on the map. The NPC starts inactive until a person \
             activates it. npc_id defaults to npc_ plus the name in lower case with underscores.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["npc_id", "active", "note", "npc"],
                "properties": {
                    "npc_id": {"type": "string"},
                    "active": {"const": false},
                    "note": {"type": "string"},
                    "npc": {
                        "type": "object",
                        "required": ["npc_id", "name", "active", "active_version", "versions", "prompts", "tags"],
                        "properties": {
                            "active": {"const": false},
                            "versions": {"type": "array", "minItems": 1, "maxItems": 1},
                            "prompts": {"type": "object", "additionalProperties": {"type": "string"}}
                        }
                    }
                }
            }),
        )
        .writes()
        .roles(NPC_ROLES)
        .requires_auth();
        spec.ai_callable = false;
        spec
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        if state.npcs.len() >= MAX_SESSION_NPCS {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!(
                    "this session already has {} npcs, the most it may hold",
                    state.npcs.len()
                ),
            ));
        }
        let name = args.name.trim();
        if name.is_empty() {
            return Err(ToolError::invalid_args(
                "name is blank; give the npc's name",
            ));
        }
        let persona = args.persona.trim();
        if persona.is_empty() {
            return Err(ToolError::invalid_args(
                "persona is blank; describe who the npc is",
            ));
        }
        let npc_id = match args.npc_id {
            Some(id) if valid_npc_id(&id) => id,
            Some(id) => {
                return Err(ToolError::invalid_args(format!(
                    "npc_id {id:?} must be 1 to {MAX_NPC_ID} of a-z, 0-9 and _; or leave it out"
                )));
            }
            None => format!("npc_{}", slugify(name)),
        };
        if state.npc(&npc_id).is_some() {
            return Err(ToolError::invalid_args(format!(
                "npc_id {npc_id} is already taken; give another npc_id"
            )));
        }
        let character_id = match args.character_id {
            Some(id) => Some(character(state, &id)?.character_id.clone()),
            None => None,
        };
        let traits = clean_list("traits", args.traits)?;
        let tags = clean_list("tags", args.tags)?;
        let prompts: BTreeMap<String, String> = [
            ("system", args.prompts.system),
            ("greeting", args.prompts.greeting),
            ("fallback", args.prompts.fallback),
        ]
        .into_iter()
        .filter_map(|(kind, text)| {
            let text = trimmed(text);
            (!text.is_empty()).then(|| (kind.to_owned(), text))
        })
        .collect();
        let npc = NpcProfile {
            npc_id: npc_id.clone(),
            name: name.to_owned(),
            character_id,
            active: false,
            active_version: 1,
            versions: vec![NpcVersion {
                version: 1,
                persona: persona.to_owned(),
                background: trimmed(args.background),
                traits,
                speech_style: trimmed(args.speech_style),
            }],
            prompts,
            tags,
            voice: Default::default(),
        };
        let problems = npc.problems();
        if !problems.is_empty() {
            return Err(ToolError::invalid_args(problems.join("; ")));
        }
        Ok(ToolOutput {
            result: json!({
                "npc_id": npc_id,
                "active": false,
                "note": "inactive until a person activates it",
                "npc": npc,
            }),
            effect: Some(Effect::PutNpc { npc }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;

    use crate::tools::test_support::{assert_refusals, demo, pipeline, run_as, session};
    use crate::tools::{Caller, Registry};

    fn admin(state: &GameState, args: Value) -> Result<ToolOutput, ToolError> {
        run_as(&CreateNpc, state, &args, Role::GmAdmin)
    }

    fn invoke(state: &GameState, args: Value, role: Role) -> Result<ToolOutput, ToolError> {
        pipeline("create_npc", state, args, role)
    }

    #[test]
    fn creates_an_inactive_npc_with_defaults() {
        let mut state = demo();
        let out = admin(
            &state,
            json!({"name": " Old Mara ", "persona": "A ferrywoman who knows every current."}),
        )
        .unwrap();
        assert_eq!(out.result["npc_id"], "npc_old_mara");
        assert_eq!(out.result["active"], false);
        assert_eq!(out.result["note"], "inactive until a person activates it");
        state.apply(out.effect.as_ref().unwrap());
        let npc = state.npc("npc_old_mara").unwrap();
        assert_eq!(out.result["npc"], serde_json::to_value(npc).unwrap());
        assert_eq!(
            npc,
            &NpcProfile {
                npc_id: "npc_old_mara".into(),
                name: "Old Mara".into(),
                character_id: None,
                active: false,
                active_version: 1,
                versions: vec![NpcVersion {
                    version: 1,
                    persona: "A ferrywoman who knows every current.".into(),
                    background: String::new(),
                    traits: vec![],
                    speech_style: String::new(),
                }],
                prompts: BTreeMap::new(),
                tags: vec![],
                voice: Default::default(),
            }
        );
        let once = state.clone();
        state.apply(out.effect.as_ref().unwrap());
        assert_eq!(state, once);
    }

    #[test]
    fn keeps_every_field_given() {
        let mut state = demo();
        let args = json!({
            "npc_id": "maren",
            "name": "Old Maren",
            "persona": "The last lamplighter.",
            "background": "Swore the oath forty years ago.",
            "traits": ["patient", "  ", " wry "],
            "speech_style": "slow, with tide sayings",
            "prompts": {"system": "You are Maren.", "greeting": "Mind the water.", "fallback": " "},
            "character_id": "npc_001",
            "tags": ["lamplighter"]
        });
        let out = admin(&state, args).unwrap();
        state.apply(out.effect.as_ref().unwrap());
        let npc = state.npc("maren").unwrap();
        assert_eq!(npc.character_id.as_deref(), Some("npc_001"));
        assert!(!npc.active);
        let v = npc.version(None).unwrap();
        assert_eq!(v.traits, vec!["patient", "wry"]);
        assert_eq!(v.background, "Swore the oath forty years ago.");
        assert_eq!(v.speech_style, "slow, with tide sayings");
        assert_eq!(
            npc.prompts.keys().collect::<Vec<_>>(),
            vec!["greeting", "system"],
            "blank prompts are left out"
        );
        assert_eq!(npc.tags, vec!["lamplighter"]);
        assert!(npc.problems().is_empty());
    }

    #[test]
    fn default_ids_come_from_any_script() {
        let state = demo();
        let cases = [
            ("老马", "npc_老马"),
            ("Brother Silt!", "npc_brother_silt"),
            ("???", "npc_item"),
        ];
        for (name, id) in cases {
            let out = admin(&state, json!({"name": name, "persona": "p"})).unwrap();
            assert_eq!(out.result["npc_id"], id, "{name}");
        }
    }

    #[test]
    fn refuses_taken_ids_unknown_characters_and_blanks() {
        let mut state = demo();
        let out = admin(&state, json!({"name": "Old Mara", "persona": "p"})).unwrap();
        state.apply(out.effect.as_ref().unwrap());
        let cases = [
            (
                json!({"name": "Old Mara", "persona": "again"}),
                Reason::InvalidArgs,
                "already taken",
            ),
            (
                json!({"npc_id": "npc_old_mara", "name": "Other", "persona": "p"}),
                Reason::InvalidArgs,
                "already taken",
            ),
            (
                json!({"name": "Ghost", "persona": "p", "character_id": "pc_999"}),
                Reason::NotFound,
                "pc_001",
            ),
            (
                json!({"name": "  ", "persona": "p"}),
                Reason::InvalidArgs,
                "name is blank",
            ),
            (
                json!({"name": "X", "persona": "\n"}),
                Reason::InvalidArgs,
                "persona is blank",
            ),
            (
                json!({"npc_id": "Bad-Id", "name": "X", "persona": "p"}),
                Reason::InvalidArgs,
                "a-z, 0-9",
            ),
            (
                json!({"name": "X", "persona": "p", "tags": vec!["t"; 21]}),
                Reason::InvalidArgs,
                "at most 20",
            ),
            (
                json!({"name": "X", "persona": "p", "prompts": {"farewell": "bye"}}),
                Reason::InvalidArgs,
                "farewell",
            ),
        ];
        assert_refusals(cases, |a| admin(&state, a.clone()));
    }

    #[test]
    fn only_people_may_create_npcs() {
        let state = demo();
        let args = json!({"name": "Old Mara", "persona": "A ferrywoman."});
        for role in [Role::GameMaster, Role::Player, Role::Service, Role::Admin] {
            let e = invoke(&state, args.clone(), role).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::PermissionDenied, ErrorCode::PermissionDenied),
                "{role:?}"
            );
        }
        for role in [Role::GmAdmin, Role::Owner] {
            let out = invoke(&state, args.clone(), role).unwrap();
            assert_eq!(out.result["active"], false, "{role:?}");
            assert!(matches!(out.effect, Some(Effect::PutNpc { .. })));
        }
        let spec = CreateNpc.spec();
        assert!(!spec.ai_callable && spec.writes_state);
        let registry = Registry::builtin().unwrap();
        let allowlist = vec!["create_npc".to_string()];
        let model = Caller {
            acting: &[],
            role: Role::GameMaster,
            allowlist: &allowlist,
            session_id: &session(),
            user_id: None,
            site_id: None,
        };
        assert!(
            registry.openai_tools(&model).is_empty(),
            "never offered to the model"
        );
    }

    #[test]
    fn the_schema_refuses_bad_shapes() {
        let state = demo();
        let cases = [
            (json!({"name": "X"}), "persona"),
            (json!({"persona": "p"}), "name"),
            (json!({"name": "", "persona": "p"}), "/name"),
            (
                json!({"name": "X", "persona": "p".repeat(2001)}),
                "/persona",
            ),
            (
                json!({"npc_id": "NPC!", "name": "X", "persona": "p"}),
                "/npc_id",
            ),
            (
                json!({"npc_id": "a".repeat(49), "name": "X", "persona": "p"}),
                "/npc_id",
            ),
            (
                json!({"name": "X", "persona": "p", "traits": vec!["t"; 21]}),
                "/traits",
            ),
            (
                json!({"name": "X", "persona": "p", "tags": [""]}),
                "/tags/0",
            ),
            (
                json!({"name": "X", "persona": "p", "prompts": {"farewell": "bye"}}),
                "/prompts",
            ),
            (json!({"name": "X", "persona": "p", "mood": "grim"}), "mood"),
        ];
        for (args, text) in cases {
            let e = invoke(&state, args.clone(), Role::GmAdmin).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{args}");
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
    }

    #[test]
    fn a_session_holds_a_bounded_number_of_npcs() {
        let mut state = demo();
        let template = state.npcs[0].clone();
        let npcs = std::sync::Arc::make_mut(&mut state.npcs);
        while npcs.len() < MAX_SESSION_NPCS {
            let mut npc = template.clone();
            npc.npc_id = format!("filler_{}", npcs.len());
            npcs.push(npc);
        }
        let e = admin(&state, json!({"name": "One More", "persona": "p"})).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidActorState, ErrorCode::InvalidArgs)
        );
        assert_eq!(
            e.message,
            "this session already has 1000 npcs, the most it may hold"
        );
        std::sync::Arc::make_mut(&mut state.npcs).pop();
        assert!(admin(&state, json!({"name": "One More", "persona": "p"})).is_ok());
    }
}
