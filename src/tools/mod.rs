//! The tool registry and the one validation pipeline every caller goes through.
//!
//! A tool is one file: an argument struct, whose derive gives the input
//! schema (`input_schema`), a [`ToolSpec`] (name, schemas, roles, hints)
//! and a `run` that reads the save state and returns a result plus an optional
//! [`Effect`]. Tools never change state themselves; the session actor applies
//! the effect after it is journalled. Adding a tool is one new file plus one
//! line in [`Registry::builtin`].

mod activate_npc;
mod add_inventory;
mod cancel_event;
mod create_draft_content;
mod create_npc;
mod describe_entity;
pub mod generate_zone;
mod get_character_stats;
mod get_npc_profile;
mod get_player_state;
mod get_prompt_active;
mod get_site_map;
mod hp_delta;
mod log_user_event;
mod map_generate;
mod move_options;
mod move_to;
mod move_to_zone;
mod roll_dice;
mod schedule_event;
#[cfg(test)]
mod schema_parity;
mod search_content;
mod update_character;
mod update_inventory;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::error::{ErrorCode, Reason, ToolStatus};
use crate::game::rng::SplitMix64;
use crate::game::state::CharacterId;
use crate::game::{Effect, GameState};
use crate::ids::SessionId;

/// Longest name a caller gives that is repeated anywhere (a tool name, an
/// MCP method, an id in an error message): answers, the audit ledger and
/// log lines carry at most this many characters of it.
pub const MAX_NAME_CHARS: usize = 64;

/// `name` cut to its first [`MAX_NAME_CHARS`] characters (at a character
/// boundary). Every tool name is shorter, so a cut name is still an unknown
/// tool; what is cut off is never echoed, stored or logged.
pub fn cut_name(name: &str) -> &str {
    match name.char_indices().nth(MAX_NAME_CHARS) {
        Some((end, _)) => &name[..end],
        None => name,
    }
}

/// Longest error message sent back to a model or client.
pub const MAX_ERROR_MESSAGE: usize = 600;
/// Largest arguments of one tool call, as JSON bytes: they are repeated in
/// the `tool_call` frame, the journal, the history and the actions log.
/// Room for the longest text a tool takes (8,000 characters, three bytes
/// each in Chinese) and its other fields.
pub const MAX_ARGS_BYTES: usize = 32 * 1024;
/// Largest result of one tool call, as JSON bytes; a bigger one is an
/// `execution_failed` error, never a giant frame. Room for `get_site_map`
/// of a map of about 1,500 areas.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;

/// The size of `value` as compact JSON, counted up to `limit` (then
/// `None`) without building the text.
pub fn json_size_within(value: &Value, limit: usize) -> Option<usize> {
    struct Counter {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { n: 0, limit };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.n)
}

/// Deepest nesting of arrays and objects in one tool call's arguments, the
/// arguments object itself one level ([`crate::json::depth_within`]). What
/// a tool keeps of its arguments (an event's `event_data`, a draft's
/// content) is stored inside frames, journal entries and snapshots a few
/// levels deep, and read back by a parser that stops at 128: a value far
/// under that bound is stored, and read back, whatever wraps it.
pub const MAX_ARGS_DEPTH: usize = 32;

/// Which bound of one call's arguments they pass, as the caller sent them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsOver {
    /// Larger than [`MAX_ARGS_BYTES`].
    Bytes,
    /// Nested deeper than [`MAX_ARGS_DEPTH`].
    Depth,
}

impl ArgsOver {
    /// What frames and the model's history show in place of such
    /// arguments.
    pub fn note(self) -> String {
        match self {
            Self::Bytes => format!("<arguments over {MAX_ARGS_BYTES} bytes>"),
            Self::Depth => format!("<arguments nested deeper than {MAX_ARGS_DEPTH} levels>"),
        }
    }

    /// The pipeline's refusal of them.
    pub fn error(self) -> ToolError {
        ToolError::invalid_args(match self {
            Self::Bytes => format!("arguments are larger than {MAX_ARGS_BYTES} bytes"),
            Self::Depth => format!(
                "arguments are nested deeper than {MAX_ARGS_DEPTH} levels of objects and arrays"
            ),
        })
    }
}

/// Which bound arguments as the caller sent them pass, if any: the text as
/// sent, or a value as compact JSON.
pub fn args_over_bound(raw: &RawArgs) -> Option<ArgsOver> {
    let deep = match raw {
        RawArgs::Text(text) if text.len() > MAX_ARGS_BYTES => return Some(ArgsOver::Bytes),
        RawArgs::Value(v) if json_size_within(v, MAX_ARGS_BYTES).is_none() => {
            return Some(ArgsOver::Bytes);
        }
        RawArgs::Text(text) => !crate::json::text_depth_within(text, MAX_ARGS_DEPTH),
        RawArgs::Value(v) => !crate::json::depth_within(v, MAX_ARGS_DEPTH),
    };
    deep.then_some(ArgsOver::Depth)
}

/// Whether arguments as the caller sent them are within [`MAX_ARGS_BYTES`]
/// and [`MAX_ARGS_DEPTH`].
pub fn args_within_bound(raw: &RawArgs) -> bool {
    args_over_bound(raw).is_none()
}

/// Who is calling a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A person playing, through their player token.
    Player,
    /// The model running the game.
    GameMaster,
    /// Another service, through the HTTP tool API.
    Service,
    Admin,
    /// A game designer who may create content that changes the game.
    GmAdmin,
    /// The owner of the deployment.
    Owner,
}

/// Every role: the usual `roles` of a tool anyone may call.
pub const ALL_ROLES: &[Role] = &[
    Role::Player,
    Role::GameMaster,
    Role::Service,
    Role::Admin,
    Role::GmAdmin,
    Role::Owner,
];
/// Roles that run the game: the `roles` of a tool that changes it.
pub const GAME_ROLES: &[Role] = &[
    Role::GameMaster,
    Role::Service,
    Role::Admin,
    Role::GmAdmin,
    Role::Owner,
];
/// How long a tool may run before its result is thrown away as `TIMEOUT`.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(2);

/// What a tool declares about itself.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// OpenAI function-name rules: `[A-Za-z0-9_-]{1,64}`.
    pub name: &'static str,
    pub version: &'static str,
    pub title: &'static str,
    /// What the model reads to decide when to call it.
    pub description: &'static str,
    pub category: &'static str,
    pub input_schema: Value,
    pub output_schema: Value,
    pub writes_state: bool,
    pub needs_session: bool,
    /// Outside a session it runs on a site's content (docs/protocol.md §1.12.1):
    /// a service call with `X-Site-ID` and no session.
    pub on_sites: bool,
    pub roles: &'static [Role],
    pub enabled: bool,
    pub ai_callable: bool,
    /// Service callers (HTTP tool API, MCP) need the internal API key for it,
    /// even when the server does not require the key for everything.
    pub requires_auth: bool,
    pub read_only: bool,
    pub idempotent: bool,
    /// Past this, the result (and any effect) is discarded as `TIMEOUT`.
    pub timeout: Duration,
}

impl ToolSpec {
    /// A read-only, idempotent tool that any role may call in a session;
    /// adjust with the methods below.
    pub fn new(
        name: &'static str,
        title: &'static str,
        category: &'static str,
        description: &'static str,
        input_schema: Value,
        output_schema: Value,
    ) -> Self {
        Self {
            name,
            version: "1.0.0",
            title,
            description,
            category,
            input_schema,
            output_schema,
            writes_state: false,
            needs_session: true,
            on_sites: false,
            roles: ALL_ROLES,
            enabled: true,
            ai_callable: true,
            requires_auth: false,
            read_only: true,
            idempotent: true,
            timeout: DEFAULT_TOOL_TIMEOUT,
        }
    }

    /// The tool changes the save state.
    pub fn writes(mut self) -> Self {
        self.writes_state = true;
        self.read_only = false;
        self.idempotent = false;
        self
    }

    /// The same arguments may give a different result each time.
    pub fn not_idempotent(mut self) -> Self {
        self.idempotent = false;
        self
    }

    pub fn roles(mut self, roles: &'static [Role]) -> Self {
        self.roles = roles;
        self
    }

    /// Only people may call it: the model never sees it.
    pub fn people_only(mut self) -> Self {
        self.ai_callable = false;
        self
    }

    /// Service callers must present the internal API key.
    pub fn requires_auth(mut self) -> Self {
        self.requires_auth = true;
        self
    }

    /// The tool works without a session (content services).
    pub fn sessionless(mut self) -> Self {
        self.needs_session = false;
        self
    }

    /// Outside a session the tool runs on a site's content.
    pub fn on_sites(mut self) -> Self {
        self.on_sites = true;
        self
    }
}

/// What a successful tool call gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub result: Value,
    pub effect: Option<Effect>,
}

/// Why a tool call failed: a reason, a wire code and a readable message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason:?} ({code:?}): {message}")]
pub struct ToolError {
    pub reason: Reason,
    pub code: ErrorCode,
    pub message: String,
}

impl ToolError {
    pub fn new(reason: Reason, code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if message.len() > MAX_ERROR_MESSAGE {
            let mut cut = MAX_ERROR_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        Self {
            reason,
            code,
            message,
        }
    }

    pub fn invalid_args(message: impl Into<String>) -> Self {
        Self::new(Reason::InvalidArgs, ErrorCode::InvalidArgs, message)
    }

    pub fn status(&self) -> ToolStatus {
        self.reason.status()
    }

    /// The tool message a model reads for this failure.
    pub fn to_model_json(&self) -> Value {
        json!({
            "status": self.status(),
            "reason": self.reason,
            "error_code": self.code,
            "message": self.message,
        })
    }
}

/// What a tool may read while it runs.
pub struct ToolContext<'a> {
    pub state: &'a GameState,
    /// [`Caller::acting`].
    pub acting: &'a [CharacterId],
    /// Randomness for this call; the outcome is journalled, never re-rolled.
    pub rng: &'a mut SplitMix64,
    /// The session the call runs in.
    pub session_id: &'a SessionId,
    pub role: Role,
    /// Wall-clock time of the call, milliseconds since the Unix epoch. A
    /// tool that records it puts it in its effect: replaying the journal
    /// never runs tools, so it never reads a clock.
    pub now_ms: i64,
    /// The person the call is made for, when the caller named one
    /// (`X-User-ID` on a service call); `None` for players and the model.
    pub user_id: Option<&'a str>,
    /// The site the call runs on, outside a session (docs/protocol.md §1.12.1);
    /// `None` in a session, whose site is its campaign.
    pub site_id: Option<&'a str>,
}

impl<'a> ToolContext<'a> {
    /// The character a tool acts as when its call names none: in a turn,
    /// the speaker's ([`Caller::acting`]); otherwise the active character.
    pub fn actor_id(&self) -> &'a CharacterId {
        self.acting.first().unwrap_or(&self.state.active_actor_id)
    }

    /// [`ToolContext::actor_id`]'s character, if the state holds it.
    pub fn actor(&self) -> Option<&'a crate::game::Character> {
        self.state.character(self.actor_id().as_str())
    }

    /// Whether `character_id` may act now: one the turn acts for, or the
    /// active character outside turns.
    pub fn may_act_as(&self, character_id: &str) -> bool {
        if self.acting.is_empty() {
            self.state.active_actor_id == *character_id
        } else {
            self.acting.iter().any(|c| *c == *character_id)
        }
    }

    /// Whether `character_id` may be moved now: one [`Self::may_act_as`],
    /// or an NPC in a turn of a session someone joined (docs/protocol.md
    /// §8: a turn's tools may name the speaker's character or an NPC). A
    /// session nobody joined moves only its active character, as before
    /// parties.
    pub fn may_move(&self, character_id: &str) -> bool {
        self.may_act_as(character_id)
            || (!self.acting.is_empty()
                && self.state.party.someone_joined()
                && self
                    .state
                    .character(character_id)
                    .is_some_and(|c| c.kind == "npc"))
    }

    /// [`ToolContext::now_ms`] as RFC 3339 UTC (`2024-12-13T12:00:00.000Z`).
    pub fn now_rfc3339(&self) -> String {
        crate::storage::rfc3339(self.now_ms)
    }

    /// Write tools name their session; a different one is `SESSION_MISMATCH`.
    pub fn check_session(&self, claimed: &str) -> Result<(), ToolError> {
        if *self.session_id == *claimed {
            Ok(())
        } else {
            Err(ToolError::new(
                Reason::SessionMismatch,
                ErrorCode::SessionMismatch,
                format!(
                    "session_id {claimed:?} is not this session ({})",
                    self.session_id
                ),
            ))
        }
    }
}

/// One tool: a spec and the rule that runs it.
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;
    /// Runs against the state. `args` already passed the input schema.
    fn run(&self, args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError>;
    /// Text a model that writes content should write for this call before
    /// it runs (e.g. zone names), as a (system, user) prompt; `None` (the
    /// default) when the call needs none. Asked only after the call passed
    /// the pipeline's checks.
    fn content_request(&self, _args: &Value) -> Option<(String, String)> {
        None
    }
    /// Puts the model's written text into the call's arguments; `Err` says
    /// why the text cannot be used.
    fn with_content(&self, _args: &mut Value, _text: &str) -> Result<(), String> {
        Err("this tool takes no written content".into())
    }
}

/// Arguments as they arrive: JSON text from a model, or a value from HTTP.
#[derive(Debug, Clone)]
pub enum RawArgs {
    Text(String),
    Value(Value),
}

/// Who calls, and which tools the campaign allows.
pub struct Caller<'a> {
    pub role: Role,
    /// In a turn, the characters it acts for: the speaker's, or every
    /// acting seat's in a round's turn (docs/protocol.md §8). Tools that
    /// act as a character may not name another seat's, and default to the
    /// first. Empty outside turns (a direct call), where neither applies.
    pub acting: &'a [CharacterId],
    pub allowlist: &'a [String],
    /// The session the call runs in.
    pub session_id: &'a SessionId,
    /// The person a service calls for (`X-User-ID`), if it named one.
    pub user_id: Option<&'a str>,
    /// The site whose content the call runs on, outside a session
    /// (docs/protocol.md §1.12.1).
    pub site_id: Option<&'a str>,
}

/// The session id of calls that run in none: empty, so no tool argument
/// names it (their schemas ask for at least one character).
static NO_SESSION: LazyLock<SessionId> = LazyLock::new(|| SessionId::from(""));

impl<'a> Caller<'a> {
    /// A caller outside any session: a service's sessionless call, the
    /// stateless chat.
    pub fn sessionless(role: Role, allowlist: &'a [String]) -> Self {
        Self {
            role,
            acting: &[],
            allowlist,
            session_id: &NO_SESSION,
            user_id: None,
            site_id: None,
        }
    }

    /// The same caller, acting for `user_id`.
    pub fn for_user(self, user_id: Option<&'a str>) -> Self {
        Self { user_id, ..self }
    }

    /// The same caller, on the content of site `site_id`.
    pub fn at_site(self, site_id: &'a str) -> Self {
        Self {
            site_id: Some(site_id),
            ..self
        }
    }
}

/// The outcome of one pass through the pipeline.
#[derive(Debug)]
pub struct Invocation {
    /// The parsed arguments (`null` when they could not be parsed).
    pub args: Value,
    pub outcome: Result<ToolOutput, ToolError>,
    /// A result's JSON text, as its size was checked: `Some` exactly when
    /// `outcome` is `Ok`.
    pub result_text: Option<Box<RawValue>>,
    pub duration_ms: f64,
}

struct Entry {
    tool: Box<dyn Tool>,
    spec: ToolSpec,
    input: jsonschema::Validator,
    output: jsonschema::Validator,
}

/// Every tool this server has, with schemas compiled once at start.
pub struct Registry {
    entries: HashMap<&'static str, Entry>,
    /// Names in registration order, for stable listings.
    order: Vec<&'static str>,
    /// [`Registry::openai_tools`] answers by role and allowlist, made once
    /// and shared by every session of a campaign (a model call would
    /// otherwise copy every schema).
    openai_cache: Mutex<OpenAiCache>,
}

/// One cached tool list with its whole key.
type CachedList = (Role, Vec<String>, Arc<[Value]>);

/// Tool lists by a hash of role and allowlist; each bucket keeps the key
/// whole, so a lookup allocates nothing.
#[derive(Debug, Default)]
struct OpenAiCache {
    /// foldhash's, seeded per process: a session's first model request
    /// hashes its campaign's allowlist (a score of tool names), about
    /// 4,000 instructions with the standard SipHash. A caller-chosen list
    /// colliding on purpose only lengthens one bucket of at most
    /// [`MAX_CACHED_TOOL_LISTS`].
    hasher: foldhash::quality::RandomState,
    lists: HashMap<u64, Vec<CachedList>>,
    /// Lists held, at most [`MAX_CACHED_TOOL_LISTS`].
    len: usize,
}

/// Distinct (role, allowlist) tool lists kept; callers of `/api/chat` name
/// their own lists, so when this many are held the cache starts again.
pub const MAX_CACHED_TOOL_LISTS: usize = 1024;

impl OpenAiCache {
    fn key(&self, caller: &Caller<'_>) -> u64 {
        self.hasher.hash_one((caller.role, caller.allowlist))
    }

    fn get(&self, caller: &Caller<'_>) -> Option<Arc<[Value]>> {
        self.lists
            .get(&self.key(caller))?
            .iter()
            .find(|(role, allowlist, _)| *role == caller.role && allowlist == caller.allowlist)
            .map(|(_, _, tools)| tools.clone())
    }

    fn insert(&mut self, caller: &Caller<'_>, tools: Arc<[Value]>) {
        if self.len >= MAX_CACHED_TOOL_LISTS {
            self.lists.clear();
            self.len = 0;
        }
        self.len += 1;
        let key = self.key(caller);
        self.lists
            .entry(key)
            .or_default()
            .push((caller.role, caller.allowlist.to_vec(), tools));
    }
}

impl Registry {
    /// The built-in tools.
    pub fn builtin() -> Result<Self, String> {
        let mut r = Self {
            entries: HashMap::new(),
            order: Vec::new(),
            openai_cache: Mutex::new(OpenAiCache::default()),
        };
        r.register(Box::new(move_to::Move))?;
        r.register(Box::new(move_options::MoveOptions))?;
        r.register(Box::new(hp_delta::HpDelta))?;
        r.register(Box::new(roll_dice::RollDice))?;
        r.register(Box::new(map_generate::MapGenerate))?;
        r.register(Box::new(get_character_stats::GetCharacterStats))?;
        r.register(Box::new(generate_zone::GenerateZone))?;
        r.register(Box::new(move_to_zone::MoveToZone))?;
        r.register(Box::new(get_player_state::GetPlayerState))?;
        r.register(Box::new(add_inventory::AddInventory))?;
        r.register(Box::new(update_inventory::UpdateInventory))?;
        r.register(Box::new(update_character::UpdateCharacter))?;
        r.register(Box::new(get_npc_profile::GetNpcProfile))?;
        r.register(Box::new(search_content::SearchContent))?;
        r.register(Box::new(get_site_map::GetSiteMap))?;
        r.register(Box::new(create_draft_content::CreateDraftContent))?;
        r.register(Box::new(log_user_event::LogUserEvent))?;
        r.register(Box::new(get_prompt_active::GetPromptActive))?;
        r.register(Box::new(describe_entity::DescribeEntity))?;
        r.register(Box::new(create_npc::CreateNpc))?;
        r.register(Box::new(activate_npc::ActivateNpc))?;
        r.register(Box::new(schedule_event::ScheduleEvent))?;
        r.register(Box::new(cancel_event::CancelEvent))?;
        Ok(r)
    }

    /// The built-in tools with the operator's settings: `disabled` names
    /// tools no one may use (`QUESTD_DISABLED_TOOLS`; a name that is no
    /// tool is an error), `timeout` bounds every tool's run
    /// (`QUESTD_TOOL_TIMEOUT_MS`).
    pub fn builtin_with(disabled: &[&str], timeout: Duration) -> Result<Self, String> {
        let mut r = Self::builtin()?;
        let unknown: Vec<&str> = disabled
            .iter()
            .copied()
            .filter(|n| !r.entries.contains_key(n))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "QUESTD_DISABLED_TOOLS names no tool {}; tools: {}",
                unknown
                    .iter()
                    .map(|n| format!("{:?}", cut_name(n)))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.order.join(", ")
            ));
        }
        for entry in r.entries.values_mut() {
            entry.spec.timeout = timeout;
            if disabled.contains(&entry.spec.name) {
                entry.spec.enabled = false;
            }
        }
        Ok(r)
    }

    /// Adds a tool; its name and schemas are checked here, once.
    pub fn register(&mut self, tool: Box<dyn Tool>) -> Result<(), String> {
        let spec = tool.spec();
        let valid_name = !spec.name.is_empty()
            && spec.name.len() <= 64
            && spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(format!(
                "tool name {:?} breaks [A-Za-z0-9_-]{{1,64}}",
                spec.name
            ));
        }
        if self.entries.contains_key(spec.name) {
            return Err(format!("tool {} registered twice", spec.name));
        }
        let input = jsonschema::validator_for(&spec.input_schema)
            .map_err(|e| format!("{}: bad input schema: {e}", spec.name))?;
        let output = jsonschema::validator_for(&spec.output_schema)
            .map_err(|e| format!("{}: bad output schema: {e}", spec.name))?;
        self.order.push(spec.name);
        self.entries.insert(
            spec.name,
            Entry {
                tool,
                spec,
                input,
                output,
            },
        );
        Ok(())
    }

    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.entries.get(name).map(|e| &e.spec)
    }

    /// The content a model should write before this call runs, if any
    /// ([`Tool::content_request`]).
    pub fn content_request(&self, name: &str, args: &Value) -> Option<(String, String)> {
        self.entries.get(name)?.tool.content_request(args)
    }

    /// Puts a model's written content into the call's arguments
    /// ([`Tool::with_content`]).
    pub fn with_content(&self, name: &str, args: &mut Value, text: &str) -> Result<(), String> {
        match self.entries.get(name) {
            Some(entry) => entry.tool.with_content(args, text),
            None => Err(format!("no tool {name:?}")),
        }
    }

    /// Every tool name, in registration order.
    pub fn names(&self) -> &[&'static str] {
        &self.order
    }

    /// The tools a role may call under an allowlist, in registration order.
    pub fn usable<'a>(&'a self, caller: &'a Caller<'_>) -> impl Iterator<Item = &'a ToolSpec> + 'a {
        self.order.iter().filter_map(move |n| {
            let spec = &self.entries[n].spec;
            (spec.enabled
                && spec.roles.contains(&caller.role)
                && caller.allowlist.iter().any(|a| a == spec.name)
                && (caller.role != Role::GameMaster || spec.ai_callable))
                .then_some(spec)
        })
    }

    /// Definitions in the OpenAI `tools` format. Made once per role and
    /// allowlist; later calls share them.
    pub fn openai_tools(&self, caller: &Caller<'_>) -> Arc<[Value]> {
        let mut cache = self
            .openai_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tools) = cache.get(caller) {
            return tools;
        }
        let tools: Arc<[Value]> = self
            .usable(caller)
            .map(|s| {
                json!({
                    "type": "function",
                    "function": {"name": s.name, "description": s.description, "parameters": s.input_schema}
                })
            })
            .collect();
        cache.insert(caller, tools.clone());
        tools
    }

    /// Definitions in the MCP `tools/list` shape.
    pub fn mcp_tools(&self, caller: &Caller<'_>) -> Vec<Value> {
        self.usable(caller)
            .map(|s| {
                json!({
                    "name": s.name,
                    "title": s.title,
                    "description": s.description,
                    "inputSchema": s.input_schema,
                    "outputSchema": s.output_schema,
                    "annotations": {
                        "title": s.title,
                        "readOnlyHint": s.read_only,
                        "idempotentHint": s.idempotent,
                        "destructiveHint": s.writes_state && !s.idempotent,
                        "openWorldHint": false,
                    }
                })
            })
            .collect()
    }

    /// The pipeline: tool exists -> arguments parse to an object -> allowlist
    /// -> role -> enabled -> input schema -> run -> output schema. A failure
    /// at any step never runs the tool.
    pub fn invoke(
        &self,
        name: &str,
        raw: RawArgs,
        caller: &Caller<'_>,
        state: &GameState,
        rng: &mut SplitMix64,
    ) -> Invocation {
        let started = Instant::now();
        let checked = self.check(name, raw, caller).and_then(|(entry, args)| {
            match acts_for_another_seat(name, &args, caller.acting, state) {
                Some(e) => Err((args, e)),
                None => Ok((entry, args)),
            }
        });
        let (args, outcome, result_text) = match checked {
            Err((args, e)) => (args, Err(e), None),
            Ok((entry, args)) => {
                let mut ctx = ToolContext {
                    acting: caller.acting,
                    state,
                    rng,
                    session_id: caller.session_id,
                    role: caller.role,
                    now_ms: crate::storage::now_ms(),
                    user_id: caller.user_id,
                    site_id: caller.site_id,
                };
                // A tool that panics is a bug, but its caller gets an error
                // like any failed call and the session goes on: tools only
                // read the state, so a panic leaves nothing half changed.
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    entry.tool.run(&args, &mut ctx)
                }))
                .unwrap_or_else(|_| {
                    tracing::error!(tool = name, "tool panicked");
                    Err(ToolError::new(
                        Reason::ExecutionFailed,
                        ErrorCode::ExecutionFailed,
                        format!("{name} failed"),
                    ))
                });
                let outcome = ran.and_then(|out| {
                    // Tools run to completion on the session's thread; one
                    // that overran its budget has its result thrown away,
                    // so a slow tool never changes state late.
                    let elapsed = started.elapsed();
                    if elapsed > entry.spec.timeout {
                        tracing::warn!(tool = name, ?elapsed, "tool overran its timeout");
                        return Err(ToolError::new(
                            Reason::Timeout,
                            ErrorCode::Timeout,
                            format!("{name} took longer than {} ms", entry.spec.timeout.as_millis()),
                        ));
                    }
                    // The text is written here once; the caller's frame,
                    // action and history carry it.
                    let text = crate::json::raw(&out.result);
                    if text.get().len() > MAX_RESULT_BYTES {
                        return Err(ToolError::new(
                            Reason::ExecutionFailed,
                            ErrorCode::ExecutionFailed,
                            format!(
                                "{name} produced a result larger than {MAX_RESULT_BYTES} bytes; \
                                 ask for less"
                            ),
                        ));
                    }
                    let problems = schema_problems(&entry.output, &out.result);
                    if problems.is_empty() {
                        Ok((out, text))
                    } else {
                        tracing::error!(tool = name, problems = %problems, "tool broke its output schema");
                        Err(ToolError::new(
                            Reason::ExecutionFailed,
                            ErrorCode::ExecutionFailed,
                            format!("{name} produced an invalid result"),
                        ))
                    }
                });
                match outcome {
                    Ok((out, text)) => (args, Ok(out), Some(text)),
                    Err(e) => (args, Err(e), None),
                }
            }
        };
        Invocation {
            args,
            outcome,
            result_text,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        }
    }

    /// Every check of the pipeline before a tool runs ([`Registry::prepare`]'s,
    /// then the seat rule of party play), with `state`; answers the parsed
    /// arguments. A call that passes runs exactly as it would now: an
    /// approval (docs/protocol.md §19) asks only for such a call.
    pub fn admit(
        &self,
        name: &str,
        raw: RawArgs,
        caller: &Caller<'_>,
        state: &GameState,
    ) -> Result<Value, ToolError> {
        let args = self.prepare(name, raw, caller)?;
        match acts_for_another_seat(name, &args, caller.acting, state) {
            Some(e) => Err(e),
            None => Ok(args),
        }
    }

    /// The checks before a tool runs (exists, arguments, allowlist, role,
    /// enabled, input schema); answers the parsed arguments.
    pub fn prepare(
        &self,
        name: &str,
        raw: RawArgs,
        caller: &Caller<'_>,
    ) -> Result<Value, ToolError> {
        self.check(name, raw, caller)
            .map(|(_, args)| args)
            .map_err(|(_, e)| e)
    }

    fn check(
        &self,
        name: &str,
        raw: RawArgs,
        caller: &Caller<'_>,
    ) -> Result<(&Entry, Value), (Value, ToolError)> {
        let usable = || {
            let names: Vec<&str> = self.usable(caller).map(|s| s.name).collect();
            names.join(", ")
        };
        let Some(entry) = self.entries.get(name) else {
            let shown = cut_name(name);
            return Err((
                Value::Null,
                ToolError::new(
                    Reason::NotFound,
                    ErrorCode::ToolNotFound,
                    format!("unknown tool {shown:?}; tools you may use: {}", usable()),
                ),
            ));
        };
        let args = parse_args(raw).map_err(|e| (Value::Null, e))?;
        let fail = |e: ToolError| Err((args.clone(), e));
        // The campaign allowlist governs what the model may use; tools only
        // people may call (not `ai_callable`) are governed by their roles.
        let governed = entry.spec.ai_callable || caller.role == Role::GameMaster;
        if governed && !caller.allowlist.iter().any(|a| a == name) {
            return fail(ToolError::new(
                Reason::ToolNotAllowed,
                ErrorCode::ToolNotAllowed,
                format!(
                    "{name} is not allowed in this campaign; tools you may use: {}",
                    usable()
                ),
            ));
        }
        if !entry.spec.roles.contains(&caller.role) {
            return fail(ToolError::new(
                Reason::PermissionDenied,
                ErrorCode::PermissionDenied,
                format!(
                    "role {} may not call {name}",
                    crate::error::wire_name(&caller.role)
                ),
            ));
        }
        if !entry.spec.enabled {
            return fail(ToolError::new(
                Reason::ToolDisabled,
                ErrorCode::ToolDisabled,
                format!("{name} is disabled"),
            ));
        }
        let problems = schema_problems(&entry.input, &args);
        if !problems.is_empty() {
            return fail(ToolError::invalid_args(format!(
                "invalid arguments for {name}: {problems}"
            )));
        }
        Ok((entry, args))
    }
}

/// The tools that act as a character: in a turn they may name the
/// characters the turn acts for or one no seat holds (an NPC), never
/// another seat's (docs/protocol.md §8). The others (`hp_delta`,
/// `roll_dice`, the read tools) may name anyone.
const ACTS_AS_CHARACTER: [&str; 6] = [
    "move",
    "move_to_zone",
    "add_inventory",
    "update_inventory",
    "update_character",
    "get_player_state",
];

/// `PERMISSION_DENIED` when a turn acting for `acting` calls a tool of
/// [`ACTS_AS_CHARACTER`] naming another active seat's character. Checked
/// once, here, for every such tool; outside turns (`acting` empty) nothing
/// is restricted.
fn acts_for_another_seat(
    name: &str,
    args: &Value,
    acting: &[CharacterId],
    state: &GameState,
) -> Option<ToolError> {
    if acting.is_empty() || !ACTS_AS_CHARACTER.contains(&name) {
        return None;
    }
    let named = ["actor_id", "character_id"]
        .iter()
        .find_map(|field| args[*field].as_str())?;
    let seat = state.party.seat_of_character(named)?;
    if acting.iter().any(|c| *c == *named) {
        return None;
    }
    Some(ToolError::new(
        Reason::PermissionDenied,
        ErrorCode::PermissionDenied,
        format!(
            "{named} is {}'s character: this turn acts for {}",
            seat.name,
            acting
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// Parses raw arguments into a JSON object, with a message a model can act on.
fn parse_args(raw: RawArgs) -> Result<Value, ToolError> {
    if let Some(over) = args_over_bound(&raw) {
        return Err(over.error());
    }
    let value = match raw {
        RawArgs::Value(v) => v,
        RawArgs::Text(text) if text.trim().is_empty() => {
            return Err(ToolError::invalid_args(
                "arguments are empty; send a JSON object ({} when there are none)",
            ));
        }
        RawArgs::Text(text) => serde_json::from_str(&text).map_err(|e| {
            ToolError::invalid_args(format!(
                "arguments are not valid JSON ({e}); send one JSON object"
            ))
        })?,
    };
    match value {
        Value::Object(_) => Ok(value),
        other => Err(ToolError::invalid_args(format!(
            "arguments must be a JSON object, not {}",
            json_kind(&other)
        ))),
    }
}

/// What kind of JSON value `v` is, for error messages ("an array", ...).
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Every schema problem, each with its JSON Pointer path, joined; empty
/// when there is none. A valid instance (nearly every call) is told by
/// `is_valid`, which builds no error values; the errors are gathered only
/// for an invalid one.
fn schema_problems(validator: &jsonschema::Validator, instance: &Value) -> String {
    if validator.is_valid(instance) {
        return String::new();
    }
    validator
        .iter_errors(instance)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// JSON with object keys sorted at every depth and no spaces, so equal
/// values always give equal text. serde_json's objects are sorted maps in
/// this build (its `preserve_order` feature is off), so its compact text
/// is this; `args_hash_ignores_key_order_and_spacing` fails if that
/// feature is ever turned on.
pub fn canonical_json(v: &Value) -> String {
    crate::json::text(v)
}

/// SHA-256 of the canonical JSON of `v`, in hex: the same arguments always
/// hash the same, whatever their key order. The text is written straight
/// into the hash, never held.
pub fn args_hash(v: &Value) -> String {
    use sha2::{Digest, Sha256};
    struct Hashing(Sha256);
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(Sha256::new());
    // A `Value` always writes (its keys are strings), and hashing cannot
    // fail: there is no error to handle.
    let _ = serde_json::to_writer(&mut hashing, v);
    crate::game::pieces::hex(&hashing.0.finalize())
}

/// A tool's input schema, derived from its argument struct `T`: what
/// `tools/list`, the model's `tools` and the pipeline's check all use, so the
/// struct is the one declaration of a tool's input. Bounds are written on the
/// fields (`#[schemars(length(..), range(..), pattern(..))]`, `extend(..)` for
/// the rest) and a field's doc comment is the description the model reads.
///
/// The derive describes what serde would read; what it makes is tidied here,
/// in one place, to the schema every client has always been shown:
/// - subschemas are inlined and the top carries no `$schema`, `title` or
///   `description` (the spec has the tool's), so each schema is one
///   self-contained object;
/// - an `Option` field may be left out but not sent as `null`: serde would
///   read `null` as absent, the tools have always refused it. A field where
///   `null` means something says `extend("nullable" = true)`;
/// - integer `format`s (`int64`, `uint32`) are dropped: they name Rust's
///   widths, and each bound a tool keeps is a `minimum`/`maximum`;
/// - a `default` of `null` or `[]`, and `additionalProperties: true`, are
///   dropped: they say nothing that leaving the field out does not.
pub(crate) fn input_schema<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(top) = &mut schema {
        top.remove("title");
        top.remove("description");
    }
    tidy_schema(&mut schema);
    schema
}

/// The rules of [`input_schema`], applied to `schema` and every subschema.
fn tidy_schema(schema: &mut Value) {
    let Value::Object(obj) = schema else {
        return;
    };
    let nullable = obj.remove("nullable") == Some(Value::Bool(true));
    if !nullable {
        if let Some(Value::Array(types)) = obj.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types.remove(0);
                obj.insert("type".into(), only);
            }
        }
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
    }
    if matches!(
        obj.get("type").and_then(Value::as_str),
        Some("integer" | "number")
    ) {
        obj.remove("format");
    }
    if matches!(obj.get("default"), Some(Value::Null))
        || obj
            .get("default")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
    {
        obj.remove("default");
    }
    if obj.get("additionalProperties") == Some(&Value::Bool(true)) {
        obj.remove("additionalProperties");
    }
    if let Some(Value::Object(properties)) = obj.get_mut("properties") {
        properties.values_mut().for_each(tidy_schema);
    }
    for key in [
        "items",
        "additionalProperties",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
    ] {
        if let Some(sub) = obj.get_mut(key) {
            tidy_schema(sub);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(subs)) = obj.get_mut(key) {
            subs.iter_mut().for_each(tidy_schema);
        }
    }
}

/// Reads validated arguments into a tool's typed struct. JSON Schema
/// counts a number with a zero fraction (`5.0`) as an integer, so the
/// schema passes it, where an integer field of the struct does not: such
/// numbers are read as the integers they are.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(args: &Value) -> Result<T, ToolError> {
    T::deserialize(args).or_else(|e| {
        let mut whole = args.clone();
        if crate::json::whole_numbers_as_integers(&mut whole)
            && let Ok(read) = T::deserialize(&whole)
        {
            return Ok(read);
        }
        Err(ToolError::invalid_args(e.to_string()))
    })
}

/// Finds a character or reports which ones exist.
pub(crate) fn character<'a>(
    state: &'a GameState,
    id: &str,
) -> Result<&'a crate::game::Character, ToolError> {
    state.character(id).ok_or_else(|| {
        let known: Vec<&str> = state
            .characters
            .iter()
            .map(|c| c.character_id.as_str())
            .collect();
        ToolError::new(
            Reason::NotFound,
            ErrorCode::InvalidArgs,
            format!("no character {id:?}; characters: {}", known.join(", ")),
        )
    })
}

/// The short area shape tools return.
pub(crate) fn area_brief(area: &crate::game::Area) -> Value {
    json!({"area_id": area.area_id, "name": area.name, "description": area.description})
}

/// The JSON Schema of [`area_brief`].
pub(crate) fn area_brief_schema() -> Value {
    json!({
        "type": "object",
        "required": ["area_id", "name", "description"],
        "properties": {"area_id": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"}}
    })
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::{Role, Tool, ToolContext, ToolError, ToolOutput};
    use crate::game::rng::SplitMix64;
    use crate::game::{Campaign, GameState};
    use crate::ids::SessionId;

    /// The session id tools see in unit tests.
    pub const SESSION: &str = "sess_test";
    /// The clock tools see in unit tests run outside the pipeline:
    /// 2024-12-13T12:00:00Z.
    pub const NOW_MS: i64 = 1_734_091_200_000;

    /// [`SESSION`] as the id a tool's context holds.
    pub fn session() -> SessionId {
        SessionId::from(SESSION)
    }

    /// Runs a tool as the game master in session [`SESSION`].
    pub fn ctx_run(
        tool: &dyn Tool,
        state: &GameState,
        args: &serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        run_as(tool, state, args, Role::GameMaster)
    }

    /// Runs a tool as `role` in session [`SESSION`].
    pub fn run_as(
        tool: &dyn Tool,
        state: &GameState,
        args: &serde_json::Value,
        role: Role,
    ) -> Result<ToolOutput, ToolError> {
        let mut rng = SplitMix64::new(7);
        tool.run(
            args,
            &mut ToolContext {
                acting: &[],
                state,
                rng: &mut rng,
                session_id: &session(),
                role,
                now_ms: NOW_MS,
                user_id: None,
                site_id: None,
            },
        )
    }

    /// Every tool name this server has.
    pub fn tools() -> Vec<&'static str> {
        super::Registry::builtin()
            .expect("built-in tools register")
            .names()
            .to_vec()
    }

    /// Runs a tool through the whole pipeline (schemas included) as `role`,
    /// with only that tool allowed.
    pub fn pipeline(
        name: &str,
        state: &GameState,
        args: serde_json::Value,
        role: Role,
    ) -> Result<ToolOutput, ToolError> {
        let allowlist = [name.to_owned()];
        let caller = super::Caller {
            acting: &[],
            role,
            allowlist: &allowlist,
            session_id: &session(),
            user_id: None,
            site_id: None,
        };
        super::Registry::builtin()
            .expect("built-in tools register")
            .invoke(
                name,
                super::RawArgs::Value(args),
                &caller,
                state,
                &mut SplitMix64::new(1),
            )
            .outcome
    }

    /// Checks that each call is refused with its reason, the code
    /// `INVALID_ARGS`, and a message naming the given text.
    pub fn assert_refusals<const N: usize>(
        cases: [(serde_json::Value, crate::error::Reason, &str); N],
        run: impl Fn(&serde_json::Value) -> Result<ToolOutput, ToolError>,
    ) {
        for (args, reason, text) in cases {
            let e = run(&args).expect_err("the call is refused");
            assert_eq!(
                (e.reason, e.code),
                (reason, crate::error::ErrorCode::InvalidArgs),
                "{args}"
            );
            assert!(e.message.contains(text), "{args}: {}", e.message);
        }
    }

    /// The demo campaign's opening state.
    pub fn demo() -> GameState {
        Campaign::builtin("demo", &tools())
            .expect("demo exists")
            .expect("demo is valid")
            .into_state()
    }

    /// Seats `name` at `seat_<n>` of `state`'s party, playing a copy of the
    /// active character (`pc_00<n>`, named `name`) standing in `area_id`,
    /// as joining by invite does; answers the character's id.
    pub fn seat(
        state: &mut GameState,
        n: u32,
        name: &str,
        area_id: &str,
    ) -> crate::game::state::CharacterId {
        use crate::game::party::{Seat, SeatRole, SeatState};
        let mut character = state.active_actor().expect("an active character").clone();
        character.character_id = format!("pc_00{n}").as_str().into();
        character.name = name.into();
        character.area_id = area_id.into();
        let character_id = character.character_id.clone();
        state.apply(&crate::game::Effect::SeatJoined {
            seat: Seat {
                seat_id: format!("seat_{n}").as_str().into(),
                character_id: character_id.clone(),
                name: name.into(),
                role: SeatRole::Player,
                state: SeatState::Active,
                token_hash: Some(format!("digest_{n}")),
                joined_at: 0,
            },
            character: Some(Box::new(character)),
            invite_id: "inv_1".into(),
            invite_uses: 1,
        });
        character_id
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::demo;
    use super::*;

    #[test]
    fn whole_numbers_written_with_a_fraction_are_read_as_the_integers_the_schema_passed() {
        use super::test_support::pipeline;
        let state = demo();
        let pc = state.characters[0].character_id.to_string();
        let with = |delta: Value| {
            pipeline(
                "hp_delta",
                &state,
                serde_json::json!({"target_character_id": pc, "delta": delta}),
                Role::GameMaster,
            )
        };
        let as_float = with(serde_json::json!(-2.0)).expect("runs");
        let as_integer = with(serde_json::json!(-2)).expect("runs");
        assert_eq!(as_float.result, as_integer.result);
        // A fraction is not an integer: the schema refuses it, by name.
        let refused = with(serde_json::json!(-2.5)).expect_err("refused");
        assert_eq!(refused.code, ErrorCode::InvalidArgs);
        assert!(refused.message.contains("/delta"), "{}", refused.message);
        let mut nested = serde_json::json!({"a": [1.0, 2.5, {"b": 3e0}], "c": 1e30, "d": "4.0"});
        assert!(crate::json::whole_numbers_as_integers(&mut nested));
        assert_eq!(
            nested,
            serde_json::json!({"a": [1, 2.5, {"b": 3}], "c": 1e30, "d": "4.0"})
        );
    }

    #[test]
    fn names_are_cut_at_a_character_boundary() {
        let at_most = "a".repeat(MAX_NAME_CHARS);
        // (name, what is kept)
        let cases: Vec<(String, String)> = vec![
            (String::new(), String::new()),
            ("move_to".into(), "move_to".into()),
            (at_most.clone(), at_most.clone()),
            (format!("{at_most}b"), at_most.clone()),
            ("x".repeat(900_000), "x".repeat(MAX_NAME_CHARS)),
            ("é".repeat(MAX_NAME_CHARS + 3), "é".repeat(MAX_NAME_CHARS)),
            (
                format!("{}🎲🎲", "a".repeat(63)),
                format!("{}🎲", "a".repeat(63)),
            ),
        ];
        for (name, kept) in cases {
            assert_eq!(cut_name(&name), kept, "{:.20?}", name);
        }
        // Every tool's name is within the bound, so a cut name is unknown.
        let registry = Registry::builtin().unwrap();
        assert!(
            registry
                .names()
                .iter()
                .all(|n| n.chars().count() <= MAX_NAME_CHARS)
        );
    }

    fn run(name: &str, raw: RawArgs, allow: &[&str]) -> Invocation {
        let registry = Registry::builtin().unwrap();
        let allowlist: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        let caller = Caller {
            acting: &[],
            role: Role::GameMaster,
            allowlist: &allowlist,
            session_id: &test_support::session(),
            user_id: None,
            site_id: None,
        };
        registry.invoke(name, raw, &caller, &demo(), &mut SplitMix64::new(1))
    }

    fn err(inv: Invocation) -> ToolError {
        inv.outcome.expect_err("should fail")
    }

    #[test]
    fn a_turn_may_not_act_as_another_seats_character() {
        let registry = Registry::builtin().unwrap();
        let mut state = demo();
        test_support::seat(&mut state, 2, "Brin", "area_001");
        let allowlist: Vec<String> = registry.names().iter().map(|s| s.to_string()).collect();
        let session = test_support::session();
        let run = |acting: &[CharacterId], tool: &str, args: Value| {
            let caller = Caller {
                acting,
                ..Caller::sessionless(Role::GameMaster, &allowlist)
            };
            let caller = Caller {
                session_id: &session,
                ..caller
            };
            registry.invoke(
                tool,
                RawArgs::Value(args),
                &caller,
                &state,
                &mut SplitMix64::new(1),
            )
        };
        let host: &[CharacterId] = &["pc_001".into()];
        let to_hall = json!({"actor_id": "pc_002", "to_area_id": "area_002"});
        // The host's turn naming Brin's character: refused before it runs.
        let e = run(host, "move", to_hall.clone())
            .outcome
            .expect_err("refused");
        assert_eq!(
            (e.reason, e.code),
            (Reason::PermissionDenied, ErrorCode::PermissionDenied)
        );
        let e = run(
            host,
            "add_inventory",
            json!({"character_id": "pc_002", "items": [{"name": "Coin"}]}),
        );
        assert_eq!(
            e.outcome.expect_err("refused").code,
            ErrorCode::PermissionDenied
        );
        // Brin's own turn moves Brin; anyone may be hurt or rolled for.
        let brin: &[CharacterId] = &["pc_002".into()];
        let moved = run(brin, "move", to_hall.clone())
            .outcome
            .expect("Brin moves");
        assert!(
            matches!(moved.effect, Some(Effect::Move { ref character_id, .. }) if character_id == "pc_002")
        );
        let hurt = run(
            host,
            "hp_delta",
            json!({"target_character_id": "pc_002", "delta": -1, "cause": "a fall"}),
        );
        assert!(hurt.outcome.is_ok(), "{:?}", hurt.outcome.err());
        // A tool that names no one acts as the speaker.
        let stats = run(brin, "add_inventory", json!({"items": [{"name": "Coin"}]}));
        assert_eq!(
            stats.outcome.expect("added").result["character_id"],
            "pc_002"
        );
        // Outside turns (a direct call) nothing is restricted by seats.
        let direct = run(
            &[],
            "add_inventory",
            json!({"character_id": "pc_002", "items": [{"name": "Coin"}]}),
        );
        assert!(direct.outcome.is_ok());
    }

    #[test]
    fn disabled_tools_answer_tool_disabled_and_are_listed_nowhere() {
        let registry = Registry::builtin_with(&["roll_dice"], Duration::from_millis(700)).unwrap();
        let allowlist: Vec<String> = registry.names().iter().map(|s| s.to_string()).collect();
        let caller = Caller::sessionless(Role::Service, &allowlist);
        let e = registry
            .invoke(
                "roll_dice",
                RawArgs::Value(json!({"dice": "1d6"})),
                &caller,
                &demo(),
                &mut SplitMix64::new(1),
            )
            .outcome
            .expect_err("a disabled tool never runs");
        assert_eq!(
            (e.reason, e.code, e.status()),
            (
                Reason::ToolDisabled,
                ErrorCode::ToolDisabled,
                ToolStatus::Rejected
            )
        );
        let gm = Caller::sessionless(Role::GameMaster, &allowlist);
        assert!(!registry.usable(&gm).any(|s| s.name == "roll_dice"));
        assert!(
            !registry
                .openai_tools(&gm)
                .iter()
                .any(|t| t["function"]["name"] == "roll_dice")
        );
        assert!(
            !registry
                .mcp_tools(&caller)
                .iter()
                .any(|t| t["name"] == "roll_dice")
        );
        assert!(registry.usable(&gm).any(|s| s.name == "move"));
        // The timeout is every tool's.
        assert!(
            registry
                .names()
                .iter()
                .all(|n| registry.spec(n).unwrap().timeout == Duration::from_millis(700))
        );
        let e = Registry::builtin_with(&["roll_dice", "fly"], DEFAULT_TOOL_TIMEOUT)
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("QUESTD_DISABLED_TOOLS")
                && e.contains("\"fly\"")
                && !e.contains("\"roll_dice\""),
            "{e}"
        );
    }

    /// A tool that answers who it runs for, as a later tool would read it.
    struct WhoAmI;

    impl Tool for WhoAmI {
        fn spec(&self) -> ToolSpec {
            ToolSpec::new(
                "who_am_i",
                "Who am I",
                "test",
                "Answers the caller's user id.",
                json!({"type": "object", "additionalProperties": false}),
                json!({"type": "object"}),
            )
        }

        fn run(&self, _args: &Value, ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput {
                result: json!({"user_id": ctx.user_id, "role": ctx.role}),
                effect: None,
            })
        }
    }

    #[test]
    fn the_callers_user_reaches_the_tool() {
        let mut registry = Registry::builtin().unwrap();
        registry.register(Box::new(WhoAmI)).unwrap();
        let allowlist = vec!["who_am_i".to_owned()];
        let run = |caller: &Caller<'_>| {
            registry
                .invoke(
                    "who_am_i",
                    RawArgs::Value(json!({})),
                    caller,
                    &demo(),
                    &mut SplitMix64::new(1),
                )
                .outcome
                .unwrap()
                .result
        };
        let service = || Caller::sessionless(Role::Service, &allowlist);
        assert_eq!(
            run(&service().for_user(Some("user-7"))),
            json!({"user_id": "user-7", "role": "service"})
        );
        assert_eq!(run(&service()), json!({"user_id": null, "role": "service"}));
    }

    /// A tool whose result is a text of the length it is asked for.
    struct Echo;

    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec::new(
                "echo",
                "Echo",
                "test",
                "Answers a text of `bytes` bytes.",
                json!({"type": "object", "properties": {"bytes": {"type": "integer"}}}),
                json!({"type": "object"}),
            )
        }

        fn run(&self, args: &Value, _ctx: &mut ToolContext<'_>) -> Result<ToolOutput, ToolError> {
            let bytes = args["bytes"].as_u64().unwrap_or(0) as usize;
            Ok(ToolOutput {
                result: json!({"text": "é\"".repeat(bytes / 4)}),
                effect: None,
            })
        }
    }

    #[test]
    fn a_result_is_answered_with_its_text_and_refused_over_the_bound() {
        let mut registry = Registry::builtin().unwrap();
        registry.register(Box::new(Echo)).unwrap();
        let allowlist = vec!["echo".to_owned()];
        let caller = Caller::sessionless(Role::Service, &allowlist);
        let run = |bytes: usize| {
            registry.invoke(
                "echo",
                RawArgs::Value(json!({ "bytes": bytes })),
                &caller,
                &demo(),
                &mut SplitMix64::new(1),
            )
        };
        // "é\"" is 3 bytes and written as 4: the text's size is what counts.
        let within = run(MAX_RESULT_BYTES - 16);
        let result = &within.outcome.as_ref().expect("within the bound").result;
        assert_eq!(
            within.result_text.as_ref().map(|t| t.get().to_owned()),
            Some(result.to_string())
        );
        let over = run(MAX_RESULT_BYTES + 4);
        let e = over.outcome.expect_err("over the bound");
        assert_eq!(
            (e.reason, e.code),
            (Reason::ExecutionFailed, ErrorCode::ExecutionFailed)
        );
        assert!(e.message.contains("larger than"), "{}", e.message);
        assert!(over.result_text.is_none());
    }

    #[test]
    fn malformed_arguments_are_invalid_args() {
        for text in [
            "{\"dice\":",
            "{\"dice\":\"1d6\"} junk",
            "null",
            "[1,2]",
            "\"1d6\"",
            "7",
            "",
            "   ",
        ] {
            let e = err(run("roll_dice", RawArgs::Text(text.into()), &["roll_dice"]));
            assert_eq!(
                (e.reason, e.code),
                (Reason::InvalidArgs, ErrorCode::InvalidArgs),
                "{text}"
            );
        }
    }

    #[test]
    fn pipeline_refusals_have_their_reasons() {
        let e = err(run("fly", RawArgs::Text("{}".into()), &["move"]));
        assert_eq!(
            (e.reason, e.code, e.status()),
            (Reason::NotFound, ErrorCode::ToolNotFound, ToolStatus::Error)
        );
        assert!(
            e.message.contains("move"),
            "lists usable tools: {}",
            e.message
        );

        let e = err(run(
            "roll_dice",
            RawArgs::Value(json!({"dice": "1d6"})),
            &["move"],
        ));
        assert_eq!(
            (e.reason, e.status()),
            (Reason::ToolNotAllowed, ToolStatus::Rejected)
        );

        let e = err(run(
            "roll_dice",
            RawArgs::Value(json!({"dice": 6})),
            &["roll_dice"],
        ));
        assert!(e.message.contains("/dice"), "{}", e.message);
    }

    #[test]
    fn every_schema_error_is_listed() {
        let e = err(run(
            "move",
            RawArgs::Value(json!({"actor_id": 1, "to_area_id": 2})),
            &["move"],
        ));
        assert!(
            e.message.contains("/actor_id") && e.message.contains("/to_area_id"),
            "{}",
            e.message
        );
    }

    #[test]
    fn args_hash_ignores_key_order_and_spacing() {
        use sha2::Digest;
        let a = json!({"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "é"}});
        let b: Value =
            serde_json::from_str(r#"{ "a": {"x": "é", "y": [1, {"c": 3, "d": 2}]}, "b": 1 }"#)
                .unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#
        );
        assert_eq!(args_hash(&a), args_hash(&b));
        assert_eq!(
            args_hash(&a),
            crate::game::pieces::hex(&sha2::Sha256::digest(canonical_json(&a).as_bytes()))
        );
        assert_eq!(args_hash(&a).len(), 64);
        assert_ne!(args_hash(&a), args_hash(&json!({"b": 2})));
    }

    #[test]
    fn every_tool_is_listed_in_every_shape_with_valid_schemas() {
        let registry = Registry::builtin().unwrap();
        let allowlist: Vec<String> = registry.names().iter().map(|s| s.to_string()).collect();
        for role in ALL_ROLES {
            let caller = Caller {
                acting: &[],
                role: *role,
                allowlist: &allowlist,
                session_id: &test_support::session(),
                user_id: None,
                site_id: None,
            };
            let mcp = registry.mcp_tools(&caller);
            let openai = registry.openai_tools(&caller);
            if *role != Role::GameMaster {
                assert_eq!(mcp.len(), registry.usable(&caller).count());
            }
            assert_eq!(openai.len(), mcp.len());
            for t in &mcp {
                assert!(t["inputSchema"]["type"] == "object", "{t}");
                assert!(t["annotations"]["readOnlyHint"].is_boolean());
            }
        }
        for name in registry.names() {
            let spec = registry.spec(name).unwrap();
            assert!(
                !spec.description.is_empty() && !spec.title.is_empty() && !spec.category.is_empty()
            );
            assert_eq!(
                spec.input_schema["additionalProperties"],
                json!(false),
                "{name} refuses unknown args"
            );
            assert_eq!(spec.read_only, !spec.writes_state, "{name}");
        }
        // The model never sees the people-only tools.
        let gm = Caller {
            acting: &[],
            role: Role::GameMaster,
            allowlist: &allowlist,
            session_id: &test_support::session(),
            user_id: None,
            site_id: None,
        };
        let names: Vec<&str> = registry.usable(&gm).map(|s| s.name).collect();
        assert!(!names.contains(&"create_npc") && !names.contains(&"activate_npc"));
        assert!(names.contains(&"search_content") && names.contains(&"generate_zone"));
    }

    #[test]
    fn only_tools_that_want_written_content_ask_for_it() {
        let registry = Registry::builtin().unwrap();
        let zone =
            json!({"session_id": test_support::SESSION, "world_prompt": "salt flats", "count": 2});
        assert!(registry.content_request("generate_zone", &zone).is_some());
        assert!(
            registry
                .content_request("roll_dice", &json!({"dice": "1d6"}))
                .is_none()
        );
        assert!(registry.content_request("no_such_tool", &zone).is_none());
        let mut args = zone.clone();
        let text = r#"[{"name": "Glass Pan", "description": "White."}, {"name": "Cairn Field", "description": "Stones."}]"#;
        assert_eq!(
            registry.with_content("generate_zone", &mut args, text),
            Ok(())
        );
        assert_eq!(args["zone_texts"][1]["name"], "Cairn Field");
        // With texts given, no more are asked for; bad text is a reason.
        assert!(registry.content_request("generate_zone", &args).is_none());
        let mut args = zone;
        assert!(
            registry
                .with_content("generate_zone", &mut args, "no json")
                .is_err()
        );
        assert!(
            registry
                .with_content("roll_dice", &mut json!({}), "[]")
                .is_err()
        );
    }

    #[test]
    fn openai_tools_follow_the_allowlist() {
        let registry = Registry::builtin().unwrap();
        let allowlist = vec!["move".to_string()];
        let caller = Caller {
            acting: &[],
            role: Role::GameMaster,
            allowlist: &allowlist,
            session_id: &test_support::session(),
            user_id: None,
            site_id: None,
        };
        let tools = registry.openai_tools(&caller);
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0]["function"]["name"], "move");
        // Made once per role and allowlist, then shared.
        let same = vec!["move".to_string()];
        let again = registry.openai_tools(&Caller {
            acting: &[],
            allowlist: &same,
            ..caller
        });
        assert!(Arc::ptr_eq(&tools, &again));
        let two = vec!["move".to_string(), "roll_dice".to_string()];
        let other = registry.openai_tools(&Caller {
            acting: &[],
            allowlist: &two,
            ..caller
        });
        assert_eq!(other.len(), 2);
        let player = registry.openai_tools(&Caller {
            acting: &[],
            role: Role::Player,
            ..caller
        });
        assert!(!Arc::ptr_eq(&tools, &player));
        // Every distinct list a caller names is not kept forever.
        let names: Vec<String> = registry.names().iter().map(|n| (*n).to_owned()).collect();
        for i in 0..MAX_CACHED_TOOL_LISTS * 2 {
            let allowlist: Vec<String> = names
                .iter()
                .enumerate()
                .filter(|(j, _)| (i >> (j % 12)) & 1 == 1 || *j == i % names.len())
                .map(|(_, n)| n.clone())
                .collect();
            registry.openai_tools(&Caller {
                acting: &[],
                allowlist: &allowlist,
                ..caller
            });
        }
        let held = registry
            .openai_cache
            .lock()
            .map(|c| c.lists.values().map(Vec::len).sum::<usize>())
            .unwrap_or(usize::MAX);
        assert!(held <= MAX_CACHED_TOOL_LISTS, "{held}");
    }
}
