//! `tessera bench`: loader throughput and data stall on a shard set.

use super::args::{parse_prefetch_arg, parse_size_arg, parse_step_ms_arg};
use super::target::open_with;
use anyhow::{Context, Result};
use std::path::PathBuf;
use tessera::bench::{self, BenchOptions};
use tessera_reader::{CacheOptions, OpenOptions};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Records per batch.
    #[arg(long, default_value_t = 4096)]
    batch_size: u64,
    /// Shuffled order (default: sequential).
    #[arg(long)]
    shuffle: bool,
    /// Prefetch threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Batches each thread builds ahead (1 to 1024).
    #[arg(long, default_value_t = 2, value_parser = parse_prefetch_arg)]
    prefetch: usize,
    /// Simulated training step per batch, milliseconds (0 to 60000).
    #[arg(long, default_value_t = 0.0, value_parser = parse_step_ms_arg)]
    step_ms: f64,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Only this split.
    #[arg(long)]
    split: Option<String>,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Read every byte of each batch in the consumer.
    #[arg(long)]
    read: bool,
    /// With --shuffle: shuffle the shard order, then inside windows of
    /// this many shards (for sets read through the shard cache).
    #[arg(long, default_value_t = 0)]
    shuffle_window: u64,
    /// Shard cache directory for remote and compressed sets
    /// (default: $TESSERA_SHARD_CACHE, then ~/.cache/tessera/shards).
    #[arg(long)]
    shard_cache: Option<PathBuf>,
    /// Most bytes the shard cache may hold, e.g. 2GiB (default:
    /// $TESSERA_SHARD_CACHE_BYTES, else no limit).
    #[arg(long, value_parser = parse_size_arg)]
    cache_budget: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let opts = OpenOptions {
        cache: CacheOptions {
            dir: a.shard_cache,
            budget: a.cache_budget,
            fetch_threads: None,
        },
        ..OpenOptions::default()
    };
    let ds = open_with(&path, a.split.as_deref(), &opts)
        .with_context(|| format!("opening {}", path.display()))?;
    let r = bench::run(
        &ds,
        &BenchOptions {
            batch_size: a.batch_size,
            shuffle: a.shuffle,
            threads: a.threads,
            prefetch: a.prefetch,
            step_ms: a.step_ms,
            epochs: a.epochs,
            seed: a.seed,
            read_all: a.read,
            shuffle_window: a.shuffle_window,
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    print!("{}", bench::format_report(&r));
    if let Some(c) = &r.cache {
        println!(
            "first batch after {:.3}s; shard cache: {} shard(s) fetched ({:.1} MB, {:.1} MB transferred), {} reused, {} evicted",
            r.first_batch_seconds,
            c.fetched_shards,
            c.fetched_bytes as f64 / 1e6,
            c.transferred_bytes as f64 / 1e6,
            c.reused_shards,
            c.evicted_shards
        );
    }
    Ok(())
}
