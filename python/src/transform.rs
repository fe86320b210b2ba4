//! `Dataset.transform` and `Dataset.split_of`: the artifact's transforms
//! (the `tessera_transform` crate, the compiler's own encoding) applied to
//! new rows, returned as the same dict of NumPy arrays a loader yields.

use crate::batch::Batch;
use crate::errors::{FormatError, TransformError};
use crate::views::RecordView;
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

type Shared = Arc<tessera_transform::Transform>;
/// Field names asked for, their transform, and the view of its records.
type Subset = (Vec<String>, Shared, Arc<RecordView>);

/// Field subsets kept ready, most recent last: a service asks for the same
/// few again and again, and a subset's vocabularies take time to index.
const SUBSETS_KEPT: usize = 8;

/// A dataset's transform, read from its manifest on first use, and the
/// transforms of the field subsets asked for (`fields=`) with the layouts
/// of their records.
#[derive(Default)]
pub(crate) struct TransformCell {
    whole: OnceLock<Shared>,
    subsets: Mutex<Vec<Subset>>,
}

impl TransformCell {
    fn get(&self, ds: &tessera_reader::Dataset) -> PyResult<Shared> {
        if let Some(t) = self.whole.get() {
            return Ok(Arc::clone(t));
        }
        let t = tessera_transform::Transform::from_manifest(ds.manifest(), Some(ds.dir()))
            .map_err(|e| FormatError::new_err(format!("{}: {e}", ds.dir().display())))?;
        Ok(Arc::clone(self.whole.get_or_init(|| Arc::new(t))))
    }

    fn kept(&self) -> PyResult<MutexGuard<'_, Vec<Subset>>> {
        self.subsets
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the transform cache was poisoned"))
    }

    /// The transform of `fields` only, and the view of its records.
    fn subset(
        &self,
        py: Python<'_>,
        ds: &tessera_reader::Dataset,
        fields: Vec<String>,
    ) -> PyResult<(Shared, Arc<RecordView>)> {
        if let Some((_, t, v)) = self.kept()?.iter().find(|(k, _, _)| *k == fields) {
            return Ok((Arc::clone(t), Arc::clone(v)));
        }
        let whole = self.get(ds)?;
        let t = Arc::new(py.detach(|| whole.with_fields(&fields)).map_err(to_py)?);
        let v = Arc::new(RecordView::new(py, t.layout())?);
        let mut kept = self.kept()?;
        if kept.len() == SUBSETS_KEPT {
            kept.remove(0);
        }
        kept.push((fields, Arc::clone(&t), Arc::clone(&v)));
        Ok((t, v))
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
    fields: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (t, own_view) = match fields {
        None => (cell.get(ds)?, None),
        Some(f) => {
            let (t, v) = cell.subset(py, ds, f)?;
            (t, Some(v))
        }
    };
    let view = own_view.as_deref().unwrap_or(view);
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
