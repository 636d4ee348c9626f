//! What every admin response carries and every request must show, the
//! console's pages and the API alike (docs/console.md, "Security").
//!
//! A request whose `Host` is not one of the admin listener's names is
//! refused with 421 before any route sees it: a page a browser loaded from
//! another name that later resolves to this listener (DNS rebinding) can
//! then neither read nor change anything. The names are: loopback addresses
//! and `localhost` on any port (what a tunnel or a port mapping forwards),
//! the listener's own address and port, for a wildcard bind any address of
//! this host on that port, and the names the operator gave (`--admin-name`,
//! on any port). A request that carries an `Origin` other than its own
//! `Host` (a page of another site, or `null`) is refused with 403: a
//! browser sends a cross-site form or `fetch` POST without asking first,
//! so without a secret another site's page could otherwise change the
//! registry through the operator's browser (cross-site request forgery).
//! Every response says it may not be framed, sniffed or given scripts or
//! styles from anywhere else, and, unless it says otherwise, not stored.

use super::quiet::QuietListener;
use super::ApiError;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The policy of every response: only this origin's own files, no inline
/// script or style, no framing, no form posts, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The local address a connection was accepted on (for a wildcard bind,
/// the address of this host the client reached).
#[derive(Debug, Clone, Copy)]
pub struct LocalAddr(pub Option<SocketAddr>);

impl axum::extract::connect_info::Connected<IncomingStream<'_, QuietListener>> for LocalAddr {
    fn connect_info(stream: IncomingStream<'_, QuietListener>) -> Self {
        LocalAddr(stream.io().get_ref().local_addr().ok())
    }
}

/// The names an admin listener answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNames {
    bound: SocketAddr,
    extra: Vec<String>,
}

impl HostNames {
    /// The names of a listener bound to `bound`, plus `extra` names (any port).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Self {
        HostNames {
            bound,
            extra: extra.iter().map(|name| normalised(name)).collect(),
        }
    }

    /// Whether a request with `Host: host` that arrived on `local` is for
    /// this listener.
    pub fn allows(&self, host: &str, local: Option<SocketAddr>) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        let on_our_port = port.is_none_or(|port| port == self.bound.port());
        match name.parse::<IpAddr>() {
            Ok(ip) if ip.is_loopback() => true,
            Ok(ip) if ip == self.bound.ip() => on_our_port,
            Ok(ip) if self.bound.ip().is_unspecified() => on_our_port && is_local(ip, local),
            Ok(_) => false,
            Err(_) => {
                let name = normalised(&name);
                name == "localhost" || self.extra.contains(&name)
            }
        }
    }
}

/// Lower case, without one trailing dot.
fn normalised(name: &str) -> String {
    let name = name.to_ascii_lowercase();
    name.strip_suffix('.').map(str::to_owned).unwrap_or(name)
}

/// `name`, `name:port`, `[v6]` or `[v6]:port` -> the name (brackets
/// removed) and the port; `None` when it is none of these.
fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let (name, after) = rest.split_once(']')?;
            let port = match after {
                "" => None,
                after => Some(after.strip_prefix(':')?),
            };
            (name, port)
        }
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    let port = match port {
        Some(port) => Some(port.parse().ok()?),
        None => None,
    };
    (!name.is_empty()).then(|| (name.to_owned(), port))
}

/// Whether `origin` (`scheme://authority`) is the origin of a request for
/// `host`: a page of this admin listener's own, under the name it was
/// asked by.
fn same_origin(origin: &HeaderValue, host: Option<&str>) -> bool {
    let (Ok(origin), Some(host)) = (origin.to_str(), host) else {
        return false;
    };
    ["http://", "https://"]
        .iter()
        .filter_map(|scheme| origin.strip_prefix(scheme))
        .any(|authority| authority.eq_ignore_ascii_case(host))
}

/// Whether `ip` is an address of this host: the one the connection
/// arrived on, or any an interface carries.
fn is_local(ip: IpAddr, local: Option<SocketAddr>) -> bool {
    if local.is_some_and(|local| local.ip() == ip) {
        return true;
    }
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    interfaces.filter_map(|interface| interface.address).any(|address| {
        let found = match (address.as_sockaddr_in(), address.as_sockaddr_in6()) {
            (Some(v4), _) => Some(IpAddr::V4(v4.ip())),
            (_, Some(v6)) => Some(IpAddr::V6(v6.ip())),
            _ => None,
        };
        found == Some(ip)
    })
}

/// The name a request is for: the authority of an absolute-form target
/// (which HTTP/1.1 puts before `Host`), else its one `Host`; `None` when it
/// names none (HTTP/1.0). Two `Host` headers are a 400: which one counts
/// would be a guess.
fn named_host(request: &Request) -> Result<Option<String>, ApiError> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(ApiError::bad_request("a request carries one Host header, not two"));
    }
    let authority = request.uri().authority().map(ToString::to_string);
    Ok(authority.or_else(|| host.map(|value| value.to_str().unwrap_or("\u{fffd}").to_owned())))
}

/// Refuses a request for another name; adds the security headers to every answer.
pub async fn guard(names: axum::extract::State<Arc<HostNames>>, request: Request, next: Next) -> Response {
    let local = request
        .extensions()
        .get::<ConnectInfo<LocalAddr>>()
        .and_then(|ConnectInfo(LocalAddr(local))| *local);
    let mut response = match named_host(&request) {
        Err(refused) => refused.into_response(),
        Ok(Some(host)) if !names.allows(&host, local) => {
            tracing::warn!(host = %host.escape_debug(), "admin request for a foreign Host refused");
            ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "Host {host:?} is not a name of this admin API (a guard against DNS rebinding); \
                     use its address or localhost, or give the name with --admin-name"
                ),
            )
            .into_response()
        }
        Ok(host) => match request.headers().get(header::ORIGIN) {
            Some(origin) if !same_origin(origin, host.as_deref()) => {
                let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
                tracing::warn!(origin = %origin.escape_debug(), "admin request from another site's page refused");
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Origin {origin:?} is not this admin API: requests from another site's pages are refused \
                         (a guard against cross-site request forgery)"
                    ),
                )
                .into_response()
            }
            // No Host at all (HTTP/1.0): no browser sends that.
            _ => next.run(request).await,
        },
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Registrations, denials and counts are never kept by a cache on the
    // way (the console's files say `no-cache` themselves).
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_page_of_the_listener_itself_is_its_origin() {
        let cases: [(&str, Option<&str>, bool); 8] = [
            ("http://127.0.0.1:3129", Some("127.0.0.1:3129"), true),
            ("http://LOCALHOST:9000", Some("localhost:9000"), true),
            ("https://crackbox.internal", Some("crackbox.internal"), true),
            ("http://127.0.0.1:8000", Some("127.0.0.1:3129"), false),
            ("http://evil.test", Some("127.0.0.1:3129"), false),
            ("null", Some("127.0.0.1:3129"), false),
            ("http://127.0.0.1:3129", None, false),
            ("ftp://127.0.0.1:3129", Some("127.0.0.1:3129"), false),
        ];
        for (origin, host, want) in cases {
            assert_eq!(
                same_origin(&HeaderValue::from_static(origin), host),
                want,
                "{origin} for {host:?}"
            );
        }
    }

    #[test]
    fn hosts_table() {
        let loopback = HostNames::new("127.0.0.1:3129".parse().unwrap(), &[]);
        let specific = HostNames::new("10.88.0.2:3129".parse().unwrap(), &["Crackbox.Internal.".into()]);
        let wildcard = HostNames::new("0.0.0.0:3129".parse().unwrap(), &[]);
        let arrived: Option<SocketAddr> = Some("172.18.0.2:3129".parse().unwrap());
        let cases: [(&HostNames, &str, bool); 24] = [
            (&loopback, "127.0.0.1:3129", true),
            (&loopback, "127.0.0.1", true),
            (&loopback, "localhost:3129", true),
            (&loopback, "LOCALHOST.:8080", true),
            (&loopback, "[::1]:3129", true),
            (&loopback, "127.0.0.2:9999", true),
            (&loopback, "rebind.test:3129", false),
            (&loopback, "localhost.rebind.test", false),
            (&loopback, "10.0.0.1:3129", false),
            (&loopback, "", false),
            (&loopback, "127.0.0.1:x", false),
            (&loopback, "[::1", false),
            (&loopback, "[::1]x", false),
            (&specific, "10.88.0.2:3129", true),
            (&specific, "10.88.0.2:3130", false),
            (&specific, "10.88.0.3:3129", false),
            (&specific, "crackbox.internal:3129", true),
            (&specific, "CRACKBOX.INTERNAL", true),
            (&specific, "other.internal:3129", false),
            (&wildcard, "172.18.0.2:3129", true),
            (&wildcard, "172.18.0.2:3130", false),
            (&wildcard, "203.0.113.9:3129", false),
            (&wildcard, "localhost:3129", true),
            (&wildcard, "[::ffff:203.0.113.9]:3129", false),
        ];
        for (names, host, want) in cases {
            assert_eq!(names.allows(host, arrived), want, "{host} for {names:?}");
        }
    }
}
