//! Campaign content (lore, quest hooks, points of interest, notes) and NPC
//! profiles, with a small relevance search over the content.
//!
//! Pure rules: no IO, no actix, no SQL. Search is deterministic and needs no
//! index, so the same entries and query always give the same ranking.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::{AreaId, CharacterId};

/// Results returned when a caller has no preference.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// Most results one search may return.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// Prompt types an NPC may carry.
pub const PROMPT_TYPES: &[&str] = &["system", "greeting", "fallback"];
/// Longest answer an NPC gives, in characters, when its profile names none.
pub const DEFAULT_MAX_RESPONSE_LENGTH: u32 = 500;
/// Credibility of content nobody has vouched for (drafts, content written
/// during play), on the 0..=1 scale; content that shipped with the
/// campaign is 1.
pub const UNVERIFIED_CREDIBILITY: f64 = 0.5;

/// Author recorded for content that shipped with the campaign.
const CAMPAIGN_AUTHOR: &str = "campaign";
/// Weight of a query token found in the title.
const TITLE_WEIGHT: f64 = 3.0;
/// Weight of a query token found in a tag.
const TAG_WEIGHT: f64 = 2.0;
/// Weight of a query token found in the body, before length normalisation.
const BODY_WEIGHT: f64 = 1.0;
/// Added when the whole query appears in the title; large enough that an exact
/// title hit outranks a long body that merely repeats the words.
const TITLE_PHRASE_BONUS: f64 = 5.0;

fn campaign_author() -> String {
    CAMPAIGN_AUTHOR.to_string()
}

fn yes() -> bool {
    true
}

fn default_max_response_length() -> u32 {
    DEFAULT_MAX_RESPONSE_LENGTH
}

/// A piece of campaign content: lore, a quest hook, a point of interest, a note...
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentEntry {
    pub content_id: String,
    /// Free text such as "lore", "quest", "poi", "note".
    pub content_type: String,
    pub title: String,
    pub body: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub status: ContentStatus,
    /// Where it belongs on the map, if anywhere (an area id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub area_id: Option<AreaId>,
    /// Who wrote it: "campaign", or the role that created a draft.
    #[serde(default = "campaign_author")]
    pub created_by: String,
    /// What its author said about it besides the text.
    #[serde(flatten)]
    pub about: ContentAbout,
}

/// What an author may say about a content entry besides its text; all
/// optional, so entries saved before these existed read back unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContentAbout {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Knowledge domains it belongs to (e.g. "family history").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// Where it comes from (a book, a person, a URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// 0..=1; absent, [`ContentEntry::credibility_score`] decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credibility_score: Option<f64>,
    /// Absent, [`ContentEntry::verified`] decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// When it was written during play (RFC 3339 UTC); campaign content has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

impl ContentEntry {
    /// Whether someone vouched for it: as the campaign says, else true for
    /// content that shipped with the campaign and is not a draft.
    pub fn verified(&self) -> bool {
        self.about
            .verified
            .unwrap_or(self.created_by == CAMPAIGN_AUTHOR && self.status != ContentStatus::Draft)
    }

    /// How far to trust it, 0..=1: as the campaign says, else 1 for
    /// verified content and [`UNVERIFIED_CREDIBILITY`] for the rest.
    pub fn credibility_score(&self) -> f64 {
        self.about.credibility_score.unwrap_or(if self.verified() {
            1.0
        } else {
            UNVERIFIED_CREDIBILITY
        })
    }
}

/// Whether content is live, still being written, or retired.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ContentStatus {
    #[default]
    Published,
    Draft,
    Archived,
}

/// What to look for and how to narrow it down.
///
/// Not `Deserialize`: it borrows a slice of tags, which serde cannot lend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchQuery<'a> {
    pub query: &'a str,
    pub content_type: Option<&'a str>,
    pub tags: &'a [String],
    pub status: ContentStatus,
    pub limit: usize,
}

/// One search result.
#[derive(Debug, Clone)]
pub struct SearchHit<'a> {
    pub entry: &'a ContentEntry,
    pub score: f64,
}

/// Ranked by relevance, best first; ties keep input order. Entries of another status, another
/// content_type (when given) or missing any of the given tags (case-insensitive) are excluded.
/// An empty query matches every remaining entry (score 0, input order). Otherwise entries
/// with score 0 are excluded. limit is clamped to 1..=MAX_SEARCH_LIMIT.
pub fn search<'a>(entries: &'a [ContentEntry], q: &SearchQuery<'_>) -> Vec<SearchHit<'a>> {
    let limit = q.limit.clamp(1, MAX_SEARCH_LIMIT);
    // Blank filter tags usually come from an empty form field; they should not
    // exclude everything.
    let wanted_tags: Vec<String> = q
        .tags
        .iter()
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let wanted_type = q.content_type.map(|t| t.trim().to_lowercase());
    let passes_filters = |e: &ContentEntry| {
        e.status == q.status
            && wanted_type
                .as_ref()
                .is_none_or(|t| e.content_type.trim().to_lowercase() == *t)
            && wanted_tags.iter().all(|want| {
                e.tags
                    .iter()
                    .any(|have| have.trim().to_lowercase() == *want)
            })
    };

    let phrase = q.query.trim().to_lowercase();
    if phrase.is_empty() {
        return entries
            .iter()
            .filter(|e| passes_filters(e))
            .take(limit)
            .map(|entry| SearchHit { entry, score: 0.0 })
            .collect();
    }

    // A word repeated in the query should not count twice.
    let query_tokens: BTreeSet<String> = tokenize(&phrase).into_iter().collect();
    let mut hits: Vec<SearchHit<'a>> = entries
        .iter()
        .filter(|e| passes_filters(e))
        .filter_map(|entry| {
            let score = score(entry, &query_tokens, &phrase);
            (score > 0.0).then_some(SearchHit { entry, score })
        })
        .collect();
    // sort_by is stable, so equal scores keep input order.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(limit);
    hits
}

/// Relevance of one entry; `phrase` is the trimmed, lower-cased query.
fn score(entry: &ContentEntry, query_tokens: &BTreeSet<String>, phrase: &str) -> f64 {
    let title = tokenize(&entry.title);
    let tags: Vec<String> = entry.tags.iter().flat_map(|t| tokenize(t)).collect();
    let body = tokenize(&entry.body);
    let count = |field: &[String], token: &String| field.iter().filter(|t| *t == token).count();

    let (mut in_title, mut in_tags, mut in_body) = (0usize, 0usize, 0usize);
    for token in query_tokens {
        in_title += count(&title, token);
        in_tags += count(&tags, token);
        in_body += count(&body, token);
    }
    // Long bodies mention everything eventually; damp them so a short entry
    // about the topic beats a long one that names it in passing.
    let body_norm = (2.0 + body.len() as f64).ln();
    let mut score = in_title as f64 * TITLE_WEIGHT
        + in_tags as f64 * TAG_WEIGHT
        + in_body as f64 * BODY_WEIGHT / body_norm;
    if entry.title.to_lowercase().contains(phrase) {
        score += TITLE_PHRASE_BONUS;
    }
    score
}

/// Han ideographs ([`crate::game::names::is_cjk`]), Hiragana and Katakana:
/// scripts written without spaces, so they are indexed by characters, not
/// words.
fn is_cjk(c: char) -> bool {
    crate::game::names::is_cjk(c) || matches!(c, '\u{3040}'..='\u{309F}' | '\u{30A0}'..='\u{30FF}')
}

/// Lower-cased words for alphanumeric text; single characters plus
/// overlapping bigrams for CJK runs, so "水晶" matches "水晶洞穴" while a
/// one-character query still finds something.
fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut prev_cjk: Option<char> = None;
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            tokens.push(c.to_string());
            if let Some(p) = prev_cjk {
                tokens.push([p, c].iter().collect());
            }
            prev_cjk = Some(c);
        } else {
            prev_cjk = None;
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            } else if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// One version of an NPC's profile; versions are kept so a writer can roll back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NpcVersion {
    pub version: u32,
    pub persona: String,
    #[serde(default)]
    pub background: String,
    #[serde(default)]
    pub traits: Vec<String>,
    #[serde(default)]
    pub speech_style: String,
}

/// A non-player character's profile, prompts and versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NpcProfile {
    pub npc_id: String,
    pub name: String,
    /// The character that embodies this NPC on the map, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub character_id: Option<CharacterId>,
    /// Inactive NPCs (for example created by a tool) are not used until a person activates them.
    #[serde(default = "yes")]
    pub active: bool,
    pub active_version: u32,
    pub versions: Vec<NpcVersion>,
    /// Prompts by type: "system", "greeting", "fallback".
    #[serde(default)]
    pub prompts: BTreeMap<String, String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// What it knows and how it answers.
    #[serde(flatten)]
    pub voice: NpcVoice,
}

/// What an NPC knows and how it answers, the same in every version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NpcVoice {
    /// Topics it may speak about.
    #[serde(default)]
    pub knowledge_domains: Vec<String>,
    /// Opening lines to choose from.
    #[serde(default)]
    pub greeting_templates: Vec<String>,
    /// Longest answer, in characters.
    #[serde(default = "default_max_response_length")]
    pub max_response_length: u32,
    /// Whether its answers must name the content they draw on.
    #[serde(default)]
    pub must_cite_sources: bool,
}

impl Default for NpcVoice {
    fn default() -> Self {
        Self {
            knowledge_domains: Vec::new(),
            greeting_templates: Vec::new(),
            max_response_length: DEFAULT_MAX_RESPONSE_LENGTH,
            must_cite_sources: false,
        }
    }
}

impl NpcProfile {
    /// The given version, or the active one.
    pub fn version(&self, version: Option<u32>) -> Option<&NpcVersion> {
        let wanted = version.unwrap_or(self.active_version);
        self.versions.iter().find(|v| v.version == wanted)
    }

    /// Problems with this profile (empty ids/names, no versions, duplicate version numbers, active_version not among versions, unknown prompt types), each a short lower-case sentence naming the npc_id.
    pub fn problems(&self) -> Vec<String> {
        let id = &self.npc_id;
        let mut problems = Vec::new();
        if id.trim().is_empty() {
            problems.push(format!("npc '{id}' has an empty npc_id"));
        }
        if self.name.trim().is_empty() {
            problems.push(format!("npc '{id}' has an empty name"));
        }
        if self.versions.is_empty() {
            // With no versions the active one is missing too; saying so twice is noise.
            problems.push(format!("npc '{id}' has no versions"));
        } else {
            let mut seen = BTreeSet::new();
            let mut duplicated = BTreeSet::new();
            for v in &self.versions {
                if !seen.insert(v.version) {
                    duplicated.insert(v.version);
                }
            }
            for v in duplicated {
                problems.push(format!("npc '{id}' has version {v} more than once"));
            }
            if !seen.contains(&self.active_version) {
                problems.push(format!(
                    "npc '{id}' has active version {} which is not among its versions",
                    self.active_version
                ));
            }
        }
        for kind in self.prompts.keys() {
            if !PROMPT_TYPES.contains(&kind.as_str()) {
                problems.push(format!(
                    "npc '{id}' has unknown prompt type '{kind}' (expected one of {})",
                    PROMPT_TYPES.join(", ")
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, kind: &str, title: &str, body: &str, tags: &[&str]) -> ContentEntry {
        ContentEntry {
            content_id: id.to_string(),
            content_type: kind.to_string(),
            title: title.to_string(),
            body: body.to_string(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            status: ContentStatus::Published,
            area_id: None,
            created_by: CAMPAIGN_AUTHOR.to_string(),
            about: ContentAbout::default(),
        }
    }

    fn query<'a>(text: &'a str, tags: &'a [String]) -> SearchQuery<'a> {
        SearchQuery {
            query: text,
            content_type: None,
            tags,
            status: ContentStatus::Published,
            limit: DEFAULT_SEARCH_LIMIT,
        }
    }

    fn ids(hits: &[SearchHit<'_>]) -> Vec<String> {
        hits.iter().map(|h| h.entry.content_id.clone()).collect()
    }

    fn library() -> Vec<ContentEntry> {
        let mut archived = entry(
            "old-dragon",
            "lore",
            "The Old Dragon",
            "a dragon long gone",
            &[],
        );
        archived.status = ContentStatus::Archived;
        let mut draft = entry("draft-dragon", "note", "Dragon notes", "todo", &[]);
        draft.status = ContentStatus::Draft;
        vec![
            entry(
                "tavern",
                "poi",
                "The Rusty Tankard",
                "A tavern where travellers whisper about a dragon in the hills.",
                &["town"],
            ),
            entry(
                "dragon",
                "lore",
                "The Red Dragon",
                "An ancient wyrm sleeps under the mountain.",
                &["Monster", "hills"],
            ),
            entry(
                "hook",
                "quest",
                "Missing Caravan",
                "Merchants vanished on the hill road; some blame a dragon.",
                &["monster"],
            ),
            entry(
                "cave",
                "poi",
                "水晶洞穴",
                "洞穴深处闪烁着水晶的光芒，据说有龙守护。",
                &["地下城"],
            ),
            entry(
                "mine",
                "lore",
                "废弃矿井",
                "矿工曾在这里挖到过水晶，后来矿井坍塌了。",
                &[],
            ),
            entry("lake", "poi", "静かな湖", "湖の底に古い剣が眠る。", &[]),
            archived,
            draft,
        ]
    }

    #[test]
    fn tokenizes_latin_words_and_cjk_bigrams() {
        let cases: &[(&str, &[&str])] = &[
            ("Hello, World-42!", &["hello", "world", "42"]),
            ("  ", &[]),
            ("水晶", &["水", "晶", "水晶"]),
            ("水晶洞", &["水", "晶", "水晶", "洞", "晶洞"]),
            ("red水晶", &["red", "水", "晶", "水晶"]),
            ("水 晶", &["水", "晶"]),
            (
                "カタカナ",
                &["カ", "タ", "カタ", "カ", "タカ", "ナ", "カナ"],
            ),
            ("ÉCOLE", &["école"]),
        ];
        for (text, want) in cases {
            assert_eq!(tokenize(text), *want, "{text}");
        }
    }

    #[test]
    fn ranks_and_finds() {
        let lib = library();
        // (query, expected ids best first)
        let cases: &[(&str, &[&str])] = &[
            // Title beats body; of two body mentions the shorter body wins.
            ("dragon", &["dragon", "hook", "tavern"]),
            ("DRAGON", &["dragon", "hook", "tavern"]),
            ("rusty tankard", &["tavern"]),
            ("monster", &["dragon", "hook"]),
            ("nothing matches this", &[]),
            // The cave has 水晶 in its title and body; the mine only in its body.
            ("水晶", &["cave", "mine"]),
            ("洞穴", &["cave"]),
            ("湖", &["lake"]),
            ("???", &[]),
        ];
        for (text, want) in cases {
            let hits = search(&lib, &query(text, &[]));
            assert_eq!(ids(&hits), *want, "{text}");
            assert!(hits.iter().all(|h| h.score > 0.0), "{text}");
            assert!(
                hits.windows(2).all(|w| w[0].score >= w[1].score),
                "{text}: not sorted"
            );
        }
    }

    #[test]
    fn whole_title_phrase_gets_a_bonus() {
        let lib = vec![
            entry("a", "lore", "red dragon", "", &[]),
            entry("b", "lore", "dragon red", "", &[]),
        ];
        let hits = search(&lib, &query("Red Dragon", &[]));
        assert_eq!(ids(&hits), ["a", "b"]);
        assert!((hits[0].score - hits[1].score - TITLE_PHRASE_BONUS).abs() < 1e-9);
    }

    #[test]
    fn ties_keep_input_order() {
        let lib = vec![
            entry("first", "lore", "x", "gold", &[]),
            entry("second", "lore", "y", "gold", &[]),
            entry("third", "lore", "z", "gold", &[]),
        ];
        assert_eq!(
            ids(&search(&lib, &query("gold", &[]))),
            ["first", "second", "third"]
        );
    }

    #[test]
    fn filters_by_type_tags_and_status() {
        let lib = library();
        let monster = vec!["MONSTER".to_string()];
        let two = vec!["monster".to_string(), "hills".to_string()];
        let blank = vec![" ".to_string()];
        let missing = vec!["nope".to_string()];
        // (query, content_type, tags, status, expected ids)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a [String],
            ContentStatus,
            &'a [&'a str],
        );
        let cases: &[Case<'_>] = &[
            (
                "dragon",
                Some("lore"),
                &[],
                ContentStatus::Published,
                &["dragon"],
            ),
            (
                "dragon",
                Some("Quest"),
                &[],
                ContentStatus::Published,
                &["hook"],
            ),
            ("dragon", Some("spell"), &[], ContentStatus::Published, &[]),
            (
                "dragon",
                None,
                &monster,
                ContentStatus::Published,
                &["dragon", "hook"],
            ),
            ("dragon", None, &two, ContentStatus::Published, &["dragon"]),
            ("dragon", None, &missing, ContentStatus::Published, &[]),
            (
                "dragon",
                None,
                &blank,
                ContentStatus::Published,
                &["dragon", "hook", "tavern"],
            ),
            (
                "dragon",
                None,
                &[],
                ContentStatus::Archived,
                &["old-dragon"],
            ),
            ("dragon", None, &[], ContentStatus::Draft, &["draft-dragon"]),
            (
                "",
                Some("poi"),
                &[],
                ContentStatus::Published,
                &["tavern", "cave", "lake"],
            ),
            (
                "",
                None,
                &monster,
                ContentStatus::Published,
                &["dragon", "hook"],
            ),
        ];
        for (text, kind, tags, status, want) in cases {
            let q = SearchQuery {
                query: text,
                content_type: *kind,
                tags,
                status: *status,
                limit: DEFAULT_SEARCH_LIMIT,
            };
            assert_eq!(
                ids(&search(&lib, &q)),
                *want,
                "{text} {kind:?} {tags:?} {status:?}"
            );
        }
    }

    #[test]
    fn clamps_limit() {
        let lib: Vec<ContentEntry> = (0..MAX_SEARCH_LIMIT + 10)
            .map(|i| entry(&format!("e{i}"), "note", "gold", "", &[]))
            .collect();
        // (limit, expected number of hits)
        let cases = [
            (0, 1),
            (1, 1),
            (3, 3),
            (MAX_SEARCH_LIMIT, MAX_SEARCH_LIMIT),
            (MAX_SEARCH_LIMIT + 1, MAX_SEARCH_LIMIT),
            (usize::MAX, MAX_SEARCH_LIMIT),
        ];
        for text in ["gold", ""] {
            for (limit, want) in cases {
                let mut q = query(text, &[]);
                q.limit = limit;
                assert_eq!(search(&lib, &q).len(), want, "{text:?} limit {limit}");
            }
        }
    }

    #[test]
    fn empty_query_returns_everything_in_input_order() {
        let lib = library();
        for text in ["", "   "] {
            let hits = search(&lib, &query(text, &[]));
            assert_eq!(
                ids(&hits),
                ["tavern", "dragon", "hook", "cave", "mine", "lake"],
                "{text:?}"
            );
            assert!(hits.iter().all(|h| h.score == 0.0));
        }
    }

    #[test]
    fn content_entry_defaults_when_deserialized() {
        let e: ContentEntry = serde_json::from_str(
            r#"{"content_id":"c","content_type":"note","title":"t","body":"b"}"#,
        )
        .unwrap();
        assert_eq!(e, entry("c", "note", "t", "b", &[]));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["status"], "published");
        assert!(json.get("area_id").is_none());
    }

    #[test]
    fn trust_follows_the_campaign_else_who_wrote_it() {
        let said = |verified, credibility_score| ContentAbout {
            verified,
            credibility_score,
            ..ContentAbout::default()
        };
        // (author, status, what the entry says, expected verified and score)
        let cases = [
            (
                "campaign",
                ContentStatus::Published,
                said(None, None),
                (true, 1.0),
            ),
            (
                "campaign",
                ContentStatus::Archived,
                said(None, None),
                (true, 1.0),
            ),
            (
                "campaign",
                ContentStatus::Draft,
                said(None, None),
                (false, UNVERIFIED_CREDIBILITY),
            ),
            (
                "game_master",
                ContentStatus::Draft,
                said(None, None),
                (false, UNVERIFIED_CREDIBILITY),
            ),
            (
                "game_master",
                ContentStatus::Published,
                said(None, None),
                (false, UNVERIFIED_CREDIBILITY),
            ),
            (
                "campaign",
                ContentStatus::Published,
                said(Some(false), None),
                (false, UNVERIFIED_CREDIBILITY),
            ),
            (
                "campaign",
                ContentStatus::Published,
                said(None, Some(0.98)),
                (true, 0.98),
            ),
            (
                "service",
                ContentStatus::Draft,
                said(Some(true), Some(0.2)),
                (true, 0.2),
            ),
        ];
        for (author, status, about, want) in cases {
            let mut e = entry("c", "note", "t", "b", &[]);
            e.created_by = author.to_string();
            e.status = status;
            e.about = about;
            assert_eq!(
                (e.verified(), e.credibility_score()),
                want,
                "{author} {status:?} {:?}",
                e.about
            );
        }
    }

    #[test]
    fn what_an_author_says_is_kept_and_absent_fields_stay_out() {
        let e: ContentEntry = serde_json::from_str(
            r#"{"content_id":"c","content_type":"note","title":"t","body":"b",
                "summary":"s","domains":["d"],"source":"book","credibility_score":0.7,
                "verified":false,"created_at":"2024-12-13T12:00:00.000Z"}"#,
        )
        .unwrap();
        assert_eq!(
            e.about,
            ContentAbout {
                summary: Some("s".into()),
                domains: vec!["d".into()],
                source: Some("book".into()),
                credibility_score: Some(0.7),
                verified: Some(false),
                created_at: Some("2024-12-13T12:00:00.000Z".into()),
            }
        );
        let back = serde_json::to_value(&e).unwrap();
        assert_eq!(back["domains"], serde_json::json!(["d"]));
        // An entry that says nothing gains no keys (old saves read and write alike).
        let plain = serde_json::to_value(entry("c", "note", "t", "b", &[])).unwrap();
        for key in [
            "summary",
            "domains",
            "source",
            "credibility_score",
            "verified",
            "created_at",
        ] {
            assert!(plain.get(key).is_none(), "{key}");
        }
    }

    fn version(n: u32) -> NpcVersion {
        NpcVersion {
            version: n,
            persona: format!("persona {n}"),
            background: String::new(),
            traits: Vec::new(),
            speech_style: String::new(),
        }
    }

    fn npc() -> NpcProfile {
        NpcProfile {
            npc_id: "innkeeper".to_string(),
            name: "Marta".to_string(),
            character_id: None,
            active: true,
            active_version: 2,
            versions: vec![version(1), version(2), version(3)],
            prompts: BTreeMap::from([
                ("system".to_string(), "you run the inn".to_string()),
                ("greeting".to_string(), "welcome".to_string()),
            ]),
            tags: Vec::new(),
            voice: NpcVoice::default(),
        }
    }

    #[test]
    fn looks_up_versions() {
        let n = npc();
        // (requested, expected version found)
        let cases = [
            (None, Some(2)),
            (Some(1), Some(1)),
            (Some(3), Some(3)),
            (Some(4), None),
        ];
        for (requested, want) in cases {
            assert_eq!(
                n.version(requested).map(|v| v.version),
                want,
                "{requested:?}"
            );
        }
        let mut dangling = npc();
        dangling.active_version = 9;
        assert!(dangling.version(None).is_none());
    }

    #[test]
    fn reports_problems() {
        type Edit = fn(&mut NpcProfile);
        // (what is wrong, edit, expected problems)
        let cases: &[(&str, Edit, &[&str])] = &[
            ("nothing", |_| {}, &[]),
            (
                "empty id",
                |n| n.npc_id = " ".to_string(),
                &["npc ' ' has an empty npc_id"],
            ),
            (
                "empty name",
                |n| n.name.clear(),
                &["npc 'innkeeper' has an empty name"],
            ),
            (
                "no versions",
                |n| n.versions.clear(),
                &["npc 'innkeeper' has no versions"],
            ),
            (
                "duplicates",
                |n| n.versions.extend([version(1), version(1), version(3)]),
                &[
                    "npc 'innkeeper' has version 1 more than once",
                    "npc 'innkeeper' has version 3 more than once",
                ],
            ),
            (
                "dangling active version",
                |n| n.active_version = 7,
                &["npc 'innkeeper' has active version 7 which is not among its versions"],
            ),
            (
                "unknown prompt type",
                |n| {
                    n.prompts.insert("farewell".to_string(), "bye".to_string());
                },
                &[
                    "npc 'innkeeper' has unknown prompt type 'farewell' (expected one of system, greeting, fallback)",
                ],
            ),
        ];
        for (what, edit, want) in cases {
            let mut n = npc();
            edit(&mut n);
            assert_eq!(n.problems(), *want, "{what}");
        }
        for p in npc_with_everything_wrong().problems() {
            assert_eq!(p, p.to_lowercase(), "{p}");
            assert!(!p.ends_with('.'), "{p}");
        }
    }

    fn npc_with_everything_wrong() -> NpcProfile {
        let mut n = npc();
        n.name.clear();
        n.active_version = 0;
        n.versions.push(version(2));
        n.prompts.insert("other".to_string(), String::new());
        n
    }

    #[test]
    fn npc_defaults_when_deserialized() {
        let n: NpcProfile = serde_json::from_str(
            r#"{"npc_id":"n","name":"N","active_version":1,"versions":[{"version":1,"persona":"p"}]}"#,
        )
        .unwrap();
        assert!(n.active);
        assert!(n.prompts.is_empty() && n.tags.is_empty() && n.character_id.is_none());
        assert_eq!(n.voice, NpcVoice::default());
        assert_eq!(n.voice.max_response_length, 500);
        assert!(n.voice.knowledge_domains.is_empty() && n.voice.greeting_templates.is_empty());
        assert!(!n.voice.must_cite_sources);
        assert_eq!(
            n.version(None),
            Some(&NpcVersion {
                persona: "p".to_string(),
                ..version(1)
            })
        );
        assert!(n.problems().is_empty());
    }
}
