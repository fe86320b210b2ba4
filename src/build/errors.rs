//! Build errors pointed at the spec: the key and line a failure concerns,
//! and DataFusion's wording in the spec's terms.

use super::BuildError;
use crate::spec::Spec;

/// DataFusion's wording, in the spec's terms: no `__input.` qualifiers (the
/// query's output is what fields read), no advice about DataFusion settings,
/// one line.
fn in_user_terms(msg: &str) -> String {
    let mut out = msg.replace("'__input.", "'").replace("__input.", "");
    if let Some(start) = out.find("Column names are case sensitive.") {
        let end = out[start..]
            .find("configuration.")
            .map_or(out.len(), |i| start + i + "configuration.".len());
        out.replace_range(
            start..end,
            "Names are case-sensitive: write a column as the data spells it; in SQL (expr, \
             filter, query), unquoted names are folded to lower case, so quote them (\"Carat\").",
        );
    }
    out = out.replace("Valid fields are ", "The query's columns are: ");
    out.replace("Schema error: ", "")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Points a query error at the spec key that names the missing column, when
/// DataFusion reports one ("No field named x"), so the message carries the
/// spec file, the key path and the line; otherwise prefixes the spec file.
pub(super) fn locate(spec: &Spec, e: crate::plan::PlanError) -> BuildError {
    match &e {
        crate::plan::PlanError::Encode { key: Some(key), .. }
        | crate::plan::PlanError::Source { key, .. } => {
            return BuildError::Spec(spec.error_at(key, e.to_string()));
        }
        _ => {}
    }
    let msg = in_user_terms(&e.to_string());
    // Overflow in a field's expression names the field's output column.
    if let Some(rest) = msg.split("integer overflow in __f").nth(1) {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Some(f) = digits
            .parse::<usize>()
            .ok()
            .and_then(|i| spec.fields.get(i))
        {
            let msg = msg.replace(&format!("in __f{digits}"), "in the expression");
            return BuildError::Spec(spec.error_at(&format!("fields.{}", f.name), msg));
        }
    }
    if msg.contains("integer overflow in __split") {
        return BuildError::Spec(
            spec.error_at("split.key", msg.replace("in __split", "in the key")),
        );
    }
    let missing = msg.split("No field named ").nth(1).and_then(|rest| {
        let token: String = rest
            .trim_start_matches(['"', '`'])
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!token.is_empty()).then_some(token)
    });
    if let Some(name) = missing.map(|n| n.trim_start_matches("__input.").to_string()) {
        let mentions = |text: &str| text.to_lowercase().contains(&name.to_lowercase());
        for f in &spec.fields {
            let uses = match &f.input {
                crate::spec::FieldInput::Column(c) => c.eq_ignore_ascii_case(&name),
                crate::spec::FieldInput::Columns(cs) => {
                    cs.iter().any(|c| c.eq_ignore_ascii_case(&name))
                }
                crate::spec::FieldInput::Expr(x) => mentions(x),
            };
            if uses {
                return BuildError::Spec(spec.error_at(&format!("fields.{}", f.name), msg));
            }
        }
        if spec.filter.as_deref().is_some_and(mentions) {
            return BuildError::Spec(spec.error_at("filter", msg));
        }
        if spec.split.as_ref().is_some_and(|s| mentions(&s.key)) {
            return BuildError::Spec(spec.error_at("split.key", msg));
        }
        if spec.query.as_deref().is_some_and(mentions) {
            return BuildError::Spec(spec.error_at("query", msg));
        }
    }
    BuildError::Other(format!("{}: {msg}", spec.path.display()))
}
