//! The offline game master's small adventure: looking around, talking to
//! the people here, taking and using things, and fighting.
//!
//! The game master keeps nothing between answers: each answer reads the
//! player's message and the results of the tools it asked for earlier in
//! the same turn, and either asks for the next tools or narrates. A turn
//! goes in rounds:
//!
//! 1. the survey: the actor's sheet (`get_character_stats`), who stands
//!    where (`get_site_map`), the campaign's items and quests
//!    (`search_content` of type `item` and `quest`), their Chinese names
//!    when the player writes Chinese (type `name_zh`), the other names
//!    things go by when the player names one (type `alias`), the quests
//!    already done for `look` and `use` (type `quest_done`), and for `look`
//!    the ways on (`move_options`);
//! 2. the sheets of the characters here (`get_character_stats`, at most
//!    [`MAX_PEOPLE_LOOKED_AT`]), to know who is still standing;
//! 3. the act itself (`get_npc_profile` with, in English, the `line`
//!    listing; `add_inventory`,
//!    `update_inventory` and, finishing a quest, `create_draft_content`,
//!    `roll_dice` then `hp_delta`), then the narration.
//!
//! Campaign conventions it reads (docs/protocol.md §9.3):
//! - an item lying in an area is a published content entry of type `item`
//!   with that `area_id`; its title is the item's name, its body the
//!   description, and its `content_id` is `item_<slug>`;
//! - a quest (type `quest`) with an item's slug among its tags is finished
//!   by using that item in the quest's place (its `area_id`, or an area id
//!   among its tags) while no one else stands there;
//! - what a person says when talked to, in the first person after their
//!   profile's greeting, is a draft entry of type `line` whose
//!   `content_id` is `line_<character id>` (its Chinese: the `name_zh`
//!   entry `zh_line_<character id>`); the demo's Old Maren says there
//!   where the oil her quest needs lies;
//! - a Chinese name is a draft entry of type `name_zh` (a draft, so that
//!   players' searches do not return it) whose `content_id` is
//!   `zh_<id>` (an area, character or `item_<slug>` id): its title is the
//!   name, its body the description (for a person, what they say first);
//! - the other names a thing goes by are its tags, when it is an item, and
//!   the tags of a draft entry of type `alias` whose `content_id` is
//!   `alias_<id>` (a draft, so that they change no player's search: the
//!   demo's lamp is also called a "lantern" and "灯笼" this way);
//! - a finished quest is a draft entry of type `quest_done` whose title is
//!   the quest's `content_id`, written with `create_draft_content` when the
//!   quest ends: it lasts with the session, and a quest that has one is not
//!   finished again;
//! - an item taken from its area is a draft entry of type `item_taken`
//!   whose title is the item's `content_id`, written once the
//!   `add_inventory` call that takes it has succeeded: the item is no
//!   longer there (for anyone), even after it is used up;
//! - a place the world has changed has a draft entry of type `area_state`
//!   whose title is the area id (tagged `zh` for its Chinese): `look` there
//!   tells its body instead of the campaign's description. The demo's tide
//!   writes one: taking the sealed oil in the Drowned Market schedules
//!   `tide_floods_market` (`timed.rs`), and its world turn floods the market.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::timed::{self, AREA_STATE_TYPE};
use super::voice::{self, inside};
use super::words::{calls, cut_at_boundary, names, without_article};

/// What the player does in the adventure.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Act {
    Look,
    TalkTo(String),
    Take(String),
    Use(String),
    Attack(String),
}

/// The next step of a turn: more tool calls, or the narration that ends it.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    Calls(Vec<(&'static str, Value)>),
    Say(String, &'static str),
}

/// Content type of items lying in areas.
pub(super) const ITEM_TYPE: &str = "item";
/// Content type of Chinese names.
pub(super) use crate::game::state::NAME_ZH_TYPE;
/// Content type of the other names things go by.
const ALIAS_TYPE: &str = "alias";
/// Content type of the record of a finished quest.
const QUEST_DONE_TYPE: &str = "quest_done";
/// Content type of the record of an item taken from its area.
const ITEM_TAKEN_TYPE: &str = "item_taken";
/// Content type of what a person says, in the first person.
const LINE_TYPE: &str = "line";
/// Content types that are drafts, so that no player's search returns them.
const DRAFT_TYPES: [&str; 6] = [
    NAME_ZH_TYPE,
    ALIAS_TYPE,
    QUEST_DONE_TYPE,
    ITEM_TAKEN_TYPE,
    LINE_TYPE,
    AREA_STATE_TYPE,
];
const QUEST_TYPE: &str = "quest";
/// Most characters standing here whose sheets one turn reads.
pub(super) const MAX_PEOPLE_LOOKED_AT: usize = 4;
/// A d20 attack roll of at least this hits.
pub(super) const HERO_HITS_ON: i64 = 6;
/// A foe's d20 roll of at least this hits back.
pub(super) const FOE_HITS_ON: i64 = 16;
/// Damage of the hero's blow: this plus twice their level; doubled on a 20.
pub(super) const HERO_DAMAGE_BASE: i64 = 4;
/// HP a potion gives back.
pub(super) const POTION_HEALS: i64 = 6;

/// The call that lists one type of content in full (at most 50 entries).
/// Chinese names, aliases and finished quests are drafts: the players' own
/// searches, of published content, never return them.
pub(super) fn listing(content_type: &str) -> (&'static str, Value) {
    let status = if DRAFT_TYPES.contains(&content_type) {
        "draft"
    } else {
        "published"
    };
    (
        "search_content",
        json!({"query": "", "content_type": content_type, "status": status, "limit": 50}),
    )
}

/// Whether a `search_content` result answers one of [`listing`]'s calls
/// (a player's own search always has words).
pub(super) fn is_listing(tool: &str, result: &Value) -> bool {
    tool == "search_content" && result["query"] == ""
}

/// Chinese names from the turn's `name_zh` listing: id → (name, description).
pub(super) fn zh_names(results: &[(&str, &Value)]) -> HashMap<String, (String, String)> {
    listed(results, NAME_ZH_TYPE)
        .filter_map(|e| {
            let id = e["id"].as_str()?.strip_prefix("zh_")?;
            Some((id.to_owned(), (str_of(&e["title"]), str_of(&e["body"]))))
        })
        .collect()
}

/// Whether this turn already listed the Chinese names (found or not).
pub(super) fn zh_listed(results: &[(&str, &Value)]) -> bool {
    results.iter().any(|(t, r)| is_listing(t, r))
}

fn listed<'a>(
    results: &'a [(&str, &'a Value)],
    content_type: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    results
        .iter()
        .filter(|(t, r)| is_listing(t, r))
        .flat_map(|(_, r)| r["items"].as_array().into_iter().flatten())
        .filter(move |e| e["content_type"] == content_type)
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Everything the turn has learnt so far.
struct Facts<'a> {
    zh: bool,
    /// The turn's number: which phrasing is said ([`voice`]).
    turn: u64,
    actor_id: &'a str,
    actor: Option<&'a Value>,
    here: String,
    /// (character id, name) of the others standing in this area.
    people: Vec<(String, String)>,
    /// Sheets of others read this turn, by id.
    sheets: HashMap<String, &'a Value>,
    items_here: Vec<&'a Value>,
    quests: Vec<&'a Value>,
    /// Ids of the quests already done.
    done: Vec<String>,
    zh_names: HashMap<String, (String, String)>,
    /// The other names of things, by id.
    aliases: HashMap<String, Vec<String>>,
    /// What people say (English), by character id.
    lines: HashMap<String, String>,
    /// The map's areas' (English) names by id: the context's, and the
    /// site map's, which names the areas the context leaves out.
    areas: HashMap<String, String>,
    exits: Option<&'a Value>,
    profile: Option<&'a Value>,
    rolls: Vec<&'a Value>,
    hp: Vec<&'a Value>,
    inventory_change: Option<&'a Value>,
    /// The record of a quest finished this turn.
    recorded: Option<&'a Value>,
    /// The timer a take scheduled this turn (its result).
    scheduled: Option<&'a Value>,
    /// Places as the world changed them: (area id, Chinese?) → description.
    area_states: HashMap<(String, bool), String>,
    surveyed: bool,
}

impl<'a> Facts<'a> {
    fn read(
        results: &'a [(&'a str, &'a Value)],
        context: &Value,
        actor_id: &'a str,
        zh: bool,
    ) -> Self {
        fn of<'r>(
            results: &'r [(&'r str, &'r Value)],
            tool: &'r str,
        ) -> impl Iterator<Item = &'r Value> {
            results
                .iter()
                .filter(move |(t, _)| *t == tool)
                .map(|(_, r)| *r)
        }
        let actor = of(results, "get_character_stats").find(|r| r["character_id"] == actor_id);
        let here = actor.map(|a| str_of(&a["area_id"])).unwrap_or_default();
        let site = of(results, "get_site_map").next();
        let people = site
            .and_then(|s| s["pois"].as_array())
            .into_iter()
            .flatten()
            .filter(|p| p["kind"] == "npc" && p["area_id"] == here.as_str() && p["id"] != actor_id)
            .map(|p| (str_of(&p["id"]), str_of(&p["name"])))
            .collect();
        let sheets = of(results, "get_character_stats")
            .filter(|r| r["character_id"] != actor_id)
            .map(|r| (str_of(&r["character_id"]), r))
            .collect();
        let mut aliases: HashMap<String, Vec<String>> = HashMap::new();
        let tags = |e: &Value| -> Vec<String> {
            e["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(str_of)
                .collect()
        };
        for e in listed(results, ITEM_TYPE) {
            aliases.entry(str_of(&e["id"])).or_default().extend(tags(e));
        }
        for e in listed(results, ALIAS_TYPE) {
            if let Some(id) = e["id"].as_str().and_then(|id| id.strip_prefix("alias_")) {
                aliases.entry(id.to_owned()).or_default().extend(tags(e));
            }
        }
        let areas = [
            site.map_or(&Value::Null, |s| &s["areas"]),
            &context["areas"],
        ]
        .into_iter()
        .filter_map(|list| list.as_array())
        .flatten()
        .map(|a| (str_of(&a["area_id"]), str_of(&a["name"])))
        .collect();
        let lines = listed(results, LINE_TYPE)
            .filter_map(|e| {
                let id = e["id"].as_str()?.strip_prefix("line_")?;
                Some((id.to_owned(), str_of(&e["body"])))
            })
            .collect();
        Facts {
            zh,
            turn: context["turn"].as_u64().unwrap_or_default(),
            lines,
            areas,
            actor_id,
            actor,
            items_here: {
                let taken: Vec<&Value> = listed(results, ITEM_TAKEN_TYPE)
                    .map(|e| &e["title"])
                    .collect();
                listed(results, ITEM_TYPE)
                    .filter(|e| e["area_id"] == here.as_str() && !taken.contains(&&e["id"]))
                    .collect()
            },
            here,
            people,
            sheets,
            quests: listed(results, QUEST_TYPE).collect(),
            done: listed(results, QUEST_DONE_TYPE)
                .map(|e| str_of(&e["title"]))
                .collect(),
            zh_names: zh_names(results),
            aliases,
            exits: of(results, "move_options").next(),
            profile: of(results, "get_npc_profile").next(),
            rolls: of(results, "roll_dice").collect(),
            hp: of(results, "hp_delta").collect(),
            inventory_change: of(results, "add_inventory")
                .chain(of(results, "update_inventory"))
                .next(),
            recorded: of(results, "create_draft_content").next(),
            scheduled: of(results, "schedule_event").next(),
            area_states: listed(results, AREA_STATE_TYPE)
                .map(|e| {
                    let zh = e["tags"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t == "zh"));
                    ((str_of(&e["title"]), zh), str_of(&e["body"]))
                })
                .collect(),
            surveyed: site.is_some(),
        }
    }

    /// A thing's name in the player's language.
    fn name(&self, id: &str, english: &str) -> String {
        match self.zh_names.get(id) {
            Some((zh, _)) if self.zh && !zh.is_empty() => zh.clone(),
            _ => english.to_owned(),
        }
    }

    fn actor_name(&self) -> String {
        let english = self.actor.map(|a| str_of(&a["name"])).unwrap_or_default();
        self.name(self.actor_id, &english)
    }

    fn actor_downed(&self) -> bool {
        self.actor
            .is_some_and(|a| a["state"] == "downed" || a["hp"] == 0)
    }

    fn standing(&self, id: &str) -> bool {
        self.sheets
            .get(id)
            .is_none_or(|s| s["state"] != "downed" && s["hp"] != 0)
    }

    /// Whether the player's words name the thing `id` called `english`: by
    /// its name's words or its other names, its Chinese name (when the
    /// player writes Chinese), or its id (an item's slug).
    fn called(&self, wanted: &str, id: &str, english: &str) -> bool {
        let aliases = self.aliases.get(id).map_or(&[][..], Vec::as_slice);
        calls(wanted, english, aliases)
            || names(wanted, &self.name(id, ""))
            || names(wanted, id.strip_prefix("item_").unwrap_or(id))
    }

    /// The person here the player's words name.
    /// Whether the campaign has the line `line_<key>` in the player's
    /// language.
    fn has_line(&self, key: &str) -> bool {
        if self.zh {
            self.zh_names.contains_key(&format!("line_{key}"))
        } else {
            self.lines.contains_key(key)
        }
    }

    fn person(&self, wanted: &str) -> Option<&(String, String)> {
        self.people
            .iter()
            .find(|(id, name)| self.called(wanted, id, name))
    }

    /// The item lying here the player's words name.
    fn item_here(&self, wanted: &str) -> Option<&'a Value> {
        self.items_here
            .iter()
            .copied()
            .find(|e| self.called(wanted, &str_of(&e["id"]), &str_of(&e["title"])))
    }

    /// The item carried that the player's words name.
    fn carried(&self, wanted: &str) -> Option<&'a Value> {
        self.actor?["inventory"].as_array()?.iter().find(|i| {
            let id = format!("item_{}", str_of(&i["slug"]));
            self.called(wanted, &id, &str_of(&i["name"]))
        })
    }

    /// A quest's title in the player's language.
    fn quest_title(&self, id: &str) -> String {
        let english = self
            .quests
            .iter()
            .find(|q| q["id"] == id)
            .map_or_else(|| id.to_owned(), |q| str_of(&q["title"]));
        self.name(id, &english)
    }

    /// The quests done, each once, in the player's language.
    fn done_titles(&self) -> Vec<String> {
        let mut ids: Vec<&String> = Vec::new();
        for id in &self.done {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids.into_iter().map(|id| self.quest_title(id)).collect()
    }

    fn carries(&self, slug: &str) -> bool {
        self.actor
            .and_then(|a| a["inventory"].as_array())
            .is_some_and(|inv| inv.iter().any(|i| i["slug"] == slug))
    }

    fn item_name(&self, slug: &str, english: &str) -> String {
        self.name(&format!("item_{slug}"), english)
    }

    /// What can be seen here: the people (and who is down) and the items.
    fn who_and_what(&self) -> String {
        let zh = self.zh;
        let people: Vec<String> = self
            .people
            .iter()
            .map(|(id, name)| {
                let name = self.name(id, name);
                match (self.standing(id), zh) {
                    (true, _) => name,
                    (false, true) => format!("{name}（倒地不起）"),
                    (false, false) => format!("{name} (down)"),
                }
            })
            .collect();
        let items: Vec<String> = self
            .items_here
            .iter()
            .filter(|e| !self.carries(&slug_of(e)))
            .map(|e| self.item_name(&slug_of(e), &str_of(&e["title"])))
            .collect();
        let mut out = String::new();
        match (people.is_empty(), zh) {
            (true, true) => out.push_str("这里没有别人。"),
            (true, false) => out.push_str("No one else is here."),
            (false, true) => out.push_str(&format!("这里有：{}。", people.join("、"))),
            (false, false) => out.push_str(&format!("Here: {}.", people.join(", "))),
        }
        if !items.is_empty() {
            out.push_str(&if zh {
                format!("你看见：{}。", items.join("、"))
            } else {
                format!(" You see: {}.", items.join(", "))
            });
        }
        out
    }
}

/// An item entry's slug: its content id without `item_`.
fn slug_of(entry: &Value) -> String {
    let id = str_of(&entry["id"]);
    id.strip_prefix("item_").unwrap_or(&id).to_owned()
}

/// The next step of `act` for `actor_id`, from this turn's results.
pub(super) fn next(
    act: &Act,
    context: &Value,
    results: &[(&str, &Value)],
    actor_id: &str,
    zh: bool,
) -> Next {
    let facts = Facts::read(results, context, actor_id, zh);
    if !facts.surveyed {
        let mut calls = vec![
            ("get_character_stats", json!({"character_id": actor_id})),
            ("get_site_map", json!({})),
            listing(ITEM_TYPE),
            listing(ITEM_TAKEN_TYPE),
            listing(QUEST_TYPE),
        ];
        if zh {
            calls.push(listing(NAME_ZH_TYPE));
        }
        if *act != Act::Look {
            calls.push(listing(ALIAS_TYPE));
        }
        if matches!(act, Act::Look | Act::Use(_) | Act::TalkTo(_)) {
            calls.push(listing(QUEST_DONE_TYPE));
        }
        if *act == Act::Look {
            calls.push(listing(AREA_STATE_TYPE));
            calls.push(("move_options", json!({"actor_id": actor_id})));
        }
        return Next::Calls(calls);
    }
    let unread: Vec<(&'static str, Value)> = facts
        .people
        .iter()
        .take(MAX_PEOPLE_LOOKED_AT)
        .filter(|(id, _)| !facts.sheets.contains_key(id))
        .map(|(id, _)| ("get_character_stats", json!({"character_id": id})))
        .collect();
    // Sheets are read in one round: none read yet means this is that round.
    if facts.sheets.is_empty() && !unread.is_empty() {
        return Next::Calls(unread);
    }
    match act {
        Act::Look => look(&facts, context),
        Act::TalkTo(who) => talk_to(&facts, who),
        Act::Take(what) => take(&facts, what),
        Act::Use(what) => use_item(&facts, what, context),
        Act::Attack(whom) => attack(&facts, whom),
    }
}

fn say(text: String) -> Next {
    Next::Say(text, "narration")
}

fn look(f: &Facts<'_>, context: &Value) -> Next {
    let here = &context["current_area"];
    let (name, mut description) = match f.zh_names.get(&f.here) {
        Some((name, desc)) if f.zh => (name.clone(), desc.clone()),
        _ => (str_of(&here["name"]), str_of(&here["description"])),
    };
    if let Some(changed) = f.area_states.get(&(f.here.clone(), f.zh)) {
        // The world changed this place (a flood, a fire): as it is now.
        description.clone_from(changed);
    }
    let exits: Vec<String> = f
        .exits
        .and_then(|e| e["options"].as_array())
        .into_iter()
        .flatten()
        .map(|o| voice::place(&f.name(&str_of(&o["area_id"]), &str_of(&o["name"])), f.zh))
        .collect();
    let ways = match (exits.is_empty(), f.zh) {
        (true, true) => "从这里无路可走。".to_owned(),
        (true, false) => "There is no way on from here.".to_owned(),
        (false, true) => format!("从这里可以前往{}。", voice::list(&exits, true)),
        (false, false) => format!("From here you can go to {}.", voice::list(&exits, false)),
    };
    let mut text = if f.zh {
        format!("{name}。{description}{}{ways}", f.who_and_what())
    } else {
        format!("{name}. {description} {} {ways}", f.who_and_what())
    };
    text.push_str(&party_line(f, context));
    let done = f.done_titles();
    if !done.is_empty() {
        text.push_str(&if f.zh {
            format!("已完成的任务：{}。", quoted(&done, true).join("、"))
        } else {
            format!(" Quests done: {}.", quoted(&done, false).join(", "))
        });
    }
    Next::Say(text, "scene_description")
}

/// Who the party is and where each stands, from the context's `party`
/// (a session with more than one seat); empty for a lone player.
fn party_line(f: &Facts<'_>, context: &Value) -> String {
    let Some(party) = context["party"].as_array().filter(|p| !p.is_empty()) else {
        return String::new();
    };
    let members: Vec<String> = party
        .iter()
        .map(|p| {
            let name = str_of(&p["name"]);
            let area = str_of(&p["area_id"]);
            let english = f.areas.get(&area).cloned().unwrap_or_else(|| area.clone());
            let place = f.name(&area, &english);
            match (area == f.here, f.zh) {
                (true, true) => format!("{name}（在这里）"),
                (true, false) => format!("{name} (here)"),
                (false, true) => format!("{name}（在{place}）"),
                (false, false) => format!("{name} (at {place})"),
            }
        })
        .collect();
    if f.zh {
        format!("队伍：{}。", members.join("、"))
    } else {
        format!(" The party: {}.", members.join(", "))
    }
}

/// Titles in quotation marks of the language.
fn quoted(titles: &[String], zh: bool) -> Vec<String> {
    titles
        .iter()
        .map(|t| {
            if zh {
                format!("“{t}”")
            } else {
                format!("\"{t}\"")
            }
        })
        .collect()
}

/// "No X here", with what is here instead.
fn not_here(f: &Facts<'_>, wanted: &str) -> Next {
    say(if f.zh {
        format!("这里没有“{wanted}”。{}", f.who_and_what())
    } else {
        format!(
            "There is no \"{}\" here. {}",
            without_article(wanted),
            f.who_and_what()
        )
    })
}

fn talk_to(f: &Facts<'_>, who: &str) -> Next {
    let Some((id, english)) = f.person(who) else {
        return not_here(f, who);
    };
    let name = f.name(id, english);
    if !f.standing(id) {
        return say(if f.zh {
            format!("{name}倒在地上，一言不发。")
        } else {
            format!("{name} lies still and says nothing.")
        });
    }
    let Some(profile) = f.profile else {
        let mut calls = vec![("get_npc_profile", json!({"npc_id": id}))];
        if !f.zh {
            // The Chinese lines come with the Chinese names, read already.
            calls.push(listing(LINE_TYPE));
        }
        return Next::Calls(calls);
    };
    // They speak in the first person: their greeting (the profile's first
    // template; in Chinese, the body of their `name_zh` entry, which
    // translates it) and what the campaign has them say (a `line` entry,
    // or its Chinese), which carries their quest's hint. Their persona and
    // background describe them to a game master; they are never quoted.
    let greeting = profile["greeting_templates"][0]
        .as_str()
        .unwrap_or_default();
    // The quest they give, and whether it is done: then they say their
    // line for afterwards (`line_<id>_done`), where the campaign has one.
    let quest = f.quests.iter().find(|q| {
        let body = q["body"].as_str().unwrap_or_default();
        !english.is_empty() && body.contains(english.as_str())
    });
    let quest_done = quest.is_some_and(|q| f.done.contains(&str_of(&q["id"])));
    let after = format!("{id}_done");
    let line_id = if quest_done && f.has_line(&after) {
        after.as_str()
    } else {
        id
    };
    let (greeting, line) = if f.zh {
        let said = |key: &str| {
            f.zh_names
                .get(key)
                .map(|(_, body)| body.clone())
                .unwrap_or_default()
        };
        let greeting = if greeting.is_empty() {
            String::new()
        } else {
            said(id)
        };
        (greeting, said(&format!("line_{line_id}")))
    } else {
        (
            greeting.to_owned(),
            f.lines.get(line_id).cloned().unwrap_or_default(),
        )
    };
    let joined: Vec<&str> = [greeting.trim(), line.trim()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    let speech = match (joined.is_empty(), f.zh) {
        (true, true) => "……".to_owned(),
        (true, false) => "…".to_owned(),
        (false, true) => joined.concat(),
        (false, false) => joined.join(" "),
    };
    let mut text = voice::say(
        voice::SPEECH,
        f.turn,
        f.zh,
        &[("name", &name), ("speech", &speech)],
    );
    if let Some(q) = quest {
        let title = f.name(&str_of(&q["id"]), &str_of(&q["title"]));
        text.push_str(&match (quest_done, f.zh) {
            (false, true) => format!("（任务：“{title}”）"),
            (false, false) => format!(" (Quest: \"{title}\")"),
            (true, true) => format!("（任务已完成：“{title}”）"),
            (true, false) => format!(" (Quest done: \"{title}\")"),
        });
    }
    Next::Say(text, "dialogue")
}

fn take(f: &Facts<'_>, what: &str) -> Next {
    if f.actor_downed() {
        return downed(f);
    }
    let Some(entry) = f.item_here(what) else {
        if let Some(item) = f.carried(what) {
            return already_carried(
                f,
                &f.item_name(&str_of(&item["slug"]), &str_of(&item["name"])),
            );
        }
        return not_here(f, what);
    };
    let slug = slug_of(entry);
    let name = f.item_name(&slug, &str_of(&entry["title"]));
    let timed = timed::timed_take(&slug, &f.here);
    if f.inventory_change.is_some() && f.recorded.is_none() {
        // Taken, the item leaves its area for good, and what the campaign
        // times from it starts (the tide), under its key, so it is never
        // scheduled twice. Asked only once the taking ran: a person may
        // stay it (an approval), and then the item stays where it was.
        let record = (
            "create_draft_content",
            json!({
                "content_type": ITEM_TAKEN_TYPE,
                "title": str_of(&entry["id"]),
                "body": format!(
                    "{} took the {} from {}.",
                    f.actor.map(|a| str_of(&a["name"])).unwrap_or_default(),
                    str_of(&entry["title"]),
                    f.here
                ),
                "area_id": f.here,
            }),
        );
        let mut calls = vec![record];
        calls.extend(timed.map(|t| t.call(f.zh)));
        return Next::Calls(calls);
    }
    if f.inventory_change.is_some() {
        // Only what changed: the whole pack is the sheet's to show.
        let mut text = voice::say(voice::TAKES, f.turn, f.zh, &[("item", &name)]);
        if let Some(timed) = timed
            && f.scheduled.is_some_and(|r| r["timer_id"].is_string())
        {
            let (en, zh) = timed.warning;
            if f.zh {
                text.push_str(zh);
            } else {
                text.push(' ');
                text.push_str(en);
            }
        }
        return say(text);
    }
    if f.carries(&slug) {
        return already_carried(f, &name);
    }
    let description = cut_at_boundary(entry["body"].as_str().unwrap_or_default(), 300);
    Next::Calls(vec![(
        "add_inventory",
        json!({
            "character_id": f.actor_id,
            "items": [{"name": str_of(&entry["title"]), "slug": slug, "description": description, "quantity": 1}]
        }),
    )])
}

fn already_carried(f: &Facts<'_>, name: &str) -> Next {
    say(if f.zh {
        format!("你已经带着{name}了。")
    } else {
        format!("You already carry the {name}.")
    })
}

fn downed(f: &Facts<'_>) -> Next {
    say(if f.zh {
        format!(
            "{}倒下了，无法行动。用一瓶治疗药水（“使用 治疗药水”）才能重新站起来。",
            f.actor_name()
        )
    } else {
        format!(
            "{} is down and cannot act. Only a healing potion (\"use healing potion\") brings them back up.",
            f.actor_name()
        )
    })
}

fn use_item(f: &Facts<'_>, what: &str, context: &Value) -> Next {
    let Some(item) = f.carried(what) else {
        return say(if f.zh {
            format!("你身上没有“{what}”。")
        } else {
            format!("You carry no \"{}\".", without_article(what))
        });
    };
    let slug = str_of(&item["slug"]);
    let name = f.item_name(&slug, &str_of(&item["name"]));
    let use_one = (
        "update_inventory",
        json!({"character_id": f.actor_id, "updates": [{"slug": slug, "quantity_change": -1}]}),
    );
    if slug.ends_with("_potion") {
        if let Some(healed) = f.hp.first() {
            let (before, hp, max) = (&healed["hp_before"], &healed["hp"], &healed["max_hp"]);
            return say(if f.zh {
                format!("你喝下{name}，生命值 {before} → {hp}/{max}。")
            } else {
                format!("You drink the {name}: HP {before} → {hp}/{max}.")
            });
        }
        return Next::Calls(vec![
            use_one,
            (
                "hp_delta",
                json!({"target_character_id": f.actor_id, "delta": POTION_HEALS, "cause": name}),
            ),
        ]);
    }
    if f.actor_downed() {
        return downed(f);
    }
    let quest = f.quests.iter().find(|q| {
        q["tags"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| *t == *slug))
    });
    let Some(quest) = quest else {
        return say(if f.zh {
            format!("你拿出{name}摆弄了一会儿，这里没有什么用得上它。")
        } else {
            format!("You turn the {name} over in your hands; nothing here calls for it.")
        });
    };
    let quest_id = str_of(&quest["id"]);
    let title = f.name(&quest_id, &str_of(&quest["title"]));
    if f.done.contains(&quest_id) && f.recorded.is_none() {
        return say(if f.zh {
            format!("任务“{title}”已经完成了，不必再用{name}。")
        } else {
            format!("\"{title}\" is already done; the {name} is not needed for it any more.")
        });
    }
    let quest_area = quest_place(quest, &f.here, &f.areas);
    if quest_area != f.here {
        let english = f.areas.get(&quest_area).cloned().unwrap_or_default();
        let place = match f.name(&quest_area, &english) {
            // Never an id: a place without a name is "its place".
            place if place.is_empty() && f.zh => "它该去的地方".to_owned(),
            place if place.is_empty() => "its place".to_owned(),
            place => voice::place(&place, f.zh),
        };
        return say(if f.zh {
            format!("{name}不是在这里用的：任务“{title}”要你把它带到{place}。")
        } else {
            format!("This is not the place for the {name}: \"{title}\" wants it at {place}.")
        });
    }
    if let Some((id, guard)) = f.people.iter().find(|(id, _)| f.standing(id)) {
        let guard = f.name(id, guard);
        return say(if f.zh {
            format!("{guard}挡住了你的去路。只要它还站着，你就无法完成“{title}”。")
        } else {
            format!("{guard} bars your way. While they stand, \"{title}\" cannot be done.")
        });
    }
    let english_place = str_of(&context["current_area"]["name"]);
    if f.inventory_change.is_none() {
        // The oil is used up and the quest recorded as done, in one round.
        let record = (
            "create_draft_content",
            json!({
                "content_type": QUEST_DONE_TYPE,
                "title": quest_id,
                "body": format!(
                    "{} used the {} at {english_place}: \"{}\" is done.",
                    f.actor.map(|a| str_of(&a["name"])).unwrap_or_default(),
                    str_of(&item["name"]),
                    str_of(&quest["title"])
                ),
                "area_id": f.here,
            }),
        );
        return Next::Calls(vec![use_one, record]);
    }
    let place = f.name(&f.here, &english_place);
    say(if f.zh {
        format!(
            "你把{name}倒进{place}。火焰猛然明亮，整座废墟的灯笼一齐亮起。任务完成：“{title}”。"
        )
    } else {
        format!(
            "You pour the {name} into the {place}. The flame leaps up and every lantern in the ruin \
             burns brighter. Quest complete: \"{title}\"."
        )
    })
}

/// Where a quest is finished: its `area_id`, else the area among its tags
/// (this one, or one of the map's `areas`); anywhere when it names none.
fn quest_place(quest: &Value, here: &str, areas: &HashMap<String, String>) -> String {
    if let Some(area) = quest["area_id"].as_str() {
        return area.to_owned();
    }
    let tags: Vec<&str> = quest["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let known = |tag: &&&str| areas.contains_key(**tag);
    tags.iter()
        .find(|t| **t == here)
        .or_else(|| tags.iter().find(known))
        .map_or(here, |t| *t)
        .to_owned()
}

fn attack(f: &Facts<'_>, whom: &str) -> Next {
    if f.actor_downed() {
        return downed(f);
    }
    let Some((id, english)) = f.person(whom) else {
        return not_here(f, whom);
    };
    let foe = f.name(id, english);
    let me = f.actor_name();
    if !f.standing(id) && f.rolls.is_empty() {
        return say(if f.zh {
            format!("{foe}已经倒下了。")
        } else {
            format!("{foe} is already down.")
        });
    }
    let [mine, theirs] = f.rolls.as_slice() else {
        return Next::Calls(vec![
            (
                "roll_dice",
                json!({"dice": "1d20", "reason": format!("{me} attacks {foe}")}),
            ),
            (
                "roll_dice",
                json!({"dice": "1d20", "reason": format!("{foe} strikes back")}),
            ),
        ]);
    };
    let level = |v: Option<&&Value>| v.and_then(|s| s["level"].as_i64()).unwrap_or(1);
    let exchange = Exchange::of(
        mine["total"].as_i64().unwrap_or(0),
        theirs["total"].as_i64().unwrap_or(0),
        level(f.actor.as_ref()),
        level(f.sheets.get(id)),
        f.sheets
            .get(id)
            .and_then(|s| s["hp"].as_i64())
            .unwrap_or(i64::MAX),
    );
    if f.hp.is_empty() && (exchange.dealt > 0 || exchange.taken > 0) {
        let mut calls = Vec::new();
        if exchange.dealt > 0 {
            calls.push((
                "hp_delta",
                json!({"target_character_id": id, "delta": -exchange.dealt, "cause": format!("{me}'s blow")}),
            ));
        }
        if exchange.taken > 0 {
            calls.push((
                "hp_delta",
                json!({"target_character_id": f.actor_id, "delta": -exchange.taken, "cause": format!("{foe}'s blow")}),
            ));
        }
        return Next::Calls(calls);
    }
    let hp_of = |who: &str| f.hp.iter().find(|h| h["character_id"] == who);
    let (mine, theirs) = (mine["total"].to_string(), theirs["total"].to_string());
    let foe_inside = if f.zh { foe.clone() } else { inside(&foe) };
    let left = |h: &Value, whose: &str| {
        let (hp, max) = (h["hp"].to_string(), h["max_hp"].to_string());
        match (f.zh, whose.is_empty()) {
            (true, true) => format!("你还剩 {hp}/{max} 点生命。"),
            (true, false) => format!("{whose}还剩 {hp}/{max} 点生命。"),
            (false, true) => format!(" You have {hp} of {max} HP left."),
            (false, false) => format!(" {whose} has {hp} of {max} HP left."),
        }
    };
    let space = if f.zh { "" } else { " " };
    let mut text = match hp_of(id) {
        Some(h) => {
            let dealt = exchange.dealt.to_string();
            let mut hit = voice::say(
                voice::HITS,
                f.turn,
                f.zh,
                &[("roll", &mine), ("foe", &foe_inside), ("dealt", &dealt)],
            );
            if h["downed"] == true {
                hit.push_str(&if f.zh {
                    format!("{foe}倒下了！")
                } else {
                    format!(" {foe} falls!")
                });
                return say(hit);
            }
            hit.push_str(&left(h, &foe));
            hit
        }
        None => voice::say(
            voice::MISSES,
            f.turn,
            f.zh,
            &[("roll", &mine), ("foe", &foe_inside)],
        ),
    };
    text.push_str(space);
    match hp_of(f.actor_id) {
        Some(h) => {
            let taken = exchange.taken.to_string();
            text.push_str(&voice::say(
                voice::STRUCK,
                f.turn,
                f.zh,
                &[("foe", &foe), ("roll", &theirs), ("taken", &taken)],
            ));
            text.push_str(&left(h, ""));
            if h["downed"] == true {
                text.push_str(&if f.zh {
                    format!("{me}倒下了！")
                } else {
                    format!(" {me} is down!")
                });
            }
        }
        None => text.push_str(&voice::say(
            voice::DODGED,
            f.turn,
            f.zh,
            &[("foe", &foe), ("roll", &theirs)],
        )),
    }
    say(text)
}

/// One exchange of blows, from the two d20 rolls: the hero's blow lands
/// on [`HERO_HITS_ON`] or more; a foe still standing after it strikes back
/// on [`FOE_HITS_ON`] or more, for their level in damage.
#[derive(Debug, PartialEq)]
pub(super) struct Exchange {
    pub dealt: i64,
    pub taken: i64,
}

impl Exchange {
    pub(super) fn of(
        mine: i64,
        theirs: i64,
        my_level: i64,
        their_level: i64,
        their_hp: i64,
    ) -> Self {
        let mut dealt = 0;
        if mine >= HERO_HITS_ON {
            dealt = HERO_DAMAGE_BASE + 2 * my_level.clamp(1, 20);
            if mine >= 20 {
                dealt *= 2;
            }
        }
        let still_up = their_hp > dealt;
        let taken = if still_up && theirs >= FOE_HITS_ON {
            their_level.clamp(1, 20)
        } else {
            0
        };
        Exchange { dealt, taken }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::game::GameState;
    use crate::game::state::AreaId;
    use crate::tools::Role;
    use crate::tools::test_support::{demo, pipeline};

    /// What the session tells the game master: who acts, where, and the map.
    fn context(state: &GameState) -> Value {
        context_for(state, state.active_actor_id.as_str())
    }

    /// The context of a turn acting for `character_id` first.
    pub(in crate::llm::offline) fn context_for(state: &GameState, character_id: &str) -> Value {
        let actor = state.character(character_id).expect("the acting character");
        let here = state.area(actor.area_id.as_str()).expect("their area");
        let areas: Vec<Value> = state
            .areas
            .iter()
            .map(|a| json!({"area_id": a.area_id, "name": a.name}))
            .collect();
        let party: Vec<Value> = state
            .party
            .active()
            .map(|s| {
                let at = state.character(s.character_id.as_str()).map(|c| c.area_id.clone());
                json!({"seat_id": s.seat_id, "name": s.name, "character_id": s.character_id, "area_id": at})
            })
            .collect();
        let mut context = json!({
            "turn": state.turn,
            "active_actor": {"character_id": actor.character_id},
            "current_area": {"area_id": here.area_id, "name": here.name, "description": here.description},
            "areas": areas,
        });
        if party.len() > 1 {
            context["party"] = party.into();
        }
        context
    }

    #[test]
    fn look_names_the_party_and_where_each_stands() {
        let mut state = demo();
        let hall = state.area("area_002").unwrap().name.clone();
        crate::tools::test_support::seat(&mut state, 2, "Brin", "area_002");
        let ayla = state.party.host().unwrap().name.clone();
        let (_, told) = play(&mut state, Act::Look, false);
        assert!(
            told.ends_with(&format!("The party: {ayla} (here), Brin (at {hall}).")),
            "{told}"
        );
        let (_, told) = play(&mut state, Act::Look, true);
        assert!(
            told.contains(&format!("队伍：{ayla}（在这里）、Brin（在")),
            "{told}"
        );
    }

    /// One adventure turn on `state`, as a session plays it: every call the
    /// game master asks for runs (its effect applied) until it narrates.
    /// Answers the tools called, in order, and the narration.
    fn play(state: &mut GameState, act: Act, zh: bool) -> (Vec<&'static str>, String) {
        let actor = state.active_actor_id.as_str().to_owned();
        let mut results: Vec<(&str, Value)> = Vec::new();
        let mut tools = Vec::new();
        for _ in 0..6 {
            let seen: Vec<(&str, &Value)> = results.iter().map(|(t, r)| (*t, r)).collect();
            match next(&act, &context(state), &seen, &actor, zh) {
                Next::Say(text, _) => return (tools, text),
                Next::Calls(calls) => {
                    for (tool, args) in calls {
                        let out = pipeline(tool, state, args, Role::GameMaster)
                            .unwrap_or_else(|e| panic!("{tool}: {e}"));
                        if let Some(effect) = &out.effect {
                            state.apply(effect);
                        }
                        tools.push(tool);
                        results.push((tool, out.result));
                    }
                }
            }
        }
        panic!("{act:?} never narrates: {tools:?}");
    }

    #[test]
    fn taking_the_oil_starts_the_tide_and_the_flooded_market_is_read_from_the_state() {
        use super::super::timed::{TIDE, WorldStep, world_turn};
        for zh in [false, true] {
            let mut state = demo();
            std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from(TIDE.area);
            let words = if zh { "密封灯油" } else { "the oil" };
            let (tools, told) = play(&mut state, Act::Take(words.into()), zh);
            assert!(tools.contains(&"schedule_event"), "{tools:?}");
            let timer = state
                .timers
                .by_key(TIDE.key)
                .expect("the tide is scheduled");
            assert_eq!(timer.event, TIDE.event);
            let note = timer.note.clone();
            assert_eq!(note, if zh { TIDE.note.1 } else { TIDE.note.0 });
            let warned = if zh {
                "潮水要回来了"
            } else {
                "the tide is coming back"
            };
            assert!(told.contains(warned), "{told}");
            // Taking it again schedules nothing more.
            play(&mut state, Act::Take(words.into()), zh);
            assert_eq!(state.timers.len(), 1);
            // The world turn writes the flooded market, then tells it.
            let WorldStep::Calls(calls) = world_turn(TIDE.event, &note, &[], true) else {
                panic!("the tide changes the market first");
            };
            for (tool, args) in calls {
                let out = pipeline(tool, &state, args, Role::GameMaster).unwrap();
                state.apply(out.effect.as_ref().unwrap());
            }
            for look_zh in [false, true] {
                let (_, text) = play(&mut state, Act::Look, look_zh);
                let flooded = if look_zh {
                    "整个广场都沉在黑水之下"
                } else {
                    "under dark water"
                };
                assert!(text.contains(flooded), "{text}");
            }
        }
        // Elsewhere, nothing changed.
        let mut state = demo();
        let (_, text) = play(&mut state, Act::Look, false);
        assert!(!text.contains("dark water"), "{text}");
    }

    fn carries(state: &GameState, slug: &str) -> bool {
        let hero = state.active_actor().expect("an active character");
        hero.inventory.iter().any(|i| i.slug == slug)
    }

    #[test]
    fn a_take_records_the_item_gone_only_once_it_is_in_the_pack() {
        let mut state = demo();
        let actor = state.active_actor_id.as_str().to_owned();
        let take = || Act::Take("the lamp".into());
        let mut results: Vec<(&str, Value)> = Vec::new();
        // The survey, then the take: `add_inventory` alone, so that a take
        // refused (a person denied it) records nothing.
        for _ in 0..6 {
            let seen: Vec<(&str, &Value)> = results.iter().map(|(t, r)| (*t, r)).collect();
            let Next::Calls(calls) = next(&take(), &context(&state), &seen, &actor, false) else {
                panic!("narrated before taking");
            };
            let tools: Vec<&str> = calls.iter().map(|(t, _)| *t).collect();
            if tools.contains(&"add_inventory") {
                assert_eq!(tools, ["add_inventory"]);
                // Never run: the lamp is still at the gate, to be taken.
                let (tools, _) = play(&mut state, take(), false);
                assert!(tools.contains(&"add_inventory"), "{tools:?}");
                assert!(carries(&state, "green_glass_lamp"));
                return;
            }
            for (tool, args) in calls {
                let out = pipeline(tool, &state, args, Role::GameMaster).unwrap();
                results.push((tool, out.result));
            }
        }
        panic!("the lamp is never taken");
    }

    #[test]
    fn a_foe_s_blow_that_would_fell_the_hero_is_one_a_lethal_only_rule_asks_about() {
        use crate::game::approvals::ApprovalRule;
        let rule = ApprovalRule {
            tools: vec!["hp_delta".into()],
            timeout_s: 600,
            lethal_only: true,
        };
        // The hero, worn down to 3 HP, before the warden, whose blow (3 HP
        // for its level) would fell her.
        let mut state = demo();
        let hero = state.active_actor_id.clone();
        for c in &mut state.characters {
            if c.character_id == hero {
                let c = std::sync::Arc::make_mut(c);
                c.hp = 3;
                c.area_id = "area_009".into();
            }
        }
        let act = Act::Attack("the warden".into());
        // The hero misses (1), the warden strikes back (20).
        let mut rolls = [1, 20].into_iter();
        let mut results: Vec<(&str, Value)> = Vec::new();
        let mut asked = Vec::new();
        for _ in 0..6 {
            let seen: Vec<(&str, &Value)> = results.iter().map(|(t, r)| (*t, r)).collect();
            let Next::Calls(calls) = next(&act, &context(&state), &seen, hero.as_str(), false)
            else {
                break;
            };
            for (tool, args) in calls {
                if rule.asks(tool, &args, &state) {
                    asked.push(args);
                    continue;
                }
                let result = if tool == "roll_dice" {
                    let n = rolls.next().expect("two rolls an exchange");
                    json!({"dice": "1d20", "rolls": [n], "total": n, "modifier": 0})
                } else {
                    let out =
                        pipeline(tool, &state, args, Role::GameMaster).expect("a fight's call");
                    if let Some(effect) = &out.effect {
                        state.apply(effect);
                    }
                    out.result
                };
                results.push((tool, result));
            }
            if !asked.is_empty() {
                break;
            }
        }
        assert_eq!(asked.len(), 1, "the warden's blow waits: {asked:?}");
        assert_eq!(asked[0]["target_character_id"], hero.as_str());
        assert_eq!(asked[0]["delta"], -3);
    }

    #[test]
    fn a_taken_item_leaves_its_area_for_good() {
        let mut state = demo();
        let (tools, _) = play(&mut state, Act::Take("the lamp".into()), false);
        assert!(tools.contains(&"create_draft_content"), "{tools:?}");
        assert!(carries(&state, "green_glass_lamp"));
        // Taken again: the hero already has it, and nothing more is added.
        let (tools, text) = play(&mut state, Act::Take("the lamp".into()), false);
        assert!(!tools.contains(&"add_inventory"), "{tools:?}");
        assert!(text.contains("already carry"), "{text}");
        let (_, text) = play(&mut state, Act::Look, false);
        assert!(!text.contains("Green-Glass Lamp"), "{text}");
        // Gone from the hero too (used up, dropped): still not at the gate.
        let hero = state.active_actor_id.as_str().to_owned();
        let out = pipeline(
            "update_inventory",
            &state,
            json!({"character_id": hero, "updates": [{"slug": "green_glass_lamp", "quantity_change": -1}]}),
            Role::GameMaster,
        )
        .expect("the lamp is used up");
        state.apply(out.effect.as_ref().expect("an effect"));
        assert!(!carries(&state, "green_glass_lamp"));
        for (words, zh) in [("the lamp", false), ("灯笼", true)] {
            let (tools, text) = play(&mut state, Act::Take(words.into()), zh);
            assert!(
                !tools.contains(&"add_inventory"),
                "{words}: {tools:?} {text}"
            );
            assert!(!carries(&state, "green_glass_lamp"), "{words}: {text}");
        }
    }

    #[test]
    fn the_gates_lamp_is_taken_by_the_names_players_give_it() {
        // The Lantern Gate is hung with lanterns; its item is a lamp.
        let cases = [
            ("the lantern", false),
            ("lantern", false),
            ("the green lamp", false),
            ("glass lantern", false),
            ("Green-Glass Lamp", false),
            ("灯笼", true),
            ("灯", true),
            ("绿玻璃灯", true),
        ];
        for (words, zh) in cases {
            let mut state = demo();
            let (tools, text) = play(&mut state, Act::Take(words.into()), zh);
            assert!(
                tools.contains(&"add_inventory"),
                "{words}: {tools:?} {text}"
            );
            assert!(carries(&state, "green_glass_lamp"), "{words}: {text}");
        }
        // What the gate does not hold is not found, and nothing is taken.
        for (words, zh) in [
            ("the lantern oil", false),
            ("the wicks", false),
            ("灯油", true),
        ] {
            let mut state = demo();
            let (tools, text) = play(&mut state, Act::Take(words.into()), zh);
            assert!(!tools.contains(&"add_inventory"), "{words}: {text}");
            assert!(
                text.contains("Green-Glass Lamp") || text.contains("绿玻璃灯"),
                "{text}"
            );
        }
    }

    /// The demo at the Heart Lantern with the Warden down and the oil in hand.
    fn at_the_heart_with_the_oil() -> GameState {
        let mut state = demo();
        let calls = [
            (
                "update_character",
                json!({"character_id": "npc_003", "hp": 0}),
            ),
            (
                "add_inventory",
                json!({"items": [{"name": "Sealed Lamp Oil", "slug": "sealed_lamp_oil"}]}),
            ),
        ];
        for (tool, args) in calls {
            let out = pipeline(tool, &state, args, Role::GameMaster).unwrap();
            state.apply(out.effect.as_ref().unwrap());
        }
        std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from("area_009");
        state
    }

    #[test]
    fn a_finished_quest_is_recorded_and_never_finished_twice() {
        for zh in [false, true] {
            let (oil, look, done, again, listed) = if zh {
                (
                    "密封灯油",
                    Act::Look,
                    "任务完成：“最后一盏灯的灯油”",
                    "已经完成了",
                    "已完成的任务：“最后一盏灯的灯油”。",
                )
            } else {
                (
                    "the oil",
                    Act::Look,
                    "Quest complete: \"Oil for the Last Lamp\"",
                    "is already done",
                    "Quests done: \"Oil for the Last Lamp\".",
                )
            };
            let mut state = at_the_heart_with_the_oil();
            let (_, before) = play(&mut state, look.clone(), zh);
            assert!(!before.contains(listed), "{before}");
            let (tools, text) = play(&mut state, Act::Use(oil.into()), zh);
            assert!(text.contains(done), "{text}");
            assert_eq!(
                tools[tools.len() - 2..],
                ["update_inventory", "create_draft_content"]
            );
            let record = state
                .content
                .iter()
                .find(|e| e.content_type == QUEST_DONE_TYPE)
                .expect("the quest's record");
            assert_eq!(record.title, "quest_last_oil");
            assert_eq!(record.area_id.as_deref(), Some("area_009"));
            assert!(!carries(&state, "sealed_lamp_oil"));

            // Looking around tells the quest is done.
            let (_, seen) = play(&mut state, look, zh);
            assert!(seen.contains(listed), "{seen}");

            // More oil does not finish it again.
            let out = pipeline(
                "add_inventory",
                &state,
                json!({"items": [{"name": "Sealed Lamp Oil", "slug": "sealed_lamp_oil"}]}),
                Role::GameMaster,
            )
            .unwrap();
            state.apply(out.effect.as_ref().unwrap());
            let (tools, text) = play(&mut state, Act::Use(oil.into()), zh);
            assert!(text.contains(again) && !text.contains(done), "{text}");
            assert!(
                !tools.contains(&"update_inventory") && !tools.contains(&"create_draft_content"),
                "{tools:?}"
            );
            assert!(carries(&state, "sealed_lamp_oil"));
            let records = state
                .content
                .iter()
                .filter(|e| e.content_type == QUEST_DONE_TYPE)
                .count();
            assert_eq!(records, 1);
        }
    }

    /// The demo with the hero in Old Maren's alcove.
    fn with_maren() -> GameState {
        let mut state = demo();
        std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from("area_002");
        state
    }

    #[test]
    fn maren_says_where_the_oil_is_in_both_languages() {
        for (words, zh, oil, greets, first_person) in [
            (
                "Old Maren",
                false,
                "under the collapsed stalls of the Drowned Market",
                "Have you brought oil, or only questions?",
                "I swore the lamplighters' oath",
            ),
            (
                "老玛伦",
                true,
                "溺水集市倒塌的摊位下",
                "你是带来了灯油，还是只带来了问题？",
                "我立下了点灯人的誓言",
            ),
        ] {
            let mut state = with_maren();
            let (tools, text) = play(&mut state, Act::TalkTo(words.into()), zh);
            assert!(tools.contains(&"get_npc_profile"), "{tools:?}");
            for said in [oil, greets, first_person] {
                assert!(text.contains(said), "{said:?} in {text}");
            }
            // Her biography is not quoted about her.
            assert!(
                !text.contains("She swore") && !text.contains("The last lamplighter"),
                "{text}"
            );
        }
    }

    #[test]
    fn maren_speaks_of_the_lit_lantern_once_her_quest_is_done() {
        for (words, zh, after, not_again, done) in [
            (
                "Old Maren",
                false,
                "The Heart Lantern burns again",
                "One sealed jar of oil is left",
                "(Quest done: \"Oil for the Last Lamp\")",
            ),
            (
                "老玛伦",
                true,
                "心灯又亮起来了",
                "还剩一罐密封灯油",
                "（任务已完成：“最后一盏灯的灯油”）",
            ),
        ] {
            let mut state = with_maren();
            let record = json!({"content_id": "quest_done_last_oil", "content_type": QUEST_DONE_TYPE,
                "title": "quest_last_oil", "body": "", "status": "draft"});
            std::sync::Arc::make_mut(&mut state.content)
                .push(serde_json::from_value(record).unwrap());
            let (_, text) = play(&mut state, Act::TalkTo(words.into()), zh);
            assert!(text.contains(after), "{after:?} in {text}");
            assert!(text.contains(done), "{done:?} in {text}");
            assert!(!text.contains(not_again), "{text}");
        }
    }

    #[test]
    fn the_people_of_the_demo_speak_in_the_first_person() {
        let mut state = demo();
        std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from("area_005");
        let (_, text) = play(&mut state, Act::TalkTo("Brother Silt".into()), false);
        assert!(
            text.contains("\"The water has carried you here, friend."),
            "{text}"
        );
        assert!(text.contains("I came down from the surface"), "{text}");
        assert!(!text.contains("He came down"), "{text}");
        // The same in Chinese, his greeting said once.
        let (_, text) = play(&mut state, Act::TalkTo("淤泥修士".into()), true);
        assert_eq!(text.matches("潮水把你带到了这里").count(), 1, "{text}");
        assert!(text.contains("我从水面上下来"), "{text}");
    }

    #[test]
    fn an_inventory_line_tells_only_what_changed() {
        for zh in [false, true] {
            let mut state = demo();
            let (lamp, torch) = if zh {
                ("绿玻璃灯", "火把")
            } else {
                ("Green-Glass Lamp", "Torch")
            };
            let (tools, text) = play(&mut state, Act::Take("the lamp".into()), zh);
            assert!(tools.contains(&"add_inventory"), "{tools:?}");
            assert!(text.contains(lamp), "{text}");
            // What the hero carried before is not listed again.
            assert!(!text.contains(torch), "{text}");
            // Nothing changed: no line about the pack.
            let (_, text) = play(&mut state, Act::Look, zh);
            assert!(!text.contains(torch), "{text}");
            let (_, text) = play(&mut state, Act::Take("the lamp".into()), zh);
            assert!(!text.contains(torch), "{text}");
        }
    }

    #[test]
    fn takes_and_talks_are_told_more_than_one_way() {
        // The same act in five turns in a row, in both languages.
        for zh in [false, true] {
            let (mut took, mut talked) = (Vec::new(), Vec::new());
            for turn in 0..5 {
                let mut state = with_maren();
                state.turn = turn;
                let (tools, text) = play(&mut state, Act::Take("wicks".into()), zh);
                assert!(tools.contains(&"add_inventory"), "{tools:?} {text}");
                took.push(text);
                talked.push(play(&mut state, Act::TalkTo("Maren".into()), zh).1);
            }
            for told in [took, talked] {
                let mut ways = told.clone();
                ways.sort();
                ways.dedup();
                assert_eq!(ways.len(), 5, "{told:?}");
            }
        }
    }

    #[test]
    fn a_chinese_adventure_is_told_without_latin_letters() {
        let mut state = demo();
        let acts = [
            Act::Look,
            Act::Take("灯笼".into()),
            Act::Use("火把".into()),
            Act::TalkTo("没有的人".into()),
        ];
        let mut told = Vec::new();
        for act in acts {
            told.push(play(&mut state, act, true).1);
        }
        std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from("area_002");
        told.push(play(&mut state, Act::TalkTo("老玛伦".into()), true).1);
        std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from("area_009");
        for _ in 0..3 {
            told.push(play(&mut state, Act::Attack("守望者".into()), true).1);
        }
        for text in told {
            assert!(!text.chars().any(|c| c.is_ascii_alphabetic()), "{text}");
        }
    }

    #[test]
    fn the_oil_far_from_its_place_is_sent_there_by_name() {
        for (zh, oil, says) in [
            (false, "the oil", "wants it at the Heart Lantern"),
            (true, "密封灯油", "要你把它带到心灯"),
        ] {
            // At the gate, four steps from the Heart Lantern: the oil is
            // kept, and the player told where it goes, by name.
            let mut state = at_the_heart_with_the_oil();
            std::sync::Arc::make_mut(&mut state.characters[0]).area_id = AreaId::from("area_001");
            let (tools, text) = play(&mut state, Act::Use(oil.into()), zh);
            assert!(text.contains(says) && !text.contains("area_"), "{text}");
            assert!(!tools.contains(&"update_inventory"), "{tools:?}");
        }
    }

    #[test]
    fn a_quests_place_is_its_area_or_an_area_among_its_tags() {
        let areas = HashMap::from([("area_009".to_owned(), "Heart".to_owned())]);
        let quest = |q: Value| quest_place(&q, "area_001", &areas);
        assert_eq!(
            quest(json!({"area_id": "area_005", "tags": ["area_009"]})),
            "area_005"
        );
        assert_eq!(quest(json!({"tags": ["oil", "area_009"]})), "area_009");
        assert_eq!(quest(json!({"tags": ["oil", "area_001"]})), "area_001");
        // Naming no place, it is finished wherever the item is used.
        assert_eq!(quest(json!({"tags": ["oil"]})), "area_001");
    }

    #[test]
    fn an_exchange_follows_the_dice() {
        // A miss on both sides.
        assert_eq!(
            Exchange::of(5, 15, 1, 3, 18),
            Exchange { dealt: 0, taken: 0 }
        );
        // A hit, and the foe answers.
        assert_eq!(
            Exchange::of(6, 16, 1, 3, 18),
            Exchange { dealt: 6, taken: 3 }
        );
        // A natural 20 doubles; a foe it downs does not strike back.
        assert_eq!(
            Exchange::of(20, 20, 1, 3, 12),
            Exchange {
                dealt: 12,
                taken: 0
            }
        );
    }
}
