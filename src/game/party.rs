//! The party at a session's table (docs/protocol.md §8): its seats, the
//! invitations that give new ones, the turn mode, and the round under way.
//!
//! All of it is save state: it changes only through journalled effects
//! ([`super::Effect`]), so a restart, a `kill -9` or another node loading
//! the session finds every seat, invite, kick, mode and submitted action
//! exactly as the journal left them. Secrets are kept only as SHA-256
//! digests ([`secret_hash`]) and never leave the store: the client snapshot
//! is a view (`crate::protocol`), not this struct.
//!
//! Pure rules only: no IO, no clock (times are handed in, ms since the
//! epoch).

use serde::{Deserialize, Serialize};

use crate::ids::{CharacterId, RequestId, SeatId, TurnId};

/// The host seat of every session: the creator's, opened by the session's
/// `player_token`.
pub const HOST_SEAT: &str = "seat_1";
/// [`HOST_SEAT`] as an id.
pub fn host_seat() -> SeatId {
    SeatId::from(HOST_SEAT)
}

/// Seats a session holds when its campaign names no `party.max_players`.
pub const DEFAULT_MAX_PLAYERS: u32 = 6;
/// Longest seat name, in characters.
pub const MAX_NAME_CHARS: usize = 40;
/// Invites a session keeps at once (live ones: used-up and expired ones
/// are dropped when a new one is made).
pub const MAX_LIVE_INVITES: usize = 32;
/// `round_timeout_s` when the host names none, and its bounds.
pub const DEFAULT_ROUND_TIMEOUT_S: u32 = 120;
pub const MIN_ROUND_TIMEOUT_S: u32 = 5;
pub const MAX_ROUND_TIMEOUT_S: u32 = 3600;

/// Highest `party.max_players` a campaign may name.
pub const MAX_PLAYERS_BOUND: u32 = 100;

/// What a player character made for a joining seat starts with, when the
/// campaign has no free `pc` left (the campaign's `pc_template`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcTemplate {
    /// 1 to 20.
    #[serde(default = "default_level")]
    pub level: u32,
    /// Hit points at full health, 1 to 1000.
    #[serde(default = "default_max_hp")]
    pub max_hp: i64,
    /// The character's stats, as a campaign character's.
    #[serde(default)]
    pub stats: serde_json::Map<String, serde_json::Value>,
}

fn default_level() -> u32 {
    1
}

fn default_max_hp() -> i64 {
    10
}

impl Default for PcTemplate {
    fn default() -> Self {
        Self {
            level: default_level(),
            max_hp: default_max_hp(),
            stats: serde_json::Map::new(),
        }
    }
}

/// How chats become turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnMode {
    /// Every chat is a turn, in arrival order (v2 behaviour).
    #[default]
    Free,
    /// Each seat's chat is its action for the round; one turn resolves
    /// them all.
    Rounds,
}

/// What a seat may do beyond playing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeatRole {
    Host,
    Player,
}

/// Whether a seat still plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeatState {
    Active,
    /// Removed by the host: its token is refused for good.
    Kicked,
    Left,
}

/// One seat: a person at the table, with a character of their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seat {
    pub seat_id: SeatId,
    pub character_id: CharacterId,
    pub name: String,
    pub role: SeatRole,
    pub state: SeatState,
    /// [`secret_hash`] of the seat's player token; `None` for the host
    /// seat [`HOST_SEAT`], whose token is the session's `player_token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_hash: Option<String>,
    /// When the seat was taken (ms since the epoch).
    #[serde(default)]
    pub joined_at: i64,
}

/// An invitation to join: its code is known only by its digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invite {
    /// Names the invite in the journal and the log (never the code).
    pub invite_id: String,
    /// [`secret_hash`] of the invite code.
    pub code_hash: String,
    pub max_uses: u32,
    pub uses: u32,
    /// ms since the epoch.
    pub expires_at: i64,
}

impl Invite {
    /// Whether the invite still lets someone join at `now`.
    pub fn usable(&self, now: i64) -> bool {
        self.uses < self.max_uses && now < self.expires_at
    }
}

/// One seat's action for a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundAction {
    pub seat_id: SeatId,
    pub character_id: CharacterId,
    pub text: String,
    #[serde(default)]
    pub request_id: Option<RequestId>,
}

/// The id a round's action is acknowledged with: the ack's `turn_id` in
/// rounds mode names the seat's action for the round (a replacement gets
/// the same one); the round's turn has its own id, in its `turn_started`.
/// The session acknowledges with it, and the store reads it back from a
/// resolved round's `turn_started` for the request ids a session knows
/// when it loads.
pub fn action_id(round: u64, seat_id: &SeatId) -> TurnId {
    TurnId::from(format!("round_{round}_{seat_id}"))
}

/// The round being gathered (rounds mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// The round's number, from 1.
    pub number: u64,
    /// The actions submitted so far, one per seat, in first-submitted order.
    #[serde(default)]
    pub actions: Vec<RoundAction>,
    /// When the round's first action was submitted (ms since the epoch):
    /// the deadline counts from here.
    #[serde(default)]
    pub first_at: Option<i64>,
}

impl Default for Round {
    fn default() -> Self {
        Self {
            number: 1,
            actions: Vec::new(),
            first_at: None,
        }
    }
}

/// The party of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Party {
    /// In the order they were taken; the first is [`HOST_SEAT`].
    #[serde(default)]
    pub seats: Vec<Seat>,
    #[serde(default)]
    pub invites: Vec<Invite>,
    #[serde(default)]
    pub turn_mode: TurnMode,
    #[serde(default = "default_round_timeout")]
    pub round_timeout_s: u32,
    #[serde(default)]
    pub round: Round,
    /// The number the next joined seat gets (`seat_<n>`).
    #[serde(default = "first_joined_seat")]
    pub next_seat: u32,
    /// Seats the session holds at most (the campaign's
    /// `party.max_players`; the node's `QUESTD_MAX_PLAYERS` caps it).
    #[serde(default = "default_max_players")]
    pub max_players: u32,
    /// What a character made for a joining seat starts with.
    #[serde(default)]
    pub pc_template: PcTemplate,
}

fn default_max_players() -> u32 {
    DEFAULT_MAX_PLAYERS
}

fn default_round_timeout() -> u32 {
    DEFAULT_ROUND_TIMEOUT_S
}

fn first_joined_seat() -> u32 {
    2
}

impl Default for Party {
    fn default() -> Self {
        Self {
            seats: Vec::new(),
            invites: Vec::new(),
            turn_mode: TurnMode::Free,
            round_timeout_s: DEFAULT_ROUND_TIMEOUT_S,
            round: Round::default(),
            next_seat: first_joined_seat(),
            max_players: DEFAULT_MAX_PLAYERS,
            pc_template: PcTemplate::default(),
        }
    }
}

/// Who a session token is, as far as the party knows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenSeat<'a> {
    /// An active seat.
    Seat(&'a Seat),
    /// A seat's token, but the seat was kicked or left: refused for good.
    Gone,
    /// No seat's token.
    Unknown,
}

impl Party {
    /// Makes sure the host seat exists: a session made before parties (or
    /// a new one) gets [`HOST_SEAT`] for `character_id`, named `name`.
    pub fn ensure_host(&mut self, character_id: &CharacterId, name: &str) {
        if self.seats.is_empty() {
            self.seats.push(Seat {
                seat_id: SeatId::from(HOST_SEAT),
                character_id: character_id.clone(),
                name: name.chars().take(MAX_NAME_CHARS).collect(),
                role: SeatRole::Host,
                state: SeatState::Active,
                token_hash: None,
                joined_at: 0,
            });
        }
    }

    pub fn seat(&self, seat_id: &str) -> Option<&Seat> {
        self.seats.iter().find(|s| s.seat_id.as_str() == seat_id)
    }

    fn seat_mut(&mut self, seat_id: &str) -> Option<&mut Seat> {
        self.seats
            .iter_mut()
            .find(|s| s.seat_id.as_str() == seat_id)
    }

    /// The seat that holds the host role now.
    pub fn host(&self) -> Option<&Seat> {
        self.seats
            .iter()
            .find(|s| s.role == SeatRole::Host && s.state == SeatState::Active)
    }

    /// The seats still playing.
    pub fn active(&self) -> impl Iterator<Item = &Seat> {
        self.seats.iter().filter(|s| s.state == SeatState::Active)
    }

    /// The active seat whose character is `character_id`, if one is.
    pub fn seat_of_character(&self, character_id: &str) -> Option<&Seat> {
        self.active()
            .find(|s| s.character_id.as_str() == character_id)
    }

    /// Whether any seat (active or not) holds `character_id`.
    pub fn holds_character(&self, character_id: &str) -> bool {
        self.seats
            .iter()
            .any(|s| s.character_id.as_str() == character_id)
    }

    /// Whether anyone joined the session beside its host, kicked since or
    /// not: a session nobody joined behaves as before parties (contract §8).
    pub fn someone_joined(&self) -> bool {
        self.seats.len() > 1
    }

    /// Seats counted against `max_players`: every seat ever taken but the
    /// kicked and left ones.
    pub fn seated(&self) -> usize {
        self.active().count()
    }

    /// Which seat `token` opens. `is_session_token` says whether it is the
    /// session's own `player_token` (checked by the caller, in constant
    /// time): that one is [`HOST_SEAT`]'s. Other tokens are compared by
    /// digest with every seat's, each in constant time.
    pub fn seat_for_token(&self, token: &str, is_session_token: bool) -> TokenSeat<'_> {
        let found = if is_session_token {
            self.seat(HOST_SEAT)
        } else {
            let digest = secret_hash(token);
            let mut found = None;
            for seat in &self.seats {
                if let Some(hash) = &seat.token_hash
                    && same_digest(hash, &digest)
                {
                    found = Some(seat);
                }
            }
            found
        };
        match found {
            Some(seat) if seat.state == SeatState::Active => TokenSeat::Seat(seat),
            Some(_) => TokenSeat::Gone,
            None => TokenSeat::Unknown,
        }
    }

    /// The invite whose code is `code`, if it is usable at `now`. Every
    /// invite is compared, each in constant time.
    pub fn invite_for_code(&self, code: &str, now: i64) -> Option<&Invite> {
        let digest = secret_hash(code);
        let mut found = None;
        for invite in &self.invites {
            if same_digest(&invite.code_hash, &digest) {
                found = Some(invite);
            }
        }
        found.filter(|i| i.usable(now))
    }

    /// The seats that still have to act this round, of those `online`
    /// says are connected: when none is left the round resolves.
    pub fn waiting_for<'a>(&'a self, online: impl Fn(&SeatId) -> bool + 'a) -> Vec<&'a Seat> {
        self.active()
            .filter(|s| online(&s.seat_id))
            .filter(|s| !self.round.actions.iter().any(|a| a.seat_id == s.seat_id))
            .collect()
    }

    /// When the round under way must resolve (ms since the epoch): its
    /// first action's time plus the timeout; `None` before any action.
    pub fn round_deadline(&self) -> Option<i64> {
        self.round
            .first_at
            .map(|at| at + i64::from(self.round_timeout_s) * 1000)
    }

    // ----- applying effects (called by `GameState::apply`) -----------------

    pub(super) fn invite_created(&mut self, invite: &Invite, now: i64) {
        if self.invites.iter().any(|i| i.invite_id == invite.invite_id) {
            return;
        }
        self.invites.retain(|i| i.usable(now));
        self.invites.push(invite.clone());
    }

    pub(super) fn seat_joined(&mut self, seat: &Seat, invite_id: &str, invite_uses: u32) {
        if let Some(invite) = self.invites.iter_mut().find(|i| i.invite_id == invite_id) {
            invite.uses = invite_uses;
        }
        if self.seat(seat.seat_id.as_str()).is_none() {
            self.seats.push(seat.clone());
        }
        if let Some(n) = seat
            .seat_id
            .as_str()
            .strip_prefix("seat_")
            .and_then(|n| n.parse::<u32>().ok())
        {
            self.next_seat = self.next_seat.max(n + 1);
        }
    }

    pub(super) fn seat_changed(&mut self, seat_id: &str, role: SeatRole, state: SeatState) {
        if let Some(seat) = self.seat_mut(seat_id) {
            seat.role = role;
            seat.state = state;
        }
        if state != SeatState::Active {
            // A seat that left has no action in the round any more; a
            // round left with none has not begun, so its deadline counts
            // from the next action taken.
            self.round.actions.retain(|a| a.seat_id.as_str() != seat_id);
            if self.round.actions.is_empty() {
                self.round.first_at = None;
            }
        }
    }

    pub(super) fn mode_changed(&mut self, turn_mode: TurnMode, round_timeout_s: u32) {
        self.turn_mode = turn_mode;
        self.round_timeout_s = round_timeout_s;
    }

    pub(super) fn action_submitted(&mut self, round: u64, action: &RoundAction, at: i64) {
        if round != self.round.number {
            return;
        }
        self.round.first_at.get_or_insert(at);
        match self
            .round
            .actions
            .iter_mut()
            .find(|a| a.seat_id == action.seat_id)
        {
            Some(existing) => *existing = action.clone(),
            None => self.round.actions.push(action.clone()),
        }
    }

    /// The turn that resolves `round` started: the next round begins.
    pub(super) fn round_resolved(&mut self, round: u64) {
        if round >= self.round.number {
            self.round = Round {
                number: round + 1,
                actions: Vec::new(),
                first_at: None,
            };
        }
    }
}

/// The hex SHA-256 digest a secret (a seat token, an invite code) is
/// stored as.
pub fn secret_hash(secret: &str) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(secret.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// How a session's own player token is stored: this prefix and the
/// token's [`secret_hash`], like a seat's. Rows stored before tokens were
/// hashed hold the token itself until the store's start rewrites them.
pub const HASHED_TOKEN: &str = "sha256:";

/// The stored form of a session's player token ([`HASHED_TOKEN`]).
pub fn stored_token(token: &str) -> String {
    format!("{HASHED_TOKEN}{}", secret_hash(token))
}

/// Whether `token` is the one stored as `stored` ([`stored_token`], or the
/// token itself in a row not yet rewritten), in constant time either way.
pub fn opens_stored(stored: &str, token: &str) -> bool {
    Presented::of(token).opens(stored)
}

/// A token a caller presented, digested once to be compared with several
/// stored tokens (a session's player and spectator tokens).
pub struct Presented(String);

impl Presented {
    pub fn of(token: &str) -> Self {
        Self(secret_hash(token))
    }

    /// [`opens_stored`] for this token.
    pub fn opens(&self, stored: &str) -> bool {
        match stored.strip_prefix(HASHED_TOKEN) {
            Some(hash) => same_digest(hash, &self.0),
            None => same_digest(&secret_hash(stored), &self.0),
        }
    }
}

/// Compares two digests without stopping at the first difference.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)))
            == 0
}

/// The one answer for every invite that opens nothing: unknown, used up,
/// expired, another session's, or named under another tenant.
pub const NO_INVITE: &str = "no such invite: it is unknown, used up or expired";

/// Characters that show nothing themselves but hide or reorder the text
/// around them: the zero-width space, the word joiner and invisible
/// operators, the byte order mark, and the embeddings, overrides and
/// isolates of bidirectional text. A seat's name is shown to every other
/// player: "\u{200b}" would look like no name, and "a\u{202e}b" would
/// show the text after it reversed. The joiners that scripts and emoji
/// need (U+200C, U+200D) and the direction marks (U+200E, U+200F,
/// U+061C) stay allowed.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200b}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
    )
}

/// Checks a seat name: 1 to [`MAX_NAME_CHARS`] characters, no control
/// characters, no invisible ones that hide or reorder text ([`invisible`]),
/// not only spaces. Answers it trimmed.
pub fn check_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    let n = name.chars().count();
    if n == 0 || n > MAX_NAME_CHARS || name.chars().any(|c| c.is_control() || invisible(c)) {
        return Err(format!(
            "name must be 1 to {MAX_NAME_CHARS} characters without control or invisible \
             formatting characters"
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_token_holds_no_token_and_opens_only_for_it() {
        // SHA-256's own test vector, in lower-case hex: the digests
        // stored before keep matching.
        assert_eq!(
            secret_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let token = "k3JpQ9wZ";
        let stored = stored_token(token);
        assert!(stored.starts_with(HASHED_TOKEN));
        assert!(!stored.contains(token));
        assert!(opens_stored(&stored, token));
        assert!(!opens_stored(&stored, "k3JpQ9wz"));
        assert!(!opens_stored(&stored, ""));
        // Whoever reads the row cannot use what it holds as the token.
        assert!(!opens_stored(&stored, &stored));
        // A row stored before tokens were hashed.
        assert!(opens_stored(token, token));
        assert!(!opens_stored(token, "other"));
    }

    fn seat(n: u32, token: &str) -> Seat {
        Seat {
            seat_id: SeatId::from(format!("seat_{n}")),
            character_id: CharacterId::from(format!("pc_{n:03}")),
            name: format!("P{n}"),
            role: SeatRole::Player,
            state: SeatState::Active,
            token_hash: Some(secret_hash(token)),
            joined_at: 1,
        }
    }

    fn party() -> Party {
        let mut p = Party::default();
        p.ensure_host(&CharacterId::from("pc_001"), "Ayla");
        p
    }

    fn action(n: u32, text: &str) -> RoundAction {
        RoundAction {
            seat_id: SeatId::from(format!("seat_{n}")),
            character_id: CharacterId::from(format!("pc_{n:03}")),
            text: text.into(),
            request_id: None,
        }
    }

    #[test]
    fn the_host_seat_is_made_once_and_opened_by_the_session_token() {
        let mut p = party();
        p.ensure_host(&CharacterId::from("pc_009"), "Other");
        assert_eq!(p.seats.len(), 1);
        assert_eq!(p.host().unwrap().character_id.as_str(), "pc_001");
        assert!(
            matches!(p.seat_for_token("anything", true), TokenSeat::Seat(s) if s.seat_id.as_str() == HOST_SEAT)
        );
        assert_eq!(p.seat_for_token("anything", false), TokenSeat::Unknown);
    }

    #[test]
    fn a_joined_seat_is_found_by_its_token_until_it_is_kicked() {
        let mut p = party();
        p.seat_joined(&seat(2, "tok-2"), "inv", 1);
        assert!(
            matches!(p.seat_for_token("tok-2", false), TokenSeat::Seat(s) if s.seat_id.as_str() == "seat_2")
        );
        assert_eq!(p.next_seat, 3);
        p.seat_changed("seat_2", SeatRole::Player, SeatState::Kicked);
        assert_eq!(p.seat_for_token("tok-2", false), TokenSeat::Gone);
        // Applied twice, the same state.
        let before = p.clone();
        p.seat_joined(&seat(2, "tok-2"), "inv", 1);
        assert_eq!(p, before);
    }

    #[test]
    fn an_invite_is_usable_until_used_up_or_expired() {
        let mut p = party();
        let invite = Invite {
            invite_id: "inv_1".into(),
            code_hash: secret_hash("code"),
            max_uses: 2,
            uses: 0,
            expires_at: 1_000,
        };
        p.invite_created(&invite, 0);
        assert!(p.invite_for_code("code", 10).is_some());
        assert!(p.invite_for_code("guess", 10).is_none());
        assert!(p.invite_for_code("code", 1_000).is_none(), "expired");
        p.seat_joined(&seat(2, "a"), "inv_1", 1);
        p.seat_joined(&seat(3, "b"), "inv_1", 2);
        assert!(p.invite_for_code("code", 10).is_none(), "used up");
    }

    #[test]
    fn a_second_action_replaces_the_first_and_the_deadline_counts_from_the_first() {
        let mut p = party();
        p.seat_joined(&seat(2, "a"), "", 0);
        p.action_submitted(1, &action(2, "go north"), 5_000);
        p.action_submitted(1, &action(2, "go south"), 7_000);
        p.action_submitted(9, &action(1, "wrong round"), 7_000);
        assert_eq!(p.round.actions.len(), 1);
        assert_eq!(p.round.actions[0].text, "go south");
        assert_eq!(
            p.round_deadline(),
            Some(5_000 + i64::from(DEFAULT_ROUND_TIMEOUT_S) * 1000)
        );
        let online = |_: &SeatId| true;
        let waiting: Vec<_> = p
            .waiting_for(online)
            .iter()
            .map(|s| s.seat_id.to_string())
            .collect();
        assert_eq!(waiting, vec!["seat_1"]);
        p.round_resolved(1);
        assert_eq!(p.round.number, 2);
        assert!(p.round.actions.is_empty() && p.round.first_at.is_none());
        p.round_resolved(1);
        assert_eq!(p.round.number, 2, "resolving again changes nothing");
    }

    #[test]
    fn seats_offline_or_gone_are_not_waited_for() {
        let mut p = party();
        p.seat_joined(&seat(2, "a"), "", 0);
        p.seat_joined(&seat(3, "b"), "", 0);
        p.action_submitted(1, &action(3, "hide"), 1);
        p.seat_changed("seat_3", SeatRole::Player, SeatState::Kicked);
        assert!(
            p.round.actions.is_empty() && p.round_deadline().is_none(),
            "a kicked seat's action is dropped, and the round it alone began has no deadline"
        );
        let waiting: Vec<_> = p
            .waiting_for(|s| s.as_str() != "seat_2")
            .iter()
            .map(|s| s.seat_id.to_string())
            .collect();
        assert_eq!(waiting, vec!["seat_1"]);
    }

    #[test]
    fn a_round_keeps_its_deadline_while_an_action_is_left_in_it() {
        let mut p = party();
        p.seat_joined(&seat(2, "a"), "", 0);
        p.seat_joined(&seat(3, "b"), "", 0);
        p.action_submitted(1, &action(2, "hide"), 1_000);
        p.action_submitted(1, &action(3, "run"), 4_000);
        let deadline = p.round_deadline();
        p.seat_changed("seat_2", SeatRole::Player, SeatState::Left);
        assert_eq!(p.round_deadline(), deadline, "seat_3's action holds it");
        p.seat_changed("seat_3", SeatRole::Player, SeatState::Kicked);
        assert_eq!(p.round_deadline(), None);
        p.action_submitted(1, &action(1, "wait"), 9_000);
        assert_eq!(
            p.round_deadline(),
            Some(9_000 + i64::from(DEFAULT_ROUND_TIMEOUT_S) * 1000),
            "counted from the action the round holds first"
        );
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(check_name("  Brin ").unwrap(), "Brin");
        assert!(check_name("").is_err());
        assert!(check_name("   ").is_err());
        assert!(check_name("a\u{7}b").is_err());
        // Text that looks like no name, or shows itself reversed.
        for hidden in [
            "\u{200b}",
            "a\u{202e}b",
            "\u{2066}x\u{2069}",
            "\u{feff}Brin",
        ] {
            assert!(check_name(hidden).is_err(), "{hidden:?}");
        }
        // Letters of any script, and an emoji's joiner-free parts, are names.
        assert_eq!(check_name("Zoë Ngũgĩ").unwrap(), "Zoë Ngũgĩ");
        assert!(check_name("مريم").is_ok());
        // Persian's zero-width non-joiner, an emoji's joiner.
        assert!(check_name("می\u{200c}خواهم").is_ok());
        assert!(check_name("👩\u{200d}🚀").is_ok());
        assert!(check_name(&"x".repeat(41)).is_err());
        assert!(check_name(&"布".repeat(40)).is_ok());
    }
}
