//! Reading a stage's shuffle files where its exchange stood.

use super::ShuffleDir;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// One file a task wrote: a partition of its output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleFile {
    /// Its name in the stage's directory: the task, the partition and the
    /// content hash (`t00003-p00001-<16 hex digits>.arrow`).
    pub file: String,
    /// Rows in it.
    pub rows: u64,
    /// The blake3 of its bytes.
    pub blake3: String,
}

/// What one task of a stage wrote: a file per partition of its output
/// (`None`: no rows for that partition).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskIndex {
    /// The stage.
    pub stage: usize,
    /// The task (the partition of the stage's fragment it ran).
    pub task: usize,
    /// Its files, one per output partition.
    pub files: Vec<Option<ShuffleFile>>,
    /// What its scans read (the commit adds every task's).
    pub scan: crate::plan::ScanMetrics,
}

/// How a reader's partitions map to the files of the stage it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Partition `j` is every task's file `j`, in task order.
    Partitioned,
    /// One partition: every task's only file, in task order.
    Gather,
    /// Partition `j` is task `j`'s only file (merged above).
    PerTask,
}

/// A leaf that hands out the rows a stage's tasks wrote, in a fixed order
/// (task by task, each file's batches in order), verifying every file's
/// blake3 before its rows are used.
#[derive(Debug)]
pub struct ShuffleRead {
    stage: usize,
    tasks: usize,
    mode: Mode,
    properties: Arc<PlanProperties>,
    dir: ShuffleDir,
}

impl ShuffleRead {
    /// A reader of stage `stage` (of `tasks` tasks) with the properties of
    /// the exchange it replaces.
    pub fn plan(
        stage: usize,
        tasks: usize,
        mode: Mode,
        properties: PlanProperties,
        dir: ShuffleDir,
    ) -> Arc<dyn ExecutionPlan> {
        Arc::new(ShuffleRead {
            stage,
            tasks,
            mode,
            properties: Arc::new(properties),
            dir,
        })
    }

    /// The (task, file slot) pairs partition `partition` reads, in order.
    pub fn sources(&self, partition: usize) -> Vec<(usize, usize)> {
        match self.mode {
            Mode::Partitioned => (0..self.tasks).map(|t| (t, partition)).collect(),
            Mode::Gather => (0..self.tasks).map(|t| (t, 0)).collect(),
            Mode::PerTask => vec![(partition, 0)],
        }
    }

    /// The stage it reads.
    pub fn stage(&self) -> usize {
        self.stage
    }

    /// Its partitions.
    pub fn partitions(&self) -> usize {
        self.properties.output_partitioning().partition_count()
    }
}

/// Reads the index task `task` of stage `stage` wrote.
pub fn read_index(dir: &ShuffleDir, stage: usize, task: usize) -> Result<TaskIndex, String> {
    let path = dir.index_path(stage, task);
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "{}: {e} (has task stage{stage}-{task:05} run?)",
            path.display()
        )
    })?;
    let index: TaskIndex =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if index.stage != stage || index.task != task {
        return Err(format!(
            "{}: written by task stage{}-{:05}, not stage{stage}-{task:05}",
            path.display(),
            index.stage,
            index.task
        ));
    }
    Ok(index)
}

/// The files partition `partition` of `reader` reads, relative to the work
/// directory's `shuffle/` (the indexes must be present).
pub fn files_of(
    reader: &ShuffleRead,
    partition: usize,
) -> Result<Vec<(PathBuf, ShuffleFile)>, String> {
    let mut out = Vec::new();
    for (task, slot) in reader.sources(partition) {
        let index = read_index(&reader.dir, reader.stage, task)?;
        let file = index.files.get(slot).ok_or_else(|| {
            format!(
                "{}: no partition {slot} (the task wrote {})",
                reader.dir.index_path(reader.stage, task).display(),
                index.files.len()
            )
        })?;
        if let Some(f) = file {
            out.push((reader.dir.stage_dir(reader.stage).join(&f.file), f.clone()));
        }
    }
    Ok(out)
}

/// Reads one shuffle file: checks its blake3 and decodes its batches (in
/// place, see [`mapped`](super::mapped)).
pub fn read_file(path: &std::path::Path, want: &ShuffleFile) -> Result<Vec<RecordBatch>, String> {
    super::mapped::read_batches(path, &want.blake3)
}

/// Appends the stages that the readers in `plan` read (each once, in plan
/// order).
pub fn collect_reads(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<usize>) {
    if let Some(r) = plan.downcast_ref::<ShuffleRead>() {
        if !out.contains(&r.stage) {
            out.push(r.stage);
        }
        return;
    }
    for c in plan.children() {
        collect_reads(c, out);
    }
}

/// Every reader in `plan`, with the partitions of it that running partition
/// `partition` of `plan` executes (operators above a reader pass the
/// partition number down when they have as many partitions as their input,
/// read partition 0 of a single-partition input, and anything else, such as
/// a merge, reads every partition).
pub fn readers_for<'a>(
    plan: &'a Arc<dyn ExecutionPlan>,
    partition: usize,
    out: &mut Vec<(&'a ShuffleRead, Vec<usize>)>,
) {
    readers_in(plan, &[partition], out);
}

fn readers_in<'a>(
    plan: &'a Arc<dyn ExecutionPlan>,
    parts: &[usize],
    out: &mut Vec<(&'a ShuffleRead, Vec<usize>)>,
) {
    if let Some(r) = plan.downcast_ref::<ShuffleRead>() {
        out.push((r, parts.to_vec()));
        return;
    }
    let mine = plan.properties().output_partitioning().partition_count();
    for c in plan.children() {
        let n = c.properties().output_partitioning().partition_count();
        let wanted: Vec<usize> = if n == 1 {
            vec![0]
        } else if n == mine && plan.downcast_ref::<SortPreservingMergeExec>().is_none() {
            parts.to_vec()
        } else {
            (0..n).collect()
        };
        readers_in(c, &wanted, out);
    }
}

impl DisplayAs for ShuffleRead {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "ShuffleRead: stage={}, tasks={}, mode={:?}",
            self.stage, self.tasks, self.mode
        )
    }
}

impl ExecutionPlan for ShuffleRead {
    fn name(&self) -> &'static str {
        "ShuffleRead"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "ShuffleRead takes no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let files = files_of(self, partition).map_err(DataFusionError::Execution)?;
        // One file's batches at a time: a partition's files are read as the
        // stream is pulled, never all at once.
        let batches = files.into_iter().flat_map(|(path, want)| {
            let batches: Vec<DfResult<RecordBatch>> = match read_file(&path, &want) {
                Ok(b) => b.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(DataFusionError::Execution(e))],
            };
            batches
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            futures::stream::iter(batches),
        )))
    }
}
