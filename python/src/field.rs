//! `tessera.Field`: one field of the record layout, as Python sees it.

use crate::views::numpy_dtype;
use numpy::PyArrayDescr;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tessera_reader::FieldLayout;

/// One field of a shard set's records: its name, element type and shape.
///
/// Iterating gives ``(name, dtype, shape)``, so
/// ``for name, dtype, shape in ds.fields`` works.
#[pyclass(frozen, eq, module = "tessera._tessera", name = "Field")]
#[derive(PartialEq)]
pub struct Field {
    layout: FieldLayout,
}

impl Field {
    pub(crate) fn new(layout: FieldLayout) -> Self {
        Field { layout }
    }
}

#[pymethods]
impl Field {
    /// Field name.
    #[getter]
    fn name(&self) -> &str {
        &self.layout.name
    }

    /// tessera element type: ``"u8"``, ``"i32"``, ``"f16"``, ``"bf16"``, ``"f32"``, ...
    #[getter]
    fn dtype(&self) -> &'static str {
        self.layout.dtype.name()
    }

    /// Shape of the field within one record; ``()`` for a scalar.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.layout.shape)
    }

    /// Byte offset of the field inside a record.
    #[getter]
    fn offset(&self) -> u64 {
        self.layout.offset
    }

    /// The NumPy dtype arrays of this field have (``bf16`` is ``uint16``).
    #[getter]
    fn numpy_dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDescr>> {
        numpy_dtype(py, self.layout.dtype)
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = PyTuple::new(
            py,
            [
                self.name().into_pyobject(py)?.into_any(),
                self.dtype().into_pyobject(py)?.into_any(),
                self.shape(py)?.into_any(),
            ],
        )?;
        t.try_iter().map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self.layout.shape.iter().map(u64::to_string).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        format!(
            "Field(name='{}', dtype='{}', shape={shape}, offset={})",
            self.layout.name.escape_default(),
            self.layout.dtype.name(),
            self.layout.offset
        )
    }
}
