//! The gather kernel: records copied into consecutive slots, each located
//! and prefetched some slots before its copy.

/// Fills consecutive `stride`-byte slots of `out` with the records
/// `locate(0), locate(1), ...`. Random access is bound by memory latency
/// (and, over gigabytes of 4 KiB pages, by TLB misses), so each record is
/// located and prefetched `AHEAD` slots before it is copied, keeping several
/// misses in flight. A small ring holds the located records, so each one is
/// looked up (shard, offset, bounds check) once, which keeps the loop short:
/// the fewer instructions per record, the more records the CPU keeps in
/// flight.
#[inline]
pub(crate) fn gather_with<'a>(
    out: &mut [u8],
    stride: usize,
    mut locate: impl FnMut(usize) -> &'a [u8],
) {
    // Measured on a 2 GiB set of 160-byte records (2-core AMD EPYC VM):
    // 8 ahead reached about 60% of a plain gather loop's rate, 16 ahead
    // about 90%, 32 no more than 16. 4096-byte records: no difference.
    const AHEAD: usize = 16;
    let count = out.len() / stride;
    let mut ring: [&[u8]; AHEAD] = [&[]; AHEAD];
    for (j, slot) in ring.iter_mut().enumerate().take(count) {
        let rec = locate(j);
        prefetch(rec);
        *slot = rec;
    }
    for (j, dst) in out.chunks_exact_mut(stride).enumerate() {
        let slot = &mut ring[j % AHEAD];
        let src = *slot;
        if j + AHEAD < count {
            let rec = locate(j + AHEAD);
            prefetch(rec);
            *slot = rec;
        }
        dst.copy_from_slice(src);
    }
}

/// Hints the CPU to start loading `bytes` into cache.
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // Records longer than a few cache lines are streamed by the hardware
        // prefetcher once the first lines are touched.
        for line in bytes.chunks(64).take(4) {
            // SAFETY: SSE is part of the x86_64 baseline, so the intrinsic's
            // target feature is always present; a prefetch is only a hint that
            // never faults, and the address is inside a live slice anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
