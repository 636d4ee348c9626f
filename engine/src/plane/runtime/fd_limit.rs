//! The open-file limit and the total connection cap that fits in it, so
//! new clients are refused (429) before the engine runs out of descriptors
//! (docs/operations.md, "Descriptors").

use crate::plane::services::pipes::{FDS_PER_CONNECTION, POOLED_PIPE_FDS};
use crackbox_wire::engine_config::EngineConfig;

/// Descriptors kept free for listeners, the resolver (which opens
/// /etc/hosts and its sockets), the control link and the logs.
const FD_RESERVE: u64 = 512;

/// Raises the soft fd limit to the hard limit (tunnels are fds); returns
/// the limit in force.
pub(super) fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard {
        if let Err(err) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!(error = %err, "could not raise the open-file limit");
            return soft;
        }
    }
    hard
}

/// The connections that fit in `fd_limit` with `threads` core threads:
/// what is left after the reserve and each thread's pooled pipes, at
/// [`FDS_PER_CONNECTION`] each (at least one).
fn connections_that_fit(fd_limit: u64, threads: usize) -> usize {
    let kept = FD_RESERVE + threads.max(1) as u64 * POOLED_PIPE_FDS;
    (fd_limit.saturating_sub(kept) / FDS_PER_CONNECTION).max(1) as usize
}

/// Lowers the total connection cap to what fits in `fd_limit`, saying so.
pub(super) fn cap_connections_below_fd_limit(config: &mut EngineConfig, fd_limit: u64) {
    let fits = connections_that_fit(fd_limit, config.threads);
    if config.limits.max_connections_total > fits {
        tracing::info!(
            configured = config.limits.max_connections_total,
            fd_limit,
            fds_per_connection = FDS_PER_CONNECTION,
            cap = fits,
            "total connection cap lowered to fit the open-file limit"
        );
        config.limits.max_connections_total = fits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_wire::engine_config::{IoDriver, Limits, DEFAULT_REGISTRATION_HOLD};

    fn engine_config(threads: usize) -> EngineConfig {
        EngineConfig {
            listen: "127.0.0.1:3128".parse().unwrap(),
            transparent_listen: None,
            socks_listen: None,
            dns_listen: None,
            dns_upstream: None,
            steer: vec![],
            steered_ports: Default::default(),
            threads,
            io_driver: IoDriver::Auto,
            allow_private_destinations: false,
            other_own_addresses: vec![],
            control_socket: "/nonexistent".into(),
            limits: Limits::default(),
            registration_hold: DEFAULT_REGISTRATION_HOLD,
        }
    }

    #[test]
    fn every_connection_can_hold_its_sockets_within_the_limit_beside_the_pooled_pipes() {
        for (fd_limit, threads) in [
            (1024, 1),
            (1024, 2),
            (4096, 2),
            (20_000, 2),
            (65_536, 8),
            (1_048_576, 64),
        ] {
            let mut config = engine_config(threads);
            config.limits.max_connections_total = usize::MAX;
            cap_connections_below_fd_limit(&mut config, fd_limit);
            let cap = config.limits.max_connections_total as u64;
            let pooled = threads as u64 * 2 * 64;
            assert!(
                cap * FDS_PER_CONNECTION + pooled + 512 <= fd_limit,
                "{cap} connections, {pooled} pooled pipe fds and the reserve overflow {fd_limit}"
            );
            assert!(
                (cap + 1) * FDS_PER_CONNECTION + pooled + 512 > fd_limit,
                "a cap of {cap} leaves room unused"
            );
        }
        // 20,000 on two threads: 20,000 - 512 - 2 x 128 = 19,232 fds, 9,616
        // connections: 9,000 idle tunnels fit.
        let mut config = engine_config(2);
        cap_connections_below_fd_limit(&mut config, 20_000);
        assert_eq!(config.limits.max_connections_total, 9_616);
        let mut config = engine_config(2);
        cap_connections_below_fd_limit(&mut config, 256);
        assert_eq!(config.limits.max_connections_total, 1, "always at least one");
        let mut config = engine_config(2);
        let configured = config.limits.max_connections_total;
        cap_connections_below_fd_limit(&mut config, 1 << 30);
        assert_eq!(config.limits.max_connections_total, configured, "a cap that fits stays");
    }
}
