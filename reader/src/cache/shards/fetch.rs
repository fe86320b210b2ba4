//! Fetching: a shard read from its source into a reserved cache file
//! (decompressed if stored compressed), and the checks of stored and
//! decompressed bytes against the manifest.

use super::CachedShards;
use crate::compressed::{SeekTable, decompress_into};
use crate::durable::hex;
use crate::error::{Error, Result};
use crate::header::HEADER_LEN;
use memmap2::MmapMut;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

impl CachedShards {
    /// Fetches shard `s` into its reserved `.part`, decompressing if it is
    /// stored compressed, and checks the result against the manifest.
    pub(super) fn fill(&self, s: usize, file: &File) -> Result<()> {
        let info = &self.shards[s];
        let loc = self.source.locate(&info.file);
        let t = Instant::now();
        if info.is_compressed() {
            let size = info.file_bytes();
            let mut stored: Vec<u8> = Vec::new();
            stored
                .try_reserve_exact(size as usize)
                .map_err(|_| Error::compressed(&loc, format!("cannot allocate {size} bytes")))?;
            self.source.read(&info.file, size, &mut |b| {
                if stored.len() + b.len() > size as usize {
                    return Err(Error::Size {
                        path: loc.clone(),
                        expected: size,
                        actual: (stored.len() + b.len()) as u64,
                    });
                }
                stored.extend_from_slice(b);
                Ok(())
            })?;
            if stored.len() as u64 != size {
                return Err(Error::Size {
                    path: loc,
                    expected: size,
                    actual: stored.len() as u64,
                });
            }
            let fetched = t.elapsed().as_secs_f64();
            same_blake3(&stored, info.file_blake3(), &loc)?;
            let t = Instant::now();
            let table = SeekTable::parse(&stored, info.bytes, &loc)?;
            let part = self.dir.root().join(format!("{}.part", info.blake3));
            // SAFETY: the `.part` is ours alone: created by us with
            // `create_new`, exclusively locked, and at its final size; no
            // other process maps or writes it before we rename it.
            let mut map = unsafe { MmapMut::map_mut(file) }.map_err(|e| Error::io(&part, e))?;
            // Only a hint (see `dataset::open::huge_pages`): the pages the
            // decompression writes then come in 2 MiB folios where the
            // kernel can, which the readers' maps reach as huge pages.
            #[cfg(target_os = "linux")]
            let _ = map.advise(memmap2::Advice::HugePage);
            decompress_into(&stored, &table, &mut map, self.decompress_threads, &loc)?;
            self.verify_content(&map, s, &loc)?;
            map.flush().map_err(|e| Error::io(&part, e))?;
            let dt = t.elapsed().as_secs_f64();
            self.stat(|c| {
                c.fetch_seconds += fetched;
                c.decompress_seconds += dt;
                c.transferred_bytes += size;
            });
        } else {
            let size = info.bytes;
            let mut hasher = blake3::Hasher::new();
            let mut header = Vec::with_capacity(HEADER_LEN);
            let mut out = crate::durable::ChunkedWriter::new(file);
            let mut got = 0u64;
            self.source.read(&info.file, size, &mut |b| {
                got += b.len() as u64;
                if got > size {
                    return Err(Error::Size {
                        path: loc.clone(),
                        expected: size,
                        actual: got,
                    });
                }
                let h = (HEADER_LEN - header.len()).min(b.len());
                header.extend_from_slice(&b[..h]);
                hasher.update(b);
                out.write_all(b).map_err(|e| Error::io(&loc, e))
            })?;
            out.flush().map_err(|e| Error::io(&loc, e))?;
            drop(out);
            if got != size {
                return Err(Error::Size {
                    path: loc,
                    expected: size,
                    actual: got,
                });
            }
            same_digest(&hasher, &info.blake3, &loc)?;
            self.check_header(&header, s)?;
            let dt = t.elapsed().as_secs_f64();
            self.stat(|c| {
                c.fetch_seconds += dt;
                c.transferred_bytes += size;
            });
        }
        file.sync_data()
            .map_err(|e| Error::io(self.dir.root(), e))?;
        self.stat(|c| {
            c.fetched_shards += 1;
            c.fetched_bytes += info.bytes;
        });
        Ok(())
    }

    /// The decompressed shard's blake3 and header against the manifest.
    fn verify_content(&self, bytes: &[u8], s: usize, loc: &Path) -> Result<()> {
        let info = &self.shards[s];
        same_blake3(bytes, &info.blake3, loc)?;
        self.check_header(bytes, s)
    }

    pub(super) fn check_header(&self, bytes: &[u8], s: usize) -> Result<()> {
        let info = &self.shards[s];
        let path = self.source.locate(&info.file);
        crate::header::check_shard_header(bytes, &path, self.stride, info.rows, &self.digest)
    }

    /// Checks the blake3 of a set's other file (manifest `files`) at its
    /// source.
    pub(crate) fn verify_file(&self, name: &str, size: u64, blake3: &str) -> Result<()> {
        let mut hasher = blake3::Hasher::new();
        self.source.read(name, size, &mut |b| {
            hasher.update(b);
            Ok(())
        })?;
        same_digest(&hasher, blake3, &self.source.locate(name))
    }

    /// Checks every stored shard against the manifest (both hashes when
    /// compressed), reading from the source, not from the cache.
    pub(crate) fn verify(&self) -> Result<()> {
        for (s, info) in self.shards.iter().enumerate() {
            let loc = self.source.locate(&info.file);
            let size = info.file_bytes();
            if info.is_compressed() {
                let mut stored = Vec::new();
                self.source.read(&info.file, size, &mut |b| {
                    stored.extend_from_slice(b);
                    Ok(())
                })?;
                same_blake3(&stored, info.file_blake3(), &loc)?;
                let table = SeekTable::parse(&stored, info.bytes, &loc)?;
                let mut out = vec![0u8; info.bytes as usize];
                decompress_into(&stored, &table, &mut out, self.decompress_threads, &loc)?;
                self.verify_content(&out, s, &loc)?;
            } else {
                self.verify_file(&info.file, size, &info.blake3)?;
            }
        }
        Ok(())
    }
}

/// Whether `bytes` hash to `expected` (a manifest's lowercase hex blake3);
/// the error names `path`.
fn same_blake3(bytes: &[u8], expected: &str, path: &Path) -> Result<()> {
    let mut hasher = blake3::Hasher::new();
    hasher.update(bytes);
    same_digest(&hasher, expected, path)
}

/// What `hasher` has seen against the manifest's hex digest `expected`.
fn same_digest(hasher: &blake3::Hasher, expected: &str, path: &Path) -> Result<()> {
    let actual = hex(hasher.finalize().as_bytes());
    if actual != expected {
        return Err(Error::Checksum {
            path: path.to_path_buf(),
            expected: expected.to_owned(),
            actual,
        });
    }
    Ok(())
}
