//! Element types of record fields.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The element type of a field. All values are stored little-endian.
///
/// `f16` is IEEE 754 binary16; `bf16` is bfloat16 (the upper half of an f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Unsigned 8-bit integer (also used for raw bytes).
    U8,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
}

impl DType {
    /// Every dtype, in the order the format document lists them.
    pub const ALL: [DType; 12] = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F16,
        DType::Bf16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes. A field's alignment equals this size.
    pub const fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The name used in manifests and specs (`"f32"`, `"bf16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// True for the four floating-point types.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::Bf16 | DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown dtype {s:?} (expected one of u8 i8 u16 i16 u32 i32 u64 i64 f16 bf16 f32 f64)"
                )
            })
    }
}

/// A plain-old-data element type that a field view can be typed as.
///
/// Sealed: implemented only for the primitive types below, for which every bit
/// pattern is a valid value. `f16` and `bf16` fields are viewed as `u16`.
pub trait Element: Copy + sealed::Sealed + 'static {
    /// The dtypes whose bytes may be viewed as `Self`.
    fn accepts(dtype: DType) -> bool;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($t:ty, $($d:ident),+) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            fn accepts(dtype: DType) -> bool {
                matches!(dtype, $(DType::$d)|+)
            }
        }
    };
}

element!(u8, U8);
element!(i8, I8);
element!(u16, U16, F16, Bf16);
element!(i16, I16);
element!(u32, U32);
element!(i32, I32);
element!(u64, U64);
element!(i64, I64);
element!(f32, F32);
element!(f64, F64);

/// Views `bytes` as a slice of `T`, or `None` if the bytes are not aligned for
/// `T` or not a whole number of elements.
pub fn cast_slice<T: Element>(bytes: &[u8]) -> Option<&[T]> {
    // SAFETY: `Element` is sealed and implemented only for primitive integers
    // and floats, for which every bit pattern is a valid value and which have
    // no padding; `align_to` only yields a middle part that is correctly
    // aligned, and we reject any unaligned prefix or leftover suffix, so the
    // returned slice covers exactly `bytes`.
    let (head, mid, tail) = unsafe { bytes.align_to::<T>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
        }
        assert!("float".parse::<DType>().is_err());
    }

    #[test]
    fn element_acceptance_matches_size() {
        assert!(f32::accepts(DType::F32));
        assert!(!f32::accepts(DType::I32));
        assert!(u16::accepts(DType::Bf16));
        assert_eq!(DType::Bf16.size(), std::mem::size_of::<u16>());
    }
}
