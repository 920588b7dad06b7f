//! The 2025-era MCP sessions of one server: opened by `initialize`, named
//! by `Mcp-Session-Id`, evicted when the node or a tenant holds too many,
//! and gone after an hour unused.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most 2025-era sessions held at once; opening one more evicts the one
/// used least recently.
pub const MAX_MCP_SESSIONS: usize = 10_000;
/// One tenant holds at most this fraction (1/N) of the MCP sessions (but
/// never fewer than [`MCP_TENANT_FLOOR`]), so one tenant's client cannot
/// push every other tenant's sessions out.
pub const MCP_TENANT_SHARE: usize = 10;
pub const MCP_TENANT_FLOOR: usize = 16;
/// A 2025-era session unused this long is gone (`404`).
pub const MCP_SESSION_IDLE: Duration = Duration::from_secs(60 * 60);
/// Length of an `Mcp-Session-Id`.
pub(super) const SESSION_ID_LEN: usize = 32;

/// One 2025-era MCP session.
#[derive(Debug)]
struct McpSession {
    /// A request naming this session from another tenant finds nothing.
    tenant_id: String,
    /// The version `initialize` agreed to.
    version: &'static str,
    last_used: Instant,
}

/// The 2025-era MCP sessions of one server: in memory, at most `cap`, each
/// gone after `idle` without use. Lost on restart, which a client sees as
/// `404` and answers by initializing again.
#[derive(Debug)]
pub struct McpSessions {
    sessions: Mutex<HashMap<String, McpSession>>,
    cap: usize,
    idle: Duration,
}

impl Default for McpSessions {
    /// At most [`MAX_MCP_SESSIONS`], each gone after [`MCP_SESSION_IDLE`].
    fn default() -> Self {
        Self::new(MAX_MCP_SESSIONS, MCP_SESSION_IDLE)
    }
}

impl McpSessions {
    pub fn new(cap: usize, idle: Duration) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            cap: cap.max(1),
            idle,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, McpSession>> {
        // The map is valid after any panic elsewhere: every change is one call.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a session and answers its id.
    pub(super) fn open(&self, tenant_id: &str, version: &'static str) -> String {
        self.open_at(tenant_id, version, Instant::now())
    }

    pub(super) fn open_at(&self, tenant_id: &str, version: &'static str, now: Instant) -> String {
        let mut sessions = self.lock();
        let per_tenant = (self.cap / MCP_TENANT_SHARE).max(self.cap.min(MCP_TENANT_FLOOR));
        let own = |s: &McpSession| s.tenant_id == tenant_id;
        // Eviction runs in bulk (a quarter at a time) so that opening stays
        // amortized constant time under the lock; a tenant at its share
        // evicts only its own sessions, never another tenant's.
        if sessions.len() >= self.cap
            || (sessions.len() >= per_tenant
                && sessions.values().filter(|s| own(s)).count() >= per_tenant)
        {
            sessions.retain(|_, s| now.saturating_duration_since(s.last_used) <= self.idle);
            let tenant_full = sessions.values().filter(|s| own(s)).count() >= per_tenant;
            if tenant_full || sessions.len() >= self.cap {
                let mut ages: Vec<(Instant, String)> = sessions
                    .iter()
                    .filter(|(_, s)| !tenant_full || own(s))
                    .map(|(id, s)| (s.last_used, id.clone()))
                    .collect();
                let evict = (ages.len() / 4).max(1).min(ages.len());
                if evict < ages.len() {
                    ages.select_nth_unstable(evict);
                }
                for (_, id) in ages.into_iter().take(evict) {
                    sessions.remove(&id);
                }
            }
        }
        let id = crate::session::random_token(SESSION_ID_LEN);
        sessions.insert(
            id.clone(),
            McpSession {
                tenant_id: tenant_id.to_owned(),
                version,
                last_used: now,
            },
        );
        id
    }

    /// The session's version, refreshing its idle time; `None` when it is
    /// unknown, expired (and so removed) or another tenant's.
    pub(super) fn touch(&self, id: &str, tenant_id: &str) -> Option<&'static str> {
        self.touch_at(id, tenant_id, Instant::now())
    }

    pub(super) fn touch_at(&self, id: &str, tenant_id: &str, now: Instant) -> Option<&'static str> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(id)?;
        if session.tenant_id != tenant_id {
            return None;
        }
        if now.saturating_duration_since(session.last_used) > self.idle {
            sessions.remove(id);
            return None;
        }
        session.last_used = now;
        Some(session.version)
    }

    /// Ends a session; `false` when there was none to end for this tenant.
    pub(super) fn close(&self, id: &str, tenant_id: &str) -> bool {
        let now = Instant::now();
        let mut sessions = self.lock();
        match sessions.get(id) {
            Some(s) if s.tenant_id == tenant_id => {
                let live = now.saturating_duration_since(s.last_used) <= self.idle;
                sessions.remove(id);
                live
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_evict_the_least_recent_and_end() {
        let idle = Duration::from_secs(60);
        let store = McpSessions::new(2, idle);
        let t0 = Instant::now();
        let a = store.open_at("t", "2025-11-25", t0);
        let b = store.open_at("t", "2025-11-25", t0 + Duration::from_secs(1));
        // Using `a` makes `b` the least recently used.
        assert_eq!(
            store.touch_at(&a, "t", t0 + Duration::from_secs(2)),
            Some("2025-11-25")
        );
        let c = store.open_at("t", "2025-06-18", t0 + Duration::from_secs(3));
        assert_eq!(store.touch_at(&b, "t", t0 + Duration::from_secs(4)), None);
        assert_eq!(
            store.touch_at(&c, "t", t0 + Duration::from_secs(4)),
            Some("2025-06-18")
        );
        // Idle past the limit: gone, and stays gone.
        let late = t0 + Duration::from_secs(4) + idle + Duration::from_secs(1);
        assert_eq!(store.touch_at(&c, "t", late), None);
        assert_eq!(store.touch_at(&c, "t", t0 + Duration::from_secs(5)), None);
        assert_eq!(store.lock().len(), 1);
        // Another tenant cannot see or end it; its own can, once.
        assert_eq!(store.touch_at(&a, "u", t0 + Duration::from_secs(5)), None);
        assert!(!store.close(&a, "u"));
        assert!(store.close(&a, "t"));
        assert!(!store.close(&a, "t"));
    }

    #[test]
    fn one_tenant_evicts_only_its_own_sessions_past_its_share() {
        let cap = MCP_TENANT_FLOOR * MCP_TENANT_SHARE * 2;
        let share = cap / MCP_TENANT_SHARE;
        let store = McpSessions::new(cap, Duration::from_secs(60));
        let t0 = Instant::now();
        let theirs: Vec<String> = (0..share)
            .map(|_| store.open_at("victim", "2025-11-25", t0))
            .collect();
        for i in 0..cap * 2 {
            store.open_at("flood", "2025-11-25", t0 + Duration::from_millis(i as u64));
        }
        let later = t0 + Duration::from_secs(30);
        for id in &theirs {
            assert_eq!(store.touch_at(id, "victim", later), Some("2025-11-25"));
        }
        let flood = store
            .lock()
            .values()
            .filter(|s| s.tenant_id == "flood")
            .count();
        assert!(flood <= share, "{flood} > {share}");
    }
}
