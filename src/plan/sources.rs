//! Sources, registered from the resolved and fingerprinted file list.
//!
//! Each spec source becomes a [`SourceTable`]: its files (exactly the files
//! the build hashed, in input order, never a re-listing of a directory), one
//! schema checked against every file, hive partition values read from each
//! file's own path, and for Parquet the row groups of every file (from the
//! footers). A [`FilesTable`] is what DataFusion sees: a table provider that
//! scans a chosen list of [`FilePart`]s (whole files, row-group ranges, or
//! line-aligned byte ranges) in a fixed order, in as many output partitions as
//! the caller asks for.

use super::csv::{CsvScanExec, csv_format};
use super::{PlanError, query_err};
use crate::spec::{Source, SourceFormat};
use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::datasource::TableProvider;
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use object_store::ObjectMeta;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows and compressed bytes of one Parquet row group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowGroup {
    /// Rows in the row group.
    pub rows: u64,
    /// Compressed bytes of its column chunks.
    pub bytes: u64,
}

/// One input file of a source.
#[derive(Clone, Debug)]
pub struct InputFile {
    /// Absolute path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Hive partition values, typed like the table's partition columns.
    pub partition_values: Vec<ScalarValue>,
    /// Parquet only: the row groups, in file order.
    pub row_groups: Vec<RowGroup>,
}

/// Which rows of a file a [`FilePart`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PartRange {
    /// The whole file.
    Whole,
    /// Parquet row groups `start..end`.
    RowGroups {
        /// First row group.
        start: usize,
        /// One past the last row group.
        end: usize,
    },
    /// Bytes `start..end` of a CSV or NDJSON file; both ends sit at line
    /// starts (or the file's end).
    Bytes {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// The 1-based line number of the line starting at `start`.
        line: u64,
    },
}

/// A range of one input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FilePart {
    /// Index into the source's files.
    pub file: usize,
    /// The rows read.
    pub range: PartRange,
}

impl FilePart {
    /// Whether the part starts at its file's first row.
    pub fn is_first_of_file(&self) -> bool {
        match self.range {
            PartRange::Whole => true,
            PartRange::RowGroups { start, .. } => start == 0,
            PartRange::Bytes { start, .. } => start == 0,
        }
    }
}

/// A spec source ready to be scanned.
#[derive(Debug)]
pub struct SourceTable {
    /// The source's name in the spec (its SQL table name).
    pub name: String,
    /// File format.
    pub format: SourceFormat,
    /// CSV options, for CSV sources.
    pub csv: crate::spec::CsvOptions,
    /// The files, in input order.
    pub files: Vec<InputFile>,
    /// The columns stored in the files.
    pub file_schema: SchemaRef,
    /// Hive partition columns, after the file columns.
    pub partition_fields: Vec<FieldRef>,
    /// File columns then partition columns: the table DataFusion sees.
    pub schema: SchemaRef,
    /// DataFusion's reader for Parquet, JSON and Arrow files (CSV is read by
    /// [`CsvScanExec`], which honours `null_values`).
    format_reader: Option<Arc<dyn FileFormat>>,
}

/// Tags each [`PartitionedFile`] with the source it belongs to, so a physical
/// plan's scans can be told apart (see `exec::scan_source`).
#[derive(Clone, Debug)]
pub struct SourceTag(pub String);

impl SourceTable {
    /// Reads what planning needs from `src`'s files: the schema (checked
    /// against every file), the row groups of Parquet files, the partition
    /// values. `ctx` supplies DataFusion's readers and their options.
    pub async fn open(src: &Source, ctx: &SessionContext) -> Result<SourceTable, PlanError> {
        let what = format!("source {:?}", src.name);
        if src.files.is_empty() {
            return Err(PlanError::Query {
                context: what,
                message: "no input files".into(),
            });
        }
        let sizes: Vec<u64> = src
            .files
            .iter()
            .map(|f| {
                crate::remote_input::input_size(f).map_err(|e| PlanError::Query {
                    context: format!("{what}: {}", f.display()),
                    message: e.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
        let (partition_fields, values) = partition_columns(src)?;

        let config = ctx.copied_config();
        let listing = super::listing_options(src, &config);
        let (file_schema, row_groups, format_reader) = match src.format {
            SourceFormat::Parquet => {
                let footers = read_footers(&src.files)?;
                let schemas: Vec<&Schema> = footers.iter().map(|(s, _)| s).collect();
                check_same_columns(&src.files, &schemas)?;
                let schema =
                    infer(&listing.format, ctx, &src.files[..1], &sizes[..1], &what).await?;
                let groups = footers.into_iter().map(|(_, g)| g).collect();
                (schema, groups, Some(Arc::clone(&listing.format)))
            }
            SourceFormat::Csv => {
                let schema = super::csv::infer_schema(src)?;
                (schema, vec![Vec::new(); src.files.len()], None)
            }
            SourceFormat::Json => {
                let schema = infer(&listing.format, ctx, &src.files, &sizes, &what).await?;
                (
                    schema,
                    vec![Vec::new(); src.files.len()],
                    Some(Arc::clone(&listing.format)),
                )
            }
            SourceFormat::Arrow => {
                let mut schemas = Vec::with_capacity(src.files.len());
                for (f, size) in src.files.iter().zip(&sizes) {
                    schemas.push(
                        infer(
                            &listing.format,
                            ctx,
                            std::slice::from_ref(f),
                            &[*size],
                            &what,
                        )
                        .await?,
                    );
                }
                let refs: Vec<&Schema> = schemas.iter().map(|s| s.as_ref()).collect();
                check_same_columns(&src.files, &refs)?;
                let schema = schemas.swap_remove(0);
                (
                    schema,
                    vec![Vec::new(); src.files.len()],
                    Some(Arc::clone(&listing.format)),
                )
            }
        };
        for f in &partition_fields {
            if file_schema.field_with_name(f.name()).is_ok() {
                return Err(PlanError::Query {
                    context: what,
                    message: format!(
                        "partition folder key {:?} is also a column stored in the files",
                        f.name()
                    ),
                });
            }
        }
        let mut fields: Vec<FieldRef> = file_schema.fields().iter().cloned().collect();
        fields.extend(partition_fields.iter().cloned());
        let schema = Arc::new(Schema::new(fields));
        let files = src
            .files
            .iter()
            .zip(sizes)
            .zip(values)
            .zip(row_groups)
            .map(|(((path, size), partition_values), row_groups)| InputFile {
                path: path.clone(),
                size,
                partition_values,
                row_groups,
            })
            .collect();
        Ok(SourceTable {
            name: src.name.clone(),
            format: src.format,
            csv: src.csv.clone(),
            files,
            file_schema,
            partition_fields,
            schema,
            format_reader,
        })
    }

    /// Every file, whole, in order.
    pub fn all_parts(&self) -> Vec<FilePart> {
        (0..self.files.len())
            .map(|file| FilePart {
                file,
                range: PartRange::Whole,
            })
            .collect()
    }

    /// A short description of a part for messages.
    pub fn describe_part(&self, part: &FilePart) -> String {
        let path = self
            .files
            .get(part.file)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        match part.range {
            PartRange::Whole => path,
            PartRange::RowGroups { start, end } if end == start + 1 => {
                format!("{path} (row group {start})")
            }
            PartRange::RowGroups { start, end } => {
                format!("{path} (row groups {start}..{end})")
            }
            PartRange::Bytes { line, .. } => format!("{path} (from line {line})"),
        }
    }

    fn partitioned_file(&self, part: &FilePart) -> DfResult<PartitionedFile> {
        let file = self.files.get(part.file).ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!(
                "part names file {} of {}",
                part.file, self.name
            ))
        })?;
        let (_, location) = object_of(&file.path).map_err(|e| {
            datafusion::error::DataFusionError::Execution(format!("{}: {e}", file.path.display()))
        })?;
        let meta = ObjectMeta {
            location,
            last_modified: chrono_epoch(),
            size: file.size,
            e_tag: None,
            version: None,
        };
        let mut pf = PartitionedFile::new_from_meta(meta)
            .with_partition_values(file.partition_values.clone())
            .with_extension(SourceTag(self.name.clone()));
        match part.range {
            PartRange::Whole => {}
            PartRange::RowGroups { start, end } => {
                let mut plan = ParquetAccessPlan::new_none(file.row_groups.len());
                for i in start..end.min(file.row_groups.len()) {
                    plan.scan(i);
                }
                pf = pf.with_extension(plan);
            }
            PartRange::Bytes { start, end, .. } => {
                pf = pf.with_range(start as i64, end as i64);
            }
        }
        Ok(pf)
    }
}

fn chrono_epoch() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
}

async fn infer(
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
fn read_footers(files: &[PathBuf]) -> Result<Vec<(Schema, Vec<RowGroup>)>, PlanError> {
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
pub(super) fn parquet_metadata(path: &Path) -> Result<Arc<ParquetMetaData>, String> {
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

fn remote_parquet_metadata(path: &Path, url: &str) -> Result<ParquetMetaData, String> {
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
pub(super) fn object_of(path: &Path) -> Result<(ObjectStoreUrl, object_store::path::Path), String> {
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
fn check_same_columns(files: &[PathBuf], schemas: &[&Schema]) -> Result<(), PlanError> {
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
fn family(t: &DataType) -> DataType {
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
fn partition_columns(src: &Source) -> Result<(Vec<FieldRef>, Vec<Vec<ScalarValue>>), PlanError> {
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
                    let d = percent_decode(v);
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

/// Decodes `%XX` escapes (as Hive and Spark write special characters in
/// partition folder names); anything malformed is kept as written.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The table DataFusion scans: `groups[p]` is output partition `p`, read in
/// order.
#[derive(Debug)]
pub struct FilesTable {
    table: Arc<SourceTable>,
    groups: Vec<Vec<FilePart>>,
    /// CSV only: add each row's file and line (`csv::with_positions`), to
    /// locate a bad value in its input.
    positions: bool,
    /// The files a scan skipped because the filters rule out their hive
    /// partition values (indexes into the source's files).
    partition_pruned: PrunedFiles,
}

/// Files skipped by their partition values, shared with the task that reports
/// them.
pub type PrunedFiles = Arc<std::sync::Mutex<std::collections::BTreeSet<usize>>>;

impl FilesTable {
    /// A table over `parts` of `table`, in `partitions` contiguous groups of
    /// about equal weight (one group keeps the parts' order in one stream).
    pub fn new(table: Arc<SourceTable>, parts: Vec<FilePart>, partitions: usize) -> FilesTable {
        let groups = split_groups(&table, parts, partitions.max(1));
        FilesTable {
            table,
            groups,
            positions: false,
            partition_pruned: PrunedFiles::default(),
        }
    }

    /// The files its scans skipped by their partition values.
    pub fn partition_pruned(&self) -> PrunedFiles {
        Arc::clone(&self.partition_pruned)
    }

    /// The same table with the position columns (CSV sources only).
    pub fn with_positions(mut self) -> FilesTable {
        self.positions = self.table.format == SourceFormat::Csv;
        self
    }
}

/// Cuts `parts` into at most `n` contiguous groups of about equal weight.
fn split_groups(table: &SourceTable, parts: Vec<FilePart>, n: usize) -> Vec<Vec<FilePart>> {
    if n <= 1 || parts.len() <= 1 {
        return vec![parts];
    }
    let weight = |p: &FilePart| -> u64 {
        let f = &table.files[p.file];
        match p.range {
            PartRange::Whole => f.size,
            PartRange::RowGroups { start, end } => {
                f.row_groups[start..end].iter().map(|g| g.bytes).sum()
            }
            PartRange::Bytes { start, end, .. } => end - start,
        }
        .max(1)
    };
    let total: u64 = parts.iter().map(weight).sum();
    let per = total.div_ceil(n as u64).max(1);
    let mut groups: Vec<Vec<FilePart>> = Vec::new();
    let mut current = Vec::new();
    let mut acc = 0;
    for p in parts {
        acc += weight(&p);
        current.push(p);
        if acc >= per && groups.len() + 1 < n {
            groups.push(std::mem::take(&mut current));
            acc = 0;
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

#[async_trait]
impl TableProvider for FilesTable {
    fn schema(&self) -> SchemaRef {
        if self.positions {
            super::csv::with_positions(&self.table.schema)
        } else {
            Arc::clone(&self.table.schema)
        }
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Inexact: DataFusion keeps the filter above the scan, and the Parquet
        // reader may use it to skip row groups, pages and rows.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // Files whose partition values no row of which could pass are not
        // scanned at all (each counted once, at its first part).
        let out = super::pruning::ruled_out_by_partition(&self.table, filters);
        let kept: Vec<Vec<FilePart>> = self
            .groups
            .iter()
            .map(|g| {
                g.iter()
                    .filter(|p| {
                        if !out.get(p.file).copied().unwrap_or(false) {
                            return true;
                        }
                        if p.is_first_of_file()
                            && let Ok(mut set) = self.partition_pruned.lock()
                        {
                            set.insert(p.file);
                        }
                        false
                    })
                    .copied()
                    .collect()
            })
            .collect();
        let groups: Vec<&Vec<FilePart>> = kept.iter().filter(|g| !g.is_empty()).collect();
        if groups.is_empty() {
            let full = self.schema();
            let schema = match projection {
                Some(p) => Arc::new(full.project(p)?),
                None => full,
            };
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let Some(reader) = &self.table.format_reader else {
            let groups = groups.into_iter().cloned().collect();
            return Ok(Arc::new(CsvScanExec::try_new(
                Arc::clone(&self.table),
                csv_format(&self.table.csv)?,
                groups,
                projection.cloned(),
                limit,
                self.positions,
            )?));
        };
        let table_schema = TableSchema::builder(Arc::clone(&self.table.file_schema))
            .with_table_partition_cols(self.table.partition_fields.clone())
            .build();
        let source = reader.file_source(table_schema);
        let file_groups = groups
            .into_iter()
            .map(|g| {
                g.iter()
                    .map(|p| self.table.partitioned_file(p))
                    .collect::<DfResult<Vec<_>>>()
                    .map(FileGroup::new)
            })
            .collect::<DfResult<Vec<_>>>()?;
        let store_url = match self.table.files.first() {
            Some(f) => {
                object_of(&f.path)
                    .map_err(|e| {
                        datafusion::error::DataFusionError::Execution(format!(
                            "{}: {e}",
                            f.path.display()
                        ))
                    })?
                    .0
            }
            None => ObjectStoreUrl::local_filesystem(),
        };
        let config = FileScanConfigBuilder::new(store_url, source)
            .with_file_groups(file_groups)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .with_preserve_order(true)
            .build();
        reader.create_physical_plan(state, config).await
    }
}

/// The source a physical scan reads, if it is one of ours.
pub fn scan_source(plan: &dyn ExecutionPlan) -> Option<String> {
    use datafusion::datasource::physical_plan::FileScanConfig;
    use datafusion::datasource::source::DataSourceExec;
    if let Some(csv) = plan.downcast_ref::<CsvScanExec>() {
        return Some(csv.source_name().to_string());
    }
    let exec = plan.downcast_ref::<DataSourceExec>()?;
    let config = exec.data_source().downcast_ref::<FileScanConfig>()?;
    config
        .file_groups
        .iter()
        .flat_map(|g| g.files())
        .find_map(|f| f.extension::<SourceTag>().map(|t| t.0.clone()))
}

/// Registers `tables` in `ctx`, each over its given parts and partitions;
/// returns, by source name, the files their scans skip by partition values.
pub fn register(
    ctx: &SessionContext,
    tables: Vec<(Arc<SourceTable>, Vec<FilePart>, usize)>,
) -> Result<BTreeMap<String, PrunedFiles>, PlanError> {
    let mut pruned = BTreeMap::new();
    for (table, parts, partitions) in tables {
        let name = table.name.clone();
        let t = FilesTable::new(table, parts, partitions);
        pruned.insert(name.clone(), t.partition_pruned());
        ctx.register_table(name.as_str(), Arc::new(t))
            .map_err(query_err(format!("source {name:?}")))?;
    }
    Ok(pruned)
}

/// How many files in `pruned` (all sources) were skipped.
pub fn count_pruned<'a>(pruned: impl IntoIterator<Item = &'a PrunedFiles>) -> u64 {
    pruned
        .into_iter()
        .map(|p| p.lock().map_or(0, |s| s.len() as u64))
        .sum()
}

/// Whether `path` is one of `table`'s files.
pub fn has_file(table: &SourceTable, path: &Path) -> bool {
    table.files.iter().any(|f| f.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("a%2Fb%3d"), "a/b=");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn columns_must_match_by_name_and_type() {
        let a = Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("y", DataType::Utf8, true),
        ]);
        let reordered = Schema::new(vec![
            Field::new("y", DataType::Utf8, false),
            Field::new("x", DataType::Int64, true),
        ]);
        assert_eq!(column_difference(&a, &reordered), None);
        let retyped = Schema::new(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("y", DataType::Utf8, true),
        ]);
        assert!(column_difference(&a, &retyped).is_some_and(|m| m.contains("Int32")));
        let missing = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        assert!(column_difference(&a, &missing).is_some_and(|m| m.contains("\"y\"")));
        assert!(column_difference(&missing, &a).is_some_and(|m| m.contains("\"y\"")));
    }
}
