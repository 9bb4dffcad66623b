//! Every setting of the server: one clap struct, each flag with an env var twin.
//! `--help` is generated from the doc comments below.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Which implementation turns texts into vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// The ONNX model in --model-dir, run in-process by ONNX Runtime.
    Onnx,
    /// Deterministic hash vectors, no model: for development and for measuring the
    /// transport alone.
    Pseudo,
    /// Forward to other embedwire-server processes (--upstream): a thin front that
    /// scales apart from the model servers.
    Remote,
}

impl BackendKind {
    /// The name reported by the Info rpc.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Onnx => "onnx",
            BackendKind::Pseudo => "pseudo",
            BackendKind::Remote => "remote",
        }
    }
}

/// Which search index serves queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IndexChoice {
    /// Every chunk scored (SIMD); exact results.
    Exact,
    /// Hierarchical navigable small world graph: approximate, sub-linear.
    Hnsw,
}

/// Where the corpus keeps documents, vectors and jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreChoice {
    /// This server's own redb file in --data-dir and an in-memory index: one machine.
    Embedded,
    /// A Weaviate cluster (--weaviate-http, --weaviate-grpc) shared by any number of
    /// servers.
    Weaviate,
    /// A PostgreSQL database with pgvector (--postgres-url, --postgres-read-url)
    /// shared by any number of servers.
    Postgres,
}

/// How the PostgreSQL store keeps chunk vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PostgresVector {
    /// 4 bytes a dimension.
    Vector,
    /// 2 bytes a dimension: half the index size and faster at the same recall.
    Halfvec,
}

/// How many replicas of a shard must answer a Weaviate read or acknowledge a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum Consistency {
    One,
    Quorum,
    All,
}

/// embedwire-server: a gRPC embedding server with dynamic batching.
#[derive(Debug, Clone, Parser)]
#[command(name = "embedwire-server", version)]
pub struct ServerConfig {
    /// Address to listen on (gRPC, gRPC-web).
    #[arg(long, env = "EMBEDWIRE_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// Embedding backend.
    #[arg(long, env = "EMBEDWIRE_BACKEND", value_enum, default_value = "onnx")]
    pub backend: BackendKind,

    /// Directory for durable data: the document store (one redb file).
    #[arg(long, env = "EMBEDWIRE_DATA_DIR", default_value = "embedwire-data")]
    pub data_dir: PathBuf,

    /// Where `make setup` put the model and ONNX Runtime [default: ~/.cache/embedwire].
    #[arg(long, env = "EMBEDWIRE_CACHE")]
    pub cache_dir: Option<PathBuf>,

    /// Model directory: model.onnx, tokenizer.json and the usual config files
    /// (config.json, sentence_bert_config.json, 1_Pooling/config.json)
    /// [default: CACHE/models/all-MiniLM-L6-v2].
    #[arg(long, env = "EMBEDWIRE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,

    /// Model id reported to clients [default: read from the model directory].
    #[arg(long, env = "EMBEDWIRE_MODEL_ID")]
    pub model_id: Option<String>,

    /// The model's arithmetic: fp32 (vectors equal to sentence-transformers' to 1e-5),
    /// int8 (the quantized graph `model_int8.onnx` that the setup builds beside
    /// model.onnx: faster where the CPU has VNNI/AMX, cosine to fp32 about 0.99), or
    /// auto (int8 only on a CPU with VNNI or AMX int8 instructions and with an int8
    /// graph present, else fp32). Applies to the cross-encoder too when its directory
    /// has an int8 graph. Info and every response's metadata name the precision used.
    #[arg(long, env = "EMBEDWIRE_PRECISION", value_enum, default_value = "fp32")]
    pub precision: crate::model::precision::PrecisionChoice,

    /// ONNX Runtime shared library [default: CACHE/onnxruntime/lib/libonnxruntime.so].
    #[arg(long, env = "EMBEDWIRE_ORT_LIBRARY")]
    pub ort_library: Option<PathBuf>,

    /// Threads ONNX Runtime uses for one batch [default: the number of CPUs].
    #[arg(long, env = "EMBEDWIRE_INTRA_OP_THREADS")]
    pub intra_op_threads: Option<usize>,

    /// Batches of 8 inputs or more may run on this many single-threaded ONNX Runtime
    /// sessions side by side, each taking the batch's next chunk as it finishes one
    /// (sharing the graph's weights, a few MiB each), instead of whole on --intra-op-threads threads: on cores that other
    /// work also uses, the parts do not wait for one another's preempted threads
    /// (measured: 1.3 x the texts/s with one busy process beside the model on 2 cores),
    /// while on cores the model has to itself whole batches are ~10% faster. Which way
    /// each batch runs is chosen by which has been faster per token lately. 1 runs
    /// every batch whole [default: --intra-op-threads].
    #[arg(long, env = "EMBEDWIRE_BATCH_PARTS")]
    pub batch_parts: Option<usize>,

    /// When ONNX Runtime's threads spin for work instead of sleeping: within-runs
    /// (between the parallel sections of a batch, never after it: one short text
    /// embeds in 0.6x the time of never, measured, and no CPU is burnt between
    /// batches), never (least CPU), or always (also after each batch, ONNX Runtime's
    /// own default: steals the CPU that request handling needs on a small machine).
    /// A bare `--ort-spin` means always.
    #[arg(long, env = "EMBEDWIRE_ORT_SPIN", value_enum, default_value = "within-runs", num_args = 0..=1,
          default_missing_value = "always")]
    pub ort_spin: crate::model::onnx::Spinning,

    /// How much lower than the request handlers' the CPU priority of the models'
    /// threads is, as a nice increment (0-19; 0: the same). Under load the request
    /// handlers then run as soon as they wake, and the model gets all the CPU they
    /// leave: on 2 cores at 3 x capacity, refusals answered in 3.5-3.9 ms p99 against
    /// 5.5 ms at 0, goodput and closed-loop throughput alike. Set 0 where the model
    /// must not yield to other processes' work either.
    #[arg(long, env = "EMBEDWIRE_MODEL_NICE", default_value_t = 5, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub model_nice: i32,

    /// ONNX Runtime's memory arena: freed buffers stay reserved for the next batch.
    /// Without it every batch allocates afresh (measured: a third of a core in the
    /// kernel and ~30% fewer long texts/s), but memory falls back after a large batch.
    #[arg(long, env = "EMBEDWIRE_ORT_ARENA", default_value_t = true, action = clap::ArgAction::Set)]
    pub ort_arena: bool,

    /// Most inputs in one model batch.
    #[arg(long, env = "EMBEDWIRE_MAX_BATCH_SIZE", default_value_t = 64)]
    pub max_batch_size: usize,

    /// Most tokens in one model batch, padding included (batch size x longest input).
    /// ONNX Runtime's arena keeps the memory of the largest batch ever run, and
    /// attention's grows with batch x length squared: 4096 holds a full batch of
    /// 64 texts up to 64 tokens, and 16 of the longest (256), which already keep
    /// both cores busy.
    #[arg(long, env = "EMBEDWIRE_MAX_BATCH_TOKENS", default_value_t = 4096)]
    pub max_batch_tokens: usize,

    /// Most tokens in one batch of background work (ingestion), padding included.
    /// Interactive requests that arrive meanwhile wait for it, so it is kept small;
    /// small also bounds ONNX Runtime's memory arena, which keeps the peak of the
    /// largest batch (measured on a 3000-document ingest: 1024 instead of 2048 held
    /// 57 MiB less, at the same ingest rate: long texts fill the cores even 4 at a time).
    #[arg(long, env = "EMBEDWIRE_MAX_BULK_BATCH_TOKENS", default_value_t = 1024)]
    pub max_bulk_batch_tokens: usize,

    /// Longest the batcher waits for a batch to fill up to the company it expects (as
    /// large as the previous batch, or as many interactive inputs as were recently
    /// queued or running together), in microseconds; it never waits more than a quarter
    /// of the model time of the batch it waits for either. A lone client (batches of
    /// one) pays nothing; 0 never waits.
    #[arg(long, env = "EMBEDWIRE_MAX_BATCH_WAIT_US", default_value_t = 10_000)]
    pub max_batch_wait_us: u64,

    /// Replaces the default admission rule with a bound on expected queue time, in
    /// milliseconds: a new Embed (of at most 8 texts) or search is refused with
    /// RESOURCE_EXHAUSTED while the interactive tokens queued ahead of it times the
    /// model's recent time per token pass it; 0 turns every load bound off. Unset,
    /// the default refuses only real overload: an interactive call while 2 x
    /// --max-batch-size of them are already queued or running (a closed-loop client
    /// of up to that many callers is never refused), and a unary rerank call while
    /// 64 are on the cross-encoder. Bigger Embed calls and background ingestion take
    /// the bulk lane: never refused for load, slowed by it.
    #[arg(long, env = "EMBEDWIRE_MAX_QUEUE_MS")]
    pub max_queue_ms: Option<u64>,

    /// The default admission bound, set by hand: interactive calls (Embed of at most 8
    /// texts, search queries) queued or running at once; past it, RESOURCE_EXHAUSTED.
    /// A closed-loop client of up to this many callers is never refused; under an open
    /// loop past capacity, an accepted call waits for about this many calls ahead.
    /// Unset: 2 x --max-batch-size. --max-queue-ms, when given, replaces this rule.
    #[arg(long, env = "EMBEDWIRE_MAX_INTERACTIVE_CALLS")]
    pub max_interactive_calls: Option<usize>,

    /// Inputs admitted (queued or running) at once; past it, RESOURCE_EXHAUSTED. A
    /// memory bound, not a latency one: 64 closed-loop callers of 256 texts fit (a few
    /// tens of MB of token ids and vectors).
    #[arg(long, env = "EMBEDWIRE_MAX_IN_FLIGHT_INPUTS", default_value_t = 16384)]
    pub max_in_flight_inputs: usize,

    /// Most inputs in one Embed call.
    #[arg(long, env = "EMBEDWIRE_MAX_INPUTS_PER_REQUEST", default_value_t = 1024)]
    pub max_inputs_per_request: usize,

    /// Longest input, in Unicode characters (bounds tokenization work).
    #[arg(long, env = "EMBEDWIRE_MAX_INPUT_CHARS", default_value_t = 100_000)]
    pub max_input_chars: usize,

    /// Largest request message, in bytes; larger ones get RESOURCE_EXHAUSTED.
    #[arg(long, env = "EMBEDWIRE_MAX_REQUEST_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_request_bytes: usize,

    /// Largest response message, in bytes.
    #[arg(long, env = "EMBEDWIRE_MAX_RESPONSE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_response_bytes: usize,

    /// Requests of one EmbedStream worked on at once; the server reads no further
    /// ahead, so a slow reader slows the stream instead of filling memory.
    #[arg(long, env = "EMBEDWIRE_STREAM_READ_AHEAD", default_value_t = 8)]
    pub stream_read_ahead: usize,

    /// Upstream embedwire-server addresses for --backend remote, comma separated
    /// (http://host:port).
    #[arg(long, env = "EMBEDWIRE_UPSTREAM", value_delimiter = ',')]
    pub upstream: Vec<String>,

    /// Dimensions of the pseudo backend's vectors.
    #[arg(long, env = "EMBEDWIRE_PSEUDO_DIM", default_value_t = 384)]
    pub pseudo_dim: usize,

    /// Where documents, vectors and jobs live: embedded (this server's own file and
    /// in-memory index, the default), weaviate or postgres (shared by many servers).
    #[arg(long, env = "EMBEDWIRE_STORE", value_enum, default_value = "embedded")]
    pub store: StoreChoice,

    /// Weaviate: HTTP addresses of the cluster's nodes (schema and health calls),
    /// comma-separated, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "EMBEDWIRE_WEAVIATE_HTTP", value_delimiter = ',')]
    pub weaviate_http: Vec<String>,

    /// Weaviate: gRPC addresses (HOST:PORT) of the cluster's nodes (all data calls),
    /// comma-separated; calls rotate over them and skip a node that cannot be reached.
    #[arg(long, env = "EMBEDWIRE_WEAVIATE_GRPC", value_delimiter = ',')]
    pub weaviate_grpc: Vec<String>,

    /// Weaviate and PostgreSQL: the index's name; every server sharing an index uses
    /// the same one. Weaviate upper-cases its first letter (its rule for class
    /// names); PostgreSQL keeps the index in a schema of this name, lower-cased.
    #[arg(long, env = "EMBEDWIRE_COLLECTION", default_value = "embedwire")]
    pub collection: String,

    /// Weaviate: shards of a new collection [default: the number of nodes].
    #[arg(long, env = "EMBEDWIRE_SHARDS")]
    pub shards: Option<usize>,

    /// Weaviate: copies of each shard in a new collection [default: the number of
    /// nodes, at most 3].
    #[arg(long, env = "EMBEDWIRE_REPLICATION_FACTOR")]
    pub replication_factor: Option<usize>,

    /// Weaviate: replicas that must answer a search.
    #[arg(long, env = "EMBEDWIRE_READ_CONSISTENCY", value_enum, default_value = "ONE")]
    pub read_consistency: Consistency,

    /// Weaviate: replicas that must acknowledge a write (documents, jobs, deletes).
    #[arg(long, env = "EMBEDWIRE_WRITE_CONSISTENCY", value_enum, default_value = "QUORUM")]
    pub write_consistency: Consistency,

    /// Weaviate: deadline of one call to the cluster, in seconds.
    #[arg(long, env = "EMBEDWIRE_WEAVIATE_TIMEOUT_SECS", default_value_t = 10.0)]
    pub weaviate_timeout_secs: f64,

    /// Weaviate and PostgreSQL: how long a server holds a job before another may take
    /// it over when it stops renewing (it died), in seconds.
    #[arg(long, env = "EMBEDWIRE_JOB_LEASE_SECS", default_value_t = 15.0)]
    pub job_lease_secs: f64,

    /// PostgreSQL: the primary, as a URL (postgres://user:password@host:port/db); every
    /// write goes there. The database needs the pgvector extension (created if the
    /// user may); the index lives in the schema named by --collection (lower-cased).
    #[arg(long, env = "EMBEDWIRE_POSTGRES_URL")]
    pub postgres_url: Option<String>,

    /// PostgreSQL: replicas for searches and document reads, comma-separated URLs. A
    /// replica that fails or lags more than --postgres-max-replica-lag-secs is skipped
    /// and the primary reads instead.
    #[arg(long, env = "EMBEDWIRE_POSTGRES_READ_URL", value_delimiter = ',')]
    pub postgres_read_url: Vec<String>,

    /// PostgreSQL: how chunk vectors are stored and indexed, fixed when the index is
    /// created: halfvec (2 bytes a dimension) or vector (4).
    #[arg(long, env = "EMBEDWIRE_POSTGRES_VECTOR", value_enum, default_value = "halfvec")]
    pub postgres_vector: PostgresVector,

    /// PostgreSQL: connections per database server.
    #[arg(long, env = "EMBEDWIRE_POSTGRES_POOL_SIZE", default_value_t = 16)]
    pub postgres_pool_size: usize,

    /// PostgreSQL: deadline of one statement (and of getting a connection), in seconds.
    #[arg(long, env = "EMBEDWIRE_POSTGRES_TIMEOUT_SECS", default_value_t = 10.0)]
    pub postgres_timeout_secs: f64,

    /// PostgreSQL: hnsw.ef_search of searches (higher: better recall, slower).
    #[arg(long, env = "EMBEDWIRE_POSTGRES_EF_SEARCH", default_value_t = 100)]
    pub postgres_ef_search: usize,

    /// PostgreSQL: keyword search reads every posting of a query's rarest terms while
    /// they hold fewer than this many together, and looks its other (common) terms up
    /// only in the best chunks those found (higher: closer to scoring every posting,
    /// slower on common words; 0: every posting of every term; see README "Keyword and
    /// hybrid search").
    #[arg(long, env = "EMBEDWIRE_POSTGRES_KEYWORD_RARE_POSTINGS", default_value_t = 2000)]
    pub postgres_keyword_rare_postings: u64,

    /// PostgreSQL: a replica further behind the primary than this is not read from.
    #[arg(long, env = "EMBEDWIRE_POSTGRES_MAX_REPLICA_LAG_SECS", default_value_t = 2.0)]
    pub postgres_max_replica_lag_secs: f64,

    /// Embedded store: keep a BM25 keyword index (in <data-dir>/keyword) for keyword
    /// and hybrid search. false saves its disk and indexing time on a server that
    /// only searches by vector; keyword and hybrid searches are then refused.
    #[arg(long, env = "EMBEDWIRE_KEYWORD_INDEX", default_value_t = true, action = clap::ArgAction::Set)]
    pub keyword_index: bool,

    /// Search index: exact (exhaustive SIMD scan) or hnsw (approximate, for large
    /// corpora).
    #[arg(long, env = "EMBEDWIRE_INDEX", value_enum, default_value = "exact")]
    pub index: IndexChoice,

    /// HNSW: links per node.
    #[arg(long, env = "EMBEDWIRE_HNSW_M", default_value_t = 16)]
    pub hnsw_m: usize,

    /// HNSW: candidate list size while building.
    #[arg(long, env = "EMBEDWIRE_HNSW_EF_CONSTRUCTION", default_value_t = 128)]
    pub hnsw_ef_construction: usize,

    /// HNSW: candidate list size while searching (higher: better recall, slower);
    /// fixes it, instead of picking it by --hnsw-target-recall.
    #[arg(long, env = "EMBEDWIRE_HNSW_EF_SEARCH")]
    pub hnsw_ef_search: Option<usize>,

    /// HNSW (embedded store): the recall@10 the search width is picked for, measured
    /// on a sample of the index's own vectors at start and whenever the index has
    /// grown or shrunk by a quarter; Info, GetIndexStats and /metrics show the width
    /// and the measured recall.
    #[arg(long, env = "EMBEDWIRE_HNSW_TARGET_RECALL", default_value_t = 0.99)]
    pub hnsw_target_recall: f64,

    /// Most tokens per chunk, special tokens excluded (capped at the model's limit).
    #[arg(long, env = "EMBEDWIRE_CHUNK_TOKENS", default_value_t = 200)]
    pub chunk_tokens: usize,

    /// Tokens consecutive chunks share.
    #[arg(long, env = "EMBEDWIRE_CHUNK_OVERLAP_TOKENS", default_value_t = 32)]
    pub chunk_overlap_tokens: usize,

    /// How many tokens short of --chunk-tokens a chunk may end so that it ends at a
    /// sentence boundary (and its overlap begins at one); 0 (the default) cuts between
    /// words only. Off by default: on SciFact's train split it raised vector nDCG@10
    /// (+0.004 at 16) but lowered hybrid's (-0.002 at 16, -0.006 at 40). Applies to
    /// documents ingested from then on: stored chunks stay as they are until their
    /// document is ingested again.
    #[arg(long, env = "EMBEDWIRE_CHUNK_SENTENCE_TOLERANCE_TOKENS", default_value_t = 0)]
    pub chunk_sentence_tolerance_tokens: usize,

    /// Page cache of the document store, in MiB. Small: vectors are in memory anyway,
    /// and pages the store reads again come from the operating system's file cache,
    /// which the kernel can reclaim (a 3000-document ingest held 12 MiB less with 16
    /// than with 64, at the same speeds).
    #[arg(long, env = "EMBEDWIRE_STORE_CACHE_MIB", default_value_t = 16)]
    pub store_cache_mib: usize,

    /// Documents indexed per commit.
    #[arg(long, env = "EMBEDWIRE_INGEST_BATCH_DOCUMENTS", default_value_t = 64)]
    pub ingest_batch_documents: usize,

    /// Most documents per Ingest call or IngestStream message.
    #[arg(long, env = "EMBEDWIRE_MAX_DOCUMENTS_PER_REQUEST", default_value_t = 1000)]
    pub max_documents_per_request: usize,

    /// Most bytes of metadata (keys plus values) per document.
    #[arg(long, env = "EMBEDWIRE_MAX_METADATA_BYTES", default_value_t = 16384)]
    pub max_metadata_bytes: usize,

    /// Most hits per query of Search.
    #[arg(long, env = "EMBEDWIRE_MAX_TOP_K", default_value_t = 1000)]
    pub max_top_k: usize,

    /// Most hits per query of SearchStream.
    #[arg(long, env = "EMBEDWIRE_MAX_STREAM_TOP_K", default_value_t = 100_000)]
    pub max_stream_top_k: usize,

    /// Most queries per Search call.
    #[arg(long, env = "EMBEDWIRE_MAX_QUERIES_PER_REQUEST", default_value_t = 64)]
    pub max_queries_per_request: usize,

    /// Cross-encoder model directory (model.onnx with a `logits` output, tokenizer.json,
    /// config.json) that RerankService and search's rerank stage score with. Without
    /// one, rerank scores by the embedding model's cosine similarity (bi-encoder).
    #[arg(long, env = "EMBEDWIRE_RERANK_MODEL_DIR")]
    pub rerank_model_dir: Option<PathBuf>,

    /// The cross-encoder's id, as Info and rerank responses name it; default: the
    /// name of --rerank-model-dir.
    #[arg(long, env = "EMBEDWIRE_RERANK_MODEL_ID")]
    pub rerank_model_id: Option<String>,

    /// Candidates search's rerank stage re-scores per query.
    #[arg(long, env = "EMBEDWIRE_RERANK_CANDIDATES", default_value_t = 50)]
    pub rerank_candidates: usize,

    /// Most texts in one Rerank call (Cohere's limit); more is OUT_OF_RANGE (HTTP 413).
    #[arg(long, env = "EMBEDWIRE_MAX_RERANK_TEXTS", default_value_t = 1000)]
    pub max_rerank_texts: usize,

    /// Most tokens in one cross-encoder batch, padding included. Smaller than the
    /// embedding model's budget: pairs are long, and on 2 cores the default MiniLM-size
    /// cross-encoder cost 10-25% more per pair in batches of 34 pairs (4096 tokens)
    /// than of 20 (rerank-bench); 2048 keeps a batch at about one 20-text call.
    #[arg(long, env = "EMBEDWIRE_RERANK_MAX_BATCH_TOKENS", default_value_t = 2048)]
    pub rerank_max_batch_tokens: usize,

    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM.
    #[arg(long, env = "EMBEDWIRE_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,

    /// API keys with full access, comma-separated (at least 16 characters each). With
    /// any key configured, every call but health, readiness (and metrics, unless
    /// --metrics-require-key) needs `authorization: Bearer KEY`.
    #[arg(long, env = "EMBEDWIRE_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    pub api_keys: Vec<String>,

    /// API keys that can embed and search but not ingest or delete, comma-separated.
    #[arg(long, env = "EMBEDWIRE_READ_ONLY_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    pub read_only_api_keys: Vec<String>,

    /// A file of API keys, one per line: `KEY` (full access) or `KEY read-only`.
    #[arg(long, env = "EMBEDWIRE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Require an API key for /metrics too (when keys are configured).
    #[arg(long, env = "EMBEDWIRE_METRICS_REQUIRE_KEY")]
    pub metrics_require_key: bool,

    /// Requests per second allowed per API key (token bucket); past it,
    /// RESOURCE_EXHAUSTED / HTTP 429. Unlimited when unset. Needs API keys.
    #[arg(long, env = "EMBEDWIRE_RATE_LIMIT_RPS")]
    pub rate_limit_rps: Option<f64>,

    /// Requests a key may send at once before the rate applies [default: one second's worth].
    #[arg(long, env = "EMBEDWIRE_RATE_LIMIT_BURST")]
    pub rate_limit_burst: Option<f64>,

    /// PEM certificate chain: serve TLS (gRPC, gRPC-web and HTTP) instead of plaintext.
    #[arg(long, env = "EMBEDWIRE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, env = "EMBEDWIRE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Concurrent HTTP/2 streams (calls) per connection.
    #[arg(long, env = "EMBEDWIRE_MAX_CONCURRENT_STREAMS", default_value_t = 256)]
    pub max_concurrent_streams: u32,

    /// Deadline in seconds for calls that bring none (grpc-timeout, when sent, wins).
    #[arg(long, env = "EMBEDWIRE_REQUEST_TIMEOUT_SECS")]
    pub request_timeout_secs: Option<f64>,

    /// Seconds between HTTP/2 keepalive pings; a peer that does not answer within the
    /// same time is disconnected, so dead connections do not hold streams.
    #[arg(long, env = "EMBEDWIRE_HTTP2_KEEPALIVE_SECS", default_value_t = 60)]
    pub http2_keepalive_secs: u64,

    /// Close connections older than this many seconds (after a grace period), so that
    /// clients rebalance across servers. Unlimited when unset.
    #[arg(long, env = "EMBEDWIRE_MAX_CONNECTION_AGE_SECS")]
    pub max_connection_age_secs: Option<u64>,
}

/// The model's name in the cache, used by the default --model-dir.
const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// The default model's id; its config.json names the base model it was trained from.
const DEFAULT_MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

impl ServerConfig {
    /// The cache directory `make setup` fills.
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir.clone().unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
            home.join(".cache/embedwire")
        })
    }

    /// The model directory, explicit or the default model in the cache.
    pub fn model_dir(&self) -> PathBuf {
        self.model_dir.clone().unwrap_or_else(|| self.cache_dir().join("models").join(DEFAULT_MODEL_NAME))
    }

    /// The model id: explicit, the default model's, or the model directory's name.
    pub fn model_id(&self) -> String {
        if let Some(id) = &self.model_id {
            return id.clone();
        }
        match &self.model_dir {
            None => DEFAULT_MODEL_ID.to_string(),
            Some(dir) => {
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string())
            }
        }
    }

    /// The ONNX Runtime shared library, explicit or the one in the cache.
    pub fn ort_library(&self) -> PathBuf {
        self.ort_library.clone().unwrap_or_else(|| self.cache_dir().join("onnxruntime/lib/libonnxruntime.so"))
    }

    /// Threads for one model batch.
    pub fn intra_op_threads(&self) -> usize {
        self.intra_op_threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
    }

    /// Parts a large batch of the embedding model runs as (1: whole).
    pub fn batch_parts(&self) -> usize {
        self.batch_parts.unwrap_or_else(|| self.intra_op_threads())
    }

    /// How ONNX Runtime runs models (the embedding model and the cross-encoder).
    pub fn onnx_settings(&self) -> crate::model::onnx::OnnxSettings {
        crate::model::onnx::OnnxSettings {
            intra_op_threads: self.intra_op_threads(),
            spinning: self.ort_spin,
            arena: self.ort_arena,
        }
    }

    /// The batcher's longest wait for a batch to fill.
    pub fn max_batch_wait(&self) -> Duration {
        Duration::from_micros(self.max_batch_wait_us)
    }

    /// The grace period for in-flight work at shutdown.
    /// The access rules: API keys, the metrics setting and the per-key rate.
    pub fn access_policy(&self) -> Result<embedwire_gateway_http::access::AccessPolicy, String> {
        use embedwire_gateway_http::access::{AccessPolicy, ApiKeys, RateLimit};
        let keys = ApiKeys::load(&self.api_keys, &self.read_only_api_keys, self.api_keys_file.as_deref())?;
        let rate_limit = self
            .rate_limit_rps
            .map(|rps| RateLimit::new(rps, self.rate_limit_burst.unwrap_or(rps.max(1.0))))
            .transpose()
            .map_err(|e| format!("--rate-limit-rps: {e}"))?;
        Ok(AccessPolicy { keys, metrics_open: !self.metrics_require_key, rate_limit })
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// Rejects settings that cannot work, with a message naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("--max-batch-size", self.max_batch_size),
            ("--max-batch-tokens", self.max_batch_tokens),
            ("--max-bulk-batch-tokens", self.max_bulk_batch_tokens),
            ("--max-in-flight-inputs", self.max_in_flight_inputs),
            ("--max-inputs-per-request", self.max_inputs_per_request),
            ("--max-input-chars", self.max_input_chars),
            ("--max-request-bytes", self.max_request_bytes),
            ("--max-response-bytes", self.max_response_bytes),
            ("--stream-read-ahead", self.stream_read_ahead),
            ("--pseudo-dim", self.pseudo_dim),
            ("--chunk-tokens", self.chunk_tokens),
            ("--ingest-batch-documents", self.ingest_batch_documents),
            ("--max-documents-per-request", self.max_documents_per_request),
            ("--max-top-k", self.max_top_k),
            ("--max-stream-top-k", self.max_stream_top_k),
            ("--max-queries-per-request", self.max_queries_per_request),
            ("--rerank-candidates", self.rerank_candidates),
            ("--max-rerank-texts", self.max_rerank_texts),
            ("--rerank-max-batch-tokens", self.rerank_max_batch_tokens),
            ("--hnsw-m", self.hnsw_m),
            ("--hnsw-ef-construction", self.hnsw_ef_construction),
            ("--hnsw-ef-search", self.hnsw_ef_search.unwrap_or(1)),
            ("--max-interactive-calls", self.max_interactive_calls.unwrap_or(1)),
        ];
        if let Some((flag, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        if !(self.hnsw_target_recall > 0.0 && self.hnsw_target_recall <= 1.0) {
            return Err(format!("--hnsw-target-recall must be in (0, 1], not {}", self.hnsw_target_recall));
        }
        if self.intra_op_threads == Some(0) {
            return Err("--intra-op-threads must be at least 1".into());
        }
        if self.batch_parts == Some(0) {
            return Err("--batch-parts must be at least 1 (1 runs every batch whole)".into());
        }
        if self.max_inputs_per_request > self.max_in_flight_inputs {
            return Err("--max-inputs-per-request cannot exceed --max-in-flight-inputs".into());
        }
        if self.chunk_overlap_tokens >= self.chunk_tokens {
            return Err("--chunk-overlap-tokens must be less than --chunk-tokens".into());
        }
        if let Some(rps) = self.rate_limit_rps
            && !(rps.is_finite() && rps > 0.0)
        {
            return Err("--rate-limit-rps must be a positive number".into());
        }
        if let Some(burst) = self.rate_limit_burst
            && !(burst.is_finite() && burst >= 1.0)
        {
            return Err("--rate-limit-burst must be at least 1".into());
        }
        if let Some(timeout) = self.request_timeout_secs
            && !(timeout.is_finite() && timeout > 0.0)
        {
            return Err("--request-timeout-secs must be a positive number".into());
        }
        if self.max_concurrent_streams == 0 || self.http2_keepalive_secs == 0 {
            return Err("--max-concurrent-streams and --http2-keepalive-secs must be at least 1".into());
        }
        if self.rate_limit_rps.is_some()
            && self.api_keys.is_empty()
            && self.read_only_api_keys.is_empty()
            && self.api_keys_file.is_none()
        {
            return Err("--rate-limit-rps limits each API key: configure keys (--api-keys, ...) too".into());
        }
        if self.store != StoreChoice::Embedded {
            if self.collection.is_empty()
                || !self.collection.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || !self.collection.starts_with(|c: char| c.is_ascii_alphabetic())
            {
                return Err(format!("--collection {:?} must be a letter then letters, digits or _", self.collection));
            }
            if !(self.job_lease_secs.is_finite() && self.job_lease_secs >= 1.0) {
                return Err("--job-lease-secs must be at least 1".into());
            }
        }
        if self.store == StoreChoice::Postgres {
            let Some(url) = &self.postgres_url else {
                return Err("--store postgres needs --postgres-url (postgres://user@host:port/database)".into());
            };
            for (flag, url) in std::iter::once(("--postgres-url", url))
                .chain(self.postgres_read_url.iter().map(|u| ("--postgres-read-url", u)))
            {
                if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                    return Err(format!("{flag} must be a URL like postgres://user@127.0.0.1:5432/db"));
                }
            }
            if self.postgres_pool_size == 0 || !(1..=1000).contains(&self.postgres_ef_search) {
                return Err("--postgres-pool-size must be at least 1 and --postgres-ef-search 1 to 1000".into());
            }
            if !(self.postgres_timeout_secs.is_finite() && self.postgres_timeout_secs > 0.0)
                || !(self.postgres_max_replica_lag_secs.is_finite() && self.postgres_max_replica_lag_secs >= 0.0)
            {
                return Err("--postgres-timeout-secs and --postgres-max-replica-lag-secs must be positive".into());
            }
        }
        if self.store == StoreChoice::Weaviate {
            if self.weaviate_http.is_empty() || self.weaviate_grpc.is_empty() {
                return Err("--store weaviate needs --weaviate-http and --weaviate-grpc addresses".into());
            }
            if let Some(bad) =
                self.weaviate_http.iter().find(|url| !url.starts_with("http://") && !url.starts_with("https://"))
            {
                return Err(format!("--weaviate-http {bad:?} must be a URL like http://127.0.0.1:8080"));
            }
            if let Some(bad) = self.weaviate_grpc.iter().find(|a| a.contains("://") || !a.contains(':')) {
                return Err(format!("--weaviate-grpc {bad:?} must be HOST:PORT"));
            }
            if self.shards == Some(0) || self.replication_factor == Some(0) {
                return Err("--shards and --replication-factor must be at least 1".into());
            }
            if !(self.weaviate_timeout_secs.is_finite() && self.weaviate_timeout_secs > 0.0) {
                return Err("--weaviate-timeout-secs must be a positive number".into());
            }
        }
        if self.backend == BackendKind::Remote && self.upstream.is_empty() {
            return Err("--backend remote needs at least one --upstream address".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::ServerConfig;
    use crate::model::onnx::Spinning;

    fn config(args: &[&str]) -> ServerConfig {
        ServerConfig::try_parse_from(std::iter::once("embedwire-server").chain(args.iter().copied())).unwrap()
    }

    fn spinning(args: &[&str]) -> Spinning {
        config(args).ort_spin
    }

    #[test]
    fn ort_spin_defaults_to_within_runs_and_keeps_its_earlier_spellings() {
        assert_eq!(spinning(&[]), Spinning::WithinRuns);
        assert_eq!(spinning(&["--ort-spin=never"]), Spinning::Never);
        // Before it took a value, `--ort-spin` alone meant spinning always, and the variable took true/false.
        assert_eq!(spinning(&["--ort-spin"]), Spinning::Always);
        assert_eq!(spinning(&["--ort-spin=true"]), Spinning::Always);
        assert_eq!(spinning(&["--ort-spin=false"]), Spinning::Never);
    }

    #[test]
    fn batches_split_into_as_many_parts_as_intra_op_threads_unless_told() {
        assert_eq!(config(&["--intra-op-threads=2"]).batch_parts(), 2);
        assert_eq!(config(&["--intra-op-threads=4"]).batch_parts(), 4);
        assert_eq!(config(&["--intra-op-threads=4", "--batch-parts=1"]).batch_parts(), 1);
        let none = config(&["--batch-parts=0"]).validate().unwrap_err();
        assert!(none.contains("--batch-parts"), "{none}");
    }

    #[test]
    fn the_interactive_call_bound_is_never_zero() {
        assert!(config(&["--max-interactive-calls=128"]).validate().is_ok());
        let zero = config(&["--max-interactive-calls=0"]).validate().unwrap_err();
        assert!(zero.contains("--max-interactive-calls"), "{zero}");
    }
}
