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
//! `搜索 <…>`, `map` / `地图`; anything else gets a narrative and no tool call.
//! Commands joined by ` then ` (or `然后`), as in `go to the hall then roll
//! 1d20`, become one answer with a tool call each, run in that order; at
//! most [`MAX_COMMANDS_PER_MESSAGE`] of them, and a message with more runs
//! none and says so.
//!
//! For measuring the runtime rather than a model it can wait a fixed time
//! before each answer (`QUESTD_OFFLINE_LATENCY_MS`). The wait is a timer
//! inside the answer's stream, so it holds no thread and thousands of turns
//! can wait at once, as they do on a real model.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::{Value, json};

use super::{
    LlmError, ModelEvent, ModelReply, ModelRequest, ModelToolCall, Provider, RequestKind,
    sentence_deltas,
};
use crate::game::HistoryEntry;
use crate::protocol::CallId;

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
    Roll(String),
    Explore(String),
    Status,
    Scout(String),
    Search(String),
    SiteMap,
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
    while same_lengths
        && let Some((at, sep)) = THEN
            .iter()
            .filter_map(|sep| rest_lower.find(sep).map(|at| (at, sep.len())))
            .min_by_key(|&(at, len)| (at, usize::MAX - len))
    {
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

/// Reads a player's message. Matching ignores case and surrounding spaces.
fn parse_intent(text: &str) -> Intent {
    let t = text
        .trim()
        .trim_end_matches(['.', '!', '?', '。', '！', '？'])
        .trim();
    let lower = t.to_lowercase();
    let after = |prefixes: &[&str]| -> Option<String> {
        // Keep the player's own casing; fall back to the lower-cased text when
        // lower-casing changed byte lengths.
        prefixes.iter().find_map(|p| {
            let rest = lower.strip_prefix(p)?;
            Some(t.get(p.len()..).unwrap_or(rest).trim().to_string())
        })
    };
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
        return Intent::Roll(rest.replace(' ', ""));
    }
    if lower == "explore" || lower == "探索" {
        return Intent::Explore(String::new());
    }
    if let Some(rest) = after(&["explore ", "探索"]) {
        return Intent::Explore(rest);
    }
    if ["status", "stats", "sheet", "状态"].contains(&lower.as_str()) {
        return Intent::Status;
    }
    if ["map", "site map", "地图"].contains(&lower.as_str()) {
        return Intent::SiteMap;
    }
    if let Some(rest) = after(&["scout ", "侦察"]) {
        return Intent::Scout(rest);
    }
    if let Some(rest) = after(&["search ", "搜索"]) {
        return Intent::Search(rest);
    }
    Intent::Talk
}

fn is_chinese(text: &str) -> bool {
    text.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

/// Finds an area in the context by id, then exact name, then part of a name.
fn resolve_area(context: &Value, wanted: &str) -> Option<String> {
    let wanted = wanted.trim().trim_start_matches("the ").trim();
    let areas = context["areas"].as_array()?;
    let lower = wanted.to_lowercase();
    let field = |a: &Value, f: &str| a[f].as_str().unwrap_or_default().to_lowercase();
    areas
        .iter()
        .find(|a| field(a, "area_id") == lower)
        .or_else(|| areas.iter().find(|a| field(a, "name") == lower))
        .or_else(|| {
            // Prefer a neighbour when a partial name matches several areas.
            let reachable = context["current_area"]["reachable"].as_array();
            let partial = |a: &&Value| !lower.is_empty() && field(a, "name").contains(&lower);
            reachable
                .and_then(|r| r.iter().find(partial))
                .or_else(|| areas.iter().find(partial))
        })
        .and_then(|a| a["area_id"].as_str().map(str::to_owned))
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
        let zh = is_chinese(text);
        let turn = &req.messages[start + 1..];
        let results: Vec<(&str, Value)> = turn
            .iter()
            .filter_map(|m| match &**m {
                HistoryEntry::ToolResult { tool, content, .. } => Some((
                    tool.as_str(),
                    serde_json::from_str(content).unwrap_or(Value::Null),
                )),
                _ => None,
            })
            .collect();
        if !results.is_empty() {
            return narrate_results(&results, zh);
        }
        if req.kind == RequestKind::WrapUp {
            return talk(req, text, zh);
        }
        let actor = req.context["active_actor"]["character_id"]
            .as_str()
            .unwrap_or_default();
        let Some(intents) = parse_intents(text) else {
            return too_many_commands(zh);
        };
        if req.context.is_null()
            && !intents
                .iter()
                .all(|i| matches!(i, Intent::Roll(_) | Intent::Talk))
        {
            // No session (the stateless chat API): no map to act on.
            return ModelReply::narrate(if zh {
                "这里没有游戏会话，我看不到地图；请开始一个会话来移动和探索。可以试试“掷 2d6+1”。"
            } else {
                "There is no game session here, so I cannot see the map; start a session to move \
                 and explore. You can still try \"roll 2d6+1\"."
            });
        }
        let mut calls = Vec::with_capacity(intents.len());
        for intent in intents {
            let Some((name, args)) = tool_for(req, actor, intent) else {
                return talk(req, text, zh);
            };
            calls.push(ModelToolCall {
                id: CallId::from(format!("call_{}", calls.len() + 1)),
                name: name.into(),
                arguments: args.to_string(),
            });
        }
        ModelReply {
            tool_calls: calls,
            ..ModelReply::default()
        }
    }
}

/// The tool call that carries out a command (`None` for talk).
fn tool_for(req: &ModelRequest, actor: &str, intent: Intent) -> Option<(&'static str, Value)> {
    let call = |name, args| Some((name, args));
    match intent {
        Intent::Go(target) => match resolve_area(&req.context, &target) {
            Some(area_id) => call("move", json!({"actor_id": actor, "to_area_id": area_id})),
            // An unclear target: show the ways out, move nowhere yet.
            None => call("move_options", json!({"actor_id": actor})),
        },
        Intent::WhereCanIGo => call("move_options", json!({"actor_id": actor})),
        // roll_dice requires a reason; a bare "roll 1d6" says no more than this.
        Intent::Roll(expr) => call(
            "roll_dice",
            json!({"dice": expr, "reason": "the player's roll"}),
        ),
        Intent::Explore(theme) => {
            let from = req.context["current_area"]["area_id"]
                .as_str()
                .unwrap_or_default();
            call(
                "map_generate",
                json!({"parent_area_id": from, "theme": theme}),
            )
        }
        Intent::Status => call("get_character_stats", json!({"character_id": actor})),
        Intent::Scout(prompt) => {
            let session = req.context["session_id"].as_str().unwrap_or_default();
            let prompt = if prompt.is_empty() {
                "the wilds".to_owned()
            } else {
                prompt
            };
            call(
                "generate_zone",
                json!({"session_id": session, "world_prompt": prompt, "count": 1}),
            )
        }
        Intent::Search(query) => call("search_content", json!({"query": query})),
        Intent::SiteMap => call("get_site_map", json!({})),
        Intent::Talk => None,
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

/// A narrative with no tool call, varied by the words but deterministic.
fn talk(req: &ModelRequest, text: &str, zh: bool) -> ModelReply {
    let area = req.context["current_area"]["name"]
        .as_str()
        .unwrap_or("the dark");
    let hash = text
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
    let reply = if zh {
        const LINES: [&str; 3] = [
            "灯影摇曳，四周一片寂静。",
            "远处传来水滴声，仿佛有什么在等待。",
            "你的话在石墙间回荡，无人应答。",
        ];
        format!(
            "你在{area}。{}可以说“我能去哪”、“去 <地点>”、“掷 2d6+1”、“探索 <主题>”或“状态”。",
            LINES[hash % LINES.len()]
        )
    } else {
        const LINES: [&str; 3] = [
            "Lantern light flickers; the silence listens.",
            "Somewhere water drips, patient as a held breath.",
            "Your words echo off the old stone and fade.",
        ];
        format!(
            "You are in {area}. {} Try \"where can I go\", \"go to <place>\", \"roll 2d6+1\", \"explore <theme>\" or \"status\".",
            LINES[hash % LINES.len()]
        )
    };
    ModelReply {
        text: reply,
        dialog_type: Some("narration".into()),
        ..ModelReply::default()
    }
}

/// Narrates what this turn's tools did.
fn narrate_results(results: &[(&str, Value)], zh: bool) -> ModelReply {
    let mut parts = Vec::new();
    let mut dialog_type = "narration";
    for (tool, r) in results {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        if r["status"].is_string() && r.get("reason").is_some() {
            parts.push(if zh {
                format!("没能成功：{}。", s(&r["message"]))
            } else {
                format!("That did not work: {}.", s(&r["message"]))
            });
            continue;
        }
        parts.push(match *tool {
            "move" => {
                dialog_type = "scene_description";
                let (name, desc) = (s(&r["area"]["name"]), s(&r["area"]["description"]));
                if zh {
                    format!("你来到了{name}。{desc}")
                } else {
                    format!("You make your way to {name}. {desc}")
                }
            }
            "move_options" => {
                let here = s(&r["area"]["name"]);
                let opts: Vec<String> = r["options"]
                    .as_array()
                    .map(|o| {
                        o.iter()
                            .map(|a| format!("{} ({})", s(&a["name"]), s(&a["area_id"])))
                            .collect()
                    })
                    .unwrap_or_default();
                if opts.is_empty() {
                    if zh {
                        format!("从{here}无路可走。")
                    } else {
                        format!("There is no way onward from {here}.")
                    }
                } else if zh {
                    format!("从{here}你可以前往：{}。", opts.join("、"))
                } else {
                    format!("From {here} you can go to: {}.", opts.join(", "))
                }
            }
            "roll_dice" => {
                let rolls: Vec<String> = r["rolls"]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.to_string()).collect())
                    .unwrap_or_default();
                let (expr, total) = (s(&r["dice"]), r["total"].to_string());
                if zh {
                    format!("你掷出 {expr}：[{}]，总计 {total}。", rolls.join(", "))
                } else {
                    format!("You roll {expr}: [{}], total {total}.", rolls.join(", "))
                }
            }
            "map_generate" => {
                dialog_type = "scene_description";
                let names: Vec<String> = r["areas"]
                    .as_array()
                    .map(|a| a.iter().map(|x| s(&x["name"])).collect())
                    .unwrap_or_default();
                if zh {
                    format!("新的道路展开，通向：{}。", names.join("、"))
                } else {
                    format!("New ways open before you: {}.", names.join(", "))
                }
            }
            "get_character_stats" => {
                let inv: Vec<String> = r["inventory"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|i| format!("{} ×{}", s(&i["name"]), i["quantity"]))
                            .collect()
                    })
                    .unwrap_or_default();
                let (name, hp, max, level, area) = (
                    s(&r["name"]),
                    &r["hp"],
                    &r["max_hp"],
                    &r["level"],
                    s(&r["area_name"]),
                );
                if zh {
                    format!(
                        "{name}：生命 {hp}/{max}，等级 {level}，位于{area}。携带：{}。",
                        inv.join("、")
                    )
                } else {
                    format!(
                        "{name}: HP {hp}/{max}, level {level}, in {area}. Carrying: {}.",
                        inv.join(", ")
                    )
                }
            }
            "hp_delta" => {
                let (id, before, hp) = (s(&r["character_id"]), &r["hp_before"], &r["hp"]);
                if zh {
                    format!("{id} 的生命值 {before} → {hp}。")
                } else {
                    format!("{id}'s HP goes from {before} to {hp}.")
                }
            }
            "generate_zone" => {
                let names: Vec<String> = r["zones"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|z| format!("{} ({})", s(&z["name"]), s(&z["zone_id"])))
                            .collect()
                    })
                    .unwrap_or_default();
                if zh {
                    format!("远方出现了新的地带：{}。", names.join("、"))
                } else {
                    format!("Scouting reveals new lands: {}.", names.join(", "))
                }
            }
            "search_content" => {
                let titles: Vec<String> = r["results"]
                    .as_array()
                    .map(|a| a.iter().map(|x| s(&x["title"])).collect())
                    .unwrap_or_default();
                match (titles.is_empty(), zh) {
                    (true, true) => "没有找到相关的记载。".to_owned(),
                    (true, false) => "The archives hold nothing on that.".to_owned(),
                    (false, true) => format!("你找到了这些记载：{}。", titles.join("、")),
                    (false, false) => format!("You find these records: {}.", titles.join(", ")),
                }
            }
            "get_site_map" => {
                let (areas, routes) = (
                    r["areas"].as_array().map_or(0, Vec::len),
                    r["routes"].as_array().map_or(0, Vec::len),
                );
                if zh {
                    format!("地图上有 {areas} 个地点，{routes} 条道路。")
                } else {
                    format!("The map shows {areas} places joined by {routes} routes.")
                }
            }
            other => {
                if zh {
                    format!("{other} 完成了。")
                } else {
                    format!("{other} is done.")
                }
            }
        });
    }
    ModelReply {
        text: parts.join(" "),
        dialog_type: Some(dialog_type.into()),
        ..ModelReply::default()
    }
}

impl Provider for OfflineGameMaster {
    fn name(&self) -> &str {
        "offline"
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
    fn intents_in_english_and_chinese() {
        let cases = [
            ("go to Side Room", Intent::Go("Side Room".into())),
            ("Go to area_002.", Intent::Go("area_002".into())),
            ("去 侧室", Intent::Go("侧室".into())),
            ("去area_002", Intent::Go("area_002".into())),
            ("Where can I go?", Intent::WhereCanIGo),
            ("我能去哪？", Intent::WhereCanIGo),
            ("roll 2d6+1", Intent::Roll("2d6+1".into())),
            ("掷 2d6+1", Intent::Roll("2d6+1".into())),
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
            })],
            tools: Default::default(),
            context: Arc::new(json!({
                "active_actor": {"character_id": "pc_001"},
                "current_area": {"area_id": "area_001", "name": "Hall", "reachable": [{"area_id": "area_002", "name": "Side Room"}]},
                "areas": [{"area_id": "area_001", "name": "Hall"}, {"area_id": "area_002", "name": "Side Room"}]
            })),
            kind: RequestKind::Step,
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
                json!({"parent_area_id": "area_001", "theme": "ice"}),
            ),
            (
                "状态",
                "get_character_stats",
                json!({"character_id": "pc_001"}),
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
            content: json!({"area": {"name": "侧室", "description": "满是灰尘。"}}).to_string(),
        }));
        let reply = OfflineGameMaster::default().answer(&req);
        assert!(reply.tool_calls.is_empty());
        assert!(reply.text.contains("你来到了侧室"), "{}", reply.text);
        assert_eq!(reply.dialog_type.as_deref(), Some("scene_description"));
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
