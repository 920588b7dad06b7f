//! `search_content`: find lore, quests, points of interest and notes by relevance (read-only).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::game::content::{
    ContentStatus, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, SearchQuery, search,
};

/// Longest query.
pub const MAX_QUERY_CHARS: usize = 200;
/// Most tag filters in one search.
pub const MAX_TAGS: usize = 10;
/// Characters of the body shown with each result.
pub const SNIPPET_CHARS: usize = 160;

pub struct SearchContent;

#[derive(Deserialize)]
struct Args {
    query: String,
    content_type: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    status: ContentStatus,
    limit: Option<usize>,
}

/// The first [`SNIPPET_CHARS`] characters of `body`, never cut inside a character.
fn snippet(body: &str) -> String {
    body.chars().take(SNIPPET_CHARS).collect()
}

impl Tool for SearchContent {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "search_content",
            "Search content",
            "content",
            "Search the campaign's lore, quests, points of interest (poi) and notes by words \
             (English or Chinese), best match first; narrow by content_type, tags (all must match) \
             and status (default published). Changes nothing.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
                    "content_type": {"type": "string", "minLength": 1, "maxLength": 32},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "maxLength": 40},
                        "maxItems": MAX_TAGS
                    },
                    "status": {"enum": ["published", "draft", "archived"], "default": "published"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": DEFAULT_SEARCH_LIMIT}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "required": ["results", "total"],
                "properties": {
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
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let hits = search(
            &ctx.state.content,
            &SearchQuery {
                query: &args.query,
                content_type: args.content_type.as_deref(),
                tags: &args.tags,
                status: args.status,
                limit: args.limit.unwrap_or(DEFAULT_SEARCH_LIMIT),
            },
        );
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
            result: json!({"total": results.len(), "results": results}),
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
                json!({"query": "", "status": "draft"}),
                &["note_warden_key"],
            ),
        ];
        for (args, want) in cases {
            let out = ctx_run(&SearchContent, &state, &args).unwrap();
            assert_eq!(ids(&out), want, "{args}");
        }
        // Every published entry by default, at most 10.
        let out = invoke(&state, json!({"query": ""})).unwrap();
        assert_eq!(out.result["total"], 9);
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
