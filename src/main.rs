//! The `tessera` command line: build, inspect, head, verify, cache, bench.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tessera::bench::{self, BenchOptions};
use tessera::build::{BuildOptions, build};
use tessera::cache::Cache;
use tessera::progress::ProgressMode;
use tessera_reader::{CacheOptions, Dataset, OpenOptions};

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
        /// Build threads (default: all cores). Never changes the output.
        #[arg(long)]
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
        /// Also place the artifact at DIR (shards hard-linked from the cache,
        /// copied across file systems; an earlier export there is replaced),
        /// or push it to an object-store URL (s3://bucket/prefix, as `push`).
        #[arg(long, short = 'o', value_name = "DIR|URL")]
        output: Option<String>,
        /// Publish even if a split, or the whole artifact, holds no rows.
        #[arg(long)]
        allow_empty: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
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
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// Print the manifest as JSON.
        #[arg(long)]
        json: bool,
        /// Artifact cache directory (to find a spec's, hash's or name's artifact).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
    /// Print the first records, decoded.
    Head {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Records to print.
        #[arg(short, default_value_t = 10)]
        n: u64,
        /// Only this split.
        #[arg(long)]
        split: Option<String>,
    },
    /// Upload a shard set to an object store: the shards first (in
    /// parallel, large ones in parts, retried), the manifest last with a
    /// create-only put, so no reader sees a set with missing shards. Pushing
    /// a set that is already there does nothing.
    Push {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// Destination prefix: s3://bucket/path (also gs://, az://, http(s)://).
        /// Credentials and endpoint come from the environment (AWS_ACCESS_KEY_ID,
        /// AWS_ENDPOINT, AWS_REGION, AWS_ALLOW_HTTP, ...).
        url: String,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Files uploaded at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every shard's blake3 against the manifest.
    Verify {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
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
        /// Batches each thread builds ahead.
        #[arg(long, default_value_t = 2)]
        prefetch: usize,
        /// Simulated training step per batch, milliseconds.
        #[arg(long, default_value_t = 0.0)]
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

fn open(path: &PathBuf, split: Option<&str>) -> Result<Dataset> {
    open_with(path, split, &OpenOptions::default())
}

fn open_with(path: &PathBuf, split: Option<&str>, opts: &OpenOptions) -> Result<Dataset> {
    let ds = Dataset::open_with(path, opts)?;
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
            output,
            allow_empty,
        } => {
            let opts = BuildOptions {
                cache_dir,
                threads,
                memory_limit,
                allow_empty,
                progress: if quiet {
                    ProgressMode::Quiet
                } else {
                    ProgressMode::Auto
                },
            };
            let report = build(&spec, &opts)?;
            let pushed = match &output {
                Some(url) if tessera_reader::is_store_url(url) => Some(
                    tessera::push::push(&report.path, url, 4)
                        .with_context(|| format!("pushing {} to {url}", report.path.display()))?,
                ),
                Some(dir) => {
                    tessera::artifact::export(&report.path, std::path::Path::new(dir))?;
                    None
                }
                None => None,
            };
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
                if let Some(dir) = &output {
                    println!("output: {dir}");
                }
                if let Some(p) = &pushed {
                    println!("{}", tessera::push::describe(p));
                }
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
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "tessera", &mut std::io::stdout());
        }
        Command::Inspect {
            target,
            json,
            cache_dir,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let ds = open(&path, None)?;
            if json {
                println!("{}", String::from_utf8_lossy(&ds.manifest().to_json()));
            } else {
                print!("{}", tessera::inspect::summary(&ds));
            }
        }
        Command::Head {
            target,
            cache_dir,
            n,
            split,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let ds = open(&path, split.as_deref())?;
            print!("{}", tessera::inspect::head(&ds, n));
        }
        Command::Push {
            target,
            url,
            cache_dir,
            concurrency,
            json,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let r = tessera::push::push(&path, &url, concurrency)
                .with_context(|| format!("pushing {} to {url}", path.display()))?;
            if json {
                println!("{}", serde_json::to_string(&tessera::push::to_json(&r))?);
            } else {
                println!("{}", tessera::push::describe(&r));
            }
        }
        Command::Verify { target, cache_dir } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
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
                } => {
                    let report = cache.gc(keep, older_than, dry_run)?;
                    print!("{}", tessera::cache::format_gc_report(&report, dry_run));
                }
            }
        }
        Command::Bench {
            target,
            cache_dir,
            batch_size,
            shuffle,
            threads,
            prefetch,
            step_ms,
            epochs,
            split,
            seed,
            read,
            shuffle_window,
            shard_cache,
            cache_budget,
            json,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let opts = OpenOptions {
                cache: CacheOptions {
                    dir: shard_cache,
                    budget: cache_budget,
                    fetch_threads: None,
                },
                ..OpenOptions::default()
            };
            let ds = open_with(&path, split.as_deref(), &opts)
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
                    read_all: read,
                    shuffle_window,
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
