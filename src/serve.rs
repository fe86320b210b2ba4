//! `tessera transform`: an artifact's transforms applied to the rows of a
//! file, for batch scoring. The transform itself is the transform crate's
//! (the serving path's); the command adds files and an embedded DataFusion
//! session for the SQL that crate does not evaluate.

use crate::error::BuildError;
use crate::plan::engine::DataFusionEngine;
use crate::spec::CsvOptions;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tessera_reader::ShardSetWriter;
use tessera_transform::Transform;
use tessera_transform::arrow_array::RecordBatch;
use tessera_transform::arrow_schema::Schema;

/// Rows transformed at a time.
pub const BATCH_ROWS: usize = 8192;

/// What `tessera transform` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// The records, `rows x stride` bytes, nothing else (the layout is the
    /// artifact's: `tessera inspect`).
    Records,
    /// Parquet with one column per field (fixed-size lists for shaped fields).
    Parquet,
    /// A shard set with one split, `all`, readable with `tessera.open`.
    Set,
}

impl OutputFormat {
    /// The format an output path implies: `.parquet`, `.bin`, or a directory.
    pub fn from_path(path: &Path) -> Option<OutputFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("parquet") | Some("pq") => Some(OutputFormat::Parquet),
            Some("bin") | Some("records") => Some(OutputFormat::Records),
            None if path.is_dir() || path.to_string_lossy().ends_with('/') => {
                Some(OutputFormat::Set)
            }
            _ => None,
        }
    }
}

/// What a transform run did.
#[derive(Clone, Debug, Serialize)]
pub struct TransformReport {
    /// Rows read.
    pub rows_in: u64,
    /// Records written.
    pub rows_out: u64,
    /// Record stride.
    pub stride: u64,
    /// Output.
    pub output: PathBuf,
    /// Its format.
    pub format: OutputFormat,
    /// Spec keys whose SQL ran through DataFusion (empty: none did).
    pub datafusion: Vec<String>,
    /// Seconds.
    pub seconds: f64,
}

/// Opens the transform of the artifact at `dir`, with DataFusion for the SQL
/// the transform crate does not evaluate.
pub fn open(dir: &Path) -> Result<Transform, BuildError> {
    let t = Transform::from_artifact(dir)
        .map_err(|e| BuildError::Other(format!("{}: {e}", dir.display())))?;
    let engine = DataFusionEngine::new()?;
    Ok(t.with_engine(Arc::new(engine)))
}

/// The CSV options rows to transform are read with, from the artifact's
/// spec: those of its CSV source, or of all its CSV sources when they agree
/// (the rows are the query's output, which is then read as they were);
/// otherwise the defaults (a comma, a header, empty fields null).
pub fn input_csv_options(artifact: &Path) -> Result<CsvOptions, BuildError> {
    let path = artifact.join(tessera_reader::MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|e| BuildError::io(&path, e))?;
    let manifest = tessera_reader::Manifest::parse(&bytes, &path)?;
    let sources = manifest.spec.get("sources").and_then(|s| s.as_array());
    let mut found: Vec<CsvOptions> = Vec::new();
    for csv in sources.into_iter().flatten().filter_map(|s| s.get("csv")) {
        let Some(o) = csv.as_object() else { continue };
        let delimiter = o
            .get("delimiter")
            .and_then(|d| d.as_str())
            .and_then(|d| d.bytes().next())
            .unwrap_or(b',');
        let header = o.get("header").and_then(|h| h.as_bool()).unwrap_or(true);
        let mut null_values: Vec<String> = o
            .get("null_values")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        // The empty field is null anyway.
        null_values.retain(|v| !v.is_empty());
        let options = CsvOptions {
            delimiter,
            header,
            null_values,
        };
        if !found.contains(&options) {
            found.push(options);
        }
    }
    Ok(match <[CsvOptions; 1]>::try_from(found) {
        Ok([one]) => one,
        Err(_) => CsvOptions::default(),
    })
}

/// Applies the transform of `artifact` to the rows of `input`, writing
/// `output` in `format`. A CSV input is read with the CSV options of the
/// artifact's spec ([`input_csv_options`]). With `fields` (not empty), only
/// those fields are computed and written ([`Transform::with_fields`]), so
/// the rows need only their inputs.
pub fn transform_file(
    artifact: &Path,
    input: &Path,
    output: &Path,
    format: OutputFormat,
    filter: bool,
    fields: &[String],
) -> Result<TransformReport, BuildError> {
    let t0 = Instant::now();
    let mut t = open(artifact)?;
    if !fields.is_empty() {
        t = t
            .with_fields(fields)
            .map_err(|e| BuildError::Other(format!("{}: {e}", artifact.display())))?;
    }
    let apply = |b: &RecordBatch| {
        if filter {
            t.apply_filtered(b)
        } else {
            t.apply(b)
        }
    };
    let csv = input_csv_options(artifact)?;
    let batches = crate::plan::rows::read_rows(input, BATCH_ROWS, &csv)?;
    let fail = |e: tessera_transform::TransformError| {
        BuildError::Other(format!("{}: {e}", input.display()))
    };
    let io = |e: std::io::Error| BuildError::io(output, e);
    let (mut rows_in, mut rows_out) = (0u64, 0u64);
    match format {
        OutputFormat::Records => {
            let mut w = std::io::BufWriter::new(std::fs::File::create(output).map_err(io)?);
            for b in &batches {
                let enc = apply(b).map_err(fail)?;
                w.write_all(enc.records()).map_err(io)?;
                rows_in += b.num_rows() as u64;
                rows_out += enc.rows() as u64;
            }
            w.flush().map_err(io)?;
            w.get_ref().sync_all().map_err(io)?;
        }
        OutputFormat::Parquet => {
            let mut out = Vec::with_capacity(batches.len());
            for b in &batches {
                let enc = apply(b).map_err(fail)?;
                rows_in += b.num_rows() as u64;
                rows_out += enc.rows() as u64;
                out.push(
                    enc.to_record_batch()
                        .map_err(|e| BuildError::Other(e.to_string()))?,
                );
            }
            if out.is_empty() {
                // No rows: a file with the fields' columns all the same.
                let none = RecordBatch::new_empty(Arc::new(
                    t.query_columns().cloned().unwrap_or_else(Schema::empty),
                ));
                let enc = t.apply(&none).map_err(fail)?;
                out.push(
                    enc.to_record_batch()
                        .map_err(|e| BuildError::Other(e.to_string()))?,
                );
            }
            crate::plan::rows::write_parquet(output, &out)?;
        }
        OutputFormat::Set => {
            std::fs::create_dir_all(output).map_err(io)?;
            let mut w = ShardSetWriter::new(output, t.layout().clone(), 64 << 20)?;
            w.begin_split("all")?;
            for b in &batches {
                let enc = apply(b).map_err(fail)?;
                w.write_records(enc.records())?;
                rows_in += b.num_rows() as u64;
                rows_out += enc.rows() as u64;
            }
            w.finish()?;
        }
    }
    Ok(TransformReport {
        rows_in,
        rows_out,
        stride: t.layout().stride,
        output: output.to_path_buf(),
        format,
        datafusion: t.needs_engine().into_iter().map(|(k, _)| k).collect(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// What `tessera export-transform` wrote.
#[derive(Clone, Debug, Serialize)]
pub struct ExportReport {
    /// Fields in the document.
    pub fields: usize,
    /// Conformance cases written.
    pub cases: usize,
}

/// Writes the transform of `artifact` into directory `out`:
/// `transform.json` (the portable document), `transform.schema.json` (its
/// JSON schema) and `conformance.jsonl` (a header line, then one case per
/// line: `{"row": {...}, "record": "<hex>"}`): `cases` generated from the
/// artifact, then up to `cases` rows of the file `rows`.
pub fn export(
    artifact: &Path,
    out: &Path,
    cases: usize,
    rows: Option<&Path>,
) -> Result<ExportReport, BuildError> {
    use tessera_transform::export;
    let t = open(artifact)?;
    let manifest = tessera_reader::Dataset::open(artifact)?.manifest().clone();
    let doc = export::document(&t, &manifest.artifact_hash, &manifest.name);
    let file_rows = match rows {
        Some(p) => crate::plan::rows::read_all(p, &input_csv_options(artifact)?)?,
        None => None,
    };
    let list = export::conformance(&t, cases, file_rows.as_ref())
        .map_err(|e| BuildError::Other(format!("{}: {e}", artifact.display())))?;
    let io = |p: &Path, e: std::io::Error| BuildError::io(p, e);
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let write = |name: &str, bytes: &[u8]| -> Result<(), BuildError> {
        let p = out.join(name);
        std::fs::write(&p, bytes).map_err(|e| io(&p, e))
    };
    let mut text = serde_json::to_vec_pretty(&doc).map_err(|e| BuildError::Other(e.to_string()))?;
    text.push(b'\n');
    write("transform.json", &text)?;
    write("transform.schema.json", export::SCHEMA.as_bytes())?;
    let mut lines = serde_json::json!({
        "format": export::CONFORMANCE_FORMAT,
        "version": export::VERSION,
        "artifact_hash": manifest.artifact_hash,
        "stride": t.layout().stride,
        "cases": list.len(),
    })
    .to_string();
    lines.push('\n');
    for c in &list {
        lines.push_str(&serde_json::json!({ "row": c.row, "record": c.record }).to_string());
        lines.push('\n');
    }
    write("conformance.jsonl", lines.as_bytes())?;
    Ok(ExportReport {
        fields: t.fields().len(),
        cases: list.len(),
    })
}
