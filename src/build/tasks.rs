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

use super::job::Commit;
use super::pipeline::{
    self, Frozen, GlobalOutput, Outputs, Pipeline, ShardDir, Task, TaskKind, io,
};
use super::resources::batch_rows;
use super::work_store::{self, WorkStore};
use super::{BuildError, BuildOptions, BuildReport, Prepared, layout_of, prepare};
use crate::plan::{
    Chunk, Decision, EncodeOutput, OutputBudget, PlanOptions, Planner, ScanMetrics, StatsPartial,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

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
    pub query_columns: Option<serde_json::Value>,
    /// The spec's text, for nodes that cannot read `spec` (a work directory
    /// in an object store).
    #[serde(default)]
    pub spec_text: Option<String>,
}

/// Writes `bytes` to `path` atomically
/// ([`tessera_reader::durable::write_atomic`]), creating its directory.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    Ok(tessera_reader::durable::write_atomic(path, bytes)?)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, BuildError> {
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

    fn stats_path(&self, chunk: usize) -> PathBuf {
        self.work_dir.join("stats").join(format!("{chunk:05}.json"))
    }

    fn frozen_path(&self) -> PathBuf {
        self.work_dir.join("frozen.json")
    }

    fn output_path(&self, chunk: usize) -> PathBuf {
        self.work_dir
            .join("outputs")
            .join(format!("{chunk:05}.json"))
    }

    fn shards_dir(&self) -> PathBuf {
        self.work_dir.join("shards")
    }

    fn global_path(&self) -> PathBuf {
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
        .unwrap_or_else(super::resources::default_memory_limit);
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
    };
    if let Some(a) = cache.lookup(&hash)? {
        plan.cached = Some(a.path);
        return Ok(plan);
    }
    std::fs::create_dir_all(&work_dir).map_err(io(&work_dir))?;
    let spec = Arc::new(spec);
    let planner = planner_for(&spec, &plan, 1)?;
    plan.decision = Some(planner.decision().clone());
    plan.serial = planner.serial_reason().map(str::to_string);
    plan.chunks = planner.chunks().to_vec();
    plan.needs_stats = planner.needs_stats();
    plan.query_columns = planner
        .query_schema()
        .map(tessera_transform::serving::query_columns_json);
    plan.tasks = pipeline::dag(
        matches!(plan.decision, Some(Decision::Global { .. })),
        &plan.chunks,
        plan.needs_stats,
    );
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
fn open_plan(plan_path: &Path) -> Result<(BuildPlan, Option<WorkStore>), BuildError> {
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

/// The work-directory files task `task` reads.
fn inputs_of(plan: &BuildPlan, task: &Task) -> Vec<(String, String)> {
    match task.kind {
        TaskKind::Freeze => plan
            .chunks
            .iter()
            .map(|c| {
                (
                    format!("stats/{:05}.json", c.index),
                    format!("stats-{:05}", c.index),
                )
            })
            .collect(),
        TaskKind::Shard if plan.needs_stats => vec![("frozen.json".into(), "freeze".into())],
        _ => Vec::new(),
    }
}

/// The shard files an output file lists, relative to the work directory.
fn shards_listed(outputs: &[EncodeOutput]) -> Vec<String> {
    outputs
        .iter()
        .flat_map(|o| {
            let shards = o.shards.iter().map(|(_, s)| format!("shards/{}", s.file));
            let streams = o.streams.iter().map(|s| format!("shards/{}", s.file));
            shards.chain(streams)
        })
        .collect()
}

/// Uploads what task `task` wrote: shards first, then the file that lists
/// them (so a reader of the store never finds an output whose shards are
/// missing).
fn upload_outputs(ws: &WorkStore, plan: &BuildPlan, task: &Task) -> Result<(), BuildError> {
    let c = task.chunk.unwrap_or(usize::MAX);
    match task.kind {
        TaskKind::Stats => ws.upload(&format!("stats/{c:05}.json")),
        TaskKind::Freeze => ws.upload("frozen.json"),
        TaskKind::Shard => {
            let (out, _): (EncodeOutput, ScanMetrics) = read_json(&plan.output_path(c))?;
            for rel in shards_listed(std::slice::from_ref(&out)) {
                ws.upload(&rel)?;
            }
            ws.upload(&format!("outputs/{c:05}.json"))
        }
        TaskKind::Global => {
            let g: GlobalOutput = read_json(&plan.global_path())?;
            let outs: Vec<EncodeOutput> = g.outputs.into_iter().map(|(o, _)| o).collect();
            for rel in shards_listed(&outs) {
                ws.upload(&rel)?;
            }
            ws.upload("frozen.json")?;
            ws.upload("outputs/global.json")
        }
    }
}

/// A planner for a task of `plan`, checked to see the inputs and cut the
/// chunks exactly as the plan did.
fn planner_for(
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
fn load(plan: &BuildPlan) -> Result<(Arc<crate::spec::Spec>, Prepared), BuildError> {
    let p = prepare(&plan.spec, Some(&plan.cache_dir))?;
    if p.hash != plan.hash {
        return Err(BuildError::Other(format!(
            "the inputs or the spec changed since the plan was made (artifact {} now, {} in the \
             plan); plan again",
            &p.hash[..16],
            &plan.hash[..16]
        )));
    }
    Ok((Arc::new(p.spec.clone()), p))
}

/// Runs task `id` of the plan at `plan_path`.
pub fn run_task(plan_path: &Path, id: &str) -> Result<(), BuildError> {
    run_tasks(plan_path, &[id.to_string()])
}

/// Runs the tasks `ids` of the plan at `plan_path`, one after the other, in
/// one process: the spec is loaded, the inputs checked and the query planned
/// once for all of them (what a cluster executor batches to spread that cost).
pub fn run_tasks(plan_path: &Path, ids: &[String]) -> Result<(), BuildError> {
    let (mut plan, remote) = open_plan(plan_path)?;
    if let Some(ws) = &remote
        && !plan.cache_dir.is_dir()
    {
        // A node without the planning machine's directories: tasks need no
        // artifact cache (only the commit publishes), so a private one does.
        plan.cache_dir = ws.local.join("cache");
    }
    let mut tasks = Vec::with_capacity(ids.len());
    for id in ids {
        let task = plan.tasks.iter().find(|t| &t.id == id).cloned();
        tasks.push(task.ok_or_else(|| {
            BuildError::Other(format!(
                "{}: no task {id:?} (tasks: {})",
                plan_path.display(),
                plan.tasks
                    .iter()
                    .map(|t| t.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?);
    }
    let (spec, _) = load(&plan)?;
    let layout = layout_of(&spec)?;
    let free = super::resources::free_bytes(&plan.work_dir);
    let budget = OutputBudget::new(
        free / 2,
        format!(
            "half of the {} free where the work directory lives",
            crate::cache::format_bytes(free)
        ),
    );
    let single = thread_pool(1)?;
    let wide = thread_pool(plan.threads)?;
    let files = FileOutputs { plan: &plan };
    let mut chunk_run = None;
    for task in tasks {
        if let Some(ws) = &remote {
            for (rel, writer) in inputs_of(&plan, &task) {
                ws.fetch(&rel, &format!("task {writer}"))?;
            }
        }
        let run = if task.kind == TaskKind::Global {
            let global = pipeline_for(&spec, &plan, &layout, &wide, &budget)?;
            global.run_task(&task, &files, None)
        } else {
            if chunk_run.is_none() {
                chunk_run = Some(pipeline_for(&spec, &plan, &layout, &single, &budget)?);
            }
            match &chunk_run {
                Some(p) => p.run_task(&task, &files, None),
                None => Ok(()),
            }
        };
        run.map_err(|e| match e {
            BuildError::Plan(e) => super::errors::locate(&spec, e),
            other => other,
        })?;
        if let Some(ws) = &remote {
            upload_outputs(ws, &plan, &task)?;
        }
    }
    Ok(())
}

fn thread_pool(threads: usize) -> Result<rayon::ThreadPool, BuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| BuildError::Other(format!("starting {threads} threads: {e}")))
}

/// The pipeline of the plan's tasks on `pool` (a global task's planner uses
/// all its threads, chunk tasks one), its planner checked to cut the plan's
/// chunks.
fn pipeline_for<'a>(
    spec: &'a Arc<crate::spec::Spec>,
    plan: &BuildPlan,
    layout: &tessera_reader::RecordLayout,
    pool: &'a rayon::ThreadPool,
    budget: &'a OutputBudget,
) -> Result<Pipeline<'a>, BuildError> {
    let planner = planner_for(spec, plan, pool.current_num_threads())?;
    if planner.chunks() != plan.chunks.as_slice() {
        return Err(BuildError::Other(
            "the chunks differ from the plan's; plan again".into(),
        ));
    }
    Ok(Pipeline {
        spec,
        planner: RwLock::new(planner),
        layout: layout.clone(),
        pool,
        work_dir: plan.work_dir.clone(),
        budget: Some(budget),
        progress: None,
        seconds: Mutex::default(),
    })
}

/// Task outputs in the work directory: `stats/NNNNN.json`, `frozen.json`,
/// `shards/`, `outputs/NNNNN.json` and `outputs/global.json`, each written
/// atomically under a name fixed by the task (a retried task replaces the
/// same bytes).
struct FileOutputs<'a> {
    plan: &'a BuildPlan,
}

impl Outputs for FileOutputs<'_> {
    fn put_stats(&self, chunk: usize, partial: StatsPartial) -> Result<(), BuildError> {
        write_atomic(&self.plan.stats_path(chunk), &partial.to_json())
    }

    fn stats(&self, chunk: usize, planner: &Planner) -> Result<StatsPartial, BuildError> {
        let path = self.plan.stats_path(chunk);
        let bytes = std::fs::read(&path).map_err(|e| {
            BuildError::Other(format!(
                "{}: {e} (run task stats-{chunk:05} first)",
                path.display()
            ))
        })?;
        StatsPartial::from_json(&bytes, planner.spill())
            .map_err(|e| BuildError::Other(format!("{}: {e}", path.display())))
    }

    fn put_frozen(&self, frozen: &Frozen) -> Result<(), BuildError> {
        write_atomic(
            &self.plan.frozen_path(),
            &super::frozen_file::to_bytes(frozen),
        )
    }

    fn frozen(&self) -> Result<Arc<Frozen>, BuildError> {
        Ok(Arc::new(super::frozen_file::read(
            &self.plan.frozen_path(),
        )?))
    }

    fn shard_dir(&self, task: &Task) -> Result<ShardDir, BuildError> {
        ShardDir::attempt(&self.plan.shards_dir(), &task.id)
    }

    fn put_encoded(
        &self,
        chunk: usize,
        out: (EncodeOutput, ScanMetrics),
    ) -> Result<(), BuildError> {
        write_atomic(
            &self.plan.output_path(chunk),
            &serde_json::to_vec(&out).unwrap_or_default(),
        )
    }

    fn put_global(&self, global: GlobalOutput) -> Result<(), BuildError> {
        write_atomic(
            &self.plan.global_path(),
            &serde_json::to_vec(&global).unwrap_or_default(),
        )
    }
}

fn frozen_of(plan: &BuildPlan, fields: usize) -> Result<Frozen, BuildError> {
    if plan.needs_stats {
        super::frozen_file::read(&plan.frozen_path())
    } else {
        Ok(vec![None; fields])
    }
}

/// Downloads every output a commit reads; returns their names.
fn fetch_all_outputs(ws: &WorkStore, plan: &BuildPlan) -> Result<Vec<String>, BuildError> {
    let mut names = Vec::new();
    let mut outputs = Vec::new();
    match plan.decision {
        Some(Decision::Global { .. }) => {
            let path = ws.fetch("outputs/global.json", "task global")?;
            let g: GlobalOutput = read_json(&path)?;
            outputs.extend(g.outputs.into_iter().map(|(o, _)| o));
            names.push("outputs/global.json".to_string());
            ws.fetch("frozen.json", "task global")?;
            names.push("frozen.json".into());
        }
        _ => {
            for c in &plan.chunks {
                let rel = format!("outputs/{:05}.json", c.index);
                let path = ws.fetch(&rel, &format!("task shard-{:05}", c.index))?;
                outputs.push(read_json::<(EncodeOutput, ScanMetrics)>(&path)?.0);
                names.push(rel);
                names.push(format!("stats/{:05}.json", c.index));
            }
            if plan.needs_stats {
                ws.fetch("frozen.json", "task freeze")?;
                names.push("frozen.json".into());
            }
        }
    }
    for rel in shards_listed(&outputs) {
        ws.fetch(&rel, "a shard task")?;
        names.push(rel);
    }
    Ok(names)
}

/// Assembles the outputs of every task of the plan at `plan_path` in chunk
/// order and publishes the artifact in the cache; removes the work
/// directory.
pub fn commit(plan_path: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let t0 = Instant::now();
    let (plan, remote) = open_plan(plan_path)?;
    let mut fetched = Vec::new();
    if let Some(ws) = &remote {
        fetched = fetch_all_outputs(ws, &plan)?;
    }
    let (spec, prepared) = load(&plan)?;
    let cache = prepared.cache;
    let layout = layout_of(&spec)?;
    let decision = plan
        .decision
        .clone()
        .ok_or_else(|| BuildError::Other("the plan has no query plan (a cache hit?)".into()))?;
    let (outputs, scan, chunks) = match decision {
        Decision::Global { .. } => {
            let g: GlobalOutput = read_json(&plan.global_path())?;
            (g.outputs, g.scan, g.chunks)
        }
        Decision::Chunked { .. } => {
            let mut outputs = Vec::with_capacity(plan.chunks.len());
            for c in &plan.chunks {
                outputs.push(read_json(&plan.output_path(c.index))?);
            }
            (outputs, ScanMetrics::default(), plan.chunks.len())
        }
    };
    let frozen = frozen_of(&plan, spec.fields.len()).or_else(|e| match decision {
        Decision::Global { .. } => super::frozen_file::read(&plan.frozen_path()).map_err(|_| e),
        Decision::Chunked { .. } => Err(e),
    })?;
    let mut built = None;
    let obtained = cache.get_or_build(
        &plan.hash,
        || {},
        |staging| {
            let (manifest, b) = Commit {
                spec: &spec,
                layout: &layout,
                hash: &plan.hash,
                files: &prepared.files,
                canonical: prepared.canonical.clone(),
                decision: decision.clone(),
                serial: plan.serial.clone(),
                chunks,
                frozen: &frozen,
                allow_empty: opts.allow_empty,
                scan,
                query_columns: plan.query_columns.clone(),
            }
            .assemble(outputs, &plan.shards_dir(), staging.path())?;
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(plan.threads)
                .build()
                .map_err(|e| {
                    BuildError::Other(format!("starting {} threads: {e}", plan.threads))
                })?;
            let mut ignored = BTreeMap::new();
            let manifest = crate::compress::compress_staged(
                staging.path(),
                manifest,
                spec.shards.zstd_level,
                &pool,
                &mut ignored,
            )?;
            built = Some(b);
            Ok::<_, BuildError>(manifest)
        },
    )?;
    let _ = std::fs::remove_dir_all(&plan.work_dir);
    if let Some(ws) = &remote {
        fetched.push("plan.json".into());
        ws.delete(&fetched);
    }
    let mut seconds = BTreeMap::new();
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    Ok(match built {
        Some(b) => super::built_report(plan.hash.clone(), obtained.artifact, b, seconds),
        // Another commit of the same hash published it first.
        None => super::hit_report(plan.hash.clone(), obtained.artifact, t0, seconds),
    })
}
