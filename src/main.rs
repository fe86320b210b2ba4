//! The `tessera` command line: build, inspect, head, verify, cache, bench,
//! transform, export-transform.

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
    /// An object-store option for every URL this command reads or writes
    /// (sources, shard sets, work directories), on top of the environment's
    /// AWS_*, GOOGLE_* and AZURE_* variables: endpoint=http://127.0.0.1:8333,
    /// region=eu-west-1, allow_http=true, ... (object_store's keys; a
    /// source's own `storage:` options win). Repeatable.
    #[arg(long = "storage", global = true, value_name = "KEY=VALUE", value_parser = parse_storage_option)]
    storage: Vec<(String, String)>,
    #[command(subcommand)]
    command: Command,
}

fn parse_storage_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!(
            "{s:?} is not KEY=VALUE (for example endpoint=http://127.0.0.1:8333)"
        )),
    }
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
        /// Also place the artifact at DIR (shards hard-linked from the cache,
        /// copied across file systems; an earlier export there is replaced),
        /// or push it to an object-store URL (s3://bucket/prefix, as `push`).
        #[arg(long, short = 'o', value_name = "DIR|URL")]
        output: Option<String>,
        /// Publish even if a split, or the whole artifact, holds no rows.
        #[arg(long)]
        allow_empty: bool,
        /// Stop when the records would take more than SIZE, e.g. 50GiB
        /// (default: half of the free space where the cache lives).
        #[arg(long, value_parser = parse_size_arg, value_name = "SIZE")]
        max_output: Option<u64>,
    },
    /// Plan a build without running it: the hash, the chunks and the tasks,
    /// written to WORK_DIR/plan.json for `tessera task` and `tessera commit`.
    Plan {
        /// The spec file.
        spec: PathBuf,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Where the tasks write their outputs (default: under the cache's
        /// tmp/): a directory every node sees, or an object-store URL
        /// (s3://bucket/tmp/run1), so that the nodes share no file system.
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// Memory limit of every task, e.g. 2GiB.
        #[arg(long, value_parser = parse_size_arg)]
        memory_limit: Option<u64>,
        /// Threads of a global query's task.
        #[arg(long)]
        threads: Option<usize>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run tasks of a plan, one after the other in one process (idempotent:
    /// a rerun rewrites the same outputs).
    Task {
        /// The plan file (plan.json).
        plan: PathBuf,
        /// Task ids, e.g. stats-00003, freeze, shard-00003, global.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Assemble a plan's task outputs and publish the artifact.
    Commit {
        /// The plan file (plan.json).
        plan: PathBuf,
        /// Publish even if a split, or the whole artifact, holds no rows.
        #[arg(long)]
        allow_empty: bool,
        /// Print one JSON object, as `tessera build --json` does.
        #[arg(long)]
        json: bool,
        /// Also place the artifact at DIR, or push it to an object-store URL,
        /// as `tessera build -o` does.
        #[arg(long, short = 'o', value_name = "DIR|URL")]
        output: Option<String>,
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
        /// Print only the shard set's directory (or URL) that TARGET names,
        /// without opening it (`tessera.open` resolves names this way).
        #[arg(long, conflicts_with = "json")]
        path: bool,
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
        /// Write the image fields of the first N records as PNG files into
        /// this folder (FIELD-RECORD.png, and FIELD-sheet.png, a contact
        /// sheet of them) instead of printing the records.
        #[arg(long, value_name = "DIR")]
        png: Option<PathBuf>,
        /// With --png: only this image field.
        #[arg(long, requires = "png")]
        field: Option<String>,
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
    },
    /// Apply a shard set's transforms to the rows of a file, for batch
    /// scoring: the records `build` would write for them.
    Transform {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// The rows (Parquet, CSV with a header, NDJSON or Arrow IPC), with
        /// the columns of the spec's query output that the fields read.
        input: PathBuf,
        /// Where to write: records (.bin), Parquet (.parquet) or a shard-set directory.
        #[arg(long, short = 'o')]
        output: PathBuf,
        /// Output format (default: from the output's extension).
        #[arg(long, value_enum)]
        format: Option<tessera::serve::OutputFormat>,
        /// Keep only the rows the spec's filter accepts (default: all rows).
        #[arg(long)]
        filter: bool,
        /// Compute only these fields (comma-separated; default: all), so the
        /// rows need only their inputs (not the label's, say). The output
        /// holds only these fields.
        #[arg(long, value_delimiter = ',')]
        fields: Vec<String>,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time the serving transform (without DataFusion) on the rows of a
    /// file: microseconds per call for one row and for batches.
    BenchTransform {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// The rows (Parquet, CSV with a header, NDJSON or Arrow IPC).
        input: PathBuf,
        /// Rows per call, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,16,256,4096")]
        rows: Vec<usize>,
        /// Seconds to spend on each batch size (at least 200 calls each).
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a shard set's transforms as one portable JSON document (frozen
    /// statistics, vocabularies, hash, layout), its JSON schema, and a
    /// conformance file of raw rows with the records they must give.
    ExportTransform {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// The directory to write transform.json, transform.schema.json and conformance.jsonl into.
        #[arg(long, short = 'o')]
        output: PathBuf,
        /// Conformance cases to generate from the artifact.
        #[arg(long, default_value_t = 64)]
        cases: usize,
        /// Also take cases from the first rows of this file (Parquet, CSV, NDJSON, Arrow).
        #[arg(long)]
        rows: Option<PathBuf>,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
    },
    /// Write a packed token set's windows as a Megatron-style indexed
    /// dataset: PREFIX.bin (token ids) and PREFIX.idx (where each window
    /// starts), one sequence per window, padding left out.
    ExportMegatron {
        /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
        target: String,
        /// The output prefix: PREFIX.bin and PREFIX.idx are written.
        #[arg(long, short = 'o')]
        output: PathBuf,
        /// Only this split's windows (default: all).
        #[arg(long)]
        split: Option<String>,
        /// Artifact cache directory.
        #[arg(long)]
        cache_dir: Option<PathBuf>,
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

/// `-o DIR|URL`: pushes the artifact at `path` to an object-store URL
/// (returning what the push did), or places it at a directory.
fn place(
    path: &std::path::Path,
    output: Option<&str>,
) -> Result<Option<tessera_reader::remote::PushReport>> {
    Ok(match output {
        Some(url) if tessera_reader::is_store_url(url) => Some(
            tessera::push::push(path, url, 4)
                .with_context(|| format!("pushing {} to {url}", path.display()))?,
        ),
        Some(dir) => {
            tessera::artifact::export(path, std::path::Path::new(dir))?;
            None
        }
        None => None,
    })
}

fn main() -> ExitCode {
    tessera::build::exit_cleanly_on_abort();
    tessera::build::fit_address_space();
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
    open_with(path, split, &OpenOptions::default())
}

fn open_with(path: &PathBuf, split: Option<&str>, opts: &OpenOptions) -> Result<Dataset> {
    let mut opts = opts.clone();
    if opts.storage_options.is_empty() {
        opts.storage_options = tessera::remote_input::cli_options();
    }
    let ds = Dataset::open_with(path, &opts)?;
    if let Some(why) = ds.offline() {
        eprintln!("warning: {why}");
    }
    Ok(match split {
        Some(s) => ds.split(s)?,
        None => ds,
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    tessera::remote_input::set_cli_options(cli.storage);
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
            max_output,
        } => {
            let opts = BuildOptions {
                max_output,
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
            let report = build(&spec, &opts).map_err(disk_full_hint)?;
            let pushed = place(&report.path, output.as_deref())?;
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
                        "cache hit in {:.3}s: {} rows ({})",
                        report.seconds.get("total").copied().unwrap_or(0.0),
                        report.rows_kept,
                        rows.join(" ")
                    );
                } else {
                    let s = &report.scan;
                    // Pruning is reported where there was something to
                    // prune: CSV and JSON sources have no row groups.
                    let groups = s.row_groups_pruned + s.row_groups_matched;
                    let pruned = if groups > 0 || s.files_pruned > 0 {
                        format!(
                            ", pruned {} file(s) and {} of {groups} row groups",
                            s.files_pruned, s.row_groups_pruned
                        )
                    } else {
                        String::new()
                    };
                    println!(
                        "built in {:.2}s: {} rows scanned, {} kept ({}){pruned}, {} written",
                        report.seconds.get("total").copied().unwrap_or(0.0),
                        s.rows_scanned,
                        report.rows_kept,
                        rows.join(" "),
                        tessera::cache::format_bytes(report.bytes)
                    );
                    let stages: Vec<String> = report
                        .seconds
                        .iter()
                        .filter(|(k, _)| k.as_str() != "total")
                        .map(|(k, v)| format!("{k} {v:.2}s"))
                        .collect();
                    println!("stages: {}", stages.join(", "));
                    if let Some(skipped) = report.skipped.as_ref().and_then(|v| v.as_object()) {
                        let parts: Vec<String> =
                            skipped.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        println!("bad images skipped: {}", parts.join(" "));
                    }
                    if report.bytes_fetched > 0 {
                        println!(
                            "fetched {} from object stores",
                            tessera::cache::format_bytes(report.bytes_fetched)
                        );
                    }
                }
                match (&report.plan_source, &report.plan_operator) {
                    (Some(source), _) => println!(
                        "plan: chunked over source {source:?} ({} chunk{})",
                        report.chunks,
                        if report.chunks == 1 { "" } else { "s" }
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
                if let Some(pack) = report.pack.as_ref().and_then(|p| p.as_object()) {
                    for (split, p) in pack {
                        let n = |k: &str| p[k].as_u64().unwrap_or(0);
                        println!(
                            "pack {split}: {} documents -> {} windows, {} tokens, {:.2}% padding, \
                             {} split, {} truncated ({} tokens), {} dropped, {} empty",
                            n("documents"),
                            n("windows"),
                            n("tokens"),
                            100.0 * p["padding_fraction"].as_f64().unwrap_or(0.0),
                            n("split_documents"),
                            n("truncated_documents"),
                            n("truncated_tokens"),
                            n("dropped_documents"),
                            n("empty_documents"),
                        );
                        if n("skipped_conversations") > 0 {
                            println!(
                                "pack {split}: {} conversations skipped (loss mask all zeros \
                                 or all ones; on_bad_mask: skip)",
                                n("skipped_conversations")
                            );
                        }
                    }
                    if let Some(rate) = report.mtok_per_s_per_core {
                        println!("pack: {rate:.2} Mtok/s per core");
                    }
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
        Command::Plan {
            spec,
            cache_dir,
            work_dir,
            memory_limit,
            threads,
            json,
        } => {
            let p = tessera::build::plan(
                &spec,
                cache_dir.as_deref(),
                work_dir.as_deref(),
                &BuildOptions {
                    memory_limit,
                    threads,
                    ..Default::default()
                },
            )?;
            if json {
                println!("{}", serde_json::to_string(&p)?);
            } else if let Some(path) = &p.cached {
                println!("cached: {} (nothing to run)", path.display());
            } else {
                if let Some(d) = &p.decision {
                    println!("plan: {}", d.describe());
                }
                println!("hash: {}", p.hash);
                println!("plan file: {}", p.work_dir.join("plan.json").display());
                for t in &p.tasks {
                    if t.after.is_empty() {
                        println!("task {}", t.id);
                    } else {
                        println!("task {} (after {})", t.id, t.after.join(", "));
                    }
                }
                println!(
                    "then: tessera commit {}",
                    p.work_dir.join("plan.json").display()
                );
            }
        }
        Command::Task { plan, ids } => {
            tessera::build::run_tasks(&plan, &ids)?;
        }
        Command::Commit {
            plan,
            allow_empty,
            json,
            output,
        } => {
            let r = tessera::build::commit(
                &plan,
                &BuildOptions {
                    allow_empty,
                    ..Default::default()
                },
            )?;
            place(&r.path, output.as_deref())?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("hash: {}", r.hash);
                println!("path: {}", r.path.display());
                if let Some(o) = &output {
                    println!("output: {o}");
                }
            }
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "tessera", &mut std::io::stdout());
        }
        Command::Inspect {
            target,
            json,
            path: only_path,
            cache_dir,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            if only_path {
                println!("{}", path.display());
                return Ok(ExitCode::SUCCESS);
            }
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
            png,
            field,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let ds = open(&path, split.as_deref())?;
            match png {
                Some(dir) => {
                    let files = tessera::contact::write_pngs(&ds, field.as_deref(), n, &dir)
                        .map_err(anyhow::Error::msg)?;
                    for f in files {
                        println!("{}", f.display());
                    }
                }
                None => print!("{}", tessera::inspect::head(&ds, n)),
            }
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
            }
        }
        Command::Transform {
            target,
            input,
            output,
            format,
            filter,
            fields,
            cache_dir,
            json,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let format = match format.or_else(|| tessera::serve::OutputFormat::from_path(&output)) {
                Some(f) => f,
                None => anyhow::bail!(
                    "{}: say --format records, parquet or set (or name the output .bin, .parquet \
                     or DIR/)",
                    output.display()
                ),
            };
            let r =
                tessera::serve::transform_file(&path, &input, &output, format, filter, &fields)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{} rows in, {} records of {} bytes out ({}) in {:.3}s -> {}",
                    r.rows_in,
                    r.rows_out,
                    r.stride,
                    serde_json::to_value(r.format)?.as_str().unwrap_or_default(),
                    r.seconds,
                    r.output.display()
                );
                if !r.datafusion.is_empty() {
                    println!("evaluated with DataFusion: {}", r.datafusion.join(", "));
                }
            }
        }
        Command::BenchTransform {
            target,
            input,
            rows,
            seconds,
            cache_dir,
            json,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let r = tessera::serve_bench::latency(&path, &input, &rows, seconds)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{:>6} {:>8} {:>10} {:>10} {:>12}",
                    "rows", "calls", "p50 us", "p99 us", "rows/s"
                );
                for l in &r {
                    println!(
                        "{:>6} {:>8} {:>10.1} {:>10.1} {:>12.0}",
                        l.rows, l.calls, l.p50_us, l.p99_us, l.rows_per_s
                    );
                }
                if let Some(l) = r.first().filter(|l| !l.datafusion.is_empty()) {
                    println!("evaluated with DataFusion: {}", l.datafusion.join(", "));
                }
            }
        }
        Command::ExportTransform {
            target,
            output,
            cases,
            rows,
            cache_dir,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let r = tessera::serve::export(&path, &output, cases, rows.as_deref())?;
            println!(
                "{} fields, {} conformance cases -> {}",
                r.fields,
                r.cases,
                output.display()
            );
        }
        Command::ExportMegatron {
            target,
            output,
            split,
            cache_dir,
            json,
        } => {
            let path = tessera::artifact::resolve(&target, cache_dir.as_deref())?;
            let mut ds = tessera_reader::Dataset::open(&path)?;
            if let Some(s) = &split {
                ds = ds.split(s)?;
            }
            let r = tessera::megatron::export(&ds, &output).map_err(anyhow::Error::msg)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{} windows, {} tokens ({}) -> {} and {}",
                    r.sequences,
                    r.tokens,
                    r.dtype,
                    r.bin.display(),
                    r.idx.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
