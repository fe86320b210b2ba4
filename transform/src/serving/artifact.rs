//! What a built artifact holds for serving, read back from its manifest: the
//! canonical spec's fields, split and filter, the frozen statistics (large
//! vocabularies from their files, section 3.7 of docs/FORMAT.md), and the
//! types of the query's output columns as the build saw them.

use super::TransformError;
use crate::field::{Field, Split};
use crate::semantics::FrozenStats;
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
    let fields = spec
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the manifest's spec has no `fields` list"))?
        .iter()
        .map(Field::from_canonical)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("the manifest's spec: {e}")))?;
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
    let frozen = fields
        .iter()
        .map(|f| frozen_of(manifest, dir, &f.name))
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

/// The frozen statistics of field `name`, one entry per slot.
fn frozen_of(
    manifest: &Manifest,
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
            None => serde_json::from_value::<FrozenStats>(e.clone())
                .map_err(|err| bad(format!("{at}: {err}")))?,
        };
        out.push(stat);
    }
    Ok(Some(out))
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
