//! Arrow record batches -> fixed-stride records, and the statistics pass.
//!
//! DataFusion evaluates each field's column or expression; the transforms that
//! need frozen statistics (and the cheap per-value ones) are applied here, so
//! the exact arithmetic is ours and documented in docs/SPEC.md.

use super::PlanError;
use crate::spec::{FieldInput, Spec, Transform};
use crate::transform::{self, Counts, FrozenStats, Moments, NULL_KEY};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, PrimitiveArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    ArrowPrimitiveType, DataType, Float64Type, Int64Type, UInt64Type,
};
use datafusion::arrow::record_batch::RecordBatch;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tessera_reader::{DType, RecordLayout, ShardInfo, ShardWriter};

fn enc_err(context: &str, message: String) -> PlanError {
    PlanError::Encode {
        context: context.to_string(),
        message,
    }
}

/// The Arrow columns feeding field `i`: one per stacked column, else one.
fn field_columns(
    batch: &RecordBatch,
    spec: &Spec,
    i: usize,
    ctx: &str,
) -> Result<Vec<ArrayRef>, PlanError> {
    let f = &spec.fields[i];
    let names: Vec<String> = match &f.input {
        FieldInput::Columns(cs) => (0..cs.len()).map(|j| format!("__f{i}_{j}")).collect(),
        _ => vec![format!("__f{i}")],
    };
    names
        .iter()
        .map(|n| {
            batch.column_by_name(n).cloned().ok_or_else(|| {
                enc_err(
                    ctx,
                    format!("field {:?}: query output lacks column {n}", f.name),
                )
            })
        })
        .collect()
}

/// Reads strings from any Arrow string type.
enum Strings<'a> {
    Utf8(&'a datafusion::arrow::array::StringArray),
    Large(&'a datafusion::arrow::array::LargeStringArray),
    View(&'a datafusion::arrow::array::StringViewArray),
}

impl Strings<'_> {
    #[inline]
    fn get(&self, r: usize) -> Option<&str> {
        match self {
            Strings::Utf8(a) => a.is_valid(r).then(|| a.value(r)),
            Strings::Large(a) => a.is_valid(r).then(|| a.value(r)),
            Strings::View(a) => a.is_valid(r).then(|| a.value(r)),
        }
    }
}

/// Reads byte strings from any Arrow binary type.
enum Binaries<'a> {
    Binary(&'a datafusion::arrow::array::BinaryArray),
    Large(&'a datafusion::arrow::array::LargeBinaryArray),
    View(&'a datafusion::arrow::array::BinaryViewArray),
    Fixed(&'a datafusion::arrow::array::FixedSizeBinaryArray),
}

impl Binaries<'_> {
    #[inline]
    fn get(&self, r: usize) -> Option<&[u8]> {
        match self {
            Binaries::Binary(a) => a.is_valid(r).then(|| a.value(r)),
            Binaries::Large(a) => a.is_valid(r).then(|| a.value(r)),
            Binaries::View(a) => a.is_valid(r).then(|| a.value(r)),
            Binaries::Fixed(a) => a.is_valid(r).then(|| a.value(r)),
        }
    }
}

fn as_strings<'a>(
    arr: &'a ArrayRef,
    holder: &'a mut Option<ArrayRef>,
    ctx: &str,
    field: &str,
) -> Result<Strings<'a>, PlanError> {
    match arr.data_type() {
        DataType::Utf8 => Ok(Strings::Utf8(arr.as_string::<i32>())),
        DataType::LargeUtf8 => Ok(Strings::Large(arr.as_string::<i64>())),
        DataType::Utf8View => Ok(Strings::View(arr.as_string_view())),
        _ => {
            let c = cast(arr, &DataType::Utf8)
                .map_err(|e| enc_err(ctx, format!("field {field:?}: cannot read as text: {e}")))?;
            *holder = Some(c);
            match holder {
                Some(c) => Ok(Strings::Utf8(c.as_string::<i32>())),
                None => Err(enc_err(
                    ctx,
                    format!("field {field:?}: cannot read as text"),
                )),
            }
        }
    }
}

/// Casts a column to the primitive Arrow type `T` (`what` names it in errors).
fn cast_to<T: ArrowPrimitiveType>(
    arr: &ArrayRef,
    ctx: &str,
    field: &str,
    what: &str,
) -> Result<PrimitiveArray<T>, PlanError> {
    let c = cast(arr, &T::DATA_TYPE).map_err(|e| {
        enc_err(
            ctx,
            format!(
                "field {field:?}: {} cannot be read as {what}: {e}",
                arr.data_type()
            ),
        )
    })?;
    Ok(c.as_primitive::<T>().clone())
}

fn to_f64(arr: &ArrayRef, ctx: &str, field: &str) -> Result<Float64Array, PlanError> {
    cast_to::<Float64Type>(arr, ctx, field, "a number")
}

/// Whether a field's values travel as f64 (any float dtype or numeric
/// transform) rather than exact integers.
fn float_path(f: &crate::spec::Field) -> bool {
    f.dtype.is_float()
        || f.transforms.iter().any(|t| {
            matches!(
                t,
                Transform::Log1p
                    | Transform::Clip { .. }
                    | Transform::Standardize
                    | Transform::MinMax
            )
        })
}

fn string_path(f: &crate::spec::Field) -> bool {
    matches!(
        f.transforms.first(),
        Some(Transform::HashBucket { .. } | Transform::Vocab { .. })
    )
}

/// The per-value numeric transforms before the statistics transform, applied
/// in the statistics pass (so statistics see what the encoder will see).
#[inline]
fn pre_stats(f: &crate::spec::Field, mut x: f64) -> f64 {
    for t in &f.transforms {
        match t {
            Transform::Log1p => x = transform::log1p(x),
            Transform::Clip { min, max } => x = transform::clip(x, *min, *max),
            Transform::Standardize | Transform::MinMax => break,
            _ => {}
        }
    }
    x
}

/// Split index per row (all 0 without a split).
fn row_splits(
    batch: &RecordBatch,
    spec: &Spec,
    cumulative: &[f64],
    ctx: &str,
) -> Result<Option<Vec<u8>>, PlanError> {
    if spec.split.is_none() {
        return Ok(None);
    }
    let col = batch
        .column_by_name("__split")
        .cloned()
        .ok_or_else(|| enc_err(ctx, "query output lacks the split key".into()))?;
    let mut holder = None;
    let s = as_strings(&col, &mut holder, ctx, "split.key")?;
    let out = (0..batch.num_rows())
        .map(|r| {
            let key = s.get(r).map(str::as_bytes).unwrap_or(NULL_KEY);
            transform::split_of(key, cumulative) as u8
        })
        .collect();
    Ok(Some(out))
}

/// Cumulative normalized split weights.
pub(crate) fn cumulative_weights(spec: &Spec) -> Vec<f64> {
    let Some(split) = &spec.split else {
        return vec![1.0];
    };
    let total: f64 = split.weights.iter().map(|(_, w)| w).sum();
    let mut acc = 0.0;
    let mut out: Vec<f64> = split
        .weights
        .iter()
        .map(|(_, w)| {
            acc += w / total;
            acc
        })
        .collect();
    if let Some(last) = out.last_mut() {
        *last = 1.0;
    }
    out
}

/// Index of the statistics split.
fn stats_split_index(spec: &Spec) -> usize {
    spec.split
        .as_ref()
        .and_then(|s| s.weights.iter().position(|(n, _)| *n == s.stats_split))
        .unwrap_or(0)
}

/// Mergeable statistics of one chunk: per field needing them, one slot per
/// stacked column (or one for a scalar or list field).
#[derive(Clone, Debug)]
pub struct StatsPartial {
    slots: Vec<(usize, Vec<Slot>)>,
    /// Cumulative split weights and the statistics split, fixed by the spec.
    cumulative: Vec<f64>,
    stats_split: u8,
}

#[derive(Clone, Debug)]
enum Slot {
    Moments(Moments),
    Counts(Counts),
}

impl StatsPartial {
    /// Empty statistics for `fields`.
    pub fn new(spec: &Spec, fields: &[usize]) -> Self {
        let slots = fields
            .iter()
            .map(|&i| {
                let f = &spec.fields[i];
                let n = match &f.input {
                    FieldInput::Columns(cs) => cs.len(),
                    _ => 1,
                };
                let slot = if string_path(f) {
                    Slot::Counts(Counts::default())
                } else {
                    Slot::Moments(Moments::new())
                };
                (i, vec![slot; n])
            })
            .collect();
        StatsPartial {
            slots,
            cumulative: cumulative_weights(spec),
            stats_split: stats_split_index(spec) as u8,
        }
    }

    pub(crate) fn update(
        &mut self,
        spec: &Spec,
        batch: &RecordBatch,
        ctx: &str,
    ) -> Result<(), PlanError> {
        let splits = row_splits(batch, spec, &self.cumulative, ctx)?;
        let want = self.stats_split;
        let keep = |r: usize| splits.as_ref().is_none_or(|s| s[r] == want);
        for (i, slots) in &mut self.slots {
            let f = &spec.fields[*i];
            let cols = field_columns(batch, spec, *i, ctx)?;
            for (col, slot) in cols.iter().zip(slots.iter_mut()) {
                match slot {
                    Slot::Counts(c) => {
                        let mut holder = None;
                        let s = as_strings(col, &mut holder, ctx, &f.name)?;
                        for r in (0..batch.num_rows()).filter(|&r| keep(r)) {
                            if let Some(v) = s.get(r) {
                                c.push(v);
                            }
                        }
                    }
                    Slot::Moments(m) => {
                        let values = list_or_scalar_f64(col, ctx, &f.name)?;
                        for r in (0..batch.num_rows()).filter(|&r| keep(r)) {
                            values.for_each(r, f.fill_null, |x| m.push(pre_stats(f, x)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Folds a later chunk's statistics into these.
    pub fn merge(&mut self, other: StatsPartial) {
        for ((_, mine), (_, theirs)) in self.slots.iter_mut().zip(other.slots) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                match (a, b) {
                    (Slot::Moments(a), Slot::Moments(b)) => a.merge(&b),
                    (Slot::Counts(a), Slot::Counts(b)) => a.merge(b),
                    _ => {}
                }
            }
        }
    }

    /// Freezes the statistics: per field, one entry per slot.
    pub fn freeze(&self, spec: &Spec) -> Vec<Option<Vec<FrozenStats>>> {
        let mut out = vec![None; spec.fields.len()];
        for (i, slots) in &self.slots {
            let f = &spec.fields[*i];
            let kind = f.transforms.iter().find(|t| super::needs_stats(t));
            let frozen = slots
                .iter()
                .map(|s| match (s, kind) {
                    (Slot::Moments(m), Some(Transform::MinMax)) => FrozenStats::MinMax {
                        min: if m.count > 0 { m.min } else { 0.0 },
                        max: if m.count > 0 { m.max } else { 0.0 },
                        count: m.count,
                    },
                    (Slot::Moments(m), _) => FrozenStats::Standardize {
                        mean: m.mean,
                        std: m.std(),
                        count: m.count,
                    },
                    (
                        Slot::Counts(c),
                        Some(Transform::Vocab {
                            min_count,
                            max_size,
                            oov,
                        }),
                    ) => {
                        let v = c.freeze(*min_count, *max_size);
                        FrozenStats::Vocab {
                            counts: v.iter().map(|(_, n)| *n).collect(),
                            values: v.into_iter().map(|(s, _)| s).collect(),
                            oov: *oov,
                        }
                    }
                    (Slot::Counts(_), _) => FrozenStats::Vocab {
                        values: vec![],
                        counts: vec![],
                        oov: 0,
                    },
                })
                .collect();
            out[*i] = Some(frozen);
        }
        out
    }
}

/// A numeric column that is either scalar or a list per row.
enum NumValues {
    Scalar(Float64Array),
    List {
        offsets: Vec<usize>,
        values: Float64Array,
        valid: Vec<bool>,
    },
}

impl NumValues {
    /// Calls `f` for each element of row `r` (nothing for a null list), with
    /// `None` for a null element.
    #[inline]
    fn for_each_opt(&self, r: usize, mut f: impl FnMut(Option<f64>)) {
        match self {
            NumValues::Scalar(a) => f(a.is_valid(r).then(|| a.value(r))),
            NumValues::List {
                offsets,
                values,
                valid,
            } => {
                if valid[r] {
                    for k in offsets[r]..offsets[r + 1] {
                        f(values.is_valid(k).then(|| values.value(k)));
                    }
                }
            }
        }
    }

    #[inline]
    fn for_each(&self, r: usize, fill: Option<f64>, mut f: impl FnMut(f64)) {
        match self {
            NumValues::Scalar(a) => {
                if a.is_valid(r) {
                    f(a.value(r));
                } else if let Some(x) = fill {
                    f(x);
                }
            }
            NumValues::List {
                offsets,
                values,
                valid,
            } => {
                if !valid[r] {
                    return;
                }
                for k in offsets[r]..offsets[r + 1] {
                    if values.is_valid(k) {
                        f(values.value(k));
                    } else if let Some(x) = fill {
                        f(x);
                    }
                }
            }
        }
    }
}

/// Lists (List, LargeList, FixedSizeList) are flattened with row offsets;
/// anything else is read as a scalar number.
fn list_or_scalar_f64(col: &ArrayRef, ctx: &str, field: &str) -> Result<NumValues, PlanError> {
    let n = col.len();
    let (offsets, child): (Vec<usize>, ArrayRef) = match col.data_type() {
        DataType::List(_) => {
            let l = col.as_list::<i32>();
            (
                l.value_offsets().iter().map(|&o| o as usize).collect(),
                l.values().clone(),
            )
        }
        DataType::LargeList(_) => {
            let l = col.as_list::<i64>();
            (
                l.value_offsets().iter().map(|&o| o as usize).collect(),
                l.values().clone(),
            )
        }
        DataType::FixedSizeList(_, k) => {
            let l = col.as_fixed_size_list();
            let k = *k as usize;
            let base = l.offset() * k;
            ((0..=n).map(|r| base + r * k).collect(), l.values().clone())
        }
        _ => return Ok(NumValues::Scalar(to_f64(col, ctx, field)?)),
    };
    Ok(NumValues::List {
        valid: (0..n).map(|r| col.is_valid(r)).collect(),
        values: to_f64(&child, ctx, field)?,
        offsets,
    })
}

#[inline]
fn put_f64(rec: &mut [u8], dtype: DType, x: f64) {
    match dtype {
        DType::F32 => rec[..4].copy_from_slice(&(x as f32).to_le_bytes()),
        DType::F64 => rec[..8].copy_from_slice(&x.to_le_bytes()),
        DType::F16 => rec[..2].copy_from_slice(&half::f16::from_f64(x).to_le_bytes()),
        DType::Bf16 => rec[..2].copy_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
        DType::U8 => rec[0] = x as u8,
        DType::I8 => rec[0] = x as i8 as u8,
        DType::U16 => rec[..2].copy_from_slice(&(x as u16).to_le_bytes()),
        DType::I16 => rec[..2].copy_from_slice(&(x as i16).to_le_bytes()),
        DType::U32 => rec[..4].copy_from_slice(&(x as u32).to_le_bytes()),
        DType::I32 => rec[..4].copy_from_slice(&(x as i32).to_le_bytes()),
        DType::U64 => rec[..8].copy_from_slice(&(x as u64).to_le_bytes()),
        DType::I64 => rec[..8].copy_from_slice(&(x as i64).to_le_bytes()),
    }
}

/// Writes an exact integer, failing if it does not fit the dtype.
#[inline]
fn put_int(rec: &mut [u8], dtype: DType, x: i128) -> bool {
    macro_rules! put {
        ($t:ty) => {
            match <$t>::try_from(x) {
                Ok(v) => {
                    rec[..std::mem::size_of::<$t>()].copy_from_slice(&v.to_le_bytes());
                    true
                }
                Err(_) => false,
            }
        };
    }
    match dtype {
        DType::U8 => put!(u8),
        DType::I8 => put!(i8),
        DType::U16 => put!(u16),
        DType::I16 => put!(i16),
        DType::U32 => put!(u32),
        DType::I32 => put!(i32),
        DType::U64 => put!(u64),
        DType::I64 => put!(i64),
        _ => {
            put_f64(rec, dtype, x as f64);
            true
        }
    }
}

/// The chunk's output: its shards in order, with the split each belongs to.
#[derive(Debug, Default)]
pub struct EncodeOutput {
    /// `(split index, shard)` in write order.
    pub shards: Vec<(usize, ShardInfo)>,
    /// Rows written per split.
    pub rows_per_split: Vec<u64>,
    /// Rows that came out of the query (after the filter).
    pub rows_kept: u64,
}

pub(crate) struct Encoder<'a> {
    spec: &'a Spec,
    layout: &'a RecordLayout,
    frozen: &'a [Option<Vec<FrozenStats>>],
    vocabs: Vec<Option<Vec<HashMap<String, i64>>>>,
    dir: PathBuf,
    chunk: usize,
    target_rows: u64,
    cumulative: Vec<f64>,
    split_names: Vec<String>,
    writers: Vec<Option<ShardWriter>>,
    seq: Vec<u32>,
    out: EncodeOutput,
    recs: Vec<u8>,
    bytes: u64,
}

impl<'a> Encoder<'a> {
    pub(crate) fn new(
        spec: &'a Spec,
        layout: &'a RecordLayout,
        frozen: &'a [Option<Vec<FrozenStats>>],
        dir: &Path,
        chunk: usize,
        target_bytes: u64,
    ) -> Self {
        let split_names: Vec<String> = match &spec.split {
            Some(s) => s.weights.iter().map(|(n, _)| n.clone()).collect(),
            None => vec!["all".into()],
        };
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
        let n = split_names.len();
        Encoder {
            spec,
            layout,
            frozen,
            vocabs,
            dir: dir.to_path_buf(),
            chunk,
            target_rows: (target_bytes.saturating_sub(tessera_reader::HEADER_LEN as u64)
                / layout.stride)
                .max(1),
            cumulative: cumulative_weights(spec),
            writers: (0..n).map(|_| None).collect(),
            seq: vec![0; n],
            out: EncodeOutput {
                rows_per_split: vec![0; n],
                ..Default::default()
            },
            split_names,
            recs: Vec::new(),
            bytes: 0,
        }
    }

    pub(crate) fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn push(&mut self, batch: &RecordBatch, ctx: &str) -> Result<(), PlanError> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let stride = self.layout.stride as usize;
        self.recs.clear();
        self.recs.resize(n * stride, 0);
        let first_row = self.out.rows_kept;
        for i in 0..self.spec.fields.len() {
            self.encode_field(batch, i, first_row, ctx)?;
        }
        let splits = row_splits(batch, self.spec, &self.cumulative, ctx)?;
        // Append runs of consecutive rows that go to the same split.
        let mut r = 0;
        while r < n {
            let s = splits.as_ref().map_or(0, |v| usize::from(v[r]));
            let mut e = r + 1;
            while e < n && splits.as_ref().map_or(0, |v| usize::from(v[e])) == s {
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
            if self.writers[split].is_none() {
                let name = format!(
                    "{}-{:05}-{:04}.bin",
                    self.split_names[split], self.chunk, self.seq[split]
                );
                self.seq[split] += 1;
                self.writers[split] = Some(ShardWriter::create(&self.dir, &name, self.layout)?);
            }
            let Some(w) = self.writers[split].as_mut() else {
                continue;
            };
            let room = (self.target_rows - w.rows()) as usize;
            let take = room.min(b - a);
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

    pub(crate) fn finish(mut self) -> Result<EncodeOutput, PlanError> {
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
        first_row: u64,
        ctx: &str,
    ) -> Result<(), PlanError> {
        let f = &self.spec.fields[i];
        let Some(fl) = self.layout.field(&f.name) else {
            return Err(enc_err(
                ctx,
                format!("field {:?} is missing from the layout", f.name),
            ));
        };
        let stride = self.layout.stride as usize;
        let off = fl.offset as usize;
        let isz = fl.dtype.size();
        let dtype = fl.dtype;
        let n = batch.num_rows();
        let cols = field_columns(batch, self.spec, i, ctx)?;
        let one_hot = f.transforms.iter().find_map(|t| match t {
            Transform::OneHot { classes } => Some(*classes),
            _ => None,
        });
        let null_err = |r: usize| {
            enc_err(
                ctx,
                format!(
                    "field {:?}: null value in output row {} (set fill_null on the field to replace nulls)",
                    f.name,
                    first_row + r as u64
                ),
            )
        };
        // Elements per stacked column / list slot before a one-hot expansion.
        let per_value = one_hot.unwrap_or(1) as usize;
        let recs = &mut self.recs;

        if let Some(len) = f.bytes {
            let col = &cols[0];
            let len = len as usize;
            // Pick the accessor once per batch, not per row.
            let bin = match col.data_type() {
                DataType::Binary => Binaries::Binary(col.as_binary::<i32>()),
                DataType::LargeBinary => Binaries::Large(col.as_binary::<i64>()),
                DataType::BinaryView => Binaries::View(col.as_binary_view()),
                DataType::FixedSizeBinary(_) => Binaries::Fixed(col.as_fixed_size_binary()),
                other => {
                    return Err(enc_err(
                        ctx,
                        format!(
                            "field {:?}: bytes needs a binary column, got {other}",
                            f.name
                        ),
                    ));
                }
            };
            for r in 0..n {
                let v = bin.get(r);
                let v = v.ok_or_else(|| null_err(r))?;
                if v.len() != len {
                    return Err(enc_err(
                        ctx,
                        format!(
                            "field {:?}: value in output row {} has {} bytes, the field holds exactly {len}",
                            f.name,
                            first_row + r as u64,
                            v.len()
                        ),
                    ));
                }
                let at = r * stride + off;
                recs[at..at + len].copy_from_slice(v);
            }
            return Ok(());
        }

        if string_path(f) {
            let vocab = self.vocabs.get(i).and_then(|v| v.as_ref());
            for (j, col) in cols.iter().enumerate() {
                let mut holder = None;
                let s = as_strings(col, &mut holder, ctx, &f.name)?;
                let (vmap, oov) = match (vocab, self.frozen.get(i).and_then(|x| x.as_ref())) {
                    (Some(v), Some(fr)) => (
                        v.get(j),
                        match fr.get(j) {
                            Some(FrozenStats::Vocab { oov, .. }) => *oov,
                            _ => 0,
                        },
                    ),
                    _ => (None, 0),
                };
                let buckets = match f.transforms.first() {
                    Some(Transform::HashBucket { buckets }) => Some(*buckets),
                    _ => None,
                };
                for r in 0..n {
                    let value = s.get(r);
                    let id: i64 = match (buckets, vmap) {
                        (Some(b), _) => {
                            transform::hash_bucket(value.map(str::as_bytes).unwrap_or(NULL_KEY), b)
                                as i64
                        }
                        (None, Some(m)) => value.and_then(|v| m.get(v).copied()).unwrap_or(oov),
                        (None, None) => oov,
                    };
                    let base = r * stride + off + j * per_value * isz;
                    write_int_value(recs, base, id, one_hot, dtype, r, first_row, ctx, &f.name)?;
                }
            }
            return Ok(());
        }

        let frozen: Option<&Vec<FrozenStats>> = self.frozen.get(i).and_then(|x| x.as_ref());
        if float_path(f) {
            for (j, col) in cols.iter().enumerate() {
                let values = list_or_scalar_f64(col, ctx, &f.name)?;
                let stat = frozen.and_then(|v| v.get(j).or_else(|| v.first()));
                let apply = |x: f64| -> f64 {
                    let mut x = x;
                    for t in &f.transforms {
                        match t {
                            Transform::Log1p => x = transform::log1p(x),
                            Transform::Clip { min, max } => x = transform::clip(x, *min, *max),
                            Transform::Standardize | Transform::MinMax => {
                                if let Some(s) = stat {
                                    x = s.apply(x);
                                }
                            }
                            _ => {}
                        }
                    }
                    x
                };
                match (&values, f.length) {
                    (NumValues::Scalar(a), None) => {
                        for r in 0..n {
                            let x = if a.is_valid(r) {
                                a.value(r)
                            } else {
                                f.fill_null.ok_or_else(|| null_err(r))?
                            };
                            if one_hot.is_some() {
                                // The transformed value is the class index.
                                let base = r * stride + off + j * per_value * isz;
                                let class = apply(x).round() as i64;
                                write_int_value(
                                    recs, base, class, one_hot, dtype, r, first_row, ctx, &f.name,
                                )?;
                            } else {
                                let at = r * stride + off + j * isz;
                                put_f64(&mut recs[at..], dtype, apply(x));
                            }
                        }
                    }
                    (_, Some(len)) => {
                        let len = len as usize;
                        for r in 0..n {
                            let mut k = 0usize;
                            let base = r * stride + off;
                            let mut missing = false;
                            values.for_each_opt(r, |x| {
                                let x = match x.or(f.fill_null) {
                                    Some(x) => x,
                                    None => {
                                        missing = true;
                                        return;
                                    }
                                };
                                if k < len {
                                    put_f64(&mut recs[base + k * isz..], dtype, apply(x));
                                }
                                k += 1;
                            });
                            if missing {
                                return Err(null_err(r));
                            }
                            for p in k..len {
                                put_f64(&mut recs[base + p * isz..], dtype, f.pad);
                            }
                        }
                    }
                    (NumValues::List { .. }, None) => {
                        return Err(enc_err(
                            ctx,
                            format!(
                                "field {:?}: the column holds lists; set `length` to pad or truncate them",
                                f.name
                            ),
                        ));
                    }
                }
            }
            return Ok(());
        }

        // Exact integer path.
        for (j, col) in cols.iter().enumerate() {
            if f.length.is_some()
                || matches!(
                    col.data_type(),
                    DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
                )
            {
                let len = f.length.ok_or_else(|| {
                    enc_err(ctx, format!("field {:?}: the column holds lists; set `length` to pad or truncate them", f.name))
                })? as usize;
                let values = list_or_scalar_f64(col, ctx, &f.name)?;
                for r in 0..n {
                    let base = r * stride + off;
                    let mut k = 0usize;
                    let mut missing = false;
                    values.for_each_opt(r, |x| {
                        let x = match x.or(f.fill_null) {
                            Some(x) => x,
                            None => {
                                missing = true;
                                return;
                            }
                        };
                        if k < len {
                            put_f64(&mut recs[base + k * isz..], dtype, x);
                        }
                        k += 1;
                    });
                    if missing {
                        return Err(null_err(r));
                    }
                    for p in k..len {
                        put_f64(&mut recs[base + p * isz..], dtype, f.pad);
                    }
                }
                continue;
            }
            if dtype == DType::U64 {
                let a = cast_to::<UInt64Type>(col, ctx, &f.name, "an unsigned integer")?;
                for r in 0..n {
                    let v: i128 = if a.is_valid(r) {
                        i128::from(a.value(r))
                    } else {
                        f.fill_null.ok_or_else(|| null_err(r))? as i128
                    };
                    let base = r * stride + off + j * per_value * isz;
                    write_int_value(
                        recs, base, v as i64, one_hot, dtype, r, first_row, ctx, &f.name,
                    )?;
                }
            } else {
                let a = cast_to::<Int64Type>(col, ctx, &f.name, "an integer")?;
                for r in 0..n {
                    let v: i64 = if a.is_valid(r) {
                        a.value(r)
                    } else {
                        f.fill_null.ok_or_else(|| null_err(r))? as i64
                    };
                    let base = r * stride + off + j * per_value * isz;
                    write_int_value(recs, base, v, one_hot, dtype, r, first_row, ctx, &f.name)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes an integer value (or its one-hot expansion) at byte `base`.
#[allow(clippy::too_many_arguments)]
fn write_int_value(
    recs: &mut [u8],
    base: usize,
    v: i64,
    one_hot: Option<u64>,
    dtype: DType,
    r: usize,
    first_row: u64,
    ctx: &str,
    field: &str,
) -> Result<(), PlanError> {
    let isz = dtype.size();
    match one_hot {
        Some(classes) => {
            if v < 0 || v as u64 >= classes {
                return Err(enc_err(
                    ctx,
                    format!(
                        "field {field:?}: value {v} in output row {} is outside one_hot's 0..{classes}",
                        first_row + r as u64
                    ),
                ));
            }
            put_int(&mut recs[base + v as usize * isz..], dtype, 1);
        }
        None => {
            if !put_int(&mut recs[base..], dtype, i128::from(v)) {
                return Err(enc_err(
                    ctx,
                    format!(
                        "field {field:?}: value {v} in output row {} does not fit {dtype}",
                        first_row + r as u64
                    ),
                ));
            }
        }
    }
    Ok(())
}
