//! The HTTP/JSON layer of embedwire: translates HTTP requests to the embedwire.v1
//! services. The same routes run in two deployments: inside embedwire-server on its
//! gRPC port ([`InProcessUpstream`], no network hop) and as the standalone
//! `embedwire-gateway` in front of one or more servers ([`GrpcUpstream`]).
//!
//! # Indexes
//! Each server keeps its documents in a store: `embedded` (its own files: one index
//! per server, unshared) or a shared one such as `weaviate` (one index that several
//! servers read and write). With per-server indexes, the standalone gateway sends
//! ingest and search to one server and fails over to the next, which is *another
//! index*: documents ingested before the failover are not found after it. Every
//! ingest, job and search answer therefore names its index and upstream
//! (`x-embedwire-index`, `x-embedwire-upstream`), and `/healthz` reports the store,
//! each upstream's index, and `degraded` when the index that held the data is
//! unreachable, or (after a failback) the answering index lacks documents another
//! upstream's index holds (`/readyz` then answers 503). Servers that share one index are
//! balanced instead, and losing one of them loses nothing.
//!
//! # Layout
//! - [`routes`]: the handlers (`v1`: the existing gateways' contract; `embed`: `/embed`;
//!   `openai`: `/v1/embeddings`; `rerank`: `/rerank`, `/v1/rerank`, `/v2/rerank` in
//!   the shapes of text-embeddings-inference, Cohere v1 / Jina and Cohere v2; `health`;
//!   `docs`: OpenAPI, metrics, the search page) and [`router`], which assembles them.
//! - [`upstream`]: the trait the handlers call, and what answers carry (the
//!   [`upstream::Origin`] of stateful answers, the [`upstream::HealthReport`]);
//!   [`in_process`] and [`grpc_upstream`] implement it.
//! - [`access`]: API keys (read-only and read-write) and per-key rate limits, one
//!   tower layer for every protocol on a port.
//! - [`json`]: the body extractor that names the field at fault.
//! - [`encoding`]: JSON floats, base64 and binary bodies from the wire's f32 bytes.
//! - [`error`]: gRPC status to HTTP status, and the JSON error shapes.
//! - [`metrics`]: request counters and latency histograms.
//! - [`state`]: handler state and settings.

pub mod access;
pub mod encoding;
pub mod error;
pub mod grpc_upstream;
pub mod in_process;
pub mod json;
pub mod metrics;
pub mod routes;
pub mod state;
pub mod upstream;

pub use error::ApiError;
pub use grpc_upstream::{GrpcUpstream, GrpcUpstreamSettings};
pub use in_process::InProcessUpstream;
pub use routes::docs::openapi_json;
pub use routes::{router, router_with_metrics};
pub use state::GatewaySettings;
pub use upstream::{HealthReport, Origin, Readiness, Served, Upstream};
