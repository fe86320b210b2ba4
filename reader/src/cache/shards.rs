//! The shards of one open set that are not mapped in place: fetched or
//! decompressed into the cache directory on demand and ahead of the
//! reader, pinned while a batch reads them, evicted by Belady's rule.

use super::dir::{CacheDir, Claim, Entry, Resident};
use super::plan::AccessPlan;
use super::simulate::{Fetch, conservative_fetches};
use super::{CacheOptions, CacheStats};
use crate::compressed::{SeekTable, decompress_into};
use crate::durable::hex;
use crate::error::{Error, Result};
use crate::header::HEADER_LEN;
use crate::manifest::ShardInfo;
use crate::source::ShardSource;
use memmap2::MmapMut;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

    /// Maps shards `wanted` (sorted, distinct) and pins them until the
    /// returned set is dropped, fetching what is missing. `step` names the
    /// plan step this is for, which is marked done when the pins go.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        wanted: &[u32],
        step: Option<(u64, usize)>,
    ) -> Result<PinSet> {
        if let Some(b) = self.budget {
            let need: u64 = wanted.iter().map(|&s| self.shards[s as usize].bytes).sum();
            if need > b {
                return Err(Error::cache(
                    self.dir.root(),
                    format!(
                        "one batch of {} reads {} shards totalling {need} bytes, more than the \
                         budget of {b}; raise the budget, or use a windowed shuffle of fewer \
                         shards",
                        self.location,
                        wanted.len()
                    ),
                ));
            }
        }
        let started = Instant::now();
        let mut pins = PinSet {
            cache: Arc::clone(self),
            pins: Vec::with_capacity(wanted.len()),
            step: None,
        };
        let mut waited = false;
        let (mut hits, mut misses) = (0u64, 0u64);
        'all: loop {
            for &s in wanted {
                if pins.pins.iter().any(|(p, _)| *p == s) {
                    continue;
                }
                loop {
                    let mut st = self.lock();
                    let slot = &mut st.slots[s as usize];
                    if let Some(r) = &slot.map {
                        slot.pins += 1;
                        pins.pins.push((s, Arc::clone(r)));
                        drop(st);
                        if waited {
                            misses += 1;
                        } else {
                            hits += 1;
                        }
                        waited = false;
                        break;
                    }
                    waited = true;
                    if slot.fetching {
                        st.readers_waiting += 1;
                        let (mut st, _) = self
                            .changed
                            .wait_timeout(st, Duration::from_millis(100))
                            .unwrap_or_else(|e| e.into_inner());
                        st.readers_waiting -= 1;
                        continue;
                    }
                    slot.fetching = true;
                    let next = match (step, &st.plan) {
                        (Some((id, j)), Some(a)) if a.id == id => j,
                        (_, Some(a)) => a.cursor,
                        _ => 0,
                    };
                    drop(st);
                    let r = self.materialize(s as usize, next);
                    let mut st = self.lock();
                    st.slots[s as usize].fetching = false;
                    match r {
                        Ok(res) => {
                            st.slots[s as usize].map.get_or_insert(Arc::new(res));
                            self.wake_all();
                        }
                        Err(Fail::NoRoom) => {
                            self.wake_all();
                            let seen = st.progress;
                            drop(st);
                            // Let batches ahead of this one finish first.
                            pins.release();
                            if started.elapsed() > ROOM_WAIT {
                                return Err(self.no_room(wanted));
                            }
                            let mut st = self.lock();
                            if st.progress == seen {
                                st.readers_waiting += 1;
                                let (mut st, _) = self
                                    .changed
                                    .wait_timeout(st, Duration::from_millis(50))
                                    .unwrap_or_else(|e| e.into_inner());
                                st.readers_waiting -= 1;
                            }
                            continue 'all;
                        }
                        Err(Fail::Error(e)) => {
                            self.wake_all();
                            return Err(e);
                        }
                    }
                }
            }
            break;
        }
        pins.pins.sort_unstable_by_key(|(s, _)| *s);
        pins.step = step;
        self.stat(|c| {
            c.hits += hits;
            c.misses += misses;
        });
        Ok(pins)
    }

    fn no_room(&self, wanted: &[u32]) -> Error {
        Error::cache(
            self.dir.root(),
            format!(
                "waited {}s for room for {} shard(s) of {}: the budget of {} bytes is held by \
                 shards other readers are using; raise it, or give concurrent jobs separate \
                 cache directories",
                ROOM_WAIT.as_secs(),
                wanted.len(),
                self.location,
                self.budget.unwrap_or(0)
            ),
        )
    }

    /// Shard `s` mapped for the lifetime of this object (for random access
    /// that hands out references); it is never evicted.
    pub(crate) fn sticky(self: &Arc<Self>, s: usize) -> Result<&[u8]> {
        if let Some(r) = self.sticky[s].get() {
            return Ok(&r.map);
        }
        let pins = self.acquire(&[s as u32], None)?;
        if let Some((_, r)) = pins.pins.first() {
            let _ = self.sticky[s].set(Arc::clone(r));
            self.lock().slots[s].sticky = true;
        }
        drop(pins);
        self.sticky[s]
            .get()
            .map(|r| &r.map[..])
            .ok_or_else(|| Error::cache(self.dir.root(), "a pinned shard vanished"))
    }

    /// Brings shard `s` into the cache (or finds it there), making room by
    /// Belady's rule for a shard next needed at plan step `next`.
    fn materialize(&self, s: usize, next: usize) -> Result<Resident, Fail> {
        let info = &self.shards[s];
        let key = info.blake3.as_str();
        let mut attempt = 0;
        loop {
            let part = {
                let _lock = self.dir.lock()?;
                match self.dir.look(key, info.bytes)? {
                    Claim::Present(r) => {
                        self.check_header(&r.map, s)?;
                        let first = !std::mem::replace(&mut self.lock().slots[s].seen, true);
                        if first {
                            self.stat(|c| c.reused_shards += 1);
                        }
                        return Ok(r);
                    }
                    Claim::InFlight => None,
                    Claim::Absent => {
                        // Room first, then the reservation: the directory
                        // never holds more than the budget, not even for a
                        // moment.
                        self.make_room(key, info.bytes, next)?;
                        Some(self.dir.reserve(key, info.bytes)?)
                    }
                }
            };
            let Some(file) = part else {
                // Another reader is writing it: wait for it to land.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            match self.fill(s, &file) {
                Ok(()) => {
                    // Under the lock: a directory listing that runs during a
                    // rename may see neither name, and admission must never
                    // under-count.
                    let r = {
                        let _lock = self.dir.lock()?;
                        self.dir.publish(key, file)?
                    };
                    self.lock().slots[s].seen = true;
                    return Ok(r);
                }
                Err(e) => {
                    self.dir.abandon(key, file);
                    attempt += 1;
                    let again = self.source.retry_worthy()
                        && attempt < ATTEMPTS
                        && matches!(
                            e,
                            Error::Checksum { .. }
                                | Error::Compressed { .. }
                                | Error::Size { .. }
                                | Error::Remote { .. }
                        );
                    if !again {
                        return Err(Fail::Error(e));
                    }
                    self.stat(|c| c.retries += 1);
                    std::thread::sleep(Duration::from_millis(100 << (2 * attempt)));
                }
            }
        }
    }

    /// With the directory lock held: evicts until `bytes` more fit the
    /// budget, taking the shard whose next use is furthest first and never
    /// one needed at or before `next`.
    fn make_room(&self, incoming: &str, bytes: u64, next: usize) -> Result<(), Fail> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let entries = self.dir.scan()?;
        let mut usage: u64 = entries.iter().map(|e| e.bytes).sum::<u64>() + bytes;
        if usage <= budget {
            return Ok(());
        }
        // Rank the cached files: (next use, in use by us, entry).
        let mut ranked: Vec<(usize, &Entry)> = Vec::new();
        {
            let st = self.lock();
            for e in entries.iter().filter(|e| !e.part && e.key != incoming) {
                let next_use = match self.by_key.get(&e.key) {
                    None => usize::MAX,
                    Some(ours) => {
                        let busy = ours.iter().any(|&i| {
                            let sl = &st.slots[i as usize];
                            sl.pins > 0 || sl.sticky || sl.fetching
                        });
                        if busy {
                            continue;
                        }
                        ours.iter()
                            .filter_map(|&i| {
                                st.plan
                                    .as_ref()
                                    .and_then(|a| a.plan.next_use(i as usize, a.cursor))
                            })
                            .min()
                            .unwrap_or(usize::MAX)
                    }
                };
                ranked.push((next_use, e));
            }
        }
        // Furthest next use first; among the never-needed, the oldest.
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.mtime.cmp(&b.1.mtime)));
        for (next_use, e) in ranked {
            if usage <= budget {
                break;
            }
            if next_use != usize::MAX && next_use <= next {
                break;
            }
            if let Some(ours) = self.by_key.get(&e.key) {
                // Unmap our copy (if still unpinned) so the file can go.
                let mut st = self.lock();
                if ours.iter().any(|&i| {
                    let sl = &st.slots[i as usize];
                    sl.pins > 0 || sl.sticky || sl.fetching
                }) {
                    continue;
                }
                for &i in ours {
                    st.slots[i as usize].map = None;
                }
            }
            if self.dir.remove_if_unused(&self.dir.entry_path(e))? {
                usage = usage.saturating_sub(e.bytes);
                self.stat(|c| {
                    c.evicted_shards += 1;
                    c.evicted_bytes += e.bytes;
                });
            }
        }
        if usage <= budget {
            Ok(())
        } else {
            Err(Fail::NoRoom)
        }
    }

    /// Fetches shard `s` into its reserved `.part`, decompressing if it is
    /// stored compressed, and checks the result against the manifest.
    fn fill(&self, s: usize, file: &File) -> Result<()> {
        let info = &self.shards[s];
        let loc = self.source.locate(&info.file);
        let t = Instant::now();
        if info.is_compressed() {
            let size = info.file_bytes();
            let mut stored: Vec<u8> = Vec::new();
            stored
                .try_reserve_exact(size as usize)
                .map_err(|_| Error::compressed(&loc, format!("cannot allocate {size} bytes")))?;
            self.source.read(&info.file, size, &mut |b| {
                if stored.len() + b.len() > size as usize {
                    return Err(Error::Size {
                        path: loc.clone(),
                        expected: size,
                        actual: (stored.len() + b.len()) as u64,
                    });
                }
                stored.extend_from_slice(b);
                Ok(())
            })?;
            if stored.len() as u64 != size {
                return Err(Error::Size {
                    path: loc,
                    expected: size,
                    actual: stored.len() as u64,
                });
            }
            let fetched = t.elapsed().as_secs_f64();
            let actual = hex(blake3::hash(&stored).as_bytes());
            if actual != info.file_blake3() {
                return Err(Error::Checksum {
                    path: loc,
                    expected: info.file_blake3().to_owned(),
                    actual,
                });
            }
            let t = Instant::now();
            let table = SeekTable::parse(&stored, info.bytes, &loc)?;
            let part = self.dir.root().join(format!("{}.part", info.blake3));
            // SAFETY: the `.part` is ours alone: created by us with
            // `create_new`, exclusively locked, and at its final size; no
            // other process maps or writes it before we rename it.
            let mut map = unsafe { MmapMut::map_mut(file) }.map_err(|e| Error::io(&part, e))?;
            decompress_into(&stored, &table, &mut map, self.decompress_threads, &loc)?;
            self.verify_content(&map, s, &loc)?;
            map.flush().map_err(|e| Error::io(&part, e))?;
            let dt = t.elapsed().as_secs_f64();
            self.stat(|c| {
                c.fetch_seconds += fetched;
                c.decompress_seconds += dt;
                c.transferred_bytes += size;
            });
        } else {
            let size = info.bytes;
            let mut hasher = blake3::Hasher::new();
            let mut header = Vec::with_capacity(HEADER_LEN);
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            let mut got = 0u64;
            self.source.read(&info.file, size, &mut |b| {
                got += b.len() as u64;
                if got > size {
                    return Err(Error::Size {
                        path: loc.clone(),
                        expected: size,
                        actual: got,
                    });
                }
                let h = (HEADER_LEN - header.len()).min(b.len());
                header.extend_from_slice(&b[..h]);
                hasher.update(b);
                out.write_all(b).map_err(|e| Error::io(&loc, e))
            })?;
            out.flush().map_err(|e| Error::io(&loc, e))?;
            drop(out);
            if got != size {
                return Err(Error::Size {
                    path: loc,
                    expected: size,
                    actual: got,
                });
            }
            let actual = hex(hasher.finalize().as_bytes());
            if actual != info.blake3 {
                return Err(Error::Checksum {
                    path: loc,
                    expected: info.blake3.clone(),
                    actual,
                });
            }
            self.check_header(&header, s)?;
            let dt = t.elapsed().as_secs_f64();
            self.stat(|c| {
                c.fetch_seconds += dt;
                c.transferred_bytes += size;
            });
        }
        file.sync_data()
            .map_err(|e| Error::io(self.dir.root(), e))?;
        self.stat(|c| {
            c.fetched_shards += 1;
            c.fetched_bytes += info.bytes;
        });
        Ok(())
    }

    /// The decompressed shard's blake3 and header against the manifest.
    fn verify_content(&self, bytes: &[u8], s: usize, loc: &Path) -> Result<()> {
        let info = &self.shards[s];
        let actual = hex(blake3::hash(bytes).as_bytes());
        if actual != info.blake3 {
            return Err(Error::Checksum {
                path: loc.to_path_buf(),
                expected: info.blake3.clone(),
                actual,
            });
        }
        self.check_header(bytes, s)
    }

    fn check_header(&self, bytes: &[u8], s: usize) -> Result<()> {
        let info = &self.shards[s];
        let path = self.source.locate(&info.file);
        crate::header::check_shard_header(bytes, &path, self.stride, info.rows, &self.digest)
    }

    /// Checks every stored shard against the manifest (both hashes when
    /// compressed), reading from the source, not from the cache.
    /// Checks the blake3 of a set's other file (manifest `files`) at its
    /// source.
    pub(crate) fn verify_file(&self, name: &str, size: u64, blake3: &str) -> Result<()> {
        let mut hasher = blake3::Hasher::new();
        self.source.read(name, size, &mut |b| {
            hasher.update(b);
            Ok(())
        })?;
        let actual = hex(hasher.finalize().as_bytes());
        if actual != blake3 {
            return Err(Error::Checksum {
                path: self.source.locate(name),
                expected: blake3.to_owned(),
                actual,
            });
        }
        Ok(())
    }

    pub(crate) fn verify(&self) -> Result<()> {
        for (s, info) in self.shards.iter().enumerate() {
            let loc = self.source.locate(&info.file);
            let size = info.file_bytes();
            if info.is_compressed() {
                let mut stored = Vec::new();
                self.source.read(&info.file, size, &mut |b| {
                    stored.extend_from_slice(b);
                    Ok(())
                })?;
                let actual = hex(blake3::hash(&stored).as_bytes());
                if actual != info.file_blake3() {
                    return Err(Error::Checksum {
                        path: loc,
                        expected: info.file_blake3().to_owned(),
                        actual,
                    });
                }
                let table = SeekTable::parse(&stored, info.bytes, &loc)?;
                let mut out = vec![0u8; info.bytes as usize];
                decompress_into(&stored, &table, &mut out, self.decompress_threads, &loc)?;
                self.verify_content(&out, s, &loc)?;
            } else {
                let mut hasher = blake3::Hasher::new();
                self.source.read(&info.file, size, &mut |b| {
                    hasher.update(b);
                    Ok(())
                })?;
                let actual = hex(hasher.finalize().as_bytes());
                if actual != info.blake3 {
                    return Err(Error::Checksum {
                        path: loc,
                        expected: info.blake3.clone(),
                        actual,
                    });
                }
            }
        }
        Ok(())
    }

    /// Makes `plan` the future the cache fetches along and evicts by, and
    /// starts the threads that fetch ahead. Dropping the handle stops them.
    pub(crate) fn follow(self: &Arc<Self>, plan: AccessPlan) -> PlanHandle {
        let plan = Arc::new(plan);
        // What is cached already, then the fetches Belady's rule will make.
        let mut cached = vec![false; self.shards.len()];
        if let Ok(entries) = self.dir.scan() {
            for e in entries.iter().filter(|e| !e.part) {
                for &i in self.by_key.get(&e.key).into_iter().flatten() {
                    cached[i as usize] = true;
                }
            }
        }
        let sizes: Vec<u64> = self.shards.iter().map(|s| s.bytes).collect();
        let budget = self.budget.unwrap_or(u64::MAX);
        let fetches = conservative_fetches(&plan, &sizes, budget, &cached);
        let id = {
            let mut st = self.lock();
            st.next_plan_id += 1;
            let id = st.next_plan_id;
            for sl in &mut st.slots {
                sl.prefetch_failed = false;
            }
            st.plan = Some(Active {
                id,
                fetches,
                done: vec![false; plan.len()],
                plan: Arc::clone(&plan),
                cursor: 0,
            });
            id
        };
        self.wake_all();
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for t in 0..self.fetch_threads {
            let me = Arc::clone(self);
            let stop2 = Arc::clone(&stop);
            let spawned = std::thread::Builder::new()
                .name(format!("tessera-fetch-{t}"))
                .spawn(move || me.prefetch(id, &stop2));
            if let Ok(h) = spawned {
                threads.push(h);
            }
        }
        PlanHandle {
            cache: Arc::clone(self),
            id,
            stop,
            threads,
        }
    }

    /// One fetch-ahead thread: takes the first shard, in plan order from
    /// the reader's position, that is neither mapped nor being fetched.
    fn prefetch(&self, id: u64, stop: &AtomicBool) {
        let mut blocked_at: Option<u64> = None;
        loop {
            let (s, next) = {
                let mut st = self.lock();
                loop {
                    if stop.load(Ordering::Acquire) || st.plan.as_ref().is_none_or(|a| a.id != id) {
                        return;
                    }
                    if blocked_at != Some(st.progress)
                        && let Some(pick) = next_candidate(&st)
                    {
                        st.slots[pick.0].fetching = true;
                        break pick;
                    }
                    st = self
                        .fetchers
                        .wait_timeout(st, Duration::from_millis(100))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                    // Other processes free room without telling us: look
                    // again now and then.
                    blocked_at = None;
                }
            };
            let r = self.materialize(s, next);
            let mut st = self.lock();
            st.slots[s].fetching = false;
            match r {
                Ok(res) => {
                    // Far-off shards stay in the cache, unmapped, until then
                    // (with a budget: without one, nothing is evicted).
                    let cursor = st.plan.as_ref().map_or(0, |a| a.cursor);
                    if next <= cursor + KEEP_MAPPED_STEPS || self.budget.is_none() {
                        st.slots[s].map.get_or_insert(Arc::new(res));
                    }
                    blocked_at = None;
                }
                Err(Fail::NoRoom) => blocked_at = Some(st.progress),
                Err(Fail::Error(_)) => st.slots[s].prefetch_failed = true,
            }
            self.wake_all();
        }
    }

    fn release(&self, pins: &mut Vec<(u32, Arc<Resident>)>, step: Option<(u64, usize)>) {
        if pins.is_empty() && step.is_none() {
            return;
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some((id, j)) = step
            && let Some(a) = st.plan.as_mut().filter(|a| a.id == id)
            && j < a.done.len()
        {
            a.done[j] = true;
            while a.cursor < a.done.len() && a.done[a.cursor] {
                a.cursor += 1;
            }
        }
        for (s, _) in pins.drain(..) {
            let s = s as usize;
            let sl = &mut st.slots[s];
            sl.pins = sl.pins.saturating_sub(1);
            if sl.pins == 0 && !sl.sticky && self.budget.is_some() {
                // Unmap what is not needed soon, so that eviction may take
                // it: the file stays cached. Without a budget nothing is
                // evicted, and a map kept is one not faulted in again.
                let soon = st.plan.as_ref().is_some_and(|a| {
                    a.plan
                        .next_use(s, a.cursor)
                        .is_some_and(|n| n <= a.cursor + KEEP_MAPPED_STEPS)
                });
                if !soon {
                    sl.map = None;
                }
            }
        }
        st.progress += 1;
        let wake_fetchers = next_candidate(st).is_some();
        let wake_readers = st.readers_waiting > 0;
        drop(guard);
        if wake_readers {
            self.changed.notify_all();
        }
        if wake_fetchers {
            self.fetchers.notify_all();
        }
    }

    /// Wakes readers and fetch-ahead threads alike.
    fn wake_all(&self) {
        self.changed.notify_all();
        self.fetchers.notify_all();
    }
}

/// The next shard to fetch ahead, with the step that needs it: the first of
/// Belady's fetches from the reader's position that is neither mapped nor
/// under way, once it may start (after the last use of what it displaces);
/// `None` until then.
fn next_candidate(st: &State) -> Option<(usize, usize)> {
    let a = st.plan.as_ref()?;
    let from = a.fetches.partition_point(|f| f.step < a.cursor);
    for f in &a.fetches[from..] {
        let s = f.shard as usize;
        let sl = &st.slots[s];
        if sl.map.is_some() || sl.fetching || sl.prefetch_failed || a.done[f.step] {
            continue;
        }
        if f.earliest > a.cursor {
            // Fetches go in order: the next one waits for its turn.
            return None;
        }
        return Some((s, f.step));
    }
    None
}

/// Shards pinned for one batch: mapped, and not evictable until dropped.
pub(crate) struct PinSet {
    cache: Arc<CachedShards>,
    /// Sorted by shard.
    pins: Vec<(u32, Arc<Resident>)>,
    step: Option<(u64, usize)>,
}

impl PinSet {
    /// The bytes of pinned shard `s`.
    #[inline]
    pub(crate) fn shard(&self, s: usize) -> &[u8] {
        match self.pins.binary_search_by_key(&(s as u32), |(p, _)| *p) {
            Ok(i) => &self.pins[i].1.map,
            Err(_) => &[],
        }
    }

    fn release(&mut self) {
        self.cache.release(&mut self.pins, None);
    }
}

impl Drop for PinSet {
    fn drop(&mut self) {
        let step = self.step.take();
        self.cache.release(&mut self.pins, step);
    }
}

/// Keeps the cache following one reader's plan; stops its fetch-ahead
/// threads when dropped.
pub(crate) struct PlanHandle {
    cache: Arc<CachedShards>,
    id: u64,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl PlanHandle {
    /// The plan's id, to tag the steps acquired under it.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for PlanHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        {
            let mut st = self.cache.lock();
            if st.plan.as_ref().is_some_and(|a| a.id == self.id) {
                st.plan = None;
            }
        }
        self.cache.wake_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
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
