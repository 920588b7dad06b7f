//! The protocol checker of the load test: what one connection must receive
//! (docs/protocol.md §2 and §3) and what a spectator must share with its session's
//! player.
//!
//! It is pure: fed each text frame as it arrived, it keeps only what the
//! checks need (the seq and a hash of the bytes of every story frame, and
//! the turns that recently ended) and counts violations by kind. No IO, so
//! the unit tests below feed it hand-made streams.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::fmt;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::protocol::STORY_KINDS;
use crate::protocol::lead::Lead;

/// Ended turns a connection remembers for the "nothing after the end"
/// check. A late frame of an older turn would also break the seq order.
const RECENT_TURNS: usize = 64;
/// Violations kept word for word per connection; the rest are only counted.
const KEPT_EXAMPLES: usize = 8;

/// The fields of a server frame the load test reads; the rest is ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FrameHead {
    /// The frame's `type`.
    #[serde(rename = "type")]
    pub kind: String,
    pub seq: Option<u64>,
    pub turn_id: Option<String>,
    pub request_id: Option<String>,
    pub call_id: Option<String>,
    pub error_code: Option<String>,
    pub message: Option<String>,
    pub retry_after_ms: Option<u64>,
    /// The seat a frame names (`turn_started`, `action_submitted`,
    /// `party_chat`, `seat_joined`; a player's `welcome`).
    pub seat_id: Option<String>,
    /// The round of an `ack` or `action_submitted`, or the round a
    /// `turn_started` resolves.
    pub round: Option<u64>,
    /// A round's `turn_started`: every seat's action.
    pub actions: Option<Vec<ActionHead>>,
    /// `presence`: the seats and whether each is online.
    pub seats: Option<Vec<SeatHead>>,
    /// `welcome`: the snapshot, of which only the seats are read (other
    /// frames' `state`, such as `seat_changed`'s, is not a snapshot).
    #[serde(default, deserialize_with = "snapshot")]
    pub state: Option<StateHead>,
}

/// Reads `state` as a snapshot when it is an object, else as nothing.
fn snapshot<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<StateHead>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum State {
        Snapshot(StateHead),
        Other(serde::de::IgnoredAny),
    }
    Ok(match State::deserialize(d)? {
        State::Snapshot(head) => Some(head),
        State::Other(_) => None,
    })
}

/// One seat's action in a round's `turn_started`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ActionHead {
    pub seat_id: String,
    /// Whether the seat acted (its `text` is not null); the text itself
    /// is not kept.
    #[serde(default, rename = "text", deserialize_with = "present")]
    pub acted: bool,
    pub request_id: Option<String>,
}

/// Reads `text` as whether it is there and not null.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<serde::de::IgnoredAny>::deserialize(d)?.is_some())
}

/// A seat named in a snapshot or a `presence` frame.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SeatHead {
    pub seat_id: String,
}

/// What a `welcome` snapshot tells the party checks.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct StateHead {
    #[serde(default)]
    pub seats: Vec<SeatHead>,
}

impl FrameHead {
    /// Whether this frame ends its turn.
    pub fn ends_turn(&self) -> bool {
        ends_turn(&self.kind)
    }
}

/// Whether a frame of `kind` ends its turn.
fn ends_turn(kind: &str) -> bool {
    matches!(kind, "turn_completed" | "turn_failed")
}

/// One way a stream broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A text frame that is not a JSON object with a string `type`, or a
    /// binary frame.
    Malformed { detail: String },
    /// A frame arrived before `welcome`.
    BeforeWelcome { kind: String },
    /// `welcome` came twice on one connection.
    SecondWelcome,
    /// A story frame without a seq.
    MissingSeq { kind: String },
    /// Seq jumped: `expected` up to `got - 1` never arrived.
    SeqGap { expected: u64, got: u64 },
    /// Seq repeated or went back.
    SeqOutOfOrder { expected: u64, got: u64 },
    /// A frame of a turn after that turn's `turn_completed`/`turn_failed`.
    AfterTurnEnd { turn_id: String, seq: u64 },
    /// The player got this story frame and a spectator of its session did
    /// not.
    MissedBySpectator { seq: u64 },
    /// A spectator got other bytes than the player under this seq.
    DiffersFromPlayer { seq: u64 },
    /// A story frame of the turn a chat started came before the chat's
    /// `ack` (docs/protocol.md §2.5).
    AckAfterStory { request_id: String, seq: u64 },
    /// A frame named a seat the session does not have (not in `welcome`'s
    /// snapshot nor in any `seat_joined` since).
    UnknownSeat {
        kind: String,
        seat_id: String,
        seq: u64,
    },
    /// A chat or a round's action ran in a second turn.
    RunTwice { request_id: String, seq: u64 },
    /// A round's turn left out a seat's action: the seat acted in that
    /// round (`action_submitted`) and the turn lists it with no text, or
    /// not at all.
    ActionLeftOut {
        round: u64,
        seat_id: String,
        seq: u64,
    },
    /// A turn (or a round's action) started by this connection's chat
    /// named another seat than this connection's.
    WrongSeat {
        request_id: String,
        seat_id: Option<String>,
        seq: u64,
    },
}

impl Violation {
    /// The snake_case name this kind is counted under in the report.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "malformed_frame",
            Self::BeforeWelcome { .. } => "frame_before_welcome",
            Self::SecondWelcome => "second_welcome",
            Self::MissingSeq { .. } => "missing_seq",
            Self::SeqGap { .. } => "seq_gap",
            Self::SeqOutOfOrder { .. } => "seq_out_of_order",
            Self::AfterTurnEnd { .. } => "frame_after_turn_end",
            Self::MissedBySpectator { .. } => "missed_by_spectator",
            Self::DiffersFromPlayer { .. } => "differs_from_player",
            Self::AckAfterStory { .. } => "ack_after_story",
            Self::UnknownSeat { .. } => "unknown_seat",
            Self::RunTwice { .. } => "action_run_twice",
            Self::ActionLeftOut { .. } => "round_without_action",
            Self::WrongSeat { .. } => "turn_for_wrong_seat",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { detail } => write!(f, "malformed frame: {detail}"),
            Self::BeforeWelcome { kind } => write!(f, "{kind} arrived before welcome"),
            Self::SecondWelcome => write!(f, "a second welcome on one connection"),
            Self::MissingSeq { kind } => write!(f, "{kind} has no seq"),
            Self::SeqGap { expected, got } => write!(f, "seq gap: expected {expected}, got {got}"),
            Self::SeqOutOfOrder { expected, got } => {
                write!(f, "seq out of order: expected {expected}, got {got}")
            }
            Self::AfterTurnEnd { turn_id, seq } => {
                write!(f, "seq {seq} belongs to {turn_id}, which had already ended")
            }
            Self::MissedBySpectator { seq } => {
                write!(f, "a spectator missed seq {seq}, which its player got")
            }
            Self::DiffersFromPlayer { seq } => {
                write!(
                    f,
                    "a spectator got other bytes than its player for seq {seq}"
                )
            }
            Self::AckAfterStory { request_id, seq } => write!(
                f,
                "seq {seq} of the turn chat {request_id:?} started came before its ack"
            ),
            Self::UnknownSeat { kind, seat_id, seq } => write!(
                f,
                "{kind} (seq {seq}) names seat {seat_id:?}, which the session does not have"
            ),
            Self::RunTwice { request_id, seq } => {
                write!(f, "seq {seq} runs {request_id:?} a second time")
            }
            Self::ActionLeftOut {
                round,
                seat_id,
                seq,
            } => write!(
                f,
                "round {round} resolved (seq {seq}) without the action {seat_id:?} submitted"
            ),
            Self::WrongSeat {
                request_id,
                seat_id,
                seq,
            } => write!(
                f,
                "seq {seq} runs {request_id:?} for seat {seat_id:?}, not for the seat that sent it"
            ),
        }
    }
}

/// What a frame turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// The connection's `welcome` (its `seq` is where live frames start).
    Welcome(FrameHead),
    /// A frame of the story, in order or not.
    Story(FrameHead),
    /// `ack`, `error`, `pong` or a type this driver does not know.
    Control(FrameHead),
    /// Not a frame at all; already counted as a violation.
    Invalid,
}

/// Frames seen in the window where a spectator is compared with its player.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compared {
    /// Story frames the player got in the window.
    pub player_frames: u64,
    /// Story frames the spectator got in the window.
    pub spectator_frames: u64,
}

/// A set that remembers only its newest `cap` members, so a long run's
/// memory stays bounded.
#[derive(Debug, Default)]
struct Recent {
    order: VecDeque<String>,
    set: HashSet<String, foldhash::fast::RandomState>,
}

impl Recent {
    fn contains(&self, item: &str) -> bool {
        self.set.contains(item)
    }

    /// Adds `item` (once), forgetting the oldest member past `cap`.
    fn insert(&mut self, item: &str, cap: usize) {
        if self.set.contains(item) {
            return;
        }
        if self.order.len() >= cap
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        self.order.push_back(item.to_owned());
        self.set.insert(item.to_owned());
    }
}

/// Request ids a connection remembers as sent or as run: far more than
/// one session's turns in any run, and still a bound.
const RECENT_REQUESTS: usize = 4096;
/// Rounds whose submitted actions a connection holds until their turn.
const OPEN_ROUNDS: usize = 64;

/// The seats a frame names: its own `seat_id`, a round's actions' and a
/// `presence`'s seats.
pub fn seats_named(head: &FrameHead) -> Vec<&str> {
    let mut seats: Vec<&str> = head.seat_id.iter().map(String::as_str).collect();
    for action in head.actions.iter().flatten() {
        seats.push(&action.seat_id);
    }
    for seat in head.seats.iter().flatten() {
        seats.push(&seat.seat_id);
    }
    seats
}

/// The request ids a `turn_started` runs, each once: a free turn's own and
/// the actions its round resolves.
pub fn run_ids(head: &FrameHead) -> Vec<&str> {
    let mut ids: Vec<&str> = Vec::new();
    let own = head.request_id.as_deref().filter(|_| head.round.is_none());
    let acted = head.actions.iter().flatten().filter(|a| a.acted);
    for id in own
        .into_iter()
        .chain(acted.filter_map(|a| a.request_id.as_deref()))
    {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// The seats of `acted` (those that submitted in a round) that the round's
/// `actions` list with no text or not at all.
pub fn left_out<'a>(acted: &'a BTreeSet<String>, actions: &[ActionHead]) -> Vec<&'a str> {
    acted
        .iter()
        .filter(|seat| !actions.iter().any(|a| a.acted && &a.seat_id == *seat))
        .map(String::as_str)
        .collect()
}

/// The request ids `sent` by the connection of seat `own` that a
/// `turn_started` runs for another seat (a free turn's `seat_id`, or a
/// round's action's), each with the seat named.
pub fn run_for_another_seat(
    own: &str,
    sent: impl Fn(&str) -> bool,
    head: &FrameHead,
) -> Vec<(String, Option<String>)> {
    let mut wrong = Vec::new();
    if head.round.is_none()
        && let Some(id) = head.request_id.as_deref()
        && sent(id)
        && head.seat_id.as_deref() != Some(own)
    {
        wrong.push((id.to_owned(), head.seat_id.clone()));
    }
    for action in head.actions.iter().flatten() {
        if let Some(id) = action.request_id.as_deref()
            && sent(id)
            && action.seat_id != own
        {
            wrong.push((id.to_owned(), Some(action.seat_id.clone())));
        }
    }
    wrong
}

/// What a connection knows of its session's party, to judge the frames
/// that name seats and run actions (docs/protocol.md §16).
#[derive(Debug, Default)]
pub struct PartyLedger {
    /// The session's seats: `welcome`'s snapshot, then each `seat_joined`.
    seats: HashSet<String>,
    /// This connection's seat (a player's `welcome.seat_id`).
    own: Option<String>,
    /// Request ids of the chats this connection sent.
    sent: Recent,
    /// Request ids a turn has run.
    run: Recent,
    /// Seats that submitted an action, by round, until the round's turn.
    acted: BTreeMap<u64, BTreeSet<String>>,
}

impl PartyLedger {
    /// Takes in the connection's `welcome`.
    pub fn welcome(&mut self, head: &FrameHead) {
        for seat in head.state.iter().flat_map(|s| &s.seats) {
            self.seats.insert(seat.seat_id.clone());
        }
        if let Some(own) = &head.seat_id {
            self.seats.insert(own.clone());
            self.own = Some(own.clone());
        }
    }

    /// This connection sent a chat with `request_id`.
    pub fn sent(&mut self, request_id: &str) {
        self.sent.insert(request_id, RECENT_REQUESTS);
    }

    /// Judges one in-order story frame with `seq`.
    pub fn story(&mut self, seq: u64, head: &FrameHead) -> Vec<Violation> {
        let mut found = Vec::new();
        if head.kind == "seat_joined"
            && let Some(seat) = &head.seat_id
        {
            self.seats.insert(seat.clone());
        }
        for seat in seats_named(head) {
            if !self.seats.contains(seat) {
                found.push(Violation::UnknownSeat {
                    kind: head.kind.clone(),
                    seat_id: seat.to_owned(),
                    seq,
                });
            }
        }
        match head.kind.as_str() {
            "action_submitted" => {
                if let (Some(round), Some(seat)) = (head.round, &head.seat_id) {
                    if self.acted.len() >= OPEN_ROUNDS && !self.acted.contains_key(&round) {
                        self.acted.pop_first();
                    }
                    self.acted.entry(round).or_default().insert(seat.clone());
                }
            }
            "turn_started" => {
                for id in run_ids(head) {
                    if self.run.contains(id) {
                        found.push(Violation::RunTwice {
                            request_id: id.to_owned(),
                            seq,
                        });
                    }
                    self.run.insert(id, RECENT_REQUESTS);
                }
                if let Some(round) = head.round {
                    // Rounds resolve in order: older ones still open never
                    // will be.
                    let mut later = self.acted.split_off(&round);
                    if let Some(acted) = later.remove(&round) {
                        let actions = head.actions.as_deref().unwrap_or_default();
                        for seat in left_out(&acted, actions) {
                            found.push(Violation::ActionLeftOut {
                                round,
                                seat_id: seat.to_owned(),
                                seq,
                            });
                        }
                    }
                    self.acted = later;
                }
                if let Some(own) = &self.own {
                    let sent = &self.sent;
                    for (request_id, seat_id) in
                        run_for_another_seat(own, |id| sent.contains(id), head)
                    {
                        found.push(Violation::WrongSeat {
                            request_id,
                            seat_id,
                            seq,
                        });
                    }
                }
            }
            _ => {}
        }
        found
    }
}

/// Checks one connection's frames as they arrive.
#[derive(Debug, Default)]
pub struct StreamChecker {
    /// `welcome.seq`, once it came.
    welcome_seq: Option<u64>,
    /// The seq the next story frame must carry.
    next_seq: Option<u64>,
    /// Every in-order story frame, ascending, for comparing spectators
    /// with their player and timing the fan-out.
    log: Vec<Logged>,
    /// Turns that ended, at most the newest [`RECENT_TURNS`].
    ended: Recent,
    /// Text frames seen, of any kind.
    frames: u64,
    counts: BTreeMap<&'static str, u64>,
    examples: Vec<Violation>,
    /// Chats sent on this connection and not yet answered (`ack` or
    /// `error`), by request id.
    unanswered: HashSet<String>,
    /// The party checks, for runs with several players per session.
    party: Option<PartyLedger>,
}

/// Chats a connection may have unanswered before the oldest are forgotten
/// (a driver sends one at a time; this only bounds memory).
const UNANSWERED_CHATS: usize = 64;

/// One story frame as a connection got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Logged {
    seq: u64,
    /// Hash of the frame's bytes.
    hash: u64,
    /// When it was read.
    at: Instant,
}

/// A hash of a frame's bytes: equal frames hash equal. foldhash rather
/// than the standard SipHash: every frame every connection reads is
/// hashed, and the driver shares the server's cores.
fn hash_bytes(text: &str) -> u64 {
    const FRAMES: foldhash::quality::FixedState = foldhash::quality::FixedState::with_seed(0);
    FRAMES.hash_one(text.as_bytes())
}

impl StreamChecker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A checker that also judges the frames of party play: seats named,
    /// actions run, rounds resolved ([`PartyLedger`]).
    pub fn for_party() -> Self {
        Self {
            party: Some(PartyLedger::default()),
            ..Self::default()
        }
    }

    /// Judges one text frame, read just now, and says what it was.
    #[cfg(test)]
    pub fn observe(&mut self, text: &str) -> Observed {
        self.observe_at(text, Instant::now())
    }

    /// Judges one text frame, read at `at`, on a connection that only
    /// reads along (a spectator) and is compared with its session's
    /// player at the end ([`StreamChecker::compare_with_player`]).
    ///
    /// A story frame whose lead ([`Lead`]) says its seq, kind and turn id
    /// (or that it has none) is judged from that lead alone when nothing else of it matters here
    /// (no party, no chat awaiting its answer, after the welcome): its seq,
    /// kind and turn id are all such a connection's checks read, and the
    /// rest of its bytes are compared, by hash, with the player's, whose
    /// checker parses every frame whole. A crowd's driver then reads each
    /// frame's head on each of its ten thousand connections, not all of it.
    pub fn observe_along(&mut self, text: &str, at: Instant) {
        let lead_is_enough =
            self.party.is_none() && self.unanswered.is_empty() && self.welcome_seq.is_some();
        match lead_is_enough.then(|| Lead::of(text)).flatten() {
            Some(Lead {
                seq,
                kind,
                turn_id: Some(turn_id),
            }) if kind != "welcome" && STORY_KINDS.contains(&kind) => {
                self.frames += 1;
                self.story(seq, turn_id, ends_turn(kind), text, at);
            }
            _ => {
                self.observe_at(text, at);
            }
        }
    }

    /// Judges one text frame read at `at`.
    pub fn observe_at(&mut self, text: &str, at: Instant) -> Observed {
        self.frames += 1;
        let head: FrameHead = match serde_json::from_str(text) {
            Ok(head) => head,
            Err(e) => {
                let mut detail = e.to_string();
                detail.truncate(200);
                self.violation(Violation::Malformed { detail });
                return Observed::Invalid;
            }
        };
        if self.welcome_seq.is_none() && head.kind != "welcome" {
            self.violation(Violation::BeforeWelcome {
                kind: head.kind.clone(),
            });
        }
        self.check_ack_order(&head);
        if head.kind == "welcome" {
            if self.welcome_seq.is_some() {
                self.violation(Violation::SecondWelcome);
                return Observed::Control(head);
            }
            let seq = head.seq.unwrap_or(0);
            self.welcome_seq = Some(seq);
            self.next_seq = Some(seq + 1);
            if let Some(party) = &mut self.party {
                party.welcome(&head);
            }
            return Observed::Welcome(head);
        }
        let Some(seq) = head.seq else {
            if STORY_KINDS.contains(&head.kind.as_str()) {
                self.violation(Violation::MissingSeq {
                    kind: head.kind.clone(),
                });
                return Observed::Story(head);
            }
            return Observed::Control(head);
        };
        if self.story(seq, head.turn_id.as_deref(), head.ends_turn(), text, at) {
            // Judged once, in order: a repeat is already a violation.
            let found = self.party.as_mut().map(|p| p.story(seq, &head));
            for v in found.into_iter().flatten() {
                self.violation(v);
            }
        }
        Observed::Story(head)
    }

    /// A chat with `request_id` was sent on this connection: its `ack` (or
    /// `error`) must come before any story frame of the turn it starts.
    pub fn chat_sent(&mut self, request_id: &str) {
        if self.unanswered.len() >= UNANSWERED_CHATS {
            self.unanswered.clear();
        }
        self.unanswered.insert(request_id.to_owned());
        if let Some(party) = &mut self.party {
            party.sent(request_id);
        }
    }

    /// A frame naming a chat's request id: the answer (ack or error)
    /// settles it; a story frame (its `turn_started`) before the answer
    /// breaks docs/protocol.md §2.5.
    fn check_ack_order(&mut self, head: &FrameHead) {
        let Some(id) = head.request_id.as_deref() else {
            return;
        };
        if !self.unanswered.contains(id) {
            return;
        }
        match head.kind.as_str() {
            "ack" | "error" => {
                self.unanswered.remove(id);
            }
            _ if head.seq.is_some() => {
                self.unanswered.remove(id);
                self.violation(Violation::AckAfterStory {
                    request_id: id.to_owned(),
                    seq: head.seq.unwrap_or_default(),
                });
            }
            _ => {}
        }
    }

    /// A binary frame: questd never sends one.
    pub fn observe_binary(&mut self) {
        self.frames += 1;
        self.violation(Violation::Malformed {
            detail: "a binary frame".into(),
        });
    }

    /// Judges story frame `seq` of `turn_id`; answers whether it came in
    /// order (and was logged).
    fn story(
        &mut self,
        seq: u64,
        turn_id: Option<&str>,
        ends_turn: bool,
        text: &str,
        at: Instant,
    ) -> bool {
        let mut in_order = false;
        if let Some(expected) = self.next_seq {
            if seq < expected {
                self.violation(Violation::SeqOutOfOrder { expected, got: seq });
            } else {
                if seq > expected {
                    self.violation(Violation::SeqGap { expected, got: seq });
                }
                self.next_seq = Some(seq + 1);
                self.log.push(Logged {
                    seq,
                    hash: hash_bytes(text),
                    at,
                });
                in_order = true;
            }
        }
        if let Some(turn_id) = turn_id {
            if self.ended.contains(turn_id) {
                self.violation(Violation::AfterTurnEnd {
                    turn_id: turn_id.to_owned(),
                    seq,
                });
            } else if ends_turn {
                self.ended.insert(turn_id, RECENT_TURNS);
            }
        }
        in_order
    }

    fn violation(&mut self, v: Violation) {
        *self.counts.entry(v.kind()).or_default() += 1;
        if self.examples.len() < KEPT_EXAMPLES {
            self.examples.push(v);
        }
    }

    /// Compares this spectator's stream with its player's for the story
    /// frames after both welcomes up to `upto` (the last seq the player
    /// needed): each must have arrived here with the same bytes. Mismatches
    /// are counted as violations of this checker.
    pub fn compare_with_player(&mut self, player: &StreamChecker, upto: u64) -> Compared {
        let from = self
            .welcome_seq
            .unwrap_or(u64::MAX)
            .max(player.welcome_seq.unwrap_or(u64::MAX));
        let window = |log: &[Logged]| -> Vec<(u64, u64)> {
            log.iter()
                .filter(|l| l.seq > from && l.seq <= upto)
                .map(|l| (l.seq, l.hash))
                .collect()
        };
        let (theirs, mine) = (window(&player.log), window(&self.log));
        let compared = Compared {
            player_frames: theirs.len() as u64,
            spectator_frames: mine.len() as u64,
        };
        // Both logs ascend: walk them together.
        let mut mine_iter = mine.iter().peekable();
        for &(seq, hash) in &theirs {
            while mine_iter.next_if(|&&(s, _)| s < seq).is_some() {}
            match mine_iter.next_if(|&&(s, _)| s == seq) {
                Some(&(_, h)) if h == hash => {}
                Some(_) => self.violation(Violation::DiffersFromPlayer { seq }),
                None => self.violation(Violation::MissedBySpectator { seq }),
            }
        }
        compared
    }

    /// How long each story frame took to reach all of `connections` (one
    /// session's): for every seq after all their welcomes up to `upto` that
    /// at least two of them got, the time from the first one reading it to
    /// the last one reading it.
    pub fn fan_out(connections: &[&StreamChecker], upto: u64) -> Vec<Duration> {
        let from = connections
            .iter()
            .filter_map(|c| c.welcome_seq)
            .max()
            .unwrap_or(u64::MAX);
        let mut spans: BTreeMap<u64, (Instant, Instant, usize)> = BTreeMap::new();
        for c in connections {
            for l in c.log.iter().filter(|l| l.seq > from && l.seq <= upto) {
                spans
                    .entry(l.seq)
                    .and_modify(|(first, last, n)| {
                        *first = (*first).min(l.at);
                        *last = (*last).max(l.at);
                        *n += 1;
                    })
                    .or_insert((l.at, l.at, 1));
            }
        }
        spans
            .into_values()
            .filter(|&(_, _, n)| n > 1)
            .map(|(first, last, _)| last - first)
            .collect()
    }

    /// The seq of the last in-order story frame (or of `welcome`).
    pub fn last_seq(&self) -> Option<u64> {
        self.next_seq.map(|n| n - 1)
    }

    /// Whether `welcome` came.
    pub fn welcomed(&self) -> bool {
        self.welcome_seq.is_some()
    }

    /// Text frames seen, of any kind.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Violations by kind.
    pub fn counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.counts
    }

    /// All violations found.
    pub fn violations(&self) -> u64 {
        self.counts.values().sum()
    }

    /// The first few violations, word for word.
    pub fn examples(&self) -> &[Violation] {
        &self.examples
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::lead::led;
    use serde_json::json;

    fn welcome(seq: u64) -> String {
        json!({"type": "welcome", "seq": seq, "role": "player", "state": {}}).to_string()
    }

    /// A story frame of `turn` (or of no turn) with `seq`.
    fn frame(seq: u64, kind: &str, turn: Option<&str>) -> String {
        let mut f = json!({"type": kind, "seq": seq});
        if let Some(t) = turn {
            f["turn_id"] = json!(t);
        }
        f.to_string()
    }

    /// One well-formed turn from `first` on.
    fn turn(first: u64, id: &str) -> Vec<String> {
        vec![
            frame(first, "turn_started", Some(id)),
            frame(first + 1, "tool_call", Some(id)),
            frame(first + 2, "tool_result", Some(id)),
            frame(first + 3, "narrative_delta", Some(id)),
            frame(first + 4, "turn_completed", Some(id)),
        ]
    }

    fn feed(frames: &[String]) -> StreamChecker {
        let mut c = StreamChecker::new();
        for f in frames {
            c.observe(f);
        }
        c
    }

    fn counts(c: &StreamChecker) -> Vec<(&'static str, u64)> {
        c.counts().iter().map(|(k, v)| (*k, *v)).collect()
    }

    #[test]
    fn fan_out_is_first_to_last_arrival_of_each_frame() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut player = StreamChecker::new();
        player.observe_at(&welcome(4), ms(0));
        let mut early = StreamChecker::new();
        early.observe_at(&welcome(5), ms(0));
        let mut late = StreamChecker::new();
        late.observe_at(&welcome(5), ms(0));
        let frames = turn(5, "turn_1");
        for (i, f) in frames.iter().enumerate() {
            let i = i as u64;
            player.observe_at(f, ms(10 * i + 1));
            if i > 0 {
                early.observe_at(f, ms(10 * i));
                late.observe_at(f, ms(10 * i + 7));
            }
        }
        let spans = StreamChecker::fan_out(&[&player, &early, &late], 8);
        // Seq 5 is the late connections' welcome seq: not timed. Seq 9 is
        // past `upto`.
        let want = vec![Duration::from_millis(7); 3];
        assert_eq!(spans, want);
        // A frame only one connection got gives no span.
        assert!(StreamChecker::fan_out(&[&player], 9).is_empty());
    }

    #[test]
    fn an_ack_after_its_turn_started_is_a_violation() {
        let ack =
            |rid: &str| json!({"type": "ack", "request_id": rid, "turn_id": "turn_1"}).to_string();
        let started = |seq: u64, rid: &str| {
            json!({"type": "turn_started", "seq": seq, "turn_id": "turn_1", "request_id": rid})
                .to_string()
        };
        // In order: clean.
        let mut c = StreamChecker::new();
        c.observe(&welcome(0));
        c.chat_sent("r1");
        c.observe(&ack("r1"));
        c.observe(&started(1, "r1"));
        assert_eq!(c.violations(), 0);
        // The turn's first story frame before the ack: counted once.
        let mut c = StreamChecker::new();
        c.observe(&welcome(0));
        c.chat_sent("r2");
        c.observe(&started(1, "r2"));
        c.observe(&ack("r2"));
        assert_eq!(counts(&c), vec![("ack_after_story", 1)]);
        // A chat refused with an error, then one that is fine.
        let mut c = StreamChecker::new();
        c.observe(&welcome(0));
        c.chat_sent("r3");
        c.observe(
            &json!({"type": "error", "request_id": "r3", "error_code": "RATE_LIMITED"}).to_string(),
        );
        c.chat_sent("r4");
        c.observe(&ack("r4"));
        c.observe(&started(1, "r4"));
        assert_eq!(c.violations(), 0);
    }

    #[test]
    fn a_clean_stream_has_no_violations() {
        let mut frames = vec![welcome(10), frame(11, "presence", None)];
        frames.push(json!({"type": "ack", "request_id": "r", "turn_id": "turn_1"}).to_string());
        frames.extend(turn(12, "turn_1"));
        frames.push(json!({"type": "pong", "nonce": 1}).to_string());
        frames.extend(turn(17, "turn_2"));
        let c = feed(&frames);
        assert_eq!(c.violations(), 0, "{:?}", c.examples());
        assert_eq!(c.last_seq(), Some(21));
        assert_eq!(c.frames(), frames.len() as u64);
    }

    #[test]
    fn a_seq_gap_is_a_violation() {
        let mut frames = vec![welcome(0)];
        frames.extend(turn(1, "turn_1"));
        frames.remove(3); // seq 3
        let c = feed(&frames);
        assert_eq!(counts(&c), [("seq_gap", 1)]);
        assert_eq!(
            c.examples(),
            [Violation::SeqGap {
                expected: 3,
                got: 4
            }]
        );
        assert_eq!(c.last_seq(), Some(5));
    }

    #[test]
    fn a_repeated_or_earlier_seq_is_a_violation() {
        let mut frames = vec![welcome(0)];
        frames.extend(turn(1, "turn_1"));
        frames.insert(3, frame(1, "turn_started", Some("turn_1")));
        let c = feed(&frames);
        assert_eq!(counts(&c), [("seq_out_of_order", 1)]);
        // The first story frame must follow welcome at once.
        let c = feed(&[welcome(5), frame(5, "presence", None)]);
        assert_eq!(counts(&c), [("seq_out_of_order", 1)]);
    }

    #[test]
    fn a_frame_after_turn_completed_is_a_violation() {
        let mut frames = vec![welcome(0)];
        frames.extend(turn(1, "turn_1"));
        frames.push(frame(6, "narrative_delta", Some("turn_1")));
        frames.push(frame(7, "presence", None));
        frames.extend(turn(8, "turn_2"));
        let c = feed(&frames);
        assert_eq!(counts(&c), [("frame_after_turn_end", 1)]);
        // A turn_failed ends a turn just the same, and a second end is late.
        let c = feed(&[
            welcome(0),
            frame(1, "turn_failed", Some("turn_1")),
            frame(2, "turn_completed", Some("turn_1")),
        ]);
        assert_eq!(counts(&c), [("frame_after_turn_end", 1)]);
    }

    #[test]
    fn frames_before_welcome_bad_json_and_missing_seqs_are_violations() {
        let c = feed(&[
            frame(1, "presence", None),
            welcome(1),
            "not json".into(),
            json!({"seq": 2}).to_string(),
            json!({"type": "tool_call", "turn_id": "turn_1"}).to_string(),
            welcome(2),
        ]);
        assert_eq!(
            counts(&c),
            [
                ("frame_before_welcome", 1),
                ("malformed_frame", 2),
                ("missing_seq", 1),
                ("second_welcome", 1)
            ]
        );
        let mut c = StreamChecker::new();
        c.observe(&welcome(0));
        c.observe_binary();
        assert_eq!(counts(&c), [("malformed_frame", 1)]);
    }

    #[test]
    fn a_spectator_that_misses_a_frame_is_a_violation() {
        let mut story = vec![frame(4, "presence", None)];
        story.extend(turn(5, "turn_1"));
        let mut player = vec![welcome(2), frame(3, "presence", None)];
        player.extend(story.iter().cloned());
        let player = feed(&player);

        let mut all = vec![welcome(3)];
        all.extend(story.iter().cloned());
        let mut fine = feed(&all);
        assert_eq!(
            fine.compare_with_player(&player, 9),
            Compared {
                player_frames: 6,
                spectator_frames: 6
            }
        );
        assert_eq!(fine.violations(), 0);

        let mut missing = all.clone();
        missing.remove(3); // seq 6
        let mut spectator = feed(&missing);
        let compared = spectator.compare_with_player(&player, 9);
        assert_eq!(compared.player_frames, 6);
        assert_eq!(compared.spectator_frames, 5);
        assert_eq!(
            counts(&spectator),
            [("missed_by_spectator", 1), ("seq_gap", 1)]
        );

        // Cut short: the spectator's stream ends before the player's last seq.
        let mut short = feed(&all[..all.len() - 2]);
        short.compare_with_player(&player, 9);
        assert_eq!(counts(&short), [("missed_by_spectator", 2)]);
    }

    #[test]
    fn a_spectator_with_other_bytes_is_a_violation() {
        let player = feed(&[welcome(0), frame(1, "presence", None)]);
        let other = json!({"type": "presence", "seq": 1, "players": 2}).to_string();
        let mut spectator = feed(&[welcome(0), other]);
        spectator.compare_with_player(&player, 1);
        assert_eq!(counts(&spectator), [("differs_from_player", 1)]);
    }

    /// A player's `welcome` in a session with `seats`, for `own`.
    fn party_welcome(seq: u64, own: Option<&str>, seats: &[&str]) -> String {
        let seats: Vec<_> = seats.iter().map(|s| json!({"seat_id": s})).collect();
        json!({"type": "welcome", "seq": seq, "seat_id": own, "state": {"seats": seats}})
            .to_string()
    }

    fn free_turn(seq: u64, turn: &str, seat: &str, rid: &str) -> String {
        json!({"type": "turn_started", "seq": seq, "turn_id": turn, "seat_id": seat,
               "request_id": rid, "actor_id": "pc_001", "text": "status"})
        .to_string()
    }

    fn submitted(seq: u64, round: u64, seat: &str) -> String {
        json!({"type": "action_submitted", "seq": seq, "round": round, "seat_id": seat}).to_string()
    }

    /// A round's `turn_started`; `actions` are (seat, request id or None
    /// for a seat that did not act).
    fn round_turn(seq: u64, turn: &str, round: u64, actions: &[(&str, Option<&str>)]) -> String {
        let actions: Vec<_> = actions
            .iter()
            .map(|(seat, rid)| {
                json!({"seat_id": seat, "character_id": "pc_x",
                       "text": rid.map(|_| "look"), "request_id": rid})
            })
            .collect();
        json!({"type": "turn_started", "seq": seq, "turn_id": turn, "seat_id": null,
               "request_id": null, "actor_id": "pc_001", "text": "", "round": round,
               "actions": actions})
        .to_string()
    }

    /// This connection sends a chat and gets its ack.
    fn chat(c: &mut StreamChecker, rid: &str) {
        c.chat_sent(rid);
        c.observe(&json!({"type": "ack", "request_id": rid, "turn_id": null}).to_string());
    }

    fn party_feed(frames: &[String]) -> StreamChecker {
        let mut c = StreamChecker::for_party();
        for f in frames {
            c.observe(f);
        }
        c
    }

    #[test]
    fn a_clean_party_stream_has_no_violations() {
        let presence = json!({"type": "presence", "seq": 2, "players": 3, "spectators": 1,
            "seats": [{"seat_id": "seat_1", "online": true}, {"seat_id": "seat_2", "online": true},
                      {"seat_id": "seat_3", "online": false}]})
        .to_string();
        let talk = json!({"type": "party_chat", "seq": 6, "seat_id": "seat_3", "name": "Cai",
            "text": "hi"})
        .to_string();
        let mut c = StreamChecker::for_party();
        c.observe(&party_welcome(0, Some("seat_2"), &["seat_1", "seat_2"]));
        c.observe(
            &json!({"type": "seat_joined", "seq": 1, "seat_id": "seat_3", "character_id": "pc_3",
            "name": "Cai"})
            .to_string(),
        );
        c.observe(&presence);
        chat(&mut c, "r-2");
        c.observe(&free_turn(3, "turn_1", "seat_2", "r-2"));
        c.observe(&frame(4, "turn_completed", Some("turn_1")));
        c.observe(&free_turn(5, "turn_2", "seat_1", "r-1"));
        c.observe(&talk);
        c.observe(&submitted(7, 1, "seat_1"));
        c.observe(&submitted(8, 1, "seat_3"));
        // seat_2 never acted: listed with no text, which is right.
        c.observe(&round_turn(
            9,
            "turn_3",
            1,
            &[
                ("seat_1", Some("a-1")),
                ("seat_2", None),
                ("seat_3", Some("a-3")),
            ],
        ));
        c.observe(&round_turn(10, "turn_4", 2, &[("seat_1", Some("b-1"))]));
        assert_eq!(c.violations(), 0, "{:?}", c.examples());
    }

    #[test]
    fn a_frame_naming_a_seat_not_in_the_session_is_a_violation() {
        let c = party_feed(&[
            party_welcome(0, None, &["seat_1", "seat_2"]),
            free_turn(1, "turn_1", "seat_9", "r-1"),
            submitted(2, 2, "seat_8"),
            json!({"type": "party_chat", "seq": 3, "seat_id": "seat_7", "name": "X", "text": "t"})
                .to_string(),
            json!({"type": "presence", "seq": 4, "players": 1, "spectators": 0,
                   "seats": [{"seat_id": "seat_1", "online": true},
                             {"seat_id": "seat_6", "online": true}]})
            .to_string(),
            round_turn(5, "turn_2", 1, &[("seat_1", None), ("seat_5", None)]),
        ]);
        assert_eq!(counts(&c), [("unknown_seat", 5)]);
        assert!(c.examples().contains(&Violation::UnknownSeat {
            kind: "action_submitted".into(),
            seat_id: "seat_8".into(),
            seq: 2
        }));
        // Without the snapshot's seats, even the host's seat is unknown:
        // the seats come from the welcome and seat_joined only.
        let c = party_feed(&[
            json!({"type": "welcome", "seq": 0, "state": {}}).to_string(),
            free_turn(1, "turn_1", "seat_1", "r-1"),
        ]);
        assert_eq!(counts(&c), [("unknown_seat", 1)]);
    }

    #[test]
    fn an_action_run_twice_is_a_violation() {
        // A free chat started twice.
        let c = party_feed(&[
            party_welcome(0, None, &["seat_1", "seat_2"]),
            free_turn(1, "turn_1", "seat_2", "r-1"),
            frame(2, "turn_completed", Some("turn_1")),
            free_turn(3, "turn_2", "seat_2", "r-1"),
        ]);
        assert_eq!(counts(&c), [("action_run_twice", 1)]);
        // A round's action in two rounds' turns.
        let c = party_feed(&[
            party_welcome(0, None, &["seat_1", "seat_2"]),
            round_turn(
                1,
                "turn_1",
                1,
                &[("seat_1", Some("a")), ("seat_2", Some("b"))],
            ),
            round_turn(
                2,
                "turn_2",
                2,
                &[("seat_1", Some("c")), ("seat_2", Some("b"))],
            ),
        ]);
        assert_eq!(
            c.examples(),
            [Violation::RunTwice {
                request_id: "b".into(),
                seq: 2
            }]
        );
        // One request id named twice within one round's turn counts once,
        // and a seat without an action runs nothing.
        let c = party_feed(&[
            party_welcome(0, None, &["seat_1", "seat_2"]),
            round_turn(1, "turn_1", 1, &[("seat_1", Some("a")), ("seat_2", None)]),
            round_turn(2, "turn_2", 2, &[("seat_1", Some("c")), ("seat_2", None)]),
        ]);
        assert_eq!(c.violations(), 0);
        // A repeated frame is a seq violation, not a second run.
        let c = party_feed(&[
            party_welcome(0, None, &["seat_1"]),
            free_turn(1, "turn_1", "seat_1", "r-1"),
            free_turn(1, "turn_1", "seat_1", "r-1"),
        ]);
        assert_eq!(counts(&c), [("seq_out_of_order", 1)]);
    }

    #[test]
    fn a_round_resolved_without_a_seat_that_acted_is_a_violation() {
        let seats = ["seat_1", "seat_2", "seat_3"];
        // Listed with no text.
        let c = party_feed(&[
            party_welcome(0, None, &seats),
            submitted(1, 4, "seat_1"),
            submitted(2, 4, "seat_2"),
            round_turn(3, "turn_1", 4, &[("seat_1", Some("a")), ("seat_2", None)]),
        ]);
        assert_eq!(
            c.examples(),
            [Violation::ActionLeftOut {
                round: 4,
                seat_id: "seat_2".into(),
                seq: 3
            }]
        );
        // Not listed at all, and no actions list at all.
        let c = party_feed(&[
            party_welcome(0, None, &seats),
            submitted(1, 1, "seat_3"),
            round_turn(2, "turn_1", 1, &[("seat_1", Some("a"))]),
            submitted(3, 2, "seat_1"),
            json!({"type": "turn_started", "seq": 4, "turn_id": "turn_2", "round": 2}).to_string(),
        ]);
        assert_eq!(counts(&c), [("round_without_action", 2)]);
        // An action of the next round is not owed to this one; a seat that
        // acted twice in a round is one action.
        let c = party_feed(&[
            party_welcome(0, None, &seats),
            submitted(1, 1, "seat_1"),
            submitted(2, 1, "seat_1"),
            submitted(3, 2, "seat_2"),
            round_turn(4, "turn_1", 1, &[("seat_1", Some("a"))]),
            round_turn(5, "turn_2", 2, &[("seat_2", Some("b"))]),
        ]);
        assert_eq!(c.violations(), 0, "{:?}", c.examples());
    }

    #[test]
    fn a_turn_for_another_seat_than_the_sender_is_a_violation() {
        let mut c = StreamChecker::for_party();
        c.observe(&party_welcome(0, Some("seat_2"), &["seat_1", "seat_2"]));
        chat(&mut c, "r-1");
        c.observe(&free_turn(1, "turn_1", "seat_1", "r-1"));
        assert_eq!(
            c.examples(),
            [Violation::WrongSeat {
                request_id: "r-1".into(),
                seat_id: Some("seat_1".into()),
                seq: 1
            }]
        );
        // Another seat's turn, or a chat this connection did not send, is
        // not judged by it.
        c.observe(&free_turn(2, "turn_2", "seat_1", "r-9"));
        // A round's action sent here listed under another seat.
        chat(&mut c, "a-2");
        c.observe(&round_turn(
            3,
            "turn_3",
            1,
            &[("seat_1", Some("a-2")), ("seat_2", None)],
        ));
        assert_eq!(counts(&c), [("turn_for_wrong_seat", 2)]);
        // A round's turn's own seat_id is not a speaker's.
        let mut c = StreamChecker::for_party();
        c.observe(&party_welcome(0, Some("seat_2"), &["seat_1", "seat_2"]));
        chat(&mut c, "a-2");
        let mut turn: serde_json::Value =
            serde_json::from_str(&round_turn(1, "turn_1", 1, &[("seat_2", Some("a-2"))])).unwrap();
        turn["seat_id"] = json!("seat_1");
        turn["request_id"] = json!("a-2");
        c.observe(&turn.to_string());
        assert_eq!(c.violations(), 0, "{:?}", c.examples());
    }

    #[test]
    fn party_rules_read_frames_alone() {
        let head = |v: serde_json::Value| serde_json::from_value::<FrameHead>(v).unwrap();
        let turn = head(
            json!({"type": "turn_started", "request_id": "r", "seat_id": "seat_1",
            "round": 3, "actions": [{"seat_id": "seat_1", "text": "x", "request_id": "r"},
                                    {"seat_id": "seat_2", "text": null, "request_id": null}]}),
        );
        assert_eq!(seats_named(&turn), ["seat_1", "seat_1", "seat_2"]);
        assert_eq!(run_ids(&turn), ["r"]);
        let acted: BTreeSet<String> = ["seat_1".to_owned(), "seat_2".to_owned()].into();
        assert_eq!(
            left_out(&acted, turn.actions.as_deref().unwrap()),
            ["seat_2"]
        );
        assert!(run_for_another_seat("seat_1", |id| id == "r", &turn).is_empty());
        assert_eq!(
            run_for_another_seat("seat_2", |id| id == "r", &turn),
            [("r".to_owned(), Some("seat_1".to_owned()))]
        );
        // A seat_changed's `state` is a word, not a snapshot: still a frame.
        let changed = head(
            json!({"type": "seat_changed", "seq": 4, "seat_id": "seat_2",
            "state": "kicked", "role": "player"}),
        );
        assert_eq!(changed.state, None);
        assert_eq!(seats_named(&changed), ["seat_2"]);
    }

    #[test]
    fn the_turn_memory_is_bounded() {
        let mut c = StreamChecker::new();
        c.observe(&welcome(0));
        for n in 0..(RECENT_TURNS as u64 + 10) {
            c.observe(&frame(n + 1, "turn_completed", Some(&format!("turn_{n}"))));
        }
        assert_eq!(c.ended.order.len(), RECENT_TURNS);
        assert_eq!(c.ended.set.len(), RECENT_TURNS);
        assert_eq!(c.violations(), 0);
    }

    /// A player's stream with a gap, a frame after its turn's end, a frame
    /// out of order and frames in other orders of fields.
    fn troubled_stream() -> Vec<String> {
        let mut frames = vec![welcome(0)];
        frames.push(led(1, "turn_started", Some("t1"), r#","request_id":"r1""#));
        frames.push(led(2, "tool_call", Some("t1"), r#","args":{}"#));
        frames.push(led(4, "turn_completed", Some("t1"), ""));
        frames.push(led(5, "narrative_delta", Some("t1"), r#","text":"late""#));
        frames.push(led(3, "tool_result", Some("t1"), ""));
        frames.push(frame(6, "presence", None));
        frames.push(frame(7, "turn_started", Some("t2")));
        frames.push(led(8, "turn_failed", Some("t2"), ""));
        frames.push(led(9, "tool_call", Some("t2"), ""));
        frames
    }

    #[test]
    fn reading_along_finds_what_reading_whole_finds() {
        let frames = troubled_stream();
        let whole = feed(&frames);
        let mut along = StreamChecker::new();
        for f in &frames {
            along.observe_along(f, Instant::now());
        }
        assert_eq!(
            counts(&along),
            vec![
                ("frame_after_turn_end", 3),
                ("seq_gap", 1),
                ("seq_out_of_order", 1),
            ]
        );
        assert_eq!(counts(&along), counts(&whole));
        assert_eq!(along.frames, whole.frames);
        assert_eq!(along.last_seq(), Some(9));
        let logged = |c: &StreamChecker| c.log.iter().map(|l| (l.seq, l.hash)).collect::<Vec<_>>();
        assert_eq!(logged(&along), logged(&whole));
    }

    #[test]
    fn a_frame_read_along_is_still_checked_whole_through_the_player() {
        let good = led(1, "tool_call", Some("t1"), r#","args":{}"#);
        let broken = led(1, "tool_call", Some("t1"), r#","args":{"#);
        let changed = led(1, "tool_call", Some("t1"), r#","args":{"a":1}"#);
        let end = led(2, "turn_completed", Some("t1"), "");
        // The player's checker parses every frame: a broken body is its
        // violation, whatever a spectator reading along made of it.
        let player = feed(&[welcome(0), broken.clone(), end.clone()]);
        assert_eq!(
            counts(&player),
            vec![("malformed_frame", 1), ("seq_gap", 1)]
        );
        // A spectator whose bytes differ from the player's is caught by
        // the comparison, though it read only the lead.
        let player = feed(&[welcome(0), good, end.clone()]);
        let mut spectator = StreamChecker::new();
        for f in [welcome(0), changed, end] {
            spectator.observe_along(&f, Instant::now());
        }
        assert_eq!(spectator.violations(), 0);
        spectator.compare_with_player(&player, 2);
        assert_eq!(counts(&spectator), vec![("differs_from_player", 1)]);
    }
}
