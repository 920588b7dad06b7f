//! The sweeper's bookkeeping: which sessions with work of their own the
//! hub loads on a sweep. A session that is not loaded cannot wake itself,
//! so the hub asks the store every [`SWEEP_EVERY`] for open sessions (on
//! PostgreSQL, only those no live node claims) with a timer due
//! (docs/protocol.md §9) or a stored chat that was acknowledged and has
//! not run (its node stopped it when storage failed, or died: §15), and
//! loads them through its normal load path: a loaded session fires its
//! due timers and runs its stored chats by itself at start, whether or
//! not a client comes back.
//!
//! What this piece decides: how many sessions one sweep loads at most, that
//! a sweep never starts while the last one is still on its way, and that a
//! session which keeps showing the same due time (its load fails: a newer
//! format, storage errors, a quota; or it loads and cannot fire) is tried
//! again later and later rather than on every sweep.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::ids::SessionId;

/// How often the hub looks for due timers of sessions it has not loaded:
/// well inside the 2 s a due timer may wait on SQLite.
pub(super) const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// How often the `timers_pending` gauge is read from the store.
pub(super) const COUNT_EVERY: Duration = Duration::from_secs(5);

/// Sessions one sweep loads at most; the next sweep goes on with the rest.
const LOADS_PER_SWEEP: usize = 128;

/// The most due sessions one sweep reads: room for those waiting out a
/// retry, so they cannot crowd out the rest of a batch.
const READ_MOST: usize = 4096;

/// The most sessions with stored chats one sweep reads: on SQLite the
/// sessions running here are among them (and skipped), so the read
/// reaches past the queues of a busy node.
pub(super) const WAITING_READ_MOST: u32 = READ_MOST as u32;

/// The sessions of `due` (due timers) and `waiting` (stored chats), each
/// once with the sooner of its times, soonest first: what
/// [`Sweeper::pick`] picks from.
pub(super) fn merged(
    mut due: Vec<(SessionId, i64)>,
    waiting: Vec<(SessionId, i64)>,
) -> Vec<(SessionId, i64)> {
    due.extend(waiting);
    due.sort_by_key(|(_, at)| *at);
    let mut seen = HashSet::new();
    due.retain(|(id, _)| seen.insert(id.clone()));
    due
}

/// The wait before a session with the same due time is tried again,
/// doubled on each try, up to [`RETRY_MOST`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MOST: Duration = Duration::from_secs(10 * 60);

/// A session the sweeper tried to load: at which due time, how often with
/// that due time, and when it may be tried again.
struct Tried {
    due_at: i64,
    tries: u32,
    not_before: Instant,
}

/// The sweeper's state, owned by the hub.
#[derive(Default)]
pub(super) struct Sweeper {
    /// A sweep's read, or loads it began, are on their way.
    loads: Option<usize>,
    /// The sweep on its way loads a whole batch: more may be due, so the
    /// next sweep follows at once rather than at the next tick.
    full: bool,
    /// Sessions tried lately; kept only while the store still shows them
    /// due, so it holds at most what one read returns.
    tried: HashMap<SessionId, Tried>,
    /// The store's timers are being counted.
    counting: bool,
    /// The last read of due timers failed: the next failures are not
    /// warned of again (a database away fails every sweep).
    failing: bool,
}

impl Sweeper {
    /// Begins a sweep, unless one is on its way; answers how many due
    /// sessions to read.
    pub(super) fn begin(&mut self) -> Option<u32> {
        if self.loads.is_some() {
            return None;
        }
        self.loads = Some(0);
        let most = (LOADS_PER_SWEEP + self.tried.len()).min(READ_MOST);
        Some(u32::try_from(most).unwrap_or(u32::MAX))
    }

    /// The sessions to load of those the store shows `due` (with their
    /// soonest due time) at `now`, leaving out the `busy` ones (live here,
    /// being loaded or deleted) and those waiting out a retry; the sweep
    /// lasts until each of them has [`Self::loaded`].
    pub(super) fn pick(
        &mut self,
        due: Vec<(SessionId, i64)>,
        now: Instant,
        busy: &HashSet<SessionId>,
    ) -> Vec<SessionId> {
        self.failing = false;
        let shown: HashSet<&SessionId> = due.iter().map(|(id, _)| id).collect();
        self.tried.retain(|id, _| shown.contains(id));
        let mut picked = Vec::new();
        for (id, due_at) in due {
            if picked.len() == LOADS_PER_SWEEP {
                break;
            }
            if busy.contains(&id) {
                continue;
            }
            let tries = match self.tried.get(&id) {
                Some(t) if now < t.not_before => continue,
                // The same due time again: the last load did not fire it.
                Some(t) if t.due_at == due_at => t.tries.saturating_add(1),
                _ => 1,
            };
            let wait = RETRY_FIRST
                .saturating_mul(1 << (tries - 1).min(16))
                .min(RETRY_MOST);
            let not_before = now + wait;
            let tried = Tried {
                due_at,
                tries,
                not_before,
            };
            self.tried.insert(id.clone(), tried);
            picked.push(id);
        }
        self.loads = (!picked.is_empty()).then_some(picked.len());
        self.full = picked.len() == LOADS_PER_SWEEP;
        picked
    }

    /// One load a sweep began has answered; answers whether that ended a
    /// sweep that loaded a whole batch (sweep again now).
    pub(super) fn loaded(&mut self) -> bool {
        self.loads = match self.loads {
            Some(n) if n > 1 => Some(n - 1),
            _ => None,
        };
        self.loads.is_none() && std::mem::take(&mut self.full)
    }

    /// The node began draining while a sweep read: nothing loads.
    pub(super) fn abandon(&mut self) {
        self.loads = None;
    }

    /// A sweep's read failed: nothing loads; answers whether this is the
    /// first failure since a read succeeded (the one worth a warning).
    pub(super) fn read_failed(&mut self) -> bool {
        self.loads = None;
        !std::mem::replace(&mut self.failing, true)
    }

    /// Begins counting the store's timers, unless a count is on its way.
    pub(super) fn begin_count(&mut self) -> bool {
        !std::mem::replace(&mut self.counting, true)
    }

    /// The count answered.
    pub(super) fn counted(&mut self) {
        self.counting = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(ids: &[(&str, i64)]) -> Vec<(SessionId, i64)> {
        ids.iter()
            .map(|(id, at)| (SessionId::from(*id), *at))
            .collect()
    }

    fn names(ids: &[SessionId]) -> Vec<&str> {
        ids.iter().map(|id| id.as_str()).collect()
    }

    #[test]
    fn a_sweep_loads_what_is_due_and_not_busy_and_never_overlaps() {
        let mut s = Sweeper::default();
        let now = Instant::now();
        assert!(s.begin().is_some());
        assert_eq!(s.begin(), None, "a sweep on its way is not doubled");
        let busy = HashSet::from([SessionId::from("b")]);
        let picked = s.pick(due(&[("a", 1), ("b", 2), ("c", 3)]), now, &busy);
        assert_eq!(names(&picked), ["a", "c"]);
        assert_eq!(s.begin(), None, "loads on their way");
        assert!(!s.loaded());
        assert_eq!(s.begin(), None, "one load still on its way");
        assert!(!s.loaded());
        assert!(s.begin().is_some(), "all loads answered");
        // Nothing to load ends the sweep at once.
        assert!(s.pick(Vec::new(), now, &HashSet::new()).is_empty());
        assert!(s.begin().is_some());
    }

    #[test]
    fn due_timers_and_waiting_chats_give_each_session_once_at_its_soonest() {
        let timers = due(&[("a", 5), ("b", 9)]);
        let chats = due(&[("c", 1), ("b", 3), ("d", 7)]);
        let both = merged(timers, chats);
        let order: Vec<(&str, i64)> = both.iter().map(|(id, at)| (id.as_str(), *at)).collect();
        assert_eq!(order, [("c", 1), ("b", 3), ("a", 5), ("d", 7)]);
        assert!(merged(Vec::new(), Vec::new()).is_empty());
    }

    #[test]
    fn a_database_away_is_warned_of_once_until_a_read_succeeds() {
        let mut s = Sweeper::default();
        s.begin();
        assert!(s.read_failed());
        s.begin();
        assert!(!s.read_failed());
        s.begin();
        s.pick(Vec::new(), Instant::now(), &HashSet::new());
        s.begin();
        assert!(s.read_failed());
    }

    #[test]
    fn one_sweep_loads_a_bounded_batch() {
        let mut s = Sweeper::default();
        let many: Vec<(SessionId, i64)> = (0..LOADS_PER_SWEEP as i64 + 10)
            .map(|i| (SessionId::from(format!("s{i}")), i))
            .collect();
        s.begin();
        let picked = s.pick(many, Instant::now(), &HashSet::new());
        assert_eq!(picked.len(), LOADS_PER_SWEEP);
        assert_eq!(picked[0].as_str(), "s0", "soonest first");
        let last = picked.iter().map(|_| s.loaded()).last();
        assert_eq!(
            last,
            Some(true),
            "a whole batch: the next sweep follows at once"
        );
        s.begin();
        let picked = s.pick(due(&[("s1000", 1000)]), Instant::now(), &HashSet::new());
        assert_eq!(picked.len(), 1);
        assert!(
            !s.loaded(),
            "the rest fit: the next sweep waits for its tick"
        );
    }

    #[test]
    fn a_session_showing_the_same_due_time_again_is_tried_later_and_later() {
        let mut s = Sweeper::default();
        let t0 = Instant::now();
        let none = HashSet::new();
        let mut sweep = |at: Instant, shown: &[(&str, i64)]| {
            s.begin();
            let picked = s.pick(due(shown), at, &none);
            for _ in &picked {
                s.loaded();
            }
            names(&picked)
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(sweep(t0, &[("a", 5)]), ["a"]);
        // Its load failed (or did not fire): not again on the next sweeps.
        assert!(sweep(t0 + SWEEP_EVERY, &[("a", 5)]).is_empty());
        assert_eq!(sweep(t0 + RETRY_FIRST, &[("a", 5)]), ["a"]);
        // Then twice as long.
        assert!(sweep(t0 + RETRY_FIRST * 2, &[("a", 5)]).is_empty());
        assert_eq!(sweep(t0 + RETRY_FIRST * 3, &[("a", 5)]), ["a"]);
        // The wait has a ceiling.
        let mut at = t0 + RETRY_FIRST * 3;
        for _ in 0..40 {
            at += RETRY_MOST;
            assert_eq!(sweep(at, &[("a", 5)]), ["a"]);
        }
        // Fired (a repeating timer's next due time, once the wait is
        // over), or gone from the index and back: tried at once.
        at += RETRY_MOST;
        assert_eq!(sweep(at, &[("a", 10)]), ["a"]);
        assert!(sweep(at, &[]).is_empty());
        assert_eq!(sweep(at, &[("a", 10)]), ["a"]);
    }

    #[test]
    fn sessions_waiting_out_a_retry_do_not_crowd_out_the_rest() {
        let mut s = Sweeper::default();
        let now = Instant::now();
        let stuck: Vec<(SessionId, i64)> = (0..LOADS_PER_SWEEP as i64)
            .map(|i| (SessionId::from(format!("s{i}")), i))
            .collect();
        s.begin();
        let picked = s.pick(stuck.clone(), now, &HashSet::new());
        for _ in &picked {
            s.loaded();
        }
        let read = s.begin().expect("no sweep on its way");
        assert_eq!(
            read as usize,
            2 * LOADS_PER_SWEEP,
            "reads past the stuck ones"
        );
        let mut shown = stuck;
        shown.push((SessionId::from("late"), 1000));
        let picked = s.pick(shown, now + SWEEP_EVERY, &HashSet::new());
        assert_eq!(names(&picked), ["late"]);
    }
}
