//! The offline game master and the session's timers (docs/protocol.md,
//! "Durable timers"): a player asking to wait or to be reminded
//! (`wait 10 minutes`, `remind me in 30 seconds to check the door`,
//! `等 30 秒`, `30秒后提醒我检查门`) becomes one `schedule_event` call whose
//! note says, in the player's language, what to tell them when it fires;
//! and a world turn (the session's message [`world_message`] when a timer
//! is due) is narrated from that note, in the note's language.
//!
//! The demo's own timed event lives here too: taking the sealed oil in the
//! Drowned Market starts the tide ([`TIDE`]); when it fires, the world turn
//! writes the flooded market into the session (two `area_state` drafts,
//! English and Chinese) before it tells it, so `look` there reads the
//! change from the journalled state afterwards.
//!
//! [`world_message`]: crate::game::timers::world_message

use serde_json::{Value, json};

use super::words::cut_at_boundary;
use crate::game::names::has_cjk;
use crate::game::timers::{MAX_HORIZON_S, MAX_NOTE_CHARS, parse_rfc3339};

/// Event name of a player's `wait`.
pub(super) const WAIT_EVENT: &str = "player_wait";
/// Event name of a player's `remind me`.
pub(super) const REMINDER_EVENT: &str = "reminder";
/// Longest part of a note quoted from the player's words, in characters:
/// with its frame it stays within [`MAX_NOTE_CHARS`].
const QUOTED_CHARS: usize = MAX_NOTE_CHARS - 100;

/// A unit of time a player names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Second,
    Minute,
    Hour,
    Day,
}

impl Unit {
    fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
        }
    }

    /// `count` of this unit, in words of the language ("10 minutes",
    /// "1 hour", "10 分钟").
    fn said(self, count: u64, zh: bool) -> String {
        if zh {
            let unit = match self {
                Unit::Second => "秒",
                Unit::Minute => "分钟",
                Unit::Hour => "小时",
                Unit::Day => "天",
            };
            return format!("{count} {unit}");
        }
        let unit = match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
        };
        let plural = if count == 1 { "" } else { "s" };
        format!("{count} {unit}{plural}")
    }
}

/// A player's wait or reminder, as read from their words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wait {
    pub count: u64,
    pub unit: Unit,
    /// What to remind them of; `None` for a plain wait.
    pub about: Option<String>,
    /// Whether the player wrote Chinese.
    pub zh: bool,
}

impl Wait {
    /// The delay in seconds (saturating: an absurd ask is out of range,
    /// never an overflow).
    pub fn delay_s(&self) -> u64 {
        self.count.saturating_mul(self.unit.seconds())
    }

    /// Whether a timer may wait this long (§9: 1 s to 30 days).
    pub fn in_range(&self) -> bool {
        (1..=MAX_HORIZON_S).contains(&self.delay_s())
    }

    /// How long, in the player's words.
    fn said(&self) -> String {
        self.unit.said(self.count, self.zh)
    }

    fn event(&self) -> &'static str {
        if self.about.is_some() {
            REMINDER_EVENT
        } else {
            WAIT_EVENT
        }
    }

    /// What the world turn tells the player when the time is up.
    fn note(&self) -> String {
        let said = self.said();
        match (&self.about, self.zh) {
            (Some(about), true) => format!("提醒：{about}。"),
            (Some(about), false) => format!("Reminder: {about}."),
            (None, true) => format!("你等的 {said}到了。"),
            (None, false) => format!("The {said} you waited are up."),
        }
    }

    /// The `schedule_event` call that carries it out.
    pub fn call(&self) -> (&'static str, Value) {
        (
            "schedule_event",
            json!({"event": self.event(), "note": self.note(), "delay_s": self.delay_s()}),
        )
    }

    /// The answer to an ask out of range: no timer, words.
    pub fn out_of_range(&self) -> String {
        let said = self.said();
        match (self.delay_s() == 0, self.zh) {
            (true, true) => "等待至少要 1 秒。".to_owned(),
            (true, false) => "A wait needs at least 1 second.".to_owned(),
            (false, true) => format!("{said}太久了：最多只能等 30 天。"),
            (false, false) => format!("{said} is too long: I can wait at most 30 days."),
        }
    }
}

/// Reads a wait or a reminder: `t` trimmed, `lower` its lower case.
pub(super) fn parse_wait(t: &str, lower: &str) -> Option<Wait> {
    if has_cjk(t) {
        return parse_wait_zh(t);
    }
    let english = |count: u64, unit: Unit, about: Option<&str>| Wait {
        count,
        unit,
        about: about.map(|a| quoted(original(t, lower, a))),
        zh: false,
    };
    for prefix in ["wait for ", "wait "] {
        if let Some(rest) = lower.strip_prefix(prefix) {
            let (count, unit) = duration_en(rest)?;
            return Some(english(count, unit, None));
        }
    }
    let rest = lower.strip_prefix("remind me ")?;
    // "remind me in 30 seconds to check the door"
    if let Some(rest) = rest.strip_prefix("in ") {
        let (when, about) = match rest.split_once(" to ") {
            Some((when, about)) => (when, Some(about)),
            None => (rest, None),
        };
        let (count, unit) = duration_en(when)?;
        return Some(english(count, unit, about.filter(|a| !a.trim().is_empty())));
    }
    // "remind me to check the door in 30 seconds"
    let about = rest.strip_prefix("to ")?;
    let (about, when) = about.rsplit_once(" in ")?;
    let (count, unit) = duration_en(when)?;
    (!about.trim().is_empty()).then(|| english(count, unit, Some(about)))
}

/// `part` (a slice of `lower`, the lower case of `t`) in the player's own
/// casing; as it is when lower-casing changed the text's byte length.
fn original<'a>(t: &'a str, lower: &'a str, part: &'a str) -> &'a str {
    let at = (part.as_ptr() as usize).wrapping_sub(lower.as_ptr() as usize);
    if t.len() != lower.len() || at > lower.len() {
        return part;
    }
    t.get(at..at + part.len()).unwrap_or(part)
}

/// The player's words as a note quotes them: trimmed, without a closing
/// full stop, and cut to [`QUOTED_CHARS`].
fn quoted(words: &str) -> String {
    let words = words.trim().trim_end_matches(['.', '。']);
    cut_at_boundary(words, QUOTED_CHARS)
}

/// `10 minutes`, `30 s`, `an hour`, `2days`: a count and a unit, nothing more.
fn duration_en(text: &str) -> Option<(u64, Unit)> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (count, unit) = if digits > 0 {
        (count_of(&text[..digits]), text[digits..].trim())
    } else {
        let (word, unit) = text.split_once(' ')?;
        match word {
            "a" | "an" | "one" => (1, unit.trim()),
            _ => return None,
        }
    };
    let unit = match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => Unit::Second,
        "m" | "min" | "mins" | "minute" | "minutes" => Unit::Minute,
        "h" | "hr" | "hrs" | "hour" | "hours" => Unit::Hour,
        "d" | "day" | "days" => Unit::Day,
        _ => return None,
    };
    Some((count, unit))
}

/// Digits as a count; too many of them is the largest count (out of
/// range, never an overflow).
fn count_of(digits: &str) -> u64 {
    digits.parse().unwrap_or(u64::MAX)
}

/// `等 30 秒`, `等待十分钟`, `30秒后提醒我检查门`, `提醒我30秒后检查门`.
fn parse_wait_zh(t: &str) -> Option<Wait> {
    let chinese = |(count, unit): (u64, Unit), about: Option<&str>| Wait {
        count,
        unit,
        about: about
            .map(|a| quoted(a.trim_start_matches(['，', ',', '：', ':'])))
            .filter(|a| !a.is_empty()),
        zh: true,
    };
    for prefix in ["等待", "等我", "等"] {
        if let Some(rest) = t.strip_prefix(prefix) {
            return Some(chinese(duration_zh(rest)?, None));
        }
    }
    // "30秒后提醒我检查门"
    if let Some((when, about)) = t.split_once("后提醒我") {
        return Some(chinese(duration_zh(when)?, Some(about)));
    }
    // "提醒我30秒后检查门"
    let rest = t.strip_prefix("提醒我")?;
    let (when, about) = rest.split_once('后')?;
    Some(chinese(duration_zh(when)?, Some(about)))
}

/// `30 秒`, `十分钟`, `两个小时`, `1天`: a count (digits or simple Chinese
/// numerals) and a unit, nothing more.
fn duration_zh(text: &str) -> Option<(u64, Unit)> {
    let text = text.trim();
    const UNITS: [(&str, Unit); 9] = [
        ("秒钟", Unit::Second),
        ("秒", Unit::Second),
        ("分钟", Unit::Minute),
        ("分", Unit::Minute),
        ("个小时", Unit::Hour),
        ("小时", Unit::Hour),
        ("个钟头", Unit::Hour),
        ("天", Unit::Day),
        ("日", Unit::Day),
    ];
    let (count, unit) = UNITS
        .iter()
        .find_map(|(word, unit)| Some((text.strip_suffix(word)?.trim(), *unit)))?;
    let count = if !count.is_empty() && count.chars().all(|c| c.is_ascii_digit()) {
        count_of(count)
    } else {
        zh_number(count)?
    };
    Some((count, unit))
}

/// A simple Chinese numeral (`五`, `十`, `十五`, `二十`, `一百二十`, `两`)
/// below ten thousand.
fn zh_number(text: &str) -> Option<u64> {
    let digit = |c: char| "零一二三四五六七八九".chars().position(|d| d == c);
    let (mut total, mut current, mut seen) = (0u64, None::<u64>, false);
    for c in text.chars() {
        seen = true;
        if let Some(d) = digit(c) {
            current = Some(d as u64);
            continue;
        }
        let scale = match c {
            '两' => {
                current = Some(2);
                continue;
            }
            '十' => 10,
            '百' => 100,
            '千' => 1000,
            _ => return None,
        };
        total += current.take().unwrap_or(1) * scale;
    }
    seen.then_some(total + current.unwrap_or(0))
}

/// Tells a `schedule_event` result of a player's wait (`asked`, when the
/// turn's command was one): that it is set, and when it is due.
pub(super) fn scheduled(result: &Value, asked: Option<&Wait>, zh: bool) -> String {
    let at = result["due_at"]
        .as_str()
        .and_then(parse_rfc3339)
        .map(clock)
        .unwrap_or_default();
    let at = match (at.is_empty(), zh) {
        (true, _) => String::new(),
        (false, true) => format!("（UTC {at}）"),
        (false, false) => format!(" (at {at} UTC)"),
    };
    let Some(wait) = asked else {
        let event = result["event"].as_str().unwrap_or_default();
        return if zh {
            format!("“{event}”已经排定{at}。")
        } else {
            format!("\"{event}\" is set{at}.")
        };
    };
    let said = wait.said();
    match (&wait.about, zh) {
        (Some(about), true) => format!("好的，{said}后{at}我会提醒你：{about}。"),
        (Some(about), false) => format!("I will remind you in {said}{at}: {about}."),
        (None, true) => format!("你静下心来等待 {said}；时间一到{at}，我就告诉你。"),
        (None, false) => {
            format!("You settle in to wait {said}; I will tell you when the time is up{at}.")
        }
    }
}

/// A `schedule_event` refusal in words.
pub(super) fn refused(result: &Value, zh: bool) -> String {
    match (result["error_code"].as_str(), zh) {
        (Some("TIMER_LIMIT"), true) => {
            "已经有太多事情在等着发生了；先等其中一件过去吧。".to_owned()
        }
        (Some("TIMER_LIMIT"), false) => {
            "Too many things are already waiting to happen; let one of them pass first.".to_owned()
        }
        (_, true) => "这件事没能排上日程。".to_owned(),
        (_, false) => "That could not be scheduled.".to_owned(),
    }
}

/// A time of day, `HH:MM:SS` (UTC), from ms since the Unix epoch.
fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The demo's timed event: taking an item starts it.
pub(super) struct TimedTake {
    /// The slug of the item whose taking starts it.
    pub item: &'static str,
    /// The area the item is taken from.
    pub area: &'static str,
    pub event: &'static str,
    /// Its key: taking the item again (or a retried turn) replaces the
    /// timer rather than adding one.
    pub key: &'static str,
    /// How long after the taking it fires: a minute, so a player sees it
    /// in a short session.
    pub delay_s: u64,
    /// Its note (English, Chinese): what the world turn tells.
    pub note: (&'static str, &'static str),
    /// What the taker is told is coming (English, Chinese).
    pub warning: (&'static str, &'static str),
    /// The area's description afterwards (English, Chinese).
    pub after: (&'static str, &'static str),
}

/// The tide of the Drowned Market.
pub(super) const TIDE: TimedTake = TimedTake {
    item: "sealed_lamp_oil",
    area: "area_007",
    event: "tide_floods_market",
    key: "tide_floods_market",
    delay_s: 60,
    note: (
        "The tide floods the Drowned Market.",
        "潮水淹没了溺水集市。",
    ),
    warning: (
        "As the jar comes free, the water around the stalls begins to stir: the tide is coming back.",
        "油罐一松开，摊位四周的水就开始翻动：潮水要回来了。",
    ),
    after: (
        "The tide has come in: the whole square lies under dark water now. Only the tops of the \
         awnings show, and the chained lanterns hang drowned beneath the surface, still burning.",
        "潮水已经涌了进来：整个广场都沉在黑水之下，只露出遮篷的顶端，链子上的灯笼沉在水面下，依然亮着。",
    ),
};

/// The timed event taking `slug` from `area` starts, if any.
pub(super) fn timed_take(slug: &str, area: &str) -> Option<&'static TimedTake> {
    (TIDE.item == slug && TIDE.area == area).then_some(&TIDE)
}

impl TimedTake {
    /// The `schedule_event` call that starts it, its note in the taker's
    /// language.
    pub fn call(&self, zh: bool) -> (&'static str, Value) {
        let note = if zh { self.note.1 } else { self.note.0 };
        (
            "schedule_event",
            json!({"event": self.event, "note": note, "delay_s": self.delay_s, "key": self.key}),
        )
    }
}

/// Content type of an area's description as the world changed it: a draft
/// whose title is the area id, tagged `zh` for the Chinese one; `look`
/// there reads it instead of the campaign's description.
pub(super) const AREA_STATE_TYPE: &str = "area_state";

/// What a world turn does next: its calls, or its narration.
pub(super) enum WorldStep {
    Calls(Vec<(&'static str, Value)>),
    Say(String),
}

/// A world turn: `event` is due with `note`; `results` are the turn's
/// tool results so far, and `may_call` whether it may still call tools.
/// Told in the note's language; the demo's tide first writes the flooded
/// market into the session.
pub(super) fn world_turn(
    event: &str,
    note: &str,
    results: &[(&str, &Value)],
    may_call: bool,
) -> WorldStep {
    let zh = has_cjk(note);
    let timed = (TIDE.event == event).then_some(&TIDE);
    if let Some(timed) = timed
        && results.is_empty()
        && may_call
    {
        let state = |body: &str, zh: bool| {
            (
                "create_draft_content",
                json!({
                    "content_type": AREA_STATE_TYPE,
                    "title": timed.area,
                    "body": body,
                    "tags": [if zh { "zh" } else { "en" }, timed.event],
                    "area_id": timed.area,
                }),
            )
        };
        return WorldStep::Calls(vec![
            state(timed.after.0, false),
            state(timed.after.1, true),
        ]);
    }
    let mut text = match (note.trim().is_empty(), zh) {
        (true, _) => format!("The moment of \"{event}\" has come."),
        (false, true) => format!("时间流逝。{}", note.trim()),
        (false, false) => format!("Time passes. {}", note.trim()),
    };
    if let Some(timed) = timed {
        if zh {
            text.push_str(timed.after.1);
        } else {
            text.push(' ');
            text.push_str(timed.after.0);
        }
    }
    WorldStep::Say(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Option<Wait> {
        let t = text.trim();
        parse_wait(t, &t.to_lowercase())
    }

    fn wait(count: u64, unit: Unit, about: Option<&str>, zh: bool) -> Option<Wait> {
        Some(Wait {
            count,
            unit,
            about: about.map(str::to_owned),
            zh,
        })
    }

    #[test]
    fn waits_and_reminders_are_read_in_english_and_chinese() {
        use Unit::*;
        let cases = [
            ("wait 10 minutes", wait(10, Minute, None, false)),
            ("Wait 30 seconds", wait(30, Second, None, false)),
            ("wait for an hour", wait(1, Hour, None, false)),
            ("wait 2days", wait(2, Day, None, false)),
            ("wait 45s", wait(45, Second, None, false)),
            (
                "remind me in 30 seconds to check the door",
                wait(30, Second, Some("check the door"), false),
            ),
            (
                "Remind me to Check The Door in 5 min",
                wait(5, Minute, Some("Check The Door"), false),
            ),
            ("remind me in 1 minute", wait(1, Minute, None, false)),
            ("等 30 秒", wait(30, Second, None, true)),
            ("等十分钟", wait(10, Minute, None, true)),
            ("等待二十五秒", wait(25, Second, None, true)),
            ("等两个小时", wait(2, Hour, None, true)),
            ("30秒后提醒我检查门", wait(30, Second, Some("检查门"), true)),
            (
                "提醒我十五分钟后，喝药",
                wait(15, Minute, Some("喝药"), true),
            ),
            ("等一百二十秒", wait(120, Second, None, true)),
            // Not waits: talk, or words without a time.
            ("wait", None),
            ("wait for me", None),
            ("waiter!", None),
            ("remind me of the oath", None),
            ("等等", None),
            ("等一下", None),
        ];
        for (text, expected) in cases {
            assert_eq!(read(text), expected, "{text}");
        }
    }

    #[test]
    fn chinese_numerals_read_as_numbers() {
        for (text, n) in [
            ("五", 5),
            ("十", 10),
            ("十五", 15),
            ("二十", 20),
            ("三百零五", 305),
            ("两", 2),
            ("一千", 1000),
        ] {
            assert_eq!(zh_number(text), Some(n), "{text}");
        }
        assert_eq!(zh_number(""), None);
        assert_eq!(zh_number("下"), None);
    }

    #[test]
    fn a_wait_becomes_one_schedule_call_with_a_note_in_the_players_language() {
        let (tool, args) = read("remind me in 30 seconds to check the door")
            .unwrap()
            .call();
        assert_eq!(tool, "schedule_event");
        assert_eq!(
            args,
            json!({"event": "reminder", "note": "Reminder: check the door.", "delay_s": 30})
        );
        let (_, args) = read("等十分钟").unwrap().call();
        assert_eq!(
            args,
            json!({"event": "player_wait", "note": "你等的 10 分钟到了。", "delay_s": 600})
        );
        let (_, args) = read("wait 30 seconds").unwrap().call();
        assert_eq!(args["note"], "The 30 seconds you waited are up.");
        let (_, args) = read("30秒后提醒我检查门").unwrap().call();
        assert_eq!(args["note"], "提醒：检查门。");
    }

    #[test]
    fn waits_past_the_horizon_or_of_nothing_are_out_of_range() {
        assert!(read("wait 30 days").unwrap().in_range());
        for text in [
            "wait 31 days",
            "wait 0 seconds",
            "wait 99999999999999999999999 hours",
            "等 9999 天",
        ] {
            assert!(!read(text).unwrap().in_range(), "{text}");
        }
        assert_eq!(
            read("wait 31 days").unwrap().out_of_range(),
            "31 days is too long: I can wait at most 30 days."
        );
        assert_eq!(
            read("等 40 天").unwrap().out_of_range(),
            "40 天太久了：最多只能等 30 天。"
        );
    }

    #[test]
    fn a_scheduled_wait_is_told_with_its_due_time() {
        let result = json!({"timer_id": "tmr_1", "event": "reminder",
            "due_at": "2026-11-29T10:00:30Z", "repeat_s": null});
        let en = read("remind me in 30 seconds to check the door");
        assert_eq!(
            scheduled(&result, en.as_ref(), false),
            "I will remind you in 30 seconds (at 10:00:30 UTC): check the door."
        );
        let zh = read("等 30 秒");
        assert_eq!(
            scheduled(&result, zh.as_ref(), true),
            "你静下心来等待 30 秒；时间一到（UTC 10:00:30），我就告诉你。"
        );
    }

    #[test]
    fn a_world_turn_is_told_from_its_note_in_the_notes_language() {
        let WorldStep::Say(en) = world_turn("reminder", "Reminder: check the door.", &[], true)
        else {
            panic!("a reminder calls no tools");
        };
        assert_eq!(en, "Time passes. Reminder: check the door.");
        let WorldStep::Say(zh) = world_turn("player_wait", "你等的 30 秒到了。", &[], true)
        else {
            panic!("a wait calls no tools");
        };
        assert_eq!(zh, "时间流逝。你等的 30 秒到了。");
        let WorldStep::Say(bare) = world_turn("guards_return", "", &[], true) else {
            panic!("no tools");
        };
        assert_eq!(bare, "The moment of \"guards_return\" has come.");
    }

    #[test]
    fn the_tide_writes_the_flooded_market_before_it_is_told() {
        let WorldStep::Calls(calls) = world_turn(TIDE.event, TIDE.note.1, &[], true) else {
            panic!("the tide writes the market's new state first");
        };
        assert_eq!(calls.len(), 2);
        for (tool, args) in &calls {
            assert_eq!(*tool, "create_draft_content");
            assert_eq!(args["content_type"], AREA_STATE_TYPE);
            assert_eq!(args["title"], TIDE.area);
        }
        let written = json!({"content_id": "draft_000000000001", "status": "draft"});
        let results = [
            ("create_draft_content", &written),
            ("create_draft_content", &written),
        ];
        let WorldStep::Say(zh) = world_turn(TIDE.event, TIDE.note.1, &results, true) else {
            panic!("then it tells it");
        };
        assert!(
            zh.contains("潮水淹没了溺水集市") && zh.contains("整个广场"),
            "{zh}"
        );
        let WorldStep::Say(en) = world_turn(TIDE.event, TIDE.note.0, &results, true) else {
            panic!("then it tells it");
        };
        assert!(
            en.contains("The tide floods the Drowned Market.") && en.contains("dark water"),
            "{en}"
        );
    }
}
