//! What a path is, in words for error messages, when it is not the regular
//! file or directory a spec needs: a device, a fifo, a socket, a symlink that
//! leads nowhere or in a circle, a kernel pseudo-file. Spec loading, source
//! resolution and fingerprinting all refuse such paths; this is where they
//! learn what to call them.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Most symlinks followed before a chain counts as a loop (Linux's limit).
const MAX_LINKS: usize = 40;

/// What is at a path.
#[derive(Debug)]
pub enum PathKind {
    /// A regular file (whatever symlinks lead to it).
    File,
    /// A directory.
    Dir,
    /// Something else that exists: its description, such as "a character
    /// device" or "a fifo (named pipe)".
    Special(&'static str),
    /// Nothing.
    Missing,
    /// A symlink whose target does not exist.
    Dangling(PathBuf),
    /// A chain of symlinks that leads back into itself.
    Loop,
    /// It exists but cannot be examined.
    Unreadable(io::Error),
}

impl PathKind {
    /// What is at `path`, following symlinks.
    pub fn of(path: &Path) -> PathKind {
        match fs::metadata(path) {
            Ok(m) if m.is_file() => {
                if is_pseudo(path) {
                    PathKind::Special("a kernel pseudo-file (/proc or /sys)")
                } else {
                    PathKind::File
                }
            }
            Ok(m) if m.is_dir() => PathKind::Dir,
            Ok(m) => PathKind::Special(special_name(&m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match follow(path) {
                Followed::Dangling(target) => PathKind::Dangling(target),
                Followed::Loop => PathKind::Loop,
                Followed::End => PathKind::Missing,
            },
            Err(e) => match follow(path) {
                Followed::Loop => PathKind::Loop,
                _ if is_loop_error(&e) => PathKind::Loop,
                _ => PathKind::Unreadable(e),
            },
        }
    }

    /// Why `path` cannot be read as a regular file, or `None` if it can.
    /// For example "/dev/zero is a character device, not a regular file".
    pub fn not_a_file(path: &Path) -> Option<String> {
        let kind = PathKind::of(path);
        match kind {
            PathKind::File => None,
            other => Some(format!("{} {}", path.display(), other.describe())),
        }
    }

    /// The predicate of a sentence about the path: "is a fifo (named pipe),
    /// not a regular file", "does not exist", ...
    pub fn describe(&self) -> String {
        match self {
            PathKind::File => "is a regular file".into(),
            PathKind::Dir => "is a directory, not a regular file".into(),
            PathKind::Special(what) => format!("is {what}, not a regular file"),
            PathKind::Missing => "does not exist".into(),
            PathKind::Dangling(target) => {
                format!("is a symlink to {}, which does not exist", target.display())
            }
            PathKind::Loop => "is a symlink loop (its links lead back to themselves)".into(),
            PathKind::Unreadable(e) => format!("cannot be examined: {e}"),
        }
    }
}

#[cfg(unix)]
fn special_name(m: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a fifo (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_name(_: &fs::Metadata) -> &'static str {
    "a special file"
}

/// Files under /proc and /sys claim to be regular but hold no stable data:
/// their size says 0 while reading them yields text, or reading fails. Only
/// the path as given is checked (no symlink resolution): this runs once per
/// input file.
fn is_pseudo(path: &Path) -> bool {
    path.starts_with("/proc") || path.starts_with("/sys")
}

/// ELOOP, "too many levels of symbolic links" (40 on Linux; the portable
/// `ErrorKind` for it is not stable yet).
fn is_loop_error(e: &io::Error) -> bool {
    cfg!(target_os = "linux") && e.raw_os_error() == Some(40)
}

enum Followed {
    /// The chain ends (at a path that may or may not exist).
    End,
    /// The last link points at this missing target.
    Dangling(PathBuf),
    /// The chain revisits a link, or is longer than [`MAX_LINKS`].
    Loop,
}

/// Follows the symlink chain starting at `path` by hand, so that a loop can
/// be told from a missing target.
fn follow(path: &Path) -> Followed {
    let mut current = path.to_path_buf();
    let mut seen = HashSet::new();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                let Ok(target) = fs::read_link(&current) else {
                    return Followed::End;
                };
                let next = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(&target),
                    _ => target.clone(),
                };
                if !seen.insert(next.clone()) {
                    return Followed::Loop;
                }
                if matches!(fs::symlink_metadata(&next), Err(e) if e.kind() == io::ErrorKind::NotFound)
                {
                    return Followed::Dangling(target);
                }
                current = next;
            }
            _ => return Followed::End,
        }
    }
    Followed::Loop
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn each_kind_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let file = d.join("f.csv");
        fs::write(&file, "x\n1\n").unwrap();
        assert!(matches!(PathKind::of(&file), PathKind::File));
        assert!(PathKind::not_a_file(&file).is_none());
        assert!(matches!(PathKind::of(d), PathKind::Dir));

        symlink("loop.csv", d.join("loop.csv")).unwrap();
        symlink("b.csv", d.join("a.csv")).unwrap();
        symlink("a.csv", d.join("b.csv")).unwrap();
        symlink("gone.csv", d.join("dangling.csv")).unwrap();
        symlink(&file, d.join("good.csv")).unwrap();
        let msg = |name: &str| PathKind::not_a_file(&d.join(name)).unwrap_or_default();
        assert!(
            msg("loop.csv")
                .ends_with("loop.csv is a symlink loop (its links lead back to themselves)")
        );
        assert!(msg("a.csv").contains("symlink loop"), "{}", msg("a.csv"));
        assert!(
            msg("dangling.csv").ends_with("is a symlink to gone.csv, which does not exist"),
            "{}",
            msg("dangling.csv")
        );
        assert!(msg("missing.csv").ends_with("missing.csv does not exist"));
        assert_eq!(msg("good.csv"), "");
        // A loop in a directory component rather than the last one.
        assert!(
            msg("loop.csv/x.csv").contains("symlink loop"),
            "{}",
            msg("loop.csv/x.csv")
        );

        assert_eq!(
            PathKind::not_a_file(Path::new("/dev/null")).unwrap(),
            "/dev/null is a character device, not a regular file"
        );
        assert!(
            PathKind::not_a_file(Path::new("/proc/self/status"))
                .unwrap()
                .contains("pseudo-file")
        );
        let fifo = d.join("fifo.csv");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert_eq!(
                msg("fifo.csv"),
                format!(
                    "{} is a fifo (named pipe), not a regular file",
                    fifo.display()
                )
            );
        }
        let sock = d.join("sock.csv");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(msg("sock.csv").ends_with("is a socket, not a regular file"));
    }
}
