//! Build errors pointed at the spec: the key and line a failure concerns,
//! found from the typed query errors (`plan::PlanError`).

use super::BuildError;
use crate::spec::Spec;

/// A message in the spec's terms: no `__input.` qualifiers (the query's
/// output is what fields read), no error-kind prefix, one line. (A missing
/// column's message is composed from the typed error, see
/// `plan::PlanError::MissingColumn`.)
fn in_user_terms(msg: &str) -> String {
    let out = msg.replace("'__input.", "'").replace("__input.", "");
    out.replace("Schema error: ", "")
        .replace("Execution error: ", "")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Points a query error at the spec key it concerns, by its kind: a value
/// that fails in a field's input or the split key (a checked operation), a
/// missing column named by a `column:` or by SQL, an encode or source error
/// with its key; otherwise prefixes the spec file.
pub(super) fn locate(spec: &Spec, e: crate::plan::PlanError) -> BuildError {
    use crate::plan::PlanError;
    match &e {
        PlanError::Encode { key: Some(key), .. } | PlanError::Source { key, .. } => {
            return BuildError::Spec(spec.error_at(key, e.to_string()));
        }
        PlanError::Spec { key, message } => {
            return BuildError::Spec(spec.error_at(key, in_user_terms(message)));
        }
        PlanError::Checked {
            context,
            column: Some(column),
            what,
            detail,
        } => {
            let at = if column == "__split" {
                Some(("split.key".to_string(), "the key"))
            } else {
                column
                    .strip_prefix("__f")
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| spec.fields.get(i))
                    .map(|f| (format!("fields.{}", f.name), "the field's input"))
            };
            if let Some((key, place)) = at {
                let message = format!("{context}: {what} in {place}{detail}");
                return BuildError::Spec(spec.error_at(&key, message));
            }
        }
        PlanError::MissingColumn {
            column, message, ..
        } => {
            if let Some(key) = key_naming(spec, column, crate::plan::needs_quotes(column)) {
                return BuildError::Spec(spec.error_at(&key, message.clone()));
            }
        }
        _ => {}
    }
    BuildError::Other(format!(
        "{}: {}",
        spec.path.display(),
        in_user_terms(&e.to_string())
    ))
}

/// The spec key whose SQL or column names `name`: a `column:`/`columns:`
/// entry spelled exactly, else SQL text naming it (quoted exactly, or, for a
/// name DataFusion folded to lower case, as a whole word in any case).
fn key_naming(spec: &Spec, name: &str, quoted: bool) -> Option<String> {
    use crate::spec::FieldInput;
    let in_sql = |text: &str| {
        if quoted {
            text.contains(&format!("\"{name}\""))
        } else {
            has_word(&text.to_lowercase(), &name.to_lowercase())
        }
    };
    // `column:` names are quoted in SQL, so spelled exactly; DataFusion
    // leaves the quotes out of its message when the name is lower case.
    for f in &spec.fields {
        let named = match &f.input {
            FieldInput::Column(c) => c == name,
            FieldInput::Columns(cs) => cs.iter().any(|c| c == name),
            FieldInput::Expr(_) | FieldInput::LengthOf(_) => false,
        };
        if named {
            return Some(format!("fields.{}", f.name));
        }
    }
    for f in &spec.fields {
        if let FieldInput::Expr(x) = &f.input
            && in_sql(x)
        {
            return Some(format!("fields.{}", f.name));
        }
    }
    if spec.filter.as_deref().is_some_and(in_sql) {
        return Some("filter".into());
    }
    if spec.split.as_ref().is_some_and(|s| in_sql(&s.key)) {
        return Some("split.key".into());
    }
    if spec.query.as_deref().is_some_and(in_sql) {
        return Some("query".into());
    }
    None
}

/// Whether `word` occurs in `text` not as part of a longer identifier.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn spec() -> Spec {
        let text = "version: 1\nname: t\nsources:\n  s: { path: x.parquet }\n\
                    filter: \"\\\"Culmen Length (mm)\\\" > 0\"\n\
                    fields:\n  island: { dtype: i32, column: island, transform: { hash_bucket: 8 } }\n\
                    \x20 m: { dtype: f32, columns: [\"Culmen Dept (mm)\"] }\n\
                    \x20 pair: { dtype: i32, expr: \"island || sex\", transform: { hash_bucket: 8 } }\n";
        Spec::parse(text, Path::new("/tmp/t.yaml")).expect("spec")
    }

    #[test]
    fn missing_columns_point_at_the_key_that_names_them() {
        let s = spec();
        // Quoted in SQL (not a lower-case identifier): spelled exactly.
        let name = "Culmen Dept (mm)";
        assert!(crate::plan::needs_quotes(name));
        assert_eq!(key_naming(&s, name, true).as_deref(), Some("fields.m"));
        // An unquoted `Sex` in an expr is folded to `sex`: the expr names
        // it, not the field whose column is `island`.
        assert!(!crate::plan::needs_quotes("sex"));
        assert_eq!(key_naming(&s, "sex", false).as_deref(), Some("fields.pair"));
        assert!(has_word("a + sex", "sex"));
        assert!(!has_word("a + sexes", "sex"));
    }
}
