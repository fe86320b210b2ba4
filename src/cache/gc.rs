//! Listing the cache and collecting its garbage (`tessera cache ls`,
//! `tessera cache gc`).
//!
//! What `gc` deletes:
//! - artifacts the policy dooms: not among the `keep_newest` most recently
//!   used, and unused for longer than `older_than` (with neither bound, no
//!   sound artifact);
//! - always: unusable artifact directories, staging directories of builds
//!   that died, stat-cache temporaries and other strays in `tmp/` older
//!   than an hour, lock files of hashes without an artifact, and stat-cache
//!   entries of input files that no longer exist.
//!
//! What it keeps whatever the policy says, unless forced:
//! - artifacts open in a reader: every open [`tessera_reader::Dataset`]
//!   holds a lease on its set ([`tessera_reader::lease`]), which dies with
//!   its process;
//! - artifacts written by a newer tessera (a higher format version): this
//!   one cannot read them, which does not make them garbage.
//!
//! Invariants:
//! - Nothing of a hash whose lock is held (a build or publish in progress)
//!   is touched, forced or not; everything of a hash is deleted under its
//!   lock, after checking again under the lock that it did not change since
//!   listing (a build may have replaced it, a lookup may have used it).
//! - Unless forced, an artifact is deleted only while `gc` holds its set
//!   exclusively: no reader has it open, and a reader opening it meanwhile
//!   waits, then finds it gone.
//! - An artifact directory is renamed away before it is deleted, so
//!   `<root>/<hash>` is always either the whole artifact or absent.
//! - A dry run changes nothing on disk, not even lock files.

use super::lock::{Acquire, hash_of_lock_file};
use super::lookup::{Inspection, inspect};
use super::{Cache, CacheError, LOCKS_DIR, io_err, is_artifact_hash, remove_path};
use crate::fingerprint::STAT_CACHE_FILE;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tessera_reader::MANIFEST_FILE;

/// Temporary files not named after a hash are removed by `gc` past this age.
const STRAY_TEMP_AGE: Duration = Duration::from_secs(3600);

/// One artifact directory as `cache ls` shows it. Serialized (for
/// `cache ls --json`) with times as whole seconds since the Unix epoch, in
/// keys `created_unix` and `last_used_unix`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheEntry {
    /// The artifact hash (the directory name).
    pub hash: String,
    /// The directory.
    pub path: PathBuf,
    /// The dataset name from the manifest (empty if invalid).
    pub name: String,
    /// Rows, if the manifest is valid.
    pub rows: Option<u64>,
    /// Bytes of all files in the directory.
    pub bytes: u64,
    /// When the manifest was written.
    #[serde(rename = "created_unix", serialize_with = "unix_seconds_opt")]
    pub created: Option<SystemTime>,
    /// When the artifact was last published or looked up.
    #[serde(rename = "last_used_unix", serialize_with = "unix_seconds")]
    pub last_used: SystemTime,
    /// Why the artifact is unusable, if it is (it is then removed by `gc`,
    /// unless it is of a newer format).
    pub problem: Option<String>,
    /// The format version of an artifact written by a newer tessera (kept by
    /// `gc` unless forced).
    pub newer_format: Option<u64>,
}

/// What `gc` removed (or would remove, in a dry run).
#[derive(Debug, Default)]
pub struct GcReport {
    /// Artifacts removed.
    pub removed: Vec<CacheEntry>,
    /// Artifacts kept.
    pub kept: usize,
    /// Hashes that matched the policy but were locked by a build, and kept.
    pub skipped_in_use: Vec<String>,
    /// Hashes that matched the policy but were open in a reader, and kept.
    pub skipped_open: Vec<String>,
    /// Artifacts of a newer format (hash, format version), kept.
    pub skipped_newer: Vec<(String, u64)>,
    /// Temporary directories and files of crashed builds removed.
    pub temp_removed: Vec<PathBuf>,
    /// Their bytes.
    pub temp_bytes: u64,
    /// Lock files of hashes without an artifact removed.
    pub locks_removed: usize,
    /// Stat-cache entries of files that no longer exist forgotten.
    pub stat_entries_pruned: usize,
}

impl GcReport {
    /// Bytes freed: removed artifacts plus temporary files.
    pub fn freed_bytes(&self) -> u64 {
        self.removed.iter().map(|e| e.bytes).sum::<u64>() + self.temp_bytes
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unix_seconds<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(unix_secs(*t))
}

fn unix_seconds_opt<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_some(&unix_secs(*t)),
        None => s.serialize_none(),
    }
}

/// Total bytes of the regular files below `path` (or of `path` itself).
fn disk_bytes(path: &Path) -> u64 {
    let Ok(md) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !md.is_dir() {
        return md.len();
    }
    fs::read_dir(path)
        .map(|rd| rd.flatten().map(|e| disk_bytes(&e.path())).sum())
        .unwrap_or(0)
}

/// The modification time of `path` (following links), if it can be read.
fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The entries of `dir`; `None` if it does not exist.
fn read_dir_if_present(dir: &Path) -> Result<Option<fs::ReadDir>, CacheError> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Some(rd)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(dir, e)),
    }
}

impl Cache {
    /// Every artifact directory in the cache, most recently used first.
    pub fn list(&self) -> Result<Vec<CacheEntry>, CacheError> {
        let Some(rd) = read_dir_if_present(&self.root)? else {
            return Ok(Vec::new());
        };
        let mut entries = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| io_err(&self.root, e))?;
            let Some(hash) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || !is_artifact_hash(&hash) {
                continue;
            }
            let path = entry.path();
            let (name, rows, problem, newer_format) = match inspect(&path, &hash) {
                Inspection::Missing => continue, // removed meanwhile
                Inspection::Valid(m) => (m.name, Some(m.rows), None, None),
                Inspection::Invalid(reason) => (String::new(), None, Some(reason), None),
                Inspection::Newer(v) => (
                    String::new(),
                    None,
                    Some(format!(
                        "written by a newer tessera (format version {v}; this one reads {})",
                        tessera_reader::LATEST_FORMAT_VERSION
                    )),
                    Some(v),
                ),
            };
            entries.push(CacheEntry {
                bytes: disk_bytes(&path),
                created: modified(&path.join(MANIFEST_FILE)),
                last_used: modified(&path).unwrap_or(SystemTime::UNIX_EPOCH),
                hash,
                path,
                name,
                rows,
                problem,
                newer_format,
            });
        }
        entries.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.hash.cmp(&b.hash)));
        Ok(entries)
    }

    /// Removes artifacts, and what failed builds left behind. An artifact
    /// goes if it is not among the `keep_newest` most recently used ones and
    /// has not been used for longer than `older_than`; a bound that is `None`
    /// protects nothing, but with both `None` no sound artifact is removed.
    /// Always removed: unusable artifact directories, staging directories of
    /// builds that died, lock files of hashes without an artifact, stat-cache
    /// entries of deleted files. A hash whose lock is held (a build or publish
    /// in progress) is never touched. Artifacts open in a reader and
    /// artifacts of a newer format are kept unless `force`. With `dry_run`,
    /// only reports.
    pub fn gc(
        &self,
        keep_newest: Option<usize>,
        older_than: Option<Duration>,
        dry_run: bool,
        force: bool,
    ) -> Result<GcReport, CacheError> {
        let now = SystemTime::now();
        let mut report = GcReport::default();
        let (sound, mut doomed): (Vec<CacheEntry>, Vec<CacheEntry>) =
            self.list()?.into_iter().partition(|e| e.problem.is_none());
        if !force {
            doomed.retain(|e| match e.newer_format {
                Some(v) => {
                    report.skipped_newer.push((e.hash.clone(), v));
                    false
                }
                None => true,
            });
        }
        for (rank, entry) in sound.into_iter().enumerate() {
            let protected = keep_newest.is_some_and(|k| rank < k);
            let old = match older_than {
                Some(d) => now.duration_since(entry.last_used).is_ok_and(|age| age > d),
                None => keep_newest.is_some(),
            };
            if protected || !old {
                report.kept += 1;
            } else {
                doomed.push(entry);
            }
        }
        for entry in doomed {
            let Some(lock) = self.acquire(&entry.hash, Acquire::trying(dry_run))? else {
                report.skipped_in_use.push(entry.hash.clone());
                continue;
            };
            // Under the lock, make sure nothing changed since listing: a build
            // may have replaced an unusable directory, a lookup may have used
            // the artifact.
            let still_doomed = match inspect(&entry.path, &entry.hash) {
                Inspection::Missing => continue,
                Inspection::Valid(_) if entry.problem.is_some() => false,
                _ => modified(&entry.path) == Some(entry.last_used),
            };
            if !still_doomed {
                report.kept += 1;
                continue;
            }
            // Held until the directory is gone: a reader opening it meanwhile
            // waits, then finds nothing.
            let hold = match force {
                true => None,
                false => match tessera_reader::lease::try_exclusive(&entry.path)? {
                    Some(hold) => Some(hold),
                    None => {
                        report.skipped_open.push(entry.hash.clone());
                        continue;
                    }
                },
            };
            if !dry_run {
                self.discard_artifact_dir(&entry.path, &entry.hash, "gc")?;
                lock.remove_file()?;
            }
            drop(hold);
            report.removed.push(entry);
        }
        self.gc_temp(dry_run, now, &mut report)?;
        if !dry_run {
            report.locks_removed = self.gc_locks()?;
        }
        let mut stat = self.load_stat_cache();
        report.stat_entries_pruned = stat.prune_missing();
        if !dry_run && report.stat_entries_pruned > 0 {
            stat.save()?;
        }
        Ok(report)
    }

    /// Staging directories whose hash is not locked belong to builds that
    /// died; so do stat-cache temporaries and other strays past an hour.
    fn gc_temp(
        &self,
        dry_run: bool,
        now: SystemTime,
        report: &mut GcReport,
    ) -> Result<(), CacheError> {
        let tmp = self.tmp_dir();
        let mut candidates = Vec::new();
        if let Some(rd) = read_dir_if_present(&tmp)? {
            candidates.extend(rd.flatten().map(|e| e.path()));
        }
        if let Ok(rd) = fs::read_dir(&self.root) {
            let prefix = format!(".{STAT_CACHE_FILE}.");
            candidates.extend(
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path()),
            );
        }
        for path in candidates {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let hash = name.split('.').next().unwrap_or_default();
            let lock = if path.parent() == Some(tmp.as_path()) && is_artifact_hash(hash) {
                match self.acquire(hash, Acquire::trying(dry_run))? {
                    Some(lock) => Some(lock),
                    None => continue, // a build of this hash is running
                }
            } else {
                let age = fs::symlink_metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok());
                if age.is_none_or(|a| a <= STRAY_TEMP_AGE) {
                    continue;
                }
                None
            };
            report.temp_bytes += disk_bytes(&path);
            if !dry_run {
                remove_path(&path)?;
            }
            drop(lock);
            report.temp_removed.push(path);
        }
        Ok(())
    }

    /// Removes lock files of hashes that have no artifact and no holder.
    fn gc_locks(&self) -> Result<usize, CacheError> {
        let dir = self.root.join(LOCKS_DIR);
        let Some(rd) = read_dir_if_present(&dir)? else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hash) = hash_of_lock_file(&name) else {
                continue;
            };
            if fs::symlink_metadata(self.root.join(hash)).is_ok() {
                continue;
            }
            if let Some(lock) = self.acquire(hash, Acquire::Probe)? {
                // Re-check under the lock: a build may have published meanwhile.
                if fs::symlink_metadata(self.root.join(hash)).is_err() {
                    lock.remove_file()?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests;
