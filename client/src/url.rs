//! The admin URL: where to connect, what to send as `Host`, and the path
//! prefix every endpoint is appended to.

use crate::Error;
use hyper::Uri;
use std::net::{Ipv4Addr, SocketAddr};

/// A parsed `http://HOST[:PORT][/PREFIX]`, or without a scheme a host with
/// its port: `IP:PORT`, `[IPv6]:PORT`, `NAME:PORT` or `:PORT` (meaning
/// `127.0.0.1:PORT`). A word without a port (`notaurl`) is refused before
/// anything is looked up (docs/admin-api.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdminUrl {
    /// The URL as given, for error messages.
    pub text: String,
    /// Host name or address to connect to (IPv6 without brackets).
    pub host: String,
    /// TCP port (80 when the URL names none).
    pub port: u16,
    /// The `Host` header: the URL's authority.
    pub authority: String,
    /// Path prefix without a trailing slash ("" for none).
    pub prefix: String,
}

impl AdminUrl {
    /// `http://ADDR`.
    pub fn from_addr(addr: SocketAddr) -> Self {
        AdminUrl {
            text: format!("http://{addr}"),
            host: addr.ip().to_string(),
            port: addr.port(),
            authority: addr.to_string(),
            prefix: String::new(),
        }
    }

    /// Parses `text`; only plain `http` is spoken.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |reason| Error::Url {
            url: text.to_string(),
            reason,
        };
        if !text.contains("://") {
            return Self::address(text)
                .ok_or_else(|| bad("without http:// only HOST:PORT is taken (IP:PORT, NAME:PORT or :PORT)"));
        }
        let uri: Uri = text.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("only http:// is supported"));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported (use a secret)"));
        }
        let port = match authority.as_str().strip_prefix(authority.host()) {
            Some("") => 80,
            Some(port) => match port.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()) {
                Some(0) => return Err(bad("port 0")),
                Some(port) => port,
                None => return Err(bad("the port is not a number from 1 to 65535")),
            },
            None => return Err(bad("no host")),
        };
        if uri.query().is_some() {
            return Err(bad("a query string is not allowed"));
        }
        Ok(AdminUrl {
            text: text.to_string(),
            host: host.to_string(),
            port,
            authority: authority.as_str().to_string(),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// A URL without a scheme: a host with its port (`None` for anything
    /// else, a bare word above all: a typo is never looked up).
    fn address(text: &str) -> Option<Self> {
        let port = |port: &str| port.parse::<u16>().ok().filter(|port| *port != 0);
        let (host, port) = match text.rsplit_once(':')? {
            ("", port_text) => (Ipv4Addr::LOCALHOST.to_string(), port(port_text)?),
            (name, port_text) if is_name(name) => (name.to_string(), port(port_text)?),
            _ => {
                let addr = text.parse::<SocketAddr>().ok().filter(|addr| addr.port() != 0)?;
                return Some(AdminUrl {
                    text: text.to_string(),
                    ..AdminUrl::from_addr(addr)
                });
            }
        };
        Some(AdminUrl {
            text: text.to_string(),
            authority: format!("{host}:{port}"),
            host,
            port,
            prefix: String::new(),
        })
    }
}

/// Whether `text` reads as a host name: labels of letters, digits and `-`.
fn is_name(text: &str) -> bool {
    text.split('.')
        .all(|label| !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// `value` fit for a query string: every byte but letters, digits and
/// `-._~` percent-encoded.
pub(crate) fn query_value(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => encoded.push(char::from(byte)),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        let cases = [
            ("agent-7", "agent-7"),
            ("10.0.0.2", "10.0.0.2"),
            ("::1", "%3A%3A1"),
            ("a b&c=d", "a%20b%26c%3Dd"),
            ("é", "%C3%A9"),
            ("", ""),
        ];
        for (value, want) in cases {
            assert_eq!(query_value(value), want, "{value}");
        }
    }

    #[test]
    fn urls() {
        let cases = [
            ("http://127.0.0.1:3129", Some(("127.0.0.1", 3129, "127.0.0.1:3129", ""))),
            (
                "http://localhost:3129/",
                Some(("localhost", 3129, "localhost:3129", "")),
            ),
            ("127.0.0.1:9", Some(("127.0.0.1", 9, "127.0.0.1:9", ""))),
            ("[::1]:3129", Some(("::1", 3129, "[::1]:3129", ""))),
            ("localhost:3129", Some(("localhost", 3129, "localhost:3129", ""))),
            (":3129", Some(("127.0.0.1", 3129, "127.0.0.1:3129", ""))),
            ("notaurl", None),
            ("box:3129", Some(("box", 3129, "box:3129", ""))),
            ("box", None),
            ("bad_name:3129", None),
            ("box.:3129", None),
            ("localhost", None),
            ("127.0.0.1", None),
            ("127.0.0.1:0", None),
            (":0", None),
            ("127.0.0.1:9/admin", None),
            ("http://[::1]:3129/admin/", Some(("::1", 3129, "[::1]:3129", "/admin"))),
            ("http://box", Some(("box", 80, "box", ""))),
            ("https://127.0.0.1:3129", None),
            ("http://:3129", None),
            ("http://h:port", None),
            ("http://h:0", None),
            ("http://h:", None),
            ("http://u:p@h:1", None),
            ("http://h:1/?x=1", None),
            ("", None),
            ("not a url", None),
        ];
        for (text, want) in cases {
            let got = AdminUrl::parse(text).ok();
            let got = got
                .as_ref()
                .map(|u| (u.host.as_str(), u.port, u.authority.as_str(), u.prefix.as_str()));
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn socket_addresses_read_as_their_urls() {
        for addr in ["127.0.0.1:3129", "[::1]:80", "[fe80::1%2]:9"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let from_addr = AdminUrl::from_addr(addr);
            assert_eq!((from_addr.host.parse(), from_addr.port), (Ok(addr.ip()), addr.port()));
            if addr.to_string().contains('%') {
                continue;
            }
            assert_eq!(AdminUrl::parse(&from_addr.text).unwrap(), from_addr, "{addr}");
        }
    }
}
