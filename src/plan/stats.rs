//! The statistics pass: mergeable partial statistics per task, for the
//! fields whose transforms need them (standardize, min_max, vocab), over the
//! rows of the statistics split.

use super::PlanError;
use super::vocab::{SpillConfig, VocabCounter, VocabError};
use crate::accumulators::{FrozenStats, Moments};
use crate::spec::{Spec, Transform};
use datafusion::arrow::record_batch::RecordBatch;
use tessera_reader::InlineVocab;
use tessera_transform::chain::{Chain, Path, StatsKind};
use tessera_transform::split::{Splits, row_splits};
use tessera_transform::values::{Floats, Lists, Strings, ValueError};

/// Mergeable statistics of one task: per field needing them, one slot per
/// stacked column (or one for a scalar or list field). Serializable, so a
/// task on another machine can hand it to the build's driver.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct StatsPartial {
    slots: Vec<(usize, Vec<Slot>)>,
    #[serde(skip)]
    splits: Option<Splits>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Slot {
    Moments(Moments),
    Counts(VocabCounter),
}

/// Where a batch's rows are, for messages: a description of the task's input
/// and the index of the batch's first row in the task's output.
pub struct Rows<'a> {
    /// The task's input, e.g. "chunk 3 (data/a.parquet (row groups 4..8))".
    pub what: &'a str,
    /// Output row of the batch's first row.
    pub first: u64,
}

impl Rows<'_> {
    /// An error about a value of field `field`.
    pub fn error(&self, field: &str, e: ValueError) -> PlanError {
        self.at_key(&format!("fields.{field}"), e)
    }

    /// An error about a value computed for the spec key `key`.
    pub fn at_key(&self, key: &str, e: ValueError) -> PlanError {
        PlanError::Encode {
            key: Some(key.to_string()),
            row: Some(self.first + e.row as u64),
            context: format!(
                "query output row {} (counting from 1) of {}",
                self.first + e.row as u64 + 1,
                self.what
            ),
            message: e.message,
        }
    }
}

impl StatsPartial {
    /// Empty statistics for every field that needs them; vocabularies count
    /// in memory, spilling to run files as `spill` says.
    pub fn new(spec: &Spec) -> Self {
        Self::with_spill(spec, None)
    }

    /// As [`StatsPartial::new`], with vocabularies spilling as `spill` says.
    pub fn with_spill(spec: &Spec, spill: Option<SpillConfig>) -> Self {
        let slots = Chain::all(&spec.fields)
            .into_iter()
            .filter_map(|c| {
                let kind = c.stats?;
                let n = c.columns().len();
                let slot = match kind {
                    StatsKind::Counts => Slot::Counts(VocabCounter::new(spill.clone())),
                    StatsKind::Moments => Slot::Moments(Moments::new()),
                };
                Some((c.index, vec![slot; n]))
            })
            .collect();
        StatsPartial {
            slots,
            splits: Some(Splits::new(spec.split.as_ref())),
        }
    }

    /// Reads a partial written by [`StatsPartial::to_json`]; its vocabulary
    /// counts spill as `spill` says from now on.
    pub fn from_json(bytes: &[u8], spill: Option<SpillConfig>) -> Result<Self, String> {
        let mut p: StatsPartial = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        for (_, slots) in &mut p.slots {
            for slot in slots {
                if let Slot::Counts(c) = slot {
                    c.set_spill(spill.clone());
                }
            }
        }
        Ok(p)
    }

    /// The partial as JSON (deterministic: counts sorted by value).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Whether no field needs statistics.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The fields with statistics, in field order.
    pub fn fields(&self) -> Vec<usize> {
        self.slots.iter().map(|(i, _)| *i).collect()
    }

    /// Adds one batch of query output.
    pub fn update(
        &mut self,
        spec: &Spec,
        batch: &RecordBatch,
        at: &Rows<'_>,
    ) -> Result<(), PlanError> {
        let layout = match &self.splits {
            Some(s) => s.clone(),
            None => Splits::new(spec.split.as_ref()),
        };
        let splits = row_splits(batch, &layout).map_err(|e| at.at_key("split.key", e))?;
        let want = layout.stats_split;
        let keep = |r: usize| splits.as_ref().is_none_or(|s| s[r] == want);
        for (i, slots) in &mut self.slots {
            let chain = Chain::new(&spec.fields, *i);
            let name = &chain.field.name;
            for (col_name, slot) in chain.columns().iter().zip(slots.iter_mut()) {
                let col = super::encode::column(batch, col_name, name)?;
                match slot {
                    Slot::Counts(c) => {
                        let s = Strings::read(&col).map_err(|e| at.error(name, e))?;
                        for r in (0..batch.num_rows()).filter(|&r| keep(r)) {
                            if let Some(v) = s.get(r) {
                                c.push(v).map_err(|e| vocab_error(name, e, 0))?;
                            }
                        }
                    }
                    Slot::Moments(m) => {
                        let mut push = |x: f64, r: usize| -> Result<(), PlanError> {
                            let y = chain.before_stats(x);
                            match chain.admit(y) {
                                Ok(true) => m.push(y),
                                Ok(false) => {}
                                Err(msg) => {
                                    return Err(at.error(
                                        name,
                                        ValueError {
                                            row: r,
                                            message: msg,
                                        },
                                    ));
                                }
                            }
                            Ok(())
                        };
                        debug_assert_eq!(chain.path, Path::Float);
                        if let Some(lists) = Lists::read(&col) {
                            let vals = Floats::read(&lists.child).map_err(|e| at.error(name, e))?;
                            // Exactly the elements the record stores: the first
                            // `length` of each list (the encoder drops the rest, and
                            // its padding is not data).
                            let stored = chain.field.length.map_or(usize::MAX, |n| n as usize);
                            for r in (0..batch.num_rows()).filter(|&r| keep(r)) {
                                for k in lists.range(r).unwrap_or(0..0).take(stored) {
                                    if let Some(x) = vals.get(k).or(chain.field.fill_null) {
                                        push(x, r)?;
                                    }
                                }
                            }
                        } else {
                            let vals = Floats::read(&col).map_err(|e| at.error(name, e))?;
                            for r in (0..batch.num_rows()).filter(|&r| keep(r)) {
                                if let Some(x) = vals.get(r).or(chain.field.fill_null) {
                                    push(x, r)?;
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Folds a later task's statistics into these.
    pub fn merge(&mut self, spec: &Spec, other: StatsPartial) -> Result<(), PlanError> {
        for ((i, mine), (_, theirs)) in self.slots.iter_mut().zip(other.slots) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                match (a, b) {
                    (Slot::Moments(a), Slot::Moments(b)) => a.merge(&b),
                    (Slot::Counts(a), Slot::Counts(b)) => a
                        .merge(b)
                        .map_err(|e| vocab_error(&spec.fields[*i].name, e, 0))?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Freezes the statistics: per field, one entry per slot. Statistics
    /// that overflowed to infinity, and a vocabulary of more than
    /// `max_vocab` values, are errors naming the field.
    pub fn freeze(
        self,
        spec: &Spec,
        max_vocab: u64,
    ) -> Result<Vec<Option<Vec<FrozenStats>>>, PlanError> {
        let mut out = vec![None; spec.fields.len()];
        for (i, slots) in self.slots {
            let f = &spec.fields[i];
            let kind = f.transforms.iter().find(|t| super::needs_stats(t));
            let mut frozen = Vec::with_capacity(slots.len());
            for s in slots {
                frozen.push(match (s, kind) {
                    (Slot::Moments(m), Some(Transform::MinMax)) => FrozenStats::MinMax {
                        min: if m.count > 0 { m.min } else { 0.0 },
                        max: if m.count > 0 { m.max } else { 0.0 },
                        count: m.count,
                    },
                    (Slot::Moments(m), _) => {
                        let (mean, std) = (m.mean(), m.std());
                        if !mean.is_finite() || !std.is_finite() {
                            return Err(PlanError::Encode {
                                key: Some(format!("fields.{}", f.name)),
                                row: None,
                                context: "the statistics pass".into(),
                                message: format!(
                                    "the mean ({mean}) or standard deviation ({std}) is not a \
                                     finite number: the values are too large to standardize; \
                                     scale them (clip, log1p or an expr) first"
                                ),
                            });
                        }
                        FrozenStats::Standardize {
                            mean,
                            std,
                            count: m.count,
                        }
                    }
                    (
                        Slot::Counts(c),
                        Some(Transform::Vocab {
                            min_count,
                            max_size,
                            oov,
                        }),
                    ) => {
                        let v = c
                            .freeze(*min_count, *max_size, max_vocab)
                            .map_err(|e| vocab_error(&f.name, e, max_vocab))?;
                        FrozenStats::Vocab(InlineVocab {
                            counts: v.iter().map(|(_, n)| *n).collect(),
                            values: v.into_iter().map(|(s, _)| s).collect(),
                            oov: *oov,
                        })
                    }
                    (Slot::Counts(_), _) => FrozenStats::Vocab(InlineVocab {
                        values: vec![],
                        counts: vec![],
                        oov: 0,
                    }),
                });
            }
            out[i] = Some(frozen);
        }
        Ok(out)
    }
}

/// A vocabulary error, naming the field and what would fix it.
fn vocab_error(field: &str, e: VocabError, max_vocab: u64) -> PlanError {
    let message = match e {
        VocabError::TooLarge { count } => format!(
            "the vocabulary would hold {} {max_vocab} values, the most that fit within the \
             memory limit (--memory-limit) while encoding; keep the frequent ones with max_size \
             (e.g. vocab: {{ max_size: 100000 }}) or min_count, or use hash_bucket for a column \
             with this many distinct values",
            if count > max_vocab {
                "more than"
            } else {
                "at least"
            }
        ),
        VocabError::Io(path, e) => format!("spilling value counts to {}: {e}", path.display()),
    };
    PlanError::Encode {
        key: Some(format!("fields.{field}")),
        row: None,
        context: "the statistics pass".into(),
        message,
    }
}
