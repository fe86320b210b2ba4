//! zstd-compressed shard files (format version 2, docs/FORMAT.md section 12).
//!
//! A compressed shard is a run of independent zstd frames, the first holding
//! the 4096-byte header and each further one a block of whole records, then
//! a skippable frame with a seek table (zstd's "seekable format": each data
//! frame's compressed and decompressed size). Independent frames let a
//! reader start at any block and decompress the blocks of one shard on
//! several threads; the file is still a plain zstd stream, so `zstd -d` turns
//! it back into the shard. Parsing works on byte slices, without I/O.

use crate::error::{Error, Result};
use crate::header::HEADER_LEN;
#[cfg(feature = "zstd")]
use crate::manifest::{Compression, ShardInfo};
#[cfg(feature = "zstd")]
use std::io::Write;
use std::ops::Range;
use std::path::Path;

/// Magic number of a zstd skippable frame (the first of the 16 allowed).
const SKIPPABLE_MAGIC: u32 = 0x184D_2A5E;
/// Last four bytes of a file in zstd's seekable format.
const SEEKABLE_MAGIC: u32 = 0x8F92_EAB1;
/// Seek-table footer: frame count (4), descriptor (1), magic (4).
const FOOTER_LEN: usize = 9;
/// Uncompressed bytes of records per frame the writer aims for.
#[cfg(feature = "zstd")]
const BLOCK_BYTES: u64 = 1 << 20;
/// Suffix the writer gives compressed shard files.
pub const ZSTD_SUFFIX: &str = ".zst";
/// Compression levels accepted (zstd's standard range).
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=22;

/// A data frame: its byte range in the compressed file, and in the
/// decompressed shard.
type Frame = (Range<usize>, Range<usize>);

/// The frames of a compressed shard: where each one is in the file and in
/// the decompressed shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SeekTable {
    /// Per data frame: its byte range in the compressed file and in the
    /// decompressed shard.
    frames: Vec<Frame>,
}

impl SeekTable {
    /// Reads and checks the seek table at the end of `file`: the frames must
    /// cover the file up to the table exactly, the first must decompress to
    /// the header alone, and together they must decompress to `expected`
    /// bytes.
    pub(crate) fn parse(file: &[u8], expected: u64, path: &Path) -> Result<Self> {
        let bad = |r: String| Error::compressed(path, r);
        let len = file.len();
        if len < 8 + FOOTER_LEN {
            return Err(bad(format!("{len} bytes is too short for a seek table")));
        }
        if u32_at(file, len - 4) != SEEKABLE_MAGIC {
            return Err(bad("no seek table at the end (wrong magic)".into()));
        }
        let descriptor = file[len - 5];
        if descriptor != 0 {
            return Err(bad(format!(
                "seek table descriptor {descriptor:#x} is not 0 (no checksums, no reserved bits)"
            )));
        }
        let count = u32_at(file, len - FOOTER_LEN) as usize;
        let table_len = count
            .checked_mul(8)
            .and_then(|n| n.checked_add(FOOTER_LEN))
            .filter(|&n| n + 8 <= len)
            .ok_or_else(|| {
                bad(format!(
                    "seek table of {count} frames does not fit the file"
                ))
            })?;
        let start = len - 8 - table_len;
        if u32_at(file, start) != SKIPPABLE_MAGIC || u32_at(file, start + 4) as usize != table_len {
            return Err(bad("seek table frame header is malformed".into()));
        }
        if count == 0 {
            return Err(bad("the seek table lists no frame".into()));
        }
        let mut frames = Vec::with_capacity(count);
        let (mut at, mut out) = (0usize, 0u64);
        for k in 0..count {
            let e = start + 8 + 8 * k;
            let (c, d) = (u32_at(file, e) as usize, u32_at(file, e + 4) as u64);
            if c == 0 || at + c > start {
                return Err(bad(format!(
                    "frame {k}: compressed size {c} leaves the file"
                )));
            }
            if k == 0 && d != HEADER_LEN as u64 {
                return Err(bad(format!(
                    "frame 0 decompresses to {d} bytes, not the {HEADER_LEN}-byte header"
                )));
            }
            if k > 0 && d == 0 {
                return Err(bad(format!("frame {k} holds no record")));
            }
            let end = out + d;
            if end > expected {
                return Err(bad(format!(
                    "frames decompress to more than the {expected} bytes the manifest says"
                )));
            }
            frames.push((at..at + c, out as usize..end as usize));
            at += c;
            out = end;
        }
        if at != start {
            return Err(bad(format!(
                "{} bytes between the last frame and the seek table",
                start - at
            )));
        }
        if out != expected {
            return Err(bad(format!(
                "frames decompress to {out} bytes, the manifest says {expected}"
            )));
        }
        Ok(SeekTable { frames })
    }

    /// Decompressed byte ranges of the frames: frame 0 is the header.
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.frames.iter().map(|(_, d)| d.clone())
    }
}

/// Without the `zstd` feature, compressed shards cannot be read.
#[cfg(not(feature = "zstd"))]
pub(crate) fn decompress_into(
    _file: &[u8],
    _table: &SeekTable,
    _out: &mut [u8],
    _threads: usize,
    path: &Path,
) -> Result<()> {
    Err(Error::compressed(
        path,
        "this build of tessera-shards-reader cannot decompress zstd (enable its `zstd` feature)",
    ))
}

/// Decompresses the shard `file` into `out`, which must be exactly the
/// decompressed size the seek table was checked against, using up to
/// `threads` threads (blocks are independent frames).
#[cfg(feature = "zstd")]
pub(crate) fn decompress_into(
    file: &[u8],
    table: &SeekTable,
    out: &mut [u8],
    threads: usize,
    path: &Path,
) -> Result<()> {
    let total = table.frames.last().map_or(0, |(_, d)| d.end);
    if out.len() != total {
        return Err(Error::compressed(
            path,
            format!("output is {} bytes, the shard {total}", out.len()),
        ));
    }
    // Cut the frames into one contiguous run per thread, balanced by size.
    let threads = threads.clamp(1, table.frames.len());
    let per = total.div_ceil(threads);
    let mut runs: Vec<(&[Frame], &mut [u8])> = Vec::new();
    let (mut rest, mut frames) = (out, &table.frames[..]);
    while !frames.is_empty() {
        let first = frames[0].1.start;
        let n = frames
            .iter()
            .position(|(_, d)| d.end - first > per)
            .unwrap_or(frames.len())
            .max(1);
        let bytes = frames[n - 1].1.end - first;
        let (mine, tail) = rest.split_at_mut(bytes);
        runs.push((&frames[..n], mine));
        rest = tail;
        frames = &frames[n..];
    }
    let run = |(frames, out): (&[Frame], &mut [u8])| -> Result<()> {
        let base = frames.first().map_or(0, |(_, d)| d.start);
        let mut dctx = zstd::bulk::Decompressor::new().map_err(|e| Error::io(path, e))?;
        for (c, d) in frames {
            let dst = &mut out[d.start - base..d.end - base];
            let n = dctx
                .decompress_to_buffer(&file[c.clone()], dst)
                .map_err(|e| Error::compressed(path, format!("block at byte {}: {e}", c.start)))?;
            if n != dst.len() {
                return Err(Error::compressed(
                    path,
                    format!(
                        "block at byte {} decompresses to {n} bytes, the seek table says {}",
                        c.start,
                        dst.len()
                    ),
                ));
            }
        }
        Ok(())
    };
    if runs.len() == 1 {
        return runs.pop().map_or(Ok(()), run);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = runs.into_iter().map(|r| s.spawn(move || run(r))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::compressed(path, "a decompression thread panicked"))
                })
            })
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(())
}

#[cfg(feature = "zstd")]
/// Writes `shard` (a whole uncompressed shard file) to `out` as a compressed
/// shard: the header frame, one frame per block of about 1 MiB of whole
/// records, and the seek table. Returns the compressed size.
pub(crate) fn compress_to(
    shard: &[u8],
    stride: u64,
    level: i32,
    out: &mut impl Write,
    path: &Path,
) -> Result<u64> {
    let io = |e| Error::io(path, e);
    if shard.len() < HEADER_LEN || stride == 0 {
        return Err(Error::compressed(path, "not a shard file"));
    }
    let mut cctx = zstd::bulk::Compressor::new(level).map_err(io)?;
    let block = ((BLOCK_BYTES / stride).max(1) * stride) as usize;
    let mut sizes: Vec<(u32, u32)> = Vec::new();
    let mut written = 0u64;
    let (header, records) = shard.split_at(HEADER_LEN);
    for chunk in std::iter::once(header).chain(records.chunks(block)) {
        let frame = cctx.compress(chunk).map_err(io)?;
        let too_big = |what: usize| {
            u32::try_from(what)
                .map_err(|_| Error::compressed(path, "a block does not fit the seek table"))
        };
        sizes.push((too_big(frame.len())?, too_big(chunk.len())?));
        out.write_all(&frame).map_err(io)?;
        written += frame.len() as u64;
    }
    let count = u32::try_from(sizes.len())
        .map_err(|_| Error::compressed(path, "too many blocks for the seek table"))?;
    let table_len = 8 * sizes.len() + FOOTER_LEN;
    let mut table = Vec::with_capacity(8 + table_len);
    table.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    table.extend_from_slice(&(table_len as u32).to_le_bytes());
    for (c, d) in &sizes {
        table.extend_from_slice(&c.to_le_bytes());
        table.extend_from_slice(&d.to_le_bytes());
    }
    table.extend_from_slice(&count.to_le_bytes());
    table.push(0);
    table.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
    out.write_all(&table).map_err(io)?;
    Ok(written + table.len() as u64)
}

#[cfg(feature = "zstd")]
/// Compresses the uncompressed shard `dir/info.file` at zstd `level` into
/// `dir/<file>.zst` (fsynced), removes the original, and returns the
/// compressed shard's manifest entry. A no-op for a shard already
/// compressed.
pub fn compress_shard_file(
    dir: &Path,
    info: &ShardInfo,
    stride: u64,
    level: i32,
) -> Result<ShardInfo> {
    if info.is_compressed() {
        return Ok(info.clone());
    }
    if !ZSTD_LEVELS.contains(&level) {
        return Err(Error::InvalidArgument(format!(
            "zstd level {level} is not in {}..={}",
            ZSTD_LEVELS.start(),
            ZSTD_LEVELS.end()
        )));
    }
    let src = dir.join(&info.file);
    let name = format!("{}{ZSTD_SUFFIX}", info.file);
    let dst = dir.join(&name);
    let data = std::fs::read(&src).map_err(|e| Error::io(&src, e))?;
    if data.len() as u64 != info.bytes {
        return Err(Error::Size {
            path: src,
            expected: info.bytes,
            actual: data.len() as u64,
        });
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&dst)
        .map_err(|e| Error::io(&dst, e))?;
    let mut out =
        crate::durable::HashingWriter::new(std::io::BufWriter::with_capacity(1 << 20, file));
    let stored = compress_to(&data, stride, level, &mut out, &dst)?;
    let (inner, hash) = out.finish();
    let file = inner
        .into_inner()
        .map_err(|e| Error::io(&dst, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(&dst, e))?;
    drop(file);
    std::fs::remove_file(&src).map_err(|e| Error::io(&src, e))?;
    Ok(ShardInfo {
        file: name,
        compression: Compression::Zstd,
        stored_bytes: Some(stored),
        stored_blake3: Some(hash),
        ..info.clone()
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

#[cfg(all(test, feature = "zstd"))]
mod tests {
    use super::*;

    fn shard(rows: usize, stride: usize) -> Vec<u8> {
        let mut v = vec![0u8; HEADER_LEN + rows * stride];
        v[..8].copy_from_slice(b"TSRSHARD");
        for (i, b) in v[HEADER_LEN..].iter_mut().enumerate() {
            *b = ((i / 7) % 251) as u8;
        }
        v
    }

    fn compress(data: &[u8], stride: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let n = compress_to(data, stride, 3, &mut out, Path::new("s.zst")).unwrap();
        assert_eq!(n as usize, out.len());
        out
    }

    #[test]
    fn round_trip_in_blocks_on_any_thread_count() {
        let stride = 160;
        let data = shard(20_000, stride);
        let z = compress(&data, stride as u64);
        assert!(z.len() < data.len() / 4, "{} of {}", z.len(), data.len());
        let t = SeekTable::parse(&z, data.len() as u64, Path::new("s")).unwrap();
        let blocks: Vec<_> = t.blocks().collect();
        assert_eq!(blocks[0], 0..HEADER_LEN);
        // Every block after the header holds whole records.
        assert!(blocks.len() > 3);
        assert!(blocks[1..].iter().all(|b| b.len() % stride == 0));
        for threads in [1, 2, 3, 8] {
            let mut out = vec![0u8; data.len()];
            decompress_into(&z, &t, &mut out, threads, Path::new("s")).unwrap();
            assert!(out == data, "threads {threads}");
        }
        // Independent frames: block 2 alone decompresses to its records.
        let (c, d) = t.frames[2].clone();
        let alone = zstd::bulk::decompress(&z[c], d.len()).unwrap();
        assert_eq!(alone, data[d]);
        // And the whole file is an ordinary zstd stream.
        assert_eq!(zstd::stream::decode_all(&z[..]).unwrap(), data);
    }

    #[test]
    fn damage_is_reported() {
        let data = shard(5000, 64);
        let z = compress(&data, 64);
        let p = Path::new("x.bin.zst");
        let n = data.len() as u64;
        let err = |bytes: &[u8], expected: u64| -> String {
            match SeekTable::parse(bytes, expected, p) {
                Err(e) => e.to_string(),
                Ok(t) => {
                    let mut out = vec![0u8; expected as usize];
                    decompress_into(bytes, &t, &mut out, 2, p)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                }
            }
        };
        assert!(err(&z[..z.len() - 1], n).contains("seek table"));
        assert!(err(&z, n + 1).contains("the manifest says"));
        assert!(err(&z[..10], n).contains("too short"));
        // A damaged record frame either fails to decode (naming the file and
        // the block) or decodes to other bytes, which the blake3 of the
        // decompressed shard then catches.
        let t = SeekTable::parse(&z, n, p).unwrap();
        let at = t.frames[1].0.start + 20;
        let mut flipped = z.clone();
        flipped[at] ^= 0xff;
        let mut out = vec![0u8; data.len()];
        match decompress_into(&flipped, &t, &mut out, 1, p) {
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("x.bin.zst") && e.contains("block"), "{e}");
            }
            Ok(()) => assert!(out != data),
        }
        let mut cut = z[..20].to_vec();
        cut.extend_from_slice(&z[z.len() - 30..]);
        assert!(!err(&cut, n).is_empty());
    }
}
