//! Decimals give exact answers (issue 19, item 9): a decimal stored in an
//! `f64` field is the nearest double, `AVG` of a decimal is the exact
//! average rounded once, and a decimal quotient is a `DOUBLE` division, not a
//! decimal truncated by DataFusion's scale rules. Each expected value is the
//! standard library's correctly rounded parse of the exact decimal text,
//! written out here by hand.

use datafusion::arrow::array::{ArrayRef, Decimal128Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

fn decimals(values: &[i128], precision: u8, scale: i8) -> ArrayRef {
    Arc::new(
        Decimal128Array::from(values.to_vec())
            .with_precision_and_scale(precision, scale)
            .expect("decimal type"),
    )
}

/// `t.parquet`: id, a decimal(15, 2) `price`, a decimal(15, 4) `disc` and a
/// decimal(20, 6) `big`, one row group per two rows.
fn write_table(dir: &Path, price: &[i128], disc: &[i128], big: &[i128]) -> PathBuf {
    let n = price.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(15, 2), false),
        Field::new("disc", DataType::Decimal128(15, 4), false),
        Field::new("big", DataType::Decimal128(20, 6), false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from((0..n as i64).collect::<Vec<_>>())),
            decimals(price, 15, 2),
            decimals(disc, 15, 4),
            decimals(big, 20, 6),
        ],
    )
    .expect("batch");
    let path = dir.join("t.parquet");
    let props = datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(2))
        .build();
    let f = std::fs::File::create(&path).expect("create");
    let mut w = ArrowWriter::try_new(f, schema, Some(props)).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    path
}

fn build_query(dir: &Path, query: &str, fields: &[&str], threads: usize) -> BuildReport {
    let mut spec = format!(
        "version: 1\nname: d\nsources:\n  t: {{ path: t.parquet }}\nquery: \"{query}\"\nfields:\n"
    );
    for f in fields {
        spec.push_str(&format!("  {f}: {{ dtype: f64, column: {f} }}\n"));
    }
    let path = dir.join("spec.yaml");
    std::fs::write(&path, spec).expect("write spec");
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

fn column(r: &BuildReport, field: &str) -> Vec<f64> {
    let ds = Dataset::open(&r.path).expect("open");
    (0..ds.len())
        .map(|i| ds.field::<f64>(i, field).expect("field")[0])
        .collect()
}

fn nearest(text: &str) -> f64 {
    text.parse().expect("decimal text")
}

#[test]
fn a_stored_decimal_is_the_nearest_double() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // TPC-H Q1's sum_charge at scale 6, and its negative.
    write_table(
        dir,
        &[1, 2],
        &[1, 2],
        &[10_385_578_376_585_467, -10_385_578_376_585_467],
    );
    let r = build_query(dir, "SELECT big FROM t", &["big"], 1);
    let got = column(&r, "big");
    assert_eq!(
        got,
        vec![
            nearest("10385578376.585467"),
            nearest("-10385578376.585467")
        ]
    );
    // What a double division by 10^6 gives is the neighbour above.
    assert_ne!(got[0], 10_385_578_376_585_467_f64 / 1e6);
}

#[test]
fn avg_of_a_decimal_is_the_exact_average_rounded_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // price: 0.01, 0.01, 0.02 -> 0.04 / 3 = 0.01333...; DataFusion's
    // decimal AVG (scale 2 + 4) would store 0.013333.
    // disc: 0.0500, 0.0501, 0.0502 -> 0.0501 exactly; big: sums past 2^53.
    write_table(
        dir,
        &[1, 1, 2],
        &[500, 501, 503],
        &[10_385_578_376_585_467, 10_385_578_376_585_468, 1],
    );
    for threads in [1, 2] {
        let r = build_query(
            dir,
            "SELECT AVG(price) AS p, AVG(disc) AS d, AVG(big) AS b FROM t",
            &["p", "d", "b"],
            threads,
        );
        assert_eq!(
            column(&r, "p"),
            vec![nearest("0.013333333333333333333333333333333333")]
        );
        // (0.0500 + 0.0501 + 0.0503) / 3 = 0.05013333...
        assert_eq!(
            column(&r, "d"),
            vec![nearest("0.050133333333333333333333333333333333")]
        );
        // 20771156753.170936 / 3 = 6923718917.723645333...
        assert_eq!(
            column(&r, "b"),
            vec![nearest("6923718917.7236453333333333333333333333")]
        );
    }
}

#[test]
fn avg_as_a_window_function_is_exact_over_a_sliding_frame() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    write_table(dir, &[1, 2, 4, 8], &[0, 0, 0, 0], &[0, 0, 0, 0]);
    let r = build_query(
        dir,
        "SELECT id, AVG(price) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS w \
         FROM t ORDER BY id",
        &["w"],
        1,
    );
    // 0.01; 0.03/2; 0.07/3; 0.14/3.
    assert_eq!(
        column(&r, "w"),
        vec![
            0.01,
            0.015,
            nearest("0.023333333333333333333333333333333"),
            nearest("0.046666666666666666666666666666667"),
        ]
    );
}

#[test]
fn a_decimal_quotient_is_a_double_division() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    write_table(dir, &[100, 200], &[30_000, 60_000], &[0, 0]);
    let r = build_query(
        dir,
        "SELECT SUM(price) / SUM(disc) AS q, SUM(price) / 7 AS i, price / 3.5 AS f FROM t \
         GROUP BY price ORDER BY price",
        &["q", "i", "f"],
        1,
    );
    // 1.00 / 3.0000 and 2.00 / 6.0000; a decimal rule would truncate 1/3.
    assert_eq!(column(&r, "q"), vec![1.0 / 3.0, 1.0 / 3.0]);
    assert_eq!(column(&r, "i"), vec![1.0 / 7.0, 2.0 / 7.0]);
    assert_eq!(column(&r, "f"), vec![1.0 / 3.5, 2.0 / 3.5]);
}
