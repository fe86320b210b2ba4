//! Atomic replacement of a file, and fsyncs.
//!
//! [`AtomicFile`] writes a temporary sibling of the target (see
//! [`temp_sibling`]), fsyncs it and renames it over the target: a reader, a
//! concurrent writer or a crash sees the old file or the new one, never a
//! mix, and a failed write leaves no temporary file behind. The rename is
//! durable once the directory is fsynced ([`sync_dir`]); callers that
//! publish something others rely on (a manifest) do that as well.

use super::temp::{TempPath, temp_sibling};
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A file being written under a temporary name, renamed over its target
/// by [`AtomicFile::commit`]; dropped without a commit, the temporary file
/// is removed.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    temp: TempPath,
    file: File,
}

impl AtomicFile {
    /// Starts replacing `target`: creates a new temporary file beside it.
    /// The directory must exist.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let temp = TempPath::new(temp_sibling(target));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp.path())
            .map_err(|e| Error::io(temp.path(), e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            temp,
            file,
        })
    }

    /// The temporary file's path (what write errors are about).
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// Writes all of `bytes`; an error names the temporary file.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|e| Error::io(self.temp.path(), e))
    }

    /// fsyncs the temporary file and renames it over the target. An error
    /// names the temporary file (fsync) or the target (rename); either way
    /// the temporary file is gone.
    pub fn commit(self) -> Result<()> {
        let AtomicFile { target, temp, file } = self;
        file.sync_all().map_err(|e| Error::io(temp.path(), e))?;
        drop(file);
        std::fs::rename(temp.path(), &target).map_err(|e| Error::io(&target, e))?;
        temp.keep();
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Replaces `path` with `bytes` atomically (temporary sibling, fsync,
/// rename). The directory must exist; it is not fsynced (see [`sync_dir`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Moves the file `from` to `to`: a rename where it can, else (another file
/// system) an atomic copy ([`AtomicFile`]) and the removal of `from`. An
/// error names the file it is about.
pub fn move_file(from: &Path, to: &Path) -> Result<()> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    let mut source = File::open(from).map_err(|e| Error::io(from, e))?;
    let mut copy = AtomicFile::create(to)?;
    io::copy(&mut source, &mut copy.file).map_err(|e| Error::io(copy.temp_path(), e))?;
    copy.commit()?;
    std::fs::remove_file(from).map_err(|e| Error::io(from, e))
}

/// fsyncs a directory so that renames and new entries in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// fsyncs a file written through another handle (or by a copy). Delayed
/// allocation means a full disk can first show up here.
pub fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_whole_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        write_atomic(&p, b"first, and longer").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        assert_eq!(names(d.path()), ["a.json"]);
        sync_dir(d.path()).unwrap();
        sync_file(&p).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_the_old_content() {
        let d = tempfile::tempdir().unwrap();
        // The rename fails: the target is a non-empty directory.
        let target = d.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"old").unwrap();
        let err = write_atomic(&target, b"new").unwrap_err();
        assert!(err.to_string().contains("taken"), "{err}");
        assert_eq!(names(d.path()), ["taken"]);
        assert_eq!(fs::read(target.join("inside")).unwrap(), b"old");

        // Abandoned after writing: dropped without a commit.
        let p = d.path().join("b");
        fs::write(&p, b"old").unwrap();
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"half").unwrap();
        assert!(f.temp_path().exists());
        drop(f);
        assert_eq!(names(d.path()), ["b", "taken"]);
        assert_eq!(fs::read(&p).unwrap(), b"old");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("no").join("such").join("f");
        let err = write_atomic(&p, b"x").unwrap_err();
        assert!(matches!(err, Error::Io { .. }));
        assert!(err.to_string().contains(".f."), "{err}");
        assert!(sync_dir(&d.path().join("no")).is_err());
    }

    #[test]
    fn move_file_renames_or_copies() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        fs::write(&a, b"shard").unwrap();
        move_file(&a, &b).unwrap();
        assert_eq!(fs::read(&b).unwrap(), b"shard");
        assert_eq!(names(d.path()), ["b"]);
        // A missing source is an error naming it, and leaves nothing.
        let err = move_file(&a, &d.path().join("c")).unwrap_err();
        assert!(err.to_string().contains(&*a.to_string_lossy()), "{err}");
        assert_eq!(names(d.path()), ["b"]);
        // Where a rename cannot work (a directory where the target is), the
        // copy is tried and fails cleanly too.
        let blocked = d.path().join("dir");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("x"), b"x").unwrap();
        assert!(move_file(&b, &blocked).is_err());
        assert_eq!(names(d.path()), ["b", "dir"]);
    }

    #[test]
    fn concurrent_writers_never_mix() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("shared");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(p, &[t; 4096]).unwrap();
                    }
                });
            }
        });
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), 4096);
        assert!(got.iter().all(|&b| b == got[0]));
        assert_eq!(names(d.path()), ["shared"]);
    }
}
