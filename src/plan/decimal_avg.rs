//! The grouped form of the exact decimal `AVG` (`tessera_exact_avg`, see
//! [`super::decimal`]): one exact 256-bit sum and one count per group.
//!
//! Without it DataFusion runs a `GROUP BY` over the average with one
//! accumulator object per group, slicing every batch per group: TPC-H's q17
//! (an average per part key, 200,000 groups over 6 million rows) spent most
//! of its 2.5 s there. Here a batch is one pass over its rows.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal256Array, Float64Array, UInt64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Decimal256Type, UInt64Type, i256};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use std::sync::Arc;
use tessera_transform::decimal;

/// One average: the exact sum of its unscaled values and their count (per
/// group, side by side, a random group costs one cache miss). The one-group
/// accumulator of `super::decimal` keeps one too.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    sum: i256,
    count: u64,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            sum: i256::ZERO,
            count: 0,
        }
    }
}

impl Slot {
    /// Adds `value`, the sum of `count` values.
    pub(super) fn add(&mut self, value: i256, count: u64) -> DfResult<()> {
        match (self.sum.checked_add(value), self.count.checked_add(count)) {
            (Some(s), Some(c)) => {
                self.sum = s;
                self.count = c;
                Ok(())
            }
            _ => Err(overflow()),
        }
    }

    /// Takes back one value added before (a window frame moving on).
    pub(super) fn sub(&mut self, value: i256) -> DfResult<()> {
        match (self.sum.checked_sub(value), self.count.checked_sub(1)) {
            (Some(s), Some(c)) => {
                self.sum = s;
                self.count = c;
                Ok(())
            }
            _ => Err(overflow()),
        }
    }

    /// The `DOUBLE` nearest the average of decimals of `scale` (`None` over
    /// no value).
    pub(super) fn average(&self, scale: i8) -> Option<f64> {
        decimal::ratio_to_f64(self.sum, self.count, scale)
    }

    /// The partial state: the sum at `scale` and the count.
    pub(super) fn state(&self, scale: i8) -> [ScalarValue; 2] {
        [
            ScalarValue::Decimal256(Some(self.sum), 76, scale),
            ScalarValue::UInt64(Some(self.count)),
        ]
    }
}

fn overflow() -> DataFusionError {
    DataFusionError::Execution("AVG of a decimal: the sum does not fit 76 digits".into())
}

/// The error for a partial state that is not a sum and a count.
pub(super) fn malformed_state() -> DataFusionError {
    DataFusionError::Internal("tessera_exact_avg: a state is a sum and a count".into())
}

/// Per group: a [`Slot`], for decimals of `scale`.
#[derive(Debug)]
pub(super) struct AvgGroups {
    scale: i8,
    slots: Vec<Slot>,
}

impl AvgGroups {
    pub(super) fn new(scale: i8) -> Self {
        AvgGroups {
            scale,
            slots: Vec::new(),
        }
    }

    fn grow(&mut self, total_num_groups: usize) {
        if self.slots.len() < total_num_groups {
            self.slots.resize(total_num_groups, Slot::default());
        }
    }

    /// Adds row `i`'s `value` to its group unless the row is filtered out.
    fn add_rows<T: Copy>(
        &mut self,
        values: &dyn Array,
        raw: &[T],
        widen: impl Fn(T) -> i256,
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<()> {
        if values.null_count() == 0 && opt_filter.is_none() {
            for (&g, &v) in group_indices.iter().zip(raw) {
                self.slots[g].add(widen(v), 1)?;
            }
            return Ok(());
        }
        for (i, (&g, &v)) in group_indices.iter().zip(raw).enumerate() {
            if values.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                continue;
            }
            self.slots[g].add(widen(v), 1)?;
        }
        Ok(())
    }
}

impl GroupsAccumulator for AvgGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.grow(total_num_groups);
        let Some(v) = values.first() else {
            return Ok(());
        };
        if let DataType::Decimal128(_, s) = v.data_type()
            && *s == self.scale
        {
            let d = v.as_primitive::<Decimal128Type>();
            return self.add_rows(d, d.values(), i256::from_i128, group_indices, opt_filter);
        }
        let wide = cast(v, &DataType::Decimal256(76, self.scale))?;
        let d = wide.as_primitive::<Decimal256Type>();
        self.add_rows(d, d.values(), |x| x, group_indices, opt_filter)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let slots = emit_to.take_needed(&mut self.slots);
        let out: Float64Array = slots.iter().map(|s| s.average(self.scale)).collect();
        Ok(Arc::new(out))
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let slots = emit_to.take_needed(&mut self.slots);
        let sums = Decimal256Array::from_iter_values(slots.iter().map(|s| s.sum))
            .with_precision_and_scale(76, self.scale)?;
        let counts = UInt64Array::from_iter_values(slots.iter().map(|s| s.count));
        Ok(vec![Arc::new(sums), Arc::new(counts)])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.grow(total_num_groups);
        let [sums, counts] = values else {
            return Err(malformed_state());
        };
        let sums = cast(sums, &DataType::Decimal256(76, self.scale))?;
        let sums = sums.as_primitive::<Decimal256Type>();
        let counts = counts.as_primitive::<UInt64Type>();
        for (i, &g) in group_indices.iter().enumerate() {
            if sums.is_null(i) || counts.is_null(i) {
                continue;
            }
            self.slots[g].add(sums.value(i), counts.value(i))?;
        }
        Ok(())
    }

    /// Each row's own state: its value (null when the row is null or
    /// filtered out) and a count of 1 or 0.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        let Some(v) = values.first() else {
            return Err(DataFusionError::Internal(
                "tessera_exact_avg: no argument".into(),
            ));
        };
        let wide = cast(v, &DataType::Decimal256(76, self.scale))?;
        let wide = wide.as_primitive::<Decimal256Type>();
        let kept =
            |i: usize| wide.is_valid(i) && opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
        let sums: Decimal256Array = (0..wide.len())
            .map(|i| kept(i).then(|| wide.value(i)))
            .collect::<Decimal256Array>()
            .with_precision_and_scale(76, self.scale)?;
        let counts: UInt64Array = (0..wide.len()).map(|i| Some(u64::from(kept(i)))).collect();
        Ok(vec![Arc::new(sums), Arc::new(counts)])
    }

    /// In O(1) (DataFusion asks after every batch).
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.slots.capacity() * std::mem::size_of::<Slot>()
    }
}
