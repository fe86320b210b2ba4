//! Opening a shard set: a local directory (every shard mapped and its
//! header and size checked, or a compressed set through the shard cache) or
//! a URL (the manifest now, the shards through the cache).

use super::{Dataset, OpenOptions, ShardSet, Storage};
use crate::cache::CachedShards;
use crate::error::{Error, Result};
use crate::header::check_shard_header;
use crate::manifest::{MANIFEST_FILE, Manifest};
use memmap2::Mmap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Dataset {
    /// Opens the shard set in `dir`: parses `manifest.json`, memory-maps every
    /// shard and checks each header (magic, version, stride, row count, layout
    /// digest) and file size against the manifest. Use [`Dataset::verify`] to
    /// also check every byte. While any view of a local set is open, it holds
    /// a lease that keeps `tessera cache gc` from deleting it
    /// ([`crate::lease`]).
    ///
    /// `dir` may also be a URL (`s3://bucket/prefix`, `gs://`, `az://`,
    /// `http(s)://`, `file://`; object stores need the `remote` feature):
    /// then only the manifest is read here, and shards are fetched into the
    /// local shard cache as they are needed. A compressed set's shards are
    /// decompressed into that cache. See [`Dataset::open_with`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, &OpenOptions::default())
    }

    /// [`Dataset::open`] with a shard cache directory and budget, and
    /// object-store settings, of one's choosing.
    pub fn open_with(dir: impl AsRef<Path>, opts: &OpenOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let dir = match crate::location::classify(dir)? {
            crate::location::Location::Local(p) => p,
            crate::location::Location::Url(url) => return Self::open_url(url, opts),
        };
        let lease = crate::lease::Lease::take(&dir)?;
        let manifest_path = dir.join(MANIFEST_FILE);
        let bytes = read_manifest(&manifest_path)?;
        let manifest = Manifest::parse(&bytes, &manifest_path)?;
        for info in &manifest.files {
            let path = dir.join(&info.file);
            let actual = match std::fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::MissingShard { path });
                }
                Err(e) => return Err(Error::io(&path, e)),
            };
            if actual != info.bytes {
                return Err(Error::Size {
                    path,
                    expected: info.bytes,
                    actual,
                });
            }
        }
        if manifest.is_compressed() {
            let source = Box::new(crate::source::LocalDir { dir: dir.clone() });
            let location = dir.display().to_string();
            let cache = CachedShards::open(location, &manifest, source, &opts.cache, false)?;
            return Self::assemble(dir, manifest, Storage::Cached(cache), lease);
        }
        let digest = manifest.layout.digest();
        let stride = manifest.layout.stride;
        let mut maps = Vec::with_capacity(manifest.shards.len());
        for info in &manifest.shards {
            let path = dir.join(&info.file);
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::MissingShard { path });
                }
                Err(e) => return Err(Error::io(&path, e)),
            };
            let actual = file.metadata().map_err(|e| Error::io(&path, e))?.len();
            if actual != info.bytes {
                return Err(Error::Size {
                    path,
                    expected: info.bytes,
                    actual,
                });
            }
            // SAFETY: a published shard file is immutable: writers create new
            // files and never modify or truncate one that may be mapped
            // (docs/FORMAT.md, "Immutability"). The size was checked above,
            // and every access below goes through bounds-checked slices.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
            huge_pages(&map);
            check_shard_header(&map, &path, stride, info.rows, &digest)?;
            maps.push(map);
        }
        Self::assemble(dir, manifest, Storage::Mapped(maps), lease)
    }

    /// A set in an object store: its manifest now, its shards through the
    /// cache.
    #[cfg(feature = "remote")]
    fn open_url(url: String, opts: &OpenOptions) -> Result<Self> {
        let root = opts.cache.resolved_dir()?;
        let set = crate::remote::open_set(&url, &opts.storage_options, &root)?;
        let cache = CachedShards::open(url.clone(), &set.manifest, set.source, &opts.cache, true)?;
        let mut ds = Self::assemble(
            PathBuf::from(url),
            set.manifest,
            Storage::Cached(cache),
            crate::lease::Lease::none(),
        )?;
        if let Some(set_mut) = Arc::get_mut(&mut ds.set) {
            set_mut.offline = set.offline;
        }
        Ok(ds)
    }

    #[cfg(not(feature = "remote"))]
    fn open_url(url: String, _opts: &OpenOptions) -> Result<Self> {
        Err(Error::Remote {
            url,
            reason: "this build of tessera-shards-reader has no object-store support \
                     (enable its `remote` feature)"
                .into(),
        })
    }

    /// The set over `storage`, with its shard table.
    fn assemble(
        dir: PathBuf,
        manifest: Manifest,
        storage: Storage,
        lease: crate::lease::Lease,
    ) -> Result<Self> {
        let mut starts = Vec::with_capacity(manifest.shards.len() + 1);
        let mut next = 0u64;
        for info in &manifest.shards {
            starts.push(next);
            next += info.rows;
        }
        starts.push(next);
        let manifest_path = dir.join(MANIFEST_FILE);
        let stride = manifest.layout.stride;
        let uniform_rows = match manifest.shards.split_last() {
            Some((_, rest)) if !rest.is_empty() => {
                let r = rest[0].rows;
                rest.iter().all(|s| s.rows == r).then_some(r)
            }
            _ => None,
        };
        let total = manifest.rows;
        let set = ShardSet {
            dir,
            storage,
            starts,
            uniform_rows,
            stride: usize::try_from(stride)
                .map_err(|_| Error::manifest(&manifest_path, "stride does not fit in memory"))?,
            manifest,
            _lease: lease,
            offline: None,
        };
        Ok(Dataset {
            set: Arc::new(set),
            rows: 0..total,
            split: None,
        })
    }
}

fn read_manifest(path: &Path) -> Result<Vec<u8>> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut bytes = Vec::new();
    f.take(crate::manifest::MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// Asks for huge pages where the kernel can give them: pages read from disk
/// into this map then arrive in 2 MiB folios, mapped through one page-table
/// entry each (fewer TLB misses when copying records out; see
/// `durable::chunked`). Only a hint: a kernel or file system that cannot
/// refuses it, and nothing changes.
fn huge_pages(map: &Mmap) {
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}
