//! The `tessera` command's allocator: the system allocator, except that a
//! large zeroed allocation is written with zeros instead of being left to
//! the kernel's shared zero page.
//!
//! The C library hands out fresh pages for a large `calloc` untouched, and
//! Arrow asks for zeroed buffers that it then reads before it writes them
//! (validity bitmaps set bit by bit, hash tables' chains). The first read
//! maps the zero page; the first write then copies it (a copy-on-write
//! fault), and replacing a mapping that another core may have cached means
//! flushing that core's TLB with an inter-processor interrupt, for every
//! 4 KiB page. On a 2-core virtual machine, where each such interrupt leaves
//! the guest, these flushes took 43% of TPC-H q04's samples (`perf`:
//! `do_wp_page` -> `flush_tlb_mm_range` -> `x2apic_send_IPI`), and its
//! system time was 0.45-0.53 s against 0.31-0.39 s of user time. Writing
//! the zeros first makes every first touch a write: one fault per page that
//! allocates it, no zero page and no flush.

use std::alloc::{GlobalAlloc, Layout, System};

/// Zeroed allocations from this size on are written by [`Allocator`];
/// smaller ones come from the C library's heap, mostly from reused memory.
const WRITE_ZEROS_FROM: usize = 64 << 10;

/// The allocator (see the module).
pub struct Allocator;

// SAFETY: every method forwards to `System` with the caller's arguments,
// so the `GlobalAlloc` contract holds as it does for `System`; the one
// addition, filling a block that `System.alloc` returned for `layout`,
// writes only the `layout.size()` bytes that block owns.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from `System`,
        // with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() < WRITE_ZEROS_FROM {
            // SAFETY: the caller's contract for `alloc_zeroed` is `System`'s.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            // SAFETY: `ptr` is a fresh, writable block of `layout.size()`
            // bytes.
            unsafe { std::ptr::write_bytes(ptr, 0, layout.size()) };
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`, and the caller
        // upholds `realloc`'s contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_zeroed_blocks_are_zero_and_usable() {
        for size in [16, WRITE_ZEROS_FROM - 1, WRITE_ZEROS_FROM, 3 << 20] {
            let layout = Layout::from_size_align(size, 64).expect("layout");
            // SAFETY: a non-zero size; the block is freed with its layout.
            unsafe {
                let p = Allocator.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % 64, 0);
                let block = std::slice::from_raw_parts_mut(p, size);
                assert!(block.iter().all(|&b| b == 0), "size {size}");
                block.fill(7);
                let q = Allocator.realloc(p, layout, size * 2);
                assert!(!q.is_null());
                assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 7));
                Allocator.dealloc(q, Layout::from_size_align(size * 2, 64).expect("layout"));
            }
        }
    }
}
