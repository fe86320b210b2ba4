//! What the command line shows about a built set, checked against the data
//! the test generated: splits in spec order in every command that names
//! them, a vocabulary's first values with their ids and counts in
//! `inspect`, and `bench`'s verdict on the bottleneck.

mod common;

use common::{rows, run, split_point, stderr, stdout, write_parquet};
use std::collections::HashMap;
use std::path::PathBuf;

// Splits written in an order that is not alphabetical (test < train < val).
const SPEC: &str = r#"
version: 1
name: views
sources:
  events: { path: data/*.parquet }
filter: "day >= 10"
fields:
  id: { dtype: i64, column: id }
  kv: { dtype: i32, column: k, transform: vocab }
split: { key: id, weights: { train: 6, val: 2, test: 2 } }
"#;

const SPLITS: [&str; 3] = ["train", "val", "test"];

struct Built {
    _tmp: tempfile::TempDir,
    spec: PathBuf,
    cache: PathBuf,
    /// Ids kept per split, in storage (input) order.
    ids: HashMap<&'static str, Vec<i64>>,
    /// The train split's values of `k`, counted independently.
    train_counts: HashMap<String, u64>,
    /// What the first `tessera build` printed.
    first_build: String,
}

fn split_of(id: i64) -> &'static str {
    match split_point(&id.to_string()) {
        u if u < 0.6 => "train",
        u if u < 0.8 => "val",
        _ => "test",
    }
}

fn built() -> Built {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let data = rows(3000, 5);
    write_parquet(&root.join("data"), &data, 2, 500);
    let spec = root.join("spec.yaml");
    std::fs::write(&spec, SPEC).expect("spec");
    let cache = root.join("cache");
    let o = run(&[
        "build",
        spec.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first_build = stdout(&o);
    let mut ids: HashMap<&'static str, Vec<i64>> = HashMap::new();
    let mut train_counts = HashMap::new();
    for r in data.iter().filter(|r| r.day >= 10) {
        let s = split_of(r.id);
        ids.entry(s).or_default().push(r.id);
        if let (Some(k), "train") = (&r.k, s) {
            *train_counts.entry(k.clone()).or_insert(0) += 1;
        }
    }
    for s in SPLITS {
        assert!(
            ids.get(s).is_some_and(|v| v.len() > 10),
            "too few rows in {s}"
        );
    }
    Built {
        _tmp: tmp,
        spec,
        cache,
        ids,
        train_counts,
        first_build,
    }
}

impl Built {
    fn cli(&self, args: &[&str]) -> String {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--cache-dir", self.cache.to_str().unwrap()]);
        let o = run(&all);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    }

    fn rows(&self, split: &str) -> usize {
        self.ids[split].len()
    }
}

/// Positions of `needles` in `text`, which must be increasing.
fn assert_in_order(text: &str, needles: &[String]) {
    let at: Vec<usize> = needles
        .iter()
        .map(|n| {
            text.find(n.as_str())
                .unwrap_or_else(|| panic!("no {n:?} in:\n{text}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "{needles:?} out of order in:\n{text}"
    );
}

#[test]
fn every_command_names_the_splits_in_spec_order() {
    let b = built();
    let spec = b.spec.to_str().unwrap();

    // build, and again from the cache: the summary line; the JSON object's
    // key order.
    let expected = format!(
        "(train={} val={} test={})",
        b.rows("train"),
        b.rows("val"),
        b.rows("test")
    );
    for text in [b.first_build.clone(), b.cli(&["build", spec])] {
        assert!(text.contains(&expected), "{expected} not in:\n{text}");
    }
    let json = b.cli(&["build", spec, "--json"]);
    let rows_obj = &json[json.find("\"rows\":{").expect("rows object")..];
    let rows_obj = &rows_obj[..rows_obj.find('}').unwrap()];
    let keys: Vec<String> = SPLITS
        .iter()
        .zip(SPLITS.iter().map(|s| b.rows(s)))
        .map(|(s, n)| format!("\"{s}\":{n}"))
        .collect();
    assert_in_order(rows_obj, &keys);

    // inspect: the splits table, and the manifest's list.
    let text = b.cli(&["inspect", spec]);
    let mut start = 0;
    let lines: Vec<String> = SPLITS
        .iter()
        .map(|s| {
            let line = format!("  {:<12} rows {:>10}  (from row {start})", s, b.rows(s));
            start += b.rows(s);
            line
        })
        .collect();
    assert_in_order(&text, &lines);
    let m: serde_json::Value =
        serde_json::from_str(b.cli(&["inspect", spec, "--json"]).trim()).expect("manifest");
    let names: Vec<&str> = m["splits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, SPLITS);

    // head --split: the split's own first records; an unknown split lists
    // the others in spec order.
    let text = b.cli(&["head", spec, "--split", "test", "-n", "3"]);
    let shown: Vec<i64> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(shown, b.ids["test"][..3]);
    let o = run(&[
        "head",
        spec,
        "--split",
        "nope",
        "--cache-dir",
        b.cache.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no split named \"nope\" (splits: train, val, test)"),
        "{}",
        stderr(&o)
    );

    // cache ls names no split: one row count per artifact, the total.
    let total: usize = SPLITS.iter().map(|s| b.rows(s)).sum();
    let ls: serde_json::Value =
        serde_json::from_str(b.cli(&["cache", "ls", "--json"]).trim()).unwrap();
    assert_eq!(ls[0]["rows"].as_u64(), Some(total as u64));
}

#[test]
fn inspect_lists_the_most_frequent_vocabulary_values() {
    let b = built();
    let text = b.cli(&["inspect", b.spec.to_str().unwrap()]);
    // Most frequent first, ties by value: ids 1, 2, ...
    let mut vocab: Vec<(&String, &u64)> = b.train_counts.iter().collect();
    vocab.sort_by(|x, y| y.1.cmp(x.1).then_with(|| x.0.cmp(y.0)));
    assert!(
        vocab.len() > 10,
        "the test needs a vocabulary of more than 10 values"
    );

    let head = format!(
        "  kv                   vocab        {} values (ids 1 to {}); other values and nulls get 0",
        vocab.len(),
        vocab.len()
    );
    let at = text
        .find(&head)
        .unwrap_or_else(|| panic!("no {head:?} in:\n{text}"));
    let table: Vec<&str> = text[at..].lines().skip(1).take(12).collect();
    assert_eq!(
        table[0].split_whitespace().collect::<Vec<_>>(),
        ["id", "count", "value"]
    );
    for (i, (value, count)) in vocab.iter().take(10).enumerate() {
        let cells: Vec<&str> = table[i + 1].split_whitespace().collect();
        assert_eq!(
            cells,
            [(i + 1).to_string(), count.to_string(), format!("{value:?}")],
            "row {} of:\n{}",
            i + 1,
            table.join("\n")
        );
    }
    assert_eq!(
        table[11].trim(),
        format!(
            "... and {} more (`tessera inspect --json` lists them all)",
            vocab.len() - 10
        )
    );
}

#[test]
fn bench_names_the_bottleneck_from_the_loader_alone_and_the_step() {
    let b = built();
    let spec = b.spec.to_str().unwrap();
    let train = b.rows("train") as u64;
    let verdict = |step: &str| -> serde_json::Value {
        let out = b.cli(&[
            "bench",
            spec,
            "--split",
            "train",
            "--batch-size",
            "64",
            "--step-ms",
            step,
            "--json",
        ]);
        serde_json::from_str(out.trim()).expect("bench JSON")
    };
    // A step of 20 ms dwarfs assembling 64 small records (microseconds);
    // 100 ns is far below handing over one batch. The same answer each time.
    for _ in 0..3 {
        let r = verdict("20");
        assert_eq!(r["verdict"], "model", "{r}");
        assert_eq!(r["loader_epochs"], 3);
        assert_eq!(r["samples"].as_u64(), Some(train), "{r}");
        let ms = r["loader_ms_per_batch"].as_f64().unwrap();
        assert!(ms > 0.0 && ms * 1.25 <= 20.0, "{r}");
        let r = verdict("0.0001");
        assert_eq!(r["verdict"], "loader", "{r}");
    }
    // Without a step there is no verdict; the text says what it compared.
    assert_eq!(verdict("0")["verdict"], serde_json::Value::Null);
    let text = b.cli(&["bench", spec, "--split", "train", "--step-ms", "20"]);
    assert!(text.contains("loader alone: "), "{text}");
    assert!(text.contains("with a 20 ms step per batch: "), "{text}");
    assert!(
        text.contains("verdict: the model is the bottleneck (the loader needs "),
        "{text}"
    );
}

#[test]
fn inspect_reads_a_vocabulary_kept_in_a_side_file() {
    // More distinct values than the manifest keeps inline (4096), so the
    // vocabulary goes to vocab-w-0.jsonl beside it.
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let mut csv = String::from("w\n");
    let mut counts: HashMap<String, u64> = HashMap::new();
    for i in 0..6000u64 {
        // Value v{i % 5000}: the first 1000 values twice, the rest once.
        let v = format!("v{}", i % 5000);
        *counts.entry(v.clone()).or_default() += 1;
        csv.push_str(&v);
        csv.push('\n');
    }
    std::fs::write(root.join("words.csv"), csv).expect("csv");
    let spec = root.join("spec.yaml");
    std::fs::write(
        &spec,
        "version: 1\nname: words\nsources:\n  t: { path: words.csv }\n\
         fields:\n  w: { dtype: i32, column: w, transform: vocab }\n",
    )
    .expect("spec");
    let cache = root.join("cache");
    let args = ["--cache-dir", cache.to_str().unwrap()];
    let o = run(&["build", spec.to_str().unwrap(), args[0], args[1]]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["inspect", spec.to_str().unwrap(), args[0], args[1]]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("w                    vocab        5000 values (ids 1 to 5000)"),
        "{text}"
    );
    assert!(!text.contains("\"file\""), "raw JSON in:\n{text}");
    let mut vocab: Vec<(&String, &u64)> = counts.iter().collect();
    vocab.sort_by(|x, y| y.1.cmp(x.1).then_with(|| x.0.cmp(y.0)));
    let (value, count) = vocab[0];
    let first = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1"))
        .unwrap_or_else(|| panic!("no id 1 row in:\n{text}"));
    assert_eq!(
        first.split_whitespace().collect::<Vec<_>>(),
        ["1".to_string(), count.to_string(), format!("{value:?}")]
    );
}

/// `--cache-budget` and `$TESSERA_SHARD_CACHE_BYTES` read a size the same
/// way (`KB` is 1000 bytes, `KiB` 1024): a budget below one shard of a
/// compressed set is refused at open, and the refusal states the budget in
/// bytes, whichever way it was given.
#[test]
fn the_cache_budget_means_the_same_on_the_command_line_and_in_the_environment() {
    use tessera_reader::{DType, FieldSpec, RecordLayout, ShardSetWriter};
    let tmp = tempfile::tempdir().expect("tempdir");
    let set = tmp.path().join("set");
    let layout = RecordLayout::packed(&[FieldSpec::new("id", DType::U64, &[8])]).expect("layout");
    // One shard of 4096 + 500 x 64 = 36,096 bytes once decompressed.
    let mut w = ShardSetWriter::new(&set, layout, 1 << 20)
        .and_then(|w| w.with_zstd(3))
        .expect("writer");
    w.begin_split("train").expect("split");
    for i in 0..500u64 {
        let rec: Vec<u8> = (0..8).flat_map(|j| (i * 8 + j).to_le_bytes()).collect();
        w.write_records(&rec).expect("records");
    }
    w.finish().expect("finish");
    let cache = tmp.path().join("cache");
    let refused = |flag: Option<&str>, env: Option<&str>| {
        let mut cmd = common::tessera();
        cmd.args(["bench", &set.display().to_string(), "--epochs", "1"])
            .args(["--shard-cache", &cache.display().to_string()])
            .env_remove("TESSERA_SHARD_CACHE_BYTES");
        if let Some(f) = flag {
            cmd.args(["--cache-budget", f]);
        }
        if let Some(e) = env {
            cmd.env("TESSERA_SHARD_CACHE_BYTES", e);
        }
        let o = cmd.output().expect("run tessera");
        assert!(!o.status.success(), "a budget below a shard was accepted");
        stderr(&o)
    };
    for (text, bytes) in [("20KB", 20_000), ("20KiB", 20_480), ("0.02MB", 20_000)] {
        let want = format!("the budget of {bytes} bytes is smaller than shard");
        let by_flag = refused(Some(text), None);
        assert!(by_flag.contains(&want), "--cache-budget {text}: {by_flag}");
        let by_env = refused(None, Some(text));
        assert!(
            by_env.contains(&want),
            "TESSERA_SHARD_CACHE_BYTES={text}: {by_env}"
        );
    }
}
