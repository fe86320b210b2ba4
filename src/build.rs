//! The build driver: spec -> fingerprint -> cache lookup -> statistics tasks
//! -> shard tasks -> commit. Tasks run on a rayon pool; their results are
//! combined in chunk order, so thread count never changes the output.

use crate::cache::Cache;
use crate::fingerprint::{self, SourceFiles};
use crate::plan::{Chunk, Planner, ScanMetrics, StatsPartial};
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

/// Options of one build.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Cache root; `None` resolves `TESSERA_CACHE_DIR`, then the default.
    pub cache_dir: Option<PathBuf>,
    /// Worker threads (default: available cores).
    pub threads: Option<usize>,
    /// Progress display.
    pub progress: ProgressMode,
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
    /// Rows per split.
    pub rows: BTreeMap<String, u64>,
    /// Record stride in bytes.
    pub stride: u64,
    /// Bytes of shard files.
    pub bytes: u64,
    /// Chunks the input was cut into.
    pub chunks: usize,
    /// Scan counters summed over the encode pass.
    pub scan: ScanMetrics,
    /// Rows that passed the filter.
    pub rows_kept: u64,
    /// Seconds per stage.
    pub seconds: BTreeMap<String, f64>,
}

/// A build failure, with the spec, input, or file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The spec is invalid.
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
    Ok(RecordLayout::packed(&fields)?)
}

fn split_names(spec: &Spec) -> Vec<String> {
    match &spec.split {
        Some(s) => s.weights.iter().map(|(n, _)| n.clone()).collect(),
        None => vec!["all".into()],
    }
}

/// Builds `spec_path` (or returns the cached artifact).
pub fn build(spec_path: &Path, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let t0 = Instant::now();
    let mut seconds = BTreeMap::new();
    let spec = Spec::load(spec_path)?;
    let cache = Cache::resolve(opts.cache_dir.as_deref())?;
    let progress = Progress::new(opts.progress);

    let t = Instant::now();
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
    seconds.insert("fingerprint".to_string(), t.elapsed().as_secs_f64());

    if let Some(artifact) = cache.lookup(&hash)? {
        return Ok(hit_report(hash, artifact, t0, seconds));
    }
    let lock = cache.lock(&hash)?;
    // Someone else may have built it while we waited for the lock.
    if let Some(artifact) = cache.lookup(&hash)? {
        return Ok(hit_report(hash, artifact, t0, seconds));
    }
    progress.line(&format!("building {} -> {}", spec.name, &hash[..16]));

    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("tessera-build-{i}"))
        .build()
        .map_err(|e| BuildError::Other(format!("starting {threads} build threads: {e}")))?;

    let spec = Arc::new(spec);
    match build_artifact(
        &spec, &lock, &pool, &progress, &hash, &files, canonical, t0, seconds,
    ) {
        Err(BuildError::Plan(e)) => Err(locate(&spec, e)),
        other => other,
    }
}

/// The part of a build after the cache lookup, under the build lock.
#[allow(clippy::too_many_arguments)]
fn build_artifact(
    spec: &Arc<Spec>,
    lock: &crate::cache::BuildLock,
    pool: &rayon::ThreadPool,
    progress: &Progress,
    hash: &str,
    files: &[fingerprint::InputFile],
    canonical: serde_json::Value,
    t0: Instant,
    mut seconds: BTreeMap<String, f64>,
) -> Result<BuildReport, BuildError> {
    let hash = hash.to_string();
    let t = Instant::now();
    let planner = Planner::new(Arc::clone(spec), BATCH_ROWS)?;
    let chunks = planner.chunks();
    let layout = layout_of(spec)?;
    seconds.insert("plan".to_string(), t.elapsed().as_secs_f64());

    // Statistics pass: partials per chunk, merged in chunk order.
    let t = Instant::now();
    let frozen: Vec<Option<Vec<FrozenStats>>> = if planner.stats_fields().is_empty() {
        vec![None; spec.fields.len()]
    } else {
        let stage = progress.stage("stats", chunks.len() as u64);
        let partials: Vec<(StatsPartial, ScanMetrics)> = pool.install(|| {
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
        let mut it = partials.into_iter();
        let mut merged = match it.next() {
            Some((p, _)) => p,
            None => StatsPartial::new(spec, &planner.stats_fields()),
        };
        for (p, _) in it {
            merged.merge(p);
        }
        merged.freeze(spec)
    };
    seconds.insert("stats".to_string(), t.elapsed().as_secs_f64());

    // Encode pass: each chunk writes its own shards.
    let t = Instant::now();
    let staging = lock.stage()?;
    let shuffle = spec.order.shuffle_seed;
    let encode_dir = if shuffle.is_some() {
        let d = staging.path().join("unshuffled");
        std::fs::create_dir_all(&d)
            .map_err(|e| BuildError::Other(format!("{}: {e}", d.display())))?;
        d
    } else {
        staging.path().to_path_buf()
    };
    let stage = progress.stage("encode", chunks.len() as u64);
    let outputs = pool.install(|| {
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
    let mut scan = ScanMetrics::default();
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

    let t = Instant::now();
    if let Some(seed) = shuffle {
        let (s2, sp2) = shuffle_splits(
            &encode_dir,
            staging.path(),
            &layout,
            shards,
            splits,
            seed,
            spec.shards.target_bytes,
        )?;
        shards = s2;
        splits = sp2;
        std::fs::remove_dir_all(&encode_dir)
            .map_err(|e| BuildError::Other(format!("{}: {e}", encode_dir.display())))?;
    }
    seconds.insert("shuffle".to_string(), t.elapsed().as_secs_f64());

    let bytes = shards.iter().map(|s| s.bytes).sum();
    let mut manifest = Manifest::new(layout.clone(), shards, splits)?;
    manifest.artifact_hash = hash.clone();
    manifest.name = spec.name.clone();
    manifest.created_by = format!("tessera {}", env!("CARGO_PKG_VERSION"));
    manifest.spec = canonical;
    manifest.inputs = fingerprint::manifest_inputs(files);
    manifest.stats = stats_json(spec, &frozen);
    manifest.build = serde_json::json!({
        "semantics_version": SEMANTICS_VERSION,
        "chunks": chunks.len(),
        "rows_kept": rows_kept,
        "scan": scan,
    });
    let rows: BTreeMap<String, u64> = manifest
        .splits
        .iter()
        .map(|s| (s.name.clone(), s.rows))
        .collect();
    let path = staging.publish(&manifest)?.path;
    seconds.insert("total".to_string(), t0.elapsed().as_secs_f64());
    Ok(BuildReport {
        hash,
        path,
        cache_hit: false,
        rows,
        stride: layout.stride,
        bytes,
        chunks: chunks.len(),
        scan,
        rows_kept,
        seconds,
    })
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
    BuildReport {
        rows: m.splits.iter().map(|s| (s.name.clone(), s.rows)).collect(),
        stride: m.layout.stride,
        bytes: m.shards.iter().map(|s| s.bytes).sum(),
        chunks: count("chunks") as usize,
        rows_kept: count("rows_kept"),
        scan,
        hash,
        path: artifact.path,
        cache_hit: true,
        seconds,
    }
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
    let mut buf = vec![0u8; 4096 * stride];
    let mut idx = Vec::with_capacity(4096);
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
                let n = (end - pos).min(4096);
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

/// Points a query error at the spec key that names the missing column, when
/// DataFusion reports one ("No field named x"), so the message carries the
/// spec file, the key path and the line; otherwise prefixes the spec file.
fn locate(spec: &Spec, e: crate::plan::PlanError) -> BuildError {
    let msg = e.to_string();
    let missing = msg.split("No field named ").nth(1).and_then(|rest| {
        let token: String = rest
            .trim_start_matches(['"', '`'])
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!token.is_empty()).then_some(token)
    });
    if let Some(name) = missing {
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
