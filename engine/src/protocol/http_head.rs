//! HTTP/1.x request and response heads: parsing, validation, rewriting.
//!
//! Pure code over byte slices (httparse underneath), shared by forward mode,
//! transparent port 80, benches and fuzz targets. It decides framing and
//! refuses anything ambiguous (CL+TE, differing lengths, codings other than
//! chunked, duplicate Host, userinfo); it never allocates per byte and never
//! waits for a fixed byte count.

use crate::protocol::decimal::push_decimal;
use std::mem::MaybeUninit;

/// Largest request or response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most header fields accepted in one head.
pub const MAX_HEADERS: usize = 128;

/// Why a head was refused; maps to a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The head is larger than [`MAX_HEAD`] (431).
    #[error("request head larger than 64 KiB")]
    TooLarge,
    /// More than [`MAX_HEADERS`] fields (431).
    #[error("more than 128 header fields")]
    TooManyHeaders,
    /// Anything else (400), with a short public explanation.
    #[error("{0}")]
    Malformed(&'static str),
}

impl HeadError {
    /// The HTTP status a client gets for this error.
    pub fn status(self) -> u16 {
        match self {
            HeadError::TooLarge | HeadError::TooManyHeaders => 431,
            HeadError::Malformed(_) => 400,
        }
    }
}

/// Where a forward-proxy request wants to go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// `CONNECT host:port`.
    Connect {
        /// Host as written (brackets kept for IPv6).
        host: &'a str,
        /// Destination port.
        port: u16,
    },
    /// `http://host[:port]/path` absolute form.
    Absolute {
        /// Host as written (brackets kept for IPv6).
        host: &'a str,
        /// Destination port (80 when absent).
        port: u16,
        /// `host[:port]` as written, for the rewritten `Host` header.
        authority: &'a str,
        /// Origin-form path and query (`/` when empty).
        path: &'a str,
    },
    /// Origin form or `*`: what a server, not a proxy, receives.
    Origin {
        /// The raw request target.
        path: &'a str,
    },
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

/// One header field, borrowed from the head buffer: httparse's own
/// `name` and `value`, so a parse hands its fields over without copying them.
pub type Field<'a> = httparse::Header<'a>;

/// Room for the fields of one head, kept by the caller so that parsing a
/// head allocates nothing. Uninitialised until a parse fills some (filling
/// 128 slots first would cost more than parsing a typical head); 4 KiB, so
/// kept on a thread's stack, not across an `.await` in a task.
pub struct FieldSlots<'b>([MaybeUninit<Field<'b>>; MAX_HEADERS]);

impl FieldSlots<'_> {
    /// Empty room for [`MAX_HEADERS`] fields.
    pub fn new() -> Self {
        FieldSlots([const { MaybeUninit::uninit() }; MAX_HEADERS])
    }
}

impl Default for FieldSlots<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// A parsed and validated request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// Method token.
    pub method: &'a str,
    /// Request target.
    pub target: Target<'a>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Header fields in order.
    pub fields: &'a [Field<'a>],
    /// Value of the `Host` field, if one was sent.
    pub host_field: Option<&'a [u8]>,
    /// Body framing.
    pub framing: Framing,
    /// The client wants the connection kept open afterwards.
    pub keep_alive: bool,
    /// The client asks for a protocol upgrade (WebSocket).
    pub upgrade: bool,
    /// Length of the head including the blank line.
    pub head_len: usize,
}

/// A parsed and validated response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead<'a> {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: &'a str,
    /// Minor version of the upstream's HTTP/1.x.
    pub minor_version: u8,
    /// Header fields in order.
    pub fields: &'a [Field<'a>],
    /// Body framing.
    pub framing: Framing,
    /// The upstream will keep the connection open afterwards.
    pub keep_alive: bool,
    /// Length of the head including the blank line.
    pub head_len: usize,
}

/// Finds the end of a head (after the blank line), scanning from `from`;
/// lets callers avoid re-parsing a partial head on every read.
pub fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from.saturating_sub(3);
    while let Some(off) = buf.get(i..)?.iter().position(|&b| b == b'\n') {
        let lf = i + off;
        match (buf.get(lf + 1), buf.get(lf + 2)) {
            (Some(b'\n'), _) => return Some(lf + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(lf + 3),
            _ => i = lf + 1,
        }
    }
    None
}

/// Parses a complete request head (`buf` must hold the whole head: use
/// [`head_end`] first), its fields into `slots`. Returns the head or why it
/// is refused.
pub fn parse_request<'b: 's, 's>(buf: &'b [u8], slots: &'s mut FieldSlots<'b>) -> Result<RequestHead<'s>, HeadError> {
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut slots.0) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Err(HeadError::Malformed("incomplete request head")),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(_) => return Err(HeadError::Malformed("malformed request head")),
    };
    if head_len > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let (Some(method), Some(raw_target), Some(minor_version)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Malformed("malformed request line"));
    };
    let fields: &[Field<'_>] = req.headers;
    let target = if method == "CONNECT" {
        parse_connect_target(raw_target)?
    } else {
        parse_target(raw_target)?
    };
    let host_field = single_host(fields)?;
    let framing = request_framing(fields, minor_version, method)?;
    let connection = ConnectionTokens::of(fields);
    let keep_alive = if minor_version == 0 {
        connection.keep_alive
    } else {
        !connection.close
    };
    let upgrade = connection.upgrade && fields.iter().any(|f| f.name.eq_ignore_ascii_case("upgrade"));
    Ok(RequestHead {
        method,
        target,
        minor_version,
        fields,
        host_field,
        framing,
        keep_alive,
        upgrade,
        head_len,
    })
}

/// Parses a complete response head to a request made with `request_method`,
/// its fields into `slots`.
pub fn parse_response<'b: 's, 's>(
    buf: &'b [u8],
    slots: &'s mut FieldSlots<'b>,
    request_method: &str,
) -> Result<ResponseHead<'s>, HeadError> {
    let mut res = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, buf, &mut slots.0);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Err(HeadError::Malformed("incomplete response head")),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(_) => return Err(HeadError::Malformed("malformed response head")),
    };
    let (Some(status), Some(minor_version)) = (res.code, res.version) else {
        return Err(HeadError::Malformed("malformed status line"));
    };
    // httparse takes any three digits; below 100 the client would be sent an
    // unparsable status line ("HTTP/1.1 0 OK").
    if status < 100 {
        return Err(HeadError::Malformed("invalid status code"));
    }
    let reason = res.reason.unwrap_or("");
    let fields: &[Field<'_>] = res.headers;
    let connection = ConnectionTokens::of(fields);
    let bodiless = request_method == "HEAD" || (100..200).contains(&status) || status == 204 || status == 304;
    let framing = if bodiless {
        Framing::Empty
    } else {
        response_framing(fields)?
    };
    let keep_alive = framing != Framing::UntilClose
        && if minor_version == 0 {
            connection.keep_alive
        } else {
            !connection.close
        };
    Ok(ResponseHead {
        status,
        reason,
        minor_version,
        fields,
        framing,
        keep_alive,
        head_len,
    })
}

fn parse_connect_target(target: &str) -> Result<Target<'_>, HeadError> {
    let (host, port) = split_authority(target).ok_or(HeadError::Malformed("CONNECT needs host:port"))?;
    let port = port.ok_or(HeadError::Malformed("CONNECT needs a port"))?;
    Ok(Target::Connect { host, port })
}

fn parse_target(target: &str) -> Result<Target<'_>, HeadError> {
    // A "://" after a non-scheme (`/login?next=http://b`) is part of an
    // origin-form path or query, not the start of an absolute URL.
    let Some(scheme_end) = target.find("://").filter(|&end| is_scheme(&target[..end])) else {
        return Ok(Target::Origin { path: target });
    };
    let scheme = &target[..scheme_end];
    if scheme.eq_ignore_ascii_case("https") {
        return Err(HeadError::Malformed("https:// URLs go through CONNECT"));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HeadError::Malformed("only http:// URLs are proxied"));
    }
    let rest = &target[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(HeadError::Malformed("userinfo in URLs is not accepted"));
    }
    let (host, port) = split_authority(authority).ok_or(HeadError::Malformed("invalid host in URL"))?;
    // A fragment is the client's own (RFC 9110 7.1): never sent on.
    let path = &path[..path.find('#').unwrap_or(path.len())];
    let path = if path.is_empty() { "/" } else { path };
    Ok(Target::Absolute {
        host,
        port: port.unwrap_or(80),
        authority,
        path,
    })
}

/// RFC 3986 3.1: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(scheme: &str) -> bool {
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// Splits `host[:port]` / `[v6][:port]`; `None` when malformed.
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if authority.starts_with('[') {
        let close = authority.find(']')?;
        let (host, rest) = authority.split_at(close + 1);
        match rest {
            "" => (host, None),
            _ => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.bytes().position(|b| b == b':') {
            Some(colon) => (&authority[..colon], Some(&authority[colon + 1..])),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            let port = p.bytes().fold(0u32, |n, digit| n * 10 + u32::from(digit - b'0'));
            Some(u16::try_from(port).ok().filter(|&p| p != 0)?)
        }
        Some(_) => return None,
    };
    Some((host, port))
}

fn single_host<'a>(fields: &[Field<'a>]) -> Result<Option<&'a [u8]>, HeadError> {
    let mut hosts = fields.iter().filter(|f| f.name.eq_ignore_ascii_case("host"));
    let first = hosts.next().map(|f| f.value);
    if hosts.next().is_some() {
        return Err(HeadError::Malformed("more than one Host header"));
    }
    Ok(first)
}

/// The host of a `Host` field without its port (`name:8080` -> `name`,
/// `[::1]:80` -> `[::1]`); `None` when empty, not text, or not
/// `host[:port]` with a port from 1 to 65535.
pub fn host_without_port(field: &[u8]) -> Option<&str> {
    let field = std::str::from_utf8(field).ok()?.trim();
    split_authority(field).map(|(host, _)| host)
}

fn request_framing(fields: &[Field<'_>], minor_version: u8, method: &str) -> Result<Framing, HeadError> {
    let length = content_length(fields)?;
    let chunked = transfer_encoding(fields)?;
    match (length, chunked) {
        (Some(_), Some(_)) => Err(HeadError::Malformed("both Content-Length and Transfer-Encoding")),
        // A CONNECT has no content (RFC 9110 9.3.6): what follows its head
        // is the tunnel's, never a body of either framing.
        (_, Some(_)) if method == "CONNECT" => Err(HeadError::Malformed("CONNECT with a body")),
        (_, Some(_)) if minor_version == 0 => Err(HeadError::Malformed("Transfer-Encoding in HTTP/1.0")),
        (_, Some(true)) => Ok(Framing::Chunked),
        (_, Some(false)) => Err(HeadError::Malformed("only chunked transfer coding is accepted")),
        (Some(0), None) | (None, None) => Ok(Framing::Empty),
        (Some(_), None) if method == "CONNECT" => Err(HeadError::Malformed("CONNECT with a body")),
        (Some(n), None) => Ok(Framing::Length(n)),
    }
}

fn response_framing(fields: &[Field<'_>]) -> Result<Framing, HeadError> {
    match transfer_encoding(fields) {
        Ok(Some(true)) => return Ok(Framing::Chunked),
        Ok(Some(false)) | Err(_) => return Ok(Framing::UntilClose),
        Ok(None) => {}
    }
    match content_length(fields)? {
        Some(n) => Ok(Framing::Length(n)),
        None => Ok(Framing::UntilClose),
    }
}

/// The Content-Length, if any; differing or invalid values are an error.
fn content_length(fields: &[Field<'_>]) -> Result<Option<u64>, HeadError> {
    let mut length = None;
    for field in fields.iter().filter(|f| f.name.eq_ignore_ascii_case("content-length")) {
        let value = field.value;
        if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::Malformed("invalid Content-Length"));
        }
        // At most i64::MAX: what the upstreams parsing it signed still read alike.
        let n: u64 = std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|n| u64::try_from(n).ok())
            .ok_or(HeadError::Malformed("invalid Content-Length"))?;
        if length.is_some_and(|prev| prev != n) {
            return Err(HeadError::Malformed("differing Content-Length values"));
        }
        length = Some(n);
    }
    Ok(length)
}

/// `Some(true)` for exactly `chunked`, `Some(false)` for any other coding.
fn transfer_encoding(fields: &[Field<'_>]) -> Result<Option<bool>, HeadError> {
    let mut codings = fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("transfer-encoding"));
    let Some(first) = codings.next() else {
        return Ok(None);
    };
    if codings.next().is_some() {
        return Err(HeadError::Malformed("more than one Transfer-Encoding header"));
    }
    Ok(Some(first.value.trim_ascii().eq_ignore_ascii_case(b"chunked")))
}

/// The tokens of all `Connection` fields that matter for forwarding.
#[derive(Default)]
struct ConnectionTokens {
    close: bool,
    keep_alive: bool,
    upgrade: bool,
}

impl ConnectionTokens {
    fn of(fields: &[Field<'_>]) -> Self {
        let mut tokens = ConnectionTokens::default();
        for token in connection_tokens(fields) {
            tokens.close |= token.eq_ignore_ascii_case(b"close");
            tokens.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            tokens.upgrade |= token.eq_ignore_ascii_case(b"upgrade");
        }
        tokens
    }
}

fn connection_tokens<'a>(fields: &'a [Field<'a>]) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("connection"))
        .flat_map(|f| f.value.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Hop-by-hop fields never forwarded in either direction.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
];

/// Fields that frame the body crackbox forwards as received. `Connection`
/// naming them never removes them: the body would reach the next hop
/// unframed and be read there as further, undecided requests (smuggling).
const FRAMING_FIELDS: [&str; 2] = ["content-length", "transfer-encoding"];

/// True when `field` must not be forwarded: hop-by-hop, named in
/// `Connection` (framing fields excepted), or (towards upstream) any
/// `Proxy-*` field.
fn is_hop_field(field: &Field<'_>, fields: &[Field<'_>], to_upstream: bool) -> bool {
    let name = field.name;
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || (to_upstream && name.len() >= 6 && name[..6].eq_ignore_ascii_case("proxy-"))
        || (!FRAMING_FIELDS.iter().any(|f| name.eq_ignore_ascii_case(f))
            && connection_tokens(fields).any(|t| t.eq_ignore_ascii_case(name.as_bytes())))
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes the head to send upstream for an absolute-form request: origin
/// form, `Host` replaced by the URL's authority (RFC 9112 3.2.2, so the
/// upstream serves the host that was checked), hop-by-hop fields removed.
pub fn write_upstream_request(head: &RequestHead<'_>, out: &mut Vec<u8>) {
    let (authority, slash, path) = match head.target {
        // RFC 9112 3.2.1: an empty path is sent as "/", also before a query.
        Target::Absolute { authority, path, .. } if path.starts_with('?') => (authority, "/", path),
        Target::Absolute { authority, path, .. } => (authority, "", path),
        Target::Connect { host, .. } => (host, "", "/"),
        Target::Origin { path } => (
            std::str::from_utf8(head.host_field.unwrap_or(b"")).unwrap_or(""),
            "",
            path,
        ),
    };
    for piece in [head.method, " ", slash, path, " HTTP/1."] {
        out.extend_from_slice(piece.as_bytes());
    }
    push_decimal(out, usize::from(head.minor_version));
    out.extend_from_slice(b"\r\n");
    push_field(out, "Host", authority.as_bytes());
    for field in head.fields {
        if field.name.eq_ignore_ascii_case("host") || is_hop_field(field, head.fields, true) {
            continue;
        }
        push_field(out, field.name, field.value);
    }
    if head.upgrade {
        if let Some(upgrade) = head.fields.iter().find(|f| f.name.eq_ignore_ascii_case("upgrade")) {
            push_field(out, "Upgrade", upgrade.value);
        }
        push_field(out, "Connection", b"Upgrade");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `HTTP/1.1 <status> <reason>` and its line end.
pub(crate) fn push_status_line(out: &mut Vec<u8>, status: u16, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, usize::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The `Connection` field crackbox adds to a response for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionField {
    /// None: HTTP/1.1's default, the connection stays open (and interim
    /// responses, and a 101 that says `Upgrade` itself).
    Omitted,
    /// `Connection: close`: crackbox closes after this response.
    Close,
    /// `Connection: keep-alive`: an HTTP/1.0 client asked to keep the
    /// connection, and it is kept.
    KeepAlive,
}

/// Writes the head to send the client: hop-by-hop fields removed,
/// `Content-Length` removed beside a `Transfer-Encoding` (RFC 9112 6.3),
/// and the `Connection` field `connection` says.
pub fn write_client_response(head: &ResponseHead<'_>, connection: ConnectionField, out: &mut Vec<u8>) {
    push_status_line(out, head.status, head.reason);
    // A `Transfer-Encoding` frames the body as chunked or until close (never
    // by length), or sits in a bodiless response: only those are searched.
    let drop_length = match head.framing {
        Framing::Chunked => true,
        Framing::Length(_) => false,
        Framing::UntilClose | Framing::Empty => head
            .fields
            .iter()
            .any(|f| f.name.eq_ignore_ascii_case("transfer-encoding")),
    };
    for field in head.fields {
        if is_hop_field(field, head.fields, false) || (drop_length && field.name.eq_ignore_ascii_case("content-length"))
        {
            continue;
        }
        push_field(out, field.name, field.value);
    }
    if head.status == 101 {
        if let Some(upgrade) = head.fields.iter().find(|f| f.name.eq_ignore_ascii_case("upgrade")) {
            push_field(out, "Upgrade", upgrade.value);
        }
        push_field(out, "Connection", b"Upgrade");
    } else {
        match connection {
            ConnectionField::Omitted => {}
            ConnectionField::Close => push_field(out, "Connection", b"close"),
            ConnectionField::KeepAlive => push_field(out, "Connection", b"keep-alive"),
        }
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
