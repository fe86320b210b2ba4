//! The build lock of one hash: `<root>/locks/<hash>.lock`, held with an
//! advisory file lock.
//!
//! Invariants:
//! - At most one holder per hash at any time, across threads and processes;
//!   the operating system releases the lock when its holder dies, so a
//!   crashed build never blocks the next one.
//! - Whoever builds, publishes or deletes `<root>/<hash>` or a staging
//!   directory of that hash holds this lock; `gc` skips what it cannot lock.
//! - `gc` deletes a lock file while holding it. A lock counts only if it is
//!   on the file currently at the lock's path (checked by identity after
//!   locking), so a waiter that opened the old file before its deletion
//!   cannot hold a lock nobody else can see.
//! - Not reentrant: taking the lock of one hash twice in one thread blocks
//!   forever.
//! - A file system without advisory locks is an error: builds could not
//!   exclude each other there.
//!
//! The locking itself is [`tessera_reader::durable::lock`].

use super::{Cache, CacheError, LOCKS_DIR, check_hash, io_err, is_artifact_hash};
use std::fs;
use std::io;
use std::path::PathBuf;
use tessera_reader::durable::{FileLock, LockKind, LockOptions, Locked, lock};

const LOCK_SUFFIX: &str = ".lock";

/// How [`Cache::acquire`] takes a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Acquire {
    /// Wait until the lock is free; create the lock file if needed.
    Wait,
    /// Take it only if it is free now; create the lock file if needed.
    Try,
    /// Take it only if it is free now, but create nothing: a missing lock
    /// file means nobody holds it, and gives a lock without a file. For dry
    /// runs, and for cleaning up lock files.
    Probe,
}

impl Acquire {
    /// [`Acquire::Try`], or [`Acquire::Probe`] for a dry run, which must
    /// create nothing, not even lock files.
    pub(super) fn trying(dry_run: bool) -> Acquire {
        if dry_run {
            Acquire::Probe
        } else {
            Acquire::Try
        }
    }
}

/// The build lock of one hash, held until dropped.
#[derive(Debug)]
pub struct BuildLock {
    cache: Cache,
    hash: String,
    path: PathBuf,
    /// `None` only for a probe of a lock file that does not exist.
    file: Option<FileLock>,
}

/// The hash whose lock file is named `file_name`, if it is one.
pub(super) fn hash_of_lock_file(file_name: &str) -> Option<&str> {
    file_name
        .strip_suffix(LOCK_SUFFIX)
        .filter(|h| is_artifact_hash(h))
}

impl Cache {
    /// Takes the build lock of `hash`, waiting as long as another process or
    /// thread holds it. Released when the [`BuildLock`] is dropped (or the
    /// process dies). Not reentrant: taking it twice in one thread deadlocks.
    pub fn lock(&self, hash: &str) -> Result<BuildLock, CacheError> {
        match self.acquire(hash, Acquire::Wait)? {
            Some(lock) => Ok(lock),
            None => unreachable!("a blocking lock returns only once held"),
        }
    }

    /// Takes the build lock of `hash` if nobody holds it.
    pub fn try_lock(&self, hash: &str) -> Result<Option<BuildLock>, CacheError> {
        self.acquire(hash, Acquire::Try)
    }

    /// Takes the lock of `hash` as `how` says; `None` if it is held and
    /// `how` does not wait.
    pub(super) fn acquire(
        &self,
        hash: &str,
        how: Acquire,
    ) -> Result<Option<BuildLock>, CacheError> {
        check_hash(hash)?;
        let create = how != Acquire::Probe;
        if create {
            self.prepare()?;
        }
        let path = self
            .root
            .join(LOCKS_DIR)
            .join(format!("{hash}{LOCK_SUFFIX}"));
        let build_lock = |file| BuildLock {
            cache: self.clone(),
            hash: hash.to_owned(),
            path: path.clone(),
            file,
        };
        // `gc` deletes lock files while holding them. Whoever opened such a
        // file before its deletion would hold a lock that nobody else can
        // see; `lock` counts only a lock on the file currently at `path`.
        let mut opts = LockOptions::new(LockKind::Exclusive);
        if create {
            opts = opts.create();
        }
        if how != Acquire::Wait {
            opts = opts.try_only();
        }
        Ok(match lock(&path, opts)? {
            Locked::Held(file) => Some(build_lock(Some(file))),
            Locked::Missing => Some(build_lock(None)),
            Locked::Busy => None,
        })
    }
}

impl BuildLock {
    /// The hash this lock is for.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The cache this lock belongs to.
    pub(super) fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Deletes the lock file while still holding it (see the identity check
    /// in [`Cache::acquire`]), then releases the lock.
    pub(super) fn remove_file(self) -> Result<(), CacheError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::test_support::hash_n;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

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
}
