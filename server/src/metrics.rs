//! The server's own metrics on the `/metrics` page: model batches, sequences and
//! tokens, overload rejections, dropped sequences, rerank calls, pairs, batches and
//! latency, the index size, and store calls (latency and errors by operation, for
//! stores reached over a network).
//!
//! [`ServerMetrics`] is a prometheus-client collector that the server registers in the
//! HTTP layer's registry, so the whole page is one encoding. It reads the [`Stats`]
//! atomics at scrape time, which leaves the hot path a relaxed `fetch_add`, and it
//! shows the rerank engine's and the index's metrics once they have loaded.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::collections::Collections;
use crate::corpus::Corpus;
use crate::rerank::{RerankEngine, RerankStats};
use crate::stats::Stats;
use crate::store::CountAccuracy;

/// A metric as the collector encodes it: its name (prometheus-client adds `_total`
/// to counters), its help and its current value.
type Described<'a> = (&'static str, &'static str, &'a dyn EncodeMetric);

/// The server's metrics, read from its counters when `/metrics` is scraped.
pub struct ServerMetrics {
    stats: Arc<Stats>,
    /// Filled once the index has loaded; its size is shown from then on.
    corpus: Arc<OnceLock<Arc<Corpus>>>,
    /// Filled once the rerank engine has loaded; its metrics are shown from then on.
    rerank: Arc<OnceLock<Arc<RerankEngine>>>,
    /// Filled once the index has loaded: how many named collections, how many open.
    collections: Arc<OnceLock<Arc<Collections>>>,
}

impl ServerMetrics {
    pub fn new(
        stats: Arc<Stats>,
        corpus: Arc<OnceLock<Arc<Corpus>>>,
        rerank: Arc<OnceLock<Arc<RerankEngine>>>,
        collections: Arc<OnceLock<Arc<Collections>>>,
    ) -> Self {
        ServerMetrics { stats, corpus, rerank, collections }
    }
}

impl fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerMetrics")
    }
}

impl Collector for ServerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let stats = &self.stats;
        let counter = |value: &AtomicU64| ConstCounter::new(Stats::get(value));
        let embedding: [Described; 19] = [
            (
                "embedwire_embed_requests",
                "Embed calls and stream requests that reached the engine",
                &counter(&stats.requests),
            ),
            (
                "embedwire_rejected_overload",
                "Requests refused with RESOURCE_EXHAUSTED at admission",
                &counter(&stats.rejected_overload),
            ),
            ("embedwire_model_batches", "Model batches run", &counter(&stats.batches)),
            ("embedwire_model_sequences", "Sequences embedded by the model", &counter(&stats.sequences)),
            (
                "embedwire_model_padded_tokens",
                "Tokens fed to the model, padding included",
                &counter(&stats.padded_tokens),
            ),
            (
                "embedwire_model_real_tokens",
                "Tokens fed to the model that were real input",
                &counter(&stats.real_tokens),
            ),
            (
                "embedwire_dropped_sequences",
                "Sequences dropped because their caller had gone",
                &counter(&stats.dropped_sequences),
            ),
            (
                "embedwire_model_idle_memory_releases",
                "Times the idle model gave its memory back (ONNX Runtime's arena, after a large batch)",
                &counter(&stats.idle_memory_releases),
            ),
            (
                "embedwire_split_batches",
                "Batches run as chunks side by side, one thread per part session (each counts once in embedwire_model_batches)",
                &counter(&stats.split_batches),
            ),
            (
                "embedwire_ingested_documents",
                "Documents stored durably by ingest jobs",
                &counter(&stats.ingested_documents),
            ),
            (
                "embedwire_queue_depth",
                "Sequences waiting for the model when the last batch formed",
                &ConstGauge::new(Stats::get(&stats.queue_depth)),
            ),
            (
                "embedwire_batch_part_sessions",
                "Sessions loaded to run a large batch as parts side by side (0 while they load after start)",
                &ConstGauge::new(Stats::get(&stats.batch_part_sessions)),
            ),
            (
                "embedwire_interactive_calls",
                "Interactive calls (queries, Embed calls of at most 8 inputs) queued or running",
                &ConstGauge::new(Stats::get(&stats.interactive_calls)),
            ),
            (
                "embedwire_admission_max_interactive_calls",
                "The admission bound in force: interactive calls at once before RESOURCE_EXHAUSTED (0: another rule)",
                &ConstGauge::new(Stats::get(&stats.admission_max_interactive_calls)),
            ),
            (
                "embedwire_admission_max_queue_ms",
                "The queue-time bound in force (--max-queue-ms), in ms (0: not in force)",
                &ConstGauge::new(Stats::get(&stats.admission_max_queue_ms)),
            ),
            ("embedwire_batch_size", "Sequences per model batch", &stats.batch_size),
            ("embedwire_batch_tokens", "Tokens per model batch, padding included", &stats.batch_tokens),
            ("embedwire_inference_seconds", "Model time per batch", &stats.inference_seconds),
            ("embedwire_queue_wait_seconds", "Time a sequence waited for its batch", &stats.queue_wait_seconds),
        ];
        encode_all(&mut encoder, &embedding)?;
        if let Some(rerank) = self.rerank.get() {
            encode_rerank(&mut encoder, rerank.stats())?;
        }
        let store = StoreMetrics::global();
        encode_all(
            &mut encoder,
            &[
                (
                    "embedwire_store_request_seconds",
                    "Time of calls to the store, by store and operation",
                    &store.seconds,
                ),
                ("embedwire_store_errors", "Failed calls to the store, by store and operation", &store.errors),
            ],
        )?;
        if let Some(collections) = self.collections.get() {
            let (named, open) = collections.counts();
            encode_all(
                &mut encoder,
                &[
                    (
                        "embedwire_collections",
                        "Named collections (the default one not counted)",
                        &ConstGauge::new(named),
                    ),
                    (
                        "embedwire_collections_open",
                        "Named collections open (used since the start, or resuming unfinished jobs)",
                        &ConstGauge::new(open),
                    ),
                ],
            )?;
        }
        if let Some(corpus) = self.corpus.get() {
            let view = corpus.view_counts();
            // A count the store cannot vouch for now is left out rather than exported
            // as current (a graph shows a gap, not a false value); the age says how
            // long since the counts were last exact.
            let exact = view.accuracy.is_exact();
            encode_all(
                &mut encoder,
                &[(
                    "embedwire_index_counts_exact",
                    "Whether the index's document and chunk counts are exact now (0: a store node is missing, \
                     its nodes disagree or counting failed; see /healthz)",
                    &ConstGauge::new(i64::from(exact)),
                )],
            )?;
            if let CountAccuracy::LastExact { counted_at, .. } = &view.accuracy {
                encode_all(
                    &mut encoder,
                    &[(
                        "embedwire_index_counts_age_seconds",
                        "Seconds since the index's counts were last exact, while they are not",
                        &ConstGauge::new(counted_at.elapsed().as_secs_f64()),
                    )],
                )?;
            }
            if exact {
                encode_all(
                    &mut encoder,
                    &[
                        ("embedwire_index_documents", "Documents in the index", &ConstGauge::new(view.documents)),
                        ("embedwire_index_chunks", "Chunks in the index", &ConstGauge::new(view.chunks)),
                    ],
                )?;
            }
            if let Some(hnsw) = corpus.hnsw_search() {
                encode_all(
                    &mut encoder,
                    &[(
                        "embedwire_hnsw_ef_search",
                        "The HNSW index's search width in force (picked by measured recall unless --hnsw-ef-search)",
                        &ConstGauge::new(hnsw.ef_search as i64),
                    )],
                )?;
                if let Some(recall) = hnsw.estimated_recall {
                    encode_all(
                        &mut encoder,
                        &[(
                            "embedwire_hnsw_estimated_recall",
                            "Recall@10 of the HNSW index at its search width, measured on recent queries or, \
                             before it answered enough, on its own vectors",
                            &ConstGauge::new(recall),
                        )],
                    )?;
                    let on_queries = hnsw.probe == Some(crate::index::recall::Probe::RecentQueries);
                    encode_all(
                        &mut encoder,
                        &[(
                            "embedwire_hnsw_recall_measured_on_queries",
                            "1 when the estimated recall was measured on the index's last 200 queries, 0 on its own \
                             vectors",
                            &ConstGauge::new(i64::from(on_queries)),
                        )],
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// The rerank engine's metrics: names as the embedding model's with `rerank` in them.
/// The cross-encoder's batch histograms stay empty with the bi-encoder, whose batches
/// are the embedding model's.
fn encode_rerank(encoder: &mut DescriptorEncoder, stats: &RerankStats) -> fmt::Result {
    let counter = |value: &AtomicU64| ConstCounter::new(RerankStats::get(value));
    let batches = &stats.batches;
    encode_all(
        encoder,
        &[
            (
                "embedwire_rerank_requests",
                "Rerank calls and stream requests that reached the engine",
                &counter(&stats.requests),
            ),
            ("embedwire_rerank_pairs", "(query, text) pairs scored", &counter(&stats.pairs)),
            (
                "embedwire_rerank_rejected_overload",
                "Rerank calls refused with RESOURCE_EXHAUSTED at admission",
                &counter(&stats.rejected_overload),
            ),
            (
                "embedwire_rerank_interactive_calls",
                "Unary rerank calls queued or running on the cross-encoder",
                &ConstGauge::new(Stats::get(&batches.interactive_calls)),
            ),
            (
                "embedwire_rerank_admission_max_calls",
                "The cross-encoder's admission bound: unary calls at once before RESOURCE_EXHAUSTED (0: another rule, or no cross-encoder)",
                &ConstGauge::new(Stats::get(&batches.admission_max_interactive_calls)),
            ),
            (
                "embedwire_rerank_admission_max_queue_ms",
                "The cross-encoder's queue-time bound (--max-queue-ms), in ms (0: not in force)",
                &ConstGauge::new(Stats::get(&batches.admission_max_queue_ms)),
            ),
            ("embedwire_rerank_batches", "Cross-encoder batches run", &counter(&batches.batches)),
            (
                "embedwire_rerank_dropped_pairs",
                "Pairs dropped before the cross-encoder because their caller had gone",
                &counter(&batches.dropped_sequences),
            ),
            ("embedwire_rerank_pairs_per_request", "Pairs per rerank call", &stats.pairs_per_request),
            ("embedwire_rerank_request_seconds", "Time of a rerank call in the engine", &stats.request_seconds),
            ("embedwire_rerank_batch_size", "Pairs per cross-encoder batch", &batches.batch_size),
            (
                "embedwire_rerank_batch_tokens",
                "Tokens per cross-encoder batch, padding included",
                &batches.batch_tokens,
            ),
            ("embedwire_rerank_inference_seconds", "Cross-encoder time per batch", &batches.inference_seconds),
            (
                "embedwire_rerank_queue_wait_seconds",
                "Time a pair waited for its cross-encoder batch",
                &batches.queue_wait_seconds,
            ),
        ],
    )
}

/// Encodes `metrics`, leaving out empty ones as a `Registry` does (a labelled family
/// that nothing has used yet, like the store's with the embedded store).
fn encode_all(encoder: &mut DescriptorEncoder, metrics: &[Described]) -> fmt::Result {
    for (name, help, metric) in metrics.iter().filter(|(_, _, metric)| !metric.is_empty()) {
        metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
    }
    Ok(())
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

    /// Records one call of `operation` to `store` ("weaviate", "postgres").
    pub fn observe(&self, store: &'static str, operation: &'static str, elapsed: Duration, ok: bool) {
        let labels = StoreCall { store, operation };
        self.seconds.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
    }
}
