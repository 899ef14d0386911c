//! Heap allocations counted, not sampled: the bench process's global allocator is the
//! system's, with a count beside it. Unlike CPU time, the count of one batch's allocations
//! is nearly the same in every run (the SDK's buffers vary by a few), so it shows the
//! toolkit's own work per record beside the raw requests' without this machine's noise.
//!
//! Each thread counts in a slot of its own (no cache line shared between the runtime's
//! threads), and [`count`] adds the slots up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// More slots than the bench has threads; threads past them share the last one.
const SLOTS: usize = 64;

#[repr(align(64))]
struct Slot(AtomicU64);

static COUNTS: [Slot; SLOTS] = [const { Slot(AtomicU64::new(0)) }; SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // A constant without a destructor: reading it never allocates, even while the thread
    // ends.
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The system allocator, counting each allocation and reallocation.
pub struct Counting;

fn counted() {
    let slot = MY_SLOT
        .try_with(|slot| {
            if slot.get() == usize::MAX {
                slot.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed).min(SLOTS - 1));
            }
            slot.get()
        })
        .unwrap_or(SLOTS - 1);
    COUNTS[slot].0.fetch_add(1, Ordering::Relaxed);
}

// SAFETY: every call is passed on unchanged to the system allocator; counting touches only
// atomics and a constant thread-local, and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (and reallocations) in this process so far, on every thread.
pub fn count() -> u64 {
    COUNTS
        .iter()
        .map(|slot| slot.0.load(Ordering::Relaxed))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocation_is_counted() {
        let before = count();
        let boxes: Vec<Box<u64>> = (0..100).map(Box::new).collect();
        // 100 boxes and the vector, at least (the test harness may allocate too).
        assert!(count() - before >= 101, "{}", count() - before);
        drop(boxes);
    }
}
