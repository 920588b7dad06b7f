//! Model providers: what the turn loop asks and what a model answers.
//!
//! Every provider, the built-in offline game master included, goes through
//! [`Provider::complete`], which yields a stream of [`ModelEvent`]s: text
//! deltas as they are written, then one `Done` with the whole reply. The
//! session actor treats all providers the same way.

pub mod contract;
pub mod fallback;
pub mod guard;
pub mod history;
pub mod offline;
pub mod openai;
pub mod prune;
pub mod scripted;

use std::sync::Arc;

use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorCode;
use crate::game::HistoryEntry;
use crate::ids::CallId;
pub use crate::ids::Usage;

pub use fallback::WithFallback;
pub use offline::OfflineGameMaster;
pub use openai::OpenAiProvider;
pub use scripted::ScriptedProvider;

/// One request to a model: everything it needs to choose its next step.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// Campaign, rules and instructions.
    pub system: String,
    /// The conversation so far, the current turn included.
    pub messages: Vec<Arc<HistoryEntry>>,
    /// Tool definitions in OpenAI `tools` format, already filtered by the
    /// campaign allowlist and the game master role.
    pub tools: Arc<[Value]>,
    /// The session context: active character, where they stand, the map.
    /// `Null` when there is no session (the stateless chat API). Shared: a
    /// session keeps it between requests while its state is unchanged.
    pub context: Arc<Value>,
    /// What the answer is for.
    pub kind: RequestKind,
    /// The current turn's tool results as values, one per `ToolResult`
    /// entry after the turn's player message and in their order, when the
    /// caller has them (a session's turn does: its calls ran here). Empty
    /// otherwise; a model reads the entries' text either way, and one that
    /// runs in this process may read these instead of parsing it again.
    pub results: Vec<Arc<Value>>,
    /// Ask the fallback model, not the first one: an earlier call of the
    /// same turn fell back (contract §12: the rest of the turn uses it).
    /// Providers without a fallback ignore it.
    pub fallback: bool,
}

impl ModelRequest {
    /// The one way a request is put together, for a session's turn and for
    /// the stateless `/api/chat` alike: `history` is cut to `budget`
    /// estimated tokens (0: no limit), the dropped turns are summarized at
    /// the end of `system`, and a closing call (`WrapUp`) is told to call
    /// no tools.
    pub fn build(
        mut system: String,
        history: Vec<Arc<HistoryEntry>>,
        budget: usize,
        tools: Arc<[Value]>,
        context: Arc<Value>,
        kind: RequestKind,
    ) -> Self {
        let pruned = prune::prune(history, budget);
        if let Some(summary) = pruned.summary {
            system.push_str("\n\n");
            system.push_str(&summary);
            system.push('\n');
        }
        if kind == RequestKind::WrapUp {
            system.push_str(WRAP_UP_NOTE);
        }
        Self {
            system,
            messages: pruned.entries,
            tools,
            context,
            kind,
            results: Vec::new(),
            fallback: false,
        }
    }
}

/// Why the turn loop asks the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestKind {
    /// The next step of a turn: call tools or narrate.
    #[default]
    Step,
    /// The turn hit a loop limit: narrate what happened, call no tools
    /// (`tool_choice: "none"`).
    WrapUp,
    /// Text a tool needs (e.g. zone names), answered as plain JSON; not part
    /// of the conversation.
    Content,
}

/// A tool call as a model asked for it; `arguments` is raw JSON text that may
/// be malformed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelToolCall {
    /// The model's own id; a turn replaces one that is empty, too long or
    /// used before.
    pub id: CallId,
    pub name: String,
    pub arguments: String,
}

/// A model's whole answer to one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelReply {
    pub text: String,
    pub tool_calls: Vec<ModelToolCall>,
    /// How the text should be shown (e.g. `scene_description`, `narration`).
    pub dialog_type: Option<String>,
    pub usage: Usage,
    /// The model that answered (its name as sent to the endpoint, or the
    /// provider's name), set by [`ask`] when the provider did not.
    pub model: Option<Arc<str>>,
    /// Whether the fallback model answered ([`WithFallback`]).
    pub fell_back: bool,
}

impl ModelReply {
    /// A reply that only narrates.
    pub fn narrate(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// A reply that asks for tools, given as `(name, arguments JSON text)`.
    pub fn tools<N: Into<String>, A: Into<String>>(
        calls: impl IntoIterator<Item = (N, A)>,
    ) -> Self {
        Self {
            tool_calls: calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, arguments))| ModelToolCall {
                    id: CallId::from(format!("call_{}", i + 1)),
                    name: name.into(),
                    arguments: arguments.into(),
                })
                .collect(),
            ..Self::default()
        }
    }
}

impl ModelReply {
    /// The reply with U+0000 replaced by U+FFFD in everything a turn
    /// stores or sends (its text, each call's id, name and arguments, the
    /// dialog type): a model's answer is text from outside, and
    /// PostgreSQL's `TEXT` refuses U+0000. Arguments that are JSON are
    /// mended inside their strings too (`"\\u0000"` reads as U+0000).
    pub fn storable(mut self) -> Self {
        use crate::json::{replace_nul, replace_nul_in_text};
        replace_nul(&mut self.text);
        if let Some(d) = self.dialog_type.as_mut() {
            replace_nul(d);
        }
        for call in &mut self.tool_calls {
            if call.id.as_str().contains('\0') {
                let mut id = call.id.as_str().to_owned();
                replace_nul(&mut id);
                call.id = CallId::from(id);
            }
            replace_nul(&mut call.name);
            replace_nul_in_text(&mut call.arguments);
        }
        self
    }
}

/// One step of a model's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// Narrative text as it is written.
    Delta(String),
    /// The whole reply; the stream ends after it.
    Done(ModelReply),
}

impl ModelEvent {
    /// The event as it may be stored ([`ModelReply::storable`]).
    pub fn storable(self) -> Self {
        match self {
            Self::Delta(mut text) => {
                crate::json::replace_nul(&mut text);
                Self::Delta(text)
            }
            Self::Done(reply) => Self::Done(reply.storable()),
        }
    }
}

/// Asks `provider` for `request`: the one way a model's answer comes in,
/// for sessions and the stateless API alike. Whatever the provider (a
/// remote endpoint, a script, the offline game master), what it says
/// comes out storable ([`ModelEvent::storable`]), so no turn writes a
/// string the database refuses.
pub fn ask(
    provider: &dyn Provider,
    request: ModelRequest,
) -> BoxStream<'static, Result<ModelEvent, LlmError>> {
    use futures_util::StreamExt;
    let model: Arc<str> = Arc::from(provider.model());
    provider
        .complete(request)
        .map(move |event| {
            event.map(|e| match e.storable() {
                ModelEvent::Done(mut reply) => {
                    reply.model.get_or_insert_with(|| model.clone());
                    ModelEvent::Done(reply)
                }
                delta => delta,
            })
        })
        .boxed()
}

/// Why a model call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("model did not answer in time")]
    Timeout,
    #[error("model endpoint failed: {0}")]
    Upstream(String),
    #[error("model answer could not be understood: {0}")]
    InvalidReply(String),
}

impl LlmError {
    /// What a client is told: a short reason without the endpoint's URL,
    /// its answer or anything else from upstream (those go to the log).
    pub fn public_message(&self) -> &'static str {
        match self {
            Self::Timeout => "the model did not answer in time",
            Self::Upstream(_) => "the model endpoint did not answer",
            Self::InvalidReply(_) => "the model's answer could not be understood",
        }
    }

    /// The wire code a failure of this kind is reported with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Timeout => ErrorCode::AiTimeout,
            Self::Upstream(_) => ErrorCode::UpstreamError,
            Self::InvalidReply(_) => ErrorCode::InvalidAiJson,
        }
    }
}

/// A model: anything that turns a request into a stream of events.
pub trait Provider: Send + Sync + 'static {
    /// A short name for logs (`offline`, `scripted`, ...).
    fn name(&self) -> &str;
    /// The model's name as `turn_completed` reports it (contract §12):
    /// the name sent to the endpoint, or the provider's own.
    fn model(&self) -> &str {
        self.name()
    }
    /// Whether its tokens count against the budgets (contract §12); the
    /// offline game master's never do.
    fn budgeted(&self) -> bool {
        true
    }
    fn complete(&self, request: ModelRequest) -> BoxStream<'static, Result<ModelEvent, LlmError>>;
    /// Whether this model writes game text on request (zone names, ...);
    /// rule-based models leave that to the procedural generators.
    fn writes_content(&self) -> bool {
        false
    }
    /// Whether this model reads the whole conversation (the system prompt
    /// and the history); a rule-based one reads only the turn at hand, and
    /// is spared building the rest.
    fn reads_conversation(&self) -> bool {
        true
    }
    /// Whether [`Provider::complete`]'s stream is ready to its end as soon
    /// as it is made (a rule-based model in this process, with no wait):
    /// the session then takes the whole answer at once, so a turn's
    /// frames go to the journal together.
    fn answers_at_once(&self) -> bool {
        false
    }
}

/// Reads a model call to its end and gives its whole reply (text streamed
/// along the way is in it).
pub async fn collect_reply(
    mut events: BoxStream<'static, Result<ModelEvent, LlmError>>,
) -> Result<ModelReply, LlmError> {
    use futures_util::StreamExt;
    while let Some(event) = events.next().await {
        if let ModelEvent::Done(reply) = event? {
            return Ok(reply);
        }
    }
    Err(LlmError::Upstream(
        "the model stream ended without an answer".into(),
    ))
}

/// Splits narrative into a few deltas at sentence ends, as a streaming model
/// would send it.
pub fn sentence_deltas(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for ch in text.chars() {
        current.push(ch);
        if matches!(ch, '.' | '!' | '?' | '。' | '！' | '？') {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Added to the system prompt for the last call of a turn that hit a loop
/// limit.
pub const WRAP_UP_NOTE: &str = "\nThis turn has used all the tool calls it may make. Call no tools now: \
     tell the player, in a few sentences, what happened this turn according to the tool results \
     above, and claim nothing the results do not show.\n";

/// The rules every game master prompt carries.
pub const GM_RULES: &str = "Rules:\n\
     - Only tools change the game state; narration alone never moves anyone or changes HP.\n\
     - To move the player, call `move` with the active character and a reachable area id; \
     if the destination is unclear, call `move_options` and do not claim a move.\n\
     - Call tools one at a time; read each result before narrating.\n\
     - When no tool is needed, answer with narrative only.\n";

/// The system prompt of a stateless conversation that brings none.
pub fn stateless_system_prompt() -> String {
    format!(
        "You are the game master of a tabletop role-playing game. Narrate vividly and briefly, \
         in the player's language. The game's tools run on the player's side: ask for them and \
         wait for their results.\n{GM_RULES}"
    )
}

/// The system prompt for a session: who the model is, the campaign, the rules.
pub fn system_prompt(state: &crate::game::GameState) -> String {
    let mut prompt = format!(
        "You are the game master of \"{}\". Narrate vividly and briefly, in the player's language.\n{GM_RULES}",
        state.title
    );
    if !state.lore.is_empty() {
        prompt.push_str("Lore:\n");
        for line in state.lore.iter() {
            prompt.push_str("- ");
            prompt.push_str(line);
            prompt.push('\n');
        }
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_built_one_way_for_sessions_and_the_stateless_api() {
        let turn = |n: usize| {
            let id = crate::ids::TurnId::from(format!("turn_{n}"));
            vec![
                Arc::new(HistoryEntry::User {
                    turn_id: id.clone(),
                    text: format!("question {n} {}", "words ".repeat(40)),
                    seat_id: None,
                }),
                Arc::new(HistoryEntry::Assistant {
                    turn_id: id,
                    text: format!("answer {n} {}", "words ".repeat(40)),
                }),
            ]
        };
        let history: Vec<Arc<HistoryEntry>> = (1..=6).flat_map(turn).collect();
        let build = |budget, kind| {
            ModelRequest::build(
                "SYSTEM".into(),
                history.clone(),
                budget,
                Arc::default(),
                Arc::default(),
                kind,
            )
        };
        // No budget: everything, no summary, no closing note.
        let all = build(0, RequestKind::Step);
        assert_eq!((all.system.as_str(), all.messages.len()), ("SYSTEM", 12));
        // A small budget: the newest turns whole, the rest summarized after
        // the system prompt.
        let cut = build(200, RequestKind::Step);
        assert!(cut.messages.len() < 12 && cut.messages.len() % 2 == 0);
        assert!(cut.system.starts_with("SYSTEM\n\n"), "{}", cut.system);
        assert!(cut.system.len() > "SYSTEM\n\n".len());
        // A closing call says to call no tools, after everything else.
        let closing = build(0, RequestKind::WrapUp);
        assert!(closing.system.ends_with(WRAP_UP_NOTE));
    }

    #[test]
    fn a_reply_is_made_storable() {
        let reply = ModelReply {
            text: "The door\u{0} opens.".into(),
            tool_calls: vec![ModelToolCall {
                id: CallId::from("call\u{0}1"),
                name: "mo\u{0}ve".into(),
                arguments: r#"{"to":"hall\u0000","k\u0000":1}"#.into(),
            }],
            dialog_type: Some("narration\u{0}".into()),
            usage: Usage::default(),
            ..ModelReply::default()
        };
        let ModelEvent::Done(done) = ModelEvent::Done(reply).storable() else {
            panic!("a reply stays a reply");
        };
        assert_eq!(done.text, "The door\u{FFFD} opens.");
        assert_eq!(done.dialog_type.as_deref(), Some("narration\u{FFFD}"));
        let call = &done.tool_calls[0];
        assert_eq!(call.id.as_str(), "call\u{FFFD}1");
        assert_eq!(call.name, "mo\u{FFFD}ve");
        let args: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(
            args,
            serde_json::json!({"to": "hall\u{FFFD}", "k\u{FFFD}": 1})
        );
        assert_eq!(
            ModelEvent::Delta("a\u{0}".into()).storable(),
            ModelEvent::Delta("a\u{FFFD}".into())
        );
        // A reply without U+0000 is left exactly as it was.
        let plain = ModelReply::tools([("move", r#"{"to":"hall"}"#)]);
        assert_eq!(plain.clone().storable(), plain);
    }

    #[test]
    fn deltas_join_back_to_the_text() {
        for text in ["One. Two! Three", "你好。世界！", "no end", ""] {
            assert_eq!(sentence_deltas(text).concat(), text);
        }
        assert_eq!(sentence_deltas("A. B.").len(), 2);
    }
}
