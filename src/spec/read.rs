//! Typed, path-aware access to the YAML tree.
//!
//! Every value is read through an [`Item`] that knows its key path and line,
//! so a wrong type or a bad value becomes a [`SpecError`] that names both.

use super::SpecError;
use super::suggest::did_you_mean;
use super::yaml::{Entry, Kind, Node};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where each key of a parsed spec sits in its file.
///
/// Kept with the [`Spec`](super::Spec) so that checks made after parsing
/// (file resolution here, missing columns and type mismatches in the planner)
/// can still point at the line of the key they are about.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecLocations {
    /// The spec file as the caller named it (used in error messages).
    pub file: PathBuf,
    /// Key path (`fields.dense.transform[1]`) -> 1-based line.
    lines: BTreeMap<String, usize>,
}

impl SpecLocations {
    /// Records the line of every key and list item under `node`.
    pub(super) fn from_tree(file: &Path, root: &Node) -> SpecLocations {
        let mut lines = BTreeMap::new();
        record(root, "", &mut lines);
        SpecLocations {
            file: file.to_path_buf(),
            lines,
        }
    }

    /// The line of `key`, or of its nearest enclosing key that has one.
    ///
    /// `fields.dense.columns[2]` falls back to `fields.dense.columns`, then
    /// `fields.dense`, and so on; `None` when no prefix is in the file.
    pub fn line(&self, key: &str) -> Option<usize> {
        let mut key = key;
        loop {
            if let Some(&line) = self.lines.get(key) {
                return Some(line);
            }
            key = parent_key(key)?;
        }
    }

    /// An [`SpecError::Invalid`] about `key`, with its line.
    pub fn error(&self, key: &str, message: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            file: self.file.clone(),
            key: key.to_string(),
            line: self.line(key),
            message: message.into(),
        }
    }
}

/// `a.b[3]` -> `a.b`, `a.b` -> `a`, `a` -> `None`.
fn parent_key(key: &str) -> Option<&str> {
    let cut = key.rfind(['.', '['])?;
    Some(&key[..cut])
}

fn record(node: &Node, path: &str, lines: &mut BTreeMap<String, usize>) {
    match &node.kind {
        Kind::Map(entries) => {
            for entry in entries {
                let child = join(path, &entry.key);
                if let Some(line) = entry.key_line.or(entry.value.line) {
                    lines.entry(child.clone()).or_insert(line);
                }
                record(&entry.value, &child, lines);
            }
        }
        Kind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                let child = format!("{path}[{i}]");
                if let Some(line) = item.line {
                    lines.entry(child.clone()).or_insert(line);
                }
                record(item, &child, lines);
            }
        }
        _ => {}
    }
}

/// `join("fields", "dense")` = `fields.dense`; `join("", "name")` = `name`.
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Makes errors for one spec file.
pub(super) struct Ctx<'f> {
    pub file: &'f Path,
}

impl Ctx<'_> {
    pub fn error(&self, key: &str, line: Option<usize>, message: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            file: self.file.to_path_buf(),
            key: key.to_string(),
            line,
            message: message.into(),
        }
    }
}

/// One value in the tree, with its key path and line.
#[derive(Clone, Copy)]
pub(super) struct Item<'a> {
    pub path: &'a str,
    pub node: &'a Node,
    /// Line of the key holding this value (or of the list item).
    pub key_line: Option<usize>,
}

/// Owned path + borrowed node; the path is built as the walk goes down.
pub(super) struct Owned<'a> {
    pub path: String,
    pub node: &'a Node,
    pub key_line: Option<usize>,
}

impl<'a> Owned<'a> {
    pub fn item(&self) -> Item<'_> {
        Item {
            path: &self.path,
            node: self.node,
            key_line: self.key_line,
        }
    }
}

impl<'a> Item<'a> {
    /// The line to report for a problem with the value: the value's own line,
    /// else its key's.
    pub fn line(&self) -> Option<usize> {
        self.node.line.or(self.key_line)
    }

    pub fn error(&self, ctx: &Ctx<'_>, message: impl Into<String>) -> SpecError {
        ctx.error(self.path, self.key_line.or(self.node.line), message)
    }

    fn value_error(&self, ctx: &Ctx<'_>, message: impl Into<String>) -> SpecError {
        ctx.error(self.path, self.line(), message)
    }

    fn expected(&self, ctx: &Ctx<'_>, what: &str) -> SpecError {
        // The YAML parser reads integers beyond 64 bits as floats, whose
        // digits would then be shown rounded.
        if let Kind::Float(x) = self.node.kind
            && what == "an integer"
            && x.fract() == 0.0
            && x.abs() >= 9.2e18
        {
            return self.value_error(
                ctx,
                format!(
                    "expected an integer, found a number too large for one (about {x:e}; \
                     integers here go up to {})",
                    u64::MAX
                ),
            );
        }
        let hint = match &self.node.kind {
            Kind::Int(_) | Kind::Float(_) | Kind::Bool(_) if what.contains("string") => {
                " (put it in quotes to make it a string)"
            }
            _ => "",
        };
        self.value_error(
            ctx,
            format!("expected {what}, found {}{hint}", self.node.kind.describe()),
        )
    }

    pub fn is_null(&self) -> bool {
        matches!(self.node.kind, Kind::Null)
    }

    pub fn string(&self, ctx: &Ctx<'_>) -> Result<&'a str, SpecError> {
        match &self.node.kind {
            Kind::Str(s) => Ok(s),
            _ => Err(self.expected(ctx, "a string")),
        }
    }

    /// A string with something other than whitespace in it, trimmed.
    pub fn text(&self, ctx: &Ctx<'_>) -> Result<&'a str, SpecError> {
        let s = self.string(ctx)?.trim();
        if s.is_empty() {
            return Err(self.value_error(ctx, "must not be empty"));
        }
        Ok(s)
    }

    /// SQL text, accepted by `check` (one of the checks in `sql.rs`).
    pub fn sql(
        &self,
        ctx: &Ctx<'_>,
        check: fn(&str) -> Result<(), String>,
    ) -> Result<&'a str, SpecError> {
        let text = self.text(ctx)?;
        check(text).map_err(|message| self.error(ctx, message))?;
        Ok(text)
    }

    pub fn boolean(&self, ctx: &Ctx<'_>) -> Result<bool, SpecError> {
        match self.node.kind {
            Kind::Bool(b) => Ok(b),
            _ => Err(self.expected(ctx, "true or false")),
        }
    }

    pub fn integer(&self, ctx: &Ctx<'_>) -> Result<i128, SpecError> {
        match self.node.kind {
            Kind::Int(i) => Ok(i),
            _ => Err(self.expected(ctx, "an integer")),
        }
    }

    /// An integer in `min..=u64::MAX`.
    pub fn u64_at_least(&self, ctx: &Ctx<'_>, min: u64) -> Result<u64, SpecError> {
        let i = self.integer(ctx)?;
        if i < i128::from(min) {
            return Err(self.value_error(ctx, format!("must be at least {min}, found {i}")));
        }
        u64::try_from(i)
            .map_err(|_| self.value_error(ctx, format!("{i} is too large (at most {})", u64::MAX)))
    }

    /// A finite number (integer or float).
    pub fn number(&self, ctx: &Ctx<'_>) -> Result<f64, SpecError> {
        let x = match self.node.kind {
            // Integers in a spec are small enough that the f64 is exact in practice;
            // the canonical form records the f64 either way.
            Kind::Int(i) => i as f64,
            Kind::Float(x) => x,
            _ => return Err(self.expected(ctx, "a number")),
        };
        if !x.is_finite() {
            return Err(self.value_error(ctx, "must be a finite number"));
        }
        Ok(x)
    }

    /// A list; a single value is not accepted in its place.
    pub fn list(&self, ctx: &Ctx<'_>) -> Result<Vec<Owned<'a>>, SpecError> {
        match &self.node.kind {
            Kind::Seq(items) => Ok(self.elements(items)),
            _ => Err(self.expected(ctx, "a list")),
        }
    }

    fn elements(&self, items: &'a [Node]) -> Vec<Owned<'a>> {
        items
            .iter()
            .enumerate()
            .map(|(i, node)| Owned {
                path: format!("{}[{i}]", self.path),
                node,
                key_line: node.line,
            })
            .collect()
    }

    /// A list, or a single value standing for a list of one.
    pub fn one_or_list(&self) -> Vec<Owned<'a>> {
        match &self.node.kind {
            Kind::Seq(items) => self.elements(items),
            _ => vec![Owned {
                path: self.path.to_string(),
                node: self.node,
                key_line: self.key_line,
            }],
        }
    }

    /// A mapping whose keys must be among `allowed`.
    pub fn map(&self, ctx: &Ctx<'_>, allowed: &[&str]) -> Result<MapView<'a>, SpecError> {
        let view = self.any_map(ctx)?;
        view.check_keys(ctx, allowed)?;
        Ok(view)
    }

    /// A mapping with free-form keys (names chosen by the user); duplicates
    /// are still errors.
    pub fn any_map(&self, ctx: &Ctx<'_>) -> Result<MapView<'a>, SpecError> {
        match &self.node.kind {
            Kind::Map(entries) => {
                let view = MapView {
                    path: self.path.to_string(),
                    key_line: self.key_line.or(self.node.line),
                    entries,
                };
                view.check_duplicates(ctx)?;
                Ok(view)
            }
            _ => Err(self.expected(ctx, "a mapping")),
        }
    }
}

/// A mapping being read.
pub(super) struct MapView<'a> {
    pub path: String,
    /// Line of the key that holds this mapping; missing keys are reported here.
    pub key_line: Option<usize>,
    pub entries: &'a [Entry],
}

impl<'a> MapView<'a> {
    fn check_duplicates(&self, ctx: &Ctx<'_>) -> Result<(), SpecError> {
        for (i, entry) in self.entries.iter().enumerate() {
            if let Some(first) = self.entries[..i].iter().find(|e| e.key == entry.key) {
                let at = first
                    .key_line
                    .map(|l| format!(" (first on line {l})"))
                    .unwrap_or_default();
                return Err(ctx.error(
                    &join(&self.path, &entry.key),
                    entry.key_line,
                    format!("duplicate key {:?}{at}", entry.key),
                ));
            }
        }
        Ok(())
    }

    fn check_keys(&self, ctx: &Ctx<'_>, allowed: &[&str]) -> Result<(), SpecError> {
        for entry in self.entries {
            if !allowed.contains(&entry.key.as_str()) {
                let hint = match did_you_mean(&entry.key, allowed) {
                    s if !s.is_empty() => s,
                    _ => format!(" (expected one of: {})", allowed.join(", ")),
                };
                return Err(ctx.error(
                    &join(&self.path, &entry.key),
                    entry.key_line,
                    format!("unknown key {:?}{hint}", entry.key),
                ));
            }
        }
        Ok(())
    }

    pub fn owned(&self, entry: &'a Entry) -> Owned<'a> {
        Owned {
            path: join(&self.path, &entry.key),
            node: &entry.value,
            key_line: entry.key_line,
        }
    }

    /// The value under `key`, if present.
    pub fn get(&self, key: &str) -> Option<Owned<'a>> {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| self.owned(e))
    }

    /// The value under `key`, present and not null.
    pub fn get_some(&self, key: &str) -> Option<Owned<'a>> {
        self.get(key).filter(|o| !o.item().is_null())
    }

    pub fn require(&self, ctx: &Ctx<'_>, key: &str) -> Result<Owned<'a>, SpecError> {
        self.get_some(key).ok_or_else(|| self.missing(ctx, key))
    }

    pub fn missing(&self, ctx: &Ctx<'_>, key: &str) -> SpecError {
        let within = if self.path.is_empty() {
            "the spec".to_string()
        } else {
            self.path.clone()
        };
        ctx.error(
            &join(&self.path, key),
            self.key_line,
            format!("missing required key {key:?} in {within}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::yaml;

    #[test]
    fn line_lookup_falls_back_to_enclosing_key() {
        let root = yaml::parse("a:\n  b: [1,\n    2]\n  c: x\n").expect("yaml");
        let loc = SpecLocations::from_tree(Path::new("s.yaml"), &root);
        assert_eq!(loc.line("a"), Some(1));
        assert_eq!(loc.line("a.b"), Some(2));
        assert_eq!(loc.line("a.b[1]"), Some(3));
        assert_eq!(loc.line("a.c"), Some(4));
        assert_eq!(loc.line("a.c.missing"), Some(4));
        assert_eq!(loc.line("a.b[7]"), Some(2));
        assert_eq!(loc.line("zzz"), None);
        let err = loc.error("a.b[1]", "bad");
        assert_eq!(err.to_string(), "s.yaml:3: a.b[1]: bad");
    }
}
