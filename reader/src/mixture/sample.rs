//! Sampling: which component and record each global sample reads (the
//! interleave routed level by level, each component's records taken from
//! its own epoch orders), and the copy of a batch's samples.

use super::Mixture;
use super::interleave::{Child, Segment};
use crate::dataset::gather_with;
use crate::order::EpochOrder;

impl Mixture {
    /// The segment holding sample `g`: the segments cover `0..u64::MAX`
    /// without gaps, from the history's first change at 0.
    fn segment(&self, g: u64) -> &Segment {
        let i = self.segments.partition_point(|s| s.end <= g);
        &self.segments[i.min(self.segments.len() - 1)]
    }

    /// How many samples each component has contributed to global samples
    /// `0..g`.
    pub fn counts_at(&self, g: u64) -> Vec<u64> {
        let seg = self.segment(g);
        let local = seg.local_counts(g - seg.start, self.components.len());
        seg.base.iter().zip(local).map(|(b, l)| b + l).collect()
    }

    /// Global sample `g` (below `u64::MAX`): its component and the record
    /// index in it.
    pub fn pick(&self, g: u64) -> (usize, u64) {
        let mut cache = OrderCache::default();
        let mut out = (0, 0);
        self.for_each_pick(g..g.saturating_add(1), &mut cache, |_, c, i| out = (c, i));
        out
    }

    /// Calls `sink(j, component, record)` for global sample `range.start + j`,
    /// for every sample of `range` (in no particular order of `j`).
    fn for_each_pick(
        &self,
        range: std::ops::Range<u64>,
        cache: &mut OrderCache,
        mut sink: impl FnMut(usize, usize, u64),
    ) {
        let mut g = range.start;
        while g < range.end {
            let seg = self.segment(g);
            let stop = range.end.min(seg.end);
            // Each node's state at the first sample: how many it has seen
            // (x) and the running remainder of x * wl + u modulo total.
            let x0 = g - seg.start;
            let mut state = vec![(0u64, 0u64); seg.nodes.len()];
            let mut counts = seg.base.clone();
            if !seg.nodes.is_empty() {
                seg.init(0, x0, &mut state, &mut counts);
            } else {
                counts[0] += x0;
            }
            // Route the run's samples down the tree level by level (each
            // node's decisions are a branch-free running remainder), so each
            // leaf gets its component's samples in order; then take each
            // component's records for its run of consecutive samples in one
            // call (vectorized orders).
            let offset = (g - range.start) as usize;
            let m = (stop - g) as usize;
            cache.slots.clear();
            cache.slots.extend(0..m as u32);
            cache.leaves.resize_with(counts.len(), Vec::new);
            for l in cache.leaves.iter_mut() {
                l.clear();
            }
            let root = if seg.nodes.is_empty() {
                Child::Leaf(0)
            } else {
                Child::Node(0)
            };
            seg.route(
                root,
                &cache.slots,
                &mut state,
                &mut cache.leaves,
                &mut cache.halves,
            );
            for (c, leaf) in cache.leaves.iter().enumerate() {
                if leaf.is_empty() {
                    continue;
                }
                let run = &mut cache.run;
                run.clear();
                let k0 = counts[c];
                self.records_of(c, k0..k0 + leaf.len() as u64, run, &mut cache.orders);
                counts[c] += leaf.len() as u64;
                for (&slot, &rec) in leaf.iter().zip(run.iter()) {
                    sink(offset + slot as usize, c, rec);
                }
            }
            g = stop;
        }
    }

    /// Appends the records of component `c` at its samples `ks` (which may
    /// span several of its epochs).
    fn records_of(
        &self,
        c: usize,
        ks: std::ops::Range<u64>,
        out: &mut Vec<u64>,
        orders: &mut OrderSlots,
    ) {
        let ds = &self.components[c].dataset;
        let n = ds.len();
        let mut k = ks.start;
        while k < ks.end {
            let (epoch, pos) = (k / n, k % n);
            let take = (ks.end - k).min(n - pos);
            if self.shuffle {
                orders
                    .get(c, epoch, || {
                        EpochOrder::shuffled_as(ds.order_version(), n, self.seeds[c], epoch)
                    })
                    .extend_records(pos..pos + take, out);
            } else {
                out.extend(pos..pos + take);
            }
            k += take;
        }
    }

    /// Copies global samples `range` into consecutive slots of `out`. Only
    /// a component read through the shard cache can fail (a shard that
    /// cannot be fetched).
    pub(crate) fn fill(
        &self,
        range: std::ops::Range<u64>,
        out: &mut [u8],
        scratch: &mut MixScratch,
    ) -> crate::error::Result<()> {
        let n = (range.end - range.start) as usize;
        if self.components.iter().all(|c| !c.dataset.is_cached()) {
            // Locate every record first (address arithmetic only), so the
            // gather loop is as short as a single set's.
            let mut records: Vec<&[u8]> = vec![&[]; n];
            self.for_each_pick(range, &mut scratch.orders, |j, c, i| {
                records[j] = self.components[c].dataset.record_in_range(i);
            });
            gather_with(out, self.stride(), |j| records[j]);
            return Ok(());
        }
        // Cached components: pin the shards this batch reads first.
        let mut picks: Vec<(usize, u64)> = vec![(0, 0); n];
        self.for_each_pick(range, &mut scratch.orders, |j, c, i| picks[j] = (c, i));
        let mut pins = Vec::with_capacity(self.components.len());
        for (c, comp) in self.components.iter().enumerate() {
            let mine = picks.iter().filter(|p| p.0 == c).map(|p| p.1);
            pins.push(comp.dataset.pin(mine, None)?);
        }
        gather_with(out, self.stride(), |j| {
            let (c, i) = picks[j];
            self.components[c]
                .dataset
                .record_pinned(pins[c].as_ref(), i)
        });
        Ok(())
    }
}
/// Per-thread buffers of a mixture loader.
#[derive(Default)]
pub(crate) struct MixScratch {
    orders: OrderCache,
}

/// Per-thread state of building mixture batches.
#[derive(Default)]
struct OrderCache {
    orders: OrderSlots,
    /// The samples of the run being routed, numbered from 0.
    slots: Vec<u32>,
    /// Per tree node, the buffers its left and right shares are split into.
    halves: Vec<(Vec<u32>, Vec<u32>)>,
    /// Each component's slots in the run being built.
    leaves: Vec<Vec<u32>>,
    /// One component's records for its slots.
    run: Vec<u64>,
}

/// The epoch orders in use, per component (building one can cost a table).
#[derive(Default)]
struct OrderSlots {
    slots: Vec<Option<(u64, EpochOrder)>>,
}

impl OrderSlots {
    #[inline]
    fn get(&mut self, c: usize, epoch: u64, make: impl FnOnce() -> EpochOrder) -> &EpochOrder {
        if self.slots.len() <= c {
            self.slots.resize(c + 1, None);
        }
        let slot = &mut self.slots[c];
        if slot.as_ref().is_some_and(|(e, _)| *e != epoch) {
            *slot = None;
        }
        &slot.get_or_insert_with(|| (epoch, make())).1
    }
}
