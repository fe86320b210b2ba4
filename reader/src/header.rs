//! The fixed 4096-byte header at the start of every shard file.
//!
//! Parsing works on a plain byte slice, with no I/O, so it can be fuzzed.

use crate::error::{Error, Result};
use std::path::Path;

/// The eight bytes every shard file starts with.
pub const MAGIC: [u8; 8] = *b"TSRSHARD";
/// Version 1 of the format: the shard file layout (every shard header
/// carries it, also in version-2 sets) and the version of sets whose shards
/// are all stored uncompressed.
pub const FORMAT_VERSION: u32 = 1;
/// The newest manifest version this crate reads and writes: version 2 adds
/// zstd-compressed shard files (docs/FORMAT.md section 12). A set is written
/// as version 2 only when some shard is compressed.
pub const LATEST_FORMAT_VERSION: u32 = 2;
/// Header size; records start at this offset, which is page-aligned.
pub const HEADER_LEN: usize = 4096;
/// Bytes of the header that carry fields; the rest is zero padding.
const USED: usize = 72;

/// The decoded shard header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    /// Bytes per record; must equal the manifest's stride.
    pub stride: u64,
    /// Records in this shard; must equal the manifest's count for the shard.
    pub rows: u64,
    /// blake3 digest of the record layout's canonical text.
    pub layout_digest: [u8; 32],
}

impl ShardHeader {
    /// Encodes the header into its 4096-byte on-disk form.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.stride.to_le_bytes());
        b[24..32].copy_from_slice(&self.rows.to_le_bytes());
        // 32..36: flags and 36..40: reserved, both zero in version 1.
        b[40..72].copy_from_slice(&self.layout_digest);
        b
    }

    /// Decodes and checks a header from the first bytes of a shard file.
    /// `path` is only used in error messages.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        let Some(b) = bytes.get(..HEADER_LEN) else {
            return Err(Error::header(
                path,
                format!(
                    "file is {} bytes, shorter than the {HEADER_LEN}-byte header",
                    bytes.len()
                ),
            ));
        };
        if b[0..8] != MAGIC {
            return Err(Error::header(
                path,
                format!(
                    "wrong magic {:?} (expected {:?}); not a tessera shard",
                    String::from_utf8_lossy(&b[0..8]),
                    String::from_utf8_lossy(&MAGIC)
                ),
            ));
        }
        let version = u32_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found: u64::from(version),
                supported: FORMAT_VERSION,
            });
        }
        let header_len = u32_at(b, 12);
        if header_len as usize != HEADER_LEN {
            return Err(Error::header(
                path,
                format!("header length {header_len}, expected {HEADER_LEN}"),
            ));
        }
        let flags = u32_at(b, 32);
        if flags != 0 {
            return Err(Error::header(
                path,
                format!("flags {flags:#x} are set; version 1 defines none"),
            ));
        }
        if u32_at(b, 36) != 0 {
            return Err(Error::header(path, "reserved bytes 36..40 are not zero"));
        }
        if let Some(pos) = b[USED..].iter().position(|&x| x != 0) {
            return Err(Error::header(
                path,
                format!("reserved header byte {} is not zero", USED + pos),
            ));
        }
        let mut layout_digest = [0u8; 32];
        layout_digest.copy_from_slice(&b[40..72]);
        Ok(ShardHeader {
            stride: u64_at(b, 16),
            rows: u64_at(b, 24),
            layout_digest,
        })
    }
}

/// Checks a shard's first bytes against its manifest entry: a valid header
/// (section 4.2, checks 2 to 8) with the manifest's stride, row count and
/// layout digest (checks 9 to 11). `path` is only used in errors.
pub(crate) fn check_shard_header(
    bytes: &[u8],
    path: &Path,
    stride: u64,
    rows: u64,
    digest: &[u8; 32],
) -> Result<()> {
    let header = ShardHeader::decode(bytes, path)?;
    if header.stride != stride {
        return Err(Error::header(
            path,
            format!("stride {} but the manifest says {stride}", header.stride),
        ));
    }
    if header.rows != rows {
        return Err(Error::header(
            path,
            format!("{} rows but the manifest says {rows}", header.rows),
        ));
    }
    if &header.layout_digest != digest {
        return Err(Error::header(
            path,
            format!(
                "layout digest {} does not match the manifest's layout {}",
                crate::durable::hex(&header.layout_digest),
                crate::durable::hex(digest)
            ),
        ));
    }
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ShardHeader {
        ShardHeader {
            stride: 160,
            rows: 12345,
            layout_digest: [9; 32],
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        assert_eq!(ShardHeader::decode(&h.encode(), Path::new("s")).unwrap(), h);
    }

    #[test]
    fn rejects_damage() {
        let p = Path::new("shard-00000.bin");
        let good = sample().encode();
        let mut b = good;
        b[0] = b'X';
        let e = ShardHeader::decode(&b, p).unwrap_err().to_string();
        assert!(e.contains("magic") && e.contains("shard-00000.bin"), "{e}");
        let mut b = good;
        b[8] = 2;
        assert!(matches!(
            ShardHeader::decode(&b, p),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));
        let mut b = good;
        b[4000] = 1;
        assert!(
            ShardHeader::decode(&b, p)
                .unwrap_err()
                .to_string()
                .contains("reserved")
        );
        let mut b = good;
        b[32] = 1;
        assert!(
            ShardHeader::decode(&b, p)
                .unwrap_err()
                .to_string()
                .contains("flags")
        );
        assert!(ShardHeader::decode(&good[..100], p).is_err());
    }
}
