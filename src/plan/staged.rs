//! A global query run as stages ([`stages`](super::stages)): cutting it when
//! a build is planned, running a stage's task, and the top stage that the
//! global task runs.

use super::stages::read::{self, ShuffleRead, TaskIndex};
use super::stages::{self, ShuffleDir, StageInfo, Stages};
use super::*;
use serde::{Deserialize, Serialize};

/// How a global query runs as stages, as the plan file records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// The partitions the query is planned in (every task plans it so).
    pub partitions: usize,
    /// The blake3 of the physical plan's text.
    pub digest: String,
    /// The stages below the top, children first.
    pub stages: Vec<StageInfo>,
    /// The stages the top stage (the global task) reads.
    pub top_reads: Vec<usize>,
}

/// The files a task reads from one stage: the stage, and for each task of
/// it whose index is read, the file slots wanted.
pub type StageNeeds = Vec<(usize, Vec<(usize, usize)>)>;

impl Planner {
    /// The bytes of every input file.
    pub fn input_bytes(&self) -> u64 {
        input_bytes(&self.tables)
    }

    fn shuffle_dir(&self) -> ShuffleDir {
        ShuffleDir::new(
            self.opts
                .work_dir
                .as_deref()
                .unwrap_or_else(|| Path::new(".")),
        )
    }

    /// Plans the query in `partitions` partitions and cuts it.
    async fn cut(
        &self,
        partitions: usize,
    ) -> Result<(datafusion::prelude::SessionContext, Stages), PlanError> {
        let (ctx, plan, _) = self.global_plan(partitions, true).await?;
        let cut = stages::cut(plan, &self.shuffle_dir()).map_err(not_cut)?;
        Ok((ctx, cut))
    }

    /// The global query cut into stages in `partitions` partitions:
    /// `Err(why)` when it is not (one partition, a query that runs in one,
    /// no exchange to cut at, or one that cannot be cut without changing the
    /// answer): then a single task runs it.
    pub fn stage_plan(&self, partitions: usize) -> Result<Result<Staged, String>, PlanError> {
        if let Some(why) = &self.serial_reason {
            return Ok(Err(format!("it runs in one partition: {why}")));
        }
        if partitions < 2 {
            return Ok(Err("one partition".into()));
        }
        let rt = exec::runtime(1)?;
        let (_, plan, _) = rt.block_on(self.global_plan(partitions, true))?;
        let cut = match stages::cut(plan, &self.shuffle_dir()) {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        if cut.stages.is_empty() {
            return Ok(Err("its plan has no exchange".into()));
        }
        Ok(Ok(Staged {
            partitions,
            digest: cut.digest.clone(),
            top_reads: cut.top_reads(),
            stages: cut.infos(),
        }))
    }

    /// Refuses a cut that differs from the plan file's.
    fn check_cut(cut: &Stages, staged: &Staged) -> Result<(), PlanError> {
        if cut.digest != staged.digest || cut.infos() != staged.stages {
            return Err(PlanError::Query {
                context: "cutting the query into stages".into(),
                message: format!(
                    "the query plans differently here than where the build was planned \
                     (plan {} here, {} in the plan file): a different tessera version, or \
                     different inputs; plan again",
                    &cut.digest[..16],
                    &staged.digest[..staged.digest.len().min(16)]
                ),
            });
        }
        Ok(())
    }

    /// The top stage of `plan` (the global task's part), checked against
    /// the plan file's cut.
    pub(super) fn staged_top(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        staged: &Staged,
    ) -> Result<Arc<dyn ExecutionPlan>, PlanError> {
        let cut = stages::cut(plan, &self.shuffle_dir()).map_err(not_cut)?;
        Self::check_cut(&cut, staged)?;
        Ok(cut.top)
    }

    /// The shuffle files task `task` of stage `stage` reads (`None`: the top
    /// stage), by the stage that wrote them.
    pub fn stage_needs(
        &self,
        staged: &Staged,
        stage: Option<usize>,
        task: usize,
    ) -> Result<StageNeeds, PlanError> {
        let rt = exec::runtime(1)?;
        let (_, cut) = rt.block_on(self.cut(staged.partitions))?;
        Self::check_cut(&cut, staged)?;
        let root = match stage {
            Some(s) => &stage_of(&cut, s)?.plan,
            None => &cut.top,
        };
        let mut readers: Vec<(&ShuffleRead, Vec<usize>)> = Vec::new();
        read::readers_for(root, task, &mut readers);
        let mut out: StageNeeds = Vec::new();
        for (r, parts) in readers {
            let mut pairs: Vec<(usize, usize)> = parts.iter().flat_map(|p| r.sources(*p)).collect();
            pairs.sort_unstable();
            pairs.dedup();
            out.push((r.stage(), pairs));
        }
        Ok(out)
    }

    /// Runs task `task` of stage `stage`: its partition of the stage's
    /// fragment, its rows written to the work directory's `shuffle/`.
    pub fn run_stage(
        &self,
        staged: &Staged,
        stage: usize,
        task: usize,
    ) -> Result<TaskIndex, PlanError> {
        let rt = exec::runtime(1)?;
        let limit = self.opts.memory_limit;
        rt.block_on(async {
            let (ctx, cut) = self.cut(staged.partitions).await?;
            Self::check_cut(&cut, staged)?;
            let s = stage_of(&cut, stage)?;
            if task >= s.info.tasks {
                return Err(PlanError::Query {
                    context: format!("stage {stage}"),
                    message: format!("no task {task} (the stage has {})", s.info.tasks),
                });
            }
            stages::write::run_task(s, task, ctx.task_ctx(), &self.shuffle_dir(), limit).await
        })
    }
}

fn not_cut(why: String) -> PlanError {
    PlanError::Query {
        context: "cutting the query into stages".into(),
        message: why,
    }
}

/// The input bytes of every source (what the partitions are chosen from).
pub(super) fn input_bytes(tables: &BTreeMap<String, Arc<SourceTable>>) -> u64 {
    tables
        .values()
        .flat_map(|t| t.files.iter().map(|f| f.size))
        .sum()
}

fn stage_of(cut: &Stages, stage: usize) -> Result<&stages::Stage, PlanError> {
    cut.stages.get(stage).ok_or_else(|| PlanError::Query {
        context: "running a stage".into(),
        message: format!(
            "the query has {} stages below the top, no stage {stage}",
            cut.stages.len()
        ),
    })
}
