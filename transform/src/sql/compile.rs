//! Typing a parsed [`Node`] against a schema: columns resolved to their
//! index, literals made one-row arrays, and every operand cast to the
//! common type of its operator ([`super::coerce`]).

use super::coerce::{arith_type, cmp_type, coalesce_type, concat_type, is_number};
use super::parse::{Arith, Cmp, Literal, Node};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, NullArray, StringArray, UInt64Array,
};
use arrow_cast::can_cast_types;
use arrow_schema::{DataType, Schema};
use std::sync::Arc;

/// A typed expression, ready to evaluate over batches of one schema.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub(super) root: Typed,
    /// The result's type.
    pub data_type: DataType,
}

#[derive(Clone, Debug)]
pub(super) enum Typed {
    Column(usize),
    Literal(ArrayRef),
    Cast(Box<Typed>, DataType),
    Arith(Arith, Box<Typed>, Box<Typed>),
    Cmp(Cmp, Box<Typed>, Box<Typed>),
    And(Box<Typed>, Box<Typed>),
    Or(Box<Typed>, Box<Typed>),
    Not(Box<Typed>),
    Neg(Box<Typed>),
    IsNull(Box<Typed>, bool),
    Concat(Box<Typed>, Box<Typed>),
    Coalesce(Vec<Typed>),
}

/// Compiles `node` for batches of `schema`. An error says why the
/// expression cannot be evaluated here (a missing column, a type
/// combination outside the coercion rules).
pub fn compile(node: &Node, schema: &Schema) -> Result<Compiled, String> {
    let (root, data_type) = typed(node, schema)?;
    Ok(Compiled { root, data_type })
}

fn cast_to(t: Typed, from: &DataType, to: &DataType) -> Typed {
    if from == to {
        t
    } else {
        Typed::Cast(Box::new(t), to.clone())
    }
}

/// `node` typed, with its result type.
fn typed(node: &Node, schema: &Schema) -> Result<(Typed, DataType), String> {
    Ok(match node {
        Node::Column(name) => {
            let (i, f) = schema
                .column_with_name(name)
                .ok_or_else(|| format!("no column named {name:?}"))?;
            (Typed::Column(i), f.data_type().clone())
        }
        Node::Literal(l) => literal(l),
        Node::Cast(inner, to) => {
            let (t, from) = typed(inner, schema)?;
            if !can_cast_types(&from, to) {
                return Err(format!("CAST from {from} to {to}"));
            }
            (cast_to(t, &from, to), to.clone())
        }
        Node::Arith(op, l, r) => {
            let (l, r, common) = operands(l, r, schema, arith_type, |l, r| {
                format!("arithmetic on {l} and {r}")
            })?;
            (Typed::Arith(*op, l, r), common)
        }
        Node::Cmp(op, l, r) => {
            let (l, r, _) = operands(l, r, schema, cmp_type, |l, r| {
                format!("comparing {l} with {r}")
            })?;
            (Typed::Cmp(*op, l, r), DataType::Boolean)
        }
        Node::And(l, r) | Node::Or(l, r) => {
            let (l, r) = logical(l, r, schema)?;
            let t = if matches!(node, Node::And(..)) {
                Typed::And(l, r)
            } else {
                Typed::Or(l, r)
            };
            (t, DataType::Boolean)
        }
        Node::Not(inner) => {
            let (t, ty) = typed(inner, schema)?;
            if !matches!(ty, DataType::Boolean | DataType::Null) {
                return Err(format!("NOT on {ty}"));
            }
            (
                Typed::Not(Box::new(cast_to(t, &ty, &DataType::Boolean))),
                DataType::Boolean,
            )
        }
        Node::Neg(inner) => {
            let (t, ty) = typed(inner, schema)?;
            if !is_number(&ty) {
                return Err(format!("negating {ty}"));
            }
            (Typed::Neg(Box::new(t)), ty)
        }
        Node::IsNull(inner, negated) => {
            let (t, _) = typed(inner, schema)?;
            (Typed::IsNull(Box::new(t), *negated), DataType::Boolean)
        }
        Node::Concat(l, r) => {
            let (l, r, common) = operands(l, r, schema, concat_type, |l, r| {
                format!("concatenating {l} and {r}")
            })?;
            (Typed::Concat(l, r), common)
        }
        Node::Coalesce(args) => coalesce(args, schema)?,
    })
}

/// A literal as a one-row array, with its type.
fn literal(l: &Literal) -> (Typed, DataType) {
    let arr: ArrayRef = match l {
        Literal::Null => Arc::new(NullArray::new(1)),
        Literal::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
        Literal::Int64(n) => Arc::new(Int64Array::from(vec![*n])),
        Literal::UInt64(n) => Arc::new(UInt64Array::from(vec![*n])),
        Literal::Float64(x) => Arc::new(Float64Array::from(vec![*x])),
        Literal::Utf8(s) => Arc::new(StringArray::from(vec![s.as_str()])),
    };
    let t = arr.data_type().clone();
    (Typed::Literal(arr), t)
}

/// The two operands of a binary operator, each cast to the common type
/// `rule` gives (also returned); with none, the error `refused` words.
fn operands(
    l: &Node,
    r: &Node,
    schema: &Schema,
    rule: fn(&DataType, &DataType) -> Option<DataType>,
    refused: impl FnOnce(&DataType, &DataType) -> String,
) -> Result<(Box<Typed>, Box<Typed>, DataType), String> {
    let ((lt, lty), (rt, rty)) = (typed(l, schema)?, typed(r, schema)?);
    let common = rule(&lty, &rty).ok_or_else(|| refused(&lty, &rty))?;
    Ok((
        Box::new(cast_to(lt, &lty, &common)),
        Box::new(cast_to(rt, &rty, &common)),
        common,
    ))
}

/// The operands of `AND` / `OR`: booleans (or nulls, cast to boolean).
fn logical(l: &Node, r: &Node, schema: &Schema) -> Result<(Box<Typed>, Box<Typed>), String> {
    let ((lt, lty), (rt, rty)) = (typed(l, schema)?, typed(r, schema)?);
    let ok = |t: &DataType| matches!(t, DataType::Boolean | DataType::Null);
    if !ok(&lty) || !ok(&rty) {
        return Err(format!("AND/OR on {lty} and {rty}"));
    }
    Ok((
        Box::new(cast_to(lt, &lty, &DataType::Boolean)),
        Box::new(cast_to(rt, &rty, &DataType::Boolean)),
    ))
}

/// `COALESCE`'s arguments, cast to their common type.
fn coalesce(args: &[Node], schema: &Schema) -> Result<(Typed, DataType), String> {
    let typed_args = args
        .iter()
        .map(|a| typed(a, schema))
        .collect::<Result<Vec<_>, _>>()?;
    let types: Vec<DataType> = typed_args.iter().map(|(_, t)| t.clone()).collect();
    let common = coalesce_type(&types).ok_or_else(|| {
        let names: Vec<String> = types.iter().map(ToString::to_string).collect();
        format!("COALESCE of {}", names.join(", "))
    })?;
    let args = typed_args
        .into_iter()
        .map(|(t, ty)| cast_to(t, &ty, &common))
        .collect();
    Ok((Typed::Coalesce(args), common))
}
