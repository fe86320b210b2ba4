//! A global query cut into stages at the exchange points of DataFusion's own
//! physical plan, so that its work spreads over tasks (and machines).
//!
//! An exchange is where rows of one partition move to another: a
//! `RepartitionExec` (hash, round-robin or range), a `CoalescePartitionsExec`
//! (many partitions into one) and a `SortPreservingMergeExec` over several
//! partitions (its sorted inputs merged). The subtree below an exchange is a
//! stage; each of its output partitions is a task, which runs that one
//! partition of the fragment (DataFusion's operators, nothing re-implemented)
//! and writes its rows cut the way the exchange cuts them into immutable
//! files in the work directory ([`write`]). Where the exchange stood, the
//! stage above reads those files ([`read::ShuffleRead`]). The plan above the
//! last exchanges is the top stage: the global task runs it, and it sorts
//! the output into the stored order as a single-process build does, so the
//! artifact does not depend on the number of partitions or tasks.
//!
//! Every process that runs a task plans the query again and cuts it the same
//! way; [`Stages::digest`] lets a task refuse a plan that came out
//! differently on its machine.

mod mapped;
pub mod read;
pub mod write;

use datafusion::common::JoinType;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::displayable;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// How a stage's output is cut for the stage that reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exchange {
    /// By hash of the exchange's keys into this many partitions.
    Hash(usize),
    /// Batch by batch in turn into this many partitions.
    RoundRobin(usize),
    /// By ranges of the exchange's keys into this many partitions.
    Range(usize),
    /// Every task's rows into one partition, read task after task.
    Gather,
    /// Each task's (sorted) rows are one partition, merged by the reader.
    Merge,
}

impl Exchange {
    /// Files each task of the stage writes.
    pub fn outputs(&self) -> usize {
        match self {
            Exchange::Hash(n) | Exchange::RoundRobin(n) | Exchange::Range(n) => *n,
            Exchange::Gather | Exchange::Merge => 1,
        }
    }
}

/// One stage, as the plan file records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageInfo {
    /// Its number: stages are numbered children first.
    pub id: usize,
    /// Its tasks: the partitions of the fragment's root.
    pub tasks: usize,
    /// The stages whose files it reads.
    pub reads: Vec<usize>,
    /// How its output is cut.
    pub exchange: Exchange,
    /// The fragment's root operator, for people reading the plan.
    pub root: String,
}

/// A stage's fragment and how its output is cut.
pub struct Stage {
    /// What the plan file records.
    pub info: StageInfo,
    /// The fragment, its exchanges below replaced by readers.
    pub plan: Arc<dyn ExecutionPlan>,
    /// The exchange's partitioning (`None`: gather or merge).
    pub partitioning: Option<Partitioning>,
}

/// A global query's plan cut into stages.
pub struct Stages {
    /// Stages below the top, children first.
    pub stages: Vec<Stage>,
    /// The top stage (what the global task runs).
    pub top: Arc<dyn ExecutionPlan>,
    /// A hash of the whole physical plan's text: equal on every machine
    /// that plans the same query the same way.
    pub digest: String,
}

impl Stages {
    /// What the plan file records of every stage below the top.
    pub fn infos(&self) -> Vec<StageInfo> {
        self.stages.iter().map(|s| s.info.clone()).collect()
    }

    /// The stages the top stage reads.
    pub fn top_reads(&self) -> Vec<usize> {
        let mut reads = Vec::new();
        read::collect_reads(&self.top, &mut reads);
        reads
    }
}

/// Where the shuffle files of a build live.
#[derive(Clone, Debug)]
pub struct ShuffleDir {
    /// The work directory's `shuffle/`.
    pub root: PathBuf,
}

impl ShuffleDir {
    /// The shuffle directory of the work directory `work_dir`.
    pub fn new(work_dir: &std::path::Path) -> ShuffleDir {
        ShuffleDir {
            root: work_dir.join("shuffle"),
        }
    }

    /// The index of task `task` of stage `stage`, relative to the work
    /// directory.
    pub fn index_rel(stage: usize, task: usize) -> String {
        format!("shuffle/s{stage:03}/t{task:05}.json")
    }

    /// The index file of task `task` of stage `stage`.
    pub fn index_path(&self, stage: usize, task: usize) -> PathBuf {
        self.root
            .join(format!("s{stage:03}"))
            .join(format!("t{task:05}.json"))
    }

    /// File `file` of stage `stage`, relative to the work directory.
    pub fn file_rel(stage: usize, file: &str) -> String {
        format!("shuffle/s{stage:03}/{file}")
    }

    /// The directory of stage `stage`'s files.
    pub fn stage_dir(&self, stage: usize) -> PathBuf {
        self.root.join(format!("s{stage:03}"))
    }
}

/// Cuts `plan` into stages at its exchanges. Fails (the caller then runs the
/// query as one task) on an exchange whose cut would change the answer: a
/// repartition that keeps its inputs' order, or a limit on a coalesce.
pub fn cut(plan: Arc<dyn ExecutionPlan>, dir: &ShuffleDir) -> Result<Stages, String> {
    let digest = blake3::hash(
        displayable(plan.as_ref())
            .indent(true)
            .to_string()
            .as_bytes(),
    )
    .to_hex()
    .to_string();
    let mut stages = Vec::new();
    let top = cut_node(plan, dir, &mut stages)?;
    Ok(Stages {
        stages,
        top,
        digest,
    })
}

fn push_stage(
    child: Arc<dyn ExecutionPlan>,
    exchange: Exchange,
    partitioning: Option<Partitioning>,
    stages: &mut Vec<Stage>,
) -> usize {
    let id = stages.len();
    let mut reads = Vec::new();
    read::collect_reads(&child, &mut reads);
    stages.push(Stage {
        info: StageInfo {
            id,
            tasks: child.output_partitioning().partition_count(),
            reads,
            exchange,
            root: child.name().to_string(),
        },
        plan: child,
        partitioning,
    });
    id
}

/// Why a join whose partitions share one record of matched rows stays in
/// one task.
const UNMATCHED: &str = "a join that collects one side whole and emits its unmatched rows, \
     which only a process that runs every partition of the other side can tell";

fn cut_node(
    node: Arc<dyn ExecutionPlan>,
    dir: &ShuffleDir,
    stages: &mut Vec<Stage>,
) -> Result<Arc<dyn ExecutionPlan>, String> {
    if node.name() == "RecursiveQueryExec" {
        return Err(
            "a recursive query, which feeds its own output back in one process".to_string(),
        );
    }
    if node.name() == "ScalarSubqueryExec" {
        // The subquery's value is handed to the expressions that use it
        // inside one process.
        return Err(
            "a scalar subquery, whose value the plan shares within one process".to_string(),
        );
    }
    if let Some(join_type) = collecting_join(&node) {
        let children = node.children();
        let (Some(left), Some(right)) = (children.first(), children.get(1)) else {
            return Err("a join without two inputs".to_string());
        };
        let spread = right.output_partitioning().partition_count() > 1;
        if spread && crate::plan::join_modes::emits_unmatched_collected_rows(join_type) {
            return Err(UNMATCHED.to_string());
        }
        if spread
            && left.output_partitioning().partition_count() == 1
            && left.downcast_ref::<CoalescePartitionsExec>().is_none()
        {
            // The collected side, in one partition, would run again in every
            // task of the other side (and its scans be counted once per
            // task): it becomes a stage of one task that each task reads.
            let props = left.properties().as_ref().clone();
            let left = cut_node(Arc::clone(left), dir, stages)?;
            let right = cut_node(Arc::clone(right), dir, stages)?;
            let id = push_stage(left, Exchange::Gather, None, stages);
            let reader = read::ShuffleRead::plan(id, 1, read::Mode::Gather, props, dir.clone());
            return Arc::clone(&node)
                .replace_children(vec![reader, right], keep())
                .map_err(|e| e.to_string());
        }
    }
    if let Some(rep) = node.downcast_ref::<RepartitionExec>() {
        if rep.preserve_order() {
            return Err("a repartition that keeps its inputs' order".to_string());
        }
        let partitioning = rep.partitioning().clone();
        let exchange = match &partitioning {
            Partitioning::Hash(_, n) => Exchange::Hash(*n),
            Partitioning::RoundRobinBatch(n) => Exchange::RoundRobin(*n),
            Partitioning::Range(r) => Exchange::Range(r.partition_count()),
            other => return Err(format!("a repartition by {other:?}")),
        };
        let child = cut_node(Arc::clone(rep.input()), dir, stages)?;
        let tasks = child.output_partitioning().partition_count();
        let id = push_stage(child, exchange, Some(partitioning), stages);
        return Ok(read::ShuffleRead::plan(
            id,
            tasks,
            read::Mode::Partitioned,
            node.properties().as_ref().clone(),
            dir.clone(),
        ));
    }
    if let Some(co) = node.downcast_ref::<CoalescePartitionsExec>() {
        let input = Arc::clone(co.input());
        if input.output_partitioning().partition_count() > 1 {
            if co.fetch().is_some() {
                return Err("a limit on a merge of partitions".to_string());
            }
            let child = cut_node(input, dir, stages)?;
            let tasks = child.output_partitioning().partition_count();
            let id = push_stage(child, Exchange::Gather, None, stages);
            return Ok(read::ShuffleRead::plan(
                id,
                tasks,
                read::Mode::Gather,
                node.properties().as_ref().clone(),
                dir.clone(),
            ));
        }
    }
    if let Some(spm) = node.downcast_ref::<SortPreservingMergeExec>() {
        let input = Arc::clone(spm.input());
        if input.output_partitioning().partition_count() > 1 {
            let props = input.properties().as_ref().clone();
            let child = cut_node(input, dir, stages)?;
            let tasks = child.output_partitioning().partition_count();
            let id = push_stage(child, Exchange::Merge, None, stages);
            let reader =
                read::ShuffleRead::plan(id, tasks, read::Mode::PerTask, props, dir.clone());
            return Arc::clone(&node)
                .replace_children(vec![reader], keep())
                .map_err(|e| e.to_string());
        }
    }
    let children = node.children();
    if children.is_empty() {
        return Ok(node);
    }
    let mut new = Vec::with_capacity(children.len());
    for c in children {
        new.push(cut_node(Arc::clone(c), dir, stages)?);
    }
    node.replace_children(new, keep())
        .map_err(|e| e.to_string())
}

/// The join type of `node` if it collects its whole left input for every
/// partition of its right input: a hash join in `CollectLeft` mode, a
/// nested-loop join or a cross join.
fn collecting_join(node: &Arc<dyn ExecutionPlan>) -> Option<JoinType> {
    if let Some(j) = node.downcast_ref::<HashJoinExec>() {
        return (*j.partition_mode() == PartitionMode::CollectLeft).then(|| *j.join_type());
    }
    if let Some(j) = node.downcast_ref::<NestedLoopJoinExec>() {
        return Some(*j.join_type());
    }
    node.downcast_ref::<CrossJoinExec>()
        .map(|_| JoinType::Inner)
}

/// A node given new children keeps its properties: a reader has the
/// properties of the exchange it stands for.
fn keep() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep)
}

#[cfg(test)]
mod tests;
