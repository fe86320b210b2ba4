//! The query means what SQL means, whatever the input is cut into, and no
//! value changes silently: regression tests for issue 8's findings, each on
//! data the test writes and checked against a computation of its own.

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Float64Builder, Int64Array, Int64Builder, ListBuilder, StringArray,
    UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tessera::build::{BuildError, BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        Fixture { _tmp: tmp, root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn text(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    fn parquet(&self, rel: &str, batch: &RecordBatch, group_rows: usize) -> PathBuf {
        let p = self.path(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("dir");
        }
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let f = std::fs::File::create(&p).expect("create");
        let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props)).expect("writer");
        w.write(batch).expect("write");
        w.close().expect("close");
        p
    }

    fn build(&self, spec: &str, threads: usize) -> Result<BuildReport, BuildError> {
        let path = self.text("spec.yaml", spec);
        build(
            &path,
            &BuildOptions {
                cache_dir: Some(self.path(&format!("cache-{threads}"))),
                threads: Some(threads),
                memory_limit: Some(256 << 20),
                progress: ProgressMode::Quiet,
                allow_empty: false,
                max_output: None,
            },
        )
    }
}

fn ints(ds: &Dataset, field: &str) -> Vec<i64> {
    (0..ds.len())
        .map(|i| ds.field::<i64>(i, field).expect("field")[0])
        .collect()
}

/// Every shard's bytes, in manifest order, plus the split table.
fn artifact_bytes(r: &BuildReport) -> (Vec<Vec<u8>>, String) {
    let ds = Dataset::open(&r.path).expect("open");
    let shards = ds
        .manifest()
        .shards
        .iter()
        .map(|s| std::fs::read(r.path.join(&s.file)).expect("shard"))
        .collect();
    (shards, format!("{:?}", ds.manifest().splits))
}

fn records(r: &BuildReport) -> Vec<Vec<u8>> {
    let ds = Dataset::open(&r.path).expect("open");
    (0..ds.len())
        .map(|i| ds.record(i).expect("record").to_vec())
        .collect()
}

fn kv_batch(ids: std::ops::Range<i64>, keys: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Utf8, false),
        Field::new("x", DataType::Float64, false),
    ]));
    let id: Vec<i64> = ids.collect();
    let k: Vec<String> = id.iter().map(|i| format!("k{}", i % keys as i64)).collect();
    let x: Vec<f64> = id.iter().map(|i| (*i as f64) * 0.37 - 11.0).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(id)) as ArrayRef,
            Arc::new(StringArray::from(k)),
            Arc::new(Float64Array::from(x)),
        ],
    )
    .expect("batch")
}

#[test]
fn group_by_over_several_files_counts_every_file() {
    // The issue's example: three files with the same three keys.
    let fx = Fixture::new();
    for f in 0..3 {
        let b = kv_batch(0..3, 3);
        fx.parquet(&format!("data/p{f}.parquet"), &b, 10);
    }
    let spec = r#"
version: 1
name: g
sources:
  t: { path: "data/*.parquet" }
query: SELECT k, COUNT(*) AS n FROM t GROUP BY k
fields:
  key: { dtype: i64, expr: "CAST(substr(k, 2) AS BIGINT)" }
  n: { dtype: i64, column: n }
"#;
    let r = fx.build(spec, 2).expect("build");
    assert_eq!(r.plan, "global");
    assert!(
        r.plan_operator
            .as_deref()
            .is_some_and(|o| o.contains("Aggregate"))
    );
    let ds = Dataset::open(&r.path).expect("open");
    let mut got: Vec<(i64, i64)> = ints(&ds, "key").into_iter().zip(ints(&ds, "n")).collect();
    got.sort();
    assert_eq!(got, vec![(0, 3), (1, 3), (2, 3)]);
}

#[test]
fn global_queries_are_byte_identical_for_any_thread_count() {
    let fx = Fixture::new();
    for f in 0..4 {
        let lo = f * 5000;
        fx.parquet(
            &format!("data/p{f}.parquet"),
            &kv_batch(lo..lo + 5000, 37),
            1000,
        );
    }
    for query in [
        "SELECT k, COUNT(*) AS n, SUM(id) AS s, AVG(x) AS a FROM t GROUP BY k",
        "SELECT DISTINCT k, id % 7 AS m FROM t",
        "SELECT id, x, ROW_NUMBER() OVER (PARTITION BY k ORDER BY id) AS rn FROM t",
        "SELECT id, x FROM t ORDER BY x DESC LIMIT 100",
        "SELECT id, x FROM t UNION ALL SELECT id + 1000000, x FROM t WHERE id % 3 = 0",
    ] {
        let spec = format!(
            "version: 1\nname: q\nsources:\n  t: {{ path: \"data/*.parquet\" }}\nquery: {query}\n\
             fields:\n  a: {{ dtype: f64, expr: \"{}\" }}\n",
            if query.contains("GROUP BY") {
                "CAST(n AS DOUBLE) + a + CAST(s AS DOUBLE)"
            } else if query.contains("DISTINCT") {
                "CAST(m AS DOUBLE)"
            } else if query.contains("rn") {
                "x + CAST(rn AS DOUBLE)"
            } else {
                "x + CAST(id AS DOUBLE)"
            }
        );
        let one = fx.build(&spec, 1).expect("1 thread");
        let three = fx.build(&spec, 3).expect("3 threads");
        assert_eq!(one.plan, "global", "{query}");
        assert_eq!(one.hash, three.hash);
        assert_eq!(artifact_bytes(&one), artifact_bytes(&three), "{query}");
    }
}

#[test]
fn a_global_query_keeps_its_own_order_by() {
    let fx = Fixture::new();
    for f in 0..3 {
        let lo = f * 1000;
        fx.parquet(
            &format!("data/p{f}.parquet"),
            &kv_batch(lo..lo + 1000, 7),
            300,
        );
    }
    let r = fx
        .build(
            "version: 1\nname: o\nsources:\n  t: { path: \"data/*.parquet\" }\n\
             query: SELECT id, x FROM t WHERE id % 3 = 0 ORDER BY x DESC LIMIT 500\n\
             fields:\n  id: { dtype: i64, column: id }\n",
            2,
        )
        .expect("build");
    assert_eq!(r.plan, "global");
    let ids = ints(&Dataset::open(&r.path).expect("open"), "id");
    // x grows with id, so x DESC is id DESC: the 500 largest multiples of 3.
    let want: Vec<i64> = (0..3000).rev().filter(|i| i % 3 == 0).take(500).collect();
    assert_eq!(ids, want);
}

#[test]
fn one_file_cut_into_row_group_chunks_gives_the_records_of_five_files() {
    let fx = Fixture::new();
    let all = kv_batch(0..30_000, 50);
    fx.parquet("one/all.parquet", &all, 1000);
    for f in 0..5 {
        let part = all.slice(f * 6000, 6000);
        fx.parquet(&format!("five/p{f}.parquet"), &part, 700);
    }
    fx.parquet(
        "dim.parquet",
        &RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, false),
                Field::new("w", DataType::Int64, false),
            ])),
            vec![
                Arc::new(StringArray::from(
                    (0..40).map(|i| format!("k{i}")).collect::<Vec<_>>(),
                )) as ArrayRef,
                Arc::new(Int64Array::from(
                    (0..40).map(|i| i * 10).collect::<Vec<_>>(),
                )),
            ],
        )
        .expect("dim"),
        100,
    );
    // Inner and left joins with the fact table on either side of the JOIN,
    // a filter, and statistics (standardize, vocab) that must not depend on
    // the cut.
    for (query, chunks) in [
        (
            "SELECT t.id, t.x, t.k, d.w FROM t JOIN d ON t.k = d.k",
            "16KiB",
        ),
        (
            "SELECT t.id, t.x, t.k, d.w FROM d JOIN t ON t.k = d.k",
            "4KiB",
        ),
        (
            "SELECT t.id, t.x, t.k, d.w FROM t LEFT JOIN d ON t.k = d.k",
            "64KiB",
        ),
        (
            "SELECT t.id, t.x, t.k, d.w FROM d RIGHT JOIN t ON t.k = d.k WHERE t.id % 5 <> 1",
            "8KiB",
        ),
    ] {
        let spec = |path: &str, target: &str| {
            format!(
                "version: 1\nname: c\nsources:\n  t: {{ path: \"{path}\" }}\n  d: {{ path: dim.parquet }}\n\
                 query: {query}\nchunks: {{ target_bytes: {target} }}\nfields:\n\
                 \x20 id: {{ dtype: i64, column: id }}\n\
                 \x20 x: {{ dtype: f32, column: x, transform: standardize }}\n\
                 \x20 k: {{ dtype: i32, column: k, transform: {{ vocab: {{}} }} }}\n\
                 \x20 w: {{ dtype: i64, column: w, fill_null: -1 }}\n\
                 split: {{ key: id, weights: {{ train: 0.8, val: 0.2 }} }}\n"
            )
        };
        let a = fx
            .build(&spec("one/all.parquet", "256MiB"), 2)
            .expect("one chunk");
        let b = fx
            .build(&spec("five/*.parquet", "256MiB"), 2)
            .expect("five files");
        let c = fx
            .build(&spec("one/all.parquet", chunks), 2)
            .expect("many chunks");
        assert_eq!(a.plan, "chunked", "{query}");
        assert_eq!(a.chunks, 1);
        assert!(c.chunks > 4, "{query}: {} chunks", c.chunks);
        let ra = records(&a);
        assert_eq!(ra, records(&b), "{query}: one file vs five");
        assert_eq!(ra, records(&c), "{query}: one chunk vs {}", c.chunks);
        // Input order within each split: ids increase.
        let ds = Dataset::open(&a.path).expect("open");
        for split in ["train", "val"] {
            let s = ds.split(split).expect("split");
            let ids = ints(&s, "id");
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "{query}: {split} out of order"
            );
        }
    }
}

#[test]
fn self_joins_subqueries_and_outer_joins_keeping_the_dimension_are_global() {
    let fx = Fixture::new();
    for f in 0..3 {
        let lo = f * 100;
        fx.parquet(
            &format!("data/p{f}.parquet"),
            &kv_batch(lo..lo + 100, 10),
            40,
        );
    }
    fx.text("dim.csv", "k,w\nk1,1\nk2,2\nzz,3\n");
    for (query, expect_rows) in [
        // Every fact row has a partner 1 below it except id 0.
        ("SELECT a.id FROM t a JOIN t b ON a.id = b.id + 1", 299),
        ("SELECT id FROM t WHERE x > (SELECT AVG(x) FROM t)", 150),
        (
            "SELECT id FROM t a WHERE NOT EXISTS (SELECT 1 FROM t b WHERE b.id = a.id + 100)",
            100,
        ),
        // The dimension's unmatched row appears once, not once per file.
        (
            "SELECT COALESCE(t.id, -1) AS id FROM t RIGHT JOIN d ON t.k = d.k",
            61,
        ),
        ("SELECT COUNT(*) AS id FROM t", 1),
    ] {
        let spec = format!(
            "version: 1\nname: s\nsources:\n  t: {{ path: \"data/*.parquet\" }}\n  d: {{ path: dim.csv }}\n\
             query: {query}\nfields:\n  id: {{ dtype: i64, column: id }}\n"
        );
        let r = fx
            .build(&spec, 2)
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        // The fact table cannot be chunked; the dimension of an outer join
        // that keeps it may be (each of its rows is kept or joined once).
        assert!(
            r.plan == "global" || r.plan_source.as_deref() == Some("d"),
            "{query}: {:?} {:?}",
            r.plan,
            r.plan_source
        );
        assert_eq!(r.rows.get("all"), Some(expect_rows), "{query}");
    }
    let ds = Dataset::open(
        fx.build(
            "version: 1\nname: s\nsources:\n  t: { path: \"data/*.parquet\" }\nquery: SELECT COUNT(*) AS n FROM t\nfields:\n  n: { dtype: i64, column: n }\n",
            1,
        )
        .expect("count")
        .path,
    )
    .expect("open");
    assert_eq!(ints(&ds, "n"), vec![300]);
}

#[test]
fn csv_headers_must_agree_and_null_values_apply() {
    let fx = Fixture::new();
    fx.text(
        "pop/a.csv",
        "country,pop,life\nA,100,70.5\nB,NA,NA\nC,300,\n",
    );
    fx.text("pop/b.csv", "country,life,pop\nD,60.1,400\n");
    let spec = r#"
version: 1
name: p
sources:
  t: { path: "pop/*.csv", null_values: ["", NA] }
fields:
  pop: { dtype: f32, column: pop, fill_null: -1 }
  life: { dtype: f32, column: life, fill_null: -1 }
  country: { dtype: i32, column: country, transform: { vocab: {} } }
"#;
    let e = fx.build(spec, 1).expect_err("headers differ").to_string();
    assert!(e.contains("b.csv:1") && e.contains("header differs"), "{e}");
    assert!(e.contains("sources.t.path"), "{e}");
    std::fs::remove_file(fx.path("pop/b.csv")).expect("rm");
    let r = fx.build(spec, 1).expect("build");
    let ds = Dataset::open(&r.path).expect("open");
    let col = |f: &str| -> Vec<f32> {
        (0..ds.len())
            .map(|i| ds.field::<f32>(i, f).expect("f")[0])
            .collect()
    };
    assert_eq!(col("pop"), vec![100.0, -1.0, 300.0]);
    assert_eq!(col("life"), vec![70.5, -1.0, -1.0]);
    let stats = &ds.manifest().stats["country"][0]["values"];
    assert_eq!(stats, &serde_json::json!(["A", "B", "C"]));
}

#[test]
fn csv_cut_at_line_starts_keeps_quoted_line_breaks_whole() {
    let fx = Fixture::new();
    let mut text = String::from("id,note,v\n");
    for i in 0..4000 {
        if i % 7 == 0 {
            text.push_str(&format!("{i},\"two\nlines, {i}\",{}\n", i * 3));
        } else {
            text.push_str(&format!("{i},plain {i},{}\n", i * 3));
        }
    }
    fx.text("n.csv", &text);
    let spec = |target: &str| {
        format!(
            "version: 1\nname: n\nsources:\n  t: {{ path: n.csv }}\nchunks: {{ target_bytes: {target} }}\n\
             fields:\n  id: {{ dtype: i64, column: id }}\n  v: {{ dtype: i64, column: v }}\n\
             \x20 len: {{ dtype: i64, expr: \"length(note)\" }}\n"
        )
    };
    let whole = fx.build(&spec("64MiB"), 2).expect("whole");
    let cut = fx.build(&spec("4KiB"), 2).expect("cut");
    assert!(cut.chunks > 10, "{} chunks", cut.chunks);
    assert_eq!(records(&whole), records(&cut));
    let ds = Dataset::open(&cut.path).expect("open");
    assert_eq!(ints(&ds, "id"), (0..4000).collect::<Vec<_>>());
    assert_eq!(ints(&ds, "v"), (0..4000).map(|i| i * 3).collect::<Vec<_>>());
}

#[test]
fn csv_values_that_do_not_parse_name_the_file_and_line() {
    let fx = Fixture::new();
    let mut text = String::from("a,b\n");
    for i in 0..50 {
        text.push_str(&format!("{i},{}\n", i * 2));
    }
    text.push_str("50,oops\n");
    // Types are inferred from the first file, which holds only numbers, so
    // the bad value in the second surfaces while reading: file and line.
    fx.text("a.csv", "a,b\n1,2\n");
    fx.text("b.csv", &text);
    let spec = "version: 1\nname: x\nsources:\n  t: { path: \"?.csv\" }\nfields:\n  b: { dtype: i64, column: b }\n";
    let e = fx.build(spec, 1).expect_err("bad value").to_string();
    assert!(e.contains("b.csv:52"), "{e}");
    assert!(e.contains("oops"), "{e}");
}

#[test]
fn values_that_do_not_fit_their_field_are_errors_naming_field_and_row() {
    let fx = Fixture::new();
    fx.text("s.csv", "x,s,f\n1,2.5,1.5\n2,abc,2.0\n3,4,3.0\n");
    let base = "version: 1\nname: v\nsources:\n  t: { path: s.csv }\nfields:\n";
    // A string column stored as f32: the bad value, not a null.
    let e = fx
        .build(
            &format!("{base}  s: {{ dtype: f32, column: s, fill_null: 0 }}\n"),
            1,
        )
        .expect_err("string as f32")
        .to_string();
    assert!(e.contains("spec.yaml:6: fields.s:"), "{e}");
    assert!(e.contains("s.csv:3: \"abc\" is not a number"), "{e}");
    // The same mistake found by the statistics pass is traced too.
    let e = fx
        .build(
            &format!("{base}  s: {{ dtype: f32, column: s, transform: standardize }}\n"),
            1,
        )
        .expect_err("string standardized")
        .to_string();
    assert!(e.contains("s.csv:3: \"abc\" is not a number"), "{e}");
    // A fraction stored as an integer.
    let e = fx
        .build(&format!("{base}  f: {{ dtype: i32, column: f }}\n"), 1)
        .expect_err("fraction")
        .to_string();
    assert!(e.contains("1.5 is not a whole number"), "{e}");
    // Integer arithmetic that overflows i64 in an expr.
    let e = fx
        .build(
            &format!("{base}  o: {{ dtype: i64, expr: \"x * 9223372036854775807\" }}\n"),
            1,
        )
        .expect_err("overflow")
        .to_string();
    assert!(
        e.contains("fields.o") && e.contains("integer overflow"),
        "{e}"
    );
    // A value too large for f32.
    let e = fx
        .build(
            &format!("{base}  big: {{ dtype: f32, expr: \"CAST(x AS DOUBLE) * 1e300\" }}\n"),
            1,
        )
        .expect_err("f32 range")
        .to_string();
    assert!(e.contains("beyond the range of f32"), "{e}");
    // An integer that does not fit the dtype.
    let e = fx
        .build(
            &format!("{base}  i: {{ dtype: i8, expr: \"x * 100\" }}\n"),
            1,
        )
        .expect_err("i8")
        .to_string();
    assert!(e.contains("200 does not fit i8"), "{e}");
    // A volatile function.
    let e = fx
        .build(
            &format!("{base}  r: {{ dtype: f32, expr: \"random()\" }}\n"),
            1,
        )
        .expect_err("volatile")
        .to_string();
    assert!(e.contains("volatile"), "{e}");
}

#[test]
fn u64_and_integer_lists_are_exact() {
    let fx = Fixture::new();
    let big = (1i64 << 53) + 1;
    let mut lists = ListBuilder::new(Int64Builder::new());
    for i in 0..3i64 {
        lists.values().append_value(big + i);
        lists.values().append_value(-big - i);
        lists.append(true);
    }
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("u", DataType::UInt64, false),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
                true,
            ),
        ])),
        vec![
            Arc::new(UInt64Array::from(vec![u64::MAX, 0, 1 << 63])) as ArrayRef,
            Arc::new(lists.finish()),
        ],
    )
    .expect("batch");
    fx.parquet("u.parquet", &b, 10);
    let r = fx
        .build(
            "version: 1\nname: u\nsources:\n  t: { path: u.parquet }\nfields:\n\
             \x20 u: { dtype: u64, column: u }\n  l: { dtype: i64, column: l, length: 3, pad: 7 }\n",
            1,
        )
        .expect("build");
    let ds = Dataset::open(&r.path).expect("open");
    let u: Vec<u64> = (0..3)
        .map(|i| ds.field::<u64>(i, "u").expect("u")[0])
        .collect();
    assert_eq!(u, vec![u64::MAX, 0, 1 << 63]);
    for i in 0..3i64 {
        assert_eq!(
            ds.field::<i64>(i as u64, "l").expect("l"),
            &[big + i, -big - i, 7]
        );
    }
}

#[test]
fn nonfinite_values_in_statistics_follow_the_policy() {
    let fx = Fixture::new();
    fx.text("v.csv", "x\n1\n0\n3\n");
    let spec = |policy: &str| {
        format!(
            "version: 1\nname: n\nsources:\n  t: {{ path: v.csv }}\nfields:\n\
             \x20 y: {{ dtype: f32, expr: \"1.0 / CAST(x AS DOUBLE)\", transform: standardize{policy} }}\n"
        )
    };
    let e = fx.build(&spec(""), 1).expect_err("inf").to_string();
    assert!(
        e.contains("fields.y") && e.contains("inf") && e.contains("nonfinite: exclude"),
        "{e}"
    );
    let r = fx.build(&spec(", nonfinite: exclude"), 1).expect("exclude");
    let ds = Dataset::open(&r.path).expect("open");
    let st = &ds.manifest().stats["y"][0];
    // Statistics over 1 and 1/3 only.
    let (a, b) = (1.0f64, 1.0 / 3.0);
    let mean = (a + b) / 2.0;
    assert!(
        (st["mean"].as_f64().expect("mean") - mean).abs() < 1e-12,
        "{st}"
    );
    assert_eq!(st["count"], 2);
    let y: Vec<f32> = (0..3)
        .map(|i| ds.field::<f32>(i, "y").expect("y")[0])
        .collect();
    assert!(
        y[1].is_infinite() && y[0].is_finite() && y[2].is_finite(),
        "{y:?}"
    );
}

#[test]
fn hive_sources_read_exactly_the_hashed_files_with_typed_partition_values() {
    let fx = Fixture::new();
    let mut expect = BTreeMap::new();
    for year in [2020, 2021] {
        for region in ["eu", "us west"] {
            let lo = (year - 2020) * 1000 + if region == "eu" { 0 } else { 500 };
            let dir = format!("ev/year={year}/region={}", region.replace(' ', "%20"));
            fx.parquet(&format!("{dir}/a.parquet"), &kv_batch(lo..lo + 100, 5), 30);
            for id in lo..lo + 100 {
                expect.insert(id, (year, region.to_string()));
            }
        }
    }
    let spec = r#"
version: 1
name: h
sources:
  ev: { path: ev, chunk: true }
filter: year = 2021 OR region = 'eu'
chunks: { target_bytes: 4KiB }
fields:
  id: { dtype: i64, column: id }
  year: { dtype: i64, column: year }
  region: { dtype: i64, expr: "length(region)" }
"#;
    let r = fx.build(spec, 2).expect("build");
    assert_eq!(r.plan, "chunked");
    let ds = Dataset::open(&r.path).expect("open");
    let (ids, years, lens) = (ints(&ds, "id"), ints(&ds, "year"), ints(&ds, "region"));
    let want: Vec<i64> = expect
        .iter()
        .filter(|(_, (y, reg))| *y == 2021 || reg == "eu")
        .map(|(id, _)| *id)
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, want, "each row exactly once");
    for ((id, y), l) in ids.iter().zip(&years).zip(&lens) {
        let (wy, wr) = &expect[id];
        assert_eq!((*y, *l), (*wy, wr.len() as i64), "row {id}");
    }
}

#[test]
fn an_input_changed_after_hashing_is_not_published() {
    // Fingerprint, change the file, recheck: the build's last step.
    use tessera::fingerprint::{SourceFiles, StatCache, fingerprint_inputs, recheck};
    let fx = Fixture::new();
    let p = fx.text("a.csv", "x\n1\n");
    let files = fingerprint_inputs(
        &[SourceFiles {
            source: "t".into(),
            root: fx.root.clone(),
            files: vec![p.clone()],
            hash_bytes: false,
        }],
        &mut StatCache::in_memory(),
    )
    .expect("fingerprint");
    recheck(&files).expect("unchanged");
    // Same size, new content, written at once: only the content tells.
    std::fs::write(&p, "x\n2\n").expect("rewrite");
    let e = recheck(&files).expect_err("changed").to_string();
    assert!(
        e.contains("a.csv") && e.contains("changed during the build"),
        "{e}"
    );
}

#[test]
fn explain_prints_the_decision_and_the_chunks() {
    let fx = Fixture::new();
    fx.parquet("one.parquet", &kv_batch(0..5000, 5), 500);
    let spec = fx.text(
        "e.yaml",
        "version: 1\nname: e\nsources:\n  t: { path: one.parquet }\nfilter: id >= 4000\n\
         chunks: { target_bytes: 8KiB }\nfields:\n  id: { dtype: i64, column: id }\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["explain", &spec.to_string_lossy()])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("plan: chunked over source \"t\""),
        "{text}"
    );
    assert!(text.contains("row groups"), "{text}");
    assert!(
        text.contains("statistics skip 8 of 10 row groups"),
        "{text}"
    );
    assert!(text.contains("physical plan:"), "{text}");
}

#[test]
fn a_query_over_the_memory_limit_names_the_limit() {
    let fx = Fixture::new();
    fx.parquet("a.parquet", &kv_batch(0..200_000, 1000), 20_000);
    fx.parquet("b.parquet", &kv_batch(0..200_000, 1000), 20_000);
    let spec = fx.text(
        "m.yaml",
        "version: 1\nname: m\nsources:\n  a: { path: a.parquet }\n  b: { path: b.parquet }\n\
         query: SELECT a.id, b.x FROM a JOIN b ON a.id = b.id\nfields:\n  id: { dtype: i64, column: id }\n",
    );
    let e = build(
        &spec,
        &BuildOptions {
            cache_dir: Some(fx.path("cache")),
            threads: Some(2),
            memory_limit: Some(256 << 10),
            progress: ProgressMode::Quiet,
            allow_empty: false,
            max_output: None,
        },
    )
    .expect_err("over the limit")
    .to_string();
    assert!(
        e.contains("--memory-limit 256.0 KiB") || e.contains("--memory-limit 262144"),
        "{e}"
    );
    assert!(e.contains("raise --memory-limit"), "{e}");
    // Nothing was published.
    let published = std::fs::read_dir(fx.path("cache"))
        .expect("cache")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().len() == 64)
        .count();
    assert_eq!(published, 0);
}

#[test]
fn a_cross_join_that_explodes_stops_at_the_output_limit() {
    let fx = Fixture::new();
    fx.parquet("a.parquet", &kv_batch(0..3000, 10), 1000);
    let spec = fx.text(
        "x.yaml",
        "version: 1\nname: x\nsources:\n  a: { path: a.parquet }\n  b: { path: a.parquet }\n\
         query: SELECT a.id, b.x FROM a CROSS JOIN b\nfields:\n  id: { dtype: i64, column: id }\n  x: { dtype: f64, column: x }\n",
    );
    let e = build(
        &spec,
        &BuildOptions {
            cache_dir: Some(fx.path("cache")),
            threads: Some(2),
            max_output: Some(1 << 20),
            progress: ProgressMode::Quiet,
            ..Default::default()
        },
    )
    .expect_err("9 M records of 16 bytes exceed 1 MiB")
    .to_string();
    assert!(
        e.contains("--max-output limit") && e.contains("1.0 MiB"),
        "{e}"
    );
    // Within the limit the same query builds.
    let r = build(
        &spec,
        &BuildOptions {
            cache_dir: Some(fx.path("cache")),
            threads: Some(2),
            max_output: Some(1 << 30),
            progress: ProgressMode::Quiet,
            ..Default::default()
        },
    )
    .expect("within the limit");
    assert_eq!(r.rows.get("all"), Some(9_000_000));
}

#[test]
fn list_statistics_count_only_the_stored_elements() {
    // Issue 19: `length: 2` stores 1, 2 of [1, 2, 100] and 3 of [3] (then a
    // pad); the statistics must be those of 1, 2, 3, not of 100 or the pad.
    let fx = Fixture::new();
    let input: Vec<Vec<f64>> = vec![vec![1.0, 2.0, 100.0], vec![3.0]];
    let mut lists = ListBuilder::new(Float64Builder::new());
    for l in &input {
        for &x in l {
            lists.values().append_value(x);
        }
        lists.append(true);
    }
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "l",
            DataType::List(Arc::new(Field::new("item", DataType::Float64, true))),
            true,
        )])),
        vec![Arc::new(lists.finish()) as ArrayRef],
    )
    .expect("batch");
    fx.parquet("l.parquet", &b, 10);
    let r = fx
        .build(
            "version: 1\nname: l\nsources:\n  t: { path: l.parquet }\nfields:\n\
             \x20 s: { dtype: f64, column: l, length: 2, pad: 0, transform: standardize }\n\
             \x20 m: { dtype: f64, column: l, length: 2, pad: -1, transform: min_max }\n",
            1,
        )
        .expect("build");
    // The stored elements, computed here: the first two of each list.
    let stored: Vec<f64> = input
        .iter()
        .flat_map(|l| l.iter().take(2))
        .copied()
        .collect();
    assert_eq!(stored, vec![1.0, 2.0, 3.0]);
    let n = stored.len() as f64;
    let mean = stored.iter().sum::<f64>() / n;
    let std = (stored.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert_eq!(mean, 2.0);
    let ds = Dataset::open(&r.path).expect("open");
    let st = &ds.manifest().stats["s"][0];
    assert_eq!(st["count"], 3, "{st}");
    assert!(
        (st["mean"].as_f64().expect("mean") - mean).abs() < 1e-12,
        "{st}"
    );
    assert!(
        (st["std"].as_f64().expect("std") - std).abs() < 1e-12,
        "{st}"
    );
    let mm = &ds.manifest().stats["m"][0];
    assert_eq!(
        (mm["min"].as_f64(), mm["max"].as_f64()),
        (Some(1.0), Some(3.0)),
        "{mm}"
    );
    assert_eq!(mm["count"], 3, "{mm}");
    let s = |i: u64| ds.field::<f64>(i, "s").expect("s").to_vec();
    let m = |i: u64| ds.field::<f64>(i, "m").expect("m").to_vec();
    let z = |x: f64| (x - mean) / std;
    for (got, want) in s(0).iter().zip([z(1.0), z(2.0)]) {
        assert!((got - want).abs() < 1e-12, "{:?}", s(0));
    }
    assert!(
        (s(1)[0] - z(3.0)).abs() < 1e-12 && s(1)[1] == 0.0,
        "{:?}",
        s(1)
    );
    assert_eq!(m(0), vec![0.0, 0.5]);
    assert_eq!(m(1), vec![1.0, -1.0]);
}

#[test]
fn empty_csv_fields_are_null_with_or_without_null_values() {
    // Issue 19: `null_values: [NA]` used to make an empty field a value (a
    // vocabulary entry "", or `"" is not a number`). An empty field is null
    // either way; `null_values` only add nulls. (python/tests/
    // test_csv_nulls.py checks the same rule against pandas and pyarrow.)
    let fx = Fixture::new();
    let spec = |file: &str, options: &str| {
        format!(
            "version: 1\nname: e\nsources:\n  t: {{ path: {file}{options} }}\nfields:\n\
             \x20 x: {{ dtype: f64, column: x, fill_null: -100 }}\n\
             \x20 s: {{ dtype: i32, column: s, transform: {{ vocab: {{ oov: 0 }} }} }}\n\
             \x20 s_null: {{ dtype: u8, expr: \"CAST(s IS NULL AS TINYINT)\" }}\n"
        )
    };
    let floats = |ds: &Dataset, f: &str| -> Vec<f64> {
        (0..ds.len())
            .map(|i| ds.field::<f64>(i, f).expect("f")[0])
            .collect()
    };
    let bytes = |ds: &Dataset, f: &str| -> Vec<u8> {
        (0..ds.len())
            .map(|i| ds.field::<u8>(i, f).expect("f")[0])
            .collect()
    };
    fx.text("na.csv", "x,s\n1.5,a\n,\nNA,NA\n\"\",\"\"\n2,na\n");
    for options in [", null_values: [NA]", ", null_values: [\"\", NA]"] {
        let r = fx.build(&spec("na.csv", options), 1).expect("build");
        let ds = Dataset::open(&r.path).expect("open");
        assert_eq!(
            floats(&ds, "x"),
            vec![1.5, -100.0, -100.0, -100.0, 2.0],
            "{options}"
        );
        assert_eq!(bytes(&ds, "s_null"), vec![0, 1, 1, 1, 0], "{options}");
        let vocab = &ds.manifest().stats["s"][0]["values"];
        assert_eq!(vocab, &serde_json::json!(["a", "na"]), "{options}");
    }
    // Without null_values: the empty field is still null, and NA is text.
    fx.text("plain.csv", "x,s\n1.5,a\n,\n3,NA\n\"\",\"\"\n2,na\n");
    let r = fx.build(&spec("plain.csv", ""), 1).expect("build");
    let ds = Dataset::open(&r.path).expect("open");
    assert_eq!(floats(&ds, "x"), vec![1.5, -100.0, 3.0, -100.0, 2.0]);
    assert_eq!(bytes(&ds, "s_null"), vec![0, 1, 0, 1, 0]);
    let vocab = &ds.manifest().stats["s"][0]["values"];
    assert_eq!(vocab, &serde_json::json!(["NA", "a", "na"]));
}

#[test]
fn bytes_fields_take_binary_values_of_exactly_their_size() {
    use datafusion::arrow::array::{BinaryArray, FixedSizeBinaryArray, LargeBinaryArray};
    let fx = Fixture::new();
    let values: [&[u8]; 3] = [b"\x00\x01\x02\x03", b"abcd", b"\xff\xfe\xfd\xfc"];
    let short: [&[u8]; 3] = [b"wxyz", b"abcd", b"abc"];
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("bin", DataType::Binary, false),
            Field::new("large", DataType::LargeBinary, false),
            Field::new("fixed", DataType::FixedSizeBinary(4), false),
            Field::new("short", DataType::Binary, false),
            Field::new("text", DataType::Utf8, false),
            Field::new("holes", DataType::Binary, true),
        ])),
        vec![
            Arc::new(BinaryArray::from_iter_values(values)) as ArrayRef,
            Arc::new(LargeBinaryArray::from_iter_values(values)),
            Arc::new(FixedSizeBinaryArray::try_from_iter(values.iter()).expect("fixed")),
            Arc::new(BinaryArray::from_iter_values(short)),
            Arc::new(StringArray::from(vec!["abcd", "efgh", "ijkl"])),
            Arc::new(BinaryArray::from(vec![
                Some(values[0]),
                None,
                Some(values[2]),
            ])),
        ],
    )
    .expect("batch");
    fx.parquet("b.parquet", &b, 10);
    let spec = |fields: &str| {
        format!("version: 1\nname: b\nsources:\n  t: {{ path: b.parquet }}\nfields:\n{fields}")
    };
    let r = fx
        .build(
            &spec(
                "  bin: { dtype: u8, column: bin, bytes: 4 }\n\
                 \x20 large: { dtype: u8, column: large, bytes: 4 }\n\
                 \x20 fixed: { dtype: u8, column: fixed, bytes: 4 }\n\
                 \x20 text: { dtype: u8, expr: \"CAST(text AS BYTEA)\", bytes: 4 }\n",
            ),
            1,
        )
        .expect("binary of 4 bytes");
    let ds = Dataset::open(&r.path).expect("open");
    for f in ["bin", "large", "fixed"] {
        for (i, v) in values.iter().enumerate() {
            assert_eq!(ds.field::<u8>(i as u64, f).expect("f"), *v, "{f} row {i}");
        }
    }
    for (i, v) in ["abcd", "efgh", "ijkl"].iter().enumerate() {
        assert_eq!(
            ds.field::<u8>(i as u64, "text").expect("text"),
            v.as_bytes()
        );
    }
    // A value of another length: the field, the row and both sizes.
    let e = fx
        .build(&spec("  s: { dtype: u8, column: short, bytes: 4 }\n"), 1)
        .expect_err("3 bytes")
        .to_string();
    eprintln!("wrong length: {e}");
    assert!(e.contains("spec.yaml:6: fields.s:"), "{e}");
    assert!(
        e.contains("row 3") && e.contains("the value has 3 bytes; the field holds exactly 4"),
        "{e}"
    );
    // A fixed-size binary column of another width fails the same way.
    let e = fx
        .build(&spec("  f: { dtype: u8, column: fixed, bytes: 8 }\n"), 1)
        .expect_err("4 bytes, not 8")
        .to_string();
    assert!(
        e.contains("the value has 4 bytes; the field holds exactly 8"),
        "{e}"
    );
    // Text is not binary: convert it in an expr.
    let e = fx
        .build(&spec("  t: { dtype: u8, column: text, bytes: 4 }\n"), 1)
        .expect_err("text")
        .to_string();
    eprintln!("text: {e}");
    assert!(
        e.contains("fields.t") && e.contains("bytes needs a binary column"),
        "{e}"
    );
    // A null is an error naming the row.
    let e = fx
        .build(&spec("  h: { dtype: u8, column: holes, bytes: 4 }\n"), 1)
        .expect_err("null")
        .to_string();
    eprintln!("null: {e}");
    assert!(
        e.contains("fields.h") && e.contains("row 2") && e.contains("is null"),
        "{e}"
    );
}
