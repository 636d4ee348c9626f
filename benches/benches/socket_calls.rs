//! The way into the kernel of the engine's data-path syscalls: glibc's
//! named wrappers against the engine's `socket_calls` (glibc's
//! `syscall(2)`), in a process with a second thread, as the engine always
//! is. There glibc's wrapper of a cancellation point (`recv`, `send`,
//! `accept4`, `close`, ...) switches the thread's cancellation type before
//! and after the call. Both sides make the same call that fails at once in
//! the kernel: a `recv` on a connected socket with nothing to read
//! (`EAGAIN`) and a `close` of no fd (`EBADF`). So what differs is the way
//! in, not the kernel's work (docs/architecture.md, "Data path of a
//! connection").
//!
//! A third group measures what the accept loop's wait for readiness rests
//! on (engine/src/plane/runtime/ready_accept.rs): an `accept4` of a
//! listener with nothing queued, which the kernel fails only after making
//! and freeing a socket, against a zero-timeout `poll` of that listener.

use crackbox_engine::socket_calls;
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

fn ways_in(c: &mut Criterion) {
    // A second thread for the whole run: glibc's wrappers take their
    // multi-threaded path from its start on.
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let second = std::thread::spawn(move || stopped.recv());
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let _client = TcpStream::connect(listener.local_addr().expect("address")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    let fd = server.as_raw_fd();
    let mut buf = [0u8; 64];

    let mut group = c.benchmark_group("recv of an empty socket");
    group.bench_function("glibc recv", |b| {
        // SAFETY: `buf` is valid for writes of its length.
        b.iter(|| unsafe { libc::recv(black_box(fd), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) })
    });
    group.bench_function("socket_calls::recv", |b| {
        // SAFETY: `buf` is valid for writes of its length.
        b.iter(|| unsafe { socket_calls::recv(black_box(fd), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) })
    });
    group.finish();

    let mut group = c.benchmark_group("close of no fd");
    // SAFETY: -1 names no file: the calls fail with EBADF and close nothing.
    group.bench_function("glibc close", |b| b.iter(|| unsafe { libc::close(black_box(-1)) }));
    group.bench_function("socket_calls::close", |b| {
        // SAFETY: as above.
        b.iter(|| unsafe { socket_calls::close(black_box(-1)) })
    });
    group.finish();

    let idle = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    idle.set_nonblocking(true).expect("non-blocking listener");
    let idle_fd = idle.as_raw_fd();
    let mut group = c.benchmark_group("a listener with nothing queued");
    group.bench_function("socket_calls::accept4", |b| {
        b.iter(|| socket_calls::accept4(black_box(idle_fd), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC).is_err())
    });
    group.bench_function("poll, zero timeout", |b| {
        let mut entry = libc::pollfd {
            fd: idle_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid entry, no wait.
        b.iter(|| unsafe { libc::poll(black_box(&mut entry), 1, 0) })
    });
    group.finish();

    drop(stop);
    let _ = second.join();
}

criterion_group!(benches, ways_in);
criterion_main!(benches);
