//! `POST /api/chat`: one model step for front ends that run tools themselves.
//!
//! The client sends the whole conversation in provider-agnostic camelCase
//! messages; questd asks the configured model for its next message and
//! answers it, tool calls included, without running anything and without a
//! session. The client runs the tools, appends `tool` messages and calls
//! again. Every tool call is checked against the tool's JSON Schema before
//! it is returned, so a client never receives a call it cannot run. Long
//! conversations are cut to the history budget like a session's, the
//! oldest turns summarized in the system prompt.

use std::collections::HashSet;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use super::{AppState, json_body};
use crate::error::{ApiError, ErrorCode};
use crate::game::HistoryEntry;
use crate::llm::{ModelReply, ModelRequest, RequestKind, collect_reply, stateless_system_prompt};
use crate::protocol::{
    AssistantMessage, CallId, ChatMessage, ChatTool, ChatToolCall, StatelessChatReply,
    StatelessChatRequest,
};
use crate::tools::{Caller, RawArgs, Registry, Role};

/// Most messages one conversation may carry.
pub const MAX_MESSAGES: usize = 500;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/api/chat", web::post().to(chat));
}

/// With a real model configured this needs a key (it spends the
/// operator's model budget); the offline game master answers anyone, at
/// most [`super::admission::ANON_MODEL_PER_MINUTE`] calls a minute per
/// address. Key holders are limited like other service calls.
async fn chat(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    match state.keys.grant(&req)? {
        Some(grant) => check_key_rate(&state, &grant)?,
        None if state.provider.name() == "offline" => {
            state.admission.check_anonymous_model(&req)?
        }
        None => {
            state
                .keys
                .require(&req, "/api/chat with a configured model")?;
        }
    }
    let body = json_body(body).await?;
    let request: StatelessChatRequest = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))?;
    let allowlist = allowlist(&state.registry, request.tools)?;
    let conversation = Conversation::parse(&request.messages)?;
    let caller = Caller::sessionless(Role::GameMaster, &allowlist);
    let model_request = ModelRequest::build(
        conversation.system.unwrap_or_else(stateless_system_prompt),
        conversation.history.into_iter().map(Arc::new).collect(),
        state.history_tokens,
        state.registry.openai_tools(&caller),
        Arc::default(),
        RequestKind::Step,
    );
    let reply = collect_reply(state.provider.complete(model_request))
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "stateless model call failed");
            ApiError::new(e.code(), e.public_message())
        })?;
    let message = assistant_message(&state.registry, &caller, reply)?;
    Ok(HttpResponse::Ok().json(StatelessChatReply { message }))
}

/// A key holder's model calls count against its tenant's and key's
/// service rate, like its tool calls.
fn check_key_rate(state: &AppState, grant: &super::auth::KeyGrant) -> Result<(), ApiError> {
    super::service::check_rate_of(state, &grant.tenant_id, &super::service::key_id(grant))
}

/// The tools the model may call: the ones named, or every model-callable one.
fn allowlist(registry: &Registry, wanted: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    let callable = |name: &str| {
        registry
            .spec(name)
            .is_some_and(|s| s.ai_callable && s.enabled)
    };
    match wanted {
        None => Ok(registry
            .names()
            .iter()
            .filter(|n| callable(n))
            .map(|n| (*n).to_owned())
            .collect()),
        Some(names) => {
            if let Some(bad) = names.iter().find(|n| !callable(n)) {
                return Err(ApiError::bad_request(format!(
                    "tools: {bad:?} is not a tool a model may call"
                )));
            }
            Ok(names)
        }
    }
}

/// A checked conversation, ready for the model.
#[derive(Debug, PartialEq)]
struct Conversation {
    /// The system messages, joined; `None` if there were none.
    system: Option<String>,
    history: Vec<HistoryEntry>,
}

impl Conversation {
    /// Checks every message and translates them. Tool messages must answer a
    /// call of the assistant message before them, once; every call must be
    /// answered before the conversation goes on.
    fn parse(raw: &[Value]) -> Result<Self, ApiError> {
        if raw.is_empty() {
            return Err(ApiError::bad_request("messages: at least one is needed"));
        }
        if raw.len() > MAX_MESSAGES {
            return Err(ApiError::bad_request(format!(
                "messages: at most {MAX_MESSAGES} are accepted, got {}",
                raw.len()
            )));
        }
        let mut system: Vec<String> = Vec::new();
        let mut history = Vec::new();
        let mut turn = String::from("chat_0");
        let mut turns = 0;
        // Calls of the last assistant message that no tool message answered yet.
        let mut open: Vec<CallId> = Vec::new();
        for (i, value) in raw.iter().enumerate() {
            let bad = |what: String| ApiError::bad_request(format!("messages[{i}]: {what}"));
            let m: ChatMessage = serde_json::from_value(value.clone())
                .map_err(|e| bad(format!("not a message: {e}")))?;
            if m.role != "tool" && !open.is_empty() {
                return Err(bad(format!(
                    "tool call {:?} has no tool message answering it",
                    open[0]
                )));
            }
            if m.role != "assistant" && m.tool_calls.is_some() {
                return Err(bad("only assistant messages may have toolCalls".into()));
            }
            if m.role != "tool" && m.tool_call_id.is_some() {
                return Err(bad("only tool messages may have toolCallId".into()));
            }
            match m.role.as_str() {
                "system" => system.push(text(&m.content).map_err(bad)?),
                "user" => {
                    turns += 1;
                    turn = format!("chat_{turns}");
                    history.push(HistoryEntry::User {
                        turn_id: turn.clone(),
                        text: text(&m.content).map_err(bad)?,
                    });
                }
                "assistant" => {
                    let calls = m.tool_calls.unwrap_or_default();
                    let content = match &m.content {
                        Value::Null if !calls.is_empty() => None,
                        Value::Null => {
                            return Err(bad("content: null needs toolCalls".into()));
                        }
                        other => Some(text(other).map_err(bad)?),
                    };
                    if let Some(content) = content.filter(|c| !c.is_empty()) {
                        history.push(HistoryEntry::Assistant {
                            turn_id: turn.clone(),
                            text: content,
                        });
                    }
                    let mut ids = HashSet::new();
                    for (j, call) in calls.into_iter().enumerate() {
                        if call.id.as_str().trim().is_empty() || !ids.insert(call.id.clone()) {
                            return Err(bad(format!(
                                "toolCalls[{j}].id must be a non-empty id unique in the message"
                            )));
                        }
                        if !call.tool.args.is_object() {
                            return Err(bad(format!("toolCalls[{j}].tool.args must be an object")));
                        }
                        open.push(call.id.clone());
                        history.push(HistoryEntry::ToolCall {
                            turn_id: turn.clone(),
                            call_id: call.id.to_string(),
                            tool: call.tool.name,
                            arguments: call.tool.args.to_string(),
                        });
                    }
                }
                "tool" => {
                    let id = m
                        .tool_call_id
                        .ok_or_else(|| bad("a tool message needs toolCallId".into()))?;
                    let Some(at) = open.iter().position(|c| *c == id) else {
                        return Err(bad(format!(
                            "toolCallId {id:?} answers no open tool call of the assistant message before it"
                        )));
                    };
                    open.remove(at);
                    let tool = history
                        .iter()
                        .rev()
                        .find_map(|h| match h {
                            HistoryEntry::ToolCall { call_id, tool, .. }
                                if id == call_id.as_str() =>
                            {
                                Some(tool.clone())
                            }
                            _ => None,
                        })
                        .unwrap_or_default();
                    let content = match m.content {
                        Value::String(s) => s,
                        Value::Null => return Err(bad("a tool message needs content".into())),
                        other => other.to_string(),
                    };
                    history.push(HistoryEntry::ToolResult {
                        turn_id: turn.clone(),
                        call_id: id.to_string(),
                        tool,
                        content,
                    });
                }
                other => {
                    let shown: String = other.chars().take(32).collect();
                    return Err(bad(format!(
                        "unknown role {shown:?}; expected user, assistant, system or tool"
                    )));
                }
            }
        }
        if let Some(id) = open.first() {
            return Err(ApiError::bad_request(format!(
                "messages: tool call {id:?} has no tool message answering it"
            )));
        }
        Ok(Self {
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            history,
        })
    }
}

/// A message's text content.
fn text(content: &Value) -> Result<String, String> {
    content
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "content must be a string".to_owned())
}

/// The model's reply as the client receives it; a call the client could not
/// run (unknown tool, arguments that break the schema) is the model's fault:
/// 502 `INVALID_AI_JSON`.
fn assistant_message(
    registry: &Registry,
    caller: &Caller<'_>,
    reply: ModelReply,
) -> Result<AssistantMessage, ApiError> {
    let mut ids = HashSet::new();
    let mut tool_calls = Vec::with_capacity(reply.tool_calls.len());
    for (i, call) in reply.tool_calls.into_iter().enumerate() {
        let args = registry
            .prepare(&call.name, RawArgs::Text(call.arguments), caller)
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::InvalidAiJson,
                    format!("the model asked for an unusable tool call: {}", e.message),
                )
            })?;
        let mut id = call.id;
        if id.as_str().is_empty() || ids.contains(&id) {
            id = CallId::from(format!("call_{}", i + 1));
        }
        ids.insert(id.clone());
        tool_calls.push(ChatToolCall {
            id,
            tool: ChatTool {
                name: call.name,
                args,
            },
        });
    }
    Ok(AssistantMessage {
        role: "assistant",
        content: Some(reply.text).filter(|t| !t.is_empty()),
        tool_calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(messages: Value) -> Result<Conversation, String> {
        let raw = messages.as_array().cloned().unwrap_or_default();
        Conversation::parse(&raw).map_err(|e| e.message)
    }

    #[test]
    fn a_whole_tool_loop_translates() {
        let c = parse(json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "roll 2d6"},
            {"role": "assistant", "content": null, "toolCalls": [
                {"id": "c1", "tool": {"name": "roll_dice", "args": {"dice": "2d6"}}}]},
            {"role": "tool", "toolCallId": "c1", "content": {"total": 7}},
            {"role": "assistant", "content": "Seven!"},
            {"role": "user", "content": "again"},
        ]))
        .unwrap();
        assert_eq!(c.system.as_deref(), Some("Be brief."));
        assert_eq!(
            c.history,
            vec![
                HistoryEntry::User {
                    turn_id: "chat_1".into(),
                    text: "roll 2d6".into()
                },
                HistoryEntry::ToolCall {
                    turn_id: "chat_1".into(),
                    call_id: "c1".into(),
                    tool: "roll_dice".into(),
                    arguments: r#"{"dice":"2d6"}"#.into()
                },
                HistoryEntry::ToolResult {
                    turn_id: "chat_1".into(),
                    call_id: "c1".into(),
                    tool: "roll_dice".into(),
                    content: r#"{"total":7}"#.into()
                },
                HistoryEntry::Assistant {
                    turn_id: "chat_1".into(),
                    text: "Seven!".into()
                },
                HistoryEntry::User {
                    turn_id: "chat_2".into(),
                    text: "again".into()
                },
            ]
        );
    }

    #[test]
    fn malformed_conversations_are_refused_with_where() {
        let cases = [
            (json!([]), "at least one"),
            (
                json!([{"role": "wizard", "content": "x"}]),
                "messages[0]: unknown role",
            ),
            (json!([{"content": "x"}]), "messages[0]: not a message"),
            (json!(["hi"]), "messages[0]: not a message"),
            (
                json!([{"role": "user", "content": 5}]),
                "content must be a string",
            ),
            (json!([{"role": "user"}]), "content must be a string"),
            (
                json!([{"role": "assistant", "content": null}]),
                "null needs toolCalls",
            ),
            (
                json!([{"role": "user", "content": "x", "toolCalls": []}]),
                "only assistant messages",
            ),
            (
                json!([{"role": "user", "content": "x", "toolCallId": "c"}]),
                "only tool messages",
            ),
            (
                json!([{"role": "tool", "toolCallId": "c1", "content": "x"}]),
                "answers no open tool call",
            ),
            (
                json!([{"role": "assistant", "content": null, "toolCalls": [
                    {"id": "c1", "tool": {"name": "roll_dice", "args": {}}}]},
                    {"role": "tool", "content": "x"}]),
                "needs toolCallId",
            ),
            (
                json!([{"role": "assistant", "content": null, "toolCalls": [
                    {"id": "c1", "tool": {"name": "roll_dice", "args": {}}}]},
                    {"role": "user", "content": "x"}]),
                "messages[1]: tool call \"c1\" has no tool message",
            ),
            (
                json!([{"role": "assistant", "content": null, "toolCalls": [
                    {"id": "c1", "tool": {"name": "roll_dice", "args": {}}}]}]),
                "messages: tool call \"c1\"",
            ),
            (
                json!([{"role": "assistant", "content": null, "toolCalls": [
                    {"id": "c1", "tool": {"name": "roll_dice", "args": []}}]}]),
                "args must be an object",
            ),
            (
                json!([{"role": "assistant", "content": null, "toolCalls": [
                    {"id": "c1", "tool": {"name": "a", "args": {}}},
                    {"id": "c1", "tool": {"name": "b", "args": {}}}]}]),
                "unique",
            ),
            (
                json!([{"role": "assistant", "content": null, "toolCalls": [
                    {"id": "c1", "tool": {"name": "roll_dice", "args": {}}}]},
                    {"role": "tool", "toolCallId": "c1", "content": "x"},
                    {"role": "tool", "toolCallId": "c1", "content": "x"}]),
                "messages[2]: toolCallId \"c1\" answers no open",
            ),
        ];
        for (messages, want) in cases {
            let err = parse(messages.clone()).unwrap_err();
            assert!(err.contains(want), "{messages}: {err}");
        }
    }

    #[test]
    fn replies_keep_valid_calls_and_refuse_unusable_ones() {
        let registry = Registry::builtin().unwrap();
        assert!(allowlist(&registry, Some(vec!["create_npc".into()])).is_err());
        let names = allowlist(&registry, None).unwrap();
        assert!(names.iter().any(|n| n == "roll_dice"));
        assert!(
            names.iter().all(|n| n != "create_npc"),
            "people-only tools stay out"
        );
        let caller = Caller::sessionless(Role::GameMaster, &names);
        let ok = assistant_message(
            &registry,
            &caller,
            ModelReply::tools([("roll_dice", r#"{"dice":"1d20","reason":"luck"}"#)]),
        )
        .unwrap();
        assert_eq!(ok.content, None);
        assert_eq!(
            ok.tool_calls[0].tool.args,
            json!({"dice": "1d20", "reason": "luck"})
        );
        for bad in [
            ModelReply::tools([("roll_dice", r#"{"dice":"#)]),
            ModelReply::tools([("roll_dice", "null")]),
            ModelReply::tools([("roll_dice", "[1]")]),
            ModelReply::tools([("roll_dice", r#"{"sides":3}"#)]),
            ModelReply::tools([("summon_dragon", "{}")]),
        ] {
            let e = assistant_message(&registry, &caller, bad.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidAiJson, "{bad:?}");
        }
    }
}
