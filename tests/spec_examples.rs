//! Valid specs: the examples in specs/, the complete examples in
//! docs/SPEC.md, and file resolution (globs, directories, hive partitions).

use std::fs;
use std::path::{Path, PathBuf};
use tessera::spec::{FieldInput, SourceFormat, Spec, Transform};
use tessera_reader::DType;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn parse_file(path: &Path) -> Spec {
    let text = fs::read_to_string(path).expect("read spec");
    match Spec::parse(&text, path) {
        Ok(spec) => spec,
        Err(e) => panic!("{e}"),
    }
}

/// Copies a spec from specs/ into `root/specs/` and creates empty input
/// files (resolution looks at names, never at contents).
fn project(root: &Path, spec: &str, inputs: &[&str]) -> PathBuf {
    fs::create_dir_all(root.join("specs")).expect("mkdir");
    let to = root.join("specs").join(spec);
    fs::copy(repo().join("specs").join(spec), &to).expect("copy spec");
    for input in inputs {
        let path = root.join(input);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, "").expect("write input");
    }
    to
}

#[test]
fn every_example_spec_parses() {
    let mut count = 0;
    for entry in fs::read_dir(repo().join("specs")).expect("specs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let spec = parse_file(&path);
            assert!(!spec.fields.is_empty(), "{}", path.display());
            count += 1;
        }
    }
    assert!(count >= 2, "expected the example specs in specs/");
}

#[test]
fn criteo_example() {
    let spec = parse_file(&repo().join("specs/criteo.yaml"));
    assert_eq!(spec.name, "criteo-clicks");
    assert_eq!(spec.filter.as_deref(), Some("day >= 14"));
    let shapes: Vec<(&str, DType, Vec<u64>)> = spec
        .fields
        .iter()
        .map(|f| (f.name.as_str(), f.dtype, f.shape()))
        .collect();
    assert_eq!(
        shapes,
        [
            ("label", DType::F32, vec![]),
            ("dense", DType::F32, vec![13]),
            ("cats", DType::I32, vec![26]),
        ]
    );
    let bytes: u64 = spec
        .fields
        .iter()
        .map(|f| f.dtype.size() as u64 * f.shape().iter().product::<u64>())
        .sum();
    assert_eq!(bytes, 160);
    let dense = spec.field("dense").expect("dense");
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
    let split = spec.split.as_ref().expect("split");
    assert_eq!(split.key, "id");
    assert_eq!(split.stats_split, "train");
}

#[test]
fn criteo_resolves_its_glob() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = project(
        dir.path(),
        "criteo.yaml",
        &[
            "data/criteo/part-00001.parquet",
            "data/criteo/part-00000.parquet",
            "data/criteo/_generator.json",
        ],
    );
    let spec = Spec::load(&path).expect("load");
    let files = &spec.sources[0].files;
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["part-00000.parquet", "part-00001.parquet"]);
    assert!(files.iter().all(|f| f.is_absolute()));
    assert_eq!(spec.sources[0].format, SourceFormat::Parquet);
}

#[test]
fn flights_example() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = project(
        dir.path(),
        "flights.yaml",
        &[
            "data/nycflights13/flights.csv",
            "data/nycflights13/weather.csv",
            "data/nycflights13/planes.csv",
        ],
    );
    let spec = Spec::load(&path).expect("load");
    let names: Vec<&str> = spec.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["flights", "weather", "planes"]);
    for source in &spec.sources {
        assert_eq!(source.format, SourceFormat::Csv);
        assert_eq!(source.csv.null_values, ["", "NA"]);
        assert_eq!(source.files.len(), 1);
    }
    assert!(spec.source("flights").expect("flights").chunk);
    assert!(
        spec.query
            .as_deref()
            .is_some_and(|q| q.contains("LEFT JOIN weather"))
    );
    assert_eq!(
        spec.field("label").expect("label").input,
        FieldInput::Expr("CAST(arr_delay > 15 AS FLOAT)".into())
    );
    assert_eq!(
        spec.field("carrier").expect("carrier").transforms,
        [Transform::Vocab {
            min_count: 1,
            max_size: None,
            oov: 0
        }]
    );
    assert_eq!(spec.field("month").expect("month").shape(), [12]);
    assert_eq!(spec.shards.target_bytes, 8 << 20);
}

/// The real nycflights13 tables as CSV, made by scripts/fetch_flights.py
/// from the `nycflights13` package that scripts/setup.sh installs into the
/// project's environment. Fails (rather than skipping) when it cannot.
fn flights_data(out: &Path) {
    let python = std::env::var_os("TESSERA_VENV")
        .map(|v| Path::new(&v).join("bin/python"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    let status = std::process::Command::new(&python)
        .arg(repo().join("scripts/fetch_flights.py"))
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    assert!(
        status.success(),
        "scripts/fetch_flights.py failed ({status}): run scripts/setup.sh, which installs nycflights13"
    );
}

#[test]
fn flights_example_matches_the_real_column_names() {
    // Every plain column the spec names exists in the real CSV headers.
    let dir = tempfile::tempdir().expect("tempdir");
    flights_data(dir.path());
    let mut known: Vec<String> = Vec::new();
    for table in ["flights", "weather", "planes"] {
        let path = dir.path().join(format!("{table}.csv"));
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let first = text.lines().next().unwrap_or_default();
        known.extend(first.split(',').map(str::to_string));
    }
    known.extend(["plane_year".to_string()]);
    let spec = parse_file(&repo().join("specs/flights.yaml"));
    for field in &spec.fields {
        let columns = match &field.input {
            FieldInput::Column(c) => vec![c.clone()],
            FieldInput::Columns(cs) => cs.clone(),
            FieldInput::Expr(_) | FieldInput::LengthOf(_) => vec![],
        };
        for c in columns {
            assert!(
                known.contains(&c),
                "field {}: no column {c:?} in the data",
                field.name
            );
        }
    }
}

#[test]
fn canonical_form_does_not_depend_on_where_the_project_lives() {
    let inputs = [
        "data/nycflights13/flights.csv",
        "data/nycflights13/weather.csv",
        "data/nycflights13/planes.csv",
    ];
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let spec_a = Spec::load(&project(a.path(), "flights.yaml", &inputs)).expect("load a");
    let spec_b = Spec::load(&project(b.path(), "flights.yaml", &inputs)).expect("load b");
    assert_ne!(spec_a.sources[0].files, spec_b.sources[0].files);
    assert_eq!(spec_a.canonical_json(), spec_b.canonical_json());
}

#[test]
fn hive_partitioned_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    for f in [
        "events/year=2021/month=1/b.parquet",
        "events/year=2020/month=12/a.parquet",
        "events/year=2020/month=12/_SUCCESS",
        "events/year=2020/month=12/.a.parquet.crc",
        "events/_metadata/ignored.parquet",
        "events/README.md",
    ] {
        let path = root.join(f);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, "").expect("write");
    }
    let spec_path = root.join("spec.yaml");
    fs::write(
        &spec_path,
        "version: 1\nname: h\nsources: { events: { path: events, format: parquet } }\n\
         fields: { x: { dtype: f32, column: x } }\n",
    )
    .expect("write spec");
    let spec = Spec::load(&spec_path).expect("load");
    let source = &spec.sources[0];
    assert_eq!(source.partition_columns, ["year", "month"]);
    let relative: Vec<PathBuf> = source
        .files
        .iter()
        .map(|f| f.strip_prefix(root).expect("under root").to_path_buf())
        .collect();
    assert_eq!(
        relative,
        [
            PathBuf::from("events/year=2020/month=12/a.parquet"),
            PathBuf::from("events/year=2021/month=1/b.parquet"),
        ]
    );
    assert_eq!(
        spec.canonical_json()["sources"][0]["partition_columns"],
        serde_json::json!(["year", "month"])
    );
}

#[test]
fn directory_format_comes_from_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    fs::create_dir_all(root.join("logs")).expect("mkdir");
    fs::write(root.join("logs/b.csv"), "").expect("write");
    fs::write(root.join("logs/a.csv"), "").expect("write");
    let spec_path = root.join("spec.yaml");
    fs::write(
        &spec_path,
        "version: 1\nname: d\nsources: { logs: { path: logs, delimiter: \";\" } }\n\
         fields: { x: { dtype: f32, column: x } }\n",
    )
    .expect("write spec");
    let mut spec =
        Spec::parse(&fs::read_to_string(&spec_path).expect("read"), &spec_path).expect("parse");
    assert!(spec.sources[0].format_from_files);
    assert!(spec.sources[0].files.is_empty());
    spec.resolve_files().expect("resolve");
    assert_eq!(spec.sources[0].format, SourceFormat::Csv);
    assert_eq!(spec.sources[0].csv.delimiter, b';');
    assert_eq!(spec.sources[0].files.len(), 2);
    assert!(spec.sources[0].files[0].ends_with("logs/a.csv"));
}

#[test]
fn glob_in_a_directory_with_pattern_characters() {
    // The spec's own directory is literal text, not part of the pattern.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("proj[1]");
    fs::create_dir_all(root.join("d")).expect("mkdir");
    fs::write(root.join("d/a.json"), "").expect("write");
    let spec_path = root.join("spec.yaml");
    fs::write(
        &spec_path,
        "version: 1\nname: d\nsources: { t: { path: d/*.json } }\nfields: { x: { dtype: f32, column: x } }\n",
    )
    .expect("write spec");
    let spec = Spec::load(&spec_path).expect("load");
    assert_eq!(spec.sources[0].format, SourceFormat::Json);
    assert_eq!(spec.sources[0].files.len(), 1);
}

#[test]
fn complete_examples_in_the_spec_document_parse() {
    let doc = fs::read_to_string(repo().join("docs/SPEC.md")).expect("docs/SPEC.md");
    let mut blocks = 0;
    let mut rest = doc.as_str();
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + "```yaml\n".len()..];
        let end = body.find("```").expect("closed block");
        let block = &body[..end];
        if block.starts_with("version: 1\nname:") {
            if let Err(e) = Spec::parse(block, Path::new("docs/SPEC.md")) {
                panic!("example in docs/SPEC.md does not parse: {e}\n{block}");
            }
            blocks += 1;
        }
        rest = &body[end + 3..];
    }
    assert!(blocks >= 2, "expected complete examples in docs/SPEC.md");
}
