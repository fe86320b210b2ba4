//! Errors about a spec: each names the spec file, the key path and the line.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Something wrong with a spec, found before any data is read.
///
/// Displays as `file:line: key.path: message`, for example
/// `specs/x.yaml:12: fields.dense.transform: unknown transform "standardise"
/// (did you mean "standardize"?)`. The line is left out where there is none
/// (a missing top-level key, a file that cannot be read).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec file itself could not be read.
    #[error("{}: cannot read the spec: {source}", file.display())]
    Read {
        /// The spec file, as the caller named it.
        file: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is not well-formed YAML.
    #[error("{}: YAML syntax: {message}", Prefix(file, *line))]
    Syntax {
        /// The spec file.
        file: PathBuf,
        /// Line of the syntax error, where the parser knows it.
        line: Option<usize>,
        /// What the YAML parser reported.
        message: String,
    },
    /// The YAML exceeds a parser limit (nesting depth, number of values,
    /// anchors and aliases, text size): documents made to exhaust memory or
    /// time, such as alias bombs.
    #[error("{}: YAML limit: {message}", Prefix(file, *line))]
    Limit {
        /// The spec file.
        file: PathBuf,
        /// Line where the limit was reached.
        line: Option<usize>,
        /// Which limit, in words.
        message: String,
    },
    /// Well-formed YAML that is not a valid spec: an unknown key, a value of
    /// the wrong type, or a combination of settings that cannot work.
    #[error("{}: {}{message}", Prefix(file, *line), KeyPrefix(key))]
    Invalid {
        /// The spec file.
        file: PathBuf,
        /// Dotted key path, e.g. `fields.dense.transform[1].clip.min`.
        key: String,
        /// Line of the key or value, where there is one.
        line: Option<usize>,
        /// What is wrong and, where possible, how to fix it.
        message: String,
    },
    /// A source's `path` does not lead to usable input files (nothing matches,
    /// unreadable directory, mixed formats, inconsistent partitions).
    #[error("{}: {key}: {message}", Prefix(file, *line))]
    Files {
        /// The spec file.
        file: PathBuf,
        /// Key path of the source's `path`, e.g. `sources.flights.path`.
        key: String,
        /// Line of that key.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
}

impl SpecError {
    /// The spec file the error is about.
    pub fn file(&self) -> &Path {
        match self {
            SpecError::Read { file, .. }
            | SpecError::Syntax { file, .. }
            | SpecError::Limit { file, .. }
            | SpecError::Invalid { file, .. }
            | SpecError::Files { file, .. } => file,
        }
    }

    /// The dotted key path, or `""` for errors about the whole file.
    pub fn key(&self) -> &str {
        match self {
            SpecError::Read { .. } | SpecError::Syntax { .. } | SpecError::Limit { .. } => "",
            SpecError::Invalid { key, .. } | SpecError::Files { key, .. } => key,
        }
    }

    /// The 1-based line, where there is one.
    pub fn line(&self) -> Option<usize> {
        match self {
            SpecError::Read { .. } => None,
            SpecError::Syntax { line, .. }
            | SpecError::Limit { line, .. }
            | SpecError::Invalid { line, .. }
            | SpecError::Files { line, .. } => *line,
        }
    }

    /// The message without the `file:line: key:` prefix.
    pub fn message(&self) -> String {
        match self {
            SpecError::Read { source, .. } => format!("cannot read the spec: {source}"),
            SpecError::Syntax { message, .. }
            | SpecError::Limit { message, .. }
            | SpecError::Invalid { message, .. }
            | SpecError::Files { message, .. } => message.clone(),
        }
    }
}

/// `key: `, or nothing for an error about the whole document.
struct KeyPrefix<'a>(&'a str);

impl fmt::Display for KeyPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            "" => Ok(()),
            key => write!(f, "{key}: "),
        }
    }
}

/// `file:line` or just `file`.
struct Prefix<'a>(&'a Path, Option<usize>);

impl fmt::Display for Prefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(line) => write!(f, "{}:{line}", self.0.display()),
            None => write!(f, "{}", self.0.display()),
        }
    }
}
