//! Sharing an output buffer between pool tasks that write disjoint parts of it.

/// A raw pointer that tasks may share; each task must write only its own elements.
pub(crate) struct SyncPtr<T>(pub *mut T);

// Manual impls: a derive would require `T: Copy`, but copying the pointer never copies a `T`.
impl<T> Clone for SyncPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SyncPtr<T> {}

// SAFETY: users guarantee tasks touch disjoint elements, and the pool joins all tasks
// before the borrow the pointer came from ends.
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    pub fn new(s: &mut [T]) -> Self {
        Self(s.as_mut_ptr())
    }

    /// # Safety
    /// `start..start+len` must be in bounds of the original slice and not aliased by any
    /// other task while the returned slice lives.
    pub unsafe fn slice_mut<'a>(self, start: usize, len: usize) -> &'a mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }

    /// # Safety
    /// `i` must be in bounds and written by one task only.
    pub unsafe fn write(self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
}
