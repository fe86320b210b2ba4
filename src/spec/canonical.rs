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

use super::{Field, FieldInput, NonFinite, Source, SourceFormat, Spec, Transform};
use serde_json::{Value, json};

pub(super) fn canonical(spec: &Spec) -> Value {
    let mut sources: Vec<&Source> = spec.sources.iter().collect();
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    json!({
        "chunks": { "target_bytes": spec.chunks.target_bytes },
        "fields": spec.fields.iter().map(field).collect::<Vec<_>>(),
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
        "split": spec.split.as_ref().map(|s| json!({
            "key": s.key,
            "stats_from": s.stats_split,
            "weights": s.weights.iter().map(|(n, w)| json!([n, w])).collect::<Vec<_>>(),
        })),
        "version": spec.version,
    })
}

fn source(s: &Source) -> Value {
    let csv = (s.format == SourceFormat::Csv).then(|| {
        let mut null_values = s.csv.null_values.clone();
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

fn field(f: &Field) -> Value {
    let input = match &f.input {
        FieldInput::Column(c) => json!({ "column": c }),
        FieldInput::Columns(cs) => json!({ "columns": cs }),
        FieldInput::Expr(e) => json!({ "expr": e }),
    };
    json!({
        "bytes": f.bytes,
        "dtype": f.dtype.name(),
        "fill_null": f.fill_null,
        "input": input,
        "length": f.length,
        "name": f.name,
        "nonfinite": match f.nonfinite {
            NonFinite::Error => "error",
            NonFinite::Exclude => "exclude",
        },
        "pad": f.pad,
        "transforms": f.transforms.iter().map(transform).collect::<Vec<_>>(),
    })
}

fn transform(t: &Transform) -> Value {
    match t {
        Transform::Log1p => json!({ "log1p": {} }),
        Transform::Clip { min, max } => json!({ "clip": { "max": max, "min": min } }),
        Transform::Standardize => json!({ "standardize": {} }),
        Transform::MinMax => json!({ "min_max": {} }),
        Transform::HashBucket { buckets } => json!({ "hash_bucket": { "buckets": buckets } }),
        Transform::Vocab {
            min_count,
            max_size,
            oov,
        } => json!({ "vocab": { "max_size": max_size, "min_count": min_count, "oov": oov } }),
        Transform::OneHot { classes } => json!({ "one_hot": { "classes": classes } }),
    }
}
