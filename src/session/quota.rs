//! What a node's live sessions hold, counted so that one more is taken
//! only while it fits: the node's cap on sessions, each tenant's share of
//! it, and the bytes of save state they hold in all.
//!
//! The hub owns one [`LiveTally`]: a session is counted from the moment it
//! is admitted (a creation still being written counts, so a burst of them
//! cannot pass the caps together) until the hub forgets it. No IO, no actix.

use std::collections::HashMap;

/// The caps a node's live sessions are held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// `QUESTD_MAX_SESSIONS`.
    pub max_sessions: usize,
    /// `QUESTD_MAX_SESSIONS_PER_TENANT`.
    pub per_tenant: usize,
    /// `QUESTD_MAX_LIVE_STATE_MB`, in bytes.
    pub max_state_bytes: u64,
}

/// Why one more session does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The node holds its most sessions.
    Node(usize),
    /// The tenant holds its share of them.
    Tenant(usize),
    /// The sessions' state would pass the node's byte budget; the bytes
    /// it would have to free.
    State { over: u64 },
}

/// The live sessions' counts, per tenant and in all, and their bytes.
#[derive(Debug)]
pub(super) struct LiveTally {
    quotas: Quotas,
    sessions: usize,
    bytes: u64,
    /// Only tenants with a live session are here.
    per_tenant: HashMap<String, usize>,
}

impl LiveTally {
    pub(super) fn new(quotas: Quotas) -> Self {
        Self {
            quotas: Quotas {
                max_sessions: quotas.max_sessions.max(1),
                per_tenant: quotas.per_tenant.max(1),
                max_state_bytes: quotas.max_state_bytes,
            },
            sessions: 0,
            bytes: 0,
            per_tenant: HashMap::new(),
        }
    }

    /// Counts one more session of `tenant` holding `bytes`, or says why it
    /// does not fit (the node's cap first, then the tenant's, then bytes).
    /// A session alone larger than the whole budget still fits an empty
    /// node, so no campaign the body limit lets through is refused for
    /// good.
    pub(super) fn admit(&mut self, tenant: &str, bytes: u64) -> Result<(), Refusal> {
        if self.sessions >= self.quotas.max_sessions {
            return Err(Refusal::Node(self.quotas.max_sessions));
        }
        let held = self.per_tenant.get(tenant).copied().unwrap_or(0);
        if held >= self.quotas.per_tenant {
            return Err(Refusal::Tenant(self.quotas.per_tenant));
        }
        let total = self.bytes.saturating_add(bytes);
        if self.sessions > 0 && total > self.quotas.max_state_bytes {
            return Err(Refusal::State {
                over: total - self.quotas.max_state_bytes,
            });
        }
        self.sessions += 1;
        self.bytes = total;
        *self.per_tenant.entry(tenant.to_owned()).or_insert(0) += 1;
        Ok(())
    }

    /// Forgets a session [`LiveTally::admit`] counted.
    pub(super) fn release(&mut self, tenant: &str, bytes: u64) {
        self.sessions = self.sessions.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(held) = self.per_tenant.get_mut(tenant) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.per_tenant.remove(tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTAS: Quotas = Quotas {
        max_sessions: 4,
        per_tenant: 2,
        max_state_bytes: 100,
    };

    #[test]
    fn each_cap_refuses_in_its_turn_and_release_gives_room_back() {
        let mut t = LiveTally::new(QUOTAS);
        // (tenant, bytes, what admit answers)
        let steps: [(&str, u64, Result<(), Refusal>); 7] = [
            ("acme", 10, Ok(())),
            ("acme", 10, Ok(())),
            ("acme", 10, Err(Refusal::Tenant(2))),
            ("zeta", 70, Ok(())),
            ("beta", 20, Err(Refusal::State { over: 10 })),
            ("beta", 10, Ok(())),
            ("gamma", 0, Err(Refusal::Node(4))),
        ];
        for (i, (tenant, bytes, want)) in steps.into_iter().enumerate() {
            assert_eq!(t.admit(tenant, bytes), want, "step {i}");
        }
        assert_eq!((t.sessions, t.bytes), (4, 100));
        t.release("acme", 10);
        assert_eq!(t.admit("acme", 10), Ok(()), "the tenant's room is back");
        t.release("zeta", 70);
        assert!(!t.per_tenant.contains_key("zeta"), "no empty entries");
        assert_eq!((t.sessions, t.bytes), (3, 30));
    }

    #[test]
    fn a_session_larger_than_the_budget_fits_an_empty_node_only() {
        let mut t = LiveTally::new(QUOTAS);
        assert_eq!(t.admit("acme", 500), Ok(()));
        assert_eq!(t.admit("beta", 1), Err(Refusal::State { over: 401 }));
        t.release("acme", 500);
        assert_eq!((t.sessions, t.bytes), (0, 0));
    }

    #[test]
    fn zero_caps_count_as_one() {
        let mut t = LiveTally::new(Quotas {
            max_sessions: 0,
            per_tenant: 0,
            max_state_bytes: 0,
        });
        assert_eq!(t.admit("acme", 5), Ok(()));
        assert_eq!(t.admit("acme", 5), Err(Refusal::Node(1)));
    }
}
