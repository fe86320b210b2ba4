use super::*;
use crate::dtype::DType;
use crate::layout::FieldSpec;

fn sample() -> Manifest {
    let layout = RecordLayout::packed(&[FieldSpec::new("x", DType::F32, &[4])]).unwrap();
    let shard = |file: &str, rows: u64| ShardInfo {
        file: file.into(),
        rows,
        bytes: 4096 + rows * 16,
        blake3: "ab".repeat(32),
        compression: Compression::None,
        stored_bytes: None,
        stored_blake3: None,
    };
    Manifest::new(
        layout,
        vec![shard("shard-00000.bin", 10), shard("shard-00001.bin", 5)],
        vec![
            SplitInfo {
                name: "train".into(),
                start: 0,
                rows: 12,
            },
            SplitInfo {
                name: "val".into(),
                start: 12,
                rows: 3,
            },
        ],
    )
    .unwrap()
}

fn reparse(m: &Manifest) -> Result<Manifest> {
    Manifest::parse(&m.to_json(), Path::new("m.json"))
}

#[test]
fn round_trip() {
    let m = sample();
    assert_eq!(reparse(&m).unwrap(), m);
}

#[test]
fn order_version_defaults_to_1_when_absent_and_is_written_when_not() {
    let m = sample();
    assert_eq!(m.order(), OrderVersion::V2);
    let text = String::from_utf8(m.to_json()).unwrap();
    assert!(text.contains("\"order_version\": 2"));
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("order_version");
    let mut old = serde_json::to_vec_pretty(&v).unwrap();
    old.push(b'\n');
    let parsed = Manifest::parse(&old, Path::new("m.json")).unwrap();
    assert_eq!(parsed.order(), OrderVersion::V1);
    // A version-1 manifest is rewritten without the key.
    let again = String::from_utf8(parsed.to_json()).unwrap();
    assert!(!again.contains("order_version"));
}

#[test]
fn compressed_shards_make_a_version_2_manifest() {
    let mut m = sample();
    assert_eq!(m.format_version, 1);
    let mut shards = m.shards.clone();
    shards[1].compression = Compression::Zstd;
    shards[1].file = "shard-00001.bin.zst".into();
    shards[1].stored_bytes = Some(300);
    shards[1].stored_blake3 = Some("cd".repeat(32));
    let z = Manifest::new(m.layout.clone(), shards, m.splits.clone()).unwrap();
    assert_eq!(z.format_version, 2);
    assert!(z.is_compressed());
    assert_eq!(z.shards[1].file_bytes(), 300);
    assert_eq!(z.shards[0].file_bytes(), z.shards[0].bytes);
    assert_eq!(reparse(&z).unwrap(), z);
    // A compressed shard in a version-1 manifest, or without its keys.
    let mut bad = z.clone();
    bad.format_version = 1;
    assert!(
        reparse(&bad)
            .unwrap_err()
            .to_string()
            .contains("format_version 2")
    );
    let mut bad = z.clone();
    bad.shards[1].stored_blake3 = None;
    assert!(
        reparse(&bad)
            .unwrap_err()
            .to_string()
            .contains("stored_blake3")
    );
    // A version-2 manifest may hold only uncompressed shards.
    m.format_version = 2;
    assert_eq!(reparse(&m).unwrap(), m);
}

#[test]
fn rejects_inconsistencies() {
    let mut m = sample();
    m.rows = 16;
    assert!(
        reparse(&m)
            .unwrap_err()
            .to_string()
            .contains("shards hold 15")
    );
    let mut m = sample();
    m.shards[1].bytes += 1;
    assert!(reparse(&m).unwrap_err().to_string().contains("shards[1]"));
    let mut m = sample();
    m.shards[0].file = "../etc/passwd".into();
    assert!(reparse(&m).is_err());
    let mut m = sample();
    m.splits[1].start = 13;
    assert!(
        reparse(&m)
            .unwrap_err()
            .to_string()
            .contains("starts at row 13")
    );
    let mut m = sample();
    m.layout.stride = 32;
    assert!(
        reparse(&m)
            .unwrap_err()
            .to_string()
            .contains("layout_digest")
    );
    let mut m = sample();
    m.format_version = 3;
    assert!(matches!(
        reparse(&m),
        Err(Error::UnsupportedVersion { found: 3, .. })
    ));
    let mut m = sample();
    m.order_version = 3;
    assert!(
        reparse(&m)
            .unwrap_err()
            .to_string()
            .contains("order_version")
    );
    let mut m = sample();
    m.shards[0].blake3 = "XYZ".into();
    assert!(reparse(&m).unwrap_err().to_string().contains("blake3"));
    let mut m = sample();
    m.shards[0].stored_bytes = Some(100);
    assert!(
        reparse(&m)
            .unwrap_err()
            .to_string()
            .contains("only for compressed")
    );
    assert!(Manifest::parse(b"{", Path::new("m.json")).is_err());
    assert!(Manifest::parse(b"[]", Path::new("m.json")).is_err());
}
