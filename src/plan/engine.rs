//! The SQL engine of the serving transform inside the `tessera` command: an
//! embedded DataFusion session with the build's rules (checked integer
//! arithmetic), for field expressions the transform crate does not evaluate
//! itself (functions, CASE, ...).

use super::exec::{self, SessionOptions};
use super::quote_ident;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use std::sync::Arc;
use tessera_transform::SqlEngine;

/// Runs a transform's SQL through DataFusion.
pub struct DataFusionEngine {
    rt: tokio::runtime::Runtime,
}

impl DataFusionEngine {
    /// A single-threaded engine.
    pub fn new() -> Result<Self, super::PlanError> {
        Ok(DataFusionEngine {
            rt: exec::runtime(1)?,
        })
    }
}

impl SqlEngine for DataFusionEngine {
    fn select(
        &self,
        input: RecordBatch,
        items: &[(String, String)],
        filter: Option<&str>,
    ) -> Result<RecordBatch, String> {
        let ctx = exec::session(&SessionOptions {
            partitions: 1,
            batch_rows: input.num_rows().max(1),
            memory_limit: crate::resources::default_memory_limit(),
            spill_dir: None,
            chunked: None,
            dynamic_filters: true,
        })
        .map_err(|e| e.to_string())?;
        let schema = input.schema();
        let table =
            MemTable::try_new(Arc::clone(&schema), vec![vec![input]]).map_err(|e| e.to_string())?;
        ctx.register_table("__input", Arc::new(table))
            .map_err(|e| e.to_string())?;
        let select: Vec<String> = items
            .iter()
            .map(|(sql, alias)| format!("{sql} AS {}", quote_ident(alias)))
            .collect();
        let mut sql = format!("SELECT {} FROM \"__input\"", select.join(", "));
        if let Some(f) = filter {
            sql.push_str(&format!(" WHERE {f}"));
        }
        self.rt.block_on(async {
            let df = ctx.sql(&sql).await.map_err(|e| e.to_string())?;
            let out_schema = Arc::new(df.schema().as_arrow().clone());
            let batches = df.collect().await.map_err(|e| e.to_string())?;
            concat_batches(&out_schema, &batches).map_err(|e| e.to_string())
        })
    }
}
