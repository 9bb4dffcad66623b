//! The models' threads run at a lower CPU priority (a higher nice value) than the
//! threads that handle requests (`--model-nice`).
//!
//! On a machine whose cores the model keeps busy, a request handler that wakes (a
//! refusal to answer, an answer to send, a call to queue) otherwise waits for a model
//! thread's time slice, and under an open loop past capacity those are a thousand
//! small jobs a second. At a lower priority the model yields the core to them at once
//! and gets back all the CPU they leave. Measured on 2 cores, `embedwire-bench
//! overload`: refusals answered in 3.5-3.9 ms p99 against 5.5-5.6 ms at the server's
//! own priority, goodput alike; 16 callers of `POST /v1/search` alike (464 against 452
//! requests/s, 5 alternating pairs).
//!
//! Linux keeps a nice value per thread, and a thread starts with its creator's. Raising
//! one's own needs no privilege, lowering it back would; so a model is loaded on a
//! thread of its own that raises its nice value first, and every thread of the model
//! starts from it and inherits the value: ONNX Runtime's intra-op threads (started
//! with the session), the model thread, and the threads of split batches.

/// Runs `load` on a new thread whose nice value is `increment` above the caller's, and
/// returns what it returns. A priority that cannot be changed only stays as it was.
pub fn on_lowered_thread<T: Send>(increment: i32, load: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        // Starting a thread fails only when the process can start none, which no
        // server survives: std's panic says so.
        let loader = scope.spawn(|| {
            lower_this_thread(increment);
            load()
        });
        loader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Adds `increment` to the calling thread's nice value (at most 19, the lowest priority).
fn lower_this_thread(increment: i32) {
    if increment <= 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscalls about the calling thread, by its own id; errno is
        // this thread's, cleared first because -1 is also a valid priority.
        let changed = unsafe {
            let tid = libc::gettid() as libc::id_t;
            *libc::__errno_location() = 0;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            let unknown = now == -1 && *libc::__errno_location() != 0;
            !unknown && libc::setpriority(libc::PRIO_PROCESS, tid, (now + increment).min(19)) == 0
        };
        if !changed {
            tracing::warn!(error = %std::io::Error::last_os_error(), "the model's threads keep the server's priority");
        }
    }
}

/// The calling thread's nice value.
#[cfg(all(test, target_os = "linux"))]
fn nice_of_this_thread() -> i32 {
    // SAFETY: as above.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_loader_and_the_threads_it_starts_run_lower_and_the_caller_stays() {
        let before = nice_of_this_thread();
        let (loader, started) = on_lowered_thread(3, || {
            let started = std::thread::spawn(nice_of_this_thread).join().unwrap();
            (nice_of_this_thread(), started)
        });
        assert_eq!(loader, (before + 3).min(19));
        assert_eq!(started, loader, "a thread the loader starts inherits its priority");
        assert_eq!(nice_of_this_thread(), before, "the caller's priority is untouched");
        assert_eq!(on_lowered_thread(0, nice_of_this_thread), before, "0 leaves it as it is");
    }
}
