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
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, Metadata};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};
use tessera_reader::durable::AtomicFile;

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

const STAT_CACHE_FORMAT: &str = "tessera-stat-cache";
const STAT_CACHE_VERSION: u32 = 1;

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

/// What identifies one version of a file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct FileStat {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    dev: u64,
}

impl FileStat {
    #[cfg(unix)]
    fn of(m: &Metadata) -> FileStat {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        FileStat {
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
        }
    }

    #[cfg(not(unix))]
    fn of(m: &Metadata) -> FileStat {
        let mtime_ns = m.modified().map(system_time_ns).unwrap_or(0);
        FileStat {
            size: m.len(),
            mtime_ns,
            ctime_ns: 0,
            ino: 0,
            dev: 0,
        }
    }
}

fn system_time_ns(t: SystemTime) -> i128 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct StatEntry {
    stat: FileStat,
    blake3: String,
}

#[derive(Serialize, Deserialize)]
struct StatCacheFile {
    format: String,
    version: u32,
    entries: BTreeMap<String, StatEntry>,
}

/// Remembered file hashes, keyed by absolute path. An entry is used only while
/// the file's size, modification time, change time, inode and device all
/// match what they were when it was hashed. The change time cannot be set by
/// users, so even a same-size rewrite that restores the modification time is
/// noticed.
#[derive(Debug)]
pub struct StatCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, StatEntry>,
    /// Keys added or replaced since loading, re-applied over the file on save.
    changed: BTreeSet<String>,
    /// Keys removed since loading.
    removed: BTreeSet<String>,
    racy_window: Duration,
    discarded: Option<String>,
}

impl Default for StatCache {
    fn default() -> Self {
        StatCache::in_memory()
    }
}

impl StatCache {
    /// An empty cache that is never written to disk.
    pub fn in_memory() -> StatCache {
        StatCache {
            path: None,
            entries: BTreeMap::new(),
            changed: BTreeSet::new(),
            removed: BTreeSet::new(),
            racy_window: DEFAULT_RACY_WINDOW,
            discarded: None,
        }
    }

    /// Loads the cache persisted at `path`. A missing file gives an empty
    /// cache; an unreadable or corrupt one is ignored (see
    /// [`StatCache::discarded`]) and replaced on the next save.
    pub fn load(path: &Path) -> StatCache {
        let mut cache = StatCache::in_memory();
        cache.path = Some(path.to_path_buf());
        match read_stat_file(path) {
            Ok(entries) => cache.entries = entries,
            Err(reason) => cache.discarded = reason,
        }
        cache
    }

    /// Why the file given to [`StatCache::load`] was ignored, if it was.
    pub fn discarded(&self) -> Option<&str> {
        self.discarded.as_deref()
    }

    /// Number of remembered files.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no file is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets how recent a file's times may be for its hash to be remembered
    /// (default [`DEFAULT_RACY_WINDOW`]). Tests use zero.
    pub fn set_racy_window(&mut self, window: Duration) {
        self.racy_window = window;
    }

    /// Forgets files that no longer exist; returns how many.
    pub fn prune_missing(&mut self) -> usize {
        let gone: Vec<String> = self
            .entries
            .keys()
            .filter(|k| matches!(fs::metadata(k), Err(e) if e.kind() == io::ErrorKind::NotFound))
            .cloned()
            .collect();
        for k in &gone {
            self.entries.remove(k);
            self.changed.remove(k);
            self.removed.insert(k.clone());
        }
        gone.len()
    }

    /// Writes the cache back to the file it was loaded from, if anything
    /// changed. Entries written meanwhile by another process are kept (ours
    /// win on conflict). The file is replaced atomically (temporary file,
    /// then rename).
    pub fn save(&mut self) -> Result<(), FingerprintError> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        if self.changed.is_empty() && self.removed.is_empty() && self.discarded.is_none() {
            return Ok(());
        }
        let mut merged = read_stat_file(&path).unwrap_or_default();
        for k in &self.removed {
            merged.remove(k);
        }
        for k in &self.changed {
            if let Some(e) = self.entries.get(k) {
                merged.insert(k.clone(), e.clone());
            }
        }
        let file = StatCacheFile {
            format: STAT_CACHE_FORMAT.into(),
            version: STAT_CACHE_VERSION,
            entries: merged,
        };
        let bytes = serde_json::to_vec(&file).map_err(|e| FingerprintError::StatCacheWrite {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        write_atomically(&path, &bytes)?;
        self.entries = file.entries;
        self.changed.clear();
        self.removed.clear();
        self.discarded = None;
        Ok(())
    }

    fn get(&self, key: &str, stat: &FileStat) -> Option<&str> {
        self.entries
            .get(key)
            .filter(|e| e.stat == *stat)
            .map(|e| e.blake3.as_str())
    }

    fn insert(&mut self, key: String, stat: FileStat, blake3: String) {
        self.removed.remove(&key);
        self.changed.insert(key.clone());
        self.entries.insert(key, StatEntry { stat, blake3 });
    }

    #[cfg(test)]
    fn poison(&mut self, key: &Path, blake3: &str) {
        let key = key.to_str().map(str::to_owned).unwrap_or_default();
        if let Some(e) = self.entries.get_mut(&key) {
            e.blake3 = blake3.to_owned();
        }
    }
}

/// `Ok(None)`-like outcomes are folded into `Err(None)`: a missing file is not
/// worth a warning, a corrupt one is.
fn read_stat_file(path: &Path) -> Result<BTreeMap<String, StatEntry>, Option<String>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(None),
        Err(e) => return Err(Some(format!("{}: {e}", path.display()))),
    };
    let file: StatCacheFile = serde_json::from_slice(&bytes)
        .map_err(|e| Some(format!("{}: not a stat cache ({e})", path.display())))?;
    if file.format != STAT_CACHE_FORMAT || file.version != STAT_CACHE_VERSION {
        return Err(Some(format!(
            "{}: stat cache format {:?} version {} is not {STAT_CACHE_FORMAT:?} version {STAT_CACHE_VERSION}",
            path.display(),
            file.format,
            file.version
        )));
    }
    Ok(file.entries)
}

/// Replaces the stat cache file `path` with `bytes` atomically (its
/// directory created if needed), through
/// [`tessera_reader::durable::AtomicFile`]. The temporary name starts with
/// `.<file name>.`, which `gc` sweeps when a process died mid-write.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), FingerprintError> {
    let failed = |e: tessera_reader::Error| match e {
        tessera_reader::Error::Io { path, source } => {
            FingerprintError::StatCacheWrite { path, source }
        }
        other => FingerprintError::StatCacheWrite {
            path: path.to_path_buf(),
            source: io::Error::other(other),
        },
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|source| FingerprintError::StatCacheWrite {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut f = AtomicFile::create(path).map_err(failed)?;
    f.write_all(bytes).map_err(failed)?;
    crate::fault::point("stat-cache.written");
    f.commit().map_err(failed)
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

fn is_hex_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The hex blake3 that names an artifact.
///
/// It is computed in blake3's key-derivation mode with the context
/// [`ARTIFACT_HASH_CONTEXT`] over this byte string (integers little-endian,
/// `str(s)` = u64 byte length then the UTF-8 bytes):
///
/// 1. `format_version` as u32, then `semantics_version` as u32;
/// 2. the canonical spec, encoded by [`encode_value`];
/// 3. the number of inputs as u64, then for each input in order:
///    `str(source)`, `str(rel)`, `size` as u64, `str(identity)`, where the
///    identity is the blake3 hex of the bytes, or for a file in an object
///    store `version:<id>` or `etag:<etag>` (unless its bytes were hashed).
///
/// Input order is part of the hash (it fixes the row order). Absolute paths
/// and times are not: moving the data elsewhere keeps the hash unless the
/// spec itself names the new place.
pub fn artifact_hash(
    canonical_spec: &serde_json::Value,
    inputs: &[InputFile],
    format_version: u32,
    semantics_version: u32,
) -> String {
    let mut buf = Vec::with_capacity(4096);
    buf.extend_from_slice(&format_version.to_le_bytes());
    buf.extend_from_slice(&semantics_version.to_le_bytes());
    encode_value(canonical_spec, &mut buf);
    buf.extend_from_slice(&(inputs.len() as u64).to_le_bytes());
    for f in inputs {
        encode_str(&f.source, &mut buf);
        encode_str(&f.rel, &mut buf);
        buf.extend_from_slice(&f.size.to_le_bytes());
        encode_str(&f.blake3, &mut buf);
    }
    let mut hasher = blake3::Hasher::new_derive_key(ARTIFACT_HASH_CONTEXT);
    hasher.update(&buf);
    hasher.finalize().to_hex().to_string()
}

fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends an unambiguous, order-independent encoding of a JSON value: a tag
/// byte, then the payload. Object keys are sorted by their bytes here, so the
/// result does not depend on how `serde_json::Map` orders them (its
/// `preserve_order` feature), and numbers are encoded by value, not by how
/// serde_json formats them.
///
/// | value | encoding |
/// |---|---|
/// | null | `0x00` |
/// | false / true | `0x01` / `0x02` |
/// | integer >= 0 | `0x03`, u64 |
/// | integer < 0 | `0x04`, i64 |
/// | other number | `0x05`, the f64's IEEE bits as u64 |
/// | string | `0x06`, `str(s)` |
/// | array | `0x07`, u64 count, the elements |
/// | object | `0x08`, u64 count, then per key in byte order: `str(key)`, the value |
///
/// `1` and `1.0` are different values here, as they are in serde_json; the
/// spec's canonicalizer decides which one a key holds.
pub fn encode_value(v: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match v {
        Value::Null => out.push(0x00),
        Value::Bool(false) => out.push(0x01),
        Value::Bool(true) => out.push(0x02),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push(0x03);
                out.extend_from_slice(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                out.push(0x04);
                out.extend_from_slice(&i.to_le_bytes());
            } else {
                out.push(0x05);
                let f = n.as_f64().unwrap_or(f64::NAN);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
        Value::String(s) => {
            out.push(0x06);
            encode_str(s, out);
        }
        Value::Array(items) => {
            out.push(0x07);
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                encode_value(item, out);
            }
        }
        Value::Object(map) => {
            out.push(0x08);
            out.extend_from_slice(&(map.len() as u64).to_le_bytes());
            let mut keys: Vec<(&String, &Value)> = map.iter().collect();
            keys.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            for (k, item) in keys {
                encode_str(k, out);
                encode_value(item, out);
            }
        }
    }
}

/// The inputs as the manifest records them: what went into the hash, without
/// machine-specific paths or times.
pub fn manifest_inputs(inputs: &[InputFile]) -> serde_json::Value {
    serde_json::Value::Array(
        inputs
            .iter()
            .map(|f| {
                let mut entry = serde_json::json!({
                    "source": f.source,
                    "path": f.rel,
                    "bytes": f.size,
                });
                let (key, value) = match f.blake3.split_once(':') {
                    Some((kind @ ("etag" | "version"), v)) => (kind, v),
                    _ => ("blake3", f.blake3.as_str()),
                };
                entry[key] = serde_json::Value::from(value);
                entry
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs::{File, FileTimes};
    use std::io::Write;

    fn write(path: &Path, bytes: &[u8]) {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).unwrap();
        }
        fs::write(path, bytes).unwrap();
    }

    fn source(name: &str, root: &Path, files: &[&Path]) -> SourceFiles {
        SourceFiles {
            source: name.into(),
            root: root.to_path_buf(),
            files: files.iter().map(|p| p.to_path_buf()).collect(),
            hash_bytes: false,
        }
    }

    fn quick_cache() -> StatCache {
        let mut c = StatCache::in_memory();
        c.set_racy_window(Duration::ZERO);
        c
    }

    fn set_mtime(path: &Path, t: SystemTime) {
        let f = File::options().write(true).open(path).unwrap();
        f.set_times(FileTimes::new().set_modified(t)).unwrap();
    }

    fn mtime(path: &Path) -> SystemTime {
        fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn file_hash_is_plain_blake3_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let cases: [(&str, &[u8]); 3] = [("empty", b""), ("small", b"hello"), ("big", &big)];
        for (name, bytes) in cases {
            let p = dir.path().join(name);
            write(&p, bytes);
            let got =
                fingerprint_inputs(&[source("s", dir.path(), &[&p])], &mut quick_cache()).unwrap();
            assert_eq!(
                got[0].blake3,
                blake3::hash(bytes).to_hex().to_string(),
                "{name}"
            );
            assert_eq!(got[0].size, bytes.len() as u64);
            assert_eq!(got[0].rel, name);
            assert!(!got[0].from_stat_cache);
        }
    }

    #[test]
    fn artifact_hash_is_stable_and_sees_every_change() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("data/a.csv");
        let b = dir.path().join("data/b.csv");
        write(&a, b"x,y\n1,2\n");
        write(&b, b"x,y\n3,4\n");
        let root = dir.path().join("data");
        let spec = json!({"version": 1, "name": "t", "fields": {"x": {"dtype": "f32"}}});
        let hash_of = |files: &[&Path], spec: &serde_json::Value, fv: u32, sv: u32| {
            let inputs =
                fingerprint_inputs(&[source("s", &root, files)], &mut quick_cache()).unwrap();
            artifact_hash(spec, &inputs, fv, sv)
        };
        let base = hash_of(&[&a, &b], &spec, 1, 1);
        assert_eq!(base.len(), 64);
        assert_eq!(
            base,
            hash_of(&[&a, &b], &spec, 1, 1),
            "same inputs, same hash"
        );

        // The same spec built with another key order hashes the same.
        let reordered: serde_json::Value = serde_json::from_str(
            r#"{"fields": {"x": {"dtype": "f32"}}, "name": "t", "version": 1}"#,
        )
        .unwrap();
        assert_eq!(base, hash_of(&[&a, &b], &reordered, 1, 1));

        let mut changed = HashSeen::new(&base);
        changed.add("file order", hash_of(&[&b, &a], &spec, 1, 1));
        changed.add("format version", hash_of(&[&a, &b], &spec, 2, 1));
        changed.add("semantics version", hash_of(&[&a, &b], &spec, 1, 2));
        changed.add(
            "spec",
            hash_of(&[&a, &b], &json!({"version": 1, "name": "u"}), 1, 1),
        );
        changed.add("one file fewer", hash_of(&[&a], &spec, 1, 1));
        let inputs =
            fingerprint_inputs(&[source("s", &root, &[&a, &b])], &mut quick_cache()).unwrap();
        let mut renamed = inputs.clone();
        renamed[1].rel = "c.csv".into();
        changed.add("renamed file", artifact_hash(&spec, &renamed, 1, 1));
        let mut other_source = inputs.clone();
        other_source[0].source = "t".into();
        changed.add("source name", artifact_hash(&spec, &other_source, 1, 1));
        write(&b, b"x,y\n3,5\n"); // one byte, same size
        changed.add("one byte of an input", hash_of(&[&a, &b], &spec, 1, 1));
    }

    /// Collects hashes and checks that each differs from the base and from
    /// every other.
    struct HashSeen(Vec<(String, String)>);

    impl HashSeen {
        fn new(base: &str) -> Self {
            HashSeen(vec![("base".into(), base.into())])
        }
        fn add(&mut self, what: &str, hash: String) {
            for (other, h) in &self.0 {
                assert_ne!(*h, hash, "{what} hashes like {other}");
            }
            self.0.push((what.into(), hash));
        }
    }

    #[test]
    fn value_encoding_is_unambiguous() {
        let enc = |v: serde_json::Value| {
            let mut out = Vec::new();
            encode_value(&v, &mut out);
            out
        };
        let pairs = [
            (json!(["ab", "c"]), json!(["a", "bc"])),
            (json!({"a": 1}), json!({"a": "1"})),
            (json!(1), json!(1.0)),
            (json!(-1), json!(-1.0)),
            (json!({"a": null}), json!({})),
            (json!([[]]), json!([])),
            (json!({"a": {"b": 1}}), json!({"a": 1, "b": 1})),
            (json!(0.1), json!(0.1 + 1e-17 + 1e-16)),
        ];
        for (x, y) in pairs {
            assert_ne!(enc(x.clone()), enc(y.clone()), "{x} vs {y}");
        }
        assert_eq!(enc(json!({"b": 1, "a": 2})), enc(json!({"a": 2, "b": 1})));
    }

    #[test]
    fn relative_names_keep_partition_directories() {
        let root = Path::new("/data/flights");
        assert_eq!(
            relative_name(root, Path::new("/data/flights/year=2024/m=1/p.parquet")),
            "year=2024/m=1/p.parquet"
        );
        assert_eq!(
            relative_name(Path::new("/d/w.csv"), Path::new("/d/w.csv")),
            "w.csv"
        );
        assert_eq!(relative_name(root, Path::new("/elsewhere/x.csv")), "x.csv");
    }

    #[test]
    fn output_follows_input_order() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..64)
            .map(|i| dir.path().join(format!("f{i:02}")))
            .collect();
        for (i, p) in paths.iter().enumerate() {
            write(p, &vec![i as u8; 1000 + i * 5000]);
        }
        let mut reversed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        reversed.reverse();
        let sources = [
            source("one", dir.path(), &reversed[..10]),
            source("two", dir.path(), &reversed[10..]),
        ];
        let got = fingerprint_inputs(&sources, &mut quick_cache()).unwrap();
        let names: Vec<&Path> = got.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(names, reversed);
        assert!(got[..10].iter().all(|f| f.source == "one"));
        assert!(got[10..].iter().all(|f| f.source == "two"));
    }

    #[test]
    fn stat_cache_answers_for_unchanged_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.bin");
        write(&p, &[7u8; 100_000]);
        let store = dir.path().join("cache").join(STAT_CACHE_FILE);
        let src = [source("s", dir.path(), &[&p])];

        let mut cache = StatCache::load(&store);
        cache.set_racy_window(Duration::ZERO);
        let first = fingerprint_inputs(&src, &mut cache).unwrap();
        assert!(!first[0].from_stat_cache);
        cache.save().unwrap();

        // A fresh process: loads the saved file and does not read the input.
        let mut cache = StatCache::load(&store);
        assert_eq!(cache.discarded(), None);
        assert_eq!(cache.len(), 1);
        let second = fingerprint_inputs(&src, &mut cache).unwrap();
        assert!(second[0].from_stat_cache);
        assert_eq!(second[0].blake3, first[0].blake3);

        // Proof that the remembered value is what is returned: a poisoned
        // entry comes back as is while the file is untouched.
        cache.poison(&std::path::absolute(&p).unwrap(), "poisoned");
        let third = fingerprint_inputs(&src, &mut cache).unwrap();
        assert_eq!(third[0].blake3, "poisoned");
    }

    #[test]
    fn touched_mtime_means_rehash() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.bin");
        write(&p, b"0123456789");
        let src = [source("s", dir.path(), &[&p])];
        let mut cache = quick_cache();
        fingerprint_inputs(&src, &mut cache).unwrap();
        cache.poison(&std::path::absolute(&p).unwrap(), "poisoned");
        set_mtime(&p, mtime(&p) + Duration::from_secs(1));
        let got = fingerprint_inputs(&src, &mut cache).unwrap();
        assert!(!got[0].from_stat_cache);
        assert_eq!(got[0].blake3, blake3::hash(b"0123456789").to_hex().as_str());
    }

    /// The classic way to fool an mtime cache: same size, new bytes, old
    /// mtime put back. The change time still moves, and the file is rehashed.
    #[test]
    fn same_size_rewrite_with_restored_mtime_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.bin");
        write(&p, b"aaaaaaaaaa");
        set_mtime(
            &p,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000),
        );
        let old = mtime(&p);
        let src = [source("s", dir.path(), &[&p])];
        let mut cache = quick_cache();
        let before = fingerprint_inputs(&src, &mut cache).unwrap();
        // Let the change time move on by more than the timestamp granularity.
        std::thread::sleep(Duration::from_millis(20));
        write(&p, b"aaaaabaaaa");
        set_mtime(&p, old);
        assert_eq!(mtime(&p), old);
        let after = fingerprint_inputs(&src, &mut cache).unwrap();
        assert!(!after[0].from_stat_cache);
        assert_ne!(after[0].blake3, before[0].blake3);
        assert_eq!(
            after[0].blake3,
            blake3::hash(b"aaaaabaaaa").to_hex().as_str()
        );
    }

    #[test]
    fn recently_changed_files_are_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.bin");
        write(&p, b"fresh");
        let src = [source("s", dir.path(), &[&p])];
        let mut cache = StatCache::in_memory(); // default racy window
        fingerprint_inputs(&src, &mut cache).unwrap();
        assert!(cache.is_empty());
        assert!(!fingerprint_inputs(&src, &mut cache).unwrap()[0].from_stat_cache);
    }

    #[test]
    fn corrupt_stat_cache_is_ignored_and_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join(STAT_CACHE_FILE);
        let p = dir.path().join("in.bin");
        write(&p, b"data");
        let garbage: [&[u8]; 3] = [
            b"{\"format\": \"tessera-stat-cache\", \"vers",
            b"[1,2]",
            b"\xff\x00",
        ];
        for garbage in garbage {
            write(&store, garbage);
            let mut cache = StatCache::load(&store);
            assert!(cache.discarded().is_some());
            assert!(cache.is_empty());
            cache.set_racy_window(Duration::ZERO);
            fingerprint_inputs(&[source("s", dir.path(), &[&p])], &mut cache).unwrap();
            cache.save().unwrap();
            let reloaded = StatCache::load(&store);
            assert_eq!(reloaded.discarded(), None);
            assert_eq!(reloaded.len(), 1);
        }
    }

    #[test]
    fn save_merges_with_entries_from_other_processes() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join(STAT_CACHE_FILE);
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        write(&a, b"a");
        write(&b, b"b");
        let mut one = StatCache::load(&store);
        let mut two = StatCache::load(&store);
        one.set_racy_window(Duration::ZERO);
        two.set_racy_window(Duration::ZERO);
        fingerprint_inputs(&[source("s", dir.path(), &[&a])], &mut one).unwrap();
        fingerprint_inputs(&[source("s", dir.path(), &[&b])], &mut two).unwrap();
        one.save().unwrap();
        two.save().unwrap();
        let mut merged = StatCache::load(&store);
        assert_eq!(merged.len(), 2);
        fs::remove_file(&a).unwrap();
        assert_eq!(merged.prune_missing(), 1);
        merged.save().unwrap();
        assert_eq!(StatCache::load(&store).len(), 1);
    }

    #[test]
    fn errors_name_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.parquet");
        let err = fingerprint_inputs(&[source("s", dir.path(), &[&missing])], &mut quick_cache())
            .unwrap_err();
        assert!(matches!(err, FingerprintError::Io { .. }));
        assert!(err.to_string().contains("missing.parquet"), "{err}");
        let err = fingerprint_inputs(
            &[source("s", dir.path(), &[dir.path()])],
            &mut quick_cache(),
        )
        .unwrap_err();
        assert!(matches!(err, FingerprintError::NotAFile { .. }), "{err}");
    }

    #[test]
    fn manifest_inputs_hold_what_was_hashed() {
        let f = InputFile {
            source: "s".into(),
            path: "/abs/x".into(),
            rel: "x".into(),
            size: 3,
            mtime_ns: 5,
            blake3: "ab".into(),
            from_stat_cache: true,
        };
        assert_eq!(
            manifest_inputs(&[f]),
            json!([{"source": "s", "path": "x", "bytes": 3, "blake3": "ab"}])
        );
    }

    /// Prints the cost of fingerprinting 2 GiB cold (hashing) and warm (stat
    /// cache, plus the rest of a cache hit: artifact hash and lookup), as 16
    /// files of 128 MiB and as 4096 files of 512 KiB.
    /// `cargo test --release -- --ignored --nocapture measure_`; set
    /// `TESSERA_BENCH_DIR` to choose the disk (default: the current directory).
    #[test]
    #[ignore]
    fn measure_fingerprint_2gib() {
        for (files, size) in [(16usize, 128usize << 20), (4096, 512 << 10)] {
            measure(files, size);
        }
    }

    fn measure(files: usize, size: usize) {
        use crate::cache::Cache;
        use std::time::Instant;
        let dir = tempfile::tempdir_in(std::env::var_os("TESSERA_BENCH_DIR").unwrap_or(".".into()))
            .unwrap();
        let chunk: Vec<u8> = (0..size as u32 / 4).flat_map(|i| i.to_le_bytes()).collect();
        let paths: Vec<PathBuf> = (0..files)
            .map(|i| dir.path().join(format!("p{i:05}.bin")))
            .collect();
        for (i, p) in paths.iter().enumerate() {
            let mut f = File::create(p).unwrap();
            f.write_all(&(i as u32).to_le_bytes()).unwrap();
            f.write_all(&chunk[4..]).unwrap();
        }
        let gib = (files * size) as f64 / f64::from(1u32 << 30);
        println!("--- {files} files x {} KiB = {gib:.2} GiB", size >> 10);
        let src = [SourceFiles {
            source: "s".into(),
            root: dir.path().to_path_buf(),
            files: paths,
            hash_bytes: false,
        }];
        for drop_first in [false, true] {
            if drop_first && fs::write("/proc/sys/vm/drop_caches", b"3").is_err() {
                println!("(cannot drop the page cache here)");
                continue;
            }
            let t = Instant::now();
            let got = fingerprint_inputs(&src, &mut StatCache::in_memory()).unwrap();
            let s = t.elapsed().as_secs_f64();
            assert!(got.iter().all(|f| !f.from_stat_cache));
            let label = if drop_first {
                "from disk (page cache dropped)"
            } else {
                "from page cache"
            };
            println!("cold hashing {label}: {s:.3} s = {:.2} GiB/s", gib / s);
        }

        let cache = Cache::new(dir.path().join("cache"));
        let mut stat = cache.load_stat_cache();
        stat.set_racy_window(Duration::ZERO);
        let inputs = fingerprint_inputs(&src, &mut stat).unwrap();
        stat.save().unwrap();
        let spec = serde_json::json!({"version": 1});
        let hash = artifact_hash(&spec, &inputs, 1, 1);
        let lock = cache.lock(&hash).unwrap();
        let staging = lock.stage().unwrap();
        let layout = tessera_reader::RecordLayout::packed(&[tessera_reader::FieldSpec::new(
            "x",
            tessera_reader::DType::U32,
            &[],
        )])
        .unwrap();
        let mut w = tessera_reader::ShardSetWriter::new(staging.path(), layout, 1 << 20).unwrap();
        w.begin_split("train").unwrap();
        w.write_records(&[0u8; 400]).unwrap();
        let m = w.finish_with(|m| m.artifact_hash = hash.clone()).unwrap();
        staging.publish(&m).unwrap();
        drop(lock);

        let t = Instant::now();
        let mut stat = cache.load_stat_cache();
        let t_load = t.elapsed();
        let got = fingerprint_inputs(&src, &mut stat).unwrap();
        let t_fp = t.elapsed();
        stat.save().unwrap();
        let h = artifact_hash(&spec, &got, 1, 1);
        let hit = cache.lookup(&h).unwrap();
        let total = t.elapsed();
        assert!(got.iter().all(|f| f.from_stat_cache));
        assert!(hit.is_some());
        println!(
            "cache hit: load stat cache {t_load:?}, fingerprint {:?}, hash + lookup {:?}; total {total:?}",
            t_fp - t_load,
            total - t_fp
        );
    }
}
