//! Storing a staged artifact's shards compressed (`shards: { compression:
//! zstd }`): each shard file written by the build is replaced by its zstd
//! form (format version 2), in parallel, before the artifact is published.

use crate::error::BuildError;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use tessera_reader::{LATEST_FORMAT_VERSION, Manifest};

/// Compresses every shard of the staged artifact in `dir` at zstd `level`
/// (a no-op for `None`) and returns the manifest that describes the result.
/// Adds the time taken to `seconds` as `compress`.
pub fn compress_staged(
    dir: &Path,
    manifest: Manifest,
    level: Option<i32>,
    pool: &rayon::ThreadPool,
    seconds: &mut BTreeMap<String, f64>,
) -> Result<Manifest, BuildError> {
    let Some(level) = level else {
        return Ok(manifest);
    };
    let t = Instant::now();
    let stride = manifest.layout.stride;
    let shards = pool.install(|| {
        manifest
            .shards
            .par_iter()
            .map(|s| tessera_reader::compress_shard_file(dir, s, stride, level))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let mut m = manifest;
    m.shards = shards;
    m.format_version = u64::from(LATEST_FORMAT_VERSION);
    m.validate(&dir.join(tessera_reader::MANIFEST_FILE))?;
    seconds.insert("compress".to_string(), t.elapsed().as_secs_f64());
    Ok(m)
}
