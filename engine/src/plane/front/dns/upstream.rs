//! Asking the upstream resolver one question, over UDP or TCP, with a
//! deadline; only a response that matches the question is accepted.

use hickory_proto::op::{Edns, Message, MessageType};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Largest DNS message (the TCP length prefix is 16 bits).
pub(crate) const MAX_MESSAGE_LEN: usize = u16::MAX as usize;

/// Why the upstream gave no usable answer; every case becomes SERVFAIL.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// Socket error, refused port or timeout.
    #[error("upstream i/o: {0}")]
    Io(#[from] io::Error),
    /// The query could not be encoded.
    #[error("encoding the query: {0}")]
    Encode(#[from] hickory_proto::ProtoError),
    /// The reply over TCP did not parse or did not match the question.
    #[error("upstream sent a malformed or unrelated reply")]
    Mismatch,
}

/// The configured upstream resolver.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) timeout: Duration,
}

impl Upstream {
    /// Asks over UDP from a fresh socket (random port) with a fresh query id;
    /// stray or spoofed datagrams are skipped until the deadline.
    pub(crate) fn exchange_udp(&self, request: &Message) -> Result<Message, UpstreamError> {
        let (query, id) = fresh_query(request)?;
        let local: SocketAddr = match self.addr {
            SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
            SocketAddr::V6(_) => ([0u16; 8], 0).into(),
        };
        let socket = UdpSocket::bind(local)?;
        socket.connect(self.addr)?;
        socket.send(&query)?;
        let deadline = Instant::now() + self.timeout;
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::from(io::ErrorKind::TimedOut).into());
            }
            socket.set_read_timeout(Some(left))?;
            let len = socket.recv(&mut buf)?;
            if let Some(response) = matching(&buf[..len], id, request) {
                return Ok(response);
            }
        }
    }

    /// Asks over one TCP connection (length-prefixed, RFC 1035 4.2.2).
    pub(crate) fn exchange_tcp(&self, request: &Message) -> Result<Message, UpstreamError> {
        let (query, id) = fresh_query(request)?;
        let deadline = Instant::now() + self.timeout;
        let mut stream = TcpStream::connect_timeout(&self.addr, self.timeout)?;
        stream.set_write_timeout(Some(self.timeout))?;
        write_framed(&mut stream, &query)?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        stream.set_read_timeout(Some(left))?;
        let reply = read_framed(&mut stream)?.ok_or(UpstreamError::Mismatch)?;
        matching(&reply, id, request).ok_or(UpstreamError::Mismatch)
    }
}

/// The query crackbox asks upstream, encoded, and its id: built afresh
/// from the request (docs/daemon.md, "DNS filter"), so nothing the client
/// put into its message beyond what a resolver needs leaves the sandbox.
/// It carries an id the client did not choose (a client cannot predict or
/// collide with it), the question, the RD, CD and AD bits, and, when the
/// client sent an OPT record, one of EDNS version 0 with its UDP payload
/// size (held to 512-4096) and DO bit but none of its options or other flag
/// bits. The client's answer, authority and additional records are never
/// sent.
fn fresh_query(request: &Message) -> Result<(Vec<u8>, u16), UpstreamError> {
    let upstream = upstream_query(request);
    Ok((upstream.to_vec()?, upstream.metadata.id))
}

/// The UDP payload sizes an upstream query may announce: RFC 6891's floor,
/// and a ceiling past any real answer, so the client's own number (16 bits
/// it chose) does not reach the upstream as it wrote it.
const MIN_PAYLOAD: u16 = 512;
const MAX_PAYLOAD: u16 = 4096;

/// [`fresh_query`]'s message, before encoding.
fn upstream_query(request: &Message) -> Message {
    // `Message::query` draws its id from hickory's random source.
    let mut query = Message::query();
    query.metadata.op_code = request.metadata.op_code;
    query.metadata.recursion_desired = request.metadata.recursion_desired;
    query.metadata.checking_disabled = request.metadata.checking_disabled;
    query.metadata.authentic_data = request.metadata.authentic_data;
    query.add_queries(request.queries.iter().cloned());
    if let Some(asked) = &request.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(asked.max_payload().clamp(MIN_PAYLOAD, MAX_PAYLOAD))
            .set_version(0)
            .set_dnssec_ok(asked.flags().dnssec_ok);
        query.set_edns(edns);
    }
    query
}

/// Parses `bytes` and accepts it only as the response to our question.
fn matching(bytes: &[u8], id: u16, request: &Message) -> Option<Message> {
    let response = Message::from_vec(bytes).ok()?;
    (response.metadata.id == id
        && response.metadata.message_type == MessageType::Response
        && response.queries == request.queries)
        .then_some(response)
}

/// Writes one length-prefixed DNS message.
pub(crate) fn write_framed(stream: &mut impl Write, message: &[u8]) -> io::Result<()> {
    let len = u16::try_from(message.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed)
}

/// Reads one length-prefixed DNS message; `None` on a clean EOF between
/// messages.
pub(crate) fn read_framed(stream: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match stream.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message)?;
    Ok(Some(message))
}

#[cfg(test)]
mod tests;
