//! Field values -> fixed-stride records: the one implementation of the record
//! encoding, used by the compiler's shard writer and by the serving path.
//!
//! The input is a batch holding each field's input columns under the names
//! [`Chain::columns`] gives (`__f{i}`, `__f{i}_{j}` for stacked columns), as
//! the compiler's query produces them and the serving path evaluates them.
//! Each field's chain says how its values are read and transformed; this
//! module writes them at the field's offset, checked against the stored dtype.
//!
//! Here: the encoder and its plan per field; [`paths`]: writing one input
//! column of a field, by the chain's path.

mod paths;

use crate::chain::{Chain, Path};
use crate::field::Field;
use crate::semantics::FrozenStats;
use crate::values::ValueError;
use arrow_array::{ArrayRef, RecordBatch};
use paths::{ColumnEncoder, Writer};
use std::collections::HashMap;
use tessera_reader::InlineVocab;
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
        let w = Writer {
            stride: self.stride,
            off: plan.offset,
            dtype: plan.dtype,
            one_hot: chain.one_hot,
        };
        let mut counts: Option<Vec<u64>> = None;
        for (j, name) in chain.columns().iter().enumerate() {
            let col = column(batch, name, &chain.field.name)?;
            let cx = ColumnEncoder {
                chain,
                w,
                col: &col,
                slot: j * chain.per_value() * w.dtype.size(),
                stats: &plan.slots[j],
                rows: batch.num_rows(),
            };
            let stored = match chain.path {
                Path::Bytes(len) => cx.bytes(len, recs).map(|()| None),
                Path::Utf8(len) => cx.utf8(len, recs).map(Some),
                Path::Tokens => cx.tokens(recs).map(Some),
                Path::Image => cx.image(recs, skipped).map(|()| None),
                // Written by `encode` once the other fields are.
                Path::Length(_) => Ok(None),
                Path::Text { buckets } => cx.text(buckets, recs).map(|()| None),
                Path::Float => cx.floats(recs),
                Path::Int => cx.ints(recs),
            }?;
            if stored.is_some() {
                counts = stored;
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
            Some(FrozenStats::Vocab(InlineVocab { values, oov, .. })) => SlotStats::Vocab {
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
