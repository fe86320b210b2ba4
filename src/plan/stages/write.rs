//! Running one task of a stage: its partition of the fragment, the rows cut
//! by the stage's exchange into immutable files named by partition and
//! content, and last the task's index that lists them.

use super::read::{ShuffleFile, TaskIndex};
use super::{ShuffleDir, Stage};
use crate::plan::PlanError;
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::Time;
use datafusion::physical_plan::repartition::BatchPartitioner;
use futures::StreamExt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_reader::durable::HashingWriter;

struct Part {
    tmp: PathBuf,
    writer: FileWriter<HashingWriter<BufWriter<File>>>,
    rows: u64,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> PlanError + '_ {
    move |e| PlanError::Query {
        context: path.display().to_string(),
        message: e.to_string(),
    }
}

fn arrow_err(path: &Path) -> impl Fn(datafusion::arrow::error::ArrowError) -> PlanError + '_ {
    move |e| PlanError::Query {
        context: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Runs task `task` of `stage` and writes its files and index into `dir`;
/// returns the index. A task run twice writes the same files under the same
/// names (each rename replaces equal bytes), and its index last, so a reader
/// never finds an index whose files are missing.
pub async fn run_task(
    stage: &Stage,
    task: usize,
    ctx: Arc<TaskContext>,
    dir: &ShuffleDir,
    limit: u64,
) -> Result<TaskIndex, PlanError> {
    let sdir = dir.stage_dir(stage.info.id);
    std::fs::create_dir_all(&sdir).map_err(io_err(&sdir))?;
    let outputs = stage.info.exchange.outputs();
    let mut partitioner = match &stage.partitioning {
        Some(p) => Some(
            BatchPartitioner::try_new(p.clone(), Time::new(), task, stage.info.tasks)
                .map_err(|e| PlanError::from_datafusion("cutting rows for a stage", e, None))?,
        ),
        None => None,
    };
    let mut parts: Vec<Option<Part>> = (0..outputs).map(|_| None).collect();
    let schema = stage.plan.schema();
    let mut stream = stage
        .plan
        .execute(task, ctx)
        .map_err(|e| PlanError::from_datafusion("running a stage", e, Some(limit)))?;
    let mut put = |j: usize, batch: RecordBatch| -> Result<(), PlanError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let slot = parts.get_mut(j).ok_or_else(|| PlanError::Query {
            context: "cutting rows for a stage".into(),
            message: format!("partition {j} of {outputs}"),
        })?;
        if slot.is_none() {
            let tmp = sdir.join(format!(
                ".t{task:05}-p{j:05}.{}.tmp",
                tessera_reader::durable::unique_suffix()
            ));
            let file = File::create(&tmp).map_err(io_err(&tmp))?;
            let sink = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
            let writer = FileWriter::try_new(sink, &schema).map_err(arrow_err(&tmp))?;
            *slot = Some(Part {
                tmp,
                writer,
                rows: 0,
            });
        }
        if let Some(p) = slot {
            p.writer.write(&batch).map_err(arrow_err(&p.tmp))?;
            p.rows += batch.num_rows() as u64;
        }
        Ok(())
    };
    while let Some(batch) = stream.next().await {
        let batch =
            batch.map_err(|e| PlanError::from_datafusion("running a stage", e, Some(limit)))?;
        match partitioner.as_mut() {
            Some(p) => {
                let cut = |e| PlanError::from_datafusion("cutting rows for a stage", e, None);
                for piece in p.partition_iter(batch).map_err(cut)? {
                    let (j, b) = piece.map_err(cut)?;
                    put(j, b)?;
                }
            }
            None => put(0, batch)?,
        }
    }
    let mut files = Vec::with_capacity(outputs);
    for (j, part) in parts.into_iter().enumerate() {
        files.push(match part {
            Some(p) => Some(finish(p, task, j, &sdir)?),
            None => None,
        });
    }
    let index = TaskIndex {
        stage: stage.info.id,
        task,
        files,
        scan: crate::plan::exec::collect_metrics(stage.plan.as_ref()),
    };
    // Files written, index not yet: a task killed here leaves files no
    // index names (the cluster test pauses a worker's task here).
    crate::fault::point_with(|| format!("shuffle.s{:03}.written", stage.info.id));
    let path = dir.index_path(stage.info.id, task);
    let bytes = serde_json::to_vec(&index).map_err(|e| PlanError::Query {
        context: path.display().to_string(),
        message: e.to_string(),
    })?;
    tessera_reader::durable::write_atomic(&path, &bytes).map_err(|e| PlanError::Query {
        context: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(index)
}

/// Closes a partition's file and gives it its name: the task, the
/// partition and the first 16 hex digits of its blake3.
fn finish(p: Part, task: usize, j: usize, sdir: &Path) -> Result<ShuffleFile, PlanError> {
    let Part {
        tmp,
        mut writer,
        rows,
    } = p;
    writer.finish().map_err(arrow_err(&tmp))?;
    let mut sink = writer.into_inner().map_err(arrow_err(&tmp))?;
    sink.flush().map_err(io_err(&tmp))?;
    let (inner, hash) = sink.finish();
    let file = inner.into_inner().map_err(|e| PlanError::Query {
        context: tmp.display().to_string(),
        message: e.to_string(),
    })?;
    file.sync_all().map_err(io_err(&tmp))?;
    let name = format!("t{task:05}-p{j:05}-{}.arrow", &hash[..16]);
    let to = sdir.join(&name);
    std::fs::rename(&tmp, &to).map_err(io_err(&to))?;
    Ok(ShuffleFile {
        file: name,
        rows,
        blake3: hash,
    })
}
