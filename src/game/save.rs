//! A save: one session as a JSON document a player can take elsewhere
//! (docs/protocol.md §13): its campaign's rules, its world now, and its
//! story, every story frame in seq order. Never a token.
//!
//! ```json
//! {"questd_save":1,"exported_at":"…","source":{"session_id":"…","last_seq":N},
//!  "campaign":{…},"state":{…},"story":[{…"seq":1…},…]}
//! ```
//!
//! This module writes a save's head (all of it but the story, which the
//! exporter streams frame by frame after it, [`head`] and [`TAIL`]) and
//! reads a whole save back ([`read`]): checked by the save's JSON Schema
//! (every list and string bounded), then the world by a campaign's rules
//! (the same checks as an inline campaign's, within [`super::campaign::SAVE_LIMITS`]),
//! then what play adds (zones, timers, history) and the story (seqs 1..n
//! without a gap, frame types the server sends). Every check is one pass;
//! every problem found is listed (up to the campaign's
//! [`super::campaign::MAX_PROBLEMS_LISTED`]).
//!
//! Formats: a save says its `questd_save` format. One newer than
//! [`SAVE_FORMAT`] is refused by name; an older one is brought up to this
//! one by [`upgrade`] before it is checked. Format 1 is the first.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, LazyLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::approvals::ApprovalRule;
use super::campaign::{Campaign, CampaignError, MAX_ID_CHARS, MAX_TEXT_CHARS, Problems};
use super::content::{ContentEntry, NpcProfile};
use super::party::{MAX_ROUND_TIMEOUT_S, PcTemplate, TurnMode};
use super::state::{
    AreaMap, Character, CharacterId, EVENT_LIMIT, GameState, HISTORY_LIMIT, HistoryEntry, UserEvent,
};
use super::timers::{MAX_PENDING, Timers};
use super::zones::{PlayerRuntime, Zone};
use crate::ids::TurnId;
use crate::protocol::{STORY_KINDS, TURN_KINDS};

/// The save format this build writes, and the newest it reads.
pub const SAVE_FORMAT: u64 = 1;
/// Most frames in a save's story. A save's bytes are bounded too
/// (`QUESTD_MAX_SAVE_MB`), which usually binds first.
pub const MAX_STORY_FRAMES: usize = 1_000_000;
/// Longest text in a history entry or a frame's string, in characters: a
/// tool's result may be 256 KiB (`MAX_RESULT_BYTES`).
pub const MAX_HISTORY_CHARS: usize = 300_000;
/// Most zones in a save's world.
pub const MAX_SAVE_ZONES: usize = 5000;
/// Most entries of the travel log kept in a save.
pub const MAX_MOVEMENT_LOG: usize = 10_000;
/// What ends a save after its story's frames.
pub const TAIL: &str = "]}";

/// A save read and checked: the new session's state and its story.
#[derive(Debug)]
pub struct Imported {
    pub state: GameState,
    pub story: Vec<SavedFrame>,
}

/// One frame of an imported story, as it will be stored and sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedFrame {
    pub seq: u64,
    pub kind: &'static str,
    pub turn_id: Option<TurnId>,
    /// The frame's JSON, compact.
    pub frame: String,
}

/// Who the save came from: the session and the last seq of its story.
#[derive(Serialize)]
struct Source<'a> {
    session_id: &'a str,
    last_seq: u64,
}

/// The campaign's rules, as a campaign file spells them.
#[derive(Serialize)]
struct CampaignPart<'a> {
    campaign_id: &'a str,
    title: &'a str,
    allowlist: &'a [String],
    party: PartyRulesPart,
    pc_template: &'a PcTemplate,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval: Option<&'a ApprovalRule>,
}

#[derive(Serialize)]
struct PartyRulesPart {
    max_players: u32,
}

/// The world now: a campaign file's lists as they stand, and what play
/// added.
#[derive(Serialize)]
struct StatePart<'a> {
    turn: u64,
    active_actor_id: &'a CharacterId,
    areas: &'a AreaMap,
    characters: &'a [Arc<Character>],
    lore: &'a [String],
    npcs: &'a [NpcProfile],
    content: &'a [ContentEntry],
    zones: &'a [Zone],
    player: &'a PlayerRuntime,
    events: &'a VecDeque<UserEvent>,
    history: &'a VecDeque<Arc<HistoryEntry>>,
    timers: &'a Timers,
    party: PartyModePart,
}

#[derive(Serialize, serde::Deserialize)]
struct PartyModePart {
    #[serde(default)]
    turn_mode: TurnMode,
    #[serde(default = "default_round_timeout")]
    round_timeout_s: u32,
}

fn default_round_timeout() -> u32 {
    super::party::Party::default().round_timeout_s
}

impl Default for PartyModePart {
    fn default() -> Self {
        Self {
            turn_mode: TurnMode::default(),
            round_timeout_s: default_round_timeout(),
        }
    }
}

#[derive(Serialize)]
struct Head<'a> {
    questd_save: u64,
    exported_at: &'a str,
    source: Source<'a>,
    campaign: CampaignPart<'a>,
    state: StatePart<'a>,
}

/// A save's text up to its story's first frame: everything but the story,
/// then `"story":[`. The frames follow, comma-separated, then [`TAIL`].
/// Seats, invites, a round in progress and pending approvals are not in
/// it: they belong to the people and the turn of this server.
pub fn head(
    state: &GameState,
    session_id: &str,
    last_seq: u64,
    exported_at: &str,
) -> Result<String, serde_json::Error> {
    let head = Head {
        questd_save: SAVE_FORMAT,
        exported_at,
        source: Source {
            session_id,
            last_seq,
        },
        campaign: CampaignPart {
            campaign_id: &state.campaign_id,
            title: &state.title,
            allowlist: &state.allowlist,
            party: PartyRulesPart {
                max_players: state.party.max_players,
            },
            pc_template: &state.party.pc_template,
            approval: state.approvals.rule.as_deref(),
        },
        state: StatePart {
            turn: state.turn,
            active_actor_id: &state.active_actor_id,
            areas: &state.areas,
            characters: &state.characters,
            lore: &state.lore,
            npcs: &state.npcs,
            content: &state.content,
            zones: &state.zones,
            player: &state.player,
            events: &state.events,
            history: &state.history,
            timers: &state.timers,
            party: PartyModePart {
                turn_mode: state.party.turn_mode,
                round_timeout_s: state.party.round_timeout_s,
            },
        },
    };
    let mut text = serde_json::to_string(&head)?;
    // `…}` becomes `…,"story":[`.
    text.pop();
    text.push_str(",\"story\":[");
    Ok(text)
}

/// The JSON Schema of a save (docs/save.schema.json is this, written out).
pub fn schema() -> &'static Value {
    &SCHEMA
}

/// The campaign fields of a save's `campaign`, and the world fields of its
/// `state`, that together make the campaign file its world is checked as.
const CAMPAIGN_FIELDS: [&str; 6] = [
    "campaign_id",
    "title",
    "allowlist",
    "party",
    "pc_template",
    "approval",
];
const WORLD_FIELDS: [&str; 6] = [
    "active_actor_id",
    "areas",
    "characters",
    "lore",
    "npcs",
    "content",
];

static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let campaign_props = &Campaign::save_schema()["properties"];
    let pick = |names: &[&str]| -> Map<String, Value> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), campaign_props[*n].clone()))
            .collect()
    };
    let text = json!({"type": "string", "maxLength": MAX_HISTORY_CHARS});
    let id = json!({"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS});
    let history = json!({
        "type": "object",
        "required": ["role", "turn_id"],
        "properties": {
            "role": {"enum": ["user", "tool_call", "tool_result", "assistant"]},
            "turn_id": id, "call_id": id, "tool": id, "seat_id": id,
            "text": text, "arguments": text, "content": text
        }
    });
    let timer = json!({
        "type": "object",
        "required": ["timer_id", "event", "due_at", "created_at"],
        "properties": {
            "timer_id": id,
            "event": {"type": "string", "maxLength": super::timers::MAX_EVENT_CHARS},
            "note": {"type": "string", "maxLength": super::timers::MAX_NOTE_CHARS},
            "key": {"type": "string", "maxLength": super::timers::MAX_KEY_CHARS},
            "due_at": {"type": "integer", "minimum": 0, "maximum": MAX_SAVED_MS},
            "repeat_s": {
                "type": "integer",
                "minimum": super::timers::MIN_REPEAT_S,
                "maximum": super::timers::MAX_HORIZON_S
            },
            "created_at": {"type": "integer", "minimum": 0, "maximum": MAX_SAVED_MS}
        }
    });
    let zone = json!({
        "type": "object",
        "required": ["zone_id", "name", "x", "y", "z"],
        "properties": {
            "zone_id": id,
            "name": {"type": "string", "maxLength": MAX_TEXT_CHARS},
            "description": {"type": "string", "maxLength": MAX_TEXT_CHARS},
            "world_prompt": {"type": "string", "maxLength": MAX_TEXT_CHARS},
            "tags": campaign_props["areas"]["items"]["properties"]["tags"].clone()
        }
    });
    let mut world = pick(&WORLD_FIELDS);
    world.insert(
        "turn".into(),
        json!({"type": "integer", "minimum": 0, "maximum": MAX_SAVED_TURN}),
    );
    world.insert(
        "zones".into(),
        json!({"type": "array", "maxItems": MAX_SAVE_ZONES, "items": zone}),
    );
    world.insert(
        "player".into(),
        json!({
            "type": "object",
            "properties": {
                "current_zone_id": {"type": ["string", "null"], "maxLength": MAX_ID_CHARS},
                "movement_log": {"type": "array", "maxItems": MAX_MOVEMENT_LOG}
            }
        }),
    );
    world.insert(
        "events".into(),
        json!({"type": "array", "maxItems": EVENT_LIMIT, "items": {"type": "object"}}),
    );
    world.insert(
        "history".into(),
        json!({"type": "array", "maxItems": HISTORY_LIMIT, "items": history}),
    );
    world.insert(
        "timers".into(),
        json!({"type": "array", "maxItems": MAX_PENDING, "items": timer}),
    );
    world.insert(
        "party".into(),
        json!({
            "type": "object",
            "properties": {
                "turn_mode": {"enum": ["free", "rounds"]},
                "round_timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_ROUND_TIMEOUT_S}
            }
        }),
    );
    let frame = json!({
        "type": "object",
        "required": ["type", "seq"],
        "properties": {
            "type": {"enum": STORY_KINDS},
            "seq": {"type": "integer", "minimum": 1},
            "turn_id": id,
            "request_id": {"type": ["string", "null"], "maxLength": 128}
        }
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:questd:save",
        "title": "questd save",
        "type": "object",
        "required": ["questd_save", "campaign", "state", "story"],
        "properties": {
            "questd_save": {"type": "integer", "minimum": 1, "maximum": SAVE_FORMAT},
            "exported_at": {"type": "string", "maxLength": 64},
            "source": {
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "maxLength": MAX_ID_CHARS},
                    "last_seq": {"type": "integer", "minimum": 0}
                }
            },
            "campaign": {
                "type": "object",
                "required": ["campaign_id", "title"],
                "properties": pick(&CAMPAIGN_FIELDS)
            },
            "state": {
                "type": "object",
                "required": ["turn", "active_actor_id", "areas", "characters"],
                "properties": world
            },
            "story": {"type": "array", "maxItems": MAX_STORY_FRAMES, "items": frame}
        }
    })
});

static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    jsonschema::validator_for(&SCHEMA).expect("the save schema is a valid JSON Schema")
});

/// Brings a save of format `from` up to [`SAVE_FORMAT`]. Format 1 is the
/// first; a later format adds its step here, so every older save still
/// imports.
fn upgrade(save: Value, from: u64) -> Value {
    debug_assert!(from <= SAVE_FORMAT);
    save
}

/// Latest time a save may name (ms since the epoch): the last millisecond
/// of the year 9999.
const MAX_SAVED_MS: i64 = 253_402_300_799_999;
/// Largest turn count a save may have: the largest integer every JSON
/// reader holds exactly (2^53 − 1).
const MAX_SAVED_TURN: u64 = 9_007_199_254_740_991;

/// Deepest nesting of arrays and objects a save may have
/// ([`crate::json::depth_within`]). A session's own save nests a tool's
/// arguments (at most 32 levels, `MAX_ARGS_DEPTH` in `tools`) three or four levels down
/// (`story[i].args`, `state.events[i].event_data`); the session an import
/// makes stores them a few levels deeper still, and must read them back.
pub const MAX_SAVE_DEPTH: usize = 64;

/// Reads and checks a save (docs/protocol.md §20) at `now_ms` (ms since
/// the epoch: how far off its timers may be due); `known_tools` are the
/// tools this server has. Refused with every problem found (as an inline
/// campaign is).
pub fn read(save: Value, known_tools: &[&str], now_ms: i64) -> Result<Imported, CampaignError> {
    let refuse = |p: String| CampaignError { problems: vec![p] };
    let format = match save.get("questd_save") {
        Some(v) => v.as_u64().ok_or_else(|| {
            refuse("questd_save: the save's format is a whole number (1 or later)".into())
        })?,
        None if save.is_object() => {
            return Err(refuse(
                "questd_save: missing; this is not a questd save (a save is what \
                 GET /api/v1/sessions/{id}/export answers)"
                    .into(),
            ));
        }
        None => return Err(refuse("a save is a JSON object".into())),
    };
    if format > SAVE_FORMAT {
        return Err(refuse(format!(
            "questd_save: format {format} is newer than this server reads \
             ({SAVE_FORMAT} and older); import it on a newer questd"
        )));
    }
    if !crate::json::depth_within(&save, MAX_SAVE_DEPTH) {
        return Err(refuse(format!(
            "the save is nested deeper than {MAX_SAVE_DEPTH} levels of objects and arrays"
        )));
    }
    let save = upgrade(save, format);
    let mut problems = Problems::of_schema(&VALIDATOR, &save);
    if !problems.is_empty() {
        return Err(problems.into_error());
    }
    // The schema holds: these are objects and an array.
    let (Some(campaign_part), Some(world), Some(story)) = (
        save["campaign"].as_object(),
        save["state"].as_object(),
        save["story"].as_array(),
    ) else {
        return Err(refuse(
            "campaign and state are objects, story a list".into(),
        ));
    };
    let mut as_campaign = Map::new();
    for (k, v) in campaign_part.iter().chain(world) {
        if CAMPAIGN_FIELDS.contains(&k.as_str()) || WORLD_FIELDS.contains(&k.as_str()) {
            as_campaign.insert(k.clone(), v.clone());
        }
    }
    let campaign = match Campaign::from_save_value(&Value::Object(as_campaign), known_tools) {
        Ok(c) => Some(c),
        Err(e) => {
            problems.extend(e);
            None
        }
    };
    let field = |name: &str| world.get(name).cloned().unwrap_or(Value::Null);
    let zones: Option<Vec<Zone>> = part(&mut problems, "state.zones", field("zones"));
    let player: Option<PlayerRuntime> = part(&mut problems, "state.player", field("player"));
    let events: Option<VecDeque<UserEvent>> = part(&mut problems, "state.events", field("events"));
    let history: Option<VecDeque<HistoryEntry>> =
        part(&mut problems, "state.history", field("history"));
    let timers: Option<Timers> = part(&mut problems, "state.timers", field("timers"));
    let mode: Option<PartyModePart> = part(&mut problems, "state.party", field("party"));
    if let Some(zones) = &zones {
        let mut ids = HashSet::new();
        for z in zones {
            if !ids.insert(z.zone_id.as_str()) {
                problems.add(|| format!("zone id {} is used twice", z.zone_id));
            }
        }
        if let Some(Some(at)) = player.as_ref().map(|p| p.current_zone_id.as_deref())
            && !ids.contains(at)
        {
            problems.add(|| format!("the player stands in unknown zone {at}"));
        }
    }
    if let Some(timers) = &timers {
        let mut ids = HashSet::new();
        // No tool sets a timer further off than the horizon: a save's was
        // set at most that far from its export, which came before now.
        let latest = now_ms.saturating_add(super::timers::MAX_HORIZON_S as i64 * 1000);
        for t in timers.pending() {
            if !ids.insert(t.timer_id.as_str()) {
                problems.add(|| format!("timer id {} is used twice", t.timer_id));
            }
            if t.due_at > latest {
                problems.add(|| {
                    format!(
                        "timer {} is due more than {} days from now",
                        t.timer_id,
                        super::timers::MAX_HORIZON_S / 86_400
                    )
                });
            }
        }
    }
    let last_seq = save["source"]["last_seq"].as_u64();
    let story = read_story(story, last_seq, &mut problems);
    let turn = world.get("turn").and_then(Value::as_u64).unwrap_or(0);
    // The new session numbers its turns on from `turn`: a story that
    // already holds a later turn would have its turn ids again.
    if let Some(last) = story
        .iter()
        .filter_map(|f| {
            f.turn_id
                .as_ref()?
                .as_str()
                .strip_prefix("turn_")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .filter(|last| *last > turn)
    {
        problems.add(|| {
            format!(
                "state.turn is {turn}, but the story holds turn_{last}: a session's turn count \
                 is at least its last turn's number"
            )
        });
    }
    if !problems.is_empty() {
        return Err(problems.into_error());
    }
    let (
        Some(campaign),
        Some(zones),
        Some(player),
        Some(events),
        Some(history),
        Some(timers),
        Some(mode),
    ) = (campaign, zones, player, events, history, timers, mode)
    else {
        return Err(refuse("the save could not be read".into()));
    };
    let mut state = GameState {
        campaign_id: campaign.campaign_id,
        title: campaign.title,
        turn,
        active_actor_id: campaign.active_actor_id,
        areas: AreaMap::from(campaign.areas),
        characters: campaign.characters.into_iter().map(Arc::new).collect(),
        allowlist: Arc::new(campaign.allowlist),
        lore: Arc::new(campaign.lore),
        zones,
        player,
        npcs: Arc::new(campaign.npcs),
        content: Arc::new(campaign.content),
        events,
        history: history.into_iter().map(Arc::new).collect(),
        party: Default::default(),
        timers,
        approvals: Default::default(),
    };
    state.party.max_players = campaign.party.max_players;
    state.party.pc_template = campaign.pc_template;
    state.party.turn_mode = mode.turn_mode;
    state.party.round_timeout_s = mode.round_timeout_s;
    state.approvals.rule = campaign.approval.map(|r| Box::new(r.deduped()));
    state.ensure_host_seat();
    Ok(Imported { state, story })
}

/// One part of a save's state read as its type; a part that does not read
/// is a problem, named by `what`.
fn part<T: DeserializeOwned + Default>(
    problems: &mut Problems,
    what: &str,
    mut value: Value,
) -> Option<T> {
    if value.is_null() {
        return Some(T::default());
    }
    // The schema passed `12.0` where an integer goes; read it as 12.
    crate::json::whole_numbers_as_integers(&mut value);
    match serde_json::from_value(value) {
        Ok(v) => Some(v),
        Err(e) => {
            problems.add(|| format!("{what}: {e}"));
            None
        }
    }
}

/// The story's frames, checked: seqs 1, 2, 3… in order, each frame of a
/// turn naming its turn, and, when the save names its source's `last_seq`,
/// that many: a story that stops short (a save cut, or frames taken out
/// from the end) would give the new session a story other than the one it
/// says it has. A gap is named once, by its seq, and not again as a count.
fn read_story(story: &[Value], last_seq: Option<u64>, problems: &mut Problems) -> Vec<SavedFrame> {
    let mut frames = Vec::with_capacity(story.len());
    let mut broken = false;
    for (i, frame) in story.iter().enumerate() {
        let at = i + 1;
        let seq = frame["seq"].as_u64().unwrap_or(0);
        if seq != at as u64 {
            // Named once: one missing frame puts every later one out of
            // place.
            if !broken {
                problems.add(|| {
                    format!(
                        "story: frame {at} has seq {seq}; a story's seqs run 1, 2, 3… without a gap"
                    )
                });
            }
            broken = true;
        }
        // The schema allows only these.
        let Some(kind) = STORY_KINDS
            .iter()
            .find(|k| frame["type"].as_str() == Some(**k))
        else {
            continue;
        };
        let turn_id = frame["turn_id"].as_str().map(TurnId::from);
        if TURN_KINDS.contains(kind) && turn_id.is_none() {
            problems.add(|| format!("story: frame {at} ({kind}) names no turn_id"));
            continue;
        }
        // A turn's `request_id` stays in its frame, as said, but is not
        // kept as one of the new session's: a request id is unique in its
        // session (contract §2), and the copy is another session, whose
        // player may number requests from the start again.
        frames.push(SavedFrame {
            seq,
            kind,
            turn_id,
            frame: frame.to_string(),
        });
    }
    if let Some(last_seq) = last_seq
        && !broken
        && last_seq != story.len() as u64
    {
        problems.add(|| {
            format!(
                "story: {} frames, but source.last_seq is {last_seq}; a save's story is \
                 every frame, seq 1 to source.last_seq",
                story.len()
            )
        });
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::BUILTIN_CAMPAIGNS;

    /// Every tool this server has.
    static TOOLS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        crate::tools::Registry::builtin()
            .expect("the built-in tools register")
            .names()
            .to_vec()
    });

    fn demo() -> GameState {
        let (_, text) = BUILTIN_CAMPAIGNS[0];
        let value: Value = serde_json::from_str(text).unwrap();
        Campaign::from_value(&value, &TOOLS)
            .unwrap_or_else(|e| panic!("{}", e.problems.join("\n")))
            .into_state()
    }

    fn frames(n: u64) -> Vec<String> {
        (1..=n)
            .map(|seq| (seq, format!("turn_{}", seq.div_ceil(3))))
            .map(|(seq, turn_id)| match seq % 3 {
                1 => json!({"type":"turn_started","seq":seq,"turn_id":turn_id,"request_id":"r","text":"look"}),
                2 => json!({"type":"narrative_delta","seq":seq,"turn_id":turn_id,"text":"You see "}),
                _ => json!({"type":"turn_completed","seq":seq,"turn_id":turn_id,"reply":"You see a hall."}),
            }
            .to_string())
            .collect()
    }

    /// A save as the exporter writes it: head, frames, tail; its turn
    /// count at least the story's turns ([`frames`]).
    fn save_of(state: &GameState, story: &[String]) -> Value {
        let mut state = state.clone();
        state.turn = state.turn.max((story.len() as u64).div_ceil(3));
        let state = &state;
        let text = format!(
            "{}{}{TAIL}",
            head(state, "sess_a", story.len() as u64, "2026-11-29T10:00:00Z").unwrap(),
            story.join(",")
        );
        serde_json::from_str(&text).expect("a save is one JSON document")
    }

    /// The time the tests read saves at: 2026-11-30T00:00:00Z.
    const NOW: i64 = 1_764_460_800_000;

    fn problems(save: Value) -> Vec<String> {
        read(save, &TOOLS, NOW).expect_err("refused").problems
    }

    #[test]
    fn a_save_nested_deeper_than_its_bound_is_refused_before_anything_is_read() {
        let mut save = save_of(&demo(), &frames(3));
        let mut deep = json!(1);
        for _ in 0..MAX_SAVE_DEPTH {
            deep = json!({ "a": deep });
        }
        // The save itself is a level: this puts it one past the bound.
        save["story"][0]["args"] = deep;
        assert_eq!(
            problems(save),
            [format!(
                "the save is nested deeper than {MAX_SAVE_DEPTH} levels of objects and arrays"
            )]
        );
    }

    #[test]
    fn a_save_reads_back_as_the_same_state_and_story() {
        let mut state = demo();
        state.turn = 3;
        std::sync::Arc::make_mut(&mut state.characters[0]).hp = 5;
        state.record(Arc::new(HistoryEntry::User {
            turn_id: TurnId::from("turn_1"),
            text: "look".into(),
            seat_id: None,
        }));
        let story = frames(6);
        let imported = read(save_of(&state, &story), &TOOLS, NOW)
            .unwrap_or_else(|e| panic!("{}", e.problems.join("\n")));
        let mut expected = state.clone();
        // Seats are the server's, not the save's: the host seat is made again.
        expected.party.seats.clear();
        expected.ensure_host_seat();
        assert_eq!(
            serde_json::to_value(&imported.state).unwrap(),
            serde_json::to_value(&expected).unwrap()
        );
        let seqs: Vec<u64> = imported.story.iter().map(|f| f.seq).collect();
        assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
        assert_eq!(imported.story[0].kind, "turn_started");
        assert_eq!(
            serde_json::from_str::<Value>(&imported.story[2].frame).unwrap(),
            serde_json::from_str::<Value>(&story[2]).unwrap()
        );
    }

    #[test]
    fn a_save_carries_no_token_or_seat_secret() {
        let mut state = demo();
        state.party.seats[0].token_hash = Some("secret-digest".into());
        let text = head(&state, "sess_a", 0, "t").unwrap();
        assert!(!text.contains("secret-digest"), "{text}");
        assert!(!text.contains("token"), "{text}");
    }

    #[test]
    fn a_state_that_breaks_the_campaigns_rules_is_refused_with_each_problem() {
        let mut state = demo();
        std::sync::Arc::make_mut(&mut state.characters[0]).hp = state.characters[0].max_hp + 1;
        let mut save = save_of(&state, &frames(3));
        save["state"]["characters"][0]["area_id"] = json!("area_nowhere");
        let all = problems(save).join("\n");
        assert!(all.contains("has hp above max_hp"), "{all}");
        assert!(all.contains("unknown area area_nowhere"), "{all}");
    }

    #[test]
    fn a_story_with_a_gap_or_a_foreign_frame_is_refused() {
        let state = demo();
        let mut save = save_of(&state, &frames(4));
        save["story"][2]["seq"] = json!(9);
        assert!(
            problems(save.clone())
                .join("\n")
                .contains("frame 3 has seq 9")
        );
        let mut missing = save_of(&state, &frames(9));
        missing["story"].as_array_mut().unwrap().remove(1);
        let gaps = problems(missing);
        assert_eq!(gaps.len(), 1, "one gap, one problem: {gaps:?}");
        save["story"][2] = json!({"type":"welcome","seq":3});
        let all = problems(save).join("\n");
        assert!(all.contains("/story/2/type"), "{all}");
    }

    #[test]
    fn a_story_that_stops_short_of_its_last_seq_is_refused() {
        let state = demo();
        let mut short = save_of(&state, &frames(6));
        short["story"].as_array_mut().unwrap().truncate(3);
        assert_eq!(
            problems(short),
            [
                "story: 3 frames, but source.last_seq is 6; a save's story is every frame, \
              seq 1 to source.last_seq"
            ]
        );
        let mut long = save_of(&state, &frames(6));
        long["source"]["last_seq"] = json!(5);
        assert!(problems(long)[0].starts_with("story: 6 frames, but source.last_seq is 5"));
        // A save without a source (written by hand) has only its seqs checked.
        let mut bare = save_of(&state, &frames(4));
        bare.as_object_mut().unwrap().remove("source");
        assert!(read(bare, &TOOLS, NOW).is_ok());
    }

    #[test]
    fn a_newer_format_is_refused_by_name_and_a_non_save_says_what_it_is_not() {
        let mut save = save_of(&demo(), &[]);
        save["questd_save"] = json!(SAVE_FORMAT + 1);
        let all = problems(save).join("\n");
        assert!(all.contains("newer than this server reads"), "{all}");
        let all = problems(json!({"campaign_id": "demo"})).join("\n");
        assert!(all.contains("not a questd save"), "{all}");
        let all = problems(json!([1, 2])).join("\n");
        assert!(all.contains("JSON object"), "{all}");
    }

    #[test]
    fn a_save_past_a_bound_is_refused_by_the_schema_before_its_world_is_read() {
        let mut save = save_of(&demo(), &[]);
        save["state"]["history"] = Value::Array(vec![
            json!({"role":"user","turn_id":"t","text":"x"});
            HISTORY_LIMIT + 1
        ]);
        let all = problems(save).join("\n");
        assert!(all.contains("/state/history"), "{all}");
    }

    #[test]
    fn timers_a_tool_could_not_set_and_a_turn_count_behind_the_story_are_refused() {
        let timer = |id: &str, due_at: i64, repeat_s: u64| {
            json!({"timer_id": id, "event": "bells", "due_at": due_at, "repeat_s": repeat_s,
                   "created_at": 1})
        };
        let far = NOW + 31 * 86_400_000;
        let save_with = |t: Value| {
            let mut save = save_of(&demo(), &frames(3));
            save["state"]["timers"] = json!([t]);
            save
        };
        let with_timer = |t: Value| problems(save_with(t));
        // What the tool could have set reads: every 5 s, due in 29 days.
        let near = save_with(timer("tm_near", NOW + 29 * 86_400_000, 5));
        assert!(read(near, &TOOLS, NOW).is_ok());
        let all = with_timer(timer("tm_every_second", 1, 1)).join("\n");
        assert!(all.contains("/state/timers/0/repeat_s"), "{all}");
        assert_eq!(
            with_timer(timer("tm_far", far, 60)),
            ["timer tm_far is due more than 30 days from now"]
        );
        let all = with_timer(timer("tm_past_year_9999", i64::MAX, 60)).join("\n");
        assert!(all.contains("/state/timers/0/due_at"), "{all}");

        // A turn count below the story's last turn would number the next
        // turn as one the story holds.
        let mut save = save_of(&demo(), &frames(6));
        save["state"]["turn"] = json!(1);
        assert_eq!(
            problems(save),
            [
                "state.turn is 1, but the story holds turn_2: a session's turn count is at least \
              its last turn's number"
            ]
        );
        let mut save = save_of(&demo(), &frames(3));
        save["state"]["turn"] = json!(18_446_744_073_709_551_615_u64);
        assert!(problems(save).join("\n").contains("/state/turn"));
    }

    #[test]
    fn the_documented_schema_is_the_one_checked() {
        let written: Value =
            serde_json::from_str(include_str!("../../docs/save.schema.json")).unwrap();
        assert!(
            &written == schema(),
            "docs/save.schema.json is out of date; write it again:\n{}",
            serde_json::to_string_pretty(schema()).unwrap()
        );
    }
}
