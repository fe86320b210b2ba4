//! `write_shard_set`: encode columns of NumPy arrays into a shard set. The
//! Python function `tessera.write` prepares the columns and calls this.

use crate::errors::{argument, to_py};
use numpy::{PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::path::PathBuf;
use tessera_reader::{DType, FieldSpec, RecordLayout, ShardSetWriter};

/// Records encoded per write call: bounds the staging buffer to a few MiB.
const CHUNK_BYTES: usize = 8 << 20;

/// Writes a shard set into the directory ``path`` (created if missing; it must
/// not hold shards already) and returns the manifest as JSON text.
///
/// ``fields`` lists ``(name, dtype, shape)``; ``columns[k]`` holds field
/// ``k`` as a C-contiguous ``uint8`` array of shape ``(rows, field_bytes)``,
/// little-endian. ``splits`` lists ``(name, rows)`` in row order, summing to
/// the row count. ``stats_json`` (JSON text) is stored as the manifest's
/// ``stats``. Low level: use ``tessera.write``.
#[pyfunction]
#[pyo3(signature = (path, fields, columns, splits, target_bytes, name = None, stats_json = None))]
#[allow(clippy::too_many_arguments)]
pub fn write_shard_set(
    path: PathBuf,
    fields: Vec<(String, String, Vec<u64>)>,
    columns: Vec<PyReadonlyArray2<'_, u8>>,
    splits: Vec<(String, u64)>,
    target_bytes: u64,
    name: Option<String>,
    stats_json: Option<String>,
) -> PyResult<String> {
    let specs = fields
        .iter()
        .map(|(n, d, shape)| {
            let dtype: DType = d
                .parse()
                .map_err(|e: String| argument(format!("field {n:?}: {e}")))?;
            Ok(FieldSpec::new(n.clone(), dtype, shape))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let layout = RecordLayout::packed(&specs).map_err(to_py)?;
    if columns.len() != layout.fields.len() {
        return Err(argument(format!(
            "{} fields but {} columns",
            layout.fields.len(),
            columns.len()
        )));
    }
    let rows = columns.first().map_or(0, |c| c.shape()[0]);
    let mut sources = Vec::with_capacity(columns.len());
    for (f, c) in layout.fields.iter().zip(&columns) {
        let size = f.size() as usize;
        if c.shape() != [rows, size] {
            return Err(argument(format!(
                "column {:?} has shape {:?}, expected ({rows}, {size})",
                f.name,
                c.shape()
            )));
        }
        let bytes = c
            .as_slice()
            .map_err(|_| argument(format!("column {:?} is not C-contiguous", f.name)))?;
        sources.push((f.offset as usize, size, bytes));
    }
    let total: u64 = splits.iter().map(|s| s.1).sum();
    if total != rows as u64 {
        return Err(argument(format!(
            "splits cover {total} rows but the arrays hold {rows}"
        )));
    }
    let stats = match stats_json {
        Some(s) => serde_json::from_str(&s)
            .map_err(|e| argument(format!("stats are not valid JSON: {e}")))?,
        None => serde_json::Value::Null,
    };

    let stride = layout.stride as usize;
    let mut w = ShardSetWriter::new(&path, layout, target_bytes).map_err(to_py)?;
    let chunk_rows = (CHUNK_BYTES / stride).max(1);
    let mut staging = vec![0u8; chunk_rows.min(rows.max(1)) * stride];
    let mut row = 0usize;
    for (split, n) in &splits {
        w.begin_split(split).map_err(to_py)?;
        let end = row + *n as usize;
        while row < end {
            let take = chunk_rows.min(end - row);
            let out = &mut staging[..take * stride];
            for &(offset, size, bytes) in &sources {
                let src = &bytes[row * size..(row + take) * size];
                for (rec, val) in out.chunks_exact_mut(stride).zip(src.chunks_exact(size)) {
                    rec[offset..offset + size].copy_from_slice(val);
                }
            }
            w.write_records(out).map_err(to_py)?;
            row += take;
        }
    }
    let manifest = w
        .finish_with(|m| {
            if let Some(n) = name {
                m.name = n;
            }
            m.stats = stats;
        })
        .map_err(to_py)?;
    Ok(String::from_utf8_lossy(&manifest.to_json()).into_owned())
}
