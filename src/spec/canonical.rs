//! The canonical form of a spec: its meaning as JSON, for hashing.
//!
//! Rules (docs/SPEC.md, "Canonical form"):
//! - every default is filled in, every key is always present (`null` when unset);
//! - object keys are written in sorted order, so the JSON text is the same
//!   whether or not serde_json preserves insertion order;
//! - fields and split weights keep the spec's order (it shapes the record and
//!   the split boundaries); sources are sorted by name (their order means nothing);
//! - nothing path-dependent: no source paths, no file lists, no spec location.
//!   The caller hashes the input files' contents beside this;
//! - numbers the user may write either way (`0` or `0.0`) are recorded as f64.
//!
//! A field's and a split's JSON are written (and read back, for serving) by
//! the transform crate's field model.

use super::{Source, SourceFormat, Spec};
use serde_json::{Value, json};

pub(super) fn canonical(spec: &Spec) -> Value {
    let mut sources: Vec<&Source> = spec.sources.iter().collect();
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    let mut v = json!({
        "chunks": { "target_bytes": spec.chunks.target_bytes },
        "fields": spec.fields.iter().map(|f| f.canonical_json()).collect::<Vec<_>>(),
        "filter": spec.filter,
        "name": spec.name,
        "order": { "shuffle_seed": spec.order.shuffle_seed },
        "query": spec.query,
        "shards": {
            // "none" as before compression existed, so uncompressed specs
            // keep their hashes; "zstd:<level>" otherwise.
            "compression": spec.shards.zstd_level.map_or("none".to_string(), |l| format!("zstd:{l}")),
            "target_bytes": spec.shards.target_bytes,
        },
        "sources": sources.into_iter().map(source).collect::<Vec<_>>(),
        "split": spec.split.as_ref().map(|s| s.canonical_json()),
        "version": spec.version,
    });
    // Written only when present, so specs without it keep their hashes.
    if let Some(p) = &spec.pack {
        v["pack"] = p.canonical_json();
    }
    v
}

fn source(s: &Source) -> Value {
    let csv = (s.format == SourceFormat::Csv).then(|| {
        let mut null_values = s.csv.null_values.clone();
        // An empty field is null whatever the list says; written out only
        // when there is a list, so specs without one keep their hash.
        if !null_values.is_empty() {
            null_values.push(String::new());
        }
        null_values.sort();
        null_values.dedup();
        json!({
            "delimiter": char::from(s.csv.delimiter).to_string(),
            "header": s.csv.header,
            "null_values": null_values,
        })
    });
    json!({
        "chunk": s.chunk,
        "csv": csv,
        "format": s.format.name(),
        "name": s.name,
        "partition_columns": s.partition_columns,
    })
}
