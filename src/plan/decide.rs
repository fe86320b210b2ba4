//! Planning a build's query: the sources opened, the query planned, and the
//! decision how to run it (chunked by a source, or global) with its chunks.

use super::*;

impl Planner {
    /// Opens every source, plans the query, decides how to run it and cuts
    /// the chunks. Reads footers and headers, no data.
    pub fn new(spec: Arc<Spec>, opts: PlanOptions) -> Result<Self, PlanError> {
        let rt = exec::runtime(1)?;
        let tables = open_tables(&spec, &opts, &rt)?;
        let sql = sql::pass_sql(&spec, sql::Columns::All, None);
        let (query_order, order_note, query_schema) = query_facts(&spec, &opts, &rt, &tables)?;
        let plan_with = |chunked: Option<&str>| plan_sql(&opts, &rt, &tables, &sql, chunked);
        let planned =
            plan_with(None).and_then(|(l, p)| diagnose::check_deterministic(&l).map(|()| (l, p)));
        let (logical, physical) = match planned {
            Ok(plans) => plans,
            Err(e) => {
                // Point the error at the spec key whose SQL causes it.
                let ctx = session_with(&opts, None, &tables)?;
                return Err(diagnose::pin(&rt, &ctx, &spec, e));
            }
        };
        let (decision, chosen) = decide(
            &spec,
            &tables,
            &logical,
            !query_order.is_empty(),
            &plan_with,
        )?;
        let (logical, physical) = chosen.unwrap_or((logical, physical));
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
}

/// The logical and physical plans of a query.
type Plans = (LogicalPlan, Arc<dyn ExecutionPlan>);

/// Every source of the spec opened (files, schema, row groups), by name.
fn open_tables(
    spec: &Spec,
    opts: &PlanOptions,
    rt: &tokio::runtime::Runtime,
) -> Result<BTreeMap<String, Arc<SourceTable>>, PlanError> {
    let probe = exec::session(&planning_options(opts, None))?;
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
    Ok(tables)
}

/// A planning session (`chunked`: the source cut into chunks) with every
/// source registered whole, in one partition.
fn session_with(
    opts: &PlanOptions,
    chunked: Option<&str>,
    tables: &BTreeMap<String, Arc<SourceTable>>,
) -> Result<datafusion::execution::context::SessionContext, PlanError> {
    let ctx = exec::session(&planning_options(opts, chunked.map(str::to_string)))?;
    sources::register(
        &ctx,
        tables
            .values()
            .map(|t| (Arc::clone(t), t.all_parts(), 1))
            .collect(),
    )?;
    Ok(ctx)
}

/// What the user's query says by itself: its own ORDER BY (kept as the
/// first keys of a global query's stored order), a note when an ORDER BY
/// cannot be kept, and its output columns with their types (which the
/// serving transform gives new rows before evaluating the fields).
type QueryFacts = (
    Vec<String>,
    Option<String>,
    Option<datafusion::arrow::datatypes::Schema>,
);

fn query_facts(
    spec: &Spec,
    opts: &PlanOptions,
    rt: &tokio::runtime::Runtime,
    tables: &BTreeMap<String, Arc<SourceTable>>,
) -> Result<QueryFacts, PlanError> {
    let ctx = session_with(opts, None, tables)?;
    Ok(match rt.block_on(ctx.sql(&sql::inner_query(spec))) {
        Ok(df) => (
            sql::query_order(df.logical_plan()),
            sql::unstored_order_note(df.logical_plan()),
            Some(df.schema().as_arrow().clone()),
        ),
        Err(_) => (Vec::new(), None, None),
    })
}

/// The pass query `sql` planned and optimized (`chunked`: as a chunk task
/// of that source plans it).
fn plan_sql(
    opts: &PlanOptions,
    rt: &tokio::runtime::Runtime,
    tables: &BTreeMap<String, Arc<SourceTable>>,
    sql: &str,
    chunked: Option<&str>,
) -> Result<Plans, PlanError> {
    let ctx = session_with(opts, chunked, tables)?;
    rt.block_on(async {
        let df = ctx
            .sql(sql)
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
}

/// How the query runs: chunked by the first candidate source (the one the
/// spec marks, else every source, largest first) that nothing in the plan
/// stops from being cut, with the plans for it; else global, with the
/// first obstacle as the reason. `ordered`: the query has its own ORDER BY.
fn decide(
    spec: &Spec,
    tables: &BTreeMap<String, Arc<SourceTable>>,
    logical: &LogicalPlan,
    ordered: bool,
    plan_with: &dyn Fn(Option<&str>) -> Result<Plans, PlanError>,
) -> Result<(Decision, Option<Plans>), PlanError> {
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
    if ordered {
        candidates.clear();
        first_obstacle = Some((
            "Sort".to_string(),
            "the query's ORDER BY orders rows across all chunks".to_string(),
        ));
    }
    for s in &candidates {
        if let Some(ob) = chunking::logical_obstacle(logical, &s.name) {
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
    Ok((decision, chosen_plans))
}
