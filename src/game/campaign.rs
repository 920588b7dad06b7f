//! Campaign files: the opening map, characters, lore and tool allowlist.
//!
//! An inline campaign is checked in two passes: its shape against the JSON
//! Schema below, then its meaning (ids unique, links and positions pointing at
//! areas that exist, a player character to act, tools that exist). Every
//! problem is reported (up to [`MAX_PROBLEMS_LISTED`]), not just the first.
//! Every list and string has a bound (the `MAX_*` constants below and in
//! [`super::state`]), so checking and starting a campaign is linear in its
//! size.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::approvals::{self, ApprovalRule};
use super::content::{ContentEntry, NpcProfile};
use super::party::{DEFAULT_MAX_PLAYERS, MAX_PLAYERS_BOUND, PcTemplate};
use super::pieces::SharedStart;
use super::state::{
    Area, AreaId, AreaMap, Character, CharacterId, GameState, MAX_COORD, MAX_HP,
    MAX_INVENTORY_ITEMS, MAX_LEVEL, MAX_LINKS_PER_AREA, MAX_STACK, MAX_STATS_PER_CHARACTER,
};

/// Campaigns that ship inside the binary, as `(campaign_id, JSON text)`.
pub const BUILTIN_CAMPAIGNS: &[(&str, &str)] = &[("demo", include_str!("campaigns/demo.json"))];

/// The start states of the built-in campaigns ([`Campaign::builtin_starts`]),
/// each with its text, serialized once here rather than once per session.
#[derive(Debug, Clone, Default)]
pub struct BuiltinStarts(HashMap<&'static str, (GameState, Arc<SharedStart>)>);

impl BuiltinStarts {
    /// A new session's state for built-in campaign `id`, and that state as
    /// it is stored.
    pub fn start(&self, id: &str) -> Option<(GameState, Arc<SharedStart>)> {
        self.0
            .get(id)
            .map(|(state, shared)| (state.clone(), shared.clone()))
    }
}

/// Most areas in one campaign.
pub const MAX_CAMPAIGN_AREAS: usize = 2000;
/// Most characters (player characters and NPCs on the map) in one campaign.
pub const MAX_CAMPAIGN_CHARACTERS: usize = 200;
/// Most NPC profiles in one campaign.
pub const MAX_CAMPAIGN_NPCS: usize = 500;
/// Most versions of one NPC profile in a campaign.
pub const MAX_NPC_VERSIONS: usize = 100;
/// Most lore lines in one campaign.
pub const MAX_CAMPAIGN_LORE: usize = 500;
/// Most content entries in one campaign.
pub const MAX_CAMPAIGN_CONTENT: usize = 2000;
/// Most tool names in a campaign's allowlist.
pub const MAX_ALLOWLIST: usize = 200;
/// The allowlist of a campaign file that names none: seed 002's default,
/// and the timer tools, so the world of any campaign can act by itself
/// (docs/protocol.md §9).
pub const DEFAULT_ALLOWLIST: [&str; 6] = [
    "move",
    "move_options",
    "hp_delta",
    "map_generate",
    "schedule_event",
    "cancel_event",
];

fn default_allowlist() -> Vec<String> {
    DEFAULT_ALLOWLIST.map(str::to_owned).to_vec()
}
/// Longest id (campaign, area, character, NPC, content, item slug, tool
/// name), in characters. The tools' own schemas take ids up to this long.
pub const MAX_ID_CHARS: usize = 64;
/// Longest name or title, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// Longest description, lore line, content body, persona or prompt, in
/// characters.
pub const MAX_TEXT_CHARS: usize = 8000;
/// Most tags on one area, content entry or NPC, and most traits on one NPC
/// version or prompts on one NPC.
pub const MAX_TAGS: usize = 32;
/// Longest tag or trait, in characters.
pub const MAX_TAG_CHARS: usize = 64;
/// Longest summary of a content entry, in characters.
pub const MAX_SUMMARY_CHARS: usize = 1000;
/// Longest source of a content entry (a book, a person, a URL), in characters.
pub const MAX_SOURCE_CHARS: usize = 500;
/// Most greeting templates on one NPC.
pub const MAX_GREETING_TEMPLATES: usize = 16;
/// Longest greeting template, in characters.
pub const MAX_GREETING_CHARS: usize = 1000;
/// Largest absolute value of one stat in a campaign (e.g. `str: 14`).
pub const MAX_STAT_VALUE: i64 = 1_000_000;
/// Problems listed in a refusal; past these, one last line counts the rest.
pub const MAX_PROBLEMS_LISTED: usize = 50;

/// A parsed and checked campaign.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Campaign {
    pub campaign_id: String,
    pub title: String,
    #[serde(default)]
    pub description: String,
    /// [`DEFAULT_ALLOWLIST`] when the file names none.
    #[serde(default = "default_allowlist")]
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
    /// What a character made for a joining seat starts with, when no
    /// campaign `pc` is free (docs/protocol.md §8).
    #[serde(default)]
    pub pc_template: PcTemplate,
    /// The party's bounds.
    #[serde(default)]
    pub party: PartyRules,
    /// Which of the game master's calls wait for a person's decision
    /// (docs/protocol.md §19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRule>,
}

/// A campaign's `party`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartyRules {
    /// Seats a session holds at most, the host's included (1 to
    /// [`MAX_PLAYERS_BOUND`]; default [`DEFAULT_MAX_PLAYERS`]);
    /// `QUESTD_MAX_PLAYERS` caps it.
    #[serde(default = "default_max_players")]
    pub max_players: u32,
}

fn default_max_players() -> u32 {
    DEFAULT_MAX_PLAYERS
}

impl Default for PartyRules {
    fn default() -> Self {
        Self {
            max_players: DEFAULT_MAX_PLAYERS,
        }
    }
}

/// Why a campaign was refused: the problems found, each a short sentence;
/// at most [`MAX_PROBLEMS_LISTED`] of them, then one line counting the rest.
#[derive(Debug, thiserror::Error)]
#[error("invalid campaign: {}", problems.join("; "))]
pub struct CampaignError {
    pub problems: Vec<String>,
}

/// Problems as they are found: the first [`MAX_PROBLEMS_LISTED`] written
/// out, the rest only counted, so a campaign with thousands of faults costs
/// no more to refuse than to read.
#[derive(Default)]
pub struct Problems {
    listed: Vec<String>,
    more: usize,
}

impl Problems {
    /// Where `value` breaks `validator`'s schema, each problem a path and
    /// a rule. Masked: the message names the rule, not the value, which
    /// may be a whole oversized list.
    pub fn of_schema(validator: &jsonschema::Validator, value: &Value) -> Self {
        let mut problems = Self::default();
        for e in validator.iter_errors(value) {
            problems.add(|| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.masked().to_string()
                } else {
                    format!("{path}: {}", e.masked())
                }
            });
        }
        problems
    }

    pub fn add(&mut self, problem: impl FnOnce() -> String) {
        if self.listed.len() < MAX_PROBLEMS_LISTED {
            self.listed.push(problem());
        } else {
            self.more += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    /// Adds every problem of `e` (its own count of the rest included).
    pub fn extend(&mut self, e: CampaignError) {
        for p in e.problems {
            self.add(|| p);
        }
    }

    pub fn into_error(mut self) -> CampaignError {
        if self.more > 0 {
            self.listed.push(format!("and {} more problems", self.more));
        }
        CampaignError {
            problems: self.listed,
        }
    }
}

/// How many of each list a checked document may hold: a campaign's
/// ([`CAMPAIGN_LIMITS`]), or a save's ([`SAVE_LIMITS`]), whose map and
/// cast grew in play.
#[derive(Debug, Clone, Copy)]
pub struct ListLimits {
    pub areas: usize,
    pub characters: usize,
    pub npcs: usize,
    pub lore: usize,
    pub content: usize,
}

/// The bounds of an inline campaign.
pub const CAMPAIGN_LIMITS: ListLimits = ListLimits {
    areas: MAX_CAMPAIGN_AREAS,
    characters: MAX_CAMPAIGN_CHARACTERS,
    npcs: MAX_CAMPAIGN_NPCS,
    lore: MAX_CAMPAIGN_LORE,
    content: MAX_CAMPAIGN_CONTENT,
};

/// The bounds of a save's world (`crate::game::save`): a map as large as
/// a session may grow ([`super::state::MAX_SESSION_AREAS`]), a
/// character for every seat a party may add, and ten times a campaign's
/// NPCs and content for those the game master made in play.
pub const SAVE_LIMITS: ListLimits = ListLimits {
    areas: super::state::MAX_SESSION_AREAS,
    characters: MAX_CAMPAIGN_CHARACTERS + MAX_PLAYERS_BOUND as usize,
    npcs: MAX_CAMPAIGN_NPCS * 10,
    lore: MAX_CAMPAIGN_LORE,
    content: MAX_CAMPAIGN_CONTENT * 10,
};

static SCHEMA: LazyLock<Value> = LazyLock::new(|| schema_within(CAMPAIGN_LIMITS));

/// The campaign schema with `limits` on its lists.
fn schema_within(limits: ListLimits) -> Value {
    let id = json!({"type": "string", "pattern": format!("^[A-Za-z0-9_.:-]{{1,{MAX_ID_CHARS}}}$")});
    // Ids of things that campaigns name freely (NPCs, content) may use any
    // script, as create_npc's default ids do; only their length is bounded.
    let free_id = json!({"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS});
    let name = json!({"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS});
    let text = json!({"type": "string", "maxLength": MAX_TEXT_CHARS});
    let tags = json!({
        "type": "array", "maxItems": MAX_TAGS,
        "items": {"type": "string", "maxLength": MAX_TAG_CHARS}
    });
    let coord = json!({"type": "integer", "minimum": -MAX_COORD, "maximum": MAX_COORD});
    let version = json!({"type": "integer", "minimum": 0, "maximum": u32::MAX});
    let area = json!({
        "type": "object",
        "required": ["area_id", "name"],
        "properties": {
            "area_id": id,
            "name": name,
            "description": text,
            // Unique, too: checked after the schema, in linear time (a
            // schema's uniqueItems may compare every pair).
            "reachable_area_ids": {"type": "array", "maxItems": MAX_LINKS_PER_AREA, "items": id},
            "x": coord, "y": coord, "z": coord,
            "tags": tags,
            "group": {"type": "string", "maxLength": MAX_NAME_CHARS},
            "short_name": {"type": "string", "maxLength": MAX_NAME_CHARS}
        }
    });
    let item = json!({
        "type": "object",
        "required": ["slug", "name"],
        "properties": {
            "slug": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS},
            "name": name,
            "description": text,
            "quantity": {"type": "integer", "minimum": 0, "maximum": MAX_STACK}
        }
    });
    let character = json!({
        "type": "object",
        "required": ["character_id", "name", "kind", "area_id", "hp", "max_hp"],
        "properties": {
            "character_id": id,
            "name": name,
            "kind": {"enum": ["pc", "npc"]},
            "area_id": id,
            "hp": {"type": "integer", "minimum": 0, "maximum": MAX_HP},
            "max_hp": {"type": "integer", "minimum": 1, "maximum": MAX_HP},
            "level": {"type": "integer", "minimum": 1, "maximum": MAX_LEVEL},
            "stats": {
                "type": "object",
                "maxProperties": MAX_STATS_PER_CHARACTER,
                "propertyNames": {"maxLength": MAX_ID_CHARS},
                "additionalProperties": {"type": "integer", "minimum": -MAX_STAT_VALUE, "maximum": MAX_STAT_VALUE}
            },
            "inventory": {"type": "array", "maxItems": MAX_INVENTORY_ITEMS, "items": item},
            "state": {"enum": ["active", "downed"]}
        }
    });
    let npc_version = json!({
        "type": "object",
        "required": ["version", "persona"],
        "properties": {
            "version": version,
            "persona": text,
            "background": text,
            "traits": tags,
            "speech_style": text
        }
    });
    let npc = json!({
        "type": "object",
        "required": ["npc_id", "name", "active_version", "versions"],
        "properties": {
            "npc_id": free_id,
            "name": name,
            "character_id": {"type": ["string", "null"], "maxLength": MAX_ID_CHARS},
            "active": {"type": "boolean"},
            "active_version": version,
            "versions": {"type": "array", "maxItems": MAX_NPC_VERSIONS, "items": npc_version},
            "prompts": {
                "type": "object",
                "maxProperties": MAX_TAGS,
                "propertyNames": {"maxLength": MAX_ID_CHARS},
                "additionalProperties": text
            },
            "tags": tags,
            "knowledge_domains": tags,
            "greeting_templates": {
                "type": "array", "maxItems": MAX_GREETING_TEMPLATES,
                "items": {"type": "string", "maxLength": MAX_GREETING_CHARS}
            },
            "max_response_length": {"type": "integer", "minimum": 1, "maximum": MAX_TEXT_CHARS},
            "must_cite_sources": {"type": "boolean"}
        }
    });
    let content = json!({
        "type": "object",
        "required": ["content_id", "content_type", "title", "body"],
        "properties": {
            "content_id": free_id,
            "content_type": {"type": "string", "maxLength": MAX_ID_CHARS},
            "title": {"type": "string", "maxLength": MAX_NAME_CHARS},
            "body": text,
            "tags": tags,
            "status": {"enum": ["published", "draft", "archived"]},
            "area_id": {"type": ["string", "null"], "maxLength": MAX_ID_CHARS},
            "created_by": {"type": "string", "maxLength": MAX_NAME_CHARS},
            "summary": {"type": "string", "maxLength": MAX_SUMMARY_CHARS},
            "domains": tags,
            "source": {"type": "string", "maxLength": MAX_SOURCE_CHARS},
            "credibility_score": {"type": "number", "minimum": 0, "maximum": 1},
            "verified": {"type": "boolean"},
            "created_at": {"type": "string", "maxLength": MAX_ID_CHARS}
        }
    });
    let pc_template = json!({
        "type": "object",
        "properties": {
            "level": {"type": "integer", "minimum": 1, "maximum": MAX_LEVEL},
            "max_hp": {"type": "integer", "minimum": 1, "maximum": MAX_HP},
            "stats": character["properties"]["stats"].clone()
        }
    });
    let party = json!({
        "type": "object",
        "properties": {
            "max_players": {"type": "integer", "minimum": 1, "maximum": MAX_PLAYERS_BOUND}
        }
    });
    let approval = json!({
        "type": "object",
        "required": ["tools"],
        "properties": {
            "tools": {
                "type": "array", "maxItems": approvals::MAX_RULE_TOOLS,
                "items": {"type": "string", "maxLength": MAX_ID_CHARS}
            },
            "timeout_s": {
                "type": "integer",
                "minimum": approvals::MIN_TIMEOUT_S,
                "maximum": approvals::MAX_TIMEOUT_S
            },
            "lethal_only": {"type": "boolean"}
        }
    });
    json!({
        "type": "object",
        "required": ["campaign_id", "title", "active_actor_id", "areas", "characters"],
        "properties": {
            "campaign_id": id,
            "title": name,
            "description": text,
            "allowlist": {
                "type": "array", "maxItems": MAX_ALLOWLIST,
                "items": {"type": "string", "maxLength": MAX_ID_CHARS}
            },
            "active_actor_id": id,
            "lore": {"type": "array", "maxItems": limits.lore, "items": text},
            "areas": {"type": "array", "minItems": 1, "maxItems": limits.areas, "items": area},
            "characters": {
                "type": "array", "minItems": 1, "maxItems": limits.characters, "items": character
            },
            "npcs": {"type": "array", "maxItems": limits.npcs, "items": npc},
            "content": {"type": "array", "maxItems": limits.content, "items": content},
            "pc_template": pc_template,
            "party": party,
            "approval": approval
        }
    })
}

static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    jsonschema::validator_for(&SCHEMA).expect("the campaign schema is a valid JSON Schema")
});

static SAVE_SCHEMA: LazyLock<Value> = LazyLock::new(|| schema_within(SAVE_LIMITS));

static SAVE_VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    jsonschema::validator_for(&SAVE_SCHEMA)
        .expect("the save's campaign schema is a valid JSON Schema")
});

impl Campaign {
    /// The campaign's Chinese title and description: its `name_zh` draft
    /// `zh_<campaign_id>`, when it has one.
    pub fn title_zh(&self) -> Option<&ContentEntry> {
        self.content
            .iter()
            .find(|e| super::state::names_in_chinese(e) == Some(self.campaign_id.as_str()))
    }

    /// The JSON Schema that inline campaigns must follow.
    pub fn schema() -> &'static Value {
        &SCHEMA
    }

    /// Parses and checks a campaign; `known_tools` are the tools this server
    /// has. Every list and string has a bound in the schema, checked first,
    /// so the checks after it (and [`Campaign::into_state`]) work on a
    /// campaign of bounded size; all of them take time linear in it.
    pub fn from_value(value: &Value, known_tools: &[&str]) -> Result<Self, CampaignError> {
        Self::checked(&VALIDATOR, value, known_tools)
    }

    /// [`Campaign::from_value`] within [`SAVE_LIMITS`]: a save's world
    /// checked by a campaign's rules.
    pub fn from_save_value(value: &Value, known_tools: &[&str]) -> Result<Self, CampaignError> {
        Self::checked(&SAVE_VALIDATOR, value, known_tools)
    }

    /// The save's campaign schema ([`SAVE_LIMITS`]), for the save's.
    pub fn save_schema() -> &'static Value {
        &SAVE_SCHEMA
    }

    fn checked(
        validator: &jsonschema::Validator,
        value: &Value,
        known_tools: &[&str],
    ) -> Result<Self, CampaignError> {
        let problems = Problems::of_schema(validator, value);
        if !problems.is_empty() {
            return Err(problems.into_error());
        }
        // The schema passed `12.0` where an integer goes; read it as 12.
        let mut value = value.clone();
        crate::json::whole_numbers_as_integers(&mut value);
        let campaign: Campaign = serde_json::from_value(value).map_err(|e| CampaignError {
            problems: vec![e.to_string()],
        })?;
        let problems = campaign.problems(known_tools);
        if problems.is_empty() {
            Ok(campaign)
        } else {
            Err(problems.into_error())
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
            let state = campaign.into_state();
            let shared = SharedStart::of(&state).map_err(|e| CampaignError {
                problems: vec![format!("built-in campaign {id} does not serialize: {e}")],
            })?;
            starts.insert(*id, (state, Arc::new(shared)));
        }
        Ok(BuiltinStarts(starts))
    }

    /// What the schema cannot say: ids unique, references resolved, links
    /// unique and few enough once they run both ways. One pass over each
    /// list with hash sets, so linear in the campaign's size.
    fn problems(&self, known_tools: &[&str]) -> Problems {
        let mut problems = Problems::default();
        let mut area_ids = HashSet::new();
        for a in &self.areas {
            if !area_ids.insert(a.area_id.as_str()) {
                problems.add(|| format!("area id {} is used twice", a.area_id));
            }
        }
        // Every area's neighbours once links run both ways, as into_state
        // makes them.
        let mut neighbours: HashMap<&str, HashSet<&str>> = HashMap::new();
        for a in &self.areas {
            let mut listed = HashSet::new();
            for r in &a.reachable_area_ids {
                if !listed.insert(r.as_str()) {
                    problems.add(|| format!("area {} lists area {r} more than once", a.area_id));
                } else if !area_ids.contains(r.as_str()) {
                    problems.add(|| format!("area {} links to unknown area {r}", a.area_id));
                } else if r == &a.area_id {
                    problems.add(|| format!("area {} links to itself", a.area_id));
                } else {
                    neighbours
                        .entry(a.area_id.as_str())
                        .or_default()
                        .insert(r.as_str());
                    neighbours
                        .entry(r.as_str())
                        .or_default()
                        .insert(a.area_id.as_str());
                }
            }
        }
        for a in &self.areas {
            let n = neighbours.get(a.area_id.as_str()).map_or(0, HashSet::len);
            if n > MAX_LINKS_PER_AREA {
                problems.add(|| {
                    format!(
                        "area {} is linked with {n} areas once links run both ways; at most {MAX_LINKS_PER_AREA}",
                        a.area_id
                    )
                });
            }
        }
        let mut char_ids = HashSet::new();
        for c in &self.characters {
            if !char_ids.insert(c.character_id.as_str()) {
                problems.add(|| format!("character id {} is used twice", c.character_id));
            }
            if !area_ids.contains(c.area_id.as_str()) {
                problems.add(|| {
                    format!(
                        "character {} stands in unknown area {}",
                        c.character_id, c.area_id
                    )
                });
            }
            if c.hp > c.max_hp {
                problems.add(|| format!("character {} has hp above max_hp", c.character_id));
            }
        }
        match self
            .characters
            .iter()
            .find(|c| c.character_id == self.active_actor_id)
        {
            None => problems.add(|| {
                format!(
                    "active_actor_id {} is not one of the characters",
                    self.active_actor_id
                )
            }),
            Some(c) if c.kind != "pc" => problems.add(|| {
                format!(
                    "active_actor_id {} must be a player character (kind pc)",
                    self.active_actor_id
                )
            }),
            Some(_) => {}
        }
        let mut npc_ids = HashSet::new();
        for npc in &self.npcs {
            for p in npc.problems() {
                problems.add(|| p);
            }
            if !npc_ids.insert(npc.npc_id.as_str()) {
                problems.add(|| format!("npc id {} is used twice", npc.npc_id));
            }
            if let Some(c) = &npc.character_id
                && !char_ids.contains(c.as_str())
            {
                problems.add(|| format!("npc {} is embodied by unknown character {c}", npc.npc_id));
            }
        }
        let mut content_ids = HashSet::new();
        for entry in &self.content {
            if !content_ids.insert(entry.content_id.as_str()) {
                problems.add(|| format!("content id {} is used twice", entry.content_id));
            }
            if let Some(a) = &entry.area_id
                && !area_ids.contains(a.as_str())
            {
                problems
                    .add(|| format!("content {} is placed in unknown area {a}", entry.content_id));
            }
        }
        let asking = self.approval.iter().flat_map(|a| &a.tools);
        for tool in asking {
            if !known_tools.contains(&tool.as_str()) {
                problems.add(|| format!("approval.tools names unknown tool {tool}"));
            }
        }
        for tool in &self.allowlist {
            if !known_tools.contains(&tool.as_str()) {
                problems.add(|| {
                    format!(
                        "allowlist names unknown tool {tool}; known tools: {}",
                        known_tools.join(", ")
                    )
                });
            }
        }
        problems
    }

    /// The opening save state of a new session.
    pub fn into_state(self) -> GameState {
        let mut areas = self.areas;
        // Links are made symmetric at the start so movement rules are simple.
        // Positions come from an index and existing links from a set, so this
        // is linear in the links, whatever the campaign holds.
        let mut position: HashMap<AreaId, usize> = HashMap::with_capacity(areas.len());
        for (i, a) in areas.iter().enumerate() {
            position.entry(a.area_id.clone()).or_insert(i);
        }
        let mut present: HashSet<(usize, AreaId)> = HashSet::new();
        let mut back = Vec::new();
        for (i, a) in areas.iter().enumerate() {
            for r in &a.reachable_area_ids {
                present.insert((i, r.clone()));
                if let Some(&j) = position.get(r.as_str()) {
                    back.push((j, a.area_id.clone()));
                }
            }
        }
        for (j, from) in back {
            if present.insert((j, from.clone())) {
                areas[j].reachable_area_ids.push(from);
            }
        }
        let mut state = GameState {
            campaign_id: self.campaign_id,
            title: self.title,
            turn: 0,
            active_actor_id: self.active_actor_id,
            areas: AreaMap::from(areas),
            characters: self.characters.into_iter().map(Arc::new).collect(),
            allowlist: Arc::new(self.allowlist),
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
            timers: Default::default(),
            events: VecDeque::new(),
            history: VecDeque::new(),
            party: Default::default(),
            approvals: Default::default(),
        };
        state.party.max_players = self.party.max_players;
        state.party.pc_template = self.pc_template;
        state.approvals.rule = self.approval.map(|r| Box::new(r.deduped()));
        state.ensure_host_seat();
        state
    }
}

/// Longest title of a lore line's content entry.
const LORE_TITLE_CHARS: usize = 60;

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
                // Its first sentence, cut at a word when long: a title
                // never ends mid-word.
                title: super::names::cut_at_boundary(
                    line.split(['.', '。']).next().unwrap_or(line),
                    LORE_TITLE_CHARS,
                ),
                body: line.clone(),
                tags: vec!["lore".into()],
                status: Default::default(),
                area_id: None,
                created_by: "campaign".into(),
                about: Default::default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tools::test_support::tools;

    /// The minimal campaign of docs/protocol.md §7.
    fn tiny() -> Value {
        serde_json::from_str(include_str!("../../tests/api/fixtures/tiny_campaign.json"))
            .expect("fixture is JSON")
    }

    #[test]
    fn whole_numbers_written_with_a_fraction_read_as_the_integers_the_schema_passed() {
        let mut written = tiny();
        written["characters"][0]["hp"] = json!(12.0);
        written["characters"][0]["max_hp"] = json!(20.0);
        let read = Campaign::from_value(&written, &tools()).expect("12.0 is an integer");
        let mut whole = tiny();
        whole["characters"][0]["hp"] = json!(12);
        whole["characters"][0]["max_hp"] = json!(20);
        assert_eq!(
            read.into_state(),
            Campaign::from_value(&whole, &tools()).unwrap().into_state()
        );
        // A fraction is no integer: refused by the schema, by its path.
        written["characters"][0]["hp"] = json!(12.5);
        let problems = Campaign::from_value(&written, &tools())
            .unwrap_err()
            .problems;
        assert!(
            problems.iter().any(|p| p.contains("/characters/0/hp")),
            "{problems:?}"
        );
    }

    #[test]
    fn sessions_of_a_builtin_campaign_share_it_until_they_change_it() {
        use crate::game::Effect;
        let starts = Campaign::builtin_starts(&tools()).unwrap();
        assert!(starts.start("nope").is_none());
        let (a, a_stored) = starts.start("demo").unwrap();
        let (mut b, b_stored) = starts.start("demo").unwrap();
        // Serialized once for both, as every session of it would be.
        assert!(Arc::ptr_eq(&a_stored, &b_stored));
        assert_eq!(a_stored.text, serde_json::to_string(&a).unwrap());
        assert_eq!(a, b);
        assert!(AreaMap::ptr_eq(&a.areas, &b.areas));
        assert!(Arc::ptr_eq(&a.content, &b.content));
        assert!(Arc::ptr_eq(&a.npcs, &b.npcs));
        assert!(Arc::ptr_eq(&a.lore, &b.lore));
        assert!(Arc::ptr_eq(&a.allowlist, &b.allowlist));
        // A link that exists changes nothing and copies nothing.
        let (from, to) = (
            a.areas[0].area_id.clone(),
            a.areas[0].reachable_area_ids[0].clone(),
        );
        b.apply(&Effect::AddAreas {
            areas: vec![],
            links: vec![(from.clone(), to)],
        });
        assert!(AreaMap::ptr_eq(&a.areas, &b.areas));
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
        assert!(!AreaMap::ptr_eq(&a.areas, &b.areas));
        assert!(Arc::ptr_eq(&a.content, &b.content));
        // Characters: each shared until it changes; a move copies the
        // mover alone.
        let shared = |a: &GameState, b: &GameState| -> Vec<bool> {
            a.characters
                .iter()
                .zip(&b.characters)
                .map(|(x, y)| Arc::ptr_eq(x, y))
                .collect()
        };
        assert!(a.characters.len() > 1);
        assert!(shared(&a, &b).iter().all(|&s| s));
        let mover = a.characters[0].character_id.clone();
        let to = a.areas[0].area_id.clone();
        b.apply(&Effect::Move {
            character_id: mover.clone(),
            to_area_id: to.clone(),
        });
        let mut expect = vec![true; a.characters.len()];
        expect[0] = false;
        assert_eq!(shared(&a, &b), expect);
        assert_eq!(b.character(&mover).unwrap().area_id, to);
        assert_eq!(a, starts.start("demo").unwrap().0, "a keeps the campaign's");
        // A snapshot reads back equal, with parts of its own.
        let back: GameState = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        assert_eq!(starts.start("demo").unwrap().0, a);
    }

    #[test]
    fn the_protocol_example_is_accepted() {
        let c = Campaign::from_value(&tiny(), &tools()).unwrap();
        assert_eq!(c.areas.len(), 2);
        let state = c.into_state();
        assert_eq!(state.active_actor().map(|c| c.level), Some(1));
    }

    #[test]
    fn a_campaign_without_an_allowlist_gets_seed_002s_default() {
        let mut v = tiny();
        v.as_object_mut().unwrap().remove("allowlist");
        let state = Campaign::from_value(&v, &tools()).unwrap().into_state();
        // Seed 002's four, and the timer tools (docs/protocol.md §9).
        assert_eq!(
            *state.allowlist,
            [
                "move",
                "move_options",
                "hp_delta",
                "map_generate",
                "schedule_event",
                "cancel_event"
            ]
        );
        // One given is kept as given, even an empty one.
        for given in [json!(["move"]), json!([])] {
            v["allowlist"] = given.clone();
            let c = Campaign::from_value(&v, &tools()).unwrap();
            assert_eq!(json!(c.allowlist), given);
        }
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
    fn a_long_lore_line_is_titled_without_a_word_cut() {
        let mut v = tiny();
        v["lore"] = json!([
            "The bells of the drowned chapel are said to hear bells of their own, far below the water and the silt"
        ]);
        let state = Campaign::from_value(&v, &tools()).unwrap().into_state();
        let lore = state
            .content
            .iter()
            .find(|e| e.content_type == "lore")
            .unwrap();
        assert_eq!(
            lore.title,
            "The bells of the drowned chapel are said to hear bells of…"
        );
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
    fn npc_voice_and_content_trust_are_read_and_bounded() {
        let npc = |extra: Value| {
            let mut n = json!({"npc_id": "ancestor_yan", "name": "严氏先祖", "active_version": 1,
                               "versions": [{"version": 1, "persona": "家族的守护者"}]});
            n.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            n
        };
        let entry = |extra: Value| {
            let mut e = json!({"content_id": "c1", "content_type": "knowledge",
                               "title": "严氏家训十则", "body": "…"});
            e.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            e
        };
        let mut v = tiny();
        v["npcs"] = json!([npc(json!({
            "knowledge_domains": ["严氏家族历史", "祖训家规"],
            "greeting_templates": vec!["后生来了？".repeat(200); MAX_GREETING_TEMPLATES],
            "max_response_length": MAX_TEXT_CHARS,
            "must_cite_sources": true
        }))]);
        v["content"] = json!([entry(json!({
            "summary": "s".repeat(MAX_SUMMARY_CHARS),
            "domains": ["祖训家规"],
            "source": "s".repeat(MAX_SOURCE_CHARS),
            "credibility_score": 0.98,
            "verified": true
        }))]);
        let state = Campaign::from_value(&v, &TOOLS).unwrap().into_state();
        let voice = &state.npcs[0].voice;
        assert_eq!(voice.knowledge_domains, ["严氏家族历史", "祖训家规"]);
        assert_eq!(
            (
                voice.greeting_templates.len(),
                voice.max_response_length,
                voice.must_cite_sources
            ),
            (MAX_GREETING_TEMPLATES, MAX_TEXT_CHARS as u32, true)
        );
        let c = &state.content[0];
        assert_eq!((c.credibility_score(), c.verified()), (0.98, true));
        assert_eq!(c.about.domains, ["祖训家规"]);

        // (npc fields, content fields, the field named in the refusal)
        let cases = [
            (
                json!({"greeting_templates": vec!["hi"; MAX_GREETING_TEMPLATES + 1]}),
                json!({}),
                "/npcs/0/greeting_templates",
            ),
            (
                json!({"greeting_templates": ["x".repeat(MAX_GREETING_CHARS + 1)]}),
                json!({}),
                "/npcs/0/greeting_templates/0",
            ),
            (
                json!({"knowledge_domains": vec!["d"; MAX_TAGS + 1]}),
                json!({}),
                "/npcs/0/knowledge_domains",
            ),
            (
                json!({"max_response_length": 0}),
                json!({}),
                "/npcs/0/max_response_length",
            ),
            (
                json!({"max_response_length": MAX_TEXT_CHARS + 1}),
                json!({}),
                "/npcs/0/max_response_length",
            ),
            (
                json!({"must_cite_sources": "yes"}),
                json!({}),
                "/npcs/0/must_cite_sources",
            ),
            (
                json!({}),
                json!({"summary": "s".repeat(MAX_SUMMARY_CHARS + 1)}),
                "/content/0/summary",
            ),
            (
                json!({}),
                json!({"source": "s".repeat(MAX_SOURCE_CHARS + 1)}),
                "/content/0/source",
            ),
            (
                json!({}),
                json!({"domains": ["d".repeat(MAX_TAG_CHARS + 1)]}),
                "/content/0/domains/0",
            ),
            (
                json!({}),
                json!({"credibility_score": 1.5}),
                "/content/0/credibility_score",
            ),
            (
                json!({}),
                json!({"credibility_score": -0.1}),
                "/content/0/credibility_score",
            ),
            (json!({}), json!({"verified": 1}), "/content/0/verified"),
        ];
        for (npc_fields, content_fields, path) in cases {
            let mut v = tiny();
            v["npcs"] = json!([npc(npc_fields)]);
            v["content"] = json!([entry(content_fields)]);
            let all = refused(&v);
            assert!(all.contains(path), "{path} missing from: {all}");
        }
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

    /// The tool names, made once: a registry compiles every schema.
    static TOOLS: LazyLock<Vec<&'static str>> = LazyLock::new(tools);

    /// Refuses `value`, answering every problem in one text.
    fn refused(value: &Value) -> String {
        Campaign::from_value(value, &TOOLS)
            .expect_err("the campaign is refused")
            .problems
            .join("\n")
    }

    #[test]
    fn repeated_links_are_refused_quickly() {
        // Each of two areas lists the other 40,000 times: refused by the
        // schema's bound on links before anything else looks at them.
        let mut v = tiny();
        v["areas"][0]["reachable_area_ids"] = json!(vec!["area_002"; 40_000]);
        v["areas"][1]["reachable_area_ids"] = json!(vec!["area_001"; 40_000]);
        let err = Campaign::from_value(&v, &TOOLS).unwrap_err();
        let all = err.problems.join("\n");
        assert!(
            all.contains("/areas/0/reachable_area_ids") && all.contains("64"),
            "{all}"
        );
        assert!(
            all.len() < 1000,
            "the problems name rules, not values: {all}"
        );
        // Within the bound, a repeated id is still refused, by name.
        let mut v = tiny();
        v["areas"][0]["reachable_area_ids"] = json!(["area_002", "area_002"]);
        let all = refused(&v);
        assert!(
            all.contains("area area_001 lists area area_002 more than once"),
            "{all}"
        );
    }

    #[test]
    fn links_that_run_both_ways_count_toward_the_cap() {
        // 65 areas each list the hub once; the hub would have 65 links.
        let mut v = tiny();
        let mut areas = vec![json!({"area_id": "hub", "name": "Hub"})];
        areas.extend((0..=MAX_LINKS_PER_AREA).map(|i| {
            json!({"area_id": format!("spoke_{i}"), "name": "Spoke", "reachable_area_ids": ["hub"]})
        }));
        v["areas"] = json!(areas);
        v["characters"][0]["area_id"] = json!("hub");
        let all = refused(&v);
        assert!(
            all.contains("area hub is linked with 65 areas once links run both ways; at most 64"),
            "{all}"
        );
    }

    /// A campaign with every list at its longest and the bounded strings
    /// and numbers at their limits.
    fn at_the_limits() -> Value {
        let long = |n: usize| "x".repeat(n);
        let id = |prefix: &str, i: usize| format!("{prefix}_{i:04}");
        let n = MAX_CAMPAIGN_AREAS;
        // Each area lists the 32 before and the 32 after it around a ring: 64
        // links, the same 64 once links run both ways.
        let areas: Vec<Value> = (0..n)
            .map(|i| {
                let links: Vec<String> = (1..=MAX_LINKS_PER_AREA / 2)
                    .flat_map(|d| [id("area", (i + d) % n), id("area", (i + n - d) % n)])
                    .collect();
                json!({
                    "area_id": id("area", i),
                    "name": "A",
                    "reachable_area_ids": links,
                    "x": MAX_COORD, "y": -MAX_COORD, "z": MAX_COORD,
                })
            })
            .collect();
        let mut areas = areas;
        areas[1]["area_id"] = json!("a".repeat(MAX_ID_CHARS));
        // Area 1's neighbours must name it by its new id.
        for a in &mut areas {
            for link in a["reachable_area_ids"].as_array_mut().unwrap() {
                if link == "area_0001" {
                    *link = json!("a".repeat(MAX_ID_CHARS));
                }
            }
        }
        areas[0]["name"] = json!(long(MAX_NAME_CHARS));
        areas[0]["description"] = json!(long(MAX_TEXT_CHARS));
        areas[0]["tags"] = json!(vec![long(MAX_TAG_CHARS); MAX_TAGS]);
        let item = |i: usize| json!({"slug": id("item", i), "name": "I", "quantity": MAX_STACK});
        let stats: serde_json::Map<String, Value> = (0..MAX_STATS_PER_CHARACTER)
            .map(|i| (id("stat", i), json!(MAX_STAT_VALUE)))
            .collect();
        let characters: Vec<Value> = (0..MAX_CAMPAIGN_CHARACTERS)
            .map(|i| {
                json!({
                    "character_id": id("char", i), "name": "C",
                    "kind": if i == 0 { "pc" } else { "npc" },
                    "area_id": "area_0000", "hp": MAX_HP, "max_hp": MAX_HP, "level": MAX_LEVEL,
                    "stats": stats,
                    "inventory": (0..MAX_INVENTORY_ITEMS).map(item).collect::<Vec<_>>(),
                })
            })
            .collect();
        let version = |v: usize| json!({"version": v, "persona": "P"});
        let mut npcs: Vec<Value> = (0..MAX_CAMPAIGN_NPCS)
            .map(|i| json!({"npc_id": id("npc", i), "name": "N", "active_version": 1, "versions": [version(1)]}))
            .collect();
        npcs[0]["versions"] = json!((1..=MAX_NPC_VERSIONS).map(version).collect::<Vec<_>>());
        npcs[0]["versions"][0]["persona"] = json!(long(MAX_TEXT_CHARS));
        let content: Vec<Value> = (0..MAX_CAMPAIGN_CONTENT)
            .map(|i| json!({"content_id": id("c", i), "content_type": "note", "title": "T", "body": "B"}))
            .collect();
        let known = &*TOOLS;
        json!({
            "campaign_id": "a".repeat(MAX_ID_CHARS),
            "title": long(MAX_NAME_CHARS),
            "description": long(MAX_TEXT_CHARS),
            "allowlist": (0..MAX_ALLOWLIST).map(|i| known[i % known.len()]).collect::<Vec<_>>(),
            "active_actor_id": "char_0000",
            "lore": vec!["L."; MAX_CAMPAIGN_LORE],
            "areas": areas,
            "characters": characters,
            "npcs": npcs,
            "content": content,
        })
    }

    #[test]
    fn a_campaign_at_every_limit_is_accepted_and_one_past_any_is_not() {
        let v = at_the_limits();
        let state = Campaign::from_value(&v, &TOOLS)
            .unwrap_or_else(|e| panic!("{}", e.problems.join("\n")))
            .into_state();
        assert_eq!(state.areas.len(), MAX_CAMPAIGN_AREAS);
        assert!(
            state
                .areas
                .iter()
                .all(|a| a.reachable_area_ids.len() == MAX_LINKS_PER_AREA),
            "two-way links stay within the cap"
        );
        // One past each limit, each alone, and the path that says which.
        type Change = Box<dyn Fn(&mut Value)>;
        let past: Vec<(&str, Change)> = vec![
            ("/areas", Box::new(|v| push_copy(&mut v["areas"]))),
            (
                "/areas/0/reachable_area_ids",
                Box::new(|v| push_copy(&mut v["areas"][0]["reachable_area_ids"])),
            ),
            (
                "/areas/0/name",
                Box::new(|v| v["areas"][0]["name"] = json!("x".repeat(MAX_NAME_CHARS + 1))),
            ),
            (
                "/areas/0/description",
                Box::new(|v| v["areas"][0]["description"] = json!("x".repeat(MAX_TEXT_CHARS + 1))),
            ),
            (
                "/areas/0/tags",
                Box::new(|v| push_copy(&mut v["areas"][0]["tags"])),
            ),
            (
                "/areas/0/tags/0",
                Box::new(|v| v["areas"][0]["tags"][0] = json!("x".repeat(MAX_TAG_CHARS + 1))),
            ),
            (
                "/areas/0/x",
                Box::new(|v| v["areas"][0]["x"] = json!(MAX_COORD + 1)),
            ),
            (
                "/areas/0/y",
                Box::new(|v| v["areas"][0]["y"] = json!(i64::MIN)),
            ),
            (
                "/areas/1/area_id",
                Box::new(|v| v["areas"][1]["area_id"] = json!("a".repeat(MAX_ID_CHARS + 1))),
            ),
            ("/characters", Box::new(|v| push_copy(&mut v["characters"]))),
            (
                "/characters/0/hp",
                Box::new(|v| v["characters"][0]["hp"] = json!(MAX_HP + 1)),
            ),
            (
                "/characters/0/max_hp",
                Box::new(|v| v["characters"][0]["max_hp"] = json!(i64::MAX)),
            ),
            (
                "/characters/0/level",
                Box::new(|v| v["characters"][0]["level"] = json!(MAX_LEVEL + 1)),
            ),
            (
                "/characters/0/stats",
                Box::new(|v| v["characters"][0]["stats"]["one_more"] = json!(1)),
            ),
            (
                "/characters/0/stats/stat_0000",
                Box::new(|v| v["characters"][0]["stats"]["stat_0000"] = json!(MAX_STAT_VALUE + 1)),
            ),
            (
                "/characters/0/inventory",
                Box::new(|v| push_copy(&mut v["characters"][0]["inventory"])),
            ),
            (
                "/characters/0/inventory/0/quantity",
                Box::new(|v| v["characters"][0]["inventory"][0]["quantity"] = json!(u64::MAX)),
            ),
            ("/npcs", Box::new(|v| push_copy(&mut v["npcs"]))),
            (
                "/npcs/0/versions",
                Box::new(|v| push_copy(&mut v["npcs"][0]["versions"])),
            ),
            (
                "/npcs/0/versions/0/persona",
                Box::new(|v| {
                    v["npcs"][0]["versions"][0]["persona"] = json!("x".repeat(MAX_TEXT_CHARS + 1))
                }),
            ),
            ("/content", Box::new(|v| push_copy(&mut v["content"]))),
            ("/lore", Box::new(|v| push_copy(&mut v["lore"]))),
            ("/allowlist", Box::new(|v| push_copy(&mut v["allowlist"]))),
            (
                "/title",
                Box::new(|v| v["title"] = json!("x".repeat(MAX_NAME_CHARS + 1))),
            ),
            (
                "/description",
                Box::new(|v| v["description"] = json!("x".repeat(MAX_TEXT_CHARS + 1))),
            ),
        ];
        for (path, change) in past {
            let mut over = v.clone();
            change(&mut over);
            let all = refused(&over);
            assert!(all.starts_with(&format!("{path}: ")), "{path}: {all}");
        }
    }

    /// Appends a copy of a list's first element, making it one longer.
    fn push_copy(list: &mut Value) {
        let list = list.as_array_mut().expect("a list");
        list.push(list[0].clone());
    }

    #[test]
    fn problems_past_the_listed_ones_are_counted() {
        let mut v = tiny();
        let lost: Vec<Value> = (0..120)
            .map(|i| json!({"character_id": format!("npc_{i}"), "name": "N", "kind": "npc", "area_id": "nowhere", "hp": 1, "max_hp": 1}))
            .collect();
        v["characters"].as_array_mut().unwrap().extend(lost);
        let err = Campaign::from_value(&v, &TOOLS).unwrap_err();
        assert_eq!(err.problems.len(), MAX_PROBLEMS_LISTED + 1);
        assert_eq!(
            err.problems.last().map(String::as_str),
            Some("and 70 more problems")
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Numbers a careless or hostile campaign might hold.
        fn number() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(json!(i64::MIN)),
                Just(json!(i64::MAX)),
                Just(json!(u64::MAX)),
                Just(json!(0)),
                Just(json!(-1)),
                Just(json!(1.5)),
                any::<i64>().prop_map(|n| json!(n)),
                (-20i64..20).prop_map(|n| json!(n)),
            ]
        }

        /// Ids from a small pool (so links often resolve and often repeat),
        /// or anything at all.
        fn id() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => (0..6u8).prop_map(|i| format!("a{i}")),
                1 => ".{0,80}",
            ]
        }

        fn area() -> impl Strategy<Value = Value> {
            (
                id(),
                ".{0,12}",
                prop::collection::vec(id(), 0..80),
                number(),
                number(),
            )
                .prop_map(|(area_id, name, links, x, y)| {
                    json!({"area_id": area_id, "name": name, "reachable_area_ids": links, "x": x, "y": y})
                })
        }

        fn character() -> impl Strategy<Value = Value> {
            (id(), prop::bool::ANY, id(), number(), number(), number()).prop_map(
                |(character_id, pc, area_id, hp, max_hp, qty)| {
                    json!({
                        "character_id": character_id, "name": "C",
                        "kind": if pc { "pc" } else { "npc" }, "area_id": area_id,
                        "hp": hp, "max_hp": max_hp,
                        "inventory": [{"slug": "s", "name": "S", "quantity": qty}],
                    })
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn validation_never_panics_and_accepted_maps_keep_their_bounds(
                areas in prop::collection::vec(area(), 0..8),
                characters in prop::collection::vec(character(), 0..4),
                actor in id(),
                allow in prop::collection::vec(".{0,10}", 0..3),
            ) {
                let v = json!({
                    "campaign_id": "p", "title": "P", "allowlist": allow,
                    "active_actor_id": actor, "areas": areas, "characters": characters,
                });
                match Campaign::from_value(&v, &TOOLS) {
                    Ok(c) => {
                        let state = c.into_state();
                        for a in state.areas.iter() {
                            prop_assert!(a.reachable_area_ids.len() <= MAX_LINKS_PER_AREA);
                            for r in &a.reachable_area_ids {
                                let back = state.area(r.as_str()).expect("links resolve");
                                prop_assert!(back.reachable_area_ids.contains(&a.area_id));
                            }
                        }
                        for c in &state.characters {
                            prop_assert!((0..=c.max_hp).contains(&c.hp) && c.max_hp <= MAX_HP);
                        }
                    }
                    Err(e) => {
                        prop_assert!(!e.problems.is_empty());
                        prop_assert!(e.problems.len() <= MAX_PROBLEMS_LISTED + 1);
                    }
                }
            }
        }
    }
}
