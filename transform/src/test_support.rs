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
