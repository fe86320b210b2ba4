//! How one rank cuts an epoch into batches ([`Schedule`], [`LastBatch`]) and
//! where a reader stands in it ([`Cursor`]).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// What happens to the last global batch of an epoch when fewer than
/// `batch_size * world_size` positions remain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LastBatch {
    /// Drop it: every batch is full; up to `batch_size * world_size - 1`
    /// records are not seen this epoch (a different set each shuffled epoch).
    #[default]
    Drop,
    /// Split what remains evenly across ranks (sizes differ by at most one):
    /// every record is seen exactly once; the last batch is smaller, and a rank
    /// whose share is empty gets one batch fewer.
    Partial,
    /// Fill it up by wrapping around to the start of the epoch order, as
    /// often as needed: every batch is full and every rank has the same
    /// number of batches. The padding reads the order from its start; up to
    /// `batch_size * world_size - 1` records are seen twice when the padding
    /// fits in one epoch, and more often each when the global batch is
    /// larger than the epoch (docs/FORMAT.md, section 14.3).
    Pad,
}

/// How one rank cuts an epoch of `n` records into batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Records in the epoch.
    pub n: u64,
    /// Records per batch on each rank.
    pub batch_size: u64,
    /// This rank.
    pub rank: u64,
    /// Number of ranks.
    pub world_size: u64,
    /// Last-batch policy.
    pub last_batch: LastBatch,
}

impl Schedule {
    /// Checks the arguments: `batch_size >= 1`, `rank < world_size`.
    pub fn new(
        n: u64,
        batch_size: u64,
        rank: u64,
        world_size: u64,
        last_batch: LastBatch,
    ) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument(
                "batch_size must be at least 1".into(),
            ));
        }
        if world_size == 0 || rank >= world_size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not in 0..world_size ({world_size})"
            )));
        }
        batch_size
            .checked_mul(world_size)
            .ok_or_else(|| Error::InvalidArgument("batch_size * world_size overflows".into()))?;
        Ok(Schedule {
            n,
            batch_size,
            rank,
            world_size,
            last_batch,
        })
    }

    /// Positions consumed by one step of all ranks together.
    pub fn global_batch(&self) -> u64 {
        self.batch_size * self.world_size
    }

    /// Number of batches this rank gets when starting at epoch position
    /// `start` (0 for a fresh epoch).
    pub fn batches_from(&self, start: u64) -> u64 {
        let left = self.n.saturating_sub(start);
        let g = self.global_batch();
        let full = left / g;
        let rem = left % g;
        let extra = match self.last_batch {
            LastBatch::Drop => 0,
            LastBatch::Pad => u64::from(rem > 0),
            LastBatch::Partial => u64::from(!self.partial_share(rem).is_empty()),
        };
        full + extra
    }

    /// This rank's share `a..b` (offsets into the remainder) of a last global
    /// batch holding `rem` positions.
    fn partial_share(&self, rem: u64) -> Range<u64> {
        let w = u128::from(self.world_size);
        let r = u128::from(self.rank);
        let rem = u128::from(rem);
        let a = (r * rem / w) as u64;
        let b = ((r + 1) * rem / w) as u64;
        a..b
    }

    /// Epoch positions of this rank's batch `k` counted from `start`, as a
    /// range of an infinite repetition of the epoch (reduce modulo `n` to get
    /// a position; only [`LastBatch::Pad`] produces values `>= n`).
    /// `k` must be below [`Schedule::batches_from`]`(start)`.
    pub fn batch_positions(&self, start: u64, k: u64) -> Range<u64> {
        let g = self.global_batch();
        let base = start + k * g;
        if base + g <= self.n || self.last_batch == LastBatch::Pad {
            let a = base + self.rank * self.batch_size;
            return a..a + self.batch_size;
        }
        let share = self.partial_share(self.n - base);
        base + share.start..base + share.end
    }

    /// The epoch position reached once every rank has taken `k` batches from
    /// `start`: the position to store in a [`Cursor`].
    pub fn position_after(&self, start: u64, k: u64) -> u64 {
        start
            .saturating_add(k.saturating_mul(self.global_batch()))
            .min(self.n)
    }
}

/// Where a reader is: enough to resume exactly, a few integers to checkpoint.
///
/// `position` counts epoch positions consumed by all ranks together, so it is
/// always a global-batch boundary and stays meaningful when the world size
/// changes: resuming at it with any rank count continues the same epoch order
/// without losing or repeating records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cursor {
    /// Shuffle seed.
    pub seed: u64,
    /// Epoch number.
    pub epoch: u64,
    /// Epoch positions already consumed by all ranks together.
    pub position: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_last_batch_is_split_evenly() {
        let s = |r| Schedule::new(10, 4, r, 3, LastBatch::Partial).unwrap();
        // 10 positions, global batch 12: the only batch is the remainder.
        let sizes: Vec<u64> = (0..3)
            .map(|r| {
                let p = s(r).batch_positions(0, 0);
                p.end - p.start
            })
            .collect();
        assert_eq!(sizes, vec![3, 3, 4]);
        assert_eq!(
            Schedule::new(10, 4, 0, 3, LastBatch::Drop)
                .unwrap()
                .batches_from(0),
            0
        );
        assert_eq!(
            Schedule::new(10, 4, 0, 3, LastBatch::Pad)
                .unwrap()
                .batches_from(0),
            1
        );
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(Schedule::new(10, 0, 0, 1, LastBatch::Drop).is_err());
        assert!(Schedule::new(10, 4, 2, 2, LastBatch::Drop).is_err());
        assert!(Schedule::new(10, u64::MAX, 0, 2, LastBatch::Drop).is_err());
    }
}
