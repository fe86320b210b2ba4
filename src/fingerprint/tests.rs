use super::*;
use serde_json::json;
use std::fs::{File, FileTimes};

fn write(path: &Path, bytes: &[u8]) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).unwrap();
    }
    fs::write(path, bytes).unwrap();
}

fn source(name: &str, root: &Path, files: &[&Path]) -> SourceFiles {
    SourceFiles {
        source: name.into(),
        root: root.to_path_buf(),
        files: files.iter().map(|p| p.to_path_buf()).collect(),
        hash_bytes: false,
    }
}

fn quick_cache() -> StatCache {
    let mut c = StatCache::in_memory();
    c.set_racy_window(Duration::ZERO);
    c
}

fn set_mtime(path: &Path, t: SystemTime) {
    let f = File::options().write(true).open(path).unwrap();
    f.set_times(FileTimes::new().set_modified(t)).unwrap();
}

fn mtime(path: &Path) -> SystemTime {
    fs::metadata(path).unwrap().modified().unwrap()
}

#[test]
fn file_hash_is_plain_blake3_of_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let cases: [(&str, &[u8]); 3] = [("empty", b""), ("small", b"hello"), ("big", &big)];
    for (name, bytes) in cases {
        let p = dir.path().join(name);
        write(&p, bytes);
        let got =
            fingerprint_inputs(&[source("s", dir.path(), &[&p])], &mut quick_cache()).unwrap();
        assert_eq!(
            got[0].blake3,
            blake3::hash(bytes).to_hex().to_string(),
            "{name}"
        );
        assert_eq!(got[0].size, bytes.len() as u64);
        assert_eq!(got[0].rel, name);
        assert!(!got[0].from_stat_cache);
    }
}

#[test]
fn artifact_hash_is_stable_and_sees_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("data/a.csv");
    let b = dir.path().join("data/b.csv");
    write(&a, b"x,y\n1,2\n");
    write(&b, b"x,y\n3,4\n");
    let root = dir.path().join("data");
    let spec = json!({"version": 1, "name": "t", "fields": {"x": {"dtype": "f32"}}});
    let hash_of = |files: &[&Path], spec: &serde_json::Value, fv: u32, sv: u32| {
        let inputs = fingerprint_inputs(&[source("s", &root, files)], &mut quick_cache()).unwrap();
        artifact_hash(spec, &inputs, fv, sv)
    };
    let base = hash_of(&[&a, &b], &spec, 1, 1);
    assert_eq!(base.len(), 64);
    assert_eq!(
        base,
        hash_of(&[&a, &b], &spec, 1, 1),
        "same inputs, same hash"
    );

    // The same spec built with another key order hashes the same.
    let reordered: serde_json::Value =
        serde_json::from_str(r#"{"fields": {"x": {"dtype": "f32"}}, "name": "t", "version": 1}"#)
            .unwrap();
    assert_eq!(base, hash_of(&[&a, &b], &reordered, 1, 1));

    let mut changed = HashSeen::new(&base);
    changed.add("file order", hash_of(&[&b, &a], &spec, 1, 1));
    changed.add("format version", hash_of(&[&a, &b], &spec, 2, 1));
    changed.add("semantics version", hash_of(&[&a, &b], &spec, 1, 2));
    changed.add(
        "spec",
        hash_of(&[&a, &b], &json!({"version": 1, "name": "u"}), 1, 1),
    );
    changed.add("one file fewer", hash_of(&[&a], &spec, 1, 1));
    let inputs = fingerprint_inputs(&[source("s", &root, &[&a, &b])], &mut quick_cache()).unwrap();
    let mut renamed = inputs.clone();
    renamed[1].rel = "c.csv".into();
    changed.add("renamed file", artifact_hash(&spec, &renamed, 1, 1));
    let mut other_source = inputs.clone();
    other_source[0].source = "t".into();
    changed.add("source name", artifact_hash(&spec, &other_source, 1, 1));
    write(&b, b"x,y\n3,5\n"); // one byte, same size
    changed.add("one byte of an input", hash_of(&[&a, &b], &spec, 1, 1));
}

/// Collects hashes and checks that each differs from the base and from
/// every other.
struct HashSeen(Vec<(String, String)>);

impl HashSeen {
    fn new(base: &str) -> Self {
        HashSeen(vec![("base".into(), base.into())])
    }
    fn add(&mut self, what: &str, hash: String) {
        for (other, h) in &self.0 {
            assert_ne!(*h, hash, "{what} hashes like {other}");
        }
        self.0.push((what.into(), hash));
    }
}

#[test]
fn value_encoding_is_unambiguous() {
    let enc = |v: serde_json::Value| {
        let mut out = Vec::new();
        encode_value(&v, &mut out);
        out
    };
    let pairs = [
        (json!(["ab", "c"]), json!(["a", "bc"])),
        (json!({"a": 1}), json!({"a": "1"})),
        (json!(1), json!(1.0)),
        (json!(-1), json!(-1.0)),
        (json!({"a": null}), json!({})),
        (json!([[]]), json!([])),
        (json!({"a": {"b": 1}}), json!({"a": 1, "b": 1})),
        (json!(0.1), json!(0.1 + 1e-17 + 1e-16)),
    ];
    for (x, y) in pairs {
        assert_ne!(enc(x.clone()), enc(y.clone()), "{x} vs {y}");
    }
    assert_eq!(enc(json!({"b": 1, "a": 2})), enc(json!({"a": 2, "b": 1})));
}

#[test]
fn relative_names_keep_partition_directories() {
    let root = Path::new("/data/flights");
    assert_eq!(
        relative_name(root, Path::new("/data/flights/year=2024/m=1/p.parquet")),
        "year=2024/m=1/p.parquet"
    );
    assert_eq!(
        relative_name(Path::new("/d/w.csv"), Path::new("/d/w.csv")),
        "w.csv"
    );
    assert_eq!(relative_name(root, Path::new("/elsewhere/x.csv")), "x.csv");
}

#[test]
fn output_follows_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..64)
        .map(|i| dir.path().join(format!("f{i:02}")))
        .collect();
    for (i, p) in paths.iter().enumerate() {
        write(p, &vec![i as u8; 1000 + i * 5000]);
    }
    let mut reversed: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    reversed.reverse();
    let sources = [
        source("one", dir.path(), &reversed[..10]),
        source("two", dir.path(), &reversed[10..]),
    ];
    let got = fingerprint_inputs(&sources, &mut quick_cache()).unwrap();
    let names: Vec<&Path> = got.iter().map(|f| f.path.as_path()).collect();
    assert_eq!(names, reversed);
    assert!(got[..10].iter().all(|f| f.source == "one"));
    assert!(got[10..].iter().all(|f| f.source == "two"));
}

#[test]
fn stat_cache_answers_for_unchanged_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.bin");
    write(&p, &[7u8; 100_000]);
    let store = dir.path().join("cache").join(STAT_CACHE_FILE);
    let src = [source("s", dir.path(), &[&p])];

    let mut cache = StatCache::load(&store);
    cache.set_racy_window(Duration::ZERO);
    let first = fingerprint_inputs(&src, &mut cache).unwrap();
    assert!(!first[0].from_stat_cache);
    cache.save().unwrap();

    // A fresh process: loads the saved file and does not read the input.
    let mut cache = StatCache::load(&store);
    assert_eq!(cache.discarded(), None);
    assert_eq!(cache.len(), 1);
    let second = fingerprint_inputs(&src, &mut cache).unwrap();
    assert!(second[0].from_stat_cache);
    assert_eq!(second[0].blake3, first[0].blake3);

    // Proof that the remembered value is what is returned: a poisoned
    // entry comes back as is while the file is untouched.
    cache.poison(&std::path::absolute(&p).unwrap(), "poisoned");
    let third = fingerprint_inputs(&src, &mut cache).unwrap();
    assert_eq!(third[0].blake3, "poisoned");
}

#[test]
fn touched_mtime_means_rehash() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.bin");
    write(&p, b"0123456789");
    let src = [source("s", dir.path(), &[&p])];
    let mut cache = quick_cache();
    fingerprint_inputs(&src, &mut cache).unwrap();
    cache.poison(&std::path::absolute(&p).unwrap(), "poisoned");
    set_mtime(&p, mtime(&p) + Duration::from_secs(1));
    let got = fingerprint_inputs(&src, &mut cache).unwrap();
    assert!(!got[0].from_stat_cache);
    assert_eq!(got[0].blake3, blake3::hash(b"0123456789").to_hex().as_str());
}

/// The classic way to fool an mtime cache: same size, new bytes, old
/// mtime put back. The change time still moves, and the file is rehashed.
#[test]
fn same_size_rewrite_with_restored_mtime_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.bin");
    write(&p, b"aaaaaaaaaa");
    set_mtime(
        &p,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000),
    );
    let old = mtime(&p);
    let src = [source("s", dir.path(), &[&p])];
    let mut cache = quick_cache();
    let before = fingerprint_inputs(&src, &mut cache).unwrap();
    // Let the change time move on by more than the timestamp granularity.
    std::thread::sleep(Duration::from_millis(20));
    write(&p, b"aaaaabaaaa");
    set_mtime(&p, old);
    assert_eq!(mtime(&p), old);
    let after = fingerprint_inputs(&src, &mut cache).unwrap();
    assert!(!after[0].from_stat_cache);
    assert_ne!(after[0].blake3, before[0].blake3);
    assert_eq!(
        after[0].blake3,
        blake3::hash(b"aaaaabaaaa").to_hex().as_str()
    );
}

#[test]
fn recently_changed_files_are_not_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.bin");
    write(&p, b"fresh");
    let src = [source("s", dir.path(), &[&p])];
    let mut cache = StatCache::in_memory(); // default racy window
    fingerprint_inputs(&src, &mut cache).unwrap();
    assert!(cache.is_empty());
    assert!(!fingerprint_inputs(&src, &mut cache).unwrap()[0].from_stat_cache);
}

#[test]
fn corrupt_stat_cache_is_ignored_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join(STAT_CACHE_FILE);
    let p = dir.path().join("in.bin");
    write(&p, b"data");
    let garbage: [&[u8]; 3] = [
        b"{\"format\": \"tessera-stat-cache\", \"vers",
        b"[1,2]",
        b"\xff\x00",
    ];
    for garbage in garbage {
        write(&store, garbage);
        let mut cache = StatCache::load(&store);
        assert!(cache.discarded().is_some());
        assert!(cache.is_empty());
        cache.set_racy_window(Duration::ZERO);
        fingerprint_inputs(&[source("s", dir.path(), &[&p])], &mut cache).unwrap();
        cache.save().unwrap();
        let reloaded = StatCache::load(&store);
        assert_eq!(reloaded.discarded(), None);
        assert_eq!(reloaded.len(), 1);
    }
}

#[test]
fn save_merges_with_entries_from_other_processes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join(STAT_CACHE_FILE);
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    write(&a, b"a");
    write(&b, b"b");
    let mut one = StatCache::load(&store);
    let mut two = StatCache::load(&store);
    one.set_racy_window(Duration::ZERO);
    two.set_racy_window(Duration::ZERO);
    fingerprint_inputs(&[source("s", dir.path(), &[&a])], &mut one).unwrap();
    fingerprint_inputs(&[source("s", dir.path(), &[&b])], &mut two).unwrap();
    one.save().unwrap();
    two.save().unwrap();
    let mut merged = StatCache::load(&store);
    assert_eq!(merged.len(), 2);
    fs::remove_file(&a).unwrap();
    assert_eq!(merged.prune_missing(), 1);
    merged.save().unwrap();
    assert_eq!(StatCache::load(&store).len(), 1);
}

#[test]
fn errors_name_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.parquet");
    let err = fingerprint_inputs(&[source("s", dir.path(), &[&missing])], &mut quick_cache())
        .unwrap_err();
    assert!(matches!(err, FingerprintError::Io { .. }));
    assert!(err.to_string().contains("missing.parquet"), "{err}");
    let err = fingerprint_inputs(
        &[source("s", dir.path(), &[dir.path()])],
        &mut quick_cache(),
    )
    .unwrap_err();
    assert!(matches!(err, FingerprintError::NotAFile { .. }), "{err}");
}

#[test]
fn manifest_inputs_hold_what_was_hashed() {
    let f = InputFile {
        source: "s".into(),
        path: "/abs/x".into(),
        rel: "x".into(),
        size: 3,
        mtime_ns: 5,
        blake3: "ab".into(),
        from_stat_cache: true,
    };
    assert_eq!(
        manifest_inputs(&[f]),
        json!([{"source": "s", "path": "x", "bytes": 3, "blake3": "ab"}])
    );
}
