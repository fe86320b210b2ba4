//! Mixtures: shares, sampling without replacement inside components,
//! schedules, exact resume (also with other weights and world sizes), and
//! the loader reading a mixture like one set. Every record holds its
//! component's tag and its row, so a batch is checked against what was
//! written, independently of how the mixture chose it.

use proptest::prelude::*;
use proptest::test_runner::Config;
use tessera_reader::{
    Cursor, DType, Dataset, FieldSpec, LastBatch, Loader, LoaderConfig, MixComponent, Mixture,
    RecordLayout, ScheduleChange, ShardSetWriter, WeightStep,
};

fn layout() -> RecordLayout {
    RecordLayout::packed(&[
        FieldSpec::new("tag", DType::U32, &[]),
        FieldSpec::new("row", DType::U64, &[]),
        FieldSpec::new("pad", DType::U8, &[20]),
    ])
    .unwrap()
}

/// A set of `n` records tagged `tag`, shards of 50 records.
fn write(dir: &std::path::Path, tag: u32, n: u64) -> Dataset {
    let layout = layout();
    let stride = layout.stride as usize;
    let mut w = ShardSetWriter::new(dir, layout.clone(), 4096 + 50 * layout.stride).unwrap();
    w.begin_split("all").unwrap();
    for i in 0..n {
        let mut rec = vec![(i % 251) as u8; stride];
        let t = layout.field("tag").unwrap().offset as usize;
        rec[t..t + 4].copy_from_slice(&tag.to_le_bytes());
        let r = layout.field("row").unwrap().offset as usize;
        rec[r..r + 8].copy_from_slice(&i.to_le_bytes());
        w.write_records(&rec).unwrap();
    }
    w.finish().unwrap();
    Dataset::open(dir).unwrap()
}

struct Sets {
    _dirs: Vec<tempfile::TempDir>,
    comps: Vec<MixComponent>,
}

fn sets(sizes: &[u64]) -> Sets {
    let mut dirs = Vec::new();
    let mut comps = Vec::new();
    for (tag, &n) in sizes.iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        comps.push(MixComponent {
            name: format!("c{tag}"),
            dataset: write(d.path(), tag as u32, n),
        });
        dirs.push(d);
    }
    Sets { _dirs: dirs, comps }
}

fn constant(w: &[f64]) -> Vec<WeightStep> {
    vec![WeightStep {
        start: 0,
        weights: w.to_vec(),
    }]
}

/// (tag, row) of every record of a batch.
fn picks_of(b: &tessera_reader::Batch) -> Vec<(usize, u64)> {
    let tags = b.field::<u32>("tag").unwrap().to_vec();
    let rows = b.field::<u64>("row").unwrap().to_vec();
    tags.into_iter().map(|t| t as usize).zip(rows).collect()
}

proptest! {
    #![proptest_config(Config { cases: 48, failure_persistence: None, ..Config::default() })]

    /// Every prefix of the stream holds each component in proportion to its
    /// weight, within one sample per tree level; counts_at is the count.
    #[test]
    fn shares_follow_the_weights_in_every_prefix(
        w in prop::collection::vec(0u32..100, 2..6), seed: u64, g in 0u64..5000,
    ) {
        prop_assume!(w.iter().any(|&x| x > 0));
        let sizes: Vec<u64> = w.iter().map(|_| 17).collect();
        let s = sets(&sizes);
        let weights: Vec<f64> = w.iter().map(|&x| f64::from(x)).collect();
        let m = Mixture::scheduled(s.comps.clone(), constant(&weights), seed, None, true).unwrap();
        let mut count = vec![0u64; w.len()];
        for i in 0..g {
            count[m.pick(i).0] += 1;
        }
        prop_assert_eq!(&m.counts_at(g), &count);
        let total: f64 = weights.iter().sum();
        for (c, &wc) in weights.iter().enumerate() {
            let want = g as f64 * wc / total;
            prop_assert!((count[c] as f64 - want).abs() <= 3.0, "component {} has {} of {}, want {}", c, count[c], g, want);
            if wc == 0.0 {
                prop_assert_eq!(count[c], 0);
            }
        }
    }

    /// Inside a component, its k-th sample is position k mod n of its own
    /// epoch k div n: each run of n samples is a permutation of its records,
    /// and consecutive epochs are reshuffled.
    #[test]
    fn components_are_sampled_without_replacement(seed: u64, n0 in 1u64..60, n1 in 1u64..60) {
        let s = sets(&[n0, n1]);
        let m = Mixture::scheduled(s.comps.clone(), constant(&[2.0, 1.0]), seed, None, true).unwrap();
        let mut per: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        for g in 0..(4 * (n0 + n1)) {
            let (c, r) = m.pick(g);
            per[c].push(r);
        }
        for (c, n) in [(0usize, n0), (1, n1)] {
            for (e, chunk) in per[c].chunks(n as usize).enumerate() {
                if chunk.len() as u64 == n {
                    let mut sorted = chunk.to_vec();
                    sorted.sort_unstable();
                    prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "component {} epoch {}", c, e);
                }
            }
        }
    }
}

#[test]
fn a_schedule_changes_the_shares_at_the_given_sample() {
    let s = sets(&[300, 200, 100]);
    let schedule = vec![
        WeightStep {
            start: 0,
            weights: vec![0.7, 0.3, 0.0],
        },
        WeightStep {
            start: 10_000,
            weights: vec![0.2, 0.3, 0.5],
        },
    ];
    let m = Mixture::scheduled(s.comps.clone(), schedule, 9, Some(600), true).unwrap();
    let count = |a: u64, b: u64| {
        let mut c = [0u64; 3];
        for g in a..b {
            c[m.pick(g).0] += 1;
        }
        c
    };
    let before = count(0, 10_000);
    let after = count(10_000, 20_000);
    for (got, want) in before.iter().zip([7000.0, 3000.0, 0.0]) {
        assert!((*got as f64 - want).abs() <= 2.0, "{before:?}");
    }
    for (got, want) in after.iter().zip([2000.0, 3000.0, 5000.0]) {
        assert!((*got as f64 - want).abs() <= 2.0, "{after:?}");
    }
    assert_eq!(
        m.counts_at(20_000),
        [before[0] + after[0], before[1] + after[1], after[2]]
    );
}

fn cfg(batch: u64, seed: u64, rank: u64, world: u64, threads: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: batch,
        seed,
        rank,
        world_size: world,
        last_batch: LastBatch::Partial,
        threads,
        ..Default::default()
    }
}

/// What the loader's epochs hold, over all ranks, in global sample order.
fn run(m: &Mixture, batch: u64, world: u64, epochs: std::ops::Range<u64>) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    for e in epochs {
        let per_rank: Vec<Vec<Vec<(usize, u64)>>> = (0..world)
            .map(|r| {
                let l = Loader::mixture(m.clone(), cfg(batch, m.seed(), r, world, 2)).unwrap();
                l.epoch(e).map(|b| picks_of(&b)).collect()
            })
            .collect();
        let steps = per_rank.iter().map(Vec::len).max().unwrap_or(0);
        for k in 0..steps {
            for r in per_rank.iter() {
                if let Some(b) = r.get(k) {
                    out.extend(b);
                }
            }
        }
    }
    out
}

#[test]
fn the_loader_reads_the_mixture_stream_on_any_ranks_threads_and_workers() {
    let s = sets(&[130, 70, 45]);
    let m = Mixture::new(s.comps.clone(), vec![0.5, 0.3, 0.2], 4).unwrap();
    let len = m.epoch_samples();
    assert_eq!(len, 245);
    let want: Vec<(usize, u64)> = (0..3 * len).map(|g| m.pick(g)).collect();
    for world in [1, 2, 3] {
        assert_eq!(run(&m, 16, world, 0..3), want, "world {world}");
    }
    // Threads and worker sub-streams change nothing.
    let seq = |threads: usize, workers: u64| -> Vec<(usize, u64)> {
        let mut subs: Vec<Vec<Vec<(usize, u64)>>> = (0..workers)
            .map(|w| {
                let c = LoaderConfig {
                    worker: w,
                    num_workers: workers,
                    ..cfg(10, 4, 0, 1, threads)
                };
                Loader::mixture(m.clone(), c)
                    .unwrap()
                    .epoch(1)
                    .map(|b| picks_of(&b))
                    .collect()
            })
            .collect();
        let mut out = Vec::new();
        for k in 0.. {
            let sub = &mut subs[k % workers as usize];
            if sub.is_empty() {
                break;
            }
            out.extend(sub.remove(0));
        }
        out
    };
    let one = seq(0, 1);
    assert_eq!(one, want[len as usize..2 * len as usize]);
    for (threads, workers) in [(1, 1), (2, 1), (0, 3), (2, 2)] {
        assert_eq!(
            seq(threads, workers),
            one,
            "threads {threads} workers {workers}"
        );
    }
}

#[test]
fn resuming_anywhere_with_another_world_size_continues_the_stream() {
    let s = sets(&[90, 50]);
    let m = Mixture::new(s.comps.clone(), vec![0.6, 0.4], 12).unwrap();
    let len = m.epoch_samples();
    let want: Vec<(usize, u64)> = (0..2 * len).map(|g| m.pick(g)).collect();
    for (world_before, world_after, steps) in [(1, 2, 3), (2, 3, 1), (3, 1, 4), (2, 2, 0)] {
        // Run `steps` global batches of epoch 0 on every rank, save rank 0's
        // cursor, resume on another world size and finish epochs 0 and 1.
        let mut got = Vec::new();
        let mut cursor = Cursor::default();
        let mut rank_iters: Vec<_> = (0..world_before)
            .map(|r| {
                Loader::mixture(m.clone(), cfg(8, 12, r, world_before, 1))
                    .unwrap()
                    .epoch(0)
            })
            .collect();
        for _ in 0..steps {
            for (r, it) in rank_iters.iter_mut().enumerate() {
                got.extend(picks_of(&it.next().unwrap()));
                if r == 0 {
                    cursor = it.cursor();
                }
            }
        }
        if steps == 0 {
            cursor = Cursor {
                seed: 12,
                epoch: 0,
                position: 0,
            };
        }
        assert_eq!(cursor.position, steps * 8 * world_before);
        let resumed: Vec<Vec<_>> = (0..world_after)
            .map(|r| {
                let l = Loader::mixture(m.clone(), cfg(8, 12, r, world_after, 2)).unwrap();
                l.resume(cursor).unwrap().map(|b| picks_of(&b)).collect()
            })
            .collect();
        for k in 0..resumed.iter().map(Vec::len).max().unwrap() {
            for r in &resumed {
                if let Some(b) = r.get(k) {
                    got.extend(b);
                }
            }
        }
        got.extend(run(&m, 8, world_after, 1..2));
        assert_eq!(got, want, "{world_before} -> {world_after} after {steps}");
    }
}

#[test]
fn changing_weights_at_a_resume_loses_and_repeats_no_component_sample() {
    let s = sets(&[400, 300, 200]);
    let m = Mixture::scheduled(
        s.comps.clone(),
        constant(&[0.5, 0.3, 0.2]),
        3,
        Some(900),
        true,
    )
    .unwrap();
    // Train 2.4 mixture epochs with the first weights, checkpointing.
    let cut = 2 * 900 + 540;
    let mut taken: Vec<Vec<u64>> = vec![Vec::new(); 3];
    let mut count = [0u64; 3];
    for g in 0..cut {
        let (c, r) = m.pick(g);
        taken[c].push(r);
        count[c] += 1;
    }
    let saved = m.counts_at(cut);
    assert_eq!(saved, count);
    // Resume with a curriculum: component 2 switched off, then dominant.
    let new_schedule = vec![
        WeightStep {
            start: 0,
            weights: vec![0.1, 0.9, 0.0],
        },
        WeightStep {
            start: cut + 700,
            weights: vec![0.1, 0.1, 0.8],
        },
    ];
    let resumed = m.anchored(cut, &saved, &new_schedule).unwrap();
    // The history: the run's own schedule, then the change at the cut.
    let at: Vec<u64> = resumed.history().iter().map(|c| c.at).collect();
    assert_eq!(at, [0, cut]);
    let loader = Loader::mixture(m.clone(), cfg(30, 3, 0, 1, 2)).unwrap();
    let loader = loader.with_mixture(resumed.clone()).unwrap();
    let cursor = Cursor {
        seed: 3,
        epoch: cut / 900,
        position: cut % 900,
    };
    let mut after = [0u64; 3];
    let mut seen = 0u64;
    for e in 0..2u64 {
        let it = if e == 0 {
            loader.resume(cursor).unwrap()
        } else {
            loader.epoch(cursor.epoch + 1)
        };
        for b in it {
            for (c, r) in picks_of(&b) {
                taken[c].push(r);
                after[c] += 1;
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 360 + 900);
    // Shares after the resume follow the new weights.
    assert!((after[0] as f64 - 126.0).abs() <= 2.0, "{after:?}");
    assert!((after[2] as f64 - 0.8 * 560.0).abs() <= 2.0, "{after:?}");
    // Every component's records, before and after, are exactly its own
    // epochs back to back: nothing lost, nothing repeated.
    let fresh =
        Mixture::scheduled(s.comps.clone(), constant(&[1.0, 1.0, 1.0]), 3, None, true).unwrap();
    for (c, seq) in taken.iter().enumerate() {
        let n = s.comps[c].dataset.len();
        for (e, chunk) in seq.chunks(n as usize).enumerate() {
            let mut sorted = chunk.to_vec();
            sorted.sort_unstable();
            if chunk.len() as u64 == n {
                assert_eq!(
                    sorted,
                    (0..n).collect::<Vec<_>>(),
                    "component {c} epoch {e}"
                );
            } else {
                sorted.dedup();
                assert_eq!(
                    sorted.len(),
                    chunk.len(),
                    "component {c}: a repeat in its last epoch"
                );
            }
        }
        // The component's order is the one its seed defines, whatever the
        // weights: the same as in a mixture with other weights.
        let mut other = Vec::new();
        let mut g = 0;
        while other.len() < seq.len() {
            let (cc, r) = fresh.pick(g);
            if cc == c {
                other.push(r);
            }
            g += 1;
        }
        assert_eq!(&other, seq, "component {c}");
    }
}

#[test]
fn bad_mixtures_are_clear_errors() {
    let s = sets(&[10, 10]);
    let err = |r: tessera_reader::Result<Mixture>| r.unwrap_err().to_string();
    assert!(err(Mixture::new(s.comps.clone(), vec![1.0], 0)).contains("1 weights for 2"));
    assert!(err(Mixture::new(s.comps.clone(), vec![1.0, -1.0], 0)).contains("\"c1\""));
    assert!(err(Mixture::new(s.comps.clone(), vec![0.0, 0.0], 0)).contains("all zero"));
    assert!(err(Mixture::new(s.comps.clone(), vec![f64::NAN, 1.0], 0)).contains("finite"));
    assert!(err(Mixture::new(Vec::new(), vec![], 0)).contains("at least one"));
    let mut dup = s.comps.clone();
    dup[1].name = "c0".into();
    assert!(err(Mixture::new(dup, vec![1.0, 1.0], 0)).contains("twice"));
    let late = vec![WeightStep {
        start: 5,
        weights: vec![1.0, 1.0],
    }];
    assert!(err(Mixture::scheduled(s.comps.clone(), late, 0, None, true)).contains("sample 0"));
    // Another layout names the component and its directory.
    let d = tempfile::tempdir().unwrap();
    let other_layout = RecordLayout::packed(&[FieldSpec::new("x", DType::F32, &[])]).unwrap();
    let mut w = ShardSetWriter::new(d.path(), other_layout, 1 << 16).unwrap();
    w.begin_split("all").unwrap();
    w.write_records(&1f32.to_le_bytes()).unwrap();
    w.finish().unwrap();
    let mut comps = s.comps.clone();
    comps.push(MixComponent {
        name: "odd".into(),
        dataset: Dataset::open(d.path()).unwrap(),
    });
    let e = err(Mixture::new(comps, vec![1.0, 1.0, 1.0], 0));
    assert!(e.contains("\"odd\"") && e.contains("layout"), "{e}");
    // Loader and mixture must agree on the seed.
    let m = Mixture::new(s.comps.clone(), vec![1.0, 1.0], 5).unwrap();
    assert!(Loader::mixture(m.clone(), cfg(4, 6, 0, 1, 0)).is_err());
    assert!(m.anchored(7, &[1, 2], &constant(&[1.0, 1.0])).is_err());
}

#[test]
fn restoring_with_the_same_weights_continues_the_very_same_stream() {
    let s = sets(&[120, 80]);
    let m = Mixture::new(s.comps.clone(), vec![0.6, 0.4], 21).unwrap();
    let at = 333;
    let same = m
        .anchored(at, &m.counts_at(at), &constant(&[0.6, 0.4]))
        .unwrap();
    for g in at..at + 600 {
        assert_eq!(same.pick(g), m.pick(g), "sample {g}");
    }
}

proptest! {
    #![proptest_config(Config { cases: 24, failure_persistence: None, ..Config::default() })]

    /// Elastic resume: any global-batch boundary, any world sizes before and
    /// after, any weights: the ranks' batches before and after the cursor
    /// are the stream, in order.
    #[test]
    fn resume_at_any_boundary_on_any_world_size_is_the_stream(
        seed: u64,
        w in prop::collection::vec(1u32..10, 3),
        before in 1u64..4, after in 1u64..4, batch in 1u64..9, steps in 0u64..12,
    ) {
        let s = sets(&[23, 31, 17]);
        let weights: Vec<f64> = w.iter().map(|&x| f64::from(x)).collect();
        let m = Mixture::scheduled(s.comps.clone(), constant(&weights), seed, Some(70), true).unwrap();
        let want: Vec<(usize, u64)> = (0..70).map(|g| m.pick(g)).collect();
        let g = batch * before;
        let steps = steps.min(70 / g);
        let mut got = Vec::new();
        for k in 0..steps {
            for r in 0..before {
                let l = Loader::mixture(m.clone(), cfg(batch, seed, r, before, 0)).unwrap();
                let mut it = l.epoch(0);
                let b = it.nth(k as usize).unwrap();
                got.extend(picks_of(&b));
            }
        }
        let cursor = Cursor { seed, epoch: 0, position: steps * g };
        let resumed: Vec<Vec<Vec<(usize, u64)>>> = (0..after)
            .map(|r| {
                let l = Loader::mixture(m.clone(), cfg(batch, seed, r, after, 1)).unwrap();
                l.resume(cursor).unwrap().map(|b| picks_of(&b)).collect()
            })
            .collect();
        for k in 0..resumed.iter().map(Vec::len).max().unwrap_or(0) {
            for r in &resumed {
                if let Some(b) = r.get(k) {
                    got.extend(b);
                }
            }
        }
        prop_assert_eq!(got, want);
    }

    /// New weights at any sample: every component continues after exactly
    /// the records it gave, and the shares after the cut follow the new
    /// weights.
    #[test]
    fn new_weights_at_any_sample_lose_and_repeat_nothing(
        seed: u64,
        w0 in prop::collection::vec(0u32..10, 3),
        w1 in prop::collection::vec(0u32..10, 3),
        cut in 0u64..400,
    ) {
        prop_assume!(w0.iter().any(|&x| x > 0) && w1.iter().any(|&x| x > 0));
        let s = sets(&[13, 29, 7]);
        let f = |w: &[u32]| w.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let m = Mixture::scheduled(s.comps.clone(), constant(&f(&w0)), seed, None, true).unwrap();
        let counts = m.counts_at(cut);
        let resumed = m.anchored(cut, &counts, &constant(&f(&w1))).unwrap();
        // Reference: each component's own sequence (its epochs back to back)
        // read from a mixture that only ever takes that component.
        let mut per: Vec<Vec<u64>> = vec![Vec::new(); 3];
        for g in 0..cut {
            let (c, r) = m.pick(g);
            per[c].push(r);
        }
        let mut after = [0u64; 3];
        for g in cut..cut + 300 {
            let (c, r) = resumed.pick(g);
            per[c].push(r);
            after[c] += 1;
        }
        for c in 0..3 {
            let mut only = vec![0.0; 3];
            only[c] = 1.0;
            let solo = Mixture::scheduled(s.comps.clone(), constant(&only), seed, None, true).unwrap();
            let own: Vec<u64> = (0..per[c].len() as u64).map(|g| solo.pick(g).1).collect();
            prop_assert_eq!(&per[c], &own, "component {}", c);
        }
        let total: u32 = w1.iter().sum();
        for c in 0..3 {
            let want = 300.0 * f64::from(w1[c]) / f64::from(total);
            prop_assert!((after[c] as f64 - want).abs() <= 3.0, "{:?} vs weights {:?}", after, w1);
        }
    }
}

#[test]
fn huge_weights_whose_sum_overflows_keep_their_proportions() {
    // 1e308 + 1e308 is infinite in f64; the shares must still be 1 : 1 : ~0,
    // not "all equal" (what dividing by an infinite sum used to give).
    let s = sets(&[50, 50, 50]);
    let m = Mixture::new(s.comps.clone(), vec![1e308, 1e308, 1.0], 9).unwrap();
    let c = m.counts_at(3000);
    assert!(
        c[0].abs_diff(1500) <= 2 && c[1].abs_diff(1500) <= 2,
        "{c:?}"
    );
    assert!(c[2] <= 1, "{c:?}");
    // And a mixture of 2e307 : 1e308 splits 1 : 5 like 1 : 5.
    let big = Mixture::new(s.comps[..2].to_vec(), vec![2e307, 1e308], 9).unwrap();
    let small = Mixture::new(s.comps[..2].to_vec(), vec![1.0, 5.0], 9).unwrap();
    let (b, t) = (big.counts_at(6000), small.counts_at(6000));
    assert!(
        b[0].abs_diff(1000) <= 2 && t[0].abs_diff(1000) <= 2,
        "{b:?} {t:?}"
    );
}

/// What a loader saves of a mixture: its position's counts and the history.
struct Saved {
    at: u64,
    counts: Vec<u64>,
    history: Vec<ScheduleChange>,
}

fn save(m: &Mixture, at: u64) -> Saved {
    Saved {
        at,
        counts: m.counts_at(at),
        history: m.history().to_vec(),
    }
}

/// A new process restoring `saved` into a mixture configured with
/// `schedule`: the saved run's history, then the new weights if they differ.
fn restore(comps: &[MixComponent], schedule: &[WeightStep], saved: &Saved) -> Mixture {
    let configured = Mixture::scheduled(comps.to_vec(), schedule.to_vec(), 5, None, true).unwrap();
    let run = configured.with_history(saved.history.clone()).unwrap();
    assert_eq!(run.counts_at(saved.at), saved.counts);
    run.anchored(saved.at, &saved.counts, schedule).unwrap()
}

fn picks(m: &Mixture, range: std::ops::Range<u64>) -> Vec<(usize, u64)> {
    range.map(|g| m.pick(g)).collect()
}

#[test]
fn a_checkpoint_after_a_weight_change_restores_into_the_same_weights_exactly() {
    // The case: 100 + 300 records; weights changed at a resume, then
    // a checkpoint restored into those same weights.
    // (0.23 : 0.77 has a long period, so a shifted interleave shows.)
    let s = sets(&[100, 300]);
    let (w1, w2) = (constant(&[0.5, 0.5]), constant(&[0.23, 0.77]));
    let first = Mixture::scheduled(s.comps.clone(), w1.clone(), 5, None, true).unwrap();
    let resumed = restore(&s.comps, &w2, &save(&first, 100));
    let cut = 100;
    let uninterrupted = picks(&resumed, cut..cut + 300);
    let again = restore(&s.comps, &w2, &save(&resumed, cut));
    assert_eq!(picks(&again, cut..cut + 300), uninterrupted);
    // Later checkpoints too (the issue saved at 100 after the change at 100;
    // any position after it).
    for at in [137u64, 250, 399, 400, 1000] {
        let again = restore(&s.comps, &w2, &save(&resumed, at));
        assert_eq!(
            picks(&again, at..at + 300),
            picks(&resumed, at..at + 300),
            "checkpoint at {at}"
        );
    }
    // What a restore without the history gave: same records taken, but
    // another interleave (so this test can tell the two apart).
    let configured = Mixture::scheduled(s.comps.clone(), w2.clone(), 5, None, true).unwrap();
    let at = 250;
    let blind = configured
        .anchored(at, &resumed.counts_at(at), &w2)
        .unwrap();
    assert_ne!(picks(&blind, at..at + 300), picks(&resumed, at..at + 300));
}

#[test]
fn successive_weight_changes_resume_exactly_and_lose_nothing() {
    let s = sets(&[100, 300, 60]);
    let w = [
        constant(&[0.5, 0.3, 0.2]),
        constant(&[0.1, 0.8, 0.1]),
        vec![
            WeightStep {
                start: 0,
                weights: vec![0.0, 0.5, 0.5],
            },
            WeightStep {
                start: 900,
                weights: vec![1.0, 1.0, 1.0],
            },
        ],
    ];
    let cuts = [130u64, 410];
    // The run: weights w[0] from 0, w[1] from the first resume, w[2] from
    // the second.
    let mut run = Mixture::scheduled(s.comps.clone(), w[0].clone(), 5, None, true).unwrap();
    for (i, &cut) in cuts.iter().enumerate() {
        run = restore(&s.comps, &w[i + 1], &save(&run, cut));
    }
    let at: Vec<u64> = run.history().iter().map(|c| c.at).collect();
    assert_eq!(at, [0, 130, 410]);
    // Checkpoints anywhere after (and between) the changes, restored into
    // the last weights, continue the very same stream.
    for at in [410u64, 411, 555, 899, 900, 1500] {
        let again = restore(&s.comps, &w[2], &save(&run, at));
        assert_eq!(
            picks(&again, at..at + 400),
            picks(&run, at..at + 400),
            "at {at}"
        );
    }
    // Nothing lost or repeated: each component's records, over the three
    // weight regimes, are its own epochs back to back.
    let mut per: Vec<Vec<u64>> = vec![Vec::new(); 3];
    for (c, r) in picks(&run, 0..2000) {
        per[c].push(r);
    }
    let only_one = |c: usize| {
        let mut w = vec![0.0; 3];
        w[c] = 1.0;
        Mixture::scheduled(s.comps.clone(), constant(&w), 5, None, true).unwrap()
    };
    for (c, seq) in per.iter().enumerate() {
        let alone = only_one(c);
        let want: Vec<u64> = (0..seq.len() as u64).map(|g| alone.pick(g).1).collect();
        assert_eq!(seq, &want, "component {c}");
    }
    // The shares of each regime follow its weights.
    let c = |g| run.counts_at(g);
    let d =
        |a: Vec<u64>, b: Vec<u64>| -> Vec<u64> { a.iter().zip(b).map(|(x, y)| x - y).collect() };
    let mid = d(c(410), c(130));
    assert!(
        mid[1].abs_diff(224) <= 2 && mid[0].abs_diff(28) <= 2,
        "{mid:?}"
    );
    let last = d(c(900), c(410));
    assert!(last[0] == 0 && last[1].abs_diff(245) <= 2, "{last:?}");
}

#[test]
fn a_second_pass_after_a_resume_reads_the_history_and_restores() {
    // Mixture epochs of 400 samples; weights changed at sample 100 of epoch
    // 0; then epoch 0 is read again (a second pass).
    let s = sets(&[100, 300]);
    let (w1, w2) = (constant(&[0.5, 0.5]), constant(&[0.2, 0.8]));
    let first = Mixture::scheduled(s.comps.clone(), w1.clone(), 5, None, true).unwrap();
    let resumed = restore(&s.comps, &w2, &save(&first, 100));
    // Before the change: what the first run read; after it: the resumed run.
    let mut want = picks(&first, 0..100);
    want.extend(picks(&resumed, 100..400));
    let loader = Loader::mixture(resumed.clone(), cfg(50, 5, 0, 1, 2)).unwrap();
    let second: Vec<(usize, u64)> = loader.epoch(0).flat_map(|b| picks_of(&b)).collect();
    assert_eq!(second, want);
    // Counts in the second pass are the history's (this used to wrap below
    // the change) and a checkpoint there restores: into the run's weights it
    // is the same run, into other weights the history is cut there.
    for at in [0u64, 10, 99, 100, 260] {
        let saved = save(&resumed, at);
        assert_eq!(
            saved.counts,
            if at <= 100 {
                first.counts_at(at)
            } else {
                resumed.counts_at(at)
            }
        );
        let again = restore(&s.comps, &w2, &saved);
        assert_eq!(
            picks(&again, at..at + 500),
            picks(&resumed, at..at + 500),
            "at {at}"
        );
        let w3 = constant(&[0.9, 0.1]);
        let other = restore(&s.comps, &w3, &saved);
        let changes: Vec<u64> = other.history().iter().map(|c| c.at).collect();
        let mut expect: Vec<u64> = [0u64, 100].into_iter().filter(|&a| a < at).collect();
        expect.push(at);
        assert_eq!(changes, expect, "at {at}");
        assert_eq!(picks(&other, 0..at), picks(&resumed, 0..at));
    }
}

#[test]
fn bad_histories_are_clear_errors() {
    let s = sets(&[10, 10]);
    let m = Mixture::new(s.comps.clone(), vec![1.0, 1.0], 5).unwrap();
    let step = |start, w: &[f64]| WeightStep {
        start,
        weights: w.to_vec(),
    };
    let change = |at, counts: &[u64], start| ScheduleChange {
        at,
        counts: counts.to_vec(),
        steps: vec![step(start, &[1.0, 2.0])],
    };
    let err = |h: Vec<ScheduleChange>| m.with_history(h).unwrap_err().to_string();
    assert!(err(vec![]).contains("no entry"));
    assert!(err(vec![change(3, &[1, 2], 3)]).contains("not at 0"));
    let e = err(vec![change(0, &[0, 0], 0), change(8, &[5, 4], 8)]);
    assert!(e.contains("add up to 9, not to the position 8"), "{e}");
    let e = err(vec![
        change(0, &[0, 0], 0),
        change(8, &[4, 4], 8),
        change(8, &[4, 4], 8),
    ]);
    assert!(e.contains("increasing samples"), "{e}");
    let e = err(vec![change(0, &[0, 0], 0), change(8, &[4, 4], 7)]);
    assert!(e.contains("the first starting there"), "{e}");
    let mut negative = change(0, &[0, 0], 0);
    negative.steps[0].weights[1] = -1.0;
    assert!(err(vec![negative]).contains("finite and >= 0"));
    assert!(err(vec![change(0, &[0], 0)]).contains("1 counts for 2"));
    // A valid one is accepted and read back.
    let h = vec![change(0, &[0, 0], 0), change(8, &[4, 4], 8)];
    assert_eq!(m.with_history(h.clone()).unwrap().history(), h.as_slice());
}
