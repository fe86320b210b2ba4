//! The cap on batches in flight: the depth rule, the pool it sizes, and
//! that a capped depth changes no batch.

use super::{
    IN_FLIGHT_BYTES, Loader, LoaderConfig, Source, busy_threads, depth, fit_cores, parse_cache_size,
};
use crate::dataset::Dataset;
use crate::dtype::DType;
use crate::layout::{FieldSpec, RecordLayout};
use crate::order::{Cursor, LastBatch};
use crate::writer::ShardSetWriter;

/// A set of `rows` records of `stride` bytes (at least 8); record `i`
/// starts with `i` and every byte depends on `i`.
fn write_set(rows: u64, stride: usize) -> (tempfile::TempDir, Dataset) {
    let dir = tempfile::tempdir().unwrap();
    let layout = RecordLayout::packed(&[
        FieldSpec::new("i", DType::U64, &[]),
        FieldSpec::new("pad", DType::U8, &[stride as u64 - 8]),
    ])
    .unwrap();
    let mut w = ShardSetWriter::new(dir.path(), layout, 4 << 20).unwrap();
    w.begin_split("all").unwrap();
    for i in 0..rows {
        let mut rec: Vec<u8> = (0..stride)
            .map(|b| (i.wrapping_mul(97) ^ (b as u64).wrapping_mul(31)) as u8)
            .collect();
        rec[..8].copy_from_slice(&i.to_le_bytes());
        w.write_records(&rec).unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    (dir, ds)
}

/// Every batch of epochs `0..epochs`: its index and bytes.
fn batches(l: &Loader, epochs: u64) -> Vec<(u64, Vec<u8>)> {
    (0..epochs)
        .flat_map(|e| l.epoch(e).map(|b| (b.index(), b.bytes().to_vec())))
        .collect()
}

fn pool_cap(l: &Loader) -> String {
    let s = format!("{:?}", l.pool);
    let at = s.find("cap: ").unwrap() + 5;
    s[at..].chars().take_while(char::is_ascii_digit).collect()
}

#[test]
fn depth_follows_the_byte_budget() {
    const MIB: u64 = 1 << 20;
    const B: u64 = IN_FLIGHT_BYTES;
    assert_eq!(IN_FLIGHT_BYTES, 16 * MIB);
    // 160-byte records in batches of 256 or 4096: the full depth.
    assert_eq!(depth(2, 2, 160 * 256, B), 3);
    assert_eq!(depth(2, 2, 160 * 4096, B), 3);
    assert_eq!(depth(2, 8, 160 * 4096, B), 9);
    // ... but eight threads of them share 16 MiB: 3 each (5.2 MB).
    assert_eq!(depth(8, 8, 160 * 4096, B), 3);
    // 224x224x3 + id in batches of 16 (2.4 MB): three fit per thread.
    let image = 224 * 224 * 3 + 8;
    assert_eq!(depth(2, 2, image * 16, B), 3);
    assert_eq!(depth(2, 8, image * 16, B), 3);
    // ... in batches of 64 (9.6 MB): one per thread, with one or two.
    assert_eq!(depth(2, 2, image * 64, B), 1);
    assert_eq!(depth(1, 2, image * 64, B), 1);
    // 4 MiB batches: 16 MiB hold 4, shared by the threads.
    assert_eq!(depth(1, 8, 4 * MIB, B), 4);
    assert_eq!(depth(2, 8, 4 * MIB, B), 2);
    assert_eq!(depth(4, 8, 4 * MIB, B), 1);
    // No thread counts as one; never less than one batch, nor more than
    // the prefetch asked for (prefetch 0 means 1).
    assert_eq!(depth(0, 8, 4 * MIB, B), 4);
    assert_eq!(depth(2, 0, 1, B), 2);
    assert_eq!(depth(256, 2, 1 << 40, B), 1);
    assert_eq!(depth(2, 2, 0, B), 3);
}

#[test]
fn threads_are_capped_by_the_byte_budget() {
    const MIB: u64 = 1 << 20;
    const B: u64 = IN_FLIGHT_BYTES;
    let image = 224 * 224 * 3 + 8;
    // Small batches: every thread asked for.
    assert_eq!(busy_threads(2, 160 * 4096, B), 2);
    assert_eq!(busy_threads(8, 160 * 4096, B), 8);
    assert_eq!(busy_threads(2, image * 16, B), 2);
    // 9.6 MB batches: one thread; 4 MiB: four; none stays none.
    assert_eq!(busy_threads(2, image * 64, B), 1);
    assert_eq!(busy_threads(8, 4 * MIB, B), 4);
    assert_eq!(busy_threads(3, 4 * MIB, B), 3);
    assert_eq!(busy_threads(0, 4 * MIB, B), 0);
    assert_eq!(busy_threads(0, 1, B), 0);
    assert_eq!(busy_threads(4, 1 << 40, B), 1);
}

#[test]
fn a_large_cache_gives_large_batches_every_thread() {
    const MIB: u64 = 1 << 20;
    let image = 224 * 224 * 3 + 8;
    // Half of a 260 MiB cache: two threads of 9.6 MB batches, three each.
    let big = 130 * MIB;
    assert_eq!(busy_threads(2, image * 64, big), 2);
    assert_eq!(depth(2, 2, image * 64, big), 3);
    // 38 MB batches: three fit, two threads hold one each.
    assert_eq!(busy_threads(2, image * 256, big), 2);
    assert_eq!(depth(2, 2, image * 256, big), 1);
    // The budget is never below the floor, whatever this machine has.
    assert!(super::in_flight_bytes() >= IN_FLIGHT_BYTES);
}

#[test]
fn cache_sizes_read_as_sysfs_writes_them() {
    assert_eq!(parse_cache_size("48K\n"), Some(48 << 10));
    assert_eq!(parse_cache_size("266240K"), Some(266_240 << 10));
    assert_eq!(parse_cache_size("2M"), Some(2 << 20));
    assert_eq!(parse_cache_size("1G"), Some(1 << 30));
    assert_eq!(parse_cache_size("512"), Some(512));
    assert_eq!(parse_cache_size(""), None);
    assert_eq!(parse_cache_size("12Q"), None);
    assert_eq!(parse_cache_size("K"), None);
    assert_eq!(parse_cache_size("99999999999999999999K"), None);
}

#[test]
fn the_pool_holds_threads_times_depth_plus_two() {
    let (_dir, ds) = write_set(64, 32 << 10);
    for (threads, prefetch, batch, want_busy, want_depth) in [
        // 160 records of 32 KiB = 5 MiB: 3 fit in 16 MiB.
        (1usize, 8usize, 160u64, 1usize, 3usize),
        (2, 2, 160, 2, 1),
        (0, 2, 160, 0, 3),
        // 128 KiB: the full depth.
        (2, 2, 4, 2, 3),
        (3, 1, 4, 3, 2),
        // 10 MiB: one thread, one batch.
        (2, 2, 320, 1, 1),
    ] {
        let cfg = LoaderConfig {
            batch_size: batch,
            threads,
            prefetch,
            last_batch: LastBatch::Partial,
            ..Default::default()
        };
        let l = Loader::from_source(Source::Set(ds.clone()), cfg, IN_FLIGHT_BYTES, 64).unwrap();
        assert_eq!(l.busy, want_busy, "threads {threads} batch {batch}");
        assert_eq!(l.depth, want_depth, "threads {threads} batch {batch}");
        let want_cap = want_busy.max(1) * want_depth + 2;
        assert_eq!(pool_cap(&l), want_cap.to_string());
    }
}

#[test]
fn large_batches_are_capped_and_unchanged() {
    // 300 records of 32 KiB in batches of 192 (6 MiB): one thread holds
    // two batches, two one each (all capped depths); of three asked for,
    // two start.
    let (_dir, ds) = write_set(300, 32 << 10);
    for shuffle in [true, false] {
        let cfg = LoaderConfig {
            batch_size: 192,
            shuffle,
            seed: 5,
            last_batch: LastBatch::Pad,
            threads: 0,
            zero_copy: false,
            ..Default::default()
        };
        let reference = batches(&Loader::new(&ds, cfg.clone()).unwrap(), 3);
        assert_eq!(reference.len(), 6);
        for (threads, want_busy, want_depth) in [(1, 1, 2), (2, 2, 1), (3, 2, 1)] {
            let cfg = LoaderConfig {
                threads,
                ..cfg.clone()
            };
            let l = Loader::from_source(Source::Set(ds.clone()), cfg, IN_FLIGHT_BYTES, 64).unwrap();
            assert_eq!((l.busy, l.depth), (want_busy, want_depth));
            assert!(l.depth <= l.cfg.prefetch, "the depth is capped");
            assert_eq!(batches(&l, 3), reference, "threads {threads}");
        }
    }
}

#[test]
fn a_capped_depth_changes_no_batch() {
    // Small records, many batches, the depth forced to each capped value:
    // the same batches as the consumer building them all.
    let (_dir, ds) = write_set(1000, 16);
    for (shuffle, policy, bs) in [
        (true, LastBatch::Partial, 33),
        (true, LastBatch::Pad, 40),
        (false, LastBatch::Drop, 7),
        (false, LastBatch::Pad, 64),
    ] {
        let cfg = LoaderConfig {
            batch_size: bs,
            shuffle,
            seed: 3,
            last_batch: policy,
            threads: 0,
            prefetch: 4,
            ..Default::default()
        };
        let reference = batches(&Loader::new(&ds, cfg.clone()).unwrap(), 2);
        for threads in [1, 2, 3, 5] {
            for d in 1..=4 {
                let mut l = Loader::new(
                    &ds,
                    LoaderConfig {
                        threads,
                        ..cfg.clone()
                    },
                )
                .unwrap();
                l.depth = d;
                assert_eq!(batches(&l, 2), reference, "threads {threads} depth {d}");
                // Stopping part-way and resuming gives the rest.
                let mut it = l.epoch(1);
                let head: Vec<_> = it.by_ref().take(3).map(|b| b.bytes().to_vec()).collect();
                let cursor: Cursor = it.cursor();
                drop(it);
                let tail: Vec<_> = l
                    .resume(cursor)
                    .unwrap()
                    .map(|b| b.bytes().to_vec())
                    .collect();
                let whole: Vec<_> = l.epoch(1).map(|b| b.bytes().to_vec()).collect();
                assert_eq!([head, tail].concat(), whole, "threads {threads} depth {d}");
            }
        }
    }
}

#[test]
fn threads_and_a_building_consumer_never_outnumber_the_cores() {
    // (threads asked, cores) -> (threads started, consumer builds)
    for (busy, cores, want) in [
        (0, 2, (0, false)),
        (1, 2, (1, true)),
        (2, 2, (1, true)),
        (8, 2, (1, true)),
        (1, 1, (1, false)),
        (2, 1, (1, false)),
        (2, 4, (2, true)),
        (3, 4, (3, true)),
        (4, 4, (3, true)),
        (6, 4, (3, true)),
        (2, 0, (1, false)),
    ] {
        assert_eq!(
            fit_cores(busy, cores),
            want,
            "{busy} threads, {cores} cores"
        );
    }
}

#[test]
fn a_consumer_that_builds_while_it_waits_changes_no_batch() {
    // Threads on 2 and on 64 cores (the consumer builds whenever its batch
    // is not ready), a fast and a slow consumer: every batch as without
    // threads, in order.
    let (_dir, ds) = write_set(5_000, 24);
    for shuffle in [true, false] {
        let base = LoaderConfig {
            batch_size: 96,
            shuffle,
            seed: 11,
            threads: 0,
            ..Default::default()
        };
        let plain = Loader::new(&ds, base.clone()).unwrap();
        let reference = batches(&plain, 2);
        let want: Vec<Vec<u8>> = plain.epoch(1).map(|b| b.bytes().to_vec()).collect();
        for (threads, cores) in [(1, 2), (2, 2), (3, 2), (1, 64), (2, 64), (5, 64)] {
            let cfg = LoaderConfig {
                threads,
                ..base.clone()
            };
            let l =
                Loader::from_source(Source::Set(ds.clone()), cfg, IN_FLIGHT_BYTES, cores).unwrap();
            assert!(l.help, "threads {threads} cores {cores}");
            assert_eq!(batches(&l, 2), reference, "threads {threads} cores {cores}");
            // A consumer slower than the threads: they run ahead, it builds
            // nothing, and takes the same batches.
            let mut slow = Vec::new();
            for b in l.epoch(1) {
                std::thread::sleep(std::time::Duration::from_micros(300));
                slow.push(b.bytes().to_vec());
            }
            assert_eq!(slow, want, "slow consumer, threads {threads} cores {cores}");
        }
    }
}
