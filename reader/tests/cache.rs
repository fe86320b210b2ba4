//! Compressed sets (format version 2) and the local shard cache, on sets in
//! a local directory: the cache's behaviour is the same whether the stored
//! shards come from a directory or an object store (tests against a real S3
//! server are in the compiler's `tests/remote.rs` and the Python suite).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tessera_reader::cache::{Policy, simulate};
use tessera_reader::{
    CacheOptions, DType, Dataset, Error, FieldSpec, Loader, LoaderConfig, OpenOptions,
    RecordLayout, ShardSetWriter,
};

const STRIDE: usize = 64;

fn layout() -> RecordLayout {
    RecordLayout::packed(&[
        FieldSpec::new("id", DType::U64, &[]),
        FieldSpec::new("x", DType::F32, &[14]),
    ])
    .unwrap()
}

/// Record `i`: its id, then values that compress (a slow ramp) but differ.
fn record(i: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(STRIDE);
    r.extend_from_slice(&i.to_le_bytes());
    for j in 0..14u64 {
        r.extend_from_slice(&(((i / 16) * 14 + j) as f32).to_le_bytes());
    }
    r
}

/// The same `rows` records as two sets: plain and zstd-compressed.
fn write_pair(root: &Path, rows: u64, shard_rows: u64) -> (PathBuf, PathBuf) {
    let target = 4096 + shard_rows * STRIDE as u64;
    let mut out = Vec::new();
    for (name, zstd) in [("plain", false), ("zstd", true)] {
        let dir = root.join(name);
        let mut w = ShardSetWriter::new(&dir, layout(), target).unwrap();
        if zstd {
            w = w.with_zstd(3).unwrap();
        }
        w.begin_split("train").unwrap();
        for i in 0..rows * 4 / 5 {
            w.write_records(&record(i)).unwrap();
        }
        w.begin_split("val").unwrap();
        for i in rows * 4 / 5..rows {
            w.write_records(&record(i)).unwrap();
        }
        w.finish().unwrap();
        out.push(dir);
    }
    (out[0].clone(), out[1].clone())
}

fn opts(cache: &Path, budget: Option<u64>) -> OpenOptions {
    OpenOptions {
        cache: CacheOptions {
            dir: Some(cache.to_path_buf()),
            budget,
            fetch_threads: Some(2),
        },
        ..OpenOptions::default()
    }
}

/// Every batch of `epochs` epochs, concatenated.
fn read_all(ds: &Dataset, cfg: &LoaderConfig, epochs: u64) -> Vec<u8> {
    let loader = Loader::new(ds, cfg.clone()).unwrap();
    let mut out = Vec::new();
    for e in 0..epochs {
        let mut it = loader.epoch(e);
        while let Some(b) = it.try_next().unwrap() {
            out.extend_from_slice(b.bytes());
        }
    }
    out
}

/// The shard files (`.shard`, `.part`) in a cache directory, by name and
/// inode, with their sizes.
fn listing(dir: &Path) -> std::collections::HashMap<(String, u64), u64> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::HashMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if (n.ends_with(".shard") || n.ends_with(".part"))
            && let Ok(m) = std::fs::metadata(e.path())
        {
            out.insert((n, m.ino()), m.len());
        }
    }
    out
}

/// Bytes the cache directory held at one instant. A single listing taken
/// while files come and go can show a removed file next to its replacement;
/// a file seen in two consecutive listings existed at every moment between
/// them, so the files seen in both existed together.
fn cache_usage(dir: &Path) -> u64 {
    let a = listing(dir);
    let b = listing(dir);
    a.iter()
        .filter(|(k, _)| b.contains_key(*k))
        .map(|(_, v)| *v)
        .sum()
}

#[test]
fn a_compressed_set_reads_the_same_batches_as_the_plain_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, zstd) = write_pair(tmp.path(), 5000, 400);
    let cache = tmp.path().join("cache");
    let p = Dataset::open(&plain).unwrap();
    let z = Dataset::open_with(&zstd, &opts(&cache, None)).unwrap();
    assert!(!p.is_cached() && z.is_cached());
    assert_eq!(z.manifest().format_version, 2);
    assert_eq!(p.manifest().format_version, 1);
    let stored: u64 = z.manifest().shards.iter().map(|s| s.file_bytes()).sum();
    let bytes: u64 = z.manifest().shards.iter().map(|s| s.bytes).sum();
    assert!(stored * 3 < bytes, "compressed {stored} of {bytes}");
    // Same content hashes: compression changes storage, not shards.
    let hashes = |d: &Dataset| -> Vec<String> {
        d.manifest()
            .shards
            .iter()
            .map(|s| s.blake3.clone())
            .collect()
    };
    assert_eq!(hashes(&p), hashes(&z));
    for cfg in [
        LoaderConfig {
            batch_size: 100,
            shuffle: false,
            last_batch: tessera_reader::LastBatch::Partial,
            ..Default::default()
        },
        LoaderConfig {
            batch_size: 128,
            seed: 3,
            threads: 3,
            ..Default::default()
        },
        LoaderConfig {
            batch_size: 50,
            seed: 9,
            shuffle_window: 2,
            world_size: 2,
            rank: 1,
            last_batch: tessera_reader::LastBatch::Pad,
            ..Default::default()
        },
    ] {
        for split in ["train", "val"] {
            let a = read_all(&p.split(split).unwrap(), &cfg, 2);
            let b = read_all(&z.split(split).unwrap(), &cfg, 2);
            assert!(!a.is_empty());
            assert!(a == b, "{split} {cfg:?}");
        }
    }
    // Random access and gathers go through the cache too.
    assert_eq!(z.record(4321).unwrap(), record(4321).as_slice());
    let mut out = vec![0u8; 3 * STRIDE];
    z.gather(&[7, 4999, 2500], &mut out).unwrap();
    assert_eq!(&out[..STRIDE], record(7).as_slice());
    assert_eq!(&out[STRIDE..2 * STRIDE], record(4999).as_slice());
    z.verify().unwrap();
    // Each shard was decompressed once into the cache, named by its hash.
    let stats = z.cache_stats().unwrap();
    assert_eq!(stats.fetched_shards as usize, z.manifest().shards.len());
    for s in &z.manifest().shards {
        assert!(cache.join(format!("{}.shard", s.blake3)).is_file());
    }
    // A second open of the set finds every shard decompressed already.
    let again = Dataset::open_with(&zstd, &opts(&cache, None)).unwrap();
    let cfg = LoaderConfig {
        batch_size: 100,
        ..Default::default()
    };
    assert_eq!(read_all(&again, &cfg, 1), read_all(&p, &cfg, 1));
    let s2 = again.cache_stats().unwrap();
    assert_eq!(s2.fetched_shards, 0);
    assert_eq!(s2.reused_shards as usize, z.manifest().shards.len());
}

#[test]
fn a_corrupt_compressed_shard_is_refused_and_leaves_no_file_in_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, zstd) = write_pair(tmp.path(), 2000, 500);
    let m = Dataset::open_with(&zstd, &opts(&tmp.path().join("c0"), None))
        .unwrap()
        .manifest()
        .clone();
    let victim = &m.shards[1];
    let path = zstd.join(&victim.file);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let cache = tmp.path().join("c1");
    let ds = Dataset::open_with(&zstd, &opts(&cache, None)).unwrap();
    // Shard 0 reads; shard 1 is refused with a checksum error naming it.
    let mut out = vec![0u8; STRIDE];
    ds.copy_records(3, &mut out).unwrap();
    let err = ds.copy_records(600, &mut out).unwrap_err();
    assert!(matches!(err, Error::Checksum { .. }), "{err}");
    assert!(err.to_string().contains(&victim.file), "{err}");
    assert!(!cache.join(format!("{}.shard", victim.blake3)).exists());
    assert!(!cache.join(format!("{}.part", victim.blake3)).exists());
    // So does a loader, which stops with the error instead of a short epoch.
    let loader = Loader::new(
        &ds,
        LoaderConfig {
            batch_size: 100,
            shuffle: false,
            ..Default::default()
        },
    )
    .unwrap();
    let mut it = loader.epoch(0);
    let mut seen = 0;
    let err = loop {
        match it.try_next() {
            Ok(Some(_)) => seen += 1,
            Ok(None) => panic!("the epoch ended without the error"),
            Err(e) => break e,
        }
    };
    assert_eq!(seen, 5, "the five batches of shard 0 come first");
    assert!(err.to_string().contains("checksum"), "{err}");
    assert!(ds.verify().is_err());
}

#[test]
fn a_budget_below_one_shard_is_an_error_at_open_and_a_full_shuffle_that_cannot_fit_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, zstd) = write_pair(tmp.path(), 2000, 500);
    let shard = 4096 + 500 * STRIDE as u64;
    let err = Dataset::open_with(&zstd, &opts(&tmp.path().join("c"), Some(shard - 1))).unwrap_err();
    assert!(matches!(err, Error::Cache { .. }), "{err}");
    assert!(err.to_string().contains("smaller than shard"), "{err}");
    // Two shards of room: a shuffle over all four shards needs them all in
    // every batch, which is refused at once rather than waited for.
    let ds = Dataset::open_with(&zstd, &opts(&tmp.path().join("c"), Some(2 * shard))).unwrap();
    let loader = Loader::new(
        &ds,
        LoaderConfig {
            batch_size: 256,
            ..Default::default()
        },
    )
    .unwrap();
    let err = loader.epoch(0).try_next().unwrap_err();
    assert!(err.to_string().contains("more than the budget"), "{err}");
    // A window of one shard fits.
    let loader = Loader::new(
        &ds,
        LoaderConfig {
            batch_size: 256,
            shuffle_window: 1,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(loader.epoch(0).count(), 2000 / 256);
}

#[test]
fn with_thirty_percent_of_the_set_the_budget_holds_and_eviction_beats_lru() {
    let tmp = tempfile::tempdir().unwrap();
    // 40 shards of 300 records.
    let (plain, zstd) = write_pair(tmp.path(), 12_000, 300);
    let shard = 4096 + 300 * STRIDE as u64;
    let set: u64 = 40 * shard;
    let budget = set * 3 / 10;
    let cache = tmp.path().join("cache");
    let ds = Dataset::open_with(&zstd, &opts(&cache, Some(budget))).unwrap();
    let cfg = LoaderConfig {
        batch_size: 100,
        seed: 5,
        shuffle_window: 2,
        threads: 2,
        last_batch: tessera_reader::LastBatch::Partial,
        ..Default::default()
    };
    // Watch the directory while three epochs run.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, peak, cache) = (Arc::clone(&stop), Arc::clone(&peak), cache.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let u = cache_usage(&cache);
                peak.fetch_max(u, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let got = read_all(&ds, &cfg, 3);
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    // Same batches as the plain set, and the budget never exceeded.
    assert!(got == read_all(&Dataset::open(&plain).unwrap(), &cfg, 3));
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= budget,
        "cache peaked at {peak} bytes, budget {budget}"
    );
    assert!(peak > budget / 2, "the cache was hardly used: {peak}");
    // Compare with LRU and with the offline optimum on the same sequence.
    let loader = Loader::new(&ds, cfg.clone()).unwrap();
    let mut steps = Vec::new();
    for e in 0..3 {
        let plan = loader.access_plan(
            tessera_reader::Cursor {
                seed: cfg.seed,
                epoch: e,
                position: 0,
            },
            false,
        );
        steps.extend(plan.steps().map(<[u32]>::to_vec));
    }
    let plan = tessera_reader::cache::AccessPlan::new(40, steps);
    let sizes = vec![shard; 40];
    let lru = simulate(&plan, &sizes, budget, Policy::Lru);
    let opt = simulate(&plan, &sizes, budget, Policy::Belady);
    let fetched = ds.cache_stats().unwrap().fetched_bytes;
    eprintln!(
        "30% budget, 3 windowed epochs: fetched {fetched} bytes; LRU {} (hit rate {:.2}), \
         Belady {} (hit rate {:.2}); ratio to LRU {:.2}",
        lru.fetched_bytes,
        lru.hit_rate(),
        opt.fetched_bytes,
        opt.hit_rate(),
        fetched as f64 / lru.fetched_bytes as f64
    );
    assert!(opt.fetched_bytes < lru.fetched_bytes);
    assert!(
        fetched < lru.fetched_bytes,
        "{fetched} vs LRU {}",
        lru.fetched_bytes
    );
    // The cache makes the offline optimum's fetches (Belady), prefetched
    // conservatively: no more than a stray one.
    assert!(
        (fetched as f64) <= opt.fetched_bytes as f64 * 1.05,
        "{fetched} vs optimum {}",
        opt.fetched_bytes
    );
}

#[test]
fn a_stale_partial_file_is_replaced_and_foreign_files_are_never_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, zstd) = write_pair(tmp.path(), 1000, 250);
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let m = Dataset::open(&plain).unwrap().manifest().clone();
    // A crashed writer's leftover, and a file that is not ours.
    let part = cache.join(format!("{}.part", m.shards[0].blake3));
    std::fs::write(&part, b"half a shard").unwrap();
    let foreign = cache.join("notes.txt");
    std::fs::write(&foreign, vec![7u8; 50_000]).unwrap();
    let budget = 2 * (4096 + 250 * STRIDE as u64);
    let ds = Dataset::open_with(&zstd, &opts(&cache, Some(budget))).unwrap();
    let cfg = LoaderConfig {
        batch_size: 50,
        shuffle: false,
        ..Default::default()
    };
    assert!(read_all(&ds, &cfg, 2) == read_all(&Dataset::open(&plain).unwrap(), &cfg, 2));
    assert!(foreign.is_file() && std::fs::read(&foreign).unwrap().len() == 50_000);
    assert!(!part.exists() || std::fs::metadata(&part).unwrap().len() != 12);
    assert!(ds.cache_stats().unwrap().evicted_shards > 0);
}

/// The access plan of a windowed loader, found from its windows, names
/// every shard each batch actually reads (checked against the ids in the
/// batches), and names few others.
#[test]
fn a_windowed_plan_names_every_shard_each_batch_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let (plain, _) = write_pair(tmp.path(), 5_000, 230);
    let ds = Dataset::open(&plain).unwrap();
    let shard_rows: Vec<u64> = ds.manifest().shards.iter().map(|s| s.rows).collect();
    let shard_of = |row: u64| {
        let mut at = 0;
        for (s, &n) in shard_rows.iter().enumerate() {
            if row < at + n {
                return s as u32;
            }
            at += n;
        }
        panic!("row {row} beyond the set");
    };
    let (mut named, mut read) = (0usize, 0usize);
    for (split, window, batch, world, rank) in [
        ("train", 1, 100, 1, 0),
        ("train", 2, 333, 2, 1),
        ("val", 3, 64, 1, 0),
        ("train", 4, 1000, 3, 2),
    ] {
        let view = ds.split(split).unwrap();
        let cfg = LoaderConfig {
            batch_size: batch,
            shuffle: true,
            shuffle_window: window,
            seed: 11,
            world_size: world,
            rank,
            ..LoaderConfig::default()
        };
        let loader = Loader::new(&view, cfg.clone()).unwrap();
        for epoch in 0..2 {
            let plan = loader.access_plan(
                tessera_reader::Cursor {
                    seed: cfg.seed,
                    epoch,
                    position: 0,
                },
                false,
            );
            let steps: Vec<Vec<u32>> = plan.steps().map(<[u32]>::to_vec).collect();
            let mut it = loader.epoch(epoch);
            let mut j = 0;
            while let Some(b) = it.try_next().unwrap() {
                let mut actual: Vec<u32> = b
                    .bytes()
                    .chunks_exact(STRIDE)
                    .map(|r| shard_of(u64::from_le_bytes(r[..8].try_into().unwrap())))
                    .collect();
                actual.sort_unstable();
                actual.dedup();
                let step = &steps[j];
                for s in &actual {
                    assert!(
                        step.contains(s),
                        "{split} window {window}: batch {j} reads shard {s}, plan {step:?}"
                    );
                }
                named += step.len();
                read += actual.len();
                j += 1;
            }
            assert_eq!(j, steps.len(), "one plan step per batch");
        }
    }
    // Over-approximation only where a batch takes a sliver of a window.
    assert!(named <= read + read / 4, "named {named}, read {read}");
}
