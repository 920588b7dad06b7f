//! The offline game master's phrasings: how it tells a move, a pickup, a
//! blow and a word spoken, each said several ways.
//!
//! Every phrasing is a pair, English and Chinese, with the same content, so
//! a story reads the same in both languages. The game master keeps nothing
//! between answers, so which phrasing is said is chosen from a number the
//! request holds: the turn's number (plus the move's place in its turn when
//! a message moves twice). Consecutive turns get consecutive phrasings, so
//! two moves in a row never read the same, and the same game told again
//! reads the same, word for word.

use crate::game::names::has_cjk;

/// A phrasing in both languages; `{name}`-style fields are filled in.
pub(super) type Phrasing = (&'static str, &'static str);

/// Arriving somewhere: `{place}`.
pub(super) const MOVES: &[Phrasing] = &[
    ("You make your way to {place}.", "你来到了{place}。"),
    (
        "A few careful steps, and you stand in {place}.",
        "小心地走了几步，你已站在{place}。",
    ),
    ("You press on into {place}.", "你继续向前，走进了{place}。"),
    (
        "The way opens, and {place} lies before you.",
        "前路豁然开朗，{place}就在眼前。",
    ),
    (
        "Your footsteps run ahead of you, echoing, into {place}.",
        "你的脚步声先你一步，在{place}里回响。",
    ),
    (
        "You follow the path to its end: {place}.",
        "你沿着小路走到尽头：{place}。",
    ),
    ("At last you reach {place}.", "你终于抵达了{place}。"),
];

/// Taking an item: `{item}`.
pub(super) const TAKES: &[Phrasing] = &[
    ("You take the {item}.", "你拿起了{item}。"),
    (
        "You lift the {item} and stow it in your pack.",
        "你拿起{item}，收进了背包。",
    ),
    ("The {item} is yours now.", "{item}现在归你了。"),
    (
        "You pick up the {item} and tuck it safely away.",
        "你捡起{item}，小心收好。",
    ),
    (
        "Carefully, you take the {item}.",
        "你小心翼翼地拿走了{item}。",
    ),
];

/// Someone speaking: `{name}` (at a sentence's start), `{speech}`.
pub(super) const SPEECH: &[Phrasing] = &[
    ("{name} looks up. \"{speech}\"", "{name}抬起头：“{speech}”"),
    (
        "{name} turns to you. \"{speech}\"",
        "{name}转向你：“{speech}”",
    ),
    (
        "{name} meets your eyes. \"{speech}\"",
        "{name}看着你的眼睛：“{speech}”",
    ),
    (
        "{name} speaks quietly. \"{speech}\"",
        "{name}低声说：“{speech}”",
    ),
    (
        "{name} leans closer. \"{speech}\"",
        "{name}凑近了些：“{speech}”",
    ),
];

/// The hero's blow landing: `{roll}`, `{foe}` (inside a sentence), `{dealt}`.
pub(super) const HITS: &[Phrasing] = &[
    (
        "You roll {roll} and hit {foe} for {dealt}.",
        "你掷出 {roll}，击中{foe}，造成 {dealt} 点伤害。",
    ),
    (
        "You roll {roll}; your blow finds a gap in {foe}'s guard: {dealt} damage.",
        "你掷出 {roll}，一击穿过{foe}的防守，造成 {dealt} 点伤害。",
    ),
    (
        "You roll {roll}, and steel rings as you strike {foe} for {dealt}.",
        "你掷出 {roll}，兵刃铮然作响，你击中{foe}，造成 {dealt} 点伤害。",
    ),
    (
        "You roll {roll}: {foe} staggers under your blow and loses {dealt}.",
        "你掷出 {roll}：{foe}在你的攻击下踉跄，失去 {dealt} 点生命。",
    ),
    (
        "You roll {roll} and drive your blow home against {foe}: {dealt} damage.",
        "你掷出 {roll}，重重一击落在{foe}身上，造成 {dealt} 点伤害。",
    ),
];

/// The hero's blow missing: `{roll}`, `{foe}` (inside a sentence).
pub(super) const MISSES: &[Phrasing] = &[
    (
        "You roll {roll} and miss {foe}.",
        "你掷出 {roll}，没有击中{foe}。",
    ),
    (
        "You roll {roll}; {foe} turns your blow aside.",
        "你掷出 {roll}，{foe}挡开了你的攻击。",
    ),
    (
        "You roll {roll}, and your strike cuts only air.",
        "你掷出 {roll}，这一击落了空。",
    ),
    (
        "You roll {roll}: {foe} sidesteps, and your blow goes wide.",
        "你掷出 {roll}：{foe}闪身避开，你的攻击偏了。",
    ),
    (
        "You roll {roll}; your blow glances off {foe} without harm.",
        "你掷出 {roll}，这一击从{foe}身上擦过，毫发无伤。",
    ),
];

/// A foe's answer landing: `{foe}` (at a sentence's start), `{roll}`, `{taken}`.
pub(super) const STRUCK: &[Phrasing] = &[
    (
        "{foe} strikes back with {roll} and hurts you for {taken}.",
        "{foe}还击，掷出 {roll}，你受到 {taken} 点伤害。",
    ),
    (
        "{foe} answers with {roll}: the blow catches you for {taken}.",
        "{foe}以 {roll} 回敬，这一击让你受到 {taken} 点伤害。",
    ),
    (
        "{foe} rolls {roll} and strikes back hard: {taken} damage to you.",
        "{foe}掷出 {roll}，狠狠还击：你受到 {taken} 点伤害。",
    ),
];

/// A foe's answer missing: `{foe}` (at a sentence's start), `{roll}`.
pub(super) const DODGED: &[Phrasing] = &[
    (
        "{foe} strikes back with {roll} and misses.",
        "{foe}还击，掷出 {roll}，没有击中你。",
    ),
    (
        "{foe} swings back with {roll}, but you are already out of reach.",
        "{foe}掷出 {roll} 挥击反扑，但你已经躲开。",
    ),
    (
        "{foe} answers with {roll}; the blow whistles past you.",
        "{foe}以 {roll} 回击，攻击擦着你呼啸而过。",
    ),
];

/// The phrasing number `n` of `phrasings` (counting round), in the
/// player's language, with its fields filled in.
pub(super) fn say(phrasings: &[Phrasing], n: u64, zh: bool, fields: &[(&str, &str)]) -> String {
    let Some(len) = u64::try_from(phrasings.len()).ok().filter(|l| *l > 0) else {
        return String::new();
    };
    let at = usize::try_from(n % len).unwrap_or_default();
    let (en, zh_text) = phrasings[at];
    fill(if zh { zh_text } else { en }, fields)
}

/// `template` with each `{key}` replaced by its value. The values are
/// filled in one pass, so a value that holds `{…}` is never read again.
fn fill(template: &str, fields: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let key = &after[..close];
            fields
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A name inside an English sentence: a leading "The" lower-cased ("hit
/// the Drowned Warden"); Chinese names as they are.
pub(super) fn inside(name: &str) -> String {
    match name.strip_prefix("The ") {
        Some(rest) => format!("the {rest}"),
        None => name.to_owned(),
    }
}

/// A place as English prose names it, with its article: "the Hall of
/// Wicks". A name that has its own article keeps it (lower-cased inside a
/// sentence); Chinese names take none.
pub(super) fn place(name: &str, zh: bool) -> String {
    let has_article = ["The ", "the ", "A ", "An "]
        .iter()
        .any(|a| name.starts_with(a));
    if zh || name.is_empty() || has_cjk(name) {
        name.to_owned()
    } else if has_article {
        inside(name)
    } else {
        format!("the {name}")
    }
}

/// Names joined as a list is read: "A, B and C" / "A、B和C".
pub(super) fn list(names: &[String], zh: bool) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [head @ .., last] => {
            if zh {
                format!("{}和{last}", head.join("、"))
            } else {
                format!("{} and {last}", head.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_FIELDS: [&str; 8] = [
        "place", "item", "name", "speech", "roll", "foe", "dealt", "taken",
    ];

    #[test]
    fn every_phrasing_has_its_fields_in_both_languages() {
        let tables: [(&[Phrasing], &[&str]); 7] = [
            (MOVES, &["place"]),
            (TAKES, &["item"]),
            (SPEECH, &["name", "speech"]),
            (HITS, &["roll", "foe", "dealt"]),
            (MISSES, &["roll"]),
            (STRUCK, &["foe", "roll", "taken"]),
            (DODGED, &["foe", "roll"]),
        ];
        for (table, fields) in tables {
            for (en, zh) in table {
                for field in fields {
                    let key = format!("{{{field}}}");
                    assert!(en.contains(&key) && zh.contains(&key), "{en} / {zh}");
                }
                assert!(!has_cjk(en), "{en}");
                // Chinese phrasings hold no Latin letter besides their fields.
                let blank: Vec<(&str, &str)> = ALL_FIELDS.iter().map(|f| (*f, "")).collect();
                let bare = fill(zh, &blank);
                assert!(!bare.chars().any(|c| c.is_ascii_alphabetic()), "{zh}");
            }
        }
    }

    #[test]
    fn fields_are_filled_once() {
        assert_eq!(
            fill("{a} and {b}", &[("a", "{b}"), ("b", "B")]),
            "{b} and B"
        );
        assert_eq!(fill("{missing} {", &[]), "{missing} {");
        assert_eq!(
            fill("你来到了{place}。", &[("place", "心灯")]),
            "你来到了心灯。"
        );
    }

    #[test]
    fn places_and_names_read_as_prose() {
        assert_eq!(place("Hall of Wicks", false), "the Hall of Wicks");
        assert_eq!(place("The Heart", false), "the Heart");
        assert_eq!(place("心灯", false), "心灯");
        assert_eq!(place("Hall of Wicks", true), "Hall of Wicks");
        assert_eq!(inside("The Drowned Warden"), "the Drowned Warden");
        assert_eq!(inside("Old Maren"), "Old Maren");
        let names = ["A".to_owned(), "B".to_owned(), "C".to_owned()];
        assert_eq!(list(&names, false), "A, B and C");
        assert_eq!(list(&names, true), "A、B和C");
        assert_eq!(list(&names[..1], false), "A");
    }
}
