//! Who may be the engine: the process connecting on the control socket must
//! run as control's own user or as root (docs/daemon.md, "Processes"), as
//! the engine holds control to the same rule. The socket's mode (0600)
//! already keeps everyone else out, except while it is being created in a
//! directory others can reach, or after someone widened it; a connection
//! from anyone else would be handed the whole registry, could report
//! requests for an operator to answer, and would replace the real engine.

use std::io;
use tokio::net::UnixStream;

/// Why control refuses an engine connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum Untrusted {
    /// The connecting process runs as another user.
    #[error("an engine connection from uid {uid} (pid {pid:?}), neither control's uid {own} nor root")]
    OtherUser {
        /// The connecting process's uid.
        uid: u32,
        /// Its pid, when known.
        pid: Option<i32>,
        /// Control's effective uid.
        own: u32,
    },
    /// The connecting process's credentials could not be read.
    #[error("cannot read the credentials of an engine connection: {0}")]
    Unknown(io::Error),
}

/// Ok when the process at the other end of `stream` runs as control's
/// effective uid or as root.
pub(super) fn check(stream: &UnixStream) -> Result<(), Untrusted> {
    let credentials = stream.peer_cred().map_err(Untrusted::Unknown)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = unsafe { libc::geteuid() };
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

/// An engine's uid control (running as `own`) accepts.
fn trusted(peer: u32, own: u32) -> bool {
    peer == own || peer == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_controls_own_user_and_root_are_trusted() {
        assert!(trusted(1000, 1000));
        assert!(trusted(0, 1000));
        assert!(trusted(0, 0));
        assert!(!trusted(65534, 1000));
        assert!(!trusted(1000, 0));
    }

    #[tokio::test]
    async fn a_socket_of_this_process_is_trusted() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        check(&ours).unwrap();
    }
}
