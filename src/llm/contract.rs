//! The JSON reply contract, for OpenAI-compatible models without native tool
//! calling.
//!
//! Such a model gets no `tools` field. Instead the system prompt (see
//! [`contract_prompt`]) tells it to answer every message with exactly one
//! JSON object:
//!
//! ```text
//! {"assistant_text": string, "dialog_type": string,
//!  "tool_calls": [{"id": string, "tool": string, "args": object}]}
//! ```
//!
//! [`parse_reply`] reads such an answer into a [`ModelReply`] and enforces
//! the rules the model was given:
//!
//! 1. The answer is one JSON object. Surrounding whitespace and one Markdown
//!    code fence around it are tolerated; any other text is an error.
//! 2. `assistant_text` is a required string; `dialog_type` is one of
//!    [`DIALOG_TYPES`] (default `narration`); `tool_calls` is an array
//!    (default `[]`) of `{"id", "tool", "args"}` objects, where `args` is an
//!    object and ids are unique (a missing id becomes `call_<position>`).
//! 3. Movement happens only through the `move` tool; when the destination is
//!    unclear the model calls `move_options` and says nothing moved yet.
//! 4. An answer without tool calls has non-empty text that does not claim a
//!    move (see [`MOVE_CLAIM_PHRASES`]) unless a move already succeeded in
//!    this turn.
//! 5. A wrap-up answer (the turn hit its loop limit) has no tool calls.
//!
//! Narration alone never changes the game state; tools are the only way.
//! When an answer breaks a rule, the [`ContractError`] is quoted back to the
//! model by [`corrective_message`] for one retry. [`history_messages`]
//! renders the conversation as plain `user`/`assistant` messages in the
//! same format, so the model sees its earlier calls the way it must write
//! them.

use std::collections::HashSet;
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;

use serde::Serialize;
use serde_json::{Map, Value};

use super::history::{Step, steps};
use super::{ModelReply, ModelToolCall};
use crate::game::HistoryEntry;
use crate::ids::CallId;

/// The allowed values of `dialog_type`; the first one is the default.
pub const DIALOG_TYPES: &[&str] = &["narration", "scene_description", "dialogue", "system_note"];

/// The `dialog_type` used when an answer gives none.
pub const DEFAULT_DIALOG_TYPE: &str = "narration";

/// Phrases that claim a completed move, matched case-insensitively in
/// `assistant_text` (English ones must start at a word boundary). Narration
/// without tool calls may contain them only after a move succeeded in the
/// same turn.
pub const MOVE_CLAIM_PHRASES: &[&str] = &[
    "you move to",
    "you moved to",
    "you walk into",
    "you walked into",
    "you step into",
    "you stepped into",
    "you arrive",
    "you enter",
    "you go to",
    "you went to",
    "you head into",
    "you headed into",
    "you travel to",
    "you traveled to",
    "you travelled to",
    "you reach the",
    "you reached",
    "you make your way",
    "you made your way",
    "你来到",
    "你走进",
    "你进入",
    "你到达",
    "你抵达",
    "你移动到",
    "你前往",
];

/// The tools whose success moves a character.
const MOVE_TOOLS: &[&str] = &["move", "move_to_zone"];

/// The shape of an answer, written once for the prompt and the corrective
/// message.
const FORMAT_LINE: &str = r#"{"assistant_text": string, "dialog_type": string, "tool_calls": [{"id": string, "tool": string, "args": object}]}"#;

/// The examples shown in the prompt, as `(situation, answer)` pairs. Every
/// answer is valid for its situation: the last two assume a move succeeded
/// earlier in the turn, the others assume nothing.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "The player says \"go to the market\"; the active character is hero_1 and area_market is reachable.",
        r#"{"assistant_text": "", "dialog_type": "narration", "tool_calls": [{"id": "call_1", "tool": "move", "args": {"actor_id": "hero_1", "to_area_id": "area_market"}}]}"#,
    ),
    (
        "The player (active character hero_1) says \"let's get out of here\" without saying where to.",
        r#"{"assistant_text": "No movement has happened yet; first I check which places are reachable from here.", "dialog_type": "system_note", "tool_calls": [{"id": "call_1", "tool": "move_options", "args": {"actor_id": "hero_1"}}]}"#,
    ),
    (
        "The player tries to pick the lock of the chest; chance decides.",
        r#"{"assistant_text": "", "dialog_type": "narration", "tool_calls": [{"id": "call_1", "tool": "roll_dice", "args": {"dice": "1d20+2", "reason": "pick the lock"}}]}"#,
    ),
    (
        "The player looks around the tavern; nothing in the game state needs to change.",
        r#"{"assistant_text": "Rain drums on the shutters. By the hearth an old sailor mends a net, and the innkeeper polishes the same mug for the third time.", "dialog_type": "scene_description", "tool_calls": []}"#,
    ),
    (
        "The player asks the innkeeper about the rumours; no tool is needed.",
        r#"{"assistant_text": "\"Lights on the old tower again,\" the innkeeper mutters. \"Nobody who went up there came back the same.\"", "dialog_type": "dialogue", "tool_calls": []}"#,
    ),
    (
        "The tool results show that the move to area_market succeeded earlier in this turn; now narrate the outcome.",
        r#"{"assistant_text": "You make your way through the crowd and arrive at the market, loud with hawkers and the smell of fried fish.", "dialog_type": "narration", "tool_calls": []}"#,
    ),
    (
        "The player wrote in Chinese and the move to the harbour succeeded; narrate in Chinese.",
        r#"{"assistant_text": "你来到港口，咸湿的海风扑面而来，渔船在码头边轻轻摇晃。", "dialog_type": "narration", "tool_calls": []}"#,
    ),
];

/// Why an answer breaks the contract. The text is sent back to the model,
/// so it names the field, what was expected and what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContractError {
    /// The answer held nothing but whitespace.
    #[error("the answer was empty; expected one JSON object {}", FORMAT_LINE)]
    Empty,
    /// A Markdown code fence was opened but not closed.
    #[error(
        "the answer opens a ``` code fence but never closes it; send the JSON object alone, \
         or close the fence with ```"
    )]
    UnclosedFence,
    /// The answer is not JSON at all.
    #[error(
        "the answer is not valid JSON ({detail}); expected one JSON object {}",
        FORMAT_LINE
    )]
    NotJson { detail: String },
    /// The JSON stops before the object is closed.
    #[error(
        "the JSON object is incomplete: the answer ends before the object is closed ({detail}); \
         send the whole object"
    )]
    Truncated { detail: String },
    /// Prose or other text comes before the object.
    #[error(
        "found text before the JSON object: {found:?}; the answer must start with '{{' and \
         contain only the object"
    )]
    TextBeforeObject { found: String },
    /// Something follows the object's closing brace.
    #[error(
        "found text after the JSON object: {found:?}; nothing may follow the object's closing '}}'"
    )]
    TrailingText { found: String },
    /// The answer is JSON, but not an object.
    #[error("the answer is {found}; expected one JSON object {}", FORMAT_LINE)]
    NotAnObject { found: String },
    /// A required field is absent.
    #[error("`{field}` is missing; expected {expected}")]
    MissingField {
        field: String,
        expected: &'static str,
    },
    /// A field has the wrong JSON type.
    #[error("`{field}` must be {expected}, found {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: String,
    },
    /// A tool call names no tool.
    #[error("`tool_calls[{index}].tool` is empty; expected the name of a tool from the catalogue")]
    EmptyToolName { index: usize },
    /// `dialog_type` is not one of [`DIALOG_TYPES`].
    #[error(
        "`dialog_type` is {found:?}, which is not allowed; use one of {}",
        allowed_dialog_types()
    )]
    UnknownDialogType { found: String },
    /// Two tool calls share an id.
    #[error(
        "`tool_calls[{second}].id` is {id:?}, already used by tool_calls[{first}]; every call \
         needs its own id (or leave id out to have one generated)"
    )]
    DuplicateCallId {
        id: String,
        first: usize,
        second: usize,
    },
    /// No tool calls and no text: the answer says nothing.
    #[error(
        "`assistant_text` is empty and `tool_calls` is empty; write the narration in \
         assistant_text, or call a tool"
    )]
    EmptyNarration,
    /// Narration claims a move that no tool made.
    #[error(
        "`assistant_text` says a move happened (\"{phrase}\") but no move succeeded in this turn; \
         narration never moves anyone: call the `move` tool (or `move_options` if the destination \
         is unclear) with assistant_text empty or a short plan note"
    )]
    ClaimedMove { phrase: String },
    /// Tool calls were asked for in a wrap-up answer.
    #[error(
        "`tool_calls` has {count} call(s) but tools are no longer available this turn; answer \
         with \"tool_calls\": [] and narrate from the tool results you already have"
    )]
    ToolsInWrapUp { count: usize },
}

/// The allowed dialog types, quoted and comma-separated.
fn allowed_dialog_types() -> String {
    DIALOG_TYPES
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the parser must know about the turn so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnFacts {
    /// A move tool already succeeded in this turn.
    pub moved: bool,
    /// The turn hit its loop limit: the model must narrate without tools.
    pub wrap_up: bool,
}

/// Facts read from the history: `moved` is true when the current turn (the
/// entries after the last `User` entry, or the whole history if there is
/// none) holds a result of `move` or `move_to_zone` whose content is a JSON
/// object that is not a failure (see [`is_success`]). `wrap_up` is always
/// false here; the caller sets it.
pub fn turn_facts<E: AsRef<HistoryEntry>>(history: &[E]) -> TurnFacts {
    let start = history
        .iter()
        .rposition(|e| matches!(e.as_ref(), HistoryEntry::User { .. }))
        .map_or(0, |i| i + 1);
    let moved = history[start..].iter().any(|e| match e.as_ref() {
        HistoryEntry::ToolResult { tool, content, .. } => is_move_tool(tool) && is_success(content),
        _ => false,
    });
    TurnFacts {
        moved,
        wrap_up: false,
    }
}

/// Whether a tool result's content is a successful result object. A
/// failure is a session's refusal (`"status"` `"error"` or `"rejected"`
/// with an `"error_code"`) or what a front end running the tools itself
/// reports (`"success": false`, or an `"error"` field that is not null or
/// false).
fn is_success(content: &str) -> bool {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(content) else {
        return false;
    };
    let refused = matches!(
        obj.get("status").and_then(Value::as_str),
        Some("error" | "rejected")
    ) && obj.contains_key("error_code");
    let reported = obj.get("success") == Some(&Value::Bool(false))
        || obj
            .get("error")
            .is_some_and(|e| !matches!(e, Value::Null | Value::Bool(false)));
    !refused && !reported
}

/// The contract instructions appended to the game master's system prompt:
/// the reply format, the rules, the tool catalogue (name, description and
/// parameters schema of each tool in `tools`, which is in OpenAI format) and
/// the [`EXAMPLES`]. With `wrap_up`, it also says that tools are no longer
/// available this turn and `tool_calls` must be `[]`.
pub fn contract_prompt(tools: &[Value], wrap_up: bool) -> String {
    let mut p = String::new();
    p.push_str("## Reply format\n");
    p.push_str(
        "This connection has no native tool calling. Answer every message with exactly one JSON \
         object and nothing else: no text before or after it.\n",
    );
    p.push_str(FORMAT_LINE);
    p.push_str("\n\nFields:\n");
    p.push_str(
        "- assistant_text (required, string): what the player reads, in the player's language. \
         It may be \"\" when tool_calls is not empty.\n",
    );
    p.push_str(&format!(
        "- dialog_type (string, default \"{DEFAULT_DIALOG_TYPE}\"): one of {}.\n",
        allowed_dialog_types()
    ));
    p.push_str(
        "- tool_calls (array, default []): the tools to run now, in order. In each call, \"tool\" \
         is a tool name from the catalogue below, \"args\" is a JSON object matching that tool's \
         parameters ({} when it needs none), and \"id\" is a string unique in this answer, \
         such as \"call_1\".\n",
    );
    p.push_str("\nRules:\n");
    p.push_str(
        "1. Only tools change the game state. Narration alone never moves anyone, changes HP or \
         gives items.\n",
    );
    p.push_str(
        "2. To move the player, call the `move` tool, with assistant_text empty or a short plan \
         note. If the destination is unclear, call `move_options` and say that no movement has \
         happened yet.\n",
    );
    p.push_str(&format!(
        "3. Never write that a move happened unless a move tool result in this turn succeeded. \
         Without such a result, assistant_text must not contain phrases like: {}.\n",
        MOVE_CLAIM_PHRASES
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    p.push_str("4. With no tool calls, assistant_text must not be empty.\n");
    p.push_str(
        "5. After your tool calls you receive a user message starting with \"Tool results:\" and \
         a JSON array [{\"id\", \"tool\", \"result\"}]. Read it, then answer again in the same \
         format: more tool_calls, or the final narration with \"tool_calls\": []. A result with \
         \"status\": \"error\" or \"rejected\" failed and changed nothing.\n",
    );
    p.push_str(
        "6. You may wrap the object in one ```json code fence, but nothing else may surround it.\n",
    );

    p.push_str("\n## Tools\n");
    let mut listed = 0;
    for tool in tools {
        let f = tool.get("function").unwrap_or(tool);
        let Some(name) = f.get("name").and_then(Value::as_str) else {
            continue;
        };
        listed += 1;
        p.push_str(&format!("- {name}"));
        if let Some(desc) = f.get("description").and_then(Value::as_str)
            && !desc.trim().is_empty()
        {
            p.push_str(": ");
            p.push_str(desc.trim());
        }
        let params = f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        p.push_str(&format!("\n  parameters: {params}\n"));
    }
    if listed == 0 {
        p.push_str("(no tools are available)\n");
    }

    p.push_str("\n## Examples\n");
    for (situation, answer) in EXAMPLES {
        p.push_str(&format!("Situation: {situation}\nAnswer:\n{answer}\n\n"));
    }

    if wrap_up {
        p.push_str("## This turn: wrap-up\n");
        p.push_str(
            "Tools are no longer available this turn. Answer with \"tool_calls\": [] and a \
             non-empty assistant_text that narrates what happened, based only on the tool results \
             you already have; do not claim anything no tool result confirms.\n",
        );
    }
    p
}

/// Parses and checks one answer against the contract and the turn's facts.
///
/// On success, `text` is `assistant_text` trimmed, each tool call has
/// `name` = `tool` and `arguments` = `args` as compact JSON text, and
/// `dialog_type` is always set. `usage` is left at zero for the caller.
pub fn parse_reply(text: &str, facts: TurnFacts) -> Result<ModelReply, ContractError> {
    let body = strip_fence(text)?;
    let value = parse_single_object(body)?;
    let Value::Object(obj) = value else {
        return Err(ContractError::NotAnObject {
            found: describe(&value),
        });
    };

    let assistant_text = match obj.get("assistant_text") {
        None => {
            return Err(ContractError::MissingField {
                field: "assistant_text".into(),
                expected: "a string (it may be \"\" when there are tool calls)",
            });
        }
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(other) => {
            return Err(ContractError::WrongType {
                field: "assistant_text".into(),
                expected: "a string",
                found: describe(other),
            });
        }
    };

    let dialog_type = match obj.get("dialog_type") {
        None | Some(Value::Null) => DEFAULT_DIALOG_TYPE.to_owned(),
        Some(Value::String(s)) if DIALOG_TYPES.contains(&s.as_str()) => s.clone(),
        Some(Value::String(s)) => {
            return Err(ContractError::UnknownDialogType { found: s.clone() });
        }
        Some(other) => {
            return Err(ContractError::WrongType {
                field: "dialog_type".into(),
                expected: "a string",
                found: describe(other),
            });
        }
    };

    let tool_calls = match obj.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => parse_calls(calls)?,
        Some(other) => {
            return Err(ContractError::WrongType {
                field: "tool_calls".into(),
                expected: "an array of {\"id\", \"tool\", \"args\"} objects",
                found: describe(other),
            });
        }
    };

    if facts.wrap_up && !tool_calls.is_empty() {
        return Err(ContractError::ToolsInWrapUp {
            count: tool_calls.len(),
        });
    }
    if tool_calls.is_empty() {
        check_narration(&assistant_text, facts)?;
    }

    Ok(ModelReply {
        text: assistant_text,
        tool_calls,
        dialog_type: Some(dialog_type),
        ..ModelReply::default()
    })
}

/// The rules a final answer (one with no tool calls) keeps in every mode,
/// the JSON reply contract and native tool calling alike: its text is not
/// empty or whitespace ([`ContractError::EmptyNarration`]), and it claims
/// no move ([`MOVE_CLAIM_PHRASES`]) unless `facts.moved`
/// ([`ContractError::ClaimedMove`]).
pub fn check_narration(text: &str, facts: TurnFacts) -> Result<(), ContractError> {
    if text.trim().is_empty() {
        return Err(ContractError::EmptyNarration);
    }
    if !facts.moved
        && let Some(phrase) = claimed_move(text)
    {
        return Err(ContractError::ClaimedMove {
            phrase: phrase.to_owned(),
        });
    }
    Ok(())
}

/// Whether a successful call of `tool` moves a character (`move`,
/// `move_to_zone`).
pub fn is_move_tool(tool: &str) -> bool {
    MOVE_TOOLS.contains(&tool)
}

/// Removes surrounding whitespace and at most one Markdown code fence
/// (```` ``` ```` or ```` ```json ````).
fn strip_fence(text: &str) -> Result<&str, ContractError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(ContractError::Empty);
    }
    let Some(rest) = trimmed.strip_prefix("```") else {
        return Ok(trimmed);
    };
    // The language tag (`json`, `JSON`, ...), if any.
    let rest = rest
        .trim_start_matches([' ', '\t'])
        .trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    let Some(close) = rest.rfind("```") else {
        return Err(ContractError::UnclosedFence);
    };
    let after = rest[close + 3..].trim();
    if !after.is_empty() {
        return Err(ContractError::TrailingText {
            found: snippet(after),
        });
    }
    let inner = rest[..close].trim();
    if inner.is_empty() {
        return Err(ContractError::Empty);
    }
    Ok(inner)
}

/// Parses `body` as exactly one JSON value, classifying what went wrong.
fn parse_single_object(body: &str) -> Result<Value, ContractError> {
    let mut stream = serde_json::Deserializer::from_str(body).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value)) => {
            let rest = body[stream.byte_offset()..].trim();
            if rest.is_empty() {
                Ok(value)
            } else {
                Err(ContractError::TrailingText {
                    found: snippet(rest),
                })
            }
        }
        Some(Err(e)) => {
            if !body.starts_with(['{', '[', '"'])
                && let Some(at) = body.find('{')
            {
                Err(ContractError::TextBeforeObject {
                    found: snippet(body[..at].trim()),
                })
            } else if e.is_eof() {
                Err(ContractError::Truncated {
                    detail: e.to_string(),
                })
            } else {
                Err(ContractError::NotJson {
                    detail: e.to_string(),
                })
            }
        }
        None => Err(ContractError::Empty),
    }
}

/// Reads the `tool_calls` array.
fn parse_calls(calls: &[Value]) -> Result<Vec<ModelToolCall>, ContractError> {
    // Ids as written, with their position, so generated ids avoid them.
    let mut explicit: Vec<Option<String>> = Vec::with_capacity(calls.len());
    let mut parsed: Vec<(String, String)> = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let Value::Object(call) = call else {
            return Err(ContractError::WrongType {
                field: format!("tool_calls[{i}]"),
                expected: "an object {\"id\": string, \"tool\": string, \"args\": object}",
                found: describe(call),
            });
        };
        let tool = match call.get("tool") {
            None => {
                return Err(ContractError::MissingField {
                    field: format!("tool_calls[{i}].tool"),
                    expected: "the tool name, a non-empty string",
                });
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                return Err(ContractError::EmptyToolName { index: i });
            }
            Some(Value::String(s)) => s.trim().to_owned(),
            Some(other) => {
                return Err(ContractError::WrongType {
                    field: format!("tool_calls[{i}].tool"),
                    expected: "the tool name, a non-empty string",
                    found: describe(other),
                });
            }
        };
        let args = match call.get("args") {
            None => {
                return Err(ContractError::MissingField {
                    field: format!("tool_calls[{i}].args"),
                    expected: "a JSON object of arguments ({} when the tool needs none)",
                });
            }
            Some(args @ Value::Object(_)) => args.to_string(),
            Some(other) => {
                return Err(ContractError::WrongType {
                    field: format!("tool_calls[{i}].args"),
                    expected: "a JSON object of arguments (not a string of JSON; {} when the tool \
                               needs none)",
                    found: describe(other),
                });
            }
        };
        let id = match call.get("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(ContractError::WrongType {
                    field: format!("tool_calls[{i}].id"),
                    expected: "a string",
                    found: describe(other),
                });
            }
        };
        if let Some(id) = &id
            && let Some(first) = explicit.iter().position(|e| e.as_ref() == Some(id))
        {
            return Err(ContractError::DuplicateCallId {
                id: id.clone(),
                first,
                second: i,
            });
        }
        explicit.push(id);
        parsed.push((tool, args));
    }

    let mut used: HashSet<String> = explicit.iter().flatten().cloned().collect();
    Ok(parsed
        .into_iter()
        .zip(explicit)
        .enumerate()
        .map(|(i, ((name, arguments), id))| {
            let id = id.unwrap_or_else(|| {
                // `call_<position>`, unless the answer already uses that id.
                let base = format!("call_{}", i + 1);
                let mut id = base.clone();
                let mut n = 1;
                while used.contains(&id) {
                    n += 1;
                    id = format!("{base}_{n}");
                }
                used.insert(id.clone());
                id
            });
            ModelToolCall {
                id: CallId::from(id),
                name,
                arguments,
            }
        })
        .collect())
}

/// The first phrase of [`MOVE_CLAIM_PHRASES`] found in `text`, if any.
///
/// Every final answer is checked, so the phrases are searched for in one
/// pass over the text (an Aho-Corasick automaton built once) instead of
/// one search per phrase.
fn claimed_move(text: &str) -> Option<&'static str> {
    static PHRASES: LazyLock<Option<AhoCorasick>> =
        LazyLock::new(|| AhoCorasick::new(MOVE_CLAIM_PHRASES).ok());
    let lower = text.to_lowercase();
    let starts_a_word = |phrase: &str, at: usize| {
        // "you" must start a word, so "bayou entered" is no claim.
        !phrase.starts_with(|c: char| c.is_ascii_alphabetic())
            || !lower[..at]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric)
    };
    let Some(phrases) = PHRASES.as_ref() else {
        // The automaton is built from constant phrases and cannot fail;
        // were it to, the search is the same one phrase at a time.
        return MOVE_CLAIM_PHRASES.iter().copied().find(|phrase| {
            lower
                .match_indices(phrase)
                .any(|(at, _)| starts_a_word(phrase, at))
        });
    };
    // The phrase listed first wins, wherever in the text it is.
    phrases
        .find_overlapping_iter(&lower)
        .map(|m| (m.pattern().as_usize(), m.start()))
        .filter(|&(i, at)| starts_a_word(MOVE_CLAIM_PHRASES[i], at))
        .map(|(i, _)| i)
        .min()
        .map(|i| MOVE_CLAIM_PHRASES[i])
}

/// A JSON value's kind for error messages, with a short excerpt of strings.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(s) => format!("a string ({:?})", snippet(s)),
        Value::Array(a) => format!("an array of {} item(s)", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// At most 60 characters of `text`, marked when cut.
fn snippet(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(MAX).collect();
        s.push('…');
        s
    }
}

/// The user message for the single corrective retry: the error, the format
/// and a request for the JSON object alone.
pub fn corrective_message(error: &ContractError) -> String {
    format!(
        "Your previous answer was rejected: {error}.\n\
         Answer again with only one JSON object of the form {FORMAT_LINE}, \
         following the rules of the system prompt. Send only the JSON object, \
         with no text before or after it."
    )
}

/// The user message for the single corrective retry of a model with native
/// tool calling: the same rule as [`corrective_message`] quotes, in words
/// that name no JSON field (such a model writes plain text and calls tools
/// natively).
pub fn native_corrective_message(error: &ContractError) -> String {
    rejected_message(&native_problem(error))
}

/// `error` in words that name no JSON field, for a model with native tool
/// calling.
pub fn native_problem(error: &ContractError) -> String {
    match error {
        ContractError::EmptyNarration => {
            "the answer has no text and calls no tool; write the narration the player reads, \
             or call a tool"
                .to_owned()
        }
        ContractError::ClaimedMove { phrase } => format!(
            "the answer says a move happened (\"{phrase}\") but no move succeeded in this turn; \
             narration never moves anyone: call the `move` tool (or `move_options` if the \
             destination is unclear) instead of narrating the move"
        ),
        other => other.to_string(),
    }
}

/// The corrective message of a model with native tool calling for any
/// `problem` (a rule of [`check_narration`], an unusable tool call).
pub fn rejected_message(problem: &str) -> String {
    format!(
        "Your previous answer was rejected: {problem}.\n\
         Answer again following the rules of the system prompt."
    )
}

/// One answer as written in the contract, with a fixed field order.
#[derive(Serialize)]
struct ContractAnswer<'a> {
    assistant_text: &'a str,
    dialog_type: &'a str,
    tool_calls: Vec<ContractCall<'a>>,
}

/// One tool call as written in the contract.
#[derive(Serialize)]
struct ContractCall<'a> {
    id: &'a str,
    tool: &'a str,
    args: Value,
}

/// One tool result as shown to the model.
#[derive(Serialize)]
struct ContractResult<'a> {
    id: &'a str,
    tool: &'a str,
    result: Value,
}

/// Raw JSON text parsed, or kept as a string when it is not JSON.
fn json_or_string(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The history as plain chat messages for a model without native tools:
/// `[{"role": "user" | "assistant", "content": string}]`, never a `tool`
/// role or a `tool_calls` field.
///
/// A run of consecutive tool calls becomes one assistant message holding a
/// contract answer with those calls; the results that follow become one user
/// message, `"Tool results:\n"` and a JSON array of `{"id", "tool",
/// "result"}`. Results of unknown calls and calls without a result are
/// dropped (with their message if it ends up empty). The game master's
/// narration becomes a contract answer without tool calls.
pub fn history_messages<E: AsRef<HistoryEntry>>(history: &[E]) -> Vec<Value> {
    let answer = |text: &str, tool_calls: Vec<ContractCall<'_>>| {
        let answer = ContractAnswer {
            assistant_text: text,
            dialog_type: DEFAULT_DIALOG_TYPE,
            tool_calls,
        };
        serde_json::json!({"role": "assistant", "content": crate::json::text(&answer)})
    };
    let mut out = Vec::new();
    for step in steps(history) {
        match step {
            Step::User(text) => out.push(serde_json::json!({"role": "user", "content": text})),
            Step::Assistant(text) => out.push(answer(text, Vec::new())),
            Step::Calls(exchanges) => {
                let calls = exchanges
                    .iter()
                    .map(|e| ContractCall {
                        id: e.call_id,
                        tool: e.tool,
                        args: json_or_string(e.arguments),
                    })
                    .collect();
                out.push(answer("", calls));
                let results: Vec<ContractResult<'_>> = exchanges
                    .iter()
                    .map(|e| ContractResult {
                        id: e.call_id,
                        tool: e.tool,
                        result: json_or_string(e.content),
                    })
                    .collect();
                out.push(serde_json::json!({
                    "role": "user",
                    "content": format!("Tool results:\n{}", crate::json::text(&results)),
                }));
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const NONE: TurnFacts = TurnFacts {
        moved: false,
        wrap_up: false,
    };
    const MOVED: TurnFacts = TurnFacts {
        moved: true,
        wrap_up: false,
    };
    const WRAP_UP: TurnFacts = TurnFacts {
        moved: false,
        wrap_up: true,
    };

    fn tools() -> Vec<Value> {
        ["move", "move_options", "roll_dice", "move_to_zone"]
            .iter()
            .map(|name| {
                json!({"type": "function", "function": {
                    "name": name,
                    "description": format!("the {name} tool"),
                    "parameters": {"type": "object", "properties": {"actor_id": {"type": "string"}}},
                }})
            })
            .collect()
    }

    fn err(text: &str, facts: TurnFacts) -> ContractError {
        parse_reply(text, facts).expect_err(text)
    }

    fn user(text: &str) -> HistoryEntry {
        HistoryEntry::User {
            turn_id: "t".into(),
            text: text.into(),
            seat_id: None,
        }
    }

    fn call(id: &str, tool: &str, arguments: &str) -> HistoryEntry {
        HistoryEntry::ToolCall {
            turn_id: "t".into(),
            call_id: id.into(),
            tool: tool.into(),
            arguments: arguments.into(),
        }
    }

    fn result(id: &str, tool: &str, content: &str) -> HistoryEntry {
        HistoryEntry::ToolResult {
            turn_id: "t".into(),
            call_id: id.into(),
            tool: tool.into(),
            content: content.into(),
        }
    }

    fn assistant(text: &str) -> HistoryEntry {
        HistoryEntry::Assistant {
            turn_id: "t".into(),
            text: text.into(),
        }
    }

    const MOVE_OK: &str = r#"{"actor_id":"hero_1","from_area_id":"a","to_area_id":"b","area":{},"reachable_area_ids":[]}"#;
    const MOVE_FAILED: &str = r#"{"status":"error","reason":"not_found","error_code":"ZONE_NOT_FOUND","message":"no area"}"#;
    const MOVE_REJECTED: &str = r#"{"status":"rejected","reason":"permission_denied","error_code":"PERMISSION_DENIED","message":"downed"}"#;

    #[test]
    fn every_example_parses_for_its_situation() {
        // The situations that follow a successful move, as EXAMPLES says.
        let moved = |situation: &str| situation.contains("succeeded");
        assert!(EXAMPLES.len() >= 5);
        for (situation, answer) in EXAMPLES {
            let facts = TurnFacts {
                moved: moved(situation),
                wrap_up: false,
            };
            let reply = parse_reply(answer, facts)
                .unwrap_or_else(|e| panic!("example {situation:?} does not parse: {e}"));
            assert!(reply.dialog_type.is_some());
        }
        // The kinds of example the prompt must show.
        let replies: Vec<ModelReply> = EXAMPLES
            .iter()
            .map(|(s, a)| {
                parse_reply(
                    a,
                    TurnFacts {
                        moved: moved(s),
                        wrap_up: false,
                    },
                )
                .unwrap()
            })
            .collect();
        let has = |f: &dyn Fn(&ModelReply) -> bool| replies.iter().any(f);
        assert!(has(&|r| r.text.is_empty()
            && r.tool_calls.len() == 1
            && r.tool_calls[0].name == "move"));
        assert!(has(&|r| r.tool_calls.len() == 1
            && r.tool_calls[0].name == "move_options"
            && r.text.contains("No movement has happened yet")));
        assert!(has(&|r| r.tool_calls.iter().any(|c| c.name == "roll_dice")));
        assert!(has(
            &|r| r.tool_calls.is_empty() && claimed_move(&r.text).is_none()
        ));
        // The narration after a move claims it, and is only valid then.
        let after_move: Vec<&str> = EXAMPLES
            .iter()
            .filter(|(s, _)| moved(s))
            .map(|(_, a)| *a)
            .collect();
        assert!(!after_move.is_empty());
        for answer in after_move {
            assert!(matches!(
                err(answer, NONE),
                ContractError::ClaimedMove { .. }
            ));
        }
    }

    #[test]
    fn the_prompt_shows_format_rules_tools_and_examples() {
        let tools = tools();
        let prompt = contract_prompt(&tools, false);
        for (_, answer) in EXAMPLES {
            assert!(prompt.contains(answer), "missing example {answer}");
        }
        for name in ["move", "move_options", "roll_dice", "move_to_zone"] {
            assert!(prompt.contains(&format!("- {name}: the {name} tool")));
        }
        assert!(prompt.contains(r#""properties":{"actor_id":{"type":"string"}}"#));
        assert!(prompt.contains(FORMAT_LINE));
        for t in DIALOG_TYPES {
            assert!(prompt.contains(t));
        }
        assert!(prompt.contains("你来到"));
        assert!(!prompt.contains("no longer available"));

        let wrap = contract_prompt(&tools, true);
        assert!(wrap.contains("Tools are no longer available this turn"));
        assert!(wrap.contains(r#""tool_calls": []"#));
        assert!(contract_prompt(&[], false).contains("(no tools are available)"));
    }

    #[test]
    fn tool_calls_with_empty_text() {
        let reply = parse_reply(
            r#"{"assistant_text": "", "dialog_type": "narration", "tool_calls": [
                {"id": "a", "tool": "move", "args": {"actor_id": "hero_1", "to_area_id": "area_2"}},
                {"id": "b", "tool": "roll_dice", "args": {"dice": "1d20"}}]}"#,
            NONE,
        )
        .unwrap();
        assert_eq!(reply.text, "");
        assert_eq!(reply.dialog_type.as_deref(), Some("narration"));
        assert_eq!(reply.usage, Default::default());
        assert_eq!(
            reply.tool_calls,
            vec![
                ModelToolCall {
                    id: "a".into(),
                    name: "move".into(),
                    arguments: serde_json::to_string(
                        &json!({"actor_id": "hero_1", "to_area_id": "area_2"})
                    )
                    .unwrap(),
                },
                ModelToolCall {
                    id: "b".into(),
                    name: "roll_dice".into(),
                    arguments: r#"{"dice":"1d20"}"#.into(),
                },
            ]
        );
    }

    #[test]
    fn narration_only_is_trimmed_and_defaults_apply() {
        let reply = parse_reply(
            "  \n{\"assistant_text\": \"  The fire crackles.  \"}\n ",
            NONE,
        )
        .unwrap();
        assert_eq!(reply.text, "The fire crackles.");
        assert!(reply.tool_calls.is_empty());
        assert_eq!(reply.dialog_type.as_deref(), Some("narration"));

        let reply = parse_reply(
            r#"{"assistant_text": "\"Welcome,\" she says.", "dialog_type": "dialogue", "tool_calls": []}"#,
            NONE,
        )
        .unwrap();
        assert_eq!(reply.dialog_type.as_deref(), Some("dialogue"));
    }

    #[test]
    fn one_code_fence_is_tolerated() {
        for text in [
            "```json\n{\"assistant_text\": \"Hi.\", \"tool_calls\": []}\n```",
            "  ```JSON\n{\"assistant_text\": \"Hi.\"}\n```  ",
            "```\n{\"assistant_text\": \"Hi.\"}\n```",
            "```json {\"assistant_text\": \"Hi.\"} ```",
        ] {
            assert_eq!(parse_reply(text, NONE).unwrap().text, "Hi.", "{text}");
        }
        assert_eq!(
            err("```json\n{\"assistant_text\": \"Hi.\"}", NONE),
            ContractError::UnclosedFence
        );
        assert!(matches!(
            err("```json\n{\"assistant_text\": \"Hi.\"}\n```\nHope this helps!", NONE),
            ContractError::TrailingText { found } if found == "Hope this helps!"
        ));
    }

    #[test]
    fn chinese_text_is_kept() {
        let reply = parse_reply(
            r#"{"assistant_text": "雨点敲打着窗户，炉火噼啪作响。", "dialog_type": "scene_description"}"#,
            NONE,
        )
        .unwrap();
        assert_eq!(reply.text, "雨点敲打着窗户，炉火噼啪作响。");
        let reply = parse_reply(
            r#"{"assistant_text": "", "tool_calls": [{"tool": "log_user_event", "args": {"note": "玩家打开了箱子"}}]}"#,
            NONE,
        )
        .unwrap();
        assert_eq!(
            reply.tool_calls[0].arguments,
            r#"{"note":"玩家打开了箱子"}"#
        );
    }

    #[test]
    fn missing_ids_are_generated_by_position() {
        let reply = parse_reply(
            r#"{"assistant_text": "", "tool_calls": [
                {"tool": "move_options", "args": {}},
                {"id": "", "tool": "roll_dice", "args": {"dice": "1d6"}},
                {"id": "mine", "tool": "roll_dice", "args": {"dice": "1d4"}}]}"#,
            NONE,
        )
        .unwrap();
        let ids: Vec<&str> = reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2", "mine"]);
        // A generated id never repeats one the answer wrote.
        let reply = parse_reply(
            r#"{"assistant_text": "", "tool_calls": [
                {"id": "call_2", "tool": "a", "args": {}}, {"tool": "b", "args": {}}]}"#,
            NONE,
        )
        .unwrap();
        assert_eq!(reply.tool_calls[1].id, "call_2_2");
    }

    #[test]
    fn missing_tool_calls_is_empty() {
        let reply = parse_reply(r#"{"assistant_text": "Quiet."}"#, NONE).unwrap();
        assert!(reply.tool_calls.is_empty());
        let reply =
            parse_reply(r#"{"assistant_text": "Quiet.", "tool_calls": null}"#, NONE).unwrap();
        assert!(reply.tool_calls.is_empty());
    }

    #[test]
    fn malformed_answers_are_rejected() {
        assert_eq!(err("   ", NONE), ContractError::Empty);
        assert!(matches!(
            err("The door opens.", NONE),
            ContractError::NotJson { .. }
        ));
        assert!(matches!(
            err(r#"{"assistant_text": "The door op"#, NONE),
            ContractError::Truncated { .. }
        ));
        assert!(matches!(
            err(r#"{"assistant_text": "Hi.", "tool_calls": ["#, NONE),
            ContractError::Truncated { .. }
        ));
        assert!(matches!(
            err(r#"{"assistant_text": "Hi."} I hope that helps."#, NONE),
            ContractError::TrailingText { found } if found == "I hope that helps."
        ));
        assert!(matches!(
            err(
                r#"{"assistant_text": "Hi."}{"assistant_text": "Again."}"#,
                NONE
            ),
            ContractError::TrailingText { .. }
        ));
        assert!(matches!(
            err(r#"Sure! {"assistant_text": "Hi."}"#, NONE),
            ContractError::TextBeforeObject { found } if found == "Sure!"
        ));
        assert!(matches!(
            err(r#"[{"assistant_text": "Hi."}]"#, NONE),
            ContractError::NotAnObject { found } if found.contains("array")
        ));
        assert!(matches!(
            err(r#""Hi.""#, NONE),
            ContractError::NotAnObject { .. }
        ));
    }

    #[test]
    fn field_errors_name_the_field() {
        let e = err(r#"{"tool_calls": []}"#, NONE);
        assert!(
            matches!(&e, ContractError::MissingField { field, .. } if field == "assistant_text")
        );
        assert!(e.to_string().contains("`assistant_text` is missing"));

        let e = err(r#"{"assistant_text": 42}"#, NONE);
        assert!(matches!(&e, ContractError::WrongType { field, .. } if field == "assistant_text"));
        assert!(e.to_string().contains("found a number (42)"), "{e}");

        let e = err(r#"{"assistant_text": null}"#, NONE);
        assert!(matches!(&e, ContractError::WrongType { found, .. } if found == "null"));

        for (args, found) in [
            ("null", "null"),
            ("[1, 2]", "an array"),
            (r#""{\"dice\":\"1d6\"}""#, "a string"),
        ] {
            let text = format!(
                r#"{{"assistant_text": "", "tool_calls": [{{"id": "a", "tool": "roll_dice", "args": {args}}}]}}"#
            );
            let e = err(&text, NONE);
            assert!(
                matches!(&e, ContractError::WrongType { field, found: f, .. }
                    if field == "tool_calls[0].args" && f.starts_with(found)),
                "{e:?}"
            );
        }
        let e = err(
            r#"{"assistant_text": "", "tool_calls": [{"id": "a", "tool": "move_options"}]}"#,
            NONE,
        );
        assert!(
            matches!(&e, ContractError::MissingField { field, .. } if field == "tool_calls[0].args")
        );

        let e = err(
            r#"{"assistant_text": "", "tool_calls": [{"tool": "a", "args": {}}, {"id": "x", "args": {}}]}"#,
            NONE,
        );
        assert!(
            matches!(&e, ContractError::MissingField { field, .. } if field == "tool_calls[1].tool")
        );
        assert_eq!(
            err(
                r#"{"assistant_text": "", "tool_calls": [{"tool": " ", "args": {}}]}"#,
                NONE
            ),
            ContractError::EmptyToolName { index: 0 }
        );
        assert!(matches!(
            err(r#"{"assistant_text": "", "tool_calls": ["move"]}"#, NONE),
            ContractError::WrongType { field, .. } if field == "tool_calls[0]"
        ));
        assert!(matches!(
            err(r#"{"assistant_text": "", "tool_calls": {"tool": "move"}}"#, NONE),
            ContractError::WrongType { field, .. } if field == "tool_calls"
        ));
    }

    #[test]
    fn duplicate_ids_are_rejected() {
        let e = err(
            r#"{"assistant_text": "", "tool_calls": [
                {"id": "a", "tool": "roll_dice", "args": {"dice": "1d6"}},
                {"id": "b", "tool": "roll_dice", "args": {"dice": "1d6"}},
                {"id": "a", "tool": "move_options", "args": {}}]}"#,
            NONE,
        );
        assert_eq!(
            e,
            ContractError::DuplicateCallId {
                id: "a".into(),
                first: 0,
                second: 2
            }
        );
        assert!(e.to_string().contains("tool_calls[2].id"));
    }

    #[test]
    fn empty_narration_without_tools_is_rejected() {
        assert_eq!(
            err(r#"{"assistant_text": "  ", "tool_calls": []}"#, NONE),
            ContractError::EmptyNarration
        );
        assert_eq!(
            err(r#"{"assistant_text": ""}"#, MOVED),
            ContractError::EmptyNarration
        );
    }

    /// The phrase named is the one listed first, wherever the text has
    /// it; an occurrence inside a word is passed over for a later one that
    /// starts a word.
    #[test]
    fn a_claim_names_the_first_listed_phrase_found() {
        assert_eq!(
            claimed_move("You enter the hall, then you move to the door."),
            Some("you move to")
        );
        assert_eq!(
            claimed_move("The bayou entered legend; later you enter."),
            Some("you enter")
        );
        assert_eq!(claimed_move("天黑了，你进入洞穴。"), Some("你进入"));
        assert_eq!(claimed_move("The bayou entered legend."), None);
        assert_eq!(claimed_move(""), None);
    }

    #[test]
    fn claimed_moves_need_a_successful_move() {
        for text in [
            "You walk into the dusty library.",
            "YOU ARRIVE at the gates.",
            "At last you reached the summit.",
            "You entered the cave.",
            "你来到了集市。",
            "于是你进入洞穴。",
        ] {
            let answer = json!({"assistant_text": text, "tool_calls": []}).to_string();
            let e = err(&answer, NONE);
            assert!(matches!(e, ContractError::ClaimedMove { .. }), "{text}");
            assert!(e.to_string().contains("`move`"));
            assert_eq!(parse_reply(&answer, MOVED).unwrap().text, text);
        }
        // Not claims: no phrase, or the phrase inside another word.
        for text in [
            "You could go to the market or the docks.",
            "The bayou entered legend long ago.",
            "你想去哪里？",
        ] {
            let answer = json!({"assistant_text": text}).to_string();
            assert!(parse_reply(&answer, NONE).is_ok(), "{text}");
        }
        // A plan note next to a move call is not checked.
        let answer = r#"{"assistant_text": "You head into the alley.", "tool_calls": [{"tool": "move", "args": {"actor_id": "h", "to_area_id": "alley"}}]}"#;
        assert!(parse_reply(answer, NONE).is_ok());
    }

    #[test]
    fn wrap_up_forbids_tool_calls() {
        let answer = r#"{"assistant_text": "", "tool_calls": [{"tool": "roll_dice", "args": {"dice": "1d6"}}]}"#;
        assert!(parse_reply(answer, NONE).is_ok());
        assert_eq!(
            err(answer, WRAP_UP),
            ContractError::ToolsInWrapUp { count: 1 }
        );
        let narration = r#"{"assistant_text": "The night closes in.", "tool_calls": []}"#;
        assert!(parse_reply(narration, WRAP_UP).is_ok());
    }

    #[test]
    fn unknown_dialog_type_lists_the_allowed_ones() {
        let e = err(
            r#"{"assistant_text": "Hi.", "dialog_type": "monologue"}"#,
            NONE,
        );
        assert_eq!(
            e,
            ContractError::UnknownDialogType {
                found: "monologue".into()
            }
        );
        let text = e.to_string();
        for t in DIALOG_TYPES {
            assert!(text.contains(&format!("\"{t}\"")), "{text}");
        }
        assert!(matches!(
            err(r#"{"assistant_text": "Hi.", "dialog_type": 3}"#, NONE),
            ContractError::WrongType { field, .. } if field == "dialog_type"
        ));
    }

    #[test]
    fn turn_facts_see_only_successful_moves_of_this_turn() {
        let move_call = call("c1", "move", r#"{"actor_id":"h","to_area_id":"b"}"#);
        let ok = vec![user("go"), move_call.clone(), result("c1", "move", MOVE_OK)];
        assert_eq!(
            turn_facts(&ok),
            TurnFacts {
                moved: true,
                wrap_up: false
            }
        );
        let zone = vec![
            user("travel"),
            call("c1", "move_to_zone", "{}"),
            result(
                "c1",
                "move_to_zone",
                r#"{"to_zone_id":"zone_1_0_0","minutes":30}"#,
            ),
        ];
        assert!(turn_facts(&zone).moved);

        for failure in [MOVE_FAILED, MOVE_REJECTED, "not json", "[]"] {
            let h = vec![user("go"), move_call.clone(), result("c1", "move", failure)];
            assert!(!turn_facts(&h).moved, "{failure}");
        }
        // A success in an earlier turn does not count.
        let earlier = vec![
            user("go"),
            move_call.clone(),
            result("c1", "move", MOVE_OK),
            assistant("You arrive."),
            user("look around"),
        ];
        assert!(!turn_facts(&earlier).moved);
        // Other tools' successes do not count.
        let other = vec![
            user("where?"),
            call("c1", "move_options", "{}"),
            result("c1", "move_options", r#"{"options":[]}"#),
        ];
        assert!(!turn_facts(&other).moved);
        assert_eq!(turn_facts::<HistoryEntry>(&[]), TurnFacts::default());
    }

    fn content(message: &Value) -> &str {
        message["content"].as_str().unwrap()
    }

    fn parsed_results(message: &Value) -> Value {
        let text = content(message).strip_prefix("Tool results:\n").unwrap();
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn history_renders_calls_and_results_as_plain_messages() {
        let history = vec![
            user("I pick the lock, then look for a way out"),
            call("c1", "roll_dice", r#"{"dice":"1d20"}"#),
            call("c2", "move_options", "{}"),
            result("c1", "roll_dice", r#"{"total":17}"#),
            result("c2", "move_options", r#"{"options":["area_2"]}"#),
            assistant("The lock clicks open. 门开了。"),
        ];
        let messages = history_messages(&history);
        assert_eq!(messages.len(), 4);
        assert_eq!(
            messages[0],
            json!({"role": "user", "content": "I pick the lock, then look for a way out"})
        );

        assert_eq!(messages[1]["role"], "assistant");
        assert_eq!(
            content(&messages[1]),
            r#"{"assistant_text":"","dialog_type":"narration","tool_calls":[{"id":"c1","tool":"roll_dice","args":{"dice":"1d20"}},{"id":"c2","tool":"move_options","args":{}}]}"#
        );
        // What the model is shown is itself a valid answer.
        assert_eq!(
            parse_reply(content(&messages[1]), NONE)
                .unwrap()
                .tool_calls
                .len(),
            2
        );

        assert_eq!(messages[2]["role"], "user");
        assert_eq!(
            parsed_results(&messages[2]),
            json!([
                {"id": "c1", "tool": "roll_dice", "result": {"total": 17}},
                {"id": "c2", "tool": "move_options", "result": {"options": ["area_2"]}},
            ])
        );

        assert_eq!(messages[3]["role"], "assistant");
        assert_eq!(
            content(&messages[3]),
            r#"{"assistant_text":"The lock clicks open. 门开了。","dialog_type":"narration","tool_calls":[]}"#
        );
        for m in &messages {
            let obj = m.as_object().unwrap();
            assert_eq!(obj.len(), 2, "{m}");
            assert!(m["role"] == "user" || m["role"] == "assistant");
            assert!(m["content"].is_string());
            assert!(obj.get("tool_calls").is_none());
        }
    }

    #[test]
    fn orphan_results_and_unanswered_calls_are_dropped() {
        let history = vec![
            user("go"),
            result("ghost", "move", MOVE_OK),
            call("c1", "move", "not json"),
            call("c2", "roll_dice", r#"{"dice":"1d6"}"#),
            result("c1", "move", MOVE_FAILED),
            result("c9", "move", MOVE_OK),
            result("c1", "move", MOVE_OK),
            user("again"),
            call("c3", "move_options", "{}"),
            assistant("Nothing happens."),
        ];
        let messages = history_messages(&history);
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user", "user", "assistant"]);
        assert!(roles.iter().all(|r| *r != "tool"));

        // c2 got no result: only c1 stays, with its raw arguments as a string.
        let calls: Value = serde_json::from_str(content(&messages[1])).unwrap();
        assert_eq!(
            calls["tool_calls"],
            json!([{"id": "c1", "tool": "move", "args": "not json"}])
        );
        // The orphan c9, the ghost and the second c1 result are gone.
        let results = parsed_results(&messages[2]);
        assert_eq!(results.as_array().unwrap().len(), 1);
        assert_eq!(results[0]["id"], "c1");
        assert_eq!(results[0]["result"]["status"], "error");
        // The unanswered c3 left no message at all.
        assert_eq!(content(&messages[3]), "again");
        assert!(content(&messages[4]).contains("Nothing happens."));
    }

    #[test]
    fn a_new_call_run_starts_a_new_group() {
        let history = vec![
            user("go"),
            call("c1", "move_options", "{}"),
            result("c1", "move_options", "plain text"),
            call("c2", "move", "{}"),
            result("c2", "move", MOVE_OK),
        ];
        let messages = history_messages(&history);
        assert_eq!(messages.len(), 5);
        assert_eq!(parsed_results(&messages[2])[0]["result"], "plain text");
        assert_eq!(parsed_results(&messages[4])[0]["id"], "c2");
    }

    #[test]
    fn one_check_serves_both_modes() {
        // Silent answers and claimed moves fail the same way whether the
        // text came from the JSON contract or a native answer.
        assert_eq!(
            check_narration(" \n ", MOVED),
            Err(ContractError::EmptyNarration)
        );
        assert_eq!(
            check_narration("You arrive at the gate.", NONE),
            Err(ContractError::ClaimedMove {
                phrase: "you arrive".into()
            })
        );
        assert_eq!(check_narration("You arrive at the gate.", MOVED), Ok(()));
        assert_eq!(check_narration("Where to?", NONE), Ok(()));
        for text in ["", "You enter the hall."] {
            let native = check_narration(text, NONE).unwrap_err();
            let answer = json!({"assistant_text": text, "tool_calls": []}).to_string();
            assert_eq!(err(&answer, NONE), native, "{text:?}");
        }
        assert!(is_move_tool("move") && is_move_tool("move_to_zone"));
        assert!(!is_move_tool("move_options"));
    }

    #[test]
    fn a_front_ends_failed_move_is_no_move() {
        for failure in [
            r#"{"success":false,"message":"Error: the door is locked"}"#,
            r#"{"error":"no such area"}"#,
            r#"{"error":{"code":"X"}}"#,
        ] {
            let h = vec![
                user("go"),
                call("c1", "move", "{}"),
                result("c1", "move", failure),
            ];
            assert!(!turn_facts(&h).moved, "{failure}");
        }
        for success in [r#"{"success":true}"#, r#"{"to":"b","error":null}"#] {
            let h = vec![
                user("go"),
                call("c1", "move", "{}"),
                result("c1", "move", success),
            ];
            assert!(turn_facts(&h).moved, "{success}");
        }
    }

    #[test]
    fn the_native_corrective_message_names_the_rule_without_json_fields() {
        let silent = native_corrective_message(&ContractError::EmptyNarration);
        assert!(silent.contains("no text and calls no tool"), "{silent}");
        let claim = native_corrective_message(&ContractError::ClaimedMove {
            phrase: "you arrive".into(),
        });
        assert!(
            claim.contains("\"you arrive\"") && claim.contains("`move`"),
            "{claim}"
        );
        for m in [silent, claim] {
            assert!(m.starts_with("Your previous answer was rejected: "), "{m}");
            assert!(!m.contains("assistant_text") && !m.contains("JSON"), "{m}");
        }
    }

    #[test]
    fn the_corrective_message_quotes_the_error() {
        for e in [
            ContractError::EmptyNarration,
            ContractError::UnknownDialogType {
                found: "monologue".into(),
            },
            ContractError::ClaimedMove {
                phrase: "你来到".into(),
            },
        ] {
            let message = corrective_message(&e);
            assert!(message.contains(&e.to_string()), "{message}");
            assert!(message.contains(FORMAT_LINE));
            assert!(message.contains("only"));
        }
    }
}
