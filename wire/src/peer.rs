//! Who may be at the other end of the control socket: a process of this
//! process's own user or of root (docs/daemon.md, "Processes"). The engine
//! holds the control plane it connects to to it, and control every engine
//! that connects. `SO_PEERCRED` gives the credentials the peer had when it
//! called connect(2) or listen(2); the check runs before a byte is
//! exchanged.

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::os::fd::AsFd;

/// Why the other end of the control socket is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// It runs as another user.
    #[error(
        "the other end of the control socket runs as uid {uid} (pid {pid}), neither this process's uid {own} nor root"
    )]
    OtherUser {
        /// Its uid.
        uid: u32,
        /// Its pid.
        pid: i32,
        /// This process's effective uid.
        own: u32,
    },
    /// Its credentials could not be read.
    #[error("cannot read the credentials of the other end of the control socket: {0}")]
    Unknown(nix::Error),
}

impl Untrusted {
    /// The other end's uid, when known.
    pub fn uid(&self) -> Option<u32> {
        match self {
            Untrusted::OtherUser { uid, .. } => Some(*uid),
            Untrusted::Unknown(_) => None,
        }
    }
}

/// Ok when the process at the other end of the connected Unix `socket`
/// runs as this process's effective uid or as root.
pub fn check(socket: &impl AsFd) -> Result<(), Untrusted> {
    let credentials = getsockopt(socket, PeerCredentials).map_err(Untrusted::Unknown)?;
    let own = nix::unistd::geteuid().as_raw();
    let uid = credentials.uid();
    if trusted(uid, own) {
        Ok(())
    } else {
        Err(Untrusted::OtherUser {
            uid,
            pid: credentials.pid(),
            own,
        })
    }
}

/// A peer's uid a process running as `own` trusts.
fn trusted(peer: u32, own: u32) -> bool {
    peer == own || peer == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn only_the_own_user_and_root_are_trusted() {
        assert!(trusted(1000, 1000));
        assert!(trusted(0, 1000));
        assert!(trusted(0, 0));
        assert!(!trusted(65534, 1000));
        assert!(!trusted(1000, 0));
    }

    #[test]
    fn a_socket_of_this_process_is_trusted() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        check(&ours).unwrap();
    }
}
