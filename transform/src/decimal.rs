//! Decimals to `f64`, correctly rounded.
//!
//! Arrow's cast divides the unscaled integer by `10^scale` in floating point,
//! which rounds twice once the integer is beyond 2^53 (TPC-H Q1's
//! `sum_charge` 10385578376.585467 became ...585468, not the nearest double
//! ...585466). Here a decimal is the exact rational `unscaled / 10^scale`,
//! and the result is the double nearest to it (ties to even), as IEEE 754
//! rounds any exact value:
//! - when the unscaled integer and `10^scale` are both exact doubles (|v| <=
//!   2^53, scale <= 22), one IEEE division of the two is already correctly
//!   rounded;
//! - otherwise the exact decimal digits go through the standard library's
//!   decimal parser, which is correctly rounded for any number of digits.
//!
//! [`ratio_to_f64`] does the same for a quotient of a decimal by a count (an
//! exact average): the quotient's digits are produced by long division far
//! enough that the remaining digits cannot move the rounding, plus a sticky
//! digit when the division is not exact.

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type};
use arrow_array::{Array, ArrayRef, Float64Array};
use arrow_buffer::i256;
use arrow_schema::DataType;

/// Largest integer every smaller one of which is an exact double.
const EXACT_INT: u128 = 1 << 53;

/// The double nearest to `unscaled * 10^-scale`.
pub fn to_f64(unscaled: i128, scale: i8) -> f64 {
    if unscaled.unsigned_abs() <= EXACT_INT {
        let v = unscaled as f64;
        // 10^k is an exact double for k <= 22: one correctly rounded
        // operation on exact operands.
        if (0..=22).contains(&scale) {
            return v / 10f64.powi(i32::from(scale));
        }
    }
    parse_scaled(&unscaled.to_string(), scale)
}

/// The double nearest to a 256-bit `unscaled * 10^-scale`.
pub fn i256_to_f64(unscaled: i256, scale: i8) -> f64 {
    match unscaled.to_i128() {
        Some(v) => to_f64(v, scale),
        None => parse_scaled(&unscaled.to_string(), scale),
    }
}

/// `digits` (an optionally signed integer) times `10^-scale`, parsed.
fn parse_scaled(digits: &str, scale: i8) -> f64 {
    // The exponent form is exact text; `parse` rounds it correctly. It
    // cannot fail: the text is an integer and an exponent.
    format!("{digits}e{}", -i32::from(scale))
        .parse()
        .unwrap_or(f64::NAN)
}

/// Fractional digits produced beyond the integer part: with a sticky digit
/// after them, no rounding boundary of a double can fall between the
/// truncated quotient and the exact one (see [`ratio_to_f64`]).
const QUOTIENT_DIGITS: usize = 120;

/// The double nearest to `sum * 10^-scale / count` (an exact average of
/// decimals), `None` when `count` is 0.
///
/// The quotient `sum / count` is written out by long division: its integer
/// part, then [`QUOTIENT_DIGITS`] fractional digits, then a `1` if the
/// remainder is not yet zero. A double's rounding boundary (a midpoint
/// between two doubles) that lies strictly between the truncated digits and
/// the exact quotient would have to agree with the quotient to more than 100
/// significant digits; a rational with a denominator below 2^64 * 10^76
/// cannot come that close to a midpoint without equalling it, in which case
/// the division is exact and no sticky digit is added. So the parse of the
/// digits rounds like the exact value.
pub fn ratio_to_f64(sum: i256, count: u64, scale: i8) -> Option<f64> {
    if count == 0 {
        return None;
    }
    small_ratio(sum, count, scale).or_else(|| Some(ratio_by_digits(sum, count, scale)))
}

/// [`ratio_to_f64`] when the numerator and the denominator of the average
/// (`|sum|` and `count * 10^scale`, or `|sum| * 10^-scale` and `count`)
/// are both at most 2^53: each is then a double exactly, and IEEE division
/// rounds their quotient correctly, to the same double as the long
/// division. Most averages take this path (a long division costs two
/// 128-bit divisions per digit).
fn small_ratio(sum: i256, count: u64, scale: i8) -> Option<f64> {
    const EXACT: u128 = 1 << 53;
    let s = sum.to_i128()?;
    let n = s.unsigned_abs();
    let power = 10u128.checked_pow(u32::from(scale.unsigned_abs()))?;
    let (num, den) = if scale >= 0 {
        (n, u128::from(count).checked_mul(power)?)
    } else {
        (n.checked_mul(power)?, u128::from(count))
    };
    if num > EXACT || den > EXACT || den == 0 {
        return None;
    }
    let q = num as f64 / den as f64;
    Some(if s < 0 { -q } else { q })
}

/// [`ratio_to_f64`] by long division (see there), `count > 0`.
fn ratio_by_digits(sum: i256, count: u64, scale: i8) -> f64 {
    let negative = sum < i256::ZERO;
    let magnitude = sum.wrapping_abs();
    let divisor = i256::from_i128(i128::from(count));
    // |sum| / count and its remainder, both non-negative (|i256::MIN| wraps
    // to itself; a sum of i128 values times a u64 count never reaches it).
    let whole = magnitude.wrapping_div(divisor);
    let mut rem = magnitude.wrapping_rem(divisor).as_i128() as u128;
    let mut text = String::with_capacity(QUOTIENT_DIGITS + 48);
    if negative {
        text.push('-');
    }
    text.push_str(&whole.to_string());
    text.push('.');
    let count = u128::from(count);
    for _ in 0..QUOTIENT_DIGITS {
        if rem == 0 {
            break;
        }
        // rem < count < 2^64: rem * 10 fits a u128.
        rem *= 10;
        let digit = rem / count;
        rem %= count;
        text.push(char::from(b'0' + digit as u8));
    }
    if rem != 0 {
        text.push('1');
    }
    text.push_str(&format!("e{}", -i32::from(scale)));
    text.parse().unwrap_or(f64::NAN)
}

/// A decimal array as doubles, each correctly rounded; `None` when `arr` is
/// not a decimal array.
pub fn array_to_f64(arr: &ArrayRef) -> Option<Float64Array> {
    fn map<T: arrow_array::ArrowPrimitiveType>(
        arr: &ArrayRef,
        f: impl Fn(T::Native) -> f64,
    ) -> Float64Array {
        arr.as_primitive::<T>().unary(f)
    }
    Some(match arr.data_type() {
        DataType::Decimal32(_, s) => {
            let s = *s;
            map::<Decimal32Type>(arr, |v| to_f64(i128::from(v), s))
        }
        DataType::Decimal64(_, s) => {
            let s = *s;
            map::<Decimal64Type>(arr, |v| to_f64(i128::from(v), s))
        }
        DataType::Decimal128(_, s) => {
            let s = *s;
            map::<Decimal128Type>(arr, |v| to_f64(v, s))
        }
        DataType::Decimal256(_, s) => {
            let s = *s;
            map::<Decimal256Type>(arr, |v| i256_to_f64(v, s))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_quick_average_is_the_long_division_s() {
        // Sums, counts and scales around the 2^53 limits of the quick path,
        // and quotients that end, repeat, and lie near rounding midpoints.
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut quick = 0;
        for i in 0..200_000u64 {
            let bits = next() % 56;
            let sum = (next() >> (64 - bits.max(1))) as i128 * if i % 2 == 0 { 1 } else { -1 };
            let count = (next() >> (next() % 64)).max(1);
            let scale = (next() % 24) as i8 - 6;
            let wide = i256::from_i128(sum);
            let slow = ratio_by_digits(wide, count, scale);
            let got = ratio_to_f64(wide, count, scale).expect("count > 0");
            assert_eq!(
                got.to_bits(),
                slow.to_bits(),
                "{sum} / {count} at scale {scale}"
            );
            quick += usize::from(small_ratio(wide, count, scale).is_some());
        }
        // Both paths were taken.
        assert!(quick > 20_000 && quick < 190_000, "{quick} quick");
        let edge = i256::from_i128(1 << 53);
        assert_eq!(small_ratio(edge, 1, 0), Some(9007199254740992.0));
        assert_eq!(small_ratio(edge + i256::ONE, 1, 0), None);
        assert_eq!(small_ratio(i256::ONE, 1 << 53, 1), None);
        assert_eq!(small_ratio(i256::MAX, 1, 0), None);
    }

    /// The nearest double by the standard library's parser of the decimal
    /// text (an independent path from the fast one).
    fn nearest(text: &str) -> f64 {
        text.parse().expect("test text")
    }

    #[test]
    fn tpch_q1_sum_charge_is_the_nearest_double() {
        // The case: 10385578376.585467 at scale 6.
        let got = to_f64(10_385_578_376_585_467, 6);
        assert_eq!(got, nearest("10385578376.585467"));
        // The twice-rounded cast gives the neighbour above.
        let naive = 10_385_578_376_585_467_i128 as f64 / 1e6;
        assert_ne!(got.to_bits(), naive.to_bits());
    }

    #[test]
    fn fast_and_slow_paths_agree_with_the_parser() {
        let cases: &[(i128, i8)] = &[
            (0, 2),
            (1, 0),
            (-1, 1),
            (12345, 2),
            (-987_654_321, 9),
            (9_007_199_254_740_993, 3),
            (i128::MAX, 38),
            (i128::MIN + 1, 10),
            (5, -3),
            (123_456_789, 30),
        ];
        for &(v, s) in cases {
            let text = format!("{v}e{}", -i32::from(s));
            assert_eq!(to_f64(v, s), nearest(&text), "{v} scale {s}");
        }
        // A sweep through the fast path's edge.
        for v in (EXACT_INT as i128 - 1000)..(EXACT_INT as i128 + 1000) {
            for s in [1, 4, 7] {
                assert_eq!(to_f64(v, s), nearest(&format!("{v}e-{s}")), "{v} scale {s}");
            }
        }
    }

    #[test]
    fn averages_are_the_nearest_double_to_the_exact_quotient() {
        // 0.0500959589...: the AVG truncated to 0.050095 by
        // DataFusion's decimal rules.
        let sum = i256::from_i128(500_959_589);
        let got = ratio_to_f64(sum, 1_000_000, 4).expect("count > 0");
        assert_eq!(got, nearest("0.0500959589"));
        // A quotient with an infinite expansion: 1/3 at scale 0, -2/3 at 2.
        assert_eq!(ratio_to_f64(i256::ONE, 3, 0), Some(1.0 / 3.0));
        assert_eq!(
            ratio_to_f64(i256::from_i128(-2), 3, 2),
            Some(nearest("-0.006666666666666666666666666666666666667"))
        );
        assert_eq!(ratio_to_f64(i256::ONE, 0, 0), None);
        // Exact quotients need no sticky digit.
        assert_eq!(ratio_to_f64(i256::from_i128(10), 4, 1), Some(0.25));
    }

    #[test]
    fn arrays_convert_every_decimal_width_and_keep_nulls() {
        let a: ArrayRef = Arc::new(
            arrow_array::Decimal128Array::from(vec![Some(10_385_578_376_585_467), None])
                .with_precision_and_scale(20, 6)
                .expect("valid"),
        );
        let out = array_to_f64(&a).expect("decimal");
        assert_eq!(out.value(0), nearest("10385578376.585467"));
        assert!(out.is_null(1));
        let b: ArrayRef = Arc::new(
            arrow_array::Decimal64Array::from(vec![Some(-12_345)])
                .with_precision_and_scale(10, 2)
                .expect("valid"),
        );
        assert_eq!(array_to_f64(&b).expect("decimal").value(0), -123.45);
        let c: ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![1]));
        assert!(array_to_f64(&c).is_none());
    }
}
