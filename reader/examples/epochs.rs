//! Whole-epoch throughput of the Rust loader next to a plain gather loop, in
//! one run (`benches/epochs.py` drives it together with the other paths).
//!
//! ```text
//! cargo run --release -p tessera-shards-reader --example epochs -- SET [--epochs 5] [--batch 4096]
//!     [--threads 2] [--mix A,B,C] [--sequential] [--rounds 1] [--json]
//! ```
//!
//! Every figure covers whole shuffled epochs, epoch start included:
//!
//! - `gather_{1,2}t`: the baseline, a plain loop copying the records of a
//!   random permutation (drawn and turned into addresses beforehand, not
//!   timed) into a 4096-record buffer, on one thread and on two (alternate
//!   batches): like an epoch, it reads every record once;
//!   `gather_2t_read`: the same on two threads, each then summing every
//!   8-byte word of the batch it gathered; `gather_2t_iid`: two threads
//!   over independent random draws instead of a permutation (the baseline
//!   before 2026-11-29: a third of the draws repeat a record, which may
//!   still be cached, so on a set near the cache's size it is faster than
//!   any epoch can be);
//! - `loader_{0,1,2}t`: the loader with that many prefetch threads, the
//!   consumer dropping each batch (`_read`: summing every 8-byte word of it);
//! - `order_v1_ns`, `order_v2_ns`: nanoseconds per position to compute a
//!   whole epoch's shuffled order, batch by batch, under order versions 1
//!   and 2 (the cost of the permutation alone; the fastest epoch);
//! - with `--mix A,B,C`: `mixture_2t` reads a mixture of the three sets
//!   (weights proportional to their sizes) and `single_2t` one set of the
//!   same total size (`SET`);
//! - with `--sequential`: `memcpy_{1,2}t`, a plain loop copying contiguous
//!   batches out of the maps into a buffer (the sequential baseline), and
//!   `seq_loader_{0,1,2}t_read`, the sequential loader with a consumer that
//!   sums every 8-byte word of each batch (a batch inside one shard is
//!   borrowed from the map, so reading it is what reaches its bytes).
//!
//! With `--rounds R` every figure is measured R times, the rounds one after
//! the other, and the median is printed, with the median over rounds of the
//! ratio to the round's own baseline (`gather_2t`; `gather_2t_read` for
//! the shuffled rows whose consumer reads every byte; `memcpy_2t` for the
//! sequential rows): on a shared machine one round can be off by a factor
//! of two, and a ratio within a round is steadier than either figure.

use std::hint::black_box;
use std::time::Instant;
use tessera_reader::{
    Dataset, EpochOrder, LastBatch, Loader, LoaderConfig, MixComponent, Mixture, OrderVersion,
};

struct Args {
    set: String,
    epochs: u64,
    batch: u64,
    threads: usize,
    mix: Vec<String>,
    json: bool,
    /// Run only the loader with this many threads (for profiling); with
    /// `--sequential` the sequential loader, its consumer reading every byte.
    only: Option<usize>,
    sequential: bool,
    rounds: usize,
}

fn args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        set: String::new(),
        epochs: 5,
        batch: 4096,
        threads: 2,
        mix: Vec::new(),
        json: false,
        only: None,
        sequential: false,
        rounds: 1,
    };
    while let Some(x) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match x.as_str() {
            "--epochs" => a.epochs = value("--epochs")?.parse().map_err(|e| format!("{e}"))?,
            "--batch" => a.batch = value("--batch")?.parse().map_err(|e| format!("{e}"))?,
            "--threads" => a.threads = value("--threads")?.parse().map_err(|e| format!("{e}"))?,
            "--mix" => a.mix = value("--mix")?.split(',').map(String::from).collect(),
            "--json" => a.json = true,
            "--sequential" => a.sequential = true,
            "--rounds" => {
                a.rounds = value("--rounds")?
                    .parse::<usize>()
                    .map_err(|e| format!("{e}"))?
                    .max(1)
            }
            "--only-loader" => {
                a.only = Some(
                    value("--only-loader")?
                        .parse()
                        .map_err(|e| format!("{e}"))?,
                )
            }
            s if !s.starts_with('-') && a.set.is_empty() => a.set = s.to_string(),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.set.is_empty() {
        return Err(
            "usage: epochs SET [--epochs N] [--batch B] [--threads T] [--mix A,B,C] [--json]"
                .into(),
        );
    }
    Ok(a)
}

/// CPU seconds this process has used (user + system), from /proc on
/// Linux; 0 elsewhere. Under machine load, CPU time per sample is a better
/// guide than wall time.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at ")".
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// Sums every 8-byte word: a consumer that reads the whole batch.
fn read_all(bytes: &[u8]) -> u64 {
    let (head, words, tail) = {
        // SAFETY: any initialized bytes are valid u64 words; `align_to`
        // only hands out the correctly aligned middle part.
        unsafe { bytes.align_to::<u64>() }
    };
    let mut s = words.iter().fold(0u64, |a, &w| a.wrapping_add(w));
    for &b in head.iter().chain(tail) {
        s = s.wrapping_add(u64::from(b));
    }
    s
}

/// The plain baseline over `epochs` epochs of `n` records; with `read`,
/// each thread then reads every byte of the batch it gathered (the same
/// work as a loader whose consumer reads every byte).
fn gather(
    ds: &Dataset,
    idx: &[u64],
    batch: usize,
    (threads, read): (usize, bool),
    epochs: u64,
) -> Rate {
    let stride = ds.stride();
    let n = idx.len();
    let batches = n.div_ceil(batch);
    // The records' addresses, computed before timing: the loop below is
    // the bare copy a C loop over one mapped file would do.
    let recs: Vec<&[u8]> = idx.iter().map(|&i| ds.record(i).unwrap_or(&[])).collect();
    let recs = &recs;
    let t = Instant::now();
    let cpu = cpu_seconds();
    std::thread::scope(|s| {
        for th in 0..threads {
            s.spawn(move || {
                let mut buf = vec![0u8; batch * stride];
                for _ in 0..epochs {
                    let mut k = th;
                    while k < batches {
                        let part = &recs[k * batch..((k + 1) * batch).min(n)];
                        for (dst, src) in buf.chunks_exact_mut(stride).zip(part) {
                            dst.copy_from_slice(src);
                        }
                        if read {
                            black_box(read_all(&buf[..part.len() * stride]));
                        }
                        black_box(&buf);
                        k += threads;
                    }
                }
            });
        }
    });
    Rate::since(n as u64 * epochs, t, cpu)
}

/// The sequential baseline: contiguous batches copied out of the maps.
fn memcpy(ds: &Dataset, batch: usize, threads: usize, epochs: u64) -> Rate {
    let stride = ds.stride();
    let n = ds.len() as usize;
    let batches = n.div_ceil(batch);
    // Each batch as its runs inside shards, found before timing.
    let runs: Vec<Vec<&[u8]>> = (0..batches)
        .map(|k| {
            let (mut at, end) = (k * batch, ((k + 1) * batch).min(n));
            let mut v = Vec::new();
            while at < end {
                let mut len = end - at;
                while ds.records(at as u64..(at + len) as u64).is_none() {
                    len -= 1;
                }
                v.push(ds.records(at as u64..(at + len) as u64).unwrap_or(&[]));
                at += len;
            }
            v
        })
        .collect();
    let runs = &runs;
    let t = Instant::now();
    let cpu = cpu_seconds();
    std::thread::scope(|s| {
        for th in 0..threads {
            s.spawn(move || {
                let mut buf = vec![0u8; batch * stride];
                for _ in 0..epochs {
                    let mut k = th;
                    while k < batches {
                        let mut filled = 0;
                        for r in &runs[k] {
                            buf[filled..filled + r.len()].copy_from_slice(r);
                            filled += r.len();
                        }
                        black_box(&buf);
                        k += threads;
                    }
                }
            });
        }
    });
    Rate::since(n as u64 * epochs, t, cpu)
}

/// Samples per second of wall time, and CPU nanoseconds per sample.
#[derive(Clone, Copy)]
struct Rate {
    per_sec: f64,
    cpu_ns: f64,
}

impl Rate {
    fn since(samples: u64, t: Instant, cpu: f64) -> Rate {
        Rate {
            per_sec: samples as f64 / t.elapsed().as_secs_f64(),
            cpu_ns: (cpu_seconds() - cpu) * 1e9 / samples as f64,
        }
    }
}

fn config(batch: u64, threads: usize, seed: u64) -> LoaderConfig {
    LoaderConfig {
        batch_size: batch,
        seed,
        threads,
        last_batch: LastBatch::Partial,
        ..Default::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Records per second over whole epochs, epoch starts included.
fn stream(loader: &Loader, epochs: u64, read: bool) -> Rate {
    let mut rows = 0u64;
    let mut sum = 0u64;
    let t = Instant::now();
    let cpu = cpu_seconds();
    for e in 0..epochs {
        for b in loader.epoch(e) {
            rows += b.rows() as u64;
            if read {
                sum = sum.wrapping_add(read_all(b.bytes()));
            }
        }
    }
    black_box(sum);
    Rate::since(rows, t, cpu)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let ds = match Dataset::open(&a.set) {
        Ok(ds) => ds,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    // Page the set in, untimed.
    black_box(
        (0..ds.len())
            .step_by(25)
            .map(|i| ds.record(i).map_or(0, |r| r[0]))
            .fold(0u8, u8::wrapping_add),
    );
    // The baseline's indices: a random permutation (Fisher-Yates over
    // xorshift), so that like an epoch it reads every record once; and, for
    // `gather_2t_iid`, as many independent draws (about a third of them
    // repeat a record, and a repeat may still be in the cache).
    let mut x = 0x5eed_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut idx: Vec<u64> = (0..ds.len()).collect();
    for i in (1..idx.len()).rev() {
        idx.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    let iid: Vec<u64> = (0..ds.len()).map(|_| next() % ds.len()).collect();
    let idx = (idx, iid);
    if let Some(threads) = a.only {
        // With --sequential: the sequential loader, reading every byte.
        let cfg = LoaderConfig {
            shuffle: !a.sequential,
            ..config(a.batch, threads, 7)
        };
        let l = Loader::new(&ds, cfg).unwrap_or_else(|e| panic!("{e}"));
        let r = stream(&l, a.epochs, a.sequential);
        println!(
            "loader_{threads}t {:.1} M samples/s, {:.1} CPU ns/sample",
            r.per_sec / 1e6,
            r.cpu_ns
        );
        return;
    }
    let mut rounds: Vec<Round> = Vec::new();
    for _ in 0..a.rounds {
        rounds.push(round(&a, &ds, &idx));
    }
    // Per figure: the median over rounds of its rate, CPU time, and ratio
    // to the baseline of its own round.
    let baseline_of = |name: &str| {
        if name.starts_with("memcpy") || name.starts_with("seq_") {
            "memcpy_2t"
        } else if name.ends_with("_read") {
            "gather_2t_read"
        } else {
            "gather_2t"
        }
    };
    let names: Vec<String> = rounds[0].1.iter().map(|(n, _)| n.clone()).collect();
    let results: Vec<(String, Rate, f64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let base = baseline_of(n);
            let bi = names.iter().position(|m| m == base).unwrap_or(i);
            let rate = Rate {
                per_sec: median(rounds.iter().map(|r| r.1[i].1.per_sec).collect()),
                cpu_ns: median(rounds.iter().map(|r| r.1[i].1.cpu_ns).collect()),
            };
            let ratio = median(
                rounds
                    .iter()
                    .map(|r| r.1[i].1.per_sec / r.1[bi].1.per_sec)
                    .collect(),
            );
            (n.clone(), rate, ratio)
        })
        .collect();
    let orders: Vec<(String, f64)> = rounds[0]
        .0
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.clone(), median(rounds.iter().map(|r| r.0[i].1).collect())))
        .collect();
    if a.json {
        let mut items: Vec<String> = results
            .iter()
            .map(|(n, r, x)| {
                format!(
                    "{{\"name\": \"{n}\", \"samples_per_sec\": {:.0}, \"cpu_ns_per_sample\": {:.2}, \
                     \"baseline\": \"{}\", \"ratio\": {x:.4}}}",
                    r.per_sec,
                    r.cpu_ns,
                    baseline_of(n)
                )
            })
            .collect();
        items.extend(
            orders
                .iter()
                .map(|(n, ns)| format!("{{\"name\": \"{n}\", \"ns_per_position\": {ns:.2}}}")),
        );
        println!("[{}]", items.join(", "));
    } else {
        for (n, ns) in &orders {
            println!("{n:>18}  {ns:8.2} ns per position");
        }
        for (n, r, x) in &results {
            println!(
                "{n:>22}  {:8.1} M samples/s  {x:5.2} x {:<9}  {:6.1} CPU ns/sample",
                r.per_sec / 1e6,
                baseline_of(n),
                r.cpu_ns
            );
        }
    }
}

/// One round of every figure: (ns per position of each order version,
/// rates of each path).
type Round = (Vec<(String, f64)>, Vec<(String, Rate)>);

/// One round of every figure (see [`Round`]).
fn round(a: &Args, ds: &Dataset, (idx, iid): &(Vec<u64>, Vec<u64>)) -> Round {
    let ds = ds.clone();
    let batch = a.batch as usize;
    let mut orders: Vec<(String, f64)> = Vec::new();
    for (name, v) in [
        ("order_v1", OrderVersion::V1),
        ("order_v2", OrderVersion::V2),
    ] {
        let mut out = Vec::with_capacity(batch);
        let mut sum = 0u64;
        // The fastest epoch: the least disturbed by other work.
        let mut best = f64::INFINITY;
        for e in 0..a.epochs {
            let t = Instant::now();
            let o = EpochOrder::shuffled_as(v, ds.len(), 7, e);
            let mut p = 0;
            while p < ds.len() {
                out.clear();
                o.extend_records(p..(p + a.batch).min(ds.len()), &mut out);
                sum = sum.wrapping_add(out[0]);
                p += a.batch;
            }
            best = best.min(t.elapsed().as_nanos() as f64 / ds.len() as f64);
        }
        black_box(sum);
        orders.push((name.into(), best));
    }
    let mut results: Vec<(String, Rate)> = vec![
        (
            "gather_1t".into(),
            gather(&ds, idx, batch, (1, false), a.epochs),
        ),
        (
            "gather_2t".into(),
            gather(&ds, idx, batch, (2, false), a.epochs),
        ),
        (
            "gather_2t_read".into(),
            gather(&ds, idx, batch, (2, true), a.epochs),
        ),
        (
            "gather_2t_iid".into(),
            gather(&ds, iid, batch, (2, false), a.epochs),
        ),
    ];
    for threads in [0usize, 1, a.threads] {
        let l = Loader::new(&ds, config(a.batch, threads, 7)).unwrap_or_else(|e| panic!("{e}"));
        results.push((format!("loader_{threads}t"), stream(&l, a.epochs, false)));
        results.push((
            format!("loader_{threads}t_read"),
            stream(&l, a.epochs, true),
        ));
    }
    if !a.mix.is_empty() {
        let comps: Vec<MixComponent> = a
            .mix
            .iter()
            .enumerate()
            .map(|(i, p)| MixComponent {
                name: format!("c{i}"),
                dataset: Dataset::open(p).unwrap_or_else(|e| panic!("{e}")),
            })
            .collect();
        let weights = comps.iter().map(|c| c.dataset.len() as f64).collect();
        let m = Mixture::new(comps, weights, 7).unwrap_or_else(|e| panic!("{e}"));
        let ml =
            Loader::mixture(m, config(a.batch, a.threads, 7)).unwrap_or_else(|e| panic!("{e}"));
        let sl = Loader::new(&ds, config(a.batch, a.threads, 7)).unwrap_or_else(|e| panic!("{e}"));
        // Interleaved, so both see the same machine load.
        let mut single = Vec::new();
        let mut mixed = Vec::new();
        for _ in 0..2 {
            single.push(stream(&sl, a.epochs, false));
            mixed.push(stream(&ml, a.epochs, false));
        }
        let mean = |v: &[Rate]| Rate {
            per_sec: v.iter().map(|r| r.per_sec).sum::<f64>() / v.len() as f64,
            cpu_ns: v.iter().map(|r| r.cpu_ns).sum::<f64>() / v.len() as f64,
        };
        results.push(("single_2t".into(), mean(&single)));
        results.push(("mixture_2t".into(), mean(&mixed)));
    }
    if a.sequential {
        results.push(("memcpy_1t".into(), memcpy(&ds, batch, 1, a.epochs)));
        results.push(("memcpy_2t".into(), memcpy(&ds, batch, 2, a.epochs)));
        for threads in [0usize, 1, a.threads] {
            let cfg = LoaderConfig {
                shuffle: false,
                ..config(a.batch, threads, 7)
            };
            let l = Loader::new(&ds, cfg).unwrap_or_else(|e| panic!("{e}"));
            results.push((
                format!("seq_loader_{threads}t_read"),
                stream(&l, a.epochs, true),
            ));
        }
    }
    (orders, results)
}
