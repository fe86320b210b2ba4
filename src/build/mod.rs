//! The build driver: spec -> fingerprint -> cache lookup -> statistics tasks
//! -> shard tasks -> commit. Tasks run on a rayon pool; their results are
//! combined in chunk order, so thread count never changes the output.
//!
//! - this module: the options and report, the artifact hash, the cache path
//!   (`Cache::get_or_build`), `tessera explain`;
//! - [`job`]: one build under the lock: plan, statistics, encode, shuffle,
//!   manifest;
//! - [`errors`]: errors pointed at the spec key and line, in the spec's terms;
//! - [`resources`]: batch sizes, memory and disk limits.

mod dag;
mod errors;
mod frozen_file;
mod job;
mod pipeline;
mod tasks;
mod work_store;

pub use crate::error::BuildError;
pub use crate::resources::{
    BATCH_ROWS, default_memory_limit, exit_cleanly_on_abort, fit_address_space, free_bytes,
};
pub use dag::{Task, TaskKind};
pub use tasks::{BuildPlan, PLAN_FORMAT, commit, plan, run_task, run_tasks};
pub use tessera_reader::VOCAB_INLINE;

use crate::accumulators::SEMANTICS_VERSION;
use crate::cache::Cache;
use crate::fingerprint::{self, SourceFiles};
use crate::plan::{Decision, OutputBudget, PlanOptions, Planner, ScanMetrics};
use crate::progress::{Progress, ProgressMode};
use crate::spec::Spec;
use errors::locate;
use job::{Built, Job};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tessera_reader::{FORMAT_VERSION, FieldSpec, RecordLayout, SplitInfo};

/// Options of one build.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Cache root; `None` resolves `TESSERA_CACHE_DIR`, then the default.
    pub cache_dir: Option<PathBuf>,
    /// Worker threads (default: available cores).
    pub threads: Option<usize>,
    /// Bytes the query engine may hold before spilling (default: half the
    /// machine's memory).
    pub memory_limit: Option<u64>,
    /// Progress display.
    pub progress: ProgressMode,
    /// Publish even when a split, or the whole set, holds no rows.
    pub allow_empty: bool,
    /// Bytes of records a build may write (default: half of the free space
    /// where the cache lives).
    pub max_output: Option<u64>,
}

/// What a build did, as printed by `tessera build --json`.
#[derive(Clone, Debug, Serialize)]
pub struct BuildReport {
    /// Artifact hash.
    pub hash: String,
    /// Artifact directory.
    pub path: PathBuf,
    /// True when the artifact already existed.
    pub cache_hit: bool,
    /// Rows per split, in spec order.
    pub rows: IndexedRows,
    /// Record stride in bytes.
    pub stride: u64,
    /// Bytes of shard files.
    pub bytes: u64,
    /// `"chunked"` or `"global"`.
    pub plan: String,
    /// For a chunked plan, the chunked source.
    pub plan_source: Option<String>,
    /// For a global plan, the operator that made it global.
    pub plan_operator: Option<String>,
    /// For a global plan, why that operator prevents chunking.
    pub plan_reason: Option<String>,
    /// For a global plan run in one partition, why.
    pub plan_serial: Option<String>,
    /// Build tasks (chunks, or row ranges of a global query's output).
    pub chunks: usize,
    /// Scan counters.
    pub scan: ScanMetrics,
    /// Rows that passed the filter.
    pub rows_kept: u64,
    /// Seconds per stage.
    pub seconds: BTreeMap<String, f64>,
    /// Bytes this process fetched from object stores: footers, the row
    /// groups and columns a query read, CSV and JSON files, hashed bytes
    /// (0 when every input is local).
    pub bytes_fetched: u64,
    /// With `pack:`: per split, documents, windows, tokens, padding and
    /// what overflowed (the manifest's `build.pack`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<serde_json::Value>,
    /// With `pack:`, a fresh build: tokens stored per second of the whole
    /// build, per build thread, in millions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtok_per_s_per_core: Option<f64>,
    /// Rows left out per `image` field with `on_error: skip` (the
    /// manifest's `build.skipped`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<serde_json::Value>,
}

/// Rows per split in spec order; serialized as a JSON object whose keys keep
/// that order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexedRows(pub Vec<(String, u64)>);

impl Serialize for IndexedRows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl IndexedRows {
    /// The rows of split `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, r)| *r)
    }
}

/// The record layout a spec produces.
pub fn layout_of(spec: &Spec) -> Result<RecordLayout, BuildError> {
    if let Some(p) = &spec.pack {
        let dtype = spec
            .fields
            .iter()
            .find(|f| f.name == p.field)
            .map_or(tessera_reader::DType::U32, |f| f.dtype);
        return crate::pack::windows::layout(p, dtype).map_err(|e| {
            BuildError::Spec(spec.error_at("pack", format!("the record layout: {e}")))
        });
    }
    let fields: Vec<FieldSpec> = spec
        .fields
        .iter()
        .map(|f| FieldSpec::new(f.name.clone(), f.dtype, &f.shape()))
        .collect();
    RecordLayout::packed(&fields)
        .map_err(|e| BuildError::Spec(spec.error_at("fields", format!("the record layout: {e}"))))
}

fn split_names(spec: &Spec) -> Vec<String> {
    match &spec.split {
        Some(s) => s.weights.iter().map(|(n, _)| n.clone()).collect(),
        None => vec!["all".into()],
    }
}

/// A spec with its inputs fingerprinted: everything the artifact hash needs.
struct Prepared {
    spec: Spec,
    cache: Cache,
    files: Vec<fingerprint::InputFile>,
    canonical: serde_json::Value,
    hash: String,
}

fn prepare(spec_path: &Path, cache_dir: Option<&Path>) -> Result<Prepared, BuildError> {
    let spec = Spec::load(spec_path)?;
    let cache = Cache::resolve(cache_dir)?;
    let mut stat_cache = cache.load_stat_cache();
    let inputs: Vec<SourceFiles> = spec
        .sources
        .iter()
        .map(|s| SourceFiles {
            source: s.name.clone(),
            root: source_root(&spec.path, &s.path, &s.files),
            files: s.files.clone(),
            hash_bytes: s.hash_bytes,
        })
        .collect();
    let files = fingerprint::fingerprint_inputs(&inputs, &mut stat_cache)?;
    // A stat cache that cannot be saved only costs a rehash next time.
    let _ = stat_cache.save();
    let canonical = spec.canonical_json();
    let hash = fingerprint::artifact_hash(&canonical, &files, FORMAT_VERSION, SEMANTICS_VERSION);
    Ok(Prepared {
        spec,
        cache,
        files,
        canonical,
        hash,
    })
}

/// The hash of the artifact `spec_path` builds with its inputs as they are
/// now, and the cache it belongs to; builds nothing.
pub fn artifact_hash(
    spec_path: &Path,
    cache_dir: Option<&Path>,
) -> Result<(String, Cache), BuildError> {
    let p = prepare(spec_path, cache_dir)?;
    Ok((p.hash, p.cache))
}

/// Builds `spec_path` (or returns the cached artifact).
pub fn build(spec_path: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let t0 = Instant::now();
    let mut seconds = BTreeMap::new();
    let progress = Progress::new(opts.progress);
    let t = Instant::now();
    let Prepared {
        spec,
        cache,
        files,
        canonical,
        hash,
    } = prepare(spec_path, opts.cache_dir.as_deref())?;
    seconds.insert("fingerprint".to_string(), t.elapsed().as_secs_f64());

    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let mut built: Option<Built> = None;
    let mut stage_seconds = BTreeMap::new();
    let obtained = cache.get_or_build(
        &hash,
        || progress.line(&format!("waiting for another build of {}", &hash[..16])),
        |staging| {
            progress.line(&format!("building {} -> {}", spec.name, &hash[..16]));
            // Only now, with a build to run, are tokenizer files parsed.
            let t = Instant::now();
            let spec = Arc::new(spec.with_tokenizers()?);
            if spec.has_tokenizers() {
                stage_seconds.insert("tokenizers".to_string(), t.elapsed().as_secs_f64());
            }
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("tessera-build-{i}"))
                .build()
                .map_err(|e| BuildError::Other(format!("starting {threads} build threads: {e}")))?;
            let job = Job {
                spec: &spec,
                pool: &pool,
                progress: &progress,
                hash: &hash,
                files: &files,
                threads,
                memory_limit: opts.memory_limit.unwrap_or_else(default_memory_limit),
                allow_empty: opts.allow_empty,
                budget: match opts.max_output {
                    Some(limit) => OutputBudget::new(limit, "--max-output"),
                    None => {
                        let free = free_bytes(staging.path());
                        OutputBudget::new(
                            free / 2,
                            format!(
                                "half of the {} free where the cache lives",
                                crate::cache::format_bytes(free)
                            ),
                        )
                    }
                },
            };
            let (manifest, b) = job
                .run(staging.path(), canonical.clone(), &mut stage_seconds)
                .map_err(|e| match e {
                    BuildError::Plan(e) => locate(&spec, e),
                    other => other,
                })?;
            let manifest = crate::compress::compress_staged(
                staging.path(),
                manifest,
                spec.shards.zstd_level,
                &pool,
                &mut stage_seconds,
            )?;
            built = Some(b);
            Ok::<_, BuildError>(manifest)
        },
    )?;
    seconds.extend(stage_seconds);
    let artifact = obtained.artifact;
    let Some(b) = built else {
        // A cached artifact built with --allow-empty is still empty.
        if !opts.allow_empty {
            let record = build_record(&artifact);
            let m = &artifact.manifest;
            let kept = record.rows_kept.unwrap_or(m.rows);
            let scan = record.scan.unwrap_or_default();
            check_not_empty(&spec, &m.splits, kept, &scan)?;
        }
        return Ok(hit_report(hash, artifact, t0, seconds));
    };
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    let tokens: Option<u64> = build_record(&artifact)
        .pack
        .map(|p| p.values().map(|s| s.tokens).sum());
    let mut report = built_report(hash, artifact, b, seconds);
    if let Some(tokens) = tokens {
        let total = report.seconds.get("total").copied().unwrap_or(0.0);
        if total > 0.0 {
            report.mtok_per_s_per_core = Some(tokens as f64 / total / threads as f64 / 1e6);
        }
    }
    Ok(report)
}

/// The `build` section of an artifact's manifest, read through its type.
/// It only feeds the report: one that cannot be read reports as empty.
fn build_record(artifact: &crate::cache::Artifact) -> tessera_reader::BuildRecord {
    artifact
        .manifest
        .build_record()
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The report's copies of `build.pack` and `build.skipped` (as JSON, the
/// shape `tessera build --json` prints).
fn report_extras(
    record: &tessera_reader::BuildRecord,
) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
    fn json<T: Serialize>(v: &T) -> serde_json::Value {
        // Maps of numbers with string keys.
        serde_json::to_value(v).unwrap_or_default()
    }
    (
        record.pack.as_ref().map(json),
        record.skipped.as_ref().map(json),
    )
}

/// The report of a build that published `artifact` itself.
fn built_report(
    hash: String,
    artifact: crate::cache::Artifact,
    b: Built,
    seconds: BTreeMap<String, f64>,
) -> BuildReport {
    let m = &artifact.manifest;
    let (pack, skipped) = report_extras(&build_record(&artifact));
    let (plan_source, plan_operator, plan_reason) = match &b.decision {
        Decision::Chunked { source } => (Some(source.clone()), None, None),
        Decision::Global { operator, reason } => {
            (None, Some(operator.clone()), Some(reason.clone()))
        }
    };
    BuildReport {
        rows: IndexedRows(m.splits.iter().map(|s| (s.name.clone(), s.rows)).collect()),
        stride: m.layout.stride,
        bytes: m.shards.iter().map(|s| s.bytes).sum(),
        plan: b.decision.kind().to_string(),
        plan_source,
        plan_operator,
        plan_reason,
        plan_serial: b.serial,
        chunks: b.chunks,
        scan: b.scan,
        rows_kept: b.rows_kept,
        hash,
        path: artifact.path,
        cache_hit: false,
        seconds,
        bytes_fetched: crate::remote_input::bytes_fetched(),
        pack,
        mtok_per_s_per_core: None,
        skipped,
    }
}

fn hit_report(
    hash: String,
    artifact: crate::cache::Artifact,
    t0: Instant,
    mut seconds: BTreeMap<String, f64>,
) -> BuildReport {
    // The lookup has parsed and checked the manifest; nothing else is read.
    let record = build_record(&artifact);
    let m = &artifact.manifest;
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    let (pack, skipped) = report_extras(&record);
    let (plan_source, plan_operator, plan_reason) = match record.plan_detail {
        Some(Decision::Chunked { source }) => (Some(source), None, None),
        Some(Decision::Global { operator, reason }) => (None, Some(operator), Some(reason)),
        None => (None, None, None),
    };
    BuildReport {
        rows: IndexedRows(m.splits.iter().map(|s| (s.name.clone(), s.rows)).collect()),
        stride: m.layout.stride,
        bytes: m.shards.iter().map(|s| s.bytes).sum(),
        plan: record.plan.unwrap_or_else(|| "chunked".into()),
        plan_source,
        plan_operator,
        plan_reason,
        plan_serial: record.plan_serial,
        chunks: record.chunks as usize,
        rows_kept: record.rows_kept.unwrap_or(0),
        scan: record.scan.unwrap_or_default(),
        hash,
        path: artifact.path,
        cache_hit: true,
        seconds,
        bytes_fetched: crate::remote_input::bytes_fetched(),
        pack,
        mtok_per_s_per_core: None,
        skipped,
    }
}

/// An empty artifact is almost always a mistake (a filter that keeps nothing,
/// a split whose weight rounds to no row): an error unless `--allow-empty`.
fn check_not_empty(
    spec: &Spec,
    splits: &[SplitInfo],
    rows_kept: u64,
    scan: &ScanMetrics,
) -> Result<(), BuildError> {
    if rows_kept == 0 {
        let (key, what) = match &spec.filter {
            Some(f) => ("filter", format!("the filter {f:?} keeps")),
            None => ("query", "the query returns".to_string()),
        };
        return Err(BuildError::Spec(spec.error_at(
            key,
            format!(
                "{what} no rows ({} rows scanned), so the artifact would be empty; \
                 fix the {key}, or pass --allow-empty to build it anyway",
                scan.rows_scanned
            ),
        )));
    }
    for s in splits {
        if s.rows == 0 {
            return Err(BuildError::Spec(spec.error_at(
                &format!("split.weights.{}", s.name),
                format!(
                    "split {:?} holds no rows (of {rows_kept} kept): training or evaluation on it \
                     would run zero batches; change the weights or the key, or pass --allow-empty",
                    s.name
                ),
            )));
        }
    }
    Ok(())
}

/// Plans `spec_path` without building it: what `tessera explain` shows.
pub fn explain(spec_path: &Path) -> Result<crate::plan::Explanation, BuildError> {
    let spec = Arc::new(Spec::load(spec_path)?.with_tokenizers()?);
    let planner = Planner::new(
        Arc::clone(&spec),
        PlanOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            batch_rows: BATCH_ROWS,
            memory_limit: default_memory_limit(),
            work_dir: None,
        },
    )
    .map_err(|e| locate(&spec, e))?;
    Ok(planner.explain())
}

/// `tessera explain`'s text.
pub fn format_explanation(e: &crate::plan::Explanation) -> String {
    let mut out = String::new();
    out.push_str(&format!("plan: {}\n", e.decision.describe()));
    if let Some(why) = &e.serial_reason {
        out.push_str(&format!(
            "  runs in one partition because of {why} (its result could depend on row order)\n"
        ));
    }
    match &e.decision {
        Decision::Chunked { .. } => {
            out.push_str(&format!("chunks: {}\n", e.chunks.len()));
            for c in &e.chunks {
                out.push_str(&format!("  {c}\n"));
            }
        }
        Decision::Global { .. } => out.push_str(
            "chunks: the query runs once over all inputs; its sorted output is cut into row \
             ranges for encoding\n",
        ),
    }
    for p in &e.pruning {
        out.push_str(&format!("pruning: {p}\n"));
    }
    out.push_str("\nlogical plan (optimized):\n");
    out.push_str(&indent(&e.logical_plan));
    out.push_str("\nphysical plan:\n");
    out.push_str(&indent(&e.physical_plan));
    out
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// The directory a source's relative file names are taken from: the literal
/// directory prefix of its path or glob (so hive partition folders below it
/// are part of each file's name, and of the artifact hash).
fn source_root(spec_path: &Path, pattern: &str, files: &[PathBuf]) -> PathBuf {
    let base = spec_path.parent().unwrap_or(Path::new("."));
    let glob = pattern.find(['*', '?', '[', '{']);
    let literal = match glob {
        Some(i) => &pattern[..i],
        None => pattern,
    };
    if crate::remote_input::is_url(pattern) {
        // Objects below a prefix are named from the prefix; a glob's and a
        // single object's from the folder holding them.
        let lit = Path::new(literal.trim_end_matches('/'));
        let prefix = glob.is_none() && files.first().is_some_and(|f| f != lit);
        if literal.ends_with('/') || prefix {
            return lit.to_path_buf();
        }
        return lit.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    let literal = match literal.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("file") => {
            rest.strip_prefix("localhost").unwrap_or(rest)
        }
        _ => literal,
    };
    let full = base.join(literal);
    if literal.ends_with('/') || full.is_dir() {
        return full;
    }
    match full.parent() {
        Some(parent) => parent.to_path_buf(),
        None => files
            .first()
            .and_then(|f| f.parent())
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    }
}
