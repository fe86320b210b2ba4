//! The weighted interleave of a mixture: which component each global
//! sample comes from, as a binary tree over the components whose nodes
//! split their samples by a running remainder (see the parent module).

use crate::order::SplitMix;

/// The weights in force over global samples `start..end`.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) nodes: Vec<Node>,
    /// Each component's count at `start`.
    pub(super) base: Vec<u64>,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Child {
    Node(usize),
    Leaf(usize),
}

/// An interleave node: of its `x`-th sample, `floor((x wl + u) / total)`
/// went left before it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Node {
    wl: u64,
    total: u64,
    u: u64,
    left: Child,
    right: Child,
}

impl Segment {
    /// Component counts after `x` samples of this segment.
    pub(super) fn local_counts(&self, x: u64, ncomp: usize) -> Vec<u64> {
        let mut counts = vec![0u64; ncomp];
        if self.nodes.is_empty() {
            counts[0] = x;
            return counts;
        }
        let mut state = vec![(0u64, 0u64); self.nodes.len()];
        self.init(0, x, &mut state, &mut counts);
        counts
    }

    /// Sets node `i`'s state for having seen `x` samples, recursively, and
    /// adds the leaves' shares to `counts`.
    pub(super) fn init(&self, i: usize, x: u64, state: &mut [(u64, u64)], counts: &mut [u64]) {
        let n = self.nodes[i];
        let v = u128::from(x) * u128::from(n.wl) + u128::from(n.u);
        let left = (v / u128::from(n.total)) as u64;
        state[i] = (x, (v % u128::from(n.total)) as u64);
        for (child, cx) in [(n.left, left), (n.right, x - left)] {
            match child {
                Child::Node(j) => self.init(j, cx, state, counts),
                Child::Leaf(c) => counts[c] += cx,
            }
        }
    }

    /// Sends the samples `slots` (in order) through `child`, appending
    /// each leaf's share to `leaves[component]`.
    pub(super) fn route(
        &self,
        child: Child,
        slots: &[u32],
        state: &mut [(u64, u64)],
        leaves: &mut [Vec<u32>],
        halves: &mut Vec<(Vec<u32>, Vec<u32>)>,
    ) {
        let i = match child {
            Child::Leaf(c) => {
                leaves[c].extend_from_slice(slots);
                return;
            }
            Child::Node(i) => i,
        };
        let node = self.nodes[i];
        let (x, mut r) = state[i];
        if halves.len() < self.nodes.len() {
            halves.resize_with(self.nodes.len(), Default::default);
        }
        // Taken out while the children are routed, put back after, so the
        // buffers are reused from batch to batch.
        let (mut left, mut right) = std::mem::take(&mut halves[i]);
        left.resize(slots.len(), 0);
        right.resize(slots.len(), 0);
        let (mut nl, mut nr) = (0usize, 0usize);
        for &s in slots {
            // floor((x wl + u) / total) grows by one exactly when the
            // remainder wraps: that sample goes left.
            r += node.wl;
            let go_left = r >= node.total;
            r -= if go_left { node.total } else { 0 };
            left[nl] = s;
            right[nr] = s;
            nl += usize::from(go_left);
            nr += usize::from(!go_left);
        }
        state[i] = (x + slots.len() as u64, r);
        self.route(node.left, &left[..nl], state, leaves, halves);
        self.route(node.right, &right[..nr], state, leaves, halves);
        halves[i] = (left, right);
    }
}

/// Builds the interleave tree over components `lo..hi` (at least two);
/// returns the root's index. Components with weight 0 still get a leaf
/// (its share is always empty).
pub(super) fn build_tree(
    w: &[u64],
    lo: usize,
    hi: usize,
    nodes: &mut Vec<Node>,
    rng: &mut SplitMix,
) -> Child {
    if hi - lo == 1 {
        return Child::Leaf(lo);
    }
    let at = nodes.len();
    nodes.push(Node {
        wl: 0,
        total: 1,
        u: 0,
        left: Child::Leaf(lo),
        right: Child::Leaf(lo),
    });
    let mid = lo + (hi - lo) / 2;
    let wl: u64 = w[lo..mid].iter().sum();
    let total = wl + w[mid..hi].iter().sum::<u64>();
    let u = if total == 0 { 0 } else { rng.below(total) };
    let left = build_tree(w, lo, mid, nodes, rng);
    let right = build_tree(w, mid, hi, nodes, rng);
    nodes[at] = Node {
        wl,
        // A subtree whose components all have weight 0 is never entered.
        total: total.max(1),
        u,
        left,
        right,
    };
    Child::Node(at)
}
