//! Fetching ahead: the plan a reader follows, and the threads that bring
//! its shards in, in Belady's order, before the reader needs them.

use super::{Active, CachedShards, Fail, KEEP_MAPPED_STEPS, State};
use crate::cache::plan::AccessPlan;
use crate::cache::simulate::conservative_fetches;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

impl CachedShards {
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
}

/// The next shard to fetch ahead, with the step that needs it: the first of
/// Belady's fetches from the reader's position that is neither mapped nor
/// under way, once it may start (after the last use of what it displaces);
/// `None` until then.
pub(super) fn next_candidate(st: &State) -> Option<(usize, usize)> {
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

#[cfg(test)]
mod tests {
    use super::super::{Active, Slot, State};
    use super::*;
    use crate::cache::simulate::Fetch;

    /// Steps 0..4 reading shards 0..4 in turn, with the given fetches.
    fn state(fetches: Vec<Fetch>, cursor: usize) -> State {
        let plan = AccessPlan::new(4, (0..4).map(|s| vec![s]));
        State {
            slots: (0..4).map(|_| Slot::default()).collect(),
            plan: Some(Active {
                id: 1,
                fetches,
                done: vec![false; plan.len()],
                plan: Arc::new(plan),
                cursor,
            }),
            ..State::default()
        }
    }

    fn fetch(step: usize, shard: u32, earliest: usize) -> Fetch {
        Fetch {
            step,
            shard,
            earliest,
        }
    }

    #[test]
    fn the_next_candidate_is_the_first_fetch_from_the_cursor_still_to_do() {
        let fetches = vec![
            fetch(0, 0, 0),
            fetch(1, 1, 0),
            fetch(2, 2, 1),
            fetch(3, 3, 2),
        ];
        let mut st = state(fetches, 1);
        // Fetches for steps before the cursor are past.
        assert_eq!(next_candidate(&st), Some((1, 1)));
        // Mapped, under way, or failed ahead: the next one is taken.
        st.slots[1].fetching = true;
        assert_eq!(next_candidate(&st), Some((2, 2)));
        st.slots[2].prefetch_failed = true;
        // The fetch for step 3 may start only at step 2: not yet.
        assert_eq!(next_candidate(&st), None);
        if let Some(a) = st.plan.as_mut() {
            a.cursor = 2;
        }
        assert_eq!(next_candidate(&st), Some((3, 3)));
        // A step already done needs no fetch.
        if let Some(a) = st.plan.as_mut() {
            a.done[3] = true;
        }
        assert_eq!(next_candidate(&st), None);
    }

    #[test]
    fn without_a_plan_there_is_nothing_to_fetch() {
        let st = State {
            slots: (0..2).map(|_| Slot::default()).collect(),
            ..State::default()
        };
        assert_eq!(next_candidate(&st), None);
    }
}
