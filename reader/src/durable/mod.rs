//! Durable file-system operations, in one place for every tessera crate.
//!
//! The compiler, the shard cache, the task runner and the reader all write
//! files that other processes read, and share directories with other
//! processes. They do it through this module, so that one set of rules
//! holds everywhere:
//!
//! - [`atomic`]: a file is replaced whole or not at all (a temporary
//!   sibling, fsynced, renamed over the target), a file moved to another
//!   file system arrives the same way ([`move_file`]), and a directory is
//!   fsynced ([`sync_dir`]) when the new name must survive a power cut.
//! - [`temp`]: temporary names never collide, within a process or across
//!   processes ([`unique_suffix`]), and a temporary file or directory is
//!   removed when the work that made it fails ([`TempPath`]).
//! - [`lock`]: advisory file locks count only on the file currently at
//!   their path (checked by identity after locking), and a file system
//!   without advisory locks is either an error or, where the caller says
//!   so, no lock at all ([`NoLocks`]).
//! - [`hex`]: digests are lowercase hexadecimal ([`hex()`],
//!   [`is_hex_digest`]), also of what a writer wrote ([`HashingWriter`]).
//! - [`size`]: byte sizes have one syntax and one meaning of each unit
//!   ([`parse_size`]): `MB` is 1,000,000 bytes and `MiB` (or `M`)
//!   1,048,576, in a spec, on the command line and in the environment.
//!
//! - [`chunked`]: a file that will be memory-mapped is written in whole,
//!   aligned 2 MiB pieces ([`ChunkedWriter`]), so its cached pages can be
//!   mapped as huge pages.
//!
//! - [`tag_cache_dir`]: a cache directory carries a `CACHEDIR.TAG`, so
//!   backup tools skip it.
//!
//! Errors name the file they are about ([`crate::Error::Io`]).

pub mod atomic;
pub mod chunked;
pub mod hex;
pub mod lock;
pub mod size;
pub mod temp;

pub use atomic::{AtomicFile, move_file, sync_dir, sync_file, write_atomic};
pub use chunked::ChunkedWriter;
pub use hex::{HashingWriter, hash_reader, hex, is_hex_digest};
pub use lock::{FileLock, LockKind, LockOptions, Locked, NoLocks, is_no_locks, lock, share};
pub use size::parse_size;
pub use temp::{TempPath, remove_all, temp_sibling, unique_suffix};

/// The name of the file that marks a cache directory for backup tools.
pub const CACHEDIR_TAG: &str = "CACHEDIR.TAG";

/// Writes `CACHEDIR.TAG` (the Cache Directory Tagging Specification's
/// signature, then `comment`: `#` lines saying what the directory holds)
/// into `dir` unless it is there, so backup tools skip the cache. Best
/// effort: a cache that cannot be tagged (read-only, say) still works, so a
/// failure is ignored.
pub fn tag_cache_dir(dir: &std::path::Path, comment: &str) {
    let tag = dir.join(CACHEDIR_TAG);
    if !tag.exists() {
        let text = format!("Signature: 8a477f597d28d172789f06886806bc55\n{comment}");
        let _ = std::fs::write(&tag, text);
    }
}
