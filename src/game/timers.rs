//! Durable timers (docs/protocol.md §9): what a session's world has
//! scheduled to happen by itself, as part of its save state.
//!
//! A timer is made by `schedule_event` ([`plan`] checks the request
//! against the bounds and the timers there are), dropped by
//! `cancel_event`, and fired by a *world turn*: the turn's `turn_started`
//! carries [`super::Effect::FireTimer`], which removes the timer (or, for a
//! repeating one, sets its next due time) in the same journalled frame
//! that begins the turn. So a timer fires exactly once per due time: a
//! crash before that frame is durable leaves it due (it fires after the
//! restart), one after leaves it fired (never again). Nothing here reads a
//! clock: every time is given.

use serde::{Deserialize, Serialize};

use crate::ids::TimerId;

/// Pending timers a session holds at most (`TIMER_LIMIT` past it).
pub const MAX_PENDING: usize = 64;
/// The shortest repeat, in seconds.
pub const MIN_REPEAT_S: u64 = 5;
/// How far ahead a timer may be due, and the longest repeat, in seconds
/// (30 days).
pub const MAX_HORIZON_S: u64 = 2_592_000;
/// Longest event name, key and note, in characters.
pub const MAX_EVENT_CHARS: usize = 64;
pub const MAX_KEY_CHARS: usize = 64;
pub const MAX_NOTE_CHARS: usize = 500;

/// One pending timer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timer {
    pub timer_id: TimerId,
    /// What happens, as the game master named it (`guards_return`).
    pub event: String,
    /// What the game master noted for when it fires.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// When it is due next (ms since the Unix epoch).
    pub due_at: i64,
    /// Fires again this many seconds after each due time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_s: Option<u64>,
    /// Scheduling under the same key again replaces this timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it was scheduled (ms since the Unix epoch).
    pub created_at: i64,
}

impl Timer {
    /// The due time after this one once it fires at `now`: the first of
    /// `due_at + k × repeat_s` (k ≥ 1) later than `now`, so a repeating
    /// timer missed several times while nothing ran fires once, late, and
    /// then keeps its rhythm. `None` for a timer that does not repeat.
    pub fn next_due(&self, now: i64) -> Option<i64> {
        let step = i64::try_from(self.repeat_s?.saturating_mul(1000))
            .ok()
            .filter(|s| *s > 0)?;
        let behind = now.saturating_sub(self.due_at).max(0);
        let k = behind / step + 1;
        Some(self.due_at.saturating_add(k.saturating_mul(step)))
    }
}

/// A session's pending timers, soonest first (ties by id), so the next
/// due one is the first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timers {
    pending: Vec<Timer>,
}

impl Timers {
    /// Every pending timer, soonest first.
    pub fn pending(&self) -> &[Timer] {
        &self.pending
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn get(&self, timer_id: &str) -> Option<&Timer> {
        self.pending
            .iter()
            .find(|t| t.timer_id.as_str() == timer_id)
    }

    pub fn by_key(&self, key: &str) -> Option<&Timer> {
        self.pending.iter().find(|t| t.key.as_deref() == Some(key))
    }

    /// The timer due next, if any.
    pub fn next(&self) -> Option<&Timer> {
        self.pending.first()
    }

    /// The timer to fire at `now`: the soonest, if it is due.
    pub fn due(&self, now: i64) -> Option<&Timer> {
        self.next().filter(|t| t.due_at <= now)
    }

    /// `timer` is scheduled, replacing `replaces` (the timer of its key).
    pub(super) fn scheduled(&mut self, timer: &Timer, replaces: Option<&TimerId>) {
        if let Some(old) = replaces {
            self.remove(old.as_str());
        }
        self.remove(timer.timer_id.as_str());
        self.insert(timer.clone());
    }

    pub(super) fn cancelled(&mut self, timer_id: &TimerId) {
        self.remove(timer_id.as_str());
    }

    /// `timer_id` fired at its due time `due_at`: it is gone, or due again
    /// at `next_due_at`. A timer no longer due then (replaced or fired
    /// already) is left as it is.
    pub(super) fn fired(&mut self, timer_id: &TimerId, due_at: i64, next_due_at: Option<i64>) {
        let Some(i) = self
            .pending
            .iter()
            .position(|t| t.timer_id == *timer_id && t.due_at == due_at)
        else {
            return;
        };
        let mut timer = self.pending.remove(i);
        if let Some(next) = next_due_at {
            timer.due_at = next;
            self.insert(timer);
        }
    }

    fn remove(&mut self, timer_id: &str) {
        self.pending.retain(|t| t.timer_id.as_str() != timer_id);
    }

    fn insert(&mut self, timer: Timer) {
        let at = self
            .pending
            .partition_point(|t| (t.due_at, &t.timer_id) < (timer.due_at, &timer.timer_id));
        self.pending.insert(at, timer);
    }
}

/// When a requested timer is due: after `delay_s`, or at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Delay(u64),
    At(i64),
}

/// What `schedule_event` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub event: String,
    pub note: String,
    pub when: When,
    pub repeat_s: Option<u64>,
    pub key: Option<String>,
}

/// Why a timer cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The session holds [`MAX_PENDING`] timers already.
    #[error("the session has {MAX_PENDING} pending timers already; cancel one first")]
    Limit,
    /// An argument is out of its bounds.
    #[error("{0}")]
    Invalid(String),
}

/// The timer `request` makes at `now` with the fresh id `timer_id`, and
/// the timer it replaces (the one of its key), or why not.
pub fn plan(
    timers: &Timers,
    request: Request,
    now: i64,
    timer_id: TimerId,
) -> Result<(Timer, Option<TimerId>), Refused> {
    let invalid = |m: String| Err(Refused::Invalid(m));
    let event = request.event.trim();
    if event.is_empty() || event.chars().count() > MAX_EVENT_CHARS || has_control(event) {
        return invalid(format!(
            "event must be 1 to {MAX_EVENT_CHARS} characters without control characters"
        ));
    }
    if request.note.chars().count() > MAX_NOTE_CHARS {
        return invalid(format!("note must be at most {MAX_NOTE_CHARS} characters"));
    }
    let key = match request.key.as_deref().map(str::trim) {
        Some(k) if k.is_empty() || k.chars().count() > MAX_KEY_CHARS || has_control(k) => {
            return invalid(format!(
                "key must be 1 to {MAX_KEY_CHARS} characters without control characters"
            ));
        }
        k => k.map(str::to_owned),
    };
    if let Some(r) = request.repeat_s
        && !(MIN_REPEAT_S..=MAX_HORIZON_S).contains(&r)
    {
        return invalid(format!(
            "repeat_s must be {MIN_REPEAT_S} to {MAX_HORIZON_S} seconds"
        ));
    }
    let horizon = now.saturating_add(MAX_HORIZON_S as i64 * 1000);
    let due_at = match request.when {
        When::Delay(s) if (1..=MAX_HORIZON_S).contains(&s) => now + s as i64 * 1000,
        When::Delay(_) => {
            return invalid(format!("delay_s must be 1 to {MAX_HORIZON_S} seconds"));
        }
        When::At(at) if at > now && at <= horizon => at,
        When::At(_) => {
            return invalid(format!(
                "at must be a time in the future, at most {} days ahead",
                MAX_HORIZON_S / 86_400
            ));
        }
    };
    let replaces = key
        .as_deref()
        .and_then(|k| timers.by_key(k))
        .map(|t| t.timer_id.clone());
    if replaces.is_none() && timers.len() >= MAX_PENDING {
        return Err(Refused::Limit);
    }
    let timer = Timer {
        timer_id,
        event: event.to_owned(),
        note: request.note.trim().to_owned(),
        due_at,
        repeat_s: request.repeat_s,
        key,
        created_at: now,
    };
    Ok((timer, replaces))
}

/// How a world turn's message begins ([`world_message`]).
pub const WORLD_PREFIX: &str = "[world] The timed event ";

/// The message a world turn's model reads: the event, and the note the
/// game master left for it. It starts with [`WORLD_PREFIX`], by which a
/// model in this process (the offline game master) knows it.
pub fn world_message(event: &str, note: &str) -> String {
    if note.is_empty() {
        format!("{WORLD_PREFIX}\"{event}\" is due.")
    } else {
        format!("{WORLD_PREFIX}\"{event}\" is due. Note: {note}")
    }
}

/// The event and note of a world turn's message ([`world_message`]), if
/// `text` is one.
pub fn read_world_message(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix(WORLD_PREFIX)?.strip_prefix('"')?;
    let (event, rest) = rest.split_once("\" is due.")?;
    let note = rest.strip_prefix(" Note: ").unwrap_or("");
    Some((event, note))
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// Parses an RFC 3339 time (`2026-11-29T10:00:00Z`, any offset) as ms
/// since the Unix epoch.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let at =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_800_000_000_000;

    fn ask(event: &str, delay_s: u64) -> Request {
        Request {
            event: event.into(),
            note: String::new(),
            when: When::Delay(delay_s),
            repeat_s: None,
            key: None,
        }
    }

    fn schedule(timers: &mut Timers, request: Request, id: &str) -> Result<TimerId, Refused> {
        let (timer, replaces) = plan(timers, request, NOW, TimerId::from(id))?;
        timers.scheduled(&timer, replaces.as_ref());
        Ok(timer.timer_id)
    }

    #[test]
    fn timers_keep_the_soonest_first_and_a_key_replaces() {
        let mut timers = Timers::default();
        schedule(&mut timers, ask("late", 60), "tmr_b").unwrap();
        schedule(&mut timers, ask("soon", 10), "tmr_a").unwrap();
        assert_eq!(timers.next().unwrap().event, "soon");
        assert_eq!(timers.due(NOW + 9_999), None);
        assert_eq!(timers.due(NOW + 10_000).unwrap().event, "soon");
        let keyed = |d| Request {
            key: Some("tide".into()),
            ..ask("tide", d)
        };
        schedule(&mut timers, keyed(30), "tmr_c").unwrap();
        schedule(&mut timers, keyed(5), "tmr_d").unwrap();
        let events: Vec<&str> = timers
            .pending()
            .iter()
            .map(|t| t.timer_id.as_str())
            .collect();
        assert_eq!(events, ["tmr_d", "tmr_a", "tmr_b"]);
    }

    #[test]
    fn bounds_are_refused_with_what_is_allowed() {
        let mut timers = Timers::default();
        for (request, wanted) in [
            (ask("", 10), "event"),
            (ask(&"e".repeat(65), 10), "event"),
            (ask("x", 0), "delay_s"),
            (ask("x", MAX_HORIZON_S + 1), "delay_s"),
            (
                Request {
                    repeat_s: Some(4),
                    ..ask("x", 10)
                },
                "repeat_s",
            ),
            (
                Request {
                    when: When::At(NOW - 1),
                    ..ask("x", 10)
                },
                "at",
            ),
            (
                Request {
                    note: "n".repeat(501),
                    ..ask("x", 10)
                },
                "note",
            ),
        ] {
            let refused = plan(&timers, request, NOW, "tmr_x".into()).unwrap_err();
            assert!(refused.to_string().starts_with(wanted), "{refused}");
        }
        for i in 0..MAX_PENDING {
            schedule(&mut timers, ask("e", 10), &format!("tmr_{i}")).unwrap();
        }
        assert_eq!(
            schedule(&mut timers, ask("e", 10), "tmr_65"),
            Err(Refused::Limit)
        );
        // A key of a pending timer replaces it: the count stays.
        let keyed = Request {
            key: Some("k".into()),
            ..ask("e", 10)
        };
        let mut timers = Timers::default();
        for i in 0..MAX_PENDING - 1 {
            schedule(&mut timers, ask("e", 10), &format!("tmr_{i}")).unwrap();
        }
        schedule(&mut timers, keyed.clone(), "tmr_k1").unwrap();
        schedule(&mut timers, keyed, "tmr_k2").unwrap();
        assert_eq!(timers.len(), MAX_PENDING);
    }

    #[test]
    fn a_repeating_timer_missed_while_down_fires_once_and_keeps_its_rhythm() {
        let timer = Timer {
            timer_id: "tmr_a".into(),
            event: "tick".into(),
            note: String::new(),
            due_at: NOW,
            repeat_s: Some(10),
            key: None,
            created_at: NOW - 10_000,
        };
        assert_eq!(timer.next_due(NOW), Some(NOW + 10_000));
        assert_eq!(timer.next_due(NOW + 35_000), Some(NOW + 40_000));
        assert_eq!(timer.next_due(NOW + 40_000), Some(NOW + 50_000));
        let once = Timer {
            repeat_s: None,
            ..timer
        };
        assert_eq!(once.next_due(NOW), None);
    }

    #[test]
    fn a_world_message_reads_back_as_its_event_and_note() {
        let text = world_message("tide_rises", "The water climbs. 水涨了。");
        assert_eq!(
            read_world_message(&text),
            Some(("tide_rises", "The water climbs. 水涨了。"))
        );
        assert_eq!(read_world_message(&world_message("x", "")), Some(("x", "")));
        assert_eq!(read_world_message("I wait"), None);
    }

    #[test]
    fn rfc3339_times_with_any_offset_are_read() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse_rfc3339("1970-01-01T01:00:01.5+01:00"), Some(1500));
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }

    proptest! {
        /// However the fires and schedules interleave, a timer fired at a
        /// due time is never due at that time again, and firing the same
        /// due time twice (a replay) changes nothing the second time.
        #[test]
        fn a_due_time_fires_once(delays in proptest::collection::vec(1u64..100, 1..10),
                                 repeat in proptest::option::of(5u64..50),
                                 steps in proptest::collection::vec(0i64..200_000, 1..20)) {
            let mut timers = Timers::default();
            for (i, d) in delays.iter().enumerate() {
                let request = Request { repeat_s: repeat, ..ask("e", *d) };
                schedule(&mut timers, request, &format!("tmr_{i}")).unwrap();
            }
            let mut now = NOW;
            let mut fired: Vec<(TimerId, i64)> = Vec::new();
            for step in steps {
                now += step;
                while let Some(t) = timers.due(now).cloned() {
                    prop_assert!(!fired.contains(&(t.timer_id.clone(), t.due_at)));
                    let next = t.next_due(now);
                    timers.fired(&t.timer_id, t.due_at, next);
                    let again = timers.clone();
                    timers.fired(&t.timer_id, t.due_at, next);
                    prop_assert_eq!(&again, &timers);
                    if let Some(n) = next {
                        prop_assert!(n > now);
                    }
                    fired.push((t.timer_id, t.due_at));
                }
            }
            prop_assert!(timers.len() <= delays.len());
        }
    }
}
