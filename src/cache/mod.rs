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
//!
//! The parts, one file each:
//! - `lookup`: what makes a published artifact sound, finding one, and
//!   [`Cache::get_or_build`], the lookup-lock-build path builds go through;
//! - `lock`: the per-hash build lock ([`BuildLock`]);
//! - `staging`: staging directories and the atomic publish ([`Staging`]);
//! - `gc`: listing the cache and removing old artifacts and debris;
//! - `report`: the text `tessera cache` prints, sizes and ages.
//!
//! This file holds the [`Cache`] type, where its root comes from, the error
//! type, and what the parts share: hash checking and removal of a directory
//! that must never be seen half deleted. The invariant all of them keep:
//! only artifact hashes (64 lowercase hex digits) are ever joined to the
//! root, so no name given to the cache can reach outside it.

mod gc;
mod lock;
mod lookup;
mod report;
mod staging;
#[cfg(test)]
mod test_support;

pub use gc::{CacheEntry, GcReport};
pub use lock::BuildLock;
pub use lookup::Obtained;
pub use report::{
    format_age, format_bytes, format_gc_report, format_listing, format_listing_at, parse_age,
};
pub use staging::Staging;

use crate::fingerprint::{STAT_CACHE_FILE, StatCache};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use tessera_reader::Manifest;
use tessera_reader::durable::{is_hex_digest, unique_suffix};

/// Environment variable naming the cache root (below `--cache-dir`).
pub const CACHE_DIR_ENV: &str = "TESSERA_CACHE_DIR";

const LOCKS_DIR: &str = "locks";
const TMP_DIR: &str = "tmp";
/// What the cache directory tag says of an artifact cache.
const CACHEDIR_TAG_COMMENT: &str = "# This file is a cache directory tag created by tessera.\n\
# For information about cache directory tags see https://bford.info/cachedir/\n";

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

/// An I/O error on `path`; a full disk or quota gets its own variant, whose
/// message says what to do.
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
    is_hex_digest(s)
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

/// Removes a file or a whole directory; one that is already gone is fine.
fn remove_path(path: &Path) -> Result<(), CacheError> {
    Ok(tessera_reader::durable::remove_all(path)?)
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

    /// Where staging directories (and directories on their way out) live.
    fn tmp_dir(&self) -> PathBuf {
        self.root.join(TMP_DIR)
    }

    /// Creates the directories a build needs, and the cache directory tag.
    fn prepare(&self) -> Result<(), CacheError> {
        for dir in [self.root.join(LOCKS_DIR), self.tmp_dir()] {
            fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        }
        // Only a courtesy to backup tools; failing to write it is harmless.
        tessera_reader::durable::tag_cache_dir(&self.root, CACHEDIR_TAG_COMMENT);
        Ok(())
    }

    /// Deletes the artifact directory `<root>/<hash>` (`dir`), renaming it
    /// into `tmp/` first so that `<root>/<hash>` is either the whole artifact
    /// or absent, never half deleted. The caller holds the lock of `hash`;
    /// the new name starts with the hash, so if the removal is cut short,
    /// `gc` finds the rest as debris of that hash. `why` goes into the name.
    fn discard_artifact_dir(&self, dir: &Path, hash: &str, why: &str) -> Result<(), CacheError> {
        let trash = self
            .tmp_dir()
            .join(format!("{hash}.{why}.{}", unique_suffix()));
        fs::rename(dir, &trash).map_err(|e| io_err(dir, e))?;
        crate::fault::point("cache.discard-renamed");
        remove_path(&trash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
