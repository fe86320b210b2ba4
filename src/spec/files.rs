//! Resolving each source's `path` into its input files: the one step of
//! loading a spec that touches the filesystem.
//!
//! A path is a file, a glob, or a directory (walked recursively, hidden and
//! `_`-prefixed entries skipped, `key=value/` folders read as hive partitions).
//! Relative paths are relative to the spec file's directory. The result is
//! absolute, sorted and deduplicated: the deterministic input order.

use super::{CsvOptions, Source, SourceFormat, SpecError, SpecLocations};
use crate::pathkind::PathKind;
use std::fs;
use std::path::{Path, PathBuf};

/// Deepest directory nesting walked under a directory source (guards against
/// symlink loops).
const MAX_DEPTH: usize = 32;

/// Fills `files`, `partition_columns` and (when it was left to the files)
/// `format` of one source.
pub(super) fn resolve_source(
    source: &mut Source,
    spec_dir: &Path,
    locations: &SpecLocations,
) -> Result<(), SpecError> {
    let key = format!("sources.{}.path", source.name);
    let fail = |message: String| SpecError::Files {
        file: locations.file.clone(),
        key: key.clone(),
        line: locations.line(&key),
        message,
    };

    if source.path.contains('\0') {
        return Err(fail(format!(
            "{:?} contains a NUL character, which no file name can",
            source.path
        )));
    }
    let (mut files, is_dir, full, skipped) = if crate::remote_input::is_url(&source.path) {
        let (urls, is_prefix) =
            crate::remote_input::resolve(&source.path, &source.storage).map_err(&fail)?;
        let full = PathBuf::from(source.path.trim_end_matches('/'));
        (
            urls.into_iter().map(PathBuf::from).collect::<Vec<_>>(),
            is_prefix,
            full,
            Vec::new(),
        )
    } else {
        local_files(source, spec_dir).map_err(&fail)?
    };
    files.sort();
    files.dedup();

    if source.format_from_files {
        source.format = format_of_files(&files, &full).map_err(&fail)?;
    } else if is_dir {
        // A directory with a declared format keeps only that format's files,
        // so stray files (a README, a _SUCCESS marker) do not break the scan.
        files.retain(|f| SourceFormat::from_path(&f.to_string_lossy()) == Some(source.format));
    }
    if files.is_empty() {
        let note = match skipped.first() {
            Some(first) => format!(
                " (skipped {} path(s) that are not regular files: {first}{})",
                skipped.len(),
                if skipped.len() > 1 { ", ..." } else { "" }
            ),
            None => String::new(),
        };
        return Err(fail(format!(
            "{:?} matches no {} files{note}",
            source.path,
            source.format.name()
        )));
    }
    let (partitions, values) = if is_dir {
        partition_keys(&full, &files).map_err(&fail)?
    } else {
        (Vec::new(), Vec::new())
    };
    if source.format != SourceFormat::Csv {
        let defaults = CsvOptions::default();
        let csv_key = if source.csv.delimiter != defaults.delimiter {
            Some("delimiter")
        } else if source.csv.header != defaults.header {
            Some("header")
        } else if !source.csv.null_values.is_empty() {
            Some("null_values")
        } else {
            None
        };
        if let Some(csv_key) = csv_key {
            let key = format!("sources.{}.{csv_key}", source.name);
            return Err(SpecError::Invalid {
                file: locations.file.clone(),
                line: locations.line(&key),
                key,
                message: format!(
                    "{csv_key} applies to csv sources only; the files of this source are {}",
                    source.format.name()
                ),
            });
        }
    }
    source.files = files;
    source.partition_columns = partitions;
    source.partition_values = values;
    Ok(())
}

/// The local files of a source path (a file, glob or directory, or a
/// `file://` URL of one), whether it is a directory, its full path, and the
/// non-files a walk passed over.
#[allow(clippy::type_complexity)]
fn local_files(
    source: &Source,
    spec_dir: &Path,
) -> Result<(Vec<PathBuf>, bool, PathBuf, Vec<String>), String> {
    let path = match source.path.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("file") => {
            let rest = rest.strip_prefix("localhost").unwrap_or(rest);
            if !rest.starts_with('/') {
                return Err(format!(
                    "{:?}: a file URL needs an absolute path (file:///data/x.parquet)",
                    source.path
                ));
            }
            rest.to_string()
        }
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            return Err(format!(
                "{:?} is a URL of an unknown scheme {scheme:?}; sources are local paths, \
                 file:// URLs, or object-store URLs ({})",
                source.path,
                tessera_reader::STORE_SCHEMES.join(", ")
            ));
        }
        _ => source.path.clone(),
    };
    let written = Path::new(&path);
    let full = if written.is_absolute() {
        written.to_path_buf()
    } else {
        spec_dir.join(written)
    };

    let kind = PathKind::of(&full);
    let is_dir = matches!(kind, PathKind::Dir);
    // Devices, fifos and sockets a glob or a directory walk passes over: named
    // when nothing else is found, so "matches no files" does not mislead.
    let mut skipped = Vec::new();
    let files = if is_glob(&path) {
        glob_files(&full, spec_dir, written.is_absolute(), &mut skipped)?
    } else if is_dir {
        walk_dir(&full, &mut skipped)?
    } else {
        match kind {
            PathKind::File => vec![full.clone()],
            PathKind::Missing => {
                let tilde = if path.starts_with('~') {
                    "; `~` is not expanded, write the home directory out"
                } else {
                    ""
                };
                return Err(format!(
                    "no such file or directory: {} (relative paths start at the spec's directory, {}{tilde})",
                    full.display(),
                    spec_dir.display()
                ));
            }
            other => {
                return Err(format!(
                    "{} {}; a source is a data file, a glob or a directory",
                    full.display(),
                    other.describe()
                ));
            }
        }
    };
    Ok((files, is_dir, full, skipped))
}

fn is_glob(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

fn glob_files(
    full: &Path,
    spec_dir: &Path,
    absolute: bool,
    skipped: &mut Vec<String>,
) -> Result<Vec<PathBuf>, String> {
    // The spec's directory is literal text, not part of the pattern: a folder
    // named `data[1]` must not turn into a character class.
    let pattern = if absolute {
        full.to_string_lossy().into_owned()
    } else {
        let rest = full.strip_prefix(spec_dir).map_err(|_| {
            format!(
                "cannot place {} under {}",
                full.display(),
                spec_dir.display()
            )
        })?;
        let dir = glob::Pattern::escape(&spec_dir.to_string_lossy());
        format!("{dir}/{}", rest.to_string_lossy())
    };
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let paths =
        glob::glob_with(&pattern, options).map_err(|e| format!("invalid glob pattern: {e}"))?;
    let mut files = Vec::new();
    for entry in paths {
        let path =
            entry.map_err(|e| format!("cannot read {}: {}", e.path().display(), e.error()))?;
        match PathKind::of(&path) {
            PathKind::File => files.push(path),
            PathKind::Dir => {}
            other => skipped.push(format!("{} {}", path.display(), other.describe())),
        }
    }
    Ok(files)
}

/// Every non-hidden file under `dir`; devices, fifos and sockets are passed
/// over (and listed in `skipped`), broken or looping symlinks are errors.
fn walk_dir(dir: &Path, skipped: &mut Vec<String>) -> Result<Vec<PathBuf>, String> {
    if is_kernel_dir(dir) {
        return Err(format!(
            "{} holds kernel pseudo-files (/proc, /sys), not data",
            dir.display()
        ));
    }
    let mut files = Vec::new();
    // Each directory with the identities of the directories above it, so a
    // symlink back to one of them is caught where it is met.
    let mut stack = vec![(dir.to_path_buf(), vec![dir_id(dir)])];
    while let Some((current, ancestors)) = stack.pop() {
        if ancestors.len() > MAX_DEPTH {
            return Err(format!(
                "{} is nested more than {MAX_DEPTH} folders deep",
                current.display()
            ));
        }
        let entries = fs::read_dir(&current)
            .map_err(|e| format!("cannot list {}: {e}", current.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", current.display()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let path = entry.path();
            // Follows symlinks, as the planner's reads will.
            match PathKind::of(&path) {
                PathKind::Dir => {
                    let id = dir_id(&path);
                    if id.is_some() && ancestors.contains(&id) {
                        return Err(format!(
                            "{} is a symlink loop: it leads back to a folder above it",
                            path.display()
                        ));
                    }
                    if is_kernel_dir(&path) {
                        return Err(format!(
                            "{} leads into kernel pseudo-files (/proc, /sys), not data",
                            path.display()
                        ));
                    }
                    let mut below = ancestors.clone();
                    below.push(id);
                    stack.push((path, below));
                }
                PathKind::File => files.push(path),
                special @ PathKind::Special(_) => {
                    skipped.push(format!("{} {}", path.display(), special.describe()));
                }
                other => return Err(format!("{} {}", path.display(), other.describe())),
            }
        }
    }
    Ok(files)
}

/// A directory's identity (device and inode), following symlinks.
#[cfg(unix)]
fn dir_id(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn dir_id(_: &Path) -> Option<(u64, u64)> {
    None
}

/// Whether `dir` is, or leads into, /proc or /sys.
fn is_kernel_dir(dir: &Path) -> bool {
    let real = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    real.starts_with("/proc") || real.starts_with("/sys")
}

/// Hive partition columns: the `key=value` folder names between `root` and
/// each file. Every file must sit under the same keys in the same order.
/// The `key=value` folders between `root` and each file: the keys (which
/// must agree for every file) and each file's values, in path order.
fn partition_keys(
    root: &Path,
    files: &[PathBuf],
) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let mut common: Option<(Vec<String>, &Path)> = None;
    let mut values = Vec::with_capacity(files.len());
    for file in files {
        let relative = file.strip_prefix(root).unwrap_or(file);
        let (keys, vals): (Vec<String>, Vec<String>) = relative
            .parent()
            .into_iter()
            .flat_map(|p| p.components())
            .filter_map(|c| {
                let part = c.as_os_str().to_string_lossy();
                part.split_once('=')
                    .filter(|(k, _)| !k.is_empty())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .unzip();
        match &common {
            None => common = Some((keys, relative)),
            Some((first, first_file)) if *first != keys => {
                return Err(format!(
                    "inconsistent partition folders: {} is under [{}] but {} is under [{}]",
                    first_file.display(),
                    first.join(", "),
                    relative.display(),
                    keys.join(", ")
                ));
            }
            Some(_) => {}
        }
        values.push(vals);
    }
    let keys = common.map(|(k, _)| k).unwrap_or_default();
    if keys.is_empty() {
        values.clear();
    }
    Ok((keys, values))
}

/// The one format all `files` share, judged by their extensions.
fn format_of_files(files: &[PathBuf], full: &Path) -> Result<SourceFormat, String> {
    let mut found: Option<(SourceFormat, &Path)> = None;
    let mut unknown: Option<&Path> = None;
    for file in files {
        match SourceFormat::from_path(&file.to_string_lossy()) {
            Some(format) => match found {
                None => found = Some((format, file)),
                Some((first, first_file)) if first != format => {
                    return Err(format!(
                        "mixed formats: {} is {} but {} is {}; set format: or narrow the path",
                        first_file.display(),
                        first.name(),
                        file.display(),
                        format.name()
                    ));
                }
                Some(_) => {}
            },
            None => unknown = unknown.or(Some(file)),
        }
    }
    match (found, unknown) {
        (Some((format, _)), None) => Ok(format),
        (Some((format, _)), Some(other)) => Err(format!(
            "cannot tell the format of {} (the other files are {}); set format:",
            other.display(),
            format.name()
        )),
        (None, Some(other)) => Err(format!(
            "cannot tell the format of {} from its name; set format: (parquet, csv, json or arrow)",
            other.display()
        )),
        (None, None) => Err(format!("{} holds no input files", full.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_detection() {
        assert!(is_glob("data/*.parquet"));
        assert!(is_glob("data/part-?.csv"));
        assert!(is_glob("data/[ab].csv"));
        assert!(!is_glob("data/flights.csv"));
    }

    #[test]
    fn partition_keys_must_agree() {
        let root = Path::new("/d");
        let ok = vec![
            PathBuf::from("/d/year=2020/month=1/a.parquet"),
            PathBuf::from("/d/year=2021/month=2/b.parquet"),
        ];
        let (keys, values) = partition_keys(root, &ok).expect("consistent");
        assert_eq!(keys, ["year", "month"]);
        assert_eq!(values, [["2020", "1"], ["2021", "2"]]);

        let bad = vec![
            PathBuf::from("/d/year=2020/a.parquet"),
            PathBuf::from("/d/b.parquet"),
        ];
        let err = partition_keys(root, &bad).expect_err("inconsistent");
        assert!(err.contains("inconsistent partition folders"), "{err}");
    }

    #[test]
    fn formats_of_files() {
        let f = |names: &[&str]| -> Vec<PathBuf> { names.iter().map(PathBuf::from).collect() };
        let dir = Path::new("/d");
        assert_eq!(
            format_of_files(&f(&["/d/a.csv", "/d/b.csv"]), dir),
            Ok(SourceFormat::Csv)
        );
        assert!(
            format_of_files(&f(&["/d/a.csv", "/d/b.parquet"]), dir)
                .expect_err("mixed")
                .contains("mixed formats")
        );
        assert!(
            format_of_files(&f(&["/d/a.bin"]), dir)
                .expect_err("unknown")
                .contains("set format")
        );
    }
}
