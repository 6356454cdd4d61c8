//! A global allocator that counts the bytes live and their peak, for tests that measure what a
//! run allocates. A test binary installs it with
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;` and measures with [`peak_of`].
//! On ndarray every tensor lives on the heap, so nothing escapes the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, size) };
        if !q.is_null() {
            // Old and new blocks may both be live during the move.
            grew(size);
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        q
    }
}

/// What `run` returns, the bytes live at its end beyond those live before it, and the bytes at
/// its peak beyond those live before it. Counts only where [`Counting`] is the global allocator
/// (otherwise both are 0), and counts every thread: run one measure at a time.
pub fn peak_of<T>(run: impl FnOnce() -> T) -> (T, usize, usize) {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let out = run();
    let (live, peak) = (LIVE.load(Ordering::SeqCst), PEAK.load(Ordering::SeqCst));
    (out, live.saturating_sub(before), peak - before)
}
