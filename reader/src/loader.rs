//! The prefetching batch iterator.
//!
//! Batch `k` of a rank's epoch is a pure function of `(seed, epoch, k)` and the
//! configuration. With `threads = T >= 1`, batch `k` is built by thread
//! `k mod T` (assigned ahead of time, not taken from a shared queue), each
//! thread pushes its batches in increasing `k` into its own bounded queue,
//! and the consumer pops queue `k mod T` for batch `k`, waiting when it is
//! empty. The consumer builds nothing itself, so `T` threads never compete
//! with a `T + 1`-th builder for the cores (with `T = 0` it builds every
//! batch); it only makes the batches that need no building, those borrowed
//! from the memory map (zero-copy sequential batches inside one shard),
//! which the threads skip. The sequence of batches is therefore the same for
//! any thread count and any prefetch depth; timing only changes how long the
//! consumer waits.

use crate::batch::{AlignedBuf, Batch, BufPool};
use crate::cache::AccessPlan;
use crate::cache::PlanHandle;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::layout::RecordLayout;
use crate::mixture::{MixScratch, Mixture};
use crate::order::{Cursor, EpochOrder, LastBatch, Schedule, view_pieces};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

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
    /// Prefetch threads; 0 builds batches on the consuming thread.
    pub threads: usize,
    /// Batches each thread may build ahead (at least 1).
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

/// Streams batches of one dataset view for one rank.
///
/// The loader keeps a small pool of batch buffers (at most
/// `threads * (prefetch + 1) + 2`) that every epoch started from it reuses,
/// so starting an epoch does not allocate and page-fault its buffers anew.
#[derive(Clone, Debug)]
pub struct Loader {
    source: Source,
    cfg: LoaderConfig,
    schedule: Schedule,
    layout: Arc<RecordLayout>,
    pool: Arc<BufPool>,
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
        Self::from_source(Source::Set(ds.clone()), cfg)
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
        Self::from_source(Source::Mix(Arc::new(mixture)), cfg)
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

    fn from_source(source: Source, cfg: LoaderConfig) -> Result<Self> {
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
        let buf_bytes = cfg.batch_size.checked_mul(source.stride() as u64);
        if buf_bytes.is_none_or(|b| b > (1 << 40)) {
            return Err(Error::InvalidArgument(format!(
                "batch_size {} x stride {} is too large",
                cfg.batch_size,
                source.stride()
            )));
        }
        let pool = BufPool::new(cfg.threads.max(1) * (cfg.prefetch.max(1) + 1) + 2);
        Ok(Loader {
            layout: Arc::new(source.layout().clone()),
            source,
            cfg,
            schedule,
            pool,
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
        let threads = self.cfg.threads.min(total as usize);
        let prefetch = self.cfg.prefetch.max(1);
        let pool = Arc::clone(&self.pool);
        let mut queues = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        // Thread t builds its batches t, t + T, ... in order.
        for t in 0..threads {
            let (tx, rx) = handoff(prefetch);
            let job = Arc::clone(&job);
            let pool = Arc::clone(&pool);
            let spawned = std::thread::Builder::new()
                .name(format!("tessera-prefetch-{t}"))
                .spawn(move || produce(&job, &pool, t as u64, threads as u64, total, tx));
            match spawned {
                Ok(h) => {
                    queues.push(rx);
                    handles.push(h);
                }
                // Could not start a thread: build the rest on the consumer.
                Err(_) => break,
            }
        }
        if queues.len() != threads {
            queues.clear();
            for h in handles.drain(..) {
                let _ = h.join();
            }
        }
        Batches {
            job,
            pool,
            queues,
            handles,
            next: 0,
            total,
            cursor,
            exhausted: false,
            scratch: Scratch::default(),
            error: None,
            failed: None,
            plan,
        }
    }
}

/// Everything needed to build any batch of one epoch on one rank.
struct Job {
    /// The cache plan the batches' steps belong to (cached sets).
    plan_id: Option<u64>,
    source: Source,
    epoch: u64,
    order: EpochOrder,
    schedule: Schedule,
    start: u64,
    worker: u64,
    num_workers: u64,
    layout: Arc<RecordLayout>,
    zero_copy: bool,
}

impl Job {
    /// Rank batch index of this loader's `j`-th batch.
    fn rank_batch(&self, j: u64) -> u64 {
        self.worker + j * self.num_workers
    }

    /// True when this loader's `j`-th batch is borrowed from the memory map
    /// (zero-copy, sequential, inside one shard): there is nothing to
    /// build, so the consumer makes it itself and no thread hands it over.
    fn borrows(&self, j: u64) -> bool {
        let Source::Set(ds) = &self.source else {
            return false;
        };
        if !self.zero_copy || !self.order.is_sequential() {
            return false;
        }
        let positions = self
            .schedule
            .batch_positions(self.start, self.rank_batch(j));
        positions.end <= self.order.len() && ds.records(positions).is_some()
    }

    /// Builds this loader's `j`-th batch. Only a cached set can fail (a
    /// shard that cannot be fetched).
    fn build(&self, j: u64, pool: &Arc<BufPool>, scratch: &mut Scratch) -> Result<Batch> {
        let k = self.rank_batch(j);
        let step = self.plan_id.map(|id| (id, j as usize));
        let positions = self.schedule.batch_positions(self.start, k);
        let rows = (positions.end - positions.start) as usize;
        let ds = match &self.source {
            Source::Set(ds) => ds,
            Source::Mix(m) => return self.build_mixed(m, k, positions, pool, scratch),
        };
        let stride = ds.stride();
        let n = self.order.len();
        if self.borrows(j) {
            return Ok(Batch::mapped(
                ds.clone(),
                positions.start,
                Some(Arc::clone(pool)),
                rows,
                Arc::clone(&self.layout),
                k,
            ));
        }
        let mut buf = pool.take();
        buf.resize(rows * stride);
        let out = buf.bytes_mut();
        if self.order.is_sequential() {
            // Contiguous runs of the epoch (two when a padded batch wraps).
            let mut pos = positions.start;
            let mut filled = 0usize;
            while pos < positions.end {
                let at = pos % n;
                let run = ((positions.end - pos).min(n - at)) as usize;
                let dst = &mut out[filled * stride..(filled + run) * stride];
                // In range by construction (at + run <= n): only a cached
                // shard that cannot be fetched fails.
                ds.copy_records_at(at, dst, step)?;
                filled += run;
                pos += run as u64;
            }
        } else {
            // All indices first, then the gather: computing them inside the
            // gather loop was measured slower, as the longer loop body keeps
            // fewer memory accesses in flight. Positions reach past n only
            // in a padded last batch.
            let idx = &mut scratch.indices;
            idx.clear();
            self.order.extend_records(positions, idx);
            // In range by construction (the order maps into 0..n): only a
            // cached shard that cannot be fetched fails.
            ds.gather_at(idx, out, step)?;
        }
        Ok(Batch::new(
            buf,
            Some(Arc::clone(pool)),
            rows,
            Arc::clone(&self.layout),
            k,
        ))
    }
}

impl Job {
    /// A mixture batch: global samples `epoch * L + p` for the positions
    /// `p` (a padded batch wraps to the epoch's start).
    fn build_mixed(
        &self,
        m: &Mixture,
        k: u64,
        positions: std::ops::Range<u64>,
        pool: &Arc<BufPool>,
        scratch: &mut Scratch,
    ) -> Result<Batch> {
        let len = m.epoch_samples();
        let stride = m.stride();
        let rows = (positions.end - positions.start) as usize;
        let mut buf = pool.take();
        buf.resize(rows * stride);
        let out = buf.bytes_mut();
        // Global samples are counted in 64 bits; an epoch past that has no
        // samples to read.
        let first = self
            .epoch
            .checked_mul(len)
            .filter(|f| f.checked_add(len).is_some())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "epoch {} of {len} samples: its global sample numbers do not fit in 64 bits",
                    self.epoch
                ))
            })?;
        let mut pos = positions.start;
        let mut filled = 0usize;
        while pos < positions.end {
            let at = pos % len;
            let run = (positions.end - pos).min(len - at);
            let dst = &mut out[filled * stride..(filled + run as usize) * stride];
            m.fill(first + at..first + at + run, dst, &mut scratch.mix)?;
            filled += run as usize;
            pos += run;
        }
        Ok(Batch::new(
            buf,
            Some(Arc::clone(pool)),
            rows,
            Arc::clone(&self.layout),
            k,
        ))
    }
}

/// Per-thread buffers for building batches.
#[derive(Default)]
struct Scratch {
    indices: Vec<u64>,
    mix: MixScratch,
}

/// Prefetch thread `t` of `step`: builds batches `t, t + step, ...` below
/// `total`, in order, into its queue.
fn produce(
    job: &Job,
    pool: &Arc<BufPool>,
    t: u64,
    step: u64,
    total: u64,
    tx: Sender<Result<Batch>>,
) {
    let mut scratch = Scratch::default();
    let mut j = t;
    while j < total {
        // A borrowed batch is the consumer's to make (see `Batches::take`).
        if !job.borrows(j) && tx.send(job.build(j, pool, &mut scratch)).is_err() {
            return; // the consumer went away
        }
        j += step;
    }
}

/// The batches of one epoch for one rank, in order. Dropping it stops the
/// prefetch threads.
pub struct Batches {
    job: Arc<Job>,
    pool: Arc<BufPool>,
    queues: Vec<Receiver<Result<Batch>>>,
    handles: Vec<JoinHandle<()>>,
    next: u64,
    total: u64,
    cursor: Cursor,
    /// Set once `next` has returned `None`.
    exhausted: bool,
    /// Buffers for batches built on the consumer's thread.
    scratch: Scratch,
    /// Why the iteration stopped early, if it did (for `error()`).
    error: Option<Error>,
    /// Set once a batch failed: its message.
    failed: Option<String>,
    /// Keeps a cached set's shard cache fetching ahead along this epoch.
    plan: Option<PlanHandle>,
}

impl Batches {
    /// The state after the batches yielded so far: save it, and pass it to
    /// [`Loader::resume`] to continue exactly here.
    ///
    /// Once the iterator has returned `None`, the position is the end of the
    /// epoch on every rank, whatever share of the last global batch this
    /// rank had (so ranks that save at the end of an epoch save the same
    /// state). A worker sub-stream (`num_workers > 1`) is not the whole
    /// epoch, so its position stays after its own last batch.
    pub fn cursor(&self) -> Cursor {
        let position = if self.exhausted && self.job.num_workers == 1 {
            self.job.order.len()
        } else if self.next == 0 {
            self.cursor.position
        } else {
            let k = self.job.rank_batch(self.next - 1);
            self.job.schedule.position_after(self.job.start, k + 1)
        };
        Cursor {
            position,
            ..self.cursor
        }
    }

    /// Batches left in this epoch.
    pub fn remaining(&self) -> u64 {
        self.total - self.next
    }

    /// Why iteration ended before the epoch did: a shard of a remote or
    /// compressed set that could not be fetched or failed its checksum.
    /// `None` while all is well (a local, uncompressed set never fails).
    /// Check it after a `for` loop over a cached set, or use
    /// [`Batches::try_next`].
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Takes the error that ended the iteration (see [`Batches::error`]).
    pub fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// The next batch, `Ok(None)` at the end of the epoch, or the error that
    /// stopped the iteration. After an error, every call fails.
    pub fn try_next(&mut self) -> Result<Option<Batch>> {
        if let Some(msg) = &self.failed {
            return Err(Error::InvalidArgument(format!(
                "the epoch stopped after an error: {msg}"
            )));
        }
        if self.next >= self.total {
            self.exhausted = true;
            return Ok(None);
        }
        let j = self.next;
        let batch = if self.queues.is_empty() {
            self.job.build(j, &self.pool, &mut self.scratch)
        } else {
            self.take(j)
        };
        match batch {
            Ok(b) => {
                self.next += 1;
                Ok(Some(b))
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e)
            }
        }
    }
}

impl Batches {
    /// Batch `j` from its thread's queue, waiting for it if need be, or
    /// made here when it is borrowed from the map.
    ///
    /// The consumer does not build batches while threads are running (it
    /// once built one instead of waiting, which made `threads = T` run
    /// `T + 1` builders, and two threads on two cores slower than one).
    fn take(&mut self, j: u64) -> Result<Batch> {
        // Borrowed from the map: nothing to build, and a hand-off would
        // cost more than making it here (the threads skip these).
        if self.job.borrows(j) {
            return self.job.build(j, &self.pool, &mut self.scratch);
        }
        let q = (j % self.queues.len() as u64) as usize;
        match self.queues[q].recv() {
            Some(b) => b,
            // A thread can only vanish by panicking, which is a bug here,
            // not a property of the data; build the batch here.
            None => self.job.build(j, &self.pool, &mut self.scratch),
        }
    }
}

impl Iterator for Batches {
    type Item = Batch;

    /// The next batch. On a remote or compressed set a shard that cannot be
    /// fetched ends the iteration early: see [`Batches::error`].
    fn next(&mut self) -> Option<Batch> {
        match self.try_next() {
            Ok(b) => b,
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(e);
                }
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Batches {}

impl Drop for Batches {
    fn drop(&mut self) {
        // Closing the queues makes every blocked `send` fail, so workers exit.
        self.queues.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        // Then the cache's fetch-ahead threads.
        self.plan.take();
    }
}

/// The queue between one prefetch thread and the consumer: bounded, and
/// sparing with wake-ups. A side that sleeps is woken only when it has
/// something to do (the consumer: a batch arrived; the thread: the queue
/// drained to `low` batches), never on every push and pop, because a
/// cross-core wake-up costs about as much as copying a small batch (in a
/// virtual machine, more): waking the thread on each pop from a full queue
/// cost a sequential epoch a third of its time.
struct Handoff<T> {
    state: Mutex<HandoffState<T>>,
    /// The consumer waits here for a batch.
    ready: Condvar,
    /// The thread waits here for room.
    room: Condvar,
    cap: usize,
    low: usize,
}

struct HandoffState<T> {
    items: VecDeque<T>,
    consumer_waiting: bool,
    producer_waiting: bool,
    /// The thread has ended (done, or panicked).
    producer_gone: bool,
    /// The consumer has dropped its end.
    consumer_gone: bool,
}

/// A queue of at most `cap` (>= 1) items, as its two ends.
fn handoff<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let cap = cap.max(1);
    let h = Arc::new(Handoff {
        state: Mutex::new(HandoffState {
            items: VecDeque::with_capacity(cap),
            consumer_waiting: false,
            producer_waiting: false,
            producer_gone: false,
            consumer_gone: false,
        }),
        ready: Condvar::new(),
        room: Condvar::new(),
        cap,
        // A full queue of 2 is refilled once empty, one of 8 at 3 left.
        low: (cap - 1) / 2,
    });
    (Sender(Arc::clone(&h)), Receiver(h))
}

impl<T> Handoff<T> {
    fn lock(&self) -> MutexGuard<'_, HandoffState<T>> {
        // The state stays consistent across a panic (each update is one
        // field), so a poisoned lock is still good to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The prefetch thread's end. Dropping it (also by a panic) tells the
/// consumer that no more batches come.
struct Sender<T>(Arc<Handoff<T>>);

impl<T> Sender<T> {
    /// Queues `item`, waiting for room; `Err` once the consumer is gone.
    fn send(&self, item: T) -> std::result::Result<(), T> {
        let h = &self.0;
        let mut s = h.lock();
        while s.items.len() >= h.cap && !s.consumer_gone {
            s.producer_waiting = true;
            s = h.room.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        if s.consumer_gone {
            return Err(item);
        }
        s.items.push_back(item);
        if std::mem::take(&mut s.consumer_waiting) {
            h.ready.notify_one();
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let h = &self.0;
        let mut s = h.lock();
        s.producer_gone = true;
        if std::mem::take(&mut s.consumer_waiting) {
            h.ready.notify_one();
        }
    }
}

/// The consumer's end. Dropping it makes the thread's `send` fail.
struct Receiver<T>(Arc<Handoff<T>>);

impl<T> Receiver<T> {
    /// The next item, waiting for it; `None` once the thread has ended
    /// and the queue is empty.
    fn recv(&self) -> Option<T> {
        let h = &self.0;
        let mut s = h.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                if s.items.len() <= h.low && std::mem::take(&mut s.producer_waiting) {
                    h.room.notify_one();
                }
                return Some(item);
            }
            if s.producer_gone {
                return None;
            }
            s.consumer_waiting = true;
            s = h.ready.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let h = &self.0;
        let mut s = h.lock();
        s.consumer_gone = true;
        // The batches still queued go back to the pool now.
        s.items.clear();
        if std::mem::take(&mut s.producer_waiting) {
            h.room.notify_one();
        }
    }
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Batch>();
    is_send::<Dataset>();
    let _ = AlignedBuf::default;
}
