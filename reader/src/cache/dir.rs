//! The shard cache directory on disk: file names, locks, and the usage
//! scan. Policy (what to evict) lives in `shards/admit.rs`; this module only
//! knows the protocol that lets several processes share the directory.
//!
//! - `<hash>.shard`: a verified shard. A process that maps it holds a
//!   shared `flock` on it for as long as the map lives.
//! - `<hash>.part`: a shard being written, exclusively locked by its writer
//!   (shared once written); unlocked means its writer died, and it is stale.
//! - `.lock`: held exclusively while a process checks the usage, evicts and
//!   reserves room for a new `.part` (created at its full size, so that it
//!   counts against the budget from the start).
//! - `CACHEDIR.TAG`: marks the directory as a cache for backup tools.
//!
//! Only names of the form `<64 hex digits>.shard` or `.part` are ever
//! deleted. Every lock is taken through [`crate::durable::lock`], which
//! re-checks that the locked file is still the one at its path; a file
//! system without advisory locks is an error here (the cache's protocol
//! needs them).

use crate::durable::{LockKind, LockOptions, Locked, is_hex_digest, lock, share};
use crate::error::{Error, Result};
use memmap2::Mmap;
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What the cache directory tag says of a shard cache.
const TAG_COMMENT: &str = "# This directory is a tessera shard cache; its files are copies of shards\n\
# and can be removed when no process is reading them.\n";

/// A cache directory.
#[derive(Debug)]
pub(crate) struct CacheDir {
    root: PathBuf,
}

/// One file found by [`CacheDir::scan`].
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) part: bool,
    pub(crate) bytes: u64,
    pub(crate) mtime: SystemTime,
}

/// A cached shard opened for reading: the map and the file whose shared
/// lock marks it in use.
#[derive(Debug)]
pub(crate) struct Resident {
    pub(crate) map: Mmap,
    _file: File,
}

/// What the cache directory holds for a shard.
pub(crate) enum Claim {
    /// The shard is cached: here it is, mapped and locked in use.
    Present(Resident),
    /// Another process (or thread) is writing it.
    InFlight,
    /// Neither: it is for the caller to reserve and write.
    Absent,
}

impl CacheDir {
    pub(crate) fn open(root: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        // Best effort: a read-only cache still works for reading.
        crate::durable::tag_cache_dir(&root, TAG_COMMENT);
        Ok(CacheDir { root })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn final_path(&self, key: &str) -> PathBuf {
        self.root.join(format!("{key}.shard"))
    }

    fn part_path(&self, key: &str) -> PathBuf {
        self.root.join(format!("{key}.part"))
    }

    /// Takes the directory's admission lock (blocking); released on drop.
    pub(crate) fn lock(&self) -> Result<File> {
        let path = self.root.join(".lock");
        held(
            &path,
            lock(&path, LockOptions::new(LockKind::Exclusive).create())?,
        )
    }

    /// Every cached or partial shard file, with its size.
    pub(crate) fn scan(&self) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let rd = std::fs::read_dir(&self.root).map_err(|e| Error::io(&self.root, e))?;
        for entry in rd.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((key, part)) = parse_name(name) else {
                continue;
            };
            // A file removed since the listing is simply not counted.
            let Ok(md) = entry.metadata() else { continue };
            out.push(Entry {
                key: key.to_owned(),
                part,
                bytes: md.len(),
                mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        Ok(out)
    }

    /// Opens `<key>.shard` for reading if it is there with `bytes` bytes:
    /// mapped, and locked in use. Must be called with the admission lock
    /// held or not at all during an eviction of that key (see `remove`).
    pub(crate) fn open_cached(&self, key: &str, bytes: u64) -> Result<Option<Resident>> {
        let path = self.final_path(key);
        // An evictor may unlink the file between our open and our lock:
        // `lock` then finds the name pointing elsewhere (or nowhere).
        let file = match lock(&path, LockOptions::new(LockKind::Shared))? {
            Locked::Held(l) => l.into_file(),
            Locked::Busy | Locked::Missing => return Ok(None),
        };
        let md = file.metadata().map_err(|e| Error::io(&path, e))?;
        if md.len() != bytes {
            return Err(Error::cache(
                &self.root,
                format!(
                    "{} is {} bytes but the shard it names has {bytes}; remove it",
                    path.display(),
                    md.len()
                ),
            ));
        }
        // SAFETY: cached shard files are immutable once renamed into place
        // (written and fsynced as `.part` first, never modified after), and
        // a file is only ever unlinked, never truncated, by an evictor that
        // holds an exclusive lock, which our shared lock excludes while the
        // map lives. Accesses go through bounds-checked slices.
        // `populate` faults the whole shard in with the map, once, rather
        // than a page at a time under the gather loop.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
            .map_err(|e| Error::io(&path, e))?;
        Ok(Some(Resident { map, _file: file }))
    }

    /// With the admission lock held: the shard if cached, `InFlight` if a
    /// live writer has its `.part`, else `Absent` (a stale `.part`, whose
    /// writer died, is removed).
    pub(crate) fn look(&self, key: &str, bytes: u64) -> Result<Claim> {
        if let Some(r) = self.open_cached(key, bytes)? {
            return Ok(Claim::Present(r));
        }
        if self.remove_if_unused(&self.part_path(key))? {
            Ok(Claim::Absent)
        } else {
            Ok(Claim::InFlight)
        }
    }

    /// With the admission lock held and room made: a new `.part` of `bytes`
    /// bytes for `key`, exclusively locked, counting against the budget
    /// from now on.
    pub(crate) fn reserve(&self, key: &str, bytes: u64) -> Result<File> {
        let part = self.part_path(key);
        let opts = LockOptions::new(LockKind::Exclusive).create_new();
        let f = held(&part, lock(&part, opts)?)?;
        f.set_len(bytes).map_err(|e| Error::io(&part, e))?;
        Ok(f)
    }

    /// Publishes a written, verified `.part`: its lock becomes shared (in
    /// use by us), then it is renamed to `<key>.shard` and mapped.
    pub(crate) fn publish(&self, key: &str, file: File) -> Result<Resident> {
        let part = self.part_path(key);
        let path = self.final_path(key);
        share(&file, &part)?;
        std::fs::rename(&part, &path).map_err(|e| Error::io(&path, e))?;
        // SAFETY: as in `open_cached`: the file was fully written and
        // fsynced by us, is never modified again, and our shared lock keeps
        // evictors away while the map lives.
        // `populate` faults the whole shard in with the map, once, rather
        // than a page at a time under the gather loop.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
            .map_err(|e| Error::io(&path, e))?;
        Ok(Resident { map, _file: file })
    }

    /// Removes our own `.part` after a failed write.
    pub(crate) fn abandon(&self, key: &str, file: File) {
        let _ = std::fs::remove_file(self.part_path(key));
        drop(file);
    }

    /// Removes a cached or stale partial file if no process has it locked;
    /// `Ok(false)` when one does.
    pub(crate) fn remove_if_unused(&self, path: &Path) -> Result<bool> {
        let _held = match lock(path, LockOptions::new(LockKind::Exclusive).try_only())? {
            Locked::Held(l) => l,
            Locked::Missing => return Ok(true),
            Locked::Busy => return Ok(false),
        };
        match std::fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// The path of an entry found by `scan`.
    pub(crate) fn entry_path(&self, e: &Entry) -> PathBuf {
        if e.part {
            self.part_path(&e.key)
        } else {
            self.final_path(&e.key)
        }
    }
}

/// `(<hash>, is_part)` for a cache file name, `None` for anything else.
fn parse_name(name: &str) -> Option<(&str, bool)> {
    let (key, part) = if let Some(k) = name.strip_suffix(".shard") {
        (k, false)
    } else {
        (name.strip_suffix(".part")?, true)
    };
    is_hex_digest(key).then_some((key, part))
}

/// The file of a lock that waits and creates its file, so it can be
/// neither busy nor missing.
fn held(path: &Path, l: Locked) -> Result<File> {
    match l {
        Locked::Held(l) => Ok(l.into_file()),
        Locked::Busy | Locked::Missing => Err(Error::cache(path, "the lock file vanished")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cache_names_are_ours() {
        let k = "ab".repeat(32);
        assert_eq!(parse_name(&format!("{k}.shard")), Some((k.as_str(), false)));
        assert_eq!(parse_name(&format!("{k}.part")), Some((k.as_str(), true)));
        assert_eq!(parse_name("manifest.json"), None);
        assert_eq!(parse_name(&format!("{}.shard", "AB".repeat(32))), None);
        assert_eq!(parse_name(".lock"), None);
    }

    #[test]
    fn claim_publish_and_in_use_protection() {
        let d = tempfile::tempdir().unwrap();
        let dir = CacheDir::open(d.path().join("c")).unwrap();
        let key = "cd".repeat(32);
        assert!(matches!(dir.look(&key, 10).unwrap(), Claim::Absent));
        let f = dir.reserve(&key, 10).unwrap();
        // The reservation counts at full size; a second claimant waits.
        assert_eq!(dir.scan().unwrap()[0].bytes, 10);
        assert!(dir.scan().unwrap()[0].part);
        assert!(matches!(dir.look(&key, 10).unwrap(), Claim::InFlight));
        use std::io::Write;
        (&f).write_all(b"0123456789").unwrap();
        let r = dir.publish(&key, f).unwrap();
        assert_eq!(&r.map[..], b"0123456789");
        let path = dir.final_path(&key);
        // Mapped (shared lock): cannot be removed.
        assert!(!dir.remove_if_unused(&path).unwrap());
        let Claim::Present(again) = dir.look(&key, 10).unwrap() else {
            panic!("expected the cached copy")
        };
        drop(r);
        drop(again);
        assert!(dir.remove_if_unused(&path).unwrap());
        assert!(!path.exists());
        // A stale part (its writer gone: the lock died with the file handle)
        // is replaced by a new reservation.
        let f = dir.reserve(&key, 4).unwrap();
        drop(f);
        assert!(matches!(dir.look(&key, 4).unwrap(), Claim::Absent));
        assert!(dir.reserve(&key, 4).is_ok());
        // Files that are not cache files are never touched by a scan.
        std::fs::write(d.path().join("c").join("notes.txt"), "x").unwrap();
        assert!(dir.scan().unwrap().iter().all(|e| e.key == key));
    }
}
