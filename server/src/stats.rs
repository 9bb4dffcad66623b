//! Counters of what the server did, shared by the batcher, the engine and the
//! services. Tests read them to see work the wire does not show (dropped sequences,
//! batch sizes); the metrics endpoint exports them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic counters; every field counts since the server started.
#[derive(Debug, Default)]
pub struct Stats {
    /// Embed calls (and stream requests) that reached the engine.
    pub requests: AtomicU64,
    /// Requests refused with RESOURCE_EXHAUSTED because too many inputs were in flight.
    pub rejected_overload: AtomicU64,
    /// Model batches run.
    pub batches: AtomicU64,
    /// Sequences embedded by the model.
    pub sequences: AtomicU64,
    /// Tokens fed to the model, padding included.
    pub padded_tokens: AtomicU64,
    /// Tokens fed to the model that were real input.
    pub real_tokens: AtomicU64,
    /// Sequences dropped before reaching the model because their caller had gone.
    pub dropped_sequences: AtomicU64,
}

impl Stats {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
