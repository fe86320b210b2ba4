//! Opening a shard set: the manifest, the memory maps (or the shard cache,
//! for sets in object stores and compressed sets), and record access.
//!
//! - this module: the [`Dataset`] view and what it tells about its set;
//! - [`open`]: opening a local directory or a URL, checking every shard's
//!   header and size;
//! - [`records`]: reading records (one, a contiguous run, a gather), from
//!   the maps or through pinned cache shards;
//! - [`gather`]: the gather kernel, prefetching records ahead of the copy.

mod gather;
mod open;
mod records;

pub(crate) use gather::gather_with;

use crate::cache::{CacheOptions, CacheStats, CachedShards};
use crate::dtype::{Element, cast_slice};
use crate::durable::hash_reader;
use crate::error::{Error, Result};
use crate::layout::{FieldLayout, RecordLayout};
use crate::manifest::Manifest;
use memmap2::Mmap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open shard set, or a split of one: a contiguous range of its rows.
///
/// Cloning is cheap (the maps are shared). Indices passed to its methods are
/// relative to the view: `0..len()`.
#[derive(Clone)]
pub struct Dataset {
    set: Arc<ShardSet>,
    rows: Range<u64>,
    split: Option<String>,
}

/// How to open a shard set: where remote and compressed shards are cached,
/// and how to reach an object store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// The local shard cache (for sets in object stores and compressed sets).
    pub cache: CacheOptions,
    /// Object-store settings for URLs, as `object_store` names them
    /// (`endpoint`, `region`, `allow_http`, `access_key_id`, ...), on top of
    /// those the environment gives (`AWS_ENDPOINT`, `AWS_REGION`, ...).
    pub storage_options: Vec<(String, String)>,
}

/// The shards, shared by every view of one set.
struct ShardSet {
    dir: PathBuf,
    manifest: Manifest,
    storage: Storage,
    /// First global row of each shard, plus the total at the end.
    starts: Vec<u64>,
    /// Rows per shard when every shard but the last holds the same count,
    /// which turns the shard lookup into a division.
    uniform_rows: Option<u64>,
    stride: usize,
    /// Keeps `tessera cache gc` from deleting the set while it is open.
    _lease: crate::lease::Lease,
    /// Why the manifest came from the shard cache instead of the store.
    offline: Option<String>,
}

/// Where the records are.
enum Storage {
    /// Every shard file memory-mapped in place (a local, uncompressed set).
    Mapped(Vec<Mmap>),
    /// Shards brought into the local shard cache when needed: a set in an
    /// object store, or a compressed one.
    Cached(Arc<CachedShards>),
}

impl Dataset {
    /// The split named `name` of this set, as its own view.
    pub fn split(&self, name: &str) -> Result<Dataset> {
        let m = &self.set.manifest;
        let s = m.split(name).ok_or_else(|| {
            let names: Vec<&str> = m.splits.iter().map(|s| s.name.as_str()).collect();
            Error::InvalidArgument(format!(
                "{}: no split named {name:?} (splits: {})",
                self.set.dir.display(),
                names.join(", ")
            ))
        })?;
        Ok(Dataset {
            set: Arc::clone(&self.set),
            rows: s.start..s.start + s.rows,
            split: Some(s.name.clone()),
        })
    }

    /// Checks the blake3 of every shard file against the manifest. For a
    /// remote or compressed set this reads every stored file from its
    /// source (not from the cache) and checks both the stored and the
    /// decompressed bytes.
    pub fn verify(&self) -> Result<()> {
        let m = &self.set.manifest;
        if let Storage::Cached(c) = &self.set.storage {
            c.verify()?;
            for f in &m.files {
                c.verify_file(&f.file, f.bytes, &f.blake3)?;
            }
            return Ok(());
        }
        let files = m
            .shards
            .iter()
            .map(|s| (&s.file, &s.blake3))
            .chain(m.files.iter().map(|f| (&f.file, &f.blake3)));
        for (file, blake3) in files {
            let path = self.set.dir.join(file);
            let mut f = File::open(&path).map_err(|e| Error::io(&path, e))?;
            let actual = hash_reader(&mut f).map_err(|e| Error::io(&path, e))?;
            if actual != *blake3 {
                return Err(Error::Checksum {
                    path,
                    expected: blake3.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }

    /// For a set at a URL whose store could not be reached when it was
    /// opened: why, and that the manifest kept in the shard cache by an
    /// earlier open was used instead (every shard it lists being in the
    /// cache and matching its blake3). Show it to the user: the set is read
    /// as it was when that copy was kept. `None` otherwise.
    pub fn offline(&self) -> Option<&str> {
        self.set.offline.as_deref()
    }

    /// Number of records in this view.
    pub fn len(&self) -> u64 {
        self.rows.end - self.rows.start
    }

    /// True when the view holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The view's rows as a range of the whole set's rows.
    pub fn row_range(&self) -> Range<u64> {
        self.rows.clone()
    }

    /// The split this view is, if it was made by [`Dataset::split`].
    pub fn split_name(&self) -> Option<&str> {
        self.split.as_deref()
    }

    /// The manifest of the whole set.
    pub fn manifest(&self) -> &Manifest {
        &self.set.manifest
    }

    /// The definition of the shuffled order this set was written with.
    pub fn order_version(&self) -> crate::order::OrderVersion {
        self.set.manifest.order()
    }

    /// The record layout.
    pub fn layout(&self) -> &RecordLayout {
        &self.set.manifest.layout
    }

    /// Bytes per record.
    pub fn stride(&self) -> usize {
        self.set.stride
    }

    /// The shard-set directory (for a set in an object store: its URL).
    pub fn dir(&self) -> &Path {
        &self.set.dir
    }

    /// True when the shards come through the local shard cache (a set in an
    /// object store, or a compressed one) rather than being mapped in place.
    pub fn is_cached(&self) -> bool {
        matches!(self.set.storage, Storage::Cached(_))
    }

    /// What the shard cache has done for this set so far (`None` for a set
    /// mapped in place).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cached().map(|c| c.stats())
    }

    /// The shard cache directory and budget in use (`None` for a set mapped
    /// in place).
    pub fn cache_dir(&self) -> Option<(&Path, Option<u64>)> {
        self.cached().map(|c| (c.dir(), c.budget()))
    }

    pub(crate) fn cached(&self) -> Option<&Arc<CachedShards>> {
        match &self.set.storage {
            Storage::Cached(c) => Some(c),
            Storage::Mapped(_) => None,
        }
    }
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("dir", &self.set.dir)
            .field("split", &self.split)
            .field("rows", &self.rows)
            .field("stride", &self.set.stride)
            .field("shards", &self.set.manifest.shards.len())
            .field("cached", &self.is_cached())
            .finish()
    }
}
/// The field `name`, checked to be viewable as `T`.
pub(crate) fn field_of<'l, T: Element>(
    layout: &'l RecordLayout,
    name: &str,
) -> Result<&'l FieldLayout> {
    let f = layout
        .field(name)
        .ok_or_else(|| Error::InvalidArgument(format!("no field named {name:?}")))?;
    if !T::accepts(f.dtype) {
        return Err(Error::InvalidArgument(format!(
            "field {name:?} has dtype {}, which cannot be viewed as {}",
            f.dtype,
            std::any::type_name::<T>()
        )));
    }
    Ok(f)
}

/// Field `f` of one record's bytes, typed.
pub(crate) fn field_slice<'a, T: Element>(record: &'a [u8], f: &FieldLayout) -> Result<&'a [T]> {
    let off = f.offset as usize;
    let bytes = record.get(off..off + f.size() as usize).ok_or_else(|| {
        Error::InvalidArgument(format!("field {:?} is outside the record", f.name))
    })?;
    cast_slice(bytes).ok_or_else(|| {
        Error::InvalidArgument(format!("field {:?} is not aligned in memory", f.name))
    })
}
