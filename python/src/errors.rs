//! Turning reader errors into Python exceptions.
//!
//! The exception classes live in `tessera/errors.py`, where they can inherit
//! from both `TesseraError` and the matching built-in (`ValueError`,
//! `OSError`, `FileNotFoundError`), so callers may catch either. Each mapping
//! below is deliberate: corrupt or mismatched files are `FormatError`, files
//! that cannot be opened are OS errors carrying errno and file name, and
//! arguments that cannot be honoured are `ArgumentError`.

use pyo3::PyErr;
use std::path::Path;
use tessera_reader::Error;

pyo3::import_exception!(tessera.errors, TesseraError);
pyo3::import_exception!(tessera.errors, FormatError);
pyo3::import_exception!(tessera.errors, ChecksumError);
pyo3::import_exception!(tessera.errors, UnsupportedVersionError);
pyo3::import_exception!(tessera.errors, StorageError);
pyo3::import_exception!(tessera.errors, NotFoundError);
pyo3::import_exception!(tessera.errors, ArgumentError);
pyo3::import_exception!(tessera.errors, TransformError);

/// The Python exception for a reader error. The message is the reader's,
/// which names the file it is about.
pub(crate) fn to_py(err: Error) -> PyErr {
    match err {
        Error::Io { path, source } => os_error(&path, &source),
        Error::MissingShard { path } => NotFoundError::new_err((
            libc_enoent(),
            "file listed in the manifest is missing".to_owned(),
            path.display().to_string(),
        )),
        Error::Checksum { .. } => ChecksumError::new_err(err.to_string()),
        Error::UnsupportedVersion { .. } => UnsupportedVersionError::new_err(err.to_string()),
        Error::Manifest { .. }
        | Error::Header { .. }
        | Error::Size { .. }
        | Error::Layout(_)
        | Error::Compressed { .. } => FormatError::new_err(err.to_string()),
        // An object store that cannot be read is an OS-level failure.
        Error::Remote { .. } => StorageError::new_err(err.to_string()),
        // The exception type already says "argument"; keep just the reason.
        Error::InvalidArgument(reason) => ArgumentError::new_err(reason),
        Error::Write { .. } => ArgumentError::new_err(err.to_string()),
        _ => TesseraError::new_err(err.to_string()),
    }
}

/// An `ArgumentError` with this message.
pub(crate) fn argument(msg: impl Into<String>) -> PyErr {
    ArgumentError::new_err(msg.into())
}

/// `OSError(errno, strerror, filename)` in the tessera hierarchy: Python then
/// prints `[Errno 2] No such file or directory: '/path'`.
pub(crate) fn os_error(path: &Path, source: &std::io::Error) -> PyErr {
    let errno = source.raw_os_error().unwrap_or(0);
    let text = strerror(source);
    let file = path.display().to_string();
    if source.kind() == std::io::ErrorKind::NotFound {
        NotFoundError::new_err((errno, text, file))
    } else {
        StorageError::new_err((errno, text, file))
    }
}

/// The OS's text for an error, without Rust's " (os error N)" suffix, which
/// Python shows as `[Errno N]` already.
fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_owned(),
        _ => s,
    }
}

/// ENOENT, the errno of a missing file on every platform we build for.
const fn libc_enoent() -> i32 {
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strerror_drops_the_os_error_suffix() {
        let e = std::io::Error::from_raw_os_error(2);
        assert!(!strerror(&e).contains("os error"), "{}", strerror(&e));
        let custom = std::io::Error::other("disk on fire");
        assert_eq!(strerror(&custom), "disk on fire");
    }
}
