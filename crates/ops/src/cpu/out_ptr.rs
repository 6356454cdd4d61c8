//! The output of a parallel CPU product, shared by its tasks, each of which writes only its own
//! columns (the kernels that take it say which).

/// The output's start.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(*mut f32);

// SAFETY: tasks write disjoint parts of the output (each kernel's driver gives every task its own
// columns), and the output outlives them (they run inside the driver's call).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The output `out`, to be written by tasks that each own some of its columns.
    pub(crate) fn new(out: &mut [f32]) -> Self {
        OutPtr(out.as_mut_ptr())
    }

    /// # Safety
    /// `offset` is within the output.
    pub(crate) unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller's.
        unsafe { self.0.add(offset) }
    }
}
