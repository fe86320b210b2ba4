//! The artifact hash: the canonical spec, the input fingerprints and the two
//! version numbers combined into the hex blake3 that names an artifact.

use super::{ARTIFACT_HASH_CONTEXT, InputFile};

pub(super) fn is_hex_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The hex blake3 that names an artifact.
///
/// It is computed in blake3's key-derivation mode with the context
/// [`ARTIFACT_HASH_CONTEXT`] over this byte string (integers little-endian,
/// `str(s)` = u64 byte length then the UTF-8 bytes):
///
/// 1. `format_version` as u32, then `semantics_version` as u32;
/// 2. the canonical spec, encoded by [`encode_value`];
/// 3. the number of inputs as u64, then for each input in order:
///    `str(source)`, `str(rel)`, `size` as u64, `str(identity)`, where the
///    identity is the blake3 hex of the bytes, or for a file in an object
///    store `version:<id>` or `etag:<etag>` (unless its bytes were hashed).
///
/// Input order is part of the hash (it fixes the row order). Absolute paths
/// and times are not: moving the data elsewhere keeps the hash unless the
/// spec itself names the new place.
pub fn artifact_hash(
    canonical_spec: &serde_json::Value,
    inputs: &[InputFile],
    format_version: u32,
    semantics_version: u32,
) -> String {
    let mut buf = Vec::with_capacity(4096);
    buf.extend_from_slice(&format_version.to_le_bytes());
    buf.extend_from_slice(&semantics_version.to_le_bytes());
    encode_value(canonical_spec, &mut buf);
    buf.extend_from_slice(&(inputs.len() as u64).to_le_bytes());
    for f in inputs {
        encode_str(&f.source, &mut buf);
        encode_str(&f.rel, &mut buf);
        buf.extend_from_slice(&f.size.to_le_bytes());
        encode_str(&f.blake3, &mut buf);
    }
    let mut hasher = blake3::Hasher::new_derive_key(ARTIFACT_HASH_CONTEXT);
    hasher.update(&buf);
    hasher.finalize().to_hex().to_string()
}

fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends an unambiguous, order-independent encoding of a JSON value: a tag
/// byte, then the payload. Object keys are sorted by their bytes here, so the
/// result does not depend on how `serde_json::Map` orders them (its
/// `preserve_order` feature), and numbers are encoded by value, not by how
/// serde_json formats them.
///
/// | value | encoding |
/// |---|---|
/// | null | `0x00` |
/// | false / true | `0x01` / `0x02` |
/// | integer >= 0 | `0x03`, u64 |
/// | integer < 0 | `0x04`, i64 |
/// | other number | `0x05`, the f64's IEEE bits as u64 |
/// | string | `0x06`, `str(s)` |
/// | array | `0x07`, u64 count, the elements |
/// | object | `0x08`, u64 count, then per key in byte order: `str(key)`, the value |
///
/// `1` and `1.0` are different values here, as they are in serde_json; the
/// spec's canonicalizer decides which one a key holds.
pub fn encode_value(v: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match v {
        Value::Null => out.push(0x00),
        Value::Bool(false) => out.push(0x01),
        Value::Bool(true) => out.push(0x02),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push(0x03);
                out.extend_from_slice(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                out.push(0x04);
                out.extend_from_slice(&i.to_le_bytes());
            } else {
                out.push(0x05);
                let f = n.as_f64().unwrap_or(f64::NAN);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
        Value::String(s) => {
            out.push(0x06);
            encode_str(s, out);
        }
        Value::Array(items) => {
            out.push(0x07);
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                encode_value(item, out);
            }
        }
        Value::Object(map) => {
            out.push(0x08);
            out.extend_from_slice(&(map.len() as u64).to_le_bytes());
            let mut keys: Vec<(&String, &Value)> = map.iter().collect();
            keys.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            for (k, item) in keys {
                encode_str(k, out);
                encode_value(item, out);
            }
        }
    }
}

/// The inputs as the manifest records them: what went into the hash, without
/// machine-specific paths or times.
pub fn manifest_inputs(inputs: &[InputFile]) -> serde_json::Value {
    serde_json::Value::Array(
        inputs
            .iter()
            .map(|f| {
                let mut entry = serde_json::json!({
                    "source": f.source,
                    "path": f.rel,
                    "bytes": f.size,
                });
                let (key, value) = match f.blake3.split_once(':') {
                    Some((kind @ ("etag" | "version"), v)) => (kind, v),
                    _ => ("blake3", f.blake3.as_str()),
                };
                entry[key] = serde_json::Value::from(value);
                entry
            })
            .collect(),
    )
}
