//! The frozen statistics handed from the freeze task (or the global task) to
//! the shard tasks and the commit, as a file. serde_json as built here
//! (without its `float_roundtrip` feature) may read a 17-digit float one unit
//! in the last place off, and every task must encode with the driver's exact
//! values (a plan built as tasks publishes the local build's bytes), so each
//! mean, standard deviation, minimum and maximum is also stored as its bit
//! pattern, which the reader puts back.

use super::BuildError;
use crate::accumulators::FrozenStats;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Serialize, Deserialize)]
struct FrozenFile {
    stats: Vec<Option<Vec<FrozenStats>>>,
    /// Per field and slot: the bits of `[mean, std]` or `[min, max]`.
    bits: Vec<Option<Vec<Option<[u64; 2]>>>>,
}

fn bits_of(s: &FrozenStats) -> Option<[u64; 2]> {
    match s {
        FrozenStats::Standardize { mean, std, .. } => Some([mean.to_bits(), std.to_bits()]),
        FrozenStats::MinMax { min, max, .. } => Some([min.to_bits(), max.to_bits()]),
        FrozenStats::Vocab { .. } => None,
    }
}

/// `frozen` as the file's bytes.
pub(crate) fn to_bytes(frozen: &[Option<Vec<FrozenStats>>]) -> Vec<u8> {
    let file = FrozenFile {
        stats: frozen.to_vec(),
        bits: frozen
            .iter()
            .map(|f| f.as_ref().map(|slots| slots.iter().map(bits_of).collect()))
            .collect(),
    };
    serde_json::to_vec(&file).unwrap_or_default()
}

/// Reads the file at `path`, with the floats exactly as written.
pub(crate) fn read(path: &Path) -> Result<Vec<Option<Vec<FrozenStats>>>, BuildError> {
    let fail = |e: String| BuildError::Other(format!("{}: {e}", path.display()));
    let bytes =
        std::fs::read(path).map_err(|e| fail(format!("{e} (has the task that writes it run?)")))?;
    let mut file: FrozenFile = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
    for (f, bits) in file.stats.iter_mut().zip(&file.bits) {
        let (Some(slots), Some(bits)) = (f.as_mut(), bits.as_ref()) else {
            continue;
        };
        for (s, b) in slots.iter_mut().zip(bits) {
            match (s, b) {
                (FrozenStats::Standardize { mean, std, .. }, Some([a, b])) => {
                    *mean = f64::from_bits(*a);
                    *std = f64::from_bits(*b);
                }
                (FrozenStats::MinMax { min, max, .. }, Some([a, b])) => {
                    *min = f64::from_bits(*a);
                    *max = f64::from_bits(*b);
                }
                _ => {}
            }
        }
    }
    Ok(file.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_come_back_exactly() {
        // A standard deviation serde_json's default parser reads one unit in
        // the last place off.
        let std: f64 = "255.27502614907138".parse().expect("f64");
        let frozen = vec![
            None,
            Some(vec![
                FrozenStats::Standardize {
                    mean: 55.340811965811966,
                    std,
                    count: 3,
                },
                FrozenStats::MinMax {
                    min: -0.1,
                    max: 1e300,
                    count: 3,
                },
            ]),
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("frozen.json");
        std::fs::write(&path, to_bytes(&frozen)).expect("write");
        let back = read(&path).expect("read");
        assert_eq!(back, frozen);
    }
}
