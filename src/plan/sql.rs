//! The SQL of a pass: the selected fields' inputs and the split key, over the
//! spec's query, filtered; for a global query's single run, ordered by every
//! output column so the stored order is a function of the data alone.

use super::quote_ident;
use crate::spec::Spec;
use datafusion::logical_expr::{Expr, LogicalPlan};
use tessera_transform::chain::Chain;
use tessera_transform::split::SPLIT_COLUMN;

/// What a pass selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Columns {
    /// Only the fields that need statistics (and the split key).
    Stats,
    /// Every field and the split key.
    All,
}

/// The spec's query, or `SELECT *` from its only source.
pub fn inner_query(spec: &Spec) -> String {
    match &spec.query {
        Some(q) => q.trim().trim_end_matches(';').to_string(),
        None => match spec.sources.first() {
            Some(s) => format!("SELECT * FROM {}", quote_ident(&s.name)),
            None => "SELECT 1".into(),
        },
    }
}

/// The ORDER BY at the top of the spec's query, as order items over the
/// query's output columns (`"__input"."ts" DESC NULLS LAST`), when every key
/// is one of those columns; empty otherwise.
pub fn query_order(inner: &LogicalPlan) -> Vec<String> {
    top_sort(inner).unwrap_or_default()
}

/// A note for the build output when the spec's query ends in an ORDER BY
/// that cannot be the stored order (a key that is not an output column).
pub fn unstored_order_note(inner: &LogicalPlan) -> Option<String> {
    match top_sort(inner) {
        Some(keys) if keys.is_empty() => Some(
            "the query's ORDER BY sorts by something it does not output, so it is not the \
             stored order; select the sort keys as columns to store rows in that order"
                .to_string(),
        ),
        _ => None,
    }
}

/// `None` when the query has no top-level ORDER BY; otherwise its keys as
/// order items, empty when some key is not an output column.
fn top_sort(inner: &LogicalPlan) -> Option<Vec<String>> {
    let mut node = inner;
    let mut projected: Option<Vec<String>> = None;
    loop {
        match node {
            LogicalPlan::Limit(l) => node = &l.input,
            LogicalPlan::SubqueryAlias(a) => node = &a.input,
            LogicalPlan::Projection(p) if projected.is_none() => {
                projected = Some(p.schema.fields().iter().map(|f| f.name().clone()).collect());
                node = &p.input;
            }
            _ => break,
        }
    }
    let LogicalPlan::Sort(sort) = node else {
        return None;
    };
    let outputs: Vec<String> = match projected {
        Some(names) => names,
        None => sort
            .input
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    };
    let mut items = Vec::new();
    for s in &sort.expr {
        let Expr::Column(c) = &s.expr else {
            return Some(Vec::new());
        };
        if !outputs.contains(&c.name) {
            return Some(Vec::new());
        }
        items.push(format!(
            "\"__input\".{} {} NULLS {}",
            quote_ident(&c.name),
            if s.asc { "ASC" } else { "DESC" },
            if s.nulls_first { "FIRST" } else { "LAST" }
        ));
    }
    Some(items)
}

/// The pass query. `total_order` appends an ORDER BY: the query's own keys
/// (`query_order`), then every output column (a global query's one run).
pub fn pass_sql(spec: &Spec, columns: Columns, total_order: Option<&[String]>) -> String {
    let mut items = Vec::new();
    for chain in Chain::all(&spec.fields) {
        if columns == Columns::Stats && chain.stats.is_none() {
            continue;
        }
        for (sql, alias) in chain.select_items() {
            items.push(format!("{sql} AS {}", quote_ident(&alias)));
        }
    }
    if let Some(split) = &spec.split {
        items.push(format!(
            "CAST(({}) AS VARCHAR) AS {}",
            split.key,
            quote_ident(SPLIT_COLUMN)
        ));
    }
    if items.is_empty() {
        items.push("1 AS \"__one\"".into());
    }
    let n = items.len();
    let mut sql = format!(
        "SELECT {} FROM ({}) AS \"__input\"",
        items.join(", "),
        inner_query(spec)
    );
    if let Some(filter) = &spec.filter {
        sql.push_str(&format!(" WHERE {filter}"));
    }
    if let Some(first) = total_order {
        let mut keys: Vec<String> = first.to_vec();
        keys.extend((1..=n).map(|i| format!("{i} ASC NULLS FIRST")));
        sql.push_str(&format!(" ORDER BY {}", keys.join(", ")));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn pass_queries() {
        let text = "version: 1\nname: t\nsources:\n  s: { path: x.parquet }\n\
                    filter: a > 1\nfields:\n  a: { dtype: f32, column: a, transform: standardize }\n\
                    \x20 b: { dtype: i32, expr: \"b + 1\" }\n\
                    split: { key: id, weights: { train: 1 } }\n";
        let spec = Spec::parse(text, Path::new("/tmp/t.yaml")).expect("spec");
        let all = pass_sql(&spec, Columns::All, None);
        assert_eq!(
            all,
            "SELECT \"a\" AS \"__f0\", (b + 1) AS \"__f1\", CAST((id) AS VARCHAR) AS \"__split\" \
             FROM (SELECT * FROM \"s\") AS \"__input\" WHERE a > 1"
        );
        let stats = pass_sql(
            &spec,
            Columns::Stats,
            Some(&["\"__input\".\"t\" DESC NULLS LAST".to_string()]),
        );
        assert!(
            stats.starts_with("SELECT \"a\" AS \"__f0\", CAST"),
            "{stats}"
        );
        assert!(
            stats.ends_with(
                "ORDER BY \"__input\".\"t\" DESC NULLS LAST, 1 ASC NULLS FIRST, 2 ASC NULLS FIRST"
            ),
            "{stats}"
        );
    }
}
