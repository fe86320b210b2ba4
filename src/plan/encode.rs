//! Arrow record batches -> fixed-stride records in shard files.
//!
//! DataFusion evaluates each field's column or expression; the field's chain
//! ([`Chain`]) says how the values are read and transformed, and this module
//! writes them at the field's offset, checked against the stored dtype.

use super::PlanError;
use super::chain::{Chain, Path};
use super::split::{Splits, row_splits};
use super::stats::Rows;
use super::values::{Binaries, Floats, Ints, Lists, Strings, ValueError, put_float, put_int};
use crate::spec::Spec;
use crate::transform::{self, FrozenStats, NULL_KEY};
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::record_batch::RecordBatch;
use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use tessera_reader::{DType, RecordLayout, ShardInfo, ShardWriter};

/// The output column `name` of `batch`, feeding field `field`.
pub fn column(batch: &RecordBatch, name: &str, field: &str) -> Result<ArrayRef, PlanError> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| PlanError::Encode {
            key: Some(format!("fields.{field}")),
            row: None,
            context: "the query output".into(),
            message: format!("lacks column {name}"),
        })
}

/// The task's output: its shards in order, with the split each belongs to.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct EncodeOutput {
    /// `(split index, shard)` in write order.
    pub shards: Vec<(usize, ShardInfo)>,
    /// Rows written per split.
    pub rows_per_split: Vec<u64>,
    /// Rows that came out of the query (after the filter).
    pub rows_kept: u64,
}

/// The output budget shared by a build's encode tasks (`--max-output`).
#[derive(Debug)]
pub struct OutputBudget {
    /// Bytes of records the build may write.
    pub limit: u64,
    /// How the limit was chosen, for the message.
    pub origin: String,
    written: std::sync::atomic::AtomicU64,
}

impl OutputBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64, origin: impl Into<String>) -> Self {
        OutputBudget {
            limit,
            origin: origin.into(),
            written: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Takes `bytes` from the budget, or fails when they would exceed it.
    pub fn take(&self, bytes: u64) -> Result<(), PlanError> {
        use std::sync::atomic::Ordering;
        let before = self.written.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.limit {
            return Err(self.exceeded(before + bytes));
        }
        Ok(())
    }

    /// The error for an output of `bytes`.
    pub fn exceeded(&self, bytes: u64) -> PlanError {
        PlanError::Query {
            context: "the output".into(),
            message: format!(
                "the records would take more than {} (reached {}), the --max-output limit ({}); \
                 nothing was published. Check the query (a join that multiplies rows?) or raise \
                 the limit with --max-output SIZE",
                crate::cache::format_bytes(self.limit),
                crate::cache::format_bytes(bytes),
                self.origin
            ),
        }
    }
}

/// Writes one task's records into shards of about `target_bytes`, one
/// sequence of shards per split.
pub struct Encoder<'a> {
    chains: Vec<Chain<'a>>,
    layout: &'a RecordLayout,
    frozen: &'a [Option<Vec<FrozenStats>>],
    vocabs: Vec<Option<Vec<HashMap<String, i64>>>>,
    dir: PathBuf,
    chunk: usize,
    target_rows: u64,
    splits: Splits,
    writers: Vec<Option<ShardWriter>>,
    seq: Vec<u32>,
    out: EncodeOutput,
    recs: Vec<u8>,
    bytes: u64,
    budget: Option<&'a OutputBudget>,
}

impl<'a> Encoder<'a> {
    /// An encoder for task `chunk`, writing into `dir`.
    pub fn new(
        spec: &'a Spec,
        layout: &'a RecordLayout,
        frozen: &'a [Option<Vec<FrozenStats>>],
        dir: &FsPath,
        chunk: usize,
        target_bytes: u64,
    ) -> Self {
        let splits = Splits::new(spec);
        let vocabs = frozen
            .iter()
            .map(|fs| {
                fs.as_ref().map(|slots| {
                    slots
                        .iter()
                        .map(|s| match s {
                            FrozenStats::Vocab { values, .. } => values
                                .iter()
                                .enumerate()
                                .map(|(j, v)| (v.clone(), j as i64 + 1))
                                .collect(),
                            _ => HashMap::new(),
                        })
                        .collect()
                })
            })
            .collect();
        let n = splits.names.len();
        Encoder {
            chains: Chain::all(spec),
            layout,
            frozen,
            vocabs,
            dir: dir.to_path_buf(),
            chunk,
            target_rows: (target_bytes.saturating_sub(tessera_reader::HEADER_LEN as u64)
                / layout.stride.max(1))
            .max(1),
            writers: (0..n).map(|_| None).collect(),
            seq: vec![0; n],
            out: EncodeOutput {
                rows_per_split: vec![0; n],
                ..Default::default()
            },
            splits,
            recs: Vec::new(),
            bytes: 0,
            budget: None,
        }
    }

    /// Charges every write to `budget`.
    pub fn with_budget(mut self, budget: Option<&'a OutputBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// Bytes of records written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Encodes and writes one batch of query output.
    pub fn push(&mut self, batch: &RecordBatch, what: &str) -> Result<(), PlanError> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let at = Rows {
            what,
            first: self.out.rows_kept,
        };
        let stride = self.layout.stride as usize;
        let need = n.checked_mul(stride).ok_or_else(|| too_big(n, stride))?;
        self.recs.clear();
        self.recs
            .try_reserve_exact(need)
            .map_err(|_| too_big(n, stride))?;
        self.recs.resize(need, 0);
        for i in 0..self.chains.len() {
            self.encode_field(batch, i, &at)?;
        }
        let splits = row_splits(batch, &self.splits).map_err(|e| at.at_key("split.key", e))?;
        // Append runs of consecutive rows that go to the same split.
        let split_of = |r: usize| splits.as_ref().map_or(0, |v| usize::from(v[r]));
        let mut r = 0;
        while r < n {
            let s = split_of(r);
            let mut e = r + 1;
            while e < n && split_of(e) == s {
                e += 1;
            }
            self.append(s, r, e)?;
            r = e;
        }
        self.out.rows_kept += n as u64;
        Ok(())
    }

    fn append(&mut self, split: usize, mut a: usize, b: usize) -> Result<(), PlanError> {
        let stride = self.layout.stride as usize;
        while a < b {
            let w = match &mut self.writers[split] {
                Some(w) => w,
                slot @ None => {
                    let name = format!(
                        "{}-{:05}-{:04}.bin",
                        self.splits.names[split], self.chunk, self.seq[split]
                    );
                    self.seq[split] += 1;
                    slot.insert(ShardWriter::create(&self.dir, &name, self.layout)?)
                }
            };
            let room = (self.target_rows - w.rows()) as usize;
            let take = room.min(b - a);
            if let Some(budget) = self.budget {
                budget.take((take * stride) as u64)?;
            }
            w.write_records(&self.recs[a * stride..(a + take) * stride])?;
            self.bytes += (take * stride) as u64;
            self.out.rows_per_split[split] += take as u64;
            a += take;
            if w.rows() >= self.target_rows
                && let Some(w) = self.writers[split].take()
            {
                self.out.shards.push((split, w.finish()?));
            }
        }
        Ok(())
    }

    /// Closes the open shards; returns what the task wrote.
    pub fn finish(mut self) -> Result<EncodeOutput, PlanError> {
        for s in 0..self.writers.len() {
            if let Some(w) = self.writers[s].take() {
                self.out.shards.push((s, w.finish()?));
            }
        }
        // Order shards split-major, keeping write order within a split.
        self.out.shards.sort_by_key(|(s, _)| *s);
        Ok(self.out)
    }

    fn encode_field(
        &mut self,
        batch: &RecordBatch,
        i: usize,
        at: &Rows<'_>,
    ) -> Result<(), PlanError> {
        let chain = &self.chains[i];
        let f = chain.field;
        let fl = self
            .layout
            .field(&f.name)
            .ok_or_else(|| PlanError::Encode {
                key: Some(format!("fields.{}", f.name)),
                row: None,
                context: "the record layout".into(),
                message: "the field is missing from the layout".into(),
            })?;
        let w = Writer {
            stride: self.layout.stride as usize,
            off: fl.offset as usize,
            dtype: fl.dtype,
            one_hot: chain.one_hot,
        };
        let fail = |e: ValueError| at.error(&f.name, e);
        let n = batch.num_rows();
        let recs = &mut self.recs;
        for (j, name) in chain.columns().iter().enumerate() {
            let col = column(batch, name, &f.name)?;
            let slot = j * chain.per_value() * w.dtype.size();
            match chain.path {
                Path::Bytes(len) => {
                    let bin = Binaries::read(&col).map_err(fail)?;
                    for r in 0..n {
                        let v = bin.get(r).ok_or_else(|| fail(null_error(r)))?;
                        if v.len() != len {
                            return Err(fail(ValueError {
                                row: r,
                                message: format!(
                                    "the value has {} bytes; the field holds exactly {len}",
                                    v.len()
                                ),
                            }));
                        }
                        let at = r * w.stride + w.off;
                        recs[at..at + len].copy_from_slice(v);
                    }
                }
                Path::Text { buckets } => {
                    let s = Strings::read(&col).map_err(fail)?;
                    let vocab = self
                        .vocabs
                        .get(i)
                        .and_then(|v| v.as_ref())
                        .and_then(|v| v.get(j));
                    let oov = match self
                        .frozen
                        .get(i)
                        .and_then(|x| x.as_ref())
                        .and_then(|x| x.get(j))
                    {
                        Some(FrozenStats::Vocab { oov, .. }) => *oov,
                        _ => 0,
                    };
                    for r in 0..n {
                        let value = s.get(r);
                        let id: i128 = match (buckets, vocab) {
                            (Some(b), _) => i128::from(transform::hash_bucket(
                                value.map(str::as_bytes).unwrap_or(NULL_KEY),
                                b,
                            )),
                            (None, Some(m)) => {
                                i128::from(value.and_then(|v| m.get(v).copied()).unwrap_or(oov))
                            }
                            (None, None) => i128::from(oov),
                        };
                        w.int(recs, r, slot, id)
                            .map_err(|m| fail(ValueError { row: r, message: m }))?;
                    }
                }
                Path::Float => {
                    let stat = self
                        .frozen
                        .get(i)
                        .and_then(|x| x.as_ref())
                        .and_then(|v| v.get(j).or_else(|| v.first()));
                    let put = |recs: &mut [u8], r: usize, k: usize, x: f64| {
                        let at = r * w.stride + w.off + slot + k * w.dtype.size();
                        put_float(&mut recs[at..], w.dtype, chain.apply_float(x, stat))
                            .map_err(|m| fail(ValueError { row: r, message: m }))
                    };
                    match (Lists::read(&col), f.length) {
                        (Some(lists), Some(len)) => {
                            let vals = Floats::read(&lists.child).map_err(|e| {
                                fail(ValueError {
                                    row: 0,
                                    message: format!("a list element: {}", e.message),
                                })
                            })?;
                            for r in 0..n {
                                let range = lists.range(r).unwrap_or(0..0);
                                let mut k = 0;
                                for e in range {
                                    if k == len as usize {
                                        break;
                                    }
                                    let x = vals
                                        .get(e)
                                        .or(f.fill_null)
                                        .ok_or_else(|| fail(null_error(r)))?;
                                    put(recs, r, k, x)?;
                                    k += 1;
                                }
                                for p in k..len as usize {
                                    let at = r * w.stride + w.off + p * w.dtype.size();
                                    put_float(&mut recs[at..], w.dtype, f.pad)
                                        .map_err(|m| fail(ValueError { row: r, message: m }))?;
                                }
                            }
                        }
                        (Some(_), None) => return Err(fail(list_without_length())),
                        (None, _) => {
                            let vals = Floats::read(&col).map_err(fail)?;
                            for r in 0..n {
                                let x = vals
                                    .get(r)
                                    .or(f.fill_null)
                                    .ok_or_else(|| fail(null_error(r)))?;
                                put(recs, r, 0, x)?;
                            }
                        }
                    }
                }
                Path::Int => {
                    let fill = chain
                        .int_fill()
                        .map_err(|m| fail(ValueError { row: 0, message: m }))?;
                    let value = |r: usize, v: Option<i128>| -> Result<i128, PlanError> {
                        let v = v.or(fill).ok_or_else(|| fail(null_error(r)))?;
                        chain
                            .apply_int(v)
                            .map_err(|m| fail(ValueError { row: r, message: m }))
                    };
                    match (Lists::read(&col), f.length) {
                        (Some(lists), Some(len)) => {
                            let vals = Ints::read(&lists.child).map_err(|e| {
                                fail(ValueError {
                                    row: 0,
                                    message: format!("a list element: {}", e.message),
                                })
                            })?;
                            for r in 0..n {
                                let range = lists.range(r).unwrap_or(0..0);
                                let mut k = 0;
                                for e in range {
                                    if k == len as usize {
                                        break;
                                    }
                                    let v = value(r, vals.get(e))?;
                                    w.int(recs, r, slot + k * w.dtype.size(), v)
                                        .map_err(|m| fail(ValueError { row: r, message: m }))?;
                                    k += 1;
                                }
                                for p in k..len as usize {
                                    let at = r * w.stride + w.off + p * w.dtype.size();
                                    put_float(&mut recs[at..], w.dtype, f.pad)
                                        .map_err(|m| fail(ValueError { row: r, message: m }))?;
                                }
                            }
                        }
                        (Some(_), None) => return Err(fail(list_without_length())),
                        (None, _) => {
                            let vals = Ints::read(&col).map_err(fail)?;
                            for r in 0..n {
                                let v = value(r, vals.get(r))?;
                                w.int(recs, r, slot, v)
                                    .map_err(|m| fail(ValueError { row: r, message: m }))?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Where one field's values go in the records.
#[derive(Clone, Copy)]
struct Writer {
    stride: usize,
    off: usize,
    dtype: DType,
    one_hot: Option<u64>,
}

impl Writer {
    /// Writes integer `v` (or its one-hot expansion) for row `r` at byte
    /// `slot` of the field.
    #[inline]
    fn int(&self, recs: &mut [u8], r: usize, slot: usize, v: i128) -> Result<(), String> {
        let base = r * self.stride + self.off + slot;
        match self.one_hot {
            Some(classes) => {
                if v < 0 || v >= i128::from(classes) {
                    return Err(format!("class {v} is outside one_hot's 0..{classes}"));
                }
                put_int(
                    &mut recs[base + v as usize * self.dtype.size()..],
                    self.dtype,
                    1,
                )
            }
            None => put_int(&mut recs[base..], self.dtype, v),
        }
    }
}

fn null_error(row: usize) -> ValueError {
    ValueError {
        row,
        message: "the value is null (set fill_null on the field to replace nulls)".into(),
    }
}

fn list_without_length() -> ValueError {
    ValueError {
        row: 0,
        message: "the column holds lists; set `length` to pad or truncate them".into(),
    }
}

fn too_big(rows: usize, stride: usize) -> PlanError {
    PlanError::Encode {
        key: Some("fields".into()),
        row: None,
        context: "the record buffer".into(),
        message: format!(
            "{rows} records of {stride} bytes cannot be allocated; make the records smaller"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::stats::StatsPartial;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use std::sync::Arc;

    fn spec(fields: &str, split: bool) -> Spec {
        let text = format!(
            "version: 1\nname: t\nsources:\n  s: {{ path: x.parquet }}\nfields:\n{fields}{}",
            if split {
                "split: { key: k, weights: { train: 0.5, val: 0.5 } }\n"
            } else {
                ""
            }
        );
        Spec::parse(&text, FsPath::new("/tmp/t.yaml")).expect("spec")
    }

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).expect("batch")
    }

    /// Encodes `b` with `frozen` statistics and returns the records.
    fn encode(
        s: &Spec,
        b: &RecordBatch,
        frozen: &[Option<Vec<FrozenStats>>],
    ) -> (Vec<u8>, RecordLayout) {
        let layout = crate::build::layout_of(s).expect("layout");
        let dir = tempfile::tempdir().expect("tmp");
        let mut enc = Encoder::new(s, &layout, frozen, dir.path(), 0, 1 << 20);
        enc.push(b, "test").expect("push");
        let out = enc.finish().expect("finish");
        let mut bytes = Vec::new();
        for (_, shard) in &out.shards {
            let raw = std::fs::read(dir.path().join(&shard.file)).expect("shard");
            bytes.extend_from_slice(&raw[tessera_reader::HEADER_LEN..]);
        }
        (bytes, layout)
    }

    #[test]
    fn statistics_and_encoding_agree_on_a_hand_built_batch() {
        let s = spec(
            "  x: { dtype: f64, column: x, fill_null: 1, transform: [log1p, standardize] }\n\
             \x20 k: { dtype: i32, column: k, transform: { vocab: {} } }\n",
            false,
        );
        let b = batch(vec![
            (
                "__f0",
                Arc::new(Float64Array::from(vec![Some(0.0), None, Some(3.0)])) as ArrayRef,
            ),
            (
                "__f1",
                Arc::new(StringArray::from(vec![Some("b"), Some("a"), Some("b")])),
            ),
        ]);
        let mut stats = StatsPartial::new(&s);
        let at = crate::plan::stats::Rows {
            what: "test",
            first: 0,
        };
        stats.update(&s, &b, &at).expect("stats");
        let frozen = stats.freeze(&s, u64::MAX).expect("freeze");
        // ln(1+x) of 0, fill 1, 3: 0, ln 2, ln 4.
        let ys = [0.0f64, 2f64.ln(), 4f64.ln()];
        let mean = ys.iter().sum::<f64>() / 3.0;
        let std = (ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
        let (bytes, layout) = encode(&s, &b, &frozen);
        let stride = layout.stride as usize;
        for (r, y) in ys.iter().enumerate() {
            let rec = &bytes[r * stride..(r + 1) * stride];
            let x = f64::from_le_bytes(rec[0..8].try_into().expect("8 bytes"));
            assert!((x - (y - mean) / std).abs() < 1e-12, "row {r}: {x}");
            let k = i32::from_le_bytes(rec[8..12].try_into().expect("4 bytes"));
            // "b" is the most frequent value: id 1; "a" id 2.
            assert_eq!(k, if r == 1 { 2 } else { 1 }, "row {r}");
        }
    }

    #[test]
    fn one_hot_and_exact_integers_land_at_their_offsets() {
        let s = spec(
            "  c: { dtype: u8, column: c, transform: { one_hot: 3 } }\n\
             \x20 n: { dtype: i64, column: n }\n",
            false,
        );
        let b = batch(vec![
            ("__f0", Arc::new(Int64Array::from(vec![2, 0])) as ArrayRef),
            ("__f1", Arc::new(Int64Array::from(vec![-7, i64::MAX]))),
        ]);
        let (bytes, layout) = encode(&s, &b, &[None, None]);
        let stride = layout.stride as usize;
        let n_off = layout.field("n").expect("n").offset as usize;
        let c_off = layout.field("c").expect("c").offset as usize;
        assert_eq!(&bytes[c_off..c_off + 3], &[0, 0, 1]);
        assert_eq!(&bytes[stride + c_off..stride + c_off + 3], &[1, 0, 0]);
        let n1 = i64::from_le_bytes(
            bytes[stride + n_off..stride + n_off + 8]
                .try_into()
                .expect("8"),
        );
        assert_eq!(n1, i64::MAX);
        // A class outside 0..3 is an error naming the row.
        let bad = batch(vec![
            ("__f0", Arc::new(Int64Array::from(vec![1, 3])) as ArrayRef),
            ("__f1", Arc::new(Int64Array::from(vec![0, 0]))),
        ]);
        let layout = crate::build::layout_of(&s).expect("layout");
        let dir = tempfile::tempdir().expect("tmp");
        let mut enc = Encoder::new(&s, &layout, &[None, None], dir.path(), 0, 1 << 20);
        let e = enc.push(&bad, "test").expect_err("class 3").to_string();
        assert!(
            e.contains("row 2") && e.contains("class 3 is outside one_hot's 0..3"),
            "{e}"
        );
    }

    #[test]
    fn rows_go_to_their_split_in_order() {
        let s = spec("  v: { dtype: i64, column: v }\n", true);
        let keys: Vec<String> = (0..64).map(|i| format!("key{i}")).collect();
        let b = batch(vec![
            (
                "__f0",
                Arc::new(Int64Array::from((0..64).collect::<Vec<i64>>())) as ArrayRef,
            ),
            ("__split", Arc::new(StringArray::from(keys.clone()))),
        ]);
        let layout = crate::build::layout_of(&s).expect("layout");
        let dir = tempfile::tempdir().expect("tmp");
        let mut enc = Encoder::new(&s, &layout, &[None], dir.path(), 0, 1 << 20);
        enc.push(&b, "test").expect("push");
        let out = enc.finish().expect("finish");
        let cum = Splits::new(&s).cumulative;
        for (split, shard) in &out.shards {
            let raw = std::fs::read(dir.path().join(&shard.file)).expect("shard");
            let vals: Vec<i64> = raw[tessera_reader::HEADER_LEN..]
                .chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
                .collect();
            let want: Vec<i64> = (0..64)
                .filter(|&i| transform::split_of(keys[i as usize].as_bytes(), &cum) == *split)
                .collect();
            assert_eq!(vals, want, "split {split}");
        }
        assert_eq!(out.rows_per_split.iter().sum::<u64>(), 64);
    }
}
