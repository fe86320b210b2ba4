//! A shuffle file read in place: mapped, its blake3 checked over the
//! mapping, and its batches decoded without copying their buffers (they
//! point into the mapping, which they keep alive). The one `unsafe` of the
//! shuffle lives here.

use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{FileDecoder, read_footer_length};
use datafusion::arrow::ipc::root_as_footer;
use datafusion::arrow::record_batch::RecordBatch;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

/// The bytes of `path` as one buffer, after checking they hash to
/// `blake3_hex`.
fn mapped(path: &Path, blake3_hex: &str) -> Result<Buffer, String> {
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(at)?;
    // SAFETY: shuffle files are never written in place: a task writes a
    // new file and renames it over the name, so the bytes under this
    // mapping do not change while it lives (a file truncated by another
    // program would fault rather than hand out wrong rows).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(at)?;
    let got = blake3::hash(&map[..]).to_hex();
    if got.as_str() != blake3_hex {
        return Err(format!(
            "{}: the bytes hash to {}, the task's index says {} (a torn or damaged shuffle \
             file; run its task again)",
            path.display(),
            &got.as_str()[..16],
            &blake3_hex[..blake3_hex.len().min(16)]
        ));
    }
    let len = map.len();
    let ptr = NonNull::new(map.as_ptr().cast_mut())
        .ok_or_else(|| format!("{}: an empty shuffle file", path.display()))?;
    // SAFETY: `ptr` and `len` describe the mapping, which the buffer owns
    // (through the `Arc`) for as long as any slice of it lives, and which
    // nobody writes (above).
    Ok(unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) })
}

/// Reads one shuffle file: checks its blake3 and decodes its batches in
/// place.
pub fn read_batches(path: &Path, blake3_hex: &str) -> Result<Vec<RecordBatch>, String> {
    let bad = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let buffer = mapped(path, blake3_hex)?;
    let len = buffer.len();
    if len < 10 {
        return Err(bad(&"too short for an Arrow file"));
    }
    let trailer: [u8; 10] = buffer[len - 10..]
        .try_into()
        .map_err(|_| bad(&"no Arrow file trailer"))?;
    let footer_len = read_footer_length(trailer).map_err(|e| bad(&e))?;
    let start = (len - 10)
        .checked_sub(footer_len)
        .ok_or_else(|| bad(&"the footer runs past the file's start"))?;
    let footer = root_as_footer(&buffer[start..len - 10]).map_err(|e| bad(&e))?;
    let schema = footer
        .schema()
        .map(fb_to_schema)
        .ok_or_else(|| bad(&"no schema in the footer"))?;
    let mut decoder = FileDecoder::new(Arc::new(schema), footer.version());
    let block_of = |offset: i64, meta: i32, body: i64| -> Result<Buffer, String> {
        let offset = usize::try_from(offset).map_err(|e| bad(&e))?;
        let size = usize::try_from(body).map_err(|e| bad(&e))?
            + usize::try_from(meta).map_err(|e| bad(&e))?;
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(bad(&"a block runs past the file's end"));
        }
        Ok(buffer.slice_with_length(offset, size))
    };
    for block in footer.dictionaries().iter().flatten() {
        let data = block_of(block.offset(), block.metaDataLength(), block.bodyLength())?;
        decoder.read_dictionary(block, &data).map_err(|e| bad(&e))?;
    }
    let mut out = Vec::new();
    for block in footer.recordBatches().iter().flatten() {
        let data = block_of(block.offset(), block.metaDataLength(), block.bodyLength())?;
        if let Some(batch) = decoder
            .read_record_batch(block, &data)
            .map_err(|e| bad(&e))?
        {
            out.push(batch);
        }
    }
    Ok(out)
}
