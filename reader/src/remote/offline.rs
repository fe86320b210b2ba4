//! Reading a set from an object store that cannot be reached, once its data
//! is local: every successful open keeps a copy of the set's manifest in the
//! shard cache (`manifests/<blake3 of the URL>.json`), and an open whose
//! manifest request fails (the store is down, the network is cut, the
//! credentials expired) falls back on that copy, under the rule of
//! [`recall`]. A manifest the store says is not there (404) is never
//! replaced by a copy: the set was removed, or never pushed.

use crate::durable::{hash_reader, hex, write_atomic};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use std::path::{Path, PathBuf};

/// Where the copy of `url`'s manifest is kept under the cache root.
fn copy_path(cache_root: &Path, url: &str) -> PathBuf {
    let key = hex(blake3::hash(url.trim_end_matches('/').as_bytes()).as_bytes());
    cache_root.join("manifests").join(format!("{key}.json"))
}

/// Keeps `bytes`, the manifest just read from `url`, for a later open that
/// cannot reach the store. Atomic (a unique temporary file renamed into
/// place), so concurrent opens and a crash leave the old copy or the new
/// one. Best effort: a cache directory that cannot be written only loses
/// the fallback.
pub(crate) fn remember(cache_root: &Path, url: &str, bytes: &[u8]) {
    let path = copy_path(cache_root, url);
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return;
    }
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_ok() {
        // Losing the copy only loses the fallback.
        let _ = write_atomic(&path, bytes);
    }
}

/// The manifest kept for `url`, if it may stand in for the store's. The
/// rule: a copy saved by an earlier open of this very URL, that parses, and
/// every one of whose shards is in the cache directory as `<blake3>.shard`
/// with its size and, read again now, that blake3. Then the reader never
/// needs the store for this set (the cache only fetches what it lacks).
/// The set's other files (vocabularies beside the manifest) are not
/// checked: the reader does not read them from a URL.
pub(crate) fn recall(cache_root: &Path, url: &str) -> Result<Manifest> {
    let path = copy_path(cache_root, url);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::cache(
                cache_root,
                "no manifest of this URL was kept (it was never opened with this shard cache)",
            ));
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    let manifest = Manifest::parse(&bytes, &path)?;
    for s in &manifest.shards {
        let shard = cache_root.join(format!("{}.shard", s.blake3));
        let missing = || {
            Error::cache(
                cache_root,
                format!("shard {} of the set is not in the cache", s.file),
            )
        };
        let mut f = match std::fs::File::open(&shard) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(Error::io(&shard, e)),
        };
        let size = f.metadata().map_err(|e| Error::io(&shard, e))?.len();
        if size != s.bytes {
            return Err(missing());
        }
        let actual = hash_reader(&mut f).map_err(|e| Error::io(&shard, e))?;
        if actual != s.blake3 {
            return Err(Error::Checksum {
                path: shard,
                expected: s.blake3.clone(),
                actual,
            });
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_kept_per_url_and_replaced_atomically() {
        let d = tempfile::tempdir().unwrap();
        remember(d.path(), "s3://b/set/", b"one");
        assert_eq!(
            std::fs::read(copy_path(d.path(), "s3://b/set")).unwrap(),
            b"one"
        );
        remember(d.path(), "s3://b/set", b"two");
        assert_eq!(
            std::fs::read(copy_path(d.path(), "s3://b/set")).unwrap(),
            b"two"
        );
        assert_ne!(
            copy_path(d.path(), "s3://b/set"),
            copy_path(d.path(), "s3://b/other")
        );
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(d.path().join("manifests"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let e = recall(d.path(), "s3://b/nothing").unwrap_err().to_string();
        assert!(e.contains("never opened"), "{e}");
    }
}
