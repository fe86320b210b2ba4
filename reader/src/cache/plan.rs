//! The future a reader knows: which shards each of its coming batches
//! reads, in order, for this epoch and the next. The cache fetches ahead
//! along it and evicts by it (Belady's rule).

/// The shards each step (batch) of a reader reads, in the order the steps
/// come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessPlan {
    /// Shards of step `j`: `shards[offsets[j]..offsets[j + 1]]`, sorted.
    offsets: Vec<usize>,
    shards: Vec<u32>,
    /// Per shard, the steps that read it, ascending.
    uses: Vec<Vec<u32>>,
}

impl AccessPlan {
    /// A plan over `shard_count` shards from each step's shard list (in any
    /// order, repeats allowed).
    pub fn new(shard_count: usize, steps: impl IntoIterator<Item = Vec<u32>>) -> Self {
        let mut offsets = vec![0];
        let mut shards = Vec::new();
        let mut uses = vec![Vec::new(); shard_count];
        for (j, mut step) in steps.into_iter().enumerate() {
            step.sort_unstable();
            step.dedup();
            for &s in &step {
                if let Some(u) = uses.get_mut(s as usize) {
                    u.push(j as u32);
                }
            }
            shards.extend_from_slice(&step);
            offsets.push(shards.len());
        }
        AccessPlan {
            offsets,
            shards,
            uses,
        }
    }

    /// Number of steps.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// True when the plan has no step.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shards step `j` reads (sorted, distinct).
    pub fn step(&self, j: usize) -> &[u32] {
        &self.shards[self.offsets[j]..self.offsets[j + 1]]
    }

    /// The steps, in order.
    pub fn steps(&self) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.len()).map(|j| self.step(j))
    }

    /// The last step before `before` that reads `shard`, if any.
    pub fn prev_use(&self, shard: usize, before: usize) -> Option<usize> {
        let u = self.uses.get(shard)?;
        let i = u.partition_point(|&s| (s as usize) < before);
        i.checked_sub(1).map(|i| u[i] as usize)
    }

    /// The first step at or after `from` that reads `shard`, if any.
    pub fn next_use(&self, shard: usize, from: usize) -> Option<usize> {
        let u = self.uses.get(shard)?;
        let i = u.partition_point(|&s| (s as usize) < from);
        u.get(i).map(|&s| s as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_uses() {
        let p = AccessPlan::new(3, vec![vec![1, 0, 1], vec![2], vec![], vec![0]]);
        assert_eq!(p.len(), 4);
        assert_eq!(p.step(0), &[0, 1]);
        assert_eq!(p.step(2), &[] as &[u32]);
        assert_eq!(p.next_use(0, 0), Some(0));
        assert_eq!(p.next_use(0, 1), Some(3));
        assert_eq!(p.next_use(1, 1), None);
        assert_eq!(p.next_use(2, 0), Some(1));
        assert_eq!(p.next_use(7, 0), None);
        assert_eq!(p.prev_use(0, 3), Some(0));
        assert_eq!(p.prev_use(0, 4), Some(3));
        assert_eq!(p.prev_use(2, 1), None);
    }
}
