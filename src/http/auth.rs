//! Credentials (docs/protocol.md §1.1): the internal key, tenant keys, and what a
//! request's `X-Internal-API-Key` and `X-Tenant-ID` together grant.
//!
//! A key is the only credential that names a tenant: `X-Tenant-ID` alone
//! grants nothing. The internal key acts for any tenant (the one named by
//! `X-Tenant-ID`, else `default`); a tenant key acts for its own tenant only.
//! Session tokens are checked where the session is known (`access`).

use std::collections::HashMap;

use actix_web::HttpRequest;

use crate::config::Secret;
use crate::error::{ApiError, ErrorCode};
use crate::ids::TenantId;

/// The tenant used when a request names none.
pub const DEFAULT_TENANT: &str = "default";

/// Compares secrets (keys, tokens, the nodes' secret) in time that depends
/// neither on where they differ nor on whether their lengths do: both are
/// hashed to SHA-256 digests of the same 32 bytes, which are folded byte by
/// byte without stopping early. Comparing the texts themselves would answer
/// at once on a length mismatch and tell a caller the secret's length.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    same_digest(&digest(a), &digest(b))
}

/// A secret's SHA-256 digest, what [`same_secret`] compares.
type SecretDigest = [u8; 32];

fn digest(secret: &str) -> SecretDigest {
    use sha2::{Digest, Sha256};
    Sha256::digest(secret.as_bytes()).into()
}

/// Digests compared byte by byte without stopping early.
fn same_digest(x: &SecretDigest, y: &SecretDigest) -> bool {
    let diff = x
        .iter()
        .zip(y.iter())
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    diff == 0
}

/// The header that names a tenant (lower case, as a header name is built).
pub const TENANT_HEADER: &str = "x-tenant-id";

/// The tenant named by `X-Tenant-ID`, if the request names one.
pub fn tenant_header(req: &HttpRequest) -> Option<String> {
    req.headers()
        .get(TENANT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The header every key travels in.
pub const KEY_HEADER: &str = "X-Internal-API-Key";
/// Longest tenant id a tenant key may name.
pub const MAX_TENANT_CHARS: usize = 128;

/// The keys this server accepts, parsed once at start. Kept as their
/// digests: a request's key is hashed once and compared with each, rather
/// than every key hashed again for every request.
#[derive(Default)]
pub struct Keys {
    internal: Option<SecretDigest>,
    /// Tenant id -> its key's digest.
    tenants: HashMap<String, SecretDigest>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut tenants: Vec<&String> = self.tenants.keys().collect();
        tenants.sort();
        f.debug_struct("Keys")
            .field("internal", &self.internal.is_some())
            .field("tenants", &tenants)
            .finish()
    }
}

/// What a valid key lets a request act for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrant {
    /// The tenant the request acts for.
    pub tenant_id: TenantId,
    /// The internal key (any tenant), not a tenant key.
    pub internal: bool,
}

impl Keys {
    /// `internal` is `QUESTD_INTERNAL_API_KEY`; `tenant_keys` is
    /// `QUESTD_TENANT_KEYS` (`tenant:key,tenant:key`). Empty values mean no
    /// key; a malformed list is an error naming the entry (never the key).
    pub fn parse(internal: Option<&Secret>, tenant_keys: Option<&Secret>) -> Result<Self, String> {
        let internal = internal
            .map(Secret::expose)
            .filter(|k| !k.is_empty())
            .map(digest);
        let mut tenants = HashMap::new();
        let list = tenant_keys.map(Secret::expose).unwrap_or_default();
        for (i, entry) in list.split(',').map(str::trim).enumerate() {
            if entry.is_empty() {
                continue;
            }
            let Some((tenant, key)) = entry.split_once(':') else {
                return Err(format!(
                    "QUESTD_TENANT_KEYS entry {} is not tenant:key",
                    i + 1
                ));
            };
            let (tenant, key) = (tenant.trim(), key.trim());
            let tenant_ok = !tenant.is_empty()
                && tenant.chars().count() <= MAX_TENANT_CHARS
                && tenant.chars().all(|c| c.is_ascii_graphic());
            if !tenant_ok || key.is_empty() {
                return Err(format!(
                    "QUESTD_TENANT_KEYS entry {} needs a tenant (1 to {MAX_TENANT_CHARS} printable \
                     characters) and a key",
                    i + 1
                ));
            }
            if tenants.insert(tenant.to_owned(), digest(key)).is_some() {
                return Err(format!("QUESTD_TENANT_KEYS names tenant {tenant:?} twice"));
            }
        }
        Ok(Self { internal, tenants })
    }

    /// Whether any key is configured (without one, nothing that needs a key
    /// can be done).
    pub fn any(&self) -> bool {
        self.internal.is_some() || !self.tenants.is_empty()
    }

    /// The tenant of the key `given`, or `Some(None)` for the internal key;
    /// `None` when it is no key of this server. Every key is compared, so
    /// the time taken does not tell which one nearly matched.
    fn identify(&self, given: &str) -> Option<Option<&str>> {
        let given = digest(given);
        let mut found = None;
        if let Some(k) = &self.internal
            && same_digest(k, &given)
        {
            found = Some(None);
        }
        for (tenant, k) in &self.tenants {
            if same_digest(k, &given) && found.is_none() {
                found = Some(Some(tenant.as_str()));
            }
        }
        found
    }

    /// What the request's key grants: `Ok(None)` when it sends none,
    /// `401` for a key this server does not know, `403` for a tenant key
    /// used for another tenant.
    pub fn grant(&self, req: &HttpRequest) -> Result<Option<KeyGrant>, ApiError> {
        let Some(raw) = req.headers().get(KEY_HEADER) else {
            return Ok(None);
        };
        let given = raw.to_str().map(str::trim).unwrap_or_default();
        let named = tenant_header(req);
        match self.identify(given) {
            None => Err(ApiError::new(
                ErrorCode::Unauthorized,
                format!("the {KEY_HEADER} is not a key of this server"),
            )),
            Some(None) => Ok(Some(KeyGrant {
                tenant_id: TenantId::from(named.unwrap_or_else(|| DEFAULT_TENANT.to_owned())),
                internal: true,
            })),
            Some(Some(own)) => match named {
                Some(other) if other != own => Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "this key is for another tenant than X-Tenant-ID names",
                )),
                _ => Ok(Some(KeyGrant {
                    tenant_id: TenantId::from(own),
                    internal: false,
                })),
            },
        }
    }

    /// Like [`Keys::grant`], but a key is required: `401` without one, saying
    /// how to configure one when the server has none.
    pub fn require(&self, req: &HttpRequest, what: &str) -> Result<KeyGrant, ApiError> {
        self.grant(req)?.ok_or_else(|| {
            let how = if self.any() {
                format!("send {KEY_HEADER}")
            } else {
                "this server has no key yet: set QUESTD_INTERNAL_API_KEY or QUESTD_TENANT_KEYS"
                    .to_owned()
            };
            ApiError::new(
                ErrorCode::Unauthorized,
                format!("{what} needs a key ({how})"),
            )
        })
    }

    /// The internal key and nothing else (the operator console): `401`
    /// without a key or with one this server does not know, `403` for a
    /// tenant key, which sees one tenant only.
    pub fn require_internal(&self, req: &HttpRequest, what: &str) -> Result<(), ApiError> {
        match self.grant(req)? {
            Some(KeyGrant { internal: true, .. }) => Ok(()),
            Some(_) => Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("{what} needs the internal key; a tenant key sees only its own tenant"),
            )),
            None => {
                let how = if self.internal.is_some() {
                    format!("send the internal key in {KEY_HEADER}")
                } else {
                    "this server has no internal key yet: set QUESTD_INTERNAL_API_KEY".to_owned()
                };
                Err(ApiError::new(
                    ErrorCode::Unauthorized,
                    format!("{what} needs the internal key ({how})"),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_exactly_whatever_their_lengths() {
        let long = "k".repeat(10_000);
        // (a, b, equal)
        let cases: &[(&str, &str, bool)] = &[
            ("abc", "abc", true),
            ("", "", true),
            (&long, &long, true),
            ("abc", "abd", false),
            ("abc", "abcd", false),
            ("abcd", "abc", false),
            ("", "a", false),
            ("a", "", false),
            ("abc", &long, false),
            ("é", "e", false),
            ("abc ", "abc", false),
        ];
        for (a, b, equal) in cases {
            assert_eq!(same_secret(a, b), *equal, "{a:.12?} vs {b:.12?}");
        }
    }
    use actix_web::test::TestRequest;

    fn keys() -> Keys {
        Keys::parse(
            Some(&Secret::from("internal-k")),
            Some(&Secret::from("acme:acme-k, globex : globex-k")),
        )
        .unwrap_or_default()
    }

    #[test]
    fn tenant_key_lists_parse_and_bad_ones_say_which_entry() {
        let k = keys();
        assert!(k.any());
        assert_eq!(k.identify("acme-k"), Some(Some("acme")));
        assert_eq!(k.identify("globex-k"), Some(Some("globex")));
        assert_eq!(k.identify("internal-k"), Some(None));
        assert_eq!(k.identify("acme-"), None);
        assert_eq!(k.identify(""), None);
        for (bad, says) in [
            ("acme", "entry 1 is not tenant:key"),
            ("a:k,:k2", "entry 2 needs a tenant"),
            ("a:", "entry 1 needs a tenant"),
            ("a:k,a:j", "tenant \"a\" twice"),
        ] {
            let err = Keys::parse(None, Some(&Secret::from(bad))).err();
            let err = err.unwrap_or_default();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(!err.contains("k2") || says.contains("k2"), "{err}");
        }
        assert!(
            !Keys::parse(Some(&Secret::from("")), None)
                .map(|k| k.any())
                .unwrap_or(true)
        );
    }

    #[test]
    fn a_key_grants_its_tenant_and_the_header_alone_grants_nothing() {
        let k = keys();
        let grant = |headers: &[(&str, &str)]| {
            let mut req = TestRequest::default();
            for h in headers {
                req = req.insert_header(*h);
            }
            k.grant(&req.to_http_request()).map_err(|e| e.code)
        };
        assert_eq!(grant(&[("X-Tenant-ID", "acme")]), Ok(None));
        assert_eq!(
            grant(&[(KEY_HEADER, "acme-k")]),
            Ok(Some(KeyGrant {
                tenant_id: "acme".into(),
                internal: false
            }))
        );
        assert_eq!(
            grant(&[(KEY_HEADER, "acme-k"), ("X-Tenant-ID", "globex")]),
            Err(ErrorCode::Forbidden)
        );
        assert_eq!(
            grant(&[(KEY_HEADER, "internal-k"), ("X-Tenant-ID", "globex")]),
            Ok(Some(KeyGrant {
                tenant_id: "globex".into(),
                internal: true
            }))
        );
        assert_eq!(
            grant(&[(KEY_HEADER, "internal-k")]),
            Ok(Some(KeyGrant {
                tenant_id: DEFAULT_TENANT.into(),
                internal: true
            }))
        );
        assert_eq!(grant(&[(KEY_HEADER, "nope")]), Err(ErrorCode::Unauthorized));
        let internal = |headers: &[(&str, &str)]| {
            let mut req = TestRequest::default();
            for h in headers {
                req = req.insert_header(*h);
            }
            k.require_internal(&req.to_http_request(), "the console")
                .map_err(|e| e.code)
        };
        assert_eq!(internal(&[(KEY_HEADER, "internal-k")]), Ok(()));
        assert_eq!(
            internal(&[(KEY_HEADER, "internal-k"), ("X-Tenant-ID", "acme")]),
            Ok(())
        );
        assert_eq!(internal(&[]), Err(ErrorCode::Unauthorized));
        assert_eq!(
            internal(&[(KEY_HEADER, "nope")]),
            Err(ErrorCode::Unauthorized)
        );
        assert_eq!(
            internal(&[(KEY_HEADER, "acme-k")]),
            Err(ErrorCode::Forbidden)
        );
        let none = Keys::default();
        let err = none
            .require(&TestRequest::default().to_http_request(), "the tool API")
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(err.contains("QUESTD_INTERNAL_API_KEY"), "{err}");
    }
}
