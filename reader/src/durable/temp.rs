//! Temporary names and their clean-up.
//!
//! A temporary name is the name it stands for plus [`unique_suffix`]: the
//! process id, the time in nanoseconds and a per-process counter, so two
//! processes (or two threads, or a retry racing a straggler) never pick the
//! same one. The name it stands for comes first, so whoever cleans up after
//! a crashed process can tell what a leftover was (`gc` reads the artifact
//! hash of a staging directory from the front of its name).
//!
//! A temporary file or directory is removed by [`TempPath`] when it is
//! dropped without being kept: the error paths of the work that made it
//! need no clean-up code of their own. What a killed process leaves behind
//! is for the owner of the directory to sweep (the artifact cache's `gc`).

use crate::error::{Error, Result};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A name part that no other call returns, in this process or another:
/// `<pid>.<time in ns, hex>-<counter>`.
pub fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}.{t:x}-{n}", std::process::id())
}

/// A new temporary name beside `path`: `.<file name>.<unique>.tmp` in the
/// same directory (a rename from it to `path` is then atomic).
pub fn temp_sibling(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new(""));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(".{name}.{}.tmp", unique_suffix()))
}

/// Removes a file, or a directory with everything in it; a path that is
/// already gone is fine. A symbolic link is removed, not followed.
pub fn remove_all(path: &Path) -> Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

/// A temporary file or directory, removed (whole) when dropped unless
/// [`TempPath::keep`] was called: the work that made it failed or was
/// abandoned.
#[derive(Debug)]
pub struct TempPath {
    path: PathBuf,
    keep: bool,
}

impl TempPath {
    /// Takes charge of `path` (which need not exist yet).
    pub fn new(path: PathBuf) -> TempPath {
        TempPath { path, keep: false }
    }

    /// A new, empty directory under a unique name beside `path` (see
    /// [`temp_sibling`]), removed when dropped.
    pub fn create_dir_beside(path: &Path) -> Result<TempPath> {
        let tmp = TempPath::new(temp_sibling(path));
        fs::create_dir(&tmp.path).map_err(|e| Error::io(&tmp.path, e))?;
        Ok(tmp)
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the path: it is not removed on drop (it was renamed into
    /// place, or handed over to someone else).
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        std::mem::take(&mut self.path)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: what is left is debris for the directory's owner.
            let _ = remove_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn unique_suffixes_differ_across_threads() {
        let all: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..1000).map(|_| unique_suffix()).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let distinct: HashSet<&String> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        let pid = format!("{}.", std::process::id());
        assert!(all.iter().all(|s| s.starts_with(&pid)), "{}", all[0]);
    }

    #[test]
    fn temp_siblings_are_hidden_names_in_the_same_directory() {
        let p = Path::new("/some/dir/manifest.json");
        let (a, b) = (temp_sibling(p), temp_sibling(p));
        assert_ne!(a, b);
        assert_eq!(a.parent(), p.parent());
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(".manifest.json.") && name.ends_with(".tmp"),
            "{name}"
        );
    }

    #[test]
    fn temp_paths_are_removed_unless_kept() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("out");
        let dir = TempPath::create_dir_beside(&target).unwrap();
        fs::write(dir.path().join("a"), b"x").unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("sub").join("b"), b"y").unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());

        let file = TempPath::new(d.path().join("f.tmp"));
        fs::write(file.path(), b"z").unwrap();
        let kept = file.keep();
        assert!(kept.exists());

        // A path that never came to be is fine to drop.
        drop(TempPath::new(d.path().join("never")));
        let left: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("f.tmp")]);
    }

    #[test]
    fn remove_all_takes_files_directories_and_missing_paths() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        fs::write(&f, b"1").unwrap();
        remove_all(&f).unwrap();
        assert!(!f.exists());
        let sub = d.path().join("sub");
        fs::create_dir_all(sub.join("deeper")).unwrap();
        remove_all(&sub).unwrap();
        assert!(!sub.exists());
        remove_all(&sub).unwrap();
    }
}
