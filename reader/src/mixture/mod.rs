//! Mixtures: several shard sets (or splits) read as one stream, each
//! component taking a share of the samples set by weights that may change at
//! given global samples (a schedule).
//!
//! Everything is a pure function of the seed, the schedule and the global
//! sample number `g` (counted from the start of training over all ranks):
//!
//! - *Which component* sample `g` comes from is a deterministic weighted
//!   interleave: a binary tree over the components, each node sending its
//!   `x`-th sample left when `floor((x + 1) wl + u) / T > floor(x wl + u) / T`
//!   (`wl` the left subtree's weight, `T` the node's, `u` a seeded offset).
//!   After `x` samples a node has sent exactly `floor((x wl + u) / T)` left,
//!   so any prefix of the stream holds each component in proportion to its
//!   weight to within one sample per tree level, and the count of every
//!   component at any `g` is a closed formula (no scan).
//! - *Which record*: a component's `k`-th sample is position `k mod n` of
//!   its own epoch `k div n` (`n` its size), in that epoch's seeded order:
//!   sampling without replacement inside a component, and a component that
//!   runs out starts its next epoch (reshuffled) on its own.
//! - The mixture's own epoch `e` is the samples `e L .. (e + 1) L`, `L` being
//!   `epoch_samples` (by default the components' total size), so a loader
//!   cuts it into batches, ranks and workers like one set.
//!
//! Resuming with other weights is exact because the saved state carries
//! every component's count at `g` ([`Mixture::counts_at`]), and
//! [`Mixture::anchored`] continues from those counts with the new schedule:
//! no component sample is lost or repeated whatever the weights were before.
//!
//! The interleave after such a change is seeded from the sample it was made
//! at and counts from the counts there, neither of which follows from the
//! schedule. So a mixture keeps its *history*: every change ([`ScheduleChange`]:
//! where, the counts there, the steps from there on), the first being the
//! configured schedule at sample 0. The history is part of a loader's saved
//! state, and [`Mixture::with_history`] rebuilds exactly the stream it
//! describes: a checkpoint taken after any number of changes restores the
//! same samples, and every sample from 0 on stays defined (a second pass over
//! an epoch before the last change reads what the run read there).

mod interleave;

use crate::dataset::{Dataset, gather_with};
use crate::error::{Error, Result};
use crate::layout::RecordLayout;
use crate::order::{EpochOrder, SplitMix, mix};
use interleave::{Child, Segment, build_tree};
use std::sync::Arc;

/// One component of a mixture.
#[derive(Clone, Debug)]
pub struct MixComponent {
    /// Name, unique in the mixture (it also keys the component's seed).
    pub name: String,
    /// The records.
    pub dataset: Dataset,
}

/// A step of a weight schedule: from global sample `start` on, component
/// `c` gets a share `weights[c] / sum(weights)` of the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightStep {
    /// First global sample the weights apply to.
    pub start: u64,
    /// One weight per component, in component order: finite, >= 0, and not
    /// all zero. A component with weight 0 gets no sample in this step.
    pub weights: Vec<f64>,
}

/// One entry of a mixture's history: from global sample `at` on (until the
/// next change), the weights follow `steps`, starting from the component
/// counts `counts` (which add up to `at`).
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleChange {
    /// First global sample the change applies to.
    pub at: u64,
    /// Each component's count at `at`, in component order.
    pub counts: Vec<u64>,
    /// The weight steps from `at` on: the first starts at `at`, the others
    /// later, in increasing order.
    pub steps: Vec<WeightStep>,
}

/// Several shard sets read as one weighted stream (see the module docs).
#[derive(Clone, Debug)]
pub struct Mixture {
    components: Vec<MixComponent>,
    /// Per-component seed.
    seeds: Vec<u64>,
    seed: u64,
    shuffle: bool,
    epoch_samples: u64,
    /// The changes the segments were built from; the first is at sample 0.
    history: Vec<ScheduleChange>,
    /// The interleave over samples `0..u64::MAX`, in order.
    segments: Vec<Segment>,
    layout: Arc<RecordLayout>,
}

/// Weights are turned into integers with this total, so the interleave is
/// exact integer arithmetic on every platform.
const WEIGHT_SCALE: f64 = (1u64 << 40) as f64;

impl Mixture {
    /// A mixture of `components` with constant `weights` (one per component).
    pub fn new(components: Vec<MixComponent>, weights: Vec<f64>, seed: u64) -> Result<Self> {
        Self::scheduled(
            components,
            vec![WeightStep { start: 0, weights }],
            seed,
            None,
            true,
        )
    }

    /// A mixture whose weights follow `schedule` (steps in increasing
    /// `start`, the first at 0). `epoch_samples` is the length of one
    /// mixture epoch (default: the components' total size); `shuffle`
    /// false reads every component in storage order.
    pub fn scheduled(
        components: Vec<MixComponent>,
        schedule: Vec<WeightStep>,
        seed: u64,
        epoch_samples: Option<u64>,
        shuffle: bool,
    ) -> Result<Self> {
        let bad = |m: String| Error::InvalidArgument(format!("mixture: {m}"));
        let first = components
            .first()
            .ok_or_else(|| bad("needs at least one component".into()))?;
        let layout = first.dataset.layout().clone();
        for (i, c) in components.iter().enumerate() {
            if c.name.is_empty() {
                return Err(bad(format!("component {i} has an empty name")));
            }
            if components[..i].iter().any(|d| d.name == c.name) {
                return Err(bad(format!("component {:?} is listed twice", c.name)));
            }
            if c.dataset.layout() != &layout {
                return Err(bad(format!(
                    "component {:?} ({}) has another record layout than {:?} ({}); \
                     a mixture's components must have the same fields",
                    c.name,
                    c.dataset.dir().display(),
                    first.name,
                    first.dataset.dir().display()
                )));
            }
        }
        let total: u64 = components.iter().map(|c| c.dataset.len()).sum();
        let epoch_samples = epoch_samples.unwrap_or(total);
        let seeds = components
            .iter()
            .map(|c| component_seed(seed, &c.name))
            .collect();
        let mut mixture = Mixture {
            components,
            seeds,
            seed,
            shuffle,
            epoch_samples,
            history: Vec::new(),
            segments: Vec::new(),
            layout: Arc::new(layout),
        };
        check_schedule(&schedule)?;
        let counts = vec![0; mixture.components.len()];
        mixture.set_history(vec![ScheduleChange {
            at: 0,
            counts,
            steps: schedule,
        }])?;
        Ok(mixture)
    }

    /// This mixture continued from global sample `at`, where the components'
    /// counts were `counts` (from [`Mixture::counts_at`] of the run being
    /// resumed), with `schedule`'s weights from `at` on (a whole schedule,
    /// from sample 0; steps before `at` only matter through the weights in
    /// force at `at`). Samples from `at` on draw each component's records
    /// after the `counts` already taken, so resuming with other weights loses
    /// and repeats nothing. The history before `at` is kept (changes at or
    /// after `at` are replaced), so samples before `at` stay what they were.
    ///
    /// When this mixture already reads `schedule` from `at` on (its last
    /// change's steps agree with it from there) and has exactly `counts` at
    /// `at`, it is returned unchanged: the same run continues.
    pub fn anchored(&self, at: u64, counts: &[u64], schedule: &[WeightStep]) -> Result<Self> {
        self.check_counts(at, counts)?;
        check_schedule(schedule)?;
        let last = self.history.last().expect("a mixture has a history");
        let from = at.max(last.at);
        if steps_from(schedule, from) == steps_from(&last.steps, from)
            && self.counts_at(at) == counts
        {
            return Ok(self.clone());
        }
        let mut history: Vec<ScheduleChange> =
            self.history.iter().filter(|c| c.at < at).cloned().collect();
        history.push(ScheduleChange {
            at,
            counts: counts.to_vec(),
            steps: steps_from(schedule, at),
        });
        let mut m = self.clone();
        m.set_history(history)?;
        Ok(m)
    }

    /// This mixture's components, seed and epoch length with the weights of
    /// `history` (as [`Mixture::history`] of the run being restored gave
    /// it): the very stream that run read, at every sample.
    pub fn with_history(&self, history: Vec<ScheduleChange>) -> Result<Self> {
        let bad = |m: String| Error::InvalidArgument(format!("mixture history: {m}"));
        let first = history
            .first()
            .ok_or_else(|| bad("it has no entry (the first is the schedule at sample 0)".into()))?;
        if first.at != 0 {
            return Err(bad(format!(
                "the first change is at sample {}, not at 0",
                first.at
            )));
        }
        for w in history.windows(2) {
            if w[1].at <= w[0].at {
                return Err(bad(format!(
                    "changes must be at increasing samples ({} after {})",
                    w[1].at, w[0].at
                )));
            }
        }
        for c in &history {
            self.check_counts(c.at, &c.counts)
                .map_err(|e| bad(format!("the change at sample {}: {e}", c.at)))?;
            match c.steps.first() {
                Some(s) if s.start == c.at => {}
                _ => {
                    return Err(bad(format!(
                        "the change at sample {} must have steps, the first starting there",
                        c.at
                    )));
                }
            }
            for w in c.steps.windows(2) {
                if w[1].start <= w[0].start {
                    return Err(bad(format!(
                        "the change at sample {}: steps must start at increasing samples \
                         ({} after {})",
                        c.at, w[1].start, w[0].start
                    )));
                }
            }
        }
        let mut m = self.clone();
        m.set_history(history)?;
        Ok(m)
    }

    /// Every change of weights this mixture's stream went through, the first
    /// being the configured schedule at sample 0. A loader saves it; see
    /// [`Mixture::with_history`].
    pub fn history(&self) -> &[ScheduleChange] {
        &self.history
    }

    /// The weight schedule in force from the last change on.
    pub fn schedule(&self) -> &[WeightStep] {
        &self.history.last().expect("a mixture has a history").steps
    }

    /// `counts` fit this mixture at sample `at`: one per component, adding
    /// up to `at`.
    fn check_counts(&self, at: u64, counts: &[u64]) -> Result<()> {
        if counts.len() != self.components.len() {
            return Err(Error::InvalidArgument(format!(
                "mixture: {} counts for {} components",
                counts.len(),
                self.components.len()
            )));
        }
        let taken: u128 = counts.iter().map(|&c| u128::from(c)).sum();
        if taken != u128::from(at) {
            return Err(Error::InvalidArgument(format!(
                "mixture: component counts add up to {taken}, not to the position {at}"
            )));
        }
        Ok(())
    }

    /// Rebuilds the segments from `history` (already checked for order and
    /// counts): each change's steps, from its sample to the next change.
    fn set_history(&mut self, history: Vec<ScheduleChange>) -> Result<()> {
        let mut segments = Vec::new();
        for (i, change) in history.iter().enumerate() {
            let until = history.get(i + 1).map_or(u64::MAX, |c| c.at);
            self.build_segments(change, until, &mut segments)?;
        }
        self.segments = segments;
        self.history = history;
        Ok(())
    }

    /// Appends the segments of `change` up to sample `until` (exclusive).
    fn build_segments(
        &self,
        change: &ScheduleChange,
        until: u64,
        segments: &mut Vec<Segment>,
    ) -> Result<()> {
        let mut base = change.counts.clone();
        for (i, step) in change.steps.iter().enumerate() {
            // The step's weights are checked even when a later change
            // leaves it no sample: a history is all valid or refused.
            let ints = self.integer_weights(step)?;
            let start = step.start.max(change.at);
            let end = change
                .steps
                .get(i + 1)
                .map_or(u64::MAX, |s| s.start)
                .min(until);
            if start >= end {
                continue;
            }
            let mut nodes = Vec::new();
            // Seeded by where the weights start to apply: the step's start,
            // or the change's sample (what a resumed run has used from the
            // start, so that saved runs keep their streams).
            let mut rng = SplitMix(self.seed ^ mix(0x6d69_7874_7572_6573 ^ start));
            build_tree(&ints, 0, ints.len(), &mut nodes, &mut rng);
            let seg = Segment {
                start,
                end,
                nodes,
                base: base.clone(),
            };
            if end != u64::MAX {
                let add = seg.local_counts(end - start, self.components.len());
                for (b, a) in base.iter_mut().zip(add) {
                    *b = b.checked_add(a).ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "mixture: a component's count passes 2^64 before sample {end}"
                        ))
                    })?;
                }
            }
            segments.push(seg);
        }
        Ok(())
    }

    fn integer_weights(&self, step: &WeightStep) -> Result<Vec<u64>> {
        let bad = |m: String| Error::InvalidArgument(format!("mixture: {m}"));
        if step.weights.len() != self.components.len() {
            return Err(bad(format!(
                "the step at sample {} has {} weights for {} components",
                step.start,
                step.weights.len(),
                self.components.len()
            )));
        }
        for (c, &w) in self.components.iter().zip(&step.weights) {
            if !w.is_finite() || w < 0.0 {
                return Err(bad(format!(
                    "weight of {:?} at sample {} is {w}; weights must be finite and >= 0",
                    c.name, step.start
                )));
            }
            if w > 0.0 && c.dataset.is_empty() {
                return Err(bad(format!(
                    "component {:?} has no records but weight {w} at sample {}",
                    c.name, step.start
                )));
            }
        }
        let mut sum: f64 = step.weights.iter().sum();
        if sum <= 0.0 {
            return Err(bad(format!(
                "the weights at sample {} are all zero",
                step.start
            )));
        }
        // Finite weights whose sum overflows (1e308 + 1e308) are scaled by
        // the largest first; only then, so the shares of every other
        // schedule stay bit for bit what they were.
        let mut scale = 1.0;
        if !sum.is_finite() {
            scale = step.weights.iter().fold(0.0f64, |a, &w| a.max(w));
            sum = step.weights.iter().map(|&w| w / scale).sum();
        }
        Ok(step
            .weights
            .iter()
            .map(|&w| {
                let i = (w / scale / sum * WEIGHT_SCALE).round() as u64;
                // A positive weight never rounds to nothing.
                if w > 0.0 { i.max(1) } else { 0 }
            })
            .collect())
    }

    /// The components, in order.
    pub fn components(&self) -> &[MixComponent] {
        &self.components
    }

    /// The mixture's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether components are read in their seeded shuffled order.
    pub fn shuffle(&self) -> bool {
        self.shuffle
    }

    /// Samples in one mixture epoch.
    pub fn epoch_samples(&self) -> u64 {
        self.epoch_samples
    }

    /// The common record layout.
    pub fn layout(&self) -> &RecordLayout {
        &self.layout
    }

    /// Bytes per record.
    pub fn stride(&self) -> usize {
        self.layout.stride as usize
    }

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

/// A schedule starts at sample 0 with steps at increasing samples.
fn check_schedule(schedule: &[WeightStep]) -> Result<()> {
    let bad = |m: String| Error::InvalidArgument(format!("mixture: {m}"));
    if schedule.first().is_none_or(|s| s.start != 0) {
        return Err(bad("the weight schedule must start at sample 0".into()));
    }
    for w in schedule.windows(2) {
        if w[1].start <= w[0].start {
            return Err(bad(format!(
                "weight steps must start at increasing samples ({} after {})",
                w[1].start, w[0].start
            )));
        }
    }
    Ok(())
}

/// The steps of `schedule` (increasing starts, the first at or before
/// `from`) that apply from sample `from` on, the first moved to `from`.
fn steps_from(schedule: &[WeightStep], from: u64) -> Vec<WeightStep> {
    let first = schedule.partition_point(|s| s.start <= from).max(1) - 1;
    let mut steps = schedule[first..].to_vec();
    if let Some(s) = steps.first_mut() {
        s.start = from;
    }
    steps
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

/// A component's seed: the mixture's seed and the component's name, so
/// reordering the components changes no component's order.
fn component_seed(seed: u64, name: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(seed ^ mix(h))
}
