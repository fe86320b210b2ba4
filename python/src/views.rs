//! NumPy arrays over memory that Rust owns: one strided view per field.
//!
//! A batch buffer (or a memory-mapped record) holds `rows` records of
//! `stride` bytes. Field `f` of record `j` starts at `j * stride + offset`, so
//! the whole field is the array of shape `(rows, *shape)` with strides
//! `(stride, row-major strides of shape)` starting at `offset`: no copy. The
//! array's `base` is the Python object that owns the memory, which keeps it
//! alive for as long as any view exists.

use numpy::npyffi::{self, NPY_ARRAY_WRITEABLE, NpyTypes, PY_ARRAY_API, npy_intp};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, dtype};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::ffi::c_void;
use tessera_reader::{DType, FieldLayout, RecordLayout};

/// The NumPy dtype a field's elements are shown as. `bf16` has no NumPy
/// dtype, so it is shown as its raw `uint16` bits (`tessera.torch` views them
/// as `torch.bfloat16` without a copy).
pub(crate) fn numpy_dtype<'py>(py: Python<'py>, d: DType) -> PyResult<Bound<'py, PyArrayDescr>> {
    Ok(match d {
        DType::U8 => dtype::<u8>(py),
        DType::I8 => dtype::<i8>(py),
        DType::U16 | DType::Bf16 => dtype::<u16>(py),
        DType::I16 => dtype::<i16>(py),
        DType::U32 => dtype::<u32>(py),
        DType::I32 => dtype::<i32>(py),
        DType::U64 => dtype::<u64>(py),
        DType::I64 => dtype::<i64>(py),
        DType::F16 => PyArrayDescr::new(py, "float16")?,
        DType::F32 => dtype::<f32>(py),
        DType::F64 => dtype::<f64>(py),
    })
}

/// What is needed to view one field of a run of records: computed once per
/// loader, reused for every batch.
pub(crate) struct FieldView {
    name: Py<PyString>,
    descr: Py<PyArrayDescr>,
    offset: usize,
    /// The field's shape, after the leading rows dimension.
    shape: Vec<npy_intp>,
    /// Row-major byte strides of the field's shape.
    strides: Vec<npy_intp>,
}

/// The views of every field of a record layout, in declaration order.
pub(crate) struct RecordView {
    fields: Vec<FieldView>,
    stride: usize,
}

impl RecordView {
    pub(crate) fn new(py: Python<'_>, layout: &RecordLayout) -> PyResult<Self> {
        let fields = layout
            .fields
            .iter()
            .map(|f| field_view(py, f))
            .collect::<PyResult<Vec<_>>>()?;
        let stride = usize::try_from(layout.stride)
            .map_err(|_| PyOverflowError::new_err("record stride does not fit in memory"))?;
        Ok(RecordView { fields, stride })
    }

    /// Bytes per record.
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// A dict `{field name: array}` viewing `rows` records that start at
    /// `data`, with a leading rows axis; `None` views one record without it.
    ///
    /// # Safety
    ///
    /// `data .. data + rows * stride` (one stride for `None`) must be one allocation, aligned to 8
    /// bytes (every field offset and the stride are multiples of the field's
    /// element size, at most 8), that stays valid and is not moved or freed
    /// for as long as `owner` is alive, and that nothing else reads or writes
    /// through a Rust reference while `owner` is alive. If `writeable`, the
    /// memory must be mutable and not shared with anything else.
    pub(crate) unsafe fn dict<'py>(
        &self,
        owner: &Bound<'py, PyAny>,
        data: *mut u8,
        rows: Option<usize>,
        writeable: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = owner.py();
        let dict = PyDict::new(py);
        let rows = rows
            .map(npy_intp::try_from)
            .transpose()
            .map_err(|_| PyOverflowError::new_err("too many rows for NumPy"))?;
        let stride = npy_intp::try_from(self.stride)
            .map_err(|_| PyOverflowError::new_err("record stride too large for NumPy"))?;
        for f in &self.fields {
            let mut dims = Vec::with_capacity(1 + f.shape.len());
            let mut strides = Vec::with_capacity(1 + f.shape.len());
            if let Some(rows) = rows {
                dims.push(rows);
                strides.push(stride);
            }
            dims.extend_from_slice(&f.shape);
            strides.extend_from_slice(&f.strides);
            // SAFETY: the caller guarantees the run of records is valid for as
            // long as `owner` lives; `f.offset` plus the field's size fits in
            // one record by the layout's validation, so every element the
            // dims and strides reach lies inside the run.
            let arr = unsafe {
                strided_array(
                    owner,
                    f.descr.bind(py),
                    data.wrapping_add(f.offset),
                    &mut dims,
                    &mut strides,
                    writeable,
                )
            }?;
            dict.set_item(f.name.bind(py), arr)?;
        }
        Ok(dict)
    }
}

fn field_view(py: Python<'_>, f: &FieldLayout) -> PyResult<FieldView> {
    let too_big = || PyOverflowError::new_err(format!("field {:?} is too large for NumPy", f.name));
    let shape = f
        .shape
        .iter()
        .map(|&d| npy_intp::try_from(d).map_err(|_| too_big()))
        .collect::<PyResult<Vec<_>>>()?;
    let mut strides = vec![0; shape.len()];
    let mut acc = npy_intp::try_from(f.dtype.size()).map_err(|_| too_big())?;
    for (s, &d) in strides.iter_mut().zip(&shape).rev() {
        *s = acc;
        acc = acc.checked_mul(d).ok_or_else(too_big)?;
    }
    Ok(FieldView {
        name: PyString::intern(py, &f.name).unbind(),
        descr: numpy_dtype(py, f.dtype)?.unbind(),
        offset: usize::try_from(f.offset).map_err(|_| too_big())?,
        shape,
        strides,
    })
}

/// A NumPy array of `descr` elements with `dims` and byte `strides` starting at
/// `data`, whose `base` is `owner`.
///
/// # Safety
///
/// Every element the dims and strides reach from `data` must be valid,
/// aligned memory for as long as `owner` lives (and writable if `writeable`).
pub(crate) unsafe fn strided_array<'py>(
    owner: &Bound<'py, PyAny>,
    descr: &Bound<'py, PyArrayDescr>,
    data: *mut u8,
    dims: &mut [npy_intp],
    strides: &mut [npy_intp],
    writeable: bool,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let py = owner.py();
    let nd = std::ffi::c_int::try_from(dims.len())
        .map_err(|_| PyOverflowError::new_err("too many dimensions"))?;
    let flags = if writeable { NPY_ARRAY_WRITEABLE } else { 0 };
    // SAFETY: `PyArray_NewFromDescr` reads `nd` dims and strides from the two
    // slices (both `nd` long) and steals the descriptor reference that
    // `into_dtype_ptr` adds. With a non-null `data` it allocates nothing and
    // only records the pointer, whose validity the caller guarantees. It
    // returns a new reference or null with an exception set.
    let raw = unsafe {
        PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            descr.clone().into_dtype_ptr(),
            nd,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
            data.cast::<c_void>(),
            flags,
            std::ptr::null_mut(),
        )
    };
    if raw.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `raw` is a new, owned reference to an ndarray (checked non-null).
    let arr = unsafe { Bound::from_owned_ptr(py, raw) };
    // SAFETY: `raw` is an ndarray; `PyArray_SetBaseObject` steals the owner
    // reference that `into_ptr` hands over, also on failure (-1, exception
    // set), in which case `arr` is dropped and frees the array.
    let status = unsafe {
        PY_ARRAY_API.PyArray_SetBaseObject(
            py,
            raw.cast::<npyffi::PyArrayObject>(),
            owner.clone().into_ptr(),
        )
    };
    if status != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(arr.cast_into::<PyUntypedArray>()?)
}
