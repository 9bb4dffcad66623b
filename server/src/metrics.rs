//! The server's own counters in Prometheus text format, appended by the HTTP layer to
//! its `/metrics` page: model batches, sequences and tokens, overload rejections,
//! dropped sequences, and the index size.

use std::fmt::Write;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::registry::Registry;

use crate::corpus::Corpus;
use crate::stats::Stats;

/// Renders `stats` and the corpus's size (once it is open).
pub fn render(stats: &Stats, corpus: &OnceLock<Arc<Corpus>>) -> String {
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
