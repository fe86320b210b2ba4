//! Running a planned query: a global query materialized once, and a chunk's
//! statistics or encode task, with errors pointed at the input row.

use super::*;

impl Planner {
    /// Runs a global query once over all inputs and stores its ordered
    /// output in `dir`; then cuts it into row ranges of about
    /// `rows_per_chunk` rows, which become [`Planner::chunks`].
    pub fn materialize(
        &mut self,
        dir: &Path,
        rows_per_chunk: u64,
        budget: Option<(&OutputBudget, u64)>,
        staged: Option<&Staged>,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<ScanMetrics, PlanError> {
        let threads = if self.serial_reason.is_some() {
            1
        } else {
            self.opts.threads.max(1)
        };
        let path = dir.join("query-output.arrow");
        let rt = exec::runtime(threads)?;
        let partitions = staged.map_or(threads, |s| s.partitions);
        // TESSERA_GLOBAL_ORDER=none skips the sort, for benchmarks/global_query.py
        // to measure what the determinism costs; its artifacts are not
        // reproducible and must not be used otherwise.
        let sorted = std::env::var("TESSERA_GLOBAL_ORDER").map_or(true, |v| v != "none");
        let limit = self.opts.memory_limit;
        let (metrics, cumulative) = rt.block_on(async {
            let (ctx, plan, pruned) = self.global_plan(partitions, sorted).await?;
            let plan = match staged {
                Some(s) => self.staged_top(plan, s)?,
                None => plan,
            };
            let mut stream = execute_stream(Arc::clone(&plan), ctx.task_ctx())
                .map_err(|e| PlanError::from_datafusion("running the query", e, Some(limit)))?;
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
                let batch = batch
                    .map_err(|e| PlanError::from_datafusion("running the query", e, Some(limit)))?;
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

    /// The session and physical plan of the global query in `partitions`
    /// partitions (sorted into the stored order unless `sorted` is false),
    /// with what the scans pruned.
    pub(super) async fn global_plan(
        &self,
        partitions: usize,
        sorted: bool,
    ) -> Result<
        (
            datafusion::prelude::SessionContext,
            Arc<dyn ExecutionPlan>,
            BTreeMap<String, sources::PrunedFiles>,
        ),
        PlanError,
    > {
        let mut options = planning_options(&self.opts, None);
        options.partitions = partitions;
        options.dynamic_filters = false;
        let ctx = exec::session(&options)?;
        let pruned = sources::register(
            &ctx,
            self.tables
                .values()
                .map(|t| {
                    let parts = whole_or_chunked(t, &self.spec, partitions);
                    (Arc::clone(t), parts, partitions)
                })
                .collect(),
        )?;
        let sql = sql::pass_sql(
            &self.spec,
            sql::Columns::All,
            sorted.then_some(self.query_order.as_slice()),
        );
        let df = ctx
            .sql(&sql)
            .await
            .map_err(query_err("planning the query"))?;
        let plan = df
            .create_physical_plan()
            .await
            .map_err(query_err("planning the query"))?;
        Ok((ctx, plan, pruned))
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
            dynamic_filters: true,
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
                let batch = batch.map_err(|e| {
                    PlanError::from_datafusion(format!("{what}: running the query"), e, Some(limit))
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
