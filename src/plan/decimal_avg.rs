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
///
/// The sum is `hi * 2^128 + lo` (`lo` unsigned): adding a 128-bit decimal
/// is one 128-bit add and a carry into `hi`, and the slot takes 32 bytes,
/// where a 256-bit sum took 48 and two 128-bit adds. `hi` reaches past
/// 2^190, far beyond what 2^64 values below 10^38 can sum to; reaching
/// further is an error, never a wrapped sum.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slot {
    lo: u128,
    hi: i64,
    count: u64,
}

impl Slot {
    /// Adds `value`, the sum of `count` values.
    pub(super) fn add(&mut self, value: i256, count: u64) -> DfResult<()> {
        let (v_lo, v_hi) = value.to_parts();
        let (lo, carry) = self.lo.overflowing_add(v_lo);
        let hi = i64::try_from(v_hi)
            .ok()
            .and_then(|h| self.hi.checked_add(h))
            .and_then(|h| h.checked_add(i64::from(carry)));
        match (hi, self.count.checked_add(count)) {
            (Some(h), Some(c)) => {
                (self.lo, self.hi, self.count) = (lo, h, c);
                Ok(())
            }
            _ => Err(overflow()),
        }
    }

    /// Adds one 128-bit value (the common case: a `DECIMAL(p <= 38)`).
    #[inline]
    pub(super) fn add_i128(&mut self, value: i128) -> DfResult<()> {
        // `value as u128` is its two's complement: for a negative value
        // it is 2^128 too much, which the -1 in `hi` takes back.
        let (lo, carry) = self.lo.overflowing_add(value as u128);
        let step = i64::from(carry) - i64::from(value < 0);
        match (self.hi.checked_add(step), self.count.checked_add(1)) {
            (Some(h), Some(c)) => {
                (self.lo, self.hi, self.count) = (lo, h, c);
                Ok(())
            }
            _ => Err(overflow()),
        }
    }

    /// Takes back one value added before (a window frame moving on).
    pub(super) fn sub(&mut self, value: i256) -> DfResult<()> {
        let Some(neg) = value.checked_neg() else {
            return Err(overflow());
        };
        let count = self.count.checked_sub(1).ok_or_else(overflow)?;
        self.add(neg, 0)?;
        self.count = count;
        Ok(())
    }

    /// The exact sum.
    pub(super) fn sum(&self) -> i256 {
        i256::from_parts(self.lo, i128::from(self.hi))
    }

    /// The `DOUBLE` nearest the average of decimals of `scale` (`None` over
    /// no value).
    pub(super) fn average(&self, scale: i8) -> Option<f64> {
        decimal::ratio_to_f64(self.sum(), self.count, scale)
    }

    /// The partial state: the sum at `scale` and the count.
    pub(super) fn state(&self, scale: i8) -> [ScalarValue; 2] {
        [
            ScalarValue::Decimal256(Some(self.sum()), 76, scale),
            ScalarValue::UInt64(Some(self.count)),
        ]
    }
}

fn overflow() -> DataFusionError {
    DataFusionError::Execution("AVG of a decimal: the exact sum does not fit in 192 bits".into())
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
        add: impl Fn(&mut Slot, T) -> DfResult<()>,
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<()> {
        if values.null_count() == 0 && opt_filter.is_none() {
            for (&g, &v) in group_indices.iter().zip(raw) {
                add(&mut self.slots[g], v)?;
            }
            return Ok(());
        }
        for (i, (&g, &v)) in group_indices.iter().zip(raw).enumerate() {
            if values.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                continue;
            }
            add(&mut self.slots[g], v)?;
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
            return self.add_rows(d, d.values(), Slot::add_i128, group_indices, opt_filter);
        }
        let wide = cast(v, &DataType::Decimal256(76, self.scale))?;
        let d = wide.as_primitive::<Decimal256Type>();
        self.add_rows(d, d.values(), |s, x| s.add(x, 1), group_indices, opt_filter)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let slots = emit_to.take_needed(&mut self.slots);
        let out: Float64Array = slots.iter().map(|s| s.average(self.scale)).collect();
        Ok(Arc::new(out))
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let slots = emit_to.take_needed(&mut self.slots);
        let sums = Decimal256Array::from_iter_values(slots.iter().map(Slot::sum))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of 128-bit values with large magnitudes of
    /// both signs (every add carries or borrows across the 128-bit halves).
    fn values(n: usize) -> Vec<i128> {
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match i % 5 {
                    0 => i128::MAX - i128::from(x % 7),
                    1 => i128::MIN + i128::from(x % 7),
                    2 => -(i128::from(x) << 60),
                    _ => i128::from(x) << 61,
                }
            })
            .collect()
    }

    #[test]
    fn the_split_sum_equals_a_256_bit_sum() {
        let mut slot = Slot::default();
        let mut wide = i256::ZERO;
        for (i, v) in values(10_000).into_iter().enumerate() {
            if i % 3 == 0 {
                slot.add(i256::from_i128(v), 1).expect("add");
            } else {
                slot.add_i128(v).expect("add_i128");
            }
            wide = wide.checked_add(i256::from_i128(v)).expect("fits");
            assert_eq!(slot.sum(), wide, "after {} values", i + 1);
        }
        assert_eq!(slot.count, 10_000);
        // Merging a state, and taking values back, stay exact.
        let mut other = Slot::default();
        other.add(wide, 10_000).expect("merge");
        other.add(slot.sum(), slot.count).expect("merge");
        assert_eq!(
            other.sum(),
            wide.checked_mul(i256::from_i128(2)).expect("fits")
        );
        for v in values(10_000) {
            slot.sub(i256::from_i128(v)).expect("sub");
        }
        assert_eq!((slot.sum(), slot.count), (i256::ZERO, 0));
        assert!(
            slot.sub(i256::ONE).is_err(),
            "no value is left to take back"
        );
    }

    #[test]
    fn a_sum_past_its_range_is_an_error_not_a_wrapped_value() {
        let mut slot = Slot::default();
        let big = i256::from_parts(0, i128::from(i64::MAX));
        slot.add(big, 1).expect("fits");
        assert!(slot.add(big, 1).is_err());
        assert!(slot.add(i256::from_parts(0, i128::MAX), 1).is_err());
        assert_eq!(slot.sum(), big, "a failed add leaves the slot as it was");
        // One carry past the top.
        let mut top = Slot {
            lo: u128::MAX,
            hi: i64::MAX,
            count: 1,
        };
        assert!(top.add_i128(1).is_err());
        assert!(top.add_i128(-1).is_ok());
    }
}
