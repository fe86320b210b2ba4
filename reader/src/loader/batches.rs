//! The batches of one epoch, in order: taken from the prefetch threads'
//! queues, or built on the consumer's thread.

use super::build::{Job, Scratch, produce};
use super::handoff::{Receiver, handoff};
use crate::batch::{Batch, BufPool};
use crate::cache::PlanHandle;
use crate::error::{Error, Result};
use crate::order::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

/// The batches of one epoch for one rank, in order. Dropping it stops the
/// prefetch threads.
pub struct Batches {
    job: Arc<Job>,
    pool: Arc<BufPool>,
    queues: Vec<Receiver<Result<Batch>>>,
    /// Per thread, the next of its batches no one has started.
    claims: Vec<Arc<AtomicU64>>,
    /// The consumer builds a batch whose thread has not started it rather
    /// than wait.
    help: bool,
    /// Batches the consumer built ahead while it waited.
    stash: Vec<(u64, Result<Batch>)>,
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
    /// Starts `threads` prefetch threads (each holding at most `depth`
    /// batches in flight, see [`super::depth`]; `capped` when that is less
    /// than the configured `prefetch + 1`) for the `total` batches of `job`;
    /// with none, or when one cannot be started, the consumer builds every
    /// batch.
    pub(super) fn spawn(
        job: Arc<Job>,
        pool: Arc<BufPool>,
        (threads, help): (usize, bool),
        (depth, capped): (usize, bool),
        total: u64,
        cursor: Cursor,
        plan: Option<PlanHandle>,
    ) -> Batches {
        let mut queues = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        let claims: Vec<Arc<AtomicU64>> = (0..threads)
            .map(|t| Arc::new(AtomicU64::new(t as u64)))
            .collect();
        // Thread t builds its batches t, t + T, ... in order, each unless
        // the consumer claimed it first.
        for (t, claim) in claims.iter().enumerate() {
            // At the full depth a thread builds one batch while `depth - 1`
            // wait in its queue; a capped one waits for room in a queue of
            // `depth` before it takes a buffer and builds.
            let (tx, rx) = handoff(if capped { depth } else { depth - 1 });
            let job = Arc::clone(&job);
            let pool = Arc::clone(&pool);
            let claim = Arc::clone(claim);
            let spawned = std::thread::Builder::new()
                .name(format!("tessera-prefetch-{t}"))
                .spawn(move || {
                    let steps = (t as u64, threads as u64, total);
                    produce(&job, &pool, steps, capped, &claim, tx)
                });
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
            claims,
            help,
            stash: Vec::new(),
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
    /// Batch `j`: built here before, queued by its thread, made here when
    /// it is borrowed from the map, or waited for. While it is not queued
    /// and `help` is set (the threads leave the consumer a core, see
    /// `fit_cores`), the consumer builds the earliest batch no thread has
    /// started, `j` or one after it, instead of waiting. (A consumer that
    /// built while `T` threads had all the cores made `T + 1` builders,
    /// and two threads on two cores slower than one.)
    fn take(&mut self, j: u64) -> Result<Batch> {
        // First: built here while an earlier batch was awaited (borrowed
        // ones too, so that none is left in the stash).
        if let Some(at) = self.stash.iter().position(|(k, _)| *k == j) {
            return self.stash.swap_remove(at).1;
        }
        // Borrowed from the map: nothing to build, and a hand-off would
        // cost more than making it here (the threads skip these).
        if self.job.borrows(j) {
            return self.job.build(j, &self.pool, &mut self.scratch);
        }
        let q = (j % self.queues.len() as u64) as usize;
        if self.help {
            let step = self.queues.len() as u64;
            loop {
                if let Some(b) = self.queues[q].try_recv() {
                    return b;
                }
                if self.stash.len() >= STASH {
                    break;
                }
                // The earliest batch no thread has started: build it here
                // instead of waiting.
                let Some((t, k)) = self
                    .claims
                    .iter()
                    .enumerate()
                    .map(|(t, c)| (t, c.load(Ordering::Acquire)))
                    .filter(|&(_, k)| k < self.total)
                    .min_by_key(|&(_, k)| k)
                else {
                    break;
                };
                if self.claims[t]
                    .compare_exchange(k, k + step, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                let b = self.job.build(k, &self.pool, &mut self.scratch);
                if k == j {
                    return b;
                }
                self.stash.push((k, b));
            }
        }
        match self.queues[q].recv() {
            Some(b) => b,
            // A thread can only vanish by panicking, which is a bug here,
            // not a property of the data; build the batch here.
            None => self.job.build(j, &self.pool, &mut self.scratch),
        }
    }
}

/// Batches the consumer builds ahead at most while it waits.
const STASH: usize = 2;

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
