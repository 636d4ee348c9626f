//! How `proxy serve` hands its engine child the settings it resolved: the
//! child runs `proxy engine --settings-stdin` and reads one JSON document,
//! the whole [`EngineConfig`], from its stdin; the supervisor writes it anew
//! on every (re)start. So a restarted engine runs with exactly the settings
//! the first one had, whatever the config files or the environment say by
//! then: the child reads neither.

use super::ConfigError;
use crackbox_wire::engine_config::EngineConfig;
use std::io::Read;

/// The arguments that start an engine child reading its settings from stdin.
pub const ENGINE_CHILD_ARGS: [&str; 3] = ["proxy", "engine", "--settings-stdin"];

/// Largest settings document read (a few hundred bytes in practice).
const MAX_DOCUMENT: u64 = 1 << 20;

/// The document the engine child reads.
pub fn document(config: &EngineConfig) -> Result<Vec<u8>, ConfigError> {
    serde_json::to_vec(config).map_err(|err| ConfigError::Handoff(err.to_string()))
}

/// Reads the settings document from `input` (to its end).
pub fn read(input: impl Read) -> Result<EngineConfig, ConfigError> {
    let mut text = Vec::new();
    input
        .take(MAX_DOCUMENT)
        .read_to_end(&mut text)
        .map_err(|err| ConfigError::Handoff(err.to_string()))?;
    serde_json::from_slice(&text).map_err(|err| ConfigError::Handoff(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ProxyArgs, Settings};

    #[test]
    fn the_document_carries_every_setting() {
        let args = ProxyArgs {
            listen: Some("127.0.0.1:1".into()),
            transparent_listen: Some(String::new()),
            dns_listen: Some("127.0.0.1:53".into()),
            steer: vec!["127.0.0.2".into(), "::1".into()],
            threads: Some(3),
            io_driver: Some("epoll".into()),
            allow_private_destinations: true,
            tunnel_idle_timeout: Some(0),
            max_connections_total: Some(7),
            registration_hold_ms: Some(20),
            ..ProxyArgs::default()
        };
        let settings = Settings::resolve(&args, &|_| None).unwrap();
        let config = settings.engine_config("/tmp/x.sock".into());
        assert_eq!(read(&document(&config).unwrap()[..]).unwrap(), config);
    }

    #[test]
    fn a_bad_document_is_an_error() {
        for bad in [&b""[..], b"{", b"[]", b"{\"listen\":\"127.0.0.1:1\"}"] {
            let err = read(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("the settings handed to the engine"),
                "{err}"
            );
        }
    }
}
