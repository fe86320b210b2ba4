//! The planner knows how large each Parquet input is (its row groups' rows
//! and bytes, from the footers), so DataFusion builds a join's hash table
//! from the smaller side whatever the order the query names the tables in.
//! Without these sizes it built from the side written first: in TPC-H's
//! q07 and q21 a table of millions of rows where a small one would do.

mod common;

use common::{run, stderr, stdout};
use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use std::path::Path;
use std::sync::Arc;

fn write(path: &Path, batch: &RecordBatch) {
    let f = std::fs::File::create(path).expect("create");
    let mut w = ArrowWriter::try_new(f, batch.schema(), None).expect("writer");
    w.write(batch).expect("write");
    w.close().expect("close");
}

/// `big.parquet`: 200,000 rows `(k, v)`, k in 0..50; `small.parquet`: 50
/// rows `(k, name)`.
fn inputs(root: &Path) {
    let k: Vec<i64> = (0..200_000).map(|i| i % 50).collect();
    let v: Vec<i64> = (0..200_000).collect();
    let big = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ])),
        vec![
            Arc::new(Int64Array::from(k)) as ArrayRef,
            Arc::new(Int64Array::from(v)),
        ],
    )
    .expect("batch");
    write(&root.join("big.parquet"), &big);
    let names: Vec<String> = (0..50).map(|i| format!("n{i:02}")).collect();
    let small = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(Int64Array::from((0..50).collect::<Vec<i64>>())) as ArrayRef,
            Arc::new(StringArray::from(names)),
        ],
    )
    .expect("batch");
    write(&root.join("small.parquet"), &small);
}

/// The scan that feeds the first (build) input of the plan's first hash
/// join: the first `DataSourceExec` line below the join's line.
fn build_side_scan(plan: &str) -> String {
    let mut lines = plan.lines().skip_while(|l| !l.contains("HashJoinExec"));
    let join = lines.next().expect("a hash join in the plan");
    let depth = join.len() - join.trim_start().len();
    lines
        .take_while(|l| l.len() - l.trim_start().len() > depth)
        .find(|l| l.contains("DataSourceExec"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_join_builds_its_hash_table_from_the_smaller_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    inputs(root);
    // The large table is named first, and a GROUP BY makes the query global
    // (one plan over all inputs), so no chunking rule orients the join.
    for (name, from) in [
        ("big-first", "big b JOIN small s ON b.k = s.k"),
        ("small-first", "small s JOIN big b ON b.k = s.k"),
    ] {
        let spec = root.join(format!("{name}.yaml"));
        std::fs::write(
            &spec,
            format!(
                "version: 1\nname: {name}\nsources:\n  big: {{ path: big.parquet }}\n  \
                 small: {{ path: small.parquet }}\n\
                 query: \"SELECT s.name, SUM(b.v) AS total FROM {from} GROUP BY s.name\"\n\
                 fields:\n  total: {{ dtype: i64, column: total }}\n"
            ),
        )
        .expect("spec");
        let o = run(&["explain", spec.to_str().expect("utf-8 path")]);
        let text = stdout(&o);
        assert!(o.status.success(), "{}", stderr(&o));
        let scan = build_side_scan(&text);
        assert!(
            scan.contains("small.parquet"),
            "{name}: built from {scan}\n{text}"
        );
    }
}
