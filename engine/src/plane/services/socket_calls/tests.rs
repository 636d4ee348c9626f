use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};

/// A listener on loopback that accepts without blocking.
fn listener() -> TcpListener {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

/// A client connected to `listener` and the socket `accept4` took for it.
fn connected(listener: &TcpListener) -> (TcpStream, Socket) {
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, peer) = accept4(listener.as_raw_fd(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC).unwrap();
    assert_eq!(
        peer.as_socket(),
        Some(client.local_addr().unwrap()),
        "the peer is the client"
    );
    (client, accepted)
}

/// Waits (at most 5 s) until `fd` has bytes to read.
fn wait_readable(fd: RawFd) {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(unsafe { libc::poll(&mut poll, 1, 5_000) }, 1, "readable within 5 s");
}

/// The error number of a call that returned `result`, if it failed.
fn errno(result: isize) -> Option<i32> {
    (result < 0).then(|| io::Error::last_os_error().raw_os_error().unwrap())
}

#[test]
fn accept4_takes_the_queued_connection_with_its_flags_and_waits_on_an_empty_queue() {
    let listener = listener();
    let empty = accept4(listener.as_raw_fd(), libc::SOCK_NONBLOCK).unwrap_err();
    assert_eq!(empty.kind(), io::ErrorKind::WouldBlock, "{empty}");

    let (_client, accepted) = connected(&listener);
    let status = unsafe { libc::fcntl(accepted.as_raw_fd(), libc::F_GETFL) };
    assert_ne!(status & libc::O_NONBLOCK, 0, "SOCK_NONBLOCK was applied");
    let fd_flags = unsafe { libc::fcntl(accepted.as_raw_fd(), libc::F_GETFD) };
    assert_ne!(fd_flags & libc::FD_CLOEXEC, 0, "SOCK_CLOEXEC was applied");
}

#[test]
fn recv_and_send_move_bytes_and_an_empty_socket_says_so() {
    let listener = listener();
    let (mut client, accepted) = connected(&listener);
    let fd = accepted.as_raw_fd();
    let mut buf = [0u8; 16];

    let nothing = unsafe { recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    assert_eq!(errno(nothing), Some(libc::EAGAIN), "nothing sent yet");

    client.write_all(b"hello").unwrap();
    wait_readable(fd);
    let got = unsafe { recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    assert_eq!(&buf[..usize::try_from(got).unwrap()], b"hello");

    let sent = unsafe { send(fd, b"world".as_ptr().cast(), 5, libc::MSG_NOSIGNAL) };
    assert_eq!(sent, 5);
    let mut answer = [0u8; 5];
    client.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"world");
}

#[test]
fn splice_moves_bytes_from_one_socket_through_a_pipe_to_another() {
    let listener = listener();
    let (mut from_client, from) = connected(&listener);
    let (mut to_client, to) = connected(&listener);
    let mut ends = [0; 2];
    assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let [pipe_out, pipe_in] = ends.map(|end| unsafe { OwnedFd::from_raw_fd(end) });
    let flags = libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE;

    assert_eq!(
        errno(splice(from.as_raw_fd(), pipe_in.as_raw_fd(), 64, flags)),
        Some(libc::EAGAIN),
        "nothing to move yet"
    );
    from_client.write_all(b"spliced").unwrap();
    wait_readable(from.as_raw_fd());
    assert_eq!(splice(from.as_raw_fd(), pipe_in.as_raw_fd(), 64, flags), 7);
    assert_eq!(splice(pipe_out.as_raw_fd(), to.as_raw_fd(), 64, flags), 7);
    let mut out = [0u8; 7];
    to_client.read_exact(&mut out).unwrap();
    assert_eq!(&out, b"spliced");
}

#[test]
fn close_ends_the_connection_and_connect_reaches_a_listener_or_is_refused() {
    let listener = listener();
    let dialled = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    connect(dialled.as_raw_fd(), &listener.local_addr().unwrap().into()).unwrap();
    let (accepted, peer) = accept4(listener.as_raw_fd(), 0).unwrap();
    assert_eq!(peer.as_socket(), dialled.local_addr().unwrap().as_socket());

    // SAFETY: the accepted socket gives its fd up.
    unsafe { close(accepted.into_raw_fd()) };
    let mut dialled = TcpStream::from(dialled);
    dialled
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(dialled.read_to_end(&mut rest).unwrap(), 0, "the peer reads EOF");

    let port = listener.local_addr().unwrap();
    drop(listener);
    let refused = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let err = connect(refused.as_raw_fd(), &port.into()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}
