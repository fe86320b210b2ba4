//! The serving transform reproduces a build: the raw rows of a build's
//! input, given to `Transform::from_artifact`, give back the shard bytes
//! exactly (every transform and dtype, nulls, out-of-vocabulary values,
//! lists and binary), split by split in the build's order. The rows are read
//! by the test itself (Parquet written here, or the example data), not by
//! the build's scan.

use datafusion::arrow::array::{
    ArrayRef, BinaryArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    ListArray, StringArray, UInt16Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;
use tessera::build::{BuildOptions, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

fn opts(cache: &Path) -> BuildOptions {
    BuildOptions {
        cache_dir: Some(cache.to_path_buf()),
        threads: Some(2),
        memory_limit: None,
        progress: ProgressMode::Quiet,
        allow_empty: false,
        max_output: None,
    }
}

/// xorshift64: deterministic test data without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` rows over every input type a field reads: integers of several widths,
/// floats with nulls, NaN-free negatives and zeros, strings with nulls and a
/// long tail (values seen once fall out of a `min_count: 2` vocabulary),
/// lists of varying length with null lists, and binary values.
fn batch(n: usize, seed: u64) -> RecordBatch {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut ids = Vec::new();
    let mut small = Vec::new();
    let mut u = Vec::new();
    let mut i32s = Vec::new();
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut k = Vec::new();
    let mut lists = Vec::new();
    let mut bin = Vec::new();
    for i in 0..n {
        let a = r.next();
        ids.push(i as i64);
        small.push((a % 200) as i16 - 100);
        u.push((a >> 8) as u16 % 7);
        i32s.push(((a >> 16) % 1000) as i32 - 500);
        x.push((!a.is_multiple_of(9)).then(|| ((a >> 20) % 100_000) as f64 / 100.0 - 300.0));
        y.push((a % 11 != 1).then(|| ((a >> 24) % 1000) as f32 / 8.0));
        k.push((!a.is_multiple_of(13)).then(|| {
            if a.is_multiple_of(7) {
                format!("rare{i}")
            } else {
                format!("k{}", (a >> 32) % 30)
            }
        }));
        let len = ((a >> 40) % 6) as usize;
        lists.push((a % 10 != 5).then(|| {
            (0..len)
                .map(|j| Some((i * 10 + j) as i64 - 7))
                .collect::<Vec<_>>()
        }));
        let b = (i as u64).wrapping_mul(0x0123_4567_89AB_CDEF).to_le_bytes();
        bin.push(b[..4].to_vec());
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int16, false),
        Field::new("u", DataType::UInt16, false),
        Field::new("i", DataType::Int32, false),
        Field::new("x", DataType::Float64, true),
        Field::new("y", DataType::Float32, true),
        Field::new("k", DataType::Utf8, true),
        Field::new(
            "seq",
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
            true,
        ),
        Field::new("b", DataType::Binary, false),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(Int16Array::from(small)),
        Arc::new(UInt16Array::from(u)),
        Arc::new(Int32Array::from(i32s)),
        Arc::new(Float64Array::from(x)),
        Arc::new(Float32Array::from(y)),
        Arc::new(StringArray::from(k)),
        Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(lists)),
        Arc::new(BinaryArray::from_iter_values(bin.iter())),
    ];
    RecordBatch::try_new(schema, cols).expect("test batch")
}

fn write_parquet(path: &Path, b: &RecordBatch, group_rows: usize) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let file = std::fs::File::create(path).expect("create parquet");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let mut w = ArrowWriter::try_new(file, b.schema(), Some(props)).expect("writer");
    w.write(b).expect("write");
    w.close().expect("close");
}

/// Every dtype, every transform (alone and chained), fills, OOV, lists with
/// padding, stacked columns, binary, SQL expressions the transform crate
/// evaluates itself and one it hands to DataFusion (`abs`).
const SPEC: &str = r#"
version: 1
name: serving
sources:
  t: { path: data/*.parquet }
filter: "i > -400"
fields:
  id:    { dtype: i64, column: id }
  idu:   { dtype: u64, column: id }
  small: { dtype: i8, column: small }
  sm16:  { dtype: i16, column: small, transform: { clip: { min: -50, max: 50 } } }
  u:     { dtype: u16, column: u, transform: { one_hot: 7 } }
  uf:    { dtype: f32, column: u, transform: { one_hot: 7 } }
  u32:   { dtype: u32, column: u }
  i8u:   { dtype: u8, column: u }
  x:     { dtype: f32, column: x, fill_null: 0, transform: [ { clip: { min: 0 } }, log1p, standardize ] }
  xh:    { dtype: f16, column: x, fill_null: -1 }
  xb:    { dtype: bf16, column: x, fill_null: 2, transform: min_max }
  xd:    { dtype: f64, column: x, fill_null: 1.5, transform: standardize }
  y:     { dtype: f32, column: y, fill_null: 0, transform: log1p }
  pair:  { dtype: f32, columns: [x, y, i], fill_null: -1, transform: standardize }
  kh:    { dtype: i32, column: k, transform: { hash_bucket: 97 } }
  kv:    { dtype: i32, column: k, transform: { vocab: { min_count: 2, oov: 0 } } }
  kv64:  { dtype: i64, column: k, transform: { vocab: { max_size: 5 } } }
  seq:   { dtype: i32, column: seq, length: 4, pad: -1 }
  seqh:  { dtype: i64, column: seq, length: 3, transform: { hash_bucket: 1000 } }
  raw:   { dtype: u8, column: b, bytes: 4 }
  e1:    { dtype: f64, expr: "x * 2 + CAST(i AS DOUBLE)", fill_null: 0 }
  e2:    { dtype: f32, expr: "CAST(i > 0 AND small < 10 AS FLOAT)" }
  e3:    { dtype: i32, expr: "k || '-' || CAST(u AS VARCHAR)", transform: { vocab: { oov: 0 } } }
  e4:    { dtype: i32, expr: "abs(i)" }
split: { key: id, weights: { train: 0.7, val: 0.2, test: 0.1 } }
shards: { target_bytes: 64KiB }
"#;

/// The records of each split of `ds`, concatenated in split order.
fn split_records(ds: &Dataset) -> Vec<Vec<u8>> {
    let m = ds.manifest();
    let stride = ds.layout().stride as usize;
    m.splits
        .iter()
        .map(|s| {
            let mut out = Vec::with_capacity(s.rows as usize * stride);
            for i in s.start..s.start + s.rows {
                out.extend_from_slice(ds.record(i).expect("record"));
            }
            out
        })
        .collect()
}

/// Applies the artifact's transform to `rows` (with the filter) and sorts
/// the records into the build's splits, keeping row order within each.
fn transformed_by_split(artifact: &Path, rows: &[RecordBatch], splits: usize) -> Vec<Vec<u8>> {
    let t = tessera::serve::open(artifact).expect("open transform");
    let stride = t.layout().stride as usize;
    let mut out = vec![Vec::new(); splits];
    for b in rows {
        let enc = t.apply_filtered(b).expect("transform");
        let which = t.splits(b, true).expect("splits");
        assert_eq!(which.len(), enc.rows());
        for (r, s) in which.iter().enumerate() {
            out[*s as usize].extend_from_slice(&enc.records()[r * stride..(r + 1) * stride]);
        }
    }
    out
}

fn assert_same(built: &[Vec<u8>], served: &[Vec<u8>], stride: usize, what: &str) {
    assert_eq!(built.len(), served.len());
    for (s, (a, b)) in built.iter().zip(served).enumerate() {
        assert_eq!(
            a.len(),
            b.len(),
            "{what}: split {s} has a different row count"
        );
        if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
            panic!(
                "{what}: split {s}, record {} differs at byte {} of the record",
                i / stride,
                i % stride
            );
        }
    }
}

#[test]
fn raw_rows_reproduce_the_shards_of_a_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // Two files, cut into row groups: the build reads them in name order.
    let parts = [batch(3000, 5), batch(2000, 6)];
    let mut offset = 0i64;
    let mut parts_renumbered = Vec::new();
    for (f, p) in parts.iter().enumerate() {
        // Ids continue across files (the split key must be distinct).
        let ids = Int64Array::from_iter_values((0..p.num_rows() as i64).map(|i| i + offset));
        offset += p.num_rows() as i64;
        let mut cols = p.columns().to_vec();
        cols[0] = Arc::new(ids);
        let b = RecordBatch::try_new(p.schema(), cols).expect("batch");
        write_parquet(&root.join(format!("data/part-{f}.parquet")), &b, 700);
        parts_renumbered.push(b);
    }
    std::fs::write(root.join("spec.yaml"), SPEC).expect("spec");
    let report = build(&root.join("spec.yaml"), &opts(&root.join("cache"))).expect("build");
    let ds = Dataset::open(&report.path).expect("open");
    let built = split_records(&ds);
    let stride = ds.layout().stride as usize;
    // Something to check in every split, and values the vocabularies dropped.
    assert!(built.iter().all(|s| !s.is_empty()));
    let served = transformed_by_split(&report.path, &parts_renumbered, built.len());
    assert_same(&built, &served, stride, "generated data");

    // Cut differently (single rows, odd batches): the same bytes.
    let whole = datafusion::arrow::compute::concat_batches(
        &parts_renumbered[0].schema(),
        &parts_renumbered,
    )
    .expect("concat");
    let mut cuts = Vec::new();
    let mut at = 0;
    for len in [1usize, 1, 2, 3, 1000, 17, 4096] {
        let len = len.min(whole.num_rows() - at);
        cuts.push(whole.slice(at, len));
        at += len;
    }
    cuts.push(whole.slice(at, whole.num_rows() - at));
    let served = transformed_by_split(&report.path, &cuts, built.len());
    assert_same(&built, &served, stride, "generated data, other batches");

    // Out of vocabulary and unseen values: the frozen statistics apply, not
    // new ones (a row of values the build never saw encodes without error).
    let t = tessera::serve::open(&report.path).expect("open");
    let one = batch(1, 99);
    let enc = t.apply(&one).expect("one row");
    assert_eq!(enc.rows(), 1);
    assert_eq!(enc.records().len(), stride);
}

#[test]
fn a_missing_column_and_an_unfilled_null_are_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write_parquet(&root.join("data/p.parquet"), &batch(500, 3), 500);
    std::fs::write(root.join("spec.yaml"), SPEC).expect("spec");
    let report = build(&root.join("spec.yaml"), &opts(&root.join("cache"))).expect("build");
    let t = tessera::serve::open(&report.path).expect("open");
    let b = batch(10, 4);
    let without_x = b.project(&[0, 1, 2, 3, 5, 6, 7, 8]).expect("project");
    let e = t.apply(&without_x).expect_err("x is missing").to_string();
    assert!(e.contains("\"x\"") || e.contains("x"), "{e}");
    // `small` has no fill_null: a null there is an error naming the field.
    let mut cols = b.columns().to_vec();
    cols[1] = Arc::new(Int16Array::from(vec![
        Some(1i16),
        None,
        Some(3),
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ]));
    let fields: Vec<Field> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let nulls = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("batch");
    let e = t.apply(&nulls).expect_err("null in small").to_string();
    assert!(e.contains("small"), "{e}");
}

/// A CSV like the GUIDE's: `NA` and empty fields for missing values, a
/// label (`arr_delay`) a service does not have, and COALESCE in the fields.
fn na_csv(n: usize) -> String {
    let mut text = String::from("id,origin,sex,dep_delay,distance,arr_delay\n");
    for i in 0..n {
        let origin = ["JFK", "LGA", "EWR"][i % 3];
        let sex = match i {
            _ if i % 5 == 0 => "NA".to_string(),
            _ if i % 7 == 0 => String::new(),
            _ => ["MALE", "FEMALE"][i % 2].to_string(),
        };
        let dep = match i {
            _ if i % 6 == 0 => "NA".to_string(),
            _ if i % 11 == 0 => String::new(),
            _ => format!("{}", (i * 37 % 200) as f64 / 4.0 - 10.0),
        };
        let distance = if i % 4 == 0 {
            "NA".to_string()
        } else {
            (i * 3).to_string()
        };
        let arr = if i % 9 == 0 {
            "NA".to_string()
        } else {
            (i as i64 * 13 % 90 - 20).to_string()
        };
        text.push_str(&format!("{i},{origin},{sex},{dep},{distance},{arr}\n"));
    }
    text
}

const NA_SPEC: &str = r#"
version: 1
name: na-csv
sources:
  t: { path: rows.csv, null_values: [NA] }
filter: arr_delay IS NOT NULL
fields:
  delay:  { dtype: f32, column: dep_delay, fill_null: 0, transform: standardize }
  route:  { dtype: i64, expr: "origin || '/' || COALESCE(sex, '?')", transform: { hash_bucket: 64 } }
  fill:   { dtype: f64, expr: "COALESCE(dep_delay, distance, -1.0)" }
  origin: { dtype: i32, column: origin, transform: vocab }
  label:  { dtype: f32, expr: "CAST(arr_delay > 15 AS FLOAT)" }
"#;

/// The bytes of field `name` of each record in `recs` (records of `layout`).
fn field_bytes(layout: &tessera_reader::RecordLayout, recs: &[u8], name: &str) -> Vec<Vec<u8>> {
    let f = layout.field(name).expect("field in layout");
    let (off, size) = (f.offset as usize, f.size() as usize);
    recs.chunks(layout.stride as usize)
        .map(|r| r[off..off + size].to_vec())
        .collect()
}

fn build_na_csv(root: &Path) -> (std::path::PathBuf, Vec<u8>) {
    std::fs::write(root.join("rows.csv"), na_csv(400)).expect("csv");
    std::fs::write(root.join("spec.yaml"), NA_SPEC).expect("spec");
    let report = build(&root.join("spec.yaml"), &opts(&root.join("cache"))).expect("build");
    let ds = Dataset::open(&report.path).expect("open");
    let built: Vec<u8> = (0..ds.len())
        .flat_map(|i| ds.record(i).expect("record").to_vec())
        .collect();
    // The filter keeps the rows with a label (every ninth has none).
    assert_eq!(ds.len(), (0..400).filter(|i| i % 9 != 0).count() as u64);
    (report.path, built)
}

#[test]
fn a_csv_with_na_through_tessera_transform_gives_the_build_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (artifact, built) = build_na_csv(root);
    let out = root.join("served.bin");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("transform")
        .arg(&artifact)
        .arg(root.join("rows.csv"))
        .arg("-o")
        .arg(&out)
        .args(["--filter", "--json"])
        .output()
        .expect("run tessera transform");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    // COALESCE and the rest ran in the transform crate, not in DataFusion.
    assert_eq!(report["datafusion"], serde_json::json!([]), "{report}");
    let served = std::fs::read(&out).expect("records");
    assert_eq!(served.len(), built.len());
    assert!(
        served == built,
        "tessera transform of the CSV differs from the build"
    );
}

#[test]
fn coalesce_is_evaluated_natively_as_the_build_did() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (artifact, built) = build_na_csv(root);
    // No engine: every expression must be native.
    let t = tessera_transform::Transform::from_artifact(&artifact).expect("open");
    assert!(t.needs_engine().is_empty(), "{:?}", t.needs_engine());
    let csv = tessera::serve::input_csv_options(&artifact).expect("csv options");
    let rows = tessera::plan::rows::read_rows(&root.join("rows.csv"), 64, &csv).expect("rows");
    let mut served = Vec::new();
    for b in &rows {
        served.extend_from_slice(t.apply_filtered(b).expect("transform").records());
    }
    let layout = t.layout();
    for f in ["route", "fill"] {
        assert_eq!(
            field_bytes(layout, &served, f),
            field_bytes(layout, &built, f),
            "field {f}"
        );
    }
    assert!(served == built);
    // The COALESCE values themselves, from the CSV text: dep_delay, else
    // distance, else -1.
    let ds = Dataset::open(&artifact).expect("open");
    let expect: Vec<f64> = na_csv(400)
        .lines()
        .skip(1)
        .filter(|l| !l.ends_with(",NA"))
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            let num =
                |s: &str| (s != "NA" && !s.is_empty()).then(|| s.parse::<f64>().expect("num"));
            num(c[3]).or(num(c[4])).unwrap_or(-1.0)
        })
        .collect();
    let got: Vec<f64> = (0..ds.len())
        .map(|i| ds.field::<f64>(i, "fill").expect("fill")[0])
        .collect();
    assert_eq!(got, expect);
}

#[test]
fn some_fields_serve_rows_without_the_label() {
    use datafusion::arrow::compute::{filter_record_batch, is_not_null};
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (artifact, built) = build_na_csv(root);
    let t = tessera::serve::open(&artifact).expect("open");
    let csv = tessera::serve::input_csv_options(&artifact).expect("csv options");
    let rows = tessera::plan::rows::read_rows(&root.join("rows.csv"), 1 << 16, &csv).expect("rows");
    let all = datafusion::arrow::compute::concat_batches(&rows[0].schema(), &rows).expect("concat");
    // The rows the build kept, without the label column.
    let label = all.schema().index_of("arr_delay").expect("arr_delay");
    let keep = is_not_null(all.column(label)).expect("mask");
    let kept = filter_record_batch(&all, &keep).expect("filter");
    let features: Vec<usize> = (0..kept.num_columns()).filter(|&c| c != label).collect();
    let no_label = kept.project(&features).expect("project");

    let names = ["delay", "route", "fill", "origin"];
    let sub = t.with_fields(&names).expect("subset");
    assert_eq!(
        sub.layout()
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        names
    );
    let enc = sub.apply(&no_label).expect("served without the label");
    for f in names {
        assert_eq!(
            field_bytes(sub.layout(), enc.records(), f),
            field_bytes(t.layout(), &built, f),
            "field {f}"
        );
    }
    // The label's input is absent: the error names the field and the column.
    let e = t
        .with_fields(&["delay", "label"])
        .expect("subset")
        .apply(&no_label)
        .expect_err("no arr_delay")
        .to_string();
    assert!(
        e.contains("fields.label") && e.contains("\"arr_delay\""),
        "{e}"
    );
    // So does the whole transform; and an unknown name lists the fields.
    let e = t.apply(&no_label).expect_err("no arr_delay").to_string();
    assert!(
        e.contains("fields.label") && e.contains("\"arr_delay\""),
        "{e}"
    );
    let e = t
        .with_fields(&["delay", "nope"])
        .expect_err("nope")
        .to_string();
    assert!(
        e.contains("\"nope\"") && e.contains("delay, route, fill, origin, label"),
        "{e}"
    );

    // The CLI: --fields over a CSV without the label column.
    let text: String = na_csv(400)
        .lines()
        .enumerate()
        .filter(|(i, l)| *i == 0 || !l.ends_with(",NA"))
        .map(|(_, l)| format!("{}\n", &l[..l.rfind(',').expect("comma")]))
        .collect();
    std::fs::write(root.join("features.csv"), text).expect("features");
    let out = root.join("features.bin");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("transform")
        .arg(&artifact)
        .arg(root.join("features.csv"))
        .arg("-o")
        .arg(&out)
        .args(["--fields", "delay,route,fill,origin"])
        .output()
        .expect("run tessera transform");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).expect("records") == enc.records());
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("transform")
        .arg(&artifact)
        .arg(root.join("features.csv"))
        .arg("-o")
        .arg(root.join("all.bin"))
        .output()
        .expect("run tessera transform");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("fields.label") && stderr.contains("arr_delay"),
        "{stderr}"
    );
}
