//! Human-readable views of a shard set: `tessera inspect` and `tessera head`.

use std::fmt::Write as _;
use tessera_reader::{DType, Dataset, FieldLayout};

/// A multi-line summary: identity, layout, splits, shards and statistics.
pub fn summary(ds: &Dataset) -> String {
    let m = ds.manifest();
    let mut s = String::new();
    let _ = writeln!(s, "path:     {}", ds.dir().display());
    let _ = writeln!(s, "name:     {}", m.name);
    let _ = writeln!(s, "hash:     {}", m.artifact_hash);
    let _ = writeln!(
        s,
        "format:   {} v{} ({})",
        m.format, m.format_version, m.created_by
    );
    let total_bytes: u64 = m.shards.iter().map(|x| x.bytes).sum();
    let _ = writeln!(
        s,
        "rows:     {} x {} bytes = {:.1} MB in {} shard(s)",
        m.rows,
        m.layout.stride,
        total_bytes as f64 / 1e6,
        m.shards.len()
    );
    if m.is_compressed() {
        let stored: u64 = m.shards.iter().map(|x| x.file_bytes()).sum();
        let _ = writeln!(
            s,
            "stored:   {:.1} MB zstd-compressed ({:.2}x smaller)",
            stored as f64 / 1e6,
            total_bytes as f64 / stored.max(1) as f64
        );
    }
    let _ = writeln!(s, "\nfields:");
    let _ = writeln!(
        s,
        "  {:<20} {:<6} {:<12} {:>6}",
        "name", "dtype", "shape", "offset"
    );
    for f in &m.layout.fields {
        let _ = writeln!(
            s,
            "  {:<20} {:<6} {:<12} {:>6}",
            f.name,
            f.dtype.name(),
            format!("{:?}", f.shape),
            f.offset
        );
    }
    let _ = writeln!(s, "\nsplits:");
    for sp in &m.splits {
        let _ = writeln!(
            s,
            "  {:<12} rows {:>10}  (from row {})",
            sp.name, sp.rows, sp.start
        );
    }
    if let Some(stats) = m.stats.as_object().filter(|o| !o.is_empty()) {
        let _ = writeln!(s, "\nstatistics (frozen from the training split):");
        for (name, v) in stats {
            let entries = v.as_array().cloned().unwrap_or_default();
            for (j, e) in entries.iter().enumerate() {
                let label = if entries.len() > 1 {
                    format!("{name}[{j}]")
                } else {
                    name.clone()
                };
                let kind = e.get("kind").and_then(|k| k.as_str()).unwrap_or("?");
                let detail = match kind {
                    "standardize" => format!(
                        "mean {:.6} std {:.6}",
                        e.get("mean").and_then(|x| x.as_f64()).unwrap_or(f64::NAN),
                        e.get("std").and_then(|x| x.as_f64()).unwrap_or(f64::NAN)
                    ),
                    "min_max" => format!(
                        "min {} max {}",
                        e.get("min").and_then(|x| x.as_f64()).unwrap_or(f64::NAN),
                        e.get("max").and_then(|x| x.as_f64()).unwrap_or(f64::NAN)
                    ),
                    "vocab" => format!(
                        "{} values, oov id {}",
                        e.get("values")
                            .and_then(|x| x.as_array())
                            .map_or(0, |a| a.len()),
                        e.get("oov").and_then(|x| x.as_i64()).unwrap_or(0)
                    ),
                    _ => String::new(),
                };
                let _ = writeln!(s, "  {label:<20} {kind:<12} {detail}");
            }
        }
    }
    if let Some(scan) = m.build.get("scan") {
        let _ = writeln!(s, "\nbuild: {}", scan);
    }
    s
}

/// Formats one field of one record for display (long vectors elided).
pub fn format_field(record: &[u8], f: &FieldLayout) -> String {
    let n = f.elements() as usize;
    let size = f.dtype.size();
    let off = f.offset as usize;
    let show = n.min(6);
    let mut parts = Vec::with_capacity(show + 1);
    for k in 0..show {
        let at = off + k * size;
        let Some(b) = record.get(at..at + size) else {
            return "<out of range>".into();
        };
        parts.push(format_value(b, f.dtype));
    }
    if n > show {
        parts.push(format!("... ({n} values)"));
    }
    if f.shape.is_empty() {
        parts.pop().unwrap_or_default()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

fn format_value(b: &[u8], d: DType) -> String {
    let a2 = |b: &[u8]| [b[0], b[1]];
    let a4 = |b: &[u8]| [b[0], b[1], b[2], b[3]];
    let a8 = |b: &[u8]| [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
    match d {
        DType::U8 => b[0].to_string(),
        DType::I8 => (b[0] as i8).to_string(),
        DType::U16 => u16::from_le_bytes(a2(b)).to_string(),
        DType::I16 => i16::from_le_bytes(a2(b)).to_string(),
        DType::U32 => u32::from_le_bytes(a4(b)).to_string(),
        DType::I32 => i32::from_le_bytes(a4(b)).to_string(),
        DType::U64 => u64::from_le_bytes(a8(b)).to_string(),
        DType::I64 => i64::from_le_bytes(a8(b)).to_string(),
        DType::F16 => format!("{:.4}", half::f16::from_le_bytes(a2(b)).to_f32()),
        DType::Bf16 => format!("{:.4}", half::bf16::from_le_bytes(a2(b)).to_f32()),
        DType::F32 => format!("{:.6}", f32::from_le_bytes(a4(b))),
        DType::F64 => format!("{:.6}", f64::from_le_bytes(a8(b))),
    }
}

/// The first `n` records as an aligned text table.
pub fn head(ds: &Dataset, n: u64) -> String {
    let fields = &ds.layout().fields;
    let rows: Vec<Vec<String>> = (0..n.min(ds.len()))
        .filter_map(|i| ds.record(i))
        .map(|rec| fields.iter().map(|f| format_field(rec, f)).collect())
        .collect();
    let mut widths: Vec<usize> = fields.iter().map(|f| f.name.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len()).min(60);
        }
    }
    let mut s = String::new();
    let header: Vec<String> = fields
        .iter()
        .zip(&widths)
        .map(|(f, w)| format!("{:<w$}", f.name))
        .collect();
    let _ = writeln!(s, "{}", header.join("  "));
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", cells.join("  "));
    }
    s
}
