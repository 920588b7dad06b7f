//! The data model, described for the model.
//!
//! `describe_entity` answers with an entity's JSON Schema, each field carrying
//! a description, so the model can read what a character, area, item, NPC or
//! zone looks like instead of guessing. Each schema mirrors the serde shape of
//! its type exactly: `required` lists the fields serde cannot default, and
//! enum values are the ones serde writes.

use std::sync::LazyLock;

use serde::Serialize;
use serde_json::{Value, json};

/// What `describe_entity` answers: an entity's JSON Schema with a description
/// of each field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntityDescription {
    /// The English name, one of [`ENTITY_NAMES`].
    pub entity: &'static str,
    /// Every name the entity is found by, English first.
    pub names: &'static [&'static str],
    pub description: &'static str,
    pub schema: Value,
}

/// Every entity's English name, for error messages.
pub const ENTITY_NAMES: &[&str] = &["Character", "Area", "Item", "Npc", "Zone"];

/// Finds an entity by English or Chinese name, ignoring case and surrounding
/// spaces: Character (角色, 人物), Area (区域, 地点), Item (物品, 道具), Npc
/// (NPC, 非玩家角色), Zone (地带, 区块).
pub fn describe(name: &str) -> Option<EntityDescription> {
    let wanted = name.trim().to_lowercase();
    ENTITIES
        .iter()
        .find(|e| e.names.iter().any(|n| n.to_lowercase() == wanted))
        .cloned()
}

// Built once: the schemas never change while the server runs.
static ENTITIES: LazyLock<Vec<EntityDescription>> = LazyLock::new(|| {
    vec![
        EntityDescription {
            entity: "Character",
            names: &["Character", "角色", "人物"],
            description: "a player character or npc taking part in the scene",
            schema: character_schema(),
        },
        EntityDescription {
            entity: "Area",
            names: &["Area", "区域", "地点"],
            description: "one place on the map, linked to the areas reachable from it",
            schema: area_schema(),
        },
        EntityDescription {
            entity: "Item",
            names: &["Item", "物品", "道具"],
            description: "a stack of one kind of thing in a character's inventory",
            schema: item_schema(),
        },
        EntityDescription {
            entity: "Npc",
            names: &["Npc", "NPC", "非玩家角色"],
            description: "a non-player character's persona, its versions and the prompts that voice it",
            schema: npc_schema(),
        },
        EntityDescription {
            entity: "Zone",
            names: &["Zone", "地带", "区块"],
            description: "a zone of the open world on a grid where one step is one mile",
            schema: zone_schema(),
        },
    ]
});

fn field(kind: &str, description: &str) -> Value {
    json!({"type": kind, "description": description})
}

fn string_list(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn item_schema() -> Value {
    json!({
        "type": "object",
        "description": "a stack of one kind of thing in an inventory",
        "properties": {
            "slug": field("string", "stable machine name, e.g. healing_potion"),
            "name": field("string", "display name"),
            "description": field("string", "what it is, for the story; left out when empty"),
            "quantity": {
                "type": "integer",
                "minimum": 0,
                "description": "how many are held; 1 when left out"
            }
        },
        "required": ["slug", "name"],
        "additionalProperties": false
    })
}

fn character_schema() -> Value {
    json!({
        "type": "object",
        "description": "a player character or npc",
        "properties": {
            "character_id": field("string", "unique id, e.g. pc_001"),
            "name": field("string", "display name"),
            "kind": {
                "type": "string",
                "enum": ["pc", "npc"],
                "description": "pc for a player character, npc for anyone else"
            },
            "area_id": field("string", "id of the area the character is in"),
            "hp": field("integer", "current hit points; 0 means down"),
            "max_hp": field("integer", "hit points when fully healed"),
            "level": {
                "type": "integer",
                "minimum": 0,
                "description": "experience level; 1 when left out"
            },
            "stats": {
                "type": "object",
                "description": "free-form named stats, usually integers such as strength: 14; empty when left out"
            },
            "inventory": {
                "type": "array",
                "items": item_schema(),
                "description": "items carried; empty when left out"
            },
            "state": {
                "type": "string",
                "enum": ["active", "downed"],
                "description": "active may act; downed is at 0 hp and cannot act until healed; active when left out"
            }
        },
        "required": ["character_id", "name", "kind", "area_id", "hp", "max_hp"],
        "additionalProperties": false
    })
}

fn area_schema() -> Value {
    json!({
        "type": "object",
        "description": "one place on the map",
        "properties": {
            "area_id": field("string", "unique id, e.g. area_001"),
            "name": field("string", "display name"),
            "description": field("string", "what the place looks like; empty when left out"),
            "reachable_area_ids": string_list("ids of the areas one move away; empty when left out"),
            "x": field("integer", "map layout x; 0 when left out"),
            "y": field("integer", "map layout y; 0 when left out"),
            "z": field("integer", "level, e.g. floor or depth; 0 when left out"),
            "tags": string_list("free-form labels such as generated; empty when left out"),
            "group": field("string", "the theme a generated place was made on, as a title; absent for other places"),
            "short_name": field("string", "a generated place's name within its group; absent when group is")
        },
        "required": ["area_id", "name"],
        "additionalProperties": false
    })
}

fn zone_schema() -> Value {
    json!({
        "type": "object",
        "description": "a zone of the open world",
        "properties": {
            "zone_id": field("string", "zone_{x}_{y}_{z}, e.g. zone_3_-1_0"),
            "name": field("string", "display name"),
            "description": field("string", "what the zone looks like, in one or two sentences"),
            "x": field("integer", "grid x in miles"),
            "y": field("integer", "grid y in miles"),
            "z": field("integer", "grid level; zones only neighbour zones on the same level"),
            "tags": string_list("free-form labels; generated marks procedural zones; empty when left out"),
            "world_prompt": field("string", "the world prompt the zone was made for; empty when left out")
        },
        "required": ["zone_id", "name", "description", "x", "y", "z"],
        "additionalProperties": false
    })
}

fn npc_schema() -> Value {
    json!({
        "type": "object",
        "description": "a non-player character's persona",
        "properties": {
            "npc_id": field("string", "unique id, e.g. npc_001"),
            "name": field("string", "display name"),
            "character_id": {
                "type": ["string", "null"],
                "description": "id of the character this npc speaks for, if it has a body in the scene"
            },
            "active": field("boolean", "whether the npc takes part in play"),
            "active_version": field("integer", "the version number in versions that is used now"),
            "versions": {
                "type": "array",
                "description": "persona revisions, newest last",
                "items": {
                    "type": "object",
                    "description": "one persona revision",
                    "properties": {
                        "version": field("integer", "revision number, unique within the npc"),
                        "persona": field("string", "who the npc is, in a few sentences"),
                        "background": field("string", "history and motives"),
                        "traits": string_list("short personality traits, e.g. gruff"),
                        "speech_style": field("string", "how the npc talks")
                    },
                    "required": ["version", "persona", "background", "traits", "speech_style"],
                    "additionalProperties": false
                }
            },
            "prompts": {
                "type": "object",
                "description": "text used to voice the npc, by type; any type may be missing",
                "properties": {
                    "system": field("string", "system prompt that sets up the npc"),
                    "greeting": field("string", "first line when a conversation starts"),
                    "fallback": field("string", "line used when nothing better can be said")
                },
                "additionalProperties": false
            },
            "tags": string_list("free-form labels")
        },
        "required": ["npc_id", "name", "active_version", "versions"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;

    use super::*;
    use crate::game::state::{Area, Character, CharacterState, Item};
    use crate::game::zones::Zone;

    fn schema(name: &str) -> Value {
        describe(name).expect("entity exists").schema
    }

    #[test]
    fn every_name_resolves() {
        let cases = [
            ("Character", "Character"),
            ("character", "Character"),
            ("  CHARACTER ", "Character"),
            ("角色", "Character"),
            ("人物", "Character"),
            ("Area", "Area"),
            ("区域", "Area"),
            ("地点", "Area"),
            ("Item", "Item"),
            ("物品", "Item"),
            (" 道具 ", "Item"),
            ("Npc", "Npc"),
            ("NPC", "Npc"),
            ("npc", "Npc"),
            ("非玩家角色", "Npc"),
            ("Zone", "Zone"),
            ("地带", "Zone"),
            ("区块", "Zone"),
        ];
        for (name, want) in cases {
            assert_eq!(describe(name).map(|e| e.entity), Some(want), "{name:?}");
        }
        for name in ENTITY_NAMES {
            assert_eq!(describe(name).map(|e| e.entity), Some(*name));
        }
    }

    #[test]
    fn unknown_names_are_none() {
        for name in ["", "  ", "Monster", "characters", "角", "zone_1_0_0"] {
            assert!(describe(name).is_none(), "{name:?}");
        }
    }

    #[test]
    fn schemas_are_valid_and_fully_described() {
        fn check(path: &str, schema: &Value) {
            assert!(schema.get("type").is_some(), "{path}: no type");
            assert!(
                schema.get("description").is_some_and(Value::is_string),
                "{path}: no description"
            );
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let required = schema["required"].as_array().cloned().unwrap_or_default();
                for r in &required {
                    let r = r.as_str().expect("required names are strings");
                    assert!(props.contains_key(r), "{path}: {r} required but unknown");
                }
                for (k, v) in props {
                    check(&format!("{path}.{k}"), v);
                }
            }
            // Plain string elements need no description; object elements do.
            if let Some(items) = schema
                .get("items")
                .filter(|i| i.get("properties").is_some())
            {
                check(&format!("{path}[]"), items);
            }
        }
        for name in ENTITY_NAMES {
            let s = schema(name);
            assert_eq!(s["type"], "object");
            check(name, &s);
            assert!(jsonschema::validator_for(&s).is_ok(), "{name}");
        }
    }

    /// Checks `value` against `schema` by hand (every key known, every
    /// required key present, nested objects too), then with a validator.
    fn assert_matches(path: &str, schema: &Value, value: &Value) {
        if let (Some(props), Some(obj)) = (
            schema.get("properties").and_then(Value::as_object),
            value.as_object(),
        ) {
            for (k, v) in obj {
                let sub = props
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}: {k} not in schema"));
                assert_matches(&format!("{path}.{k}"), sub, v);
            }
            for r in schema["required"].as_array().expect("required list") {
                let r = r.as_str().expect("required names are strings");
                assert!(obj.contains_key(r), "{path}: required {r} missing");
            }
        }
        if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
            for (i, v) in arr.iter().enumerate() {
                assert_matches(&format!("{path}[{i}]"), items, v);
            }
        }
    }

    /// The schema's `required` must be exactly what serde cannot default:
    /// dropping a required key fails to parse, dropping any other still parses.
    fn assert_required_matches_serde<T: DeserializeOwned>(
        name: &str,
        schema: &Value,
        full: &Value,
    ) {
        let required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required list")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let obj = full.as_object().expect("an object");
        for key in obj.keys() {
            let mut partial = obj.clone();
            partial.remove(key);
            let parsed = serde_json::from_value::<T>(Value::Object(partial)).is_ok();
            assert_eq!(
                parsed,
                !required.contains(&key.as_str()),
                "{name}.{key}: required in schema is {}",
                required.contains(&key.as_str())
            );
        }
    }

    fn check_value<T: Serialize + DeserializeOwned>(name: &str, value: &T) {
        let s = schema(name);
        let v = serde_json::to_value(value).expect("serializes");
        assert_matches(name, &s, &v);
        let validator = jsonschema::validator_for(&s).expect("valid schema");
        let problems: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(problems.is_empty(), "{name}: {problems:?}");
        assert_required_matches_serde::<T>(name, &s, &v);
    }

    fn sword() -> Item {
        Item {
            slug: "short_sword".into(),
            name: "Short Sword".into(),
            description: "a plain blade".into(),
            quantity: 1,
        }
    }

    #[test]
    fn real_values_match_their_schemas() {
        let mut stats = serde_json::Map::new();
        stats.insert("strength".into(), json!(14));
        let characters = [
            Character {
                character_id: "pc_001".into(),
                name: "Ayla".into(),
                kind: "pc".into(),
                area_id: "area_001".into(),
                hp: 12,
                max_hp: 12,
                level: 2,
                stats,
                inventory: vec![sword()],
                state: CharacterState::Active,
            },
            Character {
                character_id: "npc_007".into(),
                name: "Bandit".into(),
                kind: "npc".into(),
                area_id: "area_002".into(),
                hp: 0,
                max_hp: 6,
                level: 1,
                stats: Default::default(),
                inventory: vec![],
                state: CharacterState::Downed,
            },
        ];
        for c in &characters {
            check_value("Character", c);
        }
        check_value("Item", &sword());
        check_value(
            "Area",
            &Area {
                area_id: "area_001".into(),
                name: "Gate".into(),
                description: "A rusted gate.".into(),
                reachable_area_ids: vec!["area_002".into()],
                x: 1,
                y: -2,
                z: 0,
                tags: vec!["outdoor".into()],
                group: "Crystal Caves".into(),
                short_name: "Gate".into(),
            },
        );
        check_value(
            "Zone",
            &Zone {
                zone_id: "zone_3_-1_0".into(),
                name: "Misty Vale".into(),
                description: "A misty vale far from any road.".into(),
                x: 3,
                y: -1,
                z: 0,
                tags: vec!["generated".into()],
                world_prompt: "haunted moors".into(),
            },
        );
    }

    #[test]
    fn npc_schema_accepts_its_shape() {
        let validator = jsonschema::validator_for(&schema("Npc")).expect("valid schema");
        let npc = json!({
            "npc_id": "npc_001",
            "name": "Old Mara",
            "active": true,
            "active_version": 1,
            "versions": [{
                "version": 1,
                "persona": "A ferrywoman.",
                "background": "Lost her son to the river.",
                "traits": ["patient", "wry"],
                "speech_style": "slow, with river sayings"
            }],
            "prompts": {"system": "You are Mara.", "greeting": "Crossing?", "fallback": "Hm."},
            "tags": ["ferry"]
        });
        let cases = [
            ("as is", npc.clone(), true),
            (
                "with a character",
                {
                    let mut v = npc.clone();
                    v["character_id"] = json!("npc_009");
                    v
                },
                true,
            ),
            (
                "null character",
                {
                    let mut v = npc.clone();
                    v["character_id"] = Value::Null;
                    v
                },
                true,
            ),
            (
                "no prompts",
                {
                    let mut v = npc.clone();
                    v.as_object_mut().map(|o| o.remove("prompts"));
                    v
                },
                true,
            ),
            (
                "unknown field",
                {
                    let mut v = npc.clone();
                    v["mood"] = json!("grim");
                    v
                },
                false,
            ),
        ];
        for (what, value, valid) in cases {
            assert_eq!(validator.is_valid(&value), valid, "{what}");
        }
    }
}
