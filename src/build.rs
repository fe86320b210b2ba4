//! The build driver: spec -> fingerprint -> cache lookup -> statistics tasks
//! -> shard tasks -> commit. Tasks run on a rayon pool; their results are
//! combined in chunk order, so thread count never changes the output.

use crate::cache::Cache;
use crate::fingerprint::{self, SourceFiles};
use crate::plan::{Chunk, Decision, PlanOptions, Planner, ScanMetrics, StatsPartial};
use crate::progress::{Progress, ProgressMode};
use crate::spec::Spec;
use crate::transform::{FrozenStats, SEMANTICS_VERSION};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tessera_reader::{
    EpochOrder, FORMAT_VERSION, FieldSpec, Manifest, RecordLayout, ShardInfo, ShardWriter,
    SplitInfo,
};

/// Rows per DataFusion batch inside a task; with the shard buffers this bounds
/// a build's memory, whatever the input size.
pub const BATCH_ROWS: usize = 8192;

/// Bytes of records one batch may take: wide records get smaller batches.
const BATCH_BYTES: u64 = 64 << 20;

/// Rows per batch for records of `stride` bytes.
fn batch_rows(stride: u64) -> usize {
    (BATCH_BYTES / stride.max(1)).clamp(1, BATCH_ROWS as u64) as usize
}

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

/// A build failure, with the spec, input, or file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The spec is invalid, or a value in the data does not fit it.
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    /// Hashing the inputs failed.
    #[error(transparent)]
    Fingerprint(#[from] fingerprint::FingerprintError),
    /// The cache could not be used.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// Planning, running or encoding failed.
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    /// The format crate rejected something.
    #[error(transparent)]
    Format(#[from] tessera_reader::Error),
    /// Anything else, with context.
    #[error("{0}")]
    Other(String),
}

/// The record layout a spec produces.
pub fn layout_of(spec: &Spec) -> Result<RecordLayout, BuildError> {
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

/// The default memory limit: half of the machine's memory (4 GiB when it
/// cannot be read).
pub fn default_memory_limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024);
    total.map_or(4 << 30, |t| t / 2)
}

/// What the build of an artifact found, beside its manifest.
struct Built {
    decision: Decision,
    serial: Option<String>,
    chunks: usize,
    scan: ScanMetrics,
    rows_kept: u64,
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
    let spec = Arc::new(spec);
    let mut built: Option<Built> = None;
    let mut stage_seconds = BTreeMap::new();
    let obtained = cache.get_or_build(
        &hash,
        || progress.line(&format!("waiting for another build of {}", &hash[..16])),
        |staging| {
            progress.line(&format!("building {} -> {}", spec.name, &hash[..16]));
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
            let m = &artifact.manifest;
            let kept = m
                .build
                .get("rows_kept")
                .and_then(|v| v.as_u64())
                .unwrap_or(m.rows);
            let scan: ScanMetrics = m
                .build
                .get("scan")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            check_not_empty(&spec, &m.splits, kept, &scan)?;
        }
        return Ok(hit_report(hash, artifact, t0, seconds));
    };
    let m = &artifact.manifest;
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    let (plan_source, plan_operator, plan_reason) = match &b.decision {
        Decision::Chunked { source } => (Some(source.clone()), None, None),
        Decision::Global { operator, reason } => {
            (None, Some(operator.clone()), Some(reason.clone()))
        }
    };
    Ok(BuildReport {
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
    })
}

/// Everything one build of an artifact needs.
struct Job<'a> {
    spec: &'a Arc<Spec>,
    pool: &'a rayon::ThreadPool,
    progress: &'a Progress,
    hash: &'a str,
    files: &'a [fingerprint::InputFile],
    threads: usize,
    memory_limit: u64,
    allow_empty: bool,
}

impl Job<'_> {
    /// Plans, runs the statistics and encode tasks into `staging`, and
    /// returns the manifest to publish.
    fn run(
        &self,
        staging: &Path,
        canonical: serde_json::Value,
        seconds: &mut BTreeMap<String, f64>,
    ) -> Result<(Manifest, Built), BuildError> {
        let spec = self.spec;
        let work = staging.join("work");
        std::fs::create_dir_all(&work)
            .map_err(|e| BuildError::Other(format!("{}: {e}", work.display())))?;
        let t = Instant::now();
        let layout = layout_of(spec)?;
        let mut planner = Planner::new(
            Arc::clone(spec),
            PlanOptions {
                threads: self.threads,
                batch_rows: batch_rows(layout.stride),
                memory_limit: self.memory_limit,
                work_dir: Some(work.clone()),
            },
        )?;
        let decision = planner.decision().clone();
        self.progress
            .line(&format!("plan: {}", decision.describe()));
        if let Some(why) = planner.serial_reason() {
            self.progress.line(&format!(
                "plan: one partition, because of {why} (its result could depend on row order)"
            ));
        }
        seconds.insert("plan".to_string(), t.elapsed().as_secs_f64());

        let mut scan = ScanMetrics::default();
        if let Decision::Global { .. } = decision {
            let t = Instant::now();
            let stage = self.progress.stage("query", 1);
            let per_chunk = (spec
                .shards
                .target_bytes
                .saturating_sub(tessera_reader::HEADER_LEN as u64)
                / layout.stride.max(1))
            .max(1);
            scan = planner.materialize(&work, per_chunk, &|rows| stage.advance(rows, 0))?;
            stage.chunk_done();
            stage.finish();
            seconds.insert("query".to_string(), t.elapsed().as_secs_f64());
        }
        let chunks = planner.chunks().to_vec();

        // Statistics pass: partials per chunk, merged in chunk order.
        let t = Instant::now();
        let frozen: Vec<Option<Vec<FrozenStats>>> = if planner.needs_stats() {
            let stage = self.progress.stage("stats", chunks.len() as u64);
            let partials: Vec<(StatsPartial, ScanMetrics)> = self.pool.install(|| {
                chunks
                    .par_iter()
                    .map(|c| {
                        let r = planner.stats_task(c);
                        if let Ok((_, m)) = &r {
                            stage.advance(m.rows_scanned, 0);
                        }
                        stage.chunk_done();
                        r
                    })
                    .collect::<Result<_, _>>()
            })?;
            stage.finish();
            let mut merged = StatsPartial::new(spec);
            for (p, _) in partials {
                merged.merge(p);
            }
            merged.freeze(spec)?
        } else {
            vec![None; spec.fields.len()]
        };
        seconds.insert("stats".to_string(), t.elapsed().as_secs_f64());

        // Encode pass: each chunk writes its own shards.
        let t = Instant::now();
        let shuffle = spec.order.shuffle_seed;
        let encode_dir = if shuffle.is_some() {
            let d = work.join("unshuffled");
            std::fs::create_dir_all(&d)
                .map_err(|e| BuildError::Other(format!("{}: {e}", d.display())))?;
            d
        } else {
            staging.to_path_buf()
        };
        let stage = self.progress.stage("encode", chunks.len() as u64);
        let outputs = self.pool.install(|| {
            chunks
                .par_iter()
                .map(|c: &Chunk| {
                    let r = planner.encode_task(
                        c,
                        &layout,
                        &frozen,
                        &encode_dir,
                        spec.shards.target_bytes,
                        &|rows, bytes| stage.advance(rows, bytes),
                    );
                    stage.chunk_done();
                    r
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        stage.finish();
        seconds.insert("encode".to_string(), t.elapsed().as_secs_f64());

        // Commit: shards split-major, chunk order within a split.
        let names = split_names(spec);
        let mut rows_kept = 0;
        let mut shards: Vec<ShardInfo> = Vec::new();
        let mut splits = Vec::new();
        let mut start = 0u64;
        for (s, name) in names.iter().enumerate() {
            let mut rows = 0;
            for (out, _) in &outputs {
                for (si, info) in &out.shards {
                    if *si == s {
                        shards.push(info.clone());
                    }
                }
                rows += out.rows_per_split[s];
            }
            splits.push(SplitInfo {
                name: name.clone(),
                start,
                rows,
            });
            start += rows;
        }
        for (out, m) in &outputs {
            scan.add(m);
            rows_kept += out.rows_kept;
        }
        if !self.allow_empty {
            check_not_empty(spec, &splits, rows_kept, &scan)?;
        }

        let t = Instant::now();
        if let Some(seed) = shuffle {
            let (s2, sp2) = shuffle_splits(
                &encode_dir,
                staging,
                &layout,
                shards,
                splits,
                seed,
                spec.shards.target_bytes,
            )?;
            shards = s2;
            splits = sp2;
        }
        seconds.insert("shuffle".to_string(), t.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&work)
            .map_err(|e| BuildError::Other(format!("{}: {e}", work.display())))?;

        // The inputs must still be what was hashed: a file that changed while
        // the build read it would publish data under a hash it does not have.
        fingerprint::recheck(self.files)?;

        let mut manifest = Manifest::new(layout.clone(), shards, splits)?;
        manifest.artifact_hash = self.hash.to_string();
        manifest.name = spec.name.clone();
        manifest.created_by = format!("tessera {}", env!("CARGO_PKG_VERSION"));
        manifest.spec = canonical;
        manifest.inputs = fingerprint::manifest_inputs(self.files);
        manifest.stats = stats_json(spec, &frozen);
        manifest.build = serde_json::json!({
            "semantics_version": SEMANTICS_VERSION,
            "plan": decision.kind(),
            "plan_detail": decision,
            "plan_serial": planner.serial_reason(),
            "chunks": chunks.len(),
            "rows_kept": rows_kept,
            "scan": scan,
        });
        Ok((
            manifest,
            Built {
                serial: planner.serial_reason().map(str::to_string),
                decision,
                chunks: chunks.len(),
                scan,
                rows_kept,
            },
        ))
    }
}

fn hit_report(
    hash: String,
    artifact: crate::cache::Artifact,
    t0: Instant,
    mut seconds: BTreeMap<String, f64>,
) -> BuildReport {
    // The lookup has parsed and checked the manifest; nothing else is read.
    let m = &artifact.manifest;
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    let scan: ScanMetrics = m
        .build
        .get("scan")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let count = |key: &str| m.build.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
    let detail = m.build.get("plan_detail");
    BuildReport {
        rows: IndexedRows(m.splits.iter().map(|s| (s.name.clone(), s.rows)).collect()),
        stride: m.layout.stride,
        bytes: m.shards.iter().map(|s| s.bytes).sum(),
        plan: text(m.build.get("plan")).unwrap_or_else(|| "chunked".into()),
        plan_source: text(detail.and_then(|d| d.get("source"))),
        plan_operator: text(detail.and_then(|d| d.get("operator"))),
        plan_reason: text(detail.and_then(|d| d.get("reason"))),
        plan_serial: text(m.build.get("plan_serial")),
        chunks: count("chunks") as usize,
        rows_kept: count("rows_kept"),
        scan,
        hash,
        path: artifact.path,
        cache_hit: true,
        seconds,
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
    let spec = Arc::new(Spec::load(spec_path)?);
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

/// The manifest's `stats` object: per field with statistics, one entry per
/// stacked column (or a single entry).
fn stats_json(spec: &Spec, frozen: &[Option<Vec<FrozenStats>>]) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for (f, fr) in spec.fields.iter().zip(frozen) {
        if let Some(v) = fr {
            map.insert(f.name.clone(), serde_json::to_value(v).unwrap_or_default());
        }
    }
    serde_json::Value::Object(map)
}

/// The build-time shuffle: each split's records are permuted with the seeded
/// O(1)-memory permutation of the reader crate (epoch 0) and rewritten.
fn shuffle_splits(
    src_dir: &Path,
    dst_dir: &Path,
    layout: &RecordLayout,
    shards: Vec<ShardInfo>,
    splits: Vec<SplitInfo>,
    seed: u64,
    target_bytes: u64,
) -> Result<(Vec<ShardInfo>, Vec<SplitInfo>), BuildError> {
    let tmp = Manifest::new(layout.clone(), shards, splits.clone())?;
    tessera_reader::write_manifest(src_dir, &tmp)?;
    let ds = tessera_reader::Dataset::open(src_dir)?;
    let stride = layout.stride as usize;
    let target_rows =
        (target_bytes.saturating_sub(tessera_reader::HEADER_LEN as u64) / layout.stride).max(1);
    let mut out = Vec::new();
    let per = batch_rows(layout.stride) as u64;
    let bytes = per as usize * stride;
    let mut buf = Vec::new();
    buf.try_reserve_exact(bytes).map_err(|_| {
        BuildError::Other(format!(
            "the shuffle buffer of {bytes} bytes ({per} records of {stride}) cannot be allocated"
        ))
    })?;
    buf.resize(bytes, 0);
    let mut idx = Vec::with_capacity(per as usize);
    for split in &splits {
        let view = ds.split(&split.name)?;
        let order = EpochOrder::shuffled(view.len(), seed, 0);
        let mut pos = 0u64;
        let mut seq = 0u32;
        while pos < view.len() {
            let name = format!("{}-{seq:05}.bin", split.name);
            seq += 1;
            let mut w = ShardWriter::create(dst_dir, &name, layout)?;
            let end = (pos + target_rows).min(view.len());
            while pos < end {
                let n = (end - pos).min(per);
                idx.clear();
                idx.extend((pos..pos + n).map(|p| order.get(p)));
                let out_bytes = &mut buf[..n as usize * stride];
                view.gather(&idx, out_bytes)?;
                w.write_records(out_bytes)?;
                pos += n;
            }
            out.push(w.finish()?);
        }
    }
    Ok((out, splits))
}

/// The directory a source's relative file names are taken from: the literal
/// directory prefix of its path or glob (so hive partition folders below it
/// are part of each file's name, and of the artifact hash).
fn source_root(spec_path: &Path, pattern: &str, files: &[PathBuf]) -> PathBuf {
    let base = spec_path.parent().unwrap_or(Path::new("."));
    let literal = match pattern.find(['*', '?', '[', '{']) {
        Some(i) => &pattern[..i],
        None => pattern,
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
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Points a query error at the spec key that names the missing column, when
/// DataFusion reports one ("No field named x"), so the message carries the
/// spec file, the key path and the line; otherwise prefixes the spec file.
fn locate(spec: &Spec, e: crate::plan::PlanError) -> BuildError {
    match &e {
        crate::plan::PlanError::Encode { key: Some(key), .. }
        | crate::plan::PlanError::Source { key, .. } => {
            return BuildError::Spec(spec.error_at(key, e.to_string()));
        }
        _ => {}
    }
    let msg = in_user_terms(&e.to_string());
    // Overflow in a field's expression names the field's output column.
    if let Some(rest) = msg.split("integer overflow in __f").nth(1) {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Some(f) = digits
            .parse::<usize>()
            .ok()
            .and_then(|i| spec.fields.get(i))
        {
            let msg = msg.replace(&format!("in __f{digits}"), "in the expression");
            return BuildError::Spec(spec.error_at(&format!("fields.{}", f.name), msg));
        }
    }
    if msg.contains("integer overflow in __split") {
        return BuildError::Spec(
            spec.error_at("split.key", msg.replace("in __split", "in the key")),
        );
    }
    let missing = msg.split("No field named ").nth(1).and_then(|rest| {
        let token: String = rest
            .trim_start_matches(['"', '`'])
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!token.is_empty()).then_some(token)
    });
    if let Some(name) = missing.map(|n| n.trim_start_matches("__input.").to_string()) {
        let mentions = |text: &str| text.to_lowercase().contains(&name.to_lowercase());
        for f in &spec.fields {
            let uses = match &f.input {
                crate::spec::FieldInput::Column(c) => c.eq_ignore_ascii_case(&name),
                crate::spec::FieldInput::Columns(cs) => {
                    cs.iter().any(|c| c.eq_ignore_ascii_case(&name))
                }
                crate::spec::FieldInput::Expr(x) => mentions(x),
            };
            if uses {
                return BuildError::Spec(spec.error_at(&format!("fields.{}", f.name), msg));
            }
        }
        if spec.filter.as_deref().is_some_and(mentions) {
            return BuildError::Spec(spec.error_at("filter", msg));
        }
        if spec.split.as_ref().is_some_and(|s| mentions(&s.key)) {
            return BuildError::Spec(spec.error_at("split.key", msg));
        }
        if spec.query.as_deref().is_some_and(mentions) {
            return BuildError::Spec(spec.error_at("query", msg));
        }
    }
    BuildError::Other(format!("{}: {msg}", spec.path.display()))
}
