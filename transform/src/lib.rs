//! # tessera-transform
//!
//! The transforms of a tessera artifact, applied to new rows: the same field
//! inputs, fills, transform steps, frozen statistics, vocabularies, stable
//! hash and record encoding the compiler used to write the shards, so a model
//! is served on records made exactly like the ones it was trained on.
//!
//! The compiler (`tessera-shards`) encodes its query output through this
//! crate's [`record::RecordEncoder`]; the serving path evaluates each field's
//! input over raw rows and hands the result to the same encoder. There is one
//! implementation of the bytes, so training and serving cannot drift.
//!
//! ```no_run
//! use tessera_transform::Transform;
//! # fn rows() -> arrow_array::RecordBatch { unimplemented!() }
//! let t = Transform::from_artifact("path/to/shard-set")?;
//! let out = t.apply(&rows())?;                 // rows: the query's output columns
//! let dense = out.field::<f32>("dense")?;      // typed views, as the reader gives
//! let bytes = out.records();                   // the records a build would write
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules, in pipeline order: [`field`] (the field model, read back from the
//! manifest's canonical spec), [`sql`] (field inputs, the split key and the
//! filter evaluated over Arrow without DataFusion, for the expressions it
//! knows), [`chain`] (how a field's values are read and transformed),
//! [`values`] (checked conversions; [`decimal`], decimals to the nearest double), [`semantics`] (the stable hash, frozen
//! statistics, per-value arithmetic), [`record`] (the encoding), [`split`]
//! (split assignment), [`serving`] (the [`Transform`] of an artifact),
//! [`export`] (the portable JSON export and its conformance cases); [`text`]
//! and [`chat`] (tokenizers and chat templates of `tokenize` steps).
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod chain;
pub mod chat;
pub mod decimal;
pub mod export;
pub mod field;
pub mod image;
pub mod pretok;
pub mod ranks;
pub mod record;
pub mod semantics;
pub mod serving;
pub mod split;
pub mod sql;
pub mod text;
pub mod values;

pub use serving::{Encoded, Transform, TransformError};
pub use sql::SqlEngine;
// The Arrow crates of the API (the version DataFusion 55 uses), for callers
// that build the rows.
pub use arrow_array;
pub use arrow_schema;

#[cfg(test)]
mod test_support;
