//! Rate limits of calls from other services, per tenant and per key: the
//! tool API, MCP, sites and the stateless chat share them.

use governor::DefaultKeyedRateLimiter;

use super::auth::KeyGrant;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;
use crate::rate;
use crate::tools::Registry;

/// Keys a rate limiter remembers before it forgets idle ones.
const LIMITER_KEYS: usize = 10_000;

/// The service side's shared state.
pub struct ServiceState {
    per_tenant: DefaultKeyedRateLimiter<String>,
    per_key: DefaultKeyedRateLimiter<String>,
    /// Every tool name: a service is not bound by a campaign's allowlist
    /// unless its call runs in a session. Made once, read by every call.
    pub(super) all_tools: Vec<String>,
}

impl ServiceState {
    /// `registry` gives the tool names.
    pub fn new(per_minute: u32, burst: u32, registry: &Registry) -> Self {
        let quota = rate::per_minute(per_minute, burst);
        Self {
            per_tenant: rate::keyed(quota),
            per_key: rate::keyed(quota),
            all_tools: registry.names().iter().map(|n| (*n).to_owned()).collect(),
        }
    }
}

/// Which key a grant came from: `internal`, or `tenant:<id>`.
pub fn key_id(grant: &KeyGrant) -> String {
    if grant.internal {
        "internal".to_owned()
    } else {
        format!("tenant:{}", grant.tenant_id)
    }
}

impl ServiceState {
    /// The rate limits of a request that holds a key (calls outside the
    /// tool API: sites, the stateless chat).
    pub fn check_grant(&self, metrics: &Metrics, grant: &KeyGrant) -> Result<(), ApiError> {
        self.check(metrics, &grant.tenant_id, &key_id(grant))
    }

    /// Per-tenant and per-key rate limits for a tenant and a key id: `429
    /// RATE_LIMITED` with `Retry-After` past them (counted in `metrics`).
    pub fn check(&self, metrics: &Metrics, tenant_id: &str, key_id: &str) -> Result<(), ApiError> {
        let service = self;
        // Tenants come only from keys, so both maps hold at most one entry per
        // configured key or tenant an internal service names.
        let checks = [(&service.per_tenant, tenant_id), (&service.per_key, key_id)];
        for (limiter, id) in checks {
            if limiter.len() > LIMITER_KEYS {
                limiter.retain_recent();
            }
            if let Err(not_until) = limiter.check_key(&id.to_owned()) {
                metrics.rate_limited.inc();
                let wait = rate::wait(&not_until);
                let mut e = ApiError::new(
                    ErrorCode::RateLimited,
                    format!(
                        "too many tool calls; try again in {} ms",
                        wait.as_millis().max(1)
                    ),
                );
                e.retry_after_s = Some(wait.as_secs_f64().ceil().max(1.0) as u64);
                return Err(e);
            }
        }
        Ok(())
    }
}
