//! Batch throughput of the loader next to plain baselines on the same bytes.
//!
//! For 160-byte records (a Criteo-like row) and 4096-byte records (a small
//! image), with batches of 4096 records:
//!
//! - `seq_<stride>B`: the sequential loader (threads 1 and 2) against a plain
//!   copy of contiguous batches out of the same memory maps;
//! - `shuf_<stride>B`: the shuffled loader against a plain loop copying
//!   records at precomputed random indices into a batch buffer.
//!
//! Each baseline runs on one thread and on two (alternate batches per thread).
//! The loader runs with 1 and 2 prefetch threads, and with 0 (batches built
//! on the consuming thread), which isolates the cost of building a batch from
//! that of handing it over between threads. One criterion iteration is one
//! batch; throughput is reported in bytes (`scripts/bench-reader.sh` turns
//! the results into GB/s, samples/s and ratios).
//!
//! The loader's consumer reads every byte it is handed (it sums the batch as
//! 8-byte words), so a sequential batch borrowed from the memory map counts
//! only once its bytes have been read, as a training step would read them;
//! the baselines write every byte of their batch buffer.
//!
//! The shard sets (`TESSERA_BENCH_GIB` GiB each, default 2) are written once
//! under `$CARGO_TARGET_TMPDIR/tessera-bench` (or `TESSERA_BENCH_DIR`) and
//! reused by later runs.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_reader::{
    Batches, Cursor, DType, Dataset, FieldSpec, LastBatch, Loader, LoaderConfig, RecordLayout,
    ShardSetWriter,
};

const BATCH: usize = 4096;
const SHARD_BYTES: u64 = 64 << 20;

fn bench_gib() -> f64 {
    std::env::var("TESSERA_BENCH_GIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|g: &f64| *g > 0.0)
        .unwrap_or(2.0)
}

fn layout_for(stride: usize) -> RecordLayout {
    let fields = match stride {
        // 13 dense features, 26 hashed categorical ids, a label.
        160 => vec![
            FieldSpec::new("dense", DType::F32, &[13]),
            FieldSpec::new("sparse", DType::I32, &[26]),
            FieldSpec::new("label", DType::F32, &[]),
        ],
        // A 4 KiB blob and a label.
        4096 => vec![
            FieldSpec::new("label", DType::I64, &[]),
            FieldSpec::new("pixels", DType::U8, &[4088]),
        ],
        _ => unreachable!("no layout for stride {stride}"),
    };
    let layout = RecordLayout::packed(&fields).unwrap();
    assert_eq!(layout.stride as usize, stride);
    layout
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Opens the cached set for `stride`, writing it first if needed.
fn bench_set(stride: usize) -> Dataset {
    let rows = ((bench_gib() * f64::from(1u32 << 30)) as u64 / stride as u64).max(2 * BATCH as u64);
    let base = std::env::var_os("TESSERA_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tessera-bench"));
    let dir = base.join(format!("r{stride}-n{rows}"));
    if let Ok(ds) = Dataset::open(&dir)
        && ds.len() == rows
    {
        return ds;
    }
    let gib = (rows * stride as u64) as f64 / f64::from(1u32 << 30);
    eprintln!(
        "writing a {gib:.2} GiB shard set of {rows} {stride}-byte records to {} (once)",
        dir.display()
    );
    let start = Instant::now();
    // Written beside the final name and renamed, so an interrupted run never
    // leaves a half-written set that a later run would take for complete.
    let tmp = base.join(format!("r{stride}-n{rows}.partial"));
    let _ = std::fs::remove_dir_all(&tmp);
    let _ = std::fs::remove_dir_all(&dir);
    let mut w = ShardSetWriter::new(&tmp, layout_for(stride), SHARD_BYTES).unwrap();
    w.begin_split("train").unwrap();
    let mut rng = XorShift(0x7e55_e7a0_0000_0001);
    let chunk_rows = (8 << 20) / stride;
    let mut buf = vec![0u8; chunk_rows * stride];
    let mut left = rows;
    while left > 0 {
        let n = (chunk_rows as u64).min(left) as usize;
        for word in buf[..n * stride].chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next().to_le_bytes());
        }
        w.write_records(&buf[..n * stride]).unwrap();
        left -= n as u64;
    }
    w.finish().unwrap();
    std::fs::rename(&tmp, &dir).unwrap();
    eprintln!("  done in {:.1?}", start.elapsed());
    Dataset::open(&dir).unwrap()
}

/// The record area of every shard, as slices of the dataset's own maps: the
/// baselines read exactly the bytes the loader reads.
struct Raw<'a> {
    shards: Vec<&'a [u8]>,
    rows_per_shard: u64,
    rows: u64,
    stride: usize,
}

impl<'a> Raw<'a> {
    fn new(ds: &'a Dataset) -> Self {
        let m = ds.manifest();
        let rows_per_shard = m.shards[0].rows;
        assert!(
            m.shards[..m.shards.len() - 1]
                .iter()
                .all(|s| s.rows == rows_per_shard),
            "the baselines assume equal shards but the last"
        );
        let mut start = 0;
        let shards = m
            .shards
            .iter()
            .map(|s| {
                let r = ds.records(start..start + s.rows).unwrap();
                start += s.rows;
                r
            })
            .collect();
        Raw {
            shards,
            rows_per_shard,
            rows: ds.len(),
            stride: ds.stride(),
        }
    }

    /// Touches every page once, so that no benchmark pays the page faults
    /// of first access for the others.
    fn prefault(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>())
            .sum()
    }

    /// Plain copy of rows `row..row + out.len() / stride` (may span shards).
    fn copy_contiguous(&self, mut row: u64, mut out: &mut [u8]) {
        while !out.is_empty() {
            let s = (row / self.rows_per_shard) as usize;
            let at = (row % self.rows_per_shard) as usize * self.stride;
            let src = &self.shards[s][at..];
            let n = src.len().min(out.len());
            let (head, tail) = out.split_at_mut(n);
            head.copy_from_slice(&src[..n]);
            out = tail;
            row += (n / self.stride) as u64;
        }
    }

    /// Plain gather loop: record `idx[j]` into slot `j`.
    fn gather(&self, idx: &[u64], out: &mut [u8]) {
        for (dst, &i) in out.chunks_exact_mut(self.stride).zip(idx) {
            let s = (i / self.rows_per_shard) as usize;
            let at = (i % self.rows_per_shard) as usize * self.stride;
            dst.copy_from_slice(&self.shards[s][at..at + self.stride]);
        }
    }
}

/// Sums every 8-byte word of `bytes` (a batch: 8-byte aligned, a multiple
/// of 8 bytes long, as every stride here is): a consumer reading the batch.
fn sum_words(bytes: &[u8]) -> u64 {
    bytes.chunks_exact(8).fold(0u64, |a, w| {
        a.wrapping_add(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
    })
}

/// Runs `iters` batches split over `bufs.len()` threads (thread `t` takes
/// batches `t, t + T, ...`), calling `work(k, buf)` for batch `k`.
fn run_split(iters: u64, bufs: &mut [Vec<u8>], work: &(dyn Fn(u64, &mut [u8]) + Sync)) -> Duration {
    let threads = bufs.len() as u64;
    let start = Instant::now();
    if threads == 1 {
        for k in 0..iters {
            work(k, &mut bufs[0]);
            black_box(&bufs[0]);
        }
    } else {
        std::thread::scope(|s| {
            for (t, buf) in bufs.iter_mut().enumerate() {
                s.spawn(move || {
                    let mut k = t as u64;
                    while k < iters {
                        work(k, buf);
                        black_box(&*buf);
                        k += threads;
                    }
                });
            }
        });
    }
    start.elapsed()
}

/// Streams `iters` batches from `loader`, reading every byte of each,
/// continuing from `cursor` across calls (and into the next epoch when one
/// ends, timed, as in training).
/// Before the timer starts, a few batches are taken untimed so the prefetch
/// threads are running and the buffer pool is warm, with nothing built ahead
/// for free: what is timed is steady-state streaming.
fn run_loader(loader: &Loader, cursor: &mut Cursor, iters: u64) -> Duration {
    let cfg = loader.config();
    let warm = cfg.threads * (cfg.prefetch + 1) + 1;
    let mut it = loader.resume(*cursor).unwrap();
    let mut next = |it: &mut Batches| loop {
        if let Some(b) = it.next() {
            return b;
        }
        *cursor = Cursor {
            epoch: cursor.epoch + 1,
            position: 0,
            ..*cursor
        };
        *it = loader.resume(*cursor).unwrap();
    };
    for _ in 0..warm {
        black_box(sum_words(next(&mut it).bytes()));
    }
    let start = Instant::now();
    for _ in 0..iters {
        black_box(sum_words(next(&mut it).bytes()));
    }
    let elapsed = start.elapsed();
    *cursor = it.cursor();
    elapsed
}

fn record_size(c: &mut Criterion, stride: usize) {
    let ds = bench_set(stride);
    let raw = Raw::new(&ds);
    black_box(raw.prefault());
    let bytes = (BATCH * stride) as u64;
    let full_batches = raw.rows / BATCH as u64;
    let mut bufs: Vec<Vec<u8>> = (0..2).map(|_| vec![1u8; BATCH * stride]).collect();
    let loader = |threads: usize, shuffle: bool| {
        Loader::new(
            &ds,
            LoaderConfig {
                batch_size: BATCH as u64,
                shuffle,
                seed: 1,
                last_batch: LastBatch::Drop,
                threads,
                ..Default::default()
            },
        )
        .unwrap()
    };

    let mut g = c.benchmark_group(format!("seq_{stride}B"));
    g.throughput(Throughput::BytesDecimal(bytes));
    for threads in [1usize, 2] {
        let mut next_batch = 0u64;
        g.bench_function(format!("memcpy_{threads}t"), |b| {
            b.iter_custom(|iters| {
                let first = next_batch;
                next_batch += iters;
                let work = |k: u64, buf: &mut [u8]| {
                    let row = (first + k) % full_batches * BATCH as u64;
                    raw.copy_contiguous(row, buf);
                };
                run_split(iters, &mut bufs[..threads], &work)
            })
        });
    }
    for threads in [0usize, 1, 2] {
        let l = loader(threads, false);
        let mut cursor = Cursor {
            seed: 1,
            ..Cursor::default()
        };
        g.bench_function(format!("tessera_{threads}t"), |b| {
            b.iter_custom(|iters| run_loader(&l, &mut cursor, iters))
        });
    }
    g.finish();

    // Random indices for the baseline, drawn once: enough of them that the
    // records they touch are far larger than any cache.
    let chunks = (raw.rows as usize / BATCH).clamp(1, 1024);
    let mut rng = XorShift(0x5eed_0000_0000_0001);
    let idx: Vec<u64> = (0..chunks * BATCH).map(|_| rng.next() % raw.rows).collect();
    let mut g = c.benchmark_group(format!("shuf_{stride}B"));
    g.throughput(Throughput::BytesDecimal(bytes));
    for threads in [1usize, 2] {
        let mut next_chunk = 0u64;
        g.bench_function(format!("gather_{threads}t"), |b| {
            b.iter_custom(|iters| {
                let first = next_chunk;
                next_chunk += iters;
                let work = |k: u64, buf: &mut [u8]| {
                    let c = ((first + k) % chunks as u64) as usize;
                    raw.gather(&idx[c * BATCH..(c + 1) * BATCH], buf);
                };
                run_split(iters, &mut bufs[..threads], &work)
            })
        });
    }
    for threads in [0usize, 1, 2] {
        let l = loader(threads, true);
        let mut cursor = Cursor {
            seed: 1,
            ..Cursor::default()
        };
        g.bench_function(format!("tessera_{threads}t"), |b| {
            b.iter_custom(|iters| run_loader(&l, &mut cursor, iters))
        });
    }
    g.finish();
}

fn throughput(c: &mut Criterion) {
    record_size(c, 160);
    record_size(c, 4096);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = throughput
}
criterion_main!(benches);
