//! Field values -> fixed-stride records: the one implementation of the record
//! encoding, used by the compiler's shard writer and by the serving path.
//!
//! The input is a batch holding each field's input columns under the names
//! [`Chain::columns`] gives (`__f{i}`, `__f{i}_{j}` for stacked columns), as
//! the compiler's query produces them and the serving path evaluates them.
//! Each field's chain says how its values are read and transformed; this
//! module writes them at the field's offset, checked against the stored dtype.

use crate::chain::{Chain, Path};
use crate::field::Field;
use crate::semantics::{self, FrozenStats, NULL_KEY};
use crate::text;
use crate::values::{Binaries, Floats, Ints, Lists, Strings, ValueError, put_float, put_int};
use arrow_array::{ArrayRef, RecordBatch};
use rayon::prelude::*;
use std::collections::HashMap;
use tessera_reader::{DType, RecordLayout};

/// Why a batch could not be encoded, naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The batch lacks an input column of the field.
    MissingColumn {
        /// The field.
        field: String,
        /// The column it needs (`__f{i}`, `__f{i}_{j}`).
        column: String,
    },
    /// The record layout lacks the field.
    NotInLayout {
        /// The field.
        field: String,
    },
    /// A value could not be read, converted or stored.
    Value {
        /// The field.
        field: String,
        /// The row (within the batch) and what is wrong.
        error: ValueError,
    },
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::MissingColumn { field, column } => {
                write!(f, "field {field}: the input lacks column {column}")
            }
            EncodeError::NotInLayout { field } => {
                write!(
                    f,
                    "field {field}: the field is missing from the record layout"
                )
            }
            EncodeError::Value { field, error } => write!(
                f,
                "field {field}: row {} (counting from 1): {}",
                error.row + 1,
                error.message
            ),
        }
    }
}

impl std::error::Error for EncodeError {}

/// A row left out because an `image` field with `on_error: skip` could not
/// make its pixels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Row within the batch.
    pub row: usize,
    /// The field.
    pub field: String,
    /// Why (what `on_error: error` would have said).
    pub message: String,
}

/// The frozen statistics of one input column of a field, ready to apply.
#[derive(Clone, Debug)]
enum SlotStats {
    None,
    Numeric(FrozenStats),
    /// Value -> id, and the id of every other value.
    Vocab {
        ids: HashMap<String, i64>,
        oov: i64,
    },
}

/// Where one field goes in the record, and its statistics per input column.
#[derive(Clone, Debug)]
struct FieldPlan {
    offset: usize,
    dtype: DType,
    slots: Vec<SlotStats>,
}

/// Encodes batches of field inputs into records of one layout.
#[derive(Clone, Debug)]
pub struct RecordEncoder {
    chains: Vec<Chain>,
    plans: Vec<FieldPlan>,
    stride: usize,
}

impl RecordEncoder {
    /// An encoder for `fields` (a spec's fields, in order) into `layout`,
    /// with the frozen statistics of each field (one entry per stacked
    /// column, or a single entry), as the statistics pass froze them.
    pub fn new(
        fields: &[Field],
        layout: &RecordLayout,
        frozen: &[Option<Vec<FrozenStats>>],
    ) -> Result<RecordEncoder, EncodeError> {
        let chains = Chain::all(fields);
        let mut plans = Vec::with_capacity(chains.len());
        for chain in &chains {
            let f = &chain.field;
            let fl = layout
                .field(&f.name)
                .ok_or_else(|| EncodeError::NotInLayout {
                    field: f.name.clone(),
                })?;
            let stats = frozen.get(chain.index).and_then(|x| x.as_ref());
            let slots = (0..chain.columns().len())
                .map(|j| slot_stats(chain, stats, j))
                .collect();
            plans.push(FieldPlan {
                offset: fl.offset as usize,
                dtype: fl.dtype,
                slots,
            });
        }
        Ok(RecordEncoder {
            chains,
            plans,
            stride: layout.stride as usize,
        })
    }

    /// Bytes per record.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The fields' chains, in field order.
    pub fn chains(&self) -> &[Chain] {
        &self.chains
    }

    /// Encodes every row of `batch` into `recs`, which holds exactly
    /// `rows x stride` bytes, all zero (padding and one-hot slots stay zero).
    /// A row an `image` field would skip is an error here (the serving path
    /// makes one record per row).
    pub fn encode(&self, batch: &RecordBatch, recs: &mut [u8]) -> Result<(), EncodeError> {
        match self.encode_skipping(batch, recs)?.into_iter().next() {
            None => Ok(()),
            Some(s) => Err(EncodeError::Value {
                field: s.field,
                error: ValueError {
                    row: s.row,
                    message: s.message,
                },
            }),
        }
    }

    /// As [`RecordEncoder::encode`], and returns the rows that `image`
    /// fields with `on_error: skip` could not decode, in row order (their
    /// records are left incomplete; the caller drops them).
    pub fn encode_skipping(
        &self,
        batch: &RecordBatch,
        recs: &mut [u8],
    ) -> Result<Vec<Skipped>, EncodeError> {
        debug_assert_eq!(recs.len(), batch.num_rows() * self.stride);
        // Length fields last: they store what the other fields stored.
        let mut counts: Vec<Option<Vec<u64>>> = vec![None; self.chains.len()];
        let mut skipped = Vec::new();
        for (chain, plan) in self.chains.iter().zip(&self.plans) {
            if !matches!(chain.path, Path::Length(_)) {
                counts[chain.index] = self.encode_field(batch, chain, plan, recs, &mut skipped)?;
            }
        }
        skipped.sort_by_key(|s| s.row);
        for (chain, plan) in self.chains.iter().zip(&self.plans) {
            if let Path::Length(target) = chain.path {
                let fail = |message: String| EncodeError::Value {
                    field: chain.field.name.clone(),
                    error: ValueError { row: 0, message },
                };
                let counts = counts.get(target).and_then(Option::as_ref).ok_or_else(|| {
                    fail(
                        "length_of names a field that stores no per-row length (a text, list \
                         or tokenize field)"
                            .into(),
                    )
                })?;
                let w = Writer {
                    stride: self.stride,
                    off: plan.offset,
                    dtype: plan.dtype,
                    one_hot: None,
                };
                for (r, &c) in counts.iter().enumerate() {
                    w.int(recs, r, 0, i128::from(c))
                        .map_err(|message| EncodeError::Value {
                            field: chain.field.name.clone(),
                            error: ValueError { row: r, message },
                        })?;
                }
            }
        }
        Ok(skipped)
    }

    /// Encodes one field; for text, list and token fields, returns how many
    /// bytes, elements or tokens each row stored (what `length_of` stores).
    fn encode_field(
        &self,
        batch: &RecordBatch,
        chain: &Chain,
        plan: &FieldPlan,
        recs: &mut [u8],
        skipped: &mut Vec<Skipped>,
    ) -> Result<Option<Vec<u64>>, EncodeError> {
        let f = &chain.field;
        let w = Writer {
            stride: self.stride,
            off: plan.offset,
            dtype: plan.dtype,
            one_hot: chain.one_hot,
        };
        let fail = |error: ValueError| EncodeError::Value {
            field: f.name.clone(),
            error,
        };
        let at_row = |row: usize| move |message: String| fail(ValueError { row, message });
        let n = batch.num_rows();
        let mut counts: Option<Vec<u64>> = None;
        for (j, name) in chain.columns().iter().enumerate() {
            let col = column(batch, name, &f.name)?;
            let slot = j * chain.per_value() * w.dtype.size();
            let stats = &plan.slots[j];
            match chain.path {
                Path::Bytes(len) => {
                    let bin = Binaries::read(&col).map_err(fail)?;
                    for r in 0..n {
                        let v = bin.get(r).ok_or_else(|| {
                            at_row(r)(format!(
                                "the value is null; a bytes field holds exactly {len} bytes \
                                 in every record (filter such rows out, or give a value in an \
                                 expr)"
                            ))
                        })?;
                        if v.len() != len {
                            return Err(at_row(r)(format!(
                                "the value has {} bytes; the field holds exactly {len}",
                                v.len()
                            )));
                        }
                        let at = r * w.stride + w.off;
                        recs[at..at + len].copy_from_slice(v);
                    }
                }
                Path::Utf8(len) => {
                    let s = Strings::read(&col).map_err(fail)?;
                    let pad = f.pad as u8;
                    let mut stored = Vec::with_capacity(n);
                    for r in 0..n {
                        let v = s.get(r).ok_or_else(|| at_row(r)(text_null("text", len)))?;
                        let t = text::truncate_utf8(v, len).as_bytes();
                        let at = r * w.stride + w.off;
                        recs[at..at + t.len()].copy_from_slice(t);
                        if pad != 0 {
                            recs[at + t.len()..at + len].fill(pad);
                        }
                        stored.push(t.len() as u64);
                    }
                    counts = Some(stored);
                }
                Path::Tokens => {
                    let tokenizer =
                        chain
                            .tokenize()
                            .and_then(|t| t.loaded.clone())
                            .ok_or_else(|| {
                                at_row(0)("the tokenizer file has not been loaded".to_string())
                            })?;
                    let s = Strings::read(&col).map_err(fail)?;
                    let len = f.length.unwrap_or(0) as usize;
                    for r in 0..n {
                        if s.get(r).is_none() {
                            return Err(at_row(r)(text_null("tokenize", len)));
                        }
                    }
                    // Documents are tokenized in parallel on the current
                    // pool (the build's); the ids are written in row order.
                    let ids: Vec<Result<Vec<u32>, String>> = (0..n)
                        .into_par_iter()
                        .map(|r| tokenizer.encode(s.get(r).unwrap_or_default()))
                        .collect();
                    let mut stored = Vec::with_capacity(n);
                    for (r, ids) in ids.into_iter().enumerate() {
                        let ids = ids.map_err(at_row(r))?;
                        let k = ids.len().min(len);
                        for (i, &id) in ids[..k].iter().enumerate() {
                            w.int(recs, r, i * w.dtype.size(), i128::from(id))
                                .map_err(at_row(r))?;
                        }
                        w.pad(recs, r, k, len, f.pad).map_err(at_row(r))?;
                        stored.push(k as u64);
                    }
                    counts = Some(stored);
                }
                Path::Image => {
                    let step = chain
                        .image()
                        .ok_or_else(|| at_row(0)("the field has no image step".to_string()))?;
                    let bad = crate::image::rows::encode(step, &col, recs, w.stride, w.off)
                        .map_err(fail)?;
                    for (row, message) in bad {
                        match step.on_error {
                            crate::image::OnError::Error => {
                                return Err(fail(ValueError { row, message }));
                            }
                            crate::image::OnError::Skip => skipped.push(Skipped {
                                row,
                                field: f.name.clone(),
                                message,
                            }),
                        }
                    }
                }
                // Written by `encode` once the other fields are.
                Path::Length(_) => {}
                Path::Text { buckets } => {
                    let s = Strings::read(&col).map_err(fail)?;
                    for r in 0..n {
                        let value = s.get(r);
                        let id: i128 = match (buckets, stats) {
                            (Some(b), _) => i128::from(semantics::hash_bucket(
                                value.map(str::as_bytes).unwrap_or(NULL_KEY),
                                b,
                            )),
                            (None, SlotStats::Vocab { ids, oov }) => {
                                i128::from(value.and_then(|v| ids.get(v).copied()).unwrap_or(*oov))
                            }
                            (None, _) => 0,
                        };
                        w.int(recs, r, slot, id).map_err(at_row(r))?;
                    }
                }
                Path::Float => {
                    let stat = match stats {
                        SlotStats::Numeric(s) => Some(s),
                        _ => None,
                    };
                    let put = |recs: &mut [u8], r: usize, k: usize, x: f64| {
                        let at = r * w.stride + w.off + slot + k * w.dtype.size();
                        put_float(&mut recs[at..], w.dtype, chain.apply_float(x, stat))
                            .map_err(at_row(r))
                    };
                    match (Lists::read(&col), f.length) {
                        (Some(lists), Some(len)) => {
                            let vals = Floats::read(&lists.child).map_err(|e| {
                                fail(ValueError {
                                    row: 0,
                                    message: format!("a list element: {}", e.message),
                                })
                            })?;
                            let stored = counts.insert(Vec::with_capacity(n));
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
                                w.pad(recs, r, k, len as usize, f.pad).map_err(at_row(r))?;
                                stored.push(k as u64);
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
                    let fill = chain.int_fill().map_err(at_row(0))?;
                    let value = |r: usize, v: Option<i128>| -> Result<i128, EncodeError> {
                        let v = v.or(fill).ok_or_else(|| fail(null_error(r)))?;
                        chain.apply_int(v).map_err(at_row(r))
                    };
                    match (Lists::read(&col), f.length) {
                        (Some(lists), Some(len)) => {
                            let vals = Ints::read(&lists.child).map_err(|e| {
                                fail(ValueError {
                                    row: 0,
                                    message: format!("a list element: {}", e.message),
                                })
                            })?;
                            let stored = counts.insert(Vec::with_capacity(n));
                            for r in 0..n {
                                let range = lists.range(r).unwrap_or(0..0);
                                let mut k = 0;
                                for e in range {
                                    if k == len as usize {
                                        break;
                                    }
                                    let v = value(r, vals.get(e))?;
                                    w.int(recs, r, slot + k * w.dtype.size(), v)
                                        .map_err(at_row(r))?;
                                    k += 1;
                                }
                                w.pad(recs, r, k, len as usize, f.pad).map_err(at_row(r))?;
                                stored.push(k as u64);
                            }
                        }
                        (Some(_), None) => return Err(fail(list_without_length())),
                        (None, _) => {
                            let vals = Ints::read(&col).map_err(fail)?;
                            for r in 0..n {
                                let v = value(r, vals.get(r))?;
                                w.int(recs, r, slot, v).map_err(at_row(r))?;
                            }
                        }
                    }
                }
            }
        }
        Ok(counts)
    }
}

/// The statistics slot `j` of a field reads: for floats its own entry or the
/// field's first (a list field has one), for vocabularies its own entry.
fn slot_stats(chain: &Chain, stats: Option<&Vec<FrozenStats>>, j: usize) -> SlotStats {
    let Some(stats) = stats else {
        return SlotStats::None;
    };
    match chain.path {
        Path::Float => match stats.get(j).or_else(|| stats.first()) {
            Some(s) => SlotStats::Numeric(s.clone()),
            None => SlotStats::None,
        },
        Path::Text { buckets: None } => match stats.get(j) {
            Some(FrozenStats::Vocab { values, oov, .. }) => SlotStats::Vocab {
                ids: values
                    .iter()
                    .enumerate()
                    .map(|(k, v)| (v.clone(), k as i64 + 1))
                    .collect(),
                oov: *oov,
            },
            _ => SlotStats::None,
        },
        _ => SlotStats::None,
    }
}

/// The input column `name` of `batch`, feeding field `field`.
pub fn column(batch: &RecordBatch, name: &str, field: &str) -> Result<ArrayRef, EncodeError> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| EncodeError::MissingColumn {
            field: field.to_string(),
            column: name.to_string(),
        })
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

    /// Fills elements `from..len` of row `r`'s list with `pad`.
    fn pad(
        &self,
        recs: &mut [u8],
        r: usize,
        from: usize,
        len: usize,
        pad: f64,
    ) -> Result<(), String> {
        for p in from..len {
            let at = r * self.stride + self.off + p * self.dtype.size();
            put_float(&mut recs[at..], self.dtype, pad)?;
        }
        Ok(())
    }
}

fn text_null(kind: &str, len: usize) -> String {
    let what = if kind == "text" {
        format!("a text field stores up to {len} bytes of text in every record")
    } else {
        "a tokenize field reads text in every record".to_string()
    };
    format!(
        "the value is null; {what} (filter such rows out, or give a value in an expr, e.g. \
         COALESCE(x, ''))"
    )
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
