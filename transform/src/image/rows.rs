//! A column of images -> the pixels of each row, written into the records:
//! binary values are encoded images, text values are paths (relative to the
//! step's folder). Rows are decoded in parallel on the current rayon pool
//! (the build's); each row writes only its own record, so the bytes do not
//! depend on the number of threads.

use super::ImageStep;
use super::decode::decode_into;
use crate::values::{Binaries, Strings, ValueError};
use arrow_array::ArrayRef;
use arrow_schema::DataType;
use rayon::prelude::*;
use std::path::PathBuf;

enum Source<'a> {
    Bytes(Binaries<'a>),
    Paths(Strings<'a>),
}

/// Writes the pixels of every row of `col` at byte `off` of its record in
/// `recs` (records of `stride` bytes). Returns the rows whose image could
/// not be made, in row order, with what is wrong (naming the file for a
/// path); `Err` when the column is neither binary nor text.
pub fn encode(
    step: &ImageStep,
    col: &ArrayRef,
    recs: &mut [u8],
    stride: usize,
    off: usize,
) -> Result<Vec<(usize, String)>, ValueError> {
    let src = match col.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            Source::Paths(Strings::read(col)?)
        }
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Source::Bytes(Binaries::read(col)?),
        other => {
            return Err(ValueError {
                row: 0,
                message: format!(
                    "an image field reads encoded images (a binary column) or paths to them \
                     (a text column), got {other}"
                ),
            });
        }
    };
    let len = step.value_bytes();
    if stride == 0 {
        return Ok(Vec::new());
    }
    let results: Vec<Result<(), String>> = recs
        .par_chunks_mut(stride)
        .enumerate()
        .map(|(r, rec)| {
            let out = &mut rec[off..off + len];
            match &src {
                Source::Bytes(b) => match b.get(r) {
                    Some(v) => guarded(step, v, out),
                    None => Err(null()),
                },
                Source::Paths(s) => match s.get(r) {
                    Some(p) => {
                        let (path, bytes) = read_file(step, p)?;
                        guarded(step, &bytes, out).map_err(|e| format!("{}: {e}", path.display()))
                    }
                    None => Err(null()),
                },
            }
        })
        .collect();
    Ok(results
        .into_iter()
        .enumerate()
        .filter_map(|(r, res)| res.err().map(|e| (r, e)))
        .collect())
}

/// [`decode_into`], with a panic inside a decoder or the resizer (a bug
/// that a hostile file could reach) turned into a bad image: the row is an
/// error, or skipped, instead of the build aborting.
fn guarded(step: &ImageStep, bytes: &[u8], out: &mut [u8]) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decode_into(step, bytes, out)
    }))
    .unwrap_or_else(|_| Err("the image decoder failed on this image (it panicked)".into()))
}

fn null() -> String {
    "the value is null, not an image (filter such rows out, or use on_error: skip)".into()
}

/// The file a path value names, read. URLs are refused: only files are read.
pub fn read_file(step: &ImageStep, value: &str) -> Result<(PathBuf, Vec<u8>), String> {
    if let Some((scheme, _)) = value.split_once("://") {
        return Err(format!(
            "{value:?} is a {scheme}:// URL; an image field reads local files (paths relative \
             to base) or encoded bytes, not URLs: download the images first"
        ));
    }
    let path = match (&step.base_dir, &step.base) {
        (Some(dir), _) => dir.join(value),
        (None, Some(base)) => PathBuf::from(base).join(value),
        (None, None) => PathBuf::from(value),
    };
    let bytes =
        std::fs::read(&path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Ok((path, bytes))
}
