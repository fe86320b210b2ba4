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
    replay(plan, sizes, budget, policy, &[], |_, _, _| {})
}

/// One fetch of a cache that follows Belady's rule, fetched as early as it
/// can be without changing what is evicted (Cao et al.'s "conservative"
/// prefetching): once every shard it displaces has had its last use before
/// `step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fetch {
    /// The step that first needs the shard.
    pub(crate) step: usize,
    /// The shard.
    pub(crate) shard: u32,
    /// The first step at which fetching it evicts nothing needed before
    /// `step`: after the last use of everything it displaces.
    pub(crate) earliest: usize,
}

/// The fetches Belady's rule makes on `plan` with `budget` bytes, starting
/// with the shards in `cached`, each with the earliest step it may start.
pub(crate) fn conservative_fetches(
    plan: &AccessPlan,
    sizes: &[u64],
    budget: u64,
    cached: &[bool],
) -> Vec<Fetch> {
    let mut out = Vec::new();
    replay(
        plan,
        sizes,
        budget,
        Policy::Belady,
        cached,
        |step, shard, victims| {
            let earliest = victims
                .iter()
                .filter_map(|&v| plan.prev_use(v as usize, step))
                .map(|u| u + 1)
                .max()
                .unwrap_or(0);
            out.push(Fetch {
                step,
                shard,
                earliest,
            });
        },
    );
    out
}

/// The replay behind [`simulate`]: calls `on_fetch(step, shard, evicted)`
/// for every fetch.
fn replay(
    plan: &AccessPlan,
    sizes: &[u64],
    budget: u64,
    policy: Policy,
    initial: &[bool],
    mut on_fetch: impl FnMut(usize, u32, &[u32]),
) -> SimReport {
    let mut r = SimReport::default();
    // Per shard: cached?, last step used (LRU), and the resident total.
    let mut cached = vec![false; sizes.len()];
    let mut last = vec![0usize; sizes.len()];
    let mut used = 0u64;
    let mut resident: Vec<u32> = Vec::new();
    for (s, &c) in initial.iter().enumerate().take(sizes.len()) {
        if c && used + sizes[s] <= budget {
            cached[s] = true;
            used += sizes[s];
            resident.push(s as u32);
        }
    }
    let mut evicted: Vec<u32> = Vec::new();
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
                evicted.clear();
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
                    let v = resident.swap_remove(i);
                    cached[v as usize] = false;
                    used -= sizes[v as usize];
                    evicted.push(v);
                }
                if used + sizes[s] <= budget {
                    cached[s] = true;
                    used += sizes[s];
                    resident.push(s as u32);
                }
                on_fetch(j, s as u32, &evicted);
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
    fn conservative_fetches_wait_for_the_last_use_of_what_they_displace() {
        // Room for two: 0 1 | 2 (evicts 1, used last at step 1) | 0
        let plan = AccessPlan::new(3, vec![vec![0], vec![1], vec![0], vec![2], vec![0]]);
        let f = conservative_fetches(&plan, &[1, 1, 1], 2, &[false; 3]);
        let shards: Vec<u32> = f.iter().map(|x| x.shard).collect();
        assert_eq!(shards, vec![0, 1, 2]);
        assert_eq!(f[0].earliest, 0);
        assert_eq!(f[1].earliest, 0);
        assert_eq!((f[2].step, f[2].earliest), (3, 2));
        // Shards already cached are not fetched.
        let f = conservative_fetches(&plan, &[1, 1, 1], 2, &[true, true, false]);
        assert_eq!(f.iter().map(|x| x.shard).collect::<Vec<_>>(), vec![2]);
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
