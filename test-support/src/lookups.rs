//! Name lookups that never leave this machine.
//!
//! The tests make names up (`allowed.test`, `web.test`): a daemon resolves
//! them (the destination guard does before it dials or asks), and so would
//! a browser on its own. Looked up through this machine's resolver, each
//! question would go to whatever address /etc/resolv.conf names. Instead,
//! as root, the daemons and the browser a test starts see a resolv.conf of
//! their own (bind-mounted over /etc/resolv.conf in a mount namespace of
//! their own) naming [`LocalResolver`]: a responder on a loopback address,
//! run by the test process, that answers every question NXDOMAIN, as any
//! real resolver answers a `.test` name. Names the tests need resolved come
//! from /etc/hosts (`localhost`) or are addresses already.

use std::ffi::CString;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The responder of this test process, once started: the resolv.conf that
/// names it.
static RESOLV_CONF: OnceLock<Option<PathBuf>> = OnceLock::new();

/// A DNS responder on a loopback address that answers NXDOMAIN to every
/// question, for as long as the test process runs.
pub struct LocalResolver;

impl LocalResolver {
    /// The resolv.conf naming this process's responder (started on first
    /// use, on port 53 of a 127.53.X.Y of its own); `None` when not root
    /// (no port 53, no mount namespace) or no address was free.
    pub fn resolv_conf() -> Option<&'static PathBuf> {
        RESOLV_CONF.get_or_init(start).as_ref()
    }
}

fn start() -> Option<PathBuf> {
    if !crate::is_root() {
        return None;
    }
    let seed = std::process::id();
    let socket = (0..64u32).find_map(|attempt| {
        let mixed = seed
            .wrapping_mul(2_654_435_761)
            .wrapping_add(attempt.wrapping_mul(40_503));
        let [_, _, x, y] = mixed.to_be_bytes();
        UdpSocket::bind((Ipv4Addr::new(127, 53, x, y.max(1)), 53)).ok()
    })?;
    let address = socket.local_addr().ok()?.ip();
    std::thread::spawn(move || answer_nxdomain(&socket));
    let path = crate::scratch().join("resolv.conf");
    std::fs::write(&path, format!("nameserver {address}\noptions timeout:1 attempts:1\n")).ok()?;
    Some(path)
}

/// Answers each question NXDOMAIN: the question echoed, no records.
fn answer_nxdomain(socket: &UdpSocket) {
    let mut buf = [0u8; 512];
    while let Ok((len, peer)) = socket.recv_from(&mut buf) {
        if len < 12 {
            continue;
        }
        let mut reply = buf[..len].to_vec();
        reply[2] = 0x80 | (buf[2] & 0x79); // a response; opcode and RD kept
        reply[3] = 0x80 | 0x03; // recursion available; NXDOMAIN
        reply[6..12].fill(0); // no answer, authority or additional records
        let _ = socket.send_to(&reply, peer);
    }
}

/// Makes `command` resolve names through [`LocalResolver`] (as root; as
/// any other user it is left as it is): in the child, before it runs, a
/// mount namespace of its own in which nothing mounted propagates back out,
/// and the responder's resolv.conf over /etc/resolv.conf.
pub fn local_lookups(command: &mut Command) -> &mut Command {
    let Some(conf) = LocalResolver::resolv_conf() else {
        return command;
    };
    let source = CString::new(conf.as_os_str().as_bytes()).expect("a path without NUL");
    let target = c"/etc/resolv.conf";
    // SAFETY: the closure makes only system calls (unshare, mount) on
    // strings made before the fork: nothing allocates or takes a lock.
    unsafe {
        command.pre_exec(move || {
            let checked = |result: libc::c_int| match result {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            };
            checked(libc::unshare(libc::CLONE_NEWNS))?;
            let none = std::ptr::null();
            checked(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ))?;
            checked(libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                none,
                libc::MS_BIND,
                std::ptr::null(),
            ))
        })
    }
}
