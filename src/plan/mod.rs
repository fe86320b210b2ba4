//! Everything that touches DataFusion and Arrow lives under this module, so a
//! DataFusion upgrade changes one place.
//!
//! - [`sources`]: each spec source as a table over exactly the hashed files.
//! - [`chunking`]: whether the query distributes over one source's rows, and
//!   the chunks (file ranges) it is cut into.
//! - [`sql`]: the SQL of each pass.
//! - [`exec`]: sessions, tessera's DataFusion rules, metrics.
//! - [`stats`], [`encode`]: the statistics pass and the shard encoder. A
//!   field's transform chain, checked value conversion, the record encoding
//!   and split assignment live in the transform crate (`tessera_transform`),
//!   shared with the serving path.
//!
//! A *chunked* query runs as independent tasks, one per chunk, each a
//! single-partition DataFusion session over its chunk (other sources read
//! whole), so a task's row order is the data's. A *global* query runs once
//! over all inputs with the build's threads; its output, sorted on every
//! column, is materialized to a temporary Arrow file and then cut into row
//! ranges that the same statistics and encode tasks read.

mod checked;
pub mod chunking;
mod csv;
mod decimal;
mod diagnose;
mod encode;
pub mod engine;
pub(crate) mod exact_float;
pub(crate) mod exec;
mod pruning;
pub mod rows;
pub mod sources;
mod sql;
mod stats;
mod store;
mod vocab;

pub use chunking::{Chunk, Decision};
pub use encode::{EncodeOutput, OutputBudget};
pub use stats::StatsPartial;
pub use vocab::SpillConfig;

use crate::spec::{Source, SourceFormat, Spec, Transform};
use datafusion::arrow::ipc::reader::FileReader;
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::file_format::options::{
    ArrowReadOptions, CsvReadOptions, JsonReadOptions, ParquetReadOptions, ReadOptions,
};
use datafusion::datasource::listing::ListingOptions;
use datafusion::execution::context::SessionConfig;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::{ExecutionPlan, displayable, execute_stream};
use exec::SessionOptions;
use futures::StreamExt;
use sources::{FilePart, SourceTable};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// An error from planning or running a query, with the context it concerns.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// DataFusion rejected or failed a query.
    #[error("{context}: {message}")]
    Query {
        /// What was being done (source, chunk, file).
        context: String,
        /// DataFusion's message.
        message: String,
    },
    /// A value could not be read, converted or stored.
    #[error("{context}: {message}")]
    Encode {
        /// The spec key the value belongs to (`fields.x`, `split.key`).
        key: Option<String>,
        /// The row of the task's query output (from 0), when one is at fault.
        row: Option<u64>,
        /// Where: the row and the task's input.
        context: String,
        /// What is wrong, quoting the value.
        message: String,
    },
    /// A source's files cannot be read as one table.
    #[error("{message}")]
    Source {
        /// The spec key (`sources.<name>.path`).
        key: String,
        /// What is wrong, naming the file.
        message: String,
    },
    /// A piece of the spec's SQL that DataFusion rejects on its own.
    #[error("{key}: {message}")]
    Spec {
        /// The spec key holding that SQL (`query`, `filter`, `fields.x`,
        /// `split.key`).
        key: String,
        /// DataFusion's verdict on it.
        message: String,
    },
    /// Writing a shard failed.
    #[error(transparent)]
    Write(#[from] tessera_reader::Error),
}

pub(crate) fn query_err(
    context: impl Into<String>,
) -> impl FnOnce(datafusion::error::DataFusionError) -> PlanError {
    let context = context.into();
    move |e| PlanError::Query {
        context,
        message: e.to_string(),
    }
}

/// Counters read from an executed plan's metrics: the manifest's
/// `build.scan`.
pub use tessera_reader::ScanMetrics;

/// DataFusion's reading options for a source (the format and its options).
pub(crate) fn listing_options(src: &Source, config: &SessionConfig) -> ListingOptions {
    let table_options =
        datafusion::config::TableOptions::default_from_session_config(config.options());
    let mut opts = match src.format {
        SourceFormat::Parquet => {
            ParquetReadOptions::default().to_listing_options(config, table_options)
        }
        SourceFormat::Csv => CsvReadOptions::new()
            .has_header(src.csv.header)
            .delimiter(src.csv.delimiter)
            .to_listing_options(config, table_options),
        SourceFormat::Json => JsonReadOptions::default().to_listing_options(config, table_options),
        SourceFormat::Arrow => {
            ArrowReadOptions::default().to_listing_options(config, table_options)
        }
    };
    opts.file_extension = String::new();
    opts
}

pub use tessera_transform::sql::quote_ident;

/// True for transforms whose parameters come from the statistics pass.
pub fn needs_stats(t: &Transform) -> bool {
    t.needs_stats()
}

/// How the planner runs.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// Build threads.
    pub threads: usize,
    /// Rows per DataFusion batch.
    pub batch_rows: usize,
    /// Memory the query engine may use (global queries; chunk tasks share it).
    pub memory_limit: u64,
    /// Where a global query spills and materializes its output.
    pub work_dir: Option<PathBuf>,
}

/// What `tessera explain` prints.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Explanation {
    /// The chunking decision.
    pub decision: Decision,
    /// The optimized logical plan of the encode pass.
    pub logical_plan: String,
    /// Its physical plan.
    pub physical_plan: String,
    /// Why a global query runs in one partition, if it does.
    pub serial_reason: Option<String>,
    /// The chunks, described.
    pub chunks: Vec<String>,
    /// What the pushed-down filters let Parquet statistics skip, per source.
    pub pruning: Vec<String>,
}

/// A planned build: the sources, the decision, the chunks.
pub struct Planner {
    spec: Arc<Spec>,
    tables: BTreeMap<String, Arc<SourceTable>>,
    decision: Decision,
    serial_reason: Option<String>,
    chunks: Vec<Chunk>,
    opts: PlanOptions,
    logical: String,
    physical: String,
    logical_plan: LogicalPlan,
    /// A global query's materialized output and its cumulative batch rows.
    output: OnceLock<(PathBuf, Vec<u64>)>,
    /// The query's top-level ORDER BY keys over its output columns.
    query_order: Vec<String>,
    /// Why the query's ORDER BY is not the stored order, if it has one that
    /// is not.
    order_note: Option<String>,
    /// The query's output columns.
    query_schema: Option<datafusion::arrow::datatypes::Schema>,
}

impl Planner {
    /// Opens every source, plans the query, decides how to run it and cuts
    /// the chunks. Reads footers and headers, no data.
    pub fn new(spec: Arc<Spec>, opts: PlanOptions) -> Result<Self, PlanError> {
        let rt = exec::runtime(1)?;
        let probe = exec::session(&planning_options(&opts, None))?;
        let mut tables = BTreeMap::new();
        for src in &spec.sources {
            let t = rt
                .block_on(SourceTable::open(src, &probe))
                .map_err(|e| PlanError::Source {
                    key: format!("sources.{}.path", src.name),
                    message: e.to_string(),
                })?;
            tables.insert(src.name.clone(), Arc::new(t));
        }
        let sql = sql::pass_sql(&spec, sql::Columns::All, None);
        // The query's own ORDER BY, kept as the first keys of a global
        // query's stored order.
        // Its output columns and their types, which the serving transform
        // gives new rows before evaluating the fields.
        let (query_order, order_note, query_schema) = {
            let ctx = exec::session(&planning_options(&opts, None))?;
            sources::register(
                &ctx,
                tables
                    .values()
                    .map(|t| (Arc::clone(t), t.all_parts(), 1))
                    .collect(),
            )?;
            match rt.block_on(ctx.sql(&sql::inner_query(&spec))) {
                Ok(df) => (
                    sql::query_order(df.logical_plan()),
                    sql::unstored_order_note(df.logical_plan()),
                    Some(df.schema().as_arrow().clone()),
                ),
                Err(_) => (Vec::new(), None, None),
            }
        };
        let plan_with =
            |chunked: Option<&str>| -> Result<(LogicalPlan, Arc<dyn ExecutionPlan>), PlanError> {
                let ctx = exec::session(&planning_options(&opts, chunked.map(str::to_string)))?;
                sources::register(
                    &ctx,
                    tables
                        .values()
                        .map(|t| (Arc::clone(t), t.all_parts(), 1))
                        .collect(),
                )?;
                rt.block_on(async {
                    let df = ctx
                        .sql(&sql)
                        .await
                        .map_err(query_err("planning the query"))?;
                    let logical = df.logical_plan().clone();
                    let logical = ctx
                        .state()
                        .optimize(&logical)
                        .map_err(query_err("planning the query"))?;
                    let physical = ctx
                        .state()
                        .create_physical_plan(&logical)
                        .await
                        .map_err(query_err("planning the query"))?;
                    Ok((logical, physical))
                })
            };
        let planned =
            plan_with(None).and_then(|(l, p)| diagnose::check_deterministic(&l).map(|()| (l, p)));
        let (logical, physical) = match planned {
            Ok(plans) => plans,
            Err(e) => {
                // Point the error at the spec key whose SQL causes it.
                let ctx = exec::session(&planning_options(&opts, None))?;
                sources::register(
                    &ctx,
                    tables
                        .values()
                        .map(|t| (Arc::clone(t), t.all_parts(), 1))
                        .collect(),
                )?;
                return Err(diagnose::pin(&rt, &ctx, &spec, e));
            }
        };

        // Candidates: the marked source, else every source, largest first.
        let mut candidates: Vec<&Source> = match spec.sources.iter().find(|s| s.chunk) {
            Some(s) => vec![s],
            None => spec.sources.iter().collect(),
        };
        let size = |s: &Source| -> u64 {
            tables
                .get(&s.name)
                .map(|t| t.files.iter().map(|f| f.size).sum())
                .unwrap_or(0)
        };
        candidates.sort_by_key(|s| std::cmp::Reverse(size(s)));
        let mut decision = None;
        let mut first_obstacle = None;
        let mut chosen_plans = None;
        // The query's own ORDER BY is decided from the plan as written: the
        // optimizer drops a Sort without a LIMIT under the pass query, and a
        // chunked build would then store rows in input order.
        if !query_order.is_empty() {
            candidates.clear();
            first_obstacle = Some((
                "Sort".to_string(),
                "the query's ORDER BY orders rows across all chunks".to_string(),
            ));
        }
        for s in &candidates {
            if let Some(ob) = chunking::logical_obstacle(&logical, &s.name) {
                first_obstacle.get_or_insert(ob);
                continue;
            }
            let (l, p) = plan_with(Some(&s.name))?;
            if let Some(op) = chunking::physical_obstacle(p.as_ref(), &s.name) {
                first_obstacle.get_or_insert((
                    op.clone(),
                    format!(
                        "DataFusion's {op} does not keep the order of {:?}'s rows, so chunks \
                         would come out in a different order than the input",
                        s.name
                    ),
                ));
                continue;
            }
            decision = Some(Decision::Chunked {
                source: s.name.clone(),
            });
            chosen_plans = Some((l, p));
            break;
        }
        let decision = decision.unwrap_or_else(|| {
            let (operator, reason) =
                first_obstacle.unwrap_or_else(|| ("query".into(), "no source can be cut".into()));
            Decision::Global { operator, reason }
        });
        let (logical, physical) = chosen_plans.unwrap_or((logical, physical));
        let serial_reason = match decision {
            Decision::Global { .. } => chunking::order_sensitive(&logical),
            Decision::Chunked { .. } => None,
        };
        let chunks = match &decision {
            Decision::Chunked { source } => match tables.get(source) {
                Some(t) => chunking::cut(t, spec.chunks.target_bytes)?,
                None => Vec::new(),
            },
            Decision::Global { .. } => Vec::new(),
        };
        Ok(Planner {
            logical: format!("{}", logical.display_indent()),
            logical_plan: logical.clone(),
            physical: format!("{}\n", displayable(physical.as_ref()).indent(true))
                .replace("\n\n", "\n"),
            spec,
            tables,
            decision,
            serial_reason,
            chunks,
            opts,
            output: OnceLock::new(),
            query_order,
            order_note,
            query_schema,
        })
    }

    /// The query's output columns (what the fields read), with their types.
    pub fn query_schema(&self) -> Option<&datafusion::arrow::datatypes::Schema> {
        self.query_schema.as_ref()
    }

    /// Why the query's own ORDER BY is not the stored order, if it is not.
    pub fn order_note(&self) -> Option<&str> {
        self.order_note.as_deref()
    }

    /// How the query runs.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Why a global query runs in one partition (its result could depend on
    /// the order rows arrive in), if it does.
    pub fn serial_reason(&self) -> Option<&str> {
        self.serial_reason.as_deref()
    }

    /// The tasks' inputs: chunks of the chunked source, or (for a global
    /// query, after [`Planner::materialize`]) row ranges of its output.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// The plans and chunks, for `tessera explain`.
    pub fn explain(&self) -> Explanation {
        Explanation {
            decision: self.decision.clone(),
            logical_plan: self.logical.clone(),
            physical_plan: self.physical.clone(),
            serial_reason: self.serial_reason.clone(),
            chunks: self.chunks.iter().map(|c| self.describe(c)).collect(),
            pruning: pruning::report(&self.logical_plan, &self.tables),
        }
    }

    /// A chunk, described for messages.
    pub fn describe(&self, chunk: &Chunk) -> String {
        chunk.describe(self.tables.get(&chunk.source).map(|t| t.as_ref()))
    }

    /// Empty statistics whose vocabularies may hold a share of the memory
    /// limit before they spill sorted counts to the work directory.
    pub fn stats_partial(&self) -> StatsPartial {
        StatsPartial::with_spill(&self.spec, self.spill())
    }

    /// Where and how much vocabulary counts may hold before they spill.
    pub fn spill(&self) -> Option<vocab::SpillConfig> {
        self.opts.work_dir.as_ref().map(|dir| vocab::SpillConfig {
            dir: dir.clone(),
            budget: (self.opts.memory_limit / 4 / self.opts.threads.max(1) as u64) as usize,
        })
    }

    /// Most values a frozen vocabulary may hold: all vocabularies together
    /// are held in memory by every encode task, at about 100 bytes a value,
    /// within a quarter of the memory limit.
    pub fn max_vocab(&self) -> u64 {
        (self.opts.memory_limit / 4 / 100).max(1)
    }

    /// Whether any field needs a statistics pass.
    pub fn needs_stats(&self) -> bool {
        !StatsPartial::new(&self.spec).is_empty()
    }

    /// Runs a global query once over all inputs and stores its ordered
    /// output in `dir`; then cuts it into row ranges of about
    /// `rows_per_chunk` rows, which become [`Planner::chunks`].
    pub fn materialize(
        &mut self,
        dir: &Path,
        rows_per_chunk: u64,
        budget: Option<(&OutputBudget, u64)>,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<ScanMetrics, PlanError> {
        let threads = if self.serial_reason.is_some() {
            1
        } else {
            self.opts.threads.max(1)
        };
        let path = dir.join("query-output.arrow");
        let rt = exec::runtime(threads)?;
        let mut options = planning_options(&self.opts, None);
        options.partitions = threads;
        let ctx = exec::session(&options)?;
        let pruned = sources::register(
            &ctx,
            self.tables
                .values()
                .map(|t| {
                    let parts = whole_or_chunked(t, &self.spec, threads);
                    (Arc::clone(t), parts, threads)
                })
                .collect(),
        )?;
        // TESSERA_GLOBAL_ORDER=none skips the sort, for benchmarks/global_query.py
        // to measure what the determinism costs; its artifacts are not
        // reproducible and must not be used otherwise.
        let sorted = std::env::var("TESSERA_GLOBAL_ORDER").map_or(true, |v| v != "none");
        let sql = sql::pass_sql(
            &self.spec,
            sql::Columns::All,
            sorted.then_some(self.query_order.as_slice()),
        );
        let limit = self.opts.memory_limit;
        let (metrics, cumulative) = rt.block_on(async {
            let df = ctx
                .sql(&sql)
                .await
                .map_err(query_err("planning the query"))?;
            let plan = df
                .create_physical_plan()
                .await
                .map_err(query_err("planning the query"))?;
            let mut stream = execute_stream(Arc::clone(&plan), ctx.task_ctx()).map_err(|e| {
                PlanError::Query {
                    context: "running the query".into(),
                    message: exec::explain_resources(e, limit),
                }
            })?;
            let file = std::fs::File::create(&path).map_err(|e| PlanError::Query {
                context: path.display().to_string(),
                message: e.to_string(),
            })?;
            let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), &plan.schema())
                .map_err(|e| PlanError::Query {
                    context: path.display().to_string(),
                    message: e.to_string(),
                })?;
            let mut cumulative = vec![0u64];
            while let Some(batch) = stream.next().await {
                let batch = batch.map_err(|e| PlanError::Query {
                    context: "running the query".into(),
                    message: exec::explain_resources(e, limit),
                })?;
                if batch.num_rows() == 0 {
                    continue;
                }
                writer.write(&batch).map_err(|e| PlanError::Query {
                    context: path.display().to_string(),
                    message: e.to_string(),
                })?;
                let last = cumulative.last().copied().unwrap_or(0);
                cumulative.push(last + batch.num_rows() as u64);
                // Stop an exploding query early: its records would not fit.
                if let Some((budget, stride)) = budget {
                    let bytes = (last + batch.num_rows() as u64) * stride;
                    if bytes > budget.limit {
                        return Err(budget.exceeded(bytes));
                    }
                }
                progress(batch.num_rows() as u64);
            }
            writer.finish().map_err(|e| PlanError::Query {
                context: path.display().to_string(),
                message: e.to_string(),
            })?;
            let mut metrics = exec::collect_metrics(plan.as_ref());
            metrics.files_pruned += sources::count_pruned(pruned.values());
            Ok::<_, PlanError>((metrics, cumulative))
        })?;
        let total = cumulative.last().copied().unwrap_or(0);
        let per = rows_per_chunk.max(1);
        self.chunks = (0..total.div_ceil(per))
            .map(|k| Chunk {
                index: k as usize,
                source: String::new(),
                parts: Vec::new(),
                rows: Some((k * per, ((k + 1) * per).min(total))),
                bytes: 0,
            })
            .collect();
        let _ = self.output.set((path, cumulative));
        Ok(metrics)
    }

    /// Runs one pass over `chunk`, handing each batch of output to `sink`.
    fn run(
        &self,
        chunk: &Chunk,
        columns: sql::Columns,
        mut sink: impl FnMut(&RecordBatch) -> Result<(), PlanError>,
    ) -> Result<ScanMetrics, PlanError> {
        if let Some((start, end)) = chunk.rows {
            self.read_output(start, end, &mut sink)?;
            return Ok(ScanMetrics::default());
        }
        let what = self.describe(chunk);
        let rt = exec::runtime(1)?;
        let ctx = exec::session(&SessionOptions {
            partitions: 1,
            batch_rows: self.opts.batch_rows,
            memory_limit: self.opts.memory_limit / self.opts.threads.max(1) as u64,
            spill_dir: self.opts.work_dir.clone(),
            chunked: Some(chunk.source.clone()),
        })?;
        let pruned = sources::register(
            &ctx,
            self.tables
                .values()
                .map(|t| {
                    let parts: Vec<FilePart> = if t.name == chunk.source {
                        chunk.parts.clone()
                    } else {
                        t.all_parts()
                    };
                    (Arc::clone(t), parts, 1)
                })
                .collect(),
        )?;
        let sql = sql::pass_sql(&self.spec, columns, None);
        let limit = self.opts.memory_limit;
        rt.block_on(async {
            let df = ctx
                .sql(&sql)
                .await
                .map_err(query_err(format!("{what}: planning the query")))?;
            let plan = df
                .create_physical_plan()
                .await
                .map_err(query_err(format!("{what}: planning the query")))?;
            let mut stream = execute_stream(Arc::clone(&plan), ctx.task_ctx())
                .map_err(query_err(format!("{what}: running the query")))?;
            while let Some(batch) = stream.next().await {
                let batch = batch.map_err(|e| PlanError::Query {
                    context: format!("{what}: running the query"),
                    message: exec::explain_resources(e, limit),
                })?;
                sink(&batch)?;
            }
            // Only the chunked source's files: the others are read whole by
            // every chunk and would be counted once per chunk.
            let mut metrics = exec::collect_metrics(plan.as_ref());
            metrics.files_pruned += sources::count_pruned(pruned.get(&chunk.source));
            Ok(metrics)
        })
    }

    /// Rows `start..end` of the materialized output.
    fn read_output(
        &self,
        start: u64,
        end: u64,
        sink: &mut impl FnMut(&RecordBatch) -> Result<(), PlanError>,
    ) -> Result<(), PlanError> {
        let Some((path, cumulative)) = self.output.get() else {
            return Err(PlanError::Query {
                context: "the query output".into(),
                message: "read before the query ran".into(),
            });
        };
        let io = |e: String| PlanError::Query {
            context: path.display().to_string(),
            message: e,
        };
        let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
        let mut reader = FileReader::try_new(std::io::BufReader::new(file), None)
            .map_err(|e| io(e.to_string()))?;
        // Batch b holds rows cumulative[b]..cumulative[b + 1].
        let first = cumulative
            .partition_point(|&c| c <= start)
            .saturating_sub(1);
        reader.set_index(first).map_err(|e| io(e.to_string()))?;
        let mut at = cumulative[first];
        for batch in reader {
            let batch = batch.map_err(|e| io(e.to_string()))?;
            let n = batch.num_rows() as u64;
            let (lo, hi) = (start.max(at), end.min(at + n));
            if lo < hi {
                sink(&batch.slice((lo - at) as usize, (hi - lo) as usize))?;
            }
            at += n;
            if at >= end {
                break;
            }
        }
        Ok(())
    }

    /// Adds the input file and line of a bad value to `e`, when the spec has
    /// no query (so query output rows are input rows, filtered) and the
    /// chunk is of a source that can tell: CSV (its line) or Parquet (its
    /// row). One extra pass over the chunk, only on error.
    fn with_input_row(&self, chunk: &Chunk, e: PlanError) -> PlanError {
        let PlanError::Encode {
            key,
            row: Some(row),
            context,
            message,
        } = e
        else {
            return e;
        };
        let located = self.locate_row(chunk, row).unwrap_or(context);
        PlanError::Encode {
            key,
            row: Some(row),
            context: located,
            message,
        }
    }

    /// The input file and line (or row) of row `row` of a chunk's output.
    fn locate_row(&self, chunk: &Chunk, row: u64) -> Option<String> {
        if self.spec.query.is_some() || chunk.rows.is_some() {
            return None;
        }
        let table = self.tables.get(&chunk.source)?;
        let (file_sql, line_sql, unit) = match table.format {
            SourceFormat::Csv => (
                quote_ident(csv::FILE_COLUMN),
                Some(quote_ident(csv::LINE_COLUMN)),
                "line",
            ),
            SourceFormat::Parquet => (
                "input_file_name()".to_string(),
                Some("file_row_index() + 1".to_string()),
                "row",
            ),
            _ => ("input_file_name()".to_string(), None, "row"),
        };
        let rt = exec::runtime(1).ok()?;
        let mut options = planning_options(&self.opts, Some(chunk.source.clone()));
        options.batch_rows = self.opts.batch_rows;
        let ctx = exec::session(&options).ok()?;
        let t =
            sources::FilesTable::new(Arc::clone(table), chunk.parts.clone(), 1).with_positions();
        ctx.register_table(table.name.as_str(), Arc::new(t)).ok()?;
        let mut sql = format!(
            "SELECT CAST({file_sql} AS VARCHAR) AS f, CAST({} AS BIGINT) AS l FROM {}",
            line_sql.as_deref().unwrap_or("NULL"),
            quote_ident(&table.name)
        );
        if let Some(filter) = &self.spec.filter {
            sql.push_str(&format!(" WHERE {filter}"));
        }
        let batches = rt
            .block_on(async { ctx.sql(&sql).await?.collect().await })
            .ok()?;
        let mut skip = row;
        for b in batches {
            let n = b.num_rows() as u64;
            if skip >= n {
                skip -= n;
                continue;
            }
            use datafusion::arrow::array::{Array, AsArray};
            let r = skip as usize;
            let files = datafusion::arrow::compute::cast(
                b.column(0),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .ok()?;
            let files = files.as_string_opt::<i32>()?;
            let lines = b
                .column(1)
                .as_primitive_opt::<datafusion::arrow::datatypes::Int64Type>()?;
            let file = files.is_valid(r).then(|| files.value(r).to_string())?;
            // input_file_name() gives the object-store path, without the root.
            let file = if file.starts_with('/') {
                file
            } else {
                format!("/{file}")
            };
            return Some(match lines.is_valid(r) {
                true if unit == "line" => format!("{file}:{}", lines.value(r)),
                true => format!("{file}, {unit} {}", lines.value(r)),
                false => file,
            });
        }
        None
    }

    /// The statistics pass over one chunk.
    pub fn stats_task(&self, chunk: &Chunk) -> Result<(StatsPartial, ScanMetrics), PlanError> {
        let mut partial = self.stats_partial();
        let what = self.describe(chunk);
        let mut first = 0u64;
        let metrics = self
            .run(chunk, sql::Columns::Stats, |batch| {
                let at = stats::Rows { what: &what, first };
                first += batch.num_rows() as u64;
                partial.update(&self.spec, batch, &at)
            })
            .map_err(|e| self.with_input_row(chunk, e))?;
        Ok((partial, metrics))
    }

    /// The encode pass over one chunk: records written into shards in `dir`
    /// with the frozen statistics applied.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_task(
        &self,
        chunk: &Chunk,
        layout: &tessera_reader::RecordLayout,
        frozen: &[Option<Vec<crate::accumulators::FrozenStats>>],
        dir: &Path,
        target_bytes: u64,
        budget: Option<&OutputBudget>,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(EncodeOutput, ScanMetrics), PlanError> {
        let mut enc =
            encode::Encoder::new(&self.spec, layout, frozen, dir, chunk.index, target_bytes)?
                .with_budget(budget);
        let what = self.describe(chunk);
        let metrics = self
            .run(chunk, sql::Columns::All, |batch| {
                let before = enc.bytes_written();
                enc.push(batch, &what)?;
                progress(batch.num_rows() as u64, enc.bytes_written() - before);
                Ok(())
            })
            .map_err(|e| self.with_input_row(chunk, e))?;
        Ok((enc.finish()?, metrics))
    }
}

fn planning_options(opts: &PlanOptions, chunked: Option<String>) -> SessionOptions {
    SessionOptions {
        partitions: 1,
        batch_rows: opts.batch_rows,
        memory_limit: opts.memory_limit,
        spill_dir: opts.work_dir.clone(),
        chunked,
    }
}

/// The parts a global query reads: the chunk cuts (so several partitions
/// share a large file), or whole files. A Parquet source is cut finer, to
/// about four parts per partition where its row groups allow, so that one
/// large file is scanned by every partition (cutting by row groups reads
/// nothing; a text file's cuts would have to be found by reading it). The
/// parts are contiguous and in order, so one partition reads the rows in
/// input order as before.
fn whole_or_chunked(t: &SourceTable, spec: &Spec, partitions: usize) -> Vec<FilePart> {
    let mut target = spec.chunks.target_bytes;
    if t.format == SourceFormat::Parquet && partitions > 1 {
        let total: u64 = t.files.iter().map(|f| f.size).sum();
        target = target.min((total / (4 * partitions as u64)).max(1));
    }
    match chunking::cut(t, target) {
        Ok(chunks) => chunks.into_iter().flat_map(|c| c.parts).collect(),
        Err(_) => t.all_parts(),
    }
}
