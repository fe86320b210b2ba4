//! `tessera build`: a spec into a shard set (or the cached one), with a
//! summary of what the build did.

use super::args::{parse_size_arg, parse_threads_arg};
use super::target::place;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;

#[derive(clap::Args)]
pub struct BuildArgs {
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
}

pub fn run(a: BuildArgs) -> Result<()> {
    let opts = BuildOptions {
        max_output: a.max_output,
        cache_dir: a.cache_dir,
        threads: a.threads,
        memory_limit: a.memory_limit,
        allow_empty: a.allow_empty,
        progress: if a.quiet {
            ProgressMode::Quiet
        } else {
            ProgressMode::Auto
        },
    };
    let report = build(&a.spec, &opts).map_err(disk_full_hint)?;
    let pushed = place(&report.path, a.output.as_deref())?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    print_work(&report);
    print_plan(&report);
    print_pack(&report);
    println!("hash: {}", report.hash);
    println!("path: {}", report.path.display());
    if let Some(dir) = &a.output {
        println!("output: {dir}");
    }
    if let Some(p) = &pushed {
        println!("{}", tessera::push::describe(p));
    }
    Ok(())
}

/// A build that ran out of disk space says so wherever in the pipeline the
/// write failed, followed by what to do.
fn disk_full_hint(e: tessera::BuildError) -> anyhow::Error {
    let msg = e.to_string();
    // By kind where the error kept the system's error; by the system's words
    // where a layer below (DataFusion's writers) only kept its message.
    let full = e.is_disk_full() || msg.contains("No space left on device");
    if full && !msg.contains("nothing was published") {
        anyhow::anyhow!(
            "{msg}; the disk is full and nothing was published (free space, or point \
             --cache-dir or TESSERA_CACHE_DIR at a larger disk)"
        )
    } else {
        e.into()
    }
}

/// The rows per split, the time, and for a real build what was scanned,
/// pruned, written, skipped and fetched, and the stages' times.
fn print_work(report: &BuildReport) {
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
        return;
    }
    let s = &report.scan;
    // Pruning is reported where there was something to prune: CSV and JSON
    // sources have no row groups.
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
    // The report's copy of the manifest's `build.skipped`.
    if let Some(skipped) = report
        .skipped
        .as_ref()
        .and_then(|v| serde_json::from_value::<BTreeMap<String, u64>>(v.clone()).ok())
    {
        let parts: Vec<String> = skipped.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("bad images skipped: {}", parts.join(" "));
    }
    if report.bytes_fetched > 0 {
        println!(
            "fetched {} from object stores",
            tessera::cache::format_bytes(report.bytes_fetched)
        );
    }
}

/// How the query ran: chunked over a source, or globally and why.
fn print_plan(report: &BuildReport) {
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
}

/// What packing did to each split's documents, and how fast it ran.
fn print_pack(report: &BuildReport) {
    // The report's copy of the manifest's `build.pack`.
    let Some(pack) = report.pack.as_ref().and_then(|p| {
        serde_json::from_value::<BTreeMap<String, tessera_reader::PackRecord>>(p.clone()).ok()
    }) else {
        return;
    };
    for (split, p) in pack {
        println!(
            "pack {split}: {} documents -> {} windows, {} tokens, {:.2}% padding, \
             {} split, {} truncated ({} tokens), {} dropped, {} empty",
            p.documents,
            p.windows,
            p.tokens,
            100.0 * p.padding_fraction,
            p.split_documents,
            p.truncated_documents,
            p.truncated_tokens,
            p.dropped_documents,
            p.empty_documents,
        );
        if p.skipped_conversations > 0 {
            println!(
                "pack {split}: {} conversations skipped (loss mask all zeros \
                 or all ones; on_bad_mask: skip)",
                p.skipped_conversations
            );
        }
    }
    if let Some(rate) = report.mtok_per_s_per_core {
        println!("pack: {rate:.2} Mtok/s per core");
    }
}
