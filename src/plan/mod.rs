//! Everything that touches DataFusion and Arrow lives under this module, so a
//! DataFusion upgrade changes one place.
//!
//! A build task runs its own single-partition DataFusion session over one
//! chunk of the chunked source (the other sources are read whole), so each
//! task's row order is fixed by the data, not by thread scheduling.

mod encode;

pub use encode::{EncodeOutput, StatsPartial};

use crate::spec::{FieldInput, Source, SourceFormat, Spec, Transform};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::file_format::options::{
    ArrowReadOptions, CsvReadOptions, JsonReadOptions, ParquetReadOptions, ReadOptions,
};
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// A value could not be encoded into its field.
    #[error("{context}: {message}")]
    Encode {
        /// Chunk and field.
        context: String,
        /// What is wrong, naming the row.
        message: String,
    },
    /// Writing a shard failed.
    #[error(transparent)]
    Write(#[from] tessera_reader::Error),
}

fn query_err(
    context: impl Into<String>,
) -> impl FnOnce(datafusion::error::DataFusionError) -> PlanError {
    let context = context.into();
    move |e| PlanError::Query {
        context,
        message: e.to_string(),
    }
}

/// One unit of work: a slice of the chunked source's files. Plain data, so the
/// same task can later be shipped to another machine.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Chunk {
    /// Position in the build's chunk list; fixes the output order.
    pub index: usize,
    /// Name of the source that is cut into chunks.
    pub source: String,
    /// The files of that source read by this chunk, in input order.
    pub files: Vec<PathBuf>,
}

impl Chunk {
    /// A short description for messages: the chunk's first file.
    pub fn describe(&self) -> String {
        match self.files.as_slice() {
            [one] => format!("chunk {} ({})", self.index, one.display()),
            [first, ..] => format!(
                "chunk {} ({} and {} more)",
                self.index,
                first.display(),
                self.files.len() - 1
            ),
            [] => format!("chunk {}", self.index),
        }
    }
}

/// Counters read from an executed plan's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanMetrics {
    /// Rows decoded by the scans: after file, row-group and page pruning,
    /// before row-level filtering (output rows plus rows the pushed-down
    /// filter removed inside the decoder).
    pub rows_scanned: u64,
    /// Parquet row groups skipped by min/max statistics.
    pub row_groups_pruned: u64,
    /// Parquet row groups read.
    pub row_groups_matched: u64,
    /// Whole Parquet files (or file ranges) skipped by their statistics.
    pub files_pruned: u64,
    /// Rows removed inside the Parquet decoder by pushed-down filters.
    pub rows_pruned_in_scan: u64,
    /// Bytes read from files.
    pub bytes_scanned: u64,
}

impl ScanMetrics {
    /// Adds another task's counters.
    pub fn add(&mut self, o: &ScanMetrics) {
        self.rows_scanned += o.rows_scanned;
        self.row_groups_pruned += o.row_groups_pruned;
        self.row_groups_matched += o.row_groups_matched;
        self.files_pruned += o.files_pruned;
        self.rows_pruned_in_scan += o.rows_pruned_in_scan;
        self.bytes_scanned += o.bytes_scanned;
    }
}

/// The schemas of all sources, inferred once by the driver and handed to every
/// task so that chunks cannot disagree about column types.
#[derive(Clone, Debug)]
pub struct Schemas(BTreeMap<String, SchemaRef>);

/// What the chunk tasks need besides their chunk.
pub struct Planner {
    spec: Arc<Spec>,
    schemas: Schemas,
    chunked: Option<String>,
    batch_rows: usize,
}

fn session(batch_rows: usize) -> SessionContext {
    let mut config = SessionConfig::new()
        .with_target_partitions(1)
        .with_batch_size(batch_rows)
        .with_information_schema(false);
    let opts = config.options_mut();
    opts.execution.parquet.pushdown_filters = true;
    opts.execution.parquet.reorder_filters = true;
    SessionContext::new_with_config(config)
}

fn runtime() -> Result<tokio::runtime::Runtime, PlanError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| PlanError::Query {
            context: "starting the query runtime".into(),
            message: e.to_string(),
        })
}

fn listing_options(src: &Source, config: &SessionConfig) -> ListingOptions {
    let table_options =
        datafusion::config::TableOptions::default_from_session_config(config.options());
    let mut opts = match src.format {
        SourceFormat::Parquet => {
            ParquetReadOptions::default().to_listing_options(config, table_options)
        }
        SourceFormat::Csv => {
            let null_regex = if src.csv.null_values.is_empty() {
                None
            } else {
                let alts: Vec<String> = src
                    .csv
                    .null_values
                    .iter()
                    .map(|v| regex_escape(v))
                    .collect();
                Some(format!("^(?:{})$", alts.join("|")))
            };
            let mut o = CsvReadOptions::new()
                .has_header(src.csv.header)
                .delimiter(src.csv.delimiter)
                .null_regex(null_regex);
            o.schema_infer_max_records = 1_000_000;
            o.to_listing_options(config, table_options)
        }
        SourceFormat::Json => JsonReadOptions::default().to_listing_options(config, table_options),
        SourceFormat::Arrow => {
            ArrowReadOptions::default().to_listing_options(config, table_options)
        }
    };
    // Files are named explicitly; do not filter them by extension.
    opts.file_extension = String::new();
    if !src.partition_columns.is_empty() {
        opts.table_partition_cols = src
            .partition_columns
            .iter()
            .map(|c| (c.clone(), DataType::Utf8))
            .collect();
    }
    opts
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn url_of(path: &Path) -> Result<ListingTableUrl, PlanError> {
    let s = path.to_string_lossy();
    ListingTableUrl::parse(s.as_ref()).map_err(query_err(format!("{}", path.display())))
}

/// The root directory of a hive-partitioned source (its files' common prefix
/// above the partition folders).
fn hive_root(src: &Source) -> PathBuf {
    let mut root = match src.files.first() {
        Some(f) => f.clone(),
        None => return PathBuf::from("."),
    };
    root.pop();
    for _ in &src.partition_columns {
        root.pop();
    }
    root
}

/// Quotes an identifier for DataFusion SQL (which lowercases bare names).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Planner {
    /// Infers every source's schema (from its first file; CSV from up to a
    /// million rows) and fixes which source is cut into chunks.
    pub fn new(spec: Arc<Spec>, batch_rows: usize) -> Result<Self, PlanError> {
        let rt = runtime()?;
        let ctx = session(batch_rows);
        let mut schemas = BTreeMap::new();
        for src in &spec.sources {
            let opts = listing_options(src, &ctx.copied_config());
            let first = src.files.first().ok_or_else(|| PlanError::Query {
                context: format!("source {:?}", src.name),
                message: "no input files".into(),
            })?;
            let url = url_of(first)?;
            let schema = rt
                .block_on(opts.infer_schema(&ctx.state(), &url))
                .map_err(query_err(format!(
                    "source {:?}: reading the schema of {}",
                    src.name,
                    first.display()
                )))?;
            schemas.insert(src.name.clone(), schema);
        }
        let chunked = if let Some(s) = spec.sources.iter().find(|s| s.chunk) {
            Some(s.name.clone())
        } else {
            // The largest source (by bytes) is cut; the others are read whole.
            spec.sources
                .iter()
                .filter(|s| s.partition_columns.is_empty())
                .max_by_key(|s| {
                    s.files
                        .iter()
                        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
                        .sum::<u64>()
                })
                .map(|s| s.name.clone())
        };
        Ok(Planner {
            spec,
            schemas: Schemas(schemas),
            chunked,
            batch_rows,
        })
    }

    /// The chunks of the build: one per file of the chunked source, in input
    /// order (a hive-partitioned or single-file source gives one chunk).
    pub fn chunks(&self) -> Vec<Chunk> {
        let Some(name) = &self.chunked else {
            return vec![Chunk {
                index: 0,
                source: String::new(),
                files: vec![],
            }];
        };
        let Some(src) = self.spec.sources.iter().find(|s| &s.name == name) else {
            return vec![];
        };
        src.files
            .iter()
            .enumerate()
            .map(|(index, f)| Chunk {
                index,
                source: name.clone(),
                files: vec![f.clone()],
            })
            .collect()
    }

    /// A session with every source registered; the chunked source restricted
    /// to `chunk`'s files.
    async fn context_for(&self, chunk: &Chunk) -> Result<SessionContext, PlanError> {
        let ctx = session(self.batch_rows);
        let config = ctx.copied_config();
        for src in &self.spec.sources {
            let opts = listing_options(src, &config);
            let urls = if !src.partition_columns.is_empty() {
                vec![url_of(&hive_root(src))?]
            } else if src.name == chunk.source {
                chunk
                    .files
                    .iter()
                    .map(|f| url_of(f))
                    .collect::<Result<_, _>>()?
            } else {
                src.files
                    .iter()
                    .map(|f| url_of(f))
                    .collect::<Result<_, _>>()?
            };
            let schema = self.schemas.0.get(&src.name).cloned();
            let mut cfg = ListingTableConfig::new_with_multi_paths(urls).with_listing_options(opts);
            if let Some(schema) = schema {
                cfg = cfg.with_schema(schema);
            }
            let table =
                ListingTable::try_new(cfg).map_err(query_err(format!("source {:?}", src.name)))?;
            ctx.register_table(src.name.as_str(), Arc::new(table))
                .map_err(query_err(format!("source {:?}", src.name)))?;
        }
        Ok(ctx)
    }

    /// The SQL for a pass: the selected field inputs and the split key over the
    /// spec's query, filtered.
    fn sql(&self, fields: &[usize], with_split: bool) -> String {
        let spec = &self.spec;
        let inner = match &spec.query {
            Some(q) => q.trim().trim_end_matches(';').to_string(),
            None => match spec.sources.first() {
                Some(s) => format!("SELECT * FROM {}", quote_ident(&s.name)),
                None => "SELECT 1".into(),
            },
        };
        let mut items = Vec::new();
        for &i in fields {
            let f = &spec.fields[i];
            let stringly = matches!(
                f.transforms.first(),
                Some(Transform::HashBucket { .. } | Transform::Vocab { .. })
            );
            let wrap = |e: String| {
                if stringly {
                    format!("CAST(({e}) AS VARCHAR)")
                } else {
                    e
                }
            };
            match &f.input {
                FieldInput::Column(c) => {
                    items.push(format!("{} AS \"__f{i}\"", wrap(quote_ident(c))))
                }
                FieldInput::Expr(e) => {
                    items.push(format!("{} AS \"__f{i}\"", wrap(format!("({e})"))))
                }
                FieldInput::Columns(cs) => {
                    for (j, c) in cs.iter().enumerate() {
                        items.push(format!("{} AS \"__f{i}_{j}\"", wrap(quote_ident(c))));
                    }
                }
            }
        }
        if with_split && let Some(split) = &spec.split {
            items.push(format!("CAST(({}) AS VARCHAR) AS \"__split\"", split.key));
        }
        if items.is_empty() {
            items.push("1 AS \"__one\"".into());
        }
        let mut sql = format!("SELECT {} FROM ({inner}) AS \"__input\"", items.join(", "));
        if let Some(filter) = &spec.filter {
            sql.push_str(&format!(" WHERE {filter}"));
        }
        sql
    }

    /// Plans and runs one pass over `chunk`, handing each output batch to
    /// `sink`; returns the scan counters.
    fn run<F>(
        &self,
        chunk: &Chunk,
        fields: &[usize],
        with_split: bool,
        mut sink: F,
    ) -> Result<ScanMetrics, PlanError>
    where
        F: FnMut(&RecordBatch) -> Result<(), PlanError>,
    {
        let what = chunk.describe();
        let rt = runtime()?;
        rt.block_on(async {
            let ctx = self.context_for(chunk).await?;
            let sql = self.sql(fields, with_split);
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
                let batch = batch.map_err(query_err(format!("{what}: running the query")))?;
                sink(&batch)?;
            }
            let mut m = collect_metrics(plan.as_ref());
            m.rows_scanned += m.rows_pruned_in_scan;
            Ok(m)
        })
    }

    /// Fields whose transforms need statistics, in field order.
    pub fn stats_fields(&self) -> Vec<usize> {
        self.spec
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.transforms.iter().any(needs_stats))
            .map(|(i, _)| i)
            .collect()
    }

    /// The statistics pass over one chunk: partial statistics of the fields
    /// that need them, over the rows of the statistics split.
    pub fn stats_task(&self, chunk: &Chunk) -> Result<(StatsPartial, ScanMetrics), PlanError> {
        let fields = self.stats_fields();
        let mut partial = StatsPartial::new(&self.spec, &fields);
        let ctx = chunk.describe();
        let metrics = self.run(chunk, &fields, true, |batch| {
            partial.update(&self.spec, batch, &ctx)
        })?;
        Ok((partial, metrics))
    }

    /// The encode pass over one chunk: records written into shards in `dir`
    /// with the frozen statistics applied.
    pub fn encode_task(
        &self,
        chunk: &Chunk,
        layout: &tessera_reader::RecordLayout,
        frozen: &[Option<Vec<crate::transform::FrozenStats>>],
        dir: &Path,
        target_bytes: u64,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(EncodeOutput, ScanMetrics), PlanError> {
        let fields: Vec<usize> = (0..self.spec.fields.len()).collect();
        let mut enc =
            encode::Encoder::new(&self.spec, layout, frozen, dir, chunk.index, target_bytes);
        let ctx = chunk.describe();
        let metrics = self.run(chunk, &fields, true, |batch| {
            let before = enc.bytes_written();
            enc.push(batch, &ctx)?;
            progress(batch.num_rows() as u64, enc.bytes_written() - before);
            Ok(())
        })?;
        Ok((enc.finish()?, metrics))
    }
}

/// True for transforms whose parameters come from the statistics pass.
pub fn needs_stats(t: &Transform) -> bool {
    matches!(
        t,
        Transform::Standardize | Transform::MinMax | Transform::Vocab { .. }
    )
}

/// Sums scan metrics over every node of an executed plan.
fn collect_metrics(plan: &dyn ExecutionPlan) -> ScanMetrics {
    let mut m = ScanMetrics::default();
    let mut stack: Vec<&dyn ExecutionPlan> = vec![plan];
    while let Some(node) = stack.pop() {
        let is_scan = node.name() == "DataSourceExec";
        if let Some(set) = node.metrics() {
            for metric in set.iter() {
                match metric.value() {
                    MetricValue::PruningMetrics {
                        name,
                        pruning_metrics,
                    } if name == "row_groups_pruned_statistics" => {
                        m.row_groups_pruned += pruning_metrics.pruned() as u64;
                        m.row_groups_matched += pruning_metrics.matched() as u64;
                    }
                    MetricValue::PruningMetrics {
                        name,
                        pruning_metrics,
                    } if name == "files_ranges_pruned_statistics" => {
                        m.files_pruned += pruning_metrics.pruned() as u64;
                    }
                    MetricValue::OutputRows(c) if is_scan => m.rows_scanned += c.value() as u64,
                    v if v.name() == "pushdown_rows_pruned" => {
                        m.rows_pruned_in_scan += v.as_usize() as u64
                    }
                    v if v.name() == "bytes_scanned" => m.bytes_scanned += v.as_usize() as u64,
                    _ => {}
                }
            }
        }
        for child in node.children() {
            stack.push(child.as_ref());
        }
    }
    m
}
