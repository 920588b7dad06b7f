//! Token budgets per UTC day (contract §12, docs/protocol.md §12).
//!
//! Three scopes, each with its own daily budget of model tokens (prompt +
//! completion, as the model reports them): each session
//! (`QUESTD_BUDGET_SESSION_TOKENS`), all sessions of one tenant
//! (`QUESTD_BUDGET_TENANT_TOKENS`) and this node
//! (`QUESTD_BUDGET_NODE_TOKENS`). A chat that would start a model call
//! once any of its scopes has spent its budget is refused
//! (`BUDGET_EXCEEDED`) until the UTC day ends.
//!
//! What each scope spent is kept here for the checks, which run where a
//! session takes a chat (no wait), and stored: every model call's tokens
//! go to the `token_spend` table in the next group commit, and what is
//! stored is read back when a session loads, when a session is created (its
//! tenant), at start (the node), and again for a tenant every
//! [`REFRESH`] while it plays on a database shared with other nodes, so a
//! restart resets nothing and a tenant's spending on other nodes counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ids::Usage;
use crate::storage::{StorageError, Store};

/// One UTC day in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// Days of spending kept in storage: today's and the six before, for an
/// operator's queries (only today's is read); older rows are deleted as
/// new spending is stored.
pub const KEPT_DAYS: i64 = 7;

/// How often a tenant's stored spending is read again while its sessions
/// play on a shared database (other nodes add to it).
pub const REFRESH: Duration = Duration::from_secs(10);

/// What a budget is counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Session,
    Tenant,
    Node,
}

impl Scope {
    /// As stored and as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Tenant => "tenant",
            Self::Node => "node",
        }
    }
}

/// The daily budgets, each `None` for no budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub session: Option<u64>,
    pub tenant: Option<u64>,
    pub node: Option<u64>,
}

impl Limits {
    fn of(&self, scope: Scope) -> Option<u64> {
        match scope {
            Scope::Session => self.session,
            Scope::Tenant => self.tenant,
            Scope::Node => self.node,
        }
    }

    fn any(&self) -> bool {
        self.session.is_some() || self.tenant.is_some() || self.node.is_some()
    }
}

/// A budget that is spent: which, and how long until the day's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    pub scope: Scope,
    pub retry_after_ms: u64,
}

impl Exceeded {
    /// What a client is told.
    pub fn message(&self) -> String {
        format!(
            "the {} token budget for today is spent; try again after 00:00 UTC",
            self.scope.as_str()
        )
    }
}

/// The UTC day `ms` falls in, and the milliseconds left of it.
pub fn day_of(ms: i64) -> (i64, u64) {
    let day = ms.div_euclid(DAY_MS);
    let left = (day + 1) * DAY_MS - ms;
    (day, u64::try_from(left).unwrap_or(0))
}

/// One key's spending of the day, and when it was last read from storage.
#[derive(Debug, Clone, Copy, Default)]
struct Spent {
    tokens: u64,
    read_at: Option<Instant>,
}

/// What each scope's keys spent on `day`.
#[derive(Debug, Default)]
struct Day {
    day: i64,
    spent: HashMap<(Scope, String), Spent>,
}

impl Day {
    /// The day's spending, forgotten when `day` is a new one.
    fn on(&mut self, day: i64) -> &mut HashMap<(Scope, String), Spent> {
        if self.day != day {
            self.day = day;
            self.spent.clear();
        }
        &mut self.spent
    }

    /// What `scope`'s `key` spent on `day` (nothing yet: 0, never read).
    fn entry(&mut self, day: i64, scope: Scope, key: &str) -> &mut Spent {
        self.on(day).entry((scope, key.to_owned())).or_default()
    }
}

/// The node's budgets and what was spent against them.
pub struct Budgets {
    limits: Limits,
    node: String,
    /// Where spending is stored (`None` in unit tests and without
    /// budgets).
    store: Option<Store>,
    day: Mutex<Day>,
}

impl Budgets {
    /// Budgets of `limits`, this node's spending counted under `node`
    /// and stored in `store`.
    pub fn new(limits: Limits, node: impl Into<String>, store: Store) -> Self {
        Self {
            limits,
            node: node.into(),
            store: Some(store),
            day: Mutex::default(),
        }
    }

    /// No budgets: every check passes, nothing is counted.
    pub fn off() -> Self {
        Self {
            limits: Limits::default(),
            node: String::new(),
            store: None,
            day: Mutex::default(),
        }
    }

    /// Whether any budget is set.
    pub fn is_on(&self) -> bool {
        self.limits.any()
    }

    /// The keys a call of `session` (if any) of `tenant` counts for.
    fn keys<'a>(&'a self, session: Option<&'a str>, tenant: &'a str) -> Vec<(Scope, &'a str)> {
        let mut keys = Vec::with_capacity(3);
        if let Some(session) = session {
            keys.push((Scope::Session, session));
        }
        keys.push((Scope::Tenant, tenant));
        keys.push((Scope::Node, self.node.as_str()));
        keys
    }

    /// Whether a model call of `session` (none: a call outside sessions)
    /// of `tenant` may start now: refused while a budget of its scopes is
    /// spent for the UTC day. On a database other nodes share, the
    /// tenant's stored spending is read again in the background when it is
    /// due ([`REFRESH`]).
    pub fn admit(self: &Arc<Self>, session: Option<&str>, tenant: &str) -> Result<(), Exceeded> {
        if !self.is_on() {
            return Ok(());
        }
        let now = crate::storage::now_ms();
        let (checked, stale) = self.check(session, tenant, now);
        if stale {
            self.refresh(tenant, now);
        }
        checked
    }

    /// [`Budgets::admit`] at `now_ms`, without reading anything; answers
    /// also whether the tenant's stored spending is due to be read again.
    fn check(
        &self,
        session: Option<&str>,
        tenant: &str,
        now_ms: i64,
    ) -> (Result<(), Exceeded>, bool) {
        if !self.is_on() {
            return (Ok(()), false);
        }
        let (day, left) = day_of(now_ms);
        let Ok(mut days) = self.day.lock() else {
            return (Ok(()), false);
        };
        let spent = days.on(day);
        let stale = spent
            .get(&(Scope::Tenant, tenant.to_owned()))
            .and_then(|s| s.read_at)
            .is_none_or(|at| at.elapsed() >= REFRESH);
        for (scope, key) in self.keys(session, tenant) {
            let Some(limit) = self.limits.of(scope) else {
                continue;
            };
            let tokens = spent.get(&(scope, key.to_owned())).map_or(0, |s| s.tokens);
            if tokens >= limit {
                let exceeded = Exceeded {
                    scope,
                    retry_after_ms: left,
                };
                return (Err(exceeded), stale);
            }
        }
        (Ok(()), stale)
    }

    /// Counts what a model call of `session` (if any) of `tenant` used
    /// now (its prompt and completion tokens), here and in storage.
    pub fn spend(&self, session: Option<&str>, tenant: &str, usage: Usage) {
        let tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        if !self.is_on() || tokens == 0 {
            return;
        }
        let (day, _) = day_of(crate::storage::now_ms());
        let keys = self.keys(session, tenant);
        if let Ok(mut days) = self.day.lock() {
            for &(scope, key) in &keys {
                let entry = days.entry(day, scope, key);
                entry.tokens = entry.tokens.saturating_add(tokens);
            }
        }
        if let Some(store) = &self.store {
            // The days past keeping are deleted once a call, for every key,
            // with the call's first key's write.
            let mut forget = Some(day - KEPT_DAYS + 1);
            for (scope, key) in keys {
                store.add_spend(day, scope.as_str(), key, tokens, forget.take());
            }
        }
    }

    /// Reads what `session` (if any), `tenant` (if any) and this node
    /// spent today from `store`; a count here that is higher (tokens not
    /// yet committed) is kept.
    pub async fn load(
        &self,
        session: Option<&str>,
        tenant: Option<&str>,
    ) -> Result<(), StorageError> {
        let Some(store) = self.store.as_ref().filter(|_| self.is_on()) else {
            return Ok(());
        };
        let (day, _) = day_of(crate::storage::now_ms());
        let mut keys = self.keys(session, tenant.unwrap_or_default());
        if tenant.is_none() {
            keys.retain(|(scope, _)| *scope != Scope::Tenant);
        }
        let mut read = Vec::with_capacity(3);
        for (scope, key) in keys {
            read.push((scope, key, store.spent(day, scope.as_str(), key).await?));
        }
        if let Ok(mut days) = self.day.lock() {
            let now = Instant::now();
            for (scope, key, tokens) in read {
                let entry = days.entry(day, scope, key);
                entry.tokens = entry.tokens.max(tokens);
                entry.read_at = Some(now);
            }
        }
        Ok(())
    }

    /// Forgets what `session` spent today, here: it stopped running on
    /// this node, and whichever node loads it next reads its spending from
    /// storage ([`Budgets::load`]). Without it a node kept an entry for
    /// every session it ran that day.
    pub fn forget_session(&self, session: &str) {
        if !self.is_on() {
            return;
        }
        if let Ok(mut days) = self.day.lock() {
            days.spent.remove(&(Scope::Session, session.to_owned()));
        }
    }

    /// Reads `tenant`'s stored spending again in the background when a
    /// [`Budgets::check`] said it is due and other nodes may add to it (a
    /// shared database); one read at a time.
    fn refresh(self: &Arc<Self>, tenant: &str, now_ms: i64) {
        if !self.store.as_ref().is_some_and(Store::is_shared) {
            return;
        }
        self.refreshing(tenant, now_ms);
        let (budgets, tenant) = (self.clone(), tenant.to_owned());
        actix_web::rt::spawn(async move {
            if let Err(e) = budgets.load(None, Some(&tenant)).await {
                tracing::warn!(error = %e, "reading a tenant's token spending failed");
            }
        });
    }

    /// Marks `tenant`'s spending as just read at `now_ms`, so that one
    /// refresh is under way at a time.
    fn refreshing(&self, tenant: &str, now_ms: i64) {
        if let Ok(mut days) = self.day.lock() {
            days.entry(day_of(now_ms).0, Scope::Tenant, tenant).read_at = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOON: i64 = 20_000 * DAY_MS + DAY_MS / 2;

    #[test]
    fn a_day_ends_at_utc_midnight() {
        assert_eq!(day_of(NOON), (20_000, (DAY_MS / 2) as u64));
        assert_eq!(day_of(20_000 * DAY_MS), (20_000, DAY_MS as u64));
        assert_eq!(day_of(20_001 * DAY_MS - 1), (20_000, 1));
    }

    #[test]
    fn without_budgets_nothing_is_refused() {
        let b = Budgets::off();
        assert!(!b.is_on());
        assert_eq!(b.check(Some("s"), "t", NOON).0, Ok(()));
    }

    /// A budget's check against counts put in directly (spending through
    /// a store is tested over real sockets).
    fn with_spent(limits: Limits, spent: &[(Scope, &str, u64)]) -> Budgets {
        let b = Budgets {
            limits,
            node: "node-1".into(),
            store: None,
            day: Mutex::default(),
        };
        {
            let mut days = b.day.lock().unwrap();
            for &(scope, key, tokens) in spent {
                *days.entry(day_of(NOON).0, scope, key) = Spent {
                    tokens,
                    read_at: Some(Instant::now()),
                };
            }
        }
        b
    }

    #[test]
    fn each_scope_refuses_once_its_budget_is_spent_until_midnight() {
        let limits = Limits {
            session: Some(100),
            tenant: Some(250),
            node: Some(1000),
        };
        let left = (DAY_MS / 2) as u64;
        let refused = |scope| {
            Err(Exceeded {
                scope,
                retry_after_ms: left,
            })
        };
        let b = with_spent(limits, &[(Scope::Session, "s1", 99)]);
        assert_eq!(b.check(Some("s1"), "t", NOON).0, Ok(()), "under");
        let b = with_spent(limits, &[(Scope::Session, "s1", 100)]);
        assert_eq!(b.check(Some("s1"), "t", NOON).0, refused(Scope::Session));
        assert_eq!(b.check(Some("s2"), "t", NOON).0, Ok(()), "another session");
        let b = with_spent(limits, &[(Scope::Tenant, "t", 250)]);
        assert_eq!(b.check(Some("s2"), "t", NOON).0, refused(Scope::Tenant));
        assert_eq!(b.check(None, "t", NOON).0, refused(Scope::Tenant));
        assert_eq!(b.check(Some("s2"), "u", NOON).0, Ok(()), "another tenant");
        let b = with_spent(limits, &[(Scope::Node, "node-1", 1000)]);
        assert_eq!(b.check(Some("s3"), "u", NOON).0, refused(Scope::Node));
        // The next day starts from nothing.
        assert_eq!(b.check(Some("s3"), "u", NOON + DAY_MS).0, Ok(()));
        // A scope without a budget refuses nothing, whatever it spent.
        let only_session = Limits {
            session: Some(10),
            ..Limits::default()
        };
        let b = with_spent(only_session, &[(Scope::Tenant, "t", u64::MAX)]);
        assert_eq!(b.check(Some("s"), "t", NOON).0, Ok(()));
    }

    #[test]
    fn a_session_that_stops_here_is_forgotten_and_its_tenant_and_node_are_not() {
        let limits = Limits {
            session: Some(100),
            tenant: Some(100),
            node: Some(1000),
        };
        let spent = [
            (Scope::Session, "s1", 100),
            (Scope::Session, "s2", 100),
            (Scope::Tenant, "t", 100),
            (Scope::Node, "node-1", 1000),
        ];
        let b = with_spent(limits, &spent);
        b.forget_session("s1");
        let kept = |b: &Budgets| {
            let days = b.day.lock().unwrap();
            let mut keys: Vec<String> = days.spent.keys().map(|(_, k)| k.clone()).collect();
            keys.sort();
            keys
        };
        assert_eq!(kept(&b), ["node-1", "s2", "t"]);
        // Still refused for its tenant and node: only the session's count,
        // which storage holds, is gone from memory.
        let only_session = Limits {
            session: Some(100),
            ..Limits::default()
        };
        let b = with_spent(only_session, &spent);
        b.forget_session("s1");
        assert_eq!(b.check(Some("s1"), "t", NOON).0, Ok(()));
        assert!(b.check(Some("s2"), "t", NOON).0.is_err());
        let b = with_spent(limits, &spent);
        b.forget_session("s1");
        assert!(b.check(Some("s1"), "t", NOON).0.is_err(), "the tenant's");
    }

    #[test]
    fn a_tenant_read_long_ago_or_never_is_due_to_be_read_again() {
        let limits = Limits {
            tenant: Some(10),
            ..Limits::default()
        };
        let b = with_spent(limits, &[(Scope::Tenant, "t", 1)]);
        assert!(!b.check(Some("s"), "t", NOON).1, "just read");
        assert!(b.check(Some("s"), "u", NOON).1, "never read");
        b.refreshing("u", NOON);
        assert!(!b.check(Some("s"), "u", NOON).1, "being read");
    }
}
