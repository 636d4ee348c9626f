//! Registrations given at start: `--register IP=ID:HOST,HOST[;KEY=VALUE...]`
//! on the command line and `[[register]]` tables in the config file, both
//! resolved by [`resolve`] into a normalised registration.
//!
//! On the command line the allowlist ends at the first `;`; options follow,
//! each `key=value`, separated by `;`: `bandwidth` (the cap, written as
//! everywhere on the command line: `10MiB/s`), `mode` (`enforce` or
//! `report`), `deny` (entries refused even where the allowlist reaches,
//! comma-separated), `policies` (named policies it takes too,
//! comma-separated) and `allow-file` (a file of entries, one per line; the
//! one option that may be given more than once). An unknown or repeated key is
//! an error naming it. Presets (`@pypi`) expand wherever entries are
//! written, the files included. Reads the allowlist files; nothing else.

use crackbox_policy::{parse_allow_file, Bandwidth, EntryOrigins, Mode, Origin, RegistrationSpec, WATCHER_ID_PREFIX};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// What `--register` takes, for error messages.
const FORM: &str =
    "IP=ID:host1,host2[;bandwidth=10MiB/s][;mode=MODE][;deny=host3,host4][;policies=NAME,NAME][;allow-file=PATH]";

/// The options `--register` knows.
const OPTIONS: &str = "bandwidth, mode, deny, policies, allow-file";

/// One `[[register]]` table of the config file: `--register` as TOML.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterTable {
    /// Client source address.
    pub ip: String,
    /// The registration id.
    pub id: String,
    /// Allowlist entries (presets too); none (and no file) denies everything.
    #[serde(default)]
    pub allow: Vec<String>,
    /// A file of more entries, one per line; relative to the config file's
    /// directory.
    pub allow_file: Option<PathBuf>,
    /// Entries refused even where the allowlist reaches them.
    #[serde(default)]
    pub deny: Vec<String>,
    /// `enforce` (the default) or `report`.
    pub mode: Option<String>,
    /// The cap, e.g. `10MiB/s`.
    pub bandwidth: Option<String>,
    /// Named policies it takes too (`[[policies]]` tables or saved ones).
    #[serde(default)]
    pub policies: Vec<String>,
}

/// A registration as given, before it is resolved.
#[derive(Debug, Default)]
struct Seed<'a> {
    ip: &'a str,
    id: &'a str,
    allow: Vec<String>,
    allow_files: Vec<PathBuf>,
    deny: Vec<String>,
    mode: Option<&'a str>,
    bandwidth: Option<&'a str>,
    policies: Vec<String>,
}

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
    let mut seed = Seed {
        ip,
        id,
        allow: listed(hosts),
        ..Seed::default()
    };
    let mut seen: Vec<&str> = Vec::new();
    for option in options.into_iter().flat_map(|options| options.split(';')) {
        let (key, value) = option
            .split_once('=')
            .ok_or_else(|| format!("{raw:?}: option {option:?}: expected key=value, e.g. mode=report"))?;
        if seen.contains(&key) && key != "allow-file" {
            return Err(format!("{raw:?}: option {key:?} given twice"));
        }
        seen.push(key);
        match key {
            "bandwidth" => seed.bandwidth = Some(value),
            "mode" => seed.mode = Some(value),
            "deny" => seed.deny = listed(value),
            "policies" => seed.policies = listed(value),
            "allow-file" => seed.allow_files.push(PathBuf::from(value)),
            _ => return Err(format!("{raw:?}: unknown option {key:?} (known: {OPTIONS})")),
        }
    }
    resolve(seed).map_err(|err| format!("{raw:?}: {err}"))
}

/// The comma-separated items of `value`: none when it is empty, and an empty
/// item kept where two commas meet or one ends the list, so that it is
/// refused as the admin API refuses it rather than dropped unseen.
fn listed(value: &str) -> Vec<String> {
    if value.is_empty() {
        return Vec::new();
    }
    value.split(',').map(str::to_owned).collect()
}

/// Resolves the `[[register]]` table `table` of the config file in `dir`
/// (where a relative `allow_file` is looked for) into a normalised
/// registration.
pub(crate) fn from_table(table: &RegisterTable, dir: &Path) -> Result<RegistrationSpec, String> {
    let seed = Seed {
        ip: &table.ip,
        id: &table.id,
        allow: table.allow.clone(),
        allow_files: table.allow_file.iter().map(|file| dir.join(file)).collect(),
        deny: table.deny.clone(),
        mode: table.mode.as_deref(),
        bandwidth: table.bandwidth.as_deref(),
        policies: table.policies.clone(),
    };
    resolve(seed).map_err(|err| format!("{} ({}): {err}", table.ip, table.id))
}

/// The registration `seed` gives: its entries and those of its files,
/// presets expanded, normalised; the error says which part is wrong.
fn resolve(seed: Seed<'_>) -> Result<RegistrationSpec, String> {
    if seed.id.starts_with(WATCHER_ID_PREFIX) {
        return Err(format!(
            "id: the prefix {WATCHER_ID_PREFIX} is reserved for registrations made from Docker labels"
        ));
    }
    let mut allow = seed.allow;
    let mut from_files = EntryOrigins::new();
    for path in &seed.allow_files {
        let entries = read_allow_file(path)?;
        from_files.merge(EntryOrigins::of_file(&entries, &path.display().to_string()));
        allow.extend(entries);
    }
    let mut spec = RegistrationSpec::parse(seed.ip, seed.id, &allow)
        .and_then(|spec| spec.with_deny(&seed.deny))
        .and_then(|spec| spec.with_policies(&seed.policies))
        .map_err(|err| err.to_string())?
        .with_origin(Origin::Config)
        .with_origins(from_files);
    if let Some(mode) = seed.mode {
        spec = spec.with_mode(Mode::parse(mode).map_err(|err| format!("mode: {err}"))?);
    }
    if let Some(bandwidth) = seed.bandwidth {
        spec.bandwidth = Some(Bandwidth::parse(bandwidth).map_err(|err| format!("bandwidth: {err}"))?);
    }
    Ok(spec)
}

/// The entries of the allowlist file at `path`.
pub(crate) fn read_allow_file(path: &Path) -> Result<Vec<String>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|err| format!("allow-file {shown}: {err}"))?;
    parse_allow_file(&text).map_err(|err| format!("allow-file {shown}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_and_their_options() {
        /// The value, then the address, id, allowlist, cap and mode it registers.
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static [&'static str],
            Option<u64>,
            Mode,
        );
        let cases: [Case; 10] = [
            (
                "127.0.0.1=dev:LocalHost,bench.test.",
                "127.0.0.1",
                "dev",
                &["localhost", "bench.test"],
                None,
                Mode::Enforce,
            ),
            ("::ffff:10.0.0.9=jail:", "10.0.0.9", "jail", &[], None, Mode::Enforce),
            (
                "10.0.0.2=agent:pypi.org;bandwidth=10MiB/s",
                "10.0.0.2",
                "agent",
                &["pypi.org"],
                Some(10 << 20),
                Mode::Enforce,
            ),
            (
                "10.0.0.2=agent:;bandwidth=1.5GiB/s",
                "10.0.0.2",
                "agent",
                &[],
                Some(3 << 29),
                Mode::Enforce,
            ),
            (
                "10.0.0.2=a;b:x.test,y.test:443",
                "10.0.0.2",
                "a;b",
                &["x.test", "y.test:443"],
                None,
                Mode::Enforce,
            ),
            (
                "::1=v6:[::1]:80;bandwidth=1KiB/s",
                "::1",
                "v6",
                &["[::1]:80"],
                Some(1024),
                Mode::Enforce,
            ),
            (
                "10.0.0.2=agent:x.test;mode=report",
                "10.0.0.2",
                "agent",
                &["x.test"],
                None,
                Mode::Report,
            ),
            (
                "10.0.0.2=agent:x.test;mode=ask",
                "10.0.0.2",
                "agent",
                &["x.test"],
                None,
                Mode::Ask,
            ),
            (
                "10.0.0.2=agent:;mode=enforce;bandwidth=1MiB/s",
                "10.0.0.2",
                "agent",
                &[],
                Some(1 << 20),
                Mode::Enforce,
            ),
            (
                "10.0.0.2=agent:@npm,x.test,registry.npmjs.org:443;mode=report",
                "10.0.0.2",
                "agent",
                &["registry.npmjs.org:443", "x.test"],
                None,
                Mode::Report,
            ),
        ];
        for (raw, ip, id, allowlist, bandwidth, mode) in cases {
            let spec = parse_seed(raw).unwrap_or_else(|err| panic!("{raw}: {err}"));
            assert_eq!((spec.ip.to_string().as_str(), spec.id.as_str()), (ip, id), "{raw}");
            assert_eq!(spec.allowlist.texts(), allowlist, "{raw}");
            assert_eq!(
                (
                    spec.bandwidth.map(Bandwidth::bytes_per_second),
                    spec.mode.unwrap_or_default()
                ),
                (bandwidth, mode),
                "{raw}"
            );
        }
    }

    #[test]
    fn allow_files_add_their_entries_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first.allow");
        let second = dir.path().join("second.allow");
        std::fs::write(&first, "# learned\nPyPI.org\n\n@npm  # the registry\n").unwrap();
        std::fs::write(&second, "files.pythonhosted.org:443\npypi.org\n").unwrap();
        let raw = format!(
            "10.0.0.2=agent:x.test;allow-file={};mode=report;allow-file={}",
            first.display(),
            second.display()
        );
        let spec = parse_seed(&raw).unwrap();
        assert_eq!(
            spec.allowlist.texts(),
            [
                "x.test",
                "pypi.org",
                "registry.npmjs.org:443",
                "files.pythonhosted.org:443"
            ]
        );
        assert_eq!(spec.mode, Some(Mode::Report));
        let table = RegisterTable {
            ip: "10.0.0.3".into(),
            id: "b".into(),
            allow: vec!["@yarn".into()],
            allow_file: Some("second.allow".into()),
            deny: vec!["Files.PythonHosted.org:443".into()],
            mode: None,
            bandwidth: Some("2MiB/s".into()),
            policies: vec!["python".into()],
        };
        let spec = from_table(&table, dir.path()).unwrap();
        assert_eq!(spec.allowlist.denied_texts(), ["files.pythonhosted.org:443"]);
        assert_eq!(spec.policies[0].as_str(), "python");
        let named = parse_seed("10.0.0.5=n:;policies=base,python,base").unwrap();
        assert_eq!(
            named.policies.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
            ["base", "python"]
        );
        let err = parse_seed("10.0.0.5=n:;policies=Base").unwrap_err();
        assert!(err.contains("policies: invalid policy name \"Base\""), "{err}");
        let flagged = parse_seed("10.0.0.4=d:github.com;deny=gist.github.com,raw.github.com").unwrap();
        assert_eq!(flagged.allowlist.denied_texts(), ["gist.github.com", "raw.github.com"]);
        let err = parse_seed("10.0.0.4=d:github.com;deny=*").unwrap_err();
        assert!(err.contains("deny: invalid allowlist entry \"*\""), "{err}");
        assert_eq!(
            spec.allowlist.texts(),
            ["registry.yarnpkg.com:443", "files.pythonhosted.org:443", "pypi.org"],
            "a relative file is read beside the config file"
        );
        assert_eq!(
            (spec.bandwidth.map(Bandwidth::bytes_per_second), spec.mode),
            (Some(2 << 20), None)
        );
    }

    #[test]
    fn bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let bad_file = dir.path().join("bad.allow");
        std::fs::write(&bad_file, "ok.test\n\nnot a host\n").unwrap();
        let missing = dir.path().join("missing.allow");
        let bad_file_value = format!("10.0.0.2=a:;allow-file={}", bad_file.display());
        let bad_file_error = format!(
            "allow-file {}: line 3: invalid allowlist entry \"not a host\"",
            bad_file.display()
        );
        let missing_value = format!("10.0.0.2=a:;allow-file={}", missing.display());
        let missing_error = format!("allow-file {}: No such file", missing.display());
        let cases = [
            ("127.0.0.1", "expected IP=ID:host1,host2"),
            ("127.0.0.1=dev", "nothing after ':' = deny all"),
            ("host=dev:a.test", "ip: "),
            (
                "0.0.0.0=dev:a.test",
                "ip: 0.0.0.0 is the unspecified address, which no connection comes from",
            ),
            (
                "255.255.255.255=dev:a.test",
                "ip: 255.255.255.255 is the limited broadcast address",
            ),
            ("127.0.0.1=dev:*", "allowlist: "),
            ("127.0.0.1=dev:a.test,,b.test", "allowlist: "),
            ("127.0.0.1=dev:a.test,", "allowlist: "),
            ("127.0.0.1=dev:a.test;deny=b.a.test,", "deny: "),
            (
                "127.0.0.1=dev:a.test:0443",
                "allowlist: invalid allowlist entry \"a.test:0443\": port must be a number from 1 to 65535",
            ),
            (
                "127.0.0.1=dev:a.test;deny=b.a.test:080",
                "deny: invalid allowlist entry \"b.a.test:080\"",
            ),
            ("127.0.0.1=dev:a.test;policies=,base", "policies: "),
            (
                "10.0.0.2=a:x.test;speed=1MiB/s",
                "unknown option \"speed\" (known: bandwidth, mode, deny, policies, allow-file)",
            ),
            (
                "10.0.0.2=a:x.test;bandwidth=10MB/s",
                "bandwidth: invalid bandwidth \"10MB/s\"",
            ),
            ("10.0.0.2=a:x.test;bandwidth=0KiB/s", "bandwidth: bandwidth 0 bytes"),
            (
                "10.0.0.2=a:x.test;bandwidth",
                "option \"bandwidth\": expected key=value",
            ),
            ("10.0.0.2=a:x.test;", "option \"\": expected key=value"),
            (
                "10.0.0.2=a:x.test;bandwidth=1MiB/s;bandwidth=2MiB/s",
                "option \"bandwidth\" given twice",
            ),
            (
                "10.0.0.2=a:x.test;mode=audit",
                "mode: invalid mode \"audit\": expected enforce, report or ask",
            ),
            (
                "10.0.0.2=a:x.test;mode=report;mode=report",
                "option \"mode\" given twice",
            ),
            (
                "10.0.0.2=a:@nosuch",
                "allowlist: unknown preset \"@nosuch\" (known: @pypi, @npm",
            ),
            (&bad_file_value, &bad_file_error),
            (&missing_value, &missing_error),
        ];
        for (raw, want) in cases {
            let err = parse_seed(raw).unwrap_err();
            assert!(err.starts_with(&format!("{raw:?}: ")), "{raw}: {err}");
            assert!(err.contains(want), "{raw}: {err}");
        }
        let table = RegisterTable {
            ip: "10.0.0.9".into(),
            id: "c".into(),
            mode: Some("Report".into()),
            ..RegisterTable::default()
        };
        assert_eq!(
            from_table(&table, dir.path()).unwrap_err(),
            "10.0.0.9 (c): mode: invalid mode \"Report\": expected enforce, report or ask"
        );
    }
}
