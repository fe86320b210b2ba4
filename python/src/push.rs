//! `tessera.push`: upload a shard set to an object store.

use crate::errors::to_py;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tessera_reader::remote::PushOptions;

/// Uploads the shard set in directory ``path`` to ``url`` (an object-store
/// prefix such as ``s3://bucket/sets/name``): the shards first, in parallel
/// (``concurrency`` at once; large ones in parts; failed uploads retried),
/// then the manifest with a create-only put, so no reader ever sees a
/// manifest whose shards are not all there. A destination that already
/// holds this set is left as it is; one that holds another set is an error.
/// Returns a dict: ``url``, ``artifact_hash``, ``already_there``,
/// ``uploaded_files``, ``uploaded_bytes``, ``skipped_files``, ``retries``,
/// ``seconds``.
#[pyfunction]
#[pyo3(signature = (path, url, *, concurrency = 4, storage_options = None))]
pub fn push<'py>(
    py: Python<'py>,
    path: PathBuf,
    url: &str,
    concurrency: usize,
    storage_options: Option<BTreeMap<String, String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = PushOptions {
        concurrency: concurrency.max(1),
        storage_options: storage_options.unwrap_or_default().into_iter().collect(),
        ..PushOptions::default()
    };
    let r = py
        .detach(|| tessera_reader::remote::push(&path, url, &opts))
        .map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("url", r.url)?;
    d.set_item("artifact_hash", r.artifact_hash)?;
    d.set_item("already_there", r.already_there)?;
    d.set_item("uploaded_files", r.uploaded_files)?;
    d.set_item("uploaded_bytes", r.uploaded_bytes)?;
    d.set_item("skipped_files", r.skipped_files)?;
    d.set_item("retries", r.retries)?;
    d.set_item("seconds", r.seconds)?;
    Ok(d)
}
