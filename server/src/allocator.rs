//! Handing freed memory back to the kernel.
//!
//! glibc's malloc trims only the top of each heap; memory freed below it (ONNX
//! Runtime's copies of the weights after loading, its arena's chunks after a shrink)
//! stays in the process until something is allocated there again. `malloc_trim`
//! gives every free page back, at the cost of walking the heaps: called where a lot
//! was just freed and nothing waits (after loading, when the idle model shrank).

/// Returns the free pages of every malloc heap to the kernel (glibc only; elsewhere
/// nothing).
pub fn return_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the kernel; safe at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
