//! The host's own interface addresses, refreshed off the core threads.
//!
//! The destination guard needs them when a crackbox listener is bound to a
//! wildcard address: that port on any local address is crackbox itself.

use arc_swap::ArcSwap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// A periodically refreshed set of local addresses.
#[derive(Clone)]
pub(crate) struct LocalAddresses {
    current: Arc<ArcSwap<Vec<IpAddr>>>,
}

impl LocalAddresses {
    /// Reads the addresses now and, when `refresh`, keeps them fresh from a
    /// background thread.
    pub(crate) fn start(refresh: bool) -> std::io::Result<Self> {
        let current = Arc::new(ArcSwap::from_pointee(read()));
        if refresh {
            let shared = Arc::clone(&current);
            std::thread::Builder::new()
                .name("crackbox-ifaddrs".into())
                .spawn(move || loop {
                    std::thread::sleep(REFRESH_EVERY);
                    shared.store(Arc::new(read()));
                })?;
        }
        Ok(LocalAddresses { current })
    }

    /// True when `ip` is one of this host's interface addresses.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.current.load().contains(&crackbox_policy::canonical_ip(ip))
    }
}

fn read() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| a.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}
