//! The admin listener's own settings: the console switch and its names.

use super::*;

#[test]
fn the_console_switch_and_admin_names_come_from_flag_env_or_file() {
    let defaults = Settings::resolve(&args(&[]), &env_of(&[])).unwrap();
    assert!(defaults.console, "the console is on by default");
    assert!(defaults.admin_names.is_empty());
    let (_dir, path) = config_file("[admin]\nconsole = false\nnames = [\"Crackbox.Internal\"]\n");
    let from_file = Settings::resolve(&args(&["--config", &path]), &env_of(&[])).unwrap();
    assert!(!from_file.console);
    assert_eq!(from_file.admin_names, ["crackbox.internal"]);
    let env = env_of(&[("CRACKBOX_CONSOLE", "on"), ("CRACKBOX_ADMIN_NAMES", "a.test, b.test")]);
    let from_env = Settings::resolve(&args(&["--config", &path]), &env).unwrap();
    assert!(from_env.console);
    assert_eq!(from_env.admin_names, ["a.test", "b.test"]);
    let flags = args(&["--config", &path, "--console", "off", "--admin-name", "c.test"]);
    let from_flags = Settings::resolve(&flags, &env).unwrap();
    assert!(!from_flags.console);
    assert_eq!(from_flags.admin_names, ["c.test"]);
    let bad_switch = Settings::resolve(&args(&[]), &env_of(&[("CRACKBOX_CONSOLE", "maybe")])).unwrap_err();
    assert_eq!(
        bad_switch.to_string(),
        "env CRACKBOX_CONSOLE: \"maybe\" is neither on nor off"
    );
    let bad_name = Settings::resolve(&args(&["--admin-name", "10.0.0.2"]), &env_of(&[])).unwrap_err();
    assert_eq!(
        bad_name.to_string(),
        "flag --admin-name: \"10.0.0.2\" is not a host name"
    );
    assert!(Cli::try_parse_from(["crackbox", "--console", "maybe"]).is_err());
}
