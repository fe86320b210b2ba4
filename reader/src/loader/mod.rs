//! The prefetching batch iterator.
//!
//! Batch `k` of a rank's epoch is a pure function of `(seed, epoch, k)` and the
//! configuration. With `threads = T >= 1`, batch `k` is assigned to thread
//! `k mod T`, which builds its batches in increasing `k` into its own bounded
//! queue; the consumer pops queue `k mod T` for batch `k`. Each thread has a
//! claim counter, the next of its batches nobody has started: the thread
//! advances it before it builds one, and so may the consumer. When the
//! batch the consumer needs is not queued, it builds the earliest batch
//! nobody has started (at most two ahead of the one it needs)
//! rather than wait, but only when the threads leave it a core: the threads
//! and a building consumer never outnumber the cores ([`fit_cores`]), so
//! `threads` beyond `cores - 1` are not started, and a consumer with
//! `cores - 1` threads or fewer builds while it would wait (one that keeps
//! up with a training step never waits, and builds nothing). With `T = 0`
//! the consumer builds every batch. Batches borrowed from the memory map
//! (zero-copy sequential batches inside one shard) are always the
//! consumer's; the threads skip them. Whoever builds batch `k`, it is the
//! same bytes: the sequence of batches is the same for any thread count,
//! core count and prefetch depth; timing only changes who builds what.
//!
//! - this module: the configuration and the [`Loader`], which knows the
//!   order and hands each epoch to
//! - [`build`]: building one batch (a gather, contiguous copies, or a
//!   mixture's samples; or borrowing it from the map),
//! - [`batches`]: the [`Batches`] iterator and its prefetch threads,
//! - [`handoff`]: the bounded queue between a prefetch thread and the
//!   consumer.
//!
//! The bytes in flight are capped by a budget, half the last-level cache
//! and at least [`IN_FLIGHT_BYTES`] ([`in_flight_bytes`]): no more threads
//! are started than have one batch each in it ([`busy_threads`]), and each
//! may hold `prefetch + 1` batches (queued, or being built), fewer when that
//! many batches of this byte size would not fit it together ([`depth`]).
//! With a 32 MiB cache, large records (224x224x3 images: 9.6 MB batches of
//! 64) then cycle two buffers, one thread's and the consumer's, that stay
//! in the cache instead of seven that do not; small ones keep every thread
//! and the full depth.

mod batches;
mod build;
mod handoff;
#[cfg(test)]
mod tests;

pub use batches::Batches;

use crate::batch::{AlignedBuf, Batch, BufPool};
use crate::cache::AccessPlan;
use crate::cache::PlanHandle;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::layout::RecordLayout;
use crate::mixture::Mixture;
use crate::order::{Cursor, EpochOrder, LastBatch, Schedule, view_pieces};
use build::Job;
use std::sync::Arc;

/// How to cut a dataset into batches. `Default` gives a shuffled,
/// single-rank loader with batches of 256 and two prefetch threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Records per batch on this rank.
    pub batch_size: u64,
    /// Seeded permutation per epoch (true) or storage order (false).
    pub shuffle: bool,
    /// Shuffle seed.
    pub seed: u64,
    /// This rank, in `0..world_size`.
    pub rank: u64,
    /// Number of ranks sharing each epoch.
    pub world_size: u64,
    /// Policy for the last, short global batch.
    pub last_batch: LastBatch,
    /// Prefetch threads; 0 builds batches on the consuming thread. Fewer
    /// are started (at least one) when their batches would not fit a
    /// cache-sized budget, one batch each (16 MiB: one thread for 9.6 MB
    /// batches). The batches are the same for any count.
    pub threads: usize,
    /// Batches each thread may build ahead (at least 1): each holds at
    /// most `prefetch + 1` in flight, fewer when their bytes would pass a
    /// cache-sized budget (16 MiB for all the threads, at least one batch
    /// each). The batches are the same at any depth.
    pub prefetch: usize,
    /// Which of `num_workers` interleaved sub-streams this loader yields:
    /// batches `k` with `k % num_workers == worker`. For data-loader worker
    /// processes; leave at 0 of 1 otherwise.
    pub worker: u64,
    /// Number of interleaved sub-streams (see `worker`).
    pub num_workers: u64,
    /// Let a sequential batch that lies inside one shard borrow its records
    /// from the memory map instead of copying them ([`Batch::is_zero_copy`]).
    pub zero_copy: bool,
    /// With `shuffle`: 0 shuffles the whole view; `w >= 1` shuffles the
    /// order of its shards and then the records inside each window of `w`
    /// consecutive shards of that order ([`EpochOrder::windowed`]), so an
    /// epoch reads one window of shards at a time. Meant for sets read
    /// through the shard cache (object stores), where the whole view need
    /// not fit the cache. Part of the order: it must be the same on every
    /// rank and at a resume.
    pub shuffle_window: u64,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            batch_size: 256,
            shuffle: true,
            seed: 0,
            rank: 0,
            world_size: 1,
            last_batch: LastBatch::Drop,
            threads: 2,
            prefetch: 2,
            worker: 0,
            num_workers: 1,
            zero_copy: true,
            shuffle_window: 0,
        }
    }
}

/// Bytes of batch buffers the prefetch threads together may hold in
/// flight (queued for the consumer, or being built), when the depth asked
/// for would hold more, on a machine whose last-level cache is unknown or
/// small: half the 32 MiB L3 of the machine this was first measured on,
/// so the buffers cycled stay in the cache with the consumer's.
pub(crate) const IN_FLIGHT_BYTES: u64 = 16 << 20;

/// The in-flight budget of this machine: half of its last-level cache as
/// Linux reports it for CPU 0, but at least [`IN_FLIGHT_BYTES`]. With a
/// large cache (260 MiB here), two threads building 9.6 MB batches of
/// 224x224x3 images both run, where a 16 MiB budget left one: 0.75-0.78 of
/// the 2-thread gather loop instead of 0.48 (`benches/images.py
/// --only-read`, issue 23).
pub(crate) fn in_flight_bytes() -> u64 {
    static BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        last_level_cache().map_or(IN_FLIGHT_BYTES, |c| (c / 2).max(IN_FLIGHT_BYTES))
    })
}

/// Size in bytes of the highest-level cache of CPU 0 (Linux sysfs).
fn last_level_cache() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let p = e.ok()?.path();
        let level: u32 = std::fs::read_to_string(p.join("level"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let size = parse_cache_size(&std::fs::read_to_string(p.join("size")).ok()?)?;
        Some((level, size))
    })
    .max()
    .map(|(_, size)| size)
}

/// A sysfs cache size (`"48K"`, `"266240K"`, `"2M"`, `"512"`) in bytes.
fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Prefetch threads started out of the `threads` asked for, with batches
/// of `batch_bytes`: no more than have one batch each in the budget
/// ([`in_flight_bytes`]), but at least one (none if none are asked for).
/// More threads, each with a buffer out of the cache, made two threads
/// slower than one on 9.6 MB batches (two cores), without building more.
pub(crate) fn busy_threads(threads: usize, batch_bytes: u64, budget: u64) -> usize {
    let fit = budget / batch_bytes.max(1);
    usize::try_from(fit)
        .unwrap_or(usize::MAX)
        .max(1)
        .min(threads)
}

/// The cores this process may run on (1 when that cannot be told).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Prefetch threads to start out of `busy`, and whether the consumer builds
/// batches while it waits, on `cores` cores: the threads and a consumer
/// that builds never outnumber the cores. With fewer threads than cores the
/// consumer builds a batch no thread has started whenever the one it needs
/// is not ready (it would only wait otherwise); with as many threads as
/// cores it only takes batches, and more threads than cores are not started
/// (each would only take its turn on a core and add a hand-off).
pub(crate) fn fit_cores(busy: usize, cores: usize) -> (usize, bool) {
    let cores = cores.max(1);
    let busy = busy.min((cores - 1).max(1));
    (busy, busy > 0 && busy < cores)
}

/// Batches each of `threads` prefetch threads may hold in flight (queued,
/// or being built): `prefetch + 1`, or as many as fit the budget
/// ([`in_flight_bytes`]) with batches of `batch_bytes`, but at least 1.
pub(crate) fn depth(threads: usize, prefetch: usize, batch_bytes: u64, budget: u64) -> usize {
    let full = prefetch.max(1) + 1;
    let all = (threads.max(1) as u64).saturating_mul(batch_bytes.max(1));
    usize::try_from(budget / all)
        .unwrap_or(usize::MAX)
        .clamp(1, full)
}

/// Streams batches of one dataset view for one rank.
///
/// The loader keeps a small pool of batch buffers (at most
/// `busy * depth + 2`, see [`busy_threads`] and [`depth`]) that every epoch started from it
/// reuses, so starting an epoch does not allocate and page-fault its
/// buffers anew.
#[derive(Clone, Debug)]
pub struct Loader {
    source: Source,
    cfg: LoaderConfig,
    schedule: Schedule,
    layout: Arc<RecordLayout>,
    pool: Arc<BufPool>,
    /// Batches each prefetch thread may hold in flight ([`depth`]).
    depth: usize,
    /// Prefetch threads started ([`busy_threads`], [`fit_cores`]).
    busy: usize,
    /// Whether the consumer builds batches while it waits ([`fit_cores`]).
    help: bool,
}

/// What a loader reads: one dataset view, or a mixture of several.
#[derive(Clone, Debug)]
enum Source {
    Set(Dataset),
    Mix(Arc<Mixture>),
}

impl Source {
    /// Positions in one epoch.
    fn len(&self) -> u64 {
        match self {
            Source::Set(ds) => ds.len(),
            Source::Mix(m) => m.epoch_samples(),
        }
    }

    fn stride(&self) -> usize {
        match self {
            Source::Set(ds) => ds.stride(),
            Source::Mix(m) => m.stride(),
        }
    }

    fn layout(&self) -> &RecordLayout {
        match self {
            Source::Set(ds) => ds.layout(),
            Source::Mix(m) => m.layout(),
        }
    }
}

impl Loader {
    /// Checks the configuration against the dataset.
    pub fn new(ds: &Dataset, cfg: LoaderConfig) -> Result<Self> {
        Self::from_source(Source::Set(ds.clone()), cfg, in_flight_bytes(), cores())
    }

    /// A loader over a mixture: its epochs, batches, ranks, workers and
    /// cursors work as for one set of `epoch_samples` records. The order
    /// is the mixture's (its seed and components' shuffles); `cfg.shuffle`
    /// and `cfg.seed` must agree with it.
    pub fn mixture(mixture: Mixture, cfg: LoaderConfig) -> Result<Self> {
        if cfg.shuffle_window != 0 {
            return Err(Error::InvalidArgument(
                "a mixture is shuffled inside each component; shuffle_window applies to one set"
                    .into(),
            ));
        }
        if cfg.seed != mixture.seed() || cfg.shuffle != mixture.shuffle() {
            return Err(Error::InvalidArgument(format!(
                "loader seed {} / shuffle {} differ from the mixture's seed {} / shuffle {}",
                cfg.seed,
                cfg.shuffle,
                mixture.seed(),
                mixture.shuffle()
            )));
        }
        Self::from_source(
            Source::Mix(Arc::new(mixture)),
            cfg,
            in_flight_bytes(),
            cores(),
        )
    }

    /// The same loader over another mixture with the same epoch length
    /// (such as [`Mixture::anchored`] of this one's).
    pub fn with_mixture(&self, mixture: Mixture) -> Result<Self> {
        if mixture.epoch_samples() != self.source.len() {
            return Err(Error::InvalidArgument(format!(
                "the new mixture has {} samples per epoch, the loader {}",
                mixture.epoch_samples(),
                self.source.len()
            )));
        }
        let mut l = self.clone();
        l.source = Source::Mix(Arc::new(mixture));
        Ok(l)
    }

    /// The mixture this loader reads, if it reads one.
    pub fn mixture_source(&self) -> Option<&Mixture> {
        match &self.source {
            Source::Mix(m) => Some(m),
            Source::Set(_) => None,
        }
    }

    /// The loader of `source`, its prefetch threads and depth fitted to
    /// `budget` bytes in flight and to `cores` cores.
    fn from_source(source: Source, cfg: LoaderConfig, budget: u64, cores: usize) -> Result<Self> {
        let schedule = Schedule::new(
            source.len(),
            cfg.batch_size,
            cfg.rank,
            cfg.world_size,
            cfg.last_batch,
        )?;
        let rows = source.len();
        let global = schedule.global_batch();
        if cfg.last_batch == LastBatch::Drop && rows > 0 && global > rows {
            // Every epoch would be empty: almost always a batch size meant
            // for another split, not a wish to read nothing.
            let what = match &source {
                Source::Set(ds) => match ds.split_name() {
                    Some(s) => format!("split {s:?}"),
                    None => "the shard set".to_string(),
                },
                Source::Mix(_) => "a mixture epoch (epoch_samples)".to_string(),
            };
            let per = if cfg.world_size > 1 {
                format!(
                    "batch_size {} x world_size {} = {global} records per step",
                    cfg.batch_size, cfg.world_size
                )
            } else {
                format!("batch_size {global}")
            };
            return Err(Error::InvalidArgument(format!(
                "{per} is more than the {rows} records of {what}: with last_batch \"drop\" \
                 (drop_last) an epoch would yield no batch; use a smaller batch_size, or \
                 last_batch \"partial\" or \"pad\""
            )));
        }
        if cfg.num_workers == 0 || cfg.worker >= cfg.num_workers {
            return Err(Error::InvalidArgument(format!(
                "worker {} is not in 0..num_workers ({})",
                cfg.worker, cfg.num_workers
            )));
        }
        if cfg.threads > 256 {
            return Err(Error::InvalidArgument(format!(
                "threads = {} (at most 256)",
                cfg.threads
            )));
        }
        let buf_bytes = match cfg.batch_size.checked_mul(source.stride() as u64) {
            Some(b) if b <= (1 << 40) => b,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "batch_size {} x stride {} is too large",
                    cfg.batch_size,
                    source.stride()
                )));
            }
        };
        let (busy, help) = fit_cores(busy_threads(cfg.threads, buf_bytes, budget), cores);
        let depth = depth(busy, cfg.prefetch, buf_bytes, budget);
        let pool = BufPool::new(busy.max(1) * depth + 2);
        Ok(Loader {
            layout: Arc::new(source.layout().clone()),
            source,
            cfg,
            schedule,
            pool,
            depth,
            busy,
            help,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.cfg
    }

    /// The rank's batch schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The dataset view, when the loader reads one set (not a mixture).
    pub fn dataset(&self) -> Option<&Dataset> {
        match &self.source {
            Source::Set(ds) => Some(ds),
            Source::Mix(_) => None,
        }
    }

    /// Positions in one epoch: the dataset's records, or the mixture's
    /// samples per epoch.
    pub fn epoch_len(&self) -> u64 {
        self.source.len()
    }

    /// Batches this loader yields in a whole epoch.
    pub fn len(&self) -> u64 {
        self.len_from(0)
    }

    /// True when an epoch yields no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len_from(&self, start: u64) -> u64 {
        let total = self.schedule.batches_from(start);
        let (w, nw) = (self.cfg.worker, self.cfg.num_workers);
        total / nw + u64::from(total % nw > w)
    }

    /// Iterates over epoch `epoch` from its start.
    pub fn epoch(&self, epoch: u64) -> Batches {
        self.start(Cursor {
            seed: self.cfg.seed,
            epoch,
            position: 0,
        })
    }

    /// Continues from a saved cursor. The cursor's seed must be the loader's;
    /// its position must be a global-batch boundary of *some* world size, which
    /// any cursor taken from [`Batches::cursor`] is.
    pub fn resume(&self, cursor: Cursor) -> Result<Batches> {
        if cursor.seed != self.cfg.seed {
            return Err(Error::InvalidArgument(format!(
                "cursor seed {} differs from the loader's seed {}",
                cursor.seed, self.cfg.seed
            )));
        }
        if cursor.position > self.source.len() {
            return Err(Error::InvalidArgument(format!(
                "cursor position {} is past the end of the epoch ({} records)",
                cursor.position,
                self.source.len()
            )));
        }
        Ok(self.start(cursor))
    }

    /// The order of epoch `epoch` with seed `seed`.
    fn order(&self, seed: u64, epoch: u64) -> EpochOrder {
        match &self.source {
            Source::Set(ds) if self.cfg.shuffle && self.cfg.shuffle_window > 0 => {
                let rows = ds.manifest().shards.iter().map(|s| s.rows);
                let width = usize::try_from(self.cfg.shuffle_window).unwrap_or(usize::MAX);
                EpochOrder::windowed(view_pieces(rows, ds.row_range()), width, seed, epoch)
            }
            Source::Set(ds) => {
                EpochOrder::new_as(ds.order_version(), ds.len(), self.cfg.shuffle, seed, epoch)
            }
            // A mixture's epoch is a run of its global samples; the
            // shuffling happens inside the components.
            Source::Mix(m) => EpochOrder::sequential(m.epoch_samples()),
        }
    }

    /// The shards each of this loader's batches reads, in order: the epoch
    /// of `cursor` from its position, then (with `and_next`) the whole next
    /// epoch. This is the future the shard cache of a remote or compressed
    /// set fetches along and evicts by; for a mixture it is empty.
    ///
    /// With a windowed shuffle a batch's shards are those of the windows it
    /// overlaps (found from the windows, without computing the records,
    /// which would cost as much as the epoch's gathers of small records).
    /// A batch that takes only a few positions of a window may not read
    /// every shard of it: the plan then names such a shard a batch early.
    pub fn access_plan(&self, cursor: Cursor, and_next: bool) -> AccessPlan {
        let Source::Set(ds) = &self.source else {
            return AccessPlan::default();
        };
        let mut steps = Vec::new();
        let mut idx = Vec::new();
        let mut pieces = Vec::new();
        let mut add = |order: &EpochOrder, start: u64| {
            for j in 0..self.len_from(start) {
                let k = self.cfg.worker + j * self.cfg.num_workers;
                let positions = self.schedule.batch_positions(start, k);
                pieces.clear();
                if order.extend_window_pieces(positions.clone(), &mut pieces) {
                    let starts = pieces.iter().filter(|r| r.start < r.end).map(|r| r.start);
                    steps.push(ds.shards_of(starts));
                    continue;
                }
                idx.clear();
                order.extend_records(positions, &mut idx);
                steps.push(ds.shards_of(idx.iter().copied()));
            }
        };
        add(&self.order(cursor.seed, cursor.epoch), cursor.position);
        if and_next {
            add(&self.order(cursor.seed, cursor.epoch + 1), 0);
        }
        AccessPlan::new(ds.manifest().shards.len(), steps)
    }

    fn start(&self, cursor: Cursor) -> Batches {
        let order = self.order(cursor.seed, cursor.epoch);
        // A cached set fetches ahead along this epoch and the next.
        let plan = match &self.source {
            Source::Set(ds) => ds
                .cached()
                .map(|c| c.follow(self.access_plan(cursor, true))),
            Source::Mix(_) => None,
        };
        let job = Arc::new(Job {
            plan_id: plan.as_ref().map(PlanHandle::id),
            source: self.source.clone(),
            epoch: cursor.epoch,
            order,
            schedule: self.schedule,
            start: cursor.position,
            worker: self.cfg.worker,
            num_workers: self.cfg.num_workers,
            layout: Arc::clone(&self.layout),
            zero_copy: self.cfg.zero_copy,
        });
        let total = self.len_from(cursor.position);
        let threads = self.busy.min(total as usize);
        let capped = self.depth <= self.cfg.prefetch.max(1);
        Batches::spawn(
            job,
            Arc::clone(&self.pool),
            (threads, self.help),
            (self.depth, capped),
            total,
            cursor,
            plan,
        )
    }
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Batch>();
    is_send::<Dataset>();
    let _ = AlignedBuf::default;
}
