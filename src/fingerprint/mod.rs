//! Content fingerprints of a build's inputs, and the artifact hash that names
//! its output.
//!
//! Every input file is hashed with blake3 (the plain, unkeyed hash of its
//! bytes, so `b3sum` gives the same value), in parallel over files and, for a
//! large file, in parallel within it (memory-mapped). A [`StatCache`] remembers
//! each file's hash together with its size, modification time, change time,
//! inode and device; while all of those match, the file is not read again, so
//! fingerprinting gigabytes of unchanged input costs one `stat` per file.
//!
//! [`artifact_hash`] then combines the canonical spec, the input fingerprints
//! and the two version numbers into the hex hash that names the artifact.

use rayon::prelude::*;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

mod hash;
mod stat_cache;

use hash::is_hex_hash;
pub use hash::{artifact_hash, encode_value, manifest_inputs};
pub use stat_cache::StatCache;
use stat_cache::{FileStat, system_time_ns};

/// File name of the stat cache inside the cache root.
pub const STAT_CACHE_FILE: &str = "stat-cache.json";

/// blake3 key-derivation context of [`artifact_hash`]. Changing the encoding
/// in any way means changing this string, so old and new hashes never meet.
pub const ARTIFACT_HASH_CONTEXT: &str = "tessera artifact hash v1";

/// Files whose modification or change time is this close to the moment they
/// were examined are hashed but not remembered: a write landing in the same
/// timestamp tick after the `stat` would leave size and times unchanged, and
/// the cache would then hold a stale hash (git calls these "racily clean").
pub const DEFAULT_RACY_WINDOW: Duration = Duration::from_secs(2);

pub(crate) const STAT_CACHE_FORMAT: &str = "tessera-stat-cache";
pub(crate) const STAT_CACHE_VERSION: u32 = 1;

/// What can go wrong while fingerprinting inputs.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// An input could not be examined or read.
    #[error("input {path}: {source}")]
    Io {
        /// The input file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An input is a directory, socket, device or similar.
    #[error("input {path} {what}")]
    NotAFile {
        /// The offending path.
        path: PathBuf,
        /// What it is instead, as a predicate: "is a fifo (named pipe), not a
        /// regular file".
        what: String,
    },
    /// An input's size or times changed between the start and the end of
    /// hashing, so the hash describes no consistent version of it.
    #[error(
        "input {path} changed while it was being hashed; rerun the build once nothing writes to it"
    )]
    Changed {
        /// The input file.
        path: PathBuf,
    },
    /// An input changed after it was hashed, while the build read it.
    #[error(
        "input {path} changed during the build, so the data read may not be the data hashed; \
         nothing was published; rerun the build once nothing writes to it"
    )]
    ChangedDuringBuild {
        /// The input file.
        path: PathBuf,
    },
    /// The stat cache could not be written.
    #[error("stat cache {path}: {source}")]
    StatCacheWrite {
        /// The stat cache file (or its temporary sibling).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The files of one source, in the order the build reads them.
#[derive(Clone, Debug)]
pub struct SourceFiles {
    /// The source's name in the spec.
    pub source: String,
    /// The directory the files' relative names are taken from: the literal
    /// directory prefix of the source's glob. Path components below it (hive
    /// partition directories, say) carry meaning, so they go into the hash.
    pub root: PathBuf,
    /// The files, in read order (the caller sorts them).
    pub files: Vec<PathBuf>,
    /// Hash the bytes of files in object stores too (`fingerprint: bytes`);
    /// otherwise their ETag or version id stands for their content.
    pub hash_bytes: bool,
}

/// One fingerprinted input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputFile {
    /// The source the file belongs to.
    pub source: String,
    /// The path as the caller gave it.
    pub path: PathBuf,
    /// The path relative to the source's root, with `/` separators, or the
    /// file name when the file is the root itself or lies outside it. Part of
    /// the artifact hash.
    pub rel: String,
    /// Size in bytes. Part of the artifact hash.
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch (informational).
    pub mtime_ns: i128,
    /// Lowercase hex blake3 of the file's bytes. Part of the artifact hash.
    pub blake3: String,
    /// Whether the hash came from the stat cache rather than from reading.
    pub from_stat_cache: bool,
}

/// The path of `file` relative to `root`, `/`-separated; the file name when
/// the file is the root or lies outside it.
fn relative_name(root: &Path, file: &Path) -> String {
    let parts: Vec<String> = match file.strip_prefix(root) {
        Ok(rel) if rel.components().next().is_some() => rel
            .components()
            .map(|c| match c {
                Component::Normal(s) => s.to_string_lossy().into_owned(),
                other => other.as_os_str().to_string_lossy().into_owned(),
            })
            .collect(),
        _ => vec![
            file.file_name()
                .unwrap_or(file.as_os_str())
                .to_string_lossy()
                .into_owned(),
        ],
    };
    parts.join("/")
}

struct Job<'a> {
    source: &'a str,
    path: &'a Path,
    rel: String,
    hash_bytes: bool,
}

/// A file hashed in this run, to be remembered if it is not racy.
struct Fresh {
    key: String,
    stat: FileStat,
}

/// Fingerprints every file of every source, in parallel, using and updating
/// `cache`. The result lists the files in the order given (source by source).
/// If several files fail, the error is the first one in that order.
pub fn fingerprint_inputs(
    sources: &[SourceFiles],
    cache: &mut StatCache,
) -> Result<Vec<InputFile>, FingerprintError> {
    let jobs: Vec<Job> = sources
        .iter()
        .flat_map(|s| {
            s.files.iter().map(move |f| Job {
                source: &s.source,
                path: f,
                rel: relative_name(&s.root, f),
                hash_bytes: s.hash_bytes,
            })
        })
        .collect();
    let now = SystemTime::now();
    let racy_after = system_time_ns(now) - cache.racy_window.as_nanos() as i128;
    let shared: &StatCache = cache;
    let results: Vec<Result<(InputFile, Option<Fresh>), FingerprintError>> = jobs
        .par_iter()
        .map(|job| fingerprint_one(job, shared, racy_after))
        .collect();
    let mut files = Vec::with_capacity(results.len());
    let mut fresh = Vec::new();
    for r in results {
        let (file, new) = r?;
        if let Some(new) = new {
            fresh.push((new, file.blake3.clone()));
        }
        files.push(file);
    }
    for (new, blake3) in fresh {
        cache.insert(new.key, new.stat, blake3);
    }
    Ok(files)
}

fn fingerprint_one(
    job: &Job,
    cache: &StatCache,
    racy_after: i128,
) -> Result<(InputFile, Option<Fresh>), FingerprintError> {
    let path = job.path;
    let io_err = |source| FingerprintError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(url) = path.to_str().filter(|u| crate::remote_input::is_url(u)) {
        return Ok((fingerprint_remote(job, url).map_err(io_err)?, None));
    }
    let stat_now = || -> Result<FileStat, FingerprintError> {
        let not_a_file = || {
            let kind = crate::pathkind::PathKind::of(path);
            FingerprintError::NotAFile {
                path: path.to_path_buf(),
                what: kind.describe(),
            }
        };
        let m = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(io_err(e)),
            Err(_) => return Err(not_a_file()),
        };
        if !m.is_file() {
            return Err(not_a_file());
        }
        Ok(FileStat::of(&m))
    };
    let before = stat_now()?;
    // The key needs no symlink resolution: a cached entry is valid only for
    // the same inode on the same device, whatever path led to it.
    let key = std::path::absolute(path)
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned));
    let make = |blake3: String, from_stat_cache| InputFile {
        source: job.source.to_owned(),
        path: path.to_path_buf(),
        rel: job.rel.clone(),
        size: before.size,
        mtime_ns: before.mtime_ns,
        blake3,
        from_stat_cache,
    };
    if let Some(hit) = key.as_deref().and_then(|k| cache.get(k, &before)) {
        return Ok((make(hit.to_owned(), true), None));
    }
    let blake3 = hash_file(path, before.size).map_err(io_err)?;
    crate::fault::point("fingerprint.hashed");
    if stat_now()? != before {
        return Err(FingerprintError::Changed {
            path: path.to_path_buf(),
        });
    }
    let racy = before.mtime_ns >= racy_after || before.ctime_ns >= racy_after;
    let fresh = match key {
        Some(key) if !racy => Some(Fresh { key, stat: before }),
        _ => None,
    };
    Ok((make(blake3, false), fresh))
}

/// A file in an object store: its listed size, and its version id or ETag
/// (or the blake3 of its bytes with `fingerprint: bytes`, or when the store
/// gives neither).
fn fingerprint_remote(job: &Job, url: &str) -> io::Result<InputFile> {
    let object = match crate::remote_input::object(url) {
        Some(o) => o,
        None => crate::remote_input::head(url)?,
    };
    let identity = match object.identity() {
        Some(id) if !job.hash_bytes => id,
        _ => crate::remote_input::hash_object(url)?,
    };
    Ok(InputFile {
        source: job.source.to_owned(),
        path: job.path.to_path_buf(),
        rel: job.rel.clone(),
        size: object.size,
        mtime_ns: 0,
        blake3: identity,
        from_stat_cache: false,
    })
}

/// Files below this size are read and hashed in one go; larger ones are
/// memory-mapped and hashed on several threads.
const SMALL_FILE: u64 = 4 << 20;

/// The lowercase hex blake3 of a file's bytes. Small files (most of a glob
/// of many parts) skip the cost of a memory map and of splitting the work.
fn hash_file(path: &Path, size: u64) -> io::Result<String> {
    let mut hasher = blake3::Hasher::new();
    if size < SMALL_FILE {
        let bytes = fs::read(path)?;
        hasher.update(&bytes);
    } else {
        hasher.update_mmap_rayon(path)?;
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// Checks that every input is still the version that was fingerprinted: the
/// same size and modification time, and for a file modified so recently that
/// its timestamp cannot tell two writes apart, the same content. A file that
/// changed during the build is an error naming it.
pub fn recheck(files: &[InputFile]) -> Result<(), FingerprintError> {
    let racy_after = system_time_ns(SystemTime::now()) - DEFAULT_RACY_WINDOW.as_nanos() as i128;
    files.par_iter().try_for_each(|f| {
        let io_err = |source| FingerprintError::Io {
            path: f.path.clone(),
            source,
        };
        if let Some(url) = f.path.to_str().filter(|u| crate::remote_input::is_url(u)) {
            let now = crate::remote_input::head(url).map_err(io_err)?;
            let same = now.size == f.size
                && if is_hex_hash(&f.blake3) {
                    // Hashed by content: the bytes say whether it changed.
                    crate::remote_input::hash_object(url).map_err(io_err)? == f.blake3
                } else {
                    // The store no longer reporting the kind of identity it
                    // gave counts as a change: it cannot be told apart.
                    now.still(&f.blake3).unwrap_or(false)
                };
            if !same {
                return Err(FingerprintError::ChangedDuringBuild {
                    path: f.path.clone(),
                });
            }
            return Ok(());
        }
        let m = fs::metadata(&f.path).map_err(io_err)?;
        let now = FileStat::of(&m);
        let changed = if now.size != f.size || now.mtime_ns != f.mtime_ns {
            true
        } else if now.mtime_ns > racy_after {
            hash_file(&f.path, f.size).map_err(io_err)? != f.blake3
        } else {
            false
        };
        if changed {
            return Err(FingerprintError::ChangedDuringBuild {
                path: f.path.clone(),
            });
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests;
