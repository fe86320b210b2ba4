//! Shared helpers for the compiler's integration tests: data the tests make
//! themselves, and a runner for the built `tessera` binary.

#![allow(dead_code)]

use datafusion::arrow::array::{
    ArrayRef, BinaryArray, Float64Array, Int32Array, Int64Array, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

/// One generated row of the test table.
#[derive(Clone, Debug)]
pub struct Row {
    pub id: i64,
    pub day: i32,
    pub x: Option<f64>,
    pub k: Option<String>,
    pub n: i32,
}

/// Deterministic rows: `day` increases with `id` (so row groups sorted by day
/// can be pruned), `x` has nulls and negatives, `k` has a skewed vocabulary.
pub fn rows(count: usize, seed: u64) -> Vec<Row> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..count)
        .map(|i| {
            let r = next();
            Row {
                id: i as i64,
                day: (i * 30 / count.max(1)) as i32,
                x: (r % 10 != 0).then(|| ((r >> 8) % 10_000) as f64 / 10.0 - 20.0),
                k: (r % 17 != 3).then(|| format!("k{}", ((r >> 20) % 40) * ((r >> 30) % 3))),
                n: ((r >> 40) % 5) as i32,
            }
        })
        .collect()
}

/// The 4-byte binary value stored for a row (its id, little-endian, cut).
pub fn raw_bytes(id: i64) -> [u8; 4] {
    let b = id.to_le_bytes();
    [b[0], b[1], b[2], b[3]]
}

fn batch(rows: &[Row]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("day", DataType::Int32, false),
        Field::new("x", DataType::Float64, true),
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int32, false),
        Field::new("b", DataType::Binary, false),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.id))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.day))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.x))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.k.clone()))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.n))),
        Arc::new(BinaryArray::from_iter_values(
            rows.iter().map(|r| raw_bytes(r.id)),
        )),
    ];
    RecordBatch::try_new(schema, cols).expect("test batch")
}

/// Writes `rows` as `files` Parquet files of row groups of `group_rows`.
pub fn write_parquet(dir: &Path, rows: &[Row], files: usize, group_rows: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).expect("data dir");
    let per = rows.len().div_ceil(files);
    let mut out = Vec::new();
    for (f, part) in rows.chunks(per).enumerate() {
        let path = dir.join(format!("part-{f:03}.parquet"));
        let file = std::fs::File::create(&path).expect("create parquet");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let b = batch(part);
        let mut w = ArrowWriter::try_new(file, b.schema(), Some(props)).expect("writer");
        w.write(&b).expect("write");
        w.close().expect("close");
        out.push(path);
    }
    out
}

/// The `tessera` binary built by cargo for these tests.
pub fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

/// Runs the binary, returning its output.
pub fn run(args: &[&str]) -> Output {
    tessera().args(args).output().expect("run tessera")
}

/// Stdout as a string.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as a string.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The documented split/bucket hash (FNV-1a 64, then the SplitMix64
/// finalizer), written again here so tests check the compiler against it.
pub fn fnv_splitmix(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d049bb133111eb);
    h ^ (h >> 31)
}

/// Where a key's hash falls in `[0, 1)`, as splits use it.
pub fn split_point(key: &str) -> f64 {
    (fnv_splitmix(key.as_bytes()) >> 11) as f64 / (1u64 << 53) as f64
}
