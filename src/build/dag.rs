//! The task DAG of a build: what each task does and which tasks' outputs it
//! reads ([`dag`]), and the order that runs it ([`waves`]). The plan file
//! records it; the drivers in [`pipeline`](super::pipeline) run it.

use super::BuildError;
use crate::plan::{Chunk, Staged};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What a task does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// The statistics partial of one chunk.
    Stats,
    /// Merge the partials in chunk order and freeze them.
    Freeze,
    /// Encode one chunk into shards.
    Shard,
    /// A global query: run it (its top stage, when it is cut into
    /// stages), then the statistics, freeze and shards of its output's
    /// chunks.
    Global,
    /// One partition of a stage of a global query, its rows written to the
    /// work directory's `shuffle/` cut by the stage's exchange.
    Stage,
}

/// Which partition of which stage a stage task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageTask {
    /// The stage (numbered children first).
    pub stage: usize,
    /// The partition of the stage's fragment.
    pub task: usize,
}

/// One task of a build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// `stats-00003`, `freeze`, `shard-00003`, `global`.
    pub id: String,
    /// What it does.
    pub kind: TaskKind,
    /// The chunk it reads, for stats and shard tasks.
    pub chunk: Option<usize>,
    /// Tasks whose outputs it reads.
    pub after: Vec<String>,
    /// The stage and partition, for stage tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<StageTask>,
}

/// The id of task `task` of stage `stage`.
pub fn stage_task_id(stage: usize, task: usize) -> String {
    format!("stage{stage}-{task:05}")
}

/// Every task id of stage `stage` of `staged`.
fn stage_ids(staged: &Staged, stage: usize) -> Vec<String> {
    let n = staged.stages.get(stage).map_or(0, |s| s.tasks);
    (0..n).map(|k| stage_task_id(stage, k)).collect()
}

/// The task DAG of a build: for a global query, a task per partition of
/// every stage it is cut into (`staged`; each after every task of the
/// stages it reads), and the `global` task after the stages the top stage
/// reads; else a statistics task per chunk and `freeze` after them all
/// (when a field needs statistics), and a shard task per chunk (after
/// `freeze`).
pub fn dag(
    global: bool,
    chunks: &[Chunk],
    needs_stats: bool,
    staged: Option<&Staged>,
) -> Vec<Task> {
    if global {
        let mut tasks = Vec::new();
        if let Some(st) = staged {
            for s in &st.stages {
                let after: Vec<String> = s.reads.iter().flat_map(|r| stage_ids(st, *r)).collect();
                for k in 0..s.tasks {
                    tasks.push(Task {
                        id: stage_task_id(s.id, k),
                        kind: TaskKind::Stage,
                        chunk: None,
                        after: after.clone(),
                        stage: Some(StageTask {
                            stage: s.id,
                            task: k,
                        }),
                    });
                }
            }
        }
        let after = staged.map_or_else(Vec::new, |st| {
            st.top_reads
                .iter()
                .flat_map(|r| stage_ids(st, *r))
                .collect()
        });
        tasks.push(Task {
            id: "global".into(),
            kind: TaskKind::Global,
            chunk: None,
            after,
            stage: None,
        });
        return tasks;
    }
    let mut tasks = Vec::new();
    if needs_stats {
        for c in chunks {
            tasks.push(Task {
                id: format!("stats-{:05}", c.index),
                kind: TaskKind::Stats,
                chunk: Some(c.index),
                after: Vec::new(),
                stage: None,
            });
        }
        let after = tasks.iter().map(|t| t.id.clone()).collect();
        tasks.push(Task {
            id: "freeze".into(),
            kind: TaskKind::Freeze,
            chunk: None,
            after,
            stage: None,
        });
    }
    for c in chunks {
        tasks.push(Task {
            id: format!("shard-{:05}", c.index),
            kind: TaskKind::Shard,
            chunk: Some(c.index),
            after: if needs_stats {
                vec!["freeze".into()]
            } else {
                Vec::new()
            },
            stage: None,
        });
    }
    tasks
}

/// The DAG cut into waves: each task comes in the wave after the last of
/// the tasks it waits for, so the tasks of one wave are independent of each
/// other. Fails on a task that waits for an unknown task or for itself
/// through others.
pub fn waves(tasks: &[Task]) -> Result<Vec<Vec<&Task>>, BuildError> {
    let by_id: HashMap<&str, &Task> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut level: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Vec<&Task>> = Vec::new();
    for task in tasks {
        let l = level_of(task, &by_id, &mut level, &mut Vec::new())?;
        if out.len() <= l {
            out.resize_with(l + 1, Vec::new);
        }
        out[l].push(task);
    }
    Ok(out)
}

/// The wave of `task`: 0 without dependencies, else one past its latest
/// dependency's. `path` holds the tasks being resolved (a cycle check).
fn level_of<'a>(
    task: &'a Task,
    by_id: &HashMap<&str, &'a Task>,
    level: &mut HashMap<&'a str, usize>,
    path: &mut Vec<&'a str>,
) -> Result<usize, BuildError> {
    if let Some(l) = level.get(task.id.as_str()) {
        return Ok(*l);
    }
    if path.contains(&task.id.as_str()) {
        return Err(BuildError::Other(format!(
            "the build's tasks wait for each other in a cycle: {} -> {}",
            path.join(" -> "),
            task.id
        )));
    }
    path.push(&task.id);
    let mut l = 0;
    for dep in &task.after {
        let d = by_id.get(dep.as_str()).ok_or_else(|| {
            BuildError::Other(format!(
                "task {} waits for {dep:?}, which is not a task of the build",
                task.id
            ))
        })?;
        l = l.max(level_of(d, by_id, level, path)? + 1);
    }
    path.pop();
    level.insert(&task.id, l);
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, after: &[&str]) -> Task {
        Task {
            id: id.into(),
            kind: TaskKind::Shard,
            chunk: None,
            after: after.iter().map(|s| s.to_string()).collect(),
            stage: None,
        }
    }

    fn ids(w: &[Vec<&Task>]) -> Vec<Vec<String>> {
        w.iter()
            .map(|v| v.iter().map(|t| t.id.clone()).collect())
            .collect()
    }

    #[test]
    fn waves_follow_the_dependencies_not_the_kinds() {
        // Listed out of order, and a task of a kind no phase knows about
        // would still be placed by what it waits for.
        let tasks = vec![
            task("c", &["a", "b"]),
            task("a", &[]),
            task("d", &["c"]),
            task("b", &["a"]),
            task("e", &[]),
        ];
        let w = waves(&tasks).unwrap();
        assert_eq!(
            ids(&w),
            vec![vec!["a", "e"], vec!["b"], vec!["c"], vec!["d"]]
        );
    }

    #[test]
    fn unknown_and_cyclic_dependencies_are_errors() {
        let e = waves(&[task("a", &["x"])]).unwrap_err().to_string();
        assert!(e.contains("task a waits for \"x\""), "{e}");
        let e = waves(&[task("a", &["b"]), task("b", &["a"])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cycle: a -> b -> a"), "{e}");
    }

    #[test]
    fn the_dag_of_a_staged_global_query() {
        use crate::plan::stages::{Exchange, StageInfo};
        let stage = |id: usize, tasks: usize, reads: Vec<usize>, exchange: Exchange| StageInfo {
            id,
            tasks,
            reads,
            exchange,
            root: "x".into(),
        };
        let staged = Staged {
            partitions: 3,
            digest: String::new(),
            stages: vec![
                stage(0, 2, vec![], Exchange::Hash(3)),
                stage(1, 3, vec![0], Exchange::Merge),
            ],
            top_reads: vec![1],
        };
        let tasks = dag(true, &[], false, Some(&staged));
        let w = waves(&tasks).unwrap();
        assert_eq!(
            ids(&w),
            vec![
                vec!["stage0-00000", "stage0-00001"],
                vec!["stage1-00000", "stage1-00001", "stage1-00002"],
                vec!["global"],
            ]
        );
        // Every reduce task reads every map task; the global task every
        // task of the stage its top reads, and no other.
        assert!(
            tasks[2..5]
                .iter()
                .all(|t| t.after == ["stage0-00000", "stage0-00001"])
        );
        assert_eq!(
            tasks[5].after,
            ["stage1-00000", "stage1-00001", "stage1-00002"]
        );
        assert_eq!(tasks[3].stage, Some(StageTask { stage: 1, task: 1 }));
    }

    #[test]
    fn the_dag_of_a_chunked_build_with_statistics() {
        let chunks: Vec<Chunk> = (0..3)
            .map(|index| Chunk {
                index,
                source: "s".into(),
                parts: Vec::new(),
                rows: None,
                bytes: 0,
            })
            .collect();
        let with_stats = dag(false, &chunks, true, None);
        let w = waves(&with_stats).unwrap();
        assert_eq!(
            ids(&w),
            vec![
                vec!["stats-00000", "stats-00001", "stats-00002"],
                vec!["freeze"],
                vec!["shard-00000", "shard-00001", "shard-00002"],
            ]
        );
        let without = dag(false, &chunks, false, None);
        let w = waves(&without).unwrap();
        assert_eq!(
            ids(&w),
            vec![vec!["shard-00000", "shard-00001", "shard-00002"]]
        );
        let g = dag(true, &chunks, true, None);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].kind, TaskKind::Global);
    }
}
