//! The shards of one open set that are not mapped in place: fetched or
//! decompressed into the cache directory on demand and ahead of the
//! reader, pinned while a batch reads them, evicted by Belady's rule.
//!
//! - [`pins`]: a batch's shards mapped and pinned ([`PinSet`]), and their
//!   release, which advances the reader's position in the plan;
//! - [`admit`]: bringing one shard into the directory, evicting by
//!   Belady's rule to make room within the budget;
//! - [`fetch`]: reading a shard from its source into a reserved file and
//!   checking it (size, blake3, header) against the manifest;
//! - [`prefetch`]: following a reader's plan with threads that fetch ahead
//!   ([`PlanHandle`]).

mod admit;
mod fetch;
mod pins;
mod prefetch;

pub(crate) use pins::PinSet;
pub(crate) use prefetch::PlanHandle;

use super::dir::{CacheDir, Resident};
use super::plan::AccessPlan;
use super::simulate::Fetch;
use super::{CacheOptions, CacheStats};
use crate::error::{Error, Result};
use crate::manifest::ShardInfo;
use crate::source::ShardSource;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// How long a reader waits for room in a full cache (held by shards that
/// other processes, or other batches, are reading) before giving up.
const ROOM_WAIT: Duration = Duration::from_secs(120);
/// Attempts at fetching a shard from a store when a transfer fails or
/// arrives corrupt.
const ATTEMPTS: u32 = 3;
/// A shard stays mapped (and so locked in use, out of other processes'
/// reach) only while the reader needs it within this many steps; further
/// off, its file stays in the cache, unmapped, and is mapped again when its
/// turn comes.
const KEEP_MAPPED_STEPS: usize = 64;

/// The cache-backed shards of one set.
pub(crate) struct CachedShards {
    /// The set's location, for messages.
    location: String,
    shards: Vec<ShardInfo>,
    stride: u64,
    digest: [u8; 32],
    source: Box<dyn ShardSource>,
    dir: CacheDir,
    budget: Option<u64>,
    fetch_threads: usize,
    decompress_threads: usize,
    /// Shards holding the same bytes share one cache file.
    by_key: HashMap<String, Vec<u32>>,
    state: Mutex<State>,
    /// Readers wait here for a shard being fetched, or for room.
    changed: Condvar,
    /// Fetch-ahead threads wait here for something to fetch. They are woken
    /// by a batch's release only when there is a candidate: waking every
    /// fetch thread after every batch cost a context switch each, most of
    /// the gap between a cached set and a mapped one.
    fetchers: Condvar,
    stats: Mutex<CacheStats>,
    /// Shards kept mapped for the set's lifetime ([`CachedShards::sticky`]).
    sticky: Vec<OnceLock<Arc<Resident>>>,
}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    plan: Option<Active>,
    /// Bumped whenever pins are released or a step completes.
    progress: u64,
    next_plan_id: u64,
    /// Readers inside a wait on `changed` (a release wakes them only then).
    readers_waiting: usize,
}

#[derive(Default)]
struct Slot {
    map: Option<Arc<Resident>>,
    pins: u32,
    sticky: bool,
    fetching: bool,
    prefetch_failed: bool,
    /// Mapped at least once (counts a shard found in the cache once).
    seen: bool,
}

/// The plan of the reader currently iterating, and how far it got.
struct Active {
    id: u64,
    plan: Arc<AccessPlan>,
    /// The fetches Belady's rule makes along the plan, in step order, each
    /// with the first step at which it may start without evicting anything
    /// needed sooner than it ([`conservative_fetches`]).
    fetches: Vec<Fetch>,
    done: Vec<bool>,
    /// First step not done.
    cursor: usize,
}

/// Why a shard could not be brought in.
enum Fail {
    /// The budget is full of shards needed sooner, or in use.
    NoRoom,
    Error(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Error(e)
    }
}

impl CachedShards {
    /// Shards of the set at `location` (its manifest's `shards`), read
    /// from `source` into the cache `opts` describe.
    pub(crate) fn open(
        location: String,
        manifest: &crate::manifest::Manifest,
        source: Box<dyn ShardSource>,
        opts: &CacheOptions,
        remote: bool,
    ) -> Result<Arc<Self>> {
        let root = opts.resolved_dir()?;
        let budget = opts.resolved_budget()?;
        if let Some(b) = budget
            && let Some(big) = manifest.shards.iter().max_by_key(|s| s.bytes)
            && big.bytes > b
        {
            return Err(Error::cache(
                &root,
                format!(
                    "the budget of {b} bytes is smaller than shard {} of {location} ({} bytes); \
                     a budget must hold at least the largest shard",
                    big.file, big.bytes
                ),
            ));
        }
        let dir = CacheDir::open(root)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let fetch_threads = opts
            .fetch_threads
            .unwrap_or(if remote { 8 } else { cores })
            .clamp(1, 64);
        let mut by_key: HashMap<String, Vec<u32>> = HashMap::new();
        for (i, s) in manifest.shards.iter().enumerate() {
            by_key.entry(s.blake3.clone()).or_default().push(i as u32);
        }
        let n = manifest.shards.len();
        Ok(Arc::new(CachedShards {
            location,
            shards: manifest.shards.clone(),
            stride: manifest.layout.stride,
            digest: manifest.layout.digest(),
            source,
            dir,
            budget,
            fetch_threads,
            decompress_threads: (cores / fetch_threads).max(1),
            by_key,
            state: Mutex::new(State {
                slots: (0..n).map(|_| Slot::default()).collect(),
                ..State::default()
            }),
            changed: Condvar::new(),
            fetchers: Condvar::new(),
            stats: Mutex::new(CacheStats::default()),
            sticky: (0..n).map(|_| OnceLock::new()).collect(),
        }))
    }

    /// The cache directory.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.root()
    }

    /// The budget in bytes, if any.
    pub(crate) fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// What the cache has done so far.
    pub(crate) fn stats(&self) -> CacheStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stat(&self, f: impl FnOnce(&mut CacheStats)) {
        f(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The shards plan step `step` reads, if it belongs to the plan being
    /// followed: what a batch of that step must pin, known without looking
    /// at its records.
    pub(crate) fn planned(&self, step: (u64, usize)) -> Option<Vec<u32>> {
        let st = self.lock();
        let a = st.plan.as_ref().filter(|a| a.id == step.0)?;
        (step.1 < a.plan.len()).then(|| a.plan.step(step.1).to_vec())
    }

    /// Wakes readers and fetch-ahead threads alike.
    fn wake_all(&self) {
        self.changed.notify_all();
        self.fetchers.notify_all();
    }
}

impl std::fmt::Debug for CachedShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedShards")
            .field("location", &self.location)
            .field("dir", &self.dir.root())
            .field("budget", &self.budget)
            .finish()
    }
}
