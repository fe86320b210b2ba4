//! `tessera plan`, `tessera task` and `tessera commit`: a build cut into
//! tasks that other processes (or machines) run, then published.

use super::args::parse_size_arg;
use super::target::place;
use anyhow::Result;
use std::path::PathBuf;
use tessera::build::BuildOptions;

#[derive(clap::Args)]
pub struct PlanArgs {
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
}

pub fn plan(a: PlanArgs) -> Result<()> {
    let p = tessera::build::plan(
        &a.spec,
        a.cache_dir.as_deref(),
        a.work_dir.as_deref(),
        &BuildOptions {
            memory_limit: a.memory_limit,
            threads: a.threads,
            ..Default::default()
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&p)?);
    } else if let Some(path) = &p.cached {
        println!("cached: {} (nothing to run)", path.display());
    } else {
        if let Some(d) = &p.decision {
            println!("plan: {}", d.describe());
        }
        println!("hash: {}", p.hash);
        println!("plan file: {}", p.work_dir.join("plan.json").display());
        if let Some(st) = &p.staged {
            println!(
                "stages: {} below the top, {} partitions",
                st.stages.len(),
                st.partitions
            );
        } else if let Some(why) = &p.unstaged {
            println!("one query task: {why}");
        }
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
    Ok(())
}

#[derive(clap::Args)]
pub struct TaskArgs {
    /// The plan file (plan.json).
    plan: PathBuf,
    /// Task ids, e.g. stats-00003, freeze, shard-00003, stage0-00002, global.
    #[arg(required = true)]
    ids: Vec<String>,
    /// Print one JSON object: the tasks, the seconds they took and the
    /// process's peak resident memory (`peak_rss_bytes`, Linux only).
    #[arg(long)]
    json: bool,
}

pub fn task(a: TaskArgs) -> Result<()> {
    let t = std::time::Instant::now();
    tessera::build::run_tasks(&a.plan, &a.ids)?;
    if a.json {
        let report = serde_json::json!({
            "tasks": a.ids,
            "seconds": t.elapsed().as_secs_f64(),
            "peak_rss_bytes": peak_rss_bytes(),
        });
        println!("{report}");
    }
    Ok(())
}

/// The process's peak resident set (`VmHWM` in /proc/self/status), where
/// the system tells it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[derive(clap::Args)]
pub struct CommitArgs {
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
}

pub fn commit(a: CommitArgs) -> Result<()> {
    let r = tessera::build::commit(
        &a.plan,
        &BuildOptions {
            allow_empty: a.allow_empty,
            ..Default::default()
        },
    )?;
    place(&r.path, a.output.as_deref())?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("hash: {}", r.hash);
        println!("path: {}", r.path.display());
        if let Some(o) = &a.output {
            println!("output: {o}");
        }
    }
    Ok(())
}
