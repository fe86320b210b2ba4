//! The reader's error type. Every variant that concerns a file carries its path,
//! so a message always says which file to look at.

use std::path::PathBuf;

/// Everything that can go wrong while writing or reading a shard set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system error on a file.
    #[error("{path}: {source}")]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `manifest.json` is unreadable as a v1 manifest or contradicts itself.
    #[error("{path}: invalid manifest: {reason}")]
    Manifest {
        /// Path of the manifest.
        path: PathBuf,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// The shard set was written by a format version this reader does not read.
    #[error(
        "{path}: format version {found} is not supported (this reader reads versions 1 to {supported})"
    )]
    UnsupportedVersion {
        /// The manifest or shard file.
        path: PathBuf,
        /// The version found in the file.
        found: u64,
        /// The newest version this crate reads.
        supported: u32,
    },
    /// A shard file's header is malformed or disagrees with the manifest.
    #[error("{path}: bad shard header: {reason}")]
    Header {
        /// The shard file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A shard file is not the size the manifest and its header say.
    #[error("{path}: shard is {actual} bytes, expected {expected} (truncated or overwritten?)")]
    Size {
        /// The shard file.
        path: PathBuf,
        /// Size computed from the manifest.
        expected: u64,
        /// Size on disk.
        actual: u64,
    },
    /// A file named by the manifest does not exist.
    #[error("{path}: file listed in the manifest is missing")]
    MissingShard {
        /// The missing shard file.
        path: PathBuf,
    },
    /// A file's blake3 does not match the manifest.
    #[error("{path}: checksum mismatch: manifest says blake3 {expected}, file has {actual}")]
    Checksum {
        /// The shard file.
        path: PathBuf,
        /// The hash recorded in the manifest.
        expected: String,
        /// The hash of the bytes on disk.
        actual: String,
    },
    /// A record layout is invalid (overlapping fields, bad alignment, ...).
    #[error("invalid record layout: {0}")]
    Layout(String),
    /// A caller passed an argument that cannot be honoured.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A compressed shard file is not a valid stream of zstd frames with a
    /// seek table, or decompresses to the wrong size.
    #[error("{path}: bad compressed shard: {reason}")]
    Compressed {
        /// The compressed file (or object).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A request to an object store failed (after retries), or a URL is not
    /// one this build can read.
    #[error("{url}: {reason}")]
    Remote {
        /// The object or prefix the request was for.
        url: String,
        /// What went wrong, with the store's message.
        reason: String,
    },
    /// The local shard cache cannot do what is asked (a budget too small for
    /// the shards one batch needs, a cache directory that is not one).
    #[error("shard cache {path}: {reason}")]
    Cache {
        /// The cache directory.
        path: PathBuf,
        /// What is wrong and what to change.
        reason: String,
    },
    /// A writer was fed bytes that do not fit the layout.
    #[error("{path}: {reason}")]
    Write {
        /// The shard being written.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Shorthand for `Result<T, tessera_reader::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn manifest(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Manifest {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn compressed(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Compressed {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn cache(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Cache {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn header(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Header {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
