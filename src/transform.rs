//! Transform semantics, independent of Arrow and DataFusion: the stable hash,
//! the statistics that `standardize`, `min_max` and `vocab` freeze into the
//! manifest, and the per-value arithmetic. Changing anything observable here
//! changes the bytes tessera writes, so it must bump [`SEMANTICS_VERSION`].

use crate::exact::ExactSum;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Version of the transform semantics; part of every artifact hash.
/// 2: exact statistics (order- and cut-independent mean and std), global
/// queries stored in a total order, and the build-time shuffle following
/// order version 2 of the reader.
pub const SEMANTICS_VERSION: u32 = 2;

/// The stable 64-bit hash used by `hash_bucket` and `split`: FNV-1a over the
/// value's UTF-8 bytes, then the SplitMix64 finalizer to spread the low bits.
/// Documented in docs/SPEC.md so serving code in any language can reproduce it.
#[inline]
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The bucket of a value: `stable_hash(value) mod buckets`.
#[inline]
pub fn hash_bucket(bytes: &[u8], buckets: u64) -> u64 {
    stable_hash(bytes) % buckets
}

/// The byte string hashed for a null split key.
pub const NULL_KEY: &[u8] = b"\xffnull";

/// Picks a split for a key: the hash mapped to `[0, 1)` (top 53 bits) and
/// compared against the cumulative normalized weights.
pub fn split_of(key: &[u8], cumulative: &[f64]) -> usize {
    let u = (stable_hash(key) >> 11) as f64 / (1u64 << 53) as f64;
    cumulative
        .iter()
        .position(|&c| u < c)
        .unwrap_or(cumulative.len().saturating_sub(1))
}

/// Moments of a numeric column: the count, the exact sum of the values and
/// of their squares, the minimum and the maximum. Exact sums make the mean and
/// standard deviation a function of the multiset of values alone: the same
/// bits whatever the order, the thread count or the way the input is cut.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Moments {
    /// Values seen.
    pub count: u64,
    sum: ExactSum,
    sum_sq: ExactSum,
    /// Smallest value seen (`+inf` when empty).
    #[serde(with = "any_f64")]
    pub min: f64,
    /// Largest value seen (`-inf` when empty).
    #[serde(with = "any_f64")]
    pub max: f64,
}

/// An `f64` in JSON, infinities and NaN included (as the strings `"inf"`,
/// `"-inf"` and `"nan"`: JSON numbers cannot hold them, and serde_json would
/// write `null`, which does not read back).
mod any_f64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        if x.is_finite() {
            s.serialize_f64(*x)
        } else if x.is_nan() {
            s.serialize_str("nan")
        } else if *x > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(x) => Ok(x),
            Repr::Text(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                other => Err(serde::de::Error::custom(format!(
                    "expected a number, \"inf\", \"-inf\" or \"nan\", found {other:?}"
                ))),
            },
        }
    }
}

impl Default for Moments {
    fn default() -> Self {
        Self::new()
    }
}

impl Moments {
    /// No values yet.
    pub fn new() -> Self {
        Moments {
            count: 0,
            sum: ExactSum::new(),
            sum_sq: ExactSum::new(),
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Adds one value.
    #[inline]
    pub fn push(&mut self, x: f64) {
        self.count += 1;
        self.sum.add(x);
        // x^2 exactly, as the rounded square plus its rounding error.
        let sq = x * x;
        self.sum_sq.add(sq);
        if sq.is_finite() {
            self.sum_sq.add(x.mul_add(x, -sq));
        }
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    /// Folds `other` into `self` (in any order: the result is the same).
    pub fn merge(&mut self, other: &Moments) {
        self.count += other.count;
        self.sum.merge(&other.sum);
        self.sum_sq.merge(&other.sum_sq);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The mean (0 when empty): the exact sum rounded once, over the count.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum.to_f64() / self.count as f64
        }
    }

    /// Population standard deviation, from the exact sums.
    pub fn std(&self) -> f64 {
        crate::exact::variance(self.count, &self.sum, &self.sum_sq).sqrt()
    }
}

/// Value counts for a vocabulary, mergeable in chunk order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts(pub HashMap<String, u64>);

impl Counts {
    /// Counts one occurrence.
    #[inline]
    pub fn push(&mut self, value: &str) {
        if let Some(c) = self.0.get_mut(value) {
            *c += 1;
        } else {
            self.0.insert(value.to_owned(), 1);
        }
    }

    /// Adds another chunk's counts.
    pub fn merge(&mut self, other: Counts) {
        for (k, v) in other.0 {
            *self.0.entry(k).or_insert(0) += v;
        }
    }

    /// The frozen vocabulary: values with at least `min_count` occurrences,
    /// most frequent first, ties broken by the value's bytes, cut to
    /// `max_size`. Value `j` of the list gets id `j + 1`.
    pub fn freeze(&self, min_count: u64, max_size: Option<u64>) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .0
            .iter()
            .filter(|&(_, &c)| c >= min_count)
            .map(|(k, &c)| (k.clone(), c))
            .collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if let Some(m) = max_size {
            v.truncate(usize::try_from(m).unwrap_or(usize::MAX));
        }
        v
    }
}

/// Frozen statistics for one transform, as stored in the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FrozenStats {
    /// For `standardize`: `(x - mean) / std` (std 0 is replaced by 1).
    Standardize {
        /// Mean over the statistics split.
        mean: f64,
        /// Population standard deviation.
        std: f64,
        /// Values the statistics were computed over.
        count: u64,
    },
    /// For `min_max`: `(x - min) / (max - min)` (a zero range maps to 0).
    MinMax {
        /// Smallest value.
        min: f64,
        /// Largest value.
        max: f64,
        /// Values the statistics were computed over.
        count: u64,
    },
    /// For `vocab`: value -> id (1-based, by frequency).
    Vocab {
        /// Values in id order (id = position + 1).
        values: Vec<String>,
        /// Occurrences of each value in the statistics split.
        counts: Vec<u64>,
        /// Id given to values not in the vocabulary.
        oov: i64,
    },
}

impl FrozenStats {
    /// Applies a numeric statistic to one value.
    #[inline]
    pub fn apply(&self, x: f64) -> f64 {
        match *self {
            FrozenStats::Standardize { mean, std, .. } => {
                let s = if std > 0.0 { std } else { 1.0 };
                (x - mean) / s
            }
            FrozenStats::MinMax { min, max, .. } => {
                if max > min {
                    (x - min) / (max - min)
                } else {
                    0.0
                }
            }
            FrozenStats::Vocab { .. } => x,
        }
    }
}

/// `ln(1 + x)`, with the usual domain: values below -1 give NaN.
#[inline]
pub fn log1p(x: f64) -> f64 {
    x.ln_1p()
}

/// Clamps into `[min, max]` (either bound optional).
#[inline]
pub fn clip(x: f64, min: Option<f64>, max: Option<f64>) -> f64 {
    let x = match min {
        Some(m) if x < m => m,
        _ => x,
    };
    match max {
        Some(m) if x > m => m,
        _ => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_is_pinned() {
        // Pinned values: changing the hash changes every artifact, so a change
        // here must come with a SEMANTICS_VERSION bump.
        let fnv_empty = 0xcbf2_9ce4_8422_2325u64;
        let mut h = fnv_empty;
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        assert_eq!(stable_hash(b""), h ^ (h >> 31));
        assert_ne!(stable_hash(b"a"), stable_hash(b"b"));
        assert_eq!(hash_bucket(b"JFK", 1), 0);
        assert!(hash_bucket(b"JFK", 7) < 7);
    }

    #[test]
    fn moments_merge_matches_a_single_pass() {
        let xs: Vec<f64> = (0..1000)
            .map(|i| ((i * 37) % 101) as f64 * 0.5 - 3.0)
            .collect();
        let mut whole = Moments::new();
        xs.iter().for_each(|&x| whole.push(x));
        let mut merged = Moments::new();
        for chunk in xs.chunks(333) {
            let mut m = Moments::new();
            chunk.iter().for_each(|&x| m.push(x));
            merged.merge(&m);
        }
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!((merged.mean() - mean).abs() < 1e-9);
        assert_eq!(merged.mean().to_bits(), whole.mean().to_bits());
        assert_eq!(merged.std().to_bits(), whole.std().to_bits());
        assert!((merged.std() - var.sqrt()).abs() < 1e-9);
        assert!((whole.std() - var.sqrt()).abs() < 1e-9);
        assert_eq!(merged.min, -3.0);
        assert_eq!(merged.max, 47.0);
    }

    #[test]
    fn vocab_orders_by_count_then_value() {
        let mut c = Counts::default();
        for v in ["b", "a", "c", "a", "b", "d", "a"] {
            c.push(v);
        }
        let v = c.freeze(1, Some(3));
        assert_eq!(v, vec![("a".into(), 3), ("b".into(), 2), ("c".into(), 1)]);
        assert_eq!(c.freeze(2, None).len(), 2);
    }

    #[test]
    fn split_assignment_follows_weights() {
        let cum = [0.8, 1.0];
        let n = 20000;
        let train = (0..n)
            .filter(|i| split_of(format!("{i}").as_bytes(), &cum) == 0)
            .count();
        assert!((train as f64 / n as f64 - 0.8).abs() < 0.02, "{train}");
    }

    #[test]
    fn empty_moments_survive_json() {
        let m = Moments::new();
        let text = serde_json::to_string(&m).expect("json");
        let back: Moments = serde_json::from_str(&text).expect(&text);
        assert_eq!(back, m);
        let mut m = Moments::new();
        m.push(-2.5);
        m.push(4.0);
        let back: Moments =
            serde_json::from_str(&serde_json::to_string(&m).expect("json")).expect("read back");
        assert_eq!(back, m);
    }
}
