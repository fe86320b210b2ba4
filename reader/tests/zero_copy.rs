//! Sequential batches inside one shard borrow the memory map; they must read
//! exactly what the copying path reads, and writing to them must never reach
//! the files.

use tessera_reader::{
    DType, Dataset, FieldSpec, LastBatch, Loader, LoaderConfig, RecordLayout, ShardSetWriter,
};

fn set(rows: u64, shard_rows: u64) -> (tempfile::TempDir, Dataset) {
    let dir = tempfile::tempdir().unwrap();
    let layout = RecordLayout::packed(&[FieldSpec::new("i", DType::U64, &[2])]).unwrap();
    let mut w = ShardSetWriter::new(dir.path(), layout, 4096 + shard_rows * 16).unwrap();
    w.begin_split("all").unwrap();
    for i in 0..rows {
        w.write_records(&[i.to_le_bytes(), (!i).to_le_bytes()].concat())
            .unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    (dir, ds)
}

fn batches(ds: &Dataset, zero_copy: bool, threads: usize) -> Vec<(bool, Vec<u8>)> {
    let cfg = LoaderConfig {
        batch_size: 7,
        shuffle: false,
        threads,
        zero_copy,
        last_batch: LastBatch::Partial,
        ..Default::default()
    };
    Loader::new(ds, cfg)
        .unwrap()
        .epoch(0)
        .map(|b| (b.is_zero_copy(), b.bytes().to_vec()))
        .collect()
}

#[test]
fn zero_copy_batches_equal_copied_ones() {
    // 100 rows in shards of 30: some batches of 7 straddle a shard boundary.
    let (_d, ds) = set(100, 30);
    for threads in [0, 1, 2, 3] {
        let zc = batches(&ds, true, threads);
        let copied = batches(&ds, false, threads);
        assert_eq!(zc.len(), copied.len());
        for (k, ((is_zc, a), (was_zc, b))) in zc.iter().zip(&copied).enumerate() {
            assert_eq!(a, b, "batch {k}, threads {threads}");
            assert!(!was_zc);
            let first = (k * 7) as u64;
            let last = (first + 6).min(99);
            assert_eq!(*is_zc, first / 30 == last / 30, "batch {k} zero-copy flag");
        }
        assert!(zc.iter().any(|(z, _)| *z) && zc.iter().any(|(z, _)| !*z));
    }
}

#[test]
fn writing_a_zero_copy_batch_copies_it_first() {
    let (_d, ds) = set(20, 20);
    let cfg = LoaderConfig {
        batch_size: 5,
        shuffle: false,
        threads: 0,
        ..Default::default()
    };
    let loader = Loader::new(&ds, cfg).unwrap();
    let mut b = loader.epoch(0).next().unwrap();
    assert!(b.is_zero_copy());
    b.bytes_mut()[0] ^= 0xff;
    assert!(!b.is_zero_copy());
    assert_eq!(b.field::<u64>("i").unwrap().row(0)[0], 0xff);
    assert_eq!(
        ds.field::<u64>(0, "i").unwrap()[0],
        0,
        "the map was written"
    );
    assert!(ds.verify().is_ok());
}
