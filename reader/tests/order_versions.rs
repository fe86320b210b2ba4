//! Order versions: version 2 re-implemented from docs/FORMAT.md and compared
//! with the crate; sets keep the order version they were written with.

use proptest::prelude::*;
use proptest::test_runner::Config;
use std::path::Path;
use tessera_reader::order::TABLE_MAX;
use tessera_reader::{
    DType, Dataset, EpochOrder, FieldSpec, LastBatch, Loader, LoaderConfig, OrderVersion,
    RecordLayout, ShardSetWriter,
};

/// Order version 2 written from the prose of docs/FORMAT.md section 14.2.
mod reference_v2 {
    pub fn mix(z: u64) -> u64 {
        let z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    pub struct Stream(u64);

    impl Stream {
        pub fn new(seed: u64, epoch: u64) -> Self {
            Stream(seed ^ mix(epoch ^ u64::from_be_bytes(*b"tessera2")))
        }
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
            mix(self.0)
        }
        /// Uniform in 0..m by rejection: draw x, take the high 64 bits of
        /// x * m unless the low 64 bits fall below (2^64 - m) mod m.
        pub fn below(&mut self, m: u64) -> u64 {
            let reject_under = (u64::MAX - m + 1) % m;
            loop {
                let prod = self.next() as u128 * m as u128;
                if (prod as u64) >= reject_under {
                    return (prod >> 64) as u64;
                }
            }
        }
    }

    pub fn table(n: u64, seed: u64, epoch: u64) -> Vec<u64> {
        let mut t: Vec<u64> = (0..n).collect();
        let mut s = Stream::new(seed, epoch);
        let mut i = n;
        while i > 1 {
            i -= 1;
            let j = s.below(i + 1) as usize;
            t.swap(i as usize, j);
        }
        t
    }

    pub struct Network {
        n: u64,
        lo: u32,
        hi: u32,
        keys: Vec<u64>,
        parity: u64,
    }

    impl Network {
        pub fn new(n: u64, seed: u64, epoch: u64) -> Self {
            let mut b = 0u32;
            while b < 64 && (n - 1) >> b != 0 {
                b += 1;
            }
            let hi = b.div_ceil(2);
            let lo = b - hi;
            let mut s = Stream::new(seed, epoch);
            let keys = (0..8).map(|_| s.next()).collect();
            let parity = s.next();
            Network {
                n,
                lo,
                hi,
                keys,
                parity,
            }
        }
        fn bits(v: u64, w: u32) -> u64 {
            if w == 64 { v } else { v & ((1u64 << w) - 1) }
        }
        fn pass(&self, x: u64) -> u64 {
            let mut h = x >> self.lo;
            let mut l = Self::bits(x, self.lo);
            for r in 0..4 {
                l ^= Self::bits(mix(h ^ self.keys[2 * r]), self.lo);
                h ^= Self::bits(mix(l ^ self.keys[2 * r + 1]), self.hi);
            }
            let y = (h << self.lo) | l;
            y ^ (mix((y >> 1) ^ self.parity) & 1)
        }
        pub fn get(&self, p: u64) -> u64 {
            let mut x = self.pass(p);
            while x >= self.n {
                x = self.pass(x);
            }
            x
        }
    }
}

proptest! {
    #![proptest_config(Config { cases: 64, failure_persistence: None, ..Config::default() })]

    #[test]
    fn version_2_tables_follow_the_documented_shuffle(n in 0u64..=3000, seed: u64, epoch: u64) {
        let order = EpochOrder::shuffled(n, seed, epoch);
        let want = reference_v2::table(n, seed, epoch);
        let got: Vec<u64> = (0..n).map(|p| order.get(p)).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn version_2_networks_follow_the_documented_formula(
        n in (TABLE_MAX + 1)..u64::MAX, seed: u64, epoch: u64, probe: u64,
    ) {
        let order = EpochOrder::shuffled(n, seed, epoch);
        let reference = reference_v2::Network::new(n, seed, epoch);
        for p in [probe % n, (probe / 3) % n, n - 1, 0] {
            prop_assert_eq!(order.get(p), reference.get(p), "position {}", p);
        }
        let mut batch = Vec::new();
        let start = probe % n;
        order.extend_records(start..start + 64, &mut batch);
        for (j, &i) in batch.iter().enumerate() {
            prop_assert_eq!(i, reference.get((start + j as u64) % n));
        }
    }

    /// Up to 2^28 records the reader looks the network's round functions up
    /// in tables instead of computing them: the same values, position by
    /// position and through whole batches (padded ones wrap past `n`).
    #[test]
    fn version_2_tabled_networks_follow_the_documented_formula(
        n in (TABLE_MAX + 1)..=(1u64 << 28), seed: u64, epoch: u64, probe: u64,
    ) {
        let order = EpochOrder::shuffled(n, seed, epoch);
        let reference = reference_v2::Network::new(n, seed, epoch);
        let mut batch = Vec::new();
        let start = probe % n;
        order.extend_records(start..start + 1000, &mut batch);
        for (j, &i) in batch.iter().enumerate() {
            let p = (start + j as u64) % n;
            prop_assert_eq!(i, reference.get(p), "position {}", p);
            prop_assert_eq!(order.get(p), i);
        }
    }
}

/// Every width the tables cover, and the first ones computed again.
#[test]
fn version_2_networks_agree_with_the_formula_at_every_width() {
    for bits in 17..=34u32 {
        for n in [(1u64 << (bits - 1)) + 1, (1u64 << bits) - 3, 1u64 << bits] {
            let order = EpochOrder::shuffled(n, bits.into(), 3);
            let reference = reference_v2::Network::new(n, bits.into(), 3);
            let mut batch = Vec::new();
            order.extend_records(n - 300..n + 300, &mut batch);
            for (j, &i) in batch.iter().enumerate() {
                let p = (n - 300 + j as u64) % n;
                assert_eq!(i, reference.get(p), "n = {n}, position {p}");
            }
        }
    }
}

#[test]
fn version_2_at_the_table_boundary_is_a_permutation_both_ways() {
    for n in [TABLE_MAX, TABLE_MAX + 1, 300_007] {
        let order = EpochOrder::shuffled(n, 5, 9);
        let mut seen = vec![false; n as usize];
        let mut all = Vec::new();
        order.extend_records(0..n, &mut all);
        for (p, &i) in all.iter().enumerate() {
            assert_eq!(i, order.get(p as u64));
            assert!(
                !std::mem::replace(&mut seen[i as usize], true),
                "n = {n}: {i} twice"
            );
        }
    }
}

/// Test vectors printed in docs/FORMAT.md, section 14.2.
#[test]
fn documented_test_vectors() {
    let first = |v, n, seed, epoch, k| -> Vec<u64> {
        let o = EpochOrder::shuffled_as(v, n, seed, epoch);
        (0..k).map(|p| o.get(p)).collect()
    };
    assert_eq!(
        first(OrderVersion::V1, 10, 7, 0, 10),
        [5, 1, 4, 0, 3, 2, 9, 6, 7, 8]
    );
    assert_eq!(
        first(OrderVersion::V1, 1000, 42, 3, 8),
        [799, 549, 497, 988, 42, 886, 20, 37]
    );
    assert_eq!(
        first(OrderVersion::V1, 13421772, 1, 0, 4),
        [10249278, 7591738, 1400105, 7913812]
    );
    assert_eq!(first(OrderVersion::V2, 10, 7, 0, 10), V2_N10);
    assert_eq!(first(OrderVersion::V2, 1000, 42, 3, 8), V2_N1000);
    assert_eq!(first(OrderVersion::V2, 13421772, 1, 0, 4), V2_N13M);
    assert_eq!(first(OrderVersion::V2, 1, 3, 4, 1), [0]);
}

const V2_N10: [u64; 10] = [4, 8, 5, 9, 2, 0, 7, 3, 6, 1];
const V2_N1000: [u64; 8] = [664, 956, 645, 96, 951, 801, 447, 932];
const V2_N13M: [u64; 4] = [346829, 9751456, 2354104, 4805900];

fn write_ids(dir: &Path, n: u64) -> Dataset {
    let layout = RecordLayout::packed(&[FieldSpec::new("id", DType::U64, &[])]).unwrap();
    let mut w = ShardSetWriter::new(dir, layout, 1 << 16).unwrap();
    w.begin_split("all").unwrap();
    for i in 0..n {
        w.write_records(&i.to_le_bytes()).unwrap();
    }
    w.finish().unwrap();
    Dataset::open(dir).unwrap()
}

fn epoch_ids(ds: &Dataset, seed: u64, epoch: u64) -> Vec<u64> {
    let cfg = LoaderConfig {
        batch_size: 7,
        seed,
        last_batch: LastBatch::Partial,
        ..Default::default()
    };
    let loader = Loader::new(ds, cfg).unwrap();
    loader
        .epoch(epoch)
        .flat_map(|b| b.field::<u64>("id").unwrap().to_vec())
        .collect()
}

#[test]
fn new_sets_read_in_version_2_order_and_old_ones_in_version_1() {
    let dir = tempfile::tempdir().unwrap();
    let ds = write_ids(dir.path(), 500);
    assert_eq!(ds.manifest().order_version, 2);
    assert_eq!(ds.order_version(), OrderVersion::V2);
    let v2 = EpochOrder::shuffled_as(OrderVersion::V2, 500, 11, 2);
    assert_eq!(
        epoch_ids(&ds, 11, 2),
        (0..500).map(|p| v2.get(p)).collect::<Vec<_>>()
    );

    // The same set with the key removed is a set written before version 2.
    let path = dir.path().join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(m.as_object_mut().unwrap().remove("order_version").is_some());
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.order_version(), OrderVersion::V1);
    let v1 = EpochOrder::shuffled_as(OrderVersion::V1, 500, 11, 2);
    assert_eq!(
        epoch_ids(&ds, 11, 2),
        (0..500).map(|p| v1.get(p)).collect::<Vec<_>>()
    );
}

#[test]
fn an_unknown_order_version_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    write_ids(dir.path(), 10);
    let path = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("\"order_version\": 2", "\"order_version\": 7"),
    )
    .unwrap();
    let err = Dataset::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("order_version") && err.contains('7'), "{err}");
    assert!(err.contains("manifest.json"), "{err}");
}

/// Above 65,536 records (the tabled network) the records the loader
/// delivers are the documented order, for any thread count, batch size (the
/// last batch partial or padded) and a resumed epoch.
#[test]
fn the_loader_delivers_the_documented_network_order() {
    let dir = tempfile::tempdir().unwrap();
    let n = 70_001;
    let ds = write_ids(dir.path(), n);
    let reference = reference_v2::Network::new(n, 3, 1);
    let want: Vec<u64> = (0..n).map(|p| reference.get(p)).collect();
    for threads in [0, 1, 2, 3] {
        for (batch_size, last_batch) in [
            (4096, LastBatch::Partial),
            (1000, LastBatch::Pad),
            (999, LastBatch::Drop),
        ] {
            let cfg = LoaderConfig {
                batch_size,
                seed: 3,
                threads,
                last_batch,
                ..Default::default()
            };
            let loader = Loader::new(&ds, cfg).unwrap();
            let got: Vec<u64> = loader
                .epoch(1)
                .flat_map(|b| b.field::<u64>("id").unwrap().to_vec())
                .collect();
            let expect: Vec<u64> = (0..got.len()).map(|p| want[p % n as usize]).collect();
            assert_eq!(got, expect, "threads {threads}, batch {batch_size}");
            // Resumed after 3 batches: the rest of the same sequence.
            let mut it = loader.epoch(1);
            for _ in 0..3 {
                it.next();
            }
            let rest: Vec<u64> = loader
                .resume(it.cursor())
                .unwrap()
                .flat_map(|b| b.field::<u64>("id").unwrap().to_vec())
                .collect();
            assert_eq!(rest, got[3 * batch_size as usize..], "threads {threads}");
        }
    }
}
