//! What the workload's child process does between fork and exec to enter
//! the jail: join the namespace, see the jail's own resolv.conf and hosts
//! when steered, and give up what would let it leave (the sudo caller's ids,
//! or root without the capabilities to rewire or re-enter namespaces), and
//! die with `run` (`tether`).
//! Only async-signal-safe system calls here.

use super::etc::BindMounts;
use crate::error::RunError;

/// Capabilities a root workload loses: CAP_SYS_ADMIN (21), CAP_NET_ADMIN
/// (12), CAP_NET_RAW (13), CAP_SYS_PTRACE (19), CAP_SYS_MODULE (16).
const DROPPED_CAPS: [libc::c_int; 5] = [21, 12, 13, 19, 16];

/// Joins the namespace `ns_fd`, drops privileges and dies with `parent`
/// (see the module doc).
pub fn enter_jail(
    ns_fd: libc::c_int,
    mounts: Option<&BindMounts>,
    ids: Option<(libc::uid_t, libc::gid_t)>,
    parent: libc::pid_t,
) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls on values owned by this process.
    unsafe {
        check(libc::setns(ns_fd, libc::CLONE_NEWNET))?;
        if let Some(mounts) = mounts {
            mounts.enter()?;
        }
        match ids {
            Some((uid, gid)) => {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(gid))?;
                check(libc::setuid(uid))?;
            }
            None => {
                for cap in DROPPED_CAPS {
                    check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
                }
            }
        }
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
    }
    // After the ids changed, which clears the parent-death signal.
    super::tether::die_with(parent)
}

/// The caller's uid and gid when crackbox runs under sudo (as `SUDO_UID`
/// and `SUDO_GID` in `env`), unless that caller is root; `None` when
/// neither is set. One set without the other, or one that is not a number,
/// is an error: running the command as root instead would be a silent
/// escalation.
pub fn sudo_caller(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<(libc::uid_t, libc::gid_t)>, RunError> {
    let id = |name: &str| -> Result<Option<u32>, RunError> {
        match env(name) {
            None => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|_| RunError::SudoCaller(format!("{name}={text:?} is not a numeric id"))),
        }
    };
    match (id("SUDO_UID")?, id("SUDO_GID")?) {
        (None, None) => Ok(None),
        (Some(uid), Some(gid)) => Ok((uid != 0).then_some((uid, gid))),
        (Some(_), None) => Err(RunError::SudoCaller("SUDO_UID is set without SUDO_GID".into())),
        (None, Some(_)) => Err(RunError::SudoCaller("SUDO_GID is set without SUDO_UID".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sudo_caller_is_taken_unless_root_and_refused_when_unreadable() {
        /// Variables, then the ids taken (`Err`: the start of the refusal).
        type Case<'a> = (&'a [(&'a str, &'a str)], Result<Option<(u32, u32)>, &'a str>);
        let cases: &[Case] = &[
            (&[], Ok(None)),
            (&[("SUDO_UID", "1000"), ("SUDO_GID", "100")], Ok(Some((1000, 100)))),
            (&[("SUDO_UID", "0"), ("SUDO_GID", "0")], Ok(None)),
            (&[("SUDO_UID", "1000")], Err("SUDO_UID is set without SUDO_GID")),
            (&[("SUDO_GID", "100")], Err("SUDO_GID is set without SUDO_UID")),
            (
                &[("SUDO_UID", "x"), ("SUDO_GID", "100")],
                Err("SUDO_UID=\"x\" is not a numeric id"),
            ),
            (
                &[("SUDO_UID", "1000"), ("SUDO_GID", "")],
                Err("SUDO_GID=\"\" is not a numeric id"),
            ),
        ];
        for (vars, want) in cases {
            let env = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
            match (sudo_caller(&env), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{vars:?}"),
                (Err(err), Err(want)) => assert!(err.to_string().starts_with(want), "{vars:?}: {err}"),
                (got, want) => panic!("{vars:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
