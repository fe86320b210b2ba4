//! `Dataset.transform` and `Dataset.split_of`: the artifact's transforms
//! (the `tessera_transform` crate, the compiler's own encoding) applied to
//! new rows, returned as the same dict of NumPy arrays a loader yields.

use crate::batch::Batch;
use crate::errors::{FormatError, TransformError};
use crate::views::RecordView;
use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, OnceLock};

/// A dataset's transform, read from its manifest on first use.
#[derive(Default)]
pub(crate) struct TransformCell(OnceLock<Arc<tessera_transform::Transform>>);

impl TransformCell {
    fn get(&self, ds: &tessera_reader::Dataset) -> PyResult<Arc<tessera_transform::Transform>> {
        if let Some(t) = self.0.get() {
            return Ok(Arc::clone(t));
        }
        let t = tessera_transform::Transform::from_manifest(ds.manifest(), Some(ds.dir()))
            .map_err(|e| FormatError::new_err(format!("{}: {e}", ds.dir().display())))?;
        Ok(Arc::clone(self.0.get_or_init(|| Arc::new(t))))
    }
}

fn to_py(e: tessera_transform::TransformError) -> PyErr {
    TransformError::new_err(e.to_string())
}

/// The records of `rows` as `{field: array}` (see `Dataset.transform`).
pub(crate) fn apply<'py>(
    py: Python<'py>,
    cell: &TransformCell,
    ds: &tessera_reader::Dataset,
    view: &RecordView,
    rows: &Bound<'py, PyAny>,
    filter: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let t = cell.get(ds)?;
    let batch = crate::rows::record_batch(rows)?;
    let encoded = py
        .detach(|| {
            if filter {
                t.apply_filtered(&batch)
            } else {
                t.apply(&batch)
            }
        })
        .map_err(to_py)?;
    Batch::into_dict(py, encoded.into_batch(), view)
}

/// The split index of each row of `rows` (see `Dataset.split_of`).
pub(crate) fn split_of<'py>(
    py: Python<'py>,
    cell: &TransformCell,
    ds: &tessera_reader::Dataset,
    rows: &Bound<'py, PyAny>,
    filter: bool,
) -> PyResult<Bound<'py, PyArray1<u16>>> {
    let t = cell.get(ds)?;
    let batch = crate::rows::record_batch(rows)?;
    let splits = py.detach(|| t.splits(&batch, filter)).map_err(to_py)?;
    Ok(splits.into_pyarray(py))
}
