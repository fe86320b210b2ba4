//! Hive partitions and pruning (issue 19, item 10): `tessera explain` tells
//! what a filter on a partition column skips (it used to fail with a schema
//! error), and `tessera build` skips the files the filter rules out by
//! their partition values, and counts them.

mod common;

use common::{run, stderr, stdout};
use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use std::path::Path;
use std::sync::Arc;

const YEARS: [i64; 4] = [2019, 2020, 2021, 2022];
const REGIONS: [&str; 3] = ["eu", "us", "asia"];
const ROWS: i64 = 50;

/// 12 files, `ev/year=Y/region=R/part.parquet`, one row group each.
fn write_partitions(root: &Path) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Float64, false),
    ]));
    let mut next = 0i64;
    for year in YEARS {
        for region in REGIONS {
            let dir = root.join(format!("ev/year={year}/region={region}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            let ids: Vec<i64> = (next..next + ROWS).collect();
            next += ROWS;
            let xs: Vec<f64> = ids.iter().map(|i| *i as f64 / 2.0).collect();
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from(ids)) as ArrayRef,
                    Arc::new(Float64Array::from(xs)),
                ],
            )
            .expect("batch");
            let f = std::fs::File::create(dir.join("part.parquet")).expect("create");
            let mut w = ArrowWriter::try_new(f, Arc::clone(&schema), None).expect("writer");
            w.write(&batch).expect("write");
            w.close().expect("close");
        }
    }
}

fn find_u64(v: &serde_json::Value, key: &str) -> Option<u64> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .or_else(|| m.values().find_map(|x| find_u64(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_u64(x, key)),
        _ => None,
    }
}

#[test]
fn a_filter_on_a_partition_column_is_explained_and_counted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write_partitions(root);
    let spec = root.join("spec.yaml");
    std::fs::write(
        &spec,
        "version: 1\nname: hive\nsources:\n  ev: { path: ev }\nfilter: \"year = 2021\"\n\
         fields:\n  id: { dtype: i64, column: id }\n  x: { dtype: f64, column: x }\n",
    )
    .expect("spec");
    let cache = root.join("cache");
    let cache = cache.to_str().expect("utf-8 path");
    let spec = spec.to_str().expect("utf-8 path");

    let o = run(&["explain", spec]);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "{text}");
    assert!(!text.contains("cannot tell"), "{text}");
    assert!(
        text.contains("statistics skip 9 of 12 row groups (9 of 12 files entirely)"),
        "{text}"
    );

    let o = run(&["build", spec, "--cache-dir", cache, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json report");
    assert_eq!(find_u64(&report, "rows_kept"), Some(3 * ROWS as u64));
    // The nine files outside year=2021 are skipped by their partition values,
    // before they are opened: no row group of theirs is read or counted.
    assert_eq!(find_u64(&report, "files_pruned"), Some(9), "{report}");
    assert_eq!(find_u64(&report, "row_groups_pruned"), Some(0), "{report}");
    assert_eq!(
        find_u64(&report, "rows_scanned"),
        Some(3 * ROWS as u64),
        "{report}"
    );

    // A filter on a partition column and a file column: the partition part
    // skips files, the rest is applied to the rows; 2 and 4 threads agree.
    let spec2 = root.join("spec2.yaml");
    std::fs::write(
        &spec2,
        "version: 1\nname: hive2\nsources:\n  ev: { path: ev }\n\
         filter: \"region IN ('eu', 'asia') AND year >= 2021 AND x >= 0\"\n\
         fields:\n  id: { dtype: i64, column: id }\n",
    )
    .expect("spec");
    let spec2 = spec2.to_str().expect("utf-8 path");
    for threads in ["1", "2"] {
        let cache = root.join(format!("cache2-{threads}"));
        let cache = cache.to_str().expect("utf-8 path");
        let o = run(&[
            "build",
            spec2,
            "--cache-dir",
            cache,
            "--json",
            "--threads",
            threads,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json report");
        assert_eq!(find_u64(&report, "rows_kept"), Some(4 * ROWS as u64));
        assert_eq!(find_u64(&report, "files_pruned"), Some(8), "{report}");
    }
}
