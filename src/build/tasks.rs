//! A build as data, for running its tasks elsewhere (a cluster).
//!
//! `tessera plan` fingerprints the inputs, plans the query and writes the
//! plan: the artifact hash, the chunks, and the tasks with their order
//! (`plan.json` in a work directory every worker can read and write).
//! `tessera task PLAN ID` runs one task and writes its output under a name
//! fixed by the task id, replacing any earlier attempt's (a retried or
//! duplicated task gives the same bytes). `tessera commit PLAN` assembles the
//! outputs in chunk order and publishes the artifact in the cache. A local
//! `tessera build` runs the same task bodies in one process, with the outputs
//! in memory (see `pipeline`, which also defines the task DAG).

use super::dag::{self, Task, TaskKind};
use super::job::Commit;
use super::pipeline::{Frozen, GlobalOutput, Outputs, Pipeline, ShardDir, io};
use super::work_store::{self, WorkStore};
use super::{BuildError, BuildOptions, BuildReport, Prepared, layout_of, prepare};
use crate::plan::stages::ShuffleDir;
use crate::plan::stages::read::read_index;
use crate::plan::{
    Chunk, Decision, EncodeOutput, OutputBudget, PlanOptions, Planner, ScanMetrics, Staged,
    StatsPartial,
};
use crate::resources::batch_rows;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

mod commit;
mod run;

pub use commit::commit;
pub use run::{run_task, run_tasks};

/// The plan file's `format`.
pub const PLAN_FORMAT: &str = "tessera-build-plan";

/// A planned build.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BuildPlan {
    /// Always [`PLAN_FORMAT`].
    pub format: String,
    /// The plan's version: 1.
    pub version: u32,
    /// The artifact hash.
    pub hash: String,
    /// The spec file (absolute).
    pub spec: PathBuf,
    /// The artifact cache (absolute).
    pub cache_dir: PathBuf,
    /// Where tasks write their outputs (absolute).
    pub work_dir: PathBuf,
    /// The published artifact, when the cache already holds it (no tasks).
    pub cached: Option<PathBuf>,
    /// How the query runs.
    pub decision: Option<Decision>,
    /// Why a global query runs in one partition, if it does.
    pub serial: Option<String>,
    /// The chunks of a chunked query.
    pub chunks: Vec<Chunk>,
    /// Whether a statistics pass runs.
    pub needs_stats: bool,
    /// The memory limit every task uses.
    pub memory_limit: u64,
    /// Threads a task may use (a global task; chunk tasks use one).
    pub threads: usize,
    /// The tasks, in an order that runs them correctly one by one.
    pub tasks: Vec<Task>,
    /// The query's output columns and types, recorded in the manifest for
    /// the serving transform.
    #[serde(default)]
    pub query_columns: Option<Vec<tessera_reader::QueryColumn>>,
    /// The spec's text, for nodes that cannot read `spec` (a work directory
    /// in an object store).
    #[serde(default)]
    pub spec_text: Option<String>,
    /// How a global query is cut into stages (`None`: one task runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<Staged>,
    /// Why a global query is not cut into stages, if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstaged: Option<String>,
}

/// The partitions of a global query's stages: the spec's
/// `chunks.partitions`, else enough that each task's share of the input,
/// held four times over (decoded rows, hash tables, sort runs), fits in its
/// memory limit, and at least one per thread.
pub fn partitions_for(
    spec_partitions: Option<usize>,
    input: u64,
    memory: u64,
    threads: usize,
) -> usize {
    if let Some(p) = spec_partitions {
        return p;
    }
    let by_memory = input.saturating_mul(4).div_ceil(memory.max(1));
    (by_memory as usize).clamp(threads.max(1), 1024)
}

/// Writes `bytes` to `path` atomically
/// ([`tessera_reader::durable::write_atomic`]), creating its directory.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    Ok(tessera_reader::durable::write_atomic(path, bytes)?)
}

pub(super) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, BuildError> {
    let bytes = std::fs::read(path).map_err(|e| {
        BuildError::Other(format!(
            "{}: {e} (has the task that writes it run?)",
            path.display()
        ))
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| BuildError::Other(format!("{}: {e}", path.display())))
}

impl BuildPlan {
    /// Reads a plan file.
    pub fn read(path: &Path) -> Result<BuildPlan, BuildError> {
        let plan: BuildPlan = read_json(path)?;
        if plan.format != PLAN_FORMAT || plan.version != 1 {
            return Err(BuildError::Other(format!(
                "{}: not a version 1 {PLAN_FORMAT} file",
                path.display()
            )));
        }
        Ok(plan)
    }

    pub(super) fn stats_path(&self, chunk: usize) -> PathBuf {
        self.work_dir.join("stats").join(format!("{chunk:05}.json"))
    }

    pub(super) fn frozen_path(&self) -> PathBuf {
        self.work_dir.join("frozen.json")
    }

    pub(super) fn output_path(&self, chunk: usize) -> PathBuf {
        self.work_dir
            .join("outputs")
            .join(format!("{chunk:05}.json"))
    }

    pub(super) fn shards_dir(&self) -> PathBuf {
        self.work_dir.join("shards")
    }

    pub(super) fn global_path(&self) -> PathBuf {
        self.work_dir.join("outputs").join("global.json")
    }
}

/// Plans `spec_path`: writes `plan.json` into `work_dir` (default: a
/// directory named after the hash under the cache's `tmp/`) and returns it.
pub fn plan(
    spec_path: &Path,
    cache_dir: Option<&Path>,
    work_dir: Option<&Path>,
    opts: &BuildOptions,
) -> Result<BuildPlan, BuildError> {
    let work_dir_arg = work_dir;
    let Prepared {
        spec, cache, hash, ..
    } = prepare(spec_path, cache_dir)?;
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let remote = match work_dir {
        Some(d) if work_store::is_url(d) => Some(WorkStore::open(&d.to_string_lossy())?),
        _ => None,
    };
    let work_dir = match (work_dir, &remote) {
        (_, Some(ws)) => ws.local.clone(),
        (Some(d), None) => abs(d),
        (None, None) => cache.root().join("tmp").join(format!("{hash}.plan")),
    };
    let memory_limit = opts
        .memory_limit
        .unwrap_or_else(crate::resources::default_memory_limit);
    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let mut plan = BuildPlan {
        format: PLAN_FORMAT.into(),
        version: 1,
        hash: hash.clone(),
        spec: spec.path.clone(),
        cache_dir: abs(cache.root()),
        work_dir: work_dir.clone(),
        cached: None,
        decision: None,
        serial: None,
        chunks: Vec::new(),
        needs_stats: false,
        memory_limit,
        threads,
        tasks: Vec::new(),
        query_columns: None,
        spec_text: std::fs::read_to_string(&spec.path).ok(),
        staged: None,
        unstaged: None,
    };
    if let Some(a) = cache.lookup(&hash)? {
        plan.cached = Some(a.path);
        return Ok(plan);
    }
    std::fs::create_dir_all(&work_dir).map_err(io(&work_dir))?;
    let spec = Arc::new(spec.with_tokenizers()?);
    let planner = planner_for(&spec, &plan, 1)?;
    plan.decision = Some(planner.decision().clone());
    plan.serial = planner.serial_reason().map(str::to_string);
    plan.chunks = planner.chunks().to_vec();
    plan.needs_stats = planner.needs_stats();
    plan.query_columns = planner
        .query_schema()
        .map(tessera_transform::serving::query_columns_record);
    let global = matches!(plan.decision, Some(Decision::Global { .. }));
    if global {
        let partitions = partitions_for(
            spec.chunks.partitions,
            planner.input_bytes(),
            memory_limit,
            threads,
        );
        match planner
            .stage_plan(partitions)
            .map_err(|e| super::errors::locate(&spec, e))?
        {
            Ok(staged) => plan.staged = Some(staged),
            Err(why) => plan.unstaged = Some(why),
        }
    }
    plan.tasks = dag::dag(global, &plan.chunks, plan.needs_stats, plan.staged.as_ref());
    if let (Some(ws), Some(d)) = (&remote, work_dir_arg) {
        plan.work_dir = PathBuf::from(d.to_string_lossy().trim_end_matches('/'));
        let text = serde_json::to_vec_pretty(&plan).unwrap_or_default();
        write_atomic(&ws.local.join("plan.json"), &text)?;
        ws.upload("plan.json")?;
        return Ok(plan);
    }
    let text = serde_json::to_vec_pretty(&plan).unwrap_or_default();
    write_atomic(&work_dir.join("plan.json"), &text)?;
    Ok(plan)
}

/// Reads the plan at `plan_path`, a file or an object-store URL (then its
/// work directory is mirrored into a private local directory, which the
/// returned plan uses, and a node without the spec file uses the plan's
/// copy of it).
pub(super) fn open_plan(plan_path: &Path) -> Result<(BuildPlan, Option<WorkStore>), BuildError> {
    if !work_store::is_url(plan_path) {
        return Ok((BuildPlan::read(plan_path)?, None));
    }
    let text = plan_path.to_string_lossy();
    let dir = text.strip_suffix("/plan.json").ok_or_else(|| {
        BuildError::Other(format!(
            "{text}: a plan in an object store is the work directory's plan.json"
        ))
    })?;
    let ws = WorkStore::open(dir)?;
    let local = ws.fetch("plan.json", "tessera plan")?;
    let mut plan = BuildPlan::read(&local)?;
    plan.work_dir = ws.local.clone();
    if !plan.spec.is_file()
        && let Some(text) = &plan.spec_text
    {
        let copy = ws.local.join("spec.yaml");
        write_atomic(&copy, text.as_bytes())?;
        plan.spec = copy;
    }
    Ok((plan, Some(ws)))
}

/// The shard files an output file lists, relative to the work directory.
pub(super) fn shards_listed(outputs: &[EncodeOutput]) -> Vec<String> {
    outputs
        .iter()
        .flat_map(|o| {
            let shards = o.shards.iter().map(|(_, s)| format!("shards/{}", s.file));
            let streams = o.streams.iter().map(|s| format!("shards/{}", s.file));
            shards.chain(streams)
        })
        .collect()
}

/// A planner for a task of `plan`, checked to see the inputs and cut the
/// chunks exactly as the plan did.
pub(super) fn planner_for(
    spec: &Arc<crate::spec::Spec>,
    plan: &BuildPlan,
    threads: usize,
) -> Result<Planner, BuildError> {
    let layout = layout_of(spec)?;
    let planner = Planner::new(
        Arc::clone(spec),
        PlanOptions {
            threads,
            batch_rows: batch_rows(layout.stride),
            memory_limit: plan.memory_limit,
            work_dir: Some(plan.work_dir.clone()),
        },
    )
    .map_err(|e| super::errors::locate(spec, e))?;
    Ok(planner)
}

/// Loads the spec of `plan` and checks its inputs still hash to the plan's.
pub(super) fn load(plan: &BuildPlan) -> Result<(Arc<crate::spec::Spec>, Prepared), BuildError> {
    let p = prepare(&plan.spec, Some(&plan.cache_dir))?;
    if p.hash != plan.hash {
        return Err(BuildError::Other(format!(
            "the inputs or the spec changed since the plan was made (artifact {} now, {} in the \
             plan); plan again",
            &p.hash[..16],
            &plan.hash[..16]
        )));
    }
    Ok((Arc::new(p.spec.with_tokenizers()?), p))
}

#[cfg(test)]
mod tests {
    use super::partitions_for;

    #[test]
    fn partitions_come_from_the_spec_else_from_input_and_memory() {
        const GIB: u64 = 1 << 30;
        // The spec's number wins, whatever the input.
        assert_eq!(partitions_for(Some(7), 100 * GIB, GIB, 2), 7);
        // Four times a task's share fits in its memory: 10 GiB in 4 GiB
        // tasks needs 10 partitions.
        assert_eq!(partitions_for(None, 10 * GIB, 4 * GIB, 2), 10);
        // Small inputs: one partition per thread.
        assert_eq!(partitions_for(None, 1 << 20, 4 * GIB, 3), 3);
        // More memory per task, fewer partitions; never above the cap.
        assert!(partitions_for(None, 10 * GIB, 8 * GIB, 1) < 10);
        assert_eq!(partitions_for(None, u64::MAX, 1, 1), 1024);
    }
}
