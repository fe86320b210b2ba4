//! Properties of the ordering and of the reader, checked on random parameters
//! and on real shard sets written by `ShardSetWriter`.
//!
//! Every record written here is a pure function of its global row index (see
//! `record_bytes`), so any batch can be checked byte by byte against the rows
//! it claims to hold, independently of how the reader found them.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeSet;
use tessera_reader::{
    Batch, Cursor, DType, Dataset, EpochOrder, FieldSpec, HEADER_LEN, LastBatch, Loader,
    LoaderConfig, OrderVersion, RecordLayout, Schedule, ShardSetWriter,
};

// ---------------------------------------------------------------------------
// Test data
// ---------------------------------------------------------------------------

/// Rows per shard in the test sets (a shard also ends where a split ends).
const SHARD_ROWS: u64 = 37;

fn layout() -> RecordLayout {
    RecordLayout::packed(&[
        FieldSpec::new("tag", DType::U8, &[3]),
        FieldSpec::new("idx", DType::U64, &[]),
        FieldSpec::new("vals", DType::I32, &[3]),
    ])
    .unwrap()
}

/// The bytes of global row `i`: every byte depends on `i`, and field `idx`
/// holds `i` itself.
fn record_bytes(layout: &RecordLayout, i: u64) -> Vec<u8> {
    let stride = layout.stride as usize;
    let mut rec: Vec<u8> = (0..stride)
        .map(|b| (i.wrapping_mul(131) ^ (b as u64 * 29) ^ (i >> 7)) as u8)
        .collect();
    let off = layout.field("idx").unwrap().offset as usize;
    rec[off..off + 8].copy_from_slice(&i.to_le_bytes());
    rec
}

/// A shard set in a temporary directory.
struct TestSet {
    _dir: tempfile::TempDir,
    ds: Dataset,
    layout: RecordLayout,
    /// Global first row of each shard, plus the total, derived from the
    /// writing plan (not from the manifest).
    bounds: Vec<u64>,
}

/// Writes `splits` (name, rows) in order, `SHARD_ROWS` rows per shard.
fn write_set(splits: &[(&str, u64)]) -> TestSet {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout();
    let target = HEADER_LEN as u64 + SHARD_ROWS * layout.stride;
    let mut w = ShardSetWriter::new(dir.path(), layout.clone(), target).unwrap();
    let mut row = 0u64;
    let mut bounds = vec![0u64];
    for &(name, rows) in splits {
        w.begin_split(name).unwrap();
        // Write in uneven chunks, so shard boundaries do not follow the calls.
        let mut left = rows;
        let mut chunk = 1u64;
        while left > 0 {
            let n = chunk.min(left);
            let bytes: Vec<u8> = (row..row + n)
                .flat_map(|i| record_bytes(&layout, i))
                .collect();
            w.write_records(&bytes).unwrap();
            row += n;
            left -= n;
            chunk = chunk * 3 + 1;
        }
        let split_start = *bounds.last().unwrap();
        let mut s = split_start + SHARD_ROWS;
        while s < row {
            bounds.push(s);
            s += SHARD_ROWS;
        }
        if row > split_start {
            bounds.push(row);
        }
    }
    w.finish().unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    TestSet {
        _dir: dir,
        ds,
        layout,
        bounds,
    }
}

/// Reads the `idx` field of each record of a batch, after checking that the
/// record's bytes are exactly those written for that index.
fn batch_rows(layout: &RecordLayout, b: &Batch) -> Vec<u64> {
    let idx = b.field::<u64>("idx").unwrap();
    (0..b.rows())
        .map(|j| {
            let i = idx.row(j)[0];
            assert_eq!(
                b.record(j).unwrap(),
                &record_bytes(layout, i)[..],
                "record {j} of batch {}",
                b.index()
            );
            i
        })
        .collect()
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn last_batch_policy() -> impl Strategy<Value = LastBatch> {
    prop_oneof![
        Just(LastBatch::Drop),
        Just(LastBatch::Partial),
        Just(LastBatch::Pad)
    ]
}

// ---------------------------------------------------------------------------
// Epoch order
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(Config { cases: 128, failure_persistence: None, ..Config::default() })]

    #[test]
    fn shuffled_order_is_a_permutation(n in 0u64..4000, seed: u64, epoch: u64) {
        let order = EpochOrder::shuffled(n, seed, epoch);
        prop_assert_eq!(order.len(), n);
        let mut seen = vec![false; n as usize];
        for p in 0..n {
            let i = order.get(p);
            prop_assert!(i < n, "position {} maps to {} outside 0..{}", p, i, n);
            prop_assert!(!seen[i as usize], "record {} visited twice", i);
            seen[i as usize] = true;
        }
        // Same inputs, same order.
        let again = EpochOrder::shuffled(n, seed, epoch);
        for p in (0..n).step_by(97) {
            prop_assert_eq!(order.get(p), again.get(p));
        }
    }

    #[test]
    fn version_1_order_follows_the_documented_formula(n in 1u64..5000, seed: u64, epoch: u64) {
        let order = EpochOrder::shuffled_as(OrderVersion::V1, n, seed, epoch);
        let reference = ReferenceOrder::new(n, seed, epoch);
        for p in 0..n.min(300) {
            prop_assert_eq!(order.get(p), reference.get(p), "position {}", p);
        }
    }

    #[test]
    fn large_orders_stay_in_range(n in 1u64..u64::MAX, seed: u64, epoch: u64, probe: u64) {
        let p = probe % n;
        let v1 = EpochOrder::shuffled_as(OrderVersion::V1, n, seed, epoch);
        let i = v1.get(p);
        prop_assert!(i < n);
        prop_assert_eq!(i, ReferenceOrder::new(n, seed, epoch).get(p));
        if n > tessera_reader::order::TABLE_MAX {
            prop_assert!(EpochOrder::shuffled(n, seed, epoch).get(p) < n);
        }
    }
}

#[test]
fn sequential_order_is_the_identity() {
    let order = EpochOrder::sequential(1000);
    assert!(order.is_sequential());
    assert!((0..1000).all(|p| order.get(p) == p));
    assert_eq!(EpochOrder::new(10, false, 1, 2), EpochOrder::sequential(10));
    assert!(!EpochOrder::new(10, true, 1, 2).is_sequential());
}

/// The version-1 epoch order re-implemented from docs/FORMAT.md ("Reading
/// order"), as a reader in another language would, to pin the documented
/// formulas (`tests/order_versions.rs` does the same for version 2).
struct ReferenceOrder {
    n: u64,
    h: u32,
    keys: [u64; 4],
}

impl ReferenceOrder {
    fn mix(z: u64) -> u64 {
        let z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    fn new(n: u64, seed: u64, epoch: u64) -> Self {
        // b = number of bits needed to write n - 1; h = max(1, ceil(b / 2)).
        let mut b = 0u32;
        while b < 64 && (n - 1) >> b != 0 {
            b += 1;
        }
        let h = b.div_ceil(2).max(1);
        // "tessera!" as a big-endian u64.
        let tweak = u64::from_be_bytes(*b"tessera!");
        let mut s = seed ^ Self::mix(epoch ^ tweak);
        let mut keys = [0u64; 4];
        for k in &mut keys {
            s = s.wrapping_add(0x9e3779b97f4a7c15);
            *k = Self::mix(s);
        }
        ReferenceOrder { n, h, keys }
    }

    fn round_trip(&self, x: u64) -> u64 {
        let mask = (1u64 << self.h) - 1;
        let (mut l, mut r) = (x >> self.h, x & mask);
        for k in self.keys {
            let f = Self::mix(r ^ k) & mask;
            let new_r = l ^ f;
            l = r;
            r = new_r;
        }
        (l << self.h) | r
    }

    fn get(&self, p: u64) -> u64 {
        let mut x = self.round_trip(p);
        while x >= self.n {
            x = self.round_trip(x);
        }
        x
    }
}

// ---------------------------------------------------------------------------
// Schedule: one epoch over all ranks
// ---------------------------------------------------------------------------

/// All ranks' batches of one epoch from `start`, as positions (not reduced
/// modulo n).
fn epoch_positions(
    n: u64,
    bs: u64,
    world: u64,
    policy: LastBatch,
    start: u64,
) -> Vec<Vec<std::ops::Range<u64>>> {
    (0..world)
        .map(|r| {
            let s = Schedule::new(n, bs, r, world, policy).unwrap();
            (0..s.batches_from(start))
                .map(|k| s.batch_positions(start, k))
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(Config { cases: 256, failure_persistence: None, ..Config::default() })]

    #[test]
    fn schedule_covers_the_epoch_as_the_policy_says(
        n in 0u64..2000,
        bs in 1u64..70,
        world in 1u64..9,
        policy in last_batch_policy(),
        start_batches in 0u64..4,
    ) {
        let g = bs * world;
        // Resuming at a global-batch boundary must behave like a fresh epoch
        // over the remaining positions.
        let start = (start_batches * g).min(n);
        let per_rank = epoch_positions(n, bs, world, policy, start);
        let left = n - start;

        // Ranks are disjoint, and no rank sees a position twice.
        let mut owner = std::collections::BTreeMap::new();
        for (r, batches) in per_rank.iter().enumerate() {
            for b in batches {
                prop_assert!(b.start <= b.end);
                for p in b.clone() {
                    prop_assert!(owner.insert(p, r).is_none(), "position {} given twice", p);
                }
            }
        }
        let positions: BTreeSet<u64> = owner.keys().copied().collect();
        let counts: Vec<usize> = per_rank.iter().map(Vec::len).collect();
        match policy {
            LastBatch::Partial => {
                let expected: BTreeSet<u64> = (start..n).collect();
                prop_assert_eq!(&positions, &expected);
                for b in per_rank.iter().flatten() {
                    prop_assert!(b.end - b.start <= bs);
                    prop_assert!(b.end > b.start, "empty batch {:?}", b);
                }
                // Shares of the last, short global batch differ by at most one.
                let last_base = start + left / g * g;
                if left % g != 0 {
                    let shares: Vec<u64> = per_rank
                        .iter()
                        .map(|batches| {
                            batches.iter().filter(|b| b.start >= last_base).map(|b| b.end - b.start).sum()
                        })
                        .collect();
                    let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                    prop_assert!(hi - lo <= 1, "uneven last shares {:?}", shares);
                }
            }
            LastBatch::Drop => {
                let full = left / g * g;
                let expected: BTreeSet<u64> = (start..start + full).collect();
                prop_assert_eq!(&positions, &expected);
                for b in per_rank.iter().flatten() {
                    prop_assert_eq!(b.end - b.start, bs);
                }
                prop_assert!(counts.iter().all(|&c| c as u64 == left / g));
            }
            LastBatch::Pad => {
                let batches = left.div_ceil(g);
                let expected: BTreeSet<u64> = (start..start + batches * g).collect();
                prop_assert_eq!(&positions, &expected);
                for b in per_rank.iter().flatten() {
                    prop_assert_eq!(b.end - b.start, bs);
                }
                prop_assert!(counts.iter().all(|&c| c as u64 == batches));
                // Reduced modulo n, every remaining record is seen at least
                // once; the padding repeats records from the epoch's start.
                let records: BTreeSet<u64> = positions.iter().map(|p| p % n.max(1)).collect();
                prop_assert!((start..n).all(|p| records.contains(&p)));
            }
        }
        // The cursor after every rank took k batches is the next boundary.
        let s0 = Schedule::new(n, bs, 0, world, policy).unwrap();
        for k in 0..=s0.batches_from(start) {
            prop_assert_eq!(s0.position_after(start, k), (start + k * g).min(n));
        }
    }
}

// ---------------------------------------------------------------------------
// The loader on real shard sets
// ---------------------------------------------------------------------------

fn collect(loader: &Loader, epoch: u64) -> Vec<Batch> {
    loader.epoch(epoch).collect()
}

fn bytes_of(batches: &[Batch]) -> Vec<(u64, Vec<u8>)> {
    batches
        .iter()
        .map(|b| (b.index(), b.bytes().to_vec()))
        .collect()
}

#[test]
fn batches_do_not_depend_on_threads_or_prefetch() {
    let set = write_set(&[("all", 1000)]);
    for (shuffle, policy, bs, world, rank) in [
        (true, LastBatch::Partial, 33, 1, 0),
        (true, LastBatch::Pad, 40, 3, 2),
        (false, LastBatch::Pad, 64, 3, 1),
        (false, LastBatch::Drop, 7, 2, 0),
    ] {
        let cfg = LoaderConfig {
            batch_size: bs,
            shuffle,
            seed: 11,
            rank,
            world_size: world,
            last_batch: policy,
            threads: 0,
            prefetch: 1,
            ..Default::default()
        };
        let reference = Loader::new(&set.ds, cfg.clone()).unwrap();
        let expected = collect(&reference, 3);
        assert_eq!(expected.len() as u64, reference.len());
        // The reference itself holds what the order and schedule say.
        let sched = reference.schedule();
        let order = EpochOrder::new(1000, shuffle, 11, 3);
        for (k, b) in expected.iter().enumerate() {
            let want: Vec<u64> = sched
                .batch_positions(0, k as u64)
                .map(|p| order.get(p % 1000))
                .collect();
            assert_eq!(batch_rows(&set.layout, b), want, "batch {k}");
        }
        let expected = bytes_of(&expected);
        for threads in [1, 2, 4, 8] {
            for prefetch in 1..=8 {
                let l = Loader::new(
                    &set.ds,
                    LoaderConfig {
                        threads,
                        prefetch,
                        ..cfg.clone()
                    },
                )
                .unwrap();
                assert_eq!(
                    bytes_of(&collect(&l, 3)),
                    expected,
                    "threads {threads} prefetch {prefetch} shuffle {shuffle} {policy:?}"
                );
            }
        }
    }
}

#[test]
fn one_epoch_on_one_rank_reads_every_record_once() {
    let set = write_set(&[("all", 777)]);
    for shuffle in [false, true] {
        let l = Loader::new(
            &set.ds,
            LoaderConfig {
                batch_size: 50,
                shuffle,
                seed: 5,
                last_batch: LastBatch::Partial,
                ..Default::default()
            },
        )
        .unwrap();
        let mut rows: Vec<u64> = collect(&l, 0)
            .iter()
            .flat_map(|b| batch_rows(&set.layout, b))
            .collect();
        if shuffle {
            assert_ne!(
                rows,
                (0..777).collect::<Vec<_>>(),
                "a shuffled epoch came out sorted"
            );
        }
        rows.sort_unstable();
        assert_eq!(rows, (0..777).collect::<Vec<_>>());
    }
    // Epochs differ from each other but each is reproducible.
    let l = Loader::new(
        &set.ds,
        LoaderConfig {
            batch_size: 64,
            seed: 9,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(bytes_of(&collect(&l, 1)), bytes_of(&collect(&l, 1)));
    assert_ne!(bytes_of(&collect(&l, 1)), bytes_of(&collect(&l, 2)));
}

#[test]
fn resuming_from_any_cursor_continues_the_same_run() {
    let set = write_set(&[("all", 600)]);
    let strategy = (
        1u64..90,
        1u64..4,
        any::<bool>(),
        last_batch_policy(),
        0usize..3,
        0u64..30,
        0u64..4,
    );
    runner(48)
        .run(
            &strategy,
            |(bs, world, shuffle, policy, threads, stop, epoch)| {
                for rank in 0..world {
                    let cfg = LoaderConfig {
                        batch_size: bs,
                        shuffle,
                        seed: 77,
                        rank,
                        world_size: world,
                        last_batch: policy,
                        threads,
                        ..Default::default()
                    };
                    let l = Loader::new(&set.ds, cfg).unwrap();
                    let full = bytes_of(&collect(&l, epoch));
                    let stop = (stop as usize).min(full.len());
                    let mut it = l.epoch(epoch);
                    let head: Vec<Batch> = it.by_ref().take(stop).collect();
                    let cursor = it.cursor();
                    drop(it);
                    prop_assert_eq!(cursor.seed, 77);
                    prop_assert_eq!(cursor.epoch, epoch);
                    let resumed = l.resume(cursor).unwrap();
                    prop_assert_eq!(resumed.remaining() as usize, full.len() - stop);
                    let tail: Vec<(u64, Vec<u8>)> = resumed
                        .map(|b| (b.index() + stop as u64, b.bytes().to_vec()))
                        .collect();
                    let mut joined = bytes_of(&head);
                    joined.extend(tail);
                    prop_assert_eq!(joined, full.clone());
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn changing_world_size_at_a_cursor_loses_and_repeats_nothing() {
    let set = write_set(&[("all", 900)]);
    let strategy = (1u64..60, 1u64..5, 1u64..5, 0u64..12, any::<bool>());
    runner(48)
        .run(&strategy, |(bs, w1, w2, steps, shuffle)| {
            let cfg = |rank, world| LoaderConfig {
                batch_size: bs,
                shuffle,
                seed: 3,
                rank,
                world_size: world,
                last_batch: LastBatch::Partial,
                threads: 1,
                ..Default::default()
            };
            // Phase 1: every rank of world w1 takes `steps` batches (or all it has).
            let mut seen: Vec<u64> = Vec::new();
            let mut cursors = std::collections::HashSet::new();
            let steps = steps.min(900 / (bs * w1));
            for r in 0..w1 {
                let l = Loader::new(&set.ds, cfg(r, w1)).unwrap();
                let mut it = l.epoch(4);
                for b in it.by_ref().take(steps as usize) {
                    seen.extend(batch_rows(&set.layout, &b));
                }
                cursors.insert(it.cursor());
            }
            // All ranks agree on where they are.
            prop_assert_eq!(cursors.len(), 1);
            let cursor: Cursor = *cursors.iter().next().unwrap();
            prop_assert_eq!(cursor.position, steps * bs * w1);
            // Phase 2: world w2 continues from the shared cursor.
            for r in 0..w2 {
                let l = Loader::new(&set.ds, cfg(r, w2)).unwrap();
                for b in l.resume(cursor).unwrap() {
                    seen.extend(batch_rows(&set.layout, &b));
                }
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..900).collect::<Vec<u64>>());
            Ok(())
        })
        .unwrap();
}

#[test]
fn worker_substreams_interleave_to_the_full_sequence() {
    let set = write_set(&[("all", 500)]);
    let strategy = (
        1u64..5,
        1u64..40,
        any::<bool>(),
        last_batch_policy(),
        0usize..3,
    );
    runner(32)
        .run(&strategy, |(num_workers, bs, shuffle, policy, threads)| {
            let cfg = LoaderConfig {
                batch_size: bs,
                shuffle,
                seed: 21,
                last_batch: policy,
                threads,
                ..Default::default()
            };
            let full = bytes_of(&collect(&Loader::new(&set.ds, cfg.clone()).unwrap(), 2));
            let streams: Vec<Vec<(u64, Vec<u8>)>> = (0..num_workers)
                .map(|worker| {
                    let l = Loader::new(
                        &set.ds,
                        LoaderConfig {
                            worker,
                            num_workers,
                            ..cfg.clone()
                        },
                    )
                    .unwrap();
                    let got = bytes_of(&collect(&l, 2));
                    assert_eq!(got.len() as u64, l.len());
                    got
                })
                .collect();
            let total: usize = streams.iter().map(Vec::len).sum();
            prop_assert_eq!(total, full.len());
            for (k, batch) in full.iter().enumerate() {
                let w = k % num_workers as usize;
                prop_assert_eq!(&streams[w][k / num_workers as usize], batch, "batch {}", k);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn bad_loader_arguments_are_errors() {
    let set = write_set(&[("all", 10)]);
    let bad = |cfg: LoaderConfig| Loader::new(&set.ds, cfg).is_err();
    assert!(bad(LoaderConfig {
        batch_size: 0,
        ..Default::default()
    }));
    assert!(bad(LoaderConfig {
        rank: 2,
        world_size: 2,
        ..Default::default()
    }));
    assert!(bad(LoaderConfig {
        worker: 1,
        num_workers: 1,
        ..Default::default()
    }));
    assert!(bad(LoaderConfig {
        num_workers: 0,
        ..Default::default()
    }));
    assert!(bad(LoaderConfig {
        batch_size: u64::MAX,
        ..Default::default()
    }));
    // A batch larger than the set, with the tail dropped, would read
    // nothing: an error naming both numbers (partial and pad read it).
    let e = Loader::new(&set.ds, LoaderConfig::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("batch_size 256 is more than the 10 records of"),
        "{e}"
    );
    let e = Loader::new(
        &set.ds,
        LoaderConfig {
            batch_size: 6,
            world_size: 2,
            ..Default::default()
        },
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        e.contains("batch_size 6 x world_size 2 = 12 records per step"),
        "{e}"
    );
    for last_batch in [LastBatch::Partial, LastBatch::Pad] {
        let cfg = LoaderConfig {
            last_batch,
            ..Default::default()
        };
        assert_eq!(Loader::new(&set.ds, cfg).unwrap().len(), 1);
    }
    let l = Loader::new(
        &set.ds,
        LoaderConfig {
            seed: 4,
            batch_size: 5,
            ..Default::default()
        },
    )
    .unwrap();
    let wrong_seed = Cursor {
        seed: 5,
        epoch: 0,
        position: 0,
    };
    assert!(l.resume(wrong_seed).is_err());
    let past_end = Cursor {
        seed: 4,
        epoch: 0,
        position: 11,
    };
    assert!(l.resume(past_end).is_err());
    let at_end = Cursor {
        seed: 4,
        epoch: 0,
        position: 10,
    };
    assert_eq!(l.resume(at_end).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------
// Record access
// ---------------------------------------------------------------------------

#[test]
fn splits_index_their_own_rows() {
    let set = write_set(&[("train", 200), ("val", 45), ("test", 1)]);
    let mut start = 0u64;
    for (name, rows) in [("train", 200u64), ("val", 45), ("test", 1)] {
        let view = set.ds.split(name).unwrap();
        assert_eq!(view.len(), rows);
        assert_eq!(view.split_name(), Some(name));
        assert_eq!(view.row_range(), start..start + rows);
        for i in 0..rows {
            assert_eq!(
                view.record(i).unwrap(),
                &record_bytes(&set.layout, start + i)[..]
            );
        }
        assert!(view.record(rows).is_none());
        // A loader over a split yields exactly that split's rows.
        let l = Loader::new(
            &view,
            LoaderConfig {
                batch_size: 16,
                last_batch: LastBatch::Partial,
                seed: 8,
                ..Default::default()
            },
        )
        .unwrap();
        let mut got: Vec<u64> = collect(&l, 0)
            .iter()
            .flat_map(|b| batch_rows(&set.layout, b))
            .collect();
        got.sort_unstable();
        assert_eq!(got, (start..start + rows).collect::<Vec<_>>());
        start += rows;
    }
    let err = set.ds.split("nope").unwrap_err().to_string();
    assert!(err.contains("nope") && err.contains("train"), "{err}");
    assert_eq!(set.ds.split_name(), None);
    assert_eq!(set.ds.len(), 246);
}

#[test]
fn record_access_agrees_with_the_written_bytes() {
    // Uneven splits give shards of unequal size (the binary-search path);
    // one split gives equal shards but a short last one (the division path).
    for splits in [
        &[("a", 100u64), ("b", 50), ("c", 90)][..],
        &[("all", 260)][..],
    ] {
        let set = write_set(splits);
        let n: u64 = splits.iter().map(|s| s.1).sum();
        let ds = &set.ds;
        let manifest_rows: Vec<u64> = ds.manifest().shards.iter().map(|s| s.rows).collect();
        let planned: Vec<u64> = set.bounds.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(
            manifest_rows, planned,
            "shard sizes differ from the writing plan"
        );
        assert_eq!(ds.len(), n);
        assert_eq!(ds.stride(), set.layout.stride as usize);
        for i in 0..n {
            let want = record_bytes(&set.layout, i);
            assert_eq!(ds.record(i).unwrap(), &want[..], "record {i}");
            assert_eq!(ds.field::<u64>(i, "idx").unwrap(), &[i]);
            let off = set.layout.field("vals").unwrap().offset as usize;
            let vals: Vec<i32> = want[off..off + 12]
                .chunks(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(ds.field::<i32>(i, "vals").unwrap(), &vals[..]);
            let off = set.layout.field("tag").unwrap().offset as usize;
            assert_eq!(ds.field::<u8>(i, "tag").unwrap(), &want[off..off + 3]);
        }
        assert!(ds.record(n).is_none());
        assert!(ds.field::<u64>(n, "idx").is_err());
        assert!(
            ds.field::<i64>(0, "idx").is_err(),
            "u64 field viewed as i64"
        );
        assert!(ds.field::<u64>(0, "missing").is_err());

        let all: Vec<u8> = (0..n).flat_map(|i| record_bytes(&set.layout, i)).collect();
        let stride = ds.stride();
        let expected = |a: u64, b: u64| &all[a as usize * stride..b as usize * stride];
        let shard_of = |row: u64| set.bounds.partition_point(|&s| s <= row) - 1;
        for a in 0..=n {
            for b in (a..=n).step_by(7).chain([n, a, (a + 1).min(n)]) {
                // records(): zero-copy, only within one shard.
                let one_shard = a == b || shard_of(a) == shard_of(b - 1);
                match ds.records(a..b) {
                    Some(bytes) => {
                        assert!(
                            one_shard,
                            "records({a}..{b}) spans shards but returned a slice"
                        );
                        assert_eq!(bytes, expected(a, b), "records({a}..{b})");
                    }
                    None => assert!(
                        !one_shard,
                        "records({a}..{b}) is in one shard but gave None"
                    ),
                }
                // copy_records(): any range.
                let mut out = vec![0u8; (b - a) as usize * ds.stride()];
                ds.copy_records(a, &mut out).unwrap();
                assert_eq!(&out[..], expected(a, b), "copy_records({a}, {})", b - a);
            }
        }
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = ds.records(5..4);
        assert!(backwards.is_none());
        assert!(ds.records(0..n + 1).is_none());
        let mut out = vec![0u8; 2 * ds.stride()];
        assert!(ds.copy_records(n - 1, &mut out).is_err());
        assert!(ds.copy_records(u64::MAX, &mut out).is_err());
        assert!(ds.copy_records(0, &mut out[..ds.stride() + 1]).is_err());

        // gather(): arbitrary indices, repeats allowed.
        runner(64)
            .run(&proptest::collection::vec(0..n, 0..200), |idx| {
                let mut out = vec![0u8; idx.len() * ds.stride()];
                ds.gather(&idx, &mut out).unwrap();
                let want: Vec<u8> = idx
                    .iter()
                    .flat_map(|&i| record_bytes(&set.layout, i))
                    .collect();
                prop_assert_eq!(out, want);
                Ok(())
            })
            .unwrap();
        let mut out = vec![0u8; ds.stride()];
        assert!(ds.gather(&[n], &mut out).is_err());
        assert!(ds.gather(&[0, 1], &mut out).is_err());

        // The same through split views, whose indices are relative.
        for s in &ds.manifest().splits {
            let view = ds.split(&s.name).unwrap();
            let mut out = vec![0u8; view.len() as usize * ds.stride()];
            view.copy_records(0, &mut out).unwrap();
            assert_eq!(&out[..], expected(s.start, s.start + s.rows));
            let idx: Vec<u64> = (0..view.len()).rev().collect();
            view.gather(&idx, &mut out).unwrap();
            let want: Vec<u8> = (s.start..s.start + s.rows)
                .rev()
                .flat_map(|i| record_bytes(&set.layout, i))
                .collect();
            assert_eq!(out, want);
            assert!(view.records(0..view.len() + 1).is_none());
        }
    }
}

#[test]
fn an_empty_set_reads_as_empty() {
    let set = write_set(&[("train", 0)]);
    let ds = &set.ds;
    assert_eq!(ds.len(), 0);
    assert!(ds.is_empty());
    assert!(ds.record(0).is_none());
    assert_eq!(ds.records(0..0), Some(&[][..]));
    ds.copy_records(0, &mut []).unwrap();
    ds.gather(&[], &mut []).unwrap();
    for policy in [LastBatch::Drop, LastBatch::Partial, LastBatch::Pad] {
        let l = Loader::new(
            ds,
            LoaderConfig {
                last_batch: policy,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(l.len(), 0);
        assert_eq!(l.epoch(0).count(), 0);
    }
}
