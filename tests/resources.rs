//! Memory is bounded by a budget, not by the data: vocabularies spill their
//! counts, refuse cleanly what cannot be held, and large ones live beside the
//! manifest in files verified like shards.

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use tessera_reader::Dataset;

/// Writes `n` rows: `id`, and `k` = "u{id}" (so `n` distinct values).
fn distinct_values(path: &Path, n: i64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
    ]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(1 << 20))
        .build();
    let f = std::fs::File::create(path).expect("create");
    let mut w = ArrowWriter::try_new(f, Arc::clone(&schema), Some(props)).expect("writer");
    let step = 1 << 20;
    let mut lo = 0;
    while lo < n {
        let hi = (lo + step).min(n);
        let ids: Vec<i64> = (lo..hi).collect();
        let ks: Vec<String> = ids.iter().map(|i| format!("u{i}")).collect();
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(ids)) as ArrayRef,
                Arc::new(StringArray::from(ks)),
            ],
        )
        .expect("batch");
        w.write(&b).expect("write");
        lo = hi;
    }
    w.close().expect("close");
}

/// `0..n` in the order of their decimal text ("0", "1", "10", "100", ...).
fn lexicographic(n: u64) -> impl Iterator<Item = u64> {
    let mut next = Some(0u64);
    std::iter::from_fn(move || {
        let cur = next?;
        next = if cur == 0 {
            (n > 1).then_some(1)
        } else if cur * 10 < n {
            Some(cur * 10)
        } else {
            let mut c = cur;
            while c % 10 == 9 || c + 1 >= n {
                c /= 10;
                if c == 0 {
                    break;
                }
            }
            (c != 0).then_some(c + 1)
        };
        Some(cur)
    })
}

/// Runs `tessera ARGS` under an address-space limit of `limit_kib`.
fn tessera_limited(limit_kib: u64, dir: &Path, args: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {limit_kib} && exec {} {args}",
            env!("CARGO_BIN_EXE_tessera")
        ))
        .current_dir(dir)
        .output()
        .expect("run")
}

#[test]
fn ten_million_distinct_values_under_one_gib() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    distinct_values(&dir.join("big.parquet"), 10_000_000);
    let spec = |vocab: &str| {
        format!(
            "version: 1\nname: vb\nsources:\n  t: {{ path: big.parquet }}\nfields:\n\
             \x20 id: {{ dtype: i64, column: id }}\n\
             \x20 k: {{ dtype: i32, column: k, transform: {{ vocab: {vocab} }} }}\n"
        )
    };
    // No cut: ten million values cannot be held while encoding under 1 GiB.
    std::fs::write(dir.join("all.yaml"), spec("{}")).expect("spec");
    let out = tessera_limited(1 << 20, dir, "build all.yaml --cache-dir cache -q");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a clean error, not an abort: {err}"
    );
    assert!(err.contains("all.yaml:7: fields.k:"), "{err}");
    assert!(err.contains("the vocabulary would hold more than"), "{err}");
    assert!(
        err.contains("max_size") && err.contains("min_count"),
        "{err}"
    );
    // A many-core machine (a thread each, each with its own malloc arena)
    // must fit the same address space.
    let out = tessera_limited(
        1 << 20,
        dir,
        "build all.yaml --cache-dir cache -q --threads 32",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "32 threads: {err}");
    assert!(err.contains("the vocabulary would hold more than"), "{err}");
    // The fix the message names: the counts spill, the top values are kept.
    std::fs::write(dir.join("top.yaml"), spec("{ max_size: 100000 }")).expect("spec");
    let out = tessera_limited(1 << 20, dir, "build top.yaml --cache-dir cache -q --json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let path = report["path"].as_str().expect("path");
    let ds = Dataset::open(path).expect("open");
    assert_eq!(ds.len(), 10_000_000);
    ds.verify().expect("verify, vocabulary file included");
    // Every value occurs once: the 100000 kept are the smallest strings.
    let m = ds.manifest();
    let entry = &m.stats["k"][0];
    assert_eq!(entry["size"], 100_000);
    let file = entry["file"].as_str().expect("vocabulary file");
    assert!(m.files.iter().any(|f| f.file == file));
    let text = std::fs::read_to_string(Path::new(path).join(file)).expect("vocab file");
    let want: Vec<String> = lexicographic(10_000_000)
        .take(100_000)
        .map(|i| format!("u{i}"))
        .collect();
    let got: Vec<String> = text
        .lines()
        .map(|l| {
            let (v, c): (String, u64) = serde_json::from_str(l).expect("line");
            assert_eq!(c, 1);
            v
        })
        .collect();
    assert_eq!(got.len(), want.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "value {i} of the vocabulary is {:?}, expected {:?}",
            got[i], want[i]
        );
    }
    // Record ids follow: value j of the file has id j + 1, others get oov 0.
    let id_of = |i: u64| ds.field::<i32>(i, "k").expect("k")[0];
    let row_of_first = want[0][1..].parse::<u64>().expect("row");
    assert_eq!(id_of(row_of_first), 1);
    assert_eq!(
        id_of(9_999_999),
        0,
        "u9999999 is not among the smallest strings"
    );
}

#[test]
fn lexicographic_order_of_numbers() {
    let got: Vec<u64> = lexicographic(25).collect();
    let mut want: Vec<u64> = (0..25).collect();
    want.sort_by_key(|i| i.to_string());
    assert_eq!(got, want);
}

#[test]
fn a_changed_vocabulary_file_fails_verify() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    distinct_values(&dir.join("d.parquet"), 20_000);
    std::fs::write(
        dir.join("s.yaml"),
        "version: 1\nname: v\nsources:\n  t: { path: d.parquet }\nfields:\n\
         \x20 k: { dtype: i32, column: k, transform: { vocab: {} } }\n",
    )
    .expect("spec");
    let out = tessera_limited(4 << 20, dir, "build s.yaml --cache-dir cache -q --json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let path = Path::new(report["path"].as_str().expect("path")).to_path_buf();
    let file = path.join("vocab-k-0.jsonl");
    let text = std::fs::read_to_string(&file).expect("vocab");
    assert_eq!(text.lines().count(), 20_000);
    // Edit one value (same length) in an exported copy.
    let out = tessera_limited(4 << 20, dir, "build s.yaml --cache-dir cache -q -o copy");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copy = dir.join("copy/vocab-k-0.jsonl");
    let edited = std::fs::read_to_string(&copy)
        .expect("copy")
        .replacen("u1", "u!", 1);
    std::fs::remove_file(&copy).expect("unlink the hard link");
    std::fs::write(&copy, edited).expect("edit");
    let out = tessera_limited(4 << 20, dir, "verify copy");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "verify passed a changed file");
    assert!(
        err.contains("vocab-k-0.jsonl") && err.contains("checksum mismatch"),
        "{err}"
    );
    // The cached original is untouched by the edit of the copy.
    Dataset::open(&path)
        .expect("open")
        .verify()
        .expect("original verifies");
}

/// Issue 19, item 8: a glob of many small files aborted under a 1 GiB
/// address-space limit, because one chunk task opened tens of thousands of
/// files and a scan keeps some state per file. Chunks now hold at most 1000
/// files, whatever `chunks.target_bytes` says; the records are the same and
/// in input order.
#[test]
fn many_small_files_are_cut_into_chunks_of_at_most_1000_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let files = 2500;
    std::fs::create_dir_all(dir.join("many")).expect("mkdir");
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    for f in 0..files {
        let ids: Vec<i64> = (0..3).map(|r| f * 3 + r).collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(ids)) as ArrayRef],
        )
        .expect("batch");
        // Zero-padded names: the glob's sorted order is the id order.
        let file = std::fs::File::create(dir.join(format!("many/{f:05}.parquet"))).expect("create");
        let mut w = ArrowWriter::try_new(file, Arc::clone(&schema), None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
    }
    std::fs::write(
        dir.join("many.yaml"),
        "version: 1\nname: many\nsources:\n  t: { path: \"many/*.parquet\" }\n\
         chunks: { target_bytes: 1GiB }\nfields:\n  id: { dtype: i64, column: id }\n",
    )
    .expect("spec");
    let out = tessera_limited(1 << 20, dir, "build many.yaml --cache-dir cache");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // 2500 files: 1000 + 1000 + 500.
    assert!(text.contains("(3 chunks)"), "{text}");
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("path: ").map(str::to_string))
        .expect("path line");
    let ds = Dataset::open(path.trim()).expect("open");
    assert_eq!(ds.len(), files as u64 * 3);
    for i in [0, 2999, 3000, 5999, 6000, 7499] {
        assert_eq!(ds.field::<i64>(i, "id").expect("id")[0], i as i64);
    }
}

/// Issue 19, item 8: under a memory limit a build fits or stops with a clear
/// error, never an abort: an expression that asks for 3 GB under a 1 GiB
/// address-space limit ends with status 1 and says why.
#[test]
fn an_allocation_beyond_the_limit_is_a_clear_error_not_an_abort() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    std::fs::write(dir.join("t.csv"), "id,s\n1,a\n2,b\n").expect("csv");
    std::fs::write(
        dir.join("rep.yaml"),
        "version: 1\nname: rep\nsources:\n  t: { path: t.csv }\nfields:\n\
         \x20 id: { dtype: i64, column: id }\n\
         \x20 r: { dtype: i64, expr: \"length(repeat(s, 1500000000))\" }\n",
    )
    .expect("spec");
    let out = tessera_limited(1 << 20, dir, "build rep.yaml --cache-dir cache -q");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error: out of memory"), "{err}");
    assert!(err.contains("published nothing"), "{err}");
    // Nothing was published.
    let published = std::fs::read_dir(dir.join("cache"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().join("manifest.json").exists())
                .count()
        })
        .unwrap_or(0);
    assert_eq!(published, 0);
}
