//! What the rerank service did, for `/metrics`: calls, pairs, refusals and latency
//! here; the cross-encoder's batches (sizes, tokens, model time) in the batcher's own
//! [`Stats`], kept apart from the embedding model's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::histogram::Histogram;

use crate::stats::Stats;

/// Counters and histograms; every field counts since the server started.
#[derive(Debug)]
pub struct RerankStats {
    /// Rerank calls (and stream requests) that reached the engine.
    pub requests: AtomicU64,
    /// (query, text) pairs scored.
    pub pairs: AtomicU64,
    /// Calls refused with RESOURCE_EXHAUSTED at admission.
    pub rejected_overload: AtomicU64,
    /// Pairs per call.
    pub pairs_per_request: Histogram,
    /// Seconds from a call's arrival at the engine to its answer.
    pub request_seconds: Histogram,
    /// The cross-encoder's batcher counters (batch sizes, tokens, model time);
    /// unused with the bi-encoder, whose work the embedding model's counters show.
    pub batches: Arc<Stats>,
}

impl Default for RerankStats {
    fn default() -> Self {
        RerankStats {
            requests: AtomicU64::default(),
            pairs: AtomicU64::default(),
            rejected_overload: AtomicU64::default(),
            pairs_per_request: Histogram::new([1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]),
            request_seconds: Histogram::new([
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
            ]),
            batches: Arc::new(Stats::default()),
        }
    }
}

impl RerankStats {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
