//! Replays an access sequence against a cache of a given budget, under
//! Belady's rule (evict the shard whose next use is furthest away) or LRU,
//! to compare what each would fetch on the same sequence.

use super::plan::AccessPlan;

/// An eviction policy to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Evict the shard used least recently.
    Lru,
    /// Evict the shard whose next use is furthest in the future (never
    /// used again first): optimal for a known sequence.
    Belady,
}

/// What a policy fetched on a sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Accesses: a shard counted once per run of consecutive steps that
    /// read it.
    pub accesses: u64,
    /// Accesses that found the shard cached.
    pub hits: u64,
    /// Shards fetched.
    pub fetches: u64,
    /// Bytes fetched.
    pub fetched_bytes: u64,
}

impl SimReport {
    /// Hits over accesses (0 when there were none).
    pub fn hit_rate(&self) -> f64 {
        if self.accesses == 0 {
            0.0
        } else {
            self.hits as f64 / self.accesses as f64
        }
    }
}

/// Runs `plan` through a cache holding at most `budget` bytes of shards
/// (`sizes[s]` each). The shards of the current step are never evicted;
/// a step whose shards alone exceed the budget is counted as fetched in
/// full.
pub fn simulate(plan: &AccessPlan, sizes: &[u64], budget: u64, policy: Policy) -> SimReport {
    let mut r = SimReport::default();
    // Per shard: cached?, last step used (LRU), and the resident total.
    let mut cached = vec![false; sizes.len()];
    let mut last = vec![0usize; sizes.len()];
    let mut used = 0u64;
    let mut resident: Vec<u32> = Vec::new();
    let mut prev: &[u32] = &[];
    for (j, step) in plan.steps().enumerate() {
        for &s in step {
            let s = s as usize;
            if prev.binary_search(&(s as u32)).is_err() {
                r.accesses += 1;
                if cached[s] {
                    r.hits += 1;
                }
            }
            if !cached[s] {
                r.fetches += 1;
                r.fetched_bytes += sizes[s];
                // Make room, keeping this step's shards.
                while used + sizes[s] > budget {
                    let victim = resident
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| step.binary_search(v).is_err())
                        .max_by_key(|(_, v)| {
                            let v = **v as usize;
                            match policy {
                                // Least recently used = smallest last use.
                                Policy::Lru => usize::MAX - last[v],
                                Policy::Belady => plan.next_use(v, j).unwrap_or(usize::MAX),
                            }
                        })
                        .map(|(i, _)| i);
                    let Some(i) = victim else { break };
                    let v = resident.swap_remove(i) as usize;
                    cached[v] = false;
                    used -= sizes[v];
                }
                if used + sizes[s] <= budget {
                    cached[s] = true;
                    used += sizes[s];
                    resident.push(s as u32);
                }
            }
            last[s] = j;
        }
        prev = step;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_thrashes_on_a_loop_and_belady_does_not() {
        // Four shards read round and round, room for three.
        let plan = AccessPlan::new(4, (0..40).map(|j| vec![j % 4]));
        let sizes = [10; 4];
        let lru = simulate(&plan, &sizes, 30, Policy::Lru);
        let opt = simulate(&plan, &sizes, 30, Policy::Belady);
        assert_eq!(lru.accesses, 40);
        assert_eq!(lru.hits, 0);
        assert_eq!(lru.fetched_bytes, 400);
        // Belady misses once per three accesses after the first pass.
        assert!(opt.hits >= 24, "{opt:?}");
        assert_eq!(opt.fetched_bytes, 10 * opt.fetches);
        // With room for everything both fetch each shard once.
        for p in [Policy::Lru, Policy::Belady] {
            assert_eq!(simulate(&plan, &sizes, 40, p).fetches, 4);
        }
    }

    #[test]
    fn consecutive_steps_of_one_shard_are_one_access() {
        let plan = AccessPlan::new(2, vec![vec![0], vec![0], vec![0, 1], vec![1]]);
        let r = simulate(&plan, &[5, 5], 100, Policy::Lru);
        assert_eq!(r.accesses, 2);
        assert_eq!(r.fetches, 2);
        assert_eq!(r.hits, 0);
    }
}
