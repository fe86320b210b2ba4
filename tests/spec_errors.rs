//! Malformed specs: each must fail with the right key path, line and message,
//! before any data is read.

use std::fs;
use std::path::Path;
use tessera::spec::{Spec, SpecError};

/// Joins lines with '\n', so the spec's line numbers are the slice's indices + 1.
fn text(lines: &[&str]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

fn parse_err(lines: &[&str]) -> SpecError {
    match Spec::parse(&text(lines), Path::new("specs/x.yaml")) {
        Ok(spec) => panic!("expected an error, the spec parsed: {spec:?}"),
        Err(e) => e,
    }
}

/// Asserts the error's key path, line and a fragment of its message.
#[track_caller]
fn check(err: &SpecError, key: &str, line: Option<usize>, fragment: &str) {
    assert_eq!(err.file(), Path::new("specs/x.yaml"), "{err}");
    assert_eq!(err.key(), key, "{err}");
    assert_eq!(err.line(), line, "{err}");
    assert!(
        err.message().contains(fragment),
        "message {:?} lacks {fragment:?}",
        err.message()
    );
    let shown = err.to_string();
    let prefix = match line {
        Some(l) => format!("specs/x.yaml:{l}: "),
        None => "specs/x.yaml: ".to_string(),
    };
    assert!(shown.starts_with(&prefix), "{shown}");
}

/// The smallest valid spec, for variations.
const VALID: &[&str] = &[
    "version: 1",
    "name: t",
    "sources:",
    "  t: { path: t.parquet }",
    "fields:",
    "  x: { dtype: f32, column: x }",
];

#[test]
fn the_base_spec_is_valid() {
    Spec::parse(&text(VALID), Path::new("specs/x.yaml")).expect("valid");
}

#[test]
fn unknown_top_level_key() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources:",
        "  t: { path: t.parquet }",
        "fileds:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(
        &err,
        "fileds",
        Some(5),
        "unknown key \"fileds\" (did you mean \"fields\"?)",
    );
}

#[test]
fn unknown_key_without_a_close_match_lists_the_keys() {
    let mut lines = VALID.to_vec();
    lines.push("colour: blue");
    let err = parse_err(&lines);
    check(
        &err,
        "colour",
        Some(7),
        "expected one of: version, name, sources",
    );
}

#[test]
fn unknown_field_key() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtpye: f32",
        "    column: x",
    ]);
    check(&err, "fields.x.dtpye", Some(6), "(did you mean \"dtype\"?)");
}

#[test]
fn bad_dtype() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f3, column: x }",
    ]);
    check(
        &err,
        "fields.x.dtype",
        Some(5),
        "unknown dtype \"f3\" (did you mean \"f32\"?)",
    );
}

#[test]
fn missing_dtype_points_at_the_field() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    column: x",
    ]);
    check(
        &err,
        "fields.x.dtype",
        Some(5),
        "missing required key \"dtype\" in fields.x",
    );
}

#[test]
fn both_column_and_expr() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtype: f32",
        "    column: x",
        "    expr: x + 1",
    ]);
    check(
        &err,
        "fields.x.expr",
        Some(8),
        "column and expr cannot both be given",
    );
}

#[test]
fn neither_column_nor_expr() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32 }",
    ]);
    check(
        &err,
        "fields.x",
        Some(5),
        "needs exactly one of column, columns, expr or length_of",
    );
}

#[test]
fn transform_typo() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  dense: { dtype: f32, columns: [a, b], transform: standardise }",
    ]);
    check(&err, "fields.dense.transform", Some(5), "unknown transform");
    assert_eq!(
        err.to_string(),
        "specs/x.yaml:5: fields.dense.transform: unknown transform \"standardise\" (did you mean \"standardize\"?)"
    );
}

#[test]
fn transform_typo_inside_a_list_and_a_mapping() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtype: i32",
        "    column: c",
        "    transform:",
        "      - hash_buckets: 10",
    ]);
    check(
        &err,
        "fields.x.transform[0].hash_buckets",
        Some(9),
        "(did you mean \"hash_bucket\"?)",
    );
}

#[test]
fn hash_bucket_zero() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  c: { dtype: i32, column: c, transform: { hash_bucket: 0 } }",
    ]);
    check(
        &err,
        "fields.c.transform.hash_bucket",
        Some(5),
        "needs a bucket count from 1 to 18446744073709551615, found the integer 0",
    );
}

#[test]
fn hash_bucket_too_large_for_dtype() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  c: { dtype: i8, column: c, transform: { hash_bucket: 1000 } }",
    ]);
    check(
        &err,
        "fields.c.transform",
        Some(5),
        "ids up to 999, which do not fit dtype i8",
    );
}

#[test]
fn clip_without_bounds() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtype: f32",
        "    column: x",
        "    transform:",
        "      - clip: {}",
        "      - log1p",
    ]);
    check(
        &err,
        "fields.x.transform[0].clip",
        Some(9),
        "clip needs min, max or both",
    );
}

#[test]
fn clip_bound_of_the_wrong_type() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtype: f32",
        "    column: x",
        "    transform:",
        "      - log1p",
        "      - clip:",
        "          max: 10",
        "          min: low",
    ]);
    check(
        &err,
        "fields.x.transform[1].clip.min",
        Some(12),
        "expected a number, found the string \"low\"",
    );
}

#[test]
fn standardize_on_an_integer_dtype() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: i32, column: x, transform: [log1p, standardize] }",
    ]);
    // log1p is the first offender.
    check(
        &err,
        "fields.x.transform[0]",
        Some(5),
        "log1p produces floats and needs a float dtype",
    );
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtype: i32",
        "    column: x",
        "    transform: standardize",
    ]);
    check(
        &err,
        "fields.x.transform",
        Some(8),
        "needs a float dtype (f16, bf16, f32, f64), this field is i32",
    );
}

#[test]
fn vocab_after_log1p() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x:",
        "    dtype: i32",
        "    column: x",
        "    transform:",
        "      - log1p",
        "      - vocab",
    ]);
    check(
        &err,
        "fields.x.transform[1]",
        Some(10),
        "vocab must be the first transform",
    );
}

#[test]
fn one_hot_must_be_last_and_take_ids() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32, column: x, transform: [{ hash_bucket: 8 }, { one_hot: 8 }, { clip: { max: 1 } }] }",
    ]);
    check(
        &err,
        "fields.x.transform[1]",
        Some(5),
        "one_hot must be the last transform",
    );
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32, column: x, transform: [{ hash_bucket: 8 }, { one_hot: 4 }] }",
    ]);
    check(
        &err,
        "fields.x.transform[1]",
        Some(5),
        "use at least 8 classes",
    );
}

#[test]
fn several_keys_in_one_transform() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32, column: x, transform: { clip: { min: 0 }, log1p: {} } }",
    ]);
    check(
        &err,
        "fields.x.transform",
        Some(5),
        "write several transforms as a list",
    );
}

#[test]
fn bytes_needs_u8_and_no_transforms() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  img: { dtype: f32, column: img, bytes: 3072 }",
    ]);
    check(
        &err,
        "fields.img.bytes",
        Some(5),
        "bytes needs dtype u8, this field is f32",
    );
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  img: { dtype: u8, column: img, bytes: 3072, transform: min_max }",
    ]);
    check(&err, "fields.img.transform", Some(5), "takes no transforms");
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  img: { dtype: u8, column: img, bytes: 4,",
        "         fill_null: 0 }",
    ]);
    check(
        &err,
        "fields.img.fill_null",
        Some(6),
        "fill_null does not apply to a bytes field",
    );
}

#[test]
fn length_with_columns() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32, columns: [a, b], length: 4 }",
    ]);
    check(
        &err,
        "fields.x.length",
        Some(5),
        "cannot be combined with columns",
    );
}

#[test]
fn fill_null_out_of_range() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: u8, column: x, fill_null: 300 }",
    ]);
    check(
        &err,
        "fields.x.fill_null",
        Some(5),
        "fill_null 300 cannot be stored as u8",
    );
}

#[test]
fn duplicate_field_name() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32, column: x }",
        "  y: { dtype: f32, column: y }",
        "  x: { dtype: f32, column: z }",
    ]);
    check(
        &err,
        "fields.x",
        Some(7),
        "duplicate key \"x\" (first on line 5)",
    );
}

#[test]
fn field_name_not_an_identifier() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  2x: { dtype: f32, column: x }",
    ]);
    check(&err, "fields.2x", Some(5), "is not an identifier");
}

#[test]
fn split_weights_empty() {
    let mut lines = VALID.to_vec();
    lines.extend(["split:", "  key: id", "  weights: {}"]);
    let err = parse_err(&lines);
    check(&err, "split.weights", Some(9), "needs at least one split");
}

#[test]
fn split_weight_negative() {
    let mut lines = VALID.to_vec();
    lines.extend([
        "split:",
        "  key: id",
        "  weights:",
        "    train: 0.9",
        "    val: -0.1",
    ]);
    let err = parse_err(&lines);
    check(
        &err,
        "split.weights.val",
        Some(11),
        "split weight must be positive, found -0.1",
    );
}

#[test]
fn split_stats_from_unknown() {
    let mut lines = VALID.to_vec();
    lines.push("split: { key: id, weights: { train: 9, val: 1 }, stats_from: trian }");
    let err = parse_err(&lines);
    check(
        &err,
        "split.stats_from",
        Some(7),
        "(did you mean \"train\"?)",
    );
}

#[test]
fn shard_size_unparsable() {
    let mut lines = VALID.to_vec();
    lines.extend(["shards:", "  target_bytes: 64 megs"]);
    let err = parse_err(&lines);
    check(
        &err,
        "shards.target_bytes",
        Some(8),
        "cannot read \"64 megs\" as a size",
    );
}

#[test]
fn shard_size_too_small() {
    let mut lines = VALID.to_vec();
    lines.push("shards: { target_bytes: 4KiB }");
    let err = parse_err(&lines);
    check(&err, "shards.target_bytes", Some(7), "at least 64KiB");
}

#[test]
fn zstd_level_out_of_range() {
    let mut lines = VALID.to_vec();
    lines.push("shards: { compression: zstd, level: 30 }");
    let err = parse_err(&lines);
    check(
        &err,
        "shards.level",
        Some(7),
        "zstd level 30 is not in 1..=22",
    );
}

#[test]
fn level_without_zstd() {
    let mut lines = VALID.to_vec();
    lines.push("shards: { level: 5 }");
    let err = parse_err(&lines);
    check(
        &err,
        "shards.level",
        Some(7),
        "level applies only to compression: zstd",
    );
}

#[test]
fn unknown_compression() {
    let mut lines = VALID.to_vec();
    lines.push("shards: { compression: lz4 }");
    let err = parse_err(&lines);
    check(
        &err,
        "shards.compression",
        Some(7),
        "unknown compression \"lz4\"; use none or zstd",
    );
}

#[test]
fn missing_sources() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(
        &err,
        "sources",
        None,
        "missing required key \"sources\" in the spec",
    );
    assert_eq!(
        err.to_string(),
        "specs/x.yaml: sources: missing required key \"sources\" in the spec"
    );
}

#[test]
fn no_query_with_two_sources() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources:",
        "  a: { path: a.parquet }",
        "  b: { path: b.parquet }",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(&err, "query", None, "2 sources (a, b) and no query");
}

#[test]
fn bad_version() {
    let mut lines = VALID.to_vec();
    lines[0] = "version: 2";
    // An unknown key too: the version is reported first.
    lines.push("something_new: true");
    let err = parse_err(&lines);
    check(
        &err,
        "version",
        Some(1),
        "unsupported spec version 2; this tessera reads version 1",
    );

    lines[0] = "version: \"1\"";
    let err = parse_err(&lines);
    check(
        &err,
        "version",
        Some(1),
        "expected an integer, found the string \"1\"",
    );
}

#[test]
fn missing_version() {
    let err = parse_err(&VALID[1..]);
    check(&err, "version", None, "missing required key \"version\"");
}

#[test]
fn bad_name() {
    let mut lines = VALID.to_vec();
    lines[1] = "name: my dataset";
    let err = parse_err(&lines);
    check(&err, "name", Some(2), "may use only letters, digits");
}

#[test]
fn source_names_must_be_lower_case_identifiers() {
    let mut lines = VALID.to_vec();
    lines[3] = "  Flights: { path: t.parquet }";
    let err = parse_err(&lines);
    check(&err, "sources.Flights", Some(4), "must be lower case");
    lines[3] = "  my-flights: { path: t.parquet }";
    let err = parse_err(&lines);
    check(
        &err,
        "sources.my-flights",
        Some(4),
        "is not a SQL identifier",
    );
    lines[3] = "  order: { path: t.parquet }";
    let err = parse_err(&lines);
    check(&err, "sources.order", Some(4), "is a SQL keyword");
}

#[test]
fn unknown_format() {
    let mut lines = VALID.to_vec();
    lines[3] = "  t: { path: t.data, format: parquett }";
    let err = parse_err(&lines);
    check(
        &err,
        "sources.t.format",
        Some(4),
        "unknown format \"parquett\" (did you mean \"parquet\"?)",
    );
}

#[test]
fn csv_options_on_a_parquet_source() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources:",
        "  t:",
        "    path: t.parquet",
        "    null_values: [NA]",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(
        &err,
        "sources.t.null_values",
        Some(6),
        "applies to csv sources only; this source reads parquet",
    );
}

#[test]
fn bad_csv_options() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources:",
        "  t: { path: t.csv, delimiter: ';;' }",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(
        &err,
        "sources.t.delimiter",
        Some(4),
        "must be a single ASCII character",
    );
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources:",
        "  t: { path: t.csv, header: yes }",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(
        &err,
        "sources.t.header",
        Some(4),
        "expected true or false, found the string \"yes\"",
    );
}

#[test]
fn two_chunk_sources() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources:",
        "  a: { path: a.parquet, chunk: true }",
        "  b:",
        "    path: b.parquet",
        "    chunk: true",
        "query: SELECT * FROM a JOIN b USING (k)",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    check(
        &err,
        "sources.b.chunk",
        Some(7),
        "only one source may be marked chunk: true (sources.a already is)",
    );
}

#[test]
fn column_name_must_be_a_string() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet } }",
        "fields:",
        "  x: { dtype: f32, columns: [a, 2020] }",
    ]);
    check(&err, "fields.x.columns[1]", Some(5), "put it in quotes");
}

#[test]
fn yaml_syntax_error() {
    let err = parse_err(&[
        "version: 1",
        "name: t",
        "sources: { t: { path: t.parquet }",
        "fields:",
        "  x: { dtype: f32, column: x }",
    ]);
    assert!(matches!(err, SpecError::Syntax { .. }), "{err:?}");
    assert_eq!(err.key(), "");
    assert!(err.line().is_some(), "{err}");
    assert!(err.to_string().starts_with("specs/x.yaml:"), "{err}");
    assert!(err.to_string().contains("YAML syntax"), "{err}");
}

#[test]
fn not_a_mapping_and_empty() {
    let err = parse_err(&["- a", "- b"]);
    check(&err, "", Some(1), "a spec is a mapping of keys");
    let err = parse_err(&["# nothing here"]);
    check(&err, "", None, "the spec is empty");
}

// ---- errors that need the filesystem ----

fn write_spec(dir: &Path, body: &[&str]) -> std::path::PathBuf {
    let specs = dir.join("specs");
    fs::create_dir_all(&specs).expect("mkdir");
    let path = specs.join("x.yaml");
    fs::write(&path, text(body)).expect("write spec");
    path
}

#[test]
fn glob_matching_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(dir.path().join("data")).expect("mkdir");
    fs::write(dir.path().join("data/a.csv"), "x\n1\n").expect("write");
    let path = write_spec(
        dir.path(),
        &[
            "version: 1",
            "name: t",
            "sources:",
            "  t:",
            "    path: ../data/*.parquet",
            "fields:",
            "  x: { dtype: f32, column: x }",
        ],
    );
    let err = Spec::load(&path).expect_err("nothing matches");
    assert!(matches!(err, SpecError::Files { .. }), "{err:?}");
    assert_eq!(err.key(), "sources.t.path");
    assert_eq!(err.line(), Some(5));
    assert!(
        err.message()
            .contains("\"../data/*.parquet\" matches no parquet files"),
        "{err}"
    );
    assert_eq!(err.file(), path.as_path());
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_spec(dir.path(), VALID);
    let err = Spec::load(&path).expect_err("t.parquet does not exist");
    assert_eq!(err.key(), "sources.t.path");
    assert_eq!(err.line(), Some(4));
    assert!(err.message().contains("no such file or directory"), "{err}");
}

#[test]
fn missing_spec_file() {
    let err = Spec::load(Path::new("/nonexistent/spec.yaml")).expect_err("no file");
    assert!(matches!(err, SpecError::Read { .. }), "{err:?}");
    assert_eq!(err.line(), None);
    assert!(
        err.to_string()
            .starts_with("/nonexistent/spec.yaml: cannot read the spec"),
        "{err}"
    );
}

#[test]
fn directory_with_mixed_formats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("specs/mixed");
    fs::create_dir_all(&data).expect("mkdir");
    fs::write(data.join("a.csv"), "x\n1\n").expect("write");
    fs::write(data.join("b.parquet"), "").expect("write");
    let path = write_spec(
        dir.path(),
        &[
            "version: 1",
            "name: t",
            "sources: { t: { path: mixed } }",
            "fields:",
            "  x: { dtype: f32, column: x }",
        ],
    );
    let err = Spec::load(&path).expect_err("mixed formats");
    assert_eq!(err.key(), "sources.t.path");
    assert_eq!(err.line(), Some(3));
    assert!(err.message().contains("mixed formats"), "{err}");
}

#[test]
fn inconsistent_hive_partitions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("specs/events");
    fs::create_dir_all(data.join("year=2020")).expect("mkdir");
    fs::create_dir_all(data.join("month=1")).expect("mkdir");
    fs::write(data.join("year=2020/a.parquet"), "").expect("write");
    fs::write(data.join("month=1/b.parquet"), "").expect("write");
    let path = write_spec(
        dir.path(),
        &[
            "version: 1",
            "name: t",
            "sources: { t: { path: events } }",
            "fields:",
            "  x: { dtype: f32, column: x }",
        ],
    );
    let err = Spec::load(&path).expect_err("inconsistent partitions");
    assert_eq!(err.key(), "sources.t.path");
    assert!(
        err.message().contains("inconsistent partition folders"),
        "{err}"
    );
}

#[test]
fn csv_options_on_a_directory_that_turns_out_parquet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("specs/events");
    fs::create_dir_all(&data).expect("mkdir");
    fs::write(data.join("a.parquet"), "").expect("write");
    let path = write_spec(
        dir.path(),
        &[
            "version: 1",
            "name: t",
            "sources:",
            "  t:",
            "    path: events",
            "    delimiter: \";\"",
            "fields:",
            "  x: { dtype: f32, column: x }",
        ],
    );
    let err = Spec::load(&path).expect_err("csv option on parquet files");
    assert_eq!(err.key(), "sources.t.delimiter");
    assert_eq!(err.line(), Some(6));
    assert!(err.message().contains("csv sources only"), "{err}");
}

#[test]
fn damaged_specs_give_errors_not_panics() {
    // Every spec in specs/, with one character deleted or replaced at many
    // positions: parsing must return (Ok or Err), never panic, and every
    // error must render with the file name.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
    for name in ["criteo.yaml", "flights.yaml"] {
        let original = fs::read_to_string(dir.join(name)).expect("read example spec");
        let chars: Vec<char> = original.chars().collect();
        for i in (0..chars.len()).step_by(11) {
            for replacement in [None, Some(':'), Some('{'), Some('"')] {
                let mut damaged = chars.clone();
                match replacement {
                    None => {
                        damaged.remove(i);
                    }
                    Some(c) => damaged[i] = c,
                }
                let text: String = damaged.into_iter().collect();
                if let Err(e) = Spec::parse(&text, Path::new("specs/x.yaml")) {
                    assert!(e.to_string().starts_with("specs/x.yaml"), "{e}");
                }
            }
        }
    }
}

#[test]
fn more_than_256_splits_are_refused_when_read() {
    let weights: Vec<String> = (0..257).map(|i| format!("s{i}: 1")).collect();
    let line = format!("split: {{ key: x, weights: {{ {} }} }}", weights.join(", "));
    let mut lines = VALID.to_vec();
    lines.push(&line);
    let err = parse_err(&lines);
    check(&err, "split.weights", Some(7), "at most 256");
    // 256 splits are fine.
    let weights: Vec<String> = (0..256).map(|i| format!("s{i}: 1")).collect();
    let line = format!("split: {{ key: x, weights: {{ {} }} }}", weights.join(", "));
    let mut lines = VALID.to_vec();
    lines.push(&line);
    Spec::parse(&text(&lines), Path::new("specs/x.yaml")).expect("256 splits");
}

#[test]
fn chunks_and_nonfinite_keys() {
    let mut lines = VALID.to_vec();
    lines.push("chunks: { target_bytes: 1KiB }");
    check(
        &parse_err(&lines),
        "chunks.target_bytes",
        Some(7),
        "at least 4KiB",
    );
    let mut lines = VALID.to_vec();
    lines.push("chunks: { target_bytes: -5 }");
    check(
        &parse_err(&lines),
        "chunks.target_bytes",
        Some(7),
        "cannot be negative",
    );
    let lines = [
        "version: 1",
        "name: t",
        "sources:",
        "  t: { path: t.parquet }",
        "fields:",
        "  x: { dtype: f32, column: x, nonfinite: exclude }",
    ];
    check(
        &parse_err(&lines),
        "fields.x.nonfinite",
        Some(6),
        "standardize or min_max",
    );
    let lines = [
        "version: 1",
        "name: t",
        "sources:",
        "  t: { path: t.parquet }",
        "fields:",
        "  x: { dtype: f32, column: x, transform: standardize, nonfinite: skip }",
    ];
    check(
        &parse_err(&lines),
        "fields.x.nonfinite",
        Some(6),
        "unknown nonfinite policy",
    );
}
