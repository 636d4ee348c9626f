//! What a revoked connection and a spared one look like to their client:
//! closed by the peer within [`REVOKE_WITHIN`], or open for [`STAYS_OPEN`]
//! and still echoing.

use crate::echo::echo_round;
use crate::net::closed_within;
use std::net::TcpStream;
use std::time::Duration;

/// Revoked connections close within this long.
pub const REVOKE_WITHIN: Duration = Duration::from_secs(1);
/// How long a connection that must stay open is watched.
pub const STAYS_OPEN: Duration = Duration::from_millis(1500);

/// Asserts the peer closes `stream` within [`REVOKE_WITHIN`] of now.
pub fn assert_cut(stream: &mut TcpStream, what: &str) {
    let took = closed_within(stream, Duration::from_secs(5));
    eprintln!("{what}: closed after {took:?}");
    let took = took.unwrap_or_else(|| panic!("{what}: still open 5 s later"));
    assert!(took < REVOKE_WITHIN, "{what}: closed only after {took:?}");
}

/// Asserts `stream` is not closed for [`STAYS_OPEN`] and still echoes.
pub fn assert_untouched(stream: &mut TcpStream, what: &str) {
    assert_eq!(closed_within(stream, STAYS_OPEN), None, "{what} was closed");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    echo_round(stream, "still here");
}
