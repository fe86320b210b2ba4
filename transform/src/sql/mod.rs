//! SQL without DataFusion: the field inputs, the split key and the filter of
//! a spec, evaluated over Arrow batches for the expressions this module
//! implements (docs/SERVING.md lists them), with DataFusion's parser,
//! type coercion and kernels, so a value means what it meant in the build.
//! Other expressions are reported as unsupported, naming the construct; the
//! serving transform then hands them to a [`SqlEngine`] if it has one.

mod coerce;
mod compile;
mod eval;
mod parse;

pub use coerce::is_string;
pub use compile::{Compiled, compile};
pub use eval::CAST_OPTIONS;
pub use parse::{Arith, Cmp, Literal, Node, Parsed, parse};

use arrow_array::RecordBatch;

/// Quotes an identifier for DataFusion SQL (which lowercases bare names).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The columns `node` reads, in first-use order, each once.
pub fn columns(node: &Node) -> Vec<String> {
    fn walk(n: &Node, out: &mut Vec<String>) {
        match n {
            Node::Column(c) => {
                if !out.contains(c) {
                    out.push(c.clone());
                }
            }
            Node::Literal(_) => {}
            Node::Cast(a, _) | Node::Not(a) | Node::Neg(a) | Node::IsNull(a, _) => walk(a, out),
            Node::Arith(_, a, b)
            | Node::Cmp(_, a, b)
            | Node::And(a, b)
            | Node::Or(a, b)
            | Node::Concat(a, b) => {
                walk(a, out);
                walk(b, out);
            }
            Node::Coalesce(args) => args.iter().for_each(|a| walk(a, out)),
        }
    }
    let mut out = Vec::new();
    walk(node, &mut out);
    out
}

/// An engine for the SQL this module does not evaluate: the compiler plugs
/// in an embedded DataFusion session; a serving binary without DataFusion
/// has none, and such SQL is then an error naming the expression.
pub trait SqlEngine: Send + Sync {
    /// Runs `SELECT <sql> AS <alias>, ... FROM input [WHERE filter]` over
    /// `input`, keeping the input's row order; the output's columns are the
    /// aliases, in order.
    fn select(
        &self,
        input: RecordBatch,
        items: &[(String, String)],
        filter: Option<&str>,
    ) -> Result<RecordBatch, String>;
}
