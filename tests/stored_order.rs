//! A query's own top-level ORDER BY is the stored order, also when the rest
//! of its plan works row by row (issue 19, item 1): DataFusion's optimizer
//! drops a Sort without a LIMIT under the pass query, so the decision between
//! a chunked and a global build has to be made from the plan as written.

use std::path::{Path, PathBuf};
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let p = dir.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::fs::write(&p, text).expect("write");
    p
}

fn build_spec(dir: &Path, spec: &str, threads: usize) -> BuildReport {
    let path = write(dir, "spec.yaml", spec);
    build(
        &path,
        &BuildOptions {
            cache_dir: Some(dir.join(format!("cache-{threads}"))),
            threads: Some(threads),
            memory_limit: Some(256 << 20),
            progress: ProgressMode::Quiet,
            allow_empty: false,
            max_output: None,
        },
    )
    .expect("build")
}

fn column(r: &BuildReport, field: &str) -> Vec<i64> {
    let ds = Dataset::open(&r.path).expect("open");
    (0..ds.len())
        .map(|i| ds.field::<i64>(i, field).expect("field")[0])
        .collect()
}

fn spec(query: &str) -> String {
    format!(
        "version: 1\nname: o\nsources:\n  t: {{ path: t.csv }}\n  u: {{ path: u.csv }}\n\
         query: \"{query}\"\n\
         fields:\n  ts: {{ dtype: i64, column: ts }}\n  x: {{ dtype: i64, column: x }}\n"
    )
}

#[test]
fn the_spec_examples_order_by_is_the_stored_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // SPEC.md's example: ts arrives as 3, 1, 2, 5, 4.
    write(dir, "t.csv", "ts,x\n3,30\n1,10\n2,20\n5,50\n4,40\n");
    write(dir, "u.csv", "k\n10\n20\n40\n50\n");
    for threads in [1, 2] {
        let r = build_spec(dir, &spec("SELECT ts, x FROM t ORDER BY ts"), threads);
        assert_eq!(r.plan, "global");
        assert_eq!(column(&r, "ts"), vec![1, 2, 3, 4, 5]);
        assert_eq!(column(&r, "x"), vec![10, 20, 30, 40, 50]);

        let r = build_spec(dir, &spec("SELECT ts, x FROM t ORDER BY ts DESC"), threads);
        assert_eq!(column(&r, "ts"), vec![5, 4, 3, 2, 1]);

        // A semi-join keeps the plan row by row once the Sort is gone.
        let r = build_spec(
            dir,
            &spec("SELECT ts, x FROM t WHERE x IN (SELECT k FROM u) ORDER BY ts"),
            threads,
        );
        assert_eq!(r.plan, "global");
        assert_eq!(column(&r, "ts"), vec![1, 2, 4, 5]);
    }
}

#[test]
fn without_order_by_a_row_local_query_stays_chunked_in_input_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    write(dir, "t.csv", "ts,x\n3,30\n1,10\n2,20\n5,50\n4,40\n");
    write(dir, "u.csv", "k\n10\n20\n40\n50\n");
    let r = build_spec(dir, &spec("SELECT ts, x FROM t WHERE x > 10"), 2);
    assert_eq!(r.plan, "chunked");
    assert_eq!(column(&r, "ts"), vec![3, 2, 5, 4]);
}

#[test]
fn an_order_by_on_a_column_not_stored_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    write(dir, "t.csv", "ts,x\n3,30\n1,10\n2,20\n5,50\n4,40\n");
    write(dir, "u.csv", "k\n10\n");
    let spec_path = write(
        dir,
        "spec.yaml",
        "version: 1\nname: o\nsources:\n  t: { path: t.csv }\n\
         query: SELECT x FROM t ORDER BY ts\nfields:\n  x: { dtype: i64, column: x }\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("build")
        .arg(&spec_path)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .output()
        .expect("run tessera");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("ORDER BY sorts by something it does not output"),
        "{text}"
    );
}
