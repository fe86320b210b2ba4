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
mod decide;
mod decimal;
mod decimal_avg;
mod diagnose;
mod encode;
pub mod engine;
pub(crate) mod exact_float;
pub(crate) mod exec;
mod join_modes;
mod pruning;
pub mod rows;
mod run;
mod semi_join;
pub mod sources;
mod sql;
mod staged;
pub mod stages;
mod stats;
mod store;
mod vocab;

pub use chunking::{Chunk, Decision};
pub use encode::{EncodeOutput, OutputBudget};
pub use staged::{StageNeeds, Staged};
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
    /// The query names a column that its input does not have (DataFusion's
    /// `FieldNotFound`).
    #[error("{context}: {message}")]
    MissingColumn {
        /// What was being done.
        context: String,
        /// The column as the query's SQL resolved it.
        column: String,
        /// What is wrong: the column, a near name, the columns there are.
        message: String,
    },
    /// A checked integer operation or text-to-number cast failed on a value
    /// (see `checked`).
    #[error("{context}: {what}{}{detail}", column.as_deref().map(|c| format!(" in {c}")).unwrap_or_default())]
    Checked {
        /// What was being done.
        context: String,
        /// The pass column it happened in (`__f3`, `__split`), if any.
        column: Option<String>,
        /// `integer overflow`, `division by zero`, `cast failed`.
        what: &'static str,
        /// The rest of the message (`: ...`), or nothing.
        detail: String,
    },
}

impl PlanError {
    /// A DataFusion error, by what it is: a checked operation that failed,
    /// a missing column, a query out of memory under `limit` (the memory
    /// limit, when the query ran under one), or else DataFusion's message.
    pub(crate) fn from_datafusion(
        context: impl Into<String>,
        e: datafusion::error::DataFusionError,
        limit: Option<u64>,
    ) -> PlanError {
        use datafusion::error::DataFusionError as E;
        let context = context.into();
        match e.find_root() {
            E::External(x) => {
                if let Some(c) = x.downcast_ref::<checked::CheckedError>() {
                    return PlanError::Checked {
                        context,
                        column: c.column.clone(),
                        what: c.what,
                        detail: c.detail.clone(),
                    };
                }
            }
            E::SchemaError(se, _) => {
                if let datafusion::common::SchemaError::FieldNotFound {
                    field,
                    valid_fields,
                } = se.as_ref()
                {
                    return PlanError::MissingColumn {
                        context,
                        column: field.name.clone(),
                        message: missing_column_message(&field.name, valid_fields),
                    };
                }
            }
            E::ResourcesExhausted(m) => {
                if let Some(limit) = limit {
                    return PlanError::Query {
                        context,
                        message: format!(
                            "the query needs more memory than --memory-limit {} allows, and the \
                             operator holding it cannot spill to disk: {m}; raise --memory-limit",
                            crate::cache::format_bytes(limit)
                        ),
                    };
                }
            }
            _ => {}
        }
        PlanError::Query {
            context,
            message: e.to_string(),
        }
    }
}

/// A DataFusion error's message, in the spec's terms where its kind is
/// known (see [`PlanError::from_datafusion`]), without a context.
pub(crate) fn datafusion_message(e: datafusion::error::DataFusionError) -> String {
    match PlanError::from_datafusion(String::new(), e, None) {
        PlanError::MissingColumn { message, .. } | PlanError::Query { message, .. } => message,
        other => other.to_string().trim_start_matches(": ").to_string(),
    }
}

/// Whether DataFusion's SQL needs `name` in double quotes (it folds
/// unquoted names to lower case).
pub(crate) fn needs_quotes(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    !(first_ok && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
}

/// "No field named ...", in the spec's terms: the query's own columns (not
/// the build's internal `__input` relation), a near name, and for a name
/// that differs only in case, how SQL folds it.
fn missing_column_message(name: &str, valid: &[datafusion::common::Column]) -> String {
    let shown = |n: &str| {
        if needs_quotes(n) {
            format!("\"{n}\"")
        } else {
            n.to_string()
        }
    };
    let mut names: Vec<&str> = valid.iter().map(|c| c.name.as_str()).collect();
    names.dedup();
    let same_but_case = names
        .iter()
        .find(|n| n.eq_ignore_ascii_case(name) && **n != name && needs_quotes(n));
    let mut out = match same_but_case {
        Some(n) => format!(
            "No field named {}. Did you mean {}? Names are case-sensitive: write a column as \
             the data spells it; in SQL (expr, filter, query), unquoted names are folded to \
             lower case, so quote them (\"{n}\").",
            shown(name),
            shown(n)
        ),
        None => format!(
            "No field named {}{}.",
            shown(name),
            crate::spec::did_you_mean(name, &names)
        ),
    };
    if !names.is_empty() {
        let list: Vec<String> = names.iter().map(|n| shown(n)).collect();
        out.push_str(&format!(" The query's columns are: {}.", list.join(", ")));
    }
    out
}

pub(crate) fn query_err(
    context: impl Into<String>,
) -> impl FnOnce(datafusion::error::DataFusionError) -> PlanError {
    let context = context.into();
    move |e| PlanError::from_datafusion(context, e, None)
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
}

fn planning_options(opts: &PlanOptions, chunked: Option<String>) -> SessionOptions {
    SessionOptions {
        partitions: 1,
        batch_rows: opts.batch_rows,
        memory_limit: opts.memory_limit,
        spill_dir: opts.work_dir.clone(),
        chunked,
        dynamic_filters: true,
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::Column;

    fn cols(names: &[&str]) -> Vec<Column> {
        names
            .iter()
            .map(|n| Column::new(Some("__input"), *n))
            .collect()
    }

    #[test]
    fn a_missing_column_is_told_in_the_specs_terms() {
        let valid = cols(&["Carat", "depth", "Culmen Depth (mm)"]);
        // An unquoted name folded to lower case: how to quote it.
        let m = missing_column_message("carat", &valid);
        assert!(
            m.starts_with("No field named carat. Did you mean \"Carat\"?"),
            "{m}"
        );
        assert!(m.contains("quote them (\"Carat\")"), "{m}");
        assert!(
            m.ends_with("The query's columns are: \"Carat\", depth, \"Culmen Depth (mm)\"."),
            "{m}"
        );
        // A typo: the near name, no case advice; no internal relation.
        let m = missing_column_message("Culmen Dept (mm)", &valid);
        assert!(
            m.starts_with(
                "No field named \"Culmen Dept (mm)\" (did you mean \"Culmen Depth (mm)\"?)."
            ),
            "{m}"
        );
        assert!(
            !m.contains("case-sensitive") && !m.contains("__input"),
            "{m}"
        );
        assert!(needs_quotes("Carat") && needs_quotes("a b") && needs_quotes("1x"));
        assert!(!needs_quotes("depth") && !needs_quotes("_x1"));
    }

    #[test]
    fn datafusion_errors_become_typed_plan_errors() {
        use datafusion::error::DataFusionError;
        let checked = DataFusionError::External(Box::new(checked::CheckedError {
            column: Some("__f2".into()),
            what: "integer overflow",
            detail: ": 1 + 2".into(),
        }));
        // Wrapped as DataFusion wraps errors from a stream.
        let wrapped = DataFusionError::Context("running".into(), Box::new(checked));
        match PlanError::from_datafusion("running the query", wrapped, Some(1 << 30)) {
            PlanError::Checked { column, what, .. } => {
                assert_eq!(
                    (column.as_deref(), what),
                    (Some("__f2"), "integer overflow")
                );
            }
            other => panic!("{other:?}"),
        }
        let oom = DataFusionError::ResourcesExhausted("Failed to allocate".into());
        let e = PlanError::from_datafusion("running the query", oom, Some(1 << 30)).to_string();
        assert!(
            e.contains("--memory-limit 1.00 GiB") || e.contains("--memory-limit"),
            "{e}"
        );
        assert!(e.contains("raise --memory-limit"), "{e}");
    }
}
