//! What fingerprinting costs: 2 GiB of inputs hashed cold (from the page
//! cache, and from disk when the page cache can be dropped) and the whole
//! of a cache hit warm (the stat cache, the artifact hash and the lookup),
//! as 16 files of 128 MiB and as 4096 files of 512 KiB.
//!
//! ```text
//! cargo run --release --example fingerprint [-- DIR]
//! ```
//!
//! DIR (default: the current directory) is the disk the files are written
//! to; they are removed afterwards.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tessera::cache::Cache;
use tessera::fingerprint::{SourceFiles, StatCache, artifact_hash, fingerprint_inputs};
use tessera_reader::{DType, FieldSpec, RecordLayout, ShardSetWriter};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let base = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    for (files, size) in [(16usize, 128usize << 20), (4096, 512 << 10)] {
        measure(Path::new(&base), files, size)?;
    }
    Ok(())
}

fn measure(base: &Path, files: usize, size: usize) -> Res<()> {
    let dir = tempfile::tempdir_in(base)?;
    let chunk: Vec<u8> = (0..size as u32 / 4).flat_map(|i| i.to_le_bytes()).collect();
    let paths: Vec<PathBuf> = (0..files)
        .map(|i| dir.path().join(format!("p{i:05}.bin")))
        .collect();
    for (i, p) in paths.iter().enumerate() {
        let mut f = File::create(p)?;
        f.write_all(&(i as u32).to_le_bytes())?;
        f.write_all(&chunk[4..])?;
    }
    let gib = (files * size) as f64 / f64::from(1u32 << 30);
    println!("--- {files} files x {} KiB = {gib:.2} GiB", size >> 10);
    let src = [SourceFiles {
        source: "s".into(),
        root: dir.path().to_path_buf(),
        files: paths,
        hash_bytes: false,
    }];
    for drop_first in [false, true] {
        if drop_first && fs::write("/proc/sys/vm/drop_caches", b"3").is_err() {
            println!("(cannot drop the page cache here)");
            continue;
        }
        let t = Instant::now();
        let got = fingerprint_inputs(&src, &mut StatCache::in_memory())?;
        let s = t.elapsed().as_secs_f64();
        assert!(got.iter().all(|f| !f.from_stat_cache));
        let label = if drop_first {
            "from disk (page cache dropped)"
        } else {
            "from page cache"
        };
        println!("cold hashing {label}: {s:.3} s = {:.2} GiB/s", gib / s);
    }

    // A published artifact for these inputs, so that the warm run below is
    // a whole cache hit.
    let cache = Cache::new(dir.path().join("cache"));
    let mut stat = cache.load_stat_cache();
    stat.set_racy_window(Duration::ZERO);
    let inputs = fingerprint_inputs(&src, &mut stat)?;
    stat.save()?;
    let spec = serde_json::json!({"version": 1});
    let hash = artifact_hash(&spec, &inputs, 1, 1);
    let lock = cache.lock(&hash)?;
    let staging = lock.stage()?;
    let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::U32, &[])])?;
    let mut w = ShardSetWriter::new(staging.path(), layout, 1 << 20)?;
    w.begin_split("train")?;
    w.write_records(&[0u8; 400])?;
    let m = w.finish_with(|m| m.artifact_hash = hash.clone())?;
    staging.publish(&m)?;
    drop(lock);

    let t = Instant::now();
    let mut stat = cache.load_stat_cache();
    let t_load = t.elapsed();
    let got = fingerprint_inputs(&src, &mut stat)?;
    let t_fp = t.elapsed();
    stat.save()?;
    let h = artifact_hash(&spec, &got, 1, 1);
    let hit = cache.lookup(&h)?;
    let total = t.elapsed();
    assert!(got.iter().all(|f| f.from_stat_cache));
    assert!(hit.is_some());
    println!(
        "cache hit: load stat cache {t_load:?}, fingerprint {:?}, hash + lookup {:?}; total {total:?}",
        t_fp - t_load,
        total - t_fp
    );
    Ok(())
}
