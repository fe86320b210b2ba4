//! # tessera-reader
//!
//! The tessera shard format (version 1) and a zero-copy reader for it.
//!
//! A shard set is a directory holding `manifest.json` and shard files. Every
//! record has the same fixed stride and layout, so record `i` is found by
//! arithmetic: no index, no parsing, no conversion. This crate defines the
//! format once, for both sides: [`ShardSetWriter`] writes it (the tessera
//! compiler uses it) and [`Dataset`] reads it. `docs/FORMAT.md` in the
//! repository is the byte-level reference.
//!
//! Reading streams batches into one contiguous buffer per batch, in an order
//! fixed by `(seed, epoch)` and independent of thread count or prefetch depth
//! ([`order`]), split across distributed ranks, and resumable from a
//! three-integer [`Cursor`].
//!
//! ```
//! use tessera_reader::{DType, Dataset, FieldSpec, Loader, LoaderConfig, RecordLayout, ShardSetWriter};
//!
//! // Write a tiny set: 100 records of (features: [f32; 3], label: i64).
//! let dir = tempfile::tempdir()?;
//! let layout = RecordLayout::packed(&[
//!     FieldSpec::new("features", DType::F32, &[3]),
//!     FieldSpec::new("label", DType::I64, &[]),
//! ])?;
//! let stride = layout.stride as usize;
//! let mut writer = ShardSetWriter::new(dir.path(), layout.clone(), 64 << 10)?;
//! writer.begin_split("train")?;
//! for i in 0..100i64 {
//!     let mut rec = vec![0u8; stride];
//!     let feat = layout.field("features").unwrap().offset as usize;
//!     for (j, x) in [i as f32, 0.5, -1.0].iter().enumerate() {
//!         rec[feat + 4 * j..feat + 4 * j + 4].copy_from_slice(&x.to_le_bytes());
//!     }
//!     let lab = layout.field("label").unwrap().offset as usize;
//!     rec[lab..lab + 8].copy_from_slice(&(i % 2).to_le_bytes());
//!     writer.write_records(&rec)?;
//! }
//! writer.finish()?;
//!
//! // Read it back: shuffled batches of 32, same order for any thread count.
//! let ds = Dataset::open(dir.path())?;
//! let loader = Loader::new(&ds, LoaderConfig { batch_size: 32, seed: 7, ..Default::default() })?;
//! let mut seen = 0;
//! for batch in loader.epoch(0) {
//!     let labels = batch.field::<i64>("label")?;
//!     let feats = batch.field::<f32>("features")?;
//!     for j in 0..batch.rows() {
//!         assert_eq!(labels.row(j)[0], feats.row(j)[0] as i64 % 2);
//!     }
//!     seen += batch.rows();
//! }
//! assert_eq!(seen, 96); // the default drops the short last batch
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod batch;
pub mod cache;
mod compressed;
mod dataset;
mod dtype;
pub mod durable;
mod error;
mod header;
mod layout;
pub mod lease;
mod loader;
mod location;
mod manifest;
mod mixture;
pub mod order;
#[cfg(feature = "remote")]
pub mod remote;
mod source;
mod writer;

pub use batch::{Batch, FieldView};
pub use cache::{CacheOptions, CacheStats};
#[cfg(feature = "zstd")]
pub use compressed::compress_shard_file;
pub use compressed::{ZSTD_LEVELS, ZSTD_SUFFIX};
pub use dataset::{Dataset, OpenOptions};
pub use dtype::{DType, Element, cast_slice};
pub use durable::{hex, sync_dir};
pub use error::{Error, Result};
pub use header::{FORMAT_VERSION, HEADER_LEN, LATEST_FORMAT_VERSION, MAGIC, ShardHeader};
pub use layout::{FieldLayout, FieldSpec, MAX_STRIDE, RecordLayout};
pub use loader::{Batches, Loader, LoaderConfig};
pub use location::{STORE_SCHEMES, is_store_url};
pub use manifest::{
    BuildRecord, Compression, FORMAT_NAME, FileInfo, InlineVocab, MANIFEST_FILE, Manifest,
    PackRecord, PlanDecision, QueryColumn, ScanMetrics, ShardInfo, SplitInfo, StatsEntry,
    VOCAB_INLINE, VocabEntry, parse_vocab_line, vocab_file_name, vocab_line,
};
pub use mixture::{MixComponent, Mixture, ScheduleChange, WeightStep};
pub use order::{Cursor, EpochOrder, LastBatch, OrderVersion, Schedule};
pub use writer::{ShardSetWriter, ShardWriter, write_manifest};
