//! gRPC service implementations: thin handlers that convert with `wire` and call the
//! engine.
//!
//! # Layout
//! - [`embed`]: `embedwire.v1.EmbedService` (Embed, EmbedStream, Tokenize, Info).
//! - [`embed_zero_copy`]: unary Embed framed by hand, so the vectors are not copied.
//! - [`rerank`]: `embedwire.v1.RerankService` (Rerank, RerankStream).
//! - [`search`]: `embedwire.v1.SearchService` (ingest, jobs, documents, search).

pub mod embed;
pub mod embed_zero_copy;
pub mod rerank;
pub mod search;
