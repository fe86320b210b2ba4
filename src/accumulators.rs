//! Statistics the build collects (moments and value counts, mergeable in
//! any order). The transform semantics they feed (the stable hash, the frozen
//! statistics and the per-value arithmetic) live in the transform crate,
//! shared with the serving path, and are re-exported here.

use crate::exact::ExactSum;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
pub use tessera_transform::semantics::{
    FrozenStats, NULL_KEY, SEMANTICS_VERSION, clip, hash_bucket, log1p, split_of, stable_hash,
};

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

/// An `f64` in JSON, exactly: as its shortest text (`"-2.5"`, `"1e300"`),
/// infinities and NaN as `"inf"`, `"-inf"` and `"nan"` (JSON numbers cannot
/// hold them, and serde_json would write `null`, which does not read back).
/// A JSON number is read too.
mod any_f64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        if x.is_finite() {
            // As text too, like the values a JSON number cannot hold; Rust's
            // parsing of the shortest representation is exact.
            s.serialize_str(&format!("{x:?}"))
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
                other => other.parse::<f64>().map_err(|_| {
                    serde::de::Error::custom(format!(
                        "expected a number, \"inf\", \"-inf\" or \"nan\", found {other:?}"
                    ))
                }),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // A maximum serde_json alone would read one unit in the last place off.
        let mut m = Moments::new();
        m.push("255.27502614907138".parse().expect("f64"));
        let back: Moments =
            serde_json::from_str(&serde_json::to_string(&m).expect("json")).expect("read back");
        assert_eq!(back.max.to_bits(), m.max.to_bits());
    }
}
