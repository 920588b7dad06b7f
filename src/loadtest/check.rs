//! The protocol checker of the load test: what one connection must receive
//! (docs/protocol.md §2 and §3) and what a spectator must share with its session's
//! player.
//!
//! It is pure: fed each text frame as it arrived, it keeps only what the
//! checks need (the seq and a hash of the bytes of every story frame, and
//! the turns that recently ended) and counts violations by kind. No IO, so
//! the unit tests below feed it hand-made streams.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::hash::{DefaultHasher, Hasher};
use std::time::{Duration, Instant};

use serde::Deserialize;

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
}

impl FrameHead {
    /// Whether this frame ends its turn.
    pub fn ends_turn(&self) -> bool {
        matches!(self.kind.as_str(), "turn_completed" | "turn_failed")
    }
}

/// Story frame types (docs/protocol.md §2.6): each must carry a seq.
const STORY_KINDS: [&str; 7] = [
    "turn_started",
    "tool_call",
    "tool_result",
    "narrative_delta",
    "turn_completed",
    "turn_failed",
    "presence",
];

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
    /// Turns that ended, newest last, at most [`RECENT_TURNS`].
    ended: VecDeque<String>,
    ended_set: HashSet<String>,
    /// Text frames seen, of any kind.
    frames: u64,
    counts: BTreeMap<&'static str, u64>,
    examples: Vec<Violation>,
    /// Chats sent on this connection and not yet answered (`ack` or
    /// `error`), by request id.
    unanswered: HashSet<String>,
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

/// A hash of a frame's bytes: equal frames hash equal, in this process.
fn hash_bytes(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(text.as_bytes());
    h.finish()
}

impl StreamChecker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Judges one text frame, read just now, and says what it was.
    pub fn observe(&mut self, text: &str) -> Observed {
        self.observe_at(text, Instant::now())
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
        self.story(seq, &head, text, at);
        Observed::Story(head)
    }

    /// A chat with `request_id` was sent on this connection: its `ack` (or
    /// `error`) must come before any story frame of the turn it starts.
    pub fn chat_sent(&mut self, request_id: &str) {
        if self.unanswered.len() >= UNANSWERED_CHATS {
            self.unanswered.clear();
        }
        self.unanswered.insert(request_id.to_owned());
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

    fn story(&mut self, seq: u64, head: &FrameHead, text: &str, at: Instant) {
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
            }
        }
        let Some(turn_id) = head.turn_id.as_deref() else {
            return;
        };
        if self.ended_set.contains(turn_id) {
            self.violation(Violation::AfterTurnEnd {
                turn_id: turn_id.to_owned(),
                seq,
            });
        } else if head.ends_turn() {
            if self.ended.len() == RECENT_TURNS
                && let Some(oldest) = self.ended.pop_front()
            {
                self.ended_set.remove(&oldest);
            }
            self.ended.push_back(turn_id.to_owned());
            self.ended_set.insert(turn_id.to_owned());
        }
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

    #[test]
    fn the_turn_memory_is_bounded() {
        let mut c = StreamChecker::new();
        c.observe(&welcome(0));
        for n in 0..(RECENT_TURNS as u64 + 10) {
            c.observe(&frame(n + 1, "turn_completed", Some(&format!("turn_{n}"))));
        }
        assert_eq!(c.ended.len(), RECENT_TURNS);
        assert_eq!(c.ended_set.len(), RECENT_TURNS);
        assert_eq!(c.violations(), 0);
    }
}
