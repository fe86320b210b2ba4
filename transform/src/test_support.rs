//! Helpers for the crate's unit tests.

use crate::field::Field;
use serde_json::Value;

/// Fields from a JSON list in the canonical form (missing keys take their
/// defaults).
pub fn fields(v: Value) -> Vec<Field> {
    v.as_array()
        .expect("a list of fields")
        .iter()
        .map(|f| Field::from_canonical(f).expect("field"))
        .collect()
}

/// Panics unless the workspace's Cargo.lock pins `library`, written as an
/// artifact records it: `"NAME VERSION"` (e.g. `"tokenizers 0.23.2"`).
pub fn assert_locked(library: &str) {
    let lock = include_str!("../../Cargo.lock");
    let (name, version) = library.split_once(' ').unwrap_or_default();
    let entry = format!("name = \"{name}\"\nversion = \"{version}\"");
    assert!(lock.contains(&entry), "Cargo.lock lacks {entry}");
}
