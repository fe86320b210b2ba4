//! `SUM` and `AVG` of floats as exact sums, so that a global query with them
//! runs in all partitions and still gives the same bytes.
//!
//! DataFusion adds floats in the order rows arrive, and floating-point
//! addition is not associative: with more than one partition the answer
//! would depend on the thread count and on how the input is cut. Such queries
//! used to run in one partition. [`ExactFloatSums`], a function rewrite run
//! before type coercion, changes every `SUM(x)` and `AVG(x)` over a float `x`,
//! and `AVG(x)` over an integer `x` (which DataFusion averages as doubles;
//! an integer `SUM` is exact already), into [`ExactFloatAgg`] (not
//! `DISTINCT`, no `ORDER BY` inside the call; window functions keep
//! DataFusion's, and run in one partition): the sum
//! kept exactly ([`crate::exact::FSum`]: a short list of non-overlapping
//! doubles per group), whose partial states merge exactly. `SUM` is that sum
//! rounded once to the nearest `DOUBLE`; `AVG` is that rounded sum divided by
//! the count (one more rounding). Both are `NULL` over no non-null value, as
//! SQL says. A NaN among the values gives NaN; infinities of both signs give
//! NaN, of one sign that infinity.

use crate::exact::FSum;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, BooleanArray, Float64Array,
    Float64Builder, UInt64Array, new_null_array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, UInt64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, Expr, ExprSchemable, GroupsAccumulator,
    Signature, Volatility,
};
use std::sync::Arc;

/// Name of the exact float `SUM` (the chunking rules count it as exact).
pub(crate) const EXACT_SUM: &str = "tessera_exact_float_sum";
/// Name of the exact float `AVG`.
pub(crate) const EXACT_AVG: &str = "tessera_exact_float_avg";

/// The function rewrite (see the module).
#[derive(Debug)]
pub struct ExactFloatSums;

impl FunctionRewrite for ExactFloatSums {
    fn name(&self) -> &str {
        "tessera_exact_float_sums"
    }

    fn rewrite(
        &self,
        expr: Expr,
        schema: &DFSchema,
        _config: &ConfigOptions,
    ) -> DfResult<Transformed<Expr>> {
        match expr {
            Expr::AggregateFunction(mut f)
                if !f.params.distinct
                    && f.params.order_by.is_empty()
                    && f.params.args.len() == 1 =>
            {
                let arg = f.params.args[0].get_type(schema).ok();
                let float = arg.as_ref().is_some_and(|t| t.is_floating());
                let integer = arg.as_ref().is_some_and(|t| t.is_integer());
                let avg = match f.func.name().to_ascii_lowercase().as_str() {
                    "sum" if float => false,
                    "avg" | "mean" if float || integer => true,
                    _ => return Ok(Transformed::no(Expr::AggregateFunction(f))),
                };
                f.func = Arc::new(AggregateUDF::new_from_impl(ExactFloatAgg::new(avg)));
                Ok(Transformed::yes(Expr::AggregateFunction(f)))
            }
            other => Ok(Transformed::no(other)),
        }
    }
}

/// `SUM` or `AVG` of a float (`AVG` also of an integer, each value taken as
/// its nearest double) through an exact sum.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ExactFloatAgg {
    avg: bool,
    signature: Signature,
}

/// The function's name: [`EXACT_AVG`] or [`EXACT_SUM`].
fn agg_name(avg: bool) -> &'static str {
    if avg { EXACT_AVG } else { EXACT_SUM }
}

impl ExactFloatAgg {
    fn new(avg: bool) -> Self {
        ExactFloatAgg {
            avg,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for ExactFloatAgg {
    fn name(&self) -> &str {
        agg_name(self.avg)
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn accumulator(&self, _acc_args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(ExactAccumulator {
            groups: ExactGroups::new(self.avg),
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[value]", args.name),
                DataType::Float64,
                true,
            )),
            Arc::new(Field::new(
                format!("{}[sum]", args.name),
                DataType::Binary,
                true,
            )),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::UInt64,
                true,
            )),
        ])
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(ExactGroups::new(self.avg)))
    }
}

/// One group: the exact sum of its non-null values and their count, side
/// by side (a random group costs one cache miss, not two).
#[derive(Clone, Debug, Default)]
struct Slot {
    sum: FSum,
    count: u64,
}

/// Per group: a [`Slot`].
#[derive(Debug)]
struct ExactGroups {
    avg: bool,
    slots: Vec<Slot>,
}

impl ExactGroups {
    fn new(avg: bool) -> Self {
        ExactGroups {
            avg,
            slots: Vec::new(),
        }
    }

    fn name(&self) -> &'static str {
        agg_name(self.avg)
    }

    fn grow(&mut self, total_num_groups: usize) {
        if self.slots.len() < total_num_groups {
            self.slots.resize_with(total_num_groups, Slot::default);
        }
    }

    /// The results of `slots` (taken by the caller).
    fn results(&self, slots: &[Slot]) -> ArrayRef {
        let values: Float64Array = slots
            .iter()
            .map(|s| {
                (s.count > 0).then(|| {
                    let v = s.sum.value();
                    if self.avg { v / s.count as f64 } else { v }
                })
            })
            .collect();
        Arc::new(values)
    }

    /// Partial states: a sum that is one double (or nothing) travels as that
    /// double in the `value` column; any other as [`FSum::to_state`] bytes
    /// in the `sum` column.
    fn states(slots: &[Slot]) -> Vec<ArrayRef> {
        let mut values = Float64Builder::with_capacity(slots.len());
        let mut bytes = BinaryBuilder::with_capacity(slots.len(), 0);
        let mut buf = Vec::new();
        for s in slots {
            match s.sum.single() {
                Some(v) => {
                    values.append_value(v);
                    bytes.append_null();
                }
                None => {
                    values.append_null();
                    s.sum.write_state(&mut buf);
                    bytes.append_value(&buf);
                }
            }
        }
        let counts: UInt64Array = slots.iter().map(|s| Some(s.count)).collect();
        vec![
            Arc::new(values.finish()),
            Arc::new(bytes.finish()),
            Arc::new(counts),
        ]
    }
}

impl GroupsAccumulator for ExactGroups {
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
        let wide = cast(v, &DataType::Float64)?;
        let wide = wide.as_primitive::<Float64Type>();
        for (i, &g) in group_indices.iter().enumerate() {
            if wide.is_null(i) || opt_filter.is_some_and(|f| !f.is_valid(i) || !f.value(i)) {
                continue;
            }
            let slot = &mut self.slots[g];
            slot.sum.add(wide.value(i));
            slot.count += 1;
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let slots = emit_to.take_needed(&mut self.slots);
        Ok(self.results(&slots))
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let slots = emit_to.take_needed(&mut self.slots);
        Ok(Self::states(&slots))
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.grow(total_num_groups);
        let [singles, sums, counts] = values else {
            return Err(DataFusionError::Internal(format!(
                "{}: a state is a value, a sum and a count",
                self.name()
            )));
        };
        let singles = singles.as_primitive::<Float64Type>();
        let sums: &BinaryArray = sums.as_binary();
        let counts = counts.as_primitive::<UInt64Type>();
        for (i, &g) in group_indices.iter().enumerate() {
            if counts.is_null(i) {
                continue;
            }
            let name = self.name();
            let slot = &mut self.slots[g];
            if singles.is_valid(i) {
                slot.sum.add(singles.value(i));
            } else if sums.is_valid(i) && !slot.sum.merge_state(sums.value(i)) {
                return Err(DataFusionError::Internal(format!(
                    "{name}: a partial state is malformed"
                )));
            }
            slot.count += counts.value(i);
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
            return Ok(Self::states(&[]));
        };
        let wide = cast(v, &DataType::Float64)?;
        let wide = wide.as_primitive::<Float64Type>();
        let kept: Vec<bool> = (0..wide.len())
            .map(|i| !wide.is_null(i) && opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i)))
            .collect();
        let singles: Float64Array = wide
            .iter()
            .zip(&kept)
            .map(|(x, &k)| x.filter(|_| k))
            .collect();
        let counts: UInt64Array = kept.iter().map(|&k| Some(u64::from(k))).collect();
        Ok(vec![
            Arc::new(singles),
            new_null_array(&DataType::Binary, wide.len()),
            Arc::new(counts),
        ])
    }

    /// An estimate in O(1) (DataFusion asks after every batch): a group's
    /// components usually fit inline.
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.slots.capacity() * std::mem::size_of::<Slot>()
    }
}

/// The ungrouped form: one group.
#[derive(Debug)]
struct ExactAccumulator {
    groups: ExactGroups,
}

impl Accumulator for ExactAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let n = values.first().map_or(0, |v| v.len());
        self.groups.update_batch(values, &vec![0; n], None, 1)
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        self.groups.grow(1);
        let out = self.groups.results(&self.groups.slots);
        ScalarValue::try_from_array(&out, 0)
    }

    fn size(&self) -> usize {
        self.groups.size()
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        self.groups.grow(1);
        let states = ExactGroups::states(&self.groups.slots);
        states
            .iter()
            .map(|a| ScalarValue::try_from_array(a, 0))
            .collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let n = states.first().map_or(0, |v| v.len());
        self.groups.merge_batch(states, &vec![0; n], 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Float64Array;

    fn values(v: &[Option<f64>]) -> ArrayRef {
        Arc::new(Float64Array::from(v.to_vec()))
    }

    fn acc(avg: bool) -> ExactAccumulator {
        ExactAccumulator {
            groups: ExactGroups::new(avg),
        }
    }

    fn result(a: &mut ExactAccumulator) -> Option<f64> {
        match a.evaluate() {
            Ok(ScalarValue::Float64(v)) => v,
            other => panic!("not a double: {other:?}"),
        }
    }

    /// Values whose naive left-to-right sum depends on their order.
    fn awkward() -> Vec<Option<f64>> {
        vec![
            Some(1e16),
            Some(1.0),
            None,
            Some(-1e16),
            Some(1.0),
            Some(0.1),
            Some(0.2),
            Some(-0.3),
        ]
    }

    #[test]
    fn any_cut_into_partial_states_gives_the_exact_sum() {
        let v = awkward();
        // The exact sum is 2 + (0.1 + 0.2 - 0.3 as doubles, exactly).
        let exact = {
            let mut s = crate::exact::ExactSum::new();
            v.iter().flatten().for_each(|&x| s.add(x));
            s.to_f64()
        };
        let naive: f64 = v.iter().flatten().sum();
        assert_ne!(naive, exact, "the data must expose order dependence");
        for cut in 0..=v.len() {
            let (mut a, mut b) = (acc(false), acc(false));
            a.update_batch(&[values(&v[..cut])]).expect("update");
            b.update_batch(&[values(&v[cut..])]).expect("update");
            let state = b.state().expect("state");
            let arrays: Vec<ArrayRef> =
                state.iter().map(|s| s.to_array().expect("array")).collect();
            a.merge_batch(&arrays).expect("merge");
            assert_eq!(result(&mut a), Some(exact), "cut at {cut}");
        }
    }

    #[test]
    fn avg_divides_the_exact_sum_by_the_count_and_empty_is_null() {
        let mut a = acc(true);
        assert_eq!(result(&mut a), None);
        a.update_batch(&[values(&[None, None])]).expect("update");
        assert_eq!(result(&mut a), None, "only nulls");
        a.update_batch(&[values(&awkward())]).expect("update");
        let mut s = acc(false);
        s.update_batch(&[values(&awkward())]).expect("update");
        let sum = result(&mut s).expect("a sum");
        assert_eq!(result(&mut a), Some(sum / 7.0));
    }

    #[test]
    fn non_finite_values_follow_ieee() {
        let mut a = acc(false);
        a.update_batch(&[values(&[Some(1.0), Some(f64::INFINITY)])])
            .expect("update");
        assert_eq!(result(&mut a), Some(f64::INFINITY));
        a.update_batch(&[values(&[Some(f64::NEG_INFINITY)])])
            .expect("update");
        assert!(result(&mut a).is_some_and(f64::is_nan));
    }
}
