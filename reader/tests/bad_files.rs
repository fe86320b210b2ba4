//! Damaged, foreign and incomplete shard sets: each must be refused with the
//! specific error variant, naming the file at fault, and nothing may panic.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use tessera_reader::{
    DType, Dataset, Error, FieldSpec, HEADER_LEN, MANIFEST_FILE, RecordLayout, ShardSetWriter,
};

const ROWS_PER_SHARD: u64 = 10;

fn layout() -> RecordLayout {
    RecordLayout::packed(&[
        FieldSpec::new("x", DType::F32, &[3]),
        FieldSpec::new("y", DType::I64, &[]),
    ])
    .unwrap()
}

/// A valid set of 25 rows in three shards (10, 10, 5).
fn good_set() -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout();
    let stride = layout.stride;
    let mut w = ShardSetWriter::new(
        dir.path(),
        layout,
        HEADER_LEN as u64 + ROWS_PER_SHARD * stride,
    )
    .unwrap();
    w.begin_split("train").unwrap();
    for i in 0..25u8 {
        w.write_records(&vec![i; stride as usize]).unwrap();
    }
    let m = w.finish().unwrap();
    let shards = m.shards.iter().map(|s| dir.path().join(&s.file)).collect();
    Dataset::open(dir.path()).unwrap().verify().unwrap();
    (dir, shards)
}

fn open_err(dir: &Path) -> Error {
    match Dataset::open(dir) {
        Ok(_) => panic!("{} opened although it is damaged", dir.display()),
        Err(e) => e,
    }
}

/// The error's Display names `path`.
fn names(e: &Error, path: &Path) -> bool {
    e.to_string().contains(&path.display().to_string())
}

fn patch(path: &Path, at: usize, bytes: &[u8]) {
    let mut data = fs::read(path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    // A new file renamed over the old one, as a writer must do with a file
    // that may be mapped (the test holds no map, but stays honest).
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, &data).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(MANIFEST_FILE);
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn truncated_shard() {
    let (dir, shards) = good_set();
    let len = fs::metadata(&shards[1]).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&shards[1])
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Size { path, expected, actual }
            if path == &shards[1] && *expected == len && *actual == len - 1),
        "{e:?}"
    );
    assert!(names(&e, &shards[1]), "{e}");
    // Shorter than a header, too.
    OpenOptions::new()
        .write(true)
        .open(&shards[1])
        .unwrap()
        .set_len(10)
        .unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Size { path, actual: 10, .. } if path == &shards[1]),
        "{e:?}"
    );
}

#[test]
fn shard_with_extra_bytes() {
    let (dir, shards) = good_set();
    let mut data = fs::read(&shards[2]).unwrap();
    let len = data.len() as u64;
    data.extend_from_slice(&[0; 7]);
    fs::write(&shards[2], &data).unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Size { path, expected, actual }
            if path == &shards[2] && *expected == len && *actual == len + 7),
        "{e:?}"
    );
    assert!(names(&e, &shards[2]), "{e}");
}

#[test]
fn wrong_magic() {
    let (dir, shards) = good_set();
    patch(&shards[0], 0, b"PARQUET1");
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Header { path, .. } if path == &shards[0]),
        "{e:?}"
    );
    assert!(
        names(&e, &shards[0]) && e.to_string().contains("magic"),
        "{e}"
    );
}

#[test]
fn wrong_version_in_shard_header() {
    let (dir, shards) = good_set();
    patch(&shards[2], 8, &7u32.to_le_bytes());
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::UnsupportedVersion { path, found: 7, supported: 1 } if path == &shards[2]),
        "{e:?}"
    );
    assert!(names(&e, &shards[2]), "{e}");
}

#[test]
fn wrong_version_in_manifest() {
    let (dir, _) = good_set();
    let manifest = dir.path().join(MANIFEST_FILE);
    edit_manifest(dir.path(), |m| m["format_version"] = 3.into());
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::UnsupportedVersion { path, found: 3, supported: 2 } if path == &manifest),
        "{e:?}"
    );
    assert!(names(&e, &manifest), "{e}");
    // A future version is reported as such even when the rest of the manifest
    // no longer has the v1 shape.
    fs::write(
        &manifest,
        br#"{"format": "tessera-shards", "format_version": 9, "new": {}}"#,
    )
    .unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::UnsupportedVersion { found: 9, .. }),
        "{e:?}"
    );
}

#[test]
fn header_stride_disagrees_with_manifest() {
    let (dir, shards) = good_set();
    let stride = layout().stride;
    patch(&shards[1], 16, &(stride * 2).to_le_bytes());
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Header { path, .. } if path == &shards[1]),
        "{e:?}"
    );
    assert!(
        names(&e, &shards[1]) && e.to_string().contains("stride"),
        "{e}"
    );
}

#[test]
fn header_row_count_disagrees_with_manifest() {
    let (dir, shards) = good_set();
    patch(&shards[0], 24, &(ROWS_PER_SHARD - 1).to_le_bytes());
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Header { path, .. } if path == &shards[0]),
        "{e:?}"
    );
    assert!(
        names(&e, &shards[0]) && e.to_string().contains("rows"),
        "{e}"
    );
}

#[test]
fn layout_digest_mismatch() {
    let (dir, shards) = good_set();
    let mut digest = fs::read(&shards[1]).unwrap()[40..72].to_vec();
    digest[5] ^= 0x40;
    patch(&shards[1], 40, &digest);
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Header { path, .. } if path == &shards[1]),
        "{e:?}"
    );
    assert!(
        names(&e, &shards[1]) && e.to_string().contains("layout digest"),
        "{e}"
    );
}

#[test]
fn shard_from_a_set_with_another_layout() {
    // Same stride and row count, different field names: only the layout
    // digest tells the shards apart.
    let (dir, shards) = good_set();
    let other = tempfile::tempdir().unwrap();
    let renamed = RecordLayout::packed(&[
        FieldSpec::new("features", DType::F32, &[3]),
        FieldSpec::new("label", DType::I64, &[]),
    ])
    .unwrap();
    assert_eq!(renamed.stride, layout().stride);
    let stride = renamed.stride;
    let mut w = ShardSetWriter::new(
        other.path(),
        renamed,
        HEADER_LEN as u64 + ROWS_PER_SHARD * stride,
    )
    .unwrap();
    w.begin_split("train").unwrap();
    w.write_records(&vec![1u8; (stride * ROWS_PER_SHARD) as usize])
        .unwrap();
    let m = w.finish().unwrap();
    fs::copy(other.path().join(&m.shards[0].file), &shards[0]).unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Header { path, .. } if path == &shards[0]),
        "{e:?}"
    );
    assert!(e.to_string().contains("layout digest"), "{e}");
}

#[test]
fn other_header_damage() {
    for (at, bytes, what) in [
        (12, &8192u32.to_le_bytes()[..], "header length"),
        (32, &1u32.to_le_bytes()[..], "flags"),
        (36, &1u32.to_le_bytes()[..], "reserved"),
        (HEADER_LEN - 1, &[1u8][..], "reserved"),
    ] {
        let (dir, shards) = good_set();
        patch(&shards[2], at, bytes);
        let e = open_err(dir.path());
        assert!(
            matches!(&e, Error::Header { path, .. } if path == &shards[2]),
            "{e:?}"
        );
        assert!(
            names(&e, &shards[2]) && e.to_string().contains(what),
            "{what}: {e}"
        );
    }
}

#[test]
fn missing_shard() {
    let (dir, shards) = good_set();
    fs::remove_file(&shards[1]).unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::MissingShard { path } if path == &shards[1]),
        "{e:?}"
    );
    assert!(names(&e, &shards[1]), "{e}");
}

#[test]
fn missing_manifest() {
    let (dir, _) = good_set();
    let manifest = dir.path().join(MANIFEST_FILE);
    fs::remove_file(&manifest).unwrap();
    let e = open_err(dir.path());
    assert!(
        matches!(&e, Error::Io { path, source } if path == &manifest
            && source.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    assert!(names(&e, &manifest), "{e}");
    // Not a directory at all.
    let e = open_err(&dir.path().join("nowhere"));
    assert!(matches!(&e, Error::Io { .. }), "{e:?}");
}

#[test]
fn manifest_not_json() {
    let (dir, _) = good_set();
    let manifest = dir.path().join(MANIFEST_FILE);
    for junk in [
        &b"not json"[..],
        b"",
        b"{\"format\": ",
        &[0xff, 0xfe, 0x00],
        b"[1, 2]",
    ] {
        fs::write(&manifest, junk).unwrap();
        let e = open_err(dir.path());
        assert!(
            matches!(&e, Error::Manifest { path, .. } if path == &manifest),
            "{junk:?}: {e:?}"
        );
        assert!(names(&e, &manifest), "{e}");
    }
}

#[test]
fn manifest_contradicting_itself() {
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 10] = [
        ("format", |m| m["format"] = "parquet".into()),
        ("rows", |m| m["rows"] = 26.into()),
        ("shards[1]", |m| m["shards"][1]["bytes"] = 1.into()),
        ("shards[0].file", |m| {
            m["shards"][0]["file"] = "../escape.bin".into()
        }),
        ("blake3", |m| m["shards"][2]["blake3"] = "ABC".into()),
        ("layout_digest", |m| {
            m["layout"]["fields"][0]["name"] = "z".into()
        }),
        ("splits", |m| m["splits"][0]["rows"] = 24.into()),
        ("layout", |m| m["layout"]["fields"][1]["offset"] = 4.into()),
        // Compressed shards need format version 2 (and their stored keys).
        ("zstd", |m| m["shards"][0]["compression"] = "zstd".into()),
        ("lz4", |m| m["shards"][0]["compression"] = "lz4".into()),
    ];
    for (what, edit) in edits {
        let (dir, _) = good_set();
        let manifest = dir.path().join(MANIFEST_FILE);
        edit_manifest(dir.path(), edit);
        let e = open_err(dir.path());
        assert!(
            matches!(&e, Error::Manifest { path, .. } if path == &manifest),
            "{what}: {e:?}"
        );
        assert!(
            names(&e, &manifest) && e.to_string().contains(what),
            "{what}: {e}"
        );
    }
}

#[test]
fn unknown_manifest_keys_are_ignored() {
    let (dir, _) = good_set();
    edit_manifest(dir.path(), |m| {
        m["written_by_a_later_minor_release"] = serde_json::json!({ "anything": [1, 2] });
    });
    assert_eq!(Dataset::open(dir.path()).unwrap().len(), 25);
}

#[test]
fn flipped_record_byte_is_found_by_verify_only() {
    let (dir, shards) = good_set();
    let stride = layout().stride as usize;
    let at = HEADER_LEN + 3 * stride + 5;
    let mut data = fs::read(&shards[1]).unwrap();
    data[at] ^= 1;
    fs::write(&shards[1], &data).unwrap();
    // open() checks headers and sizes, not contents.
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(
        ds.record(ROWS_PER_SHARD + 3).unwrap()[5],
        (ROWS_PER_SHARD as u8 + 3) ^ 1
    );
    let e = ds.verify().unwrap_err();
    assert!(
        matches!(&e, Error::Checksum { path, expected, actual } if path == &shards[1] && expected != actual),
        "{e:?}"
    );
    assert!(names(&e, &shards[1]), "{e}");
    // The damage is reported against the right file's manifest entry.
    let want = &ds.manifest().shards[1].blake3;
    assert!(matches!(&e, Error::Checksum { expected, .. } if expected == want));
}

#[test]
fn verify_reports_a_shard_removed_after_open() {
    let (dir, shards) = good_set();
    let ds = Dataset::open(dir.path()).unwrap();
    fs::remove_file(&shards[2]).unwrap();
    let e = ds.verify().unwrap_err();
    assert!(
        matches!(&e, Error::Io { path, .. } if path == &shards[2]),
        "{e:?}"
    );
}
