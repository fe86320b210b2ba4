//! Uploading a local shard set to an object store so that no reader ever
//! sees a manifest whose shards are not all there: the shards first (in
//! parallel, large ones in multipart uploads, each retried with backoff),
//! the manifest last, with a create-only put.

use super::store::{Created, RemoteStore};
use crate::error::{Error, Result};
use crate::manifest::{MANIFEST_FILE, MAX_MANIFEST_BYTES, Manifest};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// Shards uploaded at once (and parts in flight per multipart upload).
    pub concurrency: usize,
    /// Files at least this large go up in a multipart upload.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads.
    pub part_bytes: usize,
    /// Object-store settings on top of the environment's.
    pub storage_options: Vec<(String, String)>,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            concurrency: 4,
            multipart_threshold: 32 << 20,
            part_bytes: 16 << 20,
            storage_options: Vec::new(),
        }
    }
}

/// What a push did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PushReport {
    /// Where the set now is.
    pub url: String,
    /// The set's artifact hash (empty if it has none).
    pub artifact_hash: String,
    /// True when the destination already held this set: nothing was sent.
    pub already_there: bool,
    /// Files uploaded (shards and the set's other files).
    pub uploaded_files: usize,
    /// Their bytes.
    pub uploaded_bytes: u64,
    /// Shard files already at the destination from an earlier, interrupted
    /// push (same size and blake3), not sent again.
    pub skipped_files: usize,
    /// Uploads repeated after a failure.
    pub retries: usize,
    /// Wall time.
    pub seconds: f64,
}

/// Attempts per shard upload.
const ATTEMPTS: u32 = 4;

/// Uploads the shard set in directory `dir` to `url` (a prefix: the set's
/// objects are `url/manifest.json` and `url/<shard file>`). A destination
/// that already holds this set (same manifest) is left as it is; one that
/// holds another set is an error, since sets are immutable.
pub fn push(dir: &Path, url: &str, opts: &PushOptions) -> Result<PushReport> {
    let t0 = Instant::now();
    let mpath = dir.join(MANIFEST_FILE);
    let bytes = std::fs::read(&mpath).map_err(|e| Error::io(&mpath, e))?;
    let manifest = Manifest::parse(&bytes, &mpath)?;
    let store = RemoteStore::new(url, &opts.storage_options)?;
    let mut report = PushReport {
        url: store.url().to_owned(),
        artifact_hash: manifest.artifact_hash.clone(),
        ..PushReport::default()
    };
    if check_existing(&store, &manifest)? {
        report.already_there = true;
        report.seconds = t0.elapsed().as_secs_f64();
        return Ok(report);
    }
    // The shards and the set's other files (manifest `files`), each complete
    // before anything is sent.
    let uploads: Vec<Upload<'_>> = manifest
        .shards
        .iter()
        .map(|s| Upload {
            file: &s.file,
            bytes: s.file_bytes(),
            blake3: s.file_blake3(),
        })
        .chain(manifest.files.iter().map(|f| Upload {
            file: &f.file,
            bytes: f.bytes,
            blake3: &f.blake3,
        }))
        .collect();
    for u in &uploads {
        let p = dir.join(u.file);
        let len = std::fs::metadata(&p).map_err(|e| Error::io(&p, e))?.len();
        if len != u.bytes {
            return Err(Error::Size {
                path: p,
                expected: u.bytes,
                actual: len,
            });
        }
    }
    let next = AtomicUsize::new(0);
    let outcome: Mutex<(PushReport, Option<Error>)> = Mutex::new((report, None));
    let workers = opts.concurrency.clamp(1, 64).min(uploads.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(s) = uploads.get(i) else {
                        return;
                    };
                    if outcome.lock().map(|o| o.1.is_some()).unwrap_or(true) {
                        return;
                    }
                    let r = upload_shard(&store, dir, s, opts);
                    let Ok(mut o) = outcome.lock() else { return };
                    match r {
                        Ok(Sent::Skipped) => o.0.skipped_files += 1,
                        Ok(Sent::Uploaded { retries }) => {
                            o.0.uploaded_files += 1;
                            o.0.uploaded_bytes += s.bytes;
                            o.0.retries += retries;
                        }
                        Err(e) => {
                            o.1.get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    let (mut report, failed) = outcome
        .into_inner()
        .map_err(|_| Error::InvalidArgument("an upload thread panicked".into()))?;
    if let Some(e) = failed {
        return Err(e);
    }
    // The manifest last, and only if no one published one meanwhile.
    match store.put(MANIFEST_FILE, bytes, None, true)? {
        Created::Yes => {}
        Created::AlreadyThere => {
            if !check_existing(&store, &manifest)? {
                return Err(Error::Remote {
                    url: store.url_of(MANIFEST_FILE),
                    reason: "another shard set was published here during the push".into(),
                });
            }
            report.already_there = true;
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// True when `store` already holds `manifest`'s set; an error when it holds
/// another one.
fn check_existing(store: &RemoteStore, manifest: &Manifest) -> Result<bool> {
    let Some(bytes) = store.get_small(MANIFEST_FILE, MAX_MANIFEST_BYTES)? else {
        return Ok(false);
    };
    let url = store.url_of(MANIFEST_FILE);
    let there = Manifest::parse(&bytes, Path::new(&url))?;
    let same = if manifest.artifact_hash.is_empty() {
        there == *manifest
    } else {
        there.artifact_hash == manifest.artifact_hash && there.shards == manifest.shards
    };
    if same {
        return Ok(true);
    }
    Err(Error::Remote {
        url,
        reason: format!(
            "already holds another shard set (artifact {:?}, {} rows); a published set is \
             never replaced: push to another prefix",
            there.artifact_hash, there.rows
        ),
    })
}

/// One file to upload: its name, size and blake3 as the manifest lists them.
struct Upload<'a> {
    file: &'a str,
    bytes: u64,
    blake3: &'a str,
}

enum Sent {
    Skipped,
    Uploaded { retries: usize },
}

fn upload_shard(
    store: &RemoteStore,
    dir: &Path,
    s: &Upload<'_>,
    opts: &PushOptions,
) -> Result<Sent> {
    let hash = s.blake3;
    if let Some(h) = store.head(s.file)?
        && h.size == s.bytes
        && h.blake3.as_deref() == Some(hash)
    {
        return Ok(Sent::Skipped);
    }
    let path = dir.join(s.file);
    let mut attempt = 0;
    loop {
        let r = if s.bytes >= opts.multipart_threshold {
            store.put_multipart(
                s.file,
                &path,
                hash,
                opts.part_bytes.max(5 << 20),
                opts.concurrency,
            )
        } else {
            std::fs::read(&path)
                .map_err(|e| Error::io(&path, e))
                .and_then(|b| store.put(s.file, b, Some(hash), false).map(|_| ()))
        };
        match r {
            Ok(()) => {
                return Ok(Sent::Uploaded {
                    retries: attempt as usize,
                });
            }
            Err(e @ Error::Io { .. }) => return Err(e),
            Err(e) => {
                attempt += 1;
                if attempt >= ATTEMPTS {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(250 << (2 * attempt)));
            }
        }
    }
}
