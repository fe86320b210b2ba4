//! Writes the golden format-v1 shard set in `tests/golden/v1/` (or the
//! directory given as the first argument), or with `--zstd` the golden
//! format-v2 set: the same records, each shard then stored zstd-compressed
//! (level 3). The files are committed; the test `tests/golden.rs` opens them
//! forever after and checks that today's writer still produces the same
//! bytes.
//!
//!     cargo run -p tessera-shards-reader --example write_golden -- reader/tests/golden/v1
//!     cargo run -p tessera-shards-reader --example write_golden -- reader/tests/golden/v2 --zstd

use std::path::PathBuf;
use tessera_reader::{DType, FieldSpec, Manifest, RecordLayout, ShardSetWriter};

/// The golden set's layout.
pub fn layout() -> RecordLayout {
    RecordLayout::packed(&[
        FieldSpec::new("id", DType::U64, &[]),
        FieldSpec::new("x", DType::F32, &[3]),
        FieldSpec::new("k", DType::I16, &[]),
        FieldSpec::new("flag", DType::U8, &[]),
        FieldSpec::new("h", DType::F16, &[2]),
    ])
    .expect("golden layout")
}

/// Record `i` of the golden set, encoded by hand (little-endian).
pub fn record(layout: &RecordLayout, i: u64) -> Vec<u8> {
    let mut rec = vec![0u8; layout.stride as usize];
    let at = |name: &str| layout.field(name).expect("field").offset as usize;
    rec[at("id")..at("id") + 8].copy_from_slice(&(i * 1000 + 7).to_le_bytes());
    for (j, v) in [i as f32, i as f32 / 2.0, -(i as f32)].iter().enumerate() {
        let o = at("x") + 4 * j;
        rec[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }
    rec[at("k")..at("k") + 2].copy_from_slice(&(i as i16 - 10).to_le_bytes());
    rec[at("flag")] = (i % 2) as u8;
    // f16 bit patterns of 1.0 (0x3c00) and -2.0 (0xc000).
    rec[at("h")..at("h") + 2].copy_from_slice(&0x3c00u16.to_le_bytes());
    rec[at("h") + 2..at("h") + 4].copy_from_slice(&0xc000u16.to_le_bytes());
    rec
}

/// Rows per split.
pub const SPLITS: [(&str, u64); 2] = [("train", 17), ("val", 6)];

/// The zstd level of the golden v2 set.
pub const V2_LEVEL: i32 = 3;

/// Writes the golden records to `dir` as a v1 set named `name`.
pub fn write(dir: &std::path::Path, name: &str) -> Result<Manifest, tessera_reader::Error> {
    let layout = layout();
    // Room for 8 records per shard.
    let mut w = ShardSetWriter::new(dir, layout.clone(), 4096 + 8 * layout.stride)?;
    let mut i = 0;
    for (split, rows) in SPLITS {
        w.begin_split(split)?;
        for _ in 0..rows {
            w.write_records(&record(&layout, i))?;
            i += 1;
        }
    }
    w.finish_with(|m| m.name = name.into())
}

/// Stores every shard of the set in `dir` zstd-compressed and rewrites its
/// manifest as format version 2.
pub fn compress(
    dir: &std::path::Path,
    m: Manifest,
) -> Result<Manifest, Box<dyn std::error::Error>> {
    let mut m = m;
    let stride = m.layout.stride;
    m.shards = m
        .shards
        .iter()
        .map(|s| tessera_reader::compress_shard_file(dir, s, stride, V2_LEVEL))
        .collect::<Result<_, _>>()?;
    m.format_version = u64::from(tessera_reader::LATEST_FORMAT_VERSION);
    let path = dir.join(tessera_reader::MANIFEST_FILE);
    m.validate(&path)?;
    std::fs::write(&path, m.to_json())?;
    Ok(m)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let zstd = std::env::args().any(|a| a == "--zstd");
    let dir = std::env::args_os()
        .skip(1)
        .find(|a| a != "--zstd")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("reader/tests/golden/v1"));
    let m = if zstd {
        let m = write(&dir, "golden-v2")?;
        compress(&dir, m)?
    } else {
        write(&dir, "golden-v1")?
    };
    println!(
        "wrote {} rows in {} shards to {}",
        m.rows,
        m.shards.len(),
        dir.display()
    );
    Ok(())
}
