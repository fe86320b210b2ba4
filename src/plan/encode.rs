//! Arrow record batches -> fixed-stride records in shard files.
//!
//! DataFusion evaluates each field's column or expression; the transform
//! crate's [`RecordEncoder`] (the one encoding, shared with the serving path)
//! turns them into records, and this module sends each record to its split's
//! shards.

use super::PlanError;
use super::stats::Rows;
use crate::accumulators::FrozenStats;
use crate::pack::stream::StreamWriter;
use crate::spec::Spec;
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::record_batch::RecordBatch;
use std::path::{Path as FsPath, PathBuf};
use tessera_reader::{RecordLayout, ShardInfo, ShardWriter};
use tessera_transform::record::{EncodeError, RecordEncoder};
use tessera_transform::split::{Splits, row_splits};

/// The output column `name` of `batch`, feeding field `field`.
pub fn column(batch: &RecordBatch, name: &str, field: &str) -> Result<ArrayRef, PlanError> {
    tessera_transform::record::column(batch, name, field).map_err(|e| encode_error(e, None))
}

/// A [`PlanError`] for an encoding error, with the batch's place in the task.
pub fn encode_error(e: EncodeError, at: Option<&Rows<'_>>) -> PlanError {
    match e {
        EncodeError::MissingColumn { field, column } => PlanError::Encode {
            key: Some(format!("fields.{field}")),
            row: None,
            context: "the query output".into(),
            message: format!("lacks column {column}"),
        },
        EncodeError::NotInLayout { field } => PlanError::Encode {
            key: Some(format!("fields.{field}")),
            row: None,
            context: "the record layout".into(),
            message: "the field is missing from the layout".into(),
        },
        EncodeError::Value { field, error } => match at {
            Some(at) => at.error(&field, error),
            None => Rows {
                what: "the query output",
                first: 0,
            }
            .error(&field, error),
        },
    }
}

/// The task's output: its shards in order, with the split each belongs to.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct EncodeOutput {
    /// `(split index, shard)` in write order.
    pub shards: Vec<(usize, ShardInfo)>,
    /// Rows written per split.
    pub rows_per_split: Vec<u64>,
    /// Rows that came out of the query (after the filter).
    pub rows_kept: u64,
    /// With `pack:`, the documents per split, for the commit to pack.
    #[serde(default)]
    pub streams: Vec<crate::pack::stream::StreamInfo>,
    /// With `pack:` over conversations, those skipped per split
    /// (`on_bad_mask: skip`); shorter than the splits when none were.
    #[serde(default)]
    pub skipped_conversations: Vec<u64>,
    /// Rows left out by each `image` field with `on_error: skip` (a row
    /// two fields skip counts for both).
    #[serde(default)]
    pub skipped: std::collections::BTreeMap<String, u64>,
}

/// The output budget shared by a build's encode tasks (`--max-output`).
#[derive(Debug)]
pub struct OutputBudget {
    /// Bytes of records the build may write.
    pub limit: u64,
    /// How the limit was chosen, for the message.
    pub origin: String,
    written: std::sync::atomic::AtomicU64,
}

impl OutputBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64, origin: impl Into<String>) -> Self {
        OutputBudget {
            limit,
            origin: origin.into(),
            written: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Takes `bytes` from the budget, or fails when they would exceed it.
    pub fn take(&self, bytes: u64) -> Result<(), PlanError> {
        use std::sync::atomic::Ordering;
        let before = self.written.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.limit {
            return Err(self.exceeded(before + bytes));
        }
        Ok(())
    }

    /// The error for an output of `bytes`.
    pub fn exceeded(&self, bytes: u64) -> PlanError {
        PlanError::Query {
            context: "the output".into(),
            message: format!(
                "the records would take more than {} (reached {}), the --max-output limit ({}); \
                 nothing was published. Check the query (a join that multiplies rows?) or raise \
                 the limit with --max-output SIZE",
                crate::cache::format_bytes(self.limit),
                crate::cache::format_bytes(bytes),
                self.origin
            ),
        }
    }
}

/// Writes one task's records into shards of about `target_bytes`, one
/// sequence of shards per split.
pub struct Encoder<'a> {
    records: RecordEncoder,
    layout: &'a RecordLayout,
    dir: PathBuf,
    chunk: usize,
    target_rows: u64,
    splits: Splits,
    writers: Vec<Option<ShardWriter>>,
    seq: Vec<u32>,
    out: EncodeOutput,
    recs: Vec<u8>,
    bytes: u64,
    budget: Option<&'a OutputBudget>,
    /// With `pack:`: the packed field's input column, and a document stream
    /// per split.
    pack: Option<PackSink>,
}

/// Where a packing build's task writes its documents.
struct PackSink {
    field: String,
    column: String,
    /// The field's `tokenize` step, when it reads text.
    tokenizer: Option<std::sync::Arc<tessera_transform::text::Tokenizer>>,
    /// The step's chat template, when it reads conversations, and whether
    /// conversations with an all-zeros or all-ones mask are skipped.
    chat: Option<(std::sync::Arc<tessera_transform::text::Chat>, bool)>,
    streams: Vec<Option<StreamWriter>>,
}

impl<'a> Encoder<'a> {
    /// An encoder for task `chunk`, writing into `dir`.
    pub fn new(
        spec: &'a Spec,
        layout: &'a RecordLayout,
        frozen: &'a [Option<Vec<FrozenStats>>],
        dir: &FsPath,
        chunk: usize,
        target_bytes: u64,
    ) -> Result<Self, PlanError> {
        let splits = Splits::new(spec.split.as_ref());
        let records =
            RecordEncoder::new(&spec.fields, layout, frozen).map_err(|e| encode_error(e, None))?;
        let n = splits.names.len();
        Ok(Encoder {
            records,
            layout,
            dir: dir.to_path_buf(),
            chunk,
            target_rows: (target_bytes.saturating_sub(tessera_reader::HEADER_LEN as u64)
                / layout.stride.max(1))
            .max(1),
            writers: (0..n).map(|_| None).collect(),
            seq: vec![0; n],
            out: EncodeOutput {
                rows_per_split: vec![0; n],
                ..Default::default()
            },
            splits,
            recs: Vec::new(),
            bytes: 0,
            budget: None,
            pack: spec
                .pack
                .as_ref()
                .map(|p| pack_sink(spec, p, n))
                .transpose()?,
        })
    }

    /// Charges every write to `budget`.
    pub fn with_budget(mut self, budget: Option<&'a OutputBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// Bytes of records written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Encodes and writes one batch of query output.
    pub fn push(&mut self, batch: &RecordBatch, what: &str) -> Result<(), PlanError> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let at = Rows {
            what,
            first: self.out.rows_kept,
        };
        if self.pack.is_some() {
            return self.push_documents(batch, &at);
        }
        let stride = self.layout.stride as usize;
        let need = n.checked_mul(stride).ok_or_else(|| too_big(n, stride))?;
        self.recs.clear();
        self.recs
            .try_reserve_exact(need)
            .map_err(|_| too_big(n, stride))?;
        self.recs.resize(need, 0);
        let skipped = self
            .records
            .encode_skipping(batch, &mut self.recs)
            .map_err(|e| encode_error(e, Some(&at)))?;
        let splits = row_splits(batch, &self.splits).map_err(|e| at.at_key("split.key", e))?;
        // Rows an image field skipped leave; the others close up, in order.
        let kept = self.drop_skipped(n, stride, &skipped);
        let n_kept = kept.as_ref().map_or(n, Vec::len);
        let row_of = |r: usize| kept.as_ref().map_or(r, |k| k[r]);
        // Append runs of consecutive rows that go to the same split.
        let split_of = |r: usize| splits.as_ref().map_or(0, |v| usize::from(v[row_of(r)]));
        let n = n_kept;
        let mut r = 0;
        while r < n {
            let s = split_of(r);
            let mut e = r + 1;
            while e < n && split_of(e) == s {
                e += 1;
            }
            self.append(s, r, e)?;
            r = e;
        }
        self.out.rows_kept += batch.num_rows() as u64;
        Ok(())
    }

    /// Counts the skipped rows per field and moves the records of the other
    /// rows together at the front of the buffer; returns the batch rows of
    /// the records kept, `None` when no row was skipped.
    fn drop_skipped(
        &mut self,
        n: usize,
        stride: usize,
        skipped: &[tessera_transform::record::Skipped],
    ) -> Option<Vec<usize>> {
        if skipped.is_empty() {
            return None;
        }
        let mut gone = vec![false; n];
        for s in skipped {
            *self.out.skipped.entry(s.field.clone()).or_default() += 1;
            gone[s.row] = true;
        }
        let kept: Vec<usize> = (0..n).filter(|&r| !gone[r]).collect();
        for (to, &from) in kept.iter().enumerate() {
            if to != from {
                self.recs
                    .copy_within(from * stride..(from + 1) * stride, to * stride);
            }
        }
        Some(kept)
    }

    /// With `pack:`: appends each row's document to its split's stream.
    fn push_documents(&mut self, batch: &RecordBatch, at: &Rows<'_>) -> Result<(), PlanError> {
        let n = batch.num_rows();
        let splits = row_splits(batch, &self.splits).map_err(|e| at.at_key("split.key", e))?;
        let Some(sink) = self.pack.as_mut() else {
            return Ok(());
        };
        let col = column(batch, &sink.column, &sink.field)?;
        let docs = match (&sink.tokenizer, &sink.chat) {
            (Some(tok), Some((chat, skip))) => {
                crate::pack::docs::from_chats(&col, tok, chat, *skip)
            }
            (Some(tok), None) => crate::pack::docs::from_text(&col, tok),
            (None, _) => crate::pack::docs::from_lists(&col),
        }
        .map_err(|e| at.error(&sink.field, e))?;
        let mut skipped = docs.skipped.iter().peekable();
        for r in 0..n {
            let s = splits.as_ref().map_or(0, |v| usize::from(v[r]));
            if skipped.next_if_eq(&&r).is_some() {
                if self.out.skipped_conversations.len() <= s {
                    self.out.skipped_conversations.resize(s + 1, 0);
                }
                self.out.skipped_conversations[s] += 1;
                continue;
            }
            let w = match &mut sink.streams[s] {
                Some(w) => w,
                slot @ None => {
                    let name = format!("docs-{}-{:05}.bin", self.splits.names[s], self.chunk);
                    slot.insert(StreamWriter::create(&self.dir, &name, s).map_err(stream_error)?)
                }
            };
            let doc = docs.get(r);
            if let Some(budget) = self.budget {
                budget.take(4 * (doc.len() as u64 + 1))?;
            }
            match docs.train(r) {
                [] => w.push(doc),
                train => w.push_masked(doc, train),
            }
            .map_err(stream_error)?;
            self.bytes += 4 * (doc.len() as u64 + 1);
            self.out.rows_per_split[s] += 1;
        }
        self.out.rows_kept += n as u64;
        Ok(())
    }

    fn append(&mut self, split: usize, mut a: usize, b: usize) -> Result<(), PlanError> {
        let stride = self.layout.stride as usize;
        while a < b {
            let w = match &mut self.writers[split] {
                Some(w) => w,
                slot @ None => {
                    let name = format!(
                        "{}-{:05}-{:04}.bin",
                        self.splits.names[split], self.chunk, self.seq[split]
                    );
                    self.seq[split] += 1;
                    slot.insert(ShardWriter::create(&self.dir, &name, self.layout)?)
                }
            };
            let room = (self.target_rows - w.rows()) as usize;
            let take = room.min(b - a);
            if let Some(budget) = self.budget {
                budget.take((take * stride) as u64)?;
            }
            w.write_records(&self.recs[a * stride..(a + take) * stride])?;
            self.bytes += (take * stride) as u64;
            self.out.rows_per_split[split] += take as u64;
            a += take;
            if w.rows() >= self.target_rows
                && let Some(w) = self.writers[split].take()
            {
                self.out.shards.push((split, w.finish()?));
            }
        }
        Ok(())
    }

    /// Closes the open shards; returns what the task wrote.
    pub fn finish(mut self) -> Result<EncodeOutput, PlanError> {
        for s in 0..self.writers.len() {
            if let Some(w) = self.writers[s].take() {
                self.out.shards.push((s, w.finish()?));
            }
        }
        if let Some(sink) = self.pack.take() {
            for w in sink.streams.into_iter().flatten() {
                self.out.streams.push(w.finish().map_err(stream_error)?);
            }
        }
        // Order shards split-major, keeping write order within a split.
        self.out.shards.sort_by_key(|(s, _)| *s);
        Ok(self.out)
    }
}

fn stream_error(e: std::io::Error) -> PlanError {
    PlanError::Encode {
        key: Some("pack".into()),
        row: None,
        context: "a document stream".into(),
        message: e.to_string(),
    }
}

fn too_big(rows: usize, stride: usize) -> PlanError {
    PlanError::Encode {
        key: Some("fields".into()),
        row: None,
        context: "the record buffer".into(),
        message: format!(
            "{rows} records of {stride} bytes cannot be allocated; make the records smaller"
        ),
    }
}

/// The documents' side of an encoder with `pack:`: the packed field's
/// column and its parsed tokenizer (and chat template), if it has a
/// `tokenize` step.
fn pack_sink(
    spec: &Spec,
    p: &crate::spec::PackOptions,
    splits: usize,
) -> Result<PackSink, PlanError> {
    let index = spec
        .fields
        .iter()
        .position(|f| f.name == p.field)
        .unwrap_or(0);
    let step = spec.fields.get(index).and_then(|f| {
        f.transforms.iter().find_map(|t| match t {
            crate::spec::Transform::Tokenize(t) => Some(t),
            _ => None,
        })
    });
    let tokenizer = match step {
        Some(t) => Some(t.loaded.clone().ok_or_else(|| PlanError::Spec {
            key: format!("fields.{}.transform.tokenize.file", p.field),
            message: format!(
                "the tokenizer file {} has not been parsed (Spec::load_tokenizers)",
                t.file
            ),
        })?),
        None => None,
    };
    Ok(PackSink {
        field: p.field.clone(),
        column: format!("__f{index}"),
        tokenizer,
        chat: step.and_then(|t| {
            let chat = t.chat_template.as_ref()?.loaded.clone()?;
            Some((chat, t.skip_bad_masks))
        }),
        streams: (0..splits).map(|_| None).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::stats::StatsPartial;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use std::sync::Arc;

    fn spec(fields: &str, split: bool) -> Spec {
        let text = format!(
            "version: 1\nname: t\nsources:\n  s: {{ path: x.parquet }}\nfields:\n{fields}{}",
            if split {
                "split: { key: k, weights: { train: 0.5, val: 0.5 } }\n"
            } else {
                ""
            }
        );
        Spec::parse(&text, FsPath::new("/tmp/t.yaml")).expect("spec")
    }

    fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(cols).expect("batch")
    }

    /// Encodes `b` with `frozen` statistics and returns the records.
    fn encode(
        s: &Spec,
        b: &RecordBatch,
        frozen: &[Option<Vec<FrozenStats>>],
    ) -> (Vec<u8>, RecordLayout) {
        let layout = crate::build::layout_of(s).expect("layout");
        let dir = tempfile::tempdir().expect("tmp");
        let mut enc = Encoder::new(s, &layout, frozen, dir.path(), 0, 1 << 20).expect("encoder");
        enc.push(b, "test").expect("push");
        let out = enc.finish().expect("finish");
        let mut bytes = Vec::new();
        for (_, shard) in &out.shards {
            let raw = std::fs::read(dir.path().join(&shard.file)).expect("shard");
            bytes.extend_from_slice(&raw[tessera_reader::HEADER_LEN..]);
        }
        (bytes, layout)
    }

    #[test]
    fn statistics_and_encoding_agree_on_a_hand_built_batch() {
        let s = spec(
            "  x: { dtype: f64, column: x, fill_null: 1, transform: [log1p, standardize] }\n\
             \x20 k: { dtype: i32, column: k, transform: { vocab: {} } }\n",
            false,
        );
        let b = batch(vec![
            (
                "__f0",
                Arc::new(Float64Array::from(vec![Some(0.0), None, Some(3.0)])) as ArrayRef,
            ),
            (
                "__f1",
                Arc::new(StringArray::from(vec![Some("b"), Some("a"), Some("b")])),
            ),
        ]);
        let mut stats = StatsPartial::new(&s);
        let at = crate::plan::stats::Rows {
            what: "test",
            first: 0,
        };
        stats.update(&s, &b, &at).expect("stats");
        let frozen = stats.freeze(&s, u64::MAX).expect("freeze");
        // ln(1+x) of 0, fill 1, 3: 0, ln 2, ln 4.
        let ys = [0.0f64, 2f64.ln(), 4f64.ln()];
        let mean = ys.iter().sum::<f64>() / 3.0;
        let std = (ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
        let (bytes, layout) = encode(&s, &b, &frozen);
        let stride = layout.stride as usize;
        for (r, y) in ys.iter().enumerate() {
            let rec = &bytes[r * stride..(r + 1) * stride];
            let x = f64::from_le_bytes(rec[0..8].try_into().expect("8 bytes"));
            assert!((x - (y - mean) / std).abs() < 1e-12, "row {r}: {x}");
            let k = i32::from_le_bytes(rec[8..12].try_into().expect("4 bytes"));
            // "b" is the most frequent value: id 1; "a" id 2.
            assert_eq!(k, if r == 1 { 2 } else { 1 }, "row {r}");
        }
    }

    #[test]
    fn one_hot_and_exact_integers_land_at_their_offsets() {
        let s = spec(
            "  c: { dtype: u8, column: c, transform: { one_hot: 3 } }\n\
             \x20 n: { dtype: i64, column: n }\n",
            false,
        );
        let b = batch(vec![
            ("__f0", Arc::new(Int64Array::from(vec![2, 0])) as ArrayRef),
            ("__f1", Arc::new(Int64Array::from(vec![-7, i64::MAX]))),
        ]);
        let (bytes, layout) = encode(&s, &b, &[None, None]);
        let stride = layout.stride as usize;
        let n_off = layout.field("n").expect("n").offset as usize;
        let c_off = layout.field("c").expect("c").offset as usize;
        assert_eq!(&bytes[c_off..c_off + 3], &[0, 0, 1]);
        assert_eq!(&bytes[stride + c_off..stride + c_off + 3], &[1, 0, 0]);
        let n1 = i64::from_le_bytes(
            bytes[stride + n_off..stride + n_off + 8]
                .try_into()
                .expect("8"),
        );
        assert_eq!(n1, i64::MAX);
        // A class outside 0..3 is an error naming the row.
        let bad = batch(vec![
            ("__f0", Arc::new(Int64Array::from(vec![1, 3])) as ArrayRef),
            ("__f1", Arc::new(Int64Array::from(vec![0, 0]))),
        ]);
        let layout = crate::build::layout_of(&s).expect("layout");
        let dir = tempfile::tempdir().expect("tmp");
        let mut enc =
            Encoder::new(&s, &layout, &[None, None], dir.path(), 0, 1 << 20).expect("encoder");
        let e = enc.push(&bad, "test").expect_err("class 3").to_string();
        assert!(
            e.contains("row 2") && e.contains("class 3 is outside one_hot's 0..3"),
            "{e}"
        );
    }

    #[test]
    fn rows_go_to_their_split_in_order() {
        let s = spec("  v: { dtype: i64, column: v }\n", true);
        let keys: Vec<String> = (0..64).map(|i| format!("key{i}")).collect();
        let b = batch(vec![
            (
                "__f0",
                Arc::new(Int64Array::from((0..64).collect::<Vec<i64>>())) as ArrayRef,
            ),
            ("__split", Arc::new(StringArray::from(keys.clone()))),
        ]);
        let layout = crate::build::layout_of(&s).expect("layout");
        let dir = tempfile::tempdir().expect("tmp");
        let mut enc = Encoder::new(&s, &layout, &[None], dir.path(), 0, 1 << 20).expect("encoder");
        enc.push(&b, "test").expect("push");
        let out = enc.finish().expect("finish");
        let cum = Splits::new(s.split.as_ref()).cumulative;
        for (split, shard) in &out.shards {
            let raw = std::fs::read(dir.path().join(&shard.file)).expect("shard");
            let vals: Vec<i64> = raw[tessera_reader::HEADER_LEN..]
                .chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
                .collect();
            let want: Vec<i64> = (0..64)
                .filter(|&i| {
                    crate::accumulators::split_of(keys[i as usize].as_bytes(), &cum) == *split
                })
                .collect();
            assert_eq!(vals, want, "split {split}");
        }
        assert_eq!(out.rows_per_split.iter().sum::<u64>(), 64);
    }
}
