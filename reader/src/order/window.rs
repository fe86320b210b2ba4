//! The windowed shuffle: shuffle the order of the shards, then shuffle the
//! records inside consecutive windows of a few shards each
//! (docs/FORMAT.md, section 14.2.1).
//!
//! A full shuffle visits every shard in every batch, which is free when the
//! shards are memory-mapped but means the whole set must be resident before
//! the first batch when they come from an object store. A windowed epoch
//! needs only one window of shards at a time (two where a batch straddles
//! windows), and it tells the shard cache, from `(seed, epoch)` alone, in
//! which order the shards will be needed.

use super::{EpochOrder, OrderVersion, mix};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

/// Mixed into the seed for the order of the pieces (`tessera3`).
const PIECES_SALT: u64 = 0x7465_7373_6572_6133;
/// Mixed into the seed for the order inside window `t` (`tessera4`).
const WINDOW_SALT: u64 = 0x7465_7373_6572_6134;
/// Window orders kept built (a table costs up to 256 KiB).
const KEEP: usize = 4;

/// A windowed epoch order over a view cut into pieces (its parts in each
/// shard).
pub(crate) struct WindowOrder {
    n: u64,
    /// The pieces as index ranges of the view, in shuffled order.
    pieces: Vec<Range<u64>>,
    /// `cum[j]`: positions before shuffled piece `j`; `cum[m] = n`.
    cum: Vec<u64>,
    /// Pieces per window.
    width: usize,
    seed: u64,
    epoch: u64,
    /// The most recently used windows' inner orders.
    recent: Mutex<VecDeque<(usize, Arc<EpochOrder>)>>,
}

impl WindowOrder {
    /// `pieces` are the view's index ranges, one per shard it touches, in
    /// storage order; they must tile `0..n`. `width >= 1` pieces per window.
    pub(crate) fn new(pieces: Vec<Range<u64>>, width: usize, seed: u64, epoch: u64) -> Self {
        let m = pieces.len() as u64;
        let n = pieces.last().map_or(0, |p| p.end);
        let shuffle = EpochOrder::shuffled_as(OrderVersion::V2, m, mix(seed ^ PIECES_SALT), epoch);
        let order: Vec<Range<u64>> = (0..m)
            .map(|j| pieces[shuffle.get(j) as usize].clone())
            .collect();
        let mut cum = Vec::with_capacity(order.len() + 1);
        let mut at = 0;
        cum.push(0);
        for p in &order {
            at += p.end - p.start;
            cum.push(at);
        }
        WindowOrder {
            n,
            pieces: order,
            cum,
            width: width.max(1),
            seed,
            epoch,
            recent: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.n
    }

    /// Window `t`'s pieces (indices into `pieces`) and its first position.
    fn window(&self, t: usize) -> (Range<usize>, u64) {
        let a = t * self.width;
        let b = (a + self.width).min(self.pieces.len());
        (a..b, self.cum[a])
    }

    /// The window holding position `pos < n`.
    fn window_of(&self, pos: u64) -> usize {
        let j = self.cum.partition_point(|&c| c <= pos) - 1;
        j / self.width
    }

    /// The order inside window `t`.
    fn inner(&self, t: usize) -> Arc<EpochOrder> {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, o)) = recent.iter().find(|(w, _)| *w == t) {
            return Arc::clone(o);
        }
        let (pieces, start) = self.window(t);
        let len = self.cum[pieces.end] - start;
        let seed = mix(self.seed ^ mix(WINDOW_SALT ^ t as u64));
        let o = Arc::new(EpochOrder::shuffled_as(
            OrderVersion::V2,
            len,
            seed,
            self.epoch,
        ));
        if recent.len() == KEEP {
            recent.pop_front();
        }
        recent.push_back((t, Arc::clone(&o)));
        o
    }

    /// The view index at window-local position `r` of window `t`.
    #[inline]
    fn locate(&self, pieces: &Range<usize>, start: u64, r: u64) -> u64 {
        let abs = start + r;
        let cum = &self.cum[pieces.start..pieces.end];
        let k = pieces.start + cum.partition_point(|&c| c <= abs) - 1;
        self.pieces[k].start + (abs - self.cum[k])
    }

    /// The index visited at position `pos < n`.
    pub(crate) fn get(&self, pos: u64) -> u64 {
        let t = self.window_of(pos);
        let (pieces, start) = self.window(t);
        let r = self.inner(t).get(pos - start);
        self.locate(&pieces, start, r)
    }

    /// Appends the indices at `positions` (reduced modulo `n`).
    /// Appends the pieces of every window that positions `positions`
    /// (reduced modulo `n`, as in [`WindowOrder::extend_records`]) fall in:
    /// the records those positions visit lie in them, without computing
    /// which records they are.
    pub(crate) fn extend_window_pieces(&self, positions: Range<u64>, out: &mut Vec<Range<u64>>) {
        let n = self.n;
        if n == 0 {
            return;
        }
        let mut p = positions.start;
        while p < positions.end {
            let at = p % n;
            let (pieces, _) = self.window(self.window_of(at));
            let end = self.cum[pieces.end];
            out.extend(self.pieces[pieces].iter().cloned());
            p += (positions.end - p).min(end - at);
        }
    }

    pub(crate) fn extend_records(&self, positions: Range<u64>, out: &mut Vec<u64>) {
        let n = self.n;
        let mut p = positions.start;
        while p < positions.end {
            let at = p % n;
            let t = self.window_of(at);
            let (pieces, start) = self.window(t);
            let end = self.cum[pieces.end];
            let run = (positions.end - p).min(end - at);
            let from = out.len();
            self.inner(t)
                .extend_records(at - start..at - start + run, out);
            for x in &mut out[from..] {
                *x = self.locate(&pieces, start, *x);
            }
            p += run;
        }
    }
}

impl Clone for WindowOrder {
    fn clone(&self) -> Self {
        WindowOrder {
            n: self.n,
            pieces: self.pieces.clone(),
            cum: self.cum.clone(),
            width: self.width,
            seed: self.seed,
            epoch: self.epoch,
            recent: Mutex::new(VecDeque::new()),
        }
    }
}

impl PartialEq for WindowOrder {
    fn eq(&self, other: &Self) -> bool {
        (self.n, &self.pieces, self.width, self.seed, self.epoch)
            == (other.n, &other.pieces, other.width, other.seed, other.epoch)
    }
}

impl Eq for WindowOrder {}

impl std::fmt::Debug for WindowOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOrder")
            .field("n", &self.n)
            .field("pieces", &self.pieces.len())
            .field("width", &self.width)
            .field("seed", &self.seed)
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// The pieces of the view `rows` of a set whose shards hold `shard_rows`
/// records each: the view's index ranges inside each shard it touches, in
/// storage order.
pub fn view_pieces(shard_rows: impl IntoIterator<Item = u64>, rows: Range<u64>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut start = 0u64;
    for r in shard_rows {
        let end = start + r;
        let a = start.max(rows.start);
        let b = end.min(rows.end);
        if a < b {
            out.push(a - rows.start..b - rows.start);
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(sizes: &[u64]) -> Vec<Range<u64>> {
        view_pieces(sizes.iter().copied(), 0..sizes.iter().sum())
    }

    #[test]
    fn a_permutation_that_keeps_windows_together() {
        let sizes = [700, 300, 1000, 50, 999, 1];
        let p = pieces(&sizes);
        for width in [1, 2, 3, 6, 10] {
            for epoch in 0..3 {
                let w = WindowOrder::new(p.clone(), width, 9, epoch);
                let mut all = Vec::new();
                w.extend_records(0..w.len(), &mut all);
                let mut sorted = all.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..w.len()).collect::<Vec<_>>());
                // get() agrees with extend_records, also across calls in pieces.
                let mut chunked = Vec::new();
                for a in (0..w.len()).step_by(77) {
                    w.extend_records(a..(a + 77).min(w.len()), &mut chunked);
                }
                assert_eq!(chunked, all);
                for pos in (0..w.len()).step_by(13) {
                    assert_eq!(w.get(pos), all[pos as usize]);
                }
                // Each run of positions of one window draws only from that
                // window's pieces: at most `width` shards.
                let shard = |i: u64| p.iter().position(|r| r.contains(&i)).unwrap();
                for t in 0..p.len().div_ceil(width) {
                    let (ps, start) = w.window(t);
                    let end = w.cum[ps.end];
                    let mut shards: Vec<usize> = all[start as usize..end as usize]
                        .iter()
                        .map(|&i| shard(i))
                        .collect();
                    shards.sort_unstable();
                    shards.dedup();
                    assert!(shards.len() <= width);
                }
            }
        }
    }

    #[test]
    fn epochs_and_seeds_differ_and_the_same_arguments_repeat() {
        let p = pieces(&[100; 20]);
        let run = |seed, epoch| {
            let mut v = Vec::new();
            WindowOrder::new(p.clone(), 2, seed, epoch).extend_records(0..2000, &mut v);
            v
        };
        assert_eq!(run(1, 0), run(1, 0));
        assert_ne!(run(1, 0), run(1, 1));
        assert_ne!(run(1, 0), run(2, 0));
        // The first window's pieces differ between epochs most of the time.
        let first = |e| run(3, e)[..200].iter().map(|i| i / 100).min().unwrap();
        assert!(
            (0..8)
                .map(first)
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 2
        );
    }

    #[test]
    fn views_cut_shards() {
        assert_eq!(view_pieces([10, 10, 10], 5..25), vec![0..5, 5..15, 15..20]);
        assert_eq!(view_pieces([10, 10, 10], 10..20), vec![0..10]);
        assert!(view_pieces([10], 3..3).is_empty());
    }
}
