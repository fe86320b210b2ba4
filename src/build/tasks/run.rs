//! Running tasks of a plan (`tessera task`): each task's inputs fetched from
//! the work directory (or its object store), the task body of the
//! [`pipeline`](super::super::pipeline) run, its outputs written there.

use super::*;

/// The work-directory files task `task` reads.
pub(super) fn inputs_of(plan: &BuildPlan, task: &Task) -> Vec<(String, String)> {
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

/// Uploads what task `task` wrote: shards first, then the file that lists
/// them (so a reader of the store never finds an output whose shards are
/// missing).
pub(super) fn upload_outputs(
    ws: &WorkStore,
    plan: &BuildPlan,
    task: &Task,
) -> Result<(), BuildError> {
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
        TaskKind::Stage => {
            let Some(st) = task.stage else {
                return Ok(());
            };
            let dir = ShuffleDir::new(&plan.work_dir);
            let index = read_index(&dir, st.stage, st.task).map_err(BuildError::Other)?;
            for f in index.files.iter().flatten() {
                ws.upload(&ShuffleDir::file_rel(st.stage, &f.file))?;
            }
            ws.upload(&ShuffleDir::index_rel(st.stage, st.task))
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

/// Downloads the shuffle files a stage task (or the top stage, `stage`
/// `None`) reads: the index of every task it reads from, then the files.
fn fetch_shuffle(
    ws: &WorkStore,
    planner: &Planner,
    staged: &Staged,
    stage: Option<usize>,
    task: usize,
) -> Result<(), BuildError> {
    let dir = ShuffleDir::new(&ws.local);
    for (from, pairs) in planner.stage_needs(staged, stage, task)? {
        let mut indexed = std::collections::BTreeSet::new();
        for (t, slot) in pairs {
            if indexed.insert(t) {
                ws.fetch(
                    &ShuffleDir::index_rel(from, t),
                    &format!("task {}", dag::stage_task_id(from, t)),
                )?;
            }
            let index = read_index(&dir, from, t).map_err(BuildError::Other)?;
            if let Some(Some(f)) = index.files.get(slot) {
                ws.fetch(
                    &ShuffleDir::file_rel(from, &f.file),
                    &format!("task {}", dag::stage_task_id(from, t)),
                )?;
            }
        }
    }
    Ok(())
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
    let free = crate::resources::free_bytes(&plan.work_dir);
    let budget = OutputBudget::new(
        free / 2,
        format!(
            "half of the {} free where the work directory lives",
            crate::cache::format_bytes(free)
        ),
    );
    // Chunk tasks run on one thread; a global task's pool is made only when
    // one is asked for.
    let single = thread_pool(1)?;
    let wide = match tasks.iter().any(|t| t.kind == TaskKind::Global) {
        true => Some(thread_pool(plan.threads)?),
        false => None,
    };
    let files = FileOutputs { plan: &plan };
    let mut chunk_run = None;
    for task in tasks {
        if let Some(ws) = &remote {
            for (rel, writer) in inputs_of(&plan, &task) {
                ws.fetch(&rel, &format!("task {writer}"))?;
            }
        }
        let run = if let (TaskKind::Global, Some(wide)) = (task.kind, &wide) {
            let global = pipeline_for(&spec, &plan, &layout, wide, &budget)?;
            if let (Some(ws), Some(staged)) = (&remote, &plan.staged) {
                fetch_shuffle(ws, &global.planner(), staged, None, 0)?;
            }
            global.run_task(&task, &files, None)
        } else {
            if chunk_run.is_none() {
                chunk_run = Some(pipeline_for(&spec, &plan, &layout, &single, &budget)?);
            }
            match &chunk_run {
                Some(p) => {
                    if let (Some(ws), Some(staged), Some(st)) = (&remote, &plan.staged, task.stage)
                    {
                        fetch_shuffle(ws, &p.planner(), staged, Some(st.stage), st.task)?;
                    }
                    p.run_task(&task, &files, None)
                }
                None => Ok(()),
            }
        };
        run.map_err(|e| match e {
            BuildError::Plan(e) => super::super::errors::locate(&spec, e),
            other => other,
        })?;
        if let Some(ws) = &remote {
            upload_outputs(ws, &plan, &task)?;
        }
    }
    Ok(())
}

pub(super) fn thread_pool(threads: usize) -> Result<rayon::ThreadPool, BuildError> {
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
    plan: &'a BuildPlan,
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
        staged: plan.staged.as_ref(),
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
            &super::super::frozen_file::to_bytes(frozen),
        )
    }

    fn frozen(&self) -> Result<Arc<Frozen>, BuildError> {
        Ok(Arc::new(super::super::frozen_file::read(
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
