//! Puts the server together: loads the backend in the background while health says
//! NOT_SERVING, serves gRPC (with gRPC-web, health and reflection) on an already
//! bound listener, and shuts down gracefully.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use embedwire_gateway_http::access::{AccessLayer, AccessPolicy};
use embedwire_gateway_http::metrics::{GrpcMetricsLayer, HttpMetrics};
use embedwire_gateway_http::{GatewaySettings, InProcessUpstream, Readiness};
use embedwire_proto::v1::collection_service_server::CollectionServiceServer;
use embedwire_proto::v1::embed_service_server::EmbedServiceServer;
use embedwire_proto::v1::rerank_service_server::RerankServiceServer;
use embedwire_proto::v1::search_service_server::SearchServiceServer;
use futures::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::backend::local::{LocalBackend, LocalModelConfig};
use crate::backend::{Backend, RemoteBackend};
use crate::batcher::BatchLimits;
use crate::collections::embedded_places::EmbeddedPlaces;
use crate::collections::postgres_places::PostgresPlaces;
use crate::collections::weaviate_places::WeaviatePlaces;
use crate::collections::{CollectionPlaces, Collections, CorpusParts};
use crate::config::{BackendKind, IndexChoice, ServerConfig, StoreChoice};
use crate::corpus::chunker::ChunkSettings;
use crate::corpus::{Corpus, CorpusSettings};
use crate::engine::{EmbeddingEngine, RequestLimits};
use crate::error::{Error, Result};
use crate::index::{IndexKind, IndexParams};
use crate::lanes::QueueBound;
use crate::metrics::ServerMetrics;
use crate::model::cross_encoder::CrossEncoder;
use crate::model::files::ModelFiles;
use crate::model::onnx::init_runtime;
use crate::model::pseudo::PseudoModel;
use crate::model::{ModelInfo, Pooling, Precision};
use crate::rerank::{BiEncoderScorer, CrossEncoderScorer, RerankEngine, RerankLimits, RerankStats, Scorer};
use crate::service::collections::CollectionApi;
use crate::service::embed::{EmbedApi, EmbedApiSettings};
use crate::service::embed_zero_copy::{MessageLimits, ZeroCopyEmbedService};
use crate::service::rerank::RerankApi;
use crate::service::search::SearchApi;
use crate::stats::Stats;
use crate::store::CorpusStore;
use crate::store::embedded::{EmbeddedSettings, EmbeddedStore};
use crate::store::postgres::{PostgresSettings, PostgresStore};
use crate::store::weaviate::{WeaviateSettings, WeaviateStore};
use crate::wire;

/// The gRPC service names health reports on (besides the overall "" entry).
const SERVICE_NAMES: [&str; 4] = [
    "embedwire.v1.EmbedService",
    "embedwire.v1.SearchService",
    "embedwire.v1.RerankService",
    "embedwire.v1.CollectionService",
];

/// A configured server, ready to serve on a listener.
pub struct EmbedServer {
    config: ServerConfig,
    engine: Arc<EmbeddingEngine>,
    /// Set once the backend is loaded and the store opened.
    corpus: Arc<OnceLock<Arc<Corpus>>>,
    /// Set with the corpus: the default collection and the named ones.
    collections: Arc<OnceLock<Arc<Collections>>>,
    /// Set once the backend (and the cross-encoder, if any) is loaded.
    rerank: Arc<OnceLock<Arc<RerankEngine>>>,
    /// API keys and rate limits, checked before any route.
    access: AccessPolicy,
    /// Set when the port serves TLS.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl EmbedServer {
    /// Checks the configuration (and, for the onnx backend, that the model files are
    /// there) so that a broken setup fails before the server listens.
    pub fn new(config: ServerConfig) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        if config.backend == BackendKind::Onnx {
            LocalBackend::check_files(&local_model_config(&config))?;
        }
        let limits = RequestLimits {
            max_inputs_per_request: config.max_inputs_per_request,
            max_input_chars: config.max_input_chars,
            max_in_flight_inputs: config.max_in_flight_inputs,
        };
        let engine = Arc::new(EmbeddingEngine::new(limits, Arc::new(Stats::default())));
        let access = config.access_policy().map_err(Error::Config)?;
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::acceptor(cert, key)?),
            _ => None,
        };
        Ok(EmbedServer {
            config,
            engine,
            corpus: Arc::new(OnceLock::new()),
            collections: Arc::new(OnceLock::new()),
            rerank: Arc::new(OnceLock::new()),
            access,
            tls,
        })
    }

    /// The engine, for in-process callers (the HTTP layer, tests reading counters).
    pub fn engine(&self) -> Arc<EmbeddingEngine> {
        self.engine.clone()
    }

    /// The corpus cell, filled once the server is ready.
    pub fn corpus(&self) -> Arc<OnceLock<Arc<Corpus>>> {
        self.corpus.clone()
    }

    /// The rerank engine cell, filled once the server is ready.
    pub fn rerank(&self) -> Arc<OnceLock<Arc<RerankEngine>>> {
        self.rerank.clone()
    }

    /// Serves until `shutdown` resolves, then stops accepting work and gives in-flight
    /// requests up to the grace period to finish. Fails if the backend cannot load.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let EmbedServer { config, engine, corpus, collections, rerank, access, tls } = self;
        let (health, health_service) = tonic_health::server::health_reporter();
        set_health(&health, ServingStatus::NotServing).await;

        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(embedwire_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| Error::Config(format!("reflection: {e}")))?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(embedwire_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .map_err(|e| Error::Config(format!("reflection: {e}")))?;

        let api = Arc::new(EmbedApi::new(
            engine.clone(),
            EmbedApiSettings {
                backend_name: config.backend.name(),
                batch: (config.max_batch_size, config.max_batch_tokens),
                max_request_bytes: config.max_request_bytes,
                stream_read_ahead: config.stream_read_ahead,
            },
            corpus.clone(),
            rerank.clone(),
        ));
        let search_api = Arc::new(SearchApi::new(collections.clone()));
        let collection_api = Arc::new(CollectionApi::new(collections.clone()));
        let collection_service = CollectionServiceServer::from_arc(collection_api.clone());
        let rerank_api = Arc::new(RerankApi::new(rerank.clone(), config.stream_read_ahead));
        let mut metrics = HttpMetrics::default();
        metrics.register_collector(Box::new(ServerMetrics::new(
            engine.stats().clone(),
            corpus.clone(),
            rerank.clone(),
            collections.clone(),
        )));
        let metrics = Arc::new(metrics);
        let store_healthy = Arc::new(AtomicBool::new(true));
        let http_routes = http_routes(
            &config,
            Handlers {
                embed: api.clone(),
                search: search_api.clone(),
                rerank: rerank_api.clone(),
                collections: collection_api,
            },
            corpus.clone(),
            store_healthy.clone(),
            metrics.clone(),
        );
        let embed_service = ZeroCopyEmbedService::new(
            api.clone(),
            EmbedServiceServer::from_arc(api)
                .max_decoding_message_size(config.max_request_bytes)
                .max_encoding_message_size(config.max_response_bytes),
            MessageLimits {
                max_request_bytes: config.max_request_bytes,
                max_response_bytes: config.max_response_bytes,
            },
        );
        let search_service = SearchServiceServer::from_arc(search_api)
            .max_decoding_message_size(config.max_request_bytes)
            .max_encoding_message_size(config.max_response_bytes);
        let rerank_service = RerankServiceServer::from_arc(rerank_api)
            .max_decoding_message_size(config.max_request_bytes)
            .max_encoding_message_size(config.max_response_bytes);

        let (draining_tx, mut draining_rx) = watch::channel(false);
        let runner_shutdown = draining_rx.clone();
        let drain_health = health.clone();
        let signal = async move {
            shutdown.await;
            tracing::info!("shutting down: refusing new connections, finishing in-flight requests");
            set_health(&drain_health, ServingStatus::NotServing).await;
            let _ = draining_tx.send(true);
        };

        let mut builder = Server::builder()
            .accept_http1(true)
            .max_concurrent_streams(config.max_concurrent_streams)
            // What clients may send us; the frames we send are sized by their setting.
            .max_frame_size(embedwire_proto::transport::MAX_FRAME_SIZE)
            .http2_keepalive_interval(Some(Duration::from_secs(config.http2_keepalive_secs)))
            .http2_keepalive_timeout(Some(Duration::from_secs(config.http2_keepalive_secs)));
        if let Some(timeout) = config.request_timeout_secs {
            builder = builder.timeout(Duration::from_secs_f64(timeout));
        }
        if let Some(age) = config.max_connection_age_secs {
            builder = builder.max_connection_age(Duration::from_secs(age));
        }
        let router = builder
            .layer(GrpcMetricsLayer::new(metrics))
            // No protocol and no route gets past without the key it needs.
            .layer(AccessLayer::new(access))
            .layer(crate::web_dispatch::GrpcWebDispatchLayer)
            .layer(tower::util::MapResponseLayer::new(rewrite_oversized_status))
            // HTTP/JSON routes (/v1/*, /embed, /healthz, ...) share the port: gRPC
            // methods live under /embedwire.v1.*/ and /grpc.*/ paths, which they never use.
            .add_routes(http_routes)
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(embed_service)
            .add_service(search_service)
            .add_service(collection_service)
            .add_service(rerank_service);
        let serving = match tls {
            Some(acceptor) => {
                router.serve_with_incoming_shutdown(crate::tls::incoming(listener, acceptor), signal).boxed()
            }
            // Nagle's algorithm would hold small responses back for the peer's delayed
            // ACK (~40 ms); Server::tcp_nodelay only covers listeners tonic binds itself.
            None => router
                .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), signal)
                .boxed(),
        };

        let grace = config.shutdown_grace();
        let grace_expired = async move {
            let _ = draining_rx.wait_for(|draining| *draining).await;
            tokio::time::sleep(grace).await;
        };
        let cells = Cells { corpus, collections: collections.clone(), rerank };
        let loading = load_and_install(config, engine.clone(), cells, health.clone(), store_healthy, runner_shutdown);

        tokio::pin!(serving, grace_expired, loading);
        let mut job_runner = None;
        let outcome = loop {
            tokio::select! {
                result = &mut serving => {
                    break result.map_err(|e| Error::Config(format!("server: {e}")));
                }
                () = &mut grace_expired => {
                    tracing::warn!(grace_secs = grace.as_secs(), "grace period over; dropping unfinished requests");
                    break Ok(());
                }
                result = &mut loading, if job_runner.is_none() => {
                    job_runner = Some(result?);
                }
            }
        };
        // The runner stops after its current commit; nothing half-written is left.
        if let Some(runner) = job_runner {
            let _ = runner.await;
        }
        if let Some(collections) = collections.get() {
            collections.stop().await;
        }
        outcome
    }
}

/// The gRPC handler objects the HTTP layer calls too.
struct Handlers {
    embed: Arc<EmbedApi>,
    search: Arc<SearchApi>,
    rerank: Arc<RerankApi>,
    collections: Arc<CollectionApi>,
}

/// What loading fills in.
struct Cells {
    corpus: Arc<OnceLock<Arc<Corpus>>>,
    collections: Arc<OnceLock<Arc<Collections>>>,
    rerank: Arc<OnceLock<Arc<RerankEngine>>>,
}

/// The HTTP/JSON layer over the same handler objects the gRPC services use.
fn http_routes(
    config: &ServerConfig,
    handlers: Handlers,
    corpus: Arc<OnceLock<Arc<Corpus>>>,
    store_healthy: Arc<AtomicBool>,
    metrics: Arc<HttpMetrics>,
) -> Routes {
    let readiness = Arc::new(move || match corpus.get() {
        Some(_) if store_healthy.load(Ordering::Relaxed) => Readiness { ready: true, detail: String::new() },
        Some(corpus) => Readiness {
            ready: false,
            detail: format!("the {} store cannot be reached", corpus.store_description().kind),
        },
        None => Readiness { ready: false, detail: "the model and index are loading".into() },
    });
    let Handlers { embed, search, rerank, collections } = handlers;
    let upstream = Arc::new(InProcessUpstream::new(embed, search, rerank, collections, readiness));
    let settings = GatewaySettings { max_body_bytes: config.max_request_bytes, ..GatewaySettings::default() };
    Routes::from(embedwire_gateway_http::router_with_metrics(upstream, settings, metrics))
}

/// Loads the configured backend, opens the corpus, starts the job runner, and
/// reports SERVING. Returns the runner's task.
async fn load_and_install(
    config: ServerConfig,
    engine: Arc<EmbeddingEngine>,
    cells: Cells,
    health: HealthReporter,
    store_healthy: Arc<AtomicBool>,
    runner_shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>> {
    let started = std::time::Instant::now();
    let log_ready = |backend: &Backend| {
        let (model, dim) = (&backend.info().model_id, backend.info().dim);
        let elapsed_ms = started.elapsed().as_millis() as u64;
        tracing::info!(backend = config.backend.name(), %model, dim, elapsed_ms, "model ready");
    };
    // The store opens while the model loads when the model's name and dimension are
    // known without it (both take tens of milliseconds of a cold start).
    let (backend, (store, places)) = match model_identity(&config)? {
        Some((model_id, dim)) => {
            let load = async {
                let backend = load_backend(&config, engine.stats().clone()).await?;
                log_ready(&backend);
                Ok(backend)
            };
            tokio::try_join!(load, open_store(&config, &model_id, dim))?
        }
        None => {
            let backend = load_backend(&config, engine.stats().clone()).await?;
            log_ready(&backend);
            let opened = open_store(&config, &backend.info().model_id, backend.info().dim).await?;
            (backend, opened)
        }
    };
    engine.install(backend);
    let settings = corpus_settings(&config);
    let reranker_config = config.clone();
    let rerank_engine = engine.clone();
    let reranker = tokio::task::spawn_blocking(move || {
        let nice = reranker_config.model_nice;
        crate::thread_priority::on_lowered_thread(nice, || load_reranker(&reranker_config, rerank_engine))
    })
    .await
    .map_err(|e| Error::Config(format!("reranker loader: {e}")))??;
    let reranker = Arc::new(reranker);
    let _ = cells.rerank.set(reranker.clone());
    let corpus = Corpus::open(settings.clone(), store, engine.clone(), reranker.clone()).await?;
    let parts = CorpusParts {
        settings,
        engine,
        reranker,
        hnsw: config.index == IndexChoice::Hnsw,
        keyword_index: config.keyword_index,
    };
    let collections = Collections::open(corpus.clone(), places, parts, runner_shutdown.clone()).await?;
    let _ = cells.collections.set(collections);
    let _ = cells.corpus.set(corpus.clone());
    release_loading_memory();
    let runner = tokio::spawn(corpus.clone().run_jobs(runner_shutdown.clone()));
    set_health(&health, ServingStatus::Serving).await;
    tokio::spawn(follow_store_health(corpus, health, store_healthy, runner_shutdown));
    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "serving");
    Ok(runner)
}

/// The embedded store's settings from the flags.
fn embedded_settings(config: &ServerConfig) -> EmbeddedSettings {
    EmbeddedSettings {
        data_dir: config.data_dir.clone(),
        index_kind: match config.index {
            IndexChoice::Exact => IndexKind::Exact,
            IndexChoice::Hnsw => IndexKind::Hnsw,
        },
        index_params: IndexParams {
            m: config.hnsw_m,
            ef_construction: config.hnsw_ef_construction,
            // Without a given width, the index's default until the first pick.
            ef_search: config.hnsw_ef_search.unwrap_or(IndexParams::default().ef_search),
            ..IndexParams::default()
        },
        cache_bytes: config.store_cache_mib << 20,
        keyword_index: config.keyword_index,
        hnsw_target_recall: config.hnsw_ef_search.is_none().then_some(config.hnsw_target_recall),
    }
}

/// Opens the store `--store` names, for `model`'s vectors, with the places it keeps
/// named collections in. A store that cannot be reached or holds another model's
/// vectors fails the start with a clear message.
async fn open_store(
    config: &ServerConfig,
    model_id: &str,
    dim: usize,
) -> Result<(Arc<dyn CorpusStore>, Box<dyn CollectionPlaces>)> {
    let model_name = format!("{model_id} dim={dim}");
    match config.store {
        StoreChoice::Embedded => {
            let settings = embedded_settings(config);
            let places = EmbeddedPlaces::new(settings.clone(), model_name.clone(), dim);
            let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(&settings, &model_name, dim))
                .await
                .map_err(|e| Error::Config(format!("store loader: {e}")))??;
            Ok((Arc::new(store), Box::new(places)))
        }
        StoreChoice::Weaviate => {
            let settings = WeaviateSettings::from_config(config);
            let store = Arc::new(WeaviateStore::connect(settings, model_id, dim).await?);
            let places = WeaviatePlaces::new(store.clone()).await?;
            Ok((store, Box::new(places)))
        }
        StoreChoice::Postgres => {
            let settings = PostgresSettings::from_config(config);
            let store = PostgresStore::connect(settings, model_id, dim).await?;
            let places = PostgresPlaces::new(store.clone()).await?;
            Ok((store, Box::new(places)))
        }
    }
}

/// How often the server asks its store whether it answers.
const STORE_HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the health service and `/readyz` in step with the store: NOT_SERVING while
/// it cannot be reached, SERVING again when it returns (no restart needed).
async fn follow_store_health(
    corpus: Arc<Corpus>,
    health: HealthReporter,
    store_healthy: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut was_healthy = true;
    loop {
        tokio::select! {
            () = tokio::time::sleep(STORE_HEALTH_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let state = corpus.store_health().await;
        if state.healthy != was_healthy {
            if state.healthy {
                tracing::info!(store = corpus.store_description().kind, "store reachable again: serving");
            } else {
                tracing::warn!(store = corpus.store_description().kind, detail = %state.detail, "store unreachable: not serving");
            }
            store_healthy.store(state.healthy, Ordering::Relaxed);
            let status = if state.healthy { ServingStatus::Serving } else { ServingStatus::NotServing };
            set_health(&health, status).await;
            was_healthy = state.healthy;
        }
    }
}

fn corpus_settings(config: &ServerConfig) -> CorpusSettings {
    CorpusSettings {
        chunking: ChunkSettings {
            max_tokens: config.chunk_tokens,
            overlap_tokens: config.chunk_overlap_tokens,
            sentence_tolerance: config.chunk_sentence_tolerance_tokens,
        },
        max_documents_per_request: config.max_documents_per_request,
        max_metadata_bytes: config.max_metadata_bytes,
        max_top_k: config.max_top_k,
        max_stream_top_k: config.max_stream_top_k,
        max_queries_per_request: config.max_queries_per_request,
        ingest_batch_documents: config.ingest_batch_documents,
        rerank_candidates: config.rerank_candidates,
    }
}

/// The rerank engine: over the cross-encoder named by --rerank-model-dir, else over
/// the embedding model (bi-encoder). Blocking: loads and warms the cross-encoder.
fn load_reranker(config: &ServerConfig, engine: Arc<EmbeddingEngine>) -> Result<RerankEngine> {
    let stats = Arc::new(RerankStats::default());
    let scorer = match &config.rerank_model_dir {
        Some(dir) => {
            let environment = init_runtime(&config.ort_library())?;
            let loaded = CrossEncoder::load(environment, dir, config.onnx_settings(), config.precision)?;
            let model_id = config.rerank_model_id.clone().unwrap_or_else(|| directory_name(dir));
            tracing::info!(model = %model_id, dir = %dir.display(), precision = loaded.precision.name(), "cross-encoder loaded for reranking");
            let limits = BatchLimits {
                max_batch_tokens: config.rerank_max_batch_tokens,
                max_bulk_batch_tokens: config.max_bulk_batch_tokens.min(config.rerank_max_batch_tokens),
                ..local_model_config(config).batch
            };
            let bound = QueueBound::from_flag(config.max_queue_ms);
            Scorer::Cross(CrossEncoderScorer::start(loaded, model_id, limits, bound, stats.batches.clone())?)
        }
        None => Scorer::Bi(BiEncoderScorer::new(engine)),
    };
    let limits = RerankLimits {
        max_texts: config.max_rerank_texts,
        max_input_chars: config.max_input_chars,
        max_in_flight_pairs: config.max_in_flight_inputs,
    };
    Ok(RerankEngine::new(scorer, limits, stats))
}

/// The last component of `dir` (`ms-marco-MiniLM-L-6-v2`), the default model id.
fn directory_name(dir: &std::path::Path) -> String {
    let name = dir.canonicalize().ok().and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
    name.unwrap_or_else(|| dir.display().to_string())
}

async fn load_backend(config: &ServerConfig, stats: Arc<Stats>) -> Result<Backend> {
    match config.backend {
        BackendKind::Onnx => {
            let local = local_model_config(config);
            let nice = config.model_nice;
            let loaded = tokio::task::spawn_blocking(move || {
                crate::thread_priority::on_lowered_thread(nice, || LocalBackend::load(&local, stats))
            })
            .await
            .map_err(|e| Error::Config(format!("model loader: {e}")))??;
            Ok(Backend::Local(loaded))
        }
        BackendKind::Pseudo => {
            let model = PseudoModel { dim: config.pseudo_dim, max_tokens: PSEUDO_MAX_TOKENS };
            let info = ModelInfo {
                model_id: pseudo_model_id(config),
                dim: config.pseudo_dim,
                max_input_tokens: PSEUDO_MAX_TOKENS,
                pooling: Pooling::Mean,
                precision: Precision::Fp32,
            };
            Ok(Backend::Pseudo { model, info })
        }
        BackendKind::Remote => {
            let max_message = config.max_request_bytes.max(config.max_response_bytes);
            Ok(Backend::Remote(RemoteBackend::connect(&config.upstream, max_message).await?))
        }
    }
}

/// The served model's id and dimension, when known before it loads: from the model
/// directory's files (onnx) or the flags (pseudo); a remote backend's come from its
/// upstream.
fn model_identity(config: &ServerConfig) -> Result<Option<(String, usize)>> {
    match config.backend {
        BackendKind::Onnx => Ok(Some((config.model_id(), ModelFiles::read(&config.model_dir())?.hidden_size))),
        BackendKind::Pseudo => Ok(Some((pseudo_model_id(config), config.pseudo_dim))),
        BackendKind::Remote => Ok(None),
    }
}

fn pseudo_model_id(config: &ServerConfig) -> String {
    config.model_id.clone().unwrap_or_else(|| format!("pseudo-{}", config.pseudo_dim))
}

/// The pseudo backend truncates where the default model does.
const PSEUDO_MAX_TOKENS: usize = 256;

fn local_model_config(config: &ServerConfig) -> LocalModelConfig {
    LocalModelConfig {
        model_dir: config.model_dir(),
        model_id: config.model_id(),
        ort_library: config.ort_library(),
        onnx: config.onnx_settings(),
        batch_parts: config.batch_parts(),
        batch: BatchLimits {
            max_batch_size: config.max_batch_size,
            max_batch_tokens: config.max_batch_tokens,
            max_wait: config.max_batch_wait(),
            max_bulk_batch_tokens: config.max_bulk_batch_tokens,
        },
        queue_bound: QueueBound::from_flags(config.max_queue_ms, config.max_interactive_calls),
        precision: config.precision,
    }
}

/// Hands the memory that loading freed back to the kernel. ONNX Runtime reads the
/// graph file into memory, copies its weights out and frees the copy (90 MB for the
/// default fp32 model), and opening the store frees its scratch too, in pieces small
/// enough to stay in malloc's heaps, where only a heap's top is ever trimmed:
/// without this the idle server kept about 30 MiB more.
fn release_loading_memory() {
    crate::allocator::return_free_pages();
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    for name in SERVICE_NAMES {
        health.set_service_status(name, status).await;
    }
}

/// Unary requests over the size limit fail inside tonic before any handler runs, as
/// a trailers-only response with OUT_OF_RANGE; rewrite it to RESOURCE_EXHAUSTED.
fn rewrite_oversized_status<B>(mut response: http::Response<B>) -> http::Response<B> {
    if let Some(status) = tonic::Status::from_header_map(response.headers())
        && wire::is_oversized_message(status.code(), status.message())
    {
        let headers = response.headers_mut();
        headers.remove("grpc-message");
        let _ = wire::oversized_message_status(status).add_header(headers);
    }
    response
}
