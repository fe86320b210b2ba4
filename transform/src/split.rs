//! Which split each output row goes to: the stable hash of the split key's
//! text against the cumulative split weights (docs/SPEC.md, `split`).

use crate::field::Split;
use crate::semantics::{self as transform, NULL_KEY};
use crate::values::{Strings, ValueError};
use arrow_array::RecordBatch;

/// The output column holding the split key's text.
pub const SPLIT_COLUMN: &str = "__split";

/// A spec's split layout.
#[derive(Clone, Debug)]
pub struct Splits {
    /// Cumulative normalized weights (the last is exactly 1).
    pub cumulative: Vec<f64>,
    /// Index of the statistics split.
    pub stats_split: u16,
    /// Split names in spec order (`["all"]` without a split).
    pub names: Vec<String>,
    /// Whether the spec has a split at all.
    pub keyed: bool,
}

impl Splits {
    /// The layout of a spec's splits (`split`, or none).
    pub fn new(split: Option<&Split>) -> Splits {
        let Some(split) = split else {
            return Splits {
                cumulative: vec![1.0],
                stats_split: 0,
                names: vec!["all".into()],
                keyed: false,
            };
        };
        let total: f64 = split.weights.iter().map(|(_, w)| w).sum();
        let mut acc = 0.0;
        let mut cumulative: Vec<f64> = split
            .weights
            .iter()
            .map(|(_, w)| {
                acc += w / total;
                acc
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        let stats_split = split
            .weights
            .iter()
            .position(|(n, _)| *n == split.stats_split)
            .unwrap_or(0) as u16;
        Splits {
            cumulative,
            stats_split,
            names: split.weights.iter().map(|(n, _)| n.clone()).collect(),
            keyed: true,
        }
    }
}

/// The split of each row of `batch` (`None` without a split: all rows in
/// split 0).
pub fn row_splits(batch: &RecordBatch, splits: &Splits) -> Result<Option<Vec<u16>>, ValueError> {
    if !splits.keyed {
        return Ok(None);
    }
    let col = batch
        .column_by_name(SPLIT_COLUMN)
        .ok_or_else(|| ValueError {
            row: 0,
            message: "the query output lacks the split key".into(),
        })?;
    let s = Strings::read(col)?;
    Ok(Some(
        (0..batch.num_rows())
            .map(|r| {
                let key = s.get(r).map(str::as_bytes).unwrap_or(NULL_KEY);
                transform::split_of(key, &splits.cumulative) as u16
            })
            .collect(),
    ))
}
