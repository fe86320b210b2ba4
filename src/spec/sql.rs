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
//! The parser is the one DataFusion uses (sqlparser, re-exported by
//! DataFusion as `datafusion::sql::sqlparser`), with DataFusion's default
//! dialect (generic) and recursion limit (50), so what passes here parses
//! the same way in the planner. It is used directly rather than through
//! DataFusion, which keeps the spec module free of DataFusion: the spec
//! parser's fuzz target (`fuzz/`) builds without it.

use sqlparser::ast::{Expr, Select, Statement, Visit, Visitor};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};
use std::ops::ControlFlow;

/// Deepest nesting of operations in one expression: a chain `a + b + c`
/// of n terms is n - 1 deep; parentheses that balance it, `(a + b) + (c +
/// d)`, make it shallow.
pub const MAX_EXPR_DEPTH: usize = 100;

/// DataFusion's default `sql_parser.recursion_limit`.
const RECURSION_LIMIT: usize = 50;

static DIALECT: GenericDialect = GenericDialect {};

/// First words of statements that are not queries.
const STATEMENT_STARTS: &[&str] = &[
    "ALTER",
    "ANALYZE",
    "ATTACH",
    "BEGIN",
    "CACHE",
    "CALL",
    "COMMENT",
    "COMMIT",
    "COPY",
    "CREATE",
    "DEALLOCATE",
    "DECLARE",
    "DELETE",
    "DESCRIBE",
    "DETACH",
    "DROP",
    "EXECUTE",
    "EXPLAIN",
    "GRANT",
    "INSERT",
    "INSTALL",
    "KILL",
    "LOAD",
    "LOCK",
    "MERGE",
    "PRAGMA",
    "PREPARE",
    "REPLACE",
    "RESET",
    "REVOKE",
    "ROLLBACK",
    "SET",
    "SHOW",
    "START",
    "TRUNCATE",
    "UNCACHE",
    "UNLOAD",
    "UPDATE",
    "UPSERT",
    "USE",
    "VACUUM",
];

/// Most tokens in one SQL text. Parsing is iterative, but the tree it builds
/// for a chain `a + b + c + ...` is as deep as the chain is long, and
/// dropping a tree recurses once per level; this bounds that depth.
const MAX_TOKENS: usize = 200_000;

/// Stack for checking one text: enough to drop the deepest tree
/// [`MAX_TOKENS`] allows. Reserved address space, touched only as needed.
const CHECK_STACK: usize = 64 << 20;

/// What the last line's `--` comment would do (see [`parser`]).
const OPEN_COMMENT: &str = "has a `--` comment on its last line, which would also comment out \
                            the SQL the build puts after it; write it as /* ... */ or end it \
                            with a line break";

/// A parser over `text`, and whether `text` ends inside a `--` comment.
fn parser(text: &str) -> Result<(Parser<'static>, bool), String> {
    let tokens = Tokenizer::new(&DIALECT, text)
        .tokenize_with_location()
        .map_err(|e| syntax(e.into()))?;
    let count = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .count();
    // The planner embeds these texts in one line of SQL of its own, so a
    // `--` comment on the last line (the spec's text is trimmed, so it ends
    // there) would comment out what follows: a closing parenthesis, or the
    // ORDER BY that makes a global query's output deterministic.
    let open_comment = tokens.iter().any(|t| {
        matches!(&t.token, Token::Whitespace(Whitespace::SingleLineComment { comment, .. })
            if !comment.ends_with('\n'))
    });
    if count > MAX_TOKENS {
        return Err(format!(
            "is {count} tokens long; a query or an expression may have at most {MAX_TOKENS}"
        ));
    }
    let parser = Parser::new(&DIALECT)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(tokens);
    Ok((parser, open_comment))
}

/// Runs `check` on `text` in a thread with a stack of [`CHECK_STACK`]
/// bytes (the caller's may be small: test threads get 2 MiB), or in this
/// one if no thread can be started.
fn on_big_stack(check: fn(&str) -> Result<(), String>, text: &str) -> Result<(), String> {
    let owned = text.to_string();
    match std::thread::Builder::new()
        .name("tessera-spec-sql".into())
        .stack_size(CHECK_STACK)
        .spawn(move || check(&owned))
    {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err("could not be checked (the SQL parser panicked)".into())),
        Err(_) => check(text),
    }
}

/// Checks the spec's `query`.
pub(super) fn check_query(text: &str) -> Result<(), String> {
    on_big_stack(query, text)
}

/// Checks one SQL expression (`filter`, a field's `expr`, the split `key`).
pub(super) fn check_expr(text: &str) -> Result<(), String> {
    on_big_stack(expression, text)
}

fn query(text: &str) -> Result<(), String> {
    let kind = statement_kind(text);
    let refused = |kind: &str| {
        let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
            "an"
        } else {
            "a"
        };
        Err(format!(
            "is {article} {kind} statement; a build only reads data, so the query must be one \
             SELECT (or WITH ... SELECT, or VALUES) statement"
        ))
    };
    // A statement that is not a query is refused by its first words, even
    // where the generic parser does not know DataFusion's syntax for it
    // (CREATE EXTERNAL TABLE, COPY ... TO ... STORED AS).
    let first = kind.split(' ').next().unwrap_or_default();
    if STATEMENT_STARTS.contains(&first) {
        return refused(&kind);
    }
    let (mut p, open_comment) = parser(text)?;
    let mut statements = p.parse_statements().map_err(syntax)?;
    let statement = match statements.len() {
        0 => return Err("holds no SQL statement; write a SELECT query".into()),
        1 => statements.remove(0),
        n => {
            return Err(format!(
                "holds {n} SQL statements; the query is one SELECT statement"
            ));
        }
    };
    if !matches!(statement, Statement::Query(_)) {
        return refused(&statement_kind(&statement.to_string()));
    }
    if open_comment {
        return Err(OPEN_COMMENT.into());
    }
    let mut check = Depth::default();
    let outcome = statement.visit(&mut check);
    finish(outcome)
}

fn expression(text: &str) -> Result<(), String> {
    let (mut p, open_comment) = parser(text)?;
    let not_one = |e: String| {
        let kind = statement_kind(text);
        let first = kind.split(' ').next().unwrap_or_default();
        if STATEMENT_STARTS.contains(&first) {
            format!("is a {kind} statement, not an expression")
        } else {
            e
        }
    };
    let expr = p.parse_expr().map_err(|e| not_one(syntax(e)))?;
    let next = p.next_token();
    match &next.token {
        Token::EOF if open_comment => return Err(OPEN_COMMENT.into()),
        Token::EOF => {}
        Token::Word(w) if w.keyword == Keyword::AS => {
            return Err(format!(
                "gives its expression an alias ({}); leave it out (a field is named by its key)",
                p.next_token()
            ));
        }
        other => {
            return Err(not_one(format!(
                "is not valid SQL: Expected: end of expression, found: {other} at line {}, \
                 column {}",
                next.span.start.line, next.span.start.column
            )));
        }
    }
    let mut check = Depth::default();
    let outcome = expr.visit(&mut check);
    finish(outcome)
}

/// The verdict of the walk over a parsed text.
fn finish(outcome: ControlFlow<Refusal>) -> Result<(), String> {
    match outcome {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(refusal) => Err(refusal.message()),
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

/// The statement's leading keywords, upper-cased, for "is an INSERT
/// statement": one word, two for CREATE, DROP, ALTER and SHOW (`CREATE
/// TABLE`), three for `CREATE EXTERNAL TABLE` and the like. Empty for
/// empty text.
fn statement_kind(text: &str) -> String {
    let text = text.trim_start();
    if text.starts_with('(') {
        return "(".to_string();
    }
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ';')
        .filter(|w| !w.is_empty())
        .take(3)
        .map(str::to_ascii_uppercase)
        .collect();
    let n = match words.first().map(String::as_str) {
        Some("CREATE" | "DROP" | "ALTER" | "SHOW") => match words.get(1).map(String::as_str) {
            Some("EXTERNAL" | "TEMPORARY" | "TEMP" | "OR" | "UNIQUE") => 3,
            _ => 2,
        },
        _ => 1,
    };
    words.into_iter().take(n).collect::<Vec<_>>().join(" ")
}

/// A parse error in words, with its position as "line L, column C".
fn syntax(e: ParserError) -> String {
    let detail = match e {
        ParserError::ParserError(m) | ParserError::TokenizerError(m) => m,
        ParserError::RecursionLimitExceeded => {
            format!("parentheses or subqueries nest more than {RECURSION_LIMIT} levels deep")
        }
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
            "SELECT a FROM t /* a comment */",
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
            "a + 1 /* note */",
        ] {
            assert_eq!(check_expr(ok), Ok(()), "{ok}");
        }
        let err = |e: &str| check_expr(e).expect_err(e);
        assert_eq!(
            err("x) AS y FROM t --"),
            "is not valid SQL: Expected: end of expression, found: ) at line 1, column 2"
        );
        assert!(err("a AS b").contains("alias"));
        assert!(err("x > 1 -- keep big ones").starts_with("has a `--` comment on its last line"));
        assert!(err("a; DROP TABLE t").starts_with("is not valid SQL"));
        assert_eq!(
            err("COPY (SELECT 1) TO 'x'"),
            "is a COPY statement, not an expression"
        );
        assert_eq!(check_expr("copy + 1"), Ok(()), "a column may be named copy");
        let chain = |n: usize| vec!["a"; n].join(" + ");
        assert_eq!(check_expr(&chain(MAX_EXPR_DEPTH)), Ok(()));
        assert!(err(&chain(MAX_EXPR_DEPTH + 2)).starts_with("nests more than"));
        // Deep enough to overflow a small stack when the tree is dropped,
        // whether the text parses or fails after the chain.
        assert!(
            err(&chain(60_000)).starts_with("nests more than"),
            "{}",
            err(&chain(60_000))
        );
        assert!(
            err(&format!("{} )", chain(60_000))).starts_with("is not valid SQL: Expected: end")
        );
        assert!(err(&format!("{} + * 2", chain(60_000))).starts_with("is not valid SQL"));
        assert_eq!(
            err(&chain(150_000)),
            format!(
                "is 299999 tokens long; a query or an expression may have at most {MAX_TOKENS}"
            )
        );
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
