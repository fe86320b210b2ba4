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
    // Float SUM and AVG became exact sums (docs/SPEC.md, "Determinism"):
    // a query that may call them hashes differently from before; the
    // others keep their hashes.
    if spec.query.as_deref().is_some_and(calls_sum_or_avg) {
        v["float_sums"] = json!("exact");
    }
    v
}

/// Whether SQL text may call `SUM`, `AVG` or `MEAN` (any case): one of the
/// words, not part of a longer name, then `(` after optional space. Text in
/// strings and comments counts too, which only costs a cache miss.
fn calls_sum_or_avg(sql: &str) -> bool {
    let s = sql.to_ascii_lowercase();
    let b = s.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    ["sum", "avg", "mean"].iter().any(|w| {
        s.match_indices(w).any(|(i, _)| {
            let before_ok = i == 0 || !ident(b[i - 1]);
            let rest = s[i + w.len()..].trim_start();
            before_ok && rest.starts_with('(')
        })
    })
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

#[cfg(test)]
mod tests {
    use super::calls_sum_or_avg;

    #[test]
    fn finds_sum_and_avg_calls_only() {
        for q in [
            "SELECT SUM(x) FROM t",
            "select k, avg (x) from t group by k",
            "SELECT mean(x) FROM t",
            "SELECT\n  Sum(\n x) FROM t",
        ] {
            assert!(calls_sum_or_avg(q), "{q}");
        }
        for q in [
            "SELECT checksum(x), summary, average FROM t",
            "SELECT x AS sum FROM t",
            "SELECT my_avg(x) FROM t",
        ] {
            assert!(!calls_sum_or_avg(q), "{q}");
        }
    }
}
