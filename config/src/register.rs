//! `--register IP=ID:HOST,HOST[;KEY=VALUE...]`: a registration given on the
//! command line.
//!
//! The allowlist ends at the first `;`; options follow, each `key=value`,
//! separated by `;`. The one option today is `bandwidth` (the cap, written
//! as everywhere on the command line: `10MiB/s`). An unknown or repeated
//! key is an error naming it; an option added later is one more arm in
//! [`apply_option`].

use crackbox_engine::policy::{Bandwidth, RegistrationSpec};

/// What `--register` takes, for error messages.
const FORM: &str = "IP=ID:host1,host2[;bandwidth=10MiB/s]";

/// Parses one `--register` value into a normalised registration; the error
/// names the value and what is wrong with it.
pub(crate) fn parse_seed(raw: &str) -> Result<RegistrationSpec, String> {
    let (ip, rest) = raw.split_once('=').ok_or_else(|| format!("{raw:?}: expected {FORM}"))?;
    let (id, rest) = rest
        .split_once(':')
        .ok_or_else(|| format!("{raw:?}: expected {FORM} (nothing after ':' = deny all)"))?;
    let (hosts, options) = match rest.split_once(';') {
        Some((hosts, options)) => (hosts, Some(options)),
        None => (rest, None),
    };
    let allowlist = hosts.split(',').filter(|h| !h.is_empty());
    let mut spec = RegistrationSpec::new(ip, id, allowlist);
    let mut seen: Vec<&str> = Vec::new();
    for option in options.into_iter().flat_map(|options| options.split(';')) {
        let (key, value) = option
            .split_once('=')
            .ok_or_else(|| format!("{raw:?}: option {option:?}: expected key=value, e.g. bandwidth=10MiB/s"))?;
        if seen.contains(&key) {
            return Err(format!("{raw:?}: option {key:?} given twice"));
        }
        seen.push(key);
        apply_option(&mut spec, key, value).map_err(|err| format!("{raw:?}: option {key}: {err}"))?;
    }
    spec.normalised().map_err(|err| format!("{raw:?}: {err}"))
}

/// Sets option `key` of `spec` to `value`.
fn apply_option(spec: &mut RegistrationSpec, key: &str, value: &str) -> Result<(), String> {
    match key {
        "bandwidth" => {
            let cap = Bandwidth::parse(value).map_err(|err| err.to_string())?;
            spec.bandwidth = Some(cap.bytes_per_second());
            Ok(())
        }
        _ => Err(format!("unknown option {key:?} (known: bandwidth)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_and_their_options() {
        /// The value, then the address, id, allowlist and cap it registers.
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static [&'static str],
            Option<u64>,
        );
        let cases: [Case; 6] = [
            (
                "127.0.0.1=dev:LocalHost,bench.test.",
                "127.0.0.1",
                "dev",
                &["localhost", "bench.test"],
                None,
            ),
            ("::ffff:10.0.0.9=jail:", "10.0.0.9", "jail", &[], None),
            (
                "10.0.0.2=agent:pypi.org;bandwidth=10MiB/s",
                "10.0.0.2",
                "agent",
                &["pypi.org"],
                Some(10 << 20),
            ),
            (
                "10.0.0.2=agent:;bandwidth=1.5GiB/s",
                "10.0.0.2",
                "agent",
                &[],
                Some(3 << 29),
            ),
            (
                "10.0.0.2=a;b:x.test,y.test:443",
                "10.0.0.2",
                "a;b",
                &["x.test", "y.test:443"],
                None,
            ),
            (
                "::1=v6:[::1]:80;bandwidth=1KiB/s",
                "::1",
                "v6",
                &["[::1]:80"],
                Some(1024),
            ),
        ];
        for (raw, ip, id, allowlist, bandwidth) in cases {
            let spec = parse_seed(raw).unwrap_or_else(|err| panic!("{raw}: {err}"));
            assert_eq!((spec.ip.as_str(), spec.id.as_str()), (ip, id), "{raw}");
            assert_eq!(spec.allowlist, allowlist, "{raw}");
            assert_eq!(spec.bandwidth, bandwidth, "{raw}");
        }
    }

    #[test]
    fn bad_values_are_named() {
        let cases = [
            ("127.0.0.1", "expected IP=ID:host1,host2"),
            ("127.0.0.1=dev", "nothing after ':' = deny all"),
            ("host=dev:a.test", "ip: "),
            ("127.0.0.1=dev:*", "allowlist: "),
            (
                "10.0.0.2=a:x.test;speed=1MiB/s",
                "unknown option \"speed\" (known: bandwidth)",
            ),
            (
                "10.0.0.2=a:x.test;bandwidth=10MB/s",
                "option bandwidth: invalid bandwidth \"10MB/s\"",
            ),
            (
                "10.0.0.2=a:x.test;bandwidth=0KiB/s",
                "option bandwidth: bandwidth 0 bytes",
            ),
            (
                "10.0.0.2=a:x.test;bandwidth",
                "option \"bandwidth\": expected key=value",
            ),
            ("10.0.0.2=a:x.test;", "option \"\": expected key=value"),
            (
                "10.0.0.2=a:x.test;bandwidth=1MiB/s;bandwidth=2MiB/s",
                "option \"bandwidth\" given twice",
            ),
        ];
        for (raw, want) in cases {
            let err = parse_seed(raw).unwrap_err();
            assert!(err.starts_with(&format!("{raw:?}: ")), "{raw}: {err}");
            assert!(err.contains(want), "{raw}: {err}");
        }
    }
}
