//! The `tessera` command line: build, inspect, head, verify, cache, bench.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tessera::bench::{self, BenchOptions};
use tessera::build::{BuildOptions, build};
use tessera::cache::Cache;
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Compile a YAML dataset spec into content-hashed, fixed-stride shards, and inspect them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a spec into a shard set (or return the cached one).
    Build {
        /// The spec file.
        spec: PathBuf,
        /// Artifact cache directory (default: $TESSERA_CACHE_DIR, then ~/.cache/tessera/artifacts).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Build threads (default: all cores, at most 1024). Never changes the output.
        #[arg(long, value_parser = parse_threads_arg)]
        threads: Option<usize>,
        /// Print one JSON object on stdout (progress still goes to stderr).
        #[arg(long)]
        json: bool,
        /// No progress output.
        #[arg(long, short)]
        quiet: bool,
        /// Memory the query engine may hold before spilling to disk, e.g. 2GiB
        /// (default: half of the machine's memory).
        #[arg(long, value_parser = parse_size_arg)]
        memory_limit: Option<u64>,
    },
    /// Show how a spec would be built, without building: DataFusion's plan,
    /// whether the query is cut into chunks (and why not), and the chunks.
    Explain {
        /// The spec file.
        spec: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe a shard set: layout, splits, shards, statistics.
    Inspect {
        /// Shard-set directory.
        path: PathBuf,
        /// Print the manifest as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the first records, decoded.
    Head {
        /// Shard-set directory.
        path: PathBuf,
        /// Records to print.
        #[arg(short, default_value_t = 10)]
        n: u64,
        /// Only this split.
        #[arg(long)]
        split: Option<String>,
    },
    /// Check every shard's blake3 against the manifest.
    Verify {
        /// Shard-set directory.
        path: PathBuf,
    },
    /// Manage the artifact cache.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
        /// Artifact cache directory.
        #[arg(long, global = true)]
        cache_dir: Option<PathBuf>,
    },
    /// Measure loader throughput and the data stall for a simulated step time.
    Bench {
        /// Shard-set directory.
        path: PathBuf,
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
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CacheAction {
    /// List cached artifacts.
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove artifacts: keep the newest K and/or remove those older than D.
    Gc {
        /// Keep this many newest artifacts.
        #[arg(long)]
        keep: Option<usize>,
        /// Remove artifacts older than this (e.g. 30m, 12h, 7d).
        #[arg(long, value_parser = tessera::cache::parse_age)]
        older_than: Option<std::time::Duration>,
        /// Only print what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Also remove artifacts that are open in a reader (a running training
        /// job) and artifacts written by a newer tessera, which gc otherwise
        /// keeps. Builds in progress are still left alone.
        #[arg(long)]
        force: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            // Our errors already include their causes' text; print a cause
            // only when it adds something.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg = format!("{msg}: {c}");
                }
            }
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    tessera::spec::parse_size(s)
}

/// A build that ran out of disk space says so wherever in the pipeline the
/// write failed, followed by what to do.
fn disk_full_hint(e: tessera::BuildError) -> anyhow::Error {
    let msg = e.to_string();
    if msg.contains("No space left on device") && !msg.contains("nothing was published") {
        anyhow::anyhow!(
            "{msg}; the disk is full and nothing was published (free space, or point \
             --cache-dir or TESSERA_CACHE_DIR at a larger disk)"
        )
    } else {
        e.into()
    }
}

/// Most build threads: more would only add memory and scheduling overhead
/// (each one also gets a query partition), and absurd counts hang the start.
const MAX_BUILD_THREADS: usize = 1024;

fn parse_threads_arg(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_BUILD_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is not a thread count from 1 to {MAX_BUILD_THREADS}"
        )),
    }
}

/// Deepest prefetch: each batch ahead is a buffer of `batch_size x stride`
/// bytes per thread, so more only costs memory.
const MAX_PREFETCH: usize = 1024;

fn parse_prefetch_arg(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PREFETCH).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is not a prefetch depth from 1 to {MAX_PREFETCH}"
        )),
    }
}

/// Longest simulated step: a minute per batch is already far slower than
/// any training step.
const MAX_STEP_MS: f64 = 60_000.0;

fn parse_step_ms_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(ms) if (0.0..=MAX_STEP_MS).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{s:?} is not a step time in milliseconds from 0 to {MAX_STEP_MS}"
        )),
    }
}

fn open(path: &PathBuf, split: Option<&str>) -> Result<Dataset> {
    let ds = Dataset::open(path)?;
    Ok(match split {
        Some(s) => ds.split(s)?,
        None => ds,
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Build {
            spec,
            cache_dir,
            threads,
            json,
            quiet,
            memory_limit,
        } => {
            let opts = BuildOptions {
                cache_dir,
                threads,
                memory_limit,
                progress: if quiet {
                    ProgressMode::Quiet
                } else {
                    ProgressMode::Auto
                },
            };
            let report = build(&spec, &opts).map_err(disk_full_hint)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                let rows: Vec<String> = report
                    .rows
                    .0
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                if report.cache_hit {
                    println!(
                        "cache hit in {:.3}s",
                        report.seconds.get("total").copied().unwrap_or(0.0)
                    );
                } else {
                    let s = &report.scan;
                    println!(
                        "built in {:.2}s: {} rows scanned, {} kept ({}), pruned {} file(s) and {} of {} row groups, {:.1} MB written",
                        report.seconds.get("total").copied().unwrap_or(0.0),
                        s.rows_scanned,
                        report.rows_kept,
                        rows.join(" "),
                        s.files_pruned,
                        s.row_groups_pruned,
                        s.row_groups_pruned + s.row_groups_matched,
                        report.bytes as f64 / 1e6
                    );
                    let stages: Vec<String> = report
                        .seconds
                        .iter()
                        .filter(|(k, _)| k.as_str() != "total")
                        .map(|(k, v)| format!("{k} {v:.2}s"))
                        .collect();
                    println!("stages: {}", stages.join(", "));
                }
                match (&report.plan_source, &report.plan_operator) {
                    (Some(source), _) => println!(
                        "plan: chunked over source {source:?} ({} chunks)",
                        report.chunks
                    ),
                    (None, Some(op)) => println!(
                        "plan: global ({op}): {}{}",
                        report.plan_reason.as_deref().unwrap_or_default(),
                        report
                            .plan_serial
                            .as_deref()
                            .map(|w| format!("; ran in one partition because of {w}"))
                            .unwrap_or_default()
                    ),
                    _ => println!("plan: {}", report.plan),
                }
                println!("hash: {}", report.hash);
                println!("path: {}", report.path.display());
            }
        }
        Command::Explain { spec, json } => {
            let e = tessera::build::explain(&spec)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&e)?);
            } else {
                print!("{}", tessera::build::format_explanation(&e));
            }
        }
        Command::Inspect { path, json } => {
            let ds = open(&path, None)?;
            if json {
                println!("{}", String::from_utf8_lossy(&ds.manifest().to_json()));
            } else {
                print!("{}", tessera::inspect::summary(&ds));
            }
        }
        Command::Head { path, n, split } => {
            let ds = open(&path, split.as_deref())?;
            print!("{}", tessera::inspect::head(&ds, n));
        }
        Command::Verify { path } => {
            let ds = open(&path, None)?;
            ds.verify()?;
            println!(
                "ok: {} shard(s), {} rows verified",
                ds.manifest().shards.len(),
                ds.manifest().rows
            );
        }
        Command::Cache { action, cache_dir } => {
            let cache = Cache::resolve(cache_dir.as_deref())?;
            match action {
                CacheAction::Ls { json } => {
                    let entries = cache.list()?;
                    if json {
                        let rows: Vec<serde_json::Value> = entries
                            .iter()
                            .map(|e| {
                                serde_json::json!({
                                    "hash": e.hash,
                                    "path": e.path,
                                    "name": e.name,
                                    "rows": e.rows,
                                    "bytes": e.bytes,
                                    "problem": e.problem,
                                    "newer_format": e.newer_format,
                                })
                            })
                            .collect();
                        println!("{}", serde_json::Value::Array(rows));
                    } else {
                        print!("{}", tessera::cache::format_listing(&entries));
                    }
                }
                CacheAction::Gc {
                    keep,
                    older_than,
                    dry_run,
                    force,
                } => {
                    let report = cache.gc(keep, older_than, dry_run, force)?;
                    print!("{}", tessera::cache::format_gc_report(&report, dry_run));
                }
            }
        }
        Command::Bench {
            path,
            batch_size,
            shuffle,
            threads,
            prefetch,
            step_ms,
            epochs,
            split,
            seed,
            json,
        } => {
            let ds = open(&path, split.as_deref())
                .with_context(|| format!("opening {}", path.display()))?;
            let r = bench::run(
                &ds,
                &BenchOptions {
                    batch_size,
                    shuffle,
                    threads,
                    prefetch,
                    step_ms,
                    epochs,
                    seed,
                },
            )?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{} samples in {:.3}s: {:.0} samples/s, {:.2} GB/s ({}, batch {}, {} thread(s))",
                    r.samples,
                    r.seconds,
                    r.samples_per_sec,
                    r.gb_per_sec,
                    if shuffle { "shuffled" } else { "sequential" },
                    batch_size,
                    threads
                );
                if step_ms > 0.0 {
                    println!(
                        "step {step_ms} ms: data stall {:.1}% of wall time ({})",
                        r.stall_fraction * 100.0,
                        if r.stall_fraction > 0.05 {
                            "the loader is the bottleneck"
                        } else {
                            "the model is the bottleneck"
                        }
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
