//! Which io driver the core threads run on, and the names that choose it.

use serde::{Deserialize, Serialize};

/// Which io driver the core threads run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoDriver {
    /// `auto`, empty or unset: io_uring where the kernel lets this process set up a
    /// ring, epoll otherwise (e.g. under Docker's default seccomp profile).
    Auto,
    /// `io_uring`: as `Auto`, with a warning when it falls back to epoll.
    IoUring,
    /// `epoll`: epoll readiness only.
    Epoll,
}

/// The environment variable that picks the io driver (read by the settings
/// resolution, never by the engine).
pub const IO_DRIVER_ENV: &str = "CRACKBOX_IO_DRIVER";

/// A value that names no io driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be io_uring, epoll or auto (io_uring with an epoll fallback, the default), not {0:?}")]
pub struct UnknownIoDriver(pub String);

impl IoDriver {
    /// The driver `value` names (empty is `auto`, `io-uring` is taken for
    /// `io_uring`).
    pub fn parse(value: &str) -> Result<IoDriver, UnknownIoDriver> {
        match value {
            "" | "auto" => Ok(IoDriver::Auto),
            "io_uring" | "io-uring" => Ok(IoDriver::IoUring),
            "epoll" => Ok(IoDriver::Epoll),
            other => Err(UnknownIoDriver(other.to_owned())),
        }
    }

    /// The name [`IoDriver::parse`] takes for it.
    pub fn as_str(self) -> &'static str {
        match self {
            IoDriver::Auto => "auto",
            IoDriver::IoUring => "io_uring",
            IoDriver::Epoll => "epoll",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_driver_names() {
        assert_eq!(IoDriver::parse(""), Ok(IoDriver::Auto));
        assert_eq!(IoDriver::parse("io_uring"), Ok(IoDriver::IoUring));
        assert_eq!(IoDriver::parse("io-uring"), Ok(IoDriver::IoUring));
        assert_eq!(IoDriver::parse("epoll"), Ok(IoDriver::Epoll));
        let err = IoDriver::parse("uring").unwrap_err();
        assert!(err.to_string().contains("not \"uring\""), "{err}");
        assert!(IoDriver::parse("EPOLL").is_err());
        for driver in [IoDriver::Auto, IoDriver::IoUring, IoDriver::Epoll] {
            assert_eq!(IoDriver::parse(driver.as_str()), Ok(driver));
        }
    }
}
