//! The artifact cache: built shard sets stored under their artifact hash.
//!
//! ```text
//! <root>/<hash>/             a published shard set (manifest.json + shards)
//! <root>/locks/<hash>.lock   the build lock of one hash
//! <root>/tmp/<hash>.<...>/   staging directories of builds in progress
//! <root>/stat-cache.json     the fingerprint stat cache
//! <root>/CACHEDIR.TAG        tells backup tools to skip the cache
//! ```
//!
//! A directory appears under `<root>/<hash>` only by renaming a complete
//! staging directory into place, after its files were fsynced and its
//! manifest written last, so nobody ever sees a torn artifact, whatever
//! crashes or fills up. Builds of one hash take its lock; a second build waits
//! for the first and then finds the published artifact. An artifact's
//! directory modification time records when it was last used (published or
//! looked up); `gc` goes by it.

use crate::fingerprint::{STAT_CACHE_FILE, StatCache, unique_suffix};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File, FileTimes, Metadata, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tessera_reader::{MANIFEST_FILE, Manifest};

/// Environment variable naming the cache root (below `--cache-dir`).
pub const CACHE_DIR_ENV: &str = "TESSERA_CACHE_DIR";

const LOCKS_DIR: &str = "locks";
const TMP_DIR: &str = "tmp";
const CACHEDIR_TAG: &str = "CACHEDIR.TAG";
const CACHEDIR_TAG_TEXT: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by tessera.\n\
# For information about cache directory tags see https://bford.info/cachedir/\n";
/// Temporary files not named after a hash are removed by `gc` past this age.
const STRAY_TEMP_AGE: Duration = Duration::from_secs(3600);

/// What can go wrong in the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// An operating-system error on a path in the cache.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The disk (or quota) filled up while writing.
    #[error(
        "{path}: no space left on device; nothing was published (free space, or point --cache-dir or TESSERA_CACHE_DIR at a larger disk)"
    )]
    DiskFull {
        /// The file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A string that should be an artifact hash is not one.
    #[error("{hash:?} is not an artifact hash (expected 64 lowercase hex digits)")]
    InvalidHash {
        /// The offending string.
        hash: String,
    },
    /// No cache root was given and none can be derived from the environment.
    #[error(
        "no cache directory: pass --cache-dir, or set TESSERA_CACHE_DIR, XDG_CACHE_HOME or HOME"
    )]
    NoCacheDir,
    /// The staged artifact is inconsistent with its manifest.
    #[error("{path}: cannot publish: {reason}")]
    Publish {
        /// The staging directory or the file concerned.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing the manifest failed for a reason other than I/O.
    #[error(transparent)]
    Format(tessera_reader::Error),
    /// The stat cache could not be saved.
    #[error(transparent)]
    StatCache(#[from] crate::fingerprint::FingerprintError),
}

fn io_err(path: &Path, source: io::Error) -> CacheError {
    let path = path.to_path_buf();
    match source.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
            CacheError::DiskFull { path, source }
        }
        _ => CacheError::Io { path, source },
    }
}

impl From<tessera_reader::Error> for CacheError {
    fn from(e: tessera_reader::Error) -> Self {
        match e {
            tessera_reader::Error::Io { path, source } => io_err(&path, source),
            other => CacheError::Format(other),
        }
    }
}

/// Whether `s` is an artifact hash: 64 lowercase hex digits. Only such names
/// are ever joined to the cache root, so no argument can point outside it.
pub fn is_artifact_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

fn check_hash(hash: &str) -> Result<(), CacheError> {
    if is_artifact_hash(hash) {
        Ok(())
    } else {
        Err(CacheError::InvalidHash { hash: hash.into() })
    }
}

/// A published artifact.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// Its hash.
    pub hash: String,
    /// Its directory, `<root>/<hash>`.
    pub path: PathBuf,
    /// Its parsed manifest.
    pub manifest: Manifest,
}

/// What [`Cache::get_or_build`] did.
#[derive(Clone, Debug)]
pub struct Obtained {
    /// The artifact.
    pub artifact: Artifact,
    /// Whether this call built it (false: it was in the cache).
    pub built: bool,
    /// Whether this call waited for another build of the same hash.
    pub waited: bool,
}

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
    /// Why the artifact is unusable, if it is (it is then removed by `gc`).
    pub problem: Option<String>,
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

enum Inspection {
    Missing,
    Invalid(String),
    Valid(Box<Manifest>),
}

/// Looks at `<root>/<hash>` without changing anything: the manifest must
/// parse, name this hash, and every shard must exist with its recorded size.
/// Shard contents are not hashed (that is the reader's `verify`).
fn inspect(dir: &Path, hash: &str) -> Inspection {
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = match fs::read(&manifest_path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return match fs::symlink_metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Inspection::Missing,
                _ => Inspection::Invalid(format!("{MANIFEST_FILE} is missing")),
            };
        }
        Err(e) => return Inspection::Invalid(format!("{}: {e}", manifest_path.display())),
    };
    let m = match Manifest::parse(&bytes, &manifest_path) {
        Ok(m) => Box::new(m),
        Err(e) => return Inspection::Invalid(e.to_string()),
    };
    if m.artifact_hash != hash {
        return Inspection::Invalid(format!("the manifest names artifact {:?}", m.artifact_hash));
    }
    for s in &m.shards {
        match fs::metadata(dir.join(&s.file)) {
            Ok(md) if md.len() == s.bytes => {}
            Ok(md) => {
                return Inspection::Invalid(format!(
                    "shard {} is {} bytes, the manifest says {}",
                    s.file,
                    md.len(),
                    s.bytes
                ));
            }
            Err(e) => return Inspection::Invalid(format!("shard {}: {e}", s.file)),
        }
    }
    Inspection::Valid(m)
}

/// Marks a directory as used now (its modification time). Best effort: a
/// read-only cache still serves hits.
fn touch(dir: &Path) {
    if let Ok(f) = File::open(dir) {
        let _ = f.set_times(FileTimes::new().set_modified(SystemTime::now()));
    }
}

#[cfg(unix)]
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &Metadata, _: &Metadata) -> bool {
    true
}

/// fsyncs every file and directory below `dir`, then `dir` itself. Delayed
/// allocation means a full disk can first show up here.
fn sync_tree(dir: &Path) -> Result<(), CacheError> {
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io_err(&path, e))?;
        if kind.is_dir() {
            sync_tree(&path)?;
        } else if kind.is_file() {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err(&path, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), CacheError> {
    tessera_reader::sync_dir(dir).map_err(CacheError::from)
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

fn remove_path(path: &Path) -> Result<(), CacheError> {
    let result = match fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(path, e)),
        _ => Ok(()),
    }
}

/// The cache root from, in order: the `--cache-dir` argument, the
/// `TESSERA_CACHE_DIR` variable, `$XDG_CACHE_HOME/tessera/artifacts`,
/// `$HOME/.cache/tessera/artifacts`. Empty variables count as unset, and a
/// relative `XDG_CACHE_HOME` is ignored, as the XDG specification says. The
/// result is made absolute.
pub fn cache_root_from(
    cli: Option<&Path>,
    env_dir: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, CacheError> {
    let set = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    let root = if let Some(p) = cli {
        p.to_path_buf()
    } else if let Some(p) = set(env_dir) {
        p
    } else if let Some(p) = set(xdg_cache_home).filter(|p| p.is_absolute()) {
        p.join("tessera").join("artifacts")
    } else if let Some(p) = set(home) {
        p.join(".cache").join("tessera").join("artifacts")
    } else {
        return Err(CacheError::NoCacheDir);
    };
    std::path::absolute(&root).map_err(|e| io_err(&root, e))
}

/// The artifact cache rooted at one directory.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// A cache rooted at `root`. Nothing is created until something is built.
    pub fn new(root: impl Into<PathBuf>) -> Cache {
        Cache { root: root.into() }
    }

    /// The cache named by `--cache-dir` (`cli`) or the environment; see
    /// [`cache_root_from`].
    pub fn resolve(cli: Option<&Path>) -> Result<Cache, CacheError> {
        let root = cache_root_from(
            cli,
            std::env::var_os(CACHE_DIR_ENV),
            std::env::var_os("XDG_CACHE_HOME"),
            std::env::var_os("HOME"),
        )?;
        Ok(Cache::new(root))
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the artifact `hash` lives (whether or not it exists).
    pub fn artifact_dir(&self, hash: &str) -> Result<PathBuf, CacheError> {
        check_hash(hash)?;
        Ok(self.root.join(hash))
    }

    /// Where the stat cache lives.
    pub fn stat_cache_path(&self) -> PathBuf {
        self.root.join(STAT_CACHE_FILE)
    }

    /// Loads the stat cache (empty if missing or corrupt).
    pub fn load_stat_cache(&self) -> StatCache {
        StatCache::load(&self.stat_cache_path())
    }

    fn prepare(&self) -> Result<(), CacheError> {
        for dir in [self.root.join(LOCKS_DIR), self.root.join(TMP_DIR)] {
            fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        }
        let tag = self.root.join(CACHEDIR_TAG);
        if !tag.exists() {
            // Only a courtesy to backup tools; failing to write it is harmless.
            let _ = fs::write(&tag, CACHEDIR_TAG_TEXT);
        }
        Ok(())
    }

    /// The published artifact `hash`, if it is present and sound (its manifest
    /// parses, names this hash, and every shard has its recorded size). A hit
    /// marks the artifact as used. An unsound directory counts as absent; the
    /// next publish of that hash replaces it.
    pub fn lookup(&self, hash: &str) -> Result<Option<Artifact>, CacheError> {
        let dir = self.artifact_dir(hash)?;
        match inspect(&dir, hash) {
            Inspection::Valid(manifest) => {
                touch(&dir);
                Ok(Some(Artifact {
                    hash: hash.to_owned(),
                    path: dir,
                    manifest: *manifest,
                }))
            }
            Inspection::Missing | Inspection::Invalid(_) => Ok(None),
        }
    }

    /// Takes the build lock of `hash`, waiting as long as another process or
    /// thread holds it. Released when the [`BuildLock`] is dropped (or the
    /// process dies). Not reentrant: taking it twice in one thread deadlocks.
    pub fn lock(&self, hash: &str) -> Result<BuildLock, CacheError> {
        match self.acquire(hash, true, true)? {
            Some(lock) => Ok(lock),
            None => unreachable!("a blocking lock returns only once held"),
        }
    }

    /// Takes the build lock of `hash` if nobody holds it.
    pub fn try_lock(&self, hash: &str) -> Result<Option<BuildLock>, CacheError> {
        self.acquire(hash, false, true)
    }

    fn acquire(
        &self,
        hash: &str,
        wait: bool,
        create: bool,
    ) -> Result<Option<BuildLock>, CacheError> {
        check_hash(hash)?;
        if create {
            self.prepare()?;
        }
        let path = self.root.join(LOCKS_DIR).join(format!("{hash}.lock"));
        loop {
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if !create && e.kind() == io::ErrorKind::NotFound => {
                    return Ok(Some(BuildLock {
                        root: self.root.clone(),
                        hash: hash.to_owned(),
                        path,
                        file: None,
                    }));
                }
                Err(e) => return Err(io_err(&path, e)),
            };
            if wait {
                file.lock().map_err(|e| io_err(&path, e))?;
            } else {
                match file.try_lock() {
                    Ok(()) => {}
                    Err(TryLockError::WouldBlock) => return Ok(None),
                    Err(TryLockError::Error(e)) => return Err(io_err(&path, e)),
                }
            }
            // `gc` deletes lock files while holding them. Whoever opened such
            // a file before its deletion now holds a lock that nobody else can
            // see; only a lock on the file currently at `path` counts.
            let held = file.metadata().map_err(|e| io_err(&path, e))?;
            match fs::metadata(&path) {
                Ok(current) if same_file(&held, &current) => {
                    return Ok(Some(BuildLock {
                        root: self.root.clone(),
                        hash: hash.to_owned(),
                        path,
                        file: Some(file),
                    }));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&path, e)),
            }
        }
    }

    /// The artifact `hash`: from the cache if present, otherwise built by
    /// `build` into a staging directory and published. Concurrent calls for
    /// one hash (threads or processes) build it once; the others wait, calling
    /// `on_wait` first (to tell the user), then return the published artifact.
    /// If `build` fails, its staging directory is removed and its error
    /// returned. The manifest `build` returns must carry `hash` as its
    /// `artifact_hash`.
    pub fn get_or_build<E: From<CacheError>>(
        &self,
        hash: &str,
        on_wait: impl FnOnce(),
        build: impl FnOnce(&Staging<'_>) -> Result<Manifest, E>,
    ) -> Result<Obtained, E> {
        if let Some(artifact) = self.lookup(hash)? {
            return Ok(Obtained {
                artifact,
                built: false,
                waited: false,
            });
        }
        let (lock, waited) = match self.try_lock(hash)? {
            Some(lock) => (lock, false),
            None => {
                on_wait();
                (self.lock(hash)?, true)
            }
        };
        if let Some(artifact) = self.lookup(hash)? {
            return Ok(Obtained {
                artifact,
                built: false,
                waited,
            });
        }
        let staging = lock.stage()?;
        let manifest = build(&staging)?;
        let artifact = staging.publish(&manifest)?;
        Ok(Obtained {
            artifact,
            built: true,
            waited,
        })
    }

    /// Every artifact directory in the cache, most recently used first.
    pub fn list(&self) -> Result<Vec<CacheEntry>, CacheError> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.root, e)),
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
            let (name, rows, problem) = match inspect(&path, &hash) {
                Inspection::Missing => continue, // removed meanwhile
                Inspection::Valid(m) => (m.name, Some(m.rows), None),
                Inspection::Invalid(reason) => (String::new(), None, Some(reason)),
            };
            let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
            entries.push(CacheEntry {
                bytes: disk_bytes(&path),
                created: modified(&path.join(MANIFEST_FILE)),
                last_used: modified(&path).unwrap_or(SystemTime::UNIX_EPOCH),
                hash,
                path,
                name,
                rows,
                problem,
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
    /// in progress) is never touched. With `dry_run`, only reports.
    pub fn gc(
        &self,
        keep_newest: Option<usize>,
        older_than: Option<Duration>,
        dry_run: bool,
    ) -> Result<GcReport, CacheError> {
        let now = SystemTime::now();
        let mut report = GcReport::default();
        let (sound, mut doomed): (Vec<CacheEntry>, Vec<CacheEntry>) =
            self.list()?.into_iter().partition(|e| e.problem.is_none());
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
            let Some(lock) = self.acquire(&entry.hash, false, !dry_run)? else {
                report.skipped_in_use.push(entry.hash.clone());
                continue;
            };
            // Under the lock, make sure nothing changed since listing: a build
            // may have replaced an unusable directory, a lookup may have used
            // the artifact.
            let still_doomed = match inspect(&entry.path, &entry.hash) {
                Inspection::Missing => continue,
                Inspection::Valid(_) if entry.problem.is_some() => false,
                _ => fs::metadata(&entry.path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t == entry.last_used),
            };
            if !still_doomed {
                report.kept += 1;
                continue;
            }
            if !dry_run {
                // Rename first so that `<root>/<hash>` is either the whole
                // artifact or absent, never half deleted.
                let trash =
                    self.root
                        .join(TMP_DIR)
                        .join(format!("{}.gc.{}", entry.hash, unique_suffix()));
                fs::rename(&entry.path, &trash).map_err(|e| io_err(&entry.path, e))?;
                remove_path(&trash)?;
                lock.remove_file()?;
            }
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
        let tmp = self.root.join(TMP_DIR);
        let mut candidates = Vec::new();
        match fs::read_dir(&tmp) {
            Ok(rd) => candidates.extend(rd.flatten().map(|e| e.path())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&tmp, e)),
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
                match self.acquire(hash, false, !dry_run)? {
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
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err(&dir, e)),
        };
        let mut removed = 0;
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hash) = name.strip_suffix(".lock").filter(|h| is_artifact_hash(h)) else {
                continue;
            };
            if fs::symlink_metadata(self.root.join(hash)).is_ok() {
                continue;
            }
            if let Some(lock) = self.acquire(hash, false, false)? {
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

/// The build lock of one hash, held until dropped.
#[derive(Debug)]
pub struct BuildLock {
    root: PathBuf,
    hash: String,
    path: PathBuf,
    /// `None` only for a dry-run probe of a lock file that does not exist.
    file: Option<File>,
}

impl BuildLock {
    /// The hash this lock is for.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// A new, empty staging directory for this hash under `<root>/tmp/`.
    pub fn stage(&self) -> Result<Staging<'_>, CacheError> {
        let tmp = self.root.join(TMP_DIR);
        fs::create_dir_all(&tmp).map_err(|e| io_err(&tmp, e))?;
        let dir = tmp.join(format!(
            "{}.{}.{}",
            self.hash,
            std::process::id(),
            unique_suffix()
        ));
        fs::create_dir(&dir).map_err(|e| io_err(&dir, e))?;
        Ok(Staging {
            lock: self,
            dir,
            published: false,
        })
    }

    /// Deletes the lock file while still holding it (see [`Cache::lock`]'s
    /// identity check), then releases the lock.
    fn remove_file(self) -> Result<(), CacheError> {
        if self.file.is_some() {
            match fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io_err(&self.path, e));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A directory where one build writes its artifact. Dropped without
/// [`Staging::publish`], it is deleted, leaving no trace in the cache.
#[derive(Debug)]
pub struct Staging<'l> {
    lock: &'l BuildLock,
    dir: PathBuf,
    published: bool,
}

impl Staging<'_> {
    /// The directory to write shards into.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Publishes the staged artifact: checks that every shard in `manifest`
    /// is present with its size, fsyncs all files, writes `manifest.json` last
    /// (replacing one already there), renames the directory to
    /// `<root>/<hash>` and fsyncs the root. An unsound directory already at
    /// that name is replaced; a sound one (published by a process that did not
    /// take the lock) is kept and returned, and the staged copy discarded.
    pub fn publish(mut self, manifest: &Manifest) -> Result<Artifact, CacheError> {
        let hash = self.lock.hash.as_str();
        if manifest.artifact_hash != hash {
            return Err(CacheError::Publish {
                path: self.dir.clone(),
                reason: format!(
                    "the manifest names artifact {:?} but this build is for {hash}",
                    manifest.artifact_hash
                ),
            });
        }
        for s in &manifest.shards {
            let path = self.dir.join(&s.file);
            let len = fs::metadata(&path).map_err(|e| io_err(&path, e))?.len();
            if len != s.bytes {
                return Err(CacheError::Publish {
                    path,
                    reason: format!("shard is {len} bytes, the manifest says {}", s.bytes),
                });
            }
        }
        sync_tree(&self.dir)?;
        tessera_reader::write_manifest(&self.dir, manifest)?;

        let root = &self.lock.root;
        let target = root.join(hash);
        match inspect(&target, hash) {
            Inspection::Missing => {}
            Inspection::Valid(existing) => {
                return Ok(Artifact {
                    hash: hash.to_owned(),
                    path: target,
                    manifest: *existing,
                });
            }
            Inspection::Invalid(_) => {
                let trash = root
                    .join(TMP_DIR)
                    .join(format!("{hash}.invalid.{}", unique_suffix()));
                fs::rename(&target, &trash).map_err(|e| io_err(&target, e))?;
                remove_path(&trash)?;
            }
        }
        fs::rename(&self.dir, &target).map_err(|e| io_err(&target, e))?;
        self.published = true;
        sync_dir(root)?;
        sync_dir(&root.join(TMP_DIR))?;
        touch(&target);
        Ok(Artifact {
            hash: hash.to_owned(),
            path: target,
            manifest: manifest.clone(),
        })
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A duration as an age in its largest whole unit: `42s`, `5m`, `3h`, `12d`.
pub fn format_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Parses an age such as `90s`, `30m`, `12h`, `7d` or `2w` (for
/// `cache gc --older-than`).
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not an age like 30m, 12h or 7d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(format!("{s:?}: the unit must be one of s, m, h, d, w")),
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// The table `tessera cache ls` prints, ages counted from now.
pub fn format_listing(entries: &[CacheEntry]) -> String {
    format_listing_at(entries, SystemTime::now())
}

/// [`format_listing`] with ages counted from `now`.
pub fn format_listing_at(entries: &[CacheEntry], now: SystemTime) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16}  {:<24}  {:>12}  {:>10}  {:>9}",
        "HASH", "NAME", "ROWS", "SIZE", "LAST USED"
    );
    for e in entries {
        let age = now
            .duration_since(e.last_used)
            .map(|d| format!("{} ago", format_age(d)))
            .unwrap_or_else(|_| "now".into());
        let rows = e.rows.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
        let name = match &e.problem {
            Some(_) => "(unusable)",
            None if e.name.is_empty() => "-",
            None => e.name.as_str(),
        };
        let _ = writeln!(
            out,
            "{:<16}  {:<24}  {:>12}  {:>10}  {:>9}",
            &e.hash[..16],
            name,
            rows,
            format_bytes(e.bytes),
            age
        );
        if let Some(p) = &e.problem {
            let _ = writeln!(out, "  unusable: {p}");
        }
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    let _ = writeln!(
        out,
        "{} artifact{}, {}",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        format_bytes(total)
    );
    out
}

/// The summary `tessera cache gc` prints.
pub fn format_gc_report(report: &GcReport, dry_run: bool) -> String {
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut out = String::new();
    for e in &report.removed {
        let why = e.problem.as_deref().map(|p| format!(" (unusable: {p})"));
        let _ = writeln!(
            out,
            "{verb} {} {} {}{}",
            e.hash,
            if e.name.is_empty() { "-" } else { &e.name },
            format_bytes(e.bytes),
            why.unwrap_or_default()
        );
    }
    for h in &report.skipped_in_use {
        let _ = writeln!(out, "kept {h}: a build of it is running");
    }
    let _ = writeln!(
        out,
        "{verb} {} artifact{} and {} temporary item{}, {} in all; kept {}",
        report.removed.len(),
        if report.removed.len() == 1 { "" } else { "s" },
        report.temp_removed.len(),
        if report.temp_removed.len() == 1 {
            ""
        } else {
            "s"
        },
        format_bytes(report.freed_bytes()),
        report.kept
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    use tessera_reader::{DType, Dataset, FieldSpec, RecordLayout, ShardSetWriter};

    fn hash_n(n: u32) -> String {
        blake3::hash(&n.to_le_bytes()).to_hex().to_string()
    }

    /// Writes a small valid shard set into `dir`, manifest included.
    fn write_set(dir: &Path, hash: &str, rows: u32) -> Manifest {
        let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::U32, &[])]).unwrap();
        let mut w = ShardSetWriter::new(dir, layout, 4096 + 4 * 100).unwrap();
        w.begin_split("train").unwrap();
        for i in 0..rows {
            w.write_records(&i.to_le_bytes()).unwrap();
        }
        w.finish_with(|m| {
            m.artifact_hash = hash.to_owned();
            m.name = format!("set-{rows}");
        })
        .unwrap()
    }

    fn publish_new(cache: &Cache, hash: &str, rows: u32) -> Artifact {
        let lock = cache.lock(hash).unwrap();
        let staging = lock.stage().unwrap();
        let m = write_set(staging.path(), hash, rows);
        staging.publish(&m).unwrap()
    }

    fn entries_of(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = match fs::read_dir(dir) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        v.sort();
        v
    }

    fn set_last_used(path: &Path, ago: Duration) {
        File::open(path)
            .unwrap()
            .set_times(FileTimes::new().set_modified(SystemTime::now() - ago))
            .unwrap();
    }

    #[test]
    fn publish_then_lookup() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path().join("c"));
        let h = hash_n(1);
        assert!(cache.lookup(&h).unwrap().is_none());
        let a = publish_new(&cache, &h, 250);
        assert_eq!(a.path, cache.root().join(&h));
        assert_eq!(a.manifest.rows, 250);
        let hit = cache.lookup(&h).unwrap().unwrap();
        assert_eq!(hit.manifest, a.manifest);
        assert_eq!(Dataset::open(&hit.path).unwrap().len(), 250);
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
        assert!(cache.root().join(CACHEDIR_TAG).exists());
    }

    #[test]
    fn dropped_staging_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(2);
        let lock = cache.lock(&h).unwrap();
        {
            let staging = lock.stage().unwrap();
            write_set(staging.path(), &h, 1000);
            assert!(staging.path().join(MANIFEST_FILE).exists());
            // The build "crashes" here: the staging directory goes unpublished.
        }
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
        assert!(!cache.root().join(&h).exists());
        assert!(cache.lookup(&h).unwrap().is_none());
    }

    #[test]
    fn publish_refuses_inconsistent_staging() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(3);
        let lock = cache.lock(&h).unwrap();

        let staging = lock.stage().unwrap();
        let m = write_set(staging.path(), &hash_n(4), 10);
        let err = staging.publish(&m).unwrap_err();
        assert!(err.to_string().contains("this build is for"), "{err}");

        let staging = lock.stage().unwrap();
        let m = write_set(staging.path(), &h, 300);
        fs::remove_file(staging.path().join(&m.shards[1].file)).unwrap();
        let err = staging.publish(&m).unwrap_err();
        assert!(err.to_string().contains(&m.shards[1].file), "{err}");

        assert!(!cache.root().join(&h).exists());
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
    }

    #[test]
    fn unsound_artifacts_are_misses_and_get_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(5);
        let a = publish_new(&cache, &h, 250);
        let shard = a.path.join(&a.manifest.shards[0].file);

        // A truncated shard.
        let f = OpenOptions::new().write(true).open(&shard).unwrap();
        f.set_len(100).unwrap();
        assert!(cache.lookup(&h).unwrap().is_none());
        let listed = cache.list().unwrap();
        assert!(listed[0].problem.as_deref().unwrap().contains("bytes"));

        // A garbage manifest.
        fs::write(a.path.join(MANIFEST_FILE), b"{not json").unwrap();
        assert!(cache.lookup(&h).unwrap().is_none());

        // A manifest that belongs to another hash.
        let other = hash_n(6);
        let o = publish_new(&cache, &other, 20);
        fs::remove_dir_all(&a.path).unwrap();
        fs::rename(&o.path, &a.path).unwrap();
        assert!(cache.lookup(&h).unwrap().is_none());

        // Publishing replaces the unsound directory.
        let fresh = publish_new(&cache, &h, 7);
        assert_eq!(cache.lookup(&h).unwrap().unwrap().manifest, fresh.manifest);
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
    }

    #[test]
    fn hashes_are_checked_before_use() {
        let cache = Cache::new("/nonexistent-cache-root");
        let bad = [
            String::new(),
            "..".into(),
            "../etc".into(),
            "A".repeat(64),
            "a".repeat(63),
            format!("{}/", "a".repeat(63)),
            format!("{}/..", "a".repeat(61)),
        ];
        for bad in &bad {
            assert!(
                matches!(cache.lookup(bad), Err(CacheError::InvalidHash { .. })),
                "{bad}"
            );
            assert!(matches!(
                cache.artifact_dir(bad),
                Err(CacheError::InvalidHash { .. })
            ));
            assert!(matches!(
                cache.try_lock(bad),
                Err(CacheError::InvalidHash { .. })
            ));
        }
    }

    #[test]
    fn a_held_lock_excludes_and_is_released_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(7);
        let held = cache.try_lock(&h).unwrap().unwrap();
        assert!(cache.try_lock(&h).unwrap().is_none());
        assert!(
            cache.try_lock(&hash_n(8)).unwrap().is_some(),
            "locks are per hash"
        );
        drop(held);
        assert!(cache.try_lock(&h).unwrap().is_some());
    }

    /// gc deletes a lock file while holding it. A builder that had already
    /// opened the old file and was waiting on it must not count the lock it
    /// then gets, or two builders would run at once.
    #[test]
    fn lock_on_a_deleted_lock_file_is_not_trusted() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::new(tmp.path()));
        let h = hash_n(9);
        let first = cache.lock(&h).unwrap();
        let acquired = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let (cache, h, acquired) = (cache.clone(), h.clone(), acquired.clone());
            std::thread::spawn(move || {
                let lock = cache.lock(&h).unwrap();
                acquired.store(1, Ordering::SeqCst);
                drop(lock);
            })
        };
        std::thread::sleep(Duration::from_millis(200)); // the waiter blocks on the old file
        fs::remove_file(&first.path).unwrap(); // what gc does, holding the lock
        let third = cache.lock(&h).unwrap(); // a new builder takes a new file
        drop(first); // the waiter now gets the old, deleted file
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(acquired.load(Ordering::SeqCst), 0, "two holders at once");
        drop(third);
        waiter.join().unwrap();
        assert_eq!(acquired.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn two_threads_build_once() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::new(tmp.path()));
        let h = hash_n(10);
        let builds = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(2));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (cache, h, builds, barrier) =
                    (cache.clone(), h.clone(), builds.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    cache
                        .get_or_build::<CacheError>(
                            &h,
                            || {},
                            |st| {
                                builds.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(Duration::from_millis(300));
                                Ok(write_set(st.path(), &h, 500))
                            },
                        )
                        .unwrap()
                })
            })
            .collect();
        let results: Vec<Obtained> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert_eq!(results.iter().filter(|r| r.built).count(), 1);
        assert_eq!(results[0].artifact.path, results[1].artifact.path);
        assert_eq!(results[0].artifact.manifest, results[1].artifact.manifest);
        assert_eq!(Dataset::open(&results[0].artifact.path).unwrap().len(), 500);
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
    }

    #[test]
    fn failed_build_leaves_nothing_and_a_later_build_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::new(tmp.path());
        let h = hash_n(11);
        let err = cache
            .get_or_build::<CacheError>(
                &h,
                || {},
                |st| {
                    write_set(st.path(), &h, 50);
                    Err(CacheError::Publish {
                        path: st.path().to_path_buf(),
                        reason: "simulated failure".into(),
                    })
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("simulated"));
        assert!(!cache.root().join(&h).exists());
        assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
        let ok = cache
            .get_or_build::<CacheError>(&h, || {}, |st| Ok(write_set(st.path(), &h, 50)))
            .unwrap();
        assert!(ok.built);
        let again = cache
            .get_or_build::<CacheError>(&h, || {}, |_| panic!("must be a cache hit"))
            .unwrap();
        assert!(!again.built && !again.waited);
    }

    /// The whole cache-hit path without DataFusion: fingerprint, hash, build
    /// once; a second run (fresh stat cache from disk) is a hit without
    /// reading the inputs; changing an input gives a new artifact.
    #[test]
    fn fingerprint_hash_build_then_hit() {
        use crate::fingerprint::{SourceFiles, artifact_hash, fingerprint_inputs};
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        fs::create_dir_all(data.join("year=2024")).unwrap();
        let files = [data.join("year=2024/a.csv"), data.join("year=2024/b.csv")];
        for (i, f) in files.iter().enumerate() {
            fs::write(f, format!("x\n{i}\n").repeat(1000)).unwrap();
        }
        let cache = Cache::new(tmp.path().join("cache"));
        let spec = serde_json::json!({"version": 1, "name": "e2e"});
        let sources = [SourceFiles {
            source: "s".into(),
            root: data.clone(),
            files: files.to_vec(),
        }];
        let run = |builds: &AtomicUsize| {
            let mut stat = cache.load_stat_cache();
            stat.set_racy_window(Duration::ZERO);
            let inputs = fingerprint_inputs(&sources, &mut stat).unwrap();
            stat.save().unwrap();
            let hash = artifact_hash(&spec, &inputs, 1, 1);
            let got = cache
                .get_or_build::<CacheError>(
                    &hash,
                    || {},
                    |st| {
                        builds.fetch_add(1, Ordering::SeqCst);
                        let mut m = write_set(st.path(), &hash, 10);
                        m.inputs = crate::fingerprint::manifest_inputs(&inputs);
                        Ok(m)
                    },
                )
                .unwrap();
            (inputs, got)
        };
        let builds = AtomicUsize::new(0);
        let (inputs, first) = run(&builds);
        assert!(first.built && inputs.iter().all(|f| !f.from_stat_cache));
        assert_eq!(inputs[0].rel, "year=2024/a.csv");
        let (inputs, second) = run(&builds);
        assert!(!second.built, "same inputs: a cache hit");
        assert!(
            inputs.iter().all(|f| f.from_stat_cache),
            "no input was read"
        );
        assert_eq!(second.artifact.path, first.artifact.path);
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert_eq!(
            second.artifact.manifest.inputs[1]["path"],
            "year=2024/b.csv"
        );

        fs::write(&files[1], b"x\n42\n").unwrap();
        let (_, third) = run(&builds);
        assert!(third.built);
        assert_ne!(third.artifact.hash, first.artifact.hash);
        assert_eq!(cache.list().unwrap().len(), 2);
    }

    const CHILD_ROOT: &str = "TESSERA_TEST_CHILD_CACHE";
    const CHILD_LOG: &str = "TESSERA_TEST_CHILD_LOG";
    const CHILD_HASH: &str = "TESSERA_TEST_CHILD_HASH";

    /// Not a test by itself: the body of a child process spawned by
    /// `two_processes_build_once`. Does nothing unless the variables are set.
    #[test]
    fn child_builder_process() {
        let (Some(root), Some(log), Some(h)) = (
            std::env::var_os(CHILD_ROOT),
            std::env::var_os(CHILD_LOG),
            std::env::var(CHILD_HASH).ok(),
        ) else {
            return;
        };
        let cache = Cache::new(PathBuf::from(root));
        let got = cache
            .get_or_build::<CacheError>(
                &h,
                || {},
                |st| {
                    use std::io::Write;
                    let mut f = OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&log)
                        .unwrap();
                    writeln!(f, "built by {}", std::process::id()).unwrap();
                    std::thread::sleep(Duration::from_millis(500));
                    Ok(write_set(st.path(), &h, 400))
                },
            )
            .unwrap();
        assert_eq!(got.artifact.manifest.rows, 400);
    }

    #[test]
    fn two_processes_build_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let log = tmp.path().join("builds.log");
        let h = hash_n(12);
        let module = module_path!();
        let test = format!(
            "{}::child_builder_process",
            module.split_once("::").map_or(module, |(_, rest)| rest)
        );
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(&exe)
                    .args([test.as_str(), "--exact", "--test-threads=1"])
                    .env(CHILD_ROOT, &root)
                    .env(CHILD_LOG, &log)
                    .env(CHILD_HASH, &h)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "child failed: {stdout}");
            assert!(stdout.contains("1 passed"), "child ran no test: {stdout}");
        }
        let log = fs::read_to_string(&log).unwrap();
        assert_eq!(log.lines().count(), 1, "{log}");
        let cache = Cache::new(&root);
        let a = cache.lookup(&h).unwrap().unwrap();
        assert_eq!(Dataset::open(&a.path).unwrap().len(), 400);
        assert!(entries_of(&root.join(TMP_DIR)).is_empty());
    }

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
        let dry = cache.gc(Some(1), None, true).unwrap();
        assert_eq!(removed(&dry), sorted(&[&h[0], &h[1], &h[2]]));
        assert_eq!(cache.list().unwrap().len(), 4, "a dry run removes nothing");
        assert!(format_gc_report(&dry, true).contains("would remove 3 artifacts"));

        let r = cache.gc(Some(2), None, false).unwrap();
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
        let r = cache.gc(Some(3), Some(day), true).unwrap();
        assert_eq!(removed(&r), sorted(&[&h[0]]), "the 3 newest are protected");
        let r = cache.gc(None, Some(day), false).unwrap();
        assert_eq!(removed(&r), sorted(&[&h[0], &h[1]]));
        let r = cache.gc(None, None, false).unwrap();
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

        let r = cache.gc(Some(2), None, false).unwrap();
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
        };
        fingerprint_inputs(&[src], &mut stat).unwrap();
        stat.save().unwrap();
        fs::remove_file(&input).unwrap();
        let r = cache.gc(None, None, false).unwrap();
        assert_eq!(r.stat_entries_pruned, 1);
        assert!(cache.load_stat_cache().is_empty());
    }

    #[test]
    fn cache_root_precedence() {
        let os = |s: &str| Some(OsString::from(s));
        let root = |cli: Option<&str>, env, xdg, home| {
            cache_root_from(cli.map(Path::new), env, xdg, home).unwrap()
        };
        assert_eq!(
            root(Some("/a"), os("/b"), os("/x"), os("/h")),
            Path::new("/a")
        );
        assert_eq!(root(None, os("/b"), os("/x"), os("/h")), Path::new("/b"));
        assert_eq!(
            root(None, None, os("/x"), os("/h")),
            Path::new("/x/tessera/artifacts")
        );
        assert_eq!(
            root(None, os(""), os("/x"), os("/h")),
            Path::new("/x/tessera/artifacts")
        );
        assert_eq!(
            root(None, None, os("relative"), os("/h")),
            Path::new("/h/.cache/tessera/artifacts")
        );
        assert!(root(Some("rel"), None, None, None).is_absolute());
        assert!(matches!(
            cache_root_from(None, None, None, os("")),
            Err(CacheError::NoCacheDir)
        ));
    }

    #[test]
    fn ages_and_sizes() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86400)));
        for bad in ["", "d", "7", "7y", "-1d", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_age(Duration::from_secs(59)), "59s");
        assert_eq!(format_age(Duration::from_secs(3 * 86400 + 5)), "3d");
    }

    #[test]
    fn full_disk_errors_name_the_path() {
        let err = io_err(
            Path::new("/dev/full"),
            fs::write("/dev/full", b"x").unwrap_err(),
        );
        assert!(matches!(err, CacheError::DiskFull { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("/dev/full") && msg.contains("no space"),
            "{msg}"
        );
    }

    /// Unmounts on drop, so a failing test leaves no mount behind.
    struct Tmpfs(PathBuf);

    impl Tmpfs {
        /// Mounts a tmpfs of `size` bytes (needs root); `None` if not possible.
        fn mount(at: &Path, size: u64) -> Option<Tmpfs> {
            fs::create_dir_all(at).ok()?;
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(at)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then(|| Tmpfs(at.to_path_buf()))
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }

    /// A real full disk, on a 1 MiB tmpfs: while shards are written, and
    /// while the manifest is written. Either way no artifact appears and the
    /// staging directory is gone. Skipped where mounting is not allowed.
    #[test]
    fn full_disk_leaves_no_artifact() {
        let tmp = tempfile::tempdir().unwrap();
        let Some(mnt) = Tmpfs::mount(&tmp.path().join("mnt"), 1 << 20) else {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            return;
        };
        let cache = Cache::new(&mnt.0);
        let h = hash_n(40);
        let lock = cache.lock(&h).unwrap();

        // 1. The disk fills up while shards are written.
        {
            let staging = lock.stage().unwrap();
            let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::U8, &[4096])]).unwrap();
            let mut w = ShardSetWriter::new(staging.path(), layout, 64 << 10).unwrap();
            w.begin_split("train").unwrap();
            let rec = vec![1u8; 4096];
            let err = (0..1000)
                .find_map(|_| w.write_records(&rec).err())
                .expect("a 4 MB set cannot fit in 1 MiB");
            let err = CacheError::from(err);
            assert!(matches!(err, CacheError::DiskFull { .. }), "{err}");
            assert!(err.to_string().contains("shard-"), "{err}");
        }
        assert!(!mnt.0.join(&h).exists());
        assert!(entries_of(&mnt.0.join(TMP_DIR)).is_empty());

        // 2. The shards fit, but the manifest does not.
        {
            let staging = lock.stage().unwrap();
            let m = write_set(staging.path(), &h, 50);
            let mut filler = File::create(staging.path().join("filler")).unwrap();
            let block = vec![0u8; 4096];
            while io::Write::write_all(&mut filler, &block).is_ok() {}
            drop(filler);
            let err = staging.publish(&m).unwrap_err();
            assert!(matches!(err, CacheError::DiskFull { .. }), "{err}");
            assert!(err.to_string().contains("manifest.json"), "{err}");
        }
        assert!(!mnt.0.join(&h).exists());
        assert!(entries_of(&mnt.0.join(TMP_DIR)).is_empty());

        // Space is back: the same hash builds and publishes.
        let staging = lock.stage().unwrap();
        let m = write_set(staging.path(), &h, 50);
        staging.publish(&m).unwrap();
        drop(lock);
        assert!(cache.lookup(&h).unwrap().is_some());
    }
}
