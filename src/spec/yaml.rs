//! The YAML front end: text -> a small tree of nodes that each know their line.
//!
//! This is the only file that touches the YAML library. Everything after it
//! (validation, resolution, canonical form) walks [`Node`]s, so every error
//! can name the line of the key or value it is about, including semantic
//! errors found long after parsing.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::options::DuplicateKeyPolicy;
use serde_saphyr::{Budget, Spanned};
use std::fmt;

/// Deepest nesting of lists and mappings (a spec needs about six levels).
pub(super) const MAX_DEPTH: usize = 32;
/// Most values (scalars, lists, mappings, each alias expansion counted).
pub(super) const MAX_NODES: usize = 250_000;
/// Most anchors (`&name`), and most aliases (`*name`).
pub(super) const MAX_ANCHORS: usize = 1_000;
/// The scanner's words for flow collections nested past its own limit.
const NESTED_TOO_DEEPLY: &str = "lists and mappings nest too deeply";
/// Most bytes of scalar text, alias expansions included.
pub(super) const MAX_SCALAR_BYTES: usize = 16 << 20;

/// The parser's resource limits for a spec. A real spec holds a few hundred
/// values; these stop documents built to exhaust memory or time (alias bombs,
/// deep nesting) long before they could, and [`breach_message`] says which
/// limit was hit in words.
fn budget() -> Budget {
    let mut b = Budget::default();
    b.max_depth = MAX_DEPTH;
    b.max_nodes = MAX_NODES;
    b.max_anchors = MAX_ANCHORS;
    b.max_aliases = MAX_ANCHORS;
    b.max_total_scalar_bytes = MAX_SCALAR_BYTES;
    b
}

/// A YAML value with the 1-based line it starts on (`None` when unknown).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Node {
    pub kind: Kind,
    pub line: Option<usize>,
}

/// The shape of a YAML value after the core schema resolved its scalars.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order; duplicate keys are kept (the validator reports them).
    Map(Vec<Entry>),
}

/// One `key: value` pair of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub key: String,
    pub key_line: Option<usize>,
    pub value: Node,
}

impl Kind {
    /// What a user would call this kind of value, for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self {
            Kind::Null => "nothing (null)".to_string(),
            Kind::Bool(b) => format!("the boolean {b}"),
            Kind::Int(i) => format!("the integer {i}"),
            Kind::Float(x) => format!("the number {x}"),
            Kind::Str(s) => format!("the string {s:?}"),
            Kind::Seq(_) => "a list".to_string(),
            Kind::Map(_) => "a mapping".to_string(),
        }
    }
}

/// A document that is not well-formed YAML, or exceeds a parser limit.
#[derive(Debug)]
pub(super) struct SyntaxError {
    pub line: Option<usize>,
    pub message: String,
    /// The document hit one of the limits of [`budget`] rather than
    /// breaking a rule of YAML.
    pub limit: bool,
}

/// Parses one YAML document into a [`Node`] tree.
///
/// YAML 1.2 core-schema booleans only (`yes`/`no`/`on`/`off` stay strings, so
/// a `null_values: [no]` or a split named `on` mean what they say), and
/// duplicate keys are passed through so the validator can name their key path.
pub(super) fn parse(text: &str) -> Result<Node, SyntaxError> {
    let options = serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        with_snippet: false,
        budget: Some(budget()),
    };
    match serde_saphyr::from_str_with_options::<Option<RawNode>>(text, options) {
        Ok(Some(raw)) => Ok(raw.into_node()),
        Ok(None) => Ok(Node {
            kind: Kind::Null,
            line: None,
        }),
        Err(err) => {
            let err = err.without_snippet();
            let line = err
                .location()
                .and_then(|loc| usize::try_from(loc.line()).ok())
                .filter(|&l| l > 0);
            Err(match limit_breached(err) {
                Some(breach) => SyntaxError {
                    line,
                    message: breach_message(breach, alias_lines(err)),
                    limit: true,
                },
                None => {
                    let message = strip_location(&err.to_string());
                    // The scanner's own nesting limit (deep flow collections).
                    let limit = message.starts_with(NESTED_TOO_DEEPLY);
                    SyntaxError {
                        line,
                        message,
                        limit,
                    }
                }
            })
        }
    }
}

/// The budget breach behind `err`, if that is what it is (possibly wrapped
/// in the alias whose expansion breached it).
fn limit_breached(mut err: &serde_saphyr::Error) -> Option<&BudgetBreach> {
    loop {
        match err {
            serde_saphyr::Error::Budget { breach, .. } => return Some(breach),
            serde_saphyr::Error::AliasError { error, .. }
            | serde_saphyr::Error::WithSnippet { error, .. } => err = error,
            _ => return None,
        }
    }
}

/// For an error met while expanding an alias: the lines of the alias and of
/// its anchor.
fn alias_lines(err: &serde_saphyr::Error) -> Option<(u64, u64)> {
    match err {
        serde_saphyr::Error::AliasError { locations, .. } => {
            let used = locations.reference_location.line();
            let defined = locations.defined_location.line();
            (used > 0 && defined > 0).then_some((used, defined))
        }
        _ => None,
    }
}

/// A YAML limit in words: what was too large, and how large it may be.
fn breach_message(breach: &BudgetBreach, alias: Option<(u64, u64)>) -> String {
    let what = match breach {
        BudgetBreach::Depth { .. } => {
            format!("lists and mappings nest more than {MAX_DEPTH} levels deep")
        }
        BudgetBreach::Nodes { .. } => format!(
            "the spec holds more than {MAX_NODES} values (lists, mappings and scalars, \
             counting every expansion of an alias)"
        ),
        BudgetBreach::ScalarBytes { .. } => format!(
            "the spec's values hold more than {} MiB of text (counting every expansion of \
             an alias)",
            MAX_SCALAR_BYTES >> 20
        ),
        BudgetBreach::Anchors { .. } => format!("more than {MAX_ANCHORS} anchors (&name)"),
        BudgetBreach::Aliases { .. } => format!("more than {MAX_ANCHORS} aliases (*name)"),
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => format!(
            "{aliases} aliases (*name) for {anchors} anchors (&name): more than 10 uses per \
             anchor is how YAML bombs multiply a small file"
        ),
        BudgetBreach::MergeKeys { merge_keys } => {
            format!("more than {} merge keys (<<)", merge_keys.saturating_sub(1))
        }
        BudgetBreach::Events { events } => {
            format!("more than {} YAML events", events.saturating_sub(1))
        }
        BudgetBreach::Documents { .. } => {
            "a spec is a single YAML document; remove the `---` separators".to_string()
        }
        other => format!("a YAML parser limit was reached ({other:?})"),
    };
    let at = match alias {
        Some((used, defined)) => format!(
            ", reached while expanding the alias on line {used} (its anchor is on line {defined})"
        ),
        None => String::new(),
    };
    format!("{what}{at}")
}

/// The library appends " at line L, column C" to its messages (the caller
/// prints the line itself, in the `file:line:` prefix), and a few of its
/// messages speak to programmers using it rather than to spec authors.
fn strip_location(message: &str) -> String {
    // The first " at line L, column C" starts the suffix; an error met inside
    // an alias adds "(defined at line ...) (used at line ...)" after it.
    static SUFFIX: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let suffix = SUFFIX.get_or_init(|| regex::Regex::new(r" at line \d+, column \d+").ok());
    let trimmed = match suffix.as_ref().and_then(|re| re.find(message)) {
        Some(m) => &message[..m.start()],
        None => message,
    };
    let trimmed = trimmed.trim();
    if trimmed.starts_with("recursion limit exceeded") {
        return format!("{NESTED_TOO_DEEPLY} (a spec needs a few levels, at most {MAX_DEPTH})");
    }
    if trimmed.starts_with("multiple YAML documents") {
        return "a spec is a single YAML document; remove the `---` separator".to_string();
    }
    if let Some(head) = trimmed.strip_suffix(" rejected by the configured policy") {
        return format!("{head} is not allowed: numbers in a spec must be finite");
    }
    trimmed.to_string()
}

fn line_of<T>(spanned: &Spanned<T>) -> Option<usize> {
    usize::try_from(spanned.referenced.line())
        .ok()
        .filter(|&l| l > 0)
}

/// The deserialized form, still wrapped in the library's span type.
struct RawNode(Spanned<RawKind>);

enum RawKind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<RawNode>),
    /// Keys as text with their line.
    Map(Vec<(String, Option<usize>, RawNode)>),
}

impl RawNode {
    fn into_node(self) -> Node {
        let line = line_of(&self.0);
        let kind = match self.0.value {
            RawKind::Null => Kind::Null,
            RawKind::Bool(b) => Kind::Bool(b),
            RawKind::Int(i) => Kind::Int(i),
            RawKind::Float(x) => Kind::Float(x),
            RawKind::Str(s) => Kind::Str(s),
            RawKind::Seq(items) => Kind::Seq(items.into_iter().map(RawNode::into_node).collect()),
            RawKind::Map(entries) => Kind::Map(
                entries
                    .into_iter()
                    .map(|(key, key_line, value)| Entry {
                        key,
                        key_line,
                        value: value.into_node(),
                    })
                    .collect(),
            ),
        };
        Node { kind, line }
    }
}

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Spanned::<RawKind>::deserialize(deserializer).map(RawNode)
    }
}

impl<'de> Deserialize<'de> for RawKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = RawKind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML scalar, list or mapping")
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawKind, E> {
        Ok(RawKind::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<RawKind, E> {
        Ok(RawKind::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawKind, D::Error> {
        RawKind::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawKind, E> {
        Ok(RawKind::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawKind, E> {
        Ok(RawKind::Int(i128::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawKind, E> {
        Ok(RawKind::Int(i128::from(v)))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawKind, E> {
        Ok(RawKind::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawKind, E> {
        i128::try_from(v)
            .map(RawKind::Int)
            .map_err(|_| E::custom(format!("integer {v} is too large")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawKind, E> {
        Ok(RawKind::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawKind, E> {
        Ok(RawKind::Str(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<RawKind, E> {
        Ok(RawKind::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawKind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<RawNode>()? {
            items.push(item);
        }
        Ok(RawKind::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawKind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<RawNode>()? {
            let line = line_of(&key.0);
            let text = match key.0.value {
                RawKind::Str(s) => s,
                RawKind::Int(i) => i.to_string(),
                RawKind::Float(x) => x.to_string(),
                RawKind::Bool(b) => b.to_string(),
                RawKind::Null => "null".to_string(),
                // No spec key can be a collection; a stand-in name keeps the
                // line, and the validator rejects it as an unknown or invalid key.
                RawKind::Seq(_) => "<a list>".to_string(),
                RawKind::Map(_) => "<a mapping>".to_string(),
            };
            let value = map.next_value::<RawNode>()?;
            entries.push((text, line, value));
        }
        Ok(RawKind::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(node: &Node) -> &[Entry] {
        match &node.kind {
            Kind::Map(entries) => entries,
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn lines_of_block_and_flow_entries() {
        let text = "a: 1\n# comment\nb:\n  c: { d: [x,\n     y], e: yes }\n";
        let root = parse(text).expect("valid yaml");
        let top = map(&root);
        assert_eq!(top[0].key, "a");
        assert_eq!(top[0].key_line, Some(1));
        assert_eq!(top[1].key_line, Some(3));
        let c = &map(&top[1].value)[0];
        assert_eq!(c.key_line, Some(4));
        let inner = map(&c.value);
        assert_eq!(inner[0].key_line, Some(4));
        match &inner[0].value.kind {
            Kind::Seq(items) => {
                assert_eq!(items[0].line, Some(4));
                assert_eq!(items[1].line, Some(5));
            }
            other => panic!("not a seq: {other:?}"),
        }
        // YAML 1.1 booleans stay strings.
        assert_eq!(inner[1].value.kind, Kind::Str("yes".to_string()));
    }

    #[test]
    fn duplicate_keys_pass_through() {
        let root = parse("a: 1\na: 2\n").expect("valid yaml");
        assert_eq!(map(&root).len(), 2);
    }

    #[test]
    fn syntax_error_has_line_and_no_location_suffix() {
        let err = parse("a: [1, 2\nb: 3\n").expect_err("invalid yaml");
        assert_eq!(err.line, Some(2));
        assert!(!err.message.contains("at line"), "{}", err.message);
    }

    #[test]
    fn keys_become_text() {
        let root = parse("1: a\ntrue: b\n~: c\n").expect("valid yaml");
        let keys: Vec<&str> = map(&root).iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["1", "true", "null"]);
        let root = parse("a: 1\n? [x, y]\n: c\n").expect("complex keys are YAML");
        assert_eq!(map(&root)[1].key, "<a list>");
        assert_eq!(map(&root)[1].key_line, Some(2));
    }

    #[test]
    fn library_messages_are_reworded() {
        let err = parse("a: 1\n---\nb: 2\n").expect_err("two documents");
        assert!(
            err.message.contains("single YAML document"),
            "{}",
            err.message
        );
        let err = parse("a: .nan\n").expect_err("nan");
        assert!(err.message.contains("must be finite"), "{}", err.message);
    }

    #[test]
    fn empty_document_is_null() {
        assert_eq!(parse("").expect("empty is fine").kind, Kind::Null);
        assert_eq!(parse("# only a comment\n").expect("ok").kind, Kind::Null);
    }
}
