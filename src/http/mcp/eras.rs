//! The two protocol eras served on `/mcp` (see the module doc of `mcp`):
//! which era a message belongs to, the checks of each, and the methods
//! that differ between them (`initialize`, `server/discover`, result
//! hints).

use actix_web::http::StatusCode;
use actix_web::http::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::rpc::{
    HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, Incoming, RpcError, UNSUPPORTED_VERSION,
    header_text, unknown_session,
};
use super::sessions::McpSessions;
use crate::tools::cut_name;

/// The stateless revision(s), newest first.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
/// The handshake revisions, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// Every version this server speaks, newest first: `server/discover`'s
/// `supportedVersions` and `-32022`'s `data.supported`.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];
/// What `initialize` answers when the client asks for a version the server
/// does not speak (a handshake can never agree to a stateless version).
pub const LATEST_LEGACY: &str = "2025-11-25";

/// How long a client may reuse a `tools/list` result. The list depends on
/// the caller (tenant, key), so its scope is private.
pub(super) const TOOLS_LIST_TTL_MS: u64 = 5 * 60 * 1000;
/// How long a client may reuse `server/discover`: the same for everyone
/// until the server is upgraded.
pub(super) const DISCOVER_TTL_MS: u64 = 60 * 60 * 1000;

pub(super) const SESSION_HEADER: &str = "Mcp-Session-Id";
pub(super) const VERSION_HEADER: &str = "MCP-Protocol-Version";
pub(super) const METHOD_HEADER: &str = "Mcp-Method";
pub(super) const NAME_HEADER: &str = "Mcp-Name";
pub(super) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(super) const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(super) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

// ----- routing between the eras --------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    Legacy,
    Modern,
}

/// Where one message goes, once its headers and envelope are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// `initialize`: opens a 2025-era session.
    Initialize,
    /// A message in an open 2025-era session.
    Legacy,
    /// A 2026-07-28 message.
    Modern,
    /// A notification or response that belongs to no era.
    Sessionless,
}

/// Where a 2025-era session named in `Mcp-Session-Id` was opened.
#[derive(Clone, Copy)]
pub(super) enum Opened<'a> {
    /// By a client of this node: it is among these.
    Here(&'a McpSessions),
    /// On the peer that handed the request over, which checked it and
    /// its version header.
    ByPeer,
}

/// Decides a message's era and checks its version, headers and session.
pub(super) fn route(
    headers: &HeaderMap,
    msg: &Incoming,
    opened: Opened<'_>,
    tenant_id: &str,
) -> Result<Route, RpcError> {
    let header_version = header_text(headers, VERSION_HEADER);
    let is_initialize = msg.method.as_deref() == Some("initialize");
    if let Some(session_id) = header_text(headers, SESSION_HEADER) {
        if is_initialize {
            return Err(RpcError::bad_request(
                INVALID_REQUEST,
                "initialize opens a new session; send it without Mcp-Session-Id",
            ));
        }
        let Opened::Here(sessions) = opened else {
            return Ok(Route::Legacy);
        };
        let version = sessions
            .touch(session_id, tenant_id)
            .ok_or_else(|| unknown_session(session_id))?;
        if let Some(asked) = header_version {
            if !SUPPORTED_VERSIONS.contains(&asked) {
                return Err(unsupported_version(asked));
            }
            if asked != version {
                return Err(RpcError::bad_request(
                    HEADER_MISMATCH,
                    format!("{VERSION_HEADER} {asked} is not this session's version {version}"),
                ));
            }
        }
        return Ok(Route::Legacy);
    }
    if is_initialize && msg.id.is_some() {
        return Ok(Route::Initialize);
    }
    let meta = msg.meta();
    let body_version = meta.and_then(|m| m.get(META_VERSION));
    let modern =
        body_version.is_some() || header_version.is_some_and(|h| !LEGACY_VERSIONS.contains(&h));
    if modern {
        check_modern(headers, msg, header_version, body_version)?;
        return Ok(Route::Modern);
    }
    if msg.id.is_some() {
        return Err(RpcError::bad_request(
            INVALID_REQUEST,
            "no MCP session: open one with initialize (2025 revisions, then send \
             Mcp-Session-Id) or name the protocol version and client capabilities in \
             params._meta (2026-07-28)",
        )
        .with_data(json!({"supported": SUPPORTED_VERSIONS})));
    }
    Ok(Route::Sessionless)
}

/// The checks of a 2026-07-28 message, in the order given in the module doc.
pub(super) fn check_modern(
    headers: &HeaderMap,
    msg: &Incoming,
    header_version: Option<&str>,
    body_version: Option<&Value>,
) -> Result<(), RpcError> {
    if let Some(asked) = header_version
        && !SUPPORTED_VERSIONS.contains(&asked)
    {
        return Err(unsupported_version(asked));
    }
    let is_request = msg.id.is_some();
    let version = match body_version {
        Some(Value::String(v)) => Some(v.as_str()),
        Some(_) => {
            return Err(RpcError::bad_request(
                INVALID_PARAMS,
                format!("params._meta[{META_VERSION:?}] must be a string"),
            ));
        }
        // Notifications need not carry the per-request fields.
        None if !is_request => None,
        None => {
            return Err(RpcError::bad_request(
                INVALID_PARAMS,
                format!("params._meta needs {META_VERSION:?} (the protocol version)"),
            ));
        }
    };
    if let Some(version) = version {
        if LEGACY_VERSIONS.contains(&version) {
            return Err(RpcError::bad_request(
                INVALID_REQUEST,
                format!(
                    "{version} is a handshake revision: open a session with initialize and \
                     send its Mcp-Session-Id"
                ),
            ));
        }
        if !MODERN_VERSIONS.contains(&version) {
            return Err(unsupported_version(version));
        }
        if let Some(asked) = header_version
            && asked != version
        {
            return Err(RpcError::bad_request(
                HEADER_MISMATCH,
                format!("{VERSION_HEADER} {asked} does not match params._meta version {version}"),
            ));
        }
    }
    if let Some(named) = header_text(headers, METHOD_HEADER)
        && Some(named) != msg.method.as_deref()
    {
        return Err(RpcError::bad_request(
            HEADER_MISMATCH,
            format!(
                "{METHOD_HEADER} {:?} does not match the body's method",
                cut_name(named)
            ),
        ));
    }
    // A Base64-wrapped name (`=?base64?...?=`) is for names that are not
    // plain ASCII; no tool has such a name, so it is left to the tool lookup.
    if msg.method.as_deref() == Some("tools/call")
        && let Some(named) = header_text(headers, NAME_HEADER)
        && !named.starts_with("=?base64?")
        && Some(named) != msg.params.get("name").and_then(Value::as_str)
    {
        return Err(RpcError::bad_request(
            HEADER_MISMATCH,
            format!(
                "{NAME_HEADER} {:?} does not match the body's params.name",
                cut_name(named)
            ),
        ));
    }
    if is_request
        && !msg
            .meta()
            .and_then(|m| m.get(META_CAPABILITIES))
            .is_some_and(Value::is_object)
    {
        return Err(RpcError::bad_request(
            INVALID_PARAMS,
            format!("params._meta needs {META_CAPABILITIES:?} (an object; {{}} when none)"),
        ));
    }
    Ok(())
}

/// Cache hints of one kind of list result: lifetime in ms and scope.
pub(super) type CacheHint = (u64, &'static str);
pub(super) const TOOLS_LIST_CACHE: CacheHint = (TOOLS_LIST_TTL_MS, "private");
pub(super) const DISCOVER_CACHE: CacheHint = (DISCOVER_TTL_MS, "public");

impl Era {
    /// Gives a result the fields its era requires: in the modern era
    /// `resultType`, cache hints for cacheable results, and the server's
    /// identity in `_meta`. Legacy results are sent as they are.
    pub(super) fn complete(self, result: Value, cache: Option<CacheHint>) -> Value {
        let Value::Object(mut result) = result else {
            return result;
        };
        if self == Era::Modern {
            result.insert("resultType".into(), json!("complete"));
            if let Some((ttl_ms, scope)) = cache {
                result.insert("ttlMs".into(), json!(ttl_ms));
                result.insert("cacheScope".into(), json!(scope));
            }
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert(META_SERVER_INFO.into(), server_info());
            }
        }
        Value::Object(result)
    }
}

// ----- methods -------------------------------------------------------------

/// Who this server is, as both eras name it.
pub(super) fn server_info() -> Value {
    json!({"name": "questd", "title": "questd", "version": env!("CARGO_PKG_VERSION")})
}

/// What the server tells a model about using it.
pub(super) const INSTRUCTIONS: &str = "Tools of a questd game server. A tool that works in a game \
    session takes its id in the session_id argument (or the X-Session-ID header); calls \
    in one session run one at a time, in order, and every player and spectator sees them.";

/// What the server offers; the same in both eras.
pub(super) fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

/// `server/discover`.
pub(super) fn discover() -> Value {
    json!({
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })
}

/// `initialize`: negotiates a legacy version and opens a session; answers
/// the result and the new session's id.
pub(super) fn initialize(
    params: &Map<String, Value>,
    sessions: &McpSessions,
    tenant_id: &str,
) -> Result<(Value, String), RpcError> {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        return Err(RpcError::new(
            StatusCode::OK,
            INVALID_PARAMS,
            "initialize needs params.protocolVersion (a string)",
        ));
    };
    let version = negotiate(asked);
    let session_id = sessions.open(tenant_id, version);
    tracing::debug!(tenant_id, version, "mcp session opened");
    let result = json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    });
    Ok((result, session_id))
}

/// The legacy version `initialize` agrees to for a client's ask.
pub(super) fn negotiate(asked: &str) -> &'static str {
    LEGACY_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .copied()
        .unwrap_or(LATEST_LEGACY)
}

pub(super) fn unsupported_version(requested: &str) -> RpcError {
    let shown = cut_name(requested);
    RpcError::bad_request(
        UNSUPPORTED_VERSION,
        format!("unsupported protocol version {shown:?}"),
    )
    .with_data(json!({"supported": SUPPORTED_VERSIONS, "requested": shown}))
}

#[cfg(test)]
mod tests {
    use super::super::rpc::tests::headers;
    use super::super::sessions::{MCP_SESSION_IDLE, SESSION_ID_LEN};
    use super::*;

    fn modern(method: &str, meta: Value) -> Incoming {
        Incoming {
            id: Some(json!(1)),
            method: Some(method.into()),
            params: json!({"_meta": meta, "name": "move"})
                .as_object()
                .cloned()
                .unwrap(),
        }
    }

    fn caps(version: &str) -> Value {
        json!({META_VERSION: version, META_CAPABILITIES: {}})
    }

    fn code(result: Result<Route, RpcError>) -> Result<Route, i64> {
        result.map_err(|e| e.code)
    }

    #[test]
    fn modern_requests_are_checked_in_order() {
        let store = McpSessions::new(4, MCP_SESSION_IDLE);
        let none = headers(&[]);
        let cases: Vec<(HeaderMap, Incoming, Result<Route, i64>)> = vec![
            (
                none.clone(),
                modern("tools/list", caps("2026-07-28")),
                Ok(Route::Modern),
            ),
            (
                headers(&[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "move"),
                ]),
                modern("tools/call", caps("2026-07-28")),
                Ok(Route::Modern),
            ),
            (
                none.clone(),
                modern("tools/list", caps("1900-01-01")),
                Err(UNSUPPORTED_VERSION),
            ),
            (
                none.clone(),
                modern("tools/list", caps("2025-11-25")),
                Err(INVALID_REQUEST),
            ),
            (
                headers(&[("mcp-protocol-version", "2099-01-01")]),
                modern("tools/list", caps("2026-07-28")),
                Err(UNSUPPORTED_VERSION),
            ),
            (
                headers(&[("mcp-protocol-version", "2025-11-25")]),
                modern("tools/list", caps("2026-07-28")),
                Err(HEADER_MISMATCH),
            ),
            (
                headers(&[("mcp-method", "tools/list")]),
                modern("tools/call", caps("2026-07-28")),
                Err(HEADER_MISMATCH),
            ),
            (
                headers(&[("mcp-name", "hp_delta")]),
                modern("tools/call", caps("2026-07-28")),
                Err(HEADER_MISMATCH),
            ),
            (
                none.clone(),
                modern("tools/list", json!({META_VERSION: "2026-07-28"})),
                Err(INVALID_PARAMS),
            ),
            (
                headers(&[("mcp-protocol-version", "2026-07-28")]),
                modern("tools/list", json!({})),
                Err(INVALID_PARAMS),
            ),
            (
                none.clone(),
                modern("tools/list", json!({META_VERSION: 7})),
                Err(INVALID_PARAMS),
            ),
            // No session and no version: told how to start.
            (
                none.clone(),
                modern("tools/list", json!({})),
                Err(INVALID_REQUEST),
            ),
            (
                headers(&[("mcp-protocol-version", "2025-11-25")]),
                modern("tools/list", json!({})),
                Err(INVALID_REQUEST),
            ),
            (
                none.clone(),
                modern("initialize", json!({})),
                Ok(Route::Initialize),
            ),
            (
                headers(&[("mcp-session-id", "nope")]),
                modern("tools/list", json!({})),
                Err(INVALID_REQUEST),
            ),
        ];
        for (i, (headers, msg, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                code(route(&headers, &msg, Opened::Here(&store), "t")),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn legacy_sessions_check_tenant_and_version_header() {
        let store = McpSessions::new(4, MCP_SESSION_IDLE);
        let id = store.open("acme", "2025-06-18");
        assert_eq!(id.len(), SESSION_ID_LEN);
        let msg = modern("tools/list", json!({}));
        let with = |version: Option<&str>| {
            let mut pairs = vec![("mcp-session-id", id.as_str())];
            if let Some(v) = version {
                pairs.push(("mcp-protocol-version", v));
            }
            headers(&pairs)
        };
        assert_eq!(
            code(route(&with(None), &msg, Opened::Here(&store), "acme")),
            Ok(Route::Legacy)
        );
        assert_eq!(
            code(route(
                &with(Some("2025-06-18")),
                &msg,
                Opened::Here(&store),
                "acme"
            )),
            Ok(Route::Legacy)
        );
        assert_eq!(
            code(route(
                &with(Some("2025-11-25")),
                &msg,
                Opened::Here(&store),
                "acme"
            )),
            Err(HEADER_MISMATCH)
        );
        assert_eq!(
            code(route(
                &with(Some("1999-01-01")),
                &msg,
                Opened::Here(&store),
                "acme"
            )),
            Err(UNSUPPORTED_VERSION)
        );
        let other = route(&with(None), &msg, Opened::Here(&store), "default").unwrap_err();
        assert_eq!(other.status, StatusCode::NOT_FOUND);
        let init = modern("initialize", json!({}));
        assert_eq!(
            code(route(&with(None), &init, Opened::Here(&store), "acme")),
            Err(INVALID_REQUEST)
        );
    }

    #[test]
    fn initialize_echoes_a_known_version_or_offers_the_latest_legacy() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2025-03-26"), "2025-03-26");
        assert_eq!(negotiate("2026-07-28"), LATEST_LEGACY);
        assert_eq!(negotiate("2024-11-05"), LATEST_LEGACY);
        assert_eq!(negotiate(""), LATEST_LEGACY);
    }

    #[test]
    fn modern_results_carry_result_type_hints_and_identity() {
        let r = Era::Modern.complete(json!({"tools": []}), Some(TOOLS_LIST_CACHE));
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["ttlMs"], json!(TOOLS_LIST_TTL_MS));
        assert_eq!(r["cacheScope"], "private");
        assert_eq!(r["_meta"][META_SERVER_INFO]["name"], "questd");
        let r = Era::Modern.complete(
            json!({"isError": false, "_meta": {"questd/audit": {}}}),
            None,
        );
        assert!(r.get("ttlMs").is_none() && r["_meta"].get("questd/audit").is_some());
        let legacy = Era::Legacy.complete(json!({"tools": []}), Some(TOOLS_LIST_CACHE));
        assert_eq!(legacy, json!({"tools": []}));
    }
}
