//! Running queries: DataFusion sessions for chunk tasks and global queries,
//! the rules tessera adds to DataFusion's, and the scan counters read
//! back from an executed plan.
//!
//! - [`OrientJoins`] (physical): in a chunk task, every hash join puts the
//!   chunked source on its probe side, whose row order it keeps, so a chunk's
//!   output follows its input order.
//! - [`PartitionedUnmatched`](super::join_modes::PartitionedUnmatched)
//!   (physical): in a global query over several partitions, a hash join that
//!   emits its collected side's unmatched rows runs partitioned.
//! - [`PushSemiJoins`](super::semi_join::PushSemiJoins) (logical): a semi
//!   or anti join from `IN`/`EXISTS` moves below the inner joins to the
//!   input it filters.
//! - [`CheckedArithmetic`](super::checked::CheckedArithmetic) (logical):
//!   integer arithmetic fails on overflow instead of wrapping around, and
//!   its errors name the field they happen in (see `checked`).

use super::sources::scan_source;
use super::{PlanError, ScanMetrics, query_err};
use datafusion::arrow::compute::SortOptions;
use datafusion::common::Result as DfResult;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::TaskContext;
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use std::path::PathBuf;
use std::sync::Arc;

/// How a session runs.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// DataFusion partitions (1 for chunk tasks: one ordered stream).
    pub partitions: usize,
    /// Rows per batch.
    pub batch_rows: usize,
    /// Bytes the session's operators may hold before spilling or failing.
    pub memory_limit: u64,
    /// Where operators spill (a directory that the build removes).
    pub spill_dir: Option<PathBuf>,
    /// The chunked source of a chunk task: hash joins keep its order.
    pub chunked: Option<String>,
    /// Whether operators may push filters they learn while running into
    /// the scans (off for global queries, whose stages run apart).
    pub dynamic_filters: bool,
}

/// A session configured for tessera: filters pushed into the Parquet
/// scans (pruning; row-level filtering where it pays, see the table
/// provider), a memory pool of `memory_limit` bytes with spilling, integer
/// overflow checked, and for chunk tasks joins oriented to keep input order.
pub fn session(opts: &SessionOptions) -> Result<SessionContext, PlanError> {
    let mut config = SessionConfig::new()
        .with_target_partitions(opts.partitions.max(1))
        .with_batch_size(opts.batch_rows)
        .with_information_schema(false);
    {
        let o = config.options_mut();
        // Row-level filtering inside the Parquet decoder is decided per
        // scan (sources::table, `late_materialization`); off here, so that
        // a scan without it still prunes row groups and pages by the filter.
        o.execution.parquet.pushdown_filters = false;
        o.execution.parquet.reorder_filters = true;
        // One 64 KiB read at a file's end holds most footers. DataFusion's
        // default (512 KiB) fetches a small remote file whole just to read
        // its footer, defeating row-group pruning.
        o.execution.parquet.metadata_size_hint = Some(64 << 10);
        // The table provider cuts files itself, exactly as planned.
        o.optimizer.repartition_file_scans = false;
        // A filter that one operator hands to a scan while both run (a
        // join's build side, a top-k) cannot cross a stage boundary: a
        // global query runs without them, so that its scan counters are
        // the same whether one process runs it or its stages run as tasks
        // (measured in benches/tpch.py: within noise at SF 1).
        o.optimizer.enable_dynamic_filter_pushdown = opts.dynamic_filters;
        o.optimizer.enable_topk_dynamic_filter_pushdown = opts.dynamic_filters;
        o.optimizer.enable_join_dynamic_filter_pushdown = opts.dynamic_filters;
        o.optimizer.enable_aggregate_dynamic_filter_pushdown = opts.dynamic_filters;
    }
    let disk = match &opts.spill_dir {
        Some(dir) => {
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Directories(vec![dir.clone()]))
        }
        None => DiskManagerBuilder::default(),
    };
    let limit = usize::try_from(opts.memory_limit).unwrap_or(usize::MAX);
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limit)))
        .with_disk_manager_builder(disk)
        .build_arc()
        .map_err(query_err("starting the query engine"))?;
    let local = datafusion::datasource::object_store::ObjectStoreUrl::local_filesystem();
    runtime.register_object_store(
        local.as_ref(),
        Arc::new(super::store::InlineLocalStore::default()),
    );
    crate::remote_input::register_stores(&runtime);
    let mut rules = PhysicalOptimizer::new().rules;
    if opts.chunked.is_none() && opts.partitions > 1 {
        let at = rules
            .iter()
            .position(|r| r.name() == "join_selection")
            .map_or(0, |i| i + 1);
        rules.insert(at, Arc::new(super::join_modes::PartitionedUnmatched));
    }
    if let Some(source) = &opts.chunked {
        let at = rules
            .iter()
            .position(|r| r.name() == "join_selection")
            .map_or(0, |i| i + 1);
        rules.insert(
            at,
            Arc::new(OrientJoins {
                source: source.clone(),
            }),
        );
        let at = rules
            .iter()
            .position(|r| r.name() == "SanityCheckPlan")
            .unwrap_or(rules.len());
        rules.insert(
            at,
            Arc::new(MarkOrderedProbes {
                source: source.clone(),
            }),
        );
    }
    let mut state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rules(rules)
        .with_analyzer_rule(Arc::new(super::checked::CheckedArithmetic))
        .with_optimizer_rule(Arc::new(super::semi_join::PushSemiJoins))
        .build();
    // Before type coercion: exact decimal averages and quotients.
    datafusion::execution::FunctionRegistry::register_function_rewrite(
        &mut state,
        Arc::new(super::decimal::ExactDecimals),
    )
    .map_err(query_err("starting the query engine"))?;
    // Float sums and averages as exact sums (any partitioning, same bytes).
    datafusion::execution::FunctionRegistry::register_function_rewrite(
        &mut state,
        Arc::new(super::exact_float::ExactFloatSums),
    )
    .map_err(query_err("starting the query engine"))?;
    Ok(SessionContext::new_with_state(state))
}

/// A global query's session over `partitions` partitions, for tests.
#[cfg(test)]
pub(crate) fn global_session(partitions: usize) -> SessionContext {
    session(&SessionOptions {
        partitions,
        batch_rows: 8192,
        memory_limit: 1 << 30,
        spill_dir: None,
        chunked: None,
        dynamic_filters: false,
    })
    .expect("session")
}

/// A single-threaded runtime for one task (DataFusion's own partitions run
/// on it as tasks; a chunk task has one).
pub fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, PlanError> {
    let mut b = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    b.enable_all().build().map_err(|e| PlanError::Query {
        context: "starting the query runtime".into(),
        message: e.to_string(),
    })
}

/// Puts the chunked source on the probe (right) side of every hash join
/// above it, where DataFusion keeps input order.
#[derive(Debug)]
struct OrientJoins {
    source: String,
}

fn reads(plan: &Arc<dyn ExecutionPlan>, source: &str) -> bool {
    scan_source(plan.as_ref()).as_deref() == Some(source)
        || plan.children().iter().any(|c| reads(c, source))
}

impl PhysicalOptimizerRule for OrientJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if reads(join.left(), &self.source)
                && !reads(join.right(), &self.source)
                && join.join_type().supports_swap()
            {
                // A null-aware anti join cannot be swapped; it then stays
                // as is and the chunking check finds the order not kept.
                if let Ok(swapped) = join.swap_inputs(PartitionMode::CollectLeft) {
                    return Ok(Transformed::yes(swapped));
                }
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "tessera_orient_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Puts an [`OrderedInput`] under the probe side of every hash join that
/// reads the chunked source, so that DataFusion emits the probe rows (matched
/// or not) in their input order. Runs last, after dynamic filters are set up.
#[derive(Debug)]
struct MarkOrderedProbes {
    source: String,
}

impl PhysicalOptimizerRule for MarkOrderedProbes {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let right = join.right();
            if !reads(right, &self.source)
                || right.downcast_ref::<OrderedInput>().is_some()
                || right.schema().fields().is_empty()
            {
                return Ok(Transformed::no(node));
            }
            let marked: Arc<dyn ExecutionPlan> = Arc::new(OrderedInput::new(Arc::clone(right)));
            let left = Arc::clone(join.left());
            Ok(Transformed::yes(replace_children_if_necessary(
                Arc::clone(&node),
                vec![left, marked],
            )?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "tessera_mark_ordered_probes"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A pass-through node that declares its input ordered. A hash join keeps the
/// order of its probe side (unmatched rows included) only when that side
/// declares an ordering; the rows of a chunk task's source arrive in input
/// order, and nothing in a chunk task's plan sorts or merges, so the
/// declaration only switches the join to its order-keeping mode.
#[derive(Debug)]
pub struct OrderedInput {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl OrderedInput {
    fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let schema = input.schema();
        let ordering = vec![PhysicalSortExpr::new(
            Arc::new(PhysicalColumn::new(schema.field(0).name(), 0)),
            SortOptions::default(),
        )];
        let eq = EquivalenceProperties::new_with_orderings(schema, [ordering]);
        let base = input.properties();
        let properties = Arc::new(PlanProperties::new(
            eq,
            base.output_partitioning().clone(),
            base.emission_type,
            base.boundedness,
        ));
        OrderedInput { input, properties }
    }
}

impl DisplayAs for OrderedInput {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "OrderedInput: rows in input order")
    }
}

impl ExecutionPlan for OrderedInput {
    fn name(&self) -> &'static str {
        "OrderedInput"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    #[allow(deprecated)]
    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match children.pop() {
            Some(c) if children.is_empty() => Ok(Arc::new(OrderedInput::new(c))),
            _ => Err(datafusion::error::DataFusionError::Internal(
                "OrderedInput takes one child".into(),
            )),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}

/// Sums scan counters over every node of an executed plan.
pub fn collect_metrics(plan: &dyn ExecutionPlan) -> ScanMetrics {
    let mut m = ScanMetrics::default();
    let mut stack: Vec<&dyn ExecutionPlan> = vec![plan];
    while let Some(node) = stack.pop() {
        let is_scan = matches!(node.name(), "DataSourceExec" | "CsvScanExec");
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
    m.rows_scanned += m.rows_pruned_in_scan;
    m
}
