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
        .replace("Execution error: ", "")
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
        crate::plan::PlanError::Spec { key, message } => {
            return BuildError::Spec(spec.error_at(key, in_user_terms(message)));
        }
        _ => {}
    }
    let msg = in_user_terms(&e.to_string());
    // Overflow, division by zero and failed casts (see plan::checked) name
    // the pass column of the field or split key they happen in.
    if let Some(rest) = msg.split(" in __f").nth(1) {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Some(f) = digits
            .parse::<usize>()
            .ok()
            .and_then(|i| spec.fields.get(i))
        {
            let msg = msg.replace(&format!(" in __f{digits}"), " in the field's input");
            return BuildError::Spec(spec.error_at(&format!("fields.{}", f.name), msg));
        }
    }
    if msg.contains(" in __split") {
        return BuildError::Spec(
            spec.error_at("split.key", msg.replace(" in __split", " in the key")),
        );
    }
    if let Some((name, quoted)) = missing_column(&msg)
        && let Some(key) = key_naming(spec, &name, quoted)
    {
        return BuildError::Spec(spec.error_at(&key, msg));
    }
    BuildError::Other(format!("{}: {msg}", spec.path.display()))
}

/// The column DataFusion reports missing ("No field named ..."), and whether
/// it was quoted (so spelled exactly) or not (so folded to lower case).
fn missing_column(msg: &str) -> Option<(String, bool)> {
    let rest = msg.split("No field named ").nth(1)?;
    let rest = rest.trim_start_matches("__input.");
    if let Some(q) = rest.strip_prefix('"') {
        let end = q.find('"')?;
        return Some((q[..end].to_string(), true));
    }
    let token: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let token = token
        .trim_end_matches('.')
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_string();
    (!token.is_empty()).then_some((token, false))
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
        let quoted = "planning the query: No field named \"Culmen Dept (mm)\". Did you mean 'Culmen Depth (mm)'?";
        let (name, q) = missing_column(quoted).expect("name");
        assert_eq!((name.as_str(), q), ("Culmen Dept (mm)", true));
        assert_eq!(key_naming(&s, &name, q).as_deref(), Some("fields.m"));
        // An unquoted `Island` in an expr is folded to `island`: the expr
        // names it, not the field whose column is `island`.
        let folded = "planning the query: No field named sex. The query's columns are: island.";
        let (name, q) = missing_column(folded).expect("name");
        assert_eq!(key_naming(&s, &name, q).as_deref(), Some("fields.pair"));
        assert!(has_word("a + sex", "sex"));
        assert!(!has_word("a + sexes", "sex"));
    }
}
