//! Asking the upstream resolver one question, over UDP or TCP, with a
//! deadline; only a response that matches the question is accepted.

use hickory_proto::op::{Message, MessageType};
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
        let (query, id) = with_fresh_id(request)?;
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
        let (query, id) = with_fresh_id(request)?;
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

/// The request re-encoded with an id the client did not choose, so a
/// client cannot predict (or collide with) the id crackbox uses upstream.
fn with_fresh_id(request: &Message) -> Result<(Vec<u8>, u16), UpstreamError> {
    let mut upstream = request.clone();
    // `Message::query` draws its id from hickory's random source.
    let id = Message::query().metadata.id;
    upstream.metadata.id = id;
    Ok((upstream.to_vec()?, id))
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
