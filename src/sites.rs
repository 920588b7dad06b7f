//! Sites (docs/protocol.md §1.12.1): a tenant's NPC and content service without a
//! game session.
//!
//! `PUT /api/v1/sites/{site_id}` gives a site the NPCs, content, prompts
//! and map of a campaign file; the content tools then run against it with
//! `X-Site-ID` and no session. A site's whole save state is one stored row
//! with a version; this node keeps the states it served, and checks the
//! stored version before each call, so a write made through another node
//! is seen at once. A tool call that writes (a draft, an event) applies its
//! effect to a copy, stores it under the version it read, and only then
//! answers: durable before visible. If another node wrote the site in
//! between, the call runs again on the new state.
//!
//! Invariants: calls to one site on this node run one at a time; no call
//! answers before its write is durable; a write never replaces a version it
//! did not read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::game::{Effect, GameState};
use crate::ids::{SiteId, TenantId};
use crate::storage::{SiteRow, StorageError, Store, now_ms};

/// Sites one tenant may have.
pub const MAX_SITES_PER_TENANT: i64 = 1000;
/// Longest site id; ids are letters, digits and `_ . : -`.
pub const MAX_SITE_ID_CHARS: usize = 128;
/// Site states this node keeps between calls; past it, the ones no call
/// holds are dropped (and read again when next asked for).
pub const MAX_CACHED_SITES: usize = 1024;
/// Times a writing call runs when other nodes keep writing the same site
/// first.
const WRITE_TRIES: usize = 3;

/// Why a site call failed.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("no such site")]
    NotFound,
    #[error("the tenant has {MAX_SITES_PER_TENANT} sites, the most it may have")]
    TooMany,
    #[error("other writes to the site kept coming first")]
    Contended,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A site as this node last read it.
#[derive(Debug, Clone)]
pub struct SiteView {
    pub campaign_id: String,
    /// The campaign's title: the site's name.
    pub title: String,
    pub state: Arc<GameState>,
    pub version: i64,
}

/// One site's slot: its last state, and the lock its calls take.
type Slot = Arc<tokio::sync::Mutex<Option<SiteView>>>;

/// The sites of every tenant that this node served.
pub struct Sites {
    store: Store,
    slots: Mutex<HashMap<(TenantId, SiteId), Slot>>,
}

/// What `PUT` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Put {
    pub version: i64,
    /// A new site (else one replaced).
    pub created: bool,
}

/// Whether `id` may name a site: 1 to [`MAX_SITE_ID_CHARS`] letters,
/// digits, `_`, `.`, `:` or `-`.
pub fn valid_site_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SITE_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

impl Sites {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The slot of one site, made on first use.
    fn slot(&self, tenant_id: &TenantId, site_id: &SiteId) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tenant_id.clone(), site_id.clone());
        if let Some(slot) = slots.get(&key) {
            return slot.clone();
        }
        if slots.len() >= MAX_CACHED_SITES {
            // Keep only slots a call holds right now.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        slots.entry(key).or_default().clone()
    }

    /// Gives site `site_id` of `tenant_id` the state `state` (a campaign's
    /// start), creating it or replacing it whole.
    pub async fn put(
        &self,
        tenant_id: &TenantId,
        site_id: &SiteId,
        state: GameState,
    ) -> Result<Put, SiteError> {
        let slot = self.slot(tenant_id, site_id);
        let mut held = slot.lock().await;
        let exists = self.store.site_version(tenant_id, site_id).await?.is_some();
        if !exists && self.store.count_sites(tenant_id).await? >= MAX_SITES_PER_TENANT {
            return Err(SiteError::TooMany);
        }
        let now = now_ms();
        let text = serde_json::to_string(&state)
            .map_err(|e| StorageError::Database(format!("a site state did not serialize: {e}")))?;
        let version = self
            .store
            .put_site(SiteRow {
                tenant_id: tenant_id.clone(),
                site_id: site_id.clone(),
                campaign_id: state.campaign_id.clone(),
                title: state.title.clone(),
                state: text,
                version: 0,
                created_at: now,
                updated_at: now,
            })
            .await?;
        *held = Some(SiteView {
            campaign_id: state.campaign_id.clone(),
            title: state.title.clone(),
            state: Arc::new(state),
            version,
        });
        Ok(Put {
            version,
            created: version == 1,
        })
    }

    /// The site as stored now.
    pub async fn get(&self, tenant_id: &TenantId, site_id: &SiteId) -> Result<SiteView, SiteError> {
        let slot = self.slot(tenant_id, site_id);
        let mut held = slot.lock().await;
        self.fresh(tenant_id, site_id, &mut held).await
    }

    /// Runs `step` on the site's state. When it answers an effect, the
    /// effect is applied to a copy that is stored before this returns; if
    /// another node wrote the site since it was read, `step` runs again on
    /// the new state (at most [`WRITE_TRIES`] times).
    pub async fn run<T>(
        &self,
        tenant_id: &TenantId,
        site_id: &SiteId,
        mut step: impl FnMut(&GameState) -> (T, Option<Effect>),
    ) -> Result<T, SiteError> {
        let slot = self.slot(tenant_id, site_id);
        let mut held = slot.lock().await;
        for _ in 0..WRITE_TRIES {
            let site = self.fresh(tenant_id, site_id, &mut held).await?;
            let (out, effect) = step(&site.state);
            let Some(effect) = effect else {
                return Ok(out);
            };
            let mut next = (*site.state).clone();
            next.apply(&effect);
            let text = serde_json::to_string(&next).map_err(|e| {
                StorageError::Database(format!("a site state did not serialize: {e}"))
            })?;
            match self
                .store
                .update_site(tenant_id, site_id, text, site.version)
                .await?
            {
                Some(version) => {
                    *held = Some(SiteView {
                        state: Arc::new(next),
                        version,
                        ..site
                    });
                    return Ok(out);
                }
                // Another node wrote it first: read it again.
                None => *held = None,
            }
        }
        Err(SiteError::Contended)
    }

    /// The held state if the stored version is still its own, else the
    /// stored one (kept in `held`).
    async fn fresh(
        &self,
        tenant_id: &TenantId,
        site_id: &SiteId,
        held: &mut Option<SiteView>,
    ) -> Result<SiteView, SiteError> {
        let Some(version) = self.store.site_version(tenant_id, site_id).await? else {
            *held = None;
            return Err(SiteError::NotFound);
        };
        if let Some(site) = held.as_ref().filter(|s| s.version == version) {
            return Ok(site.clone());
        }
        let row = self
            .store
            .load_site(tenant_id, site_id)
            .await?
            .ok_or(SiteError::NotFound)?;
        let state: GameState = serde_json::from_str(&row.state)
            .map_err(|e| StorageError::Corrupt(format!("site {site_id}: {e}")))?;
        let site = SiteView {
            campaign_id: row.campaign_id,
            title: row.title,
            state: Arc::new(state),
            version: row.version,
        };
        *held = Some(site.clone());
        Ok(site)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store on a fresh SQLite file.
    async fn store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        (Store::open(&url).await.expect("store opens"), dir)
    }

    fn campaign(title: &str) -> GameState {
        let mut state = GameState::empty();
        state.campaign_id = "village".into();
        state.title = title.into();
        state
    }

    #[tokio::test]
    async fn a_site_is_put_read_and_written_under_its_version() {
        let (t1, t2, main) = (
            TenantId::from("t1"),
            TenantId::from("t2"),
            SiteId::from("main"),
        );
        let (store, _dir) = store().await;
        let sites = Sites::new(store.clone());
        let put = sites
            .put(&t1, &main, campaign("Old Village"))
            .await
            .unwrap();
        assert_eq!(
            put,
            Put {
                version: 1,
                created: true
            }
        );
        let put = sites.put(&t1, &main, campaign("Yantian")).await.unwrap();
        assert_eq!(
            put,
            Put {
                version: 2,
                created: false
            },
            "replaced whole"
        );

        let seen = sites
            .run(&t1, &main, |state| {
                (state.title.clone(), Some(Effect::BeginTurn { turn: 7 }))
            })
            .await
            .unwrap();
        assert_eq!(seen, "Yantian");
        // Another node on the same database sees the write.
        let other = Sites::new(store.clone());
        let site = other.get(&t1, &main).await.unwrap();
        assert_eq!((site.version, site.state.turn), (3, 7));
        assert_eq!(site.title, "Yantian");
        // A read-only call writes nothing.
        other.run(&t1, &main, |_| ((), None)).await.unwrap();
        assert_eq!(store.site_version(&t1, &main).await.unwrap(), Some(3));

        // Tenants and ids are separate; an unknown site is not found.
        assert!(matches!(
            sites.get(&t2, &main).await,
            Err(SiteError::NotFound)
        ));
        assert!(matches!(
            sites.run(&t1, &SiteId::from("other"), |_| ((), None)).await,
            Err(SiteError::NotFound)
        ));
    }

    #[tokio::test]
    async fn a_write_never_replaces_a_version_it_did_not_read() {
        let (t1, main) = (TenantId::from("t1"), SiteId::from("main"));
        let (store, _dir) = store().await;
        let sites = Sites::new(store.clone());
        sites.put(&t1, &main, campaign("V")).await.unwrap();
        let stale = store.update_site(&t1, &main, "{}".into(), 0).await.unwrap();
        assert_eq!(stale, None, "version 0 was never there");
        let text = serde_json::to_string(&campaign("W")).unwrap();
        assert_eq!(
            store.update_site(&t1, &main, text, 1).await.unwrap(),
            Some(2)
        );
        // This node held version 1: it reads the new one before running.
        let title = sites
            .run(&t1, &main, |s| {
                (s.title.clone(), Some(Effect::BeginTurn { turn: 1 }))
            })
            .await
            .unwrap();
        assert_eq!(title, "W");
        assert_eq!(store.site_version(&t1, &main).await.unwrap(), Some(3));
    }

    #[tokio::test]
    async fn an_idempotency_key_is_taken_once_until_it_is_given_back_or_forgotten() {
        let (t1, t2) = (TenantId::from("t1"), TenantId::from("t2"));
        let (store, _dir) = store().await;
        assert!(
            store
                .claim_key(&t1, "k1", "log_user_event", "h", 0)
                .await
                .unwrap()
        );
        assert!(
            !store
                .claim_key(&t1, "k1", "log_user_event", "h", 0)
                .await
                .unwrap()
        );
        assert!(
            store
                .claim_key(&t2, "k1", "log_user_event", "h", 0)
                .await
                .unwrap(),
            "per tenant"
        );
        let row = store.load_key(&t1, "k1").await.unwrap().unwrap();
        assert_eq!(
            (row.tool.as_str(), row.answer),
            ("log_user_event", None),
            "still running"
        );
        store
            .finish_key(&t1, "k1", 200, "{\"ok\":1}".into())
            .await
            .unwrap();
        let row = store.load_key(&t1, "k1").await.unwrap().unwrap();
        assert_eq!(row.answer, Some((200, "{\"ok\":1}".to_owned())));
        store.drop_key(&t2, "k1").await.unwrap();
        assert!(store.load_key(&t2, "k1").await.unwrap().is_none());
        // Keys made before `forget_before` are forgotten by the next claim.
        assert!(
            store
                .claim_key(&t1, "k2", "x", "h", now_ms() + 1)
                .await
                .unwrap()
        );
        assert!(store.load_key(&t1, "k1").await.unwrap().is_none());
    }

    #[test]
    fn site_ids_are_short_and_plain() {
        for good in [
            "yantian-main",
            "a",
            "site_1.v2:eu",
            &"x".repeat(MAX_SITE_ID_CHARS),
        ] {
            assert!(valid_site_id(good), "{good}");
        }
        for bad in [
            "",
            "has space",
            "slash/y",
            "严田",
            "q?x=1",
            &"x".repeat(MAX_SITE_ID_CHARS + 1),
        ] {
            assert!(!valid_site_id(bad), "{bad}");
        }
    }
}
