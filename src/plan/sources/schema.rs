//! A source's schema: inferred from its files, read from Parquet footers
//! (with their row groups), checked to be the same in every file, and the
//! hive partition columns taken from each file's path.

use super::*;

pub(super) fn chrono_epoch() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
}

pub(super) async fn infer(
    format: &Arc<dyn FileFormat>,
    ctx: &SessionContext,
    files: &[PathBuf],
    sizes: &[u64],
    what: &str,
) -> Result<SchemaRef, PlanError> {
    let store_url = match files.first() {
        Some(f) => {
            object_of(f)
                .map_err(|e| PlanError::Query {
                    context: format!("{what}: {}", f.display()),
                    message: e,
                })?
                .0
        }
        None => ObjectStoreUrl::local_filesystem(),
    };
    let store = ctx
        .runtime_env()
        .object_store(store_url)
        .map_err(query_err(what.to_string()))?;
    let metas = files
        .iter()
        .zip(sizes)
        .map(|(f, &size)| {
            let (_, location) = object_of(f).map_err(|e| PlanError::Query {
                context: format!("{what}: {}", f.display()),
                message: e,
            })?;
            Ok(ObjectMeta {
                location,
                last_modified: chrono_epoch(),
                size,
                e_tag: None,
                version: None,
            })
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    let first = files
        .first()
        .map(|f| f.display().to_string())
        .unwrap_or_default();
    format
        .infer_schema(&ctx.state(), &store, &metas)
        .await
        .map_err(query_err(format!("{what}: reading the schema of {first}")))
}

/// Reads every Parquet footer (in parallel): each file's Arrow schema and
/// row groups.
pub(super) fn read_footers(files: &[PathBuf]) -> Result<Vec<(Schema, Vec<RowGroup>)>, PlanError> {
    files
        .par_iter()
        .map(|path| {
            let err = |message: String| PlanError::Query {
                context: format!("reading the Parquet footer of {}", path.display()),
                message,
            };
            let meta = parquet_metadata(path).map_err(err)?;
            let fm = meta.file_metadata();
            let schema = datafusion::parquet::arrow::parquet_to_arrow_schema(
                fm.schema_descr(),
                fm.key_value_metadata(),
            )
            .map_err(|e| err(e.to_string()))?;
            let groups = meta
                .row_groups()
                .iter()
                .map(|rg| RowGroup {
                    rows: rg.num_rows().max(0) as u64,
                    bytes: rg.compressed_size().max(0) as u64,
                })
                .collect();
            Ok((schema, groups))
        })
        .collect()
}

/// The footer of a Parquet file, local or in an object store (where only
/// the footer's bytes are fetched).
/// A remote footer is fetched once per process (planning reads it for the
/// row groups and again for pruning).
pub(crate) fn parquet_metadata(path: &Path) -> Result<Arc<ParquetMetaData>, String> {
    static REMOTE: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, Arc<ParquetMetaData>>>,
    > = std::sync::LazyLock::new(Default::default);
    let Some(url) = path.to_str().filter(|u| crate::remote_input::is_url(u)) else {
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        return ParquetMetaDataReader::new()
            .parse_and_finish(&file)
            .map(Arc::new)
            .map_err(|e| e.to_string());
    };
    let cached = REMOTE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(url)
        .cloned();
    if let Some(m) = cached {
        return Ok(m);
    }
    let meta = Arc::new(remote_parquet_metadata(path, url)?);
    REMOTE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(url.to_string(), Arc::clone(&meta));
    Ok(meta)
}

pub(super) fn remote_parquet_metadata(path: &Path, url: &str) -> Result<ParquetMetaData, String> {
    let size = crate::remote_input::input_size(path).map_err(|e| e.to_string())?;
    if size < 8 {
        return Err(format!("{size} bytes is too small for a Parquet file"));
    }
    // The footer's length is in the last 8 bytes; a 16 KiB suffix holds
    // most footers, so one request usually suffices.
    let guess = size.min(16 << 10);
    let mut tail =
        crate::remote_input::read_range(url, size - guess..size).map_err(|e| e.to_string())?;
    let footer = &tail[tail.len() - 8..];
    if &footer[4..] != b"PAR1" {
        return Err("not a Parquet file (no PAR1 magic at its end)".into());
    }
    let len = u64::from(u32::from_le_bytes([
        footer[0], footer[1], footer[2], footer[3],
    ])) + 8;
    if len > size {
        return Err(format!(
            "footer length {len} is more than the file's {size} bytes"
        ));
    }
    if len > guess {
        tail = crate::remote_input::read_range(url, size - len..size).map_err(|e| e.to_string())?;
    }
    let start = tail.len() - len as usize;
    ParquetMetaDataReader::decode_metadata(&tail[start..tail.len() - 8]).map_err(|e| e.to_string())
}

/// Where DataFusion finds an input file: its store and its path there.
pub(crate) fn object_of(path: &Path) -> Result<(ObjectStoreUrl, object_store::path::Path), String> {
    match path.to_str().filter(|u| crate::remote_input::is_url(u)) {
        Some(url) => Ok((
            crate::remote_input::store_url(url)?,
            crate::remote_input::location(url)?,
        )),
        None => Ok((
            ObjectStoreUrl::local_filesystem(),
            object_store::path::Path::from_filesystem_path(path).map_err(|e| e.to_string())?,
        )),
    }
}

/// Every file must hold the same columns (by name) with the same types as the
/// first: a column missing from one file, or stored with another type, would
/// otherwise become nulls or be cast silently.
pub(super) fn check_same_columns(files: &[PathBuf], schemas: &[&Schema]) -> Result<(), PlanError> {
    let Some(reference) = schemas.first() else {
        return Ok(());
    };
    for (i, s) in schemas.iter().enumerate().skip(1) {
        let (a, b) = (&files[0], &files[i]);
        if let Some(msg) = column_difference(reference, s) {
            return Err(PlanError::Query {
                context: b.display().to_string(),
                message: format!(
                    "the files of one source must have the same columns: {msg} \
                     (first file: {}, second file: {})",
                    a.display(),
                    b.display()
                ),
            });
        }
    }
    Ok(())
}

/// A type with the distinctions that lose nothing erased: the string,
/// binary and list representations, and dictionary encoding.
pub(super) fn family(t: &DataType) -> DataType {
    match t {
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, v) => family(v),
        DataType::LargeList(f) | DataType::ListView(f) | DataType::LargeListView(f) => {
            DataType::List(Arc::new(Field::new("item", family(f.data_type()), true)))
        }
        DataType::List(f) => {
            DataType::List(Arc::new(Field::new("item", family(f.data_type()), true)))
        }
        other => other.clone(),
    }
}

/// How `b`'s columns differ from `a`'s, if they do (names and types; order,
/// nullability and lossless representation changes do not matter).
pub(crate) fn column_difference(a: &Schema, b: &Schema) -> Option<String> {
    for fa in a.fields() {
        match b.field_with_name(fa.name()) {
            Err(_) => {
                return Some(format!(
                    "column {:?} is missing from the second file",
                    fa.name()
                ));
            }
            Ok(fb) if family(fb.data_type()) != family(fa.data_type()) => {
                return Some(format!(
                    "column {:?} is {} in the first file but {} in the second",
                    fa.name(),
                    fa.data_type(),
                    fb.data_type()
                ));
            }
            Ok(_) => {}
        }
    }
    for fb in b.fields() {
        if a.field_with_name(fb.name()).is_err() {
            return Some(format!(
                "column {:?} appears in the second file but not in the first",
                fb.name()
            ));
        }
    }
    None
}

/// Hive partition columns of `src` and each file's typed values: a column
/// whose every value is an integer is `Int64`, otherwise `Utf8`; the folder
/// text is percent-decoded, and `__HIVE_DEFAULT_PARTITION__` is null.
pub(super) fn partition_columns(
    src: &Source,
) -> Result<(Vec<FieldRef>, Vec<Vec<ScalarValue>>), PlanError> {
    let n = src.partition_columns.len();
    if n == 0 {
        return Ok((Vec::new(), vec![Vec::new(); src.files.len()]));
    }
    if src.partition_values.len() != src.files.len() {
        return Err(PlanError::Query {
            context: format!("source {:?}", src.name),
            message: "partition values do not match the file list".into(),
        });
    }
    let decoded: Vec<Vec<Option<String>>> = src
        .partition_values
        .iter()
        .map(|vals| {
            vals.iter()
                .map(|v| {
                    let d = crate::remote_input::percent_decode(v);
                    (d != "__HIVE_DEFAULT_PARTITION__").then_some(d)
                })
                .collect()
        })
        .collect();
    let mut fields = Vec::with_capacity(n);
    let mut integer = vec![true; n];
    for vals in &decoded {
        for (c, v) in vals.iter().enumerate() {
            if let Some(v) = v
                && v.parse::<i64>().is_err()
            {
                integer[c] = false;
            }
        }
    }
    for (c, name) in src.partition_columns.iter().enumerate() {
        let dt = if integer[c] {
            DataType::Int64
        } else {
            DataType::Utf8
        };
        fields.push(Arc::new(Field::new(name, dt, true)));
    }
    let values = decoded
        .into_iter()
        .map(|vals| {
            vals.into_iter()
                .enumerate()
                .map(|(c, v)| match (integer[c], v) {
                    (true, Some(v)) => ScalarValue::Int64(v.parse().ok()),
                    (true, None) => ScalarValue::Int64(None),
                    (false, v) => ScalarValue::Utf8(v),
                })
                .collect()
        })
        .collect();
    Ok((fields, values))
}
