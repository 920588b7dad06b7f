//! Pure game rules and save state.
//!
//! Nothing in here does IO or knows about actix, HTTP, SQL or the wire format.
//! A tool turns a validated call into an [`Effect`]; applying an effect is
//! deterministic, so replaying the journal rebuilds exactly the same state.

pub mod approvals;
pub mod campaign;
pub mod content;
pub mod dice;
pub mod entities;
pub mod mapgen;
pub mod names;
pub mod party;
pub mod pieces;
pub mod rng;
pub mod save;
pub mod state;
pub mod timers;
pub mod zones;

pub use campaign::{BUILTIN_CAMPAIGNS, BuiltinStarts, Campaign, CampaignError};
pub use state::{Area, Character, CharacterState, Effect, GameState, HistoryEntry, Item};
