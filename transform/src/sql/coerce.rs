//! Type coercion as DataFusion's (`numerical_coercion`,
//! `comparison_coercion`, `string_coercion`, `type_union_resolution`): the
//! common type two operands, or `COALESCE`'s arguments, are cast to. A
//! combination outside these rules has none, and is refused when the
//! expression is compiled.

use arrow_cast::can_cast_types;
use arrow_schema::DataType;

/// True for the string types, which hold the same values whichever one it is.
pub fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

pub(super) fn is_number(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Float16
            | Float32
            | Float64
    )
}

/// DataFusion's `numerical_coercion` for two number types, without the
/// decimal result it gives for UInt64 with a signed type.
fn numeric_common(l: &DataType, r: &DataType) -> Option<DataType> {
    use DataType::*;
    if l == r {
        return Some(l.clone());
    }
    Some(match (l, r) {
        (Float64, _) | (_, Float64) => Float64,
        (_, Float32) | (Float32, _) => Float32,
        (_, Float16) | (Float16, _) => Float16,
        (UInt64, Int64 | Int32 | Int16 | Int8) | (Int64 | Int32 | Int16 | Int8, UInt64) => {
            return None;
        }
        (UInt64, _) | (_, UInt64) => UInt64,
        (Int64, _)
        | (_, Int64)
        | (UInt32, Int32 | Int16 | Int8)
        | (Int32 | Int16 | Int8, UInt32) => Int64,
        (UInt32, _) | (_, UInt32) => UInt32,
        (Int32, _) | (_, Int32) | (UInt16, Int16 | Int8) | (Int16 | Int8, UInt16) => Int32,
        (UInt16, _) | (_, UInt16) => UInt16,
        (Int16, _) | (_, Int16) | (Int8, UInt8) | (UInt8, Int8) => Int16,
        (Int8, _) | (_, Int8) => Int8,
        (UInt8, _) | (_, UInt8) => UInt8,
        _ => return None,
    })
}

/// DataFusion's `string_coercion`.
fn string_common(l: &DataType, r: &DataType) -> Option<DataType> {
    use DataType::*;
    match (l, r) {
        (Utf8View, Utf8View | Utf8 | LargeUtf8) | (Utf8 | LargeUtf8, Utf8View) => Some(Utf8View),
        (LargeUtf8, Utf8 | LargeUtf8) | (Utf8, LargeUtf8) => Some(LargeUtf8),
        (Utf8, Utf8) => Some(Utf8),
        _ => None,
    }
}

/// The common type of an arithmetic operation's operands.
pub(super) fn arith_type(l: &DataType, r: &DataType) -> Option<DataType> {
    match (l, r) {
        (DataType::Null, t) | (t, DataType::Null) if is_number(t) => Some(t.clone()),
        (l, r) if is_number(l) && is_number(r) => numeric_common(l, r),
        _ => None,
    }
}

/// The common type of a comparison's operands (`comparison_coercion`).
pub(super) fn cmp_type(l: &DataType, r: &DataType) -> Option<DataType> {
    use DataType::*;
    let comparable = |t: &DataType| {
        is_number(t)
            || is_string(t)
            || matches!(
                t,
                Boolean | Date32 | Date64 | Timestamp(..) | Binary | LargeBinary
            )
    };
    if l == r && comparable(l) {
        return Some(l.clone());
    }
    if is_number(l) && is_number(r) {
        return numeric_common(l, r);
    }
    if let Some(t) = string_common(l, r) {
        return Some(t);
    }
    match (l, r) {
        (Null, t) | (t, Null) if comparable(t) => Some(t.clone()),
        (n, s) | (s, n) if is_number(n) && is_string(s) => Some(n.clone()),
        _ => None,
    }
}

/// The common type of `||`'s operands (`string_concat_coercion`): strings
/// coerce as strings; another type that casts to the string side's type
/// becomes that type.
pub(super) fn concat_type(l: &DataType, r: &DataType) -> Option<DataType> {
    use DataType::*;
    if let Some(t) = string_common(l, r) {
        return Some(t);
    }
    [Utf8View, Utf8, LargeUtf8]
        .into_iter()
        .find(|s| *l == *s && can_cast_types(r, s) || *r == *s && can_cast_types(l, s))
}

/// The common type of `COALESCE`'s arguments, as DataFusion's
/// `type_union_resolution` finds it for numbers and strings (nulls take the
/// others' type; all nulls are text); arguments all of one type keep it. Any
/// other mix (a number with a string, `UInt64` with a signed type, which
/// DataFusion makes a decimal) is refused.
pub(super) fn coalesce_type(types: &[DataType]) -> Option<DataType> {
    let first = types.first()?;
    if types.iter().all(|t| t == first) {
        return Some(if *first == DataType::Null {
            DataType::Utf8View
        } else {
            first.clone()
        });
    }
    let mut known = types.iter().filter(|t| **t != DataType::Null);
    let mut common = known.next()?.clone();
    for t in known {
        common = if is_number(&common) && is_number(t) {
            numeric_common(&common, t)?
        } else {
            string_common(&common, t)?
        };
    }
    Some(common)
}
