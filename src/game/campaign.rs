//! Campaign files: the opening map, characters, lore and tool allowlist.
//!
//! An inline campaign is checked in two passes: its shape against the JSON
//! Schema below, then its meaning (ids unique, links and positions pointing at
//! areas that exist, a player character to act, tools that exist). Every
//! problem is reported, not just the first.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::content::{ContentEntry, NpcProfile};
use super::state::{Area, Character, CharacterId, GameState};

/// Campaigns that ship inside the binary, as `(campaign_id, JSON text)`.
pub const BUILTIN_CAMPAIGNS: &[(&str, &str)] = &[("demo", include_str!("campaigns/demo.json"))];

/// The start states of the built-in campaigns ([`Campaign::builtin_starts`]).
#[derive(Debug, Clone, Default)]
pub struct BuiltinStarts(HashMap<&'static str, GameState>);

impl BuiltinStarts {
    /// A new session's state for built-in campaign `id`.
    pub fn start(&self, id: &str) -> Option<GameState> {
        self.0.get(id).cloned()
    }
}

/// Most areas or characters in one campaign.
pub const MAX_CAMPAIGN_ITEMS: usize = 2000;

/// A parsed and checked campaign.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Campaign {
    pub campaign_id: String,
    pub title: String,
    #[serde(default)]
    pub description: String,
    pub allowlist: Vec<String>,
    pub active_actor_id: CharacterId,
    pub areas: Vec<Area>,
    pub characters: Vec<Character>,
    #[serde(default)]
    pub lore: Vec<String>,
    #[serde(default)]
    pub npcs: Vec<NpcProfile>,
    #[serde(default)]
    pub content: Vec<ContentEntry>,
}

/// Why a campaign was refused: every problem found, each a short sentence.
#[derive(Debug, thiserror::Error)]
#[error("invalid campaign: {}", problems.join("; "))]
pub struct CampaignError {
    pub problems: Vec<String>,
}

static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let id = json!({"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,64}$"});
    json!({
        "type": "object",
        "required": ["campaign_id", "title", "allowlist", "active_actor_id", "areas", "characters"],
        "properties": {
            "campaign_id": id,
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": "string", "maxLength": 4000},
            "allowlist": {"type": "array", "items": {"type": "string"}, "maxItems": 200},
            "active_actor_id": id,
            "lore": {"type": "array", "items": {"type": "string", "maxLength": 4000}, "maxItems": 200},
            "areas": {
                "type": "array", "minItems": 1, "maxItems": MAX_CAMPAIGN_ITEMS,
                "items": {
                    "type": "object",
                    "required": ["area_id", "name"],
                    "properties": {
                        "area_id": id,
                        "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        "description": {"type": "string", "maxLength": 4000},
                        "reachable_area_ids": {"type": "array", "items": id},
                        "x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}}
                    }
                }
            },
            "characters": {
                "type": "array", "minItems": 1, "maxItems": MAX_CAMPAIGN_ITEMS,
                "items": {
                    "type": "object",
                    "required": ["character_id", "name", "kind", "area_id", "hp", "max_hp"],
                    "properties": {
                        "character_id": id,
                        "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        "kind": {"enum": ["pc", "npc"]},
                        "area_id": id,
                        "hp": {"type": "integer", "minimum": 0},
                        "max_hp": {"type": "integer", "minimum": 1},
                        "level": {"type": "integer", "minimum": 1},
                        "stats": {"type": "object", "additionalProperties": {"type": "integer"}},
                        "inventory": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["slug", "name"],
                                "properties": {
                                    "slug": {"type": "string", "minLength": 1},
                                    "name": {"type": "string", "minLength": 1},
                                    "quantity": {"type": "integer", "minimum": 0}
                                }
                            }
                        },
                        "state": {"enum": ["active", "downed"]}
                    }
                }
            }
        }
    })
});

static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    jsonschema::validator_for(&SCHEMA).expect("the campaign schema is a valid JSON Schema")
});

impl Campaign {
    /// The JSON Schema that inline campaigns must follow.
    pub fn schema() -> &'static Value {
        &SCHEMA
    }

    /// Parses and checks a campaign; `known_tools` are the tools this server has.
    pub fn from_value(value: &Value, known_tools: &[&str]) -> Result<Self, CampaignError> {
        let problems: Vec<String> = VALIDATOR
            .iter_errors(value)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(CampaignError { problems });
        }
        let campaign: Campaign =
            serde_json::from_value(value.clone()).map_err(|e| CampaignError {
                problems: vec![e.to_string()],
            })?;
        let problems = campaign.problems(known_tools);
        if problems.is_empty() {
            Ok(campaign)
        } else {
            Err(CampaignError { problems })
        }
    }

    /// A built-in campaign by id.
    pub fn builtin(campaign_id: &str, known_tools: &[&str]) -> Option<Result<Self, CampaignError>> {
        BUILTIN_CAMPAIGNS
            .iter()
            .find(|(id, _)| *id == campaign_id)
            .map(|(_, text)| {
                let value: Value = serde_json::from_str(text).map_err(|e| CampaignError {
                    problems: vec![e.to_string()],
                })?;
                Self::from_value(&value, known_tools)
            })
    }

    /// Every built-in campaign as a start state, by id. Made once at start
    /// (a broken built-in stops the server there); sessions started from
    /// one clone it and share its areas, lore, NPCs and content until they
    /// change them.
    pub fn builtin_starts(known_tools: &[&str]) -> Result<BuiltinStarts, CampaignError> {
        let mut starts = HashMap::new();
        for (id, _) in BUILTIN_CAMPAIGNS {
            let campaign = Self::builtin(id, known_tools).unwrap_or_else(|| {
                Err(CampaignError {
                    problems: vec![format!("no built-in campaign {id}")],
                })
            })?;
            starts.insert(*id, campaign.into_state());
        }
        Ok(BuiltinStarts(starts))
    }

    fn problems(&self, known_tools: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut area_ids = HashSet::new();
        for a in &self.areas {
            if !area_ids.insert(a.area_id.as_str()) {
                problems.push(format!("area id {} is used twice", a.area_id));
            }
        }
        for a in &self.areas {
            for r in &a.reachable_area_ids {
                if !area_ids.contains(r.as_str()) {
                    problems.push(format!("area {} links to unknown area {r}", a.area_id));
                } else if r == &a.area_id {
                    problems.push(format!("area {} links to itself", a.area_id));
                }
            }
        }
        let mut char_ids = HashSet::new();
        for c in &self.characters {
            if !char_ids.insert(c.character_id.as_str()) {
                problems.push(format!("character id {} is used twice", c.character_id));
            }
            if !area_ids.contains(c.area_id.as_str()) {
                problems.push(format!(
                    "character {} stands in unknown area {}",
                    c.character_id, c.area_id
                ));
            }
            if c.hp > c.max_hp {
                problems.push(format!("character {} has hp above max_hp", c.character_id));
            }
        }
        match self
            .characters
            .iter()
            .find(|c| c.character_id == self.active_actor_id)
        {
            None => problems.push(format!(
                "active_actor_id {} is not one of the characters",
                self.active_actor_id
            )),
            Some(c) if c.kind != "pc" => problems.push(format!(
                "active_actor_id {} must be a player character (kind pc)",
                self.active_actor_id
            )),
            Some(_) => {}
        }
        let mut npc_ids = HashSet::new();
        for npc in &self.npcs {
            problems.extend(npc.problems());
            if !npc_ids.insert(npc.npc_id.as_str()) {
                problems.push(format!("npc id {} is used twice", npc.npc_id));
            }
            if let Some(c) = &npc.character_id
                && !char_ids.contains(c.as_str())
            {
                problems.push(format!(
                    "npc {} is embodied by unknown character {c}",
                    npc.npc_id
                ));
            }
        }
        let mut content_ids = HashSet::new();
        for entry in &self.content {
            if !content_ids.insert(entry.content_id.as_str()) {
                problems.push(format!("content id {} is used twice", entry.content_id));
            }
            if let Some(a) = &entry.area_id
                && !area_ids.contains(a.as_str())
            {
                problems.push(format!(
                    "content {} is placed in unknown area {a}",
                    entry.content_id
                ));
            }
        }
        for tool in &self.allowlist {
            if !known_tools.contains(&tool.as_str()) {
                problems.push(format!(
                    "allowlist names unknown tool {tool}; known tools: {}",
                    known_tools.join(", ")
                ));
            }
        }
        problems
    }

    /// The opening save state of a new session.
    pub fn into_state(self) -> GameState {
        let mut areas = self.areas;
        // Links are made symmetric at the start so movement rules are simple.
        let pairs: Vec<_> = areas
            .iter()
            .flat_map(|a| {
                a.reachable_area_ids
                    .iter()
                    .map(move |r| (r.clone(), a.area_id.clone()))
            })
            .collect();
        for (from, to) in pairs {
            if let Some(a) = areas.iter_mut().find(|a| a.area_id == from)
                && !a.reachable_area_ids.contains(&to)
            {
                a.reachable_area_ids.push(to);
            }
        }
        GameState {
            campaign_id: self.campaign_id,
            title: self.title,
            turn: 0,
            active_actor_id: self.active_actor_id,
            areas: Arc::new(areas),
            characters: self.characters,
            allowlist: self.allowlist,
            content: Arc::new(
                lore_entries(&self.lore, &self.content)
                    .into_iter()
                    .chain(self.content)
                    .collect(),
            ),
            lore: Arc::new(self.lore),
            zones: Vec::new(),
            player: Default::default(),
            npcs: Arc::new(self.npcs),
            events: VecDeque::new(),
            history: VecDeque::new(),
        }
    }
}

/// The campaign's lore lines as searchable content, with ids (`lore_001`,
/// ...) that skip any the campaign's own content already uses.
fn lore_entries(lore: &[String], content: &[ContentEntry]) -> Vec<ContentEntry> {
    let taken: HashSet<&str> = content.iter().map(|c| c.content_id.as_str()).collect();
    let mut n = 0;
    lore.iter()
        .map(|line| {
            let content_id = loop {
                n += 1;
                let id = format!("lore_{n:03}");
                if !taken.contains(id.as_str()) {
                    break id;
                }
            };
            ContentEntry {
                content_id,
                content_type: "lore".into(),
                title: line
                    .split(['.', '。'])
                    .next()
                    .unwrap_or(line)
                    .chars()
                    .take(60)
                    .collect(),
                body: line.clone(),
                tags: vec!["lore".into()],
                status: Default::default(),
                area_id: None,
                created_by: "campaign".into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tools::test_support::tools;

    /// The minimal campaign of PROTOCOL.md §4.
    fn tiny() -> Value {
        serde_json::from_str(include_str!("../../tests/fixtures/tiny_campaign.json"))
            .expect("fixture is JSON")
    }

    #[test]
    fn sessions_of_a_builtin_campaign_share_it_until_they_change_it() {
        use crate::game::Effect;
        let starts = Campaign::builtin_starts(&tools()).unwrap();
        assert!(starts.start("nope").is_none());
        let a = starts.start("demo").unwrap();
        let mut b = starts.start("demo").unwrap();
        assert_eq!(a, b);
        assert!(Arc::ptr_eq(&a.areas, &b.areas));
        assert!(Arc::ptr_eq(&a.content, &b.content));
        assert!(Arc::ptr_eq(&a.npcs, &b.npcs));
        assert!(Arc::ptr_eq(&a.lore, &b.lore));
        // A link that exists changes nothing and copies nothing.
        let (from, to) = (
            a.areas[0].area_id.clone(),
            a.areas[0].reachable_area_ids[0].clone(),
        );
        b.apply(&Effect::AddAreas {
            areas: vec![],
            links: vec![(from.clone(), to)],
        });
        assert!(Arc::ptr_eq(&a.areas, &b.areas));
        // A new area: b gets its own map, a keeps the campaign's.
        let mut area = a.areas[0].clone();
        area.area_id = "area_new".into();
        area.reachable_area_ids.clear();
        b.apply(&Effect::AddAreas {
            areas: vec![area],
            links: vec![(from, "area_new".into())],
        });
        assert_eq!(b.areas.len(), a.areas.len() + 1);
        assert!(a.area("area_new").is_none());
        assert!(!Arc::ptr_eq(&a.areas, &b.areas));
        assert!(Arc::ptr_eq(&a.content, &b.content));
        // A snapshot reads back equal, with parts of its own.
        let back: GameState = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        assert_eq!(starts.start("demo").unwrap(), a);
    }

    #[test]
    fn the_protocol_example_is_accepted() {
        let c = Campaign::from_value(&tiny(), &tools()).unwrap();
        assert_eq!(c.areas.len(), 2);
        let state = c.into_state();
        assert_eq!(state.active_actor().map(|c| c.level), Some(1));
    }

    #[test]
    fn the_builtin_demo_is_valid_and_large_enough() {
        let demo = Campaign::builtin("demo", &tools()).unwrap().unwrap();
        assert!(demo.areas.len() >= 8);
        assert!(demo.characters.iter().filter(|c| c.kind == "npc").count() >= 2);
        assert!(
            demo.areas
                .iter()
                .all(|a| !a.name.is_empty() && !a.description.is_empty())
        );
        assert!(Campaign::builtin("nope", &tools()).is_none());
    }

    #[test]
    fn lore_ids_never_clash_with_content_ids() {
        let mut v = tiny();
        v["lore"] = json!(["First.", "Second."]);
        v["content"] = json!([{"content_id": "lore_001", "content_type": "note", "title": "Mine", "body": "b"}]);
        let state = Campaign::from_value(&v, &tools()).unwrap().into_state();
        let ids: Vec<&str> = state
            .content
            .iter()
            .map(|c| c.content_id.as_str())
            .collect();
        assert_eq!(ids, ["lore_002", "lore_003", "lore_001"]);
    }

    #[test]
    fn every_problem_is_reported() {
        let cases: Vec<(Value, &[&str])> = vec![
            (json!({}), &["campaign_id", "areas"]),
            (json!([1]), &["object"]),
            (
                {
                    let mut v = tiny();
                    v["areas"][0]["reachable_area_ids"] = json!(["area_404"]);
                    v["characters"][0]["area_id"] = json!("nowhere");
                    v["allowlist"] = json!(["move", "fly"]);
                    v["active_actor_id"] = json!("ghost");
                    v
                },
                &["area_404", "nowhere", "fly", "ghost"],
            ),
            (
                {
                    let mut v = tiny();
                    v["characters"][0]["hp"] = json!("lots");
                    v
                },
                &["/characters/0/hp"],
            ),
        ];
        for (value, expected) in cases {
            let err = Campaign::from_value(&value, &tools()).unwrap_err();
            let all = err.problems.join("\n");
            for word in expected {
                assert!(all.contains(word), "{word} missing from: {all}");
            }
        }
    }
}
