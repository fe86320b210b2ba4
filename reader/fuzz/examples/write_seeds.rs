//! Writes seed inputs for the fuzz targets from a real shard set: the
//! `manifest.json` and the 4096-byte header of a shard, both produced by
//! `ShardSetWriter`, plus a few near misses of each.
//!
//! Usage: `write_seeds <corpus-dir>`; creates `<corpus-dir>/manifest/` and
//! `<corpus-dir>/header/`.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};
use tessera_reader::{DType, FieldSpec, HEADER_LEN, MANIFEST_FILE, RecordLayout, ShardSetWriter};

fn main() -> Result<(), Box<dyn Error>> {
    let corpus = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: write_seeds <corpus-dir>")?;
    let work = corpus.join(".seed-set");
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    let layout = RecordLayout::packed(&[
        FieldSpec::new("dense", DType::F32, &[3]),
        FieldSpec::new("id", DType::I64, &[]),
        FieldSpec::new("tokens", DType::U16, &[4]),
        FieldSpec::new("half", DType::Bf16, &[2]),
        FieldSpec::new("flag", DType::U8, &[]),
    ])?;
    let stride = layout.stride as usize;
    // Three records per shard, two splits: several shards of unequal size.
    let mut writer = ShardSetWriter::new(&work, layout, (HEADER_LEN + 3 * stride) as u64)?;
    for (split, rows) in [("train", 7u8), ("val", 2)] {
        writer.begin_split(split)?;
        for i in 0..rows {
            writer.write_records(&vec![i; stride])?;
        }
    }
    let manifest = writer.finish_with(|m| {
        m.name = "fuzz-seed".into();
        m.stats = serde_json_stats();
    })?;

    let manifest_bytes = fs::read(work.join(MANIFEST_FILE))?;
    let shard = fs::read(work.join(&manifest.shards[0].file))?;
    let header = &shard[..HEADER_LEN];

    let dir = corpus.join("manifest");
    fs::create_dir_all(&dir)?;
    put(&dir, "real", &manifest_bytes)?;
    let text = String::from_utf8(manifest_bytes.clone())?;
    put(&dir, "version-2", text.replacen("\"format_version\": 1", "\"format_version\": 2", 1).as_bytes())?;
    put(&dir, "unknown-key", text.replacen('{', "{\n  \"future\": [1, 2.5, null],", 1).as_bytes())?;
    put(&dir, "truncated", &manifest_bytes[..manifest_bytes.len() / 2])?;

    let dir = corpus.join("header");
    fs::create_dir_all(&dir)?;
    put(&dir, "real", header)?;
    put(&dir, "short", &header[..80])?;
    let mut v2 = header.to_vec();
    v2[8] = 2;
    put(&dir, "version-2", &v2)?;
    let mut flags = header.to_vec();
    flags[32] = 1;
    put(&dir, "flags", &flags)?;

    fs::remove_dir_all(&work)?;
    println!("seeded {} and {}", corpus.join("manifest").display(), corpus.join("header").display());
    Ok(())
}

/// A `stats` object shaped like the compiler's, so the fuzzer starts from
/// nested free-form JSON too.
fn serde_json_stats() -> serde_json::Value {
    serde_json::json!({
        "dense": { "mean": [0.5, -1.25, 3.0], "std": [1.0, 2.0, 0.125] },
        "carrier": { "vocab": ["AA", "DL", "UA"], "oov": 0 }
    })
}

fn put(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    fs::write(dir.join(name), bytes)
}
