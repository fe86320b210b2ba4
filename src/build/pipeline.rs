//! The one build pipeline. A build is a DAG of tasks (statistics partial per
//! chunk, the freeze that merges them, shards per chunk, or a global query
//! and its stages), each naming the tasks whose outputs it reads;
//! [`dag`](super::dag::dag) makes it and the plan file records it. Three
//! drivers run the same task bodies
//! ([`Pipeline::run_task`]):
//! - a local `tessera build` runs the whole DAG in this process
//!   ([`Pipeline::run_dag`]), the outputs kept in memory ([`MemoryOutputs`]);
//! - `tessera task PLAN ID` runs one task, its outputs in the work directory
//!   (`tasks::FileOutputs`);
//! - `tessera.ray` submits `tessera task` by the DAG's dependencies.
//!
//! A global query's task runs the query into the work directory and then the
//! DAG of its output's chunks in this process, so its statistics, freeze and
//! shards are the same steps a chunked build runs.

use super::BuildError;
use super::dag::{Task, TaskKind, dag, waves};
use crate::accumulators::FrozenStats;
use crate::plan::{Chunk, EncodeOutput, OutputBudget, Planner, ScanMetrics, Staged, StatsPartial};
use crate::progress::{Progress, Stage};
use crate::spec::Spec;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;
use tessera_reader::RecordLayout;

/// The frozen statistics of every field (`None`: a field without any).
pub type Frozen = Vec<Option<Vec<FrozenStats>>>;

/// The directory a shard or global task writes its shards into, and where
/// they end up.
pub struct ShardDir {
    /// Where the task writes.
    pub dir: PathBuf,
    /// Where [`ShardDir::publish`] moves them (`None`: they stay).
    into: Option<PathBuf>,
}

impl ShardDir {
    /// Shards written in place (a local build).
    pub fn in_place(dir: &Path) -> ShardDir {
        ShardDir {
            dir: dir.to_path_buf(),
            into: None,
        }
    }

    /// The private directory one attempt of task `task` writes into, inside
    /// `into`: a killed attempt leaves only its own directory behind, and two
    /// attempts of the same task (a retry racing a straggler) never write one
    /// file.
    pub fn attempt(into: &Path, task: &str) -> Result<ShardDir, BuildError> {
        let dir = into.join(format!(
            ".attempt-{task}.{}",
            tessera_reader::durable::unique_suffix()
        ));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(ShardDir {
            dir,
            into: Some(into.to_path_buf()),
        })
    }

    /// Moves an attempt's shards into place (each rename replaces the same
    /// bytes that another attempt of the task may have put there).
    pub fn publish(self) -> Result<(), BuildError> {
        let Some(into) = self.into else {
            return Ok(());
        };
        for e in std::fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let e = e.map_err(io(&self.dir))?;
            let to = into.join(e.file_name());
            std::fs::rename(e.path(), &to).map_err(io(&to))?;
        }
        std::fs::remove_dir(&self.dir).map_err(io(&self.dir))
    }
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |e| BuildError::io(path, e)
}

/// What a global task hands to the commit.
#[derive(Serialize, Deserialize)]
pub struct GlobalOutput {
    /// The query's scan counters.
    pub scan: ScanMetrics,
    /// Chunks the query's output was cut into.
    pub chunks: usize,
    /// Each chunk's shards, in chunk order.
    pub outputs: Vec<(EncodeOutput, ScanMetrics)>,
}

/// Where tasks leave their outputs for the tasks after them and the commit:
/// memory ([`MemoryOutputs`]) or the work directory (`tasks::FileOutputs`).
pub trait Outputs: Sync {
    /// Keeps chunk `chunk`'s statistics partial.
    fn put_stats(&self, chunk: usize, partial: StatsPartial) -> Result<(), BuildError>;
    /// Chunk `chunk`'s statistics partial (read with `planner`'s spill).
    fn stats(&self, chunk: usize, planner: &Planner) -> Result<StatsPartial, BuildError>;
    /// Keeps the frozen statistics.
    fn put_frozen(&self, frozen: &Frozen) -> Result<(), BuildError>;
    /// The frozen statistics.
    fn frozen(&self) -> Result<Arc<Frozen>, BuildError>;
    /// Where task `task` writes its shards.
    fn shard_dir(&self, task: &Task) -> Result<ShardDir, BuildError>;
    /// Keeps chunk `chunk`'s shards.
    fn put_encoded(&self, chunk: usize, out: (EncodeOutput, ScanMetrics))
    -> Result<(), BuildError>;
    /// Keeps a global task's output (its frozen statistics are kept with
    /// [`Outputs::put_frozen`]).
    fn put_global(&self, global: GlobalOutput) -> Result<(), BuildError>;
}

/// Task outputs in memory: a local build, and the chunks of a global task.
pub struct MemoryOutputs {
    shards: PathBuf,
    stats: Mutex<BTreeMap<usize, StatsPartial>>,
    frozen: Mutex<Option<Arc<Frozen>>>,
    encoded: Mutex<BTreeMap<usize, (EncodeOutput, ScanMetrics)>>,
    global: Mutex<Option<GlobalOutput>>,
}

impl MemoryOutputs {
    /// Outputs whose shards are written in `shards`.
    pub fn new(shards: &Path) -> MemoryOutputs {
        MemoryOutputs {
            shards: shards.to_path_buf(),
            stats: Mutex::default(),
            frozen: Mutex::default(),
            encoded: Mutex::default(),
            global: Mutex::default(),
        }
    }

    /// The frozen statistics, or none for every field when no task froze
    /// any.
    pub fn take_frozen(&self, fields: usize) -> Frozen {
        let frozen = lock(&self.frozen).take();
        frozen.map_or_else(
            || vec![None; fields],
            |f| Arc::try_unwrap(f).unwrap_or_else(|f| (*f).clone()),
        )
    }

    /// What the commit assembles: the shards of every chunk in chunk order
    /// (a chunked build's, or the global task's), the scan counters of work
    /// done outside the shard tasks, and the number of chunks.
    pub fn take_encoded(&self) -> (Vec<(EncodeOutput, ScanMetrics)>, ScanMetrics, usize) {
        if let Some(g) = lock(&self.global).take() {
            return (g.outputs, g.scan, g.chunks);
        }
        let encoded = std::mem::take(&mut *lock(&self.encoded));
        let n = encoded.len();
        (encoded.into_values().collect(), ScanMetrics::default(), n)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Outputs for MemoryOutputs {
    fn put_stats(&self, chunk: usize, partial: StatsPartial) -> Result<(), BuildError> {
        lock(&self.stats).insert(chunk, partial);
        Ok(())
    }

    fn stats(&self, chunk: usize, _: &Planner) -> Result<StatsPartial, BuildError> {
        lock(&self.stats).remove(&chunk).ok_or_else(|| {
            BuildError::Other(format!(
                "no statistics partial of chunk {chunk} (task order)"
            ))
        })
    }

    fn put_frozen(&self, frozen: &Frozen) -> Result<(), BuildError> {
        *lock(&self.frozen) = Some(Arc::new(frozen.clone()));
        Ok(())
    }

    fn frozen(&self) -> Result<Arc<Frozen>, BuildError> {
        lock(&self.frozen)
            .clone()
            .ok_or_else(|| BuildError::Other("no frozen statistics (task order)".into()))
    }

    fn shard_dir(&self, _: &Task) -> Result<ShardDir, BuildError> {
        Ok(ShardDir::in_place(&self.shards))
    }

    fn put_encoded(
        &self,
        chunk: usize,
        out: (EncodeOutput, ScanMetrics),
    ) -> Result<(), BuildError> {
        lock(&self.encoded).insert(chunk, out);
        Ok(())
    }

    fn put_global(&self, global: GlobalOutput) -> Result<(), BuildError> {
        *lock(&self.global) = Some(global);
        Ok(())
    }
}

/// What every task of one build shares: the spec, the planned query, the
/// record layout, the threads, the output budget and the progress display.
pub struct Pipeline<'a> {
    pub spec: &'a Arc<Spec>,
    /// Written only by a global task's query (which cuts the chunks).
    pub planner: RwLock<Planner>,
    pub layout: RecordLayout,
    pub pool: &'a rayon::ThreadPool,
    /// Where a global query leaves its output.
    pub work_dir: PathBuf,
    /// What the build may write (`None`: no limit).
    pub budget: Option<&'a OutputBudget>,
    /// Stage bars and lines (`None`: a task run alone, no display).
    pub progress: Option<&'a Progress>,
    /// Wall seconds per stage: `query`, `stats`, `encode`.
    pub seconds: Mutex<BTreeMap<String, f64>>,
    /// How a global query is cut into stages (`None`: it runs whole in its
    /// global task).
    pub staged: Option<&'a Staged>,
}

impl Pipeline<'_> {
    /// The planner (shared by the tasks).
    pub fn planner(&self) -> std::sync::RwLockReadGuard<'_, Planner> {
        self.planner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `tasks` wave by wave ([`waves`]), the tasks of a wave in
    /// parallel on the pool; outputs go to `out`.
    pub fn run_dag(&self, tasks: &[Task], out: &dyn Outputs) -> Result<(), BuildError> {
        for wave in waves(tasks)? {
            let t = Instant::now();
            let (name, bar) = stage_of(&wave);
            let stage = match (self.progress, name, bar) {
                (Some(p), Some(name), true) => Some(p.stage(name, wave.len() as u64)),
                _ => None,
            };
            self.pool.install(|| {
                wave.par_iter()
                    .map(|task| self.run_task(task, out, stage.as_ref()))
                    .collect::<Result<Vec<()>, _>>()
            })?;
            if let Some(s) = stage {
                s.finish();
            }
            if let Some(name) = name {
                *lock(&self.seconds).entry(name.into()).or_default() += t.elapsed().as_secs_f64();
            }
        }
        Ok(())
    }

    /// Runs one task: its inputs from `out`, its outputs into `out`.
    pub fn run_task(
        &self,
        task: &Task,
        out: &dyn Outputs,
        stage: Option<&Stage>,
    ) -> Result<(), BuildError> {
        let done = || {
            if let Some(s) = stage {
                s.chunk_done();
            }
        };
        match task.kind {
            TaskKind::Stats => {
                let planner = self.planner();
                let chunk = chunk_of(&planner, task)?;
                // A chunk counts as done on the display whether it succeeded
                // or not (its error follows).
                let r = planner.stats_task(chunk);
                if let (Some(s), Ok((_, m))) = (stage, &r) {
                    s.advance(m.rows_scanned, 0);
                }
                done();
                out.put_stats(chunk.index, r?.0)
            }
            TaskKind::Freeze => {
                let planner = self.planner();
                let mut merged = planner.stats_partial();
                for c in planner.chunks() {
                    merged.merge(self.spec, out.stats(c.index, &planner)?)?;
                }
                out.put_frozen(&merged.freeze(self.spec, planner.max_vocab())?)
            }
            TaskKind::Shard => {
                let planner = self.planner();
                let chunk = chunk_of(&planner, task)?;
                let frozen = if planner.needs_stats() {
                    out.frozen()?
                } else {
                    Arc::new(vec![None; self.spec.fields.len()])
                };
                let dir = out.shard_dir(task)?;
                let encoded = planner.encode_task(
                    chunk,
                    &self.layout,
                    &frozen,
                    &dir.dir,
                    self.spec.shards.target_bytes,
                    self.budget,
                    &|rows, bytes| {
                        if let Some(s) = stage {
                            s.advance(rows, bytes);
                        }
                    },
                );
                done();
                let encoded = encoded?;
                dir.publish()?;
                out.put_encoded(chunk.index, encoded)
            }
            TaskKind::Global => self.run_global(task, out),
            TaskKind::Stage => {
                let (Some(staged), Some(st)) = (self.staged, task.stage) else {
                    return Err(BuildError::Other(format!(
                        "task {}: a stage task of a plan without stages",
                        task.id
                    )));
                };
                let t = Instant::now();
                self.planner().run_stage(staged, st.stage, st.task)?;
                *lock(&self.seconds).entry("query".into()).or_default() +=
                    t.elapsed().as_secs_f64();
                Ok(())
            }
        }
    }

    /// A global task: the query into the work directory, then the DAG of
    /// its output's chunks in this process.
    fn run_global(&self, task: &Task, out: &dyn Outputs) -> Result<(), BuildError> {
        let stride = self.layout.stride.max(1);
        let per_chunk = (self
            .spec
            .shards
            .target_bytes
            .saturating_sub(tessera_reader::HEADER_LEN as u64)
            / stride)
            .max(1);
        let t = Instant::now();
        let stage = self.progress.map(|p| p.stage("query", 1));
        let scan = self
            .planner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .materialize(
                &self.work_dir,
                per_chunk,
                self.budget.map(|b| (b, stride)),
                self.staged,
                &|rows| {
                    if let Some(s) = &stage {
                        s.advance(rows, 0);
                    }
                },
            )?;
        if let Some(s) = stage {
            s.chunk_done();
            s.finish();
        }
        *lock(&self.seconds).entry("query".into()).or_default() += t.elapsed().as_secs_f64();
        let (chunks, needs_stats) = {
            let planner = self.planner();
            (planner.chunks().to_vec(), planner.needs_stats())
        };
        let dir = out.shard_dir(task)?;
        let inner = MemoryOutputs::new(&dir.dir);
        self.run_dag(&dag(false, &chunks, needs_stats, None), &inner)?;
        dir.publish()?;
        out.put_frozen(&inner.take_frozen(self.spec.fields.len()))?;
        let (outputs, _, n) = inner.take_encoded();
        out.put_global(GlobalOutput {
            scan,
            chunks: n,
            outputs,
        })
    }
}

/// A wave's stage name (its time is counted under it) and whether it gets
/// a bar: the statistics and shard waves count chunks; a freeze is part of
/// the statistics; a global task times and shows its query itself (the
/// stages of its chunks count as the others do).
fn stage_of(wave: &[&Task]) -> (Option<&'static str>, bool) {
    match wave.first().map(|t| t.kind) {
        Some(TaskKind::Stats) => (Some("stats"), true),
        Some(TaskKind::Freeze) => (Some("stats"), false),
        Some(TaskKind::Shard) => (Some("encode"), true),
        Some(TaskKind::Global | TaskKind::Stage) | None => (None, false),
    }
}

fn chunk_of<'p>(planner: &'p Planner, task: &Task) -> Result<&'p Chunk, BuildError> {
    task.chunk
        .and_then(|i| planner.chunks().get(i))
        .ok_or_else(|| {
            BuildError::Other(format!(
                "task {}: the plan has no chunk {:?}",
                task.id, task.chunk
            ))
        })
}
