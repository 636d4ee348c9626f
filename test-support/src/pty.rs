//! A real pseudo-terminal for tests of what a command does on a terminal
//! (`crackbox run --ask`'s prompt): the command gets the terminal as its
//! controlling terminal (`/dev/tty`) and as its stdout and stderr, the test
//! reads everything written to it and types on it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A command running on a terminal of its own.
pub struct Pty {
    master: File,
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Pty {
    /// Starts `command` in a session of its own whose controlling terminal
    /// is a new pseudo-terminal, also its stdout and stderr (its stdin is
    /// what `command` says).
    pub fn spawn(command: &mut Command) -> Pty {
        let (mut master, mut slave) = (-1, -1);
        // SAFETY: openpty writes two descriptors; no name, settings or size.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here.
        let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let out = slave.try_clone().unwrap();
        // SAFETY: setsid and ioctl only; stdout is the terminal by then.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(libc::STDOUT_FILENO, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("a command on a pseudo-terminal");
        let output = Arc::new(Mutex::new(String::new()));
        let (mut reader, seen) = (master.try_clone().unwrap(), Arc::clone(&output));
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // The read fails (EIO) once no process holds the terminal.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Pty { master, child, output }
    }

    /// Everything written to the terminal so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits until the terminal shows `text` (at most `limit`); whether it did.
    pub fn wait_for(&self, text: &str, limit: Duration) -> bool {
        crate::net::wait_until(limit, || self.output().contains(text))
    }

    /// Types `keys` on the terminal.
    pub fn type_keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }

    /// Whether the terminal reads lines (canonical mode) and echoes.
    pub fn canonical_with_echo(&self) -> bool {
        // SAFETY: termios is plain data; tcgetattr fills it or fails.
        let mut termios: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and pointer.
        assert_eq!(unsafe { libc::tcgetattr(self.master.as_raw_fd(), &mut termios) }, 0);
        termios.c_lflag & libc::ICANON != 0 && termios.c_lflag & libc::ECHO != 0
    }

    /// Waits for the command to exit (at most `limit`, then it is killed).
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let mut status = None;
        crate::net::wait_until(limit, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap_or_else(|| {
            let _ = self.child.kill();
            panic!("still running after {limit:?}:\n{}", self.output())
        })
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
