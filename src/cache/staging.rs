//! Staging directories and the atomic publish.
//!
//! A build writes into `<root>/tmp/<hash>.<pid>.<unique>/`, under the build
//! lock of its hash; [`Staging::publish`] makes it the artifact.
//!
//! Invariants:
//! - Atomic publish: `<root>/<hash>` appears only by one rename of a
//!   complete directory, after every shard was checked against the manifest
//!   and fsynced and the manifest written last, and the root is fsynced
//!   after the rename. Readers see the whole artifact or none, whatever
//!   crashes or fills up.
//! - A staging directory dropped without being published is deleted; a
//!   failed or panicking build leaves no trace (`gc` removes the directories
//!   of processes that died).
//! - A sound artifact already at `<root>/<hash>` is never replaced (it is
//!   returned instead); an unsound one is moved away whole, then replaced.

use super::lookup::{Inspection, inspect, touch};
use super::{Artifact, BuildLock, CacheError, io_err};
use std::fs;
use std::path::{Path, PathBuf};
use tessera_reader::Manifest;
use tessera_reader::durable::{sync_dir, sync_file, unique_suffix};

/// A directory where one build writes its artifact. Dropped without
/// [`Staging::publish`], it is deleted, leaving no trace in the cache.
#[derive(Debug)]
pub struct Staging<'l> {
    lock: &'l BuildLock,
    dir: PathBuf,
    published: bool,
}

impl BuildLock {
    /// A new, empty staging directory for this hash under `<root>/tmp/`.
    pub fn stage(&self) -> Result<Staging<'_>, CacheError> {
        let tmp = self.cache().tmp_dir();
        fs::create_dir_all(&tmp).map_err(|e| io_err(&tmp, e))?;
        let dir = tmp.join(format!("{}.{}", self.hash(), unique_suffix()));
        fs::create_dir(&dir).map_err(|e| io_err(&dir, e))?;
        crate::fault::point("stage.created");
        Ok(Staging {
            lock: self,
            dir,
            published: false,
        })
    }
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
            sync_file(&path)?;
        }
    }
    Ok(sync_dir(dir)?)
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
        let hash = self.lock.hash();
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
            if len != s.file_bytes() {
                return Err(CacheError::Publish {
                    path,
                    reason: format!("shard is {len} bytes, the manifest says {}", s.file_bytes()),
                });
            }
        }
        crate::fault::point("publish.checked");
        sync_tree(&self.dir)?;
        crate::fault::point("publish.synced");
        tessera_reader::write_manifest(&self.dir, manifest)?;
        crate::fault::point("publish.manifest-written");

        let cache = self.lock.cache();
        let target = cache.root.join(hash);
        match inspect(&target, hash) {
            Inspection::Missing => {}
            Inspection::Valid(existing) => {
                return Ok(Artifact {
                    hash: hash.to_owned(),
                    path: target,
                    manifest: *existing,
                });
            }
            // A newer format under this hash cannot be: the format version is
            // part of the hash. Whatever it is, it is not this artifact.
            Inspection::Invalid(_) | Inspection::Newer(_) => {
                cache.discard_artifact_dir(&target, hash, "invalid")?
            }
        }
        fs::rename(&self.dir, &target).map_err(|e| io_err(&target, e))?;
        self.published = true;
        crate::fault::point("publish.renamed");
        sync_dir(&cache.root)?;
        sync_dir(&cache.tmp_dir())?;
        touch(&target);
        crate::fault::point("publish.done");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::test_support::{entries_of, hash_n, publish_new, write_set};
    use crate::cache::{Cache, TMP_DIR};
    use std::fs::File;
    use std::io;
    use std::process::{Command, Stdio};
    use tessera_reader::durable::CACHEDIR_TAG;
    use tessera_reader::{DType, Dataset, FieldSpec, MANIFEST_FILE, RecordLayout, ShardSetWriter};

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
    /// staging directory is gone. Fails where mounting is not allowed: a
    /// full disk cannot be checked without one.
    #[test]
    fn full_disk_leaves_no_artifact() {
        let tmp = tempfile::tempdir().unwrap();
        let Some(mnt) = Tmpfs::mount(&tmp.path().join("mnt"), 1 << 20) else {
            panic!(
                "cannot mount a 1 MiB tmpfs here (needs root or CAP_SYS_ADMIN): \
                 this test checks a real full disk and cannot run without one"
            );
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
