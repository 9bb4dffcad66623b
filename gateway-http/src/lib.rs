//! The HTTP/JSON layer of embedwire: translates HTTP requests to the embedwire.v1
//! services. The same routes run in two deployments: inside embedwire-server on its
//! gRPC port ([`InProcessUpstream`], no network hop) and as the standalone
//! `embedwire-gateway` in front of one or more servers ([`GrpcUpstream`]).
//!
//! # Layout
//! - [`routes`]: the handlers (`v1`: the existing gateways' contract; `embed`: `/embed`;
//!   `openai`: `/v1/embeddings`; `health`; `docs`: OpenAPI, metrics, the search page)
//!   and [`router`], which assembles them.
//! - [`upstream`]: the trait the handlers call; [`in_process`] and [`grpc_upstream`]
//!   implement it.
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
pub use upstream::{Readiness, Upstream};
