//! DNS questions to crackbox's DNS filter from one soak source, over UDP or
//! TCP, with the answer checked: an allowed name is steered to crackbox's
//! own address, a denied one is NXDOMAIN, an unregistered source REFUSED.
//! Over UDP a question unanswered within a third of the timeout is sent
//! again, twice at most, as resolvers do (a datagram may be lost); the
//! retries are counted.

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::str::FromStr;
use std::time::Duration;

/// What an answer must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// NOERROR with exactly this A record.
    Steered(Ipv4Addr),
    /// NXDOMAIN (a name the source may not reach).
    NxDomain,
    /// REFUSED (an unregistered source).
    Refused,
}

/// How the question travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One datagram each way.
    Udp,
    /// A TCP connection, length-prefixed messages.
    Tcp,
}

/// UDP sends of one question at most.
const UDP_ATTEMPTS: u32 = 3;

/// Asks `server` for the A record of `name` from `source` and checks the
/// answer; the number of UDP retries it took.
pub fn ask(
    server: SocketAddr,
    source: IpAddr,
    name: &str,
    transport: Transport,
    timeout: Duration,
    expect: Expect,
) -> Result<u32, String> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    let qname = Name::from_str(&format!("{name}.")).map_err(|e| format!("bad name {name}: {e}"))?;
    query.add_query(Query::query(qname, RecordType::A));
    let packet = query.to_vec().map_err(|e| format!("encoding a query: {e}"))?;
    let (answer, retries) = match transport {
        Transport::Udp => over_udp(server, source, &packet, timeout),
        Transport::Tcp => over_tcp(server, source, &packet, timeout).map(|answer| (answer, 0)),
    }
    .map_err(|e| format!("DNS {name} from {source} ({transport:?}): {e}"))?;
    let reply = Message::from_vec(&answer).map_err(|e| format!("DNS {name}: undecodable answer: {e}"))?;
    if reply.metadata.id != query.metadata.id {
        return Err(format!(
            "DNS {name}: answer id {} for query {}",
            reply.metadata.id, query.metadata.id
        ));
    }
    let code = reply.metadata.response_code;
    let addresses: Vec<Ipv4Addr> = reply
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    let ok = match expect {
        Expect::Steered(ip) => code == ResponseCode::NoError && addresses == [ip],
        Expect::NxDomain => code == ResponseCode::NXDomain,
        Expect::Refused => code == ResponseCode::Refused,
    };
    match ok {
        true => Ok(retries),
        false => Err(format!(
            "DNS {name} from {source} ({transport:?}): {code} {addresses:?}, expected {expect:?}"
        )),
    }
}

fn over_udp(server: SocketAddr, source: IpAddr, packet: &[u8], timeout: Duration) -> std::io::Result<(Vec<u8>, u32)> {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0))?;
    socket.set_read_timeout(Some(timeout / UDP_ATTEMPTS))?;
    socket.connect(server)?;
    let mut buf = vec![0u8; 4096];
    let mut attempt = 0;
    loop {
        socket.send(packet)?;
        match socket.recv(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok((buf, attempt));
            }
            Err(err) if attempt + 1 < UDP_ATTEMPTS && err.kind() == std::io::ErrorKind::WouldBlock => attempt += 1,
            Err(err) => return Err(err),
        }
    }
}

fn over_tcp(server: SocketAddr, source: IpAddr, packet: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let mut stream = crate::dial::connect_from(server, Some(source), timeout)?;
    let len = u16::try_from(packet.len()).map_err(std::io::Error::other)?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(packet);
    stream.write_all(&framed)?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf)?;
    Ok(buf)
}
