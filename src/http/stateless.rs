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
//!
//! A session's guards hold here too ([`crate::llm::guard`]), read from the
//! history the client sends (the exchange: the messages after the last
//! `user` one):
//! - once the exchange holds `QUESTD_MAX_ITERATIONS` assistant messages
//!   with tool calls, or the same call (name and arguments) twice, the
//!   model is asked for a closing answer with no tools
//!   ([`RequestKind::WrapUp`]), and any calls it still asks for are
//!   dropped;
//! - an answer that asks again for a call the exchange already answered is
//!   a loop: the model is asked once more, for a closing answer;
//! - an answer whose tool call fails the checks, or that says nothing, or
//!   that claims a move no `move`/`move_to_zone` result of the exchange
//!   confirms ([`contract::check_narration`]), is sent back once with the
//!   problem quoted; a second such answer is `502 INVALID_AI_JSON`.

use std::collections::HashSet;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use super::body::decode;
use super::state::AppState;
use crate::error::{ApiError, ErrorCode};
use crate::game::HistoryEntry;
use crate::ids::{CallId, TurnId};
use crate::llm::contract::{self, TurnFacts};
use crate::llm::guard::{self, Narration};
use crate::llm::{ModelReply, ModelRequest, RequestKind, collect_reply, stateless_system_prompt};
use crate::protocol::{
    AssistantMessage, ChatMessage, ChatTool, ChatToolCall, StatelessChatReply, StatelessChatRequest,
};
use crate::tools::{Caller, RawArgs, Registry, Role};

/// Refuses a model call with `429 BUDGET_EXCEEDED` while the tenant's or
/// the node's token budget is spent for the day (contract §12), as a
/// session refuses a chat.
fn within_budget(state: &AppState, tenant: &crate::ids::TenantId) -> Result<(), ApiError> {
    let refused = |e| ApiError::from(crate::session::ChatRefused::from(e));
    state.budgets.admit(None, tenant.as_str()).map_err(refused)
}

/// Most messages one conversation may carry.
pub const MAX_MESSAGES: usize = 500;

pub fn configure(cfg: &mut web::ServiceConfig) {
    super::routes::add(cfg, actix_web::http::Method::POST, "/api/chat", chat);
}

/// With a real model configured this needs a key (it spends the
/// operator's model budget); the offline game master answers anyone, at
/// most [`super::admission::ANON_MODEL_PER_MINUTE`] calls a minute per
/// address. Key holders are limited like other service calls.
#[utoipa::path(post, path = "/api/chat", tag = "chat", operation_id = "stateless_chat",
    security((), ("internal_key" = [])),
    request_body(content = StatelessChatRequest, description = "OpenAI-style `messages` and `tools`; no session"),
    responses(
        (status = 200, description = "The model's next message", body = StatelessChatReply),
        (status = 400, description = "Bad body", body = crate::protocol::http::ErrorBody), (status = 401, description = "A real model needs a key", body = crate::protocol::http::ErrorBody), (status = 429, description = "Rate limited", body = crate::protocol::http::ErrorBody)))]
async fn chat(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let tenant = match state.keys.grant(&req)? {
        Some(grant) => {
            state.service.check_grant(&state.metrics, &grant)?;
            grant.tenant_id
        }
        None if state.provider.name() == "offline" => {
            state.admission.check_anonymous_model(&req)?;
            crate::ids::TenantId::from(crate::http::auth::DEFAULT_TENANT)
        }
        // No key was sent: this refuses.
        None => {
            let what = "/api/chat with a configured model";
            state.keys.require(&req, what)?.tenant_id
        }
    };
    let request: StatelessChatRequest = decode(body, false).await?;
    let allowlist = allowlist(&state.registry, request.tools)?;
    let conversation = Conversation::parse(&request.messages)?;
    let caller = Caller::sessionless(Role::GameMaster, &allowlist);
    let tools = state.registry.openai_tools(&caller);
    let system = conversation
        .system
        .clone()
        .unwrap_or_else(stateless_system_prompt);
    let history: Vec<Arc<HistoryEntry>> =
        conversation.history.iter().cloned().map(Arc::new).collect();
    let mut kind = if conversation.spent(state.max_iterations) {
        RequestKind::WrapUp
    } else {
        RequestKind::Step
    };
    let mut correction: Vec<Arc<HistoryEntry>> = Vec::new();
    for attempt in 0..2 {
        let mut messages = history.clone();
        messages.extend(correction.iter().cloned());
        let model_request = ModelRequest::build(
            system.clone(),
            messages,
            state.history_tokens,
            tools.clone(),
            Arc::default(),
            kind,
        );
        within_budget(&state, &tenant)?;
        let reply = collect_reply(crate::llm::ask(&*state.provider, model_request))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "stateless model call failed");
                ApiError::new(e.code(), e.public_message())
            })?;
        state.budgets.spend(None, tenant.as_str(), reply.usage);
        let answer = reply.text.clone();
        let problem = match judge(&state.registry, &caller, &conversation, kind, reply) {
            Ok(message) => return Ok(HttpResponse::Ok().json(StatelessChatReply { message })),
            Err(problem) => problem,
        };
        if attempt == 1 {
            return Err(problem.into_error());
        }
        tracing::info!(problem = %problem.text(), "stateless answer rejected; asking again");
        if problem == Problem::Loop {
            kind = RequestKind::WrapUp;
        } else {
            let turn_id = || TurnId::from("chat_retry");
            if !answer.trim().is_empty() {
                correction.push(Arc::new(HistoryEntry::Assistant {
                    turn_id: turn_id(),
                    text: answer,
                }));
            }
            correction.push(Arc::new(HistoryEntry::User {
                turn_id: turn_id(),
                text: contract::rejected_message(&problem.text()),
                seat_id: None,
            }));
        }
    }
    Err(ApiError::new(
        ErrorCode::InvalidAiJson,
        "the model's answer could not be understood",
    ))
}

/// Why an answer is not returned as it is.
#[derive(Debug, Clone, PartialEq)]
enum Problem {
    /// A tool call the client could not run.
    Unusable(String),
    /// A rule of the reply contract broken.
    Contract(contract::ContractError),
    /// A call the exchange already answered, asked for again.
    Loop,
}

impl Problem {
    /// The problem as quoted to the model.
    fn text(&self) -> String {
        match self {
            Self::Unusable(why) => format!("the model asked for an unusable tool call: {why}"),
            Self::Contract(e) => contract::native_problem(e),
            Self::Loop => {
                "the answer asks again for a tool call this exchange already answered".to_owned()
            }
        }
    }

    /// The answer to the client once the retry did not help: the model's
    /// fault, `502 INVALID_AI_JSON`.
    fn into_error(self) -> ApiError {
        let message = match &self {
            Self::Unusable(_) => self.text(),
            _ => format!("the model broke the reply contract twice: {}", self.text()),
        };
        ApiError::new(ErrorCode::InvalidAiJson, message)
    }
}

/// The model's answer as the client receives it, or why it may not be:
/// in a closing call (`WrapUp`) its tool calls are dropped; otherwise a
/// call it asks for must pass the checks and be new to the exchange, and
/// an answer without calls must keep [`contract::check_narration`].
fn judge(
    registry: &Registry,
    caller: &Caller<'_>,
    conversation: &Conversation,
    kind: RequestKind,
    mut reply: ModelReply,
) -> Result<AssistantMessage, Problem> {
    if kind == RequestKind::WrapUp {
        reply.tool_calls.clear();
    }
    if reply.tool_calls.is_empty() {
        // The one retry is the caller's, for every kind of problem alike:
        // only the contract's verdict is read here.
        match guard::narration(&reply.text, conversation.facts(), false) {
            Narration::Accept => {}
            Narration::SendBack(problem) | Narration::GiveUp(problem) => {
                return Err(Problem::Contract(problem));
            }
        }
    }
    let message = assistant_message(registry, caller, reply)?;
    if message
        .tool_calls
        .iter()
        .any(|c| conversation.answered(&c.tool.name, &c.tool.args))
    {
        return Err(Problem::Loop);
    }
    Ok(message)
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
    /// Assistant messages with tool calls after the last `user` message.
    rounds: usize,
    /// The calls (tool name, arguments as compact JSON) after the last
    /// `user` message, each answered by a tool message.
    calls: Vec<(String, String)>,
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
        let mut turn = TurnId::from("chat_0");
        let mut turns = 0;
        let mut rounds = 0;
        let mut calls: Vec<(String, String)> = Vec::new();
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
                    rounds = 0;
                    calls.clear();
                    turn = TurnId::from(format!("chat_{turns}"));
                    history.push(HistoryEntry::User {
                        turn_id: turn.clone(),
                        text: text(&m.content).map_err(bad)?,
                        seat_id: None,
                    });
                }
                "assistant" => {
                    let tool_calls = m.tool_calls.unwrap_or_default();
                    let content = match &m.content {
                        Value::Null if !tool_calls.is_empty() => None,
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
                    rounds += usize::from(!tool_calls.is_empty());
                    for (j, call) in tool_calls.into_iter().enumerate() {
                        if call.id.as_str().trim().is_empty() || !ids.insert(call.id.clone()) {
                            return Err(bad(format!(
                                "toolCalls[{j}].id must be a non-empty id unique in the message"
                            )));
                        }
                        if !call.tool.args.is_object() {
                            return Err(bad(format!("toolCalls[{j}].tool.args must be an object")));
                        }
                        open.push(call.id.clone());
                        calls.push((call.tool.name.clone(), call.tool.args.to_string()));
                        history.push(HistoryEntry::ToolCall {
                            turn_id: turn.clone(),
                            call_id: CallId::from(call.id.as_str()),
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
                        call_id: CallId::from(id.as_str()),
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
            rounds,
            calls,
        })
    }

    /// Whether the model call to make is the exchange's last (the
    /// `max_iterations`-th, counted as a session's turn counts them) or
    /// the exchange asked for the same call twice: the model then gets no
    /// more tools.
    fn spent(&self, max_iterations: u32) -> bool {
        guard::rounds_spent(self.rounds, max_iterations) || guard::asked_twice(&self.calls)
    }

    /// Whether the exchange already answered this call.
    fn answered(&self, tool: &str, args: &Value) -> bool {
        guard::answered(&self.calls, tool, &args.to_string())
    }

    /// What the reply contract's check must know: whether a `move` or
    /// `move_to_zone` result of the exchange reports success
    /// ([`contract::turn_facts`]).
    fn facts(&self) -> TurnFacts {
        contract::turn_facts(&self.history)
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
/// run (unknown tool, arguments that break the schema) is the model's fault
/// ([`Problem::Unusable`]: sent back once, then 502 `INVALID_AI_JSON`).
fn assistant_message(
    registry: &Registry,
    caller: &Caller<'_>,
    reply: ModelReply,
) -> Result<AssistantMessage, Problem> {
    let mut ids = HashSet::new();
    let mut tool_calls = Vec::with_capacity(reply.tool_calls.len());
    for (i, call) in reply.tool_calls.into_iter().enumerate() {
        let args = registry
            .prepare(&call.name, RawArgs::Text(call.arguments), caller)
            .map_err(|e| Problem::Unusable(e.message))?;
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
                    text: "roll 2d6".into(),
                    seat_id: None,
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
                    text: "again".into(),
                    seat_id: None,
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

    /// A tool round: an assistant message asking for `roll_dice` with
    /// `dice`, and its result.
    fn round(id: &str, dice: &str, result: Value) -> [Value; 2] {
        [
            json!({"role": "assistant", "content": null, "toolCalls": [
                {"id": id, "tool": {"name": "roll_dice", "args": {"dice": dice, "reason": "luck"}}}]}),
            json!({"role": "tool", "toolCallId": id, "content": result}),
        ]
    }

    #[test]
    fn rounds_and_repeats_are_counted_after_the_last_user_message() {
        let mut messages = vec![json!({"role": "user", "content": "roll"})];
        for i in 0..3 {
            messages.extend(round(
                &format!("a{i}"),
                &format!("{}d6", i + 1),
                json!({"total": 3}),
            ));
        }
        messages.push(json!({"role": "user", "content": "again"}));
        for i in 0..2 {
            messages.extend(round(
                &format!("b{i}"),
                &format!("{}d8", i + 1),
                json!({"total": 3}),
            ));
        }
        let c = Conversation::parse(&messages).unwrap();
        assert_eq!(
            c.rounds, 2,
            "the rounds before the last user message do not count"
        );
        // The next model call is the third: the last of three closes.
        assert!(!c.spent(4) && c.spent(3));
        assert!(c.answered("roll_dice", &json!({"dice": "2d8", "reason": "luck"})));
        assert!(
            !c.answered("roll_dice", &json!({"dice": "2d6", "reason": "luck"})),
            "an earlier exchange"
        );
        // The same call answered twice in the exchange is a loop.
        messages.extend(round("b9", "1d8", json!({"total": 1})));
        let c = Conversation::parse(&messages).unwrap();
        assert!(c.spent(8));
    }

    #[test]
    fn a_loop_or_spent_rounds_get_no_tools_and_silence_is_sent_back() {
        let registry = Registry::builtin().unwrap();
        let names = allowlist(&registry, None).unwrap();
        let caller = Caller::sessionless(Role::GameMaster, &names);
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        messages.extend(round("c1", "1d20", json!({"total": 4})));
        let c = Conversation::parse(&messages).unwrap();
        let again = ModelReply::tools([("roll_dice", r#"{"dice":"1d20","reason":"luck"}"#)]);
        let judged = |kind, reply| judge(&registry, &caller, &c, kind, reply);
        assert_eq!(judged(RequestKind::Step, again.clone()), Err(Problem::Loop));
        // In a closing call the calls are dropped: text alone goes back.
        let closing = ModelReply {
            text: "The die shows 4.".into(),
            ..again.clone()
        };
        let m = judged(RequestKind::WrapUp, closing).unwrap();
        assert!(m.tool_calls.is_empty());
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "assistant", "content": "The die shows 4."}),
            "no toolCalls key at all"
        );
        assert_eq!(
            judged(RequestKind::WrapUp, again),
            Err(Problem::Contract(contract::ContractError::EmptyNarration))
        );
        assert!(matches!(
            judged(
                RequestKind::Step,
                ModelReply::narrate("You enter the vault.")
            ),
            Err(Problem::Contract(
                contract::ContractError::ClaimedMove { .. }
            ))
        ));
        assert!(matches!(
            judged(RequestKind::Step, ModelReply::tools([("roll_dice", "{}")])),
            Err(Problem::Unusable(_))
        ));
        // A move the front end reports as done makes the claim true; one
        // it reports as failed does not.
        for (result, ok) in [
            (json!({"success": true, "message": "moved"}), true),
            (json!({"success": false, "message": "Error: locked"}), false),
        ] {
            let c = Conversation::parse(&[
                json!({"role": "user", "content": "go"}),
                json!({"role": "assistant", "content": null, "toolCalls": [
                    {"id": "m1", "tool": {"name": "move", "args": {"to_area_id": "vault"}}}]}),
                json!({"role": "tool", "toolCallId": "m1", "content": result}),
            ])
            .unwrap();
            let judged = judge(
                &registry,
                &caller,
                &c,
                RequestKind::Step,
                ModelReply::narrate("You enter the vault."),
            );
            assert_eq!(judged.is_ok(), ok, "{judged:?}");
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
            let e = assistant_message(&registry, &caller, bad.clone())
                .unwrap_err()
                .into_error();
            assert_eq!(e.code, ErrorCode::InvalidAiJson, "{bad:?}");
            // Said once, with why.
            assert_eq!(
                e.message.matches("unusable tool call").count(),
                1,
                "{}",
                e.message
            );
        }
    }
}
