//! Python rows -> an Arrow record batch, for `Dataset.transform`.
//!
//! Accepted: anything with the Arrow PyCapsule stream interface
//! (`__arrow_c_stream__`: a pyarrow Table or RecordBatch, a pandas
//! DataFrame, a polars DataFrame), imported without a copy through the C
//! stream interface; or a mapping of column name -> values, where the values
//! are a pyarrow array (`__arrow_c_array__`), a one-dimensional NumPy array,
//! or a list. The transform then converts every column to the type the build
//! saw, so a list of Python ints serves an `int32` column.

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, UInt64Builder,
};
use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema, from_ffi};
use arrow_array::ffi_stream::ArrowArrayStreamReader;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, Int8Array, Int16Array, Int32Array,
    Int64Array, ListArray, NullArray, RecordBatch, RecordBatchReader, UInt8Array, UInt16Array,
    UInt32Array, UInt64Array, make_array,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema};
use numpy::{PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyCapsule, PyCapsuleMethods, PyDict, PyFloat, PyInt, PyString};
use std::sync::Arc;

/// `rows` as one record batch.
pub(crate) fn record_batch(rows: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    if rows.hasattr("__arrow_c_stream__")? && !rows.is_instance_of::<PyDict>() {
        return from_stream(rows);
    }
    let Ok(dict) = rows.cast::<PyDict>() else {
        return Err(PyTypeError::new_err(format!(
            "rows must be a dict of columns, a pandas DataFrame or a pyarrow Table, not {}",
            rows.get_type().name()?
        )));
    };
    let mut fields = Vec::with_capacity(dict.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let name: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err("column names must be strings"))?;
        let col = column(&name, &v)?;
        if let Some(first) = columns.first()
            && first.len() != col.len()
        {
            return Err(PyValueError::new_err(format!(
                "column {name:?} has {} values, column {:?} has {}",
                col.len(),
                fields
                    .first()
                    .map(|f: &Field| f.name().clone())
                    .unwrap_or_default(),
                first.len()
            )));
        }
        fields.push(Field::new(name, col.data_type().clone(), true));
        columns.push(col);
    }
    let rows = columns.first().map_or(0, |c| c.len());
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Imports an object with `__arrow_c_stream__` and concatenates its batches.
fn from_stream(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    let capsule = obj.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: the capsule holds a valid `ArrowArrayStream` (its name is
    // checked above, as the PyCapsule interface specifies), alive while the
    // capsule is; `from_raw` moves the stream out and leaves a released one
    // behind, which the capsule's destructor then skips.
    let reader = unsafe { ArrowArrayStreamReader::from_raw(ptr.as_ptr().cast()) }
        .map_err(|e| PyValueError::new_err(format!("reading the Arrow stream: {e}")))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("reading the Arrow stream: {e}")))?;
    arrow_select::concat::concat_batches(&schema, &batches)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Imports one array through `__arrow_c_array__` (a pyarrow Array).
fn from_c_array(obj: &Bound<'_, PyAny>) -> PyResult<ArrayRef> {
    let pair = obj.call_method0("__arrow_c_array__")?;
    let (schema, array): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
    let schema = schema.cast::<PyCapsule>()?;
    let array = array.cast::<PyCapsule>()?;
    let s = schema.pointer_checked(Some(c"arrow_schema"))?;
    let a = array.pointer_checked(Some(c"arrow_array"))?;
    // SAFETY: the capsules hold a valid ArrowSchema and ArrowArray (names
    // checked above). The array is moved out (a released one is left for
    // the capsule's destructor); the schema is only read, and the capsule
    // keeps it alive for this call.
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(a.as_ptr().cast());
        let schema: &FFI_ArrowSchema = &*s.as_ptr().cast::<FFI_ArrowSchema>();
        from_ffi(array, schema)
    }
    .map_err(|e| PyValueError::new_err(format!("importing an Arrow array: {e}")))?;
    Ok(make_array(data))
}

/// One column of a mapping.
fn column(name: &str, v: &Bound<'_, PyAny>) -> PyResult<ArrayRef> {
    if v.hasattr("__arrow_c_array__")? && !v.is_instance_of::<PyUntypedArray>() {
        return from_c_array(v);
    }
    if let Ok(arr) = v.cast::<PyUntypedArray>() {
        return numpy_column(name, arr);
    }
    let items: Vec<Bound<'_, PyAny>> = v
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "column {name:?}: expected a list, a NumPy array or a pyarrow array, not {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?
        .collect::<PyResult<_>>()?;
    values(name, &items)
}

/// A one-dimensional NumPy array: numbers and booleans copied as their Arrow
/// type, anything else (strings, objects) read element by element.
fn numpy_column(name: &str, arr: &Bound<'_, PyUntypedArray>) -> PyResult<ArrayRef> {
    if arr.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "column {name:?}: a NumPy column must be one-dimensional, this one has shape {:?}",
            arr.shape()
        )));
    }
    let kind = arr.dtype().kind();
    let size = arr.dtype().itemsize();
    let as_type = |t: &str| -> PyResult<Bound<'_, PyAny>> {
        let np = arr.py().import("numpy")?;
        np.call_method1("ascontiguousarray", (arr, t))
    };
    // A contiguous copy in the element type, read as a slice.
    macro_rules! prim {
        ($arr:ty, $t:ty, $np:expr) => {{
            let copy = as_type($np)?;
            let typed = copy.cast::<numpy::PyArray1<$t>>()?.readonly();
            Arc::new(<$arr>::from(typed.as_slice()?.to_vec())) as ArrayRef
        }};
    }
    Ok(match (kind, size) {
        (b'b', _) => {
            let copy = as_type("bool")?;
            let typed = copy.cast::<numpy::PyArray1<bool>>()?.readonly();
            Arc::new(BooleanArray::from(typed.as_slice()?.to_vec())) as ArrayRef
        }
        (b'i', 1) => prim!(Int8Array, i8, "int8"),
        (b'i', 2) => prim!(Int16Array, i16, "int16"),
        (b'i', 4) => prim!(Int32Array, i32, "int32"),
        (b'i', 8) => prim!(Int64Array, i64, "int64"),
        (b'u', 1) => prim!(UInt8Array, u8, "uint8"),
        (b'u', 2) => prim!(UInt16Array, u16, "uint16"),
        (b'u', 4) => prim!(UInt32Array, u32, "uint32"),
        (b'u', 8) => prim!(UInt64Array, u64, "uint64"),
        (b'f', 4) => prim!(Float32Array, f32, "float32"),
        (b'f', 2) | (b'f', 8) => prim!(Float64Array, f64, "float64"),
        _ => {
            let items: Vec<Bound<'_, PyAny>> = arr.call_method0("tolist")?.extract()?;
            return values(name, &items);
        }
    })
}

/// What Python values a list holds, widening as values come.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Null,
    Bool,
    Int,
    BigInt,
    Float,
    Str,
    Bytes,
    List,
}

fn kind_of(v: &Bound<'_, PyAny>) -> Option<Kind> {
    if v.is_none() {
        Some(Kind::Null)
    } else if v.is_instance_of::<PyBool>() {
        Some(Kind::Bool)
    } else if v.is_instance_of::<PyInt>()
        || v.hasattr("__index__").unwrap_or(false) && !v.is_instance_of::<PyFloat>()
    {
        Some(if v.extract::<i64>().is_ok() {
            Kind::Int
        } else {
            Kind::BigInt
        })
    } else if v.is_instance_of::<PyFloat>() || v.hasattr("__float__").unwrap_or(false) {
        Some(Kind::Float)
    } else if v.is_instance_of::<PyString>() {
        Some(Kind::Str)
    } else if v.is_instance_of::<PyBytes>() || v.is_instance_of::<pyo3::types::PyByteArray>() {
        Some(Kind::Bytes)
    } else if v.hasattr("__len__").unwrap_or(false) && v.try_iter().is_ok() {
        Some(Kind::List)
    } else {
        None
    }
}

fn widen(a: Kind, b: Kind, name: &str) -> PyResult<Kind> {
    use Kind::*;
    Ok(match (a, b) {
        (x, y) if x == y => x,
        (Null, x) | (x, Null) => x,
        (Int, BigInt) | (BigInt, Int) => BigInt,
        (Int | BigInt, Float) | (Float, Int | BigInt) => Float,
        (x, y) => {
            return Err(PyTypeError::new_err(format!(
                "column {name:?} mixes {x:?} and {y:?} values; give one type per column"
            )));
        }
    })
}

/// `v`, or `None` for Python's `None`.
fn opt<'py>(v: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    (!v.is_none()).then(|| v.clone())
}

/// A column from Python values.
fn values(name: &str, items: &[Bound<'_, PyAny>]) -> PyResult<ArrayRef> {
    let mut kind = Kind::Null;
    for v in items {
        let k = kind_of(v).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "column {name:?}: cannot store a {} value",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        kind = widen(kind, k, name)?;
    }
    Ok(match kind {
        Kind::Null => Arc::new(NullArray::new(items.len())),
        Kind::Bool => {
            let mut b = BooleanBuilder::with_capacity(items.len());
            for v in items {
                b.append_option(opt(v).map(|v| v.extract::<bool>()).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Int => {
            let mut b = Int64Builder::with_capacity(items.len());
            for v in items {
                b.append_option(opt(v).map(|v| v.extract::<i64>()).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::BigInt => {
            let mut b = UInt64Builder::with_capacity(items.len());
            for v in items {
                let x = opt(v)
                    .map(|v| v.extract::<u64>())
                    .transpose()
                    .map_err(|_| {
                        PyValueError::new_err(format!(
                            "column {name:?}: an integer beyond the 64-bit range"
                        ))
                    })?;
                b.append_option(x);
            }
            Arc::new(b.finish())
        }
        Kind::Float => {
            let mut b = Float64Builder::with_capacity(items.len());
            for v in items {
                b.append_option(opt(v).map(|v| v.extract::<f64>()).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Str => {
            let mut b = StringBuilder::with_capacity(items.len(), items.len() * 8);
            for v in items {
                b.append_option(opt(v).map(|v| v.extract::<String>()).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Bytes => {
            let mut b = BinaryBuilder::with_capacity(items.len(), items.len() * 8);
            for v in items {
                b.append_option(opt(v).map(|v| v.extract::<Vec<u8>>()).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::List => {
            // The elements of every list, flattened, then one child array.
            let mut flat: Vec<Bound<'_, PyAny>> = Vec::new();
            let mut offsets = vec![0i32];
            let mut valid = Vec::with_capacity(items.len());
            for v in items {
                if !v.is_none() {
                    for e in v.try_iter()? {
                        flat.push(e?);
                    }
                }
                valid.push(!v.is_none());
                let end = i32::try_from(flat.len()).map_err(|_| {
                    PyValueError::new_err(format!("column {name:?}: too many list elements"))
                })?;
                offsets.push(end);
            }
            let child = values(name, &flat)?;
            let child = if matches!(child.data_type(), DataType::Null) {
                Arc::new(Int64Array::new_null(child.len())) as ArrayRef
            } else {
                child
            };
            Arc::new(
                ListArray::try_new(
                    Arc::new(Field::new("item", child.data_type().clone(), true)),
                    OffsetBuffer::new(offsets.into()),
                    child,
                    Some(valid.into()),
                )
                .map_err(|e| PyValueError::new_err(format!("column {name:?}: {e}")))?,
            )
        }
    })
}
