//! Counters of what the server did, shared by the batcher, the engine and the
//! services. Tests read them to see work the wire does not show (dropped sequences,
//! batch sizes); the metrics endpoint exports them.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::histogram::Histogram;

/// Counters and histograms; every field counts since the server started.
#[derive(Debug)]
pub struct Stats {
    /// Embed calls (and stream requests) that reached the engine.
    pub requests: AtomicU64,
    /// Requests refused with RESOURCE_EXHAUSTED for load (admission).
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
    /// Sequences waiting for the model when the last batch was formed.
    pub queue_depth: AtomicU64,
    /// Times the idle model gave its memory back (ONNX Runtime's arena, after a large batch).
    pub idle_memory_releases: AtomicU64,
    /// Batches run as chunks side by side (each counts once in `batches`).
    pub split_batches: AtomicU64,
    /// Sessions loaded to run the parts of a split batch (they load after the server
    /// serves; 0 until then, and when batches always run whole).
    pub batch_part_sessions: AtomicU64,
    /// Documents stored durably by ingest jobs.
    pub ingested_documents: AtomicU64,
    /// Interactive calls queued or running, under the default admission rule.
    pub interactive_calls: AtomicU64,
    /// The admission bound in force, set once the model has loaded: interactive calls
    /// at once (the default rule), 0 when another rule is in force.
    pub admission_max_interactive_calls: AtomicU64,
    /// The queue-time bound in force (`--max-queue-ms`), in ms; 0 when not in force.
    pub admission_max_queue_ms: AtomicU64,
    /// Interactive calls the admission bound refused: the model thread's sign of
    /// overload (it stops waiting for company then, see `batcher`).
    pub interactive_refusals: AtomicU64,
    /// Sequences per model batch.
    pub batch_size: Histogram,
    /// Tokens per model batch, padding included.
    pub batch_tokens: Histogram,
    /// Seconds the model took per batch.
    pub inference_seconds: Histogram,
    /// Seconds a sequence waited in the queue before its batch started.
    pub queue_wait_seconds: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        let seconds = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];
        Stats {
            requests: AtomicU64::default(),
            rejected_overload: AtomicU64::default(),
            batches: AtomicU64::default(),
            sequences: AtomicU64::default(),
            padded_tokens: AtomicU64::default(),
            real_tokens: AtomicU64::default(),
            dropped_sequences: AtomicU64::default(),
            queue_depth: AtomicU64::default(),
            idle_memory_releases: AtomicU64::default(),
            split_batches: AtomicU64::default(),
            batch_part_sessions: AtomicU64::default(),
            ingested_documents: AtomicU64::default(),
            interactive_calls: AtomicU64::default(),
            admission_max_interactive_calls: AtomicU64::default(),
            admission_max_queue_ms: AtomicU64::default(),
            interactive_refusals: AtomicU64::default(),
            batch_size: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]),
            batch_tokens: Histogram::new([64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0]),
            inference_seconds: Histogram::new(seconds),
            queue_wait_seconds: Histogram::new(seconds),
        }
    }
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
