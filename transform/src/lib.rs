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
//! Modules, in pipeline order: [`field`] (the field model, read back from the
//! manifest's canonical spec), [`sql`] (field inputs, the split key and the
//! filter evaluated over Arrow without DataFusion, for the expressions it
//! knows), [`chain`] (how a field's values are read and transformed),
//! [`values`] (checked conversions), [`semantics`] (the stable hash, frozen
//! statistics, per-value arithmetic), [`record`] (the encoding), [`split`]
//! (split assignment).
#![warn(missing_docs)]

pub mod chain;
pub mod field;
pub mod record;
pub mod semantics;
pub mod split;
pub mod sql;
pub mod values;

#[cfg(test)]
mod test_support;
