//! End-to-end builds on data the tests generate: every transform checked value
//! by value against an independent computation, pruning, cache behaviour,
//! determinism across thread counts, and the CLI around it.

mod common;

use common::{Row, raw_bytes, rows, run, stderr, stdout, write_parquet};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

const SPEC: &str = r#"
version: 1
name: events
sources:
  events: { path: data/*.parquet }
filter: "day >= 10"
fields:
  id:    { dtype: i64, column: id }
  x:     { dtype: f32, column: x, fill_null: 0, transform: [ { clip: { min: 0 } }, log1p, standardize ] }
  xm:    { dtype: f64, column: x, fill_null: 1, transform: min_max }
  kh:    { dtype: i32, column: k, transform: { hash_bucket: 97 } }
  kv:    { dtype: i32, column: k, transform: { vocab: { min_count: 2, oov: 0 } } }
  n1h:   { dtype: u8, column: n, transform: { one_hot: 5 } }
  nf:    { dtype: f32, column: n, transform: { one_hot: 5 } }
  pair:  { dtype: f32, columns: [x, day], fill_null: -1 }
  label: { dtype: f32, expr: "CAST(n > 2 AS FLOAT)" }
  raw:   { dtype: u8, column: b, bytes: 4 }
split: { key: id, weights: { train: 0.8, val: 0.2 } }
shards: { target_bytes: 64KiB }
"#;

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    rows: Vec<Row>,
}

fn project(spec: &str, n: usize, files: usize, group_rows: usize) -> Project {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let rows = rows(n, 11);
    write_parquet(&root.join("data"), &rows, files, group_rows);
    std::fs::write(root.join("spec.yaml"), spec).expect("spec");
    Project {
        _tmp: tmp,
        root,
        rows,
    }
}

fn opts(cache: &Path, threads: usize) -> BuildOptions {
    BuildOptions {
        cache_dir: Some(cache.to_path_buf()),
        threads: Some(threads),
        memory_limit: None,
        progress: ProgressMode::Quiet,
        allow_empty: false,
        max_output: None,
    }
}

fn build_in(p: &Project, cache: &str, threads: usize) -> BuildReport {
    build(
        &p.root.join("spec.yaml"),
        &opts(&p.root.join(cache), threads),
    )
    .expect("build")
}

// --- an independent implementation of the documented hash ---
fn fnv_splitmix(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d049bb133111eb);
    h ^ (h >> 31)
}

fn is_train(id: i64) -> bool {
    let u = (fnv_splitmix(id.to_string().as_bytes()) >> 11) as f64 / (1u64 << 53) as f64;
    u < 0.8
}

fn f32_at(rec: &[u8], off: u64) -> f32 {
    f32::from_le_bytes(rec[off as usize..off as usize + 4].try_into().unwrap())
}
fn f64_at(rec: &[u8], off: u64) -> f64 {
    f64::from_le_bytes(rec[off as usize..off as usize + 8].try_into().unwrap())
}
fn i32_at(rec: &[u8], off: u64) -> i32 {
    i32::from_le_bytes(rec[off as usize..off as usize + 4].try_into().unwrap())
}
fn i64_at(rec: &[u8], off: u64) -> i64 {
    i64::from_le_bytes(rec[off as usize..off as usize + 8].try_into().unwrap())
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

#[test]
fn every_transform_matches_an_independent_computation() {
    let p = project(SPEC, 5000, 3, 700);
    let report = build_in(&p, "cache", 2);
    assert!(!report.cache_hit);
    let ds = Dataset::open(&report.path).expect("open");

    // Expected output: kept rows, train split first then val, input order.
    let kept: Vec<&Row> = p.rows.iter().filter(|r| r.day >= 10).collect();
    let train: Vec<&Row> = kept.iter().copied().filter(|r| is_train(r.id)).collect();
    let val: Vec<&Row> = kept.iter().copied().filter(|r| !is_train(r.id)).collect();
    assert_eq!(report.rows.get("train"), Some(train.len() as u64));
    assert_eq!(report.rows.get("val"), Some(val.len() as u64));
    assert_eq!(report.rows_kept, kept.len() as u64);

    // Statistics over the training split only.
    let xs: Vec<f64> = train
        .iter()
        .map(|r| r.x.unwrap_or(0.0).max(0.0).ln_1p())
        .collect();
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
    let xm: Vec<f64> = train.iter().map(|r| r.x.unwrap_or(1.0)).collect();
    let (lo, hi) = xm
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for r in &train {
        if let Some(k) = &r.k {
            *counts.entry(k.as_str()).or_default() += 1;
        }
    }
    let mut vocab: Vec<(&str, u64)> = counts.into_iter().filter(|&(_, c)| c >= 2).collect();
    vocab.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let ids: HashMap<&str, i32> = vocab
        .iter()
        .enumerate()
        .map(|(j, (k, _))| (*k, j as i32 + 1))
        .collect();

    let layout = ds.layout();
    let off = |name: &str| layout.field(name).expect(name).offset;
    let expected: Vec<&Row> = train.iter().chain(val.iter()).copied().collect();
    assert_eq!(ds.len(), expected.len() as u64);
    for (i, r) in expected.iter().enumerate() {
        let rec = ds.record(i as u64).unwrap();
        assert_eq!(i64_at(rec, off("id")), r.id, "row {i}");
        let x = (r.x.unwrap_or(0.0).max(0.0).ln_1p() - mean) / std;
        assert!(
            close(f32_at(rec, off("x")) as f64, x, 1e-5),
            "x row {i}: {} vs {x}",
            f32_at(rec, off("x"))
        );
        let m = (r.x.unwrap_or(1.0) - lo) / (hi - lo);
        assert!(close(f64_at(rec, off("xm")), m, 1e-12), "xm row {i}");
        let key: &[u8] = r.k.as_deref().map(str::as_bytes).unwrap_or(b"\xffnull");
        assert_eq!(
            i32_at(rec, off("kh")) as u64,
            fnv_splitmix(key) % 97,
            "kh row {i}"
        );
        let want_id =
            r.k.as_deref()
                .and_then(|k| ids.get(k).copied())
                .unwrap_or(0);
        assert_eq!(i32_at(rec, off("kv")), want_id, "kv row {i}");
        let oh = off("n1h") as usize;
        let mut one_hot = [0u8; 5];
        one_hot[r.n as usize] = 1;
        assert_eq!(&rec[oh..oh + 5], &one_hot, "one_hot row {i}");
        let nf = off("nf");
        for c in 0..5u64 {
            let want = if c == r.n as u64 { 1.0 } else { 0.0 };
            assert_eq!(
                f32_at(rec, nf + 4 * c),
                want,
                "float one_hot row {i} class {c}"
            );
        }
        let pair = off("pair");
        assert_eq!(
            f32_at(rec, pair),
            r.x.unwrap_or(-1.0) as f32,
            "pair[0] row {i}"
        );
        assert_eq!(f32_at(rec, pair + 4), r.day as f32, "pair[1] row {i}");
        assert_eq!(
            f32_at(rec, off("label")),
            if r.n > 2 { 1.0 } else { 0.0 },
            "label row {i}"
        );
        let raw = off("raw") as usize;
        assert_eq!(&rec[raw..raw + 4], &raw_bytes(r.id), "raw row {i}");
    }
    // Frozen statistics are in the manifest.
    let stats = &ds.manifest().stats;
    let frozen_mean = stats["x"][0]["mean"].as_f64().unwrap();
    assert!(close(frozen_mean, mean, 1e-12));
    assert_eq!(
        stats["kv"][0]["values"].as_array().unwrap().len(),
        vocab.len()
    );
    ds.verify().expect("verify");
}

#[test]
fn filter_on_sorted_parquet_prunes_row_groups() {
    let spec = SPEC.replace("day >= 10", "day >= 25");
    let p = project(&spec, 20_000, 2, 500);
    let report = build_in(&p, "cache", 2);
    assert!(report.scan.row_groups_pruned > 0, "{:?}", report.scan);
    // Only the surviving row groups were scanned: far fewer rows than the input.
    assert!(report.scan.rows_scanned < 20_000 / 2, "{:?}", report.scan);
    let kept = p.rows.iter().filter(|r| r.day >= 25).count() as u64;
    assert_eq!(report.rows_kept, kept);
}

#[test]
fn second_build_is_a_cache_hit_and_an_input_change_is_a_miss() {
    let p = project(SPEC, 3000, 2, 1000);
    let first = build_in(&p, "cache", 2);
    let second = build_in(&p, "cache", 2);
    assert!(second.cache_hit);
    assert_eq!(first.hash, second.hash);
    assert_eq!(first.path, second.path);
    assert_eq!(first.rows, second.rows);
    // Rewrite one input with different content: a new artifact.
    let changed = rows(3000, 12);
    write_parquet(&p.root.join("data"), &changed, 2, 1000);
    let third = build_in(&p, "cache", 2);
    assert!(!third.cache_hit);
    assert_ne!(third.hash, first.hash);
    // Reformatting the spec (comments, key order) keeps the hash.
    let reformatted = format!("# a comment\n{}", SPEC.replace("name: events\n", "")).replacen(
        "version: 1\n",
        "version: 1\nname: events\n",
        1,
    );
    std::fs::write(p.root.join("spec.yaml"), reformatted).unwrap();
    let fourth = build_in(&p, "cache", 2);
    assert!(fourth.cache_hit, "reformatting changed the hash");
    assert_eq!(fourth.hash, third.hash);
}

fn shard_hashes(path: &Path) -> Vec<(String, String)> {
    let ds = Dataset::open(path).unwrap();
    ds.manifest()
        .shards
        .iter()
        .map(|s| (s.file.clone(), s.blake3.clone()))
        .collect()
}

#[test]
fn output_is_byte_identical_for_any_thread_count() {
    for spec in [
        SPEC.to_string(),
        format!("{SPEC}order: {{ shuffle_seed: 5 }}\n"),
    ] {
        let p = project(&spec, 6000, 4, 400);
        let a = build_in(&p, "cache-a", 1);
        let b = build_in(&p, "cache-b", 3);
        assert_eq!(a.hash, b.hash);
        assert_eq!(shard_hashes(&a.path), shard_hashes(&b.path));
        let ma = std::fs::read(a.path.join("manifest.json")).unwrap();
        let mb = std::fs::read(b.path.join("manifest.json")).unwrap();
        assert_eq!(ma, mb, "manifests differ");
    }
}

#[test]
fn build_time_shuffle_permutes_each_split() {
    let spec = format!("{SPEC}order: {{ shuffle_seed: 9 }}\n");
    let p = project(&spec, 4000, 2, 1000);
    let plain = project(SPEC, 4000, 2, 1000);
    let s = Dataset::open(build_in(&p, "cache", 2).path).unwrap();
    let u = Dataset::open(build_in(&plain, "cache", 2).path).unwrap();
    for split in ["train", "val"] {
        let (s, u) = (s.split(split).unwrap(), u.split(split).unwrap());
        assert_eq!(s.len(), u.len());
        let ids = |d: &Dataset| -> Vec<i64> {
            (0..d.len())
                .map(|i| d.field::<i64>(i, "id").unwrap()[0])
                .collect()
        };
        let (a, b) = (ids(&s), ids(&u));
        assert_ne!(a, b, "{split} was not shuffled");
        let (mut a2, mut b2) = (a.clone(), b.clone());
        a2.sort();
        b2.sort();
        assert_eq!(a2, b2, "{split} lost or duplicated rows");
    }
}

#[test]
fn cli_build_inspect_head_verify_and_corruption() {
    let p = project(SPEC, 2000, 2, 1000);
    let spec = p.root.join("spec.yaml");
    let cache = p.root.join("cache");
    let o = run(&[
        "build",
        spec.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(j["cache_hit"], false);
    let path = j["path"].as_str().unwrap().to_string();
    assert!(j["hash"].as_str().unwrap().len() == 64);
    assert!(j["rows"]["train"].as_u64().unwrap() > 0);

    let o = run(&[
        "build",
        spec.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--json",
    ]);
    let j2: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(j2["cache_hit"], true);

    let o = run(&["inspect", &path]);
    assert!(o.status.success());
    let text = stdout(&o);
    for needle in ["standardize", "vocab", "train", "val", "n1h", "[5]"] {
        assert!(text.contains(needle), "inspect lacks {needle}:\n{text}");
    }
    let o = run(&["head", &path, "-n", "3"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 4, "{}", stdout(&o));

    let o = run(&["verify", &path]);
    assert!(o.status.success(), "{}", stderr(&o));

    // bench reads every record of the split once per epoch and reports the stall.
    let train_rows = j["rows"]["train"].as_u64().unwrap();
    let o = run(&[
        "bench",
        &path,
        "--split",
        "train",
        "--batch-size",
        "64",
        "--shuffle",
        "--epochs",
        "2",
        "--step-ms",
        "0.1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let b: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(b["samples"].as_u64(), Some(2 * train_rows));
    assert_eq!(b["batches"].as_u64(), Some(2 * train_rows.div_ceil(64)));
    let stall = b["stall_fraction"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&stall), "{stall}");

    // The cache lists the artifact; gc with --keep 1 keeps it, --keep 0 removes it.
    let hash = j["hash"].as_str().unwrap();
    let o = run(&[
        "cache",
        "ls",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ls: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(ls.as_array().unwrap().len(), 1);
    assert_eq!(ls[0]["hash"], hash);
    let o = run(&[
        "cache",
        "gc",
        "--keep",
        "1",
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(Path::new(&path).join("manifest.json").exists());

    // Flip one byte in the record area of the first shard.
    let ds = Dataset::open(&path).unwrap();
    let shard = Path::new(&path).join(&ds.manifest().shards[0].file);
    drop(ds);
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[4096 + 3] ^= 0x40;
    // Write a copy of the set elsewhere so the cache stays intact.
    let copy = p.root.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(&path).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    std::fs::write(copy.join(shard.file_name().unwrap()), &bytes).unwrap();
    let o = run(&["verify", copy.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(shard.file_name().unwrap().to_str().unwrap()) && err.contains("checksum"),
        "{err}"
    );

    let o = run(&[
        "cache",
        "gc",
        "--keep",
        "0",
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!Path::new(&path).exists(), "gc --keep 0 left the artifact");
}

#[test]
fn bad_spec_and_bad_data_fail_with_clear_errors() {
    // A column that does not exist: DataFusion's error, with the chunk.
    let p = project(&SPEC.replace("column: id }", "column: idx }"), 500, 1, 500);
    let o = run(&[
        "build",
        p.root.join("spec.yaml").to_str().unwrap(),
        "--cache-dir",
        p.root.join("c").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    // The message points at the spec: file, line, key path, and the column.
    let idx_line = SPEC
        .replace("column: id }", "column: idx }")
        .lines()
        .position(|l| l.contains("column: idx }"))
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!("spec.yaml:{idx_line}: fields.id")),
        "{err}"
    );
    assert!(err.contains("idx"), "{err}");
    // A null without fill_null names the field and the row.
    let p = project(
        &SPEC.replace("fill_null: 1, transform: min_max", "transform: min_max"),
        500,
        1,
        500,
    );
    let e = build(&p.root.join("spec.yaml"), &opts(&p.root.join("c"), 1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("xm") && e.contains("null") && e.contains("row"),
        "{e}"
    );
    // Nothing half-built is left in the cache.
    let leftovers: Vec<_> = std::fs::read_dir(p.root.join("c"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.len() == 64)
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn cutting_the_input_into_more_files_changes_no_record() {
    // The same rows as one file and as five: five chunks instead of one,
    // built on several threads, must give the same records in the same order.
    // (The f64 statistics are merged chunk by chunk, so their last bits may
    // differ from a single pass; stored as f32 the standardized values agree.)
    let one = project(SPEC, 4000, 1, 300);
    let five = project(SPEC, 4000, 5, 300);
    let a = Dataset::open(build_in(&one, "cache", 3).path).unwrap();
    let b = Dataset::open(build_in(&five, "cache", 3).path).unwrap();
    assert_eq!(a.len(), b.len());
    assert_eq!(a.manifest().splits, b.manifest().splits);
    for i in 0..a.len() {
        assert_eq!(a.record(i), b.record(i), "record {i}");
    }
}
