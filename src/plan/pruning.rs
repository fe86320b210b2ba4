//! What the filters DataFusion pushes into each Parquet scan let the row-group
//! statistics (min, max, null counts in the footers) skip, computed from the
//! footers alone, without reading data: for `tessera explain`. And which
//! files a filter on hive partition columns rules out, for the scans.

use super::sources::SourceTable;
use crate::spec::SourceFormat;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, UInt64Array};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_expr::create_physical_expr;
use datafusion::physical_expr::execution_props::ExecutionProps;
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// One line per Parquet source whose scan has pushed-down filters.
pub fn report(plan: &LogicalPlan, tables: &BTreeMap<String, Arc<SourceTable>>) -> Vec<String> {
    let mut scans: Vec<(String, Vec<Expr>)> = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(s) = node
            && !s.filters.is_empty()
        {
            scans.push((s.table_name.table().to_string(), s.filters.clone()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let mut out = Vec::new();
    for (name, filters) in scans {
        let Some(table) = tables.get(&name) else {
            continue;
        };
        if table.format != SourceFormat::Parquet {
            continue;
        }
        let text: Vec<String> = filters.iter().map(|f| format!("{f}")).collect();
        out.push(match prune_table(table, &filters) {
            Ok((skipped, total, files_skipped)) => format!(
                "source {name:?}: statistics skip {skipped} of {total} row groups \
                 ({files_skipped} of {} files entirely) for {}",
                table.files.len(),
                text.join(" AND ")
            ),
            Err(e) => format!("source {name:?}: cannot tell from the statistics ({e})"),
        });
    }
    out
}

/// `(row groups skipped, row groups, files skipped)`.
fn prune_table(table: &SourceTable, filters: &[Expr]) -> Result<(usize, usize, usize), String> {
    let Some(conj) = filters.iter().cloned().reduce(|a, b| a.and(b)) else {
        return Ok((0, 0, 0));
    };
    // Columns as the files name them, without the table qualifier.
    let expr = conj
        .transform(|e| match e {
            Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                c.name,
            )))),
            other => Ok(Transformed::no(other)),
        })
        .map_err(|e| e.to_string())?
        .data;
    let (mut skipped, mut total, mut files_skipped) = (0, 0, 0);
    for f in &table.files {
        let meta = super::sources::parquet_metadata(&f.path)?;
        let fm = meta.file_metadata();
        let schema: SchemaRef = Arc::new(
            datafusion::parquet::arrow::parquet_to_arrow_schema(
                fm.schema_descr(),
                fm.key_value_metadata(),
            )
            .map_err(|e| e.to_string())?,
        );
        // Hive partition columns follow the file's own columns; each has one
        // value per file, which is every row group's minimum and maximum.
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.extend(table.partition_fields.iter().cloned());
        let schema: SchemaRef = Arc::new(Schema::new(fields));
        let df = DFSchema::try_from(schema.as_ref().clone()).map_err(|e| e.to_string())?;
        let physical = create_physical_expr(
            &expr,
            &df,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )
        .map_err(|e| e.to_string())?;
        let predicate = PruningPredicateBuilder::new()
            .with_file_schema(Arc::clone(&schema))
            .try_build(physical)
            .map_err(|e| e.to_string())?;
        let stats = RowGroups {
            meta: &meta,
            schema: &schema,
            partitions: table
                .partition_fields
                .iter()
                .map(|f| f.name().clone())
                .zip(f.partition_values.iter().cloned())
                .collect(),
        };
        let keep = predicate.prune(&stats).map_err(|e| e.to_string())?;
        let n = keep.len();
        let gone = keep.iter().filter(|k| !**k).count();
        total += n;
        skipped += gone;
        if n > 0 && gone == n {
            files_skipped += 1;
        }
    }
    Ok((skipped, total, files_skipped))
}

/// One file's row groups as pruning containers.
struct RowGroups<'a> {
    meta: &'a ParquetMetaData,
    schema: &'a Schema,
    /// The file's hive partition columns and values.
    partitions: Vec<(String, ScalarValue)>,
}

impl RowGroups<'_> {
    /// A partition column's value repeated for every row group.
    fn partition(&self, column: &Column) -> Option<ArrayRef> {
        let (_, value) = self.partitions.iter().find(|(n, _)| *n == column.name)?;
        value.to_array_of_size(self.meta.num_row_groups()).ok()
    }

    fn converter(&self, column: &Column) -> Option<StatisticsConverter<'_>> {
        StatisticsConverter::try_new(
            &column.name,
            self.schema,
            self.meta.file_metadata().schema_descr(),
        )
        .ok()
    }
}

impl PruningStatistics for RowGroups<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        if let Some(values) = self.partition(column) {
            return Some(values);
        }
        self.converter(column)?
            .row_group_mins(self.meta.row_groups().iter())
            .ok()
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        if let Some(values) = self.partition(column) {
            return Some(values);
        }
        self.converter(column)?
            .row_group_maxes(self.meta.row_groups().iter())
            .ok()
    }

    fn num_containers(&self) -> usize {
        self.meta.num_row_groups()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        if let Some((_, value)) = self.partitions.iter().find(|(n, _)| *n == column.name) {
            let nulls = if value.is_null() { 1 } else { 0 };
            let counts: UInt64Array = self
                .meta
                .row_groups()
                .iter()
                .map(|g| Some(nulls * g.num_rows().max(0) as u64))
                .collect();
            return Some(Arc::new(counts));
        }
        self.converter(column)?
            .row_group_null_counts(self.meta.row_groups().iter())
            .ok()
            .map(|a| Arc::new(a) as ArrayRef)
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        let counts: UInt64Array = self
            .meta
            .row_groups()
            .iter()
            .map(|g| Some(g.num_rows().max(0) as u64))
            .collect();
        Some(Arc::new(counts))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// For each of `table`'s files, whether `filters` rule it out by its hive
/// partition values alone (the filters that name only partition columns,
/// evaluated once per file on its values). A filter that cannot be
/// evaluated rules nothing out: DataFusion still applies every filter to the
/// rows, so skipping here is only ever a saving.
pub fn ruled_out_by_partition(table: &SourceTable, filters: &[Expr]) -> Vec<bool> {
    let n = table.files.len();
    let none = vec![false; n];
    if table.partition_fields.is_empty() || n == 0 {
        return none;
    }
    let names: HashSet<&str> = table
        .partition_fields
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let on_partitions = filters.iter().filter(|f| {
        let refs = f.column_refs();
        !refs.is_empty() && refs.iter().all(|c| names.contains(c.name.as_str()))
    });
    let Some(conj) = on_partitions.cloned().reduce(|a, b| a.and(b)) else {
        return none;
    };
    let unqualified = conj.transform(|e| match e {
        Expr::Column(c) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
            c.name,
        )))),
        other => Ok(Transformed::no(other)),
    });
    let Ok(expr) = unqualified.map(|t| t.data) else {
        return none;
    };
    let schema = Arc::new(Schema::new(table.partition_fields.clone()));
    let evaluate = || -> datafusion::common::Result<Vec<bool>> {
        let df = DFSchema::try_from(schema.as_ref().clone())?;
        let physical = create_physical_expr(
            &expr,
            &df,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )?;
        let columns = (0..table.partition_fields.len())
            .map(|i| {
                ScalarValue::iter_to_array(table.files.iter().map(|f| {
                    f.partition_values
                        .get(i)
                        .cloned()
                        .unwrap_or(ScalarValue::Null)
                }))
            })
            .collect::<datafusion::common::Result<Vec<ArrayRef>>>()?;
        let batch = datafusion::arrow::record_batch::RecordBatch::try_new(schema.clone(), columns)?;
        let out = physical.evaluate(&batch)?.into_array(n)?;
        let Some(keep) = out.as_any().downcast_ref::<BooleanArray>() else {
            return Ok(vec![false; n]);
        };
        // False or null: no row of the file can pass.
        Ok((0..n)
            .map(|i| !(keep.is_valid(i) && keep.value(i)))
            .collect())
    };
    evaluate().unwrap_or(none)
}
