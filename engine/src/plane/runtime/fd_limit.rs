//! The open-file limit and the total connection cap that fits in it, so
//! new clients are refused (429) before the engine runs out of descriptors
//! (docs/operations.md, "Descriptors").

use crate::plane::services::pipes::{FDS_PER_CONNECTION, POOLED_PIPE_FDS};
use crate::plane::services::upstream_pool;
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

/// At most this share of what a core thread has left for connections goes
/// to the idle upstream connections its pool keeps (an eighth).
const IDLE_UPSTREAM_SHARE: u64 = 8;

/// What the open-file limit leaves room for, beside the reserve and each
/// core thread's pooled splice pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FdBudget {
    /// Client connections in all, at [`FDS_PER_CONNECTION`] each (at least one).
    pub(super) connections: usize,
    /// Idle upstream connections each core thread's pool may keep after
    /// their clients left (they hold a descriptor each, and no admission):
    /// [`upstream_pool::PER_THREAD`], or an eighth of the thread's share
    /// when the limit is small.
    pub(super) idle_upstreams_per_thread: usize,
}

/// The budget of `fd_limit` with `threads` core threads.
fn budget(fd_limit: u64, threads: usize) -> FdBudget {
    let threads = threads.max(1) as u64;
    let left = fd_limit.saturating_sub(FD_RESERVE + threads * POOLED_PIPE_FDS);
    let idle = (left / threads / IDLE_UPSTREAM_SHARE).min(upstream_pool::PER_THREAD as u64);
    FdBudget {
        connections: ((left - threads * idle) / FDS_PER_CONNECTION).max(1) as usize,
        idle_upstreams_per_thread: idle as usize,
    }
}

/// Lowers the total connection cap to what fits in `fd_limit`, saying so;
/// returns the budget, whose idle upstream bound each thread's pool keeps.
pub(super) fn cap_connections_below_fd_limit(config: &mut EngineConfig, fd_limit: u64) -> FdBudget {
    let budget = budget(fd_limit, config.threads);
    if config.limits.max_connections_total > budget.connections {
        tracing::info!(
            configured = config.limits.max_connections_total,
            fd_limit,
            fds_per_connection = FDS_PER_CONNECTION,
            cap = budget.connections,
            "total connection cap lowered to fit the open-file limit"
        );
        config.limits.max_connections_total = budget.connections;
    }
    budget
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
    fn every_connection_can_hold_its_sockets_within_the_limit_beside_what_is_pooled() {
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
            let budget = cap_connections_below_fd_limit(&mut config, fd_limit);
            let cap = config.limits.max_connections_total as u64;
            assert_eq!(cap, budget.connections as u64);
            // Each thread's 64 pipes (two fds each) and its idle upstreams.
            let pooled = threads as u64 * (2 * 64 + budget.idle_upstreams_per_thread as u64);
            assert!(
                cap * FDS_PER_CONNECTION + pooled + 512 <= fd_limit,
                "{cap} connections, {pooled} pooled fds and the reserve overflow {fd_limit}"
            );
            assert!(
                (cap + 1) * FDS_PER_CONNECTION + pooled + 512 > fd_limit,
                "a cap of {cap} leaves room unused"
            );
            let share = fd_limit.saturating_sub(512 + threads as u64 * 128) / threads as u64;
            let idle = budget.idle_upstreams_per_thread as u64;
            assert!(
                idle <= 256 && idle * 8 <= share,
                "{budget:?}: the idle upstreams take at most 256 and an eighth of a thread's {share}"
            );
        }
        // 20,000 on two threads: 20,000 - 512 - 2 x (128 + 256) = 18,720
        // fds, 9,360 connections: 9,000 idle tunnels fit. A soft limit of
        // 1,024: 1,024 - 512 - 2 x 128 = 256 fds, 16 idle upstreams per
        // thread (an eighth of 128), 112 connections.
        for (fd_limit, connections, idle_upstreams_per_thread) in [(20_000, 9_360, 256), (1024, 112, 16)] {
            let budget = cap_connections_below_fd_limit(&mut engine_config(2), fd_limit);
            let expected = FdBudget {
                connections,
                idle_upstreams_per_thread,
            };
            assert_eq!(budget, expected, "a limit of {fd_limit}");
        }
        let mut config = engine_config(2);
        cap_connections_below_fd_limit(&mut config, 256);
        assert_eq!(config.limits.max_connections_total, 1, "always at least one");
        let mut config = engine_config(2);
        let configured = config.limits.max_connections_total;
        cap_connections_below_fd_limit(&mut config, 1 << 30);
        assert_eq!(config.limits.max_connections_total, configured, "a cap that fits stays");
    }
}
