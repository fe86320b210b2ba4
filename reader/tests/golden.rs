//! Format v1 compatibility: the shard set in `tests/golden/v1/` was written by
//! `examples/write_golden.rs` when v1 was defined. Every future reader must
//! open it and read the same values, and the writer must keep producing the
//! same bytes for the same records.

#[path = "../examples/write_golden.rs"]
#[allow(dead_code)]
mod golden;

use std::path::Path;
use tessera_reader::{Dataset, Manifest, ShardSetWriter};

fn golden_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/v1"))
}

#[test]
fn the_v1_golden_set_opens_verifies_and_reads_back() {
    let ds = Dataset::open(golden_dir()).expect("open golden v1");
    ds.verify().expect("golden checksums");
    let layout = golden::layout();
    assert_eq!(ds.layout(), &layout);
    assert_eq!(ds.len(), 23);
    assert!(ds.manifest().shards.len() >= 3);
    for i in 0..ds.len() {
        assert_eq!(
            ds.record(i).unwrap(),
            golden::record(&layout, i).as_slice(),
            "record {i}"
        );
    }
    let val = ds.split("val").unwrap();
    assert_eq!(val.len(), 6);
    assert_eq!(val.field::<u64>(0, "id").unwrap(), &[17 * 1000 + 7]);
    assert_eq!(ds.field::<u16>(3, "h").unwrap(), &[0x3c00, 0xc000]);
}

#[test]
fn todays_writer_reproduces_the_golden_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let layout = golden::layout();
    let mut w = ShardSetWriter::new(dir.path(), layout.clone(), 4096 + 8 * layout.stride).unwrap();
    let mut i = 0;
    for (name, rows) in golden::SPLITS {
        w.begin_split(name).unwrap();
        for _ in 0..rows {
            w.write_records(&golden::record(&layout, i)).unwrap();
            i += 1;
        }
    }
    let fresh = w.finish_with(|m| m.name = "golden-v1".into()).unwrap();
    let bytes = std::fs::read(golden_dir().join("manifest.json")).unwrap();
    let committed = Manifest::parse(&bytes, Path::new("golden manifest")).unwrap();
    assert_eq!(fresh.layout_digest, committed.layout_digest);
    assert_eq!(
        fresh.shards, committed.shards,
        "shard bytes changed: that is a new format version"
    );
    assert_eq!(fresh.splits, committed.splits);
}

#[test]
fn the_v1_golden_set_keeps_the_version_1_order() {
    use tessera_reader::{EpochOrder, LastBatch, Loader, LoaderConfig, OrderVersion};
    let ds = Dataset::open(golden_dir()).unwrap();
    assert_eq!(ds.manifest().order_version, 1);
    assert_eq!(ds.order_version(), OrderVersion::V1);
    let cfg = LoaderConfig {
        batch_size: 5,
        seed: 3,
        last_batch: LastBatch::Partial,
        ..Default::default()
    };
    let loader = Loader::new(&ds, cfg).unwrap();
    for epoch in 0..3 {
        let got: Vec<u64> = loader
            .epoch(epoch)
            .flat_map(|b| b.field::<u64>("id").unwrap().to_vec())
            .collect();
        let v1 = EpochOrder::shuffled_as(OrderVersion::V1, ds.len(), 3, epoch);
        let want: Vec<u64> = (0..ds.len())
            .map(|p| ds.field::<u64>(v1.get(p), "id").unwrap()[0])
            .collect();
        assert_eq!(got, want, "epoch {epoch}");
        let v2 = EpochOrder::shuffled(ds.len(), 3, epoch);
        assert_ne!(
            (0..ds.len()).map(|p| v1.get(p)).collect::<Vec<_>>(),
            (0..ds.len()).map(|p| v2.get(p)).collect::<Vec<_>>()
        );
    }
}

fn golden_v2_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/v2"))
}

/// Format v2: the same records, every shard stored zstd-compressed, written
/// by `examples/write_golden.rs --zstd` when v2 was defined.
#[test]
fn the_v2_golden_set_opens_verifies_and_reads_back() {
    let ds = Dataset::open(golden_v2_dir()).expect("open golden v2");
    assert_eq!(ds.manifest().format_version, 2);
    assert!(ds.manifest().shards.iter().all(|s| s.is_compressed()));
    ds.verify().expect("golden v2 checksums");
    let layout = golden::layout();
    assert_eq!(ds.layout(), &layout);
    assert_eq!(ds.len(), 23);
    for i in 0..ds.len() {
        assert_eq!(
            ds.record(i).unwrap(),
            golden::record(&layout, i).as_slice(),
            "record {i}"
        );
    }
    assert_eq!(ds.split("val").unwrap().len(), 6);
}

#[test]
fn todays_writer_reproduces_the_golden_v2_set() {
    let dir = tempfile::tempdir().unwrap();
    let m = golden::write(dir.path(), "golden-v2").unwrap();
    let fresh = golden::compress(dir.path(), m).unwrap();
    let bytes = std::fs::read(golden_v2_dir().join("manifest.json")).unwrap();
    let committed = Manifest::parse(&bytes, Path::new("golden v2 manifest")).unwrap();
    assert_eq!(fresh.format_version, committed.format_version);
    assert_eq!(fresh.layout_digest, committed.layout_digest);
    // The decompressed shards are the format; the compressed bytes are also
    // pinned while the zstd library stays at the version Cargo.lock names.
    assert_eq!(
        fresh.shards, committed.shards,
        "shard bytes changed: that is a new format version (or a new zstd)"
    );
    assert_eq!(fresh.splits, committed.splits);
}
