//! Hash joins of a global query whose work may be cut into tasks.
//!
//! With the sizes of its inputs (see `sources`), DataFusion collects a small
//! side of a hash join whole (`CollectLeft`) and streams the other side's
//! partitions past it. For a join that also emits the collected side's
//! unmatched rows (`LEFT`, `FULL`, and the semi, anti and mark joins that
//! keep that side's rows), the partitions share one record of which
//! collected rows matched, and the last partition to finish emits the rest.
//! When a global query's stages run as separate tasks ([`super::stages`]),
//! each task would keep its own record and emit unmatched rows that another
//! task's partition matched. [`PartitionedUnmatched`] gives such joins
//! DataFusion's `Partitioned` mode instead (both sides hashed on the join
//! keys, each partition complete on its own), in every global query, so a
//! query has one plan whether one process runs it or many tasks do. A
//! null-aware anti join (`NOT IN`) stays collected: one NULL anywhere in
//! the other side empties it, which no single hash partition can see.

use datafusion::common::JoinType;
use datafusion::common::Result as DfResult;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use std::sync::Arc;

/// Whether a join of `join_type` emits rows of its collected (left) side
/// that no row of the other side matched, once every partition is done.
pub(crate) fn emits_unmatched_collected_rows(join_type: JoinType) -> bool {
    matches!(
        join_type,
        JoinType::Left
            | JoinType::Full
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::LeftMark
    )
}

/// The rule (see the module). Runs right after DataFusion's join selection,
/// before the distribution each join needs is enforced.
#[derive(Debug)]
pub(crate) struct PartitionedUnmatched;

impl PhysicalOptimizerRule for PartitionedUnmatched {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            // A null-aware anti join (`NOT IN`) must see every row of the
            // other side for a NULL, which only collecting gives: it keeps
            // its mode, and its query runs as one task (see `stages`).
            if *join.partition_mode() != PartitionMode::CollectLeft
                || !emits_unmatched_collected_rows(*join.join_type())
                || join.null_aware
            {
                return Ok(Transformed::no(node));
            }
            let partitioned = join
                .builder()
                .with_partition_mode(PartitionMode::Partitioned)
                .build()?;
            Ok(Transformed::yes(
                Arc::new(partitioned) as Arc<dyn ExecutionPlan>
            ))
        })
        .data()
    }

    fn name(&self) -> &str {
        "tessera_partitioned_unmatched"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
