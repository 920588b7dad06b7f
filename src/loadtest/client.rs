//! Where the load test's sockets go: the server, and which local address
//! each client socket binds to, so `--source-ips` can spread them over
//! many loopback addresses (each has its own ~28,000 ephemeral ports).
//! The WebSocket over them is `ws`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::LoadtestError;

/// Most addresses `--source-ips` may name.
const MAX_SOURCE_IPS: u64 = 65_536;

/// Local addresses client sockets bind to, used round robin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceIps {
    addrs: Vec<IpAddr>,
}

impl SourceIps {
    /// Reads `127.0.0.2-127.0.0.20`, one address, or a comma-separated
    /// list of either (ranges are IPv4 only).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut addrs = Vec::new();
        for part in text.split(',').map(str::trim) {
            let ip = |s: &str| {
                IpAddr::from_str(s.trim()).map_err(|_| format!("{s:?} is not an IP address"))
            };
            match part.split_once('-') {
                None => addrs.push(ip(part)?),
                Some((first, last)) => {
                    let (IpAddr::V4(first), IpAddr::V4(last)) = (ip(first)?, ip(last)?) else {
                        return Err(format!("{part:?}: ranges are IPv4 only"));
                    };
                    let (a, b) = (u32::from(first), u32::from(last));
                    if a > b {
                        return Err(format!("{part:?}: the range runs backwards"));
                    }
                    if u64::from(b - a) + addrs.len() as u64 >= MAX_SOURCE_IPS {
                        return Err(format!("more than {MAX_SOURCE_IPS} addresses"));
                    }
                    addrs.extend((a..=b).map(|n| IpAddr::V4(Ipv4Addr::from(n))));
                }
            }
            if addrs.len() as u64 > MAX_SOURCE_IPS {
                return Err(format!("more than {MAX_SOURCE_IPS} addresses"));
            }
        }
        Ok(Self { addrs })
    }

    /// How many addresses there are.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// The first address (HTTP requests use it).
    pub fn first(&self) -> Option<IpAddr> {
        self.addrs.first().copied()
    }

    /// The `n`th address, round robin.
    pub fn nth(&self, n: usize) -> Option<IpAddr> {
        self.addrs.get(n % self.addrs.len().max(1)).copied()
    }
}

/// Hands out source addresses round robin to every connection of a run.
#[derive(Debug, Default)]
pub struct SourcePicker {
    ips: Option<SourceIps>,
    next: AtomicUsize,
}

impl SourcePicker {
    pub fn new(ips: Option<SourceIps>) -> Self {
        Self {
            ips,
            next: AtomicUsize::new(0),
        }
    }

    /// The address the next socket binds to (`None`: let the kernel pick).
    pub fn next(&self) -> Option<IpAddr> {
        let ips = self.ips.as_ref()?;
        ips.nth(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The address HTTP requests bind to.
    pub fn first(&self) -> Option<IpAddr> {
        self.ips.as_ref().and_then(SourceIps::first)
    }
}

/// The server being driven.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port`, no trailing slash.
    pub http_base: String,
    /// `host:port` as the user wrote it, for the WebSocket request's URI.
    pub authority: String,
    /// The address sockets connect to.
    pub addr: SocketAddr,
}

impl Target {
    /// Parses `--url` and resolves its host (preferring an address of the
    /// family of `source`, when given).
    pub async fn resolve(url: &str, source: Option<IpAddr>) -> Result<Self, LoadtestError> {
        let bad = |why: &str| LoadtestError::BadUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if parsed.scheme() != "http" {
            return Err(bad(
                "only http:// URLs are driven (questd itself serves plain HTTP)",
            ));
        }
        let host = parsed.host_str().ok_or_else(|| bad("no host"))?;
        let port = parsed.port_or_known_default().unwrap_or(80);
        let authority = match parsed.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let lookup = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((lookup, port))
            .await
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
            .collect();
        let same_family = |a: &&SocketAddr| source.is_none_or(|s| s.is_ipv4() == a.is_ipv4());
        let addr = addrs
            .iter()
            .find(same_family)
            .or(addrs.first())
            .copied()
            .ok_or_else(|| bad(&format!("{host} has no address")))?;
        let path = parsed.path().trim_end_matches('/');
        Ok(Self {
            http_base: format!("http://{authority}{path}"),
            authority,
            addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_read_ranges_lists_and_single_addresses() {
        let ips = SourceIps::parse("127.0.0.2-127.0.0.4, 127.0.1.1").unwrap();
        assert_eq!(ips.len(), 4);
        let picker = SourcePicker::new(Some(ips));
        let got: Vec<String> = (0..5)
            .filter_map(|_| picker.next())
            .map(|ip| ip.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "127.0.0.2",
                "127.0.0.3",
                "127.0.0.4",
                "127.0.1.1",
                "127.0.0.2"
            ]
        );
        assert_eq!(SourceIps::parse("::1").unwrap().first(), "::1".parse().ok());
        assert_eq!(SourceIps::parse("10.0.0.255-10.0.1.1").unwrap().len(), 3);
        assert_eq!(SourcePicker::new(None).next(), None);
    }

    #[test]
    fn bad_source_ips_are_errors() {
        for bad in [
            "",
            "localhost",
            "127.0.0.9-127.0.0.2",
            "::1-::2",
            "127.0.0.1-",
            "10.0.0.0-10.2.0.0",
        ] {
            assert!(SourceIps::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn targets_are_plain_http() {
        let t = Target::resolve("http://127.0.0.1:18999/", None)
            .await
            .unwrap();
        assert_eq!(t.http_base, "http://127.0.0.1:18999");
        assert_eq!(t.authority, "127.0.0.1:18999");
        assert_eq!(t.addr.port(), 18999);
        let t = Target::resolve("http://127.0.0.1", None).await.unwrap();
        assert_eq!((t.authority.as_str(), t.addr.port()), ("127.0.0.1", 80));
        for bad in [
            "https://127.0.0.1",
            "ws://127.0.0.1:1",
            "127.0.0.1:8080",
            "http://",
        ] {
            assert!(Target::resolve(bad, None).await.is_err(), "{bad}");
        }
    }
}
