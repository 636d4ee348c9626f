//! The user's terminal and standard streams on the crackbox side of a jail:
//! raw mode while a TTY is attached (always restored), single keys without
//! echo for `run --ask`'s prompt (always restored), the terminal size, and
//! a reader thread that turns stdin into chunks.
//!
//! stdin is read on its own OS thread, never on the runtime: a blocking read
//! of a stdin that never closes must not keep crackbox from exiting.

use std::io::Read;
use tokio::sync::mpsc;

/// Whether crackbox's stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
}

/// The terminal's size as (rows, columns), if stdin is a terminal.
pub fn terminal_size() -> Option<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we pass.
    let rc = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_row > 0 && size.ws_col > 0).then_some((size.ws_row, size.ws_col))
}

/// The terminal in raw mode; the previous mode comes back on drop.
pub struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Puts the terminal on stdin into raw mode.
    pub fn enable() -> std::io::Result<Self> {
        // SAFETY: termios is plain data; tcgetattr fills it or fails.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and pointer.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw edits the struct in place.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: valid descriptor and pointer.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the attributes read in `enable`.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.saved) };
    }
}

/// A terminal that delivers each key as it is pressed, without echo (the
/// prompt prints what was answered); output, signals and everything else
/// as before. The previous mode comes back on drop.
pub struct SingleKeys {
    tty: std::fs::File,
    saved: libc::termios,
}

impl SingleKeys {
    /// Switches the terminal `tty` (a handle of its own is kept to restore it).
    pub fn enable(tty: &std::fs::File) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let tty = tty.try_clone()?;
        // SAFETY: termios is plain data; tcgetattr fills it or fails.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and pointer.
        if unsafe { libc::tcgetattr(tty.as_raw_fd(), &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut keys = saved;
        keys.c_lflag &= !(libc::ICANON | libc::ECHO);
        keys.c_cc[libc::VMIN] = 1;
        keys.c_cc[libc::VTIME] = 0;
        // SAFETY: valid descriptor and pointer.
        if unsafe { libc::tcsetattr(tty.as_raw_fd(), libc::TCSANOW, &keys) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SingleKeys { tty, saved })
    }
}

impl Drop for SingleKeys {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: restores the attributes read in `enable`.
        unsafe { libc::tcsetattr(self.tty.as_raw_fd(), libc::TCSANOW, &self.saved) };
    }
}

/// Chunks of crackbox's stdin; the channel closes at end of input (or on a
/// read error, e.g. a closed descriptor, which counts as end of input).
pub fn stdin_chunks() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    let spawned = std::thread::Builder::new()
        .name("crackbox-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        });
    if let Err(err) = spawned {
        tracing::warn!("cannot read stdin: {err}");
    }
    rx
}
