//! `search_content`: find lore, quests, points of interest and notes by relevance (read-only).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::content::{
    ContentEntry, ContentStatus, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, SearchQuery, search,
};

/// Longest query.
pub const MAX_QUERY_CHARS: usize = 200;
/// Most tag filters in one search.
pub const MAX_TAGS: usize = 10;
/// Characters of the body shown with each result.
pub const SNIPPET_CHARS: usize = 160;
/// Bytes of body text the `items` of one answer may carry in all, shared
/// evenly by the `limit` asked for, so that 50 long bodies still fit the
/// pipeline's result bound ([`super::MAX_RESULT_BYTES`]).
pub const ITEM_BODIES_BYTES: usize = 128 * 1024;

pub struct SearchContent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(max = MAX_QUERY_CHARS))]
    query: String,
    #[schemars(length(min = 1, max = 32))]
    content_type: Option<String>,
    #[serde(default)]
    #[schemars(length(max = MAX_TAGS), inner(length(max = 40)))]
    tags: Vec<String>,
    #[serde(default)]
    status: ContentStatus,
    #[schemars(range(min = 1, max = MAX_SEARCH_LIMIT), extend("default" = DEFAULT_SEARCH_LIMIT))]
    limit: Option<usize>,
}

/// The first [`SNIPPET_CHARS`] characters of `body`, never cut inside a character.
fn snippet(body: &str) -> String {
    body.chars().take(SNIPPET_CHARS).collect()
}

/// `body` cut to at most `max_bytes`, never inside a character, and
/// whether it was cut.
fn cut_body(body: &str, max_bytes: usize) -> (&str, bool) {
    if body.len() <= max_bytes {
        return (body, false);
    }
    let mut end = max_bytes;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    (&body[..end], true)
}

/// One result in the shape content services answer (`items`): the whole
/// body up to `body_bytes`, with how far to trust it.
fn item(e: &ContentEntry, body_bytes: usize) -> Value {
    let (body, body_truncated) = cut_body(&e.body, body_bytes);
    json!({
        "id": e.content_id,
        "content_type": e.content_type,
        "title": e.title,
        "body": body,
        "body_truncated": body_truncated,
        "summary": e.about.summary,
        "tags": e.tags,
        "domains": e.about.domains,
        "source": e.about.source,
        "status": e.status,
        "area_id": e.area_id,
        "credibility_score": e.credibility_score(),
        "verified": e.verified(),
    })
}

impl Tool for SearchContent {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "search_content",
            "Search content",
            "content",
            "Search the campaign's lore, quests, points of interest (poi) and notes by words \
             (English or Chinese), best match first; narrow by content_type, tags (all must match) \
             and status (default published). Each item carries the whole body (long ones cut), \
             credibility_score (0..1) and verified. Changes nothing.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["results", "items", "total", "query"],
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["id", "content_type", "title", "body", "body_truncated", "summary", "tags", "domains", "source", "status", "area_id", "credibility_score", "verified"],
                            "properties": {
                                "id": {"type": "string"},
                                "content_type": {"type": "string"},
                                "title": {"type": "string"},
                                "body": {"type": "string"},
                                "body_truncated": {"type": "boolean"},
                                "summary": {"type": ["string", "null"]},
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "domains": {"type": "array", "items": {"type": "string"}},
                                "source": {"type": ["string", "null"]},
                                "status": {"enum": ["published", "draft", "archived"]},
                                "area_id": {"type": ["string", "null"]},
                                "credibility_score": {"type": "number", "minimum": 0, "maximum": 1},
                                "verified": {"type": "boolean"}
                            }
                        }
                    },
                    "query": {"type": "string"},
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["content_id", "content_type", "title", "tags", "status", "area_id", "score", "snippet"],
                            "properties": {
                                "content_id": {"type": "string"},
                                "content_type": {"type": "string"},
                                "title": {"type": "string"},
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "status": {"enum": ["published", "draft", "archived"]},
                                "area_id": {"type": ["string", "null"]},
                                "score": {"type": "number", "minimum": 0},
                                "snippet": {"type": "string"}
                            }
                        }
                    },
                    "total": {"type": "integer", "minimum": 0}
                }
            }),
        )
        .on_sites()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let limit = args
            .limit
            .unwrap_or(DEFAULT_SEARCH_LIMIT)
            .clamp(1, MAX_SEARCH_LIMIT);
        let hits = search(
            &ctx.state.content,
            &SearchQuery {
                query: &args.query,
                content_type: args.content_type.as_deref(),
                tags: &args.tags,
                status: args.status,
                limit,
            },
        );
        let items: Vec<Value> = hits
            .iter()
            .map(|h| item(h.entry, ITEM_BODIES_BYTES / limit))
            .collect();
        let results: Vec<Value> = hits
            .iter()
            .map(|h| {
                let e = h.entry;
                json!({
                    "content_id": e.content_id,
                    "content_type": e.content_type,
                    "title": e.title,
                    "tags": e.tags,
                    "status": e.status,
                    "area_id": e.area_id,
                    "score": (h.score * 1000.0).round() / 1000.0,
                    "snippet": snippet(&e.body),
                })
            })
            .collect();
        Ok(ToolOutput {
            result: json!({
                "total": results.len(),
                "results": results,
                "items": items,
                "query": args.query,
            }),
            effect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, Reason};
    use crate::game::GameState;
    use crate::game::content::ContentEntry;

    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline};

    fn invoke(state: &GameState, args: Value) -> Result<ToolOutput, ToolError> {
        pipeline("search_content", state, args, Role::Player)
    }

    fn ids(out: &ToolOutput) -> Vec<&str> {
        out.result["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["content_id"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn finds_english_and_chinese_content_in_the_demo() {
        let state = demo();
        // (args, expected ids best first)
        let cases: Vec<(Value, &[&str])> = vec![
            // The title match first; a campaign lore line mentioning the tide after.
            (
                json!({"query": "tide clock"}),
                &["poi_tide_clock", "lore_002"],
            ),
            (
                json!({"query": "heart lantern"}),
                &["poi_heart_lantern", "lore_003"],
            ),
            (json!({"query": "bells"}), &["note_bell_divers", "lore_003"]),
            // The whole word in tags and body beats one shared character.
            (
                json!({"query": "点灯人"}),
                &["lore_vell_night", "poi_chapel_altar"],
            ),
            (
                json!({"query": "灯"}),
                &["poi_chapel_altar", "lore_vell_night"],
            ),
            (json!({"query": "钟声"}), &["poi_chapel_altar"]),
            (json!({"query": "dragon"}), &[]),
        ];
        for (args, want) in cases {
            let out = invoke(&state, args.clone()).unwrap();
            assert_eq!(ids(&out), want, "{args}");
            assert_eq!(out.result["total"], want.len(), "{args}");
            assert!(out.effect.is_none());
        }
    }

    #[test]
    fn results_carry_their_fields() {
        let state = demo();
        let out = ctx_run(&SearchContent, &state, &json!({"query": "无油之灯"})).unwrap();
        let first = &out.result["results"][0];
        assert_eq!(first["content_id"], "poi_chapel_altar");
        assert_eq!(first["content_type"], "poi");
        assert_eq!(first["status"], "published");
        assert_eq!(first["area_id"], "area_005");
        assert_eq!(first["tags"], json!(["礼拜堂", "灯笼", "钟声"]));
        let score = first["score"].as_f64().unwrap();
        assert!(score > 0.0 && (score * 1000.0 - (score * 1000.0).round()).abs() < 1e-6);
        assert!(first["snippet"].as_str().unwrap().starts_with("沉没礼拜堂"));

        // Entries placed nowhere report a null area.
        let out = ctx_run(&SearchContent, &state, &json!({"query": "oil"})).unwrap();
        assert_eq!(out.result["results"][0]["content_id"], "quest_last_oil");
        assert_eq!(out.result["results"][0]["area_id"], Value::Null);
    }

    #[test]
    fn items_answer_in_the_seed_shape_beside_results() {
        let state = demo();
        let out = invoke(&state, json!({"query": "bells", "limit": 5})).unwrap();
        assert_eq!(out.result["query"], "bells");
        assert_eq!(out.result["total"], 2);
        let items = out.result["items"].as_array().unwrap();
        let results = out.result["results"].as_array().unwrap();
        assert_eq!(items.len(), results.len());
        for (item, result) in items.iter().zip(results) {
            assert_eq!(item["id"], result["content_id"]);
        }
        // The campaign says how far to trust this note.
        assert_eq!(
            items[0],
            json!({
                "id": "note_bell_divers",
                "content_type": "note",
                "title": "Bells Beneath the Water",
                "body": state.content.iter().find(|c| c.content_id == "note_bell_divers").unwrap().body,
                "body_truncated": false,
                "summary": "The toll divers hear may be the tower bell's warning, not a curse.",
                "tags": ["bell", "divers", "rumour"],
                "domains": ["the sinking of Vell"],
                "source": "divers' accounts at the Lantern Gate",
                "status": "published",
                "area_id": null,
                "credibility_score": 0.6,
                "verified": false,
            })
        );
        // Campaign content that says nothing is verified and fully trusted.
        assert_eq!(
            (
                &items[1]["id"],
                &items[1]["verified"],
                &items[1]["credibility_score"]
            ),
            (&json!("lore_003"), &json!(true), &json!(1.0))
        );
        assert_eq!(items[1]["summary"], Value::Null);
        assert_eq!(items[1]["domains"], json!([]));
        // Drafts are neither, unless their author said otherwise.
        let out = invoke(&state, json!({"query": "", "status": "draft"})).unwrap();
        let draft = &out.result["items"][0];
        assert_eq!(
            (
                &draft["id"],
                &draft["verified"],
                &draft["credibility_score"]
            ),
            (&json!("note_warden_key"), &json!(false), &json!(0.5))
        );
    }

    #[test]
    fn item_bodies_share_a_bounded_budget() {
        let mut state = demo();
        for i in 0..MAX_SEARCH_LIMIT {
            std::sync::Arc::make_mut(&mut state.content).push(ContentEntry {
                content_id: format!("long_{i}"),
                content_type: "note".into(),
                title: format!("long {i}"),
                body: "灯".repeat(crate::tools::create_draft_content::MAX_BODY_CHARS),
                tags: vec![],
                status: ContentStatus::Published,
                area_id: None,
                created_by: "campaign".into(),
                about: Default::default(),
            });
        }
        // Fifty 24,000-byte bodies would be 1.2 MB; the whole answer fits.
        let out = invoke(&state, json!({"query": "long", "limit": MAX_SEARCH_LIMIT})).unwrap();
        let items = out.result["items"].as_array().unwrap();
        assert_eq!(items.len(), MAX_SEARCH_LIMIT);
        for item in items {
            let body = item["body"].as_str().unwrap();
            assert!(body.len() <= ITEM_BODIES_BYTES / MAX_SEARCH_LIMIT);
            assert!(body.len() > ITEM_BODIES_BYTES / MAX_SEARCH_LIMIT - 3);
            assert!(body.chars().all(|c| c == '灯'));
            assert_eq!(item["body_truncated"], true);
        }
        // With the default limit each body gets more room.
        let out = invoke(&state, json!({"query": "long 1"})).unwrap();
        let first = out.result["items"][0]["body"].as_str().unwrap();
        assert!(first.len() > ITEM_BODIES_BYTES / MAX_SEARCH_LIMIT);
        assert_eq!(cut_body("short", 3), ("sho", true));
        assert_eq!(cut_body("灯灯", 4), ("灯", true));
        assert_eq!(cut_body("灯灯", 6), ("灯灯", false));
    }

    #[test]
    fn snippets_cut_long_bodies_on_character_boundaries() {
        let mut state = demo();
        let long_cjk = "灯".repeat(400);
        let long_mixed = format!("a{}", "é灯x".repeat(100));
        for (id, body) in [("cjk", &long_cjk), ("mixed", &long_mixed)] {
            std::sync::Arc::make_mut(&mut state.content).push(ContentEntry {
                content_id: id.into(),
                content_type: "note".into(),
                title: format!("long {id}"),
                body: body.clone(),
                tags: vec![],
                status: ContentStatus::Published,
                area_id: None,
                created_by: "campaign".into(),
                about: Default::default(),
            });
        }
        for (query, body) in [("long cjk", &long_cjk), ("long mixed", &long_mixed)] {
            let out = ctx_run(&SearchContent, &state, &json!({"query": query})).unwrap();
            let snippet = out.result["results"][0]["snippet"].as_str().unwrap();
            assert_eq!(snippet.chars().count(), SNIPPET_CHARS, "{query}");
            assert!(body.starts_with(snippet), "{query}");
        }
        // Short bodies come back whole.
        assert_eq!(snippet("short"), "short");
    }

    #[test]
    fn filters_by_type_tags_status_and_limit() {
        let state = demo();
        // (args, expected ids)
        let cases: Vec<(Value, &[&str])> = vec![
            (
                json!({"query": "lantern", "content_type": "poi"}),
                &["poi_heart_lantern"],
            ),
            (
                json!({"query": "lantern", "tags": ["BOSS"]}),
                &["poi_heart_lantern"],
            ),
            (json!({"query": "lantern", "tags": ["boss", "market"]}), &[]),
            (
                json!({"query": "key", "status": "draft"}),
                &["note_warden_key"],
            ),
            (json!({"query": "key"}), &["poi_tide_clock"]),
            (
                json!({"query": "diver", "status": "archived"}),
                &["quest_lost_diver"],
            ),
            (
                json!({"query": "", "content_type": "poi"}),
                &["poi_tide_clock", "poi_heart_lantern", "poi_chapel_altar"],
            ),
            (
                json!({"query": "", "content_type": "poi", "limit": 2}),
                &["poi_tide_clock", "poi_heart_lantern"],
            ),
            (
                json!({"query": "", "status": "draft", "content_type": "note"}),
                &["note_warden_key"],
            ),
        ];
        for (args, want) in cases {
            let out = ctx_run(&SearchContent, &state, &args).unwrap();
            assert_eq!(ids(&out), want, "{args}");
        }
        // Every published entry by default, at most 10.
        let out = invoke(&state, json!({"query": ""})).unwrap();
        assert_eq!(out.result["total"], 10);
        let out = invoke(&state, json!({"query": "", "limit": 50})).unwrap();
        assert!(ids(&out).iter().all(|id| *id != "note_warden_key"));
    }

    #[test]
    fn the_schema_refuses_bad_arguments() {
        let state = demo();
        for bad in [
            json!({}),
            json!({"query": 7}),
            json!({"query": "x".repeat(MAX_QUERY_CHARS + 1)}),
            json!({"query": "a", "status": "deleted"}),
            json!({"query": "a", "limit": 0}),
            json!({"query": "a", "limit": 51}),
            json!({"query": "a", "tags": "boss"}),
            json!({"query": "a", "tags": vec!["t"; MAX_TAGS + 1]}),
            json!({"query": "a", "tags": [1]}),
            json!({"query": "a", "content_type": ""}),
            json!({"query": "a", "sort": "new"}),
        ] {
            let e = invoke(&state, bad.clone()).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{bad}"
            );
        }
        // A query at the limit is fine, even in Chinese (characters, not bytes).
        assert!(invoke(&state, json!({"query": "灯".repeat(MAX_QUERY_CHARS)})).is_ok());
    }
}
