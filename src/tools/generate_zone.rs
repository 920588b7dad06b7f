//! `generate_zone`: add 1..3 open-world zones themed by a world prompt, near the player.
//!
//! Places and ids are always procedural ([`zones::generate_zones`]). Names and
//! descriptions are procedural too, unless `zone_texts` gives them: with a
//! real model the session asks the model for them before the tool runs (see
//! [`zone_text_request`]), and an unusable answer is `INVALID_AI_JSON`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::names::Language;
use crate::game::zones::{self, MAX_ZONES_PER_CALL, ZoneRequest};

/// Most zones one session's world may hold.
pub const MAX_ZONES: usize = 5000;

pub struct GenerateZone;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// this session's id
    #[schemars(length(min = 1, max = 128))]
    session_id: String,
    /// the world's theme, e.g. "haunted pine forest"
    #[schemars(length(min = 1, max = 500))]
    world_prompt: String,
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_ZONES_PER_CALL))]
    count: usize,
    #[serde(default = "yes")]
    near_player: bool,
    // Absent: read from the prompt.
    /// the language of procedural names and descriptions; default: zh when world_prompt has Chinese characters, else en
    language: Option<Language>,
    /// optional name and description for each zone; procedural when left out
    #[serde(default)]
    #[schemars(length(max = MAX_ZONES_PER_CALL))]
    zone_texts: Vec<ZoneText>,
}

/// A name and description for one zone, written by a model.
// Extra keys are refused in a call's `zone_texts` but not in the model's
// answer (`parse_zone_texts`), so only the schema denies them.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields, description = "")]
pub struct ZoneText {
    #[schemars(length(min = 1, max = MAX_ZONE_NAME))]
    pub name: String,
    #[schemars(length(min = 1, max = MAX_ZONE_DESCRIPTION))]
    pub description: String,
}

/// Longest model-written zone name and description.
pub(crate) const MAX_ZONE_NAME: usize = 80;
pub(crate) const MAX_ZONE_DESCRIPTION: usize = 400;

/// The instructions and request a model answers to write zone text for a
/// `generate_zone` call, or `None` when the call already carries its text
/// (or its arguments are not usable: the pipeline will say why).
pub fn zone_text_request(args: &Value) -> Option<(String, String)> {
    let args: Args = serde_json::from_value(args.clone()).ok()?;
    if !args.zone_texts.is_empty() {
        return None;
    }
    let count = args.count.clamp(1, MAX_ZONES_PER_CALL);
    let system = format!(
        "You write places for a role-playing game. Answer with JSON only, no prose: an array of \
         exactly {count} objects {{\"name\": string (at most {MAX_ZONE_NAME} characters), \
         \"description\": string (one or two sentences, at most {MAX_ZONE_DESCRIPTION} characters)}}. \
         {}",
        match args.language {
            Some(Language::En) => "Write in English.",
            Some(Language::Zh) => "Write in Chinese.",
            None => "Write in the language of the world description.",
        }
    );
    let user = format!(
        "World: {}\nWrite {count} new zones of this world.",
        args.world_prompt
    );
    Some((system, user))
}

/// Reads a model's answer to [`zone_text_request`]: a JSON array (a code
/// fence around it is tolerated) of at least `count` usable entries.
pub fn parse_zone_texts(answer: &str, args: &Value) -> Result<Vec<ZoneText>, String> {
    let count = args["count"]
        .as_u64()
        .unwrap_or(1)
        .clamp(1, MAX_ZONES_PER_CALL as u64) as usize;
    let trimmed = answer.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|s| s.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    let texts: Vec<ZoneText> = serde_json::from_str(body)
        .map_err(|e| format!("the zone text is not the JSON asked for: {e}"))?;
    let usable = |t: &ZoneText| {
        let (n, d) = (t.name.trim(), t.description.trim());
        !n.is_empty()
            && !d.is_empty()
            && n.chars().count() <= MAX_ZONE_NAME
            && d.chars().count() <= MAX_ZONE_DESCRIPTION
    };
    if texts.len() < count || !texts.iter().take(count).all(usable) {
        return Err(format!(
            "the zone text needs {count} entries with a non-empty name (at most {MAX_ZONE_NAME} characters) and description (at most {MAX_ZONE_DESCRIPTION})"
        ));
    }
    Ok(texts.into_iter().take(count).collect())
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
             made procedurally from world_prompt, a short description of the world's theme, and \
             keep its words, in language (en or zh; default: zh when the prompt has Chinese \
             characters, else en); travel to a new zone with move_to_zone.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["ok", "generated", "zones", "created_zone_ids", "seed"],
                "properties": {
                    "ok": {"const": true},
                    "generated": {"type": "integer", "minimum": 1, "maximum": MAX_ZONES_PER_CALL},
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
        let mut zones = zones::generate_zones(&ZoneRequest {
            world_prompt: &args.world_prompt,
            language: args
                .language
                .unwrap_or_else(|| Language::of_text(&args.world_prompt)),
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
        for (zone, text) in zones.iter_mut().zip(&args.zone_texts) {
            zone.name = text.name.trim().to_owned();
            zone.description = text.description.trim().to_owned();
        }
        let created: Vec<&str> = zones.iter().map(|z| z.zone_id.as_str()).collect();
        Ok(ToolOutput {
            result: json!({
                "ok": true,
                "generated": zones.len(),
                "zones": zones,
                "created_zone_ids": created,
                "seed": seed,
            }),
            effect: Some(Effect::AddZones { zones }),
        })
    }

    /// A model that writes content names and describes the zones.
    fn content_request(&self, args: &Value) -> Option<(String, String)> {
        zone_text_request(args)
    }

    fn with_content(&self, args: &mut Value, text: &str) -> Result<(), String> {
        let texts = parse_zone_texts(text, args)?;
        args["zone_texts"] = json!(
            texts
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description}))
                .collect::<Vec<_>>()
        );
        Ok(())
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn model_text_is_asked_for_once_and_read_strictly() {
        let args = json!({"session_id": "s", "world_prompt": "salt flats", "count": 2});
        let (system, user) = zone_text_request(&args).unwrap();
        assert!(system.contains("exactly 2") && user.contains("salt flats"));
        let with_text = json!({"session_id": "s", "world_prompt": "w", "zone_texts": [{"name": "A", "description": "B"}]});
        assert!(zone_text_request(&with_text).is_none());
        let good = r#"```json
[{"name": "Glass Pan", "description": "White and blinding."}, {"name": "Cairn", "description": "Stones."}]
```"#;
        assert_eq!(parse_zone_texts(good, &args).unwrap()[1].name, "Cairn");
        for bad in [
            "",
            "the flats are wide",
            "[]",
            r#"[{"name": "A", "description": "B"}]"#,
            r#"[{"name": "", "description": "B"}, {"name": "C", "description": "D"}]"#,
        ] {
            assert!(parse_zone_texts(bad, &args).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;
    use crate::game::rng::SplitMix64;
    use crate::game::zones::{GridPos, zone_at};
    use crate::tools::Role;
    use crate::tools::test_support::{SESSION, ctx_run, demo, pipeline};

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
        // Seed 000's answer: ok and the number made, beside the zones.
        assert_eq!(
            (&out.result["ok"], &out.result["generated"]),
            (&json!(true), &json!(3))
        );
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
        assert_eq!(out.result["generated"], 1);
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
            json!({"session_id": SESSION, "world_prompt": "ice", "language": "fr"}),
            json!({"session_id": SESSION, "world_prompt": "ice", "language": null}),
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

    #[test]
    fn names_keep_the_prompt_in_its_language_or_the_one_asked_for() {
        let state = demo();
        let zone = |args: Value| {
            let out = invoke(args, Role::GameMaster, &state).unwrap();
            let z = &out.result["zones"][0];
            (
                z["name"].as_str().unwrap().to_owned(),
                z["description"].as_str().unwrap().to_owned(),
            )
        };
        let (name, description) =
            zone(json!({"session_id": SESSION, "world_prompt": "a misty forest of lanterns"}));
        assert!(name.starts_with("Misty Forest of Lanterns, "), "{name}");
        assert!(
            description.contains("misty forest of lanterns"),
            "{description}"
        );
        let ascii = |s: &str| s.chars().any(|c| c.is_ascii_alphabetic());
        let (name, description) = zone(json!({"session_id": SESSION, "world_prompt": "迷雾沼泽"}));
        assert!(name.starts_with("迷雾沼泽·") && !ascii(&name), "{name}");
        assert!(!ascii(&description), "{description}");
        let (name, _) =
            zone(json!({"session_id": SESSION, "world_prompt": "the wilds", "language": "zh"}));
        assert!(name.starts_with("wilds·"), "{name}");
        // A model writing the text is told the language.
        let asked = json!({"session_id": "s", "world_prompt": "ice", "language": "zh"});
        assert!(
            zone_text_request(&asked)
                .unwrap()
                .0
                .contains("Write in Chinese.")
        );
    }

    #[test]
    fn the_seed_example_answers_as_the_seed_shows() {
        let args = json!({"session_id": SESSION, "world_prompt": "剑与魔法世界", "count": 1, "near_player": true});
        let out = invoke(args, Role::GameMaster, &demo()).unwrap();
        assert_eq!(out.result["ok"], true);
        assert_eq!(out.result["generated"], 1);
        let zone = &out.result["zones"][0];
        for field in ["zone_id", "name", "x", "y", "z", "description", "tags"] {
            assert!(!zone[field].is_null(), "{field} in {zone}");
        }
        let id = format!("zone_{}_{}_{}", zone["x"], zone["y"], zone["z"]);
        assert_eq!(zone["zone_id"], json!(id));
    }
}
