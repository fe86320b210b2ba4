//! Transform semantics, independent of Arrow: the stable hash, the frozen
//! statistics that `standardize`, `min_max` and `vocab` store in the
//! manifest, and the per-value arithmetic. Changing anything observable here
//! changes the bytes tessera writes, so it must bump [`SEMANTICS_VERSION`].

use tessera_reader::{InlineVocab, StatsEntry};

/// Version of the transform semantics; part of every artifact hash.
/// 2: exact statistics (order- and cut-independent mean and std), global
/// queries stored in a total order, and the build-time shuffle following
/// order version 2 of the reader.
/// 3: decimals stored as their nearest double; `AVG` of a decimal and
/// decimal quotients computed exactly as `DOUBLE`; the statistics of a list
/// field count only the elements stored (the first `length` of each list);
/// an empty CSV field is null whatever `null_values` says.
pub const SEMANTICS_VERSION: u32 = 3;

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

/// Frozen statistics for one transform, ready to apply: the manifest's
/// [`StatsEntry`] with its vocabulary in memory. A vocabulary kept in a file
/// of the set is read from there first (`serving::field_stats`).
pub type FrozenStats = StatsEntry<InlineVocab>;

/// Applies a numeric statistic to one value: `standardize` is
/// `(x - mean) / std` (std 0 is replaced by 1), `min_max` is
/// `(x - min) / (max - min)` (a zero range maps to 0); a vocabulary leaves
/// the value as it is.
#[inline]
pub fn apply_stat(stat: &FrozenStats, x: f64) -> f64 {
    match *stat {
        StatsEntry::Standardize { mean, std, .. } => {
            let s = if std > 0.0 { std } else { 1.0 };
            (x - mean) / s
        }
        StatsEntry::MinMax { min, max, .. } => {
            if max > min {
                (x - min) / (max - min)
            } else {
                0.0
            }
        }
        StatsEntry::Vocab(_) => x,
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
        // FNV-1a 64 of "a" and "foobar" are the published test vectors
        // 0xaf63dc4c8601ec8c and 0x85944171f73967e8; these values are them
        // through the SplitMix64 finalizer, computed by a separate Python
        // implementation of docs/SPEC.md's formula.
        assert_eq!(stable_hash(b"a"), 0x02c0_bdbf_4814_20f8);
        assert_eq!(stable_hash(b"foobar"), 0x404d_a9e3_b740_78c2);
        assert_eq!(stable_hash(b"JFK"), 0x60c3_c2b5_2e17_cd0f);
        assert_eq!(stable_hash("naïve".as_bytes()), 0xde6b_8471_27ce_5820);
        assert_eq!(hash_bucket(b"JFK", 1_000_003), 399_591);
        assert_eq!(hash_bucket(b"JFK", 1), 0);
        assert!(hash_bucket(b"JFK", 7) < 7);
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
}
