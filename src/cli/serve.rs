//! `tessera transform`, `tessera bench-transform` and
//! `tessera export-transform`: a shard set's transforms applied to new rows,
//! timed, or written out for another runtime.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TransformArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// The rows (Parquet, CSV with a header, NDJSON or Arrow IPC), with
    /// the columns of the spec's query output that the fields read.
    input: PathBuf,
    /// Where to write: records (.bin), Parquet (.parquet) or a shard-set directory.
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Output format (default: from the output's extension).
    #[arg(long, value_enum)]
    format: Option<tessera::serve::OutputFormat>,
    /// Keep only the rows the spec's filter accepts (default: all rows).
    #[arg(long)]
    filter: bool,
    /// Compute only these fields (comma-separated; default: all), so the
    /// rows need only their inputs (not the label's, say). The output
    /// holds only these fields.
    #[arg(long, value_delimiter = ',')]
    fields: Vec<String>,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn transform(a: TransformArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let output = &a.output;
    let format = match a
        .format
        .or_else(|| tessera::serve::OutputFormat::from_path(output))
    {
        Some(f) => f,
        None => anyhow::bail!(
            "{}: say --format records, parquet or set (or name the output .bin, .parquet \
             or DIR/)",
            output.display()
        ),
    };
    let r = tessera::serve::transform_file(&path, &a.input, output, format, a.filter, &a.fields)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} rows in, {} records of {} bytes out ({}) in {:.3}s -> {}",
            r.rows_in,
            r.rows_out,
            r.stride,
            serde_json::to_value(r.format)?.as_str().unwrap_or_default(),
            r.seconds,
            r.output.display()
        );
        if !r.datafusion.is_empty() {
            println!("evaluated with DataFusion: {}", r.datafusion.join(", "));
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct BenchTransformArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// The rows (Parquet, CSV with a header, NDJSON or Arrow IPC).
    input: PathBuf,
    /// Rows per call, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256,4096")]
    rows: Vec<usize>,
    /// Seconds to spend on each batch size (at least 200 calls each).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn bench_transform(a: BenchTransformArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let r = tessera::serve_bench::latency(&path, &a.input, &a.rows, a.seconds)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "{:>6} {:>8} {:>10} {:>10} {:>12}",
        "rows", "calls", "p50 us", "p99 us", "rows/s"
    );
    for l in &r {
        println!(
            "{:>6} {:>8} {:>10.1} {:>10.1} {:>12.0}",
            l.rows, l.calls, l.p50_us, l.p99_us, l.rows_per_s
        );
    }
    if let Some(l) = r.first().filter(|l| !l.datafusion.is_empty()) {
        println!("evaluated with DataFusion: {}", l.datafusion.join(", "));
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ExportTransformArgs {
    /// A shard-set directory, a spec (its cached artifact), a hash prefix or a dataset name.
    target: String,
    /// The directory to write transform.json, transform.schema.json and conformance.jsonl into.
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Conformance cases to generate from the artifact.
    #[arg(long, default_value_t = 64)]
    cases: usize,
    /// Also take cases from the first rows of this file (Parquet, CSV, NDJSON, Arrow).
    #[arg(long)]
    rows: Option<PathBuf>,
    /// Artifact cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

pub fn export_transform(a: ExportTransformArgs) -> Result<()> {
    let path = tessera::artifact::resolve(&a.target, a.cache_dir.as_deref())?;
    let r = tessera::serve::export(&path, &a.output, a.cases, a.rows.as_deref())?;
    println!(
        "{} fields, {} conformance cases -> {}",
        r.fields,
        r.cases,
        a.output.display()
    );
    Ok(())
}
