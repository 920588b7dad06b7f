//! `create_draft_content`: write a new content entry as a draft for a person to review.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{GAME_ROLES, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use crate::error::{ErrorCode, Reason, wire_name};
use crate::game::Effect;
use crate::game::campaign::{MAX_SOURCE_CHARS, MAX_SUMMARY_CHARS};
use crate::game::content::{ContentAbout, ContentEntry, ContentStatus};

/// Longest title.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest body.
pub const MAX_BODY_CHARS: usize = 8000;
/// Most tags on one entry.
pub const MAX_TAGS: usize = 10;
/// Longest tag.
pub const MAX_TAG_CHARS: usize = 40;
/// Most drafts one session may hold (campaign drafts included); past it
/// create_draft_content refuses rather than grow the save without end.
pub const MAX_SESSION_DRAFTS: usize = 1000;
/// Most area ids listed in a not-found message.
const LISTED_IDS: usize = 20;
/// Fresh ids drawn before giving up on finding an unused one.
const ID_ATTEMPTS: usize = 8;

pub struct CreateDraftContent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(max = 32), pattern("^[a-z_]{1,32}$"))]
    content_type: String,
    #[schemars(length(min = 1, max = MAX_TITLE_CHARS))]
    title: String,
    #[schemars(length(min = 1, max = MAX_BODY_CHARS))]
    body: String,
    #[serde(default)]
    #[schemars(length(max = MAX_TAGS), inner(length(max = MAX_TAG_CHARS)))]
    tags: Vec<String>,
    #[schemars(length(min = 1, max = 64))]
    area_id: Option<String>,
    #[schemars(length(max = MAX_SUMMARY_CHARS))]
    summary: Option<String>,
    #[serde(default)]
    #[schemars(length(max = MAX_TAGS), inner(length(max = MAX_TAG_CHARS)))]
    domains: Vec<String>,
    #[schemars(length(max = MAX_SOURCE_CHARS))]
    source: Option<String>,
}

impl Tool for CreateDraftContent {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "create_draft_content",
            "Create draft content",
            "content",
            "Save a new lore entry, quest hook, point of interest (poi) or note, optionally placed in \
             an area, with an optional summary, knowledge domains and source. It is always saved as a draft that a person must review and publish; this tool \
             can never publish content.",
            super::input_schema::<Args>(),
            json!({
                "type": "object",
                "required": ["content_id", "status", "created_at", "entry"],
                "properties": {
                    "content_id": {"type": "string", "pattern": "^draft_[0-9a-f]{12}$"},
                    "status": {"const": "draft"},
                    "created_at": {"type": "string"},
                    "entry": {
                        "type": "object",
                        "required": ["content_id", "content_type", "title", "body", "tags", "status", "created_by", "created_at"],
                        "properties": {"status": {"const": "draft"}}
                    }
                }
            }),
        )
        .writes()
        .roles(GAME_ROLES)
        .requires_auth()
        .on_sites()
    }

    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let args: Args = super::typed(args)?;
        let state = ctx.state;
        // Nothing publishes drafts, so every draft made during play stays one
        // and this count bounds them all.
        let drafts = state
            .content
            .iter()
            .filter(|c| c.status == ContentStatus::Draft)
            .count();
        if drafts >= MAX_SESSION_DRAFTS {
            return Err(ToolError::new(
                Reason::InvalidActorState,
                ErrorCode::InvalidArgs,
                format!("this session already has {drafts} drafts, the most it may hold"),
            ));
        }
        if args.title.trim().is_empty() {
            return Err(ToolError::invalid_args(
                "title is blank; give a short title",
            ));
        }
        if args.body.trim().is_empty() {
            return Err(ToolError::invalid_args("body is blank; write the content"));
        }
        if let Some(id) = &args.area_id
            && state.area(id).is_none()
        {
            let known: Vec<&str> = state
                .areas
                .iter()
                .take(LISTED_IDS)
                .map(|a| a.area_id.as_str())
                .collect();
            return Err(ToolError::new(
                Reason::NotFound,
                ErrorCode::ZoneNotFound,
                format!(
                    "no area {id:?} on this map; leave area_id out or use one of: {}",
                    known.join(", ")
                ),
            ));
        }
        // An id already taken would make the effect a silent no-op.
        let content_id = (0..ID_ATTEMPTS)
            .map(|_| format!("draft_{:012x}", ctx.rng.next_u64() >> 16))
            .find(|id| !state.content.iter().any(|c| c.content_id == *id))
            .ok_or_else(|| {
                ToolError::new(
                    Reason::ExecutionFailed,
                    ErrorCode::ExecutionFailed,
                    "could not find an unused content id; try again",
                )
            })?;
        // The call's time, kept in the effect: replaying it keeps this time.
        let created_at = ctx.now_rfc3339();
        let entry = ContentEntry {
            content_id: content_id.clone(),
            content_type: args.content_type,
            title: args.title,
            body: args.body,
            tags: args.tags,
            // Never published by a model: a person reviews drafts first.
            status: ContentStatus::Draft,
            area_id: args.area_id.map(crate::ids::AreaId::from),
            created_by: wire_name(&ctx.role),
            about: ContentAbout {
                summary: args.summary,
                domains: args.domains,
                source: args.source,
                // Nobody has vouched for it yet (see ContentEntry::verified).
                credibility_score: None,
                verified: None,
                created_at: Some(created_at.clone()),
            },
        };
        Ok(ToolOutput {
            result: json!({
                "content_id": content_id,
                "status": entry.status,
                "created_at": created_at,
                "entry": entry,
            }),
            effect: Some(Effect::AddContent { entry }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::GameState;

    use crate::tools::Role;
    use crate::tools::test_support::{ctx_run, demo, pipeline, run_as};

    fn invoke(state: &GameState, args: Value, role: Role) -> Result<ToolOutput, ToolError> {
        pipeline("create_draft_content", state, args, role)
    }

    fn poi() -> Value {
        json!({
            "content_type": "poi",
            "title": "The Rusted Bell Rope",
            "body": "A frayed rope dangles from the tower's broken belfry.",
            "tags": ["bell", "tower"],
            "area_id": "area_008"
        })
    }

    #[test]
    fn creates_a_draft_that_the_state_keeps() {
        let mut state = demo();
        let before = state.content.len();
        let out = invoke(&state, poi(), Role::GameMaster).unwrap();
        let id = out.result["content_id"].as_str().unwrap().to_owned();
        assert!(
            id.len() == 18
                && id.starts_with("draft_")
                && id[6..].chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
        assert_eq!(out.result["status"], "draft");
        assert_eq!(out.result["entry"]["status"], "draft");
        assert_eq!(out.result["entry"]["created_by"], "game_master");
        let effect = out.effect.unwrap();
        state.apply(&effect);
        state.apply(&effect);
        assert_eq!(state.content.len(), before + 1);
        let saved = state.content.last().unwrap();
        assert_eq!(serde_json::to_value(saved).unwrap(), out.result["entry"]);
        assert_eq!(saved.status, ContentStatus::Draft);
        assert_eq!(saved.area_id.as_deref(), Some("area_008"));
        assert_eq!(saved.tags, ["bell", "tower"]);
    }

    #[test]
    fn keeps_the_seed_fields_and_the_time_of_the_call() {
        let mut state = demo();
        let args = json!({
            "content_type": "knowledge",
            "title": "严田村古井传说",
            "body": "村中心的古井相传有千年历史...",
            "summary": "古井的传说",
            "tags": ["传说", "古井"],
            "domains": ["村史"],
            "source": "村民口述"
        });
        let out = ctx_run(&CreateDraftContent, &state, &args).unwrap();
        assert_eq!(out.result["status"], "draft");
        assert_eq!(out.result["created_at"], "2024-12-13T12:00:00.000Z");
        let effect = out.effect.unwrap();
        state.apply(&effect);
        let saved = state.content.last().unwrap();
        assert_eq!(saved.about.summary.as_deref(), Some("古井的传说"));
        assert_eq!(saved.about.domains, ["村史"]);
        assert_eq!(saved.about.source.as_deref(), Some("村民口述"));
        assert_eq!(
            saved.about.created_at.as_deref(),
            Some("2024-12-13T12:00:00.000Z")
        );
        assert!(!saved.verified() && saved.credibility_score() < 1.0);
        // The journal keeps the time: the effect read back is the same.
        let journalled: Effect =
            serde_json::from_str(&serde_json::to_string(&effect).unwrap()).unwrap();
        assert_eq!(journalled, effect);
        // Through the pipeline the time is the clock's, in RFC 3339 UTC.
        let out = invoke(&state, args, Role::Service).unwrap();
        let at = out.result["created_at"].as_str().unwrap();
        assert!(
            at.len() == 24 && at.starts_with("20") && at.ends_with('Z') && &at[10..11] == "T",
            "{at}"
        );
    }

    #[test]
    fn status_is_always_draft_and_the_author_is_the_role() {
        let state = demo();
        for (role, author) in [
            (Role::GameMaster, "game_master"),
            (Role::Service, "service"),
            (Role::GmAdmin, "gm_admin"),
            (Role::Owner, "owner"),
        ] {
            let out = run_as(
                &CreateDraftContent,
                &state,
                &json!({"content_type": "note", "title": "t", "body": "b"}),
                role,
            )
            .unwrap();
            let Some(Effect::AddContent { entry }) = out.effect else {
                panic!("no content effect");
            };
            assert_eq!(entry.status, ContentStatus::Draft);
            assert_eq!(entry.created_by, author);
            assert!(entry.tags.is_empty() && entry.area_id.is_none());
        }
        // A model cannot ask for another status.
        let mut published = poi();
        published["status"] = json!("published");
        let e = invoke(&state, published, Role::GameMaster).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidArgs);
    }

    #[test]
    fn drafts_are_searchable_as_drafts_only() {
        let mut state = demo();
        let out = ctx_run(&CreateDraftContent, &state, &poi()).unwrap();
        state.apply(out.effect.as_ref().unwrap());
        let hits = |status| {
            crate::game::content::search(
                &state.content,
                &crate::game::content::SearchQuery {
                    query: "bell rope",
                    content_type: None,
                    tags: &[],
                    status,
                    limit: 10,
                },
            )
            .iter()
            .map(|h| h.entry.content_id.clone())
            .collect::<Vec<_>>()
        };
        assert_eq!(
            hits(ContentStatus::Draft).first(),
            Some(&out.result["content_id"].as_str().unwrap().to_owned())
        );
        assert!(
            !hits(ContentStatus::Published)
                .iter()
                .any(|id| id.starts_with("draft_"))
        );
    }

    #[test]
    fn a_taken_id_is_drawn_again() {
        let mut state = demo();
        let first = ctx_run(&CreateDraftContent, &state, &poi()).unwrap();
        state.apply(first.effect.as_ref().unwrap());
        // The same rng seed would give the same id; the next draw is used.
        let second = ctx_run(&CreateDraftContent, &state, &poi()).unwrap();
        assert_ne!(first.result["content_id"], second.result["content_id"]);
    }

    #[test]
    fn unknown_areas_and_blank_text_are_refused() {
        let state = demo();
        let mut nowhere = poi();
        nowhere["area_id"] = json!("area_404");
        let e = ctx_run(&CreateDraftContent, &state, &nowhere).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::NotFound, ErrorCode::ZoneNotFound)
        );
        assert!(e.message.contains("area_001"), "{}", e.message);
        for field in ["title", "body"] {
            let mut blank = poi();
            blank[field] = json!("  \n ");
            let e = ctx_run(&CreateDraftContent, &state, &blank).unwrap_err();
            assert_eq!(e.reason, Reason::InvalidArgs, "{field}");
            assert!(e.message.contains(field), "{}", e.message);
        }
    }

    #[test]
    fn the_schema_and_roles_refuse_bad_calls() {
        let state = demo();
        let with = |key: &str, value: Value| {
            let mut v = poi();
            v[key] = value;
            v
        };
        let without = |key: &str| {
            let mut v = poi();
            v.as_object_mut().unwrap().remove(key);
            v
        };
        for bad in [
            without("content_type"),
            without("title"),
            without("body"),
            with("content_type", json!("Lore")),
            with("content_type", json!("lore-1")),
            with("content_type", json!("")),
            with("content_type", json!("a".repeat(33))),
            with("title", json!("")),
            with("title", json!("t".repeat(MAX_TITLE_CHARS + 1))),
            with("body", json!("")),
            with("body", json!("b".repeat(MAX_BODY_CHARS + 1))),
            with("tags", json!(vec!["t"; MAX_TAGS + 1])),
            with("tags", json!(["x".repeat(MAX_TAG_CHARS + 1)])),
            with("tags", json!([3])),
            with("area_id", json!("")),
            with("area_id", Value::Null),
            with("summary", json!("s".repeat(MAX_SUMMARY_CHARS + 1))),
            with("summary", json!(7)),
            with("domains", json!(vec!["d"; MAX_TAGS + 1])),
            with("domains", json!(["x".repeat(MAX_TAG_CHARS + 1)])),
            with("domains", json!("history")),
            with("source", json!("s".repeat(MAX_SOURCE_CHARS + 1))),
            with("source", Value::Null),
            with("created_by", json!("owner")),
        ] {
            let e = invoke(&state, bad.clone(), Role::GameMaster).unwrap_err();
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{bad}"
            );
        }
        // The body's bound counts characters, not bytes.
        assert!(
            invoke(
                &state,
                with("body", json!("灯".repeat(MAX_BODY_CHARS))),
                Role::GameMaster
            )
            .is_ok()
        );
        let e = invoke(&state, poi(), Role::Player).unwrap_err();
        assert_eq!(e.reason, Reason::PermissionDenied);
    }

    #[test]
    fn a_session_holds_a_bounded_number_of_drafts() {
        let mut state = demo();
        let out = ctx_run(&CreateDraftContent, &state, &poi()).unwrap();
        let Some(Effect::AddContent { entry }) = out.effect else {
            panic!("no content effect");
        };
        let content = std::sync::Arc::make_mut(&mut state.content);
        let drafts = |c: &[ContentEntry]| {
            c.iter()
                .filter(|e| e.status == ContentStatus::Draft)
                .count()
        };
        while drafts(content) < MAX_SESSION_DRAFTS {
            let mut e = entry.clone();
            e.content_id = format!("draft_filler_{}", content.len());
            content.push(e);
        }
        let e = ctx_run(&CreateDraftContent, &state, &poi()).unwrap_err();
        assert_eq!(
            (e.reason, e.code),
            (Reason::InvalidActorState, ErrorCode::InvalidArgs)
        );
        assert_eq!(
            e.message,
            "this session already has 1000 drafts, the most it may hold"
        );
    }
}
