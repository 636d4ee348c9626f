//! What bytes in flight are held in: splice pipes and copy buffers from
//! per-thread pools, taken only while bytes move and given back the moment
//! a direction waits for its source again (so an idle tunnel holds no pipe),
//! and the non-blocking `splice(2)` calls that fill and drain a pipe.

use crate::plane::services::conn::{nix_result, Conn};
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Pipe capacity requested for pooled pipes (long transfers move 1 MiB a call).
pub(crate) const PIPE_SIZE: usize = 1 << 20;
/// Pipes kept for reuse per thread; beyond this they are closed.
const POOLED_PIPES: usize = 64;
/// Buffer size for the copy fallback.
pub(crate) const COPY_BUF: usize = 16 * 1024;
/// Buffers kept for reuse per thread.
const POOLED_BUFFERS: usize = 64;

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
    buffers: RefCell<Vec<Box<[u8]>>>,
}

impl Pools {
    /// A pipe, pooled or new (`None` when none can be made: fd exhaustion).
    pub(crate) fn take_pipe(&self) -> Option<Pipe> {
        let pooled = self.pipes.borrow_mut().pop();
        pooled.or_else(|| Pipe::new().ok())
    }

    /// Returns an empty pipe.
    pub(crate) fn give_pipe(&self, pipe: Pipe) {
        let mut pipes = self.pipes.borrow_mut();
        if pipes.len() < POOLED_PIPES {
            pipes.push(pipe);
        }
    }

    /// A copy buffer of [`COPY_BUF`] bytes; give it back when done.
    pub(crate) fn take_buffer(&self) -> Box<[u8]> {
        let pooled = self.buffers.borrow_mut().pop();
        pooled.unwrap_or_else(|| vec![0u8; COPY_BUF].into_boxed_slice())
    }

    /// Returns a buffer taken with [`Pools::take_buffer`].
    pub(crate) fn give_buffer(&self, buffer: Box<[u8]>) {
        let mut buffers = self.buffers.borrow_mut();
        if buffers.len() < POOLED_BUFFERS {
            buffers.push(buffer);
        }
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE;
    nix_result(unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), len, flags) })
}
