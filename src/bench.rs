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
            ..Default::default()
        },
    )?;
    let step = Duration::from_secs_f64(o.step_ms.max(0.0) / 1000.0);
    let mut samples = 0u64;
    let mut batches = 0u64;
    let mut wait = Duration::ZERO;
    let mut checksum = 0u64;
    let start = Instant::now();
    for epoch in 0..o.epochs.max(1) {
        let mut it = loader.epoch(epoch);
        loop {
            let t = Instant::now();
            let Some(batch) = it.next() else { break };
            wait += t.elapsed();
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
    })
}
