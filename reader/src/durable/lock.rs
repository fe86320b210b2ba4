//! Advisory file locks that count only on the file at their path.
//!
//! A lock is an operating-system advisory lock (`flock` on Unix) on an open
//! file: the system releases it when the file is closed or its process
//! dies, so a crashed holder never blocks anyone. Two rules make such locks
//! safe to combine with deleting and replacing files:
//!
//! - **Identity re-check.** Whoever deletes or replaces a lock's file does
//!   so while holding the lock (the artifact cache's `gc`, the shard cache's
//!   evictor). A process that opened the old file before that and was
//!   waiting on it would then hold a lock nobody else can see. So after
//!   locking, [`lock`] checks that the file is still the one at the path
//!   (same device and inode); if not, it starts over with the file now
//!   there, and reports [`Locked::Missing`] if there is none.
//! - **No locks here.** Some file systems (some network mounts) have no
//!   advisory locks and say so ([`is_no_locks`]). What that means is the
//!   caller's to say ([`NoLocks`]): an error where exclusion is needed to
//!   stay correct, or no lock at all where the lock only protects a
//!   reader's convenience.
//!
//! Locks are not reentrant across handles: a second exclusive lock on the
//! same file from the same process, through another open, is refused (or
//! waits forever).

use crate::error::{Error, Result};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::Path;

/// Shared (many holders, e.g. readers) or exclusive (one holder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// Many holders at once; excludes an exclusive holder.
    Shared,
    /// One holder; excludes every other.
    Exclusive,
}

/// What a file system without advisory locks gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoLocks {
    /// An error naming the file: the caller cannot stay correct without
    /// the lock.
    Fail,
    /// The file, open but not locked ([`FileLock::is_locked`] is false).
    Unlocked,
}

/// How [`lock`] opens and locks a file.
#[derive(Clone, Copy, Debug)]
pub struct LockOptions {
    /// Shared or exclusive.
    pub kind: LockKind,
    /// Wait while another holder has a conflicting lock; otherwise give up
    /// at once with [`Locked::Busy`].
    pub wait: bool,
    /// Create the file if it is missing (then it is opened for reading and
    /// writing); otherwise a missing file is [`Locked::Missing`] and the
    /// file is opened read-only.
    pub create: bool,
    /// With `create`: the file must not exist yet (an existing one is an
    /// error).
    pub create_new: bool,
    /// What a file system without advisory locks gives.
    pub no_locks: NoLocks,
}

impl LockOptions {
    /// A lock of `kind` on an existing file, waiting for it, failing where
    /// there are no locks.
    pub fn new(kind: LockKind) -> LockOptions {
        LockOptions {
            kind,
            wait: true,
            create: false,
            create_new: false,
            no_locks: NoLocks::Fail,
        }
    }

    /// Gives up at once instead of waiting when the lock is held.
    pub fn try_only(self) -> LockOptions {
        LockOptions {
            wait: false,
            ..self
        }
    }

    /// Creates the file if it is missing.
    pub fn create(self) -> LockOptions {
        LockOptions {
            create: true,
            ..self
        }
    }

    /// Creates the file, which must not exist yet.
    pub fn create_new(self) -> LockOptions {
        LockOptions {
            create: true,
            create_new: true,
            ..self
        }
    }

    /// Sets what a file system without advisory locks gives.
    pub fn no_locks(self, no_locks: NoLocks) -> LockOptions {
        LockOptions { no_locks, ..self }
    }
}

/// A locked file, released when dropped (or when its process dies).
#[derive(Debug)]
pub struct FileLock {
    file: File,
    locked: bool,
}

impl FileLock {
    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file, still locked while it stays open.
    pub fn into_file(self) -> File {
        self.file
    }

    /// False only under [`NoLocks::Unlocked`] on a file system without
    /// advisory locks.
    pub fn is_locked(&self) -> bool {
        self.locked
    }
}

/// What [`lock`] got.
#[derive(Debug)]
pub enum Locked {
    /// The lock, on the file that is at the path now.
    Held(FileLock),
    /// Another holder has a conflicting lock (only without `wait`).
    Busy,
    /// No file is at the path (only without `create`).
    Missing,
}

/// Whether a locking error means the file system has no advisory locks
/// (`ENOLCK`, `EOPNOTSUPP` or an unsupported operation).
pub fn is_no_locks(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Unsupported
        || (cfg!(target_os = "linux") && matches!(e.raw_os_error(), Some(37 | 95)))
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &fs::Metadata, _: &fs::Metadata) -> bool {
    true
}

#[cfg(test)]
thread_local! {
    /// Tests: locking fails as on a file system without advisory locks.
    static FORCE_NO_LOCKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The operating system's answer to a lock request: `Ok(false)` when a
/// non-waiting request finds the lock held.
fn request(file: &File, kind: LockKind, wait: bool) -> io::Result<bool> {
    #[cfg(test)]
    if FORCE_NO_LOCKS.with(|f| f.get()) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no locks (test)",
        ));
    }
    let tried = match (kind, wait) {
        (LockKind::Shared, true) => return file.lock_shared().map(|()| true),
        (LockKind::Exclusive, true) => return file.lock().map(|()| true),
        (LockKind::Shared, false) => file.try_lock_shared(),
        (LockKind::Exclusive, false) => file.try_lock(),
    };
    match tried {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Opens the file at `path` and locks it as `opts` say (see the module
/// documentation for the identity re-check and [`NoLocks`]).
pub fn lock(path: &Path, opts: LockOptions) -> Result<Locked> {
    loop {
        let mut open = OpenOptions::new();
        open.read(true);
        if opts.create {
            open.write(true).truncate(false);
            if opts.create_new {
                open.create_new(true);
            } else {
                open.create(true);
            }
        }
        let file = match open.open(path) {
            Ok(f) => f,
            Err(e) if !opts.create && e.kind() == io::ErrorKind::NotFound => {
                return Ok(Locked::Missing);
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let locked = match request(&file, opts.kind, opts.wait) {
            Ok(true) => true,
            Ok(false) => return Ok(Locked::Busy),
            Err(e) if is_no_locks(&e) && opts.no_locks == NoLocks::Unlocked => false,
            Err(e) => return Err(Error::io(path, e)),
        };
        let held = file.metadata().map_err(|e| Error::io(path, e))?;
        match fs::metadata(path) {
            Ok(now) if same_file(&held, &now) => {
                return Ok(Locked::Held(FileLock { file, locked }));
            }
            // Replaced or removed while we waited: start over with the
            // file at the path now, if any.
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
}

/// Turns an exclusive lock on `file` (at `path`, for errors) into a shared
/// one, without a moment unlocked on Linux.
pub fn share(file: &File, path: &Path) -> Result<()> {
    file.lock_shared().map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn held(l: Locked) -> FileLock {
        match l {
            Locked::Held(f) => f,
            other => panic!("expected the lock, got {other:?}"),
        }
    }

    #[test]
    fn a_lock_held_by_another_handle_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.lock");
        let ex = LockOptions::new(LockKind::Exclusive).create();
        let first = held(lock(&p, ex).unwrap());
        assert!(first.is_locked());
        assert!(matches!(lock(&p, ex.try_only()).unwrap(), Locked::Busy));
        let sh = LockOptions::new(LockKind::Shared).try_only();
        assert!(matches!(lock(&p, sh).unwrap(), Locked::Busy));
        drop(first);
        // Readers share; a writer is refused while one reads.
        let r1 = held(lock(&p, sh).unwrap());
        let r2 = held(lock(&p, sh).unwrap());
        assert!(matches!(lock(&p, ex.try_only()).unwrap(), Locked::Busy));
        drop((r1, r2));
        held(lock(&p, ex.try_only()).unwrap());
    }

    #[test]
    fn a_missing_file_is_missing_unless_created() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("absent");
        let opts = LockOptions::new(LockKind::Exclusive);
        assert!(matches!(lock(&p, opts).unwrap(), Locked::Missing));
        assert!(!p.exists(), "a probe creates nothing");
        held(lock(&p, opts.create_new()).unwrap());
        let err = lock(&p, opts.create_new()).unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
    }

    #[test]
    fn an_exclusive_lock_becomes_shared() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s");
        let ex = LockOptions::new(LockKind::Exclusive).create();
        let w = held(lock(&p, ex).unwrap());
        let sh = LockOptions::new(LockKind::Shared).try_only();
        assert!(matches!(lock(&p, sh).unwrap(), Locked::Busy));
        share(w.file(), &p).unwrap();
        held(lock(&p, sh).unwrap());
        assert!(matches!(lock(&p, ex.try_only()).unwrap(), Locked::Busy));
    }

    /// A file deleted by its lock holder: a waiter that opened it before
    /// must not count the lock it then gets, or two would hold at once.
    #[test]
    fn a_lock_on_a_deleted_file_is_not_trusted() {
        let d = tempfile::tempdir().unwrap();
        let p = Arc::new(d.path().join("h.lock"));
        let ex = LockOptions::new(LockKind::Exclusive).create();
        let first = held(lock(&p, ex).unwrap());
        let acquired = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let (p, acquired) = (p.clone(), acquired.clone());
            std::thread::spawn(move || {
                let l = held(lock(&p, ex).unwrap());
                acquired.store(1, Ordering::SeqCst);
                drop(l);
            })
        };
        std::thread::sleep(Duration::from_millis(200)); // it waits on the old file
        fs::remove_file(&*p).unwrap();
        let third = held(lock(&p, ex).unwrap()); // a new file
        drop(first); // the waiter now gets the deleted file
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(acquired.load(Ordering::SeqCst), 0, "two holders at once");
        drop(third);
        waiter.join().unwrap();
        assert_eq!(acquired.load(Ordering::SeqCst), 1);

        // Without `create`, a file removed while waiting is missing.
        let holder = held(lock(&p, ex).unwrap());
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || lock(&p, LockOptions::new(LockKind::Shared)).unwrap())
        };
        std::thread::sleep(Duration::from_millis(200));
        fs::remove_file(&*p).unwrap();
        drop(holder);
        assert!(matches!(reader.join().unwrap(), Locked::Missing));
    }

    #[test]
    fn no_locks_here_is_an_error_or_an_unlocked_file_as_asked() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m");
        fs::write(&p, b"{}").unwrap();
        FORCE_NO_LOCKS.with(|f| f.set(true));
        let opts = LockOptions::new(LockKind::Shared);
        let err = lock(&p, opts).unwrap_err();
        assert!(err.to_string().contains("no locks"), "{err}");
        let l = held(lock(&p, opts.no_locks(NoLocks::Unlocked)).unwrap());
        assert!(!l.is_locked());
        let ex = LockOptions::new(LockKind::Exclusive).try_only();
        assert!(!held(lock(&p, ex.no_locks(NoLocks::Unlocked)).unwrap()).is_locked());
        assert!(lock(&p, ex).is_err());
        FORCE_NO_LOCKS.with(|f| f.set(false));
        assert!(held(lock(&p, opts).unwrap()).is_locked());
    }

    #[test]
    fn no_locks_errors_are_recognized() {
        assert!(is_no_locks(&io::Error::from(io::ErrorKind::Unsupported)));
        assert!(!is_no_locks(&io::Error::from(
            io::ErrorKind::PermissionDenied
        )));
        if cfg!(target_os = "linux") {
            assert!(is_no_locks(&io::Error::from_raw_os_error(37))); // ENOLCK
            assert!(is_no_locks(&io::Error::from_raw_os_error(95))); // EOPNOTSUPP
            assert!(!is_no_locks(&io::Error::from_raw_os_error(11))); // EAGAIN
        }
    }
}
