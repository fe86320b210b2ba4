//! Admission: bringing one shard into the cache directory (or finding it
//! there), and making room for it within the budget by Belady's rule.

use super::{ATTEMPTS, CachedShards, Fail, State};
use crate::cache::dir::{Claim, Entry, Resident};
use crate::error::{Error, Result};
use std::time::Duration;

impl CachedShards {
    /// Brings shard `s` into the cache (or finds it there), making room by
    /// Belady's rule for a shard next needed at plan step `next`.
    pub(super) fn materialize(&self, s: usize, next: usize) -> Result<Resident, Fail> {
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
        // Rank the cached files that are not in use here by next use.
        let mut ranked: Vec<(usize, &Entry)> = {
            let st = self.lock();
            entries
                .iter()
                .filter(|e| !e.part && e.key != incoming)
                .filter_map(|e| {
                    let ours = self.by_key.get(&e.key).map(Vec::as_slice);
                    next_use(&st, ours).map(|n| (n, e))
                })
                .collect()
        };
        eviction_order(&mut ranked);
        for (next_use, e) in ranked {
            if usage <= budget {
                break;
            }
            if !may_displace(next_use, next) {
                break;
            }
            if let Some(ours) = self.by_key.get(&e.key) {
                // Unmap our copy (if still unpinned) so the file can go.
                let mut st = self.lock();
                if busy(&st, ours) {
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
}

/// Whether any of our shards `ours` is in use here (pinned, kept for the
/// set's lifetime, or being fetched): its file is then never evicted.
fn busy(st: &State, ours: &[u32]) -> bool {
    ours.iter().any(|&i| {
        let sl = &st.slots[i as usize];
        sl.pins > 0 || sl.sticky || sl.fetching
    })
}

/// The plan step at which a cached file is next needed, for eviction:
/// `usize::MAX` when never (not one of ours, or not in the plan from the
/// reader's position), `None` when it is in use and may not go at all.
/// `ours` are our shards holding the file's bytes.
fn next_use(st: &State, ours: Option<&[u32]>) -> Option<usize> {
    let Some(ours) = ours else {
        return Some(usize::MAX);
    };
    if busy(st, ours) {
        return None;
    }
    let next = ours
        .iter()
        .filter_map(|&i| {
            st.plan
                .as_ref()
                .and_then(|a| a.plan.next_use(i as usize, a.cursor))
        })
        .min();
    Some(next.unwrap_or(usize::MAX))
}

/// Belady's order of eviction: the furthest next use first; among the
/// never-needed, the oldest file.
fn eviction_order(ranked: &mut [(usize, &Entry)]) {
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.mtime.cmp(&b.1.mtime)));
}

/// Whether a file next needed at step `next_use` may make room for a shard
/// needed at step `next`: never one needed at or before it.
fn may_displace(next_use: usize, next: usize) -> bool {
    next_use == usize::MAX || next_use > next
}

#[cfg(test)]
mod tests {
    use super::super::{Active, Slot, State};
    use super::*;
    use crate::cache::plan::AccessPlan;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    fn state(shards: usize, steps: Vec<Vec<u32>>, cursor: usize) -> State {
        let plan = AccessPlan::new(shards, steps);
        State {
            slots: (0..shards).map(|_| Slot::default()).collect(),
            plan: Some(Active {
                id: 1,
                fetches: Vec::new(),
                done: vec![false; plan.len()],
                plan: Arc::new(plan),
                cursor,
            }),
            ..State::default()
        }
    }

    fn entry(key: &str, age_secs: u64) -> Entry {
        Entry {
            key: key.to_owned(),
            part: false,
            bytes: 10,
            mtime: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 - age_secs),
        }
    }

    #[test]
    fn next_use_is_the_soonest_step_of_any_shard_sharing_the_file() {
        // Steps: 0 reads shard 0, 1 reads 1, 2 reads 2, 3 reads 0 again.
        let st = state(3, vec![vec![0], vec![1], vec![2], vec![0]], 1);
        // From the cursor (step 1) shard 0 is next read at step 3.
        assert_eq!(next_use(&st, Some(&[0])), Some(3));
        assert_eq!(next_use(&st, Some(&[2])), Some(2));
        // Two shards with the same bytes share a file: the sooner counts.
        assert_eq!(next_use(&st, Some(&[0, 2])), Some(2));
        // Another set's file is never needed by this plan.
        assert_eq!(next_use(&st, None), Some(usize::MAX));
    }

    #[test]
    fn a_shard_in_use_is_never_ranked() {
        let mut st = state(3, vec![vec![0], vec![1], vec![2]], 0);
        st.slots[1].pins = 1;
        assert_eq!(next_use(&st, Some(&[1])), None);
        assert_eq!(next_use(&st, Some(&[0, 1])), None);
        st.slots[1].pins = 0;
        st.slots[2].sticky = true;
        assert_eq!(next_use(&st, Some(&[2])), None);
        st.slots[2].sticky = false;
        st.slots[0].fetching = true;
        assert_eq!(next_use(&st, Some(&[0])), None);
        assert_eq!(next_use(&st, Some(&[2])), Some(2));
    }

    #[test]
    fn eviction_takes_the_furthest_use_then_the_oldest_unneeded() {
        let (near, far, old, young) = (
            entry("near", 5),
            entry("far", 5),
            entry("old", 9),
            entry("young", 1),
        );
        let mut ranked = vec![
            (2, &near),
            (usize::MAX, &young),
            (7, &far),
            (usize::MAX, &old),
        ];
        eviction_order(&mut ranked);
        let keys: Vec<&str> = ranked.iter().map(|(_, e)| e.key.as_str()).collect();
        assert_eq!(keys, ["old", "young", "far", "near"]);
    }

    #[test]
    fn a_file_needed_no_later_than_the_incoming_shard_stays() {
        assert!(may_displace(usize::MAX, 0));
        assert!(may_displace(5, 4));
        assert!(!may_displace(4, 4));
        assert!(!may_displace(3, 4));
    }
}
