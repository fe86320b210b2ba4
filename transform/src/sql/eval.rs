//! Evaluating a typed [`super::parse::Node`] ([`super::compile`]) over
//! Arrow columns, with DataFusion's rules and Arrow's kernels: the operand
//! types are coerced as DataFusion's type coercion does
//! ([`super::coerce`]: `numerical_coercion`, `comparison_coercion`,
//! `string_coercion`), and each operator runs the kernel DataFusion's
//! physical expression calls (`div`, `rem`, the `cmp` kernels, Kleene
//! `AND`/`OR`, `concat_elements_dyn`, casts with `safe: false`), except that
//! integer `+ - *` fail on overflow, as the compiler's session makes them
//! (its `CheckedArithmetic` rule) instead of wrapping. Type combinations
//! outside these rules are refused when the expression is compiled, never
//! evaluated differently.

use super::coerce::is_string;
use super::compile::{Compiled, Typed};
use super::parse::{Arith, Cmp};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, Scalar, UInt32Array};
use arrow_cast::CastOptions;
use arrow_cast::cast_with_options;
use arrow_cast::display::{DurationFormat, FormatOptions};
use std::sync::Arc;

/// DataFusion's cast options: errors instead of nulls, durations written out.
pub const CAST_OPTIONS: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new().with_duration_format(DurationFormat::Pretty),
};

/// A value during evaluation: a column, or one value for every row.
enum Value {
    Array(ArrayRef),
    Scalar(ArrayRef),
}

impl Value {
    fn into_array(self, rows: usize) -> Result<ArrayRef, String> {
        match self {
            Value::Array(a) => Ok(a),
            Value::Scalar(s) => {
                let idx = UInt32Array::from(vec![0u32; rows]);
                arrow_select::take::take(s.as_ref(), &idx, None).map_err(|e| e.to_string())
            }
        }
    }

    fn map(self, f: impl FnOnce(&ArrayRef) -> Result<ArrayRef, String>) -> Result<Value, String> {
        Ok(match self {
            Value::Array(a) => Value::Array(f(&a)?),
            Value::Scalar(s) => Value::Scalar(f(&s)?),
        })
    }

    fn is_scalar(&self) -> bool {
        matches!(self, Value::Scalar(_))
    }

    fn array(&self) -> &ArrayRef {
        match self {
            Value::Array(a) | Value::Scalar(a) => a,
        }
    }
}

impl Compiled {
    /// Evaluates the expression over `batch` (of the schema it was compiled
    /// for), one value per row.
    ///
    /// A result cast from one string type to another is left as it was:
    /// the text is the same, and the readers take every string type.
    pub fn eval(&self, batch: &RecordBatch) -> Result<ArrayRef, String> {
        let rows = batch.num_rows();
        match &self.root {
            Typed::Cast(inner, to) if is_string(to) => {
                let v = eval(inner, batch)?;
                if is_string(v.array().data_type()) {
                    v.into_array(rows)
                } else {
                    v.map(|a| cast_with_options(a, to, &CAST_OPTIONS).map_err(err))?
                        .into_array(rows)
                }
            }
            root => eval(root, batch)?.into_array(rows),
        }
    }
}

fn err(e: arrow_schema::ArrowError) -> String {
    e.to_string()
}

fn eval(t: &Typed, batch: &RecordBatch) -> Result<Value, String> {
    let rows = batch.num_rows();
    Ok(match t {
        Typed::Column(i) => Value::Array(Arc::clone(batch.column(*i))),
        Typed::Literal(a) => Value::Scalar(Arc::clone(a)),
        Typed::Cast(inner, to) => {
            eval(inner, batch)?.map(|a| cast_with_options(a, to, &CAST_OPTIONS).map_err(err))?
        }
        Typed::Arith(op, l, r) => {
            let (l, r) = (eval(l, batch)?, eval(r, batch)?);
            let scalar = l.is_scalar() && r.is_scalar();
            let (ld, rd) = (datum(&l), datum(&r));
            let out = match op {
                Arith::Add => arrow_arith::numeric::add(ld.as_ref(), rd.as_ref()),
                Arith::Sub => arrow_arith::numeric::sub(ld.as_ref(), rd.as_ref()),
                Arith::Mul => arrow_arith::numeric::mul(ld.as_ref(), rd.as_ref()),
                Arith::Div => arrow_arith::numeric::div(ld.as_ref(), rd.as_ref()),
                Arith::Rem => arrow_arith::numeric::rem(ld.as_ref(), rd.as_ref()),
            }
            .map_err(err)?;
            wrap(out, scalar)
        }
        Typed::Cmp(op, l, r) => {
            let (l, r) = (eval(l, batch)?, eval(r, batch)?);
            let scalar = l.is_scalar() && r.is_scalar();
            let (ld, rd) = (datum(&l), datum(&r));
            use arrow_ord::cmp;
            let out = match op {
                Cmp::Eq => cmp::eq(ld.as_ref(), rd.as_ref()),
                Cmp::NotEq => cmp::neq(ld.as_ref(), rd.as_ref()),
                Cmp::Lt => cmp::lt(ld.as_ref(), rd.as_ref()),
                Cmp::LtEq => cmp::lt_eq(ld.as_ref(), rd.as_ref()),
                Cmp::Gt => cmp::gt(ld.as_ref(), rd.as_ref()),
                Cmp::GtEq => cmp::gt_eq(ld.as_ref(), rd.as_ref()),
            }
            .map_err(err)?;
            wrap(Arc::new(out), scalar)
        }
        Typed::And(l, r) | Typed::Or(l, r) => {
            let (l, r) = (eval(l, batch)?, eval(r, batch)?);
            let scalar = l.is_scalar() && r.is_scalar();
            let n = if scalar { 1 } else { rows };
            let (l, r) = (to_rows(l, n)?, to_rows(r, n)?);
            let (l, r) = (l.as_boolean(), r.as_boolean());
            let out = if matches!(t, Typed::And(..)) {
                arrow_arith::boolean::and_kleene(l, r)
            } else {
                arrow_arith::boolean::or_kleene(l, r)
            }
            .map_err(err)?;
            wrap(Arc::new(out), scalar)
        }
        Typed::Not(inner) => eval(inner, batch)?.map(|a| {
            arrow_arith::boolean::not(a.as_boolean())
                .map(|b| Arc::new(b) as ArrayRef)
                .map_err(err)
        })?,
        Typed::Neg(inner) => eval(inner, batch)?
            .map(|a| arrow_arith::numeric::neg_wrapping(a.as_ref()).map_err(err))?,
        Typed::IsNull(inner, negated) => eval(inner, batch)?.map(|a| {
            let out = if *negated {
                arrow_arith::boolean::is_not_null(a.as_ref())
            } else {
                arrow_arith::boolean::is_null(a.as_ref())
            };
            out.map(|b| Arc::new(b) as ArrayRef).map_err(err)
        })?,
        Typed::Concat(l, r) => {
            let (l, r) = (eval(l, batch)?, eval(r, batch)?);
            let scalar = l.is_scalar() && r.is_scalar();
            let n = if scalar { 1 } else { rows };
            let (l, r) = (to_rows(l, n)?, to_rows(r, n)?);
            let out = arrow_string::concat_elements::concat_elements_dyn(l.as_ref(), r.as_ref())
                .map_err(err)?;
            wrap(out, scalar)
        }
        Typed::Coalesce(args) => {
            // As DataFusion's CASE: the first argument over every row, each
            // later one only over the rows still null (so an error it would
            // raise on the other rows, a division by zero, is not raised).
            let Some((first, rest)) = args.split_first() else {
                return Err("COALESCE without arguments".into());
            };
            let mut out = eval(first, batch)?.into_array(rows)?;
            for a in rest {
                let nulls = arrow_arith::boolean::is_null(out.as_ref()).map_err(err)?;
                if nulls.true_count() == 0 {
                    break;
                }
                let sub = arrow_select::filter::filter_record_batch(batch, &nulls).map_err(err)?;
                let v = eval(a, &sub)?.into_array(sub.num_rows())?;
                // Back to the rows they came from; the others stay as they are.
                let mut next = 0u32;
                let idx: UInt32Array = nulls
                    .values()
                    .iter()
                    .map(|null| {
                        null.then(|| {
                            next += 1;
                            next - 1
                        })
                    })
                    .collect();
                let spread = arrow_select::take::take(v.as_ref(), &idx, None).map_err(err)?;
                out = arrow_select::zip::zip(&nulls, &spread, &out).map_err(err)?;
            }
            Value::Array(out)
        }
    })
}

fn wrap(a: ArrayRef, scalar: bool) -> Value {
    if scalar {
        Value::Scalar(a)
    } else {
        Value::Array(a)
    }
}

fn to_rows(v: Value, n: usize) -> Result<ArrayRef, String> {
    match v {
        Value::Scalar(s) if n == 1 => Ok(s),
        v => v.into_array(n),
    }
}

/// A kernel argument: a column, or a scalar broadcast by the kernel.
fn datum(v: &Value) -> Box<dyn arrow_array::Datum + '_> {
    match v {
        Value::Array(a) => Box::new(a),
        Value::Scalar(s) => Box::new(Scalar::new(Arc::clone(s))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile::compile;
    use super::super::parse::{Parsed, parse};
    use super::*;
    use arrow_array::{Float32Array, Int32Array};
    use arrow_array::{Float64Array, StringArray};
    use arrow_schema::Field;
    use arrow_schema::{DataType, Schema};

    fn eval_sql(sql: &str, batch: &RecordBatch) -> Result<ArrayRef, String> {
        let Parsed::Native(node) = parse(sql)? else {
            return Err("unsupported".into());
        };
        compile(&node, &batch.schema())?.eval(batch)
    }

    fn batch() -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("a", DataType::Int32, true),
                Field::new("x", DataType::Float64, true),
                Field::new("s", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int32Array::from(vec![Some(1), None, Some(i32::MAX)])),
                Arc::new(Float64Array::from(vec![Some(0.5), Some(-2.0), None])),
                Arc::new(StringArray::from(vec![Some("p"), Some("q"), None])),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn coercion_and_kernels() {
        let b = batch();
        // Int32 - Int64 literal: both Int64.
        let r = eval_sql("a - 1", &b).expect("a - 1");
        assert_eq!(r.data_type(), &DataType::Int64);
        let r = r.as_primitive::<arrow_array::types::Int64Type>();
        assert_eq!(r.value(2), i64::from(i32::MAX) - 1);
        assert!(r.is_null(1));
        // Int32 + Int32 overflowing is an error, as in the compiler's session.
        let e = eval_sql("a + a", &b).expect_err("overflow");
        assert!(e.contains("Overflow") || e.contains("overflow"), "{e}");
        let r = eval_sql("CAST(x > 0 AS FLOAT)", &b).expect("cast");
        let r = r.as_any().downcast_ref::<Float32Array>().expect("f32");
        assert_eq!((r.value(0), r.value(1), r.is_null(2)), (1.0, 0.0, true));
        let r = eval_sql("s || '-' || CAST(a AS VARCHAR)", &b).expect("concat");
        let text: Vec<Option<String>> = (0..3)
            .map(|i| {
                r.is_valid(i)
                    .then(|| arrow_cast::display::array_value_to_string(&r, i).expect("text"))
            })
            .collect();
        assert_eq!(text, vec![Some("p-1".into()), None, None]);
        let r = eval_sql("x IS NOT NULL AND a > 0", &b).expect("and");
        let r = r.as_boolean();
        // true AND NULL is NULL; NULL AND false is false.
        assert_eq!((r.value(0), r.is_null(1), r.value(2)), (true, true, false));
    }

    fn texts(r: &ArrayRef) -> Vec<Option<String>> {
        (0..r.len())
            .map(|i| {
                r.is_valid(i)
                    .then(|| arrow_cast::display::array_value_to_string(r, i).expect("text"))
            })
            .collect()
    }

    #[test]
    fn coalesce_takes_the_first_value_and_evaluates_lazily() {
        let b = batch();
        let r = eval_sql("COALESCE(s, 'none')", &b).expect("strings");
        assert_eq!(r.data_type(), &DataType::Utf8);
        assert_eq!(
            texts(&r),
            vec![Some("p".into()), Some("q".into()), Some("none".into())]
        );
        // Int32 and Float64 meet in Float64; all null stays null.
        let r = eval_sql("COALESCE(a, x)", &b).expect("numbers");
        assert_eq!(r.data_type(), &DataType::Float64);
        let r = r.as_primitive::<arrow_array::types::Float64Type>();
        assert_eq!(
            (r.value(0), r.value(1), r.value(2)),
            (1.0, -2.0, i32::MAX as f64)
        );
        let r = eval_sql("COALESCE(NULL, x, a)", &b).expect("three");
        assert_eq!(
            r.as_primitive::<arrow_array::types::Float64Type>().value(2),
            i32::MAX as f64
        );
        // The second argument runs only where the first is null: row 2 alone,
        // where a + a overflows; with a value everywhere it never runs.
        let e = eval_sql("COALESCE(x, a + a)", &b).expect_err("row 2 overflows");
        assert!(e.contains("verflow"), "{e}");
        let r = eval_sql("COALESCE(s, CAST(a / 0 AS VARCHAR), 'z')", &b);
        assert!(r.is_err(), "row 2 divides by zero");
        let r = eval_sql("COALESCE(CAST(x AS BIGINT), 7 / 0)", &batch().slice(0, 2)).expect("lazy");
        assert_eq!(r.null_count(), 0);
        // A number with a string has no common type in DataFusion either.
        assert!(
            eval_sql("COALESCE(a, s)", &b)
                .unwrap_err()
                .contains("COALESCE of Int32, Utf8")
        );
    }

    #[test]
    fn refused_combinations_are_named() {
        let b = batch();
        assert!(
            eval_sql("s + 1", &b)
                .unwrap_err()
                .contains("arithmetic on Utf8")
        );
        assert!(
            eval_sql("nope + 1", &b)
                .unwrap_err()
                .contains("no column named \"nope\"")
        );
        assert!(eval_sql("CAST('x' AS INT)", &b).is_err());
    }
}
