//! `tessera cache ls` and `tessera cache gc`: the artifact cache.

use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;
use tessera::cache::Cache;

#[derive(clap::Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    action: CacheAction,
    /// Artifact cache directory.
    #[arg(long, global = true)]
    cache_dir: Option<PathBuf>,
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

pub fn run(a: CacheArgs) -> Result<()> {
    let cache = Cache::resolve(a.cache_dir.as_deref())?;
    match a.action {
        CacheAction::Ls { json } => {
            let entries = cache.list()?;
            if json {
                // Not `CacheEntry`'s own serialization: that one adds the
                // entry's times, and this output keeps its earlier keys.
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
    Ok(())
}
