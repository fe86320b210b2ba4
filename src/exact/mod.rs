//! Exact sums of floats, so that statistics do not depend on the order values
//! arrive in, nor on how the input is cut into chunks or batches.
//!
//! [`ExactSum`] keeps the sum of any number of `f64` values as one big fixed
//! point integer (a Kulisch accumulator): every finite `f64` is an integer
//! multiple of 2^-1074, so adding it is exact, and the result is rounded to
//! `f64` once, at the end. [`variance`] then computes `n*Q - S^2` exactly from
//! the sums of values `S` and of their squares `Q`.

mod fsum;
pub use fsum::FSum;

/// Bits per limb.
const LIMB_BITS: u32 = 32;
/// Limbs: 2098 bits for any finite f64 scaled by 2^1074, plus 64 bits of
/// headroom for up to 2^64 additions.
const LIMBS: usize = 68;
/// Additions between carry propagations (each adds < 2^32 to a limb that
/// holds up to 2^63).
const NORMALIZE_EVERY: u32 = 1 << 30;

/// The exact sum of `f64` values.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExactSum {
    limbs: Vec<i64>,
    pending: u32,
    nan: u64,
    pos_inf: u64,
    neg_inf: u64,
}

impl Default for ExactSum {
    fn default() -> Self {
        ExactSum {
            limbs: vec![0; LIMBS],
            pending: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
        }
    }
}

impl ExactSum {
    /// An empty sum (zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `x` exactly.
    #[inline]
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            if x.is_nan() {
                self.nan += 1;
            } else if x > 0.0 {
                self.pos_inf += 1;
            } else {
                self.neg_inf += 1;
            }
            return;
        }
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as u32;
        let frac = bits & ((1u64 << 52) - 1);
        // x * 2^1074 = m * 2^p, an integer.
        let (m, p) = if exp == 0 {
            (frac, 0)
        } else {
            (frac | (1u64 << 52), exp - 1)
        };
        if m == 0 {
            return;
        }
        let k = (p / LIMB_BITS) as usize;
        let v = u128::from(m) << (p % LIMB_BITS);
        let parts = [
            (v & 0xffff_ffff) as i64,
            ((v >> 32) & 0xffff_ffff) as i64,
            (v >> 64) as i64,
        ];
        let negative = bits >> 63 == 1;
        for (j, part) in parts.into_iter().enumerate() {
            if negative {
                self.limbs[k + j] -= part;
            } else {
                self.limbs[k + j] += part;
            }
        }
        self.pending += 1;
        if self.pending >= NORMALIZE_EVERY {
            self.normalize();
        }
    }

    /// Adds another sum.
    pub fn merge(&mut self, other: &ExactSum) {
        let mut o = other.clone();
        o.normalize();
        self.normalize();
        for (a, b) in self.limbs.iter_mut().zip(&o.limbs) {
            *a += *b;
        }
        self.pending = 1;
        self.normalize();
        self.nan += other.nan;
        self.pos_inf += other.pos_inf;
        self.neg_inf += other.neg_inf;
    }

    /// The sum as bytes, for a partial aggregate's state: the counts of NaN,
    /// +inf and -inf (u64 each), the index of the first non-zero limb (u8),
    /// then the limbs from it to the last non-zero one (i64 each, after carry
    /// propagation), all little-endian. Equal sums give equal bytes.
    pub fn to_state(&self) -> Vec<u8> {
        let mut s = self.clone();
        s.normalize();
        let first = s.limbs.iter().position(|&l| l != 0).unwrap_or(0);
        let last = s.limbs.iter().rposition(|&l| l != 0).unwrap_or(0);
        let mut out = Vec::with_capacity(25 + 8 * (last + 1 - first));
        for c in [s.nan, s.pos_inf, s.neg_inf] {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out.push(first as u8);
        for l in &s.limbs[first..=last] {
            out.extend_from_slice(&l.to_le_bytes());
        }
        out
    }

    /// The sum [`ExactSum::to_state`] wrote; `None` for bytes it cannot
    /// have written.
    pub fn from_state(bytes: &[u8]) -> Option<ExactSum> {
        let word = |b: &[u8]| -> Option<[u8; 8]> { b.try_into().ok() };
        let (counts, rest) = bytes.split_at_checked(24)?;
        let (&first, limbs) = rest.split_first()?;
        let first = usize::from(first);
        if limbs.len() % 8 != 0 || first + limbs.len() / 8 > LIMBS {
            return None;
        }
        let mut s = ExactSum::new();
        s.nan = u64::from_le_bytes(word(&counts[0..8])?);
        s.pos_inf = u64::from_le_bytes(word(&counts[8..16])?);
        s.neg_inf = u64::from_le_bytes(word(&counts[16..24])?);
        for (k, chunk) in limbs.chunks_exact(8).enumerate() {
            s.limbs[first + k] = i64::from_le_bytes(word(chunk)?);
        }
        s.pending = 1;
        Some(s)
    }

    /// Propagates carries: every limb but the top one in `0..2^32`.
    fn normalize(&mut self) {
        for k in 0..LIMBS - 1 {
            let carry = self.limbs[k] >> LIMB_BITS;
            self.limbs[k] -= carry << LIMB_BITS;
            self.limbs[k + 1] += carry;
        }
        self.pending = 0;
    }

    /// Whether a NaN or infinity was added.
    pub fn non_finite(&self) -> Option<f64> {
        if self.nan > 0 || (self.pos_inf > 0 && self.neg_inf > 0) {
            Some(f64::NAN)
        } else if self.pos_inf > 0 {
            Some(f64::INFINITY)
        } else if self.neg_inf > 0 {
            Some(f64::NEG_INFINITY)
        } else {
            None
        }
    }

    /// The sum as a signed big integer scaled by 2^1074.
    fn big(&self) -> Big {
        let mut s = self.clone();
        s.normalize();
        let negative = s.limbs[LIMBS - 1] < 0;
        if negative {
            for l in &mut s.limbs {
                *l = -*l;
            }
            s.normalize();
        }
        Big {
            negative,
            mag: s.limbs.iter().map(|&l| l as u32).collect(),
        }
        .trimmed()
    }

    /// The sum rounded to the nearest `f64` (ties to even); NaN or an
    /// infinity if one was added.
    pub fn to_f64(&self) -> f64 {
        if let Some(v) = self.non_finite() {
            return v;
        }
        let b = self.big();
        let v = b.to_f64_scaled(1074);
        if b.negative { -v } else { v }
    }
}

/// The population variance of `n` values whose exact sum is `s` and whose
/// exact squares sum to `q`: `(n*q - s^2) / n^2`,
/// computed exactly and rounded at the end. Depends only on the multiset of
/// values, never on their order.
pub fn variance(n: u64, s: &ExactSum, q: &ExactSum) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if let Some(v) = s.non_finite().or(q.non_finite()) {
        return if v.is_nan() { v } else { f64::INFINITY };
    }
    let (sb, qb) = (s.big(), q.big());
    // Both scaled by 2^1074: n*q*2^1074 - s^2 is (n*q - s^2) * 2^2148.
    let nq = qb.mul_small(n).shl(1074);
    let s2 = sb.square();
    let d = nq.sub_saturating(&s2);
    let nf = n as f64;
    d.to_f64_scaled(2148) / nf / nf
}

/// A non-negative big integer of 32-bit limbs (least significant first), with
/// a sign carried alongside.
#[derive(Clone, Debug)]
struct Big {
    negative: bool,
    mag: Vec<u32>,
}

impl Big {
    fn trimmed(mut self) -> Big {
        while self.mag.last() == Some(&0) {
            self.mag.pop();
        }
        self
    }

    fn bit_len(&self) -> u64 {
        match self.mag.last() {
            None => 0,
            Some(&top) => (self.mag.len() as u64 - 1) * 32 + u64::from(32 - top.leading_zeros()),
        }
    }

    fn bit(&self, i: u64) -> bool {
        let (k, b) = ((i / 32) as usize, i % 32);
        self.mag.get(k).is_some_and(|&l| (l >> b) & 1 == 1)
    }

    /// Whether any bit below `i` is set.
    fn any_below(&self, i: u64) -> bool {
        let (k, b) = ((i / 32) as usize, i % 32);
        self.mag[..k.min(self.mag.len())].iter().any(|&l| l != 0)
            || (b > 0 && self.mag.get(k).is_some_and(|&l| l & ((1u32 << b) - 1) != 0))
    }

    /// Bits `lo .. lo + n` (n <= 64) as an integer.
    fn bits(&self, lo: u64, n: u64) -> u64 {
        (0..n).fold(0u64, |acc, i| acc | (u64::from(self.bit(lo + i)) << i))
    }

    fn mul_small(&self, m: u64) -> Big {
        let mut out = vec![0u32; self.mag.len() + 3];
        let (lo, hi) = (m & 0xffff_ffff, m >> 32);
        for (shift, factor) in [(0usize, lo), (1, hi)] {
            let mut carry = 0u128;
            for (i, &l) in self.mag.iter().enumerate() {
                let t = u128::from(out[i + shift]) + u128::from(l) * u128::from(factor) + carry;
                out[i + shift] = t as u32;
                carry = t >> 32;
            }
            let mut i = self.mag.len() + shift;
            while carry > 0 {
                let t = u128::from(out[i]) + carry;
                out[i] = t as u32;
                carry = t >> 32;
                i += 1;
            }
        }
        Big {
            negative: false,
            mag: out,
        }
        .trimmed()
    }

    fn square(&self) -> Big {
        let n = self.mag.len();
        let mut out = vec![0u32; 2 * n + 1];
        for i in 0..n {
            let a = u64::from(self.mag[i]);
            let mut carry = 0u64;
            for j in 0..n {
                // (2^32-1)^2 + 2(2^32-1) = 2^64-1: no overflow.
                let t = u64::from(out[i + j]) + a * u64::from(self.mag[j]) + carry;
                out[i + j] = t as u32;
                carry = t >> 32;
            }
            let mut k = i + n;
            while carry > 0 {
                let t = u64::from(out[k]) + carry;
                out[k] = t as u32;
                carry = t >> 32;
                k += 1;
            }
        }
        Big {
            negative: false,
            mag: out,
        }
        .trimmed()
    }

    fn shl(&self, bits: u64) -> Big {
        let (words, b) = ((bits / 32) as usize, (bits % 32) as u32);
        let mut out = vec![0u32; words];
        let mut carry = 0u32;
        for &l in &self.mag {
            if b == 0 {
                out.push(l);
            } else {
                out.push((l << b) | carry);
                carry = l >> (32 - b);
            }
        }
        if carry > 0 {
            out.push(carry);
        }
        Big {
            negative: self.negative,
            mag: out,
        }
        .trimmed()
    }

    /// `self - other` for magnitudes, or zero when `other` is larger.
    fn sub_saturating(&self, other: &Big) -> Big {
        let n = self.mag.len().max(other.mag.len());
        let mut out = Vec::with_capacity(n);
        let mut borrow = 0i64;
        for i in 0..n {
            let a = i64::from(self.mag.get(i).copied().unwrap_or(0));
            let b = i64::from(other.mag.get(i).copied().unwrap_or(0));
            let mut t = a - b - borrow;
            borrow = 0;
            if t < 0 {
                t += 1 << 32;
                borrow = 1;
            }
            out.push(t as u32);
        }
        if borrow != 0 {
            return Big {
                negative: false,
                mag: Vec::new(),
            };
        }
        Big {
            negative: false,
            mag: out,
        }
        .trimmed()
    }

    /// `|self| * 2^-scale`, rounded to the nearest `f64` (ties to even).
    fn to_f64_scaled(&self, scale: u64) -> f64 {
        let h = self.bit_len();
        if h == 0 {
            return 0.0;
        }
        // Keep 53 significant bits; the rest decides the rounding.
        let (mut m, mut shift) = if h <= 53 {
            (self.bits(0, h), 0u64)
        } else {
            let shift = h - 53;
            let mut m = self.bits(shift, 53);
            let round = self.bit(shift - 1);
            let sticky = self.any_below(shift - 1);
            if round && (sticky || m & 1 == 1) {
                m += 1;
            }
            (m, shift)
        };
        if m == 1 << 53 {
            m >>= 1;
            shift += 1;
        }
        // value = m * 2^(shift - scale); m < 2^53 is exact as f64.
        ldexp(m as f64, shift as i64 - scale as i64)
    }
}

/// `m * 2^e` for an integer `m < 2^53` (exact when representable; rounded
/// to nearest, ties to even, in the subnormal range).
fn ldexp(m: f64, e: i64) -> f64 {
    let m = m as u64;
    if m == 0 {
        return 0.0;
    }
    let b = i64::from(64 - m.leading_zeros());
    let top = e + b - 1;
    if top > 1023 {
        return f64::INFINITY;
    }
    if top >= -1022 {
        let m53 = m << (53 - b);
        let field = (top + 1023) as u64;
        return f64::from_bits((field << 52) | (m53 & ((1u64 << 52) - 1)));
    }
    // Subnormal: k * 2^-1074.
    let shift = e + 1074;
    if shift >= 0 {
        return f64::from_bits(m << shift);
    }
    let drop = (-shift) as u32;
    if drop > 54 {
        return 0.0;
    }
    let mut k = m >> drop;
    let rem = m & ((1u64 << drop) - 1);
    let half = 1u64 << (drop - 1);
    if rem > half || (rem == half && k & 1 == 1) {
        k += 1;
    }
    f64::from_bits(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum_of(xs: &[f64]) -> f64 {
        let mut s = ExactSum::new();
        xs.iter().for_each(|&x| s.add(x));
        s.to_f64()
    }

    #[test]
    fn a_state_round_trips_and_merges_exactly() {
        let xs = [1e300, -1e300, 3.5, f64::MIN_POSITIVE, -2.25e-310, 7e15, 0.1];
        let mut whole = ExactSum::new();
        xs.iter().for_each(|&x| whole.add(x));
        let mut merged = ExactSum::new();
        for part in xs.chunks(3) {
            let mut p = ExactSum::new();
            part.iter().for_each(|&x| p.add(x));
            let back = ExactSum::from_state(&p.to_state()).expect("own state");
            merged.merge(&back);
        }
        assert_eq!(merged.to_f64(), whole.to_f64());
        assert_eq!(merged.to_state(), whole.to_state());
        let mut inf = ExactSum::new();
        inf.add(f64::INFINITY);
        let back = ExactSum::from_state(&inf.to_state()).expect("own state");
        assert_eq!(back.to_f64(), f64::INFINITY);
        assert!(ExactSum::from_state(&[0u8; 10]).is_none());
        assert!(ExactSum::from_state(&[0u8; 25 + 8 * 69]).is_none());
    }

    #[test]
    fn sums_are_exact_and_order_free() {
        // Naive float summation loses the small terms; the exact sum keeps them.
        let xs = [1e16, 1.0, -1e16, 1.0, 0.5];
        assert_eq!(sum_of(&xs), 2.5);
        let mut rev = xs;
        rev.reverse();
        assert_eq!(sum_of(&rev), 2.5);
        // 0.1 + 0.2 + 0.3 as exact binary fractions, rounded once.
        assert_eq!(sum_of(&[0.1, 0.2, 0.3]), 0.6);
        assert_eq!(sum_of(&[]), 0.0);
        assert_eq!(sum_of(&[-3.5]), -3.5);
        assert_eq!(
            sum_of(&[f64::MIN_POSITIVE / 4.0, f64::MIN_POSITIVE / 4.0]),
            f64::MIN_POSITIVE / 2.0
        );
        assert_eq!(sum_of(&[f64::MAX, f64::MAX]), f64::INFINITY);
        assert!(sum_of(&[1.0, f64::NAN]).is_nan());
        assert_eq!(sum_of(&[1.0, f64::NEG_INFINITY]), f64::NEG_INFINITY);
    }

    #[test]
    fn matches_a_wide_reference_on_random_data() {
        // Reference: the same values summed in i128 after scaling by 2^20
        // (all chosen as multiples of 2^-20 so the reference is exact).
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut xs = Vec::new();
        let mut exact: i128 = 0;
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let k = (state >> 20) as i64 % (1 << 40) - (1 << 39);
            xs.push(k as f64 / (1u64 << 20) as f64);
            exact += i128::from(k);
        }
        let want = exact as f64 / (1u64 << 20) as f64;
        assert_eq!(sum_of(&xs), want);
        // Any split into partial sums merges to the same bits.
        let mut merged = ExactSum::new();
        for part in xs.chunks(333) {
            let mut p = ExactSum::new();
            part.iter().for_each(|&x| p.add(x));
            merged.merge(&p);
        }
        assert_eq!(merged.to_f64(), want);
    }

    #[test]
    fn variance_is_exact_for_large_offsets() {
        // Values 1e9 + {0, 1, 2, 3}: variance 1.25 exactly; the textbook
        // E[x^2] - E[x]^2 in f64 loses it entirely at this offset.
        let xs = [1e9, 1e9 + 1.0, 1e9 + 2.0, 1e9 + 3.0];
        let (mut s, mut q) = (ExactSum::new(), ExactSum::new());
        for &x in &xs {
            s.add(x);
            q.add(x * x);
            q.add(x.mul_add(x, -(x * x)));
        }
        assert_eq!(variance(4, &s, &q), 1.25);
        let (mut s, mut q) = (ExactSum::new(), ExactSum::new());
        for &x in &[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            s.add(x);
            q.add(x * x);
        }
        assert_eq!(variance(8, &s, &q), 4.0);
        assert_eq!(variance(0, &s, &q), 0.0);
    }

    #[test]
    fn big_square_matches_u128() {
        let b = Big {
            negative: false,
            mag: vec![0xffff_ffff, 0x1234_5678],
        };
        let v = 0x1234_5678_ffff_ffffu128;
        let sq = b.square();
        let got = u128::from(sq.mag[0])
            | u128::from(sq.mag[1]) << 32
            | u128::from(sq.mag[2]) << 64
            | u128::from(*sq.mag.get(3).unwrap_or(&0)) << 96;
        assert_eq!(got, v * v);
    }
}
