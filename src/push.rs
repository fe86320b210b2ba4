//! `tessera push` and `tessera build -o URL`: a shard set into an object
//! store, through the reader crate's uploader (shards first, the manifest
//! last with a create-only put).

use crate::error::BuildError;
use std::path::Path;
use tessera_reader::remote::{PushOptions, PushReport};

/// Pushes the shard set in `dir` to `url` with `concurrency` uploads at once.
pub fn push(dir: &Path, url: &str, concurrency: usize) -> Result<PushReport, BuildError> {
    let opts = PushOptions {
        concurrency: concurrency.max(1),
        storage_options: crate::remote_input::cli_options(),
        ..PushOptions::default()
    };
    Ok(tessera_reader::remote::push(dir, url, &opts)?)
}

/// One line saying what a push did.
pub fn describe(r: &PushReport) -> String {
    if r.already_there && r.uploaded_files == 0 {
        return format!("pushed: {} already holds this set; nothing sent", r.url);
    }
    let mut s = format!(
        "pushed to {} in {:.2}s: {} file(s), {:.1} MB",
        r.url,
        r.seconds,
        r.uploaded_files,
        r.uploaded_bytes as f64 / 1e6
    );
    if r.skipped_files > 0 {
        s.push_str(&format!(
            ", {} already there from an earlier push",
            r.skipped_files
        ));
    }
    if r.retries > 0 {
        s.push_str(&format!(", {} upload(s) retried", r.retries));
    }
    s
}

/// The report as JSON.
pub fn to_json(r: &PushReport) -> serde_json::Value {
    serde_json::json!({
        "url": r.url,
        "artifact_hash": r.artifact_hash,
        "already_there": r.already_there,
        "uploaded_files": r.uploaded_files,
        "uploaded_bytes": r.uploaded_bytes,
        "skipped_files": r.skipped_files,
        "retries": r.retries,
        "seconds": r.seconds,
    })
}
