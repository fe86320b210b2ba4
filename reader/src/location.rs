//! Telling a shard-set URL from a local path.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// URL schemes of object stores (read with the `remote` feature).
pub const STORE_SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "adl", "http", "https",
];

/// Where a shard set is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// A directory on this machine (a `file://` URL becomes its path).
    Local(PathBuf),
    /// An object-store URL, without a trailing slash.
    Url(String),
}

/// The scheme of `s` if it looks like `scheme://...`.
pub fn url_scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let ok = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some(scheme)
}

/// True when `s` names a shard set in an object store (`s3://...`).
pub fn is_store_url(s: &str) -> bool {
    url_scheme(s).is_some_and(|sc| STORE_SCHEMES.contains(&sc.to_ascii_lowercase().as_str()))
}

pub(crate) fn classify(p: &Path) -> Result<Location> {
    let Some(s) = p.to_str() else {
        return Ok(Location::Local(p.to_path_buf()));
    };
    let Some(scheme) = url_scheme(s) else {
        return Ok(Location::Local(p.to_path_buf()));
    };
    let lower = scheme.to_ascii_lowercase();
    if lower == "file" {
        let rest = &s[scheme.len() + 3..];
        // file:///abs/path, or file://localhost/abs/path
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        if !rest.starts_with('/') {
            return Err(Error::InvalidArgument(format!(
                "{s}: a file URL needs an absolute path (file:///dir/set)"
            )));
        }
        return Ok(Location::Local(PathBuf::from(rest)));
    }
    if !STORE_SCHEMES.contains(&lower.as_str()) {
        return Err(Error::InvalidArgument(format!(
            "{s}: unknown URL scheme {scheme:?} (known: file, {})",
            STORE_SCHEMES.join(", ")
        )));
    }
    Ok(Location::Url(s.trim_end_matches('/').to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        assert_eq!(url_scheme("s3://b/p"), Some("s3"));
        assert_eq!(url_scheme("data/x"), None);
        assert_eq!(url_scheme("./a://b"), None);
        assert!(is_store_url("S3://b/p"));
        assert!(!is_store_url("file:///x"));
        assert_eq!(
            classify(Path::new("file:///tmp/set")).unwrap(),
            Location::Local(PathBuf::from("/tmp/set"))
        );
        assert_eq!(
            classify(Path::new("rel/dir")).unwrap(),
            Location::Local(PathBuf::from("rel/dir"))
        );
        assert!(classify(Path::new("file://rel")).is_err());
        let e = classify(Path::new("ftp://h/x")).unwrap_err().to_string();
        assert!(e.contains("unknown URL scheme"), "{e}");
    }
}
