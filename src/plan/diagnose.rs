//! Which spec key a planning error belongs to.
//!
//! DataFusion plans the whole pass query at once (the spec's query, the
//! filter, every field's SQL and the split key), so its error names no spec
//! key. When planning fails, or the plan holds a volatile function, each
//! piece is planned again on its own over the same query; the first piece
//! that fails (or is volatile) is the key the error is reported at, with the
//! spec file and line. This reads DataFusion's verdicts, not its wording.

use super::sql::inner_query;
use super::{PlanError, quote_ident};
use crate::spec::Spec;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::LogicalPlan;
use tessera_transform::chain::Chain;

/// What was wrong with a piece planned alone.
enum Verdict {
    Fails(String),
    Volatile(String),
}

/// The spec's pieces of SQL, in the order a reader checks them: the query,
/// the filter, each field, the split key. Each is `(key, sql)`.
fn pieces(spec: &Spec) -> Vec<(String, String)> {
    let from = format!("FROM ({}) AS \"__input\"", inner_query(spec));
    let mut out = vec![("query".to_string(), inner_query(spec))];
    if let Some(filter) = &spec.filter {
        out.push((
            "filter".to_string(),
            format!("SELECT 1 {from} WHERE {filter}"),
        ));
    }
    for chain in Chain::all(&spec.fields) {
        let items: Vec<String> = chain
            .select_items()
            .into_iter()
            .map(|(sql, alias)| format!("{sql} AS {}", quote_ident(&alias)))
            .collect();
        if items.is_empty() {
            // A length_of field reads no SQL of its own.
            continue;
        }
        out.push((
            format!("fields.{}", chain.field.name),
            format!("SELECT {} {from}", items.join(", ")),
        ));
    }
    if let Some(split) = &spec.split {
        out.push((
            "split.key".to_string(),
            format!("SELECT CAST(({}) AS VARCHAR) {from}", split.key),
        ));
    }
    out
}

/// The first volatile expression in `plan`, subqueries included.
pub(super) fn volatile(plan: &LogicalPlan) -> Option<String> {
    let mut found: Option<String> = None;
    let _ = plan.apply_with_subqueries(|node| {
        let _ = node.apply_expressions(|e| {
            if e.is_volatile() {
                found = Some(format!("{e}"));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Plans `sql` as the build would (parse, analyze, optimize, physical plan).
async fn verdict(ctx: &SessionContext, sql: &str) -> Option<Verdict> {
    let df = match ctx.sql(sql).await {
        Ok(df) => df,
        Err(e) => return Some(Verdict::Fails(super::datafusion_message(e))),
    };
    let logical = df.logical_plan().clone();
    if let Some(v) = volatile(&logical) {
        return Some(Verdict::Volatile(v));
    }
    let state = ctx.state();
    let optimized = match state.optimize(&logical) {
        Ok(p) => p,
        Err(e) => return Some(Verdict::Fails(super::datafusion_message(e))),
    };
    match state.create_physical_plan(&optimized).await {
        Ok(_) => None,
        Err(e) => Some(Verdict::Fails(super::datafusion_message(e))),
    }
}

/// `error` pinned to the spec key whose SQL causes it, when one piece alone
/// reproduces it; otherwise `error` unchanged.
pub(super) fn pin(
    rt: &tokio::runtime::Runtime,
    ctx: &SessionContext,
    spec: &Spec,
    error: PlanError,
) -> PlanError {
    let found = rt.block_on(async {
        for (key, sql) in pieces(spec) {
            if let Some(v) = verdict(ctx, &sql).await {
                return Some((key, v));
            }
        }
        None
    });
    match found {
        Some((key, Verdict::Fails(message))) => PlanError::Spec { key, message },
        Some((key, Verdict::Volatile(e))) => PlanError::Spec {
            key,
            message: volatile_message(&e),
        },
        None => error,
    }
}

/// Why a volatile expression is refused.
pub(super) fn volatile_message(e: &str) -> String {
    // The pass query's own alias of a field's input (`... AS __f1`) is not
    // in the spec: show the expression as written.
    let e = match e.rfind(" AS __") {
        Some(i) if !e[i + 6..].contains(' ') => &e[..i],
        _ => e,
    };
    format!(
        "{e} is volatile (it gives a different value on every run), so the artifact would not \
         be a function of its inputs; derive randomness from the data instead, e.g. a hash of \
         a key"
    )
}

/// The error for a plan with a volatile expression in it.
pub(super) fn check_deterministic(plan: &LogicalPlan) -> Result<(), PlanError> {
    match volatile(plan) {
        Some(e) => Err(PlanError::Query {
            context: "the query".into(),
            message: volatile_message(&e),
        }),
        None => Ok(()),
    }
}
