//! `tessera bench`: loader throughput and, for a simulated training step,
//! the share of wall time the consumer waits for data (the data stall) and a
//! verdict on which side is the bottleneck.
//!
//! The verdict compares two times per batch: the loader's, measured in a pass
//! with no step at all (median over epochs), and the step's. The stall
//! measured with the step is reported beside it but does not decide: it sits
//! near zero whenever the loader keeps up, so a threshold on it flips between
//! "loader" and "model" from run to run when the two times are close. A ratio
//! with a margin on each side ([`MARGIN`]) answers the same question steadily
//! and says "balanced" where noise could tip it either way.

use serde::Serialize;
use std::time::{Duration, Instant};
use tessera_reader::{Dataset, LastBatch, Loader, LoaderConfig};

/// The factor by which one side must be slower than the other for the
/// verdict to name it; within it, the verdict is [`Verdict::Balanced`].
pub const MARGIN: f64 = 1.25;

/// Epochs the loader-alone pass runs at least, so that its median does not
/// rest on one (possibly cold) epoch.
pub const MIN_LOADER_EPOCHS: u64 = 3;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Records per batch.
    pub batch_size: u64,
    /// Shuffled (true) or sequential order.
    pub shuffle: bool,
    /// Prefetch threads.
    pub threads: usize,
    /// Batches each thread builds ahead.
    pub prefetch: usize,
    /// Simulated compute per batch, in milliseconds (busy-wait).
    pub step_ms: f64,
    /// Epochs to run (the first is included: run with the set page-cached for
    /// steady-state figures).
    pub epochs: u64,
    /// Shuffle seed.
    pub seed: u64,
    /// Make the consumer read every byte of each batch (as a training step
    /// that copies the batch to a device would), instead of one byte.
    pub read_all: bool,
    /// Shuffle the shard order and then inside windows of this many shards
    /// (0: the whole view).
    pub shuffle_window: u64,
}

/// Which side limits a training loop with the given step time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The step takes at least [`MARGIN`] times the loader's time per batch:
    /// prefetching hides the loader.
    Model,
    /// Neither is [`MARGIN`] times slower than the other.
    Balanced,
    /// The loader takes at least [`MARGIN`] times the step: the step waits.
    Loader,
}

impl Verdict {
    /// The verdict for a loader needing `loader_ms` per batch and a step of
    /// `step_ms`.
    pub fn of(loader_ms: f64, step_ms: f64) -> Verdict {
        if loader_ms * MARGIN <= step_ms {
            Verdict::Model
        } else if loader_ms >= step_ms * MARGIN {
            Verdict::Loader
        } else {
            Verdict::Balanced
        }
    }

    /// The sentence `tessera bench` prints.
    pub fn sentence(self) -> &'static str {
        match self {
            Verdict::Model => "the model is the bottleneck",
            Verdict::Balanced => "balanced: the loader and the step take about as long",
            Verdict::Loader => "the loader is the bottleneck",
        }
    }
}

/// Measured figures.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Records read (in the pass with the step, if there is one).
    pub samples: u64,
    /// Batches read (in the pass with the step, if there is one).
    pub batches: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Records per second.
    pub samples_per_sec: f64,
    /// Batch bytes per second, in GB/s.
    pub gb_per_sec: f64,
    /// Seconds spent waiting for batches.
    pub wait_seconds: f64,
    /// Fraction of wall time spent waiting for data.
    pub stall_fraction: f64,
    /// With a step: the loader's milliseconds per batch in a pass without a
    /// step (the median epoch's time over its batches).
    pub loader_ms_per_batch: Option<f64>,
    /// With a step: the loader-alone pass's records per second (median epoch).
    pub loader_samples_per_sec: Option<f64>,
    /// With a step: epochs the loader-alone pass ran.
    pub loader_epochs: Option<u64>,
    /// With a step (and at least one batch): which side is the bottleneck.
    pub verdict: Option<Verdict>,
    /// Configuration echo.
    pub batch_size: u64,
    /// Configuration echo.
    pub shuffle: bool,
    /// Configuration echo.
    pub threads: usize,
    /// Configuration echo.
    pub step_ms: f64,
    /// Seconds from the start to the first batch in hand.
    pub first_batch_seconds: f64,
    /// Per epoch: seconds and samples per second.
    pub epochs: Vec<EpochFigures>,
    /// What the shard cache did, for a remote or compressed set.
    pub cache: Option<CacheFigures>,
}

/// One epoch of a benchmark run.
#[derive(Clone, Debug, Serialize)]
pub struct EpochFigures {
    /// Wall time of the epoch.
    pub seconds: f64,
    /// Records per second in it.
    pub samples_per_sec: f64,
}

/// The shard cache's counters at the end of a run.
#[derive(Clone, Debug, Serialize)]
pub struct CacheFigures {
    /// Shards fetched (and decompressed) into the cache by this run.
    pub fetched_shards: u64,
    /// Their size in the cache.
    pub fetched_bytes: u64,
    /// Bytes read from the store for them.
    pub transferred_bytes: u64,
    /// Shards found in the cache already.
    pub reused_shards: u64,
    /// Shards evicted to stay within the budget.
    pub evicted_shards: u64,
    /// Fetches retried.
    pub retries: u64,
    /// Seconds spent decompressing, summed over threads.
    pub decompress_seconds: f64,
}

/// Sums every 8-byte little-endian word of `bytes` (and any tail byte).
fn sum_words(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut s = words.by_ref().fold(0u64, |a, w| {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        a.wrapping_add(u64::from_le_bytes(b))
    });
    for &b in words.remainder() {
        s = s.wrapping_add(u64::from(b));
    }
    s
}

/// What one pass over some epochs measured.
struct Pass {
    samples: u64,
    batches: u64,
    seconds: f64,
    wait: Duration,
    /// Per epoch: (seconds, batches, samples).
    epochs: Vec<(f64, u64, u64)>,
    /// Seconds from the start of the pass to its first batch.
    first_batch: Option<f64>,
}

impl Pass {
    /// The median epoch by time per batch: (ms per batch, samples per second).
    fn median_epoch(&self) -> Option<(f64, f64)> {
        let mut per: Vec<(f64, f64)> = self
            .epochs
            .iter()
            .filter(|(_, b, _)| *b > 0)
            .map(|&(s, b, n)| (s * 1000.0 / b as f64, n as f64 / s.max(1e-9)))
            .collect();
        per.sort_by(|a, b| a.0.total_cmp(&b.0));
        per.get(per.len() / 2).copied()
    }
}

/// Reads `epochs` epochs, busy-waiting `step` after each batch.
fn pass(
    loader: &Loader,
    epochs: u64,
    step: Duration,
    read_all: bool,
) -> Result<Pass, tessera_reader::Error> {
    let mut p = Pass {
        samples: 0,
        batches: 0,
        seconds: 0.0,
        wait: Duration::ZERO,
        epochs: Vec::new(),
        first_batch: None,
    };
    let mut checksum = 0u64;
    let start = Instant::now();
    for epoch in 0..epochs {
        let epoch_start = Instant::now();
        let (mut batches, mut samples) = (0u64, 0u64);
        let mut it = loader.epoch(epoch);
        loop {
            let t = Instant::now();
            let Some(batch) = it.try_next()? else { break };
            p.wait += t.elapsed();
            p.first_batch
                .get_or_insert_with(|| start.elapsed().as_secs_f64());
            samples += batch.rows() as u64;
            batches += 1;
            // Touch the batch so the work cannot be optimized away.
            checksum = checksum.wrapping_add(if read_all {
                sum_words(batch.bytes())
            } else {
                u64::from(batch.bytes().first().copied().unwrap_or(0))
            });
            if !step.is_zero() {
                let until = Instant::now() + step;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
        p.epochs
            .push((epoch_start.elapsed().as_secs_f64(), batches, samples));
        p.samples += samples;
        p.batches += batches;
    }
    std::hint::black_box(checksum);
    p.seconds = start.elapsed().as_secs_f64().max(1e-9);
    Ok(p)
}

/// Runs the benchmark over `ds`. With a step, first a pass of the loader
/// alone (at least [`MIN_LOADER_EPOCHS`] epochs, which also warms the page
/// cache), then the pass with the step.
pub fn run(ds: &Dataset, o: &BenchOptions) -> Result<BenchReport, tessera_reader::Error> {
    let loader = Loader::new(
        ds,
        LoaderConfig {
            batch_size: o.batch_size,
            shuffle: o.shuffle,
            seed: o.seed,
            threads: o.threads,
            prefetch: o.prefetch.max(1),
            last_batch: LastBatch::Partial,
            shuffle_window: o.shuffle_window,
            ..Default::default()
        },
    )?;
    let step_ms = o.step_ms.max(0.0);
    let step = Duration::from_secs_f64(step_ms / 1000.0);
    let alone = match step.is_zero() {
        true => None,
        false => {
            let epochs = o.epochs.max(MIN_LOADER_EPOCHS);
            Some((pass(&loader, epochs, Duration::ZERO, o.read_all)?, epochs))
        }
    };
    let p = pass(&loader, o.epochs.max(1), step, o.read_all)?;
    let median = alone.as_ref().and_then(|(a, _)| a.median_epoch());
    // The first batch of the run: of the loader-alone pass when there is one.
    let first_batch = alone.as_ref().map_or(p.first_batch, |(a, _)| a.first_batch);
    let epochs = p
        .epochs
        .iter()
        .map(|&(secs, _, n)| EpochFigures {
            seconds: secs,
            samples_per_sec: n as f64 / secs.max(1e-9),
        })
        .collect();
    Ok(BenchReport {
        samples: p.samples,
        batches: p.batches,
        seconds: p.seconds,
        samples_per_sec: p.samples as f64 / p.seconds,
        gb_per_sec: p.samples as f64 * ds.stride() as f64 / p.seconds / 1e9,
        wait_seconds: p.wait.as_secs_f64(),
        stall_fraction: p.wait.as_secs_f64() / p.seconds,
        loader_ms_per_batch: median.map(|m| m.0),
        loader_samples_per_sec: median.map(|m| m.1),
        loader_epochs: alone.as_ref().map(|(_, e)| *e),
        verdict: median.map(|(ms, _)| Verdict::of(ms, step_ms)),
        batch_size: o.batch_size,
        shuffle: o.shuffle,
        threads: o.threads,
        step_ms: o.step_ms,
        first_batch_seconds: first_batch.unwrap_or(p.seconds),
        epochs,
        cache: ds.cache_stats().map(|c| CacheFigures {
            fetched_shards: c.fetched_shards,
            fetched_bytes: c.fetched_bytes,
            transferred_bytes: c.transferred_bytes,
            reused_shards: c.reused_shards,
            evicted_shards: c.evicted_shards,
            retries: c.retries,
            decompress_seconds: c.decompress_seconds,
        }),
    })
}

/// The text `tessera bench` prints for `r`.
pub fn format_report(r: &BenchReport) -> String {
    let order = if r.shuffle { "shuffled" } else { "sequential" };
    let config = format!("{order}, batch {}, {} thread(s)", r.batch_size, r.threads);
    let rate = |samples: u64, seconds: f64| {
        format!(
            "{samples} samples in {seconds:.3}s: {:.0} samples/s",
            samples as f64 / seconds
        )
    };
    if r.step_ms <= 0.0 {
        return format!(
            "{}, {:.2} GB/s ({config})\n",
            rate(r.samples, r.seconds),
            r.gb_per_sec
        );
    }
    let mut s = String::new();
    match (r.loader_ms_per_batch, r.loader_samples_per_sec) {
        (Some(ms), Some(sps)) => s.push_str(&format!(
            "loader alone: {ms:.3} ms per batch, {sps:.0} samples/s (median of {} epochs; {config})\n",
            r.loader_epochs.unwrap_or(0)
        )),
        _ => s.push_str(&format!("loader alone: no batches ({config})\n")),
    }
    s.push_str(&format!(
        "with a {} ms step per batch: {}; waiting for data {:.1}% of the time\n",
        r.step_ms,
        rate(r.samples, r.seconds),
        r.stall_fraction * 100.0
    ));
    if let (Some(v), Some(ms)) = (r.verdict, r.loader_ms_per_batch) {
        s.push_str(&format!(
            "verdict: {} (the loader needs {:.0}% of the step's time per batch; \
             below {:.0}% the model is the bottleneck, above {:.0}% the loader)\n",
            v.sentence(),
            ms / r.step_ms * 100.0,
            100.0 / MARGIN,
            100.0 * MARGIN
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_names_a_side_only_beyond_the_margin() {
        assert_eq!(Verdict::of(1.0, 10.0), Verdict::Model);
        assert_eq!(Verdict::of(1.0, 1.25), Verdict::Model);
        assert_eq!(Verdict::of(1.0, 1.2), Verdict::Balanced);
        assert_eq!(Verdict::of(1.0, 1.0), Verdict::Balanced);
        assert_eq!(Verdict::of(1.0, 0.81), Verdict::Balanced);
        assert_eq!(Verdict::of(1.0, 0.8), Verdict::Loader);
        assert_eq!(Verdict::of(10.0, 1.0), Verdict::Loader);
    }

    #[test]
    fn the_median_epoch_ignores_one_slow_epoch() {
        let p = Pass {
            samples: 0,
            batches: 0,
            seconds: 1.0,
            wait: Duration::ZERO,
            // A cold first epoch at 10 ms per batch, then 1 and 2 ms.
            epochs: vec![(1.0, 100, 1000), (0.1, 100, 1000), (0.2, 100, 1000)],
            first_batch: None,
        };
        let (ms, sps) = p.median_epoch().unwrap();
        assert!((ms - 2.0).abs() < 1e-9, "{ms}");
        assert!((sps - 5000.0).abs() < 1e-6, "{sps}");
        let empty = Pass {
            epochs: vec![(0.1, 0, 0)],
            ..p
        };
        assert_eq!(empty.median_epoch(), None);
    }
}
