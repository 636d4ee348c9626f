//! docs/architecture.md's wire section cannot drift from the code: it names
//! every kind of message of the control <-> engine protocol
//! (`Message::KINDS`, which a unit test checks against the enum itself) and
//! the protocol version in force.

use crackbox_wire::link::{Message, PROTOCOL};

/// The text of `## Wire protocol` in docs/architecture.md, up to the next
/// section.
fn wire_section() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find("\n## Wire protocol").expect("a wire protocol section");
    let rest = &text[start + 1..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].to_string()
}

/// Whether `section` names `kind` as a message: `` `kind {fields}` `` or
/// `` `kind` ``.
fn names(section: &str, kind: &str) -> bool {
    section.contains(&format!("`{kind} {{")) || section.contains(&format!("`{kind}`"))
}

#[test]
fn the_wire_section_names_every_message_kind_and_the_protocol_version() {
    let section = wire_section();
    let missing: Vec<&str> = Message::KINDS
        .into_iter()
        .filter(|kind| !names(&section, kind))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's wire section misses {missing:?}"
    );
    assert!(
        section.contains(&format!("Protocol version {PROTOCOL}.")),
        "docs/architecture.md's wire section must say Protocol version {PROTOCOL}."
    );
    // The check can fail: a kind the section does not name is missed.
    assert!(!names(&section, "no_such_kind"));
    assert!(!names(&section.replace("`asked {", "`other {"), "asked"));
}
