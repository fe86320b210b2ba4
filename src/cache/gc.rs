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
mod tests {
    use super::*;
    use crate::cache::TMP_DIR;
    use crate::cache::format_gc_report;
    use crate::cache::format_listing;
    use crate::cache::test_support::{entries_of, hash_n, publish_new, set_last_used, write_set};

    #[test]
    fn list_shows_artifacts_newest_first() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path().join("never-created"));
        assert!(cache.list().unwrap().is_empty());
        let (old, new) = (hash_n(20), hash_n(21));
        let a = publish_new(&cache, &old, 100);
        let b = publish_new(&cache, &new, 300);
        set_last_used(&a.path, Duration::from_secs(7200));
        fs::create_dir(cache.root().join("not-a-hash")).unwrap();
        let listed = cache.list().unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].hash, new);
        assert_eq!(listed[0].rows, Some(300));
        assert_eq!(listed[0].name, "set-300");
        assert_eq!(listed[0].bytes, disk_bytes(&b.path));
        assert!(listed[0].bytes > 300 * 4);
        assert!(listed[0].created.is_some());
        assert_eq!(listed[1].hash, old);
        let text = format_listing(&listed);
        assert!(
            text.contains("set-300") && text.contains("2h ago"),
            "{text}"
        );
        assert!(text.contains("2 artifacts"), "{text}");
        let json = serde_json::to_value(&listed).unwrap();
        assert_eq!(json[0]["rows"], 300);
        assert_eq!(json[0]["hash"], new.as_str());
        let age = unix_secs(SystemTime::now()) - json[1]["last_used_unix"].as_u64().unwrap();
        assert!((7199..=7260).contains(&age), "{age}");

        // A lookup counts as a use.
        cache.lookup(&old).unwrap().unwrap();
        assert_eq!(cache.list().unwrap()[0].hash, old);
    }

    /// Four artifacts used 10 days, 3 days, 2 hours and just now.
    fn aged_cache() -> (tempfile::TempDir, Cache, Vec<String>) {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let ages = [10 * 86400, 3 * 86400, 7200, 0];
        let hashes: Vec<String> = (0..4).map(|i| hash_n(30 + i)).collect();
        for (h, age) in hashes.iter().zip(ages) {
            let a = publish_new(&cache, h, 10);
            set_last_used(&a.path, Duration::from_secs(age));
        }
        (tmp, cache, hashes)
    }

    fn removed(r: &GcReport) -> Vec<&str> {
        let mut v: Vec<&str> = r.removed.iter().map(|e| e.hash.as_str()).collect();
        v.sort();
        v
    }

    fn sorted(v: &[&String]) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn gc_keep_newest() {
        let (_tmp, cache, h) = aged_cache();
        let dry = cache.gc(Some(1), None, true, false).unwrap();
        assert_eq!(removed(&dry), sorted(&[&h[0], &h[1], &h[2]]));
        assert_eq!(cache.list().unwrap().len(), 4, "a dry run removes nothing");
        assert!(format_gc_report(&dry, true).contains("would remove 3 artifacts"));

        let r = cache.gc(Some(2), None, false, false).unwrap();
        assert_eq!(removed(&r), sorted(&[&h[0], &h[1]]));
        assert_eq!(r.kept, 2);
        assert!(r.freed_bytes() > 0);
        let left: Vec<String> = cache.list().unwrap().into_iter().map(|e| e.hash).collect();
        assert_eq!(left, vec![h[3].clone(), h[2].clone()]);
        assert!(
            !cache
                .root()
                .join(LOCKS_DIR)
                .join(format!("{}.lock", h[0]))
                .exists()
        );
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
    }

    #[test]
    fn gc_older_than_and_both_bounds() {
        let (_tmp, cache, h) = aged_cache();
        let day = Duration::from_secs(86400);
        let r = cache.gc(Some(3), Some(day), true, false).unwrap();
        assert_eq!(removed(&r), sorted(&[&h[0]]), "the 3 newest are protected");
        let r = cache.gc(None, Some(day), false, false).unwrap();
        assert_eq!(removed(&r), sorted(&[&h[0], &h[1]]));
        let r = cache.gc(None, None, false, false).unwrap();
        assert!(r.removed.is_empty(), "no bounds: nothing sound is removed");
        assert_eq!(cache.list().unwrap().len(), 2);
    }

    #[test]
    fn gc_spares_running_builds_and_removes_debris() {
        let (_tmp, cache, h) = aged_cache();
        // h[0] is locked (being republished, say): gc must leave it alone.
        let publishing = cache.lock(&h[0]).unwrap();
        // Another hash is being built: its staging directory must survive.
        let building_hash = hash_n(97);
        let building = cache.lock(&building_hash).unwrap();
        let staging = building.stage().unwrap();
        let m = write_set(staging.path(), &building_hash, 5);
        // A crashed build left its staging directory and its lock file.
        let crashed = hash_n(99);
        let debris = cache
            .root()
            .join(TMP_DIR)
            .join(format!("{crashed}.4242.x-0"));
        fs::create_dir_all(&debris).unwrap();
        fs::write(debris.join("shard-00000.bin"), vec![0u8; 10_000]).unwrap();
        drop(cache.lock(&crashed).unwrap());
        // An unusable artifact directory.
        let broken = hash_n(98);
        fs::create_dir(cache.root().join(&broken)).unwrap();

        let r = cache.gc(Some(2), None, false, false).unwrap();
        assert_eq!(r.skipped_in_use, vec![h[0].clone()]);
        assert_eq!(removed(&r), sorted(&[&h[1], &broken]));
        assert_eq!(r.temp_removed, vec![debris.clone()]);
        assert!(r.temp_bytes >= 10_000);
        assert_eq!(r.locks_removed, 1, "only the crashed build's lock file");
        assert!(!debris.exists());
        assert!(cache.root().join(&h[0]).exists());
        let text = format_gc_report(&r, false);
        assert!(text.contains("a build of it is running"), "{text}");

        // The running build goes on to publish normally.
        assert!(staging.path().exists());
        staging.publish(&m).unwrap();
        assert!(cache.lookup(&building_hash).unwrap().is_some());
        drop(publishing);
    }

    /// An artifact open in a reader survives gc (dry run or not), and goes
    /// once the reader closes it; `force` removes it while open.
    #[test]
    fn gc_keeps_artifacts_open_in_a_reader_unless_forced() {
        let (_tmp, cache, h) = aged_cache();
        let reader = tessera_reader::Dataset::open(cache.root().join(&h[0])).unwrap();
        let dry = cache
            .gc(None, Some(Duration::from_secs(60)), true, false)
            .unwrap();
        assert_eq!(dry.skipped_open, vec![h[0].clone()]);
        assert_eq!(removed(&dry), sorted(&[&h[1], &h[2]]));
        let r = cache
            .gc(None, Some(Duration::from_secs(60)), false, false)
            .unwrap();
        assert_eq!(r.skipped_open, vec![h[0].clone()]);
        assert_eq!(removed(&r), sorted(&[&h[1], &h[2]]));
        let text = format_gc_report(&r, false);
        assert!(
            text.contains(&format!("kept {}: open in a reader", h[0])),
            "{text}"
        );
        assert!(text.ends_with("kept 2\n"), "the open one and h[3]: {text}");
        // The reader still reads every record.
        let sum: u64 = (0..reader.len())
            .map(|i| {
                u64::from(u32::from_le_bytes(
                    reader.record(i).unwrap().try_into().unwrap(),
                ))
            })
            .sum();
        assert_eq!(sum, 45);
        drop(reader);
        let r = cache
            .gc(None, Some(Duration::from_secs(60)), false, false)
            .unwrap();
        assert_eq!(removed(&r), sorted(&[&h[0]]));

        let reader = tessera_reader::Dataset::open(cache.root().join(&h[3])).unwrap();
        let r = cache.gc(None, Some(Duration::ZERO), false, true).unwrap();
        assert!(r.skipped_open.is_empty());
        assert_eq!(removed(&r), sorted(&[&h[3]]));
        // Its maps outlive the deletion.
        assert_eq!(reader.record(9).unwrap(), 9u32.to_le_bytes());
    }

    /// An artifact of a newer format is kept by gc, even though this tessera
    /// cannot read it; `force` removes it.
    #[test]
    fn gc_keeps_artifacts_of_a_newer_format_unless_forced() {
        let (_tmp, cache, h) = aged_cache();
        let manifest = cache.root().join(&h[0]).join(MANIFEST_FILE);
        let mut json: serde_json::Value =
            serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
        json["format_version"] = serde_json::json!(tessera_reader::LATEST_FORMAT_VERSION + 1);
        json["a_key_from_the_future"] = serde_json::json!(true);
        fs::write(&manifest, serde_json::to_vec(&json).unwrap()).unwrap();
        set_last_used(&cache.root().join(&h[0]), Duration::from_secs(10 * 86400));
        let listed = cache.list().unwrap();
        let entry = listed.iter().find(|e| e.hash == h[0]).unwrap();
        assert_eq!(
            entry.newer_format,
            Some(u64::from(tessera_reader::LATEST_FORMAT_VERSION) + 1)
        );
        assert!(format_listing(&listed).contains("(newer format)"));
        assert!(cache.lookup(&h[0]).unwrap().is_none(), "not usable here");

        let r = cache.gc(Some(0), None, false, false).unwrap();
        let v = u64::from(tessera_reader::LATEST_FORMAT_VERSION) + 1;
        assert_eq!(r.skipped_newer, vec![(h[0].clone(), v)]);
        assert!(!removed(&r).contains(&h[0].as_str()));
        assert!(cache.root().join(&h[0]).exists());
        let text = format_gc_report(&r, false);
        assert!(
            text.contains(&format!("written by a newer tessera (format version {v})")),
            "{text}"
        );

        let r = cache.gc(None, None, false, true).unwrap();
        assert_eq!(removed(&r), vec![h[0].as_str()]);
        assert!(!cache.root().join(&h[0]).exists());
    }

    #[test]
    fn gc_prunes_the_stat_cache() {
        use crate::fingerprint::{SourceFiles, fingerprint_inputs};
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path().join("c"));
        let input = tmp.path().join("in.csv");
        fs::write(&input, b"a\n1\n").unwrap();
        let mut stat = cache.load_stat_cache();
        stat.set_racy_window(Duration::ZERO);
        let src = SourceFiles {
            source: "s".into(),
            root: tmp.path().to_path_buf(),
            files: vec![input.clone()],
            hash_bytes: false,
        };
        fingerprint_inputs(&[src], &mut stat).unwrap();
        stat.save().unwrap();
        fs::remove_file(&input).unwrap();
        let r = cache.gc(None, None, false, false).unwrap();
        assert_eq!(r.stat_entries_pruned, 1);
        assert!(cache.load_stat_cache().is_empty());
    }
}
