//! Every rate limiter of the node (a session's chats and calls, a
//! WebSocket's frames, admission, the service API), built here on one
//! clock.
//!
//! governor's `RateLimiter::direct` and `RateLimiter::keyed` each make a
//! new clock, and a new `quanta` clock asks the CPU (four `cpuid`
//! instructions) whether its time-stamp counter can be trusted. In a
//! virtual machine each `cpuid` traps to the hypervisor: on a 2-core VM a
//! clock cost about 25 µs, five of them (a session's three limiters and
//! one per connection) were a fifth of the server's CPU for a new session
//! with two connections, and every refusal made one more to say how long
//! to wait. Made here, every limiter and every refusal clones the node's
//! one clock, which asks once (BENCHMARKS.md, "A session's creation").
//!
//! Limiters that every worker thread checks (admission, the service API)
//! are governor's `DashMap`-backed keyed ones ([`keyed`]); a map that one
//! actor alone checks (a session's seats) is a plain one
//! ([`owned_keyed`]).

use std::cell::OnceCell;
use std::num::NonZeroU32;
use std::sync::OnceLock;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::{DefaultKeyedStateStore, HashMapStateStore};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, NotUntil, Quota, RateLimiter};

/// The node's clock, made at its first use.
fn clock() -> DefaultClock {
    static CLOCK: OnceLock<DefaultClock> = OnceLock::new();
    CLOCK.get_or_init(DefaultClock::default).clone()
}

/// A limiter made at its first use, for one owner (a session's actor),
/// which keeps its quota. A limiter nobody has asked yet is full, so making
/// it late changes no answer; a session that never chats, talks or takes a
/// direct call keeps no limiter.
pub struct OnFirstUse<L>(OnceCell<Box<L>>);

impl<L> Default for OnFirstUse<L> {
    fn default() -> Self {
        Self(OnceCell::new())
    }
}

impl<L> OnFirstUse<L> {
    /// The limiter, made under `quota` with `make` the first time.
    pub fn get(&self, quota: Quota, make: fn(Quota) -> L) -> &L {
        self.0.get_or_init(|| Box::new(make(quota)))
    }
}

/// `per_minute` a minute in bursts of up to `burst` (each at least 1).
pub fn per_minute(per_minute: u32, burst: u32) -> Quota {
    Quota::per_minute(at_least_one(per_minute)).allow_burst(at_least_one(burst))
}

/// `n`, or 1 for 0: a quota of nothing would refuse everything forever.
pub fn at_least_one(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// One bucket under `quota`.
pub fn direct(quota: Quota) -> DefaultDirectRateLimiter {
    RateLimiter::direct_with_clock(quota, clock())
}

/// A bucket per key under `quota`.
pub fn keyed<K: Clone + std::hash::Hash + Eq>(quota: Quota) -> DefaultKeyedRateLimiter<K> {
    RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock())
}

/// A bucket per key, for a map one owner checks at a time: a session's
/// seats. A `HashMap` behind an uncontended lock, where [`keyed`]'s
/// `DashMap` (for maps every worker thread checks) is eight cache-padded
/// shards, 1 KiB before its first key, in every session.
pub type OwnedKeyed<K> = RateLimiter<K, HashMapStateStore<K>, DefaultClock>;

/// An [`OwnedKeyed`] under `quota`.
pub fn owned_keyed<K: Clone + std::hash::Hash + Eq>(quota: Quota) -> OwnedKeyed<K> {
    RateLimiter::hashmap_with_clock(quota, clock())
}

/// How long a refused caller waits before the limiter has room again.
pub fn wait(not_until: &NotUntil<<DefaultClock as Clock>::Instant>) -> Duration {
    not_until.wait_time_from(clock().now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limiter_made_at_its_first_use_is_made_once_and_answers_as_a_new_one() {
        let quota = per_minute(60, 2);
        let lazy = OnFirstUse::<OwnedKeyed<&str>>::default();
        assert!(lazy.0.get().is_none(), "nothing is made before a use");
        let eager = owned_keyed::<&str>(quota);
        for _ in 0..3 {
            assert_eq!(
                lazy.get(quota, owned_keyed).check_key(&"a").is_ok(),
                eager.check_key(&"a").is_ok()
            );
        }
        let spent = lazy.get(quota, owned_keyed).check_key(&"a");
        assert!(spent.is_err(), "spent stays spent");
        assert!(lazy.get(quota, owned_keyed).check_key(&"b").is_ok());
    }

    #[test]
    fn a_spent_bucket_says_how_long_to_wait_and_others_keep_their_own() {
        let bucket = direct(per_minute(60, 2));
        assert!(bucket.check().is_ok());
        assert!(bucket.check().is_ok());
        let refused = bucket.check().unwrap_err();
        let waited = wait(&refused);
        assert!(
            waited > Duration::ZERO && waited <= Duration::from_secs(1),
            "{waited:?}"
        );

        let keys = keyed::<&str>(per_minute(60, 1));
        assert!(keys.check_key(&"a").is_ok());
        assert!(keys.check_key(&"a").is_err());
        assert!(keys.check_key(&"b").is_ok(), "each key has its own bucket");
        let owned = owned_keyed::<&str>(per_minute(60, 1));
        assert!(owned.check_key(&"a").is_ok());
        assert!(owned.check_key(&"a").is_err());
        assert!(owned.check_key(&"b").is_ok(), "each key has its own bucket");
    }

    #[test]
    fn a_zero_rate_is_one() {
        let bucket = direct(per_minute(0, 0));
        assert!(bucket.check().is_ok());
        assert!(bucket.check().is_err());
    }
}
