//! The stat cache: each input file's hash remembered with its size,
//! modification time, change time, inode and device, so an unchanged file is
//! not read again (see the parent module).

use super::{DEFAULT_RACY_WINDOW, FingerprintError, STAT_CACHE_FORMAT, STAT_CACHE_VERSION};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tessera_reader::durable::AtomicFile;

/// What identifies one version of a file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct FileStat {
    pub(super) size: u64,
    pub(super) mtime_ns: i128,
    pub(super) ctime_ns: i128,
    pub(super) ino: u64,
    pub(super) dev: u64,
}

impl FileStat {
    #[cfg(unix)]
    pub(super) fn of(m: &Metadata) -> FileStat {
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
    pub(super) fn of(m: &Metadata) -> FileStat {
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

pub(super) fn system_time_ns(t: SystemTime) -> i128 {
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
    pub(super) racy_window: Duration,
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

    pub(super) fn get(&self, key: &str, stat: &FileStat) -> Option<&str> {
        self.entries
            .get(key)
            .filter(|e| e.stat == *stat)
            .map(|e| e.blake3.as_str())
    }

    pub(super) fn insert(&mut self, key: String, stat: FileStat, blake3: String) {
        self.removed.remove(&key);
        self.changed.insert(key.clone());
        self.entries.insert(key, StatEntry { stat, blake3 });
    }

    #[cfg(test)]
    pub(super) fn poison(&mut self, key: &Path, blake3: &str) {
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
