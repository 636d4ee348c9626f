//! What the workload's child process does between fork and exec to enter
//! the jail: join the namespace, see the jail's own resolv.conf and hosts
//! when steered, and give up what would let it leave (the sudo caller's ids,
//! or root without the capabilities to rewire or re-enter namespaces).
//! Only async-signal-safe system calls here.

use super::etc::BindMounts;

/// Capabilities a root workload loses: CAP_SYS_ADMIN (21), CAP_NET_ADMIN
/// (12), CAP_NET_RAW (13), CAP_SYS_PTRACE (19), CAP_SYS_MODULE (16).
const DROPPED_CAPS: [libc::c_int; 5] = [21, 12, 13, 19, 16];

/// Joins the namespace `ns_fd` and drops privileges (see the module doc).
pub fn enter_jail(
    ns_fd: libc::c_int,
    mounts: Option<&BindMounts>,
    ids: Option<(libc::uid_t, libc::gid_t)>,
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
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    }
}

/// The caller's uid and gid when crackbox runs under sudo (as `SUDO_UID`
/// and `SUDO_GID` in `env`), unless that caller is root.
pub fn sudo_caller(env: &dyn Fn(&str) -> Option<String>) -> Option<(libc::uid_t, libc::gid_t)> {
    let uid = env("SUDO_UID")?.parse().ok()?;
    let gid = env("SUDO_GID")?.parse().ok()?;
    (uid != 0).then_some((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sudo_caller_is_taken_unless_root_or_unreadable() {
        /// Variables, then the ids taken.
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<(u32, u32)>);
        let cases: &[Case] = &[
            (&[], None),
            (&[("SUDO_UID", "1000"), ("SUDO_GID", "100")], Some((1000, 100))),
            (&[("SUDO_UID", "0"), ("SUDO_GID", "0")], None),
            (&[("SUDO_UID", "1000")], None),
            (&[("SUDO_UID", "x"), ("SUDO_GID", "100")], None),
        ];
        for (vars, want) in cases {
            let env = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
            assert_eq!(sudo_caller(&env), *want, "{vars:?}");
        }
    }
}
