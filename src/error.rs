//! The compiler's error: what a build, a plan, a task, a commit or a
//! serving command reports, with the spec key, the input or the file it
//! concerns. Each layer's own error (spec, fingerprint, cache, plan, format)
//! converts into it; callers that branch on a failure match its variants
//! (a disk that is full is an [`BuildError::Io`] whose source says so).

/// A build failure, with the spec, input, or file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The spec is invalid, or a value in the data does not fit it.
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    /// Hashing the inputs failed.
    #[error(transparent)]
    Fingerprint(#[from] crate::fingerprint::FingerprintError),
    /// The cache could not be used.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// Planning, running or encoding failed.
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    /// The format crate rejected something.
    #[error(transparent)]
    Format(#[from] tessera_reader::Error),
    /// Reading or writing a file of the build failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Anything else, with context.
    #[error("{0}")]
    Other(String),
}

impl BuildError {
    /// An I/O failure on `path`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> BuildError {
        BuildError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether the build failed because a disk was full (found by kind, in
    /// this error and the errors it wraps).
    pub fn is_disk_full(&self) -> bool {
        let mut e: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(err) = e {
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && (io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(28))
            {
                return true;
            }
            e = err.source();
        }
        false
    }
}
