//! [`FilesTable`]: the table provider DataFusion scans, over a chosen list of
//! file parts in a fixed order.

use super::*;
use datafusion::datasource::physical_plan::{FileSource, ParquetSource};
use std::collections::HashSet;

/// The table DataFusion scans: `groups[p]` is output partition `p`, read in
/// order.
#[derive(Debug)]
pub struct FilesTable {
    table: Arc<SourceTable>,
    groups: Vec<Vec<FilePart>>,
    /// CSV only: add each row's file and line (`csv::with_positions`), to
    /// locate a bad value in its input.
    positions: bool,
    /// The files a scan skipped because the filters rule out their hive
    /// partition values (indexes into the source's files).
    partition_pruned: PrunedFiles,
}

/// Files skipped by their partition values, shared with the task that reports
/// them.
pub type PrunedFiles = Arc<std::sync::Mutex<std::collections::BTreeSet<usize>>>;

impl FilesTable {
    /// A table over `parts` of `table`, in `partitions` contiguous groups of
    /// about equal weight (one group keeps the parts' order in one stream).
    pub fn new(table: Arc<SourceTable>, parts: Vec<FilePart>, partitions: usize) -> FilesTable {
        let groups = split_groups(&table, parts, partitions.max(1));
        FilesTable {
            table,
            groups,
            positions: false,
            partition_pruned: PrunedFiles::default(),
        }
    }

    /// The files its scans skipped by their partition values.
    pub fn partition_pruned(&self) -> PrunedFiles {
        Arc::clone(&self.partition_pruned)
    }

    /// The same table with the position columns (CSV sources only).
    pub fn with_positions(mut self) -> FilesTable {
        self.positions = self.table.format == SourceFormat::Csv;
        self
    }
}

/// Cuts `parts` into at most `n` contiguous groups of about equal weight.
pub(super) fn split_groups(
    table: &SourceTable,
    parts: Vec<FilePart>,
    n: usize,
) -> Vec<Vec<FilePart>> {
    if n <= 1 || parts.len() <= 1 {
        return vec![parts];
    }
    let weight = |p: &FilePart| -> u64 {
        let f = &table.files[p.file];
        match p.range {
            PartRange::Whole => f.size,
            PartRange::RowGroups { start, end } => {
                f.row_groups[start..end].iter().map(|g| g.bytes).sum()
            }
            PartRange::Bytes { start, end, .. } => end - start,
        }
        .max(1)
    };
    let total: u64 = parts.iter().map(weight).sum();
    let per = total.div_ceil(n as u64).max(1);
    let mut groups: Vec<Vec<FilePart>> = Vec::new();
    let mut current = Vec::new();
    let mut acc = 0;
    for p in parts {
        acc += weight(&p);
        current.push(p);
        if acc >= per && groups.len() + 1 < n {
            groups.push(std::mem::take(&mut current));
            acc = 0;
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

#[async_trait]
impl TableProvider for FilesTable {
    fn schema(&self) -> SchemaRef {
        if self.positions {
            super::super::csv::with_positions(&self.table.schema)
        } else {
            Arc::clone(&self.table.schema)
        }
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Inexact: DataFusion keeps the filter above the scan, and the Parquet
        // reader may use it to skip row groups, pages and rows.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // Files whose partition values no row of which could pass are not
        // scanned at all (each counted once, at its first part).
        let out = super::super::pruning::ruled_out_by_partition(&self.table, filters);
        let kept: Vec<Vec<FilePart>> = self
            .groups
            .iter()
            .map(|g| {
                g.iter()
                    .filter(|p| {
                        if !out.get(p.file).copied().unwrap_or(false) {
                            return true;
                        }
                        if p.is_first_of_file()
                            && let Ok(mut set) = self.partition_pruned.lock()
                        {
                            set.insert(p.file);
                        }
                        false
                    })
                    .copied()
                    .collect()
            })
            .collect();
        let groups: Vec<&Vec<FilePart>> = kept.iter().filter(|g| !g.is_empty()).collect();
        if groups.is_empty() {
            let full = self.schema();
            let schema = match projection {
                Some(p) => Arc::new(full.project(p)?),
                None => full,
            };
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let Some(reader) = &self.table.format_reader else {
            let groups = groups.into_iter().cloned().collect();
            return Ok(Arc::new(CsvScanExec::try_new(
                Arc::clone(&self.table),
                csv_format(&self.table.csv)?,
                groups,
                projection.cloned(),
                limit,
                self.positions,
            )?));
        };
        let table_schema = TableSchema::builder(Arc::clone(&self.table.file_schema))
            .with_table_partition_cols(self.table.partition_fields.clone())
            .build();
        let full_schema = Arc::clone(table_schema.table_schema());
        let source = late_materialization(
            reader.file_source(table_schema),
            &full_schema,
            projection,
            filters,
        );
        let mut total = sized(&full_schema, Precision::Inexact(0), Precision::Inexact(0));
        let file_groups = groups
            .into_iter()
            .map(|g| {
                let mut group = sized(&full_schema, Precision::Inexact(0), Precision::Inexact(0));
                let files = g
                    .iter()
                    .map(|p| {
                        let (rows, bytes) = self.table.part_size(p);
                        let rows =
                            rows.map_or(Precision::Absent, |r| Precision::Inexact(r as usize));
                        let st = sized(&full_schema, rows, Precision::Inexact(bytes as usize));
                        add_sizes(&mut group, &st);
                        self.table
                            .partitioned_file(p)
                            .map(|f| f.with_statistics(Arc::new(st)))
                    })
                    .collect::<DfResult<Vec<_>>>()?;
                add_sizes(&mut total, &group);
                Ok(FileGroup::new(files).with_statistics(Arc::new(group)))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let store_url = match self.table.files.first() {
            Some(f) => {
                object_of(&f.path)
                    .map_err(|e| {
                        datafusion::error::DataFusionError::Execution(format!(
                            "{}: {e}",
                            f.path.display()
                        ))
                    })?
                    .0
            }
            None => ObjectStoreUrl::local_filesystem(),
        };
        let config = FileScanConfigBuilder::new(store_url, source)
            .with_file_groups(file_groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .with_preserve_order(true)
            .with_statistics(total)
            .build();
        reader.create_physical_plan(state, config).await
    }
}

/// A Parquet scan filters rows inside the decoder (DataFusion's
/// `pushdown_filters`: the filter's columns decoded first, the others only
/// for the rows that pass) when it reads a variable-width column (text,
/// bytes, lists, structs, maps) that its filters do not use: decoding those
/// is what the row filter saves. When every such column is one the filter
/// reads anyway, or there is none, the row filter costs more than it saves
/// (the filter's columns are decoded twice, once to filter and once for
/// the output): TPC-H q06 at SF 1 took 0.39-0.50 s with it and 0.19-0.25 s
/// without. Either way the filter still prunes row groups and pages, and
/// the rows that reach the query are the same.
fn late_materialization(
    source: Arc<dyn FileSource>,
    schema: &Schema,
    projection: Option<&Vec<usize>>,
    filters: &[Expr],
) -> Arc<dyn FileSource> {
    let Some(parquet) = source.downcast_ref::<ParquetSource>() else {
        return source;
    };
    let used: HashSet<&str> = filters
        .iter()
        .flat_map(|f| f.column_refs())
        .map(|c| c.name.as_str())
        .collect();
    let read = projection
        .cloned()
        .unwrap_or_else(|| (0..schema.fields().len()).collect());
    let saves = !filters.is_empty()
        && read.iter().any(|&i| {
            let f = schema.field(i);
            !used.contains(f.name().as_str())
                && !f.data_type().is_primitive()
                && !matches!(f.data_type(), DataType::Boolean | DataType::Null)
        });
    Arc::new(parquet.clone().with_pushdown_filters(saves))
}

/// Statistics of `rows` and `bytes` (inexact: the planner sizes joins by
/// them, and no answer is taken from them), every column unknown.
fn sized(schema: &Schema, rows: Precision<usize>, bytes: Precision<usize>) -> Statistics {
    let mut st = Statistics::new_unknown(schema);
    st.num_rows = rows;
    st.total_byte_size = bytes;
    st
}

/// Adds `part`'s rows and bytes to `sum` (an unknown count makes it unknown).
fn add_sizes(sum: &mut Statistics, part: &Statistics) {
    sum.num_rows = sum.num_rows.add(&part.num_rows);
    sum.total_byte_size = sum.total_byte_size.add(&part.total_byte_size);
}
