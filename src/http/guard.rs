//! Cross-site protections, one middleware around the whole app: which
//! `Host` is served (against DNS rebinding), which `Origin` may open a
//! WebSocket or change anything (docs/protocol.md §1.16), that request bodies are
//! JSON, and the security headers every response carries.
//!
//! The rules are parsed once from the settings into [`GuardRules`]; the
//! checks themselves are pure functions of the request head, tested from
//! tables below. A refused request never reaches a handler, so a refused
//! WebSocket upgrade is answered before any session sees a connection.
//!
//! In the order they are checked:
//!
//! 1. **Host.** Every request's `Host` (and the URI authority, when the
//!    request line has one) must be allowed by `QUESTD_ALLOWED_HOSTS`, else
//!    `403 FORBIDDEN`. A name without a port allows any port; with a port,
//!    only that one. Unset, the allowed hosts follow the bound address:
//!    `localhost`, `127.0.0.1` and `[::1]`, plus the bound address itself
//!    when it is a specific one; any host when bound to every address
//!    (`0.0.0.0`, `[::]`), with a warning at start.
//! 2. **Origin.** A WebSocket upgrade, and any request whose method is not
//!    `GET`, `HEAD` or `OPTIONS`, that carries `Origin` must come from the
//!    server's own origin (the origin's host and port equal the request's
//!    `Host`, default ports 80/443 filled in by scheme) or from one listed
//!    in `QUESTD_ALLOWED_ORIGINS`, else `403 FORBIDDEN`; `Origin: null` is
//!    refused. Requests without `Origin` (non-browser clients) pass.
//! 3. **Content encoding.** No route takes a compressed body: a request
//!    whose `Content-Encoding` is anything but `identity` is refused with
//!    `415 UNSUPPORTED_MEDIA_TYPE` before any handler, so nothing is ever
//!    decompressed (a few KB of brotli can stand for gigabytes).
//! 4. **Content type.** A `POST`, `PUT` or `PATCH` with a body must say
//!    `Content-Type: application/json` (or `application/*+json`, parameters
//!    allowed), else `415 UNSUPPORTED_MEDIA_TYPE`. Without a body it passes.
//!
//! What a WebSocket upgrade is has one definition here
//! ([`is_websocket_upgrade`]), at least as wide as the handshake's (any
//! `Upgrade` value containing `websocket`, in any case), so no spelling the
//! handshake takes slips past the Origin rule.
//!
//! The guard also says where links that carry tokens point ([`LinkBase`]):
//! `QUESTD_PUBLIC_URL` when set, else the request's `Host` (which rule 1
//! allowed) over plain `http`/`ws`. `X-Forwarded-Proto`, `X-Forwarded-Host`
//! and `Forwarded` are believed only from a peer listed in
//! `QUESTD_TRUSTED_PROXIES`: from anyone else they would let a client (or a
//! shared cache in between) put another host in front of a token. A
//! request another node handed over (it carries the nodes' secret) is
//! answered with links where its client reached that node, as that node
//! says (`x-questd-links`): the same answer whichever node was asked.
//!
//! The rules hold for every route, `/mcp` included: a local MCP tool in a
//! browser (an inspector on another port) is another origin like any other
//! and is let in by listing it in `QUESTD_ALLOWED_ORIGINS`.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse, Transform};
use actix_web::http::Method;
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::middleware::{Next, from_fn};
use actix_web::{Error, HttpMessage, HttpRequest};

use crate::config::Settings;
use crate::error::{ApiError, ErrorCode};
use crate::tools::cut_name;

/// The page loads only its own scripts, styles and sockets; nothing may
/// frame it or change where its forms and relative links go.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Headers every response carries (unless a handler set them itself).
/// `no-referrer` because tokens travel in page URLs (`?token=`).
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
];

/// The names a loopback server is reached by.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// A setting that cannot be parsed into rules; the server does not start.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct InvalidRule {
    setting: &'static str,
    problem: String,
}

/// The parsed cross-site rules; built once at start, shared by workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardRules {
    hosts: Hosts,
    /// `QUESTD_ALLOWED_ORIGINS`, normalized.
    origins: Vec<Origin>,
    /// `QUESTD_PUBLIC_URL`, when set: put on every request for
    /// [`link_base`].
    public: Option<Arc<LinkBase>>,
}

/// The start of absolute links to this server: the page's
/// `http(s)://host[:port]` and the WebSocket's `ws(s)://host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkBase {
    pub http: String,
    pub ws: String,
}

impl LinkBase {
    fn new(secure: bool, authority: &str) -> Self {
        let (http, ws) = if secure {
            ("https", "wss")
        } else {
            ("http", "ws")
        };
        Self {
            http: format!("{http}://{authority}"),
            ws: format!("{ws}://{authority}"),
        }
    }
}

/// Which `Host` values are served.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hosts {
    Any,
    Only(Vec<Authority>),
}

/// A host (lower case; IPv6 in brackets, canonical) and perhaps a port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

/// `scheme://host[:port]`, lower case, with a default port left out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    authority: Authority,
}

impl GuardRules {
    /// Parses `QUESTD_ALLOWED_HOSTS` and `QUESTD_ALLOWED_ORIGINS`, or the
    /// default hosts of `QUESTD_BIND`. Logs a warning when that default
    /// allows any host.
    pub fn from_settings(settings: &Settings) -> Result<Self, InvalidRule> {
        let listed = settings
            .allowed_hosts
            .as_deref()
            .filter(|s| !s.trim().is_empty());
        let hosts = match listed {
            Some(list) => parse_hosts(list)?,
            None => {
                let hosts = default_hosts(&settings.bind);
                if hosts == Hosts::Any {
                    tracing::warn!(
                        bind = %settings.bind,
                        "bound to every address, so requests naming any Host are served; \
                         set QUESTD_ALLOWED_HOSTS to the names this server is reached by \
                         (comma-separated), against DNS rebinding"
                    );
                }
                hosts
            }
        };
        let origins = match settings.allowed_origins.as_deref() {
            Some(list) => parse_origins(list)?,
            None => Vec::new(),
        };
        let public = match settings.public_url.as_deref().map(str::trim) {
            Some(url) if !url.is_empty() => Some(Arc::new(parse_public_url(url)?)),
            _ => None,
        };
        Ok(Self {
            hosts,
            origins,
            public,
        })
    }

    /// The middleware that applies these rules and adds
    /// [`SECURITY_HEADERS`]; wrap the whole app in it.
    pub fn middleware<S, B>(
        self: Arc<Self>,
    ) -> impl Transform<
        S,
        ServiceRequest,
        Response = ServiceResponse<EitherBody<B>>,
        Error = Error,
        InitError = (),
    > + 'static
    where
        S: actix_web::dev::Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>
            + 'static,
        B: MessageBody + 'static,
    {
        from_fn(move |req: ServiceRequest, next: Next<B>| {
            // Judged before the future, so it need not hold the rules. A
            // request another node of the database hands over was judged
            // there, against the client's own Host and Origin.
            let state = req.app_data::<actix_web::web::Data<super::state::AppState>>();
            let from_peer = state.is_some_and(|state| state.cluster.from_peer(req.request()));
            let refusal = if from_peer {
                None
            } else {
                self.refusal(req.request())
            };
            // Links point where the client reached the node it asked: a
            // peer that handed the request over says where that was.
            let peer_links = state
                .and_then(|state| state.cluster.peer_links(req.request()))
                .and_then(|links| parse_public_url(links).ok());
            if let Some(links) = peer_links {
                req.extensions_mut().insert(Arc::new(links));
            } else if let Some(public) = &self.public {
                req.extensions_mut().insert(Arc::clone(public));
            }
            async move {
                let mut res = match refusal {
                    Some(err) => req.error_response(err).map_into_right_body(),
                    None => next.call(req).await?.map_into_left_body(),
                };
                add_security_headers(res.headers_mut());
                Ok(res)
            }
        })
    }

    /// Why this request is refused, if it is: the first rule of the module
    /// doc it breaks.
    pub fn refusal(&self, req: &HttpRequest) -> Option<ApiError> {
        let host_header = header_text(req.headers(), &header::HOST);
        let authority = req.uri().authority().map(|a| a.as_str());
        if let Some(refused) = self.host_refusal(host_header, authority) {
            return Some(refused);
        }
        self.origin_refusal(req, host_header.or(authority))
            .or_else(|| encoding_refusal(req.headers()))
            .or_else(|| body_refusal(req))
    }

    /// Rule 1 for a request naming `host_header` and `authority`: every
    /// host named must be served, and one must be named.
    fn host_refusal(&self, host_header: Option<&str>, authority: Option<&str>) -> Option<ApiError> {
        if let Some(named) = [host_header, authority]
            .into_iter()
            .flatten()
            .find(|named| !self.host_allowed(named))
        {
            return Some(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "host {:?} is not served here; see QUESTD_ALLOWED_HOSTS",
                    cut_name(named)
                ),
            ));
        }
        let unnamed = host_header.is_none() && authority.is_none();
        (unnamed && self.hosts != Hosts::Any).then(|| {
            ApiError::new(
                ErrorCode::Forbidden,
                "the request names no host; see QUESTD_ALLOWED_HOSTS",
            )
        })
    }

    /// Rule 2: a WebSocket upgrade or a state-changing request with an
    /// `Origin` that is neither the server's own (against `host`, the
    /// request's `Host`) nor listed.
    fn origin_refusal(&self, req: &HttpRequest, host: Option<&str>) -> Option<ApiError> {
        let headers = req.headers();
        if !is_websocket_upgrade(headers) && !changes_state(req.method()) {
            return None;
        }
        let origin = String::from_utf8_lossy(headers.get(header::ORIGIN)?.as_bytes());
        if self.origin_allowed(&origin, host) {
            return None;
        }
        Some(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "origin {:?} may not open a WebSocket or change anything here; \
                 see QUESTD_ALLOWED_ORIGINS",
                cut_name(&origin)
            ),
        ))
    }

    /// Whether a `Host` value names a host served here.
    fn host_allowed(&self, host: &str) -> bool {
        match &self.hosts {
            Hosts::Any => true,
            Hosts::Only(allowed) => parse_authority(host).is_some_and(|named| {
                allowed.iter().any(|a| {
                    a.host == named.host && a.port.is_none_or(|port| named.port == Some(port))
                })
            }),
        }
    }

    /// Whether an `Origin` value is this server's own (against `host`, the
    /// request's `Host`) or listed.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(origin) = parse_origin(origin) else {
            return false;
        };
        self.origins.contains(&origin) || host.is_some_and(|h| is_same_origin(&origin, h))
    }
}

/// Rule 3: a `Content-Encoding` other than `identity` (every value of
/// every such header, compared without case; empty entries are nothing).
fn encoding_refusal(headers: &HeaderMap) -> Option<ApiError> {
    let mut named = headers.get_all(header::CONTENT_ENCODING).peekable();
    named.peek()?;
    let identity = named.all(|value| {
        value.to_str().is_ok_and(|v| {
            v.split(',')
                .map(str::trim)
                .all(|coding| coding.is_empty() || coding.eq_ignore_ascii_case("identity"))
        })
    });
    if identity {
        return None;
    }
    let got = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let got = cut_name(&got);
    Some(ApiError::new(
        ErrorCode::UnsupportedMediaType,
        format!(
            "request bodies are never compressed here; send them without Content-Encoding \
             (Content-Encoding: {got:?})"
        ),
    ))
}

/// Rule 4: a `POST`, `PUT` or `PATCH` with a body that is not JSON.
fn body_refusal(req: &HttpRequest) -> Option<ApiError> {
    let headers = req.headers();
    let content_type = header_text(headers, &header::CONTENT_TYPE);
    if !carries_body(req.method(), headers) || is_json(content_type) {
        return None;
    }
    let got = content_type.map_or_else(|| "none".to_owned(), |t| format!("{:?}", cut_name(t)));
    Some(ApiError::new(
        ErrorCode::UnsupportedMediaType,
        format!("request bodies must be application/json (Content-Type: {got})"),
    ))
}

/// Inserts each of [`SECURITY_HEADERS`] the response does not have yet.
fn add_security_headers(headers: &mut HeaderMap) {
    for (name, value) in SECURITY_HEADERS {
        let name = HeaderName::from_static(name);
        if !headers.contains_key(&name) {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
}

/// A header as text, if present and visible ASCII.
fn header_text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether the request asks to become a WebSocket: any `Upgrade` value
/// that contains `websocket` in any case (`websocket`, `WebSocket`,
/// `foo, websocket`, `websocket/13`). The handshake (`upgrade`) takes
/// only `websocket` alone; this takes more, every value, bytes that are not
/// text included, so whatever any handshake would upgrade, the Origin rule
/// judges.
pub fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers.get_all(header::UPGRADE).any(|v| {
        v.as_bytes()
            .windows(b"websocket".len())
            .any(|w| w.eq_ignore_ascii_case(b"websocket"))
    })
}

/// Every method but the safe ones may change state.
fn changes_state(method: &Method) -> bool {
    ![Method::GET, Method::HEAD, Method::OPTIONS].contains(method)
}

/// Whether a request of a method whose body is checked carries one: a
/// `Content-Length` above 0 (or one that cannot be read) or any
/// `Transfer-Encoding` (a request's is always chunked last).
fn carries_body(method: &Method, headers: &HeaderMap) -> bool {
    if ![Method::POST, Method::PUT, Method::PATCH].contains(method) {
        return false;
    }
    let length = headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) != Some(0));
    length || headers.contains_key(header::TRANSFER_ENCODING)
}

/// Whether a `Content-Type` is JSON: `application/json` or
/// `application/<something>+json`, with any parameters.
fn is_json(content_type: Option<&str>) -> bool {
    let Some(value) = content_type else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    let subtype = subtype.to_ascii_lowercase();
    kind.eq_ignore_ascii_case("application")
        && (subtype == "json" || subtype.len() > "+json".len() && subtype.ends_with("+json"))
}

/// The default port of a scheme whose default port is left out of origins.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// Whether `origin` is the origin of a page served by this server as
/// `host` (the request's `Host`): same host and port, a missing port being
/// the default of the origin's scheme.
fn is_same_origin(origin: &Origin, host: &str) -> bool {
    let default = match origin.scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    parse_authority(host).is_some_and(|host| {
        origin.authority.host == host.host
            && origin.authority.port.unwrap_or(default) == host.port.unwrap_or(default)
    })
}

/// Parses `host[:port]` as in `Host`: a DNS name or IPv4 address, or an
/// IPv6 address in brackets. Case is folded, one trailing dot dropped and
/// IPv6 written canonically, so equal hosts compare equal.
fn parse_authority(text: &str) -> Option<Authority> {
    let text = text.trim();
    // `port` is what follows the host's `:`, if anything does.
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        if !valid {
            return None;
        }
        (name.to_ascii_lowercase(), port)
    };
    let port = match port {
        None | Some("") => None,
        Some(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => Some(digits.parse().ok()?),
        Some(_) => return None,
    };
    Some(Authority { host, port })
}

/// Parses `scheme://host[:port]` (one trailing `/` allowed), leaving out a
/// default port. `null`, paths and user info are not origins.
fn parse_origin(text: &str) -> Option<Origin> {
    let text = text.trim();
    let (scheme, rest) = text.split_once("://")?;
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.');
    if !scheme_ok {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let mut authority = parse_authority(rest)?;
    if authority.port.is_some() && authority.port == default_port(&scheme) {
        authority.port = None;
    }
    Some(Origin { scheme, authority })
}

/// Parses `QUESTD_PUBLIC_URL`: an `http` or `https` origin (no path).
fn parse_public_url(url: &str) -> Result<LinkBase, InvalidRule> {
    match parse_origin(url) {
        Some(origin) if matches!(origin.scheme.as_str(), "http" | "https") => {
            let Authority { host, port } = &origin.authority;
            let authority = port.map_or_else(|| host.clone(), |port| format!("{host}:{port}"));
            Ok(LinkBase::new(origin.scheme == "https", &authority))
        }
        _ => Err(InvalidRule {
            setting: "QUESTD_PUBLIC_URL",
            problem: format!(
                "{url:?} is not an address players reach this server at (write \
                 http(s)://host[:port] without a path, like https://game.example)"
            ),
        }),
    }
}

/// Where links that carry tokens point for `req` (see the module doc):
/// `QUESTD_PUBLIC_URL` when set; else, when the peer is a trusted proxy
/// (`trusted_proxy`), what it forwards (`Forwarded`, `X-Forwarded-Proto`,
/// `X-Forwarded-Host`), else the request's own `Host` over `http`/`ws`.
pub fn link_base(req: &HttpRequest, trusted_proxy: bool) -> LinkBase {
    if let Some(public) = req.extensions().get::<Arc<LinkBase>>() {
        return LinkBase::clone(public);
    }
    // Without any host named, `connection_info` would answer actix-web's
    // placeholder; the socket's own address is better (below).
    let names_host = [
        header::FORWARDED.as_str(),
        "x-forwarded-host",
        header::HOST.as_str(),
    ]
    .iter()
    .any(|h| req.headers().contains_key(*h));
    if trusted_proxy && names_host {
        let info = req.connection_info();
        if parse_authority(info.host()).is_some() {
            let secure = matches!(info.scheme(), "https" | "wss");
            return LinkBase::new(secure, info.host());
        }
    }
    let named = header_text(req.headers(), &header::HOST)
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .filter(|host| parse_authority(host).is_some());
    match named {
        Some(host) => LinkBase::new(false, host.trim()),
        None => match req.conn_data::<super::accept::LocalAddr>() {
            Some(local) => LinkBase::new(false, &local.0.to_string()),
            None => LinkBase::new(false, req.app_config().host()),
        },
    }
}

/// Parses `QUESTD_ALLOWED_HOSTS`: names with optional ports, or `*`.
fn parse_hosts(list: &str) -> Result<Hosts, InvalidRule> {
    let mut hosts = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry == "*" {
            return Ok(Hosts::Any);
        }
        // A bare IPv6 address is accepted and bracketed.
        let parsed = match entry.parse::<Ipv6Addr>() {
            Ok(ip) => parse_authority(&format!("[{ip}]")),
            Err(_) => parse_authority(entry),
        };
        let Some(host) = parsed else {
            return Err(InvalidRule {
                setting: "QUESTD_ALLOWED_HOSTS",
                problem: format!(
                    "{entry:?} is not a host name (write a name or address with an optional port, \
                     like game.example or game.example:8080, or * for any)"
                ),
            });
        };
        hosts.push(host);
    }
    Ok(Hosts::Only(hosts))
}

/// Parses `QUESTD_ALLOWED_ORIGINS`: full origins like `https://game.example`.
fn parse_origins(list: &str) -> Result<Vec<Origin>, InvalidRule> {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            parse_origin(entry).ok_or_else(|| InvalidRule {
                setting: "QUESTD_ALLOWED_ORIGINS",
                problem: format!(
                    "{entry:?} is not an origin (write scheme://host[:port] without a path, \
                     like https://game.example)"
                ),
            })
        })
        .collect()
}

/// The hosts served when `QUESTD_ALLOWED_HOSTS` is unset: see the module
/// doc. `bind` is `host:port` as `QUESTD_BIND` gives it.
fn default_hosts(bind: &str) -> Hosts {
    let bind = bind.trim();
    let host = if let Some(rest) = bind.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(inside, _)| inside)
    } else {
        bind.rsplit_once(':').map_or(bind, |(host, _)| host)
    };
    let mut names: Vec<String> = LOOPBACK_HOSTS.iter().map(|&h| h.to_owned()).collect();
    match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_unspecified() => return Hosts::Any,
        Ok(IpAddr::V4(ip)) => names.push(ip.to_string()),
        Ok(IpAddr::V6(ip)) => names.push(format!("[{ip}]")),
        Err(_) if host.is_empty() => return Hosts::Any,
        Err(_) => names.push(host.to_owned()),
    }
    let mut hosts: Vec<Authority> = Vec::new();
    for host in names.iter().filter_map(|name| parse_authority(name)) {
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    Hosts::Only(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Cli;
    use actix_web::http::StatusCode;
    use actix_web::test::TestRequest;
    use clap::Parser;

    fn rules(args: &[&str]) -> GuardRules {
        let mut all = vec!["questd"];
        all.extend_from_slice(args);
        let settings = Cli::parse_from(all).settings;
        match GuardRules::from_settings(&settings) {
            Ok(rules) => rules,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn authorities_parse_and_normalize() {
        // (text, host and port when it parses)
        type Case = (&'static str, Option<(&'static str, Option<u16>)>);
        let cases: &[Case] = &[
            ("localhost", Some(("localhost", None))),
            ("LocalHost:8080", Some(("localhost", Some(8080)))),
            ("game.example.", Some(("game.example", None))),
            ("127.0.0.1:0", Some(("127.0.0.1", Some(0)))),
            ("[::1]", Some(("[::1]", None))),
            ("[0:0:0:0:0:0:0:1]:9", Some(("[::1]", Some(9)))),
            ("[2001:DB8::1]:443", Some(("[2001:db8::1]", Some(443)))),
            ("example.com:", Some(("example.com", None))),
            ("", None),
            (":80", None),
            ("a b", None),
            ("evil.example/x", None),
            ("user@host", None),
            ("host:99999", None),
            ("host:8o", None),
            ("[::1", None),
            ("[::1]x", None),
            ("[nope]", None),
            ("::1", None),
        ];
        for (text, want) in cases {
            let got = parse_authority(text).map(|a| (a.host, a.port));
            let want = want.map(|(h, p)| (h.to_owned(), p));
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn hosts_match_by_name_and_by_port_when_listed() {
        let listed = rules(&[
            "--allowed-hosts",
            "Game.Example, api.example:8443,[::1],10.0.0.5",
        ]);
        let cases = [
            ("game.example", true),
            ("GAME.EXAMPLE:8080", true),
            ("game.example.:1", true),
            ("api.example:8443", true),
            ("api.example", false),
            ("api.example:443", false),
            ("[::1]:80", true),
            ("10.0.0.5:8080", true),
            ("evil.example", false),
            ("game.example.evil.example", false),
            ("localhost", false),
            ("", false),
            ("game.example:x", false),
        ];
        for (host, allowed) in cases {
            assert_eq!(listed.host_allowed(host), allowed, "{host:?}");
        }
        let any = rules(&["--allowed-hosts", "game.example,*"]);
        assert!(any.host_allowed("evil.example:1"));
        // A bare IPv6 address is bracketed.
        let v6 = rules(&["--allowed-hosts", "2001:db8::1"]);
        assert!(v6.host_allowed("[2001:db8::1]:8080"));
    }

    #[test]
    fn the_default_hosts_follow_the_bound_address() {
        let loopback = ["localhost", "127.0.0.1:8080", "[::1]:9"];
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("127.0.0.1:8080", &loopback, &["evil.example", "10.0.0.5"]),
            ("[::1]:8080", &loopback, &["evil.example"]),
            ("localhost:8080", &loopback, &["evil.example"]),
            (
                "127.0.0.2:8080",
                &["127.0.0.2:8080", "localhost:1"],
                &["127.0.0.3"],
            ),
            (
                "192.168.1.5:8080",
                &["192.168.1.5:8080", "localhost", "127.0.0.1"],
                &["192.168.1.6", "evil.example"],
            ),
            (
                "[2001:db8::1]:8080",
                &["[2001:db8::1]:8080", "[::1]"],
                &["evil.example"],
            ),
            (
                "game.example:8080",
                &["game.example", "localhost"],
                &["evil.example"],
            ),
            ("0.0.0.0:8080", &["evil.example", "anything:1"], &[]),
            ("[::]:8080", &["evil.example"], &[]),
        ];
        for (bind, served, refused) in cases {
            let r = rules(&["--bind", bind]);
            for host in *served {
                assert!(r.host_allowed(host), "{bind}: {host}");
            }
            for host in *refused {
                assert!(!r.host_allowed(host), "{bind}: {host}");
            }
        }
        // A list, even of one name, replaces the default.
        let r = rules(&["--bind", "0.0.0.0:8080", "--allowed-hosts", "game.example"]);
        assert!(!r.host_allowed("evil.example"));
        assert!(!r.host_allowed("localhost"));
        // A blank setting is the default.
        let r = rules(&["--bind", "127.0.0.1:8080", "--allowed-hosts", " "]);
        assert!(r.host_allowed("localhost"));
    }

    #[test]
    fn origins_parse_with_default_ports_left_out() {
        // (text, scheme, host and port when it parses)
        type Case = (
            &'static str,
            Option<(&'static str, &'static str, Option<u16>)>,
        );
        let cases: &[Case] = &[
            ("http://evil.example", Some(("http", "evil.example", None))),
            (
                "HTTPS://Game.Example:443",
                Some(("https", "game.example", None)),
            ),
            (
                "https://game.example/",
                Some(("https", "game.example", None)),
            ),
            (
                "http://game.example:443",
                Some(("http", "game.example", Some(443))),
            ),
            (
                "https://game.example:80",
                Some(("https", "game.example", Some(80))),
            ),
            ("http://[::1]:8080", Some(("http", "[::1]", Some(8080)))),
            (
                "chrome-extension://abcdef",
                Some(("chrome-extension", "abcdef", None)),
            ),
            ("null", None),
            ("", None),
            ("game.example", None),
            ("https://", None),
            ("https://game.example/path", None),
            ("https://user@game.example", None),
            ("https://game.example?x", None),
            ("1http://game.example", None),
        ];
        for (text, want) in cases {
            let got = parse_origin(text).map(|o| (o.scheme, o.authority.host, o.authority.port));
            let want = want.map(|(s, h, p)| (s.to_owned(), h.to_owned(), p));
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn origins_are_the_servers_own_or_listed() {
        let r = rules(&[
            "--allowed-origins",
            "https://game.example/, http://LOCALHOST:3000",
        ]);
        // (origin, request Host, allowed)
        let cases = [
            ("http://127.0.0.1:8080", Some("127.0.0.1:8080"), true),
            ("http://127.0.0.1:8080", Some("127.0.0.1:8081"), false),
            ("http://127.0.0.1", Some("127.0.0.1:80"), true),
            ("http://127.0.0.1:80", Some("127.0.0.1"), true),
            ("https://own.example", Some("own.example"), true),
            ("https://own.example", Some("own.example:443"), true),
            ("https://own.example:443", Some("OWN.example"), true),
            ("https://own.example", Some("own.example:80"), false),
            ("http://own.example", Some("own.example:443"), false),
            ("ws://own.example", Some("own.example"), false),
            ("http://localhost:8080", Some("127.0.0.1:8080"), false),
            ("http://evil.example", Some("127.0.0.1:8080"), false),
            ("http://evil.example", None, false),
            ("null", Some("127.0.0.1:8080"), false),
            ("https://game.example", Some("127.0.0.1:8080"), true),
            ("https://GAME.example:443/", None, true),
            ("http://game.example", Some("127.0.0.1:8080"), false),
            ("https://game.example:8443", Some("127.0.0.1:8080"), false),
            ("http://localhost:3000", Some("127.0.0.1:8080"), true),
            ("http://localhost:3001", Some("127.0.0.1:8080"), false),
        ];
        for (origin, host, allowed) in cases {
            assert_eq!(
                r.origin_allowed(origin, host),
                allowed,
                "{origin:?} to {host:?}"
            );
        }
    }

    #[test]
    fn content_types_are_json_or_not() {
        let cases = [
            (Some("application/json"), true),
            (Some("Application/JSON; charset=utf-8"), true),
            (Some(" application/json ;charset=UTF-8"), true),
            (Some("application/merge-patch+json"), true),
            (Some("application/vnd.api+json; x=y"), true),
            (Some("application/+json"), false),
            (Some("text/plain"), false),
            (Some("text/plain; charset=application/json"), false),
            (Some("text/json"), false),
            (Some("application/x-www-form-urlencoded"), false),
            (Some("multipart/form-data; boundary=x"), false),
            (Some("application/jsonp"), false),
            (Some("application"), false),
            (Some(""), false),
            (None, false),
        ];
        for (value, json) in cases {
            assert_eq!(is_json(value), json, "{value:?}");
        }
    }

    #[test]
    fn invalid_lists_are_start_up_errors() {
        let parse = |args: &[&str]| {
            let mut all = vec!["questd"];
            all.extend_from_slice(args);
            GuardRules::from_settings(&Cli::parse_from(all).settings)
                .err()
                .map(|e| e.to_string())
        };
        for bad in [
            "http://game.example",
            "game.example/",
            "*.example",
            "a:b:c",
            "[::1",
        ] {
            let err = parse(&["--allowed-hosts", bad]);
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.starts_with("QUESTD_ALLOWED_HOSTS: ") && e.contains(bad)),
                "{bad}: {err:?}"
            );
        }
        for bad in ["game.example", "*", "null", "https://game.example/play"] {
            let err = parse(&["--allowed-origins", bad]);
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.starts_with("QUESTD_ALLOWED_ORIGINS: ") && e.contains(bad)),
                "{bad}: {err:?}"
            );
        }
        assert_eq!(
            parse(&["--allowed-hosts", "a.example, ,b.example:1,"]),
            None
        );
        for bad in [
            "game.example",
            "ftp://game.example",
            "https://game.example/play",
            "wss://game.example",
            "null",
        ] {
            let err = parse(&["--public-url", bad]);
            assert!(
                err.as_deref()
                    .is_some_and(|e| e.starts_with("QUESTD_PUBLIC_URL: ") && e.contains(bad)),
                "{bad}: {err:?}"
            );
        }
        assert_eq!(parse(&["--public-url", "https://game.example:8443/"]), None);
        assert_eq!(parse(&["--public-url", " "]), None);
    }

    /// The code a request gets from the rules, or `None` when it passes.
    fn judge(r: &GuardRules, req: TestRequest) -> Option<ErrorCode> {
        r.refusal(&req.to_http_request()).map(|e| e.code)
    }

    #[test]
    fn requests_are_judged_host_then_origin_then_body() {
        let r = rules(&["--bind", "127.0.0.1:8080"]);
        let own = "http://127.0.0.1:8080";
        let evil = "http://evil.example";
        let req = |method: Method, path: &str| {
            TestRequest::default()
                .method(method)
                .uri(path)
                .insert_header(("host", "127.0.0.1:8080"))
        };
        let forbidden = Some(ErrorCode::Forbidden);
        let unsupported = Some(ErrorCode::UnsupportedMediaType);
        let cases: Vec<(&str, TestRequest, Option<ErrorCode>)> = vec![
            ("a plain GET", req(Method::GET, "/healthz"), None),
            (
                "a foreign Host",
                req(Method::GET, "/healthz").insert_header(("host", "evil.example")),
                forbidden,
            ),
            (
                "a foreign authority in the request line",
                req(Method::GET, "http://evil.example/healthz"),
                forbidden,
            ),
            (
                "a GET from another site reads only",
                req(Method::GET, "/api/v1/campaigns").insert_header(("origin", evil)),
                None,
            ),
            (
                "an upgrade from another site",
                req(Method::GET, "/ws/sessions/x")
                    .insert_header(("upgrade", "websocket"))
                    .insert_header(("origin", evil)),
                forbidden,
            ),
            (
                "an upgrade from a null origin",
                req(Method::GET, "/ws/sessions/x")
                    .insert_header(("upgrade", "WebSocket"))
                    .insert_header(("origin", "null")),
                forbidden,
            ),
            (
                "an upgrade from the page",
                req(Method::GET, "/ws/sessions/x")
                    .insert_header(("upgrade", "websocket"))
                    .insert_header(("origin", own)),
                None,
            ),
            (
                "an upgrade without Origin",
                req(Method::GET, "/ws/sessions/x").insert_header(("upgrade", "websocket")),
                None,
            ),
            (
                "a JSON POST from another site",
                req(Method::POST, "/api/v1/sessions")
                    .insert_header(("origin", evil))
                    .insert_header(("content-type", "application/json"))
                    .insert_header(("content-length", "2")),
                forbidden,
            ),
            (
                "a bodiless DELETE from another site",
                req(Method::DELETE, "/api/v1/sessions/x").insert_header(("origin", evil)),
                forbidden,
            ),
            (
                "a text POST from another site is refused for its origin first",
                req(Method::POST, "/api/v1/sessions")
                    .insert_header(("origin", evil))
                    .insert_header(("content-type", "text/plain"))
                    .insert_header(("content-length", "2")),
                forbidden,
            ),
            (
                "a text POST without Origin",
                req(Method::POST, "/api/v1/sessions")
                    .insert_header(("content-type", "text/plain"))
                    .insert_header(("content-length", "2")),
                unsupported,
            ),
            (
                "a chunked POST without a type",
                req(Method::PUT, "/api/v1/sites/x").insert_header(("transfer-encoding", "chunked")),
                unsupported,
            ),
            (
                "a bodiless POST",
                req(Method::POST, "/api/v1/sessions").insert_header(("content-length", "0")),
                None,
            ),
            (
                "a bodiless POST without Content-Length",
                req(Method::POST, "/api/v1/sessions"),
                None,
            ),
            (
                "a JSON POST from the page",
                req(Method::POST, "/api/v1/sessions")
                    .insert_header(("origin", own))
                    .insert_header(("content-type", "application/json; charset=utf-8"))
                    .insert_header(("content-length", "2")),
                None,
            ),
            (
                "/mcp from a local tool on another port",
                req(Method::POST, "/mcp")
                    .insert_header(("origin", "http://localhost:3000"))
                    .insert_header(("content-type", "application/json"))
                    .insert_header(("content-length", "2")),
                forbidden,
            ),
            (
                "/mcp is still subject to the host rule",
                req(Method::POST, "/mcp").insert_header(("host", "evil.example")),
                forbidden,
            ),
        ];
        for (what, request, want) in cases {
            assert_eq!(judge(&r, request), want, "{what}");
        }
    }

    #[test]
    fn only_identity_bodies_pass() {
        let r = rules(&["--bind", "127.0.0.1:8080"]);
        let unsupported = Some(ErrorCode::UnsupportedMediaType);
        // (Content-Encoding values, method, what the request gets)
        let cases: &[(&[&str], Method, Option<ErrorCode>)] = &[
            (&[], Method::POST, None),
            (&["identity"], Method::POST, None),
            (&["Identity, identity"], Method::POST, None),
            (&[""], Method::POST, None),
            (&["gzip"], Method::POST, unsupported),
            (&["br"], Method::PUT, unsupported),
            (&["zstd"], Method::POST, unsupported),
            (&["deflate"], Method::PATCH, unsupported),
            (&["identity, gzip"], Method::POST, unsupported),
            (&["identity", "br"], Method::POST, unsupported),
            (&["x-unknown"], Method::POST, unsupported),
            // Whatever the method: no route takes a compressed body.
            (&["gzip"], Method::GET, unsupported),
            (&["br"], Method::DELETE, unsupported),
        ];
        for (codings, method, want) in cases {
            let mut req = TestRequest::default()
                .method(method.clone())
                .uri("/api/v1/sessions/x/audience")
                .insert_header(("host", "127.0.0.1:8080"))
                .insert_header(("content-type", "application/json"))
                .insert_header(("content-length", "9"));
            for coding in *codings {
                req = req.append_header(("content-encoding", *coding));
            }
            assert_eq!(judge(&r, req), *want, "{method} {codings:?}");
        }
        let req = TestRequest::post()
            .insert_header(("host", "127.0.0.1:8080"))
            .insert_header(("content-encoding", "br"))
            .to_http_request();
        let message = r.refusal(&req).map(|e| e.message).unwrap_or_default();
        assert_eq!(
            message,
            "request bodies are never compressed here; send them without Content-Encoding \
             (Content-Encoding: \"br\")"
        );
    }

    #[test]
    fn every_upgrade_the_handshake_takes_is_judged_by_origin() {
        let r = rules(&["--bind", "127.0.0.1:8080"]);
        // (Upgrade values, an upgrade)
        let cases: &[(&[&str], bool)] = &[
            (&["websocket"], true),
            (&["WebSocket"], true),
            (&["WEBSOCKET"], true),
            (&["foo, websocket"], true),
            (&["foo websocket"], true),
            (&["websocket/13"], true),
            (&["x-websocket-y"], true),
            (&["h2c", "websocket"], true),
            (&["h2c"], false),
            (&["web socket"], false),
            (&[], false),
        ];
        for (values, upgrade) in cases {
            let mut req = TestRequest::get()
                .uri("/ws/sessions/x")
                .insert_header(("host", "127.0.0.1:8080"))
                .insert_header(("origin", "http://evil.example"));
            for value in *values {
                req = req.append_header(("upgrade", *value));
            }
            let req = req.to_http_request();
            assert_eq!(is_websocket_upgrade(req.headers()), *upgrade, "{values:?}");
            let refused = r.refusal(&req).map(|e| e.code);
            let want = upgrade.then_some(ErrorCode::Forbidden);
            assert_eq!(refused, want, "from another origin: {values:?}");
        }
    }

    #[test]
    fn links_follow_the_public_url_then_a_trusted_proxy_then_host() {
        let forged = |req: TestRequest| {
            req.insert_header(("x-forwarded-host", "evil.example"))
                .insert_header(("x-forwarded-proto", "https"))
                .insert_header(("forwarded", "host=evil.example;proto=https"))
        };
        let base = |http: &str, ws: &str| LinkBase {
            http: http.to_owned(),
            ws: ws.to_owned(),
        };
        // (settings, request, from a trusted proxy, links)
        let cases: Vec<(&[&str], TestRequest, bool, LinkBase)> = vec![
            (
                &[],
                TestRequest::get().insert_header(("host", "127.0.0.1:8080")),
                false,
                base("http://127.0.0.1:8080", "ws://127.0.0.1:8080"),
            ),
            (
                &[],
                forged(TestRequest::get().insert_header(("host", "127.0.0.1:8080"))),
                false,
                base("http://127.0.0.1:8080", "ws://127.0.0.1:8080"),
            ),
            (
                &[],
                forged(TestRequest::get().insert_header(("host", "127.0.0.1:8080"))),
                true,
                base("https://evil.example", "wss://evil.example"),
            ),
            (
                &[],
                TestRequest::get()
                    .insert_header(("host", "127.0.0.1:8080"))
                    .insert_header(("x-forwarded-host", "game.example"))
                    .insert_header(("x-forwarded-proto", "https")),
                true,
                base("https://game.example", "wss://game.example"),
            ),
            (
                &[],
                TestRequest::get()
                    .insert_header(("host", "127.0.0.1:8080"))
                    .insert_header(("x-forwarded-host", "a b/c")),
                true,
                base("http://127.0.0.1:8080", "ws://127.0.0.1:8080"),
            ),
            (
                &["--public-url", "https://Game.Example/"],
                forged(TestRequest::get().insert_header(("host", "127.0.0.1:8080"))),
                true,
                base("https://game.example", "wss://game.example"),
            ),
            (
                &["--public-url", "http://game.example:8080"],
                TestRequest::get().insert_header(("host", "127.0.0.1:8080")),
                false,
                base("http://game.example:8080", "ws://game.example:8080"),
            ),
        ];
        for (args, req, trusted, want) in cases {
            let r = rules(args);
            let req = req.to_http_request();
            if let Some(public) = &r.public {
                req.extensions_mut().insert(Arc::clone(public));
            }
            assert_eq!(
                link_base(&req, trusted),
                want,
                "{args:?}, trusted {trusted}"
            );
        }
    }

    #[test]
    fn refusals_say_what_to_set() {
        let r = rules(&["--bind", "127.0.0.1:8080"]);
        let req = TestRequest::default()
            .insert_header(("host", "evil.example"))
            .to_http_request();
        let err = r.refusal(&req).map(|e| e.message).unwrap_or_default();
        assert_eq!(
            err,
            "host \"evil.example\" is not served here; see QUESTD_ALLOWED_HOSTS"
        );
        // What a refusal repeats of the request is cut like any name.
        let long = "h".repeat(5000);
        let req = TestRequest::default()
            .insert_header(("host", long.as_str()))
            .to_http_request();
        let err = r.refusal(&req).map(|e| e.message).unwrap_or_default();
        assert!(err.contains(&format!("\"{}\" is not", cut_name(&long))) && err.len() < 200);
        let req = TestRequest::default()
            .insert_header(("host", "127.0.0.1:8080"))
            .insert_header(("upgrade", "websocket"))
            .insert_header(("origin", "http://evil.example"))
            .to_http_request();
        let err = r.refusal(&req).map(|e| e.message).unwrap_or_default();
        assert!(
            err.starts_with("origin \"http://evil.example\" may not")
                && err.ends_with("see QUESTD_ALLOWED_ORIGINS"),
            "{err}"
        );
        assert_eq!(
            crate::http::errors::status_of(ErrorCode::UnsupportedMediaType),
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
    }

    #[actix_web::test]
    async fn every_response_carries_the_security_headers() {
        use actix_web::{App, HttpResponse, test, web};
        let r = Arc::new(rules(&["--bind", "127.0.0.1:8080"]));
        let app = test::init_service(
            App::new()
                .wrap(r.middleware())
                .route("/", web::get().to(HttpResponse::Ok)),
        )
        .await;
        for (host, status) in [("127.0.0.1:8080", 200), ("evil.example", 403)] {
            let req = test::TestRequest::get()
                .uri("/")
                .insert_header(("host", host))
                .to_request();
            let res = test::call_service(&app, req).await;
            assert_eq!(res.status().as_u16(), status, "{host}");
            for (name, value) in SECURITY_HEADERS {
                assert_eq!(
                    res.headers().get(*name).and_then(|v| v.to_str().ok()),
                    Some(*value),
                    "{host}: {name}"
                );
            }
        }
    }
}
