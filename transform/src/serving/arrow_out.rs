//! Encoded records as an Arrow batch with one column per field: a scalar
//! field is a column of its dtype, a field of shape `[n]` a fixed-size list
//! of `n`, `[n, k]` a fixed-size list of fixed-size lists. `bf16` has no
//! Arrow type and is written as its raw `u16` bits.

use super::Encoded;
use arrow_array::types::*;
use arrow_array::{ArrayRef, FixedSizeListArray, PrimitiveArray, RecordBatch};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{ArrowError, Field, Schema};
use std::sync::Arc;
use tessera_reader::{DType, FieldLayout};

impl Encoded {
    /// The records as an Arrow batch, one column per field (see the module).
    pub fn to_record_batch(&self) -> Result<RecordBatch, ArrowError> {
        let layout = self.batch.layout();
        let mut fields = Vec::with_capacity(layout.fields.len());
        let mut columns = Vec::with_capacity(layout.fields.len());
        for f in &layout.fields {
            let flat = self.flat(f);
            let mut col: ArrayRef = flat;
            for &d in f.shape.iter().rev() {
                let d = i32::try_from(d)
                    .map_err(|_| ArrowError::InvalidArgumentError(format!("{}: shape", f.name)))?;
                let item = Arc::new(Field::new("item", col.data_type().clone(), false));
                col = Arc::new(FixedSizeListArray::try_new(item, d, col, None)?);
            }
            fields.push(Field::new(&f.name, col.data_type().clone(), false));
            columns.push(col);
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
    }

    /// Every element of field `f` across the records, flattened, as the
    /// primitive Arrow array of its dtype.
    fn flat(&self, f: &FieldLayout) -> ArrayRef {
        let (bytes, stride) = (self.records(), self.batch.stride());
        let (off, size) = (f.offset as usize, f.dtype.size());
        let elems = f.elements() as usize;
        // Little-endian element `e` of record `r`.
        let get = |r: usize, e: usize| {
            let at = r * stride + off + e * size;
            &bytes[at..at + size]
        };
        let rows = self.rows();
        macro_rules! prim {
            ($t:ty, $native:ty) => {{
                let v: Vec<$native> = (0..rows)
                    .flat_map(|r| (0..elems).map(move |e| (r, e)))
                    .map(|(r, e)| {
                        <$native>::from_le_bytes(get(r, e).try_into().unwrap_or_default())
                    })
                    .collect();
                Arc::new(PrimitiveArray::<$t>::new(ScalarBuffer::from(v), None)) as ArrayRef
            }};
        }
        match f.dtype {
            DType::U8 => prim!(UInt8Type, u8),
            DType::I8 => prim!(Int8Type, i8),
            DType::U16 | DType::Bf16 => prim!(UInt16Type, u16),
            DType::I16 => prim!(Int16Type, i16),
            DType::U32 => prim!(UInt32Type, u32),
            DType::I32 => prim!(Int32Type, i32),
            DType::U64 => prim!(UInt64Type, u64),
            DType::I64 => prim!(Int64Type, i64),
            DType::F16 => prim!(Float16Type, half::f16),
            DType::F32 => prim!(Float32Type, f32),
            DType::F64 => prim!(Float64Type, f64),
        }
    }
}
