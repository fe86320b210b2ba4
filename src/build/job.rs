//! One build of an artifact, under its lock, into a staging directory: plan
//! the query, run the build's task DAG on the build's threads (the
//! [`pipeline`]), shuffle if asked, and assemble the manifest (large
//! vocabularies written to files beside it).

use super::pipeline::{MemoryOutputs, Pipeline};
use super::{BuildError, check_not_empty, layout_of, split_names};
use crate::accumulators::{FrozenStats, SEMANTICS_VERSION};
use crate::fingerprint;
use crate::plan::{Decision, EncodeOutput, OutputBudget, PlanOptions, Planner, ScanMetrics};
use crate::progress::Progress;
use crate::resources::batch_rows;
use crate::spec::Spec;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use tessera_reader::{
    BuildRecord, EpochOrder, FileInfo, InlineVocab, Manifest, PackRecord, QueryColumn,
    RecordLayout, ShardInfo, ShardWriter, SplitInfo, StatsEntry, VOCAB_INLINE, VocabEntry,
};

/// What the build of an artifact found, beside its manifest.
pub(super) struct Built {
    pub(super) decision: Decision,
    pub(super) serial: Option<String>,
    pub(super) chunks: usize,
    pub(super) scan: ScanMetrics,
    pub(super) rows_kept: u64,
}

/// Everything one build of an artifact needs.
pub(super) struct Job<'a> {
    pub(super) spec: &'a Arc<Spec>,
    pub(super) pool: &'a rayon::ThreadPool,
    pub(super) progress: &'a Progress,
    pub(super) hash: &'a str,
    pub(super) files: &'a [fingerprint::InputFile],
    pub(super) threads: usize,
    pub(super) memory_limit: u64,
    pub(super) allow_empty: bool,
    pub(super) budget: OutputBudget,
}

impl Job<'_> {
    /// Plans, runs the statistics and encode tasks into `staging`, and
    /// returns the manifest to publish.
    pub(super) fn run(
        &self,
        staging: &Path,
        canonical: serde_json::Value,
        seconds: &mut BTreeMap<String, f64>,
    ) -> Result<(Manifest, Built), BuildError> {
        let spec = self.spec;
        let work = staging.join("work");
        std::fs::create_dir_all(&work).map_err(|e| BuildError::io(&work, e))?;
        let t = Instant::now();
        let layout = layout_of(spec)?;
        let planner = Planner::new(
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
        if let Some(note) = planner.order_note() {
            self.progress.line(&format!("plan: note: {note}"));
        }
        if let Some(why) = planner.serial_reason() {
            self.progress.line(&format!(
                "plan: one partition, because of {why} (its result could depend on row order)"
            ));
        }
        seconds.insert("plan".to_string(), t.elapsed().as_secs_f64());
        crate::fault::point("build.planned");

        // Shards to shuffle and documents to pack are written to the work
        // area first: what the commit publishes is made from them.
        let encode_dir = if spec.order.shuffle_seed.is_some() || spec.pack.is_some() {
            let d = work.join("unshuffled");
            std::fs::create_dir_all(&d).map_err(|e| BuildError::io(&d, e))?;
            d
        } else {
            staging.to_path_buf()
        };
        let global = matches!(decision, Decision::Global { .. });
        let tasks = super::dag::dag(global, planner.chunks(), planner.needs_stats(), None);
        let serial = planner.serial_reason().map(str::to_string);
        let query_columns = planner
            .query_schema()
            .map(tessera_transform::serving::query_columns_record);
        let pipeline = Pipeline {
            spec,
            planner: RwLock::new(planner),
            layout: layout.clone(),
            pool: self.pool,
            work_dir: work.clone(),
            budget: Some(&self.budget),
            progress: Some(self.progress),
            seconds: Mutex::default(),
            staged: None,
        };
        let out = MemoryOutputs::new(&encode_dir);
        pipeline.run_dag(&tasks, &out)?;
        seconds.extend(
            pipeline
                .seconds
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for stage in ["stats", "encode"] {
            seconds.entry(stage.to_string()).or_insert(0.0);
        }
        let frozen = out.take_frozen(spec.fields.len());
        let (outputs, scan, chunks) = out.take_encoded();

        let t = Instant::now();
        let commit = Commit {
            spec,
            layout: &layout,
            hash: self.hash,
            files: self.files,
            canonical,
            decision,
            serial,
            chunks,
            frozen: &frozen,
            allow_empty: self.allow_empty,
            scan,
            query_columns,
        };
        let out = commit.assemble(outputs, &encode_dir, staging)?;
        seconds.insert("commit".to_string(), t.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&work).map_err(|e| BuildError::io(&work, e))?;
        Ok(out)
    }
}

/// The shards of every chunk ordered split-major (chunk order within a
/// split), and each split's first record and rows.
fn split_major(
    names: &[String],
    outputs: &[(EncodeOutput, ScanMetrics)],
) -> (Vec<ShardInfo>, Vec<SplitInfo>) {
    let mut shards: Vec<ShardInfo> = Vec::new();
    let mut splits = Vec::new();
    let mut start = 0u64;
    for (s, name) in names.iter().enumerate() {
        let mut rows = 0;
        for (out, _) in outputs {
            for (si, info) in &out.shards {
                if *si == s {
                    shards.push(info.clone());
                }
            }
            rows += out.rows_per_split.get(s).copied().unwrap_or(0);
        }
        splits.push(SplitInfo {
            name: name.clone(),
            start,
            rows,
        });
        start += rows;
    }
    (shards, splits)
}

/// The last step of a build: the task outputs assembled into a manifest.
pub(crate) struct Commit<'a> {
    pub(crate) spec: &'a Spec,
    pub(crate) layout: &'a RecordLayout,
    pub(crate) hash: &'a str,
    pub(crate) files: &'a [fingerprint::InputFile],
    pub(crate) canonical: serde_json::Value,
    pub(crate) decision: Decision,
    pub(crate) serial: Option<String>,
    pub(crate) chunks: usize,
    pub(crate) frozen: &'a [Option<Vec<FrozenStats>>],
    pub(crate) allow_empty: bool,
    /// Counters of work done outside the encode tasks (a global query).
    pub(crate) scan: ScanMetrics,
    /// The query's output columns and types (for the serving transform).
    pub(crate) query_columns: Option<Vec<QueryColumn>>,
}

impl Commit<'_> {
    /// Orders the shards split-major and chunk order within a split, refuses
    /// an empty set (unless allowed), shuffles if the spec asks, checks the
    /// inputs are unchanged, and returns the manifest. The shards written in
    /// `encode_dir` end up in `staging`.
    pub(crate) fn assemble(
        self,
        outputs: Vec<(EncodeOutput, ScanMetrics)>,
        encode_dir: &Path,
        staging: &Path,
    ) -> Result<(Manifest, Built), BuildError> {
        let spec = self.spec;
        let names = split_names(spec);
        let mut scan = self.scan;
        let mut rows_kept = 0;
        let (mut shards, mut splits) = split_major(&names, &outputs);
        // Every image field that skips bad images has a count, 0 included.
        let mut skipped: BTreeMap<String, u64> = spec
            .fields
            .iter()
            .filter(|f| {
                f.transforms.iter().any(|t| {
                    matches!(t, crate::spec::Transform::Image(i)
                        if i.on_error == tessera_transform::image::OnError::Skip)
                })
            })
            .map(|f| (f.name.clone(), 0))
            .collect();
        for (out, m) in &outputs {
            scan.add(m);
            rows_kept += out.rows_kept;
            for (field, n) in &out.skipped {
                *skipped.entry(field.clone()).or_default() += n;
            }
        }
        let mut packed = None;
        if let Some(p) = &spec.pack {
            let (s, sp, figures) =
                pack_streams(p, self.layout, &names, &outputs, encode_dir, spec)?;
            (shards, splits) = (s, sp);
            packed = Some(figures);
        }
        if !self.allow_empty {
            check_not_empty(spec, &splits, rows_kept, &scan)?;
        }
        if let Some(seed) = spec.order.shuffle_seed {
            (shards, splits) = shuffle_splits(
                encode_dir,
                staging,
                self.layout,
                shards,
                splits,
                seed,
                spec.shards.target_bytes,
            )?;
        } else if encode_dir != staging {
            for sh in &shards {
                tessera_reader::durable::move_file(
                    &encode_dir.join(&sh.file),
                    &staging.join(&sh.file),
                )?;
            }
        }
        crate::fault::point("build.shuffled");

        // The inputs must still be what was hashed: a file that changed while
        // the build read it would publish data under a hash it does not have.
        fingerprint::recheck(self.files)?;
        crate::fault::point("build.rechecked");

        let mut manifest = Manifest::new(self.layout.clone(), shards, splits)?;
        manifest.artifact_hash = self.hash.to_string();
        manifest.name = spec.name.clone();
        manifest.created_by = format!("tessera {}", env!("CARGO_PKG_VERSION"));
        manifest.spec = self.canonical;
        manifest.inputs = fingerprint::manifest_inputs(self.files);
        let (stats, mut files) = stats_entries(spec, self.frozen, staging)?;
        files.extend(tokenizer_files(spec, staging)?);
        manifest.set_stats(&stats);
        manifest.files = files;
        manifest.set_build_record(&BuildRecord {
            semantics_version: u64::from(SEMANTICS_VERSION),
            plan: Some(self.decision.kind().to_string()),
            plan_detail: Some(self.decision.clone()),
            plan_serial: self.serial.clone(),
            chunks: self.chunks as u64,
            rows_kept: Some(rows_kept),
            scan: Some(scan),
            pack: packed,
            skipped: (!skipped.is_empty()).then_some(skipped),
            query_columns: self.query_columns,
        });
        Ok((
            manifest,
            Built {
                serial: self.serial,
                decision: self.decision,
                chunks: self.chunks,
                scan,
                rows_kept,
            },
        ))
    }
}

/// The manifest's `build.pack`: per split, what packing did.
type PackFigures = BTreeMap<String, PackRecord>;

/// Packs each split's documents (the tasks' streams, in task order) into
/// window shards in `dir`; returns the shards, the splits and the packing
/// figures per split for the manifest.
fn pack_streams(
    opts: &crate::pack::PackOptions,
    layout: &RecordLayout,
    names: &[String],
    outputs: &[(EncodeOutput, ScanMetrics)],
    dir: &Path,
    spec: &Spec,
) -> Result<(Vec<ShardInfo>, Vec<SplitInfo>, PackFigures), BuildError> {
    let mut shards = Vec::new();
    let mut splits = Vec::new();
    let mut figures = BTreeMap::new();
    let mut start = 0;
    for (s, name) in names.iter().enumerate() {
        let streams: Vec<&crate::pack::stream::StreamInfo> = outputs
            .iter()
            .flat_map(|(o, _)| o.streams.iter().filter(|x| x.split == s))
            .collect();
        let out = crate::pack::windows::pack_split(
            opts,
            layout,
            name,
            &streams,
            dir,
            dir,
            spec.shards.target_bytes,
        )
        .map_err(|e| BuildError::Spec(spec.error_at("pack", e.to_string())))?;
        for st in &streams {
            let _ = std::fs::remove_file(dir.join(&st.file));
        }
        let st = &out.stats;
        let skipped: u64 = outputs
            .iter()
            .filter_map(|(o, _)| o.skipped_conversations.get(s))
            .sum();
        figures.insert(
            name.clone(),
            PackRecord {
                documents: st.documents,
                empty_documents: st.empty_documents,
                windows: st.windows,
                tokens: st.tokens,
                padding_tokens: st.padding_tokens,
                padding_fraction: st.padding_fraction(opts.capacity()),
                split_documents: st.split_documents,
                truncated_documents: st.truncated_documents,
                truncated_tokens: st.truncated_tokens,
                dropped_documents: st.dropped_documents,
                skipped_conversations: skipped,
            },
        );
        shards.extend(out.shards);
        splits.push(SplitInfo {
            name: name.clone(),
            start,
            rows: out.rows,
        });
        start += out.rows;
    }
    Ok((shards, splits, figures))
}

/// The manifest's `stats`: per field, one entry per slot.
type StatsSection = BTreeMap<String, Vec<StatsEntry>>;

/// The manifest's `stats` section (per field with statistics, one entry per
/// stacked column, or a single entry), and the vocabulary files it refers to,
/// written into `dir`: vocabularies of more than [`VOCAB_INLINE`] values go
/// to `vocab-FIELD-SLOT.jsonl`, one `[value, count]` JSON array per line in
/// id order (docs/FORMAT.md, section 3.7).
fn stats_entries(
    spec: &Spec,
    frozen: &[Option<Vec<FrozenStats>>],
    dir: &Path,
) -> Result<(StatsSection, Vec<FileInfo>), BuildError> {
    use std::io::Write as _;
    let mut map = BTreeMap::new();
    let mut files = Vec::new();
    for (f, fr) in spec.fields.iter().zip(frozen) {
        let Some(slots) = fr else { continue };
        let mut entries = Vec::with_capacity(slots.len());
        for (j, st) in slots.iter().enumerate() {
            match st {
                FrozenStats::Vocab(InlineVocab {
                    values,
                    counts,
                    oov,
                }) if values.len() > VOCAB_INLINE => {
                    let name = tessera_reader::vocab_file_name(&f.name, j);
                    let path = dir.join(&name);
                    let io = |e: std::io::Error| BuildError::io(&path, e);
                    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
                    for (v, c) in values.iter().zip(counts) {
                        w.write_all(&tessera_reader::vocab_line(v, *c))
                            .map_err(io)?;
                    }
                    w.flush().map_err(io)?;
                    drop(w);
                    let bytes = std::fs::metadata(&path).map_err(io)?.len();
                    let mut hasher = blake3::Hasher::new();
                    hasher.update_mmap(&path).map_err(io)?;
                    files.push(FileInfo {
                        file: name.clone(),
                        bytes,
                        blake3: hasher.finalize().to_hex().to_string(),
                    });
                    entries.push(StatsEntry::Vocab(VocabEntry::File {
                        file: name,
                        size: values.len() as u64,
                        oov: *oov,
                    }));
                }
                other => entries.push(StatsEntry::from(other.clone())),
            }
        }
        map.insert(f.name.clone(), entries);
    }
    Ok((map, files))
}

/// Each `tokenize` field's tokenizer file, copied into `dir` as
/// `tokenizer-FIELD.json` (docs/FORMAT.md, section 3.7), so that the serving
/// path tokenizes with the bytes the artifact was built with.
fn tokenizer_files(spec: &Spec, dir: &Path) -> Result<Vec<FileInfo>, BuildError> {
    let spec_dir = spec.path.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    for f in &spec.fields {
        for step in &f.transforms {
            let crate::spec::Transform::Tokenize(t) = step else {
                continue;
            };
            let from = spec_dir.join(&t.file);
            let bytes = std::fs::read(&from).map_err(|e| BuildError::io(&from, e))?;
            let hash = blake3::hash(&bytes).to_hex().to_string();
            if t.blake3.as_deref() != Some(hash.as_str()) {
                return Err(BuildError::Other(format!(
                    "fields.{}: the tokenizer file {} changed during the build",
                    f.name,
                    from.display()
                )));
            }
            let name = format!("tokenizer-{}.json", f.name);
            let to = dir.join(&name);
            std::fs::write(&to, &bytes).map_err(|e| BuildError::io(&to, e))?;
            files.push(FileInfo {
                file: name,
                bytes: bytes.len() as u64,
                blake3: hash,
            });
        }
    }
    Ok(files)
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
