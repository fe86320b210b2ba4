//! Regression tests named after the bugs they pin (issue 9).

use tessera_reader::{
    DType, Dataset, FieldSpec, LastBatch, Loader, LoaderConfig, RecordLayout, ShardSetWriter,
};

fn ids(dir: &std::path::Path, n: u64) -> Dataset {
    let layout = RecordLayout::packed(&[FieldSpec::new("id", DType::U64, &[])]).unwrap();
    let mut w = ShardSetWriter::new(dir, layout, 1 << 16).unwrap();
    w.begin_split("all").unwrap();
    for i in 0..n {
        w.write_records(&i.to_le_bytes()).unwrap();
    }
    w.finish().unwrap();
    Dataset::open(dir).unwrap()
}

/// N = 10, world 7, batch 1, `partial`: ranks get [1,1,2,1,2,1,2] batches.
/// Each rank used to save the position after its own last batch (7 or 10),
/// so restoring rank 0's end-of-epoch checkpoint re-read 3 records.
#[test]
fn partial_ranks_save_the_same_end_of_epoch_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let ds = ids(dir.path(), 10);
    let mut counts = Vec::new();
    for rank in 0..7 {
        let cfg = LoaderConfig {
            batch_size: 1,
            rank,
            world_size: 7,
            last_batch: LastBatch::Partial,
            seed: 1,
            ..Default::default()
        };
        let loader = Loader::new(&ds, cfg).unwrap();
        let mut it = loader.epoch(0);
        let mut k = 0;
        while it.next().is_some() {
            k += 1;
            // Mid-epoch, every rank's cursor after step k is the same.
            if k == 1 {
                assert_eq!(it.cursor().position, 7, "rank {rank} after step 1");
            }
        }
        counts.push(k);
        assert_eq!(
            it.cursor().position,
            10,
            "rank {rank} at the end of the epoch"
        );
        assert_eq!(loader.resume(it.cursor()).unwrap().count(), 0);
    }
    assert_eq!(counts, [1, 1, 2, 1, 2, 1, 2]);
}

/// Whatever the timing (fast consumer, slow consumer, both in turn), and
/// whoever builds a batch (the consumer with 0 threads, else the threads,
/// whose queues fill and drain), the sequence is the single-threaded one.
#[test]
fn the_timing_of_threads_and_consumer_changes_no_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = ids(dir.path(), 5000);
    let cfg = |threads: usize, prefetch: usize| LoaderConfig {
        batch_size: 37,
        seed: 5,
        threads,
        prefetch,
        last_batch: LastBatch::Partial,
        ..Default::default()
    };
    let want: Vec<Vec<u64>> = Loader::new(&ds, cfg(0, 1))
        .unwrap()
        .epoch(2)
        .map(|b| b.field::<u64>("id").unwrap().to_vec())
        .collect();
    for threads in [1, 2, 3, 5] {
        for prefetch in [1, 2, 4] {
            let l = Loader::new(&ds, cfg(threads, prefetch)).unwrap();
            let mut got = Vec::new();
            for (k, b) in l.epoch(2).enumerate() {
                got.push(b.field::<u64>("id").unwrap().to_vec());
                // Slow down now and then, so the threads get ahead; then
                // race again, so the consumer catches up and builds.
                if k % 17 < 3 {
                    std::thread::sleep(std::time::Duration::from_micros(300));
                }
            }
            assert_eq!(got, want, "threads {threads} prefetch {prefetch}");
        }
    }
}
