//! Writing shard sets. The compiler encodes rows into records and hands them
//! here, so the writer and the reader share one definition of the format.

use crate::durable::{ChunkedWriter, hash_reader, sync_dir, write_atomic};
use crate::error::{Error, Result};
use crate::header::{HEADER_LEN, ShardHeader};
use crate::layout::RecordLayout;
use crate::manifest::{Compression, MANIFEST_FILE, Manifest, ShardInfo, SplitInfo};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Writes one shard file: header, then records, then a patched header with the
/// final row count, fsynced and hashed.
pub struct ShardWriter {
    path: PathBuf,
    file_name: String,
    /// Whole 2 MiB pieces (see [`ChunkedWriter`]): the shard's cached pages
    /// can then be mapped as huge pages when it is read.
    out: ChunkedWriter<File>,
    stride: u64,
    layout_digest: [u8; 32],
    rows: u64,
}

impl ShardWriter {
    /// Creates `dir/file_name` (which must not exist yet) for records of `layout`.
    pub fn create(dir: &Path, file_name: &str, layout: &RecordLayout) -> Result<Self> {
        let path = dir.join(file_name);
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let mut out = ChunkedWriter::new(file);
        let header = ShardHeader {
            stride: layout.stride,
            rows: 0,
            layout_digest: layout.digest(),
        };
        out.write_all(&header.encode())
            .map_err(|e| Error::io(&path, e))?;
        Ok(ShardWriter {
            path,
            file_name: file_name.to_owned(),
            out,
            stride: layout.stride,
            layout_digest: header.layout_digest,
            rows: 0,
        })
    }

    /// Appends whole records; `records.len()` must be a multiple of the stride.
    pub fn write_records(&mut self, records: &[u8]) -> Result<()> {
        if !(records.len() as u64).is_multiple_of(self.stride) {
            return Err(Error::Write {
                path: self.path.clone(),
                reason: format!(
                    "{} bytes is not a whole number of {}-byte records",
                    records.len(),
                    self.stride
                ),
            });
        }
        self.out
            .write_all(records)
            .map_err(|e| Error::io(&self.path, e))?;
        self.rows += records.len() as u64 / self.stride;
        Ok(())
    }

    /// Records written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes the file will have when finished.
    pub fn bytes(&self) -> u64 {
        HEADER_LEN as u64 + self.rows * self.stride
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the final header, fsyncs the file and returns its manifest
    /// entry (with the blake3 of the whole file).
    pub fn finish(self) -> Result<ShardInfo> {
        let path = self.path;
        let mut file = self.out.into_inner().map_err(|e| Error::io(&path, e))?;
        let header = ShardHeader {
            stride: self.stride,
            rows: self.rows,
            layout_digest: self.layout_digest,
        };
        let io = |e| Error::io(&path, e);
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&header.encode()).map_err(io)?;
        file.sync_all().map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let blake3 = hash_reader(&mut file).map_err(io)?;
        Ok(ShardInfo {
            file: self.file_name,
            rows: self.rows,
            bytes: HEADER_LEN as u64 + self.rows * self.stride,
            blake3,
            compression: Compression::None,
            stored_bytes: None,
            stored_blake3: None,
        })
    }
}

/// Writes a whole shard set into one directory: records are appended split by
/// split, a new shard is started whenever the current one reaches
/// `target_bytes`, and [`ShardSetWriter::finish`] writes the manifest last.
///
/// ```
/// use tessera_reader::{DType, FieldSpec, RecordLayout, ShardSetWriter, Dataset};
/// let dir = tempfile::tempdir()?;
/// let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::U32, &[])])?;
/// let mut w = ShardSetWriter::new(dir.path(), layout, 1 << 20)?;
/// w.begin_split("train")?;
/// for i in 0u32..10 {
///     w.write_records(&i.to_le_bytes())?;
/// }
/// w.finish()?;
/// assert_eq!(Dataset::open(dir.path())?.len(), 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ShardSetWriter {
    dir: PathBuf,
    layout: RecordLayout,
    target_rows: u64,
    current: Option<ShardWriter>,
    shards: Vec<ShardInfo>,
    splits: Vec<SplitInfo>,
    rows: u64,
    /// zstd level to store shards at, if compressed.
    zstd: Option<i32>,
}

impl ShardSetWriter {
    /// Starts a set in `dir` (created if missing) with shards of about
    /// `target_bytes` each (at least one record per shard).
    pub fn new(dir: &Path, layout: RecordLayout, target_bytes: u64) -> Result<Self> {
        layout.validate()?;
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let target_rows = (target_bytes.saturating_sub(HEADER_LEN as u64) / layout.stride).max(1);
        Ok(ShardSetWriter {
            dir: dir.to_path_buf(),
            layout,
            target_rows,
            current: None,
            shards: Vec::new(),
            splits: Vec::new(),
            rows: 0,
            zstd: None,
        })
    }

    /// Stores every shard zstd-compressed at `level` (1 to 22): the set is
    /// written as format version 2, and readers decompress each shard once
    /// into their shard cache.
    #[cfg(feature = "zstd")]
    pub fn with_zstd(mut self, level: i32) -> Result<Self> {
        if !crate::compressed::ZSTD_LEVELS.contains(&level) {
            return Err(Error::InvalidArgument(format!(
                "zstd level {level} is not in 1..=22"
            )));
        }
        self.zstd = Some(level);
        Ok(self)
    }

    /// Starts a new split; following records belong to it. Splits are stored
    /// in the order they are begun, each starting a new shard.
    pub fn begin_split(&mut self, name: &str) -> Result<()> {
        self.close_shard()?;
        if self.splits.iter().any(|s| s.name == name) {
            return Err(Error::InvalidArgument(format!(
                "split {name:?} begun twice"
            )));
        }
        self.splits.push(SplitInfo {
            name: name.to_owned(),
            start: self.rows,
            rows: 0,
        });
        Ok(())
    }

    /// Appends whole records to the current split.
    pub fn write_records(&mut self, mut records: &[u8]) -> Result<()> {
        let stride = self.layout.stride as usize;
        if !records.len().is_multiple_of(stride) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes is not a whole number of {stride}-byte records",
                records.len()
            )));
        }
        if self.splits.is_empty() {
            return Err(Error::InvalidArgument("begin_split must come first".into()));
        }
        while !records.is_empty() {
            if self.current.is_none() {
                let name = format!("shard-{:05}.bin", self.shards.len());
                self.current = Some(ShardWriter::create(&self.dir, &name, &self.layout)?);
            }
            let Some(w) = self.current.as_mut() else {
                unreachable!("a shard was just opened")
            };
            let room = (self.target_rows - w.rows()) as usize;
            let take = room.min(records.len() / stride);
            w.write_records(&records[..take * stride])?;
            records = &records[take * stride..];
            let n = take as u64;
            self.rows += n;
            if let Some(s) = self.splits.last_mut() {
                s.rows += n;
            }
            if w.rows() >= self.target_rows {
                self.close_shard()?;
            }
        }
        Ok(())
    }

    fn close_shard(&mut self) -> Result<()> {
        if let Some(w) = self.current.take() {
            let info = w.finish()?;
            let info = match self.zstd {
                #[cfg(feature = "zstd")]
                Some(level) => crate::compressed::compress_shard_file(
                    &self.dir,
                    &info,
                    self.layout.stride,
                    level,
                )?,
                _ => info,
            };
            self.shards.push(info);
        }
        Ok(())
    }

    /// Finishes the last shard and writes the manifest (atomically); returns it.
    pub fn finish(self) -> Result<Manifest> {
        self.finish_with(|_| {})
    }

    /// Like [`ShardSetWriter::finish`], letting the caller fill in the
    /// manifest's descriptive keys (name, stats, spec, ...) before it is written.
    pub fn finish_with(mut self, fill: impl FnOnce(&mut Manifest)) -> Result<Manifest> {
        self.close_shard()?;
        let mut m = Manifest::new(self.layout, self.shards, self.splits)?;
        fill(&mut m);
        write_manifest(&self.dir, &m)?;
        Ok(m)
    }
}

/// Writes `dir/manifest.json` atomically ([`write_atomic`]), then fsyncs
/// the directory so that the new manifest survives a power cut.
pub fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<()> {
    let target = dir.join(MANIFEST_FILE);
    manifest.validate(&target)?;
    write_atomic(&target, &manifest.to_json())?;
    sync_dir(dir)
}
