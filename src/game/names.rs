//! The words of generated places: `map_generate`'s areas and
//! `generate_zone`'s zones are named and described in the player's language
//! and keep the player's own words.
//!
//! The player's theme or world prompt is cut to a short noun phrase
//! ([`Phrase`]); word lists give the rest (a mood, a kind of place), never a
//! word the phrase already has ([`pick_fresh`]), and a name another place
//! already has is never given again ([`TakenNames`]). Every choice is made by
//! the caller's seeded generator, so the same inputs give the same words.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::rng::SplitMix64;

/// The language names and descriptions are written in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    #[default]
    En,
    Zh,
}

impl Language {
    /// Chinese when the text has a CJK character, else English: the
    /// language a theme or prompt given without one is read in.
    pub fn of_text(text: &str) -> Self {
        if has_cjk(text) { Self::Zh } else { Self::En }
    }
}

/// A CJK ideograph (the unified blocks and their compatibility forms).
pub fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}' | '\u{f900}'..='\u{faff}')
}

/// Whether the text has a CJK ideograph.
pub fn has_cjk(text: &str) -> bool {
    text.chars().any(is_cjk)
}

/// `text` cut to at most `max` characters, at the end of a sentence when one
/// ends within the limit, else at a word boundary, with `…` when cut. Chinese
/// (no spaces) is cut at a sentence end or a comma, else between characters.
pub fn cut_at_boundary(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let end = text
        .char_indices()
        .nth(max)
        .map_or(text.len(), |(at, _)| at);
    let head = &text[..end];
    let sentence_end = head
        .char_indices()
        .filter(|&(at, c)| {
            matches!(c, '。' | '！' | '？')
                || (matches!(c, '.' | '!' | '?')
                    && text[at + c.len_utf8()..].starts_with(char::is_whitespace))
        })
        .map(|(at, c)| at + c.len_utf8())
        .next_back();
    if let Some(at) = sentence_end {
        return head[..at].to_owned();
    }
    let word_end = head
        .char_indices()
        .filter(|&(_, c)| c.is_whitespace() || matches!(c, '，' | '、' | '；'))
        .map(|(at, _)| at)
        .next_back()
        .filter(|&at| at > 0);
    let kept = word_end.map_or(head, |at| &head[..at]);
    format!(
        "{}…",
        kept.trim_end_matches([',', ';', ':', ' ', '，', '、', '；'])
    )
}

/// Most words of an English phrase; a longer prompt keeps its first ones.
pub const MAX_PHRASE_WORDS: usize = 4;
/// Longest word a phrase keeps; a longer run of letters (a sentence
/// without spaces) ends the phrase before it.
pub const MAX_WORD_CHARS: usize = 16;
/// Most characters of a Chinese phrase.
pub const MAX_CJK_PHRASE_CHARS: usize = 8;

/// Words that open a phrase without saying anything about it.
const DETERMINERS: &[&str] = &[
    "a", "an", "the", "some", "my", "our", "your", "their", "his", "her", "its", "this", "that",
    "these", "those", "any", "every",
];
/// Words that start a clause after the noun phrase ("a forest *where* …").
const CLAUSE_WORDS: &[&str] = &[
    "with", "where", "which", "that", "who", "whose", "when", "while", "full", "filled", "is",
    "are", "was", "were", "has", "have", "had",
];
/// Words that cannot end a phrase ("a forest of" is cut to "a forest").
const LINKERS: &[&str] = &[
    "of", "and", "or", "in", "on", "at", "to", "by", "for", "from", "under", "over", "beneath",
    "near", "beyond", "across", "the", "a", "an",
];
/// Words kept lower case inside a title ("Forest of Lanterns").
const SMALL_WORDS: &[&str] = &[
    "of", "and", "or", "the", "a", "an", "in", "on", "at", "to", "by", "for", "from", "with",
];
/// Phrases that name no theme at all ("the world", "这个世界").
const GENERIC: &[&str] = &[
    "world", "game", "setting", "story", "place", "places", "theme", "世界", "游戏", "地方",
];
/// Classifiers after 一 that open a Chinese phrase ("一片迷雾沼泽").
const CLASSIFIERS: &[char] = &['个', '片', '座', '处', '条', '道', '块', '间', '群', '团'];

/// The player's words a place is named after: a short noun phrase taken
/// from a theme or world prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phrase {
    /// As the player wrote it (case kept), single-spaced.
    text: String,
    cjk: bool,
}

impl Phrase {
    /// The noun phrase at the start of `text`, or `None` when the text
    /// names nothing (blank, only stop words, only punctuation). Chinese
    /// text gives its first run of CJK characters; English text its first
    /// clause without a leading article, at most [`MAX_PHRASE_WORDS`] words.
    pub fn of(text: &str) -> Option<Self> {
        let phrase = if has_cjk(text) {
            Self {
                text: cjk_phrase(text)?,
                cjk: true,
            }
        } else {
            Self {
                text: english_phrase(text)?,
                cjk: false,
            }
        };
        let generic = phrase
            .text
            .split_whitespace()
            .all(|w| GENERIC.contains(&w.to_lowercase().as_str()));
        (!generic).then_some(phrase)
    }

    /// The phrase as the player wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The phrase inside a Chinese sentence: as it is, or quoted when it
    /// is not Chinese (“crystal caves”).
    pub fn in_chinese(&self) -> String {
        if self.cjk {
            self.text.clone()
        } else {
            format!("“{}”", self.text)
        }
    }

    /// The label of the places made on this phrase in `language`, as
    /// their names spell it: the title in English ("Crystal Caves"), the
    /// phrase as written in Chinese ("洞穴", "crystal caves").
    pub fn group(&self, language: Language) -> String {
        match language {
            Language::En => self.title(),
            Language::Zh => self.text.clone(),
        }
    }

    /// Whether the phrase is Chinese.
    pub fn is_cjk(&self) -> bool {
        self.cjk
    }

    /// The phrase as a title: each word capitalised but the small ones
    /// inside it ("Misty Forest of Lanterns"); Chinese as it is.
    pub fn title(&self) -> String {
        self.text
            .split_whitespace()
            .enumerate()
            .map(|(i, w)| {
                if i > 0 && SMALL_WORDS.contains(&w.to_lowercase().as_str()) {
                    w.to_lowercase()
                } else {
                    capitalised(w)
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// One English word that is not a plural ("ice", "cave"): it reads
    /// best before the kind of place ("Ice Gallery") rather than after it.
    pub fn is_modifier(&self) -> bool {
        let mut words = self.text.split_whitespace();
        match (words.next(), words.next()) {
            (Some(w), None) => !self.cjk && !is_plural(w),
            _ => false,
        }
    }

    /// Whether `word` (from a word list) repeats the phrase: the same word
    /// give or take a plural or adjective ending ("Misty" and "mist",
    /// "Cave" and "caves"), or, in Chinese, a character the phrase has.
    pub fn repeats(&self, word: &str) -> bool {
        if has_cjk(word) {
            return word.chars().any(|c| self.text.contains(c));
        }
        word.split_whitespace()
            .any(|w| self.text.split_whitespace().any(|p| stem(p) == stem(w)))
    }
}

/// `Phrase::repeats`, for a place with no phrase: nothing to repeat.
pub fn repeats(phrase: Option<&Phrase>, word: &str) -> bool {
    phrase.is_some_and(|p| p.repeats(word))
}

fn english_phrase(text: &str) -> Option<String> {
    // The first clause: punctuation other than apostrophes and hyphens ends it.
    let clause = text
        .split(|c: char| {
            !(c.is_alphanumeric() || c.is_whitespace() || matches!(c, '\'' | '’' | '-'))
        })
        .find(|piece| piece.chars().any(char::is_alphanumeric))?;
    let mut words: Vec<&str> = Vec::new();
    for word in clause.split_whitespace() {
        let word = word.trim_matches(|c: char| matches!(c, '\'' | '’' | '-'));
        let lower = word.to_lowercase();
        if word.is_empty() {
            continue;
        }
        if words.is_empty() && DETERMINERS.contains(&lower.as_str()) {
            continue;
        }
        if (!words.is_empty() && CLAUSE_WORDS.contains(&lower.as_str()))
            || word.chars().count() > MAX_WORD_CHARS
            || words.len() == MAX_PHRASE_WORDS
        {
            break;
        }
        words.push(word);
    }
    while words
        .last()
        .is_some_and(|w| LINKERS.contains(&w.to_lowercase().as_str()))
    {
        words.pop();
    }
    (!words.is_empty()).then(|| words.join(" "))
}

fn cjk_phrase(text: &str) -> Option<String> {
    // The first stretch of CJK characters (spaces inside it dropped).
    let start = text.find(is_cjk)?;
    let mut chars: Vec<char> = text[start..]
        .chars()
        .take_while(|c| is_cjk(*c) || c.is_whitespace())
        .filter(|c| !c.is_whitespace())
        .collect();
    if chars.len() > 2 && chars[0] == '一' && CLASSIFIERS.contains(&chars[1]) {
        chars.drain(..2);
    }
    if chars.len() > MAX_CJK_PHRASE_CHARS {
        // The head of a Chinese noun phrase comes last, after its last 的.
        if let Some(de) = chars.iter().rposition(|c| *c == '的')
            && chars.len() - de > 2
        {
            chars.drain(..=de);
        }
        let excess = chars.len().saturating_sub(MAX_CJK_PHRASE_CHARS);
        chars.drain(..excess);
    }
    (!chars.is_empty()).then(|| chars.into_iter().collect())
}

/// A plural English word, by its ending ("caves", not "moss" or "chaos").
fn is_plural(word: &str) -> bool {
    let w = word.to_lowercase();
    w.chars().count() > 3
        && w.ends_with('s')
        && !["ss", "us", "is", "os"].iter().any(|e| w.ends_with(e))
}

/// A word without a plural -s or adjective -y, for telling repeats apart.
fn stem(word: &str) -> String {
    let w = word.to_lowercase();
    let w = w.strip_suffix('s').unwrap_or(&w);
    w.strip_suffix('y').unwrap_or(w).to_owned()
}

fn capitalised(word: &str) -> String {
    let mut c = word.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// "An" before a vowel letter, else "A": right for the word lists' moods,
/// the only words it is put before.
pub fn article(word: &str) -> &'static str {
    match word.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "An",
        _ => "A",
    }
}

/// One of `list` for which `repeats` is false, chosen by `rng`; any of
/// them when every one repeats. `list` is one of the fixed, non-empty word
/// lists.
pub fn pick_fresh<'a, T>(
    rng: &mut SplitMix64,
    list: &'a [T],
    repeats: impl Fn(&T) -> bool,
) -> &'a T {
    let fresh: Vec<&'a T> = list.iter().filter(|w| !repeats(w)).collect();
    if fresh.is_empty() {
        rng.pick(list)
    } else {
        fresh[rng.below(fresh.len() as u64) as usize]
    }
}

/// Candidate names tried for one no other place has before a numbered one
/// is made.
pub const NAME_ATTEMPTS: usize = 8;

/// The names places already have, compared without case.
pub struct TakenNames(HashSet<String>);

impl TakenNames {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self(names.into_iter().map(str::to_lowercase).collect())
    }

    /// The first of up to [`NAME_ATTEMPTS`] candidates `draw` makes (a name
    /// and what it was made of) that no place has; when all are taken, the
    /// last one numbered ("… (2)", "…（2）" in Chinese) with the lowest
    /// number free. The name is taken from then on.
    pub fn claim<T>(&mut self, mut draw: impl FnMut() -> (String, T)) -> (String, T) {
        let (names, made) = self.claim_all(|| {
            let (name, made) = draw();
            (vec![name], made)
        });
        (names.into_iter().next().unwrap_or_default(), made)
    }

    /// As [`Self::claim`] for a place known by several names (a themed
    /// place's name and its short one): a candidate is free when none of
    /// its names is taken, numbered names are numbered alike, and all of
    /// them are taken from then on.
    pub fn claim_all<T>(&mut self, mut draw: impl FnMut() -> (Vec<String>, T)) -> (Vec<String>, T) {
        let mut pick = draw();
        for _ in 1..NAME_ATTEMPTS {
            if self.free(&pick.0) {
                break;
            }
            pick = draw();
        }
        if !self.free(&pick.0) {
            // Each number gives other names and the taken ones are finite,
            // so free ones come within `len + 1` tries.
            let base = std::mem::take(&mut pick.0);
            pick.0 = (2..)
                .map(|n| base.iter().map(|name| numbered(name, n)).collect())
                .find(|names: &Vec<String>| self.free(names))
                .unwrap_or_default();
        }
        self.0.extend(pick.0.iter().map(|name| name.to_lowercase()));
        pick
    }

    fn free(&self, names: &[String]) -> bool {
        !names.iter().any(|name| self.has(name))
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains(&name.to_lowercase())
    }
}

/// `name` with the number `n` after it, as Chinese or English writes it.
fn numbered(name: &str, n: u32) -> String {
    if has_cjk(name) {
        format!("{name}（{n}）")
    } else {
        format!("{name} ({n})")
    }
}

/// The first word said twice in `text` (small words such as "of" aside),
/// for tests of generated English names and descriptions.
#[cfg(test)]
pub(crate) fn doubled_word(text: &str) -> Option<String> {
    let mut seen = HashSet::new();
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !SMALL_WORDS.contains(&w.as_str()))
        .find(|w| !seen.insert(w.clone()))
}

/// Whether `name` is `phrase` plus words that share no character with it,
/// for tests of generated Chinese names.
#[cfg(test)]
pub(crate) fn adds_fresh_chinese(name: &str, phrase: &str) -> bool {
    name.contains(phrase)
        && name
            .replacen(phrase, "", 1)
            .chars()
            .all(|c| is_cjk(c) && !phrase.contains(c) || c == '·')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phrase(text: &str) -> Option<String> {
        Phrase::of(text).map(|p| p.text().to_owned())
    }

    #[test]
    fn the_noun_phrase_is_kept_and_the_rest_cut() {
        let cases = [
            (
                "a misty forest of lanterns",
                Some("misty forest of lanterns"),
            ),
            ("crystal caves", Some("crystal caves")),
            ("  The Crystal Caves! ", Some("Crystal Caves")),
            ("A haunted forest, full of wolves", Some("haunted forest")),
            (
                "A steampunk world where airships rule the skies",
                Some("steampunk world"),
            ),
            (
                "the great misty forest of glowing lanterns",
                Some("great misty forest"),
            ),
            ("dark and stormy", Some("dark and stormy")),
            ("\"ice\"", Some("ice")),
            ("1920 noir", Some("1920 noir")),
            ("the wilds", Some("wilds")),
            ("The world", None),
            ("of an", None),
            ("", None),
            ("!!!", None),
            (&"x".repeat(500), None),
            ("迷雾沼泽", Some("迷雾沼泽")),
            ("迷雾 沼泽", Some("迷雾沼泽")),
            ("一片迷雾沼泽，到处是灯笼", Some("迷雾沼泽")),
            ("剑与魔法世界", Some("剑与魔法世界")),
            ("到处都是发光灯笼的迷雾森林", Some("迷雾森林")),
            ("这是一个非常非常长而且没有任何标点的句子", Some("句子")),
            ("the 洞穴", Some("洞穴")),
            ("世界", None),
        ];
        for (text, want) in cases {
            assert_eq!(phrase(text).as_deref(), want, "{text:?}");
        }
        // Bounded whatever the input.
        let long = "lantern ".repeat(100);
        assert_eq!(phrase(&long).unwrap().split(' ').count(), MAX_PHRASE_WORDS);
        let long_zh = "灯".repeat(500);
        assert_eq!(
            phrase(&long_zh).unwrap().chars().count(),
            MAX_CJK_PHRASE_CHARS
        );
    }

    #[test]
    fn titles_repeats_and_modifiers() {
        let p = Phrase::of("a misty forest of lanterns").unwrap();
        assert_eq!(p.title(), "Misty Forest of Lanterns");
        assert!(p.repeats("Misty") && p.repeats("Forests") && p.repeats("mist"));
        assert!(!p.repeats("Quiet") && !p.repeats("Glade"));
        assert!(!p.is_modifier());
        assert!(Phrase::of("ice").unwrap().is_modifier());
        assert!(Phrase::of("moss").unwrap().is_modifier());
        assert!(!Phrase::of("caves").unwrap().is_modifier());
        let zh = Phrase::of("迷雾沼泽").unwrap();
        assert!(zh.repeats("迷蒙") && zh.repeats("泽") && !zh.repeats("寂静"));
        assert_eq!(zh.title(), "迷雾沼泽");
        assert!(!repeats(None, "Misty"));
    }

    #[test]
    fn languages_and_articles() {
        assert_eq!(Language::of_text("探索"), Language::Zh);
        assert_eq!(Language::of_text("crystal caves"), Language::En);
        assert_eq!(Language::of_text(""), Language::En);
        for (word, want) in [("overgrown", "An"), ("Echoing", "An"), ("silent", "A")] {
            assert_eq!(article(word), want, "{word}");
        }
    }

    #[test]
    fn a_taken_name_is_never_given_again() {
        let mut taken = TakenNames::new(["Quiet Glade", "Quiet Glade (2)"]);
        // Every candidate taken: numbered past the numbers in use.
        let (name, part) = taken.claim(|| ("quiet glade".to_owned(), 1));
        assert_eq!((name.as_str(), part), ("quiet glade (3)", 1));
        // A later candidate that is free wins, with its parts.
        let mut n = 0;
        let (name, part) = taken.claim(|| {
            n += 1;
            (
                if n < 3 {
                    "Quiet Glade".into()
                } else {
                    format!("Glade {n}")
                },
                n,
            )
        });
        assert_eq!((name.as_str(), part), ("Glade 3", 3));
        let mut zh = TakenNames::new(["幽暗回廊"]);
        assert_eq!(zh.claim(|| ("幽暗回廊".to_owned(), ())).0, "幽暗回廊（2）");
    }
}
