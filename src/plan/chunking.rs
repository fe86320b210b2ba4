//! Chunking: whether a query may be cut into independent tasks over one
//! source, and the cuts themselves.
//!
//! A query distributes over the rows of a source `c` when running it on each
//! chunk of `c` (every other source read whole) and concatenating the answers
//! gives the answer over all of `c`. That holds when `c` is scanned exactly
//! once and every operator between that scan and the output is row-local:
//! projection, filter, unnest, and joins that keep or drop each of `c`'s rows
//! by looking only at other sources (inner, left/semi/anti/mark with `c` on
//! the preserved side). The decision is read from DataFusion's optimized
//! logical plan; a second check on the physical plan makes sure every
//! operator on that path keeps `c`'s row order (so the records come out in
//! input order, whatever the cut). Anything else is a *global* query.
//!
//! Chunks are cut from the files in input order: Parquet at row-group
//! boundaries, CSV and NDJSON at line starts, about `target_bytes` of input
//! each; consecutive small files share a chunk.

use super::PlanError;
use super::csv::cut_points;
use super::sources::{FilePart, PartRange, SourceTable, scan_source};
use crate::spec::SourceFormat;
use datafusion::common::JoinType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::HashJoinExec;
use serde::{Deserialize, Serialize};

/// One build task's share of the chunked source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Position in the build's chunk list; fixes the output order.
    pub index: usize,
    /// The chunked source (empty for a global query's output ranges).
    pub source: String,
    /// The file ranges read, in input order.
    pub parts: Vec<FilePart>,
    /// For a global query: rows `start..end` of its materialized output.
    pub rows: Option<(u64, u64)>,
    /// Input bytes (compressed for Parquet), for scheduling and display.
    pub bytes: u64,
}

impl Chunk {
    /// A short description for messages: the chunk's first part.
    pub fn describe(&self, table: Option<&SourceTable>) -> String {
        if let Some((start, end)) = self.rows {
            return format!("rows {start}..{end} of the query output");
        }
        let first = match (table, self.parts.first()) {
            (Some(t), Some(p)) => t.describe_part(p),
            _ => String::new(),
        };
        match self.parts.len() {
            0 => format!("chunk {}", self.index),
            1 => format!("chunk {} ({first})", self.index),
            n => format!("chunk {} ({first} and {} more)", self.index, n - 1),
        }
    }
}

/// Most files one chunk reads (see [`cut`]).
pub const MAX_FILES_PER_CHUNK: usize = 1000;

/// Cuts `table` into chunks of about `target` input bytes and at most
/// [`MAX_FILES_PER_CHUNK`] files, in input order.
pub fn cut(table: &SourceTable, target: u64) -> Result<Vec<Chunk>, PlanError> {
    // Pieces: the smallest units a chunk is made of, with their weight.
    let mut pieces: Vec<(FilePart, u64)> = Vec::new();
    for (i, f) in table.files.iter().enumerate() {
        match table.format {
            SourceFormat::Parquet => {
                for (g, rg) in f.row_groups.iter().enumerate() {
                    pieces.push((
                        FilePart {
                            file: i,
                            range: PartRange::RowGroups {
                                start: g,
                                end: g + 1,
                            },
                        },
                        rg.bytes.max(1),
                    ));
                }
            }
            SourceFormat::Csv | SourceFormat::Json => {
                let quote = (table.format == SourceFormat::Csv).then_some(b'"');
                let cuts = cut_points(&f.path, target, quote)?;
                if cuts.len() == 1 {
                    pieces.push((
                        FilePart {
                            file: i,
                            range: PartRange::Whole,
                        },
                        f.size.max(1),
                    ));
                    continue;
                }
                for (k, &(start, line)) in cuts.iter().enumerate() {
                    let end = cuts.get(k + 1).map_or(f.size, |c| c.0);
                    pieces.push((
                        FilePart {
                            file: i,
                            range: PartRange::Bytes { start, end, line },
                        },
                        (end - start).max(1),
                    ));
                }
            }
            SourceFormat::Arrow => pieces.push((
                FilePart {
                    file: i,
                    range: PartRange::Whole,
                },
                f.size.max(1),
            )),
        }
    }
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut parts: Vec<FilePart> = Vec::new();
    let mut bytes = 0u64;
    let flush = |parts: &mut Vec<FilePart>, bytes: &mut u64, chunks: &mut Vec<Chunk>| {
        if parts.is_empty() {
            return;
        }
        chunks.push(Chunk {
            index: chunks.len(),
            source: table.name.clone(),
            parts: std::mem::take(parts),
            rows: None,
            bytes: *bytes,
        });
        *bytes = 0;
    };
    for (piece, weight) in pieces {
        // A new chunk at the byte target, or when the piece would be the
        // chunk's (MAX_FILES_PER_CHUNK + 1)-th file: a scan keeps some state
        // per file it opens (metrics, footers), about 25 KiB, so a chunk of
        // 50,000 tiny files needed over 1 GiB.
        let new_file = parts.last().is_none_or(|p| p.file != piece.file);
        if (bytes > 0 && bytes + weight > target)
            || (new_file && parts.len() >= MAX_FILES_PER_CHUNK)
        {
            flush(&mut parts, &mut bytes, &mut chunks);
        }
        push_piece(table, &mut parts, piece);
        bytes += weight;
    }
    flush(&mut parts, &mut bytes, &mut chunks);
    Ok(chunks)
}

/// Appends a piece, merging it into the previous part when it continues it.
fn push_piece(table: &SourceTable, parts: &mut Vec<FilePart>, piece: FilePart) {
    if let Some(last) = parts.last_mut()
        && last.file == piece.file
    {
        match (&mut last.range, piece.range) {
            (PartRange::RowGroups { end, .. }, PartRange::RowGroups { start, end: e2 })
                if *end == start =>
            {
                *end = e2;
                if let PartRange::RowGroups { start: 0, end } = last.range
                    && end == table.files[last.file].row_groups.len()
                {
                    last.range = PartRange::Whole;
                }
                return;
            }
            (PartRange::Bytes { end, .. }, PartRange::Bytes { start, end: e2, .. })
                if *end == start =>
            {
                *end = e2;
                if let PartRange::Bytes { start: 0, end, .. } = last.range
                    && end == table.files[last.file].size
                {
                    last.range = PartRange::Whole;
                }
                return;
            }
            _ => {}
        }
    }
    let mut piece = piece;
    if let PartRange::RowGroups { start: 0, end } = piece.range
        && end == table.files[piece.file].row_groups.len()
    {
        piece.range = PartRange::Whole;
    }
    parts.push(piece);
}

/// How a build runs its query: the manifest's `build.plan_detail`.
pub use tessera_reader::PlanDecision as Decision;

/// Why `source` cannot be chunked in `plan`, if it cannot; `None` when the
/// query distributes over its rows.
pub fn logical_obstacle(plan: &LogicalPlan, source: &str) -> Option<(String, String)> {
    let scans = count_scans(plan, source);
    if scans == 0 {
        return Some((
            "TableScan".into(),
            format!("the query does not read source {source:?}"),
        ));
    }
    if scans > 1 {
        return Some((
            "TableScan".into(),
            format!(
                "source {source:?} is read {scans} times (a self-join, a subquery or a set \
                 operation over it), so one chunk's rows meet rows of other chunks"
            ),
        ));
    }
    path_obstacle(plan, source)
}

/// Scans of `source` anywhere in `plan`, subqueries included.
fn count_scans(plan: &LogicalPlan, source: &str) -> usize {
    let mut n = 0;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(s) = node
            && s.table_name.table() == source
        {
            n += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    n
}

fn first_line(plan: &LogicalPlan) -> String {
    let text = format!("{}", plan.display());
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.len() > 160 {
        format!("{}...", &line[..line.floor_char_boundary(157)])
    } else {
        line
    }
}

/// Walks from the root to the scan of `source`, checking each operator.
fn path_obstacle(plan: &LogicalPlan, source: &str) -> Option<(String, String)> {
    let global = |why: &str| Some((first_line(plan), why.to_string()));
    match plan {
        LogicalPlan::TableScan(s) if s.table_name.table() == source => {
            if s.fetch.is_some() {
                return global("a row limit on the scan depends on all chunks");
            }
            None
        }
        LogicalPlan::Projection(p) => path_obstacle(&p.input, source),
        LogicalPlan::Filter(f) => path_obstacle(&f.input, source),
        LogicalPlan::SubqueryAlias(a) => path_obstacle(&a.input, source),
        LogicalPlan::Unnest(u) => path_obstacle(&u.input, source),
        LogicalPlan::Repartition(r) => path_obstacle(&r.input, source),
        LogicalPlan::Join(j) => {
            let left = count_scans(&j.left, source) > 0;
            let ok = if left {
                matches!(
                    j.join_type,
                    JoinType::Inner
                        | JoinType::Left
                        | JoinType::LeftSemi
                        | JoinType::LeftAnti
                        | JoinType::LeftMark
                )
            } else {
                matches!(
                    j.join_type,
                    JoinType::Inner
                        | JoinType::Right
                        | JoinType::RightSemi
                        | JoinType::RightAnti
                        | JoinType::RightMark
                )
            };
            if !ok {
                return global(&format!(
                    "a {} join keeps rows of the other side that no row of {source:?} \
                     matches, which only all chunks together can tell",
                    j.join_type
                ));
            }
            path_obstacle(if left { &j.left } else { &j.right }, source)
        }
        LogicalPlan::Aggregate(_) => global("an aggregate combines rows from different chunks"),
        LogicalPlan::Window(_) => global("a window function looks at rows of other chunks"),
        LogicalPlan::Sort(_) => global("ORDER BY orders rows across all chunks"),
        LogicalPlan::Limit(_) => global("LIMIT/OFFSET counts rows across all chunks"),
        LogicalPlan::Distinct(_) => global("DISTINCT compares rows across all chunks"),
        LogicalPlan::Union(_) => global("a set operation combines the source with other rows"),
        _ => global("this operator is not known to work row by row"),
    }
}

/// The first operator on the physical path from the root to `source`'s scan
/// that does not keep that input's row order, if any.
pub fn physical_obstacle(plan: &dyn ExecutionPlan, source: &str) -> Option<String> {
    if scan_source(plan).as_deref() == Some(source) {
        return None;
    }
    let children = plan.children();
    let keeps = plan.maintains_input_order();
    // A hash join keeps its probe order only when the probe side is marked
    // ordered (see `exec::OrderedInput`).
    let is_join = plan.downcast_ref::<HashJoinExec>().is_some();
    for (i, child) in children.iter().enumerate() {
        if reads(child.as_ref(), source) {
            let marked = child.downcast_ref::<super::exec::OrderedInput>().is_some();
            // UnnestExec declares no order kept (the unnested column's order
            // changes), but emits each input row's rows together, in order.
            let kept = keeps.get(i).copied().unwrap_or(false) || plan.name() == "UnnestExec";
            if !kept || (is_join && !marked) {
                return Some(plan.name().to_string());
            }
            return physical_obstacle(child.as_ref(), source);
        }
    }
    Some(format!("{} (no scan of {source:?} below it)", plan.name()))
}

fn reads(plan: &dyn ExecutionPlan, source: &str) -> bool {
    if scan_source(plan).as_deref() == Some(source) {
        return true;
    }
    plan.children().iter().any(|c| reads(c.as_ref(), source))
}

/// Why a global query's result could depend on the order rows arrive in
/// (and so on the thread count), if it could: aggregates other than exact
/// ones (count, min, max, sums and averages, ...), window functions, and limits.
/// Such queries run in one partition.
pub fn order_sensitive(plan: &LogicalPlan) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        let why = match node {
            LogicalPlan::Window(_) => Some("a window function".to_string()),
            LogicalPlan::Limit(_) => Some("LIMIT".to_string()),
            LogicalPlan::Aggregate(a) => a.aggr_expr.iter().find_map(|e| {
                inexact_aggregate(e, a.input.schema()).map(|name| format!("aggregate {name}"))
            }),
            _ => None,
        };
        if why.is_some() {
            found = why;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The name of an aggregate whose result can depend on input order.
fn inexact_aggregate(
    e: &datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> Option<String> {
    use datafusion::logical_expr::Expr;
    use datafusion::logical_expr::ExprSchemable;
    let mut found = None;
    let _ = e.apply(|x| {
        if let Expr::AggregateFunction(f) = x {
            let name = f.func.name().to_ascii_lowercase();
            let exact_any = matches!(
                name.as_str(),
                "count"
                    | "min"
                    | "max"
                    | "bool_and"
                    | "bool_or"
                    | "bit_and"
                    | "bit_or"
                    | "bit_xor"
                    | "approx_distinct"
                    // The exact decimal average (plan/decimal.rs): integer sums.
                    | "tessera_exact_avg"
                    // Float sums and averages through exact sums
                    // (plan/exact_float.rs).
                    | super::exact_float::EXACT_SUM
                    | super::exact_float::EXACT_AVG
            );
            // Decimal sums are integer sums of the unscaled values.
            let integer_args = f.params.args.iter().all(|a| {
                a.get_type(schema)
                    .map(|t| t.is_integer() || t.is_decimal())
                    .unwrap_or(false)
            });
            let exact =
                (exact_any || (name == "sum" && integer_args)) && f.params.order_by.is_empty();
            if !exact {
                found = Some(name);
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}
