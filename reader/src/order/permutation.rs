//! The seeded permutations behind shuffled epoch orders, one per order
//! version (docs/FORMAT.md, section 14.2, is the normative definition).
//!
//! - Version 1: a 4-round balanced Feistel network on a power-of-four domain
//!   with cycle walking. Kept bit for bit so that sets written before version
//!   2 read in the order they always had; it is measurably non-uniform for
//!   small `n` and only ever yields even permutations at `n = 4^k`.
//! - Version 2: below [`TABLE_MAX`] records an exact Fisher-Yates shuffle
//!   (unbiased bounded draws from a SplitMix64 stream), held as a table of
//!   `n` u32; above it an 8-round alternating (unbalanced) Feistel network on
//!   the smallest power-of-two domain, plus a one-bit round that lets both
//!   permutation parities occur, restricted to `0..n` by cycle walking. O(1)
//!   memory, fewer than two passes per position on average.

use std::sync::Arc;

/// Largest epoch (in records) that order version 2 shuffles with an explicit
/// Fisher-Yates table (at most 256 KiB); larger epochs use the Feistel network.
pub const TABLE_MAX: u64 = 1 << 16;

/// Rounds of the version-2 network (each updates one half).
const ROUNDS_V2: usize = 8;

/// The SplitMix64 finalizer: a fast, well-mixing 64-bit bijection.
#[inline(always)]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A SplitMix64 stream: `s += GOLDEN; yield mix(s)`.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// A uniform draw from `0..range` (`range >= 1`), exactly unbiased:
    /// Lemire's multiply-and-reject.
    #[inline]
    pub(crate) fn below(&mut self, range: u64) -> u64 {
        let mut m = u128::from(self.next_u64()) * u128::from(range);
        if (m as u64) < range {
            let threshold = range.wrapping_neg() % range;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(range);
            }
        }
        (m >> 64) as u64
    }
}

/// Version 1: the original network (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FeistelV1 {
    half_bits: u32,
    mask: u64,
    keys: [u64; 4],
}

impl FeistelV1 {
    pub(crate) fn new(n: u64, seed: u64, epoch: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = SplitMix(seed ^ mix(epoch ^ 0x7465_7373_6572_6121));
        let mut keys = [0u64; 4];
        for k in &mut keys {
            *k = rng.next_u64();
        }
        FeistelV1 {
            half_bits,
            mask: (1u64 << half_bits) - 1,
            keys,
        }
    }

    #[inline]
    pub(crate) fn permute(&self, x: u64) -> u64 {
        let mut l = x >> self.half_bits;
        let mut r = x & self.mask;
        for &k in &self.keys {
            let f = mix(r ^ k) & self.mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }
}

/// The seed stream of version 2 for `(seed, epoch)`.
fn stream_v2(seed: u64, epoch: u64) -> SplitMix {
    // "tessera2" as a big-endian u64.
    SplitMix(seed ^ mix(epoch ^ 0x7465_7373_6572_6132))
}

/// Version 2, `n <= TABLE_MAX`: the Fisher-Yates permutation as a table.
pub(crate) fn table_v2(n: u64, seed: u64, epoch: u64) -> Arc<[u32]> {
    debug_assert!(n <= TABLE_MAX);
    let mut t: Vec<u32> = (0..n as u32).collect();
    let mut rng = stream_v2(seed, epoch);
    for i in (1..t.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        t.swap(i, j);
    }
    t.into()
}

/// Version 2, `n > TABLE_MAX`: the alternating Feistel network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FeistelV2 {
    /// Width of the low part; the high part has `bits - lo_bits`.
    lo_bits: u32,
    lo_mask: u64,
    hi_mask: u64,
    keys: [u64; ROUNDS_V2],
    parity_key: u64,
}

impl FeistelV2 {
    pub(crate) fn new(n: u64, seed: u64, epoch: u64) -> Self {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let hi_bits = bits.div_ceil(2);
        let lo_bits = bits - hi_bits;
        let mut rng = stream_v2(seed, epoch);
        let mut keys = [0u64; ROUNDS_V2];
        for k in &mut keys {
            *k = rng.next_u64();
        }
        FeistelV2 {
            lo_bits,
            lo_mask: (1u64 << lo_bits) - 1,
            hi_mask: u64::MAX >> (64 - hi_bits),
            keys,
            parity_key: rng.next_u64(),
        }
    }

    /// Replaces every value of `xs` (each in `0..2^bits`) by one pass of
    /// the network. The same arithmetic as [`FeistelV2::permute`], in a loop
    /// the compiler vectorizes (8 values per instruction with AVX-512, 4
    /// with AVX2, chosen at run time): the per-position cost of a shuffled
    /// batch falls from about the cost of gathering a record to a fraction
    /// of it.
    pub(crate) fn permute_all(&self, xs: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512dq") {
                // SAFETY: the CPU has AVX-512 F and DQ (DQ implies F), which
                // is all the function's target features require.
                unsafe { self.permute_all_avx512(xs) };
                return;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, the function's target feature.
                unsafe { self.permute_all_avx2(xs) };
                return;
            }
        }
        self.permute_all_plain(xs);
    }

    #[inline(always)]
    fn permute_all_plain(&self, xs: &mut [u64]) {
        for x in xs {
            *x = self.permute(*x);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn permute_all_avx512(&self, xs: &mut [u64]) {
        self.permute_all_plain(xs);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn permute_all_avx2(&self, xs: &mut [u64]) {
        self.permute_all_plain(xs);
    }

    /// The parity round alone, over every value of `ys` (see
    /// [`FeistelV2::permute`]); vectorized like [`FeistelV2::permute_all`].
    fn parity_all(&self, ys: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512dq") {
                // SAFETY: as in `permute_all`.
                unsafe { self.parity_all_avx512(ys) };
                return;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: as in `permute_all`.
                unsafe { self.parity_all_avx2(ys) };
                return;
            }
        }
        self.parity_all_plain(ys);
    }

    #[inline(always)]
    fn parity_all_plain(&self, ys: &mut [u64]) {
        for y in ys {
            *y = self.parity(*y);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn parity_all_avx512(&self, ys: &mut [u64]) {
        self.parity_all_plain(ys);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn parity_all_avx2(&self, ys: &mut [u64]) {
        self.parity_all_plain(ys);
    }

    /// The parity round: flips the lowest bit of `y` as a function of the
    /// others.
    #[inline(always)]
    fn parity(&self, y: u64) -> u64 {
        y ^ (mix((y >> 1) ^ self.parity_key) & 1)
    }

    /// One pass of the network over `0..2^bits`.
    #[inline(always)]
    pub(crate) fn permute(&self, x: u64) -> u64 {
        let mut hi = x >> self.lo_bits;
        let mut lo = x & self.lo_mask;
        for pair in self.keys.chunks_exact(2) {
            lo ^= mix(hi ^ pair[0]) & self.lo_mask;
            hi ^= mix(lo ^ pair[1]) & self.hi_mask;
        }
        let y = (hi << self.lo_bits) | lo;
        // Flips the lowest bit as a function of the others: an involution
        // whose parity is odd for about half of the keys. The rounds above
        // are even permutations (each XORs a half of at least two bits).
        self.parity(y)
    }
}

/// Largest domain width (in bits) for which [`TabledV2`] holds the round
/// functions of the version-2 network as tables: two tables of 2^14 x 4
/// u16 entries (256 KiB), for epochs of up to 2^28 records.
pub(crate) const TABLED_MAX_BITS: u32 = 28;

/// Entries of one half's table: every value a half of a
/// [`TABLED_MAX_BITS`]-bit domain can take.
const HALF_VALUES: usize = 1 << (TABLED_MAX_BITS / 2);

/// A half's round functions: at `half`, the four rounds' values side by side.
type HalfTable = [[u16; 4]; HALF_VALUES];

/// The version-2 network with its eight round functions looked up instead
/// of computed. A round XORs `mix(half ^ key) & mask` into the other half,
/// and a half of a domain of `b <= TABLED_MAX_BITS` bits takes at most
/// 2^14 values: each round's function is a table of them, computed once
/// per epoch with the same arithmetic, so a pass costs eight loads
/// instead of sixteen 64-bit mixes, and gives exactly the same values. The
/// parity round, which depends on all the bits, is still computed (one mix,
/// vectorized).
///
/// The four rounds' entries for one half value sit side by side, so the
/// part of the tables an epoch uses is contiguous (for 800,000 records, 8
/// KiB a table) and stays in the first-level cache. Each table has a fixed
/// 2^14 rows, so an index masked to 14 bits needs no bounds check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TabledV2 {
    net: FeistelV2,
    /// Round `r`'s function of the high half, at `[hi][r]`: the value
    /// XORed into the low half.
    of_hi: Box<HalfTable>,
    /// Round `r`'s function of the low half, at `[lo][r]`: the value XORed
    /// into the high half.
    of_lo: Box<HalfTable>,
}

/// Lanes [`TabledV2::permute_all`] runs side by side: independent chains
/// of table loads that the CPU overlaps.
const LANES: usize = 4;

impl TabledV2 {
    /// The tables of `net`'s rounds, if its domain is narrow enough.
    pub(crate) fn new(net: FeistelV2) -> Option<Self> {
        let lo_bits = net.lo_bits;
        let hi_bits = 64 - net.hi_mask.leading_zeros();
        if lo_bits + hi_bits > TABLED_MAX_BITS {
            return None;
        }
        let table = |half_bits: u32, key_at: usize, mask: u64| -> Box<HalfTable> {
            let mut t: Box<HalfTable> = Box::new([[0u16; 4]; HALF_VALUES]);
            for (v, row) in t.iter_mut().enumerate().take(1 << half_bits) {
                for (slot, pair) in row.iter_mut().zip(net.keys.chunks_exact(2)) {
                    // Every entry fits in 16 bits: `mask` has at most 14.
                    *slot = (mix(v as u64 ^ pair[key_at]) & mask) as u16;
                }
            }
            t
        };
        Some(TabledV2 {
            of_hi: table(hi_bits, 0, net.lo_mask),
            of_lo: table(lo_bits, 1, net.hi_mask),
            net,
        })
    }

    /// The eight rounds of [`FeistelV2::permute`], without the parity
    /// round, for `LANES` values at once.
    #[inline(always)]
    fn rounds<const L: usize>(&self, xs: [u64; L]) -> [u64; L] {
        const M: usize = HALF_VALUES - 1;
        let lo_bits = self.net.lo_bits;
        // Both halves stay below 2^14 (the entries are masked to their
        // half's width): `& M` changes nothing, and proves the index in
        // bounds.
        let mut hi = xs.map(|x| (x >> lo_bits) as usize & M);
        let mut lo = xs.map(|x| (x & self.net.lo_mask) as usize & M);
        for r in 0..4 {
            for l in 0..L {
                lo[l] ^= usize::from(self.of_hi[hi[l] & M][r]);
            }
            for l in 0..L {
                hi[l] ^= usize::from(self.of_lo[lo[l] & M][r]);
            }
        }
        let mut out = [0u64; L];
        for l in 0..L {
            out[l] = ((hi[l] << lo_bits) | lo[l]) as u64;
        }
        out
    }

    /// One pass of the network: [`FeistelV2::permute`].
    #[inline(always)]
    pub(crate) fn permute(&self, x: u64) -> u64 {
        let [y] = self.rounds([x]);
        self.net.parity(y)
    }

    /// [`FeistelV2::permute_all`]: the rounds from the tables, `LANES`
    /// values at a time, then the parity round vectorized.
    pub(crate) fn permute_all(&self, xs: &mut [u64]) {
        let mut chunks = xs.chunks_exact_mut(LANES);
        for c in &mut chunks {
            let mut v = [0u64; LANES];
            v.copy_from_slice(c);
            c.copy_from_slice(&self.rounds(v));
        }
        for x in chunks.into_remainder() {
            let [y] = self.rounds([*x]);
            *x = y;
        }
        self.net.parity_all(xs);
    }
}
