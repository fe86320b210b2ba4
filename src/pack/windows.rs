//! Packed windows -> fixed-stride records in shard files.
//!
//! A packed set's record holds, for a window of `length` input positions:
//! the token field, `segment_ids` (i32: 1, 2, ... per document piece, 0 in
//! padding) and `positions` (i32: 0 at each piece's start), each with
//! `length` slots, or `length + 1` with labels; and `loss_mask` (u8),
//! `length` long. Without labels, `loss_mask[i]` is 1 where token `i` is a
//! token of a document; with labels it is 1 where the target `tokens[i + 1]`
//! is a token of the same piece as `tokens[i]`, so no loss is taken on
//! padding or across a document boundary. Either way a token whose train bit
//! is 0 (a conversation's non-assistant turns) takes no loss.

use super::stream::{StreamInfo, StreamReader};
use super::{LOSS_MASK, POSITIONS, PackOptions, PackStats, Packer, SEGMENT_IDS, Window};
use std::path::Path;
use tessera_reader::{DType, FieldSpec, RecordLayout, ShardInfo, ShardWriter};
use tessera_transform::values::put_int;

/// The record layout of a packed set whose token field stores `dtype`.
pub fn layout(opts: &PackOptions, dtype: DType) -> tessera_reader::Result<RecordLayout> {
    let n = u64::from(opts.length);
    let cap = u64::from(opts.capacity());
    RecordLayout::packed(&[
        FieldSpec::new(opts.field.clone(), dtype, &[cap]),
        FieldSpec::new(SEGMENT_IDS, DType::I32, &[cap]),
        FieldSpec::new(POSITIONS, DType::I32, &[cap]),
        FieldSpec::new(LOSS_MASK, DType::U8, &[n]),
    ])
}

/// One split's packed output.
#[derive(Debug, Default)]
pub struct PackedSplit {
    /// Its shards, in order.
    pub shards: Vec<ShardInfo>,
    /// Windows (records) written.
    pub rows: u64,
    /// What packing did.
    pub stats: PackStats,
}

/// Why packing stopped.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// Reading a document stream or writing a shard failed.
    #[error("{0}")]
    Io(String),
    /// A token id does not fit the token field's dtype.
    #[error("field {field}: token id {id} does not fit {dtype}")]
    Range {
        /// The token field.
        field: String,
        /// The id.
        id: u32,
        /// The field's dtype.
        dtype: String,
    },
}

impl From<tessera_reader::Error> for PackError {
    fn from(e: tessera_reader::Error) -> Self {
        PackError::Io(e.to_string())
    }
}

/// Windows sent to the shard writer at a time.
const BATCH_WINDOWS: usize = 16;

/// Packs the documents of split `split` (`name`), read from `streams` in
/// order (each in `from`), into shards `{name}-packed-NNNNN.bin` in `dir`.
///
/// Packing and encoding the windows run here; writing the shards (the
/// writes, each shard's fsync and hash) on a second thread, fed windows in
/// order, so the one overlaps the other. The shards are the same bytes as
/// one thread would write: the writer starts a new shard after the same
/// record.
#[allow(clippy::too_many_arguments)]
pub fn pack_split(
    opts: &PackOptions,
    layout: &RecordLayout,
    name: &str,
    streams: &[&StreamInfo],
    from: &Path,
    dir: &Path,
    target_bytes: u64,
) -> Result<PackedSplit, PackError> {
    let stride = layout.stride as usize;
    let target_rows = (target_bytes.saturating_sub(tessera_reader::HEADER_LEN as u64)
        / layout.stride.max(1))
    .max(1);
    let enc = WindowEncoder::new(opts, layout)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name("tessera-pack-writer".into())
            .spawn_scoped(scope, move || {
                write_shards(rx, dir, name, layout, stride, target_rows)
            })
            .map_err(|e| PackError::Io(format!("cannot start the shard writer: {e}")))?;
        let mut out = Batches {
            tx,
            batch: Vec::with_capacity(stride * BATCH_WINDOWS),
            stride,
            rows: 0,
        };
        let packed = pack_streams(opts, streams, from, &enc, &mut out);
        let rows = out.rows;
        // Hands over the last windows and lets the writer finish.
        let flushed = out.flush();
        drop(out);
        let written = writer
            .join()
            .map_err(|_| PackError::Io("the shard writer stopped unexpectedly".into()))?;
        // A failed write is why a hand-over failed: its error comes first.
        let shards = written?;
        let stats = packed?;
        flushed?;
        Ok(PackedSplit {
            shards,
            rows,
            stats,
        })
    })
}

/// Reads the streams in order and packs their documents into `out`.
fn pack_streams(
    opts: &PackOptions,
    streams: &[&StreamInfo],
    from: &Path,
    enc: &WindowEncoder,
    out: &mut Batches,
) -> Result<PackStats, PackError> {
    let io = |e: std::io::Error| PackError::Io(e.to_string());
    let mut sink = |w: &Window| out.push(enc, w);
    let mut packer = Packer::new(opts);
    let mut doc = Vec::new();
    let mut train = Vec::new();
    for s in streams {
        let mut r = StreamReader::open(&from.join(&s.file)).map_err(io)?;
        while r.next_into(&mut doc, &mut train).map_err(io)? {
            if train.is_empty() {
                packer.push(&doc, &mut sink)?;
            } else {
                packer.push_masked(&doc, &train, &mut sink)?;
            }
        }
    }
    packer.finish(&mut sink)
}

/// Encoded windows on their way to the shard writer.
struct Batches {
    tx: std::sync::mpsc::SyncSender<Vec<u8>>,
    batch: Vec<u8>,
    stride: usize,
    rows: u64,
}

impl Batches {
    fn push(&mut self, enc: &WindowEncoder, w: &Window) -> Result<(), PackError> {
        let at = self.batch.len();
        // Zeroed: the slots a window does not fill are padding.
        self.batch.resize(at + self.stride, 0);
        enc.encode(w, &mut self.batch[at..])?;
        self.rows += 1;
        if self.batch.len() >= self.stride * BATCH_WINDOWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PackError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(
            &mut self.batch,
            Vec::with_capacity(self.stride * BATCH_WINDOWS),
        );
        self.tx
            .send(full)
            .map_err(|_| PackError::Io("the shard writer stopped".into()))
    }
}

/// The writer's side: records in order into shards of `target_rows`
/// records (the last one shorter), each finished (fsynced, hashed) when
/// full.
fn write_shards(
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    dir: &Path,
    name: &str,
    layout: &RecordLayout,
    stride: usize,
    target_rows: u64,
) -> Result<Vec<ShardInfo>, PackError> {
    let mut shards = Vec::new();
    let mut writer: Option<ShardWriter> = None;
    let mut seq = 0u32;
    for batch in rx {
        for rec in batch.chunks_exact(stride) {
            let wr = match &mut writer {
                Some(w) => w,
                slot @ None => {
                    let file = format!("{name}-packed-{seq:05}.bin");
                    seq += 1;
                    slot.insert(ShardWriter::create(dir, &file, layout)?)
                }
            };
            wr.write_records(rec)?;
            if wr.rows() >= target_rows
                && let Some(w) = writer.take()
            {
                shards.push(w.finish()?);
            }
        }
    }
    if let Some(w) = writer.take() {
        shards.push(w.finish()?);
    }
    Ok(shards)
}

/// Writes a window's fields at their offsets in a record.
struct WindowEncoder {
    field: String,
    capacity: usize,
    length: usize,
    labels: bool,
    tokens: (usize, DType),
    segments: usize,
    positions: usize,
    mask: usize,
}

impl WindowEncoder {
    fn new(opts: &PackOptions, layout: &RecordLayout) -> Result<Self, PackError> {
        let at = |name: &str| {
            layout
                .field(name)
                .map(|f| (f.offset as usize, f.dtype))
                .ok_or_else(|| PackError::Io(format!("the packed layout lacks field {name}")))
        };
        Ok(WindowEncoder {
            field: opts.field.clone(),
            capacity: opts.capacity() as usize,
            length: opts.length as usize,
            labels: opts.labels,
            tokens: at(&opts.field)?,
            segments: at(SEGMENT_IDS)?.0,
            positions: at(POSITIONS)?.0,
            mask: at(LOSS_MASK)?.0,
        })
    }

    fn encode(&self, w: &Window, rec: &mut [u8]) -> Result<(), PackError> {
        let (off, dtype) = self.tokens;
        let size = dtype.size();
        if dtype == DType::U32 {
            // Every id fits: copied as it is.
            for (k, &t) in w.tokens.iter().take(self.capacity).enumerate() {
                rec[off + 4 * k..off + 4 * k + 4].copy_from_slice(&t.to_le_bytes());
            }
        } else {
            for (k, &t) in w.tokens.iter().take(self.capacity).enumerate() {
                put_int(&mut rec[off + k * size..], dtype, i128::from(t)).map_err(|_| {
                    PackError::Range {
                        field: self.field.clone(),
                        id: t,
                        dtype: dtype.name().to_string(),
                    }
                })?;
            }
        }
        for k in 0..self.capacity {
            let p = self.segments + 4 * k;
            rec[p..p + 4].copy_from_slice(&(w.segments[k] as i32).to_le_bytes());
            let p = self.positions + 4 * k;
            rec[p..p + 4].copy_from_slice(&(w.positions[k] as i32).to_le_bytes());
        }
        for k in 0..self.length {
            let seg = w.segments[k];
            let counts = if self.labels {
                let next = w.segments[k + 1];
                next != 0 && next == seg && w.train[k + 1] != 0
            } else {
                seg != 0 && w.train[k] != 0
            };
            rec[self.mask + k] = u8::from(counts);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream::StreamWriter;
    use super::super::{Algorithm, Overflow};
    use super::*;

    fn opts(algorithm: Algorithm, length: u32, labels: bool) -> PackOptions {
        PackOptions {
            field: "ids".into(),
            length,
            algorithm,
            labels,
            overflow: Overflow::Split,
            group_docs: 100,
            pad_id: 0,
        }
    }

    #[test]
    fn windows_are_written_as_records_with_their_masks() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut sw = StreamWriter::create(dir.path(), "s.bin", 0).expect("create");
        sw.push(&[5, 6, 7]).expect("push");
        sw.push(&[8, 9]).expect("push");
        let info = sw.finish().expect("finish");
        let opts = opts(Algorithm::BestFit, 4, true);
        let layout = layout(&opts, DType::U16).expect("layout");
        let out = pack_split(
            &opts,
            &layout,
            "all",
            &[&info],
            dir.path(),
            dir.path(),
            1 << 20,
        )
        .expect("pack");
        assert_eq!(out.rows, 1);
        assert_eq!(out.stats.tokens, 5);
        let raw = std::fs::read(dir.path().join(&out.shards[0].file)).expect("shard");
        let rec = &raw[tessera_reader::HEADER_LEN..];
        let f = |name: &str| layout.field(name).expect("field").offset as usize;
        let ids: Vec<u16> = (0..5)
            .map(|k| u16::from_le_bytes([rec[f("ids") + 2 * k], rec[f("ids") + 2 * k + 1]]))
            .collect();
        assert_eq!(ids, vec![5, 6, 7, 8, 9]);
        let i32s = |at: usize| -> Vec<i32> {
            (0..5)
                .map(|k| {
                    let p = at + 4 * k;
                    i32::from_le_bytes([rec[p], rec[p + 1], rec[p + 2], rec[p + 3]])
                })
                .collect()
        };
        assert_eq!(i32s(f(SEGMENT_IDS)), vec![1, 1, 1, 2, 2]);
        assert_eq!(i32s(f(POSITIONS)), vec![0, 1, 2, 0, 1]);
        // Targets 6, 7 count; 8 is another document's first token; 9 counts.
        let mask = &rec[f(LOSS_MASK)..f(LOSS_MASK) + 4];
        assert_eq!(mask, &[1, 1, 0, 1]);
    }

    #[test]
    fn train_bits_keep_the_loss_off_tokens_not_trained_on() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut sw = StreamWriter::create(dir.path(), "s.bin", 0).expect("create");
        // A prompt (1, 2) and its answer (3, 4), then a plain document.
        sw.push_masked(&[1, 2, 3, 4], &[0, 0, 1, 1]).expect("push");
        sw.push(&[5, 6]).expect("push");
        let info = sw.finish().expect("finish");
        for (labels, want) in [
            (true, vec![0u8, 1, 1, 0, 1]),
            (false, vec![0, 0, 1, 1, 1, 1]),
        ] {
            let opts = opts(Algorithm::Concat, if labels { 5 } else { 6 }, labels);
            let layout = layout(&opts, DType::U32).expect("layout");
            let out = tempfile::tempdir().expect("tmp");
            let r = pack_split(
                &opts,
                &layout,
                "all",
                &[&info],
                dir.path(),
                out.path(),
                1 << 20,
            )
            .expect("pack");
            let raw = std::fs::read(out.path().join(&r.shards[0].file)).expect("shard");
            let rec = &raw[tessera_reader::HEADER_LEN..];
            let m = layout.field(LOSS_MASK).expect("mask").offset as usize;
            assert_eq!(
                &rec[m..m + opts.length as usize],
                &want[..],
                "labels {labels}"
            );
        }
    }

    #[test]
    fn an_id_too_large_for_the_dtype_is_an_error_naming_the_field() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut sw = StreamWriter::create(dir.path(), "s.bin", 0).expect("create");
        sw.push(&[70_000]).expect("push");
        let info = sw.finish().expect("finish");
        let opts = opts(Algorithm::Concat, 4, false);
        let layout = layout(&opts, DType::U16).expect("layout");
        let err = pack_split(
            &opts,
            &layout,
            "all",
            &[&info],
            dir.path(),
            dir.path(),
            1 << 20,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("ids") && err.contains("70000"), "{err}");
    }
}
