//! A compact exact sum of `f64` values for one aggregate group: the sum held
//! as a short list of non-overlapping doubles (Shewchuk's expansion, the
//! method behind Python's `math.fsum`), rounded once at the end.
//!
//! [`ExactSum`](super::ExactSum) keeps 68 limbs (544 bytes) per sum, too much
//! for a `GROUP BY` with millions of groups. An expansion usually holds one
//! to three doubles, and adding a value costs a few additions per component.
//! Each step is exact (a two-sum: `hi + lo == x + y` exactly) as long as
//! nothing overflows, so a value or a component from 2^1000 up moves the
//! group's sum into an `ExactSum` instead. Either way the result is the
//! exact sum rounded to the nearest double (ties to even), so it depends
//! only on the multiset of values: not on their order, nor on which groups
//! took which path in which partition.

use super::ExactSum;

/// Magnitude from which a value or a component moves the sum to an
/// [`ExactSum`] (two-sums up to 2^1001 cannot overflow).
const SPILL: f64 = 1.0715086071862673e301; // 2^1000

/// NaN seen.
const NAN: u8 = 1;
/// +inf seen.
const POS_INF: u8 = 2;
/// -inf seen.
const NEG_INF: u8 = 4;

/// Components kept inline, without a heap allocation: sums of thousands of
/// values of a few orders of magnitude need two to four.
const INLINE: usize = 4;

/// The exact sum of a group's values (see the module). 48 bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FSum {
    /// Non-overlapping components in increasing magnitude, the first `n`
    /// (while `over` is `None`); their exact sum is the sum.
    inline: [f64; INLINE],
    n: u8,
    /// NaN and infinities seen (`NAN | POS_INF | NEG_INF`).
    special: u8,
    /// Where the sum went once it outgrew `inline`.
    over: Option<Box<Over>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Over {
    /// More than [`INLINE`] components.
    Parts(Vec<f64>),
    /// The sum, once a value or a component reached [`SPILL`].
    Big(ExactSum),
}

/// Adds `x` to the expansion `parts[..len]` in place (the grow step: each
/// two-sum keeps its rounding error as a component; zeros are dropped),
/// calling `push` for a component past `parts`' end. Returns how many
/// components there are. Knuth's two-sum needs no ordering of its operands,
/// so the loop has no branch that depends on the data.
#[inline(always)]
fn grow(parts: &mut [f64], len: usize, mut x: f64, mut push: impl FnMut(f64)) -> usize {
    let mut kept = 0;
    for i in 0..len {
        let y = parts[i];
        let hi = x + y;
        let b = hi - x;
        let lo = (x - (hi - b)) + (y - b);
        parts[kept] = lo;
        kept += usize::from(lo != 0.0);
        x = hi;
    }
    if x != 0.0 {
        if kept < parts.len() {
            parts[kept] = x;
        } else {
            push(x);
        }
        kept += 1;
    }
    kept
}

impl FSum {
    /// The components (increasing magnitude), or `None` once spilled.
    fn parts(&self) -> Option<&[f64]> {
        match self.over.as_deref() {
            None => Some(&self.inline[..usize::from(self.n)]),
            Some(Over::Parts(v)) => Some(v),
            Some(Over::Big(_)) => None,
        }
    }

    fn big(&self) -> Option<&ExactSum> {
        match self.over.as_deref() {
            Some(Over::Big(b)) => Some(b),
            _ => None,
        }
    }

    /// Adds `x` exactly.
    #[inline]
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            self.special |= if x.is_nan() {
                NAN
            } else if x > 0.0 {
                POS_INF
            } else {
                NEG_INF
            };
            return;
        }
        if x == 0.0 {
            return;
        }
        let top = match self.over.as_deref_mut() {
            None => self.inline[..usize::from(self.n)].last().copied(),
            Some(Over::Parts(v)) => v.last().copied(),
            Some(Over::Big(b)) => {
                b.add(x);
                return;
            }
        };
        if x.abs() >= SPILL || top.is_some_and(|t| t.abs() >= SPILL) {
            self.spill();
            if let Some(Over::Big(b)) = self.over.as_deref_mut() {
                b.add(x);
            }
            return;
        }
        if let Some(Over::Parts(v)) = self.over.as_deref_mut() {
            let len = v.len();
            let mut extra = None;
            let kept = grow(v, len, x, |p| extra = Some(p));
            v.truncate(kept.min(len));
            v.extend(extra);
            return;
        }
        let len = usize::from(self.n);
        let mut extra = None;
        let kept = grow(&mut self.inline, len, x, |p| extra = Some(p));
        match extra {
            None => self.n = kept as u8,
            Some(p) => {
                let mut v = self.inline.to_vec();
                v.push(p);
                self.over = Some(Box::new(Over::Parts(v)));
                self.n = 0;
            }
        }
    }

    /// Moves the sum into an [`ExactSum`] (once).
    fn spill(&mut self) {
        if let Some(parts) = self.parts() {
            let mut s = ExactSum::new();
            parts.iter().for_each(|&p| s.add(p));
            self.over = Some(Box::new(Over::Big(s)));
            self.n = 0;
        }
    }

    /// Adds an [`ExactSum`] exactly.
    fn merge_big(&mut self, other: &ExactSum) {
        self.spill();
        if let Some(Over::Big(b)) = self.over.as_deref_mut() {
            b.merge(other);
        }
    }

    /// Adds another sum exactly.
    pub fn merge(&mut self, other: &FSum) {
        self.special |= other.special;
        match (other.parts(), other.big()) {
            (Some(parts), _) => parts.iter().for_each(|&p| self.add(p)),
            (None, Some(b)) => self.merge_big(b),
            (None, None) => {}
        }
    }

    /// The sum rounded to the nearest `f64` (ties to even); NaN when a NaN
    /// or infinities of both signs were added, else an infinity if one was.
    pub fn value(&self) -> f64 {
        match self.special {
            0 => {}
            s if s & NAN != 0 || s == POS_INF | NEG_INF => return f64::NAN,
            POS_INF => return f64::INFINITY,
            _ => return f64::NEG_INFINITY,
        }
        match (self.parts(), self.big()) {
            (Some(parts), _) => round_parts(parts),
            (None, Some(b)) => b.to_f64(),
            (None, None) => 0.0,
        }
    }

    /// The sum when it is exactly one double (0 for an empty sum) and no
    /// NaN or infinity was added: adding that double to another sum
    /// reproduces it.
    pub fn single(&self) -> Option<f64> {
        if self.special != 0 {
            return None;
        }
        match self.parts()? {
            [] => Some(0.0),
            [x] => Some(*x),
            _ => None,
        }
    }

    /// The sum as bytes, for a partial aggregate's state: the special flags
    /// (u8), then either 0 and the components (f64 little-endian each) or 1
    /// and [`ExactSum::to_state`].
    pub fn to_state(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_state(&mut out);
        out
    }

    /// [`FSum::to_state`] into `out` (cleared first).
    pub fn write_state(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(self.special);
        match (self.parts(), self.big()) {
            (Some(parts), _) => {
                out.push(0);
                for p in parts {
                    out.extend_from_slice(&p.to_le_bytes());
                }
            }
            (None, Some(b)) => {
                out.push(1);
                out.extend_from_slice(&b.to_state());
            }
            (None, None) => out.push(0),
        }
    }

    /// Adds the sum a [`FSum::to_state`] wrote; `false` (and nothing added)
    /// for bytes it cannot have written.
    pub fn merge_state(&mut self, bytes: &[u8]) -> bool {
        let [special, tag, rest @ ..] = bytes else {
            return false;
        };
        if special & !(NAN | POS_INF | NEG_INF) != 0 {
            return false;
        }
        match tag {
            0 if rest.len() % 8 == 0 => {
                let part =
                    |c: &[u8]| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                if rest.chunks_exact(8).any(|c| !part(c).is_finite()) {
                    return false;
                }
                rest.chunks_exact(8).for_each(|c| self.add(part(c)));
            }
            1 => match ExactSum::from_state(rest) {
                Some(b) => self.merge_big(&b),
                None => return false,
            },
            _ => return false,
        }
        self.special |= special;
        true
    }
}

/// The exact sum of non-overlapping components in increasing magnitude,
/// rounded to the nearest double, ties to even: the largest components are
/// added while that is exact; then, if the rest would decide a tie, the
/// rounding is corrected by the sign of the next component.
fn round_parts(parts: &[f64]) -> f64 {
    let Some((&top, rest)) = parts.split_last() else {
        return 0.0;
    };
    let mut hi = top;
    let mut lo = 0.0;
    let mut n = rest.len();
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = rest[n];
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    // `hi + lo` is exact, and `lo` is half an ulp of `hi` at most. When it
    // is exactly half an ulp, the components below decide the direction.
    if n > 0 && ((lo < 0.0 && rest[n - 1] < 0.0) || (lo > 0.0 && rest[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        let yr = x - hi;
        if y == yr {
            hi = x;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of awkward doubles: wide exponents, both
    /// signs, exact cancellations and ties.
    fn values(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s
        };
        (0..n)
            .map(|_| {
                let r = next();
                let mant = (r >> 11) as f64 / (1u64 << 53) as f64;
                let exp = ((r & 0x7f) as i32) - 64;
                let sign = if r & 0x80 != 0 { -1.0 } else { 1.0 };
                sign * mant * 2f64.powi(exp)
            })
            .collect()
    }

    fn reference(xs: &[f64]) -> f64 {
        let mut s = ExactSum::new();
        xs.iter().for_each(|&x| s.add(x));
        s.to_f64()
    }

    #[test]
    fn equals_the_limb_accumulator_in_any_order_and_cut() {
        for seed in 0..200 {
            let mut xs = values(seed, 1 + (seed as usize * 7) % 300);
            // Exact cancellations and a tie: 2^53 + 1 is halfway.
            xs.extend([1e16, -1e16, 9007199254740992.0, 1.0]);
            let want = reference(&xs);
            let mut a = FSum::default();
            xs.iter().for_each(|&x| a.add(x));
            assert_eq!(a.value().to_bits(), want.to_bits(), "seed {seed}");
            let mut b = FSum::default();
            xs.iter().rev().for_each(|&x| b.add(x));
            assert_eq!(b.value().to_bits(), want.to_bits(), "seed {seed}, reversed");
            let cut = xs.len() / 3;
            let (mut l, mut r) = (FSum::default(), FSum::default());
            xs[..cut].iter().for_each(|&x| l.add(x));
            xs[cut..].iter().for_each(|&x| r.add(x));
            let mut m = FSum::default();
            assert!(m.merge_state(&r.to_state()));
            m.merge(&l);
            assert_eq!(m.value().to_bits(), want.to_bits(), "seed {seed}, merged");
        }
    }

    #[test]
    fn ties_round_to_even() {
        // 2^53 + 1 + 2^-30: just above the tie, rounds up; without the tail
        // it is a tie and rounds to the even 2^53.
        let mut s = FSum::default();
        [9007199254740992.0, 1.0].iter().for_each(|&x| s.add(x));
        assert_eq!(s.value(), 9007199254740992.0);
        s.add(2f64.powi(-30));
        assert_eq!(s.value(), 9007199254740994.0);
    }

    #[test]
    fn huge_values_spill_exactly_and_states_round_trip() {
        let xs = [1e308, 1e308, -1e308, 3.0, -1e308, 0.5];
        let mut s = FSum::default();
        xs.iter().for_each(|&x| s.add(x));
        assert!(s.parts().is_none(), "spilled");
        assert_eq!(s.value(), 3.5);
        let mut small = FSum::default();
        small.add(0.25);
        assert!(small.merge_state(&s.to_state()));
        assert_eq!(small.value(), 3.75);
        assert!(!small.merge_state(&[0, 0, 1, 2, 3]));
        assert!(!small.merge_state(&[8, 0]));
        assert_eq!(small.value(), 3.75, "a bad state adds nothing");
    }

    #[test]
    fn non_finite_values_follow_ieee() {
        let mut s = FSum::default();
        s.add(1.0);
        s.add(f64::INFINITY);
        assert_eq!(s.value(), f64::INFINITY);
        let mut t = FSum::default();
        t.add(f64::NEG_INFINITY);
        assert!(s.merge_state(&t.to_state()));
        assert!(s.value().is_nan());
    }
}

#[cfg(test)]
mod size {
    #[test]
    fn a_sum_is_48_bytes() {
        assert_eq!(std::mem::size_of::<super::FSum>(), 48);
    }
}
