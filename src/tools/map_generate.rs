//! `map_generate`: grow the map with new areas, joined to an existing area
//! or as a new root layer.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason};
use crate::game::Effect;
use crate::game::mapgen::{self, DEFAULT_SIZE, MAX_SIZE, MapRequest};
use crate::game::names::Language;
use crate::game::rng::text_seed;
use crate::game::state::{MAX_LINKS_PER_AREA, MAX_SESSION_AREAS};

/// Largest seed: seeds are echoed back in results, and JSON numbers are
/// exact only up to 2^53 - 1 in most clients.
pub const MAX_SEED: u64 = (1 << 53) - 1;
/// Longest seed given as text (seed 002 writes `"seed": "alpha"`), in
/// characters.
pub const MAX_SEED_TEXT: usize = 128;

pub struct MapGenerate;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    // `Some(null)` (explicit null) asks for a root layer; absent means
    // "where the active character stands".
    #[serde(default, deserialize_with = "explicit_null")]
    #[schemars(with = "Option<String>", length(min = 1), extend("nullable" = true))]
    parent_area_id: Option<Option<String>>,
    #[schemars(length(max = 80))]
    theme: Option<String>,
    // Absent: read from the theme.
    /// the language of the new areas' names and descriptions; default: zh when the theme has Chinese characters, else en
    language: Option<Language>,
    #[serde(default)]
    constraints: Constraints,
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Constraints {
    #[schemars(range(min = 1, max = MAX_SIZE))]
    size: Option<usize>,
    // An integer, or text hashed to one ([`seed_of`]).
    /// the same seed gives the same map: an integer, or any text such as "alpha"
    #[schemars(extend(
        "type" = ["integer", "string"],
        "minimum" = 0,
        "maximum" = MAX_SEED,
        "minLength" = 1,
        "maxLength" = MAX_SEED_TEXT,
        "pattern" = "\\S",
    ))]
    seed: Option<Value>,
}

/// The generator's seed for `constraints.seed`: an integer 0..=[`MAX_SEED`]
/// as given, or a string of 1..=[`MAX_SEED_TEXT`] characters hashed with
/// FNV-1a ([`text_seed`]: trimmed, case ignored) and cut to [`MAX_SEED`],
/// so the same text always gives the same map and the answered seed gives
/// it again.
fn seed_of(seed: &Value) -> Result<u64, ToolError> {
    let refused = || {
        let shown: String = seed.to_string().chars().take(40).collect();
        ToolError::invalid_args(format!(
            "constraints.seed is {shown}; give an integer 0 to {MAX_SEED} or a string of 1 to \
             {MAX_SEED_TEXT} characters"
        ))
    };
    match seed {
        Value::Number(n) => n.as_u64().filter(|s| *s <= MAX_SEED).ok_or_else(refused),
        Value::String(text) if !text.trim().is_empty() && text.chars().count() <= MAX_SEED_TEXT => {
            Ok(text_seed(text) >> 11)
        }
        _ => Err(refused()),
    }
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
             constraints.size is 1..30 (default 6); the same constraints.seed gives the same map. \
             Names keep the theme's words, in language (en or zh; default: zh when the theme has \
             Chinese characters, else en).",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["seed", "root_parent_area_id", "created_area_ids", "created_connections", "connections", "areas", "warnings"],
                "properties": {
                    "seed": {"type": "integer"},
                    "root_parent_area_id": {"type": ["string", "null"]},
                    "created_area_ids": {"type": "array", "items": {"type": "string"}},
                    "created_connections": {"type": "integer", "minimum": 0},
                    "connections": {
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
                    .map(|a| a.area_id.to_string())
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
        if !(1..=MAX_SIZE).contains(&size) {
            return Err(ToolError::invalid_args(format!(
                "constraints.size is {size}; give 1 to {MAX_SIZE}"
            )));
        }
        let given_seed = args.constraints.seed.as_ref().map(seed_of).transpose()?;
        // size is at most MAX_SIZE here, so the sum cannot overflow.
        if state.areas.len() + size > MAX_SESSION_AREAS {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!(
                    "this session already has {} areas; {size} more would pass \
                     {MAX_SESSION_AREAS}, the most it may hold",
                    state.areas.len()
                ),
            ));
        }
        if let Some(p) = parent
            && p.reachable_area_ids.len() >= MAX_LINKS_PER_AREA
        {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!(
                    "area {} already has {} links, the most an area may have; generate from \
                     another area, or give parent_area_id null for a new root layer",
                    p.area_id,
                    p.reachable_area_ids.len()
                ),
            ));
        }
        let theme = args.theme.unwrap_or_default();
        let language = args.language.unwrap_or_else(|| Language::of_text(&theme));
        if theme.trim().is_empty() {
            warnings.push("no theme given; generic names were used".to_owned());
        }
        // Seeds stay within JSON's exact integer range so they round-trip.
        let seed = match given_seed {
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
            language,
            size,
            seed,
        })
        .map_err(|e| {
            ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                e.to_string(),
            )
        })?;
        let created: Vec<&str> = map.areas.iter().map(|a| a.area_id.as_str()).collect();
        // Every connection once, as (from, to), links to the parent first.
        let mut connections: Vec<(String, String)> = map
            .links
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        for area in &map.areas {
            for n in &area.reachable_area_ids {
                if area.area_id.as_str() < n.as_str() && created.contains(&n.as_str()) {
                    connections.push((area.area_id.to_string(), n.to_string()));
                }
            }
        }
        Ok(ToolOutput {
            result: json!({
                "seed": seed,
                "root_parent_area_id": parent_id,
                "created_area_ids": created,
                "created_connections": connections.len(),
                "connections": connections,
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
        assert_eq!(a.result["connections"][0], json!(["area_001", first]));
        assert_eq!(
            a.result["created_connections"],
            a.result["connections"].as_array().unwrap().len(),
            "seed 002 counts them"
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

    #[test]
    fn sizes_seeds_and_caps_are_bounded() {
        use crate::game::state::{AreaMap, MAX_LINKS_PER_AREA, MAX_SESSION_AREAS};
        use crate::tools::test_support::assert_refusals;

        let state = demo();
        // Direct calls skip the schema; run() checks the numbers itself.
        assert_refusals(
            [
                (
                    json!({"constraints": {"size": 0}}),
                    Reason::InvalidArgs,
                    "give 1 to 30",
                ),
                (
                    json!({"constraints": {"size": 31}}),
                    Reason::InvalidArgs,
                    "give 1 to 30",
                ),
                (
                    json!({"constraints": {"size": u64::MAX}}),
                    Reason::InvalidArgs,
                    "give 1 to 30",
                ),
                (
                    json!({"constraints": {"seed": MAX_SEED + 1}}),
                    Reason::InvalidArgs,
                    "constraints.seed",
                ),
                (
                    json!({"constraints": {"seed": -1}}),
                    Reason::InvalidArgs,
                    "-1",
                ),
            ],
            |a| ctx_run(&MapGenerate, &state, a),
        );
        assert!(
            ctx_run(
                &MapGenerate,
                &state,
                &json!({"constraints": {"seed": MAX_SEED}})
            )
            .is_ok()
        );

        // A parent with every link it may have.
        let mut crowded = demo();
        let mut areas = crowded.areas.to_vec();
        areas[0].reachable_area_ids = (0..MAX_LINKS_PER_AREA)
            .map(|i| format!("elsewhere_{i}").into())
            .collect();
        crowded.areas = areas.into();
        let e = ctx_run(
            &MapGenerate,
            &crowded,
            &json!({"parent_area_id": "area_001"}),
        )
        .unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidActorState, ErrorCode::InvalidArgs)
        );
        assert!(e.message.contains("already has 64 links"), "{}", e.message);
        assert!(ctx_run(&MapGenerate, &crowded, &json!({"parent_area_id": null})).is_ok());

        // A map one generation short of the session's cap.
        let mut full = demo();
        let mut areas = full.areas.to_vec();
        let template = areas[0].clone();
        while areas.len() < MAX_SESSION_AREAS - 2 {
            let mut a = template.clone();
            a.area_id = format!("filler_{}", areas.len()).into();
            a.reachable_area_ids.clear();
            areas.push(a);
        }
        full.areas = AreaMap::from(areas);
        let e = ctx_run(&MapGenerate, &full, &json!({"constraints": {"size": 3}})).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidActorState);
        assert!(e.message.contains("the most it may hold"), "{}", e.message);
        let out = ctx_run(&MapGenerate, &full, &json!({"constraints": {"size": 2}})).unwrap();
        full.apply(out.effect.as_ref().unwrap());
        assert_eq!(full.areas.len(), MAX_SESSION_AREAS);
    }

    #[test]
    fn a_text_seed_gives_the_same_map_every_time() {
        use crate::tools::Role;
        use crate::tools::test_support::pipeline;

        let state = demo();
        // Seed 002's own call, through the whole pipeline.
        let alpha = json!({"parent_area_id": "area_001", "theme": "Cave", "constraints": {"size": 6, "seed": "alpha"}});
        let a = pipeline("map_generate", &state, alpha.clone(), Role::GameMaster).unwrap();
        let again = pipeline("map_generate", &state, alpha.clone(), Role::GameMaster).unwrap();
        assert_eq!(a, again, "the same text, the same map");
        assert_eq!(a.result["created_area_ids"].as_array().unwrap().len(), 6);
        assert_eq!(a.result["warnings"], json!([]), "a seed was given");
        let seed = a.result["seed"].as_u64().unwrap();
        assert!(seed <= MAX_SEED);
        // The answered seed, given as a number, makes the same map.
        let mut by_number = alpha.clone();
        by_number["constraints"]["seed"] = json!(seed);
        assert_eq!(
            pipeline("map_generate", &state, by_number, Role::GameMaster)
                .unwrap()
                .result["areas"],
            a.result["areas"]
        );
        let mut beta = alpha;
        beta["constraints"]["seed"] = json!("beta");
        let b = pipeline("map_generate", &state, beta, Role::GameMaster).unwrap();
        assert_ne!(b.result["seed"], a.result["seed"]);
        assert_ne!(
            b.result["areas"], a.result["areas"],
            "other text, another map"
        );

        let long = "s".repeat(MAX_SEED_TEXT + 1);
        for bad in [
            json!(""),
            json!("  "),
            json!(long),
            json!(1.5),
            json!(true),
            json!(-1),
        ] {
            let args = json!({"constraints": {"seed": bad}});
            for e in [
                pipeline("map_generate", &state, args.clone(), Role::GameMaster).unwrap_err(),
                ctx_run(&MapGenerate, &state, &args).unwrap_err(),
            ] {
                assert_eq!(
                    (e.reason, e.code),
                    (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                    "{bad}"
                );
                assert!(e.message.contains("seed"), "{bad}: {}", e.message);
            }
        }
        let most = "s".repeat(MAX_SEED_TEXT);
        assert!(
            ctx_run(
                &MapGenerate,
                &state,
                &json!({"constraints": {"seed": most}})
            )
            .is_ok()
        );
    }

    #[test]
    fn names_are_in_the_language_asked_for_or_the_themes() {
        use crate::tools::Role;
        use crate::tools::test_support::pipeline;

        let state = demo();
        let names = |args: Value| -> Vec<String> {
            let out = pipeline("map_generate", &state, args, Role::GameMaster).unwrap();
            out.result["areas"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let chinese = |n: &String| !n.chars().any(|c| c.is_ascii_alphabetic());
        // Read from the theme when not given.
        let caves = names(json!({"theme": "洞穴", "constraints": {"seed": 1}}));
        assert!(
            caves.iter().all(|n| chinese(n) && n.contains("洞穴")),
            "{caves:?}"
        );
        let english = names(json!({"theme": "crystal caves", "constraints": {"seed": 1}}));
        assert!(
            english.iter().all(|n| n.contains("Crystal Caves")),
            "{english:?}"
        );
        // Given: a bare call in a Chinese game names places in Chinese.
        let bare = names(json!({"language": "zh", "constraints": {"seed": 1}}));
        assert!(bare.iter().all(chinese), "{bare:?}");
        assert_eq!(
            names(json!({"theme": "ice", "language": "en", "constraints": {"seed": 1}})),
            names(json!({"theme": "ice", "constraints": {"seed": 1}}))
        );
        for bad in [json!("fr"), json!("ZH"), json!(1)] {
            let args = json!({"language": bad});
            for e in [
                pipeline("map_generate", &state, args.clone(), Role::GameMaster).unwrap_err(),
                ctx_run(&MapGenerate, &state, &args).unwrap_err(),
            ] {
                assert_eq!(e.reason, Reason::InvalidArgs, "{bad}: {}", e.message);
            }
        }
    }

    #[test]
    fn an_area_number_at_the_top_of_its_range_is_an_error() {
        let mut state = demo();
        let mut areas = state.areas.to_vec();
        areas[1].area_id = format!("area_{}", u64::MAX).into();
        state.areas = areas.into();
        let e = ctx_run(&MapGenerate, &state, &json!({})).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidActorState);
        assert!(e.message.contains("no fresh area id"), "{}", e.message);
    }
}
