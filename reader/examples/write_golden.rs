//! Writes the golden format-v1 shard set in `tests/golden/v1/` (or the
//! directory given as the first argument). The files are committed; the test
//! `tests/golden.rs` opens them forever after and checks that today's writer
//! still produces the same bytes.
//!
//!     cargo run -p tessera-shards-reader --example write_golden -- reader/tests/golden/v1

use std::path::PathBuf;
use tessera_reader::{DType, FieldSpec, RecordLayout, ShardSetWriter};

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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("reader/tests/golden/v1"));
    let layout = layout();
    // Room for 8 records per shard.
    let mut w = ShardSetWriter::new(&dir, layout.clone(), 4096 + 8 * layout.stride)?;
    let mut i = 0;
    for (name, rows) in SPLITS {
        w.begin_split(name)?;
        for _ in 0..rows {
            w.write_records(&record(&layout, i))?;
            i += 1;
        }
    }
    let m = w.finish_with(|m| m.name = "golden-v1".into())?;
    println!(
        "wrote {} rows in {} shards to {}",
        m.rows,
        m.shards.len(),
        dir.display()
    );
    Ok(())
}
