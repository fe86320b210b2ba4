//! Weight schedules: their checks, the history of changes a mixture keeps,
//! and the interleave segments built from it.

use super::interleave::{Segment, build_tree};
use super::{Mixture, ScheduleChange, WeightStep};
use crate::error::{Error, Result};
use crate::order::{SplitMix, mix};

/// Weights are turned into integers with this total, so the interleave is
/// exact integer arithmetic on every platform.
const WEIGHT_SCALE: f64 = (1u64 << 40) as f64;
impl Mixture {
    /// `counts` fit this mixture at sample `at`: one per component, adding
    /// up to `at`.
    pub(super) fn check_counts(&self, at: u64, counts: &[u64]) -> Result<()> {
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
    pub(super) fn set_history(&mut self, history: Vec<ScheduleChange>) -> Result<()> {
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
    pub(super) fn build_segments(
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

    pub(super) fn integer_weights(&self, step: &WeightStep) -> Result<Vec<u64>> {
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
}

/// A schedule starts at sample 0 with steps at increasing samples.
pub(super) fn check_schedule(schedule: &[WeightStep]) -> Result<()> {
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
pub(super) fn steps_from(schedule: &[WeightStep], from: u64) -> Vec<WeightStep> {
    let first = schedule.partition_point(|s| s.start <= from).max(1) - 1;
    let mut steps = schedule[first..].to_vec();
    if let Some(s) = steps.first_mut() {
        s.start = from;
    }
    steps
}
