//! `tessera bench`: loader throughput and, for a simulated training step,
//! the share of wall time the consumer waits for data (the data stall).

use serde::Serialize;
use std::time::{Duration, Instant};
use tessera_reader::{Dataset, LastBatch, Loader, LoaderConfig};

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

/// Measured figures.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Records read.
    pub samples: u64,
    /// Batches read.
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

/// Runs the benchmark over `ds`.
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
    let mut first_batch = None;
    let mut epochs = Vec::new();
    let step = Duration::from_secs_f64(o.step_ms.max(0.0) / 1000.0);
    let mut samples = 0u64;
    let mut batches = 0u64;
    let mut wait = Duration::ZERO;
    let mut checksum = 0u64;
    let start = Instant::now();
    for epoch in 0..o.epochs.max(1) {
        let t_epoch = Instant::now();
        let before = samples;
        let mut it = loader.epoch(epoch);
        loop {
            let t = Instant::now();
            let Some(batch) = it.try_next()? else { break };
            wait += t.elapsed();
            first_batch.get_or_insert_with(|| start.elapsed().as_secs_f64());
            samples += batch.rows() as u64;
            batches += 1;
            // Touch the batch so the work cannot be optimized away.
            checksum = checksum.wrapping_add(if o.read_all {
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
        let secs = t_epoch.elapsed().as_secs_f64().max(1e-9);
        epochs.push(EpochFigures {
            seconds: secs,
            samples_per_sec: (samples - before) as f64 / secs,
        });
    }
    std::hint::black_box(checksum);
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Ok(BenchReport {
        samples,
        batches,
        seconds,
        samples_per_sec: samples as f64 / seconds,
        gb_per_sec: samples as f64 * ds.stride() as f64 / seconds / 1e9,
        wait_seconds: wait.as_secs_f64(),
        stall_fraction: wait.as_secs_f64() / seconds,
        batch_size: o.batch_size,
        shuffle: o.shuffle,
        threads: o.threads,
        step_ms: o.step_ms,
        first_batch_seconds: first_batch.unwrap_or(seconds),
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
