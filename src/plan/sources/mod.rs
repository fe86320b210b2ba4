//! Sources, registered from the resolved and fingerprinted file list.
//!
//! Each spec source becomes a [`SourceTable`]: its files (exactly the files
//! the build hashed, in input order, never a re-listing of a directory), one
//! schema checked against every file, hive partition values read from each
//! file's own path, and for Parquet the row groups of every file (from the
//! footers). A [`FilesTable`] is what DataFusion sees: a table provider that
//! scans a chosen list of [`FilePart`]s (whole files, row-group ranges, or
//! line-aligned byte ranges) in a fixed order, in as many output partitions as
//! the caller asks for.

use super::csv::{CsvScanExec, csv_format};
use super::{PlanError, query_err};
use crate::spec::{Source, SourceFormat};
use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Result as DfResult, ScalarValue, Statistics};
use datafusion::datasource::TableProvider;
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use object_store::ObjectMeta;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows and compressed bytes of one Parquet row group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowGroup {
    /// Rows in the row group.
    pub rows: u64,
    /// Compressed bytes of its column chunks.
    pub bytes: u64,
}

/// One input file of a source.
#[derive(Clone, Debug)]
pub struct InputFile {
    /// Absolute path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Hive partition values, typed like the table's partition columns.
    pub partition_values: Vec<ScalarValue>,
    /// Parquet only: the row groups, in file order.
    pub row_groups: Vec<RowGroup>,
}

/// Which rows of a file a [`FilePart`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PartRange {
    /// The whole file.
    Whole,
    /// Parquet row groups `start..end`.
    RowGroups {
        /// First row group.
        start: usize,
        /// One past the last row group.
        end: usize,
    },
    /// Bytes `start..end` of a CSV or NDJSON file; both ends sit at line
    /// starts (or the file's end).
    Bytes {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// The 1-based line number of the line starting at `start`.
        line: u64,
    },
}

/// A range of one input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FilePart {
    /// Index into the source's files.
    pub file: usize,
    /// The rows read.
    pub range: PartRange,
}

impl FilePart {
    /// Whether the part starts at its file's first row.
    pub fn is_first_of_file(&self) -> bool {
        match self.range {
            PartRange::Whole => true,
            PartRange::RowGroups { start, .. } => start == 0,
            PartRange::Bytes { start, .. } => start == 0,
        }
    }
}

/// A spec source ready to be scanned.
#[derive(Debug)]
pub struct SourceTable {
    /// The source's name in the spec (its SQL table name).
    pub name: String,
    /// File format.
    pub format: SourceFormat,
    /// CSV options, for CSV sources.
    pub csv: crate::spec::CsvOptions,
    /// The files, in input order.
    pub files: Vec<InputFile>,
    /// The columns stored in the files.
    pub file_schema: SchemaRef,
    /// Hive partition columns, after the file columns.
    pub partition_fields: Vec<FieldRef>,
    /// File columns then partition columns: the table DataFusion sees.
    pub schema: SchemaRef,
    /// DataFusion's reader for Parquet, JSON and Arrow files (CSV is read by
    /// [`CsvScanExec`], which honours `null_values`).
    format_reader: Option<Arc<dyn FileFormat>>,
}

/// Tags each [`PartitionedFile`] with the source it belongs to, so a physical
/// plan's scans can be told apart (see `exec::scan_source`).
#[derive(Clone, Debug)]
pub struct SourceTag(pub String);

impl SourceTable {
    /// Reads what planning needs from `src`'s files: the schema (checked
    /// against every file), the row groups of Parquet files, the partition
    /// values. `ctx` supplies DataFusion's readers and their options.
    pub async fn open(src: &Source, ctx: &SessionContext) -> Result<SourceTable, PlanError> {
        let what = format!("source {:?}", src.name);
        if src.files.is_empty() {
            return Err(PlanError::Query {
                context: what,
                message: "no input files".into(),
            });
        }
        let sizes: Vec<u64> = src
            .files
            .iter()
            .map(|f| {
                crate::remote_input::input_size(f).map_err(|e| PlanError::Query {
                    context: format!("{what}: {}", f.display()),
                    message: e.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
        let (partition_fields, values) = partition_columns(src)?;

        let config = ctx.copied_config();
        let listing = super::listing_options(src, &config);
        let (file_schema, row_groups, format_reader) = match src.format {
            SourceFormat::Parquet => {
                let footers = read_footers(&src.files)?;
                let schemas: Vec<&Schema> = footers.iter().map(|(s, _)| s).collect();
                check_same_columns(&src.files, &schemas)?;
                let schema =
                    infer(&listing.format, ctx, &src.files[..1], &sizes[..1], &what).await?;
                let groups = footers.into_iter().map(|(_, g)| g).collect();
                (schema, groups, Some(Arc::clone(&listing.format)))
            }
            SourceFormat::Csv => {
                let schema = super::csv::infer_schema(src)?;
                (schema, vec![Vec::new(); src.files.len()], None)
            }
            SourceFormat::Json => {
                let schema = infer(&listing.format, ctx, &src.files, &sizes, &what).await?;
                (
                    schema,
                    vec![Vec::new(); src.files.len()],
                    Some(Arc::clone(&listing.format)),
                )
            }
            SourceFormat::Arrow => {
                let mut schemas = Vec::with_capacity(src.files.len());
                for (f, size) in src.files.iter().zip(&sizes) {
                    schemas.push(
                        infer(
                            &listing.format,
                            ctx,
                            std::slice::from_ref(f),
                            &[*size],
                            &what,
                        )
                        .await?,
                    );
                }
                let refs: Vec<&Schema> = schemas.iter().map(|s| s.as_ref()).collect();
                check_same_columns(&src.files, &refs)?;
                let schema = schemas.swap_remove(0);
                (
                    schema,
                    vec![Vec::new(); src.files.len()],
                    Some(Arc::clone(&listing.format)),
                )
            }
        };
        for f in &partition_fields {
            if file_schema.field_with_name(f.name()).is_ok() {
                return Err(PlanError::Query {
                    context: what,
                    message: format!(
                        "partition folder key {:?} is also a column stored in the files",
                        f.name()
                    ),
                });
            }
        }
        let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields.iter().cloned());
        let schema = Arc::new(Schema::new(fields));
        let files = src
            .files
            .iter()
            .zip(sizes)
            .zip(values)
            .zip(row_groups)
            .map(|(((path, size), partition_values), row_groups)| InputFile {
                path: path.clone(),
                size,
                partition_values,
                row_groups,
            })
            .collect();
        Ok(SourceTable {
            name: src.name.clone(),
            format: src.format,
            csv: src.csv.clone(),
            files,
            file_schema,
            partition_fields,
            schema,
            format_reader,
        })
    }

    /// Every file, whole, in order.
    pub fn all_parts(&self) -> Vec<FilePart> {
        (0..self.files.len())
            .map(|file| FilePart {
                file,
                range: PartRange::Whole,
            })
            .collect()
    }

    /// A short description of a part for messages.
    pub fn describe_part(&self, part: &FilePart) -> String {
        let path = self
            .files
            .get(part.file)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        match part.range {
            PartRange::Whole => path,
            PartRange::RowGroups { start, end } if end == start + 1 => {
                format!("{path} (row group {start})")
            }
            PartRange::RowGroups { start, end } => {
                format!("{path} (row groups {start}..{end})")
            }
            PartRange::Bytes { line, .. } => format!("{path} (from line {line})"),
        }
    }

    /// Rows (Parquet only: `None` for other formats) and bytes of `part`.
    pub(super) fn part_size(&self, part: &FilePart) -> (Option<u64>, u64) {
        let Some(f) = self.files.get(part.file) else {
            return (None, 0);
        };
        let groups = match part.range {
            PartRange::Whole => &f.row_groups[..],
            PartRange::RowGroups { start, end } => {
                &f.row_groups[start.min(f.row_groups.len())..end.min(f.row_groups.len())]
            }
            PartRange::Bytes { start, end, .. } => return (None, end - start),
        };
        if self.format != SourceFormat::Parquet {
            return (None, f.size);
        }
        (
            Some(groups.iter().map(|g| g.rows).sum()),
            groups.iter().map(|g| g.bytes).sum(),
        )
    }

    fn partitioned_file(&self, part: &FilePart) -> DfResult<PartitionedFile> {
        let file = self.files.get(part.file).ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!(
                "part names file {} of {}",
                part.file, self.name
            ))
        })?;
        let (_, location) = object_of(&file.path).map_err(|e| {
            datafusion::error::DataFusionError::Execution(format!("{}: {e}", file.path.display()))
        })?;
        let meta = ObjectMeta {
            location,
            last_modified: chrono_epoch(),
            size: file.size,
            e_tag: None,
            version: None,
        };
        let mut pf = PartitionedFile::new_from_meta(meta)
            .with_partition_values(file.partition_values.clone())
            .with_extension(SourceTag(self.name.clone()));
        match part.range {
            PartRange::Whole => {}
            PartRange::RowGroups { start, end } => {
                let mut plan = ParquetAccessPlan::new_none(file.row_groups.len());
                for i in start..end.min(file.row_groups.len()) {
                    plan.scan(i);
                }
                pf = pf.with_extension(plan);
            }
            PartRange::Bytes { start, end, .. } => {
                pf = pf.with_range(start as i64, end as i64);
            }
        }
        Ok(pf)
    }
}

mod schema;
mod table;

use schema::*;
pub(crate) use schema::{object_of, parquet_metadata};
pub use table::*;

/// The source a physical scan reads, if it is one of ours.
pub fn scan_source(plan: &dyn ExecutionPlan) -> Option<String> {
    use datafusion::datasource::physical_plan::FileScanConfig;
    use datafusion::datasource::source::DataSourceExec;
    if let Some(csv) = plan.downcast_ref::<CsvScanExec>() {
        return Some(csv.source_name().to_string());
    }
    let exec = plan.downcast_ref::<DataSourceExec>()?;
    let config = exec.data_source().downcast_ref::<FileScanConfig>()?;
    config
        .file_groups
        .iter()
        .flat_map(|g| g.files())
        .find_map(|f| f.extension::<SourceTag>().map(|t| t.0.clone()))
}

/// Registers `tables` in `ctx`, each over its given parts and partitions;
/// returns, by source name, the files their scans skip by partition values.
pub fn register(
    ctx: &SessionContext,
    tables: Vec<(Arc<SourceTable>, Vec<FilePart>, usize)>,
) -> Result<BTreeMap<String, PrunedFiles>, PlanError> {
    let mut pruned = BTreeMap::new();
    for (table, parts, partitions) in tables {
        let name = table.name.clone();
        let t = FilesTable::new(table, parts, partitions);
        pruned.insert(name.clone(), t.partition_pruned());
        ctx.register_table(name.as_str(), Arc::new(t))
            .map_err(query_err(format!("source {name:?}")))?;
    }
    Ok(pruned)
}

/// How many files in `pruned` (all sources) were skipped.
pub fn count_pruned<'a>(pruned: impl IntoIterator<Item = &'a PrunedFiles>) -> u64 {
    pruned
        .into_iter()
        .map(|p| p.lock().map_or(0, |s| s.len() as u64))
        .sum()
}

/// Whether `path` is one of `table`'s files.
pub fn has_file(table: &SourceTable, path: &Path) -> bool {
    table.files.iter().any(|f| f.path == path)
}

#[cfg(test)]
mod tests;
