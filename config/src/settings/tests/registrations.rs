//! The registrations made at start: `--register` flags and the config
//! file's `[[register]]` tables, normalised, in order, each bad one named.

use super::*;

#[test]
fn register_flags_seed_normalised_registrations() {
    let flags = args(&[
        "--register",
        "127.0.0.1=dev:LocalHost,bench.test.",
        "--register",
        "::ffff:10.0.0.9=jail:",
    ]);
    let settings = Settings::resolve(&flags, &env_of(&[])).unwrap();
    assert_eq!(settings.seeds[0].allowlist.texts(), ["localhost", "bench.test"]);
    assert_eq!(settings.seeds[1].ip.to_string(), "10.0.0.9");
    assert!(settings.seeds[1].allowlist.is_empty());
    for bad in ["127.0.0.1", "127.0.0.1=dev", "host=dev:a.test", "127.0.0.1=dev:*"] {
        let err = Settings::resolve(&args(&["--register", bad]), &env_of(&[])).unwrap_err();
        assert!(err.to_string().starts_with("flag --register"), "{err}");
    }
}

#[test]
fn config_file_tables_seed_registrations_before_the_flags() {
    let (dir, path) = config_file(
        "[[register]]\nip = \"10.0.0.2\"\nid = \"agent\"\nallow = [\"@pypi\"]\nallow_file = \"agent.allow\"\nmode = \"report\"\n\
         [[register]]\nip = \"10.0.0.3\"\nid = \"file\"\nbandwidth = \"1MiB/s\"\n",
    );
    std::fs::write(dir.path().join("agent.allow"), "# learned\nnew.test\n").unwrap();
    let flags = args(&["--config", &path, "--register", "10.0.0.3=flag:x.test;mode=report"]);
    let settings = Settings::resolve(&flags, &env_of(&[])).unwrap();
    /// Address, id, allowlist, mode and cap of one seed.
    type Seed<'a> = (&'a str, &'a str, Vec<&'a str>, Mode, Option<u64>);
    let texts: Vec<(String, String, Vec<String>)> = settings
        .seeds
        .iter()
        .map(|s| (s.ip.to_string(), s.id.to_string(), s.allowlist.texts()))
        .collect();
    let seeds: Vec<Seed> = texts
        .iter()
        .zip(&settings.seeds)
        .map(|((ip, id, allow), s)| {
            let allow = allow.iter().map(String::as_str).collect();
            (
                ip.as_str(),
                id.as_str(),
                allow,
                s.mode.unwrap_or_default(),
                s.bandwidth.map(crackbox_policy::Bandwidth::bytes_per_second),
            )
        })
        .collect();
    assert_eq!(
        seeds,
        [
            (
                "10.0.0.2",
                "agent",
                vec!["pypi.org:443", "files.pythonhosted.org:443", "new.test"],
                Mode::Report,
                None
            ),
            ("10.0.0.3", "file", vec![], Mode::Enforce, Some(1 << 20)),
            ("10.0.0.3", "flag", vec!["x.test"], Mode::Report, None),
        ],
        "the flag comes last, so it wins for its address"
    );
    let (_dir, bad) = config_file("[[register]]\nip = \"10.0.0.2\"\nid = \"a\"\nallow = [\"@nosuch\"]\n");
    let err = Settings::resolve(&args(&["--config", &bad]), &env_of(&[]))
        .unwrap_err()
        .to_string();
    let want = format!("{bad}: register: [0] 10.0.0.2 (a): allowlist: unknown preset \"@nosuch\"");
    assert!(err.starts_with(&want), "{err}");
    let refused = [
        (
            "[[register]]\nip = \"10.0.0.2\"\nid = \"a\"\n[[register]]\nip = \"::ffff:10.0.0.2\"\nid = \"b\"\n",
            "register: [1] ::ffff:10.0.0.2 (b): a second [[register]] table for this address (the first is [0])",
        ),
        (
            "[[register]]\nip = \"10.0.0.2\"\nid = \"docker:x\"\n",
            "register: [0] 10.0.0.2 (docker:x): id: the prefix docker: is reserved",
        ),
        (
            "[[register]]\nip = \"10.0.0.2\"\nid = \"a\"\nallow = [\"a.test\", \"b.test:080\"]\n",
            "register: [0] 10.0.0.2 (a): allowlist: invalid allowlist entry \"b.test:080\": port must be a number \
             from 1 to 65535, without a sign or a leading zero",
        ),
        (
            "[[register]]\nip = \"239.1.2.3\"\nid = \"group\"\n",
            "register: [0] 239.1.2.3 (group): ip: 239.1.2.3 is a multicast address, which no connection comes from",
        ),
    ];
    for (text, want) in refused {
        let (_dir, bad) = config_file(text);
        let err = Settings::resolve(&args(&["--config", &bad]), &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&format!("{bad}: {want}")), "{err}");
    }
}
