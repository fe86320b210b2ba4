//! Human-readable views of a shard set: `tessera inspect` and `tessera head`.

use crate::accumulators::FrozenStats;
use std::fmt::Write as _;
use tessera_reader::{DType, Dataset, FieldLayout, InlineVocab, StatsEntry, VocabEntry};

/// How many values of each vocabulary `tessera inspect` lists (the most
/// frequent, which are also the lowest ids).
pub const VOCAB_SHOWN: usize = 10;

/// Values longer than this are cut in the vocabulary listing.
const VALUE_WIDTH: usize = 48;

/// A multi-line summary: identity, layout, splits, statistics and the build.
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
        "rows:     {} x {} bytes = {} in {} shard(s)",
        m.rows,
        m.layout.stride,
        crate::cache::format_bytes(total_bytes),
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
    // The manifest keeps the splits in spec order.
    let _ = writeln!(s, "\nsplits:");
    for sp in &m.splits {
        let _ = writeln!(
            s,
            "  {:<12} rows {:>10}  (from row {})",
            sp.name, sp.rows, sp.start
        );
    }
    s.push_str(&statistics(m, ds.dir()));
    if let Some(line) = build_line(m) {
        let _ = writeln!(s, "\nbuild:    {line}");
    }
    s
}

/// The frozen statistics, field by field in record order; a vocabulary with
/// its first values, ids and counts.
fn statistics(m: &tessera_reader::Manifest, dir: &std::path::Path) -> String {
    let Some(stats) = m.stats.as_object().filter(|o| !o.is_empty()) else {
        return String::new();
    };
    let from = m
        .spec
        .pointer("/split/stats_from")
        .and_then(|v| v.as_str())
        .map_or_else(|| "all rows".to_string(), |n| format!("split {n:?}"));
    let mut s = String::new();
    let _ = writeln!(s, "\nstatistics (frozen from {from}):");
    // Record order, then anything the layout does not name (none in sets
    // the compiler writes).
    let mut names: Vec<&str> = m
        .layout
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .filter(|n| stats.contains_key(*n))
        .collect();
    names.extend(
        stats
            .keys()
            .map(String::as_str)
            .filter(|k| !m.layout.fields.iter().any(|f| f.name == *k)),
    );
    for name in names {
        let entries = match m.stats_of(name) {
            Ok(entries) => entries.unwrap_or_default(),
            Err(err) => {
                let _ = writeln!(s, "  {name:<20} cannot be read: {err}");
                continue;
            }
        };
        for (j, e) in entries.iter().enumerate() {
            let label = if entries.len() > 1 {
                format!("{name}[{j}]")
            } else {
                name.to_string()
            };
            match e {
                StatsEntry::Vocab(VocabEntry::File { file, size, oov }) => {
                    s.push_str(&describe_vocab_file(&label, dir, file, *size, *oov));
                }
                inline => match inline.clone().into_inline() {
                    Ok(frozen) => s.push_str(&describe(&label, &frozen)),
                    Err(err) => {
                        let _ = writeln!(s, "  {label:<20} cannot be read: {err}");
                    }
                },
            }
        }
    }
    s
}

/// A vocabulary kept in a file of the set: its size, the file, and the
/// first values, read from the file's first lines only.
fn describe_vocab_file(
    label: &str,
    dir: &std::path::Path,
    file: &str,
    size: u64,
    oov: i64,
) -> String {
    use std::io::BufRead as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  {label:<20} {:<12} {} in {file}; other values and nulls get {oov}",
        "vocab",
        ids(size)
    );
    let path = dir.join(file);
    let head: Result<Vec<(String, u64)>, String> = std::fs::File::open(&path)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            std::io::BufReader::new(f)
                .lines()
                .take(VOCAB_SHOWN)
                .enumerate()
                .map(|(i, line)| {
                    let line = line.map_err(|e| e.to_string())?;
                    tessera_reader::parse_vocab_line(&line)
                        .map_err(|e| format!("line {}: {e}", i + 1))
                })
                .collect()
        });
    let head = match head {
        Ok(head) => head,
        Err(err) => {
            let _ = writeln!(s, "{:23}cannot be read: {}: {err}", "", path.display());
            return s;
        }
    };
    if head.is_empty() {
        return s;
    }
    let _ = writeln!(s, "{:23}{:>6} {:>10}  value", "", "id", "count");
    for (i, (v, count)) in head.iter().enumerate() {
        let _ = writeln!(s, "{:23}{:>6} {count:>10}  {}", "", i + 1, quoted(v));
    }
    if size > head.len() as u64 {
        let _ = writeln!(
            s,
            "{:23}... and {} more (in {file})",
            "",
            size - head.len() as u64
        );
    }
    s
}

/// `N values (ids 1 to N)`.
fn ids(n: u64) -> String {
    match n {
        0 => "no values".to_string(),
        1 => "1 value (id 1)".to_string(),
        n => format!("{n} values (ids 1 to {n})"),
    }
}

/// One statistic: a line, and for a vocabulary a small table under it.
fn describe(label: &str, stats: &FrozenStats) -> String {
    let mut s = String::new();
    match stats {
        FrozenStats::Standardize { mean, std, count } => {
            let _ = writeln!(
                s,
                "  {label:<20} {:<12} mean {mean:.6}  std {std:.6}  ({count} values)",
                "standardize"
            );
        }
        FrozenStats::MinMax { min, max, count } => {
            let _ = writeln!(
                s,
                "  {label:<20} {:<12} min {min}  max {max}  ({count} values)",
                "min_max"
            );
        }
        FrozenStats::Vocab(InlineVocab {
            values,
            counts,
            oov,
        }) => {
            let _ = writeln!(
                s,
                "  {label:<20} {:<12} {}; other values and nulls get {oov}",
                "vocab",
                ids(values.len() as u64)
            );
            if values.is_empty() {
                return s;
            }
            let _ = writeln!(s, "{:23}{:>6} {:>10}  value", "", "id", "count");
            for (i, v) in values.iter().take(VOCAB_SHOWN).enumerate() {
                let count = counts.get(i).map_or("-".to_string(), |c| c.to_string());
                let _ = writeln!(s, "{:23}{:>6} {count:>10}  {}", "", i + 1, quoted(v));
            }
            if values.len() > VOCAB_SHOWN {
                let _ = writeln!(
                    s,
                    "{:23}... and {} more (`tessera inspect --json` lists them all)",
                    "",
                    values.len() - VOCAB_SHOWN
                );
            }
        }
    }
    s
}

/// A vocabulary value as a quoted, escaped string (so an empty value or
/// trailing spaces show), cut to [`VALUE_WIDTH`] characters.
fn quoted(v: &str) -> String {
    if v.chars().count() <= VALUE_WIDTH {
        return format!("{v:?}");
    }
    let cut: String = v.chars().take(VALUE_WIDTH).collect();
    format!("{cut:?}...")
}

/// What the build read and kept, from the manifest's `build` record.
fn build_line(m: &tessera_reader::Manifest) -> Option<String> {
    let build = match m.build_record() {
        Ok(b) => b?,
        Err(err) => return Some(format!("cannot be read: {err}")),
    };
    let scan = build.scan?;
    let mut line = format!(
        "{} rows scanned ({}), {} kept",
        scan.rows_scanned,
        crate::cache::format_bytes(scan.bytes_scanned),
        build.rows_kept.map_or("?".into(), |k| k.to_string())
    );
    let groups = scan.row_groups_pruned + scan.row_groups_matched;
    if groups > 0 || scan.files_pruned > 0 {
        let _ = write!(
            line,
            "; the filter pruned {} file(s) and {} of {groups} row groups",
            scan.files_pruned, scan.row_groups_pruned
        );
    }
    if let Some(plan) = &build.plan {
        let chunks = build.chunks;
        let _ = write!(
            line,
            "; plan {plan}, {chunks} task{}",
            if chunks == 1 { "" } else { "s" }
        );
    }
    Some(line)
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
        DType::F16 => fixed(f64::from(half::f16::from_le_bytes(a2(b)).to_f32()), 4),
        DType::Bf16 => fixed(f64::from(half::bf16::from_le_bytes(a2(b)).to_f32()), 4),
        DType::F32 => fixed(f64::from(f32::from_le_bytes(a4(b))), 6),
        DType::F64 => fixed(f64::from_le_bytes(a8(b)), 6),
    }
}

/// `x` with `digits` decimals, trailing zeros dropped (`1`, `0.5`,
/// `-0.808653`), so one-hot vectors and whole numbers read as such.
fn fixed(x: f64, digits: usize) -> String {
    let s = format!("{x:.digits$}");
    if !x.is_finite() || !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.').to_string()
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
    let _ = writeln!(s, "{}", header.join("  ").trim_end());
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", cells.join("  ").trim_end());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_drop_trailing_zeros_only() {
        assert_eq!(fixed(1.0, 6), "1");
        assert_eq!(fixed(0.0, 6), "0");
        assert_eq!(fixed(-0.5, 6), "-0.5");
        assert_eq!(fixed(-0.8086531, 6), "-0.808653");
        assert_eq!(fixed(100.0, 4), "100");
        assert_eq!(fixed(f64::NAN, 6), "NaN");
        assert_eq!(fixed(f64::INFINITY, 6), "inf");
    }

    #[test]
    fn a_long_vocabulary_shows_its_first_values_quoted() {
        let values: Vec<String> = (0..12).map(|i| format!("v{i}")).collect();
        let mut values = values;
        values[1] = String::new();
        values[2] = "x".repeat(60);
        let counts: Vec<u64> = (0..12).rev().map(|c| c + 1).collect();
        let text = describe(
            "f",
            &FrozenStats::Vocab(InlineVocab {
                values,
                counts,
                oov: -1,
            }),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with("12 values (ids 1 to 12); other values and nulls get -1"));
        assert_eq!(lines.len(), 1 + 1 + VOCAB_SHOWN + 1, "{text}");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["1", "12", "\"v0\""]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["2", "11", "\"\""]
        );
        assert!(
            lines[4].ends_with(&format!("{:?}...", "x".repeat(VALUE_WIDTH))),
            "{text}"
        );
        assert!(lines[12].trim().starts_with("... and 2 more"), "{text}");
    }
}
