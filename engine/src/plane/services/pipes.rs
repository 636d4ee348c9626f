//! What bytes in flight are held in: splice pipes and copy buffers from
//! per-thread pools, taken only while bytes move and given back the moment
//! a direction waits for its source again (so an idle tunnel holds no pipe),
//! and the non-blocking `splice(2)` calls that fill and drain a pipe; and
//! byte vectors ([`Pooled`]) for what is read and written whole (request
//! and response heads, replies), so a request allocates none of them once
//! its thread's pool is warm.

use crate::plane::services::conn::{nix_result, Conn};
use crate::plane::services::socket_calls;
use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Pipe capacity requested for pooled pipes (long transfers move 1 MiB a call).
pub(crate) const PIPE_SIZE: usize = 1 << 20;
/// Pipes kept for reuse per thread; beyond this they are closed.
const POOLED_PIPES: usize = 64;
/// Descriptors the cap counts per connection: its two sockets. Its splice
/// pipes are held only while bytes are in flight; counting them for every
/// connection would cut the idle tunnels a host holds to a third, and a
/// tunnel that finds no pipe to make copies its bytes instead
/// (docs/operations.md, "Descriptors").
pub(crate) const FDS_PER_CONNECTION: u64 = 2;
/// Descriptors one thread's pipe pool may keep open between uses.
pub(crate) const POOLED_PIPE_FDS: u64 = 2 * POOLED_PIPES as u64;
/// Size of a copy buffer: what a tunnel direction reads with `recv(2)`
/// before it counts as bulk and splices (see `duplex`).
pub(crate) const COPY_BUF: usize = 16 * 1024;
/// A copy buffer.
pub(crate) type CopyBuffer = [u8; COPY_BUF];
/// Buffers kept for reuse per thread.
const POOLED_BUFFERS: usize = 64;
/// At most one warning per thread that no pipe could be made, per this interval.
const WARN_EVERY: Duration = Duration::from_secs(5);
/// Byte vectors kept for reuse per thread.
const POOLED_VECS: usize = 64;
/// A byte vector larger than this (a rare big head) is freed, not kept.
const POOLED_VEC_MAX: usize = 32 * 1024;

/// A pipe pair; empty whenever it is in the pool.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: pipe2 just returned these two fds and nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Larger pipes mean fewer syscalls on long transfers; the default is fine otherwise.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE as libc::c_int) };
        Ok(Pipe { read, write })
    }

    /// Moves up to `len` bytes from `src` into the pipe without waiting.
    pub(crate) fn fill(&self, src: &Conn, len: usize) -> io::Result<usize> {
        splice(src.fd(), self.write.as_raw_fd(), len)
    }

    /// Moves what it can of the `left` bytes in the pipe into `dst` without
    /// waiting; true once all are out, false when `dst` is full.
    pub(crate) fn drain_now(&self, dst: &Conn, left: &mut usize) -> io::Result<bool> {
        while *left > 0 {
            match splice(self.read.as_raw_fd(), dst.fd(), *left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => *left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// Per-thread pools of pipes and copy buffers.
#[derive(Default)]
pub(crate) struct Pools {
    pipes: RefCell<Vec<Pipe>>,
    buffers: RefCell<Vec<Box<CopyBuffer>>>,
    vecs: RefCell<Vec<Vec<u8>>>,
    /// When this thread last warned that no pipe could be made.
    warned: Cell<Option<Instant>>,
}

impl Pools {
    /// A pipe, pooled or new (`None` when none can be made: fd exhaustion,
    /// warned of at most once per [`WARN_EVERY`] per thread).
    pub(crate) fn take_pipe(&self) -> Option<Pipe> {
        let pooled = self.pipes.borrow_mut().pop();
        pooled.or_else(|| match Pipe::new() {
            Ok(pipe) => Some(pipe),
            Err(err) => {
                if self.warned.get().is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    self.warned.set(Some(Instant::now()));
                    let exhausted = matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                    tracing::warn!(error = %err, exhausted, "could not make a splice pipe; bytes are copied instead");
                }
                None
            }
        })
    }

    /// Returns an empty pipe.
    pub(crate) fn give_pipe(&self, pipe: Pipe) {
        let mut pipes = self.pipes.borrow_mut();
        if pipes.len() < POOLED_PIPES {
            pipes.push(pipe);
        }
    }

    /// A copy buffer of [`COPY_BUF`] bytes; give it back when done.
    pub(crate) fn take_buffer(&self) -> Box<CopyBuffer> {
        let pooled = self.buffers.borrow_mut().pop();
        pooled.unwrap_or_else(|| {
            // Made on the heap: a 16 KiB array is not built on the stack first.
            let buffer = vec![0u8; COPY_BUF].into_boxed_slice();
            buffer.try_into().expect("COPY_BUF bytes")
        })
    }

    /// Returns a buffer taken with [`Pools::take_buffer`].
    pub(crate) fn give_buffer(&self, buffer: Box<CopyBuffer>) {
        let mut buffers = self.buffers.borrow_mut();
        if buffers.len() < POOLED_BUFFERS {
            buffers.push(buffer);
        }
    }

    /// An empty byte vector, with the capacity an earlier user left it.
    fn take_vec(&self) -> Vec<u8> {
        self.vecs.borrow_mut().pop().unwrap_or_default()
    }

    /// Keeps `vec` (emptied) for the next user, unless it holds nothing or
    /// too much.
    fn give_vec(&self, mut vec: Vec<u8>) {
        if vec.capacity() == 0 || vec.capacity() > POOLED_VEC_MAX {
            return;
        }
        let mut vecs = self.vecs.borrow_mut();
        if vecs.len() < POOLED_VECS {
            vec.clear();
            vecs.push(vec);
        }
    }
}

/// A byte vector from the thread's pool, given back when dropped or
/// [`Pooled::release`]d.
pub(crate) struct Pooled<'p> {
    vec: Vec<u8>,
    pools: &'p Pools,
}

impl<'p> Pooled<'p> {
    /// A vector from `pools` (empty, with an earlier user's capacity).
    pub(crate) fn new(pools: &'p Pools) -> Self {
        Pooled {
            vec: pools.take_vec(),
            pools,
        }
    }

    /// `vec`, given back to `pools` when done with (a vector [`Pooled::take`]
    /// took out, handed on). Empty (`Vec::new()`), it takes one from `pools`
    /// only once something is written to it ([`Pooled::fill`]).
    pub(crate) fn holding(pools: &'p Pools, vec: Vec<u8>) -> Self {
        Pooled { vec, pools }
    }

    /// The vector, taken from the pool first if it has no room yet.
    pub(crate) fn fill(&mut self) -> &mut Vec<u8> {
        if self.vec.capacity() == 0 {
            self.vec = self.pools.take_vec();
        }
        &mut self.vec
    }

    /// Gives the vector back now, keeping nothing (what it held is dropped).
    pub(crate) fn release(&mut self) {
        self.pools.give_vec(std::mem::take(&mut self.vec));
    }

    /// The bytes it holds, as a vector of their own; it keeps nothing.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.vec)
    }
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        &self.vec
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.vec
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    nix_result(socket_calls::splice(
        from,
        to,
        len,
        libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
    ))
}
