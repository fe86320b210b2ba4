//! Decimal arithmetic whose answers are exact numbers, not DataFusion's
//! scale rules.
//!
//! DataFusion types `AVG(decimal(p, s))` as `decimal(p + 4, s + 4)` and a
//! decimal quotient with a fixed scale, so both are truncated (TPC-H Q1's
//! `avg(l_discount)` 0.0500959589... came out 0.050095). A user storing the
//! answer in an `f64` field expects the number itself. [`ExactDecimals`] is a
//! function rewrite, run before type coercion, that changes in every
//! expression of a plan:
//! - `AVG(x)` over a decimal `x` (also as a window function) into
//!   [`ExactAvg`]: the exact sum (256-bit) over the exact count, rounded once
//!   to the nearest `DOUBLE`;
//! - `a / b` where one side is a decimal and the other a decimal or an
//!   integer into a `DOUBLE` division of the two operands, each converted to
//!   its nearest double (DuckDB's rule: a decimal quotient is a `DOUBLE`);
//! - a decimal operand of arithmetic with a float into its nearest double
//!   (DataFusion's cast rounds twice beyond 2^53).
//!
//! `AVG(DISTINCT x)` over a decimal keeps DataFusion's decimal rule (docs/
//! SPEC.md says so, and how to get a float average).

use super::decimal_avg::{AvgGroups, Slot, malformed_state};
use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Decimal256Type, Field, FieldRef, UInt64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, BinaryExpr, ColumnarValue, Expr, ExprSchemable,
    GroupsAccumulator, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, WindowFunctionDefinition,
};
use std::sync::Arc;
use tessera_transform::decimal;

/// The function rewrite (see the module).
#[derive(Debug)]
pub struct ExactDecimals;

impl FunctionRewrite for ExactDecimals {
    fn name(&self) -> &str {
        "tessera_exact_decimals"
    }

    fn rewrite(
        &self,
        expr: Expr,
        schema: &DFSchema,
        _config: &ConfigOptions,
    ) -> DfResult<Transformed<Expr>> {
        let type_of = |e: &Expr| e.get_type(schema).ok();
        match expr {
            Expr::AggregateFunction(mut f)
                if is_avg(f.func.name())
                    && !f.params.distinct
                    && f.params.args.len() == 1
                    && type_of(&f.params.args[0]).is_some_and(|t| t.is_decimal()) =>
            {
                f.func = exact_avg();
                Ok(Transformed::yes(Expr::AggregateFunction(f)))
            }
            Expr::WindowFunction(mut w)
                if matches!(&w.fun, WindowFunctionDefinition::AggregateUDF(u) if is_avg(u.name()))
                    && !w.params.distinct
                    && w.params.args.len() == 1
                    && type_of(&w.params.args[0]).is_some_and(|t| t.is_decimal()) =>
            {
                w.fun = WindowFunctionDefinition::AggregateUDF(exact_avg());
                Ok(Transformed::yes(Expr::WindowFunction(w)))
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_arithmetic(op) => {
                let (Some(lt), Some(rt)) = (type_of(&left), type_of(&right)) else {
                    return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                        left,
                        op,
                        right,
                    })));
                };
                let decimal_quotient = op == Operator::Divide
                    && ((lt.is_decimal() && (rt.is_decimal() || rt.is_integer()))
                        || (rt.is_decimal() && lt.is_integer()));
                let with_float =
                    (lt.is_decimal() && rt.is_floating()) || (rt.is_decimal() && lt.is_floating());
                if !(decimal_quotient || with_float) {
                    return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                        left,
                        op,
                        right,
                    })));
                }
                let side = |e: Box<Expr>, t: &DataType| {
                    if t.is_decimal() || t.is_integer() {
                        Box::new(to_double(*e))
                    } else {
                        e
                    }
                };
                Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr {
                    left: side(left, &lt),
                    op,
                    right: side(right, &rt),
                })))
            }
            other => Ok(Transformed::no(other)),
        }
    }
}

fn is_avg(name: &str) -> bool {
    name.eq_ignore_ascii_case("avg") || name.eq_ignore_ascii_case("mean")
}

fn is_arithmetic(op: Operator) -> bool {
    matches!(
        op,
        Operator::Plus | Operator::Minus | Operator::Multiply | Operator::Divide
    )
}

fn exact_avg() -> Arc<AggregateUDF> {
    Arc::new(AggregateUDF::new_from_impl(ExactAvg::default()))
}

fn to_double(e: Expr) -> Expr {
    let udf = Arc::new(ScalarUDF::new_from_impl(ToDouble::default()));
    Expr::ScalarFunction(ScalarFunction::new_udf(udf, vec![e]))
}

/// A number to its nearest `DOUBLE`: decimals exactly rounded, other types by
/// Arrow's cast.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToDouble {
    signature: Signature,
}

impl Default for ToDouble {
    fn default() -> Self {
        ToDouble {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToDouble {
    fn name(&self) -> &str {
        "tessera_to_double"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arg = args.args.into_iter().next().ok_or_else(|| {
            DataFusionError::Internal("tessera_to_double takes one argument".into())
        })?;
        let scalar = matches!(arg, ColumnarValue::Scalar(_));
        let array = arg.into_array(1)?;
        let out: ArrayRef = match decimal::array_to_f64(&array) {
            Some(exact) => Arc::new(exact),
            None => cast(&array, &DataType::Float64)?,
        };
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `AVG` of a decimal as the `DOUBLE` nearest to the exact average.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExactAvg {
    signature: Signature,
}

impl Default for ExactAvg {
    fn default() -> Self {
        ExactAvg {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// The scale of an aggregate's decimal argument.
fn input_scale(args: &AccumulatorArgs) -> i8 {
    args.expr_fields
        .first()
        .map_or(0, |f| scale_of(f.data_type()))
}

/// The scale of a decimal type (0 for other types).
fn scale_of(t: &DataType) -> i8 {
    match t {
        DataType::Decimal32(_, s)
        | DataType::Decimal64(_, s)
        | DataType::Decimal128(_, s)
        | DataType::Decimal256(_, s) => *s,
        _ => 0,
    }
}

impl AggregateUDFImpl for ExactAvg {
    fn name(&self) -> &str {
        "tessera_exact_avg"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(AvgAccumulator::new(input_scale(&acc_args))))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(AvgGroups::new(input_scale(&args))))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let scale = args
            .input_fields
            .first()
            .map(|f| scale_of(f.data_type()))
            .unwrap_or(0);
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[sum]", args.name),
                DataType::Decimal256(76, scale),
                true,
            )),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::UInt64,
                true,
            )),
        ])
    }
}

/// The exact average of one group (see [`super::decimal_avg::Slot`]).
#[derive(Debug)]
struct AvgAccumulator {
    scale: i8,
    slot: Slot,
}

impl AvgAccumulator {
    fn new(scale: i8) -> Self {
        AvgAccumulator {
            scale,
            slot: Slot::default(),
        }
    }

    /// The values as 256-bit unscaled integers at this accumulator's scale.
    fn unscaled(&self, values: &ArrayRef) -> DfResult<ArrayRef> {
        Ok(cast(values, &DataType::Decimal256(76, self.scale))?)
    }
}

impl Accumulator for AvgAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let Some(v) = values.first() else {
            return Ok(());
        };
        let wide = self.unscaled(v)?;
        for v in wide.as_primitive::<Decimal256Type>().iter().flatten() {
            self.slot.add(v, 1)?;
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let Some(v) = values.first() else {
            return Ok(());
        };
        let wide = self.unscaled(v)?;
        for v in wide.as_primitive::<Decimal256Type>().iter().flatten() {
            self.slot.sub(v)?;
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Float64(self.slot.average(self.scale)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(self.slot.state(self.scale).to_vec())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let [sums, counts] = states else {
            return Err(malformed_state());
        };
        let sums = self.unscaled(sums)?;
        let sums = sums.as_primitive::<Decimal256Type>();
        let counts = counts.as_primitive::<UInt64Type>();
        for (s, c) in sums.iter().zip(counts.iter()) {
            if let (Some(s), Some(c)) = (s, c) {
                self.slot.add(s, c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decimals(values: &[Option<i128>], scale: i8) -> ArrayRef {
        Arc::new(
            datafusion::arrow::array::Decimal128Array::from(values.to_vec())
                .with_precision_and_scale(15, scale)
                .expect("valid decimal type"),
        )
    }

    #[test]
    fn the_average_is_exact_across_partial_states() {
        // Two partial accumulators merge; the average is rounded once.
        let mut a = AvgAccumulator::new(2);
        let mut b = AvgAccumulator::new(2);
        a.update_batch(&[decimals(&[Some(1), Some(2), None], 2)])
            .expect("update");
        b.update_batch(&[decimals(&[Some(4)], 2)]).expect("update");
        let state: Vec<ArrayRef> = b
            .state()
            .expect("state")
            .into_iter()
            .map(|s| s.to_array().expect("array"))
            .collect();
        a.merge_batch(&state).expect("merge");
        // (0.01 + 0.02 + 0.04) / 3, rounded once.
        assert_eq!(
            a.evaluate().expect("value"),
            ScalarValue::Float64(Some("0.0233333333333333333333".parse().expect("f64")))
        );
        a.retract_batch(&[decimals(&[Some(4)], 2)])
            .expect("retract");
        assert_eq!(
            a.evaluate().expect("value"),
            ScalarValue::Float64(Some(0.015))
        );
        let mut empty = AvgAccumulator::new(2);
        assert_eq!(empty.evaluate().expect("value"), ScalarValue::Float64(None));
    }

    /// The grouped form gives each group what the one-group accumulator gives
    /// over that group's rows: with nulls, a FILTER clause, values near the
    /// 128-bit limit, and partial states merged across two "partitions".
    #[test]
    fn grouped_averages_equal_the_one_group_accumulator() {
        use datafusion::arrow::array::BooleanArray;
        use datafusion::logical_expr::EmitTo;
        let groups = 7;
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let rows: Vec<(usize, Option<i128>, Option<bool>)> = (0..2000)
            .map(|_| {
                let g = (next() % groups as u64) as usize;
                let v = match next() % 10 {
                    0 => None,
                    1 => Some(i128::MAX / 3 - (next() % 1000) as i128),
                    _ => Some((next() % 2_000_000) as i128 - 1_000_000),
                };
                let keep = match next() % 5 {
                    0 => Some(false),
                    1 => None,
                    _ => Some(true),
                };
                (g, v, keep)
            })
            .collect();
        let (left, right) = rows.split_at(1234);
        let mut merged = AvgGroups::new(3);
        for (i, part) in [left, right].into_iter().enumerate() {
            let mut partial = AvgGroups::new(3);
            let idx: Vec<usize> = part.iter().map(|r| r.0).collect();
            let values = decimals(&part.iter().map(|r| r.1).collect::<Vec<_>>(), 3);
            let filter: BooleanArray = part.iter().map(|r| r.2).collect();
            if i == 0 {
                partial
                    .update_batch(&[values], &idx, Some(&filter), groups)
                    .expect("update");
                let state = partial.state(EmitTo::All).expect("state");
                merged
                    .merge_batch(&state, &(0..groups).collect::<Vec<_>>(), groups)
                    .expect("merge");
            } else {
                // Skipped partial aggregation: every row its own state.
                let state = partial
                    .convert_to_state(&[values], Some(&filter))
                    .expect("state");
                merged.merge_batch(&state, &idx, groups).expect("merge");
            }
        }
        let got = merged.evaluate(EmitTo::All).expect("evaluate");
        for g in 0..groups {
            let mut one = AvgAccumulator::new(3);
            let kept: Vec<Option<i128>> = rows
                .iter()
                .filter(|r| r.0 == g && r.2 == Some(true))
                .map(|r| r.1)
                .collect();
            one.update_batch(&[decimals(&kept, 3)]).expect("update");
            let want = one.evaluate().expect("value");
            assert_eq!(
                ScalarValue::try_from_array(&got, g).expect("value"),
                want,
                "group {g}"
            );
        }
        // A group no row reached averages to NULL.
        let mut empty = AvgGroups::new(3);
        empty
            .update_batch(&[decimals(&[], 3)], &[], None, 2)
            .expect("update");
        let out = empty.evaluate(EmitTo::All).expect("evaluate");
        assert_eq!(out.len(), 2);
        assert_eq!(out.null_count(), 2);
    }
}
