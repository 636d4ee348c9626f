//! Which way bytes move through crackbox: the two directions a cap holds
//! and usage counts apart.

/// Which way bytes moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to upstream.
    Up,
    /// Upstream to client.
    Down,
}
