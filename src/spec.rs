//! The YAML spec language: types, parsing, validation and canonical form.
//!
//! STUB: the types below are the contract used by the planner and encoder;
//! parsing and validation are being written.

use std::path::PathBuf;
use tessera_reader::DType;

/// A parsed, validated spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The spec file it came from (absolute).
    pub path: PathBuf,
    /// Spec language version; always 1.
    pub version: u32,
    /// Dataset name.
    pub name: String,
    /// Sources in the order the YAML lists them.
    pub sources: Vec<Source>,
    /// Optional SQL over the named sources; default `SELECT * FROM <only source>`.
    pub query: Option<String>,
    /// Optional SQL predicate applied to the query's output (pushed down).
    pub filter: Option<String>,
    /// Output fields in YAML order.
    pub fields: Vec<Field>,
    /// Optional split into named subsets.
    pub split: Option<Split>,
    /// Output order.
    pub order: Order,
    /// Shard sizing.
    pub shards: Shards,
}

/// File format of a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// Apache Parquet.
    Parquet,
    /// Delimited text.
    Csv,
    /// Newline-delimited JSON.
    Json,
    /// Arrow IPC file.
    Arrow,
}

/// CSV reading options.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvOptions {
    /// Field delimiter (default b',').
    pub delimiter: u8,
    /// First line is a header (default true).
    pub header: bool,
    /// Strings read as null (default empty).
    pub null_values: Vec<String>,
}

/// One named input.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Table name used in `query`.
    pub name: String,
    /// File format (from `format:` or the extension).
    pub format: SourceFormat,
    /// The path or glob as written in the spec.
    pub path: String,
    /// Matching files, absolute, sorted: the deterministic input order.
    pub files: Vec<PathBuf>,
    /// For hive-partitioned folders: partition column names in path order.
    pub partition_columns: Vec<String>,
    /// CSV options (ignored for other formats).
    pub csv: CsvOptions,
    /// The spec marks this source as the one to cut into chunks (`chunk: true`).
    pub chunk: bool,
}

/// Where a field's values come from.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldInput {
    /// One column.
    Column(String),
    /// Several scalar columns stacked into a vector of shape `[n]`.
    Columns(Vec<String>),
    /// A SQL expression evaluated by DataFusion.
    Expr(String),
}

/// A transform applied to a field's values, in list order.
#[derive(Clone, Debug, PartialEq)]
pub enum Transform {
    /// `ln(1 + x)`.
    Log1p,
    /// Clamp into `[min, max]` (either bound optional).
    Clip {
        /// Lower bound.
        min: Option<f64>,
        /// Upper bound.
        max: Option<f64>,
    },
    /// `(x - mean) / std` with statistics from the training split.
    Standardize,
    /// `(x - min) / (max - min)` with statistics from the training split.
    MinMax,
    /// Stable hash of the value's string form modulo `buckets`.
    HashBucket {
        /// Number of buckets.
        buckets: u64,
    },
    /// Map values to ids by frequency in the training split.
    Vocab {
        /// Minimum count for a value to get its own id.
        min_count: u64,
        /// Largest vocabulary (most frequent kept).
        max_size: Option<u64>,
        /// Id for out-of-vocabulary values.
        oov: i64,
    },
    /// One-hot encode an integer id in `0..classes`, appending a dimension.
    OneHot {
        /// Number of classes.
        classes: u64,
    },
}

/// One output field.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// Field name (the YAML key).
    pub name: String,
    /// Stored element type.
    pub dtype: DType,
    /// Input column(s) or expression.
    pub input: FieldInput,
    /// For list columns: pad or truncate to this many elements.
    pub length: Option<u64>,
    /// Pad value for lists shorter than `length` (default 0).
    pub pad: f64,
    /// For fixed-size binary columns (`dtype: u8`): bytes per value.
    pub bytes: Option<u64>,
    /// Value used for nulls; a null with no fill_null is an error naming the row.
    pub fill_null: Option<f64>,
    /// Transforms in application order.
    pub transforms: Vec<Transform>,
}

impl Field {
    /// The stored shape of one value of this field.
    pub fn shape(&self) -> Vec<u64> {
        let mut shape = match (&self.input, self.length, self.bytes) {
            (FieldInput::Columns(cs), _, _) => vec![cs.len() as u64],
            (_, Some(n), _) => vec![n],
            (_, _, Some(n)) => vec![n],
            _ => vec![],
        };
        for t in &self.transforms {
            if let Transform::OneHot { classes } = t {
                shape.push(*classes);
            }
        }
        shape
    }
}

/// Assignment of rows to named splits.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// SQL expression whose value (as a string) is hashed to pick the split.
    pub key: String,
    /// Split names and weights in YAML order (weights sum to 1 after normalizing).
    pub weights: Vec<(String, f64)>,
    /// Split whose rows feed transform statistics (default: `train` if present,
    /// else the first split).
    pub stats_split: String,
}

/// Output order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Order {
    /// Build-time shuffle seed; `None` keeps the input order.
    pub shuffle_seed: Option<u64>,
}

/// Shard sizing.
#[derive(Clone, Debug, PartialEq)]
pub struct Shards {
    /// Target bytes per shard file (default 64 MiB).
    pub target_bytes: u64,
}
