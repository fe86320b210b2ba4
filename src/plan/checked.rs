//! Integer arithmetic and text-to-number casts whose failures say where they
//! happen.
//!
//! [`CheckedArithmetic`] is an analyzer rule that rewrites, in every
//! expression of a plan:
//! - integer `a + b`, `a - b`, `a * b` into calls that fail on overflow
//!   (DataFusion's operators wrap around silently);
//! - integer `a / b` and `a % b` into calls with DataFusion's own results and
//!   errors (the same Arrow kernels), whose errors name the column;
//! - `CAST(text AS number)` into a call with DataFusion's cast (the same Arrow
//!   cast, failing on a bad value) whose error names the column.
//!
//! "The column" is the pass column the expression computes: `__f3` for the
//! fourth field's input, `__split` for the split key; the build turns those
//! into spec keys (`fields.price`, `split.key`) with their line.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

/// The analyzer rule (see the module).
#[derive(Debug)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let inputs = node.inputs();
            if inputs.is_empty() {
                return Ok(Transformed::no(node));
            }
            let schema = merge_schema(&inputs);
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let label = match &e {
                    Expr::Alias(a) if a.name.starts_with("__f") || a.name == "__split" => {
                        Some(a.name.split('_').take(3).collect::<Vec<_>>().join("_"))
                    }
                    _ => None,
                };
                let out = e.transform_up(|x| checked(x, &schema, label.as_deref()))?;
                Ok(if out.transformed {
                    out.update_data(|e| saved.restore(e))
                } else {
                    out
                })
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "tessera_checked_arithmetic"
    }
}

fn call(op: Op, label: Option<&str>, args: Vec<Expr>) -> Transformed<Expr> {
    let udf = Arc::new(ScalarUDF::new_from_impl(Checked::new(op, label)));
    Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(udf, args)))
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}

fn checked(e: Expr, schema: &DFSchema, label: Option<&str>) -> DfResult<Transformed<Expr>> {
    match &e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let op = match op {
                Operator::Plus => Op::Add,
                Operator::Minus => Op::Sub,
                Operator::Multiply => Op::Mul,
                Operator::Divide => Op::Div,
                Operator::Modulo => Op::Rem,
                _ => return Ok(Transformed::no(e)),
            };
            let (Ok(lt), Ok(rt)) = (left.get_type(schema), right.get_type(schema)) else {
                return Ok(Transformed::no(e));
            };
            if !(lt.is_integer() && lt == rt) {
                return Ok(Transformed::no(e));
            }
            Ok(call(
                op,
                label,
                vec![left.as_ref().clone(), right.as_ref().clone()],
            ))
        }
        Expr::Cast(Cast { expr, field }) if field.data_type().is_numeric() => {
            match expr.get_type(schema) {
                Ok(t) if is_text(&t) => Ok(call(
                    Op::Cast(field.data_type().clone()),
                    label,
                    vec![expr.as_ref().clone()],
                )),
                _ => Ok(Transformed::no(e)),
            }
        }
        _ => Ok(Transformed::no(e)),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Cast(DataType),
}

/// One rewritten operation.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Checked {
    op: Op,
    /// The pass column the expression computes (`__f3`, `__split`), if any.
    label: Option<String>,
    signature: Signature,
}

impl Checked {
    fn new(op: Op, label: Option<&str>) -> Self {
        let arity = if matches!(op, Op::Cast(_)) { 1 } else { 2 };
        Checked {
            op,
            label: label.map(str::to_string),
            signature: Signature::any(arity, Volatility::Immutable),
        }
    }

    fn error(&self, e: datafusion::arrow::error::ArrowError, input: &DataType) -> DataFusionError {
        use datafusion::arrow::error::ArrowError;
        // Arrow's own message without its kind's prefix.
        let text = match &e {
            ArrowError::CastError(m) | ArrowError::ArithmeticOverflow(m) => m.clone(),
            other => other.to_string(),
        };
        let (what, detail) = match &self.op {
            Op::Div | Op::Rem if matches!(e, ArrowError::DivideByZero) => {
                ("division by zero", String::new())
            }
            Op::Cast(to) => (
                "cast failed",
                format!(
                    ": {} (use TRY_CAST to get a null instead, with fill_null on the field)",
                    text.replace(&format!("value of {to} type"), &format!("{to}")),
                ),
            ),
            _ => (
                "integer overflow",
                format!(
                    ": {text} (the result does not fit {input}; CAST to a wider type or to DOUBLE \
                     first)",
                ),
            ),
        };
        DataFusionError::External(Box::new(CheckedError {
            column: self.label.clone(),
            what,
            detail,
        }))
    }
}

/// A checked operation that failed: what happened, in which pass column.
/// The build turns the column into the spec key it computes.
#[derive(Debug)]
pub struct CheckedError {
    /// The pass column (`__f3`: the fourth field's input; `__split`: the
    /// split key), if the expression computes one.
    pub column: Option<String>,
    /// `integer overflow`, `division by zero`, `cast failed`.
    pub what: &'static str,
    /// The rest of the message (`: ...`), or nothing.
    pub detail: String,
}

impl std::fmt::Display for CheckedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = self
            .column
            .as_deref()
            .map(|c| format!(" in {c}"))
            .unwrap_or_default();
        write!(f, "{}{place}{}", self.what, self.detail)
    }
}

impl std::error::Error for CheckedError {}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "tessera_checked_add",
            Op::Sub => "tessera_checked_sub",
            Op::Mul => "tessera_checked_mul",
            Op::Div => "tessera_checked_div",
            Op::Rem => "tessera_checked_rem",
            Op::Cast(_) => "tessera_checked_cast",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(match &self.op {
            Op::Cast(t) => t.clone(),
            _ => arg_types.first().cloned().unwrap_or(DataType::Int64),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays: Vec<ArrayRef> = ColumnarValue::values_to_arrays(&args.args)?;
        let a = &arrays[0];
        let result = match &self.op {
            Op::Add => numeric::add(a, &arrays[1]),
            Op::Sub => numeric::sub(a, &arrays[1]),
            Op::Mul => numeric::mul(a, &arrays[1]),
            Op::Div => numeric::div(a, &arrays[1]),
            Op::Rem => numeric::rem(a, &arrays[1]),
            // DataFusion's CAST: Arrow's cast, failing on a value it cannot
            // convert.
            Op::Cast(to) => cast_with_options(
                a,
                to,
                &CastOptions {
                    safe: false,
                    ..Default::default()
                },
            ),
        }
        .map_err(|e| self.error(e, a.data_type()))?;
        if scalar && rows <= 1 {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?));
        }
        Ok(ColumnarValue::Array(result))
    }
}
