//! `tessera._tessera`: the native part of the `tessera` Python package.
//!
//! This file only registers the module's contents; each Python class lives
//! in its own file. Batches reach Python as NumPy views into one buffer per
//! batch (`views`), built by the reader's prefetch threads with the GIL
//! released.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod batch;
mod dataset;
mod errors;
mod field;
mod iterator;
mod loader;
mod mixture;
mod push;
mod rows;
mod transform;
mod views;
mod writer;

use pyo3::prelude::*;

/// Native core of tessera: shard-set reading, batching and writing.
#[pymodule]
fn _tessera(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FORMAT_VERSION", tessera_reader::FORMAT_VERSION)?;
    m.add_function(wrap_pyfunction!(dataset::open, m)?)?;
    m.add_function(wrap_pyfunction!(writer::write_shard_set, m)?)?;
    m.add_function(wrap_pyfunction!(mixture::mixture, m)?)?;
    m.add_function(wrap_pyfunction!(push::push, m)?)?;
    m.add_class::<mixture::Mixture>()?;
    m.add_class::<dataset::Dataset>()?;
    m.add_class::<loader::Loader>()?;
    m.add_class::<iterator::BatchIterator>()?;
    m.add_class::<batch::Batch>()?;
    m.add_class::<field::Field>()?;
    Ok(())
}
