//! Who may be the engine's control plane: the process listening on the
//! control socket must run as the engine's own user or as root
//! (docs/daemon.md, "Processes"). Anyone else who got a socket to that path
//! (a directory others can write to) would otherwise hand the engine the
//! registry it enforces. `SO_PEERCRED` on the connected stream gives the
//! credentials the listener had when it called listen(2).

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::os::unix::net::UnixStream;

/// Why the engine refuses the control socket's listener.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Untrusted {
    /// The listener runs as another user.
    #[error("the control socket is listened on by uid {uid} (pid {pid}), neither this engine's uid {own} nor root")]
    OtherUser {
        /// The listener's uid.
        uid: u32,
        /// The listener's pid.
        pid: i32,
        /// The engine's effective uid.
        own: u32,
    },
    /// The listener's credentials could not be read.
    #[error("cannot read the credentials of the control socket's listener: {0}")]
    Unknown(nix::Error),
}

impl Untrusted {
    /// The listener's uid, when known.
    pub(crate) fn uid(&self) -> Option<u32> {
        match self {
            Untrusted::OtherUser { uid, .. } => Some(*uid),
            Untrusted::Unknown(_) => None,
        }
    }
}

/// Ok when the process listening at the other end of `stream` runs as this
/// engine's effective uid or as root.
pub(crate) fn check(stream: &UnixStream) -> Result<(), Untrusted> {
    let credentials = getsockopt(stream, PeerCredentials).map_err(Untrusted::Unknown)?;
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

/// A listener's uid the engine (running as `own`) accepts.
fn trusted(peer: u32, own: u32) -> bool {
    peer == own || peer == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_engines_own_user_and_root_are_trusted() {
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
