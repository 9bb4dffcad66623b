//! embedwire-server: a gRPC embedding server. Texts come in over gRPC (or gRPC-web),
//! concurrent requests share model batches, and vectors go back as raw little-endian
//! bytes.
//!
//! # Layout
//! - [`config`]: every setting, as clap flags with env twins.
//! - [`server`]: assembles and runs the server on a bound listener.
//! - [`service`]: the gRPC handlers, thin over the engine.
//! - [`wire`]: conversions between `embedwire.v1` messages and domain types, and the
//!   one mapping from [`Error`] to a gRPC status.
//! - [`corpus`]: the core of search: chunking, jobs, search planning.
//! - [`collections`]: separate indexes on one server, each a corpus over its own store.
//! - [`rerank`]: the rerank engine and its scorers (cross-encoder, bi-encoder).
//! - [`store`]: the storage seam and its engines (embedded redb + index, Weaviate).
//! - [`index`]: vector indexes (exact SIMD scan, HNSW).
//! - [`engine`]: the request pipeline: validation, admission, backend, options.
//! - [`admission`]: the bound on in-flight inputs (RESOURCE_EXHAUSTED past it).
//! - [`work_ahead`]: the expected wait for the model, for admission by queue time.
//! - [`lanes`]: interactive or bulk lane per call, and the queue-time bound.
//! - [`backend`]: onnx (local model), pseudo (hash vectors) and remote (upstreams).
//! - [`batcher`]: dynamic batching under a token budget on the model thread.
//! - [`model`]: model files, tokenizer, ONNX Runtime, pooling, pseudo vectors.
//! - [`stats`]: counters of what the server did.
//! - [`metrics`]: the server's metrics, a collector in the HTTP layer's Prometheus
//!   registry.
//! - [`error`]: the error type.
//! - [`allocator`]: handing freed memory back to the kernel.

pub mod admission;
pub mod allocator;
pub mod backend;
pub mod batcher;
pub mod collections;
pub mod config;
pub mod corpus;
pub mod engine;
pub mod error;
pub mod index;
pub mod lanes;
pub mod metrics;
pub mod model;
pub mod rerank;
pub mod server;
pub mod service;
pub mod split_choice;
pub mod stats;
pub mod store;
pub mod thread_priority;
pub mod tls;
pub mod web_dispatch;
pub mod wire;
pub mod work_ahead;

pub use config::ServerConfig;
pub use error::{Error, Result};
pub use server::EmbedServer;
