//! Unit tests of parsing and the canonical form. Malformed specs, one error
//! each, are in tests/spec_errors.rs; the example specs in tests/spec_examples.rs.

use super::*;
use serde_json::Value;
use tessera_reader::DType;

const BASE: &str = r#"
version: 1
name: demo
sources:
  events: { path: data/*.parquet }
  users: { path: users.csv, null_values: [NA, ""] }
query: SELECT * FROM events e JOIN users u USING (user_id)
filter: "x > 0"
fields:
  dense: { dtype: f32, columns: [a, b], fill_null: 0, transform: [{ clip: { min: 0 } }, log1p, standardize] }
  cat: { dtype: i32, column: c, transform: { hash_bucket: 100 } }
  label: { dtype: f32, expr: "CAST(y AS FLOAT)" }
split: { key: user_id, weights: { train: 0.9, val: 0.1 } }
order: { shuffle_seed: 7 }
shards: { target_bytes: 1MiB, compression: none }
"#;

fn parse(text: &str) -> Spec {
    match Spec::parse(text, Path::new("specs/t.yaml")) {
        Ok(spec) => spec,
        Err(e) => panic!("expected a valid spec, got: {e}"),
    }
}

fn canonical(text: &str) -> String {
    parse(text).canonical_json().to_string()
}

#[test]
fn parses_every_section() {
    let spec = parse(BASE);
    assert_eq!(spec.version, 1);
    assert_eq!(spec.name, "demo");
    assert_eq!(spec.sources.len(), 2);
    assert_eq!(spec.sources[0].name, "events");
    assert_eq!(spec.sources[0].format, SourceFormat::Parquet);
    assert!(!spec.sources[0].format_from_files);
    assert_eq!(spec.sources[1].format, SourceFormat::Csv);
    assert_eq!(spec.sources[1].csv.null_values, ["NA", ""]);
    assert!(spec.sources[1].csv.header);
    assert_eq!(spec.sources[1].csv.delimiter, b',');
    assert!(spec.filter.as_deref() == Some("x > 0"));
    let names: Vec<&str> = spec.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["dense", "cat", "label"]);
    let dense = spec.field("dense").expect("dense");
    assert_eq!(dense.dtype, DType::F32);
    assert_eq!(
        dense.input,
        FieldInput::Columns(vec!["a".into(), "b".into()])
    );
    assert_eq!(dense.fill_null, Some(0.0));
    assert_eq!(
        dense.transforms,
        [
            Transform::Clip {
                min: Some(0.0),
                max: None
            },
            Transform::Log1p,
            Transform::Standardize
        ]
    );
    assert_eq!(dense.shape(), [2]);
    let cat = spec.field("cat").expect("cat");
    assert_eq!(cat.transforms, [Transform::HashBucket { buckets: 100 }]);
    let split = spec.split.as_ref().expect("split");
    assert_eq!(split.key, "user_id");
    assert_eq!(split.weights[0].0, "train");
    assert!((split.weights[0].1 - 0.9).abs() < 1e-12);
    assert_eq!(split.stats_split, "train");
    assert_eq!(spec.order.shuffle_seed, Some(7));
    assert_eq!(spec.shards.target_bytes, 1 << 20);
    assert!(spec.path.is_absolute());
    assert_eq!(spec.line_of("fields.cat.transform.hash_bucket"), Some(11));
    assert_eq!(spec.line_of("split.weights.val"), Some(13));
}

#[test]
fn defaults_are_filled_in() {
    let spec = parse(
        "version: 1\nname: d\nsources: { t: { path: t.csv } }\nfields: { x: { dtype: i64, column: x, transform: vocab } }\n",
    );
    assert_eq!(spec.query, None);
    assert_eq!(spec.split, None);
    assert_eq!(spec.order, Order { shuffle_seed: None });
    assert_eq!(spec.shards.target_bytes, DEFAULT_TARGET_BYTES);
    assert_eq!(
        spec.fields[0].transforms,
        [Transform::Vocab {
            min_count: 1,
            max_size: None,
            oov: 0
        }]
    );
    assert_eq!(spec.fields[0].pad, 0.0);
    assert_eq!(spec.fields[0].shape(), Vec::<u64>::new());
}

#[test]
fn stats_split_defaults_to_the_first_without_train() {
    let spec = parse(
        "version: 1\nname: d\nsources: { t: { path: t.csv } }\nfields: { x: { dtype: f32, column: x } }\n\
         split: { key: k, weights: { a: 1, b: 3 } }\n",
    );
    let split = spec.split.expect("split");
    assert_eq!(split.stats_split, "a");
    assert_eq!(
        split.weights,
        [("a".to_string(), 0.25), ("b".to_string(), 0.75)]
    );
}

#[test]
fn formats_come_from_extension_or_are_left_to_the_files() {
    let spec = parse(
        "version: 1\nname: d\nsources:\n  a: { path: x/part-*.PARQUET }\n  b: { path: logs.jsonl }\n  \
         c: { path: dir }\n  d: { path: dir2, format: arrow }\nquery: SELECT 1\nfields: { x: { dtype: f32, column: x } }\n",
    );
    let formats: Vec<(SourceFormat, bool)> = spec
        .sources
        .iter()
        .map(|s| (s.format, s.format_from_files))
        .collect();
    assert_eq!(
        formats,
        [
            (SourceFormat::Parquet, false),
            (SourceFormat::Json, false),
            (SourceFormat::Parquet, true),
            (SourceFormat::Arrow, false),
        ]
    );
}

#[test]
fn one_hot_and_bytes_shapes() {
    let spec = parse(
        "version: 1\nname: d\nsources: { t: { path: t.parquet } }\nfields:\n  \
         c: { dtype: f32, column: c, transform: [{ vocab: { max_size: 9 } }, { one_hot: 10 }] }\n  \
         img: { dtype: u8, column: img, bytes: 3072 }\n  \
         seq: { dtype: i32, column: s, length: 8, pad: -1 }\n",
    );
    assert_eq!(spec.fields[0].shape(), [10]);
    assert_eq!(spec.fields[1].shape(), [3072]);
    assert_eq!(spec.fields[2].shape(), [8]);
    assert_eq!(spec.fields[2].pad, -1.0);
}

#[test]
fn canonical_form_ignores_layout_comments_and_key_order() {
    let reordered = r#"
# The same spec, written differently.
shards:
  compression: none
  target_bytes: 1048576          # 1MiB spelled out
order: { shuffle_seed: 7 }
split:
  weights: { train: 9, val: 1 }  # same proportions
  key: user_id
  stats_from: train
fields:
  dense:
    transform:
      - clip: { min: 0.0 }
      - log1p
      - { standardize: {} }
    fill_null: 0.0
    columns: [a, b]
    dtype: f32
  cat:
    transform: [{ hash_bucket: 100 }]
    column: c
    dtype: i32
  label: { expr: "CAST(y AS FLOAT)", dtype: f32 }
filter: "x > 0"
query: |
  SELECT * FROM events e JOIN users u USING (user_id)
sources:
  users: { null_values: ["", NA, NA], path: elsewhere/users.csv, header: true }
  events: { path: /abs/data/*.parquet, format: parquet }
name: demo
version: 1
"#;
    assert_eq!(canonical(BASE), canonical(reordered));
    // An empty field is null with or without "" in the list: one meaning.
    let without_empty = BASE.replacen("null_values: [NA, \"\"]", "null_values: [NA]", 1);
    assert_ne!(without_empty, BASE);
    assert_eq!(canonical(BASE), canonical(&without_empty));
}

#[test]
fn canonical_form_changes_with_the_meaning() {
    let base = canonical(BASE);
    let changes = [
        ("log1p, standardize", "log1p, min_max"),
        ("dtype: f32, columns", "dtype: f64, columns"),
        ("\"x > 0\"", "\"x > 1\""),
        ("train: 0.9, val: 0.1", "train: 0.8, val: 0.2"),
        ("train: 0.9, val: 0.1", "val: 0.1, train: 0.9"),
        ("hash_bucket: 100", "hash_bucket: 101"),
        ("shuffle_seed: 7", "shuffle_seed: 8"),
        ("target_bytes: 1MiB", "target_bytes: 2MiB"),
        ("null_values: [NA, \"\"]", "null_values: [\"N/A\"]"),
        ("fill_null: 0,", "fill_null: 1,"),
        ("name: demo", "name: demo2"),
        ("columns: [a, b]", "columns: [b, a]"),
    ];
    for (from, to) in changes {
        assert!(BASE.contains(from), "test text missing {from:?}");
        let changed = canonical(&BASE.replacen(from, to, 1));
        assert_ne!(
            base, changed,
            "changing {from:?} to {to:?} kept the canonical form"
        );
    }
    // Field order shapes the record.
    let swapped = BASE.replacen(
        "  cat: { dtype: i32, column: c, transform: { hash_bucket: 100 } }\n  label: { dtype: f32, expr: \"CAST(y AS FLOAT)\" }\n",
        "  label: { dtype: f32, expr: \"CAST(y AS FLOAT)\" }\n  cat: { dtype: i32, column: c, transform: { hash_bucket: 100 } }\n",
        1,
    );
    assert_ne!(swapped, BASE);
    assert_ne!(base, canonical(&swapped));
}

#[test]
fn canonical_form_keeps_no_paths_and_sorts_sources_and_keys() {
    let value = parse(BASE).canonical_json();
    let text = value.to_string();
    assert!(!text.contains("data/"), "{text}");
    assert!(!text.contains("users.csv"), "{text}");
    let sources: Vec<&str> = value["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(sources, ["events", "users"]);
    assert_eq!(value["shards"]["compression"], "none");
    assert_eq!(value["sources"][0]["csv"], Value::Null);
    assert_eq!(
        value["sources"][1]["csv"]["null_values"],
        serde_json::json!(["", "NA"])
    );

    fn check_sorted(v: &Value) {
        match v {
            Value::Object(map) => {
                let keys: Vec<&String> = map.keys().collect();
                let mut sorted = keys.clone();
                sorted.sort();
                assert_eq!(keys, sorted);
                map.values().for_each(check_sorted);
            }
            Value::Array(items) => items.iter().for_each(check_sorted),
            _ => {}
        }
    }
    check_sorted(&value);
}

#[test]
fn source_order_does_not_matter() {
    let swapped = BASE.replacen(
        "  events: { path: data/*.parquet }\n  users: { path: users.csv, null_values: [NA, \"\"] }\n",
        "  users: { path: users.csv, null_values: [NA, \"\"] }\n  events: { path: data/*.parquet }\n",
        1,
    );
    assert_ne!(swapped, BASE);
    assert_eq!(canonical(BASE), canonical(&swapped));
}

#[test]
fn planner_errors_point_at_keys() {
    let spec = parse(BASE);
    let err = spec.error_at(
        "fields.dense.columns[1]",
        "no column \"b\" in the query output",
    );
    assert_eq!(err.line(), Some(10));
    assert_eq!(
        err.to_string(),
        "specs/t.yaml:10: fields.dense.columns[1]: no column \"b\" in the query output"
    );
}

#[test]
fn identifiers() {
    assert!(is_identifier("a"));
    assert!(is_identifier("_a1"));
    assert!(!is_identifier("1a"));
    assert!(!is_identifier("a-b"));
    assert!(!is_identifier(""));
}

#[test]
fn partitions_are_read_and_leave_the_canonical_form_alone() {
    let auto = parse(BASE);
    assert_eq!(auto.chunks.partitions, None);
    let four = parse(&format!("{BASE}chunks: {{ partitions: 4 }}\n"));
    assert_eq!(four.chunks.partitions, Some(4));
    let spelled = parse(&format!("{BASE}chunks: {{ partitions: auto }}\n"));
    assert_eq!(spelled.chunks.partitions, None);
    // The artifact is the same for any number of partitions: one hash.
    assert_eq!(auto.canonical_json(), four.canonical_json());
    for (bad, says) in [
        ("0", "at least 1"),
        ("5000", "at most 4096"),
        ("many", "or \"auto\""),
        ("[2]", "or \"auto\""),
    ] {
        let text = format!("{BASE}chunks: {{ partitions: {bad} }}\n");
        let err = Spec::parse(&text, Path::new("x.yaml")).expect_err(bad);
        assert_eq!(err.key(), "chunks.partitions", "{err}");
        assert!(err.message().contains(says), "{bad}: {err}");
    }
}
