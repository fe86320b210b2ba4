//! CSV sources: schema inference, header checks, line-aligned cut points and
//! a scan that honours `null_values`.
//!
//! DataFusion's own CSV scan uses its null pattern only while inferring the
//! schema, not while reading (a `NA` in a number column then fails to parse),
//! and reads every file of a glob by position under the first file's header.
//! This module reads CSV with arrow-csv directly: the null pattern applies to
//! every value, every file's header must name the same columns in the same
//! order, and a value that does not parse is an error naming the file and
//! the line, as an editor counts lines.

use super::PlanError;
use super::sources::{FilePart, PartRange, SourceTable};
use crate::remote_input::open_input;
use crate::spec::{CsvOptions, Source};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, StringArray, new_null_array,
};
use datafusion::arrow::csv::reader::{Format, ReaderBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

/// Rows read for type inference, from the first files.
const INFER_ROWS: usize = 1_000_000;
/// Rows per batch of the scan.
const BATCH_ROWS: usize = 8192;

/// The null pattern: an empty field, or any of the spec's `null_values`,
/// exactly. Without `null_values` arrow-csv takes an empty field as null by
/// itself; a pattern replaces that rule, so the empty field is part of it
/// (`null_values` add nulls, they never make an empty field a value).
fn null_regex(csv: &CsvOptions) -> Result<Option<regex::Regex>, PlanError> {
    if csv.null_values.is_empty() {
        return Ok(None);
    }
    let alts: Vec<String> = std::iter::once("")
        .chain(csv.null_values.iter().map(String::as_str))
        .map(regex::escape)
        .collect();
    regex::Regex::new(&format!("^(?:{})$", alts.join("|")))
        .map(Some)
        .map_err(|e| PlanError::Query {
            context: "null_values".into(),
            message: e.to_string(),
        })
}

/// arrow-csv's parsing options for a source.
pub fn csv_format(csv: &CsvOptions) -> DfResult<Format> {
    let mut f = Format::default()
        .with_header(csv.header)
        .with_delimiter(csv.delimiter)
        .with_quote(b'"');
    if let Some(re) = null_regex(csv).map_err(|e| DataFusionError::Plan(e.to_string()))? {
        f = f.with_null_regex(re);
    }
    Ok(f)
}

/// The header of one file (`None` for a source without headers).
fn header_of(path: &Path, csv: &CsvOptions) -> Result<Option<Vec<String>>, PlanError> {
    if !csv.header {
        return Ok(None);
    }
    let (file, _) = open_input(path).map_err(|e| PlanError::Query {
        context: path.display().to_string(),
        message: e.to_string(),
    })?;
    let (schema, _) = Format::default()
        .with_header(true)
        .with_delimiter(csv.delimiter)
        .infer_schema(BufReader::new(file), Some(0))
        .map_err(|e| PlanError::Query {
            context: format!("reading the header of {}", path.display()),
            message: e.to_string(),
        })?;
    Ok(Some(
        schema.fields().iter().map(|f| f.name().clone()).collect(),
    ))
}

/// Infers the schema from the first file (up to a million rows, with the
/// null pattern applied), after checking that every file's header names the
/// same columns in the same order.
pub fn infer_schema(src: &Source) -> Result<SchemaRef, PlanError> {
    let Some(first) = src.files.first() else {
        return Err(PlanError::Query {
            context: format!("source {:?}", src.name),
            message: "no input files".into(),
        });
    };
    let reference = header_of(first, &src.csv)?;
    for path in &src.files[1..] {
        let header = header_of(path, &src.csv)?;
        if header != reference {
            let (a, b) = (
                reference.clone().unwrap_or_default(),
                header.unwrap_or_default(),
            );
            let detail = match a.iter().zip(&b).position(|(x, y)| x != y) {
                Some(i) => format!("column {} is {:?} there but {:?} here", i + 1, a[i], b[i]),
                None => format!("{} columns there, {} here", a.len(), b.len()),
            };
            return Err(PlanError::Query {
                context: format!("{}:1", path.display()),
                message: format!(
                    "this file's header differs from the header of {} ({detail}); the files of \
                     one source must have the same columns in the same order",
                    first.display()
                ),
            });
        }
    }
    let mut format = Format::default()
        .with_header(src.csv.header)
        .with_delimiter(src.csv.delimiter);
    if let Some(re) = null_regex(&src.csv)? {
        format = format.with_null_regex(re);
    }
    let (file, _) = open_input(first).map_err(|e| PlanError::Query {
        context: first.display().to_string(),
        message: e.to_string(),
    })?;
    let (schema, _) = format
        .infer_schema(BufReader::new(file), Some(INFER_ROWS))
        .map_err(|e| PlanError::Query {
            context: format!("reading the schema of {}", first.display()),
            message: e.to_string(),
        })?;
    Ok(Arc::new(schema))
}

/// The rows of one CSV file read as a source with options `csv` reads it
/// (its delimiter, header and null values; types inferred from its first
/// million rows), in batches of at most `batch_rows`: the input side of
/// `tessera transform`. A value that does not parse is an error naming the
/// file and the line.
pub fn read_file(
    path: &Path,
    csv: &CsvOptions,
    batch_rows: usize,
) -> Result<Vec<RecordBatch>, PlanError> {
    let err = |line: Option<u64>, message: String| PlanError::Query {
        context: match line {
            Some(l) => format!("{}:{l}", path.display()),
            None => path.display().to_string(),
        },
        message,
    };
    let format = csv_format(csv).map_err(|e| err(None, e.to_string()))?;
    let open = || open_input(path).map_err(|e| err(None, e.to_string()));
    let (file, _) = open()?;
    let (schema, _) = format
        .clone()
        .infer_schema(BufReader::new(file), Some(INFER_ROWS))
        .map_err(|e| err(None, format!("reading the schema: {e}")))?;
    let (file, _) = open()?;
    let reader = ReaderBuilder::new(Arc::new(schema))
        .with_format(format)
        .with_batch_size(batch_rows.max(1))
        .build(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| err(None, e.to_string()))?;
    let mut out = Vec::new();
    for batch in reader {
        // arrow-csv counts records from 0 with the header as record 0
        // (`line N` in a parse error); record-shape errors count from 1.
        let batch = batch.map_err(|e| {
            let (text, offset) = match &e {
                ArrowError::ParseError(m) => (m.clone(), 0i64),
                ArrowError::CsvError(m) => (m.clone(), -1),
                other => (other.to_string(), 0),
            };
            let line =
                find_number_after(&text, "line ").map(|n| (1 + n as i64 + offset).max(1) as u64);
            let message = match text.split_once(". Row data:") {
                Some((head, _)) => head.to_string(),
                None => text,
            };
            err(line, message)
        })?;
        out.push(batch);
    }
    Ok(out)
}

/// Column with each row's file, when a scan reports positions.
pub const FILE_COLUMN: &str = "__tessera_file";
/// Column with each row's line (CSV) or row (other formats), counting from 1.
pub const LINE_COLUMN: &str = "__tessera_line";

/// `schema` with the two position columns appended.
pub fn with_positions(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(FILE_COLUMN, DataType::Utf8, false)));
    fields.push(Arc::new(Field::new(LINE_COLUMN, DataType::Int64, false)));
    Arc::new(Schema::new(fields))
}

/// Cut points of a text file: byte offsets where a new line starts, about
/// every `target` bytes, skipping line breaks inside quoted CSV values (`quote`
/// is `None` for NDJSON). Returns `(offset, line)` pairs, the first `(0, 1)`;
/// `line` is the 1-based number of the line starting at `offset`.
pub fn cut_points(
    path: &Path,
    target: u64,
    quote: Option<u8>,
) -> Result<Vec<(u64, u64)>, PlanError> {
    let err = |e: std::io::Error| PlanError::Query {
        context: path.display().to_string(),
        message: e.to_string(),
    };
    let (mut file, size) = open_input(path).map_err(err)?;
    let mut cuts = vec![(0u64, 1u64)];
    if size <= target {
        return Ok(cuts);
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    let mut line = 1u64;
    let mut in_quotes = false;
    let mut next = target;
    loop {
        let n = file.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            if Some(b) == quote {
                in_quotes = !in_quotes;
            } else if b == b'\n' {
                line += 1;
                let at = pos + i as u64 + 1;
                if !in_quotes && at >= next && at < size {
                    cuts.push((at, line));
                    next = at + target;
                }
            }
        }
        pos += n as u64;
    }
    Ok(cuts)
}

/// Scans CSV file parts with arrow-csv, in order, one stream per group.
#[derive(Debug)]
pub struct CsvScanExec {
    table: Arc<SourceTable>,
    /// The table's schema, with the position columns when asked for.
    table_schema: SchemaRef,
    format: Format,
    groups: Vec<Vec<FilePart>>,
    projection: Option<Vec<usize>>,
    limit: Option<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl CsvScanExec {
    /// A scan of `groups` (one output partition each) of `table`.
    pub fn try_new(
        table: Arc<SourceTable>,
        format: Format,
        groups: Vec<Vec<FilePart>>,
        projection: Option<Vec<usize>>,
        limit: Option<usize>,
        positions: bool,
    ) -> DfResult<Self> {
        let table_schema = if positions {
            with_positions(&table.schema)
        } else {
            Arc::clone(&table.schema)
        };
        let schema = match &projection {
            Some(p) => Arc::new(table_schema.project(p)?),
            None => Arc::clone(&table_schema),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(CsvScanExec {
            table,
            table_schema,
            format,
            groups,
            projection,
            limit,
            schema,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The spec source this scan reads.
    pub fn source_name(&self) -> &str {
        &self.table.name
    }
}

impl DisplayAs for CsvScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                let parts: usize = self.groups.iter().map(Vec::len).sum();
                write!(
                    f,
                    "CsvScanExec: source={}, parts={parts}, partitions={}",
                    self.table.name,
                    self.groups.len()
                )
            }
            DisplayFormatType::TreeRender => write!(f, "source={}", self.table.name),
        }
    }
}

impl ExecutionPlan for CsvScanExec {
    fn name(&self) -> &'static str {
        "CsvScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> DfResult<Arc<Statistics>> {
        Ok(Arc::new(Statistics::new_unknown(&self.schema)))
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let parts = self.groups.get(partition).cloned().unwrap_or_default();
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let bytes = MetricBuilder::new(&self.metrics).counter("bytes_scanned", partition);
        let mut reader = PartsReader {
            table: Arc::clone(&self.table),
            table_width: self.table_schema.fields().len(),
            format: self.format.clone(),
            parts: parts.into_iter(),
            projection: self.projection.clone(),
            out_schema: Arc::clone(&self.schema),
            remaining: self.limit,
            current: None,
            bytes,
        };
        let iter = std::iter::from_fn(move || {
            let timer = baseline.elapsed_compute().timer();
            let next = reader.next_batch().transpose();
            timer.done();
            if let Some(Ok(b)) = &next {
                baseline.record_output(b.num_rows());
            }
            next
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::iter(iter),
        )))
    }
}

type CsvReader = datafusion::arrow::csv::Reader<
    BufReader<std::io::Take<Box<dyn crate::remote_input::ReadSeek>>>,
>;

/// The part being read: its reader and where its lines start.
struct Current {
    reader: CsvReader,
    part: FilePart,
    /// 1-based line number of the part's first line.
    first_line: u64,
    /// Line number of the part's next record.
    next_line: u64,
}

struct PartsReader {
    table: Arc<SourceTable>,
    /// Columns of the scanned table, position columns included.
    table_width: usize,
    format: Format,
    parts: std::vec::IntoIter<FilePart>,
    projection: Option<Vec<usize>>,
    out_schema: SchemaRef,
    remaining: Option<usize>,
    current: Option<Current>,
    bytes: Count,
}

impl PartsReader {
    fn next_batch(&mut self) -> DfResult<Option<RecordBatch>> {
        loop {
            if self.remaining == Some(0) {
                return Ok(None);
            }
            if self.current.is_none() {
                let Some(part) = self.parts.next() else {
                    return Ok(None);
                };
                self.current = Some(self.open(part)?);
            }
            let Some(cur) = self.current.as_mut() else {
                continue;
            };
            match cur.reader.next() {
                None => self.current = None,
                Some(Err(e)) => return Err(self.locate(e)),
                Some(Ok(batch)) => {
                    let mut batch = self.complete(batch)?;
                    if let Some(cur) = self.current.as_mut() {
                        cur.next_line += batch.num_rows() as u64;
                    }
                    if let Some(rem) = self.remaining.as_mut() {
                        if batch.num_rows() > *rem {
                            batch = batch.slice(0, *rem);
                        }
                        *rem -= batch.num_rows();
                    }
                    return Ok(Some(batch));
                }
            }
        }
    }

    fn open(&self, part: FilePart) -> DfResult<Current> {
        let file = self.table.files.get(part.file).ok_or_else(|| {
            DataFusionError::Internal(format!("csv part names file {}", part.file))
        })?;
        let io =
            |e: std::io::Error| DataFusionError::Execution(format!("{}: {e}", file.path.display()));
        let (mut f, _) = open_input(&file.path).map_err(io)?;
        let (start, end, first_line) = match part.range {
            PartRange::Bytes { start, end, line } => (start, end, line),
            _ => (0, file.size, 1),
        };
        f.seek(SeekFrom::Start(start)).map_err(io)?;
        self.bytes.add((end - start) as usize);
        let header = self.table.csv.header && start == 0;
        let n_file = self.table.file_schema.fields().len();
        let file_projection: Vec<usize> = match &self.projection {
            Some(p) => p.iter().copied().filter(|&i| i < n_file).collect(),
            None => (0..n_file).collect(),
        };
        let reader = ReaderBuilder::new(Arc::clone(&self.table.file_schema))
            .with_format(self.format.clone().with_header(header))
            .with_batch_size(BATCH_ROWS)
            .with_projection(file_projection)
            .build(BufReader::with_capacity(1 << 20, f.take(end - start)))
            .map_err(|e| DataFusionError::Execution(format!("{}: {e}", file.path.display())))?;
        Ok(Current {
            reader,
            part,
            first_line,
            next_line: first_line + u64::from(header),
        })
    }

    /// Adds the partition columns and puts the columns in projection order.
    fn complete(&self, batch: RecordBatch) -> DfResult<RecordBatch> {
        let n_file = self.table.file_schema.fields().len();
        let Some(cur) = &self.current else {
            return Ok(batch);
        };
        let values = &self.table.files[cur.part.file].partition_values;
        let projection: Vec<usize> = match &self.projection {
            Some(p) => p.clone(),
            None => (0..self.table_width).collect(),
        };
        let n_table = self.table.schema.fields().len();
        let mut next_file_col = 0;
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(projection.len());
        for &i in &projection {
            if i < n_file {
                cols.push(Arc::clone(batch.column(next_file_col)));
                next_file_col += 1;
            } else if i == n_table {
                let path = self.table.files[cur.part.file].path.display().to_string();
                cols.push(Arc::new(StringArray::from(vec![path; batch.num_rows()])));
            } else if i == n_table + 1 {
                let lines = (0..batch.num_rows() as u64).map(|k| (cur.next_line + k) as i64);
                cols.push(Arc::new(Int64Array::from_iter_values(lines)));
            } else {
                let v = values
                    .get(i - n_file)
                    .cloned()
                    .ok_or_else(|| DataFusionError::Internal("missing partition value".into()))?;
                cols.push(match v.is_null() {
                    true => new_null_array(&v.data_type(), batch.num_rows()),
                    false => v.to_array_of_size(batch.num_rows())?,
                });
            }
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.out_schema),
            cols,
            &opts,
        )?)
    }

    /// Rewrites an arrow-csv error so that it names the file and the line.
    fn locate(&self, e: ArrowError) -> DataFusionError {
        let Some(cur) = &self.current else {
            return DataFusionError::ArrowError(Box::new(e), None);
        };
        let path = self.table.files[cur.part.file].path.display().to_string();
        let (text, offset) = match &e {
            // Parse errors count records from 0 with the header as record 0;
            // record-shape errors count from 1.
            ArrowError::ParseError(m) => (m.clone(), 0i64),
            ArrowError::CsvError(m) => (m.clone(), -1),
            other => (other.to_string(), 0),
        };
        let line =
            find_number_after(&text, "line ").map(|n| cur.first_line as i64 + n as i64 + offset);
        let column = find_number_after(&text, "for column ")
            .and_then(|c| self.table.file_schema.fields().get(c as usize))
            .map(|f| format!(" (column {:?})", f.name()))
            .unwrap_or_default();
        let message = match text.split_once(". Row data:") {
            Some((head, _)) => head.to_string(),
            None => text,
        };
        DataFusionError::Execution(match line {
            Some(l) => format!("{path}:{l}: {message}{column}"),
            None => format!("{path}: {message}{column}"),
        })
    }
}

/// The number right after `prefix` in `text`.
fn find_number_after(text: &str, prefix: &str) -> Option<u64> {
    let at = text.find(prefix)? + prefix.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests;
