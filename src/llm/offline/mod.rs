//! The offline game master: a deterministic, rule-based model.
//!
//! It reads the player's words (English or Chinese) and either asks for one
//! tool or narrates; once tool results are in the conversation it narrates
//! from them. It goes through the same [`Provider`] interface and turn loop
//! as a real model, so everything a real model can do to a session (tool
//! calls, validation failures, streaming) is exercised without one.
//!
//! Commands: `go to <area id or name>` / `去 <…>`, `where can I go` /
//! `我能去哪`, `roll 2d6+1` / `掷 2d6+1`, `explore <theme>` / `探索 <…>`,
//! `status` / `状态`, `scout <prompt>` / `侦察 <…>`, `search <words>` /
//! `搜索 <…>`, `map` / `地图`, `wait 10 minutes` / `等十分钟` and `remind me
//! in 30 seconds to …` / `30秒后提醒我…` (a timer, `timed.rs`, which also
//! tells the world turn a due timer runs); anything else gets a narrative and no tool call.
//! Commands joined by ` then ` (or `然后`), as in `go to the hall then roll
//! 1d20`, become one answer with a tool call each, run in that order; at
//! most [`MAX_COMMANDS_PER_MESSAGE`] of them, and a message with more runs
//! none and says so.
//!
//! What the tools did is told by `narrate.rs`, the adventure's acts by
//! `adventure.rs`, both in the phrasings of `voice.rs`: said several ways,
//! chosen by the turn's number, so consecutive moves never read the same
//! and a game told again reads the same.
//!
//! For measuring the runtime rather than a model it can wait a fixed time
//! before each answer (`QUESTD_OFFLINE_LATENCY_MS`). The wait is a timer
//! inside the answer's stream, so it holds no thread and thousands of turns
//! can wait at once, as they do on a real model.

mod adventure;
mod narrate;
mod timed;
mod voice;
mod words;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use aho_corasick::{AhoCorasick, MatchKind};
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::{Value, json};

use super::{
    LlmError, ModelEvent, ModelReply, ModelRequest, ModelToolCall, Provider, RequestKind,
    sentence_deltas,
};
use crate::game::HistoryEntry;
use crate::game::names::has_cjk;
use crate::game::timers::read_world_message;
use crate::ids::CallId;
use adventure::{Act, Next};
use narrate::{APPROVAL_DENIED, Asked, failed, far_lookup, map_holds_more, names_things};
use words::{names, without_article};

/// The built-in game master. `OfflineGameMaster::default()` answers at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OfflineGameMaster {
    /// Waited before each answer (every model call), without blocking.
    latency: Duration,
}

/// What the player asked for.
#[derive(Debug, Clone, PartialEq)]
enum Intent {
    Go(String),
    WhereCanIGo,
    /// A dice expression and what the roll is for, when the player said.
    Roll(String, Option<String>),
    Explore(String),
    Status,
    Scout(String),
    Search(String),
    SiteMap,
    /// Waiting, or being reminded: a timer of the session.
    Wait(timed::Wait),
    /// Looking, talking, taking, using, fighting: a turn of several rounds.
    Adventure(Act),
    Help,
    Talk,
}

/// Most commands one message may join with ` then `; a message with more
/// runs none of them and is answered with a narration saying so.
pub const MAX_COMMANDS_PER_MESSAGE: usize = 8;

/// Words that join two commands into one message.
const THEN: [&str; 4] = [" then ", ", then ", "，然后", "然后"];

/// Splits a message into its commands: `go to X then roll 1d20` is two.
/// A message that is not all commands is one piece of talk. `None` when it
/// joins more than [`MAX_COMMANDS_PER_MESSAGE`] commands; splitting stops
/// there, so a message of a thousand `then`s costs no more than one of nine.
fn parse_intents(text: &str) -> Option<Vec<Intent>> {
    let lower = text.to_lowercase();
    let mut pieces = Vec::new();
    let mut rest = text;
    let mut rest_lower = lower.as_str();
    // Positions found in the lower-cased text are used in the original, so
    // every character must keep its byte length when lower-cased (a few
    // rare letters do not, e.g. 'İ'); otherwise the message is read as one
    // command.
    let same_lengths = text
        .chars()
        .all(|c| c.to_lowercase().map(char::len_utf8).sum::<usize>() == c.len_utf8());
    let mut too_many = false;
    while same_lengths && let Some((at, sep)) = first_separator(rest_lower) {
        if pieces.len() + 1 == MAX_COMMANDS_PER_MESSAGE {
            // One more separator: at least one command past the cap.
            too_many = true;
            break;
        }
        // Checked slicing: a wrong position ends the split, never panics.
        let (Some(piece), Some(next), Some(next_lower)) = (
            rest.get(..at),
            rest.get(at + sep..),
            rest_lower.get(at + sep..),
        ) else {
            break;
        };
        pieces.push(piece);
        rest = next;
        rest_lower = next_lower;
    }
    if !too_many {
        pieces.push(rest);
    }
    let intents: Vec<Intent> = pieces.iter().map(|p| parse_intent(p)).collect();
    if intents.len() > 1 && intents.contains(&Intent::Talk) {
        // Prose that happens to say "then" is talk, however long.
        return Some(vec![Intent::Talk]);
    }
    (!too_many).then_some(intents)
}

/// Where the first of [`THEN`] in `text` starts and its length in bytes;
/// of two starting at the same place, the longer. Every model call of a
/// turn splits the player's message again, so the words are searched for
/// in one pass (an Aho-Corasick automaton built once) instead of one
/// search per word.
fn first_separator(text: &str) -> Option<(usize, usize)> {
    static SEPARATORS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(THEN)
            .ok()
    });
    match SEPARATORS.as_ref() {
        Some(separators) => separators.find(text).map(|m| (m.start(), m.len())),
        // Built from constant words, the automaton cannot fail; were it
        // to, the search is the same one word at a time.
        None => THEN
            .iter()
            .filter_map(|sep| text.find(sep).map(|at| (at, sep.len())))
            .min_by_key(|&(at, len)| (at, usize::MAX - len)),
    }
}

/// What a player may put before a command and mean the command alone:
/// "I go to the side room" (the contract's own example), "we attack the
/// warden", "let's explore", "我去酒馆". Longer first where one starts
/// another.
const SUBJECTS: [&str; 13] = [
    "i want to ",
    "i'd like to ",
    "i try to ",
    "i will ",
    "i'll ",
    "we will ",
    "we'll ",
    "let's ",
    "lets ",
    "i ",
    "we ",
    "我们",
    "我",
];

/// `t` and `lower` (`t` lower-cased) without a leading [`SUBJECTS`] word,
/// trimmed; unchanged when no command would be left ("I", "I will").
fn without_subject<'a, 'b>(t: &'a str, lower: &'b str) -> (&'a str, &'b str) {
    // Every subject starts with one of these: most messages are passed
    // over at their first letter.
    if !lower.starts_with(['i', 'w', 'l', '我']) {
        return (t, lower);
    }
    SUBJECTS
        .iter()
        .find_map(|p| {
            let rest_lower = lower.strip_prefix(p)?;
            // The prefixes are ASCII or Chinese, whose letters keep their
            // length when lower-cased, so the same bytes of `t` are them
            // and the rest of `lower` is its rest lower-cased; checked all
            // the same.
            let rest = t.get(p.len()..)?;
            let (rest, rest_lower) = (rest.trim(), rest_lower.trim());
            (!rest.is_empty() && rest.len() == rest_lower.len()).then_some((rest, rest_lower))
        })
        .unwrap_or((t, lower))
}

/// Reads a player's message. Matching ignores case, surrounding spaces and
/// a leading subject ([`SUBJECTS`]).
fn parse_intent(text: &str) -> Intent {
    let t = text
        .trim()
        .trim_end_matches(['.', '!', '?', '。', '！', '？'])
        .trim();
    let lowered = t.to_lowercase();
    let (t, lower) = without_subject(t, &lowered);
    let after = |prefixes: &[&str]| after_prefix(t, lower, prefixes);
    if let Some(wait) = timed::parse_wait(t, lower) {
        return Intent::Wait(wait);
    }
    if let Some(hidden) = searched_for(t, lower) {
        // What may be hidden is found, or not, by a check, as a game
        // master asks for one (seed 001's "I search the room for traps").
        let reason = format!("Investigation check for {hidden}");
        let reason: String = reason.chars().take(MAX_ROLL_REASON).collect();
        return Intent::Roll("1d20".into(), Some(reason));
    }
    if let Some(act) = parse_act(t, lower) {
        return Intent::Adventure(act);
    }
    if ["help", "commands", "?", "帮助", "命令"].contains(&lower) {
        return Intent::Help;
    }
    if lower.contains("where can i go")
        || lower == "exits"
        || t.contains("我能去哪")
        || t.contains("能去哪")
    {
        return Intent::WhereCanIGo;
    }
    if let Some(rest) = after(&[
        "go to ",
        "walk to ",
        "move to ",
        "head to ",
        "travel to ",
        "go ",
    ]) {
        return Intent::Go(rest);
    }
    if let Some(rest) = after(&["去", "前往", "走到", "移动到"]) {
        return Intent::Go(rest);
    }
    if let Some(rest) = after(&["roll ", "掷骰", "掷"]) {
        let (dice, reason) = dice_and_reason(&rest);
        return Intent::Roll(dice, reason);
    }
    if lower == "explore" || lower == "探索" {
        return Intent::Explore(String::new());
    }
    if let Some(rest) = after(&["explore ", "探索"]) {
        return Intent::Explore(rest);
    }
    if ["status", "stats", "sheet", "状态"].contains(&lower) {
        return Intent::Status;
    }
    if ["map", "site map", "地图"].contains(&lower) {
        return Intent::SiteMap;
    }
    if let Some(rest) = after(&["scout ", "侦察"]) {
        return Intent::Scout(rest);
    }
    if let Some(rest) = after(&["search ", "搜索"]).filter(|r| !r.is_empty()) {
        return Intent::Search(rest);
    }
    Intent::Talk
}

/// What a player searches for, in the player's casing: "search the room
/// for traps" ("I search…" once [`parse_intent`] took its subject), "look
/// around for a hidden door", "check for traps".
/// A bare "search <words>" is a search of the campaign's content instead.
fn searched_for(t: &str, lower: &str) -> Option<String> {
    const SEARCHES: [&str; 9] = [
        "search the room for ",
        "search the area for ",
        "search around for ",
        "search here for ",
        "look around for ",
        "look for ",
        "check the room for ",
        "check for ",
        "inspect the room for ",
    ];
    after_prefix(t, lower, &SEARCHES).filter(|hidden| !hidden.is_empty())
}

/// What follows the first of `prefixes` that `lower` (`t` lower-cased)
/// starts with, trimmed: in the player's own casing, or the lower-cased
/// text where lower-casing changed byte lengths.
fn after_prefix(t: &str, lower: &str, prefixes: &[&str]) -> Option<String> {
    prefixes.iter().find_map(|p| {
        let rest = lower.strip_prefix(p)?;
        Some(t.get(p.len()..).unwrap_or(rest).trim().to_string())
    })
}

/// Longest reason [`Intent::Roll`] passes on: `roll_dice`'s own bound.
const MAX_ROLL_REASON: usize = 200;

/// Splits what follows "roll" into the dice and what they are rolled for:
/// `1d20 + 5 for Perception` is `1d20+5` for `Perception`, `2d6 to hit the
/// goblin` is `2d6` for `to hit the goblin`. The dice are the text made
/// only of digits, `d`, `+`, `-` and spaces at the start, up to the end of
/// its last whole word; when that leaves nothing (`dice`,
/// `1d20+5forstealth`), the whole text is passed on as the expression, for
/// `roll_dice` to refuse with its reason. A reason longer than `roll_dice`
/// takes is cut to its first [`MAX_ROLL_REASON`] characters.
fn dice_and_reason(rest: &str) -> (String, Option<String>) {
    let is_dice = |c: char| c.is_ascii_digit() || matches!(c, 'd' | 'D' | '+' | '-' | ' ');
    let mut end = rest.find(|c: char| !is_dice(c)).unwrap_or(rest.len());
    if rest[end..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
        // The run ends inside a word ("1d20 + 5 dex"): that word is not dice.
        end = rest[..end].rfind(' ').unwrap_or(0);
    }
    let (dice, tail) = rest.split_at(end);
    let dice = dice.trim();
    if dice.is_empty() {
        return (rest.replace(' ', ""), None);
    }
    // "roll 1d6, for luck": the comma is no part of the reason.
    let tail = tail.trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, ',' | ';' | ':' | '，' | '：')
    });
    let tail = tail.trim();
    let lower = tail.to_lowercase();
    let reason = ["for ", "用于", "来", "做"]
        .iter()
        .find_map(|p| lower.strip_prefix(p).and(tail.get(p.len()..)))
        .unwrap_or(tail)
        .trim();
    let reason = (!reason.is_empty()).then(|| reason.chars().take(MAX_ROLL_REASON).collect());
    (dice.replace(' ', ""), reason)
}

/// Reads an adventure command (`t` trimmed, `lower` its lower case).
fn parse_act(t: &str, lower: &str) -> Option<Act> {
    const LOOK: [&str; 12] = [
        "look",
        "look around",
        "l",
        "look at the room",
        "where am i",
        "describe",
        "看看",
        "环顾四周",
        "四处看看",
        "看看四周",
        "观察",
        "这是哪里",
    ];
    if LOOK.contains(&lower) {
        return Some(Act::Look);
    }
    let rest = |prefixes: &[&str]| -> Option<String> {
        prefixes.iter().find_map(|p| {
            lower.strip_prefix(p)?;
            let rest = t.get(p.len()..)?.trim();
            (!rest.is_empty()).then(|| rest.to_owned())
        })
    };
    if let Some(who) = rest(&[
        "talk to ",
        "talk with ",
        "speak to ",
        "speak with ",
        "greet ",
    ]) {
        return Some(Act::TalkTo(who));
    }
    // 和<NPC>说话 / 跟<NPC>交谈 / 与<NPC>聊天.
    for p in ["和", "跟", "与", "同"] {
        if let Some(middle) = t.strip_prefix(p) {
            for s in ["说话", "交谈", "聊天", "谈谈", "说说话"] {
                if let Some(who) = middle
                    .strip_suffix(s)
                    .map(str::trim)
                    .filter(|w| !w.is_empty())
                {
                    return Some(Act::TalkTo(who.to_owned()));
                }
            }
        }
    }
    if let Some(what) = rest(&[
        "take ", "pick up ", "grab ", "get ", "拿起", "捡起", "拾起", "拿",
    ]) {
        return Some(Act::Take(what));
    }
    if let Some(what) = rest(&["use ", "drink ", "pour ", "使用", "用", "喝"]) {
        return Some(Act::Use(what));
    }
    if let Some(whom) = rest(&["attack ", "fight ", "hit ", "strike ", "攻击"]) {
        return Some(Act::Attack(whom));
    }
    None
}

/// Finds an area in the context by id, then by a whole name (its name, its
/// Chinese name from `zh_names`, or the short name the map shows a
/// generated place by), then by part of a name. Where the words name
/// several places equally well, a neighbour wins, then the nearest (the
/// context lists areas nearest first): a "Flooded Stair" next door is the
/// one meant, not another far away (`map_generate` gives no short name
/// another place has, but a campaign or an older save may).
fn resolve_area(
    context: &Value,
    wanted: &str,
    zh_names: &HashMap<String, (String, String)>,
) -> Option<String> {
    let lower = without_article(wanted).to_lowercase();
    if lower.is_empty() {
        return None;
    }
    let areas = context["areas"].as_array()?;
    let reachable = context["current_area"]["reachable"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let field = |a: &Value, f: &str| a[f].as_str().unwrap_or_default().to_lowercase();
    let zh = |a: &Value| {
        zh_names
            .get(a["area_id"].as_str().unwrap_or_default())
            .map(|(name, _)| name.to_lowercase())
            .unwrap_or_default()
    };
    let whole =
        |a: &Value| field(a, "name") == lower || zh(a) == lower || field(a, "short_name") == lower;
    let partial = |a: &Value| names(&lower, &field(a, "name")) || names(&lower, &zh(a));
    let best = |fits: &dyn Fn(&Value) -> bool| {
        reachable
            .iter()
            .find(|a| fits(a))
            .or_else(|| areas.iter().find(|a| fits(a)))
    };
    areas
        .iter()
        .find(|a| field(a, "area_id") == lower)
        .or_else(|| best(&whole))
        .or_else(|| best(&partial))
        .and_then(|a| a["area_id"].as_str().map(str::to_owned))
}

/// Narrates what this turn's tools did, from what the player's commands
/// asked for ([`Asked`]).
fn narrate_results(
    context: &Value,
    results: &[(&str, &Value)],
    intents: &[Intent],
    zh: bool,
) -> ModelReply {
    let names = adventure::zh_names(results);
    let asked = Asked {
        unknown: intents.iter().find_map(|i| match i {
            Intent::Go(target) if resolve_area(context, target, &names).is_none() => {
                Some(target.as_str())
            }
            _ => None,
        }),
        targets: intents
            .iter()
            .filter_map(|i| match i {
                Intent::Go(target) => resolve_area(context, target, &names),
                _ => None,
            })
            .collect(),
        dice: intents
            .iter()
            .filter_map(|i| match i {
                Intent::Roll(expr, _) => Some(expr.as_str()),
                _ => None,
            })
            .collect(),
        waits: intents
            .iter()
            .filter_map(|i| match i {
                Intent::Wait(wait) => Some(wait),
                _ => None,
            })
            .collect(),
    };
    narrate::results(context, results, &asked, names, zh)
}

impl OfflineGameMaster {
    /// A game master that waits `latency` before each answer, as a remote
    /// model would.
    pub fn with_latency(latency: Duration) -> Self {
        Self { latency }
    }

    /// How long it waits before each answer.
    pub fn latency(&self) -> Duration {
        self.latency
    }

    fn answer(&self, req: &ModelRequest) -> ModelReply {
        // The current turn is everything after the last player message.
        let start = req
            .messages
            .iter()
            .rposition(|m| matches!(**m, HistoryEntry::User { .. }));
        let Some(start) = start else {
            return ModelReply::narrate("The story waits for you. 故事在等待你。");
        };
        let HistoryEntry::User { text, .. } = &*req.messages[start] else {
            return ModelReply::default();
        };
        let zh = has_cjk(text);
        let turn = &req.messages[start + 1..];
        let entries: Vec<(&str, &str)> = turn
            .iter()
            .filter_map(|m| match &**m {
                HistoryEntry::ToolResult { tool, content, .. } => {
                    Some((tool.as_str(), content.as_str()))
                }
                _ => None,
            })
            .collect();
        // A session hands over its calls' results as the values they are
        // (one per entry); other callers' entries are read.
        let read: Vec<Value>;
        let values: Vec<&Value> = if req.results.len() == entries.len() {
            req.results.iter().map(|v| &**v).collect()
        } else {
            read = entries
                .iter()
                .map(|(_, content)| serde_json::from_str(content).unwrap_or(Value::Null))
                .collect();
            read.iter().collect()
        };
        // A call a person did not approve is told by what it would have
        // done: its result gets the call's arguments beside it.
        let stayed = with_denied_args(turn, &values);
        let values = values
            .iter()
            .zip(&stayed)
            .map(|(v, s)| s.as_ref().unwrap_or(*v));
        let results: Vec<(&str, &Value)> =
            entries.iter().map(|(tool, _)| *tool).zip(values).collect();
        if let Some((event, note)) = read_world_message(text) {
            // A timer is due: the world's own turn, told from its note.
            let may_call = req.kind != RequestKind::WrapUp;
            return match timed::world_turn(event, note, &results, may_call) {
                timed::WorldStep::Calls(calls) => tool_calls(calls, results.len()),
                timed::WorldStep::Say(text) => ModelReply::narrate(text),
            };
        }
        if let Some(actions) = round_actions(text) {
            return answer_round(req, &actions, &results);
        }
        // The context's active character is the speaker's: in a party the
        // game master plays for whoever spoke.
        let actor = req.context["active_actor"]["character_id"]
            .as_str()
            .unwrap_or_default();
        match turn_step(&req.context, req.kind, text, actor, &results, zh) {
            Step::Calls(calls) => tool_calls(calls, results.len()),
            Step::Reply(reply) => reply,
        }
    }
}

/// For each result of `turn` refused with `APPROVAL_DENIED`, a copy of it
/// with the arguments of its call as `args`; `None` for the others. The
/// n-th value answers the n-th result entry of the turn.
fn with_denied_args(turn: &[Arc<HistoryEntry>], values: &[&Value]) -> Vec<Option<Value>> {
    let call_ids = turn.iter().filter_map(|m| match &**m {
        HistoryEntry::ToolResult { call_id, .. } => Some(call_id),
        _ => None,
    });
    values
        .iter()
        .zip(call_ids)
        .map(|(v, call_id)| {
            if v["error_code"] != APPROVAL_DENIED {
                return None;
            }
            let args = turn.iter().find_map(|m| match &**m {
                HistoryEntry::ToolCall {
                    call_id: c,
                    arguments,
                    ..
                } if c == call_id => serde_json::from_str::<Value>(arguments).ok(),
                _ => None,
            })?;
            let mut copy = (*v).clone();
            copy["args"] = args;
            Some(copy)
        })
        .collect()
}

/// What a turn does next: ask for tools, or answer.
enum Step {
    Calls(Vec<Asks>),
    Reply(ModelReply),
}

/// The next step of one character's turn: `actor` says `text`, and the
/// turn's tools so far returned `results`. A free turn is one of these;
/// a round is one for each seat that acted, side by side.
fn turn_step(
    context: &Value,
    kind: RequestKind,
    text: &str,
    actor: &str,
    results: &[(&str, &Value)],
    zh: bool,
) -> Step {
    let intents = parse_intents(text);
    if kind == RequestKind::WrapUp {
        return Step::Reply(if results.is_empty() {
            talk(context, text, zh)
        } else {
            narrate_results(context, results, &intents.unwrap_or_default(), zh)
        });
    }
    let Some(intents) = intents else {
        return Step::Reply(too_many_commands(zh));
    };
    if let Some(wait) = intents.iter().find_map(|i| match i {
        Intent::Wait(wait) if !wait.in_range() => Some(wait),
        _ => None,
    }) {
        // Past what a timer may wait: said in words, nothing scheduled.
        return Step::Reply(ModelReply::narrate(wait.out_of_range()));
    }
    if context.is_null() && !results.is_empty() {
        // No session (the stateless chat API), and the caller's app ran
        // the tools: what they did is told, whatever the words asked.
        return Step::Reply(narrate_results(context, results, &intents, zh));
    }
    if context.is_null()
        && !intents
            .iter()
            .all(|i| matches!(i, Intent::Roll(..) | Intent::Talk | Intent::Help))
    {
        // No session (the stateless chat API): no map to act on.
        return Step::Reply(ModelReply::narrate(if zh {
            "这里没有游戏会话，我看不到地图；请开始一个会话来移动和探索。可以试试“掷 2d6+1”。"
        } else {
            "There is no game session here, so I cannot see the map; start a session to move \
             and explore. You can still try \"roll 2d6+1\"."
        }));
    }
    if let [Intent::Adventure(act)] = intents.as_slice() {
        // A timer the act starts is the world's flourish: the act stands
        // without it (a game whose tools do not include it, a full timer
        // list), so its refusal is not the act's failure.
        let failures: Vec<(&str, &Value)> = results
            .iter()
            .filter(|(t, r)| failed(r) && *t != "schedule_event")
            .copied()
            .collect();
        if !failures.is_empty() {
            // The survey's results are the game master's own reading:
            // only what went wrong is told (the names read this turn
            // name things in it).
            let listings = results.iter().filter(|(t, r)| adventure::is_listing(t, r));
            let told: Vec<(&str, &Value)> = failures.into_iter().chain(listings.copied()).collect();
            return Step::Reply(narrate_results(context, &told, &intents, zh));
        }
        return match adventure::next(act, context, results, actor, zh) {
            Next::Calls(calls) => Step::Calls(calls),
            Next::Say(text, dialog_type) => Step::Reply(ModelReply {
                text,
                dialog_type: Some(dialog_type.into()),
                ..ModelReply::default()
            }),
        };
    }
    if intents.len() > 1 && intents.iter().any(|i| matches!(i, Intent::Adventure(_))) {
        return Step::Reply(ModelReply::narrate(if zh {
            "看、说话、拿、使用和攻击请一次只做一件，单独发送。"
        } else {
            "Look, talk, take, use and attack one at a time, each in its own message."
        }));
    }
    let zh_names = adventure::zh_names(results);
    let only_lookups = results.iter().all(|(t, r)| adventure::is_listing(t, r));
    if !only_lookups {
        if zh && names_things(results) && !adventure::zh_listed(results) {
            // Name places, people and things in Chinese when the
            // campaign has the names.
            return Step::Calls(vec![adventure::listing(adventure::NAME_ZH_TYPE)]);
        }
        let unknown = intents.iter().any(|i| match i {
            Intent::Go(target) => resolve_area(context, target, &zh_names).is_none(),
            _ => false,
        });
        if unknown && map_holds_more(context) && !results.iter().any(|(t, _)| *t == "get_site_map")
        {
            // A place farther than the context names (a click on the
            // map's far side): the whole map says where it lies.
            return Step::Calls(vec![far_lookup()]);
        }
        return Step::Reply(narrate_results(context, results, &intents, zh));
    }
    if zh
        && results.is_empty()
        && intents.iter().any(|i| match i {
            Intent::Go(target) => resolve_area(context, target, &zh_names).is_none(),
            _ => false,
        })
    {
        // A place named in Chinese: read the campaign's Chinese names first.
        return Step::Calls(vec![adventure::listing(adventure::NAME_ZH_TYPE)]);
    }
    let mut calls = Vec::with_capacity(intents.len());
    for intent in intents {
        let Some(call) = tool_for(context, actor, intent, &zh_names, zh) else {
            return Step::Reply(talk(context, text, zh));
        };
        calls.push(call);
    }
    Step::Calls(calls)
}

/// One tool call asked for: the tool and its arguments.
type Asks = (&'static str, Value);

/// One seat's action in a round's message: who (name, character) and what.
struct RoundAction<'t> {
    name: &'t str,
    character_id: &'t str,
    text: &'t str,
}

/// The actions of a round's message (the session writes it: a first line
/// `Round N: …`, then `Name (character_id): text` a seat); `None` for any
/// other message. Seats that did not act are left out.
fn round_actions(text: &str) -> Option<Vec<RoundAction<'_>>> {
    let mut lines = text.lines();
    let head = lines.next()?;
    if !(head.starts_with("Round ") && head.contains("resolve these actions together")) {
        return None;
    }
    let actions = lines
        .filter_map(|line| {
            let (who, what) = line.split_once("): ")?;
            let (name, character_id) = who.rsplit_once(" (")?;
            let text = what.trim();
            (text != "(no action)").then_some(RoundAction {
                name,
                character_id,
                text,
            })
        })
        .collect();
    Some(actions)
}

/// Tools that only read: one call serves every seat that asks for it in
/// the same answer (three seats looking around read the map once).
const READ_ONLY: [&str; 5] = [
    "get_character_stats",
    "get_site_map",
    "search_content",
    "move_options",
    "get_npc_profile",
];

/// A round's turn: each seat's action is played as that seat's own free
/// turn would play it ([`turn_step`]), for its character and in the
/// round's language, all side by side: each answer asks for the next calls
/// of every seat still acting (a read asked by several seats once), so the
/// round takes as many model calls as its longest act, not their sum. Then
/// one narration tells every seat's part, each under its name; free words
/// are told as the seat said them.
///
/// Nothing is kept between answers: the turn's results are dealt out
/// again each time by playing the seats' steps over from the start, in
/// the order they were asked for (the session runs an answer's calls in
/// order, and a long answer's rest in the next one).
fn answer_round(
    req: &ModelRequest,
    actions: &[RoundAction<'_>],
    results: &[(&str, &Value)],
) -> ModelReply {
    let zh = actions.iter().any(|a| has_cjk(a.text));
    let contexts: Vec<Value> = actions
        .iter()
        .map(|a| seat_context(&req.context, a.character_id))
        .collect();
    let mut own: Vec<Vec<(&str, &Value)>> = vec![Vec::new(); actions.len()];
    let mut told: Vec<Option<String>> = vec![None; actions.len()];
    let mut at = 0;
    loop {
        let mut batch: Vec<Asks> = Vec::new();
        let mut wants: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, a) in actions.iter().enumerate() {
            if told[i].is_some() {
                continue;
            }
            let only_words = parse_intents(a.text)
                .is_some_and(|i| i.iter().all(|i| matches!(i, Intent::Talk | Intent::Help)));
            let step = if only_words {
                Step::Reply(ModelReply::narrate(a.text))
            } else {
                turn_step(&contexts[i], req.kind, a.text, a.character_id, &own[i], zh)
            };
            match step {
                Step::Reply(reply) => told[i] = Some(reply.text),
                Step::Calls(calls) => {
                    let at_batch = calls.into_iter().map(|call| {
                        let shared = READ_ONLY
                            .contains(&call.0)
                            .then(|| batch.iter().position(|c| *c == call))
                            .flatten();
                        shared.unwrap_or_else(|| {
                            batch.push(call);
                            batch.len() - 1
                        })
                    });
                    let at_batch = at_batch.collect();
                    wants.push((i, at_batch));
                }
            }
        }
        if batch.is_empty() {
            break;
        }
        let arrived = results.len() - at;
        if arrived < batch.len() {
            if req.kind == RequestKind::WrapUp {
                // No more tools: whoever is still acting is told from
                // what their act learnt so far.
                for (i, _) in wants {
                    let a = &actions[i];
                    let step =
                        turn_step(&contexts[i], req.kind, a.text, a.character_id, &own[i], zh);
                    told[i] = Some(match step {
                        Step::Reply(reply) => reply.text,
                        Step::Calls(_) => a.text.to_owned(),
                    });
                }
                break;
            }
            return tool_calls(batch.split_off(arrived), results.len());
        }
        for (i, at_batch) in wants {
            own[i].extend(at_batch.into_iter().map(|j| results[at + j]));
        }
        at += batch.len();
    }
    let parts: Vec<String> = actions
        .iter()
        .zip(told)
        .map(|(a, told)| {
            let told = told.unwrap_or_else(|| a.text.to_owned());
            if zh {
                format!("{}：{told}", a.name)
            } else {
                format!("{}: {told}", a.name)
            }
        })
        .collect();
    if parts.is_empty() {
        return ModelReply::narrate(if zh {
            "这一轮无人行动。"
        } else {
            "No one acted this round."
        });
    }
    ModelReply::narrate(parts.join("\n\n"))
}

/// The context as `character_id`'s own turn would read it: they are the
/// active character, standing where the context's `party` says. The
/// place's description is the context's only when they stand where its
/// active character does; elsewhere the place is named.
fn seat_context(context: &Value, character_id: &str) -> Value {
    let mut seat = context.clone();
    if context["active_actor"]["character_id"] == character_id {
        return seat;
    }
    let member = context["party"]
        .as_array()
        .and_then(|p| p.iter().find(|m| m["character_id"] == character_id));
    let area_id = member.map_or(&Value::Null, |m| &m["area_id"]);
    seat["active_actor"] = json!({"character_id": character_id, "area_id": area_id});
    if context["current_area"]["area_id"] != *area_id {
        let area = context["areas"]
            .as_array()
            .and_then(|areas| areas.iter().find(|a| a["area_id"] == *area_id));
        seat["current_area"] = area.cloned().unwrap_or_else(|| json!({"area_id": area_id}));
    }
    seat
}

/// A reply asking for `calls`, numbered on from the `before` results the
/// turn already has.
fn tool_calls(calls: Vec<(&'static str, Value)>, before: usize) -> ModelReply {
    ModelReply {
        tool_calls: calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, args))| ModelToolCall {
                id: CallId::from(format!("call_{}", before + i + 1)),
                name: name.into(),
                arguments: crate::json::text(&args),
            })
            .collect(),
        ..ModelReply::default()
    }
}

/// The tool call that carries out a command (`None` for talk).
fn tool_for(
    context: &Value,
    actor: &str,
    intent: Intent,
    zh_names: &HashMap<String, (String, String)>,
    zh: bool,
) -> Option<(&'static str, Value)> {
    let call = |name, args| Some((name, args));
    // New places are named in the player's language, even with no theme.
    let language = if zh { "zh" } else { "en" };
    match intent {
        Intent::Go(target) => match resolve_area(context, &target, zh_names) {
            Some(area_id) => call("move", json!({"actor_id": actor, "to_area_id": area_id})),
            // An unclear target: show the ways out, move nowhere yet.
            None => call("move_options", json!({"actor_id": actor})),
        },
        Intent::WhereCanIGo => call("move_options", json!({"actor_id": actor})),
        // roll_dice requires a reason; a bare "roll 1d6" says no more than this.
        Intent::Roll(expr, reason) => call(
            "roll_dice",
            json!({"dice": expr, "reason": reason.as_deref().unwrap_or("the player's roll")}),
        ),
        Intent::Explore(theme) => {
            let from = context["current_area"]["area_id"]
                .as_str()
                .unwrap_or_default();
            call(
                "map_generate",
                json!({"parent_area_id": from, "theme": theme, "language": language}),
            )
        }
        Intent::Status => call("get_character_stats", json!({"character_id": actor})),
        Intent::Scout(prompt) => {
            let session = context["session_id"].as_str().unwrap_or_default();
            let prompt = match (prompt.is_empty(), zh) {
                (false, _) => prompt,
                (true, false) => "the wilds".to_owned(),
                (true, true) => "荒野".to_owned(),
            };
            call(
                "generate_zone",
                json!({"session_id": session, "world_prompt": prompt, "count": 1, "language": language}),
            )
        }
        Intent::Search(query) => call("search_content", json!({"query": query})),
        Intent::SiteMap => call("get_site_map", json!({})),
        Intent::Wait(wait) => Some(wait.call()),
        Intent::Adventure(_) | Intent::Help | Intent::Talk => None,
    }
}

/// The answer to a message that joins more than [`MAX_COMMANDS_PER_MESSAGE`]
/// commands: nothing runs, and the player learns why.
fn too_many_commands(zh: bool) -> ModelReply {
    let text = if zh {
        format!(
            "我一次最多只能做 {MAX_COMMANDS_PER_MESSAGE} 件事，这条消息要求的更多，所以一件也没有做。请分几条消息发送。"
        )
    } else {
        format!(
            "I can do at most {MAX_COMMANDS_PER_MESSAGE} things at once, and that message asks for \
             more, so I did none of them. Send them in a few messages."
        )
    };
    ModelReply {
        text,
        dialog_type: Some("narration".into()),
        ..ModelReply::default()
    }
}

/// The commands, for hints.
const COMMANDS_EN: &str = "\"look\", \"talk to <someone>\", \"take <item>\", \"use <item>\", \
    \"attack <foe>\", \"go to <place>\", \"where can I go\", \"roll 2d6+1\", \"search <words>\", \
    \"explore <theme>\", \"scout <land>\", \"status\", \"map\", \"wait 10 minutes\" or \
    \"remind me in 30 seconds to <something>\"";
const COMMANDS_ZH: &str = "“看看”、“和<某人>说话”、“拿 <物品>”、“使用 <物品>”、“攻击 <敌人>”、\
    “去 <地点>”、“我能去哪”、“掷 2d6+1”、“搜索 <词>”、“探索 <主题>”、“侦察 <地域>”、“状态”、“地图”、“等 10 分钟”或“30秒后提醒我<某事>”";

/// The answer to words outside the commands: something in the world that
/// fits them, deterministic, and a hint of what to try.
fn talk(context: &Value, text: &str, zh: bool) -> ModelReply {
    let here = &context["current_area"];
    let area = here["name"]
        .as_str()
        .unwrap_or(if zh { "黑暗中" } else { "the dark" });
    let lower = text.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    let reply = if parse_intent(text) == Intent::Help {
        if zh {
            format!("你可以说：{COMMANDS_ZH}。")
        } else {
            format!("You can say: {COMMANDS_EN}.")
        }
    } else if zh {
        let line = if has(&["你好", "喂", "有人"]) {
            "你的声音在石墙间回荡。想和谁说话，就说“和<某人>说话”；先“看看”这里有谁。"
        } else if has(&["任务", "帮忙", "做什么", "怎么办"]) {
            "也许这里的人知道该做什么：先“看看”，再“和<某人>说话”，或“搜索 灯油”。"
        } else if has(&["捡", "拿", "偷", "摸"]) {
            "想拿东西，就说“拿 <物品>”；“看看”会告诉你这里有什么。"
        } else {
            const LINES: [&str; 3] = [
                "灯影摇曳，四周一片寂静。",
                "远处传来水滴声，仿佛有什么在等待。",
                "你的话在石墙间回荡，无人应答。",
            ];
            LINES[word_hash(text) % LINES.len()]
        };
        // The context names places in English: a Chinese answer names
        // the place only when its name is Chinese already (reading the
        // campaign's Chinese names would cost a tool call for a word).
        if has_cjk(area) {
            format!("你在{area}。{line}可以说“帮助”看全部命令。")
        } else {
            format!("{line}可以说“帮助”看全部命令。")
        }
    } else {
        let line = if has(&["hello", "hi ", "hey", "anyone", "greet"]) || lower == "hi" {
            "Your voice carries over the water. To speak with someone, say \"talk to <name>\"; \"look\" shows who is here."
        } else if has(&["quest", "what should", "what now", "help me", "what do i"]) {
            "Someone here may know what needs doing: \"look\", then \"talk to <name>\", or \"search oil\"."
        } else if has(&["pick", "steal", "grab", "loot"]) {
            "To take something, say \"take <item>\"; \"look\" tells you what lies here."
        } else if has(&["kill", "punch", "kick", "stab", "fight"]) {
            "To fight, say \"attack <foe>\"; the dice decide every blow."
        } else {
            const LINES: [&str; 3] = [
                "Lantern light flickers; the silence listens.",
                "Somewhere water drips, patient as a held breath.",
                "Your words echo off the old stone and fade.",
            ];
            LINES[word_hash(text) % LINES.len()]
        };
        format!("You are in {area}. {line} Say \"help\" for everything you can do.")
    };
    ModelReply {
        text: reply,
        dialog_type: Some("narration".into()),
        ..ModelReply::default()
    }
}

fn word_hash(text: &str) -> usize {
    text.bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize))
}

impl Provider for OfflineGameMaster {
    fn name(&self) -> &str {
        "offline"
    }

    fn budgeted(&self) -> bool {
        false
    }

    /// Its rules read the turn's messages and the context only.
    fn reads_conversation(&self) -> bool {
        false
    }

    fn answers_at_once(&self) -> bool {
        self.latency.is_zero()
    }

    fn complete(&self, request: ModelRequest) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
        let reply = self.answer(&request);
        let mut events: Vec<Result<ModelEvent, LlmError>> = sentence_deltas(&reply.text)
            .into_iter()
            .map(|d| Ok(ModelEvent::Delta(d)))
            .collect();
        events.push(Ok(ModelEvent::Done(reply)));
        if self.latency.is_zero() {
            return stream::iter(events).boxed();
        }
        let latency = self.latency;
        stream::once(async move {
            tokio::time::sleep(latency).await;
            stream::iter(events)
        })
        .flatten()
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn every_subject_starts_with_a_letter_the_quick_check_knows() {
        for subject in SUBJECTS {
            assert!(subject.starts_with(['i', 'w', 'l', '我']), "{subject}");
        }
    }

    #[test]
    fn intents_in_english_and_chinese() {
        let cases = [
            ("go to Side Room", Intent::Go("Side Room".into())),
            // The contract's own example (§2), and a subject before others.
            ("I go to the side room", Intent::Go("the side room".into())),
            ("We'll head to the Hall.", Intent::Go("the Hall".into())),
            ("I want to roll 1d6", Intent::Roll("1d6".into(), None)),
            ("我去 侧室", Intent::Go("侧室".into())),
            ("I", Intent::Talk),
            ("I think so", Intent::Talk),
            ("Go to area_002.", Intent::Go("area_002".into())),
            ("去 侧室", Intent::Go("侧室".into())),
            ("去area_002", Intent::Go("area_002".into())),
            ("Where can I go?", Intent::WhereCanIGo),
            ("我能去哪？", Intent::WhereCanIGo),
            ("roll 2d6+1", Intent::Roll("2d6+1".into(), None)),
            ("掷 2d6+1", Intent::Roll("2d6+1".into(), None)),
            (
                "roll 1d20+5 for Perception",
                Intent::Roll("1d20+5".into(), Some("Perception".into())),
            ),
            (
                "Roll 1d20 + 5 for stealth.",
                Intent::Roll("1d20+5".into(), Some("stealth".into())),
            ),
            (
                "roll 2d6 to hit the goblin",
                Intent::Roll("2d6".into(), Some("to hit the goblin".into())),
            ),
            (
                "roll 1d20 + 5 dex",
                Intent::Roll("1d20+5".into(), Some("dex".into())),
            ),
            (
                "掷 1d20+5 察觉检定",
                Intent::Roll("1d20+5".into(), Some("察觉检定".into())),
            ),
            (
                "掷1d20+5来察觉",
                Intent::Roll("1d20+5".into(), Some("察觉".into())),
            ),
            (
                "roll 1d6, for luck",
                Intent::Roll("1d6".into(), Some("luck".into())),
            ),
            // No dice at the start: passed on whole, for roll_dice to refuse.
            ("roll dice", Intent::Roll("dice".into(), None)),
            (
                "roll 1d20+5forstealth",
                Intent::Roll("1d20+5forstealth".into(), None),
            ),
            (
                "explore crystal caves",
                Intent::Explore("crystal caves".into()),
            ),
            ("探索 水晶洞穴", Intent::Explore("水晶洞穴".into())),
            ("status", Intent::Status),
            ("状态", Intent::Status),
            ("scout misty marsh", Intent::Scout("misty marsh".into())),
            ("侦察 迷雾沼泽", Intent::Scout("迷雾沼泽".into())),
            ("search lantern oil", Intent::Search("lantern oil".into())),
            (
                "I search the room for traps",
                Intent::Roll("1d20".into(), Some("Investigation check for traps".into())),
            ),
            (
                "look for a Hidden Door.",
                Intent::Roll(
                    "1d20".into(),
                    Some("Investigation check for a Hidden Door".into()),
                ),
            ),
            ("搜索 灯笼", Intent::Search("灯笼".into())),
            ("map", Intent::SiteMap),
            ("地图", Intent::SiteMap),
            ("hello there", Intent::Talk),
            ("你好", Intent::Talk),
        ];
        for (text, intent) in cases {
            assert_eq!(parse_intent(text), intent, "{text}");
        }
    }

    fn request(text: &str) -> ModelRequest {
        ModelRequest {
            system: String::new(),
            messages: vec![Arc::new(HistoryEntry::User {
                turn_id: "turn_1".into(),
                text: text.into(),
                seat_id: None,
            })],
            tools: Default::default(),
            context: Arc::new(json!({
                "active_actor": {"character_id": "pc_001"},
                "current_area": {"area_id": "area_001", "name": "Hall", "reachable": [{"area_id": "area_002", "name": "Side Room"}]},
                "areas": [{"area_id": "area_001", "name": "Hall"}, {"area_id": "area_002", "name": "Side Room"}]
            })),
            kind: RequestKind::Step,
            fallback: false,
            results: Vec::new(),
        }
    }

    #[test]
    fn a_round_is_played_for_each_seat_and_told_together() {
        let text = "Round 2: resolve these actions together, in this order.\n\
                    Ayla (pc_001): go to the side room\n\
                    Brin (pc_002): roll 1d20\n\
                    Cara (pc_003): (no action)";
        let mut req = request(text);
        let gm = OfflineGameMaster::default();
        let asked = gm.answer(&req);
        let calls: Vec<(&str, Value)> = asked
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), serde_json::from_str(&c.arguments).unwrap()))
            .collect();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0].0, "move");
        assert_eq!(calls[0].1["actor_id"], "pc_001", "Ayla's move is Ayla's");
        assert_eq!(calls[1].0, "roll_dice");
        answered(
            &mut req,
            "move",
            json!({"actor_id": "pc_001", "from_area_id": "area_001", "to_area_id": "area_002",
            "area": {"area_id": "area_002", "name": "Great Hall"}, "reachable_area_ids": []}),
        );
        answered(
            &mut req,
            "roll_dice",
            json!({"dice": "1d20", "rolls": [12], "modifier": 0, "total": 12}),
        );
        let told = gm.answer(&req).text;
        assert!(
            told.starts_with("Ayla: ") && told.contains("\n\nBrin: "),
            "{told}"
        );
        assert!(
            !told.contains("Cara"),
            "a seat that did not act is not told: {told}"
        );
    }

    /// A round of the demo played as a session plays it: every call the
    /// game master asks for runs on `state` (its effect applied) until it
    /// narrates, within 8 model calls (`QUESTD_MAX_ITERATIONS`' default).
    /// Answers the calls, (tool, arguments), and the narration.
    fn play_round(
        state: &mut crate::game::GameState,
        lines: &[(&str, &str, &str)],
    ) -> (Vec<(String, Value)>, String) {
        use crate::tools::Role;
        use crate::tools::test_support::pipeline;
        let mut text = "Round 1: resolve these actions together, in this order.".to_owned();
        for (name, character, act) in lines {
            text.push_str(&format!("\n{name} ({character}): {act}"));
        }
        let mut req = request(&text);
        let mut calls = Vec::new();
        for _ in 0..8 {
            req.context = Arc::new(adventure::tests::context_for(state, lines[0].1));
            let reply = OfflineGameMaster::default().answer(&req);
            if reply.tool_calls.is_empty() {
                return (calls, reply.text);
            }
            for call in reply.tool_calls {
                let args: Value = serde_json::from_str(&call.arguments).unwrap();
                let out = pipeline(&call.name, state, args.clone(), Role::GameMaster)
                    .unwrap_or_else(|e| panic!("{}: {e}", call.name));
                if let Some(effect) = &out.effect {
                    state.apply(effect);
                }
                answered(&mut req, &call.name, out.result);
                calls.push((call.name, args));
            }
        }
        panic!("the round never narrates: {calls:?}");
    }

    #[test]
    fn every_act_of_a_round_is_its_seats_own() {
        use crate::tools::test_support::{demo, pipeline, seat};
        for zh in [false, true] {
            let mut state = demo();
            let out = pipeline(
                "move",
                &state,
                json!({"actor_id": "pc_001", "to_area_id": "area_002"}),
                crate::tools::Role::GameMaster,
            )
            .expect("Ayla walks to the alcove");
            state.apply(out.effect.as_ref().expect("a move"));
            seat(&mut state, 2, "Brin", "area_002");
            seat(&mut state, 3, "Cara", "area_002");
            let acts = if zh {
                [
                    ("艾拉", "pc_001", "和老玛伦说话"),
                    ("Brin", "pc_002", "攻击 老玛伦"),
                    ("Cara", "pc_003", "拿 灯芯"),
                ]
            } else {
                [
                    ("Ayla", "pc_001", "talk to maren"),
                    ("Brin", "pc_002", "attack old maren"),
                    ("Cara", "pc_003", "take the wicks"),
                ]
            };
            let (calls, told) = play_round(&mut state, &acts);
            let asked =
                |tool: &'static str| calls.iter().filter(move |(t, _)| t == tool).map(|(_, a)| a);
            assert!(
                asked("get_npc_profile").any(|a| a["npc_id"] == "npc_001"),
                "Ayla talks to Maren: {calls:?}"
            );
            assert!(
                asked("roll_dice").any(|a| a["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("Brin attacks")),
                "Brin's attack is rolled as Brin's: {calls:?}"
            );
            assert!(
                asked("hp_delta").all(|a| ["npc_001", "pc_002"]
                    .contains(&a["target_character_id"].as_str().unwrap_or_default())),
                "only Brin and Maren are hurt: {calls:?}"
            );
            let taken: Vec<&Value> = asked("add_inventory").collect();
            assert!(
                taken.len() == 1 && taken[0]["character_id"] == "pc_003",
                "Cara takes the wicks: {calls:?}"
            );
            let cara = state.character("pc_003").expect("Cara");
            assert!(
                cara.inventory.iter().any(|i| i.slug == "wick_bundle"),
                "{told}"
            );
            let sep = if zh { "：" } else { ": " };
            for (name, _, _) in acts {
                assert!(
                    told.contains(&format!("{name}{sep}")),
                    "{name} is told: {told}"
                );
            }
            assert!(!told.contains("pc_00"), "names, not ids: {told}");
            assert_eq!(
                has_cjk(&told.replace("Brin", "").replace("Cara", "")),
                zh,
                "{told}"
            );
        }
    }

    #[test]
    fn commands_become_tool_calls() {
        let gm = OfflineGameMaster::default();
        let cases = [
            (
                "go to side room",
                "move",
                json!({"actor_id": "pc_001", "to_area_id": "area_002"}),
            ),
            // The contract's example chat (§2), on its example map (§4).
            (
                "I go to the side room",
                "move",
                json!({"actor_id": "pc_001", "to_area_id": "area_002"}),
            ),
            (
                "去 area_002",
                "move",
                json!({"actor_id": "pc_001", "to_area_id": "area_002"}),
            ),
            (
                "go to the moon",
                "move_options",
                json!({"actor_id": "pc_001"}),
            ),
            (
                "掷 2d6+1",
                "roll_dice",
                json!({"dice": "2d6+1", "reason": "the player's roll"}),
            ),
            (
                "explore ice",
                "map_generate",
                json!({"parent_area_id": "area_001", "theme": "ice", "language": "en"}),
            ),
            (
                "状态",
                "get_character_stats",
                json!({"character_id": "pc_001"}),
            ),
            // The player's language names the new places, theme or not.
            (
                "探索",
                "map_generate",
                json!({"parent_area_id": "area_001", "theme": "", "language": "zh"}),
            ),
            (
                "侦察 迷雾沼泽",
                "generate_zone",
                json!({"session_id": "", "world_prompt": "迷雾沼泽", "count": 1, "language": "zh"}),
            ),
            (
                "侦察",
                "generate_zone",
                json!({"session_id": "", "world_prompt": "荒野", "count": 1, "language": "zh"}),
            ),
        ];
        for (text, tool, args) in cases {
            let reply = gm.answer(&request(text));
            assert_eq!(reply.tool_calls.len(), 1, "{text}");
            assert_eq!(reply.tool_calls[0].name, tool, "{text}");
            let got: Value = serde_json::from_str(&reply.tool_calls[0].arguments).unwrap();
            assert_eq!(got, args, "{text}");
        }
        let chat = gm.answer(&request("hello"));
        assert!(chat.tool_calls.is_empty() && !chat.text.is_empty());
    }

    #[test]
    fn commands_joined_by_then_become_calls_in_order() {
        let gm = OfflineGameMaster::default();
        let names = |text: &str| -> Vec<(String, String)> {
            gm.answer(&request(text))
                .tool_calls
                .into_iter()
                .map(|c| (c.id.to_string(), c.name))
                .collect()
        };
        let pair =
            |a: &str, b: &str| vec![("call_1".into(), a.into()), ("call_2".into(), b.into())];
        assert_eq!(
            names("go to side room then roll 1d20"),
            pair("move", "roll_dice")
        );
        assert_eq!(
            names("Status, then where can I go?"),
            pair("get_character_stats", "move_options")
        );
        assert_eq!(names("去 area_002然后掷 1d20"), pair("move", "roll_dice"));
        assert_eq!(
            names("状态，然后地图"),
            pair("get_character_stats", "get_site_map")
        );
        assert_eq!(names("roll 1d4 then roll 1d6 then status").len(), 3);
        // Part talk: all talk, no tool runs.
        assert!(names("roll 1d20 then sing a song").is_empty());
        assert!(names("and then there were none").is_empty());
        let args: Value = serde_json::from_str(
            &gm.answer(&request("go to side room then roll 1d20"))
                .tool_calls[0]
                .arguments,
        )
        .unwrap();
        assert_eq!(args["to_area_id"], "area_002");
    }

    #[test]
    fn narrates_from_tool_results_in_the_players_language() {
        let mut req = request("去 侧室");
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id: "call_1".into(),
            tool: "move".into(),
            content: json!({"area": {"area_id": "area_009", "name": "Heart Lantern", "description": "A lantern."}}).to_string(),
        }));
        // First the campaign's Chinese names are read, then the move is told.
        let reply = OfflineGameMaster::default().answer(&req);
        assert_eq!(reply.tool_calls.len(), 1);
        let args: Value = serde_json::from_str(&reply.tool_calls[0].arguments).unwrap();
        assert_eq!(args["content_type"], "name_zh");
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id: "call_2".into(),
            tool: "search_content".into(),
            content: json!({"query": "", "items": [
                {"id": "zh_area_009", "content_type": "name_zh", "title": "心灯", "body": "水下的灯。"}
            ]})
            .to_string(),
        }));
        let reply = OfflineGameMaster::default().answer(&req);
        assert!(reply.tool_calls.is_empty());
        assert!(
            reply.text.contains("你来到了心灯。水下的灯。"),
            "{}",
            reply.text
        );
        assert_eq!(reply.dialog_type.as_deref(), Some("scene_description"));
    }

    #[test]
    fn results_handed_over_as_values_are_read_as_they_are() {
        let mut req = request("roll 1d6");
        let rolled = |total: u64| {
            json!({"description": format!("1d6 for the player's roll: [{total}] = {total}"),
                   "dice": "1d6", "modifier": 0, "rolls": [total], "total": total})
        };
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id: "call_1".into(),
            tool: "roll_dice".into(),
            content: rolled(3).to_string(),
        }));
        let gm = OfflineGameMaster::default();
        // The text, when nobody hands over values.
        assert!(gm.answer(&req).text.contains("total 3"));
        // A session hands over the same result as a value, one per entry
        // (different here, to show which is read).
        req.results = vec![Arc::new(rolled(5))];
        assert!(gm.answer(&req).text.contains("total 5"));
        // Not one per entry: the entries are read.
        req.results.push(Arc::new(rolled(6)));
        assert!(gm.answer(&req).text.contains("total 3"));
    }

    #[test]
    fn a_tool_the_caller_ran_is_told_by_its_own_words() {
        // Seed 001's tools run in the caller's app (`POST /api/chat`) and
        // report `success` and `message`.
        let told = |content: Value, zh: bool| {
            if zh {
                return narrate::reported(&content, true);
            }
            // The stateless chat API's request: no session, no context.
            let mut req = request("I drink the potion");
            req.context = Arc::new(Value::Null);
            req.messages.push(Arc::new(HistoryEntry::ToolResult {
                turn_id: "turn_1".into(),
                call_id: "call_1".into(),
                tool: "update_inventory".into(),
                content: content.to_string(),
            }));
            OfflineGameMaster::default().answer(&req).text
        };
        let refused = json!({"success": false, "message": "Error: already consumed"});
        assert_eq!(
            told(refused.clone(), false),
            "That did not work: Error: already consumed."
        );
        assert_eq!(told(refused, true), "没有成功：Error: already consumed");
        assert_eq!(
            told(
                json!({"success": true, "message": "Used 1 Healing Potion!"}),
                false
            ),
            "Used 1 Healing Potion!"
        );
        assert_eq!(told(json!({"success": false}), false), "That did not work.");
        assert_eq!(told(json!({"success": true}), false), "Done.");
    }

    #[test]
    fn adventure_commands_in_english_and_chinese() {
        let act = |a: Act| Intent::Adventure(a);
        let cases = [
            ("look around", act(Act::Look)),
            ("Look.", act(Act::Look)),
            ("看看", act(Act::Look)),
            ("环顾四周", act(Act::Look)),
            ("talk to Old Maren", act(Act::TalkTo("Old Maren".into()))),
            ("和老玛伦说话", act(Act::TalkTo("老玛伦".into()))),
            ("pick up the lantern", act(Act::Take("the lantern".into()))),
            ("拿 密封灯油", act(Act::Take("密封灯油".into()))),
            ("use the oil", act(Act::Use("the oil".into()))),
            ("使用 治疗药水", act(Act::Use("治疗药水".into()))),
            ("attack the goblin", act(Act::Attack("the goblin".into()))),
            ("攻击 守望者", act(Act::Attack("守望者".into()))),
            ("help", Intent::Help),
            ("take", Intent::Talk),
            ("search", Intent::Talk),
        ];
        for (text, intent) in cases {
            assert_eq!(parse_intent(text), intent, "{text}");
        }
    }

    #[test]
    fn calls_refused_alike_are_told_once() {
        // "look around" in a campaign whose allowlist has none of the tools
        // it reads: every call is refused the same way.
        let mut req = request("look around");
        for (i, tool) in ["describe_entity", "search_content", "get_character_stats"]
            .iter()
            .enumerate()
        {
            req.messages.push(Arc::new(HistoryEntry::ToolResult {
                turn_id: "turn_1".into(),
                call_id: format!("call_{i}").into(),
                tool: (*tool).into(),
                content: json!({"status": "rejected", "reason": "tool_not_allowed",
                    "error_code": "TOOL_NOT_ALLOWED", "message": "not allowed"})
                .to_string(),
            }));
        }
        let text = OfflineGameMaster::default().answer(&req).text;
        assert_eq!(text, "This game does not allow that.");
    }

    #[test]
    fn an_unknown_place_is_named_as_unknown() {
        let mut req = request("go to the moon");
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id: "call_1".into(),
            tool: "move_options".into(),
            content: json!({"area": {"area_id": "area_001", "name": "Hall"},
                "options": [{"area_id": "area_002", "name": "Side Room"}]})
            .to_string(),
        }));
        let reply = OfflineGameMaster::default().answer(&req);
        assert_eq!(
            reply.text,
            "I know of no place called \"the moon\" near here. From the Hall you can go to the Side Room."
        );
    }

    /// Adds a tool's result to the turn of `req`.
    fn answered(req: &mut ModelRequest, tool: &str, content: Value) {
        let n = req.messages.len();
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id: CallId::from(format!("call_{n}")),
            tool: tool.into(),
            content: content.to_string(),
        }));
    }

    /// The campaign's Chinese names of the test map, as its listing answers.
    fn chinese_names() -> Value {
        let zh = |id: &str, title: &str| json!({"id": format!("zh_{id}"), "content_type": "name_zh", "title": title, "body": ""});
        json!({"query": "", "items": [
            zh("area_001", "大厅"), zh("area_002", "侧室"), zh("area_003", "远厅"), zh("pc_001", "艾拉"),
        ]})
    }

    /// The game master's answer to `text` once `tool` answered `result`
    /// (and, in Chinese, the campaign's names were read), in turn `turn`.
    fn told(text: &str, turn: u64, tool: &str, result: Value) -> ModelReply {
        let mut req = request(text);
        Arc::make_mut(&mut req.context)["turn"] = json!(turn);
        answered(&mut req, tool, result);
        if has_cjk(text) {
            answered(&mut req, "search_content", chinese_names());
        }
        OfflineGameMaster::default().answer(&req)
    }

    #[test]
    fn a_wait_or_reminder_is_scheduled_and_told_with_its_time() {
        let gm = OfflineGameMaster::default();
        let cases = [
            (
                "remind me in 30 seconds to check the door",
                json!({"event": "reminder", "note": "Reminder: check the door.", "delay_s": 30}),
                "I will remind you in 30 seconds (at 12:00:30 UTC): check the door.",
            ),
            (
                "等 30 秒",
                json!({"event": "player_wait", "note": "你等的 30 秒到了。", "delay_s": 30}),
                "你静下心来等待 30 秒；时间一到（UTC 12:00:30），我就告诉你。",
            ),
        ];
        for (text, args, says) in cases {
            let mut req = request(text);
            let asked = gm.answer(&req);
            assert_eq!(asked.tool_calls.len(), 1, "{text}");
            assert_eq!(asked.tool_calls[0].name, "schedule_event");
            let sent: Value = serde_json::from_str(&asked.tool_calls[0].arguments).unwrap();
            assert_eq!(sent, args, "{text}");
            answered(
                &mut req,
                "schedule_event",
                json!({"timer_id": "tmr_1", "event": args["event"],
                       "due_at": "2024-12-13T12:00:30Z", "repeat_s": null}),
            );
            assert_eq!(gm.answer(&req).text, says);
        }
        // Past the horizon: words, no timer.
        for (text, says) in [
            ("wait 31 days", "at most 30 days"),
            ("等 0 秒", "至少要 1 秒"),
        ] {
            let reply = gm.answer(&request(text));
            assert!(reply.tool_calls.is_empty(), "{text}");
            assert!(reply.text.contains(says), "{}", reply.text);
        }
        // A full timer list is told in words.
        let mut req = request("wait 10 minutes");
        answered(
            &mut req,
            "schedule_event",
            json!({"status": "rejected", "reason": "limit", "error_code": "TIMER_LIMIT", "message": "64 pending"}),
        );
        assert!(gm.answer(&req).text.starts_with("Too many things"));
    }

    #[test]
    fn a_world_turn_is_told_from_its_note_in_the_notes_language() {
        use crate::game::timers::world_message;
        let gm = OfflineGameMaster::default();
        let cases = [
            (
                world_message("reminder", "Reminder: check the door."),
                "Time passes. Reminder: check the door.",
            ),
            (
                world_message("player_wait", "你等的 30 秒到了。"),
                "时间流逝。你等的 30 秒到了。",
            ),
        ];
        for (text, says) in cases {
            let reply = gm.answer(&request(&text));
            assert!(reply.tool_calls.is_empty());
            assert_eq!(reply.text, says);
        }
        // The tide writes the market's new state before it is told, unless
        // the turn may call no more tools.
        let tide = world_message("tide_floods_market", "潮水淹没了溺水集市。");
        let asked = gm.answer(&request(&tide));
        assert_eq!(asked.tool_calls.len(), 2);
        let mut req = request(&tide);
        req.kind = RequestKind::WrapUp;
        let told = gm.answer(&req);
        assert!(told.tool_calls.is_empty() && told.text.contains("潮水淹没了溺水集市"));
    }

    #[test]
    fn new_places_of_one_theme_are_told_by_the_theme_once() {
        let area = |short: &str, group: &str| {
            json!({"area_id": "area_010", "name": format!("{short} of the {group}"),
                   "short_name": short, "group": group})
        };
        let en = told(
            "explore lantern halls",
            1,
            "map_generate",
            json!({"areas": [area("Hollow Bridge", "Lantern Halls"), area("Gilded Passage", "Lantern Halls")]}),
        );
        assert!(
            en.text.contains(
                "New ways open before you, into the Lantern Halls: the Hollow Bridge and the Gilded Passage."
            ),
            "{}",
            en.text
        );
        let zh = told(
            "探索 洞穴",
            1,
            "map_generate",
            json!({"areas": [area("幽暗大厅", "洞穴"), area("破碎回廊", "洞穴")]}),
        );
        assert!(
            zh.text
                .contains("新的道路展开，通向洞穴：幽暗大厅和破碎回廊。"),
            "{}",
            zh.text
        );
        // Places of different themes keep their whole names.
        let mixed = told(
            "explore lantern halls",
            1,
            "map_generate",
            json!({"areas": [area("Hollow Bridge", "Lantern Halls"), area("Salt Mine", "Deep Caves")]}),
        );
        assert!(
            mixed
                .text
                .contains("Hollow Bridge of the Lantern Halls, Salt Mine of the Deep Caves"),
            "{}",
            mixed.text
        );
    }

    #[test]
    fn a_name_two_places_share_is_the_neighbours_then_the_nearests() {
        let caves = |id: &str, short: &str| json!({"area_id": id, "name": format!("{short} of the Crystal Caves"), "short_name": short});
        let mut context = json!({
            "current_area": {"area_id": "area_010", "name": "Hollow Bridge of the Crystal Caves",
                             "reachable": [caves("area_011", "Flooded Stair")]},
            "areas": [caves("area_010", "Hollow Bridge"),
                      {"area_id": "area_003", "name": "Flooded Stair"},
                      caves("area_011", "Flooded Stair")],
        });
        let none = HashMap::new();
        let go = |context: &Value, words: &str| resolve_area(context, words, &none);
        // The campaign's Flooded Stair is far; the one the map shows next
        // door is meant, by its short name or in part.
        for words in ["Flooded Stair", "the flooded stair", "stair"] {
            assert_eq!(go(&context, words).as_deref(), Some("area_011"), "{words}");
        }
        // A whole name and an id name their own place.
        assert_eq!(
            go(&context, "Flooded Stair of the Crystal Caves").as_deref(),
            Some("area_011")
        );
        assert_eq!(go(&context, "area_003").as_deref(), Some("area_003"));
        // With no neighbour of that name, the nearest listed is meant.
        context["current_area"]["reachable"] = json!([]);
        assert_eq!(go(&context, "Flooded Stair").as_deref(), Some("area_003"));
        assert_eq!(go(&context, "").as_deref(), None);
    }

    #[test]
    fn twenty_moves_read_at_least_five_ways_and_never_twice_alike() {
        for (go, place) in [("go to side room", "Side Room"), ("去 侧室", "侧室")] {
            let arrived =
                json!({"area": {"area_id": "area_002", "name": "Side Room", "description": ""}});
            let said: Vec<String> = (1..=20)
                .map(|turn| told(go, turn, "move", arrived.clone()).text)
                .collect();
            for text in &said {
                assert!(text.contains(place), "{text}");
            }
            for pair in said.windows(2) {
                assert_ne!(pair[0], pair[1], "two moves in a row read the same");
            }
            let mut ways = said.clone();
            ways.sort();
            ways.dedup();
            assert!(ways.len() >= 5, "{ways:?}");
            // The same game told again reads the same.
            assert_eq!(told(go, 7, "move", arrived.clone()).text, said[6]);
        }
        // Two moves in one message read differently too.
        let mut req = request("go to side room then go to hall");
        for to in ["area_002", "area_001"] {
            answered(
                &mut req,
                "move",
                json!({"area": {"area_id": to, "name": "X", "description": ""}}),
            );
        }
        let text = OfflineGameMaster::default().answer(&req).text;
        let (first, second) = text.split_once(". ").unwrap();
        assert_ne!(
            first.replace("X", ""),
            second.replace("X", "").trim_end_matches('.')
        );
    }

    #[test]
    fn a_failed_move_is_told_with_names_not_ids() {
        let failed = json!({"status": "error", "reason": "invalid_args", "error_code": "INVALID_ARGS",
            "message": "area_003 is not reachable in one step from area_001; reachable: area_002"});
        let context = json!({
            "active_actor": {"character_id": "pc_001", "name": "Ayla"},
            "current_area": {"area_id": "area_001", "name": "Hall", "reachable": [{"area_id": "area_002", "name": "Side Room"}]},
            "areas": [{"area_id": "area_001", "name": "Hall"}, {"area_id": "area_002", "name": "Side Room"},
                      {"area_id": "area_003", "name": "Far Hall"}]
        });
        let cases = [
            (
                "go to far hall",
                "The way to the Far Hall is not open from the Hall; from here you can reach the Side Room.",
            ),
            ("去 远厅", "从大厅去不了远厅；从这里可以前往侧室。"),
        ];
        for (text, says) in cases {
            let mut req = request(text);
            req.context = Arc::new(context.clone());
            answered(&mut req, "move", failed.clone());
            if has_cjk(text) {
                answered(&mut req, "search_content", chinese_names());
            }
            let reply = OfflineGameMaster::default().answer(&req);
            assert_eq!(reply.text, says);
            assert!(!reply.text.contains("area_"), "{}", reply.text);
        }
        // Refusals and failures of other tools are words too.
        let downed = json!({"status": "rejected", "reason": "actor_state_restricted",
            "error_code": "PERMISSION_DENIED", "message": "pc_001 is downed"});
        let mut req = request("go to side room");
        Arc::make_mut(&mut req.context)["active_actor"] =
            json!({"character_id": "pc_001", "name": "Ayla", "state": "downed", "hp": 0});
        answered(&mut req, "move", downed);
        let text = OfflineGameMaster::default().answer(&req).text;
        assert!(text.starts_with("Ayla is down"), "{text}");
        let bad_dice = json!({"status": "error", "reason": "invalid_args", "error_code": "INVALID_ARGS",
            "message": "bad dice"});
        assert_eq!(
            told("掷 2x7", 1, "roll_dice", bad_dice).text,
            "骰子看不懂“2x7”；试试“掷 2d6+1”。"
        );
    }

    /// Adds a call of `tool` with `args` to the turn of `req`, refused
    /// because a person did not approve it.
    fn denied(req: &mut ModelRequest, tool: &str, args: Value) {
        let call_id = CallId::from(format!("call_{}", req.messages.len()));
        req.messages.push(Arc::new(HistoryEntry::ToolCall {
            turn_id: "turn_1".into(),
            call_id: call_id.clone(),
            tool: tool.into(),
            arguments: args.to_string(),
        }));
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id,
            tool: tool.into(),
            content: json!({"status": "rejected", "reason": "permission_denied",
                "error_code": "APPROVAL_DENIED",
                "message": "the call was not approved (a person denied it); it did not run"})
            .to_string(),
        }));
    }

    #[test]
    fn a_call_a_person_did_not_approve_is_told_as_stayed_in_the_players_language() {
        let blow = json!({"target_character_id": "pc_001", "delta": -3, "cause": "The Drowned Warden's blow"});
        let take = json!({"character_id": "pc_001", "items": [{"slug": "green_glass_lamp", "name": "Green-Glass Lamp", "quantity": 1}]});
        let cases = [
            (
                "attack the warden",
                "hp_delta",
                blow.clone(),
                "The blow is stayed before it lands: Ayla is spared.",
            ),
            (
                "攻击 守望者",
                "hp_delta",
                blow,
                "这一击在落下之前被止住了：艾拉幸免于难。",
            ),
            (
                "take the lamp",
                "add_inventory",
                take.clone(),
                "You reach for it, but the taking is stayed: it stays where it is.",
            ),
            (
                "拿 灯",
                "add_inventory",
                take,
                "你伸手去拿，却被拦下了：它留在原处。",
            ),
            (
                "go to side room",
                "move",
                json!({"actor_id": "pc_001", "to_area_id": "area_002"}),
                "The way is stayed: you remain in the Hall.",
            ),
        ];
        for (text, tool, args, says) in cases {
            let mut req = request(text);
            Arc::make_mut(&mut req.context)["active_actor"] =
                json!({"character_id": "pc_001", "name": "Ayla", "hp": 3, "max_hp": 12});
            if has_cjk(text) {
                answered(&mut req, "search_content", chinese_names());
            }
            if tool == "hp_delta" {
                // The exchange's rolls came first: only the stayed blow is told.
                let roll = json!({"dice": "1d20", "rolls": [12], "total": 12});
                answered(&mut req, "roll_dice", roll);
            }
            denied(&mut req, tool, args);
            let reply = OfflineGameMaster::default().answer(&req);
            assert!(
                reply.tool_calls.is_empty(),
                "{text}: the turn goes on to its end"
            );
            assert_eq!(reply.text, says, "{text}");
        }
        // Without the call's arguments (an answer read back elsewhere) the
        // blow is still told as stayed, naming no one.
        let mut req = request("attack the warden");
        answered(
            &mut req,
            "hp_delta",
            json!({"status": "rejected", "reason": "permission_denied", "error_code": "APPROVAL_DENIED", "message": "no"}),
        );
        let text = OfflineGameMaster::default().answer(&req).text;
        assert_eq!(text, "The blow is stayed before it lands: no one is hurt.");
    }

    #[test]
    fn a_place_beyond_the_context_is_found_on_the_map() {
        let mut req = request("go to the heart");
        Arc::make_mut(&mut req.context)["areas_total"] = json!(3);
        answered(
            &mut req,
            "move_options",
            json!({"area": {"area_id": "area_001", "name": "Hall"},
                "options": [{"area_id": "area_002", "name": "Side Room"}]}),
        );
        let gm = OfflineGameMaster::default();
        let reply = gm.answer(&req);
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.tool_calls[0].name, "get_site_map");
        answered(
            &mut req,
            "get_site_map",
            json!({"areas": [{"area_id": "area_001", "name": "Hall"}, {"area_id": "area_002", "name": "Side Room"},
                             {"area_id": "area_003", "name": "Heart"}],
                   "routes": [{"from": "area_001", "to": "area_002"}, {"from": "area_002", "to": "area_003"}]}),
        );
        assert_eq!(
            gm.answer(&req).text,
            "The Heart is more than one step from here; the way there goes through the Side Room. \
             From the Hall you can go to the Side Room."
        );
    }

    #[test]
    fn a_chinese_roll_and_status_hold_no_latin_letters() {
        let rolled = json!({"dice": "2d6+1", "rolls": [3, 4], "modifier": 1, "total": 8});
        assert_eq!(
            told("掷 2d6+1", 1, "roll_dice", rolled).text,
            "你掷出2个6面骰+1：[3, 4]，总计 8。"
        );
        let sheet = json!({"character_id": "pc_001", "name": "Ayla", "hp": 9, "max_hp": 12, "level": 1,
            "area_id": "area_002", "area_name": "Side Room",
            "inventory": [{"slug": "torch", "name": "Torch", "quantity": 2}]});
        let mut names = chinese_names();
        names["items"].as_array_mut().unwrap().push(
            json!({"id": "zh_item_torch", "content_type": "name_zh", "title": "火把", "body": ""}),
        );
        let mut req = request("状态");
        answered(&mut req, "get_character_stats", sheet);
        answered(&mut req, "search_content", names);
        assert_eq!(
            OfflineGameMaster::default().answer(&req).text,
            "艾拉：生命 9/12，等级 1，位于侧室。携带：火把 ×2。"
        );
    }

    #[test]
    fn words_outside_the_commands_get_an_answer_and_a_hint() {
        let gm = OfflineGameMaster::default();
        let reply = gm.answer(&request("hello there"));
        assert!(reply.text.contains("talk to <name>"), "{}", reply.text);
        assert!(reply.text.contains("\"help\""), "{}", reply.text);
        let help = gm.answer(&request("help"));
        assert!(help.text.contains("attack <foe>"), "{}", help.text);
        let zh = gm.answer(&request("帮助"));
        assert!(zh.text.contains("攻击 <敌人>"), "{}", zh.text);
        // The test map's places have English names only: a Chinese
        // answer leaves them out.
        let zh = gm.answer(&request("你好"));
        assert!(
            !zh.text.contains("Hall") && zh.text.contains("说话"),
            "{}",
            zh.text
        );
    }

    #[test]
    fn search_answers_quote_the_record_cut_at_a_word() {
        let body = format!(
            "Divers who take a lantern from the ruin are said to hear bells {}",
            "beneath the water ".repeat(10)
        );
        let mut req = request("search bells");
        req.messages.push(Arc::new(HistoryEntry::ToolResult {
            turn_id: "turn_1".into(),
            call_id: "call_1".into(),
            tool: "search_content".into(),
            content: json!({"query": "bells", "results": [{"title": "Bells"}], "items": [{"body": body}]})
            .to_string(),
        }));
        let reply = OfflineGameMaster::default().answer(&req);
        let quoted = reply.text.split_once("Bells: \"").unwrap().1;
        let kept = quoted.strip_suffix("…\"").unwrap();
        assert!(
            body.starts_with(kept) && body[kept.len()..].starts_with(' '),
            "{quoted}"
        );
    }

    #[test]
    fn at_most_eight_commands_run_from_one_message() {
        let gm = OfflineGameMaster::default();
        let joined = |n: usize, sep: &str, cmd: &str| vec![cmd; n].join(sep);
        let eight = gm.answer(&request(&joined(
            MAX_COMMANDS_PER_MESSAGE,
            " then ",
            "roll 1d6",
        )));
        assert_eq!(eight.tool_calls.len(), MAX_COMMANDS_PER_MESSAGE);
        let cases = [
            (
                joined(MAX_COMMANDS_PER_MESSAGE + 1, " then ", "roll 1d6"),
                "at most 8 things at once",
            ),
            (joined(1000, " then ", "status"), "at most 8 things at once"),
            (
                joined(MAX_COMMANDS_PER_MESSAGE + 1, "然后", "状态"),
                "最多只能做 8 件事",
            ),
        ];
        for (text, says) in cases {
            let reply = gm.answer(&request(&text));
            assert!(reply.tool_calls.is_empty(), "none of them runs");
            assert!(reply.text.contains(says), "{}", reply.text);
            assert_eq!(reply.dialog_type.as_deref(), Some("narration"));
        }
        // Prose that says "then" often is still talk.
        let prose = joined(20, " then ", "and the wind howled");
        let reply = gm.answer(&request(&prose));
        assert!(reply.tool_calls.is_empty() && !reply.text.contains("at most"));
    }

    #[test]
    fn letters_that_change_length_when_lower_cased_never_split_wrongly() {
        // 'İ' grows and 'ẞ' shrinks when lower-cased: the message's total
        // length is unchanged, but positions inside it are not.
        for text in [
            "İ then ẞ then roll 1d6",
            "ẞ then İ then x",
            "roll 1d6 then İ",
        ] {
            let intents = parse_intents(text);
            assert_eq!(intents, Some(vec![parse_intent(text)]), "{text}");
        }
        assert_eq!(
            parse_intents("roll 1d6 then roll 1d8").map(|i| i.len()),
            Some(2)
        );
    }

    #[test]
    fn the_joining_word_that_starts_first_splits_the_message() {
        // ", then " holds " then " and "，然后" holds "然后": the one that
        // starts first is cut out, so no piece keeps a trailing comma.
        let cases = [
            (
                "go to Side Room, then roll 1d6 then status",
                vec![
                    Intent::Go("Side Room".into()),
                    Intent::Roll("1d6".into(), None),
                    Intent::Status,
                ],
            ),
            (
                "去 侧室，然后掷 1d6然后状态",
                vec![
                    Intent::Go("侧室".into()),
                    Intent::Roll("1d6".into(), None),
                    Intent::Status,
                ],
            ),
        ];
        for (text, intents) in cases {
            assert_eq!(parse_intents(text), Some(intents), "{text}");
        }
        assert_eq!(first_separator("a then b, then c"), Some((1, 6)));
        assert_eq!(first_separator("a, then b"), Some((1, 7)));
        assert_eq!(first_separator("no joining word"), None);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Messages made of commands, joiners, odd letters and dice.
        fn message() -> impl Strategy<Value = String> {
            let part = prop_oneof![
                Just("roll ".to_owned()),
                Just("掷".to_owned()),
                Just(" then ".to_owned()),
                Just("然后".to_owned()),
                Just("go to ".to_owned()),
                Just("İẞ".to_owned()),
                any::<i64>().prop_map(|n| format!("{n}d{n}-{n}")),
                ".{0,8}",
            ];
            prop::collection::vec(part, 0..24).prop_map(|p| p.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_message_gets_an_answer_without_panicking(text in message(), raw in any::<String>()) {
                let gm = OfflineGameMaster::default();
                for t in [&text, &raw] {
                    let reply = gm.answer(&request(t));
                    prop_assert!(reply.tool_calls.len() <= MAX_COMMANDS_PER_MESSAGE);
                    for call in &reply.tool_calls {
                        prop_assert!(serde_json::from_str::<Value>(&call.arguments).is_ok());
                    }
                }
            }
        }
    }

    /// The events of one answer, read to the end.
    async fn events(gm: OfflineGameMaster, text: &str) -> Vec<ModelEvent> {
        gm.complete(request(text))
            .map(|e| e.unwrap())
            .collect()
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn latency_delays_each_answer_without_changing_it() {
        // A paused clock moves only to the next timer: the answer waited
        // exactly the latency, whatever the machine's speed.
        let latency = Duration::from_millis(60);
        let gm = OfflineGameMaster::with_latency(latency);
        assert_eq!(gm.latency(), latency);
        assert_eq!(OfflineGameMaster::default().latency(), Duration::ZERO);
        let began = tokio::time::Instant::now();
        let slow = events(gm, "hello").await;
        assert_eq!(began.elapsed(), latency);
        assert_eq!(slow, events(OfflineGameMaster::default(), "hello").await);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_waits_without_holding_the_thread() {
        // The clock is paused: it moves only when every task waits, to the
        // next timer. Twenty answers that wait 100 ms side by side take
        // 100 ms of it; waits that held the thread would take 2 s.
        let gm = OfflineGameMaster::with_latency(Duration::from_millis(100));
        let began = tokio::time::Instant::now();
        let all = futures_util::future::join_all((0..20).map(|_| events(gm, "roll 1d6"))).await;
        assert_eq!(all.len(), 20);
        assert_eq!(began.elapsed(), Duration::from_millis(100));
    }
}
