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
//!
//! Here: the [`Mixture`] and its construction; [`schedule`]: weight
//! schedules, their history and the interleave segments built from them;
//! [`sample`]: which record each global sample reads, and the copy of a
//! batch's samples.

mod interleave;
mod sample;
mod schedule;

pub(crate) use sample::MixScratch;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::layout::RecordLayout;
use crate::order::mix;
use interleave::Segment;
use schedule::{check_schedule, steps_from};
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
        // Every mixture has a last change (its schedule at sample 0 at least).
        let last_at = self.history.last().map_or(0, |c| c.at);
        let from = at.max(last_at);
        if steps_from(schedule, from) == steps_from(self.schedule(), from)
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
        // Every mixture has a last change (its schedule at sample 0 at least).
        self.history.last().map_or(&[], |c| &c.steps)
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
