//! The SOCKS5 handshake (RFC 1928), read incrementally: the greeting, the
//! username/password sub-negotiation (RFC 1929, credentials ignored but for
//! an empty user name) and the request, and the replies crackbox sends.
//!
//! The SOCKS5 front end keeps the bytes a client has sent in one buffer and
//! calls [`Handshake::advance`] after every read: it says to read more, to
//! answer and go on, to refuse, or names the `CONNECT` target. A client may
//! send the next message before the answer to the last one (the buffer may
//! hold several): what each step took is reported, so nothing is lost, and
//! bytes after the request are the client's first bytes for the upstream.
//!
//! Pure code: no I/O, no runtime dependency, no allocation, no panics on any
//! input. Deciding and dialling are the front end's; this module only says
//! what the client asked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The protocol version byte of every SOCKS5 message.
const VERSION: u8 = 5;
/// The version byte of the username/password sub-negotiation.
const AUTH_VERSION: u8 = 1;
const METHOD_NO_AUTH: u8 = 0x00;
const METHOD_USERNAME_PASSWORD: u8 = 0x02;
const COMMAND_CONNECT: u8 = 0x01;
const ADDRESS_IPV4: u8 = 0x01;
const ADDRESS_NAME: u8 = 0x03;
const ADDRESS_IPV6: u8 = 0x04;

/// The answer to a greeting offering no authentication.
const CHOSEN_NO_AUTH: [u8; 2] = [VERSION, METHOD_NO_AUTH];
/// The answer to a greeting offering only username/password.
const CHOSEN_USERNAME_PASSWORD: [u8; 2] = [VERSION, METHOD_USERNAME_PASSWORD];
/// The answer to a greeting that offers neither.
const NO_ACCEPTABLE_METHOD: [u8; 2] = [VERSION, 0xFF];
/// Credentials accepted (whatever they were).
const AUTH_SUCCEEDED: [u8; 2] = [AUTH_VERSION, 0x00];
/// Credentials refused (an empty user name): RFC 1929 has the server close next.
const AUTH_FAILED: [u8; 2] = [AUTH_VERSION, 0x01];

/// The reply codes crackbox sends (RFC 1928 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `0x00`: connected; the tunnel follows.
    Succeeded,
    /// `0x01`: the request cannot be served (an unusable name or port, a
    /// reserved byte other than 0).
    GeneralFailure,
    /// `0x02`: denied by policy, whatever the reason.
    NotAllowed,
    /// `0x04`: the name does not resolve.
    HostUnreachable,
    /// `0x05`: the destination refused (or could not be connected to).
    ConnectionRefused,
    /// `0x06`: connecting timed out.
    TimedOut,
    /// `0x07`: `BIND`, `UDP ASSOCIATE` or an unknown command.
    CommandNotSupported,
    /// `0x08`: an address type other than IPv4, name and IPv6.
    AddressTypeNotSupported,
}

impl Reply {
    /// The code byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            Reply::Succeeded => 0x00,
            Reply::GeneralFailure => 0x01,
            Reply::NotAllowed => 0x02,
            Reply::HostUnreachable => 0x04,
            Reply::ConnectionRefused => 0x05,
            Reply::TimedOut => 0x06,
            Reply::CommandNotSupported => 0x07,
            Reply::AddressTypeNotSupported => 0x08,
        }
    }

    /// The whole reply: this code and a bound address of `0.0.0.0:0`
    /// (crackbox never tells the client its upstream address).
    pub fn bytes(self) -> [u8; 10] {
        [VERSION, self.code(), 0, ADDRESS_IPV4, 0, 0, 0, 0, 0, 0]
    }
}

/// Where a `CONNECT` goes, as the client gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host<'a> {
    /// A name (address type `0x03`), as sent; crackbox resolves it. Its
    /// bytes are UTF-8 but not otherwise checked.
    Name(&'a str),
    /// An address (types `0x01` and `0x04`): it matches only IP-literal
    /// allowlist entries.
    Ip(IpAddr),
}

impl Host<'_> {
    /// The host as a `CONNECT` request line names it (IPv6 in brackets), the
    /// form the decision, the denial log and `/v1/denials` take.
    pub fn to_connect_host(&self) -> String {
        match self {
            Host::Name(name) => (*name).to_owned(),
            Host::Ip(IpAddr::V4(ip)) => ip.to_string(),
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
        }
    }
}

/// What the bytes read so far ask of the front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress<'a> {
    /// A valid prefix: read more, append, and call again.
    NeedMore,
    /// Send `answer`, drop the first `used` bytes of the buffer and call again.
    Answer {
        /// The bytes to send the client.
        answer: [u8; 2],
        /// Bytes of the buffer the message answered took.
        used: usize,
    },
    /// A `CONNECT` to `host:port`; the request took `used` bytes, and any
    /// after them are for the upstream.
    Connect {
        /// The destination host.
        host: Host<'a>,
        /// The destination port (never 0).
        port: u16,
        /// Bytes of the buffer the request took.
        used: usize,
    },
    /// Send `answer`, then close: no acceptable method, an empty user name,
    /// or a request crackbox does not serve.
    Refuse {
        /// The last bytes the client gets.
        answer: Refusal,
    },
    /// Not SOCKS5 as RFC 1928 writes it: close without a reply. The text
    /// says why, for the log.
    Malformed(&'static str),
}

/// The last message of a refused handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The greeting offered neither no-auth nor username/password.
    NoAcceptableMethod,
    /// The credentials had an empty user name.
    AuthenticationFailed,
    /// A request refused with this reply.
    Reply(Reply),
}

impl Refusal {
    /// The bytes sent.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Refusal::NoAcceptableMethod => NO_ACCEPTABLE_METHOD.to_vec(),
            Refusal::AuthenticationFailed => AUTH_FAILED.to_vec(),
            Refusal::Reply(reply) => reply.bytes().to_vec(),
        }
    }
}

/// Which message the client sends next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Stage {
    /// Version and the authentication methods offered.
    #[default]
    Greeting,
    /// RFC 1929 username and password.
    Credentials,
    /// The request.
    Request,
    /// The handshake ended (connect, refusal or malformed).
    Over,
}

/// One client's handshake, message by message.
#[derive(Debug, Clone, Default)]
pub struct Handshake {
    stage: Stage,
}

impl Handshake {
    /// Reads the next message from the start of `buf` (the bytes received
    /// and not yet used). Calling it again after anything but
    /// [`Progress::NeedMore`] or [`Progress::Answer`] is malformed.
    pub fn advance<'a>(&mut self, buf: &'a [u8]) -> Progress<'a> {
        let progress = match self.stage {
            Stage::Greeting => greeting(buf),
            Stage::Credentials => credentials(buf),
            Stage::Request => request(buf),
            Stage::Over => Progress::Malformed("the handshake is over"),
        };
        self.stage = match (&progress, self.stage) {
            (Progress::NeedMore, stage) => stage,
            (Progress::Answer { answer, .. }, Stage::Greeting) if *answer == CHOSEN_USERNAME_PASSWORD => {
                Stage::Credentials
            }
            (Progress::Answer { .. }, _) => Stage::Request,
            _ => Stage::Over,
        };
        progress
    }
}

/// `VER NMETHODS METHODS...`: no authentication is preferred, then
/// username/password (some clients always offer it).
fn greeting(buf: &[u8]) -> Progress<'_> {
    let Some((&version, rest)) = buf.split_first() else {
        return Progress::NeedMore;
    };
    if version != VERSION {
        return Progress::Malformed("not SOCKS version 5");
    }
    let Some((&count, rest)) = rest.split_first() else {
        return Progress::NeedMore;
    };
    if count == 0 {
        return Progress::Malformed("a greeting offering no method");
    }
    let Some(methods) = rest.get(..usize::from(count)) else {
        return Progress::NeedMore;
    };
    let used = 2 + methods.len();
    if methods.contains(&METHOD_NO_AUTH) {
        Progress::Answer {
            answer: CHOSEN_NO_AUTH,
            used,
        }
    } else if methods.contains(&METHOD_USERNAME_PASSWORD) {
        Progress::Answer {
            answer: CHOSEN_USERNAME_PASSWORD,
            used,
        }
    } else {
        Progress::Refuse {
            answer: Refusal::NoAcceptableMethod,
        }
    }
}

/// RFC 1929 `VER ULEN UNAME PLEN PASSWD`: any credentials are accepted
/// (crackbox tells sources apart by address) but an empty user name, which
/// RFC 1929 does not allow (`ULEN` is 1 to 255); an empty password passes.
fn credentials(buf: &[u8]) -> Progress<'_> {
    let Some((&version, rest)) = buf.split_first() else {
        return Progress::NeedMore;
    };
    if version != AUTH_VERSION {
        return Progress::Malformed("not username/password version 1");
    }
    let Some((user, rest)) = counted(rest) else {
        return Progress::NeedMore;
    };
    let Some((password, _)) = counted(rest) else {
        return Progress::NeedMore;
    };
    if user.is_empty() {
        return Progress::Refuse {
            answer: Refusal::AuthenticationFailed,
        };
    }
    Progress::Answer {
        answer: AUTH_SUCCEEDED,
        used: 3 + user.len() + password.len(),
    }
}

/// `VER CMD RSV ATYP DST.ADDR DST.PORT`; the reserved byte must be 0
/// (RFC 1928).
fn request(buf: &[u8]) -> Progress<'_> {
    let Some(&[version, command, reserved, address_type]) = buf.first_chunk::<4>() else {
        return match buf.first() {
            Some(&version) if version != VERSION => Progress::Malformed("not SOCKS version 5"),
            _ => Progress::NeedMore,
        };
    };
    if version != VERSION {
        return Progress::Malformed("not SOCKS version 5");
    }
    let rest = &buf[4..];
    let (host, rest) = match address_type {
        ADDRESS_IPV4 => match rest.split_first_chunk::<4>() {
            Some((octets, rest)) => (Some(Host::Ip(IpAddr::V4(Ipv4Addr::from(*octets)))), rest),
            None => return Progress::NeedMore,
        },
        ADDRESS_IPV6 => match rest.split_first_chunk::<16>() {
            Some((octets, rest)) => (Some(Host::Ip(IpAddr::V6(Ipv6Addr::from(*octets)))), rest),
            None => return Progress::NeedMore,
        },
        ADDRESS_NAME => match counted(rest) {
            // An empty or non-UTF-8 name is read whole and refused below.
            Some((name, rest)) => (
                std::str::from_utf8(name).ok().filter(|n| !n.is_empty()).map(Host::Name),
                rest,
            ),
            None => return Progress::NeedMore,
        },
        _ => return refuse(Reply::AddressTypeNotSupported),
    };
    let Some((port, rest)) = rest.split_first_chunk::<2>() else {
        return Progress::NeedMore;
    };
    let port = u16::from_be_bytes(*port);
    if reserved != 0 {
        return refuse(Reply::GeneralFailure);
    }
    if command != COMMAND_CONNECT {
        return refuse(Reply::CommandNotSupported);
    }
    match host {
        Some(host) if port != 0 => Progress::Connect {
            host,
            port,
            used: buf.len() - rest.len(),
        },
        _ => refuse(Reply::GeneralFailure),
    }
}

fn refuse(reply: Reply) -> Progress<'static> {
    Progress::Refuse {
        answer: Refusal::Reply(reply),
    }
}

/// A length byte and that many bytes; `None` until all are there.
fn counted(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = buf.split_first()?;
    let len = usize::from(len);
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests;
