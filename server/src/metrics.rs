//! The server's own counters in Prometheus text format, appended by the HTTP layer to
//! its `/metrics` page: model batches, sequences and tokens, overload rejections,
//! dropped sequences, rerank calls, pairs, batches and latency, the index size, and
//! store calls (latency and errors by operation, for stores reached over a network).

use std::fmt::Write;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::corpus::Corpus;
use crate::rerank::{RerankEngine, RerankStats};
use crate::stats::Stats;

/// Renders `stats`, the rerank engine's and the corpus's size (once loaded).
pub fn render(stats: &Stats, corpus: &OnceLock<Arc<Corpus>>, rerank: &OnceLock<Arc<RerankEngine>>) -> String {
    let mut text = String::new();
    let counters: [(&str, &str, &AtomicU64); 8] = [
        ("embedwire_embed_requests_total", "Embed calls and stream requests that reached the engine", &stats.requests),
        (
            "embedwire_rejected_overload_total",
            "Requests refused with RESOURCE_EXHAUSTED at admission",
            &stats.rejected_overload,
        ),
        ("embedwire_model_batches_total", "Model batches run", &stats.batches),
        ("embedwire_model_sequences_total", "Sequences embedded by the model", &stats.sequences),
        ("embedwire_model_padded_tokens_total", "Tokens fed to the model, padding included", &stats.padded_tokens),
        ("embedwire_model_real_tokens_total", "Tokens fed to the model that were real input", &stats.real_tokens),
        (
            "embedwire_dropped_sequences_total",
            "Sequences dropped because their caller had gone",
            &stats.dropped_sequences,
        ),
        ("embedwire_ingested_documents_total", "Documents stored durably by ingest jobs", &stats.ingested_documents),
    ];
    for (name, help, counter) in counters {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", Stats::get(counter));
    }
    let depth = Stats::get(&stats.queue_depth);
    let _ = writeln!(
        text,
        "# HELP embedwire_queue_depth Sequences waiting for the model when the last batch formed\n# TYPE embedwire_queue_depth gauge\nembedwire_queue_depth {depth}"
    );
    let mut registry = Registry::default();
    registry.register("embedwire_batch_size", "Sequences per model batch", stats.batch_size.clone());
    registry.register("embedwire_batch_tokens", "Tokens per model batch, padding included", stats.batch_tokens.clone());
    registry.register("embedwire_inference_seconds", "Model time per batch", stats.inference_seconds.clone());
    registry.register(
        "embedwire_queue_wait_seconds",
        "Time a sequence waited for its batch",
        stats.queue_wait_seconds.clone(),
    );
    if let Some(rerank) = rerank.get() {
        register_rerank(&mut registry, rerank.stats(), &mut text);
    }
    let store = StoreMetrics::global();
    registry.register(
        "embedwire_store_request_seconds",
        "Time of calls to the store, by store and operation",
        store.seconds.clone(),
    );
    registry.register(
        "embedwire_store_errors",
        "Failed calls to the store, by store and operation",
        store.errors.clone(),
    );
    let mut histograms = String::new();
    if prometheus_client::encoding::text::encode(&mut histograms, &registry).is_ok() {
        text.push_str(histograms.trim_end().trim_end_matches("# EOF"));
    }
    if let Some(corpus) = corpus.get() {
        let view = corpus.view_counts();
        let gauges = [
            ("embedwire_index_documents", "Documents in the index", view.documents),
            ("embedwire_index_chunks", "Chunks in the index", view.chunks),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
        }
    }
    text
}

/// The rerank engine's counters (into `text`) and histograms (into `registry`).
/// Names as the embedding model's with `rerank` in them; the cross-encoder's batch
/// histograms stay empty with the bi-encoder, whose batches are the embedding model's.
fn register_rerank(registry: &mut Registry, stats: &RerankStats, text: &mut String) {
    let counters: [(&str, &str, &AtomicU64); 5] = [
        (
            "embedwire_rerank_requests_total",
            "Rerank calls and stream requests that reached the engine",
            &stats.requests,
        ),
        ("embedwire_rerank_pairs_total", "(query, text) pairs scored", &stats.pairs),
        (
            "embedwire_rerank_rejected_overload_total",
            "Rerank calls refused with RESOURCE_EXHAUSTED at admission",
            &stats.rejected_overload,
        ),
        ("embedwire_rerank_batches_total", "Cross-encoder batches run", &stats.batches.batches),
        (
            "embedwire_rerank_dropped_pairs_total",
            "Pairs dropped before the cross-encoder because their caller had gone",
            &stats.batches.dropped_sequences,
        ),
    ];
    for (name, help, counter) in counters {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", RerankStats::get(counter));
    }
    registry.register("embedwire_rerank_pairs_per_request", "Pairs per rerank call", stats.pairs_per_request.clone());
    registry.register(
        "embedwire_rerank_request_seconds",
        "Time of a rerank call in the engine",
        stats.request_seconds.clone(),
    );
    registry.register("embedwire_rerank_batch_size", "Pairs per cross-encoder batch", stats.batches.batch_size.clone());
    registry.register(
        "embedwire_rerank_batch_tokens",
        "Tokens per cross-encoder batch, padding included",
        stats.batches.batch_tokens.clone(),
    );
    registry.register(
        "embedwire_rerank_inference_seconds",
        "Cross-encoder time per batch",
        stats.batches.inference_seconds.clone(),
    );
    registry.register(
        "embedwire_rerank_queue_wait_seconds",
        "Time a pair waited for its cross-encoder batch",
        stats.batches.queue_wait_seconds.clone(),
    );
}

/// Labels of a store call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreCall {
    pub store: &'static str,
    pub operation: &'static str,
}

/// Latency and failures of calls to a store over the network, by operation.
/// Process-wide: a server has one store.
pub struct StoreMetrics {
    seconds: Family<StoreCall, Histogram>,
    errors: Family<StoreCall, Counter>,
}

impl StoreMetrics {
    /// The process's store metrics.
    pub fn global() -> &'static StoreMetrics {
        static METRICS: OnceLock<StoreMetrics> = OnceLock::new();
        METRICS.get_or_init(|| StoreMetrics {
            // 0.1 ms to ~13 s.
            seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            errors: Family::default(),
        })
    }

    /// Records one call of `operation` to the Weaviate store.
    pub fn observe(&self, operation: &'static str, elapsed: Duration, ok: bool) {
        let labels = StoreCall { store: "weaviate", operation };
        self.seconds.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
    }
}
