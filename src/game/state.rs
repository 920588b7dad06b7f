//! The save state of one session and the effects that change it.
//!
//! `GameState` is what a session actor owns. It changes only through
//! [`GameState::apply`], which is deterministic: the journal stores effects
//! (never the random choices that produced them), so replay gives back the
//! same state.

use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::content::{ContentEntry, ContentStatus, NpcProfile};
use super::zones::{GridPos, MovementLogEntry, PlayerRuntime, Zone};
use crate::ids::{CallId, TurnId};

// The map's and the characters' ids are the crate's (`crate::ids`), here
// under the names `game` has always given them.
use super::party::{Invite, Party, RoundAction, Seat, SeatRole, SeatState, TurnMode};
pub use crate::ids::{AreaId, CharacterId};
use crate::ids::{SeatId, TimerId};

/// Content type of a Chinese name (docs/protocol.md §7.1).
pub const NAME_ZH_TYPE: &str = "name_zh";
/// What a Chinese name's `content_id` starts with, before the id it names.
const NAME_ZH_PREFIX: &str = "zh_";

/// The id a content entry gives the Chinese name of, when it is one: a
/// draft of type `name_zh` whose `content_id` is `zh_<id>`.
pub fn names_in_chinese(e: &ContentEntry) -> Option<&str> {
    let id = e.content_id.strip_prefix(NAME_ZH_PREFIX)?;
    (e.content_type == NAME_ZH_TYPE && e.status == ContentStatus::Draft).then_some(id)
}
/// How the id of an item's Chinese name begins: `item_<slug>`.
const ITEM_PREFIX: &str = "item_";

/// Entries of chat history kept for the model; older turns are dropped whole.
pub const HISTORY_LIMIT: usize = 200;
/// User events kept in the save state; older ones stay in the journal only.
pub const EVENT_LIMIT: usize = 500;
/// Most areas one session's map may hold, the campaign's and those made
/// during play together. Tools that would grow the map past it refuse;
/// [`GameState::apply`] ignores areas past it.
pub const MAX_SESSION_AREAS: usize = 5000;
/// Most areas one area may link to (its `reachable_area_ids`). Campaigns
/// over it are refused, tools refuse to add a link past it, and
/// [`GameState::apply`] ignores links past it, so a move's options and a
/// site map stay small however the map was made.
pub const MAX_LINKS_PER_AREA: usize = 64;
/// Most kinds of item (stacks) one character may carry.
pub const MAX_INVENTORY_ITEMS: usize = 100;
/// Most of one item (one stack's quantity) a character may hold.
pub const MAX_STACK: u32 = 1_000_000;
/// Highest max_hp, and so hp, a character may have; hp is never below 0.
pub const MAX_HP: i64 = 100_000;
/// Highest level a character may reach; the lowest is 1.
pub const MAX_LEVEL: u32 = 100;
/// Most named stats on one character.
pub const MAX_STATS_PER_CHARACTER: usize = 64;
/// Largest absolute value of an area's x, y or z in a campaign. Far below
/// `i64::MAX`, so layout arithmetic on generated areas cannot overflow.
pub const MAX_COORD: i64 = 1_000_000_000;

/// One place on the map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Area {
    pub area_id: AreaId,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub reachable_area_ids: Vec<AreaId>,
    #[serde(default)]
    pub x: i64,
    #[serde(default)]
    pub y: i64,
    #[serde(default)]
    pub z: i64,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The group a generated place belongs to: the theme it was made on,
    /// as a title ("Crystal Caves", "洞穴"); empty for a campaign's own
    /// places and for places made without a theme. A map labels a group
    /// once and names its places by `short_name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The place's name within its `group` ("Silent Gallery"); empty when
    /// `group` is. `name` stays the full name, unique on the map, that
    /// the game master says and `move` takes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub short_name: String,
}

/// Whether a character may act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CharacterState {
    #[default]
    Active,
    /// At 0 HP: cannot act until healed.
    #[serde(alias = "down")]
    Downed,
}

/// An item in an inventory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Item {
    pub slug: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default = "one")]
    pub quantity: u32,
}

fn one() -> u32 {
    1
}

fn default_level() -> u32 {
    1
}

/// A player character (`kind: "pc"`) or NPC (`kind: "npc"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Character {
    pub character_id: CharacterId,
    pub name: String,
    pub kind: String,
    pub area_id: AreaId,
    pub hp: i64,
    pub max_hp: i64,
    #[serde(default = "default_level")]
    pub level: u32,
    #[serde(default)]
    pub stats: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub inventory: Vec<Item>,
    #[serde(default)]
    pub state: CharacterState,
}

/// Something a client reported about what a user did (`log_user_event`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserEvent {
    pub event_id: String,
    pub event_type: String,
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub payload: serde_json::Value,
    pub turn: u64,
    /// When the call that logged it ran (RFC 3339 UTC), journalled so that
    /// replay keeps it; events saved before it was kept have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logged_at: Option<String>,
}

/// One entry of the conversation the model sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum HistoryEntry {
    /// What the player wrote; `seat_id` is the seat that said it (its
    /// `turn_started`'s), none for a round's message and for entries
    /// kept before seats were.
    User {
        turn_id: TurnId,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seat_id: Option<SeatId>,
    },
    /// The model asked for a tool; `arguments` is the raw JSON text it sent.
    ToolCall {
        turn_id: TurnId,
        call_id: CallId,
        tool: String,
        arguments: String,
    },
    /// What a tool call gave back, as the model will read it.
    ToolResult {
        turn_id: TurnId,
        call_id: CallId,
        tool: String,
        content: String,
    },
    /// The game master's narrative that closed a turn.
    Assistant { turn_id: TurnId, text: String },
}

/// A change to the save state, as journalled. Values are absolute, so applying
/// an effect twice gives the same state as applying it once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// A turn began; the state's turn counter becomes `turn`.
    BeginTurn {
        turn: u64,
    },
    Move {
        character_id: CharacterId,
        to_area_id: AreaId,
    },
    Hp {
        character_id: CharacterId,
        hp: i64,
        state: CharacterState,
    },
    /// New areas, plus links from existing areas to them.
    AddAreas {
        areas: Vec<Area>,
        links: Vec<(AreaId, AreaId)>,
    },
    AddZones {
        zones: Vec<Zone>,
    },
    /// The player travelled to a zone.
    MoveToZone {
        position: GridPos,
        entry: MovementLogEntry,
    },
    SetInventory {
        character_id: CharacterId,
        inventory: Vec<Item>,
    },
    /// A character's sheet replaced whole (`update_character`).
    SetCharacter {
        character: Character,
    },
    AddContent {
        entry: ContentEntry,
    },
    LogEvent {
        event: UserEvent,
    },
    /// An NPC created or replaced whole.
    PutNpc {
        npc: NpcProfile,
    },
    /// The turn that resolves a round began (rounds mode): the state's
    /// turn counter becomes `turn` and round `round + 1` begins.
    BeginRound {
        turn: u64,
        round: u64,
    },
    /// The host made an invite (its code only as a digest). `at` is when,
    /// so used-up and expired invites are dropped the same on every replay.
    InviteCreated {
        invite: Invite,
        at: i64,
    },
    /// Someone joined by invite: their seat, their new character (when no
    /// free campaign `pc` was left) and the invite's uses after it.
    SeatJoined {
        seat: Seat,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        character: Option<Box<Character>>,
        invite_id: String,
        invite_uses: u32,
    },
    /// A seat's role or state changed (kick, host handed over).
    SeatChanged {
        seat_id: SeatId,
        role: SeatRole,
        state: SeatState,
    },
    /// The host switched the turn mode.
    ModeChanged {
        turn_mode: TurnMode,
        round_timeout_s: u32,
    },
    /// A seat's action for round `round` (rounds mode), at `at`.
    ActionSubmitted {
        round: u64,
        action: RoundAction,
        at: i64,
    },
    /// `schedule_event` made a timer, replacing the one of its key.
    TimerScheduled {
        timer: super::timers::Timer,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<TimerId>,
    },
    /// A timer was cancelled (`cancel_event`, or an operator).
    TimerCancelled {
        timer_id: TimerId,
    },
    /// The game master's call waits for a person's decision
    /// (docs/protocol.md §19): its turn pauses.
    ApprovalRequested {
        approval: super::approvals::Approval,
    },
    /// A person (or the timeout) decided on a pending approval; its call
    /// runs, or is refused with `APPROVAL_DENIED`, in the frames after.
    ApprovalResolved {
        approval_id: String,
        decision: super::approvals::Decision,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by_seat_id: Option<SeatId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A world turn began: the state's turn counter becomes `turn`, and
    /// the timer due at `due_at` fired: it is gone, or due again at
    /// `next_due_at`. One journalled frame does both, so a due time fires
    /// exactly once.
    FireTimer {
        turn: u64,
        timer_id: TimerId,
        due_at: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_due_at: Option<i64>,
    },
}

/// Parts of a save state that sessions started from the same built-in
/// campaign share in memory until one of them changes its copy
/// (`Arc::make_mut`); serialized as a plain list.
pub type Shared<T> = Arc<Vec<T>>;

/// The areas of a map in their order, with an index by id so that finding
/// an area (every move, every route of a site map) is not a scan of the map.
///
/// Sessions started from the same built-in campaign share both parts until
/// one of them changes its map (`Arc::make_mut`). It serializes as the plain
/// list of areas, so snapshots look as they always did; the index is never
/// stored, and is rebuilt when a snapshot is read. Changes go only through
/// [`AreaMap::push`] and [`AreaMap::link`], which keep the two in step.
#[derive(Clone, Default)]
pub struct AreaMap {
    areas: Arc<Vec<Area>>,
    /// Position in `areas` of each id; for an id listed twice (only an old or
    /// hand-made snapshot can hold one) the first, as a scan would find.
    /// Hashed with foldhash, seeded per process: a model's context walks
    /// the map near the player, a few hundred lookups, which SipHash made
    /// a large part of building it.
    index: Arc<HashMap<AreaId, usize, foldhash::fast::RandomState>>,
}

impl AreaMap {
    /// The area with this id.
    pub fn get(&self, id: &str) -> Option<&Area> {
        self.index.get(id).and_then(|&i| self.areas.get(i))
    }

    pub fn contains(&self, id: &str) -> bool {
        self.index.contains_key(id)
    }

    /// Whether two maps share their areas in memory (nothing copied yet).
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.areas, &b.areas)
    }

    /// Adds an area whose id is new, while the map holds fewer than
    /// [`MAX_SESSION_AREAS`]; its links past [`MAX_LINKS_PER_AREA`] are
    /// dropped. Answers whether it was added.
    pub fn push(&mut self, mut area: Area) -> bool {
        if self.contains(area.area_id.as_str()) || self.areas.len() >= MAX_SESSION_AREAS {
            return false;
        }
        area.reachable_area_ids.truncate(MAX_LINKS_PER_AREA);
        let at = self.areas.len();
        Arc::make_mut(&mut self.index).insert(area.area_id.clone(), at);
        Arc::make_mut(&mut self.areas).push(area);
        true
    }

    /// Whether `from` exists and links to `to` already or has room for one
    /// more link.
    pub fn can_link(&self, from: &str, to: &AreaId) -> bool {
        self.get(from).is_some_and(|a| {
            a.reachable_area_ids.len() < MAX_LINKS_PER_AREA || a.reachable_area_ids.contains(to)
        })
    }

    /// Adds a one-way link from `from` (which must exist) to `to`, unless it
    /// is there already or `from` holds [`MAX_LINKS_PER_AREA`] links. Copies
    /// a shared map only when the link is new. Answers whether it was added.
    pub fn link(&mut self, from: &str, to: &AreaId) -> bool {
        let Some(&i) = self.index.get(from) else {
            return false;
        };
        let has_room = self.areas.get(i).is_some_and(|a| {
            !a.reachable_area_ids.contains(to) && a.reachable_area_ids.len() < MAX_LINKS_PER_AREA
        });
        if !has_room {
            return false;
        }
        match Arc::make_mut(&mut self.areas).get_mut(i) {
            Some(a) => {
                a.reachable_area_ids.push(to.clone());
                true
            }
            None => false,
        }
    }
}

impl From<Vec<Area>> for AreaMap {
    fn from(areas: Vec<Area>) -> Self {
        let mut index = HashMap::with_capacity_and_hasher(areas.len(), Default::default());
        for (i, a) in areas.iter().enumerate() {
            index.entry(a.area_id.clone()).or_insert(i);
        }
        Self {
            areas: Arc::new(areas),
            index: Arc::new(index),
        }
    }
}

impl Deref for AreaMap {
    type Target = [Area];

    fn deref(&self) -> &[Area] {
        &self.areas
    }
}

/// Equal when the areas are; the index follows from them.
impl PartialEq for AreaMap {
    fn eq(&self, other: &Self) -> bool {
        self.areas == other.areas
    }
}

impl std::fmt::Debug for AreaMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.areas.iter()).finish()
    }
}

impl Serialize for AreaMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.areas.serialize(s)
    }
}

impl<'de> Deserialize<'de> for AreaMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Area>::deserialize(d).map(Self::from)
    }
}

/// The whole save state of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GameState {
    pub campaign_id: String,
    pub title: String,
    /// Turns started in this session.
    pub turn: u64,
    pub active_actor_id: CharacterId,
    pub areas: AreaMap,
    /// Each shared, as the areas are, by the sessions started from the same
    /// built-in campaign until one changes it (`Arc::make_mut`): an idle
    /// session holds pointers, not 3.6 KiB of copies of the demo's four.
    /// Serialized as the plain list.
    pub characters: Vec<Arc<Character>>,
    /// Shared likewise; no session changes it.
    pub allowlist: Shared<String>,
    #[serde(default)]
    pub lore: Shared<String>,
    #[serde(default)]
    pub zones: Vec<Zone>,
    #[serde(default)]
    pub player: PlayerRuntime,
    #[serde(default)]
    pub npcs: Shared<NpcProfile>,
    #[serde(default)]
    pub content: Shared<ContentEntry>,
    #[serde(default)]
    pub events: VecDeque<UserEvent>,
    #[serde(default)]
    /// Shared with the model requests that carry it, so a request copies
    /// pointers, not text.
    pub history: VecDeque<Arc<HistoryEntry>>,
    /// The seats, invites, turn mode and round (docs/protocol.md §8).
    #[serde(default)]
    pub party: Party,
    /// The pending timers (docs/protocol.md §9).
    #[serde(default)]
    pub timers: super::timers::Timers,
    /// Which calls wait for a person, and the approvals pending
    /// (docs/protocol.md §19).
    #[serde(default)]
    pub approvals: super::approvals::Approvals,
}

impl AsRef<HistoryEntry> for HistoryEntry {
    fn as_ref(&self) -> &Self {
        self
    }
}

impl GameState {
    /// A state with nothing in it: what tools that need no session read.
    pub fn empty() -> Self {
        Self {
            campaign_id: String::new(),
            title: String::new(),
            turn: 0,
            active_actor_id: CharacterId::from(""),
            areas: AreaMap::default(),
            characters: Vec::new(),
            allowlist: Default::default(),
            lore: Shared::default(),
            zones: Vec::new(),
            player: PlayerRuntime::default(),
            npcs: Shared::default(),
            content: Shared::default(),
            events: VecDeque::new(),
            history: VecDeque::new(),
            party: Party::default(),
            timers: Default::default(),
            approvals: Default::default(),
        }
    }

    /// Gives a session made before parties its host seat (a new one gets
    /// it from its campaign): [`super::party::HOST_SEAT`] for the active
    /// character.
    pub fn ensure_host_seat(&mut self) {
        if self.party.seats.is_empty() && !self.active_actor_id.is_empty() {
            let name = self
                .character(self.active_actor_id.as_str())
                .map(|c| c.name.clone())
                .unwrap_or_else(|| self.active_actor_id.to_string());
            self.party.ensure_host(&self.active_actor_id, &name);
        }
    }

    pub fn area(&self, id: &str) -> Option<&Area> {
        self.areas.get(id)
    }

    pub fn zone(&self, id: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.zone_id == id)
    }

    pub fn npc(&self, id: &str) -> Option<&NpcProfile> {
        self.npcs.iter().find(|n| n.npc_id == id)
    }

    pub fn character(&self, id: &str) -> Option<&Character> {
        self.characters
            .iter()
            .find(|c| c.character_id == *id)
            .map(|c| &**c)
    }

    /// The character the player controls now.
    pub fn active_actor(&self) -> Option<&Character> {
        self.character(self.active_actor_id.as_str())
    }

    /// The Chinese names a player may see: the campaign's draft entries of
    /// type `name_zh` whose `content_id` is `zh_<id>` of an area or
    /// character here, `zh_item_<slug>` of an item (found yet or not: a
    /// name is no secret) or `zh_<campaign_id>` of the campaign itself
    /// (docs/protocol.md §7.1), as (id, entry), in the content's order. At
    /// most one per id.
    pub fn names_zh(&self) -> impl Iterator<Item = (&str, &ContentEntry)> {
        self.content.iter().filter_map(|e| {
            let id = names_in_chinese(e)?;
            let named = self.area(id).is_some()
                || self.character(id).is_some()
                || id.starts_with(ITEM_PREFIX)
                || (!id.is_empty() && id == self.campaign_id);
            named.then_some((id, e))
        })
    }

    /// Finds an area by id, or by name ignoring case.
    pub fn find_area(&self, id_or_name: &str) -> Option<&Area> {
        let wanted = id_or_name.trim();
        self.area(wanted).or_else(|| {
            let lower = wanted.to_lowercase();
            self.areas
                .iter()
                .find(|a| a.name.to_lowercase() == lower)
                .or_else(|| {
                    self.areas
                        .iter()
                        .find(|a| !lower.is_empty() && a.name.to_lowercase().contains(&lower))
                })
        })
    }

    /// Applies a journalled effect. Effects were checked when they were made;
    /// a reference to something that no longer exists is ignored, so replay
    /// never fails halfway.
    pub fn apply(&mut self, effect: &Effect) {
        match effect {
            Effect::BeginTurn { turn } => self.turn = self.turn.max(*turn),
            Effect::Move {
                character_id,
                to_area_id,
            } => {
                if let Some(c) = self.character_mut(character_id) {
                    c.area_id = to_area_id.clone();
                }
            }
            Effect::Hp {
                character_id,
                hp,
                state,
            } => {
                if let Some(c) = self.character_mut(character_id) {
                    c.hp = *hp;
                    c.state = *state;
                }
            }
            Effect::AddZones { zones } => {
                for zone in zones {
                    if self.zone(&zone.zone_id).is_none() {
                        self.zones.push(zone.clone());
                    }
                }
            }
            Effect::MoveToZone { position, entry } => {
                self.player.position = *position;
                self.player.current_zone_id = Some(entry.to_zone_id.clone());
                if !self
                    .player
                    .movement_log
                    .iter()
                    .any(|e| e.movement_log_id == entry.movement_log_id)
                {
                    // Logged under the turn it is applied in (see LogEvent).
                    let mut entry = entry.clone();
                    entry.turn = self.turn;
                    self.player.log_move(entry);
                }
            }
            Effect::SetInventory {
                character_id,
                inventory,
            } => {
                if let Some(c) = self.character_mut(character_id) {
                    c.inventory = inventory.clone();
                }
            }
            Effect::SetCharacter { character } => {
                // Replaced whole, so a shared one is not copied first.
                if let Some(c) = self.character_slot(&character.character_id) {
                    *c = Arc::new(character.clone());
                }
            }
            Effect::AddContent { entry } => {
                if !self
                    .content
                    .iter()
                    .any(|c| c.content_id == entry.content_id)
                {
                    Arc::make_mut(&mut self.content).push(entry.clone());
                }
            }
            Effect::LogEvent { event } => {
                if !self.events.iter().any(|e| e.event_id == event.event_id) {
                    // Logged under the turn it is applied in: effects apply
                    // in journal order, after their turn's start, while a
                    // tool may run before that start is durable (and
                    // applied) and so read the turn before.
                    let mut event = event.clone();
                    event.turn = self.turn;
                    self.events.push_back(event);
                    if self.events.len() > EVENT_LIMIT {
                        self.events.pop_front();
                    }
                }
            }
            Effect::BeginRound { turn, round } => {
                self.turn = self.turn.max(*turn);
                self.party.round_resolved(*round);
            }
            Effect::InviteCreated { invite, at } => self.party.invite_created(invite, *at),
            Effect::SeatJoined {
                seat,
                character,
                invite_id,
                invite_uses,
            } => {
                if let Some(character) = character
                    && self.character(&character.character_id).is_none()
                {
                    self.characters.push(Arc::new((**character).clone()));
                }
                self.party.seat_joined(seat, invite_id, *invite_uses);
            }
            Effect::SeatChanged {
                seat_id,
                role,
                state,
            } => self.party.seat_changed(seat_id.as_str(), *role, *state),
            Effect::ModeChanged {
                turn_mode,
                round_timeout_s,
            } => self.party.mode_changed(*turn_mode, *round_timeout_s),
            Effect::ActionSubmitted { round, action, at } => {
                self.party.action_submitted(*round, action, *at)
            }
            Effect::TimerScheduled { timer, replaces } => {
                self.timers.scheduled(timer, replaces.as_ref())
            }
            Effect::TimerCancelled { timer_id } => self.timers.cancelled(timer_id),
            Effect::ApprovalRequested { approval } => self.approvals.requested(approval),
            Effect::ApprovalResolved {
                approval_id,
                decision,
                by_seat_id,
                reason,
            } => self.approvals.resolved(
                approval_id,
                *decision,
                by_seat_id.as_ref(),
                reason.as_ref(),
            ),
            Effect::FireTimer {
                turn,
                timer_id,
                due_at,
                next_due_at,
            } => {
                self.turn = self.turn.max(*turn);
                self.timers.fired(timer_id, *due_at, *next_due_at);
            }
            Effect::PutNpc { npc } => {
                let npcs = Arc::make_mut(&mut self.npcs);
                match npcs.iter_mut().find(|n| n.npc_id == npc.npc_id) {
                    Some(existing) => *existing = npc.clone(),
                    None => npcs.push(npc.clone()),
                }
            }
            Effect::AddAreas { areas, links } => {
                // Tools check the caps before they make the effect; past
                // them, areas and links are ignored here, the same way on
                // every replay.
                for area in areas {
                    if !self.areas.contains(area.area_id.as_str()) {
                        self.areas.push(area.clone());
                    }
                }
                for (from, to) in links {
                    // Both ways or neither, so the map stays symmetric even
                    // where a cap stops a link.
                    if self.areas.can_link(from.as_str(), to)
                        && self.areas.can_link(to.as_str(), from)
                    {
                        self.areas.link(from.as_str(), to);
                        self.areas.link(to.as_str(), from);
                    }
                }
            }
        }
    }

    /// Appends to the model's history, dropping the oldest whole turns past
    /// [`HISTORY_LIMIT`] so a tool result never loses its call.
    pub fn record(&mut self, entry: Arc<HistoryEntry>) {
        if let HistoryEntry::ToolResult {
            turn_id, call_id, ..
        } = &*entry
        {
            // Noted in the state, not read back from the history, which
            // drops whole turns past its limit.
            self.approvals.result_recorded(turn_id, call_id);
        }
        self.history.push_back(entry);
        if self.history.len() > HISTORY_LIMIT {
            self.history.pop_front();
            while matches!(
                self.history.front().map(|e| &**e),
                Some(e) if !matches!(e, HistoryEntry::User { .. })
            ) {
                self.history.pop_front();
            }
        }
    }

    /// Character `id`, copied first if other sessions share it.
    fn character_mut(&mut self, id: &CharacterId) -> Option<&mut Character> {
        self.character_slot(id).map(Arc::make_mut)
    }

    /// Where character `id` is held, shared or not.
    fn character_slot(&mut self, id: &CharacterId) -> Option<&mut Arc<Character>> {
        self.characters.iter_mut().find(|c| &c.character_id == id)
    }
}

impl super::approvals::ApprovalRule {
    /// Whether the game master's call of `tool` with `args` (which passed
    /// every check of the pipeline) waits for a decision, read against
    /// `state`. (Here, beside the state it reads, so that `approvals`
    /// need not import the state that holds it.)
    pub fn asks(&self, tool: &str, args: &serde_json::Value, state: &GameState) -> bool {
        if !self.tools.iter().any(|t| t == tool) {
            return false;
        }
        if tool != "hp_delta" || !self.lethal_only {
            return true;
        }
        let target = args["target_character_id"].as_str().unwrap_or_default();
        let delta = args["delta"].as_i64().unwrap_or(0);
        state
            .characters
            .iter()
            .find(|c| c.character_id.as_str() == target)
            .is_some_and(|c| c.kind == "pc" && c.hp > 0 && c.hp + delta <= 0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn area(id: &str, name: &str, links: &[&str]) -> Area {
        Area {
            area_id: id.into(),
            name: name.into(),
            description: String::new(),
            reachable_area_ids: links.iter().map(|l| AreaId::from(*l)).collect(),
            x: 0,
            y: 0,
            z: 0,
            tags: vec![],
            group: String::new(),
            short_name: String::new(),
        }
    }

    /// A tool may run before its turn's start is applied (it is not waited
    /// for) and read the turn before; what it logs is filed under the turn
    /// in force when its effect applies, in journal order.
    #[test]
    fn events_and_moves_are_logged_under_the_turn_they_are_applied_in() {
        let mut s = state();
        s.apply(&Effect::BeginTurn { turn: 3 });
        s.apply(&Effect::LogEvent {
            event: UserEvent {
                event_id: "ev_1".into(),
                event_type: "ui.opened_map".into(),
                user_id: None,
                payload: Value::Null,
                turn: 2,
                logged_at: None,
            },
        });
        s.apply(&Effect::MoveToZone {
            position: GridPos { x: 1, y: 0, z: 0 },
            entry: MovementLogEntry {
                movement_log_id: "mv_1".into(),
                from_zone_id: None,
                to_zone_id: "zone_1_0_0".into(),
                distance_miles: 1.0,
                duration_min: 20,
                turn: 2,
            },
        });
        assert_eq!(s.events.back().map(|e| e.turn), Some(3));
        assert_eq!(s.player.movement_log.last().map(|e| e.turn), Some(3));
    }

    fn state() -> GameState {
        GameState {
            campaign_id: "t".into(),
            title: "t".into(),
            turn: 0,
            active_actor_id: "pc".into(),
            areas: vec![
                area("a1", "Entry Hall", &["a2"]),
                area("a2", "Side Room", &["a1"]),
            ]
            .into(),
            characters: vec![Arc::new(Character {
                character_id: "pc".into(),
                name: "Ayla".into(),
                kind: "pc".into(),
                area_id: "a1".into(),
                hp: 10,
                max_hp: 10,
                level: 1,
                stats: Default::default(),
                inventory: vec![],
                state: CharacterState::Active,
            })],
            allowlist: Default::default(),
            lore: Default::default(),
            zones: vec![],
            player: Default::default(),
            npcs: Default::default(),
            content: Default::default(),
            events: VecDeque::new(),
            history: VecDeque::new(),
            party: Default::default(),
            timers: Default::default(),
            approvals: Default::default(),
        }
    }

    #[test]
    fn find_area_by_id_name_and_part_of_name() {
        let s = state();
        assert_eq!(
            s.find_area("a2").map(|a| a.name.as_str()),
            Some("Side Room")
        );
        assert_eq!(
            s.find_area("side room").map(|a| a.area_id.as_str()),
            Some("a2")
        );
        assert_eq!(s.find_area("entry").map(|a| a.area_id.as_str()), Some("a1"));
        assert!(s.find_area("cellar").is_none());
    }

    #[test]
    fn effects_are_idempotent() {
        let mut s = state();
        let effects = [
            Effect::Move {
                character_id: "pc".into(),
                to_area_id: "a2".into(),
            },
            Effect::Hp {
                character_id: "pc".into(),
                hp: 0,
                state: CharacterState::Downed,
            },
            Effect::AddAreas {
                areas: vec![area("a3", "Crypt", &["a2"])],
                links: vec![("a2".into(), "a3".into())],
            },
        ];
        for e in &effects {
            s.apply(e);
        }
        let once = s.clone();
        for e in &effects {
            s.apply(e);
        }
        assert_eq!(s, once);
        assert_eq!(s.areas.len(), 3);
        assert!(
            s.area("a2")
                .is_some_and(|a| a.reachable_area_ids.contains(&"a3".into()))
        );
        assert_eq!(s.characters[0].state, CharacterState::Downed);
    }

    #[test]
    fn history_drops_whole_turns() {
        let mut s = state();
        for t in 0..HISTORY_LIMIT {
            let turn_id = TurnId::from(format!("turn_{t}"));
            s.record(Arc::new(HistoryEntry::User {
                turn_id: turn_id.clone(),
                text: "hi".into(),
                seat_id: None,
            }));
            s.record(Arc::new(HistoryEntry::ToolCall {
                turn_id: turn_id.clone(),
                call_id: "c".into(),
                tool: "roll_dice".into(),
                arguments: "{}".into(),
            }));
            s.record(Arc::new(HistoryEntry::ToolResult {
                turn_id,
                call_id: "c".into(),
                tool: "roll_dice".into(),
                content: "{}".into(),
            }));
        }
        assert!(s.history.len() <= HISTORY_LIMIT);
        assert!(matches!(
            s.history.front().map(|e| &**e),
            Some(HistoryEntry::User { .. })
        ));
    }

    #[test]
    fn the_area_index_follows_every_change_and_survives_a_snapshot() {
        let mut s = state();
        assert_eq!(s.area("a2").map(|a| a.name.as_str()), Some("Side Room"));
        assert!(s.area("a3").is_none());
        s.apply(&Effect::AddAreas {
            areas: vec![area("a3", "Crypt", &["a2"])],
            links: vec![("a2".into(), "a3".into())],
        });
        assert_eq!(s.area("a3").map(|a| a.name.as_str()), Some("Crypt"));
        // A snapshot is the plain list of areas; reading it back rebuilds
        // the index.
        let text = serde_json::to_string(&s).unwrap();
        let areas: Value = serde_json::from_str::<Value>(&text).unwrap()["areas"].clone();
        assert_eq!(areas[2]["area_id"], "a3");
        let back: GameState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        for id in ["a1", "a2", "a3"] {
            assert_eq!(
                back.area(id).map(|a| &a.area_id),
                s.area(id).map(|a| &a.area_id)
            );
        }
        // An old snapshot holding an id twice finds the first, as a scan did.
        let twice: AreaMap = vec![area("x", "First", &[]), area("x", "Second", &[])].into();
        assert_eq!(twice.get("x").map(|a| a.name.as_str()), Some("First"));
    }

    #[test]
    fn links_and_areas_past_their_caps_are_ignored() {
        let mut s = state();
        let many: Vec<Area> = (0..MAX_LINKS_PER_AREA + 5)
            .map(|i| area(&format!("n{i}"), "N", &[]))
            .collect();
        let links = many
            .iter()
            .map(|a| ("a1".into(), a.area_id.clone()))
            .collect();
        s.apply(&Effect::AddAreas { areas: many, links });
        let a1 = s.area("a1").unwrap();
        assert_eq!(a1.reachable_area_ids.len(), MAX_LINKS_PER_AREA);
        // Links run both ways or not at all.
        assert!(
            s.area("n0")
                .unwrap()
                .reachable_area_ids
                .contains(&"a1".into())
        );
        let crowded = format!("n{}", MAX_LINKS_PER_AREA + 4);
        assert!(s.area(&crowded).unwrap().reachable_area_ids.is_empty());

        let mut full = AreaMap::from(
            (0..MAX_SESSION_AREAS)
                .map(|i| area(&format!("f{i}"), "F", &[]))
                .collect::<Vec<_>>(),
        );
        assert!(!full.push(area("one_more", "O", &[])));
        assert!(full.get("one_more").is_none());
        assert_eq!(full.len(), MAX_SESSION_AREAS);
        let mut wide = area("wide", "W", &[]);
        wide.reachable_area_ids = (0..100).map(|i| AreaId::from(format!("w{i}"))).collect();
        let mut small = AreaMap::default();
        assert!(small.push(wide));
        assert_eq!(
            small.get("wide").unwrap().reachable_area_ids.len(),
            MAX_LINKS_PER_AREA
        );
    }
}
