//! Reading rows to transform from a file, and writing transformed fields as
//! Parquet: the file side of `tessera transform`.

use super::{PlanError, exec, query_err};
use crate::spec::CsvOptions;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::file_format::options::{
    ArrowReadOptions, JsonReadOptions, ParquetReadOptions,
};
use datafusion::parquet::arrow::ArrowWriter;
use std::path::Path;

/// The rows of `path` (Parquet, CSV, newline-delimited JSON, Arrow IPC; by
/// extension), in file order, in batches of at most `batch_rows`. A CSV file
/// is read with the options `csv` (delimiter, header, null values) as the
/// build reads a CSV source.
pub fn read_rows(
    path: &Path,
    batch_rows: usize,
    csv: &CsvOptions,
) -> Result<Vec<RecordBatch>, PlanError> {
    let what = path.display().to_string();
    let name = path.to_str().ok_or_else(|| PlanError::Query {
        context: what.clone(),
        message: "the path is not UTF-8".into(),
    })?;
    let format = crate::spec::SourceFormat::from_path(name).ok_or_else(|| PlanError::Query {
        context: what.clone(),
        message: "unknown file type: name it .parquet, .csv, .jsonl (.json, .ndjson) or \
                  .arrow (.ipc, .feather)"
            .into(),
    })?;
    use crate::spec::SourceFormat as F;
    if format == F::Csv {
        // arrow-csv with the source's options: DataFusion's CSV reader would
        // apply the null values only while inferring the types.
        return super::csv::read_file(path, csv, batch_rows);
    }
    let rt = exec::runtime(1)?;
    let ctx = datafusion::execution::context::SessionContext::new_with_config(
        datafusion::execution::context::SessionConfig::new()
            .with_target_partitions(1)
            .with_batch_size(batch_rows.max(1)),
    );
    let ext = |e: &str| format!(".{e}");
    let suffix = name
        .rsplit_once('.')
        .map(|(_, e)| ext(e))
        .unwrap_or_default();
    rt.block_on(async {
        let df = match format {
            F::Parquet => {
                ctx.read_parquet(name, ParquetReadOptions::default().file_extension(&suffix))
                    .await
            }
            F::Csv => return super::csv::read_file(path, csv, batch_rows),
            F::Json => {
                ctx.read_json(name, JsonReadOptions::default().file_extension(&suffix))
                    .await
            }
            F::Arrow => {
                let opts = ArrowReadOptions {
                    file_extension: &suffix,
                    ..Default::default()
                };
                ctx.read_arrow(name, opts).await
            }
        }
        .map_err(query_err(what.clone()))?;
        df.collect().await.map_err(query_err(what.clone()))
    })
}

/// All rows of `path` as one batch (`None` for a file without rows).
pub fn read_all(path: &Path, csv: &CsvOptions) -> Result<Option<RecordBatch>, PlanError> {
    let batches = read_rows(path, 8192, csv)?;
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    datafusion::arrow::compute::concat_batches(&first.schema(), &batches)
        .map(Some)
        .map_err(|e| PlanError::Query {
            context: path.display().to_string(),
            message: e.to_string(),
        })
}

/// Writes `batches` to a new Parquet file at `path`.
pub fn write_parquet(path: &Path, batches: &[RecordBatch]) -> Result<(), PlanError> {
    let io = |e: String| PlanError::Query {
        context: path.display().to_string(),
        message: e,
    };
    let Some(first) = batches.first() else {
        return Err(io("nothing to write".into()));
    };
    let file = std::fs::File::create(path).map_err(|e| io(e.to_string()))?;
    let mut w = ArrowWriter::try_new(file, first.schema(), None).map_err(|e| io(e.to_string()))?;
    for b in batches {
        w.write(b).map_err(|e| io(e.to_string()))?;
    }
    w.close().map_err(|e| io(e.to_string()))?;
    Ok(())
}
