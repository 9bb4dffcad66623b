//! embedwire-client: a typed async client for embedwire servers, and the
//! `embedwire` command line tool built on it (`src/bin/embedwire`).
//!
//! ```no_run
//! # async fn run() -> embedwire_client::Result<()> {
//! let client = embedwire_client::Client::connect(["http://127.0.0.1:50051"]).await?;
//! let embeddings = client.embed(["hello", "world"]).await?;
//! assert_eq!(embeddings.row(1).len(), embeddings.dim());
//! # Ok(()) }
//! ```
//!
//! Vectors are read in place from the response bytes when they are aligned (see
//! [`Embeddings`]); [`Client::embed_many`] embeds any number of texts in concurrent
//! batches and returns them in input order. Every unary call has a deadline, is
//! retried on UNAVAILABLE and RESOURCE_EXHAUSTED with jittered backoff, fails over
//! to another server, and read-only calls can be hedged ([`ClientConfig`]).
//!
//! # Layout
//! - [`config`]: [`ClientConfig`] and [`RetryPolicy`]: everything a client can be
//!   told, built by the caller (the library reads no environment).
//! - `transport`: an address to a tonic endpoint (TLS, keep-alive) and the
//!   API-key interceptor.
//! - `pool`: one channel per server, round robin with a cool-down for servers
//!   whose connection failed, or primary-first for stateful calls.
//! - `policy`: deadline, retries with backoff, failover and hedging around a call.
//! - `client`: [`Client`], connecting.
//! - [`embeddings`]: [`Embeddings`], zero-copy f32 rows (ndarray view with the
//!   `ndarray` feature).
//! - [`embed`]: Embed and bulk `embed_many`.
//! - [`rerank`]: Rerank (cross-encoder or bi-encoder, as the server has).
//! - [`search`], [`ingest`], [`jobs`], [`documents`]: the SearchService.
//! - [`info`]: Info, index stats and health.
//! - [`error`]: the one [`Error`] type.
//!
//! # Features
//! - `tls` (default): `https://` addresses, with a CA file or the system roots.
//! - `cli` (default): the `embedwire` and `embedwire-client-bench` binaries.
//! - `ndarray`: [`Embeddings::view`].

pub mod collections;
pub mod config;
pub mod documents;
pub mod embed;
pub mod embeddings;
pub mod error;
pub mod info;
pub mod ingest;
pub mod jobs;
pub mod rerank;
pub mod search;

mod client;
mod policy;
mod pool;
mod transport;

pub use client::Client;
pub use collections::{Collection, CollectionIndex, CollectionSettings};
pub use config::{ClientConfig, RetryPolicy};
pub use documents::{Documents, StoredDocument};
pub use embed::{BulkOptions, EmbedOptions, WireDtype};
pub use embeddings::Embeddings;
pub use error::{Error, Result, code_name};
pub use info::{HealthStatus, IndexStats, Limits, ServerHealth, ServerInfo};
pub use ingest::{Document, IngestReceipt, StreamReceipt};
pub use jobs::{Job, JobStatus};
pub use policy::CallStats;
pub use rerank::{Rank, RerankOptions, Reranked, Truncation};
pub use search::{ChunkSpan, Condition, Filter, Fusion, Hit, Query, SearchMode, SearchOptions};
/// The gRPC status codes [`Error::code`] returns.
pub use tonic::Code;
