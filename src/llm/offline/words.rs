//! Small rules of English and Chinese text the offline game master follows:
//! cutting a text at a sentence or word boundary, and matching what a player
//! calls a thing against its name.

/// `text` cut to at most `max` characters, at the end of a sentence when one
/// ends within the limit, else at a word boundary, with `…` when cut. Chinese
/// (no spaces) is cut at a sentence end or a comma, else between characters.
pub(super) fn cut_at_boundary(text: &str, max: usize) -> String {
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

/// The first sentence of `text` (all of it when it has one).
pub(super) fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    for (at, c) in text.char_indices() {
        let after = at + c.len_utf8();
        if matches!(c, '。' | '！' | '？')
            || (matches!(c, '.' | '!' | '?')
                && text[after..].chars().next().is_none_or(char::is_whitespace))
        {
            return &text[..after];
        }
    }
    text
}

/// What a player calls a thing, made comparable: lower case, without a
/// leading article and surrounding spaces or quotes.
pub(super) fn normalize(words: &str) -> String {
    let mut s = words
        .trim()
        .trim_matches(['"', '\'', '“', '”', '「', '」'])
        .to_lowercase();
    for article in ["the ", "a ", "an ", "some ", "my "] {
        if let Some(rest) = s.strip_prefix(article) {
            s = rest.trim().to_owned();
        }
    }
    s
}

/// Whether the player's words name `name`: the same, or one inside the
/// other (so "oil" names "Sealed Lamp Oil" and "Warden" names "The Drowned
/// Warden").
pub(super) fn names(wanted: &str, name: &str) -> bool {
    let (wanted, name) = (normalize(wanted), normalize(name));
    !wanted.is_empty() && !name.is_empty() && (name.contains(&wanted) || wanted.contains(&name))
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
    fn first_sentences_in_both_languages() {
        assert_eq!(first_sentence("One. Two."), "One.");
        assert_eq!(
            first_sentence("Mr Smith is 1.5 m tall"),
            "Mr Smith is 1.5 m tall"
        );
        assert_eq!(first_sentence("一。二。"), "一。");
    }

    #[test]
    fn names_match_in_part_without_articles() {
        assert!(names("the warden", "The Drowned Warden"));
        assert!(names("oil", "Sealed Lamp Oil"));
        assert!(names("老玛伦", "老玛伦"));
        assert!(!names("the", "The Drowned Warden"));
        assert!(!names("goblin", "The Drowned Warden"));
    }
}
