//! `manifest.json`: the description of a shard set, and its validation.
//!
//! Parsing works on a byte slice with no I/O, so it can be fuzzed. A manifest
//! that passes [`Manifest::parse`] is internally consistent: sizes add up
//! without overflow, splits partition the rows, names are safe file names.

use crate::durable::{hex, is_hex_digest};
use crate::error::{Error, Result};
use crate::header::{FORMAT_VERSION, HEADER_LEN, LATEST_FORMAT_VERSION};
use crate::layout::RecordLayout;
use crate::order::OrderVersion;
use serde::{Deserialize, Serialize};
use std::path::Path;

mod sections;
mod stats;
pub use sections::{BuildRecord, PackRecord, PlanDecision, QueryColumn, ScanMetrics};
pub use stats::{
    InlineVocab, StatsEntry, VOCAB_INLINE, VocabEntry, parse_vocab_line, vocab_file_name,
    vocab_line,
};

/// The value of the manifest's `format` key.
pub const FORMAT_NAME: &str = "tessera-shards";
/// The manifest's file name inside a shard-set directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Largest manifest a reader accepts (64 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// Most shards a manifest may list.
pub const MAX_SHARDS: usize = 1 << 20;

/// How a shard file is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The file is the shard itself and is memory-mapped directly.
    #[default]
    None,
    /// The file is the shard compressed as zstd frames, one per block of
    /// records, plus a seek table (format version 2; docs/FORMAT.md section
    /// 12). A reader decompresses it once into its shard cache and maps that.
    Zstd,
}

/// One shard file as the manifest records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardInfo {
    /// File name relative to the shard-set directory.
    pub file: String,
    /// Records in the shard (at least one).
    pub rows: u64,
    /// File size: `4096 + rows * stride`.
    pub bytes: u64,
    /// Lowercase hex blake3 of the whole file.
    pub blake3: String,
    /// How the file is stored.
    #[serde(default)]
    pub compression: Compression,
    /// Size of the stored (compressed) file; present exactly when the shard
    /// is compressed. `bytes` and `blake3` describe the decompressed shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    /// Lowercase hex blake3 of the stored (compressed) file; present
    /// exactly when the shard is compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_blake3: Option<String>,
}

impl ShardInfo {
    /// Size of the file as stored: the compressed size, or `bytes`.
    pub fn file_bytes(&self) -> u64 {
        self.stored_bytes.unwrap_or(self.bytes)
    }

    /// blake3 of the file as stored: of the compressed file, or `blake3`.
    pub fn file_blake3(&self) -> &str {
        self.stored_blake3.as_deref().unwrap_or(&self.blake3)
    }

    /// True when the stored file must be decompressed before it is mapped.
    pub fn is_compressed(&self) -> bool {
        self.compression != Compression::None
    }
}

/// A file of the set other than the manifest and the shards, such as a large
/// vocabulary the compiler keeps out of the manifest. Verified like a shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileInfo {
    /// File name relative to the shard-set directory.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Lowercase hex blake3 of the whole file.
    pub blake3: String,
}

/// A named, contiguous range of rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitInfo {
    /// Split name, such as `train` or `val`.
    pub name: String,
    /// First row of the split in the shard set.
    pub start: u64,
    /// Rows in the split.
    pub rows: u64,
}

/// The parsed manifest of a shard set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] (1) when every shard is stored uncompressed, 2
    /// ([`LATEST_FORMAT_VERSION`]) when some are compressed.
    pub format_version: u64,
    /// Content hash naming the artifact (hex), or empty when not built by the
    /// compiler.
    #[serde(default)]
    pub artifact_hash: String,
    /// Human-readable dataset name.
    #[serde(default)]
    pub name: String,
    /// Program and version that wrote the set.
    #[serde(default)]
    pub created_by: String,
    /// The record layout.
    pub layout: RecordLayout,
    /// Hex blake3 of the layout's canonical text; equals the digest in every
    /// shard header.
    pub layout_digest: String,
    /// Total records over all shards.
    pub rows: u64,
    /// Shards in row order.
    pub shards: Vec<ShardInfo>,
    /// Splits in row order; they partition `0..rows`.
    pub splits: Vec<SplitInfo>,
    /// Which definition of the shuffled reading order the set uses
    /// (docs/FORMAT.md, section 14.2). Absent in sets written before order
    /// version 2, which read as version 1; written only when not 1.
    #[serde(default = "legacy_order", skip_serializing_if = "is_legacy_order")]
    pub order_version: u64,
    /// Other files of the set (section 3.7), verified like shards. Absent
    /// when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileInfo>,
    /// Frozen transform statistics: free-form JSON; the compiler writes a
    /// list of [`StatsEntry`] per field ([`Manifest::stats_of`] reads them).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub stats: serde_json::Value,
    /// The canonical spec the set was built from (free-form JSON).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub spec: serde_json::Value,
    /// Fingerprints of the input files (free-form JSON).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub inputs: serde_json::Value,
    /// Build information: free-form JSON; the compiler writes a
    /// [`BuildRecord`] ([`Manifest::build_record`] reads it).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub build: serde_json::Value,
}

impl Manifest {
    /// A manifest for a set with this layout, shards and splits; the optional
    /// JSON parts start empty. Fails if the pieces are inconsistent.
    pub fn new(
        layout: RecordLayout,
        shards: Vec<ShardInfo>,
        splits: Vec<SplitInfo>,
    ) -> Result<Self> {
        let rows = shards
            .iter()
            .try_fold(0u64, |acc, s| acc.checked_add(s.rows))
            .ok_or_else(|| Error::InvalidArgument("row count overflows".into()))?;
        let m = Manifest {
            format: FORMAT_NAME.into(),
            format_version: version_for(&shards),
            artifact_hash: String::new(),
            name: String::new(),
            created_by: format!("tessera-reader {}", env!("CARGO_PKG_VERSION")),
            layout_digest: hex(&layout.digest()),
            layout,
            rows,
            shards,
            splits,
            order_version: u64::from(OrderVersion::LATEST.number()),
            files: Vec::new(),
            stats: serde_json::Value::Null,
            spec: serde_json::Value::Null,
            inputs: serde_json::Value::Null,
            build: serde_json::Value::Null,
        };
        m.validate(Path::new(MANIFEST_FILE))?;
        Ok(m)
    }

    /// Parses and validates manifest bytes. `path` is only used in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(Error::manifest(
                path,
                format!(
                    "{} bytes is larger than the {MAX_MANIFEST_BYTES}-byte limit",
                    bytes.len()
                ),
            ));
        }
        // Check the format and version before the full structure, so that a
        // future version gives a version error rather than a schema error.
        let probe: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::manifest(path, format!("not valid JSON: {e}")))?;
        match probe.get("format").and_then(|v| v.as_str()) {
            Some(FORMAT_NAME) => {}
            Some(other) => {
                return Err(Error::manifest(
                    path,
                    format!("key `format` is {other:?}, expected {FORMAT_NAME:?}"),
                ));
            }
            None => {
                return Err(Error::manifest(
                    path,
                    format!("key `format` is missing or not a string (expected {FORMAT_NAME:?})"),
                ));
            }
        }
        match probe.get("format_version").and_then(|v| v.as_u64()) {
            Some(v) if is_known_version(v) => {}
            Some(v) => {
                return Err(Error::UnsupportedVersion {
                    path: path.to_path_buf(),
                    found: v,
                    supported: LATEST_FORMAT_VERSION,
                });
            }
            None => {
                return Err(Error::manifest(
                    path,
                    "key `format_version` is missing or not an unsigned integer",
                ));
            }
        }
        let m: Manifest =
            serde_json::from_value(probe).map_err(|e| Error::manifest(path, e.to_string()))?;
        m.validate(path)?;
        Ok(m)
    }

    /// Serializes the manifest as pretty JSON with a trailing newline.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing plain structs and `serde_json::Value`s cannot fail.
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Checks every invariant listed in docs/FORMAT.md.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |reason: String| Error::manifest(path, reason);
        if self.format != FORMAT_NAME {
            return Err(bad(format!("key `format` is {:?}", self.format)));
        }
        if !is_known_version(self.format_version) {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found: self.format_version,
                supported: LATEST_FORMAT_VERSION,
            });
        }
        self.layout
            .validate()
            .map_err(|e| bad(format!("key `layout`: {e}")))?;
        let digest = hex(&self.layout.digest());
        if self.layout_digest != digest {
            return Err(bad(format!(
                "key `layout_digest` is {:?} but the layout hashes to {digest}",
                self.layout_digest
            )));
        }
        if self.shards.len() > MAX_SHARDS {
            return Err(bad(format!(
                "{} shards is over the limit of {MAX_SHARDS}",
                self.shards.len()
            )));
        }
        for (i, f) in self.files.iter().enumerate() {
            let key = format!("files[{i}]");
            check_file_name(&f.file).map_err(|r| bad(format!("{key}.file: {r}")))?;
            if self.files[..i].iter().any(|t| t.file == f.file)
                || self.shards.iter().any(|t| t.file == f.file)
                || f.file == MANIFEST_FILE
            {
                return Err(bad(format!("{key}.file {:?} is listed twice", f.file)));
            }
            if f.blake3.len() != 64 || !f.blake3.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(format!("{key}.blake3 is not 64 hex digits")));
            }
        }
        let mut total = 0u64;
        for (i, s) in self.shards.iter().enumerate() {
            let key = format!("shards[{i}]");
            check_file_name(&s.file).map_err(|r| bad(format!("{key}.file: {r}")))?;
            if self.shards[..i].iter().any(|t| t.file == s.file) {
                return Err(bad(format!("{key}.file {:?} is listed twice", s.file)));
            }
            if s.rows == 0 {
                return Err(bad(format!("{key} ({}) has 0 rows", s.file)));
            }
            let expected = s
                .rows
                .checked_mul(self.layout.stride)
                .and_then(|b| b.checked_add(HEADER_LEN as u64));
            if expected != Some(s.bytes) {
                return Err(bad(format!(
                    "{key} ({}): bytes {} != 4096 + rows {} * stride {}",
                    s.file, s.bytes, s.rows, self.layout.stride
                )));
            }
            if !is_hex_digest(&s.blake3) {
                return Err(bad(format!(
                    "{key}.blake3 {:?} is not 64 lowercase hex digits",
                    s.blake3
                )));
            }
            self.check_storage(s)
                .map_err(|r| bad(format!("{key} ({}): {r}", s.file)))?;
            total = total
                .checked_add(s.rows)
                .ok_or_else(|| bad("total row count overflows".into()))?;
        }
        if total != self.rows {
            return Err(bad(format!(
                "key `rows` is {} but the shards hold {total}",
                self.rows
            )));
        }
        OrderVersion::from_number(self.order_version)
            .map_err(|e| bad(format!("key `order_version`: {e}")))?;
        if self.splits.is_empty() {
            return Err(bad(
                "key `splits` is empty; a set has at least one split".into()
            ));
        }
        let mut next = 0u64;
        for (i, s) in self.splits.iter().enumerate() {
            if s.name.is_empty() {
                return Err(bad(format!("splits[{i}].name is empty")));
            }
            if self.splits[..i].iter().any(|t| t.name == s.name) {
                return Err(bad(format!("split {:?} is listed twice", s.name)));
            }
            if s.start != next {
                return Err(bad(format!(
                    "split {:?} starts at row {} but the previous split ends at {next}",
                    s.name, s.start
                )));
            }
            next = next
                .checked_add(s.rows)
                .ok_or_else(|| bad("split rows overflow".into()))?;
        }
        if next != self.rows {
            return Err(bad(format!(
                "splits cover {next} rows but the set holds {}",
                self.rows
            )));
        }
        Ok(())
    }

    /// The storage keys of one shard: `compression`, `stored_bytes` and
    /// `stored_blake3` agree with each other and with the format version.
    fn check_storage(&self, s: &ShardInfo) -> std::result::Result<(), String> {
        match s.compression {
            Compression::None => {
                if s.stored_bytes.is_some() || s.stored_blake3.is_some() {
                    return Err(
                        "stored_bytes and stored_blake3 are only for compressed shards".into(),
                    );
                }
            }
            Compression::Zstd => {
                if self.format_version < 2 {
                    return Err(format!(
                        "compression \"zstd\" needs format_version 2, the manifest says {}",
                        self.format_version
                    ));
                }
                match s.stored_bytes {
                    // The smallest valid file: a header frame and a seek table.
                    Some(n) if n >= 8 => {}
                    Some(n) => return Err(format!("stored_bytes {n} is too small")),
                    None => return Err("a compressed shard needs stored_bytes".into()),
                }
                match &s.stored_blake3 {
                    Some(h) if is_hex_digest(h) => {}
                    Some(h) => {
                        return Err(format!(
                            "stored_blake3 {h:?} is not 64 lowercase hex digits"
                        ));
                    }
                    None => return Err("a compressed shard needs stored_blake3".into()),
                }
            }
        }
        Ok(())
    }

    /// True when some shard must be decompressed before it can be mapped.
    pub fn is_compressed(&self) -> bool {
        self.shards.iter().any(ShardInfo::is_compressed)
    }

    /// The set's order version, checked by [`Manifest::validate`].
    pub fn order(&self) -> OrderVersion {
        OrderVersion::from_number(self.order_version).unwrap_or_default()
    }

    /// Looks a split up by name.
    pub fn split(&self, name: &str) -> Option<&SplitInfo> {
        self.splits.iter().find(|s| s.name == name)
    }
}

/// The lowest format version that describes `shards`: 2 when one is
/// compressed, else 1, so uncompressed sets stay readable by version-1 readers.
pub(crate) fn version_for(shards: &[ShardInfo]) -> u64 {
    if shards.iter().any(ShardInfo::is_compressed) {
        u64::from(LATEST_FORMAT_VERSION)
    } else {
        u64::from(FORMAT_VERSION)
    }
}

fn is_known_version(v: u64) -> bool {
    (u64::from(FORMAT_VERSION)..=u64::from(LATEST_FORMAT_VERSION)).contains(&v)
}

fn legacy_order() -> u64 {
    1
}

fn is_legacy_order(v: &u64) -> bool {
    *v == 1
}

/// Shard names are plain file names, so a manifest cannot point outside its
/// directory.
fn check_file_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > 255 {
        return Err("must be 1 to 255 characters".into());
    }
    if name.starts_with('.') {
        return Err(format!("{name:?} starts with a dot"));
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "{name:?} may only contain ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
