//! [`Transform`]: an artifact's transforms, applied to raw rows.
//!
//! Raw rows are rows of the spec's query output (for a spec without a query,
//! rows of its one source), as an Arrow [`RecordBatch`] with a column per
//! input column the fields read. The transform evaluates each field's input
//! (column, stacked columns or SQL expression), fills nulls, applies the
//! transform steps with the statistics and vocabularies frozen in the
//! manifest, and encodes records with the compiler's own encoder: the bytes
//! are those `tessera build` would have written for the same rows.
//!
//! The split is not applied (every row is encoded); the filter is, on
//! request ([`Transform::apply_filtered`]).

mod arrow_out;
mod artifact;
mod inputs;

pub use artifact::{field_stats, query_columns_record};

use crate::chain::Chain;
use crate::field::{Field, Split};
use crate::record::{EncodeError, RecordEncoder};
use crate::semantics::FrozenStats;
use crate::split::Splits;
use crate::sql::SqlEngine;
use arrow_array::RecordBatch;
use arrow_schema::Schema;
use inputs::{Expr, Inputs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_reader::{Batch, Element, FieldView, Manifest, RecordLayout};

/// Why rows could not be transformed. Each variant names what it is about.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    /// The artifact cannot be read, or holds no transform.
    #[error("{0}")]
    Artifact(String),
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] tessera_reader::Error),
    /// The rows lack a column a field reads.
    #[error(
        "{key} reads column {column:?}, which the rows lack (they have: {})",
        available.join(", ")
    )]
    MissingColumn {
        /// The column.
        column: String,
        /// The spec key that reads it.
        key: String,
        /// The columns the rows have.
        available: Vec<String>,
    },
    /// An input value does not convert to the type the build saw.
    #[error("column {column:?}, row {} (counting from 1): {message}", row + 1)]
    InputValue {
        /// The column.
        column: String,
        /// The row of the input.
        row: usize,
        /// What is wrong, quoting the value.
        message: String,
    },
    /// A value could not be read, converted or stored.
    #[error("fields.{field}: row {} (counting from 1) of the input: {message}", row + 1)]
    Value {
        /// The field.
        field: String,
        /// The row of the input.
        row: usize,
        /// What is wrong, quoting the value.
        message: String,
    },
    /// An expression this crate does not evaluate, and no engine to run it.
    #[error(
        "{key}: {what} in {sql:?} is not evaluated without DataFusion; use the `tessera` \
         command (it embeds DataFusion), or a build of the transform with an SQL engine"
    )]
    Unsupported {
        /// The spec key.
        key: String,
        /// The SQL.
        sql: String,
        /// The construct.
        what: String,
    },
    /// An expression failed.
    #[error("{key}: {message}")]
    Sql {
        /// The spec key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// The SQL engine failed.
    #[error("the SQL engine: {0}")]
    Engine(String),
    /// A field asked for by name is not one of the artifact's.
    #[error("the artifact has no field {field:?} (its fields: {})", known.join(", "))]
    UnknownField {
        /// The name asked for.
        field: String,
        /// The artifact's fields, in record order.
        known: Vec<String>,
    },
}

/// Encoded records and the input rows they came from.
#[derive(Debug)]
pub struct Encoded {
    batch: Batch,
    kept: Option<Vec<usize>>,
}

impl Encoded {
    /// Records encoded.
    pub fn rows(&self) -> usize {
        self.batch.rows()
    }

    /// The records, `rows x stride` bytes, as a shard stores them.
    pub fn records(&self) -> &[u8] {
        self.batch.bytes()
    }

    /// A typed view of field `name` across the records (no copy), as the
    /// reader gives for a batch of the shard set.
    pub fn field<T: Element>(&self, name: &str) -> tessera_reader::Result<FieldView<'_, T>> {
        self.batch.field(name)
    }

    /// With the filter applied: the input rows each record came from.
    pub fn kept(&self) -> Option<&[usize]> {
        self.kept.as_deref()
    }

    /// The records as a reader batch.
    pub fn into_batch(self) -> Batch {
        self.batch
    }
}

/// The transforms of one artifact.
pub struct Transform {
    fields: Vec<Field>,
    split: Option<Split>,
    filter: Option<String>,
    layout: Arc<RecordLayout>,
    frozen: Vec<Option<Vec<FrozenStats>>>,
    encoder: RecordEncoder,
    inputs: Inputs,
    engine: Option<Arc<dyn SqlEngine>>,
    dir: Option<PathBuf>,
}

impl std::fmt::Debug for Transform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transform")
            .field("fields", &self.fields.len())
            .field("stride", &self.layout.stride)
            .field("engine", &self.engine.is_some())
            .finish()
    }
}

impl Transform {
    /// The transforms of the shard set in directory `dir` (its manifest, and
    /// vocabulary files beside it).
    pub fn from_artifact(dir: impl AsRef<Path>) -> Result<Transform, TransformError> {
        let dir = dir.as_ref();
        let path = dir.join(tessera_reader::MANIFEST_FILE);
        let bytes = std::fs::read(&path).map_err(|e| {
            TransformError::Artifact(format!(
                "{}: {e} (a shard-set directory holds manifest.json)",
                path.display()
            ))
        })?;
        let manifest = Manifest::parse(&bytes, &path)?;
        let mut t = Transform::from_manifest(&manifest, Some(dir))?;
        t.dir = Some(dir.to_path_buf());
        Ok(t)
    }

    /// The transforms a manifest describes. `dir` is where its large
    /// vocabularies are (`None` when they are all inline).
    pub fn from_manifest(
        manifest: &Manifest,
        dir: Option<&Path>,
    ) -> Result<Transform, TransformError> {
        let parts = artifact::read(manifest, dir)?;
        Transform::assemble(parts, Arc::new(manifest.layout.clone()), dir)
    }

    fn assemble(
        parts: artifact::ArtifactParts,
        layout: Arc<RecordLayout>,
        dir: Option<&Path>,
    ) -> Result<Transform, TransformError> {
        let encoder = RecordEncoder::new(&parts.fields, &layout, &parts.frozen)
            .map_err(|e| TransformError::Artifact(e.to_string()))?;
        let chains: Vec<Chain> = encoder.chains().to_vec();
        let inputs = Inputs::new(
            &chains,
            parts.filter.as_deref(),
            parts.split.as_ref().map(|s| s.key.as_str()),
            parts.query_columns,
        )?;
        Ok(Transform {
            fields: parts.fields,
            split: parts.split,
            filter: parts.filter,
            layout,
            frozen: parts.frozen,
            encoder,
            inputs,
            engine: None,
            dir: dir.map(Path::to_path_buf),
        })
    }

    /// The transform of the fields `names` alone (in record order, each
    /// once), for rows that lack the inputs of the others: a service has
    /// the features, not the label. Its records hold only those fields,
    /// packed as a build of them would pack them (`layout()` says where);
    /// each field's values are those of the whole transform. The filter and
    /// the split key stay as they are (they may read other columns). A name
    /// that is not a field is an error listing the fields.
    pub fn with_fields<S: AsRef<str>>(&self, names: &[S]) -> Result<Transform, TransformError> {
        let known = || self.fields.iter().map(|f| f.name.clone()).collect();
        if names.is_empty() {
            return Err(TransformError::UnknownField {
                field: String::new(),
                known: known(),
            });
        }
        for n in names {
            if !self.fields.iter().any(|f| f.name == n.as_ref()) {
                return Err(TransformError::UnknownField {
                    field: n.as_ref().to_string(),
                    known: known(),
                });
            }
        }
        let keep: Vec<usize> = (0..self.fields.len())
            .filter(|&i| names.iter().any(|n| n.as_ref() == self.fields[i].name))
            .collect();
        let mut specs = Vec::with_capacity(keep.len());
        for &i in &keep {
            let name = &self.fields[i].name;
            let f = self
                .layout
                .field(name)
                .ok_or_else(|| TransformError::Artifact(format!("{name} is not in the layout")))?;
            specs.push(tessera_reader::FieldSpec::new(
                name.clone(),
                f.dtype,
                &f.shape,
            ));
        }
        let layout = Arc::new(RecordLayout::packed(&specs)?);
        let parts = artifact::ArtifactParts {
            fields: keep.iter().map(|&i| self.fields[i].clone()).collect(),
            split: self.split.clone(),
            filter: self.filter.clone(),
            frozen: keep.iter().map(|&i| self.frozen[i].clone()).collect(),
            query_columns: self.inputs.recorded().cloned(),
        };
        let mut t = Transform::assemble(parts, layout, self.dir.as_deref())?;
        t.engine = self.engine.clone();
        Ok(t)
    }

    /// Uses `engine` for the SQL this crate does not evaluate.
    pub fn with_engine(mut self, engine: Arc<dyn SqlEngine>) -> Transform {
        self.engine = Some(engine);
        self
    }

    /// The fields, in record order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The record layout.
    pub fn layout(&self) -> &RecordLayout {
        &self.layout
    }

    /// The frozen statistics per field (one entry per stacked column).
    pub fn frozen(&self) -> &[Option<Vec<FrozenStats>>] {
        &self.frozen
    }

    /// The spec's filter, if it has one.
    pub fn filter(&self) -> Option<&str> {
        self.filter.as_deref()
    }

    /// The spec's split, if it has one.
    pub fn split(&self) -> Option<&Split> {
        self.split.as_ref()
    }

    /// The artifact's directory, when opened from one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The query's output columns with the types the build saw, when the
    /// artifact recorded them.
    pub fn query_columns(&self) -> Option<&Schema> {
        self.inputs.recorded()
    }

    /// The columns the fields (and the filter, with `filter`) read, in
    /// first-use order; `None` when an expression needs an engine.
    pub fn input_columns(&self, filter: bool) -> Option<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        let exprs = self
            .inputs
            .fields
            .iter()
            .chain(self.inputs.filter.iter().filter(|_| filter));
        for e in exprs {
            let node = match crate::sql::parse(&e.sql) {
                Ok(crate::sql::Parsed::Native(n)) => n,
                _ => return None,
            };
            for c in crate::sql::columns(&node) {
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        Some(out)
    }

    /// The spec keys whose SQL needs an engine, and why; empty when the
    /// transform runs without DataFusion.
    pub fn needs_engine(&self) -> Vec<(String, String)> {
        let split = self.inputs.split.iter();
        self.inputs
            .fields
            .iter()
            .chain(self.inputs.filter.iter())
            .chain(split)
            .filter_map(|e| e.unsupported().map(|w| (e.key.clone(), w.to_string())))
            .collect()
    }

    /// Encodes every row of `rows`.
    pub fn apply(&self, rows: &RecordBatch) -> Result<Encoded, TransformError> {
        self.encode(rows, false)
    }

    /// Encodes the rows of `rows` the spec's filter keeps (all of them when
    /// the spec has no filter); [`Encoded::kept`] says which.
    pub fn apply_filtered(&self, rows: &RecordBatch) -> Result<Encoded, TransformError> {
        self.encode(rows, true)
    }

    fn encode(&self, rows: &RecordBatch, filter: bool) -> Result<Encoded, TransformError> {
        let (inputs, kept) = self.field_inputs(rows, filter)?;
        let n = inputs.num_rows();
        let mut batch = Batch::zeroed(Arc::clone(&self.layout), n)?;
        self.encoder
            .encode(&inputs, batch.bytes_mut())
            .map_err(|e| match e {
                EncodeError::Value { field, error } => TransformError::Value {
                    field,
                    row: kept.as_ref().map_or(error.row, |k| k[error.row]),
                    message: error.message,
                },
                other => TransformError::Artifact(other.to_string()),
            })?;
        Ok(Encoded { batch, kept })
    }

    /// The fields' inputs for `rows` as the compiler's query would have
    /// selected them (`__f{i}`, `__f{i}_{j}`), and with `filter` the rows
    /// the filter keeps.
    pub fn field_inputs(
        &self,
        rows: &RecordBatch,
        filter: bool,
    ) -> Result<(RecordBatch, Option<Vec<usize>>), TransformError> {
        let exprs: Vec<&Expr> = self.inputs.fields.iter().collect();
        let filter = self.inputs.filter.as_ref().filter(|_| filter);
        self.inputs
            .evaluate(rows, &exprs, filter, self.engine.as_deref())
    }

    /// The split each of `rows` would go to in a build (an index into the
    /// split names, in spec order), with `filter` for the rows the filter
    /// keeps. For reproducing a build; serving does not split.
    pub fn splits(&self, rows: &RecordBatch, filter: bool) -> Result<Vec<u16>, TransformError> {
        let filter = self.inputs.filter.as_ref().filter(|_| filter);
        let Some(key) = &self.inputs.split else {
            let (out, _) = self
                .inputs
                .evaluate(rows, &[], filter, self.engine.as_deref())?;
            return Ok(vec![0; out.num_rows()]);
        };
        let (out, _) = self
            .inputs
            .evaluate(rows, &[key], filter, self.engine.as_deref())?;
        let splits = Splits::new(self.split.as_ref());
        let got = crate::split::row_splits(&out, &splits).map_err(|e| TransformError::Sql {
            key: "split.key".into(),
            message: e.message,
        })?;
        Ok(got.unwrap_or_else(|| vec![0; out.num_rows()]))
    }

    /// The split names, in spec order (`["all"]` without a split).
    pub fn split_names(&self) -> Vec<String> {
        Splits::new(self.split.as_ref()).names
    }
}
