//! Conformance cases: raw rows and the record bytes this crate's transform
//! makes of them. Rows are drawn from pools of values per input column,
//! chosen from the artifact (vocabulary values and an unknown one, values
//! around the frozen means and ranges, nulls, short and long lists, the
//! empty string), or taken from a file; a row whose encoding fails (a null
//! where the field has no fill, a class out of range) is left out.

use crate::semantics::FrozenStats;
use crate::serving::{Transform, TransformError};
use crate::sql::{self, Node, Parsed};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, ListArray, RecordBatch,
    StringArray, UInt32Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use tessera_reader::InlineVocab;

/// One conformance case.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The raw row, `{column: value}` (see [`row_json`]).
    pub row: Value,
    /// The record's bytes, lowercase hex.
    pub record: String,
}

/// Up to `n` cases generated from `t`'s artifact, then every row of `rows`
/// that encodes (in order, up to `n` more).
pub fn conformance(
    t: &Transform,
    n: usize,
    rows: Option<&RecordBatch>,
) -> Result<Vec<Case>, TransformError> {
    let mut out = Vec::new();
    let pools = pools(t)?;
    if !pools.is_empty() {
        let schema = Arc::new(Schema::new(
            pools
                .iter()
                .map(|(name, p)| Field::new(name, p.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        // Rows mixing the pools: column c of candidate k takes pool entry
        // (k * step_c + c) mod len_c, steps coprime to the lengths.
        let mut k = 0usize;
        while out.len() < n && k < n * 16 + 64 {
            let cols: Vec<ArrayRef> = pools
                .iter()
                .enumerate()
                .map(|(c, (_, p))| {
                    let len = p.len().max(1);
                    let step = [1usize, 3, 5, 7, 11, 13, 17, 19][c % 8];
                    let i = (k * step + c * (k / len + 1)) % len;
                    p.slice(i, 1)
                })
                .collect();
            let row = RecordBatch::try_new(Arc::clone(&schema), cols)
                .map_err(|e| TransformError::Engine(e.to_string()))?;
            if let Some(case) = encode_row(t, &row)? {
                out.push(case);
            }
            k += 1;
        }
    }
    if let Some(rows) = rows {
        let mut taken = 0;
        for r in 0..rows.num_rows() {
            if taken == n {
                break;
            }
            if let Some(case) = encode_row(t, &rows.slice(r, 1))? {
                out.push(case);
                taken += 1;
            }
        }
    }
    Ok(out)
}

/// The case of a one-row batch, or `None` when its encoding fails on a value.
fn encode_row(t: &Transform, row: &RecordBatch) -> Result<Option<Case>, TransformError> {
    match t.apply(row) {
        Ok(enc) => Ok(Some(Case {
            row: row_json(row, 0),
            record: tessera_reader::hex(enc.records()),
        })),
        Err(
            TransformError::Value { .. }
            | TransformError::InputValue { .. }
            | TransformError::Sql { .. },
        ) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The columns the fields read, each with a pool of candidate values in the
/// type the build saw.
fn pools(t: &Transform) -> Result<Vec<(String, ArrayRef)>, TransformError> {
    let recorded = t.query_columns();
    // Which columns each field reads, and what the field does with them.
    let mut hints: HashMap<String, Hints> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for (i, f) in t.fields().iter().enumerate() {
        let chain = crate::chain::Chain::new(t.fields(), i);
        let stats = t.frozen().get(i).and_then(|s| s.as_ref());
        for (j, (sql_text, _)) in chain.select_items().into_iter().enumerate() {
            let cols = match sql::parse(&sql_text) {
                Ok(Parsed::Native(node)) => {
                    let direct = matches!(&node, Node::Column(_))
                        || matches!(&node, Node::Cast(inner, _) if matches!(inner.as_ref(), Node::Column(_)));
                    sql::columns(&node)
                        .into_iter()
                        .map(|c| (c, direct))
                        .collect()
                }
                _ => Vec::new(),
            };
            for (c, direct) in cols {
                if !order.contains(&c) {
                    order.push(c.clone());
                }
                let h = hints.entry(c).or_default();
                h.length = h.length.max(f.length.unwrap_or(0) as usize);
                h.bytes = h.bytes.or(f.bytes.map(|b| b as usize));
                if let Some(classes) = chain.one_hot {
                    h.max_int = h.max_int.max(classes as i64 + 1);
                }
                if !direct {
                    continue;
                }
                let stat = stats.and_then(|v| v.get(j).or_else(|| v.first()));
                match stat {
                    Some(FrozenStats::Vocab(InlineVocab { values, .. })) => {
                        let n = values.len();
                        h.text.extend(values.iter().take(6).cloned());
                        h.text
                            .extend(values.iter().skip(n.saturating_sub(2)).cloned());
                    }
                    Some(FrozenStats::Standardize { mean, std, .. }) => {
                        h.floats.extend([*mean, mean + std, mean - 2.0 * std]);
                    }
                    Some(FrozenStats::MinMax { min, max, .. }) => {
                        h.floats.extend([*min, *max, (min + max) / 2.0]);
                    }
                    None => {}
                }
            }
        }
    }
    let mut out = Vec::new();
    for c in order {
        let h = &hints[&c];
        let ty = recorded
            .and_then(|s| s.field_with_name(&c).ok())
            .map(|f| f.data_type().clone());
        out.push((c, pool(ty.as_ref(), h)?));
    }
    Ok(out)
}

#[derive(Default)]
struct Hints {
    text: Vec<String>,
    floats: Vec<f64>,
    length: usize,
    bytes: Option<usize>,
    max_int: i64,
}

fn cast(a: ArrayRef, to: &DataType) -> Result<ArrayRef, TransformError> {
    cast_with_options(&a, to, &CastOptions::default())
        .map_err(|e| TransformError::Engine(format!("conformance values of {to}: {e}")))
}

/// Candidate values of a column of type `ty` (unknown: text and numbers
/// are tried as text).
fn pool(ty: Option<&DataType>, h: &Hints) -> Result<ArrayRef, TransformError> {
    let ints = || {
        let top = h.max_int.max(16);
        let mut v: Vec<Option<i64>> = (0..=top).map(Some).collect();
        v.extend([
            Some(-1),
            Some(-7),
            Some(100),
            Some(1000),
            Some(123_456),
            None,
        ]);
        Arc::new(Int64Array::from(v)) as ArrayRef
    };
    let floats = || {
        let mut v: Vec<Option<f64>> = [0.0, 1.0, -1.0, 0.5, 2.5, -3.25, 1e3, 1e-3, 12345.678]
            .into_iter()
            .map(Some)
            .collect();
        v.extend(h.floats.iter().copied().filter(|x| x.is_finite()).map(Some));
        v.push(None);
        Arc::new(Float64Array::from(v)) as ArrayRef
    };
    let texts = || {
        let mut v: Vec<Option<String>> = h.text.iter().cloned().map(Some).collect();
        for s in [
            "",
            "a",
            "tessera",
            "JFK-LAX",
            "\u{e9}\u{20ac}\u{65e5}",
            "not in the vocabulary",
        ] {
            v.push(Some(s.to_string()));
        }
        v.push(None);
        Arc::new(StringArray::from(v)) as ArrayRef
    };
    let Some(ty) = ty else {
        return Ok(texts());
    };
    Ok(match ty {
        t if t.is_integer() => cast(ints(), t)?,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => cast(floats(), ty)?,
        t if sql::is_string(t) => cast(texts(), t)?,
        DataType::Boolean => Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => {
            let n = match ty {
                DataType::FixedSizeBinary(n) => *n as usize,
                _ => h.bytes.unwrap_or(4),
            };
            let vals: Vec<Vec<u8>> = vec![
                (0..n).map(|i| i as u8).collect(),
                vec![0xff; n],
                (0..n).map(|i| (i * 37 + 11) as u8).collect(),
                vec![0; n + 1],
            ];
            let mut v: Vec<Option<&[u8]>> = vals.iter().map(|b| Some(b.as_slice())).collect();
            v.push(None);
            cast(Arc::new(BinaryArray::from(v)), ty)?
        }
        DataType::List(child) | DataType::LargeList(child) => {
            let len = h.length.max(2);
            let inner = pool(Some(child.data_type()), &Hints::default())?;
            // Lists of 0, 1, len - 1, len and len + 2 elements, and a null.
            let sizes = [0, 1, len - 1, len, len + 2];
            let mut idx = Vec::new();
            let mut offsets = vec![0i32];
            for (k, &s) in sizes.iter().enumerate() {
                // The child pool ends with a null: only the list of `len`
                // elements may draw it.
                let m = inner.len().saturating_sub(usize::from(k != 3)).max(1);
                for e in 0..s {
                    idx.push(((k * 7 + e * 3) % m) as u32);
                }
                offsets.push(idx.len() as i32);
            }
            offsets.push(idx.len() as i32);
            let values = arrow_select::take::take(inner.as_ref(), &UInt32Array::from(idx), None)
                .map_err(|e| TransformError::Engine(e.to_string()))?;
            let mut valid = vec![true; sizes.len()];
            valid.push(false);
            let list = ListArray::try_new(
                Arc::new(Field::new("item", values.data_type().clone(), true)),
                OffsetBuffer::new(offsets.into()),
                values,
                Some(valid.into()),
            )
            .map_err(|e| TransformError::Engine(e.to_string()))?;
            cast(Arc::new(list), ty)?
        }
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {
            let days = Arc::new(arrow_array::Date32Array::from(vec![
                Some(0),
                Some(15706),
                Some(19000),
                None,
            ]));
            cast(days, ty)?
        }
        other => cast(Arc::new(arrow_array::NullArray::new(1)), other)?,
    })
}

/// Row `r` of `batch` as JSON: `{column: value}` with null, booleans,
/// integers and strings as themselves, floats as numbers (NaN and the
/// infinities as the strings "NaN", "inf", "-inf"), binary as `{"hex": ...}`,
/// lists as arrays, and other types as the text Arrow writes for them.
pub fn row_json(batch: &RecordBatch, r: usize) -> Value {
    let mut m = serde_json::Map::new();
    for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
        m.insert(f.name().clone(), value_json(col.as_ref(), r));
    }
    Value::Object(m)
}

fn float_json(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(x)
    }
}

fn value_json(a: &dyn Array, r: usize) -> Value {
    if a.is_null(r) {
        return Value::Null;
    }
    macro_rules! int {
        ($t:ty) => {
            json!(a.as_primitive::<$t>().value(r))
        };
    }
    match a.data_type() {
        DataType::Boolean => json!(a.as_boolean().value(r)),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float16 => float_json(f64::from(a.as_primitive::<Float16Type>().value(r))),
        DataType::Float32 => float_json(f64::from(a.as_primitive::<Float32Type>().value(r))),
        DataType::Float64 => float_json(a.as_primitive::<Float64Type>().value(r)),
        DataType::Utf8 => json!(a.as_string::<i32>().value(r)),
        DataType::LargeUtf8 => json!(a.as_string::<i64>().value(r)),
        DataType::Utf8View => json!(a.as_string_view().value(r)),
        DataType::Binary => json!({ "hex": tessera_reader::hex(a.as_binary::<i32>().value(r)) }),
        DataType::LargeBinary => {
            json!({ "hex": tessera_reader::hex(a.as_binary::<i64>().value(r)) })
        }
        DataType::BinaryView => json!({ "hex": tessera_reader::hex(a.as_binary_view().value(r)) }),
        DataType::FixedSizeBinary(_) => {
            json!({ "hex": tessera_reader::hex(a.as_fixed_size_binary().value(r)) })
        }
        DataType::List(_) => {
            let v = a.as_list::<i32>().value(r);
            Value::Array((0..v.len()).map(|i| value_json(v.as_ref(), i)).collect())
        }
        DataType::LargeList(_) => {
            let v = a.as_list::<i64>().value(r);
            Value::Array((0..v.len()).map(|i| value_json(v.as_ref(), i)).collect())
        }
        DataType::FixedSizeList(..) => {
            let v = a.as_fixed_size_list().value(r);
            Value::Array((0..v.len()).map(|i| value_json(v.as_ref(), i)).collect())
        }
        _ => json!(arrow_cast::display::array_value_to_string(a, r).unwrap_or_default()),
    }
}
