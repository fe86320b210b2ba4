//! The field inputs of raw rows: each field's column, columns or expression
//! (as the compiler's pass query selects them, [`Chain::select_items`]), the
//! split key and the filter, evaluated over a batch of the query's output
//! columns.
//!
//! Input columns are first made the types the build saw (recorded in the
//! manifest): a value that does not convert exactly is an error naming the
//! column and the row. The string types count as one type, and so do the
//! binary types, where a column is used as it is.

use super::TransformError;
use crate::chain::Chain;
use crate::sql::{self, Compiled, Node, Parsed, SqlEngine};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::collections::HashMap;
use std::sync::Arc;

/// The output column of the row numbers kept by the filter when an engine
/// evaluates it.
const ROW_COLUMN: &str = "__row";

/// One SQL expression of the pass: a field input, the split key or the filter.
#[derive(Clone, Debug)]
pub struct Expr {
    /// The spec key it comes from (`fields.route`, `filter`, `split.key`).
    pub key: String,
    /// Its output column (`__f3`, `__f1_2`, `__split`, `__filter`).
    pub alias: String,
    /// The SQL as the compiler's query selects it.
    pub sql: String,
    native: Result<Native, String>,
}

#[derive(Clone, Debug)]
struct Native {
    node: Node,
    columns: Vec<String>,
    /// A column used as it is (possibly cast to text): any type of the same
    /// family as the recorded one is taken without a cast.
    direct: bool,
    /// Compiled against the recorded types, when they are known.
    compiled: Option<(Compiled, SchemaRef)>,
}

impl Expr {
    /// Parses `sql` (of spec key `key`, selected as `alias`); `columns` are
    /// the query's recorded output columns, if known.
    pub fn new(
        key: String,
        alias: String,
        sql: String,
        recorded: Option<&Schema>,
    ) -> Result<Expr, TransformError> {
        let parsed = sql::parse(&sql).map_err(|message| TransformError::Sql {
            key: key.clone(),
            message,
        })?;
        let native = match parsed {
            Parsed::Unsupported(what) => Err(what),
            Parsed::Native(node) => {
                let columns = sql::columns(&node);
                let direct = match &node {
                    Node::Column(_) => true,
                    Node::Cast(inner, to) => {
                        matches!(inner.as_ref(), Node::Column(_)) && sql::is_string(to)
                    }
                    _ => false,
                };
                match recorded {
                    None => Ok(Native {
                        node,
                        columns,
                        direct,
                        compiled: None,
                    }),
                    Some(schema) => {
                        let sub =
                            sub_schema(schema, &columns).map_err(|c| TransformError::Sql {
                                key: key.clone(),
                                message: format!("the query has no column {c:?}"),
                            })?;
                        match sql::compile(&node, &sub) {
                            Ok(c) => Ok(Native {
                                node,
                                columns,
                                direct,
                                compiled: Some((c, sub)),
                            }),
                            Err(why) => Err(why),
                        }
                    }
                }
            }
        };
        Ok(Expr {
            key,
            alias,
            sql,
            native,
        })
    }

    /// Why the expression needs an engine, if it does.
    pub fn unsupported(&self) -> Option<&str> {
        self.native.as_ref().err().map(String::as_str)
    }
}

fn sub_schema(schema: &Schema, columns: &[String]) -> Result<SchemaRef, String> {
    let fields = columns
        .iter()
        .map(|c| schema.field_with_name(c).cloned().map_err(|_| c.clone()))
        .collect::<Result<Vec<Field>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// The field inputs of a spec, its filter and its split key.
pub struct Inputs {
    pub fields: Vec<Expr>,
    pub filter: Option<Expr>,
    pub split: Option<Expr>,
    recorded: Option<Schema>,
}

impl Inputs {
    /// The expressions of `chains` (every field's), `filter` and `split_key`.
    pub fn new(
        chains: &[Chain],
        filter: Option<&str>,
        split_key: Option<&str>,
        recorded: Option<Schema>,
    ) -> Result<Inputs, TransformError> {
        let mut fields = Vec::new();
        for chain in chains {
            let items = chain.select_items();
            let n = items.len();
            for (j, (sql, alias)) in items.into_iter().enumerate() {
                let key = match (&chain.field.input, n) {
                    (crate::field::FieldInput::Columns(_), _) => {
                        format!("fields.{}.columns[{j}]", chain.field.name)
                    }
                    _ => format!("fields.{}", chain.field.name),
                };
                fields.push(Expr::new(key, alias, sql, recorded.as_ref())?);
            }
        }
        let filter = filter
            .map(|f| {
                Expr::new(
                    "filter".into(),
                    "__filter".into(),
                    f.to_string(),
                    recorded.as_ref(),
                )
            })
            .transpose()?;
        let split = split_key
            .map(|k| {
                Expr::new(
                    "split.key".into(),
                    crate::split::SPLIT_COLUMN.into(),
                    format!("CAST(({k}) AS VARCHAR)"),
                    recorded.as_ref(),
                )
            })
            .transpose()?;
        Ok(Inputs {
            fields,
            filter,
            split,
            recorded,
        })
    }

    /// The query's output columns as the build saw them, if recorded.
    pub fn recorded(&self) -> Option<&Schema> {
        self.recorded.as_ref()
    }

    /// Evaluates `exprs` over `rows`, keeping the rows `filter` accepts when
    /// one is given. Returns the outputs (named by the aliases) and, with a
    /// filter, the input rows kept.
    pub fn evaluate(
        &self,
        rows: &RecordBatch,
        exprs: &[&Expr],
        filter: Option<&Expr>,
        engine: Option<&dyn SqlEngine>,
    ) -> Result<(RecordBatch, Option<Vec<usize>>), TransformError> {
        let unsupported = exprs
            .iter()
            .copied()
            .chain(filter)
            .find_map(|e| e.unsupported().map(|why| (e, why)));
        match (unsupported, engine) {
            (None, _) => self.native(rows, exprs, filter),
            (Some(_), Some(engine)) => self.engine(rows, exprs, filter, engine),
            (Some((e, why)), None) => Err(TransformError::Unsupported {
                key: e.key.clone(),
                sql: e.sql.clone(),
                what: why.to_string(),
            }),
        }
    }

    /// Column `name` of `rows`, made the recorded type (`exact`: that very
    /// type; otherwise one of its family is kept).
    fn conform(
        &self,
        rows: &RecordBatch,
        name: &str,
        key: &str,
        exact: bool,
    ) -> Result<ArrayRef, TransformError> {
        let col = rows
            .column_by_name(name)
            .ok_or_else(|| TransformError::MissingColumn {
                column: name.to_string(),
                key: key.to_string(),
                available: rows
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect(),
            })?;
        let Some(to) = self
            .recorded
            .as_ref()
            .and_then(|s| s.field_with_name(name).ok())
            .map(|f| f.data_type())
        else {
            return Ok(Arc::clone(col));
        };
        let from = col.data_type();
        if from == to || !exact && same_family(from, to) {
            return Ok(Arc::clone(col));
        }
        checked_cast(col, to).map_err(|(row, message)| TransformError::InputValue {
            column: name.to_string(),
            row,
            message,
        })
    }

    fn native(
        &self,
        rows: &RecordBatch,
        exprs: &[&Expr],
        filter: Option<&Expr>,
    ) -> Result<(RecordBatch, Option<Vec<usize>>), TransformError> {
        // Each needed column once, in the recorded type (or, where only used
        // as it is, in any type of the recorded one's family).
        let all: Vec<&Expr> = exprs.iter().copied().chain(filter).collect();
        let natives = all
            .iter()
            .filter_map(|e| e.native.as_ref().ok().map(|n| (e, n)));
        let exact: Vec<&str> = natives
            .clone()
            .filter(|(_, n)| !n.direct)
            .flat_map(|(_, n)| n.columns.iter().map(String::as_str))
            .collect();
        let mut cols: HashMap<&str, ArrayRef> = HashMap::new();
        for (e, n) in natives {
            for c in &n.columns {
                if !cols.contains_key(c.as_str()) {
                    let a = self.conform(rows, c, &e.key, exact.contains(&c.as_str()))?;
                    cols.insert(c, a);
                }
            }
        }
        let mut kept = None;
        if let Some(f) = filter {
            let mask = eval(f, &cols, rows.num_rows())?;
            let mask = mask.as_boolean_opt().ok_or_else(|| TransformError::Sql {
                key: f.key.clone(),
                message: format!("the filter is {}, not a boolean", mask.data_type()),
            })?;
            if mask.true_count() < rows.num_rows() {
                let idx: Vec<usize> = (0..mask.len())
                    .filter(|&i| mask.is_valid(i) && mask.value(i))
                    .collect();
                for a in cols.values_mut() {
                    *a = arrow_select::filter::filter(a.as_ref(), mask)
                        .map_err(|e| TransformError::Engine(e.to_string()))?;
                }
                kept = Some(idx);
            } else {
                kept = Some((0..rows.num_rows()).collect());
            }
        }
        let n = kept.as_ref().map_or(rows.num_rows(), Vec::len);
        let mut fields = Vec::with_capacity(exprs.len());
        let mut arrays = Vec::with_capacity(exprs.len());
        for e in exprs {
            let a = eval(e, &cols, n)?;
            fields.push(Field::new(&e.alias, a.data_type().clone(), true));
            arrays.push(a);
        }
        let out = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            arrays,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .map_err(|e| TransformError::Engine(e.to_string()))?;
        Ok((out, kept))
    }

    fn engine(
        &self,
        rows: &RecordBatch,
        exprs: &[&Expr],
        filter: Option<&Expr>,
        engine: &dyn SqlEngine,
    ) -> Result<(RecordBatch, Option<Vec<usize>>), TransformError> {
        // The rows in the recorded types where the build saw the column, and
        // their numbers, so the rows the filter keeps are known.
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        for (f, a) in rows.schema().fields().iter().zip(rows.columns()) {
            let known = self
                .recorded
                .as_ref()
                .is_some_and(|s| s.field_with_name(f.name()).is_ok());
            let a = if known {
                self.conform(rows, f.name(), "the input", true)?
            } else {
                Arc::clone(a)
            };
            fields.push(Field::new(f.name(), a.data_type().clone(), true));
            arrays.push(a);
        }
        fields.push(Field::new(ROW_COLUMN, DataType::UInt64, false));
        arrays.push(Arc::new(UInt64Array::from_iter_values(
            0..rows.num_rows() as u64,
        )));
        let input = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .map_err(|e| TransformError::Engine(e.to_string()))?;
        let mut items: Vec<(String, String)> = exprs
            .iter()
            .map(|e| (e.sql.clone(), e.alias.clone()))
            .collect();
        items.push((sql::quote_ident(ROW_COLUMN), ROW_COLUMN.into()));
        let out = engine
            .select(input, &items, filter.map(|f| f.sql.as_str()))
            .map_err(TransformError::Engine)?;
        let row_col = out
            .column_by_name(ROW_COLUMN)
            .and_then(|c| c.as_primitive_opt::<arrow_array::types::UInt64Type>())
            .ok_or_else(|| TransformError::Engine("the engine lost the row numbers".into()))?;
        let kept = filter.map(|_| row_col.values().iter().map(|&r| r as usize).collect());
        let keep: Vec<usize> = (0..out.num_columns() - 1).collect();
        let out = out
            .project(&keep)
            .map_err(|e| TransformError::Engine(e.to_string()))?;
        Ok((out, kept))
    }
}

/// Evaluates one natively supported expression over the conformed columns.
fn eval(e: &Expr, cols: &HashMap<&str, ArrayRef>, rows: usize) -> Result<ArrayRef, TransformError> {
    let Ok(n) = &e.native else {
        return Err(TransformError::Engine(format!("{}: not native", e.key)));
    };
    let arrays: Vec<ArrayRef> = n
        .columns
        .iter()
        .map(|c| Arc::clone(&cols[c.as_str()]))
        .collect();
    match (&n.node, arrays.as_slice()) {
        (Node::Column(_), [a]) => return Ok(Arc::clone(a)),
        // Text as it is: the same text whichever string type holds it.
        (Node::Cast(_, to), [a]) if n.direct => {
            return if sql::is_string(a.data_type()) {
                Ok(Arc::clone(a))
            } else {
                cast_with_options(a, to, &sql::CAST_OPTIONS).map_err(|err| TransformError::Sql {
                    key: e.key.clone(),
                    message: err.to_string(),
                })
            };
        }
        _ => {}
    }
    let (compiled, schema) = match &n.compiled {
        Some((c, s)) => (c.clone(), Arc::clone(s)),
        None => {
            let schema = Arc::new(Schema::new(
                n.columns
                    .iter()
                    .zip(&arrays)
                    .map(|(c, a)| Field::new(c, a.data_type().clone(), true))
                    .collect::<Vec<_>>(),
            ));
            let c = sql::compile(&n.node, &schema).map_err(|why| TransformError::Unsupported {
                key: e.key.clone(),
                sql: e.sql.clone(),
                what: why,
            })?;
            (c, schema)
        }
    };
    let batch = RecordBatch::try_new_with_options(
        schema,
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|err| TransformError::Sql {
        key: e.key.clone(),
        message: err.to_string(),
    })?;
    compiled
        .eval(&batch)
        .map_err(|message| TransformError::Sql {
            key: e.key.clone(),
            message,
        })
}

/// String types hold the same text and binary types the same bytes.
fn same_family(a: &DataType, b: &DataType) -> bool {
    use DataType::*;
    let bin = |t: &DataType| matches!(t, Binary | LargeBinary | BinaryView | FixedSizeBinary(_));
    sql::is_string(a) && sql::is_string(b) || bin(a) && bin(b)
}

/// Casts `col` to `to`, failing on the first value that does not convert
/// exactly: `(row, message)`.
fn checked_cast(col: &ArrayRef, to: &DataType) -> Result<ArrayRef, (usize, String)> {
    let from = col.data_type();
    if from == &DataType::Null {
        // All null (a list of Nones): no value to convert.
        return Ok(arrow_array::new_null_array(to, col.len()));
    }
    let whole_only = matches!(
        from,
        DataType::Float16 | DataType::Float32 | DataType::Float64
    ) && to.is_integer();
    if whole_only {
        let f = cast_with_options(col, &DataType::Float64, &CastOptions::default())
            .map_err(|e| (0, e.to_string()))?;
        let f = f.as_primitive::<arrow_array::types::Float64Type>();
        if let Some(r) = (0..f.len()).find(|&r| f.is_valid(r) && f.value(r).fract() != 0.0) {
            return Err((
                r,
                format!(
                    "{} is not a whole number, and the build read {to}",
                    f.value(r)
                ),
            ));
        }
    }
    let out = cast_with_options(col, to, &CastOptions::default()).map_err(|e| {
        (
            0,
            format!("cannot be read as {to}, the type the build saw: {e}"),
        )
    })?;
    if out.null_count() > col.null_count()
        && let Some(r) = (0..col.len()).find(|&r| col.is_valid(r) && out.is_null(r))
    {
        return Err((
            r,
            format!(
                "{} does not convert to {to}, the type the build saw",
                crate::values::show(col.as_ref(), r)
            ),
        ));
    }
    Ok(out)
}
