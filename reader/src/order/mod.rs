//! Deterministic sample order: which records form batch `k` of rank `r` in
//! epoch `e`. Pure arithmetic, no I/O.
//!
//! The epoch order is a permutation of `0..n`: the identity, or a seeded
//! pseudo-random permutation defined by the set's order version
//! ([`OrderVersion`], `docs/FORMAT.md` section 14.2). The sequence of epoch
//! positions is cut into global batches of `batch_size * world_size`
//! positions; rank `r` takes the `r`-th `batch_size` slice of each
//! ([`Schedule`]). A position in that sequence plus `(seed, epoch)` is the
//! whole state of a reader: see [`Cursor`].

mod permutation;
mod schedule;
mod window;

pub use permutation::TABLE_MAX;
pub(crate) use permutation::{SplitMix, mix};
pub use schedule::{Cursor, LastBatch, Schedule};
pub use window::view_pieces;

use crate::error::{Error, Result};
use permutation::{FeistelV1, FeistelV2, TabledV2, table_v2};
use std::sync::Arc;
use window::WindowOrder;

/// Which definition of the shuffled order a shard set uses. Stored in the
/// manifest (`order_version`; absent means 1), so a set keeps the order it
/// was written with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OrderVersion {
    /// The original 4-round Feistel order (sets written before version 2).
    V1,
    /// Exact Fisher-Yates up to [`TABLE_MAX`] records, an 8-round
    /// alternating Feistel network above. What new sets get.
    #[default]
    V2,
}

impl OrderVersion {
    /// The version new sets are written with.
    pub const LATEST: OrderVersion = OrderVersion::V2;

    /// The number stored in the manifest.
    pub fn number(self) -> u32 {
        match self {
            OrderVersion::V1 => 1,
            OrderVersion::V2 => 2,
        }
    }

    /// The version stored as `number`, if this reader implements it.
    pub fn from_number(number: u64) -> Result<Self> {
        match number {
            1 => Ok(OrderVersion::V1),
            2 => Ok(OrderVersion::V2),
            other => Err(Error::InvalidArgument(format!(
                "order version {other} is not implemented by this reader (it knows 1 and 2)"
            ))),
        }
    }
}

/// The order in which one epoch visits the records `0..n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochOrder {
    n: u64,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Identity,
    V1(FeistelV1),
    Table(Arc<[u32]>),
    V2(FeistelV2),
    /// [`Kind::V2`] for epochs of up to 2^28 records: the same network
    /// with its round functions tabulated.
    V2Tabled(Arc<TabledV2>),
    Windowed(Arc<WindowOrder>),
}

impl EpochOrder {
    /// The identity order `0, 1, ..., n - 1`.
    pub fn sequential(n: u64) -> Self {
        EpochOrder {
            n,
            kind: Kind::Identity,
        }
    }

    /// The seeded permutation of `0..n` for `(seed, epoch)` under the latest
    /// order version. Different epochs give unrelated permutations; the same
    /// arguments always give the same one.
    pub fn shuffled(n: u64, seed: u64, epoch: u64) -> Self {
        Self::shuffled_as(OrderVersion::LATEST, n, seed, epoch)
    }

    /// The seeded permutation of `0..n` as order version `version` defines it.
    pub fn shuffled_as(version: OrderVersion, n: u64, seed: u64, epoch: u64) -> Self {
        let kind = match version {
            OrderVersion::V1 => Kind::V1(FeistelV1::new(n, seed, epoch)),
            OrderVersion::V2 if n <= TABLE_MAX => Kind::Table(table_v2(n, seed, epoch)),
            OrderVersion::V2 => {
                let net = FeistelV2::new(n, seed, epoch);
                match TabledV2::new(net.clone()) {
                    Some(t) => Kind::V2Tabled(Arc::new(t)),
                    None => Kind::V2(net),
                }
            }
        };
        EpochOrder { n, kind }
    }

    /// The windowed shuffle (docs/FORMAT.md section 14.2.1): the view's
    /// `pieces` (its index ranges in each shard, in storage order, tiling
    /// `0..n`; see [`view_pieces`]) are put in a seeded order, cut into
    /// windows of `width` pieces, and the records of each window are
    /// shuffled among themselves. An epoch then needs one window of shards
    /// at a time.
    pub fn windowed(
        pieces: Vec<std::ops::Range<u64>>,
        width: usize,
        seed: u64,
        epoch: u64,
    ) -> Self {
        let w = WindowOrder::new(pieces, width, seed, epoch);
        EpochOrder {
            n: w.len(),
            kind: Kind::Windowed(Arc::new(w)),
        }
    }

    /// `shuffled` (latest version) when `shuffle` is true, else `sequential`.
    pub fn new(n: u64, shuffle: bool, seed: u64, epoch: u64) -> Self {
        Self::new_as(OrderVersion::LATEST, n, shuffle, seed, epoch)
    }

    /// `shuffled_as(version, ..)` when `shuffle` is true, else `sequential`.
    pub fn new_as(version: OrderVersion, n: u64, shuffle: bool, seed: u64, epoch: u64) -> Self {
        if shuffle {
            Self::shuffled_as(version, n, seed, epoch)
        } else {
            Self::sequential(n)
        }
    }

    /// Number of records ordered.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True when there is nothing to order.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// True for the identity order.
    pub fn is_sequential(&self) -> bool {
        self.kind == Kind::Identity
    }

    /// The record visited at position `pos` (`pos < n`).
    #[inline]
    pub fn get(&self, pos: u64) -> u64 {
        debug_assert!(pos < self.n);
        match &self.kind {
            Kind::Identity => pos,
            Kind::Table(t) => u64::from(t[pos as usize]),
            Kind::V1(f) => walk(self.n, pos, |x| f.permute(x)),
            Kind::V2(f) => walk(self.n, pos, |x| f.permute(x)),
            Kind::V2Tabled(f) => walk(self.n, pos, |x| f.permute(x)),
            Kind::Windowed(w) => w.get(pos),
        }
    }

    /// For a windowed order: appends the view index ranges (pieces) of the
    /// windows that positions `positions` fall in, and returns true; the
    /// records those positions visit lie in them. False for other orders.
    pub(crate) fn extend_window_pieces(
        &self,
        positions: std::ops::Range<u64>,
        out: &mut Vec<std::ops::Range<u64>>,
    ) -> bool {
        match &self.kind {
            Kind::Windowed(w) => {
                w.extend_window_pieces(positions, out);
                true
            }
            _ => false,
        }
    }

    /// Appends the records visited at positions `positions` (reduced modulo
    /// `n`, so a padded batch may reach past the end) to `out`.
    pub fn extend_records(&self, positions: std::ops::Range<u64>, out: &mut Vec<u64>) {
        let n = self.n;
        let wrap = |p: u64| if p < n { p } else { p % n };
        match &self.kind {
            Kind::Identity => out.extend(positions.map(wrap)),
            Kind::Table(t) => out.extend(positions.map(|p| u64::from(t[wrap(p) as usize]))),
            Kind::V1(f) => out.extend(positions.map(|p| walk(n, wrap(p), |x| f.permute(x)))),
            Kind::Windowed(w) => w.extend_records(positions, out),
            Kind::V2(f) => {
                let from = out.len();
                out.extend(positions.map(wrap));
                walk_all(n, &mut out[from..], |xs| f.permute_all(xs));
            }
            Kind::V2Tabled(f) => {
                let from = out.len();
                out.extend(positions.map(wrap));
                walk_all(n, &mut out[from..], |xs| f.permute_all(xs));
            }
        }
    }
}

/// Cycle walking over many positions at once: one pass of `permute_all`
/// over every value, then further passes over the (fewer than half, on
/// average) values that left `0..n`, gathered into a dense list so that
/// those passes vectorize too.
fn walk_all(n: u64, xs: &mut [u64], permute_all: impl Fn(&mut [u64])) {
    permute_all(xs);
    // Branch-free bookkeeping: write every candidate, advance the count
    // only for those that must walk on.
    let mut idx = vec![0u32; xs.len()];
    let mut count = 0usize;
    for (j, &x) in xs.iter().enumerate() {
        idx[count] = j as u32;
        count += usize::from(x >= n);
    }
    let mut vals = vec![0u64; count];
    while count > 0 {
        idx.truncate(count);
        vals.truncate(count);
        for (v, &j) in vals.iter_mut().zip(&idx) {
            *v = xs[j as usize];
        }
        permute_all(&mut vals);
        let mut keep = 0usize;
        for k in 0..count {
            let (j, x) = (idx[k], vals[k]);
            xs[j as usize] = x;
            idx[keep] = j;
            keep += usize::from(x >= n);
        }
        count = keep;
    }
}

/// Cycle walking: applies `permute` until the value lands in `0..n`. It
/// terminates because `pos < n` lies on the cycle being walked.
#[inline(always)]
fn walk(n: u64, pos: u64, permute: impl Fn(u64) -> u64) -> u64 {
    let mut x = permute(pos);
    while x >= n {
        x = permute(x);
    }
    x
}
