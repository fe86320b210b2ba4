//! Building one batch of an epoch: the records at its positions gathered
//! (shuffled), copied in contiguous runs (sequential), or borrowed from the
//! map; or a mixture's samples.

use super::Source;
use super::handoff::Sender;
use crate::batch::{Batch, BufPool};
use crate::error::{Error, Result};
use crate::layout::RecordLayout;
use crate::mixture::{MixScratch, Mixture};
use crate::order::{EpochOrder, Schedule};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Everything needed to build any batch of one epoch on one rank.
pub(super) struct Job {
    /// The cache plan the batches' steps belong to (cached sets).
    pub(super) plan_id: Option<u64>,
    pub(super) source: Source,
    pub(super) epoch: u64,
    pub(super) order: EpochOrder,
    pub(super) schedule: Schedule,
    pub(super) start: u64,
    pub(super) worker: u64,
    pub(super) num_workers: u64,
    pub(super) layout: Arc<RecordLayout>,
    pub(super) zero_copy: bool,
}

impl Job {
    /// Rank batch index of this loader's `j`-th batch.
    pub(super) fn rank_batch(&self, j: u64) -> u64 {
        self.worker + j * self.num_workers
    }

    /// True when this loader's `j`-th batch is borrowed from the memory map
    /// (zero-copy, sequential, inside one shard): there is nothing to
    /// build, so the consumer makes it itself and no thread hands it over.
    pub(super) fn borrows(&self, j: u64) -> bool {
        let Source::Set(ds) = &self.source else {
            return false;
        };
        if !self.zero_copy || !self.order.is_sequential() {
            return false;
        }
        let positions = self
            .schedule
            .batch_positions(self.start, self.rank_batch(j));
        positions.end <= self.order.len() && ds.records(positions).is_some()
    }

    /// Builds this loader's `j`-th batch. Only a cached set can fail (a
    /// shard that cannot be fetched).
    pub(super) fn build(
        &self,
        j: u64,
        pool: &Arc<BufPool>,
        scratch: &mut Scratch,
    ) -> Result<Batch> {
        let k = self.rank_batch(j);
        let step = self.plan_id.map(|id| (id, j as usize));
        let positions = self.schedule.batch_positions(self.start, k);
        let rows = (positions.end - positions.start) as usize;
        let ds = match &self.source {
            Source::Set(ds) => ds,
            Source::Mix(m) => return self.build_mixed(m, k, positions, pool, scratch),
        };
        let stride = ds.stride();
        let n = self.order.len();
        if self.borrows(j) {
            return Ok(Batch::mapped(
                ds.clone(),
                positions.start,
                Some(Arc::clone(pool)),
                rows,
                Arc::clone(&self.layout),
                k,
            ));
        }
        let mut buf = pool.take();
        buf.resize(rows * stride);
        let out = buf.bytes_mut();
        if self.order.is_sequential() {
            // Contiguous runs of the epoch (two when a padded batch wraps).
            let mut pos = positions.start;
            let mut filled = 0usize;
            while pos < positions.end {
                let at = pos % n;
                let run = ((positions.end - pos).min(n - at)) as usize;
                let dst = &mut out[filled * stride..(filled + run) * stride];
                // In range by construction (at + run <= n): only a cached
                // shard that cannot be fetched fails.
                ds.copy_records_at(at, dst, step)?;
                filled += run;
                pos += run as u64;
            }
        } else {
            // All indices first, then the gather: computing them inside the
            // gather loop was measured slower, as the longer loop body keeps
            // fewer memory accesses in flight. Positions reach past n only
            // in a padded last batch.
            let idx = &mut scratch.indices;
            idx.clear();
            self.order.extend_records(positions, idx);
            // In range by construction (the order maps into 0..n): only a
            // cached shard that cannot be fetched fails.
            ds.gather_at(idx, out, step)?;
        }
        Ok(Batch::new(
            buf,
            Some(Arc::clone(pool)),
            rows,
            Arc::clone(&self.layout),
            k,
        ))
    }
}

impl Job {
    /// A mixture batch: global samples `epoch * L + p` for the positions
    /// `p` (a padded batch wraps to the epoch's start).
    fn build_mixed(
        &self,
        m: &Mixture,
        k: u64,
        positions: std::ops::Range<u64>,
        pool: &Arc<BufPool>,
        scratch: &mut Scratch,
    ) -> Result<Batch> {
        let len = m.epoch_samples();
        let stride = m.stride();
        let rows = (positions.end - positions.start) as usize;
        let mut buf = pool.take();
        buf.resize(rows * stride);
        let out = buf.bytes_mut();
        // Global samples are counted in 64 bits; an epoch past that has no
        // samples to read.
        let first = self
            .epoch
            .checked_mul(len)
            .filter(|f| f.checked_add(len).is_some())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "epoch {} of {len} samples: its global sample numbers do not fit in 64 bits",
                    self.epoch
                ))
            })?;
        let mut pos = positions.start;
        let mut filled = 0usize;
        while pos < positions.end {
            let at = pos % len;
            let run = (positions.end - pos).min(len - at);
            let dst = &mut out[filled * stride..(filled + run as usize) * stride];
            m.fill(first + at..first + at + run, dst, &mut scratch.mix)?;
            filled += run as usize;
            pos += run;
        }
        Ok(Batch::new(
            buf,
            Some(Arc::clone(pool)),
            rows,
            Arc::clone(&self.layout),
            k,
        ))
    }
}

/// Per-thread buffers for building batches.
#[derive(Default)]
pub(super) struct Scratch {
    indices: Vec<u64>,
    mix: MixScratch,
}

/// Prefetch thread `t` of `step`: builds batches `t, t + step, ...` below
/// `total`, in order, into its queue, each one it claims first (`claim`
/// holds the next of them nobody has started; the consumer may claim and
/// build one itself, see `Batches::take`). With `wait_first` it waits for
/// room in the queue before building each batch (so its batches in flight
/// are at most the queue's capacity), otherwise only before queueing it.
pub(super) fn produce(
    job: &Job,
    pool: &Arc<BufPool>,
    (t, step, total): (u64, u64, u64),
    wait_first: bool,
    claim: &AtomicU64,
    tx: Sender<Result<Batch>>,
) {
    let mut scratch = Scratch::default();
    loop {
        let j = claim.load(Ordering::Acquire);
        if j >= total {
            return;
        }
        debug_assert_eq!(j % step, t);
        // A borrowed batch is the consumer's to make (see `Batches::take`).
        if job.borrows(j) {
            let _ = claim.compare_exchange(j, j + step, Ordering::AcqRel, Ordering::Acquire);
            continue;
        }
        if wait_first && !tx.wait_room() {
            return; // the consumer went away
        }
        // The consumer may have taken this batch while the thread waited.
        if claim
            .compare_exchange(j, j + step, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        if tx.send(job.build(j, pool, &mut scratch)).is_err() {
            return;
        }
    }
}
