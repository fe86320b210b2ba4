//! `tessera.Batch`: the owner of one batch buffer, and the `base` of every
//! NumPy array a loader yields for that batch.

use crate::views::{RecordView, strided_array};
use numpy::PyUntypedArray;
use numpy::npyffi::npy_intp;
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One batch's contiguous buffer of ``rows x stride`` bytes.
///
/// A loader yields a ``dict`` of NumPy arrays; every array is a strided,
/// writable view into this one buffer, and this object is each array's
/// ``base``. The buffer is the batch's own copy (the files are never written),
/// and it is recycled for a later batch only once every view of it is gone.
#[pyclass(frozen, module = "tessera._tessera", name = "Batch")]
pub struct Batch {
    /// Held only to keep the buffer alive (and hand it back to the loader's
    /// pool when dropped): after construction Rust never touches the bytes,
    /// which NumPy may be writing.
    _inner: tessera_reader::Batch,
    address: usize,
    rows: usize,
    stride: usize,
    index: u64,
    /// False for a batch borrowed from the memory map (`copy=False`).
    writeable: bool,
}

impl Batch {
    /// Wraps `batch` and returns its fields as a dict of views into it.
    pub(crate) fn into_dict<'py>(
        py: Python<'py>,
        mut batch: tessera_reader::Batch,
        view: &RecordView,
    ) -> PyResult<Bound<'py, PyDict>> {
        let rows = batch.rows();
        let stride = batch.stride();
        let index = batch.index();
        debug_assert_eq!(stride, view.stride());
        // The pointer outlives the move into the Python object below: moving
        // the batch moves the buffer's handle (or the map's), not the bytes.
        // A batch borrowed from the map (a loader with copy=False) is shown
        // read-only; any other batch owns its buffer and is writable.
        let writeable = !batch.is_zero_copy();
        let data = if writeable {
            batch.bytes_mut().as_mut_ptr()
        } else {
            batch.bytes().as_ptr().cast_mut()
        };
        let owner = Bound::new(
            py,
            Batch {
                _inner: batch,
                address: data as usize,
                rows,
                stride,
                index,
                writeable,
            },
        )?;
        // SAFETY: `data` is the start of the batch's `rows * stride` bytes,
        // 8-byte aligned (tessera_reader::Batch guarantees it for a buffer;
        // records in a map are aligned to the stride), owned by `owner` (its
        // buffer, or the dataset that keeps the map) and freed, recycled or
        // unmapped only when `owner` is dropped, which the arrays prevent by
        // holding it as their base. A buffer is writable and Rust never forms
        // a reference to it again, so NumPy's writes race with nothing; the
        // map is read-only and its views are made non-writeable (NumPy
        // refuses to make them writeable: their base exposes no buffer).
        unsafe { view.dict(owner.as_any(), data, Some(rows), writeable) }
    }
}

#[pymethods]
impl Batch {
    /// Records in the batch.
    #[getter]
    fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes per record (the byte stride of the leading axis of every field).
    #[getter]
    fn stride(&self) -> usize {
        self.stride
    }

    /// Size of the buffer in bytes (``rows * stride``).
    #[getter]
    fn nbytes(&self) -> usize {
        self.rows * self.stride
    }

    /// Address of the first byte of the buffer; field ``f`` of record ``j``
    /// is at ``address + j * stride + offset(f)``.
    #[getter]
    fn address(&self) -> usize {
        self.address
    }

    /// The whole buffer as a writable 1-D ``uint8`` NumPy array (no copy;
    /// its ``base`` is this batch). ``tessera.torch`` builds every field's
    /// tensor over one tensor of it, so a batch crosses from a DataLoader
    /// worker as one shared-memory block.
    fn buffer<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let this = slf.get();
        let len = npy_intp::try_from(this.rows * this.stride)
            .map_err(|_| PyOverflowError::new_err("batch too large for NumPy"))?;
        let descr = numpy::dtype::<u8>(slf.py());
        // SAFETY: `address .. address + rows * stride` is this batch's own
        // buffer (writable, never read or written by Rust after
        // construction) or its records in the map (read-only, and shown so),
        // valid and unmoved for as long as the batch object lives (the
        // array's base); see `into_dict`.
        unsafe {
            strided_array(
                slf.as_any(),
                &descr,
                this.address as *mut u8,
                &mut [len],
                &mut [1],
                this.writeable,
            )
        }
    }

    /// The batch's index in this rank's batch sequence for the epoch.
    #[getter]
    fn index(&self) -> u64 {
        self.index
    }

    fn __len__(&self) -> usize {
        self.rows
    }

    fn __repr__(&self) -> String {
        format!(
            "Batch(index={}, rows={}, stride={})",
            self.index, self.rows, self.stride
        )
    }
}
