//! Reading a query output column as the values a field stores, with every
//! conversion checked: a string that is not a number, a fraction stored as an
//! integer, an integer or float outside the stored type's range are errors
//! naming the row and the value, never a null or a silently changed number.

use arrow_array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, FixedSizeBinaryArray, Float64Array, Int64Array,
    LargeBinaryArray, LargeStringArray, StringArray, StringViewArray, UInt64Array, cast::AsArray,
};
use arrow_cast::cast;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::DataType;
use tessera_reader::DType;

/// A value that cannot be read or stored: the row (within the batch) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueError {
    /// Row within the batch.
    pub row: usize,
    /// What is wrong, quoting the value.
    pub message: String,
}

impl ValueError {
    fn new(row: usize, message: impl Into<String>) -> Self {
        ValueError {
            row,
            message: message.into(),
        }
    }
}

/// The text of row `r` of `arr`, for messages (quoted for strings).
pub fn show(arr: &dyn Array, r: usize) -> String {
    let opts = FormatOptions::default();
    let text = ArrayFormatter::try_new(arr, &opts)
        .map(|f| f.value(r).to_string())
        .unwrap_or_else(|_| "?".into());
    if matches!(
        arr.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        format!("{text:?}")
    } else {
        text
    }
}

/// Casts `arr` to `to`, failing on the first value the cast would turn into
/// a null (Arrow's safe casts do that for values that do not parse or fit).
fn checked_cast(arr: &ArrayRef, to: &DataType, what: &str) -> Result<ArrayRef, ValueError> {
    let out = cast(arr, to).map_err(|e| {
        ValueError::new(
            0,
            format!("{} cannot be read as {what}: {e}", arr.data_type()),
        )
    })?;
    if out.null_count() > arr.null_count() {
        for r in 0..arr.len() {
            if arr.is_valid(r) && out.is_null(r) {
                return Err(ValueError::new(
                    r,
                    format!("{} is not {what}", show(arr.as_ref(), r)),
                ));
            }
        }
    }
    Ok(out)
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// A column read as floats.
pub struct Floats(Float64Array);

impl Floats {
    /// Numbers, booleans and decimals convert; text must parse as a number.
    pub fn read(arr: &ArrayRef) -> Result<Floats, ValueError> {
        let t = arr.data_type();
        if !(t.is_numeric() || is_text(t) || *t == DataType::Boolean || *t == DataType::Null) {
            return Err(ValueError::new(
                0,
                format!("a {t} column cannot be stored as numbers; convert it in an expr"),
            ));
        }
        // Decimals are exact rationals: each becomes its nearest double
        // (Arrow's cast rounds twice beyond 2^53).
        if let Some(exact) = crate::decimal::array_to_f64(arr) {
            return Ok(Floats(exact));
        }
        let out = checked_cast(arr, &DataType::Float64, "a number")?;
        Ok(Floats(out.as_primitive().clone()))
    }

    /// Row `r`, `None` for a null.
    #[inline]
    pub fn get(&self, r: usize) -> Option<f64> {
        self.0.is_valid(r).then(|| self.0.value(r))
    }
}

/// A column read as exact integers.
pub enum Ints {
    /// Signed values (all signed types and the unsigned ones below 64 bits).
    I64(Int64Array),
    /// Unsigned 64-bit values.
    U64(UInt64Array),
}

impl Ints {
    /// Integers read exactly; floats and decimals must be whole; text must
    /// parse as an integer; booleans are 0/1.
    pub fn read(arr: &ArrayRef) -> Result<Ints, ValueError> {
        let t = arr.data_type();
        match t {
            DataType::UInt64 => Ok(Ints::U64(arr.as_primitive().clone())),
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Boolean
            | DataType::Null => {
                let out = checked_cast(arr, &DataType::Int64, "an integer")?;
                Ok(Ints::I64(out.as_primitive().clone()))
            }
            DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..) => {
                let f = Floats::read(arr)?;
                for r in 0..arr.len() {
                    if let Some(x) = f.get(r)
                        && (x.fract() != 0.0 || !x.is_finite())
                    {
                        return Err(ValueError::new(
                            r,
                            format!("{} is not a whole number", show(arr.as_ref(), r)),
                        ));
                    }
                }
                // Whole floats beyond i64 go through u64 when they fit there.
                match checked_cast(arr, &DataType::Int64, "an integer") {
                    Ok(out) => Ok(Ints::I64(out.as_primitive().clone())),
                    Err(_) => {
                        let out = checked_cast(arr, &DataType::UInt64, "an integer in range")?;
                        Ok(Ints::U64(out.as_primitive().clone()))
                    }
                }
            }
            t if is_text(t) => match checked_cast(arr, &DataType::Int64, "an integer") {
                Ok(out) => Ok(Ints::I64(out.as_primitive().clone())),
                Err(e) => match checked_cast(arr, &DataType::UInt64, "an integer") {
                    Ok(out) => Ok(Ints::U64(out.as_primitive().clone())),
                    Err(_) => Err(e),
                },
            },
            other => Err(ValueError::new(
                0,
                format!("a {other} column cannot be stored as integers; convert it in an expr"),
            )),
        }
    }

    /// Row `r`, `None` for a null.
    #[inline]
    pub fn get(&self, r: usize) -> Option<i128> {
        match self {
            Ints::I64(a) => a.is_valid(r).then(|| i128::from(a.value(r))),
            Ints::U64(a) => a.is_valid(r).then(|| i128::from(a.value(r))),
        }
    }
}

/// A list column: row offsets into a flat child array.
pub struct Lists {
    offsets: Vec<usize>,
    valid: Vec<bool>,
    /// The flattened elements.
    pub child: ArrayRef,
}

impl Lists {
    /// `Some` for List, LargeList and FixedSizeList columns.
    pub fn read(col: &ArrayRef) -> Option<Lists> {
        let n = col.len();
        let (offsets, child): (Vec<usize>, ArrayRef) = match col.data_type() {
            DataType::List(_) => {
                let l = col.as_list::<i32>();
                (
                    l.value_offsets().iter().map(|&o| o as usize).collect(),
                    l.values().clone(),
                )
            }
            DataType::LargeList(_) => {
                let l = col.as_list::<i64>();
                (
                    l.value_offsets().iter().map(|&o| o as usize).collect(),
                    l.values().clone(),
                )
            }
            DataType::FixedSizeList(_, k) => {
                let l = col.as_fixed_size_list();
                let k = *k as usize;
                let base = l.offset() * k;
                ((0..=n).map(|r| base + r * k).collect(), l.values().clone())
            }
            _ => return None,
        };
        Some(Lists {
            offsets,
            valid: (0..n).map(|r| col.is_valid(r)).collect(),
            child,
        })
    }

    /// The element range of row `r`, `None` for a null list.
    #[inline]
    pub fn range(&self, r: usize) -> Option<std::ops::Range<usize>> {
        self.valid[r].then(|| self.offsets[r]..self.offsets[r + 1])
    }
}

/// Strings from any Arrow string type.
pub enum Strings<'a> {
    /// `Utf8`.
    Utf8(&'a StringArray),
    /// `LargeUtf8`.
    Large(&'a LargeStringArray),
    /// `Utf8View`.
    View(&'a StringViewArray),
}

impl<'a> Strings<'a> {
    /// A string column (the pass query casts text fields to strings).
    pub fn read(arr: &'a ArrayRef) -> Result<Strings<'a>, ValueError> {
        match arr.data_type() {
            DataType::Utf8 => Ok(Strings::Utf8(arr.as_string::<i32>())),
            DataType::LargeUtf8 => Ok(Strings::Large(arr.as_string::<i64>())),
            DataType::Utf8View => Ok(Strings::View(arr.as_string_view())),
            other => Err(ValueError::new(
                0,
                format!("expected a text column, got {other}"),
            )),
        }
    }

    /// Row `r`, `None` for a null.
    #[inline]
    pub fn get(&self, r: usize) -> Option<&str> {
        match self {
            Strings::Utf8(a) => a.is_valid(r).then(|| a.value(r)),
            Strings::Large(a) => a.is_valid(r).then(|| a.value(r)),
            Strings::View(a) => a.is_valid(r).then(|| a.value(r)),
        }
    }
}

/// Byte strings from any Arrow binary type.
pub enum Binaries<'a> {
    /// `Binary`.
    Binary(&'a BinaryArray),
    /// `LargeBinary`.
    Large(&'a LargeBinaryArray),
    /// `BinaryView`.
    View(&'a BinaryViewArray),
    /// `FixedSizeBinary`.
    Fixed(&'a FixedSizeBinaryArray),
}

impl<'a> Binaries<'a> {
    /// A binary column.
    pub fn read(arr: &'a ArrayRef) -> Result<Binaries<'a>, ValueError> {
        match arr.data_type() {
            DataType::Binary => Ok(Binaries::Binary(arr.as_binary::<i32>())),
            DataType::LargeBinary => Ok(Binaries::Large(arr.as_binary::<i64>())),
            DataType::BinaryView => Ok(Binaries::View(arr.as_binary_view())),
            DataType::FixedSizeBinary(_) => Ok(Binaries::Fixed(arr.as_fixed_size_binary())),
            other => Err(ValueError::new(
                0,
                format!("bytes needs a binary column, got {other}"),
            )),
        }
    }

    /// Row `r`, `None` for a null.
    #[inline]
    pub fn get(&self, r: usize) -> Option<&[u8]> {
        match self {
            Binaries::Binary(a) => a.is_valid(r).then(|| a.value(r)),
            Binaries::Large(a) => a.is_valid(r).then(|| a.value(r)),
            Binaries::View(a) => a.is_valid(r).then(|| a.value(r)),
            Binaries::Fixed(a) => a.is_valid(r).then(|| a.value(r)),
        }
    }
}

/// Stores a float as `dtype` (a float type) at the start of `rec`. A finite
/// value beyond the type's range is an error; NaN and infinities are stored.
#[inline]
pub fn put_float(rec: &mut [u8], dtype: DType, x: f64) -> Result<(), String> {
    let range = |max: f64| -> Result<(), String> {
        if x.is_finite() && x.abs() > max {
            Err(format!(
                "{x} is beyond the range of {dtype} (largest {max:e})"
            ))
        } else {
            Ok(())
        }
    };
    match dtype {
        DType::F32 => {
            range(f64::from(f32::MAX))?;
            rec[..4].copy_from_slice(&(x as f32).to_le_bytes());
        }
        DType::F64 => rec[..8].copy_from_slice(&x.to_le_bytes()),
        DType::F16 => {
            range(f64::from(half::f16::MAX))?;
            rec[..2].copy_from_slice(&half::f16::from_f64(x).to_le_bytes());
        }
        DType::Bf16 => {
            range(f64::from(half::bf16::MAX))?;
            rec[..2].copy_from_slice(&half::bf16::from_f64(x).to_le_bytes());
        }
        _ => {
            // An integer dtype holds a float only as a whole number.
            if x.fract() != 0.0 || !x.is_finite() {
                return Err(format!(
                    "{x} is not a whole number, and {dtype} stores integers"
                ));
            }
            return put_int(rec, dtype, x as i128);
        }
    }
    Ok(())
}

/// Stores an integer as `dtype` at the start of `rec`; a value that does not
/// fit an integer dtype is an error. Float dtypes take the nearest value.
#[inline]
pub fn put_int(rec: &mut [u8], dtype: DType, x: i128) -> Result<(), String> {
    macro_rules! put {
        ($t:ty) => {
            match <$t>::try_from(x) {
                Ok(v) => {
                    rec[..std::mem::size_of::<$t>()].copy_from_slice(&v.to_le_bytes());
                    Ok(())
                }
                Err(_) => Err(format!(
                    "{x} does not fit {dtype} ({}..={})",
                    <$t>::MIN,
                    <$t>::MAX
                )),
            }
        };
    }
    match dtype {
        DType::U8 => put!(u8),
        DType::I8 => put!(i8),
        DType::U16 => put!(u16),
        DType::I16 => put!(i16),
        DType::U32 => put!(u32),
        DType::I32 => put!(i32),
        DType::U64 => put!(u64),
        DType::I64 => put!(i64),
        _ => put_float(rec, dtype, x as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int32Array, StringArray, UInt64Array};
    use std::sync::Arc;

    #[test]
    fn text_that_is_not_a_number_is_an_error_naming_the_row() {
        let arr: ArrayRef = Arc::new(StringArray::from(vec![Some("1.5"), None, Some("abc")]));
        let e = Floats::read(&arr).err().expect("error");
        assert_eq!(e.row, 2);
        assert!(
            e.message.contains("\"abc\" is not a number"),
            "{}",
            e.message
        );
        let ok: ArrayRef = Arc::new(StringArray::from(vec![Some("1.5"), None, Some("-2e3")]));
        let f = Floats::read(&ok).expect("numbers");
        assert_eq!(
            (f.get(0), f.get(1), f.get(2)),
            (Some(1.5), None, Some(-2000.0))
        );
    }

    #[test]
    fn integers_are_exact_and_fractions_are_errors() {
        let big: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX, 0]));
        let i = Ints::read(&big).expect("u64");
        assert_eq!(i.get(0), Some(i128::from(u64::MAX)));
        let whole: ArrayRef = Arc::new(Float64Array::from(vec![3.0, -7.0]));
        assert_eq!(Ints::read(&whole).expect("whole").get(1), Some(-7));
        let frac: ArrayRef = Arc::new(Float64Array::from(vec![3.0, 1.5]));
        let e = Ints::read(&frac).err().expect("fraction");
        assert_eq!(e.row, 1);
        assert!(
            e.message.contains("1.5 is not a whole number"),
            "{}",
            e.message
        );
        let text: ArrayRef = Arc::new(StringArray::from(vec!["12", "x1"]));
        assert_eq!(Ints::read(&text).err().expect("text").row, 1);
        let small: ArrayRef = Arc::new(Int32Array::from(vec![-5]));
        assert_eq!(Ints::read(&small).expect("i32").get(0), Some(-5));
    }

    #[test]
    fn stores_check_ranges() {
        let mut rec = [0u8; 8];
        assert!(put_int(&mut rec, DType::U64, i128::from(u64::MAX)).is_ok());
        assert_eq!(u64::from_le_bytes(rec), u64::MAX);
        assert!(
            put_int(&mut rec, DType::I8, 200)
                .unwrap_err()
                .contains("does not fit i8")
        );
        assert!(
            put_float(&mut rec, DType::F32, 1e300)
                .unwrap_err()
                .contains("beyond")
        );
        assert!(put_float(&mut rec, DType::F32, f64::INFINITY).is_ok());
        assert!(put_float(&mut rec, DType::F16, 70000.0).is_err());
        assert!(put_float(&mut rec, DType::I32, 2.5).is_err());
        assert!(put_float(&mut rec, DType::I32, 2.0).is_ok());
        assert_eq!(i32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]), 2);
    }
}
