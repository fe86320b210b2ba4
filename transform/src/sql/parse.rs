//! SQL text -> [`Node`], through the parser DataFusion itself uses (same
//! crate, same version, its default dialect), so precedence, quoting and
//! literals mean the same. Only the constructs the evaluator implements are
//! accepted; anything else is [`Parsed::Unsupported`], naming the construct.

use arrow_schema::DataType;
use sqlparser::ast::{
    BinaryOperator, CastKind, DataType as SqlType, ExactNumberInfo, Expr, Function, FunctionArg,
    FunctionArgExpr, FunctionArguments, UnaryOperator, Value,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

/// A literal value, typed as DataFusion types SQL literals.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// `NULL`.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// An integer that fits i64.
    Int64(i64),
    /// A non-negative integer beyond i64.
    UInt64(u64),
    /// Any other number.
    Float64(f64),
    /// `'text'`.
    Utf8(String),
}

/// Arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `+` (an error on integer overflow, as in the compiler's session).
    Add,
    /// `-` (an error on integer overflow).
    Sub,
    /// `*` (an error on integer overflow).
    Mul,
    /// `/` (integer division on integers; an error on division by zero).
    Div,
    /// `%`.
    Rem,
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `=`.
    Eq,
    /// `<>`, `!=`.
    NotEq,
    /// `<`.
    Lt,
    /// `<=`.
    LtEq,
    /// `>`.
    Gt,
    /// `>=`.
    GtEq,
}

/// The expressions evaluated without DataFusion.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A column of the input, by its exact name (unquoted names folded to
    /// lower case, as DataFusion does).
    Column(String),
    /// A literal.
    Literal(Literal),
    /// `CAST(x AS type)`, `x::type`.
    Cast(Box<Node>, DataType),
    /// `a + b`, ...
    Arith(Arith, Box<Node>, Box<Node>),
    /// `a = b`, ...
    Cmp(Cmp, Box<Node>, Box<Node>),
    /// `a AND b` (SQL three-valued logic).
    And(Box<Node>, Box<Node>),
    /// `a OR b`.
    Or(Box<Node>, Box<Node>),
    /// `NOT a`.
    Not(Box<Node>),
    /// `-a`.
    Neg(Box<Node>),
    /// `a IS NULL` (`negated`: `IS NOT NULL`).
    IsNull(Box<Node>, bool),
    /// `a || b`.
    Concat(Box<Node>, Box<Node>),
    /// `COALESCE(a, b, ...)`: the first argument that is not null (the later
    /// ones evaluated only for the rows still null, as DataFusion's `CASE`).
    Coalesce(Vec<Node>),
}

/// The result of parsing one expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// An expression the evaluator implements.
    Native(Node),
    /// Valid SQL the evaluator does not implement: what it is.
    Unsupported(String),
}

/// Parses one SQL expression. Text that is not one expression is an error.
pub fn parse(sql: &str) -> Result<Parsed, String> {
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(sql)
        .map_err(|e| e.to_string())?;
    let expr = parser.parse_expr().map_err(|e| e.to_string())?;
    let rest = parser.peek_token();
    if rest.token != sqlparser::tokenizer::Token::EOF {
        return Err(format!("unexpected {} after the expression", rest.token));
    }
    Ok(match node(&expr) {
        Ok(n) => Parsed::Native(n),
        Err(why) => Parsed::Unsupported(why),
    })
}

fn boxed(e: &Expr) -> Result<Box<Node>, String> {
    node(e).map(Box::new)
}

fn node(e: &Expr) -> Result<Node, String> {
    Ok(match e {
        Expr::Identifier(id) => Node::Column(match id.quote_style {
            Some(_) => id.value.clone(),
            None => id.value.to_ascii_lowercase(),
        }),
        Expr::Nested(inner) => node(inner)?,
        Expr::Value(v) => Node::Literal(literal(&v.value, false)?),
        Expr::Cast {
            kind,
            expr,
            data_type,
            format,
            array,
        } => {
            if !matches!(kind, CastKind::Cast | CastKind::DoubleColon) || format.is_some() || *array
            {
                return Err(format!("{e}"));
            }
            Node::Cast(boxed(expr)?, sql_type(data_type)?)
        }
        Expr::UnaryOp { op, expr } => match op {
            UnaryOperator::Not => Node::Not(boxed(expr)?),
            // A negative number literal is one literal (DataFusion folds it
            // while planning, so i64::MIN parses).
            UnaryOperator::Minus => match expr.as_ref() {
                Expr::Value(v) if matches!(v.value, Value::Number(..)) => {
                    Node::Literal(literal(&v.value, true)?)
                }
                other => Node::Neg(boxed(other)?),
            },
            UnaryOperator::Plus => node(expr)?,
            _ => return Err(format!("the operator {op}")),
        },
        Expr::IsNull(x) => Node::IsNull(boxed(x)?, false),
        Expr::IsNotNull(x) => Node::IsNull(boxed(x)?, true),
        Expr::BinaryOp { left, op, right } => {
            let (l, r) = (boxed(left)?, boxed(right)?);
            match op {
                BinaryOperator::Plus => Node::Arith(Arith::Add, l, r),
                BinaryOperator::Minus => Node::Arith(Arith::Sub, l, r),
                BinaryOperator::Multiply => Node::Arith(Arith::Mul, l, r),
                BinaryOperator::Divide => Node::Arith(Arith::Div, l, r),
                BinaryOperator::Modulo => Node::Arith(Arith::Rem, l, r),
                BinaryOperator::Eq => Node::Cmp(Cmp::Eq, l, r),
                BinaryOperator::NotEq => Node::Cmp(Cmp::NotEq, l, r),
                BinaryOperator::Lt => Node::Cmp(Cmp::Lt, l, r),
                BinaryOperator::LtEq => Node::Cmp(Cmp::LtEq, l, r),
                BinaryOperator::Gt => Node::Cmp(Cmp::Gt, l, r),
                BinaryOperator::GtEq => Node::Cmp(Cmp::GtEq, l, r),
                BinaryOperator::And => Node::And(l, r),
                BinaryOperator::Or => Node::Or(l, r),
                BinaryOperator::StringConcat => Node::Concat(l, r),
                other => return Err(format!("the operator {other}")),
            }
        }
        Expr::Function(f) if is_coalesce(f) => Node::Coalesce(plain_args(f)?),
        Expr::Function(f) => return Err(format!("the function {}", f.name)),
        other => return Err(describe(other)),
    })
}

/// Whether `f` is DataFusion's `coalesce` (a bare name in any case, or
/// exactly `"coalesce"` quoted).
fn is_coalesce(f: &Function) -> bool {
    match f.name.0.as_slice() {
        [part] => part.as_ident().is_some_and(|id| match id.quote_style {
            Some(_) => id.value == "coalesce",
            None => id.value.eq_ignore_ascii_case("coalesce"),
        }),
        _ => false,
    }
}

/// The arguments of a plain call `f(a, b, ...)`: at least one, positional,
/// with no `DISTINCT`, `FILTER`, `OVER` or other clause.
fn plain_args(f: &Function) -> Result<Vec<Node>, String> {
    let refuse = || format!("the call {f}");
    let FunctionArguments::List(list) = &f.args else {
        return Err(refuse());
    };
    let plain = matches!(f.parameters, FunctionArguments::None)
        && f.filter.is_none()
        && f.null_treatment.is_none()
        && f.over.is_none()
        && f.within_group.is_empty()
        && !f.uses_odbc_syntax
        && list.duplicate_treatment.is_none()
        && list.clauses.is_empty()
        && !list.args.is_empty();
    if !plain {
        return Err(refuse());
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => node(e),
            _ => Err(refuse()),
        })
        .collect()
}

/// A short description of an unsupported construct.
fn describe(e: &Expr) -> String {
    let text = e.to_string();
    let kind = match e {
        Expr::Case { .. } => "CASE",
        Expr::InList { .. } => "IN (...)",
        Expr::Between { .. } => "BETWEEN",
        Expr::Like { .. } | Expr::ILike { .. } => "LIKE",
        Expr::CompoundIdentifier(_) => "a qualified column name",
        _ => "the expression",
    };
    if text.len() > 60 {
        kind.to_string()
    } else {
        format!("{kind} {text}")
    }
}

/// A literal as DataFusion types it: integers as Int64 (UInt64 beyond), other
/// numbers as Float64, strings as Utf8.
fn literal(v: &Value, negative: bool) -> Result<Literal, String> {
    Ok(match v {
        Value::Null => Literal::Null,
        Value::Boolean(b) => Literal::Bool(*b),
        Value::SingleQuotedString(s) => Literal::Utf8(s.clone()),
        Value::Number(text, _) => {
            let digits: String = text.chars().filter(|&c| c != '_').collect();
            let signed = if negative {
                format!("-{digits}")
            } else {
                digits.clone()
            };
            if let Ok(n) = signed.parse::<i64>() {
                Literal::Int64(n)
            } else if let (false, Ok(n)) = (negative, digits.parse::<u64>()) {
                Literal::UInt64(n)
            } else {
                Literal::Float64(
                    signed
                        .parse::<f64>()
                        .map_err(|_| format!("the number {signed}"))?,
                )
            }
        }
        other => return Err(format!("the literal {other}")),
    })
}

/// SQL type names as DataFusion maps them (its default options: strings are
/// `Utf8View`).
fn sql_type(t: &SqlType) -> Result<DataType, String> {
    Ok(match t {
        SqlType::Boolean | SqlType::Bool => DataType::Boolean,
        SqlType::TinyInt(_) => DataType::Int8,
        SqlType::SmallInt(_) | SqlType::Int2(_) => DataType::Int16,
        SqlType::Int(_) | SqlType::Integer(_) | SqlType::Int4(_) => DataType::Int32,
        SqlType::BigInt(_) | SqlType::Int8(_) => DataType::Int64,
        SqlType::TinyIntUnsigned(_) => DataType::UInt8,
        SqlType::SmallIntUnsigned(_) | SqlType::Int2Unsigned(_) => DataType::UInt16,
        SqlType::IntUnsigned(_) | SqlType::IntegerUnsigned(_) | SqlType::Int4Unsigned(_) => {
            DataType::UInt32
        }
        SqlType::BigIntUnsigned(_) | SqlType::Int8Unsigned(_) => DataType::UInt64,
        SqlType::Float(_) | SqlType::Real | SqlType::Float4 => DataType::Float32,
        SqlType::Double(ExactNumberInfo::None) | SqlType::DoublePrecision | SqlType::Float8 => {
            DataType::Float64
        }
        SqlType::Varchar(None) | SqlType::Char(_) | SqlType::Text | SqlType::String(_) => {
            DataType::Utf8View
        }
        other => return Err(format!("CAST to {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(sql: &str) -> Node {
        match parse(sql) {
            Ok(Parsed::Native(n)) => n,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn precedence_and_names_follow_datafusion() {
        assert_eq!(
            native("a + 2 * \"B\""),
            Node::Arith(
                Arith::Add,
                Box::new(Node::Column("a".into())),
                Box::new(Node::Arith(
                    Arith::Mul,
                    Box::new(Node::Literal(Literal::Int64(2))),
                    Box::new(Node::Column("B".into()))
                ))
            )
        );
        assert_eq!(native("Month"), Node::Column("month".into()));
        assert_eq!(
            native("-9223372036854775808"),
            Node::Literal(Literal::Int64(i64::MIN))
        );
        assert_eq!(
            native("18446744073709551615"),
            Node::Literal(Literal::UInt64(u64::MAX))
        );
        assert_eq!(native("1.5"), Node::Literal(Literal::Float64(1.5)));
        assert_eq!(
            native("CAST(x AS FLOAT)"),
            Node::Cast(Box::new(Node::Column("x".into())), DataType::Float32)
        );
        assert_eq!(
            native("x::VARCHAR"),
            Node::Cast(Box::new(Node::Column("x".into())), DataType::Utf8View)
        );
        assert!(matches!(native("a IS NOT NULL"), Node::IsNull(_, true)));
    }

    #[test]
    fn coalesce_is_native() {
        let col = |c: &str| Node::Column(c.into());
        assert_eq!(
            native("COALESCE(\"Sex\", '?')"),
            Node::Coalesce(vec![col("Sex"), Node::Literal(Literal::Utf8("?".into()))])
        );
        assert_eq!(
            native("coalesce(a, b, 0)"),
            Node::Coalesce(vec![col("a"), col("b"), Node::Literal(Literal::Int64(0))])
        );
        assert!(matches!(
            parse("COALESCE(DISTINCT a)"),
            Ok(Parsed::Unsupported(w)) if w.starts_with("the call")
        ));
        assert!(matches!(
            parse("my.coalesce(a, b)"),
            Ok(Parsed::Unsupported(w)) if w.starts_with("the function")
        ));
    }

    #[test]
    fn other_sql_is_named_or_refused() {
        assert_eq!(
            parse("upper(a)"),
            Ok(Parsed::Unsupported("the function upper".into()))
        );
        assert!(matches!(
            parse("CASE WHEN a THEN 1 END"),
            Ok(Parsed::Unsupported(w)) if w.starts_with("CASE")
        ));
        assert!(parse("a b c").is_err());
        assert!(parse("a +").is_err());
    }
}
