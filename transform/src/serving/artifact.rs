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
use tessera_reader::InlineVocab;
use tessera_reader::{Manifest, QueryColumn, StatsEntry, VocabEntry, parse_vocab_line};

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
    let frozen = fields
        .iter()
        .map(|f| frozen_of(manifest, dir, &f.name))
        .collect::<Result<Vec<_>, _>>()?;
    let query_columns = query_columns(manifest)?;
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
/// entry per slot, vocabularies kept in files of the set included.
pub fn field_stats(
    manifest: &Manifest,
    dir: &Path,
    name: &str,
) -> Result<Option<Vec<FrozenStats>>, TransformError> {
    frozen_of(manifest, Some(dir), name)
}

/// The frozen statistics of field `name`, one entry per slot.
fn frozen_of(
    manifest: &Manifest,
    dir: Option<&Path>,
    name: &str,
) -> Result<Option<Vec<FrozenStats>>, TransformError> {
    let Some(entries) = manifest.stats_of(name).map_err(|e| bad(e.to_string()))? else {
        return Ok(None);
    };
    entries
        .into_iter()
        .enumerate()
        .map(|(j, e)| match e {
            StatsEntry::Vocab(VocabEntry::File { file, size, oov }) => vocab_file(
                manifest,
                dir,
                &format!("stats.{name}[{j}]"),
                &file,
                size,
                oov,
            ),
            inline => inline.into_inline().map_err(bad),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A vocabulary stored in `file` beside the manifest: one `[value, count]`
/// per line, in id order.
fn vocab_file(
    manifest: &Manifest,
    dir: Option<&Path>,
    at: &str,
    file: &str,
    size: u64,
    oov: i64,
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
        let (v, c) = parse_vocab_line(line)
            .map_err(|e| bad(format!("{}:{}: {e}", path.display(), i + 1)))?;
        values.push(v);
        counts.push(c);
    }
    if size != values.len() as u64 {
        return Err(bad(format!(
            "{}: {} values, {at}.size says {size}",
            path.display(),
            values.len()
        )));
    }
    Ok(FrozenStats::Vocab(InlineVocab {
        values,
        counts,
        oov,
    }))
}

/// The query's output columns as recorded by the build, if it recorded them
/// (builds before serving support did not).
fn query_columns(manifest: &Manifest) -> Result<Option<Schema>, TransformError> {
    let record = manifest.build_record().map_err(|e| bad(e.to_string()))?;
    let Some(list) = record.and_then(|b| b.query_columns) else {
        return Ok(None);
    };
    let mut fields = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let ty: DataType = c.data_type.parse().map_err(|e| {
            bad(format!(
                "build.query_columns[{i}]: type {:?}: {e}",
                c.data_type
            ))
        })?;
        fields.push(ArrowField::new(&c.name, ty, true));
    }
    Ok(Some(Schema::new(fields)))
}

/// What the compiler records for the query's output columns
/// (`build.query_columns`).
pub fn query_columns_record(schema: &Schema) -> Vec<QueryColumn> {
    schema
        .fields()
        .iter()
        .map(|f| QueryColumn {
            name: f.name().clone(),
            data_type: f.data_type().to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        use tessera_reader::{Compression, DType, FieldSpec, RecordLayout, ShardInfo, SplitInfo};
        let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::F64, &[])]).expect("layout");
        let shard = ShardInfo {
            file: "s.bin".into(),
            rows: 1,
            bytes: 4096 + 8,
            blake3: "ab".repeat(32),
            compression: Compression::None,
            stored_bytes: None,
            stored_blake3: None,
        };
        let split = SplitInfo {
            name: "all".into(),
            start: 0,
            rows: 1,
        };
        Manifest::new(layout, vec![shard], vec![split]).expect("manifest")
    }

    fn reread(m: &Manifest) -> Manifest {
        Manifest::parse(&m.to_json(), Path::new("manifest.json")).expect("parse")
    }

    #[test]
    fn frozen_floats_come_back_from_the_manifest_exactly() {
        // 255.27502614907138 is a standard deviation serde_json once read one
        // unit in the last place off; the workspace's serde_json has
        // `float_roundtrip`, in this crate built alone too.
        let mut xs = vec![
            "255.27502614907138".parse::<f64>().expect("f64"),
            -1.5e-3,
            55.340811965811966,
            -0.1,
            1e300,
        ];
        let mut r: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..10_000 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let x = f64::from_bits(r);
            xs.push(if x.is_finite() {
                x
            } else {
                (r >> 11) as f64 * 1e-9
            });
        }
        let frozen: Vec<FrozenStats> = xs
            .chunks(2)
            .enumerate()
            .map(|(i, p)| {
                let (a, b) = (p[0], p.get(1).copied().unwrap_or(2.0));
                match i % 2 {
                    0 => FrozenStats::Standardize {
                        mean: a,
                        std: b,
                        count: 3,
                    },
                    _ => FrozenStats::MinMax {
                        min: a,
                        max: b,
                        count: 3,
                    },
                }
            })
            .collect();
        let mut m = manifest();
        let entries = frozen.iter().cloned().map(StatsEntry::from).collect();
        m.set_stats(&std::collections::BTreeMap::from([(
            "x".to_string(),
            entries,
        )]));
        let back = frozen_of(&reread(&m), None, "x")
            .expect("read")
            .expect("present");
        let bits = |s: &FrozenStats| match *s {
            FrozenStats::Standardize { mean, std, .. } => [mean.to_bits(), std.to_bits()],
            FrozenStats::MinMax { min, max, .. } => [min.to_bits(), max.to_bits()],
            FrozenStats::Vocab { .. } => [0, 0],
        };
        assert_eq!(back.len(), frozen.len());
        for (a, b) in frozen.iter().zip(&back) {
            assert_eq!(bits(a), bits(b), "{a:?} read back as {b:?}");
        }
    }

    #[test]
    fn a_vocabulary_in_a_file_needs_the_directory() {
        let mut m = manifest();
        let entry = StatsEntry::Vocab(VocabEntry::File {
            file: "vocab-x-0.jsonl".into(),
            size: 5000,
            oov: 0,
        });
        m.set_stats(&std::collections::BTreeMap::from([(
            "x".to_string(),
            vec![entry],
        )]));
        let err = frozen_of(&m, None, "x").expect_err("an error").to_string();
        assert!(
            err.contains("stats.x[0]: the vocabulary is in vocab-x-0.jsonl"),
            "{err}"
        );
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
        let mut m = manifest();
        m.set_build_record(&tessera_reader::BuildRecord {
            query_columns: Some(query_columns_record(&schema)),
            ..Default::default()
        });
        let back = query_columns(&reread(&m)).expect("parse").expect("present");
        for (a, b) in schema.fields().iter().zip(back.fields()) {
            assert_eq!(a.data_type(), b.data_type(), "{}", a.name());
        }
    }
}
