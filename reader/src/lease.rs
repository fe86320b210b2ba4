//! Leases: an open shard set is protected from `tessera cache gc`.
//!
//! While a [`Dataset`](crate::Dataset) is open, it holds a shared advisory
//! lock on the set's `manifest.json`. Before deleting an artifact, `gc` takes
//! the same lock exclusively ([`try_exclusive`]) and keeps the artifact if a
//! reader holds it. The operating system drops a lock when its file is
//! closed or its process dies, so a reader that crashes leaves nothing
//! behind: no lease files to clean up, no daemon, no shared memory. Every
//! process that opens the set holds its own lease, PyTorch DataLoader
//! workers included (they open the set themselves).
//!
//! On a filesystem without advisory locks, opening still works, without a
//! lease; `gc` there cannot see readers (and finds no locks to respect).
//! The locking itself, with its identity re-check, is
//! [`crate::durable::lock`].

use crate::durable::{FileLock, LockKind, LockOptions, Locked, NoLocks, lock};
use crate::error::Result;
use crate::manifest::MANIFEST_FILE;
use std::path::Path;

/// A reader's shared hold on a shard set, released when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    _file: Option<FileLock>,
}

/// Exclusive hold on a shard set: no reader has it open, and none can open
/// it until this is dropped (they wait). Taken by `gc` while it deletes.
#[derive(Debug)]
pub struct Exclusive {
    _file: Option<FileLock>,
}

impl Lease {
    /// No lease: for a set that is not a local directory (a set in an object
    /// store, whose local copies the shard cache protects itself).
    #[cfg(feature = "remote")]
    pub(crate) fn none() -> Lease {
        Lease { _file: None }
    }

    /// Takes a shared lease on the set in `dir`. Waits while `gc` holds the
    /// set exclusively; if `gc` deleted it meanwhile, the lease is empty and
    /// opening then fails on the missing manifest, as it should. A missing
    /// manifest gives an empty lease for the same reason.
    pub(crate) fn take(dir: &Path) -> Result<Lease> {
        // `gc` renames an artifact away before deleting it: the lock only
        // counts if the file is still the set's manifest, which `lock`
        // checks.
        let opts = LockOptions::new(LockKind::Shared).no_locks(NoLocks::Unlocked);
        match lock(&dir.join(MANIFEST_FILE), opts)? {
            Locked::Held(l) => Ok(Lease { _file: Some(l) }),
            Locked::Busy | Locked::Missing => Ok(Lease { _file: None }),
        }
    }
}

/// Takes the set in `dir` exclusively if no reader holds a lease on it;
/// `Ok(None)` if one does. A set without a manifest has nothing to lock and
/// is granted.
pub fn try_exclusive(dir: &Path) -> Result<Option<Exclusive>> {
    let opts = LockOptions::new(LockKind::Exclusive)
        .try_only()
        .no_locks(NoLocks::Unlocked);
    match lock(&dir.join(MANIFEST_FILE), opts)? {
        Locked::Held(l) => Ok(Some(Exclusive { _file: Some(l) })),
        Locked::Missing => Ok(Some(Exclusive { _file: None })),
        Locked::Busy => Ok(None),
    }
}

/// Whether a reader holds a lease on the set in `dir` right now.
pub fn in_use(dir: &Path) -> Result<bool> {
    Ok(try_exclusive(dir)?.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Dataset, FieldSpec, RecordLayout, ShardSetWriter};
    use std::fs;

    fn small_set(dir: &Path) {
        let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::U32, &[])]).unwrap();
        let mut w = ShardSetWriter::new(dir, layout, 64 << 10).unwrap();
        w.begin_split("train").unwrap();
        for i in 0..10u32 {
            w.write_records(&i.to_le_bytes()).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn an_open_set_is_leased_until_every_view_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        small_set(tmp.path());
        assert!(!in_use(tmp.path()).unwrap());
        let ds = Dataset::open(tmp.path()).unwrap();
        assert!(in_use(tmp.path()).unwrap());
        let train = ds.split("train").unwrap();
        drop(ds);
        assert!(in_use(tmp.path()).unwrap(), "a split view keeps the lease");
        // A second reader shares the set.
        let other = Dataset::open(tmp.path()).unwrap();
        drop(train);
        assert!(in_use(tmp.path()).unwrap());
        drop(other);
        assert!(!in_use(tmp.path()).unwrap());
    }

    #[test]
    fn readers_wait_for_an_exclusive_hold_and_fail_if_the_set_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let set = tmp.path().join("set");
        fs::create_dir(&set).unwrap();
        small_set(&set);
        let hold = try_exclusive(&set).unwrap().expect("no reader yet");
        let opener = {
            let set = set.clone();
            std::thread::spawn(move || Dataset::open(&set).map(|d| d.len()))
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!opener.is_finished(), "the reader waits for the hold");
        // What gc does while holding: move the set away, then delete it.
        let trash = tmp.path().join("trash");
        fs::rename(&set, &trash).unwrap();
        fs::remove_dir_all(&trash).unwrap();
        drop(hold);
        let err = opener.join().unwrap().unwrap_err();
        assert!(err.to_string().contains(MANIFEST_FILE), "{err}");
        // Without a manifest there is nothing to hold.
        assert!(try_exclusive(&set).unwrap().is_some());
    }
}
