//! Small rules of English and Chinese text the offline game master follows:
//! cutting a text at a sentence or word boundary, and matching what a player
//! calls a thing against its name.

pub(super) use crate::game::names::cut_at_boundary;

/// Words that open what a player names without naming anything.
const ARTICLES: [&str; 5] = ["the ", "a ", "an ", "some ", "my "];

/// The player's words without a leading article, case kept, to quote
/// them back or look them up: "the oil" → "oil".
pub(super) fn without_article(words: &str) -> &str {
    let words = words.trim();
    ARTICLES
        .iter()
        .find_map(|a| {
            let head = words.get(..a.len())?;
            head.eq_ignore_ascii_case(a)
                .then(|| words[a.len()..].trim_start())
        })
        .unwrap_or(words)
}

/// What a player calls a thing, made comparable: lower case, without a
/// leading article and surrounding spaces or quotes.
pub(super) fn normalize(words: &str) -> String {
    without_article(words.trim().trim_matches(['"', '\'', '“', '”', '「', '」'])).to_lowercase()
}

/// Whether the player's words name `name`: the same, or one inside the
/// other, whole words at a time (so "oil" names "Sealed Lamp Oil" and
/// "Warden" names "The Drowned Warden", but "a" or "war" name neither);
/// Chinese, written without spaces, character by character ("灯" names
/// "绿玻璃灯").
pub(super) fn names(wanted: &str, name: &str) -> bool {
    let (wanted, name) = (normalize(wanted), normalize(name));
    !wanted.is_empty() && !name.is_empty() && (within(&name, &wanted) || within(&wanted, &name))
}

/// Whether `part` is in `whole`: as a run of whole words, or, when it is
/// Chinese, as a substring.
fn within(whole: &str, part: &str) -> bool {
    if crate::game::names::has_cjk(part) {
        return whole.contains(part);
    }
    let whole: Vec<String> = words(whole).collect();
    let part: Vec<String> = words(part).collect();
    !part.is_empty() && whole.windows(part.len()).any(|w| w == part.as_slice())
}

/// The words of a name: lower-cased runs of letters and digits, so
/// "Green-Glass Lamp" is `green`, `glass`, `lamp` (a Chinese name, written
/// without spaces, is one word).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// Whether the player's words name a thing called `name`, also known as
/// `aliases`: as [`names`] says for the name; an alias that holds the
/// player's words ("灯笼" in "绿灯笼"); or every one of the player's words a
/// word of the name or of an alias, in any order ("green lamp", and with
/// the alias "lantern", "green lantern", name the Green-Glass Lamp).
pub(super) fn calls(wanted: &str, name: &str, aliases: &[String]) -> bool {
    let wanted = normalize(wanted);
    if wanted.is_empty() {
        return false;
    }
    if names(&wanted, name)
        || aliases
            .iter()
            .any(|a| !a.trim().is_empty() && normalize(a).contains(&wanted))
    {
        return true;
    }
    let known: Vec<String> = words(name)
        .chain(aliases.iter().flat_map(|a| words(a)))
        .collect();
    words(&wanted).all(|w| known.contains(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_at_sentence_or_word_boundaries() {
        let lore = "Divers who take a lantern from the ruin are said to hear bells beneath \
                    the water for the rest of their lives.";
        let cut = cut_at_boundary(lore, 60);
        assert_eq!(
            cut,
            "Divers who take a lantern from the ruin are said to hear…"
        );
        let two = "The city sank in a night. Its lanterns never went out.";
        assert_eq!(cut_at_boundary(two, 40), "The city sank in a night.");
        assert_eq!(cut_at_boundary("Short.", 40), "Short.");
        let zh = "韦尔城在一夜之间沉入水底，但城中的灯笼从未熄灭。点灯人立下誓言。";
        assert_eq!(
            cut_at_boundary(zh, 30),
            "韦尔城在一夜之间沉入水底，但城中的灯笼从未熄灭。"
        );
        assert_eq!(cut_at_boundary(zh, 20), "韦尔城在一夜之间沉入水底…");
        // One long word is cut inside it rather than dropped.
        assert_eq!(
            cut_at_boundary(&"x".repeat(50), 10),
            format!("{}…", "x".repeat(10))
        );
    }

    #[test]
    fn names_match_in_part_without_articles() {
        assert!(names("the warden", "The Drowned Warden"));
        assert!(names("oil", "Sealed Lamp Oil"));
        assert!(names("老玛伦", "老玛伦"));
        assert!(!names("the", "The Drowned Warden"));
        assert!(!names("goblin", "The Drowned Warden"));
    }

    #[test]
    fn quoted_words_lose_their_article_only() {
        assert_eq!(without_article("the oil"), "oil");
        assert_eq!(without_article("The Lamp"), "Lamp");
        assert_eq!(without_article("an  apple"), "apple");
        assert_eq!(without_article("theater"), "theater");
        assert_eq!(without_article("the"), "the");
        assert_eq!(without_article("灯油"), "灯油");
    }

    #[test]
    fn names_match_whole_words_or_chinese_characters() {
        assert!(names("oil", "Sealed Lamp Oil"));
        assert!(names("the warden", "The Drowned Warden"));
        assert!(names("lamp oil", "Sealed Lamp Oil"));
        assert!(names("talk to old maren please", "Old Maren"));
        assert!(names("灯", "绿玻璃灯"));
        assert!(names("点灯人小室", "点灯人小室"));
        // A letter, a piece of a word or words out of order name nothing.
        assert!(!names("a", "Lantern Gate"));
        assert!(!names("war", "The Drowned Warden"));
        assert!(!names("oil lamp", "Sealed Lamp Oil"));
        assert!(!names("", "Old Maren"));
        assert!(!names("盐", "绿玻璃灯"));
    }

    #[test]
    fn things_are_called_by_their_name_words_and_aliases() {
        let lamp = "Green-Glass Lamp";
        let aliases = ["lantern".to_owned(), "绿灯笼".to_owned()];
        for wanted in [
            "the lamp",
            "green lamp",
            "glass lamp",
            "the lantern",
            "green lantern",
            "灯笼",
            "绿灯笼",
        ] {
            assert!(calls(wanted, lamp, &aliases), "{wanted}");
        }
        // Every word must belong: the lantern's oil is not the lamp.
        for wanted in ["lantern oil", "red lamp", "the", "", "灯油"] {
            assert!(!calls(wanted, lamp, &aliases), "{wanted}");
        }
        // Without aliases, only the name's words.
        assert!(!calls("the lantern", lamp, &[]));
    }
}
