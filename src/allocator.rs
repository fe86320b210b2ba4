//! The compiler's memory allocator: mimalloc, told to keep the pages it
//! frees; glibc's malloc under an address-space limit.
//!
//! The query engine allocates and frees batch-sized buffers and growing hash
//! tables at a high rate. Whatever allocator hands such memory back to the
//! kernel pays for it again on the next allocation: a page fault per page,
//! each a zeroed page (2 MiB at a time where the kernel backs the heap with
//! huge pages) and, on a virtual machine, an interrupt to the other cores to
//! flush their address caches. Measured on TPC-H's q18 at SF 1 on 2 cores
//! (1.4 GB peak): glibc's malloc took 290,000 faults and 1.2 s of kernel
//! time for a 1.5 s query; mimalloc with its default purge delay (1 s)
//! returned and re-faulted huge pages until the kernel time reached 2.5-5 s;
//! mimalloc that never purges took 4,400 faults and 0.35-0.45 s. A build is
//! one process that exits when it is done, and its peak is bounded by the
//! memory limit, so keeping the peak's pages costs nothing it would not
//! have used anyway.
//!
//! Under an address-space limit (`ulimit -v`) mimalloc's reservations do not
//! fit where glibc's arenas, capped by `fit_address_space`, do (a build of
//! ten million distinct strings under 1 GiB failed to allocate 69 MB), so
//! there the process keeps glibc's malloc. The choice is made at the first
//! allocation, from the limit the process started with, and never changes:
//! every block is freed by the allocator that made it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::raw::{c_int, c_long};
use std::sync::atomic::{AtomicU8, Ordering};

/// Not chosen yet, mimalloc, glibc.
const UNKNOWN: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;
static CHOICE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The global allocator (see the module).
pub struct Allocator;

impl Allocator {
    #[inline]
    fn mimalloc() -> bool {
        match CHOICE.load(Ordering::Relaxed) {
            MIMALLOC => true,
            SYSTEM => false,
            _ => {
                // Threads racing here compute the same answer: the limit is
                // read, not changed, and nothing was allocated before.
                let choice = if address_space_limited() {
                    SYSTEM
                } else {
                    MIMALLOC
                };
                CHOICE.store(choice, Ordering::Relaxed);
                choice == MIMALLOC
            }
        }
    }
}

/// Whether the process runs under an address-space limit (without
/// allocating).
fn address_space_limited() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) };
    rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY
}

// SAFETY: every call goes to the allocator chosen once for the process's
// life, so a block is always freed or resized by the allocator that made it;
// both allocators uphold GlobalAlloc's contract themselves.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees are passed on unchanged.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`; `ptr` came from the same allocator.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`.
        unsafe {
            if Self::mimalloc() {
                mimalloc::MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

/// mimalloc's `mi_option_purge_delay`, the 16th entry of `mi_option_t` in
/// mimalloc.h: milliseconds before freed memory is returned to the kernel,
/// -1 for never. The Rust binding declares no constant for it, so the index
/// is written here, for the exact crate versions pinned in Cargo.toml
/// (mimalloc 3), and the test below checks it by its default of 1000 ms.
const PURGE_DELAY: c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
}

/// Makes mimalloc keep the pages it frees for later allocations. Call first
/// thing in `main`: it only changes a setting, and allocation stays correct
/// whenever it is called.
pub fn keep_freed_pages() {
    // SAFETY: mi_option_set stores a value in mimalloc's option table; it
    // takes no pointers and may be called at any time from any thread.
    unsafe { mi_option_set(PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mimalloc_is_chosen_without_an_address_space_limit() {
        let v = vec![1u8; 1 << 20];
        assert_eq!(Allocator::mimalloc(), !address_space_limited());
        assert_eq!(v.iter().map(|&b| u64::from(b)).sum::<u64>(), 1 << 20);
    }

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: reading an option has no preconditions.
        let default = unsafe { mi_option_get(PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(default, 1000, "option {PURGE_DELAY} is not the purge delay");
        }
        keep_freed_pages();
        // SAFETY: as above.
        assert_eq!(unsafe { mi_option_get(PURGE_DELAY) }, -1);
    }
}
