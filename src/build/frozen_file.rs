//! The frozen statistics handed from the freeze task (or the global task) to
//! the shard tasks and the commit, as a file. Every task must encode with
//! the driver's exact values (a plan built as tasks publishes the local
//! build's bytes); the floats travel as JSON numbers, which serde_json (built
//! with `float_roundtrip` in this workspace) reads back to the same bits.

use super::BuildError;
use crate::accumulators::FrozenStats;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file's content. (Files written before this version also carry a
/// `bits` list, the floats' bit patterns; it is ignored.)
#[derive(Serialize, Deserialize)]
struct FrozenFile {
    stats: Vec<Option<Vec<FrozenStats>>>,
}

/// `frozen` as the file's bytes.
pub(crate) fn to_bytes(frozen: &[Option<Vec<FrozenStats>>]) -> Vec<u8> {
    let file = FrozenFile {
        stats: frozen.to_vec(),
    };
    serde_json::to_vec(&file).unwrap_or_default()
}

/// Reads the file at `path`.
pub(crate) fn read(path: &Path) -> Result<Vec<Option<Vec<FrozenStats>>>, BuildError> {
    let fail = |e: String| BuildError::Other(format!("{}: {e}", path.display()));
    let bytes =
        std::fs::read(path).map_err(|e| fail(format!("{e} (has the task that writes it run?)")))?;
    let file: FrozenFile = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
    Ok(file.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(frozen: &[Option<Vec<FrozenStats>>]) -> Vec<u64> {
        frozen
            .iter()
            .flatten()
            .flatten()
            .flat_map(|s| match *s {
                FrozenStats::Standardize { mean, std, .. } => vec![mean.to_bits(), std.to_bits()],
                FrozenStats::MinMax { min, max, .. } => vec![min.to_bits(), max.to_bits()],
                FrozenStats::Vocab { .. } => vec![],
            })
            .collect()
    }

    #[test]
    fn floats_come_back_exactly() {
        // A standard deviation serde_json without `float_roundtrip` reads one
        // unit in the last place off, and doubles of every bit pattern.
        let std: f64 = "255.27502614907138".parse().expect("f64");
        let mut slots = vec![
            FrozenStats::Standardize {
                mean: 55.340811965811966,
                std,
                count: 3,
            },
            FrozenStats::MinMax {
                min: -1.5e-3,
                max: 1e300,
                count: 3,
            },
        ];
        let mut r: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..5000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let x = f64::from_bits(r);
            let x = if x.is_finite() { x } else { r as f64 };
            slots.push(FrozenStats::Standardize {
                mean: x,
                std: -x / 3.0,
                count: r,
            });
        }
        let frozen = vec![None, Some(slots)];
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("frozen.json");
        std::fs::write(&path, to_bytes(&frozen)).expect("write");
        let back = read(&path).expect("read");
        assert_eq!(bits(&back), bits(&frozen));
        assert_eq!(back, frozen);
    }
}
