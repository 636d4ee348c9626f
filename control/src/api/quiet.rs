//! Admin connections that go quiet, or trickle, are closed (docs/admin-api.md,
//! "Requests and errors"): one that neither sends nor receives a byte for
//! [`QUIET_LIMIT`] gets a read error, and the HTTP server drops it; so does
//! one whose request has not come whole [`REQUEST_LIMIT`] after its first
//! byte (bytes read and nothing answered since: a byte every 29 s kept the
//! quiet limit from ever running out). Without these a half-sent request
//! head or an idle keep-alive connection stayed open for good, and enough
//! of them used up the control process's descriptors. An events stream is
//! never quiet that long: its keep-alive comment goes out every 15 s.

use axum::serve::Listener;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// How long a connection may neither send nor receive a byte.
pub const QUIET_LIMIT: Duration = Duration::from_secs(30);

/// How long a request may take to arrive, from its first byte until
/// something is answered (admin requests are small; on loopback they come
/// in well under a millisecond).
pub const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// The admin listener, handing out connections that close when quiet.
pub struct QuietListener(pub TcpListener);

impl Listener for QuietListener {
    type Io = Quiet;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Quiet, Self::Addr) {
        let (stream, addr) = Listener::accept(&mut self.0).await;
        (Quiet::new(stream), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection with a deadline that every byte moved pushes back, and one
/// for the request being read.
pub struct Quiet {
    stream: TcpStream,
    deadline: Pin<Box<Sleep>>,
    /// Set by the first byte read since the last one written: when the
    /// request arriving now must have been answered by.
    request: Option<Pin<Box<Sleep>>>,
}

impl Quiet {
    fn new(stream: TcpStream) -> Self {
        Quiet {
            stream,
            deadline: Box::pin(tokio::time::sleep(QUIET_LIMIT)),
            request: None,
        }
    }

    /// The connection itself.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }

    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + QUIET_LIMIT);
    }

    fn read_some(&mut self) {
        self.moved();
        if self.request.is_none() {
            self.request = Some(Box::pin(tokio::time::sleep(REQUEST_LIMIT)));
        }
    }

    fn wrote_some(&mut self) {
        self.moved();
        self.request = None;
    }

    /// Ready with the error that closes the connection once a deadline
    /// has passed.
    fn overdue(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if let Some(request) = self.request.as_mut() {
            if request.as_mut().poll(cx).is_ready() {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "a request did not come whole within 30 s of its first byte",
                ));
            }
        }
        ready!(self.deadline.as_mut().poll(cx));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "nothing sent or received for 30 s",
        ))
    }
}

impl AsyncRead for Quiet {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.read_some();
                Poll::Ready(Ok(()))
            }
            Poll::Ready(done) => Poll::Ready(done),
            Poll::Pending => self.overdue(cx).map(Err),
        }
    }
}

impl AsyncWrite for Quiet {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.stream).poll_write(cx, buf));
        if matches!(written, Ok(n) if n > 0) {
            self.wrote_some();
        }
        Poll::Ready(written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.stream).poll_write_vectored(cx, bufs));
        if matches!(written, Ok(n) if n > 0) {
            self.wrote_some();
        }
        Poll::Ready(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
