//! The offline game master's narration of a turn's tool results: what
//! each tool did, in the player's language and the voice of
//! [`super::voice`], naming places, people and things (in Chinese, by the
//! campaign's Chinese names) and never their ids; a failed or refused call
//! is told in words; a place beyond the context's is found on the site map.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::adventure;
use super::timed::{self, Wait};
use super::voice;
use super::words::{cut_at_boundary, names, without_article};
use crate::llm::ModelReply;

/// The `error_code` of a call a person did not approve (denied, or no
/// decision in time): the call did not run.
pub(super) const APPROVAL_DENIED: &str = "APPROVAL_DENIED";

/// Whether a tool result is an error.
pub(super) fn failed(result: &Value) -> bool {
    result["status"].is_string() && result.get("reason").is_some()
}

/// Longest stretch of a record quoted in a search answer, in characters.
const QUOTE_CHARS: usize = 160;

/// Tools whose results name places, people or things: in Chinese, the
/// campaign's Chinese names are read before they are told.
const NAMING_TOOLS: [&str; 5] = [
    "move",
    "move_options",
    "get_character_stats",
    "search_content",
    "hp_delta",
];

/// Whether a Chinese answer needs the campaign's Chinese names to tell
/// these results.
pub(super) fn names_things(results: &[(&str, &Value)]) -> bool {
    results.iter().any(|(t, _)| NAMING_TOOLS.contains(t))
}

/// The arguments of `get_site_map` when it is read to find a place the
/// context does not name: areas and routes, no points of interest.
pub(super) fn far_lookup() -> (&'static str, Value) {
    (
        "get_site_map",
        json!({"include_pois": false, "include_routes": true}),
    )
}

/// Whether the map may hold places the context leaves out (it names
/// only those a few steps away).
pub(super) fn map_holds_more(context: &Value) -> bool {
    let named = context["areas"].as_array().map_or(0, Vec::len);
    context["areas_total"]
        .as_u64()
        .and_then(|total| usize::try_from(total).ok())
        .is_some_and(|total| total > named)
}

/// What the narration knows to name things in the player's language.
struct Teller<'a> {
    context: &'a Value,
    names: HashMap<String, (String, String)>,
    zh: bool,
    /// Areas of a site map read this turn, beside the context's.
    site: Option<&'a Value>,
}

impl Teller<'_> {
    /// A thing's name in the player's language, from its English one.
    fn name(&self, id: &str, english: &str) -> String {
        match self.names.get(id) {
            Some((name, _)) if self.zh && !name.is_empty() => name.clone(),
            _ => english.to_owned(),
        }
    }

    /// An area's name, from the context (or a site map read this turn).
    fn area(&self, id: &str) -> String {
        let listed = |list: &Value| {
            list.as_array()?
                .iter()
                .find(|a| a["area_id"] == id)
                .and_then(|a| a["name"].as_str())
                .map(str::to_owned)
        };
        let english = listed(&self.context["areas"])
            .or_else(|| listed(&self.context["current_area"]["reachable"]))
            .or_else(|| self.site.and_then(|s| listed(&s["areas"])))
            .unwrap_or_default();
        self.name(id, &english)
    }

    /// An area as a sentence names it ("the Hall of Wicks" / "灯芯大厅").
    fn place(&self, id: &str) -> String {
        voice::place(&self.area(id), self.zh)
    }

    /// Where the actor stands, as a sentence names it.
    fn here(&self) -> String {
        let here = &self.context["current_area"];
        let english = here["name"].as_str().unwrap_or_default();
        voice::place(
            &self.name(here["area_id"].as_str().unwrap_or_default(), english),
            self.zh,
        )
    }

    /// "from here you can reach A, B and C" (or that nothing is reachable).
    fn ways_on(&self) -> String {
        let ways: Vec<String> = self.context["current_area"]["reachable"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["area_id"].as_str())
            .map(|id| self.place(id))
            .collect();
        match (ways.is_empty(), self.zh) {
            (true, true) => "从这里无路可走。".to_owned(),
            (true, false) => "there is no way on from here.".to_owned(),
            (false, true) => format!("从这里可以前往{}。", voice::list(&ways, true)),
            (false, false) => format!("from here you can reach {}.", voice::list(&ways, false)),
        }
    }

    /// Someone's name: the actor's from the context, else the Chinese one
    /// when there is one, else "someone".
    fn person(&self, id: &str) -> String {
        match (self.named(id), self.zh) {
            (Some(name), _) => name,
            (None, true) => "有人".to_owned(),
            (None, false) => "Someone".to_owned(),
        }
    }

    /// Someone's name when the context or the Chinese names know it.
    fn named(&self, id: &str) -> Option<String> {
        let actor = &self.context["active_actor"];
        let english = if actor["character_id"] == id {
            actor["name"].as_str().unwrap_or_default()
        } else {
            ""
        };
        Some(self.name(id, english)).filter(|name| !name.is_empty())
    }

    /// A call a person did not approve, told as an act that was stayed:
    /// it did not happen. `r["args"]` holds the call's arguments when the
    /// turn had them (the result itself does not).
    fn stayed(&self, tool: &str, r: &Value) -> String {
        let zh = self.zh;
        let args = &r["args"];
        match tool {
            "hp_delta" if args["delta"].as_i64().is_some_and(|d| d > 0) => {
                if zh {
                    "这次治疗被拦下了：什么也没有改变。".into()
                } else {
                    "The healing is stayed: nothing changes.".into()
                }
            }
            "hp_delta" => {
                let id = args["target_character_id"].as_str().unwrap_or_default();
                match (self.named(id), zh) {
                    (Some(who), false) => {
                        format!("The blow is stayed before it lands: {who} is spared.")
                    }
                    (Some(who), true) => format!("这一击在落下之前被止住了：{who}幸免于难。"),
                    (None, false) => "The blow is stayed before it lands: no one is hurt.".into(),
                    (None, true) => "这一击在落下之前被止住了：无人受伤。".into(),
                }
            }
            "add_inventory" => {
                if zh {
                    "你伸手去拿，却被拦下了：它留在原处。".into()
                } else {
                    "You reach for it, but the taking is stayed: it stays where it is.".into()
                }
            }
            "move" | "move_to_zone" => {
                if zh {
                    format!("这一步被拦下了：你留在{}。", self.here())
                } else {
                    format!("The way is stayed: you remain in {}.", self.here())
                }
            }
            _ => {
                if zh {
                    "这一举动被拦下了，没有发生。".into()
                } else {
                    "That act is stayed: it does not happen.".into()
                }
            }
        }
    }

    /// What a failed or refused call means to the player, in words and
    /// without ids: `target` is the area a failed move was for, `dice`
    /// the expression a failed roll read.
    fn failure(&self, tool: &str, r: &Value, target: Option<&str>, dice: Option<&str>) -> String {
        let zh = self.zh;
        let pick = |en: String, zh_text: String| if zh { zh_text } else { en };
        let actor = &self.context["active_actor"];
        if r["error_code"] == APPROVAL_DENIED {
            return self.stayed(tool, r);
        }
        match r["reason"].as_str().unwrap_or_default() {
            "tool_not_allowed" | "tool_disabled" => {
                return pick(
                    "This game does not allow that.".into(),
                    "这场游戏不允许这样做。".into(),
                );
            }
            "timeout" | "execution_failed" => {
                return pick(
                    "Something went wrong there; try again.".into(),
                    "这里出了点问题，请再试一次。".into(),
                );
            }
            "actor_state_restricted" | "invalid_actor_state" | "permission_denied" => {
                if actor["state"] == "downed" || actor["hp"] == 0 {
                    let who = self.person(actor["character_id"].as_str().unwrap_or_default());
                    return pick(
                        format!(
                            "{who} is down and cannot act; only a healing potion (\"use healing potion\") brings them back up."
                        ),
                        format!(
                            "{who}倒下了，无法行动；只有治疗药水（“使用 治疗药水”）能让其重新站起来。"
                        ),
                    );
                }
                return pick(
                    "That cannot be done right now.".into(),
                    "现在还不能这样做。".into(),
                );
            }
            _ => {}
        }
        match tool {
            "move" => {
                let here_id = self.context["current_area"]["area_id"]
                    .as_str()
                    .unwrap_or_default();
                match target {
                    Some(t) if t == here_id => pick(
                        format!("You are already in {}.", self.here()),
                        format!("你已经在{}了。", self.here()),
                    ),
                    Some(t) => pick(
                        format!(
                            "The way to {} is not open from {}; {}",
                            self.place(t),
                            self.here(),
                            self.ways_on()
                        ),
                        format!(
                            "从{}去不了{}；{}",
                            self.here(),
                            self.place(t),
                            self.ways_on()
                        ),
                    ),
                    None => pick(
                        format!("There is no such place on this map; {}", self.ways_on()),
                        format!("地图上没有这个地方；{}", self.ways_on()),
                    ),
                }
            }
            "roll_dice" => match dice {
                Some(expr) => pick(
                    format!("The dice cannot read \"{expr}\"; try something like \"roll 2d6+1\"."),
                    format!("骰子看不懂“{expr}”；试试“掷 2d6+1”。"),
                ),
                None => pick(
                    "The dice will not roll that way.".into(),
                    "骰子不能这样掷。".into(),
                ),
            },
            "map_generate" => pick(
                "The land here will not open any further.".into(),
                "这里再也开辟不出新的道路。".into(),
            ),
            "generate_zone" | "move_to_zone" => pick(
                "Your scouting finds no new land this time.".into(),
                "这一次，侦察没有发现新的地域。".into(),
            ),
            "search_content" => pick(
                "The archives cannot be searched for that.".into(),
                "档案里查不了这个。".into(),
            ),
            _ => pick("That did not work.".into(), "这没有成功。".into()),
        }
    }

    /// Where a place the context does not name lies, from a site map read
    /// this turn: its area id and the first step of the shortest way there
    /// from here (`None` when it is not on the map or cannot be reached).
    fn far_place(&self, wanted: &str) -> Option<(String, String)> {
        let site = self.site?;
        let areas = site["areas"].as_array()?;
        let zh_of = |a: &Value| {
            self.names
                .get(a["area_id"].as_str().unwrap_or_default())
                .map(|(name, _)| name.clone())
                .unwrap_or_default()
        };
        let called = |a: &&Value| {
            let english = a["name"].as_str().unwrap_or_default();
            let wanted = without_article(wanted).to_lowercase();
            english.to_lowercase() == wanted || zh_of(a).to_lowercase() == wanted
        };
        let loose = |a: &&Value| {
            names(wanted, a["name"].as_str().unwrap_or_default()) || names(wanted, &zh_of(a))
        };
        let target = areas
            .iter()
            .find(called)
            .or_else(|| areas.iter().find(loose))?["area_id"]
            .as_str()?
            .to_owned();
        let here = self.context["current_area"]["area_id"].as_str()?;
        let step = first_step(site["routes"].as_array()?, here, &target)?;
        Some((target, step))
    }
}

/// The first area on a shortest way from `from` to `to` along `routes`
/// (each `{from, to}`, both ways), by breadth-first search.
fn first_step(routes: &[Value], from: &str, to: &str) -> Option<String> {
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    for r in routes {
        if let (Some(a), Some(b)) = (r["from"].as_str(), r["to"].as_str()) {
            next.entry(a).or_default().push(b);
            next.entry(b).or_default().push(a);
        }
    }
    // Each area reached remembers the first step that led to it.
    let mut first: HashMap<&str, &str> = HashMap::new();
    let mut ring: Vec<&str> = vec![from];
    first.insert(from, from);
    while !ring.is_empty() {
        let mut further = Vec::new();
        for area in ring {
            for &n in next.get(area).into_iter().flatten() {
                if first.contains_key(n) {
                    continue;
                }
                let step = if area == from { n } else { first[area] };
                first.insert(n, step);
                if n == to {
                    return Some(step.to_owned());
                }
                further.push(n);
            }
        }
        ring = further;
    }
    None
}

/// The dice expression a roll narrated in Chinese reads as words: "2d6+1"
/// is "2个6面骰+1"; anything else is left as it is.
fn dice_zh(expr: &str) -> String {
    match crate::game::dice::DiceExpr::parse(expr) {
        Ok(d) => {
            let modifier = match d.modifier {
                0 => String::new(),
                m if m > 0 => format!("+{m}"),
                m => m.to_string(),
            };
            format!("{}个{}面骰{modifier}", d.count, d.sides)
        }
        Err(_) => expr.to_owned(),
    }
}

/// What the player's commands asked for, as the narration needs it.
pub(super) struct Asked<'a> {
    /// A place a `go to` named that the context does not hold.
    pub unknown: Option<&'a str>,
    /// The areas the turn's moves were for, in order: the n-th `move`
    /// result answers the n-th of them.
    pub targets: Vec<String>,
    /// The dice expressions the turn's rolls read, in order.
    pub dice: Vec<&'a str>,
    /// The waits and reminders the turn's timers are for, in order.
    pub waits: Vec<&'a Wait>,
}

/// Narrates what this turn's tools did (the campaign listings it read
/// along the way are not told): `names` are the campaign's Chinese names
/// the turn read.
pub(super) fn results(
    context: &Value,
    results: &[(&str, &Value)],
    asked: &Asked<'_>,
    names: HashMap<String, (String, String)>,
    zh: bool,
) -> ModelReply {
    let teller = Teller {
        context,
        names,
        zh,
        site: results
            .iter()
            .find(|(t, r)| *t == "get_site_map" && !failed(r))
            .map(|(_, r)| *r),
    };
    let names = &teller.names;
    let unknown = asked.unknown;
    let mut targets = asked.targets.iter();
    let mut dice = asked.dice.iter().copied();
    let mut waits = asked.waits.iter().copied();
    let turn = context["turn"].as_u64().unwrap_or_default();
    let mut moves = 0u64;
    let mut parts = Vec::new();
    let mut dialog_type = "narration";
    for (tool, r) in results {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let target = (*tool == "move").then(|| targets.next()).flatten();
        let expr = (*tool == "roll_dice").then(|| dice.next()).flatten();
        let wait = (*tool == "schedule_event").then(|| waits.next()).flatten();
        if failed(r)
            && *tool == "schedule_event"
            && !matches!(
                r["reason"].as_str(),
                Some("tool_not_allowed" | "tool_disabled")
            )
        {
            parts.push(timed::refused(r, zh));
            continue;
        }
        if failed(r) {
            // A look around in a campaign that allows none of its tools is
            // several calls refused alike: the refusal is told once.
            let told = teller.failure(tool, r, target.map(String::as_str), expr);
            if !parts.contains(&told) {
                parts.push(told);
            }
            continue;
        }
        if adventure::is_listing(tool, r) || (*tool == "get_site_map" && unknown.is_some()) {
            // Read to name things, or to find a place: not told itself.
            continue;
        }
        parts.push(match *tool {
            "move" => {
                dialog_type = "scene_description";
                let area = &r["area"];
                let id = area["area_id"].as_str().unwrap_or_default();
                let (name, desc) = match names.get(id) {
                    Some((name, desc)) if zh => (name.clone(), desc.clone()),
                    _ => (s(&area["name"]), s(&area["description"])),
                };
                // Each turn starts one phrasing back and each move of the
                // turn steps one on, so consecutive moves read differently
                // (in a turn or across turns) unless one message moves as
                // often as there are phrasings.
                let len = voice::MOVES.len() as u64;
                let n = moves + turn * (len - 1);
                moves += 1;
                let arrive =
                    voice::say(voice::MOVES, n, zh, &[("place", &voice::place(&name, zh))]);
                // The scene's own words, as the player arrives.
                match (desc.trim().is_empty(), zh) {
                    (true, _) => arrive,
                    (false, true) => format!("{arrive}{}", desc.trim()),
                    (false, false) => format!("{arrive} {}", desc.trim()),
                }
            }
            "move_options" => {
                let here = voice::place(
                    &teller.name(&s(&r["area"]["area_id"]), &s(&r["area"]["name"])),
                    zh,
                );
                let opts: Vec<String> = r["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| voice::place(&teller.name(&s(&a["area_id"]), &s(&a["name"])), zh))
                    .collect();
                let far = unknown.and_then(|place| teller.far_place(place));
                let mut text = match (unknown, far) {
                    (Some(_), Some((target, step))) if zh => format!(
                        "{}离这里不止一步；要去那里，得先经过{}。",
                        teller.place(&target),
                        teller.place(&step)
                    ),
                    (Some(_), Some((target, step))) => format!(
                        "{} is more than one step from here; the way there goes through {}. ",
                        capitalized(&teller.place(&target)),
                        teller.place(&step)
                    ),
                    (Some(place), None) if zh => format!("我不知道附近有叫“{place}”的地方。"),
                    (Some(place), None) => {
                        format!("I know of no place called \"{place}\" near here. ")
                    }
                    (None, _) => String::new(),
                };
                text.push_str(&match (opts.is_empty(), zh) {
                    (true, true) => format!("从{here}无路可走。"),
                    (true, false) => format!("There is no way onward from {here}."),
                    (false, true) => format!("从{here}你可以前往{}。", voice::list(&opts, true)),
                    (false, false) => {
                        format!("From {here} you can go to {}.", voice::list(&opts, false))
                    }
                });
                text
            }
            "roll_dice" => {
                let rolls: Vec<String> = r["rolls"]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.to_string()).collect())
                    .unwrap_or_default();
                let (expr, total) = (s(&r["dice"]), r["total"].to_string());
                if zh {
                    format!(
                        "你掷出{}：[{}]，总计 {total}。",
                        dice_zh(&expr),
                        rolls.join(", ")
                    )
                } else {
                    format!("You roll {expr}: [{}], total {total}.", rolls.join(", "))
                }
            }
            "map_generate" => {
                dialog_type = "scene_description";
                grouped(r, zh).unwrap_or_else(|| {
                    made(
                        r,
                        "areas",
                        ("New ways open before you: ", "新的道路展开，通向："),
                        zh,
                    )
                })
            }
            "get_character_stats" => {
                let inv: Vec<String> = r["inventory"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|i| {
                                let item =
                                    teller.name(&format!("item_{}", s(&i["slug"])), &s(&i["name"]));
                                format!("{item} ×{}", i["quantity"])
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let (name, hp, max, level, area) = (
                    teller.name(&s(&r["character_id"]), &s(&r["name"])),
                    &r["hp"],
                    &r["max_hp"],
                    &r["level"],
                    voice::place(&teller.name(&s(&r["area_id"]), &s(&r["area_name"])), zh),
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
                let (who, before, hp) = (
                    teller.person(&s(&r["character_id"])),
                    &r["hp_before"],
                    &r["hp"],
                );
                if zh {
                    format!("{who}的生命值 {before} → {hp}。")
                } else {
                    format!("{who}'s HP goes from {before} to {hp}.")
                }
            }
            "generate_zone" => made(
                r,
                "zones",
                ("Scouting reveals new lands: ", "远方出现了新的地带："),
                zh,
            ),
            "search_content" => {
                // Titles and the best record in the player's language
                // when the campaign has them so.
                let titles: Vec<String> = r["results"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| teller.name(&s(&x["content_id"]), &s(&x["title"])))
                            .collect()
                    })
                    .unwrap_or_default();
                let best = &r["items"][0];
                let body = match names.get(best["id"].as_str().unwrap_or_default()) {
                    Some((_, body)) if zh && !body.is_empty() => body.clone(),
                    _ => s(&best["body"]),
                };
                // The best record is quoted, cut where a sentence or word ends.
                let quote = cut_at_boundary(&body, QUOTE_CHARS);
                match (titles.is_empty(), zh) {
                    (true, true) => "没有找到相关的记载。".to_owned(),
                    (true, false) => "The archives hold nothing on that.".to_owned(),
                    (false, true) => format!(
                        "你找到了这些记载：{}。{}：“{quote}”",
                        titles.join("、"),
                        titles[0]
                    ),
                    (false, false) => format!(
                        "You find these records: {}. {}: \"{quote}\"",
                        titles.join(", "),
                        titles[0]
                    ),
                }
            }
            "schedule_event" => timed::scheduled(r, wait, zh),
            "get_site_map" => {
                let (areas, routes) = (
                    r["areas"].as_array().map_or(0, Vec::len),
                    r["routes"].as_array().map_or(0, Vec::len),
                );
                // Routes are listed only when asked for: none listed is
                // not "no routes".
                match (routes, zh) {
                    (0, true) => format!("地图上有 {areas} 个地点。"),
                    (0, false) => format!("The map shows {areas} places."),
                    (_, true) => format!("地图上有 {areas} 个地点，{routes} 条道路。"),
                    (_, false) => {
                        format!("The map shows {areas} places joined by {routes} routes.")
                    }
                }
            }
            // A tool the caller ran itself (`POST /api/chat`, seed 001's
            // `{"success": false, "message": "Error: already consumed"}`):
            // its own words, quoted as they came, say what happened.
            _ => reported(r, zh),
        });
    }
    let joined = if zh { parts.concat() } else { parts.join(" ") };
    ModelReply {
        text: joined,
        dialog_type: Some(dialog_type.into()),
        ..ModelReply::default()
    }
}

/// What a result of a tool questd does not know says of itself: its
/// `message`, after "That did not work" when its `success` is `false`;
/// without a message, "Done." or that it did not work.
pub(super) fn reported(r: &Value, zh: bool) -> String {
    let message = r["message"]
        .as_str()
        .map(|m| cut_at_boundary(m, QUOTE_CHARS));
    let message = message.as_deref().filter(|m| !m.is_empty());
    let ended = |m: &str| m.ends_with(['.', '!', '?', '。', '！', '？']);
    match (r["success"] == false, message, zh) {
        (true, Some(m), true) => format!("没有成功：{m}"),
        (true, Some(m), false) if ended(m) => format!("That did not work: {m}"),
        (true, Some(m), false) => format!("That did not work: {m}."),
        (true, None, true) => "没有成功。".to_owned(),
        (true, None, false) => "That did not work.".to_owned(),
        (false, Some(m), _) if ended(m) => m.to_owned(),
        (false, Some(m), true) => format!("{m}。"),
        (false, Some(m), false) => format!("{m}."),
        (false, None, true) => "完成了。".to_owned(),
        (false, None, false) => "Done.".to_owned(),
    }
}

/// The names of what a generator made (the `list` of its result, `areas`
/// or `zones`), after an opening in the player's language. English names
/// that hold commas ("Misty Forest, Ashfall") are parted by semicolons.
fn made(r: &Value, list: &str, (en, zh_text): (&str, &str), zh: bool) -> String {
    let names: Vec<&str> = r[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["name"].as_str())
        .collect();
    if zh {
        format!("{zh_text}{}。", names.join("、"))
    } else if names.iter().any(|n| n.contains(',')) {
        format!("{en}{}.", names.join("; "))
    } else {
        format!("{en}{}.", names.join(", "))
    }
}

/// New places that share one theme, told as the map draws them: the theme
/// once, then each place by its short name ("New ways open before you,
/// into the Lantern Halls: the Hollow Bridge and the Gilded Passage."),
/// rather than the theme repeated in every name. `None` when the places
/// have no common group, or one lacks a short name.
fn grouped(r: &Value, zh: bool) -> Option<String> {
    let areas = r["areas"].as_array().filter(|a| !a.is_empty())?;
    let group = areas[0]["group"].as_str().filter(|g| !g.is_empty())?;
    let shorts = areas
        .iter()
        .map(|a| {
            let short = a["short_name"].as_str().filter(|n| !n.is_empty())?;
            (a["group"].as_str() == Some(group)).then(|| voice::place(short, zh))
        })
        .collect::<Option<Vec<String>>>()?;
    let places = voice::list(&shorts, zh);
    Some(if zh {
        format!("新的道路展开，通向{group}：{places}。")
    } else {
        format!(
            "New ways open before you, into {}: {}.",
            voice::place(group, zh),
            places
        )
    })
}

/// `text` with its first letter upper-cased, to open a sentence.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
