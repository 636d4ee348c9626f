//! crackbox-client's `enforce` example, run end to end against the binary
//! under test, so the example shown to library users cannot rot: it starts
//! the daemon on loopback, registers, proves the CONNECT is allowed and
//! another host refused, and unregisters (it fails on any deviation).

#[path = "../../client/examples/enforce.rs"]
mod enforce;

#[test]
fn the_client_example_registers_enforces_and_unregisters() {
    // The only test in this binary: nothing else reads the environment.
    std::env::set_var("CRACKBOX_BIN", env!("CARGO_BIN_EXE_crackbox"));
    if let Err(err) = enforce::main() {
        panic!("the enforce example failed: {err}");
    }
}
