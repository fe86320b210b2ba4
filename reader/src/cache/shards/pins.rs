//! A batch's shards, mapped and pinned while it reads them, and their
//! release, which marks the batch's plan step done.

use super::prefetch::next_candidate;
use super::{CachedShards, Fail, KEEP_MAPPED_STEPS, ROOM_WAIT};
use crate::cache::dir::Resident;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl CachedShards {
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
