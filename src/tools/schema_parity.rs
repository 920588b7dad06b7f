//! The check that each tool's derived input schema refuses exactly the calls
//! its hand-written schema refused before the schemas were derived from the
//! argument structs (`input_schema`). The hand-written schemas are kept here,
//! in the test only, as they were; every tool's calls are tried against both:
//! a table of calls per tool, each varied field by field (missing, null,
//! every JSON type, each bound and one past it, unknown fields).

use serde_json::{Map, Value, json};

use super::Registry;

/// Calls each tool accepts, the starting points of the variations: every
/// field given, then the fewest.
fn accepted(tool: &str) -> Vec<Value> {
    match tool {
        "activate_npc" => vec![
            json!({"npc_id": "npc_a", "active": false}),
            json!({"npc_id": "n"}),
        ],
        "cancel_event" => vec![json!({"timer_id": "tmr_1"}), json!({"key": "k"})],
        "add_inventory" => vec![
            json!({"character_id": "hero", "items": [{"name": "Rope", "description": "old", "quantity": 2, "slug": "rope"}]}),
            json!({"items": [{"name": "Rope"}]}),
        ],
        "create_draft_content" => vec![
            json!({"content_type": "lore", "title": "T", "body": "B", "tags": ["a"], "area_id": "a1", "summary": "s", "domains": ["d"], "source": "src"}),
            json!({"content_type": "poi", "title": "T", "body": "B"}),
        ],
        "create_npc" => vec![
            json!({"npc_id": "npc_x", "name": "X", "persona": "p", "background": "b", "traits": ["t"], "speech_style": "s",
                   "prompts": {"system": "s", "greeting": "g", "fallback": "f"}, "character_id": "c", "tags": ["t"]}),
            json!({"name": "X", "persona": "p"}),
        ],
        "describe_entity" => vec![json!({"name": "Character"})],
        "generate_zone" => vec![
            json!({"session_id": "s", "world_prompt": "w", "count": 2, "near_player": false, "language": "en",
                   "zone_texts": [{"name": "n", "description": "d"}]}),
            json!({"session_id": "s", "world_prompt": "w"}),
        ],
        "get_character_stats" => vec![json!({"character_id": "c"}), json!({})],
        "get_npc_profile" => vec![json!({"npc_id": "n", "version": 2}), json!({"npc_id": "n"})],
        "get_player_state" => vec![json!({"session_id": "s"}), json!({})],
        "get_prompt_active" => vec![
            json!({"npc_id": "n", "prompt_type": "greeting"}),
            json!({"npc_id": "n"}),
        ],
        "get_site_map" => vec![
            json!({"include_pois": false, "include_routes": true}),
            json!({}),
        ],
        "hp_delta" => vec![
            json!({"target_character_id": "c", "delta": -3, "cause": "fall"}),
            json!({"target_character_id": "c", "delta": 0}),
        ],
        "log_user_event" => vec![
            json!({"event_type": "ui.open_map", "user_id": "u", "payload": {"a": 1}, "event_data": {"b": [2]}}),
            json!({"event_type": "quest.accepted"}),
        ],
        "map_generate" => vec![
            json!({"parent_area_id": "a", "theme": "t", "language": "zh", "constraints": {"size": 3, "seed": 5}}),
            json!({"parent_area_id": null, "constraints": {"seed": "alpha"}}),
            json!({}),
        ],
        "move_options" => vec![json!({"actor_id": "a"}), json!({})],
        "move" => vec![json!({"actor_id": "a", "to_area_id": "b"})],
        "move_to_zone" => vec![json!({"session_id": "s", "to_zone_id": "z"})],
        "roll_dice" => vec![json!({"dice": "1d20", "reason": "r"})],
        "schedule_event" => vec![
            json!({"event": "e", "note": "n", "delay_s": 5, "repeat_s": 5, "key": "k"}),
            json!({"event": "e", "at": "2030-01-01T00:00:00Z"}),
        ],
        "search_content" => vec![
            json!({"query": "q", "content_type": "lore", "tags": ["a"], "status": "draft", "limit": 5}),
            json!({"query": ""}),
        ],
        "update_character" => vec![
            json!({"character_id": "c", "hp": 3, "max_hp": 5, "maxHp": 5, "level": 2, "stats": {"str": 3, "wis": -1}}),
            json!({"hp": 0}),
            json!({"maxHp": 9}),
            json!({"stats": {"luck": 1}}),
        ],
        "update_inventory" => vec![
            json!({"character_id": "c", "updates": [{"slug": "s", "quantity_change": -1}]}),
            json!({"updates": [{"slug": "s", "quantityChange": 2}]}),
        ],
        other => panic!("no accepted calls for {other}"),
    }
}

/// Calls each tool refuses, worth naming beside the variations (rules that
/// span fields, shapes no single change reaches).
fn refused(tool: &str) -> Vec<Value> {
    match tool {
        "add_inventory" => vec![
            json!({"items": []}),
            json!({"items": [{"name": "Rope", "slug": "Rope"}]}),
            json!({"items": [{"name": "Rope", "quantity": 0}]}),
        ],
        "create_npc" => vec![
            json!({"name": "X", "persona": "p", "prompts": {"intro": "hi"}}),
            json!({"name": "X", "persona": "p", "npc_id": "Npc-X"}),
            json!({"name": "X", "persona": "p", "traits": [""]}),
        ],
        "generate_zone" => vec![
            json!({"session_id": "s", "world_prompt": "w", "language": "fr"}),
            json!({"session_id": "s", "world_prompt": "w", "zone_texts": [{"name": "n"}]}),
            json!({"session_id": "s", "world_prompt": "w", "zone_texts": [{"name": "n", "description": "d", "x": 1}]}),
        ],
        "get_prompt_active" => vec![json!({"npc_id": "n", "prompt_type": "shout"})],
        "log_user_event" => vec![
            json!({"event_type": "UI Open"}),
            json!({"event_type": "e", "payload": []}),
        ],
        "map_generate" => vec![
            json!({"parent_area_id": ""}),
            json!({"constraints": {"seed": -1}}),
            json!({"constraints": {"seed": " "}}),
            json!({"constraints": {"seed": 1.5}}),
            json!({"constraints": {"seed": null}}),
            json!({"constraints": {"seed": 9_007_199_254_740_992_u64}}),
            json!({"constraints": {"depth": 2}}),
            json!({"theme": null}),
        ],
        "roll_dice" => vec![
            json!({"dice": "1d6", "reason": "   "}),
            json!({"dice": "1d6"}),
        ],
        "schedule_event" => vec![
            json!({"event": "e"}),
            json!({"event": "e", "delay_s": 5, "at": "2030-01-01T00:00:00Z"}),
            json!({"event": " ", "delay_s": 5}),
        ],
        "cancel_event" => vec![json!({}), json!({"timer_id": "t", "key": "k"})],
        "search_content" => vec![json!({"query": "q", "status": "lost"})],
        "update_character" => vec![
            json!({}),
            json!({"character_id": "c"}),
            json!({"stats": {}}),
            json!({"stats": {"Str": 1}}),
            json!({"stats": {"str": 1001}}),
            json!({"stats": {"str": "high"}}),
            json!({"hp": null}),
        ],
        "update_inventory" => vec![
            json!({"updates": [{"slug": "s"}]}),
            json!({"updates": [{"slug": "s", "quantity_change": 0}]}),
            json!({"updates": [{"slug": "s", "quantityChange": 0}]}),
            json!({"updates": []}),
        ],
        _ => vec![json!({"no_such_field": 1}), json!(null)],
    }
}

/// Values tried in place of one field's, whatever the field.
fn probes() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(1.5),
        json!(""),
        json!(" "),
        json!("x"),
        json!("A b!"),
        json!("é"),
        json!([]),
        json!(["x"]),
        json!({}),
        json!({"x": 1}),
    ]
}

/// Values at and around the bounds `schema` sets on one field.
fn bounds(schema: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let n = |key: &str| schema.get(key).and_then(Value::as_i64);
    for key in ["minLength", "maxLength"] {
        if let Some(len) = n(key) {
            for l in [len - 1, len, len + 1].into_iter().filter(|l| *l >= 0) {
                let l = l as usize;
                out.push(json!("a".repeat(l)));
                out.push(json!("é".repeat(l)));
            }
        }
    }
    for key in ["minimum", "maximum"] {
        if let Some(v) = n(key) {
            out.extend([json!(v - 1), json!(v), json!(v + 1)]);
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        out.extend(values.iter().cloned());
        out.push(json!("none_of_these"));
    }
    if let Some(default) = schema.get("default") {
        out.push(default.clone());
    }
    out
}

/// `value` with one slot changed at a time, as `schema` describes it.
fn variations(schema: &Value, value: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = probes().into_iter().chain(bounds(schema)).collect();
    match value {
        Value::Object(obj) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            for (key, sub) in properties.into_iter().flatten() {
                let with = |v: Option<Value>| {
                    let mut changed = obj.clone();
                    match v {
                        Some(v) => changed.insert(key.clone(), v),
                        None => changed.remove(key),
                    };
                    Value::Object(changed)
                };
                out.push(with(None));
                let base = obj.get(key).cloned().unwrap_or(Value::Null);
                for v in variations(sub, &base) {
                    out.push(with(Some(v)));
                }
            }
            let mut unknown = obj.clone();
            unknown.insert("no_such_field".into(), json!(1));
            out.push(Value::Object(unknown));
            if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (key, v) in obj {
                    for probe in variations(extra, v) {
                        let mut changed = obj.clone();
                        changed.insert(key.clone(), probe);
                        out.push(Value::Object(changed));
                    }
                }
                let many: Map<String, Value> = (0..40)
                    .map(|i| (format!("s{}", "a".repeat(i % 30 + 1)), json!(i)))
                    .collect();
                out.push(Value::Object(many));
                out.push(json!({"Bad Key": 1}));
            }
        }
        Value::Array(items) => {
            if let (Some(first), Some(item_schema)) = (items.first(), schema.get("items")) {
                for v in variations(item_schema, first) {
                    let mut changed = items.clone();
                    changed[0] = v;
                    out.push(Value::Array(changed));
                }
                for len in [0, 2, 10, 20, 21, 50, 51, 101] {
                    out.push(Value::Array(vec![first.clone(); len]));
                }
            }
        }
        _ => {}
    }
    out
}

/// Whether `schema` lets `call` through, as the pipeline validates.
fn passes(schema: &Value, call: &Value) -> bool {
    jsonschema::validator_for(schema)
        .expect("the schema compiles")
        .is_valid(call)
}

#[test]
fn each_derived_input_schema_refuses_what_the_hand_written_one_refused() {
    let registry = Registry::builtin().expect("built-in tools register");
    for tool in registry.names() {
        let derived = jsonschema::validator_for(&registry.spec(tool).expect("listed").input_schema)
            .expect("the derived schema compiles");
        let old = jsonschema::validator_for(&hand_written(tool)).expect("the old schema compiles");
        let mut tried = 0;
        let mut refusals = 0;
        let calls = accepted(tool).into_iter().flat_map(|call| {
            let schema = hand_written(tool);
            std::iter::once(call.clone()).chain(variations(&schema, &call))
        });
        for call in calls.chain(refused(tool)) {
            let verdict = derived.is_valid(&call);
            assert_eq!(verdict, old.is_valid(&call), "{tool}: {call:.300}");
            tried += 1;
            refusals += usize::from(!verdict);
        }
        for call in accepted(tool) {
            assert!(derived.is_valid(&call), "{tool} accepts {call}");
        }
        for call in refused(tool) {
            assert!(!derived.is_valid(&call), "{tool} refuses {call}");
        }
        // The variations reach past the bounds: most are refusals.
        assert!(
            refusals * 2 > tried,
            "{tool}: {refusals} of {tried} refused"
        );
    }
}

#[test]
fn derived_input_schemas_are_plain_self_contained_objects() {
    let registry = Registry::builtin().expect("built-in tools register");
    for tool in registry.names() {
        let schema = &registry.spec(tool).expect("listed").input_schema;
        let text = schema.to_string();
        for absent in ["$ref", "$defs", "nullable", "\"format\""] {
            assert!(!text.contains(absent), "{tool}: {absent} in {text}");
        }
        for key in ["$schema", "title", "description"] {
            assert!(schema.get(key).is_none(), "{tool}: {key} at the top");
        }
        assert_eq!(schema["type"], "object", "{tool}");
        assert_eq!(schema["additionalProperties"], json!(false), "{tool}");
        assert!(passes(schema, &accepted(tool)[0]), "{tool}");
    }
}

/// Where a derived schema's text differs from the hand-written one:
/// `type` beside an `enum` of strings, and notes a model reads (a type's
/// doc comment, a serde default), none of which changes what is refused.
const DIFFERENCES: &[&str] = &[
    "activate_npc/properties/active/default: only derived true",
    "generate_zone/properties/language/type: only derived \"string\"",
    "get_prompt_active/properties/prompt_type/type: only derived \"string\"",
    "map_generate/properties/language/type: only derived \"string\"",
    "search_content/properties/status/description: only derived \"Whether content is live, still being written, or retired.\"",
    "search_content/properties/status/type: only derived \"string\"",
];

#[test]
fn derived_schemas_differ_from_the_hand_written_only_in_notes() {
    fn walk(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
        match (old, new) {
            (Value::Object(x), Value::Object(y)) => {
                for (k, v) in x {
                    match y.get(k) {
                        Some(w) => walk(&format!("{path}/{k}"), v, w, out),
                        None => out.push(format!("{path}/{k}: only hand-written {v}")),
                    }
                }
                for (k, w) in y.iter().filter(|(k, _)| !x.contains_key(*k)) {
                    out.push(format!("{path}/{k}: only derived {w}"));
                }
            }
            _ if old != new => out.push(format!("{path}: hand-written {old}, derived {new}")),
            _ => {}
        }
    }
    let registry = Registry::builtin().expect("built-in tools register");
    let mut found = Vec::new();
    for tool in registry.names() {
        let derived = &registry.spec(tool).expect("listed").input_schema;
        walk(tool, &hand_written(tool), derived, &mut found);
    }
    found.sort();
    assert_eq!(found, DIFFERENCES);
}

/// The input schemas as they were written by hand, before each was derived
/// from its tool's argument struct.
#[rustfmt::skip]
fn hand_written(tool: &str) -> Value {
    match tool {
        "activate_npc" => {
        json!({
                "type": "object",
                "properties": {
                    "npc_id": {"type": "string", "minLength": 1, "maxLength": 64},
                    "active": {"type": "boolean"}
                },
                "required": ["npc_id"],
                "additionalProperties": false
            })
        }
        "add_inventory" => {
        use super::add_inventory::{MAX_ADD, MAX_ITEMS};
        json!({
                "type": "object",
                "properties": {
                    "character_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "who receives the items; default the active character"},
                    "items": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_ITEMS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "minLength": 1, "maxLength": 80},
                                "description": {"type": "string", "maxLength": 300},
                                "quantity": {"type": "integer", "minimum": 1, "maximum": MAX_ADD, "default": 1},
                                "slug": {"type": "string", "pattern": "^[a-z0-9_]{1,64}$", "description": "stack to add to; default made from the name"}
                            },
                            "required": ["name"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["items"],
                "additionalProperties": false
            })
        }
        "create_draft_content" => {
        use super::create_draft_content::{MAX_BODY_CHARS, MAX_TAG_CHARS, MAX_TAGS, MAX_TITLE_CHARS};
        use crate::game::campaign::{MAX_SOURCE_CHARS, MAX_SUMMARY_CHARS};
        json!({
                "type": "object",
                "properties": {
                    "content_type": {"type": "string", "pattern": "^[a-z_]{1,32}$", "maxLength": 32},
                    "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS},
                    "body": {"type": "string", "minLength": 1, "maxLength": MAX_BODY_CHARS},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "maxLength": MAX_TAG_CHARS},
                        "maxItems": MAX_TAGS
                    },
                    "area_id": {"type": "string", "minLength": 1, "maxLength": 64},
                    "summary": {"type": "string", "maxLength": MAX_SUMMARY_CHARS},
                    "domains": {
                        "type": "array",
                        "items": {"type": "string", "maxLength": MAX_TAG_CHARS},
                        "maxItems": MAX_TAGS
                    },
                    "source": {"type": "string", "maxLength": MAX_SOURCE_CHARS}
                },
                "required": ["content_type", "title", "body"],
                "additionalProperties": false
            })
        }
        "create_npc" => {
        use super::create_npc::MAX_LIST;
        let short = |max: usize| json!({"type": "string", "maxLength": max});
        let list = |max_len: usize| {
            json!({
                "type": "array",
                "maxItems": MAX_LIST,
                "items": {"type": "string", "minLength": 1, "maxLength": max_len}
            })
        };
        json!({
                "type": "object",
                "properties": {
                    "npc_id": {"type": "string", "pattern": "^[a-z0-9_]{1,48}$"},
                    "name": {"type": "string", "minLength": 1, "maxLength": 80},
                    "persona": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "who the npc is, in a few sentences"},
                    "background": short(4000),
                    "traits": list(80),
                    "speech_style": short(200),
                    "prompts": {
                        "type": "object",
                        "properties": {
                            "system": short(4000),
                            "greeting": short(4000),
                            "fallback": short(4000)
                        },
                        "additionalProperties": false
                    },
                    "character_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the character on the map this npc speaks for"},
                    "tags": list(40)
                },
                "required": ["name", "persona"],
                "additionalProperties": false
            })
        }
        "describe_entity" => {
        json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 40, "description": "entity name, e.g. Character"}
                },
                "required": ["name"],
                "additionalProperties": false
            })
        }
        "generate_zone" => {
        use super::generate_zone::{MAX_ZONE_DESCRIPTION, MAX_ZONE_NAME};
        use crate::game::zones::MAX_ZONES_PER_CALL;
        json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "minLength": 1, "maxLength": 128, "description": "this session's id"},
                    "world_prompt": {"type": "string", "minLength": 1, "maxLength": 500, "description": "the world's theme, e.g. \"haunted pine forest\""},
                    "count": {"type": "integer", "minimum": 1, "maximum": MAX_ZONES_PER_CALL, "default": 1},
                    "near_player": {"type": "boolean", "default": true},
                    "language": {
                        "enum": ["en", "zh"],
                        "description": "the language of procedural names and descriptions; default: zh when world_prompt has Chinese characters, else en"
                    },
                    "zone_texts": {
                        "type": "array",
                        "maxItems": MAX_ZONES_PER_CALL,
                        "description": "optional name and description for each zone; procedural when left out",
                        "items": {
                            "type": "object",
                            "required": ["name", "description"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1, "maxLength": MAX_ZONE_NAME},
                                "description": {"type": "string", "minLength": 1, "maxLength": MAX_ZONE_DESCRIPTION}
                            },
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["session_id", "world_prompt"],
                "additionalProperties": false
            })
        }
        "get_character_stats" => {
        json!({
                "type": "object",
                "properties": {"character_id": {"type": "string", "minLength": 1}},
                "additionalProperties": false
            })
        }
        "get_npc_profile" => {
        use super::get_npc_profile::MAX_VERSION;
        json!({
                "type": "object",
                "properties": {
                    "npc_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the NPC's id, or the id of the character that plays it"},
                    "version": {"type": "integer", "minimum": 1, "maximum": MAX_VERSION}
                },
                "required": ["npc_id"],
                "additionalProperties": false
            })
        }
        "get_player_state" => {
        json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "minLength": 1, "maxLength": 128, "description": "this session's id (optional)"}
                },
                "additionalProperties": false
            })
        }
        "get_prompt_active" => {
        use super::get_prompt_active::DEFAULT_PROMPT_TYPE;
        use crate::game::content::PROMPT_TYPES;
        json!({
                "type": "object",
                "properties": {
                    "npc_id": {"type": "string", "minLength": 1, "maxLength": 64},
                    "prompt_type": {"enum": PROMPT_TYPES, "default": DEFAULT_PROMPT_TYPE}
                },
                "required": ["npc_id"],
                "additionalProperties": false
            })
        }
        "get_site_map" => {
        json!({
                "type": "object",
                "properties": {
                    "include_pois": {"type": "boolean", "default": true},
                    "include_routes": {"type": "boolean", "default": false}
                },
                "additionalProperties": false
            })
        }
        "hp_delta" => {
        use super::hp_delta::MAX_DELTA;
        json!({
                "type": "object",
                "properties": {
                    "target_character_id": {"type": "string", "minLength": 1},
                    "delta": {"type": "integer", "minimum": -MAX_DELTA, "maximum": MAX_DELTA},
                    "cause": {"type": "string", "maxLength": 200}
                },
                "required": ["target_character_id", "delta"],
                "additionalProperties": false
            })
        }
        "log_user_event" => {
        use super::log_user_event::MAX_USER_ID_CHARS;
        json!({
                "type": "object",
                "properties": {
                    "event_type": {"type": "string", "pattern": "^[a-z0-9_.]{1,64}$", "maxLength": 64},
                    "user_id": {"type": "string", "minLength": 1, "maxLength": MAX_USER_ID_CHARS},
                    "payload": {"type": "object"},
                    "event_data": {"type": "object"}
                },
                "required": ["event_type"],
                "additionalProperties": false
            })
        }
        "map_generate" => {
        use super::map_generate::{MAX_SEED, MAX_SEED_TEXT};
        use crate::game::mapgen::MAX_SIZE;
        json!({
                "type": "object",
                "properties": {
                    "parent_area_id": {"type": ["string", "null"], "minLength": 1},
                    "theme": {"type": "string", "maxLength": 80},
                    "language": {
                        "enum": ["en", "zh"],
                        "description": "the language of the new areas' names and descriptions; default: zh when the theme has Chinese characters, else en"
                    },
                    "constraints": {
                        "type": "object",
                        "properties": {
                            "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE},
                            "seed": {
                                "type": ["integer", "string"],
                                "minimum": 0,
                                "maximum": MAX_SEED,
                                "minLength": 1,
                                "maxLength": MAX_SEED_TEXT,
                                "pattern": "\\S",
                                "description": "the same seed gives the same map: an integer, or any text such as \"alpha\""
                            }
                        },
                        "additionalProperties": false
                    }
                },
                "additionalProperties": false
            })
        }
        "move_options" => {
        json!({
                "type": "object",
                "properties": {"actor_id": {"type": "string", "minLength": 1}},
                "additionalProperties": false
            })
        }
        "move" => {
        json!({
                "type": "object",
                "properties": {
                    "actor_id": {"type": "string", "minLength": 1, "description": "the active character's id"},
                    "to_area_id": {"type": "string", "minLength": 1, "description": "id of a reachable area"}
                },
                "required": ["actor_id", "to_area_id"],
                "additionalProperties": false
            })
        }
        "move_to_zone" => {
        json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "minLength": 1, "maxLength": 128, "description": "this session's id"},
                    "to_zone_id": {"type": "string", "minLength": 1, "maxLength": 100, "description": "id of the zone to travel to, e.g. zone_1_0_0"}
                },
                "required": ["session_id", "to_zone_id"],
                "additionalProperties": false
            })
        }
        "roll_dice" => {
        use super::roll_dice::MAX_REASON;
        json!({
                "type": "object",
                "properties": {
                    "dice": {"type": "string", "minLength": 2, "maxLength": 32, "description": "dice notation, e.g. 1d20+5"},
                    "reason": {"type": "string", "minLength": 1, "maxLength": MAX_REASON, "pattern": "\\S", "description": "what the roll is for, e.g. Perception check"}
                },
                "required": ["dice", "reason"],
                "additionalProperties": false
            })
        }
        "schedule_event" => {
        use crate::game::timers::{MAX_EVENT_CHARS, MAX_HORIZON_S, MAX_KEY_CHARS, MAX_NOTE_CHARS, MIN_REPEAT_S};
        use super::schedule_event::MAX_AT_CHARS;
        json!({
                "type": "object",
                "properties": {
                    "event": {"type": "string", "minLength": 1, "maxLength": MAX_EVENT_CHARS, "pattern": "\\S", "description": "what happens, a short name such as guards_return"},
                    "note": {"type": "string", "maxLength": MAX_NOTE_CHARS, "description": "what to remember for when it happens"},
                    "delay_s": {"type": "integer", "minimum": 1, "maximum": MAX_HORIZON_S, "description": "seconds from now until it happens (give this or at)"},
                    "at": {"type": "string", "minLength": 1, "maxLength": MAX_AT_CHARS, "description": "when it happens, an RFC 3339 time such as 2026-11-29T10:00:00Z (give this or delay_s)"},
                    "repeat_s": {"type": "integer", "minimum": MIN_REPEAT_S, "maximum": MAX_HORIZON_S, "description": "happens again every this many seconds"},
                    "key": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": "\\S", "description": "scheduling the same key again replaces that timer"}
                },
                "required": ["event"],
                "oneOf": [{"required": ["delay_s"]}, {"required": ["at"]}],
                "additionalProperties": false
            })
        }
        "cancel_event" => {
        use crate::game::timers::MAX_KEY_CHARS;
        json!({
                "type": "object",
                "properties": {
                    "timer_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the timer_id schedule_event answered (give this or key)"},
                    "key": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "description": "the key the timer was scheduled under (give this or timer_id)"}
                },
                "oneOf": [{"required": ["timer_id"]}, {"required": ["key"]}],
                "additionalProperties": false
            })
        }
        "search_content" => {
        use super::search_content::{MAX_QUERY_CHARS, MAX_TAGS};
        use crate::game::content::{DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT};
        json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
                    "content_type": {"type": "string", "minLength": 1, "maxLength": 32},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "maxLength": 40},
                        "maxItems": MAX_TAGS
                    },
                    "status": {"enum": ["published", "draft", "archived"], "default": "published"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": DEFAULT_SEARCH_LIMIT}
                },
                "required": ["query"],
                "additionalProperties": false
            })
        }
        "update_character" => {
        use super::update_character::{MAX_HP, MAX_LEVEL, MAX_STATS, STAT_MAX, STAT_MIN};
        json!({
                "type": "object",
                "properties": {
                    "character_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "whose sheet; default the active character"},
                    "hp": {"type": "integer", "minimum": 0, "maximum": MAX_HP, "description": "new hp; clamped to max_hp"},
                    "max_hp": {"type": "integer", "minimum": 1, "maximum": MAX_HP},
                    "maxHp": {"type": "integer", "minimum": 1, "maximum": MAX_HP, "description": "the same as max_hp (give one of the two)"},
                    "level": {"type": "integer", "minimum": 1, "maximum": MAX_LEVEL},
                    "stats": {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": MAX_STATS,
                        "propertyNames": {"pattern": "^[a-z_]{1,32}$"},
                        "additionalProperties": {"type": "integer", "minimum": STAT_MIN, "maximum": STAT_MAX},
                        "description": "stats to set, e.g. {\"str\": 14}; stats not named keep their values"
                    }
                },
                // Something to change; max_hp and maxHp both given are
                // refused by run().
                "anyOf": [
                    {"required": ["hp"]},
                    {"required": ["max_hp"]},
                    {"required": ["maxHp"]},
                    {"required": ["level"]},
                    {"required": ["stats"]}
                ],
                "additionalProperties": false
            })
        }
        "update_inventory" => {
        use super::update_inventory::{MAX_CHANGE, MAX_UPDATES};
        let change_schema = |description: &str| {
            json!({
                "type": "integer",
                "minimum": -MAX_CHANGE,
                "maximum": MAX_CHANGE,
                "not": {"const": 0},
                "description": description
            })
        };
        json!({
                "type": "object",
                "properties": {
                    "character_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "whose inventory; default the active character"},
                    "updates": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_UPDATES,
                        "items": {
                            "type": "object",
                            "properties": {
                                "slug": {"type": "string", "minLength": 1, "maxLength": 128, "description": "slug of an item held"},
                                "quantity_change": change_schema("negative uses up or loses items, positive gains more"),
                                "quantityChange": change_schema("the same as quantity_change (give one of the two)")
                            },
                            "required": ["slug"],
                            // quantity_change is required unless its alias
                            // is given; both at once are refused by run().
                            "if": {"required": ["quantityChange"]},
                            "else": {"required": ["quantity_change"]},
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["updates"],
                "additionalProperties": false
            })
        }
        other => panic!("no hand-written schema for {other}"),
    }
}
