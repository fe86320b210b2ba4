//! What a built artifact holds for serving, read back from its manifest: the
//! canonical spec's fields, split and filter, the frozen statistics (large
//! vocabularies from their files, section 3.7 of docs/FORMAT.md), and the
//! types of the query's output columns as the build saw them.

use super::TransformError;
use crate::field::{Field, Split, Step};
use crate::semantics::FrozenStats;
use crate::text::TOKENIZERS_LIBRARY;
use arrow_schema::{DataType, Field as ArrowField, Schema};
use serde_json::Value;
use std::path::Path;
use tessera_reader::Manifest;

/// The key of the manifest's `build` object that lists the query's output
/// columns (`[{"name": ..., "type": ...}]`, Arrow type names).
pub const QUERY_COLUMNS_KEY: &str = "query_columns";

/// The serving-relevant content of a manifest.
pub struct ArtifactParts {
    pub fields: Vec<Field>,
    pub split: Option<Split>,
    pub filter: Option<String>,
    pub frozen: Vec<Option<Vec<FrozenStats>>>,
    pub query_columns: Option<Schema>,
}

fn bad(message: impl Into<String>) -> TransformError {
    TransformError::Artifact(message.into())
}

/// Reads the parts of `manifest`; `dir` is the set's directory, where large
/// vocabularies live (`None`: they must all be inline).
pub fn read(manifest: &Manifest, dir: Option<&Path>) -> Result<ArtifactParts, TransformError> {
    let spec = &manifest.spec;
    if spec.is_null() {
        return Err(bad(
            "the manifest holds no spec: the set was not built by the tessera compiler",
        ));
    }
    let mut fields = spec
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the manifest's spec has no `fields` list"))?
        .iter()
        .map(Field::from_canonical)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("the manifest's spec: {e}")))?;
    if let Some(dir) = dir {
        for f in &mut fields {
            load_tokenizers(f, dir)?;
        }
    }
    // Image fields decode with the decoders they were built with.
    for f in &fields {
        for step in &f.transforms {
            if let Step::Image(i) = step {
                i.check_libraries()
                    .map_err(|e| bad(format!("field {}: {e}", f.name)))?;
            }
        }
    }
    let split = match spec.get("split") {
        None | Some(Value::Null) => None,
        Some(s) => {
            Some(Split::from_canonical(s).map_err(|e| bad(format!("the manifest's split: {e}")))?)
        }
    };
    let filter = spec
        .get("filter")
        .and_then(Value::as_str)
        .map(str::to_string);
    let exact = match dir {
        Some(d) => exact_stats(d)?,
        None => None,
    };
    let frozen = fields
        .iter()
        .map(|f| frozen_of(manifest, exact.as_ref(), dir, &f.name))
        .collect::<Result<Vec<_>, _>>()?;
    let query_columns = query_columns(&manifest.build)?;
    Ok(ArtifactParts {
        fields,
        split,
        filter,
        frozen,
        query_columns,
    })
}

/// Loads the tokenizer of a `tokenize` field from the artifact's copy,
/// `tokenizer-FIELD.json`, checked against the blake3 its spec records; the
/// library must be the one it was built with (token ids change between
/// releases).
fn load_tokenizers(f: &mut Field, dir: &Path) -> Result<(), TransformError> {
    let name = f.name.clone();
    for step in &mut f.transforms {
        let Step::Tokenize(t) = step else { continue };
        if t.library != TOKENIZERS_LIBRARY {
            return Err(bad(format!(
                "field {name}: the artifact was tokenized with {}, this program has {}; \
                 the ids could differ, so rebuild the artifact",
                t.library, TOKENIZERS_LIBRARY
            )));
        }
        let file = format!("tokenizer-{name}.json");
        let path = dir.join(&file);
        let bytes = std::fs::read(&path)
            .map_err(|e| bad(format!("field {name}: {}: {e}", path.display())))?;
        t.load_bytes(&bytes, &path.display().to_string())
            .map_err(|e| bad(format!("field {name}: {e}")))?;
    }
    Ok(())
}

/// The frozen statistics of field `name` in the artifact at `dir`, one
/// entry per slot, vocabularies kept in side files included (for display:
/// floats as serde_json reads them).
pub fn field_stats(
    manifest: &Manifest,
    dir: &Path,
    name: &str,
) -> Result<Option<Vec<FrozenStats>>, TransformError> {
    frozen_of(manifest, None, Some(dir), name)
}

/// The frozen statistics of field `name`, one entry per slot.
fn frozen_of(
    manifest: &Manifest,
    exact: Option<&Value>,
    dir: Option<&Path>,
    name: &str,
) -> Result<Option<Vec<FrozenStats>>, TransformError> {
    let Some(entries) = manifest.stats.get(name) else {
        return Ok(None);
    };
    let entries = entries
        .as_array()
        .ok_or_else(|| bad(format!("stats.{name} is not a list")))?;
    let mut out = Vec::with_capacity(entries.len());
    for (j, e) in entries.iter().enumerate() {
        let at = format!("stats.{name}[{j}]");
        let stat = match e.get("file").and_then(Value::as_str) {
            Some(file) => vocab_file(manifest, dir, &at, e, file)?,
            None => {
                let exact = exact.and_then(|x| x.get(name)).and_then(|x| x.get(j));
                let e = match exact {
                    Some(x) => with_exact_floats(e, x),
                    None => e.clone(),
                };
                serde_json::from_value::<FrozenStats>(e)
                    .map_err(|err| bad(format!("{at}: {err}")))?
            }
        };
        out.push(stat);
    }
    Ok(Some(out))
}

/// The manifest's `stats` object read again from `dir/manifest.json` with
/// every number kept as its text. serde_json (as built here, without its
/// `float_roundtrip` feature) may read a 17-digit float one unit in the last
/// place off, and a frozen mean or standard deviation must be the build's
/// exact value for the records to match; Rust's own `f64` parsing is exact.
fn exact_stats(dir: &Path) -> Result<Option<Value>, TransformError> {
    let path = dir.join(tessera_reader::MANIFEST_FILE);
    let text =
        std::fs::read_to_string(&path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let quoted = quote_numbers(&text);
    let doc: Value =
        serde_json::from_str(&quoted).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    Ok(doc.get("stats").cloned())
}

/// `text` (JSON) with every number outside strings turned into a string of
/// its digits.
fn quote_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut in_string = false;
    let mut escaped = false;
    let mut in_number = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        let number_char = c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E');
        if in_number && !number_char {
            out.push('"');
            in_number = false;
        } else if !in_number && (c.is_ascii_digit() || c == '-') {
            out.push('"');
            in_number = true;
        }
        if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    if in_number {
        out.push('"');
    }
    out
}

/// `entry` with each float replaced by the exact value of its text in
/// `exact` (integers and strings are already exact).
fn with_exact_floats(entry: &Value, exact: &Value) -> Value {
    let mut out = entry.clone();
    if let (Some(obj), Some(x)) = (out.as_object_mut(), exact.as_object()) {
        for (k, v) in obj.iter_mut() {
            if v.is_f64()
                && let Some(n) = x
                    .get(k)
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<f64>().ok())
                    .and_then(serde_json::Number::from_f64)
            {
                *v = Value::Number(n);
            }
        }
    }
    out
}

/// A vocabulary stored in `file` beside the manifest: one `[value, count]`
/// per line, in id order.
fn vocab_file(
    manifest: &Manifest,
    dir: Option<&Path>,
    at: &str,
    entry: &Value,
    file: &str,
) -> Result<FrozenStats, TransformError> {
    let dir = dir.ok_or_else(|| {
        bad(format!(
            "{at}: the vocabulary is in {file}, beside the manifest; open the artifact's directory"
        ))
    })?;
    let info = manifest
        .files
        .iter()
        .find(|f| f.file == file)
        .ok_or_else(|| {
            bad(format!(
                "{at}: {file} is not listed in the manifest's files"
            ))
        })?;
    let path = dir.join(file);
    let text =
        std::fs::read_to_string(&path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if text.len() as u64 != info.bytes {
        return Err(bad(format!(
            "{}: {} bytes, the manifest says {}",
            path.display(),
            text.len(),
            info.bytes
        )));
    }
    let (mut values, mut counts) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let (v, c): (String, u64) = serde_json::from_str(line)
            .map_err(|e| bad(format!("{}:{}: {e}", path.display(), i + 1)))?;
        values.push(v);
        counts.push(c);
    }
    let size = entry.get("size").and_then(Value::as_u64);
    if size != Some(values.len() as u64) {
        return Err(bad(format!(
            "{}: {} values, {at}.size says {size:?}",
            path.display(),
            values.len()
        )));
    }
    Ok(FrozenStats::Vocab {
        values,
        counts,
        oov: entry.get("oov").and_then(Value::as_i64).unwrap_or(0),
    })
}

/// The query's output columns as recorded by the build, if it recorded them
/// (builds before serving support did not).
fn query_columns(build: &Value) -> Result<Option<Schema>, TransformError> {
    let Some(list) = build.get(QUERY_COLUMNS_KEY) else {
        return Ok(None);
    };
    let list = list
        .as_array()
        .ok_or_else(|| bad(format!("build.{QUERY_COLUMNS_KEY} is not a list")))?;
    let mut fields = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let at = format!("build.{QUERY_COLUMNS_KEY}[{i}]");
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{at} has no name")))?;
        let ty = c
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{at} has no type")))?;
        let ty: DataType = ty
            .parse()
            .map_err(|e| bad(format!("{at}: type {ty:?}: {e}")))?;
        fields.push(ArrowField::new(name, ty, true));
    }
    Ok(Some(Schema::new(fields)))
}

/// The JSON the compiler records for the query's output columns.
pub fn query_columns_json(schema: &Schema) -> Value {
    Value::Array(
        schema
            .fields()
            .iter()
            .map(|f| serde_json::json!({ "name": f.name(), "type": f.data_type().to_string() }))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_read_exactly() {
        // A value serde_json's default parser reads one unit in the last
        // place off (found in a build's standard deviation).
        let text = r#"{"stats": {"f": [{"kind": "standardize", "count": 3, "mean": -1.5e-3, "std": 255.27502614907138}]}, "s": "a \"1\" 2"}"#;
        let lossy: Value = serde_json::from_str(text).expect("json");
        let exact: Value = serde_json::from_str(&quote_numbers(text)).expect("quoted json");
        assert_eq!(exact["s"], lossy["s"]);
        let e = with_exact_floats(&lossy["stats"]["f"][0], &exact["stats"]["f"][0]);
        assert_eq!(
            e["std"].as_f64(),
            Some("255.27502614907138".parse::<f64>().expect("f64"))
        );
        assert_eq!(e["mean"].as_f64(), Some(-1.5e-3));
        assert_eq!(e["count"].as_u64(), Some(3));
        assert_eq!(e["kind"], "standardize");
    }

    #[test]
    fn query_column_types_round_trip() {
        use arrow_schema::TimeUnit;
        let types = [
            DataType::Int64,
            DataType::UInt8,
            DataType::Float32,
            DataType::Utf8View,
            DataType::LargeUtf8,
            DataType::Boolean,
            DataType::Binary,
            DataType::FixedSizeBinary(4),
            DataType::Date32,
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::Decimal128(12, 2),
            DataType::List(std::sync::Arc::new(ArrowField::new(
                "item",
                DataType::Int32,
                true,
            ))),
        ];
        let schema = Schema::new(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| ArrowField::new(format!("c{i}"), t.clone(), true))
                .collect::<Vec<_>>(),
        );
        let json = serde_json::json!({ QUERY_COLUMNS_KEY: query_columns_json(&schema) });
        let back = query_columns(&json).expect("parse").expect("present");
        for (a, b) in schema.fields().iter().zip(back.fields()) {
            assert_eq!(a.data_type(), b.data_type(), "{}", a.name());
        }
    }
}
