//! Checks of the SQL a spec carries (`query`, `filter`, field `expr`s, the
//! split `key`), made when the spec is read, so that a problem names the key
//! and its line instead of surfacing later as a planner error about SQL the
//! user never wrote (the planner embeds these texts in queries of its own).
//!
//! - `query` is one read-only query: a SELECT (or WITH ... SELECT, VALUES,
//!   set operations). COPY, INSERT, CREATE, SET, SELECT ... INTO and every
//!   other statement are refused: a build only reads.
//! - An expression is exactly one SQL expression, with no alias and nothing
//!   after it (text like `x) FROM t --` would rewrite the planner's query).
//! - Expressions nest at most [`MAX_EXPR_DEPTH`] operations deep. DataFusion's
//!   optimizer takes time that grows about with the cube of the depth (a sum
//!   of 500 terms written `a + b + c + ...` took minutes) and overflows the
//!   stack beyond some thousands, aborting the process.
//!
//! The parser is DataFusion's own, with its default dialect and recursion
//! limit, so what passes here parses the same way in the planner.

use datafusion::error::DataFusionError;
use datafusion::sql::parser::{DFParser, Statement};
use datafusion::sql::sqlparser::ast::{Expr, Select, Statement as SqlStatement, Visit, Visitor};
use datafusion::sql::sqlparser::parser::ParserError;
use std::ops::ControlFlow;

/// Deepest nesting of operations in one expression: a chain `a + b + c`
/// of n terms is n - 1 deep; parentheses that balance it, `(a + b) + (c +
/// d)`, make it shallow.
pub const MAX_EXPR_DEPTH: usize = 100;

/// Checks the spec's `query`.
pub(super) fn check_query(text: &str) -> Result<(), String> {
    let mut statements = DFParser::parse_sql(text).map_err(syntax)?;
    let statement = match (statements.pop_front(), statements.len()) {
        (Some(s), 0) => s,
        (None, _) => return Err("holds no SQL statement; write a SELECT query".into()),
        (Some(_), more) => {
            return Err(format!(
                "holds {} SQL statements; the query is one SELECT statement",
                more + 1
            ));
        }
    };
    let refused = |kind: String| {
        Err(format!(
            "is {kind} statement; a build only reads data, so the query must be one SELECT \
             (or WITH ... SELECT, or VALUES) statement"
        ))
    };
    let inner = match statement {
        Statement::Statement(inner) => inner,
        Statement::CreateExternalTable(_) => return refused("a CREATE EXTERNAL TABLE".into()),
        Statement::CopyTo(_) => return refused("a COPY".into()),
        Statement::Explain(_) => return refused("an EXPLAIN".into()),
        Statement::Reset(_) => return refused("a RESET".into()),
    };
    if !matches!(*inner, SqlStatement::Query(_)) {
        let kind = statement_kind(&inner.to_string());
        let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
            "an"
        } else {
            "a"
        };
        return refused(format!("{article} {kind}"));
    }
    let mut check = Depth::default();
    let outcome = inner.visit(&mut check);
    finish(inner, outcome)
}

/// Checks one SQL expression (`filter`, a field's `expr`, the split `key`).
pub(super) fn check_expr(text: &str) -> Result<(), String> {
    let parsed = DFParser::parse_sql_into_expr(text).map_err(syntax)?;
    if let Some(alias) = &parsed.alias {
        return Err(format!(
            "gives its expression an alias ({alias}); leave it out (a field is named by its key)"
        ));
    }
    let mut check = Depth::default();
    let outcome = parsed.expr.visit(&mut check);
    finish(Box::new(parsed.expr), outcome)
}

/// The verdict on a parsed text. A text that broke a limit may be nested
/// far deeper than the limit; its tree is leaked rather than dropped, because
/// dropping it recurses once per level and could overflow the stack (the
/// process is about to stop with the error anyway, and the text was at most
/// a few MiB).
fn finish<T>(tree: Box<T>, outcome: ControlFlow<Refusal>) -> Result<(), String> {
    match outcome {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(refusal) => {
            if matches!(refusal, Refusal::TooDeep) {
                std::mem::forget(tree);
            }
            Err(refusal.message())
        }
    }
}

/// Why a parsed text is refused.
enum Refusal {
    TooDeep,
    SelectInto,
}

impl Refusal {
    fn message(&self) -> String {
        match self {
            Refusal::TooDeep => format!(
                "nests more than {MAX_EXPR_DEPTH} operations deep, which the query planner \
                 cannot handle in reasonable time; group long chains with parentheses, e.g. \
                 (a + b + c) + (d + e + f)"
            ),
            Refusal::SelectInto => {
                "uses SELECT ... INTO, which creates a table; a build only reads data, so \
                 leave out the INTO clause"
                    .to_string()
            }
        }
    }
}

/// Tracks how deep expressions nest, and stops at the first refusal. The
/// walk never goes more than [`MAX_EXPR_DEPTH`] + 1 levels down, so it is
/// safe on any input.
#[derive(Default)]
struct Depth {
    depth: usize,
}

impl Visitor for Depth {
    type Break = Refusal;

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<Refusal> {
        self.depth += 1;
        if self.depth > MAX_EXPR_DEPTH {
            return ControlFlow::Break(Refusal::TooDeep);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<Refusal> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<Refusal> {
        if select.into.is_some() {
            return ControlFlow::Break(Refusal::SelectInto);
        }
        ControlFlow::Continue(())
    }
}

/// The statement's leading keywords, for "is an INSERT statement": one
/// word, two for CREATE/DROP/ALTER (`CREATE TABLE`, `DROP VIEW`).
fn statement_kind(text: &str) -> String {
    let mut words = text.split_whitespace().map(str::to_ascii_uppercase);
    let first = words.next().unwrap_or_default();
    match (first.as_str(), words.next()) {
        ("CREATE" | "DROP" | "ALTER" | "SHOW", Some(second)) => format!("{first} {second}"),
        _ => first,
    }
}

/// A parse error in words: the parser's message, without the wrapping of
/// DataFusion's error type.
fn syntax(e: DataFusionError) -> String {
    let detail = match e.find_root() {
        DataFusionError::SQL(inner, _) => match inner.as_ref() {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => m.clone(),
            ParserError::RecursionLimitExceeded => {
                "parentheses or subqueries nest more than 50 levels deep".to_string()
            }
        },
        other => other.to_string(),
    };
    let detail = detail
        .replace(" at Line: ", " at line ")
        .replace(", Column: ", ", column ");
    format!("is not valid SQL: {detail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        for ok in [
            "SELECT a FROM t",
            "  select a from t where b > 1;",
            "WITH x AS (SELECT 1 AS a) SELECT a FROM x",
            "VALUES (1), (2)",
            "SELECT a FROM t UNION ALL SELECT a FROM u",
            "(SELECT a FROM t) ORDER BY a",
            "SELECT a -- a comment\nFROM t",
        ] {
            assert_eq!(check_query(ok), Ok(()), "{ok}");
        }
        let err = |q: &str| check_query(q).expect_err(q);
        assert!(err("COPY (SELECT 1) TO '/tmp/x.csv'").starts_with("is a COPY statement"));
        assert!(err("COPY t TO 'x.parquet'").starts_with("is a COPY statement"));
        assert!(err("INSERT INTO t VALUES (1)").starts_with("is an INSERT statement"));
        assert!(err("CREATE TABLE u AS SELECT 1").starts_with("is a CREATE TABLE statement"));
        assert!(
            err("CREATE EXTERNAL TABLE e STORED AS CSV LOCATION '/etc/passwd'")
                .starts_with("is a CREATE EXTERNAL TABLE statement")
        );
        assert!(err("DROP TABLE t").starts_with("is a DROP TABLE statement"));
        assert!(err("SET datafusion.execution.batch_size = 1").starts_with("is a SET statement"));
        assert!(err("EXPLAIN SELECT 1").starts_with("is an EXPLAIN statement"));
        assert!(err("SELECT a INTO u FROM t").contains("SELECT ... INTO"));
        assert_eq!(
            err("SELECT 1; COPY (SELECT 1) TO 'x.csv'"),
            "holds 2 SQL statements; the query is one SELECT statement"
        );
        assert!(err("SELEC a FROM t").starts_with("is not valid SQL: "));
        assert!(err("").starts_with("holds no SQL statement"));
    }

    #[test]
    fn expressions() {
        for ok in [
            "a + 1",
            "CAST(x AS FLOAT) > 0.5 AND k IN ('a', 'b')",
            "CASE WHEN a > 1 THEN 'x' ELSE 'y' END",
            "(SELECT max(a) FROM t)",
            "a -- note\n + 1",
        ] {
            assert_eq!(check_expr(ok), Ok(()), "{ok}");
        }
        let err = |e: &str| check_expr(e).expect_err(e);
        assert_eq!(
            err("x) AS y FROM t --"),
            "is not valid SQL: Expected: end of expression, found: ) at line 1, column 2"
        );
        assert!(err("a AS b").contains("alias"));
        assert!(err("a; DROP TABLE t").starts_with("is not valid SQL"));
        assert!(err("COPY (SELECT 1) TO 'x'").starts_with("is not valid SQL"));
        let chain = |n: usize| vec!["a"; n].join(" + ");
        assert_eq!(check_expr(&chain(MAX_EXPR_DEPTH)), Ok(()));
        assert!(err(&chain(MAX_EXPR_DEPTH + 2)).starts_with("nests more than"));
        // Deep enough to overflow the stack if the tree were dropped.
        assert!(err(&chain(300_000)).starts_with("nests more than"));
        // Balanced, the same number of terms is shallow.
        fn balanced(n: usize) -> String {
            if n == 1 {
                "a".into()
            } else {
                format!("({} + {})", balanced(n / 2), balanced(n - n / 2))
            }
        }
        assert_eq!(check_expr(&balanced(4096)), Ok(()));
        assert!(err(&format!("{}a{}", "(".repeat(60), ")".repeat(60))).contains("50 levels"));
    }
}
